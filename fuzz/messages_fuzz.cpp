// Every exo message type on the wire, as CAF's binary deserializer reads a
// peer's bytes (BASP payloads are deserialized this way before any actor
// sees them): the first input byte picks the type, the rest are its
// serialized form. Deserializing must end in a value or a CAF error —
// never a crash, a sanitizer report or an allocation larger than the input
// allows (exo's byte fields check their claimed length first:
// messages/bounded_bytes.hpp). A value that loads is saved and loaded
// again, and must load the same way.
#include "fuzz/fuzz_target.hpp"
#include "messages/audit.hpp"
#include "messages/cluster.hpp"
#include "messages/device.hpp"
#include "messages/placement.hpp"
#include "messages/thermal.hpp"
#include "messages/workload.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <vector>

namespace {

template <class T>
void round_trip(const std::uint8_t* data, std::size_t size) {
  caf::binary_deserializer src{nullptr, reinterpret_cast<const char*>(data),
                               size};
  T x;
  if (src(x))
    return; // refused: fine
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  if (sink(x))
    __builtin_trap(); // a value that loaded must save
  caf::binary_deserializer again{nullptr, buf};
  T y;
  if (again(y))
    __builtin_trap(); // and load again
}

using fn = void (*)(const std::uint8_t*, std::size_t);

const fn types[] = {
  round_trip<exo::chunk>,
  round_trip<exo::kernel_call>,
  round_trip<std::vector<exo::kernel_call>>,
  round_trip<exo::device_info>,
  round_trip<std::vector<exo::device_info>>,
  round_trip<exo::telemetry_sample>,
  round_trip<exo::actor_snapshot>,
  round_trip<exo::link_info>,
  round_trip<exo::member_info>,
  round_trip<exo::member_view>,
  round_trip<exo::join_hello>,
  round_trip<exo::join_challenge>,
  round_trip<exo::join_proof>,
  round_trip<exo::console_reply>,
  round_trip<exo::stage_step>,
  round_trip<exo::shard_spec>,
  round_trip<exo::shard_ready>,
  round_trip<exo::workload::job_request>,
  round_trip<exo::job_placed>,
  round_trip<exo::job_started>,
  round_trip<exo::job_token>,
  round_trip<exo::job_report>,
  round_trip<exo::job_recovered>,
  round_trip<exo::job_pipeline>,
  round_trip<exo::job_replica>,
  round_trip<exo::job_progress>,
  round_trip<exo::plan_request>,
  round_trip<exo::plan_stage_info>,
  round_trip<exo::plan_info>,
  round_trip<exo::plan_job_info>,
  round_trip<exo::audit_entry>,
  round_trip<std::vector<exo::audit_entry>>,
  round_trip<exo::thermal_status>,
  round_trip<std::vector<exo::thermal_status>>,
  round_trip<exo::audit_checkpoint>,
  round_trip<exo::kv_rows>,
  round_trip<exo::prefix_claim>,
  round_trip<exo::prefix_retain>,
  round_trip<exo::job_prompt_scores>,
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0)
    return 0;
  constexpr std::size_t n = sizeof(types) / sizeof(types[0]);
  types[data[0] % n](data + 1, size - 1);
  return 0;
}
