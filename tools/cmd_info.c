/* cmd_info.c - `cgrt info`: versions, devices, the cores near each GPU, the backends found. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrt/backend.h"
#include "tool.h"

#ifdef CGRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef CGRT_HAVE_NCCL
#include <nccl.h>
#endif

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
#ifdef CGRT_HAVE_CUDA
  int rtv = 0, drv = 0;
  cudaRuntimeGetVersion(&rtv);
  cudaError_t e = cudaDriverGetVersion(&drv);
  printf("CUDA runtime %d.%d", rtv / 1000, (rtv % 1000) / 10);
  if (e == cudaSuccess && drv > 0)
    printf(", driver supports CUDA %d.%d\n", drv / 1000, (drv % 1000) / 10);
  else
    printf(", no CUDA driver found\n");
#else
  printf("CUDA: not built in (cgrt was built without the CUDA Toolkit)\n");
#endif
#ifdef CGRT_HAVE_NCCL
  int nv = 0;
  if (ncclGetVersion(&nv) == ncclSuccess)
    printf("NCCL %d.%d.%d\n", nv / 10000, (nv % 10000) / 100, nv % 100);
  else
    printf("NCCL: ncclGetVersion failed\n");
#else
  printf("NCCL: not built in\n");
#endif
}

static void print_devices(void) {
#ifdef CGRT_HAVE_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("devices: none (no CUDA device: %s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    cudaGetLastError();
    return;
  }
  printf("devices: %d\n", n);
  for (int d = 0; d < n; d++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      printf("  GPU %d: cudaGetDeviceProperties failed\n", d);
      continue;
    }
    char cores[512], err[256];
    if (cgrt_tool_cores_near_gpu(d, cores, sizeof(cores), err, sizeof(err)) != 0)
      snprintf(cores, sizeof(cores), "unknown (%.200s)", err);
    printf("  GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB, PCI %04x:%02x:%02x.0\n", d, p.name, p.major,
           p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30), p.pciDomainID,
           p.pciBusID, p.pciDeviceID);
    printf("         cores near it (hwloc): %s\n", cores);
  }
#else
  printf("devices: none (no CUDA device: cgrt was built without CUDA support)\n");
#endif
}

/* Loads each libcgrt-backend-*.so of dir, prints its table, unloads it. */
static void print_backends_in(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    printf("  %s: (not present)\n", dir);
    return;
  }
  int found = 0;
  struct dirent *e;
  char **names = NULL;
  size_t n = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, "libcgrt-backend-", 16) != 0 || len < 20 ||
        strcmp(e->d_name + len - 3, ".so") != 0)
      continue;
    char **v = realloc(names, (n + 1) * sizeof(*v));
    if (!v)
      break;
    names = v;
    names[n] = strdup(e->d_name);
    if (names[n])
      n++;
  }
  closedir(d);
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (strcmp(names[j], names[i]) < 0) {
        char *t = names[i];
        names[i] = names[j];
        names[j] = t;
      }
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
  (void)argv;
  if (argc > 1) {
    fprintf(stderr, "usage: cgrt info\n");
    return EXIT_UNUSABLE;
  }
  print_versions();
  print_devices();
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
