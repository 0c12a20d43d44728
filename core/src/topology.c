/*
 * topology.c - CPU cores near a GPU, through hwloc. A launching thread on the GPU's own socket
 * keeps launch latency and host-to-device copies off the inter-socket link.
 */
#include "topology.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <hwloc.h>

#include "cgrt/cgrt.h"

#ifdef CGRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <hwloc/cudart.h>
#endif

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return code;
}

#ifdef CGRT_HAVE_CUDA
/* Finds the cores near `device`; bind: also binds the calling thread there. */
static int near_gpu(int device, int bind, char *cores, size_t len, char *err, size_t errlen) {
  hwloc_topology_t topo = NULL;
  hwloc_bitmap_t set = NULL;
  char *list = NULL;
  int rc = 0;
  if (hwloc_topology_init(&topo) != 0) {
    topo = NULL;
    rc = fail(err, errlen, CGRT_E_DEVICE, "hwloc_topology_init failed");
    goto out;
  }
  if (hwloc_topology_load(topo) != 0) {
    rc = fail(err, errlen, CGRT_E_DEVICE, "hwloc_topology_load failed");
    goto out;
  }
  set = hwloc_bitmap_alloc();
  if (!set) {
    rc = fail(err, errlen, CGRT_E_NOMEM, "hwloc_bitmap_alloc: out of memory");
    goto out;
  }
  if (hwloc_cudart_get_device_cpuset(topo, device, set) != 0) {
    rc = fail(err, errlen, CGRT_E_DEVICE,
              "hwloc_cudart_get_device_cpuset could not place GPU %d (no PCI locality in sysfs?)",
              device);
    goto out;
  }
  if (hwloc_bitmap_iszero(set) || hwloc_bitmap_isfull(set)) {
    /* No locality known: every core is as near as any other. */
    hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(topo));
  }
  if (hwloc_bitmap_list_asprintf(&list, set) < 0) {
    rc = fail(err, errlen, CGRT_E_NOMEM, "hwloc_bitmap_list_asprintf: out of memory");
    goto out;
  }
  snprintf(cores, len, "%s", list);
  if (bind && hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) != 0) {
    rc = fail(err, errlen, CGRT_E_DEVICE, "hwloc_set_cpubind to cores %s failed", list);
    goto out;
  }
out:
  free(list);
  if (set)
    hwloc_bitmap_free(set);
  if (topo)
    hwloc_topology_destroy(topo);
  return rc;
}
#else
static int near_gpu(int device, int bind, char *cores, size_t len, char *err, size_t errlen) {
  (void)device;
  (void)bind;
  if (len)
    cores[0] = '\0';
  return fail(err, errlen, CGRT_E_UNSUPPORTED, "cgrt was built without CUDA: no GPU to place");
}
#endif

int cgrt__cores_near_gpu(int device, char *cores, size_t len, char *err, size_t errlen) {
  return near_gpu(device, 0, cores, len, err, errlen);
}

int cgrt__bind_near_gpu(int device, char *cores, size_t len, char *err, size_t errlen) {
  return near_gpu(device, 1, cores, len, err, errlen);
}
