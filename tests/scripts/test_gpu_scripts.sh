#!/bin/sh
# The GPU scripts' own logic, without a GPU (label unit): a fake nvidia-smi listing four GPUs and a
# fake cgrt that records its arguments.
#  - scripts/visible-gpus.sh counts what CUDA will show: CUDA_VISIBLE_DEVICES honoured (session 41:
#    test2.sh trusted nvidia-smi -L and ran two ranks on one visible GPU);
#  - tests/hosts/llmc/test2.sh skips (77) with one GPU visible;
#  - scripts/gpu-bytime.sh benches NAME_padded as a copy of conf/NAME.ini with by_time = off (a
#    section added, or the file's own by_time line changed), the shipped configuration as it is,
#    and the step path with and without --host-stream.
# Exit 0 when all hold, 1 with the first that does not.
#   usage: sh tests/scripts/test_gpu_scripts.sh [CGRT]   (CGRT: the cgrt command, to check the
#   configurations gpu-bytime.sh writes)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cgrt=${1:-}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/bin" "$t/build/bin"
# shellcheck disable=SC2016 # the fakes' own $i and $* expand when they run
printf '#!/bin/sh\nfor i in 0 1 2 3; do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; done\n' \
  >"$t/bin/nvidia-smi"
printf '#!/bin/sh\necho "$*" >>"%s/calls"\necho "{}"\n' "$t" >"$t/build/bin/cgrt"
chmod +x "$t/bin/nvidia-smi" "$t/build/bin/cgrt"
fail() {
  echo "FAILED: $*"
  exit 1
}

# visible-gpus.sh
check_visible() { # VALUE|unset EXPECTED
  if [ "$1" = unset ]; then
    got=$(env -u CUDA_VISIBLE_DEVICES PATH="$t/bin:$PATH" sh "$root/scripts/visible-gpus.sh")
  else
    got=$(CUDA_VISIBLE_DEVICES="$1" PATH="$t/bin:$PATH" sh "$root/scripts/visible-gpus.sh")
  fi
  [ "$got" = "$2" ] || fail "visible-gpus.sh with CUDA_VISIBLE_DEVICES=$1: $got, expected $2"
}
check_visible unset 4
check_visible "" 0
check_visible 0 1
check_visible 2,3 2
check_visible -1 0
check_visible 1,-1,2 1
check_visible 0,1,2,3,4,5 4
mkdir -p "$t/nosmi" # a PATH with the tools the script uses but no nvidia-smi
for tool in grep tr; do ln -s "$(command -v "$tool")" "$t/nosmi/$tool"; done
got=$(PATH="$t/nosmi" CUDA_VISIBLE_DEVICES=0 /bin/sh "$root/scripts/visible-gpus.sh")
[ "$got" = 0 ] || fail "visible-gpus.sh without nvidia-smi: $got, expected 0"

# test2.sh with one GPU visible of four
out=$(CUDA_VISIBLE_DEVICES=0 PATH="$t/bin:$PATH" LLMC_WORK="$t/w" \
  sh "$root/tests/hosts/llmc/test2.sh" "$t/build" 2>&1)
rc=$?
[ "$rc" = 77 ] || fail "test2.sh with one visible GPU: exit $rc, expected 77 ($out)"
echo "$out" | grep -q "SKIPPED: needs two GPUs, 1 visible" || fail "test2.sh said: $out"

# gpu-bytime.sh
logs=$t/logs
(cd "$root" && CUDA_VISIBLE_DEVICES=1 PROCS=1 TRAFFIC=0 DISPATCH=1 PATH="$t/bin:$PATH" \
  sh scripts/gpu-bytime.sh "$t/build" "$logs" >"$t/out" 2>&1)
grep -q "^bench $logs/local_padded.ini --workload decode --json$" "$t/calls" ||
  fail "gpu-bytime.sh did not bench local_padded: $(cat "$t/calls")"
grep -q "^bench conf/local.ini --workload decode --json$" "$t/calls" ||
  fail "gpu-bytime.sh did not bench conf/local.ini: $(cat "$t/calls")"
grep -q "^bench conf/local_block.ini --tokens 1 --host-stream$" "$t/calls" ||
  fail "gpu-bytime.sh's step path has no --host-stream run: $(cat "$t/calls")"
grep -q "^bench $logs/local_block_padded.ini --tokens 1$" "$t/calls" ||
  fail "gpu-bytime.sh's step path has no by_time-off run: $(cat "$t/calls")"
if [ "$(wc -l <"$logs/ordering.txt")" != 3 ] || [ "$(wc -l <"$logs/dispatch.txt")" != 3 ]; then
  fail "gpu-bytime.sh's step path: $(cat "$logs/dispatch.txt" "$logs/ordering.txt")"
fi
tail -2 "$logs/local_padded.ini" | tr '\n' ' ' | grep -q "^\[local\] by_time = off $" ||
  fail "local_padded.ini does not end with [local] by_time = off:" \
    "$(tail -3 "$logs/local_padded.ini")"
# a configuration with a by_time line of its own gets that line turned off
: >"$t/calls"
(cd "$root" && CONFS=local_bytime_padded CUDA_VISIBLE_DEVICES=1 PROCS=1 TRAFFIC=0 DISPATCH=0 \
  PATH="$t/bin:$PATH" sh scripts/gpu-bytime.sh "$t/build" "$t/logs2" >"$t/out" 2>&1)
f=$t/logs2/local_bytime_padded.ini
if [ "$(grep -c '^by_time' "$f")" != 1 ] || ! grep -q '^by_time = off' "$f"; then
  fail "local_bytime_padded.ini: $(grep -n by_time "$f")"
fi
diff "$root/conf/local_bytime.ini" "$f" | grep -c '^[<>]' | grep -qx 2 ||
  fail "local_bytime_padded.ini differs from conf/local_bytime.ini in more than its by_time line"
# the traffic replays settle twice by default (--settle 2), SETTLE=0 not at all
for settle in default 0; do
  : >"$t/calls"
  (if [ $settle = 0 ]; then export SETTLE=0; else unset SETTLE; fi
    cd "$root" && CONFS=local CUDA_VISIBLE_DEVICES=1 PROCS=1 TRAFFIC=1 DISPATCH=0 \
      PATH="$t/bin:$PATH" sh scripts/gpu-bytime.sh "$t/build" "$t/logs3" >"$t/out" 2>&1)
  want=$([ $settle = 0 ] && echo 0 || echo 2)
  for trace in bimodal decode_small_buckets; do
    grep -q "^bench .* --traffic traffic/$trace.txt --settle $want\$" "$t/calls" ||
      fail "gpu-bytime.sh's $trace replay without --settle $want (SETTLE $settle):" \
        "$(cat "$t/calls")"
  done
done
# both copies are valid configurations (the cgrt command, when given: ctest passes it)
if [ -n "$cgrt" ]; then
  for c in "$f" "$logs/local_padded.ini" "$logs/local_block_padded.ini"; do
    "$cgrt" check "$c" >"$t/check" 2>&1 || fail "cgrt check $c: $(cat "$t/check")"
  done
fi
echo "gpu scripts: all checks passed"
