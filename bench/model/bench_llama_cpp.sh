#!/usr/bin/env bash
# `make bench`'s comparison with llama.cpp on issue 19's terms: the
# Llama-3.2-1B-shaped Q4_K_M, Q6_K and Q8_0 files (random weights), the
# 489-token prompt of prompt_long.txt, 33 generated, 1 and 2 threads, best
# of 4, each one-thread run of both engines on CPU 0; then the Q4_K_M file
# with llama.cpp's 8-bit KV cache on both sides (KV_TYPE=q8_0, issue 22),
# best of 3. About 35 minutes.
# llama.cpp is the test-only node-llama-cpp (scripts/test-tools.sh); without
# it this says SKIPPED and exits 0.
#
#   bench/model/bench_llama_cpp.sh BUILD
set -uo pipefail
BUILD=${1:?usage: bench_llama_cpp.sh BUILD}
here=$(cd "$(dirname "$0")" && pwd)
tools=$("$here/../../scripts/test-tools.sh" 2>/dev/null | tail -1)
if [ ! -d "$tools/node_modules/node-llama-cpp" ]; then
  echo "bench_llama_cpp: SKIPPED: node-llama-cpp is not installed" \
       "(scripts/test-tools.sh could not fetch it)"
  exit 0
fi
export LLAMA_NODE_DIR=$tools SHAPE=1b SPEED_TYPES="q4_k_m q6_k q8_0"
export PROMPT_FILE=$here/prompt_long.txt
if command -v taskset >/dev/null; then export PIN="taskset -c 0"; fi
# As root: drop the page cache after making each file (huge folios).
if [ "$(id -u)" = 0 ]; then export DROP_CACHES=1; fi
"$here/compare_llama_cpp.sh" "$BUILD" 4 || exit $?
echo
KV_TYPE=q8_0 SPEED_TYPES=q4_k_m exec "$here/compare_llama_cpp.sh" "$BUILD" 3
