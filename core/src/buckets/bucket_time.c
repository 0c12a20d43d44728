/*
 * bucket_time.c - token buckets chosen by time (issue 43).
 *
 * The planner. Let c_1 < ... < c_m be the sizes with weight (c_m = max_size, forced), w_k their
 * step weights, R(b) the model's replay time at bucket b and E(s) its eager time at size s. A
 * bucket at c_j serving sizes c_{i+1}..c_j costs
 *     cost(i, j) = sum over k in (i, j] of w_k min(R(c_j), E(c_k))    (eager allowed)
 * or w_k R(c_j) (eager not allowed), and
 *     best[l][j] = min over i < j of best[l-1][i] + cost(i, j).
 * Unlike padded tokens, this cost is not Monge in general (R is measured, not linear), so each
 * layer is solved by brute force, O(m^2), cost(i, j) accumulated as i walks down from j. Every
 * bucket but max_size can be lowered to the largest size it serves without raising the time when
 * R grows with b; where a measured R does not, the plan is still the best over those candidates.
 * The answer is the best over l <= k layers, so fewer buckets come back when more would not help.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bucket_time.h"

static int put_point(struct cgrt_cost_point **v, size_t *n, size_t *cap, int64_t size, double us) {
  size_t i = 0;
  while (i < *n && (*v)[i].size < size)
    i++;
  if (i < *n && (*v)[i].size == size) {
    (*v)[i].us = us;
    return 0;
  }
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    struct cgrt_cost_point *nv = realloc(*v, nc * sizeof(*nv));
    if (!nv)
      return CGRT_E_NOMEM;
    *v = nv;
    *cap = nc;
  }
  memmove(&(*v)[i + 1], &(*v)[i], (*n - i) * sizeof(**v));
  (*v)[i].size = size;
  (*v)[i].us = us;
  (*n)++;
  return 0;
}

int cgrt__costs_set(struct cgrt_step_costs *c, int eager, int64_t size, double us) {
  if (size < 1 || !(us >= 0) || isinf(us))
    return CGRT_E_INVAL;
  return eager ? put_point(&c->eager, &c->neager, &c->cap_eager, size, us)
               : put_point(&c->replay, &c->nreplay, &c->cap_replay, size, us);
}

void cgrt__costs_free(struct cgrt_step_costs *c) {
  free(c->replay);
  free(c->eager);
  memset(c, 0, sizeof(*c));
}

int cgrt__costs_ready(const struct cgrt_step_costs *c) {
  return c->nreplay >= 2 && c->neager >= 2;
}

double cgrt__costs_at(const struct cgrt_cost_point *p, size_t n, int64_t size) {
  if (n == 0)
    return 0;
  if (n == 1)
    return p[0].us;
  size_t hi = 1;
  while (hi < n - 1 && p[hi].size < size)
    hi++;
  const struct cgrt_cost_point *a = &p[hi - 1], *b = &p[hi];
  double t = ((double)size - (double)a->size) / ((double)b->size - (double)a->size);
  double v = a->us + t * (b->us - a->us);
  return v > 0 ? v : 0;
}

double cgrt__plan_time(const struct cgrt_histogram *h, const int64_t *buckets, size_t nb,
                       const struct cgrt_step_costs *c, int eager_ok, double *eager_steps) {
  double total = 0, weight = 0, eager = 0;
  size_t b = 0;
  for (size_t i = 0; i < h->n; i++) {
    if (h->steps[i] <= 0)
      continue;
    weight += h->steps[i];
    while (b < nb && buckets[b] < h->sizes[i])
      b++;
    double e = cgrt__costs_at(c->eager, c->neager, h->sizes[i]);
    if (b == nb) {
      total += h->steps[i] * e;
      eager += h->steps[i];
      continue;
    }
    double r = cgrt__costs_at(c->replay, c->nreplay, buckets[b]);
    if (eager_ok && e < r) {
      total += h->steps[i] * e;
      eager += h->steps[i];
    } else {
      total += h->steps[i] * r;
    }
  }
  if (eager_steps)
    *eager_steps = eager;
  return weight > 0 ? total / weight : 0;
}

int cgrt__buckets_fastest(const struct cgrt_histogram *h, int64_t max_size, int k,
                          const struct cgrt_step_costs *c, int eager_ok, int64_t *out,
                          size_t *count, double *time) {
  *count = 0;
  *time = 0;
  if (k < 1 || max_size < 1 || !cgrt__costs_ready(c))
    return CGRT_E_INVAL;
  size_t m = 0;
  double weight = 0;
  for (size_t i = 0; i < h->n; i++) {
    if (h->sizes[i] > max_size || (i > 0 && h->sizes[i] <= h->sizes[i - 1]))
      return CGRT_E_INVAL;
    if (h->steps[i] > 0 && h->sizes[i] < max_size)
      m++;
    if (h->steps[i] > 0)
      weight += h->steps[i];
  }
  m++; /* max_size, always a bucket */
  if (m > CGRT_TIME_PLAN_MAX_SIZES)
    return CGRT_E_CAPACITY;
  size_t kk = (size_t)k < m ? (size_t)k : m;
  int rc = CGRT_E_NOMEM;
  /* index 0 is "nothing"; 1..m the sizes */
  int64_t *size = malloc((m + 1) * sizeof(*size));
  double *w = calloc(m + 1, sizeof(*w)), *rj = malloc((m + 1) * sizeof(*rj));
  double *ek = malloc((m + 1) * sizeof(*ek));
  double *prev = malloc((m + 1) * sizeof(*prev)), *cur = malloc((m + 1) * sizeof(*cur));
  int *from = malloc(kk * (m + 1) * sizeof(*from));
  double *last = malloc(kk * sizeof(*last)); /* best[l][m] */
  if (!size || !w || !rj || !ek || !prev || !cur || !from || !last)
    goto out;
  size_t j = 0;
  for (size_t i = 0; i < h->n; i++) {
    if (h->steps[i] <= 0)
      continue;
    if (h->sizes[i] < max_size) {
      size[++j] = h->sizes[i];
      w[j] = h->steps[i];
    } else {
      w[m] += h->steps[i];
    }
  }
  size[m] = max_size;
  for (j = 1; j <= m; j++) {
    rj[j] = cgrt__costs_at(c->replay, c->nreplay, size[j]);
    ek[j] = cgrt__costs_at(c->eager, c->neager, size[j]);
  }
#define SERVE(kx, jx) (w[kx] * (eager_ok && ek[kx] < rj[jx] ? ek[kx] : rj[jx]))
  prev[0] = INFINITY;
  for (j = 1; j <= m; j++) {
    double acc = 0;
    for (size_t x = 1; x <= j; x++)
      acc += SERVE(x, j);
    prev[j] = acc;
    from[j] = 0;
  }
  last[0] = prev[m];
  for (size_t l = 2; l <= kk; l++) {
    int *fl = from + (l - 1) * (m + 1);
    for (j = 0; j < l; j++)
      cur[j] = INFINITY;
    for (j = l; j <= m; j++) {
      double acc = 0, best = INFINITY;
      size_t arg = l - 1;
      for (size_t i = j; i-- > l - 1;) {
        acc += SERVE(i + 1, j);
        double v = prev[i] + acc;
        if (v < best) {
          best = v;
          arg = i;
        }
      }
      cur[j] = best;
      fl[j] = (int)arg;
    }
    double *t = prev;
    prev = cur;
    cur = t;
    last[l - 1] = prev[m];
  }
#undef SERVE
  /* the fewest buckets that reach the least time */
  size_t use = 1;
  for (size_t l = 2; l <= kk; l++)
    if (last[l - 1] < last[use - 1] * (1 - 1e-12))
      use = l;
  j = m;
  for (size_t l = use; l >= 1 && j > 0; l--) {
    out[l - 1] = size[j];
    j = (size_t)from[(l - 1) * (m + 1) + j];
  }
  *count = use;
  *time = weight > 0 ? last[use - 1] / weight : 0;
  rc = 0;
out:
  free(size);
  free(w);
  free(rj);
  free(ek);
  free(prev);
  free(cur);
  free(from);
  free(last);
  return rc;
}
