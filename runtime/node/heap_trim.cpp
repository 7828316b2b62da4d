#include "runtime/node/heap_trim.hpp"

#include "messages/atoms.hpp"

#include <caf/all.hpp>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace exo {

caf::actor start_heap_trim(caf::actor_system& sys,
                           std::chrono::milliseconds interval) {
  // The interval goes as a spawn argument: CAF 0.17 dereferences a null
  // tuple for an actor spawned without any (notes/caf-0.17.md).
  return sys.spawn(
    [](caf::event_based_actor* self, std::chrono::milliseconds every) {
      self->delayed_send(self, every, tick_atom::value);
      return caf::behavior{[self, every](tick_atom) {
        if (self->current_sender() != self->ctrl())
          return; // its own timer only
#if defined(__GLIBC__)
        malloc_trim(0);
#endif
        self->delayed_send(self, every, tick_atom::value);
      }};
    },
    interval);
}

} // namespace exo
