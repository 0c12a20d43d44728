/*
 * bench_load.c - finding and loading libcgrt-bench.so, the GPU half of the `cgrt` command
 * (bench_plugin.h), when a command needs it.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_plugin.h"
#include "tool.h"

/* Where the object is: $CGRT_BENCH_LIBRARY, else LIBDIR/cgrt/tools/ beside libcgrt. */
static int plugin_path(char *buf, size_t len) {
  const char *env = getenv(CGRT_BENCH_PLUGIN_ENV);
  if (env && env[0]) {
    snprintf(buf, len, "%s", env);
    return 0;
  }
  char lib[PATH_MAX];
  if (cgrt_tool_library_path(lib, sizeof(lib)) != 0)
    return -1;
  char *slash = strrchr(lib, '/');
  if (!slash)
    return -1;
  *slash = '\0';
  snprintf(buf, len, "%s/cgrt/%s", lib, CGRT_BENCH_PLUGIN_FILE);
  return 0;
}

int bench_plugin_load(const char *cmd, const struct cgrt_bench_plugin **p) {
  static const struct cgrt_bench_plugin *loaded;
  char path[PATH_MAX + 64];
  *p = loaded;
  if (loaded)
    return EXIT_VALID;
  if (plugin_path(path, sizeof(path)) != 0) {
    fprintf(stderr,
            "%s: no CUDA device: cannot tell where libcgrt is, to find the GPU workloads "
            "(libcgrt-bench.so); set %s to its path\n",
            cmd, CGRT_BENCH_PLUGIN_ENV);
    return EXIT_UNUSABLE;
  }
  dlerror();
  /* Kept loaded: the CUDA runtime it links keeps state until the process exits. */
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!dl) {
    const char *why = dlerror();
    fprintf(stderr,
            "%s: no CUDA device: the GPU workloads could not be loaded: %s (they are built with "
            "the CUDA Toolkit into LIBDIR/cgrt/%s, beside libcgrt, and need the CUDA runtime, "
            "cuBLAS and NCCL; %s names another file)\n",
            cmd, why ? why : path, CGRT_BENCH_PLUGIN_FILE, CGRT_BENCH_PLUGIN_ENV);
    return EXIT_UNUSABLE;
  }
  const struct cgrt_bench_plugin *t = dlsym(dl, CGRT_BENCH_PLUGIN_SYMBOL);
  if (!t || t->version != CGRT_BENCH_PLUGIN_VERSION ||
      t->struct_size < sizeof(struct cgrt_bench_plugin) || !t->bench || !t->plan) {
    fprintf(stderr,
            "%s: %s is not the GPU workloads of this cgrt %s (%s); use the one built with this "
            "cgrt\n",
            cmd, path, CGRT_VERSION_STRING,
            !t                                        ? "no " CGRT_BENCH_PLUGIN_SYMBOL " table"
            : t->version != CGRT_BENCH_PLUGIN_VERSION ? "another table version"
                                                      : "a short or incomplete table");
    return EXIT_UNUSABLE;
  }
  *p = loaded = t;
  return EXIT_VALID;
}
