/*
 * trace.c - a decorator backend: `impl = trace` with `[trace] inner = NAME` loads the backend
 * NAME (any name or path, as impl), forwards everything to it, and reports every step and every
 * module call: what cgrt did (eager, warmup, capture, replay), the key, and the host time, to the
 * log at info level and as NVTX ranges (when built with the CUDA Toolkit), so an operator sees
 * in a log or an Nsight timeline what a strategy does.
 *
 * [trace] keys: inner (required); calls = on | off (report module calls too; default on).
 * trace is a decorator (its table's `wraps` names `inner`, host API minor 6): the core reads the
 * inner backend's own section ([NAME], its table's name) with its declared options, runs its
 * check() and judges the configuration by its capabilities, so the inner backend is configured
 * as if it were impl. A core before minor 6 judges trace alone: give the inner backend what it
 * needs explicitly there (local wants inference_scope = layer or block).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cgrt/backend.h>

#ifdef TRACE_NVTX
#include <nvtx3/nvToolsExt.h>
#define RANGE_PUSH(name) nvtxRangePushA(name)
#define RANGE_POP()      nvtxRangePop()
#else
#define RANGE_PUSH(name) ((void)(name))
#define RANGE_POP()      ((void)0)
#endif

struct trace_state {
  const struct cgrt_host_api *h;
  const struct cgrt_backend_v1 *inner;
  void *inner_state;
  void *handle;
  int calls;       /* report module calls */
  int eager_phase; /* a step of a phase the inner backend has no form for: calls run directly */
  unsigned said;   /* phases said once at info */
};

static const char *const mode_names[CGRT_MODE_COUNT] = {"eager", "warmup", "capture", "replay"};
static const char *const phase_names[CGRT_PHASE_COUNT] = {"train", "eval", "infer"};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *mode_name(cgrt_mode m) {
  return (unsigned)m < CGRT_MODE_COUNT ? mode_names[m] : "?";
}

/* The keys of [trace], read and checked by the core before init() (since minor 4). */
static const struct cgrt_option trace_options[] = {
    {.name = "inner",
     .type = CGRT_OPTION_STRING,
     .meaning = "the backend to trace: a name on the backend path, or a path, as impl"},
    {.name = "calls",
     .type = CGRT_OPTION_ENUM,
     .def = "on",
     .values = "on off",
     .meaning = "report every module call too, not only the steps"},
};

static int trace_init(const struct cgrt_host_api *h, const struct cgrt_config_view *cfg,
                      void **state, char *err, size_t errlen) {
  if (!CGRT_HOST_HAS(h, backend_open)) {
    snprintf(err, errlen, "this cgrt cannot load an inner backend (host API minor %u)", h->minor);
    return CGRT_E_BACKEND;
  }
  const char *inner = cfg->get(cfg, "trace", "inner");
  const char *calls = cfg->get(cfg, "trace", "calls");
  if (!inner || !inner[0]) {
    snprintf(err, errlen, "[trace] inner is required: the backend to trace (e.g. inner = local)");
    return CGRT_E_CONFIG;
  }
  if (strcmp(inner, "trace") == 0) {
    snprintf(err, errlen, "[trace] inner = trace would trace itself; name another backend");
    return CGRT_E_CONFIG;
  }
  if (calls && strcmp(calls, "on") != 0 && strcmp(calls, "off") != 0) {
    snprintf(err, errlen, "[trace] calls = '%s': expected on or off", calls);
    return CGRT_E_CONFIG;
  }
  struct trace_state *s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return CGRT_E_NOMEM;
  }
  s->h = h;
  s->calls = !calls || strcmp(calls, "on") == 0;
  int rc = h->backend_open(h, inner, &s->inner, &s->handle);
  if (rc != 0) {
    snprintf(err, errlen, "[trace] inner = %s: %s", inner, h->last_error(h));
    free(s);
    return rc;
  }
  char inner_err[768] = "";
  rc = s->inner->init(h, cfg, &s->inner_state, inner_err, sizeof(inner_err));
  if (rc != 0) {
    snprintf(err, errlen, "[trace] inner backend '%s' failed to initialize: %s", s->inner->name,
             inner_err);
    h->backend_close(h, s->handle);
    free(s);
    return rc;
  }
  h->log(h, CGRT_LOG_INFO, "trace: tracing backend '%s'", s->inner->name);
  *state = s;
  return 0;
}

static void trace_fini(void *state) {
  struct trace_state *s = state;
  s->inner->fini(s->inner_state);
  s->h->backend_close(s->h, s->handle);
  free(s);
}

static int trace_step(void *state, struct cgrt_step_frame *f) {
  struct trace_state *s = state;
  const struct cgrt_host_api *h = s->h;
  cgrt_ctx *ctx = f->ctx;
  uint64_t need = ctx->phase == CGRT_PHASE_INFER ? CGRT_CAP_INFERENCE : CGRT_CAP_TRAINING;
  if (!(s->inner->caps & need)) {
    /* As the core does for a backend without the phase: the step runs eagerly, said once. */
    if (!(s->said & (1u << ctx->phase))) {
      s->said |= 1u << ctx->phase;
      h->log(h, CGRT_LOG_INFO, "trace: '%s' has no form for %s steps: they run eagerly",
             s->inner->name, phase_names[ctx->phase]);
    }
    ctx->mode = CGRT_MODE_EAGER;
    int rc = h->run_prepare(h, f);
    if (rc != 0)
      return rc;
    s->eager_phase = 1;
    rc = h->run_body(h, f);
    s->eager_phase = 0;
    return rc;
  }
  char range[64];
  snprintf(range, sizeof(range), "cgrt step %llu %s", (unsigned long long)ctx->step,
           phase_names[ctx->phase]);
  RANGE_PUSH(range);
  uint64_t t0 = now_ns();
  int rc = s->inner->step(s->inner_state, f);
  uint64_t t1 = now_ns();
  RANGE_POP();
  const cgrt_step_report *r = f->report;
  h->log(h, CGRT_LOG_INFO,
         "trace: step %llu %s, %lld tokens (padded %lld): %s in %.1f us; calls eager %u, "
         "captured %u, replayed %u; graphs built %u, fallbacks %u%s%s",
         (unsigned long long)ctx->step, phase_names[ctx->phase], (long long)ctx->tokens,
         (long long)ctx->padded_tokens, mode_name(ctx->mode), (double)(t1 - t0) / 1e3,
         r->calls_eager, r->calls_captured, r->calls_replayed, r->graphs_built, r->fallbacks,
         rc ? "; failed: " : "", rc ? h->last_error(h) : "");
  return rc;
}

static int trace_call(void *state, struct cgrt_call *c) {
  struct trace_state *s = state;
  if (s->eager_phase) {
    c->ctx->mode = CGRT_MODE_EAGER;
    return s->h->run_module(s->h, c);
  }
  if (!s->calls)
    return s->inner->call(s->inner_state, c);
  const char *dir = c->dir == CGRT_BACKWARD ? "bwd" : "fwd";
  char range[160];
  snprintf(range, sizeof(range), "%s %s", c->module->name, dir);
  RANGE_PUSH(range);
  uint64_t t0 = now_ns();
  int rc = s->inner->call(s->inner_state, c);
  uint64_t t1 = now_ns();
  RANGE_POP();
  s->h->log(s->h, CGRT_LOG_INFO, "trace:   %s mb%d key %llu: %s in %.2f us%s", range,
            c->args->microbatch, (unsigned long long)c->args->key, mode_name(c->ctx->mode),
            (double)(t1 - t0) / 1e3, rc ? " (failed)" : "");
  return rc;
}

static int trace_release(void *state) {
  struct trace_state *s = state;
  s->h->log(s->h, CGRT_LOG_INFO, "trace: release graphs of '%s'", s->inner->name);
  return CGRT_BACKEND_HAS(s->inner, release) ? s->inner->release(s->inner_state) : 0;
}

static int trace_stats(void *state, cgrt_stats *out) {
  struct trace_state *s = state;
  return CGRT_BACKEND_HAS(s->inner, stats) ? s->inner->stats(s->inner_state, out) : 0;
}

static int trace_describe(void *state, void (*emit)(void *user, const char *line), void *user) {
  struct trace_state *s = state;
  char line[160];
  snprintf(line, sizeof(line),
           "trace: reports every step%s of backend '%s':", s->calls ? " and module call" : "",
           s->inner->name);
  emit(user, line);
  if (CGRT_BACKEND_HAS(s->inner, describe))
    return s->inner->describe(s->inner_state, emit, user);
  return 0;
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "trace",
    /* Whatever the inner backend can do: trace_step runs eagerly a phase it has no form for, and
       the core's rules judge the inner backend's caps, not these. */
    .caps = CGRT_CAP_TRAINING | CGRT_CAP_INFERENCE | CGRT_CAP_BACKWARD | CGRT_CAP_GRAPHS |
            CGRT_CAP_TOKEN_BUCKETS | CGRT_CAP_ADAPTIVE_BUCKETS,
    .init = trace_init,
    .fini = trace_fini,
    .step = trace_step,
    .call = trace_call,
    .release = trace_release,
    .stats = trace_stats,
    .describe = trace_describe,
    .options = trace_options,
    .num_options = sizeof(trace_options) / sizeof(trace_options[0]),
    .wraps = "inner",
};
