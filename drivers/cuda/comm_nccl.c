/*
 * comm_nccl.c - the cuda driver's communicators, through NCCL: the size and rank of the host's
 * world communicator, splits of it, their destruction, and the maximum of a few values over a
 * group (dynamic_cp's by_time agreement). The core decides what to split (core/src/comm.c); this
 * file only makes the NCCL calls and says what failed.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cuda_driver.h"

int cgrt__cuda_comm_info(struct cgrt_dev *dev, void *comm, int *size, int *rank) {
  ncclComm_t c = (ncclComm_t)comm;
  ncclResult_t r = ncclCommCount(c, size);
  if (r == ncclSuccess)
    r = ncclCommUserRank(c, rank);
  if (r != ncclSuccess)
    return cgrt__dev_fail(dev, CGRT_E_DEVICE, "ncclCommCount/UserRank: %s", ncclGetErrorString(r));
  return 0;
}

int cgrt__cuda_comm_split(struct cgrt_dev *dev, void *world, int color, int key, void **comm) {
  ncclComm_t split = NULL;
  *comm = NULL;
  ncclResult_t r = ncclCommSplit((ncclComm_t)world, color, key, &split, NULL);
  if (r != ncclSuccess)
    return cgrt__dev_fail(dev, CGRT_E_DEVICE, "ncclCommSplit: %s", ncclGetErrorString(r));
  *comm = split;
  return 0;
}

void cgrt__cuda_comm_destroy(struct cgrt_dev *dev, void *comm) {
  (void)dev;
  if (comm)
    ncclCommDestroy((ncclComm_t)comm);
}

/*
 * ncclAllReduce (ncclFloat64, ncclMax) through a small device buffer on `stream`: the values are
 * copied in, reduced in place, copied out, and the stream synchronized, so they are the group's on
 * return. Once per by_time round, never per step; the core refuses it while the stream captures.
 */
int cgrt__cuda_comm_max(struct cgrt_dev *dev, void *comm, double *values, int n, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  const size_t bytes = (size_t)n * sizeof(double);
  double *buf = NULL;
  const char *call = "cudaMallocAsync (the reduction's buffer)";
  cudaError_t e = cudaMallocAsync((void **)&buf, bytes, s);
  if (e == cudaSuccess) {
    call = "cudaMemcpyAsync (values to the device)";
    e = cudaMemcpyAsync(buf, values, bytes, cudaMemcpyHostToDevice, s);
  }
  ncclResult_t r = ncclSuccess;
  if (e == cudaSuccess)
    r = ncclAllReduce(buf, buf, (size_t)n, ncclFloat64, ncclMax, (ncclComm_t)comm, s);
  if (e == cudaSuccess && r == ncclSuccess) {
    call = "cudaMemcpyAsync (values from the device)";
    e = cudaMemcpyAsync(values, buf, bytes, cudaMemcpyDeviceToHost, s);
  }
  if (buf) {
    cudaError_t f = cudaFreeAsync(buf, s);
    if (e == cudaSuccess && f != cudaSuccess) {
      call = "cudaFreeAsync (the reduction's buffer)";
      e = f;
    }
  }
  if (e == cudaSuccess && r == ncclSuccess) {
    call = "cudaStreamSynchronize (after the reduction)";
    e = cudaStreamSynchronize(s);
  }
  if (r != ncclSuccess)
    return cgrt__dev_fail(dev, CGRT_E_DEVICE, "ncclAllReduce (max of %d doubles): %s", n,
                          ncclGetErrorString(r));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cgrt__dev_fail(dev, CGRT_E_DEVICE, "%s: %s", call, cudaGetErrorString(e));
  }
  return 0;
}
