/*
 * adaptive.c - `[inference] buckets = adaptive` in the runtime: the traffic histogram is the
 * core's, a backend feeds it (host->buckets_observe) and follows the set it adopts. Every
 * adapt_interval steps the optimal set for the decayed histogram is computed (bucket_plan.c); it
 * replaces the runtime's buckets when it saves at least adapt_min_gain of the padding. With
 * adapt_by = time (issue 43) the plan minimizes the expected step time instead, from the step
 * costs the backend measured (host->buckets_cost), once there are figures enough; the padded-token
 * plan is computed beside it and logged for comparison.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buckets/bucket_time.h"
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
  if (v->adapt_by == CGRT_ADAPT_BY_TIME && !(a->costs = calloc(1, sizeof(*a->costs)))) {
    cgrt__adapt_free(a);
    free(a);
    return cgrt__fail(&rt->log, CGRT_E_NOMEM, "out of memory for the adaptive bucket costs");
  }
  rt->adapt = a;
  return 0;
}

void cgrt__adaptive_close(cgrt_runtime *rt) {
  if (!rt->adapt)
    return;
  if (rt->adapt->costs) {
    cgrt__costs_free(rt->adapt->costs);
    free(rt->adapt->costs);
  }
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

int cgrt__buckets_cost(const struct cgrt_host_api *h, int64_t tokens, int64_t bucket, double us) {
  cgrt_runtime *rt = CGRT_RT(h);
  if (tokens < 1 || bucket < 0 || (bucket > 0 && bucket < tokens) || !(us >= 0))
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "buckets_cost(%lld tokens, bucket %lld, %g us): tokens must be >= 1, the "
                      "bucket 0 (eager) or >= tokens, the time >= 0",
                      (long long)tokens, (long long)bucket, us);
  struct cgrt_bucket_adapt *a = rt->adapt;
  if (!a || !a->costs)
    return 0; /* nothing plans by time */
  int rc =
      bucket ? cgrt__costs_set(a->costs, 0, bucket, us) : cgrt__costs_set(a->costs, 1, tokens, us);
  return rc ? cgrt__fail(&rt->log, rc, "out of memory keeping step costs") : 0;
}

/*
 * adapt_by = time with costs enough: plans by time. 1 when it planned (*adopt, next, *n set),
 * 0 when the costs are not ready yet (plan by tokens), < 0 on error.
 */
static int plan_by_time(cgrt_runtime *rt, struct cgrt_bucket_adapt *a, int64_t *next, size_t *n,
                        int *adopt) {
  if (!a->costs || !cgrt__costs_ready(a->costs))
    return 0;
  int64_t *tok = malloc((size_t)a->k * sizeof(*tok));
  if (!tok)
    return cgrt__fail(&rt->log, CGRT_E_NOMEM, "out of memory planning adaptive buckets");
  size_t ntok = 0;
  double now = 0, best = 0, tok_us = 0;
  int rc = cgrt__adapt_plan_time(a, rt->buckets, rt->num_buckets, next, n, tok, &ntok, &now, &best,
                                 &tok_us, adopt);
  if (rc != 0) {
    free(tok);
    if (rc == CGRT_E_CAPACITY) {
      cgrt__log(&rt->log, CGRT_LOG_DEBUG,
                "adaptive buckets: more than %d sizes in the traffic to plan by time; planning "
                "by padded tokens",
                CGRT_TIME_PLAN_MAX_SIZES);
      return 0;
    }
    return cgrt__fail(&rt->log, rc, "planning adaptive buckets by time failed (%s)",
                      cgrt_strerror(rc));
  }
  char old_set[512], new_set[512], tok_set[512];
  set_text(rt->buckets, rt->num_buckets, old_set, sizeof(old_set));
  set_text(next, *n, new_set, sizeof(new_set));
  set_text(tok, ntok, tok_set, sizeof(tok_set));
  free(tok);
  cgrt__log(&rt->log, *adopt ? CGRT_LOG_INFO : CGRT_LOG_DEBUG,
            "adaptive buckets at step %llu, by time: %s{%s} (%.1f us per step expected) %s "
            "{%s} (%.1f us); the padded-token plan {%s}: %.1f us",
            (unsigned long long)rt->graphs.step_index, *adopt ? "" : "keeping ", old_set, now,
            *adopt ? "->" : "over the best", new_set, best, tok_set, tok_us);
  return 1;
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
  int rc = plan_by_time(rt, a, next, &n, &adopt);
  if (rc < 0) {
    free(next);
    return rc;
  }
  if (rc == 1)
    goto decided;
  rc = cgrt__adapt_plan(a, rt->buckets, rt->num_buckets, next, &n, &now, &best, &adopt);
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
decided:
  if (!adopt) {
    free(next);
    return 0;
  }
  free(rt->buckets);
  rt->buckets = next;
  rt->num_buckets = n;
  rt->stats.bucket_changes++;
  *changed = 1;
  return 0;
}
