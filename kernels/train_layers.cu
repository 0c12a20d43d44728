/*
 * train_layers.cu - the host side of the `train` workload's dense modules (train.h): attention,
 * the selective scan (mamba) and the MLP, forward and backward, as cuBLAS GEMMs around our
 * kernels (train_kernels.cu); and the GEMM, gradient and temporary helpers the MoE modules share.
 *
 * Row-major GEMMs through column-major cuBLAS: C = op(A) op(B), read column-major, is
 * C^T = op(B)^T op(A)^T, so cuBLAS gets B first, A second, m and n swapped and the same
 * transposition flags. The three shapes used (X [T, K], W [N, K] as stored, like nn.Linear):
 *   Y = X W^T          gemm(false, true,  T, N, K, X, K, W, K, ...)
 *   dX = dY W          gemm(false, false, T, K, N, dY, N, W, K, ...)
 *   dW = dY^T X        gemm(true,  false, N, K, T, dY, N, X, K, ...)
 * Residual branches copy x into y (a memcpy node under capture), then add with beta = 1. Every
 * branch reads xn = rmsnorm(x); its backward ends with dx = dy + the norm's backward of dxn.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "train_internal.h"

namespace cgrtk_train_impl {

/* Point the handle at this call's stream. cublasSetStream resets the workspace to cuBLAS's own
 * pool (which may cudaMalloc, fatal under capture), so the explicit workspace is set again. */
int bind_blas(cgrtk_train *t, cudaStream_t s) {
  cublasStatus_t st = cublasSetStream(t->blas, s);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasSetWorkspace(t->blas, t->workspace, CGRTK_TRAIN_WORKSPACE);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : CGRTK_CUBLAS_ERROR(st);
}

int gemm(cgrtk_train *t, bool ta, bool tb, int m, int n, int k, const float *a, int lda,
         const float *b, int ldb, float beta, float *c, int ldc) {
  const float alpha = 1.0f;
  cublasStatus_t st =
      cublasSgemm(t->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                  &alpha, b, ldb, a, lda, &beta, c, ldc);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : CGRTK_CUBLAS_ERROR(st);
}

int gemm_batched(cgrtk_train *t, bool ta, bool tb, int m, int n, int k, const float *a, int lda,
                 size_t sa, const float *b, int ldb, size_t sb, float beta, float *c, int ldc,
                 size_t sc, int batch) {
  const float alpha = 1.0f;
  cublasStatus_t st = cublasSgemmStridedBatched(
      t->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
      ldb, (long long)sb, a, lda, (long long)sa, &beta, c, ldc, (long long)sc, batch);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : CGRTK_CUBLAS_ERROR(st);
}

float *grad_of(cgrtk_train *t, int mb, const float *param) {
  return t->grads + (size_t)mb * t->nparams + (size_t)(param - t->params);
}

int temp_alloc(float **p, size_t floats, cudaStream_t s) {
  *p = NULL;
  cudaError_t e = cudaMallocAsync((void **)p, floats * sizeof(float), s);
  if (e != cudaSuccess)
    *p = NULL;
  return (int)e;
}

int temp_free(float *p, cudaStream_t s, int rc) {
  if (!p)
    return rc;
  int e = (int)cudaFreeAsync(p, s);
  return rc ? rc : e;
}

/* Floats of a sub-buffer rounded up to 64 (256 bytes): every part of a temporary stays as aligned
 * as the allocation, so cuBLAS sees the same alignment eagerly and under capture. */
static size_t part(size_t floats) {
  return (floats + 63) & ~(size_t)63;
}

static int copy(float *dst, const float *src, size_t floats, cudaStream_t s) {
  return (int)cudaMemcpyAsync(dst, src, floats * sizeof(float), cudaMemcpyDeviceToDevice, s);
}

/* xn = rmsnorm(x) of branch `which`, saved for the backward. */
static int norm(const call &c, int which) {
  return launch_rmsnorm(c.x, c.sv->xn[which], c.sv->rinv[which], c.t->cfg.tokens, c.t->cfg.d_model,
                        c.s);
}

/* dx = dy + the gradient through branch `which`'s norm of dxn. */
static int norm_backward(const call &c, int which, const float *dxn) {
  return launch_rmsnorm_backward(c.dy, c.sv->xn[which], c.sv->rinv[which], dxn, c.dx,
                                 c.t->cfg.tokens, c.t->cfg.d_model, c.s);
}

/* y = x + attention(xn Wqkv^T) Wo^T; saves xn, qkv, P and the attention output. */
int attn_forward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model;
  const float *wqkv = c.p->t[CGRTK_TRAIN_T_WQKV], *wo = c.p->t[CGRTK_TRAIN_T_WO];
  const float *xn = c.sv->xn[NORM_ATTN];
  int rc = norm(c, NORM_ATTN);
  if (rc == 0)
    rc = gemm(t, false, true, T, 3 * d, d, xn, d, wqkv, d, 0.0f, c.sv->qkv, 3 * d);
  if (rc == 0)
    rc = launch_attn_forward(c.sv->qkv, c.sv->p, c.sv->o, T, t->cfg.heads, c.s);
  if (rc == 0)
    rc = copy(c.y, c.x, (size_t)T * d, c.s);
  if (rc == 0)
    rc = gemm(t, false, true, T, d, d, c.sv->o, d, wo, d, 1.0f, c.y, d);
  return rc;
}

int attn_backward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, heads = t->cfg.heads;
  const float *wqkv = c.p->t[CGRTK_TRAIN_T_WQKV], *wo = c.p->t[CGRTK_TRAIN_T_WO];
  const float *xn = c.sv->xn[NORM_ATTN];
  const size_t n_do = part((size_t)T * d), n_ds = part((size_t)heads * T * T);
  const size_t n_dqkv = part((size_t)T * 3 * d);
  float *tmp = NULL;
  int rc = temp_alloc(&tmp, n_do + n_ds + n_dqkv + part((size_t)T * d), c.s);
  if (rc)
    return rc;
  float *dout = tmp, *ds = dout + n_do, *dqkv = ds + n_ds, *dxn = dqkv + n_dqkv;

  rc = gemm(t, false, false, T, d, d, c.dy, d, wo, d, 0.0f, dout, d);
  if (rc == 0)
    rc = gemm(t, true, false, d, d, T, c.dy, d, c.sv->o, d, 0.0f, grad_of(t, c.mb, wo), d);
  if (rc == 0)
    rc = launch_attn_backward(c.sv->qkv, c.sv->p, dout, ds, dqkv, T, heads, c.s);
  if (rc == 0)
    rc = gemm(t, true, false, 3 * d, d, T, dqkv, 3 * d, xn, d, 0.0f, grad_of(t, c.mb, wqkv), d);
  if (rc == 0)
    rc = gemm(t, false, false, T, d, 3 * d, dqkv, 3 * d, wqkv, d, 0.0f, dxn, d);
  if (rc == 0)
    rc = norm_backward(c, NORM_ATTN, dxn);
  return temp_free(tmp, c.s, rc);
}

/* proj = xn Wscan^T (a logits, B, C), then the scan over xn and its readout onto x; saves xn,
 * proj and the states. */
int mamba_forward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, N = t->cfg.mamba_state, W = d + 2 * N;
  const float *xn = c.sv->xn[NORM_MAMBA];
  int rc = norm(c, NORM_MAMBA);
  if (rc == 0)
    rc = gemm(t, false, true, T, W, d, xn, d, c.p->t[CGRTK_TRAIN_T_WSCAN], d, 0.0f, c.sv->proj, W);
  if (rc == 0)
    rc = launch_mamba_forward(c.x, xn, c.sv->proj, c.sv->hs, c.y, T, d, N, c.s);
  return rc;
}

int mamba_backward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, N = t->cfg.mamba_state, W = d + 2 * N;
  const float *ws = c.p->t[CGRTK_TRAIN_T_WSCAN], *xn = c.sv->xn[NORM_MAMBA];
  const size_t n_g = part((size_t)T * d * N), n_dproj = part((size_t)T * W);
  float *tmp = NULL;
  int rc = temp_alloc(&tmp, n_g + n_dproj + part((size_t)T * d), c.s);
  if (rc)
    return rc;
  float *g = tmp, *dproj = g + n_g, *dxn = dproj + n_dproj;

  rc = launch_mamba_backward(xn, c.dy, c.sv->proj, c.sv->hs, g, dproj, dxn, T, d, N, c.s);
  if (rc == 0)
    rc = gemm(t, false, false, T, d, W, dproj, W, ws, d, 1.0f, dxn, d);
  if (rc == 0)
    rc = gemm(t, true, false, W, d, T, dproj, W, xn, d, 0.0f, grad_of(t, c.mb, ws), d);
  if (rc == 0)
    rc = norm_backward(c, NORM_MAMBA, dxn);
  return temp_free(tmp, c.s, rc);
}

/* y = x + gelu(xn W1^T) W2^T; saves xn, the pre-activation and the activation. */
int mlp_forward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, F = t->cfg.ffn;
  const float *w1 = c.p->t[CGRTK_TRAIN_T_W1], *w2 = c.p->t[CGRTK_TRAIN_T_W2];
  const float *xn = c.sv->xn[NORM_FFN];
  int rc = norm(c, NORM_FFN);
  if (rc == 0)
    rc = gemm(t, false, true, T, F, d, xn, d, w1, d, 0.0f, c.sv->u, F);
  if (rc == 0)
    rc = launch_gelu_forward(c.sv->u, c.sv->a, (uint64_t)T * F, c.s);
  if (rc == 0)
    rc = copy(c.y, c.x, (size_t)T * d, c.s);
  if (rc == 0)
    rc = gemm(t, false, true, T, d, F, c.sv->a, F, w2, F, 1.0f, c.y, d);
  return rc;
}

int mlp_backward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, F = t->cfg.ffn;
  const float *w1 = c.p->t[CGRTK_TRAIN_T_W1], *w2 = c.p->t[CGRTK_TRAIN_T_W2];
  const float *xn = c.sv->xn[NORM_FFN];
  const size_t n_du = part((size_t)T * F);
  float *tmp = NULL;
  int rc = temp_alloc(&tmp, n_du + part((size_t)T * d), c.s);
  if (rc)
    return rc;
  float *du = tmp, *dxn = du + n_du; /* du: dA, then dU in place */

  rc = gemm(t, false, false, T, F, d, c.dy, d, w2, F, 0.0f, du, F);
  if (rc == 0)
    rc = gemm(t, true, false, d, F, T, c.dy, d, c.sv->a, F, 0.0f, grad_of(t, c.mb, w2), F);
  if (rc == 0)
    rc = launch_gelu_backward(c.sv->u, du, (uint64_t)T * F, c.s);
  if (rc == 0)
    rc = gemm(t, true, false, F, d, T, du, F, xn, d, 0.0f, grad_of(t, c.mb, w1), d);
  if (rc == 0)
    rc = gemm(t, false, false, T, d, F, du, F, w1, d, 0.0f, dxn, d);
  if (rc == 0)
    rc = norm_backward(c, NORM_FFN, dxn);
  return temp_free(tmp, c.s, rc);
}

} // namespace cgrtk_train_impl
