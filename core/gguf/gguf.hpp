#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace exo::model {

/// Raised for every malformed or unsupported GGUF file; the message names the
/// problem (and the offending key or tensor where there is one).
class gguf_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The value types of GGUF metadata (numbering from the GGUF specification).
enum class gguf_value_type : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

/// Returns a readable name such as "uint32" for `t`.
const char* to_string(gguf_value_type t);

/// Tensor element types (ggml numbering): the weight formats of
/// backends/quant_formats.hpp (llama.cpp's F32, F16, BF16, Q4_0 ... Q8_0 and
/// the K-quants Q2_K ... Q6_K). Any other number in a file (the activation
/// formats Q8_1 and Q8_K included) is refused at load, naming it.
enum class tensor_type : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  bf16 = 30,
};

/// Every tensor_type, in id order.
const std::vector<tensor_type>& all_tensor_types();

/// Returns llama.cpp's file-type spelling in capitals: "F32", "Q8_0",
/// "Q4_K", "BF16" ("?" for a value outside the enumeration).
const char* to_string(tensor_type t);

/// The tensor type whose ggml id is `id`, or nullptr when the id is not a
/// weight format handled here.
const tensor_type* find_tensor_type(uint32_t id);

/// The tensor type named `name`, case-insensitively ("q4_k", "Q4_K",
/// "bf16"), or nullptr.
const tensor_type* parse_tensor_type(const std::string& name);

/// Whether `t` is a K-quant (256-element super-blocks).
bool is_k_quant(tensor_type t);

/// Elements per block of `t` (1 for F32/F16/BF16, 32, or 256 for K-quants).
uint64_t block_elements(tensor_type t);

/// Bytes per block of `t` (e.g. 4 for F32, 34 for Q8_0, 144 for Q4_K).
uint64_t block_bytes(tensor_type t);

/// Bytes needed to store `n` elements of `t`; throws gguf_error when `n` is
/// not a whole number of blocks or the size overflows.
uint64_t row_bytes(tensor_type t, uint64_t n);

/// An array metadata value: element type plus the values, each stored in the
/// widest C++ type of its kind.
struct gguf_array;

/// One metadata value. Integers keep their signedness in the widest type;
/// the original type is kept in `gguf_kv::type`.
using gguf_value = std::variant<uint64_t, int64_t, double, bool, std::string,
                                std::shared_ptr<gguf_array>>;

struct gguf_array {
  gguf_value_type type = gguf_value_type::u8;
  std::vector<gguf_value> values;
};

/// One metadata entry.
struct gguf_kv {
  std::string key;
  gguf_value_type type = gguf_value_type::u8;
  gguf_value value;
};

/// One entry of the tensor table.
struct tensor_info {
  std::string name;
  std::vector<uint64_t> ne; ///< ne[0] is the contiguous dimension.
  tensor_type type = tensor_type::f32;
  uint64_t offset = 0; ///< Relative to the start of the data section.
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr; ///< Points into the mapped file.
};

/// A parsed, validated GGUF (version 3) file whose tensor data stays in a
/// read-only memory mapping (or in an owned buffer, for in-memory parsing).
class gguf_file {
public:
  /// Maps and parses the file at `path`; throws gguf_error.
  static std::shared_ptr<gguf_file> open(const std::string& path);

  /// Parses a copy of `bytes` held in memory; throws gguf_error.
  static std::shared_ptr<gguf_file> parse(const uint8_t* bytes, size_t size);

  ~gguf_file();
  gguf_file(const gguf_file&) = delete;
  gguf_file& operator=(const gguf_file&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  const std::vector<gguf_kv>& metadata() const { return kvs_; }
  const std::vector<tensor_info>& tensors() const { return tensors_; }

  /// Returns the entry for `key` or nullptr.
  const gguf_kv* find(const std::string& key) const;

  /// Returns the tensor called `name` or nullptr.
  const tensor_info* find_tensor(const std::string& name) const;

  /// Returns the tensor called `name`; throws gguf_error when missing.
  const tensor_info& tensor(const std::string& name) const;

  /// Typed accessors; throw gguf_error naming the key when it is missing or
  /// has the wrong type.
  uint64_t get_uint(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const gguf_array& get_array(const std::string& key) const;

  /// Like the accessors above but return `fallback` when the key is absent.
  uint64_t get_uint_or(const std::string& key, uint64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;
  std::string get_string_or(const std::string& key,
                            const std::string& fallback) const;

private:
  gguf_file() = default;
  void parse_all();

  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;
  std::vector<uint8_t> owned_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<gguf_kv> kvs_;
  std::map<std::string, size_t> kv_index_;
  std::vector<tensor_info> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

/// Renders a metadata value for display (arrays are abbreviated).
std::string to_display_string(const gguf_value& v, size_t max_items = 8);

} // namespace exo::model
