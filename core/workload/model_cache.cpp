#include "core/workload/model_cache.hpp"

#include <openssl/evp.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace exo::workload {

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

std::string range_sha256(const std::string& path, std::uint64_t offset,
                         std::uint64_t length) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw model_cache_error("cannot open " + path + ": "
                            + std::strerror(errno));
  digest d;
  std::vector<char> buf(1 << 20);
  std::uint64_t done = 0;
  while (done < length) {
    auto want = static_cast<std::size_t>(
      std::min<std::uint64_t>(buf.size(), length - done));
    auto n = ::pread(fd, buf.data(), want,
                     static_cast<off_t>(offset + done));
    if (n <= 0) {
      ::close(fd);
      throw model_cache_error("cannot read " + std::to_string(length)
                              + " bytes at " + std::to_string(offset)
                              + " of " + path);
    }
    d.update(buf.data(), static_cast<std::size_t>(n));
    done += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  return d.hex();
}

void check_parts(const std::vector<model_part>& parts, std::uint64_t size) {
  if (size == 0 || size > max_model_bytes)
    throw model_cache_error("model size " + std::to_string(size)
                            + " is out of range");
  if (parts.empty() || parts.size() > max_model_parts)
    throw model_cache_error("a model transfer names "
                            + std::to_string(parts.size())
                            + " parts (1 to "
                            + std::to_string(max_model_parts) + ")");
  if (parts.front().offset != 0)
    throw model_cache_error("the first part must start at offset 0");
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto& p = parts[i];
    auto what = "part " + std::to_string(i);
    if (!is_sha256(p.sha256))
      throw model_cache_error(what + " has no well-formed SHA-256");
    if (p.length == 0)
      throw model_cache_error(what + " is empty");
    if (i > 0 && p.offset < end)
      throw model_cache_error(what + " overlaps or precedes part "
                              + std::to_string(i - 1));
    if (p.offset > size || p.length > size - p.offset)
      throw model_cache_error(what + " lies outside the "
                              + std::to_string(size) + "-byte model");
    end = p.offset + p.length;
  }
}

struct partial_model::impl {
  std::string dir;
  std::string file;
  std::string manifest;
  std::uint64_t size = 0;
  int fd = -1;
  std::vector<model_part> held;
  // The part being received.
  bool receiving = false;
  model_part part;
  std::uint64_t got = 0;
  std::unique_ptr<digest> d;
};

partial_model::partial_model(const std::string& state_dir,
                             const std::string& sha256, std::uint64_t size)
  : impl_(std::make_unique<impl>()) {
  if (!is_sha256(sha256))
    throw model_cache_error("not a SHA-256 digest: \"" + sha256 + "\"");
  if (size == 0 || size > max_model_bytes)
    throw model_cache_error("model size " + std::to_string(size)
                            + " is out of range");
  auto& m = *impl_;
  make_dir(state_dir + "/models");
  m.dir = state_dir + "/models/" + sha256;
  make_dir(m.dir);
  m.file = m.dir + "/model.gguf";
  m.manifest = m.dir + "/parts";
  m.size = size;
  m.fd = ::open(m.file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (m.fd < 0)
    throw model_cache_error("cannot open " + m.file + ": "
                            + std::strerror(errno));
  struct stat sb {};
  bool fresh = ::fstat(m.fd, &sb) != 0
               || static_cast<std::uint64_t>(sb.st_size) != size;
  if (!fresh) {
    // Read the manifest; a line that does not parse ends it (a crash in
    // the middle of an append leaves at most one torn last line).
    if (std::FILE* f = std::fopen(m.manifest.c_str(), "r")) {
      unsigned long long off = 0, len = 0;
      char sha[65];
      while (std::fscanf(f, "%llu %llu %64s", &off, &len, sha) == 3) {
        model_part p{off, len, sha};
        if (!is_sha256(p.sha256) || p.offset > size
            || p.length > size - p.offset)
          break;
        m.held.push_back(std::move(p));
      }
      std::fclose(f);
    }
  } else {
    std::remove(m.manifest.c_str());
    if (::ftruncate(m.fd, 0) != 0
        || ::ftruncate(m.fd, static_cast<off_t>(size)) != 0)
      throw model_cache_error("cannot size " + m.file + ": "
                              + std::strerror(errno));
  }
}

partial_model::~partial_model() {
  if (impl_->fd >= 0)
    ::close(impl_->fd);
}

std::vector<model_part>
partial_model::missing(const std::vector<model_part>& wanted) const {
  std::vector<model_part> out;
  // The whole file, verified against its digest (the cache's name for it):
  // every range of it is there.
  for (auto& h : impl_->held)
    if (h.offset == 0 && h.length == impl_->size)
      return out;
  for (auto& w : wanted)
    if (std::find(impl_->held.begin(), impl_->held.end(), w)
        == impl_->held.end())
      out.push_back(w);
  return out;
}

void partial_model::begin(const model_part& part) {
  auto& m = *impl_;
  if (part.offset > m.size || part.length > m.size - part.offset)
    throw model_cache_error("a part lies outside the model");
  m.receiving = true;
  m.part = part;
  m.got = 0;
  m.d = std::make_unique<digest>();
}

void partial_model::write(const std::uint8_t* data, std::size_t n) {
  auto& m = *impl_;
  if (!m.receiving)
    throw model_cache_error("write without begin");
  if (n > m.part.length - m.got)
    throw model_cache_error("the sender sent more than the "
                            + std::to_string(m.part.length)
                            + " bytes of the part");
  m.d->update(data, n);
  std::size_t done = 0;
  while (done < n) {
    auto w = ::pwrite(m.fd, data + done, n - done,
                      static_cast<off_t>(m.part.offset + m.got + done));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      throw model_cache_error("cannot write " + m.file + ": "
                              + std::strerror(errno));
    done += static_cast<std::size_t>(w);
  }
  m.got += n;
}

void partial_model::commit() {
  auto& m = *impl_;
  if (!m.receiving)
    throw model_cache_error("commit without begin");
  m.receiving = false;
  if (m.got != m.part.length)
    throw model_cache_error("received " + std::to_string(m.got) + " of "
                            + std::to_string(m.part.length)
                            + " bytes of a part");
  auto got = m.d->hex();
  if (got != m.part.sha256)
    throw model_cache_error("SHA-256 mismatch in the part at offset "
                            + std::to_string(m.part.offset) + ": expected "
                            + m.part.sha256 + ", received " + got);
  if (::fdatasync(m.fd) != 0)
    throw model_cache_error("cannot flush " + m.file);
  std::FILE* f = std::fopen(m.manifest.c_str(), "a");
  if (f == nullptr)
    throw model_cache_error("cannot write " + m.manifest);
  std::fprintf(f, "%llu %llu %s\n",
               static_cast<unsigned long long>(m.part.offset),
               static_cast<unsigned long long>(m.part.length),
               m.part.sha256.c_str());
  bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  std::fclose(f);
  if (!ok)
    throw model_cache_error("cannot flush " + m.manifest);
  m.held.push_back(m.part);
}

std::string partial_model::path() const {
  return impl_->file;
}

std::uint64_t partial_model::size() const {
  return impl_->size;
}

} // namespace exo::workload
