#!/usr/bin/env bash
# Installs exo's build and test dependencies from Debian's packages.
# Idempotent: packages already present are not touched, and apt-get runs only
# when something is missing. Set EXO_SKIP_DEPS=1 to skip entirely.
set -euo pipefail

if [ "${EXO_SKIP_DEPS:-0}" = "1" ]; then exit 0; fi

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev libgecode-dev libsimdjson-dev libboost-dev libssl-dev catch2
  libcli11-dev
  libvulkan-dev mesa-vulkan-drivers glslc vulkan-tools
  nlohmann-json3-dev libcli11-dev libpcre2-dev
  hipcc libamdhip64-dev librocm-smi-dev
  # Test tools: the gateway tests drive the server with curl, lint
  # /metrics with promtool (package prometheus) and load the dashboard in
  # headless chromium (driven by puppeteer-core from the npm test tools).
  curl prometheus chromium wrk
  # A child process of a test that crashes (an abort, a segfault) leaves a
  # core; the harness prints gdb's backtraces of it (test/support/process).
  gdb
  # `make fuzz`: clang with libFuzzer's runtime.
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
