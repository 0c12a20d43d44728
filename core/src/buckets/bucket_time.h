/*
 * bucket_time.h - token buckets chosen by time (issue 43): what a step costs on the device,
 * replayed at a bucket or run eagerly at its own size, as a model through measured points, the
 * expected step time of a bucket set over a traffic histogram, and the set of K buckets that
 * minimizes it, each size served by its bucket or eagerly, whichever the model says is faster.
 * Internal; `cgrt plan --traffic` (through cgrt/tool.h) and `[inference] adapt_by = time` use it.
 */
#ifndef CGRT_BUCKET_TIME_H
#define CGRT_BUCKET_TIME_H

#include <stddef.h>
#include <stdint.h>

#include "bucket_plan.h"

/* One measured figure: a step at `size` tokens took `us` microseconds on the device. */
struct cgrt_cost_point {
  int64_t size;
  double us;
};

/*
 * Step costs: replay[] the device time of a step replayed at bucket `size` (what the step's real
 * token count is does not matter: the graph runs the padded size), eager[] that of a step run
 * eagerly at `size` tokens. Each ascending by size, one point per size. Between two sizes the
 * model is linear; beyond the ends it follows the nearest two points (one point: constant),
 * never below zero.
 */
struct cgrt_step_costs {
  struct cgrt_cost_point *replay, *eager;
  size_t nreplay, neager;
  size_t cap_replay, cap_eager;
};

/* Sets the figure of one size (replaces an earlier one). CGRT_E_INVAL, CGRT_E_NOMEM. */
int cgrt__costs_set(struct cgrt_step_costs *c, int eager, int64_t size, double us);
void cgrt__costs_free(struct cgrt_step_costs *c);
/* 1 when both sides have figures at two sizes at least: enough for a model by time. */
int cgrt__costs_ready(const struct cgrt_step_costs *c);
/* The model at `size` (see struct cgrt_step_costs); 0 with no point. */
double cgrt__costs_at(const struct cgrt_cost_point *p, size_t n, int64_t size);

/*
 * Expected device time per step of the histogram under `buckets` (ascending): each step runs at
 * the smallest bucket >= its size, or eagerly when eager_ok and the model says eager is faster
 * at its size; steps above the largest bucket run eagerly. *eager_steps (may be NULL): the
 * weight of the steps the plan runs eagerly. 0 for an empty histogram.
 */
double cgrt__plan_time(const struct cgrt_histogram *h, const int64_t *buckets, size_t nb,
                       const struct cgrt_step_costs *c, int eager_ok, double *eager_steps);

/* The most distinct sizes cgrt__buckets_fastest plans over (O(k m^2) time, O(k m) memory). */
#define CGRT_TIME_PLAN_MAX_SIZES 4096

/*
 * The set of at most k buckets (ascending, into out, k entries) whose largest is max_size and
 * which minimizes the expected step time of the histogram, each size served by the bucket above
 * it or eagerly (eager_ok), whichever costs less; *time is that time per step. Every bucket but
 * max_size is a size of the histogram with weight. Exact: dynamic programming over the distinct
 * sizes, O(k m^2) for m sizes. Errors: CGRT_E_INVAL (k < 1, sizes not ascending or above
 * max_size, costs not ready), CGRT_E_CAPACITY (more than CGRT_TIME_PLAN_MAX_SIZES sizes),
 * CGRT_E_NOMEM.
 */
int cgrt__buckets_fastest(const struct cgrt_histogram *h, int64_t max_size, int k,
                          const struct cgrt_step_costs *c, int eager_ok, int64_t *out,
                          size_t *count, double *time);

#endif
