/*
 * train_moe_kernels.cu - the device side of the `train` workload's MoE layer (train.h): the
 * router's softmax and top-k and their backward, the slot assignment and gather of the
 * preprocess and its inverse, the combine of the experts' outputs and its backward.
 *
 * Determinism as in train_kernels.cu: no atomics, one writer per output element, sequential folds
 * in index order, launch configurations that depend only on the shapes. A pair is a (token,
 * choice) of the router, numbered token * top_k + choice.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "train_internal.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;
constexpr int kAssignChunk = 2048; /* choices staged in shared memory at a time */

static_assert(CGRTK_TRAIN_MAX_EXPERTS <= 64, "the top-k keeps the chosen experts in 64 bits");

unsigned grid_for(uint64_t n) {
  uint64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1)
    b = 1;
  return (unsigned)(b > (uint64_t)kMaxBlocks ? kMaxBlocks : b);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (uint64_t)(n);            \
       i += (uint64_t)gridDim.x * blockDim.x)

/* One thread per token: softmax over the experts in place, then top_k picks, each the largest
 * probability not yet taken (the lower expert index on ties). */
__global__ void router_topk(float *__restrict__ probs, int *__restrict__ idx,
                            float *__restrict__ gates, int T, int E, int k) {
  GRID_STRIDE(t, T) {
    float *p = probs + t * E;
    float mx = p[0];
    for (int e = 1; e < E; e++)
      mx = fmaxf(mx, p[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; e++) {
      const float v = expf(p[e] - mx);
      p[e] = v;
      sum += v;
    }
    const float inv = 1.0f / sum;
    for (int e = 0; e < E; e++)
      p[e] *= inv;
    uint64_t taken = 0;
    for (int j = 0; j < k; j++) {
      int best = -1;
      for (int e = 0; e < E; e++)
        if (!((taken >> e) & 1u) && (best < 0 || p[e] > p[best]))
          best = e;
      taken |= 1ull << best;
      idx[t * k + j] = best;
      gates[t * k + j] = p[best];
    }
  }
}

/* One thread per token: dlogits_e = p_e (dp_e - sum_j gate_j dgate_j), dp_e = the gradient of
 * the gate that chose e (0 if none did). */
__global__ void router_softmax_backward(const float *__restrict__ probs,
                                        const int *__restrict__ idx,
                                        const float *__restrict__ gates,
                                        const float *__restrict__ dgates,
                                        float *__restrict__ dlogits, int T, int E, int k) {
  GRID_STRIDE(t, T) {
    const float *p = probs + t * E;
    float dot = 0.0f;
    for (int j = 0; j < k; j++)
      dot = fmaf(gates[t * k + j], dgates[t * k + j], dot);
    for (int e = 0; e < E; e++) {
      float dp = 0.0f;
      for (int j = 0; j < k; j++)
        if (idx[t * k + j] == e)
          dp = dgates[t * k + j];
      dlogits[t * E + e] = p[e] * (dp - dot);
    }
  }
}

/* One thread per expert: its pairs in pair order take its slots until the capacity is full; the
 * rest are dropped (token_slot -1); unfilled slots get slot_token -1. Every pair's token_slot is
 * written by the thread of its expert. The choices pass through shared memory in chunks. */
__global__ void __launch_bounds__(CGRTK_TRAIN_MAX_EXPERTS)
    moe_assign(const int *__restrict__ idx, int *__restrict__ counts, int *__restrict__ slot_token,
               int *__restrict__ token_slot, int pairs, int E, int C) {
  __shared__ int chunk[kAssignChunk];
  const int e = (int)threadIdx.x;
  int n = 0;
  for (int base = 0; base < pairs; base += kAssignChunk) {
    const int len = pairs - base < kAssignChunk ? pairs - base : kAssignChunk;
    __syncthreads(); /* the previous chunk is consumed */
    for (int i = (int)threadIdx.x; i < len; i += blockDim.x)
      chunk[i] = idx[base + i];
    __syncthreads();
    if (e >= E)
      continue;
    for (int i = 0; i < len; i++) {
      if (chunk[i] != e)
        continue;
      const int pair = base + i;
      if (n < C) {
        slot_token[e * C + n] = pair;
        token_slot[pair] = e * C + n;
      } else {
        token_slot[pair] = -1;
      }
      n++;
    }
  }
  if (e >= E)
    return;
  const int kept = n < C ? n : C;
  counts[e] = kept;
  for (int s = kept; s < C; s++)
    slot_token[e * C + s] = -1;
}

/* xs[slot] = x[token of the slot's pair], zero for an empty slot. */
__global__ void moe_gather(const float *__restrict__ x, const int *__restrict__ slot_token,
                           float *__restrict__ xs, int S, int d, int k) {
  GRID_STRIDE(i, (uint64_t)S * d) {
    const uint64_t s = i / d, c = i % d;
    const int pair = slot_token[s];
    xs[i] = pair >= 0 ? x[(uint64_t)(pair / k) * d + c] : 0.0f;
  }
}

/* y[t] = x[t] + sum over the token's kept choices j, in order, of gate_j * ys[slot_j]. */
__global__ void moe_combine(const float *__restrict__ x, const float *__restrict__ ys,
                            const float *__restrict__ gates, const int *__restrict__ token_slot,
                            float *__restrict__ y, int T, int d, int k) {
  GRID_STRIDE(i, (uint64_t)T * d) {
    const uint64_t t = i / d, c = i % d;
    float acc = x[i];
    for (int j = 0; j < k; j++) {
      const int s = token_slot[t * k + j];
      if (s >= 0)
        acc = fmaf(gates[t * k + j], ys[(uint64_t)s * d + c], acc);
    }
    y[i] = acc;
  }
}

/* One warp per pair: dgate = dy[token] . ys[slot] (lane l folds c = l, l + 32, ... in order, then
 * the xor butterfly), 0 for a dropped pair. */
__global__ void __launch_bounds__(kThreads)
    moe_dgates(const float *__restrict__ dy, const float *__restrict__ ys,
               const int *__restrict__ token_slot, float *__restrict__ dgates, int pairs, int d,
               int k) {
  const int lane = threadIdx.x & 31;
  const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x >> 5);
  for (uint64_t i = blockIdx.x * (uint64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
       i < (uint64_t)pairs; i += warps) { /* i is the same in the whole warp */
    const int s = token_slot[i];
    const float *g = dy + (i / k) * d;
    float acc = 0.0f;
    if (s >= 0) {
      const float *o = ys + (uint64_t)s * d;
      for (int c = lane; c < d; c += 32)
        acc = fmaf(g[c], o[c], acc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    if (lane == 0)
      dgates[i] = acc;
  }
}

/* dys[slot] = gate of the slot's pair * dy[its token], zero for an empty slot. */
__global__ void moe_dys(const float *__restrict__ dy, const float *__restrict__ gates,
                        const int *__restrict__ slot_token, float *__restrict__ dys, int S, int d,
                        int k) {
  GRID_STRIDE(i, (uint64_t)S * d) {
    const uint64_t s = i / d, c = i % d;
    const int pair = slot_token[s];
    dys[i] = pair >= 0 ? gates[pair] * dy[(uint64_t)(pair / k) * d + c] : 0.0f;
  }
}

/* dxn[t] = sum of dxs[slot_j] over the token's kept choices j, in order. */
__global__ void moe_scatter(const float *__restrict__ dxs, const int *__restrict__ token_slot,
                            float *__restrict__ dxn, int T, int d, int k) {
  GRID_STRIDE(i, (uint64_t)T * d) {
    const uint64_t t = i / d, c = i % d;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
      const int s = token_slot[t * k + j];
      if (s >= 0)
        acc += dxs[(uint64_t)s * d + c];
    }
    dxn[i] = acc;
  }
}

} // namespace

namespace cgrtk_train_impl {

int launch_router_forward(float *probs, int *idx, float *gates, int tokens, int experts, int top_k,
                          cudaStream_t s) {
  router_topk<<<grid_for((uint64_t)tokens), kThreads, 0, s>>>(probs, idx, gates, tokens, experts,
                                                              top_k);
  return (int)cudaGetLastError();
}

int launch_router_backward(const float *probs, const int *idx, const float *gates,
                           const float *dgates, float *dlogits, int tokens, int experts, int top_k,
                           cudaStream_t s) {
  router_softmax_backward<<<grid_for((uint64_t)tokens), kThreads, 0, s>>>(
      probs, idx, gates, dgates, dlogits, tokens, experts, top_k);
  return (int)cudaGetLastError();
}

int launch_moe_assign(const int *idx, int *counts, int *slot_token, int *token_slot, int tokens,
                      int experts, int top_k, int capacity, cudaStream_t s) {
  moe_assign<<<1, CGRTK_TRAIN_MAX_EXPERTS, 0, s>>>(idx, counts, slot_token, token_slot,
                                                   tokens * top_k, experts, capacity);
  return (int)cudaGetLastError();
}

int launch_moe_gather(const float *x, const int *slot_token, float *xs, int slots, int d, int top_k,
                      cudaStream_t s) {
  moe_gather<<<grid_for((uint64_t)slots * d), kThreads, 0, s>>>(x, slot_token, xs, slots, d, top_k);
  return (int)cudaGetLastError();
}

int launch_moe_combine(const float *x, const float *ys, const float *gates, const int *token_slot,
                       float *y, int tokens, int d, int top_k, cudaStream_t s) {
  moe_combine<<<grid_for((uint64_t)tokens * d), kThreads, 0, s>>>(x, ys, gates, token_slot, y,
                                                                  tokens, d, top_k);
  return (int)cudaGetLastError();
}

int launch_moe_output_grads(const float *dy, const float *ys, const float *gates,
                            const int *slot_token, const int *token_slot, float *dgates, float *dys,
                            int tokens, int slots, int d, int top_k, cudaStream_t s) {
  const int pairs = tokens * top_k;
  moe_dgates<<<grid_for((uint64_t)pairs * 32), kThreads, 0, s>>>(dy, ys, token_slot, dgates, pairs,
                                                                 d, top_k);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return (int)e;
  moe_dys<<<grid_for((uint64_t)slots * d), kThreads, 0, s>>>(dy, gates, slot_token, dys, slots, d,
                                                             top_k);
  return (int)cudaGetLastError();
}

int launch_moe_scatter(const float *dxs, const int *token_slot, float *dxn, int tokens, int d,
                       int top_k, cudaStream_t s) {
  moe_scatter<<<grid_for((uint64_t)tokens * d), kThreads, 0, s>>>(dxs, token_slot, dxn, tokens, d,
                                                                  top_k);
  return (int)cudaGetLastError();
}

} // namespace cgrtk_train_impl
