#include "core/tls/hello.hpp"

#include "core/tls/certificate.hpp"
#include "core/tls/challenge.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"

#include <arpa/inet.h>

#include <cstdio>
#include <exception>
#include <map>

namespace exo::tls {

namespace {

constexpr std::string_view magic = "exo-hello-v1\n";

std::string hex(const signature& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (auto b : s) {
    out += digits[b >> 4];
    out += digits[b & 0xF];
  }
  return out;
}

bool unhex(std::string_view h, signature& out) {
  if (h.size() % 2 != 0 || h.size() > 2 * max_signature_size)
    return false;
  out.clear();
  auto val = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  for (std::size_t i = 0; i < h.size(); i += 2) {
    int hi = val(h[i]), lo = val(h[i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out.push_back(static_cast<std::uint8_t>(hi * 16 + lo));
  }
  return true;
}

} // namespace

std::string make_hello(const private_key& key, std::string_view cert_pem,
                       std::string_view cluster, const hello_info& me,
                       std::int64_t time_ms) {
  std::string body{magic};
  body += "cluster=" + std::string{cluster} + "\n";
  body += "name=" + me.name + "\n";
  body += "host=" + me.host + "\n";
  body += "port=" + std::to_string(me.port) + "\n";
  body += "time=" + std::to_string(time_ms) + "\n";
  auto sig = sign_message(key, body, "hello");
  return body + "sig=" + hex(sig) + "\ncert=\n" + std::string{cert_pem};
}

std::optional<hello_info> check_hello(std::string_view d, const trust_store& ca,
                                      std::string_view cluster,
                                      std::int64_t now_ms, std::string& why) {
  if (d.size() > max_hello_size) {
    why = "hello of " + std::to_string(d.size()) + " bytes (at most "
          + std::to_string(max_hello_size) + ")";
    return std::nullopt;
  }
  if (d.substr(0, magic.size()) != magic) {
    why = "not an exo hello";
    return std::nullopt;
  }
  // key=value lines up to "cert=", then the PEM.
  std::map<std::string, std::string> kv;
  std::size_t pos = magic.size(), sig_at = std::string_view::npos;
  std::string_view pem;
  while (pos < d.size()) {
    auto nl = d.find('\n', pos);
    if (nl == std::string_view::npos) {
      why = "a line without its end";
      return std::nullopt;
    }
    auto line = d.substr(pos, nl - pos);
    auto eq = line.find('=');
    if (eq == std::string_view::npos || kv.size() > 8) {
      why = "a malformed line";
      return std::nullopt;
    }
    std::string k{line.substr(0, eq)};
    if (k == "sig")
      sig_at = pos;
    if (k == "cert") {
      pem = d.substr(nl + 1);
      kv[k] = "";
      break;
    }
    if (kv.count(k)) {
      why = "key " + k + " twice";
      return std::nullopt;
    }
    kv[k] = std::string{line.substr(eq + 1)};
    pos = nl + 1;
  }
  for (auto* k : {"cluster", "name", "host", "port", "time", "sig", "cert"})
    if (!kv.count(k)) {
      why = std::string{"no "} + k;
      return std::nullopt;
    }
  if (kv["cluster"] != cluster) {
    why = "another cluster";
    return std::nullopt;
  }
  hello_info h;
  h.name = kv["name"];
  h.host = kv["host"];
  in_addr addr{};
  if (inet_pton(AF_INET, h.host.c_str(), &addr) != 1) {
    why = "host " + h.host + " is not an IPv4 address";
    return std::nullopt;
  }
  long long port = 0, t = 0;
  char tail = 0;
  if (std::sscanf(kv["port"].c_str(), "%lld%c", &port, &tail) != 1
      || port < 1 || port > 65535) {
    why = "bad port";
    return std::nullopt;
  }
  if (std::sscanf(kv["time"].c_str(), "%lld%c", &t, &tail) != 1
      || t < now_ms - hello_max_skew_ms || t > now_ms + hello_max_skew_ms) {
    why = "stale or future hello";
    return std::nullopt;
  }
  h.port = static_cast<std::uint16_t>(port);
  signature sig;
  if (!unhex(kv["sig"], sig) || sig.empty()) {
    why = "bad signature encoding";
    return std::nullopt;
  }
  try {
    auto cn = verify_message(pem, ca, d.substr(0, sig_at), sig,
                             cert_role::node, "hello");
    if (cn != h.name) {
      why = "certificate of " + cn + " in a hello of " + h.name;
      return std::nullopt;
    }
  } catch (const std::exception& e) {
    why = e.what();
    return std::nullopt;
  }
  return h;
}

std::string ca_id(const std::string& cafile) {
  return certificate::load(cafile).fingerprint_sha256();
}

} // namespace exo::tls
