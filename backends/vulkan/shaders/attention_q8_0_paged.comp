#version 450
#extension GL_GOOGLE_include_directive : require
// Attention over a q8_0 KV cache in blocks found through a table (the
// shader is attention.glsl).
#define KV_Q8 1
#define PAGED 1
#include "attention.glsl"
