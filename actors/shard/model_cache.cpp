#include "actors/shard/model_cache.hpp"

#include <openssl/evp.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace exo::shard {

namespace {

struct digest {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  digest() {
    if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1)
      throw model_cache_error("cannot start a SHA-256 digest");
  }
  ~digest() {
    EVP_MD_CTX_free(ctx);
  }
  digest(const digest&) = delete;
  digest& operator=(const digest&) = delete;
  void update(const void* p, std::size_t n) {
    if (EVP_DigestUpdate(ctx, p, n) != 1)
      throw model_cache_error("SHA-256 update failed");
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx, md, &len) != 1)
      throw model_cache_error("SHA-256 final failed");
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
      out += digits[md[i] >> 4];
      out += digits[md[i] & 15];
    }
    return out;
  }
};

void make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    throw model_cache_error("cannot create " + path + ": "
                            + std::strerror(errno));
}

} // namespace

std::uint64_t file_size(const std::string& path) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    throw model_cache_error("cannot read " + path + ": "
                            + std::strerror(errno));
  return static_cast<std::uint64_t>(sb.st_size);
}

std::string file_sha256(const std::string& path) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    throw model_cache_error("cannot read " + path + ": "
                            + std::strerror(errno));
  using key = std::tuple<std::string, std::int64_t, std::int64_t,
                         std::int64_t>;
  static std::mutex mx;
  static std::map<key, std::string> memo;
  key k{path, static_cast<std::int64_t>(sb.st_size),
        static_cast<std::int64_t>(sb.st_mtim.tv_sec),
        static_cast<std::int64_t>(sb.st_mtim.tv_nsec)};
  {
    std::lock_guard<std::mutex> guard{mx};
    if (auto it = memo.find(k); it != memo.end())
      return it->second;
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    throw model_cache_error("cannot open " + path + ": "
                            + std::strerror(errno));
  digest d;
  std::vector<char> buf(1 << 20);
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0)
    d.update(buf.data(), n);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed)
    throw model_cache_error("cannot read " + path);
  auto out = d.hex();
  std::lock_guard<std::mutex> guard{mx};
  memo[k] = out;
  return out;
}

bool is_sha256(const std::string& s) {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

std::string cached_model_path(const std::string& state_dir,
                              const std::string& sha256) {
  return state_dir + "/models/" + sha256 + "/model.gguf";
}

struct model_download::impl {
  std::string dir;
  std::string tmp;
  std::string sha256;
  std::uint64_t size = 0;
  std::FILE* f = nullptr;
  digest d;
  bool done = false;
};

model_download::model_download(const std::string& state_dir,
                               const std::string& sha256, std::uint64_t size)
  : impl_(std::make_unique<impl>()) {
  if (!is_sha256(sha256))
    throw model_cache_error("not a SHA-256 digest: \"" + sha256 + "\"");
  make_dir(state_dir + "/models");
  impl_->dir = state_dir + "/models/" + sha256;
  make_dir(impl_->dir);
  impl_->tmp = impl_->dir + "/model.gguf.part"
               + std::to_string(static_cast<long>(::getpid()));
  impl_->sha256 = sha256;
  impl_->size = size;
  impl_->f = std::fopen(impl_->tmp.c_str(), "wb");
  if (impl_->f == nullptr)
    throw model_cache_error("cannot write " + impl_->tmp + ": "
                            + std::strerror(errno));
}

model_download::~model_download() {
  if (impl_->f != nullptr)
    std::fclose(impl_->f);
  if (!impl_->done)
    std::remove(impl_->tmp.c_str());
}

void model_download::append(const std::uint8_t* data, std::size_t n) {
  if (received_ + n > impl_->size)
    throw model_cache_error("the sender sent more than the "
                            + std::to_string(impl_->size)
                            + " bytes it announced");
  if (std::fwrite(data, 1, n, impl_->f) != n)
    throw model_cache_error("cannot write " + impl_->tmp);
  impl_->d.update(data, n);
  received_ += n;
}

std::string model_download::finish() {
  if (received_ != impl_->size)
    throw model_cache_error("received " + std::to_string(received_)
                            + " of " + std::to_string(impl_->size)
                            + " bytes");
  auto got = impl_->d.hex();
  if (got != impl_->sha256)
    throw model_cache_error("SHA-256 mismatch: expected " + impl_->sha256
                            + ", received " + got);
  if (std::fflush(impl_->f) != 0 || ::fsync(::fileno(impl_->f)) != 0)
    throw model_cache_error("cannot flush " + impl_->tmp);
  std::fclose(impl_->f);
  impl_->f = nullptr;
  auto path = impl_->dir + "/model.gguf";
  if (std::rename(impl_->tmp.c_str(), path.c_str()) != 0)
    throw model_cache_error("cannot move " + impl_->tmp + " to " + path);
  impl_->done = true;
  return path;
}

} // namespace exo::shard
