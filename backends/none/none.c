/*
 * none.c - the eager backend: every step and every module call runs directly, no graph is ever
 * built. It is the baseline the graph backends are measured against, and the smallest complete
 * user of the backend ABI (built and loaded like any third-party backend).
 */
#include <stdlib.h>

#include "cgrt/backend.h"
#include "rules.h"

struct none_state {
  const struct cgrt_host_api *host;
};

static int none_init(const struct cgrt_host_api *host, const struct cgrt_config_view *cfg,
                     void **state, char *err, size_t errlen) {
  (void)cfg;
  (void)err;
  (void)errlen;
  struct none_state *s = calloc(1, sizeof(*s));
  if (!s)
    return CGRT_E_NOMEM;
  s->host = host;
  *state = s;
  return 0;
}

static void none_fini(void *state) {
  free(state);
}

static int none_step(void *state, struct cgrt_step_frame *f) {
  struct none_state *s = state;
  f->ctx->mode = CGRT_MODE_EAGER;
  f->ctx->padded_tokens = f->ctx->tokens;
  int rc = s->host->run_prepare(s->host, f);
  if (rc == 0)
    rc = s->host->run_body(s->host, f);
  return rc;
}

static int none_call(void *state, struct cgrt_call *c) {
  struct none_state *s = state;
  c->ctx->mode = CGRT_MODE_EAGER;
  return s->host->run_module(s->host, c);
}

static int none_describe(void *state, void (*emit)(void *user, const char *line), void *user) {
  (void)state;
  emit(user, "backend none: every step and module call runs eagerly; no graph is built");
  emit(user, "replay key: -");
  return 0;
}

/* Eager: no inference scope (no token buckets to adapt: the core's rule, by its caps). */
static int none_check(const struct cgrt_config_view *cfg,
                      void (*report)(void *user, int line, const char *message), void *user) {
  struct rules r = {cfg, report, user, 0};
  rules_scope_none(&r);
  return r.errors ? CGRT_E_CONFIG : 0;
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "none",
    .caps = CGRT_CAP_TRAINING | CGRT_CAP_INFERENCE | CGRT_CAP_BACKWARD,
    .init = none_init,
    .fini = none_fini,
    .step = none_step,
    .call = none_call,
    .describe = none_describe,
    .check = none_check,
};
