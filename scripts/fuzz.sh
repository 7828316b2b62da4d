#!/usr/bin/env bash
# Runs every libFuzzer target of a `make fuzz` build for SECONDS each, over
# a working copy of its corpus (fuzz/corpus/NAME stays as committed: new
# inputs go to BUILD/corpus/NAME). Prints libFuzzer's last status line per
# target (executions, coverage, corpus size). A crash, leak, timeout or
# out-of-memory stops with its input in BUILD/crashes/: add it to
# fuzz/corpus/NAME (it becomes a regression test of `make test`) and fix.
#   scripts/fuzz.sh BUILD [SECONDS] [TARGET...]
set -uo pipefail
BUILD=${1:-build-fuzz}
SECONDS_EACH=${2:-600}
shift $(( $# > 2 ? 2 : $# ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  # Every target the build has (fuzz/CMakeLists.txt lists them).
  for bin in "$BUILD"/fuzz/fuzz_*; do
    [ -x "$bin" ] && targets+=("${bin##*/fuzz_}")
  done
  if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz: no targets in $BUILD/fuzz (make fuzz-build builds them)" >&2
    exit 2
  fi
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$BUILD/crashes"
status=0
for t in "${targets[@]}"; do
  bin="$BUILD/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (make fuzz builds it)" >&2
    exit 2
  fi
  work="$BUILD/corpus/$t"
  mkdir -p "$work"
  log="$BUILD/fuzz-$t.log"
  # -max_len 65536: seeds hold whole (small) files; -rss_limit_mb: an input
  # that makes a parser hold 2 GiB is a finding, not a pass.
  "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$BUILD/crashes/$t-" "$work" "$ROOT/fuzz/corpus/$t" \
    >"$log" 2>&1
  rc=$?
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if [ $rc -eq 0 ]; then
    printf 'fuzz %-13s %6s s  %s executions  %s\n' "$t" "$SECONDS_EACH" \
      "${execs:-?}" "$last"
  else
    printf 'fuzz %-13s FOUND A PROBLEM (exit %d): see %s and %s/crashes/%s-*\n' \
      "$t" "$rc" "$log" "$BUILD" "$t"
    grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -5
    status=1
  fi
done
exit $status
