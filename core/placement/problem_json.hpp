#pragma once

#include <string>
#include <string_view>

#include "core/placement/problem.hpp"

namespace exo::placement {

/// Parses a JSON problem (format: config/placement/README.md) and validates
/// it. Throws problem_error naming the key path of the first problem:
/// unknown keys, wrong types and out-of-range values are all errors.
problem parse_problem_json(std::string_view text);

/// Reads and parses a JSON problem file; throws problem_error (also when
/// the file cannot be read).
problem read_problem_file(const std::string& path);

/// Parses a byte count such as "24GiB", "1.5 GB", "512 MiB" or "1000".
/// Throws problem_error naming `path` on bad input.
std::uint64_t parse_byte_string(std::string_view s, const std::string& path);

} // namespace exo::placement
