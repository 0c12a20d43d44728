/* loader.c - resolve and dlopen the objects the core loads (backends, drivers); check backends. */
#include "loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

#ifndef CGRT_INSTALL_BACKEND_DIR
#define CGRT_INSTALL_BACKEND_DIR "/usr/local/lib/cgrt/backends"
#endif
#ifndef CGRT_INSTALL_DRIVER_DIR
#define CGRT_INSTALL_DRIVER_DIR "/usr/local/lib/cgrt/drivers"
#endif

const struct cgrt_object_kind cgrt__kind_backend = {
    .what = "backend",
    .prefix = "libcgrt-backend-",
    .subdir = "backends",
    .env = "CGRT_BACKEND_PATH",
    .install_dir = CGRT_INSTALL_BACKEND_DIR,
    .where_to = "set [cuda_graph] backend_path or CGRT_BACKEND_PATH to the directory that holds "
                "it, or give its path as impl",
    .not_loaded = "is not a loadable object",
    .load_advice = "rebuild it as a shared object for this machine",
};

const struct cgrt_object_kind cgrt__kind_driver = {
    .what = "driver",
    .prefix = "libcgrt-driver-",
    .subdir = "drivers",
    .env = "CGRT_DRIVER_PATH",
    .install_dir = CGRT_INSTALL_DRIVER_DIR,
    .where_to = "it is built with the CUDA Toolkit and installed beside the backends; set "
                "CGRT_DRIVER_PATH to the directory that holds it, or set [runtime] driver = host "
                "to run without a GPU",
    .not_loaded = "could not be loaded",
    .load_advice = "the libraries it links (the CUDA runtime, NCCL, hwloc) must be installed where "
                   "the dynamic loader finds them; or set [runtime] driver = host to run without "
                   "a GPU",
};

/* The highest major a future core might speak; used only to explain a refusal. */
#define CGRT_ABI_MAJOR_PROBE_MAX 9

int cgrt__object_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return code;
}

static void object_file_name(const struct cgrt_object_kind *kind, const char *name, char *buf,
                             size_t len) {
  snprintf(buf, len, "%s%s.so", kind->prefix, name);
}

void cgrt__backend_file_name(const char *name, char *buf, size_t len) {
  object_file_name(&cgrt__kind_backend, name, buf, len);
}

void cgrt__free_strings(char **v, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

struct dir_list {
  char **v;
  size_t n;
  size_t cap;
  int oom;
};

static void dirs_add(struct dir_list *l, const char *dir, size_t len) {
  if (len == 0)
    return;
  for (size_t i = 0; i < l->n; i++)
    if (strlen(l->v[i]) == len && memcmp(l->v[i], dir, len) == 0)
      return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 8;
    char **v = realloc(l->v, cap * sizeof(*v));
    if (!v) {
      l->oom = 1;
      return;
    }
    l->v = v;
    l->cap = cap;
  }
  char *s = strndup(dir, len);
  if (!s) {
    l->oom = 1;
    return;
  }
  l->v[l->n++] = s;
}

/* Adds each entry of a colon-separated list. */
static void dirs_add_list(struct dir_list *l, const char *list) {
  while (list && *list) {
    const char *colon = strchr(list, ':');
    size_t len = colon ? (size_t)(colon - list) : strlen(list);
    dirs_add(l, list, len);
    list = colon ? colon + 1 : NULL;
  }
}

/* The directory holding the object this code was linked into (libcgrt.so or an executable). */
static int own_dir(char *buf, size_t len) {
  Dl_info info;
  char path[PATH_MAX];
  const char *from = NULL;
  if (dladdr((void *)&own_dir, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
    from = info.dli_fname;
  else
    from = "/proc/self/exe";
  if (!realpath(from, path))
    return -1;
  char *slash = strrchr(path, '/');
  if (!slash)
    return -1;
  *slash = '\0';
  snprintf(buf, len, "%s", path);
  return 0;
}

int cgrt__object_search_dirs(const struct cgrt_object_kind *kind, const char *path_list,
                             char ***dirs, size_t *count) {
  struct dir_list l = {0};
  char here[PATH_MAX], buf[PATH_MAX + 64];
  dirs_add_list(&l, path_list);
  dirs_add_list(&l, cgrt__getenv(kind->env));
  if (own_dir(here, sizeof(here)) == 0) {
    /* LIBDIR/libcgrt.so -> LIBDIR/cgrt/SUBDIR; BINDIR/exe -> BINDIR/../lib/cgrt/SUBDIR. */
    snprintf(buf, sizeof(buf), "%s/cgrt/%s", here, kind->subdir);
    dirs_add(&l, buf, strlen(buf));
    char *slash = strrchr(here, '/');
    if (slash && slash != here) {
      *slash = '\0';
      snprintf(buf, sizeof(buf), "%s/lib/cgrt/%s", here, kind->subdir);
      dirs_add(&l, buf, strlen(buf));
    }
  }
  dirs_add(&l, kind->install_dir, strlen(kind->install_dir));
  if (l.oom) {
    cgrt__free_strings(l.v, l.n);
    return CGRT_E_NOMEM;
  }
  *dirs = l.v;
  *count = l.n;
  return 0;
}

int cgrt__backend_search_dirs(const char *backend_path, char ***dirs, size_t *count) {
  return cgrt__object_search_dirs(&cgrt__kind_backend, backend_path, dirs, count);
}

static int is_path(const char *impl) {
  size_t n = strlen(impl);
  return strchr(impl, '/') != NULL || (n > 3 && strcmp(impl + n - 3, ".so") == 0);
}

int cgrt__object_resolve(const struct cgrt_object_kind *kind, const char *name,
                         const char *path_list, char *out, size_t outlen, char *err,
                         size_t errlen) {
  struct stat st;
  if (is_path(name)) {
    snprintf(out, outlen, "%s%s", strchr(name, '/') ? "" : "./", name);
    if (stat(out, &st) != 0)
      return cgrt__object_fail(
          err, errlen, CGRT_E_NOTFOUND,
          "%s '%s' not found: %s does not exist (%s); fix [cuda_graph] impl, or "
          "give a backend name to search the backend path",
          kind->what, name, out, strerror(errno));
    return 0;
  }
  char file[NAME_MAX + 1];
  object_file_name(kind, name, file, sizeof(file));
  char **dirs = NULL;
  size_t n = 0;
  if (cgrt__object_search_dirs(kind, path_list, &dirs, &n) != 0)
    return cgrt__object_fail(err, errlen, CGRT_E_NOMEM, "out of memory while searching for %s '%s'",
                             kind->what, name);
  for (size_t i = 0; i < n; i++) {
    snprintf(out, outlen, "%s/%s", dirs[i], file);
    if (stat(out, &st) == 0) {
      cgrt__free_strings(dirs, n);
      return 0;
    }
  }
  size_t used =
      (size_t)snprintf(err, errlen, "%s '%s' not found: no %s in", kind->what, name, file);
  for (size_t i = 0; i < n && used < errlen; i++)
    used += (size_t)snprintf(err + used, errlen - used, "%s %s", i ? "," : "", dirs[i]);
  if (used < errlen)
    snprintf(err + used, errlen - used, "; %s", kind->where_to);
  cgrt__free_strings(dirs, n);
  return CGRT_E_NOTFOUND;
}

int cgrt__object_other_major(void *dl, const char *prefix, int max, char *sym, size_t len) {
  for (int major = max; major >= 2; major--) {
    snprintf(sym, len, "%s%d", prefix, major);
    if (dlsym(dl, sym))
      return major;
  }
  return 0;
}

int cgrt__backend_check(void *dl, const char *path, const struct cgrt_backend_v1 **vt, char *err,
                        size_t errlen) {
  dlerror();
  const struct cgrt_backend_v1 *b = dlsym(dl, "cgrt_backend_v1");
  if (!b) {
    /* Name the versions each side speaks when the object is a backend of another major. */
    char sym[32];
    int major =
        cgrt__object_other_major(dl, "cgrt_backend_v", CGRT_ABI_MAJOR_PROBE_MAX, sym, sizeof(sym));
    if (major)
      return cgrt__object_fail(
          err, errlen, CGRT_E_BACKEND,
          "backend %s speaks backend ABI major %d (it exports %s) but this cgrt "
          "%s speaks major %d (cgrt_backend_v%d); use a backend built for ABI %d "
          "or a newer cgrt",
          path, major, sym, CGRT_VERSION_STRING, CGRT_BACKEND_ABI_MAJOR, CGRT_BACKEND_ABI_MAJOR,
          CGRT_BACKEND_ABI_MAJOR);
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "%s is not a cgrt backend: it does not export the symbol cgrt_backend_v1 "
        "(build it against cgrt/backend.h and export the table with "
        "CGRT_BACKEND_EXPORT)",
        path);
  }
  if (b->abi_major != CGRT_BACKEND_ABI_MAJOR)
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "backend %s: cgrt_backend_v1.abi_major is %u but this cgrt speaks backend ABI "
        "major %d; rebuild the backend against this cgrt's backend.h",
        path, b->abi_major, CGRT_BACKEND_ABI_MAJOR);
  if (b->struct_size < CGRT_BACKEND_V1_MIN_SIZE)
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "backend %s: cgrt_backend_v1.struct_size is %u, smaller than the %zu bytes "
        "of the fixed fields and mandatory functions every v1 backend has; the table "
        "is truncated or corrupt, rebuild the backend",
        path, b->struct_size, (size_t)CGRT_BACKEND_V1_MIN_SIZE);
  if (!b->name || !b->name[0])
    return cgrt__object_fail(err, errlen, CGRT_E_BACKEND,
                             "backend %s: cgrt_backend_v1.name is empty; give it a name", path);
  const char *missing = !b->init   ? "init"
                        : !b->fini ? "fini"
                        : !b->step ? "step"
                        : !b->call ? "call"
                                   : NULL;
  if (missing)
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "backend %s ('%s'): the mandatory function '%s' is NULL in cgrt_backend_v1; "
        "every backend must provide init, fini, step and call",
        path, b->name, missing);
  *vt = b;
  return 0;
}

/*
 * A backend or a driver is code that runs with the host's rights: refuse one that someone else
 * could have written. The file and its directory must not be writable by others (a directory with
 * the sticky bit, like /tmp, protects files it does not own from others) and must belong to the
 * effective user or to root.
 */
static int check_trust(const struct cgrt_object_kind *kind, const char *path, int is_dir,
                       const char *what, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0)
    return 0;                          /* resolve() or dlopen() reports what is missing */
  if (!is_dir && !S_ISREG(st.st_mode)) /* dlopen of a FIFO would wait for a writer for ever */
    return cgrt__object_fail(err, errlen, CGRT_E_BACKEND,
                             "refusing to load %s %s: it is not a regular file (a directory, a "
                             "device or a pipe); name the %s's .so file",
                             kind->what, path, kind->what);
  uid_t me = geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "refusing to load %s %s: %s %s belongs to uid %u, neither this process's "
        "user (uid %u) nor root; a %s runs with the host's rights, so install it "
        "as your user or root",
        kind->what, what, is_dir ? "its directory" : "the file", path, (unsigned)st.st_uid,
        (unsigned)me, kind->what);
  int open_to_others = (st.st_mode & S_IWOTH) && !(is_dir && (st.st_mode & S_ISVTX));
  if (open_to_others)
    return cgrt__object_fail(
        err, errlen, CGRT_E_BACKEND,
        "refusing to load %s %s: %s %s is writable by every user, so anyone could "
        "replace the code this process would run; fix it with chmod o-w %s",
        kind->what, what, is_dir ? "its directory" : "the file", path, path);
  return 0;
}

int cgrt__object_trusted(const struct cgrt_object_kind *kind, const char *path, char *err,
                         size_t errlen) {
  char dir[PATH_MAX + NAME_MAX + 2];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash)
    *(slash == dir ? slash + 1 : slash) = '\0';
  int rc = check_trust(kind, path, 0, path, err, errlen);
  if (rc == 0)
    rc = check_trust(kind, slash ? dir : ".", 1, path, err, errlen);
  return rc;
}

int cgrt__object_dlopen(const struct cgrt_object_kind *kind, const char *name, const char *path,
                        int flags, void **dl, char *err, size_t errlen) {
  dlerror();
  *dl = dlopen(path, flags);
  if (*dl)
    return 0;
  const char *why = dlerror();
  snprintf(err, errlen, "%s '%s' was found at %s but %s: %s (%s)", kind->what, name, path,
           kind->not_loaded, why ? why : "dlopen failed", kind->load_advice);
  return CGRT_E_BACKEND;
}

int cgrt__backend_open(struct cgrt_backend_lib *lib, const char *impl, const char *backend_path,
                       char *err, size_t errlen) {
  char path[PATH_MAX + NAME_MAX + 2];
  memset(lib, 0, sizeof(*lib));
  int rc = cgrt__object_resolve(&cgrt__kind_backend, impl, backend_path, path, sizeof(path), err,
                                errlen);
  void *dl = NULL;
  if (rc == 0)
    rc = cgrt__object_trusted(&cgrt__kind_backend, path, err, errlen);
  if (rc == 0)
    rc = cgrt__object_dlopen(&cgrt__kind_backend, impl, path, RTLD_NOW | RTLD_LOCAL, &dl, err,
                             errlen);
  if (rc != 0)
    return rc;
  const struct cgrt_backend_v1 *vt = NULL;
  rc = cgrt__backend_check(dl, path, &vt, err, errlen);
  if (rc != 0) {
    dlclose(dl);
    return rc;
  }
  lib->path = strdup(path);
  if (!lib->path) {
    dlclose(dl);
    snprintf(err, errlen, "out of memory loading backend '%s'", impl);
    return CGRT_E_NOMEM;
  }
  lib->dl = dl;
  lib->vt = vt;
  return 0;
}

void cgrt__backend_close(struct cgrt_backend_lib *lib) {
  if (lib->dl)
    dlclose(lib->dl);
  free(lib->path);
  memset(lib, 0, sizeof(*lib));
}
