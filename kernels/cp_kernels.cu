/*
 * cp_kernels.cu - the device side of the `cp` workload (cp.h): initialization, staging, THD
 * metadata, RMSNorm, a tiled fp32 GEMM, and causal attention over packed sequences.
 *
 * Every kernel computes each output element in one fixed order that depends only on the data of
 * its own row (never on the row count, the grid or the rank), without atomics, so results are
 * bitwise reproducible eagerly, replayed, and at any cp size.
 *
 * Programmatic dependent launch (sm_90+, as in decode_kernels.cu): the kernels of one module call
 * after its first, and with pdl_entry the first too, are launched with the
 * programmatic-serialization attribute (cp.cu decides). Every step kernel waits for its
 * predecessor (griddepcontrol.wait) before it reads anything a kernel of the call writes and
 * before it writes anything; before the wait it reads only what no kernel of the call writes
 * (weights, THD metadata). It lets its dependents launch (griddepcontrol.launch_dependents) when
 * `trig` says (TRIG_*, cp_internal.h): the GEMMs as they start, RMSNorm and the attention once
 * their wait returns, so a chain launches at most a few kernels ahead of the one working.
 * Triggering every kernel at its start let a chain launch every kernel up to the next call
 * boundary ahead, all waiting on the GPU; with pdl_entry there is no such boundary in a step
 * graph, and the cp 1 step replayed 9 us slower; every kernel after its wait, 4.6 us slower than
 * the GEMMs at their start (H200, docs/decisions.md, issue 15, tenth session). Launched without
 * the attribute both are no-ops.
 * TRIG_NONE keeps the dependents until the kernel completes, for the projection before an
 * all-gather (a collective's kernel may be a programmatic dependent that never waits).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cp.h"
#include "cp_internal.h"
#include "launch_common.cuh"

namespace cgrtk_cp_impl {
namespace {

constexpr int kThreads = 256;
constexpr int kNormWarps = 8;               /* rows per RMSNorm block, one warp each */
constexpr int kNormCached = 4;              /* gains a lane of rmsnorm reads before the wait */
constexpr int kAttnWarps = 4;               /* warps per attention block (one row, one head) */
constexpr int kBM = 64, kBN = 64, kBK = 16; /* GEMM tile; 256 threads, 4 x 4 outputs each */
constexpr unsigned kFull = 0xffffffffu;
/* Outputs up to which a GEMM runs one thread per element (gemm_small) rather than in tiles. */
constexpr int64_t kSmallGemmOutputs = 64 * 1024;

using cgrtk_launch::launch;
using cgrtk_launch::pdl_trigger;
using cgrtk_launch::pdl_wait;

/* Where a step kernel lets its programmatic dependents launch (TRIG_*, cp_internal.h): call
 * trigger_at_start(trig) as the kernel starts and wait_predecessor(trig) in place of pdl_wait. */
__device__ __forceinline__ void trigger_at_start(int trig) {
  if (trig == TRIG_START)
    pdl_trigger();
}

__device__ __forceinline__ void wait_predecessor(int trig) {
  pdl_wait();
  if (trig == TRIG_AFTER_WAIT)
    pdl_trigger();
}

unsigned grid_for(uint64_t n) {
  uint64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1)
    b = 1;
  return (unsigned)(b > 65535 ? 65535 : b);
}

__global__ void init_values(float *__restrict__ dst, uint64_t n, uint64_t key, int is_gain,
                            float scale) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    dst[i] = cgrtk_cp_value(key, i, is_gain, scale);
}

/* Local row i is global row row0 + i: real below `tokens`, padding (0) from there. */
__global__ void stage_input(float *__restrict__ h, int d, int64_t row0, int64_t rows,
                            int64_t tokens, uint64_t key) {
  const uint64_t n = (uint64_t)rows * d;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    const int64_t g = row0 + (int64_t)(i / (uint64_t)d);
    const int64_t c = (int64_t)(i % (uint64_t)d);
    h[i] = g < tokens ? cgrtk_cp_value(key, (uint64_t)(g * d + c), 0, 1.0f) : 0.0f;
  }
}

/* cgrt's THD slot layout at capacity `entries` (= CGRTK_CP_MAX_SEQUENCES + 2). */
__global__ void stage_thd(int32_t *__restrict__ cu, int32_t *__restrict__ cu_padded, int entries,
                          struct thd_lengths a) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < entries; i += gridDim.x * blockDim.x) {
    cu[i] = i <= a.n ? a.cu[i] : a.cu[a.n];
    cu_padded[i] = i <= a.n ? a.cu[i] : a.padded_total;
  }
}

/* One warp per row: y = x * rsqrt(mean(x^2) + eps) * gain. The sum of squares runs lane-strided
 * in a fixed order, then a butterfly (every lane ends with the same, order-fixed sum). */
__global__ void rmsnorm(const float *__restrict__ x, const float *__restrict__ gain,
                        float *__restrict__ y, int rows, int d, int trig) {
  trigger_at_start(trig);
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kNormWarps + (threadIdx.x >> 5);
  /* The gains (weights) before the wait, for rows up to kNormCached values a lane. */
  float gv[kNormCached];
#pragma unroll
  for (int i = 0; i < kNormCached; i++)
    gv[i] = lane + 32 * i < d ? gain[lane + 32 * i] : 0.0f;
  wait_predecessor(trig);
  if (r >= rows)
    return;
  const float *xr = x + (size_t)r * d;
  float ss = 0.0f;
  for (int c = lane; c < d; c += 32)
    ss = fmaf(xr[c], xr[c], ss);
  for (int o = 16; o > 0; o >>= 1)
    ss += __shfl_xor_sync(kFull, ss, o);
  const float inv = rsqrtf(ss / (float)d + CGRTK_CP_RMS_EPS);
  float *yr = y + (size_t)r * d;
#pragma unroll
  for (int i = 0; i < kNormCached; i++)
    if (lane + 32 * i < d)
      yr[lane + 32 * i] = xr[lane + 32 * i] * inv * gv[i];
  for (int c = lane + 32 * kNormCached; c < d; c += 32)
    yr[c] = xr[c] * inv * gain[c];
}

/*
 * Y[rows, n] (row stride ldy) = epilogue(X[rows, k] . W[n, k]^T). n a multiple of 64, k of 16,
 * X, W 16-byte aligned with row strides k. Each output is one fmaf chain over k = 0..k-1, so a
 * row's result does not depend on `rows` or on the tile it falls in.
 */
template <int EPI>
__global__ void __launch_bounds__(256)
    gemm(const float *__restrict__ x, const float *__restrict__ w, float *y, int rows, int n, int k,
         int ldy, int trig) {
  trigger_at_start(trig);
  wait_predecessor(trig);
  __shared__ float as[kBK][kBM + 4];
  __shared__ float bs[kBK][kBN + 4];
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int lr = threadIdx.x >> 2, lk = (threadIdx.x & 3) * 4; /* this thread's tile loads */
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
      acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kBK) {
    float4 av = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (m0 + lr < rows)
      av = *reinterpret_cast<const float4 *>(x + (size_t)(m0 + lr) * k + k0 + lk);
    const float4 bv = *reinterpret_cast<const float4 *>(w + (size_t)(n0 + lr) * k + k0 + lk);
    as[lk + 0][lr] = av.x;
    as[lk + 1][lr] = av.y;
    as[lk + 2][lr] = av.z;
    as[lk + 3][lr] = av.w;
    bs[lk + 0][lr] = bv.x;
    bs[lk + 1][lr] = bv.y;
    bs[lk + 2][lr] = bv.z;
    bs[lk + 3][lr] = bv.w;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++)
        a[i] = as[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; j++)
        b[j] = bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
          acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = m0 + ty + 16 * i;
    if (r >= rows)
      continue;
    float *yr = y + (size_t)r * ldy + n0 + tx;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float v = acc[i][j];
      if (EPI == GEMM_STORE)
        yr[16 * j] = v;
      else if (EPI == GEMM_SILU)
        yr[16 * j] = v / (1.0f + expf(-v));
      else
        yr[16 * j] = yr[16 * j] + v;
    }
  }
}

/*
 * The same GEMM for small shapes, where the 64 x 64 tiles leave most of the GPU idle (128 rows
 * by 64 columns is two blocks) and each tile step pays a load latency and a barrier. For k other
 * than 64 and 128: one thread per output element, reading its rows of x and w. Each element is
 * the same fmaf chain over k = 0, 1, ..., k - 1 as in gemm(), so both give the same bits.
 */
template <int EPI>
__global__ void __launch_bounds__(256)
    gemm_small(const float *__restrict__ x, const float *__restrict__ w, float *y, int rows, int n,
               int k, int ldy, int trig) {
  trigger_at_start(trig);
  wait_predecessor(trig);
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (int64_t)rows * n)
    return;
  const int r = (int)(idx / n), c = (int)(idx % n);
  const float4 *xr = reinterpret_cast<const float4 *>(x + (size_t)r * k);
  const float4 *wr = reinterpret_cast<const float4 *>(w + (size_t)c * k);
  float acc = 0.0f;
#pragma unroll 4
  for (int q = 0; q < k / 4; q++) {
    const float4 a = xr[q], b = wr[q];
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    acc = fmaf(a.w, b.w, acc);
  }
  float *yr = y + (size_t)r * ldy + c;
  if (EPI == GEMM_STORE)
    *yr = acc;
  else if (EPI == GEMM_SILU)
    *yr = acc / (1.0f + expf(-acc));
  else
    *yr = *yr + acc;
}

constexpr int kTC = 16; /* gemm_tile: 16 output columns a block, TR rows, one output a thread */

/*
 * Small GEMMs with k = K (64 or 128): a block computes TR rows x 16 columns (TR 4, 8 or 16,
 * picked per shape so that the grid spreads over the SMs), with its 16 rows of w (read before
 * the wait for the predecessor: weights) and its TR rows of x (after it) in shared memory, each
 * loaded once, coalesced, in float4. Rows are padded to K + 4 floats: 16-byte aligned, and the
 * float4 reads of 8 consecutive w rows fall in distinct banks. A kernel costs about one memory
 * latency plus the K-long fmaf chain. NORM: x is the un-normalized input and the block applies
 * RMSNorm (gain) to its rows first, forming each row's sum of squares exactly as rmsnorm() does
 * (lane-strided partial sums, then the butterfly) and each value as x * inv * gain, so the result
 * is bitwise that of rmsnorm() then the GEMM. Each output is the fmaf chain over
 * k = 0, ..., K - 1 of gemm(). Columns below n0 go to y0 (row stride ld0), the others to y1
 * (column c - n0, row stride ld1): one launch writes Q and K/V.
 */
template <int EPI, int K, bool NORM, int TR>
__global__ void __launch_bounds__(TR *kTC)
    gemm_tile(const float *__restrict__ x, const float *__restrict__ gain,
              const float *__restrict__ w, int rows, int n0, float *y0, int ld0, float *y1, int ld1,
              int trig) {
  constexpr int kLd = K + 4, kThr = TR * kTC, kQ = K / 4;
  __shared__ __align__(16) float xs[TR][kLd];
  __shared__ __align__(16) float ws[kTC][kLd];
  trigger_at_start(trig);
  const int tid = threadIdx.x, tx = tid % kTC, ty = tid / kTC;
  const int r0 = blockIdx.y * TR, c0 = blockIdx.x * kTC;
#pragma unroll
  for (int i = tid; i < kTC * kQ; i += kThr) {
    const int row = i / kQ, q = i % kQ;
    *reinterpret_cast<float4 *>(&ws[row][4 * q]) =
        reinterpret_cast<const float4 *>(w + (size_t)(c0 + row) * K)[q];
  }
  wait_predecessor(trig);
#pragma unroll
  for (int i = tid; i < TR * kQ; i += kThr) {
    const int row = i / kQ, q = i % kQ;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + row < rows)
      v = reinterpret_cast<const float4 *>(x + (size_t)(r0 + row) * K)[q];
    *reinterpret_cast<float4 *>(&xs[row][4 * q]) = v;
  }
  __syncthreads();
  if (NORM) {
    const int lane = tid & 31, warp = tid >> 5;
    for (int row = warp; row < TR; row += kThr / 32) {
      float ss = 0.0f;
#pragma unroll
      for (int c = lane; c < K; c += 32)
        ss = fmaf(xs[row][c], xs[row][c], ss);
      for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(kFull, ss, o);
      const float inv = rsqrtf(ss / (float)K + CGRTK_CP_RMS_EPS);
#pragma unroll
      for (int c = lane; c < K; c += 32)
        xs[row][c] = xs[row][c] * inv * gain[c];
    }
    __syncthreads();
  }
  const float4 *xr = reinterpret_cast<const float4 *>(&xs[ty][0]);
  const float4 *wr = reinterpret_cast<const float4 *>(&ws[tx][0]);
  float acc = 0.0f;
#pragma unroll
  for (int q = 0; q < kQ; q++) {
    const float4 a = xr[q], b = wr[q];
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    acc = fmaf(a.w, b.w, acc);
  }
  const int r = r0 + ty, c = c0 + tx;
  if (r >= rows)
    return;
  float *yr = c < n0 ? y0 + (size_t)r * ld0 + c : y1 + (size_t)r * ld1 + (c - n0);
  if (EPI == GEMM_STORE)
    *yr = acc;
  else if (EPI == GEMM_SILU)
    *yr = acc / (1.0f + expf(-acc));
  else
    *yr = *yr + acc;
}

/* Rows a gemm_tile block takes: the most (16, 8, then 4) that still gives about two blocks per
 * SM of an H100/H200 (132 SMs); fewer rows a block means less serial work in each. Measured in a
 * PDL chain on an H200 (128 rows, k 64 and 128): 4 rows beat 16 by 7-31% at these shapes. */
int tile_rows(int rows, int n) {
  const int64_t cols = n / kTC;
  if (cols * ((rows + 15) / 16) >= 264)
    return 16;
  if (cols * ((rows + 7) / 8) >= 264)
    return 8;
  return 4;
}

template <int EPI, bool NORM, int K, int TR>
int launch_tile_tr(const float *x, const float *gain, const float *w, int rows, int n, int n0,
                   float *y0, int ld0, float *y1, int ld1, cudaStream_t s, bool pdl, int trig) {
  const dim3 grid((unsigned)(n / kTC), (unsigned)((rows + TR - 1) / TR)), block(TR * kTC);
  return launch(gemm_tile<EPI, K, NORM, TR>, grid, block, 0, s, pdl, x, gain, w, rows, n0, y0, ld0,
                y1, ld1, trig);
}

template <int EPI, bool NORM, int K>
int launch_tile_k(const float *x, const float *gain, const float *w, int rows, int n, int n0,
                  float *y0, int ld0, float *y1, int ld1, cudaStream_t s, bool pdl, int trig) {
  switch (tile_rows(rows, n)) {
  case 16:
    return launch_tile_tr<EPI, NORM, K, 16>(x, gain, w, rows, n, n0, y0, ld0, y1, ld1, s, pdl,
                                            trig);
  case 8:
    return launch_tile_tr<EPI, NORM, K, 8>(x, gain, w, rows, n, n0, y0, ld0, y1, ld1, s, pdl, trig);
  default:
    return launch_tile_tr<EPI, NORM, K, 4>(x, gain, w, rows, n, n0, y0, ld0, y1, ld1, s, pdl, trig);
  }
}

template <int EPI, bool NORM>
int launch_tile(const float *x, const float *gain, const float *w, int rows, int n, int k, int n0,
                float *y0, int ld0, float *y1, int ld1, cudaStream_t s, bool pdl, int trig) {
  if (k == 64)
    return launch_tile_k<EPI, NORM, 64>(x, gain, w, rows, n, n0, y0, ld0, y1, ld1, s, pdl, trig);
  return launch_tile_k<EPI, NORM, 128>(x, gain, w, rows, n, n0, y0, ld0, y1, ld1, s, pdl, trig);
}

/* Plain global loads the compiler may neither sink to their first use nor repeat there (volatile
 * asm): the attention issues every load of a chunk before its arithmetic, so a chunk costs one
 * memory latency, not one per key. Only for data no kernel writes while this one runs. */
__device__ __forceinline__ float2 load_f2(const float *p) {
  float2 v;
  asm volatile("ld.global.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ float4 load_f4(const float *p) {
  float4 v;
  asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

constexpr int kKeyLd = CGRTK_CP_HEAD_DIM + 4; /* a staged key row: 16-byte aligned, no conflicts */

__global__ void __launch_bounds__(kAttnWarps * 32)
    attention(const float *__restrict__ q, const float *__restrict__ kv,
              const int32_t *__restrict__ cu, const int32_t *__restrict__ cu_padded,
              int padded_sequences, int64_t row0, int d, float *__restrict__ out, int trig) {
  __shared__ __align__(16) float keys[kAttnWarps][32][kKeyLd];
  __shared__ __align__(16) float qsh[kAttnWarps][CGRTK_CP_HEAD_DIM];
  __shared__ float part_m[kAttnWarps], part_l[kAttnWarps];
  __shared__ __align__(8) float part_acc[kAttnWarps][CGRTK_CP_HEAD_DIM];
  __shared__ int part_below[kAttnWarps];
  trigger_at_start(trig);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lr = blockIdx.x, h = blockIdx.y;
  const int64_t g = row0 + lr;
  int below = 0; /* entries of cu_padded <= g */
  for (int i = (int)threadIdx.x; i < padded_sequences; i += kAttnWarps * 32)
    below += (int64_t)cu_padded[i] <= g;
  below = __reduce_add_sync(kFull, below);
  if (lane == 0)
    part_below[warp] = below;
  __syncthreads();
  below = 0;
#pragma unroll
  for (int w = 0; w < kAttnWarps; w++)
    below += part_below[w];
  const int seq = below > 0 ? below - 1 : 0;
  const int64_t start = cu_padded[seq];
  const int64_t len = (int64_t)cu[seq + 1] - cu[seq];
  const int64_t pos = g - start;
  float *o = out + (size_t)lr * d + h * CGRTK_CP_HEAD_DIM;
  /* The THD metadata above is not written by the call's kernels; q and kv are. */
  wait_predecessor(trig);
  if (pos < 0 || pos >= len) { /* the same on the whole block */
    if (warp == 0)
      reinterpret_cast<float2 *>(o)[lane] = make_float2(0.0f, 0.0f);
    return;
  }
  const size_t ld = 2 * (size_t)d;
  const float *kbase = kv + h * CGRTK_CP_HEAD_DIM;
  const float *vbase = kv + d + h * CGRTK_CP_HEAD_DIM;
  /* Every global load of the warp's first chunk is issued before any of them is used, so the
     chunk costs one memory latency: the query (a float2 a lane), then the chunk's key rows into
     registers (lanes 0-15 one row, 16-31 the next, a float4 each), then this lane's value pairs.
     Only then are the query, scaled by 1/sqrt(64) = 1/8 (exact), and the keys stored into the
     warp's shared memory. */
  const float2 qv = load_f2(q + (size_t)lr * d + h * CGRTK_CP_HEAD_DIM + 2 * lane);
  float(*ks)[kKeyLd] = keys[warp];
  float *qw = qsh[warp];
  bool staged = false; /* the query is in qw */
  float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  for (int64_t base = start + 32 * (int64_t)warp; base <= g; base += 32 * kAttnWarps) {
    const int cnt = (int)(g - base + 1 < 32 ? g - base + 1 : 32); /* the same on every lane */
    float4 kr[16];
#pragma unroll
    for (int i = 0; i < 16; i++) {
      const int r = 2 * i + (lane >> 4);
      kr[i] = load_f4(kbase + (size_t)(base + (r < cnt ? r : 0)) * ld + 4 * (lane & 15));
    }
    float2 v[32];
#pragma unroll
    for (int t = 0; t < 32; t++)
      v[t] = load_f2(vbase + (size_t)(base + (t < cnt ? t : 0)) * ld + 2 * lane);
    __syncwarp(); /* the previous chunk's reads of ks are done */
    if (!staged) {
      reinterpret_cast<float2 *>(qw)[lane] = make_float2(qv.x * 0.125f, qv.y * 0.125f);
      staged = true;
    }
#pragma unroll
    for (int i = 0; i < 16; i++)
      *reinterpret_cast<float4 *>(&ks[2 * i + (lane >> 4)][4 * (lane & 15)]) = kr[i];
    __syncwarp();
    const bool valid = lane < cnt;
    /* The score of this lane's key (rows past cnt repeat row 0 and are not read). */
    const float4 *krow = reinterpret_cast<const float4 *>(&ks[valid ? lane : 0][0]);
    const float4 *q4 = reinterpret_cast<const float4 *>(qw);
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < CGRTK_CP_HEAD_DIM / 4; e++) {
      const float4 a = q4[e], b = krow[e];
      dot = fmaf(a.x, b.x, dot);
      dot = fmaf(a.y, b.y, dot);
      dot = fmaf(a.z, b.z, dot);
      dot = fmaf(a.w, b.w, dot);
    }
    const float s = valid ? dot : -INFINITY;
    float cmax = s;
    for (int off = 16; off > 0; off >>= 1)
      cmax = fmaxf(cmax, __shfl_xor_sync(kFull, cmax, off));
    const float mnew = fmaxf(m, cmax); /* finite: lane 0's key (base <= g) is valid */
    const float p = valid ? expf(s - mnew) : 0.0f;
    const float corr = expf(m - mnew); /* 0 on the warp's first chunk (m = -inf) */
    float psum = p;
    for (int off = 16; off > 0; off >>= 1)
      psum += __shfl_xor_sync(kFull, psum, off);
    l = l * corr + psum;
    acc0 *= corr;
    acc1 *= corr;
#pragma unroll
    for (int t = 0; t < 32; t++) {
      const float pt = __shfl_sync(kFull, p, t); /* 0 past cnt: those keys are not valid */
      if (t < cnt) {
        acc0 = fmaf(pt, v[t].x, acc0);
        acc1 = fmaf(pt, v[t].y, acc1);
      }
    }
    m = mnew;
  }
  /* Combine the warps' results in warp order (a warp without a chunk has l = 0). */
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
  }
  reinterpret_cast<float2 *>(part_acc[warp])[lane] = make_float2(acc0, acc1);
  __syncthreads();
  if (warp != 0)
    return;
  float mt = part_m[0];
#pragma unroll
  for (int w = 1; w < kAttnWarps; w++)
    mt = fmaxf(mt, part_m[w]);
  float lt = 0.0f, a0 = 0.0f, a1 = 0.0f;
#pragma unroll
  for (int w = 0; w < kAttnWarps; w++) {
    if (part_l[w] == 0.0f)
      continue;
    const float c = expf(part_m[w] - mt);
    const float2 pa = reinterpret_cast<const float2 *>(part_acc[w])[lane];
    lt = fmaf(part_l[w], c, lt);
    a0 = fmaf(pa.x, c, a0);
    a1 = fmaf(pa.y, c, a1);
  }
  reinterpret_cast<float2 *>(o)[lane] = make_float2(a0 / lt, a1 / lt);
}

bool misaligned(const void *p) {
  return ((uintptr_t)p & 15) != 0;
}

} // namespace

int kernels_binary_version() {
  cudaFuncAttributes a;
  return cudaFuncGetAttributes(&a, attention) == cudaSuccess ? a.binaryVersion : 0;
}

int launch_init(float *dst, uint64_t n, uint64_t key, int is_gain, float scale, cudaStream_t s) {
  if (n == 0)
    return 0;
  init_values<<<grid_for(n), kThreads, 0, s>>>(dst, n, key, is_gain, scale);
  return (int)cudaGetLastError();
}

int launch_stage(float *h, int d, int64_t row0, int64_t rows, int64_t tokens, uint64_t key,
                 cudaStream_t s) {
  if (rows == 0)
    return 0;
  stage_input<<<grid_for((uint64_t)rows * d), kThreads, 0, s>>>(h, d, row0, rows, tokens, key);
  return (int)cudaGetLastError();
}

int launch_thd(int32_t *cu, int32_t *cu_padded, int entries, const struct thd_lengths *a,
               cudaStream_t s) {
  stage_thd<<<grid_for((uint64_t)entries), kThreads, 0, s>>>(cu, cu_padded, entries, *a);
  return (int)cudaGetLastError();
}

int launch_rmsnorm(const float *x, const float *gain, float *y, int rows, int d, cudaStream_t s,
                   bool pdl, int trig) {
  if (rows == 0)
    return 0;
  const unsigned blocks = (unsigned)((rows + kNormWarps - 1) / kNormWarps);
  return launch(rmsnorm, dim3(blocks), dim3(kNormWarps * 32), 0, s, pdl, x, gain, y, rows, d, trig);
}

int launch_gemm(const float *x, const float *w, float *y, int rows, int n, int k, int ldy, int epi,
                cudaStream_t s, bool pdl, int trig) {
  if (rows == 0)
    return 0;
  if (n % kBN != 0 || k % kBK != 0 || misaligned(x) || misaligned(w))
    return (int)cudaErrorInvalidValue;
  /* Small products (the launch-bound shape: 128 rows, d 64): 16 x 16 tiles, or one thread per
     element for other k. */
  if ((int64_t)rows * n <= kSmallGemmOutputs) {
    if (k == 64 || k == 128) {
      if (epi == GEMM_STORE)
        return launch_tile<GEMM_STORE, false>(x, nullptr, w, rows, n, k, n, y, ldy, y, ldy, s, pdl,
                                              trig);
      if (epi == GEMM_SILU)
        return launch_tile<GEMM_SILU, false>(x, nullptr, w, rows, n, k, n, y, ldy, y, ldy, s, pdl,
                                             trig);
      return launch_tile<GEMM_RESIDUAL, false>(x, nullptr, w, rows, n, k, n, y, ldy, y, ldy, s, pdl,
                                               trig);
    }
    const int64_t outputs = (int64_t)rows * n;
    const dim3 grid((unsigned)((outputs + kThreads - 1) / kThreads)), block(kThreads);
    if (epi == GEMM_STORE)
      return launch(gemm_small<GEMM_STORE>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy, trig);
    if (epi == GEMM_SILU)
      return launch(gemm_small<GEMM_SILU>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy, trig);
    return launch(gemm_small<GEMM_RESIDUAL>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy,
                  trig);
  }
  const dim3 grid((unsigned)(n / kBN), (unsigned)((rows + kBM - 1) / kBM)), block(256);
  if (epi == GEMM_STORE)
    return launch(gemm<GEMM_STORE>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy, trig);
  if (epi == GEMM_SILU)
    return launch(gemm<GEMM_SILU>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy, trig);
  return launch(gemm<GEMM_RESIDUAL>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy, trig);
}

bool norm_gemm_fits(int rows, int n, int k) {
  return (k == 64 || k == 128) && n % kBN == 0 && (int64_t)rows * n <= kSmallGemmOutputs;
}

int launch_norm_gemm(const float *x, const float *gain, const float *w, int rows, int n, int k,
                     int n0, float *y0, int ld0, float *y1, int ld1, int epi, cudaStream_t s,
                     bool pdl, int trig) {
  if (rows == 0)
    return 0;
  if (!norm_gemm_fits(rows, n, k) || epi == GEMM_RESIDUAL || misaligned(x) || misaligned(w))
    return (int)cudaErrorInvalidValue;
  if (!gain) /* the GEMM alone, on x as given */
    return epi == GEMM_STORE ? launch_tile<GEMM_STORE, false>(x, gain, w, rows, n, k, n0, y0, ld0,
                                                              y1, ld1, s, pdl, trig)
                             : launch_tile<GEMM_SILU, false>(x, gain, w, rows, n, k, n0, y0, ld0,
                                                             y1, ld1, s, pdl, trig);
  if (epi == GEMM_STORE)
    return launch_tile<GEMM_STORE, true>(x, gain, w, rows, n, k, n0, y0, ld0, y1, ld1, s, pdl,
                                         trig);
  return launch_tile<GEMM_SILU, true>(x, gain, w, rows, n, k, n0, y0, ld0, y1, ld1, s, pdl, trig);
}

int launch_attention(const float *q, const float *kv, const int32_t *cu, const int32_t *cu_padded,
                     int padded_sequences, int64_t row0, int rows, int heads, int d, float *out,
                     cudaStream_t s, bool pdl, int trig) {
  if (rows == 0)
    return 0;
  if (misaligned(q) || misaligned(kv) || padded_sequences < 1)
    return (int)cudaErrorInvalidValue;
  return launch(attention, dim3((unsigned)rows, (unsigned)heads), dim3(kAttnWarps * 32), 0, s, pdl,
                q, kv, cu, cu_padded, padded_sequences, row0, d, out, trig);
}

} // namespace cgrtk_cp_impl
