#version 450
// out[i] = a[i] (op) b[i] for i < count; op 0 = add, 1 = mul,
// 2 = silu(a) * b (the gated activation of a Llama feed-forward block).
// Buffers are bound whole (or by aligned windows); the views' element offsets
// come as push constants. A grid-stride loop covers any count.

layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) readonly buffer buf_b { float b[]; };
layout(set = 0, binding = 2) writeonly buffer buf_c { float c[]; };

layout(push_constant) uniform params {
  uint a_off;
  uint b_off;
  uint c_off;
  uint count;
  uint op;
} p;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) {
    float x = a[p.a_off + i];
    float y = b[p.b_off + i];
    c[p.c_off + i] = p.op == 0u   ? x + y
                     : p.op == 1u ? x * y
                                  : x / (1.0 + exp(-x)) * y;
  }
}
