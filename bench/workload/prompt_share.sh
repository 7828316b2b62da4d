#!/usr/bin/env bash
# Sequences of one prompt (issue 22): the time until B sequences of one
# long prompt have read it and can sample, one node, one core, one thread
# each side. exo: `exo-node run --sequences B` (the stages compute the
# prompt once and fork its KV rows) and the same with --no-prompt-sharing
# (every copy computed); llama.cpp: node-llama-cpp with B sequences of the
# same prompt in one context (each reads its own copy, batched). Measured
# alternately in the same run on the same file; median of RUNS, min-max.
#   [LLAMA_NODE_DIR=...] bench/workload/prompt_share.sh BUILD [RUNS]
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-3}
LLAMA_NODE_DIR=${LLAMA_NODE_DIR:-$HOME/.cache/exo-test-tools}
HAVE_LLAMA=1
if [ ! -d "$LLAMA_NODE_DIR/node_modules/node-llama-cpp" ]; then
  echo "node-llama-cpp is not in $LLAMA_NODE_DIR (scripts/test-tools.sh" \
    "installs it): llama.cpp's column is left out" >&2
  HAVE_LLAMA=0
fi
export LLAMA_NODE_DIR XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
export OMP_NUM_THREADS=1
EXO_MODEL="$BUILD/runtime/tools/exo-model"
NODE="$BUILD/runtime/node/exo-node"
PROBE="$(dirname "$0")/llama_cpp_batch_probe.mjs"
CORE=${CORE:-1}
LEN=${LEN:-1000}
N=8
WORK=$(mktemp -d /tmp/exo-share-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/cpu_node_common.sh"
cpu_node_config
# The prompt: about LEN tokens of the generated vocabulary (8 words are
# about 29 of its tokens); the table says how many.
PROMPT=$(python3 -c "import sys; print(' '.join(['the'] + ['quick brown fox jumps over a lazy dog'] * ($LEN // 29)))")
echo "12 layers, 512 wide, ff 1536, 8/4 heads, vocabulary 2048; B sequences"
echo "of one prompt; seconds until all have read it; one core, one thread;"
echo "median of $RUNS (min-max)"
printf '  %-7s %-3s %-7s %-22s %-22s %-22s\n' type B tokens "exo, shared" \
  "exo, each its copy" "llama.cpp, each its copy"
for type in ${SHARE_TYPES:-f32 q4_k_m}; do
  m="$WORK/$type.gguf"
  "$EXO_MODEL" make-test --out "$m" --type "$type" --layers 12 --dim 512 \
    --ff 1536 --heads 8 --kv-heads 4 --vocab 2048 --ctx 4096 --seed 1 \
    >/dev/null
  for b in ${SHARES:-1 4}; do
    s=() a=() l=() toks=0
    for _ in $(seq 1 "$RUNS"); do
      for mode in shared apart; do
        extra=""
        [ "$mode" = apart ] && extra="--no-prompt-sharing"
        out=$(taskset -c "$CORE" "$NODE" run --config "$WORK/node.json" \
          --model "$m" --prompt "$PROMPT" -n "$N" --temperature 0.8 \
          --sequences "$b" $extra 2>&1)
        t=$(echo "$out" | sed -n 's/^prompt: \([0-9]*\) tokens in \([0-9.]*\) s.*/\2/p')
        toks=$(echo "$out" | sed -n 's/^prompt: \([0-9]*\) tokens in.*/\1/p')
        if [ "$mode" = shared ]; then s+=("$t"); else a+=("$t"); fi
      done
      if [ "$HAVE_LLAMA" = 1 ]; then
        per=$((toks / b))
        out=$(taskset -c "$CORE" node "$PROBE" "$m" "$b" "$N" 1 "$per" same \
          2>/dev/null)
        l+=("$(echo "$out" | awk '/^sequences/ {print $8}')")
      fi
    done
    lc="-"
    [ "$HAVE_LLAMA" = 1 ] && lc=$(stats 2 "${l[@]}")
    printf '  %-7s %-3s %-7s %-22s %-22s %-22s\n' "$type" "$b" "$((toks / b))" \
      "$(stats 2 "${s[@]}")" "$(stats 2 "${a[@]}")" "$lc"
  done
done
