/*
 * full_iteration.c - Megatron's FullCudaGraphWrapper, in C: after warmup_steps eager steps of a
 * phase, the whole body of that phase (every microbatch, forward, backward, the optimizer
 * update) is captured once and replayed from then on; train and eval have a graph each. prepare
 * still runs every step, staging the batch into the static buffers the graph reads.
 *
 * The whole-body mechanism (warm-up counting, capture, replay, rebind of the step's buffers) is
 * the core's run_body_graph, the same one local's block scope uses. A step of another shape
 * (token count, microbatch count) gets a graph of its own rather than a wrong replay.
 *
 * Inference is the same strategy per token bucket ([inference]): an infer step's tokens select
 * the smallest bucket that holds them, prepare pads up to it, and the whole body of that bucket
 * is one graph, as local's block scope does; a step above the largest bucket runs eagerly.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cgrt/backend.h"
#include "rules.h"

struct fi_state {
  const struct cgrt_host_api *h;
  const struct cgrt_config_view *cfg;
  struct cgrt_graph_cache *cache;
  int eager_body; /* an infer step above the largest bucket: its calls run directly */
};

static int fi_init(const struct cgrt_host_api *h, const struct cgrt_config_view *cfg, void **state,
                   char *err, size_t errlen) {
  /* The core's rules refuse these first (CGRT_CAP_WHOLE_STEP); a core before minor 6 does not
     know the bit. */
  if (cfg->modules != 0 || cfg->nan_check) {
    snprintf(err, errlen,
             "full_iteration graphs the whole step: it needs [cuda_graph] modules empty and "
             "[host] nan_check = off (the loss is read only after the step)");
    return CGRT_E_CONFIG;
  }
  struct fi_state *s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return CGRT_E_NOMEM;
  }
  s->h = h;
  s->cfg = cfg;
  /* One graph per phase and step shape: a handful, whatever max_graphs says. */
  int rc = h->cache_create(h, cfg->max_graphs, cfg->rebind, &s->cache);
  if (rc != 0) {
    snprintf(err, errlen, "%s", h->last_error(h));
    free(s);
    return rc;
  }
  *state = s;
  return 0;
}

static void fi_fini(void *state) {
  struct fi_state *s = state;
  s->h->cache_destroy(s->h, s->cache);
  free(s);
}

static int fi_step(void *state, struct cgrt_step_frame *f) {
  struct fi_state *s = state;
  const struct cgrt_host_api *h = s->h;
  cgrt_ctx *ctx = f->ctx;
  if (ctx->phase == CGRT_PHASE_INFER) {
    int64_t bucket;
    if (h->bucket_for_tokens(h, ctx->tokens, &bucket) != 0) {
      /* Above the largest bucket: no graph holds it, the step runs eagerly. */
      ctx->padded_tokens = ctx->tokens;
      ctx->mode = CGRT_MODE_EAGER;
      s->eager_body = 1;
      int rc = h->run_prepare(h, f);
      if (rc == 0)
        rc = h->run_body(h, f);
      s->eager_body = 0;
      return rc;
    }
    ctx->padded_tokens = bucket;
  }
  int rc = h->run_prepare(h, f);
  if (rc != 0)
    return rc;
  const cgrt_step_desc *d = f->desc;
  struct cgrt_graph_key key = {
      .module = CGRT_KEY_BODY,
      .phase = (uint32_t)ctx->phase,
      .shape = (uint64_t)ctx->padded_tokens,
      .extra = (uint64_t)(d->microbatches > 0 ? d->microbatches : 1),
  };
  cgrt_mode mode;
  return h->run_body_graph(h, s->cache, f, &key, s->cfg->warmup_steps, &mode);
}

static int fi_call(void *state, struct cgrt_call *c) {
  struct fi_state *s = state;
  /* Every call belongs to the body being warmed, captured or run eagerly as one unit. */
  if (s->eager_body)
    c->ctx->mode = CGRT_MODE_EAGER;
  return s->h->run_module(s->h, c);
}

static int fi_release(void *state) {
  struct fi_state *s = state;
  s->h->cache_clear(s->h, s->cache);
  return 0;
}

static int fi_describe(void *state, void (*emit)(void *user, const char *line), void *user) {
  struct fi_state *s = state;
  char line[320];
  snprintf(line, sizeof(line),
           "full_iteration: %d eager steps per phase, then the whole body (all microbatches, "
           "forward, backward, update) is captured once per phase (train, eval) and step shape "
           "(token and microbatch count), and replayed",
           s->cfg->warmup_steps);
  emit(user, line);
  emit(user, "infer steps: the whole body per token bucket ([inference]), prepare padding up to "
             "it; a step above the largest bucket runs eagerly");
  emit(user, "prepare runs eagerly every step; module calls inside the body are never graphed "
             "on their own");
  emit(user, "replay key: (phase, step tokens (infer: token bucket), microbatches)");
  return 0;
}

/* Inference by the static buckets: no scope to choose. The rules of whole-step graphs (no host
   read of the loss, no module list, full recomputation allowed) and of adaptive buckets are the
   core's, by its caps (CGRT_CAP_WHOLE_STEP, no CGRT_CAP_ADAPTIVE_BUCKETS). */
static int fi_check(const struct cgrt_config_view *cfg,
                    void (*report)(void *user, int line, const char *message), void *user) {
  struct rules r = {cfg, report, user, 0};
  rules_cp_scope_unread(&r);
  rules_scope_none(&r);
  return r.errors ? CGRT_E_CONFIG : 0;
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "full_iteration",
    .caps = CGRT_CAP_TRAINING | CGRT_CAP_INFERENCE | CGRT_CAP_BACKWARD | CGRT_CAP_GRAPHS |
            CGRT_CAP_TOKEN_BUCKETS | CGRT_CAP_WHOLE_STEP,
    .init = fi_init,
    .fini = fi_fini,
    .step = fi_step,
    .call = fi_call,
    .release = fi_release,
    .describe = fi_describe,
    .check = fi_check,
};
