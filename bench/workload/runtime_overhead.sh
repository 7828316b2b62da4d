#!/usr/bin/env bash
# The runtime's overhead on one node as a user meets it (issue 5): the same
# generation through `exo-node run` (job actor, shard actor, device actor,
# the cpu device) and through `exo-model run` (the host engine called
# directly), one core each (taskset), one BLAS/OpenMP thread, alternating
# run by run so that both see the same machine. Prints each pair's
# generation tokens/s and the median of the per-pair ratios.
#   bench/workload/runtime_overhead.sh BUILD [PAIRS N LAYERS DIM FF TYPE CORE]
set -euo pipefail
. "$(dirname "$0")/overhead_common.sh"
overhead_args 9 "$@"
WORK=$(mktemp -d /tmp/exo-overhead-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
overhead_model
runtime() {
  taskset -c "$CORE" "$BUILD/runtime/node/exo-node" run \
    --config "$WORK/node.json" --model "$WORK/model.gguf" \
    --prompt "$prompt" -n "$N" 2>&1 | rate
}
echo "model: $LAYERS layers, $DIM wide, ff $FF, $TYPE, vocabulary 2048;" \
  "$N generated tokens; core $CORE; $PAIRS pairs"
printf "%-6s %18s %18s %10s\n" pair "exo-model tok/s" "exo-node tok/s" \
  "overhead"
ratios=()
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) -eq 1 ]; then
    a=$(engine); b=$(runtime)
  else
    b=$(runtime); a=$(engine)
  fi
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "a run failed (no generation line)" >&2
    exit 1
  fi
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", a / b - 1 }')
  ratios+=("$r")
  printf "%-6s %18s %18s %+9.1f%%\n" "$i" "$a" "$b" \
    "$(awk -v r="$r" 'BEGIN { print r * 100 }')"
done
m=$(printf "%s\n" "${ratios[@]}" | median)
printf "median overhead (exo-model tok/s over exo-node tok/s - 1): %+.1f%%\n" \
  "$(awk -v m="$m" 'BEGIN { print m * 100 }')"
