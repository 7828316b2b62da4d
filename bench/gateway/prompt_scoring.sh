#!/usr/bin/env bash
# Scoring a prompt (completions' echo with logprobs, what
# lm-evaluation-harness's loglikelihood tasks ask) through a real node,
# beside llama.cpp on the same file: a prompt of LEN token ids read for one
# generated token, plainly and scored (every prompt row's log-probability),
# in exo (`exo-node serve`, HTTP, one core) and in llama.cpp
# (node-llama-cpp, one thread, the same core). Prints the medians of RUNS
# requests each and the cost of scoring on each side.
#   [LLAMA_NODE_DIR=...] bench/gateway/prompt_scoring.sh BUILD [RUNS LEN
#     LAYERS DIM FF TYPE CORE]   (VOCAB: the file's vocabulary, 32000)
set -euo pipefail
. "$(dirname "$0")/../workload/overhead_common.sh"
BUILD_ARG=${1:-build}
RUNS=${2:-7}
LEN=${3:-500}
overhead_args 7 "$BUILD_ARG" "$RUNS" 1 "${4:-12}" "${5:-512}" "${6:-1536}" \
  "${7:-f32}" "${8:-1}"
VOCAB=${VOCAB:-32000}
export VOCAB
LLAMA_NODE_DIR=${LLAMA_NODE_DIR:-$HOME/.cache/exo-test-tools}
export LLAMA_NODE_DIR
serve_workdir prompt-scoring
overhead_model
awk -v n="$LEN" -v v="$VOCAB" 'BEGIN {
  printf "[1"; for (i = 1; i < n; ++i) printf ",%d", 3 + (i * 7919) % (v - 3);
  print "]" }' >"$WORK/ids.json"
start_serve "$WORK/node.json"
request() { # $1: extra fields; prints seconds
  curl -s -o "$WORK/answer.json" -w '%{time_total}\n' \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"m\",\"prompt\":$(cat "$WORK/ids.json"),\"max_tokens\":1,\"temperature\":0$1}" \
    "http://127.0.0.1:$PORT/v1/completions"
}
request "" >/dev/null # the first request loads the model
request ',"echo":true,"logprobs":1' >/dev/null
n=$(grep -o '"token_logprobs":\[[^]]*\]' "$WORK/answer.json" | tr ',' '\n' | wc -l)
[ "$n" -eq $((LEN + 1)) ] || { echo "scored answer has $n log-probabilities, not $((LEN + 1))" >&2; exit 1; }
echo "model: $LAYERS layers, $DIM wide, ff $FF, $TYPE, vocabulary $VOCAB;" \
  "prompt of $LEN tokens, 1 generated; core $CORE; $RUNS runs each"
plain=() scored=()
for _ in $(seq 1 "$RUNS"); do
  plain+=("$(request "")")
  scored+=("$(request ',"echo":true,"logprobs":1')")
done
ep=$(printf "%s\n" "${plain[@]}" | median)
es=$(printf "%s\n" "${scored[@]}" | median)
printf "exo:       plain %7.1f ms  scored %7.1f ms  (min %s / %s s, max %s / %s s)\n" \
  "$(awk -v x="$ep" 'BEGIN { print x * 1000 }')" \
  "$(awk -v x="$es" 'BEGIN { print x * 1000 }')" \
  "$(printf "%s\n" "${plain[@]}" | sort -g | head -1)" \
  "$(printf "%s\n" "${scored[@]}" | sort -g | head -1)" \
  "$(printf "%s\n" "${plain[@]}" | sort -g | tail -1)" \
  "$(printf "%s\n" "${scored[@]}" | sort -g | tail -1)"
if [ ! -d "$LLAMA_NODE_DIR/node_modules/node-llama-cpp" ]; then
  echo "SKIPPED llama.cpp: node-llama-cpp is not in $LLAMA_NODE_DIR" \
    "(scripts/test-tools.sh installs it)"
  exit 0
fi
taskset -c "$CORE" node "$(dirname "$0")/llama_cpp_score_probe.mjs" \
  "$WORK/model.gguf" "$WORK/ids.json" "$RUNS" 1 >"$WORK/llama.txt"
lp=$(awk '{ print $2 }' "$WORK/llama.txt" | median)
ls_=$(awk '{ print $4 }' "$WORK/llama.txt" | median)
lv=$(awk '{ print $6 }' "$WORK/llama.txt" | median)
printf "llama.cpp: plain %7.1f ms  scored %7.1f ms  (the values read into node-llama-cpp's JavaScript: %.1f ms)\n" \
  "$lp" "$ls_" "$lv"
awk -v ep="$ep" -v es="$es" -v lp="$lp" -v ls="$ls_" 'BEGIN {
  printf "scoring costs exo %.1f ms, llama.cpp %.1f ms; scored request: exo/llama.cpp %.2fx\n",
    (es - ep) * 1000, ls - lp, es * 1000 / ls }'
