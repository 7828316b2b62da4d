#pragma once

/// The wire contract of the audit sink: any local actor sends it events.
///
///   any actor -- (audit_atom, audit_entry) --> audit sink   (no reply)
///   device    -- (audit_atom, std::vector<audit_entry>) --> sink (no reply;
///                held-back compute events, each with its time_us)
///   console   -- (console_atom, "audit", "query ..."|"verify") --> sink

#include "messages/atoms.hpp"
#include "messages/wire_real.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace exo {

using audit_atom = caf::atom_constant<caf::atom("audit")>;

/// One audit event as a message. `type` and `level` are the values of
/// exo::audit::event_type and exo::audit::severity (core/audit/event.hpp);
/// the sink drops entries with values it does not know.
struct audit_entry {
  std::uint8_t type = 0;
  std::uint8_t level = 1;
  std::string principal;
  std::map<std::string, std::string> details;
  std::int64_t time_us = 0; ///< 0: when the sink receives it
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, audit_entry& x) {
  return wire(f, caf::meta::type_name("exo.audit_entry"), x.type, x.level,
              x.principal, x.details, x.time_us);
}

} // namespace exo
