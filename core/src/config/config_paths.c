/*
 * config_paths.c - the paths a configuration file names resolve from that file's folder, as
 * git, ssh and nginx resolve theirs: [cuda_graph] impl when it is a path (it holds a '/' or ends
 * in ".so", the loader's rule), each directory of backend_path, and a path a backend hands to
 * host->backend_open (a decorator's inner backend, read from its own section). A configuration
 * given as a string, or the embedded default, has no folder: its relative paths resolve from the
 * working directory. Absolute paths, and names (searched on the backend path), are left as they
 * are. The configuration keeps the spelling written (`cgrt check` prints it, cgrt_config_get
 * returns it); the resolved one is made where a backend is loaded, and messages name both.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int cgrt__config_set_dir(struct cgrt_config *cfg, const char *file) {
  const char *slash = strrchr(file, '/');
  char *dir = slash ? strndup(file, slash == file ? 1 : (size_t)(slash - file)) : strdup(".");
  if (!dir)
    return CGRT_E_NOMEM;
  /* Absolute, so that messages say where and a later chdir of the host changes nothing; the
     folder as given (from the working directory) if it cannot be resolved. */
  char real[PATH_MAX];
  if (realpath(dir, real)) {
    char *r = strdup(real);
    if (!r) {
      free(dir);
      return CGRT_E_NOMEM;
    }
    free(dir);
    dir = r;
  }
  free(cfg->dir);
  cfg->dir = dir;
  return 0;
}

/* dir joined with rel (len bytes), leading "./" dropped; malloc'ed, or NULL. */
static char *join(const char *dir, const char *rel, size_t len) {
  while (len >= 2 && rel[0] == '.' && rel[1] == '/') {
    rel += 2;
    len -= 2;
    while (len && *rel == '/') {
      rel++;
      len--;
    }
  }
  if (len == 1 && rel[0] == '.')
    len = 0;
  size_t dn = strlen(dir);
  int sep = len > 0 && dn > 0 && dir[dn - 1] != '/';
  char *out = malloc(dn + (size_t)sep + len + 1);
  if (!out)
    return NULL;
  memcpy(out, dir, dn);
  if (sep)
    out[dn] = '/';
  memcpy(out + dn + (size_t)sep, rel, len);
  out[dn + (size_t)sep + len] = '\0';
  return out;
}

int cgrt__config_resolve_impl(const struct cgrt_config *cfg, const char *impl, char **out) {
  *out = NULL;
  if (!cfg || !cfg->dir || !impl || impl[0] == '/')
    return 0;
  size_t n = strlen(impl);
  if (!strchr(impl, '/') && !(n > 3 && strcmp(impl + n - 3, ".so") == 0))
    return 0; /* a name: searched on the backend path */
  return (*out = join(cfg->dir, impl, n)) ? 0 : CGRT_E_NOMEM;
}

int cgrt__config_resolve_dirs(const struct cgrt_config *cfg, const char *list, char **out) {
  *out = NULL;
  if (!cfg || !cfg->dir || !list)
    return 0;
  int relative = 0;
  size_t need = 1;
  for (const char *p = list; p;) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    relative |= len > 0 && p[0] != '/';
    need += len + strlen(cfg->dir) + 2;
    p = colon ? colon + 1 : NULL;
  }
  if (!relative)
    return 0;
  char *s = malloc(need);
  if (!s)
    return CGRT_E_NOMEM;
  size_t used = 0;
  for (const char *p = list; p;) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    char *dir = len > 0 && p[0] != '/' ? join(cfg->dir, p, len) : strndup(p, len);
    if (!dir) {
      free(s);
      return CGRT_E_NOMEM;
    }
    used += (size_t)snprintf(s + used, need - used, "%s%s", dir, colon ? ":" : "");
    free(dir);
    p = colon ? colon + 1 : NULL;
  }
  *out = s;
  return 0;
}

void cgrt__config_paths_note(const struct cgrt_config *cfg, const char *what, const char *written,
                             const char *resolved, char *buf, size_t len) {
  if (!resolved || len == 0)
    return;
  size_t used = strlen(buf);
  if (used >= len)
    return;
  snprintf(buf + used, len - used, "; %s = '%s' in %s is read from that file's folder: '%s'", what,
           written, cfg->source ? cfg->source : "the configuration", resolved);
}
