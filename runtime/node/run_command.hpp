#pragma once

/// `exo-node run`: one job on this node, through the runtime.
///
///   exo-node run --model FILE.gguf --prompt TEXT [-n N] [--seed S]
///     [--temperature T] [--top-k K] [--top-p P] [--min-p P]
///     [--repetition-penalty R] [--frequency-penalty F]
///     [--presence-penalty F] [--logit-bias ID=B,...] [--json] [--stages K]
///     [--sequences M] [--ctx C] [--chat [--system TEXT]]
///     [--logits-out FILE] [--config FILE]
///     [--state-dir DIR] [--llama-threads N]
///
/// Starts the node (discovery, device actors, its services; its gate on a
/// free port, no seeds) and hands the job to a job coordinator of this node
/// alone (actors/workload/job_coordinator.hpp: the one the console's `run`
/// uses, without a gate), which validates it (core/workload/
/// job_request.hpp), places the model on the node's devices with the
/// placement solver (workload::plan_locally: the problem the placement
/// service builds for this node alone, every stage's working memory
/// counted; objective latency, or throughput with --sequences M > 1), or
/// with --stages K splits evenly (workload::simple_placement: one of every
/// backend first: cpu, vulkan, sim), starts a shard per stage through the
/// node's shard host and runs the job. This prints the placement (the
/// solver's table), streams sequence 0's text to stdout as it is produced
/// and prints tokens/s; no plan (the model does not fit) is exit 1 with
/// the solver's explanation. --logits-out writes the last logits of
/// sequence 0, one per line (%.9g).
/// --llama-threads N: the cpu device gives the attention bits of llama.cpp
/// run with N threads (devices.cpu_llama_threads, config/README.md).
/// --chat: the prompt is a user message (after --system's, if given) in
/// the model's chat template (core/workload/chat_prompt.hpp); generation
/// stops at the template's end of turn; a model without a template is
/// exit 2.
/// Exit status: 0; 2 on bad arguments or a request the coordinator refuses
/// (model, context, sampling); 1 when the node, placement or job fails.

#include <iosfwd>

namespace exo {

/// argv[0] is "run".
int run_command(int argc, char** argv, std::ostream& out, std::ostream& err);

} // namespace exo
