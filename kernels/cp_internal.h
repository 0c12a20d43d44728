/*
 * cp_internal.h - between the host side (cp.cu) and the kernels (cp_kernels.cu) of the `cp`
 * workload. CUDA C++ only; not part of the workload's interface (cp.h).
 */
#ifndef CGRT_KERNELS_CP_INTERNAL_H
#define CGRT_KERNELS_CP_INTERNAL_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "cp.h"

/* One step's lengths as a kernel argument (copied at launch: no host buffer to keep alive):
 * cu[0..n] cumulative actual lengths, padded_total the dummy's padded end. */
struct thd_lengths {
  int32_t n;
  int32_t padded_total;
  int32_t cu[CGRTK_CP_MAX_SEQUENCES + 1];
};

namespace cgrtk_cp_impl {

/* What the GEMM does with each result v: store it, store silu(v), or add it to Y. */
enum { GEMM_STORE = 0, GEMM_SILU = 1, GEMM_RESIDUAL = 2 };

/* Each returns 0 or the cudaError_t of the launch (cudaErrorInvalidValue for a shape or
 * alignment the kernel does not take). */
int launch_init(float *dst, uint64_t n, uint64_t key, int is_gain, float scale, cudaStream_t s);
int launch_stage(float *h, int d, int64_t row0, int64_t rows, int64_t tokens, uint64_t key,
                 cudaStream_t s);
int launch_thd(int32_t *cu, int32_t *cu_padded, int entries, const struct thd_lengths *a,
               cudaStream_t s);
int launch_rmsnorm(const float *x, const float *gain, float *y, int rows, int d, cudaStream_t s);
int launch_gemm(const float *x, const float *w, float *y, int rows, int n, int k, int ldy, int epi,
                cudaStream_t s);
int launch_attention(const float *q, const float *kv, const int32_t *cu, const int32_t *cu_padded,
                     int padded_sequences, int64_t row0, int rows, int heads, int d, float *out,
                     cudaStream_t s);

} // namespace cgrtk_cp_impl

#endif
