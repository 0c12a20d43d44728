/*
 * adaptive.c - `[inference] buckets = adaptive` in the runtime: the traffic histogram is the
 * core's, a backend feeds it (host->buckets_observe) and follows the set it adopts. Every
 * adapt_interval steps the optimal set for the decayed histogram is computed (bucket_plan.c); it
 * replaces the runtime's buckets when it saves at least adapt_min_gain of the padding.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostapi.h"
#include "runtime.h"

int cgrt__adaptive_open(cgrt_runtime *rt) {
  const struct cgrt_config_view *v = &rt->cfg.view;
  if (v->buckets != CGRT_BUCKETS_ADAPTIVE)
    return 0;
  if (!(rt->lib.vt->caps & CGRT_CAP_ADAPTIVE_BUCKETS))
    return cgrt__fail(&rt->log, CGRT_E_CONFIG,
                      "%s: [inference] buckets = adaptive, but backend '%s' does not follow "
                      "adaptive buckets (it lacks CGRT_CAP_ADAPTIVE_BUCKETS); use buckets = "
                      "exponential, linear or list, or impl = local",
                      rt->cfg.source, rt->lib.vt->name);
  char err[512];
  struct cgrt_bucket_adapt *a = calloc(1, sizeof(*a));
  if (!a)
    return cgrt__fail(&rt->log, CGRT_E_NOMEM, "out of memory for the adaptive bucket histogram");
  int rc = cgrt__adapt_init(a, v, err, sizeof(err));
  if (rc != 0) {
    free(a);
    return cgrt__fail(&rt->log, rc == CGRT_E_NOMEM ? rc : CGRT_E_CONFIG, "%s: [inference] %s",
                      rt->cfg.source, err);
  }
  rt->adapt = a;
  return 0;
}

void cgrt__adaptive_close(cgrt_runtime *rt) {
  if (!rt->adapt)
    return;
  cgrt__adapt_free(rt->adapt);
  free(rt->adapt);
  rt->adapt = NULL;
}

/* "1 2 4 8" from sizes, ascending, cut with "..." if it does not fit. */
static void set_text(const int64_t *sizes, size_t n, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    int w = snprintf(buf + off, len - off, "%s%lld", i ? " " : "", (long long)sizes[i]);
    if (w < 0 || (size_t)w >= len - off) {
      snprintf(buf + (len > 4 ? len - 4 : 0), len > 4 ? 4 : len, "...");
      return;
    }
    off += (size_t)w;
  }
}

int cgrt__buckets_observe(const struct cgrt_host_api *h, int64_t tokens, int *changed) {
  cgrt_runtime *rt = CGRT_RT(h);
  *changed = 0;
  struct cgrt_bucket_adapt *a = rt->adapt;
  if (!a)
    return 0;
  cgrt__adapt_observe(a, tokens);
  if (!cgrt__adapt_due(a))
    return 0;
  int64_t *next = malloc((size_t)a->k * sizeof(*next));
  if (!next)
    return cgrt__fail(&rt->log, CGRT_E_NOMEM, "out of memory planning adaptive buckets");
  size_t n = 0;
  double now = 0, best = 0;
  int adopt = 0;
  int rc = cgrt__adapt_plan(a, rt->buckets, rt->num_buckets, next, &n, &now, &best, &adopt);
  if (rc != 0) {
    free(next);
    return cgrt__fail(&rt->log, rc, "planning adaptive buckets failed (%s)", cgrt_strerror(rc));
  }
  char old_set[512], new_set[512];
  set_text(rt->buckets, rt->num_buckets, old_set, sizeof(old_set));
  set_text(next, n, new_set, sizeof(new_set));
  if (!adopt) {
    cgrt__log(&rt->log, CGRT_LOG_DEBUG,
              "adaptive buckets at step %llu: keeping {%s} (%.2f padded tokens per step; the "
              "best set {%s} would pad %.2f, less than adapt_min_gain = %g%% saved)",
              (unsigned long long)rt->graphs.step_index, old_set, now, new_set, best,
              a->min_gain * 100.0);
    free(next);
    return 0;
  }
  cgrt__log(&rt->log, CGRT_LOG_INFO,
            "adaptive buckets at step %llu: {%s} -> {%s}; expected padding %.2f -> %.2f tokens "
            "per step (%.1f%% less)",
            (unsigned long long)rt->graphs.step_index, old_set, new_set, now, best,
            now > 0 ? 100.0 * (now - best) / now : 0.0);
  free(rt->buckets);
  rt->buckets = next;
  rt->num_buckets = n;
  rt->stats.bucket_changes++;
  *changed = 1;
  return 0;
}
