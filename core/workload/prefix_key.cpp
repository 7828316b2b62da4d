#include "core/workload/prefix_key.hpp"

#include <openssl/evp.h>

#include <memory>
#include <stdexcept>

namespace exo::workload {

namespace {

struct ctx_free {
  void operator()(EVP_MD_CTX* c) const noexcept {
    EVP_MD_CTX_free(c);
  }
};
using ctx_ptr = std::unique_ptr<EVP_MD_CTX, ctx_free>;

ctx_ptr new_ctx() {
  ctx_ptr c{EVP_MD_CTX_new()};
  if (!c)
    throw std::runtime_error("prefix keys: OpenSSL could not make a digest "
                             "context");
  return c;
}

} // namespace

std::vector<prefix_key> prefix_keys(const std::vector<std::int32_t>& tokens,
                                    std::uint32_t piece) {
  std::vector<prefix_key> out;
  if (piece == 0 || tokens.size() <= piece)
    return out;
  const std::size_t last = (tokens.size() - 1) / piece * piece;
  const std::size_t count = last / piece;
  const std::size_t first =
    count > max_prefix_keys ? (count - max_prefix_keys + 1) * piece : piece;
  auto ctx = new_ctx();
  if (EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("prefix keys: SHA-256 is not available");
  auto fin = new_ctx();
  std::uint8_t bytes[4];
  for (std::size_t i = 0; i < last; ++i) {
    auto v = static_cast<std::uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b)
      bytes[b] = static_cast<std::uint8_t>(v >> (8 * b));
    EVP_DigestUpdate(ctx.get(), bytes, sizeof bytes);
    const std::size_t n = i + 1;
    if (n % piece != 0 || n < first)
      continue;
    // The digest of the tokens so far and their count, on a copy (the
    // running digest goes on).
    if (EVP_MD_CTX_copy_ex(fin.get(), ctx.get()) != 1)
      throw std::runtime_error("prefix keys: a digest could not be copied");
    auto len = static_cast<std::uint32_t>(n);
    for (int b = 0; b < 4; ++b)
      bytes[b] = static_cast<std::uint8_t>(len >> (8 * b));
    EVP_DigestUpdate(fin.get(), bytes, sizeof bytes);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_DigestFinal_ex(fin.get(), md, &md_len);
    std::uint64_t key = 0;
    for (int b = 0; b < 8; ++b)
      key |= std::uint64_t{md[b]} << (8 * b);
    out.push_back({len, key == 0 ? 1 : key});
  }
  return out;
}

} // namespace exo::workload
