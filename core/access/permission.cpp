#include "core/access/permission.hpp"

#include <array>

namespace exo::access {

namespace {

constexpr std::array<std::string_view, permission_count> permission_names = {
  "device_list",  "device_info",     "memory_allocate", "memory_free",
  "memory_copy",  "p2p_copy",        "compute_run",     "compute_sync",
  "monitoring_read", "thermal_read", "job_submit",      "job_cancel",
  "audit_read",   "policy_admin",
};

static_assert(static_cast<std::size_t>(permission::policy_admin) + 1
                == permission_count,
              "permission_names must list every permission");

constexpr std::array<std::string_view, role_count> role_names = {
  "monitor", "user", "power_user", "admin",
};

} // namespace

permission_set role_permissions(role r) noexcept {
  using p = permission;
  permission_set monitor{p::device_list, p::device_info, p::monitoring_read,
                         p::thermal_read};
  permission_set user = monitor
                        | permission_set{p::memory_allocate, p::memory_free,
                                         p::memory_copy, p::compute_run,
                                         p::compute_sync, p::job_submit,
                                         p::job_cancel};
  permission_set power = user | permission_set{p::p2p_copy, p::audit_read};
  switch (r) {
    case role::monitor: return monitor;
    case role::user: return user;
    case role::power_user: return power;
    case role::admin: return permission_set::from_bits(~0u);
  }
  return {};
}

std::string_view to_string(permission p) noexcept {
  auto i = static_cast<std::size_t>(p);
  return i < permission_names.size() ? permission_names[i] : "unknown";
}

std::string_view to_string(role r) noexcept {
  auto i = static_cast<std::size_t>(r);
  return i < role_names.size() ? role_names[i] : "unknown";
}

std::optional<permission> parse_permission(std::string_view name) noexcept {
  for (std::size_t i = 0; i < permission_names.size(); ++i)
    if (permission_names[i] == name)
      return static_cast<permission>(i);
  return std::nullopt;
}

std::optional<role> parse_role(std::string_view name) noexcept {
  if (name == "power-user")
    return role::power_user;
  for (std::size_t i = 0; i < role_names.size(); ++i)
    if (role_names[i] == name)
      return static_cast<role>(i);
  return std::nullopt;
}

} // namespace exo::access
