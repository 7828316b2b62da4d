#pragma once

#include "core/access/permission.hpp"

#include <string>
#include <string_view>

namespace exo::access {

/// What a console command needs from a client's token. The gate applies it
/// to every console command a client (not a peer, not an actor of the node)
/// sends, before the command reaches the gate's own handlers or a service.
struct console_requirement {
  enum class kind : std::uint8_t {
    /// Checked against `perm` at the gate.
    permission,
    /// The service checks `auth=` itself ("dev": the device actor checks
    /// the token; "token": policy_admin in the access service); the gate
    /// passes the argument unchanged.
    by_service,
  };
  kind how = kind::permission;
  permission perm = permission::policy_admin;
};

/// The requirement of console command `cmd` with argument `arg`:
///
///   devices                                  device_list
///   nodes links coordinator actors inspect
///   measure services plans shards jobs       monitoring_read
///   thermal                                  thermal_read
///   thermal report ...  (a peer's push)      policy_admin
///   audit (query, verify)                    audit_read
///   run, plan, attach                        job_submit
///   cancel                                   job_cancel
///   leave                                    policy_admin
///   dev, token                               by_service
///   anything else                            policy_admin (fail closed: a
///                                            new command is admin-only
///                                            until it is listed here)
///
/// `plan` is job_submit: it keeps the plan as a job the coordinator
/// re-plans, runs the solver on the coordinator and may read a problem
/// file on the node.
console_requirement console_permission(std::string_view cmd,
                                       std::string_view arg) noexcept;

/// A console argument with its `auth=TOKEN` word taken out.
struct console_auth {
  bool has_token = false; ///< an auth= word was given (even an empty one)
  std::string token;
  std::string rest;  ///< the argument without the auth= word (else verbatim)
  std::string error; ///< not empty: the argument is refused (auth= twice)
};

/// Splits `auth=TOKEN` out of a whitespace-separated console argument; the
/// rest of the argument is kept as it was (a prompt's spacing included).
/// An auth= word inside a quoted value is taken as well: give it as a word
/// of its own.
console_auth take_auth(std::string_view arg);

/// The gate's rule for one client console command.
enum class console_action : std::uint8_t {
  serve,         ///< a read-only view without a token and not strict: served
                 ///< on the client certificate alone
  check,         ///< check the token for the requirement's permission
  refuse,        ///< strict and no token: refused (audited)
  pass_through,  ///< by_service: delegate with the argument unchanged
};

/// Whether `p` only reads the cluster's state (devices, nodes, links,
/// actors, jobs, thermal): the views a client certificate may see without a
/// token. Everything else changes state or reveals more (run, plan, cancel,
/// leave, audit, token, dev) and always needs a token.
bool open_read(permission p) noexcept;

/// Least privilege by default: a command that changes state (or reads the
/// audit log) needs a token with its permission; a read-only view
/// (`open_read`) is served on the client certificate alone, unless the node
/// is strict (`safety.console_requires_token`), when every command needs a
/// token. A command with a token is always checked, so a token never
/// grants more by being shown.
console_action console_rule(const console_requirement& req, bool has_token,
                            bool require_token) noexcept;

} // namespace exo::access
