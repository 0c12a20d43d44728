/*
 * decode.cu - the host side of the `decode` workload (decode.h): creation, staging, the
 * attention and MLP blocks as sequences of cuBLAS GEMMs and our kernels (decode_kernels.cu), or,
 * for small row counts, of our fused GEMV kernels alone.
 *
 * Row-major GEMMs through column-major cuBLAS: Y[T, N] = X[T, K] . W[N, K]^T is, read
 * column-major, Y^T (N x T, ld N) = W (as stored: K x N col-major, transposed: OP_T, ld K)
 * times X^T (K x T col-major, OP_N, ld K). The residual add is folded in with beta = 1 and
 * C = the hidden buffer.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "decode.h"

typedef __nv_bfloat16 bf16;

/* Defined in decode_kernels.cu; each returns 0 or the launch's cudaError_t. */
namespace cgrtk_decode_impl {
int launch_init(bf16 *dst, uint64_t n, uint64_t key, int is_gain, float scale, cudaStream_t s);
int launch_stage(bf16 *h, int d, int tokens, int rows, uint64_t key, cudaStream_t s);
int launch_rmsnorm(const bf16 *x, const bf16 *gain, bf16 *y, int rows, int d, cudaStream_t s);
int launch_rope(bf16 *qkv, const float2 *rope, int rows, int heads, cudaStream_t s, bool pdl);
int launch_attention(const bf16 *qkv, const bf16 *kcache, const bf16 *vcache, bf16 *out, int rows,
                     int heads, int cache_len, cudaStream_t s, bool pdl, bool split);
int kernels_binary_version(int *version);
int launch_swiglu(const bf16 *gate_up, bf16 *act, int rows, int ffn, cudaStream_t s);
int gemv_setup(int bytes);
int launch_gemv_qkv(const bf16 *h, const bf16 *gain, const bf16 *wqkv, bf16 *qkv,
                    const float2 *rope, int rows, int d, cudaStream_t s, bool pdl);
int launch_gemv_gate_up(const bf16 *h, const bf16 *gain, const bf16 *wgu, bf16 *act, int rows,
                        int d, int ffn, cudaStream_t s, bool pdl);
int launch_gemv_residual(const bf16 *x, const bf16 *w, bf16 *y, int rows, int n, int k,
                         const void *next, size_t next_bytes, cudaStream_t s, bool pdl);
} // namespace cgrtk_decode_impl

using namespace cgrtk_decode_impl;

struct layer_weights {
  bf16 *t[CGRTK_DECODE_T_COUNT]; /* indexed by CGRTK_DECODE_T_* */
};

struct cgrtk_decode {
  struct cgrtk_decode_cfg cfg;
  struct layer_weights *layers;
  bf16 *params; /* every layer's tensors, one allocation */
  bf16 *hidden; /* [max_tokens, d] */
  float2 *rope; /* [max_tokens, 32]: (cos, sin) of the angle at position cache_len + t, pair j */
  void *workspace;
  cublasHandle_t blas;
  int gemv_rows; /* attn and mlp take the GEMV path at rows <= gemv_rows */
  int sm90;      /* an sm_90+ device running an sm_90+ binary: clusters, griddepcontrol */
  int pdl;       /* programmatic dependent launch between our kernels of one call */
  int prefetch;  /* a call's last GEMV prefetches the next call's first weights into L2 */
};

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static size_t align256(size_t n) {
  return (n + 255) & ~(size_t)255;
}

extern "C" void cgrtk_decode_default_cfg(struct cgrtk_decode_cfg *cfg) {
  cfg->layers = 12;
  cfg->d_model = 1024;
  cfg->heads = 16;
  cfg->ffn = 2816;
  cfg->cache_len = 512;
  cfg->max_tokens = 512;
  cfg->seed = 1;
}

static int check_cfg(const struct cgrtk_decode_cfg *c, char *err, size_t errlen) {
  const char *why = NULL;
  if (c->layers < 1)
    why = "layers must be at least 1";
  else if (c->heads < 1 || c->d_model != c->heads * CGRTK_DECODE_HEAD_DIM)
    why = "d_model must be heads * 64 (the head dimension is 64)";
  else if (c->ffn < 8 || c->ffn % 8 != 0)
    why = "ffn must be a positive multiple of 8";
  else if (c->cache_len < 0 || c->max_tokens < 1)
    why = "cache_len must be >= 0 and max_tokens >= 1";
  else if ((int64_t)c->cache_len + c->max_tokens > CGRTK_DECODE_MAX_KEYS)
    why = "cache_len + max_tokens must be at most CGRTK_DECODE_MAX_KEYS (8192)";
  if (!why)
    return 0;
  set_err(err, errlen,
          "decode config invalid: %s (layers %d, d_model %d, heads %d, ffn %d, cache_len %d, "
          "max_tokens %d)",
          why, c->layers, c->d_model, c->heads, c->ffn, c->cache_len, c->max_tokens);
  return (int)cudaErrorInvalidValue;
}

#define CUDA_TRY(call, what)                                                                       \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      rc = (int)e_;                                                                                \
      set_err(err, errlen, "decode create: %s failed: %s", what, cudaGetErrorString(e_));          \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

#define BLAS_TRY(call, what)                                                                       \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      rc = CGRTK_CUBLAS_ERROR(s_);                                                                 \
      set_err(err, errlen, "decode create: %s failed: %s", what, cublasGetStatusString(s_));       \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

/* An integer option from the environment, clamped to [lo, hi]; def when unset or empty. */
static int env_int(const char *name, int def, int lo, int hi) {
  const char *v = getenv(name);
  if (!v || !*v)
    return def;
  long x = strtol(v, NULL, 10);
  return x < lo ? lo : x > hi ? hi : (int)x;
}

/* (cos, sin) per (new token t, pair j), computed in double like the tests' reference. */
static float2 *rope_table(const struct cgrtk_decode_cfg *c) {
  const int half = CGRTK_DECODE_HEAD_DIM / 2;
  float2 *t = (float2 *)malloc((size_t)c->max_tokens * half * sizeof(float2));
  if (!t)
    return NULL;
  for (int r = 0; r < c->max_tokens; r++)
    for (int j = 0; j < half; j++) {
      const double a = (double)(c->cache_len + r) *
                       pow(CGRTK_DECODE_ROPE_THETA, -(2.0 * j) / CGRTK_DECODE_HEAD_DIM);
      t[(size_t)r * half + j] = make_float2((float)cos(a), (float)sin(a));
    }
  return t;
}

extern "C" int cgrtk_decode_create(cgrtk_decode **out, const struct cgrtk_decode_cfg *cfg,
                                   char *err, size_t errlen) {
  cgrtk_decode *w = NULL;
  cudaStream_t s = NULL;
  cudaMemPool_t pool;
  uint64_t threshold = UINT64_MAX;
  size_t total = 0, off = 0, hidden_bytes = 0, rope_bytes = 0;
  float2 *rope_host = NULL;
  int dev = 0, rc = 0, major = 0, smem_optin = 0, widest = 0, binary = 0;

  if (!out || !cfg) {
    set_err(err, errlen, "decode create: out and cfg must not be NULL");
    return (int)cudaErrorInvalidValue;
  }
  *out = NULL;
  if ((rc = check_cfg(cfg, err, errlen)))
    return rc;
  w = (cgrtk_decode *)calloc(1, sizeof(*w));
  if (w)
    w->layers = (struct layer_weights *)calloc((size_t)cfg->layers, sizeof(*w->layers));
  if (!w || !w->layers) {
    rc = (int)cudaErrorMemoryAllocation;
    set_err(err, errlen, "decode create: out of host memory");
    goto fail;
  }
  w->cfg = *cfg;

  /* Keep freed stream-ordered memory in the pool: cudaMallocAsync in attn/mlp stays cheap. */
  CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
  CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
           "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");

  for (int l = 0; l < cfg->layers; l++)
    for (int t = 0; t < CGRTK_DECODE_T_COUNT; t++)
      total += align256(cgrtk_decode_tensor_numel(cfg, t) * sizeof(bf16));
  CUDA_TRY(cudaMalloc((void **)&w->params, total), "cudaMalloc of the decode weights and cache");
  for (int l = 0; l < cfg->layers; l++)
    for (int t = 0; t < CGRTK_DECODE_T_COUNT; t++) {
      w->layers[l].t[t] = (bf16 *)((char *)w->params + off);
      off += align256(cgrtk_decode_tensor_numel(cfg, t) * sizeof(bf16));
    }
  hidden_bytes = (size_t)cfg->max_tokens * cfg->d_model * sizeof(bf16);
  CUDA_TRY(cudaMalloc((void **)&w->hidden, hidden_bytes), "cudaMalloc of the hidden buffer");
  CUDA_TRY(cudaMalloc(&w->workspace, CGRTK_DECODE_WORKSPACE), "cudaMalloc of the cuBLAS workspace");
  rope_bytes = (size_t)cfg->max_tokens * (CGRTK_DECODE_HEAD_DIM / 2) * sizeof(float2);
  CUDA_TRY(cudaMalloc((void **)&w->rope, rope_bytes), "cudaMalloc of the RoPE table");

  /* The small-row GEMV path: its blocks hold rows * max(d, ffn) bf16 in shared memory. */
  CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
           "cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor)");
  CUDA_TRY(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
           "cudaDeviceGetAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)");
  widest = cfg->d_model > cfg->ffn ? cfg->d_model : cfg->ffn;
  /* Projections go through cuBLAS unless the small-row GEMV path is asked for. */
  w->gemv_rows = env_int("CGRTK_DECODE_GEMV_ROWS", 0, 0, CGRTK_DECODE_GEMV_ROWS);
  while (w->gemv_rows > 0 && (int64_t)w->gemv_rows * widest * (int64_t)sizeof(bf16) > smem_optin)
    w->gemv_rows--;
  if (w->gemv_rows > 0 && (int64_t)w->gemv_rows * widest * (int64_t)sizeof(bf16) > 48 * 1024)
    CUDA_TRY((cudaError_t)gemv_setup(w->gemv_rows * widest * (int)sizeof(bf16)),
             "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) of the GEMV "
             "kernels");
  CUDA_TRY((cudaError_t)kernels_binary_version(&binary), "cudaFuncGetAttributes of the kernels");
  w->sm90 = major >= 9 && binary >= 90;
  w->pdl = w->sm90 && env_int("CGRTK_DECODE_PDL", 1, 0, 1);
  w->prefetch = env_int("CGRTK_DECODE_PREFETCH", 1, 0, 1);

  /* A private stream: initialization must not touch the legacy default stream. */
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  for (int l = 0; l < cfg->layers; l++)
    for (int t = 0; t < CGRTK_DECODE_T_COUNT; t++) {
      uint64_t key = cgrtk_decode_tensor_key(cfg->seed, ((uint64_t)l << 8) | (uint64_t)t);
      int gain = t == CGRTK_DECODE_T_ATTN_NORM || t == CGRTK_DECODE_T_MLP_NORM;
      CUDA_TRY((cudaError_t)launch_init(w->layers[l].t[t], cgrtk_decode_tensor_numel(cfg, t), key,
                                        gain, cgrtk_decode_tensor_scale(cfg, t), s),
               "the weight initialization kernel launch");
    }
  CUDA_TRY(cudaMemsetAsync(w->hidden, 0, hidden_bytes, s), "cudaMemsetAsync of the hidden buffer");
  rope_host = rope_table(cfg);
  if (!rope_host) {
    rc = (int)cudaErrorMemoryAllocation;
    set_err(err, errlen, "decode create: out of host memory");
    goto fail;
  }
  CUDA_TRY(cudaMemcpyAsync(w->rope, rope_host, rope_bytes, cudaMemcpyHostToDevice, s),
           "cudaMemcpyAsync of the RoPE table");
  CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize after the weight initialization");
  free(rope_host);
  rope_host = NULL;

  BLAS_TRY(cublasCreate(&w->blas), "cublasCreate");
  BLAS_TRY(cublasSetMathMode(w->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  BLAS_TRY(cublasSetAtomicsMode(w->blas, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
  BLAS_TRY(cublasSetWorkspace(w->blas, w->workspace, CGRTK_DECODE_WORKSPACE), "cublasSetWorkspace");

  cudaStreamDestroy(s);
  *out = w;
  return 0;

fail:
  if (s) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  free(rope_host);
  cgrtk_decode_destroy(w);
  return rc;
}

extern "C" void cgrtk_decode_destroy(cgrtk_decode *w) {
  if (!w)
    return;
  if (w->blas) {
    cublasSetStream(w->blas, NULL); /* the last call's stream may be gone already */
    cublasDestroy(w->blas);
  }
  cudaFree(w->workspace);
  cudaFree(w->rope);
  cudaFree(w->hidden);
  cudaFree(w->params);
  free(w->layers);
  free(w);
}

extern "C" const struct cgrtk_decode_cfg *cgrtk_decode_config(const cgrtk_decode *w) {
  return &w->cfg;
}

extern "C" void *cgrtk_decode_hidden(cgrtk_decode *w) {
  return w->hidden;
}

extern "C" size_t cgrtk_decode_row_bytes(const cgrtk_decode *w) {
  return (size_t)w->cfg.d_model * sizeof(bf16);
}

extern "C" int cgrtk_decode_stage(cgrtk_decode *w, int64_t tokens, int64_t rows, uint64_t step,
                                  void *stream) {
  if (!w || tokens < 0 || tokens > rows || rows > w->cfg.max_tokens)
    return (int)cudaErrorInvalidValue;
  uint64_t key = cgrtk_decode_tensor_key(w->cfg.seed, (step << 8) | CGRTK_DECODE_T_INPUT);
  return launch_stage(w->hidden, w->cfg.d_model, (int)tokens, (int)rows, key, (cudaStream_t)stream);
}

extern "C" int cgrtk_decode_read(cgrtk_decode *w, int64_t rows, void *host_dst, void *stream) {
  if (!w || rows < 0 || rows > w->cfg.max_tokens || (rows > 0 && !host_dst))
    return (int)cudaErrorInvalidValue;
  if (rows == 0)
    return 0;
  return (int)cudaMemcpyAsync(host_dst, w->hidden, (size_t)rows * cgrtk_decode_row_bytes(w),
                              cudaMemcpyDeviceToHost, (cudaStream_t)stream);
}

/* Point the handle at this call's stream. cublasSetStream resets the workspace to cuBLAS's own
 * pool (which may cudaMalloc, fatal under capture), so the explicit workspace is set again. */
static int bind_blas(cgrtk_decode *w, cudaStream_t s) {
  cublasStatus_t st = cublasSetStream(w->blas, s);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasSetWorkspace(w->blas, w->workspace, CGRTK_DECODE_WORKSPACE);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : CGRTK_CUBLAS_ERROR(st);
}

/* y[rows, n] = x[rows, k] . wt[n, k]^T + beta * y, all bf16 row-major, fp32 accumulation. */
static int gemm(cgrtk_decode *w, const bf16 *x, const bf16 *wt, bf16 *y, int rows, int n, int k,
                float beta) {
  const float alpha = 1.0f;
  cublasStatus_t st = cublasGemmEx(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, wt,
                                   CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, y, CUDA_R_16BF, n,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : CGRTK_CUBLAS_ERROR(st);
}

/*
 * One call's temporaries, carved out of one cudaMallocAsync: three sub-buffers of `rows` rows,
 * each starting 256-byte aligned. attn: normed [d], qkv [3d], ctx [d]; mlp: normed [d],
 * gate_up [2 ffn], act [ffn] (the GEMV path uses only qkv and ctx, or act). One layout for both
 * paths keeps cgrtk_decode_temp_bytes exact.
 */
struct temps {
  bf16 *base;
  bf16 *part[3];
};

static size_t temp_layout(const size_t width[3], int64_t rows, size_t off[3]) {
  size_t total = 0;
  for (int i = 0; i < 3; i++) {
    off[i] = total;
    total += align256((size_t)rows * width[i] * sizeof(bf16));
  }
  return total;
}

static void attn_widths(const struct cgrtk_decode_cfg *c, size_t width[3]) {
  width[0] = (size_t)c->d_model;
  width[1] = 3 * (size_t)c->d_model;
  width[2] = (size_t)c->d_model;
}

static void mlp_widths(const struct cgrtk_decode_cfg *c, size_t width[3]) {
  width[0] = (size_t)c->d_model;
  width[1] = 2 * (size_t)c->ffn;
  width[2] = (size_t)c->ffn;
}

static int temp_alloc(struct temps *t, const size_t width[3], int64_t rows, cudaStream_t s) {
  size_t off[3];
  const size_t total = temp_layout(width, rows, off);
  t->base = NULL;
  int rc = (int)cudaMallocAsync((void **)&t->base, total, s);
  if (rc) {
    t->base = NULL;
    return rc;
  }
  for (int i = 0; i < 3; i++)
    t->part[i] = (bf16 *)((char *)t->base + off[i]);
  return 0;
}

/* Free the temporaries (stream-ordered); keep the first error. */
static int temp_free(struct temps *t, cudaStream_t s, int rc) {
  if (!t->base)
    return rc;
  int e = (int)cudaFreeAsync(t->base, s);
  t->base = NULL;
  return rc ? rc : e;
}

static int check_call(const cgrtk_decode *w, int layer, int64_t rows) {
  if (!w || layer < 0 || layer >= w->cfg.layers || rows < 0 || rows > w->cfg.max_tokens)
    return (int)cudaErrorInvalidValue;
  return 0;
}

/* Programmatic dependent launch between our own kernels of one call: not on the legacy or
 * per-thread default streams (handles 0, 1, 2). */
static bool use_pdl(const cgrtk_decode *w, cudaStream_t s) {
  return w->pdl && (uintptr_t)s > 2;
}

extern "C" int cgrtk_decode_attn(cgrtk_decode *w, int layer, int64_t rows, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  struct temps t = {NULL, {NULL, NULL, NULL}};
  const struct layer_weights *lw = NULL;
  size_t width[3];
  int rc = check_call(w, layer, rows), r = (int)rows, d = 0, heads = 0, cache = 0;
  bool pdl = false;
  if (rc || rows == 0)
    return rc;
  lw = &w->layers[layer];
  d = w->cfg.d_model;
  heads = w->cfg.heads;
  cache = w->cfg.cache_len;
  pdl = use_pdl(w, s);
  attn_widths(&w->cfg, width);

  if ((rc = temp_alloc(&t, width, rows, s)))
    goto done;
  bf16 *normed, *qkv, *ctx;
  normed = t.part[0];
  qkv = t.part[1];
  ctx = t.part[2];
  if (r <= w->gemv_rows) {
    /* Three kernels: RMSNorm + Wqkv + RoPE, attention, Wo + residual. The last one then
     * prefetches this layer's W_gate_up, which the mlp call reads first. */
    const bf16 *next = w->prefetch ? lw->t[CGRTK_DECODE_T_WGATE_UP] : NULL;
    const size_t next_bytes =
        cgrtk_decode_tensor_numel(&w->cfg, CGRTK_DECODE_T_WGATE_UP) * sizeof(bf16);
    if ((rc = launch_gemv_qkv(w->hidden, lw->t[CGRTK_DECODE_T_ATTN_NORM],
                              lw->t[CGRTK_DECODE_T_WQKV], qkv, w->rope, r, d, s, false)))
      goto done;
    if ((rc = launch_attention(qkv, lw->t[CGRTK_DECODE_T_KCACHE], lw->t[CGRTK_DECODE_T_VCACHE], ctx,
                               r, heads, cache, s, pdl, w->sm90)))
      goto done;
    rc = launch_gemv_residual(ctx, lw->t[CGRTK_DECODE_T_WO], w->hidden, r, d, d, next, next_bytes,
                              s, pdl);
    goto done;
  }
  if ((rc = bind_blas(w, s)))
    goto done;
  if ((rc = launch_rmsnorm(w->hidden, lw->t[CGRTK_DECODE_T_ATTN_NORM], normed, r, d, s)))
    goto done;
  if ((rc = gemm(w, normed, lw->t[CGRTK_DECODE_T_WQKV], qkv, r, 3 * d, d, 0.0f)))
    goto done;
  if ((rc = launch_rope(qkv, w->rope, r, heads, s, false)))
    goto done;
  if ((rc = launch_attention(qkv, lw->t[CGRTK_DECODE_T_KCACHE], lw->t[CGRTK_DECODE_T_VCACHE], ctx,
                             r, heads, cache, s, pdl, w->sm90)))
    goto done;
  rc = gemm(w, ctx, lw->t[CGRTK_DECODE_T_WO], w->hidden, r, d, d, 1.0f);

done:
  return temp_free(&t, s, rc);
}

extern "C" int cgrtk_decode_mlp(cgrtk_decode *w, int layer, int64_t rows, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  struct temps t = {NULL, {NULL, NULL, NULL}};
  const struct layer_weights *lw = NULL;
  size_t width[3];
  int rc = check_call(w, layer, rows), r = (int)rows, d = 0, ffn = 0;
  bool pdl = false;
  if (rc || rows == 0)
    return rc;
  lw = &w->layers[layer];
  d = w->cfg.d_model;
  ffn = w->cfg.ffn;
  pdl = use_pdl(w, s);
  mlp_widths(&w->cfg, width);

  if ((rc = temp_alloc(&t, width, rows, s)))
    goto done;
  bf16 *normed, *gate_up, *act;
  normed = t.part[0];
  gate_up = t.part[1];
  act = t.part[2];
  if (r <= w->gemv_rows) {
    /* Two kernels: RMSNorm + W_gate_up + SwiGLU, W_down + residual. The last one then
     * prefetches the next layer's Wqkv, which its attn call reads first. */
    const bf16 *next = w->prefetch && layer + 1 < w->cfg.layers
                           ? w->layers[layer + 1].t[CGRTK_DECODE_T_WQKV]
                           : NULL;
    const size_t next_bytes =
        cgrtk_decode_tensor_numel(&w->cfg, CGRTK_DECODE_T_WQKV) * sizeof(bf16);
    if ((rc = launch_gemv_gate_up(w->hidden, lw->t[CGRTK_DECODE_T_MLP_NORM],
                                  lw->t[CGRTK_DECODE_T_WGATE_UP], act, r, d, ffn, s, false)))
      goto done;
    rc = launch_gemv_residual(act, lw->t[CGRTK_DECODE_T_WDOWN], w->hidden, r, d, ffn, next,
                              next_bytes, s, pdl);
    goto done;
  }
  if ((rc = bind_blas(w, s)))
    goto done;
  if ((rc = launch_rmsnorm(w->hidden, lw->t[CGRTK_DECODE_T_MLP_NORM], normed, r, d, s)))
    goto done;
  if ((rc = gemm(w, normed, lw->t[CGRTK_DECODE_T_WGATE_UP], gate_up, r, 2 * ffn, d, 0.0f)))
    goto done;
  if ((rc = launch_swiglu(gate_up, act, r, ffn, s)))
    goto done;
  rc = gemm(w, act, lw->t[CGRTK_DECODE_T_WDOWN], w->hidden, r, d, ffn, 1.0f);

done:
  return temp_free(&t, s, rc);
}

extern "C" double cgrtk_decode_flops(const struct cgrtk_decode_cfg *cfg, int64_t rows) {
  const double t = (double)rows, d = cfg->d_model, f = cfg->ffn, c = cfg->cache_len;
  const double gemms = 2.0 * t * d * (3.0 * d + d + 2.0 * f + f);
  /* q.k and p.v: one multiply-add per head dimension per (token, key), all heads together. */
  const double keys = t * c + t * (t + 1.0) / 2.0;
  const double attn = 2.0 * 2.0 * d * keys;
  return cfg->layers * (gemms + attn);
}

extern "C" size_t cgrtk_decode_temp_bytes(const struct cgrtk_decode_cfg *cfg, int64_t rows) {
  size_t width[3], off[3];
  if (rows <= 0)
    return 0;
  attn_widths(cfg, width);
  const size_t attn = temp_layout(width, rows, off);
  mlp_widths(cfg, width);
  const size_t mlp = temp_layout(width, rows, off);
  return attn > mlp ? attn : mlp;
}

extern "C" int cgrtk_decode_gemv_rows(const cgrtk_decode *w) {
  return w ? w->gemv_rows : 0;
}

extern "C" const char *cgrtk_decode_strerror(int rc) {
  if (rc >= CGRTK_CUBLAS_ERROR_BASE)
    return cublasGetStatusString((cublasStatus_t)(rc - CGRTK_CUBLAS_ERROR_BASE));
  return cudaGetErrorString((cudaError_t)rc);
}
