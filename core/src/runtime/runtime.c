/*
 * runtime.c - the host API: open and close a runtime, register modules, run steps and module
 * calls through the loaded backend, statistics.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/gate.h"
#include "buckets/buckets.h"
#include "config/config_impl.h"
#include "graphs/capture.h"
#include "graphs/diagnose.h"
#include "guard.h"
#include "hostapi.h"
#include "runtime.h"

/* The last failed open of this thread, for cgrt_last_error(NULL). */
static __thread char open_error[2048];

/* Smallest struct_size accepted for each public struct: the fields of version 0.1. */
#define MIN_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
#define STEP_DESC_MIN        MIN_SIZE(cgrt_step_desc, user)
#define STEP_DESC_STAGES     MIN_SIZE(cgrt_step_desc, stages_inputs)
#define ARGS_MIN             MIN_SIZE(cgrt_args, num_buffers)
#define MODULE_DESC_MIN      MIN_SIZE(cgrt_module_desc, user)
#define MODULE_DESC_NO_COMM  MIN_SIZE(cgrt_module_desc, no_cp_comm)
#define MODULE_DESC_STAGES   MIN_SIZE(cgrt_module_desc, stages_inputs)
#define OPEN_OPTS_MIN        MIN_SIZE(cgrt_open_options, log_user)
#define OPEN_OPTS_STREAM     MIN_SIZE(cgrt_open_options, stream)
#define STATS_MIN            MIN_SIZE(cgrt_stats, struct_size)
#define REPORT_MIN           MIN_SIZE(cgrt_step_report, struct_size)

/* ---------------------------------------------------------------- open and close */

/*
 * Logs the warnings of diag and, if it holds errors, sets the first as the runtime's error with a
 * count of the others (open_finish logs it). Returns rc.
 */
static int report_diag(cgrt_runtime *rt, const struct cgrt_diag *diag, int rc) {
  for (size_t i = 0; i < diag->count; i++)
    if (diag->msgs[i].level != CGRT_LOG_ERROR)
      cgrt__log(&rt->log, diag->msgs[i].level, "%s", diag->msgs[i].text);
  if (rc == 0)
    return 0;
  const char *first = cgrt__diag_first_error(diag);
  if (!first)
    first = cgrt_strerror(rc);
  if (diag->errors > 1)
    return cgrt__fail(&rt->log, rc, "%s (and %d more problems: `cgrt check FILE` lists them all)",
                      first, diag->errors - 1);
  return cgrt__fail(&rt->log, rc, "%s", first);
}

/* Reads the configuration the options name into rt->cfg. */
static int open_config(cgrt_runtime *rt, const cgrt_open_options *o) {
  struct cgrt_diag diag = {0};
  int rc;
  const char *env = cgrt__getenv("CGRT_CONFIG");
  if (o->path)
    rc = cgrt__config_load(&rt->cfg, o->path, &diag);
  else if (o->ini)
    rc = cgrt__config_parse(&rt->cfg, o->ini, o->ini_name ? o->ini_name : "<string>", &diag);
  else if (env && env[0])
    rc = cgrt__config_load(&rt->cfg, env, &diag);
  else
    rc = cgrt__config_parse(&rt->cfg, cgrt__default_config, "<default>", &diag);
  rc = report_diag(rt, &diag, rc);
  cgrt__diag_free(&diag);
  return rc;
}

static void bind_thread(cgrt_runtime *rt) {
  const struct cgrt_config_view *v = &rt->cfg.view;
  if (!v->bind_cpu)
    return;
  if (!rt->dev.drv->cores_near) {
    cgrt__log(&rt->log, CGRT_LOG_DEBUG,
              "bind_cpu = auto: no GPU with the %s driver, thread not bound", rt->dev.drv->name);
    return;
  }
  char cores[256], err[512];
  int rc = rt->dev.drv->cores_near(rt->dev.device, 1, cores, sizeof(cores), err, sizeof(err));
  if (rc == 0)
    cgrt__log(&rt->log, CGRT_LOG_INFO, "bind_cpu = auto: bound this thread to cores %s near GPU %d",
              cores, rt->dev.device);
  else if (rc == CGRT_CORES_KEPT || rc == CGRT_CORES_KEPT_FAR)
    cgrt__log(&rt->log, rc == CGRT_CORES_KEPT ? CGRT_LOG_INFO : CGRT_LOG_WARN,
              "bind_cpu = auto: %s", err);
  else
    cgrt__log(&rt->log, CGRT_LOG_WARN, "bind_cpu = auto: thread left unbound: %s", err);
}

/*
 * The wait a guarded raw synchronize gives a capture before it goes ahead as it would without the
 * guard: long beside any capture's begin-to-end, so that it only ends a wait that would never end
 * otherwise (captured work that waits for the synchronizing thread). CGRT_SYNC_GUARD_WAIT_MS
 * changes it (tests).
 */
#define SYNC_GUARD_WAIT_MS 5000

static const struct cgrt_sync_gate sync_gate = {cgrt__gate_sync_enter_within,
                                                cgrt__gate_sync_leave};

/*
 * [runtime] sync_guard = on: a runtime whose backend builds graphs holds the driver's guard from
 * open to close, so that a raw device-wide synchronize of any thread never meets its captures
 * (gate.h says why); the open fails with the reason where the driver cannot guard. A backend that
 * never captures needs none.
 */
static int open_sync_guard(cgrt_runtime *rt) {
  if (rt->cfg.view.sync_guard != CGRT_SYNC_GUARD_ON || !(rt->lib.vt->caps & CGRT_CAP_GRAPHS))
    return 0;
  const struct cgrt_driver *drv = rt->dev.drv;
  char err[512] = "";
  int rc = CGRT_E_UNSUPPORTED;
  if (!drv->sync_guard_acquire) {
    snprintf(err, sizeof(err), "the %s driver has no raw synchronizes to guard", drv->name);
  } else {
    long wait_ms = SYNC_GUARD_WAIT_MS;
    const char *env = cgrt__getenv("CGRT_SYNC_GUARD_WAIT_MS");
    if (env && env[0]) {
      char *end = NULL;
      long v = strtol(env, &end, 10);
      if (end && *end == '\0' && v >= 0)
        wait_ms = v;
      else
        cgrt__log(&rt->log, CGRT_LOG_WARN,
                  "CGRT_SYNC_GUARD_WAIT_MS='%s' is not a number of milliseconds; %ld kept", env,
                  wait_ms);
    }
    rc = drv->sync_guard_acquire(&sync_gate, wait_ms, err, sizeof(err));
  }
  if (rc != 0)
    return cgrt__fail(&rt->log, rc,
                      "sync_guard = on: %s; set sync_guard = off to open without it, and "
                      "synchronize the device through cgrt_device_synchronize",
                      err);
  rt->graphs.sync_guarded = 1;
  uint64_t waited = 0;
  drv->sync_guard_counts(rt->dev.device, &waited, &rt->graphs.sync_late_seen);
  cgrt__log(&rt->log, CGRT_LOG_INFO,
            "sync_guard = on: raw device synchronizes of every thread wait for cgrt's captures on "
            "GPU %d (CUPTI attached: each graph launch costs the host more while it is)",
            rt->dev.device);
  return 0;
}

static int open_backend_state(cgrt_runtime *rt) {
  char err[1024] = "";
  const struct cgrt_backend_v1 *vt = rt->lib.vt;
  void *state = NULL;
  int rc = vt->init(&rt->host, &rt->cfg.view, &state, err, sizeof(err));
  if (rc != 0) {
    err[sizeof(err) - 1] = '\0';
    return cgrt__fail(&rt->log, CGRT_E_BACKEND, "backend '%s' (%s) failed to initialize: %s",
                      vt->name, rt->lib.path, err[0] ? err : cgrt_strerror(rc));
  }
  rt->be_state = state;
  rt->be_ready = 1;
  struct cgrt_diag diag = {0};
  rc = report_diag(rt, &diag, cgrt__config_check_backend_keys(&rt->cfg, &diag));
  cgrt__diag_free(&diag);
  return rc;
}

/* Everything after the configuration: buckets, backend, driver, stream, backend state. */
/* cgrt's stream: the host's (cgrt_open_options.stream), checked, or a new one of the driver's. */
static int open_stream(cgrt_runtime *rt) {
  if (!rt->host_stream) {
    int rc = rt->dev.drv->stream_create(&rt->dev, &rt->stream);
    /* CGRT_HOST_ORDER=off: no waits with the legacy stream, to measure what they cost (cgrt
       bench); a host's results then depend on timing again (README "Streams"). */
    const char *order = cgrt__getenv("CGRT_HOST_ORDER");
    int unordered = order && (strcmp(order, "off") == 0 || strcmp(order, "0") == 0);
    if (unordered && rc == 0)
      cgrt__log(&rt->log, CGRT_LOG_WARN,
                "CGRT_HOST_ORDER=%s: steps are not ordered with the legacy default stream; "
                "results may depend on timing (for measuring what the ordering costs only)",
                order);
    if (rc == 0 && !unordered)
      rc = rt->dev.drv->event_create(&rt->dev, &rt->order_in);
    if (rc == 0 && !unordered)
      rc = rt->dev.drv->event_create(&rt->dev, &rt->order_out);
    return rc ? cgrt__fail(&rt->log, rc, "%s", rt->dev.err) : 0;
  }
  if (rt->cfg.view.driver != CGRT_DRIVER_CUDA)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "cgrt_open_options.stream: the host driver ([runtime] driver = host) has "
                      "no CUDA streams to run on; leave stream NULL, or use driver = cuda");
  int active = 0;
  int rc = rt->dev.drv->capture_status(&rt->dev, rt->host_stream, &active);
  if (rc != 0)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "cgrt_open_options.stream is not a stream of device %d: %s; pass a "
                      "cudaStream_t created on it, or NULL",
                      rt->dev.device, rt->dev.err);
  if (active)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "cgrt_open_options.stream is capturing: open cgrt before the host's own "
                      "capture begins, or after it ends");
  rt->stream = rt->host_stream;
  cgrt__log(&rt->log, CGRT_LOG_DEBUG, "running on the host's stream %p", rt->host_stream);
  return 0;
}

static int open_runtime(cgrt_runtime *rt) {
  char err[1024];
  const struct cgrt_config_view *v = &rt->cfg.view;
  if (!cgrt__getenv("CGRT_LOG"))
    rt->log.level = v->log_level;
  const char *env_diag = cgrt__getenv("CGRT_DIAGNOSE");
  if (env_diag && env_diag[0]) {
    int d = cgrt__diagnose_from_text(env_diag);
    if (d >= 0)
      rt->cfg.view.diagnose = (cgrt_diagnose)d;
    else
      cgrt__log(&rt->log, CGRT_LOG_WARN,
                "CGRT_DIAGNOSE='%s' is not a diagnose setting (failures, on, off, 1, 0); "
                "[runtime] diagnose = %s is used",
                env_diag, cgrt__diagnose_name(v->diagnose));
  }
  cgrt__diagnose_open(&rt->graphs);

  int rc =
      cgrt__buckets_build(v->buckets, v->max_tokens, v->num_graphs, v->tp_size, v->bucket_list,
                          v->bucket_list_len, &rt->buckets, &rt->num_buckets, err, sizeof(err));
  if (rc != 0)
    return cgrt__fail(&rt->log, CGRT_E_CONFIG, "%s: [inference] %s", rt->cfg.source, err);

  /* Load and check the backend before touching the device: a wrong impl fails fast. Paths the
     configuration file names resolve from its folder. */
  char *impl = NULL, *dirs = NULL;
  rc = cgrt__config_resolve_impl(&rt->cfg, v->impl, &impl);
  if (rc == 0)
    rc = cgrt__config_resolve_dirs(&rt->cfg, rt->cfg.backend_path, &dirs);
  if (rc == 0) {
    rc = cgrt__backend_open(&rt->lib, impl ? impl : v->impl, dirs ? dirs : rt->cfg.backend_path,
                            err, sizeof(err));
    if (rc != 0) {
      cgrt__config_paths_note(&rt->cfg, "[cuda_graph] impl", v->impl, impl, err, sizeof(err));
      if (!strchr(v->impl, '/') && !impl) /* a name: searched on backend_path */
        cgrt__config_paths_note(&rt->cfg, "[cuda_graph] backend_path", rt->cfg.backend_path, dirs,
                                err, sizeof(err));
    }
  } else {
    snprintf(err, sizeof(err), "out of memory resolving the backend's path");
  }
  free(impl);
  free(dirs);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "%s", err);
  rc = cgrt__adaptive_open(rt);
  if (rc != 0)
    return rc;

  /* The driver object is loaded only now: a host on the host driver never loads it. */
  rc = cgrt__driver_get(v->driver, &rt->dev.drv, err, sizeof(err));
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "%s", err);
  rt->dev.device = v->device;
  rt->dev.host_stream = rt->host_stream;
  rt->dev.capture_mode = v->capture_mode;
  const char *fold = cgrt__getenv("CGRT_FOLD_EVENT_LEAVES");
  rt->dev.fold_event_leaves = fold && strcmp(fold, "1") == 0;
  if (rt->dev.fold_event_leaves)
    cgrt__log(&rt->log, CGRT_LOG_INFO,
              "CGRT_FOLD_EVENT_LEAVES=1: leaf event record nodes (NCCL's, with graph mixing on) "
              "are folded into each graph's chain before it is instantiated (an experiment)");
  rc = rt->dev.drv->open(&rt->dev);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "%s", rt->dev.err);
  rt->dev_open = 1;
  if (rt->dev.device < 0) /* `current` on a driver with one device (host) */
    rt->dev.device = 0;
  bind_thread(rt);
  rc = open_sync_guard(rt);
  if (rc != 0)
    return rc;
  rc = open_stream(rt);
  rt->graphs.stream = rt->stream;
  if (rc == 0)
    rc = cgrt__queue_open(rt);
  if (rc != 0)
    return rc;

  rc = open_backend_state(rt);
  if (rc != 0)
    return rc;
  cgrt__log(&rt->log, CGRT_LOG_INFO, "cgrt %s: backend %s (%s), driver %s, device %d",
            CGRT_VERSION_STRING, rt->lib.vt->name, rt->lib.path, rt->dev.drv->name, rt->dev.device);
  return 0;
}

static cgrt_runtime *runtime_alloc(cgrt_log_fn log, void *log_user) {
  cgrt_runtime *rt = calloc(1, sizeof(*rt));
  if (!rt)
    return NULL;
  rt->log.fn = log;
  rt->log.user = log_user;
  rt->log.level = CGRT_LOG_INFO;
  const char *env_level = cgrt__getenv("CGRT_LOG");
  if (env_level) {
    int lv = cgrt__log_level_from_name(env_level);
    if (lv >= 0)
      rt->log.level = (cgrt_log_level)lv;
    else
      cgrt__log(&rt->log, CGRT_LOG_WARN, "CGRT_LOG='%s' is not a level (off error warn info debug)",
                env_level);
  }
  rt->stats.struct_size = sizeof(rt->stats);
  cgrt__guard_init(rt);
  cgrt__host_api_init(rt);
  /* What the graph layer is lent; the stream follows once open_stream has one. */
  struct cgrt_graphs *g = &rt->graphs;
  g->host = &rt->host;
  g->dev = &rt->dev;
  g->log = &rt->log;
  g->stats = &rt->stats;
  g->view = &rt->cfg.view;
  g->comms = &rt->comms;
  g->faults = &rt->faults;
  return rt;
}

static void runtime_free(cgrt_runtime *rt, const char *fn);

/* Finishes an open: on failure records and logs the error, and frees rt. */
static int open_finish(cgrt_runtime **out, cgrt_runtime *rt, int rc) {
  if (rc != 0) {
    snprintf(open_error, sizeof(open_error), "%s", rt->log.err);
    /*
     * Returned to the caller, who has it in cgrt_last_error(NULL): the log says it at debug
     * only, so that a host printing its errors (as the README's example does) shows each once.
     * The log's error level is for what nobody is told otherwise.
     */
    cgrt__log(&rt->log, CGRT_LOG_DEBUG, "open failed: %s", rt->log.err);
    runtime_free(rt, "cgrt_open");
    return rc;
  }
  *out = rt;
  return 0;
}

CGRT_API int cgrt_open_ex(cgrt_runtime **out, const cgrt_open_options *opts) {
  open_error[0] = '\0';
  if (!out || !opts || opts->struct_size < OPEN_OPTS_MIN) {
    snprintf(open_error, sizeof(open_error),
             "cgrt_open_ex: out and opts must be non-NULL, with opts->struct_size set");
    return CGRT_E_INVAL;
  }
  *out = NULL;
  cgrt_runtime *rt = runtime_alloc(opts->log, opts->log_user);
  if (!rt) {
    snprintf(open_error, sizeof(open_error), "cgrt_open: out of memory");
    return CGRT_E_NOMEM;
  }
  if (opts->struct_size >= OPEN_OPTS_STREAM)
    rt->host_stream = opts->stream;
  int rc = open_config(rt, opts);
  if (rc == 0)
    rc = open_runtime(rt);
  return open_finish(out, rt, rc);
}

int cgrt__open_config(cgrt_runtime **out, struct cgrt_config *cfg, cgrt_log_fn log, void *log_user,
                      void *stream) {
  open_error[0] = '\0';
  *out = NULL;
  cgrt_runtime *rt = runtime_alloc(log, log_user);
  if (!rt) {
    cgrt__config_free(cfg);
    snprintf(open_error, sizeof(open_error), "cgrt_open: out of memory");
    return CGRT_E_NOMEM;
  }
  rt->cfg = *cfg;
  memset(cfg, 0, sizeof(*cfg));
  rt->host_stream = stream;
  return open_finish(out, rt, open_runtime(rt));
}

CGRT_API int cgrt_open(cgrt_runtime **out, const char *path) {
  cgrt_open_options o = {.struct_size = sizeof(o), .path = path};
  return cgrt_open_ex(out, &o);
}

CGRT_API int cgrt_open_string(cgrt_runtime **out, const char *ini) {
  if (!ini) {
    snprintf(open_error, sizeof(open_error), "cgrt_open_string: ini is NULL");
    return CGRT_E_INVAL;
  }
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini};
  return cgrt_open_ex(out, &o);
}

/*
 * Tears rt down and frees it, for public call fn. An error met on the way (a stream that cannot
 * be waited for) does not stop it: the first one is logged at level error before rt is freed.
 * Callbacks it runs (host functions, the log sink) are refused every cgrt call (CGRT_BUSY_CLOSE).
 */
static void runtime_free(cgrt_runtime *rt, const char *fn) {
  char why[sizeof(rt->log.err)];
  size_t whylen = sizeof(why);
  why[0] = '\0';
  rt->busy |= CGRT_BUSY_CLOSE;
  int rc;
  if (rt->be_ready) {
    rc = cgrt__graphs_release(rt, "cgrt_close", NULL);
    if (rc != 0)
      snprintf(why, whylen, "%s", rt->log.err);
    rt->lib.vt->fini(rt->be_state);
    rt->be_ready = 0;
  }
  /* Communicators go after the graphs that captured collectives on them. */
  cgrt__comms_destroy(&rt->comms);
  if (rt->order_in)
    rt->dev.drv->event_destroy(&rt->dev, rt->order_in);
  if (rt->order_out)
    rt->dev.drv->event_destroy(&rt->dev, rt->order_out);
  rt->order_in = rt->order_out = NULL;
  cgrt__queue_close(rt);
  if (rt->stream && rt->stream == rt->host_stream) { /* the host's: waited for, kept */
    rc = cgrt__run_stream(rt, "cgrt_close");
    if (rc != 0 && !why[0])
      snprintf(why, whylen, "waiting for the host's stream: %s", rt->dev.err);
  } else if (rt->stream) {
    rt->dev.drv->stream_destroy(&rt->dev, rt->stream);
  }
  rt->stream = NULL;
  rt->graphs.stream = NULL;
  cgrt__host_copies_free(rt); /* after the graphs and the stream: nothing runs them any more */
  if (rt->graphs.sync_guarded)
    rt->dev.drv->sync_guard_release();
  rt->graphs.sync_guarded = 0;
  if (rt->dev_open)
    rt->dev.drv->close(&rt->dev);
  cgrt__backend_close(&rt->lib);
  for (size_t i = 0; i < rt->num_modules; i++) {
    free(rt->modules[i]->name);
    free(rt->modules[i]->call_names[0]);
    free(rt->modules[i]->call_names[1]);
    free(rt->modules[i]);
  }
  free(rt->modules);
  free(rt->buckets);
  cgrt__adaptive_close(rt);
  cgrt__diagnose_close(&rt->graphs);
  free(rt->graphs.hooks.pool);
  cgrt__config_free(&rt->cfg);
  if (why[0])
    cgrt__log(&rt->log, CGRT_LOG_ERROR, "%s: %s; the runtime was freed all the same", fn, why);
  free(rt);
}

/*
 * What cgrt_close cannot finish from, beyond the guard's refusals (a second thread, a callback):
 * refused before anything is freed.
 */
static int close_refused(cgrt_runtime *rt) {
  int active = 0;
  if (rt->dev_open && rt->stream &&
      rt->dev.drv->capture_status(&rt->dev, rt->stream, &active) == 0 && active)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "cgrt_close: the runtime's stream is capturing (a capture the host began on "
                      "the stream it gave cgrt_open_ex); nothing was freed: end the capture, "
                      "then close");
  return 0;
}

CGRT_API int cgrt_close(cgrt_runtime *rt) {
  if (!rt)
    return 0;
  int rc = cgrt__enter(rt, "cgrt_close", CGRT_CALL_CLOSE);
  if (rc != 0)
    return rc;
  rc = close_refused(rt);
  if (rc != 0) {
    cgrt__keep_error(rt, "cgrt_close", rc);
    cgrt__leave(rt);
    return rc;
  }
  /* From here on rt is freed whatever happens: what went wrong is logged, not returned. */
  runtime_free(rt, "cgrt_close");
  return 0;
}

/* ---------------------------------------------------------------- small accessors */

CGRT_API const char *cgrt_last_error(const cgrt_runtime *rt) {
  if (!rt)
    return open_error;
  const char *refused = cgrt__refusal(rt); /* this thread was refused: another one drives rt */
  return refused ? refused : rt->last_err;
}

static int set_log(cgrt_runtime *rt, cgrt_log_fn fn, void *user) {
  rt->log.fn = fn;
  rt->log.user = user;
  return 0;
}

CGRT_API int cgrt_set_log(cgrt_runtime *rt, cgrt_log_fn fn, void *user) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_set_log", CGRT_CALL_USE, set_log(rt, fn, user));
}

static int log_message(cgrt_runtime *rt, cgrt_log_level level, const char *msg) {
  if (rt->log.in_sink)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "cgrt_log_message called from the log sink: the sink is not re-entered "
                      "(the line would call it again); the line was dropped");
  cgrt__log(&rt->log, level, "%s", msg);
  return 0;
}

CGRT_API int cgrt_log_message(cgrt_runtime *rt, cgrt_log_level level, const char *msg) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!msg)
    return cgrt__bad_args(rt, "cgrt_log_message");
  CGRT_GUARDED(rt, "cgrt_log_message", CGRT_CALL_USE, log_message(rt, level, msg));
}

static int set_capture_hooks(cgrt_runtime *rt, const cgrt_capture_hooks *hooks, const char *fn);

CGRT_API int cgrt_set_capture_hooks(cgrt_runtime *rt, cgrt_capture_fn begin, cgrt_capture_fn end,
                                    void *user) {
  if (!rt)
    return CGRT_E_INVAL;
  cgrt_capture_hooks h = {.struct_size = sizeof(h), .begin = begin, .end = end, .user = user};
  CGRT_GUARDED(rt, "cgrt_set_capture_hooks", CGRT_CALL_CHANGE,
               set_capture_hooks(rt, &h, "cgrt_set_capture_hooks"));
}

CGRT_API int cgrt_set_capture_hooks_ex(cgrt_runtime *rt, const cgrt_capture_hooks *hooks) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_set_capture_hooks_ex", CGRT_CALL_CHANGE,
               set_capture_hooks(rt, hooks, "cgrt_set_capture_hooks_ex"));
}

/* The fields every caller of cgrt_set_capture_hooks_ex sets (pool_allocator came with them). */
#define CAPTURE_HOOKS_MIN (offsetof(cgrt_capture_hooks, user) + sizeof(void *))

static int set_capture_hooks(cgrt_runtime *rt, const cgrt_capture_hooks *hooks, const char *fn) {
  if (!hooks || hooks->struct_size < CAPTURE_HOOKS_MIN)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "cgrt_set_capture_hooks_ex: hooks must be non-NULL, with hooks->struct_size "
                      "set to sizeof(cgrt_capture_hooks)");
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "%s: not allowed inside a step (a capture may be open)", fn);
  /* A shorter struct (an older header) lacks the fields after it: they read as NULL. */
  cgrt_capture_hooks h;
  memset(&h, 0, sizeof(h));
  memcpy(&h, hooks, hooks->struct_size < sizeof(h) ? hooks->struct_size : sizeof(h));
  char *pool = NULL;
  if (h.pool_allocator && h.pool_allocator[0] && !(pool = strdup(h.pool_allocator)))
    return cgrt__fail(&rt->log, CGRT_E_NOMEM,
                      "cgrt_set_capture_hooks_ex: out of memory copying pool_allocator");
  free(rt->graphs.hooks.pool);
  rt->graphs.hooks.pool = pool;
  rt->graphs.hooks.begin = h.begin;
  rt->graphs.hooks.end = h.end;
  rt->graphs.hooks.user = h.user;
  return 0;
}

CGRT_API void *cgrt_stream(cgrt_runtime *rt) {
  return rt ? rt->stream : NULL;
}

CGRT_API const char *cgrt_backend_name(const cgrt_runtime *rt) {
  return rt && rt->lib.vt ? rt->lib.vt->name : "";
}

static int config_get(cgrt_runtime *rt, const char *section, const char *key, char *buf,
                      size_t len) {
  buf[0] = '\0';
  int id = cgrt__cfg_key_find(section, key);
  char *text = id >= 0 ? cgrt__cfg_value_text(&rt->cfg, id) : NULL;
  const char *value = text;
  if (id < 0) {
    /* A backend's own section: the raw value as given, if any. */
    value = rt->cfg.view.get(&rt->cfg.view, section, key);
    if (!value)
      return cgrt__fail(&rt->log, CGRT_E_NOTFOUND,
                        "cgrt_config_get: [%s] %s is not a configuration key of this runtime",
                        section, key);
  } else if (!text) {
    return CGRT_E_NOMEM;
  }
  int fits = strlen(value) < len;
  snprintf(buf, len, "%s", value);
  free(text);
  if (!fits)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_config_get: [%s] %s does not fit in %zu bytes",
                      section, key, len);
  return 0;
}

CGRT_API int cgrt_config_get(cgrt_runtime *rt, const char *section, const char *key, char *buf,
                             size_t len) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!section || !key || !buf || !len)
    return cgrt__bad_args(rt, "cgrt_config_get");
  CGRT_GUARDED(rt, "cgrt_config_get", CGRT_CALL_USE, config_get(rt, section, key, buf, len));
}

static int unexplained(cgrt_runtime *rt, const char *what, int rc);

static int module_register(cgrt_runtime *rt, const cgrt_module_desc *d, cgrt_module **out) {
  if (!d || d->struct_size < MODULE_DESC_MIN || !out)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "cgrt_module_register: desc and out must be non-NULL and "
                      "desc->struct_size set to sizeof(cgrt_module_desc)");
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "cgrt_module_register: register modules before or between steps, not "
                      "inside one");
  if (!d->name || !d->name[0])
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_module_register: a module needs a name");
  if (!d->forward)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "module '%s': forward callback is NULL", d->name);
  if ((unsigned)d->kind >= CGRT_KIND_COUNT)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "module '%s': kind %d is not a cgrt_kind", d->name,
                      (int)d->kind);
  for (size_t i = 0; i < rt->num_modules; i++)
    if (strcmp(rt->modules[i]->name, d->name) == 0)
      return cgrt__fail(&rt->log, CGRT_E_INVAL,
                        "module '%s' is already registered; names are unique", d->name);
  if (rt->num_modules == rt->cap_modules) {
    size_t cap = rt->cap_modules ? rt->cap_modules * 2 : 16;
    struct cgrt_module **v = realloc(rt->modules, cap * sizeof(*v));
    if (!v)
      return cgrt__fail(&rt->log, CGRT_E_NOMEM, "out of memory registering module '%s'", d->name);
    rt->modules = v;
    rt->cap_modules = cap;
  }
  struct cgrt_module *m = calloc(1, sizeof(*m));
  char *name = strdup(d->name), *fwd = NULL, *bwd = NULL;
  if (!m || !name || asprintf(&fwd, "%s fwd", d->name) < 0 ||
      asprintf(&bwd, "%s bwd", d->name) < 0) {
    free(m);
    free(name);
    free(fwd);
    return cgrt__fail(&rt->log, CGRT_E_NOMEM, "out of memory registering module '%s'", d->name);
  }
  m->call_names[0] = fwd;
  m->call_names[1] = bwd;
  m->name = name;
  m->forward = d->forward;
  m->backward = d->backward;
  m->user = d->user;
  m->rt = rt;
  m->no_cp_comm = d->struct_size >= MODULE_DESC_NO_COMM && d->no_cp_comm != 0;
  m->stages_inputs = d->struct_size >= MODULE_DESC_STAGES && d->stages_inputs != 0;
  m->info.struct_size = sizeof(m->info);
  m->info.id = (uint32_t)rt->num_modules;
  m->info.name = name;
  m->info.kind = d->kind;
  m->info.layer = d->layer;
  m->info.has_backward = d->backward != NULL;
  if (CGRT_BACKEND_HAS(rt->lib.vt, module_added)) {
    /* The backend sizes its per-module state now; its refusal keeps the module out. */
    rt->log.err[0] = '\0';
    int rc = rt->lib.vt->module_added(rt->be_state, &m->info);
    if (rc != 0) {
      if (!rt->log.err[0])
        rc = unexplained(rt, "module_added", rc);
      free(m->call_names[0]);
      free(m->call_names[1]);
      free(name);
      free(m);
      return rc;
    }
  }
  rt->modules[rt->num_modules++] = m;
  *out = m;
  return 0;
}

CGRT_API int cgrt_module_register(cgrt_runtime *rt, const cgrt_module_desc *d, cgrt_module **out) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_module_register", CGRT_CALL_CHANGE, module_register(rt, d, out));
}

/* ---------------------------------------------------------------- steps and calls */

static int check_step_desc(cgrt_runtime *rt, const cgrt_step_desc *d) {
  if (!d || d->struct_size < STEP_DESC_MIN)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "cgrt_step: desc is NULL or desc->struct_size is not set to "
                      "sizeof(cgrt_step_desc)");
  if (!d->body)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_step: desc->body is NULL; a step needs a body");
  if ((unsigned)d->phase >= CGRT_PHASE_COUNT)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_step: phase %d is not a cgrt_phase",
                      (int)d->phase);
  if (d->tokens < 0 || d->microbatches < 0 || d->cp_size < 0 || d->num_sequences < 0)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "cgrt_step: tokens (%lld), microbatches (%d), cp_size (%d) and "
                      "num_sequences (%d) must not be negative",
                      (long long)d->tokens, d->microbatches, d->cp_size, d->num_sequences);
  if (d->num_sequences > 0 && !d->seqlens)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_step: num_sequences is %d but seqlens is NULL",
                      d->num_sequences);
  if (d->num_buffers > 0 && !d->buffers)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_step: num_buffers is %zu but buffers is NULL",
                      d->num_buffers);
  return 0;
}

/*
 * A backend callback (`what`: step, call, stats, release) returned rc without a sentence
 * (set_error): the core names the backend, the callback and the code, so that no failure reaches
 * the host without one.
 */
static int unexplained(cgrt_runtime *rt, const char *what, int rc) {
  return cgrt__fail(&rt->log, rc,
                    "backend '%s' (%s): its %s callback returned %d (%s) without saying why "
                    "(host->set_error): a bug in the backend; report it to its author",
                    rt->lib.vt->name, rt->lib.path, what, rc, cgrt_strerror(rc));
}

/* cgrt.h's names for the backend's capabilities are backend.h's bits. */
_Static_assert(CGRT_BACKEND_TRAINING == CGRT_CAP_TRAINING &&
                   CGRT_BACKEND_INFERENCE == CGRT_CAP_INFERENCE &&
                   CGRT_BACKEND_BACKWARD == CGRT_CAP_BACKWARD &&
                   CGRT_BACKEND_GRAPHS == CGRT_CAP_GRAPHS &&
                   CGRT_BACKEND_MULTI_GPU == CGRT_CAP_MULTI_GPU &&
                   CGRT_BACKEND_COMM == CGRT_CAP_NEEDS_COMM &&
                   CGRT_BACKEND_ADAPTIVE == CGRT_CAP_ADAPTIVE_BUCKETS &&
                   CGRT_BACKEND_BUCKETS == CGRT_CAP_TOKEN_BUCKETS &&
                   CGRT_BACKEND_WHOLE_STEP == CGRT_CAP_WHOLE_STEP,
               "cgrt.h's CGRT_BACKEND_* differ from backend.h's CGRT_CAP_*");

/* Whether the backend has a form of its own for steps of `phase` (its CGRT_CAP_* bits). */
static int backend_runs_phase(const cgrt_runtime *rt, cgrt_phase phase) {
  uint64_t need = phase == CGRT_PHASE_INFER ? CGRT_CAP_INFERENCE : CGRT_CAP_TRAINING;
  return (rt->lib.vt->caps & need) != 0;
}

/*
 * A step of a phase the backend has no form for (transformer_engine's inference): cgrt runs it
 * eagerly, as under none, so that swapping `impl` never breaks a host that also serves or
 * evaluates. Said once per phase at info, counted (cgrt_stats.eager_phase_steps).
 */
static int run_phase_eagerly(cgrt_runtime *rt, struct cgrt_step_frame *f) {
  cgrt_phase phase = f->ctx->phase;
  if (!(rt->phase_said & (1u << phase))) {
    rt->phase_said |= 1u << phase;
    cgrt__log(&rt->log, CGRT_LOG_INFO,
              "backend '%s' has no form for %s steps: cgrt runs them eagerly, as under impl = "
              "none (cgrt_backend_info_get tells a host in advance; cgrt_stats.eager_phase_steps "
              "counts them)",
              rt->lib.vt->name, cgrt_phase_name(phase));
  }
  rt->stats.eager_phase_steps++;
  f->ctx->mode = CGRT_MODE_EAGER;
  int rc = rt->host.run_prepare(&rt->host, f);
  if (rc != 0)
    return rc;
  rt->core_eager = 1;
  rc = rt->host.run_body(&rt->host, f);
  rt->core_eager = 0;
  return rc;
}

static int backend_info_get(cgrt_runtime *rt, cgrt_backend_info *info) {
  cgrt_backend_info out = {.struct_size = sizeof(out),
                           .name = rt->lib.vt->name,
                           .path = rt->lib.path,
                           .caps = rt->lib.vt->caps};
  for (int p = 0; p < CGRT_PHASE_COUNT; p++)
    out.phases[p] = !backend_runs_phase(rt, (cgrt_phase)p)      ? CGRT_RUN_CORE_EAGER
                    : (rt->lib.vt->caps & CGRT_CAP_GRAPHS) != 0 ? CGRT_RUN_GRAPHS
                                                                : CGRT_RUN_EAGER;
  size_t keep = info->struct_size;
  memcpy(info, &out, keep < sizeof(out) ? keep : sizeof(out));
  info->struct_size = keep;
  return 0;
}

static int backend_figures(cgrt_runtime *rt, cgrt_figure_fn fn, void *user) {
  if (!CGRT_BACKEND_HAS(rt->lib.vt, figures))
    return 0;
  rt->log.err[0] = '\0';
  int rc = rt->lib.vt->figures(rt->be_state, fn, user);
  if (rc != 0 && !rt->log.err[0])
    rc = unexplained(rt, "figures", rc);
  return rc;
}

CGRT_API int cgrt_backend_figures(cgrt_runtime *rt, cgrt_figure_fn fn, void *user) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!fn)
    return cgrt__bad_args(rt, "cgrt_backend_figures");
  CGRT_GUARDED(rt, "cgrt_backend_figures", CGRT_CALL_USE, backend_figures(rt, fn, user));
}

CGRT_API int cgrt_backend_info_get(cgrt_runtime *rt, cgrt_backend_info *info) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!info || info->struct_size < offsetof(cgrt_backend_info, phases))
    return cgrt__bad_args(rt, "cgrt_backend_info_get");
  CGRT_GUARDED(rt, "cgrt_backend_info_get", CGRT_CALL_USE, backend_info_get(rt, info));
}

/* Counts a module call by the mode the backend ran it in. */
static void count_call(cgrt_runtime *rt, cgrt_mode mode) {
  if ((unsigned)mode >= CGRT_MODE_COUNT)
    mode = CGRT_MODE_EAGER;
  rt->stats.calls_by_mode[mode]++;
  rt->call_modes |= 1u << mode;
  if (mode == CGRT_MODE_CAPTURE)
    rt->graphs.rep->calls_captured++;
  else if (mode == CGRT_MODE_REPLAY)
    rt->graphs.rep->calls_replayed++;
  else
    rt->graphs.rep->calls_eager++;
}

/* The mode of a step from its module calls so far: capture, else warmup, else replay, else eager.
 */

/*
 * Ends a capture a backend left open, so the host's stream is never left capturing. Only a
 * capture begun by hand (host->capture_begin) can stay open: the helpers always end theirs.
 */
static int close_stray_capture(cgrt_runtime *rt) {
  if (rt->open_captures == 0)
    return 0;
  int open = rt->open_captures;
  rt->open_captures = 0;
  int active = 0;
  if (rt->dev.drv->capture_status(&rt->dev, rt->stream, &active) != 0)
    active = 0;
  if (active) {
    void *graph = NULL;
    rt->dev.drv->capture_end(&rt->dev, rt->stream, &graph);
    if (graph)
      rt->dev.drv->graph_destroy(&rt->dev, graph);
  }
  while (open-- > 0)
    cgrt__gate_capture_leave(rt->dev.device); /* each begun by hand passed the gate */
  /* Whatever the stream's state, the host hears the end of every capture it heard begin. */
  while (rt->graphs.hooks.depth > 0)
    (void)cgrt__hook_end(&rt->graphs.hooks, rt->stream);
  if (!active)
    return 0;
  return cgrt__fail(&rt->log, CGRT_E_CAPTURE,
                    "backend '%s' returned from step %llu with the stream still capturing; the "
                    "capture was ended and discarded (a bug in the backend)",
                    rt->lib.vt->name, (unsigned long long)rt->graphs.step_index);
}

/*
 * Orders cgrt's own stream with the host's legacy default stream (DESIGN section 2, README
 * "Streams"), on the device: the host never blocks. At a step's entry (entry 1) cgrt's stream
 * waits for what was enqueued on the legacy stream before: the host's copies and kernels there,
 * and, as the legacy stream itself waits for every blocking stream (a per-thread default stream,
 * a stream made with cudaStreamCreate), their work too. At its exit (entry 0) the legacy stream
 * waits for the step, so what the host enqueues there next sees the step's writes. Outside any
 * capture: the step's captures begin after the entry and end before the exit. Nothing to do when
 * cgrt runs on the host's own stream (cgrt_open_options.stream): one stream is in order.
 */
static int order_with_host(cgrt_runtime *rt, int entry) {
  if (!rt->order_in)
    return 0;
  const struct cgrt_driver *d = rt->dev.drv;
  void *event = entry ? rt->order_in : rt->order_out;
  void *from = entry ? CGRT_LEGACY_STREAM : rt->stream;
  void *to = entry ? rt->stream : CGRT_LEGACY_STREAM;
  int rc = cgrt__fault_event_record(entry ? NULL : &rt->faults.order_exit, &rt->dev, event, from);
  if (rc == 0)
    rc = d->stream_wait(&rt->dev, to, event);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc,
                      "cgrt_step: making %s wait for %s failed: %s; the step's results are not "
                      "ordered with the host's work on the legacy default stream",
                      entry ? "cgrt's stream" : "the legacy default stream",
                      entry ? "the host's work on the legacy default stream" : "the step",
                      rt->dev.err);
  return 0;
}

static int order_exit(cgrt_runtime *rt) {
  return order_with_host(rt, 0);
}

/*
 * Runs `after` (the step's exit work) whatever rc, the step's result so far: its failure is the
 * step's when the step had none; after a failed step, the step's error stays the one returned and
 * said, and a failure of `after` goes to the log at warn.
 */
static int then(cgrt_runtime *rt, int rc, int (*after)(cgrt_runtime *)) {
  if (rc == 0)
    return after(rt);
  char kept[sizeof(rt->log.err)];
  snprintf(kept, sizeof(kept), "%s", rt->log.err);
  if (after(rt) != 0) {
    cgrt__log(&rt->log, CGRT_LOG_WARN, "%s", rt->log.err);
    snprintf(rt->log.err, sizeof(rt->log.err), "%s", kept);
  }
  return rc;
}

static int step_run(cgrt_runtime *rt, const cgrt_step_desc *desc, cgrt_step_report *report) {
  if (!rt)
    return CGRT_E_INVAL;
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "cgrt_step called from inside a step (prepare, body or a module); steps "
                      "do not nest");
  int rc = check_step_desc(rt, desc);
  if (rc != 0)
    return rc;
  if (report && report->struct_size < REPORT_MIN)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_step: report->struct_size is not set");
  /* [runtime] max_queued_steps: before the step's host time starts, so it is not counted there */
  rc = cgrt__queue_wait(rt);
  if (rc == 0)
    rc = order_with_host(rt, 1);
  if (rc != 0)
    return rc;

  uint64_t t0 = cgrt__now_ns();
  cgrt_ctx ctx = {
      .struct_size = sizeof(ctx),
      .rt = rt,
      .stream = rt->stream,
      .cp_size = desc->cp_size > 1 ? desc->cp_size : 1,
      .phase = desc->phase,
      .mode = CGRT_MODE_EAGER,
      .microbatch = -1,
      .step = rt->graphs.step_index,
      .tokens = desc->tokens,
      .padded_tokens = desc->tokens,
      .num_sequences = desc->num_sequences,
      .padded_sequences = desc->num_sequences,
      .user = desc->user,
      .buffers = desc->buffers,
      .num_buffers = desc->num_buffers,
  };
  if (rt->comms.ready && cgrt__comms_find(&rt->comms, ctx.cp_size, &ctx.comm, &ctx.cp_rank) != 0)
    ctx.comm = NULL; /* no group of that size: the backend decides whether that is an error */
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  struct cgrt_step_frame frame = {
      .struct_size = sizeof(frame), .desc = desc, .ctx = &ctx, .report = &rep};
  rt->graphs.in_step = 1;
  rt->graphs.body_stages = desc->struct_size >= STEP_DESC_STAGES && desc->stages_inputs != 0;
  rt->ctx = &ctx;
  rt->graphs.rep = &rep;
  rt->call_modes = 0;
  rt->log.err[0] = '\0'; /* so that an error nobody explained is told apart (unexplained()) */
  rc = backend_runs_phase(rt, desc->phase) ? rt->lib.vt->step(rt->be_state, &frame)
                                           : run_phase_eagerly(rt, &frame);
  if (rc != 0 && !rt->log.err[0])
    rc = unexplained(rt, "step", rc);
  /* A failed step keeps its own error; a capture it left open is then said at warn. */
  rc = then(rt, rc, close_stray_capture);
  /* Also after a failed step: what it enqueued still comes before the host's next work, and its
     end is recorded for [runtime] max_queued_steps after its last work. */
  rc = then(rt, rc, order_exit);
  rc = then(rt, rc, cgrt__queue_record);
  rt->graphs.in_step = 0;
  rt->in_body = 0;
  rt->ctx = NULL;
  rt->graphs.rep = NULL;

  rep.mode = ctx.mode;
  rep.padded_tokens = ctx.padded_tokens;
  rep.host_ns = cgrt__now_ns() - t0;
  rt->stats.steps++;
  rt->stats.steps_by_mode[ctx.mode < CGRT_MODE_COUNT ? ctx.mode : CGRT_MODE_EAGER]++;
  if (ctx.padded_tokens > ctx.tokens)
    rt->stats.padding_tokens += (uint64_t)(ctx.padded_tokens - ctx.tokens);
  if (desc->phase == CGRT_PHASE_INFER)
    rt->stats.real_tokens += (uint64_t)desc->tokens;
  rt->graphs.step_index++;
  if (report) {
    size_t n = report->struct_size < sizeof(rep) ? report->struct_size : sizeof(rep);
    size_t keep = report->struct_size;
    memcpy(report, &rep, n);
    report->struct_size = keep;
  }
  return rc;
}

static int module_call(cgrt_runtime *rt, cgrt_module *m, const cgrt_ctx *ctx, const cgrt_args *args,
                       cgrt_direction dir) {
  const char *fn = dir == CGRT_FORWARD ? "cgrt_forward" : "cgrt_backward";
  if (!rt)
    return CGRT_E_INVAL;
  int rc = 0;
  if (!m || m->rt != rt)
    rc = cgrt__fail(&rt->log, CGRT_E_INVAL, "%s: the module is NULL or belongs to another runtime",
                    fn);
  else if (!rt->in_body || ctx != rt->ctx)
    rc = cgrt__fail(&rt->log, CGRT_E_STATE,
                    "%s('%s'): module calls are made from the step body with the ctx it was "
                    "given",
                    fn, m->name);
  else if (rt->in_call)
    rc = cgrt__fail(&rt->log, CGRT_E_STATE,
                    "%s('%s'): called from inside another module's callback; module calls do "
                    "not nest",
                    fn, m->name);
  else if (!args || args->struct_size < ARGS_MIN || (args->num_buffers && !args->buffers))
    rc = cgrt__fail(&rt->log, CGRT_E_INVAL,
                    "%s('%s'): args is NULL, args->struct_size is not set, or num_buffers > 0 "
                    "with buffers NULL",
                    fn, m->name);
  else if (dir == CGRT_BACKWARD && !m->backward)
    rc = cgrt__fail(&rt->log, CGRT_E_STATE,
                    "cgrt_backward('%s'): the module has no backward callback", m->name);
  if (rc != 0) {
    if (rt->in_body)
      rt->body_error = rc;
    return rc;
  }
  cgrt_ctx *c_ctx = rt->ctx;
  cgrt_mode body_mode = c_ctx->mode;
  struct cgrt_call call = {.struct_size = sizeof(call),
                           .module = &m->info,
                           .dir = dir,
                           .args = args,
                           .ctx = c_ctx,
                           .in_body_graph = rt->graphs.in_body_graph};
  rt->in_call = 1;
  /* The backend's work is cgrt's own until it runs the module's callback (diagnose's caller). */
  const void *host_frame = rt->graphs.host_frame;
  rt->graphs.host_frame = NULL;
  rt->log.err[0] = '\0';
  rc = rt->core_eager ? rt->host.run_module(&rt->host, &call)
                      : rt->lib.vt->call(rt->be_state, &call);
  if (rc != 0 && !rt->log.err[0])
    rc = unexplained(rt, "call", rc);
  rt->graphs.host_frame = host_frame;
  rt->in_call = 0;
  count_call(rt, c_ctx->mode);
  c_ctx->mode = body_mode;
  c_ctx->microbatch = -1;
  if (rc != 0)
    rt->body_error = rc;
  return rc;
}

CGRT_API int cgrt_forward(cgrt_runtime *rt, cgrt_module *m, const cgrt_ctx *ctx,
                          const cgrt_args *args) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_forward", CGRT_CALL_USE, module_call(rt, m, ctx, args, CGRT_FORWARD));
}

CGRT_API int cgrt_backward(cgrt_runtime *rt, cgrt_module *m, const cgrt_ctx *ctx,
                           const cgrt_args *args) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_backward", CGRT_CALL_USE, module_call(rt, m, ctx, args, CGRT_BACKWARD));
}

/* cgrt_step, one thread at a time (guard.c): the step itself is step_run. */
CGRT_API int cgrt_step(cgrt_runtime *rt, const cgrt_step_desc *desc, cgrt_step_report *report) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_step", CGRT_CALL_STEP, step_run(rt, desc, report));
}

static int enqueue_host(cgrt_runtime *rt, const cgrt_ctx *ctx, void (*fn)(void *arg), void *arg) {
  int rc = rt->dev.drv->host_fn(&rt->dev, ctx->stream, fn, arg);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "cgrt_enqueue_host: %s", rt->dev.err);
  return 0;
}

CGRT_API int cgrt_enqueue_host(const cgrt_ctx *ctx, void (*fn)(void *arg), void *arg) {
  if (!ctx || !ctx->rt)
    return CGRT_E_INVAL;
  if (!fn)
    return cgrt__bad_args(ctx->rt, "cgrt_enqueue_host");
  CGRT_GUARDED(ctx->rt, "cgrt_enqueue_host", CGRT_CALL_USE, enqueue_host(ctx->rt, ctx, fn, arg));
}

static int synchronize(cgrt_runtime *rt) {
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "cgrt_synchronize: not allowed inside a step (the work may be captured)");
  int rc = cgrt__run_stream(rt, "cgrt_synchronize");
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "cgrt_synchronize: %s", rt->dev.err);
  cgrt__comms_drained(&rt->comms);
  return 0;
}

CGRT_API int cgrt_synchronize(cgrt_runtime *rt) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_synchronize", CGRT_CALL_CHANGE, synchronize(rt));
}

/*
 * cgrt_device_synchronize: the device-wide synchronize, through the capture gate (base/gate.h),
 * so that it never meets a capture of any runtime of the process. `driven`: the call drives rt
 * (the host driver, or a callback of rt's calls), its failure is rt's last error and refused
 * inside a step; else it touches nothing of rt but its device and driver, fixed at open, and its
 * failure is this thread's (cgrt__fail_here).
 */
static int device_synchronize(cgrt_runtime *rt, int driven) {
  if (driven && rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "cgrt_device_synchronize: not allowed inside a step (the work may be "
                      "captured); nothing was done: synchronize after the step returns");
  char err[512];
  int rc = cgrt__gate_sync_enter(rt->dev.device);
  if (rc != 0) {
    snprintf(err, sizeof(err),
             "called while this thread captures (the work of a module or a body inside a capture "
             "of cgrt): a device-wide synchronize would break that capture; nothing was done: "
             "synchronize after the step returns");
  } else {
    rc = rt->dev.drv->device_sync(&rt->dev, err, sizeof(err));
    cgrt__gate_sync_leave(rt->dev.device);
  }
  if (rc == 0)
    return 0;
  return driven ? cgrt__fail(&rt->log, rc, "cgrt_device_synchronize: %s", err)
                : cgrt__fail_here(rt, rc, "cgrt_device_synchronize: %s", err);
}

CGRT_API int cgrt_device_synchronize(cgrt_runtime *rt) {
  if (!rt)
    return CGRT_E_INVAL;
  /* The host driver is not thread-safe: there it drives rt as any other call does; so does a
     callback of rt's own calls, with a callback's rules. */
  if (rt->dev.drv == &cgrt__driver_host || cgrt__driving_here(rt))
    CGRT_GUARDED(rt, "cgrt_device_synchronize", CGRT_CALL_CHANGE, device_synchronize(rt, 1));
  return device_synchronize(rt, 0);
}

static int set_world_comm(cgrt_runtime *rt, void *world_comm) {
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE, "cgrt_set_world_comm: not allowed inside a step");
  const struct cgrt_config_view *v = &rt->cfg.view;
  return cgrt__comms_split(&rt->comms, &rt->dev, v->driver == CGRT_DRIVER_HOST, v->cp_sizes,
                           v->num_cp_sizes, &rt->log, world_comm);
}

CGRT_API int cgrt_set_world_comm(cgrt_runtime *rt, void *world_comm) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_set_world_comm", CGRT_CALL_CHANGE, set_world_comm(rt, world_comm));
}

static int stats_get(cgrt_runtime *rt, cgrt_stats *out) {
  cgrt_stats s = rt->stats;
  if (rt->lib.vt->caps & CGRT_CAP_TOKEN_BUCKETS) { /* else no step is ever padded to them */
    s.num_buckets = (uint32_t)rt->num_buckets;
    for (size_t i = 0; i < rt->num_buckets && i < CGRT_STATS_MAX_BUCKETS; i++)
      s.buckets[i] = rt->buckets[i];
  }
  uint64_t used = 0, reserved = 0;
  if (rt->dev.drv->graph_mem(&rt->dev, &used, &reserved) == 0) {
    s.graph_mem_used = used;
    s.graph_mem_reserved = reserved;
  }
  s.graph_pool_bytes = rt->graphs.mem.pool;
  s.graph_exec_bytes = rt->graphs.mem.exec;
  s.graph_bytes = rt->graphs.mem.pool + rt->graphs.mem.exec;
  s.graph_pool_idle = rt->graphs.mem.idle;
  s.graph_bytes_peak = rt->graphs.mem.peak;
  s.graph_nodes = rt->graphs.mem.nodes;
  s.memory_budget = rt->cfg.view.memory_budget;
  s.budget_eager = rt->graphs.mem.budget_eager;
  s.budget_evictions = rt->graphs.mem.budget_evictions;
  s.staged_bytes = rt->graphs.mem.staged;
  if (rt->graphs.sync_guarded)
    rt->dev.drv->sync_guard_counts(rt->dev.device, &s.sync_guard_waits, &s.sync_guard_late);
  if (CGRT_BACKEND_HAS(rt->lib.vt, stats)) {
    /* The backend adds to a copy: if it fails, the host still gets the core's counters. */
    cgrt_stats with = s;
    rt->log.err[0] = '\0';
    int rc = rt->lib.vt->stats(rt->be_state, &with);
    if (rc != 0) {
      if (!rt->log.err[0])
        rc = unexplained(rt, "stats", rc);
      char why[sizeof(rt->log.err)];
      snprintf(why, sizeof(why), "%s", rt->log.err);
      cgrt__fail(&rt->log, rc,
                 "%s; cgrt_stats_get filled in the core's own counters without the backend's", why);
      size_t keep = out->struct_size;
      memcpy(out, &s, keep < sizeof(s) ? keep : sizeof(s));
      out->struct_size = keep;
      return rc;
    }
    s = with;
  }
  size_t keep = out->struct_size;
  memcpy(out, &s, keep < sizeof(s) ? keep : sizeof(s));
  out->struct_size = keep;
  return 0;
}

CGRT_API int cgrt_stats_get(cgrt_runtime *rt, cgrt_stats *out) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!out || out->struct_size < STATS_MIN)
    return cgrt__bad_args(rt, "cgrt_stats_get");
  CGRT_GUARDED(rt, "cgrt_stats_get", CGRT_CALL_USE, stats_get(rt, out));
}
