# Sourced by test.sh and bench.sh after `here` is set: the checkout (root), the cgrt
# build they use (BUILD_DIR, their first argument, else CGRT_BUILD, else build/; relative to the
# checkout) and the folder run.sh works in (LLMC_WORK, exported for run.sh).
# shellcheck shell=sh disable=SC2034,SC2154 # here comes from, and root, build, work go to, the sourcing script
root=$(cd "$here/../../.." && pwd)
build=${1:-${CGRT_BUILD:-build}}
case "$build" in /*) ;; *) build=$root/$build ;; esac
work=${LLMC_WORK:-$build/llmc-host}
export LLMC_WORK="$work"
