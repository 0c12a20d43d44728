/*
 * decode_kernels.cu - the device side of the `decode` workload (decode.h): initialization and
 * staging of deterministic values, RMSNorm, RoPE, attention over the static KV cache, SwiGLU, and
 * the small-row GEMV kernels (RMSNorm, RoPE, SwiGLU and the residual add fused in).
 *
 * Determinism: no atomics anywhere. Every reduction has a fixed shape: each lane folds a fixed,
 * strided subset of the elements in index order, a warp folds its lanes with an xor butterfly
 * (every lane ends with the same value: float addition is commutative) or a fixed butterfly
 * reduce-scatter, and the warps' results are folded in warp order. Epilogue arithmetic uses the
 * explicit round-to-nearest intrinsics (__fmul_rn, ...), so no fused multiply-add is formed
 * differently in different template instances. Launch configurations depend only on the shapes,
 * so the same call gives the same bits eagerly and replayed from a graph. All kernels are
 * row-independent: a row (token) reads only its own values, the weights, the cache and, in
 * attention, the keys and values of earlier rows, so padding rows after the tokens never change
 * the tokens' results (the GEMV kernels even give the same bits for a row at any row count).
 *
 * Programmatic dependent launch (sm_90+): every kernel lets its dependents launch early
 * (griddepcontrol.launch_dependents) and waits for its own predecessor (griddepcontrol.wait)
 * before it reads anything a predecessor may write and before it writes anything. Before the
 * wait a kernel only prefetches constant data (weights, the KV cache) into L2. Launched without
 * the programmatic attribute both instructions are no-ops; below sm_90 they are compiled out.
 */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "decode.h"
#include "launch_common.cuh"

typedef __nv_bfloat16 bf16;
namespace cg = cooperative_groups;

namespace {

using cgrtk_launch::launch;
using cgrtk_launch::pdl_trigger;
using cgrtk_launch::pdl_wait;

constexpr int kThreads = 256;    /* element-wise blocks */
constexpr int kMaxBlocks = 8192; /* grid-stride kernels: enough to fill any GPU */
constexpr int kHeadDim = CGRTK_DECODE_HEAD_DIM;
constexpr int kHalf = kHeadDim / 2; /* RoPE pairs per head */
constexpr int kVecDims = 8;         /* bf16 values in one 16-byte load */
constexpr int kNormWarps = 8;       /* rows per RMSNorm block (one warp per row) */
constexpr int kAttnWarps = 8;       /* attention: warps per (head, token) block */
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kTileKeys = 32; /* attention: keys one warp handles per step */
constexpr int kAttnSplit = 4; /* attention at rows <= kSplitRows: blocks per (head, token) */
constexpr int kSplitRows = CGRTK_DECODE_GEMV_ROWS;
constexpr int kGemvWarps = 8; /* GEMV: warps per block, one task per warp at a time */
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int kLine = 128; /* bytes per L2 prefetch */

static_assert(kHeadDim == 64, "the attention kernel assumes a head dimension of 64");
static_assert(CGRTK_DECODE_GEMV_ROWS <= kGemvWarps, "one warp normalizes one row");

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

/* Two floats rounded to bf16, `lo` in the low half (the first in memory). */
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  return (unsigned)__bfloat16_as_ushort(f2bf(lo)) |
         ((unsigned)__bfloat16_as_ushort(f2bf(hi)) << 16);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

/* Thread block clusters (sm_90+; the host launches clusters only for an sm_90+ binary). */
__device__ __forceinline__ int cluster_rank() {
#if defined(_CG_HAS_CLUSTER_GROUP)
  return (int)cg::this_cluster().block_rank();
#else
  return 0;
#endif
}

__device__ __forceinline__ void cluster_sync() {
#if defined(_CG_HAS_CLUSTER_GROUP)
  cg::this_cluster().sync();
#else
  __syncthreads();
#endif
}

/* The address of *p in the shared memory of block `rank` of the cluster. */
template <typename T> __device__ __forceinline__ T *cluster_map(T *p, int rank) {
#if defined(_CG_HAS_CLUSTER_GROUP)
  return cg::this_cluster().map_shared_rank(p, rank);
#else
  (void)rank;
  return p;
#endif
}

/* A hint: bring the line holding p into L2. Never faults on a valid address; changes no value. */
__device__ __forceinline__ void prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"((unsigned long long)__cvta_generic_to_global(p)));
}

/* Prefetch every line of [p, p + bytes) into L2; thread i of n takes lines i, i + n, ... */
__device__ __forceinline__ void prefetch_range(const void *p, size_t bytes, size_t i, size_t n) {
  if (!p || bytes == 0)
    return;
  const uintptr_t first = (uintptr_t)p & ~(uintptr_t)(kLine - 1), end = (uintptr_t)p + bytes;
  for (uintptr_t a = first + i * kLine; a < end; a += n * kLine)
    prefetch_l2((const void *)a);
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

/*
 * RMSNorm of one row (d a multiple of 8) by one warp: dst = bf16(x * inv * gain) with
 * inv = 1/sqrt(mean(x^2) + eps), 8 values per 16-byte word. Lane l folds the squares of words
 * l, l + 32, ... in order, then the xor butterfly. dst may be shared or global memory. The GEMV
 * prologue and the standalone kernel share this, so both paths normalize to the same bits.
 */
__device__ __forceinline__ void rms_row(const bf16 *x, const bf16 *__restrict__ gain, int d,
                                        int lane, uint4 *dst) {
  const uint4 *x4 = (const uint4 *)x, *g4 = (const uint4 *)gain;
  const int words = d / kVecDims;
  float ss = 0.0f;
  for (int c = lane; c < words; c += 32) {
    float f[kVecDims];
    unpack8(x4[c], f);
#pragma unroll
    for (int e = 0; e < kVecDims; e++)
      ss = fmaf(f[e], f[e], ss);
  }
  ss = warp_sum(ss);
  const float inv = rsqrtf(__fadd_rn(__fdiv_rn(ss, (float)d), CGRTK_DECODE_RMS_EPS));
  for (int c = lane; c < words; c += 32) {
    float f[kVecDims], g[kVecDims], o[kVecDims];
    unpack8(x4[c], f);
    unpack8(g4[c], g);
#pragma unroll
    for (int e = 0; e < kVecDims; e++)
      o[e] = __fmul_rn(__fmul_rn(f[e], inv), g[e]);
    dst[c] = make_uint4(pack2(o[0], o[1]), pack2(o[2], o[3]), pack2(o[4], o[5]), pack2(o[6], o[7]));
  }
}

/* One warp per row, kNormWarps rows per block. */
__global__ void __launch_bounds__(kNormWarps * 32)
    rmsnorm(const bf16 *__restrict__ x, const bf16 *__restrict__ gain, bf16 *__restrict__ y,
            int rows, int d) {
  pdl_trigger();
  pdl_wait();
  const int r = blockIdx.x * kNormWarps + (int)(threadIdx.x >> 5);
  if (r < rows)
    rms_row(x + (size_t)r * d, gain, d, threadIdx.x & 31, (uint4 *)(y + (size_t)r * d));
}

/*
 * Rotate q and k of every head in place (the rotate-half form: dimension j pairs with j + 32,
 * angle = position * theta^(-2j/64), position cache_len + row), one thread per pair. rope holds
 * (cos, sin) per (row, j), computed on the host in double (decode.cu).
 */
__global__ void __launch_bounds__(kThreads)
    rope_kernel(bf16 *__restrict__ qkv, const float2 *__restrict__ rope, int rows, int heads) {
  pdl_trigger();
  pdl_wait();
  const int d = heads * kHeadDim;
  const int64_t total = (int64_t)rows * 2 * heads * kHalf;
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < total;
       p += (int64_t)gridDim.x * blockDim.x) {
    const int j = (int)(p % kHalf);
    const int64_t rest = p / kHalf;
    const int hq = (int)(rest % (2 * heads)); /* q heads, then k heads: contiguous in the row */
    const int64_t r = rest / (2 * heads);
    bf16 *v = qkv + r * 3 * d + (int64_t)hq * kHeadDim;
    const float2 cs = rope[r * kHalf + j];
    const float x1 = bf2f(v[j]), x2 = bf2f(v[j + kHalf]);
    v[j] = f2bf(__fsub_rn(__fmul_rn(x1, cs.x), __fmul_rn(x2, cs.y)));
    v[j + kHalf] = f2bf(__fadd_rn(__fmul_rn(x2, cs.x), __fmul_rn(x1, cs.y)));
  }
}

/*
 * S blocks (a cluster of S when S > 1) per (head, new token i): out[i, head] = softmax(q . K^T
 * / 8) . V over the cache_len cached positions and the new tokens 0..i, q and k already rotated.
 * Grid (heads * S, rows); block rank r of the cluster of (head, i) owns warps r*8 .. r*8+7.
 *
 * The n = cache_len + i + 1 keys are cut into tiles of 32; warp g (of S*8) takes tiles g, g +
 * S*8, ... and keeps an online softmax (running max m, sum l, 64 weighted value sums). In a tile,
 * lane (kk = lane / 8, dc = lane % 8) loads 16 bytes (dims dc*8 .. dc*8+7) of keys 4u + kk, u =
 * 0..7: every load instruction reads four whole 128-byte key rows. Its 8 partial dot products are
 * summed over the 8 lanes of its group by a fixed butterfly reduce-scatter, after which lane
 * (kk, dc) holds the score of key 4*dc + kk. Values are loaded like keys, and each lane takes
 * the probabilities it needs from the owning lanes by shuffles; the 4 groups' partial sums are
 * folded by an xor butterfly at the end. Every warp leaves (m, l, sums) in its block's shared
 * memory; after a cluster barrier, block 0 of the cluster combines the S*8 warps' results in
 * order (block rank, then warp), reading the other blocks' shared memory, and a second barrier
 * keeps that memory alive until it is done. No shared memory proportional to the key count.
 *
 * prefetch (set when launched programmatically): before waiting for the predecessor, the blocks
 * of token 0 of each head pull that head's cached keys and values into L2. qkv is written by the
 * predecessor while this grid may already run, so nothing here is declared __restrict__: every
 * load is a plain coherent one (no read-only-cache loads), issued after the wait.
 */
template <int S>
__global__ void __launch_bounds__(kAttnThreads, 2)
    attention(const bf16 *qkv, const bf16 *kcache, const bf16 *vcache, bf16 *out, int heads,
              int cache_len, int prefetch) {
  __shared__ float part[kAttnWarps][kHeadDim];
  __shared__ float wm[kAttnWarps], wl[kAttnWarps];
  const int rank = S > 1 ? cluster_rank() : 0;
  const int head = blockIdx.x / S, i = blockIdx.y, tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5, kk = lane >> 3, dc = lane & 7;
  const int d = heads * kHeadDim;
  const size_t ld = (size_t)3 * d; /* row stride of qkv */
  const int n = cache_len + i + 1;

  pdl_trigger();
  if (prefetch && i == 0)
    for (int j = rank * kAttnThreads + tid; j < cache_len; j += S * kAttnThreads) {
      prefetch_l2(kcache + ((size_t)j * heads + head) * kHeadDim);
      prefetch_l2(vcache + ((size_t)j * heads + head) * kHeadDim);
    }
  pdl_wait();

  /* This lane's 8 dims of q, times 1/sqrt(64) = 0.125 (a power of two: exact). */
  float q[kVecDims];
  unpack8(((const uint4 *)(qkv + (size_t)i * ld + head * kHeadDim))[dc], q);
#pragma unroll
  for (int e = 0; e < kVecDims; e++)
    q[e] *= 0.125f;

  float m = -INFINITY, l = 0.0f, acc[kVecDims];
#pragma unroll
  for (int e = 0; e < kVecDims; e++)
    acc[e] = 0.0f;

  for (int base = (rank * kAttnWarps + warp) * kTileKeys; base < n;
       base += S * kAttnWarps * kTileKeys) {
    /* 16 loads in flight per lane. Keys past n load key n - 1 again: their scores are masked
     * to -inf below, so their probability is exactly 0 and their (finite) values add 0. */
    uint4 kw[8], vw[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int j = min(base + 4 * u + kk, n - 1);
      const bool cached = j < cache_len;
      const size_t off = cached ? ((size_t)j * heads + head) * kHeadDim
                                : (size_t)(j - cache_len) * ld + d + head * kHeadDim;
      const bf16 *k = (cached ? kcache : qkv) + off, *v = (cached ? vcache : qkv + d) + off;
      kw[u] = ((const uint4 *)k)[dc];
      vw[u] = ((const uint4 *)v)[dc];
    }
    /* Partial dot products over this lane's 8 dims, key 4u + kk. */
    float s[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      float kf[kVecDims];
      unpack8(kw[u], kf);
      float t = 0.0f;
#pragma unroll
      for (int e = 0; e < kVecDims; e++)
        t = fmaf(q[e], kf[e], t);
      s[u] = t;
    }
    /* Reduce-scatter over the 8 lanes of the group: lane dc ends with the sum of s[dc]. */
    {
      const bool b2 = dc & 4, b1 = dc & 2, b0 = dc & 1;
      float s1[4], s2[2];
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float keep = b2 ? s[k + 4] : s[k], send = b2 ? s[k] : s[k + 4];
        s1[k] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, 4);
      }
#pragma unroll
      for (int k = 0; k < 2; k++) {
        const float keep = b1 ? s1[k + 2] : s1[k], send = b1 ? s1[k] : s1[k + 2];
        s2[k] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, 2);
      }
      const float keep = b0 ? s2[1] : s2[0], send = b0 ? s2[0] : s2[1];
      s[0] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, 1);
    }
    const float score = base + 4 * dc + kk < n ? s[0] : -INFINITY;
    const float m_new = fmaxf(m, warp_max(score)); /* finite: key `base` is valid */
    const float alpha = expf(m - m_new);           /* 0 on the first tile (m = -inf) */
    const float p = expf(score - m_new);           /* 0 for masked keys */
    l = fmaf(l, alpha, p);
#pragma unroll
    for (int e = 0; e < kVecDims; e++)
      acc[e] *= alpha;
#pragma unroll
    for (int u = 0; u < 8; u++) {
      /* Key 4u + kk: its probability sits in lane kk * 8 + u. */
      const float pu = __shfl_sync(0xFFFFFFFFu, p, (lane & 24) | u);
      float vf[kVecDims];
      unpack8(vw[u], vf);
#pragma unroll
      for (int e = 0; e < kVecDims; e++)
        acc[e] = fmaf(pu, vf[e], acc[e]);
    }
    m = m_new;
  }
  l = warp_sum(l);
#pragma unroll
  for (int e = 0; e < kVecDims; e++) {
    acc[e] += __shfl_xor_sync(0xFFFFFFFFu, acc[e], 8);
    acc[e] += __shfl_xor_sync(0xFFFFFFFFu, acc[e], 16);
  }
  if (lane < 8) /* kk = 0: dims lane*8 .. lane*8+7 */
#pragma unroll
    for (int e = 0; e < kVecDims; e++)
      part[warp][lane * kVecDims + e] = acc[e];
  if (lane == 0) {
    wm[warp] = m; /* -inf and l = 0 for a warp without keys */
    wl[warp] = l;
  }
  if (S > 1)
    cluster_sync(); /* also a block barrier; publishes shared memory to the cluster */
  else
    __syncthreads();
  if (rank == 0 && tid < kHeadDim) {
    float mx = -INFINITY;
    for (int r = 0; r < S; r++) {
      const float *rm = S > 1 ? cluster_map(wm, r) : wm;
      for (int w = 0; w < kAttnWarps; w++)
        mx = fmaxf(mx, rm[w]);
    }
    float sum = 0.0f, o = 0.0f;
    for (int r = 0; r < S; r++) {
      const float *rm = S > 1 ? cluster_map(wm, r) : wm, *rl = S > 1 ? cluster_map(wl, r) : wl;
      const float *rp = S > 1 ? cluster_map(&part[0][0], r) : &part[0][0];
      for (int w = 0; w < kAttnWarps; w++) {
        const float f = expf(rm[w] - mx); /* 0 for a warp without keys */
        sum = fmaf(rl[w], f, sum);
        o = fmaf(rp[w * kHeadDim + tid], f, o);
      }
    }
    out[(size_t)i * d + head * kHeadDim + tid] = f2bf(__fdiv_rn(o, sum));
  }
  if (S > 1)
    cluster_sync(); /* the other blocks' shared memory stays until block 0 has read it */
}

__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

/* act[r, c] = silu(gate[r, c]) * up[r, c], gate_up rows being [gate (ffn) | up (ffn)]. */
__global__ void swiglu(const bf16 *__restrict__ gate_up, bf16 *__restrict__ act, int rows,
                       int ffn) {
  const uint64_t n = (uint64_t)rows * ffn;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t r = i / ffn, c = i % ffn;
    act[i] = f2bf(silu_mul(bf2f(gate_up[r * 2 * ffn + c]), bf2f(gate_up[r * 2 * ffn + ffn + c])));
  }
}

/* ---------------------------------------------------------------- small-row GEMV
 *
 * y = x . W^T for ROWS <= 8 rows, W [N, K] row-major bf16 read once for all rows, fp32
 * accumulation. The block stages its input rows in shared memory (normalized there first when
 * NORM: x is then the hidden buffer and gain the RMSNorm gain). Each warp takes tasks
 * blockIdx.x * 8 + warp, + gridDim.x * 8, ...; a task is one output column (kEpiResidual) or a
 * pair of W rows whose results one epilogue needs together:
 *  - kEpiResidual: n = task, y[r, n] = bf16(acc + y[r, n]) (the residual add, in place);
 *  - kEpiRope: W = Wqkv, split = d; task -> (section q/k/v, head, j), W rows j and j + 32 of
 *    that head, rotated by the RoPE table for q and k (v passes through), y = qkv [rows, 3d];
 *  - kEpiSwiglu: W = W_gate_up, split = ffn; W rows task (gate) and ffn + task (up),
 *    y[r, task] = bf16(silu(gate) * up), y = act [rows, ffn].
 * In a task, lane l reads 16-byte words l, l + 32, ... of each W row (a warp reads 512 bytes of
 * a row per instruction, several instructions in flight), folds them into one accumulator per
 * (W row, input row) in word order, and the warp folds its lanes by an xor butterfly. A row's
 * result is independent of ROWS, of the grid and of the other rows.
 */
enum { kEpiResidual = 0, kEpiRope = 1, kEpiSwiglu = 2 };

struct GemvParams {
  const bf16 *x;      /* [ROWS, k] input rows (the hidden buffer when NORM) */
  const bf16 *gain;   /* [k] RMSNorm gain (NORM) */
  const bf16 *w;      /* [N, k] */
  bf16 *y;            /* output rows, stride ldy */
  const float2 *rope; /* [rows, 32] (cos, sin) (kEpiRope) */
  const void *next;   /* after the work: prefetch [next, next + next_bytes) into L2 */
  size_t next_bytes;  /* (the weights the next call will read first; 0: none) */
  int k;              /* a multiple of 8 */
  int tasks;          /* warp tasks */
  int split;          /* d (kEpiRope) or ffn (kEpiSwiglu) */
  int ldy;            /* row stride of y */
  int prefetch;       /* prefetch the first task's W rows into L2 before waiting */
};

template <int EPI>
__device__ __forceinline__ void gemv_task(const GemvParams &p, int t, int *n0, int *n1, int *j,
                                          bool *rot) {
  *j = 0;
  *rot = false;
  if (EPI == kEpiRope) {
    const int half = p.split / 2; /* pairs per section: heads * 32 */
    const int sec = t / half, pp = t - sec * half;
    *j = pp % kHalf;
    *n0 = sec * p.split + (pp / kHalf) * kHeadDim + *j;
    *n1 = *n0 + kHalf;
    *rot = sec < 2;
  } else if (EPI == kEpiSwiglu) {
    *n0 = t;
    *n1 = p.split + t;
  } else {
    *n0 = *n1 = t;
  }
}

template <int ROWS, int EPI, bool NORM>
__global__ void __launch_bounds__(kGemvThreads) gemv(const GemvParams p) {
  constexpr int NW = EPI == kEpiResidual ? 1 : 2; /* W rows per task */
  constexpr int U = NW == 1 ? 8 : 4;              /* words per W row in flight per lane */
  extern __shared__ uint4 xs[];                   /* [ROWS][words] */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, words = p.k / kVecDims;
  const int first = blockIdx.x * kGemvWarps + warp, stride = gridDim.x * kGemvWarps;

  pdl_trigger();
  if (p.prefetch && first < p.tasks) {
    int n0, n1, j;
    bool rot;
    gemv_task<EPI>(p, first, &n0, &n1, &j, &rot);
    prefetch_range(p.w + (size_t)n0 * p.k, (size_t)p.k * sizeof(bf16), lane, 32);
    if (NW == 2)
      prefetch_range(p.w + (size_t)n1 * p.k, (size_t)p.k * sizeof(bf16), lane, 32);
  }
  pdl_wait();

  if (NORM) {
    for (int r = warp; r < ROWS; r += kGemvWarps)
      rms_row(p.x + (size_t)r * p.k, p.gain, p.k, lane, xs + r * words);
  } else {
    const uint4 *x4 = (const uint4 *)p.x;
    for (int c = threadIdx.x; c < ROWS * words; c += kGemvThreads)
      xs[c] = x4[c];
  }
  __syncthreads();

  for (int t = first; t < p.tasks; t += stride) {
    int n0, n1, j;
    bool rot;
    gemv_task<EPI>(p, t, &n0, &n1, &j, &rot);
    const uint4 *wr[2] = {(const uint4 *)(p.w + (size_t)n0 * p.k),
                          (const uint4 *)(p.w + (size_t)n1 * p.k)};
    float acc[NW][ROWS];
#pragma unroll
    for (int a = 0; a < NW; a++)
#pragma unroll
      for (int r = 0; r < ROWS; r++)
        acc[a][r] = 0.0f;

    for (int c0 = lane; c0 < words; c0 += U * 32) {
      /* All U loads issue unconditionally (past the end: the row's last word again, unused),
       * so they are in flight together. */
      uint4 wv[U][NW];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int c = min(c0 + u * 32, words - 1);
#pragma unroll
        for (int a = 0; a < NW; a++)
          wv[u][a] = __ldcs(wr[a] + c);
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int c = c0 + u * 32;
        if (c < words) {
          float wf[NW][kVecDims];
#pragma unroll
          for (int a = 0; a < NW; a++)
            unpack8(wv[u][a], wf[a]);
#pragma unroll
          for (int r = 0; r < ROWS; r++) {
            float xf[kVecDims];
            unpack8(xs[r * words + c], xf);
#pragma unroll
            for (int a = 0; a < NW; a++)
#pragma unroll
              for (int e = 0; e < kVecDims; e++)
                acc[a][r] = fmaf(wf[a][e], xf[e], acc[a][r]);
          }
        }
      }
    }
#pragma unroll
    for (int a = 0; a < NW; a++)
#pragma unroll
      for (int r = 0; r < ROWS; r++)
        acc[a][r] = warp_sum(acc[a][r]);
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      if (lane != r) /* every lane holds every sum; lane r writes row r */
        continue;
      bf16 *yr = p.y + (size_t)r * p.ldy;
      if (EPI == kEpiResidual) {
        yr[n0] = f2bf(__fadd_rn(acc[0][r], bf2f(yr[n0])));
      } else if (EPI == kEpiSwiglu) {
        yr[n0] = f2bf(silu_mul(acc[0][r], acc[NW - 1][r]));
      } else {
        float o0 = acc[0][r], o1 = acc[NW - 1][r];
        if (rot) {
          const float2 cs = p.rope[r * kHalf + j];
          o0 = __fsub_rn(__fmul_rn(acc[0][r], cs.x), __fmul_rn(acc[NW - 1][r], cs.y));
          o1 = __fadd_rn(__fmul_rn(acc[NW - 1][r], cs.x), __fmul_rn(acc[0][r], cs.y));
        }
        yr[n0] = f2bf(o0);
        yr[n1] = f2bf(o1);
      }
    }
  }

  /* The next call's first weights, while this kernel drains and the next nodes start. */
  if (p.next)
    prefetch_range(p.next, p.next_bytes, (size_t)blockIdx.x * kGemvThreads + threadIdx.x,
                   (size_t)gridDim.x * kGemvThreads);
}

typedef void (*gemv_fn)(const GemvParams);

template <int EPI, bool NORM> gemv_fn gemv_pick(int rows) {
  static_assert(CGRTK_DECODE_GEMV_ROWS == 8, "gemv_pick instantiates rows 1..8");
  switch (rows) {
  case 1:
    return gemv<1, EPI, NORM>;
  case 2:
    return gemv<2, EPI, NORM>;
  case 3:
    return gemv<3, EPI, NORM>;
  case 4:
    return gemv<4, EPI, NORM>;
  case 5:
    return gemv<5, EPI, NORM>;
  case 6:
    return gemv<6, EPI, NORM>;
  case 7:
    return gemv<7, EPI, NORM>;
  case 8:
    return gemv<8, EPI, NORM>;
  default:
    return nullptr;
  }
}

template <int EPI, bool NORM>
int launch_gemv(const GemvParams &p, int rows, cudaStream_t s, bool pdl) {
  gemv_fn fn = gemv_pick<EPI, NORM>(rows);
  if (!fn || p.k % kVecDims != 0 || p.tasks < 1)
    return (int)cudaErrorInvalidValue;
  /* 16-byte loads of x, W rows and the gain. */
  if (((uintptr_t)p.x | (uintptr_t)p.w | (uintptr_t)p.gain) & 15)
    return (int)cudaErrorMisalignedAddress;
  const unsigned blocks = (unsigned)((p.tasks + kGemvWarps - 1) / kGemvWarps);
  const size_t smem = (size_t)rows * p.k * sizeof(bf16);
  return launch(fn, dim3(blocks), dim3(kGemvThreads), smem, s, pdl, p);
}

template <int EPI, bool NORM> cudaError_t gemv_allow_smem(int bytes) {
  for (int r = 1; r <= CGRTK_DECODE_GEMV_ROWS; r++) {
    cudaError_t e = cudaFuncSetAttribute(gemv_pick<EPI, NORM>(r),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

/* Busy-waits `ns` nanoseconds of the global timer (one thread): puts the device behind the host
 * while decode.cu's tuning enqueues the short kernels it times, so launch gaps are not timed. */
__global__ void spin(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
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

int launch_spin(uint64_t ns, cudaStream_t s) {
  spin<<<1, 1, 0, s>>>(ns);
  return (int)cudaGetLastError();
}

int launch_stage(bf16 *h, int d, int tokens, int rows, uint64_t key, cudaStream_t s) {
  if (rows == 0)
    return 0;
  stage_input<<<grid_for((uint64_t)rows * d), kThreads, 0, s>>>(h, d, tokens, rows, key);
  return (int)cudaGetLastError();
}

int launch_rmsnorm(const bf16 *x, const bf16 *gain, bf16 *y, int rows, int d, cudaStream_t s) {
  if (((uintptr_t)x | (uintptr_t)gain | (uintptr_t)y) & 15)
    return (int)cudaErrorMisalignedAddress;
  const unsigned blocks = (unsigned)((rows + kNormWarps - 1) / kNormWarps);
  return launch(rmsnorm, dim3(blocks), dim3(kNormWarps * 32), 0, s, false, x, gain, y, rows, d);
}

int launch_rope(bf16 *qkv, const float2 *rope, int rows, int heads, cudaStream_t s, bool pdl) {
  const uint64_t pairs = (uint64_t)rows * 2 * heads * kHalf;
  return launch(rope_kernel, dim3(grid_for(pairs)), dim3(kThreads), 0, s, pdl, qkv, rope, rows,
                heads);
}

/* split: clusters allowed (an sm_90+ device and binary); they are used at rows <= kSplitRows. */
int launch_attention(const bf16 *qkv, const bf16 *kcache, const bf16 *vcache, bf16 *out, int rows,
                     int heads, int cache_len, cudaStream_t s, bool pdl, bool split) {
  /* The kernel reads queries, keys and values with 16-byte loads. */
  if (((uintptr_t)qkv | (uintptr_t)kcache | (uintptr_t)vcache) & 15)
    return (int)cudaErrorMisalignedAddress;
  if (!split || rows > kSplitRows)
    return launch(attention<1>, dim3((unsigned)heads, (unsigned)rows), dim3(kAttnThreads), 0, s,
                  pdl, qkv, kcache, vcache, out, heads, cache_len, pdl ? 1 : 0);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  cfg.gridDim = dim3((unsigned)(heads * kAttnSplit), (unsigned)rows);
  cfg.blockDim = dim3(kAttnThreads);
  cfg.stream = s;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kAttnSplit;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 2 : 1;
  return (int)cudaLaunchKernelEx(&cfg, attention<kAttnSplit>, qkv, kcache, vcache, out, heads,
                                 cache_len, pdl ? 1 : 0);
}

/* The binary architecture of these kernels (90 for sm_90): clusters and the griddepcontrol
 * instructions exist only from 90 on. */
int kernels_binary_version(int *version) {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, attention<kAttnSplit>);
  *version = e == cudaSuccess ? a.binaryVersion : 0;
  return (int)e;
}

int launch_swiglu(const bf16 *gate_up, bf16 *act, int rows, int ffn, cudaStream_t s) {
  return launch(swiglu, dim3(grid_for((uint64_t)rows * ffn)), dim3(kThreads), 0, s, false, gate_up,
                act, rows, ffn);
}

/* Allow every GEMV instance `bytes` of dynamic shared memory (call once, outside capture). */
int gemv_setup(int bytes) {
  cudaError_t e = gemv_allow_smem<kEpiRope, true>(bytes);
  if (e == cudaSuccess)
    e = gemv_allow_smem<kEpiSwiglu, true>(bytes);
  if (e == cudaSuccess)
    e = gemv_allow_smem<kEpiResidual, false>(bytes);
  return (int)e;
}

/* qkv[rows, 3d] = RoPE(RMSNorm(h) . Wqkv^T), q and k rotated. */
int launch_gemv_qkv(const bf16 *h, const bf16 *gain, const bf16 *wqkv, bf16 *qkv,
                    const float2 *rope, int rows, int d, cudaStream_t s, bool pdl) {
  GemvParams p = {};
  p.x = h;
  p.gain = gain;
  p.w = wqkv;
  p.y = qkv;
  p.rope = rope;
  p.k = d;
  p.tasks = 3 * d / 2;
  p.split = d;
  p.ldy = 3 * d;
  p.prefetch = pdl;
  return launch_gemv<kEpiRope, true>(p, rows, s, pdl);
}

/* act[rows, ffn] = silu(gate) * up, [gate | up] = RMSNorm(h) . W_gate_up^T. */
int launch_gemv_gate_up(const bf16 *h, const bf16 *gain, const bf16 *wgu, bf16 *act, int rows,
                        int d, int ffn, cudaStream_t s, bool pdl) {
  GemvParams p = {};
  p.x = h;
  p.gain = gain;
  p.w = wgu;
  p.y = act;
  p.k = d;
  p.tasks = ffn;
  p.split = ffn;
  p.ldy = ffn;
  p.prefetch = pdl;
  return launch_gemv<kEpiSwiglu, true>(p, rows, s, pdl);
}

/* y[rows, n] += x[rows, k] . W^T (y bf16 in place, stride n); then prefetch `next`. */
int launch_gemv_residual(const bf16 *x, const bf16 *w, bf16 *y, int rows, int n, int k,
                         const void *next, size_t next_bytes, cudaStream_t s, bool pdl) {
  GemvParams p = {};
  p.x = x;
  p.w = w;
  p.y = y;
  p.next = next;
  p.next_bytes = next ? next_bytes : 0;
  p.k = k;
  p.tasks = n;
  p.ldy = n;
  p.prefetch = pdl;
  return launch_gemv<kEpiResidual, false>(p, rows, s, pdl);
}

} // namespace cgrtk_decode_impl
