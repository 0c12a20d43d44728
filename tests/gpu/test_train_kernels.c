/*
 * test_train_kernels.c (GPU) - the `train` reference workload (kernels/train.h): its module list,
 * its initial weights, bitwise reproducibility, the same bits eagerly and replayed from graphs
 * (one per module call, or one per step), a loss that goes down, the DROP capacity mode (runs
 * eagerly, cannot be captured, leaves the stream usable), losses that match a float64 CPU
 * reference of the whole network, and gradients that match finite differences of the loss.
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

#include "train.h"
#include "train_reference.h"

#define MAX_MB 8

struct fixture {
  cudaStream_t s;
};

static int setup(void **state) {
  struct fixture *f = calloc(1, sizeof(*f));
  if (!f)
    return -1;
  if (cudaStreamCreateWithFlags(&f->s, cudaStreamNonBlocking) != cudaSuccess) {
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
  free(f);
  if (cudaGetDevice(&dev) == cudaSuccess)
    cudaDeviceGraphMemTrim(dev);
  return 0;
}

/* ---------------------------------------------------------------- helpers */

/* The configuration of the gradient check: every module kind, small enough for many forwards. */
static void tiny_cfg(struct cgrtk_train_cfg *c) {
  cgrtk_train_default_cfg(c);
  c->layers = 2;
  c->microbatches = 2;
  c->tokens = 8;
  c->d_model = 64;
  c->heads = 1;
  c->ffn = 64;
  c->experts = 4;
  c->top_k = 2;
  c->mamba_state = 4;
  c->seed = 3;
}

static cgrtk_train *create(const struct cgrtk_train_cfg *c) {
  cgrtk_train *t = NULL;
  char err[512] = "";
  int rc = cgrtk_train_create(&t, c, err, sizeof(err));
  if (rc != 0)
    fail_msg("cgrtk_train_create: %s", err);
  return t;
}

enum { OP_FWD, OP_BWD, OP_LOSS, OP_UPDATE };

struct op {
  int kind, module, mb;
};

/* The host's step after stage: per microbatch, every forward, the loss, every backward in
 * reverse; then (with_update) the optimizer. Returns the number of ops (ops may be NULL). */
static int step_ops(const cgrtk_train *t, struct op *ops, int with_update) {
  const int nmod = cgrtk_train_num_modules(t), mbs = cgrtk_train_config(t)->microbatches;
  int n = 0;
#define PUSH(k, m, b)                                                                              \
  do {                                                                                             \
    if (ops)                                                                                       \
      ops[n] = (struct op){(k), (m), (b)};                                                         \
    n++;                                                                                           \
  } while (0)
  for (int mb = 0; mb < mbs; mb++) {
    for (int i = 0; i < nmod; i++)
      PUSH(OP_FWD, i, mb);
    PUSH(OP_LOSS, 0, mb);
    for (int i = nmod - 1; i >= 0; i--)
      PUSH(OP_BWD, i, mb);
  }
  if (with_update)
    PUSH(OP_UPDATE, 0, 0);
#undef PUSH
  return n;
}

static struct op *make_ops(const cgrtk_train *t, int with_update, int *n) {
  *n = step_ops(t, NULL, with_update);
  struct op *ops = calloc((size_t)*n, sizeof(*ops));
  assert_non_null(ops);
  step_ops(t, ops, with_update);
  return ops;
}

static int run_op(cgrtk_train *t, const struct op *o, cudaStream_t s) {
  int rc = 0;
  switch (o->kind) {
  case OP_FWD:
    rc = cgrtk_train_forward(t, o->module, o->mb, s);
    break;
  case OP_BWD:
    rc = cgrtk_train_backward(t, o->module, o->mb, s);
    break;
  case OP_LOSS:
    rc = cgrtk_train_loss(t, o->mb, s);
    break;
  default:
    rc = cgrtk_train_update(t, s);
    break;
  }
  if (rc != 0)
    print_error("op %d (module %d, microbatch %d): %s\n", o->kind, o->module, o->mb,
                cgrtk_train_strerror(rc));
  return rc;
}

static void run_ops(cgrtk_train *t, const struct op *ops, int n, cudaStream_t s) {
  for (int i = 0; i < n; i++)
    assert_int_equal(run_op(t, &ops[i], s), 0);
}

/* Stage `step`, run one whole step eagerly, read its losses (one per microbatch). */
static void eager_step(cgrtk_train *t, uint64_t step, cudaStream_t s, float *losses) {
  int n = 0;
  struct op *ops = make_ops(t, 1, &n);
  assert_int_equal(cgrtk_train_stage(t, step, s), 0);
  run_ops(t, ops, n, s);
  assert_int_equal(cgrtk_train_read_loss(t, losses, s), 0);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  free(ops);
}

static float *read_params(cgrtk_train *t, cudaStream_t s) {
  size_t n = cgrtk_train_param_count(t);
  float *p = malloc(n * sizeof(float));
  assert_non_null(p);
  assert_int_equal(cgrtk_train_read_params(t, p, n, s), 0);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  return p;
}

static void assert_finite(const float *v, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(v[i]))
      fail_msg("%s[%zu] is %g", what, i, (double)v[i]);
}

/* Capture ops into one graph (thread-local mode, the stream is left out of capture whatever
 * happens) and instantiate it. */
static cudaGraphExec_t capture(cgrtk_train *t, const struct op *ops, int n, cudaStream_t s) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  int rc = 0;
  assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  for (int i = 0; i < n && rc == 0; i++)
    rc = run_op(t, &ops[i], s);
  cudaError_t end = cudaStreamEndCapture(s, &g);
  assert_int_equal(rc, 0);
  assert_int_equal(end, cudaSuccess);
  assert_int_equal(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  cudaGraphDestroy(g);
  return exec;
}

/* Run `steps` eager steps (steps 1..steps) on a fresh workload: losses[step - 1][mb], params. */
static void eager_run(const struct cgrtk_train_cfg *c, int steps, cudaStream_t s, float *losses,
                      float **params) {
  cgrtk_train *t = create(c);
  for (int i = 0; i < steps; i++)
    eager_step(t, (uint64_t)i + 1, s, losses + (size_t)i * c->microbatches);
  *params = read_params(t, s);
  cgrtk_train_destroy(t);
}

static void assert_same_run(const struct cgrtk_train_cfg *c, int steps, const float *losses_a,
                            const float *params_a, const float *losses_b, const float *params_b,
                            size_t nparams) {
  for (int i = 0; i < steps; i++)
    for (int mb = 0; mb < c->microbatches; mb++) {
      const size_t k = (size_t)i * c->microbatches + mb;
      if (memcmp(&losses_a[k], &losses_b[k], sizeof(float)) != 0)
        fail_msg("step %d microbatch %d: loss %.9g vs %.9g", i + 1, mb, (double)losses_a[k],
                 (double)losses_b[k]);
    }
  for (size_t i = 0; i < nparams; i++)
    if (memcmp(&params_a[i], &params_b[i], sizeof(float)) != 0)
      fail_msg("parameter %zu: %.9g vs %.9g", i, (double)params_a[i], (double)params_b[i]);
}

/* ---------------------------------------------------------------- tests */

static void train_rejects_bad_arguments(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  static char sentinel;
  cgrtk_train *t = (cgrtk_train *)&sentinel; /* a failed create must reset it to NULL */
  char err[512] = "";

  cgrtk_train_default_cfg(&c);
  c.d_model = 200;
  assert_int_not_equal(cgrtk_train_create(&t, &c, err, sizeof(err)), 0);
  assert_null(t);
  assert_non_null(strstr(err, "d_model"));
  cgrtk_train_default_cfg(&c);
  c.top_k = c.experts + 1;
  assert_int_not_equal(cgrtk_train_create(&t, &c, err, sizeof(err)), 0);
  assert_non_null(strstr(err, "top_k"));
  cgrtk_train_default_cfg(&c);
  c.capacity_mode = 2;
  assert_int_not_equal(cgrtk_train_create(&t, &c, err, sizeof(err)), 0);
  assert_non_null(strstr(err, "capacity_mode"));

  tiny_cfg(&c);
  t = create(&c);
  const int nmod = cgrtk_train_num_modules(t);
  float one = 0;
  assert_int_not_equal(cgrtk_train_forward(t, nmod, 0, f->s), 0);
  assert_int_not_equal(cgrtk_train_forward(t, -1, 0, f->s), 0);
  assert_int_not_equal(cgrtk_train_backward(t, 0, c.microbatches, f->s), 0);
  assert_int_not_equal(cgrtk_train_loss(t, c.microbatches, f->s), 0);
  assert_int_not_equal(cgrtk_train_read_params(t, &one, 1, f->s), 0);
  assert_int_not_equal(cgrtk_train_read_grads(t, 0, &one, 1, f->s), 0);
  assert_int_not_equal(cgrtk_train_write_params(t, &one, 1, f->s), 0);
  assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);
  cgrtk_train_destroy(t);
  cgrtk_train_destroy(NULL);
}

/* The default configuration's modules, in execution order, with the kinds of cgrt_kind. */
static void train_lists_its_modules(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int kind, layer;
  } want[] = {
      {"layer0.attn", 0, 0},
      {"layer0.mamba", 5, 0},
      {"layer0.mlp", 1, 0},
      {"layer1.attn", 0, 1},
      {"layer1.mamba", 5, 1},
      {"layer1.moe_router", 3, 1},
      {"layer1.moe_preprocess", 4, 1},
      {"layer1.moe_experts", 2, 1},
      {"layer2.attn", 0, 2},
      {"layer2.mamba", 5, 2},
      {"layer2.mlp", 1, 2},
      {"layer3.attn", 0, 3},
      {"layer3.mamba", 5, 3},
      {"layer3.moe_router", 3, 3},
      {"layer3.moe_preprocess", 4, 3},
      {"layer3.moe_experts", 2, 3},
  };
  struct cgrtk_train_cfg c;
  char name[64];
  int kind = 0, layer = 0;
  cgrtk_train_default_cfg(&c);
  cgrtk_train *t = create(&c);
  const int n = (int)(sizeof(want) / sizeof(want[0]));
  assert_int_equal(cgrtk_train_num_modules(t), n);
  for (int i = 0; i < n; i++) {
    cgrtk_train_module(t, i, name, sizeof(name), &kind, &layer);
    assert_string_equal(name, want[i].name);
    assert_int_equal(kind, want[i].kind);
    assert_int_equal(layer, want[i].layer);
  }
  cgrtk_train_module(t, n, name, sizeof(name), &kind, &layer);
  assert_string_equal(name, "");
  assert_int_equal(kind, -1);
  assert_int_equal(layer, -1);
  cgrtk_train_module(t, 0, name, 4, NULL, NULL); /* truncated, terminated */
  assert_string_equal(name, "lay");

  assert_int_equal(cgrtk_train_capacity(&c), 40);
  size_t total = 0;
  for (int l = 0; l < c.layers; l++)
    for (int k = 0; k < CGRTK_TRAIN_T_COUNT; k++)
      total += (size_t)cgrtk_train_tensor_numel(&c, l, k);
  assert_int_equal(cgrtk_train_param_count(t), total);
  assert_true(cgrtk_train_flops(&c) > 0);
  cgrtk_train_destroy(t);
}

/* create initializes every weight to the documented function of (seed, tensor, index). */
static void train_initial_params_are_the_documented_values(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  cgrtk_train_default_cfg(&c);
  cgrtk_train *t = create(&c);
  float *p = read_params(t, f->s);
  for (int l = 0; l < c.layers; l++)
    for (int k = 0; k < CGRTK_TRAIN_T_COUNT; k++) {
      const uint64_t off = cgrtk_train_tensor_offset(&c, l, k);
      const uint64_t n = cgrtk_train_tensor_numel(&c, l, k);
      for (uint64_t i = 0; i < n; i++) {
        const float want = cgrtk_train_init_value(&c, l, k, i);
        if (memcmp(&p[off + i], &want, sizeof(float)) != 0)
          fail_msg("layer %d tensor %d [%llu]: %g, want %g", l, k, (unsigned long long)i,
                   (double)p[off + i], (double)want);
      }
    }
  free(p);
  cgrtk_train_destroy(t);
}

/* Two fresh workloads, the same three steps: the same losses and weights, bit for bit. */
static void train_is_deterministic(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  float la[3 * MAX_MB], lb[3 * MAX_MB], *pa = NULL, *pb = NULL;
  cgrtk_train_default_cfg(&c);
  eager_run(&c, 3, f->s, la, &pa);
  eager_run(&c, 3, f->s, lb, &pb);

  cgrtk_train *t = create(&c);
  const size_t n = cgrtk_train_param_count(t);
  float *p0 = read_params(t, f->s);
  cgrtk_train_destroy(t);

  assert_finite(la, 3 * (size_t)c.microbatches, "loss");
  assert_finite(pa, n, "params");
  assert_memory_not_equal(pa, p0, n * sizeof(float)); /* the updates did something */
  for (int i = 0; i < 3 * c.microbatches; i++)
    print_message("loss[%d] = %.9g\n", i, (double)la[i]);
  assert_same_run(&c, 3, la, pa, lb, pb, n);
  free(pa);
  free(pb);
  free(p0);
}

/* Step 1 eager, step 2 captured one graph per call (and launched), steps 3-4 replayed: the same
 * bits as four eager steps. */
static void train_per_call_graphs_match_eager(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  float le[4 * MAX_MB], lg[4 * MAX_MB], *pe = NULL, *pg = NULL;
  int n = 0;
  cgrtk_train_default_cfg(&c);
  eager_run(&c, 4, f->s, le, &pe);

  cgrtk_train *t = create(&c);
  struct op *ops = make_ops(t, 1, &n);
  cudaGraphExec_t *execs = calloc((size_t)n, sizeof(*execs));
  assert_non_null(execs);
  eager_step(t, 1, f->s, lg);
  assert_int_equal(cgrtk_train_stage(t, 2, f->s), 0);
  for (int i = 0; i < n; i++) {
    execs[i] = capture(t, &ops[i], 1, f->s);
    assert_int_equal(cudaGraphLaunch(execs[i], f->s), cudaSuccess);
  }
  assert_int_equal(cgrtk_train_read_loss(t, lg + c.microbatches, f->s), 0);
  assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);
  for (int step = 3; step <= 4; step++) {
    assert_int_equal(cgrtk_train_stage(t, (uint64_t)step, f->s), 0);
    for (int i = 0; i < n; i++)
      assert_int_equal(cudaGraphLaunch(execs[i], f->s), cudaSuccess);
    assert_int_equal(cgrtk_train_read_loss(t, lg + (size_t)(step - 1) * c.microbatches, f->s), 0);
    assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);
  }
  pg = read_params(t, f->s);
  assert_same_run(&c, 4, le, pe, lg, pg, cgrtk_train_param_count(t));

  for (int i = 0; i < n; i++)
    cudaGraphExecDestroy(execs[i]);
  free(execs);
  free(ops);
  free(pe);
  free(pg);
  cgrtk_train_destroy(t);
}

/* The same with the whole step (every forward, loss, backward and the update) in one graph. */
static void train_whole_step_graph_matches_eager(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  float le[4 * MAX_MB], lg[4 * MAX_MB], *pe = NULL, *pg = NULL;
  int n = 0;
  cgrtk_train_default_cfg(&c);
  assert_int_equal(c.capacity_mode, CGRTK_MOE_DROP_AND_PAD);
  eager_run(&c, 4, f->s, le, &pe);

  cgrtk_train *t = create(&c);
  struct op *ops = make_ops(t, 1, &n);
  eager_step(t, 1, f->s, lg);
  assert_int_equal(cgrtk_train_stage(t, 2, f->s), 0);
  cudaGraphExec_t exec = capture(t, ops, n, f->s);
  for (int step = 2; step <= 4; step++) {
    if (step > 2)
      assert_int_equal(cgrtk_train_stage(t, (uint64_t)step, f->s), 0);
    assert_int_equal(cudaGraphLaunch(exec, f->s), cudaSuccess);
    assert_int_equal(cgrtk_train_read_loss(t, lg + (size_t)(step - 1) * c.microbatches, f->s), 0);
    assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);
  }
  pg = read_params(t, f->s);
  assert_same_run(&c, 4, le, pe, lg, pg, cgrtk_train_param_count(t));

  cudaGraphExecDestroy(exec);
  free(ops);
  free(pe);
  free(pg);
  cgrtk_train_destroy(t);
}

/* Twenty SGD steps (default lr and momentum) on one batch bring its loss well down. */
static void train_loss_decreases(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  float l[MAX_MB];
  double first = 0, last = 0;
  cgrtk_train_default_cfg(&c);
  cgrtk_train *t = create(&c);
  for (int step = 0; step < 20; step++) {
    eager_step(t, 0, f->s, l); /* the same staged batch every step */
    assert_finite(l, (size_t)c.microbatches, "loss");
    double sum = 0;
    for (int mb = 0; mb < c.microbatches; mb++)
      sum += l[mb];
    print_message("step %2d: loss %.6f\n", step, sum);
    if (step == 0)
      first = sum;
    last = sum;
  }
  assert_true(last < 0.5 * first); /* on an H200: 3.08 to 0.47 */
  cgrtk_train_destroy(t);
}

/* DROP: the preprocess reads the counts on the host. It runs eagerly, gives (up to the GEMMs'
 * rounding on other row counts) the DROP_AND_PAD loss, and cannot be captured: the capture fails
 * cleanly and the stream works afterwards. */
static void train_drop_mode_runs_eagerly_and_cannot_be_captured(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  float ld[MAX_MB], lp[MAX_MB];
  cgrtk_train_default_cfg(&c);
  cgrtk_train *pad = create(&c);
  c.capacity_mode = CGRTK_MOE_DROP;
  cgrtk_train *t = create(&c);

  eager_step(pad, 1, f->s, lp);
  eager_step(t, 1, f->s, ld);
  for (int mb = 0; mb < c.microbatches; mb++) {
    print_message("microbatch %d: loss %.9g (drop) %.9g (drop and pad)\n", mb, (double)ld[mb],
                  (double)lp[mb]);
    assert_true(fabs((double)ld[mb] - (double)lp[mb]) <= 1e-4 * fabs((double)lp[mb]));
  }
  for (int step = 2; step <= 3; step++) {
    eager_step(t, (uint64_t)step, f->s, ld);
    assert_finite(ld, (size_t)c.microbatches, "loss");
  }
  float *p = read_params(t, f->s);
  assert_finite(p, cgrtk_train_param_count(t), "params");
  free(p);

  /* Run the forward up to the first preprocess eagerly, then try to capture it. */
  int pre = -1, kind = 0;
  for (int i = 0; i < cgrtk_train_num_modules(t) && pre < 0; i++) {
    cgrtk_train_module(t, i, NULL, 0, &kind, NULL);
    if (kind == CGRTK_TRAIN_KIND_MOE_PREPROCESS)
      pre = i;
  }
  assert_true(pre > 0);
  assert_int_equal(cgrtk_train_stage(t, 4, f->s), 0);
  for (int i = 0; i < pre; i++)
    assert_int_equal(cgrtk_train_forward(t, i, 0, f->s), 0);
  assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);

  cudaGraph_t g = NULL;
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  assert_int_equal(cudaStreamBeginCapture(f->s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  int rc = cgrtk_train_forward(t, pre, 0, f->s);
  cudaError_t end = cudaStreamEndCapture(f->s, &g);
  print_message("captured DROP preprocess: %s; end capture: %s\n", cgrtk_train_strerror(rc),
                cudaGetErrorString(end));
  assert_int_not_equal(rc, 0);
  assert_int_not_equal(end, cudaSuccess);
  assert_null(g);
  (void)cudaGetLastError(); /* clear the capture error */
  assert_int_equal(cudaStreamIsCapturing(f->s, &status), cudaSuccess);
  assert_int_equal(status, cudaStreamCaptureStatusNone);

  /* The stream is usable: a whole step, eagerly. */
  eager_step(t, 4, f->s, ld);
  assert_finite(ld, (size_t)c.microbatches, "loss");
  cgrtk_train_destroy(t);
  cgrtk_train_destroy(pad);
}

/* The device's losses (after an update, so that trained weights are used too) match the float64
 * reference of the whole network, for both capacity modes. */
static void train_loss_matches_cpu_reference(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  float l[MAX_MB];
  for (int mode = 0; mode < 2; mode++) {
    tiny_cfg(&c);
    c.capacity_mode = mode;
    c.lr = 1e-2f; /* a visible step */
    cgrtk_train *t = create(&c);
    eager_step(t, 1, f->s, l);
    float *p = read_params(t, f->s);
    eager_step(t, 2, f->s, l);
    for (int mb = 0; mb < c.microbatches; mb++) {
      const double want = ref_loss(&c, p, 2, mb);
      print_message("mode %d microbatch %d: loss %.9g, reference %.9g\n", mode, mb, (double)l[mb],
                    want);
      assert_true(fabs((double)l[mb] - want) <= 1e-4 * want);
    }
    free(p);
    cgrtk_train_destroy(t);
  }
}

/* ---------------------------------------------------------------- gradient check */

/* Loss summed over microbatches after a forward of every microbatch (no backward, no update). */
static double total_loss(cgrtk_train *t, cudaStream_t s) {
  const int mbs = cgrtk_train_config(t)->microbatches, nmod = cgrtk_train_num_modules(t);
  float l[MAX_MB];
  double sum = 0;
  for (int mb = 0; mb < mbs; mb++) {
    for (int i = 0; i < nmod; i++)
      assert_int_equal(cgrtk_train_forward(t, i, mb, s), 0);
    assert_int_equal(cgrtk_train_loss(t, mb, s), 0);
  }
  assert_int_equal(cgrtk_train_read_loss(t, l, s), 0);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  for (int mb = 0; mb < mbs; mb++)
    sum += l[mb];
  return sum;
}

/* The tensors a module kind owns, CGRTK_TRAIN_T_COUNT-terminated. */
static const int *module_tensors(int kind) {
  static const int attn[] = {CGRTK_TRAIN_T_WQKV, CGRTK_TRAIN_T_WO, CGRTK_TRAIN_T_COUNT};
  static const int mamba[] = {CGRTK_TRAIN_T_WSCAN, CGRTK_TRAIN_T_COUNT};
  static const int mlp[] = {CGRTK_TRAIN_T_W1, CGRTK_TRAIN_T_W2, CGRTK_TRAIN_T_COUNT};
  static const int router[] = {CGRTK_TRAIN_T_WROUTER, CGRTK_TRAIN_T_COUNT};
  static const int experts[] = {CGRTK_TRAIN_T_WEXP1, CGRTK_TRAIN_T_WEXP2, CGRTK_TRAIN_T_COUNT};
  static const int none[] = {CGRTK_TRAIN_T_COUNT};
  switch (kind) {
  case CGRTK_TRAIN_KIND_ATTN:
    return attn;
  case CGRTK_TRAIN_KIND_MAMBA:
    return mamba;
  case CGRTK_TRAIN_KIND_MLP:
    return mlp;
  case CGRTK_TRAIN_KIND_MOE_ROUTER:
    return router;
  case CGRTK_TRAIN_KIND_MOE:
    return experts;
  default:
    return none;
  }
}

/* Fill v (zero elsewhere) with a direction over the module's tensors: along the gradient's signs
 * (along_grad) or random signs, each entry the tensor's weight scale. */
static void direction(const struct cgrtk_train_cfg *c, int kind, int layer, const double *g,
                      int along_grad, double *v, size_t n) {
  memset(v, 0, n * sizeof(double));
  for (const int *k = module_tensors(kind); *k != CGRTK_TRAIN_T_COUNT; k++) {
    const uint64_t off = cgrtk_train_tensor_offset(c, layer, *k);
    const uint64_t cnt = cgrtk_train_tensor_numel(c, layer, *k);
    const double scale = cgrtk_train_tensor_scale(c, *k);
    const uint64_t key = cgrtk_train_tensor_key(99, ((uint64_t)layer << 8) | (uint64_t)*k);
    for (uint64_t i = 0; i < cnt; i++) {
      const double sign = along_grad ? (g[off + i] >= 0 ? 1.0 : -1.0)
                                     : (cgrtk_train_value(key, i, 1.0f) >= 0 ? 1.0 : -1.0);
      v[off + i] = sign * scale;
    }
  }
}

/* (L(w + eps v) - L(w - eps v)) / (2 eps); leaves the parameters at w. */
static double finite_difference(cgrtk_train *t, cudaStream_t s, const float *w, const double *v,
                                double eps, float *scratch, size_t n) {
  double l[2];
  for (int side = 0; side < 2; side++) {
    const double sign = side == 0 ? 1.0 : -1.0;
    for (size_t i = 0; i < n; i++)
      scratch[i] = (float)((double)w[i] + sign * eps * v[i]);
    assert_int_equal(cgrtk_train_write_params(t, scratch, n, s), 0);
    l[side] = total_loss(t, s);
  }
  assert_int_equal(cgrtk_train_write_params(t, w, n, s), 0);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  return (l[0] - l[1]) / (2.0 * eps);
}

/*
 * On a tiny configuration with every module kind, the gradients that backward leaves (summed over
 * the microbatches as the update sums them) give the directional derivative of the loss along
 * two directions per module that owns parameters: the signs of its gradient (the largest signal:
 * checks the magnitude) and random signs (checks that the gradient points the right way). The
 * finite difference is the Richardson extrapolation of central differences at eps and eps / 2
 * (curvature error O(eps^4)). Tolerance: 1% of the first directional derivative. A perturbation
 * that flipped a router choice would show up as a jump; with this seed and eps none does.
 */
static void train_gradients_match_finite_differences(void **state) {
  struct fixture *f = *state;
  struct cgrtk_train_cfg c;
  const double eps = 1e-3;
  tiny_cfg(&c);
  cgrtk_train *t = create(&c);
  const size_t n = cgrtk_train_param_count(t);
  const int nmod = cgrtk_train_num_modules(t);
  float *w = read_params(t, f->s), *gm = malloc(n * sizeof(float));
  float *scratch = malloc(n * sizeof(float));
  double *g = calloc(n, sizeof(double)), *v = malloc(n * sizeof(double));
  int n_ops = 0, checked = 0, failed = 0;
  assert_true(gm && scratch && g && v);

  struct op *ops = make_ops(t, 0, &n_ops);
  assert_int_equal(cgrtk_train_stage(t, 0, f->s), 0);
  run_ops(t, ops, n_ops, f->s);
  for (int mb = 0; mb < c.microbatches; mb++) {
    assert_int_equal(cgrtk_train_read_grads(t, mb, gm, n, f->s), 0);
    assert_int_equal(cudaStreamSynchronize(f->s), cudaSuccess);
    assert_finite(gm, n, "gradient");
    for (size_t i = 0; i < n; i++)
      g[i] += gm[i];
  }
  print_message("loss at w: %.9g\n", total_loss(t, f->s));

  for (int i = 0; i < nmod; i++) {
    char name[64];
    int kind = 0, layer = 0;
    cgrtk_train_module(t, i, name, sizeof(name), &kind, &layer);
    if (*module_tensors(kind) == CGRTK_TRAIN_T_COUNT)
      continue;
    double scale = 0;
    for (int along = 1; along >= 0; along--) {
      direction(&c, kind, layer, g, along, v, n);
      double analytic = 0;
      for (size_t k = 0; k < n; k++)
        analytic += g[k] * v[k];
      const double fd1 = finite_difference(t, f->s, w, v, eps, scratch, n);
      const double fd2 = finite_difference(t, f->s, w, v, eps / 2, scratch, n);
      const double fd = (4.0 * fd2 - fd1) / 3.0;
      if (along)
        scale = fabs(analytic);
      const double err = scale > 0 ? fabs(fd - analytic) / scale : INFINITY;
      print_message("%-22s %-6s analytic %+.6e  fd %+.6e (eps %+.6e, eps/2 %+.6e)  error %.2e\n",
                    name, along ? "signs" : "random", analytic, fd, fd1, fd2, err);
      failed += !(err <= 1e-2);
    }
    checked++;
  }
  assert_int_equal(checked, 7); /* attn, mamba, mlp; attn, mamba, router, experts */
  assert_int_equal(failed, 0);

  free(ops);
  free(w);
  free(gm);
  free(scratch);
  free(g);
  free(v);
  cgrtk_train_destroy(t);
}

#define TRAIN_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      TRAIN_TEST(train_rejects_bad_arguments),
      TRAIN_TEST(train_lists_its_modules),
      TRAIN_TEST(train_initial_params_are_the_documented_values),
      TRAIN_TEST(train_is_deterministic),
      TRAIN_TEST(train_per_call_graphs_match_eager),
      TRAIN_TEST(train_whole_step_graph_matches_eager),
      TRAIN_TEST(train_loss_decreases),
      TRAIN_TEST(train_drop_mode_runs_eagerly_and_cannot_be_captured),
      TRAIN_TEST(train_loss_matches_cpu_reference),
      TRAIN_TEST(train_gradients_match_finite_differences),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
