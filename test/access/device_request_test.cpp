// The console's "dev" command line: what a client's device operation says.

#include "core/access/device_request.hpp"

#include <catch2/catch.hpp>

using namespace exo::access;

TEST_CASE("dev requests parse their operation, device, number and token") {
  device_request r;
  REQUIRE(parse_device_request("alloc gpu:0 4096 auth=exo1.a.b", r).empty());
  CHECK(r.what == device_request::op::allocate);
  CHECK(r.device == "gpu:0");
  CHECK(r.bytes == 4096);
  CHECK(r.token == "exo1.a.b");
  // Sizes take units: 64MiB, 1GB.
  r = {};
  REQUIRE(parse_device_request("alloc gpu:0 64MiB auth=t", r).empty());
  CHECK(r.bytes == 64ull << 20);
  REQUIRE(parse_device_request("alloc gpu:0 1GB auth=t", r).empty());
  CHECK(r.bytes == 1000000000ull);
  r = {};
  // Handles are salted 64-bit values: all 20 digits are accepted.
  REQUIRE(
    parse_device_request("free gpu:0 18446744073709551615 auth=t", r).empty());
  CHECK(r.what == device_request::op::free);
  CHECK(r.handle == 18446744073709551615ull);
  r = {};
  REQUIRE(parse_device_request("sync sim:a:0 auth=t", r).empty());
  CHECK(r.what == device_request::op::sync);
  r = {};
  REQUIRE(parse_device_request("fault sim:a:0 heat:80 auth=t", r).empty());
  CHECK(r.what == device_request::op::fault);
  CHECK(r.device == "sim:a:0");
  CHECK(r.fault == "heat:80");
  CHECK(r.token == "t");
  CHECK_FALSE(parse_device_request("fault sim:a:0 auth=t", r).empty());
  r = {};
  REQUIRE(parse_device_request("info sim:a:0 auth=t", r).empty());
  CHECK(r.what == device_request::op::info);
  // No auth= is not refused here: the device actor refuses (and audits) the
  // empty token.
  r = {};
  REQUIRE(parse_device_request("sync sim:a:0", r).empty());
  CHECK(r.token.empty());
}

TEST_CASE("malformed dev requests are refused with the reason") {
  device_request r;
  CHECK(parse_device_request("", r) == "no operation given");
  CHECK(parse_device_request("launch gpu:0 auth=t", r)
        == "unknown operation \"launch\"");
  CHECK(parse_device_request("alloc gpu:0 auth=t", r)
        == "alloc expects 2 argument(s), got 1");
  CHECK(parse_device_request("sync gpu:0 extra auth=t", r)
        == "sync expects 1 argument(s), got 2");
  CHECK(parse_device_request("alloc gpu:0 -5 auth=t", r)
        == "alloc SIZE: '-5' must not be negative");
  CHECK(parse_device_request("alloc gpu:0 -1 auth=t", r)
        == "alloc SIZE: '-1' must not be negative");
  CHECK(parse_device_request("alloc gpu:0 4G auth=t", r)
        == "alloc SIZE: '4G' has an ambiguous unit 'G': use 4GiB (2^30) or "
           "4GB (10^9)");
  CHECK(parse_device_request("alloc gpu:0 1e9 auth=t", r)
        == "alloc SIZE: '1e9' has an exponent: write the number out (digits, "
           "an optional '.', then a unit)");
  CHECK(parse_device_request("free gpu:0 18446744073709551616 auth=t", r)
        == "free HANDLE: '18446744073709551616' is larger than "
           "18446744073709551615");
  CHECK(parse_device_request("alloc gpu:0 123456789012345678901 auth=t", r)
        == "alloc SIZE: '123456789012345678901' is larger than "
           "18446744073709551615");
  CHECK(parse_device_request("free gpu:0 0x10 auth=t", r)
        == "free HANDLE: '0x10' is not an integer (digits only)");
  CHECK(parse_device_request("sync gpu:0 auth=a auth=b", r)
        == "auth= given twice");
  CHECK(parse_device_request("sync gpu:0 as=root", r)
        == "unknown option \"as\"");
}
