#include "core/access/audit_event.hpp"

namespace exo::access {

audit::event make_audit_event(const decision& d, permission p,
                              std::string_view device) {
  audit::event ev;
  ev.principal = d.principal;
  switch (d.code) {
    case decision_code::allow:
      ev.type = audit::event_type::access_granted;
      ev.level = audit::severity::debug;
      break;
    case decision_code::quota_exceeded:
      ev.type = audit::event_type::quota_exceeded;
      ev.level = audit::severity::warning;
      break;
    case decision_code::rate_limited:
      ev.type = audit::event_type::rate_limited;
      ev.level = audit::severity::warning;
      break;
    default:
      ev.type = audit::event_type::access_denied;
      ev.level = audit::severity::warning;
  }
  ev.details.emplace("permission", std::string{to_string(p)});
  ev.details.emplace("decision", std::string{to_string(d.code)});
  if (!device.empty())
    ev.details.emplace("device", std::string{device});
  if (!d.reason.empty())
    ev.details.emplace("reason", d.reason);
  return ev;
}

} // namespace exo::access
