#pragma once

// The signed hello of zero-config discovery: a node announces on its LAN
// (UDP multicast) which cluster it belongs to and where it listens, signed
// with its node key; a receiver admits the address as a seed only when the
// cluster is its own (the CA certificate's SHA-256), the certificate chains
// to its CA with the name the hello claims, the signature holds and the
// hello is fresh. Two clusters on one LAN therefore never try each other,
// and a forged hello cannot send a node to connect anywhere. The TLS join
// that follows authenticates both sides again, as for a configured seed.
//
// Format (text, at most max_hello_size bytes):
//   exo-hello-v1\n cluster=HEX\n name=N\n host=A.B.C.D\n port=P\n
//   time=MS\n sig=HEX\n cert=\n PEM
// The signature covers every byte before "sig=".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace exo::tls {

class private_key;
class trust_store;

/// Largest hello a receiver reads.
constexpr std::size_t max_hello_size = 8 * 1024;

/// How far a hello's clock may be from the receiver's.
constexpr std::int64_t hello_max_skew_ms = 60'000;

struct hello_info {
  std::string name;
  std::string host;
  std::uint16_t port = 0;
};

/// The hello of node `name` (its key and certificate PEM) of the cluster
/// `cluster` (ca_id of its CA) listening at host:port, at `time_ms` (Unix
/// milliseconds).
/// @throws tls_error when the key cannot sign.
std::string make_hello(const private_key& key, std::string_view cert_pem,
                       std::string_view cluster, const hello_info& me,
                       std::int64_t time_ms);

/// Checks a received hello: size, shape, cluster == `cluster`, clock within
/// hello_max_skew_ms of `now_ms`, an IPv4 host and a port, the certificate
/// chains to `ca` with the hello's name as its CN, and the signature. The
/// sender on success; otherwise nothing and `why` says what failed.
std::optional<hello_info> check_hello(std::string_view datagram,
                                      const trust_store& ca,
                                      std::string_view cluster,
                                      std::int64_t now_ms, std::string& why);

/// The cluster id of a CA: the SHA-256 of its certificate, hex.
/// @throws tls_error when the file cannot be read.
std::string ca_id(const std::string& cafile);

} // namespace exo::tls
