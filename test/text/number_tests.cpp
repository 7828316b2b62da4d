// The strict number parser (core/text/number.hpp): every accepted form, and a
// table of refused texts each with the message it must give.

#include "core/text/number.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

using namespace exo::text;
using namespace std::chrono_literals;

namespace {

/// The message `f` throws (a number_error), or "" when it does not throw.
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const number_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("number_error is an invalid_argument") {
  CHECK_THROWS_AS(parse_integer<int>("x"), std::invalid_argument);
}

TEST_CASE("integers: accepted forms") {
  CHECK(parse_integer<int>("0") == 0);
  CHECK(parse_integer<int>("-0") == 0);
  CHECK(parse_integer<int>("42") == 42);
  CHECK(parse_integer<int>("-42") == -42);
  CHECK(parse_integer<int>("010") == 10); // decimal, not octal
  CHECK(parse_integer<int>("0000000000000000000000000000000000000007") == 7);
  CHECK(parse_integer<std::uint64_t>("18446744073709551615")
        == std::numeric_limits<std::uint64_t>::max());
  CHECK(parse_integer<std::int64_t>("-9223372036854775808")
        == std::numeric_limits<std::int64_t>::min());
  CHECK(parse_integer<std::int64_t>("9223372036854775807")
        == std::numeric_limits<std::int64_t>::max());
  CHECK(parse_integer<std::uint8_t>("255") == 255);
  CHECK(parse_integer<std::int8_t>("-128") == -128);
  CHECK(parse_integer<int>("5", 5, 5) == 5);
  CHECK(parse_integer<unsigned>("1000", 1, 1000) == 1000);
}

TEST_CASE("integers: refused texts name the text and the rule") {
  struct row {
    const char* text;
    const char* message;
  };
  const row rows[] = {
      {"", "'' is empty, expected an integer"},
      {"-", "'-' is not an integer (digits only)"},
      {"1e9", "'1e9' is not an integer (digits only)"},
      {"1.5", "'1.5' is not an integer (digits only)"},
      {"+5", "'+5' is not an integer (digits only)"},
      {" 5", "' 5' is not an integer (digits only)"},
      {"5 ", "'5 ' is not an integer (digits only)"},
      {"0x10", "'0x10' is not an integer (digits only)"},
      {"12abc", "'12abc' is not an integer (digits only)"},
      {"1_000", "'1_000' is not an integer (digits only)"},
      {"-1", "'-1' must be >= 0"},
      {"-18446744073709551616", "'-18446744073709551616' must be >= 0"},
      {"18446744073709551616",
       "'18446744073709551616' is larger than 18446744073709551615"},
      {"99999999999999999999999999999999999999999999",
       "'99999999999999999999999999999999999999999999' is larger than "
       "18446744073709551615"},
      {"5\n", "'5\\x0a' is not an integer (digits only)"},
  };
  for (auto& r : rows) {
    INFO(r.text);
    CHECK(error_of([&] { parse_integer<std::uint64_t>(r.text); })
          == r.message);
  }
  CHECK(error_of([] { parse_integer<std::uint64_t>(std::string("5\0", 2)); })
        == "'5\\x00' is not an integer (digits only)");
}

TEST_CASE("integers: ranges and the types' limits") {
  CHECK(error_of([] { parse_integer<int>("2147483648"); })
        == "'2147483648' is larger than 2147483647");
  CHECK(error_of([] { parse_integer<int>("-2147483649"); })
        == "'-2147483649' must be >= -2147483648");
  CHECK(error_of([] { parse_integer<std::int64_t>("9223372036854775808"); })
        == "'9223372036854775808' is larger than 9223372036854775807");
  CHECK(error_of([] { parse_integer<std::int64_t>("-9223372036854775809"); })
        == "'-9223372036854775809' must be >= -9223372036854775808");
  CHECK(error_of([] { parse_integer<int>("0", 1, 1000); })
        == "'0' must be >= 1");
  CHECK(error_of([] { parse_integer<int>("1001", 1, 1000); })
        == "'1001' is larger than 1000");
  CHECK(error_of([] { parse_integer<int>("x", 1, 1000); })
        == "'x' is not an integer (digits only)");
  CHECK(error_of([] { parse_integer<int>("x", -5, 5); })
        == "'x' is not an integer (digits, optionally after '-')");
  CHECK(error_of([] { parse_integer<int>("-7", -5, 5); })
        == "'-7' must be >= -5");
  CHECK(error_of([] { parse_integer<std::uint8_t>("256"); })
        == "'256' is larger than 255");
  CHECK(error_of([] { parse_integer<int>("-3", -10, -5); })
        == "'-3' is larger than -5");
  CHECK(error_of([] { parse_integer<int>("3", -10, -5); })
        == "'3' is larger than -5");
}

TEST_CASE("a name prefixes the message") {
  CHECK(error_of([] {
          parse_integer<std::uint64_t>("1e9", 0, 100, "ttl");
        }) == "ttl: '1e9' is not an integer (digits only)");
  CHECK(error_of([] { parse_size("4G", 1ull << 40, "quota"); })
        == "quota: '4G' has an ambiguous unit 'G': use 4GiB (2^30) or 4GB "
           "(10^9)");
}

TEST_CASE("a long hostile text is cut in the message") {
  std::string digits(100000, '9');
  auto msg = error_of([&] { parse_integer<int>(digits); });
  CHECK(msg.size() < 200);
  CHECK(msg.find("(100000 bytes)") != std::string::npos);
  CHECK(msg.find("is larger than 2147483647") != std::string::npos);
}

TEST_CASE("a long or binary unit is cut and escaped in the message") {
  // Found by fuzz_number: the unit was echoed whole (a 1 MB message).
  auto msg = error_of([] { parse_size("7" + std::string(100000, 'x')); });
  CHECK(msg.size() < 300);
  CHECK(msg.find("unknown unit 'xxxxxxxxxxxxxxxx...'") != std::string::npos);
  msg = error_of([] { parse_duration("7\xff\xfe"); });
  CHECK(msg == "'7\\xff\\xfe' has an unknown unit '\\xff\\xfe' (durations "
               "take ns, us, ms, s, m, h or d)");
  msg = error_of([] { parse_size(std::string(1000, '1') + "G"); });
  CHECK(msg.size() < 300);
  CHECK(msg.find("use NGiB (2^30) or NGB (10^9)") != std::string::npos);
  // Found by the 10-minute fuzz_number run: a long bare duration was
  // repeated whole in the "e.g." hint.
  msg = error_of([] { parse_duration(std::string(600, '0') + "1"); });
  CHECK(msg.size() < 300);
  CHECK(msg.find("e.g. Ns") != std::string::npos);
  CHECK(error_of([] { parse_duration("30"); }).find("e.g. 30s")
        != std::string::npos);
}

TEST_CASE("reals: accepted forms") {
  CHECK(parse_real("0") == 0.0);
  CHECK(parse_real("0.25") == 0.25);
  CHECK(parse_real("-0.25") == -0.25);
  CHECK(parse_real(".5") == 0.5);
  CHECK(parse_real("5.") == 5.0);
  CHECK(parse_real("1e3") == 1000.0);
  CHECK(parse_real("1E-3") == 0.001);
  CHECK(parse_real("2.5e+2") == 250.0);
  CHECK(parse_real("1e308") == 1e308);
  CHECK(parse_real("4.9e-324") > 0); // the smallest subnormal
  CHECK_FALSE(std::signbit(parse_real("-0")));
  CHECK(parse_real("0.5", 0, 1) == 0.5);
  CHECK(parse_real("1", 0, 1) == 1.0);
}

TEST_CASE("reals: refused texts") {
  struct row {
    const char* text;
    const char* message;
  };
  const char* syntax = "is not a number (digits with an optional '-', '.' "
                       "and exponent, e.g. 0.25 or 1e-3)";
  const row rows[] = {
      {"", "'' is empty, expected a number"},
      {"nan", ""},     {"NaN", ""},     {"inf", ""},      {"-inf", ""},
      {"infinity", ""}, {"0x1p3", ""},  {"+1", ""},       {" 1", ""},
      {"1 ", ""},      {"1e", ""},      {"1e+", ""},      {".", ""},
      {"-", ""},       {"-.", ""},      {"1..2", ""},     {"1.2.3", ""},
      {"e5", ""},      {"1,5", ""},     {"--1", ""},      {"1f", ""},
      {"1e999", "'1e999' is too large to represent"},
      {"-1e999", "'-1e999' is too large to represent"},
      {"1e-400", "'1e-400' is too small to represent (rounds to 0)"},
  };
  for (auto& r : rows) {
    INFO(r.text);
    auto msg = error_of([&] { parse_real(r.text); });
    if (*r.message)
      CHECK(msg == r.message);
    else
      CHECK(msg == "'" + std::string{r.text} + "' " + syntax);
  }
  CHECK(parse_real("0e-400") == 0.0); // zero is zero, not an underflow
  CHECK(error_of([] { parse_real("-0.1", 0, 1); }) == "'-0.1' must be >= 0");
  CHECK(error_of([] { parse_real("1.5", 0, 1); }) == "'1.5' is larger than 1");
  CHECK(error_of([] { parse_real("1e308", 0, 1e9); })
        == "'1e308' is larger than 1e+09");
}

TEST_CASE("sizes: accepted forms and units") {
  CHECK(parse_size("0") == 0);
  CHECK(parse_size("4096") == 4096);
  CHECK(parse_size("4096B") == 4096);
  CHECK(parse_size("1KiB") == 1024);
  CHECK(parse_size("1kib") == 1024);
  CHECK(parse_size("1KIB") == 1024);
  CHECK(parse_size("4GiB") == (4ull << 30));
  CHECK(parse_size("2MiB") == (2ull << 20));
  CHECK(parse_size("1TiB") == (1ull << 40));
  CHECK(parse_size("1kB") == 1000);
  CHECK(parse_size("3MB") == 3000000);
  CHECK(parse_size("4GB") == 4000000000ull);
  CHECK(parse_size("2TB") == 2000000000000ull);
  CHECK(parse_size("1.5KiB") == 1536);
  CHECK(parse_size("0.5GiB") == (1ull << 29));
  CHECK(parse_size(".5MiB") == (1ull << 19));
  CHECK(parse_size("1.000B") == 1);
  CHECK(parse_size("18446744073709551615")
        == std::numeric_limits<std::uint64_t>::max());
  CHECK(parse_size("16777215TiB") == (16777215ull << 40));
  CHECK(parse_size("4GiB", 4ull << 30) == (4ull << 30));
}

TEST_CASE("sizes: refused texts") {
  struct row {
    const char* text;
    const char* message;
  };
  const row rows[] = {
      {"", "'' is empty, expected a size such as 512MiB or 4096"},
      {"-1", "'-1' must not be negative"},
      {"-1GiB", "'-1GiB' must not be negative"},
      {"+1", "'+1' is not a size (a number, then an optional unit: B, KiB, "
             "MiB, GiB, TiB, kB, MB, GB, TB)"},
      {"GiB", "'GiB' is not a size (a number, then an optional unit: B, KiB, "
              "MiB, GiB, TiB, kB, MB, GB, TB)"},
      {"4G", "'4G' has an ambiguous unit 'G': use 4GiB (2^30) or 4GB (10^9)"},
      {"4g", "'4g' has an ambiguous unit 'g': use 4GiB (2^30) or 4GB (10^9)"},
      {"4K", "'4K' has an ambiguous unit 'K': use 4KiB (2^10) or 4kB (10^3)"},
      {"4KB", "'4KB' has an ambiguous unit 'KB': use 4KiB (2^10) or 4kB "
              "(10^3)"},
      {"4mb", "'4mb' has an ambiguous unit 'mb': use 4MiB (2^20) or 4MB "
              "(10^6)"},
      {"1.5T", "'1.5T' has an ambiguous unit 'T': use 1.5TiB (2^40) or 1.5TB "
               "(10^12)"},
      {"4b", "'4b' is in bits ('b'): use B for bytes"},
      {"4 GiB", "'4 GiB' has an unknown unit ' GiB' (sizes take B, KiB, MiB, "
                "GiB, TiB, kB, MB, GB or TB)"},
      {"4PiB", "'4PiB' has an unknown unit 'PiB' (sizes take B, KiB, MiB, "
               "GiB, TiB, kB, MB, GB or TB)"},
      {"1e9", "'1e9' has an exponent: write the number out (digits, an "
              "optional '.', then a unit)"},
      {"1E+3KiB", "'1E+3KiB' has an exponent: write the number out (digits, "
                  "an optional '.', then a unit)"},
      {"1eB", "'1eB' has an unknown unit 'eB' (sizes take B, KiB, MiB, GiB, "
              "TiB, kB, MB, GB or TB)"},
      {"0.5B", "'0.5B' is not a whole number of bytes"},
      {"0.3KiB", "'0.3KiB' is not a whole number of bytes"},
      {"18446744073709551616",
       "'18446744073709551616' is larger than 18446744073709551615"},
      {"16777216TiB", "'16777216TiB' is larger than 18446744073709551615"},
      {"1.0000000000000000001KiB",
       "'1.0000000000000000001KiB' has more than 18 decimals"},
  };
  for (auto& r : rows) {
    INFO(r.text);
    CHECK(error_of([&] { parse_size(r.text); }) == r.message);
  }
  CHECK(error_of([] { parse_size("5GiB", 4ull << 30); })
        == "'5GiB' is larger than 4294967296 (4GiB)");
  CHECK(error_of([] { parse_size("101", 100); })
        == "'101' is larger than 100");
}

TEST_CASE("durations: accepted forms and units") {
  CHECK(parse_duration("0s") == 0ns);
  CHECK(parse_duration("7ns") == 7ns);
  CHECK(parse_duration("7us") == 7us);
  CHECK(parse_duration("7\xc2\xb5s") == 7us);
  CHECK(parse_duration("250ms") == 250ms);
  CHECK(parse_duration("90s") == 90s);
  CHECK(parse_duration("5m") == 5min);
  CHECK(parse_duration("2h") == 2h);
  CHECK(parse_duration("1d") == 24h);
  CHECK(parse_duration("1.5h") == 90min);
  CHECK(parse_duration("0.5s") == 500ms);
  CHECK(parse_duration("200", std::chrono::nanoseconds::max(), 1ms) == 200ms);
  CHECK(parse_duration("9223372036854775807ns")
        == std::chrono::nanoseconds::max());
  CHECK(parse_duration("1h", 1h) == 1h);
}

TEST_CASE("durations: refused texts") {
  struct row {
    const char* text;
    const char* message;
  };
  const row rows[] = {
      {"", "'' is empty, expected a duration such as 30s, 500ms, 2h"},
      {"-1s", "'-1s' must not be negative"},
      {"10", "'10' needs a unit (ns, us, ms, s, m, h or d), e.g. 10s"},
      {"s", "'s' is not a duration (a number, then one of ns, us, ms, s, m, "
            "h, d)"},
      {"+5s", "'+5s' is not a duration (a number, then one of ns, us, ms, s, "
              "m, h, d)"},
      {"5S", "'5S' has an unknown unit 'S' (durations take ns, us, ms, s, m, "
             "h or d)"},
      {"5M", "'5M' has an unknown unit 'M' (durations take ns, us, ms, s, m, "
             "h or d)"},
      {"1h30m", "'1h30m' has an unknown unit 'h30m' (durations take ns, us, "
                "ms, s, m, h or d)"},
      {"1e9s", "'1e9s' has an exponent: write the number out (digits, an "
               "optional '.', then a unit)"},
      {"5 s", "'5 s' has an unknown unit ' s' (durations take ns, us, ms, s, "
              "m, h or d)"},
      {"0.5ns", "'0.5ns' is not a whole number of nanoseconds"},
      {"9223372036854775808ns",
       "'9223372036854775808ns' is larger than 9223372036854775807ns"},
      {"1000000d", "'1000000d' is larger than 9223372036854775807ns"},
  };
  for (auto& r : rows) {
    INFO(r.text);
    CHECK(error_of([&] { parse_duration(r.text); }) == r.message);
  }
  CHECK(error_of([] { parse_duration("2h", 1h); }) == "'2h' is larger than 1h");
  CHECK(error_of([] { parse_duration("61m", 1h, 1s, "ttl"); })
        == "ttl: '61m' is larger than 1h");
}

TEST_CASE("durations as a whole count of a unit") {
  using std::chrono::seconds;
  CHECK(parse_duration_as<seconds>("3600") == 1h); // bare: the unit
  CHECK(parse_duration_as<seconds>("1h") == 1h);
  CHECK(error_of([] { parse_duration_as<seconds>("1500ms"); })
        == "'1500ms' is not a whole number of s");
  CHECK(parse_duration_as<std::chrono::milliseconds>("1.5s") == 1500ms);
  CHECK(error_of([] { parse_duration_as<seconds>("2d", seconds{86400}); })
        == "'2d' is larger than 86400s");
  // Counts of coarse units beyond int64 nanoseconds still count.
  CHECK(parse_duration_as<seconds>("1000000d") == seconds{86400000000});
  CHECK(error_of([] { parse_duration_as<seconds>("1e9", seconds{}, "ttl"); })
        == "ttl: '1e9' has an exponent: write the number out (digits, an "
           "optional '.', then a unit)");
}

TEST_CASE("sizes and durations format back to the parser's units") {
  CHECK(format_size(0) == "0B");
  CHECK(format_size(1536) == "1536B");
  CHECK(format_size(2048) == "2KiB");
  CHECK(format_size(4ull << 30) == "4GiB");
  CHECK(format_size(1ull << 40) == "1TiB");
  CHECK(format_duration(0ns) == "0s");
  CHECK(format_duration(90s) == "90s");
  CHECK(format_duration(3600s) == "1h");
  CHECK(format_duration(1500ms) == "1500ms");
  CHECK(format_duration(48h) == "2d");
  CHECK(format_duration(-5s) == "-5s");
  for (auto s : {std::uint64_t{0}, std::uint64_t{1536}, std::uint64_t{4} << 30})
    CHECK(parse_size(format_size(s)) == s);
  for (auto d : {0ns, 7ns, std::chrono::nanoseconds{1500ms},
                 std::chrono::nanoseconds{48h}})
    CHECK(parse_duration(format_duration(d)) == d);
}
