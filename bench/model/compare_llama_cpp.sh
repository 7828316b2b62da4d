#!/usr/bin/env bash
# exo's CPU engine beside llama.cpp on the same GGUF files: the same tokens
# (greedy), and prompt / generation tokens per second with 1 and 2 threads.
#
#   LLAMA_NODE_DIR=DIR bench/model/compare_llama_cpp.sh [BUILD] [RUNS]
#
# SPEED_TYPES="q4_k_m q6_k" times other formats (default: f16 q8_0 f32).
# SHAPE=1b times Llama-3.2-1B-shaped files instead (16 x 2048, ff 8192,
# 32/8 heads, vocabulary 128256: issue 19's speed targets; ~2 minutes to
# make each) and PROMPT_FILE=F takes the timed prompt from F (a 512-token
# prompt for the targets; the default is the 83-token PROMPT_LONG).
# DROP_CACHES=1 (root) drops the page cache after making each file, so
# that its pages are read back in huge folios (docs/benchmarks.md,
# 2026-11-29, later).
# KV_TYPE=q8_0 runs both engines with that KV cache type (exo-model
# --kv-type: the node's engine, a device stage on the cpu device;
# llama.cpp's --cache-type-k/-v, through node-llama-cpp's
# experimentalKvCacheKeyType/ValueType), in both parts.
# PIN="taskset -c 0" runs both engines' one-thread runs under that prefix:
# on a shared VM unpinned one-thread decode figures swing 1.5x with the CPU
# each engine lands on (docs/benchmarks.md, 2026-11-29).
#
# llama.cpp comes from the node-llama-cpp package (its prebuilt CPU
# binary), installed by hand outside the project, for example
#   npm install --prefix /tmp/llama node-llama-cpp@3.22.1
# It is not a dependency of exo and nothing here downloads it.
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-3}
: "${LLAMA_NODE_DIR:?set LLAMA_NODE_DIR to a folder with node_modules/node-llama-cpp}"
EXO_MODEL="$BUILD/runtime/tools/exo-model"
PROBE="$(dirname "$0")/llama_cpp_probe.mjs"
WORK=$(mktemp -d /tmp/exo-vs-llama-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export LLAMA_NODE_DIR

PROMPT_LONG="In a distant valley the river carved stone for ten thousand years while travellers passed through it with lanterns and maps, arguing about"
PROMPT_MIXED=$'Héllo wörld! 日本語 🤖\n\ttabs  and   spaces 12345 it\'s'

KV_EXO=()
KV_LLAMA=()
if [ -n "${KV_TYPE:-}" ]; then
  KV_EXO=(--kv-type "$KV_TYPE")
  KV_LLAMA=("$(echo "$KV_TYPE" | tr '[:lower:]' '[:upper:]')")
fi

exo_ids() { # model prompt n threads -> "prompt ids|generated ids"
  "$EXO_MODEL" run --model "$1" --prompt "$2" -n "$3" --threads "$4" \
    --ctx 1024 --print-ids "${KV_EXO[@]}" >"$WORK/exo.out"
  echo "$(sed -n 's/^prompt ids: //p' "$WORK/exo.out")|$(sed -n 's/^generated ids: //p' "$WORK/exo.out")"
}
llama_ids() {
  node "$PROBE" "$1" "$2" "$3" "$4" "${KV_LLAMA[@]}" >"$WORK/llama.out" 2>"$WORK/llama.err" \
    || { cat "$WORK/llama.err" >&2; return 1; }
  echo "$(sed -n 's/^prompt ids: //p' "$WORK/llama.out")|$(sed -n 's/^generated ids: //p' "$WORK/llama.out")"
}

echo "== token for token (greedy, 48 tokens${KV_TYPE:+, KV cache $KV_TYPE}) =="
fail=0
while read -r type tok extra; do
  m="$WORK/check.gguf"
  # shellcheck disable=SC2086
  "$EXO_MODEL" make-test --out "$m" --type "$type" --tokenizer "$tok" $extra >/dev/null
  for prompt in "$PROMPT_LONG" "$PROMPT_MIXED"; do
    a=$(exo_ids "$m" "$prompt" 48 1)
    b=$(llama_ids "$m" "$prompt" 48 1)
    if [ "$a" = "$b" ]; then verdict=same; else verdict=DIFFERENT; fail=1; fi
    printf '  %-5s %-6s %-62s %s\n' "$type" "$tok" "$extra" "$verdict"
  done
done <<'CASES'
f32 llama --layers 4 --dim 256 --ff 768 --heads 8 --kv-heads 2 --vocab 1024 --seed 7
f16 llama --layers 6 --dim 512 --ff 1536 --heads 8 --kv-heads 8 --vocab 2048 --seed 3
q8_0 llama --layers 3 --dim 384 --ff 1024 --heads 6 --kv-heads 2 --vocab 4096 --seed 11 --tied
f32 gpt2 --layers 2 --dim 128 --ff 256 --heads 2 --kv-heads 1 --vocab 700 --seed 5 --tied
f16 gpt2 --layers 8 --dim 256 --ff 704 --heads 4 --kv-heads 4 --vocab 3000 --seed 9
q8_0 gpt2 --layers 4 --dim 256 --ff 768 --heads 8 --kv-heads 2 --vocab 1024 --seed 7
CASES

PROMPT_TIMED=$PROMPT_LONG
[ -z "${PROMPT_FILE:-}" ] || PROMPT_TIMED=$(cat "$PROMPT_FILE")
if [ "${SHAPE:-mid}" = 1b ]; then
  SHAPE_ARGS="--layers 16 --dim 2048 --ff 8192 --heads 32 --kv-heads 8 --vocab 128256 --ctx 4096 --tokenizer gpt2"
  SHAPE_TEXT="16 layers, 2048 wide, ff 8192, 32/8 heads, vocab 128256"
else
  SHAPE_ARGS="--layers 12 --dim 768 --ff 2048 --heads 12 --kv-heads 4 --vocab 32000"
  SHAPE_TEXT="12 layers, 768 wide, ff 2048, 12/4 heads, vocab 32000"
fi

echo
echo "== speed: $SHAPE_TEXT; ${PROMPT_FILE:-83-token} prompt, 32 generated; ${KV_TYPE:-f16} KV cache; best of $RUNS =="
printf '  %-5s %-7s %-22s %-22s %s\n' type threads "prompt tok/s exo|llama" "gen tok/s exo|llama" tokens
for type in ${SPEED_TYPES:-f16 q8_0 f32}; do
  m="$WORK/speed-$type.gguf"
  # shellcheck disable=SC2086
  "$EXO_MODEL" make-test --out "$m" --type "$type" $SHAPE_ARGS --seed 1 \
    >/dev/null
  if [ -n "${DROP_CACHES:-}" ]; then
    # A file just written sits in the page cache in small folios; read
    # again through exo's MADV_HUGEPAGE mapping it comes in 2 MiB ones, as
    # a model file read after a reboot does (both engines then map those).
    sync
    echo 1 >/proc/sys/vm/drop_caches
    "$EXO_MODEL" run --model "$m" --prompt hi -n 1 >/dev/null
  fi
  for threads in 1 2; do
    best=(0 0 0 0)
    same=yes
    pin=""
    [ "$threads" != 1 ] || pin=${PIN:-}
    for _ in $(seq 1 "$RUNS"); do
      # Interleaved, so both see the same machine load.
      # --llama-threads: llama.cpp's split-KV decode (from 256 positions)
      # depends on its thread count; reproduce the one it runs with.
      $pin "$EXO_MODEL" run --model "$m" --prompt "$PROMPT_TIMED" -n 33 \
        --threads "$threads" --llama-threads "$threads" \
        --print-ids "${KV_EXO[@]}" >"$WORK/exo.out"
      ep=$(awk '/^prompt:/ {print $2 / $5}' "$WORK/exo.out")
      eg=$(awk '/^generation:/ {print ($2 - 1) / $5}' "$WORK/exo.out")
      $pin node "$PROBE" "$m" "$PROMPT_TIMED" 33 "$threads" "${KV_LLAMA[@]}" \
        >"$WORK/llama.out" 2>/dev/null
      n=$(sed -n 's/^prompt ids: //p' "$WORK/llama.out" | wc -w)
      lp=$(awk -v n="$n" '/^prompt_s/ {print n / $2}' "$WORK/llama.out")
      lg=$(awk '/^gen_tokens/ {print $2 / $4}' "$WORK/llama.out")
      [ "$(sed -n 's/^generated ids: //p' "$WORK/exo.out")" = \
        "$(sed -n 's/^generated ids: //p' "$WORK/llama.out")" ] || same=no
      i=0
      for v in "$ep" "$lp" "$eg" "$lg"; do
        best[$i]=$(awk -v a="${best[$i]}" -v b="$v" 'BEGIN {print (b > a ? b : a)}')
        i=$((i + 1))
      done
    done
    printf '  %-5s %-7s %-22s %-22s %s\n' "$type" "$threads" \
      "$(printf '%.0f | %.0f' "${best[0]}" "${best[1]}")" \
      "$(printf '%.1f | %.1f' "${best[2]}" "${best[3]}")" "$same"
  done
done
exit $fail
