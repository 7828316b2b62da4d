#version 450
// out = a as Q8_0 blocks (a q8_0 KV cache's rows; host::quantize_q8_0_
// activations): per 32 values d = max|x| / 127 stored as half, q = x *
// (127 / max|x|) rounded to nearest even. Blocks are 34 bytes, so each
// invocation writes a pair of them as 17 whole 32-bit words: the host
// sends a count that is a multiple of 64 at a 4-byte aligned output offset
// (other calls take the generic path). GPU division may round differently
// from the host's in the last bit (as every GPU kernel's sums may).

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) writeonly buffer buf_o { uint o[]; };

layout(push_constant) uniform params {
  uint a_off; // floats
  uint o_off; // 32-bit words
  uint pairs; // count / 64
} p;

void main() {
  uint stride = gl_NumWorkGroups.x * 64u;
  for (uint i = gl_GlobalInvocationID.x; i < p.pairs; i += stride) {
    uint bytes[68];
    for (uint b = 0u; b < 2u; ++b) {
      uint x0 = p.a_off + i * 64u + b * 32u;
      float amax = 0.0;
      for (uint j = 0u; j < 32u; ++j)
        amax = max(amax, abs(a[x0 + j]));
      float d = amax / 127.0;
      float id = amax != 0.0 ? 127.0 / amax : 0.0;
      uint dh = packHalf2x16(vec2(d, 0.0)) & 0xffffu;
      bytes[b * 34u] = dh & 0xffu;
      bytes[b * 34u + 1u] = dh >> 8u;
      for (uint j = 0u; j < 32u; ++j) {
        int q = int(roundEven(a[x0 + j] * id));
        bytes[b * 34u + 2u + j] = uint(q) & 0xffu;
      }
    }
    for (uint w = 0u; w < 17u; ++w)
      o[p.o_off + i * 17u + w] = bytes[4u * w] | (bytes[4u * w + 1u] << 8u)
                                 | (bytes[4u * w + 2u] << 16u)
                                 | (bytes[4u * w + 3u] << 24u);
  }
}
