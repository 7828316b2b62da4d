#version 450
#extension GL_GOOGLE_include_directive : require
// C[m x n] = A[m x k] * W^T with W [n x k] in one of ggml's block formats
// (BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K; the type is GGUF's id),
// read as 32-bit words at a byte offset (w_off, even). Each weight is
// dequantized in the shader exactly as ggml's to_float writes it (byte
// layouts: backends/quant_formats.hpp) and multiplied in F32 with the
// activations as they are (the CPU rounds activations to 8 bits for these
// formats; a GPU does not need to). Tiles of R rows of W and T rows of A
// (weight_tiles.glsl): an invocation takes 32 elements at a time (a
// K-quant group's scale and minimum decoded once), each weight decoded
// once for all T rows of A.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) readonly buffer buf_w { uint w[]; };
layout(set = 0, binding = 2) writeonly buffer buf_c { float c[]; };

layout(push_constant) uniform params {
  uint a_off;       // elements
  uint w_off;       // bytes
  uint c_off;       // elements
  uint m;
  uint n;
  uint k;
  uint type;        // GGUF type id
  uint block_elems; // elements per block
  uint block_bytes; // bytes per block
} p;

const uint T_Q4_0 = 2u;
const uint T_Q4_1 = 3u;
const uint T_Q5_0 = 6u;
const uint T_Q5_1 = 7u;
const uint T_Q2_K = 10u;
const uint T_Q3_K = 11u;
const uint T_Q4_K = 12u;
const uint T_Q5_K = 13u;
const uint T_Q6_K = 14u;
const uint T_BF16 = 30u;

#include "weight_tiles.glsl"

uint byte_at(uint off) {
  return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xFFu;
}

// An IEEE half at an even byte offset.
float half_at(uint off) {
  vec2 pair = unpackHalf2x16(w[off >> 2u]);
  return (off & 2u) != 0u ? pair.y : pair.x;
}

// A little-endian 32-bit word at any byte offset.
uint u32_at(uint off) {
  return byte_at(off) | (byte_at(off + 1u) << 8u) | (byte_at(off + 2u) << 16u)
         | (byte_at(off + 3u) << 24u);
}

// Q4_K/Q5_K's 6-bit scale and minimum of sub-block j (ggml's
// get_scale_min_k4), the 12 bytes at s.
void scale_min_k4(uint j, uint s, out float sc, out float mn) {
  if (j < 4u) {
    sc = float(byte_at(s + j) & 63u);
    mn = float(byte_at(s + j + 4u) & 63u);
  } else {
    sc = float((byte_at(s + j + 4u) & 0xFu) | ((byte_at(s + j - 4u) >> 6u) << 4u));
    mn = float((byte_at(s + j + 4u) >> 4u) | ((byte_at(s + j) >> 6u) << 4u));
  }
}

// Element e of the block that starts at byte b.
float dequant(uint b, uint e) {
  if (p.type == T_BF16)
    return uintBitsToFloat(((w[b >> 2u] >> ((b & 2u) * 8u)) & 0xFFFFu) << 16u);
  if (p.type == T_Q4_0 || p.type == T_Q4_1) {
    // d (f16) [m (f16)] qs[16]: low nibbles are elements 0-15.
    uint qs = b + (p.type == T_Q4_1 ? 4u : 2u);
    uint q = byte_at(qs + e % 16u);
    float v = float(e < 16u ? q & 0xFu : q >> 4u);
    return p.type == T_Q4_0 ? half_at(b) * (v - 8.0)
                            : half_at(b) * v + half_at(b + 2u);
  }
  if (p.type == T_Q5_0 || p.type == T_Q5_1) {
    // d [m] qh (32 bits: bit e is element e's fifth bit) qs[16].
    bool one = p.type == T_Q5_1;
    uint qh = u32_at(b + (one ? 4u : 2u));
    uint q = byte_at(b + (one ? 8u : 6u) + e % 16u);
    uint v = (e < 16u ? q & 0xFu : q >> 4u) | (((qh >> e) & 1u) << 4u);
    return one ? half_at(b) * float(v) + half_at(b + 2u)
               : half_at(b) * (float(v) - 16.0);
  }
  if (p.type == T_Q2_K || p.type == T_Q3_K) {
    // 128-element halves n, in them four pairs of 16-element groups.
    uint n = e / 128u, r = e % 128u, j = r / 32u, hf = (r % 32u) / 16u,
         l = r % 16u;
    uint is = 8u * n + 2u * j + hf;
    if (p.type == T_Q2_K) {
      // scales[16] qs[64] d dmin
      uint sc = byte_at(b + is);
      uint q = (byte_at(b + 16u + 32u * n + 16u * hf + l) >> (2u * j)) & 3u;
      return half_at(b + 80u) * float(sc & 0xFu) * float(q)
             - half_at(b + 82u) * float(sc >> 4u);
    }
    // hmask[32] qs[64] scales[12] d: 6-bit scales, minus 32.
    uint s = b + 96u;
    uint w4 = is / 4u, i4 = is % 4u;
    uint nib = w4 < 2u ? byte_at(s + 4u * w4 + i4) & 0xFu
                       : byte_at(s + 4u * (w4 - 2u) + i4) >> 4u;
    uint top = (byte_at(s + 8u + i4) >> (2u * w4)) & 3u;
    int sc = int(nib | (top << 4u)) - 32;
    uint q = (byte_at(b + 32u + 32u * n + 16u * hf + l) >> (2u * j)) & 3u;
    uint hm = (byte_at(b + 16u * hf + l) >> (4u * n + j)) & 1u;
    int v = int(q) - (hm != 0u ? 0 : 4);
    return half_at(b + 108u) * float(sc) * float(v);
  }
  if (p.type == T_Q4_K || p.type == T_Q5_K) {
    // d dmin scales[12] [qh[32]] qs[128]: 64-element chunks j, low
    // nibbles (sub-block 2j) then high nibbles (2j + 1).
    uint j = e / 64u, hf = (e % 64u) / 32u, l = e % 32u;
    float sc, mn;
    scale_min_k4(2u * j + hf, b + 4u, sc, mn);
    bool five = p.type == T_Q5_K;
    uint q = byte_at(b + (five ? 48u : 16u) + 32u * j + l);
    uint v = hf != 0u ? q >> 4u : q & 0xFu;
    if (five)
      v |= ((byte_at(b + 16u + l) >> (2u * j + hf)) & 1u) << 4u;
    return half_at(b) * sc * float(v) - half_at(b + 2u) * mn;
  }
  if (p.type == T_Q6_K) {
    // ql[128] qh[64] scales[16] (int8) d
    uint n = e / 128u, r = e % 128u, qt = r / 32u, l = r % 32u;
    uint lb = byte_at(b + 64u * n + l + 32u * (qt & 1u));
    uint lo = qt < 2u ? lb & 0xFu : lb >> 4u;
    uint hi = (byte_at(b + 128u + 32u * n + l) >> (2u * qt)) & 3u;
    int q = int(lo | (hi << 4u)) - 32;
    int sc = int(byte_at(b + 192u + 8u * n + l / 16u + 2u * qt) << 24u) >> 24;
    return half_at(b + 208u) * float(sc) * float(q);
  }
  return 0.0;
}

// The dot products of 32 elements of a row, group g32 (0 ..
// block_elems/32 - 1) of the block at b, with the T rows of A at x, x +
// p.k, ...: the group's scales and minimums decoded once, each weight once
// for all T rows, each row's sum in the order of l.
void dot32(uint b, uint g32, uint x, out float s[T]) {
  for (uint t = 0u; t < T; ++t)
    s[t] = 0.0;
  if (p.type == T_BF16) {
    for (uint l = 0u; l < 32u; ++l) {
      float v = dequant(b + 2u * l, 0u);
      for (uint t = 0u; t < T; ++t)
        s[t] += v * a[x + t * p.k + l];
    }
    return;
  }
  if (p.type == T_Q4_K || p.type == T_Q5_K) {
    // Sub-block g32: chunk j = g32 / 2, low (even) or high (odd) nibbles.
    uint j = g32 / 2u, hf = g32 % 2u;
    float sc, mn;
    scale_min_k4(g32, b + 4u, sc, mn);
    float d = half_at(b) * sc, m = half_at(b + 2u) * mn;
    bool five = p.type == T_Q5_K;
    uint qs = b + (five ? 48u : 16u) + 32u * j;
    for (uint l = 0u; l < 32u; ++l) {
      uint q = byte_at(qs + l);
      uint u = hf != 0u ? q >> 4u : q & 0xFu;
      if (five)
        u |= ((byte_at(b + 16u + l) >> g32) & 1u) << 4u;
      float v = d * float(u) - m;
      for (uint t = 0u; t < T; ++t)
        s[t] += v * a[x + t * p.k + l];
    }
    return;
  }
  if (p.type == T_Q6_K) {
    // Elements 32 g32 .. +31: half n, quarter qt; two 16-element scales.
    uint n = g32 / 4u, qt = g32 % 4u;
    float d = half_at(b + 208u);
    for (uint l = 0u; l < 32u; ++l) {
      uint lb = byte_at(b + 64u * n + l + 32u * (qt & 1u));
      uint lo = qt < 2u ? lb & 0xFu : lb >> 4u;
      uint hi = (byte_at(b + 128u + 32u * n + l) >> (2u * qt)) & 3u;
      int q = int(lo | (hi << 4u)) - 32;
      int sc = int(byte_at(b + 192u + 8u * n + l / 16u + 2u * qt) << 24u) >> 24;
      float v = d * float(sc) * float(q);
      for (uint t = 0u; t < T; ++t)
        s[t] += v * a[x + t * p.k + l];
    }
    return;
  }
  // The 32-element formats (a whole block) and Q2_K/Q3_K (16-element
  // scales): element by element.
  uint e0 = 32u * g32;
  for (uint l = 0u; l < 32u; ++l) {
    float v = dequant(b, e0 + l);
    for (uint t = 0u; t < T; ++t)
      s[t] += v * a[x + t * p.k + l];
  }
}

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint row_bytes = p.k / p.block_elems * p.block_bytes;
  uint groups = p.k / 32u;
  uint per_block = p.block_elems / 32u; // 0 for BF16 (one element a block)
  for (uint j0 = gl_WorkGroupID.x * R; j0 < p.n; j0 += gl_NumWorkGroups.x * R) {
    uint rows = min(R, p.n - j0);
    for (uint t0 = 0u; t0 + T <= p.m; t0 += T) {
      float acc[R * T];
      for (uint q = 0u; q < R * T; ++q)
        acc[q] = 0.0;
      uint xb = p.a_off + t0 * p.k;
      for (uint g = tid; g < groups; g += WG) {
        // BF16: 32 elements of 2 bytes; the others: group g % per_block of
        // block g / per_block.
        uint off = per_block == 0u ? 64u * g
                                   : (g / per_block) * p.block_bytes;
        uint g32 = per_block == 0u ? 0u : g % per_block;
        for (uint r = 0u; r < rows; ++r) {
          float s[T];
          dot32(p.w_off + (j0 + r) * row_bytes + off, g32, xb + 32u * g, s);
          for (uint t = 0u; t < T; ++t)
            acc[t * R + r] += s[t];
        }
      }
      // BF16 rows need not be a multiple of 32 long: the rest one by one.
      for (uint i = 32u * groups + tid; i < p.k; i += WG)
        for (uint r = 0u; r < rows; ++r) {
          float v = dequant(p.w_off + (j0 + r) * row_bytes + 2u * i, 0u);
          for (uint t = 0u; t < T; ++t)
            acc[t * R + r] += v * a[xb + t * p.k + i];
        }
      store_tile(acc, tid, j0, rows, t0);
    }
  }
}
