#version 450
#extension GL_GOOGLE_include_directive : require
// Attention over a q8_0 KV cache (the shader is attention.glsl): K and V
// decoded from their Q8_0 blocks (q * d), Q in f32.
#define KV_Q8 1
#include "attention.glsl"
