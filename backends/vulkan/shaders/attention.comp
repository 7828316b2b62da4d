#version 450
#extension GL_GOOGLE_include_directive : require
// Attention over an f32 KV cache (the shader is attention.glsl).
#include "attention.glsl"
