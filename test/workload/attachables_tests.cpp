// actors/attachables.hpp: CAF 0.17 keeps a monitor's attachable, and with
// it a weak reference to the observer, on the observed actor until that one
// ends. The test watches the weak count of a short-lived actor's control
// block after it ended, beside a long-lived actor it monitored: with the
// helper only the test's own reference is left; without it the long-lived
// actor's stale attachable holds a second one (what made `exo-node serve`
// keep every request's bridge and shard, about 5 KB each).

#include "actors/attachables.hpp"

#include <caf/all.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <thread>

namespace {

using namespace std::chrono_literals;

/// Weak references to the actor `a` names, once it and every strong
/// reference to it are gone (polled: cleanup runs on the actor's thread).
std::size_t weak_refs_after_end(const caf::actor_addr& a) {
  auto* ctrl = caf::actor_cast<caf::actor_control_block*>(a);
  for (int i = 0; i < 500 && ctrl->strong_refs.load() > 0; ++i)
    std::this_thread::sleep_for(10ms);
  REQUIRE(ctrl->strong_refs.load() == 0);
  std::this_thread::sleep_for(20ms); // the last attachables' own releases
  return ctrl->weak_refs.load();
}

// (An argument: CAF 0.17's spawn of a function without one binds a
// reference to a null tuple, which UBSan reports.)
caf::behavior long_lived(caf::event_based_actor*, int) {
  return {[](int x) { return x; }};
}

} // namespace

TEST_CASE("an actor that monitors a long-lived one and ends leaves no "
          "reference behind with demonitor_at_exit",
          "[attachables]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto service = sys.spawn(long_lived, 0);
  auto observer = [&](bool helper) {
    caf::actor_addr addr;
    {
      auto a = sys.spawn(
        [service](caf::event_based_actor* self, bool with) -> caf::behavior {
          self->monitor(service);
          if (with)
            exo::demonitor_at_exit(
              self, std::make_shared<caf::actor_addr>(service.address()));
          self->quit();
          return {};
        },
        helper);
      addr = a.address();
    }
    return weak_refs_after_end(addr);
  };
  // Without the helper the service's monitor attachable still names it
  // (the case the helper exists for: proves the check can fail).
  CHECK(observer(false) == 2);
  CHECK(observer(true) == 1);
  caf::anon_send_exit(service, caf::exit_reason::user_shutdown);
}
