#!/bin/sh
# The cgrt command misused (issue 38): it must answer with a sentence and an exit code, in time.
#   usage: expect.sh EXIT PATTERN COMMAND [ARG...]
# Runs COMMAND ARG... (at most 20 s) in a temporary folder holding what a misuse needs, named
# in the arguments by @T@: fifo (a FIFO), dir (a directory), nul.txt (a traffic line with a NUL
# byte inside: "3<NUL> 5000"), long.txt (a 2000-digit line), ok.txt (a valid traffic file).
# Passes when it exits EXIT, its stderr matches PATTERN (grep -E) and, for EXIT other than 0, it
# printed nothing on stdout (errors go to stderr).
set -u
want=$1 pattern=$2
shift 2
T=$(mktemp -d "${TMPDIR:-/tmp}/cgrt-misuse.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
mkfifo "$T/fifo" && mkdir "$T/dir" || exit 1
printf '3\000 5000\n' >"$T/nul.txt"
head -c 2000 /dev/zero | tr '\000' 1 >"$T/long.txt"
printf '3\n5\n' >"$T/ok.txt"

cmd=$1
shift
for a in "$@"; do # each @T@ replaced by the folder, the arguments otherwise kept as they are
  case $a in
  *@T@*) a=$(printf '%s' "$a" | sed "s|@T@|$T|g") ;;
  esac
  set -- "$@" "$a"
  shift
done
# Without timeout(1) a hang is caught by ctest's own TIMEOUT.
limit=
command -v timeout >/dev/null 2>&1 && limit="timeout 20"
rc=0
$limit "$cmd" "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
sed "s|$T|@T@|g" "$T/err" >&2
if [ "$rc" -eq 124 ] && [ -n "$limit" ]; then
  echo "FAILED: cgrt $* did not return within 20 s"
  exit 1
fi
if [ "$rc" -ne "$want" ]; then
  echo "FAILED: exit $rc, expected $want"
  exit 1
fi
if ! grep -Eq -e "$pattern" "$T/err"; then
  echo "FAILED: stderr does not match: $pattern"
  exit 1
fi
if [ "$want" -ne 0 ] && [ -s "$T/out" ]; then
  echo "FAILED: printed on stdout instead of stderr:"
  cat "$T/out"
  exit 1
fi
echo "ok: exit $rc"
exit 0
