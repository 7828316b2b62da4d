// The GGUF reader (header, metadata, tensor table) on bytes in memory: a
// file or a gguf_error naming the problem.
#include "core/gguf/gguf.hpp"
#include "fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  try {
    auto f = exo::model::gguf_file::parse(data, size);
    // Walk what a user sees of it (`exo-model info`).
    for (auto& kv : f->metadata())
      (void) exo::model::to_display_string(kv.value);
    for (auto& t : f->tensors())
      (void) t.name.size();
  } catch (const exo::model::gguf_error&) {
  }
  return 0;
}
