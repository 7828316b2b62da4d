#pragma once

/// Which bytes of a GGUF Llama file a pipeline stage reads, so that a node
/// running layers [first, last) receives those and not the whole model.

#include "core/model/llama_model.hpp"

#include <cstdint>
#include <vector>

namespace exo::model {

struct byte_range {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

/// The ranges of `m`'s file that a stage of layers [first, last) needs, in
/// file order, adjacent tensors of one layer merged (with the alignment
/// padding between them) but never two layers, so a layer is the same
/// range whichever stage needs it: the header up to the data section (metadata, vocabulary, tensor
/// table: loading the model needs it whole), every tensor of its layers,
/// token_embd on the first stage, output_norm and the output head on the
/// last (token_embd when tied), rope_freqs when present.
/// Throws model_error for an empty or out-of-range layer range.
std::vector<byte_range> stage_file_ranges(const llama_model& m,
                                          std::uint32_t first,
                                          std::uint32_t last);

} // namespace exo::model
