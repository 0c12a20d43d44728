/*
 * core_share.h - a GPU's own share of the cores near it when several GPUs are near the same cores
 * (core_share.c). Internal to this folder: topology.c binds with it; plain hwloc, no CUDA, so that
 * tests/drivers/test_core_share.c runs it on hwloc's synthetic and XML topologies.
 */
#ifndef CGRT_CUDA_CORE_SHARE_H
#define CGRT_CUDA_CORE_SHARE_H

#include <hwloc.h>

/*
 * Before hwloc_topology_load: keep the PCI devices that matter (GPUs, NICs, storage) and the
 * bridges above them, which cgrt__cuda_gpu_peers reads, and no OS devices, so that hwloc's
 * OpenCL, GL, NVML and CUDA plugins, which only run to add OS devices, are not started in every
 * rank (hwloc_topology_set_io_types_filter would start them). Returns 0, or -1 from hwloc.
 */
int cgrt__cuda_keep_gpus(hwloc_topology_t topo);

/*
 * The machine's NVIDIA GPUs (PCI vendor 0x10de, class 3D controller or VGA) near the same cores
 * as the GPU at PCI bus id `busid` ("0000:3b:00.0", as cudaDeviceGetPCIBusId writes it), found
 * among topo's PCI devices (loaded after cgrt__cuda_keep_gpus), whatever CUDA_VISIBLE_DEVICES lets
 * this process see. A GPU's near cores are those of its first non-I/O ancestor, every core when
 * that is the whole machine or empty (locality unknown). The GPUs are numbered in PCI bus id order,
 * as nvidia-smi numbers them: *gpu is this one's number, peers gets the numbers of those near the
 * same cores (this one included), *index this one's place among them, near its near cores.
 * Returns 0, *gpu and *index -1 when topo has no NVIDIA GPU at busid (no PCI devices: a container
 * without sysfs PCI), or CGRT_E_NOMEM.
 */
int cgrt__cuda_gpu_peers(hwloc_topology_t topo, const char *busid, hwloc_cpuset_t near,
                         hwloc_bitmap_t peers, int *gpu, int *index);

/*
 * The share of the cores in `near` that belongs to the index-th (from 0) of `peers` GPUs near
 * them, into share: the cores split in their hwloc order (a socket's cores in a row: a share
 * crosses sockets only where a cut must) into `peers` contiguous runs of whole cores (hyperthreads
 * are never split), at least one core each, sizes differing by one at most. Every core is in one
 * share. share is near itself when there is nothing to split (fewer than two peers, an index out of
 * range, fewer cores than peers). A topology without core objects is split by PU. Returns 0 or
 * CGRT_E_NOMEM.
 */
int cgrt__cuda_core_share(hwloc_topology_t topo, hwloc_const_cpuset_t near, int peers, int index,
                          hwloc_cpuset_t share);

#endif
