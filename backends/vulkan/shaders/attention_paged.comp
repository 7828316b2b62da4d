#version 450
#extension GL_GOOGLE_include_directive : require
// Attention over an f32 KV cache in blocks found through a table (the
// shader is attention.glsl).
#define PAGED 1
#include "attention.glsl"
