/*
 * cuda_driver.h - the pieces of the cuda driver object (libcgrt-driver-cuda.so) beyond the device
 * operations of driver_cuda.c, which puts them all in its table. Internal to this folder.
 */
#ifndef CGRT_CUDA_DRIVER_H
#define CGRT_CUDA_DRIVER_H

#include <stddef.h>

#include "driver.h"

/* comm_nccl.c: the communicator operations (built with NCCL only). */
int cgrt__cuda_comm_info(struct cgrt_dev *dev, void *comm, int *size, int *rank);
int cgrt__cuda_comm_split(struct cgrt_dev *dev, void *world, int color, int key, void **comm);
void cgrt__cuda_comm_destroy(struct cgrt_dev *dev, void *comm);
int cgrt__cuda_comm_max(struct cgrt_dev *dev, void *comm, double *values, int n, void *stream);

/* topology.c: the cores near a GPU, through hwloc (struct cgrt_driver's cores_near). */
int cgrt__cuda_cores_near(int device, int bind, char *cores, size_t len, char *err, size_t errlen);

/* describe.c: versions and devices for `cgrt info` (struct cgrt_driver's describe). */
void cgrt__cuda_describe(cgrt_driver_emit_fn emit, void *user);

/*
 * diagnose_cupti.c (or diagnose_nocupti.c without CUPTI's headers): the recorder of the CUDA calls
 * a thread makes while it captures (struct cgrt_driver's record_* operations).
 */
int cgrt__cupti_start(struct cgrt_diag_rec *rec, const void *const *host_frame,
                      cgrt_diag_caller_fn caller, char *err, size_t len);
void cgrt__cupti_stop(void);
void cgrt__cupti_finish(struct cgrt_diag_rec *rec);
void cgrt__cupti_acquire(void);
void cgrt__cupti_release(void);
/* [runtime] sync_guard through the same subscription (struct cgrt_driver's sync_guard_*). */
int cgrt__cupti_guard_acquire(const struct cgrt_sync_gate *gate, long wait_ms, char *err,
                              size_t len);
void cgrt__cupti_guard_release(void);
void cgrt__cupti_guard_counts(int device, uint64_t *waited, uint64_t *late);

#endif
