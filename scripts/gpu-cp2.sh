#!/bin/sh
# The part of issue 15 that needs two GPUs, in one command on a machine with at least two:
#   1. the multi-GPU tests (ctest -L multigpu: test_multigpu_cp with NCCL graph mixing on and off,
#      bench_cp, cp_suite);
#   2. `cgrt bench --workload cp --ranks 2` under the default settings and under each candidate
#      that has not been measured at 2 ranks yet, interleaved over ROUNDS rounds (default 2) so that
#      host drift spreads over all of them.
# It prints one line per cp-2 row (candidate, round, scope, eager_us, cgrt_us, speedup, bitwise, and
# the host's cost of issuing one eager and one cgrt step and one launch, to tell a host-bound slow
# run) and, per candidate and scope, the lowest speedup: the targets (issue 42) are at least 1.5x
# under module scope and 2x under step scope on every run, with every row bitwise equal. Logs go to
# LOG_DIR (default build-dir/gpu-cp2).
# TRACE=kernels (or graphs) also records every run's device timestamps with libcgrt-trace.so
# (tools/trace: CUPTI's activity API, one CSV per process, kernel by kernel or one record per graph
# launch) and prints, per candidate, each traced run against its first: what the device did per
# kernel or graph, so that a slow run can be told from a fast one (issue 32); with kernels, also
# the gaps inside graphs and between them (trace_summary.py --boundaries).
# CANDS="default fold" runs only those candidates; CTEST=0 skips the ctest part; CP_ARGS adds
# arguments to every bench run (e.g. CP_ARGS="--steps 400").
# Usage: scripts/gpu-cp2.sh [BUILD_DIR [LOG_DIR]]   (BUILD_DIR default: build; it must be built
# with CUDA and NCCL). Exit 0: every run completed and every row was bitwise equal; 1: a test
# failed, a run failed, or a row differed; 2: fewer than two GPUs (nothing run).
set -u
cd "$(dirname "$0")/.." || exit 1
build=${1:-build}
logs=${2:-$build/gpu-cp2}
rounds=${ROUNDS:-2}
cands=${CANDS:-default mix1 fold pdl_ag}
trace=${TRACE:-}
cgrt=$build/bin/cgrt
tracer=$build/lib/libcgrt-trace.so
if [ -n "$trace" ] && [ ! -f "$tracer" ]; then
  echo "gpu-cp2: TRACE=$trace needs $tracer (built where CUPTI is found)"
  exit 1
fi
[ -x "$cgrt" ] || { echo "gpu-cp2: $cgrt not found: build first (cmake --build $build)"; exit 1; }
gpus=$(sh scripts/visible-gpus.sh)
if [ "$gpus" -lt 2 ]; then
  echo "gpu-cp2: needs 2 GPUs, $gpus visible (nvidia-smi -L, CUDA_VISIBLE_DEVICES); nothing run"
  exit 2
fi
mkdir -p "$logs"
status=0
if [ "${CTEST:-1}" = 1 ]; then
  echo "== ctest -L multigpu (log: $logs/ctest.log)"
  if ! ctest --test-dir "$build" -L multigpu -V >"$logs/ctest.log" 2>&1; then status=1; fi
  grep -E "tests passed|\(Failed\)|Not Run|Timeout|SKIPPED" "$logs/ctest.log" | head -12
fi

# Candidates: a name, then the environment it runs under. "default" sets nothing (X_UNUSED=1 keeps
# env's argument list non-empty): the bench runs NCCL's graph mixing off unless the environment
# sets NCCL_GRAPH_MIXING_SUPPORT (issue 42, session 39: mixing off was the former candidate mix0).
# - mix1: NCCL_GRAPH_MIXING_SUPPORT=1: NCCL's kernels in a graph get event nodes that order them
#   against work outside the graph (docs/decisions.md, issue 15, sixth session).
# - fold: mixing on, and CGRT_FOLD_EVENT_LEAVES=1: the cuda driver folds the leaf event-record nodes
#   NCCL adds into one join (drivers/cuda/driver_cuda.c).
# - pdl_ag: CGRTK_CP_PDL_AFTER_AG=1: the kernel after each all-gather is a programmatic dependent
#   (kernels/cp.cu).
# The former candidate split (CGRT_BIND_SPLIT=1: each GPU's rank bound to its own share of the
# cores near it, 0 slow runs in 13 against 3 in 13, docs/decisions.md, issue 42) is now what
# default does: bind_cpu = auto gives that share (drivers/cuda/core_share.c), and the variable is
# gone. CANDS naming it is told so.
for name in $cands; do
  case $name in
  default | mix1 | fold | pdl_ag) ;;
  mix0) echo "gpu-cp2: candidate mix0 (graph mixing off) is now the bench's default; not run again" ;;
  split) echo "gpu-cp2: candidate split is now the default (bind_cpu = auto); not run again" ;;
  *) echo "gpu-cp2: unknown candidate $name (default mix1 fold pdl_ag); not run" ;;
  esac
done
echo "== cgrt bench --workload cp --ranks 2, $rounds rounds (logs: $logs/bench_*.log)"
printf '%-8s %5s %8s %10s %10s %8s %8s %10s %10s %9s %7s\n' candidate round scope eager_us cgrt_us \
  speedup bitwise eager_host cgrt_host launch_us served
summary=$logs/summary.txt
: >"$summary"
round=1
while [ "$round" -le "$rounds" ]; do
  for cand in "default X_UNUSED=1" "mix1 NCCL_GRAPH_MIXING_SUPPORT=1" \
      "fold NCCL_GRAPH_MIXING_SUPPORT=1 CGRT_FOLD_EVENT_LEAVES=1" "pdl_ag CGRTK_CP_PDL_AFTER_AG=1"; do
    name=${cand%% *}
    case " $cands " in *" $name "*) ;; *) continue ;; esac
    setting=${cand#* }
    log=$logs/bench_${round}_$name.log
    rc=0
    if [ -n "$trace" ]; then
      graphs=0
      [ "$trace" = graphs ] && graphs=1
      # The launcher forks its ranks before any CUDA call: the tracer starts in each child
      # (CGRT_TRACE_FORKED=1), since CUDA set up in the launcher does not survive the fork.
      # shellcheck disable=SC2086 # setting: one or more NAME=VALUE words
      timeout 300 env $setting LD_PRELOAD="$tracer" CGRT_TRACE_FORKED=1 \
        CGRT_TRACE_GRAPHS=$graphs CGRT_TRACE_OUT="$logs/trace_${round}_${name}_%p.csv" \
        "$cgrt" bench --workload cp --ranks 2 ${CP_ARGS:-} >"$log" 2>&1 || rc=$?
    else
      # shellcheck disable=SC2086
      env $setting timeout 300 "$cgrt" bench --workload cp --ranks 2 ${CP_ARGS:-} >"$log" 2>&1 || rc=$?
    fi
    if [ "$rc" -ne 0 ]; then
      status=1
      echo "$name, round $round: exit $rc ($setting); last lines of $log:"
      tail -5 "$log"
    fi
    # Table rows: cp scope rows/rank eager_us eager_host cgrt_us cgrt_host speedup ... bitwise served.
    awk -v n="$name" -v r="$round" '$1 == 2 && ($2 == "step" || $2 == "modules") {
        printf "%-8s %5s %8s %10s %10s %8s %8s %10s %10s %9s %7s\n", n, r, $2, $4, $6, $8, $(NF - 1),
          $5, $7, $9, $NF }' "$log" |
      tee -a "$summary"
    # the bench's figure per graph boundary (module scope over step scope), when it gives one
    grep 'per graph boundary' "$log" | sed "s/^/$name, round $round: /"
  done
  round=$((round + 1))
done
if [ -n "$trace" ]; then
  echo "== device time per ${trace%s} against the candidate's first run (traces: $logs/trace_*.csv)"
  for cand in $cands; do
    first=""
    for f in $(ls "$logs"/trace_*_"$cand"_*.csv 2>/dev/null | sort); do
      # the processes that ran no CUDA work (the launcher) wrote a header only
      [ "$(wc -l <"$f")" -gt 1 ] || continue
      if [ -z "$first" ]; then
        first=$f
        python3 tools/trace/trace_summary.py "$f" --top 8 | head -10
        # what a graph boundary costs: gaps inside graphs and between them (issue 42)
        [ "$trace" = kernels ] && python3 tools/trace/trace_summary.py "$f" --boundaries --top 4
      else
        python3 tools/trace/trace_summary.py "$first" --against "$f" --top 8 | sed -n '/ - /,$p'
      fi
    done
  done
fi
grep -q 'DIFFER' "$summary" && status=1
[ -s "$summary" ] || { echo "gpu-cp2: no cp 2 row was printed"; status=1; }
echo "== lowest speedup per candidate and scope (targets: module scope 1.50x, step scope 2.00x;" \
  "every row equal)"
awk '$3 == "step" || $3 == "modules" { s = $6; sub(/x$/, "", s); s += 0; k = $1 " " $3
    if (!(k in lo) || s < lo[k]) lo[k] = s; n[k]++ }
  END { for (k in lo) { split(k, p, " "); t = p[2] == "step" ? 2.0 : 1.5
    printf "%-8s %-8s %5.2fx over %d runs%s\n", p[1], p[2], lo[k], n[k],
      (lo[k] >= t ? "" : " (below target)") } }' "$summary" | sort
exit "$status"
