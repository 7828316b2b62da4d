#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, run from the archive scripts/gpu-bundle.sh
# makes: the GPU conformance suite, the backend conformance suite (every
# device, CUDA's and -- where the driver has a Vulkan ICD -- Vulkan on the real
# GPU), the cuBLAS loader, the GPU and device-operation benchmarks, and
# generation through exo-node on the GPU compared with the CPU engine.
#
#   scripts/gpu-check.sh BUNDLE.tar.xz [OUTDIR] [quick]
#
# Every step has its own time limit, so one that hangs costs its limit and
# the rest still run. Writes tests.txt, bench.txt and generate.txt to OUTDIR.
set -uo pipefail
BUNDLE=$1
OUTDIR=${2:-gpu-check-out}
QUICK=${3:-}
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

step() { # LIMIT FILE TITLE COMMAND...
  local limit=$1 file=$2 title=$3; shift 3
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

step 60 tests.txt "exo-node --devices" "$G/bin/exo-node" --devices
step 120 tests.txt "gpu_conformance" "$G/bin/gpu_conformance" --durations yes
step 60 tests.txt "cuda_backend_tests" "$G/bin/cuda_backend_tests"
step 60 tests.txt "cublas_library_tests" "$G/bin/cublas_library_tests"
step 60 tests.txt "gpu_common_tests" "$G/bin/gpu_common_tests"
step 240 tests.txt "backend_conformance" "$G/bin/backend_conformance" \
  --durations yes

# Generation: the same greedy run on the CPU engine, on exo-node's cpu
# device and on each GPU backend; the text must be the same.
M=$W/models
mkdir -p "$M"
gen() { # BACKENDS MODEL N [OPTIONS...]
  local b=$1 f=$2 n=$3; shift 3
  EXO_BACKENDS=$b timeout -k 5 60 "$G/bin/exo-node" run --model "$f" \
    --prompt "the quick brown fox" -n "$n" --temperature 0 \
    --state-dir "$W/state-$b" "$@" 2>&1
}
for t in f32 f16 q8_0 q4_k_m; do
  f=$M/small-$t.gguf
  "$G/bin/exo-model" make-test --out "$f" --layers 4 --dim 256 --ff 768 \
    --heads 8 --kv-heads 4 --vocab 1024 --type "$t" >/dev/null
  {
    echo "==== small $t: exo-model (CPU engine)"
    "$G/bin/exo-model" run --model "$f" --prompt "the quick brown fox" -n 32 \
      --temperature 0 2>&1 | head -1
    for b in cpu cuda vulkan; do
      echo "==== small $t: exo-node on $b"
      gen "$b" "$f" 32 | grep -av "^note:"
    done
  } 2>&1 | tee -a "$OUTDIR/generate.txt"
done
q=""
[ -n "$QUICK" ] && q=--quick
step 120 bench.txt "gpu_bench" "$G/bin/gpu_bench" $q
step 180 bench.txt "model_ops_bench" "$G/bin/model_ops_bench" $q
step 120 bench.txt "device_bench" "$G/bin/device_bench"

# A TinyLlama-wide model (12 layers of 2048; F16, Q8_0, Q4_K_M): decode speed.
for t in f16 q8_0 q4_k_m; do
  f=$M/wide-$t.gguf
  "$G/bin/exo-model" make-test --out "$f" --layers 12 --dim 2048 --ff 5632 \
    --heads 32 --kv-heads 4 --vocab 32000 --type "$t" >/dev/null
  {
    for b in cuda cpu; do
      echo "==== wide $t: exo-node on $b"
      gen "$b" "$f" 64 | grep -av "^note:"
    done
    echo "==== wide $t: exo-node on cuda, 8 sequences"
    gen cuda "$f" 64 --sequences 8 | grep -a "tokens/s"
  } 2>&1 | tee -a "$OUTDIR/generate.txt"
done
if command -v compute-sanitizer >/dev/null; then
  step 180 tests.txt "gpu_conformance under compute-sanitizer memcheck" \
    compute-sanitizer --tool memcheck \
    "$G/bin/gpu_conformance"
fi
rm -rf "$W"
