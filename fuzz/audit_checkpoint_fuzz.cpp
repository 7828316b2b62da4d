// A peer's audit checkpoint line (core/audit/checkpoint.hpp), as a node
// reads one offered for witnessing: any bytes are a checkpoint or an
// audit_error naming the problem. A line that parses is written again and
// must parse to the same checkpoint (the signature is not checked here: no
// CA; verify_checkpoint runs only on what parses).
#include "core/audit/checkpoint.hpp"
#include "core/audit/log_files.hpp"
#include "fuzz/fuzz_target.hpp"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  std::string text{reinterpret_cast<const char*>(data), size};
  exo::audit::checkpoint cp;
  try {
    cp = exo::audit::parse_checkpoint(text);
  } catch (const exo::audit::audit_error&) {
    return 0;
  }
  auto again = exo::audit::parse_checkpoint(exo::audit::to_line(cp));
  if (again.node != cp.node || again.seq != cp.seq || again.head != cp.head
      || again.prev_seq != cp.prev_seq || again.prev_head != cp.prev_head
      || again.chain != cp.chain || again.time != cp.time
      || again.cert_pem != cp.cert_pem || again.sig != cp.sig
      || exo::audit::canonical_text(again) != exo::audit::canonical_text(cp))
    __builtin_trap();
  return 0;
}
