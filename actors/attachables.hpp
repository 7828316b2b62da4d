#pragma once

/// What CAF 0.17 leaves behind when a short-lived actor monitors a
/// long-lived one. A monitor is an attachable on the observed actor holding
/// a weak reference to the observer, and CAF 0.17 removes it only when the
/// observed actor ends (actor-framework#2348, fixed in CAF 2.0 only). A
/// weak reference keeps the observer's whole allocation, so a coordinator
/// that outlives one actor per job or request would keep every one of
/// them: about 5 KB a request of `exo-node serve` before this was used
/// (heaptrack, 2026-12-07). (A link's half on the survivor is dropped by
/// CAF itself when the exit_msg arrives: the message holds its sender.)

#include <caf/actor_addr.hpp>
#include <caf/scheduled_actor.hpp>

#include <memory>

namespace exo {

/// When `self` ends, it stops monitoring the actor `*observed` names then
/// (a cell, for an observed actor that may change; empty: none).
inline void demonitor_at_exit(caf::scheduled_actor* self,
                              std::shared_ptr<caf::actor_addr> observed) {
  self->attach_functor([self, observed] {
    if (*observed)
      self->demonitor(*observed);
  });
}

} // namespace exo
