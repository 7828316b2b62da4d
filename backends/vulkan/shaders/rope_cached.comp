#version 450
#extension GL_GOOGLE_include_directive : require
// Rope by angles computed ahead (device::rope_cached), in place on
// x[rows][heads][head_dim]: cs[r * n_rot + 2i] and cs[r * n_rot + 2i + 1]
// are the cosine and sine of pair i's angle in row r (host::rope_cache).
// The pair is (x[2i], x[2i+1]), or (x[i], x[i + n_rot/2]) with neox. The
// rotation is the host's: one fused multiply-add each (fma_exact: the
// host's bits in the _fp64 variant), x1 s and x1 c rounded first. One
// invocation per pair (grid-stride).

layout(local_size_x = 256) in;

#include "exact_fma.glsl"

layout(set = 0, binding = 0) buffer buf_x { float x[]; };
layout(set = 0, binding = 1) readonly buffer buf_cs { float cs[]; };

layout(push_constant) uniform params {
  uint x_off;
  uint cs_off;
  uint rows;
  uint heads;
  uint head_dim;
  uint n_rot;
  uint neox;
} p;

void main() {
  uint half_rot = p.n_rot / 2u;
  uint total = p.rows * p.heads * half_rot;
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += stride) {
    uint pair = i % half_rot;
    uint rh = i / half_rot; // row * heads + head
    uint ci = p.cs_off + (rh / p.heads) * p.n_rot + 2u * pair;
    uint b = p.x_off + rh * p.head_dim + (p.neox != 0u ? pair : 2u * pair);
    uint o = p.neox != 0u ? half_rot : 1u;
    float c = cs[ci];
    float s = cs[ci + 1u];
    float x0 = x[b];
    float x1 = x[b + o];
    precise float x1s = x1 * s;
    precise float x1c = x1 * c;
    x[b] = fma_exact(x0, c, -x1s);
    x[b + o] = fma_exact(x0, s, x1c);
  }
}
