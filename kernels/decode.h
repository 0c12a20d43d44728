/*
 * decode.h - the `decode` reference workload: L decoder layers (RMSNorm, attention over a static
 * KV cache with RoPE, SwiGLU MLP) for T new tokens, bf16 activations and weights, fp32
 * accumulation. Projections go through cuBLASLt, everything else through our own kernels, except
 * at small row counts (see "Small rows" below).
 *
 * Shapes: d_model = heads * 64 (head dimension 64). Per layer: RMSNorm gains [d] (attention and
 * MLP), Wqkv [3d, d] (rows: q, then k, then v; head h at rows h*64 of each), Wo [d, d],
 * W_gate_up [2*ffn, d] (rows: gate, then up), W_down [d, ffn], all row-major [out, in] like
 * nn.Linear; a static KV cache K, V [cache_len, heads, 64] each, holding keys already rotated.
 * The hidden state is one static buffer [max_tokens, d] bf16; every call works on its first
 * `rows` rows, in place. New token i sits at position cache_len + i and attends to the whole
 * cache and to new tokens 0..i (causal); the new tokens' K/V are never appended to the cache, so
 * every step is independent and reproducible.
 *
 * Every value the workload starts from (weights, cache, staged input) is a pure function of
 * (seed, tensor id, index), computed on the device by the inline functions below; the host can
 * call the same functions to regenerate any value (the tests build their reference that way).
 * Each such value is a small integer times a power of two, so it is exact in bf16 and in float.
 *
 * Calls that enqueue work (stage, attn, mlp, read) never synchronize, never allocate with
 * cudaMalloc and never read device memory on the host, so they can be captured into a CUDA graph.
 * Each attn or mlp call allocates its temporaries with one cudaMallocAsync on the call's stream
 * (sub-buffers 256-byte aligned) and frees them with one cudaFreeAsync before returning: one
 * graph memory-alloc and one memory-free node per call under capture. One workload holds one
 * cuBLASLt handle and one 32 MiB workspace: drive it from one stream at a time.
 *
 * Projection algorithms: each (projection, rows) pair runs one cuBLASLt algorithm, fixed for the
 * workload's lifetime once chosen, so a call gives the same bits eagerly and replayed. Only
 * algorithms whose split-K reduction, if any, runs from the workspace in a fixed order (reduction
 * schemes NONE, COMPUTE_TYPE, OUTPUT_TYPE; never INPLACE, which uses atomics) are considered.
 * cgrtk_decode_tune times cuBLASLt's heuristic candidates and keeps the fastest; create tunes
 * rows 1..8, the powers of two up to max_tokens and max_tokens (those above the GEMV limit).
 * At a row count never tuned, the first call takes the heuristic's first choice and keeps it.
 * Choices are per workload: two workloads of one configuration may time differently and so
 * differ in rounding at tuned row counts (never at untuned ones).
 *
 * Small rows, opt-in: with CGRTK_DECODE_GEMV_ROWS=N in the environment (1..8; default 0: every
 * projection through cuBLAS, the workload cgrt bench measures), at rows <= N (lowered if shared
 * memory is short) the projections run as our own GEMV kernels instead of cuBLAS, as decode
 * engines do: for these GEMV-like shapes they read each weight once for all
 * rows at full bandwidth and fuse the neighbouring work. attn is then 3 kernels (RMSNorm + Wqkv
 * + RoPE, attention, Wo + residual add) and mlp 2 (RMSNorm + W_gate_up + SwiGLU, W_down +
 * residual add); above, attn is RMSNorm, cuBLAS, RoPE, attention, cuBLAS and mlp RMSNorm,
 * cuBLAS, SwiGLU, cuBLAS. Both paths are deterministic, without atomics, and give the same bits
 * eagerly and replayed (same kernels, same launch configuration for the same rows); they differ
 * from each other by rounding only. On the GEMV path a row's result does not depend on the row
 * count at all (padding rows change no bit of the real rows). Attention spreads each (head,
 * token) over a cluster of 4 blocks at rows <= 8 on sm_90+ (one block otherwise), combining the
 * partial softmax sums in a fixed order.
 * On sm_90+ our kernels within one call are chained by programmatic dependent launch: a kernel
 * may start while its predecessor finishes, prefetches its constant inputs (weights, KV cache)
 * into L2, then waits for the predecessor before it touches anything else. On the GEMV path the
 * last kernel of attn(l) also prefetches W_gate_up of layer l, and that of mlp(l) Wqkv of layer
 * l + 1, into L2 (hints only: no value depends on them).
 * Environment, read by cgrtk_decode_create (for measurements): CGRTK_DECODE_GEMV_ROWS=N (0..8;
 * 0, the default: always cuBLAS), CGRTK_DECODE_PDL=0 (no programmatic dependent launch),
 * CGRTK_DECODE_PREFETCH=0 (no cross-call L2 prefetch), CGRTK_DECODE_TUNE=0 (no tuning at create:
 * every row count takes the heuristic's first choice), CGRTK_DECODE_TEMPS=workspace (the calls'
 * temporaries carved from one cudaMalloc'ed buffer of cgrtk_decode_temp_bytes(max_tokens) bytes
 * made at create, in place of the cudaMallocAsync pair above: no graph memory nodes, the same
 * addresses in every call and every graph; docs/decisions.md, issue 43, session 46).
 *
 * Errors: 0, a cudaError_t (positive, below CGRTK_CUBLAS_ERROR_BASE), or
 * CGRTK_CUBLAS_ERROR_BASE + a cublasStatus_t; cgrtk_decode_strerror() names either.
 * No CUDA header is needed to use this file: streams are void * (cudaStream_t).
 */
#ifndef CGRT_KERNELS_DECODE_H
#define CGRT_KERNELS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Shape of a decode workload. Defaults (cgrtk_decode_default_cfg): 12 layers, d_model 1024,
 * 16 heads, ffn 2816, cache_len 512, max_tokens 512, seed 1. d_model must be heads * 64, ffn a
 * multiple of 8, and cache_len + max_tokens at most CGRTK_DECODE_MAX_KEYS. */
struct cgrtk_decode_cfg {
  int layers;
  int d_model;
  int heads;
  int ffn;
  int cache_len;  /* positions in the static KV cache */
  int max_tokens; /* capacity of the hidden buffer, in rows */
  uint64_t seed;  /* every initial value derives from it */
};

typedef struct cgrtk_decode cgrtk_decode;

#define CGRTK_DECODE_HEAD_DIM   64
#define CGRTK_DECODE_MAX_KEYS   8192 /* cache_len + max_tokens at most */
#define CGRTK_DECODE_GEMV_ROWS  8    /* largest row count of the small-row GEMV path */
#define CGRTK_DECODE_RMS_EPS    1e-5f
#define CGRTK_DECODE_ROPE_THETA 10000.0
#define CGRTK_DECODE_WORKSPACE  (32u << 20) /* bytes of cuBLASLt workspace */
#define CGRTK_CUBLAS_ERROR_BASE 0x10000
#define CGRTK_CUBLAS_ERROR(st)  (CGRTK_CUBLAS_ERROR_BASE + (int)(st))

/* Fill *cfg with the defaults above. */
void cgrtk_decode_default_cfg(struct cgrtk_decode_cfg *cfg);

/*
 * Create a workload on the current device: allocate (cudaMalloc) and initialize every weight,
 * the KV cache, the hidden buffer (zeroed), a RoPE table and a 32 MiB cuBLASLt workspace; choose
 * the small-row limit and the launch options (see above); create the cuBLASLt handle; tune the
 * projections (cgrtk_decode_tune) at rows 1..8, the powers of two up to max_tokens and
 * max_tokens, skipping rows the GEMV path serves, unless CGRTK_DECODE_TUNE=0 (this takes a
 * fraction of a second to a few seconds); raise the device's default memory pool release
 * threshold to UINT64_MAX so stream-ordered allocations stay cheap. Synchronizes before it returns
 * (never call it while a stream of this device is capturing in global mode).
 * On failure returns nonzero, leaves *out NULL and writes a sentence naming the failing call or
 * the invalid field into err (if err is not NULL).
 */
int cgrtk_decode_create(cgrtk_decode **out, const struct cgrtk_decode_cfg *cfg, char *err,
                        size_t errlen);

/*
 * Choose, by timing, the cuBLASLt algorithm of each projection (Wqkv, Wo, W_gate_up, W_down) at
 * each of the n row counts rows[0..n) (each in [1, max_tokens]): up to 16 heuristic candidates
 * (deterministic reductions only, workspace at most CGRTK_DECODE_WORKSPACE) each run a few
 * batches over every layer's weights after an L2 flush, and the fastest (an earlier-ranked one
 * unless beaten by more than 2%) is kept. Row counts already tuned keep their choice; a row count
 * that already ran with the heuristic's choice gets the timed one from now on (graphs captured at
 * it before may then differ from later calls in rounding: tune before capturing). Independent of
 * the GEMV path (tunes the cuBLASLt path even at rows it serves). Allocates (cudaMalloc) scratch
 * and an L2-sized flush buffer, runs on a private stream and synchronizes it: never call it while
 * a stream is capturing in global mode, nor while work of w is pending (it uses w's workspace).
 * Does not touch the hidden buffer. Returns 0, or an error code with a sentence in err.
 */
int cgrtk_decode_tune(cgrtk_decode *w, const int64_t *rows, size_t n, char *err, size_t errlen);

/* 1 if every projection at `rows` runs a timed choice (cgrtk_decode_tune), else 0. */
int cgrtk_decode_tuned(const cgrtk_decode *w, int64_t rows);

/* The tuned projections' measured times at `rows` summed (one layer, microseconds, cold L2;
 * 0 if rows is not tuned). */
double cgrtk_decode_tuned_us(const cgrtk_decode *w, int64_t rows);

/* Free everything create allocated. NULL is a no-op. No work of w may still be pending. */
void cgrtk_decode_destroy(cgrtk_decode *w);

/* The configuration w was created with. */
const struct cgrtk_decode_cfg *cgrtk_decode_config(const cgrtk_decode *w);

/*
 * Stage one step's input: rows [0, tokens) of the hidden buffer get
 * cgrtk_decode_input_value(seed, step, row, col), rows [tokens, rows) are zeroed (padding).
 * Requires 0 <= tokens <= rows <= max_tokens. One kernel; capturable.
 */
int cgrtk_decode_stage(cgrtk_decode *w, int64_t tokens, int64_t rows, uint64_t step, void *stream);

/* Attention block of layer `layer` on the first `rows` rows, in place:
 * h += Wo . attention(RoPE(split(Wqkv . RMSNorm(h)))). rows = 0 is a no-op. */
int cgrtk_decode_attn(cgrtk_decode *w, int layer, int64_t rows, void *stream);

/* MLP block of layer `layer` on the first `rows` rows, in place:
 * h += W_down . (silu(gate) * up), [gate, up] = W_gate_up . RMSNorm(h). rows = 0 is a no-op. */
int cgrtk_decode_mlp(cgrtk_decode *w, int layer, int64_t rows, void *stream);

/* Enqueue a copy of the first `rows` rows of the hidden buffer (rows * d_model bf16 values,
 * 2 bytes each, row-major) to host_dst. The caller synchronizes the stream before reading. */
int cgrtk_decode_read(cgrtk_decode *w, int64_t rows, void *host_dst, void *stream);

/* The hidden buffer (device memory, max_tokens rows of cgrtk_decode_row_bytes each), owned by w. */
void *cgrtk_decode_hidden(cgrtk_decode *w);

/*
 * Makes the following attn/mlp launches read and write `hidden` (device memory of at least the
 * rows they run) instead of the buffer they used so far, and returns that one. For a host that
 * hands a module private copies of its buffer (cgrt's rebind = copy, verify): swap, launch, swap
 * back. Set the owned buffer back before cgrtk_decode_read, stage or destroy.
 */
void *cgrtk_decode_use_hidden(cgrtk_decode *w, void *hidden);

/* Bytes of one row of the hidden buffer: d_model * 2. */
size_t cgrtk_decode_row_bytes(const cgrtk_decode *w);

/* Approximate FLOPs of one forward over all layers at `rows` rows (GEMMs and attention). */
double cgrtk_decode_flops(const struct cgrtk_decode_cfg *cfg, int64_t rows);

/* Bytes of temporaries one attn or mlp call at `rows` rows requests from cudaMallocAsync in its
 * single allocation (the larger of the two; the allocator may round it up). */
size_t cgrtk_decode_temp_bytes(const struct cgrtk_decode_cfg *cfg, int64_t rows);

/* The largest row count at which attn and mlp take the small-row GEMV path on w (0: never). */
int cgrtk_decode_gemv_rows(const cgrtk_decode *w);

/* A sentence for a code returned by this workload (cudaError_t or CGRTK_CUBLAS_ERROR(...)). */
const char *cgrtk_decode_strerror(int rc);

/* ---------------------------------------------------------------- initial values
 * Shared by the device (initialization and stage kernels) and the host (tests, references).
 * Tensor ids: ((uint64_t)layer << 8) | CGRTK_DECODE_T_* for a layer's tensors,
 * ((uint64_t)step << 8) | CGRTK_DECODE_T_INPUT for a step's input. Indices are row-major
 * element offsets within the tensor (for the cache: (pos * heads + head) * 64 + dim). */
enum {
  CGRTK_DECODE_T_ATTN_NORM = 0, /* [d] gain */
  CGRTK_DECODE_T_MLP_NORM = 1,  /* [d] gain */
  CGRTK_DECODE_T_WQKV = 2,      /* [3d, d] */
  CGRTK_DECODE_T_WO = 3,        /* [d, d] */
  CGRTK_DECODE_T_WGATE_UP = 4,  /* [2 ffn, d] */
  CGRTK_DECODE_T_WDOWN = 5,     /* [d, ffn] */
  CGRTK_DECODE_T_KCACHE = 6,    /* [cache_len, heads, 64] */
  CGRTK_DECODE_T_VCACHE = 7,    /* [cache_len, heads, 64] */
  CGRTK_DECODE_T_INPUT = 8,     /* [rows, d], per step */
  CGRTK_DECODE_T_COUNT = 8      /* tensors per layer */
};

#if defined(__CUDACC__)
#define CGRTK_DECODE_INLINE static inline __host__ __device__
#else
#define CGRTK_DECODE_INLINE static inline
#endif

/* splitmix64's finalizer: a bijection of 64-bit words with good avalanche. */
CGRTK_DECODE_INLINE uint64_t cgrtk_decode_mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The key of one tensor: everything the hash needs except the element index. */
CGRTK_DECODE_INLINE uint64_t cgrtk_decode_tensor_key(uint64_t seed, uint64_t id) {
  return cgrtk_decode_mix(cgrtk_decode_mix(seed) ^ id);
}

/* Element `index` of a tensor: an integer in [-128, 127] / 128 times `scale` (a power of two),
 * or, for a gain (is_gain), 1 + an integer in [-8, 7] / 64. Exact in bf16. */
CGRTK_DECODE_INLINE float cgrtk_decode_value(uint64_t key, uint64_t index, int is_gain,
                                             float scale) {
  uint64_t h = cgrtk_decode_mix(key ^ index);
  if (is_gain)
    return 1.0f + (float)((int)(h >> 60) - 8) * (1.0f / 64.0f);
  return (float)((int)(h >> 56) - 128) * (1.0f / 128.0f) * scale;
}

/* The power of two s with s^2 in (t/2, 2t], t = 3 / fan_in: uniform weights in [-s, s) then
 * have a standard deviation near 1/sqrt(fan_in), so activations stay O(1) across layers. */
CGRTK_DECODE_INLINE float cgrtk_decode_weight_scale(int fan_in) {
  double t = 3.0 / (double)(fan_in > 0 ? fan_in : 1);
  double s = 1.0;
  while (s * s > 2.0 * t)
    s *= 0.5;
  return (float)s;
}

/* Element count, fan-in (0: not a projection) and gain flag of a layer tensor. */
CGRTK_DECODE_INLINE uint64_t cgrtk_decode_tensor_numel(const struct cgrtk_decode_cfg *cfg,
                                                       int tensor) {
  uint64_t d = (uint64_t)cfg->d_model, f = (uint64_t)cfg->ffn;
  switch (tensor) {
  case CGRTK_DECODE_T_ATTN_NORM:
  case CGRTK_DECODE_T_MLP_NORM:
    return d;
  case CGRTK_DECODE_T_WQKV:
    return 3 * d * d;
  case CGRTK_DECODE_T_WO:
    return d * d;
  case CGRTK_DECODE_T_WGATE_UP:
    return 2 * f * d;
  case CGRTK_DECODE_T_WDOWN:
    return d * f;
  case CGRTK_DECODE_T_KCACHE:
  case CGRTK_DECODE_T_VCACHE:
    return (uint64_t)cfg->cache_len * d;
  default:
    return 0;
  }
}

/* Scale of a layer tensor's values: 1/sqrt(fan_in)-like for projections, 1 for the cache. */
CGRTK_DECODE_INLINE float cgrtk_decode_tensor_scale(const struct cgrtk_decode_cfg *cfg,
                                                    int tensor) {
  switch (tensor) {
  case CGRTK_DECODE_T_WQKV:
  case CGRTK_DECODE_T_WO:
  case CGRTK_DECODE_T_WGATE_UP:
    return cgrtk_decode_weight_scale(cfg->d_model);
  case CGRTK_DECODE_T_WDOWN:
    return cgrtk_decode_weight_scale(cfg->ffn);
  default:
    return 1.0f;
  }
}

/* Initial value of element `index` of tensor `tensor` (CGRTK_DECODE_T_*, not INPUT) of `layer`. */
CGRTK_DECODE_INLINE float cgrtk_decode_init_value(const struct cgrtk_decode_cfg *cfg, int layer,
                                                  int tensor, uint64_t index) {
  uint64_t key = cgrtk_decode_tensor_key(cfg->seed, ((uint64_t)layer << 8) | (uint64_t)tensor);
  int gain = tensor == CGRTK_DECODE_T_ATTN_NORM || tensor == CGRTK_DECODE_T_MLP_NORM;
  return cgrtk_decode_value(key, index, gain, cgrtk_decode_tensor_scale(cfg, tensor));
}

/* Staged input of `step` at (row, col), for rows below the step's token count. */
CGRTK_DECODE_INLINE float cgrtk_decode_input_value(const struct cgrtk_decode_cfg *cfg,
                                                   uint64_t step, int64_t row, int64_t col) {
  uint64_t key = cgrtk_decode_tensor_key(cfg->seed, (step << 8) | (uint64_t)CGRTK_DECODE_T_INPUT);
  return cgrtk_decode_value(key, (uint64_t)(row * cfg->d_model + col), 0, 1.0f);
}

#ifdef __cplusplus
}
#endif

#endif
