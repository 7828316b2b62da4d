#include "core/model/quant_mix.hpp"

#include <cctype>

namespace exo::model {

namespace {

bool is_quantized(tensor_type t) {
  return t != tensor_type::f32 && t != tensor_type::f16
         && t != tensor_type::bf16;
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

/// llama.cpp's use_more_bits: the first and last eighth of the layers and
/// every third layer in between.
bool use_more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

} // namespace

bool parse_file_type(const std::string& s, file_type& out) {
  std::string l = s;
  for (auto& c : l)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "q3_k_m")
    out = {tensor_type::q3_k, file_type::mix::q3_k_m};
  else if (l == "q4_k_m")
    out = {tensor_type::q4_k, file_type::mix::q4_k_m};
  else if (l == "q5_k_m")
    out = {tensor_type::q5_k, file_type::mix::q5_k_m};
  else if (const tensor_type* t = parse_tensor_type(l))
    out = {*t, file_type::mix::none};
  else
    return false;
  return true;
}

std::string to_string(const file_type& ft) {
  switch (ft.kind) {
    case file_type::mix::q3_k_m: return "q3_k_m";
    case file_type::mix::q4_k_m: return "q4_k_m";
    case file_type::mix::q5_k_m: return "q5_k_m";
    case file_type::mix::none: break;
  }
  std::string n = to_string(ft.base);
  for (auto& c : n)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return n;
}

uint32_t llama_ftype(const file_type& ft) {
  switch (ft.kind) {
    case file_type::mix::q3_k_m: return 12;
    case file_type::mix::q4_k_m: return 15;
    case file_type::mix::q5_k_m: return 17;
    case file_type::mix::none: break;
  }
  switch (ft.base) {
    case tensor_type::f32: return 0;
    case tensor_type::f16: return 1;
    case tensor_type::q4_0: return 2;
    case tensor_type::q4_1: return 3;
    case tensor_type::q8_0: return 7;
    case tensor_type::q5_0: return 8;
    case tensor_type::q5_1: return 9;
    case tensor_type::q2_k: return 10;
    case tensor_type::q3_k: return 12; // llama.cpp has no pure Q3_K: Q3_K_M's
    case tensor_type::q4_k: return 15; // ... and Q4_K_M's number
    case tensor_type::q5_k: return 17;
    case tensor_type::q6_k: return 18;
    case tensor_type::bf16: return 32;
  }
  return 0;
}

tensor_type matrix_type(const file_type& ft, const matrix_role& r) {
  const tensor_type base = ft.base;
  const std::string& n = r.name;
  const bool head = n == "output.weight"
                    || (!r.has_output && n == "token_embd.weight");
  if (head) {
    if (!is_quantized(base))
      return base;
    if (r.cols % 256 != 0)
      return tensor_type::q8_0;
    return base == tensor_type::q8_0 ? tensor_type::q8_0 : tensor_type::q6_k;
  }
  const int i = static_cast<int>(r.layer), nl = static_cast<int>(r.n_layer);
  switch (ft.kind) {
    case file_type::mix::none:
      return base;
    case file_type::mix::q3_k_m:
      if (contains(n, "attn_v.weight"))
        return i < 2 ? tensor_type::q5_k : tensor_type::q4_k;
      if (contains(n, "ffn_down"))
        return i < nl / 16 ? tensor_type::q5_k : tensor_type::q4_k;
      if (contains(n, "attn_output.weight"))
        return tensor_type::q4_k;
      return base;
    case file_type::mix::q4_k_m:
    case file_type::mix::q5_k_m:
      if ((contains(n, "attn_v.weight") || contains(n, "ffn_down"))
          && use_more_bits(i, nl))
        return tensor_type::q6_k;
      return base;
  }
  return base;
}

} // namespace exo::model
