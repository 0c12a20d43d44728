/*
 * topology.c - CPU cores near a GPU, through hwloc (the cuda driver's cores_near). A launching
 * thread on the GPU's own socket keeps launch latency and host-to-device copies off the
 * inter-socket link. Here and not in the core: hwloc's CUDA helper (hwloc/cudart.h) asks the CUDA
 * runtime where the GPU sits.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/*
 * The calling thread's affinity when something before cgrt narrowed it (taskset, numactl, a
 * host's own pinning): its cores into *cur, 1. Bound to the whole machine (nobody chose): 0.
 */
static int narrowed(hwloc_topology_t topo, hwloc_bitmap_t cur) {
  if (hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_THREAD) != 0)
    return 0;
  hwloc_const_bitmap_t all = hwloc_topology_get_topology_cpuset(topo);
  return !hwloc_bitmap_iszero(cur) && !hwloc_bitmap_isincluded(all, cur);
}

/* GPU d's near cores into set (every core when its locality is unknown); 0, or -1 unplaced. */
static int near_set(hwloc_topology_t topo, int d, hwloc_bitmap_t set) {
  if (hwloc_cudart_get_device_cpuset(topo, d, set) != 0)
    return -1;
  if (hwloc_bitmap_iszero(set) || hwloc_bitmap_isfull(set))
    hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(topo));
  return 0;
}

/*
 * CGRT_BIND_SPLIT=1 (a candidate, issue 42): when several visible GPUs share the same near cores
 * (one socket, or locality unknown), GPU `device` gets its own contiguous share of those cores,
 * in device order, so that the launching threads of the ranks (and NCCL's threads, which inherit
 * the affinity of the thread that creates the communicator) do not take turns on one core. set
 * is narrowed in place; unchanged with fewer cores than GPUs.
 */
static void split_among_peers(hwloc_topology_t topo, int device, hwloc_bitmap_t set) {
  const char *env = getenv("CGRT_BIND_SPLIT");
  if (!env || strcmp(env, "1") != 0)
    return;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2)
    return;
  hwloc_bitmap_t other = hwloc_bitmap_alloc(), slice = hwloc_bitmap_alloc();
  int peers = 0, mine = -1;
  for (int d = 0; other && slice && d < count; d++) {
    if (near_set(topo, d, other) != 0 || !hwloc_bitmap_isequal(other, set))
      continue;
    if (d == device)
      mine = peers;
    peers++;
  }
  int cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);
  if (other && slice && mine >= 0 && peers > 1 && cores >= peers) {
    for (int i = mine * cores / peers; i < (mine + 1) * cores / peers; i++) {
      hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE, i);
      if (core)
        hwloc_bitmap_or(slice, slice, core->cpuset);
    }
    if (!hwloc_bitmap_iszero(slice))
      hwloc_bitmap_and(set, set, slice);
  }
  if (other)
    hwloc_bitmap_free(other);
  if (slice)
    hwloc_bitmap_free(slice);
}

/*
 * Finds the cores near `device`; bind: also binds the calling thread there, unless its affinity
 * was narrowed before (narrowed): an operator's taskset or a host's pinning is kept, never
 * widened, and CGRT_CORES_KEPT (or CGRT_CORES_KEPT_FAR: none of them near the GPU) returned with
 * the sentence in err.
 */
int cgrt__cuda_cores_near(int device, int bind, char *cores, size_t len, char *err, size_t errlen) {
  hwloc_topology_t topo = NULL;
  hwloc_bitmap_t set = NULL, cur = NULL;
  char *list = NULL, *cur_list = NULL;
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
  cur = hwloc_bitmap_alloc();
  if (!set || !cur) {
    rc = fail(err, errlen, CGRT_E_NOMEM, "hwloc_bitmap_alloc: out of memory");
    goto out;
  }
  const int kept = bind && narrowed(topo, cur);
  if (kept && hwloc_bitmap_list_asprintf(&cur_list, cur) < 0) {
    rc = fail(err, errlen, CGRT_E_NOMEM, "hwloc_bitmap_list_asprintf: out of memory");
    goto out;
  }
  const int placed = near_set(topo, device, set) == 0;
  if (!placed && !kept) {
    rc = fail(err, errlen, CGRT_E_DEVICE,
              "hwloc_cudart_get_device_cpuset could not place GPU %d (no PCI locality in sysfs?)",
              device);
    goto out;
  }
  if (placed && bind && !kept)
    split_among_peers(topo, device, set);
  if (placed && hwloc_bitmap_list_asprintf(&list, set) < 0) {
    rc = fail(err, errlen, CGRT_E_NOMEM, "hwloc_bitmap_list_asprintf: out of memory");
    goto out;
  }
  if (kept) { /* the host's choice stands, near the GPU or not */
    const int near = placed && hwloc_bitmap_intersects(cur, set);
    char where[512];
    if (placed)
      snprintf(where, sizeof(where), "%sthe cores near GPU %d are %s",
               near ? "" : "none of them is near the GPU; ", device, list);
    else
      snprintf(where, sizeof(where),
               "where GPU %d sits is unknown (hwloc_cudart_get_device_cpuset failed)", device);
    snprintf(cores, len, "%s", cur_list);
    rc = fail(err, errlen, placed && !near ? CGRT_CORES_KEPT_FAR : CGRT_CORES_KEPT,
              "left on cores %s, the affinity this thread had before this runtime opened "
              "(taskset, numactl, the host or an earlier runtime); %s",
              cur_list, where);
    goto out;
  }
  snprintf(cores, len, "%s", list);
  if (bind && hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) != 0) {
    rc = fail(err, errlen, CGRT_E_DEVICE, "hwloc_set_cpubind to cores %s failed", list);
    goto out;
  }
out:
  free(list);
  free(cur_list);
  if (set)
    hwloc_bitmap_free(set);
  if (cur)
    hwloc_bitmap_free(cur);
  if (topo)
    hwloc_topology_destroy(topo);
  return rc;
}
