#include "core/thermal/audit_event.hpp"

#include <cstdio>

namespace exo::thermal {

namespace {

std::string celsius(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

} // namespace

audit::event make_audit_event(const thermal_transition& tr,
                              std::string_view device) {
  audit::event ev;
  if (tr.to == thermal_state::paused) {
    ev.type = audit::event_type::thermal_pause;
    ev.level = audit::severity::warning;
  } else if (tr.from == thermal_state::paused) {
    ev.type = audit::event_type::thermal_resume;
    ev.level = audit::severity::info;
  } else {
    ev.type = audit::event_type::thermal_warn;
    ev.level = audit::severity::info;
  }
  ev.details = {{"device", std::string{device}},
                {"from", std::string{to_string(tr.from)}},
                {"to", std::string{to_string(tr.to)}},
                {"temp_c", celsius(tr.temp_c)},
                {"predicted_c", celsius(tr.predicted_c)},
                {"reason", tr.reason}};
  return ev;
}

} // namespace exo::thermal
