/* train_host.c - the train workload as a cgrt host application (see train_host.h). */
#include "train_host.h"

#include <string.h>

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct train_host_ref *r = user;
  return cgrtk_train_forward(r->h->t, r->index, args->microbatch, ctx->stream);
}

static int module_bwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct train_host_ref *r = user;
  return cgrtk_train_backward(r->h->t, r->index, args->microbatch, ctx->stream);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  struct train_host *h = user;
  return cgrtk_train_stage(h->t, h->step, ctx->stream);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct train_host *h = user;
  const struct cgrtk_train_cfg *c = cgrtk_train_config(h->t);
  for (int mb = 0; mb < c->microbatches; mb++) {
    cgrt_args a = {.struct_size = sizeof(a), .key = (uint64_t)c->tokens, .microbatch = mb};
    for (int i = 0; i < h->num_modules; i++) {
      int rc = cgrt_forward(h->rt, h->mods[i], ctx, &a);
      if (rc)
        return rc;
    }
    int rc = cgrtk_train_loss(h->t, mb, ctx->stream);
    for (int i = h->num_modules; rc == 0 && i-- > 0;)
      rc = cgrt_backward(h->rt, h->mods[i], ctx, &a);
    if (rc)
      return rc;
  }
  return cgrtk_train_update(h->t, ctx->stream);
}

int train_host_open(struct train_host *h, cgrtk_train *t, cgrt_runtime *rt) {
  memset(h, 0, sizeof(*h));
  h->t = t;
  h->rt = rt;
  h->num_modules = cgrtk_train_num_modules(t);
  if (h->num_modules > TRAIN_HOST_MAX_MODULES)
    return CGRT_E_INVAL;
  for (int i = 0; i < h->num_modules; i++) {
    char name[64];
    int kind = 0, layer = 0;
    cgrtk_train_module(t, i, name, sizeof(name), &kind, &layer);
    h->refs[i] = (struct train_host_ref){h, i};
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = (cgrt_kind)kind,
                          .layer = layer,
                          .forward = module_fwd,
                          .backward = module_bwd,
                          .user = &h->refs[i]};
    int rc = cgrt_module_register(rt, &d, &h->mods[i]);
    if (rc)
      return rc;
  }
  return 0;
}

int train_host_step(struct train_host *h, cgrt_step_report *report) {
  const struct cgrtk_train_cfg *c = cgrtk_train_config(h->t);
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_TRAIN,
                      .tokens = (int64_t)c->tokens * c->microbatches,
                      .microbatches = c->microbatches,
                      .prepare = prepare,
                      .body = body,
                      .user = h};
  int rc = cgrt_step(h->rt, &d, report);
  h->step++;
  return rc;
}
