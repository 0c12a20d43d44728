/*
 * template.c - the smallest complete cgrt backend: "graph every step once warm". Copy this
 * folder to start a backend of your own.
 *
 * Strategy: the first warmup_steps steps of each phase and shape run eagerly; the next one is
 * captured as one graph; later steps of that phase and shape replay it (prepare still runs
 * eagerly every step). The whole mechanism (warm-up counting, capture that never leaves the
 * stream capturing, replay, the rebind policy for moved static buffers, the max_graphs bound,
 * statistics) is lent by the core through the host API: a backend is its policy.
 *
 * Lifecycle: init (once per runtime; keep `host` and `cfg`), then step and call on the thread
 * that drives the runtime, release whenever the host frees graphs, fini last. Never call CUDA
 * directly: the host API's device operations work on the cuda and the host driver alike.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cgrt/backend.h>

struct template_state {
  const struct cgrt_host_api *host;
  const struct cgrt_config_view *cfg;
  struct cgrt_graph_cache *cache;
};

static int template_init(const struct cgrt_host_api *host, const struct cgrt_config_view *cfg,
                         void **state, char *err, size_t errlen) {
  /* The host API only grows: check that the fields this backend uses are there. */
  if (!CGRT_HOST_HAS(host, run_body_graph)) {
    snprintf(err, errlen, "this cgrt is too old for the template backend (host API minor %u)",
             host->minor);
    return CGRT_E_BACKEND;
  }
  struct template_state *s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return CGRT_E_NOMEM;
  }
  s->host = host;
  s->cfg = cfg;
  int rc = host->cache_create(host, cfg->max_graphs, cfg->rebind, &s->cache);
  if (rc != 0) {
    snprintf(err, errlen, "%s", host->last_error(host));
    free(s);
    return rc;
  }
  *state = s;
  return 0;
}

static void template_fini(void *state) {
  struct template_state *s = state;
  s->host->cache_destroy(s->host, s->cache);
  free(s);
}

static int template_step(void *state, struct cgrt_step_frame *f) {
  struct template_state *s = state;
  const struct cgrt_host_api *h = s->host;
  int rc = h->run_prepare(h, f);
  if (rc != 0)
    return rc;
  /* One graph per phase and step shape. */
  struct cgrt_graph_key key = {.module = CGRT_KEY_BODY,
                               .phase = (uint32_t)f->ctx->phase,
                               .shape = (uint64_t)f->desc->tokens,
                               .extra = (uint64_t)f->desc->microbatches};
  cgrt_mode mode;
  return h->run_body_graph(h, s->cache, f, &key, s->cfg->warmup_steps, &mode);
}

static int template_call(void *state, struct cgrt_call *c) {
  struct template_state *s = state;
  /* Calls belong to the body, which is warmed, captured or replayed as a whole. */
  return s->host->run_module(s->host, c);
}

static int template_release(void *state) {
  struct template_state *s = state;
  s->host->cache_clear(s->host, s->cache);
  return 0;
}

static int template_describe(void *state, void (*emit)(void *user, const char *line), void *user) {
  struct template_state *s = state;
  char line[160];
  snprintf(line, sizeof(line),
           "template: %d eager steps per phase and shape, then the whole step as one graph",
           s->cfg->warmup_steps);
  emit(user, line);
  return 0;
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "template",
    .caps = CGRT_CAP_TRAINING | CGRT_CAP_INFERENCE | CGRT_CAP_BACKWARD | CGRT_CAP_GRAPHS,
    .init = template_init,
    .fini = template_fini,
    .step = template_step,
    .call = template_call,
    .release = template_release,
    .describe = template_describe,
};
