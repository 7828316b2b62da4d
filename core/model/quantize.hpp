#pragma once

#include <string>

#include "core/gguf/gguf.hpp"
#include "core/gguf/gguf_writer.hpp"
#include "core/model/quant_mix.hpp"

namespace exo::model {

/// Re-encodes a llama-architecture GGUF whose weights are F32, F16 or BF16
/// as file type `ft`, as llama-quantize does without an importance matrix:
/// every metadata entry is kept (general.file_type set to ft's number),
/// 1-D tensors stay as they are, and each matrix gets matrix_type(ft, ...)
/// (the Q4_K_M/Q5_K_M/Q3_K_M rules, the Q6_K output head) encoded with
/// ggml's reference quantizers. A matrix whose rows are not whole blocks of
/// its K-quant falls back as llama.cpp's does (Q4_K to Q5_0, Q5_K to Q5_1,
/// Q6_K to Q8_0, Q2_K/Q3_K to Q4_0), then to F16. Throws gguf_error naming
/// the tensor for weights that are already quantized.
gguf_writer quantize_model(const gguf_file& in, const file_type& ft);

/// quantize_model(*gguf_file::open(in), ft).write(out).
void quantize_file(const std::string& in, const std::string& out,
                   const file_type& ft);

} // namespace exo::model
