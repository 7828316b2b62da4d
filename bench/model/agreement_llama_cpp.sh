#!/usr/bin/env bash
# How long exo's greedy generation stays equal to llama.cpp's on generated
# models of one type, one line per seed: the number of leading generated
# tokens (of N) that are the same.
#
#   LLAMA_NODE_DIR=DIR bench/model/agreement_llama_cpp.sh [BUILD] [TYPE] [N] [SEEDS...]
#
# Defaults: build, q8_0, 64 tokens, seeds 1-8; models of 6 layers, 512
# wide, ff 1536, 8/4 heads, vocabulary 2048. llama.cpp comes from the
# node-llama-cpp package as in compare_llama_cpp.sh (not a dependency).
# The default prompt is 83 tokens with these models, so llama.cpp's flash
# attention takes its tiled path for it (64 tokens and more); set
# AGREEMENT_PROMPT to another prompt (a short one: the one_chunk path).
# LLAMA_THREADS=N runs llama.cpp with N threads and exo with
# --llama-threads N (its split-KV decode from position 256: use N of 300
# or more to reach it); EXO_THREADS sets exo's own threads (default 1).
# ARCH=qwen2|qwen3 makes models of that architecture (default llama).
set -euo pipefail
BUILD=${1:-build}
TYPE=${2:-q8_0}
N=${3:-64}
shift $(($# < 3 ? $# : 3))
SEEDS=("$@")
[ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3 4 5 6 7 8)
: "${LLAMA_NODE_DIR:?set LLAMA_NODE_DIR to a folder with node_modules/node-llama-cpp}"
export LLAMA_NODE_DIR
EXO_MODEL="$BUILD/runtime/tools/exo-model"
PROBE="$(dirname "$0")/llama_cpp_probe.mjs"
WORK=$(mktemp -d /tmp/exo-agreement-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
PROMPT=${AGREEMENT_PROMPT:-"In a distant valley the river carved stone for ten thousand years while travellers passed through it with lanterns and maps, arguing about"}

total=0
for seed in "${SEEDS[@]}"; do
  m="$WORK/m.gguf"
  "$EXO_MODEL" make-test --out "$m" --arch "${ARCH:-llama}" --type "$TYPE" \
    --layers 6 --dim 512 \
    --ff 1536 --heads 8 --kv-heads 4 --vocab 2048 --seed "$seed" >/dev/null
  read -ra a <<<"$("$EXO_MODEL" run --model "$m" --prompt "$PROMPT" -n "$N" \
    --threads "${EXO_THREADS:-1}" --llama-threads "${LLAMA_THREADS:-1}" \
    --ctx 1024 --print-ids | sed -n 's/^generated ids: //p')"
  read -ra b <<<"$(node "$PROBE" "$m" "$PROMPT" "$N" "${LLAMA_THREADS:-1}" 2>/dev/null \
    | sed -n 's/^generated ids: //p')"
  same=0
  while [ "$same" -lt "$N" ] && [ "${a[$same]:-x}" = "${b[$same]:-y}" ]; do
    same=$((same + 1))
  done
  # Both may stop early at the end-of-sequence token, which both print.
  n=$N
  [ "$same" -lt "$N" ] && [ "$same" -eq "${#a[@]}" ] \
    && [ "$same" -eq "${#b[@]}" ] && n=$same
  [ "$same" -eq "$n" ] && total=$((total + 1))
  printf '  %-5s seed %-3s same for %d/%d tokens%s\n' "$TYPE" "$seed" "$same" \
    "$N" "$([ "$n" -lt "$N" ] && echo ", both then stop" || true)"
done
printf '  %d of %d seeds the same throughout\n' "$total" "${#SEEDS[@]}"
