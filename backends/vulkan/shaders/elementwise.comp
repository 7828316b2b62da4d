#version 450
#extension GL_GOOGLE_include_directive : require
// out[i] = a[i] (op) b[i] for i < count; op 0 = add, 1 = mul,
// 2 = silu(a) * b (the gated activation of a Llama feed-forward block).
// Buffers are bound whole (or by aligned windows); the views' element offsets
// come as push constants. A grid-stride loop covers any count.
//
// silu: elements below `groups` (the whole groups of 16 of the operation,
// counted from its first element) as the host's silu_mul computes them,
// x / (1 + v_expf(0 - x)) * y with ggml_v_expf's steps (expf_ggml.hpp:
// the same constants, its fused multiply-adds fma_exact, the host's bits
// in the _fp64 variant); the rest with the device's exp, as the host
// takes libm's there. The division is the device's (correctly rounded on
// lavapipe).

layout(local_size_x = 256) in;

#include "exact_fma.glsl"

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) readonly buffer buf_b { float b[]; };
layout(set = 0, binding = 2) writeonly buffer buf_c { float c[]; };

layout(push_constant) uniform params {
  uint a_off;
  uint b_off;
  uint c_off;
  uint count;
  uint op;
  uint groups;
} p;

// ggml_v_expf's constants (ARM's optimized-routines expf), bit for bit:
// each the exact decimal value of the float.
const float ex_shift = 12582912.0;  // 0x1.8p23
const float ex_log2e = 1.44269502162933349609375;  // 0x1.715476p+0
const float ex_ln2_hi = 0.693145751953125;  // 0x1.62e4p-1
const float ex_ln2_lo = 1.428606765330187045037746429443359375e-6;  // 0x1.7f7d1cp-20
const float ex_c5 = 0.00824739038944244384765625;  // 0x1.0e4020p-7
const float ex_c4 = 0.0418997667729854583740234375;  // 0x1.573e2ep-5
const float ex_c3 = 0.16668395698070526123046875;  // 0x1.555e66p-3
const float ex_c2 = 0.4999912679195404052734375;  // 0x1.fffdb6p-2
const float ex_c1 = 0.99999940395355224609375;  // 0x1.ffffecp-1

// 2^e for -126 <= e <= 127, exact.
float pow2i(int e) { return uintBitsToFloat(uint(e + 127) << 23); }

// j * 2^e as ggml::scalef: a first exact step out of the normal range.
float scalef(float j, int e) {
  precise float r;
  if (e > 127)
    r = j * pow2i(e - 127) * pow2i(127);
  else if (e < -126)
    r = j * pow2i(e + 126) * pow2i(-126);
  else
    r = j * pow2i(e);
  return r;
}

// ggml_v_expf, one lane (ggml::expf_lane).
float expf_lane(float x) {
  precise float z = fma_exact(x, ex_log2e, ex_shift);
  precise float n = z - ex_shift;
  precise float bb = fma_exact(-n, ex_ln2_lo, fma_exact(-n, ex_ln2_hi, x));
  if (isnan(n))
    return n;
  if (abs(n) > 192.0)
    return n <= 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
  precise float u = bb * bb;
  precise float j = fma_exact(
      fma_exact(fma_exact(ex_c5, bb, ex_c4), u, fma_exact(ex_c3, bb, ex_c2)), u,
      fma_exact(ex_c1, bb, 1.0));
  return scalef(j, int(n));
}

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) {
    float x = a[p.a_off + i];
    float y = b[p.b_off + i];
    precise float r;
    if (p.op == 0u)
      r = x + y;
    else if (p.op == 1u)
      r = x * y;
    else if (i < p.groups)
      r = x / (1.0 + expf_lane(0.0 - x)) * y;
    else
      r = x / (1.0 + exp(-x)) * y;
    c[p.c_off + i] = r;
  }
}
