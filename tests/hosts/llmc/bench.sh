#!/bin/sh
# ms per training step of llm.c through cgrt under each backend, against unpatched llm.c, in the
# manner of `cgrt bench`: one row per shape and run, the median step time, the speedup over
# unpatched llm.c, and whether every step's loss and grad norm equal llm.c's bit for bit.
#   usage: bench.sh [BUILD_DIR]   (see run.sh for LLMC_DIR, LLMC_WORK)
# A step's time is llm.c's own (train_gpt2.cu's events around the training section: the batch,
# forward, backward, grad norm, update and, for the port, the read of the loss), as stepbits.c
# prints it with all its digits. Each run trains STEPS steps (default 40) and the median is taken
# over the steps after SKIP (default 8: cuBLAS's first calls, cgrt's warm-up and capture), pooled
# over ROUNDS rounds (default 2) that interleave the runs. SHAPES defaults to the issue's four, RUNS
# to llmc (unpatched) and the four backends; LLMC_PIN (run.sh) pins every run to the same CPUs.
# Targets: full_iteration within 5% of the floor (unpatched llm.c's GPU busy time a step) at every
# shape, and no backend slower than llm.c at any shape (issue 41 withdrew issue 29's 2x and 1.5x,
# which were below the floor). Slower means both: the median over all rounds above llm.c's, and
# the best round's median above llm.c's best round. A launch-bound eager process draws a speed of
# its own (d6 on two H200s, session 40, 11 rounds in three runs: llm.c's 2.22-3.13 ms, none's
# 2.18-2.84), so the pooled median of two eager runs can differ on the draws alone; a real cost
# shows in both. Exit 0 when they are met, 1 when a run failed, 3 when one is missed.
# LLMC_GPUS=2 (or more): llm.c's NCCL data parallelism, a process per GPU (run.sh llmc2, port2), at
# SHAPES default "d6,1,64 d12,4,64", ZeRO stage ZERO (default 0). The step time is rank 0's (the
# ranks wait for each other in every step's collectives); the floor is the issue's: each rank's GPU
# busy time in unpatched llm.c, its NCCL kernels included, "rank 0 / rank 1". Two rows beside it say
# what it is made of: the busy time without NCCL's kernels (an NCCL kernel spins while it waits for
# the other rank, so on a rank that waits the floor holds waiting; without NCCL it is no floor this
# order of collectives reaches either: the embedding's gradient reduction has nothing after it to
# overlap), and the port's own full_iteration traced, its busy time with NCCL and NCCL's time: a
# step no longer than its own busy time is bound by the device's work. Targets (issue 41):
# full_iteration at most 5% above the floor on each rank at every shape, and no backend slower than
# llm.c.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=paths.sh
. "$here/paths.sh"
steps=${STEPS:-40}
skip=${SKIP:-8}
rounds=${ROUNDS:-2}
gpus=${LLMC_GPUS:-1}
zero=${ZERO:-0}
if [ "$gpus" -gt 1 ]; then
  shapes=${SHAPES:-"d6,1,64 d12,4,64"}
  two=2                  # run.sh's commands and trees for several GPUs
  zarg="-z $zero"        # llm.c's ZeRO stage
  ztag=-z$zero
  zlabel=" z$zero"
else
  shapes=${SHAPES:-"d6,1,64 d6,1,16 d12,4,64 d12,4,256"}
  two='' zarg='' ztag='' zlabel=''
fi
export LLMC_GPUS="$gpus"
runs=${RUNS:-"llmc none local transformer_engine full_iteration"}

if "$build/bin/cgrt" info 2>&1 | grep -q "no CUDA device"; then
  echo "SKIPPED: no CUDA device"
  exit 77
fi
sh "$here/run.sh" "$build" "build$two"
out=$work/bench$two
rm -rf "$out"
mkdir -p "$out"

# one run: its step lines appended to $out/TAG.RUN.steps, its log kept
run_one() { # TAG RUN ARGS...
  tag=$1 name=$2
  shift 2
  log=$out/$tag.$name.log
  if [ "$name" = llmc ]; then
    sh "$here/run.sh" "$build" "llmc$two" "$@" >"$log" 2>&1 || return 1
  else
    sh "$here/run.sh" "$build" "port$two" "$name" "$@" >"$log" 2>&1 || return 1
  fi
  grep '^stepbits ' "$log" >>"$out/$tag.$name.steps"
}

median_ms() { # FILE: the median of the ms of steps > skip
  awk -v skip="$skip" '$2 > skip { print $10 }' "$1" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2];
           else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

round_medians() { # FILE: each round's median ms of steps > skip, "r1 r2 ..."
  awk -v skip="$skip" '$2 == 1 { r++ } $2 > skip { print r, $10 }' "$1" 2>/dev/null |
    sort -k1,1n -k2,2g | awk '{ v[$1, ++n[$1]] = $2; if ($1 > m) m = $1 }
      END { for (r = 1; r <= m; r++) printf "%s%.2f", (r > 1 ? " " : ""), v[r, int((n[r] + 1) / 2)] }'
}

best_round() { # "ROUND_MEDIANS": the lowest ("nan" for none)
  echo "$1" | tr ' ' '\n' | awk 'NF { if (m == "" || $1 + 0 < m + 0) m = $1 } END { print (m == "" ? "nan" : m) }'
}

failed=0
r=1
while [ "$r" -le "$rounds" ]; do
  for shape in $shapes; do
    IFS=, read -r d b t <<EOF
$shape
EOF
    for name in $runs; do
      # shellcheck disable=SC2086 # zarg: none, or the two words of llm.c's -z option
      run_one "$d-b$b-t$t$ztag" "$name" -e "$d" -b "$b" -t "$t" -x "$steps" $zarg ||
        { echo "FAILED: $name at $shape (see $out/$d-b$b-t$t$ztag.$name.log)"; failed=1; }
    done
  done
  r=$((r + 1))
done

# The floor: the time unpatched llm.c's kernels, copies and memsets keep the GPU busy in a step
# (their union, from CUPTI's device timestamps: tools/trace), which no strategy that runs llm.c's
# kernels goes below. One traced run per shape, after the timed ones.
tracer=$build/lib/libcgrt-trace.so
# With several GPUs, each rank's trace is its own file (%p), and the floor reads "rank 0 / rank 1"
# (traces without a step, e.g. timeout's own, are left out). FIELD: busy_us, busy_wo_nccl_us,
# nccl_us (trace_summary.py).
busy_ms() { # TAG D B T [FIELD]: the median busy ms a step (per rank, in rank order), or "-"
  [ -f "$tracer" ] || { echo -; return; }
  field=${5:-busy_us}
  if [ -n "${6:-}" ]; then # the traces are there already
    per_rank "$1" "$field"
    return
  fi
  rm -f "$out/$1".trace*.csv
  # shellcheck disable=SC2086
  LLMC_PRELOAD=$tracer CGRT_TRACE_OUT="$out/$1.trace.%p.csv" sh "$here/run.sh" "$build" "llmc$two" \
    -e "$2" -b "$3" -t "$4" -x 14 $zarg >"$out/$1.trace.log" 2>&1 || { echo -; return; }
  per_rank "$1" "$field"
}
# The same from a traced run of the port under full_iteration (its kernels inside the graph, the
# ranks in step): where its time goes, NCCL's transfers without the waits of eager llm.c.
fi_busy_ms() { # TAG D B T FIELD [traced]
  [ -f "$tracer" ] || { echo -; return; }
  if [ -z "${6:-}" ]; then
    rm -f "$out/$1.fi".trace*.csv
    # shellcheck disable=SC2086
    LLMC_PRELOAD=$tracer CGRT_TRACE_GRAPHS=0 CGRT_TRACE_OUT="$out/$1.fi.trace.%p.csv" \
      sh "$here/run.sh" "$build" "port$two" full_iteration -e "$2" -b "$3" -t "$4" -x 14 $zarg \
      >"$out/$1.fi.trace.log" 2>&1 || { echo -; return; }
  fi
  per_rank "$1.fi" "$5"
}
# ms against each rank's figure in "r0 / r1": "+2.8% / -29.4%" (ms: the run's step time)
vs() { echo "$1" | tr '/' '\n' | awk -v m="$ms" '$1 + 0 > 0 { printf "%s%+.1f%%", (n++ ? " / " : ""), 100 * (m / $1 - 1) }'; }
per_rank() { # TAG FIELD: FIELD of each traced rank, in the order the ranks started (pids rise)
  for pid in $(for f in "$out/$1".trace.*.csv; do [ -f "$f" ] && f=${f%.csv} && echo "${f##*.}"; done | sort -n); do
    python3 "$root/tools/trace/trace_summary.py" "$out/$1.trace.$pid.csv" --step encoder_forward \
      --skip 3 --top 0 2>>"$out/trace_summary.err" | sed -n "s/.* $2 \\([0-9.]*\\).*/\\1/p" |
      awk '{ printf "%.3f\n", $1 / 1000 }'
  done | paste -sd/ - | sed 's|/| / |g; s|^$|-|'
}

echo "llm.c through cgrt: ms per step, median of steps $((skip + 1))-$steps over $rounds round(s) (and each round's), $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)${two:+, a process per GPU, ZeRO stage $zero}"
printf '%-14s %-20s %10s %-26s %9s %8s %s\n' shape run ms/step rounds speedup losses "cgrt (last round)"
missed=""
checked="" # the shapes whose full_iteration target was checked
for shape in $shapes; do
  IFS=, read -r d b t <<EOF
$shape
EOF
  tag=$d-b$b-t$t$ztag
  label="$d B$b T$t$zlabel"
  base=$(median_ms "$out/$tag.llmc.steps" 2>/dev/null || echo nan)
  base_best=$(best_round "$(round_medians "$out/$tag.llmc.steps")")
  if [ -n "$two" ]; then
    wo_nccl=$(busy_ms "$tag" "$d" "$b" "$t" busy_wo_nccl_us)
    floor=$(busy_ms "$tag" "$d" "$b" "$t" busy_us traced)
    printf '%-14s %-20s %10s %-26s %9s %8s %s\n' "$label" "busy w/o NCCL" \
      "$wo_nccl" "$(busy_ms "$tag" "$d" "$b" "$t" nccl_us traced)" "" "" \
      "unpatched llm.c's busy time without its NCCL kernels, and their time (waiting included), per rank"
    if echo "$runs" | grep -qw full_iteration; then
      fi_busy=$(fi_busy_ms "$tag" "$d" "$b" "$t" busy_us)
      printf '%-14s %-20s %10s %-26s %9s %8s %s\n' "$label" "full_it. busy, NCCL" \
        "$fi_busy" "$(fi_busy_ms "$tag" "$d" "$b" "$t" nccl_us traced)" "" "" \
        "the port's full_iteration traced: busy time with NCCL and NCCL's kernel time inside the graph, per rank"
    fi
  else
    floor=$(busy_ms "$tag" "$d" "$b" "$t")
  fi
  floor_what="): the most any strategy can gain"
  [ -z "$two" ] || floor_what=", NCCL kernels included, per rank)"
  floor_max=$(echo "$floor" | tr '/' '\n' | awk '$1 + 0 > m { m = $1 + 0 } END { print m + 0 }')
  most=$(awk -v a="$base" -v f="$floor_max" 'BEGIN { if (f + 0 > 0) printf "%.2fx", a / f; else print "-" }')
  printf '%-14s %-20s %10s %-26s %9s %8s %s\n' "$label" "GPU busy (floor)" "$floor" "" "$most" "" \
    "unpatched llm.c's kernels, copies, memsets (CUPTI$floor_what"
  awk '{ print $2, $4, $6 }' "$out/$tag.llmc.steps" 2>/dev/null | sort -u >"$out/$tag.llmc.bits" || true
  for name in $runs; do
    f=$out/$tag.$name.steps
    ms=$(median_ms "$f" 2>/dev/null || echo nan)
    per_round=$(round_medians "$f")
    speedup=$(awk -v a="$base" -v b="$ms" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2fx", a / b; else print "-" }')
    same="-"
    if [ "$name" != llmc ]; then
      awk '{ print $2, $4, $6 }' "$f" 2>/dev/null | sort -u >"$out/$tag.$name.bits" || true
      if [ -s "$out/$tag.$name.bits" ] && cmp -s "$out/$tag.llmc.bits" "$out/$tag.$name.bits"; then
        same=equal
      else
        same=DIFFER
      fi
      run_name=$name
    else
      run_name="llm.c (unpatched)"
    fi
    stats=$(grep '^cgrt: backend ' "$out/$tag.$name.log" 2>/dev/null | sed -E 's/^cgrt: backend [a-z_]+ \| //; s/ \| module calls.*\| / | /' || true)
    printf '%-14s %-20s %10s %-26s %9s %8s %s\n' "$label" "$run_name" "$ms" "$per_round" "$speedup" "$same" "$stats"
    if [ "$name" != llmc ]; then
      # slower: its median over all rounds above llm.c's, and its best round above llm.c's best
      # (an eager process draws a speed of its own, launch-bound: a round can lose on that draw)
      best=$(best_round "$per_round")
      ratio=$(awk -v a="$base" -v b="$ms" 'BEGIN { if (b + 0 > 0) print a / b; else print 0 }')
      if awk -v x="$ratio" 'BEGIN { exit !(x < 1.0) }'; then
        if [ "$base_best" != nan ] && [ "$best" != nan ] &&
          awk -v a="$base_best" -v b="$best" 'BEGIN { exit !(b + 0 > 0 && a + 0 >= b + 0) }'; then
          printf '%-14s %-20s %10s %s\n' "$label" "" "" "$name: median above llm.c's ($ms against $base ms), best round not ($best against $base_best): per-process draws, not slower"
        else
          missed="$missed; $name slower than llm.c at $label"
        fi
      fi
      [ "$same" = equal ] || missed="$missed; $name's losses differ from llm.c's at $label"
      if [ "$name" = full_iteration ] && [ -z "$two" ]; then
        checked="$checked $tag"
        over=$(awk -v m="$ms" -v f="$floor_max" 'BEGIN { if (f > 0) printf "%.1f", 100 * (m / f - 1); else print "nan" }')
        printf '%-14s %-20s %10s %s\n' "$label" "" "" "full_iteration $over% above the floor (target: 5% at most)"
        awk -v o="$over" 'BEGIN { exit !(o == "nan" || o + 0 > 5) }' &&
          missed="$missed; full_iteration ${over}% above the floor at $label"
      fi
      if [ "$name" = full_iteration ] && [ -n "$two" ]; then
        # per rank against the floor (llm.c's busy time with its NCCL kernels); beside it, against
        # the busy time without them and against full_iteration's own busy time
        checked="$checked $tag"
        over=$(vs "$floor")
        printf '%-14s %-20s %10s %s\n' "$label" "" "" "full_iteration against the floor: ${over:--} (r0 / r1; target: +5.0% at most on each)"
        printf '%-14s %-20s %10s %s\n' "$label" "" "" "full_iteration against the busy time without NCCL: $(vs "$wo_nccl"), against its own busy time: $(vs "${fi_busy:--}")"
        echo "${over:-nan}" | tr '/' '\n' | awk '{ v = $1; sub(/%$/, "", v); if ($1 == "nan" || v + 0 > 5) bad = 1 } END { exit !bad }' &&
          missed="$missed; full_iteration ${over:-nan} against the floor at $label"
      fi
    fi
  done
done
if [ "$failed" -ne 0 ]; then
  exit 1
fi
if [ -n "$missed" ]; then
  echo "targets MISSED${missed}"
  exit 3
fi
case "$checked" in
"") echo "targets met in part: no run of RUNS ($runs) slower than llm.c; full_iteration was not run, so its floor target was not checked" ;;
*) echo "targets met: full_iteration within 5% of the GPU-busy floor at$checked; no backend slower than llm.c" ;;
esac
