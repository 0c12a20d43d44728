#!/bin/sh
# bench.sh's verdict on hand-made step times, without a GPU (ctest llmc_bench_verdict): a copy of
# bench.sh and paths.sh beside a fake run.sh that prints llm.c's step lines ("stepbits STEP ...
# MS") with the ms each round is given (FAKE_<run>: one figure per round), a fake cgrt and a fake
# nvidia-smi. Checks the rule for "slower than llm.c" (a backend is slower when both its median
# over all rounds and its best round are above llm.c's; per-process draws move one, a cost of
# cgrt's moves both) and that differing losses are a miss.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tests/hosts/llmc" "$tmp/build/bin" "$tmp/bin"
cp "$here/bench.sh" "$here/paths.sh" "$tmp/tests/hosts/llmc/"
printf '#!/bin/sh\necho "cgrt info: a fake"\n' >"$tmp/build/bin/cgrt"
printf '#!/bin/sh\necho "a fake GPU"\n' >"$tmp/bin/nvidia-smi"
cat >"$tmp/tests/hosts/llmc/run.sh" <<'FAKE'
#!/bin/sh
# run.sh BUILD CMD [RUN] ARGS...: builds pass; a run prints 30 steps at its round's ms
case "$2" in build*) exit 0 ;; esac
if [ "$2" = llmc2 ] || [ "$2" = llmc ]; then name=llmc; else name=$3; fi
count=$FAKE_DIR/count.$name
n=$(($(cat "$count" 2>/dev/null || echo 0) + 1))
echo "$n" >"$count"
eval "ms=\$(echo \"\$FAKE_$name\" | cut -d' ' -f$n)"
bits="1.0 2.0"
[ "$name" = "${FAKE_DIFFER:-}" ] && bits="1.5 2.0"
i=1
while [ "$i" -le 30 ]; do
  set -- $bits
  echo "stepbits $i loss $1 gnorm $2 x y z $ms"
  i=$((i + 1))
done
FAKE
chmod +x "$tmp/build/bin/cgrt" "$tmp/bin/nvidia-smi" "$tmp/tests/hosts/llmc/run.sh"
status=0
bench() { # expected exit, then the environment of one bench run; its output in $out
  want=$1
  shift
  rm -f "$tmp"/count.*
  out=$(env PATH="$tmp/bin:$PATH" FAKE_DIR="$tmp" LLMC_GPUS=2 ROUNDS=3 STEPS=30 SHAPES=d6,1,64 \
    "$@" sh "$tmp/tests/hosts/llmc/bench.sh" "$tmp/build" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAILED: exit $rc, not $want, with $*:"
    echo "$out"
    status=1
  fi
}
expect() { # OUTPUT TEXT: TEXT is in OUTPUT
  case "$1" in *"$2"*) ;; *) echo "FAILED: no \"$2\" in:"; echo "$1"; status=1 ;; esac
}
refuse() { # OUTPUT TEXT: TEXT is not in OUTPUT
  case "$1" in *"$2"*) echo "FAILED: \"$2\" in:"; echo "$1"; status=1 ;; esac
}

# session 40's first d6 run: none's median above llm.c's, its best round below: excused
bench 0 RUNS="llmc none local" FAKE_llmc="2.25 2.22 2.28" FAKE_none="2.72 2.53 2.18" \
  FAKE_local="1.91 1.91 1.91"
expect "$out" "none: median above llm.c's (2.530 against 2.250 ms), best round not (2.18 against 2.22): per-process draws, not slower"
expect "$out" "targets met in part: no run of RUNS (llmc none local) slower than llm.c"
# slower in every round: a miss
bench 3 RUNS="llmc none" FAKE_llmc="2.25 2.22 2.28" FAKE_none="2.40 2.35 2.30"
expect "$out" "targets MISSED; none slower than llm.c at d6 B1 T64 z0"
refuse "$out" "not slower"
# losses that differ: a miss, whatever the times
bench 3 RUNS="llmc local" FAKE_llmc="2.25 2.22 2.28" FAKE_local="1.91 1.91 1.91" \
  FAKE_DIFFER=local
expect "$out" "targets MISSED; local's losses differ from llm.c's at d6 B1 T64 z0"
[ "$status" -eq 0 ] && echo "bench.sh's verdicts: as expected"
exit "$status"
