# Shared by the overhead benchmarks (bench/workload/runtime_overhead.sh,
# bench/gateway/serve_overhead.sh), which measure one path against
# `exo-model run` on the same file. Source it, then:
#   overhead_args DEFAULT_PAIRS "$@"   BUILD PAIRS N LAYERS DIM FF TYPE CORE
#   overhead_model                     $WORK/model.gguf and $WORK/node.json
#   engine                             the engine's generation tokens/s
#   median                             the median of numbers on stdin
#   serve_workdir NAME                 $WORK (/tmp/exo-NAME-XXXXXX), removed
#                                      at exit with the node SERVE_PID
#   start_serve CONFIG                 `exo-node serve` of $WORK/model.gguf
#                                      as model m on core $CORE; sets
#                                      SERVE_PID and PORT
overhead_args() {
  local default_pairs=$1
  shift
  BUILD=${1:-build}
  PAIRS=${2:-$default_pairs}
  N=${3:-128}
  LAYERS=${4:-12}
  DIM=${5:-512}
  FF=${6:-1536}
  TYPE=${7:-f32}
  CORE=${8:-1}
  export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
  export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
  prompt="Once upon a time"
}

overhead_model() {
  # SHAPE=1b: a Llama-3.2-1B-shaped file instead (16 layers, 2048 wide, ff
  # 8192, 32/8 heads, a 128256-word vocabulary; LAYERS, DIM, FF ignored).
  local shape="--layers $LAYERS --dim $DIM --ff $FF --heads 8 --kv-heads 4 --vocab ${VOCAB:-2048} --ctx ${CTX:-512}"
  if [ "${SHAPE:-}" = 1b ]; then
    shape="--layers 16 --dim 2048 --ff 8192 --heads 32 --kv-heads 8 --vocab 128256 --ctx 4096 --tokenizer gpt2"
  fi
  # shellcheck disable=SC2086
  "$BUILD/runtime/tools/exo-model" make-test --out "$WORK/model.gguf" \
    $shape --type "$TYPE" >/dev/null
  cat >"$WORK/node.json" <<JSON
{"node": {"name": "solo", "state_dir": "$WORK/state"},
 "devices": {"include": ["cpu"], "rescan_interval_s": 0}}
JSON
}

rate() { sed -n 's/^generation: .*(\([0-9.]*\) tokens\/s.*/\1/p'; }

engine() {
  taskset -c "$CORE" "$BUILD/runtime/tools/exo-model" run \
    --model "$WORK/model.gguf" --prompt "$prompt" -n "$N" --threads 1 2>&1 |
    rate
}

median() {
  sort -g | awk '{ v[NR] = $1 }
    END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

serve_workdir() {
  WORK=$(mktemp -d "/tmp/exo-$1-XXXXXX")
  SERVE_PID=
  trap 'if [ -n "$SERVE_PID" ]; then kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null; fi; rm -rf "$WORK"' EXIT
}

start_serve() {
  taskset -c "$CORE" "$BUILD/runtime/node/exo-node" serve --config "$1" \
    --model "$WORK/model.gguf" --model-id m --port 0 >"$WORK/serve.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 1 300); do
    grep -q "ready in" "$WORK/serve.log" && break
    sleep 0.1
  done
  PORT=$(sed -n 's/.*serving m on http:\/\/[^:]*:\([0-9]*\)\/v1.*/\1/p' "$WORK/serve.log")
  [ -n "$PORT" ] || { cat "$WORK/serve.log" >&2; exit 1; }
}
