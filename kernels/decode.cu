/*
 * decode.cu - the host side of the `decode` workload (decode.h): creation, staging, the
 * attention and MLP blocks as sequences of cuBLAS GEMMs and our kernels (decode_kernels.cu).
 *
 * Row-major GEMMs through column-major cuBLAS: Y[T, N] = X[T, K] . W[N, K]^T is, read
 * column-major, Y^T (N x T, ld N) = W (as stored: K x N col-major, transposed: OP_T, ld K)
 * times X^T (K x T col-major, OP_N, ld K). The residual add is folded in with beta = 1 and
 * C = the hidden buffer.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
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
int launch_rope(bf16 *qkv, int rows, int heads, int cache_len, cudaStream_t s);
int launch_attention(const bf16 *qkv, const bf16 *kcache, const bf16 *vcache, bf16 *out, int rows,
                     int heads, int cache_len, cudaStream_t s);
int launch_swiglu(const bf16 *gate_up, bf16 *act, int rows, int ffn, cudaStream_t s);
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
  void *workspace;
  cublasHandle_t blas;
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
    why = "cache_len + max_tokens must be at most CGRTK_DECODE_MAX_KEYS (8192): the attention "
          "kernel keeps one score per key in shared memory";
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

extern "C" int cgrtk_decode_create(cgrtk_decode **out, const struct cgrtk_decode_cfg *cfg,
                                   char *err, size_t errlen) {
  cgrtk_decode *w = NULL;
  cudaStream_t s = NULL;
  cudaMemPool_t pool;
  uint64_t threshold = UINT64_MAX;
  size_t total = 0, off = 0, hidden_bytes = 0;
  int dev = 0, rc = 0;

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
  CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize after the weight initialization");

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

static int temp_alloc(bf16 **p, size_t elems, cudaStream_t s) {
  return (int)cudaMallocAsync((void **)p, elems * sizeof(bf16), s);
}

/* Free a temporary (stream-ordered); keep the first error. */
static int temp_free(bf16 *p, cudaStream_t s, int rc) {
  if (!p)
    return rc;
  int e = (int)cudaFreeAsync(p, s);
  return rc ? rc : e;
}

static int check_call(const cgrtk_decode *w, int layer, int64_t rows) {
  if (!w || layer < 0 || layer >= w->cfg.layers || rows < 0 || rows > w->cfg.max_tokens)
    return (int)cudaErrorInvalidValue;
  return 0;
}

extern "C" int cgrtk_decode_attn(cgrtk_decode *w, int layer, int64_t rows, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  bf16 *normed = NULL, *qkv = NULL, *ctx = NULL;
  const struct layer_weights *lw = NULL;
  int rc = check_call(w, layer, rows), r = (int)rows, d = 0, heads = 0, cache = 0;
  if (rc || rows == 0)
    return rc;
  lw = &w->layers[layer];
  d = w->cfg.d_model;
  heads = w->cfg.heads;
  cache = w->cfg.cache_len;

  if ((rc = temp_alloc(&normed, (size_t)r * d, s)) ||
      (rc = temp_alloc(&qkv, (size_t)r * 3 * d, s)) || (rc = temp_alloc(&ctx, (size_t)r * d, s)))
    goto done;
  if ((rc = bind_blas(w, s)))
    goto done;
  if ((rc = launch_rmsnorm(w->hidden, lw->t[CGRTK_DECODE_T_ATTN_NORM], normed, r, d, s)))
    goto done;
  if ((rc = gemm(w, normed, lw->t[CGRTK_DECODE_T_WQKV], qkv, r, 3 * d, d, 0.0f)))
    goto done;
  if ((rc = launch_rope(qkv, r, heads, cache, s)))
    goto done;
  if ((rc = launch_attention(qkv, lw->t[CGRTK_DECODE_T_KCACHE], lw->t[CGRTK_DECODE_T_VCACHE], ctx,
                             r, heads, cache, s)))
    goto done;
  rc = gemm(w, ctx, lw->t[CGRTK_DECODE_T_WO], w->hidden, r, d, d, 1.0f);

done:
  rc = temp_free(ctx, s, rc);
  rc = temp_free(qkv, s, rc);
  rc = temp_free(normed, s, rc);
  return rc;
}

extern "C" int cgrtk_decode_mlp(cgrtk_decode *w, int layer, int64_t rows, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  bf16 *normed = NULL, *gate_up = NULL, *act = NULL;
  const struct layer_weights *lw = NULL;
  int rc = check_call(w, layer, rows), r = (int)rows, d = 0, ffn = 0;
  if (rc || rows == 0)
    return rc;
  lw = &w->layers[layer];
  d = w->cfg.d_model;
  ffn = w->cfg.ffn;

  if ((rc = temp_alloc(&normed, (size_t)r * d, s)) ||
      (rc = temp_alloc(&gate_up, (size_t)r * 2 * ffn, s)) ||
      (rc = temp_alloc(&act, (size_t)r * ffn, s)))
    goto done;
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
  rc = temp_free(act, s, rc);
  rc = temp_free(gate_up, s, rc);
  rc = temp_free(normed, s, rc);
  return rc;
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
  const size_t t = rows > 0 ? (size_t)rows : 0, d = (size_t)cfg->d_model, f = (size_t)cfg->ffn;
  const size_t attn = t * (d + 3 * d + d) * sizeof(bf16);
  const size_t mlp = t * (d + 2 * f + f) * sizeof(bf16);
  return attn > mlp ? attn : mlp;
}

extern "C" const char *cgrtk_decode_strerror(int rc) {
  if (rc >= CGRTK_CUBLAS_ERROR_BASE)
    return cublasGetStatusString((cublasStatus_t)(rc - CGRTK_CUBLAS_ERROR_BASE));
  return cudaGetErrorString((cudaError_t)rc);
}
