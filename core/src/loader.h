/*
 * loader.h - finding, loading and checking backend shared objects (DESIGN.md section 4). Internal.
 *
 * `impl = NAME` resolves to libcgrt-backend-NAME.so on the search path: [cuda_graph] backend_path,
 * then CGRT_BACKEND_PATH (both colon-separated lists), then the directory beside the library
 * (LIBDIR/cgrt/backends, found from where libcgrt itself was loaded), then the install directory.
 * A value containing '/' or ending in ".so" is a path. "Not found" (CGRT_E_NOTFOUND, listing the
 * directories searched) is told apart from "found but unusable" (CGRT_E_BACKEND: not a loadable
 * object, no cgrt_backend_v1 symbol, wrong major, struct too small, mandatory function missing).
 */
#ifndef CGRT_LOADER_H
#define CGRT_LOADER_H

#include <stddef.h>

#include "cgrt/backend.h"

struct cgrt_backend_lib {
  void *dl;                         /* dlopen handle */
  const struct cgrt_backend_v1 *vt; /* the checked table */
  char *path;                       /* where it was loaded from */
};

/* The backend's file name for a bare name: "libcgrt-backend-NAME.so" into buf. */
void cgrt__backend_file_name(const char *name, char *buf, size_t len);

/*
 * The directories searched for a bare name, in order, without duplicates (malloc'ed array of
 * malloc'ed strings; free with cgrt__free_strings). backend_path may be NULL.
 */
int cgrt__backend_search_dirs(const char *backend_path, char ***dirs, size_t *count);
void cgrt__free_strings(char **v, size_t n);

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
