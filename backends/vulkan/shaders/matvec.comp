#version 450
// The m == 1 case of matmul: c[1 x n] = a[1 x k] * B.
// B as [k x n]: each invocation owns one column and walks k, with a staged
// through shared memory 256 values at a time (on lavapipe cheaper than
// reading the same a[k] from the buffer in every invocation).
// B as [n x k] (transpose_b): each workgroup owns one output at a time and
// reduces a dot product over k in shared memory (matvec_subgroup.comp does
// this without barriers where subgroup arithmetic exists).
// Both loop over the outputs with a grid stride, so any n works.

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

shared float sh[256];

void main() {
  uint lid = gl_LocalInvocationID.x;
  if (p.transpose_b != 0u) {
    for (uint j = gl_WorkGroupID.x; j < p.n; j += gl_NumWorkGroups.x) {
      float s = 0.0;
      uint row = p.b_off + j * p.k;
      for (uint kk = lid; kk < p.k; kk += 256u)
        s += a[p.a_off + kk] * b[row + kk];
      sh[lid] = s;
      barrier();
      for (uint w = 128u; w > 0u; w >>= 1) {
        if (lid < w)
          sh[lid] += sh[lid + w];
        barrier();
      }
      if (lid == 0u)
        c[p.c_off + j] = sh[0];
      barrier();
    }
  } else {
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint j0 = gl_WorkGroupID.x * 256u; j0 < p.n; j0 += stride) {
      uint j = j0 + lid;
      float s = 0.0;
      for (uint k0 = 0u; k0 < p.k; k0 += 256u) {
        uint kk = k0 + lid;
        sh[lid] = kk < p.k ? a[p.a_off + min(kk, p.k - 1u)] : 0.0;
        barrier();
        uint kn = min(256u, p.k - k0);
        if (j < p.n)
          for (uint t = 0u; t < kn; ++t)
            s += sh[t] * b[p.b_off + (k0 + t) * p.n + j];
        barrier();
      }
      if (j < p.n)
        c[p.c_off + j] = s;
    }
  }
}
