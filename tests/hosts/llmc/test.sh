#!/bin/sh
# The llm.c port on the GPU (label gpu). For each shape (d12 B4 T64, d6 B1 T16), 20 steps of
# unpatched llm.c, then of the port under each backend, the patched binary's own step (off) and
# the naive body:
# - every step's loss and grad norm are bitwise unpatched llm.c's (stepbits.c prints them exactly);
# - none runs every step eagerly; local, transformer_engine and full_iteration replay every step
#   after warm-up (3 steps) and capture (1), with no fallback; full_iteration with one graph;
# - naive (llm.c's own gpt2_forward, gpt2_backward_and_reduce, gpt2_calculate_grad_norm and
#   gpt2_update as a full_iteration body): the capture fails safely, diagnose names cudaMemcpy and
#   cudaDeviceSynchronize and the llm.c function that called them, every step runs eagerly.
#   usage: test.sh [BUILD_DIR]   (see run.sh for LLMC_DIR, LLMC_WORK)
# Exit 0 passed, 1 failed, 77 skipped with the reason (no llm.c tree, no CUDA device, no nvcc).
# shellcheck disable=SC2015 # A && B || fail: A and B are both tests
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=paths.sh
. "$here/paths.sh"
steps=20
warmup=3 # warmup_steps of conf/*.ini

if "$build/bin/cgrt" info 2>&1 | grep -q "no CUDA device"; then
  echo "SKIPPED: no CUDA device ($("$build/bin/cgrt" info 2>&1 | grep "no CUDA device"))"
  exit 77
fi
sh "$here/run.sh" "$build" build # exits 77 with its reason without LLMC_DIR or nvcc
out=$work/test
rm -rf "$out"
mkdir -p "$out"
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# bits FILE: one line per step, "STEP LOSS NORM" as exact hex floats
bits() { grep '^stepbits ' "$1" | awk '{ print $2, $4, $6 }'; }

# summary FILE: the port's line of cgrt statistics
summary() { grep '^cgrt: backend ' "$1" || true; }

for shape in "d12 4 64" "d6 1 16"; do
  # shellcheck disable=SC2086
  set -- $shape
  tag=$1-b$2-t$3
  args="-e $1 -b $2 -t $3 -x $steps"
  # shellcheck disable=SC2086
  sh "$here/run.sh" "$build" llmc $args >"$out/$tag.llmc.txt" 2>&1 || fail "$tag: unpatched llm.c exited $? (see $out/$tag.llmc.txt)"
  bits "$out/$tag.llmc.txt" >"$out/$tag.llmc.bits"
  [ "$(wc -l <"$out/$tag.llmc.bits")" -eq "$steps" ] || fail "$tag: unpatched llm.c printed $(wc -l <"$out/$tag.llmc.bits") steps, not $steps"
  for conf in none local transformer_engine full_iteration off naive; do
    log=$out/$tag.$conf.txt
    # shellcheck disable=SC2086
    if ! sh "$here/run.sh" "$build" port $conf $args >"$log" 2>&1; then
      fail "$tag $conf: the port exited with an error (see $log)"
      continue
    fi
    bits "$log" >"$out/$tag.$conf.bits"
    if ! cmp -s "$out/$tag.llmc.bits" "$out/$tag.$conf.bits"; then
      fail "$tag $conf: losses or grad norms differ from unpatched llm.c's (step loss norm; < llm.c, > port):"
      diff "$out/$tag.llmc.bits" "$out/$tag.$conf.bits" | head -6
      continue
    fi
    s=$(summary "$log")
    # "cgrt: backend B | steps N: eager E, warmup W, capture C, replay R | ... | graphs built G, fallbacks F, findings D"
    # shellcheck disable=SC2046
    set -- $(echo "$s" | sed -E 's/.*steps ([0-9]+): eager ([0-9]+), warmup ([0-9]+), capture ([0-9]+), replay ([0-9]+) .*graphs built ([0-9]+), fallbacks ([0-9]+), findings ([0-9]+).*/\1 \2 \3 \4 \5 \6 \7 \8/')
    case "$conf" in
    off)
      grep -q "cgrt port: off (LLMC_CGRT=0)" "$log" || fail "$tag off: the port did not say it was off"
      [ -z "$s" ] || fail "$tag off: cgrt ran: $s"
      ;;
    none)
      [ "$#" -eq 8 ] && [ "$1" -eq "$steps" ] && [ "$2" -eq "$steps" ] && [ "$7" -eq 0 ] ||
        fail "$tag none: expected $steps eager steps and no fallback: $s"
      ;;
    local | transformer_engine | full_iteration)
      [ "$#" -eq 8 ] && [ "$1" -eq "$steps" ] && [ "$3" -eq "$warmup" ] && [ "$4" -eq 1 ] &&
        [ "$5" -eq $((steps - warmup - 1)) ] && [ "$7" -eq 0 ] ||
        fail "$tag $conf: expected $warmup warm-up steps, 1 capture, $((steps - warmup - 1)) replays, no fallback: $s"
      if [ "$conf" = full_iteration ] && [ "${6:-}" != 1 ]; then
        fail "$tag full_iteration: expected one graph for the whole step: $s"
      fi
      ;;
    naive)
      grep -q "naive body" "$log" || fail "$tag naive: the port did not run the naive body"
      [ "$#" -eq 8 ] && [ "$5" -eq 0 ] && [ "$7" -ge 1 ] ||
        fail "$tag naive: expected failed captures (fallbacks) and no replay: $s"
      grep -Eq '^cgrt: finding [a-z_]+: cudaMemcpy \(.*gpt2_forward' "$log" ||
        fail "$tag naive: diagnose did not name cudaMemcpy called from gpt2_forward"
      grep -Eq '^cgrt: finding [a-z_]+: cudaDeviceSynchronize \(.*gpt2_(forward|backward_and_reduce|update)' "$log" ||
        fail "$tag naive: diagnose did not name cudaDeviceSynchronize and the llm.c function that called it"
      ;;
    esac
    echo "$tag $conf: $steps steps bitwise equal to llm.c${s:+; $s}"
  done
done
grep -h "^cgrt: finding" "$out"/*.naive.txt | sort -u || true
if [ "$failures" -ne 0 ]; then
  echo "FAILED: $failures check(s); logs in $out"
  exit 1
fi
echo "passed: logs in $out"
