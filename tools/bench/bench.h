/*
 * bench.h - `cgrt bench` on the GPU: a reference workload from kernels/ run as a host application
 * would run it, under the configured backend and under eager, against the floor of the same
 * work captured by hand as raw graphs.
 */
#ifndef CGRT_BENCH_H
#define CGRT_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "bench_plugin.h"
#include "cgrt/cgrt.h"

struct cgrt_tool_config;

#define BENCH_MAX_MODULES 256

/*
 * A workload: device state shared by every runtime of the run, and modules that each enqueue
 * one piece of it for `rows` rows (the padded token count).
 */
struct bench_workload {
  const char *name;
  int (*create)(const struct bench_opts *o, int64_t max_rows, void **state, char *err,
                size_t errlen);
  void (*destroy)(void *state);
  void (*describe)(void *state, char *buf, size_t len);
  int (*num_modules)(void *state);
  void (*module)(void *state, int i, char *name, size_t len, cgrt_kind *kind);
  /* Stages the input of a step: rows [0, tokens) real, [tokens, rows) padding. */
  int (*stage)(void *state, int64_t tokens, int64_t rows, void *stream);
  /* `buffer`: the device buffer to work on (a module's args->buffers[0], which is a private copy
     under rebind = copy or verify's eager run), or NULL for the workload's own. */
  int (*run)(void *state, int module, int64_t rows, void *buffer, void *stream);
  /* The output of `rows` rows, copied to host memory (at most len bytes); bytes copied. */
  size_t (*read)(void *state, int64_t rows, void *dst, size_t len, void *stream);
  /* The device buffer the modules work on, declared to cgrt as each call's buffer. */
  void *(*buffer)(void *state, size_t *bytes_per_row);
  /* Optional (NULL: no limit shown): the bytes a step of `rows` rows must read from device
   * memory at least (for decode: every weight and the KV cache), for the bandwidth limit. */
  double (*step_bytes)(void *state, int64_t rows);
};

extern const struct bench_workload bench_decode;
extern const struct bench_workload bench_chain;

/* Runs the GPU bench of workload `w` (inference steps over token counts); the exit code. */
int bench_gpu(const struct bench_workload *w, const struct bench_opts *o);

/*
 * Replays the token counts of o->traffic through workload `w` under eager, the configured backend
 * and the other bucket distribution (bench_traffic.c); the exit code.
 */
int bench_traffic(const struct bench_workload *w, const struct bench_opts *o);

/*
 * `--explain`: what distinguishes cgrt's graphs from the raw floor's and what decides their step
 * times, for workload `w` at the first token count (bench_explain.c); the exit code.
 */
int bench_explain(const struct bench_workload *w, const struct bench_opts *o);

/* Runs the training bench (train workload, kernels/train_host.c); the exit code. */
int bench_train(const struct bench_opts *o);

/* Runs the context-parallel bench (cp workload, kernels/cp_host.c) on o->ranks GPUs, one process
 * each (ranks.c); the exit code. */
int bench_cp(const struct bench_opts *o);

/* 0 if a CUDA device is there; else `cmd` says why not on stderr and EXIT_UNUSABLE is returned. */
int bench_no_device(const char *cmd);

/*
 * `cgrt plan`: builds every graph the configuration would build for the workload (the budget
 * set aside, so the figures are unconstrained), then calls report with the runtime, its graphs
 * live, a description of the workload and the configured memory_budget (0: none). The exit code.
 */
int plan_decode(const char *conf, plan_report_fn report, void *user);
/*
 * What both plans start with: a GPU, the configuration (or default_conf) on the cuda driver, and
 * its memory_budget moved to *budget and set aside. EXIT_VALID, or the exit code with *cfg NULL.
 */
int plan_config(const char *conf, const char *default_conf, const char *name,
                struct cgrt_tool_config **cfg, uint64_t *budget);
int plan_train(const char *conf, plan_report_fn report, void *user);

/*
 * What went wrong or was checked in rt (fallbacks, moved buffers, the memory budget, verify,
 * diagnose): text lines (only when there is something to say), or with json the fields
 * ,"fallbacks":..,"findings":[...] to close an object with.
 */
void bench_print_checks(cgrt_runtime *rt, int json);

/* The median of v[0..n) (sorts v). */
double bench_median(double *v, int n);

/* One step of something timed: `timed` is 0 during warm-up. Returns 0 or an error. */
struct bench_stepper {
  int (*step)(void *arg, int timed);
  void *arg;
  void *stream; /* cudaStream_t the steps run on; events are recorded there between steps */
};

/*
 * Runs o->warmup untimed steps (and more until o->warmup_ms have passed), then o->steps steps
 * with a CUDA event between consecutive ones; *us is the median interval. The step's time on the
 * device whether the host or the device is the bottleneck. (bench_time.c)
 */
int bench_time_steps(const struct bench_stepper *st, const struct bench_opts *o, double *us);

/*
 * The same for n steppers that share the GPU's conditions: each warms up (as above) with the
 * device idle between them, then o->steps timed steps of each are taken in o->blocks blocks,
 * stepper after stepper within a block, each block after the device went idle and a few untimed
 * steps refilled the queue. us[v] is stepper v's median interval. So no measurement sees only
 * the GPU state (clocks, queues) another one left: the order of measurement cannot decide a
 * ratio between them.
 */
int bench_time_blocks(const struct bench_stepper *st, int n, const struct bench_opts *o,
                      double *us);

/*
 * What issuing one step of st costs the host: `steps` untimed steps, each issued onto an idle
 * device (synchronized before it) so that no full launch queue makes the host wait; *us is the
 * median host time from the call of st->step to its return. Beside the step's device time it
 * tells who bounds a step: the host when the two are close, the device when the host time is
 * well below. (bench_time.c)
 */
int bench_host_cost(const struct bench_stepper *st, int steps, double *us);

#endif
