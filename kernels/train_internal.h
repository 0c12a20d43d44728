/*
 * train_internal.h - what the train*.cu files share (the `train` workload, train.h): the
 * workload's state, the module implementations (train_layers.cu, train_moe.cu) and the kernel
 * launchers (train_kernels.cu, train_moe_kernels.cu). CUDA C++ only; not installed.
 */
#ifndef CGRT_KERNELS_TRAIN_INTERNAL_H
#define CGRT_KERNELS_TRAIN_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "train.h"

namespace cgrtk_train_impl {

/* One module of the per-microbatch chain. Module i reads the hidden state at boundary in_b and
 * writes boundary out_b; router and preprocess write none (in_b == out_b): their outputs are the
 * routing state of their layer. In backward, the experts' writes the gradient at in_b (the
 * residual's part), the preprocess's the normed input's gradient (dxn) and the router's adds the
 * norm's backward of dxn to the gradient at in_b. */
struct module_desc {
  int kind; /* CGRTK_TRAIN_KIND_* */
  int layer;
  int in_b, out_b;
  char name[32];
};

/* Pointers to a layer's tensors inside the parameter buffer; NULL where the layer has none. */
struct layer_params {
  float *t[CGRTK_TRAIN_T_COUNT];
};

/* What the forward of a layer's modules saves for their backward, per (layer, microbatch). T is
 * tokens, S = experts * capacity slots, N the scan state, F ffn. */
enum { NORM_ATTN = 0, NORM_MAMBA = 1, NORM_FFN = 2, NORM_COUNT = 3 }; /* FFN: mlp or MoE */

struct layer_saved {
  float *xn[NORM_COUNT];   /* [T, d] each branch's input: rmsnorm(x) */
  float *rinv[NORM_COUNT]; /* [T] its 1 / rms */
  float *qkv;              /* attn [T, 3d] */
  float *p;                /* attn [heads, T, T] probabilities, zero above the diagonal */
  float *o;                /* attn [T, d] attention output before Wo */
  float *proj;             /* mamba [T, d + 2N]: a logits, B, C */
  float *hs;               /* mamba [T, d, N] states */
  float *u;                /* mlp [T, F] pre-activation (even layers) */
  float *a;                /* mlp [T, F] gelu(u) */
  float *probs;            /* router [T, E] */
  float *gates;            /* router [T, top_k] */
  int *idx;                /* router [T, top_k] chosen experts */
  float *dgates;           /* [T, top_k] written by the experts' backward for the router's */
  int *counts;             /* preprocess [E] kept pairs per expert */
  int *slot_token; /* preprocess [S] pair (token * top_k + choice) in each slot, -1 if empty */
  int *token_slot; /* preprocess [T, top_k] slot of each pair, -1 if dropped */
  float *xs;       /* preprocess [S, d] slot inputs */
  float *dxs;      /* [S, d] written by the experts' backward for the preprocess's */
  float *dxn;      /* [T, d] the normed input's gradient: preprocess backward, then router's */
  float *eu, *ea;  /* experts [S, F] pre-activation and gelu */
  float *ys;       /* experts [S, d] expert outputs */
};

} // namespace cgrtk_train_impl

struct cgrtk_train {
  struct cgrtk_train_cfg cfg;
  int nmod, nb, capacity; /* modules, boundaries (3 layers + 1), slots per expert */
  cgrtk_train_impl::module_desc *mods;
  cgrtk_train_impl::layer_params *lp;   /* [layers] */
  cgrtk_train_impl::layer_saved *saved; /* [layers * microbatches] */
  size_t nparams;
  void *arena;      /* every device buffer below, one allocation */
  float *params;    /* [nparams] */
  float *mom;       /* [nparams] */
  float *grads;     /* [microbatches, nparams] */
  float *hid;       /* [microbatches, nb, T, d] */
  float *dhid;      /* [microbatches, nb, T, d] */
  float *target;    /* [microbatches, T, d] */
  float *loss;      /* [microbatches] */
  int *host_counts; /* pinned [layers, microbatches, experts]: DROP mode's counts */
  void *workspace;
  cublasHandle_t blas;
};

namespace cgrtk_train_impl {

/* Everything one module call needs. x/y are the hidden state at in_b/out_b; dy/dx its gradient
 * at out_b/in_b (dy == dx for router and preprocess). */
struct call {
  cgrtk_train *t;
  int layer, mb;
  cudaStream_t s;
  const float *x;
  float *y;
  const float *dy;
  float *dx;
  const layer_params *p;
  const layer_saved *sv;
};

/* ---- train_layers.cu */
int bind_blas(cgrtk_train *t, cudaStream_t s);
/* Row-major C[m, n] = op(A)[m, k] . op(B)[k, n] + beta C, fp32; lda/ldb/ldc are row strides as
 * stored. */
int gemm(cgrtk_train *t, bool ta, bool tb, int m, int n, int k, const float *a, int lda,
         const float *b, int ldb, float beta, float *c, int ldc);
/* The same for `batch` independent products, operand i at a + i * sa, b + i * sb, c + i * sc. */
int gemm_batched(cgrtk_train *t, bool ta, bool tb, int m, int n, int k, const float *a, int lda,
                 size_t sa, const float *b, int ldb, size_t sb, float beta, float *c, int ldc,
                 size_t sc, int batch);
/* Microbatch mb's gradient of the parameter at `param` (a pointer into t->params). */
float *grad_of(cgrtk_train *t, int mb, const float *param);
/* One stream-ordered temporary; *p is NULL if it failed. */
int temp_alloc(float **p, size_t floats, cudaStream_t s);
/* Free a temporary (stream-ordered); keeps the first error. */
int temp_free(float *p, cudaStream_t s, int rc);
int attn_forward(const call &c);
int attn_backward(const call &c);
int mamba_forward(const call &c);
int mamba_backward(const call &c);
int mlp_forward(const call &c);
int mlp_backward(const call &c);

/* ---- train_moe.cu */
int router_forward(const call &c);
int router_backward(const call &c);
int preprocess_forward(const call &c);
int preprocess_backward(const call &c);
int experts_forward(const call &c);
int experts_backward(const call &c);

/* ---- train_kernels.cu; each returns 0 or the launch's cudaError_t */
int launch_init(float *dst, uint64_t n, uint64_t key, float scale, cudaStream_t s);
/* One block per row: xn = x * rinv, rinv = 1 / sqrt(mean(x^2) + CGRTK_TRAIN_RMS_EPS). */
int launch_rmsnorm(const float *x, float *xn, float *rinv, int tokens, int d, cudaStream_t s);
/* dx = dy + rinv (dxn - xn mean(dxn xn)), the gradient through the norm plus the residual's; dx
 * may be dy (in place). */
int launch_rmsnorm_backward(const float *dy, const float *xn, const float *rinv, const float *dxn,
                            float *dx, int tokens, int d, cudaStream_t s);
int launch_attn_forward(const float *qkv, float *p, float *o, int tokens, int heads,
                        cudaStream_t s);
/* dS ([heads, T, T]) is scratch; writes every element of dqkv [T, 3d]. */
int launch_attn_backward(const float *qkv, const float *p, const float *dout, float *ds,
                         float *dqkv, int tokens, int heads, cudaStream_t s);
int launch_gelu_forward(const float *u, float *a, uint64_t n, cudaStream_t s);
/* g[i] *= gelu'(u[i]). */
int launch_gelu_backward(const float *u, float *g, uint64_t n, cudaStream_t s);
/* The scan over xn (its input), y = x (the residual) + its readout. */
int launch_mamba_forward(const float *x, const float *xn, const float *proj, float *hs, float *y,
                         int tokens, int d, int state, cudaStream_t s);
/* g ([T, d, N]) is scratch; writes dxn = the scan's direct gradient of its input and every
 * element of dproj [T, d + 2N]. */
int launch_mamba_backward(const float *xn, const float *dy, const float *proj, const float *hs,
                          float *g, float *dproj, float *dxn, int tokens, int d, int state,
                          cudaStream_t s);
int launch_mse_loss(const float *h, const float *target, float *seed, float *loss, uint64_t n,
                    cudaStream_t s);
int launch_sgd(float *w, float *v, const float *g, uint64_t n, int microbatches, float lr,
               float momentum, cudaStream_t s);

/* ---- train_moe_kernels.cu */
/* probs holds the logits [T, E] on entry, the probabilities on return. */
int launch_router_forward(float *probs, int *idx, float *gates, int tokens, int experts, int top_k,
                          cudaStream_t s);
int launch_router_backward(const float *probs, const int *idx, const float *gates,
                           const float *dgates, float *dlogits, int tokens, int experts, int top_k,
                           cudaStream_t s);
int launch_moe_assign(const int *idx, int *counts, int *slot_token, int *token_slot, int tokens,
                      int experts, int top_k, int capacity, cudaStream_t s);
int launch_moe_gather(const float *x, const int *slot_token, float *xs, int slots, int d, int top_k,
                      cudaStream_t s);
int launch_moe_combine(const float *x, const float *ys, const float *gates, const int *token_slot,
                       float *y, int tokens, int d, int top_k, cudaStream_t s);
/* dgates [T, top_k] and dys [S, d] (zero in empty slots) from dy [T, d]. */
int launch_moe_output_grads(const float *dy, const float *ys, const float *gates,
                            const int *slot_token, const int *token_slot, float *dgates, float *dys,
                            int tokens, int slots, int d, int top_k, cudaStream_t s);
/* dxn[t] = the sum of dxs over the token's kept slots, choices in order (0 if none). */
int launch_moe_scatter(const float *dxs, const int *token_slot, float *dxn, int tokens, int d,
                       int top_k, cudaStream_t s);

} // namespace cgrtk_train_impl

#endif
