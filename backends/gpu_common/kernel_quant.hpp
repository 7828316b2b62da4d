#pragma once

/// The quantized matrix-vector arithmetic of the GPU kernels, bit for bit
/// that of the CPU engine (backends/quant_formats.cpp), which is llama.cpp's
/// x86 CPU arithmetic:
///
/// - activations are first rounded to the format llama.cpp pairs with the
///   weights (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the
///   K-quants), with ggml's rounding;
/// - a row's dot product keeps 8 float lanes, lane l holding the integer
///   products of the elements e with e % 32 in [4l, 4l + 4) of each block,
///   scaled and fused into the lane block after block; the lanes are then
///   summed as hsum_float_8 does.
///
/// On a GPU each lane is one thread (8 threads per row of W); the host
/// reference (kernel_reference.cpp) runs the same functions lane by lane,
/// and the unit tests hold them to quant::vec_dot's bits. Products that a
/// compiler could fuse with a following addition go through mul_rn, so
/// that nvcc's and hipcc's contraction cannot change a rounding.

#include "backends/gpu_common/kernel_math.hpp"

namespace exo::backend::gpu::math {

/// The activation formats of the quantized dot products.
enum class act_format : int { none = 0, q8_0 = 1, q8_1 = 2, q8_k = 3 };

/// A quantized block of 32 activations (Q8_0 or Q8_1): d and s are the
/// values of the halves ggml stores.
struct act_q8 {
  float d;
  float s; ///< Q8_1: d * sum(qs), rounded to half; Q8_0: 0
  std::int8_t qs[32];
};

/// A quantized block of 256 activations (Q8_K), as ggml's block_q8_K.
struct act_q8k {
  float d;
  std::int8_t qs[256];
  std::int16_t bsums[16];
};

/// Threads that compute one row's dot product (one per lane).
constexpr unsigned dot_lanes = 8;

/// The activation format llama.cpp pairs with weights of GGUF type `type`,
/// or none for the types this arithmetic does not cover (F32, F16, BF16).
EXO_HD inline act_format act_format_of(std::uint32_t type) {
  switch (static_cast<quant::ggml_type>(type)) {
  case quant::ggml_type::q4_0:
  case quant::ggml_type::q5_0:
  case quant::ggml_type::q8_0:
    return act_format::q8_0;
  case quant::ggml_type::q4_1:
  case quant::ggml_type::q5_1:
    return act_format::q8_1;
  case quant::ggml_type::q2_k:
  case quant::ggml_type::q3_k:
  case quant::ggml_type::q4_k:
  case quant::ggml_type::q5_k:
  case quant::ggml_type::q6_k:
    return act_format::q8_k;
  default:
    return act_format::none;
  }
}

/// Elements of one block of format f (32 or 256), 0 for none.
EXO_HD inline std::size_t act_block_elements(act_format f) {
  return f == act_format::q8_k ? 256 : f == act_format::none ? 0 : 32;
}

/// Bytes of one quantized block of format f.
EXO_HD inline std::size_t act_block_bytes(act_format f) {
  return f == act_format::q8_k ? sizeof(act_q8k)
         : f == act_format::none ? 0
                                 : sizeof(act_q8);
}

/// ggml's nearest_int: round half to even through the float mantissa.
EXO_HD inline int nearest_int(float x) {
  const float v = add_rn(x, 12582912.f);
  std::int32_t i;
  memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

/// An activation times 127 / max|x| as ggml's AVX2 quantize_row_q8_0/_1
/// rounds it (_mm256_round_ps to nearest, ties to even; cvtps_epi32 gives
/// INT_MIN for NaN and out-of-range values) and packs it to a byte
/// (saturating): the host's act_round.
EXO_HD inline std::int8_t act_round(float v) {
  const float r = rintf(v);
  const std::int32_t i = r >= -2147483648.f && r < 2147483648.f
                           ? static_cast<std::int32_t>(r)
                           : INT32_MIN;
  return static_cast<std::int8_t>(i < -128 ? -128 : i > 127 ? 127 : i);
}

/// ggml's AVX2 quantize_row_q8_0 / q8_1 for one block (32 floats at x), the
/// activations llama.cpp's x86 CPU backend meets the 32-element formats
/// with (quant::quantize_activations): d = max|x| / 127 stored as half, q
/// = x * (127 / max|x|) rounded half to even (not the file format's
/// reference quantizer, which divides by d and rounds half away from
/// zero); Q8_1's s = half(d * sum(q)).
EXO_HD inline void quantize_act_q8(const float* x, bool with_sum, act_q8& y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = fabsf(x[j]);
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  y.d = round_to_half(d);
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    y.qs[j] = act_round(mul_rn(x[j], id));
    sum += y.qs[j];
  }
  y.s = with_sum ? round_to_half(mul_rn(d, static_cast<float>(sum))) : 0.0f;
}

/// ggml's quantize_row_q8_K for one super-block (256 floats at x).
EXO_HD inline void quantize_act_q8k(const float* x, act_q8k& y) {
  float max = 0, amax = 0;
  for (int j = 0; j < 256; ++j) {
    const float ax = fabsf(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    y.d = 0;
    for (int j = 0; j < 256; ++j)
      y.qs[j] = 0;
    for (int j = 0; j < 16; ++j)
      y.bsums[j] = 0;
    return;
  }
  const float iscale = -127.f / max;
  for (int j = 0; j < 256; ++j) {
    const int q = nearest_int(mul_rn(iscale, x[j]));
    y.qs[j] = static_cast<std::int8_t>(q < 127 ? q : 127);
  }
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int i = 0; i < 16; ++i)
      sum += y.qs[16 * j + i];
    y.bsums[j] = static_cast<std::int16_t>(sum);
  }
  y.d = 1 / iscale;
}

/// Quantizes block `b` (of act_block_elements(f)) of the activations at x
/// into out (an array of act_q8 or act_q8k).
EXO_HD inline void quantize_act_block(act_format f, const float* x,
                                      std::size_t b, void* out) {
  if (f == act_format::q8_k)
    quantize_act_q8k(x + 256 * b, static_cast<act_q8k*>(out)[b]);
  else if (f != act_format::none)
    quantize_act_q8(x + 32 * b, f == act_format::q8_1,
                    static_cast<act_q8*>(out)[b]);
}

// -- one lane of a row -------------------------------------------------------

/// The weight q of element e (0..31) of a Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 block at
/// b, offset (-8, -16) included, as the CPU engine's portable dot decodes.
EXO_HD inline int legacy_q(quant::ggml_type t, const std::uint8_t* b,
                           unsigned e) {
  switch (t) {
  case quant::ggml_type::q4_0:
  case quant::ggml_type::q4_1: {
    const bool one = t == quant::ggml_type::q4_1;
    const unsigned byte = b[(one ? 4 : 2) + e % 16];
    const int v = static_cast<int>(e < 16 ? byte & 0xF : byte >> 4);
    return one ? v : v - 8;
  }
  case quant::ggml_type::q5_0:
  case quant::ggml_type::q5_1: {
    const bool one = t == quant::ggml_type::q5_1;
    const std::uint32_t qh = fifth_bits(b + (one ? 4 : 2));
    const unsigned byte = b[(one ? 8 : 6) + e % 16];
    const int v = static_cast<int>((e < 16 ? byte & 0xF : byte >> 4)
                                   | (((qh >> e) & 1u) << 4));
    return one ? v : v - 16;
  }
  default: // q8_0
    return static_cast<std::int8_t>(b[2 + e]);
  }
}

/// The weight q (before its scale) and the scale of element e (0..255) of
/// a K-quant block at b, as the CPU engine's portable dots decode them
/// (Q6_K's -32 is applied through the group sums, as there).
EXO_HD inline void kquant_q(quant::ggml_type t, const std::uint8_t* b,
                            unsigned e, int& q, int& scale) {
  const unsigned half = e / 128, k = (e % 128) / 32, l = e % 32;
  switch (t) {
  case quant::ggml_type::q2_k: // scales[16] qs[64] d dmin
    q = (b[16 + 32 * half + l] >> (2 * k)) & 3;
    scale = b[e / 16] & 0xF;
    return;
  case quant::ggml_type::q3_k: { // hmask[32] qs[64] scales[12] d
    const int lo = (b[32 + 32 * half + l] >> (2 * k)) & 3;
    const bool hi = ((b[l] >> (4 * half + k)) & 1) != 0;
    q = lo - (hi ? 0 : 4);
    const unsigned g = e / 16;
    const std::uint8_t* s = b + 96;
    const int nib = g < 8 ? s[g] & 0xF : s[g - 8] >> 4;
    const int top = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    scale = (nib | (top << 4)) - 32;
    return;
  }
  case quant::ggml_type::q4_k:
  case quant::ggml_type::q5_k: { // d dmin scales[12] [qh[32]] qs[128]
    const bool five = t == quant::ggml_type::q5_k;
    const unsigned j = e / 64;
    const bool high = (e % 64) >= 32;
    const unsigned byte = b[(five ? 48 : 16) + 32 * j + l];
    q = static_cast<int>(high ? byte >> 4 : byte & 0xF);
    if (five)
      q |= ((b[16 + l] >> (2 * j + (high ? 1 : 0))) & 1) << 4;
    int mn;
    scale_min_k4(e / 32, b + 4, scale, mn);
    return;
  }
  default: { // q6_k: ql[128] qh[64] scales[16] d
    const unsigned lbyte = b[64 * half + 32 * (k & 1) + l];
    const int lo = static_cast<int>(k < 2 ? lbyte & 0xF : lbyte >> 4);
    const int hi = (b[128 + 32 * half + l] >> (2 * k)) & 3;
    q = lo | (hi << 4);
    scale = static_cast<std::int8_t>(b[192 + e / 16]);
    return;
  }
  }
}

/// Bytes of a block of GGUF type `type` (a quantized format with
/// activations: Q4_0 ... Q8_0, Q2_K ... Q6_K).
EXO_HD inline std::size_t lane_block_bytes(std::uint32_t type) {
  switch (static_cast<quant::ggml_type>(type)) {
  case quant::ggml_type::q4_0: return 18;
  case quant::ggml_type::q4_1: return 20;
  case quant::ggml_type::q5_0: return 22;
  case quant::ggml_type::q5_1: return 24;
  case quant::ggml_type::q8_0: return 34;
  case quant::ggml_type::q2_k: return 84;
  case quant::ggml_type::q3_k: return 110;
  case quant::ggml_type::q4_k: return 144;
  case quant::ggml_type::q5_k: return 176;
  default: return 210; // q6_k
  }
}

/// Lane `lane`'s weights of one block: scale x q of each of its elements
/// (the 32-element formats: elements 4 lane .. 4 lane + 3, wq[0..3]; the
/// K-quants: elements c + 4 lane .. c + 4 lane + 3 of every group of 32,
/// c = 32 k, in wq[4 k .. 4 k + 3]). What lane_block_step multiplies by
/// each row of activations; a kernel decodes it once for several rows.
struct lane_weights {
  int wq[32];
};

EXO_HD inline void decode_lane_weights(std::uint32_t type,
                                       const std::uint8_t* b, unsigned lane,
                                       lane_weights& lw) {
  const auto t = static_cast<quant::ggml_type>(type);
  const unsigned e0 = 4 * lane;
  if (act_format_of(type) != act_format::q8_k) {
    for (unsigned k = 0; k < 4; ++k)
      lw.wq[k] = legacy_q(t, b, e0 + k);
    return;
  }
  for (unsigned c = 0; c < 256; c += 32)
    for (unsigned k = 0; k < 4; ++k) {
      int q, scale;
      kquant_q(t, b, c + e0 + k, q, scale);
      lw.wq[c / 8 + k] = scale * q;
    }
}

/// Block i's step of lane `lane`'s part of the dot product of a row of
/// GGUF type `type` (b: block i of the row, lw: its weights decoded) with
/// the quantized activations at act: acc is the lane's float accumulator,
/// extra the minimum terms the format keeps beside the lanes
/// (Q4_1/Q5_1/Q5_K: one accumulator, kept by every lane alike; Q4_K: four,
/// lanes 0-3). The integer sums are exact, so decoding the weights apart
/// changes nothing.
EXO_HD inline void lane_block_step(std::uint32_t type, const std::uint8_t* b,
                                   const lane_weights& lw, const void* act,
                                   std::size_t i, unsigned lane, float& acc,
                                   float& extra) {
  const auto t = static_cast<quant::ggml_type>(type);
  const unsigned e0 = 4 * lane;
  if (act_format_of(type) != act_format::q8_k) {
    const auto* y = static_cast<const act_q8*>(act);
    const bool min_term
      = t == quant::ggml_type::q4_1 || t == quant::ggml_type::q5_1;
    if (min_term)
      extra = fmaf(half_at(b + 2), y[i].s, extra);
    int v = 0;
    for (unsigned k = 0; k < 4; ++k)
      v += lw.wq[k] * y[i].qs[e0 + k];
    acc = fmaf(mul_rn(half_at(b), y[i].d), static_cast<float>(v), acc);
    return;
  }
  const auto* y = static_cast<const act_q8k*>(act);
  const std::int16_t* bs = y[i].bsums;
  // The block's scale(s), in the order the portable dots fuse them.
  float d = 0.0f;
  switch (t) {
  case quant::ggml_type::q2_k: {
    d = mul_rn(y[i].d, half_at(b + 80));
    const float dmin = mul_rn(-y[i].d, half_at(b + 82));
    const int mins = (b[2 * lane] >> 4) * bs[2 * lane]
                     + (b[2 * lane + 1] >> 4) * bs[2 * lane + 1];
    acc = fmaf(dmin, static_cast<float>(mins), acc);
    break;
  }
  case quant::ggml_type::q3_k:
    d = mul_rn(y[i].d, half_at(b + 108));
    break;
  case quant::ggml_type::q4_k: {
    d = mul_rn(y[i].d, half_at(b));
    const float dmin = mul_rn(-y[i].d, half_at(b + 2));
    if (lane < 4) {
      int sc0, mn0, sc1, mn1;
      scale_min_k4(2 * lane, b + 4, sc0, mn0);
      scale_min_k4(2 * lane + 1, b + 4, sc1, mn1);
      const int p0 = bs[4 * lane] + bs[4 * lane + 1];
      const int p1 = bs[4 * lane + 2] + bs[4 * lane + 3];
      extra = fmaf(dmin, static_cast<float>(mn0 * p0 + mn1 * p1), extra);
    }
    break;
  }
  case quant::ggml_type::q5_k: {
    d = mul_rn(y[i].d, half_at(b));
    const float dmin = mul_rn(-y[i].d, half_at(b + 2));
    int total = 0;
    for (unsigned j = 0; j < 8; ++j) {
      int sc, mn;
      scale_min_k4(j, b + 4, sc, mn);
      total += mn * (bs[2 * j] + bs[2 * j + 1]);
    }
    extra = fmaf(dmin, static_cast<float>(total), extra);
    break;
  }
  default: // q6_k
    d = mul_rn(y[i].d, half_at(b + 208));
    break;
  }
  int s = 0;
  for (unsigned c = 0; c < 256; c += 32)
    for (unsigned k = 0; k < 4; ++k)
      s += lw.wq[c / 8 + k] * y[i].qs[c + e0 + k];
  if (t == quant::ggml_type::q6_k)
    s -= 32 * (static_cast<std::int8_t>(b[192 + 2 * lane]) * bs[2 * lane]
               + static_cast<std::int8_t>(b[192 + 2 * lane + 1])
                   * bs[2 * lane + 1]);
  acc = fmaf(d, static_cast<float>(s), acc);
}

/// Block i's step of lane `lane`'s part of the dot product of a row of
/// GGUF type `type` (w: the row's first block) with the quantized
/// activations at act (decode_lane_weights, then lane_block_step). The
/// steps of blocks 0 .. nb-1 in order are lane_dot; a kernel may run
/// several rows of activations block by block, each with the bits of its
/// own loop.
EXO_HD inline void lane_block(std::uint32_t type, const std::uint8_t* w,
                              const void* act, std::size_t i, unsigned lane,
                              float& acc, float& extra) {
  const std::uint8_t* b = w + i * lane_block_bytes(type);
  lane_weights lw;
  decode_lane_weights(type, b, lane, lw);
  lane_block_step(type, b, lw, act, i, lane, acc, extra);
}

/// Lane `lane`'s part of the dot product of the row at w (nb blocks of GGUF
/// type `type`) with the quantized activations at act: lane_block for
/// every block in order. combine_lanes sums the lanes.
EXO_HD inline void lane_dot(std::uint32_t type, const std::uint8_t* w,
                            const void* act, std::size_t nb, unsigned lane,
                            float* acc_out, float* extra_out) {
  float acc = 0.0f, extra = 0.0f;
  for (std::size_t i = 0; i < nb; ++i)
    lane_block(type, w, act, i, lane, acc, extra);
  *acc_out = acc;
  *extra_out = extra;
}

/// The row's result from its 8 lanes' accumulators and minimum terms, in
/// the order of the CPU engine (hsum_float_8, then the minimum terms).
EXO_HD inline float combine_lanes(std::uint32_t type, const float* acc,
                                  const float* extra) {
  const float r0 = acc[0] + acc[4], r1 = acc[1] + acc[5],
              r2 = acc[2] + acc[6], r3 = acc[3] + acc[7];
  const float sum = (r0 + r2) + (r1 + r3);
  switch (static_cast<quant::ggml_type>(type)) {
  case quant::ggml_type::q4_1:
  case quant::ggml_type::q5_1:
  case quant::ggml_type::q5_k:
    return sum + extra[0];
  case quant::ggml_type::q4_k:
    return sum + ((extra[0] + extra[2]) + (extra[1] + extra[3]));
  default:
    return sum;
  }
}

// -- Q4_K as llama.cpp's repacked kernels sum it ------------------------------
// On x86 llama.cpp repacks Q4_K matrices whose row count is a multiple of 8
// and sums each row's super-blocks in order (backends/quant_repack.hpp):
//   acc  = fma(float(isum), d * d8, acc),  accm = fma(float(imin), dmin * d8,
//   accm),  result acc - accm,
// one step per super-block, or, for the first tokens of a batch on a CPU
// whose llama.cpp build is AVX-512 (quant::q4_k_pair_tokens), one per pair
// of sub-blocks. The integer sums are exact in any order, so the 8 lanes
// split isum.

/// Whether a Q4_K matrix of `rows` rows is summed the repacked way.
EXO_HD inline bool q4_k_repacked(std::size_t rows) {
  return rows % 8 == 0;
}

/// Lane `lane`'s part of the super-block's isum = sum_e scale(e) q(e) y(e)
/// over elements c0 .. c1-1 (whole groups of 32: the super-block, or a
/// pair of sub-blocks 64p .. 64p+63).
EXO_HD inline int q4_k_lane_isum(const std::uint8_t* b, const act_q8k& y,
                                 unsigned lane, unsigned c0 = 0,
                                 unsigned c1 = 256) {
  int s = 0;
  for (unsigned c = c0; c < c1; c += 32)
    for (unsigned e = c + 4 * lane; e < c + 4 * lane + 4; ++e) {
      int q, scale;
      kquant_q(quant::ggml_type::q4_k, b, e, q, scale);
      s += scale * (q * y.qs[e]);
    }
  return s;
}

/// The super-block's imin = sum_j m_j (bsums[2j] + bsums[2j + 1]).
EXO_HD inline int q4_k_imin(const std::uint8_t* b, const act_q8k& y) {
  int total = 0;
  for (unsigned j = 0; j < 8; ++j) {
    int sc, mn;
    scale_min_k4(j, b + 4, sc, mn);
    total += mn * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
  }
  return total;
}

/// Pair p's imin = m_2p (bsums[4p] + bsums[4p+1]) + m_2p+1 (bsums[4p+2] +
/// bsums[4p+3]): the minimums of sub-blocks 2p and 2p + 1.
EXO_HD inline int q4_k_imin_pair(const std::uint8_t* b, const act_q8k& y,
                                 unsigned p) {
  int total = 0;
  for (unsigned j = 2 * p; j < 2 * p + 2; ++j) {
    int sc, mn;
    scale_min_k4(j, b + 4, sc, mn);
    total += mn * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
  }
  return total;
}

/// One step of the repacked sums: a super-block's (the gemv's, and the
/// gemm's by_super_block) or a pair of sub-blocks' (the gemm's by_pair,
/// quant::q4_k_pair_tokens).
EXO_HD inline void q4_k_repacked_step(const std::uint8_t* b, const act_q8k& y,
                                      int isum, int imin, float& acc,
                                      float& accm) {
  acc = fmaf(static_cast<float>(isum), mul_rn(half_at(b), y.d), acc);
  accm = fmaf(static_cast<float>(imin), mul_rn(half_at(b + 2), y.d), accm);
}

/// x rounded to the nearest bfloat16 (ties to even) and back, as ggml's
/// fp32 -> bf16 conversion: what llama.cpp does to activations that meet
/// BF16 weights.
EXO_HD inline float round_to_bf16(float x) {
  std::uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: quieted
    u = (u | 0x00400000u) & 0xffff0000u;
  else
    u = ((u + (0x7fffu + ((u >> 16) & 1u))) >> 16) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/// The rest of a BF16 row's ggml_vec_dot_bf16 after its blocks of 32 (sum:
/// the two accumulators' trees added in double): the products (exact in
/// float) added in double one after the other; q rounded to BF16 here
/// where round_q.
EXO_HD inline float vecdot_rest_bf16(const std::uint16_t* w, const float* q,
                                     std::size_t np, std::size_t n,
                                     double sum, bool round_q) {
  for (std::size_t i = np; i < n; ++i)
    sum = dadd_rn(sum, mul_rn(bf16_to_float(w[i]),
                              round_q ? round_to_bf16(q[i]) : q[i]));
  return static_cast<float>(sum);
}

// -- a q8_0 KV cache (llama.cpp's --cache-type-k/-v q8_0) --------------------

/// One 34-byte Q8_0 block of a KV cache row from 32 floats, as llama.cpp's
/// x86 CPU backend writes it (host::quantize_q8_0_activations): d = amax /
/// 127 stored as half, q = x * (127 / amax) rounded to nearest even.
EXO_HD inline void quantize_kv_q8_0(const float* x, std::uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = fabsf(x[j]);
    amax = amax > a ? amax : a;
  }
  const std::uint16_t h = float_to_half(amax / 127.0f);
  out[0] = static_cast<std::uint8_t>(h & 0xffu);
  out[1] = static_cast<std::uint8_t>(h >> 8);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < 32; ++j)
    out[2 + j] = static_cast<std::uint8_t>(
      static_cast<std::int8_t>(rintf(mul_rn(x[j], id))));
}

/// A value of a q8_0 KV cache as attention reads it: its byte times its
/// block's half scale (ggml's dequantize_row_q8_0).
struct q8_kv {
  float v;
};
EXO_HD inline float kv_value(q8_kv x) {
  return x.v;
}

/// A q8_0 cache addressed by value, as the attention kernels address an
/// f32 or f16 cache by pointer: `at` values past `base` (a block
/// boundary).
struct q8_kv_ptr {
  const std::uint8_t* base;
  std::size_t at;
  EXO_HD q8_kv_ptr operator+(std::size_t n) const {
    return {base, at + n};
  }
  EXO_HD q8_kv operator[](std::size_t i) const {
    const std::size_t x = at + i;
    const std::uint8_t* b = base + x / 32 * 34;
    return {mul_rn(static_cast<float>(static_cast<std::int8_t>(b[2 + x % 32])),
                   half_at(b))};
  }
};

/// ggml's fast Walsh-Hadamard transform of one run of n values in place
/// (host::hadamard): each times `scale` (1 / sqrtf(n)), then the
/// butterflies u + v, u - v for strides 1, 2, 4, ... n / 2. Exact
/// operations in a fixed order: the host's bits.
EXO_HD inline void hadamard_run(float* x, std::size_t n, float scale) {
  for (std::size_t j = 0; j < n; ++j)
    x[j] = mul_rn(x[j], scale);
  for (std::size_t len = 1; len < n; len <<= 1)
    for (std::size_t i = 0; i < n; i += 2 * len)
      for (std::size_t j = 0; j < len; ++j) {
        const float u = x[i + j];
        const float v = x[i + len + j];
        x[i + j] = u + v;
        x[i + len + j] = u - v;
      }
}

} // namespace exo::backend::gpu::math
