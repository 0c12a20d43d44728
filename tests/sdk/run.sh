#!/bin/sh
# The SDK as a third party meets it: install cgrt into a fresh prefix, build the template and the
# trace plugins and a host application from that prefix alone (CMake package and pkg-config),
# then run steps through each plugin; then the packaging (issue 40): the pc files and the CMake
# package, backend.h alone, a backend built with CMake and one with pkg-config (make; meson when it
# is there), each installed by default into cgrt's backend folder and loaded by name, and the
# installed documentation.
#   usage: run.sh BUILD_DIR SOURCE_DIR WORK_DIR DRIVER
set -eu
build=$1 src=$(cd "$2" && pwd) work=$3 driver=$4
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

# ---- Packaging (issue 40): what the installed files say, and a backend built from them alone,
# with CMake and with pkg-config, installed by default where cgrt looks, loaded by name.
pcdir=$(dirname "$(find "$prefix" -name cgrt-backend.pc)")
pcv() { env -u PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH="$pcdir" pkg-config "$@"; }
backends=$(cd "$(dirname "$(find "$prefix" -name libcgrt-backend-none.so)")" && pwd -P)
minor=$(sed -n 's/^#define CGRT_HOST_API_MINOR *\([0-9]*\).*/\1/p' "$prefix/include/cgrt/backend.h")
fail() {
  echo "FAILED: $*"
  exit 1
}
# cgrt-backend.pc: include flags and nothing to link (no -lcgrt, which meson's dependency() and
# pkg_check_modules(IMPORTED_TARGET) would link); cgrt.pc keeps -lcgrt for hosts. Both carry the
# backend folder, the host API minor and the backend ABI major.
[ -z "$(pcv --libs cgrt-backend)" ] || fail "cgrt-backend.pc links: $(pcv --libs cgrt-backend)"
pcv --cflags cgrt-backend | grep -q -- "-I" || fail "cgrt-backend.pc has no include flag"
pcv --libs cgrt | grep -q -- "-lcgrt" || fail "cgrt.pc does not link libcgrt"
for pkg in cgrt cgrt-backend; do
  [ "$(pcv --modversion $pkg)" = "$("$prefix/bin/cgrt" version | sed -n 's/^cgrt \([^ ]*\).*/\1/p')" ] ||
    fail "$pkg.pc's version $(pcv --modversion $pkg) is not the library's"
  [ "$(pcv --variable=host_api_minor $pkg)" = "$minor" ] ||
    fail "$pkg.pc: host_api_minor '$(pcv --variable=host_api_minor $pkg)', backend.h says $minor"
  [ "$(pcv --variable=backend_abi_major $pkg)" = 1 ] || fail "$pkg.pc: backend_abi_major"
  [ "$(cd "$(pcv --variable=backenddir $pkg)" && pwd -P)" = "$backends" ] ||
    fail "$pkg.pc: backenddir $(pcv --variable=backenddir $pkg) is not $backends"
done
# The CMake package: CGRT_HOST_API_MINOR, CGRT_BACKEND_ABI_MAJOR, CGRT_BACKEND_DIR, and
# cgrt_add_backend's INSTALL_DIR (under the backend project's prefix) and NO_INSTALL.
cmake -S "$src/tests/sdk/package" -B "$work/package" $gen -DCMAKE_PREFIX_PATH="$prefix" \
  -DWANT_MINOR="$minor" -DWANT_BACKEND_DIR="$backends" >"$work/out.txt" 2>&1 ||
  { cat "$work/out.txt"; fail "the CMake package's variables"; }
cmake --build "$work/package" >/dev/null
cmake --install "$work/package" --prefix "$work/package-prefix" >/dev/null
[ -f "$work/package-prefix/custom/backends/libcgrt-backend-custom.so" ] ||
  fail "cgrt_add_backend(INSTALL_DIR custom/backends) did not install under the project's prefix"
[ -z "$(find "$work/package-prefix" "$backends" -name 'libcgrt-backend-unlisted.so')" ] ||
  fail "cgrt_add_backend(NO_INSTALL) installed"
# backend.h declares only what a backend may use: the installed headers compile alone as C99 with
# cgrt-backend.pc's flags, and a call of a host function does not compile (before issue 40 it
# compiled and failed at link).
# shellcheck disable=SC2046
cc -std=c99 -pedantic -Wall -Wextra -Werror $(pcv --cflags cgrt-backend) -c \
  "$src/tests/sdk/header/backend_only.c" -o "$work/backend_only.o" ||
  fail "a backend's use of backend.h does not compile"
for f in cgrt_strerror cgrt_last_error cgrt_open cgrt_version; do
  # shellcheck disable=SC2046
  if cc -std=c99 -Werror=implicit-function-declaration $(pcv --cflags cgrt-backend) -DHOST_CALL=$f \
    -c "$src/tests/sdk/header/backend_only.c" -o "$work/host_call.o" >"$work/out.txt" 2>&1; then
    fail "a backend calling $f compiles: backend.h declares libcgrt's functions"
  fi
  grep -q "$f" "$work/out.txt" || { cat "$work/out.txt"; fail "$f: refused for another reason"; }
done
# CMake: plugins/template installed by default (cmake --install, whatever its own prefix) into the
# installed cgrt's backend folder; then `impl = template` loads it by name, no backend_path.
cmake --install "$work/template" --prefix "$work/template-prefix" >/dev/null
[ -f "$backends/libcgrt-backend-template.so" ] ||
  fail "cgrt_add_backend did not install the template into cgrt's backend folder $backends"
[ -z "$(find "$work/template-prefix" -name '*.so' 2>/dev/null)" ] ||
  fail "the template went under its project's prefix"
run "$host" template "$driver" /nonexistent WWCRRR
# A packager's choice: -DCGRT_BACKEND_INSTALL_DIR (relative) installs under the project's prefix.
cmake -S "$src/plugins/template" -B "$work/template-staged" $gen -DCMAKE_PREFIX_PATH="$prefix" \
  -DCGRT_BACKEND_INSTALL_DIR=lib/cgrt/backends >/dev/null
cmake --build "$work/template-staged" >/dev/null
cmake --install "$work/template-staged" --prefix "$work/staged" >/dev/null
[ -f "$work/staged/lib/cgrt/backends/libcgrt-backend-template.so" ] ||
  fail "-DCGRT_BACKEND_INSTALL_DIR=lib/cgrt/backends did not install under the project's prefix"
# pkg-config and make: knobs.c built with cgrt-backend.pc, installed into its backenddir, then
# loaded by name: its options read and checked as before, its init reading them back.
mkdir -p "$work/pc"
env -u PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH="$pcdir" make -s -C "$work/pc" \
  -f "$src/tests/sdk/pkgconfig/Makefile" NAME=knobs SRC="$src/tests/sdk/options/knobs.c" install \
  >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "make with cgrt-backend.pc"; }
[ -f "$backends/libcgrt-backend-knobs.so" ] || fail "make install did not put knobs in $backends"
run "$host" knobs "$driver" /nonexistent EEE '[knobs]\ndepth = 8'
grep -q "knobs: depth 8, order forward (forward)" "$work/out.txt"
printf '[cuda_graph]\nimpl = knobs\n[knobs]\ndepth = 65\n[runtime]\ndriver = host\n' >"$work/byname.ini"
run_fails "$cgrt" check "$work/byname.ini"
grep -q "byname.ini:4: \[knobs\] depth = 65: must be from 1 to 64" "$work/out.txt"
# Neither links libcgrt; `cgrt info` lists both beside the built-ins.
for so in template knobs; do
  if readelf -d "$backends/libcgrt-backend-$so.so" | grep NEEDED | grep -q libcgrt; then
    fail "libcgrt-backend-$so.so links libcgrt"
  fi
done
run "$cgrt" info
grep -q "^    template  *ABI 1" "$work/out.txt" || fail "cgrt info does not list the installed template"
grep -q "^    knobs  *ABI 1" "$work/out.txt" || fail "cgrt info does not list the installed knobs"
# Meson, when it is there: dependency('cgrt-backend') links nothing; installed into backenddir,
# the template (as libcgrt-backend-viameson.so) loads by name.
if command -v meson >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then
  env -u PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH="$pcdir" meson setup "$work/meson" \
    "$src/tests/sdk/meson" -Dsrc="$src/plugins/template/template.c" -Dname=viameson \
    >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "meson setup with cgrt-backend.pc"; }
  meson install -C "$work/meson" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; fail "meson"; }
  so=$backends/libcgrt-backend-viameson.so
  [ -f "$so" ] || fail "meson install did not put the backend in $backends"
  if readelf -d "$so" | grep NEEDED | grep -q libcgrt; then
    fail "dependency('cgrt-backend') linked libcgrt"
  fi
  run "$host" viameson "$driver" /nonexistent WWCRRR
  rm -f "$so"
fi
# A backend that declares no options, renamed and wrapped in trace, installed: the same steps.
cp "$backends/libcgrt-backend-template.so" "$backends/libcgrt-backend-renamed.so"
run "$host" renamed "$driver" /nonexistent WWCRRR
run "$host" trace "$driver" "$work/trace" WWCRRR '[trace]\ninner = renamed'
grep -q "trace: tracing backend 'template'" "$work/out.txt" ||
  { cat "$work/out.txt"; fail "trace around the renamed template"; }
rm -f "$backends/libcgrt-backend-renamed.so"
# The installed template and knobs by name (installed above): the conformance run passes.
run "$cgrt" test-backend template
grep -q "^[0-9]* passed, 0 failed" "$work/out.txt" || { cat "$work/out.txt"; fail "test-backend template"; }
# The installed documentation: the two guides, written from the README, and the design.
doc=$prefix/share/doc/cgrt
for f in backend-guide.md host-guide.md DESIGN.md; do
  [ -s "$doc/$f" ] || fail "$doc/$f is not installed"
done
grep -q "^## Writing a backend$" "$doc/backend-guide.md" || fail "backend-guide.md lacks its sections"
grep -q "^| $(pcv --modversion cgrt) | $minor |" "$doc/backend-guide.md" ||
  fail "backend-guide.md does not map this release to host API minor $minor"
grep -q "cgrt test-backend" "$doc/backend-guide.md" || fail "backend-guide.md: no cgrt test-backend"
grep -q "^## Using cgrt from a host$" "$doc/host-guide.md" || fail "host-guide.md lacks its sections"

# Its section is its table's name: a copy under another file name still reads [knobs].
cp "$knobs" "$work/libcgrt-backend-renamed.so"
run "$host" "$work/libcgrt-backend-renamed.so" "$driver" /nonexistent EEE '[knobs]\ndepth = 6'
grep -q "knobs: depth 6, order forward (forward)" "$work/out.txt"
# trace lends it its section: the options are read, checked and reach its init().
run "$host" trace "$driver" "$work/trace" EEE "[trace]\ninner = $knobs\n[knobs]\norder = reverse"
grep -q "knobs: depth 4, order reverse (reverse)" "$work/out.txt"
run_fails "$host" trace "$driver" "$work/trace" E "[trace]\ninner = $knobs\n[knobs]\ndepth = 65"
grep -q "\[knobs\] depth = 65: must be from 1 to 64" "$work/out.txt"
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
