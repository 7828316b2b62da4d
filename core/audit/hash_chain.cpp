#include "core/audit/hash_chain.hpp"

#include <openssl/evp.h>

#include <stdexcept>

namespace exo::audit {

sha256::sha256() {
  md_ = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  ctx_ = EVP_MD_CTX_new();
  if (md_ == nullptr || ctx_ == nullptr) {
    EVP_MD_free(md_);
    EVP_MD_CTX_free(ctx_);
    throw std::runtime_error("OpenSSL provides no SHA-256 digest");
  }
}

sha256::~sha256() {
  EVP_MD_CTX_free(ctx_);
  EVP_MD_free(md_);
}

digest sha256::hash(std::string_view data) {
  digest out{};
  unsigned len = 0;
  if (EVP_DigestInit_ex(ctx_, md_, nullptr) != 1
      || EVP_DigestUpdate(ctx_, data.data(), data.size()) != 1
      || EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != out.size())
    throw std::runtime_error("SHA-256 computation failed in OpenSSL");
  return out;
}

std::string sha256::hex(std::string_view data) {
  auto d = hash(data);
  std::string out;
  out.reserve(64);
  append_hex(out, d.data(), d.size());
  return out;
}

void append_hex(std::string& out, const std::uint8_t* bytes, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 0xf]);
  }
}

bool is_hex_digest(std::string_view s) noexcept {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

} // namespace exo::audit
