#!/bin/sh
# Installs the Debian packages cgrt builds and tests with (skips those already installed); python3
# and python3-pytest run the Python package's tests (python/). libhwloc-plugins gives hwloc its
# full XML parser (libxml2), which test_core_share's hand-written topologies need: without it
# hwloc's minimal parser refuses them (a fresh machine, session 51).
# The CUDA Toolkit and NCCL are optional: when /usr/local/cuda (or nvcc on PATH) is present the
# cuda driver and the GPU tests are built too; without it the GPU tests report why they skip.
set -eu
pkgs="build-essential cmake ninja-build pkg-config libinih-dev libcmocka-dev libhwloc-dev libhwloc-plugins clang-format
  clang libclang-rt-dev python3 python3-pytest"
missing=""
for p in $pkgs; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing
