/*
 * tool.c - cgrt/tool.h: the internal-but-stable interface of the `cgrt` command, as thin
 * wrappers over the core's own functions, so the command links libcgrt.so like any host.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrt/tool.h"
#include "buckets/bucket_time.h"
#include "buckets/buckets.h"
#include "config/config.h"
#include "base/loader.h"
#include "guard.h"
#include "runtime.h"

struct cgrt_tool_config {
  struct cgrt_config cfg; /* first: view.get() finds the config from the view's address */
};

CGRT_API int cgrt_tool_config_read(cgrt_tool_config **out, const char *path, const char *text,
                                   const char *name, cgrt_tool_msg_fn msg, void *user) {
  if (!out)
    return CGRT_E_INVAL;
  *out = NULL;
  if (!path && !text)
    return CGRT_E_INVAL;
  cgrt_tool_config *c = calloc(1, sizeof(*c));
  if (!c)
    return CGRT_E_NOMEM;
  struct cgrt_diag diag = {0};
  int rc = path ? cgrt__config_load(&c->cfg, path, &diag)
                : cgrt__config_parse(&c->cfg, text, name ? name : "<string>", &diag);
  for (size_t i = 0; msg && i < diag.count; i++)
    msg(user, diag.msgs[i].level, diag.msgs[i].text);
  /* A failure with no message of its own (allocation) still says something. */
  if (msg && rc != 0 && diag.errors == 0 && rc != CGRT_E_CONFIG)
    msg(user, CGRT_LOG_ERROR, cgrt_strerror(rc));
  cgrt__diag_free(&diag);
  if (rc != 0) {
    cgrt__config_free(&c->cfg);
    free(c);
    return rc;
  }
  *out = c;
  return 0;
}

CGRT_API struct cgrt_config_view *cgrt_tool_config_view(cgrt_tool_config *cfg) {
  return cfg ? &cfg->cfg.view : NULL;
}

CGRT_API int cgrt_tool_config_set_cp_sizes(cgrt_tool_config *cfg, const int *sizes, size_t n) {
  if (!cfg || !sizes || n == 0)
    return CGRT_E_INVAL;
  int *v = malloc(n * sizeof(*v));
  if (!v)
    return CGRT_E_NOMEM;
  memcpy(v, sizes, n * sizeof(*v));
  free(cfg->cfg.cp_sizes);
  cfg->cfg.cp_sizes = v;
  cfg->cfg.view.cp_sizes = v;
  cfg->cfg.view.num_cp_sizes = n;
  return 0;
}

CGRT_API int cgrt_tool_config_set_option(cgrt_tool_config *cfg, const char *section,
                                         const char *key, const char *value) {
  char why[512];
  return cfg ? cgrt__config_set_option(&cfg->cfg, section, key, value, why, sizeof(why))
             : CGRT_E_INVAL;
}

CGRT_API int cgrt_tool_config_print(const cgrt_tool_config *cfg, FILE *out) {
  return cfg && out ? cgrt__config_print(&cfg->cfg, out) : CGRT_E_INVAL;
}

CGRT_API void cgrt_tool_config_free(cgrt_tool_config *cfg) {
  if (!cfg)
    return;
  cgrt__config_free(&cfg->cfg);
  free(cfg);
}

CGRT_API const char *cgrt_tool_default_config(void) {
  return cgrt__default_config;
}

CGRT_API int cgrt_tool_open_on(cgrt_runtime **rt, cgrt_tool_config *cfg, cgrt_log_fn log,
                               void *log_user, void *stream) {
  if (!rt || !cfg) {
    cgrt_tool_config_free(cfg);
    return CGRT_E_INVAL;
  }
  /* takes cfg->cfg, leaves it zeroed */
  int rc = cgrt__open_config(rt, &cfg->cfg, log, log_user, stream);
  free(cfg);
  return rc;
}

CGRT_API int cgrt_tool_open(cgrt_runtime **rt, cgrt_tool_config *cfg, cgrt_log_fn log,
                            void *log_user) {
  return cgrt_tool_open_on(rt, cfg, log, log_user, NULL);
}

CGRT_API const struct cgrt_config_view *cgrt_tool_view(const cgrt_runtime *rt) {
  return rt ? &rt->cfg.view : NULL;
}

CGRT_API const struct cgrt_backend_v1 *cgrt_tool_backend(const cgrt_runtime *rt,
                                                         const char **path) {
  if (path)
    *path = rt ? rt->lib.path : NULL;
  return rt ? rt->lib.vt : NULL;
}

static int describe(cgrt_runtime *rt, void (*emit)(void *user, const char *line), void *user) {
  if (!rt->be_ready)
    return CGRT_E_INVAL;
  const struct cgrt_backend_v1 *vt = rt->lib.vt;
  if (!CGRT_BACKEND_HAS(vt, describe))
    return CGRT_E_UNSUPPORTED;
  unsigned busy = rt->busy;
  rt->busy |= CGRT_BUSY_DESCRIBE; /* the backend walks its state while emit runs */
  vt->describe(rt->be_state, emit, user);
  rt->busy = busy;
  return 0;
}

CGRT_API int cgrt_tool_describe(cgrt_runtime *rt, void (*emit)(void *user, const char *line),
                                void *user) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!emit)
    return cgrt__bad_args(rt, "cgrt_tool_describe");
  CGRT_GUARDED(rt, "cgrt_tool_describe", CGRT_CALL_USE, describe(rt, emit, user));
}

static int buckets(const cgrt_runtime *rt, const int64_t **sizes, size_t *count) {
  *sizes = rt->buckets;
  *count = rt->num_buckets;
  return 0;
}

CGRT_API int cgrt_tool_buckets(const cgrt_runtime *rt, const int64_t **sizes, size_t *count) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!sizes || !count)
    return cgrt__bad_args(rt, "cgrt_tool_buckets");
  /* The guard writes the owner of a runtime this reader takes as const. */
  CGRT_GUARDED((cgrt_runtime *)rt, "cgrt_tool_buckets", CGRT_CALL_USE, buckets(rt, sizes, count));
}

CGRT_API int cgrt_tool_nccl_mixing_off(const cgrt_runtime *rt) {
  if (!rt || !rt->comms.ready)
    return -1;
  return rt->comms.serial ? 1 : 0;
}

static int watch_graphs(cgrt_runtime *rt, cgrt_tool_graph_fn fn, void *user) {
  rt->graphs.watch_fn = fn;
  rt->graphs.watch_user = fn ? user : NULL;
  return 0;
}

CGRT_API int cgrt_tool_watch_graphs(cgrt_runtime *rt, cgrt_tool_graph_fn fn, void *user) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_tool_watch_graphs", CGRT_CALL_USE, watch_graphs(rt, fn, user));
}

CGRT_API int cgrt_tool_buckets_build(cgrt_bucket_dist dist, int64_t max_tokens, int num_graphs,
                                     int tp_size, const int64_t *list, size_t list_len,
                                     int64_t **out, size_t *count, char *err, size_t errlen) {
  return cgrt__buckets_build(dist, max_tokens, num_graphs, tp_size, list, list_len, out, count, err,
                             errlen);
}

CGRT_API int cgrt_tool_buckets_optimal(const int64_t *sizes, const double *steps,
                                       const double *tokens, size_t n, int64_t max_size, int k,
                                       int64_t *out, size_t *count, double *padded) {
  struct cgrt_histogram h = {sizes, steps, tokens, n};
  return cgrt__buckets_optimal(&h, max_size, k, out, count, padded);
}

CGRT_API double cgrt_tool_buckets_padded(const int64_t *sizes, const double *steps,
                                         const double *tokens, size_t n, const int64_t *buckets,
                                         size_t nb) {
  struct cgrt_histogram h = {sizes, steps, tokens, n};
  return cgrt__buckets_padded(&h, buckets, nb, NULL);
}

/* The planner by time: a cgrt_tool_costs is the core's step costs (bucket_time.h). */
struct cgrt_tool_costs {
  struct cgrt_step_costs c;
};

CGRT_API int cgrt_tool_costs_new(cgrt_tool_costs **out) {
  *out = calloc(1, sizeof(**out));
  return *out ? 0 : CGRT_E_NOMEM;
}

CGRT_API int cgrt_tool_costs_set(cgrt_tool_costs *c, int eager, int64_t size, double us) {
  return cgrt__costs_set(&c->c, eager, size, us);
}

CGRT_API double cgrt_tool_costs_at(const cgrt_tool_costs *c, int eager, int64_t size) {
  return eager ? cgrt__costs_at(c->c.eager, c->c.neager, size)
               : cgrt__costs_at(c->c.replay, c->c.nreplay, size);
}

CGRT_API void cgrt_tool_costs_free(cgrt_tool_costs *c) {
  if (!c)
    return;
  cgrt__costs_free(&c->c);
  free(c);
}

CGRT_API int cgrt_tool_buckets_fastest(const int64_t *sizes, const double *steps,
                                       const double *tokens, size_t n, int64_t max_size, int k,
                                       const cgrt_tool_costs *c, int eager_ok, int64_t *out,
                                       size_t *count, double *time) {
  struct cgrt_histogram h = {sizes, steps, tokens, n};
  return cgrt__buckets_fastest(&h, max_size, k, &c->c, eager_ok, out, count, time);
}

CGRT_API double cgrt_tool_plan_time(const int64_t *sizes, const double *steps, const double *tokens,
                                    size_t n, const int64_t *buckets, size_t nb,
                                    const cgrt_tool_costs *c, int eager_ok, double *eager_steps) {
  struct cgrt_histogram h = {sizes, steps, tokens, n};
  return cgrt__plan_time(&h, buckets, nb, &c->c, eager_ok, eager_steps);
}

CGRT_API int64_t cgrt_tool_bucket_need(int64_t tokens, int64_t tp, int64_t max) {
  return cgrt__bucket_need(tokens, tp, max);
}

CGRT_API void cgrt_tool_free(void *p) {
  free(p);
}

CGRT_API int cgrt_tool_backend_search_dirs(char ***dirs, size_t *count) {
  return cgrt__backend_search_dirs(NULL, dirs, count);
}

CGRT_API void cgrt_tool_free_strings(char **v, size_t n) {
  cgrt__free_strings(v, n);
}

CGRT_API int cgrt_tool_backend_check(void *dl, const char *path, const struct cgrt_backend_v1 **vt,
                                     char *err, size_t errlen) {
  return cgrt__backend_check(dl, path, vt, err, errlen);
}

CGRT_API int cgrt_tool_cores_near_gpu(int device, char *cores, size_t len, char *err,
                                      size_t errlen) {
  const struct cgrt_driver *drv = NULL;
  if (len)
    cores[0] = '\0';
  int rc = cgrt__driver_get(CGRT_DRIVER_CUDA, &drv, err, errlen);
  if (rc != 0)
    return rc == CGRT_E_NODEV ? CGRT_E_UNSUPPORTED : rc;
  if (!drv->cores_near) {
    snprintf(err, errlen, "the %s driver cannot place a GPU", drv->name);
    return CGRT_E_UNSUPPORTED;
  }
  return drv->cores_near(device, 0, cores, len, err, errlen);
}

CGRT_API int cgrt_tool_library_path(char *buf, size_t len) {
  Dl_info info;
  char path[PATH_MAX];
  if (!buf || !len)
    return CGRT_E_INVAL;
  buf[0] = '\0';
  const char *from = "/proc/self/exe";
  if (dladdr((void *)&cgrt_tool_library_path, &info) && info.dli_fname &&
      strchr(info.dli_fname, '/'))
    from = info.dli_fname;
  if (!realpath(from, path))
    return CGRT_E_IO;
  if (strlen(path) + 1 > len)
    return CGRT_E_INVAL;
  snprintf(buf, len, "%s", path);
  return 0;
}

CGRT_API int cgrt_tool_driver_search_dirs(char ***dirs, size_t *count) {
  return cgrt__object_search_dirs(&cgrt__kind_driver, NULL, dirs, count);
}

CGRT_API int cgrt_tool_driver_describe(const char *name, void (*emit)(void *user, const char *line),
                                       void *user, char *path, size_t pathlen, char *err,
                                       size_t errlen) {
  if (!name || !emit)
    return CGRT_E_INVAL;
  if (path && pathlen)
    path[0] = '\0';
  if (strcmp(name, "host") == 0) {
    if (path)
      snprintf(path, pathlen, "(built in)");
    return 0;
  }
  void *dl = NULL;
  char *file = NULL;
  const struct cgrt_driver *drv = NULL;
  int rc = cgrt__driver_object_open(name, NULL, &dl, &file, &drv, err, errlen);
  if (rc != 0)
    return rc;
  if (path)
    snprintf(path, pathlen, "%s", file);
  free(file);
  if (drv->describe)
    drv->describe(emit, user);
  return 0; /* dl stays loaded (RTLD_NODELETE): the driver's libraries hold process state */
}

CGRT_API uint64_t cgrt_tool_now_ns(void) {
  return cgrt__now_ns();
}
