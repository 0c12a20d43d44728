/*
 * test_local.c (GPU) - the `local` backend on the cuda driver:
 * - the decode workload (12 layers, cuBLAS) in layer and block scope at T in {1, 3, 8, 37, 64}:
 *   the replayed output is bitwise equal to eager on the same padded size, and its real rows are
 *   close to eager without padding;
 * - every rebind policy with buffers that move between steps: results stay right, the old
 *   buffer is never written again (no stale replay), and error refuses naming the buffer;
 * - the max_graphs bound under many keys, results checked every step.
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

#include "cgrt/cgrt.h"
#include "cgrt_kernels.h"
#include "decode.h"

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: %s", needle, haystack);
}

/* ---------------------------------------------------------------- decode, bitwise */

struct decode_host {
  cgrt_runtime *rt;
  cgrtk_decode *w;
  int layers;
  cgrt_module *mods[64];
  struct module_ref {
    struct decode_host *h;
    int index; /* 2 * layer + (0: attn, 1: mlp) */
  } refs[64];
  int64_t tokens;
};

static int d_prepare(const cgrt_ctx *ctx, void *user) {
  struct decode_host *h = user;
  return cgrtk_decode_stage(h->w, h->tokens, ctx->padded_tokens, 0, ctx->stream);
}

static int d_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct module_ref *r = user;
  struct decode_host *h = r->h;
  int i = r->index;
  return i % 2 ? cgrtk_decode_mlp(h->w, i / 2, ctx->padded_tokens, ctx->stream)
               : cgrtk_decode_attn(h->w, i / 2, ctx->padded_tokens, ctx->stream);
}

static int d_body(const cgrt_ctx *ctx, void *user) {
  struct decode_host *h = user;
  cgrt_buffer b = {cgrtk_decode_hidden(h->w), (size_t)ctx->padded_tokens * 2048, CGRT_INOUT,
                   "hidden"};
  cgrt_args a = {.struct_size = sizeof(a),
                 .key = (uint64_t)ctx->padded_tokens,
                 .buffers = &b,
                 .num_buffers = 1};
  for (int i = 0; i < 2 * h->layers; i++) {
    int rc = cgrt_forward(h->rt, h->mods[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

/* stream: the host's own for cgrt to run on (cgrt_open_options.stream), or NULL. */
static void d_open_on(struct decode_host *h, cgrtk_decode *w, const char *ini, void *stream) {
  memset(h, 0, sizeof(*h));
  h->w = w;
  h->layers = cgrtk_decode_config(w)->layers;
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .stream = stream};
  if (cgrt_open_ex(&h->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  for (int i = 0; i < 2 * h->layers; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.%s", i / 2, i % 2 ? "mlp" : "attn");
    h->refs[i] = (struct module_ref){h, i};
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = i % 2 ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .layer = i / 2,
                          .forward = d_module,
                          .user = &h->refs[i]};
    assert_int_equal(cgrt_module_register(h->rt, &d, &h->mods[i]), 0);
  }
}

static void d_open(struct decode_host *h, cgrtk_decode *w, const char *ini) {
  d_open_on(h, w, ini, NULL);
}

/* Runs `steps` infer steps of `tokens` real tokens (desc.tokens = step_tokens). */
static cgrt_step_report d_steps(struct decode_host *h, int64_t tokens, int64_t step_tokens,
                                int steps) {
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_INFER,
                      .tokens = step_tokens,
                      .prepare = d_prepare,
                      .body = d_body,
                      .user = h};
  h->tokens = tokens;
  for (int i = 0; i < steps; i++)
    if (cgrt_step(h->rt, &d, &rep) != 0)
      fail_msg("step: %s", cgrt_last_error(h->rt));
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  return rep;
}

static uint16_t *d_read(struct decode_host *h, int64_t rows) {
  uint16_t *out = malloc((size_t)rows * 2048);
  assert_int_equal(cgrtk_decode_read(h->w, rows, out, cgrt_stream(h->rt)), 0);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  return out;
}

static float bf16_to_float(uint16_t v) {
  uint32_t u = (uint32_t)v << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

static void decode_bitwise(const char *scope) {
  struct cgrtk_decode_cfg cfg;
  cgrtk_decode_default_cfg(&cfg);
  cfg.max_tokens = 64;
  cgrtk_decode *w = NULL;
  char err[256];
  assert_int_equal(cgrtk_decode_create(&w, &cfg, err, sizeof(err)), 0);
  assert_int_equal(cfg.d_model * 2, 2048);
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\ninference_scope = %s\nwarmup_steps = 2\n"
           "[inference]\nmax_tokens = 64\nnum_graphs = 7\n[runtime]\ndriver = cuda\nlog = warn\n",
           scope);
  struct decode_host local, eager;
  d_open(&local, w, ini);
  d_open(&eager, w, "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\nlog = warn\n");
  const int64_t tokens[] = {1, 3, 8, 37, 64};
  const int64_t bucket[] = {1, 4, 8, 64, 64};
  for (int t = 0; t < 5; t++) {
    cgrt_step_report rep = d_steps(&local, tokens[t], tokens[t], 4);
    assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
    assert_int_equal(rep.padded_tokens, bucket[t]);
    uint16_t *got = d_read(&local, bucket[t]);
    /* Eager on the same padded size: the same kernels with the same arguments. */
    d_steps(&eager, tokens[t], bucket[t], 1);
    uint16_t *want = d_read(&eager, bucket[t]);
    if (memcmp(got, want, (size_t)bucket[t] * 2048) != 0)
      fail_msg("scope %s, T=%lld: replay differs from eager at %lld rows", scope,
               (long long)tokens[t], (long long)bucket[t]);
    /* Eager without padding: the real rows agree within bf16 rounding of the GEMMs. */
    d_steps(&eager, tokens[t], tokens[t], 1);
    uint16_t *plain = d_read(&eager, tokens[t]);
    double num = 0, den = 0;
    for (int64_t i = 0; i < tokens[t] * 1024; i++) {
      double a = bf16_to_float(got[i]), b = bf16_to_float(plain[i]);
      assert_false(isnan(a));
      num += (a - b) * (a - b);
      den += b * b;
    }
    if (sqrt(num / den) > 2e-2)
      fail_msg("scope %s, T=%lld: padded rows disturb real ones (rel err %g)", scope,
               (long long)tokens[t], sqrt(num / den));
    free(got);
    free(want);
    free(plain);
  }
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(local.rt, &s), 0);
  int per_bucket = strcmp(scope, "block") == 0 ? 1 : 2 * local.layers;
  assert_int_equal(s.captures, 4 * per_bucket); /* buckets 1, 4, 8, 64 */
  assert_int_equal(s.fallbacks, 0);
  assert_true(s.graph_mem_reserved > 0);
  cgrt_close(local.rt);
  cgrt_close(eager.rt);
  cgrtk_decode_destroy(w);
}

static void decode_layer_scope_bitwise(void **state) {
  (void)state;
  decode_bitwise("layer");
}

static void decode_block_scope_bitwise(void **state) {
  (void)state;
  decode_bitwise("block");
}

/*
 * A host that launches on a stream of its own (a blocking one, as cudaStreamCreate makes) hands
 * it to cgrt: cgrt captures and replays there, the replay equals eager bitwise, and the stream
 * outlives cgrt_close. A stream already capturing is refused, saying so.
 */
static void runs_on_the_hosts_stream(void **state) {
  (void)state;
  struct cgrtk_decode_cfg cfg;
  cgrtk_decode_default_cfg(&cfg);
  cfg.max_tokens = 8;
  cgrtk_decode *w = NULL;
  char err[256];
  assert_int_equal(cgrtk_decode_create(&w, &cfg, err, sizeof(err)), 0);
  cudaStream_t mine;
  assert_int_equal(cudaStreamCreate(&mine), cudaSuccess);
  struct decode_host local, eager;
  d_open_on(&local, w,
            "[cuda_graph]\nimpl = local\ninference_scope = block\nwarmup_steps = 2\n"
            "[inference]\nmax_tokens = 8\nnum_graphs = 4\n[runtime]\ndriver = cuda\nlog = warn\n",
            mine);
  assert_ptr_equal(cgrt_stream(local.rt), mine);
  d_open(&eager, w, "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\nlog = warn\n");
  cgrt_step_report rep = d_steps(&local, 8, 8, 4);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  uint16_t *got = d_read(&local, 8);
  d_steps(&eager, 8, 8, 1);
  uint16_t *want = d_read(&eager, 8);
  assert_memory_equal(got, want, 8 * 2048);
  free(got);
  free(want);
  assert_int_equal(cgrt_close(local.rt), 0);
  cgrt_close(eager.rt);
  assert_int_equal(cudaStreamQuery(mine), cudaSuccess); /* still the host's */

  cudaGraph_t g = NULL;
  assert_int_equal(cudaStreamBeginCapture(mine, cudaStreamCaptureModeRelaxed), cudaSuccess);
  cgrt_runtime *rt = (cgrt_runtime *)1;
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\nlog = off\n",
                         .stream = mine};
  int rc = cgrt_open_ex(&rt, &o);
  /* End the host's capture before any assertion: a stream left capturing fails every later test
     (cudaErrorStreamCaptureImplicit on the legacy stream). */
  assert_int_equal(cudaStreamEndCapture(mine, &g), cudaSuccess);
  if (rc != CGRT_E_INVAL || rt != NULL || !strstr(cgrt_last_error(NULL), "is capturing"))
    fail_msg("cgrt_open_ex on a capturing host stream: %d (%s), want CGRT_E_INVAL and 'is "
             "capturing'",
             rc, cgrt_last_error(NULL));
  cudaGraphDestroy(g);
  assert_int_equal(cudaStreamDestroy(mine), cudaSuccess);
  cgrtk_decode_destroy(w);
}

/* ---------------------------------------------------------------- rebind, LRU */

#define N    4096
#define MODS 3

/* y_i += a_i * x_i, module i reads both addresses from its args. */
struct axpy_host {
  cgrt_runtime *rt;
  cgrt_module *mods[MODS];
  float *x[MODS];
  float *y[MODS];
  uint64_t key;
};

static int axpy(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  float a = *(float *)user;
  return cgrtk_axpy_f32(args->buffers[1].ptr, args->buffers[0].ptr, a, N, ctx->stream);
}

static float coef[MODS] = {0.5f, 0.25f, 2.0f};

static int axpy_body(const cgrt_ctx *ctx, void *user) {
  struct axpy_host *h = user;
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{h->x[i], N * sizeof(float), CGRT_IN, "x"},
                        {h->y[i], N * sizeof(float), CGRT_INOUT, "y"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = h->key, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(h->rt, h->mods[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static float *dev_fill(float v) {
  float *p = NULL;
  assert_int_equal(cudaMalloc((void **)&p, N * sizeof(float)), cudaSuccess);
  assert_int_equal(cgrtk_fill_f32(p, v, N, NULL), 0);
  return p;
}

static float dev_get(const float *p, int i) {
  float v;
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudaMemcpy(&v, p + i, sizeof(v), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

/* Opens h's runtime from ini (log lines to `log`, NULL: stderr) and registers its modules. */
static void axpy_open_ini(struct axpy_host *h, const char *ini, cgrt_log_fn log) {
  memset(h, 0, sizeof(*h));
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = log};
  if (cgrt_open_ex(&h->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  for (int i = 0; i < MODS; i++) {
    char name[16];
    snprintf(name, sizeof(name), "axpy%d", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .forward = axpy,
                          .user = &coef[i]};
    assert_int_equal(cgrt_module_register(h->rt, &d, &h->mods[i]), 0);
    h->x[i] = dev_fill(1.0f + (float)i);
    h->y[i] = dev_fill(0.0f);
  }
}

static void axpy_open(struct axpy_host *h, const char *policy, int max_graphs) {
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 1\nrebind = %s\nmax_graphs = %d\n"
           "[runtime]\ndriver = cuda\nlog = warn\n",
           policy, max_graphs);
  axpy_open_ini(h, ini, NULL);
}

static int axpy_step(struct axpy_host *h, cgrt_step_report *rep) {
  cgrt_step_desc d = {
      .struct_size = sizeof(d), .phase = CGRT_PHASE_EVAL, .body = axpy_body, .user = h};
  int rc = cgrt_step(h->rt, &d, rep);
  if (rc == 0)
    assert_int_equal(cgrt_synchronize(h->rt), 0);
  return rc;
}

/*
 * Every step, module 1's y moves between two allocations (and x of module 2 between two with
 * other values). The host keeps its own expected values; replays must match them exactly.
 */
static void rebind_policy(const char *policy, int expect_graphs) {
  struct axpy_host h;
  axpy_open(&h, policy, 64);
  float *y1[2] = {h.y[1], dev_fill(100.0f)};
  float *x2[2] = {h.x[2], dev_fill(7.0f)};
  float e_y1[2] = {0.0f, 100.0f}, e_y0 = 0, e_y2 = 0;
  for (int s = 0; s < 12; s++) {
    int k = s % 2;
    h.y[1] = y1[k];
    h.x[2] = x2[k];
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    if (axpy_step(&h, &rep) != 0)
      fail_msg("%s, step %d: %s", policy, s, cgrt_last_error(h.rt));
    e_y0 += 0.5f * 1.0f;
    e_y1[k] += 0.25f * 2.0f;
    e_y2 += 2.0f * (k ? 7.0f : 3.0f);
    assert_true(dev_get(h.y[0], N - 1) == e_y0);
    /* The buffer in use has the new value; the one not in use was not written (no stale replay). */
    assert_true(dev_get(y1[k], 17) == e_y1[k]);
    assert_true(dev_get(y1[1 - k], 17) == e_y1[1 - k]);
    assert_true(dev_get(h.y[2], 5) == e_y2);
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(h.rt, &st), 0);
  assert_int_equal(st.live_graphs, expect_graphs);
  assert_true(st.rebinds > 0 || strcmp(policy, "copy") == 0);
  cgrt_close(h.rt);
  float *all[] = {h.x[0], h.x[1], x2[0], x2[1], h.y[0], y1[0], y1[1], h.y[2]};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
    cudaFree(all[i]);
}

static void rebind_update(void **state) {
  (void)state;
  rebind_policy("update", MODS);
}

static void rebind_copy(void **state) {
  (void)state;
  rebind_policy("copy", MODS);
}

static void rebind_recapture(void **state) {
  (void)state;
  rebind_policy("recapture", MODS + 2); /* modules 1 and 2 hold one per address set */
}

static void rebind_auto_alternating(void **state) {
  (void)state;
  rebind_policy("auto", MODS + 2); /* modules 1 and 2 keep a graph per address set */
}

static int moved_lines;
static char moved_last[1024];

static void count_moved(void *user, cgrt_log_level level, const char *msg) {
  (void)user;
  if (level == CGRT_LOG_WARN && strstr(msg, "moved on 3 of its last 4 calls (rebind = auto)")) {
    moved_lines++;
    snprintf(moved_last, sizeof(moved_last), "%s", msg);
  }
}

/*
 * The default policy, a host that hands module 0 a fresh input every step (a new allocation,
 * never an address seen before): 100 steps, every output right, each key recorded a bounded
 * number of times, one warning naming the moving buffer.
 */
static void rebind_auto_fresh_inputs(void **state) {
  (void)state;
  enum { STEPS = 100 };
  struct axpy_host h;
  moved_lines = 0;
  axpy_open_ini(
      &h, "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n[runtime]\ndriver = cuda\nlog = warn\n",
      count_moved);
  float *fresh[STEPS], *x0 = h.x[0];
  float e_y0 = 0;
  for (int s = 0; s < STEPS; s++) {
    fresh[s] = dev_fill((float)(s % 7)); /* kept: every step's address is new */
    h.x[0] = fresh[s];
    if (axpy_step(&h, NULL) != 0)
      fail_msg("step %d: %s", s, cgrt_last_error(h.rt));
    e_y0 += 0.5f * (float)(s % 7);
    assert_true(dev_get(h.y[0], N - 1) == e_y0);
    assert_true(dev_get(h.y[1], 3) == 0.25f * 2.0f * (float)(s + 1));
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(h.rt, &st), 0);
  assert_true(st.captures <= 3 + (MODS - 1)); /* module 0: capture, update, update to copies */
  assert_int_equal(st.rebind_copy_keys, 1);
  assert_int_equal(st.rebind_eager_keys, 0);
  assert_int_equal(st.staged_bytes, N * sizeof(float));
  assert_int_equal(moved_lines, 1);
  assert_contains(moved_last, "axpy0 fwd");
  assert_contains(moved_last, "buffer 'x' (#0)");
  cgrt_close(h.rt);
  for (int s = 0; s < STEPS; s++)
    cudaFree(fresh[s]);
  cudaFree(x0);
  for (int i = 0; i < MODS; i++) {
    cudaFree(h.y[i]);
    if (i)
      cudaFree(h.x[i]);
  }
}

static void rebind_error(void **state) {
  (void)state;
  struct axpy_host h;
  axpy_open(&h, "error", 64);
  for (int s = 0; s < 3; s++)
    assert_int_equal(axpy_step(&h, NULL), 0);
  float *old = h.y[1];
  h.y[1] = dev_fill(100.0f);
  assert_int_equal(axpy_step(&h, NULL), CGRT_E_REBIND);
  assert_contains(cgrt_last_error(h.rt), "axpy1 fwd");
  assert_contains(cgrt_last_error(h.rt), "buffer 'y' (#1) moved");
  assert_int_equal(cgrt_synchronize(h.rt), 0);
  assert_true(dev_get(h.y[1], 0) == 100.0f);
  assert_true(dev_get(old, 0) == 3 * 0.5f); /* three steps, nothing since */
  cgrt_close(h.rt);
  cudaFree(old);
}

static void lru_bound_under_many_keys(void **state) {
  (void)state;
  struct axpy_host h;
  axpy_open(&h, "update", 8);
  float e = 0;
  for (int s = 0; s < 60; s++) {
    h.key = (uint64_t)(s % 20);
    assert_int_equal(axpy_step(&h, NULL), 0);
    e += 0.25f * 2.0f;
    assert_true(dev_get(h.y[1], N / 2) == e);
    cgrt_stats st = {.struct_size = sizeof(st)};
    assert_int_equal(cgrt_stats_get(h.rt, &st), 0);
    assert_true(st.live_graphs <= 8);
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(h.rt, &st), 0);
  assert_true(st.evictions > 0);
  assert_int_equal(st.live_graphs, 8);
  cgrt_close(h.rt);
  for (int i = 0; i < MODS; i++) {
    cudaFree(h.x[i]);
    cudaFree(h.y[i]);
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
      cmocka_unit_test(decode_layer_scope_bitwise),
      cmocka_unit_test(decode_block_scope_bitwise),
      cmocka_unit_test(runs_on_the_hosts_stream),
      cmocka_unit_test(rebind_update),
      cmocka_unit_test(rebind_copy),
      cmocka_unit_test(rebind_recapture),
      cmocka_unit_test(rebind_auto_alternating),
      cmocka_unit_test(rebind_auto_fresh_inputs),
      cmocka_unit_test(rebind_error),
      cmocka_unit_test(lru_bound_under_many_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
