/*
 * test_train.c (GPU) - the scoped and whole-step training backends on the cuda driver, with the
 * train workload (attention, mamba scan, MLP and a MoE layer split into router, preprocess and
 * experts; forward, backward, SGD): after K steps the losses of every step and the weights are
 * bitwise equal to eager for transformer_engine with `attn mlp`, `attn moe_router
 * moe_preprocess`, `attn moe`, `mamba attn moe_router` (drop_and_pad), and for full_iteration;
 * and the graphs were really built and replayed.
 */
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
#include "train_host.h"

#define STEPS 7 /* 2 warm-up, 1 capture, 4 replays */

struct run {
  float losses[STEPS][8]; /* the first `microbatches` entries of each step are written */
  int microbatches;
  float *params;
  size_t count;
  cgrt_stats stats;
  cgrt_mode modes[STEPS];
};

/* Runs STEPS training steps of a fresh workload under the configuration `ini`. */
static void run_training(const char *ini, struct run *out) {
  struct cgrtk_train_cfg cfg;
  cgrtk_train_default_cfg(&cfg);
  assert_true(cfg.microbatches <= 8);
  cgrtk_train *t = NULL;
  char err[256];
  if (cgrtk_train_create(&t, &cfg, err, sizeof(err)) != 0)
    fail_msg("cgrtk_train_create: %s", err);
  cgrt_runtime *rt = NULL;
  if (cgrt_open_string(&rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  struct train_host h;
  if (train_host_open(&h, t, rt) != 0)
    fail_msg("modules: %s", cgrt_last_error(rt));
  for (int s = 0; s < STEPS; s++) {
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    if (train_host_step(&h, &rep) != 0)
      fail_msg("step %d: %s", s, cgrt_last_error(rt));
    out->modes[s] = rep.mode;
    /* The loss is read on the host only between steps, outside the graphed body. */
    assert_int_equal(cgrt_synchronize(rt), 0);
    assert_int_equal(cgrtk_train_read_loss(t, out->losses[s], cgrt_stream(rt)), 0);
    assert_int_equal(cgrt_synchronize(rt), 0);
  }
  out->microbatches = cfg.microbatches;
  out->count = cgrtk_train_param_count(t);
  out->params = malloc(out->count * sizeof(float));
  assert_int_equal(cgrtk_train_read_params(t, out->params, out->count, cgrt_stream(rt)), 0);
  assert_int_equal(cgrt_synchronize(rt), 0);
  out->stats = (cgrt_stats){.struct_size = sizeof(cgrt_stats)};
  assert_int_equal(cgrt_stats_get(rt, &out->stats), 0);
  assert_int_equal(cgrt_close(rt), 0);
  cgrtk_train_destroy(t);
}

static struct run eager;

static int setup_eager(void **state) {
  (void)state;
  run_training("[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\nlog = warn\n", &eager);
  return 0;
}

static int teardown_eager(void **state) {
  (void)state;
  free(eager.params);
  return 0;
}

static void check_against_eager(const struct run *r, const char *what) {
  assert_int_equal(r->microbatches, eager.microbatches);
  for (int s = 0; s < STEPS; s++)
    if (memcmp(r->losses[s], eager.losses[s], (size_t)r->microbatches * sizeof(float)) != 0)
      fail_msg("%s: the losses of step %d differ from eager (%.9g vs %.9g)", what, s,
               r->losses[s][0], eager.losses[s][0]);
  assert_int_equal(r->count, eager.count);
  if (memcmp(r->params, eager.params, r->count * sizeof(float)) != 0)
    fail_msg("%s: the weights after %d steps differ from eager", what, STEPS);
  /* Eager means something only if the run did graph: 2 warm-ups, a capture, replays. */
  assert_int_equal(r->modes[0], CGRT_MODE_WARMUP);
  assert_int_equal(r->modes[2], CGRT_MODE_CAPTURE);
  assert_int_equal(r->modes[STEPS - 1], CGRT_MODE_REPLAY);
  assert_true(r->stats.captures > 0);
  assert_int_equal(r->stats.fallbacks, 0);
}

static void scoped(const char *modules, int graphs_per_mb_dir) {
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = transformer_engine\nmodules = %s\nwarmup_steps = 2\n"
           "[host]\nmoe_experts = 4\nmoe_capacity = drop_and_pad\n"
           "[runtime]\ndriver = cuda\nlog = warn\n",
           modules);
  struct run r = {0};
  run_training(ini, &r);
  check_against_eager(&r, modules);
  /* One graph per scoped module, microbatch and direction. */
  assert_int_equal(r.stats.captures, (uint64_t)graphs_per_mb_dir * 2 * 2);
  assert_true(r.stats.calls_by_mode[CGRT_MODE_REPLAY] > 0);
  assert_true(r.stats.calls_by_mode[CGRT_MODE_EAGER] > 0); /* unscoped kinds ran eagerly */
  free(r.params);
}

/* The default workload: 4 layers, each attn + mamba; layers 0, 2 an mlp; 1, 3 a MoE layer. */
static void te_attn_mlp(void **state) {
  (void)state;
  scoped("attn mlp", 4 + 2);
}

static void te_attn_router_preprocess(void **state) {
  (void)state;
  scoped("attn moe_router moe_preprocess", 4 + 2 + 2);
}

static void te_attn_moe(void **state) {
  (void)state;
  scoped("attn moe", 4 + 2);
}

static void te_mamba_attn_router(void **state) {
  (void)state;
  scoped("mamba attn moe_router", 4 + 4 + 2);
}

static void full_iteration(void **state) {
  (void)state;
  struct run r = {0};
  run_training("[cuda_graph]\nimpl = full_iteration\nwarmup_steps = 2\n[host]\nnan_check = off\n"
               "moe_experts = 4\nmoe_capacity = drop_and_pad\n[runtime]\ndriver = cuda\n"
               "log = warn\n",
               &r);
  check_against_eager(&r, "full_iteration");
  assert_int_equal(r.stats.captures, 1);
  assert_int_equal(r.stats.steps_by_mode[CGRT_MODE_REPLAY], STEPS - 3);
  assert_true(r.stats.graph_mem_reserved > 0);
  free(r.params);
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
      cmocka_unit_test(te_attn_mlp),    cmocka_unit_test(te_attn_router_preprocess),
      cmocka_unit_test(te_attn_moe),    cmocka_unit_test(te_mamba_attn_router),
      cmocka_unit_test(full_iteration),
  };
  return cmocka_run_group_tests(tests, setup_eager, teardown_eager);
}
