#version 450
#extension GL_GOOGLE_include_directive : require
// C[m x n] = A[m x k] * W^T with W [n x k] in GGUF's Q8_0: each row is k/32
// blocks of 34 bytes (an IEEE half scale d, then 32 int8 q), read as 32-bit
// words at a byte offset (w_off, even). As in llama.cpp, every 32-element
// block of a row of A is quantized to Q8_0 too (d = max|x| / 127, q rounded
// half away from zero, d rounded to half) and the block's dot product is an
// integer sum scaled by both d. A workgroup owns R rows of W at a time
// (grid-stride); an invocation quantizes a block of A once for all R rows.

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

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint nb = p.k / 32u;
  uint row_bytes = nb * 34u;
  for (uint j0 = gl_WorkGroupID.x * R; j0 < p.n; j0 += gl_NumWorkGroups.x * R) {
    uint rows = min(R, p.n - j0);
    for (uint t = 0u; t < p.m; ++t) {
      float acc[R];
      for (uint r = 0u; r < R; ++r)
        acc[r] = 0.0;
      for (uint b = tid; b < nb; b += WG) {
        uint xb = p.a_off + t * p.k + b * 32u;
        float amax = 0.0;
        for (uint i = 0u; i < 32u; ++i)
          amax = max(amax, abs(a[xb + i]));
        float d = amax / 127.0;
        float id = d != 0.0 ? 1.0 / d : 0.0;
        float dx = half_round(d);
        int qx[32];
        for (uint i = 0u; i < 32u; ++i) {
          float s = a[xb + i] * id;
          qx[i] = int(sign(s) * floor(abs(s) + 0.5));
        }
        for (uint r = 0u; r < rows; ++r) {
          uint base = p.w_off + (j0 + r) * row_bytes + b * 34u;
          vec2 dp = unpackHalf2x16(w[base >> 2u]);
          float dw = (base & 2u) != 0u ? dp.y : dp.x;
          // The 32 quants start 2 bytes in: 8 words, or 9 when they start
          // half-way into one.
          uint q0 = base + 2u;
          uint first = q0 >> 2u;
          uint shift = q0 & 3u;
          uint words = shift == 0u ? 8u : 9u;
          uint wv[9];
          for (uint i = 0u; i < words; ++i)
            wv[i] = w[first + i];
          int s = 0;
          for (uint i = 0u; i < 32u; ++i) {
            uint at = shift + i;
            s += bitfieldExtract(int(wv[at >> 2u]), int((at & 3u) * 8u), 8)
                 * qx[i];
          }
          acc[r] += float(s) * dw * dx;
        }
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
