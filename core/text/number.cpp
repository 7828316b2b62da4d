#include "core/text/number.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <system_error>

namespace exo::text {

namespace {

using u128 = unsigned __int128;

/// `text` as an error shows it: non-printable bytes as \xNN, cut after
/// `limit` bytes with "..." (a hostile megabyte stays one short line).
std::string escaped(std::string_view text, std::size_t limit) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (text.size() > limit)
    out += "...";
  return out;
}

/// The whole text, quoted: "'4G'", "'999...' (100000 bytes)".
std::string quote(std::string_view text) {
  constexpr std::size_t shown = 48;
  auto out = "'" + escaped(text, shown) + "'";
  if (text.size() > shown)
    out += " (" + std::to_string(text.size()) + " bytes)";
  return out;
}

/// A unit as an error names it: escaped, at most 16 bytes.
std::string unit_text(std::string_view unit) {
  return "'" + escaped(unit, 16) + "'";
}

[[noreturn]] void fail(std::string_view name, std::string_view text,
                       const std::string& rule) {
  std::string msg;
  if (!name.empty()) {
    msg.append(name);
    msg += ": ";
  }
  msg += quote(text);
  msg += ' ';
  msg += rule;
  throw number_error(msg);
}

bool digit(char c) { return c >= '0' && c <= '9'; }

std::string real_string(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// A run of decimal digits, without leading zeros, as a u128; false when it
/// has more than 30 significant digits (larger than anything we accept).
bool digits_value(std::string_view digits, u128& out) {
  std::size_t i = 0;
  while (i < digits.size() && digits[i] == '0')
    ++i;
  if (digits.size() - i > 30)
    return false;
  u128 v = 0;
  for (; i < digits.size(); ++i)
    v = v * 10 + static_cast<unsigned>(digits[i] - '0');
  out = v;
  return true;
}

/// The unsigned decimal N or N.F at the start of a size or duration.
struct decimal {
  std::string_view whole; // digits before '.'
  std::string_view frac;  // digits after '.', trailing zeros dropped
  std::size_t end = 0;    // where the unit starts
};

/// Scans [0-9]*(.[0-9]*)? with at least one digit; false if none.
bool scan_decimal(std::string_view text, decimal& d) {
  std::size_t i = 0;
  while (i < text.size() && digit(text[i]))
    ++i;
  d.whole = text.substr(0, i);
  std::size_t frac_begin = i, frac_end = i;
  if (i < text.size() && text[i] == '.') {
    frac_begin = ++i;
    while (i < text.size() && digit(text[i]))
      ++i;
    frac_end = i;
  }
  d.frac = text.substr(frac_begin, frac_end - frac_begin);
  while (!d.frac.empty() && d.frac.back() == '0')
    d.frac.remove_suffix(1);
  d.end = i;
  return !d.whole.empty() || frac_end > frac_begin;
}

/// value = d * unit exactly, in u128; false with `why` set when it is not
/// whole or too large to hold.
bool exact_product(const decimal& d, u128 unit, u128& out, std::string& why) {
  u128 whole = 0;
  if (!digits_value(d.whole, whole) || whole > (~u128{0}) / 2 / unit) {
    why = "too large";
    return false;
  }
  u128 value = whole * unit;
  if (!d.frac.empty()) {
    if (d.frac.size() > 18) {
      why = "more than 18 decimals";
      return false;
    }
    u128 frac = 0;
    digits_value(d.frac, frac);
    u128 scale = 1;
    for (std::size_t i = 0; i < d.frac.size(); ++i)
      scale *= 10;
    u128 part = frac * unit; // < 10^18 * 2^64: fits
    if (part % scale != 0) {
      why = "fraction";
      return false;
    }
    value += part / scale;
  }
  out = value;
  return true;
}

struct unit_entry {
  const char* text;
  u128 factor;
};

constexpr std::uint64_t kib = 1024;

const unit_entry* find_unit(const unit_entry* table, std::size_t n,
                            std::string_view unit) {
  for (std::size_t i = 0; i < n; ++i)
    if (unit == table[i].text)
      return &table[i];
  return nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y)
      return false;
  }
  return true;
}

/// "1e9s", "2E3": sizes and durations are written out, not in exponents.
void refuse_exponent(std::string_view text, std::string_view unit,
                     std::string_view name) {
  if (unit.size() >= 2 && (unit[0] == 'e' || unit[0] == 'E')
      && (digit(unit[1]) || unit[1] == '-' || unit[1] == '+'))
    fail(name, text, "has an exponent: write the number out (digits, an "
                     "optional '.', then a unit)");
}

/// Parses a size's unit; throws with a hint on an ambiguous or unknown one.
u128 size_unit(std::string_view text, std::string_view number,
               std::string_view unit, std::string_view name) {
  static const unit_entry binary[] = {{"KiB", kib},
                                      {"MiB", kib * kib},
                                      {"GiB", kib * kib * kib},
                                      {"TiB", kib * kib * kib * kib}};
  static const unit_entry decimal_units[] = {{"B", 1},
                                             {"kB", 1000},
                                             {"MB", 1000000},
                                             {"GB", 1000000000},
                                             {"TB", 1000000000000}};
  if (unit.empty())
    return 1;
  refuse_exponent(text, unit, name);
  if (auto* u = find_unit(decimal_units, 5, unit))
    return u->factor;
  for (auto& u : binary)
    if (iequals(unit, u.text))
      return u.factor;
  // The number as the hint repeats it: "4", "1.5", or N when it is long.
  std::string n = number.size() <= 24 ? std::string{number} : "N";
  if (unit == "b")
    fail(name, text, "is in bits ('b'): use B for bytes");
  static const struct {
    const char* letter;
    const char* binary;
    const char* binary_power;
    const char* decimal;
    const char* decimal_power;
  } ambiguous[] = {{"k", "KiB", "2^10", "kB", "10^3"},
                   {"m", "MiB", "2^20", "MB", "10^6"},
                   {"g", "GiB", "2^30", "GB", "10^9"},
                   {"t", "TiB", "2^40", "TB", "10^12"}};
  for (auto& a : ambiguous)
    if (iequals(unit, a.letter) || iequals(unit, std::string{a.letter} + "b"))
      fail(name, text,
           "has an ambiguous unit " + unit_text(unit) + ": use " + n
               + a.binary + " (" + a.binary_power + ") or " + n + a.decimal
               + " (" + a.decimal_power + ")");
  fail(name, text,
       "has an unknown unit " + unit_text(unit)
           + " (sizes take B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)");
}

constexpr std::int64_t ns_per_us = 1000;
constexpr std::int64_t ns_per_ms = 1000 * ns_per_us;
constexpr std::int64_t ns_per_s = 1000 * ns_per_ms;
constexpr std::int64_t ns_per_m = 60 * ns_per_s;
constexpr std::int64_t ns_per_h = 60 * ns_per_m;
constexpr std::int64_t ns_per_d = 24 * ns_per_h;

const unit_entry duration_units[] = {
    {"ns", 1},          {"us", ns_per_us}, {"\xc2\xb5s", ns_per_us},
    {"ms", ns_per_ms},  {"s", ns_per_s},   {"m", ns_per_m},
    {"h", ns_per_h},    {"d", ns_per_d}};

/// A duration in nanoseconds (u128: counts of coarse units may exceed
/// int64 nanoseconds before the caller's range check).
u128 duration_ns(std::string_view text, std::int64_t bare_ns,
                 std::string_view name) {
  if (text.empty())
    fail(name, text, "is empty, expected a duration such as 30s, 500ms, 2h");
  if (text[0] == '-')
    fail(name, text, "must not be negative");
  decimal d;
  if (!scan_decimal(text, d))
    fail(name, text,
         "is not a duration (a number, then one of ns, us, ms, s, m, h, d)");
  auto unit = text.substr(d.end);
  u128 factor = 0;
  if (unit.empty()) {
    if (bare_ns <= 0)
      fail(name, text, "needs a unit (ns, us, ms, s, m, h or d), e.g. "
                           + (text.size() <= 24 ? std::string{text} : "N")
                           + "s");
    factor = static_cast<u128>(bare_ns);
  } else if (refuse_exponent(text, unit, name), false) {
  } else if (auto* u = find_unit(duration_units,
                                 sizeof duration_units / sizeof *duration_units,
                                 unit)) {
    factor = u->factor;
  } else {
    fail(name, text,
         "has an unknown unit " + unit_text(unit)
             + " (durations take ns, us, ms, s, m, h or d)");
  }
  u128 ns = 0;
  std::string why;
  if (!exact_product(d, factor, ns, why)) {
    if (why == "fraction")
      fail(name, text, "is not a whole number of nanoseconds");
    if (why == "too large")
      fail(name, text, "is too large");
    fail(name, text, "has " + why);
  }
  return ns;
}

} // namespace

namespace detail {

/// Sign and magnitude of an integer text; throws on bad syntax.
static void integer_syntax(std::string_view text, bool allow_minus,
                           std::string_view name, bool& negative,
                           u128& magnitude, bool& huge) {
  if (text.empty())
    fail(name, text, "is empty, expected an integer");
  negative = text[0] == '-';
  auto digits = negative ? text.substr(1) : text;
  bool ok = !digits.empty();
  for (char c : digits)
    ok = ok && digit(c);
  if (!ok)
    fail(name, text,
         allow_minus ? "is not an integer (digits, optionally after '-')"
                     : "is not an integer (digits only)");
  huge = !digits_value(digits, magnitude);
}

std::int64_t parse_signed(std::string_view text, std::int64_t min,
                          std::int64_t max, std::string_view name) {
  bool negative = false, huge = false;
  u128 mag = 0;
  integer_syntax(text, min < 0, name, negative, mag, huge);
  if (negative && mag != 0) {
    // -mag < min  <=>  mag > -min
    u128 lim = static_cast<u128>(-(static_cast<__int128>(min)));
    if (min >= 0 || huge || mag > lim)
      fail(name, text, "must be >= " + std::to_string(min));
    auto v = static_cast<std::int64_t>(-static_cast<__int128>(mag));
    if (v > max)
      fail(name, text, "is larger than " + std::to_string(max));
    return v;
  }
  if (huge || max < 0 || mag > static_cast<u128>(max))
    fail(name, text, "is larger than " + std::to_string(max));
  auto v = static_cast<std::int64_t>(mag);
  if (v < min)
    fail(name, text, "must be >= " + std::to_string(min));
  return v;
}

std::uint64_t parse_unsigned(std::string_view text, std::uint64_t min,
                             std::uint64_t max, std::string_view name) {
  bool negative = false, huge = false;
  u128 mag = 0;
  integer_syntax(text, false, name, negative, mag, huge);
  if (negative && mag != 0)
    fail(name, text, "must be >= " + std::to_string(min));
  if (huge || mag > max)
    fail(name, text, "is larger than " + std::to_string(max));
  if (mag < min)
    fail(name, text, "must be >= " + std::to_string(min));
  return static_cast<std::uint64_t>(mag);
}

std::int64_t parse_duration_count(std::string_view text,
                                  std::chrono::nanoseconds unit,
                                  const char* unit_name, std::int64_t max,
                                  std::string_view name) {
  auto ns = duration_ns(text, unit.count(), name);
  auto per = static_cast<u128>(unit.count());
  if (ns % per != 0)
    fail(name, text,
         std::string{"is not a whole number of "} + unit_name);
  auto count = ns / per;
  if (max < 0 || count > static_cast<u128>(max))
    fail(name, text,
         "is larger than " + std::to_string(max) + unit_name);
  return static_cast<std::int64_t>(count);
}

} // namespace detail

double parse_real(std::string_view text, double min, double max,
                  std::string_view name) {
  if (text.empty())
    fail(name, text, "is empty, expected a number");
  // -?([0-9]+(.[0-9]*)?|.[0-9]+)([eE][-+]?[0-9]+)?
  std::size_t i = 0;
  if (text[0] == '-')
    ++i;
  decimal d;
  bool ok = scan_decimal(text.substr(i), d);
  bool nonzero = false;
  for (char c : d.whole)
    nonzero = nonzero || c != '0';
  nonzero = nonzero || !d.frac.empty();
  i += d.end;
  bool negative_exponent = false;
  if (ok && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
      negative_exponent = text[i] == '-';
      ++i;
    }
    std::size_t begin = i;
    while (i < text.size() && digit(text[i]))
      ++i;
    ok = i > begin;
  }
  if (!ok || i != text.size())
    fail(name, text, "is not a number (digits with an optional '-', '.' and "
                     "exponent, e.g. 0.25 or 1e-3)");
  double v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v,
                           std::chars_format::general);
  if (r.ptr != text.data() + text.size())
    fail(name, text, "is not a number");
  if (r.ec == std::errc::result_out_of_range || !std::isfinite(v)
      || (v == 0 && nonzero)) {
    if (negative_exponent)
      fail(name, text, "is too small to represent (rounds to 0)");
    fail(name, text, "is too large to represent");
  }
  if (r.ec != std::errc{})
    fail(name, text, "is not a number");
  if (v < min)
    fail(name, text, "must be >= " + real_string(min));
  if (v > max)
    fail(name, text, "is larger than " + real_string(max));
  return v == 0 ? 0.0 : v; // no "-0"
}

std::uint64_t parse_size(std::string_view text, std::uint64_t max,
                         std::string_view name) {
  if (text.empty())
    fail(name, text, "is empty, expected a size such as 512MiB or 4096");
  if (text[0] == '-')
    fail(name, text, "must not be negative");
  decimal d;
  if (!scan_decimal(text, d))
    fail(name, text, "is not a size (a number, then an optional unit: B, "
                     "KiB, MiB, GiB, TiB, kB, MB, GB, TB)");
  auto factor = size_unit(text, text.substr(0, d.end), text.substr(d.end),
                          name);
  u128 bytes = 0;
  std::string why;
  if (!exact_product(d, factor, bytes, why)) {
    if (why == "fraction")
      fail(name, text, "is not a whole number of bytes");
    if (why == "too large")
      fail(name, text, "is larger than " + std::to_string(max));
    fail(name, text, "has " + why);
  }
  if (bytes > max) {
    auto pretty = format_size(max);
    fail(name, text,
         "is larger than " + std::to_string(max)
             + (max % kib == 0 && max != 0 ? " (" + pretty + ")" : ""));
  }
  return static_cast<std::uint64_t>(bytes);
}

std::chrono::nanoseconds parse_duration(std::string_view text,
                                        std::chrono::nanoseconds max,
                                        std::chrono::nanoseconds bare_unit,
                                        std::string_view name) {
  auto ns = duration_ns(text, bare_unit.count(), name);
  if (max.count() < 0 || ns > static_cast<u128>(max.count()))
    fail(name, text, "is larger than " + format_duration(max));
  return std::chrono::nanoseconds{static_cast<std::int64_t>(ns)};
}

std::string format_duration(std::chrono::nanoseconds d) {
  auto n = d.count();
  if (n == 0)
    return "0s";
  std::string sign = n < 0 ? "-" : "";
  // |INT64_MIN| does not fit; it is not a duration anyone formats, but stay
  // defined: print it in nanoseconds.
  if (n == std::numeric_limits<std::int64_t>::min())
    return std::to_string(n) + "ns";
  if (n < 0)
    n = -n;
  static const struct {
    std::int64_t per;
    const char* unit;
  } units[] = {{ns_per_d, "d"},   {ns_per_h, "h"},   {ns_per_m, "m"},
               {ns_per_s, "s"},   {ns_per_ms, "ms"}, {ns_per_us, "us"},
               {1, "ns"}};
  for (auto& u : units)
    if (n % u.per == 0)
      return sign + std::to_string(n / u.per) + u.unit;
  return sign + std::to_string(n) + "ns";
}

std::string format_size(std::uint64_t bytes) {
  static const struct {
    std::uint64_t per;
    const char* unit;
  } units[] = {{kib * kib * kib * kib, "TiB"},
               {kib * kib * kib, "GiB"},
               {kib * kib, "MiB"},
               {kib, "KiB"}};
  if (bytes == 0)
    return "0B";
  for (auto& u : units)
    if (bytes % u.per == 0)
      return std::to_string(bytes / u.per) + u.unit;
  return std::to_string(bytes) + "B";
}

} // namespace exo::text
