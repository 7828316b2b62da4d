#pragma once

// Applies checked TLS material to a CAF 0.17 actor system config. Part of
// exo_tls_caf (applying core/tls material to CAF).

#include "core/tls/material.hpp"

namespace caf {
class actor_system_config;
} // namespace caf

namespace exo::tls {

/// Checks `files` with check_material and, only when they pass, sets
/// `openssl.certificate`, `openssl.key`, `openssl.passphrase` and
/// `openssl.cafile` of `cfg` (capath is cleared: trust is the cluster CA
/// only). Call it before constructing the actor system; the caller loads
/// caf::io::middleman and caf::openssl::manager as usual.
/// @throws tls_error from check_material; `cfg` is untouched then.
material_info apply_material(caf::actor_system_config& cfg,
                             const material& files);

/// Transport settings every exo actor system uses (nodes, consoles, tests,
/// benches): BASP messages are deserialised on the multiplexer thread
/// (`middleman.workers` = 0) instead of being handed to a worker pool
/// first. On small machines the extra thread hop dominated remote round
/// trips: transport_bench measured p50 480-540 us with CAF's default
/// (one worker on 2 cores) and 177 us without (docs/benchmarks.md).
/// Idle scheduler workers go straight from their short spin to waiting on
/// their condition variable (`work-stealing.moderate-poll-attempts` = 0):
/// CAF's default moderate phase sleeps 50 us at a time (plus the kernel's
/// 50 us timer slack) and does not wake on enqueue, which put one such
/// sleep into every request that found its actor's worker idle: p50 300 us
/// with it, 115-140 us without, on the same 2-core VM in the same minutes.
/// From that wait an idle worker wakes to steal work every 100 ms
/// (`work-stealing.relaxed-sleep-duration`; CAF's default is 10 ms): with
/// four workers the default woke a thread 400 times a second, about 1% of
/// one core during generation on this VM. Work sent to a sleeping worker
/// wakes it at once; only work queued behind a busy event-based actor
/// waits for a steal, and the long-running actors are detached.
void apply_transport_settings(caf::actor_system_config& cfg);

/// Refuses a config that would run CAF's anonymous, unauthenticated TLS
/// (no certificate, key or CA file set).
/// @throws tls_error invalid_argument naming the missing setting.
void require_authenticated_tls(const caf::actor_system_config& cfg);

} // namespace exo::tls
