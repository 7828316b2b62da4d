#include "backends/ops.hpp"

#include <string>

namespace exo::backend {

namespace {

constexpr std::array<op_rule, op_count> rules{{
  {op_kind::add, "add", 2, 2, 1, 0, {"a", "b"}, "out", {"count"}, {}, true},
  {op_kind::mul, "mul", 2, 2, 1, 0, {"a", "b"}, "out", {"count"}, {}, true},
  {op_kind::matmul, "matmul", 2, 2, 3, 0, {"a", "b"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_t, "matmul_t", 2, 2, 3, 0, {"a", "b"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_f32, "matmul_f32", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_f16, "matmul_f16", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q8_0, "matmul_q8_0", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::rms_norm, "rms_norm", 2, 2, 2, 1, {"x", "weight"}, "out",
   {"rows", "dim"}, {"eps"}, true},
  {op_kind::rope, "rope", 1, 2, 4, 1, {"positions", "freq_factors"}, "x",
   {"rows", "heads", "head_dim", "n_rot"}, {"freq_base"}, false},
  {op_kind::attention, "attention", 3, 3, 6, 1, {"q", "k", "v"}, "out",
   {"n_tokens", "pos0", "n_heads", "n_kv_heads", "head_dim", "kv_stride"},
   {"scale"}, false},
  {op_kind::silu_mul, "silu_mul", 2, 2, 1, 0, {"gate", "up"}, "out",
   {"count"}, {}, true},
  {op_kind::rope_neox, "rope_neox", 1, 2, 4, 1, {"positions", "freq_factors"},
   "x", {"rows", "heads", "head_dim", "n_rot"}, {"freq_base"}, false},
  {op_kind::matmul_bf16, "matmul_bf16", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q4_0, "matmul_q4_0", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q4_1, "matmul_q4_1", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q5_0, "matmul_q5_0", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q5_1, "matmul_q5_1", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q2_k, "matmul_q2_k", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q3_k, "matmul_q3_k", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q4_k, "matmul_q4_k", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q5_k, "matmul_q5_k", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q6_k, "matmul_q6_k", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_rows_f32, "matmul_rows_f32", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_rows_f16, "matmul_rows_f16", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::attention_f16, "attention_f16", 3, 3, 6, 1, {"q", "k", "v"},
   "out",
   {"n_tokens", "pos0", "n_heads", "n_kv_heads", "head_dim", "kv_stride"},
   {"scale"}, false},
  {op_kind::to_f16, "to_f16", 1, 1, 1, 0, {"a"}, "out", {"count"}, {}, false},
  {op_kind::matmul_rows_q4_k, "matmul_rows_q4_k", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::attention_q8_0, "attention_q8_0", 3, 3, 6, 1, {"q", "k", "v"},
   "out",
   {"n_tokens", "pos0", "n_heads", "n_kv_heads", "head_dim", "kv_stride"},
   {"scale"}, false},
  {op_kind::to_q8_0, "to_q8_0", 1, 1, 1, 0, {"a"}, "out", {"count"}, {},
   false},
  {op_kind::hadamard, "hadamard", 1, 1, 2, 0, {"a"}, "out", {"count", "n"},
   {}, true},
  {op_kind::attention_paged, "attention_paged", 4, 4, 9, 1,
   {"q", "k", "v", "table"}, "out",
   {"n_tokens", "pos0", "n_heads", "n_kv_heads", "head_dim", "kv_stride",
    "kv_type", "block_positions", "block_stride"},
   {"scale"}, false},
  {op_kind::attention_paged_rows, "attention_paged_rows", 4, 4, 9, 1,
   {"q", "k", "v", "tables"}, "out",
   {"rows", "n_heads", "n_kv_heads", "head_dim", "kv_stride", "kv_type",
    "block_positions", "block_stride", "table_len"},
   {"scale"}, false},
  {op_kind::store_kv_rows, "store_kv_rows", 2, 2, 7, 0, {"a", "tables"}, "kv",
   {"rows", "width", "kv_stride", "kv_type", "block_positions",
    "block_stride", "table_len"},
   {}, false},
  {op_kind::rope_cached, "rope_cached", 1, 1, 5, 0, {"cache"}, "x",
   {"rows", "heads", "head_dim", "n_rot", "neox"}, {}, false},
  {op_kind::matmul_q4_k_x16, "matmul_q4_k_x16", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
  {op_kind::matmul_rows_q4_k_x16, "matmul_rows_q4_k_x16", 2, 2, 3, 0,
   {"a", "w"}, "c", {"m", "n", "k"}, {}, false},
  {op_kind::matmul_q6_k_x16, "matmul_q6_k_x16", 2, 2, 3, 0, {"a", "w"}, "c",
   {"m", "n", "k"}, {}, false},
}};

// The table is indexed by wire number - 1.
constexpr bool table_in_order() {
  for (std::size_t i = 0; i < rules.size(); ++i)
    if (to_wire(rules[i].kind) != i + 1)
      return false;
  return true;
}
static_assert(table_in_order(), "op_rules must follow the wire numbers");

/// "2 inputs (a, b)" or "1 or 2 inputs (positions, freq_factors)".
std::string expected(std::size_t lo, std::size_t hi, const char* what,
                     const char* const* names) {
  std::string s = std::to_string(lo);
  if (hi != lo)
    s += " or " + std::to_string(hi);
  s += std::string{" "} + what;
  if (hi > 0) {
    s += " (";
    for (std::size_t i = 0; i < hi; ++i)
      s += (i > 0 ? ", " : "") + std::string{names[i]};
    s += ")";
  }
  return s;
}

} // namespace

const std::array<op_rule, op_count>& op_rules() noexcept {
  return rules;
}

const op_rule& rule_of(op_kind kind) noexcept {
  auto i = static_cast<std::size_t>(to_wire(kind)) - 1;
  return rules[i < rules.size() ? i : 0];
}

const char* to_string(op_kind kind) noexcept {
  auto n = to_wire(kind);
  return n >= 1 && n <= rules.size() ? rules[n - 1].name : "unknown";
}

std::optional<op_kind> op_from_wire(std::uint8_t n) noexcept {
  if (n >= 1 && n <= rules.size())
    return rules[n - 1].kind;
  return std::nullopt;
}

status check_counts(op_kind kind, std::size_t n_inputs, std::size_t n_dims,
                    std::size_t n_scalars) {
  if (!op_from_wire(to_wire(kind)))
    return fail(errc::unsupported, "unknown operation number "
                                     + std::to_string(to_wire(kind)));
  const auto& r = rule_of(kind);
  auto refuse = [&](std::string want, std::size_t got) {
    return fail(errc::invalid_argument, std::string{r.name} + ": expects "
                                          + want + ", got "
                                          + std::to_string(got));
  };
  if (n_inputs < r.min_inputs || n_inputs > r.max_inputs)
    return refuse(expected(r.min_inputs, r.max_inputs, "inputs",
                           r.inputs.data()),
                  n_inputs);
  if (n_dims != r.n_dims)
    return refuse(expected(r.n_dims, r.n_dims, "dims", r.dims.data()),
                  n_dims);
  if (n_scalars != r.n_scalars)
    return refuse(expected(r.n_scalars, r.n_scalars, "scalars",
                           r.scalars.data()),
                  n_scalars);
  return {};
}

} // namespace exo::backend
