#!/bin/sh
# No CUDA library among the NEEDED entries of libcgrt, the cgrt command and the unit tests: they
# start on a machine without CUDA. The objects that need CUDA (the cuda driver, the GPU workloads)
# are loaded on demand.
#   usage: needed.sh [--needs-cuda OBJECT]... OBJECT...
# An object after --needs-cuda must list a CUDA library (the check sees NEEDED entries at all).
set -u
command -v readelf >/dev/null 2>&1 || {
  echo "SKIPPED: readelf not found (binutils)"
  exit 77
}
pattern='libcuda\.|libcudart|libnccl|libcupti|libcublas|libnvrtc|libnvidia-'
fail=0
while [ $# -gt 0 ]; do
  want=no
  if [ "$1" = --needs-cuda ]; then
    want=yes
    shift
  fi
  f=$1
  shift
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  cuda=$(echo "$needed" | tr ' ' '\n' | grep -E "$pattern" | tr '\n' ' ')
  if [ "$want" = yes ] && [ -z "$cuda" ]; then
    echo "FAILED: $f lists no CUDA library, but it links CUDA: NEEDED $needed"
    fail=1
  elif [ "$want" = no ] && [ -n "$cuda" ]; then
    echo "FAILED: $f needs $cuda(NEEDED: $needed)"
    fail=1
  else
    echo "ok: $(basename "$f"): $needed"
  fi
done
exit $fail
