#!/bin/sh
# Runs the config fuzzer for a bounded time (CGRT_FUZZ_SECONDS, default 60) from the shipped
# configurations and the kept regressions. A crash leaves its input in WORK/; copy it to
# tests/fuzz/regressions/ (it then replays in every build) and fix the cause.
#   usage: run.sh FUZZER SOURCE_DIR WORK_DIR
set -eu
fuzzer=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work/corpus"
cp "$src"/conf/*.ini "$src"/conf/legacy/*.ini "$src"/tests/fuzz/regressions/* "$work/corpus/" 2>/dev/null || true
cd "$work"
"$fuzzer" -max_total_time="${CGRT_FUZZ_SECONDS:-60}" -timeout=10 -rss_limit_mb=1024 \
  -print_final_stats=1 corpus 2>&1 | tail -25
