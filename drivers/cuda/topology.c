/*
 * topology.c - CPU cores near a GPU, through hwloc (the cuda driver's cores_near). A launching
 * thread on the GPU's own socket keeps launch latency and host-to-device copies off the
 * inter-socket link. Here and not in the core: hwloc's CUDA helper (hwloc/cudart.h) asks the CUDA
 * runtime where the GPU sits.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <hwloc.h>
#include <hwloc/cudart.h>

#include "cuda_driver.h"

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return code;
}

/* Finds the cores near `device`; bind: also binds the calling thread there. */
int cgrt__cuda_cores_near(int device, int bind, char *cores, size_t len, char *err, size_t errlen) {
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
