#!/usr/bin/env bash
# Many requests at once through one node (issue 22, continuous batching):
# K completions streamed at the same time from `exo-node serve` (one core,
# one thread, the cpu device), with the node's batch_wait_ms at 2 (jobs on
# one stage decode as one batch) and at 0 (each job's steps run as they
# come), alternating. Prints, per run, the aggregate tokens/s (K x N tokens
# over the wall time of the K streams) and each setting's median.
#   [SHAPE=1b] bench/gateway/concurrent_serve.sh BUILD [RUNS K N LAYERS DIM FF TYPE CORE]
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-3}
K=${3:-4}
. "$(dirname "$0")/../workload/overhead_common.sh"
overhead_args 3 "$BUILD" "$RUNS" "${4:-64}" "${5:-12}" "${6:-512}" \
  "${7:-1536}" "${8:-f32}" "${9:-1}"
WORK=$(mktemp -d /tmp/exo-concurrent-XXXXXX)
SERVE_PID=
stop_serve() {
  if [ -n "$SERVE_PID" ]; then
    kill "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
  fi
  SERVE_PID=
}
cleanup() {
  stop_serve
  rm -rf "$WORK"
}
trap cleanup EXIT
overhead_model
# serve WAIT_MS: starts the node with that batch wait; sets PORT.
serve() {
  sed "s/\"rescan_interval_s\": 0/\"rescan_interval_s\": 0, \"batch_wait_ms\": $1/" \
    "$WORK/node.json" >"$WORK/node-$1.json"
  start_serve "$WORK/node-$1.json"
  "$BUILD/bench/gateway/gateway_bench" --port "$PORT" --model m -n 8 \
    --prompt "$prompt" >/dev/null # the first request loads the model
}
# aggregate: K streams at once; prints K * N / wall seconds.
aggregate() {
  local t0 t1
  t0=$(date +%s.%N)
  for i in $(seq 1 "$K"); do
    "$BUILD/bench/gateway/gateway_bench" --port "$PORT" --model m -n "$N" \
      --prompt "$prompt $i" >"$WORK/stream-$i.txt" &
  done
  wait # (a subshell: only the streams are its children)
  t1=$(date +%s.%N)
  for i in $(seq 1 "$K"); do
    [ -s "$WORK/stream-$i.txt" ] || { echo "stream $i failed" >&2; exit 1; }
  done
  awk -v k="$K" -v n="$N" -v a="$t0" -v b="$t1" \
    'BEGIN { printf "%.1f", k * n / (b - a) }'
}
if [ "${SHAPE:-}" = 1b ]; then
  echo "model: the 1B shape (16 layers, 2048 wide, ff 8192), $TYPE, vocabulary 128256;" \
    "$K streams of $N tokens at once; core $CORE; $RUNS runs each"
else
  echo "model: $LAYERS layers, $DIM wide, ff $FF, $TYPE, vocabulary 2048;" \
    "$K streams of $N tokens at once; core $CORE; $RUNS runs each"
fi
printf "%-5s %22s %22s\n" run "batch_wait 2 ms tok/s" "batch_wait 0 tok/s"
with=() without=()
for r in $(seq 1 "$RUNS"); do
  for w in 2 0; do
    serve "$w"
    v=$(aggregate)
    stop_serve
    if [ "$w" = 2 ]; then with+=("$v"); else without+=("$v"); fi
  done
  printf "%-5s %22s %22s\n" "$r" "${with[-1]}" "${without[-1]}"
done
printf "median: %s tok/s batched, %s tok/s not\n" \
  "$(printf "%s\n" "${with[@]}" | median)" \
  "$(printf "%s\n" "${without[@]}" | median)"
