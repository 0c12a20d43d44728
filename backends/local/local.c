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
 * warm-up.
 *
 * The mechanism (warm-up counts, capture, LRU bound, rebind policy, stats) is the core's graph
 * cache; this file is the policy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cgrt/backend.h"

struct local_state {
  const struct cgrt_host_api *h;
  const struct cgrt_config_view *cfg;
  struct cgrt_graph_cache *cache;
  char **names; /* "layer3.attn fwd" per module id and direction, built on first use */
  size_t num_names;
  int in_body_graph; /* the whole body runs as one unit (block scope): calls run directly */
  cgrt_mode body_mode;
  unsigned step_modes; /* bit per cgrt_mode seen among this step's calls */
  int64_t infer_steps;
  int eager_capture_done;
};

static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Backends link nothing of libcgrt: the few names they print are their own. */
static const char *const kind_names[CGRT_KIND_COUNT] = {
    "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "other"};

static const cgrt_counter counter_of[CGRT_MODE_COUNT] = {
    [CGRT_MODE_EAGER] = CGRT_COUNT_CALL_EAGER,
    [CGRT_MODE_WARMUP] = CGRT_COUNT_CALL_WARMUP,
    [CGRT_MODE_CAPTURE] = CGRT_COUNT_CALL_CAPTURE,
    [CGRT_MODE_REPLAY] = CGRT_COUNT_CALL_REPLAY,
};

static void note_call(struct local_state *s, cgrt_mode mode) {
  s->h->count(s->h, counter_of[mode], 1);
  s->step_modes |= 1u << mode;
}

/* The step's mode from its calls: capture, else warm-up, else replay, else eager. */
static cgrt_mode step_mode(unsigned modes) {
  if (modes & (1u << CGRT_MODE_CAPTURE))
    return CGRT_MODE_CAPTURE;
  if (modes & (1u << CGRT_MODE_WARMUP))
    return CGRT_MODE_WARMUP;
  if (modes & (1u << CGRT_MODE_REPLAY))
    return CGRT_MODE_REPLAY;
  return CGRT_MODE_EAGER;
}

static const char *call_name(struct local_state *s, const struct cgrt_module_info *m,
                             cgrt_direction dir) {
  size_t i = (size_t)m->id * 2 + (size_t)dir;
  if (i >= s->num_names) {
    size_t n = (i + 1) * 2;
    char **v = realloc(s->names, n * sizeof(*v));
    if (!v)
      return m->name;
    memset(v + s->num_names, 0, (n - s->num_names) * sizeof(*v));
    s->names = v;
    s->num_names = n;
  }
  if (!s->names[i]) {
    size_t len = strlen(m->name) + 5;
    s->names[i] = malloc(len);
    if (!s->names[i])
      return m->name;
    snprintf(s->names[i], len, "%s %s", m->name, dir == CGRT_BACKWARD ? "bwd" : "fwd");
  }
  return s->names[i];
}

/* ---------------------------------------------------------------- module calls */

struct call_work {
  struct local_state *s;
  struct cgrt_call *call;
};

static int run_call(void *arg, cgrt_mode mode, const cgrt_buffer *bufs, size_t n) {
  struct call_work *w = arg;
  struct cgrt_call *c = w->call;
  c->ctx->mode = mode;
  if (bufs == c->args->buffers)
    return w->s->h->run_module(w->s->h, c);
  /* Under rebind = copy the graph works on private buffers: show them to the module. */
  cgrt_args args = *c->args;
  args.buffers = bufs;
  args.num_buffers = n;
  struct cgrt_call moved = *c;
  moved.args = &args;
  return w->s->h->run_module(w->s->h, &moved);
}

static int scoped(const struct local_state *s, cgrt_kind kind) {
  return s->cfg->modules == 0 || (s->cfg->modules & CGRT_KIND_BIT(kind));
}

static int local_call(void *state, struct cgrt_call *c) {
  struct local_state *s = state;
  const struct cgrt_host_api *h = s->h;
  cgrt_ctx *ctx = c->ctx;
  if (s->in_body_graph || !scoped(s, c->module->kind)) {
    /* Inside a whole-body unit, or an unscoped kind: the call runs as the body does. */
    cgrt_mode m = s->in_body_graph ? s->body_mode : CGRT_MODE_EAGER;
    ctx->mode = m;
    note_call(s, m);
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
  struct call_work cw = {s, c};
  struct cgrt_graph_work work = {
      .struct_size = sizeof(work),
      .fn = run_call,
      .arg = &cw,
      .buffers = c->args->buffers,
      .num_buffers = c->args->num_buffers,
      .warmup = s->cfg->warmup_steps,
      .what = call_name(s, c->module, c->dir),
  };
  cgrt_mode mode = CGRT_MODE_EAGER;
  int rc = h->cache_run(h, s->cache, &key, &work, &mode);
  note_call(s, mode);
  return rc;
}

/* ---------------------------------------------------------------- steps */

struct body_work {
  struct local_state *s;
  struct cgrt_step_frame *f;
};

static int run_body_unit(void *arg, cgrt_mode mode, const cgrt_buffer *bufs, size_t n) {
  struct body_work *w = arg;
  struct local_state *s = w->s;
  cgrt_ctx *ctx = w->f->ctx;
  const cgrt_buffer *saved = ctx->buffers;
  size_t saved_n = ctx->num_buffers;
  ctx->mode = mode;
  ctx->buffers = bufs;
  ctx->num_buffers = n;
  s->in_body_graph = 1;
  s->body_mode = mode;
  int rc = s->h->run_body(s->h, w->f);
  s->in_body_graph = 0;
  ctx->buffers = saved;
  ctx->num_buffers = saved_n;
  return rc;
}

/* Block scope: the whole body of bucket ctx->padded_tokens through the cache. */
static int run_block(struct local_state *s, struct cgrt_step_frame *f, cgrt_mode *mode) {
  char what[64];
  snprintf(what, sizeof(what), "the body at %lld tokens", (long long)f->ctx->padded_tokens);
  struct cgrt_graph_key key = {
      .module = CGRT_KEY_BODY, .phase = CGRT_PHASE_INFER, .shape = (uint64_t)f->ctx->padded_tokens};
  struct body_work bw = {s, f};
  struct cgrt_graph_work work = {
      .struct_size = sizeof(work),
      .fn = run_body_unit,
      .arg = &bw,
      .buffers = f->desc->buffers,
      .num_buffers = f->desc->num_buffers,
      .warmup = s->cfg->warmup_steps,
      .what = what,
  };
  return s->h->cache_run(s->h, s->cache, &key, &work, mode);
}

/* One pass of prepare and body at the bucket in ctx->padded_tokens. */
static int run_pass(struct local_state *s, struct cgrt_step_frame *f) {
  const struct cgrt_host_api *h = s->h;
  int rc = h->run_prepare(h, f);
  if (rc != 0)
    return rc;
  if (f->ctx->phase == CGRT_PHASE_INFER && s->cfg->inference_scope == CGRT_SCOPE_BLOCK) {
    cgrt_mode mode = CGRT_MODE_EAGER;
    rc = run_block(s, f, &mode);
    s->step_modes |= 1u << mode;
    return rc;
  }
  f->ctx->mode = CGRT_MODE_EAGER;
  return h->run_body(h, f);
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

static int local_step(void *state, struct cgrt_step_frame *f) {
  struct local_state *s = state;
  const struct cgrt_host_api *h = s->h;
  cgrt_ctx *ctx = f->ctx;
  s->step_modes = 0;
  int rc = 0;
  if (ctx->phase == CGRT_PHASE_INFER) {
    int64_t bucket;
    if (h->bucket_for_tokens(h, ctx->tokens, &bucket) != 0) {
      /* Above the largest bucket: no graph holds it, the step runs eagerly. */
      h->log(h, CGRT_LOG_DEBUG, "%s; step %llu runs eagerly", h->last_error(h),
             (unsigned long long)ctx->step);
      ctx->padded_tokens = ctx->tokens;
      ctx->mode = CGRT_MODE_EAGER;
      s->in_body_graph = 1;
      s->body_mode = CGRT_MODE_EAGER;
      rc = h->run_prepare(h, f);
      if (rc == 0)
        rc = h->run_body(h, f);
      s->in_body_graph = 0;
      return rc;
    }
    ctx->padded_tokens = bucket;
    if (s->cfg->capture == CGRT_CAPTURE_EAGER && !s->eager_capture_done &&
        s->infer_steps >= s->cfg->warmup_steps) {
      s->eager_capture_done = 1;
      rc = capture_all_buckets(s, f);
    }
    s->infer_steps++;
  }
  if (rc == 0)
    rc = run_pass(s, f);
  ctx->mode = step_mode(s->step_modes);
  return rc;
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
  int rc = h->cache_create(h, cfg->max_graphs, cfg->rebind, &s->cache);
  if (rc != 0) {
    snprintf(err, errlen, "%s", h->last_error(h));
    free(s);
    return rc;
  }
  *state = s;
  return 0;
}

static void local_fini(void *state) {
  struct local_state *s = state;
  s->h->cache_destroy(s->h, s->cache);
  for (size_t i = 0; i < s->num_names; i++)
    free(s->names[i]);
  free(s->names);
  free(s);
}

static int local_release(void *state) {
  struct local_state *s = state;
  s->h->cache_clear(s->h, s->cache);
  s->infer_steps = 0;
  s->eager_capture_done = 0;
  return 0;
}

static int local_describe(void *state, void (*emit)(void *user, const char *line), void *user) {
  struct local_state *s = state;
  const struct cgrt_config_view *c = s->cfg;
  static const char *const rebind[] = {"update", "copy", "recapture", "error"};
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
           "; one graph per (module, direction, microbatch, key, phase) after %d eager calls",
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
  return 0;
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "local",
    .caps = CGRT_CAP_TRAINING | CGRT_CAP_INFERENCE | CGRT_CAP_BACKWARD | CGRT_CAP_GRAPHS,
    .init = local_init,
    .fini = local_fini,
    .step = local_step,
    .call = local_call,
    .release = local_release,
    .describe = local_describe,
};
