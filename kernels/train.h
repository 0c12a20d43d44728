/*
 * train.h - the `train` reference workload (issue 4): L layers over M microbatches, forward,
 * backward and an SGD-with-momentum update, all fp32, whose layers exercise every module kind a
 * scoped backend selects. Bitwise reproducible: the same sequence of calls gives the same losses
 * and weights eagerly, replayed from one graph per module call, or from one whole-step graph.
 *
 * Network. The hidden state is [tokens, d] per microbatch. Every branch reads its input through
 * an RMSNorm without gain, n = x / sqrt(mean_row(x^2) + CGRTK_TRAIN_RMS_EPS) (pre-norm: branch
 * outputs stay O(1) however the residual stream grows). Layer l holds, in execution order:
 *   attn      (kind attn)     y = x + (softmax_causal(q k^T / 8) v) Wo^T,  [q k v] = n Wqkv^T
 *   mamba     (kind mamba)    a = sigmoid(n Wa^T), B = tanh(n Wb^T), C = tanh(n Wc^T) (Wscan
 *                             rows: Wa [d], Wb [N], Wc [N]); per channel c and state n:
 *                             h_t[c,s] = a_t[c] h_{t-1}[c,s] + B_t[s] n_t[c],
 *                             y_t[c] = x_t[c] + sum_s C_t[s] h_t[c,s]
 *   even l: mlp (kind mlp)    y = x + gelu(n W1^T) W2^T  (gelu: tanh approximation)
 *   odd l, the MoE layer, three modules sharing one norm:
 *     router     (moe_router)     n = rmsnorm(x); p = softmax(n Wr^T) over experts; the top_k
 *                                 experts of each token (ties: lower index first), gates = their
 *                                 p (no renormalization)
 *     preprocess (moe_preprocess) per expert, its (token, choice) pairs in token order fill its
 *                                 `capacity` slots; overflow pairs are dropped; slot inputs
 *                                 gathered from n, empty slots zero. With CGRTK_MOE_DROP it then
 *                                 copies the per-expert counts to the host and SYNCHRONIZES the
 *                                 stream (never capture it), so that the experts run on counted
 *                                 rows
 *     experts    (moe)            expert e: s -> gelu(s W1e^T) W2e^T on its slots;
 *                                 y = x + sum over the token's kept choices of gate * output
 *                 Backward runs experts, preprocess, router; the router's (the layer's last)
 *                 takes the gradient through the norm.
 * Loss (per microbatch, on the device): mean over tokens * d of (h - target)^2; its call also
 * seeds the gradient 2 (h - target) / (tokens * d). Update: for every parameter,
 * g = sum of the microbatches' gradients in microbatch order, v = momentum v + g, w -= lr v.
 *
 * State. Weights, momentum, one gradient buffer per microbatch, the hidden state and its gradient
 * at every module boundary per microbatch, the activations each (module, microbatch) saves for its
 * backward, the staged inputs and targets and the losses are static device buffers allocated by
 * create. forward(i, mb) reads boundary state of module i and writes the next; backward(i, mb)
 * reads what forward(i, mb) saved and the gradient left by backward(i + 1, mb) (or by loss(mb)),
 * writes the gradient for module i - 1 and writes (not adds) its parameters' gradients in
 * microbatch mb's gradient buffer. Any call order that respects these dependencies works.
 *
 * Calls that enqueue work (stage, forward, backward, loss, update) never synchronize, never
 * cudaMalloc and never read device memory on the host, so they can be captured, except forward of
 * a preprocess module with CGRTK_MOE_DROP. Backward calls take their temporaries (one allocation
 * per call) with cudaMallocAsync on the call's stream and free them before returning: graph
 * memory under capture. There are no atomics; every reduction has a fixed order and every launch
 * configuration depends only on the shapes; GEMMs go through cuBLAS in fp32 (default math, no
 * atomics, an explicit workspace set after every cublasSetStream). One workload holds one cuBLAS
 * handle and one workspace: drive it from one stream at a time.
 *
 * Errors: 0, a cudaError_t (positive, below CGRTK_CUBLAS_ERROR_BASE; cudaErrorInvalidValue for a
 * bad argument), or CGRTK_CUBLAS_ERROR_BASE + a cublasStatus_t; cgrtk_train_strerror() names it.
 * No CUDA header is needed to use this file: streams are void * (cudaStream_t).
 */
#ifndef CGRT_KERNELS_TRAIN_H
#define CGRT_KERNELS_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How the MoE preprocess treats expert capacity (the [host] moe_capacity of cgrt's config). */
enum cgrtk_moe_capacity {
  CGRTK_MOE_DROP_AND_PAD = 0, /* fixed capacity, overflow dropped, empty slots zero: sync-free */
  CGRTK_MOE_DROP = 1          /* overflow dropped, experts sized by counts read on the host */
};

/*
 * Shape of a train workload. Defaults (cgrtk_train_default_cfg): 4 layers, 2 microbatches,
 * 64 tokens per microbatch, d_model 256, 4 heads, ffn 512 (the MLP's and each expert's hidden
 * size), 4 experts, top_k 2, CGRTK_MOE_DROP_AND_PAD, mamba_state 16, lr 1e-4, momentum 0.9,
 * seed 1 (measured on an H200: lr 1e-3 already diverges on fresh batches, 1e-4 brings one
 * batch's loss from 3.1 to 0.5 in 20 steps). d_model must be heads * 64; tokens at most
 * CGRTK_TRAIN_MAX_TOKENS; 2 <= experts <= CGRTK_TRAIN_MAX_EXPERTS; 1 <= top_k <= experts;
 * 1 <= mamba_state <= CGRTK_TRAIN_MAX_STATE; lr >= 0 and 0 <= momentum < 1.
 */
struct cgrtk_train_cfg {
  int layers;
  int microbatches;
  int tokens; /* per microbatch */
  int d_model;
  int heads;
  int ffn;
  int experts;
  int top_k;
  int capacity_mode; /* enum cgrtk_moe_capacity */
  int mamba_state;
  float lr;
  float momentum;
  uint64_t seed; /* every initial value, input and target derives from it */
};

typedef struct cgrtk_train cgrtk_train;

#define CGRTK_TRAIN_HEAD_DIM    64
#define CGRTK_TRAIN_MAX_TOKENS  4096 /* attention keeps one row of scores in shared memory */
#define CGRTK_TRAIN_MAX_EXPERTS 64   /* the router's top-k keeps a 64-bit mask */
#define CGRTK_TRAIN_MAX_STATE   64
#define CGRTK_TRAIN_WORKSPACE   (32u << 20) /* bytes of cuBLAS workspace */
#define CGRTK_TRAIN_RMS_EPS     1e-5f
#ifndef CGRTK_CUBLAS_ERROR_BASE /* the same codes as decode.h */
#define CGRTK_CUBLAS_ERROR_BASE 0x10000
#define CGRTK_CUBLAS_ERROR(st)  (CGRTK_CUBLAS_ERROR_BASE + (int)(st))
#endif

/* Module kinds, the values of cgrt_kind (core/include/cgrt/cgrt.h). */
enum {
  CGRTK_TRAIN_KIND_ATTN = 0,
  CGRTK_TRAIN_KIND_MLP = 1,
  CGRTK_TRAIN_KIND_MOE = 2,
  CGRTK_TRAIN_KIND_MOE_ROUTER = 3,
  CGRTK_TRAIN_KIND_MOE_PREPROCESS = 4,
  CGRTK_TRAIN_KIND_MAMBA = 5,
  CGRTK_TRAIN_KIND_OTHER = 6
};

/* Fill *cfg with the defaults above. */
void cgrtk_train_default_cfg(struct cgrtk_train_cfg *cfg);

/*
 * Create a workload on the current device: allocate (cudaMalloc) every buffer named above and a
 * 32 MiB cuBLAS workspace, zero them, initialize the weights (cgrtk_train_init_value), create the
 * cuBLAS handle; allocate a small pinned host buffer for DROP mode's counts; raise the device's
 * default memory pool release threshold to UINT64_MAX. Synchronizes before it returns (never
 * call it while a stream of this device is capturing in global mode). On failure returns nonzero,
 * leaves *out NULL and writes a sentence naming the failing call or the invalid field into err
 * (if err is not NULL).
 */
int cgrtk_train_create(cgrtk_train **out, const struct cgrtk_train_cfg *cfg, char *err,
                       size_t errlen);

/* Free everything create allocated. NULL is a no-op. No work of t may still be pending. */
void cgrtk_train_destroy(cgrtk_train *t);

/* The configuration t was created with. */
const struct cgrtk_train_cfg *cgrtk_train_config(const cgrtk_train *t);

/* Number of modules per microbatch: 3 per even layer, 5 per odd layer. */
int cgrtk_train_num_modules(const cgrtk_train *t);

/*
 * Module i (0 <= i < num_modules, in execution order): its name ("layer3.moe_router"), copied
 * into name (truncated to len - 1 characters, always terminated when len > 0), its kind
 * (CGRTK_TRAIN_KIND_*) and layer. Any output pointer may be NULL. For an i out of range, name is
 * "", kind -1 and layer -1.
 */
void cgrtk_train_module(const cgrtk_train *t, int i, char *name, size_t len, int *kind, int *layer);

/*
 * Stage one step: the input (boundary 0) and target of every microbatch get
 * cgrtk_train_input_value / cgrtk_train_target_value of `step`; every gradient buffer is zeroed.
 * Kernels and a memset, no synchronization: capturable (cgrt runs it eagerly as `prepare`).
 */
int cgrtk_train_stage(cgrtk_train *t, uint64_t step, void *stream);

/* Forward of module `module` for microbatch `microbatch` (see the header comment). */
int cgrtk_train_forward(cgrtk_train *t, int module, int microbatch, void *stream);

/* Backward of module `module` for microbatch `microbatch` (see the header comment). */
int cgrtk_train_backward(cgrtk_train *t, int module, int microbatch, void *stream);

/* Loss of `microbatch` (kept on the device) and the gradient seed of its last boundary. */
int cgrtk_train_loss(cgrtk_train *t, int microbatch, void *stream);

/* The optimizer step over every parameter (one kernel). */
int cgrtk_train_update(cgrtk_train *t, void *stream);

/* Enqueue a copy of the microbatches' losses (microbatches floats) to host_losses. The caller
 * synchronizes the stream before reading. Not capturable (pageable host memory). */
int cgrtk_train_read_loss(cgrtk_train *t, float *host_losses, void *stream);

/* Number of parameters: every layer's tensors concatenated, layer by layer, in CGRTK_TRAIN_T_*
 * order within a layer, absent tensors skipped (cgrtk_train_tensor_offset). */
size_t cgrtk_train_param_count(const cgrtk_train *t);

/* Enqueue a copy of all parameters (count must be cgrtk_train_param_count) to host. The caller
 * synchronizes the stream before reading. */
int cgrtk_train_read_params(cgrtk_train *t, float *host, size_t count, void *stream);

/* Overwrite all parameters (count must be cgrtk_train_param_count) from host; host may be reused
 * when the call returns. Momentum is left as it is. For tests (finite differences). */
int cgrtk_train_write_params(cgrtk_train *t, const float *host, size_t count, void *stream);

/* Enqueue a copy of microbatch `microbatch`'s parameter gradients (count must be
 * cgrtk_train_param_count; same layout as the parameters) to host. The update consumes their
 * float sum in microbatch order. The caller synchronizes the stream before reading. */
int cgrtk_train_read_grads(cgrtk_train *t, int microbatch, float *host, size_t count, void *stream);

/* Expert capacity per microbatch: ceil(tokens * top_k * 1.25 / experts). */
int cgrtk_train_capacity(const struct cgrtk_train_cfg *cfg);

/* Approximate FLOPs of one step (forward and backward of every microbatch, GEMMs and attention;
 * the MoE counted at full capacity). */
double cgrtk_train_flops(const struct cgrtk_train_cfg *cfg);

/* A sentence for a code returned by this workload (cudaError_t or CGRTK_CUBLAS_ERROR(...)). */
const char *cgrtk_train_strerror(int rc);

/* ---------------------------------------------------------------- initial values
 * Shared by the device (initialization and stage kernels) and the host (tests, references).
 * Tensor ids: ((uint64_t)layer << 8) | CGRTK_TRAIN_T_* for a layer's tensors,
 * ((step << 16 | microbatch) << 8) | CGRTK_TRAIN_T_INPUT or _TARGET for staged values. Indices
 * are row-major element offsets within the tensor. Every value is a small integer times a power
 * of two. */
enum {
  CGRTK_TRAIN_T_WQKV = 0,    /* [3d, d] rows q, k, v; head h at rows h*64 of each */
  CGRTK_TRAIN_T_WO = 1,      /* [d, d] */
  CGRTK_TRAIN_T_WSCAN = 2,   /* [d + 2 mamba_state, d] rows Wa, Wb, Wc */
  CGRTK_TRAIN_T_W1 = 3,      /* [ffn, d], even layers */
  CGRTK_TRAIN_T_W2 = 4,      /* [d, ffn], even layers */
  CGRTK_TRAIN_T_WROUTER = 5, /* [experts, d], odd layers */
  CGRTK_TRAIN_T_WEXP1 = 6,   /* [experts, ffn, d], odd layers */
  CGRTK_TRAIN_T_WEXP2 = 7,   /* [experts, d, ffn], odd layers */
  CGRTK_TRAIN_T_COUNT = 8,   /* tensors per layer */
  CGRTK_TRAIN_T_INPUT = 8,   /* [tokens, d] per (step, microbatch) */
  CGRTK_TRAIN_T_TARGET = 9   /* [tokens, d] per (step, microbatch) */
};

#if defined(__CUDACC__)
#define CGRTK_TRAIN_INLINE static inline __host__ __device__
#else
#define CGRTK_TRAIN_INLINE static inline
#endif

/* splitmix64's finalizer: a bijection of 64-bit words with good avalanche. */
CGRTK_TRAIN_INLINE uint64_t cgrtk_train_mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The key of one tensor: everything the hash needs except the element index. */
CGRTK_TRAIN_INLINE uint64_t cgrtk_train_tensor_key(uint64_t seed, uint64_t id) {
  return cgrtk_train_mix(cgrtk_train_mix(seed) ^ id);
}

/* Element `index` of a tensor: an integer in [-128, 127] / 128 times `scale` (a power of two). */
CGRTK_TRAIN_INLINE float cgrtk_train_value(uint64_t key, uint64_t index, float scale) {
  uint64_t h = cgrtk_train_mix(key ^ index);
  return (float)((int)(h >> 56) - 128) * (1.0f / 128.0f) * scale;
}

/* The power of two s with s^2 in (t/2, 2t], t = 3 / fan_in: uniform weights in [-s, s) then
 * have a standard deviation near 1/sqrt(fan_in). */
CGRTK_TRAIN_INLINE float cgrtk_train_weight_scale(int fan_in) {
  double t = 3.0 / (double)(fan_in > 0 ? fan_in : 1);
  double s = 1.0;
  while (s * s > 2.0 * t)
    s *= 0.5;
  return (float)s;
}

/* Whether layer `layer` is a MoE layer (odd) rather than an MLP layer (even). */
CGRTK_TRAIN_INLINE int cgrtk_train_is_moe_layer(int layer) {
  return layer % 2 == 1;
}

/* Element count of a layer tensor; 0 for a tensor the layer does not have. */
CGRTK_TRAIN_INLINE uint64_t cgrtk_train_tensor_numel(const struct cgrtk_train_cfg *cfg, int layer,
                                                     int tensor) {
  uint64_t d = (uint64_t)cfg->d_model, f = (uint64_t)cfg->ffn, e = (uint64_t)cfg->experts;
  int moe = cgrtk_train_is_moe_layer(layer);
  switch (tensor) {
  case CGRTK_TRAIN_T_WQKV:
    return 3 * d * d;
  case CGRTK_TRAIN_T_WO:
    return d * d;
  case CGRTK_TRAIN_T_WSCAN:
    return (d + 2 * (uint64_t)cfg->mamba_state) * d;
  case CGRTK_TRAIN_T_W1:
  case CGRTK_TRAIN_T_W2:
    return moe ? 0 : f * d;
  case CGRTK_TRAIN_T_WROUTER:
    return moe ? e * d : 0;
  case CGRTK_TRAIN_T_WEXP1:
  case CGRTK_TRAIN_T_WEXP2:
    return moe ? e * f * d : 0;
  default:
    return 0;
  }
}

/* Offset of a layer tensor in the concatenation of all parameters (cgrtk_train_read_params). */
CGRTK_TRAIN_INLINE uint64_t cgrtk_train_tensor_offset(const struct cgrtk_train_cfg *cfg, int layer,
                                                      int tensor) {
  uint64_t off = 0;
  for (int l = 0; l <= layer; l++)
    for (int t = 0; t < CGRTK_TRAIN_T_COUNT && (l < layer || t < tensor); t++)
      off += cgrtk_train_tensor_numel(cfg, l, t);
  return off;
}

/* Scale of a layer tensor's values: 1/sqrt(fan_in)-like; halved for the projections that end a
 * residual branch and quartered for the scan's (its output is a product of three projections of
 * its input), so that the residual stream stays O(1) through the layers. */
CGRTK_TRAIN_INLINE float cgrtk_train_tensor_scale(const struct cgrtk_train_cfg *cfg, int tensor) {
  switch (tensor) {
  case CGRTK_TRAIN_T_WO:
    return 0.5f * cgrtk_train_weight_scale(cfg->d_model);
  case CGRTK_TRAIN_T_WSCAN:
    return 0.25f * cgrtk_train_weight_scale(cfg->d_model);
  case CGRTK_TRAIN_T_W2:
  case CGRTK_TRAIN_T_WEXP2:
    return 0.5f * cgrtk_train_weight_scale(cfg->ffn);
  default:
    return cgrtk_train_weight_scale(cfg->d_model);
  }
}

/* Initial value of element `index` of tensor `tensor` (CGRTK_TRAIN_T_*, below _COUNT) of `layer`.
 */
CGRTK_TRAIN_INLINE float cgrtk_train_init_value(const struct cgrtk_train_cfg *cfg, int layer,
                                                int tensor, uint64_t index) {
  uint64_t key = cgrtk_train_tensor_key(cfg->seed, ((uint64_t)layer << 8) | (uint64_t)tensor);
  return cgrtk_train_value(key, index, cgrtk_train_tensor_scale(cfg, tensor));
}

/* Key of a staged tensor (CGRTK_TRAIN_T_INPUT or _TARGET) of (step, microbatch). */
CGRTK_TRAIN_INLINE uint64_t cgrtk_train_staged_key(const struct cgrtk_train_cfg *cfg, uint64_t step,
                                                   int microbatch, int tensor) {
  uint64_t id = (((step << 16) | (uint64_t)(uint32_t)microbatch) << 8) | (uint64_t)tensor;
  return cgrtk_train_tensor_key(cfg->seed, id);
}

/* Staged input of (step, microbatch) at (row, col): values in [-1, 1). */
CGRTK_TRAIN_INLINE float cgrtk_train_input_value(const struct cgrtk_train_cfg *cfg, uint64_t step,
                                                 int microbatch, int64_t row, int64_t col) {
  uint64_t key = cgrtk_train_staged_key(cfg, step, microbatch, CGRTK_TRAIN_T_INPUT);
  return cgrtk_train_value(key, (uint64_t)(row * cfg->d_model + col), 1.0f);
}

/* Staged target of (step, microbatch) at (row, col): values in [-0.5, 0.5). */
CGRTK_TRAIN_INLINE float cgrtk_train_target_value(const struct cgrtk_train_cfg *cfg, uint64_t step,
                                                  int microbatch, int64_t row, int64_t col) {
  uint64_t key = cgrtk_train_staged_key(cfg, step, microbatch, CGRTK_TRAIN_T_TARGET);
  return cgrtk_train_value(key, (uint64_t)(row * cfg->d_model + col), 0.5f);
}

#ifdef __cplusplus
}
#endif

#endif
