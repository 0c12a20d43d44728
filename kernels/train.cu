/*
 * train.cu - the public side of the `train` workload (train.h): configuration, the module list,
 * creation (one device arena for every static buffer), staging, the loss, the update, the reads
 * and writes, and the dispatch of module calls to train_layers.cu and train_moe.cu.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"
#include "workload_common.h"

using namespace cgrtk_train_impl;

extern "C" void cgrtk_train_default_cfg(struct cgrtk_train_cfg *cfg) {
  cfg->layers = 4;
  cfg->microbatches = 2;
  cfg->tokens = 64;
  cfg->d_model = 256;
  cfg->heads = 4;
  cfg->ffn = 512;
  cfg->experts = 4;
  cfg->top_k = 2;
  cfg->capacity_mode = CGRTK_MOE_DROP_AND_PAD;
  cfg->mamba_state = 16;
  cfg->lr = 1e-4f;
  cfg->momentum = 0.9f;
  cfg->seed = 1;
}

extern "C" int cgrtk_train_capacity(const struct cgrtk_train_cfg *cfg) {
  /* ceil(tokens * top_k * 5 / (4 * experts)), in integers: exact. */
  const int64_t num = (int64_t)cfg->tokens * cfg->top_k * 5, den = 4 * (int64_t)cfg->experts;
  return den > 0 ? (int)((num + den - 1) / den) : 0;
}

static int check_cfg(const struct cgrtk_train_cfg *c, char *err, size_t errlen) {
  const char *why = NULL;
  if (c->layers < 1 || c->layers > 1024)
    why = "layers must be in [1, 1024]";
  else if (c->microbatches < 1 || c->microbatches > 1024)
    why = "microbatches must be in [1, 1024]";
  else if (c->tokens < 1 || c->tokens > CGRTK_TRAIN_MAX_TOKENS)
    why = "tokens must be in [1, CGRTK_TRAIN_MAX_TOKENS (4096)]: attention keeps one row of "
          "scores in shared memory";
  else if (c->heads < 1 || c->d_model != c->heads * CGRTK_TRAIN_HEAD_DIM)
    why = "d_model must be heads * 64 (the head dimension is 64)";
  else if (c->ffn < 1)
    why = "ffn must be positive";
  else if (c->experts < 2 || c->experts > CGRTK_TRAIN_MAX_EXPERTS)
    why = "experts must be in [2, CGRTK_TRAIN_MAX_EXPERTS (64)]";
  else if (c->top_k < 1 || c->top_k > c->experts)
    why = "top_k must be in [1, experts]";
  else if (c->capacity_mode != CGRTK_MOE_DROP_AND_PAD && c->capacity_mode != CGRTK_MOE_DROP)
    why = "capacity_mode must be CGRTK_MOE_DROP_AND_PAD (0) or CGRTK_MOE_DROP (1)";
  else if (c->mamba_state < 1 || c->mamba_state > CGRTK_TRAIN_MAX_STATE)
    why = "mamba_state must be in [1, CGRTK_TRAIN_MAX_STATE (64)]";
  else if (!(c->lr >= 0.0f && c->lr < 1e30f))
    why = "lr must be finite and >= 0";
  else if (!(c->momentum >= 0.0f && c->momentum < 1.0f))
    why = "momentum must be in [0, 1)";
  else if ((int64_t)c->tokens * c->d_model * c->mamba_state > (int64_t)1 << 31)
    why = "tokens * d_model * mamba_state must stay below 2^31 (the scan states)";
  if (!why)
    return 0;
  cgrtk_set_err(
      err, errlen,
      "train config invalid: %s (layers %d, microbatches %d, tokens %d, d_model %d, heads %d, "
      "ffn %d, experts %d, top_k %d, capacity_mode %d, mamba_state %d, lr %g, momentum %g)",
      why, c->layers, c->microbatches, c->tokens, c->d_model, c->heads, c->ffn, c->experts,
      c->top_k, c->capacity_mode, c->mamba_state, (double)c->lr, (double)c->momentum);
  return (int)cudaErrorInvalidValue;
}

/* The module chain of every microbatch and its boundaries (see module_desc). */
static void build_modules(cgrtk_train *t) {
  int b = 0, i = 0;
  auto add = [&](int kind, int layer, int out_b, const char *what) {
    module_desc *m = &t->mods[i++];
    m->kind = kind;
    m->layer = layer;
    m->in_b = b;
    m->out_b = out_b;
    snprintf(m->name, sizeof(m->name), "layer%d.%s", layer, what);
  };
  for (int l = 0; l < t->cfg.layers; l++) {
    add(CGRTK_TRAIN_KIND_ATTN, l, b + 1, "attn");
    b++;
    add(CGRTK_TRAIN_KIND_MAMBA, l, b + 1, "mamba");
    b++;
    if (cgrtk_train_is_moe_layer(l)) {
      add(CGRTK_TRAIN_KIND_MOE_ROUTER, l, b, "moe_router");
      add(CGRTK_TRAIN_KIND_MOE_PREPROCESS, l, b, "moe_preprocess");
      add(CGRTK_TRAIN_KIND_MOE, l, b + 1, "moe_experts");
    } else {
      add(CGRTK_TRAIN_KIND_MLP, l, b + 1, "mlp");
    }
    b++;
  }
  t->nmod = i;
  t->nb = b + 1;
}

/* Sub-buffers of the arena, each 256-byte aligned; with base NULL only the size is computed. */
struct carver {
  char *base;
  size_t off;
  template <class T> T *take(size_t n) {
    T *p = base ? (T *)(base + off) : NULL;
    off += cgrtk_align256(n * sizeof(T));
    return p;
  }
};

static size_t layout(cgrtk_train *t, char *base) {
  const struct cgrtk_train_cfg *c = &t->cfg;
  const size_t L = (size_t)c->layers, M = (size_t)c->microbatches, T = (size_t)c->tokens;
  const size_t d = (size_t)c->d_model, F = (size_t)c->ffn, E = (size_t)c->experts;
  const size_t k = (size_t)c->top_k, N = (size_t)c->mamba_state, H = (size_t)c->heads;
  const size_t S = E * (size_t)t->capacity, P = t->nparams, nb = (size_t)t->nb;
  carver cv = {base, 0};

  t->params = cv.take<float>(P);
  t->mom = cv.take<float>(P);
  t->grads = cv.take<float>(M * P);
  t->hid = cv.take<float>(M * nb * T * d);
  t->dhid = cv.take<float>(M * nb * T * d);
  t->target = cv.take<float>(M * T * d);
  t->loss = cv.take<float>(M);

  size_t off = 0;
  for (size_t l = 0; l < L; l++)
    for (int tt = 0; tt < CGRTK_TRAIN_T_COUNT; tt++) {
      const size_t n = (size_t)cgrtk_train_tensor_numel(c, (int)l, tt);
      t->lp[l].t[tt] = base && n ? t->params + off : NULL;
      off += n;
    }

  for (size_t l = 0; l < L; l++)
    for (size_t m = 0; m < M; m++) {
      layer_saved *sv = &t->saved[l * M + m];
      memset(sv, 0, sizeof(*sv));
      for (int w = 0; w < NORM_COUNT; w++) {
        sv->xn[w] = cv.take<float>(T * d);
        sv->rinv[w] = cv.take<float>(T);
      }
      sv->qkv = cv.take<float>(T * 3 * d);
      sv->p = cv.take<float>(H * T * T);
      sv->o = cv.take<float>(T * d);
      sv->proj = cv.take<float>(T * (d + 2 * N));
      sv->hs = cv.take<float>(T * d * N);
      if (!cgrtk_train_is_moe_layer((int)l)) {
        sv->u = cv.take<float>(T * F);
        sv->a = cv.take<float>(T * F);
        continue;
      }
      sv->probs = cv.take<float>(T * E);
      sv->gates = cv.take<float>(T * k);
      sv->idx = cv.take<int>(T * k);
      sv->dgates = cv.take<float>(T * k);
      sv->counts = cv.take<int>(E);
      sv->slot_token = cv.take<int>(S);
      sv->token_slot = cv.take<int>(T * k);
      sv->xs = cv.take<float>(S * d);
      sv->dxs = cv.take<float>(S * d);
      sv->dxn = cv.take<float>(T * d);
      sv->eu = cv.take<float>(S * F);
      sv->ea = cv.take<float>(S * F);
      sv->ys = cv.take<float>(S * d);
    }
  return cv.off;
}

#define CUDA_TRY(call, what) CGRTK_CREATE_TRY("train create", call, what)

#define BLAS_TRY(call, what)                                                                       \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      rc = CGRTK_CUBLAS_ERROR(s_);                                                                 \
      cgrtk_set_err(err, errlen, "train create: %s failed: %s", what, cublasGetStatusString(s_));  \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

extern "C" int cgrtk_train_create(cgrtk_train **out, const struct cgrtk_train_cfg *cfg, char *err,
                                  size_t errlen) {
  cgrtk_train *t = NULL;
  cudaStream_t s = NULL;
  cudaMemPool_t pool;
  uint64_t threshold = UINT64_MAX;
  size_t total = 0, counts = 0;
  int dev = 0, rc = 0, nmod = 0;

  if (!out || !cfg) {
    cgrtk_set_err(err, errlen, "train create: out and cfg must not be NULL");
    return (int)cudaErrorInvalidValue;
  }
  *out = NULL;
  if ((rc = check_cfg(cfg, err, errlen)))
    return rc;
  for (int l = 0; l < cfg->layers; l++)
    nmod += cgrtk_train_is_moe_layer(l) ? 5 : 3;
  t = (cgrtk_train *)calloc(1, sizeof(*t));
  if (t) {
    t->cfg = *cfg;
    t->mods = (module_desc *)calloc((size_t)nmod, sizeof(*t->mods));
    t->lp = (layer_params *)calloc((size_t)cfg->layers, sizeof(*t->lp));
    t->saved = (layer_saved *)calloc((size_t)cfg->layers * cfg->microbatches, sizeof(*t->saved));
  }
  if (!t || !t->mods || !t->lp || !t->saved) {
    rc = (int)cudaErrorMemoryAllocation;
    cgrtk_set_err(err, errlen, "train create: out of host memory");
    goto fail;
  }
  build_modules(t);
  t->capacity = cgrtk_train_capacity(cfg);
  for (int l = 0; l < cfg->layers; l++)
    for (int tt = 0; tt < CGRTK_TRAIN_T_COUNT; tt++)
      t->nparams += (size_t)cgrtk_train_tensor_numel(cfg, l, tt);

  /* Keep freed stream-ordered memory in the pool: the backward temporaries stay cheap. */
  CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
  CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
  CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
           "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");

  total = layout(t, NULL);
  CUDA_TRY(cudaMalloc(&t->arena, total),
           "cudaMalloc of the train workload's weights, gradients and activations");
  layout(t, (char *)t->arena);
  CUDA_TRY(cudaMalloc(&t->workspace, CGRTK_TRAIN_WORKSPACE), "cudaMalloc of the cuBLAS workspace");
  counts = (size_t)cfg->layers * cfg->microbatches * cfg->experts * sizeof(int);
  CUDA_TRY(cudaMallocHost((void **)&t->host_counts, counts),
           "cudaMallocHost of the MoE counts (DROP mode)");
  memset(t->host_counts, 0, counts);

  /* A private stream: initialization must not touch the legacy default stream. */
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  CUDA_TRY(cudaMemsetAsync(t->arena, 0, total, s), "cudaMemsetAsync of the arena");
  for (int l = 0; l < cfg->layers; l++)
    for (int tt = 0; tt < CGRTK_TRAIN_T_COUNT; tt++) {
      if (!t->lp[l].t[tt])
        continue;
      uint64_t key = cgrtk_train_tensor_key(cfg->seed, ((uint64_t)l << 8) | (uint64_t)tt);
      CUDA_TRY((cudaError_t)launch_init(t->lp[l].t[tt], cgrtk_train_tensor_numel(cfg, l, tt), key,
                                        cgrtk_train_tensor_scale(cfg, tt), s),
               "the weight initialization kernel launch");
    }
  CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize after the weight initialization");

  BLAS_TRY(cublasCreate(&t->blas), "cublasCreate");
  BLAS_TRY(cublasSetMathMode(t->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  BLAS_TRY(cublasSetAtomicsMode(t->blas, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
  BLAS_TRY(cublasSetWorkspace(t->blas, t->workspace, CGRTK_TRAIN_WORKSPACE), "cublasSetWorkspace");

  cudaStreamDestroy(s);
  *out = t;
  return 0;

fail:
  if (s) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  cgrtk_train_destroy(t);
  return rc;
}

extern "C" void cgrtk_train_destroy(cgrtk_train *t) {
  if (!t)
    return;
  if (t->blas) {
    cublasSetStream(t->blas, NULL); /* the last call's stream may be gone already */
    cublasDestroy(t->blas);
  }
  cudaFree(t->workspace);
  cudaFree(t->arena);
  if (t->host_counts)
    cudaFreeHost(t->host_counts);
  free(t->saved);
  free(t->lp);
  free(t->mods);
  free(t);
}

extern "C" const struct cgrtk_train_cfg *cgrtk_train_config(const cgrtk_train *t) {
  return &t->cfg;
}

extern "C" int cgrtk_train_num_modules(const cgrtk_train *t) {
  return t ? t->nmod : 0;
}

extern "C" void cgrtk_train_module(const cgrtk_train *t, int i, char *name, size_t len, int *kind,
                                   int *layer) {
  const module_desc *m = t && i >= 0 && i < t->nmod ? &t->mods[i] : NULL;
  if (name && len > 0)
    snprintf(name, len, "%s", m ? m->name : "");
  if (kind)
    *kind = m ? m->kind : -1;
  if (layer)
    *layer = m ? m->layer : -1;
}

static float *hid(cgrtk_train *t, int mb, int b) {
  return t->hid + ((size_t)mb * t->nb + (size_t)b) * t->cfg.tokens * t->cfg.d_model;
}

static float *dhid(cgrtk_train *t, int mb, int b) {
  return t->dhid + ((size_t)mb * t->nb + (size_t)b) * t->cfg.tokens * t->cfg.d_model;
}

extern "C" int cgrtk_train_stage(cgrtk_train *t, uint64_t step, void *stream) {
  if (!t)
    return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  const uint64_t n = (uint64_t)t->cfg.tokens * t->cfg.d_model;
  int rc = 0;
  for (int mb = 0; mb < t->cfg.microbatches && rc == 0; mb++) {
    rc = launch_init(hid(t, mb, 0), n,
                     cgrtk_train_staged_key(&t->cfg, step, mb, CGRTK_TRAIN_T_INPUT), 1.0f, s);
    if (rc == 0)
      rc = launch_init(t->target + mb * n, n,
                       cgrtk_train_staged_key(&t->cfg, step, mb, CGRTK_TRAIN_T_TARGET), 0.5f, s);
  }
  if (rc == 0)
    rc = (int)cudaMemsetAsync(t->grads, 0, (size_t)t->cfg.microbatches * t->nparams * sizeof(float),
                              s);
  return rc;
}

static int check_call(const cgrtk_train *t, int module, int mb) {
  if (!t || module < 0 || module >= t->nmod || mb < 0 || mb >= t->cfg.microbatches)
    return (int)cudaErrorInvalidValue;
  return 0;
}

static call make_call(cgrtk_train *t, int module, int mb, void *stream) {
  const module_desc *m = &t->mods[module];
  call c;
  c.t = t;
  c.layer = m->layer;
  c.mb = mb;
  c.s = (cudaStream_t)stream;
  c.x = hid(t, mb, m->in_b);
  c.y = hid(t, mb, m->out_b);
  c.dy = dhid(t, mb, m->out_b);
  c.dx = dhid(t, mb, m->in_b);
  c.p = &t->lp[m->layer];
  c.sv = &t->saved[(size_t)m->layer * t->cfg.microbatches + mb];
  return c;
}

extern "C" int cgrtk_train_forward(cgrtk_train *t, int module, int microbatch, void *stream) {
  int rc = check_call(t, module, microbatch);
  if (rc)
    return rc;
  const call c = make_call(t, module, microbatch, stream);
  const int kind = t->mods[module].kind;
  if (kind != CGRTK_TRAIN_KIND_MOE_PREPROCESS && (rc = bind_blas(t, c.s)))
    return rc;
  switch (kind) {
  case CGRTK_TRAIN_KIND_ATTN:
    return attn_forward(c);
  case CGRTK_TRAIN_KIND_MAMBA:
    return mamba_forward(c);
  case CGRTK_TRAIN_KIND_MLP:
    return mlp_forward(c);
  case CGRTK_TRAIN_KIND_MOE_ROUTER:
    return router_forward(c);
  case CGRTK_TRAIN_KIND_MOE_PREPROCESS:
    return preprocess_forward(c);
  case CGRTK_TRAIN_KIND_MOE:
    return experts_forward(c);
  default:
    return (int)cudaErrorInvalidValue;
  }
}

extern "C" int cgrtk_train_backward(cgrtk_train *t, int module, int microbatch, void *stream) {
  int rc = check_call(t, module, microbatch);
  if (rc)
    return rc;
  const call c = make_call(t, module, microbatch, stream);
  const int kind = t->mods[module].kind;
  if (kind != CGRTK_TRAIN_KIND_MOE_PREPROCESS && (rc = bind_blas(t, c.s)))
    return rc;
  switch (kind) {
  case CGRTK_TRAIN_KIND_ATTN:
    return attn_backward(c);
  case CGRTK_TRAIN_KIND_MAMBA:
    return mamba_backward(c);
  case CGRTK_TRAIN_KIND_MLP:
    return mlp_backward(c);
  case CGRTK_TRAIN_KIND_MOE_ROUTER:
    return router_backward(c);
  case CGRTK_TRAIN_KIND_MOE_PREPROCESS:
    return preprocess_backward(c);
  case CGRTK_TRAIN_KIND_MOE:
    return experts_backward(c);
  default:
    return (int)cudaErrorInvalidValue;
  }
}

extern "C" int cgrtk_train_loss(cgrtk_train *t, int microbatch, void *stream) {
  if (!t || microbatch < 0 || microbatch >= t->cfg.microbatches)
    return (int)cudaErrorInvalidValue;
  const uint64_t n = (uint64_t)t->cfg.tokens * t->cfg.d_model;
  const int last = t->nb - 1;
  return launch_mse_loss(hid(t, microbatch, last), t->target + microbatch * n,
                         dhid(t, microbatch, last), t->loss + microbatch, n, (cudaStream_t)stream);
}

extern "C" int cgrtk_train_update(cgrtk_train *t, void *stream) {
  if (!t)
    return (int)cudaErrorInvalidValue;
  return launch_sgd(t->params, t->mom, t->grads, (uint64_t)t->nparams, t->cfg.microbatches,
                    t->cfg.lr, t->cfg.momentum, (cudaStream_t)stream);
}

extern "C" int cgrtk_train_read_loss(cgrtk_train *t, float *host_losses, void *stream) {
  if (!t || !host_losses)
    return (int)cudaErrorInvalidValue;
  return (int)cudaMemcpyAsync(host_losses, t->loss, (size_t)t->cfg.microbatches * sizeof(float),
                              cudaMemcpyDeviceToHost, (cudaStream_t)stream);
}

extern "C" size_t cgrtk_train_param_count(const cgrtk_train *t) {
  return t ? t->nparams : 0;
}

extern "C" int cgrtk_train_read_params(cgrtk_train *t, float *host, size_t count, void *stream) {
  if (!t || !host || count != t->nparams)
    return (int)cudaErrorInvalidValue;
  return (int)cudaMemcpyAsync(host, t->params, count * sizeof(float), cudaMemcpyDeviceToHost,
                              (cudaStream_t)stream);
}

extern "C" int cgrtk_train_write_params(cgrtk_train *t, const float *host, size_t count,
                                        void *stream) {
  if (!t || !host || count != t->nparams)
    return (int)cudaErrorInvalidValue;
  return (int)cudaMemcpyAsync(t->params, host, count * sizeof(float), cudaMemcpyHostToDevice,
                              (cudaStream_t)stream);
}

extern "C" int cgrtk_train_read_grads(cgrtk_train *t, int microbatch, float *host, size_t count,
                                      void *stream) {
  if (!t || !host || count != t->nparams || microbatch < 0 || microbatch >= t->cfg.microbatches)
    return (int)cudaErrorInvalidValue;
  return (int)cudaMemcpyAsync(host, t->grads + (size_t)microbatch * t->nparams,
                              count * sizeof(float), cudaMemcpyDeviceToHost, (cudaStream_t)stream);
}

extern "C" double cgrtk_train_flops(const struct cgrtk_train_cfg *cfg) {
  const double T = cfg->tokens, d = cfg->d_model, F = cfg->ffn, E = cfg->experts;
  const double N = cfg->mamba_state, S = E * cgrtk_train_capacity(cfg);
  double fwd = 0.0;
  for (int l = 0; l < cfg->layers; l++) {
    fwd += 2.0 * T * d * (3.0 * d + d);                   /* qkv and output projections */
    fwd += 2.0 * 2.0 * d * T * (T + 1.0) / 2.0;           /* q.k and p.v over the causal half */
    fwd += 2.0 * T * d * (d + 2.0 * N) + 4.0 * T * d * N; /* projections, scan and readout */
    if (cgrtk_train_is_moe_layer(l))
      fwd += 2.0 * T * d * E + 2.0 * 2.0 * S * d * F; /* router, every expert slot */
    else
      fwd += 2.0 * 2.0 * T * d * F;
  }
  /* Backward: about twice the forward (input and weight gradients). */
  return 3.0 * fwd * cfg->microbatches;
}

extern "C" const char *cgrtk_train_strerror(int rc) {
  if (rc >= CGRTK_CUBLAS_ERROR_BASE)
    return cublasGetStatusString((cublasStatus_t)(rc - CGRTK_CUBLAS_ERROR_BASE));
  return cudaGetErrorString((cudaError_t)rc);
}
