/*
 * test_cp1.c (GPU) - the cp workload (kernels/cp_host.c) under dynamic_cp on one GPU, cp size 1,
 * with a 1-rank NCCL world, on the default shape and on the launch-bound one `cgrt bench` measures
 * (cgrtk_cp_launch_bound_cfg): over steps of varying packed sequence lengths the output is bitwise
 * equal to the eager reference (the same configuration with warmup_steps = 1000000), the graphs
 * (module graphs, and on the launch shape also graph_scope = step: one per step body) were
 * captured and replayed, and one step matches a host reference of the math within fp32
 * rounding (padding rows exactly 0). Fused and unfused RMSNorm, and calls chained by programmatic
 * dependent launch or not (pdl_entry), give the same bits. A step over a THD slot's capacity fails
 * with CGRT_E_CAPACITY naming max_packed_tokens under over_capacity = error, and under
 * over_capacity = eager runs and matches eager. A training body whose update and module work are
 * host functions (cudaLaunchHostFunc: host nodes in graphs) runs each once a step, in warm-up,
 * capture and replay steps alike, in both graph scopes (issue 42).
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

#if defined(CGRT_HAVE_CUDA) && defined(CGRT_HAVE_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cgrt/cgrt.h"
#include "cp_host.h"

#define MAX_PACKED 512  /* [dynamic_cp] max_packed_tokens */
#define MAX_SEQS   8    /* [dynamic_cp] max_sequences */
#define MAX_ROWS   1024 /* workload capacity: room for over-capacity steps */
#define LAYERS     2
#define STEPS      10 /* 2 warm-up, 2 captures (a slot each), 6 replays */

static ncclComm_t world;

struct lengths {
  int n;
  int32_t len[MAX_SEQS + 1];
};

/* Full, padded, one token, seven equal, with an empty sequence, max_sequences, one short. */
static const struct lengths patterns[] = {
    {1, {512}},       {3, {100, 37, 200}},
    {1, {1}},         {7, {64, 64, 64, 64, 64, 64, 64}},
    {3, {3, 0, 250}}, {8, {10, 20, 30, 40, 50, 60, 70, 80}},
    {1, {511}},
};
#define NUM_PATTERNS (int)(sizeof(patterns) / sizeof(patterns[0]))

/* The graph runtime's scope in the test running: module graphs, or graph_scope = step (set by
 * the _step_scope tests; the eager reference always takes module scope). */
static int step_scope;

static void config(char *buf, size_t len, int warmup, const char *over_capacity) {
  const int step = step_scope && warmup < 1000000;
  snprintf(buf, len,
           "[cuda_graph]\nimpl = dynamic_cp\n%swarmup_steps = %d\n"
           "[dynamic_cp]\ncp_sizes = 1\nmax_packed_tokens = %d\nmax_sequences = %d\n"
           "graph_slots = 2\nover_capacity = %s\n%s[runtime]\ndriver = cuda\nlog = warn\n%s",
           step ? "" : "modules = attn mlp\n", warmup, MAX_PACKED, MAX_SEQS, over_capacity,
           step ? "graph_scope = step\n" : "", step ? "[host]\nnan_check = off\n" : "");
}

/* A runtime and its own workload, handed the world communicator. */
struct side {
  cgrt_runtime *rt;
  cgrtk_cp *w;
  struct cp_host h;
};

/* The workload's shape in the test running: the default, or the launch-bound one the bench
 * measures (set by the _launch_shape tests). */
static int launch_shape;

static void side_open(struct side *s, int warmup, const char *over_capacity) {
  char ini[512], err[256];
  config(ini, sizeof(ini), warmup, over_capacity);
  struct cgrtk_cp_cfg cfg;
  if (launch_shape)
    cgrtk_cp_launch_bound_cfg(&cfg);
  else
    cgrtk_cp_default_cfg(&cfg);
  cfg.layers = LAYERS;
  if (cgrtk_cp_create(&s->w, &cfg, MAX_ROWS, err, sizeof(err)) != 0)
    fail_msg("cgrtk_cp_create: %s", err);
  if (cgrt_open_string(&s->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  if (cp_host_open(&s->h, s->w, s->rt) != 0)
    fail_msg("modules: %s", cp_host_error(&s->h));
  if (cgrt_set_world_comm(s->rt, world) != 0)
    fail_msg("cgrt_set_world_comm: %s", cgrt_last_error(s->rt));
}

static void side_close(struct side *s) {
  assert_int_equal(cgrt_release_graphs(s->rt), 0);
  assert_int_equal(cgrt_close(s->rt), 0);
  cgrtk_cp_destroy(s->w);
}

/* One step; its output rows into out (MAX_ROWS * d floats); the row count. */
static int64_t step(struct side *s, uint64_t data, const struct lengths *l, float *out,
                    cgrt_step_report *rep) {
  int rc = cp_host_step(&s->h, data, l->len, l->n, 1, rep);
  if (rc != 0)
    fail_msg("step (data %llu, %d sequences): %s: %s", (unsigned long long)data, l->n,
             cgrt_strerror(rc), cp_host_error(&s->h));
  int64_t rows = 0;
  const size_t cap = (size_t)MAX_ROWS * cgrtk_cp_config(s->w)->d_model;
  if (cp_host_read(&s->h, 1, out, cap, &rows) != 0)
    fail_msg("read: %s", cp_host_error(&s->h));
  return rows;
}

/* ---------------------------------------------------------------- host reference */

static void ref_rmsnorm(const float *x, const float *gain, float *y, int64_t rows, int d) {
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int c = 0; c < d; c++)
      ss += (double)x[r * d + c] * x[r * d + c];
    const double inv = 1.0 / sqrt(ss / d + CGRTK_CP_RMS_EPS);
    for (int c = 0; c < d; c++)
      y[r * d + c] = (float)(x[r * d + c] * inv * gain[c]);
  }
}

/* y[r][o] (op) x[r] . w[o] for o < n, k inputs; op 0 store, 1 silu, 2 add. */
static void ref_linear(const float *x, const float *w, float *y, int64_t rows, int n, int k,
                       int op) {
  for (int64_t r = 0; r < rows; r++)
    for (int o = 0; o < n; o++) {
      double acc = 0;
      for (int i = 0; i < k; i++)
        acc += (double)x[r * k + i] * w[(size_t)o * k + i];
      if (op == 0)
        y[r * n + o] = (float)acc;
      else if (op == 1)
        y[r * n + o] = (float)(acc / (1.0 + exp(-acc)));
      else
        y[r * n + o] = (float)(y[r * n + o] + acc);
    }
}

static float *ref_tensor(const struct cgrtk_cp_cfg *c, int layer, int t) {
  const uint64_t n = cgrtk_cp_tensor_numel(c, t);
  float *p = malloc(n * sizeof(float));
  assert_non_null(p);
  for (uint64_t i = 0; i < n; i++)
    p[i] = cgrtk_cp_init_value(c, layer, t, i);
  return p;
}

/* The whole forward of one packed batch (padded to P rows) on the host, in double. */
static void ref_forward(const struct cgrtk_cp_cfg *c, uint64_t data, const struct lengths *l,
                        int64_t P, float *h) {
  const int d = c->d_model, f = c->ffn, H = c->heads, D = CGRTK_CP_HEAD_DIM;
  int64_t T = 0;
  int32_t start[MAX_SEQS + 2];
  for (int i = 0; i < l->n; i++) {
    start[i] = (int32_t)T;
    T += l->len[i];
  }
  for (int64_t g = 0; g < P; g++)
    for (int col = 0; col < d; col++)
      h[g * d + col] = g < T ? cgrtk_cp_input_value(c, data, g, col) : 0.0f;
  float *xn = malloc((size_t)P * d * sizeof(float)), *q = malloc((size_t)P * d * sizeof(float));
  float *kv = malloc((size_t)P * 2 * d * sizeof(float)), *o = malloc((size_t)P * d * sizeof(float));
  float *a = malloc((size_t)P * f * sizeof(float));
  double *sc = malloc((size_t)P * sizeof(double));
  assert_true(xn && q && kv && o && a && sc);
  for (int layer = 0; layer < c->layers; layer++) {
    float *t[CGRTK_CP_T_COUNT];
    for (int i = 0; i < CGRTK_CP_T_COUNT; i++)
      t[i] = ref_tensor(c, layer, i);
    ref_rmsnorm(h, t[CGRTK_CP_T_ATTN_NORM], xn, P, d);
    ref_linear(xn, t[CGRTK_CP_T_WQKV], q, P, d, d, 0);
    ref_linear(xn, t[CGRTK_CP_T_WQKV] + (size_t)d * d, kv, P, 2 * d, d, 0);
    memset(o, 0, (size_t)P * d * sizeof(float));
    for (int s = 0; s < l->n; s++)
      for (int64_t pos = 0; pos < l->len[s]; pos++) {
        const int64_t g = start[s] + pos;
        for (int hd = 0; hd < H; hd++) {
          double m = -INFINITY, sum = 0;
          for (int64_t j = start[s]; j <= g; j++) {
            double dot = 0;
            for (int e = 0; e < D; e++)
              dot += (double)q[g * d + hd * D + e] * kv[j * 2 * d + hd * D + e];
            sc[j] = dot / 8.0;
            m = sc[j] > m ? sc[j] : m;
          }
          for (int64_t j = start[s]; j <= g; j++)
            sum += (sc[j] = exp(sc[j] - m));
          for (int e = 0; e < D; e++) {
            double acc = 0;
            for (int64_t j = start[s]; j <= g; j++)
              acc += sc[j] * kv[j * 2 * d + d + hd * D + e];
            o[g * d + hd * D + e] = (float)(acc / sum);
          }
        }
      }
    ref_linear(o, t[CGRTK_CP_T_WO], h, P, d, d, 2);
    ref_rmsnorm(h, t[CGRTK_CP_T_MLP_NORM], xn, P, d);
    ref_linear(xn, t[CGRTK_CP_T_W1], a, P, f, d, 1);
    ref_linear(a, t[CGRTK_CP_T_W2], h, P, d, f, 2);
    for (int i = 0; i < CGRTK_CP_T_COUNT; i++)
      free(t[i]);
  }
  free(xn);
  free(q);
  free(kv);
  free(o);
  free(a);
  free(sc);
}

/* ---------------------------------------------------------------- tests */

static float *out_graph, *out_eager;

static int setup(void **state) {
  (void)state;
  setenv("NCCL_NVLS_ENABLE", "0", 1); /* NVLink multicast stays off on the lent machines */
  int dev = 0;
  if (ncclCommInitAll(&world, 1, &dev) != ncclSuccess)
    return -1;
  const size_t n = (size_t)MAX_ROWS * 512;
  out_graph = malloc(n * sizeof(float));
  out_eager = malloc(n * sizeof(float));
  return out_graph && out_eager ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  free(out_graph);
  free(out_eager);
  /* Every runtime (and graph) referring to it was closed by the tests. */
  ncclCommFinalize(world);
  return ncclCommDestroy(world) == ncclSuccess ? 0 : -1;
}

static void assert_same(int64_t rows_g, int64_t rows_e, int64_t d, const char *what, int s) {
  assert_int_equal(rows_g, rows_e);
  if (memcmp(out_graph, out_eager, (size_t)(rows_g * d) * sizeof(float)) != 0) {
    int64_t i = 0;
    while (out_graph[i] == out_eager[i])
      i++;
    fail_msg("%s, step %d: output differs from eager at row %lld col %lld (%.9g vs %.9g)", what, s,
             (long long)(i / d), (long long)(i % d), out_graph[i], out_eager[i]);
  }
}

static void graphs_equal_eager(void **state) {
  (void)state;
  struct side g = {0}, e = {0};
  side_open(&g, 2, "error");
  side_open(&e, 1000000, "error");
  const int64_t d = cgrtk_cp_config(g.w)->d_model;
  cgrt_mode modes[STEPS];
  for (int s = 0; s < STEPS; s++) {
    const struct lengths *l = &patterns[s % NUM_PATTERNS];
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    int64_t rg = step(&g, (uint64_t)s, l, out_graph, &rep);
    int64_t re = step(&e, (uint64_t)s, l, out_eager, NULL);
    modes[s] = rep.mode;
    assert_int_equal(rg, MAX_PACKED); /* the slot pads every step to the captured size */
    assert_same(rg, re, d, "dynamic_cp, cp 1", s);
    int64_t tokens = 0;
    for (int i = 0; i < l->n; i++)
      tokens += l->len[i];
    for (int64_t i = 0; i < rg * d; i++) {
      if (!isfinite(out_graph[i]))
        fail_msg("step %d: row %lld is not finite", s, (long long)(i / d));
      if (i >= tokens * d && out_graph[i] != 0.0f)
        fail_msg("step %d: padding row %lld is not 0", s, (long long)(i / d));
    }
  }
  assert_true(modes[0] == CGRT_MODE_WARMUP || modes[0] == CGRT_MODE_EAGER);
  assert_int_equal(modes[STEPS - 1], CGRT_MODE_REPLAY);
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(g.rt, &st), 0);
  if (step_scope) { /* a body graph per slot; a replayed body makes no module calls */
    assert_int_equal(st.captures, 2);
  } else {
    assert_true(st.captures >= 2 * LAYERS); /* attn and mlp of every layer, per slot */
    assert_true(st.calls_by_mode[CGRT_MODE_REPLAY] > 0);
  }
  assert_int_equal(st.fallbacks, 0);
  cgrt_stats se = {.struct_size = sizeof(se)};
  assert_int_equal(cgrt_stats_get(e.rt, &se), 0);
  assert_int_equal(se.captures, 0);
  side_close(&g);
  side_close(&e);
}

static void matches_host_reference(void **state) {
  (void)state;
  struct side g = {0};
  side_open(&g, 2, "error");
  const struct cgrtk_cp_cfg *c = cgrtk_cp_config(g.w);
  const struct lengths *l = &patterns[1]; /* three sequences and padding */
  const uint64_t data = 77;
  int64_t rows = 0;
  for (int s = 0; s < 5; s++) /* warm-up, capture, replays: the last one is compared */
    rows = step(&g, data, l, out_graph, NULL);
  float *ref = malloc((size_t)rows * c->d_model * sizeof(float));
  assert_non_null(ref);
  ref_forward(c, data, l, rows, ref);
  double worst = 0;
  for (int64_t i = 0; i < rows * c->d_model; i++) {
    const double err = fabs((double)out_graph[i] - ref[i]) / (1.0 + fabs((double)ref[i]));
    worst = err > worst ? err : worst;
    if (ref[i] == 0.0f && out_graph[i] != 0.0f)
      fail_msg("row %lld col %lld: %.9g where the reference is 0", (long long)(i / c->d_model),
               (long long)(i % c->d_model), out_graph[i]);
  }
  if (worst > 2e-3)
    fail_msg("the output differs from the host reference by %.3g (relative)", worst);
  free(ref);
  side_close(&g);
}

/* graphs_equal_eager and matches_host_reference again on the launch-bound shape of `cgrt bench
 * --workload cp` (d 64, one head): a per-test setup and teardown switch the shape. */
static int use_launch_shape(void **state) {
  (void)state;
  launch_shape = 1;
  return 0;
}

static int use_default_shape(void **state) {
  (void)state;
  launch_shape = 0;
  step_scope = 0;
  return 0;
}

static int use_launch_shape_step_scope(void **state) {
  (void)state;
  launch_shape = 1;
  step_scope = 1;
  return 0;
}

/* The THD metadata and input rows (data) of the packed lengths l at cp 1, staged on st. */
struct staged {
  const int32_t *cu, *cup;
  int nps;
};

static struct staged stage_batch(cgrtk_cp *w, const struct lengths *l, int64_t padded,
                                 uint64_t data, cudaStream_t st) {
  struct staged b = {NULL, NULL, 0};
  assert_int_equal(cgrtk_cp_stage_thd(w, l->len, l->n, padded, st, &b.cu, &b.cup, &b.nps), 0);
  assert_int_equal(cgrtk_cp_stage(w, data, l->len, l->n, padded, 1, 0, st), 0);
  return b;
}

/* Every layer's attn and mlp call of w over b on st (no cgrt); the layer whose call failed, or
 * -1. */
static int issue_layers(cgrtk_cp *w, const struct staged *b, int64_t padded, cudaStream_t st) {
  for (int layer = 0; layer < cgrtk_cp_config(w)->layers; layer++)
    if (cgrtk_cp_attn(w, layer, b->cu, b->cup, b->nps, padded, 1, 0, NULL, st) != 0 ||
        cgrtk_cp_mlp(w, layer, padded, st) != 0)
      return layer;
  return -1;
}

/* One eager forward of w over the packed lengths l (cp 1, no cgrt) into out. */
static void direct_forward(cgrtk_cp *w, const struct lengths *l, int64_t padded, uint64_t data,
                           cudaStream_t st, float *out) {
  const struct staged b = stage_batch(w, l, padded, data, st);
  const int failed = issue_layers(w, &b, padded, st);
  if (failed >= 0)
    fail_msg("layer %d: %s", failed, cgrtk_cp_last_error(w));
  assert_int_equal(cgrtk_cp_read(w, padded, out, st), 0);
  assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
}

/* Two launch-shape workloads of LAYERS layers and 128 rows that differ in one setting only:
 * `field` (fuse_norm or pdl_entry) 0 in w[0] and 1 in w[1]; and a stream for them. The packed
 * batches both tests run: 128 and 64 rows. */
static const struct lengths pair_len[2] = {{3, {60, 40, 20}}, {4, {1, 30, 0, 25}}};
static const int64_t pair_rows[2] = {128, 64};

static void open_pair(cgrtk_cp *w[2], cudaStream_t *st, size_t field) {
  char err[256];
  assert_int_equal(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking), cudaSuccess);
  for (int f = 0; f < 2; f++) {
    struct cgrtk_cp_cfg cfg;
    cgrtk_cp_launch_bound_cfg(&cfg);
    cfg.layers = LAYERS;
    *(int *)((char *)&cfg + field) = f;
    if (cgrtk_cp_create(&w[f], &cfg, 128, err, sizeof(err)) != 0)
      fail_msg("cgrtk_cp_create: %s", err);
  }
}

static void close_pair(cgrtk_cp *w[2], cudaStream_t st) {
  cgrtk_cp_destroy(w[0]);
  cgrtk_cp_destroy(w[1]);
  cudaStreamDestroy(st);
}

/* On the launch shape at 128 and 64 rows, where every projection takes the small tiled path,
 * RMSNorm fused into the projections (cfg.fuse_norm = 1) and one kernel per operation (0) give
 * bitwise the same output: the fused kernels form each row's sum of squares in rmsnorm()'s order.
 * The two must differ in what they launch, or the test would compare a path with itself. */
static void fused_norm_same_bits(void **state) {
  (void)state;
  cgrtk_cp *w[2] = {NULL, NULL};
  cudaStream_t st = NULL;
  open_pair(w, &st, offsetof(struct cgrtk_cp_cfg, fuse_norm));
  const int64_t d = cgrtk_cp_config(w[0])->d_model;
  for (int k = 0; k < 2; k++) {
    direct_forward(w[1], &pair_len[k], pair_rows[k], (uint64_t)k, st, out_graph);
    direct_forward(w[0], &pair_len[k], pair_rows[k], (uint64_t)k, st, out_eager);
    assert_same(pair_rows[k], pair_rows[k], d, "fused against unfused RMSNorm", k);
  }
  /* Distinct paths: the unfused workload launches more kernels for one layer. */
  int launches[2];
  for (int f = 0; f < 2; f++) {
    cudaGraph_t g = NULL;
    size_t nodes = 0;
    assert_int_equal(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    assert_int_equal(cgrtk_cp_mlp(w[f], 0, 128, st), 0);
    assert_int_equal(cudaStreamEndCapture(st, &g), cudaSuccess);
    assert_int_equal(cudaGraphGetNodes(g, NULL, &nodes), cudaSuccess);
    cudaGraphDestroy(g);
    launches[f] = (int)nodes;
  }
  if (launches[0] <= launches[1])
    fail_msg("the unfused MLP captured %d nodes, the fused %d: the paths are not distinct",
             launches[0], launches[1]);
  close_pair(w, st);
}

/* Programmatic edges (dependents that may launch before their predecessor completes) in g. */
static size_t programmatic_edges(cudaGraph_t g) {
  size_t e = 0, n = 0;
  assert_int_equal(cudaGraphGetEdges(g, NULL, NULL, NULL, &e), cudaSuccess);
  cudaGraphNode_t *from = calloc(e ? e : 1, sizeof(*from)), *to = calloc(e ? e : 1, sizeof(*to));
  cudaGraphEdgeData *data = calloc(e ? e : 1, sizeof(*data));
  assert_non_null(from);
  assert_non_null(to);
  assert_non_null(data);
  assert_int_equal(cudaGraphGetEdges(g, from, to, data, &e), cudaSuccess);
  for (size_t i = 0; i < e; i++)
    n += data[i].type == cudaGraphDependencyTypeProgrammatic;
  free(from);
  free(to);
  free(data);
  return n;
}

/* Stage l eagerly, then every layer of w captured into one graph (as a layer or step scope
 * holds several calls), replayed once into out; the graph's programmatic edges. */
static size_t graph_forward(cgrtk_cp *w, const struct lengths *l, int64_t padded, uint64_t data,
                            cudaStream_t st, float *out) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  const struct staged b = stage_batch(w, l, padded, data, st);
  assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
  assert_int_equal(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const int failed = issue_layers(w, &b, padded, st);
  assert_int_equal(cudaStreamEndCapture(st, &g), cudaSuccess);
  if (failed >= 0)
    fail_msg("capturing layer %d: %s", failed, cgrtk_cp_last_error(w));
  const size_t edges = programmatic_edges(g);
  assert_int_equal(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  assert_int_equal(cudaGraphLaunch(x, st), cudaSuccess);
  assert_int_equal(cgrtk_cp_read(w, padded, out, st), 0);
  assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  return edges;
}

/* pdl_entry 1 (a call's first kernel a programmatic dependent of the kernel before it, the
 * launch shape's default) and 0 give bitwise the same output, eagerly and as one graph of every
 * layer, where the calls' first kernels after the graph's first add one programmatic edge each:
 * without them the test would compare a path with itself. */
static void pdl_entry_same_bits(void **state) {
  (void)state;
  cgrtk_cp *w[2] = {NULL, NULL};
  cudaStream_t st = NULL;
  open_pair(w, &st, offsetof(struct cgrtk_cp_cfg, pdl_entry));
  const int64_t d = cgrtk_cp_config(w[0])->d_model;
  size_t edges[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    const int64_t padded = pair_rows[k];
    direct_forward(w[0], &pair_len[k], padded, (uint64_t)k, st, out_eager);
    direct_forward(w[1], &pair_len[k], padded, (uint64_t)k, st, out_graph);
    assert_same(padded, padded, d, "eager, pdl_entry 1 against 0", k);
    for (int f = 0; f < 2; f++) {
      edges[f] = graph_forward(w[f], &pair_len[k], padded, (uint64_t)k, st, out_graph);
      assert_same(padded, padded, d, f ? "graph, pdl_entry 1" : "graph, pdl_entry 0", k);
    }
  }
  close_pair(w, st);
  if (edges[0] == 0) { /* no programmatic dependent launch at all: the paths are one */
    printf("SKIPPED: pdl_entry_same_bits: no programmatic edge in either graph (device below "
           "sm_90, or CGRTK_CP_PDL=0), so pdl_entry changes nothing to compare\n");
    skip();
    return;
  }
  if (edges[1] != edges[0] + 2 * LAYERS - 1)
    fail_msg("%d layers captured %zu programmatic edges with pdl_entry 1 and %zu without: expected "
             "%d more (every call's first kernel but the graph's first)",
             LAYERS, edges[1], edges[0], 2 * LAYERS - 1);
}

static void over_capacity_error(void **state) {
  (void)state;
  struct side g = {0};
  side_open(&g, 2, "error");
  const struct lengths too_long = {2, {300, 300}};
  const struct lengths too_many = {9, {1, 1, 1, 1, 1, 1, 1, 1, 1}};
  for (int s = 0; s < 4; s++)
    step(&g, (uint64_t)s, &patterns[s % NUM_PATTERNS], out_graph, NULL);
  int rc = cp_host_step(&g.h, 100, too_long.len, too_long.n, 1, NULL);
  assert_int_equal(rc, CGRT_E_CAPACITY);
  if (!strstr(cgrt_last_error(g.rt), "max_packed_tokens"))
    fail_msg("the capacity error does not name max_packed_tokens: %s", cgrt_last_error(g.rt));
  rc = cp_host_step(&g.h, 101, too_many.len, too_many.n, 1, NULL);
  assert_int_equal(rc, CGRT_E_CAPACITY);
  if (!strstr(cgrt_last_error(g.rt), "max_sequences"))
    fail_msg("the capacity error does not name max_sequences: %s", cgrt_last_error(g.rt));
  /* A refused step leaves the runtime usable. */
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  step(&g, 102, &patterns[1], out_graph, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  side_close(&g);
}

static void over_capacity_eager(void **state) {
  (void)state;
  struct side g = {0}, e = {0};
  side_open(&g, 2, "eager");
  side_open(&e, 1000000, "eager");
  const int64_t d = cgrtk_cp_config(g.w)->d_model;
  const struct lengths too_long = {3, {300, 250, 150}}; /* 700 tokens in a 512-token slot */
  for (int s = 0; s < 6; s++) {
    const struct lengths *l = s == 4 ? &too_long : &patterns[s % NUM_PATTERNS];
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    int64_t rg = step(&g, (uint64_t)s, l, out_graph, &rep);
    int64_t re = step(&e, (uint64_t)s, l, out_eager, NULL);
    assert_same(rg, re, d, "over_capacity = eager", s);
    if (s == 4) {
      assert_int_equal(rep.mode, CGRT_MODE_EAGER);
      assert_true(rg >= 700);
    }
    if (s == 5)
      assert_int_equal(rep.mode, CGRT_MODE_REPLAY); /* graphs still serve steps that fit */
  }
  side_close(&g);
  side_close(&e);
}

/* ---------------------------------------------------------------- once a step */

/* Runs of the work a training body enqueues: its update, each module's forward and backward. */
struct runs {
  int64_t update;
  int64_t module[2][2]; /* [module][forward, backward] */
  int64_t prepares;
  cgrt_runtime *rt;
  cgrt_module *m[2];
};

static void count_run(void *arg) {
  (*(int64_t *)arg)++;
}

static int count_forward(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, count_run, &((int64_t *)user)[0]);
}

static int count_backward(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, count_run, &((int64_t *)user)[1]);
}

static int count_prepare(const cgrt_ctx *ctx, void *user) {
  (void)ctx;
  ((struct runs *)user)->prepares++;
  return 0;
}

static int train_body(const cgrt_ctx *ctx, void *user) {
  struct runs *r = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  for (int i = 0; i < 2; i++) {
    int rc = cgrt_forward(r->rt, r->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  for (int i = 1; i >= 0; i--) {
    int rc = cgrt_backward(r->rt, r->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return cgrt_enqueue_host(ctx, count_run, &r->update);
}

static void training_body_runs_once_a_step(void **state) {
  (void)state;
  for (int scope = 0; scope < 2; scope++) {
    struct runs r = {0};
    char ini[512];
    snprintf(ini, sizeof(ini),
             "[cuda_graph]\nimpl = dynamic_cp\n%swarmup_steps = 2\n[dynamic_cp]\ncp_sizes = 1\n"
             "max_packed_tokens = 64\nmax_sequences = 4\ngraph_slots = 2\n%s[runtime]\n"
             "driver = cuda\nlog = warn\n%s",
             scope ? "" : "modules = attn mlp\n", scope ? "graph_scope = step\n" : "",
             scope ? "[host]\nnan_check = off\n" : "");
    if (cgrt_open_string(&r.rt, ini) != 0)
      fail_msg("open: %s", cgrt_last_error(NULL));
    for (int i = 0; i < 2; i++) {
      cgrt_module_desc d = {.struct_size = sizeof(d),
                            .name = i ? "l0.mlp" : "l0.attn",
                            .kind = i ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                            .forward = count_forward,
                            .backward = count_backward,
                            .user = r.module[i]};
      assert_int_equal(cgrt_module_register(r.rt, &d, &r.m[i]), 0);
    }
    if (cgrt_set_world_comm(r.rt, world) != 0)
      fail_msg("cgrt_set_world_comm: %s", cgrt_last_error(r.rt));
    const int32_t lens[] = {8, 9};
    int seen[4] = {0};
    for (int s = 0; s < 8; s++) {
      cgrt_step_desc d = {.struct_size = sizeof(d),
                          .phase = CGRT_PHASE_TRAIN,
                          .tokens = 17,
                          .seqlens = lens,
                          .num_sequences = 2,
                          .cp_size = 1,
                          .prepare = count_prepare,
                          .body = train_body,
                          .user = &r};
      cgrt_step_report rep = {.struct_size = sizeof(rep)};
      assert_int_equal(cgrt_step(r.rt, &d, &rep), 0);
      assert_int_equal(cgrt_synchronize(r.rt), 0);
      seen[rep.mode]++;
      const int64_t n = s + 1;
      if (r.update != n || r.prepares != n || r.module[0][0] != n || r.module[0][1] != n ||
          r.module[1][0] != n || r.module[1][1] != n)
        fail_msg("%s scope, step %d (%s): after %lld steps the update ran %lld times, prepare "
                 "%lld, attn %lld/%lld, mlp %lld/%lld (forward/backward)",
                 scope ? "step" : "module", s, cgrt_mode_name(rep.mode), (long long)n,
                 (long long)r.update, (long long)r.prepares, (long long)r.module[0][0],
                 (long long)r.module[0][1], (long long)r.module[1][0], (long long)r.module[1][1]);
    }
    assert_true(seen[CGRT_MODE_WARMUP] && seen[CGRT_MODE_CAPTURE] && seen[CGRT_MODE_REPLAY]);
    assert_int_equal(cgrt_release_graphs(r.rt), 0);
    assert_int_equal(cgrt_close(r.rt), 0);
  }
}

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(graphs_equal_eager),
      cmocka_unit_test(matches_host_reference),
      {"graphs_equal_eager (launch shape)", graphs_equal_eager, use_launch_shape, use_default_shape,
       NULL},
      {"matches_host_reference (launch shape)", matches_host_reference, use_launch_shape,
       use_default_shape, NULL},
      {"graphs_equal_eager (launch shape, graph_scope step)", graphs_equal_eager,
       use_launch_shape_step_scope, use_default_shape, NULL},
      cmocka_unit_test(fused_norm_same_bits),
      cmocka_unit_test(pdl_entry_same_bits),
      cmocka_unit_test(over_capacity_error),
      cmocka_unit_test(over_capacity_eager),
      cmocka_unit_test(training_body_runs_once_a_step),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

#else

int main(void) {
  printf("SKIPPED: the cp tests need CUDA and NCCL; cgrt was built without %s\n",
#ifdef CGRT_HAVE_CUDA
         "NCCL"
#else
         "CUDA"
#endif
  );
  return 77;
}

#endif
