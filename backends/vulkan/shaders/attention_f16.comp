#version 450
#extension GL_GOOGLE_include_directive : require
// Attention over an f16 KV cache (the shader is attention.glsl).
#define KV_F16 1
#include "attention.glsl"
