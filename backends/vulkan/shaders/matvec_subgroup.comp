#version 450
// The m == 1, transpose_b case of matmul with subgroup arithmetic:
// c[j] = dot(a, B[j, :]) with B stored [n x k]. Each subgroup owns one
// output at a time: its invocations read a row of B contiguously and
// subgroupAdd sums their parts. No shared memory, no barriers.

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

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
    float s = 0.0;
    uint row = p.b_off + j * p.k;
    for (uint kk = gl_SubgroupInvocationID; kk < p.k; kk += gl_SubgroupSize)
      s += a[p.a_off + kk] * b[row + kk];
    s = subgroupAdd(s);
    if (subgroupElect())
      c[p.c_off + j] = s;
  }
}
