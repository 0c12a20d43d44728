/*
 * decode.cu - the host side of the `decode` workload (decode.h): creation, staging, the
 * attention and MLP blocks as sequences of cuBLAS GEMMs and our kernels (decode_kernels.cu), or,
 * for small row counts, of our fused GEMV kernels alone.
 *
 * Row-major GEMMs through column-major cuBLASLt: Y[T, N] = X[T, K] . W[N, K]^T is, read
 * column-major, Y^T (N x T, ld N) = W (as stored: K x N col-major, transposed: OP_T, ld K)
 * times X^T (K x T col-major, OP_N, ld K). The residual add is folded in with beta = 1 and
 * C = D = the hidden buffer.
 *
 * Algorithm choice: one plan per (projection, rows): the B and C/D layouts and the algorithm,
 * fixed once chosen, so a call gives the same kernels eagerly and captured. The algorithm is
 * the fastest of cuBLASLt's heuristic candidates, timed by cgrtk_decode_tune (at create for the
 * usual row counts), or, at rows never tuned, the heuristic's first choice, asked for at the
 * first call at those rows (a host-only query, no stream work) and kept.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "workload_common.h"

typedef __nv_bfloat16 bf16;

/* Defined in decode_kernels.cu; each returns 0 or the launch's cudaError_t. */
namespace cgrtk_decode_impl {
int launch_init(bf16 *dst, uint64_t n, uint64_t key, int is_gain, float scale, cudaStream_t s);
int launch_stage(bf16 *h, int d, int tokens, int rows, uint64_t key, cudaStream_t s);
int launch_spin(uint64_t ns, cudaStream_t s);
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

/* The four projections, in the order a layer runs them. */
enum { P_QKV, P_WO, P_GATE_UP, P_DOWN, P_COUNT };

enum { PLAN_NONE, PLAN_HEURISTIC, PLAN_TUNED };

/* How one projection runs at one row count. Filled once; never changed after PLAN_TUNED. */
struct plan {
  cublasLtMatrixLayoutOpaque_t b; /* X^T: k x rows, ld k */
  cublasLtMatrixLayoutOpaque_t c; /* Y^T: n x rows, ld n (C and D) */
  cublasLtMatmulAlgo_t algo;
  float us;   /* PLAN_TUNED: measured time of one call, microseconds */
  int layout; /* b and c initialized */
  int state;  /* PLAN_* */
};

struct cgrtk_decode {
  struct cgrtk_decode_cfg cfg;
  struct layer_weights *layers;
  bf16 *params; /* every layer's tensors, one allocation */
  bf16 *hidden; /* [max_tokens, d] */
  float2 *rope; /* [max_tokens, 32]: (cos, sin) of the angle at position cache_len + t, pair j */
  void *workspace;
  /* The calls' temporaries from one buffer allocated at create (CGRTK_DECODE_TEMPS=workspace, as
     an engine with static buffers has them), else NULL: a cudaMallocAsync / cudaFreeAsync pair
     per call (a caching allocator's host; captured, graph memory nodes). One buffer serves calls
     on one stream at a time, as the hidden buffer already does. */
  void *temps;
  cublasLtHandle_t lt;
  cublasLtMatmulDescOpaque_t mm;            /* bf16 in/out, fp32 compute and scale, A^T */
  cublasLtMatmulPreferenceOpaque_t pref;    /* workspace limit, deterministic reductions */
  cublasLtMatrixLayoutOpaque_t wl[P_COUNT]; /* each projection's weight: k x n, ld k */
  struct plan *plans;                       /* [P_COUNT][max_tokens + 1], by rows */
  int gemv_rows; /* attn and mlp take the GEMV path at rows <= gemv_rows */
  int sm90;      /* an sm_90+ device running an sm_90+ binary: clusters, griddepcontrol */
  int pdl;       /* programmatic dependent launch between our kernels of one call */
  int prefetch;  /* a call's last GEMV prefetches the next call's first weights into L2 */
};

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
  cgrtk_set_err(err, errlen,
                "decode config invalid: %s (layers %d, d_model %d, heads %d, ffn %d, cache_len %d, "
                "max_tokens %d)",
                why, c->layers, c->d_model, c->heads, c->ffn, c->cache_len, c->max_tokens);
  return (int)cudaErrorInvalidValue;
}

#define CUDA_TRY(call, what) CGRTK_CREATE_TRY("decode create", call, what)

#define BLAS_TRY(call, what)                                                                       \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      rc = CGRTK_CUBLAS_ERROR(s_);                                                                 \
      cgrtk_set_err(err, errlen, "decode create: %s failed: %s", what,                             \
                    cublasLtGetStatusString(s_));                                                  \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

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

static int lt_setup(cgrtk_decode *w, char *err, size_t errlen);
static size_t default_tune_rows(const cgrtk_decode *w, int64_t *list, size_t cap);

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
    cgrtk_set_err(err, errlen, "decode create: out and cfg must not be NULL");
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
    cgrtk_set_err(err, errlen, "decode create: out of host memory");
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
      total += cgrtk_align256(cgrtk_decode_tensor_numel(cfg, t) * sizeof(bf16));
  CUDA_TRY(cudaMalloc((void **)&w->params, total), "cudaMalloc of the decode weights and cache");
  for (int l = 0; l < cfg->layers; l++)
    for (int t = 0; t < CGRTK_DECODE_T_COUNT; t++) {
      w->layers[l].t[t] = (bf16 *)((char *)w->params + off);
      off += cgrtk_align256(cgrtk_decode_tensor_numel(cfg, t) * sizeof(bf16));
    }
  hidden_bytes = (size_t)cfg->max_tokens * cfg->d_model * sizeof(bf16);
  CUDA_TRY(cudaMalloc((void **)&w->hidden, hidden_bytes), "cudaMalloc of the hidden buffer");
  CUDA_TRY(cudaMalloc(&w->workspace, CGRTK_DECODE_WORKSPACE), "cudaMalloc of the cuBLAS workspace");
  rope_bytes = (size_t)cfg->max_tokens * (CGRTK_DECODE_HEAD_DIM / 2) * sizeof(float2);
  CUDA_TRY(cudaMalloc((void **)&w->rope, rope_bytes), "cudaMalloc of the RoPE table");
  {
    const char *env = getenv("CGRTK_DECODE_TEMPS"); /* "stream" (the default) or "workspace" */
    if (env && strcmp(env, "workspace") == 0)
      CUDA_TRY(cudaMalloc(&w->temps, cgrtk_decode_temp_bytes(cfg, cfg->max_tokens)),
               "cudaMalloc of the decode temporaries' workspace");
  }

  /* The small-row GEMV path: its blocks hold rows * max(d, ffn) bf16 in shared memory. */
  CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
           "cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor)");
  CUDA_TRY(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
           "cudaDeviceGetAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)");
  widest = cfg->d_model > cfg->ffn ? cfg->d_model : cfg->ffn;
  /* Projections go through cuBLAS unless the small-row GEMV path is asked for. */
  w->gemv_rows = cgrtk_env_int("CGRTK_DECODE_GEMV_ROWS", 0, 0, CGRTK_DECODE_GEMV_ROWS);
  while (w->gemv_rows > 0 && (int64_t)w->gemv_rows * widest * (int64_t)sizeof(bf16) > smem_optin)
    w->gemv_rows--;
  if (w->gemv_rows > 0 && (int64_t)w->gemv_rows * widest * (int64_t)sizeof(bf16) > 48 * 1024)
    CUDA_TRY((cudaError_t)gemv_setup(w->gemv_rows * widest * (int)sizeof(bf16)),
             "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) of the GEMV "
             "kernels");
  CUDA_TRY((cudaError_t)kernels_binary_version(&binary), "cudaFuncGetAttributes of the kernels");
  w->sm90 = major >= 9 && binary >= 90;
  w->pdl = w->sm90 && cgrtk_env_int("CGRTK_DECODE_PDL", 1, 0, 1);
  w->prefetch = cgrtk_env_int("CGRTK_DECODE_PREFETCH", 1, 0, 1);

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
    cgrtk_set_err(err, errlen, "decode create: out of host memory");
    goto fail;
  }
  CUDA_TRY(cudaMemcpyAsync(w->rope, rope_host, rope_bytes, cudaMemcpyHostToDevice, s),
           "cudaMemcpyAsync of the RoPE table");
  CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize after the weight initialization");
  free(rope_host);
  rope_host = NULL;

  BLAS_TRY(cublasLtCreate(&w->lt), "cublasLtCreate");
  if ((rc = lt_setup(w, err, errlen)))
    goto fail;
  /* Time the projections' algorithms at the row counts calls are likely to use. */
  if (cgrtk_env_int("CGRTK_DECODE_TUNE", 1, 0, 1)) {
    int64_t list[64];
    const size_t n = default_tune_rows(w, list, sizeof(list) / sizeof(list[0]));
    if ((rc = cgrtk_decode_tune(w, list, n, err, errlen)))
      goto fail;
  }

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
  if (w->lt)
    cublasLtDestroy(w->lt);
  free(w->plans);
  cudaFree(w->workspace);
  cudaFree(w->temps);
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

extern "C" void *cgrtk_decode_use_hidden(cgrtk_decode *w, void *hidden) {
  bf16 *before = w->hidden;
  w->hidden = (bf16 *)hidden;
  return before;
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

/* ---------------------------------------------------------------- GEMM plans (cuBLASLt) */

/* Heuristic candidates cgrtk_decode_tune times per (projection, rows), timed batches per
 * candidate (the fastest batch counts), the least number of calls in a batch, the head start
 * the host gets before each batch, and how much faster than an earlier (better-ranked by the
 * heuristic) candidate a later one must be to replace it. */
#define TUNE_CANDIDATES 16
#define TUNE_REPS       3
#define TUNE_MIN_BATCH  8
#define TUNE_SPIN_NS    100000ull
#define TUNE_MARGIN     0.02f

/* Output features n, input features k, weight tensor and beta of a projection. */
static void proj_shape(const struct cgrtk_decode_cfg *c, int proj, int *n, int *k, int *tensor,
                       float *beta) {
  const int d = c->d_model, f = c->ffn;
  switch (proj) {
  case P_QKV:
    *n = 3 * d, *k = d, *tensor = CGRTK_DECODE_T_WQKV, *beta = 0.0f;
    break;
  case P_WO:
    *n = d, *k = d, *tensor = CGRTK_DECODE_T_WO, *beta = 1.0f;
    break;
  case P_GATE_UP:
    *n = 2 * f, *k = d, *tensor = CGRTK_DECODE_T_WGATE_UP, *beta = 0.0f;
    break;
  default:
    *n = d, *k = f, *tensor = CGRTK_DECODE_T_WDOWN, *beta = 1.0f;
    break;
  }
}

static const char *proj_name(int proj) {
  static const char *const names[P_COUNT] = {"Wqkv", "Wo", "W_gate_up", "W_down"};
  return names[proj];
}

static int blas_rc(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? 0 : CGRTK_CUBLAS_ERROR(st);
}

/* The matmul descriptor, the heuristic preferences and the weight layouts, shared by every
 * plan; the (empty) plan table. */
static int lt_setup(cgrtk_decode *w, char *err, size_t errlen) {
  const cublasOperation_t opa = CUBLAS_OP_T;
  const uint64_t ws = CGRTK_DECODE_WORKSPACE;
  /* Deterministic reductions only: none, or split-K partial results reduced from the workspace
   * by a separate kernel in a fixed order. INPLACE reduces into the output through counters
   * (atomics) and is excluded. */
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                           CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  const char *what = "cublasLtMatmulDescInit";
  cublasStatus_t st = cublasLtMatmulDescInit(&w->mm, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st == CUBLAS_STATUS_SUCCESS) {
    what = "cublasLtMatmulDescSetAttribute(CUBLASLT_MATMUL_DESC_TRANSA)";
    st = cublasLtMatmulDescSetAttribute(&w->mm, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    what = "cublasLtMatmulPreferenceInit";
    st = cublasLtMatmulPreferenceInit(&w->pref);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    what = "cublasLtMatmulPreferenceSetAttribute(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)";
    st = cublasLtMatmulPreferenceSetAttribute(&w->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &ws, sizeof(ws));
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    what = "cublasLtMatmulPreferenceSetAttribute(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK)";
    st = cublasLtMatmulPreferenceSetAttribute(&w->pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &schemes, sizeof(schemes));
  }
  for (int p = 0; p < P_COUNT && st == CUBLAS_STATUS_SUCCESS; p++) {
    int n, k, tensor;
    float beta;
    proj_shape(&w->cfg, p, &n, &k, &tensor, &beta);
    what = "cublasLtMatrixLayoutInit of a weight";
    st = cublasLtMatrixLayoutInit(&w->wl[p], CUDA_R_16BF, (uint64_t)k, (uint64_t)n, (int64_t)k);
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    cgrtk_set_err(err, errlen, "decode create: %s failed: %s", what, cublasLtGetStatusString(st));
    return CGRTK_CUBLAS_ERROR(st);
  }
  w->plans = (struct plan *)calloc((size_t)P_COUNT * (w->cfg.max_tokens + 1), sizeof(struct plan));
  if (!w->plans) {
    cgrtk_set_err(err, errlen, "decode create: out of host memory");
    return (int)cudaErrorMemoryAllocation;
  }
  return 0;
}

/* The plan of (proj, rows), its layouts initialized. */
static int plan_at(cgrtk_decode *w, int proj, int rows, struct plan **out) {
  struct plan *p = &w->plans[(size_t)proj * (w->cfg.max_tokens + 1) + rows];
  if (!p->layout) {
    int n, k, tensor;
    float beta;
    proj_shape(&w->cfg, proj, &n, &k, &tensor, &beta);
    cublasStatus_t st =
        cublasLtMatrixLayoutInit(&p->b, CUDA_R_16BF, (uint64_t)k, (uint64_t)rows, (int64_t)k);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatrixLayoutInit(&p->c, CUDA_R_16BF, (uint64_t)n, (uint64_t)rows, (int64_t)n);
    if (st != CUBLAS_STATUS_SUCCESS)
      return CGRTK_CUBLAS_ERROR(st);
    p->layout = 1;
  }
  *out = p;
  return 0;
}

/* Up to `want` heuristic candidates for a plan's shapes, best-ranked first. */
static int plan_candidates(cgrtk_decode *w, int proj, struct plan *p, int want,
                           cublasLtMatmulHeuristicResult_t *res, int *count) {
  *count = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(w->lt, &w->mm, &w->wl[proj], &p->b, &p->c,
                                                     &p->c, &w->pref, want, res, count);
  if (st != CUBLAS_STATUS_SUCCESS)
    return CGRTK_CUBLAS_ERROR(st);
  return *count > 0 ? 0 : CGRTK_CUBLAS_ERROR(CUBLAS_STATUS_NOT_SUPPORTED);
}

/* y[rows, n] = x[rows, k] . wt[n, k]^T + beta * y with a given algorithm, on stream s. */
static int run_algo(cgrtk_decode *w, int proj, struct plan *p, const cublasLtMatmulAlgo_t *algo,
                    const bf16 *x, const bf16 *wt, bf16 *y, cudaStream_t s) {
  int n, k, tensor;
  float beta;
  const float alpha = 1.0f;
  proj_shape(&w->cfg, proj, &n, &k, &tensor, &beta);
  return blas_rc(cublasLtMatmul(w->lt, &w->mm, &alpha, wt, &w->wl[proj], x, &p->b, &beta, y, &p->c,
                                y, &p->c, algo, w->workspace, CGRTK_DECODE_WORKSPACE, s));
}

/* One projection of a call, with the plan's algorithm: the timed one, or else the heuristic's
 * first choice, asked for now and kept (a host-only query: allowed while s is capturing). */
static int gemm(cgrtk_decode *w, int proj, const bf16 *x, const bf16 *wt, bf16 *y, int rows,
                cudaStream_t s) {
  struct plan *p = NULL;
  int rc = plan_at(w, proj, rows, &p);
  if (rc)
    return rc;
  if (p->state == PLAN_NONE) {
    cublasLtMatmulHeuristicResult_t res;
    int count = 0;
    if ((rc = plan_candidates(w, proj, p, 1, &res, &count)))
      return rc;
    p->algo = res.algo;
    p->state = PLAN_HEURISTIC;
  }
  return run_algo(w, proj, p, &p->algo, x, wt, y, s);
}

/* Row counts create tunes: 1..8 and the powers of two up to max_tokens, and max_tokens, except
 * those the GEMV path serves. Ascending, no duplicates. */
static size_t default_tune_rows(const cgrtk_decode *w, int64_t *list, size_t cap) {
  size_t n = 0;
  const int64_t max = w->cfg.max_tokens;
  for (int64_t r = 1; r <= max && n < cap; r = r < 8 ? r + 1 : r * 2)
    if (r > w->gemv_rows)
      list[n++] = r;
  if (n < cap && max > w->gemv_rows && (n == 0 || list[n - 1] != max))
    list[n++] = max;
  return n;
}

/* What cgrtk_decode_tune holds while it runs. */
struct tuner {
  cudaStream_t s;
  cudaEvent_t ev[TUNE_CANDIDATES * TUNE_REPS * 2]; /* see tuner_event */
  int events;                                      /* created so far */
  bf16 *x, *y; /* stand-ins for the activations: [rows, max k] and [rows, max n] */
  void *flush; /* written before each batch to evict the weights from L2 */
  size_t flush_bytes;
};

/* The start (end = 0) or stop (end = 1) event of candidate i's batch r. */
static cudaEvent_t tuner_event(const struct tuner *t, int i, int r, int end) {
  return t->ev[(i * TUNE_REPS + r) * 2 + end];
}

/* Time every heuristic candidate of (proj, rows) and keep the fastest. Each batch runs the
 * projection on every layer's weights in turn (at least TUNE_MIN_BATCH calls) after an L2 flush,
 * as a step streams them from memory, behind a spin kernel so that host launch gaps are not
 * timed. */
static int tune_one(cgrtk_decode *w, struct tuner *t, int proj, int rows, char *err,
                    size_t errlen) {
  struct plan *p = NULL;
  cublasLtMatmulHeuristicResult_t res[TUNE_CANDIDATES];
  int ok[TUNE_CANDIDATES];
  int count = 0, n, k, tensor, rc;
  float beta;
  const int layers = w->cfg.layers;
  const int batch = layers > TUNE_MIN_BATCH ? layers : TUNE_MIN_BATCH;

  if ((rc = plan_at(w, proj, rows, &p))) {
    cgrtk_set_err(err, errlen, "decode tune: cublasLtMatrixLayoutInit (%s, %d rows) failed: %s",
                  proj_name(proj), rows, cgrtk_decode_strerror(rc));
    return rc;
  }
  if (p->state == PLAN_TUNED)
    return 0;
  proj_shape(&w->cfg, proj, &n, &k, &tensor, &beta);
  if ((rc = plan_candidates(w, proj, p, TUNE_CANDIDATES, res, &count))) {
    cgrtk_set_err(err, errlen,
                  "decode tune: cublasLtMatmulAlgoGetHeuristic (%s, %d rows) failed: %s",
                  proj_name(proj), rows, cgrtk_decode_strerror(rc));
    return rc;
  }
  for (int i = 0; i < count; i++) {
    ok[i] = res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= CGRTK_DECODE_WORKSPACE;
    /* A first, untimed call: loads the kernel, and drops a candidate that cannot run. */
    if (ok[i] && run_algo(w, proj, p, &res[i].algo, t->x, w->layers[0].t[tensor], t->y, t->s)) {
      ok[i] = 0;
      (void)cudaGetLastError();
    }
    for (int r = 0; r < TUNE_REPS && ok[i]; r++) {
      if ((rc = launch_spin(TUNE_SPIN_NS, t->s)) ||
          (t->flush && (rc = (int)cudaMemsetAsync(t->flush, r & 0xff, t->flush_bytes, t->s))) ||
          (rc = (int)cudaEventRecord(tuner_event(t, i, r, 0), t->s))) {
        cgrtk_set_err(err, errlen, "decode tune: enqueueing a timed batch failed: %s",
                      cgrtk_decode_strerror(rc));
        return rc;
      }
      for (int b = 0; b < batch && ok[i]; b++)
        if (run_algo(w, proj, p, &res[i].algo, t->x, w->layers[b % layers].t[tensor], t->y, t->s))
          ok[i] = 0;
      if ((rc = (int)cudaEventRecord(tuner_event(t, i, r, 1), t->s))) {
        cgrtk_set_err(err, errlen, "decode tune: cudaEventRecord failed: %s",
                      cgrtk_decode_strerror(rc));
        return rc;
      }
    }
  }
  if ((rc = (int)cudaStreamSynchronize(t->s))) {
    cgrtk_set_err(err, errlen, "decode tune: running the candidates of %s at %d rows failed: %s",
                  proj_name(proj), rows, cgrtk_decode_strerror(rc));
    return rc;
  }
  int best = -1;
  float best_us = 0.0f;
  for (int i = 0; i < count; i++) {
    float us = -1.0f;
    for (int r = 0; r < TUNE_REPS && ok[i]; r++) {
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, tuner_event(t, i, r, 0), tuner_event(t, i, r, 1)) !=
          cudaSuccess) {
        ok[i] = 0;
        (void)cudaGetLastError();
        break;
      }
      const float one = ms * 1000.0f / (float)batch;
      if (us < 0.0f || one < us)
        us = one;
    }
    if (!ok[i])
      continue;
    if (best < 0 || us < best_us * (1.0f - TUNE_MARGIN)) {
      best = i;
      best_us = us;
    }
  }
  if (best < 0) {
    cgrtk_set_err(err, errlen,
                  "decode tune: none of the %d cuBLASLt candidates for %s at %d rows could run",
                  count, proj_name(proj), rows);
    return CGRTK_CUBLAS_ERROR(CUBLAS_STATUS_NOT_SUPPORTED);
  }
  p->algo = res[best].algo;
  p->us = best_us;
  p->state = PLAN_TUNED;
  return 0;
}

extern "C" int cgrtk_decode_tune(cgrtk_decode *w, const int64_t *rows, size_t n, char *err,
                                 size_t errlen) {
  struct tuner t;
  int64_t max_rows = 0;
  int rc = 0, dev = 0, l2 = 0, widest_k, widest_n;
  memset(&t, 0, sizeof(t));
  if (!w || (n > 0 && !rows)) {
    cgrtk_set_err(err, errlen, "decode tune: w and rows must not be NULL");
    return (int)cudaErrorInvalidValue;
  }
  for (size_t i = 0; i < n; i++) {
    if (rows[i] < 1 || rows[i] > w->cfg.max_tokens) {
      cgrtk_set_err(err, errlen, "decode tune: row count %lld is outside [1, max_tokens = %d]",
                    (long long)rows[i], w->cfg.max_tokens);
      return (int)cudaErrorInvalidValue;
    }
    max_rows = rows[i] > max_rows ? rows[i] : max_rows;
  }
  if (n == 0)
    return 0;
  widest_k = w->cfg.d_model > w->cfg.ffn ? w->cfg.d_model : w->cfg.ffn;
  widest_n = 3 * w->cfg.d_model > 2 * w->cfg.ffn ? 3 * w->cfg.d_model : 2 * w->cfg.ffn;

#define TUNE_TRY(call, what)                                                                       \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      rc = (int)e_;                                                                                \
      cgrtk_set_err(err, errlen, "decode tune: %s failed: %s", what, cudaGetErrorString(e_));      \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

  TUNE_TRY(cudaStreamCreateWithFlags(&t.s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  for (; t.events < TUNE_CANDIDATES * TUNE_REPS * 2; t.events++)
    TUNE_TRY(cudaEventCreate(&t.ev[t.events]), "cudaEventCreate");
  TUNE_TRY(cudaMalloc((void **)&t.x, (size_t)max_rows * widest_k * sizeof(bf16)),
           "cudaMalloc of the tuning input");
  TUNE_TRY(cudaMalloc((void **)&t.y, (size_t)max_rows * widest_n * sizeof(bf16)),
           "cudaMalloc of the tuning output");
  TUNE_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  TUNE_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev),
           "cudaDeviceGetAttribute(cudaDevAttrL2CacheSize)");
  if (l2 > 0) {
    t.flush_bytes = 2 * (size_t)l2;
    TUNE_TRY(cudaMalloc(&t.flush, t.flush_bytes), "cudaMalloc of the L2 flush buffer");
  }
  /* Activations of the usual magnitude (the output only accumulates: beta = 1 for two of them). */
  TUNE_TRY((cudaError_t)launch_init(t.x, (uint64_t)max_rows * widest_k,
                                    cgrtk_decode_tensor_key(w->cfg.seed, ~(uint64_t)0), 0, 1.0f,
                                    t.s),
           "the tuning input's initialization kernel launch");
  TUNE_TRY(cudaMemsetAsync(t.y, 0, (size_t)max_rows * widest_n * sizeof(bf16), t.s),
           "cudaMemsetAsync of the tuning output");
  for (size_t i = 0; i < n && rc == 0; i++)
    for (int proj = 0; proj < P_COUNT && rc == 0; proj++)
      rc = tune_one(w, &t, proj, (int)rows[i], err, errlen);

done:
#undef TUNE_TRY
  if (t.s) {
    cudaStreamSynchronize(t.s);
    cudaStreamDestroy(t.s);
  }
  for (int i = 0; i < t.events; i++)
    cudaEventDestroy(t.ev[i]);
  cudaFree(t.flush);
  cudaFree(t.y);
  cudaFree(t.x);
  return rc;
}

extern "C" int cgrtk_decode_tuned(const cgrtk_decode *w, int64_t rows) {
  if (!w || rows < 1 || rows > w->cfg.max_tokens || !w->plans)
    return 0;
  for (int proj = 0; proj < P_COUNT; proj++)
    if (w->plans[(size_t)proj * (w->cfg.max_tokens + 1) + rows].state != PLAN_TUNED)
      return 0;
  return 1;
}

extern "C" double cgrtk_decode_tuned_us(const cgrtk_decode *w, int64_t rows) {
  if (!cgrtk_decode_tuned(w, rows))
    return 0.0;
  double us = 0.0;
  for (int proj = 0; proj < P_COUNT; proj++)
    us += w->plans[(size_t)proj * (w->cfg.max_tokens + 1) + rows].us;
  return us;
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
    total += cgrtk_align256((size_t)rows * width[i] * sizeof(bf16));
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

/* t->base is what temp_free frees: NULL when the parts come from the workload's workspace. */
static int temp_alloc(const cgrtk_decode *w, struct temps *t, const size_t width[3], int64_t rows,
                      cudaStream_t s) {
  size_t off[3];
  const size_t total = temp_layout(width, rows, off);
  char *from = (char *)w->temps;
  t->base = NULL;
  if (!from) {
    int rc = (int)cudaMallocAsync((void **)&t->base, total, s);
    if (rc) {
      t->base = NULL;
      return rc;
    }
    from = (char *)t->base;
  }
  for (int i = 0; i < 3; i++)
    t->part[i] = (bf16 *)(from + off[i]);
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

  if ((rc = temp_alloc(w, &t, width, rows, s)))
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
  if ((rc = launch_rmsnorm(w->hidden, lw->t[CGRTK_DECODE_T_ATTN_NORM], normed, r, d, s)))
    goto done;
  if ((rc = gemm(w, P_QKV, normed, lw->t[CGRTK_DECODE_T_WQKV], qkv, r, s)))
    goto done;
  if ((rc = launch_rope(qkv, w->rope, r, heads, s, false)))
    goto done;
  if ((rc = launch_attention(qkv, lw->t[CGRTK_DECODE_T_KCACHE], lw->t[CGRTK_DECODE_T_VCACHE], ctx,
                             r, heads, cache, s, pdl, w->sm90)))
    goto done;
  rc = gemm(w, P_WO, ctx, lw->t[CGRTK_DECODE_T_WO], w->hidden, r, s);

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

  if ((rc = temp_alloc(w, &t, width, rows, s)))
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
  if ((rc = launch_rmsnorm(w->hidden, lw->t[CGRTK_DECODE_T_MLP_NORM], normed, r, d, s)))
    goto done;
  if ((rc = gemm(w, P_GATE_UP, normed, lw->t[CGRTK_DECODE_T_WGATE_UP], gate_up, r, s)))
    goto done;
  if ((rc = launch_swiglu(gate_up, act, r, ffn, s)))
    goto done;
  rc = gemm(w, P_DOWN, act, lw->t[CGRTK_DECODE_T_WDOWN], w->hidden, r, s);

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
    return cublasLtGetStatusString((cublasStatus_t)(rc - CGRTK_CUBLAS_ERROR_BASE));
  return cudaGetErrorString((cudaError_t)rc);
}
