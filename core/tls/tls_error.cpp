#include "core/tls/tls_error.hpp"

namespace exo::tls {

const char* to_string(tls_errc code) noexcept {
  switch (code) {
  case tls_errc::invalid_argument:
    return "invalid_argument";
  case tls_errc::io:
    return "io";
  case tls_errc::exists:
    return "exists";
  case tls_errc::not_pem:
    return "not_pem";
  case tls_errc::passphrase_required:
    return "passphrase_required";
  case tls_errc::bad_passphrase:
    return "bad_passphrase";
  case tls_errc::key_mismatch:
    return "key_mismatch";
  case tls_errc::expired:
    return "expired";
  case tls_errc::not_yet_valid:
    return "not_yet_valid";
  case tls_errc::untrusted:
    return "untrusted";
  case tls_errc::self_signed:
    return "self_signed";
  case tls_errc::wrong_usage:
    return "wrong_usage";
  case tls_errc::bad_signature:
    return "bad_signature";
  case tls_errc::name_mismatch:
    return "name_mismatch";
  case tls_errc::internal:
    return "internal";
  }
  return "unknown";
}

} // namespace exo::tls
