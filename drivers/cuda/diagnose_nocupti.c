/*
 * diagnose_nocupti.c - the CUPTI recorder's stand-in when the cuda driver was built without
 * CUPTI's headers: recording fails with the reason, and diagnose reports what the driver said.
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
