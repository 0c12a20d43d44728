/*
 * hostapi.c - the table the core lends each backend: logging, the host's callbacks, the device
 * operations of the configured driver, and the shared mechanism (capture helper, counters,
 * buckets). Policy lives in backends; what every backend would otherwise rewrite lives here.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/gate.h"
#include "buckets/buckets.h"
#include "cgrt/tool.h"
#include "graphs/capture.h"
#include "graphs/diagnose.h"
#include "graphs/graph_cache.h"
#include "hostapi.h"
#include "runtime.h"

#define DEV(rt) (&(rt)->dev)
#define DRV(rt) ((rt)->dev.drv)

/* Turns a driver failure into the runtime's last error. */
static int dev_rc(cgrt_runtime *rt, int rc) {
  if (rc != 0 && rc != CGRT_E_NOTREADY)
    cgrt__fail(&rt->log, rc, "%s", rt->dev.err);
  return rc;
}

/* ---------------------------------------------------------------- log and errors */

static void h_log(const struct cgrt_host_api *h, cgrt_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cgrt__vlog(&CGRT_RT(h)->log, level, fmt, ap);
  va_end(ap);
}

static int h_set_error(const struct cgrt_host_api *h, int code, const char *fmt, ...) {
  cgrt_runtime *rt = CGRT_RT(h);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rt->log.err, sizeof(rt->log.err), fmt, ap);
  va_end(ap);
  return code;
}

static const char *h_last_error(const struct cgrt_host_api *h) {
  return CGRT_RT(h)->log.err;
}

/* ---------------------------------------------------------------- host callbacks */

static int h_run_prepare(const struct cgrt_host_api *h, struct cgrt_step_frame *f) {
  cgrt_runtime *rt = CGRT_RT(h);
  if (!f->desc->prepare)
    return 0;
  const void *outer = rt->graphs.host_frame;
  rt->graphs.host_frame = __builtin_frame_address(0);
  int rc = f->desc->prepare(f->ctx, f->desc->user);
  rt->graphs.host_frame = outer;
  if (rc != 0)
    return cgrt__fail(&rt->log, CGRT_E_CALLBACK, "the prepare callback of step %llu returned %d",
                      (unsigned long long)f->ctx->step, rc);
  return 0;
}

static int h_run_body(const struct cgrt_host_api *h, struct cgrt_step_frame *f) {
  cgrt_runtime *rt = CGRT_RT(h);
  rt->in_body = 1;
  rt->body_error = 0;
  cgrt__comms_handed(&rt->comms, f->ctx->comm);
  const void *outer = rt->graphs.host_frame;
  rt->graphs.host_frame = __builtin_frame_address(0);
  int rc = f->desc->body(f->ctx, f->desc->user);
  rt->graphs.host_frame = outer;
  rt->in_body = 0;
  if (rc == 0)
    return 0;
  /* A cgrt call inside the body failed and the body passed that on: keep its message. */
  if (rt->body_error != 0)
    return rt->body_error;
  return cgrt__fail(&rt->log, CGRT_E_CALLBACK, "the body callback of step %llu (%s) returned %d",
                    (unsigned long long)f->ctx->step, cgrt_mode_name(f->ctx->mode), rc);
}

static int h_run_module(const struct cgrt_host_api *h, struct cgrt_call *c) {
  cgrt_runtime *rt = CGRT_RT(h);
  struct cgrt_module *m = rt->modules[c->module->id];
  cgrt_module_fn fn = c->dir == CGRT_BACKWARD ? m->backward : m->forward;
  c->ctx->microbatch = c->args->microbatch;
  /* A module that issues no collectives on the cp communicator never sees it, so never waits. */
  void *comm = c->ctx->comm;
  if (m->no_cp_comm)
    c->ctx->comm = NULL;
  cgrt__comms_handed(&rt->comms, c->ctx->comm);
  /* The name only when there is something to wait for: eager calls pay one test. */
  int rc = rt->comms.graphs_queued
               ? cgrt__comms_wait(&rt->comms, &rt->dev, rt->stream, &rt->log, &rt->stats.comm_waits,
                                  c->ctx, cgrt__call_name(c))
               : 0;
  if (rc != 0) {
    c->ctx->comm = comm;
    return rc;
  }
  const void *outer = rt->graphs.host_frame;
  rt->graphs.host_frame = __builtin_frame_address(0);
  rc = fn(c->ctx, c->args, m->user);
  rt->graphs.host_frame = outer;
  c->ctx->comm = comm;
  if (rc != 0)
    return cgrt__fail(
        &rt->log, CGRT_E_CALLBACK, "module '%s' %s returned %d (step %llu, microbatch %d, %s)",
        m->name, c->dir == CGRT_BACKWARD ? "backward" : "forward", rc,
        (unsigned long long)c->ctx->step, c->args->microbatch, cgrt_mode_name(c->ctx->mode));
  return 0;
}

/* ---------------------------------------------------------------- device operations */

static void *h_stream(const struct cgrt_host_api *h) {
  return CGRT_RT(h)->stream;
}

static int h_stream_sync(const struct cgrt_host_api *h, void *stream) {
  cgrt_runtime *rt = CGRT_RT(h);
  int rc = DRV(rt)->stream_sync(DEV(rt), stream);
  if (rc == 0 && stream == rt->stream)
    cgrt__comms_drained(&rt->comms);
  return dev_rc(rt, rc);
}

/*
 * Captures a backend begins by hand are counted, so a step can tell if one was left open; the
 * host's hooks bracket them like the helpers' own.
 */
static int h_capture_begin(const struct cgrt_host_api *h, void *stream) {
  cgrt_runtime *rt = CGRT_RT(h);
  int hrc = cgrt__hook_begin(&rt->graphs.hooks, stream);
  if (hrc != 0)
    return cgrt__fail(&rt->log, CGRT_E_CALLBACK,
                      "the host's capture begin hook returned %d and refused the capture", hrc);
  /* no device synchronize through cgrt while it captures */
  cgrt__gate_capture_enter(rt->dev.device);
  int rc = DRV(rt)->capture_begin(DEV(rt), stream);
  if (rc == 0) {
    rt->open_captures++;
    cgrt__comms_capture_begin(&rt->comms);
  } else {
    cgrt__gate_capture_leave(rt->dev.device);
    (void)cgrt__hook_end(&rt->graphs.hooks,
                         stream); /* no capture began: close the pair the hook opened */
  }
  return dev_rc(rt, rc);
}

static int h_capture_end(const struct cgrt_host_api *h, void *stream, void **graph) {
  cgrt_runtime *rt = CGRT_RT(h);
  int owed = rt->open_captures > 0;
  if (owed)
    rt->open_captures--;
  int rc = dev_rc(rt, DRV(rt)->capture_end(DEV(rt), stream, graph));
  if (owed)
    cgrt__gate_capture_leave(rt->dev.device);
  int hrc = owed ? cgrt__hook_end(&rt->graphs.hooks, stream) : 0;
  if (rc == 0 && hrc != 0) {
    DRV(rt)->graph_destroy(DEV(rt), *graph);
    *graph = NULL;
    return cgrt__fail(&rt->log, CGRT_E_CALLBACK,
                      "the host's capture end hook returned %d; the recorded graph was discarded",
                      hrc);
  }
  if (rc == 0)
    cgrt__comms_capture_end(&rt->comms, *graph, rt->comms.capture_comm);
  return rc;
}

static int h_capturing(const struct cgrt_host_api *h, void *stream, int *active) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->capture_status(DEV(rt), stream, active));
}

static int h_graph_instantiate(const struct cgrt_host_api *h, void *graph, void **exec) {
  cgrt_runtime *rt = CGRT_RT(h);
  uint64_t t0 = cgrt__now_ns();
  int rc = cgrt__fault_graph_instantiate(&rt->faults, DEV(rt), graph, exec);
  rt->stats.instantiate_ns += cgrt__now_ns() - t0;
  if (rc != 0)
    return dev_rc(rt, rc);
  rt->stats.instantiations++;
  rt->stats.live_graphs++;
  cgrt__comms_exec_from(&rt->comms, *exec, graph);
  if (rt->graphs.rep)
    rt->graphs.rep->graphs_built++;
  cgrt__watch(&rt->graphs, CGRT_TOOL_GRAPH_INSTANTIATED, graph, *exec, NULL);
  return 0;
}

static void h_graph_destroy(const struct cgrt_host_api *h, void *graph) {
  cgrt_runtime *rt = CGRT_RT(h);
  if (!graph)
    return;
  cgrt__comms_graph_gone(&rt->comms, graph);
  DRV(rt)->graph_destroy(DEV(rt), graph);
}

static int h_exec_update(const struct cgrt_host_api *h, void *exec, void *graph) {
  cgrt_runtime *rt = CGRT_RT(h);
  uint64_t t0 = cgrt__now_ns();
  int rc = cgrt__fault_exec_update(&rt->faults, DEV(rt), exec, graph);
  rt->stats.instantiate_ns += cgrt__now_ns() - t0;
  if (rc == 0) {
    rt->stats.updates++;
    cgrt__comms_exec_from(&rt->comms, exec, graph);
    cgrt__watch(&rt->graphs, CGRT_TOOL_GRAPH_UPDATED, graph, exec, NULL);
  } else if (rc == CGRT_E_UPDATE)
    rt->stats.update_refusals++;
  return dev_rc(rt, rc);
}

static int h_exec_upload(const struct cgrt_host_api *h, void *exec, void *stream) {
  cgrt_runtime *rt = CGRT_RT(h);
  uint64_t t0 = cgrt__now_ns();
  int rc = DRV(rt)->exec_upload(DEV(rt), exec, stream);
  rt->stats.instantiate_ns += cgrt__now_ns() - t0; /* the upload maps its graph memory */
  if (rc == 0)
    cgrt__watch(&rt->graphs, CGRT_TOOL_GRAPH_UPLOADED, NULL, exec, stream);
  return dev_rc(rt, rc);
}

static int h_exec_launch(const struct cgrt_host_api *h, void *exec, void *stream) {
  cgrt_runtime *rt = CGRT_RT(h);
  int rc = cgrt__fault_exec_launch(&rt->faults, DEV(rt), exec, stream);
  if (rc == 0) {
    cgrt__comms_launched(&rt->comms, exec);
    cgrt__watch(&rt->graphs, CGRT_TOOL_GRAPH_LAUNCHED, NULL, exec, stream);
  }
  return dev_rc(rt, rc);
}

static void h_exec_destroy(const struct cgrt_host_api *h, void *exec) {
  cgrt_runtime *rt = CGRT_RT(h);
  if (!exec)
    return;
  cgrt__comms_exec_from(&rt->comms, exec, NULL);
  DRV(rt)->exec_destroy(DEV(rt), exec);
  if (rt->stats.live_graphs > 0)
    rt->stats.live_graphs--;
}

static int h_host_fn(const struct cgrt_host_api *h, void *stream, void (*fn)(void *), void *arg) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->host_fn(DEV(rt), stream, fn, arg));
}

static int h_memcpy_async(const struct cgrt_host_api *h, void *dst, const void *src, size_t bytes,
                          void *stream) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->memcpy_async(DEV(rt), dst, src, bytes, stream));
}

static int h_event_create(const struct cgrt_host_api *h, void **event) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->event_create(DEV(rt), event));
}

static int h_event_record(const struct cgrt_host_api *h, void *event, void *stream) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->event_record(DEV(rt), event, stream));
}

static int h_event_query(const struct cgrt_host_api *h, void *event) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->event_query(DEV(rt), event));
}

static int h_event_sync(const struct cgrt_host_api *h, void *event) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->event_sync(DEV(rt), event));
}

static void h_event_destroy(const struct cgrt_host_api *h, void *event) {
  cgrt_runtime *rt = CGRT_RT(h);
  if (event)
    DRV(rt)->event_destroy(DEV(rt), event);
}

static int h_event_create_timed(const struct cgrt_host_api *h, void **event) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->event_create_timed(DEV(rt), event));
}

static int h_event_elapsed(const struct cgrt_host_api *h, void *start, void *end, double *us) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, DRV(rt)->event_elapsed(DEV(rt), start, end, us));
}

/* The maximum over a cp group (since minor 9): never inside a capture, since it waits. */
static int h_comm_max(const struct cgrt_host_api *h, void *comm, double *values, int n) {
  cgrt_runtime *rt = CGRT_RT(h);
  int known = 0;
  for (int i = 0; i < rt->comms.count && !known; i++)
    known = comm && rt->comms.comm[i] == comm;
  if (!known || !values || n < 1 || n > 16)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "comm_max: takes a communicator comm_for_cp gave and 1 to 16 values (got "
                      "%s, %d values)",
                      known ? "one of them" : "another communicator", n);
  if (!DRV(rt)->comm_max)
    return cgrt__fail(&rt->log, CGRT_E_UNSUPPORTED,
                      "comm_max: the %s driver has no communicator operations (built without "
                      "NCCL); rebuild it with NCCL",
                      DRV(rt)->name);
  int capturing = 0;
  int rc = dev_rc(rt, DRV(rt)->capture_status(DEV(rt), rt->stream, &capturing));
  if (rc != 0)
    return rc;
  if (capturing)
    return cgrt__fail(&rt->log, CGRT_E_CAPTURE,
                      "comm_max: refused while the runtime's stream captures (it waits for the "
                      "stream); call it between steps' work, outside any capture");
  /* With NCCL's graph mixing off, a collective outside a graph waits for the graphs queued. */
  if (rt->comms.serial && rt->comms.graphs_queued &&
      (rc = dev_rc(rt, DRV(rt)->stream_sync(DEV(rt), rt->stream))) != 0)
    return rc;
  rc = dev_rc(rt, DRV(rt)->comm_max(DEV(rt), comm, values, n, rt->stream));
  if (rc == 0)
    cgrt__comms_drained(&rt->comms); /* the stream was waited for */
  return rc;
}

/* The host's clock (since minor 10): the driver's model of it where it has one. */
static uint64_t h_now_ns(const struct cgrt_host_api *h) {
  cgrt_runtime *rt = CGRT_RT(h);
  return DRV(rt)->host_clock_ns ? DRV(rt)->host_clock_ns(DEV(rt)) : cgrt__now_ns();
}

static int h_graph_memory(const struct cgrt_host_api *h, uint64_t *bytes, uint64_t *budget) {
  cgrt_runtime *rt = CGRT_RT(h);
  const struct cgrt__graph_mem *m = &rt->graphs.mem;
  *bytes = m->pool + m->exec + m->idle + m->staged;
  *budget = rt->cfg.view.memory_budget;
  return 0;
}

static int h_mem_alloc(const struct cgrt_host_api *h, void **ptr, size_t bytes) {
  cgrt_runtime *rt = CGRT_RT(h);
  return dev_rc(rt, cgrt__fault_mem_alloc(&rt->faults, DEV(rt), ptr, bytes));
}

static void h_mem_free(const struct cgrt_host_api *h, void *ptr) {
  cgrt_runtime *rt = CGRT_RT(h);
  if (ptr)
    DRV(rt)->mem_free(DEV(rt), ptr);
}

/* ---------------------------------------------------------------- shared mechanism */

static int h_capture(const struct cgrt_host_api *h, void *stream, int (*fn)(void *arg), void *arg,
                     const char *what, void **exec) {
  cgrt_runtime *rt = CGRT_RT(h);
  char why[sizeof(rt->log.err)];
  void *graph = NULL;
  struct cgrt__mem_probe before, after;
  size_t nodes = 0;
  uint64_t alloc_bytes = 0;
  *exec = NULL;
  rt->graphs.mem.build_valid = 0;
  /* Memory is read around the whole build: a graph's pool memory is mapped at upload. */
  cgrt__mem_probe(&rt->graphs, &before);
  uint64_t t0 = cgrt__now_ns();
  int rc = cgrt__record(&rt->graphs, stream, fn, arg, what, why, sizeof(why), &graph);
  if (rc != 0)
    return cgrt__capture_fallback(&rt->graphs, rc, what, why);
  uint64_t t1 = cgrt__now_ns();
  if (DRV(rt)->graph_node_count(DEV(rt), graph, &nodes) != 0)
    nodes = 0;
  if (DRV(rt)->graph_alloc_bytes(DEV(rt), graph, &alloc_bytes) != 0)
    alloc_bytes = 0;
  rc = h_graph_instantiate(h, graph, exec);
  h_graph_destroy(h, graph);
  if (rc != 0)
    return cgrt__capture_fallback(&rt->graphs, rc, what, rt->dev.err);
  rc = h_exec_upload(h, *exec, stream);
  if (rc != 0) {
    snprintf(why, sizeof(why), "%s", rt->dev.err);
    h_exec_destroy(h, *exec);
    *exec = NULL;
    return cgrt__capture_fallback(&rt->graphs, rc, what, why);
  }
  uint64_t t2 = cgrt__now_ns();
  cgrt__mem_probe(&rt->graphs, &after);
  cgrt__mem_build_done(&rt->graphs, &before, &after, nodes, alloc_bytes, t1 - t0, t2 - t1);
  cgrt__log(&rt->log, CGRT_LOG_DEBUG, "captured %s", what);
  return 0;
}

/* The table's cache_create: a cache belongs to the runtime's graph layer. */
static int h_cache_create(const struct cgrt_host_api *h, int max_graphs, cgrt_rebind rebind,
                          struct cgrt_graph_cache **out) {
  return cgrt__cache_create(&CGRT_RT(h)->graphs, max_graphs, rebind, out);
}

static void h_count(const struct cgrt_host_api *h, cgrt_counter which, int64_t delta) {
  cgrt_runtime *rt = CGRT_RT(h);
  cgrt_stats *s = &rt->stats;
  switch (which) {
  case CGRT_COUNT_UPDATES:
    s->updates += (uint64_t)delta;
    break;
  case CGRT_COUNT_UPDATE_REFUSALS:
    s->update_refusals += (uint64_t)delta;
    break;
  case CGRT_COUNT_REBINDS:
    s->rebinds += (uint64_t)delta;
    break;
  case CGRT_COUNT_EVICTIONS:
    s->evictions += (uint64_t)delta;
    break;
  case CGRT_COUNT_FALLBACKS:
    s->fallbacks += (uint64_t)delta;
    if (rt->graphs.rep)
      rt->graphs.rep->fallbacks += (uint32_t)delta;
    break;
  }
}

/* The mode of the step in flight from its module calls: capture, warmup, replay, eager. */
static cgrt_mode mode_from_calls(const cgrt_runtime *rt) {
  unsigned modes = rt->call_modes;
  if (modes & (1u << CGRT_MODE_CAPTURE))
    return CGRT_MODE_CAPTURE;
  if (modes & (1u << CGRT_MODE_WARMUP))
    return CGRT_MODE_WARMUP;
  if (modes & (1u << CGRT_MODE_REPLAY))
    return CGRT_MODE_REPLAY;
  return CGRT_MODE_EAGER;
}

static cgrt_mode h_calls_mode(const struct cgrt_host_api *h) {
  return mode_from_calls(CGRT_RT(h));
}

static int h_buckets(const struct cgrt_host_api *h, const int64_t **sizes, size_t *count) {
  cgrt_runtime *rt = CGRT_RT(h);
  *sizes = rt->buckets;
  *count = rt->num_buckets;
  return 0;
}

static int h_bucket_for_tokens(const struct cgrt_host_api *h, int64_t tokens, int64_t *bucket) {
  cgrt_runtime *rt = CGRT_RT(h);
  long i = cgrt__bucket_index(rt->buckets, rt->num_buckets, tokens);
  if (i < 0)
    return cgrt__fail(&rt->log, CGRT_E_CAPACITY,
                      "%lld tokens is above the largest token bucket (%lld, [inference] "
                      "max_tokens)",
                      (long long)tokens,
                      (long long)(rt->num_buckets ? rt->buckets[rt->num_buckets - 1] : 0));
  *bucket = rt->buckets[i];
  return 0;
}

static int h_backend_open(const struct cgrt_host_api *h, const char *impl,
                          const struct cgrt_backend_v1 **vt, void **handle) {
  cgrt_runtime *rt = CGRT_RT(h);
  *vt = NULL;
  *handle = NULL;
  struct cgrt_backend_lib *lib = calloc(1, sizeof(*lib));
  if (!lib)
    return cgrt__fail(&rt->log, CGRT_E_NOMEM, "out of memory loading backend '%s'", impl);
  char err[1024];
  /* A path read from a configuration file resolves from the file's folder, as impl does. */
  char *path = NULL, *dirs = NULL;
  int rc = cgrt__config_resolve_impl(&rt->cfg, impl, &path);
  if (rc == 0)
    rc = cgrt__config_resolve_dirs(&rt->cfg, rt->cfg.backend_path, &dirs);
  if (rc == 0) {
    rc = cgrt__backend_open(lib, path ? path : impl, dirs ? dirs : rt->cfg.backend_path, err,
                            sizeof(err));
    if (rc != 0) {
      cgrt__config_paths_note(&rt->cfg, "the backend", impl, path, err, sizeof(err));
      if (!strchr(impl, '/') && !path) /* a name: searched on backend_path */
        cgrt__config_paths_note(&rt->cfg, "[cuda_graph] backend_path", rt->cfg.backend_path, dirs,
                                err, sizeof(err));
    }
  } else {
    snprintf(err, sizeof(err), "out of memory loading backend '%s'", impl);
  }
  free(path);
  free(dirs);
  if (rc != 0) {
    free(lib);
    return cgrt__fail(&rt->log, rc, "%s", err);
  }
  *vt = lib->vt;
  *handle = lib;
  return 0;
}

static void h_backend_close(const struct cgrt_host_api *h, void *handle) {
  (void)h;
  if (!handle)
    return;
  cgrt__backend_close(handle);
  free(handle);
}

void cgrt__host_api_init(cgrt_runtime *rt) {
  struct cgrt_host_api *h = &rt->host;
  memset(h, 0, sizeof(*h));
  h->struct_size = sizeof(*h);
  h->minor = CGRT_HOST_API_MINOR;
  h->log = h_log;
  h->set_error = h_set_error;
  h->last_error = h_last_error;
  h->run_prepare = h_run_prepare;
  h->run_body = h_run_body;
  h->run_module = h_run_module;
  h->stream = h_stream;
  h->stream_sync = h_stream_sync;
  h->capture_begin = h_capture_begin;
  h->capture_end = h_capture_end;
  h->capturing = h_capturing;
  h->graph_instantiate = h_graph_instantiate;
  h->graph_destroy = h_graph_destroy;
  h->exec_update = h_exec_update;
  h->exec_upload = h_exec_upload;
  h->exec_launch = h_exec_launch;
  h->exec_destroy = h_exec_destroy;
  h->host_fn = h_host_fn;
  h->memcpy_async = h_memcpy_async;
  h->event_create = h_event_create;
  h->event_record = h_event_record;
  h->event_query = h_event_query;
  h->event_sync = h_event_sync;
  h->event_destroy = h_event_destroy;
  h->mem_alloc = h_mem_alloc;
  h->mem_free = h_mem_free;
  h->capture = h_capture;
  h->count = h_count;
  h->calls_mode = h_calls_mode;
  h->backend_open = h_backend_open;
  h->backend_close = h_backend_close;
  h->buckets = h_buckets;
  h->bucket_for_tokens = h_bucket_for_tokens;
  /* graphs/graph_cache.c */
  h->run_body_graph = cgrt__cache_run_body;
  h->run_call_graph = cgrt__cache_run_call;
  h->cache_create = h_cache_create;
  h->cache_destroy = cgrt__cache_destroy;
  h->cache_clear = cgrt__cache_clear;
  h->cache_run = cgrt__cache_run;
  h->cache_has = cgrt__cache_has;
  h->cache_retire = cgrt__cache_retire;
  /* thd.c */
  h->comm_for_cp = cgrt__comm_for_cp;
  h->thd_create = cgrt__thd_create;
  h->thd_destroy = cgrt__thd_destroy;
  h->thd_write = cgrt__thd_write;
  h->thd_release = cgrt__thd_release;
  /* adaptive.c */
  h->buckets_observe = cgrt__buckets_observe;
  /* minor 8 */
  h->event_create_timed = h_event_create_timed;
  h->event_elapsed = h_event_elapsed;
  h->graph_memory = h_graph_memory;
  h->buckets_cost = cgrt__buckets_cost;
  /* minor 9 */
  h->comm_max = h_comm_max;
  /* minor 10 */
  h->now_ns = h_now_ns;
}
