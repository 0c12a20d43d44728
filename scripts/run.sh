#!/bin/sh
# Sets up a fresh Debian machine, builds cgrt and runs its main job: what the installation holds
# (cgrt info), every shipped configuration checked and dry-run on the host driver, and the
# per-call dispatch overhead of the eager backend.
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
  build/bin/cgrt check "$f" --dry-run || rc=$?
  [ "$rc" -eq 1 ] && exit 1
  [ "$rc" -ne 0 ] && echo "(exit $rc)"
done
build/bin/cgrt bench --workload dispatch
