/*
 * knobs.c - a third-party backend declaring two options in its table (struct cgrt_option, host
 * API minor 4): [knobs] depth, a whole number from 1 to 64, and [knobs] order, forward or
 * reverse. The core checks them before init() and `cgrt check` prints them; init() reads them
 * back with get_int() and logs them. It runs every step eagerly.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cgrt/backend.h>

struct knobs_state {
  const struct cgrt_host_api *h;
};

static const struct cgrt_option knobs_options[] = {
    {.name = "depth",
     .type = CGRT_OPTION_INT,
     .def = "4",
     .min = 1,
     .max = 64,
     .meaning = "graphs kept per layer"},
    {.name = "order",
     .type = CGRT_OPTION_ENUM,
     .def = "forward",
     .values = "forward reverse",
     .meaning = "the order layers are visited in"},
};

static int knobs_init(const struct cgrt_host_api *h, const struct cgrt_config_view *cfg,
                      void **state, char *err, size_t errlen) {
  int64_t depth = 0, order = 0;
  if (!CGRT_VIEW_HAS(cfg, get_int) || !cfg->get_int ||
      cfg->get_int(cfg, "knobs", "depth", &depth) != 0 ||
      cfg->get_int(cfg, "knobs", "order", &order) != 0) {
    snprintf(err, errlen, "knobs needs a cgrt of host API minor 4 (this one: %u)", h->minor);
    return CGRT_E_BACKEND;
  }
  struct knobs_state *s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return CGRT_E_NOMEM;
  }
  s->h = h;
  h->log(h, CGRT_LOG_INFO, "knobs: depth %lld, order %s (%s)", (long long)depth,
         order ? "reverse" : "forward", cfg->get(cfg, "knobs", "order"));
  *state = s;
  return 0;
}

static void knobs_fini(void *state) {
  free(state);
}

static int knobs_step(void *state, struct cgrt_step_frame *f) {
  struct knobs_state *s = state;
  f->ctx->mode = CGRT_MODE_EAGER;
  int rc = s->h->run_prepare(s->h, f);
  return rc ? rc : s->h->run_body(s->h, f);
}

static int knobs_call(void *state, struct cgrt_call *c) {
  struct knobs_state *s = state;
  return s->h->run_module(s->h, c);
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "knobs",
    .caps = CGRT_CAP_TRAINING | CGRT_CAP_INFERENCE | CGRT_CAP_BACKWARD,
    .init = knobs_init,
    .fini = knobs_fini,
    .step = knobs_step,
    .call = knobs_call,
    .options = knobs_options,
    .num_options = sizeof(knobs_options) / sizeof(knobs_options[0]),
};
