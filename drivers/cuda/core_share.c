/*
 * core_share.c - a GPU's own share of the cores near it. When several GPUs are near the same
 * cores (a socket with several GPUs, or a machine whose PCI locality hwloc cannot read, where
 * every GPU is near every core), each GPU's rank gets a contiguous share of them, as launchers
 * give each local rank a core set of its own (torchrun's or numactl's per rank). Its launching
 * thread, and the NCCL threads that thread creates (they inherit its affinity), then stop taking
 * turns on one core with another rank's: issue 42's two-rank cp bench issued a step 4 to 7 times
 * slower in 3 of 13 runs without shares, in none of 13 with them (docs/decisions.md).
 *
 * The peers are the machine's NVIDIA PCI devices, not the CUDA devices this process sees:
 * launchers often give each rank one visible GPU, and that rank must still know the others.
 */
#include <stdlib.h>

#include <hwloc.h>

#include <cgrt/types.h>

#include "core_share.h"

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_CLASS_VGA     0x0300
#define PCI_CLASS_3D      0x0302

static int is_nvidia_gpu(hwloc_obj_t pci) {
  const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
  return a->vendor_id == PCI_VENDOR_NVIDIA &&
         (a->class_id == PCI_CLASS_3D || a->class_id == PCI_CLASS_VGA);
}

int cgrt__cuda_keep_gpus(hwloc_topology_t topo) {
  if (hwloc_topology_set_type_filter(topo, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT))
    return -1;
  return hwloc_topology_set_type_filter(topo, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
}

/* PCI bus id order: domain, bus, device, function (nvidia-smi's numbering). */
static int by_busid(const void *pa, const void *pb) {
  const struct hwloc_pcidev_attr_s *a = &(*(const hwloc_obj_t *)pa)->attr->pcidev;
  const struct hwloc_pcidev_attr_s *b = &(*(const hwloc_obj_t *)pb)->attr->pcidev;
  unsigned long ka = ((unsigned long)a->domain << 24) | ((unsigned long)a->bus << 16) |
                     ((unsigned long)a->dev << 8) | a->func;
  unsigned long kb = ((unsigned long)b->domain << 24) | ((unsigned long)b->bus << 16) |
                     ((unsigned long)b->dev << 8) | b->func;
  return (ka > kb) - (ka < kb);
}

/* A PCI device's near cores: its first non-I/O ancestor's, every core when unknown. */
static int near_of(hwloc_topology_t topo, hwloc_obj_t pci, hwloc_cpuset_t near) {
  hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo);
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, pci);
  if (!anc || !anc->cpuset || hwloc_bitmap_iszero(anc->cpuset) ||
      hwloc_bitmap_isincluded(all, anc->cpuset))
    return hwloc_bitmap_copy(near, all);
  return hwloc_bitmap_and(near, anc->cpuset, all);
}

int cgrt__cuda_gpu_peers(hwloc_topology_t topo, const char *busid, hwloc_cpuset_t near,
                         hwloc_bitmap_t peers, int *gpu, int *index) {
  hwloc_obj_t *gpus = NULL;
  hwloc_bitmap_t other = NULL;
  int rc = 0, n = 0;
  *gpu = *index = -1;
  hwloc_bitmap_zero(peers);
  hwloc_obj_t self = hwloc_get_pcidev_by_busidstring(topo, busid);
  if (!self || !is_nvidia_gpu(self))
    return 0;
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(topo, o)) != NULL;)
    n += is_nvidia_gpu(o);
  gpus = malloc((size_t)n * sizeof(*gpus));
  other = hwloc_bitmap_alloc();
  if (!gpus || !other || near_of(topo, self, near) != 0) {
    rc = CGRT_E_NOMEM;
    goto out;
  }
  n = 0;
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(topo, o)) != NULL;)
    if (is_nvidia_gpu(o))
      gpus[n++] = o;
  qsort(gpus, (size_t)n, sizeof(*gpus), by_busid);
  int found = 0;
  for (int i = 0; i < n; i++) {
    if (near_of(topo, gpus[i], other) != 0) {
      rc = CGRT_E_NOMEM;
      goto out;
    }
    if (!hwloc_bitmap_isequal(other, near))
      continue;
    if (gpus[i] == self) {
      *gpu = i;
      *index = found;
    }
    found++;
    if (hwloc_bitmap_set(peers, (unsigned)i) != 0) {
      rc = CGRT_E_NOMEM;
      goto out;
    }
  }
out:
  if (rc != 0)
    *gpu = *index = -1;
  free(gpus);
  if (other)
    hwloc_bitmap_free(other);
  return rc;
}

int cgrt__cuda_core_share(hwloc_topology_t topo, hwloc_const_cpuset_t near, int peers, int index,
                          hwloc_cpuset_t share) {
  if (hwloc_bitmap_copy(share, near) != 0)
    return CGRT_E_NOMEM;
  if (peers < 2 || index < 0 || index >= peers)
    return 0;
  hwloc_obj_type_t unit = HWLOC_OBJ_CORE;
  int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, near, unit);
  if (n <= 0) {
    unit = HWLOC_OBJ_PU;
    n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, near, unit);
  }
  if (n < peers)
    return 0; /* a core each is not possible: sharing them all beats leaving a GPU none */
  hwloc_bitmap_zero(share);
  /* [index * n / peers, (index + 1) * n / peers): at least one when n >= peers */
  for (int i = index * n / peers; i < (index + 1) * n / peers; i++) {
    hwloc_obj_t o = hwloc_get_obj_inside_cpuset_by_type(topo, near, unit, (unsigned)i);
    if (o && hwloc_bitmap_or(share, share, o->cpuset) != 0)
      return CGRT_E_NOMEM;
  }
  return hwloc_bitmap_and(share, share, near) != 0 ? CGRT_E_NOMEM : 0;
}
