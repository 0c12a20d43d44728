/*
 * bench_host.h - the host application the GPU benches run a workload as (bench_gpu.c): one
 * runtime, one module per piece of the workload, prepare staging and padding the input, the body
 * calling every module. Shared by the per-token-count bench and the traffic replay.
 */
#ifndef CGRT_BENCH_HOST_H
#define CGRT_BENCH_HOST_H

#include <stdint.h>

#include "bench.h"

struct cgrt_config;

/* One runtime driving the workload: what a host application holds. */
struct host_model {
  cgrt_runtime *rt;
  const struct bench_workload *w;
  void *ws;
  int num_modules;
  cgrt_module *mods[BENCH_MAX_MODULES];
  struct module_ref {
    struct host_model *hm;
    int index;
  } refs[BENCH_MAX_MODULES];
  int64_t tokens; /* the step's real token count; prepare pads to ctx->padded_tokens */
  uint64_t prepare_ns;
  void *buf;
  size_t row_bytes;
  int64_t max_rows;
  cgrt_buffer stat; /* the static buffer the steps declare */
};

/* Opens a runtime from cfg (taking it over) and registers the workload's modules. */
int bench_hm_open(struct host_model *hm, const struct bench_workload *w, void *ws, int64_t max_rows,
                  struct cgrt_config *cfg);

/* One inference step of `tokens` real tokens; the error is printed. */
int bench_hm_step(struct host_model *hm, int64_t tokens, cgrt_step_report *rep);

/*
 * 1 if the backend's output of its last step (`padded` rows) is bitwise equal to eager's for the
 * same padded size (same kernels, same arguments); runs one eager step.
 */
int bench_bitwise_equal(struct host_model *backend, struct host_model *eager, int64_t tokens,
                        int64_t padded, const struct bench_opts *o);

#endif
