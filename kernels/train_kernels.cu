/*
 * train_kernels.cu - the device side of the `train` workload's dense modules (train.h):
 * initialization, RMSNorm, causal attention forward and backward, GELU, the selective scan forward
 * and backward, the MSE loss and the SGD-with-momentum update. All fp32.
 *
 * Determinism: no atomics. Every output element is written by exactly one thread, which folds its
 * inputs sequentially in index order; block reductions fold a thread-strided subset per thread,
 * then the warp by an xor butterfly, then the warps in order. Launch configurations depend only
 * on the shapes. The same call therefore gives the same bits eagerly and replayed from a graph.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "train_internal.h"

namespace {

constexpr int kThreads = 256;    /* element-wise kernels and the loss */
constexpr int kMaxBlocks = 4096; /* grid-stride kernels: enough to fill any GPU */
constexpr int kHeadDim = CGRTK_TRAIN_HEAD_DIM;
constexpr int kAttnThreads = 2 * kHeadDim; /* attention: two threads per head dimension */
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr float kAttnScale = 0.125f; /* 1/sqrt(64), a power of two: exact */
constexpr int kScanThreads = 64;     /* d * state threads: small blocks spread over more SMs */
constexpr int kScanChunk = 16;       /* time steps loaded ahead of the scan's dependent chain */
constexpr int kLossThreads = 1024;

static_assert(kHeadDim == 64, "the attention kernels assume a head dimension of 64");

unsigned grid_for(uint64_t n) {
  uint64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1)
    b = 1;
  return (unsigned)(b > (uint64_t)kMaxBlocks ? kMaxBlocks : b);
}

unsigned scan_grid(uint64_t n) {
  uint64_t b = (n + kScanThreads - 1) / kScanThreads;
  return (unsigned)(b > (uint64_t)kMaxBlocks ? kMaxBlocks : b);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (uint64_t)(n);            \
       i += (uint64_t)gridDim.x * blockDim.x)

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

__device__ __forceinline__ float sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

constexpr float kGeluK = 0.7978845608028654f; /* sqrt(2 / pi) */
constexpr float kGeluC = 0.044715f;

__device__ __forceinline__ float gelu(float u) {
  const float th = tanhf(kGeluK * (u + kGeluC * u * u * u));
  return 0.5f * u * (1.0f + th);
}

__device__ __forceinline__ float gelu_grad(float u) {
  const float u2 = u * u;
  const float th = tanhf(kGeluK * (u + kGeluC * u2 * u));
  return 0.5f * (1.0f + th) + 0.5f * u * (1.0f - th * th) * kGeluK * (1.0f + 3.0f * kGeluC * u2);
}

__global__ void init_values(float *__restrict__ dst, uint64_t n, uint64_t key, float scale) {
  GRID_STRIDE(i, n) {
    dst[i] = cgrtk_train_value(key, i, scale);
  }
}

/* One block per row: xn = x * rinv, rinv = 1 / sqrt(mean(x^2) + eps). */
__global__ void __launch_bounds__(kThreads)
    rmsnorm(const float *__restrict__ x, float *__restrict__ xn, float *__restrict__ rinv, int d) {
  __shared__ float red[kThreads / 32];
  const float *xr = x + (size_t)blockIdx.x * d;
  float *yr = xn + (size_t)blockIdx.x * d;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < d; c += blockDim.x)
    ss = fmaf(xr[c], xr[c], ss);
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / (float)d + CGRTK_TRAIN_RMS_EPS);
  if (threadIdx.x == 0)
    rinv[blockIdx.x] = r;
  for (int c = threadIdx.x; c < d; c += blockDim.x)
    yr[c] = xr[c] * r;
}

/* One block per row: dx = dy + rinv (dxn - xn mean(dxn xn)). dy and dx may be the same buffer:
 * every element is read and then written by one thread. */
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward(const float *dy, const float *__restrict__ xn, const float *__restrict__ rinv,
                     const float *__restrict__ dxn, float *dx, int d) {
  __shared__ float red[kThreads / 32];
  const size_t row = (size_t)blockIdx.x * d;
  float dot = 0.0f;
  for (int c = threadIdx.x; c < d; c += blockDim.x)
    dot = fmaf(dxn[row + c], xn[row + c], dot);
  dot = block_sum(dot, red);
  const float mean = dot / (float)d, r = rinv[blockIdx.x];
  for (int c = threadIdx.x; c < d; c += blockDim.x)
    dx[row + c] = dy[row + c] + r * (dxn[row + c] - xn[row + c] * mean);
}

/*
 * One block per (head, query i): scores s_j = (q_i / 8) . k_j for j <= i (thread j mod 128 takes
 * key j, a sequential fma chain over the 64 dimensions), softmax, P row saved (zero for j > i),
 * o_i = sum_j P_ij v_j by threads 0..63, one dimension each, j in order. Dynamic shared memory:
 * tokens floats.
 */
__global__ void __launch_bounds__(kAttnThreads)
    attn_rows(const float *__restrict__ qkv, float *__restrict__ P, float *__restrict__ O, int T,
              int heads) {
  extern __shared__ float p[];
  __shared__ float q[kHeadDim];
  __shared__ float red_max[kAttnWarps], red_sum[kAttnWarps];
  const int head = blockIdx.x, i = blockIdx.y, tid = threadIdx.x;
  const int d = heads * kHeadDim;
  const size_t ld = (size_t)3 * d;

  if (tid < kHeadDim)
    q[tid] = qkv[i * ld + head * kHeadDim + tid] * kAttnScale;
  __syncthreads();

  float mx = -INFINITY;
  for (int j = tid; j <= i; j += kAttnThreads) {
    const float *k = qkv + j * ld + d + head * kHeadDim;
    float s = 0.0f;
    for (int e = 0; e < kHeadDim; e++)
      s = fmaf(q[e], k[e], s);
    p[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, red_max);

  float sum = 0.0f;
  for (int j = tid; j <= i; j += kAttnThreads) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    sum += e;
  }
  sum = block_sum(sum, red_sum);
  const float inv = 1.0f / sum;

  float *prow = P + ((size_t)head * T + i) * T;
  for (int j = tid; j < T; j += kAttnThreads) {
    float v = 0.0f;
    if (j <= i) {
      v = p[j] * inv;
      p[j] = v; /* the same thread wrote p[j] above */
    }
    prow[j] = v;
  }
  __syncthreads();

  if (tid < kHeadDim) {
    float o = 0.0f;
    for (int j = 0; j <= i; j++)
      o = fmaf(p[j], qkv[j * ld + 2 * d + head * kHeadDim + tid], o);
    O[(size_t)i * d + head * kHeadDim + tid] = o;
  }
}

/*
 * One block per (head, query i): dP_ij = do_i . v_j, r_i = sum_j P_ij dP_ij, dS_ij = P_ij (dP_ij -
 * r_i) (saved, zero for j > i), dq_i = (1/8) sum_{j <= i} dS_ij k_j.
 */
__global__ void __launch_bounds__(kAttnThreads)
    attn_backward_q(const float *__restrict__ qkv, const float *__restrict__ P,
                    const float *__restrict__ dO, float *__restrict__ dS, float *__restrict__ dqkv,
                    int T, int heads) {
  extern __shared__ float ds[];
  __shared__ float dov[kHeadDim];
  __shared__ float red[kAttnWarps];
  const int head = blockIdx.x, i = blockIdx.y, tid = threadIdx.x;
  const int d = heads * kHeadDim;
  const size_t ld = (size_t)3 * d;
  const float *prow = P + ((size_t)head * T + i) * T;

  if (tid < kHeadDim)
    dov[tid] = dO[(size_t)i * d + head * kHeadDim + tid];
  __syncthreads();

  float r = 0.0f;
  for (int j = tid; j <= i; j += kAttnThreads) {
    const float *v = qkv + j * ld + 2 * d + head * kHeadDim;
    float s = 0.0f;
    for (int e = 0; e < kHeadDim; e++)
      s = fmaf(dov[e], v[e], s);
    ds[j] = s;
    r = fmaf(prow[j], s, r);
  }
  r = block_sum(r, red);

  float *dsrow = dS + ((size_t)head * T + i) * T;
  for (int j = tid; j < T; j += kAttnThreads) {
    float v = 0.0f;
    if (j <= i) {
      v = prow[j] * (ds[j] - r);
      ds[j] = v; /* the same thread wrote ds[j] above */
    }
    dsrow[j] = v;
  }
  __syncthreads();

  if (tid < kHeadDim) {
    float acc = 0.0f;
    for (int j = 0; j <= i; j++)
      acc = fmaf(ds[j], qkv[j * ld + d + head * kHeadDim + tid], acc);
    dqkv[(size_t)i * ld + head * kHeadDim + tid] = acc * kAttnScale;
  }
}

/* One block per (head, key j): threads 0..63 dv_j = sum_{i >= j} P_ij do_i, threads 64..127
 * dk_j = (1/8) sum_{i >= j} dS_ij q_i, one dimension each, i in order. */
__global__ void __launch_bounds__(kAttnThreads)
    attn_backward_kv(const float *__restrict__ qkv, const float *__restrict__ P,
                     const float *__restrict__ dS, const float *__restrict__ dO,
                     float *__restrict__ dqkv, int T, int heads) {
  const int head = blockIdx.x, j = blockIdx.y, e = threadIdx.x % kHeadDim;
  const int which = threadIdx.x / kHeadDim; /* 0: dv, 1: dk */
  const int d = heads * kHeadDim;
  const size_t ld = (size_t)3 * d;
  float acc = 0.0f;
  if (which == 0) {
    for (int i = j; i < T; i++)
      acc = fmaf(P[((size_t)head * T + i) * T + j], dO[(size_t)i * d + head * kHeadDim + e], acc);
    dqkv[j * ld + 2 * d + head * kHeadDim + e] = acc;
  } else {
    for (int i = j; i < T; i++)
      acc = fmaf(dS[((size_t)head * T + i) * T + j], qkv[i * ld + head * kHeadDim + e], acc);
    dqkv[j * ld + d + head * kHeadDim + e] = acc * kAttnScale;
  }
}

__global__ void gelu_forward(const float *__restrict__ u, float *__restrict__ a, uint64_t n) {
  GRID_STRIDE(i, n) {
    a[i] = gelu(u[i]);
  }
}

__global__ void gelu_backward(const float *__restrict__ u, float *__restrict__ g, uint64_t n) {
  GRID_STRIDE(i, n) {
    g[i] *= gelu_grad(u[i]);
  }
}

/* One thread per (channel c, state n), t in order: h = a_t[c] h + B_t[n] xn_t[c] (a = sigmoid,
 * B = tanh of their projections); every h_t saved at hs[t][c][n]. */
__global__ void __launch_bounds__(kScanThreads)
    mamba_scan(const float *__restrict__ xn, const float *__restrict__ proj, float *__restrict__ hs,
               int T, int d, int N) {
  const int W = d + 2 * N;
  const uint64_t dn = (uint64_t)d * N;
  GRID_STRIDE(idx, dn) {
    const int c = (int)(idx / N), n = (int)(idx % N);
    float h = 0.0f;
    for (int t0 = 0; t0 < T; t0 += kScanChunk) {
      /* The chunk's inputs first (independent loads, all in flight at once), then the chain. */
      float a[kScanChunk], bx[kScanChunk];
#pragma unroll
      for (int u = 0; u < kScanChunk; u++) {
        const int t = t0 + u < T ? t0 + u : T - 1;
        const float *pr = proj + (size_t)t * W;
        a[u] = sigmoid(pr[c]);
        bx[u] = tanhf(pr[d + n]) * xn[(size_t)t * d + c];
      }
#pragma unroll
      for (int u = 0; u < kScanChunk; u++)
        if (t0 + u < T) {
          h = fmaf(a[u], h, bx[u]);
          hs[(t0 + u) * dn + idx] = h;
        }
    }
  }
}

/* One thread per (token t, channel c): y = x + sum_n C_t[n] h_t[c][n], n in order (C = tanh of its
 * projection). */
__global__ void mamba_readout(const float *__restrict__ x, const float *__restrict__ proj,
                              const float *__restrict__ hs, float *__restrict__ y, int T, int d,
                              int N) {
  const int W = d + 2 * N;
  GRID_STRIDE(i, (uint64_t)T * d) {
    const uint64_t t = i / d, c = i % d;
    const float *cv = proj + t * W + d + N;
    const float *h = hs + (t * d + c) * N;
    float acc = x[i];
    for (int n = 0; n < N; n++)
      acc = fmaf(tanhf(cv[n]), h[n], acc);
    y[i] = acc;
  }
}

/* One thread per (c, n), t from last to first: g_t = dy_t[c] C_t[n] + a_{t+1}[c] g_{t+1}, the
 * whole gradient of h_t[c][n], saved at g[t][c][n]. */
__global__ void __launch_bounds__(kScanThreads)
    mamba_scan_backward(const float *__restrict__ dy, const float *__restrict__ proj,
                        float *__restrict__ g, int T, int d, int N) {
  const int W = d + 2 * N;
  const uint64_t dn = (uint64_t)d * N;
  GRID_STRIDE(idx, dn) {
    const int c = (int)(idx / N), n = (int)(idx % N);
    float acc = 0.0f;
    for (int t1 = T - 1; t1 >= 0; t1 -= kScanChunk) {
      float an[kScanChunk], dyv[kScanChunk], cv[kScanChunk]; /* a_{t+1}, dy_t[c], C_t[n] */
#pragma unroll
      for (int u = 0; u < kScanChunk; u++) {
        const int t = t1 - u >= 0 ? t1 - u : 0;
        an[u] = t + 1 < T ? sigmoid(proj[(size_t)(t + 1) * W + c]) : 0.0f;
        dyv[u] = dy[(size_t)t * d + c];
        cv[u] = tanhf(proj[(size_t)t * W + d + N + n]);
      }
#pragma unroll
      for (int u = 0; u < kScanChunk; u++)
        if (t1 - u >= 0) {
          acc = fmaf(dyv[u], cv[u], an[u] * acc);
          g[(t1 - u) * dn + idx] = acc;
        }
    }
  }
}

/* One thread per (t, c): da = sum_n g_t[c][n] h_{t-1}[c][n] -> dproj (a logits) through the
 * sigmoid; dxn = sum_n g_t[c][n] B_t[n]. */
__global__ void mamba_channel_backward(const float *__restrict__ proj, const float *__restrict__ hs,
                                       const float *__restrict__ g, float *__restrict__ dproj,
                                       float *__restrict__ dxn, int T, int d, int N) {
  const int W = d + 2 * N;
  GRID_STRIDE(i, (uint64_t)T * d) {
    const uint64_t t = i / d, c = i % d;
    const float *gr = g + (t * d + c) * N;
    const float *hp = t > 0 ? hs + ((t - 1) * d + c) * N : NULL;
    const float *b = proj + t * W + d;
    float da = 0.0f, dxs = 0.0f;
    for (int n = 0; n < N; n++) {
      if (hp)
        da = fmaf(gr[n], hp[n], da);
      dxs = fmaf(gr[n], tanhf(b[n]), dxs);
    }
    const float a = sigmoid(proj[t * W + c]);
    dproj[t * W + c] = da * a * (1.0f - a);
    dxn[i] = dxs;
  }
}

/* One warp per (t, n): dB_t[n] = sum_c g_t[c][n] xn_t[c], dC_t[n] = sum_c dy_t[c] h_t[c][n]
 * (lane l folds c = l, l + 32, ... in order, then the xor butterfly), then through the tanh into
 * dproj. */
__global__ void __launch_bounds__(kThreads)
    mamba_state_backward(const float *__restrict__ xn, const float *__restrict__ dy,
                         const float *__restrict__ proj, const float *__restrict__ hs,
                         const float *__restrict__ g, float *__restrict__ dproj, int T, int d,
                         int N) {
  const int W = d + 2 * N, lane = threadIdx.x & 31;
  const uint64_t pairs = (uint64_t)T * N, warps = (uint64_t)gridDim.x * (blockDim.x >> 5);
  for (uint64_t w = blockIdx.x * (uint64_t)(blockDim.x >> 5) + (threadIdx.x >> 5); w < pairs;
       w += warps) { /* w is the same in the whole warp: the shuffles below see every lane */
    const uint64_t t = w / N, n = w % N;
    float db = 0.0f, dc = 0.0f;
    for (int c = lane; c < d; c += 32) {
      const uint64_t k = (t * d + c) * N + n;
      db = fmaf(g[k], xn[t * d + c], db);
      dc = fmaf(dy[t * d + c], hs[k], dc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      db += __shfl_xor_sync(0xFFFFFFFFu, db, o);
      dc += __shfl_xor_sync(0xFFFFFFFFu, dc, o);
    }
    if (lane == 0) {
      const float b = tanhf(proj[t * W + d + n]), cv = tanhf(proj[t * W + d + N + n]);
      dproj[t * W + d + n] = db * (1.0f - b * b);
      dproj[t * W + d + N + n] = dc * (1.0f - cv * cv);
    }
  }
}

/* One block: seed = (h - target) * 2/n, loss = sum (h - target)^2 / n. */
__global__ void __launch_bounds__(kLossThreads)
    mse_loss(const float *__restrict__ h, const float *__restrict__ target,
             float *__restrict__ seed, float *__restrict__ loss, uint64_t n, float grad_scale,
             float inv_n) {
  __shared__ float red[kLossThreads / 32];
  float acc = 0.0f;
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float diff = h[i] - target[i];
    seed[i] = diff * grad_scale;
    acc = fmaf(diff, diff, acc);
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0)
    *loss = acc * inv_n;
}

/* g = sum of the microbatches' gradients in order; v = momentum v + g; w -= lr v. */
__global__ void sgd_momentum(float *__restrict__ w, float *__restrict__ v,
                             const float *__restrict__ g, uint64_t n, int mbs, float lr,
                             float momentum) {
  GRID_STRIDE(i, n) {
    float gi = g[i];
    for (int m = 1; m < mbs; m++)
      gi += g[(uint64_t)m * n + i];
    const float vi = fmaf(momentum, v[i], gi);
    v[i] = vi;
    w[i] = fmaf(-lr, vi, w[i]);
  }
}

} // namespace

namespace cgrtk_train_impl {

int launch_init(float *dst, uint64_t n, uint64_t key, float scale, cudaStream_t s) {
  if (n == 0)
    return 0;
  init_values<<<grid_for(n), kThreads, 0, s>>>(dst, n, key, scale);
  return (int)cudaGetLastError();
}

int launch_attn_forward(const float *qkv, float *p, float *o, int tokens, int heads,
                        cudaStream_t s) {
  const size_t smem = (size_t)tokens * sizeof(float);
  attn_rows<<<dim3((unsigned)heads, (unsigned)tokens), kAttnThreads, smem, s>>>(qkv, p, o, tokens,
                                                                                heads);
  return (int)cudaGetLastError();
}

int launch_attn_backward(const float *qkv, const float *p, const float *dout, float *ds,
                         float *dqkv, int tokens, int heads, cudaStream_t s) {
  const size_t smem = (size_t)tokens * sizeof(float);
  const dim3 grid((unsigned)heads, (unsigned)tokens);
  attn_backward_q<<<grid, kAttnThreads, smem, s>>>(qkv, p, dout, ds, dqkv, tokens, heads);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return (int)e;
  attn_backward_kv<<<grid, kAttnThreads, 0, s>>>(qkv, p, ds, dout, dqkv, tokens, heads);
  return (int)cudaGetLastError();
}

int launch_gelu_forward(const float *u, float *a, uint64_t n, cudaStream_t s) {
  gelu_forward<<<grid_for(n), kThreads, 0, s>>>(u, a, n);
  return (int)cudaGetLastError();
}

int launch_gelu_backward(const float *u, float *g, uint64_t n, cudaStream_t s) {
  gelu_backward<<<grid_for(n), kThreads, 0, s>>>(u, g, n);
  return (int)cudaGetLastError();
}

int launch_rmsnorm(const float *x, float *xn, float *rinv, int tokens, int d, cudaStream_t s) {
  rmsnorm<<<tokens, kThreads, 0, s>>>(x, xn, rinv, d);
  return (int)cudaGetLastError();
}

int launch_rmsnorm_backward(const float *dy, const float *xn, const float *rinv, const float *dxn,
                            float *dx, int tokens, int d, cudaStream_t s) {
  rmsnorm_backward<<<tokens, kThreads, 0, s>>>(dy, xn, rinv, dxn, dx, d);
  return (int)cudaGetLastError();
}

int launch_mamba_forward(const float *x, const float *xn, const float *proj, float *hs, float *y,
                         int tokens, int d, int state, cudaStream_t s) {
  mamba_scan<<<scan_grid((uint64_t)d * state), kScanThreads, 0, s>>>(xn, proj, hs, tokens, d,
                                                                     state);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return (int)e;
  mamba_readout<<<grid_for((uint64_t)tokens * d), kThreads, 0, s>>>(x, proj, hs, y, tokens, d,
                                                                    state);
  return (int)cudaGetLastError();
}

int launch_mamba_backward(const float *xn, const float *dy, const float *proj, const float *hs,
                          float *g, float *dproj, float *dxn, int tokens, int d, int state,
                          cudaStream_t s) {
  mamba_scan_backward<<<scan_grid((uint64_t)d * state), kScanThreads, 0, s>>>(dy, proj, g, tokens,
                                                                              d, state);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return (int)e;
  mamba_channel_backward<<<grid_for((uint64_t)tokens * d), kThreads, 0, s>>>(proj, hs, g, dproj,
                                                                             dxn, tokens, d, state);
  if ((e = cudaGetLastError()) != cudaSuccess)
    return (int)e;
  mamba_state_backward<<<grid_for((uint64_t)tokens * state * 32), kThreads, 0, s>>>(
      xn, dy, proj, hs, g, dproj, tokens, d, state);
  return (int)cudaGetLastError();
}

int launch_mse_loss(const float *h, const float *target, float *seed, float *loss, uint64_t n,
                    cudaStream_t s) {
  const float grad_scale = (float)(2.0 / (double)n), inv_n = (float)(1.0 / (double)n);
  mse_loss<<<1, kLossThreads, 0, s>>>(h, target, seed, loss, n, grad_scale, inv_n);
  return (int)cudaGetLastError();
}

int launch_sgd(float *w, float *v, const float *g, uint64_t n, int microbatches, float lr,
               float momentum, cudaStream_t s) {
  sgd_momentum<<<grid_for(n), kThreads, 0, s>>>(w, v, g, n, microbatches, lr, momentum);
  return (int)cudaGetLastError();
}

} // namespace cgrtk_train_impl
