#include "core/audit/record.hpp"

#include "core/text/json_escape.hpp"

#include <simdjson.h>

namespace exo::audit {

using text::append_json_string;

namespace {

/// The bytes between the hashed prefix and the hash value.
constexpr std::string_view hash_key = ",\"hash\":\"";

/// Length of the suffix `,"hash":"<64 hex>"}`.
constexpr std::size_t hash_suffix_len = hash_key.size() + 64 + 2;

void append_body(std::string& out, const record& r) {
  out += "{\"seq\":";
  out += std::to_string(r.seq);
  out += ",\"time\":";
  out += std::to_string(r.time_us);
  out += ",\"node\":";
  append_json_string(out, r.node);
  out += ",\"principal\":";
  append_json_string(out, r.principal);
  out += ",\"type\":\"";
  out += to_string(r.type);
  out += "\",\"severity\":\"";
  out += to_string(r.level);
  out += "\",\"details\":{";
  bool first = true;
  for (auto& [key, value] : r.details) {
    if (!first)
      out.push_back(',');
    first = false;
    append_json_string(out, key);
    out.push_back(':');
    append_json_string(out, value);
  }
  out += "},\"prev\":\"";
  out += r.prev;
  out.push_back('"');
}

} // namespace

std::string seal_record(record& r, sha256& hasher) {
  std::string line;
  line.reserve(256);
  append_body(line, r);
  r.hash = hasher.hex(line);
  line += hash_key;
  line += r.hash;
  line += "\"}\n";
  return line;
}

void append_record_line(std::string& out, const record& r) {
  append_body(out, r);
  out += hash_key;
  out += r.hash;
  out += "\"}\n";
}

struct record_reader::impl {
  simdjson::dom::parser parser;
  sha256 hasher;
};

record_reader::record_reader() : impl_(std::make_unique<impl>()) {
  // Nothing else to set up.
}

record_reader::~record_reader() = default;

std::string record_reader::read(std::string_view line, record& out,
                                bool check_hash) {
  using simdjson::dom::element;
  if (line.size() < hash_suffix_len + 2)
    return "line too short to be a record";
  auto suffix = line.substr(line.size() - hash_suffix_len);
  if (suffix.substr(0, hash_key.size()) != hash_key
      || suffix.substr(suffix.size() - 2) != "\"}")
    return "line does not end with the \"hash\" field";
  auto stored = suffix.substr(hash_key.size(), 64);
  if (!is_hex_digest(stored))
    return "\"hash\" is not 64 lower-case hex digits";
  element doc;
  if (auto err = impl_->parser.parse(line.data(), line.size()).get(doc))
    return std::string{"invalid JSON: "} + simdjson::error_message(err);
  simdjson::dom::object obj;
  if (doc.get(obj))
    return "record is not a JSON object";
  std::uint64_t seq = 0;
  std::int64_t time = 0;
  std::string_view node, principal, type, level, prev, hash;
  simdjson::dom::object details;
  if (obj["seq"].get(seq))
    return "missing or invalid \"seq\"";
  if (obj["time"].get(time))
    return "missing or invalid \"time\"";
  if (obj["node"].get(node))
    return "missing or invalid \"node\"";
  if (obj["principal"].get(principal))
    return "missing or invalid \"principal\"";
  if (obj["type"].get(type))
    return "missing or invalid \"type\"";
  if (obj["severity"].get(level))
    return "missing or invalid \"severity\"";
  if (obj["details"].get(details))
    return "missing or invalid \"details\"";
  if (obj["prev"].get(prev) || !is_hex_digest(prev))
    return "missing or invalid \"prev\"";
  if (obj["hash"].get(hash) || hash != stored)
    return "missing or invalid \"hash\"";
  auto t = parse_event_type(type);
  if (!t)
    return "unknown event type \"" + std::string{type} + "\"";
  auto s = parse_severity(level);
  if (!s)
    return "unknown severity \"" + std::string{level} + "\"";
  out.seq = seq;
  out.time_us = time;
  out.node.assign(node);
  out.principal.assign(principal);
  out.type = *t;
  out.level = *s;
  out.details.clear();
  for (auto field : details) {
    std::string_view value;
    if (field.value.get(value))
      return "detail \"" + std::string{field.key} + "\" is not a string";
    out.details.emplace(std::string{field.key}, std::string{value});
  }
  out.prev.assign(prev);
  out.hash.assign(hash);
  if (check_hash) {
    auto body = line.substr(0, line.size() - hash_suffix_len);
    if (impl_->hasher.hex(body) != stored)
      return "hash does not match the record's content (record modified)";
  }
  return {};
}

} // namespace exo::audit
