#version 450
// store_kv_rows: a decode batch's new K (or V) rows, row r of a stored at
// its position in its block (tables as attention_paged_rows': per row its
// position, then table_len block indices), as the cache holds it: an f32
// cache's as is, an f16 cache's as to_f16.comp rounds them, a q8_0 cache's
// as to_q8_0.comp quantizes them. Every invocation writes whole 32-bit
// words: one value (f32), two halves (f16) or a pair of 34-byte blocks
// (q8_0); the host sends only shapes where every row starts at a word
// (other calls take the generic path). Positions are clamped into the
// table and blocks to max_block: never a write outside the cache.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer buf_a { float a[]; };
layout(set = 0, binding = 1) readonly buffer buf_t { uint tab[]; };
layout(set = 0, binding = 2) writeonly buffer buf_k { uint kv[]; };

layout(push_constant) uniform params {
  uint a_off;        // floats
  uint tab_off;      // 32-bit words
  uint kv_off;       // the cache's units from its binding: floats, halves,
                     // bytes (a multiple of 4 for q8_0)
  uint rows;
  uint width;        // values of a row
  uint kv_stride;    // values between cache rows
  uint block_shift;  // log2 of the positions per block
  uint block_stride; // values between blocks
  uint table_len;
  uint max_block;    // the last block that lies inside the cache
  uint kv_type;      // 0 f32, 1 f16, 2 q8_0 (backend::kv_type)
} p;

void main() {
  uint per = p.kv_type == 2u ? 64u : p.kv_type == 1u ? 2u : 1u;
  uint units = p.width / per;
  uint stride = gl_NumWorkGroups.x * 64u;
  uint last = (p.table_len << p.block_shift) - 1u;
  for (uint i = gl_GlobalInvocationID.x; i < p.rows * units; i += stride) {
    uint r = i / units, u = i % units;
    uint rt = p.tab_off + r * (1u + p.table_len);
    uint pos = int(tab[rt]) < 0 ? 0u : min(tab[rt], last);
    uint b = min(tab[rt + 1u + (pos >> p.block_shift)], p.max_block);
    // The row's first value, from the cache view's start.
    uint at = b * p.block_stride
              + (pos & ((1u << p.block_shift) - 1u)) * p.kv_stride;
    uint x0 = p.a_off + r * p.width + u * per;
    if (p.kv_type == 0u) {
      kv[p.kv_off + at + u] = floatBitsToUint(a[x0]);
    } else if (p.kv_type == 1u) {
      kv[(p.kv_off + at) / 2u + u] = packHalf2x16(vec2(a[x0], a[x0 + 1u]));
    } else {
      uint bytes[68];
      for (uint h = 0u; h < 2u; ++h) {
        uint y0 = x0 + h * 32u;
        float amax = 0.0;
        for (uint j = 0u; j < 32u; ++j)
          amax = max(amax, abs(a[y0 + j]));
        float d = amax / 127.0;
        float id = amax != 0.0 ? 127.0 / amax : 0.0;
        uint dh = packHalf2x16(vec2(d, 0.0)) & 0xffffu;
        bytes[h * 34u] = dh & 0xffu;
        bytes[h * 34u + 1u] = dh >> 8u;
        for (uint j = 0u; j < 32u; ++j) {
          int q = int(roundEven(a[y0 + j] * id));
          bytes[h * 34u + 2u + j] = uint(q) & 0xffu;
        }
      }
      uint w0 = (p.kv_off + at / 32u * 34u) / 4u + u * 17u;
      for (uint w = 0u; w < 17u; ++w)
        kv[w0 + w] = bytes[4u * w] | (bytes[4u * w + 1u] << 8u)
                     | (bytes[4u * w + 2u] << 16u)
                     | (bytes[4u * w + 3u] << 24u);
    }
  }
}
