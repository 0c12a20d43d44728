/*
 * bench_gpu.h - the pieces of `cgrt bench --workload decode|chain` (bench_gpu.c) that the
 * explain mode (bench_explain.c) reuses: a host model driving a workload through cgrt, and the
 * raw-graph floors. CUDA builds only.
 */
#ifndef CGRT_TOOLS_BENCH_GPU_H
#define CGRT_TOOLS_BENCH_GPU_H

#include <cuda_runtime_api.h>

#include "bench.h"
#include "tool.h"

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
  /*
   * A host that hands its layers a fresh input every step (bench_fresh.c): before each step it
   * allocates the hidden buffer with cudaMallocAsync, prepare stages the input into it, the body
   * hands it to every module, and after the step the output is copied out and the previous
   * step's buffer freed (so consecutive steps never share an address).
   */
  int fresh;
  void *cur, *prev;
  void *stream; /* the stream handed at open (--host-stream), or NULL: cgrt's own */
};

struct measure {
  double step_us;    /* median interval between steps */
  double host_us;    /* mean host time in cgrt_step */
  double prepare_us; /* mean host time in prepare */
  int64_t padded;    /* the bucket the steps ran at */
  cgrt_mode mode;    /* the last step's mode */
  uint32_t calls;    /* module calls of the last step */
};

/* Opens a runtime from cfg (consumed), on `stream` if not NULL (cgrt_tool_open_on), and registers
   the workload's modules with it. */
int hm_open(struct host_model *hm, const struct bench_workload *w, void *ws, int64_t max_rows,
            cgrt_tool_config *cfg, void *stream);
/* Closes it (NULL runtime accepted) and frees a fresh host's last buffer. */
void hm_close(struct host_model *hm);

/*
 * The configuration of the backend under test (o->conf, or the bench's default: local) on the
 * cuda driver with o's budget, and the same for impl = none. EXIT_VALID or the exit code.
 */
int bench_gpu_configs(const struct bench_opts *o, cgrt_tool_config **cfg,
                      cgrt_tool_config **eager_cfg);

/* cgrt steps of a host model as a bench_stepper (bs); timed steps add to the host-time sums. */
struct hm_stepper {
  struct host_model *hm;
  cgrt_buffer stat;
  cgrt_step_desc desc;
  cgrt_step_report rep;
  uint64_t host_ns;
  int timed;
  struct bench_stepper bs;
};

/* Steps of `tokens` real tokens (desc.tokens = step_tokens). */
void hm_stepper_init(struct hm_stepper *st, struct host_model *hm, int64_t tokens,
                     int64_t step_tokens);
int hm_step(void *arg, int timed);
/* The measure of st's timed steps, whose median interval was step_us. */
void hm_stepper_result(const struct hm_stepper *st, double step_us, struct measure *m);

/* One inference step of `tokens` real tokens, untimed; the error is printed. */
int bench_hm_step(struct host_model *hm, int64_t tokens, cgrt_step_report *rep);

/*
 * 1 if the backend's output of its last step (`padded` rows) is bitwise equal to eager's at the
 * same padded size (same kernels, same arguments); runs one eager step.
 */
int bench_bitwise_equal(struct host_model *backend, struct host_model *eager, int64_t tokens,
                        int64_t padded, const struct bench_opts *o);

/* Warm-up then timed steps (bench_time_steps), alone. */
int hm_measure(struct host_model *hm, int64_t tokens, int64_t step_tokens,
               const struct bench_opts *o, struct measure *m);

/*
 * Steps of `tokens` until the backend has settled, before a row is timed: the warm-up plus 100
 * steps, enough for a by_time round beyond it (a count is probed once seen 16 times: 8 replays, 9
 * eager steps; it gets an exact-size bucket once seen 64 times: its warm-up, capture and 8
 * replays; 40 before session 38, when probes and exact buckets came at once). m: the last step's.
 */
int hm_settle(struct host_model *hm, int64_t tokens, const struct bench_opts *o, struct measure *m);

/* The same work captured by hand: every module in one graph, and one graph per module. */
struct floor {
  cudaGraphExec_t whole;                   /* every module in one graph */
  cudaGraphExec_t each[BENCH_MAX_MODULES]; /* one graph per module */
  int n;
  int64_t rows;
};

/* Called with each floor graph before it is instantiated, and with its executable after. */
typedef void (*floor_graph_fn)(void *user, int per_module, cudaGraph_t g, cudaGraphExec_t exec);

/* Captures, instantiates (as cgrt does: cudaGraphInstantiateFlagAutoFreeOnLaunch) and uploads
 * the floors of `rows` rows on stream s. fn may be NULL. */
int floor_build(struct floor *f, const struct bench_workload *w, void *ws, cudaStream_t s,
                int64_t rows, floor_graph_fn fn, void *user);
void floor_free(struct floor *f);

/* One step of the floor: stage eagerly (as prepare does), then the raw graph(s). */
struct floor_stepper {
  struct floor *f;
  const struct bench_workload *w;
  void *ws;
  cudaStream_t s;
  int64_t tokens;
  int per_module;
};
int floor_step(void *arg, int timed);

#endif
