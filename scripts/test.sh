#!/bin/sh
# Sets up a fresh Debian machine and runs the whole test suite (unit, format, and the GPU tests,
# which skip with their reason when there is no GPU). The README's test command; CI runs it.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake -S . -B build -G Ninja -DCGRT_WERROR=ON
cmake --build build
ctest --test-dir build --output-on-failure
