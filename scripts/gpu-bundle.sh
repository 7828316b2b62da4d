#!/usr/bin/env bash
# Pack the GPU checks of a build into one archive for a machine that has an
# NVIDIA GPU but not this machine's packages: the stripped test and bench
# binaries, exo-node and exo-model, and every shared library they need beyond
# glibc and libstdc++ (CAF, Gecode, OpenSSL, cudart, ...). cuBLAS is
# not packed: it is opened at run time from the GPU machine's CUDA toolkit.
#
#   scripts/gpu-bundle.sh [BUILD] [OUT.tar.xz]      (default build, .gpu/bundle.tar.xz)
#
# Unpack there and run scripts/gpu-check.sh on it.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-.gpu/bundle.tar.xz}
bins="test/backends/gpu_conformance test/backends/cuda_backend_tests
  test/backends/cublas_library_tests test/backends/backend_conformance
  test/backends/gpu_common_tests test/model/device_stage_tests
  bench/backends/gpu_bench
  bench/backends/model_ops_bench bench/backends/device_bench
  bench/workload/batch_step_bench
  runtime/node/exo-node runtime/tools/exo-model"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/gb/bin" "$tmp/gb/lib"
for b in $bins; do
  [ -x "$BUILD/$b" ] || { echo "missing $BUILD/$b (build it first)" >&2; exit 1; }
  strip -o "$tmp/gb/bin/$(basename "$b")" "$BUILD/$b"
done
for b in $bins; do ldd "$BUILD/$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$tmp/gb/lib/"; done
mkdir -p "$(dirname "$OUT")"
tar -C "$tmp" -cJf "$OUT" gb
echo "wrote $OUT ($(du -h "$OUT" | cut -f1))"
