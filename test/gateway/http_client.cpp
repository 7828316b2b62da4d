#include "scripted_backend.hpp"
#include "test/support/raw_tls.hpp"

#include <nlohmann/json.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace exo::gateway::testing {

client_socket::client_socket(std::uint16_t port, int rcvbuf) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0)
    throw std::runtime_error(std::string{"socket: "} + std::strerror(errno));
  if (rcvbuf > 0)
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    auto e = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(std::string{"connect: "} + std::strerror(e));
  }
}

client_socket::~client_socket() {
  close();
}

void client_socket::close() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

bool client_socket::send(const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    auto n = ::send(fd_, bytes.data() + off, bytes.size() - off,
                    MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    off += std::size_t(n);
  }
  return true;
}

std::string client_socket::read_all(std::chrono::milliseconds bound) {
  return read_until({}, bound);
}

std::string client_socket::read_until(const std::string& needle,
                                      std::chrono::milliseconds bound) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + bound;
  char buf[16384];
  while (needle.empty() || out.find(needle) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0)
      break;
    auto n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    out.append(buf, std::size_t(n));
  }
  return out;
}

bool client_socket::closed_within(std::chrono::milliseconds bound) {
  return exo::test::socket_closed_within(fd_, bound);
}

http_reply parse_reply(const std::string& raw) {
  http_reply r;
  auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.compare(0, 9, "HTTP/1.1 ") != 0)
    throw std::runtime_error("not an HTTP response: " + raw.substr(0, 200));
  r.status = std::stoi(raw.substr(9, 3));
  std::size_t pos = raw.find("\r\n") + 2;
  while (pos < end) {
    auto eol = raw.find("\r\n", pos);
    auto line = raw.substr(pos, eol - pos);
    auto colon = line.find(':');
    auto name = line.substr(0, colon);
    for (auto& c : name)
      c = char(std::tolower(static_cast<unsigned char>(c)));
    auto value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    r.headers[name] = value;
    pos = eol + 2;
  }
  auto rest = raw.substr(end + 4);
  if (r.headers["transfer-encoding"] == "chunked") {
    std::size_t p = 0;
    for (;;) {
      auto eol = rest.find("\r\n", p);
      if (eol == std::string::npos)
        throw std::runtime_error("truncated chunked body");
      auto size = std::stoul(rest.substr(p, eol - p), nullptr, 16);
      if (size == 0)
        break;
      r.body += rest.substr(eol + 2, size);
      p = eol + 2 + size + 2;
    }
  } else if (r.headers.count("content-length")) {
    r.body = rest.substr(0, std::stoul(r.headers["content-length"]));
  } else {
    r.body = rest;
  }
  return r;
}

http_reply http_exchange(std::uint16_t port, const std::string& raw) {
  client_socket s{port};
  s.send(raw);
  return parse_reply(s.read_all());
}

http_reply https_exchange(std::uint16_t port, const std::string& raw,
                          const std::string& cafile) {
  auto fail = [](const std::string& what) {
    char buf[256] = {};
    ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
    throw std::runtime_error(what + ": " + buf);
  };
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx{
    SSL_CTX_new(TLS_client_method()), SSL_CTX_free};
  if (!ctx || SSL_CTX_load_verify_locations(ctx.get(), cafile.c_str(),
                                            nullptr)
                != 1)
    fail("cannot load " + cafile);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  client_socket s{port};
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl{SSL_new(ctx.get()), SSL_free};
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), "127.0.0.1");
  SSL_set_fd(ssl.get(), s.fd());
  if (SSL_connect(ssl.get()) != 1) {
    auto v = SSL_get_verify_result(ssl.get());
    throw std::runtime_error(std::string{"TLS handshake failed: "}
                             + X509_verify_cert_error_string(v));
  }
  std::size_t off = 0;
  while (off < raw.size()) {
    int n = SSL_write(ssl.get(), raw.data() + off,
                      static_cast<int>(raw.size() - off));
    if (n <= 0)
      fail("SSL_write");
    off += std::size_t(n);
  }
  std::string out;
  char buf[16384];
  for (;;) {
    pollfd p{s.fd(), POLLIN, 0};
    if (SSL_pending(ssl.get()) == 0 && ::poll(&p, 1, 30000) <= 0)
      break;
    int n = SSL_read(ssl.get(), buf, sizeof buf);
    if (n <= 0)
      break;
    out.append(buf, std::size_t(n));
  }
  return parse_reply(out);
}

std::string post(const std::string& path, const std::string& body,
                 const std::string& extra_headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
         + "Content-Type: application/json\r\nConnection: close\r\n"
         + extra_headers + "Content-Length: " + std::to_string(body.size())
         + "\r\n\r\n" + body;
}

std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  std::size_t p = 0;
  while (p < body.size()) {
    auto end = body.find("\n\n", p);
    if (end == std::string::npos)
      throw std::runtime_error("an SSE event without its blank line");
    auto ev = body.substr(p, end - p);
    if (ev.compare(0, 4, "id: ") == 0) { // a text chunk's byte counts
      auto nl = ev.find('\n');
      auto id = ev.substr(4, nl == std::string::npos ? nl : nl - 4);
      // One number per choice, joined by commas.
      if (nl == std::string::npos || id.empty() || id.front() == ','
          || id.back() == ',' || id.find(",,") != std::string::npos
          || id.find_first_not_of("0123456789,") != std::string::npos)
        throw std::runtime_error("an SSE id that is not byte counts: " + ev);
      ev = ev.substr(nl + 1);
    }
    if (ev.compare(0, 6, "data: ") != 0)
      throw std::runtime_error("an SSE event that is not data: " + ev);
    out.push_back(ev.substr(6));
    p = end + 2;
  }
  return out;
}

std::string sse_text(const std::string& body, std::string* id) {
  std::string text;
  for (auto& e : sse_payloads(body)) {
    if (e == "[DONE]")
      break;
    auto j = nlohmann::json::parse(e);
    if (id)
      *id = j["id"];
    if (!j["choices"].empty())
      text += j["choices"][0]["text"].get<std::string>();
  }
  return text;
}

std::vector<std::string> promtool_complaints(const std::string& out,
                                             const std::string& err) {
  std::vector<std::string> other;
  for (const auto* text : {&out, &err}) {
    std::size_t at = 0;
    while (at < text->size()) {
      auto end = text->find('\n', at);
      if (end == std::string::npos)
        end = text->size();
      auto line = text->substr(at, end - at);
      if (!line.empty()
          && line.find("label names should be written in 'snake_case'")
               == std::string::npos)
        other.push_back(line);
      at = end + 1;
    }
  }
  return other;
}

} // namespace exo::gateway::testing
