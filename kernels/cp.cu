/*
 * cp.cu - the host side of the `cp` workload (cp.h): creation, staging, the attention block
 * (projections, the K/V all-gather over the cp group, attention, output projection) and the MLP
 * block as sequences of our own kernels (cp_kernels.cu).
 */
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef CGRT_HAVE_NCCL
#include <nccl.h>
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define CP_SYMMETRIC 1 /* ncclMemAlloc and symmetric windows (NCCL 2.27) */
#endif
#endif

#include "cp.h"
#include "cp_internal.h"
#include "workload_common.h"

using namespace cgrtk_cp_impl;

struct cp_layer {
  float *t[CGRTK_CP_T_COUNT]; /* indexed by CGRTK_CP_T_* */
};

struct cgrtk_cp {
  struct cgrtk_cp_cfg cfg;
  int64_t max_rows;
  struct cp_layer *layers;
  float *params; /* every layer's tensors, one allocation */
  float *hidden; /* [max_rows, d] */
  float *kv;     /* [max_packed_tokens, 2d]: row g holds k then v of global row g */
  int32_t *thd;  /* own THD metadata: cu_seqlens, then cu_seqlens_padded */
  int pdl;       /* programmatic dependent launch between the kernels of one call (sm_90+) */
  /* The attention launches as a programmatic dependent of the all-gather's NCCL kernel too
     (CGRTK_CP_PDL_AFTER_AG=1; off by default until measured). Safe whatever NCCL's kernel
     triggers: the attention waits for its predecessor's completion before it reads q and kv. */
  int pdl_after_ag;
  int pdl_entry; /* cfg.pdl_entry or CGRTK_CP_PDL_ENTRY, with pdl */
  /* When RMSNorm and the attention let their dependents launch: TRIG_AFTER_WAIT, or TRIG_START
     (CGRTK_CP_TRIGGER=1). The GEMMs trigger at their start (TRIG_NONE before an all-gather). */
  int trig;
  void *ws;      /* the calls' temporaries when persistent (CGRTK_CP_TEMPS=workspace), else NULL */
  int fuse_norm; /* cfg.fuse_norm, or CGRTK_CP_FUSE_NORM */
  /* kv comes from ncclMemAlloc and is registered as a symmetric window on each communicator
     the all-gather runs over (NCCL's low-latency kernels for registered buffers). */
  int sym;
  struct {
    void *comm, *win; /* win NULL: registration failed, the plain path */
  } wins[CGRTK_CP_MAX_COMMS];
  int num_wins;
  char err[256]; /* the last failure, for cgrtk_cp_last_error */
};

#define THD_ENTRIES (CGRTK_CP_MAX_SEQUENCES + 2)

/* Records a failure of w and returns rc. */
static int fail(cgrtk_cp *w, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->err, sizeof(w->err), fmt, ap);
  va_end(ap);
  return rc;
}

extern "C" void cgrtk_cp_default_cfg(struct cgrtk_cp_cfg *cfg) {
  cfg->layers = 4;
  cfg->d_model = 512;
  cfg->heads = 8;
  cfg->ffn = 1024;
  cfg->max_packed_tokens = 0;
  cfg->seed = 1;
  cfg->workspace = 0;
  cfg->fuse_norm = 1;
  cfg->symmetric_kv = 1;
  cfg->pdl_entry = 0;
}

extern "C" void cgrtk_cp_launch_bound_cfg(struct cgrtk_cp_cfg *cfg) {
  cgrtk_cp_default_cfg(cfg);
  cfg->layers = 16;
  cfg->d_model = 64;
  cfg->heads = 1;
  cfg->ffn = 128;
  cfg->workspace = 1;
  cfg->fuse_norm = 0;
  cfg->pdl_entry = 1;
}

/* Bytes of the all-gathered K/V buffer: [max_packed_tokens, 2d] floats. */
static size_t kv_bytes(const cgrtk_cp *w) {
  return (size_t)w->cfg.max_packed_tokens * 2 * (size_t)w->cfg.d_model * sizeof(float);
}

static int check_cfg(const struct cgrtk_cp_cfg *c, int64_t max_rows, char *err, size_t errlen) {
  const char *why = NULL;
  if (c->layers < 1)
    why = "layers must be at least 1";
  else if (c->heads < 1 || c->d_model != c->heads * CGRTK_CP_HEAD_DIM)
    why = "d_model must be heads * 64 (the head dimension is 64)";
  else if (c->ffn < 64 || c->ffn % 64 != 0)
    why = "ffn must be a positive multiple of 64";
  else if (max_rows < 1 || max_rows > INT32_MAX / 2)
    why = "max_rows_per_rank must be in [1, 2^30)";
  else if (c->max_packed_tokens < 0 || c->max_packed_tokens > INT32_MAX / 2)
    why = "max_packed_tokens must be in [0, 2^30)";
  if (!why)
    return 0;
  cgrtk_set_err(err, errlen,
                "cp config invalid: %s (layers %d, d_model %d, heads %d, ffn %d, max_rows_per_rank "
                "%lld, max_packed_tokens %lld)",
                why, c->layers, c->d_model, c->heads, c->ffn, (long long)max_rows,
                (long long)c->max_packed_tokens);
  return (int)cudaErrorInvalidValue;
}

#define CUDA_TRY(call, what) CGRTK_CREATE_TRY("cp create", call, what)

extern "C" int cgrtk_cp_create(cgrtk_cp **out, const struct cgrtk_cp_cfg *cfg,
                               int64_t max_rows_per_rank, char *err, size_t errlen) {
  cgrtk_cp *w = NULL;
  cudaStream_t s = NULL;
  cudaMemPool_t pool;
  uint64_t threshold = UINT64_MAX;
  size_t total = 0, off = 0, d = 0;
  int dev = 0, major = 0, rc = 0;

  if (!out || !cfg) {
    cgrtk_set_err(err, errlen, "cp create: out and cfg must not be NULL");
    return (int)cudaErrorInvalidValue;
  }
  *out = NULL;
  if ((rc = check_cfg(cfg, max_rows_per_rank, err, errlen)))
    return rc;
  w = (cgrtk_cp *)calloc(1, sizeof(*w));
  if (w)
    w->layers = (struct cp_layer *)calloc((size_t)cfg->layers, sizeof(*w->layers));
  if (!w || !w->layers) {
    rc = (int)cudaErrorMemoryAllocation;
    cgrtk_set_err(err, errlen, "cp create: out of host memory");
    goto fail;
  }
  w->cfg = *cfg;
  w->max_rows = max_rows_per_rank;
  if (w->cfg.max_packed_tokens == 0)
    w->cfg.max_packed_tokens = max_rows_per_rank;
  d = (size_t)cfg->d_model;

  /* Keep freed stream-ordered memory in the pool: cudaMallocAsync in attn/mlp stays cheap. */
  CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
  CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
           "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");

  for (int l = 0; l < cfg->layers; l++)
    for (int t = 0; t < CGRTK_CP_T_COUNT; t++)
      total += cgrtk_align256(cgrtk_cp_tensor_numel(cfg, t) * sizeof(float));
  CUDA_TRY(cudaMalloc((void **)&w->params, total), "cudaMalloc of the cp weights");
  for (int l = 0; l < cfg->layers; l++)
    for (int t = 0; t < CGRTK_CP_T_COUNT; t++) {
      w->layers[l].t[t] = (float *)((char *)w->params + off);
      off += cgrtk_align256(cgrtk_cp_tensor_numel(cfg, t) * sizeof(float));
    }
  CUDA_TRY(cudaMalloc((void **)&w->hidden, (size_t)max_rows_per_rank * d * sizeof(float)),
           "cudaMalloc of the hidden buffer");
#ifdef CP_SYMMETRIC
  {
    int version = 0;
    if (cfg->symmetric_kv && cgrtk_env_int("CGRTK_CP_SYMMETRIC", 1, 0, 1) &&
        ncclGetVersion(&version) == ncclSuccess && version >= NCCL_VERSION(2, 27, 0) &&
        ncclMemAlloc((void **)&w->kv, kv_bytes(w)) == ncclSuccess)
      w->sym = 1;
  }
#endif
  if (!w->sym)
    CUDA_TRY(cudaMalloc((void **)&w->kv, kv_bytes(w)), "cudaMalloc of the K/V buffer");
  CUDA_TRY(cudaMalloc((void **)&w->thd, 2 * THD_ENTRIES * sizeof(int32_t)),
           "cudaMalloc of the THD metadata");

  /* Programmatic dependent launch needs an sm_90+ device running an sm_90+ binary (the kernels'
     griddepcontrol instructions); CGRTK_CP_PDL=0 turns it off. */
  CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
           "cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor)");
  w->pdl = major >= 9 && kernels_binary_version() >= 90 && cgrtk_env_int("CGRTK_CP_PDL", 1, 0, 1);
  w->fuse_norm = cgrtk_env_int("CGRTK_CP_FUSE_NORM", cfg->fuse_norm != 0, 0, 1);
  w->pdl_after_ag = w->pdl && cgrtk_env_int("CGRTK_CP_PDL_AFTER_AG", 0, 0, 1);
  w->pdl_entry = w->pdl && cgrtk_env_int("CGRTK_CP_PDL_ENTRY", cfg->pdl_entry != 0, 0, 1);
  /* CGRTK_CP_TRIGGER=1 brings back the trigger at every kernel's start (cp_kernels.cu). */
  w->trig = cgrtk_env_int("CGRTK_CP_TRIGGER", TRIG_AFTER_WAIT, TRIG_START, TRIG_AFTER_WAIT);

  {
    const char *env = getenv("CGRTK_CP_TEMPS"); /* "stream" or "workspace" overrides cfg */
    const int use_ws = env && strcmp(env, "stream") == 0      ? 0
                       : env && strcmp(env, "workspace") == 0 ? 1
                                                              : cfg->workspace;
    if (use_ws) {
      const size_t wsb =
          cgrtk_align256((size_t)max_rows_per_rank * d * sizeof(float)) +
          cgrtk_align256((size_t)max_rows_per_rank * (d > (size_t)cfg->ffn ? d : (size_t)cfg->ffn) *
                         sizeof(float));
      CUDA_TRY(cudaMalloc(&w->ws, wsb), "cudaMalloc of the temporaries' workspace");
    }
  }

  /* A private stream: initialization must not touch the legacy default stream. */
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  for (int l = 0; l < cfg->layers; l++)
    for (int t = 0; t < CGRTK_CP_T_COUNT; t++) {
      uint64_t key = cgrtk_cp_tensor_key(cfg->seed, ((uint64_t)l << 8) | (uint64_t)t);
      int gain = t == CGRTK_CP_T_ATTN_NORM || t == CGRTK_CP_T_MLP_NORM;
      float scale = t == CGRTK_CP_T_W2 ? cgrtk_cp_weight_scale(cfg->ffn)
                                       : cgrtk_cp_weight_scale(cfg->d_model);
      CUDA_TRY((cudaError_t)launch_init(w->layers[l].t[t], cgrtk_cp_tensor_numel(cfg, t), key, gain,
                                        scale, s),
               "the weight initialization kernel launch");
    }
  CUDA_TRY(cudaMemsetAsync(w->hidden, 0, (size_t)max_rows_per_rank * d * sizeof(float), s),
           "cudaMemsetAsync of the hidden buffer");
  CUDA_TRY(cudaMemsetAsync(w->kv, 0, kv_bytes(w), s), "cudaMemsetAsync of the K/V buffer");
  CUDA_TRY(cudaMemsetAsync(w->thd, 0, 2 * THD_ENTRIES * sizeof(int32_t), s),
           "cudaMemsetAsync of the THD metadata");
  CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize after the initialization");
  cudaStreamDestroy(s);
  *out = w;
  return 0;

fail:
  if (s) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  cgrtk_cp_destroy(w);
  return rc;
}

extern "C" void cgrtk_cp_destroy(cgrtk_cp *w) {
  if (!w)
    return;
  cudaFree(w->ws);
  cudaFree(w->thd);
#ifdef CP_SYMMETRIC
  for (int i = 0; i < w->num_wins; i++)
    if (w->wins[i].win)
      ncclCommWindowDeregister((ncclComm_t)w->wins[i].comm, (ncclWindow_t)w->wins[i].win);
  if (w->sym)
    ncclMemFree(w->kv);
  else
#endif
    cudaFree(w->kv);
  cudaFree(w->hidden);
  cudaFree(w->params);
  free(w->layers);
  free(w);
}

#ifdef CGRT_HAVE_NCCL
/*
 * Registers kv as a symmetric window on comm the first time the all-gather runs over it outside
 * a capture (registration is collective: every rank of the group makes the same attn calls in
 * the same order, so they all register at the same call). A failed registration is remembered
 * and the all-gather takes NCCL's plain path on that communicator; so does one first seen while
 * capturing, until an eager call registers it.
 */
static void use_window(cgrtk_cp *w, void *comm, cudaStream_t s) {
#ifdef CP_SYMMETRIC
  if (!w->sym || w->num_wins == CGRTK_CP_MAX_COMMS)
    return;
  for (int i = 0; i < w->num_wins; i++)
    if (w->wins[i].comm == comm)
      return;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone)
    return;
  ncclWindow_t win = NULL;
  if (ncclCommWindowRegister((ncclComm_t)comm, w->kv, kv_bytes(w), &win, NCCL_WIN_COLL_SYMMETRIC) !=
      ncclSuccess)
    win = NULL;
  w->wins[w->num_wins].comm = comm;
  w->wins[w->num_wins].win = win;
  w->num_wins++;
#else
  (void)w, (void)comm, (void)s;
#endif
}
#endif

extern "C" int cgrtk_cp_symmetric_windows(const cgrtk_cp *w) {
  if (!w || !w->sym)
    return -1;
  int n = 0;
  for (int i = 0; i < w->num_wins; i++)
    n += w->wins[i].win != NULL;
  return n;
}

extern "C" const struct cgrtk_cp_cfg *cgrtk_cp_config(const cgrtk_cp *w) {
  return &w->cfg;
}

extern "C" int64_t cgrtk_cp_max_rows(const cgrtk_cp *w) {
  return w->max_rows;
}

extern "C" void *cgrtk_cp_hidden(cgrtk_cp *w) {
  return w->hidden;
}

extern "C" void *cgrtk_cp_kv(cgrtk_cp *w) {
  return w->kv;
}

extern "C" size_t cgrtk_cp_row_bytes(const cgrtk_cp *w) {
  return (size_t)w->cfg.d_model * sizeof(float);
}

extern "C" const char *cgrtk_cp_last_error(const cgrtk_cp *w) {
  return w ? w->err : "";
}

/* Checks a step's split: P a multiple of cp within capacity, R within the hidden buffer. */
static int check_split(cgrtk_cp *w, const char *call, int64_t padded_total, int cp_size,
                       int cp_rank) {
  if (cp_size < 1 || cp_rank < 0 || cp_rank >= cp_size)
    return fail(w, (int)cudaErrorInvalidValue, "%s: cp rank %d of cp size %d is invalid", call,
                cp_rank, cp_size);
  if (padded_total < 0 || padded_total % cp_size != 0)
    return fail(w, (int)cudaErrorInvalidValue,
                "%s: the padded total %lld is not a multiple of the cp size %d", call,
                (long long)padded_total, cp_size);
  if (padded_total > w->cfg.max_packed_tokens)
    return fail(w, (int)cudaErrorInvalidValue,
                "%s: the padded total %lld exceeds the workload's max_packed_tokens %lld", call,
                (long long)padded_total, (long long)w->cfg.max_packed_tokens);
  if (padded_total / cp_size > w->max_rows)
    return fail(w, (int)cudaErrorInvalidValue,
                "%s: %lld rows per rank (padded total %lld / cp %d) exceed the workload's "
                "max_rows_per_rank %lld",
                call, (long long)(padded_total / cp_size), (long long)padded_total, cp_size,
                (long long)w->max_rows);
  return 0;
}

/* The sum of nseq lengths, or -1 if one is negative (or the arguments are bad). */
static int64_t total_length(const int32_t *seqlens, int nseq) {
  if (nseq < 0 || (nseq > 0 && !seqlens))
    return -1;
  int64_t t = 0;
  for (int i = 0; i < nseq; i++) {
    if (seqlens[i] < 0)
      return -1;
    t += seqlens[i];
  }
  return t;
}

extern "C" int cgrtk_cp_stage(cgrtk_cp *w, uint64_t step, const int32_t *host_seqlens, int nseq,
                              int64_t padded_total, int cp_size, int cp_rank, void *stream) {
  if (!w)
    return (int)cudaErrorInvalidValue;
  int rc = check_split(w, "cgrtk_cp_stage", padded_total, cp_size, cp_rank);
  if (rc)
    return rc;
  const int64_t tokens = total_length(host_seqlens, nseq);
  if (tokens < 0 || tokens > padded_total)
    return fail(w, (int)cudaErrorInvalidValue,
                "cgrtk_cp_stage: %d sequence lengths (total %lld) are invalid or exceed the "
                "padded total %lld",
                nseq, (long long)tokens, (long long)padded_total);
  const int64_t rows = padded_total / cp_size;
  const uint64_t key = cgrtk_cp_tensor_key(w->cfg.seed, (step << 8) | CGRTK_CP_T_INPUT);
  rc = launch_stage(w->hidden, w->cfg.d_model, (int64_t)cp_rank * rows, rows, tokens, key,
                    (cudaStream_t)stream);
  return rc ? fail(w, rc, "cgrtk_cp_stage: kernel launch: %s", cudaGetErrorString((cudaError_t)rc))
            : 0;
}

extern "C" int cgrtk_cp_stage_thd(cgrtk_cp *w, const int32_t *host_seqlens, int nseq,
                                  int64_t padded_total, void *stream, const int32_t **cu_seqlens,
                                  const int32_t **cu_seqlens_padded, int *padded_sequences) {
  if (!w)
    return (int)cudaErrorInvalidValue;
  const int64_t tokens = total_length(host_seqlens, nseq);
  if (nseq > CGRTK_CP_MAX_SEQUENCES || tokens < 0 || tokens > padded_total ||
      padded_total > INT32_MAX)
    return fail(w, (int)cudaErrorInvalidValue,
                "cgrtk_cp_stage_thd: %d sequences (at most %d) of total %lld do not fit the "
                "padded total %lld",
                nseq, CGRTK_CP_MAX_SEQUENCES, (long long)tokens, (long long)padded_total);
  struct thd_lengths a;
  memset(&a, 0, sizeof(a));
  a.n = nseq;
  a.padded_total = (int32_t)padded_total;
  for (int i = 0; i < nseq; i++)
    a.cu[i + 1] = a.cu[i] + host_seqlens[i];
  int rc = launch_thd(w->thd, w->thd + THD_ENTRIES, THD_ENTRIES, &a, (cudaStream_t)stream);
  if (rc)
    return fail(w, rc, "cgrtk_cp_stage_thd: kernel launch: %s",
                cudaGetErrorString((cudaError_t)rc));
  if (cu_seqlens)
    *cu_seqlens = w->thd;
  if (cu_seqlens_padded)
    *cu_seqlens_padded = w->thd + THD_ENTRIES;
  if (padded_sequences)
    *padded_sequences = THD_ENTRIES - 1;
  return 0;
}

/* Runs a launcher's result through fail() with the name of the step that failed. */
#define STEP(expr, what)                                                                           \
  do {                                                                                             \
    if (rc == 0 && (rc = (expr)) != 0)                                                             \
      fail(w, rc, "%s layer %d: %s: %s", call, layer, what, cgrtk_cp_strerror(rc));                \
  } while (0)

/* Programmatic dependent launch between the kernels of one call: not on the legacy or
 * per-thread default streams (handles 0, 1, 2). */
static bool use_pdl(const cgrtk_cp *w, cudaStream_t s) {
  return w->pdl && (uintptr_t)s > 2;
}

extern "C" int cgrtk_cp_attn(cgrtk_cp *w, int layer, const int32_t *cu_seqlens,
                             const int32_t *cu_seqlens_padded, int padded_sequences,
                             int64_t padded_total, int cp_size, int cp_rank, void *comm,
                             void *stream) {
  static const char call[] = "cgrtk_cp_attn";
  if (!w)
    return (int)cudaErrorInvalidValue;
  if (layer < 0 || layer >= w->cfg.layers)
    return fail(w, (int)cudaErrorInvalidValue, "%s: layer %d out of range [0, %d)", call, layer,
                w->cfg.layers);
  int rc = check_split(w, call, padded_total, cp_size, cp_rank);
  if (rc)
    return rc;
  const int64_t rows = padded_total / cp_size;
  if (rows == 0)
    return 0;
  if (!cu_seqlens || !cu_seqlens_padded || padded_sequences < 1)
    return fail(w, (int)cudaErrorInvalidValue,
                "%s: THD metadata missing (cu_seqlens %p, cu_seqlens_padded %p, %d sequences)",
                call, (const void *)cu_seqlens, (const void *)cu_seqlens_padded, padded_sequences);
#ifndef CGRT_HAVE_NCCL
  if (cp_size > 1)
    return fail(w, (int)cudaErrorNotSupported,
                "%s: cp size %d needs NCCL, and the workload was built without it", call, cp_size);
#endif
  if (cp_size > 1 && !comm)
    return fail(w, (int)cudaErrorInvalidValue,
                "%s: cp size %d needs the cp group's communicator, got NULL", call, cp_size);

  const cudaStream_t s = (cudaStream_t)stream;
  const struct cp_layer *L = &w->layers[layer];
  const int d = w->cfg.d_model;
  const int R = (int)rows;
  const int64_t row0 = (int64_t)cp_rank * rows;
  const size_t part = cgrtk_align256((size_t)R * d * sizeof(float));
  float *kv_local = w->kv + (size_t)row0 * 2 * d;
  void *tmp = w->ws;
  cudaError_t e = w->ws ? cudaSuccess : cudaMallocAsync(&tmp, 2 * part, s);
  if (e != cudaSuccess)
    return fail(w, (int)e, "%s layer %d: cudaMallocAsync of %zu bytes: %s", call, layer, 2 * part,
                cudaGetErrorString(e));
  float *xn = (float *)tmp; /* RMSNorm(h), then the attention output */
  float *q = (float *)((char *)tmp + part);

  /* The first kernel of the call waits for everything before it unless pdl_entry; the others, for
     their predecessor only (programmatic dependent launch), except after the all-gather. */
  const bool pdl = use_pdl(w, s), entry = pdl && w->pdl_entry;
  const bool small = norm_gemm_fits(R, 3 * d, d);
  /* The projection writing the K/V rows lets the all-gather launch only once it completes: an
     NCCL kernel launched as a programmatic dependent (the symmetric kernels are) reads those rows
     and lets the peers write into kv, which this call's earlier kernels may still read. */
  const int trigger = cp_size == 1 ? TRIG_START : TRIG_NONE;
  if (small && w->fuse_norm) {
    /* Small rows: RMSNorm, Q and K/V in one kernel (the same bits as the kernels below). */
    STEP(launch_norm_gemm(w->hidden, L->t[CGRTK_CP_T_ATTN_NORM], L->t[CGRTK_CP_T_WQKV], R, 3 * d, d,
                          d, q, d, kv_local, 2 * d, GEMM_STORE, s, entry, trigger),
         "RMSNorm and QKV projection");
  } else {
    STEP(launch_rmsnorm(w->hidden, L->t[CGRTK_CP_T_ATTN_NORM], xn, R, d, s, entry, w->trig),
         "RMSNorm");
    if (small) { /* Q and K/V in one GEMM writing both */
      STEP(launch_norm_gemm(xn, NULL, L->t[CGRTK_CP_T_WQKV], R, 3 * d, d, d, q, d, kv_local, 2 * d,
                            GEMM_STORE, s, pdl, trigger),
           "QKV projection");
    } else {
      STEP(launch_gemm(xn, L->t[CGRTK_CP_T_WQKV], q, R, d, d, d, GEMM_STORE, s, pdl, TRIG_START),
           "Wq projection");
      STEP(launch_gemm(xn, L->t[CGRTK_CP_T_WQKV] + (size_t)d * d, kv_local, R, 2 * d, d, 2 * d,
                       GEMM_STORE, s, pdl, trigger),
           "Wkv projection");
    }
  }
#ifdef CGRT_HAVE_NCCL
  /* In place: this rank's rows already sit at their global offset in the gathered buffer. */
  if (rc == 0 && cp_size > 1) {
    use_window(w, comm, s);
    ncclResult_t nr =
        ncclAllGather(kv_local, w->kv, (size_t)R * 2 * d, ncclFloat, (ncclComm_t)comm, s);
    if (nr != ncclSuccess)
      rc = fail(w, CGRTK_CP_NCCL_ERROR(nr), "%s layer %d: ncclAllGather of K/V (cp %d): %s", call,
                layer, cp_size, ncclGetErrorString(nr));
  }
#endif
  STEP(launch_attention(q, w->kv, cu_seqlens, cu_seqlens_padded, padded_sequences, row0, R,
                        w->cfg.heads, d, xn, s, pdl && (cp_size == 1 || w->pdl_after_ag), w->trig),
       "attention");
  STEP(launch_gemm(xn, L->t[CGRTK_CP_T_WO], w->hidden, R, d, d, d, GEMM_RESIDUAL, s, pdl,
                   TRIG_START),
       "Wo projection");
  e = w->ws ? cudaSuccess : cudaFreeAsync(tmp, s);
  if (rc == 0 && e != cudaSuccess)
    rc = fail(w, (int)e, "%s layer %d: cudaFreeAsync: %s", call, layer, cudaGetErrorString(e));
  return rc;
}

extern "C" int cgrtk_cp_mlp(cgrtk_cp *w, int layer, int64_t rows, void *stream) {
  static const char call[] = "cgrtk_cp_mlp";
  if (!w)
    return (int)cudaErrorInvalidValue;
  if (layer < 0 || layer >= w->cfg.layers)
    return fail(w, (int)cudaErrorInvalidValue, "%s: layer %d out of range [0, %d)", call, layer,
                w->cfg.layers);
  if (rows < 0 || rows > w->max_rows)
    return fail(w, (int)cudaErrorInvalidValue, "%s: %lld rows, outside [0, max_rows_per_rank %lld]",
                call, (long long)rows, (long long)w->max_rows);
  if (rows == 0)
    return 0;
  const cudaStream_t s = (cudaStream_t)stream;
  const struct cp_layer *L = &w->layers[layer];
  const int d = w->cfg.d_model, f = w->cfg.ffn, R = (int)rows;
  const size_t part = cgrtk_align256((size_t)R * d * sizeof(float));
  const size_t bytes = part + cgrtk_align256((size_t)R * f * sizeof(float));
  void *tmp = w->ws;
  cudaError_t e = w->ws ? cudaSuccess : cudaMallocAsync(&tmp, bytes, s);
  if (e != cudaSuccess)
    return fail(w, (int)e, "%s layer %d: cudaMallocAsync of %zu bytes: %s", call, layer, bytes,
                cudaGetErrorString(e));
  float *xn = (float *)tmp;
  float *act = (float *)((char *)tmp + part);
  int rc = 0;
  const bool pdl = use_pdl(w, s), entry = pdl && w->pdl_entry;
  if (norm_gemm_fits(R, f, d) && w->fuse_norm) {
    STEP(launch_norm_gemm(w->hidden, L->t[CGRTK_CP_T_MLP_NORM], L->t[CGRTK_CP_T_W1], R, f, d, f,
                          act, f, act, f, GEMM_SILU, s, entry, TRIG_START),
         "RMSNorm and W1 projection");
  } else {
    STEP(launch_rmsnorm(w->hidden, L->t[CGRTK_CP_T_MLP_NORM], xn, R, d, s, entry, w->trig),
         "RMSNorm");
    STEP(launch_gemm(xn, L->t[CGRTK_CP_T_W1], act, R, f, d, f, GEMM_SILU, s, pdl, TRIG_START),
         "W1 projection");
  }
  STEP(launch_gemm(act, L->t[CGRTK_CP_T_W2], w->hidden, R, d, f, d, GEMM_RESIDUAL, s, pdl,
                   TRIG_START),
       "W2 projection");
  e = w->ws ? cudaSuccess : cudaFreeAsync(tmp, s);
  if (rc == 0 && e != cudaSuccess)
    rc = fail(w, (int)e, "%s layer %d: cudaFreeAsync: %s", call, layer, cudaGetErrorString(e));
  return rc;
}

extern "C" int cgrtk_cp_read(cgrtk_cp *w, int64_t rows, void *host_dst, void *stream) {
  if (!w)
    return (int)cudaErrorInvalidValue;
  if (rows < 0 || rows > w->max_rows || (rows > 0 && !host_dst))
    return fail(w, (int)cudaErrorInvalidValue,
                "cgrtk_cp_read: %lld rows (max %lld) or a NULL destination", (long long)rows,
                (long long)w->max_rows);
  if (rows == 0)
    return 0;
  cudaError_t e = cudaMemcpyAsync(host_dst, w->hidden, (size_t)rows * cgrtk_cp_row_bytes(w),
                                  cudaMemcpyDeviceToHost, (cudaStream_t)stream);
  return e ? fail(w, (int)e, "cgrtk_cp_read: cudaMemcpyAsync: %s", cudaGetErrorString(e)) : 0;
}

extern "C" const char *cgrtk_cp_strerror(int rc) {
  static __thread char buf[96];
  if (rc >= CGRTK_CP_NCCL_ERROR_BASE) {
#ifdef CGRT_HAVE_NCCL
    snprintf(buf, sizeof(buf), "NCCL: %s",
             ncclGetErrorString((ncclResult_t)(rc - CGRTK_CP_NCCL_ERROR_BASE)));
#else
    snprintf(buf, sizeof(buf), "NCCL error %d", rc - CGRTK_CP_NCCL_ERROR_BASE);
#endif
    return buf;
  }
  return cudaGetErrorString((cudaError_t)rc);
}
