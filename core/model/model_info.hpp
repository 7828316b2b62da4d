#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf/gguf.hpp"

namespace exo::model {

/// What `exo-model info` says about a GGUF file first: what a user needs
/// to know about a downloaded model, read from metadata and the tensor
/// table only (no architecture checks).
struct model_summary {
  std::string architecture; ///< general.architecture ("?" when absent)
  std::string name;         ///< general.name, may be empty
  uint64_t parameters = 0;  ///< elements of every tensor
  uint64_t tensor_bytes = 0;
  struct type_share {
    tensor_type type;
    uint64_t tensors = 0;
    uint64_t bytes = 0;
    double share = 0; ///< of tensor_bytes
  };
  std::vector<type_share> types; ///< largest share first
  std::string tokenizer_model;   ///< tokenizer.ggml.model, may be empty
  std::string tokenizer_pre;     ///< tokenizer.ggml.pre, may be empty
  uint64_t vocab_size = 0;       ///< tokenizer.ggml.tokens entries
  bool has_chat_template = false;
  uint64_t context_length = 0; ///< <arch>.context_length, 0 when absent
};

model_summary summarize(const gguf_file& f);

/// Lines such as "parameters: 1.24 B" for printing.
std::vector<std::string> summary_lines(const model_summary& s);

} // namespace exo::model
