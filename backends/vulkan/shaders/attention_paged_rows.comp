#version 450
#extension GL_GOOGLE_include_directive : require
// A decode batch's attention over an f32 KV cache in blocks, every query
// row one token of its own sequence with its own position and table (the
// shader is attention.glsl).
#define PAGED 1
#define ROWS 1
#include "attention.glsl"
