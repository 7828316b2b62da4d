#include "core/tls/bulk_channel.hpp"

#include "core/tls/certificate.hpp"
#include "core/tls/openssl_util.hpp"
#include "core/tls/private_key.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <stdexcept>
#include <thread>
#include <vector>

// Every TLS read and write here uses SSL_read_ex / SSL_write_ex: the
// process-wide SSL_read interposer (ssl_error_queue_guard.cpp) parses BASP
// framing, which this stream does not have. Each call clears the thread's
// error queue first, as SSL_get_error requires.

/// Defined by ssl_error_queue_guard.cpp in programs that run CAF's TLS:
/// bulk connections do not carry BASP and keep their own limits (weak:
/// absent elsewhere).
extern "C" void exo_tls_guard_exempt(const SSL* ssl) __attribute__((weak));

namespace exo::tls {

namespace {

constexpr std::uint32_t magic = 0x45584f42; // "EXOB"
constexpr std::uint16_t version = 1;
constexpr std::uint32_t max_message = 1024;
constexpr std::size_t piece = 4u << 20;

enum status : std::uint32_t {
  ok = 0,
  bad_request = 1,
  unknown_blob = 2,
  out_of_range = 3,
  not_a_node = 4,
};

using ssl_ctx_ptr = std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)>;
using ssl_ptr = std::unique_ptr<SSL, void (*)(SSL*)>;

std::string openssl_errors() {
  auto text = detail::drain_errors();
  return text.empty() ? std::string{} : " (" + text + ")";
}

/// A TLS 1.3 context with the node's certificate and key, trusting the CA
/// and requiring a certificate from the peer.
ssl_ctx_ptr make_context(const material& files, bool server) {
  auto info = check_material(files); // clear errors before OpenSSL's
  (void) info;
  auto cert = certificate::load(files.certificate);
  auto key = private_key::load(files.key, files.passphrase);
  detail::error_queue_guard guard;
  ssl_ctx_ptr ctx{SSL_CTX_new(server ? TLS_server_method()
                                     : TLS_client_method()),
                  SSL_CTX_free};
  if (!ctx)
    detail::fail(tls_errc::internal, "bulk channel: SSL_CTX_new failed");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  if (SSL_CTX_use_certificate(ctx.get(), cert.native()) != 1
      || SSL_CTX_use_PrivateKey(ctx.get(), key.native()) != 1
      || SSL_CTX_check_private_key(ctx.get()) != 1)
    detail::fail(tls_errc::key_mismatch,
                 "bulk channel: cannot use " + files.certificate + " and "
                   + files.key);
  if (SSL_CTX_load_verify_locations(ctx.get(), files.cafile.c_str(), nullptr)
      != 1)
    detail::fail(tls_errc::io, "bulk channel: cannot load CA file "
                                 + files.cafile);
  SSL_CTX_set_verify(ctx.get(),
                     SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  // Blocking sockets: let OpenSSL retry reads that met a non-data record
  // (a TLS 1.3 session ticket) instead of failing them.
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_AUTO_RETRY);
  return ctx;
}

void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string describe_io_error(SSL* ssl, int, const char* what) {
  auto err = SSL_get_error(ssl, 0);
  std::string why;
  if (err == SSL_ERROR_ZERO_RETURN)
    why = "the peer closed the connection";
  else if (err == SSL_ERROR_SYSCALL
           && (errno == EAGAIN || errno == EWOULDBLOCK))
    why = "timed out";
  else if (err == SSL_ERROR_SYSCALL)
    why = errno != 0 ? std::strerror(errno) : "the connection broke";
  else
    why = "TLS error " + std::to_string(err) + openssl_errors();
  return std::string{what} + ": " + why;
}

/// Reads exactly n bytes or throws.
void read_exact(SSL* ssl, void* buf, std::size_t n, const char* what) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    ERR_clear_error();
    errno = 0;
    std::size_t got = 0;
    if (SSL_read_ex(ssl, p, n, &got) != 1)
      throw std::runtime_error(describe_io_error(ssl, 0, what));
    p += got;
    n -= got;
  }
}

/// Reads exactly n bytes; false when the peer closed the connection before
/// the first byte (a clean end between requests), throws otherwise.
bool read_first(SSL* ssl, void* buf, std::size_t n) {
  ERR_clear_error();
  errno = 0;
  std::size_t got = 0;
  if (SSL_read_ex(ssl, buf, n, &got) != 1) {
    auto err = SSL_get_error(ssl, 0);
    if (err == SSL_ERROR_ZERO_RETURN
        || (err == SSL_ERROR_SYSCALL && errno == 0))
      return false;
    throw std::runtime_error(describe_io_error(ssl, 0, "bulk request"));
  }
  if (got < n)
    read_exact(ssl, static_cast<unsigned char*>(buf) + got, n - got,
               "bulk request");
  return true;
}

void write_all(SSL* ssl, const void* buf, std::size_t n, const char* what) {
  auto* p = static_cast<const unsigned char*>(buf);
  while (n > 0) {
    ERR_clear_error();
    errno = 0;
    std::size_t put = 0;
    if (SSL_write_ex(ssl, p, n, &put) != 1)
      throw std::runtime_error(describe_io_error(ssl, 0, what));
    p += put;
    n -= put;
  }
}

void put_u16(std::vector<unsigned char>& out, std::uint16_t x) {
  out.push_back(static_cast<unsigned char>(x >> 8));
  out.push_back(static_cast<unsigned char>(x));
}

void put_u32(std::vector<unsigned char>& out, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8)
    out.push_back(static_cast<unsigned char>(x >> s));
}

void put_u64(std::vector<unsigned char>& out, std::uint64_t x) {
  for (int s = 56; s >= 0; s -= 8)
    out.push_back(static_cast<unsigned char>(x >> s));
}

std::uint64_t get_be(const unsigned char* p, int bytes) {
  std::uint64_t x = 0;
  for (int i = 0; i < bytes; ++i)
    x = (x << 8) | p[i];
  return x;
}

std::string peer_name(SSL* ssl) {
  auto* x = SSL_get1_peer_certificate(ssl);
  if (!x)
    return {};
  return certificate::adopt(x).common_name();
}

bool peer_is_node(SSL* ssl) {
  auto* x = SSL_get1_peer_certificate(ssl);
  if (!x)
    return false;
  try {
    check_usage(certificate::adopt(x), cert_role::node, "bulk peer");
    return true;
  } catch (const tls_error&) {
    return false;
  }
}

/// Writing to a connection the peer has closed raises SIGPIPE, which would
/// end the process: the server's threads block it for good (they are ours),
/// bulk_fetch for the duration of the call.
void block_sigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

class sigpipe_guard {
 public:
  sigpipe_guard() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~sigpipe_guard() {
    // Consume a SIGPIPE raised meanwhile, then restore the caller's mask.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    timespec zero{};
    while (sigtimedwait(&set, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t old_;
};

struct unique_fd {
  int fd = -1;
  explicit unique_fd(int x = -1) : fd(x) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

// -- bulk_blobs ---------------------------------------------------------------

void bulk_blobs::add_file(const std::string& id, const std::string& path) {
  if (id.empty() || id.size() > bulk_max_id)
    throw std::runtime_error("bulk blob id must have 1 to "
                             + std::to_string(bulk_max_id) + " characters");
  unique_fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0)
    throw std::runtime_error("cannot open " + path + ": "
                             + std::strerror(errno));
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    throw std::runtime_error(path + " is not a regular file");
  auto size = static_cast<std::uint64_t>(sb.st_size);
  if (size == 0) {
    add_memory(id, nullptr, reinterpret_cast<const std::uint8_t*>(""), 0);
    return;
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f.fd, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error("cannot map " + path + ": "
                             + std::strerror(errno));
  std::shared_ptr<const void> owner{p, [size](const void* q) {
                                      ::munmap(const_cast<void*>(q), size);
                                    }};
  add_memory(id, std::move(owner), static_cast<const std::uint8_t*>(p),
             size);
}

void bulk_blobs::add_memory(const std::string& id,
                            std::shared_ptr<const void> owner,
                            const std::uint8_t* data, std::uint64_t size) {
  if (id.empty() || id.size() > bulk_max_id)
    throw std::runtime_error("bulk blob id must have 1 to "
                             + std::to_string(bulk_max_id) + " characters");
  std::lock_guard<std::mutex> lock{mtx_};
  blobs_[id] = view{std::move(owner), data, size};
}

void bulk_blobs::remove(const std::string& id) {
  std::lock_guard<std::mutex> lock{mtx_};
  blobs_.erase(id);
}

bulk_blobs::view bulk_blobs::find(const std::string& id) const {
  std::lock_guard<std::mutex> lock{mtx_};
  auto it = blobs_.find(id);
  return it == blobs_.end() ? view{} : it->second;
}

// -- bulk_server --------------------------------------------------------------

struct bulk_server::impl {
  options opts;
  std::shared_ptr<bulk_blobs> blobs;
  ssl_ctx_ptr ctx{nullptr, SSL_CTX_free};
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::uint16_t port = 0;
  std::thread acceptor;

  struct connection {
    int fd;
    std::thread worker;
    std::atomic<bool> done{false};
  };
  std::mutex mtx;
  std::list<connection> conns;
  bool stopping = false;

  std::atomic<std::uint64_t> n_conn{0}, n_served{0}, n_refused{0},
    n_bytes{0};

  void refuse(SSL* ssl, status code, const std::string& msg) {
    ++n_refused;
    std::vector<unsigned char> out;
    put_u32(out, code);
    auto m = msg.substr(0, max_message);
    put_u32(out, static_cast<std::uint32_t>(m.size()));
    out.insert(out.end(), m.begin(), m.end());
    try {
      write_all(ssl, out.data(), out.size(), "bulk refusal");
    } catch (const std::exception&) {
      // The peer is gone; nothing else to tell it.
    }
  }

  /// Answers one request whose first 8 bytes are in `head`; false when it
  /// was refused (the connection then ends).
  bool serve_request(SSL* ssl, const unsigned char* head) {
    auto id_len = static_cast<std::size_t>(get_be(head + 6, 2));
    if (get_be(head, 4) != magic || get_be(head + 4, 2) != version
        || id_len == 0 || id_len > bulk_max_id) {
      refuse(ssl, bad_request, "malformed bulk request");
      return false;
    }
    std::string id(id_len, '\0');
    read_exact(ssl, id.data(), id_len, "bulk request");
    unsigned char range[16];
    read_exact(ssl, range, sizeof(range), "bulk request");
    auto offset = get_be(range, 8);
    auto length = get_be(range + 8, 8);
    auto blob = blobs->find(id);
    if (!blob.data) {
      refuse(ssl, unknown_blob, "blob " + id + " is not served here");
      return false;
    }
    if (offset > blob.size || length > blob.size - offset) {
      refuse(ssl, out_of_range,
             "range [" + std::to_string(offset) + ", +"
               + std::to_string(length) + ") lies outside blob " + id + " ("
               + std::to_string(blob.size) + " bytes)");
      return false;
    }
    std::vector<unsigned char> out;
    put_u32(out, ok);
    put_u32(out, 0);
    write_all(ssl, out.data(), out.size(), "bulk response");
    auto* p = blob.data + offset;
    for (std::uint64_t left = length; left > 0;) {
      auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, piece));
      write_all(ssl, p, n, "bulk data");
      p += n;
      left -= n;
      n_bytes += n;
    }
    ++n_served;
    return true;
  }

  void serve(int fd) {
    block_sigpipe();
    set_timeouts(fd, opts.io_timeout);
    ssl_ptr ssl{SSL_new(ctx.get()), SSL_free};
    if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) {
      ++n_refused;
      return;
    }
    if (exo_tls_guard_exempt)
      exo_tls_guard_exempt(ssl.get());
    ERR_clear_error();
    if (SSL_accept(ssl.get()) != 1) { // wrong CA, no certificate, garbage
      ERR_clear_error();
      ++n_refused;
      return;
    }
    try {
      if (!peer_is_node(ssl.get())) {
        refuse(ssl.get(), not_a_node,
               "the bulk channel serves cluster nodes only");
        return;
      }
      // Requests follow one another until the client closes.
      for (;;) {
        unsigned char head[8];
        if (!read_first(ssl.get(), head, sizeof(head)))
          break; // closed cleanly between requests
        if (!serve_request(ssl.get(), head))
          return;
      }
      ERR_clear_error();
      SSL_shutdown(ssl.get());
    } catch (const std::exception&) {
      ++n_refused; // a broken or stalled peer: drop it
    }
    ERR_clear_error();
  }

  void reap_locked() {
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->done) {
        it->worker.join();
        ::close(it->fd);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  }

  void accept_loop() {
    for (;;) {
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR)
          continue;
        return;
      }
      if (fds[1].revents != 0)
        return;
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0)
        continue;
      std::lock_guard<std::mutex> lock{mtx};
      reap_locked();
      if (stopping || conns.size() >= opts.max_connections) {
        ::close(fd);
        ++n_refused;
        continue;
      }
      ++n_conn;
      conns.emplace_back();
      auto& c = conns.back();
      c.fd = fd;
      c.worker = std::thread{[this, &c] {
        serve(c.fd);
        c.done = true;
      }};
    }
  }
};

bulk_server::bulk_server(const material& files,
                         std::shared_ptr<bulk_blobs> blobs, options opts)
  : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.opts = std::move(opts);
  d.blobs = blobs ? std::move(blobs) : std::make_shared<bulk_blobs>();
  d.ctx = make_context(files, true);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto port_text = std::to_string(d.opts.port);
  if (int rc = ::getaddrinfo(d.opts.host.empty() ? nullptr
                                                 : d.opts.host.c_str(),
                             port_text.c_str(), &hints, &res);
      rc != 0)
    throw std::runtime_error("bulk channel: cannot resolve " + d.opts.host
                             + ": " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard{res, ::freeaddrinfo};
  std::string why = "no address";
  for (auto* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      d.listen_fd = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  if (d.listen_fd < 0)
    throw std::runtime_error("bulk channel: cannot listen on " + d.opts.host
                             + ":" + port_text + ": " + why);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(d.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  d.port = ntohs(ss.ss_family == AF_INET6
                   ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(d.wake, O_CLOEXEC) != 0) {
    ::close(d.listen_fd);
    throw std::runtime_error("bulk channel: pipe failed");
  }
  d.acceptor = std::thread{[&d] { d.accept_loop(); }};
}

bulk_server::~bulk_server() {
  auto& d = *impl_;
  char x = 1;
  (void) !::write(d.wake[1], &x, 1);
  d.acceptor.join();
  {
    std::lock_guard<std::mutex> lock{d.mtx};
    d.stopping = true;
    for (auto& c : d.conns)
      ::shutdown(c.fd, SHUT_RDWR); // wakes a worker blocked in I/O
  }
  for (auto& c : d.conns)
    c.worker.join();
  for (auto& c : d.conns)
    ::close(c.fd);
  ::close(d.listen_fd);
  ::close(d.wake[0]);
  ::close(d.wake[1]);
}

std::uint16_t bulk_server::port() const noexcept {
  return impl_->port;
}

bulk_server_stats bulk_server::stats() const {
  return {impl_->n_conn.load(), impl_->n_served.load(),
          impl_->n_refused.load(), impl_->n_bytes.load()};
}

// -- bulk_session / bulk_fetch -------------------------------------------------

struct bulk_session::impl {
  ssl_ctx_ptr ctx{nullptr, SSL_CTX_free};
  unique_fd sock;
  ssl_ptr ssl{nullptr, SSL_free};
  std::string where;
  bool broken = false;
};

bulk_session::bulk_session(const material& files, const std::string& host,
                           std::uint16_t port,
                           const std::string& expected_node,
                           std::chrono::milliseconds io_timeout)
  : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.where = expected_node + " (" + host + ":" + std::to_string(port) + ")";
  sigpipe_guard no_sigpipe;
  d.ctx = make_context(files, false);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
      rc != 0)
    throw std::runtime_error("bulk fetch: cannot resolve " + host + ": "
                             + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard{res, ::freeaddrinfo};
  std::string why = "no address";
  for (auto* a = res; a; a = a->ai_next) {
    unique_fd fd{::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0)};
    if (fd.fd < 0)
      continue;
    set_timeouts(fd.fd, io_timeout);
    if (::connect(fd.fd, a->ai_addr, a->ai_addrlen) == 0) {
      std::swap(d.sock.fd, fd.fd);
      break;
    }
    why = std::strerror(errno);
  }
  if (d.sock.fd < 0)
    throw std::runtime_error("bulk fetch: cannot connect to " + d.where
                             + ": " + why);
  d.ssl.reset(SSL_new(d.ctx.get()));
  if (!d.ssl || SSL_set_fd(d.ssl.get(), d.sock.fd) != 1)
    detail::fail(tls_errc::internal, "bulk fetch: SSL_new failed");
  if (exo_tls_guard_exempt)
    exo_tls_guard_exempt(d.ssl.get());
  ERR_clear_error();
  if (SSL_connect(d.ssl.get()) != 1) {
    auto verify = SSL_get_verify_result(d.ssl.get());
    auto detail_text = openssl_errors();
    throw tls_error(verify != X509_V_OK ? tls_errc::untrusted
                                        : tls_errc::internal,
                    "bulk fetch: TLS handshake with " + d.where + " failed"
                      + (verify != X509_V_OK
                           ? std::string{": "}
                               + X509_verify_cert_error_string(verify)
                           : detail_text));
  }
  auto name = peer_name(d.ssl.get());
  if (name != expected_node)
    throw tls_error(tls_errc::name_mismatch,
                    "bulk fetch: the server at " + host + ":" + port_text
                      + " presented a certificate for \"" + name
                      + "\", not \"" + expected_node + "\"");
}

bulk_session::~bulk_session() {
  auto& d = *impl_;
  if (d.ssl && !d.broken) {
    sigpipe_guard no_sigpipe;
    ERR_clear_error();
    SSL_shutdown(d.ssl.get());
  }
  ERR_clear_error();
}

void bulk_session::fetch(
  const std::string& id, std::uint64_t offset, std::uint64_t length,
  const std::function<void(const std::uint8_t*, std::size_t)>& sink) {
  auto& d = *impl_;
  if (id.empty() || id.size() > bulk_max_id)
    throw std::runtime_error("bulk fetch: blob id must have 1 to "
                             + std::to_string(bulk_max_id) + " characters");
  if (d.broken)
    throw std::runtime_error("bulk fetch: the session with " + d.where
                             + " failed before");
  sigpipe_guard no_sigpipe;
  d.broken = true; // until this fetch completes
  auto* ssl = d.ssl.get();
  std::vector<unsigned char> req;
  put_u32(req, magic);
  put_u16(req, version);
  put_u16(req, static_cast<std::uint16_t>(id.size()));
  req.insert(req.end(), id.begin(), id.end());
  put_u64(req, offset);
  put_u64(req, length);
  write_all(ssl, req.data(), req.size(), "bulk fetch: request");
  unsigned char head[8];
  read_exact(ssl, head, sizeof(head), "bulk fetch: response");
  auto code = static_cast<std::uint32_t>(get_be(head, 4));
  auto msg_len = static_cast<std::uint32_t>(get_be(head + 4, 4));
  if (msg_len > max_message)
    throw std::runtime_error("bulk fetch: " + d.where
                             + " sent a malformed response");
  std::string msg(msg_len, '\0');
  if (msg_len > 0)
    read_exact(ssl, msg.data(), msg_len, "bulk fetch: response");
  if (code != ok)
    throw std::runtime_error("bulk fetch: " + d.where + " refused: "
                             + (msg.empty() ? "status " + std::to_string(code)
                                            : msg));
  std::vector<std::uint8_t> buf(
    static_cast<std::size_t>(std::min<std::uint64_t>(length, piece)));
  for (std::uint64_t left = length; left > 0;) {
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, piece));
    read_exact(ssl, buf.data(), n, "bulk fetch: data");
    sink(buf.data(), n);
    left -= n;
  }
  d.broken = false;
}

void bulk_fetch(const material& files, const std::string& host,
                std::uint16_t port, const std::string& expected_node,
                const std::string& id, std::uint64_t offset,
                std::uint64_t length,
                const std::function<void(const std::uint8_t*, std::size_t)>&
                  sink,
                std::chrono::milliseconds io_timeout) {
  if (id.empty() || id.size() > bulk_max_id)
    throw std::runtime_error("bulk fetch: blob id must have 1 to "
                             + std::to_string(bulk_max_id) + " characters");
  bulk_session s{files, host, port, expected_node, io_timeout};
  s.fetch(id, offset, length, sink);
}

} // namespace exo::tls
