/*
 * train_reference.h - a float64 CPU reference of the `train` workload's network (kernels/train.h),
 * for tests/gpu/test_train_kernels.c: the loss of one (step, microbatch) from given parameters
 * (laid out as cgrtk_train_read_params returns them). Static functions, included by that test
 * alone, after <cmocka.h>.
 */
#ifndef CGRT_TESTS_TRAIN_REFERENCE_H
#define CGRT_TESTS_TRAIN_REFERENCE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "train.h"

static double *dalloc(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  assert_non_null(p);
  return p;
}

static void ref_norm(const double *x, double *xn, int T, int d) {
  for (int t = 0; t < T; t++) {
    double ss = 0;
    for (int c = 0; c < d; c++)
      ss += x[t * d + c] * x[t * d + c];
    const double r = 1.0 / sqrt(ss / d + (double)CGRTK_TRAIN_RMS_EPS);
    for (int c = 0; c < d; c++)
      xn[t * d + c] = x[t * d + c] * r;
  }
}

/* y[T, n] = x[T, k] w[n, k]^T (+ y if accumulate). */
static void ref_linear(const double *x, const float *w, double *y, int T, int n, int k,
                       int accumulate) {
  for (int t = 0; t < T; t++)
    for (int o = 0; o < n; o++) {
      double acc = accumulate ? y[(size_t)t * n + o] : 0.0;
      for (int i = 0; i < k; i++)
        acc += x[(size_t)t * k + i] * (double)w[(size_t)o * k + i];
      y[(size_t)t * n + o] = acc;
    }
}

static double ref_gelu(double u) {
  return 0.5 * u * (1.0 + tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)));
}

static void ref_attn(const struct cgrtk_train_cfg *c, const float *wqkv, const float *wo,
                     double *x) {
  const int T = c->tokens, d = c->d_model, hd = CGRTK_TRAIN_HEAD_DIM;
  double *xn = dalloc((size_t)T * d), *qkv = dalloc((size_t)T * 3 * d);
  double *o = dalloc((size_t)T * d), *p = dalloc((size_t)T);
  ref_norm(x, xn, T, d);
  ref_linear(xn, wqkv, qkv, T, 3 * d, d, 0);
  for (int h = 0; h < c->heads; h++)
    for (int i = 0; i < T; i++) {
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j <= i; j++) {
        double s = 0;
        for (int e = 0; e < hd; e++)
          s += qkv[(size_t)i * 3 * d + h * hd + e] * qkv[(size_t)j * 3 * d + d + h * hd + e];
        p[j] = s / 8.0;
        mx = p[j] > mx ? p[j] : mx;
      }
      for (int j = 0; j <= i; j++)
        sum += (p[j] = exp(p[j] - mx));
      for (int e = 0; e < hd; e++) {
        double acc = 0;
        for (int j = 0; j <= i; j++)
          acc += p[j] / sum * qkv[(size_t)j * 3 * d + 2 * d + h * hd + e];
        o[(size_t)i * d + h * hd + e] = acc;
      }
    }
  ref_linear(o, wo, x, T, d, d, 1);
  free(xn);
  free(qkv);
  free(o);
  free(p);
}

static void ref_mamba(const struct cgrtk_train_cfg *c, const float *ws, double *x) {
  const int T = c->tokens, d = c->d_model, N = c->mamba_state, W = d + 2 * N;
  double *xn = dalloc((size_t)T * d), *proj = dalloc((size_t)T * W);
  double *hs = dalloc((size_t)T * d * N);
  ref_norm(x, xn, T, d);
  ref_linear(xn, ws, proj, T, W, d, 0);
  for (int ch = 0; ch < d; ch++)
    for (int n = 0; n < N; n++) {
      double h = 0;
      for (int t = 0; t < T; t++) {
        const double a = 1.0 / (1.0 + exp(-proj[(size_t)t * W + ch]));
        h = a * h + tanh(proj[(size_t)t * W + d + n]) * xn[(size_t)t * d + ch];
        hs[((size_t)t * d + ch) * N + n] = h;
      }
    }
  for (int t = 0; t < T; t++)
    for (int ch = 0; ch < d; ch++)
      for (int n = 0; n < N; n++)
        x[(size_t)t * d + ch] +=
            tanh(proj[(size_t)t * W + d + N + n]) * hs[((size_t)t * d + ch) * N + n];
  free(xn);
  free(proj);
  free(hs);
}

/* x += w2 gelu(w1 xn_row) for one row. */
static void ref_expert_row(const double *xn, const float *w1, const float *w2, double gate,
                           double *x, int d, int F) {
  for (int o = 0; o < d; o++) {
    double acc = 0;
    for (int f = 0; f < F; f++) {
      double u = 0;
      for (int i = 0; i < d; i++)
        u += xn[i] * (double)w1[(size_t)f * d + i];
      acc += (double)w2[(size_t)o * F + f] * ref_gelu(u);
    }
    x[o] += gate * acc;
  }
}

static void ref_ffn(const struct cgrtk_train_cfg *c, const float *params, int layer, double *x) {
  const int T = c->tokens, d = c->d_model, F = c->ffn, E = c->experts, k = c->top_k;
  const int C = cgrtk_train_capacity(c);
  double *xn = dalloc((size_t)T * d);
  ref_norm(x, xn, T, d);
#define W(tensor) (params + cgrtk_train_tensor_offset(c, layer, (tensor)))
  if (!cgrtk_train_is_moe_layer(layer)) {
    double *u = dalloc((size_t)T * F);
    ref_linear(xn, W(CGRTK_TRAIN_T_W1), u, T, F, d, 0);
    for (size_t i = 0; i < (size_t)T * F; i++)
      u[i] = ref_gelu(u[i]);
    ref_linear(u, W(CGRTK_TRAIN_T_W2), x, T, d, F, 1);
    free(u);
    free(xn);
    return;
  }
  double *p = dalloc((size_t)T * E);
  int *idx = calloc((size_t)T * k, sizeof(int)), *count = calloc((size_t)E, sizeof(int));
  assert_true(idx && count);
  ref_linear(xn, W(CGRTK_TRAIN_T_WROUTER), p, T, E, d, 0);
  for (int t = 0; t < T; t++) {
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++)
      mx = p[t * E + e] > mx ? p[t * E + e] : mx;
    for (int e = 0; e < E; e++)
      sum += (p[t * E + e] = exp(p[t * E + e] - mx));
    for (int e = 0; e < E; e++)
      p[t * E + e] /= sum;
    for (int j = 0; j < k; j++) { /* largest not yet taken, lower index on ties */
      int best = -1;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int q = 0; q < j; q++)
          taken |= idx[t * k + q] == e;
        if (!taken && (best < 0 || p[t * E + e] > p[t * E + best]))
          best = e;
      }
      idx[t * k + j] = best;
    }
  }
  /* Pairs in order take their expert's slots; the rest are dropped. Each kept pair adds its
   * gated expert output to its token (the experts read xn, so the order of tokens is free). */
  for (int i = 0; i < T * k; i++) {
    const int e = idx[i], t = i / k;
    if (count[e]++ >= C)
      continue;
    ref_expert_row(xn + (size_t)t * d, W(CGRTK_TRAIN_T_WEXP1) + (size_t)e * F * d,
                   W(CGRTK_TRAIN_T_WEXP2) + (size_t)e * d * F, p[t * E + e], x + (size_t)t * d, d,
                   F);
  }
#undef W
  free(p);
  free(idx);
  free(count);
  free(xn);
}

static double ref_loss(const struct cgrtk_train_cfg *c, const float *params, uint64_t step,
                       int mb) {
  const int T = c->tokens, d = c->d_model;
  double *x = dalloc((size_t)T * d), loss = 0;
  for (int t = 0; t < T; t++)
    for (int ch = 0; ch < d; ch++)
      x[(size_t)t * d + ch] = cgrtk_train_input_value(c, step, mb, t, ch);
  for (int l = 0; l < c->layers; l++) {
    ref_attn(c, params + cgrtk_train_tensor_offset(c, l, CGRTK_TRAIN_T_WQKV),
             params + cgrtk_train_tensor_offset(c, l, CGRTK_TRAIN_T_WO), x);
    ref_mamba(c, params + cgrtk_train_tensor_offset(c, l, CGRTK_TRAIN_T_WSCAN), x);
    ref_ffn(c, params, l, x);
  }
  for (int t = 0; t < T; t++)
    for (int ch = 0; ch < d; ch++) {
      const double diff = x[(size_t)t * d + ch] - cgrtk_train_target_value(c, step, mb, t, ch);
      loss += diff * diff;
    }
  free(x);
  return loss / ((double)T * d);
}

#endif
