/*
 * decode_kernels.cu - the device side of the `decode` workload (decode.h): initialization and
 * staging of deterministic values, RMSNorm, RoPE, attention over the static KV cache, SwiGLU.
 *
 * Determinism: no atomics anywhere. Every reduction has a fixed shape: each thread folds a fixed,
 * strided subset of the elements in index order, a warp folds its lanes with an xor butterfly
 * (every lane ends with the same value: float addition is commutative), and the warps' results
 * are folded in warp order. Launch configurations depend only on the shapes, so the same call
 * gives the same bits eagerly and replayed from a graph. All kernels are row-independent: a row
 * (token) reads only its own values, the weights, the cache and, in attention, the keys and
 * values of earlier rows, so padding rows after the tokens never change the tokens' results.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "decode.h"

typedef __nv_bfloat16 bf16;

namespace {

constexpr int kThreads = 256;    /* element-wise and RMSNorm blocks */
constexpr int kMaxBlocks = 8192; /* grid-stride kernels: enough to fill any GPU */
constexpr int kHeadDim = CGRTK_DECODE_HEAD_DIM;
constexpr int kAttnThreads = 256;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kVecDims = 8; /* bf16 values in one 16-byte load */
constexpr int kAttnGroups = kAttnThreads / (kHeadDim / kVecDims); /* PV key groups: 32 */

static_assert(kHeadDim == 64, "the attention kernel assumes a head dimension of 64");

__device__ __forceinline__ float bf2f(bf16 v) {
  return __bfloat162float(v);
}

__device__ __forceinline__ bf16 f2bf(float v) {
  return __float2bfloat16_rn(v);
}

/* The 8 bf16 values of a 16-byte word, in memory order (element 0 in the low half). */
__device__ __forceinline__ void unpack8(uint4 r, float *f) {
  const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

/* Sum over the block in a fixed order; every thread gets the result. `red` holds one float per
 * warp and must not be reused by another reduction of the same kernel. */
__device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  if ((threadIdx.x & 31) == 0)
    red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < (int)(blockDim.x >> 5); w++)
    r += red[w];
  return r;
}

__device__ __forceinline__ float block_max(float v, float *red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  if ((threadIdx.x & 31) == 0)
    red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < (int)(blockDim.x >> 5); w++)
    r = fmaxf(r, red[w]);
  return r;
}

unsigned grid_for(uint64_t n) {
  uint64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1)
    b = 1;
  return (unsigned)(b > (uint64_t)kMaxBlocks ? kMaxBlocks : b);
}

/* dst[i] = cgrtk_decode_value(key, i, is_gain, scale). */
__global__ void init_values(bf16 *__restrict__ dst, uint64_t n, uint64_t key, int is_gain,
                            float scale) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    dst[i] = f2bf(cgrtk_decode_value(key, i, is_gain, scale));
}

/* Rows below `tokens`: the step's input; rows from `tokens` to `rows`: zero. */
__global__ void stage_input(bf16 *__restrict__ h, int d, int tokens, int rows, uint64_t key) {
  uint64_t n = (uint64_t)rows * d, valid = (uint64_t)tokens * d;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    h[i] = f2bf(i < valid ? cgrtk_decode_value(key, i, 0, 1.0f) : 0.0f);
}

/* One block per row: y = x / sqrt(mean(x^2) + eps) * gain. */
__global__ void __launch_bounds__(kThreads)
    rmsnorm(const bf16 *__restrict__ x, const bf16 *__restrict__ gain, bf16 *__restrict__ y,
            int d) {
  __shared__ float red[kThreads / 32];
  const bf16 *xr = x + (size_t)blockIdx.x * d;
  bf16 *yr = y + (size_t)blockIdx.x * d;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float v = bf2f(xr[c]);
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / (float)d + CGRTK_DECODE_RMS_EPS);
  for (int c = threadIdx.x; c < d; c += blockDim.x)
    yr[c] = f2bf(bf2f(xr[c]) * inv * bf2f(gain[c]));
}

/*
 * One block per row: rotate q and k of every head in place (the rotate-half form: dimension j
 * pairs with j + 32, angle = position * theta^(-2j/64)); the row's position is cache_len + row.
 */
__global__ void __launch_bounds__(kThreads)
    rope(bf16 *__restrict__ qkv, int heads, int cache_len, float log2_theta) {
  const int d = heads * kHeadDim, half = kHeadDim / 2;
  bf16 *row = qkv + (size_t)blockIdx.x * 3 * d;
  const float pos = (float)(cache_len + (int)blockIdx.x);
  for (int p = threadIdx.x; p < 2 * heads * half; p += blockDim.x) {
    const int j = p % half, head = (p / half) % heads, which = p / (heads * half); /* 0 q, 1 k */
    bf16 *v = row + which * d + head * kHeadDim;
    const float inv_freq = exp2f(-(float)(2 * j) / (float)kHeadDim * log2_theta);
    float s, c;
    sincosf(pos * inv_freq, &s, &c);
    const float x1 = bf2f(v[j]), x2 = bf2f(v[j + half]);
    v[j] = f2bf(x1 * c - x2 * s);
    v[j + half] = f2bf(x2 * c + x1 * s);
  }
}

/*
 * One block per (head, new token i): out[i, head] = softmax(q . K^T / 8) . V over the cache_len
 * cached positions and the new tokens 0..i. Three phases, each with a fixed order:
 *  1. scores: thread t takes keys t, t + 256, ...; each key's 64-dim dot product is one thread's
 *     sequential fma chain over eight 16-byte loads. Scores go to shared memory.
 *  2. softmax: block max, p = exp(s - max) in place, block sum of p.
 *  3. p . V: 8 threads cover one 64-dim value row (8 dims each), so 32 key groups; group g
 *     folds keys g, g + 32, ... in order, then the 32 partial vectors are added in group order.
 * Dynamic shared memory: (cache_len + rows) floats for the scores.
 */
__global__ void __launch_bounds__(kAttnThreads)
    attention(const bf16 *__restrict__ qkv, const bf16 *__restrict__ kcache,
              const bf16 *__restrict__ vcache, bf16 *__restrict__ out, int heads, int cache_len) {
  extern __shared__ float score[];
  __shared__ float q[kHeadDim];
  __shared__ float part[kAttnGroups][kHeadDim];
  __shared__ float red_max[kAttnWarps], red_sum[kAttnWarps];
  const int head = blockIdx.x, i = blockIdx.y, tid = threadIdx.x;
  const int d = heads * kHeadDim;
  const size_t ld = (size_t)3 * d; /* row stride of qkv */
  const int n = cache_len + i + 1;
  const float scale = 0.125f; /* 1/sqrt(64), a power of two: q * scale is exact */

  if (tid < kHeadDim)
    q[tid] = bf2f(qkv[i * ld + head * kHeadDim + tid]) * scale;
  __syncthreads();

  float mx = -INFINITY;
  for (int j = tid; j < n; j += kAttnThreads) {
    const bf16 *k = j < cache_len ? kcache + ((size_t)j * heads + head) * kHeadDim
                                  : qkv + (size_t)(j - cache_len) * ld + d + head * kHeadDim;
    const uint4 *k4 = (const uint4 *)k;
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < kHeadDim / kVecDims; c++) {
      float kv[kVecDims];
      unpack8(k4[c], kv);
#pragma unroll
      for (int e = 0; e < kVecDims; e++)
        s = fmaf(q[c * kVecDims + e], kv[e], s);
    }
    score[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red_max);

  float sum = 0.0f;
  for (int j = tid; j < n; j += kAttnThreads) {
    const float p = expf(score[j] - mx);
    score[j] = p;
    sum += p;
  }
  sum = block_sum(sum, red_sum); /* its barrier also publishes every score[j] */

  const int lane = tid % (kHeadDim / kVecDims), group = tid / (kHeadDim / kVecDims);
  float acc[kVecDims];
#pragma unroll
  for (int e = 0; e < kVecDims; e++)
    acc[e] = 0.0f;
#pragma unroll 4
  for (int j = group; j < n; j += kAttnGroups) {
    const bf16 *v = j < cache_len ? vcache + ((size_t)j * heads + head) * kHeadDim
                                  : qkv + (size_t)(j - cache_len) * ld + 2 * d + head * kHeadDim;
    float vv[kVecDims];
    unpack8(((const uint4 *)v)[lane], vv);
    const float p = score[j];
#pragma unroll
    for (int e = 0; e < kVecDims; e++)
      acc[e] = fmaf(p, vv[e], acc[e]);
  }
#pragma unroll
  for (int e = 0; e < kVecDims; e++)
    part[group][lane * kVecDims + e] = acc[e];
  __syncthreads();
  if (tid < kHeadDim) {
    float o = 0.0f;
    for (int g = 0; g < kAttnGroups; g++)
      o += part[g][tid];
    out[(size_t)i * d + head * kHeadDim + tid] = f2bf(o / sum);
  }
}

/* act[r, c] = silu(gate[r, c]) * up[r, c], gate_up rows being [gate (ffn) | up (ffn)]. */
__global__ void swiglu(const bf16 *__restrict__ gate_up, bf16 *__restrict__ act, int rows,
                       int ffn) {
  const uint64_t n = (uint64_t)rows * ffn;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t r = i / ffn, c = i % ffn;
    const float g = bf2f(gate_up[r * 2 * ffn + c]), u = bf2f(gate_up[r * 2 * ffn + ffn + c]);
    act[i] = f2bf(g / (1.0f + expf(-g)) * u);
  }
}

} // namespace

/* Launchers, declared in decode.cu. Each returns 0 or the launch's cudaError_t. */
namespace cgrtk_decode_impl {

int launch_init(bf16 *dst, uint64_t n, uint64_t key, int is_gain, float scale, cudaStream_t s) {
  if (n == 0)
    return 0;
  init_values<<<grid_for(n), kThreads, 0, s>>>(dst, n, key, is_gain, scale);
  return (int)cudaGetLastError();
}

int launch_stage(bf16 *h, int d, int tokens, int rows, uint64_t key, cudaStream_t s) {
  if (rows == 0)
    return 0;
  stage_input<<<grid_for((uint64_t)rows * d), kThreads, 0, s>>>(h, d, tokens, rows, key);
  return (int)cudaGetLastError();
}

int launch_rmsnorm(const bf16 *x, const bf16 *gain, bf16 *y, int rows, int d, cudaStream_t s) {
  rmsnorm<<<rows, kThreads, 0, s>>>(x, gain, y, d);
  return (int)cudaGetLastError();
}

int launch_rope(bf16 *qkv, int rows, int heads, int cache_len, cudaStream_t s) {
  rope<<<rows, kThreads, 0, s>>>(qkv, heads, cache_len, (float)log2(CGRTK_DECODE_ROPE_THETA));
  return (int)cudaGetLastError();
}

int launch_attention(const bf16 *qkv, const bf16 *kcache, const bf16 *vcache, bf16 *out, int rows,
                     int heads, int cache_len, cudaStream_t s) {
  /* The kernel reads keys and values with 16-byte loads. */
  if (((uintptr_t)qkv | (uintptr_t)kcache | (uintptr_t)vcache) & 15)
    return (int)cudaErrorMisalignedAddress;
  const size_t smem = (size_t)(cache_len + rows) * sizeof(float);
  attention<<<dim3((unsigned)heads, (unsigned)rows), kAttnThreads, smem, s>>>(
      qkv, kcache, vcache, out, heads, cache_len);
  return (int)cudaGetLastError();
}

int launch_swiglu(const bf16 *gate_up, bf16 *act, int rows, int ffn, cudaStream_t s) {
  swiglu<<<grid_for((uint64_t)rows * ffn), kThreads, 0, s>>>(gate_up, act, rows, ffn);
  return (int)cudaGetLastError();
}

} // namespace cgrtk_decode_impl
