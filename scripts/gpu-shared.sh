#!/bin/sh
# The GPU suite on a shared GPU (issue 37): `ctest -L gpu -j JOBS` while another process keeps the
# GPU busy (`cgrt bench --workload decode` in a loop, a process of its own), so that a test that
# passes only on an idle GPU, a race between cgrt's stream and the host's, shows. Then the same
# suite alone with -j JOBS. Both must pass.
#   usage: scripts/gpu-shared.sh [BUILD_DIR [JOBS]]   (BUILD_DIR default: build; JOBS: 4)
# Exit 0: both passed; 1: a run failed (the ctest logs are in BUILD_DIR/gpu-shared/); 77: no GPU.
set -u
cd "$(dirname "$0")/.." || exit 1
build=${1:-build}
jobs=${2:-4}
logs=$build/gpu-shared
cgrt=$build/bin/cgrt
mkdir -p "$logs"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: no GPU (nvidia-smi -L)"
  exit 77
fi
# the load: one process, in its own session so that it can be stopped with its children
setsid sh -c "while :; do \"$cgrt\" bench conf/local.ini --workload decode --steps 2000 >/dev/null 2>&1 || sleep 1; done" &
load=$!
sleep 5 # let it start and take the GPU
status=0
echo "== ctest -L gpu -j $jobs beside a load process (log: $logs/loaded.log)"
ctest --test-dir "$build" -L gpu -j "$jobs" --output-on-failure >"$logs/loaded.log" 2>&1 || status=1
kill -TERM -- "-$load" 2>/dev/null || kill "$load" 2>/dev/null
wait "$load" 2>/dev/null
grep -E "tests passed|\(Failed\)|Timeout" "$logs/loaded.log"
echo "== ctest -L gpu -j $jobs alone (log: $logs/alone.log)"
ctest --test-dir "$build" -L gpu -j "$jobs" --output-on-failure >"$logs/alone.log" 2>&1 || status=1
grep -E "tests passed|\(Failed\)|Timeout" "$logs/alone.log"
exit "$status"
