/*
 * diagnose_nocupti.c - the CUPTI recorder's and sync guard's stand-in when the cuda driver was
 * built without CUPTI's headers: recording and guarding fail with the reason, and diagnose and
 * [runtime] sync_guard report what the driver said.
 */
#include <stdio.h>

#include "cuda_driver.h"
#include "graphs/diagnose.h"

int cgrt__cupti_start(struct cgrt_diag_rec *rec, const void *const *host_frame,
                      cgrt_diag_caller_fn caller, char *err, size_t len) {
  (void)rec;
  (void)host_frame;
  (void)caller;
  snprintf(err, len,
           "the cuda driver was built without CUPTI's headers (cupti.h); rebuild with the CUDA "
           "toolkit's "
           "CUPTI installed to record the calls made while capturing");
  return CGRT_E_UNSUPPORTED;
}

void cgrt__cupti_stop(void) {
}

void cgrt__cupti_finish(struct cgrt_diag_rec *rec) {
  (void)rec;
}

void cgrt__cupti_acquire(void) {
}

void cgrt__cupti_release(void) {
}

int cgrt__cupti_guard_acquire(const struct cgrt_sync_gate *gate, long wait_ms, char *err,
                              size_t len) {
  (void)gate;
  (void)wait_ms;
  snprintf(err, len,
           "the cuda driver was built without CUPTI's headers (cupti.h); rebuild with the CUDA "
           "toolkit's CUPTI installed to guard raw device synchronizes");
  return CGRT_E_UNSUPPORTED;
}

void cgrt__cupti_guard_release(void) {
}

void cgrt__cupti_guard_counts(int device, uint64_t *waited, uint64_t *late) {
  (void)device;
  *waited = *late = 0;
}
