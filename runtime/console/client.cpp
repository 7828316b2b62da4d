#include "runtime/console/client.hpp"

#include "messages/cluster.hpp"
#include "messages/errors.hpp"
#include "messages/registration.hpp"
#include "runtime/system/caf_tls.hpp"
#include "core/tls/certificate.hpp"
#include "core/tls/challenge.hpp"
#include "core/tls/private_key.hpp"
#include "core/tls/tls_error.hpp"
#include "core/tls/trust_store.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <cctype>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <sys/stat.h>

namespace exo::console {

std::string read_token_file(const std::string& path) {
  auto where = "--token-file " + path + ": ";
  struct stat sb;
  if (::stat(path.c_str(), &sb) == 0 && !S_ISREG(sb.st_mode))
    throw client_error(where + "not a regular file: cannot read the token");
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw client_error(where + "cannot read the token: "
                       + std::strerror(errno));
  std::string text(16 * 1024 + 1, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  if (in.bad())
    throw client_error(where + "cannot read the token");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > 16 * 1024)
    throw client_error(where + "larger than 16 KiB: not a token file");
  text = text.substr(0, text.find('\n'));
  auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!text.empty() && space(static_cast<unsigned char>(text.back())))
    text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && space(static_cast<unsigned char>(text[start])))
    ++start;
  text.erase(0, start);
  if (text.empty())
    throw client_error(where + "the file holds no token (empty first line)");
  for (unsigned char c : text)
    if (c <= ' ' || c >= 0x7f)
      throw client_error(where + "the token holds whitespace or control "
                                 "characters");
  return text;
}

namespace {

/// Watches the node's gate from a second actor while a request is awaited:
/// a monitor (CAF reports a closed connection at once) and a ping every
/// half second. An answer (a refusal too: this actor did not join) means
/// the node is there; two pings unanswered for 1 s each (a frozen node)
/// end the wait after about 3 s. The wait ends with an error response
/// given to the waiting actor, and stop() says why.
class node_watch {
public:
  node_watch(caf::actor_system* sys, caf::actor gate, caf::blocking_actor* waiter,
             caf::message_id response, std::string node, std::string where)
    : sys_(sys), gate_(std::move(gate)), waiter_(waiter), response_(response),
      node_(std::move(node)), where_(std::move(where)) {
    thread_ = std::thread{[this] { run(); }};
  }

  ~node_watch() {
    stop();
  }

  node_watch(const node_watch&) = delete;
  node_watch& operator=(const node_watch&) = delete;

  /// Ends the watch; what ended the wait, or "" when the node answered.
  std::string stop() {
    {
      std::lock_guard<std::mutex> guard{mx_};
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
    std::lock_guard<std::mutex> guard{mx_};
    return lost_;
  }

private:
  void run() {
    using namespace std::chrono;
    caf::scoped_actor pinger{*sys_};
    // CAF tells a monitor when the connection to the node closes.
    pinger->monitor(gate_);
    int missed = 0;
    std::string why;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock{mx_};
        if (cv_.wait_for(lock, milliseconds{500}, [this] { return stopping_; }))
          return;
      }
      bool down = false;
      pinger->receive([&](caf::down_msg&) { down = true; },
                      caf::after(milliseconds{0}) >> [] {});
      if (down) {
        why = "the connection to it closed";
        break;
      }
      bool answered = false;
      pinger->request(gate_, milliseconds{1000}, ping_atom::value,
                      std::int64_t{0})
        .receive([&](std::int64_t) { answered = true; },
                 [&](caf::error& err) {
                   // The gate's refusal (this actor did not join) is an
                   // answer too; CAF's errors are not.
                   answered = err.category() != caf::atom("system");
                 });
      missed = answered ? 0 : missed + 1;
      if (missed >= 2) {
        why = "it stopped answering (two pings of 1 s)";
        break;
      }
    }
    {
      std::lock_guard<std::mutex> guard{mx_};
      if (stopping_)
        return;
      lost_ = "lost node " + node_ + " (" + where_ + "): " + why;
    }
    // The waiting request ends now, with this error as its answer.
    waiter_->enqueue(caf::make_mailbox_element(
                       nullptr, response_, {},
                       make_exo_error(exo_errc::failed_state, lost_)),
                     nullptr);
  }

  caf::actor_system* sys_;
  caf::actor gate_;
  caf::blocking_actor* waiter_;
  caf::message_id response_;
  std::string node_;
  std::string where_;
  std::mutex mx_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string lost_;
  std::thread thread_;
};

} // namespace

struct client::impl {
  tls::material files;
  std::string name;
  std::chrono::milliseconds timeout;
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<tls::private_key> key;
  std::unique_ptr<tls::trust_store> ca;
  std::string cert_pem;
  caf::actor gate;
  std::string node;
  std::string where; ///< host:port of the node

  /// One actor for the whole session: the gate authorises the actor that
  /// completed the handshake, not the process.
  std::unique_ptr<caf::scoped_actor> self;
};

client::client(tls::material files, std::chrono::milliseconds timeout)
  : impl_(std::make_unique<impl>()) {
  auto& d = *impl_;
  d.files = std::move(files);
  d.files.role = tls::cert_role::client;
  d.timeout = timeout;
  try {
    auto info = tls::check_material(d.files);
    d.name = info.common_name;
    d.key = std::make_unique<tls::private_key>(
      tls::private_key::load(d.files.key, d.files.passphrase));
    d.ca = std::make_unique<tls::trust_store>(
      tls::trust_store::load(d.files.cafile));
    d.cert_pem = tls::certificate::load(d.files.certificate).to_pem();
    d.cfg = std::make_unique<caf::actor_system_config>();
    register_messages(*d.cfg);
    d.cfg->load<caf::io::middleman>();
    d.cfg->load<caf::openssl::manager>();
    tls::apply_material(*d.cfg, d.files);
    tls::apply_transport_settings(*d.cfg);
  } catch (const tls::tls_error& e) {
    throw client_error(std::string{"TLS: "} + e.what());
  }
  d.sys = std::make_unique<caf::actor_system>(*d.cfg);
  d.self = std::make_unique<caf::scoped_actor>(*d.sys);
}

client::~client() {
  impl_->self.reset();
}

const std::string& client::node_name() const noexcept {
  return impl_->node;
}

std::string client::render(const caf::error& err) const {
  return impl_->sys->render(err);
}

void client::connect(const std::string& host, std::uint16_t port) {
  auto& d = *impl_;
  auto& self = *d.self;
  auto where = host + ":" + std::to_string(port);
  d.where = where;
  caf::strong_actor_ptr ptr;
  std::string failure;
  self
    ->request(d.sys->openssl_manager().actor_handle(), d.timeout,
              caf::connect_atom::value, host, port)
    .receive(
      [&](const caf::node_id&, caf::strong_actor_ptr& p,
          const std::set<std::string>&) { ptr = std::move(p); },
      [&](caf::error& err) { failure = d.sys->render(err); });
  if (!ptr)
    throw client_error("cannot connect to " + where + ": "
                       + (failure.empty() ? "no actor published" : failure)
                       + (failure.find("handshake") != std::string::npos
                            ? " (is the certificate from the cluster CA?)"
                            : ""));
  d.gate = caf::actor_cast<caf::actor>(ptr);
  auto mine = tls::make_nonce();
  join_hello hello{d.name, {mine.begin(), mine.end()}, true};
  join_challenge ch;
  self->request(d.gate, d.timeout, join_atom::value, hello)
    .receive([&](join_challenge& c) { ch = std::move(c); },
             [&](caf::error& err) { failure = d.sys->render(err); });
  if (!failure.empty())
    throw client_error("handshake with " + where + " failed: " + failure);
  tls::nonce theirs{};
  if (ch.nonce.size() != theirs.size()
      || ch.cert_pem.size() > tls::max_peer_cert_size
      || ch.signature.size() > tls::max_signature_size)
    throw client_error("handshake with " + where + ": malformed challenge");
  std::copy(ch.nonce.begin(), ch.nonce.end(), theirs.begin());
  try {
    d.node = tls::verify_join(ch.cert_pem, *d.ca, mine, ch.responder, d.name,
                              ch.signature);
  } catch (const tls::tls_error& e) {
    throw client_error("the node at " + where
                       + " did not prove its name: " + e.what());
  }
  join_proof proof;
  proof.claimed = d.name;
  proof.cert_pem = d.cert_pem;
  proof.signature = tls::sign_challenge(
    *d.key, theirs, tls::join_context(d.name, d.node));
  self->request(d.gate, d.timeout, prove_atom::value, proof)
    .receive([&](member_view&) {},
             [&](caf::error& err) { failure = d.sys->render(err); });
  if (!failure.empty())
    throw client_error("node " + d.node + " refused us: " + failure);
}

console_reply client::ask(const std::string& command,
                          const std::string& arg) {
  auto& d = *impl_;
  if (!d.gate)
    throw client_error("not connected");
  auto& self = *d.self;
  console_reply out;
  std::string failure;
  // A run (or an attach to one) answers when its job ends: minutes or
  // hours; the watch below ends the wait when the node goes.
  auto timeout = command == "measure" ? d.timeout * 6
                 : command == "run" || command == "attach"
                   ? std::chrono::milliseconds{std::chrono::hours{24}}
                   : d.timeout;
  auto handle = self->request(d.gate, timeout, console_atom::value, command,
                              arg);
  // While the answer is awaited (a run may take minutes), a watcher makes
  // sure the node is still there: a lost node ends the wait within about
  // 3 s with its name, not at the timeout.
  node_watch watch{d.sys.get(), d.gate, self.ptr(),
                   handle.id(), d.node, d.where};
  bool replied = false;
  bool bounced = false;
  handle.receive(
    [&](console_reply& r) {
      out = std::move(r);
      replied = true;
    },
    [&](caf::error& err) {
      failure = d.sys->render(err);
      // CAF bounces a request whose receiver's connection closed (its
      // proxy is gone) before the watch notices: the node is lost too.
      bounced = err.category() == caf::atom("system")
                && err.code()
                     == static_cast<std::uint8_t>(
                       caf::sec::request_receiver_down);
    });
  auto lost = watch.stop();
  if (replied)
    return out;
  if (!lost.empty())
    throw client_error(lost);
  if (bounced)
    throw client_error("lost node " + d.node + " (" + d.where
                       + "): the connection to it closed (" + failure + ")");
  throw client_error(failure);
}

} // namespace exo::console
