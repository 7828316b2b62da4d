#pragma once

/// The one strict parser for numbers a user or client types: integers,
/// reals, sizes ("4GiB") and durations ("90s"). Console commands, program
/// options, token issuing, gateway query parameters and config strings all
/// go through it, so "-1", "1e9", "4G" or "18446744073709551616" mean the
/// same thing (an error) everywhere instead of wrapping or truncating.
///
/// Syntax (no locale, no whitespace anywhere, no leading '+'):
/// - integer: -?[0-9]+ (decimal only; leading zeros are decimal, not
///   octal: "010" is 10). No hex, no exponent, no fraction.
/// - real: -?([0-9]+(.[0-9]*)?|.[0-9]+)([eE][-+]?[0-9]+)? ; the value must
///   be finite ("nan", "inf", "1e999" refused) and a non-zero text must not
///   round to 0 ("1e-400" refused). No hex floats.
/// - size: N[unit], N a non-negative decimal (fraction allowed when the
///   result is a whole number of bytes: "1.5KiB" = 1536, "0.5B" refused),
///   unit one of
///     B (or none) = bytes,
///     KiB MiB GiB TiB = 2^10 .. 2^40 (the "i" forms are unambiguous, so any
///       letter case is accepted: "gib", "GIB"),
///     kB MB GB TB = 10^3 .. 10^12 (exactly these spellings),
///   while K M G T, KB and the lower-case m/g/t forms are refused as
///   ambiguous with a hint ("'4G': ambiguous unit 'G', use 4GiB (2^30) or
///   4GB (10^9)"), and "b" (bits) is refused.
/// - duration: N[unit], N as for sizes, unit one of ns us µs ms s m h d
///   (exact case: "M" and "S" are refused); without a unit the caller's
///   bare unit applies (e.g. seconds for a token's ttl), or, where the
///   caller gives none, a unit is required. The result must be a whole
///   number of nanoseconds (or of the requested unit). Durations and sizes
///   are never negative.
///
/// Every error is a number_error (a std::invalid_argument) whose message
/// quotes the text and names the rule:
///   "'1e9' is not an integer (digits only)"
///   "'-1' must be >= 0"
///   "'18446744073709551616' is larger than 18446744073709551615"
/// An optional `name` prefixes the message: "ttl: '1e9' is not an integer".

#include <chrono>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace exo::text {

class number_error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {
std::int64_t parse_signed(std::string_view text, std::int64_t min,
                          std::int64_t max, std::string_view name);
std::uint64_t parse_unsigned(std::string_view text, std::uint64_t min,
                             std::uint64_t max, std::string_view name);
} // namespace detail

/// A decimal integer in [min, max] (default: T's range).
template <class T>
T parse_integer(std::string_view text,
                T min = std::numeric_limits<T>::min(),
                T max = std::numeric_limits<T>::max(),
                std::string_view name = {}) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>,
                "parse_integer: T must be an integer type");
  if constexpr (std::is_signed_v<T>)
    return static_cast<T>(detail::parse_signed(text, min, max, name));
  else
    return static_cast<T>(detail::parse_unsigned(text, min, max, name));
}

/// A finite real in [min, max].
double parse_real(std::string_view text,
                  double min = std::numeric_limits<double>::lowest(),
                  double max = std::numeric_limits<double>::max(),
                  std::string_view name = {});

/// A size in bytes, at most `max`.
std::uint64_t parse_size(std::string_view text,
                         std::uint64_t max
                         = std::numeric_limits<std::uint64_t>::max(),
                         std::string_view name = {});

/// A duration, at most `max`; a text without a unit counts in `bare_unit`,
/// or is refused when bare_unit is zero.
std::chrono::nanoseconds
parse_duration(std::string_view text,
               std::chrono::nanoseconds max
               = std::chrono::nanoseconds::max(),
               std::chrono::nanoseconds bare_unit
               = std::chrono::nanoseconds::zero(),
               std::string_view name = {});

/// A duration as a whole count of Unit (e.g. std::chrono::seconds), at
/// most `max`; a text without a unit counts in Unit. "1500ms" as seconds
/// is refused (not a whole number of seconds).
template <class Unit>
Unit parse_duration_as(std::string_view text, Unit max = Unit::max(),
                       std::string_view name = {});

/// The canonical text of a duration, e.g. "1h", "90s", "1500ms" (the
/// largest unit that divides it exactly).
std::string format_duration(std::chrono::nanoseconds d);

/// The canonical text of a size, e.g. "4GiB", "1536B" (the largest binary
/// unit that divides it exactly).
std::string format_size(std::uint64_t bytes);

// ---------------------------------------------------------------------

namespace detail {
/// Whole count of `unit` in the duration given by `text`.
std::int64_t parse_duration_count(std::string_view text,
                                  std::chrono::nanoseconds unit,
                                  const char* unit_name, std::int64_t max,
                                  std::string_view name);
template <class U> constexpr const char* unit_name() {
  if constexpr (std::is_same_v<U, std::chrono::nanoseconds>) return "ns";
  else if constexpr (std::is_same_v<U, std::chrono::microseconds>) return "us";
  else if constexpr (std::is_same_v<U, std::chrono::milliseconds>) return "ms";
  else if constexpr (std::is_same_v<U, std::chrono::seconds>) return "s";
  else if constexpr (std::is_same_v<U, std::chrono::minutes>) return "m";
  else if constexpr (std::is_same_v<U, std::chrono::hours>) return "h";
  else return "units";
}
} // namespace detail

template <class Unit>
Unit parse_duration_as(std::string_view text, Unit max,
                       std::string_view name) {
  static_assert(std::is_integral_v<typename Unit::rep>,
                "parse_duration_as: Unit must count in integers");
  // A unit coarser than what nanoseconds can hold (> ~292 years) is not a
  // unit anyone parses.
  auto unit = std::chrono::duration_cast<std::chrono::nanoseconds>(Unit{1});
  auto cap = static_cast<std::int64_t>(max.count());
  return Unit{static_cast<typename Unit::rep>(detail::parse_duration_count(
      text, unit, detail::unit_name<Unit>(), cap, name))};
}

} // namespace exo::text
