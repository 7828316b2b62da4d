#pragma once

/// One libFuzzer entry point per target (fuzz/*_fuzz.cpp). Built two ways:
/// with clang's -fsanitize=fuzzer for `make fuzz` (coverage-guided, new
/// inputs), and with replay_main.cpp for `make test` / `make asan`, which
/// runs every file of the target's corpus (fuzz/corpus/NAME: seeds and
/// every crash found so far) once: the corpus is a regression suite.
///
/// A target feeds bytes to one parser and accepts only its documented
/// errors; anything else (a crash, a sanitizer report, another exception,
/// an unbounded allocation) is a finding.

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size);
