#!/bin/sh
# The GPU time of unpatched llm.c's step, kernel by kernel, through Nsight Compute (ncu): the sum
# of its kernels' durations per step (clocks and caches as they are: --clock-control none
# --cache-control none), the floor no graph strategy goes below, against the step times bench.sh
# prints. Kernels run one at a time under ncu, so the sum is an upper bound of what they take
# back to back (neighbouring kernels' tails overlap there).
#   usage: gputime.sh [BUILD_DIR]   SHAPES (default "d6,1,64 d12,4,64"), see run.sh for LLMC_DIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=paths.sh
. "$here/paths.sh"
ncu=$(command -v ncu || true)
[ -n "$ncu" ] || {
  echo "SKIPPED: no ncu on PATH"
  exit 77
}
[ -x "$work/llmc/train_gpt2cu" ] || sh "$here/run.sh" "$build" build
for shape in ${SHAPES:-"d6,1,64 d12,4,64"}; do
  IFS=, read -r depth b t <<SHAPE
$shape
SHAPE
  csv=$work/gputime-$depth-b$b-t$t.csv
  (cd "$work/llmc" && "$ncu" --csv --print-units base --cache-control none --clock-control none \
    --metrics gpu__time_duration.sum ./train_gpt2cu -i "$work/data/train_*.bin" \
    -j "$work/data/val_*.bin" -s 0 -v 100000 -m 1 -e "$depth" -b "$b" -t "$t" -x 4 >"$csv")
  echo "$depth B$b T$t:"
  python3 - "$csv" <<'PY'
import csv
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
name, metric, value = (head.index(k) for k in ("Kernel Name", "Metric Name", "Metric Value"))
ks = [(r[name], float(r[value].replace(",", ""))) for r in rows[1:]
      if r[metric] == "gpu__time_duration.sum"]
starts = [i for i, (n, _) in enumerate(ks) if n.startswith("encoder_forward")]
for a, b in zip(starts[1:], starts[2:]):  # the first step warms cuBLAS up
    print(f"  step: {b - a} kernels, {sum(t for _, t in ks[a:b]) / 1e3:.1f} us of kernel time")
by = {}
for n, t in ks[starts[-2]:starts[-1]]:
    by[n.split("(")[0]] = by.get(n.split("(")[0], 0) + t
for n, t in sorted(by.items(), key=lambda x: -x[1])[:6]:
    print(f"    {t / 1e3:8.1f} us  {n[:72]}")
PY
done
