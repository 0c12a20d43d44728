/*
 * buckets.c - inference token buckets (DESIGN.md section 5): the sizes graphs are captured at,
 * and the bucket a step of T tokens is padded up to.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buckets.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return CGRT_E_INVAL;
}

/* v rounded up to a multiple of m, without overflow (v <= max_tokens, m <= max_tokens). */
static int64_t round_up(int64_t v, int64_t m) {
  int64_t r = v % m;
  if (r == 0)
    return v;
  if (v > INT64_MAX - (m - r))
    return INT64_MAX;
  return v + (m - r);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Reverses a[0..n) in place. */
static void reverse(int64_t *a, size_t n) {
  for (size_t i = 0; i < n / 2; i++) {
    int64_t t = a[i];
    a[i] = a[n - 1 - i];
    a[n - 1 - i] = t;
  }
}

/* Halving from max: at most 64 sizes, so a fixed array holds them. Leaves them descending. */
static size_t exponential(int64_t max, int num_graphs, int64_t tp, int64_t *out) {
  size_t n = 0;
  out[n++] = max;
  for (int64_t v = max / 2; v > tp; v /= 2) {
    int64_t r = round_up(v, tp);
    if (r != out[n - 1])
      out[n++] = r;
  }
  if (out[n - 1] != tp)
    out[n++] = tp;
  /* too many: drop from the small end, but the smallest (tp, one token per rank) stays */
  if (n > (size_t)num_graphs) {
    if (num_graphs == 1) {
      n = 1;
    } else {
      out[num_graphs - 1] = out[n - 1];
      n = (size_t)num_graphs;
    }
  }
  return n;
}

int cgrt__buckets_build(cgrt_bucket_dist dist, int64_t max_tokens, int num_graphs, int tp_size,
                        const int64_t *list, size_t list_len, int64_t **out, size_t *count,
                        char *err, size_t errlen) {
  if (!out || !count)
    return fail(err, errlen, "no place given for the bucket list");
  *out = NULL;
  *count = 0;
  if (max_tokens < 1)
    return fail(err, errlen, "max_tokens = %lld: must be at least 1", (long long)max_tokens);
  if (num_graphs < 1)
    return fail(err, errlen, "num_graphs = %d: must be at least 1", num_graphs);
  if (tp_size < 1)
    return fail(err, errlen, "tp_size = %d: must be at least 1", tp_size);
  if (max_tokens < tp_size)
    return fail(err, errlen,
                "max_tokens = %lld is smaller than tp_size = %d: the smallest bucket holds one "
                "token per tensor-parallel rank",
                (long long)max_tokens, tp_size);

  int64_t *sizes = NULL;
  size_t n = 0;
  switch (dist) {
  case CGRT_BUCKETS_EXPONENTIAL:
  case CGRT_BUCKETS_ADAPTIVE: /* starts from the exponential set */ {
    int64_t tmp[66];
    n = exponential(max_tokens, num_graphs, tp_size, tmp);
    if (!(sizes = malloc(n * sizeof(*sizes))))
      return CGRT_E_NOMEM;
    memcpy(sizes, tmp, n * sizeof(*sizes));
    reverse(sizes, n);
    break;
  }
  case CGRT_BUCKETS_LINEAR: {
    int64_t step = max_tokens / num_graphs + (max_tokens % num_graphs != 0);
    step = round_up(step, tp_size);
    size_t cap = (size_t)num_graphs + 1;
    if (!(sizes = malloc(cap * sizeof(*sizes))))
      return CGRT_E_NOMEM;
    /* step >= max / num_graphs, so at most num_graphs - 1 multiples lie below max */
    for (int64_t v = step; v < max_tokens && n + 1 < cap; v += step) {
      sizes[n++] = v;
      if (v > INT64_MAX - step)
        break;
    }
    sizes[n++] = max_tokens;
    break;
  }
  case CGRT_BUCKETS_LIST: {
    if (!list || list_len == 0)
      return fail(err, errlen, "buckets = list needs at least one size in list");
    for (size_t i = 0; i < list_len; i++)
      if (list[i] < 1)
        return fail(err, errlen, "list holds %lld: every size must be at least 1",
                    (long long)list[i]);
    if (!(sizes = malloc(list_len * sizeof(*sizes))))
      return CGRT_E_NOMEM;
    memcpy(sizes, list, list_len * sizeof(*sizes));
    qsort(sizes, list_len, sizeof(*sizes), cmp_i64);
    for (size_t i = 0; i < list_len; i++)
      if (n == 0 || sizes[n - 1] != sizes[i])
        sizes[n++] = sizes[i];
    break;
  }
  default:
    return fail(err, errlen, "buckets = %d: expected exponential, linear or list", (int)dist);
  }
  *out = sizes;
  *count = n;
  return 0;
}

long cgrt__bucket_index(const int64_t *sizes, size_t count, int64_t tokens) {
  if (!sizes || count == 0)
    return -1;
  if (tokens > sizes[count - 1])
    return -1;
  /* the first size >= tokens */
  size_t lo = 0, hi = count - 1;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (sizes[mid] >= tokens)
      hi = mid;
    else
      lo = mid + 1;
  }
  return (long)lo;
}
