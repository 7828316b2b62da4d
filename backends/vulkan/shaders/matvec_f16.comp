#version 450
#extension GL_GOOGLE_include_directive : require
// C[m x n] = A[m x k] * W^T with W [n x k] in IEEE half, read as 32-bit
// words at a byte offset (w_off, even). Activations are rounded to half
// first, as llama.cpp does where they meet F16 weights. A workgroup owns R
// rows of W at a time (grid-stride) and walks the m rows of A, so each
// weight is read once per row of A from cache. Sums reduce in shared memory.

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

const uint WG = 64u;
const uint R = 4u;

shared float red[R * WG];

#include "half.glsl"

float weight(uint byte_addr) {
  vec2 pair = unpackHalf2x16(w[byte_addr >> 2u]);
  return (byte_addr & 2u) != 0u ? pair.y : pair.x;
}

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint row_bytes = p.k * 2u;
  for (uint j0 = gl_WorkGroupID.x * R; j0 < p.n; j0 += gl_NumWorkGroups.x * R) {
    uint rows = min(R, p.n - j0);
    for (uint t = 0u; t < p.m; ++t) {
      float acc[R];
      for (uint r = 0u; r < R; ++r)
        acc[r] = 0.0;
      uint xb = p.a_off + t * p.k;
      for (uint i = tid; i < p.k; i += WG) {
        float x = half_round(a[xb + i]);
        uint wb = p.w_off + j0 * row_bytes + 2u * i;
        for (uint r = 0u; r < rows; ++r)
          acc[r] += weight(wb + r * row_bytes) * x;
      }
      for (uint r = 0u; r < R; ++r)
        red[r * WG + tid] = acc[r];
      barrier();
      for (uint h = WG / 2u; h > 0u; h >>= 1u) {
        if (tid < h)
          for (uint r = 0u; r < R; ++r)
            red[r * WG + tid] += red[r * WG + tid + h];
        barrier();
      }
      if (tid < rows)
        c[p.c_off + t * p.n + j0 + tid] = red[tid * WG];
      barrier();
    }
  }
}
