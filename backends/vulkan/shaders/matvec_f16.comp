#version 450
#extension GL_GOOGLE_include_directive : require
// C[m x n] = A[m x k] * W^T with W [n x k] in IEEE half, read as 32-bit
// words at a byte offset (w_off, even). Activations are rounded to half
// first, as llama.cpp does where they meet F16 weights. Tiles of R rows of
// W and T rows of A (weight_tiles.glsl): each weight is read once for T
// rows of A.
//
// With WEIGHTS_F32 (the matvec_f32w pipelines) W holds floats (w_off a
// multiple of 4) and activations are taken as they are: F32 weights get
// the tiles' property too, a row's bits whatever rows share its product
// (a decode batch, a speculative step's draft tokens).

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) readonly buffer buf_w { uint w[]; };
layout(set = 0, binding = 2) writeonly buffer buf_c { float c[]; };

layout(push_constant) uniform params {
  uint a_off; // elements
  uint w_off; // bytes
  uint c_off; // elements
  uint m;
  uint n;
  uint k;
} p;

#include "half.glsl"
#include "weight_tiles.glsl"

#ifdef WEIGHTS_F32
const uint WEIGHT_BYTES = 4u;
float weight(uint byte_addr) { return uintBitsToFloat(w[byte_addr >> 2u]); }
float activation(float x) { return x; }
#else
const uint WEIGHT_BYTES = 2u;
float weight(uint byte_addr) {
  vec2 pair = unpackHalf2x16(w[byte_addr >> 2u]);
  return (byte_addr & 2u) != 0u ? pair.y : pair.x;
}
float activation(float x) { return half_round(x); }
#endif

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint row_bytes = p.k * WEIGHT_BYTES;
  for (uint j0 = gl_WorkGroupID.x * R; j0 < p.n; j0 += gl_NumWorkGroups.x * R) {
    uint rows = min(R, p.n - j0);
    for (uint t0 = 0u; t0 + T <= p.m; t0 += T) {
      float acc[R * T];
      for (uint q = 0u; q < R * T; ++q)
        acc[q] = 0.0;
      for (uint i = tid; i < p.k; i += WG) {
        float x[T];
        for (uint t = 0u; t < T; ++t)
          x[t] = activation(a[p.a_off + (t0 + t) * p.k + i]);
        uint wb = p.w_off + j0 * row_bytes + WEIGHT_BYTES * i;
        for (uint r = 0u; r < rows; ++r) {
          float wr = weight(wb + r * row_bytes);
          for (uint t = 0u; t < T; ++t)
            acc[t * R + r] += wr * x[t];
        }
      }
      store_tile(acc, tid, j0, rows, t0);
    }
  }
}
