/*
 * cp_kernels.cu - the device side of the `cp` workload (cp.h): initialization, staging, THD
 * metadata, RMSNorm, a tiled fp32 GEMM, and causal attention over packed sequences.
 *
 * Every kernel computes each output element in one fixed order that depends only on the data of
 * its own row (never on the row count, the grid or the rank), without atomics, so results are
 * bitwise reproducible eagerly, replayed, and at any cp size.
 *
 * Programmatic dependent launch (sm_90+, as in decode_kernels.cu): the kernels of one module call
 * after its first are launched with the programmatic-serialization attribute (cp.cu decides).
 * Every step kernel lets its dependents launch early (griddepcontrol.launch_dependents) and
 * waits for its predecessor (griddepcontrol.wait) before it reads anything a kernel of the call
 * writes and before it writes anything; before the wait it reads only what no kernel of the call
 * writes (weights, THD metadata). Launched without the attribute both are no-ops.
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
constexpr int kAttnWarps = 4;               /* warps per attention block (one row, one head) */
constexpr int kBM = 64, kBN = 64, kBK = 16; /* GEMM tile; 256 threads, 4 x 4 outputs each */
constexpr unsigned kFull = 0xffffffffu;
/* Outputs up to which a GEMM runs one thread per element (gemm_small) rather than in tiles. */
constexpr int64_t kSmallGemmOutputs = 64 * 1024;

using cgrtk_launch::launch;
using cgrtk_launch::pdl_trigger;
using cgrtk_launch::pdl_wait;

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
                        float *__restrict__ y, int rows, int d) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kNormWarps + (threadIdx.x >> 5);
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
  for (int c = lane; c < d; c += 32)
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
         int ldy) {
  pdl_trigger();
  pdl_wait();
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
               int k, int ldy) {
  pdl_trigger();
  pdl_wait();
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

constexpr int kT = 16; /* gemm_tile: 16 x 16 outputs a block, one a thread */

/*
 * Small GEMMs with k = K (64 or 128): a block computes 16 rows x 16 columns, with its 16 rows of
 * w (read before the wait for the predecessor: weights) and of x (after it) in shared memory,
 * each loaded once and coalesced, so a kernel costs about one memory latency. NORM: x is the
 * un-normalized input and the block applies RMSNorm (gain) to its rows first, forming each row's
 * sum of squares exactly as rmsnorm() does (lane-strided partial sums, then the butterfly) and
 * each value as x * inv * gain, so the result is bitwise that of rmsnorm() then the GEMM. Each
 * output is the fmaf chain over k = 0, ..., K - 1 of gemm(). Columns below n0 go to y0 (row
 * stride ld0), the others to y1 (column c - n0, row stride ld1): one launch writes Q and K/V.
 */
template <int EPI, int K, bool NORM>
__global__ void __launch_bounds__(kT *kT)
    gemm_tile(const float *__restrict__ x, const float *__restrict__ gain,
              const float *__restrict__ w, int rows, int n0, float *y0, int ld0, float *y1,
              int ld1) {
  __shared__ float xs[kT][K + 1], ws[kT][K + 1];
  pdl_trigger();
  const int tid = threadIdx.x, tx = tid % kT, ty = tid / kT;
  const int r0 = blockIdx.y * kT, c0 = blockIdx.x * kT;
  constexpr int kVec = kT * K / 4; /* float4 loads of one 16-row tile */
#pragma unroll
  for (int i = tid; i < kVec; i += kT * kT) {
    const int row = i / (K / 4), q = i % (K / 4);
    const float4 v = reinterpret_cast<const float4 *>(w + (size_t)(c0 + row) * K)[q];
    ws[row][4 * q] = v.x;
    ws[row][4 * q + 1] = v.y;
    ws[row][4 * q + 2] = v.z;
    ws[row][4 * q + 3] = v.w;
  }
  pdl_wait();
#pragma unroll
  for (int i = tid; i < kVec; i += kT * kT) {
    const int row = i / (K / 4), q = i % (K / 4);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + row < rows)
      v = reinterpret_cast<const float4 *>(x + (size_t)(r0 + row) * K)[q];
    xs[row][4 * q] = v.x;
    xs[row][4 * q + 1] = v.y;
    xs[row][4 * q + 2] = v.z;
    xs[row][4 * q + 3] = v.w;
  }
  __syncthreads();
  if (NORM) {
    const int lane = tid & 31, warp = tid >> 5;
    for (int row = warp; row < kT; row += kT * kT / 32) {
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
  float acc = 0.0f;
#pragma unroll
  for (int kk = 0; kk < K; kk++)
    acc = fmaf(xs[ty][kk], ws[tx][kk], acc);
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

template <int EPI, bool NORM>
int launch_tile(const float *x, const float *gain, const float *w, int rows, int n, int k, int n0,
                float *y0, int ld0, float *y1, int ld1, cudaStream_t s, bool pdl) {
  const dim3 grid((unsigned)(n / kT), (unsigned)((rows + kT - 1) / kT)), block(kT * kT);
  if (k == 64)
    return launch(gemm_tile<EPI, 64, NORM>, grid, block, 0, s, pdl, x, gain, w, rows, n0, y0, ld0,
                  y1, ld1);
  return launch(gemm_tile<EPI, 128, NORM>, grid, block, 0, s, pdl, x, gain, w, rows, n0, y0, ld0,
                y1, ld1);
}

/*
 * One block of kAttnWarps warps per (local row, head). The row's sequence is the last entry of
 * cu_padded <= its global row (counted by the whole block in one pass: the entries are
 * nondecreasing); a real row attends to the keys of that sequence from its first row up to
 * itself, in chunks of 32 keys starting at the sequence's first row. Warp w takes chunks w,
 * w + kAttnWarps, ... in order: each lane scores one key of the chunk (64 fmaf in order), the
 * chunk's maximum and sum come from fixed butterflies, and the values are accumulated key by key
 * in order (lane l owns dims l and l + 32), online across the warp's chunks. The warps' partial
 * results are then combined in warp order. Every step depends only on the row's own sequence, so
 * the bits do not depend on the row count, the grid or the rank. A padding row writes 0.
 *
 * The chains are short: a row of up to 128 keys is one chunk per warp, and every load a lane
 * needs for its chunk (its key's row, the chunk's 32 value rows) is issued before the arithmetic
 * that uses it, so a row costs a few memory latencies rather than one per key.
 */
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention(const float *__restrict__ q, const float *__restrict__ kv,
              const int32_t *__restrict__ cu, const int32_t *__restrict__ cu_padded,
              int padded_sequences, int64_t row0, int d, float *__restrict__ out) {
  __shared__ float part_m[kAttnWarps], part_l[kAttnWarps];
  __shared__ float part_acc[kAttnWarps][CGRTK_CP_HEAD_DIM];
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int lr = blockIdx.x, h = blockIdx.y;
  const int64_t g = row0 + lr;
  int below = 0; /* entries of cu_padded <= g */
  for (int base = 0; base < padded_sequences; base += kAttnWarps * 32) {
    const int i = base + (int)threadIdx.x;
    below += __syncthreads_count(i < padded_sequences && (int64_t)cu_padded[i] <= g);
  }
  const int seq = below > 0 ? below - 1 : 0;
  const int64_t start = cu_padded[seq];
  const int64_t len = (int64_t)cu[seq + 1] - cu[seq];
  const int64_t pos = g - start;
  float *o = out + (size_t)lr * d + h * CGRTK_CP_HEAD_DIM;
  pdl_wait(); /* the THD metadata above is not written by the call's kernels; q and kv are */
  if (pos < 0 || pos >= len) { /* the same on the whole block */
    if (warp == 0) {
      o[lane] = 0.0f;
      o[lane + 32] = 0.0f;
    }
    return;
  }
  const size_t ld = 2 * (size_t)d;
  const float *kbase = kv + h * CGRTK_CP_HEAD_DIM;
  const float *vbase = kv + d + h * CGRTK_CP_HEAD_DIM;
  const float4 *qr = reinterpret_cast<const float4 *>(q + (size_t)lr * d + h * CGRTK_CP_HEAD_DIM);
  float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  for (int64_t base = start + 32 * (int64_t)warp; base <= g; base += 32 * kAttnWarps) {
    const int64_t j = base + lane;
    const bool valid = j <= g;
    const int cnt = (int)(g - base + 1 < 32 ? g - base + 1 : 32); /* the same on every lane */
    /* Every load of the chunk first: this lane's key row, then the values of its dims. */
    float4 kr[CGRTK_CP_HEAD_DIM / 4];
    const float4 *krow = reinterpret_cast<const float4 *>(kbase + (size_t)(valid ? j : base) * ld);
#pragma unroll
    for (int e = 0; e < CGRTK_CP_HEAD_DIM / 4; e++)
      kr[e] = krow[e];
    float v0[32], v1[32];
#pragma unroll
    for (int t = 0; t < 32; t++) {
      const float *vr = vbase + (size_t)(base + (t < cnt ? t : 0)) * ld;
      v0[t] = vr[lane];
      v1[t] = vr[lane + 32];
    }
    /* The score of this lane's key, with the query scaled by 1/sqrt(64) = 1/8 (exact). */
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < CGRTK_CP_HEAD_DIM / 4; e++) {
      const float4 qv = qr[e];
      dot = fmaf(qv.x * 0.125f, kr[e].x, dot);
      dot = fmaf(qv.y * 0.125f, kr[e].y, dot);
      dot = fmaf(qv.z * 0.125f, kr[e].z, dot);
      dot = fmaf(qv.w * 0.125f, kr[e].w, dot);
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
        acc0 = fmaf(pt, v0[t], acc0);
        acc1 = fmaf(pt, v1[t], acc1);
      }
    }
    m = mnew;
  }
  /* Combine the warps' results in warp order (a warp without a chunk has l = 0). */
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
  }
  part_acc[warp][lane] = acc0;
  part_acc[warp][lane + 32] = acc1;
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
    lt = fmaf(part_l[w], c, lt);
    a0 = fmaf(part_acc[w][lane], c, a0);
    a1 = fmaf(part_acc[w][lane + 32], c, a1);
  }
  o[lane] = a0 / lt;
  o[lane + 32] = a1 / lt;
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
                   bool pdl) {
  if (rows == 0)
    return 0;
  const unsigned blocks = (unsigned)((rows + kNormWarps - 1) / kNormWarps);
  return launch(rmsnorm, dim3(blocks), dim3(kNormWarps * 32), 0, s, pdl, x, gain, y, rows, d);
}

int launch_gemm(const float *x, const float *w, float *y, int rows, int n, int k, int ldy, int epi,
                cudaStream_t s, bool pdl) {
  if (rows == 0)
    return 0;
  if (n % kBN != 0 || k % kBK != 0 || misaligned(x) || misaligned(w))
    return (int)cudaErrorInvalidValue;
  /* Small products (the launch-bound shape: 128 rows, d 64): 16 x 16 tiles, or one thread per
     element for other k. */
  if ((int64_t)rows * n <= kSmallGemmOutputs) {
    if (k == 64 || k == 128) {
      if (epi == GEMM_STORE)
        return launch_tile<GEMM_STORE, false>(x, nullptr, w, rows, n, k, n, y, ldy, y, ldy, s, pdl);
      if (epi == GEMM_SILU)
        return launch_tile<GEMM_SILU, false>(x, nullptr, w, rows, n, k, n, y, ldy, y, ldy, s, pdl);
      return launch_tile<GEMM_RESIDUAL, false>(x, nullptr, w, rows, n, k, n, y, ldy, y, ldy, s,
                                               pdl);
    }
    const int64_t outputs = (int64_t)rows * n;
    const dim3 grid((unsigned)((outputs + kThreads - 1) / kThreads)), block(kThreads);
    if (epi == GEMM_STORE)
      return launch(gemm_small<GEMM_STORE>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy);
    if (epi == GEMM_SILU)
      return launch(gemm_small<GEMM_SILU>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy);
    return launch(gemm_small<GEMM_RESIDUAL>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy);
  }
  const dim3 grid((unsigned)(n / kBN), (unsigned)((rows + kBM - 1) / kBM)), block(256);
  if (epi == GEMM_STORE)
    return launch(gemm<GEMM_STORE>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy);
  if (epi == GEMM_SILU)
    return launch(gemm<GEMM_SILU>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy);
  return launch(gemm<GEMM_RESIDUAL>, grid, block, 0, s, pdl, x, w, y, rows, n, k, ldy);
}

bool norm_gemm_fits(int rows, int n, int k) {
  return (k == 64 || k == 128) && n % kBN == 0 && (int64_t)rows * n <= kSmallGemmOutputs;
}

int launch_norm_gemm(const float *x, const float *gain, const float *w, int rows, int n, int k,
                     int n0, float *y0, int ld0, float *y1, int ld1, int epi, cudaStream_t s,
                     bool pdl) {
  if (rows == 0)
    return 0;
  if (!norm_gemm_fits(rows, n, k) || epi == GEMM_RESIDUAL || misaligned(x) || misaligned(w))
    return (int)cudaErrorInvalidValue;
  if (epi == GEMM_STORE)
    return launch_tile<GEMM_STORE, true>(x, gain, w, rows, n, k, n0, y0, ld0, y1, ld1, s, pdl);
  return launch_tile<GEMM_SILU, true>(x, gain, w, rows, n, k, n0, y0, ld0, y1, ld1, s, pdl);
}

int launch_attention(const float *q, const float *kv, const int32_t *cu, const int32_t *cu_padded,
                     int padded_sequences, int64_t row0, int rows, int heads, int d, float *out,
                     cudaStream_t s, bool pdl) {
  if (rows == 0)
    return 0;
  if (misaligned(q) || misaligned(kv) || padded_sequences < 1)
    return (int)cudaErrorInvalidValue;
  return launch(attention, dim3((unsigned)rows, (unsigned)heads), dim3(kAttnWarps * 32), 0, s, pdl,
                q, kv, cu, cu_padded, padded_sequences, row0, d, out);
}

} // namespace cgrtk_cp_impl
