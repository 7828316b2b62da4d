#include "core/tls/connection_limits.hpp"

#include <algorithm>

namespace exo::tls {

namespace {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string mib(std::uint64_t bytes) {
  if (bytes % (1ull << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

} // namespace

connection_limits::connection_limits(connection_limits_config cfg)
  : cfg_(cfg) {
  // nop
}

bool connection_limits::refuse(conn& c, const char* limit,
                               std::string detail) {
  if (c.refused)
    return false;
  c.refused = true;
  ++refused_;
  release(c);
  if (reports_.size() >= max_reports) {
    reports_.pop_front();
    ++dropped_;
  }
  connection_refusal r;
  r.unix_ms = unix_ms();
  r.peer = c.peer;
  r.node = c.node;
  r.address = c.address;
  r.limit = limit;
  r.detail = std::move(detail);
  reports_.push_back(std::move(r));
  return false;
}

void connection_limits::release(conn& c) {
  if (c.announced == 0)
    return;
  buffered_ -= std::min(buffered_, c.announced);
  if (c.admitted)
    if (auto it = peers_.find(c.peer); it != peers_.end())
      it->second.buffered -= std::min(it->second.buffered, c.announced);
  c.announced = 0;
}

bool connection_limits::open(id c, std::string address,
                             clock::time_point now) {
  auto [it, fresh] = conns_.try_emplace(c);
  auto& x = it->second;
  if (!fresh)
    return !x.refused;
  x.address = std::move(address);
  x.opened = now;
  x.last_progress = now;
  if (conns_.size() > cfg_.max_connections)
    return refuse(x, "connections",
                  "more than " + std::to_string(cfg_.max_connections)
                    + " TLS connections open");
  return true;
}

connection_limits::conn* connection_limits::checked(id c, bool& verdict) {
  auto it = conns_.find(c);
  if (it == conns_.end()) {
    verdict = true;
    return nullptr;
  }
  if (it->second.refused) {
    verdict = false;
    return nullptr;
  }
  return &it->second;
}

bool connection_limits::admit(id c, std::string peer, bool node,
                              clock::time_point now) {
  bool verdict = true;
  auto* found = checked(c, verdict);
  if (found == nullptr)
    return verdict;
  auto& x = *found;
  if (x.admitted)
    return true;
  x.peer = std::move(peer);
  x.node = node;
  x.admitted = true;
  x.last_progress = now;
  x.refill = now;
  x.tokens = cfg_.message_burst;
  auto& use = peers_[x.peer];
  ++use.connections;
  if (use.connections > cfg_.max_connections_per_peer)
    return refuse(x, "connections_per_peer",
                  "more than " + std::to_string(cfg_.max_connections_per_peer)
                    + " connections of " + x.peer);
  return true;
}

void connection_limits::handshake_failed(id c, std::string detail) {
  auto it = conns_.find(c);
  if (it == conns_.end())
    return;
  refuse(it->second, "tls_handshake", std::move(detail));
}

bool connection_limits::announce(id c, std::uint64_t bytes,
                                 clock::time_point now) {
  bool verdict = true;
  auto* found = checked(c, verdict);
  if (found == nullptr)
    return verdict;
  auto& x = *found;
  x.last_progress = now;
  // The message rate (a token bucket per connection).
  auto rate = x.node ? cfg_.node_messages_per_s : cfg_.client_messages_per_s;
  if (rate > 0) {
    auto dt = std::chrono::duration<double>(now - x.refill).count();
    x.refill = now;
    x.tokens = std::min(cfg_.message_burst, x.tokens + dt * rate);
    if (x.tokens < 1)
      return refuse(x, "message_rate",
                    "more than " + std::to_string(static_cast<long long>(rate))
                      + " messages per second on one connection");
    x.tokens -= 1;
  }
  // A client that keeps asking while it does not read the answers.
  if (x.behind && !x.node && cfg_.max_client_unread_messages > 0
      && ++x.sent_while_behind > cfg_.max_client_unread_messages)
    return refuse(x, "unread_replies",
                  "sent more than "
                    + std::to_string(cfg_.max_client_unread_messages)
                    + " messages while not reading the node's replies");
  release(x);
  if (bytes == 0)
    return true;
  auto max_frame = x.node ? cfg_.max_node_frame_bytes
                          : cfg_.max_client_frame_bytes;
  if (bytes > max_frame)
    return refuse(x, "frame_bytes",
                  "announced a " + std::to_string(bytes)
                    + "-byte message (the limit for a "
                    + (x.node ? "node" : "client") + " certificate is "
                    + mib(max_frame) + ")");
  auto& use = peers_[x.peer];
  if (use.buffered + bytes > cfg_.max_buffered_per_peer)
    return refuse(x, "buffered_per_peer",
                  "messages underway from " + x.peer + " would hold more than "
                    + mib(cfg_.max_buffered_per_peer));
  if (buffered_ + bytes > cfg_.max_buffered_total)
    return refuse(x, "buffered_total",
                  "messages underway from all peers would hold more than "
                    + mib(cfg_.max_buffered_total));
  use.buffered += bytes;
  buffered_ += bytes;
  x.announced = bytes;
  return true;
}

namespace {

// CAF 0.17's BASP operations and its named-receiver flag.
enum : std::uint8_t {
  client_handshake = 1,
  direct_message = 2,
  routed_message = 3,
  monitor_message = 4,
  down_message = 5,
  heartbeat = 6
};
constexpr std::uint8_t named_receiver = 0x01;

} // namespace

bool connection_limits::address(id c, const basp_fields& h) {
  if (cfg_.client_targets.empty())
    return true;
  bool verdict = true;
  auto* found = checked(c, verdict);
  if (found == nullptr)
    return verdict;
  auto& x = *found;
  if (x.node)
    return true;
  auto among = [&h](const auto& xs) {
    return std::find(xs.begin(), xs.end(), h.dest) != xs.end();
  };
  switch (h.operation) {
    case client_handshake:
    case monitor_message: // CAF announces a proxy of one of our actors:
                          // the node watches it, nothing is delivered
    case down_message:    // the client's own actors that ended
    case heartbeat:
      return true;
    case direct_message: {
      if ((h.flags & named_receiver) == 0
            ? among(cfg_.client_targets) || among(x.contacts)
            : among(cfg_.client_named_targets))
        return true;
      return refuse(x, "client_target",
                    (h.flags & named_receiver) != 0
                      ? std::string{"a client certificate may message the "
                                    "gate only (it named another "
                                    "receiver)"}
                      : "a client certificate may message the gate only "
                        "(it addressed actor "
                          + std::to_string(h.dest) + ")");
    }
    case routed_message:
      return refuse(x, "client_target",
                    "a client certificate may not route messages to other "
                    "nodes");
    default:
      return refuse(x, "client_target",
                    "a client certificate sent BASP operation "
                      + std::to_string(h.operation));
  }
}

void connection_limits::sent(id c, const basp_fields& h) {
  if (cfg_.client_targets.empty() || h.operation != direct_message
      || h.source == 0)
    return;
  auto it = conns_.find(c);
  if (it == conns_.end() || it->second.node)
    return;
  auto& contacts = it->second.contacts;
  if (std::find(contacts.begin(), contacts.end(), h.source) != contacts.end())
    return;
  if (contacts.size() >= max_contacts)
    contacts.pop_front();
  contacts.push_back(h.source);
}

void connection_limits::progress(id c, std::uint64_t, clock::time_point now) {
  if (auto it = conns_.find(c); it != conns_.end())
    it->second.last_progress = now;
}

void connection_limits::output(id c, std::uint64_t unsent,
                               std::uint64_t buffer, bool full,
                               bool progressed, clock::time_point now) {
  auto it = conns_.find(c);
  if (it == conns_.end())
    return;
  auto& x = it->second;
  if (unsent == 0) {
    x.output_waits = false;
    x.behind = false;
    x.sent_while_behind = 0;
    return;
  }
  if (!x.output_waits || progressed)
    x.output_progress = now;
  x.output_waits = true;
  x.behind = full || (buffer > 0 && unsent * 2 >= buffer);
  if (!x.behind)
    x.sent_while_behind = 0;
}

void connection_limits::complete(id c) {
  if (auto it = conns_.find(c); it != conns_.end())
    release(it->second);
}

void connection_limits::close(id c) {
  auto it = conns_.find(c);
  if (it == conns_.end())
    return;
  auto& x = it->second;
  release(x);
  if (x.admitted) {
    if (auto p = peers_.find(x.peer); p != peers_.end()) {
      if (p->second.connections > 0)
        --p->second.connections;
      if (p->second.connections == 0 && p->second.buffered == 0)
        peers_.erase(p);
    }
  }
  conns_.erase(it);
}

std::vector<connection_limits::id>
connection_limits::expired(clock::time_point now) {
  std::vector<id> out;
  for (auto& [c, x] : conns_) {
    if (x.refused)
      continue;
    if (!x.admitted && now - x.opened > cfg_.handshake_timeout) {
      refuse(x, "handshake_timeout",
             "no TLS handshake within "
               + std::to_string(cfg_.handshake_timeout.count()) + " ms");
      out.push_back(c);
    } else if (x.admitted && x.announced > 0
               && now - x.last_progress > cfg_.idle_timeout) {
      refuse(x, "idle_timeout",
             "a " + std::to_string(x.announced)
               + "-byte message made no progress for "
               + std::to_string(cfg_.idle_timeout.count()) + " ms");
      out.push_back(c);
    } else if (x.admitted && x.output_waits
               && now - x.output_progress > cfg_.idle_timeout) {
      refuse(x, "output_stalled",
             "acknowledged nothing the node sent it for "
               + std::to_string(cfg_.idle_timeout.count()) + " ms");
      out.push_back(c);
    }
  }
  return out;
}

bool connection_limits::refused(id c) const {
  auto it = conns_.find(c);
  return it != conns_.end() && it->second.refused;
}

std::vector<connection_refusal> connection_limits::take_refusals() {
  std::vector<connection_refusal> out{std::make_move_iterator(reports_.begin()),
                                      std::make_move_iterator(reports_.end())};
  reports_.clear();
  return out;
}

connection_stats connection_limits::stats() const {
  connection_stats s;
  s.connections = conns_.size();
  s.buffered = buffered_;
  s.refused = refused_;
  s.refusals_dropped = dropped_;
  return s;
}

} // namespace exo::tls
