#!/bin/sh
# Runs a test binary under gdb until it faults (a crash seen once in a while, such as test_gpu_streams'
# device_sync_on_another_thread in session 52), then prints every thread's backtrace.
#   usage: scripts/gpu-gdb-loop.sh BINARY [TRIES [OUTDIR]]   (TRIES default 10; OUTDIR: /tmp)
# The environment passes through: CGRT_TEST_FILTER=NAME makes test_gpu_streams run that test alone.
# Exit 0: it faulted, the backtraces are in OUTDIR/gdb-loop-N.txt and on stdout; 1: no fault in
# TRIES runs (each run's output kept); 77: no gdb.
set -u
bin=${1:?usage: scripts/gpu-gdb-loop.sh BINARY [TRIES [OUTDIR]]}
tries=${2:-10}
out=${3:-/tmp}
gdb=$(command -v gdb || command -v cuda-gdb || true)
if [ -z "$gdb" ]; then
  echo "SKIPPED: no gdb or cuda-gdb on the path"
  exit 77
fi
i=1
while [ "$i" -le "$tries" ]; do
  log=$out/gdb-loop-$i.txt
  "$gdb" -q -batch -ex "set pagination off" -ex run -ex "info threads" \
    -ex "thread apply all bt 20" --args "$bin" >"$log" 2>&1
  if grep -q "received signal SIG" "$log"; then
    echo "run $i faulted ($log):"
    grep -n -A200 "received signal SIG" "$log"
    exit 0
  fi
  echo "run $i: no fault"
  i=$((i + 1))
done
exit 1
