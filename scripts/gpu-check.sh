#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, run from the archive scripts/gpu-bundle.sh
# makes: the GPU conformance suite, the backend conformance suite (every
# device, CUDA's and -- where the driver has a Vulkan ICD -- Vulkan on the real
# GPU), the device-stage suite (batched, paged, q8_0 and scored forwards on
# every device), the cuBLAS loader, the GPU and device-operation benchmarks,
# and generation through exo-node on the GPU compared with the CPU engine:
# greedy text, q8_0 KV caches, batched decoding of 1, 4 and 16 sequences, a
# long prompt's prefill and speculative decoding with a one-layer draft.
#
#   scripts/gpu-check.sh BUNDLE.tar.xz [OUTDIR] [quick]
#
# Every step has its own time limit, so one that hangs costs its limit and
# the rest still run; once DEADLINE seconds (default 520) have passed, the
# steps left are skipped and say so, so the script ends inside a device
# lease. The wide models are written in the background while the tests run.
# Writes tests.txt, generate.txt and bench.txt to OUTDIR.
set -uo pipefail
BUNDLE=$1
OUTDIR=${2:-gpu-check-out}
QUICK=${3:-}
DEADLINE=${DEADLINE:-520}
mkdir -p "$OUTDIR"
W=$(mktemp -d /tmp/exo-gpu-XXXXXX)
tar -C "$W" -xJf "$BUNDLE"
G=$W/gb
cudalib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/cuda/lib; do
  [ -d "$d" ] && cudalib="$cudalib:$d"
done
export LD_LIBRARY_PATH="$G/lib$cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export XDG_RUNTIME_DIR=/tmp
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd

late() { # FILE TITLE: true (and says so) once the deadline has passed
  if [ "$SECONDS" -ge "$DEADLINE" ]; then
    echo "==== SKIPPED (deadline ${DEADLINE} s reached): $2" | tee -a "$OUTDIR/$1"
    return 0
  fi
  return 1
}
step() { # LIMIT FILE TITLE COMMAND...
  local limit=$1 file=$2 title=$3; shift 3
  late "$file" "$title" && return
  echo "==== $title" | tee -a "$OUTDIR/$file"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" 2>&1 | tee -a "$OUTDIR/$file"
  local rc=${PIPESTATUS[0]}
  echo "==== rc=$rc ($((SECONDS - t0)) s): $title" | tee -a "$OUTDIR/$file"
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
    --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  ls /usr/local/cuda/lib64/libcublas.so* 2>&1 | head -3
  echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-none}"
  nproc
} 2>&1 | tee "$OUTDIR/tests.txt"

# The wide models (TinyLlama's widths: 12 layers of 2048, ff 5632,
# vocabulary 32000) take a while to write: in the background. The F16 one
# has a tied head so that its first layer alone is a draft that agrees.
M=$W/models
mkdir -p "$M"
wide="--dim 2048 --ff 5632 --heads 32 --kv-heads 4 --vocab 32000 --ctx 2048"
(
  # shellcheck disable=SC2086
  "$G/bin/exo-model" make-test --out "$M/wide-f16.gguf" --layers 12 \
    --seed 1 --tied --type f16 $wide
  # shellcheck disable=SC2086
  "$G/bin/exo-model" make-test --out "$M/draft-f16.gguf" --layers 1 \
    --seed 1 --tied --type f16 $wide
) >"$W/make-f16.log" 2>&1 &
mk_f16=$!
# shellcheck disable=SC2086
"$G/bin/exo-model" make-test --out "$M/wide-q4_k_m.gguf" --layers 12 \
  --type q4_k_m $wide >"$W/make-q4.log" 2>&1 &
mk_q4=$!

step 30 tests.txt "exo-node --devices" "$G/bin/exo-node" --devices
step 120 tests.txt "gpu_conformance" "$G/bin/gpu_conformance" --durations yes
step 60 tests.txt "cuda_backend_tests" "$G/bin/cuda_backend_tests"
step 60 tests.txt "cublas_library_tests" "$G/bin/cublas_library_tests"
step 60 tests.txt "gpu_common_tests" "$G/bin/gpu_common_tests"
step 180 tests.txt "backend_conformance" "$G/bin/backend_conformance" \
  --durations yes
step 180 tests.txt "device_stage_tests" "$G/bin/device_stage_tests" \
  --durations yes

# Generation: the same greedy run on the CPU engine, on exo-node's cpu
# device and on each GPU backend; the text must be the same.
gen() { # BACKENDS MODEL N [OPTIONS...]
  local b=$1 f=$2 n=$3; shift 3
  EXO_BACKENDS=$b timeout -k 5 60 "$G/bin/exo-node" run --model "$f" \
    --prompt "${PROMPT:-the quick brown fox}" -n "$n" --temperature 0 \
    --state-dir "$W/state-$b" "$@" 2>&1
}
# "same text" or where TEXT parts from REF (cmp's words: the first byte
# that differs, or which one ends first).
parts() { # REF TEXT
  if [ "$1" = "$2" ]; then
    echo "same text (${#1} bytes)"
  else
    echo "differs $(cmp <(printf '%s' "$1") <(printf '%s' "$2") 2>&1 |
      sed -e 's|^.*differ: |at |' -e 's|^.*EOF on .* after|where one ends, after|')"
  fi
}
text_of() { grep -a "^${PROMPT:-the quick brown fox}" | head -1; }
for t in f32 f16 q8_0 q4_k_m; do
  late generate.txt "small $t" && break
  f=$M/small-$t.gguf
  "$G/bin/exo-model" make-test --out "$f" --layers 4 --dim 256 --ff 768 \
    --heads 8 --kv-heads 4 --vocab 1024 --type "$t" >/dev/null
  {
    echo "==== small $t: exo-model (CPU engine)"
    ref=$("$G/bin/exo-model" run --model "$f" --prompt "the quick brown fox" \
      -n 32 --temperature 0 2>&1 | head -1)
    echo "$ref"
    for b in cpu cuda vulkan; do
      echo "==== small $t: exo-node on $b"
      out=$(gen "$b" "$f" 32 | grep -av "^note:")
      echo "$out"
      echo "==== small $t on $b against the CPU engine: $(parts "$ref" "$(text_of <<<"$out")")"
    done
    for b in cpu cuda; do
      echo "==== small $t: exo-node on $b, q8_0 KV cache"
      out=$(gen "$b" "$f" 32 --kv-type q8_0 | grep -av "^note:")
      echo "$out"
      [ "$b" = cpu ] && qref=$(text_of <<<"$out")
      [ "$b" = cuda ] && echo "==== small $t, q8_0 KV cache, cuda against cpu: $(parts "$qref" "$(text_of <<<"$out")")"
    done
  } 2>&1 | tee -a "$OUTDIR/generate.txt"
done

# Wide models: decode of one sequence on the GPU and on the host's cpu
# device, batched decoding of 4 and 16 sequences on the GPU, a long
# prompt's prefill (about 500 tokens), and (F16) speculative decoding with the one-layer draft.
wait "$mk_f16" "$mk_q4"
cat "$W/make-f16.log" "$W/make-q4.log" >>"$OUTDIR/generate.txt"
long=$(for _ in $(seq 1 17); do printf 'the quick brown fox jumps over the lazy dog '; done)
for t in f16 q4_k_m; do
  f=$M/wide-$t.gguf
  late generate.txt "wide $t" && break
  {
    for b in cuda cpu; do
      echo "==== wide $t: exo-node on $b"
      out=$(gen "$b" "$f" 64 | grep -av "^note:")
      echo "$out"
      [ "$b" = cuda ] && wcuda=$(text_of <<<"$out")
      [ "$b" = cpu ] && echo "==== wide $t, cuda against cpu: $(parts "$(text_of <<<"$out")" "$wcuda")"
    done
    for s in 4 16; do
      echo "==== wide $t: exo-node on cuda, $s sequences"
      gen cuda "$f" 64 --sequences "$s" --no-prompt-sharing |
        grep -a "tokens/s"
    done
    # cuda-exact: every product in the CPU engine's order
    # (devices.gpu_prompt_gemm_rows 0), whose text must be the cpu's.
    echo '{"devices": {"gpu_prompt_gemm_rows": 0}}' >"$W/exact.json"
    for b in cpu cuda cuda-exact; do
      extra=()
      [ "$b" = cuda-exact ] && extra=(--config "$W/exact.json")
      echo "==== wide $t: exo-node on $b, a long prompt"
      out=$(PROMPT=$long gen "${b%-exact}" "$f" 16 "${extra[@]}" |
        grep -av "^note:")
      grep -a "tokens/s" <<<"$out"
      lt=$(PROMPT=$long text_of <<<"$out")
      [ "$b" = cpu ] && lref=$lt
      [ "$b" != cpu ] && echo "==== wide $t, a long prompt, $b against cpu: $(parts "$lref" "$lt")"
    done
    if [ "$t" = f16 ]; then
      for k in 4 8; do
        echo "==== wide $t: exo-node on cuda, draft of 1 layer, $k a round"
        gen cuda "$f" 64 --draft "$M/draft-f16.gguf" --draft-tokens "$k" |
          grep -av "^note:"
      done
    fi
  } 2>&1 | tee -a "$OUTDIR/generate.txt"
done

# Decode batches on the GPU's stage alone (no node, no sampling): the
# median step of 1, 4, 8 and 16 sequences of the wide models, sizes
# alternating step by step (issue 22's ratios, on this GPU).
for t in f16 q4_k_m; do
  step 120 bench.txt "batch_step_bench: wide $t on cuda" \
    env EXO_BENCH_DEVICE=cuda EXO_BENCH_FILE="$M/wide-$t.gguf" \
    "$G/bin/batch_step_bench" 20 1 4 8 16
done

q=""
[ -n "$QUICK" ] && q=--quick
step 180 bench.txt "model_ops_bench" "$G/bin/model_ops_bench" $q
step 120 bench.txt "gpu_bench" "$G/bin/gpu_bench" $q
step 90 bench.txt "device_bench" "$G/bin/device_bench"
if command -v compute-sanitizer >/dev/null; then
  step 150 tests.txt "paged and q8_0 conformance under compute-sanitizer" \
    compute-sanitizer --tool memcheck "$G/bin/backend_conformance" \
    "attention over a paged cache*,a q8_0 KV cache*,hadamard*"
fi
echo "==== done in $SECONDS s" | tee -a "$OUTDIR/tests.txt"
rm -rf "$W"
