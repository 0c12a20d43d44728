/*
 * transformer_engine.c - Transformer Engine's make_graphed_callables as Megatron drives it, in C:
 * the first warmup_steps steps of a phase run eagerly; the next step captures every call of a
 * module whose kind is in `modules` (every kind if empty), forward and backward, one graph per
 * (module, microbatch, direction), in execution order; from then on those calls replay. Calls of
 * other kinds run eagerly between the graphs, every step. A call first seen after the capture
 * step runs eagerly once before its capture (a capture is never a first run).
 *
 * Which configurations are graph-safe (MoE capacity, dispatcher, recompute...) is checked by
 * the configuration rules before this backend loads.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrt/backend.h"
#include "rules.h"

struct te_state {
  const struct cgrt_host_api *h;
  const struct cgrt_config_view *cfg;
  struct cgrt_graph_cache *cache;
  int64_t steps[CGRT_PHASE_COUNT]; /* steps run per phase */
};

static int scoped(const struct te_state *s, cgrt_kind kind) {
  return s->cfg->modules == 0 || (s->cfg->modules & CGRT_KIND_BIT(kind));
}

static int te_init(const struct cgrt_host_api *h, const struct cgrt_config_view *cfg, void **state,
                   char *err, size_t errlen) {
  struct te_state *s = calloc(1, sizeof(*s));
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

static void te_fini(void *state) {
  struct te_state *s = state;
  s->h->cache_destroy(s->h, s->cache);
  free(s);
}

static int te_step(void *state, struct cgrt_step_frame *f) {
  struct te_state *s = state;
  const struct cgrt_host_api *h = s->h;
  int rc = h->run_prepare(h, f);
  if (rc == 0) {
    f->ctx->mode = CGRT_MODE_EAGER;
    rc = h->run_body(h, f);
    f->ctx->mode = h->calls_mode(h);
  }
  s->steps[f->ctx->phase]++;
  return rc;
}

static int te_call(void *state, struct cgrt_call *c) {
  struct te_state *s = state;
  const struct cgrt_host_api *h = s->h;
  if (!scoped(s, c->module->kind)) {
    c->ctx->mode = CGRT_MODE_EAGER;
    return h->run_module(h, c);
  }
  struct cgrt_graph_key key = {
      .module = c->module->id,
      .dir = (uint32_t)c->dir,
      .microbatch = c->args->microbatch,
      .phase = (uint32_t)c->ctx->phase,
      .shape = c->args->key,
  };
  /*
   * Warm-up steps only count (the cache never captures below INT_MAX runs); from the capture
   * step on, a key with at least one eager run is captured: all of them in that step, a key
   * first seen later one step after its first run.
   */
  int warmup = s->steps[c->ctx->phase] < s->cfg->warmup_steps ? INT_MAX : 1;
  cgrt_mode mode;
  return h->run_call_graph(h, s->cache, c, &key, warmup, &mode);
}

static int te_release(void *state) {
  struct te_state *s = state;
  s->h->cache_clear(s->h, s->cache);
  for (int p = 0; p < CGRT_PHASE_COUNT; p++)
    s->steps[p] = 0;
  return 0;
}

static int te_describe(void *state, void (*emit)(void *user, const char *line), void *user) {
  static const char *const kinds[CGRT_KIND_COUNT] = {
      "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "other"};
  struct te_state *s = state;
  char line[512];
  int n = snprintf(line, sizeof(line), "transformer_engine: graphed kinds:");
  for (int k = 0; k < CGRT_KIND_COUNT; k++)
    if (scoped(s, (cgrt_kind)k))
      n += snprintf(line + n, sizeof(line) - (size_t)n, " %s", kinds[k]);
  snprintf(line + n, sizeof(line) - (size_t)n,
           "; %d eager steps, then step %d captures them all (one graph per module, microbatch "
           "and direction); other kinds run eagerly",
           s->cfg->warmup_steps, s->cfg->warmup_steps + 1);
  emit(user, line);
  emit(user, "replay key: (module, direction, microbatch, phase, args.key)");
  emit(user, "infer steps: no form of its own: cgrt runs them eagerly");
  return 0;
}

/* Per-module graphs of training steps: no inference scope. No full recomputation and no adaptive
   buckets are the core's rules, by its caps. */
static int te_check(const struct cgrt_config_view *cfg,
                    void (*report)(void *user, int line, const char *message), void *user) {
  struct rules r = {cfg, report, user, 0};
  rules_cp_scope_unread(&r);
  rules_scope_none(&r);
  return r.errors ? CGRT_E_CONFIG : 0;
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "transformer_engine",
    .caps = CGRT_CAP_TRAINING | CGRT_CAP_BACKWARD | CGRT_CAP_GRAPHS,
    .init = te_init,
    .fini = te_fini,
    .step = te_step,
    .call = te_call,
    .release = te_release,
    .describe = te_describe,
    .check = te_check,
};
