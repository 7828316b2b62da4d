#include "core/model/quantize.hpp"

#include <cstdlib>
#include <vector>

#include "core/gguf/quant.hpp"

namespace exo::model {

namespace {

uint64_t arch_uint(const gguf_file& f, const std::string& arch,
                   const std::string& key, uint64_t fallback) {
  return f.get_uint_or(arch + "." + key, fallback);
}

/// llama.cpp's convert_incompatible_tensor choices, then F16.
tensor_type fit_rows(tensor_type t, uint64_t cols) {
  if (cols % block_elements(t) == 0)
    return t;
  tensor_type fallback = tensor_type::f16;
  switch (t) {
    case tensor_type::q2_k:
    case tensor_type::q3_k: fallback = tensor_type::q4_0; break;
    case tensor_type::q4_k: fallback = tensor_type::q5_0; break;
    case tensor_type::q5_k: fallback = tensor_type::q5_1; break;
    case tensor_type::q6_k: fallback = tensor_type::q8_0; break;
    default: break;
  }
  return cols % block_elements(fallback) == 0 ? fallback : tensor_type::f16;
}

} // namespace

gguf_writer quantize_model(const gguf_file& in, const file_type& ft) {
  const std::string arch = in.get_string_or("general.architecture", "llama");
  const uint32_t n_layer =
    static_cast<uint32_t>(arch_uint(in, arch, "block_count", 1));
  const uint64_t heads = arch_uint(in, arch, "attention.head_count", 1);
  const uint64_t kv_heads =
    arch_uint(in, arch, "attention.head_count_kv", heads);
  const bool has_output = in.find_tensor("output.weight") != nullptr;

  gguf_writer w;
  for (auto& kv : in.metadata())
    if (kv.key != "general.file_type")
      w.set_value(kv);
  w.set_u32("general.file_type", llama_ftype(ft));

  std::vector<float> row;
  for (auto& t : in.tensors()) {
    if (t.ne.size() < 2) { // norms, rope_freqs: kept as they are
      std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
      w.add_tensor(t.name, t.ne, t.type, std::move(bytes));
      continue;
    }
    if (t.type != tensor_type::f32 && t.type != tensor_type::f16
        && t.type != tensor_type::bf16)
      throw gguf_error("tensor '" + t.name + "' is already "
                       + to_string(t.type)
                       + "; quantize needs F32, F16 or BF16 weights");
    matrix_role r;
    r.name = t.name;
    if (t.name.compare(0, 4, "blk.") == 0)
      r.layer = static_cast<uint32_t>(
        std::strtoul(t.name.c_str() + 4, nullptr, 10));
    r.n_layer = n_layer;
    r.n_gqa = static_cast<uint32_t>(kv_heads ? heads / kv_heads : 1);
    r.has_output = has_output;
    r.cols = t.ne[0];
    const tensor_type to = fit_rows(matrix_type(ft, r), t.ne[0]);
    const uint64_t cols = t.ne[0], rows = t.n_elements / cols;
    const uint64_t in_rb = row_bytes(t.type, cols);
    const uint64_t out_rb = row_bytes(to, cols);
    std::vector<uint8_t> bytes(out_rb * rows);
    row.resize(cols);
    for (uint64_t y = 0; y < rows; ++y) {
      dequantize(t.type, t.data + y * in_rb, row.data(), cols);
      quantize(to, row.data(), bytes.data() + y * out_rb, cols);
    }
    w.add_tensor(t.name, t.ne, to, std::move(bytes));
  }
  return w;
}

void quantize_file(const std::string& in, const std::string& out,
                   const file_type& ft) {
  quantize_model(*gguf_file::open(in), ft).write(out);
}

} // namespace exo::model
