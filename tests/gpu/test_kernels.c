/*
 * test_kernels.c (GPU) - the reference workloads cgrt bench runs (kernels/decode.h, chain.h):
 * the decode layers are bitwise reproducible, give the same bits eagerly and replayed from a
 * captured graph, match a float64 CPU reference, ignore padding rows, and put their temporaries
 * in graph memory when captured (one allocation and one free per call); the chain computes its
 * recurrence exactly (it counts its kernels); the clock probe reads a plausible SM clock. Both
 * paths of decode are covered: cuBLAS (ROWS rows) and the small-row GEMV path (rows <=
 * cgrtk_decode_gemv_rows), where padding must not change a single bit and the launch options
 * (programmatic dependent launch, L2 prefetch) must not either. On the cuBLASLt path, row counts
 * with a timed algorithm (cgrtk_decode_tune) and without one (the heuristic's choice, kept from the
 * first call) give the same bits eagerly and replayed, also after a row count is tuned late. The
 * decode tests run on a small configuration and on the default one.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "chain.h"
#include "decode.h"
#include "probe.h"

#define ROWS  37   /* tokens of the tests' steps: not a multiple of anything (cuBLAS path) */
#define SMALL 5    /* tokens of the small-row steps (GEMV path) */
#define TOL   2e-2 /* relative error allowed against a reference computed differently */

enum { CFG_SMALL, CFG_DEFAULT };
static int cfg_small = CFG_SMALL, cfg_default = CFG_DEFAULT;

struct fixture {
  struct cgrtk_decode_cfg cfg;
  cgrtk_decode *w;
  cudaStream_t s;
};

static void small_cfg(struct cgrtk_decode_cfg *c) {
  cgrtk_decode_default_cfg(c);
  c->layers = 2;
  c->d_model = 256;
  c->heads = 4;
  c->ffn = 512;
  c->cache_len = 64;
  c->max_tokens = 64;
  c->seed = 7;
}

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof(*f));
  char err[256] = "";
  if (!f)
    return -1;
  if (*(int *)*state == CFG_SMALL)
    small_cfg(&f->cfg);
  else
    cgrtk_decode_default_cfg(&f->cfg);
  if (cgrtk_decode_create(&f->w, &f->cfg, err, sizeof(err)) != 0) {
    print_error("cgrtk_decode_create: %s\n", err);
    free(f);
    return -1;
  }
  if (cudaStreamCreateWithFlags(&f->s, cudaStreamNonBlocking) != cudaSuccess) {
    cgrtk_decode_destroy(f->w);
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fixture *f = *state;
  int dev = 0;
  cudaStreamSynchronize(f->s);
  cudaStreamDestroy(f->s);
  cgrtk_decode_destroy(f->w);
  free(f);
  if (cudaGetDevice(&dev) == cudaSuccess)
    cudaDeviceGraphMemTrim(dev);
  return 0;
}

/* ---------------------------------------------------------------- helpers */

static float bf16_to_float(uint16_t v) {
  uint32_t u = (uint32_t)v << 16;
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

/* Round to bf16 (nearest even), as the device stores every activation. */
static double bf16_round(double v) {
  float x = (float)v;
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&x, &u, sizeof(x));
  return x;
}

static uint16_t *alloc_rows(const struct fixture *f, int64_t rows) {
  uint16_t *p = malloc((size_t)rows * f->cfg.d_model * sizeof(uint16_t));
  assert_non_null(p);
  return p;
}

static int run_layers(struct fixture *f, int64_t rows) {
  for (int l = 0; l < f->cfg.layers; l++) {
    int rc = cgrtk_decode_attn(f->w, l, rows, f->s);
    if (rc == 0)
      rc = cgrtk_decode_mlp(f->w, l, rows, f->s);
    if (rc != 0) {
      print_error("layer %d: %s\n", l, cgrtk_decode_strerror(rc));
      return rc;
    }
  }
  return 0;
}

static void read_rows(struct fixture *f, int64_t rows, uint16_t *dst) {
  assert_int_equal(cgrtk_decode_read(f->w, rows, dst, f->s), 0);
  assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);
}

/* Stage `tokens` tokens padded to `rows`, run every layer at `rows`, read the first `keep` rows. */
static void forward(struct fixture *f, int64_t tokens, int64_t rows, uint64_t step, uint16_t *out,
                    int64_t keep) {
  assert_int_equal(cgrtk_decode_stage(f->w, tokens, rows, step, f->s), 0);
  assert_int_equal(run_layers(f, rows), 0);
  read_rows(f, keep, out);
}

static double rel_err(const double *got, const double *want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return sqrt(num) / sqrt(den > 0 ? den : 1e-300);
}

static double *to_double(const uint16_t *v, size_t n) {
  double *d = malloc(n * sizeof(double));
  assert_non_null(d);
  for (size_t i = 0; i < n; i++)
    d[i] = bf16_to_float(v[i]);
  return d;
}

/* Every value finite, and the root mean square within [lo, hi]. */
static void assert_sane(const uint16_t *v, size_t n, double lo, double hi) {
  double ss = 0;
  for (size_t i = 0; i < n; i++) {
    float x = bf16_to_float(v[i]);
    assert_true(isfinite(x));
    ss += (double)x * x;
  }
  double rms = sqrt(ss / (double)n);
  if (rms < lo || rms > hi)
    fail_msg("rms %g outside [%g, %g]", rms, lo, hi);
}

/* ---------------------------------------------------------------- CPU reference (float64)
 * The same math as the device, in double, rounding to bf16 where the device stores bf16. */

static double *gen_tensor(const struct cgrtk_decode_cfg *c, int layer, int tensor) {
  uint64_t n = cgrtk_decode_tensor_numel(c, tensor);
  double *t = malloc(n * sizeof(double));
  assert_non_null(t);
  for (uint64_t i = 0; i < n; i++)
    t[i] = cgrtk_decode_init_value(c, layer, tensor, i);
  return t;
}

static void ref_rmsnorm(const double *x, const double *gain, double *y, int rows, int d) {
  for (int r = 0; r < rows; r++) {
    double ss = 0;
    for (int c = 0; c < d; c++)
      ss += x[r * d + c] * x[r * d + c];
    double inv = 1.0 / sqrt(ss / d + (double)CGRTK_DECODE_RMS_EPS);
    for (int c = 0; c < d; c++)
      y[r * d + c] = bf16_round(x[r * d + c] * inv * gain[c]);
  }
}

/* y[rows, n] = bf16(x[rows, k] . w[n, k]^T + (res ? res : 0)). */
static void ref_linear(const double *x, const double *w, const double *res, double *y, int rows,
                       int n, int k) {
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < n; o++) {
      double acc = 0;
      for (int i = 0; i < k; i++)
        acc += x[r * k + i] * w[o * k + i];
      y[r * n + o] = bf16_round(acc + (res ? res[r * n + o] : 0.0));
    }
}

static void ref_attn(const struct cgrtk_decode_cfg *c, int layer, const double *h, double *out,
                     int rows) {
  const int d = c->d_model, heads = c->heads, hd = CGRTK_DECODE_HEAD_DIM, C = c->cache_len;
  double *gain = gen_tensor(c, layer, CGRTK_DECODE_T_ATTN_NORM);
  double *wqkv = gen_tensor(c, layer, CGRTK_DECODE_T_WQKV);
  double *wo = gen_tensor(c, layer, CGRTK_DECODE_T_WO);
  double *kc = gen_tensor(c, layer, CGRTK_DECODE_T_KCACHE);
  double *vc = gen_tensor(c, layer, CGRTK_DECODE_T_VCACHE);
  double *normed = malloc(sizeof(double) * rows * d), *qkv = malloc(sizeof(double) * rows * 3 * d);
  double *ctx = malloc(sizeof(double) * rows * d), *p = malloc(sizeof(double) * (C + rows));
  assert_true(normed && qkv && ctx && p);

  ref_rmsnorm(h, gain, normed, rows, d);
  ref_linear(normed, wqkv, NULL, qkv, rows, 3 * d, d);
  for (int r = 0; r < rows; r++) /* RoPE on q and k, rotate-half, position C + r */
    for (int which = 0; which < 2; which++)
      for (int hh = 0; hh < heads; hh++)
        for (int j = 0; j < hd / 2; j++) {
          double *v = qkv + (size_t)r * 3 * d + which * d + hh * hd;
          double a = (C + r) * pow(CGRTK_DECODE_ROPE_THETA, -(2.0 * j) / hd);
          double x1 = v[j], x2 = v[j + hd / 2];
          v[j] = bf16_round(x1 * cos(a) - x2 * sin(a));
          v[j + hd / 2] = bf16_round(x2 * cos(a) + x1 * sin(a));
        }
  for (int r = 0; r < rows; r++)
    for (int hh = 0; hh < heads; hh++) {
      const double *q = qkv + (size_t)r * 3 * d + hh * hd;
      int n = C + r + 1;
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < n; j++) {
        const double *k = j < C ? kc + ((size_t)j * heads + hh) * hd
                                : qkv + (size_t)(j - C) * 3 * d + d + hh * hd;
        double s = 0;
        for (int e = 0; e < hd; e++)
          s += q[e] * k[e];
        p[j] = s / sqrt((double)hd);
        mx = p[j] > mx ? p[j] : mx;
      }
      for (int j = 0; j < n; j++) {
        p[j] = exp(p[j] - mx);
        sum += p[j];
      }
      for (int e = 0; e < hd; e++) {
        double o = 0;
        for (int j = 0; j < n; j++) {
          const double *v = j < C ? vc + ((size_t)j * heads + hh) * hd
                                  : qkv + (size_t)(j - C) * 3 * d + 2 * d + hh * hd;
          o += p[j] * v[e];
        }
        ctx[(size_t)r * d + hh * hd + e] = bf16_round(o / sum);
      }
    }
  ref_linear(ctx, wo, h, out, rows, d, d);
  free(gain);
  free(wqkv);
  free(wo);
  free(kc);
  free(vc);
  free(normed);
  free(qkv);
  free(ctx);
  free(p);
}

static void ref_mlp(const struct cgrtk_decode_cfg *c, int layer, const double *h, double *out,
                    int rows) {
  const int d = c->d_model, ffn = c->ffn;
  double *gain = gen_tensor(c, layer, CGRTK_DECODE_T_MLP_NORM);
  double *wgu = gen_tensor(c, layer, CGRTK_DECODE_T_WGATE_UP);
  double *wdown = gen_tensor(c, layer, CGRTK_DECODE_T_WDOWN);
  double *normed = malloc(sizeof(double) * rows * d);
  double *gu = malloc(sizeof(double) * rows * 2 * ffn), *act = malloc(sizeof(double) * rows * ffn);
  assert_true(normed && gu && act);

  ref_rmsnorm(h, gain, normed, rows, d);
  ref_linear(normed, wgu, NULL, gu, rows, 2 * ffn, d);
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < ffn; i++) {
      double g = gu[(size_t)r * 2 * ffn + i], u = gu[(size_t)r * 2 * ffn + ffn + i];
      act[(size_t)r * ffn + i] = bf16_round(g / (1.0 + exp(-g)) * u);
    }
  ref_linear(act, wdown, h, out, rows, d, ffn);
  free(gain);
  free(wgu);
  free(wdown);
  free(normed);
  free(gu);
  free(act);
}

/* The block's output and its contribution (output - input) both match the reference. */
static void assert_block_matches(const char *what, const double *in, const double *got,
                                 const double *want, size_t n) {
  double *dg = malloc(n * sizeof(double)), *dw = malloc(n * sizeof(double));
  assert_true(dg && dw);
  for (size_t i = 0; i < n; i++) {
    dg[i] = got[i] - in[i];
    dw[i] = want[i] - in[i];
  }
  double e_out = rel_err(got, want, n), e_delta = rel_err(dg, dw, n);
  print_message("%s: relative error %.3g (output), %.3g (block contribution)\n", what, e_out,
                e_delta);
  assert_true(e_out < TOL);
  assert_true(e_delta < TOL);
  free(dg);
  free(dw);
}

/* ---------------------------------------------------------------- tests */

/* Two runs of the same calls from the same staged input give the same bits, on both paths. */
static void decode_is_deterministic(void **state) {
  struct fixture *f = *state;
  const int64_t counts[] = {ROWS, 1, SMALL};
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
    const int64_t rows = counts[k];
    size_t n = (size_t)rows * f->cfg.d_model;
    uint16_t *a = alloc_rows(f, rows), *b = alloc_rows(f, rows), *in = alloc_rows(f, rows);

    assert_int_equal(cgrtk_decode_stage(f->w, rows, rows, 1, f->s), 0);
    read_rows(f, rows, in);
    forward(f, rows, rows, 1, a, rows);
    forward(f, rows, rows, 1, b, rows);
    assert_memory_equal(a, b, n * sizeof(uint16_t));
    /* The layers did something, and activations stay O(1) through all of them. */
    assert_memory_not_equal(a, in, n * sizeof(uint16_t));
    assert_sane(a, n, 0.05, 50.0);
    free(a);
    free(b);
    free(in);
  }
}

static int count_nodes(cudaGraph_t g, enum cudaGraphNodeType type) {
  size_t n = 0;
  int count = 0;
  assert_int_equal(cudaGraphGetNodes(g, NULL, &n), cudaSuccess);
  cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof(*nodes));
  assert_non_null(nodes);
  assert_int_equal(cudaGraphGetNodes(g, nodes, &n), cudaSuccess);
  for (size_t i = 0; i < n; i++) {
    enum cudaGraphNodeType t;
    assert_int_equal(cudaGraphNodeGetType(nodes[i], &t), cudaSuccess);
    count += t == type;
  }
  free(nodes);
  return count;
}

/* Capture the layers at `rows` rows into a graph; replays give exactly the eager result. */
static void graph_matches_eager(struct fixture *f, int64_t rows, uint64_t step) {
  size_t bytes = (size_t)rows * f->cfg.d_model * sizeof(uint16_t);
  uint16_t *eager = alloc_rows(f, rows), *replay = alloc_rows(f, rows);
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;

  forward(f, rows, rows, step, eager, rows);

  assert_int_equal(cudaStreamBeginCapture(f->s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  int rc = run_layers(f, rows);
  cudaError_t end = cudaStreamEndCapture(f->s, &g); /* always: never leave the stream capturing */
  assert_int_equal(rc, 0);
  assert_int_equal(end, cudaSuccess);
  /* Each attn and mlp call allocates and frees its temporaries as one block inside the graph. */
  assert_int_equal(count_nodes(g, cudaGraphNodeTypeMemAlloc), 2 * f->cfg.layers);
  assert_int_equal(count_nodes(g, cudaGraphNodeTypeMemFree), 2 * f->cfg.layers);
  /* The GEMV path: 3 kernels for attn, 2 for mlp, nothing else. */
  if (rows <= cgrtk_decode_gemv_rows(f->w)) {
    size_t total = 0;
    assert_int_equal(cudaGraphGetNodes(g, NULL, &total), cudaSuccess);
    assert_int_equal(count_nodes(g, cudaGraphNodeTypeKernel), 5 * f->cfg.layers);
    assert_int_equal(total, (size_t)9 * f->cfg.layers);
  }
  assert_int_equal(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);

  for (int i = 0; i < 2; i++) {
    memset(replay, 0, bytes);
    assert_int_equal(cgrtk_decode_stage(f->w, rows, rows, step, f->s), 0);
    assert_int_equal(cudaGraphLaunch(exec, f->s), cudaSuccess);
    read_rows(f, rows, replay);
    assert_memory_equal(replay, eager, bytes);
  }
  /* And eager again after the replays: nothing the capture did changed the workload. */
  forward(f, rows, rows, step, replay, rows);
  assert_memory_equal(replay, eager, bytes);

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  free(eager);
  free(replay);
}

static void decode_graph_matches_eager(void **state) {
  struct fixture *f = *state;
  graph_matches_eager(f, ROWS, 2);
  graph_matches_eager(f, 1, 2);
  graph_matches_eager(f, SMALL, 2);
  graph_matches_eager(f, CGRTK_DECODE_GEMV_ROWS, 2);
}

/* One layer's attention and MLP blocks at `rows` rows against the float64 CPU reference. */
static void matches_reference(struct fixture *f, int rows, uint64_t step) {
  const struct cgrtk_decode_cfg *c = &f->cfg;
  const int layer = c->layers - 1, d = c->d_model;
  const size_t n = (size_t)rows * d;
  uint16_t *raw = alloc_rows(f, rows);

  assert_int_equal(cgrtk_decode_stage(f->w, rows, rows, step, f->s), 0);
  read_rows(f, rows, raw);
  double *h0 = to_double(raw, n), *ref = malloc(n * sizeof(double));
  assert_non_null(ref);
  print_message("%d rows (%s path):\n", rows,
                rows <= cgrtk_decode_gemv_rows(f->w) ? "GEMV" : "cuBLAS");

  assert_int_equal(cgrtk_decode_attn(f->w, layer, rows, f->s), 0);
  read_rows(f, rows, raw);
  double *h1 = to_double(raw, n);
  ref_attn(c, layer, h0, ref, rows);
  assert_block_matches("attention", h0, h1, ref, n);

  assert_int_equal(cgrtk_decode_mlp(f->w, layer, rows, f->s), 0);
  read_rows(f, rows, raw);
  double *h2 = to_double(raw, n);
  ref_mlp(c, layer, h1, ref, rows);
  assert_block_matches("mlp", h1, h2, ref, n);

  free(raw);
  free(h0);
  free(h1);
  free(h2);
  free(ref);
}

static void decode_matches_cpu_reference(void **state) {
  struct fixture *f = *state;
  const struct cgrtk_decode_cfg *c = &f->cfg;
  const int d = c->d_model;
  uint16_t *raw = alloc_rows(f, ROWS);

  /* The staged input is exactly the documented function; the padding rows are zero. */
  assert_int_equal(cgrtk_decode_stage(f->w, ROWS - 5, ROWS, 3, f->s), 0);
  read_rows(f, ROWS, raw);
  for (int r = 0; r < ROWS; r++)
    for (int col = 0; col < d; col++) {
      float want = r < ROWS - 5 ? cgrtk_decode_input_value(c, 3, r, col) : 0.0f;
      if (bf16_to_float(raw[(size_t)r * d + col]) != want)
        fail_msg("staged input (%d, %d) is %g, want %g", r, col,
                 (double)bf16_to_float(raw[(size_t)r * d + col]), (double)want);
    }
  free(raw);

  matches_reference(f, ROWS, 3);
  matches_reference(f, 1, 3);
  matches_reference(f, SMALL, 3);
  matches_reference(f, CGRTK_DECODE_GEMV_ROWS, 3);
  matches_reference(f, CGRTK_DECODE_GEMV_ROWS + 1, 3);
}

/* The default shapes (K = 2816 for W_down, 16 heads, 512 cached keys) on both paths. */
static void decode_default_matches_cpu_reference(void **state) {
  struct fixture *f = *state;
  matches_reference(f, 1, 3);
  matches_reference(f, 2, 3);
  matches_reference(f, CGRTK_DECODE_GEMV_ROWS + 1, 3);
}

/* Tokens padded with zero rows up to max_tokens give (nearly: cuBLAS may pick another algorithm
 * for another row count) the tokens' result unpadded; the padding rows stay finite. */
static void decode_padding_rows_do_not_matter(void **state) {
  struct fixture *f = *state;
  const int64_t padded = f->cfg.max_tokens;
  const size_t n = (size_t)ROWS * f->cfg.d_model;
  uint16_t *plain = alloc_rows(f, ROWS), *pad = alloc_rows(f, padded);

  forward(f, ROWS, ROWS, 4, plain, ROWS);
  forward(f, ROWS, padded, 4, pad, padded);
  assert_sane(pad, (size_t)padded * f->cfg.d_model, 1e-3, 1e3);
  double *a = to_double(pad, n), *b = to_double(plain, n);
  double e = rel_err(a, b, n);
  print_message("padded to %lld rows: relative error %.3g\n", (long long)padded, e);
  assert_true(e < TOL);
  free(a);
  free(b);
  free(plain);
  free(pad);
}

/* On the GEMV path a row's result does not depend on the row count: padding rows change no bit
 * of the real rows, and neither do other tokens after them. */
static void decode_small_rows_padding_is_exact(void **state) {
  struct fixture *f = *state;
  const int64_t padded = cgrtk_decode_gemv_rows(f->w);
  if (padded < 4) {
    print_message("skipped: GEMV path limited to %lld rows\n", (long long)padded);
    return;
  }
  const size_t bytes = (size_t)3 * f->cfg.d_model * sizeof(uint16_t);
  uint16_t *plain = alloc_rows(f, 3), *pad = alloc_rows(f, padded), *full = alloc_rows(f, padded);

  forward(f, 3, 3, 6, plain, 3);
  forward(f, 3, padded, 6, pad, padded);
  assert_memory_equal(pad, plain, bytes);
  assert_sane(pad, (size_t)padded * f->cfg.d_model, 1e-3, 1e3);
  /* Real tokens after them (causal attention): the first three rows still do not change. */
  forward(f, padded, padded, 6, full, padded);
  assert_memory_equal(full, plain, bytes);
  free(plain);
  free(pad);
  free(full);
}

/* Another workload of the same configuration created with other launch options: without
 * programmatic dependent launch and L2 prefetch the bits are the same; with the GEMV path
 * switched off (cuBLAS) the results agree within rounding. */
static void decode_launch_options_agree(void **state) {
  struct fixture *f = *state;
  const int64_t counts[] = {1, SMALL, ROWS};
  cgrtk_decode *plain = NULL, *blas = NULL;
  char err[256] = "";

  setenv("CGRTK_DECODE_PDL", "0", 1);
  setenv("CGRTK_DECODE_PREFETCH", "0", 1);
  int rc = cgrtk_decode_create(&plain, &f->cfg, err, sizeof(err));
  unsetenv("CGRTK_DECODE_PDL");
  unsetenv("CGRTK_DECODE_PREFETCH");
  if (rc != 0)
    fail_msg("cgrtk_decode_create: %s", err);
  setenv("CGRTK_DECODE_GEMV_ROWS", "0", 1);
  rc = cgrtk_decode_create(&blas, &f->cfg, err, sizeof(err));
  setenv("CGRTK_DECODE_GEMV_ROWS", "8", 1); /* back to this test program's setting */
  if (rc != 0)
    fail_msg("cgrtk_decode_create: %s", err);
  assert_int_equal(cgrtk_decode_gemv_rows(blas), 0);

  cgrtk_decode *mine = f->w;
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
    const int64_t rows = counts[k];
    const size_t n = (size_t)rows * f->cfg.d_model;
    uint16_t *a = alloc_rows(f, rows), *b = alloc_rows(f, rows), *c = alloc_rows(f, rows);
    f->w = mine;
    forward(f, rows, rows, 7, a, rows);
    f->w = plain;
    forward(f, rows, rows, 7, b, rows);
    f->w = blas;
    forward(f, rows, rows, 7, c, rows);
    f->w = mine;
    assert_memory_equal(a, b, n * sizeof(uint16_t));
    double *da = to_double(a, n), *dc = to_double(c, n);
    double e = rel_err(da, dc, n);
    print_message("%lld rows: relative error %.3g against the cuBLAS path\n", (long long)rows, e);
    assert_true(e < TOL);
    free(da);
    free(dc);
    free(a);
    free(b);
    free(c);
  }
  assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);
  cgrtk_decode_destroy(plain);
  cgrtk_decode_destroy(blas);
}

/* The cuBLASLt path as cgrt bench runs it (no GEMV path): at a row count create tuned, at one it
 * did not (the heuristic's choice, taken at the first call and kept), and at that one once tuned
 * late, replays give exactly the eager bits. */
static void decode_tuned_graph_matches_eager(void **state) {
  struct fixture *f = *state;
  cgrtk_decode *mine = f->w, *blas = NULL;
  char err[256] = "";
  const int64_t untuned = 13; /* neither in 1..8 nor a power of two nor max_tokens */
  const char *tune = getenv("CGRTK_DECODE_TUNE");
  const int tuning = !(tune && strcmp(tune, "0") == 0);

  setenv("CGRTK_DECODE_GEMV_ROWS", "0", 1);
  int rc = cgrtk_decode_create(&blas, &f->cfg, err, sizeof(err));
  setenv("CGRTK_DECODE_GEMV_ROWS", "8", 1); /* back to this test program's setting */
  if (rc != 0)
    fail_msg("cgrtk_decode_create: %s", err);
  assert_int_equal(cgrtk_decode_gemv_rows(blas), 0);
  if (tuning) {
    assert_true(cgrtk_decode_tuned(blas, 1));
    assert_true(cgrtk_decode_tuned(blas, 16));
    assert_true(cgrtk_decode_tuned(blas, f->cfg.max_tokens));
    print_message("tuned projections of one layer: %.2f us at 1 row, %.2f us at 16 rows\n",
                  cgrtk_decode_tuned_us(blas, 1), cgrtk_decode_tuned_us(blas, 16));
    assert_true(cgrtk_decode_tuned_us(blas, 1) > 0.0);
  }
  assert_false(cgrtk_decode_tuned(blas, untuned));

  f->w = blas;
  graph_matches_eager(f, 1, 8); /* the decode step cgrt bench measures */
  graph_matches_eager(f, 16, 8);
  graph_matches_eager(f, untuned, 8);
  assert_false(cgrtk_decode_tuned(blas, untuned));
  const int64_t late[] = {untuned, 1}; /* 1: already tuned, kept */
  rc = cgrtk_decode_tune(blas, late, 2, err, sizeof(err));
  if (rc != 0)
    fail_msg("cgrtk_decode_tune: %s", err);
  assert_true(cgrtk_decode_tuned(blas, untuned));
  graph_matches_eager(f, untuned, 8);
  graph_matches_eager(f, 1, 8);
  f->w = mine;

  assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);
  cgrtk_decode_destroy(blas);
}

/* A captured attention call owns graph memory once its executable has been launched. */
static void decode_temporaries_are_graph_memory(void **state) {
  struct fixture *f = *state;
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  int dev = 0;
  unsigned long long reserved = 0;

  assert_int_equal(cgrtk_decode_stage(f->w, ROWS, ROWS, 5, f->s), 0);
  assert_int_equal(cgrtk_decode_attn(f->w, 0, ROWS, f->s), 0); /* eager first, as cgrt does */
  assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);

  assert_int_equal(cudaStreamBeginCapture(f->s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  int rc = cgrtk_decode_attn(f->w, 0, ROWS, f->s);
  cudaError_t end = cudaStreamEndCapture(f->s, &g);
  assert_int_equal(rc, 0);
  assert_int_equal(end, cudaSuccess);
  assert_int_equal(count_nodes(g, cudaGraphNodeTypeMemAlloc), 1); /* one block per call */
  assert_int_equal(count_nodes(g, cudaGraphNodeTypeMemFree), 1);
  assert_int_equal(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  assert_int_equal(cudaGraphLaunch(exec, f->s), cudaSuccess);
  assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);

  assert_int_equal(cudaGetDevice(&dev), cudaSuccess);
  assert_int_equal(
      cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemCurrent, &reserved),
      cudaSuccess);
  print_message("graph memory reserved: %llu bytes (temporaries of one attn call: %zu)\n", reserved,
                cgrtk_decode_temp_bytes(&f->cfg, ROWS));
  assert_true(reserved > 0);

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
}

static void decode_rejects_bad_arguments(void **state) {
  (void)state;
  struct cgrtk_decode_cfg c;
  static char sentinel;
  cgrtk_decode *w = (cgrtk_decode *)&sentinel; /* a failed create must reset it to NULL */
  char err[256] = "";
  small_cfg(&c);
  c.d_model = 200;
  assert_int_not_equal(cgrtk_decode_create(&w, &c, err, sizeof(err)), 0);
  assert_null(w);
  assert_non_null(strstr(err, "d_model"));

  small_cfg(&c);
  assert_int_equal(cgrtk_decode_create(&w, &c, err, sizeof(err)), 0);
  assert_int_not_equal(cgrtk_decode_stage(w, 1, c.max_tokens + 1, 0, NULL), 0);
  assert_int_not_equal(cgrtk_decode_stage(w, 3, 2, 0, NULL), 0);
  assert_int_not_equal(cgrtk_decode_attn(w, c.layers, 1, NULL), 0);
  assert_int_not_equal(cgrtk_decode_mlp(w, 0, c.max_tokens + 1, NULL), 0);
  assert_int_equal(cgrtk_decode_attn(w, 0, 0, NULL), 0); /* zero rows: nothing to do */
  assert_int_equal(cgrtk_decode_row_bytes(w), (size_t)c.d_model * 2);
  assert_non_null(cgrtk_decode_hidden(w));
  assert_true(cgrtk_decode_flops(&c, 8) > 0);
  assert_true(cgrtk_decode_temp_bytes(&c, 8) > 0);
  assert_int_equal(cgrtk_decode_temp_bytes(&c, 0), 0);
  assert_true(cgrtk_decode_gemv_rows(w) >= 0 &&
              cgrtk_decode_gemv_rows(w) <= CGRTK_DECODE_GEMV_ROWS);
  assert_int_equal(cgrtk_decode_gemv_rows(NULL), 0);
  const int64_t zero[] = {0}, over[] = {(int64_t)c.max_tokens + 1}, one[] = {1};
  assert_int_not_equal(cgrtk_decode_tune(w, zero, 1, err, sizeof(err)), 0);
  assert_int_not_equal(cgrtk_decode_tune(w, over, 1, err, sizeof(err)), 0);
  assert_non_null(strstr(err, "max_tokens"));
  assert_int_not_equal(cgrtk_decode_tune(NULL, one, 1, err, sizeof(err)), 0);
  assert_int_equal(cgrtk_decode_tune(w, NULL, 0, err, sizeof(err)), 0); /* nothing to tune */
  assert_int_equal(cgrtk_decode_tuned(NULL, 1), 0);
  assert_int_equal(cgrtk_decode_tuned(w, 0), 0);
  assert_int_equal(cgrtk_decode_tuned(w, c.max_tokens + 1), 0);
  assert_true(cgrtk_decode_tuned_us(w, 0) == 0.0);
  cgrtk_decode_destroy(w);
}

static float chain_host(float x, int kernels) {
  for (int i = 0; i < kernels; i++)
    x = x + 1.0f;
  return x;
}

/* The chain applies its recurrence once per kernel, bit for bit, eagerly and from a graph. The
 * input is written on the chain's own stream: a cudaMemcpy from pageable memory may return before
 * its copy lands, and nothing orders the legacy stream's copy before a non-blocking stream's
 * kernels (the test read the chain of a half-written input on an idle H200, session 39). */
static void chain_matches_host_recurrence(void **state) {
  (void)state;
  const int counts[] = {0, 1, 7, 1000};
  const float x0 = -7.3f;
  float *buf = NULL, got = 0, want = 0;
  cudaStream_t s;
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  assert_int_equal(cudaMalloc((void **)&buf, sizeof(float)), cudaSuccess);
  assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);

  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
    assert_int_equal(cudaMemcpyAsync(buf, &x0, sizeof(x0), cudaMemcpyHostToDevice, s), cudaSuccess);
    assert_int_equal(cgrtk_chain(buf, counts[i], s), 0);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(cudaMemcpy(&got, buf, sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
    want = chain_host(x0, counts[i]);
    assert_memory_equal(&got, &want, sizeof(got));
  }

  assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  int rc = cgrtk_chain(buf, 1000, s);
  cudaError_t end = cudaStreamEndCapture(s, &g);
  assert_int_equal(rc, 0);
  assert_int_equal(end, cudaSuccess);
  assert_int_equal(count_nodes(g, cudaGraphNodeTypeKernel), 1000);
  assert_int_equal(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  assert_int_equal(cudaMemcpyAsync(buf, &x0, sizeof(x0), cudaMemcpyHostToDevice, s), cudaSuccess);
  assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  assert_int_equal(cudaMemcpy(&got, buf, sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
  want = chain_host(x0, 1000);
  assert_memory_equal(&got, &want, sizeof(got));

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaFree(buf);
}

/*
 * The clock probe spins at least the cycles asked and reads an SM clock within what the device
 * can run at (cudaDevAttrClockRate is its peak, in kHz): cgrt bench --explain prints it.
 */
static void clock_probe_reads_the_sm_clock(void **state) {
  (void)state;
  unsigned long long *d = NULL, h[2] = {0, 0};
  int dev = 0, peak_khz = 0;
  assert_int_equal(cudaGetDevice(&dev), cudaSuccess);
  assert_int_equal(cudaDeviceGetAttribute(&peak_khz, cudaDevAttrClockRate, dev), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&d, sizeof(h)), cudaSuccess);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(cgrtk_clock_probe(d, 400000, NULL), 0);
    assert_int_equal(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
    assert_true(h[0] >= 400000);
    assert_true(h[1] > 0);
    double mhz = (double)h[0] * 1e3 / (double)h[1];
    printf("clock probe: %llu cycles in %llu ns: %.0f MHz (peak %d MHz)\n", h[0], h[1], mhz,
           peak_khz / 1000);
    assert_true(mhz > 50.0);
    assert_true(mhz < 1.1 * peak_khz / 1000.0);
  }
  cudaFree(d);
}

/* cmocka_unit_test_prestate_setup_teardown, with the configuration in the test's name. */
#define DECODE_TEST(fn, cfg)                                                                       \
  { #fn " (" #cfg ")", fn, setup, teardown, &cfg }

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  /* Both projection paths are tested: the GEMV path up to 8 rows (opt-in), cuBLAS above. */
  setenv("CGRTK_DECODE_GEMV_ROWS", "8", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(decode_rejects_bad_arguments),
      DECODE_TEST(decode_is_deterministic, cfg_small),
      DECODE_TEST(decode_graph_matches_eager, cfg_small),
      DECODE_TEST(decode_matches_cpu_reference, cfg_small),
      DECODE_TEST(decode_padding_rows_do_not_matter, cfg_small),
      DECODE_TEST(decode_small_rows_padding_is_exact, cfg_small),
      DECODE_TEST(decode_launch_options_agree, cfg_small),
      DECODE_TEST(decode_temporaries_are_graph_memory, cfg_small),
      DECODE_TEST(decode_tuned_graph_matches_eager, cfg_small),
      DECODE_TEST(decode_is_deterministic, cfg_default),
      DECODE_TEST(decode_graph_matches_eager, cfg_default),
      DECODE_TEST(decode_default_matches_cpu_reference, cfg_default),
      DECODE_TEST(decode_padding_rows_do_not_matter, cfg_default),
      DECODE_TEST(decode_small_rows_padding_is_exact, cfg_default),
      DECODE_TEST(decode_launch_options_agree, cfg_default),
      DECODE_TEST(decode_temporaries_are_graph_memory, cfg_default),
      DECODE_TEST(decode_tuned_graph_matches_eager, cfg_default),
      cmocka_unit_test(chain_matches_host_recurrence),
      cmocka_unit_test(clock_probe_reads_the_sm_clock),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
