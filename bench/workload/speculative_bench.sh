#!/usr/bin/env bash
# Speculative decoding (issue 22): `exo-node run` with and without a draft
# model, one node with only its cpu device, one core, one thread. The
# model: 12 layers, 512 wide, ff 1536, vocabulary 2048, tied head; the
# draft: its first layer with the same embedding and head (the test-model
# generator gives both the same first tensors for one seed), 1/9 of its
# bytes. Random weights make a draft that agrees far more than a real one
# would, and one with a head of its own that never does: both are shown. The
# text must be the same in every run (checked). Median of RUNS.
# TEMPERATURE=T (default 0, greedy): sampled runs (seed 7), speculative
# sampling; the text then differs with a draft (the same distribution, other
# draws), and is checked to be the same in every run of one setting.
#   [TEMPERATURE=T] bench/workload/speculative_bench.sh BUILD [RUNS]
set -euo pipefail
BUILD=${1:-build}
RUNS=${2:-3}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} OMP_NUM_THREADS=1
EXO_MODEL="$BUILD/runtime/tools/exo-model"
NODE="$BUILD/runtime/node/exo-node"
CORE=${CORE:-1}
N=96
TEMPERATURE=${TEMPERATURE:-0}
WORK=$(mktemp -d /tmp/exo-spec-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
common="--type f32 --dim 512 --ff 1536 --heads 8 --kv-heads 4 --vocab 2048 --tied"
# shellcheck disable=SC2086
"$EXO_MODEL" make-test --out "$WORK/model.gguf" --layers 12 --seed 1 $common >/dev/null
# shellcheck disable=SC2086
"$EXO_MODEL" make-test --out "$WORK/draft.gguf" --layers 1 --seed 1 $common >/dev/null
# The same first layer and vocabulary, but a head of its own (untied):
# it proposes what the model does not pick.
# shellcheck disable=SC2086
"$EXO_MODEL" make-test --out "$WORK/stranger.gguf" --layers 1 --seed 1 \
  ${common% --tied} >/dev/null
cat >"$WORK/node.json" <<JSON
{"node": {"name": "bench", "state_dir": "$WORK/state"},
 "devices": {"include": ["cpu"], "rescan_interval_s": 0}}
JSON
echo "model 12 layers ($(($(stat -c %s "$WORK/model.gguf") / 1048576)) MiB), draft 1 layer" \
  "($(($(stat -c %s "$WORK/draft.gguf") / 1048576)) MiB); $N tokens," \
  "temperature $TEMPERATURE; median of $RUNS"
printf '  %-34s %-12s %-10s %s\n' run "tokens/s" speed-up "proposals kept"
reference=""
base=""
for spec in "none" "draft 4" "draft 8" "stranger 4"; do
  set -- $spec
  extra=()
  [ "$1" != none ] && extra=(--draft "$WORK/$1.gguf" --draft-tokens "$2")
  v=()
  kept=""
  # Sampled, each setting has its own text.
  [ "$TEMPERATURE" != 0 ] && reference=""
  for _ in $(seq 1 "$RUNS"); do
    out=$(taskset -c "$CORE" "$NODE" run --config "$WORK/node.json" \
      --model "$WORK/model.gguf" --prompt "Once upon a time there was" \
      -n "$N" --temperature "$TEMPERATURE" --seed 7 "${extra[@]}" 2>&1)
    text=$(echo "$out" | grep -A1 "^Once upon a time" | head -2)
    [ -z "$reference" ] && reference=$text
    if [ "$text" != "$reference" ]; then
      echo "DIFFERENT TEXT with $spec" >&2
      exit 1
    fi
    v+=("$(echo "$out" | sed -n 's/^generation: .*(\([0-9.]*\) tokens\/s).*/\1/p')")
    kept=$(echo "$out" | sed -n 's/^draft: .*; \([0-9]* of [0-9]*\) proposed.*/\1/p')
  done
  med=$(printf '%s\n' "${v[@]}" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
  [ -z "$base" ] && base=$med
  printf '  %-34s %-12s %-10s %s\n' "$spec" "$med" \
    "$(awk -v a="$med" -v b="$base" 'BEGIN {printf "%.2fx", a / b}')" "${kept:--}"
done
if [ "$TEMPERATURE" = 0 ]; then
  echo "  (the text was the same in every run)"
else
  echo "  (the text was the same in every run of a setting)"
fi
