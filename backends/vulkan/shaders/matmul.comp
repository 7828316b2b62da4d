#version 450
// C[m x n] = A[m x k] * B, f32 row-major. B is [k x n], or [n x k] when
// transpose_b is set. Each 16x16 workgroup computes a 64x64 tile of C, each
// invocation a 4x4 block of it, staging 64x32 slices of A and 32x64 slices
// of B through shared memory. Tiles past the edges are zero-filled.

#define BM 64u
#define BN 64u
#define BK 32u
#define TM 4
#define TN 4

layout(local_size_x = 16, local_size_y = 16) in;

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
  uint row_tile0; // added to gl_WorkGroupID.y (dispatches in slices)
  uint col_tile0; // added to gl_WorkGroupID.x
} p;

shared float as[BK][BM]; // as[kk][row]
shared float bs[BK][BN]; // bs[kk][col]

void main() {
  uint tx = gl_LocalInvocationID.x;
  uint ty = gl_LocalInvocationID.y;
  uint tid = ty * 16u + tx;
  uint row0 = (gl_WorkGroupID.y + p.row_tile0) * BM;
  uint col0 = (gl_WorkGroupID.x + p.col_tile0) * BN;

  float acc[TM][TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j)
      acc[i][j] = 0.0;

  for (uint k0 = 0u; k0 < p.k; k0 += BK) {
    // A slice: 64 rows x 32 k, eight elements per invocation, along k.
    for (uint i = 0u; i < BK / 4u; ++i) {
      uint e = tid + i * 256u;
      uint r = e / BK;
      uint kk = e % BK;
      uint gr = row0 + r;
      uint gk = k0 + kk;
      float v = 0.0;
      if (gr < p.m && gk < p.k)
        v = a[p.a_off + gr * p.k + gk];
      as[kk][r] = v;
    }
    // B slice: 32 k x 64 columns.
    for (uint i = 0u; i < BK / 4u; ++i) {
      uint e = tid + i * 256u;
      float v = 0.0;
      if (p.transpose_b != 0u) {
        uint col = e / BK;
        uint kk = e % BK;
        uint gc = col0 + col;
        uint gk = k0 + kk;
        if (gc < p.n && gk < p.k)
          v = b[p.b_off + gc * p.k + gk];
        bs[kk][col] = v;
      } else {
        uint kk = e / BN;
        uint col = e % BN;
        uint gc = col0 + col;
        uint gk = k0 + kk;
        if (gc < p.n && gk < p.k)
          v = b[p.b_off + gk * p.n + gc];
        bs[kk][col] = v;
      }
    }
    barrier();
    for (uint kk = 0u; kk < BK; ++kk) {
      float av[TM];
      float bv[TN];
      for (int i = 0; i < TM; ++i)
        av[i] = as[kk][ty + uint(i) * 16u];
      for (int j = 0; j < TN; ++j)
        bv[j] = bs[kk][tx + uint(j) * 16u];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
          acc[i][j] += av[i] * bv[j];
    }
    barrier();
  }

  for (int i = 0; i < TM; ++i) {
    uint gr = row0 + ty + uint(i) * 16u;
    if (gr >= p.m)
      continue;
    for (int j = 0; j < TN; ++j) {
      uint gc = col0 + tx + uint(j) * 16u;
      if (gc < p.n)
        c[p.c_off + gr * p.n + gc] = acc[i][j];
    }
  }
}
