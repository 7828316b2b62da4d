#include "core/text/json_escape.hpp"
#include "core/audit/record.hpp"

#include <catch2/catch.hpp>

#include <simdjson.h>

using namespace exo::audit;
using exo::text::append_json_string;

namespace {

record sample_record() {
  record r;
  r.seq = 42;
  r.time_us = 1700000000123456;
  r.node = "node-\"a\"";
  r.principal = "alice\\bob";
  r.type = event_type::device_allocate;
  r.level = severity::warning;
  r.details = {{"bytes", "4096"},
               {"note", "line1\nline2\ttab \x01 \x1f end"},
               {"utf8", "caf\xc3\xa9"}};
  r.prev = std::string{genesis_hash};
  return r;
}

} // namespace

TEST_CASE("every event type and severity name round-trips") {
  for (std::size_t i = 0; i < event_type_count; ++i) {
    auto t = static_cast<event_type>(i);
    REQUIRE(parse_event_type(to_string(t)) == t);
  }
  CHECK(event_type_count >= 20);
  for (auto s : {severity::debug, severity::info, severity::warning,
                 severity::error, severity::critical})
    CHECK(parse_severity(to_string(s)) == s);
  CHECK_FALSE(parse_event_type("no_such_type"));
}

TEST_CASE("escaped JSON strings parse back to the original bytes") {
  std::string raw = "q\" b\\ n\n r\r t\t \x01\x7f \xc3\xa9";
  std::string json;
  append_json_string(json, raw);
  simdjson::dom::parser parser;
  std::string_view back;
  REQUIRE_FALSE(parser.parse(json).get(back));
  CHECK(back == raw);
}

TEST_CASE("a sealed record parses back equal and re-serialises to the same "
          "line") {
  sha256 hasher;
  auto r = sample_record();
  auto line = seal_record(r, hasher);
  REQUIRE(line.back() == '\n');
  REQUIRE(line.find('\n') == line.size() - 1);
  record_reader reader;
  record back;
  auto body = std::string_view{line}.substr(0, line.size() - 1);
  REQUIRE(reader.read(body, back) == "");
  CHECK(back.seq == r.seq);
  CHECK(back.time_us == r.time_us);
  CHECK(back.node == r.node);
  CHECK(back.principal == r.principal);
  CHECK(back.type == r.type);
  CHECK(back.level == r.level);
  CHECK(back.details == r.details);
  CHECK(back.prev == r.prev);
  CHECK(back.hash == r.hash);
  std::string again;
  append_record_line(again, back);
  CHECK(again == line);
}

TEST_CASE("a record whose content changed fails its hash check") {
  sha256 hasher;
  auto r = sample_record();
  auto line = seal_record(r, hasher);
  line.pop_back();
  auto pos = line.find("4096");
  line.replace(pos, 4, "8192");
  record_reader reader;
  record back;
  CHECK_THAT(reader.read(line, back),
             Catch::Contains("hash does not match"));
  CHECK(reader.read(line, back, false) == "");
}

TEST_CASE("malformed record lines are refused with a reason, not a crash") {
  record_reader reader;
  record back;
  CHECK_THAT(reader.read("", back), Catch::Contains("too short"));
  CHECK_THAT(reader.read(std::string(200, 'x'), back),
             Catch::Contains("does not end with"));
  std::string fake = "{\"seq\":1" + std::string(80, ' ')
                     + ",\"hash\":\"" + std::string(64, 'a') + "\"}";
  CHECK_FALSE(reader.read(fake, back).empty());
  std::string bad_json = "{\"seq\":1,,,,,,,,,,,,,,,,,,,,,,,,,,,,\"hash\":\""
                         + std::string(64, 'a') + "\"}";
  CHECK_THAT(reader.read(bad_json, back), Catch::Contains("invalid JSON"));
}
