#!/usr/bin/env bash
# Workload benchmark (issue 5): tokens/s of one job with 4 sequences in
# flight on one node (one stage) and pipelined over two nodes (two stages),
# each exo-node pinned to one core with one BLAS/OpenMP thread.
#   bench/workload/workload_bench.sh BUILD [LAYERS DIM FF N [f32|f16|q8_0]]
set -euo pipefail
BUILD=${1:-build}
LAYERS=${2:-12}
DIM=${3:-512}
FF=${4:-1536}
N=${5:-48}
TYPE=${6:-f32}
NODE="$BUILD/runtime/node/exo-node"
CERT="$BUILD/runtime/tools/exo-cert"
CONSOLE="$BUILD/runtime/console/exo-console"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d /tmp/exo-bench-XXXXXX)
"$BUILD/runtime/tools/exo-model" make-test --out "$WORK/model.gguf" \
  --layers "$LAYERS" --dim "$DIM" --ff "$FF" --heads 8 --kv-heads 4 \
  --vocab 2048 --ctx 512 --type "$TYPE" >/dev/null
"$CERT" init-ca --dir "$WORK/ca" >/dev/null
"$CERT" issue-client --ca-dir "$WORK/ca" --name ops --out "$WORK/ops" >/dev/null
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
seed_port=""
core=0
for n in alpha beta; do
  "$CERT" issue-node --ca-dir "$WORK/ca" --name "$n" --out "$WORK/$n" >/dev/null
  seeds="[]"
  [ -n "$seed_port" ] && seeds="[\"127.0.0.1:$seed_port\"]"
  cat >"$WORK/$n.json" <<JSON
{"node": {"name": "$n", "state_dir": "$WORK/$n/state"},
 "network": {"port": 0, "seeds": $seeds},
 "tls": {"certificate": "$WORK/$n/$n.crt", "key": "$WORK/$n/$n.key",
         "ca": "$WORK/$n/ca.crt"},
 "models": {"dirs": ["$WORK"]},
 "devices": {"include": ["cpu"], "rescan_interval_s": 0}}
JSON
  taskset -c "$core" "$NODE" --config "$WORK/$n.json" >"$WORK/$n.log" 2>&1 &
  pids+=($!)
  core=$((core + 1))
  for _ in $(seq 1 120); do
    grep -q "ready in" "$WORK/$n.log" 2>/dev/null && break
    sleep 0.25
  done
  port=$(sed -n 's/.*listening on [^:]*:\([0-9]*\).*/\1/p' "$WORK/$n.log")
  [ -z "$seed_port" ] && seed_port=$port
done
# Runs need a token: the operator's (the first node's admin token).
token=$(cat "$WORK/alpha/state/access/admin.token")
con() {
  "$CONSOLE" --connect "127.0.0.1:$seed_port" --cert "$WORK/ops/ops.crt" \
    --key "$WORK/ops/ops.key" --ca "$WORK/ca/ca.crt" --timeout-ms 60000 \
    --exec "$1"
}
for _ in $(seq 1 40); do
  con nodes 2>/dev/null | grep -q beta && break
  sleep 0.25
done
job="run --model $WORK/model.gguf --prompt \"Once upon a time\" -n $N auth=$token"
con "$job --stages 2 --sequences 1" >/dev/null # warm-up, sends the model
echo "model: $LAYERS layers, $DIM wide, ff $FF, $TYPE; -n $N per sequence"
# "K M B": K stages (nodes), M sequences, at most B per step (0: as many
# as a step carries: batched decoding; 1: each sequence on its own step).
declare -A gen
for spec in "1 1 0" "1 2 0" "1 4 1" "1 4 0" "1 8 0" "1 16 0" "2 1 0" \
  "2 4 1" "2 4 0" "2 16 0"; do
  set -- $spec
  batch=""
  [ "$3" != 0 ] && batch="--batch $3"
  out=$(con "$job --stages $1 --sequences $2 $batch")
  tps=$(echo "$out" | sed -n 's/^generation: .*(\([0-9.]*\) tokens\/s).*/\1/p')
  gen["$1 $2 $3"]=$tps
  echo "stages $1 (nodes $1), sequences $2, per step ${3/#0/all}:" \
    "generation $tps tokens/s"
done
# What a pipeline of K stages can give at best: M sequences go as K groups
# of M/K, so each node runs, per round of M tokens, K steps of M/K
# sequences over 1/K of the layers: the time one node takes for one step
# of M/K sequences over all of them. At best K x (one node, M/K sequences).
for km in "2 4" "2 16"; do
  set -- $km
  one=${gen["1 $2 0"]:-}
  part=${gen["1 $(($2 / $1)) 0"]:-}
  got=${gen["$1 $2 0"]:-}
  [ -z "$one" ] || [ -z "$part" ] || [ -z "$got" ] && continue
  awk -v k="$1" -v m="$2" -v one="$one" -v part="$part" -v got="$got" \
    'BEGIN { b = k * part;
      printf "stages %d, sequences %d: %.1f tokens/s = %.2fx one node; " \
             "bound %d x (one node, %d sequences) = %.1f = %.2fx one " \
             "node; %.0f%% of the bound\n", k, m, got, got / one, k, \
             m / k, b, b / one, 100 * got / b }'
done
