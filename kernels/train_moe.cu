/*
 * train_moe.cu - the host side of the `train` workload's MoE layer (train.h): router,
 * preprocess and experts, forward and backward, around train_moe_kernels.cu and cuBLAS.
 *
 * Slots: expert e owns slots [e * capacity, (e + 1) * capacity); its kept pairs fill them from
 * the first, in pair order. With CGRTK_MOE_DROP_AND_PAD the experts run on every slot (empty
 * ones are zero and contribute zero to every gradient), all experts in one strided-batched GEMM
 * per product: fixed shapes, no host round trip. With CGRTK_MOE_DROP the preprocess reads the
 * counts on the host (a synchronization: this is what makes that mode impossible to capture) and
 * the experts' GEMMs run on the counted rows only, one GEMM per expert.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <string.h>

#include "train_internal.h"

namespace cgrtk_train_impl {

static size_t part(size_t floats) {
  return (floats + 63) & ~(size_t)63;
}

/* DROP mode's counts of (layer, microbatch) on the host, written by its preprocess forward. */
static int *host_counts(const call &c) {
  const cgrtk_train *t = c.t;
  return t->host_counts + ((size_t)c.layer * t->cfg.microbatches + c.mb) * t->cfg.experts;
}

/*
 * One GEMM per expert, expert e's operands at a + e * sa, b + e * sb, c + e * sc. Its slot rows
 * are m (rows_in_k false: activations) or k (true: weight gradients, a sum over the rows). With
 * DROP_AND_PAD every expert runs on all its slots: one strided-batched GEMM. With DROP each expert
 * runs on the rows counted by the preprocess; an expert with none skips its activations (no one
 * reads them) and zeroes its weight gradient (it still owns it).
 */
static int expert_gemm(const call &c, bool ta, bool tb, int m, int n, int k, bool rows_in_k,
                       const float *a, int lda, size_t sa, const float *b, int ldb, size_t sb,
                       float *cm, int ldc, size_t sc) {
  cgrtk_train *t = c.t;
  const int E = t->cfg.experts;
  if (t->cfg.capacity_mode != CGRTK_MOE_DROP)
    return gemm_batched(t, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, 0.0f, cm, ldc, sc, E);
  int rc = 0;
  for (int e = 0; e < E && rc == 0; e++) {
    const int rows = host_counts(c)[e];
    float *ce = cm + (size_t)e * sc;
    if (rows == 0)
      rc = rows_in_k ? (int)cudaMemsetAsync(ce, 0, (size_t)m * ldc * sizeof(float), c.s) : 0;
    else
      rc = gemm(t, ta, tb, rows_in_k ? m : rows, n, rows_in_k ? rows : k, a + (size_t)e * sa, lda,
                b + (size_t)e * sb, ldb, 0.0f, ce, ldc);
  }
  return rc;
}

/* xn = rmsnorm(x) for the whole layer; probs = softmax(xn Wr^T); the top-k choices and gates. */
int router_forward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, E = t->cfg.experts;
  const float *xn = c.sv->xn[NORM_FFN];
  int rc = launch_rmsnorm(c.x, c.sv->xn[NORM_FFN], c.sv->rinv[NORM_FFN], T, d, c.s);
  if (rc == 0)
    rc = gemm(t, false, true, T, E, d, xn, d, c.p->t[CGRTK_TRAIN_T_WROUTER], d, 0.0f, c.sv->probs,
              E);
  if (rc == 0)
    rc = launch_router_forward(c.sv->probs, c.sv->idx, c.sv->gates, T, E, t->cfg.top_k, c.s);
  return rc;
}

/* From the gates' gradient (left by the experts' backward): dxn (left by the preprocess's
 * backward) += dlogits Wr, dWr; then dx (= dy, the residual's gradient left by the experts'
 * backward) += the norm's backward of dxn. */
int router_backward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, E = t->cfg.experts;
  const float *wr = c.p->t[CGRTK_TRAIN_T_WROUTER];
  float *dlogits = NULL;
  int rc = temp_alloc(&dlogits, part((size_t)T * E), c.s);
  if (rc)
    return rc;
  rc = launch_router_backward(c.sv->probs, c.sv->idx, c.sv->gates, c.sv->dgates, dlogits, T, E,
                              t->cfg.top_k, c.s);
  if (rc == 0)
    rc = gemm(t, false, false, T, d, E, dlogits, E, wr, d, 1.0f, c.sv->dxn, d);
  if (rc == 0)
    rc = gemm(t, true, false, E, d, T, dlogits, E, c.sv->xn[NORM_FFN], d, 0.0f,
              grad_of(t, c.mb, wr), d);
  if (rc == 0)
    rc = launch_rmsnorm_backward(c.dx, c.sv->xn[NORM_FFN], c.sv->rinv[NORM_FFN], c.sv->dxn, c.dx, T,
                                 d, c.s);
  return temp_free(dlogits, c.s, rc);
}

/* Slot assignment and gather (from the router's xn); with DROP, the counts to the host and a
 * synchronization. */
int preprocess_forward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, E = t->cfg.experts, k = t->cfg.top_k;
  const int C = t->capacity;
  int rc = launch_moe_assign(c.sv->idx, c.sv->counts, c.sv->slot_token, c.sv->token_slot, T, E, k,
                             C, c.s);
  if (rc == 0)
    rc = launch_moe_gather(c.sv->xn[NORM_FFN], c.sv->slot_token, c.sv->xs, E * C, d, k, c.s);
  if (rc || t->cfg.capacity_mode != CGRTK_MOE_DROP)
    return rc;

  /* Under capture the copy is recorded but the synchronization fails (and invalidates the
   * capture): nothing was counted, so the host counts are left as they were. */
  int *counts = host_counts(c);
  rc = (int)cudaMemcpyAsync(counts, c.sv->counts, (size_t)E * sizeof(int), cudaMemcpyDeviceToHost,
                            c.s);
  if (rc == 0)
    rc = (int)cudaStreamSynchronize(c.s);
  return rc;
}

/* The inverse permutation: dxn (the normed input's gradient) = the slot inputs' gradients. */
int preprocess_backward(const call &c) {
  const cgrtk_train *t = c.t;
  return launch_moe_scatter(c.sv->dxs, c.sv->token_slot, c.sv->dxn, t->cfg.tokens, t->cfg.d_model,
                            t->cfg.top_k, c.s);
}

/* Every expert's MLP on its slots, then y = x + the gated outputs of each token's choices. */
int experts_forward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, E = t->cfg.experts, F = t->cfg.ffn;
  const int C = t->capacity;
  const size_t cd = (size_t)C * d, cf = (size_t)C * F, fd = (size_t)F * d;
  const float *w1 = c.p->t[CGRTK_TRAIN_T_WEXP1], *w2 = c.p->t[CGRTK_TRAIN_T_WEXP2];
  int rc = expert_gemm(c, false, true, C, F, d, false, c.sv->xs, d, cd, w1, d, fd, c.sv->eu, F, cf);
  /* All slots: in DROP mode the rows past a count hold earlier values (zero at create, finite
   * after) that no one reads. */
  if (rc == 0)
    rc = launch_gelu_forward(c.sv->eu, c.sv->ea, (uint64_t)E * cf, c.s);
  if (rc == 0)
    rc = expert_gemm(c, false, true, C, d, F, false, c.sv->ea, F, cf, w2, F, fd, c.sv->ys, d, cd);
  if (rc == 0)
    rc = launch_moe_combine(c.x, c.sv->ys, c.sv->gates, c.sv->token_slot, c.y, T, d, t->cfg.top_k,
                            c.s);
  return rc;
}

/* dx = dy (the residual's part; the router's backward adds the norm's), the gates' and slot
 * inputs' gradients for router and preprocess, and the experts' weight gradients. */
int experts_backward(const call &c) {
  cgrtk_train *t = c.t;
  const int T = t->cfg.tokens, d = t->cfg.d_model, E = t->cfg.experts, F = t->cfg.ffn;
  const int C = t->capacity, S = E * C, k = t->cfg.top_k;
  const size_t cd = (size_t)C * d, cf = (size_t)C * F, fd = (size_t)F * d;
  const float *w1 = c.p->t[CGRTK_TRAIN_T_WEXP1], *w2 = c.p->t[CGRTK_TRAIN_T_WEXP2];
  float *g1 = grad_of(t, c.mb, w1), *g2 = grad_of(t, c.mb, w2);
  const size_t n_dys = part((size_t)S * d);
  float *tmp = NULL;
  int rc = temp_alloc(&tmp, n_dys + part((size_t)S * F), c.s);
  if (rc)
    return rc;
  float *dys = tmp, *du = tmp + n_dys; /* du: dA, then dU in place */

  rc = launch_moe_output_grads(c.dy, c.sv->ys, c.sv->gates, c.sv->slot_token, c.sv->token_slot,
                               c.sv->dgates, dys, T, S, d, k, c.s);
  if (rc == 0)
    rc = (int)cudaMemcpyAsync(c.dx, c.dy, (size_t)T * d * sizeof(float), cudaMemcpyDeviceToDevice,
                              c.s);
  if (rc == 0) /* dA = dYs W2 */
    rc = expert_gemm(c, false, false, C, F, d, false, dys, d, cd, w2, F, fd, du, F, cf);
  if (rc == 0) /* dW2 = dYs^T A */
    rc = expert_gemm(c, true, false, d, F, C, true, dys, d, cd, c.sv->ea, F, cf, g2, F, fd);
  if (rc == 0)
    rc = launch_gelu_backward(c.sv->eu, du, (uint64_t)S * F, c.s);
  if (rc == 0) /* dW1 = dU^T Xs */
    rc = expert_gemm(c, true, false, F, d, C, true, du, F, cf, c.sv->xs, d, cd, g1, d, fd);
  if (rc == 0) /* dXs = dU W1 */
    rc = expert_gemm(c, false, false, C, d, F, false, du, F, cf, w1, d, fd, c.sv->dxs, d, cd);
  return temp_free(tmp, c.s, rc);
}

} // namespace cgrtk_train_impl
