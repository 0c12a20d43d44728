/*
 * describe.c - what the cuda driver sees, for `cgrt info`: the CUDA runtime it links and the
 * CUDA version the installed driver supports, NCCL's version, and every device with the cores
 * near it.
 */
#include <stdio.h>

#include <cuda_runtime_api.h>
#ifdef CGRT_HAVE_NCCL
#include <nccl.h>
#endif

#include "cuda_driver.h"

static void versions(cgrt_driver_emit_fn emit, void *user) {
  char line[256];
  int rtv = 0, drv = 0;
  cudaRuntimeGetVersion(&rtv);
  cudaError_t e = cudaDriverGetVersion(&drv);
  if (e == cudaSuccess && drv > 0)
    snprintf(line, sizeof(line), "CUDA runtime %d.%d, driver supports CUDA %d.%d", rtv / 1000,
             (rtv % 1000) / 10, drv / 1000, (drv % 1000) / 10);
  else
    snprintf(line, sizeof(line), "CUDA runtime %d.%d, no CUDA driver found", rtv / 1000,
             (rtv % 1000) / 10);
  emit(user, line);
#ifdef CGRT_HAVE_NCCL
  int nv = 0;
  if (ncclGetVersion(&nv) == ncclSuccess)
    snprintf(line, sizeof(line), "NCCL %d.%d.%d", nv / 10000, (nv % 10000) / 100, nv % 100);
  else
    snprintf(line, sizeof(line), "NCCL: ncclGetVersion failed");
#else
  snprintf(line, sizeof(line), "NCCL: not built in (the cuda driver was built without NCCL)");
#endif
  emit(user, line);
}

static void devices(cgrt_driver_emit_fn emit, void *user) {
  char line[1024];
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    snprintf(line, sizeof(line), "devices: none (no CUDA device: %s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    cudaGetLastError();
    emit(user, line);
    return;
  }
  snprintf(line, sizeof(line), "devices: %d", n);
  emit(user, line);
  for (int d = 0; d < n; d++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      snprintf(line, sizeof(line), "  GPU %d: cudaGetDeviceProperties failed", d);
      emit(user, line);
      continue;
    }
    char cores[512], err[256];
    if (cgrt__cuda_cores_near(d, 0, cores, sizeof(cores), err, sizeof(err)) != 0)
      snprintf(cores, sizeof(cores), "unknown (%.200s)", err);
    snprintf(line, sizeof(line), "  GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB, PCI %04x:%02x:%02x.0", d,
             p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30),
             p.pciDomainID, p.pciBusID, p.pciDeviceID);
    emit(user, line);
    snprintf(line, sizeof(line), "         cores near it (hwloc): %s", cores);
    emit(user, line);
  }
}

void cgrt__cuda_describe(cgrt_driver_emit_fn emit, void *user) {
  versions(emit, user);
  devices(emit, user);
}
