// Causal grouped-query attention over a KV cache. One workgroup per
// (query row t, head h) at a time (grid-stride). Row t sits at position
// pos0 + t and attends to cache rows 0 .. pos0 + t of KV head
// h / (n_heads / n_kv_heads). Positions go in chunks of CHUNK scores kept in
// shared memory, with an online softmax (running maximum and sum) across
// chunks, so any context length works. Invocation i owns output dimensions
// i and i + WG: head_dim <= 2 * WG (the host falls back beyond). K and V are
// rounded to half where read, as llama.cpp's F16 cache holds them (the
// attention contract in backends/backend.hpp): attention.comp reads an f32
// cache and rounds, attention_f16.comp (KV_F16) reads the halves of an f16
// cache, two to a 32-bit word, k_off / v_off / kv_stride counted in halves;
// attention_q8_0.comp (KV_Q8) decodes a q8_0 cache's 34-byte blocks (q * d,
// as ggml's dequantize_row_q8_0), k_off / v_off in bytes, kv_stride in
// values (a multiple of 32). PAGED (the *_paged.comp variants): cache row r
// lies in block tab[tab_off + (r >> block_shift)], row r & (2^block_shift -
// 1) of it, blocks block_stride values apart (attention_dims' paged cache);
// the rows are read in the same order, so the sums are those of one run.
// ROWS (the *_paged_rows.comp variants, attention_paged_rows): query row t
// is one token of its own sequence; its position is tab[tab_off + t * (1 +
// row_table_len)] (clamped into its table) and its block table the
// row_table_len entries after it; pos0 is not used.

layout(local_size_x = 128) in;

layout(set = 0, binding = 0) readonly buffer buf_q { float q[]; };
#if defined(KV_F16) || defined(KV_Q8)
layout(set = 0, binding = 1) readonly buffer buf_k { uint k[]; };
layout(set = 0, binding = 2) readonly buffer buf_v { uint v[]; };
#else
layout(set = 0, binding = 1) readonly buffer buf_k { float k[]; };
layout(set = 0, binding = 2) readonly buffer buf_v { float v[]; };
#endif
layout(set = 0, binding = 3) writeonly buffer buf_o { float o[]; };
#if defined(PAGED)
layout(set = 0, binding = 4) readonly buffer buf_t { uint tab[]; };
#endif

layout(push_constant) uniform params {
  uint q_off;
  uint k_off;
  uint v_off;
  uint o_off;
  uint n_tokens;
  uint pos0;
  uint n_heads;
  uint n_kv_heads;
  uint head_dim;
  uint kv_stride;
  float scale;
  uint tab_off;      // PAGED: in 32-bit words
  uint block_shift;  // PAGED: log2 of the positions per block
  uint block_stride; // PAGED: values between blocks
  uint max_block;    // PAGED: the last block that lies inside k and v
  uint row_table_len; // ROWS: block indices per row's table
} p;

// Where cache row r starts, in values from the view's start, its block
// table at word tb of tab (PAGED).
uint row_at(uint tb, uint r) {
#if defined(PAGED)
  // An entry past the views reads the last block inside them: never a
  // read outside the cache (the host checks tables where it can).
  uint b = min(tab[tb + (r >> p.block_shift)], p.max_block);
  return b * p.block_stride + (r & ((1u << p.block_shift) - 1u)) * p.kv_stride;
#else
  return r * p.kv_stride;
#endif
}

const uint WG = 128u;
const uint CHUNK = 1024u;

shared float qs[2u * WG];
shared float sc[CHUNK];
shared float red[WG];

#include "half.glsl"

#if defined(KV_Q8)
// Value i of the view (its blocks from byte k_off / v_off): the signed byte
// times the block's half scale.
#define K_OFF 0u
#define V_OFF 0u
float k_at(uint i) {
  uint blk = p.k_off + (i >> 5u) * 34u; // even
  float d = unpackHalf2x16((k[blk >> 2u] >> ((blk & 2u) * 8u)) & 0xffffu).x;
  uint qb = blk + 2u + (i & 31u);
  int q = int((k[qb >> 2u] >> ((qb & 3u) * 8u)) << 24u) >> 24;
  return float(q) * d;
}
float v_at(uint i) {
  uint blk = p.v_off + (i >> 5u) * 34u;
  float d = unpackHalf2x16((v[blk >> 2u] >> ((blk & 2u) * 8u)) & 0xffffu).x;
  uint qb = blk + 2u + (i & 31u);
  int q = int((v[qb >> 2u] >> ((qb & 3u) * 8u)) << 24u) >> 24;
  return float(q) * d;
}
#elif defined(KV_F16)
#define K_OFF p.k_off
#define V_OFF p.v_off
float k_at(uint i) {
  vec2 pair = unpackHalf2x16(k[i >> 1u]);
  return (i & 1u) != 0u ? pair.y : pair.x;
}
float v_at(uint i) {
  vec2 pair = unpackHalf2x16(v[i >> 1u]);
  return (i & 1u) != 0u ? pair.y : pair.x;
}
#else
#define K_OFF p.k_off
#define V_OFF p.v_off
float k_at(uint i) {
  return half_round(k[i]);
}
float v_at(uint i) {
  return half_round(v[i]);
}
#endif

float reduce(float val, bool is_max) {
  uint tid = gl_LocalInvocationID.x;
  red[tid] = val;
  barrier();
  for (uint h = WG / 2u; h > 0u; h >>= 1u) {
    if (tid < h)
      red[tid] = is_max ? max(red[tid], red[tid + h]) : red[tid] + red[tid + h];
    barrier();
  }
  float r = red[0];
  barrier();
  return r;
}

void main() {
  uint tid = gl_LocalInvocationID.x;
  uint group = p.n_heads / p.n_kv_heads;
  uint row = p.n_heads * p.head_dim;
  uint d1 = tid + WG;
  for (uint th = gl_WorkGroupID.x; th < p.n_tokens * p.n_heads;
       th += gl_NumWorkGroups.x) {
    uint t = th / p.n_heads;
    uint h = th % p.n_heads;
    uint kvh = (h / group) * p.head_dim;
#if defined(ROWS)
    uint rt = p.tab_off + t * (1u + p.row_table_len);
    uint last = (p.row_table_len << p.block_shift) - 1u;
    uint n_pos = (int(tab[rt]) < 0 ? 0u : min(tab[rt], last)) + 1u;
    uint tb = rt + 1u;
#elif defined(PAGED)
    uint n_pos = p.pos0 + t + 1u;
    uint tb = p.tab_off;
#else
    uint n_pos = p.pos0 + t + 1u;
    uint tb = 0u;
#endif
    uint qb = p.q_off + t * row + h * p.head_dim;
    for (uint i = tid; i < p.head_dim; i += WG)
      qs[i] = q[qb + i];
    barrier();
    float m = 0.0; // running maximum (valid once l > 0)
    float l = 0.0; // running sum of exp(score - m)
    float acc0 = 0.0;
    float acc1 = 0.0;
    for (uint c0 = 0u; c0 < n_pos; c0 += CHUNK) {
      uint cn = min(CHUNK, n_pos - c0);
      float lmax = -3.402823466e38;
      for (uint j = tid; j < cn; j += WG) {
        uint kb = K_OFF + row_at(tb, c0 + j) + kvh;
        float s = 0.0;
        for (uint i = 0u; i < p.head_dim; ++i)
          s += qs[i] * k_at(kb + i);
        s *= p.scale;
        sc[j] = s;
        lmax = max(lmax, s);
      }
      float nm = reduce(lmax, true);
      if (c0 > 0u)
        nm = max(m, nm);
      float lsum = 0.0;
      for (uint j = tid; j < cn; j += WG) {
        float e = exp(sc[j] - nm);
        sc[j] = e;
        lsum += e;
      }
      float csum = reduce(lsum, false);
      float corr = c0 > 0u ? exp(m - nm) : 0.0;
      l = l * corr + csum;
      acc0 *= corr;
      acc1 *= corr;
      for (uint j = 0u; j < cn; ++j) {
        float e = sc[j];
        uint vr = V_OFF + row_at(tb, c0 + j) + kvh;
        if (tid < p.head_dim)
          acc0 += e * v_at(vr + tid);
        if (d1 < p.head_dim)
          acc1 += e * v_at(vr + d1);
      }
      m = nm;
      barrier(); // sc is read by all before the next chunk overwrites it
    }
    uint ob = p.o_off + t * row + h * p.head_dim;
    if (tid < p.head_dim)
      o[ob + tid] = acc0 / l;
    if (d1 < p.head_dim)
      o[ob + d1] = acc1 / l;
    barrier(); // qs is read by all before the next (t, h) overwrites it
  }
}
