#!/bin/sh
# Sets up a fresh Debian machine, builds cgrt and runs its main job: `cgrt bench`, the decode
# workload under the per-layer and the whole-body strategy of the local backend and the chain
# workload, each against eager and the raw-graph floor. Before that: what the installation holds
# (cgrt info), every shipped configuration checked and dry-run on the host driver, the time and
# memory of the commands that need no GPU (at most 20 ms and 20 MB each) and the per-call
# dispatch cost (host only). Without a GPU the GPU benches say so and are skipped.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake -S . -B build -G Ninja
cmake --build build
build/bin/cgrt info
for f in conf/*.ini conf/legacy/*.ini; do
  echo "== cgrt check $f --dry-run"
  # Exit 2 (unusable) is reported, not fatal: a backend not built yet is "not found".
  rc=0
  build/bin/cgrt check "$f" --dry-run >/dev/null || rc=$?
  [ "$rc" -eq 1 ] && exit 1
  [ "$rc" -ne 0 ] && echo "(exit $rc)"
done
build/bin/cgrt-bench-light build/bin/cgrt .
build/bin/cgrt bench --workload dispatch
rc=0
build/bin/cgrt bench conf/local.ini --workload decode || rc=$?
if [ "$rc" -eq 2 ]; then
  echo "(the decode and chain benches need a GPU)"
  exit 0
fi
[ "$rc" -ne 0 ] && exit "$rc"
build/bin/cgrt bench conf/local_block.ini --workload decode
build/bin/cgrt bench --workload chain
