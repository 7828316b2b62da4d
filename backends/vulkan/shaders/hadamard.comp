#version 450
// Every run of n values (n a power of two, 2 <= n <= 2048) times the
// orthonormal Walsh-Hadamard matrix of order n, as ggml's CPU backend
// computes it (ggml_compute_forward_fwht, host::hadamard): each value times
// 1 / sqrt(n), then the butterflies (u + v, u - v) for strides 1, 2, 4, ...
// n / 2. Sums and differences are exact IEEE operations in a fixed order,
// so the bits are the host's. One workgroup per run (grid-stride); the
// run goes through shared memory, so out may be a (in place).

layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) writeonly buffer buf_o { float o[]; };

layout(push_constant) uniform params {
  uint a_off;
  uint o_off;
  uint runs; // count / n
  uint n;
  float scale; // 1 / sqrtf(n), as the host rounds it
} p;

const uint WG = 256u;
shared float s[2048];

void main() {
  uint tid = gl_LocalInvocationID.x;
  for (uint r = gl_WorkGroupID.x; r < p.runs; r += gl_NumWorkGroups.x) {
    uint base = r * p.n;
    for (uint j = tid; j < p.n; j += WG)
      s[j] = a[p.a_off + base + j] * p.scale;
    barrier();
    for (uint len = 1u; len < p.n; len <<= 1u) {
      for (uint idx = tid; idx < p.n / 2u; idx += WG) {
        uint i = (idx / len) * 2u * len + idx % len;
        float u = s[i];
        float v = s[i + len];
        s[i] = u + v;
        s[i + len] = u - v;
      }
      barrier();
    }
    for (uint j = tid; j < p.n; j += WG)
      o[p.o_off + base + j] = s[j];
    barrier(); // s is read by all before the next run overwrites it
  }
}
