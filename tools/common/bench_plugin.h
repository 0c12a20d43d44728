/*
 * bench_plugin.h - the GPU half of the `cgrt` command: libcgrt-bench.so (LIBDIR/cgrt/tools).
 *
 * The `cgrt` executable links libcgrt alone, so that what needs no GPU (version, check, buckets,
 * info on a machine without one) loads no CUDA library. The GPU workloads (kernels/, cuBLAS,
 * NCCL) and the benches and plans that run them are this object, built with the CUDA Toolkit
 * and loaded by `cgrt bench` and `cgrt plan` when a command needs them (bench_load.c). It exports
 * one table, `cgrt_bench_plugin_v1`. Like the driver interface it is internal: the object is built
 * from the same tree as the command that loads it (struct bench_opts is shared), and the command
 * refuses a table of another version or a shorter one.
 */
#ifndef CGRT_BENCH_PLUGIN_H
#define CGRT_BENCH_PLUGIN_H

#include <stdint.h>

#include "bench.h"

#define CGRT_BENCH_PLUGIN_VERSION 1
#define CGRT_BENCH_PLUGIN_SYMBOL  "cgrt_bench_plugin_v1"
/* The file, under LIBDIR/cgrt/ (beside libcgrt), and the variable that names another one. */
#define CGRT_BENCH_PLUGIN_FILE "tools/libcgrt-bench.so"
#define CGRT_BENCH_PLUGIN_ENV  "CGRT_BENCH_LIBRARY"

struct cgrt_bench_plugin {
  uint32_t version;     /* CGRT_BENCH_PLUGIN_VERSION */
  uint32_t struct_size; /* sizeof(struct cgrt_bench_plugin) as the object was built */
  /* `cgrt bench` of a GPU workload (decode, chain, train, cp; --traffic, --explain): the exit
     code. o is checked by the command already. */
  int (*bench)(const struct bench_opts *o);
  /* `cgrt plan` of workload decode or train: builds its graphs and calls report (cmd_plan.c). */
  int (*plan)(const char *workload, const char *conf, plan_report_fn report, void *user);
};

/*
 * Loads libcgrt-bench.so ($CGRT_BENCH_LIBRARY, else LIBDIR/cgrt/tools beside libcgrt) once and
 * checks its table. On failure prints why on stdout, prefixed by `cmd` ("cgrt bench: no CUDA
 * device: ..." when the object or its CUDA libraries are missing, as a GPU bench says when there
 * is no GPU) and returns EXIT_UNUSABLE with *p NULL.
 */
int bench_plugin_load(const char *cmd, const struct cgrt_bench_plugin **p);

#endif
