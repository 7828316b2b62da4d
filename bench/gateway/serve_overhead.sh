#!/usr/bin/env bash
# The gateway's overhead through a real node (issue 20): the same
# generation streamed over HTTP from `exo-node serve` (gateway, bridge
# actor, job coordinator, job, shard and device actors, the cpu device)
# and through `exo-model run` (the host engine called directly), one core
# each (taskset), one BLAS thread, alternating. Prints per pair the
# engine's and the stream's tokens/s (from the first text chunk to the
# last) and the stream's time to the first token, then the medians.
#   bench/gateway/serve_overhead.sh BUILD [PAIRS N LAYERS DIM FF TYPE CORE]
set -euo pipefail
. "$(dirname "$0")/../workload/overhead_common.sh"
overhead_args 7 "$@"
serve_workdir serve-overhead
overhead_model
start_serve "$WORK/node.json"
stream() {
  "$BUILD/bench/gateway/gateway_bench" --port "$PORT" --model m -n "$N" \
    --prompt "$prompt"
}
stream >/dev/null # the first request loads the model
echo "model: $LAYERS layers, $DIM wide, ff $FF, $TYPE, vocabulary 2048;" \
  "$N generated tokens; core $CORE; $PAIRS pairs"
printf "%-6s %16s %16s %10s %12s\n" pair "engine tok/s" "stream tok/s" \
  "overhead" "TTFT ms"
ratios=() ttfts=()
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) -eq 1 ]; then
    a=$(engine); s=$(stream)
  else
    s=$(stream); a=$(engine)
  fi
  b=$(echo "$s" | awk '{ print $3 }')
  t=$(echo "$s" | awk '{ printf "%.1f", $1 / 1000 }')
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "a run failed" >&2
    exit 1
  fi
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", a / b - 1 }')
  ratios+=("$r") ttfts+=("$t")
  printf "%-6s %16s %16s %+9.1f%% %12s\n" "$i" "$a" "$b" \
    "$(awk -v r="$r" 'BEGIN { print r * 100 }')" "$t"
done
m=$(printf "%s\n" "${ratios[@]}" | median)
tt=$(printf "%s\n" "${ttfts[@]}" | median)
printf "median overhead (engine tok/s over stream tok/s - 1): %+.1f%%; median TTFT %s ms\n" \
  "$(awk -v m="$m" 'BEGIN { print m * 100 }')" "$tt"
