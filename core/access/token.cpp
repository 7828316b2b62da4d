#include "core/access/token.hpp"

#include "core/access/base64url.hpp"
#include "core/text/json_escape.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <simdjson.h>

#include <algorithm>
#include <stdexcept>

namespace exo::access {

bool token_claims::allows_device(std::string_view device) const noexcept {
  if (all_devices)
    return true;
  return std::find(devices.begin(), devices.end(), device) != devices.end();
}

std::string_view to_string(decision_code c) noexcept {
  switch (c) {
    case decision_code::allow: return "allow";
    case decision_code::malformed: return "malformed";
    case decision_code::truncated: return "truncated";
    case decision_code::bad_version: return "bad_version";
    case decision_code::bad_signature: return "bad_signature";
    case decision_code::expired: return "expired";
    case decision_code::not_yet_valid: return "not_yet_valid";
    case decision_code::revoked: return "revoked";
    case decision_code::permission_denied: return "permission_denied";
    case decision_code::device_out_of_scope: return "device_out_of_scope";
    case decision_code::quota_exceeded: return "quota_exceeded";
    case decision_code::rate_limited: return "rate_limited";
  }
  return "unknown";
}

// -- hmac_sha256 --------------------------------------------------------------

hmac_sha256::hmac_sha256(std::string_view key) : keyed_(nullptr) {
  if (key.size() < 32)
    throw std::invalid_argument("token key must be at least 32 bytes, got "
                                + std::to_string(key.size()));
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr)
    throw std::runtime_error("OpenSSL provides no HMAC");
  keyed_ = EVP_MAC_CTX_new(mac);
  EVP_MAC_free(mac); // the context keeps its own reference
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
    OSSL_PARAM_construct_end(),
  };
  auto key_bytes = reinterpret_cast<const unsigned char*>(key.data());
  if (keyed_ == nullptr
      || EVP_MAC_init(keyed_, key_bytes, key.size(), params) != 1) {
    EVP_MAC_CTX_free(keyed_);
    throw std::runtime_error("cannot set up HMAC-SHA256 in OpenSSL");
  }
}

hmac_sha256::~hmac_sha256() {
  EVP_MAC_CTX_free(keyed_);
}

std::array<std::uint8_t, 32> hmac_sha256::mac(std::string_view data) const {
  std::array<std::uint8_t, 32> out{};
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(keyed_);
  std::size_t len = 0;
  bool ok = ctx != nullptr
            && EVP_MAC_update(ctx,
                              reinterpret_cast<const unsigned char*>(
                                data.data()),
                              data.size())
                 == 1
            && EVP_MAC_final(ctx, out.data(), &len, out.size()) == 1
            && len == out.size();
  EVP_MAC_CTX_free(ctx);
  if (!ok)
    throw std::runtime_error("HMAC-SHA256 computation failed in OpenSSL");
  return out;
}

// -- token_issuer -------------------------------------------------------------

token_issuer::token_issuer(std::string_view key) : mac_(key) {
  // The key is checked by hmac_sha256.
}

std::string token_issuer::issue(const token_claims& c) const {
  if (c.id.empty())
    throw std::invalid_argument("token claims: empty token id");
  if (c.principal.empty())
    throw std::invalid_argument("token claims: empty principal");
  if (c.expires_at <= c.issued_at)
    throw std::invalid_argument("token claims: expiry must follow issue time");
  using exo::text::append_json_string;
  std::string json = "{\"v\":1,\"jti\":";
  append_json_string(json, c.id);
  json += ",\"sub\":";
  append_json_string(json, c.principal);
  json += ",\"role\":\"";
  json += to_string(c.granted_role);
  json += "\",\"perms\":[";
  bool first = true;
  for (std::size_t i = 0; i < permission_count; ++i) {
    auto p = static_cast<permission>(i);
    if (!c.extra.contains(p))
      continue;
    if (!first)
      json += ',';
    first = false;
    json += '"';
    json += to_string(p);
    json += '"';
  }
  json += "],\"dev\":";
  if (c.all_devices) {
    json += "\"*\"";
  } else {
    json += '[';
    for (std::size_t i = 0; i < c.devices.size(); ++i) {
      if (i > 0)
        json += ',';
      append_json_string(json, c.devices[i]);
    }
    json += ']';
  }
  if (c.quota_bytes != unlimited_quota) {
    json += ",\"quota\":";
    json += std::to_string(c.quota_bytes);
  }
  json += ",\"iat\":";
  json += std::to_string(c.issued_at);
  json += ",\"exp\":";
  json += std::to_string(c.expires_at);
  json += '}';
  std::string token{token_prefix};
  token += base64url_encode(json);
  auto sig = mac_.mac(token);
  token += '.';
  token += base64url_encode(
    std::string_view{reinterpret_cast<const char*>(sig.data()), sig.size()});
  return token;
}

// -- decode_token -------------------------------------------------------------

namespace {

decoded_token refuse(decision_code code, std::string reason) {
  decoded_token out;
  out.code = code;
  out.reason = std::move(reason);
  return out;
}

std::string parse_claims(std::string_view json, token_claims& c) {
  thread_local simdjson::dom::parser parser; // reuses its buffers
  simdjson::dom::object obj;
  if (auto err = parser.parse(json.data(), json.size()).get(obj))
    return std::string{"payload is not a JSON object: "}
           + simdjson::error_message(err);
  std::uint64_t version = 0;
  if (obj["v"].get(version) || version != 1)
    return "payload version is not 1";
  std::string_view id, sub, role_name;
  if (obj["jti"].get(id) || id.empty())
    return "missing token id \"jti\"";
  if (obj["sub"].get(sub) || sub.empty())
    return "missing principal \"sub\"";
  if (obj["role"].get(role_name))
    return "missing \"role\"";
  auto r = parse_role(role_name);
  if (!r)
    return "unknown role \"" + std::string{role_name} + "\"";
  c.id.assign(id);
  c.principal.assign(sub);
  c.granted_role = *r;
  simdjson::dom::array perms;
  if (obj["perms"].get(perms))
    return "missing \"perms\" list";
  for (auto item : perms) {
    std::string_view name;
    if (item.get(name))
      return "\"perms\" holds a non-string";
    auto p = parse_permission(name);
    if (!p)
      return "unknown permission \"" + std::string{name} + "\"";
    c.extra.add(*p);
  }
  simdjson::dom::element dev;
  if (obj["dev"].get(dev))
    return "missing device scope \"dev\"";
  std::string_view star;
  simdjson::dom::array devs;
  if (!dev.get(star) && star == "*") {
    c.all_devices = true;
  } else if (!dev.get(devs)) {
    for (auto item : devs) {
      std::string_view d;
      if (item.get(d))
        return "\"dev\" holds a non-string";
      c.devices.emplace_back(d);
    }
  } else {
    return "\"dev\" must be \"*\" or a list of device ids";
  }
  std::uint64_t quota = 0;
  auto q = obj["quota"];
  if (q.error() == simdjson::NO_SUCH_FIELD)
    c.quota_bytes = unlimited_quota;
  else if (q.get(quota))
    return "\"quota\" is not a byte count";
  else
    c.quota_bytes = quota;
  if (obj["iat"].get(c.issued_at) || obj["exp"].get(c.expires_at))
    return "missing or invalid \"iat\"/\"exp\"";
  return {};
}

} // namespace

decoded_token decode_token(std::string_view token, const hmac_sha256& mac) {
  using dc = decision_code;
  if (token.empty())
    return refuse(dc::malformed, "empty token");
  if (token.size() > 8192)
    return refuse(dc::malformed, "token longer than 8192 bytes");
  if (token.substr(0, 3) != "exo" || token.size() < 4 || token[3] < '0'
      || token[3] > '9')
    return refuse(dc::malformed, "not an exo token (no \"exo<version>.\" "
                                 "prefix)");
  auto first_dot = token.find('.');
  if (first_dot == std::string_view::npos)
    return refuse(dc::truncated, "token truncated: no payload part");
  if (token.substr(0, first_dot + 1) != token_prefix)
    return refuse(dc::bad_version, "unsupported token version \""
                                     + std::string{token.substr(0, first_dot)}
                                     + "\" (this build reads exo1)");
  auto second_dot = token.find('.', first_dot + 1);
  if (second_dot == std::string_view::npos)
    return refuse(dc::truncated, "token truncated: no signature part");
  if (token.find('.', second_dot + 1) != std::string_view::npos)
    return refuse(dc::malformed, "token has more than three parts");
  auto sig_text = token.substr(second_dot + 1);
  // A 32-byte MAC is 43 base64url characters.
  auto b64_char = [](char ch) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z')
           || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
  };
  if (!std::all_of(sig_text.begin(), sig_text.end(), b64_char))
    return refuse(dc::malformed, "signature is not valid base64url");
  if (sig_text.size() < 43)
    return refuse(dc::truncated, "token truncated: signature has "
                                   + std::to_string(sig_text.size())
                                   + " of 43 characters");
  auto sig = base64url_decode(sig_text);
  if (!sig || sig->size() != 32)
    return refuse(dc::malformed, "signature is not a 32-byte base64url MAC");
  auto expect = mac.mac(token.substr(0, second_dot));
  if (CRYPTO_memcmp(expect.data(), sig->data(), expect.size()) != 0)
    return refuse(dc::bad_signature,
                  "signature does not match: token forged or altered");
  auto payload = base64url_decode(
    token.substr(first_dot + 1, second_dot - first_dot - 1));
  if (!payload)
    return refuse(dc::malformed, "payload is not valid base64url");
  decoded_token out;
  auto err = parse_claims(*payload, out.claims);
  if (!err.empty())
    return refuse(dc::malformed, "bad token payload: " + err);
  out.code = dc::allow;
  return out;
}

} // namespace exo::access
