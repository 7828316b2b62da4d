#pragma once

#include <iosfwd>

namespace exo::audit {

/// The `audit` command line, for `exo-node audit ...`:
///
///   audit verify [--from-genesis] [--checkpoints FILE]... [--ca FILE] FILE...
///   audit query --dir D [--prefix audit] [--type T] [--principal P]
///               [--since TIME] [--until TIME] [--after SEQ]
///               [--offset N] [--limit N]
///
/// `argv[0]` is the command's own name ("audit") and is ignored. TIME is
/// µs since the Unix epoch or UTC ISO 8601. Returns 0 on success, 1 when
/// verification fails (a cut tail, dropped head or rewrite that a
/// checkpoint reveals included), 2 for bad usage, unreadable files or a
/// checkpoint that does not verify against --ca; never throws.
int run_audit_command(int argc, char** argv, std::ostream& out,
                      std::ostream& err);

} // namespace exo::audit
