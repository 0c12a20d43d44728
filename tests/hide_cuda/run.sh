#!/bin/sh
# The unit suite and the light commands on a machine without CUDA: CUDA's libraries are hidden
# from the dynamic loader (hide_cuda.c, through LD_AUDIT), whatever rpath or LD_LIBRARY_PATH say.
#   usage: run.sh AUDIT_LIB CGRT SOURCE_DIR HAVE_CUDA UNIT_TEST...
# Fails if a unit test fails or cannot start (a CUDA library among its NEEDED entries), or if one
# of `cgrt version`, `check --dry-run`, `buckets` and (on a machine without an NVIDIA GPU driver)
# `info` fails or so much as searches for a CUDA library. With the cuda driver built, first checks
# that the hiding works: `cgrt info --probe` must then fail to load the cuda driver.
set -u
audit=$1 cgrt=$2 src=$3 have_cuda=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/cgrt-hide-cuda.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$work/refused.txt
fail=0
hidden() {
  env LD_AUDIT="$audit" CGRT_HIDE_CUDA_LOG="$log" "$@"
}

if [ "$have_cuda" = ON ]; then
  : >"$log"
  out=$(hidden "$cgrt" info --probe 2>&1)
  if ! echo "$out" | grep -q "cannot open shared object file" || ! [ -s "$log" ]; then
    echo "FAILED: CUDA is not hidden: cgrt info --probe still loaded the cuda driver:"
    echo "$out"
    exit 1
  fi
  echo "hidden: cgrt info --probe could not load the cuda driver ($(head -1 "$log") refused)"
fi

for t in "$@"; do
  rc=0
  hidden "$t" >"$work/out.txt" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    cat "$work/out.txt"
    echo "FAILED: $(basename "$t") with CUDA hidden (exit $rc)"
    fail=1
  else
    echo "ok: $(basename "$t")"
  fi
done

gpu_driver=no
for f in /dev/nvidiactl /proc/driver/nvidia/version /dev/dxg; do
  [ -e "$f" ] && gpu_driver=yes
done
light() {
  : >"$log"
  rc=0
  hidden "$cgrt" "$@" >"$work/out.txt" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    cat "$work/out.txt"
    echo "FAILED: cgrt $* with CUDA hidden (exit $rc)"
    fail=1
  elif [ -s "$log" ]; then
    echo "FAILED: cgrt $* searched for CUDA libraries: $(tr '\n' ' ' <"$log")"
    fail=1
  else
    echo "ok: cgrt $* (no CUDA library searched)"
  fi
}
light version
light check "$src/conf/local.ini" --dry-run
light buckets --max-tokens 512 --num-graphs 8
if [ "$gpu_driver" = no ]; then
  light info
else
  echo "(cgrt info asks the cuda driver on this machine, which shows an NVIDIA GPU driver)"
fi
exit $fail
