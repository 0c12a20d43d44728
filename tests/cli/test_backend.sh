#!/bin/sh
# `cgrt test-backend` as CI runs it (issue 40): its exit code and the lines it prints.
#   usage: test_backend.sh EXIT N PATTERN_1 ... PATTERN_N CGRT ARG...
# Passes when CGRT ARG... exits EXIT and its output matches every PATTERN (grep -E); with EXIT 0
# no line may start with FAIL. The output is shown in any case.
set -u
want=$1 n=$2
shift 2
patterns=$(mktemp "${TMPDIR:-/tmp}/cgrt-test-backend.XXXXXX") || exit 1
out=$patterns.out
trap 'rm -f "$patterns" "$out"' EXIT
i=0
while [ "$i" -lt "$n" ]; do
  printf '%s\n' "$1" >>"$patterns"
  shift
  i=$((i + 1))
done
rc=0
"$@" >"$out" 2>&1 || rc=$?
cat "$out"
if [ "$rc" -ne "$want" ]; then
  echo "FAILED: exit $rc, expected $want"
  exit 1
fi
if [ "$want" -eq 0 ] && grep -q '^FAIL' "$out"; then
  echo "FAILED: a scenario failed"
  exit 1
fi
while IFS= read -r p; do
  if ! grep -Eq -e "$p" "$out"; then
    echo "FAILED: no line matches: $p"
    exit 1
  fi
done <"$patterns"
echo "ok: exit $rc"
