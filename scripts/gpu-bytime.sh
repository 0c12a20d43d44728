#!/bin/sh
# Issue 43's GPU runs in one command (buckets chosen by time, `[local] by_time`):
#   1. decode benches, one process per GPU at a time (the GPUs CUDA_VISIBLE_DEVICES names, else
#      all), every GPU running each configuration of
#      CONFS (default "local_padded local": conf/NAME.ini, and NAME_padded a copy of conf/NAME.ini
#      with `[local] by_time = off`, the padded buckets by_time is judged against since it became
#      the default in session 41) PROCS times (default 2), in turns whose
#      order alternates between GPUs (`cgrt bench conf/NAME.ini --workload decode --json`): launch-
#      bound eager draws a speed per process, so the targets are judged over several;
#   2. the shipped traffic replays (TRAFFIC=1, the default): traffic/bimodal.txt under
#      conf/local_bytime.ini, traffic/decode_small_buckets.txt under conf/local_block_budget.ini
#      (by_time on by default, 4 exact-size buckets), each against its padded-token plan and eager
#      (the bench's own rows), on the last two GPUs beside nothing else (after the decode benches),
#      each after SETTLE (default 2) untimed rounds of its runs (`--settle`);
#   3. the step path (DISPATCH=3 runs, 0 for none): `cgrt bench conf/local_block.ini --tokens 1`
#      (by_time on, the default), the same with by_time off, and the default with --host-stream
#      (runtimes on a stream handed at open: no ordering with the legacy stream), in turn, their
#      "replay dispatch" lines, and the bench's own timing of the ordering calls alone (four, as
#      on cgrt's stream; two legacy-stream records beside a blocking stream; the launch alone on
#      the legacy stream and on a blocking stream) in ordering.txt.
# Then scripts/bytime_summary.py prints the figures beside the targets (no row more than 2%
# slower than eager, static and fresh; traffic totals no worse than the padded-token plan; the
# step path at most 0.5 us above cudaGraphLaunch).
#   usage: scripts/gpu-bytime.sh [BUILD_DIR [LOG_DIR]]   (BUILD_DIR default: build, built with CUDA;
#   LOG_DIR default: BUILD_DIR/gpu-bytime). Exit: bytime_summary.py's (0: every run and log fine,
#   every row bitwise; 1: otherwise), 77 without a GPU.
set -u
cd "$(dirname "$0")/.." || exit 1
build=${1:-build}
logs=${2:-$build/gpu-bytime}
cgrt=$build/bin/cgrt
confs=${CONFS:-"local_padded local"}
procs=${PROCS:-2}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${gpus:-0}" -lt 1 ]; then
  echo "SKIPPED: no GPU (nvidia-smi -L)"
  exit 77
fi
[ -x "$cgrt" ] || { echo "gpu-bytime: $cgrt not found: build first (cmake --build $build)"; exit 1; }
rm -rf "$logs"
mkdir -p "$logs"
status=0
# conf_of NAME: the file of a CONFS entry: conf/NAME.ini, or for NAME_padded a copy of
# conf/NAME.ini with `[local] by_time = off` (its own by_time line changed, else a section added)
conf_of() {
  case $1 in
  *_padded)
    src=conf/${1%_padded}.ini dst=$logs/$1.ini
    if grep -q '^by_time *=' "$src"; then
      sed 's/^by_time *=[^;]*/by_time = off /' "$src" >"$dst"
    else
      { cat "$src"; printf '\n[local]\nby_time = off\n'; } >"$dst"
    fi
    echo "$dst"
    ;;
  *) echo "conf/$1.ini" ;;
  esac
}

# The GPUs it uses: those CUDA_VISIBLE_DEVICES names (so that another job can have the others:
# session 40 ran this beside a bench on GPUs it then shared), else every GPU nvidia-smi lists.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  ids=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' ' ')
else
  ids=$(seq 0 $((gpus - 1)) | tr '\n' ' ')
fi
ids=$(echo "$ids" | tr -s ' ' | sed 's/^ //; s/ $//')
gpus=$(echo "$ids" | wc -w)
first=$(echo "$ids" | cut -d' ' -f1)

# 1. decode: on GPU g, PROCS rounds of CONFS, in reverse order on every other GPU
echo "== decode benches: $gpus GPU(s) ($ids), each running $confs $procs time(s) (logs: $logs/dec_*)"
k=0
for g in $ids; do
  k=$((k + 1))
  (
    order=$confs
    [ $((k % 2)) -eq 0 ] && order=$(echo "$confs" | tr ' ' '\n' | sed '1!G;h;$!d' | tr '\n' ' ')
    i=0 r=0
    while [ "$r" -lt "$procs" ]; do
      for c in $order; do
        i=$((i + 1))
        f=$(conf_of "$c")
        CUDA_VISIBLE_DEVICES=$g "$cgrt" bench "$f" --workload decode --json \
          >"$logs/dec_g${g}_${i}_$c.json" 2>"$logs/dec_g${g}_${i}_$c.err" ||
          echo "gpu-bytime: GPU $g, $f: exit $? (see $logs/dec_g${g}_${i}_$c.err)"
      done
      r=$((r + 1))
    done
  ) &
done
wait

# 2. traffic
if [ "${TRAFFIC:-1}" = 1 ]; then
  echo "== traffic replays (logs: $logs/traffic_*)"
  g1=$(echo "$ids" | tr ' ' '\n' | tail -1)
  g2=$(echo "$ids" | tr ' ' '\n' | tail -2 | head -1)
  # --settle: untimed rounds of every run first, past a process's slow first graphed runtimes
  # (docs/decisions.md, issue 43, session 47); SETTLE=0 for the runs as before
  CUDA_VISIBLE_DEVICES=$g1 "$cgrt" bench conf/local_bytime.ini --traffic traffic/bimodal.txt \
    --settle "${SETTLE:-2}" >"$logs/traffic_bimodal.txt" 2>&1 &
  p1=$!
  [ "$g1" = "$g2" ] && wait "$p1"
  CUDA_VISIBLE_DEVICES=$g2 "$cgrt" bench conf/local_block_budget.ini \
    --traffic traffic/decode_small_buckets.txt --settle "${SETTLE:-2}" \
    >"$logs/traffic_decode_small_buckets.txt" 2>&1 ||
    status=1
  wait "$p1" || status=1
fi

# 3. the step path
n=${DISPATCH:-3}
if [ "$n" -gt 0 ]; then
  echo "== step path: $n run(s) each (log: $logs/dispatch.txt)"
  padded=$(conf_of local_block_padded)
  i=1
  # each run's whole output in dispatch_RUN_K.txt; its replay dispatch line in dispatch.txt, its
  # line on the ordering calls alone (four, or two beside a blocking stream) in ordering.txt
  : >"$logs/ordering.txt"
  while [ "$i" -le "$n" ]; do
    k=0
    # the last: on a stream handed at open, so no ordering with the legacy stream (its share)
    for c in "$padded" conf/local_block.ini conf/local_block.ini+host-stream; do
      k=$((k + 1))
      out=$logs/dispatch_${i}_$k.txt
      case $c in
      *+host-stream) CUDA_VISIBLE_DEVICES=$first "$cgrt" bench "${c%+host-stream}" --tokens 1 \
        --host-stream >"$out" 2>&1 ;;
      *) CUDA_VISIBLE_DEVICES=$first "$cgrt" bench "$c" --tokens 1 >"$out" 2>&1 ;;
      esac
      echo "$i $c: $(grep 'replay dispatch' "$out")"
      echo "$i $c: $(grep 'ordering with the legacy stream' "$out")" >>"$logs/ordering.txt"
    done
    i=$((i + 1))
  done >"$logs/dispatch.txt"
  cat "$logs/ordering.txt"
fi

python3 scripts/bytime_summary.py "$logs" || status=1
exit "$status"
