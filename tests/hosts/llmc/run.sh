#!/bin/sh
# llm.c's GPT-2 trainer (karpathy/llm.c, not written for cgrt) through cgrt.
#
#   run.sh [BUILD_DIR] build
#       copies LLMC_DIR twice into the work dir: llmc/ gets only fixes.patch (two fixes of llm.c's
#       own: "unpatched llm.c"), port/ fixes.patch and then cgrt.patch; builds train_gpt2cu in
#       both (make train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0), port/ against the libcgrt
#       of BUILD_DIR; builds stepbits.so; writes the synthetic token shards (gen_shards.py).
#   run.sh [BUILD_DIR] build2
#       the same for several GPUs: llmc2/ and port2/, built with llm.c's NCCL data parallelism (make
#       train_gpt2cu NO_USE_MPI=1 USE_CUDNN=0; llm.c's Makefile must find NCCL, which it asks dpkg).
#   run.sh [BUILD_DIR] llmc [llm.c options]          runs unpatched llm.c
#   run.sh [BUILD_DIR] port CONFIG [llm.c options]   runs the port under CGRT_CONFIG=CONFIG:
#       none | local | transformer_engine | full_iteration (conf/NAME.ini), a path to an INI file,
#       naive (full_iteration with LLMC_CGRT_NAIVE=1: llm.c's own step functions as the body) or
#       off (LLMC_CGRT=0: the patched binary runs llm.c's own step)
#   run.sh [BUILD_DIR] llmc2 [llm.c options]         unpatched llm.c on LLMC_GPUS GPUs (default 2)
#   run.sh [BUILD_DIR] port2 CONFIG [llm.c options]  the port on LLMC_GPUS GPUs
#       One process per GPU, rank R on GPU R (-pn N -pr R), the NCCL id exchanged through a fresh
#       folder (-pi fs -pf DIR). Rank 0's output comes to stdout as it is; the other ranks' follow
#       it, each line prefixed "rankR| ". Every rank runs under LLMC_RANK_TIMEOUT seconds (default
#       600, then killed); the exit status is the first failing rank's (124: timed out).
#
# Runs start in the copy's directory with the shards, no sampling and one validation batch
# (-i -j -s 0 -v 100000 -m 1), then the options given: e.g. -e d12 -b 4 -t 64 -x 20. Every step
# also prints a "stepbits" line (stepbits.c): the loss and grad norm exactly, and the step's time.
#
# BUILD_DIR: the argument, else $CGRT_BUILD, else build (relative to the repository root).
# LLMC_DIR: the llm.c tree (default: ../shared/hosts/llm.c from the repository root, else
# shared/hosts/llm.c inside it).
# LLMC_WORK: the work dir (default: BUILD_DIR/llmc-host). LLMC_SM: the compute capability to build
# for (default: llm.c's Makefile asks nvidia-smi; 90 where there is none). LLMC_PRELOAD: more
# libraries for the trainer's LD_PRELOAD, e.g. BUILD_DIR/lib/libcgrt-trace.so (tools/trace/).
# LLMC_PIN: a CPU list the trainer runs on (taskset -c), e.g. 4-5; default: wherever it is put.
# Exit 77 (skipped) with the reason when LLMC_DIR, nvcc or python3 is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
is_cmd() { case "$1" in build | build2 | llmc | port | llmc2 | port2) return 0 ;; *) return 1 ;; esac; }
if [ $# -ge 1 ] && is_cmd "$1" && ! { [ $# -ge 2 ] && is_cmd "$2"; }; then
  build=${CGRT_BUILD:-build}
else
  build=${1:?usage: run.sh [BUILD_DIR] build|llmc|port ...}
  shift
fi
cmd=${1:?usage: run.sh [BUILD_DIR] build|llmc|port ...}
shift
case "$build" in /*) ;; *) build=$root/$build ;; esac
llmc_dir=${LLMC_DIR:-$root/../shared/hosts/llm.c}
if [ -z "${LLMC_DIR:-}" ] && [ ! -d "$llmc_dir" ] && [ -d "$root/shared/hosts/llm.c" ]; then
  llmc_dir=$root/shared/hosts/llm.c
fi
work=${LLMC_WORK:-$build/llmc-host}

skip() {
  echo "SKIPPED: $*"
  exit 77
}

# make_train_gpt2cu [make variables]: llm.c's own build, no MPI, no cuDNN; single GPU unless
# $multi is 1 (then with NCCL, if llm.c's Makefile finds it)
make_train_gpt2cu() {
  if [ "$multi" = 1 ]; then
    make train_gpt2cu NO_USE_MPI=1 USE_CUDNN=0 NVCC_LDFLAGS="$ldflags" \
      ${sm:+GPU_COMPUTE_CAPABILITY=$sm} "$@" >build.log 2>&1 || return 1
    grep -q "NCCL found" build.log || {
      echo "llm.c's Makefile did not find NCCL (it looks with dpkg -l), so this build is single-GPU:"
      grep -i "nccl\|multi-gpu" build.log
      return 1
    }
  else
    make train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 NVCC_LDFLAGS="$ldflags" \
      ${sm:+GPU_COMPUTE_CAPABILITY=$sm} "$@" >build.log 2>&1
  fi
}

# do_build: the trees llmc$suffix and port$suffix ($multi 1: several GPUs)
do_build() {
  [ -f "$llmc_dir/train_gpt2.cu" ] || skip "no llm.c tree at LLMC_DIR=$llmc_dir (set LLMC_DIR)"
  command -v nvcc >/dev/null || skip "nvcc not found: llm.c is built with it"
  command -v python3 >/dev/null || skip "python3 not found: it writes the token shards"
  [ -f "$build/lib/libcgrt.so" ] || {
    echo "no libcgrt in $build/lib: build cgrt first (cmake --build $build)"
    exit 1
  }
  mkdir -p "$work"
  # -lnvidia-ml: llm.c's Makefile links it on Linux; NVML comes with the driver, often without the
  # unversioned name the linker wants, and not at all on a build machine without a GPU.
  ldflags="-lcublas -lcublasLt"
  nvml_dir=$work/nvml
  rm -rf "$nvml_dir"
  for d in /usr/local/cuda/lib64/stubs /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    if [ -e "$d/libnvidia-ml.so" ]; then
      ldflags="$ldflags -L$d -lnvidia-ml"
      break
    elif [ -e "$d/libnvidia-ml.so.1" ]; then
      mkdir -p "$nvml_dir"
      ln -sf "$d/libnvidia-ml.so.1" "$nvml_dir/libnvidia-ml.so"
      ldflags="$ldflags -L$nvml_dir -lnvidia-ml"
      break
    fi
  done
  sm=${LLMC_SM:-}
  if [ -z "$sm" ] && ! command -v nvidia-smi >/dev/null; then sm=90; fi
  for tree in llmc port; do
    rm -rf "${work:?}/$tree$suffix"
    cp -R "$llmc_dir" "$work/$tree$suffix"
  done
  # "unpatched" llm.c: fixes.patch only (CUDA 13's cudaMemAdvise, and ZeRO 1's gather ordered
  # after the update it reads); the port: fixes.patch, then cgrt.patch
  (cd "$work/llmc$suffix" && patch -s -p1 <"$here/fixes.patch")
  (cd "$work/port$suffix" && patch -s -p1 <"$here/fixes.patch" && patch -s -p1 <"$here/cgrt.patch")
  (cd "$work/llmc$suffix" && make_train_gpt2cu) || {
    cat "$work/llmc$suffix/build.log"
    echo "FAILED: building unpatched llm.c in $work/llmc$suffix"
    exit 1
  }
  # the port: cgrt's header and library; cudart shared and the executable's symbols exported, so
  # that diagnose can name the llm.c function that made a call (dladdr)
  libs="-L$build/lib -lcgrt -Xlinker -rpath=$build/lib -Xlinker --export-dynamic -cudart shared"
  [ "$multi" = 1 ] && libs="$libs -lnccl" # the Makefile's own NVCC_LDLIBS is replaced by this one
  (cd "$work/port$suffix" && make_train_gpt2cu NVCC_INCLUDES="-I$root/core/include" NVCC_LDLIBS="$libs") || {
    cat "$work/port$suffix/build.log"
    echo "FAILED: building the port in $work/port$suffix"
    exit 1
  }
  cc -shared -fPIC -O2 -o "$work/stepbits.so" "$here/stepbits.c" -ldl
  [ -f "$work/data/train_000000.bin" ] || python3 "$here/gen_shards.py" "$work/data" >/dev/null
  echo "built: $work/llmc$suffix/train_gpt2cu (unpatched) and $work/port$suffix/train_gpt2cu (port, $(awk '/^(\+\+\+|---) /{ next } /^[-+]/{ n++ } END { print n }' "$here/cgrt.patch") changed lines)"
}

# run TREE [llm.c options]: one training run, from the tree's directory (under `timeout` when
# run_timeout is set)
run_trainer() {
  tree=$1
  shift
  [ -x "$work/$tree/train_gpt2cu" ] || {
    echo "no $work/$tree/train_gpt2cu: run '$0 $build build' first"
    exit 1
  }
  cd "$work/$tree"
  LD_PRELOAD="$work/stepbits.so${LLMC_PRELOAD:+ $LLMC_PRELOAD}" exec ${LLMC_PIN:+taskset -c "$LLMC_PIN"} ${run_timeout:+timeout -k 5 "$run_timeout"} ./train_gpt2cu -i "$work/data/train_*.bin" \
    -j "$work/data/val_*.bin" -s 0 -v 100000 -m 1 "$@"
}

# run_ranks TREE [llm.c options]: one training run on $gpus GPUs, a process per GPU (see above)
run_ranks() {
  tree=$1
  shift
  [ -x "$work/$tree/train_gpt2cu" ] || {
    echo "no $work/$tree/train_gpt2cu: run '$0 $build build2' first"
    exit 1
  }
  nccl_dir=$(mktemp -d "${TMPDIR:-/tmp}/llmc-nccl.XXXXXX")
  r=0
  while [ "$r" -lt "$gpus" ]; do
    (run_timeout=$rank_timeout run_trainer "$tree" "$@" -pn "$gpus" -pr "$r" -pi fs -pf "$nccl_dir") >"$nccl_dir/rank$r.log" 2>&1 &
    eval "pid$r=\$!"
    r=$((r + 1))
  done
  status=0
  r=0
  while [ "$r" -lt "$gpus" ]; do
    pid=; eval "pid=\$pid$r"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc && failed_rank=$r
    r=$((r + 1))
  done
  cat "$nccl_dir/rank0.log"
  r=1
  while [ "$r" -lt "$gpus" ]; do
    sed "s/^/rank$r| /" "$nccl_dir/rank$r.log"
    r=$((r + 1))
  done
  rm -rf "$nccl_dir"
  if [ "$status" -ne 0 ]; then
    echo "run.sh: rank $failed_rank exited $status$([ "$status" -eq 124 ] && echo " (killed after LLMC_RANK_TIMEOUT=$rank_timeout s)")"
  fi
  return "$status"
}
gpus=${LLMC_GPUS:-2}
rank_timeout=${LLMC_RANK_TIMEOUT:-600}

# port_config CONFIG: the environment of a port run (CGRT_CONFIG, LLMC_CGRT, LLMC_CGRT_NAIVE)
port_config() {
  conf=$1
  export CGRT_BACKEND_PATH="$build/lib/cgrt/backends"
  case "$conf" in
  off) export LLMC_CGRT=0 ;;
  naive)
    export LLMC_CGRT_NAIVE=1
    export CGRT_CONFIG="$here/conf/full_iteration.ini"
    ;;
  */* | *.ini) export CGRT_CONFIG="$conf" ;;
  *) export CGRT_CONFIG="$here/conf/$conf.ini" ;;
  esac
  if [ -n "${CGRT_CONFIG:-}" ] && [ ! -f "$CGRT_CONFIG" ]; then
    echo "no configuration $CGRT_CONFIG"
    exit 1
  fi
}

multi=0
suffix=
case "$cmd" in
build | build2)
  [ $# -eq 0 ] || {
    echo "run.sh $cmd takes no options (got: $*)"
    exit 2
  }
  if [ "$cmd" = build2 ]; then
    multi=1
    suffix=2
  fi
  do_build
  ;;
llmc) run_trainer llmc "$@" ;;
llmc2) run_ranks llmc2 "$@" ;;
port2)
  port_config "${1:?usage: run.sh [BUILD_DIR] port2 CONFIG [llm.c options]}"
  shift
  run_ranks port2 "$@"
  ;;
port)
  port_config "${1:?usage: run.sh [BUILD_DIR] port CONFIG [llm.c options]}"
  shift
  run_trainer port "$@"
  ;;
*)
  echo "unknown command '$cmd': build, build2, llmc, port, llmc2 or port2"
  exit 2
  ;;
esac
