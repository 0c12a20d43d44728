/*
 * cmd_info.c - `cgrt info`: versions, the drivers found, devices and the cores near each GPU,
 * the backends found.
 *
 * Light on a machine without a GPU: the cuda driver (which loads the CUDA runtime and NCCL) is
 * asked about versions and devices only when the machine shows an NVIDIA GPU driver (its device
 * files), or with --probe; otherwise the drivers are listed from their directories, unloaded.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgrt/backend.h"
#include "tool.h"

static void print_caps(uint64_t caps) {
  static const struct {
    uint64_t bit;
    const char *name;
  } names[] = {{CGRT_CAP_TRAINING, "training"},   {CGRT_CAP_INFERENCE, "inference"},
               {CGRT_CAP_BACKWARD, "backward"},   {CGRT_CAP_GRAPHS, "graphs"},
               {CGRT_CAP_MULTI_GPU, "multi-gpu"}, {CGRT_CAP_NEEDS_COMM, "needs-comm"}};
  int any = 0;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (caps & names[i].bit) {
      printf("%s%s", any ? " " : "", names[i].name);
      any = 1;
    }
  if (!any)
    printf("-");
}

static void print_versions(void) {
  printf("cgrt %s (backend ABI %d, host API minor %d)\n", CGRT_VERSION_STRING,
         CGRT_BACKEND_ABI_MAJOR, CGRT_HOST_API_MINOR);
}

/* Whether this machine shows an NVIDIA GPU driver, asked of its files only (no CUDA library). */
static int gpu_driver_present(void) {
  static const char *const files[] = {"/dev/nvidiactl", "/proc/driver/nvidia/version",
                                      "/dev/dxg"}; /* the last: WSL */
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
    if (access(files[i], F_OK) == 0)
      return 1;
  return 0;
}

/* The names of dir's files that start with prefix and end in ".so", sorted; *n of them. */
static char **objects_in(const char *dir, const char *prefix, size_t *n) {
  DIR *d = opendir(dir);
  char **names = NULL;
  size_t plen = strlen(prefix);
  *n = 0;
  if (!d)
    return NULL;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, prefix, plen) != 0 || len < plen + 4 ||
        strcmp(e->d_name + len - 3, ".so") != 0)
      continue;
    char **v = realloc(names, (*n + 1) * sizeof(*v));
    if (!v)
      break;
    names = v;
    names[*n] = strdup(e->d_name);
    if (names[*n])
      (*n)++;
  }
  closedir(d);
  for (size_t i = 0; i < *n; i++)
    for (size_t j = i + 1; j < *n; j++)
      if (strcmp(names[j], names[i]) < 0) {
        char *t = names[i];
        names[i] = names[j];
        names[j] = t;
      }
  return names;
}

/* The driver objects of each directory of the driver search path, named, not loaded. */
static void print_drivers(void) {
  char **dirs = NULL;
  size_t n = 0;
  printf("drivers ([runtime] driver): host built in; others searched in CGRT_DRIVER_PATH, "
         "then:\n");
  if (cgrt_tool_driver_search_dirs(&dirs, &n) != 0)
    return;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    char **names = objects_in(dirs[i], "libcgrt-driver-", &k);
    if (!names && access(dirs[i], F_OK) != 0) {
      printf("  %s: (not present)\n", dirs[i]);
      continue;
    }
    printf("  %s:%s\n", dirs[i], k ? "" : " (no drivers)");
    for (size_t j = 0; j < k; j++) {
      const char *name = names[j] + strlen("libcgrt-driver-");
      printf("    %.*s\n", (int)(strlen(name) - 3), name);
    }
    cgrt_tool_free_strings(names, k);
  }
  cgrt_tool_free_strings(dirs, n);
}

struct text {
  char *s;
  size_t len;
};

/* Collects the driver's lines, printed after the line that names the driver. */
static void add_line(void *user, const char *line) {
  struct text *t = user;
  size_t n = strlen(line);
  char *s = realloc(t->s, t->len + n + 2);
  if (!s)
    return;
  memcpy(s + t->len, line, n);
  s[t->len + n] = '\n';
  s[t->len + n + 1] = '\0';
  t->s = s;
  t->len += n + 1;
}

/* What the cuda driver sees (versions, devices, cores near each), if it is to be asked. */
static void print_devices(int probe) {
  if (!probe && !gpu_driver_present()) {
    printf("devices: none (no CUDA device: no NVIDIA GPU driver on this machine: /dev/nvidiactl, "
           "/proc/driver/nvidia and /dev/dxg are absent; the cuda driver was not loaded, "
           "`cgrt info --probe` loads it)\n");
    return;
  }
  char path[4096], err[2048];
  struct text t = {0};
  int rc = cgrt_tool_driver_describe("cuda", add_line, &t, path, sizeof(path), err, sizeof(err));
  if (rc == 0)
    printf("cuda driver: %s\n%s", path, t.s ? t.s : "");
  else
    printf("devices: none (%s)\n", err);
  free(t.s);
}

/* Loads each libcgrt-backend-*.so of dir, prints its table, unloads it. */
static void print_backends_in(const char *dir) {
  if (access(dir, F_OK) != 0) {
    printf("  %s: (not present)\n", dir);
    return;
  }
  int found = 0;
  size_t n = 0;
  char **names = objects_in(dir, "libcgrt-backend-", &n);
  printf("  %s:\n", dir);
  for (size_t i = 0; i < n; i++) {
    char path[4096], err[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const struct cgrt_backend_v1 *vt = NULL;
    found = 1;
    if (!dl) {
      const char *why = dlerror();
      printf("    %-22s unusable: %s\n", names[i], why ? why : "dlopen failed");
      continue;
    }
    if (cgrt_tool_backend_check(dl, path, &vt, err, sizeof(err)) != 0) {
      printf("    %-22s unusable: %s\n", names[i], err);
    } else {
      printf("    %-22s ABI %u (table %u bytes), caps: ", vt->name, vt->abi_major, vt->struct_size);
      print_caps(vt->caps);
      printf("\n");
    }
    dlclose(dl);
  }
  if (!found)
    printf("    (no backends)\n");
  cgrt_tool_free_strings(names, n);
}

int cmd_info(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: cgrt info [--probe]\n");
    return 0;
  }
  int probe = argc == 2 && strcmp(argv[1], "--probe") == 0;
  if (argc > 2 || (argc == 2 && !probe)) {
    fprintf(stderr, "usage: cgrt info [--probe]\n");
    return EXIT_UNUSABLE;
  }
  print_versions();
  print_drivers();
  print_devices(probe);
  char **dirs = NULL;
  size_t n = 0;
  if (cgrt_tool_backend_search_dirs(&dirs, &n) != 0) {
    fprintf(stderr, "cgrt info: out of memory\n");
    return EXIT_UNUSABLE;
  }
  printf("backends (search path: [cuda_graph] backend_path, CGRT_BACKEND_PATH, then):\n");
  for (size_t i = 0; i < n; i++)
    print_backends_in(dirs[i]);
  cgrt_tool_free_strings(dirs, n);
  return 0;
}
