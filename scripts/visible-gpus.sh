#!/bin/sh
# Prints how many GPUs a CUDA process started from here will see: nvidia-smi lists every GPU of
# the machine whatever CUDA_VISIBLE_DEVICES says, so the count is that variable's entries when it
# is set (at most nvidia-smi's count; empty or "-1": none), else nvidia-smi's. Scripts that need
# two GPUs ask this, not nvidia-smi -L: session 41's serial suite with CUDA_VISIBLE_DEVICES=0 on a
# four-GPU host started host_llmc_2gpu's two ranks on one GPU instead of skipping it.
#   usage: sh scripts/visible-gpus.sh    (prints 0 where nvidia-smi is missing or finds none)
all=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
all=${all:-0}
if [ "${CUDA_VISIBLE_DEVICES+set}" = set ]; then
  # CUDA stops at the first invalid entry; -1 (or nothing) hides every GPU
  n=0
  for id in $(echo "$CUDA_VISIBLE_DEVICES" | tr ',' ' '); do
    case $id in -*) break ;; esac
    n=$((n + 1))
  done
  [ "$n" -lt "$all" ] && all=$n
fi
echo "$all"
