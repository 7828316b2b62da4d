#!/usr/bin/env bash
# Batched decoding beside llama.cpp's (issue 22): aggregate generation
# tokens/s of B sequences decoding at once on one node, one core, one
# thread each side: `exo-node run --sequences B` (the runtime: a job, its
# shard on the cpu device, one batched step per token) against
# node-llama-cpp with B sequences in one context (llama.cpp's batched
# decoding), measured alternately in the same run on the same file.
# Median of RUNS runs, min and max shown.
#   [LLAMA_NODE_DIR=...] [SHAPE=1b] [PACK_Q6_K=0] \
#     bench/workload/batch_compare.sh BUILD [RUNS]
# (PACK_Q6_K=0: the node holds Q6_K as stored, devices.cpu_pack_q6_k)
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-3}
LLAMA_NODE_DIR=${LLAMA_NODE_DIR:-$HOME/.cache/exo-test-tools}
if [ ! -d "$LLAMA_NODE_DIR/node_modules/node-llama-cpp" ]; then
  echo "SKIPPED: node-llama-cpp is not in $LLAMA_NODE_DIR (scripts/test-tools.sh" \
    "installs it): no llama.cpp figures to compare with" >&2
  exit 0
fi
export LLAMA_NODE_DIR XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
EXO_MODEL="$BUILD/runtime/tools/exo-model"
NODE="$BUILD/runtime/node/exo-node"
PROBE="$(dirname "$0")/llama_cpp_batch_probe.mjs"
CORE=${CORE:-1}
N=48
WORK=$(mktemp -d /tmp/exo-batch-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/cpu_node_common.sh"
cpu_node_config
# SHAPE=1b: Llama-3.2-1B-shaped files (weights far larger than the
# caches, as any real model's; a step carries up to 32 sequences: the
# last stage returns each greedy token's candidate, not a row of 128256
# logits).
if [ "${SHAPE:-mid}" = 1b ]; then
  SHAPE_ARGS="--layers 16 --dim 2048 --ff 8192 --heads 32 --kv-heads 8 --vocab 128256 --ctx 4096 --tokenizer gpt2"
  SHAPE_TEXT="16 layers, 2048 wide, ff 8192, 32/8 heads, vocabulary 128256"
else
  SHAPE_ARGS="--layers 12 --dim 512 --ff 1536 --heads 8 --kv-heads 4 --vocab 2048"
  SHAPE_TEXT="12 layers, 512 wide, ff 1536, 8/4 heads, vocabulary 2048"
fi
echo "$SHAPE_TEXT; $N tokens"
echo "per sequence after a 16-token prompt; one core, one thread; median of $RUNS"
printf '  %-7s %-9s %-26s %-26s %s\n' type sequences "exo tok/s (min-max)" \
  "llama.cpp tok/s (min-max)" "exo / llama.cpp"
for type in ${BATCH_TYPES:-f32 q4_k_m}; do
  m="$WORK/$type.gguf"
  # shellcheck disable=SC2086
  "$EXO_MODEL" make-test --out "$m" --type "$type" $SHAPE_ARGS --seed 1 \
    >/dev/null
  for b in ${BATCHES:-1 4 16}; do
    e=() l=()
    for _ in $(seq 1 "$RUNS"); do
      out=$(taskset -c "$CORE" "$NODE" run --config "$WORK/node.json" \
        --model "$m" --prompt "Once upon a time there was" -n "$N" \
        --sequences "$b" 2>&1 | tr -d '\0')
      e+=("$(echo "$out" | sed -n 's/^generation: .*(\([0-9.]*\) tokens\/s).*/\1/p')")
      out=$(taskset -c "$CORE" node "$PROBE" "$m" "$b" "$N" 1 2>/dev/null)
      l+=("$(echo "$out" | awk '/^sequences/ {print $4 / $6}')")
    done
    em=$(stats 0 "${e[@]}" | cut -d' ' -f1)
    lm=$(stats 0 "${l[@]}" | cut -d' ' -f1)
    printf '  %-7s %-9s %-26s %-26s %.2fx\n' "$type" "$b" "$(stats 0 "${e[@]}")" \
      "$(stats 0 "${l[@]}")" "$(awk -v a="$em" -v b="$lm" 'BEGIN {print a / b}')"
  done
done
