/*
 * workload_common.h - host-side helpers the workloads' create functions share (CUDA C++ only).
 */
#ifndef CGRT_KERNELS_WORKLOAD_COMMON_H
#define CGRT_KERNELS_WORKLOAD_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

/* Writes the formatted sentence into err (if any). */
static inline void cgrtk_set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* An integer option from the environment, clamped to [lo, hi]; def when unset or empty. */
static inline int cgrtk_env_int(const char *name, int def, int lo, int hi) {
  const char *v = getenv(name);
  if (!v || !*v)
    return def;
  long x = strtol(v, NULL, 10);
  return x < lo ? lo : x > hi ? hi : (int)x;
}

/* n rounded up to 256 bytes: sub-buffers of one allocation keep the allocator's alignment. */
static inline size_t cgrtk_align256(size_t n) {
  return (n + 255) & ~(size_t)255;
}

/*
 * In a create function with locals `int rc`, `char *err`, `size_t errlen` and a `fail:` label:
 * runs a CUDA call; on failure sets rc, writes "WHO: WHAT failed: <error>" and jumps to fail.
 */
#define CGRTK_CREATE_TRY(who, call, what)                                                          \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      rc = (int)e_;                                                                                \
      cgrtk_set_err(err, errlen, "%s: %s failed: %s", who, what, cudaGetErrorString(e_));          \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

#endif
