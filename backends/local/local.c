/*
 * local.c - Megatron-LM's per-layer graph manager, in C.
 *
 * Training and evaluation: every module call of a scoped kind (all kinds when `modules` is
 * empty) is keyed by (module, direction, microbatch, the host's key, phase). A key runs eagerly
 * for warmup_steps calls, is captured on the next and replayed afterwards; forward and backward
 * graphs are separate. Inference: the step's tokens select the smallest token bucket that holds
 * them (prepare pads up to it); scope `layer` graphs each module call per bucket, scope `block`
 * the whole body per bucket; a step above the largest bucket runs eagerly. With
 * `[inference] capture = eager` every bucket is captured, largest first, at the first step after
 * warm-up. With `[inference] buckets = adaptive` the core plans the bucket set from the traffic
 * (host->buckets_observe); when it adopts a new set, the graphs of buckets no longer in it are
 * retired from the cache, and new buckets are captured lazily at their first use, or, with
 * `capture = eager`, one bucket per step, so no step waits for more than one bucket's capture.
 *
 * With `[local] by_time = on` (off by default until measured on a GPU: docs/decisions.md, issue
 * 43) a padded inference step's device time is measured against eager steps at its own size, and
 * a token count whose padded replay is measurably slower is served eagerly or by an exact-size
 * bucket (bytime.h has the rule).
 *
 * The mechanism (warm-up counts, capture, LRU bound, rebind policy, stats) is the core's graph
 * cache; this file is the policy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bytime.h"
#include "cgrt/backend.h"
#include "rules.h"
#include "step_cost.h"

struct local_state {
  const struct cgrt_host_api *h;
  const struct cgrt_config_view *cfg;
  struct cgrt_graph_cache *cache;
  int eager_body; /* a step above the largest bucket: every call runs directly */
  int64_t infer_steps;
  int eager_capture_done;
  int adaptive; /* [inference] buckets = adaptive */
  int64_t *set; /* adaptive: the bucket set the cache's graphs were built for */
  size_t nset;
  int64_t *pending; /* adaptive, capture = eager: new buckets still to capture, largest last */
  size_t npending;
  /* its own figures (local_figures) */
  uint64_t above_buckets;  /* infer steps above the largest bucket, run eagerly */
  uint64_t sets_followed;  /* adaptive bucket sets followed */
  uint64_t graphs_retired; /* executables of buckets that left the set */
  struct bytime *bt;       /* [local] by_time = on: buckets chosen by time, else NULL */
};

static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Backends link nothing of libcgrt: the few names they print are their own. */
static const char *const kind_names[CGRT_KIND_COUNT] = {
    "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "other"};

static int scoped(const struct local_state *s, cgrt_kind kind) {
  return s->cfg->modules == 0 || (s->cfg->modules & CGRT_KIND_BIT(kind));
}

static int local_call(void *state, struct cgrt_call *c) {
  struct local_state *s = state;
  const struct cgrt_host_api *h = s->h;
  cgrt_ctx *ctx = c->ctx;
  if (c->in_body_graph || s->eager_body || !scoped(s, c->module->kind)) {
    /* Part of a whole-body unit, a step above the buckets, or an unscoped kind: run directly. */
    if (!c->in_body_graph)
      ctx->mode = CGRT_MODE_EAGER;
    return h->run_module(h, c);
  }
  struct cgrt_graph_key key = {
      .module = c->module->id,
      .dir = (uint32_t)c->dir,
      .microbatch = c->args->microbatch,
      .phase = (uint32_t)ctx->phase,
      .shape = c->args->key,
      .extra = ctx->phase == CGRT_PHASE_INFER ? (uint64_t)ctx->padded_tokens : 0,
  };
  cgrt_mode mode;
  return h->run_call_graph(h, s->cache, c, &key, s->cfg->warmup_steps, &mode);
}

/* ---------------------------------------------------------------- steps */

/* Block scope: the whole body of bucket ctx->padded_tokens as one unit of the cache. */
static int run_block(struct local_state *s, struct cgrt_step_frame *f, cgrt_mode *mode) {
  struct cgrt_graph_key key = {
      .module = CGRT_KEY_BODY, .phase = CGRT_PHASE_INFER, .shape = (uint64_t)f->ctx->padded_tokens};
  return s->h->run_body_graph(s->h, s->cache, f, &key, s->cfg->warmup_steps, mode);
}

/* One pass of prepare and body at the bucket in ctx->padded_tokens. */
static int run_pass(struct local_state *s, struct cgrt_step_frame *f) {
  const struct cgrt_host_api *h = s->h;
  int rc = h->run_prepare(h, f);
  if (rc != 0)
    return rc;
  if (f->ctx->phase == CGRT_PHASE_INFER && s->cfg->inference_scope == CGRT_SCOPE_BLOCK) {
    cgrt_mode mode;
    return run_block(s, f, &mode);
  }
  f->ctx->mode = CGRT_MODE_EAGER;
  rc = h->run_body(h, f);
  f->ctx->mode = h->calls_mode(h);
  return rc;
}

/*
 * capture = eager: at the first step after warm-up, every bucket is warmed and captured, largest
 * first (its graph memory is then the pool the smaller ones reuse). The host's prepare runs for
 * each pass, and again for the step itself afterwards, so the static inputs end up as the step
 * staged them.
 */
static int capture_all_buckets(struct local_state *s, struct cgrt_step_frame *f) {
  const struct cgrt_host_api *h = s->h;
  const int64_t *sizes;
  size_t n;
  h->buckets(h, &sizes, &n);
  int64_t own = f->ctx->padded_tokens, tokens = f->ctx->tokens;
  struct timespec all;
  clock_gettime(CLOCK_MONOTONIC, &all);
  int rc = 0;
  for (size_t i = n; rc == 0 && i-- > 0;) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* A pass at a smaller bucket than the step's own holds only as many real tokens. */
    f->ctx->padded_tokens = sizes[i];
    f->ctx->tokens = tokens < sizes[i] ? tokens : sizes[i];
    for (int pass = 0; rc == 0 && pass <= s->cfg->warmup_steps; pass++)
      rc = run_pass(s, f);
    if (rc == 0)
      h->log(h, CGRT_LOG_INFO, "capture = eager: bucket %zu/%zu (%lld tokens) ready in %.1f ms",
             n - i, n, (long long)sizes[i], ms_since(&t0));
  }
  f->ctx->padded_tokens = own;
  f->ctx->tokens = tokens;
  if (rc == 0)
    h->log(h, CGRT_LOG_INFO, "capture = eager: %zu buckets captured in %.1f ms", n, ms_since(&all));
  return rc;
}

/* ---------------------------------------------------------------- adaptive buckets */

static int in_set(const int64_t *set, size_t n, int64_t v) {
  for (size_t i = 0; i < n; i++)
    if (set[i] == v)
      return 1;
  return 0;
}

/* A graph of an inference bucket: block scope keys the body by it, layer scope each call. */
static int graph_of_bucket(void *arg, const struct cgrt_graph_key *key) {
  int64_t bucket = *(const int64_t *)arg;
  if (key->phase != CGRT_PHASE_INFER)
    return 0;
  return key->module == CGRT_KEY_BODY ? key->shape == (uint64_t)bucket
                                      : key->extra == (uint64_t)bucket;
}

/* Copies the core's bucket set into s->set (and sizes s->pending to hold it). */
static int remember_set(struct local_state *s) {
  const int64_t *sizes;
  size_t n;
  s->h->buckets(s->h, &sizes, &n);
  int64_t *set = malloc((n ? n : 1) * sizeof(*set));
  int64_t *pending = malloc((n ? n : 1) * sizeof(*pending));
  if (!set || !pending) {
    free(set);
    free(pending);
    return s->h->set_error(s->h, CGRT_E_NOMEM, "local: out of memory following adaptive buckets");
  }
  memcpy(set, sizes, n * sizeof(*set));
  /* pending buckets that are still in the set stay pending */
  size_t np = 0;
  for (size_t i = 0; i < s->npending; i++)
    if (in_set(sizes, n, s->pending[i]))
      pending[np++] = s->pending[i];
  free(s->set);
  free(s->pending);
  s->set = set;
  s->nset = n;
  s->pending = pending;
  s->npending = np;
  return 0;
}

/*
 * The core adopted a new bucket set: the graphs of buckets that left it are retired (executables
 * destroyed, warm-up forgotten), and under capture = eager the buckets that joined it are queued
 * for capture, one per step, largest first.
 */
static int follow_new_set(struct local_state *s) {
  const struct cgrt_host_api *h = s->h;
  size_t retired = 0, dropped, n;
  const int64_t *sizes;
  h->buckets(h, &sizes, &n);
  for (size_t i = 0; i < s->nset; i++) {
    if (in_set(sizes, n, s->set[i]))
      continue;
    int rc = h->cache_retire(h, s->cache, graph_of_bucket, &s->set[i], &dropped);
    if (rc != 0)
      return rc;
    retired += dropped;
  }
  s->sets_followed++;
  s->graphs_retired += retired;
  int64_t *old = s->set;
  size_t nold = s->nset;
  s->set = NULL;
  int rc = remember_set(s);
  if (rc == 0 && s->cfg->capture == CGRT_CAPTURE_EAGER && s->eager_capture_done)
    for (size_t i = 0; i < s->nset; i++) /* ascending: the largest is popped first */
      if (!in_set(old, nold, s->set[i]) && !in_set(s->pending, s->npending, s->set[i]))
        s->pending[s->npending++] = s->set[i];
  free(old);
  h->log(h, CGRT_LOG_DEBUG,
         "local: bucket set changed: %zu executables retired, %zu buckets to "
         "capture",
         retired, s->npending);
  if (rc == 0 && s->bt)
    rc = bytime_forget(s->bt); /* every count is measured again against its new bucket */
  return rc;
}

/*
 * capture = eager after a set change: warms and captures one queued bucket before the step: the
 * step's own bucket if it is queued (so the step replays it), else the largest queued one.
 */
static int capture_pending(struct local_state *s, struct cgrt_step_frame *f) {
  int64_t own = f->ctx->padded_tokens, tokens = f->ctx->tokens;
  for (size_t i = 0; i + 1 < s->npending; i++)
    if (s->pending[i] == own) {
      memmove(&s->pending[i], &s->pending[i + 1], (s->npending - 1 - i) * sizeof(*s->pending));
      s->pending[s->npending - 1] = own;
      break;
    }
  int64_t bucket = s->pending[--s->npending];
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  f->ctx->padded_tokens = bucket;
  f->ctx->tokens = tokens < bucket ? tokens : bucket;
  int rc = 0;
  for (int pass = 0; rc == 0 && pass <= s->cfg->warmup_steps; pass++)
    rc = run_pass(s, f);
  f->ctx->padded_tokens = own;
  f->ctx->tokens = tokens;
  if (rc == 0)
    s->h->log(s->h, CGRT_LOG_INFO, "adaptive buckets: bucket %lld captured in %.1f ms",
              (long long)bucket, ms_since(&t0));
  return rc;
}

/* A step run eagerly at its own size: prepare sees no padding, every call runs directly. */
static int run_unpadded(struct local_state *s, struct cgrt_step_frame *f) {
  const struct cgrt_host_api *h = s->h;
  f->ctx->padded_tokens = f->ctx->tokens;
  f->ctx->mode = CGRT_MODE_EAGER;
  s->eager_body = 1;
  int rc = h->run_prepare(h, f);
  if (rc == 0)
    rc = h->run_body(h, f);
  s->eager_body = 0;
  return rc;
}

/*
 * by_time: a padded step served the way its count's measurements chose (bytime.h), timed on the
 * device when a round measures it: at its bucket, eagerly at its own size, or at an exact-size
 * bucket.
 */
static int run_by_time(struct local_state *s, struct cgrt_step_frame *f) {
  struct bytime_step st;
  int rc = bytime_choose(s->bt, f->ctx->tokens, f->ctx->padded_tokens, &st);
  if (rc != 0)
    return rc;
  if (st.way == BYTIME_EAGER) {
    rc = run_unpadded(s, f);
  } else {
    if (st.way == BYTIME_EXACT)
      f->ctx->padded_tokens = f->ctx->tokens;
    rc = run_pass(s, f);
  }
  int erc = rc == 0 ? bytime_end(s->bt, &st, f->ctx->mode, step_cost_copied(f->report)) : 0;
  return rc != 0 ? rc : erc;
}

static int local_step(void *state, struct cgrt_step_frame *f) {
  struct local_state *s = state;
  const struct cgrt_host_api *h = s->h;
  cgrt_ctx *ctx = f->ctx;
  int rc = 0;
  if (ctx->phase == CGRT_PHASE_INFER) {
    if (s->adaptive) {
      int changed = 0;
      rc = h->buckets_observe(h, ctx->tokens, &changed);
      if (rc == 0 && changed)
        rc = follow_new_set(s);
      if (rc != 0)
        return rc;
    }
    int64_t bucket;
    if (h->bucket_for_tokens(h, ctx->tokens, &bucket) != 0) {
      /* Above the largest bucket: no graph holds it, the step runs eagerly. */
      h->log(h, CGRT_LOG_DEBUG, "%s; step %llu runs eagerly", h->last_error(h),
             (unsigned long long)ctx->step);
      s->above_buckets++;
      return run_unpadded(s, f);
    }
    ctx->padded_tokens = bucket;
    if (s->cfg->capture == CGRT_CAPTURE_EAGER && !s->eager_capture_done &&
        s->infer_steps >= s->cfg->warmup_steps) {
      s->eager_capture_done = 1;
      rc = capture_all_buckets(s, f);
    } else if (s->npending > 0) {
      rc = capture_pending(s, f);
    }
    s->infer_steps++;
    if (rc == 0 && s->bt && bucket > ctx->tokens)
      return run_by_time(s, f);
  }
  return rc == 0 ? run_pass(s, f) : rc;
}

/* ---------------------------------------------------------------- lifecycle */

static int local_init(const struct cgrt_host_api *h, const struct cgrt_config_view *cfg,
                      void **state, char *err, size_t errlen) {
  if (cfg->inference_scope != CGRT_SCOPE_LAYER && cfg->inference_scope != CGRT_SCOPE_BLOCK) {
    snprintf(err, errlen, "backend local needs [cuda_graph] inference_scope = layer or block");
    return CGRT_E_CONFIG;
  }
  struct local_state *s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return CGRT_E_NOMEM;
  }
  s->h = h;
  s->cfg = cfg;
  s->adaptive = cfg->buckets == CGRT_BUCKETS_ADAPTIVE;
  if (s->adaptive && !CGRT_HOST_HAS(h, buckets_observe)) {
    snprintf(err, errlen, "buckets = adaptive needs a core with host API minor 1 or later");
    free(s);
    return CGRT_E_CONFIG;
  }
  int rc = h->cache_create(h, cfg->max_graphs, cfg->rebind, &s->cache);
  if (rc == 0 && s->adaptive)
    rc = remember_set(s);
  /* [local] by_time and exact_buckets: declared options, so a core of minor 4 or later has them */
  int64_t by_time = 0, exact = 0;
  if (rc == 0 && CGRT_VIEW_HAS(cfg, get_int) && cfg->get_int &&
      cfg->get_int(cfg, "local", "by_time", &by_time) == 0 && by_time &&
      cfg->get_int(cfg, "local", "exact_buckets", &exact) == 0)
    rc = bytime_create(h, s->cache, (int)exact,
                       CGRT_VIEW_HAS(cfg, max_queued_steps) ? cfg->max_queued_steps : 0, &s->bt);
  if (rc != 0) {
    snprintf(err, errlen, "%s", h->last_error(h));
    h->cache_destroy(h, s->cache);
    free(s->set);
    free(s->pending);
    free(s);
    return rc;
  }
  *state = s;
  return 0;
}

static void local_fini(void *state) {
  struct local_state *s = state;
  bytime_destroy(s->bt);
  s->h->cache_destroy(s->h, s->cache);
  free(s->set);
  free(s->pending);
  free(s);
}

static int local_release(void *state) {
  struct local_state *s = state;
  s->h->cache_clear(s->h, s->cache);
  s->infer_steps = 0;
  s->eager_capture_done = 0;
  s->npending = 0;
  return 0;
}

/* cgrt_stats: by_time's counts (issue 43), on top of the core's counters. */
static int local_stats(void *state, cgrt_stats *out) {
  struct local_state *s = state;
  struct bytime_figures b = {0};
  if (s->bt)
    bytime_figures(s->bt, &b);
  if (out->struct_size < offsetof(cgrt_stats, time_exact_counts) + sizeof(out->time_exact_counts))
    return 0; /* a host built before these fields: nothing of ours to fill */
  out->timed_steps = b.timed_steps;
  out->time_probe_steps = b.probe_steps;
  out->time_eager_steps = b.eager_steps;
  out->time_exact_steps = b.exact_steps;
  out->time_eager_counts = b.eager_counts;
  out->time_exact_counts = b.exact_counts;
  if (out->struct_size < offsetof(cgrt_stats, time_rare_refused) + sizeof(out->time_rare_refused))
    return 0;
  out->time_implied_counts = b.implied_counts;
  out->time_rare_refused = b.rare_refused;
  return 0;
}

/* What local decides that cgrt_stats does not count (cgrt_backend_figures). */
static int local_figures(void *state, void (*emit)(void *user, const char *name, uint64_t value),
                         void *user) {
  struct local_state *s = state;
  emit(user, "infer_steps_above_buckets", s->above_buckets);
  emit(user, "bucket_sets_followed", s->sets_followed);
  emit(user, "graphs_retired_with_their_bucket", s->graphs_retired);
  if (s->bt) { /* steps run at their bucket to measure its replay while its counts ran eagerly */
    struct bytime_figures b;
    bytime_figures(s->bt, &b);
    emit(user, "by_time_graph_probe_steps", b.graph_probe_steps);
    emit(user, "by_time_pooled_rounds", b.pooled_rounds);
    emit(user, "by_time_pooled_probe_steps", b.pooled_probe_steps);
    emit(user, "by_time_waited_samples", b.waited_samples);
    emit(user, "by_time_copied_samples", b.copied_samples);
    emit(user, "by_time_copied_rechecks", b.copied_rechecks);
    emit(user, "by_time_watched_steps", b.watched_steps);
    emit(user, "by_time_eager_overturned", b.eager_overturned);
    emit(user, "by_time_bound_buckets", b.bound_buckets);
    emit(user, "by_time_untimed_steps", b.untimed_steps);
    emit(user, "by_time_set_aside_rounds", b.set_aside_rounds);
  }
  return 0;
}

static int local_describe(void *state, void (*emit)(void *user, const char *line), void *user) {
  struct local_state *s = state;
  const struct cgrt_config_view *c = s->cfg;
  static const char *const rebind[] = {"update", "copy", "recapture", "error", "auto"};
  char line[512];
  int n = 0;
  if (c->modules == 0)
    n = snprintf(line, sizeof(line), "train/eval: every module call is graphed");
  else {
    n = snprintf(line, sizeof(line), "train/eval: calls of kinds");
    for (int k = 0; k < CGRT_KIND_COUNT; k++)
      if (c->modules & CGRT_KIND_BIT(k))
        n += snprintf(line + n, sizeof(line) - (size_t)n, " %s", kind_names[k]);
    n += snprintf(line + n, sizeof(line) - (size_t)n, " are graphed, others run eagerly");
  }
  snprintf(line + n, sizeof(line) - (size_t)n,
           "; one graph per (module, direction, microbatch, phase, args.key) after %d eager calls",
           c->warmup_steps);
  emit(user, line);
  const int64_t *sizes;
  size_t count;
  s->h->buckets(s->h, &sizes, &count);
  n = snprintf(line, sizeof(line), "inference: scope %s, %s capture, buckets",
               c->inference_scope == CGRT_SCOPE_BLOCK ? "block (the whole body per bucket)"
                                                      : "layer (each module call per bucket)",
               c->capture == CGRT_CAPTURE_EAGER ? "eager" : "lazy");
  for (size_t i = count; i-- > 0 && n < (int)sizeof(line) - 16;)
    n += snprintf(line + n, sizeof(line) - (size_t)n, " %lld", (long long)sizes[i]);
  emit(user, line);
  snprintf(line, sizeof(line),
           "at most %d live executables (least recently used evicted); moved buffers: rebind = "
           "%s; steps above %lld tokens run eagerly",
           c->max_graphs, rebind[c->rebind], (long long)(count ? sizes[count - 1] : 0));
  emit(user, line);
  if (s->bt)
    emit(user, "by_time = on: a token count whose padded replay is measured slower than eager at "
               "its own size (device time, medians of 8 steps each, 2% margin) is served by an "
               "exact-size bucket within exact_buckets and memory_budget, else eagerly; measured "
               "again every 2048 of its steps");
  if (s->adaptive) {
    snprintf(line, sizeof(line),
             "buckets = adaptive: the set above is the start; every %d inference steps the %d "
             "buckets with the least padding for the traffic seen (half-life %d steps) replace it "
             "when they pad at least %g%% less; retired buckets' graphs are freed, new ones "
             "captured %s",
             c->adapt_interval, c->num_graphs, c->adapt_halflife, c->adapt_min_gain * 100.0,
             c->capture == CGRT_CAPTURE_EAGER ? "one per step" : "at first use");
    emit(user, line);
  }
  emit(user, c->inference_scope == CGRT_SCOPE_BLOCK
                 ? "replay key: (module, direction, microbatch, phase, args.key); infer: (token "
                   "bucket)"
                 : "replay key: (module, direction, microbatch, phase, args.key); infer: (module, "
                   "direction, microbatch, phase, args.key, token bucket)");
  return 0;
}

/*
 * local's options: its default of a core key, [cuda_graph] inference_scope = layer (one graph per
 * module call and bucket), where other backends' is none; and its own [local] by_time (on by
 * default since session 41: docs/decisions.md, issue 43, "Default on") and exact_buckets.
 */
static const struct cgrt_option local_options[] = {
    {.name = "cuda_graph.inference_scope",
     .type = CGRT_OPTION_ENUM,
     .def = "layer",
     .values = "none layer block",
     .meaning = "what one inference graph holds: local's default is one module call"},
    {.name = "by_time",
     .type = CGRT_OPTION_BOOL,
     .def = "on",
     .meaning = "a token count whose padded replay is measured slower than eager is served "
                "eagerly or by an exact-size bucket"},
    {.name = "exact_buckets",
     .type = CGRT_OPTION_INT,
     .def = "4",
     .min = 0,
     .max = 64,
     .meaning = "exact-size buckets by_time may add (within memory_budget)"},
};

/* Per-module graphs (or a body per bucket): a scope of layer or block. No full recomputation and
   adaptive buckets are the core's rules, by its caps. */
static int local_check(const struct cgrt_config_view *cfg,
                       void (*report)(void *user, int line, const char *message), void *user) {
  struct rules r = {cfg, report, user, 0};
  char d[256];
  rules_cp_scope_unread(&r);
  if (cfg->inference_scope == CGRT_SCOPE_NONE) {
    int line = rules_key(&r, "cuda_graph", "inference_scope", d, sizeof(d));
    rules_say(&r, line ? line : rules_impl_line(&r),
              "impl = local needs [cuda_graph] inference_scope = layer or block, but %s; write "
              "layer (one graph per module) or block (one graph per step body), or leave it out "
              "for layer",
              d);
  }
  return r.errors ? CGRT_E_CONFIG : 0;
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "local",
    .caps = CGRT_CAP_TRAINING | CGRT_CAP_INFERENCE | CGRT_CAP_BACKWARD | CGRT_CAP_GRAPHS |
            CGRT_CAP_TOKEN_BUCKETS | CGRT_CAP_ADAPTIVE_BUCKETS,
    .init = local_init,
    .fini = local_fini,
    .step = local_step,
    .call = local_call,
    .release = local_release,
    .stats = local_stats,
    .describe = local_describe,
    .figures = local_figures,
    .options = local_options,
    .num_options = sizeof(local_options) / sizeof(local_options[0]),
    .check = local_check,
};
