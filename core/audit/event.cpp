#include "core/audit/event.hpp"

#include <array>

namespace exo::audit {

namespace {

constexpr std::array<std::string_view, event_type_count> type_names = {
  "device_list",     "device_info",       "device_allocate",
  "device_free",     "device_copy",       "device_p2p_copy",
  "device_compute",  "device_sync",       "monitoring_read",
  "access_granted",  "access_denied",     "policy_change",
  "token_issued",    "token_revoked",     "member_joined",
  "member_left",     "placement_decided", "thermal_warn",
  "thermal_pause",   "thermal_resume",    "backend_start",
  "backend_stop",    "config_load",       "quota_exceeded",
  "rate_limited",    "audit_recovered",   "job_submitted",
  "job_finished",
  "join_refused",
  "node_leave",
  "connection_refused",
  "request_refused",
  "audit_rollback",
  "audit_fork",
  "job_recovered",
  "device_fault",
};

static_assert(static_cast<std::size_t>(event_type::device_fault) + 1
                == event_type_count,
              "type_names must list every event_type");

constexpr std::array<std::string_view, 5> severity_names = {
  "debug", "info", "warning", "error", "critical",
};

} // namespace

std::string_view to_string(event_type t) noexcept {
  auto i = static_cast<std::size_t>(t);
  return i < type_names.size() ? type_names[i] : std::string_view{"unknown"};
}

std::string_view to_string(severity s) noexcept {
  auto i = static_cast<std::size_t>(s);
  return i < severity_names.size() ? severity_names[i]
                                   : std::string_view{"unknown"};
}

std::optional<event_type> parse_event_type(std::string_view name) noexcept {
  for (std::size_t i = 0; i < type_names.size(); ++i)
    if (type_names[i] == name)
      return static_cast<event_type>(i);
  return std::nullopt;
}

std::optional<severity> parse_severity(std::string_view name) noexcept {
  for (std::size_t i = 0; i < severity_names.size(); ++i)
    if (severity_names[i] == name)
      return static_cast<severity>(i);
  return std::nullopt;
}

} // namespace exo::audit
