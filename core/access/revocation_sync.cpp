#include "core/access/revocation_sync.hpp"

#include <algorithm>
#include <sstream>

namespace exo::access {

namespace {

constexpr std::int64_t skew_s = 60;

const char* kind_name(revocation::kind k) {
  return k == revocation::kind::token ? "token" : "principal";
}

std::string body_of(const revocation& r) {
  return std::string{kind_name(r.what)} + " " + r.name + " "
         + std::to_string(r.at);
}

std::string mac_hex(const hmac_sha256& mac, const revocation& r) {
  auto m = mac.mac("exo-revocation\n" + body_of(r));
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (auto b : m) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

bool same(const std::string& a, const std::string& b) {
  if (a.size() != b.size())
    return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 256)
    return false;
  for (unsigned char c : name)
    if (c <= ' ' || c >= 0x7f)
      return false;
  return true;
}

bool parse_int(const std::string& s, std::int64_t& out) {
  if (s.empty() || s.size() > 18)
    return false;
  std::int64_t v = 0;
  std::size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size())
    return false;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (s[i] - '0');
  }
  out = s[0] == '-' ? -v : v;
  return true;
}

bool live(const revocation& r, std::int64_t now, std::int64_t max_ttl_s) {
  return r.what == revocation::kind::token ? r.at > now
                                           : r.at + max_ttl_s > now;
}

} // namespace

bool revocation_set::add(const revocation& r) {
  auto [it, added] = known_.try_emplace({r.what, r.name}, r.at);
  if (added)
    return true;
  if (r.at <= it->second)
    return false;
  it->second = r.at;
  return true;
}

bool revocation_set::knows(const revocation& r) const {
  auto it = known_.find({r.what, r.name});
  return it != known_.end() && it->second >= r.at;
}

std::vector<revocation> revocation_set::entries(std::size_t limit) const {
  std::vector<revocation> out;
  out.reserve(known_.size());
  for (auto& [k, at] : known_)
    out.push_back({k.first, k.second, at});
  std::stable_sort(out.begin(), out.end(),
                   [](const revocation& a, const revocation& b) {
                     return a.at > b.at;
                   });
  if (out.size() > limit)
    out.resize(limit);
  return out;
}

std::vector<revocation>
revocation_set::missing_from(const std::vector<revocation>& other,
                             std::size_t limit) const {
  revocation_set theirs;
  for (auto& r : other)
    theirs.add(r);
  std::vector<revocation> out;
  for (auto& r : entries(known_.size())) {
    auto it = theirs.known_.find({r.what, r.name});
    if (it == theirs.known_.end() || it->second < r.at)
      out.push_back(r);
    if (out.size() >= limit)
      break;
  }
  return out;
}

void revocation_set::sweep(std::int64_t now, std::int64_t max_ttl_s) {
  for (auto it = known_.begin(); it != known_.end();) {
    if (!live({it->first.first, it->first.second, it->second}, now,
              max_ttl_s))
      it = known_.erase(it);
    else
      ++it;
  }
}

std::string encode_revocations(const std::vector<revocation>& rs,
                               const hmac_sha256& mac) {
  std::string out;
  std::size_t n = 0;
  for (auto& r : rs) {
    if (n == max_sync_entries)
      break;
    if (!valid_name(r.name))
      continue;
    auto line = body_of(r) + " " + mac_hex(mac, r) + "\n";
    if (out.size() + line.size() > max_sync_bytes)
      break;
    out += line;
    ++n;
  }
  return out;
}

decoded_revocations decode_revocations(const std::string& text,
                                       const hmac_sha256& mac,
                                       std::int64_t now,
                                       std::int64_t max_ttl_s) {
  decoded_revocations out;
  if (text.size() > max_sync_bytes) {
    out.error = "revocation list of " + std::to_string(text.size())
                + " bytes exceeds " + std::to_string(max_sync_bytes);
    return out;
  }
  auto lines = static_cast<std::size_t>(
    std::count(text.begin(), text.end(), '\n'));
  if (lines > max_sync_entries) {
    out.error = "revocation list of " + std::to_string(lines)
                + " entries exceeds " + std::to_string(max_sync_entries);
    return out;
  }
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos) { // no final newline: torn
      ++out.rejected;
      break;
    }
    std::istringstream in{text.substr(pos, nl - pos)};
    pos = nl + 1;
    std::string kind, name, at, tag, extra;
    revocation r;
    if (!(in >> kind >> name >> at >> tag) || (in >> extra)
        || !valid_name(name) || !parse_int(at, r.at)) {
      ++out.rejected;
      continue;
    }
    if (kind == "token")
      r.what = revocation::kind::token;
    else if (kind == "principal")
      r.what = revocation::kind::principal;
    else {
      ++out.rejected;
      continue;
    }
    r.name = std::move(name);
    if (!same(tag, mac_hex(mac, r))) {
      ++out.rejected;
      continue;
    }
    // Bounded like a relayed revocation: never further ahead than a
    // minute of skew (a token's expiry: than the longest lifetime).
    auto ceiling = r.what == revocation::kind::principal
                     ? now + skew_s
                     : now + max_ttl_s + skew_s;
    r.at = std::min(r.at, ceiling);
    if (!live(r, now, max_ttl_s)) {
      ++out.stale;
      continue;
    }
    out.accepted.push_back(std::move(r));
  }
  return out;
}

} // namespace exo::access
