#!/bin/sh
# The SDK as a third party meets it: install cgrt into a fresh prefix, build the template and the
# trace plugins and a host application from that prefix alone (CMake package and pkg-config),
# then run steps through each plugin.
#   usage: run.sh BUILD_DIR SOURCE_DIR WORK_DIR DRIVER
set -eu
build=$1 src=$2 work=$3 driver=$4
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
gen=""
command -v ninja >/dev/null && gen="-G Ninja"
for p in template trace; do
  cmake -S "$src/plugins/$p" -B "$work/$p" $gen -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/$p" >/dev/null
done
cmake -S "$src/tests/sdk/host" -B "$work/host" $gen -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/host" >/dev/null
host=$work/host/sdk_host

# pkg-config: the same host compiled by hand.
# (Our own prefix: no sysroot, whatever the environment says for other packages.)
pc="PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name cgrt.pc)")"
cflags=$(env -u PKG_CONFIG_SYSROOT_DIR "$pc" pkg-config --cflags cgrt)
libs=$(env -u PKG_CONFIG_SYSROOT_DIR "$pc" pkg-config --libs cgrt)
libdir=$(env -u PKG_CONFIG_SYSROOT_DIR "$pc" pkg-config --variable=libdir cgrt)
# shellcheck disable=SC2086
cc -std=c11 $cflags "$src/tests/sdk/host/host.c" -o "$work/host_pc" $libs -Wl,-rpath,"$libdir"

run() {
  rc=0
  "$@" >"$work/out.txt" 2>&1 || rc=$?
  if [ "$rc" -eq 77 ]; then
    cat "$work/out.txt"
    exit 77
  fi
  if [ "$rc" -ne 0 ]; then
    cat "$work/out.txt"
    echo "FAILED: $*"
    exit 1
  fi
}
# The template by path, then by name on backend_path: two warm-ups, capture, replays.
run "$host" "$work/template/libcgrt-backend-template.so" "$driver" /nonexistent WWCRRR
run "$work/host_pc" template "$driver" "$work/template" WWCRRR
# The installed built-ins are found beside the installed library.
run "$host" local "$driver" /nonexistent WWCRRR
# The same from C++ through the installed cgrt/cgrt.hpp (-Wall -Wextra -pedantic -Werror), when
# there is a C++ compiler.
if command -v "${CXX:-c++}" >/dev/null 2>&1; then
  cmake -S "$src/tests/sdk/cpp" -B "$work/cpp" $gen -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/cpp" >/dev/null
  run "$work/cpp/sdk_cpp_host" local "$driver" WWCRRR
fi
# The README's toy host (examples/toy_host), built from the installed prefix alone: one binary,
# five INI files that differ in their backend, the same results bit for bit, no fallback, and
# every phase run under every backend (transformer_engine's inference eagerly, by cgrt).
if [ "$driver" = host ]; then
  cmake -S "$src/examples/toy_host" -B "$work/toy" $gen -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/toy" >/dev/null
  first=""
  for conf in none local local_block transformer_engine full_iteration; do
    run "$work/toy/toy_host" "$src/examples/toy_host/conf/$conf.ini"
    results=$(grep '^results: ' "$work/out.txt")
    grep -q "fallbacks 0," "$work/out.txt" || { cat "$work/out.txt"; echo "FAILED: toy $conf fell back"; exit 1; }
    if [ "$conf" = transformer_engine ] &&
      ! grep -q "infer eager (by cgrt);.* run eagerly by cgrt 50$" "$work/out.txt"; then
      cat "$work/out.txt"
      echo "FAILED: transformer_engine's 50 infer steps were not run eagerly by cgrt"
      exit 1
    fi
    if [ -z "$first" ]; then
      first=$results
    elif [ "$results" != "$first" ]; then
      echo "FAILED: toy host under $conf: $results; under none: $first"
      exit 1
    fi
  done
  # The trace decorator around transformer_engine: its infer steps run eagerly, traced.
  printf '[cuda_graph]\nimpl = %s\nmodules = mlp\nwarmup_steps = 2\n[trace]\ninner = transformer_engine\n[runtime]\ndriver = host\n[host]\nnan_check = off\n' \
    "$work/trace/libcgrt-backend-trace.so" >"$work/toy_trace.ini"
  run "$work/toy/toy_host" "$work/toy_trace.ini"
  if [ "$(grep '^results: ' "$work/out.txt")" != "$first" ]; then
    cat "$work/out.txt"
    echo "FAILED: toy host under trace around transformer_engine differs from none"
    exit 1
  fi
  grep -q "trace: 'transformer_engine' has no form for infer steps: they run eagerly" "$work/out.txt"
fi
# trace around local: the same behaviour, and every step and call in the log.
run "$host" trace "$driver" "$work/trace" WWCRRR '[trace]\ninner = local\n[cuda_graph]\ninference_scope = layer'
grep -q "trace: tracing backend 'local'" "$work/out.txt"
grep -q "trace: step 2 train, 8 tokens (padded 8): capture" "$work/out.txt"
grep -q "trace:   layer0.mlp fwd mb0 key 1: replay" "$work/out.txt"
# trace refuses a missing inner backend with the reason.
run_fails() {
  if "$@" >"$work/out.txt" 2>&1; then
    echo "FAILED: expected a refusal: $*"
    exit 1
  fi
}
run_fails "$host" trace "$driver" "$work/trace" W '[trace]\ninner = nosuch'
grep -q "inner = nosuch: backend 'nosuch' not found" "$work/out.txt"
# A third-party backend declaring two options ([knobs] depth 1..64, order forward|reverse), built
# out of tree: `cgrt check` reads, checks and prints them as it does the core's own keys.
cmake -S "$src/tests/sdk/options" -B "$work/options" $gen -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/options" >/dev/null
knobs=$work/options/libcgrt-backend-knobs.so
cgrt=$prefix/bin/cgrt
knobs_ini() {
  printf '[cuda_graph]\nimpl = %s\n[knobs]\n%s\n[runtime]\ndriver = host\nlog = warn\n' \
    "$knobs" "$2" >"$work/$1.ini"
}
knobs_ini knobs 'order = Reverse'
run "$cgrt" check "$work/knobs.ini"
grep -q "knobs.ini: valid" "$work/out.txt"
# printed in the declared order, the given value normalized, the other's default
tr '\n' '|' <"$work/out.txt" | grep -q "|\[knobs\]|depth = 4|order = reverse|"
knobs_ini typo 'dpeth = 8'
run_fails "$cgrt" check "$work/typo.ini"
grep -q "typo.ini:4: unknown key 'dpeth' in \[knobs\]; did you mean 'depth'?" "$work/out.txt"
knobs_ini range 'depth = 65'
run_fails "$cgrt" check "$work/range.ini"
grep -q "range.ini:4: \[knobs\] depth = 65: must be from 1 to 64 (graphs kept per layer)" \
  "$work/out.txt"
knobs_ini badenum 'order = backwards'
run_fails "$cgrt" check "$work/badenum.ini"
grep -q "badenum.ini:4: \[knobs\] order = 'backwards': expected one of forward, reverse" \
  "$work/out.txt"
# init() reads the values back (get_int), the default where none was given.
run "$host" "$knobs" "$driver" /nonexistent EEE '[knobs]\ndepth = 8'
grep -q "knobs: depth 8, order forward (forward)" "$work/out.txt"
# The installed conformance run (issue 40): the template by path, the backend with options, and
# trace around local by name on the backend path; every scenario passes (on the host driver, and
# on the cuda driver too when a GPU is there).
conforms() {
  run "$cgrt" test-backend "$@"
  grep -q "^[0-9]* passed, 0 failed" "$work/out.txt" ||
    { cat "$work/out.txt"; echo "FAILED: cgrt test-backend $*"; exit 1; }
}
conforms "$work/template/libcgrt-backend-template.so"
conforms "$knobs"
printf '[cuda_graph]\nbackend_path = %s\ninference_scope = layer\nwarmup_steps = 2\n[trace]\ninner = local\n' \
  "$work/trace" >"$work/trace_local.ini"
conforms trace "$work/trace_local.ini"
# The Python package installed beside the library finds that library (when python3 is there).
if command -v python3 >/dev/null 2>&1; then
  got=$(env -u CGRT_LIBRARY PYTHONPATH="$(dirname "$(find "$prefix" -path '*/python/cgrt/_install.py')")/.." \
    python3 -c 'import cgrt; print(cgrt.library_path())')
  case "$got" in
  "$prefix"/*) ;;
  *)
    echo "FAILED: the installed Python package loaded $got, not the library in $prefix"
    exit 1
    ;;
  esac
fi
echo "sdk: ok ($driver driver)"
