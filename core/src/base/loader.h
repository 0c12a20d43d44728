/*
 * loader.h - finding, loading and checking the shared objects the core loads: backends (DESIGN.md
 * section 4) and device drivers (section 3). Internal.
 *
 * Both are found the same way, each kind in a directory of its own. `impl = NAME` resolves to
 * libcgrt-backend-NAME.so on the search path: [cuda_graph] backend_path, then CGRT_BACKEND_PATH
 * (both colon-separated lists), then the directory beside the library (LIBDIR/cgrt/backends, found
 * from where libcgrt itself was loaded), then the install directory. `driver = NAME` resolves to
 * libcgrt-driver-NAME.so on CGRT_DRIVER_PATH, then LIBDIR/cgrt/drivers beside the library, then
 * the install directory. A backend value containing '/' or ending in ".so" is a path. "Not found"
 * (CGRT_E_NOTFOUND, listing the directories searched) is told apart from "found but unusable"
 * (CGRT_E_BACKEND: refused as untrusted, not a loadable object, no table symbol, wrong major,
 * struct too small, mandatory function missing). The driver loader (driver.c) reuses these steps
 * and its own table check.
 */
#ifndef CGRT_LOADER_H
#define CGRT_LOADER_H

#include <stddef.h>

#include "cgrt/backend.h"

/* A kind of object the core loads: where it is searched and how messages name it. */
struct cgrt_object_kind {
  const char *what;        /* "backend", "driver" */
  const char *prefix;      /* the file of NAME is PREFIX NAME ".so" */
  const char *subdir;      /* searched in LIBDIR/cgrt/SUBDIR beside the library */
  const char *env;         /* a colon-separated list searched before that */
  const char *install_dir; /* searched last */
  const char *where_to;    /* advice when not found: where to point the search */
  const char *not_loaded;  /* dlopen refused it: "is not a loadable object" */
  const char *load_advice; /* ... and what to do then */
};

extern const struct cgrt_object_kind cgrt__kind_backend;
extern const struct cgrt_object_kind cgrt__kind_driver;

/*
 * The directories a bare name of `kind` is searched in, in order, without duplicates: path_list
 * (may be NULL), the kind's environment variable, beside the library, the install directory
 * (malloc'ed array of malloc'ed strings; free with cgrt__free_strings).
 */
int cgrt__object_search_dirs(const struct cgrt_object_kind *kind, const char *path_list,
                             char ***dirs, size_t *count);
void cgrt__free_strings(char **v, size_t n);

/*
 * Finds the file of `name` (or the path `name` is) into out. CGRT_E_NOTFOUND with the directories
 * searched in err.
 */
int cgrt__object_resolve(const struct cgrt_object_kind *kind, const char *name,
                         const char *path_list, char *out, size_t outlen, char *err, size_t errlen);

/*
 * Refuses an object others could have written: its file or its directory writable by every user,
 * or owned by another user than this one and root. 0, or CGRT_E_BACKEND with the reason in err.
 */
int cgrt__object_trusted(const struct cgrt_object_kind *kind, const char *path, char *err,
                         size_t errlen);

/*
 * dlopen()s the object at path with `flags`: 0 with *dl set, or CGRT_E_BACKEND with dlerror's
 * reason and the kind's advice in err. `name` is what the user asked for (messages).
 */
/* Writes the formatted sentence into err (errlen bytes) and returns code: a loader's refusal. */
int cgrt__object_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * For an object that exports none of this cgrt's tables: the highest major N in [2, max] whose
 * symbol `prefix`N it exports (e.g. "cgrt_backend_v" 2), its name written into sym; 0 if none.
 * A refusal then names the ABI each side speaks.
 */
int cgrt__object_other_major(void *dl, const char *prefix, int max, char *sym, size_t len);

int cgrt__object_dlopen(const struct cgrt_object_kind *kind, const char *name, const char *path,
                        int flags, void **dl, char *err, size_t errlen);

struct cgrt_backend_lib {
  void *dl;                         /* dlopen handle */
  const struct cgrt_backend_v1 *vt; /* the checked table */
  char *path;                       /* where it was loaded from */
};

/* The backend's file name for a bare name: "libcgrt-backend-NAME.so" into buf. */
void cgrt__backend_file_name(const char *name, char *buf, size_t len);

/* cgrt__object_search_dirs for backends. */
int cgrt__backend_search_dirs(const char *backend_path, char ***dirs, size_t *count);

/*
 * Resolves impl, dlopen()s it with RTLD_NOW | RTLD_LOCAL and checks its cgrt_backend_v1 table.
 * On failure lib is left empty and err holds the sentence. CGRT_E_NOTFOUND or CGRT_E_BACKEND.
 */
int cgrt__backend_open(struct cgrt_backend_lib *lib, const char *impl, const char *backend_path,
                       char *err, size_t errlen);

/* Checks the table of an already dlopen()ed object; `path` is used in messages. */
int cgrt__backend_check(void *dl, const char *path, const struct cgrt_backend_v1 **vt, char *err,
                        size_t errlen);

/* dlclose()s and empties lib. Safe on an empty lib. */
void cgrt__backend_close(struct cgrt_backend_lib *lib);

#endif
