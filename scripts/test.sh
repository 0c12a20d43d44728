#!/bin/sh
# Sets up a fresh Debian machine and runs the whole test suite (unit, CLI, SDK, format, and the GPU
# tests, which skip with their reason when there is no GPU), then the unit suite in a build outside
# the checkout, under ASan+UBSan, the thread tests under TSan, and the config fuzzer for a bounded
# time. The README's test command; CI runs it.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake -S . -B build -G Ninja -DCGRT_WERROR=ON
cmake --build build
ctest --test-dir build --output-on-failure

# The unit suite again in a build directory outside the checkout (host driver), as CMake recommends
# and packagers configure it: nothing may assume the build sits in the checkout. One folder per
# checkout, so that a rerun builds incrementally.
oot="${TMPDIR:-/tmp}/cgrt-build-oot-$(pwd | cksum | cut -d' ' -f1)"
cmake -S . -B "$oot" -G Ninja -DCGRT_WITH_CUDA=OFF -DCGRT_WERROR=ON
cmake --build "$oot"
ctest --test-dir "$oot" -L unit --output-on-failure

# The unit suite again under AddressSanitizer and UndefinedBehaviorSanitizer (host driver).
cmake -S . -B build-asan -G Ninja -DCGRT_WITH_CUDA=OFF -DCGRT_SANITIZE=ON -DCGRT_WERROR=ON
cmake --build build-asan
ctest --test-dir build-asan -L unit --output-on-failure

# The thread tests under ThreadSanitizer (host driver): one runtime driven from two threads; the
# capture gate's threads; configurations parsed on many threads at once.
cmake -S . -B build-tsan -G Ninja -DCGRT_WITH_CUDA=OFF -DCGRT_SANITIZE_THREAD=ON -DCGRT_WERROR=ON
cmake --build build-tsan --target test_misuse test_gate test_config cgrt_backends cgrt_fixtures
ctest --test-dir build-tsan -R '^test_(misuse|gate|config)$' --output-on-failure

# The configuration loader under libFuzzer for a bounded time (CGRT_FUZZ_SECONDS, default 60).
CC=clang cmake -S . -B build-fuzz -G Ninja -DCGRT_WITH_CUDA=OFF -DCGRT_FUZZ=ON
cmake --build build-fuzz --target fuzz_config
ctest --test-dir build-fuzz -L fuzz --output-on-failure
