#pragma once

/// A console client: connects to a node's gate over TLS with a client
/// certificate, proves its name in the join handshake (as a client), and
/// sends console commands. Every wait has a timeout.

#include "messages/cluster.hpp"
#include "core/tls/material.hpp"

#include <caf/fwd.hpp>
#include <caf/actor.hpp>
#include <caf/message.hpp>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

namespace exo::console {

class client_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Reads a bearer token from `path` (exo-console --token-file): the first
/// line, surrounding whitespace trimmed. Throws client_error naming the file
/// (never the token) when it is missing, unreadable, empty, larger than
/// 16 KiB or holds whitespace or control characters inside the token.
std::string read_token_file(const std::string& path);

class client {
public:
  /// Checks the material (a client certificate) and starts an actor system
  /// configured for mutual TLS. Throws client_error.
  explicit client(tls::material files,
                  std::chrono::milliseconds timeout
                  = std::chrono::milliseconds{5000});
  ~client();

  /// Connects and runs the handshake. Throws client_error with the reason.
  void connect(const std::string& host, std::uint16_t port);

  /// The verified name of the node we are connected to.
  const std::string& node_name() const noexcept;

  /// Sends a console command; returns the reply or throws client_error.
  console_reply ask(const std::string& command, const std::string& arg);

  /// Renders a CAF error for people.
  std::string render(const caf::error& err) const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace exo::console
