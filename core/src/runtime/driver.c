/*
 * driver.c - the driver registry: the built-in host driver, and driver objects found like backends
 * (loader.h), checked, and kept loaded for the life of the process.
 *
 * Kept loaded (RTLD_NODELETE, and never dlclose'd by the core): the cuda driver links the CUDA
 * runtime, whose state lives until the process exits, and registers CUPTI callbacks into its own
 * code; unloading it under a live context or subscription would leave both pointing at nothing.
 * Each object is loaded once per path (a list guarded by a mutex): many runtimes share it.
 */
#include "driver.h"

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "base/loader.h"

/* The highest major a future core might speak; used only to explain a refusal. */
#define DRIVER_MAJOR_PROBE_MAX 9
/* Distinct driver objects one process loads (one per [runtime] driver value in practice). */
#define MAX_LOADED 8

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct loaded {
  char *path;
  const struct cgrt_driver *drv;
} loaded[MAX_LOADED];
static size_t num_loaded;

/* Puts "no CUDA device: " (the driver's name in capitals) before the sentence in err. */
static int no_device(const char *name, char *err, size_t errlen) {
  char upper[32], *msg = strdup(err);
  size_t i = 0;
  for (; name[i] && i + 1 < sizeof(upper); i++)
    upper[i] = (char)toupper((unsigned char)name[i]);
  upper[i] = '\0';
  if (msg)
    snprintf(err, errlen, "no %s device: %s", upper, msg);
  free(msg);
  return CGRT_E_NODEV;
}

/* The operations every driver has, in table order. */
#define OP(f)                                                                                      \
  { offsetof(struct cgrt_driver, f), #f }
static const struct {
  size_t at;
  const char *name;
} mandatory[] = {OP(open),
                 OP(close),
                 OP(stream_create),
                 OP(stream_destroy),
                 OP(stream_sync),
                 OP(capture_begin),
                 OP(capture_end),
                 OP(capture_status),
                 OP(graph_instantiate),
                 OP(graph_destroy),
                 OP(graph_node_count),
                 OP(exec_update),
                 OP(exec_upload),
                 OP(exec_launch),
                 OP(exec_destroy),
                 OP(host_fn),
                 OP(memcpy_async),
                 OP(event_create),
                 OP(event_record),
                 OP(event_query),
                 OP(event_sync),
                 OP(event_destroy),
                 OP(stream_wait),
                 OP(mem_alloc),
                 OP(mem_free),
                 OP(mem_info),
                 OP(graph_mem),
                 OP(mem_alloc_async),
                 OP(mem_free_async),
                 OP(graph_alloc_bytes),
                 OP(graph_mem_trim),
                 OP(host_alloc),
                 OP(host_free),
                 OP(event_create_timed),
                 OP(event_elapsed),
                 OP(device_sync)};
#undef OP

int cgrt__driver_check(const struct cgrt_driver *d, const char *name, const char *path, char *err,
                       size_t errlen) {
  if (d->abi_major != CGRT_DRIVER_ABI_MAJOR)
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "driver %s: cgrt_driver_v1.abi_major is %u but this cgrt %s speaks driver ABI "
        "major %d; use the driver built with this cgrt (they are built and installed "
        "together)",
        path, d->abi_major, CGRT_VERSION_STRING, CGRT_DRIVER_ABI_MAJOR);
  if (d->struct_size < sizeof(struct cgrt_driver))
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "driver %s: cgrt_driver_v1.struct_size is %u, smaller than the %zu bytes of this "
        "cgrt's driver table: it was built from an older cgrt; use the driver built with "
        "this cgrt (they are built and installed together)",
        path, d->struct_size, sizeof(struct cgrt_driver));
  if (!d->name || strcmp(d->name, name) != 0)
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "driver %s: its table names driver '%s', not '%s'; the file is misnamed or "
        "corrupt, reinstall it",
        path, d->name ? d->name : "(null)", name);
  for (size_t i = 0; i < sizeof(mandatory) / sizeof(mandatory[0]); i++) {
    void (*op)(void) = NULL;
    memcpy(&op, (const char *)d + mandatory[i].at, sizeof(op));
    if (!op)
      return cgrt__object_fail(
          err, errlen, CGRT_E_BACKEND,
          "driver %s ('%s'): the mandatory operation '%s' is NULL in cgrt_driver_v1; the "
          "object is broken, rebuild it with this cgrt",
          path, name, mandatory[i].name);
  }
  return 0;
}

/* Finds the table of a dlopen()ed object and checks it. */
static int table_of(void *dl, const char *name, const char *path, const struct cgrt_driver **drv,
                    char *err, size_t errlen) {
  dlerror();
  const struct cgrt_driver *d = dlsym(dl, CGRT_DRIVER_SYMBOL);
  if (!d) {
    char sym[32];
    int major =
        cgrt__object_other_major(dl, "cgrt_driver_v", DRIVER_MAJOR_PROBE_MAX, sym, sizeof(sym));
    if (major)
      return cgrt__object_fail(
          err, errlen, CGRT_E_BACKEND,
          "driver %s speaks driver ABI major %d (it exports %s) but this cgrt %s speaks "
          "major %d (%s); use the driver built with this cgrt (they are built and "
          "installed together)",
          path, major, sym, CGRT_VERSION_STRING, CGRT_DRIVER_ABI_MAJOR, CGRT_DRIVER_SYMBOL);
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "%s is not a cgrt driver: it does not export the symbol %s; reinstall the driver "
        "built with this cgrt",
        path, CGRT_DRIVER_SYMBOL);
  }
  int rc = cgrt__driver_check(d, name, path, err, errlen);
  if (rc == 0)
    *drv = d;
  return rc;
}

/* Trust, dlopen, table: the object at path, found for driver `name`. */
static int load_at(const char *name, const char *path, void **dl, const struct cgrt_driver **drv,
                   char *err, size_t errlen) {
  *dl = NULL;
  *drv = NULL;
  int rc = cgrt__object_trusted(&cgrt__kind_driver, path, err, errlen);
  if (rc != 0)
    return rc;
  rc = cgrt__object_dlopen(&cgrt__kind_driver, name, path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE,
                           dl, err, errlen);
  if (rc != 0)
    return no_device(name, err, errlen); /* its libraries are missing: no such device here */
  rc = table_of(*dl, name, path, drv, err, errlen);
  if (rc != 0) {
    dlclose(*dl);
    *dl = NULL;
  }
  return rc;
}

int cgrt__driver_object_open(const char *name, const char *path_list, void **dl, char **path,
                             const struct cgrt_driver **drv, char *err, size_t errlen) {
  char file[PATH_MAX + NAME_MAX + 2];
  *path = NULL;
  int rc =
      cgrt__object_resolve(&cgrt__kind_driver, name, path_list, file, sizeof(file), err, errlen);
  if (rc == CGRT_E_NOTFOUND)
    return no_device(name, err, errlen);
  if (rc == 0)
    rc = load_at(name, file, dl, drv, err, errlen);
  if (rc == 0 && !(*path = strdup(file))) {
    dlclose(*dl);
    rc = cgrt__object_fail(err, errlen, CGRT_E_NOMEM, "out of memory loading driver '%s'", name);
  }
  return rc;
}

int cgrt__driver_get(cgrt_driver_kind kind, const struct cgrt_driver **drv, char *err,
                     size_t errlen) {
  *drv = NULL;
  if (kind == CGRT_DRIVER_HOST) {
    *drv = &cgrt__driver_host;
    return 0;
  }
  const char *name = cgrt__driver_name(kind);
  char file[PATH_MAX + NAME_MAX + 2];
  int rc = cgrt__object_resolve(&cgrt__kind_driver, name, NULL, file, sizeof(file), err, errlen);
  if (rc == CGRT_E_NOTFOUND)
    return no_device(name, err, errlen);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < num_loaded && !*drv; i++)
    if (strcmp(loaded[i].path, file) == 0)
      *drv = loaded[i].drv;
  if (!*drv) {
    void *dl = NULL;
    rc = num_loaded < MAX_LOADED
             ? load_at(name, file, &dl, drv, err, errlen)
             : cgrt__object_fail(
                   err, errlen, CGRT_E_UNSUPPORTED,
                   "driver '%s': this process already loaded %d driver objects from as many "
                   "places; load drivers from one directory",
                   name, MAX_LOADED);
    if (rc == 0 && !(loaded[num_loaded].path = strdup(file))) {
      *drv = NULL; /* stays loaded (RTLD_NODELETE); the next open loads it again */
      rc = cgrt__object_fail(err, errlen, CGRT_E_NOMEM, "out of memory loading driver '%s'", name);
    }
    if (rc == 0)
      loaded[num_loaded++].drv = *drv;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}
