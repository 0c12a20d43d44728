/*
 * topology.c - CPU cores near a GPU, through hwloc (the cuda driver's cores_near). A launching
 * thread on the GPU's own socket keeps launch latency and host-to-device copies off the
 * inter-socket link; where several GPUs are near the same cores, it gets this GPU's own share of
 * them (core_share.c), so that the ranks' threads do not take turns on a core. Here and not in the
 * core: the GPU's PCI bus id comes from the CUDA runtime, and hwloc's CUDA helper (hwloc/cudart.h)
 * places the GPU when hwloc lists no PCI devices.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <hwloc.h>
#include <hwloc/cudart.h>

#include "core_share.h"
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

/* Where GPU `device` sits among the machine's GPUs, and its share of the cores near it. */
struct place {
  hwloc_bitmap_t near;  /* the cores near it: every core when its locality is unknown */
  hwloc_bitmap_t peers; /* the numbers of the GPUs near the same cores, its own included */
  hwloc_bitmap_t share; /* its share of near: near itself when not shared out */
  int gpu, index;       /* its number, its place among peers */
  int by_pci;           /* numbered in PCI order among hwloc's PCI devices (else CUDA's order) */
  char busid[32];       /* its PCI bus id, "" when CUDA could not tell */
};

/*
 * Peers among the GPUs this process sees, as CUDA numbers them: when hwloc lists no PCI device
 * for this GPU (a container without sysfs PCI). A rank that sees one GPU finds no peer here.
 */
static int cuda_peers(hwloc_topology_t topo, int device, struct place *p) {
  int count = 0, rc = 0;
  hwloc_bitmap_t other = hwloc_bitmap_alloc();
  if (!other)
    return CGRT_E_NOMEM;
  hwloc_bitmap_zero(p->peers);
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  p->index = -1;
  for (int d = 0; d < count && rc == 0; d++) {
    if (d == device)
      p->index = hwloc_bitmap_weight(p->peers);
    else if (near_set(topo, d, other) != 0 || !hwloc_bitmap_isequal(other, p->near))
      continue;
    if (hwloc_bitmap_set(p->peers, (unsigned)d) != 0)
      rc = CGRT_E_NOMEM;
  }
  if (rc == 0 && p->index < 0) { /* not among those CUDA counts: alone */
    hwloc_bitmap_zero(p->peers);
    p->index = 0;
    if (hwloc_bitmap_set(p->peers, (unsigned)device) != 0)
      rc = CGRT_E_NOMEM;
  }
  p->gpu = device;
  hwloc_bitmap_free(other);
  return rc;
}

/*
 * Places GPU `device` (struct place): its near cores and peers from hwloc's PCI devices, found by
 * the bus id CUDA gives, else from hwloc's CUDA helper and the GPUs this process sees. Returns 0,
 * 1 when neither could place it, or CGRT_E_NOMEM.
 */
static int place_gpu(hwloc_topology_t topo, int device, struct place *p) {
  int rc;
  p->busid[0] = '\0';
  p->by_pci = 0;
  p->gpu = p->index = -1;
  if (cudaDeviceGetPCIBusId(p->busid, sizeof(p->busid), device) != cudaSuccess) {
    cudaGetLastError();
    p->busid[0] = '\0';
  } else {
    rc = cgrt__cuda_gpu_peers(topo, p->busid, p->near, p->peers, &p->gpu, &p->index);
    if (rc != 0)
      return rc;
    p->by_pci = p->gpu >= 0;
  }
  if (!p->by_pci) {
    if (near_set(topo, device, p->near) != 0)
      return 1;
    if ((rc = cuda_peers(topo, device, p)) != 0)
      return rc;
  }
  return cgrt__cuda_core_share(topo, p->near, hwloc_bitmap_weight(p->peers), p->index, p->share);
}

/*
 * Which GPU this is among those near the same cores, for the log: "PCI 0000:3b:00.0, GPU 1 of
 * GPUs 0-1 in PCI order" (the numbers nvidia-smi gives, whatever CUDA_VISIBLE_DEVICES is), or
 * "GPU 1 of GPUs 0-1 as CUDA numbers them (...)".
 */
static void which_gpu(const struct place *p, char *out, size_t len) {
  char peers[128];
  if (hwloc_bitmap_list_snprintf(peers, sizeof(peers), p->peers) < 0)
    snprintf(peers, sizeof(peers), "?");
  if (p->by_pci)
    snprintf(out, len, "PCI %s, GPU %d of GPUs %s in PCI order", p->busid, p->gpu, peers);
  else
    snprintf(out, len, "GPU %d of GPUs %s as CUDA numbers them (%s%s)", p->gpu, peers,
             p->busid[0] ? "hwloc lists no PCI device at " : "no PCI bus id from CUDA", p->busid);
}

/*
 * Finds the cores near `device`; bind: also binds the calling thread to this GPU's share of them
 * (all of them unless other GPUs are near the same cores: core_share.c), unless its affinity was
 * narrowed before (narrowed): an operator's taskset or a host's pinning is kept, never widened,
 * and CGRT_CORES_KEPT (or CGRT_CORES_KEPT_FAR: none of them near the GPU) returned with the
 * sentence in err. Bound to a share, cores is the share's list followed by whose share it is, in
 * parentheses, for the runtime's log line.
 */
int cgrt__cuda_cores_near(int device, int bind, char *cores, size_t len, char *err, size_t errlen) {
  hwloc_topology_t topo = NULL;
  hwloc_bitmap_t cur = NULL;
  struct place p = {0};
  char *near_list = NULL, *share_list = NULL, *cur_list = NULL;
  int rc = 0;
  if (hwloc_topology_init(&topo) != 0) {
    topo = NULL;
    rc = fail(err, errlen, CGRT_E_DEVICE, "hwloc_topology_init failed");
    goto out;
  }
  if (cgrt__cuda_keep_gpus(topo) != 0) {
    rc = fail(err, errlen, CGRT_E_DEVICE,
              "hwloc_topology_set_type_filter (PCI devices and bridges) failed");
    goto out;
  }
  if (hwloc_topology_load(topo) != 0) {
    rc = fail(err, errlen, CGRT_E_DEVICE, "hwloc_topology_load failed");
    goto out;
  }
  p.near = hwloc_bitmap_alloc();
  p.peers = hwloc_bitmap_alloc();
  p.share = hwloc_bitmap_alloc();
  cur = hwloc_bitmap_alloc();
  if (!p.near || !p.peers || !p.share || !cur) {
    rc = fail(err, errlen, CGRT_E_NOMEM, "hwloc_bitmap_alloc: out of memory");
    goto out;
  }
  const int kept = bind && narrowed(topo, cur);
  if (kept && hwloc_bitmap_list_asprintf(&cur_list, cur) < 0) {
    rc = fail(err, errlen, CGRT_E_NOMEM, "hwloc_bitmap_list_asprintf: out of memory");
    goto out;
  }
  rc = place_gpu(topo, device, &p);
  if (rc < 0) {
    rc = fail(err, errlen, rc, "placing GPU %d among the machine's GPUs: out of memory", device);
    goto out;
  }
  const int placed = rc == 0;
  rc = 0;
  if (!placed && !kept) {
    rc = fail(err, errlen, CGRT_E_DEVICE,
              "could not place GPU %d: hwloc lists no NVIDIA PCI device at its bus id (%s) and "
              "hwloc_cudart_get_device_cpuset failed (no PCI locality in sysfs?)",
              device, p.busid[0] ? p.busid : "unknown");
    goto out;
  }
  if (placed && (hwloc_bitmap_list_asprintf(&near_list, p.near) < 0 ||
                 hwloc_bitmap_list_asprintf(&share_list, p.share) < 0)) {
    rc = fail(err, errlen, CGRT_E_NOMEM, "hwloc_bitmap_list_asprintf: out of memory");
    goto out;
  }
  const int peers = placed ? hwloc_bitmap_weight(p.peers) : 0;
  const int shared_out = peers > 1 && !hwloc_bitmap_isequal(p.share, p.near);
  char who[256] = "";
  if (peers > 1)
    which_gpu(&p, who, sizeof(who));
  if (kept) { /* the host's choice stands, near the GPU or not */
    const int near = placed && hwloc_bitmap_intersects(cur, p.near);
    char where[768];
    if (placed && shared_out)
      snprintf(where, sizeof(where), "%sthe cores near GPU %d are %s, its share %s (%s)",
               near ? "" : "none of them is near the GPU; ", device, near_list, share_list, who);
    else if (placed)
      snprintf(where, sizeof(where), "%sthe cores near GPU %d are %s",
               near ? "" : "none of them is near the GPU; ", device, near_list);
    else
      snprintf(where, sizeof(where),
               "where GPU %d sits is unknown (not among hwloc's PCI devices, and "
               "hwloc_cudart_get_device_cpuset failed)",
               device);
    snprintf(cores, len, "%s", cur_list);
    rc = fail(err, errlen, placed && !near ? CGRT_CORES_KEPT_FAR : CGRT_CORES_KEPT,
              "left on cores %s, the affinity this thread had before this runtime opened "
              "(taskset, numactl, the host or an earlier runtime); %s",
              cur_list, where);
    goto out;
  }
  if (!bind)
    snprintf(cores, len, "%s", near_list);
  else if (shared_out)
    snprintf(cores, len, "%s (the share of %s, which share cores %s)", share_list, who, near_list);
  else if (peers > 1)
    snprintf(cores, len, "%s (%s: fewer cores than the %d GPUs near them, so not shared out)",
             share_list, who, peers);
  else
    snprintf(cores, len, "%s", share_list);
  if (bind && hwloc_set_cpubind(topo, p.share, HWLOC_CPUBIND_THREAD) != 0) {
    rc = fail(err, errlen, CGRT_E_DEVICE, "hwloc_set_cpubind to cores %s failed", share_list);
    goto out;
  }
out:
  free(near_list);
  free(share_list);
  free(cur_list);
  if (p.near)
    hwloc_bitmap_free(p.near);
  if (p.peers)
    hwloc_bitmap_free(p.peers);
  if (p.share)
    hwloc_bitmap_free(p.share);
  if (cur)
    hwloc_bitmap_free(cur);
  if (topo)
    hwloc_topology_destroy(topo);
  return rc;
}
