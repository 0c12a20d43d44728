/*
 * bucket_plan.c - token buckets chosen from traffic: the cost of a bucket set for a histogram of
 * step sizes, the optimal set of K buckets, and the decaying histogram of `buckets = adaptive`.
 *
 * The planner. Let c_1 < ... < c_m be the sizes with weight (c_m = max_size, forced), W and R the
 * prefix sums of their step weights and real tokens. Serving sizes c_{i+1}..c_j with bucket c_j
 * pads cost(i, j) = c_j (W_j - W_i) - (R_j - R_i) tokens, and
 *     best[l][j] = min over i < j of best[l-1][i] + cost(i, j)
 * is the least padding of the first j sizes with l buckets. cost is Monge: for a <= b <= c <= d,
 * cost(a,c) + cost(b,d) - cost(a,d) - cost(b,c) = (c_c - c_d)(W_b - W_a) <= 0, so the best i is
 * non-decreasing in j and each layer is solved exactly by divide and conquer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket_plan.h"
#include "bucket_time.h"
#include "buckets.h"

double cgrt__buckets_padded(const struct cgrt_histogram *h, const int64_t *buckets, size_t nb,
                            double *eager_steps) {
  double padded = 0, eager = 0;
  size_t b = 0;
  for (size_t i = 0; i < h->n; i++) {
    if (h->steps[i] <= 0)
      continue;
    while (b < nb && buckets[b] < h->sizes[i])
      b++;
    if (b == nb) {
      eager += h->steps[i];
      continue;
    }
    padded += (double)buckets[b] * h->steps[i] - h->tokens[i];
  }
  if (eager_steps)
    *eager_steps = eager;
  return padded;
}

int64_t cgrt__bucket_need(int64_t tokens, int64_t tp, int64_t max) {
  if (tokens < 1)
    tokens = 1;
  if (tokens >= max)
    return max;
  int64_t r = tokens % tp;
  int64_t need = r ? tokens + (tp - r) : tokens;
  return need < max ? need : max;
}

/* One layer of the dynamic programme: what it reads and writes. */
struct layer {
  const double *c, *w, *r; /* sizes, prefix weights, prefix tokens; index 0 is "nothing" */
  const double *prev;      /* best[l-1][.] */
  double *cur;             /* best[l][.] */
  int *from;               /* argmin i of best[l][j] */
  size_t first;            /* smallest i allowed: l - 1 (each earlier bucket serves a size) */
};

static double seg_cost(const struct layer *L, size_t i, size_t j) {
  return L->c[j] * (L->w[j] - L->w[i]) - (L->r[j] - L->r[i]);
}

/* best[l][j] for j in [lo, hi], knowing the argmin lies in [olo, ohi]. */
static void solve(const struct layer *L, size_t lo, size_t hi, size_t olo, size_t ohi) {
  while (lo <= hi) {
    size_t mid = lo + (hi - lo) / 2;
    size_t start = olo > L->first ? olo : L->first;
    size_t end = ohi < mid - 1 ? ohi : mid - 1;
    double best = INFINITY;
    size_t arg = start;
    for (size_t i = start; i <= end; i++) {
      double v = L->prev[i] + seg_cost(L, i, mid);
      if (v < best) {
        best = v;
        arg = i;
      }
    }
    L->cur[mid] = best;
    L->from[mid] = (int)arg;
    /* left half recursively, right half in this loop (bounded recursion depth: log m) */
    if (mid > lo)
      solve(L, lo, mid - 1, olo, arg);
    lo = mid + 1;
    olo = arg;
  }
}

int cgrt__buckets_optimal(const struct cgrt_histogram *h, int64_t max_size, int k, int64_t *out,
                          size_t *count, double *padded) {
  *count = 0;
  if (k < 1 || max_size < 1)
    return CGRT_E_INVAL;
  size_t m = 0;
  for (size_t i = 0; i < h->n; i++) {
    if (h->sizes[i] > max_size || (i > 0 && h->sizes[i] <= h->sizes[i - 1]))
      return CGRT_E_INVAL;
    if (h->steps[i] > 0 && h->sizes[i] < max_size)
      m++;
  }
  m++; /* max_size, always a bucket */
  size_t kk = (size_t)k < m ? (size_t)k : m;
  int rc = CGRT_E_NOMEM;
  double *c = malloc((m + 1) * sizeof(*c)), *w = malloc((m + 1) * sizeof(*w));
  double *r = malloc((m + 1) * sizeof(*r)), *prev = malloc((m + 1) * sizeof(*prev));
  double *cur = malloc((m + 1) * sizeof(*cur));
  int *from = malloc(kk * (m + 1) * sizeof(*from));
  if (!c || !w || !r || !prev || !cur || !from)
    goto out;
  c[0] = w[0] = r[0] = 0;
  size_t j = 0;
  double tw = 0, tr = 0;
  for (size_t i = 0; i < h->n; i++) {
    if (h->steps[i] <= 0)
      continue;
    tw += h->steps[i];
    tr += h->tokens[i];
    if (h->sizes[i] < max_size) {
      j++;
      c[j] = (double)h->sizes[i];
      w[j] = tw;
      r[j] = tr;
    }
  }
  c[m] = (double)max_size;
  w[m] = tw; /* the weight at max_size itself, if any, is what the loop above left out */
  r[m] = tr;

  /* one bucket: max_size serves everything */
  prev[0] = INFINITY;
  for (j = 1; j <= m; j++) {
    prev[j] = c[j] * w[j] - r[j];
    from[j] = 0;
  }
  for (size_t l = 2; l <= kk; l++) {
    for (j = 0; j < l; j++)
      cur[j] = INFINITY;
    struct layer L = {c, w, r, prev, cur, from + (l - 1) * (m + 1), l - 1};
    solve(&L, l, m, l - 1, m - 1);
    double *t = prev;
    prev = cur;
    cur = t;
  }
  /* walk back from the last size, which max_size serves */
  j = m;
  for (size_t l = kk; l >= 1 && j > 0; l--) {
    out[l - 1] = (int64_t)c[j];
    j = (size_t)from[(l - 1) * (m + 1) + j];
  }
  *count = kk;
  *padded = prev[m] > 0 ? prev[m] : 0;
  rc = 0;
out:
  free(c);
  free(w);
  free(r);
  free(prev);
  free(cur);
  free(from);
  return rc;
}

/* ---------------------------------------------------------------- the adaptive histogram */

int cgrt__adapt_init(struct cgrt_bucket_adapt *a, const struct cgrt_config_view *v, char *err,
                     size_t errlen) {
  memset(a, 0, sizeof(*a));
  if (v->tp_size < 1 || v->max_tokens < v->tp_size || v->num_graphs < 1 || v->adapt_interval < 1 ||
      v->adapt_halflife < 1 || !(v->adapt_min_gain >= 0)) {
    snprintf(err, errlen,
             "buckets = adaptive needs tp_size >= 1, max_tokens >= tp_size, num_graphs >= 1, "
             "adapt_interval >= 1, adapt_halflife >= 1 and adapt_min_gain >= 0");
    return CGRT_E_INVAL;
  }
  uint64_t slots = ((uint64_t)v->max_tokens + (uint64_t)v->tp_size - 1) / (uint64_t)v->tp_size;
  if (slots > CGRT_ADAPT_MAX_SLOTS) {
    snprintf(err, errlen,
             "buckets = adaptive keeps one counter per multiple of tp_size up to max_tokens: "
             "max_tokens / tp_size = %llu is above %u; lower max_tokens or raise tp_size",
             (unsigned long long)slots, CGRT_ADAPT_MAX_SLOTS);
    return CGRT_E_INVAL;
  }
  a->max_tokens = v->max_tokens;
  a->tp = v->tp_size;
  a->k = v->num_graphs;
  a->interval = v->adapt_interval;
  a->halflife = v->adapt_halflife;
  a->min_gain = v->adapt_min_gain;
  a->slots = (size_t)slots;
  a->weight = 1;
  a->steps = calloc(a->slots, sizeof(double));
  a->tokens = calloc(a->slots, sizeof(double));
  a->scratch_sizes = malloc(a->slots * sizeof(int64_t));
  a->scratch_steps = malloc(a->slots * sizeof(double));
  a->scratch_tokens = malloc(a->slots * sizeof(double));
  if (!a->steps || !a->tokens || !a->scratch_sizes || !a->scratch_steps || !a->scratch_tokens) {
    cgrt__adapt_free(a);
    snprintf(err, errlen, "out of memory for the adaptive bucket histogram");
    return CGRT_E_NOMEM;
  }
  return 0;
}

void cgrt__adapt_free(struct cgrt_bucket_adapt *a) {
  free(a->steps);
  free(a->tokens);
  free(a->scratch_sizes);
  free(a->scratch_steps);
  free(a->scratch_tokens);
  memset(a, 0, sizeof(*a));
}

/*
 * Decay without touching every counter each step: step t is recorded with weight
 * 2^(t / halflife) relative to the last rescale, so older steps weigh less by exactly the decay.
 * Before the weights grow large, every counter is brought back to scale at once.
 */
static void rescale(struct cgrt_bucket_adapt *a) {
  double f = 1.0 / a->weight;
  for (size_t i = 0; i < a->slots; i++) {
    a->steps[i] *= f;
    a->tokens[i] *= f;
    /* a size not seen for ~1000 half-lives is forgotten rather than kept as a denormal */
    if (a->steps[i] < 1e-300) {
      a->steps[i] = 0;
      a->tokens[i] = 0;
    }
  }
  a->since_rescale = 0;
  a->weight = 1;
}

void cgrt__adapt_observe(struct cgrt_bucket_adapt *a, int64_t tokens) {
  a->observed++;
  if (tokens <= a->max_tokens) {
    int64_t need = cgrt__bucket_need(tokens, a->tp, a->max_tokens);
    size_t slot = (size_t)((need + a->tp - 1) / a->tp) - 1;
    if (slot >= a->slots)
      slot = a->slots - 1;
    a->steps[slot] += a->weight;
    a->tokens[slot] += a->weight * (double)(tokens < 1 ? 1 : tokens);
  }
  /* decay runs on steps, eager ones included */
  a->since_rescale++;
  a->weight = exp2((double)a->since_rescale / a->halflife);
  if (a->weight > 0x1p64)
    rescale(a);
}

int cgrt__adapt_due(const struct cgrt_bucket_adapt *a) {
  return a->observed > 0 && a->observed % (uint64_t)a->interval == 0;
}

/* The decayed histogram, rescaled, into the scratch arrays; *total its weight. */
static struct cgrt_histogram scratch_histogram(struct cgrt_bucket_adapt *a, double *total) {
  rescale(a);
  size_t n = 0;
  *total = 0;
  for (size_t i = 0; i < a->slots; i++) {
    if (a->steps[i] <= 0)
      continue;
    int64_t size = (int64_t)(i + 1) * a->tp;
    a->scratch_sizes[n] = size < a->max_tokens ? size : a->max_tokens;
    a->scratch_steps[n] = a->steps[i];
    a->scratch_tokens[n] = a->tokens[i];
    *total += a->steps[i];
    n++;
  }
  struct cgrt_histogram h = {a->scratch_sizes, a->scratch_steps, a->scratch_tokens, n};
  return h;
}

int cgrt__adapt_plan_time(struct cgrt_bucket_adapt *a, const int64_t *cur, size_t ncur,
                          int64_t *out, size_t *nout, int64_t *tok, size_t *ntok, double *cur_us,
                          double *new_us, double *tok_us, int *adopt) {
  *adopt = 0;
  *nout = *ntok = 0;
  if (!a->costs || !cgrt__costs_ready(a->costs))
    return CGRT_E_INVAL;
  double total = 0, padded = 0;
  struct cgrt_histogram h = scratch_histogram(a, &total);
  int rc = cgrt__buckets_fastest(&h, a->max_tokens, a->k, a->costs, 1, out, nout, new_us);
  if (rc == 0)
    rc = cgrt__buckets_optimal(&h, a->max_tokens, a->k, tok, ntok, &padded);
  if (rc != 0)
    return rc;
  *cur_us = cgrt__plan_time(&h, cur, ncur, a->costs, 1, NULL);
  *tok_us = cgrt__plan_time(&h, tok, *ntok, a->costs, 1, NULL);
  int same = *nout == ncur;
  for (size_t i = 0; same && i < ncur; i++)
    same = out[i] == cur[i];
  *adopt = total > 0 && !same && *cur_us > 0 && *cur_us - *new_us >= a->min_gain * *cur_us;
  return 0;
}

int cgrt__adapt_plan(struct cgrt_bucket_adapt *a, const int64_t *cur, size_t ncur, int64_t *out,
                     size_t *nout, double *cur_padded, double *new_padded, int *adopt) {
  *adopt = 0;
  *nout = 0;
  rescale(a);
  size_t n = 0;
  double total = 0;
  for (size_t i = 0; i < a->slots; i++) {
    if (a->steps[i] <= 0)
      continue;
    int64_t size = (int64_t)(i + 1) * a->tp;
    a->scratch_sizes[n] = size < a->max_tokens ? size : a->max_tokens;
    a->scratch_steps[n] = a->steps[i];
    a->scratch_tokens[n] = a->tokens[i];
    total += a->steps[i];
    n++;
  }
  struct cgrt_histogram h = {a->scratch_sizes, a->scratch_steps, a->scratch_tokens, n};
  double best = 0;
  int rc = cgrt__buckets_optimal(&h, a->max_tokens, a->k, out, nout, &best);
  if (rc != 0)
    return rc;
  double now = cgrt__buckets_padded(&h, cur, ncur, NULL);
  *cur_padded = total > 0 ? now / total : 0;
  *new_padded = total > 0 ? best / total : 0;
  int same = *nout == ncur;
  for (size_t i = 0; same && i < ncur; i++)
    same = out[i] == cur[i];
  *adopt = total > 0 && !same && now > 0 && now - best >= a->min_gain * now;
  return 0;
}
