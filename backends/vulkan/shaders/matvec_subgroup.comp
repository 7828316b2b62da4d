#version 450
// The transpose_b products of rows of A with subgroup arithmetic:
// c[t][j] = dot(A[t, :], B[j, :]) with B stored [n x k]. Each subgroup owns
// one output column j at a time: its invocations read a row of B
// contiguously and subgroupAdd sums their parts. No shared memory, no
// barriers. matmul's m == 1 case, and matmul_weights' F32 weights (any m).
//
// TILE_ROWS = T (the _x4 pipeline: 4) takes T rows of A at a time, so each
// element of B is read once for T rows; an invocation sums each row's part
// in the order it would with T = 1, so a row of A gets the same bits
// whatever rows share its product (a decode batch, a speculative step's
// draft tokens). m is a multiple of T.

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#ifndef TILE_ROWS
#define TILE_ROWS 1
#endif
const uint T = TILE_ROWS;

layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) readonly buffer buf_b { float b[]; };
layout(set = 0, binding = 2) writeonly buffer buf_c { float c[]; };

layout(push_constant) uniform params {
  uint a_off;
  uint b_off;
  uint c_off;
  uint m;
  uint n;
  uint k;
  uint transpose_b;
  uint row_tile0;
  uint col_tile0;
} p;

void main() {
  uint groups = gl_NumWorkGroups.x * gl_NumSubgroups;
  uint first = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
  for (uint j = first; j < p.n; j += groups) {
    uint row = p.b_off + j * p.k;
    for (uint t0 = 0u; t0 + T <= p.m; t0 += T) {
      float s[T];
      for (uint t = 0u; t < T; ++t)
        s[t] = 0.0;
      uint x = p.a_off + t0 * p.k;
      for (uint kk = gl_SubgroupInvocationID; kk < p.k; kk += gl_SubgroupSize) {
        float bv = b[row + kk];
        for (uint t = 0u; t < T; ++t)
          s[t] += a[x + t * p.k + kk] * bv;
      }
      for (uint t = 0u; t < T; ++t) {
        float v = subgroupAdd(s[t]);
        if (subgroupElect())
          c[p.c_off + (t0 + t) * p.n + j] = v;
      }
    }
  }
}
