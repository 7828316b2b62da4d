#include "runtime/system/caf_tls.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/timestamp.hpp>

#include <chrono>

#include "core/tls/tls_error.hpp"

namespace exo::tls {

material_info apply_material(caf::actor_system_config& cfg,
                             const material& files) {
  auto info = check_material(files);
  cfg.openssl_certificate = files.certificate;
  cfg.openssl_key = files.key;
  cfg.openssl_passphrase = files.passphrase;
  cfg.openssl_cafile = files.cafile;
  cfg.openssl_capath.clear();
  require_authenticated_tls(cfg);
  return info;
}

void apply_transport_settings(caf::actor_system_config& cfg) {
  cfg.set("middleman.workers", 0);
  // An idle scheduler worker sleeps on its condition variable (woken by
  // the next enqueue) instead of polling with 50 us sleeps first.
  cfg.set("work-stealing.moderate-poll-attempts", 0);
  // An idle worker wakes from that wait to steal every 100 ms, not every
  // 10 ms (CAF's default): four idle workers cost 400 wake-ups a second.
  cfg.set("work-stealing.relaxed-sleep-duration",
          caf::timespan{std::chrono::milliseconds(100)});
}

void require_authenticated_tls(const caf::actor_system_config& cfg) {
  auto missing = [](const char* key) {
    throw tls_error(tls_errc::invalid_argument,
                    std::string{"openssl."} + key +
                        " is not set: CAF would fall back to anonymous,"
                        " unauthenticated TLS, which exo refuses");
  };
  if (cfg.openssl_certificate.empty())
    missing("certificate");
  if (cfg.openssl_key.empty())
    missing("key");
  if (cfg.openssl_cafile.empty())
    missing("cafile");
}

} // namespace exo::tls
