/*
 * cp_kernels.cu - the device side of the `cp` workload (cp.h): initialization, staging, THD
 * metadata, RMSNorm, a tiled fp32 GEMM, and causal attention over packed sequences.
 *
 * Every kernel computes each output element in one fixed order that depends only on the data of
 * its own row (never on the row count, the grid or the rank), without atomics, so results are
 * bitwise reproducible eagerly, replayed, and at any cp size.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cp.h"
#include "cp_internal.h"

namespace cgrtk_cp_impl {
namespace {

constexpr int kThreads = 256;
constexpr int kNormWarps = 8;               /* rows per RMSNorm block, one warp each */
constexpr int kAttnWarps = 4;               /* rows per attention block (one head), one warp each */
constexpr int kBM = 64, kBN = 64, kBK = 16; /* GEMM tile; 256 threads, 4 x 4 outputs each */
constexpr unsigned kFull = 0xffffffffu;
/* Outputs up to which a GEMM runs one thread per element (gemm_small) rather than in tiles. */
constexpr int64_t kSmallGemmOutputs = 64 * 1024;

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
 * by 64 columns is two blocks) and each tile step pays a load latency and a barrier: one thread
 * per output element, reading its row of x and of w four values at a time. Each element is the
 * same fmaf chain over k = 0, 1, ..., k - 1 as in gemm(), so both give the same bits.
 */
template <int EPI>
__global__ void __launch_bounds__(256)
    gemm_small(const float *__restrict__ x, const float *__restrict__ w, float *y, int rows, int n,
               int k, int ldy) {
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

/*
 * One warp per (local row, head). The row's sequence is found in cu_padded (the last entry
 * <= its global row); a real row attends to the keys of that sequence from its first row up to
 * itself, in chunks of 32 starting at the sequence's first row: each lane scores one key of the
 * chunk (64 fmaf in order), the chunk's maximum and sum come from fixed butterflies, and the
 * values are accumulated key by key in order (lane l owns dims l and l + 32). Online softmax
 * across chunks. A padding row writes 0.
 */
__global__ void attention(const float *__restrict__ q, const float *__restrict__ kv,
                          const int32_t *__restrict__ cu, const int32_t *__restrict__ cu_padded,
                          int padded_sequences, int64_t row0, int rows, int d,
                          float *__restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int lr = blockIdx.x * kAttnWarps + (threadIdx.x >> 5);
  if (lr >= rows)
    return;
  const int h = blockIdx.y;
  const int64_t g = row0 + lr;
  int lo = 0, hi = padded_sequences - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if ((int64_t)cu_padded[mid] <= g)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t start = cu_padded[lo];
  const int64_t len = (int64_t)cu[lo + 1] - cu[lo];
  const int64_t pos = g - start;
  float *o = out + (size_t)lr * d + h * CGRTK_CP_HEAD_DIM;
  if (pos < 0 || pos >= len) {
    o[lane] = 0.0f;
    o[lane + 32] = 0.0f;
    return;
  }
  /* The query, scaled by 1/sqrt(64) = 1/8 (exact), in registers on every lane. */
  float qv[CGRTK_CP_HEAD_DIM];
  const float4 *qr = reinterpret_cast<const float4 *>(q + (size_t)lr * d + h * CGRTK_CP_HEAD_DIM);
#pragma unroll
  for (int e = 0; e < CGRTK_CP_HEAD_DIM / 4; e++) {
    const float4 t = qr[e];
    qv[4 * e + 0] = t.x * 0.125f;
    qv[4 * e + 1] = t.y * 0.125f;
    qv[4 * e + 2] = t.z * 0.125f;
    qv[4 * e + 3] = t.w * 0.125f;
  }
  const size_t ld = 2 * (size_t)d;
  const float *kbase = kv + h * CGRTK_CP_HEAD_DIM;
  const float *vbase = kv + d + h * CGRTK_CP_HEAD_DIM;
  float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  for (int64_t base = start; base <= g; base += 32) {
    const int64_t j = base + lane;
    const bool valid = j <= g;
    float s = -INFINITY;
    if (valid) {
      const float4 *kr = reinterpret_cast<const float4 *>(kbase + (size_t)j * ld);
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < CGRTK_CP_HEAD_DIM / 4; e++) {
        const float4 t = kr[e];
        dot = fmaf(qv[4 * e + 0], t.x, dot);
        dot = fmaf(qv[4 * e + 1], t.y, dot);
        dot = fmaf(qv[4 * e + 2], t.z, dot);
        dot = fmaf(qv[4 * e + 3], t.w, dot);
      }
      s = dot;
    }
    float cmax = s;
    for (int off = 16; off > 0; off >>= 1)
      cmax = fmaxf(cmax, __shfl_xor_sync(kFull, cmax, off));
    const float mnew = fmaxf(m, cmax); /* finite: lane 0's key (base <= g) is valid */
    const float p = valid ? expf(s - mnew) : 0.0f;
    const float corr = expf(m - mnew); /* 0 on the first chunk (m = -inf) */
    float psum = p;
    for (int off = 16; off > 0; off >>= 1)
      psum += __shfl_xor_sync(kFull, psum, off);
    l = l * corr + psum;
    acc0 *= corr;
    acc1 *= corr;
    const int cnt = (int)(g - base + 1 < 32 ? g - base + 1 : 32); /* the same on every lane */
    for (int t = 0; t < cnt; t++) {
      const float pt = __shfl_sync(kFull, p, t);
      const float *vr = vbase + (size_t)(base + t) * ld;
      acc0 = fmaf(pt, vr[lane], acc0);
      acc1 = fmaf(pt, vr[lane + 32], acc1);
    }
    m = mnew;
  }
  o[lane] = acc0 / l;
  o[lane + 32] = acc1 / l;
}

bool misaligned(const void *p) {
  return ((uintptr_t)p & 15) != 0;
}

} // namespace

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

int launch_rmsnorm(const float *x, const float *gain, float *y, int rows, int d, cudaStream_t s) {
  if (rows == 0)
    return 0;
  const unsigned blocks = (unsigned)((rows + kNormWarps - 1) / kNormWarps);
  rmsnorm<<<blocks, kNormWarps * 32, 0, s>>>(x, gain, y, rows, d);
  return (int)cudaGetLastError();
}

int launch_gemm(const float *x, const float *w, float *y, int rows, int n, int k, int ldy, int epi,
                cudaStream_t s) {
  if (rows == 0)
    return 0;
  if (n % kBN != 0 || k % kBK != 0 || misaligned(x) || misaligned(w))
    return (int)cudaErrorInvalidValue;
  /* Small products (the launch-bound shape: 128 rows, d 64) go one thread per element. */
  const int64_t outputs = (int64_t)rows * n;
  if (outputs <= kSmallGemmOutputs) {
    const unsigned blocks = (unsigned)((outputs + kThreads - 1) / kThreads);
    if (epi == GEMM_STORE)
      gemm_small<GEMM_STORE><<<blocks, kThreads, 0, s>>>(x, w, y, rows, n, k, ldy);
    else if (epi == GEMM_SILU)
      gemm_small<GEMM_SILU><<<blocks, kThreads, 0, s>>>(x, w, y, rows, n, k, ldy);
    else
      gemm_small<GEMM_RESIDUAL><<<blocks, kThreads, 0, s>>>(x, w, y, rows, n, k, ldy);
    return (int)cudaGetLastError();
  }
  const dim3 grid((unsigned)(n / kBN), (unsigned)((rows + kBM - 1) / kBM));
  if (epi == GEMM_STORE)
    gemm<GEMM_STORE><<<grid, 256, 0, s>>>(x, w, y, rows, n, k, ldy);
  else if (epi == GEMM_SILU)
    gemm<GEMM_SILU><<<grid, 256, 0, s>>>(x, w, y, rows, n, k, ldy);
  else
    gemm<GEMM_RESIDUAL><<<grid, 256, 0, s>>>(x, w, y, rows, n, k, ldy);
  return (int)cudaGetLastError();
}

int launch_attention(const float *q, const float *kv, const int32_t *cu, const int32_t *cu_padded,
                     int padded_sequences, int64_t row0, int rows, int heads, int d, float *out,
                     cudaStream_t s) {
  if (rows == 0)
    return 0;
  if (misaligned(q) || misaligned(kv) || padded_sequences < 1)
    return (int)cudaErrorInvalidValue;
  const dim3 grid((unsigned)((rows + kAttnWarps - 1) / kAttnWarps), (unsigned)heads);
  attention<<<grid, kAttnWarps * 32, 0, s>>>(q, kv, cu, cu_padded, padded_sequences, row0, rows, d,
                                             out);
  return (int)cudaGetLastError();
}

} // namespace cgrtk_cp_impl
