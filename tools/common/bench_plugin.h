/*
 * bench_plugin.h - the GPU half of the `cgrt` command: libcgrt-bench.so (LIBDIR/cgrt/tools).
 *
 * The `cgrt` executable links libcgrt alone, so that what needs no GPU (version, check, buckets,
 * info on a machine without one) loads no CUDA library. The GPU workloads (kernels/, cuBLAS,
 * NCCL) and the benches and plans that run them are this object (tools/bench/), built with the
 * CUDA Toolkit and loaded by `cgrt bench` and `cgrt plan` when a command needs them
 * (tools/cli/bench_load.c). It exports one table, `cgrt_bench_plugin_v1`. Like the driver
 * interface it is internal: the object is built from the same tree as the command that loads it
 * (struct bench_opts is shared), and the command refuses a table of another version or a shorter
 * one. This header is all the two halves share of each other: the command includes nothing of
 * tools/bench/, the bench nothing of tools/cli/.
 */
#ifndef CGRT_BENCH_PLUGIN_H
#define CGRT_BENCH_PLUGIN_H

#include <stdint.h>
#include <stdio.h>

#include "cgrt/backend.h"
#include "cgrt/cgrt.h"

#define BENCH_MAX_TOKENS 32
/* The most --ranks: tools/bench/ranks.h's CGRT_RANKS_MAX (bench_cp.c checks they agree). */
#define BENCH_MAX_RANKS 64

/* `cgrt bench`'s options, parsed and checked by the command (cmd_bench.c). */
struct bench_opts {
  const char *conf; /* INI of the backend under test; NULL: local, layer scope */
  const char *workload;
  int64_t tokens[BENCH_MAX_TOKENS];
  int num_tokens;
  int steps;        /* timed steps per measurement (median reported) */
  int warmup;       /* untimed steps before */
  int warmup_ms;    /* ... and at least this much time of them (decode, chain; 0: none) */
  int blocks;       /* decode, chain: cgrt and the floors timed in turn, in this many blocks */
  int explain;      /* decode, chain: --explain (bench_explain.c) instead of the table */
  const char *plot; /* decode, chain: an SVG chart of the rows to this file, or NULL */
  int chain_kernels;
  int json;
  int ranks;              /* cp workload: processes, one per GPU; 0: the largest cp size */
  const char *cp_shape;   /* cp workload: "launch" (NULL: the default) or "compute" */
  int timeout_s;          /* cp workload: the ranks' time limit; 0: 600 s */
  const char *traffic;    /* decode: replay this token-count file (bench_traffic.c) */
  int set_budget;         /* --memory-budget given: memory_budget replaces the configuration's */
  uint64_t memory_budget; /* bytes, 0: off */
  int host_stream;        /* decode, chain: runtimes opened on a stream of the bench's (below) */
  int traffic_passes;     /* --traffic: 2 (A B C D D C B A, the default), 1 (A B C D), 3 or 4 */
  int traffic_settle;     /* --traffic: untimed rounds of every run before the passes (2, the
                             default; 0: none) */
  int set_queue;          /* --max-queued-steps given: max_queued_steps replaces the
                             configuration's [runtime] max_queued_steps in every runtime opened */
  int max_queued_steps;   /* 0 to 64; 0: no limit */
};

/*
 * What the options replace in a configuration the bench opens a runtime from: --memory-budget the
 * [cuda_graph] memory_budget, --max-queued-steps the [runtime] max_queued_steps (an eager
 * reference made from v afterwards, tool_eager_config, takes the bound too).
 */
static inline void bench_opts_apply(const struct bench_opts *o, struct cgrt_config_view *v) {
  if (o->set_budget)
    v->memory_budget = o->memory_budget;
  if (o->set_queue)
    v->max_queued_steps = o->max_queued_steps;
}

/*
 * The header line of a bench whose runtimes bound the steps queued ahead of the device: n, the
 * [runtime] max_queued_steps they run with (--max-queued-steps, or the configuration's). Nothing
 * when neither sets one.
 */
static inline void bench_print_queue(const struct bench_opts *o, int n) {
  if (n > 0)
    printf("[runtime] max_queued_steps = %d (%s) in every runtime of this bench: before step i is "
           "issued, the host waits for step i - %d to finish on the device\n",
           n, o->set_queue ? "--max-queued-steps" : "the configuration's", n);
  else if (o->set_queue)
    printf("[runtime] max_queued_steps = 0 (--max-queued-steps) in every runtime of this bench: no "
           "limit on the steps queued ahead of the device\n");
}

/*
 * The header line of a bench run with --memory-budget: the budget that replaced the
 * configuration's in the runtimes under test (the eager references capture nothing). Nothing
 * without the option (a configured budget is the configuration's, printed where a bench prints
 * graph memory).
 */
static inline void bench_print_budget(const struct bench_opts *o) {
  if (!o->set_budget)
    return;
  if (o->memory_budget)
    printf("[cuda_graph] memory_budget = %.1f MiB (--memory-budget) in every runtime under test\n",
           (double)o->memory_budget / (1024.0 * 1024.0));
  else
    printf("[cuda_graph] memory_budget = off (--memory-budget) in every runtime under test\n");
}

/*
 * `cgrt plan`'s table (cmd_plan.c), called by a plan (plan_decode, plan_train in bench.h) with the
 * runtime, its graphs live, a description of the workload and the configured memory_budget (0:
 * none). The exit code.
 */
typedef int (*plan_report_fn)(cgrt_runtime *rt, const char *what, uint64_t budget, void *user);

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
 * checks its table. On failure prints why on stderr, prefixed by `cmd` ("cgrt bench: no CUDA
 * device: ..." when the object or its CUDA libraries are missing, as a GPU bench says when there
 * is no GPU) and returns EXIT_UNUSABLE with *p NULL.
 */
int bench_plugin_load(const char *cmd, const struct cgrt_bench_plugin **p);

#endif
