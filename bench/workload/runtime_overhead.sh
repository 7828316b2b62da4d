#!/usr/bin/env bash
# The runtime's overhead on one node as a user meets it (issue 5): the same
# generation through `exo-node run` (job actor, shard actor, device actor,
# the cpu device) and through `exo-model run` (the host engine called
# directly), one core each (taskset), one BLAS/OpenMP thread, alternating
# run by run so that both see the same machine. Prints each pair's
# generation tokens/s and the median of the per-pair ratios.
#   bench/workload/runtime_overhead.sh BUILD [PAIRS N LAYERS DIM FF TYPE CORE]
set -euo pipefail
BUILD=${1:-build}
PAIRS=${2:-9}
N=${3:-128}
LAYERS=${4:-12}
DIM=${5:-512}
FF=${6:-1536}
TYPE=${7:-f32}
CORE=${8:-1}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d /tmp/exo-overhead-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$BUILD/runtime/tools/exo-model" make-test --out "$WORK/model.gguf" \
  --layers "$LAYERS" --dim "$DIM" --ff "$FF" --heads 8 --kv-heads 4 \
  --vocab 2048 --ctx 512 --type "$TYPE" >/dev/null
cat >"$WORK/node.json" <<JSON
{"node": {"name": "solo", "state_dir": "$WORK/state"},
 "devices": {"include": ["cpu"], "rescan_interval_s": 0}}
JSON
prompt="Once upon a time"
rate() { sed -n 's/^generation: .*(\([0-9.]*\) tokens\/s.*/\1/p'; }
engine() {
  taskset -c "$CORE" "$BUILD/runtime/tools/exo-model" run \
    --model "$WORK/model.gguf" --prompt "$prompt" -n "$N" --threads 1 2>&1 |
    rate
}
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
printf "%s\n" "${ratios[@]}" | sort -g | awk '
  { v[NR] = $1 }
  END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median overhead (exo-model tok/s over exo-node tok/s - 1): %+.1f%%\n", m * 100
  }'
