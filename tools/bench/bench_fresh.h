/*
 * bench_fresh.h - the fresh-input rows of `cgrt bench --workload decode|chain` (bench_fresh.c).
 * CUDA builds only.
 */
#ifndef CGRT_TOOLS_BENCH_FRESH_H
#define CGRT_TOOLS_BENCH_FRESH_H

#include "bench_gpu.h"

/* One token count, the host handing a fresh hidden buffer every step. */
struct fresh_row {
  int64_t tokens, bucket;
  double eager_us;  /* the same host code under impl = none */
  double cgrt_us;   /* under the configured backend */
  double static_us; /* the same backend, the buffer in place (timed in turn with cgrt_us) */
  int bitwise;      /* the backend's output equal to eager's at the same padded size */
  double recordings_per_step; /* captures and re-recordings per step, once steady */
  double copy_bytes_per_step; /* bytes copied into and out of private copies per step */
  uint64_t copy_keys, variant_keys, eager_keys, fallbacks; /* cgrt_stats of the fresh runtime */
  /* [local] by_time in the fresh runtime, since it opened: steps timed, eager steps run to
     measure, counts served eagerly and at exact-size buckets (all 0 with by_time off) */
  uint64_t timed_steps, probe_steps, eager_counts, exact_counts;
  cgrt_mode mode; /* the mode of its last step */
};

/*
 * Measures one row per o->tokens[] (rows[0..o->num_tokens)): runtimes of their own for the fresh
 * host under the configuration and under eager; `backend` is the static host of the same
 * configuration, timed in turn with the fresh one. 0 or an error (printed).
 */
int bench_fresh_rows(const struct bench_workload *w, void *ws, int64_t max_rows,
                     struct host_model *backend, const struct bench_opts *o,
                     struct fresh_row *rows);

/* The rows as a table after the main one, or as the ,"fresh":[...] field of the JSON object. */
void bench_fresh_print(const struct fresh_row *rows, int n, int json);

#endif
