#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf/gguf.hpp"

namespace exo::model {

/// Builds a GGUF version 3 file: metadata first, then tensors, written with
/// the alignment given by general.alignment (32 unless set).
class gguf_writer {
public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  /// Copies a metadata entry read from a file, any type (arrays too);
  /// throws gguf_error when the value does not hold what its type says.
  void set_value(const gguf_kv& kv);

  /// Adds a tensor with dimensions `ne` (ne[0] contiguous) whose encoded
  /// bytes are `data` (row_bytes(type, product of ne) of them).
  void add_tensor(const std::string& name, std::vector<uint64_t> ne,
                  tensor_type type, std::vector<uint8_t> data);

  /// Adds a tensor from floats, encoding them as `type`.
  void add_tensor(const std::string& name, std::vector<uint64_t> ne,
                  tensor_type type, const std::vector<float>& values);

  /// Writes the file; throws gguf_error when it cannot be written.
  void write(const std::string& path) const;

  /// Returns the encoded file.
  std::vector<uint8_t> bytes() const;

private:
  struct entry {
    std::string key;
    gguf_value_type type;
    std::vector<uint8_t> encoded; // the value without key and type
  };
  struct tensor {
    std::string name;
    std::vector<uint64_t> ne;
    tensor_type type;
    std::vector<uint8_t> data;
  };
  void put(const std::string& key, gguf_value_type t,
           std::vector<uint8_t> encoded);

  std::vector<entry> kvs_;
  std::vector<tensor> tensors_;
  uint32_t alignment_ = 32;
};

} // namespace exo::model
