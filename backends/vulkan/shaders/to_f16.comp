#version 450
// out[i] = a[i] rounded to the nearest half, stored as IEEE half: the rows
// of an f16 KV cache. Each invocation writes one 32-bit word (two halves),
// so the host sends only an even count at a 4-byte aligned output offset
// (other calls take the generic path). packHalf2x16 rounds to nearest
// even on the drivers exo runs on (as attention.glsl's half_round).

layout(local_size_x = 256) in;

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) writeonly buffer buf_o { uint o[]; };

layout(push_constant) uniform params {
  uint a_off;   // floats
  uint o_off;   // 32-bit words
  uint words;   // count / 2
} p;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.words; i += stride)
    o[p.o_off + i] = packHalf2x16(vec2(a[p.a_off + 2u * i],
                                       a[p.a_off + 2u * i + 1u]));
}
