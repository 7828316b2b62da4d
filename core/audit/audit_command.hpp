#pragma once

#include <iosfwd>

namespace exo::audit {

/// The `audit` command line, for `exo-node audit ...`:
///
///   audit verify [--from-genesis] FILE...
///   audit query --dir D [--prefix audit] [--type T] [--principal P]
///               [--since TIME] [--until TIME] [--after SEQ]
///               [--offset N] [--limit N]
///
/// `argv[0]` is the command's own name ("audit") and is ignored. TIME is
/// µs since the Unix epoch or UTC ISO 8601. Returns 0 on success, 1 when
/// verification fails, 2 for bad usage or unreadable files; never throws.
int run_audit_command(int argc, char** argv, std::ostream& out,
                      std::ostream& err);

} // namespace exo::audit
