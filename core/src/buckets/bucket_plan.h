/*
 * bucket_plan.h - token buckets chosen from traffic (issue 11): the padded tokens a bucket set
 * costs a histogram of step sizes, the set of K buckets that costs least (exact dynamic
 * programming), and the decaying histogram that `[inference] buckets = adaptive` keeps. Internal;
 * the cgrt command uses the planner for `cgrt buckets --histogram`.
 */
#ifndef CGRT_BUCKET_PLAN_H
#define CGRT_BUCKET_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cgrt/backend.h"

/*
 * A histogram of step sizes: sizes[i] (ascending, distinct, each the bucket size a step needs:
 * its token count rounded up to a multiple of tp_size, at most max_tokens) was needed by steps[i]
 * steps (a weight: decayed counts are fractional) holding tokens[i] real tokens in all.
 */
struct cgrt_histogram {
  const int64_t *sizes;
  const double *steps;
  const double *tokens;
  size_t n;
};

/*
 * Padded tokens of the histogram under `buckets` (ascending): each step runs at the smallest
 * bucket >= its size. Steps above the largest bucket run eagerly, unpadded; their weight goes to
 * *eager_steps if it is not NULL.
 */
double cgrt__buckets_padded(const struct cgrt_histogram *h, const int64_t *buckets, size_t nb,
                            double *eager_steps);

/*
 * The set of at most k buckets (ascending, into out, which holds k entries) whose largest is
 * max_size and which minimizes the histogram's padded tokens; *padded is that minimum. Every
 * bucket but max_size is one of the histogram's sizes with a positive weight (an optimal bucket
 * can always be lowered to the largest size it serves), so fewer than k buckets come back when
 * the histogram has fewer distinct sizes. Exact: dynamic programming over the distinct sizes,
 * each layer solved by divide and conquer, which the cost's Monge property makes exact:
 * O(k m log m) for m sizes.
 * Errors: CGRT_E_INVAL (k < 1, a size above max_size, sizes not ascending), CGRT_E_NOMEM.
 */
int cgrt__buckets_optimal(const struct cgrt_histogram *h, int64_t max_size, int k, int64_t *out,
                          size_t *count, double *padded);

/* The bucket size a step of `tokens` needs: rounded up to a multiple of tp, at most max. */
int64_t cgrt__bucket_need(int64_t tokens, int64_t tp, int64_t max);

/*
 * The traffic histogram of `buckets = adaptive`: one counter per bucket size a step can need
 * (the multiples of tp_size below max_tokens, and max_tokens), with exponential decay of
 * half-life `halflife` steps, and the planning that every `interval` steps proposes the best set.
 */
struct cgrt_bucket_adapt {
  int64_t max_tokens;
  int64_t tp;
  int k;
  int interval;
  int halflife;
  double min_gain;
  size_t slots;   /* sizes a step can need */
  double *steps;  /* per slot: decayed step weight */
  double *tokens; /* per slot: decayed real tokens */
  int64_t *scratch_sizes;
  double *scratch_steps, *scratch_tokens;
  uint64_t observed;      /* steps recorded since init */
  uint64_t since_rescale; /* steps since the weights were last brought back to scale */
  double weight;          /* the weight of the next step: 2^(since_rescale / halflife) */
  /* adapt_by = time (issue 43): the step costs the backend measured (bucket_time.h), else NULL */
  struct cgrt_step_costs *costs;
};

/* The largest max_tokens / tp_size the adaptive histogram accepts (one counter per size). */
#define CGRT_ADAPT_MAX_SLOTS (1u << 18)

/*
 * Sets up the histogram for the view's [inference] options. CGRT_E_INVAL (reason in err) when
 * an option is out of range, CGRT_E_NOMEM.
 */
int cgrt__adapt_init(struct cgrt_bucket_adapt *a, const struct cgrt_config_view *v, char *err,
                     size_t errlen);
void cgrt__adapt_free(struct cgrt_bucket_adapt *a);

/* Records one step of `tokens` real tokens. Steps above max_tokens run eagerly: not recorded. */
void cgrt__adapt_observe(struct cgrt_bucket_adapt *a, int64_t tokens);

/* 1 when the steps observed so far end an interval: time to plan. */
int cgrt__adapt_due(const struct cgrt_bucket_adapt *a);

/*
 * Plans for the histogram: the optimal set (into out, k entries), the padded tokens per step of
 * the current set and of the optimal one (expected, from the decayed histogram), and whether to
 * adopt it: the saving is at least min_gain of the current padding and the set differs.
 */
int cgrt__adapt_plan(struct cgrt_bucket_adapt *a, const int64_t *cur, size_t ncur, int64_t *out,
                     size_t *nout, double *cur_padded, double *new_padded, int *adopt);

/*
 * adapt_by = time: as cgrt__adapt_plan, but the set minimizes the expected step time of the
 * decayed histogram under a->costs (each size served by its bucket or eagerly, whichever the
 * costs say is faster): *cur_us and *new_us are the expected times per step of the current and
 * the new set, *tok_us that of the padded-token plan (into tok, k entries, *ntok), for the log.
 * Adopted when it saves at least min_gain of the current time and the set differs.
 * CGRT_E_INVAL when the costs are not ready (cgrt__costs_ready), CGRT_E_CAPACITY when the
 * histogram has too many sizes for it: plan by tokens then.
 */
int cgrt__adapt_plan_time(struct cgrt_bucket_adapt *a, const int64_t *cur, size_t ncur,
                          int64_t *out, size_t *nout, int64_t *tok, size_t *ntok, double *cur_us,
                          double *new_us, double *tok_us, int *adopt);

#endif
