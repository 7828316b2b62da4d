// What the gate refuses from a joined peer whatever its certificate says:
// a job replica (or its progress) in another node's name. A node may only
// replicate its own jobs; otherwise a peer could plant a job on a backup in
// another node's name and have it taken over when that node dies. Nor a
// thermal pause of another node's device (it would move jobs off it).

#include "actors/cluster/gate_state.hpp"
#include "messages/thermal.hpp"
#include "messages/workload.hpp"

#include <catch2/catch.hpp>

using namespace exo;
using namespace exo::cluster::detail;

TEST_CASE("a peer's job replicas must be its own jobs") {
  job_replica r;
  r.origin = "n1";
  r.job = 7;
  auto replica = caf::make_message(replicate_atom::value, r);
  CHECK(peer_service_refusal(replica, "n1").empty());
  // So must the jobs it hands over as it stops (the backup then runs them
  // on the stages named).
  job_handoff h;
  h.origin = "n1";
  auto handoff = caf::make_message(handoff_atom::value, h);
  CHECK(peer_service_refusal(handoff, "n1").empty());
  CHECK(peer_service_refusal(handoff, "mallory")
        == "a job handoff of \"n1\" sent by \"mallory\": a node hands "
           "over only its own jobs");
  CHECK_FALSE(peer_service_refusal(handoff, "").empty());
  CHECK(peer_service_refusal(replica, "mallory")
        == "a job replica of \"n1\" sent by \"mallory\": a node replicates "
           "only its own jobs");
  CHECK_FALSE(peer_service_refusal(replica, "").empty()); // unknown sender
  job_progress p;
  p.origin = "n1";
  auto progress = caf::make_message(replicate_atom::value, p);
  CHECK(peer_service_refusal(progress, "n1").empty());
  CHECK_FALSE(peer_service_refusal(progress, "n2").empty());
  // Other service messages are not this check's business.
  CHECK(peer_service_refusal(caf::make_message(std::string{"x"}), "n2")
          .empty());
  CHECK(peer_service_refusal(caf::make_message(replicate_atom::value), "n2")
          .empty());
}

TEST_CASE("a peer reports thermal pauses of its own devices only") {
  thermal_status s;
  s.node = "n2";
  s.device = "cuda:0";
  s.state = "paused";
  auto pause = caf::make_message(thermal_atom::value, s);
  CHECK(peer_service_refusal(pause, "n2").empty());
  CHECK(peer_service_refusal(pause, "n3")
        == "a thermal pause of a device of \"n2\" sent by \"n3\": a node "
           "reports only its own devices");
  CHECK_FALSE(peer_service_refusal(pause, "").empty());
}
