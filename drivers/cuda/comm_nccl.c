/*
 * comm_nccl.c - the cuda driver's communicators, through NCCL: the size and rank of the host's
 * world communicator, splits of it, and their destruction. The core decides what to split
 * (core/src/comm.c); this file only makes the NCCL calls and says what failed.
 */
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
