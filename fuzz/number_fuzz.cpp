// The strict number parser (core/text/number.hpp): any bytes are either a
// value inside the requested range or a number_error naming the text. What
// parses also formats back to the same value (sizes, durations, integers).
#include "core/text/number.hpp"
#include "fuzz/fuzz_target.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

using namespace exo::text;

void check(bool ok) {
  if (!ok)
    std::abort();
}

template <class F> void refused_or(F&& f) {
  try {
    f();
  } catch (const number_error& e) {
    // A message always names the text, bounded in length.
    std::string_view m = e.what();
    check(!m.empty() && m.size() < 512);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  std::string_view text{reinterpret_cast<const char*>(data), size};
  refused_or([&] {
    auto v = parse_integer<std::int64_t>(text);
    check(parse_integer<std::int64_t>(std::to_string(v)) == v);
  });
  refused_or([&] {
    auto v = parse_integer<std::uint64_t>(text, 3, 1000000, "n");
    check(v >= 3 && v <= 1000000);
  });
  refused_or([&] {
    auto v = parse_integer<std::int8_t>(text, -100, 100);
    check(v >= -100 && v <= 100);
  });
  refused_or([&] {
    auto v = parse_real(text);
    check(std::isfinite(v));
  });
  refused_or([&] {
    auto v = parse_real(text, 0, 1, "p");
    check(v >= 0 && v <= 1);
  });
  refused_or([&] {
    auto v = parse_size(text);
    check(parse_size(format_size(v)) == v);
  });
  refused_or([&] {
    auto v = parse_size(text, std::uint64_t{4} << 30, "quota");
    check(v <= (std::uint64_t{4} << 30));
  });
  refused_or([&] {
    auto v = parse_duration(text);
    check(v.count() >= 0);
    check(parse_duration(format_duration(v)) == v);
  });
  refused_or([&] {
    auto v = parse_duration(text, std::chrono::hours{1},
                            std::chrono::milliseconds{1}, "t");
    check(v.count() >= 0 && v <= std::chrono::hours{1});
  });
  refused_or([&] {
    auto v = parse_duration_as<std::chrono::seconds>(text);
    check(v.count() >= 0);
  });
  return 0;
}
