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

/* When a step kernel lets its programmatic dependents launch (griddepcontrol.launch_dependents):
 * TRIG_NONE only when it completes (the kernel before a collective: an NCCL kernel launched as a
 * programmatic dependent may read the kernel's output and let peers write into buffers the call's
 * earlier kernels still read, before it waits); TRIG_START as it starts; TRIG_AFTER_WAIT once its
 * own wait for its predecessor returns, so that at most one dependent is launched ahead of the
 * kernel doing the work. */
enum { TRIG_NONE = 0, TRIG_START = 1, TRIG_AFTER_WAIT = 2 };

/* Each returns 0 or the cudaError_t of the launch (cudaErrorInvalidValue for a shape or
 * alignment the kernel does not take). pdl: launch with programmatic stream serialization (only
 * for a kernel whose predecessor on s is a step kernel of the same module call, or with
 * pdl_entry any kernel that waits for its own predecessor; see cp.h and cp_kernels.cu). */
int launch_init(float *dst, uint64_t n, uint64_t key, int is_gain, float scale, cudaStream_t s);
int launch_stage(float *h, int d, int64_t row0, int64_t rows, int64_t tokens, uint64_t key,
                 cudaStream_t s);
int launch_thd(int32_t *cu, int32_t *cu_padded, int entries, const struct thd_lengths *a,
               cudaStream_t s);
/* trig: TRIG_* above. */
int launch_rmsnorm(const float *x, const float *gain, float *y, int rows, int d, cudaStream_t s,
                   bool pdl, int trig);
int launch_gemm(const float *x, const float *w, float *y, int rows, int n, int k, int ldy, int epi,
                cudaStream_t s, bool pdl, int trig);
/* Whether RMSNorm over k values fuses into a small GEMM of rows x n outputs (launch_norm_gemm):
 * k 64 or 128, n a multiple of 64, at most 64K outputs. */
bool norm_gemm_fits(int rows, int n, int k);
/* RMSNorm(x) (gain, k = d values a row) then its GEMM with w[n, k] in one kernel, bitwise equal to
 * launch_rmsnorm then launch_gemm; columns below n0 go to y0 (row stride ld0), the rest to y1
 * (row stride ld1). epi GEMM_STORE or GEMM_SILU. gain NULL: the GEMM alone (x already normed). */
int launch_norm_gemm(const float *x, const float *gain, const float *w, int rows, int n, int k,
                     int n0, float *y0, int ld0, float *y1, int ld1, int epi, cudaStream_t s,
                     bool pdl, int trig);
int launch_attention(const float *q, const float *kv, const int32_t *cu, const int32_t *cu_padded,
                     int padded_sequences, int64_t row0, int rows, int heads, int d, float *out,
                     cudaStream_t s, bool pdl, int trig);
/* The binaryVersion of the step kernels (90 for an sm_90 binary), or 0 if it cannot be read. */
int kernels_binary_version();

} // namespace cgrtk_cp_impl

#endif
