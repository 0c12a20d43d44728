/*
 * test_scoped.c - the `transformer_engine` and `full_iteration` backends' policies on the host
 * driver: the capture step, graph counts per kind, microbatch and direction, eager passthrough of
 * unscoped kinds, a key first seen late, whole-step graphs per phase and shape, prepare every
 * step, and every configuration rule about modules, MoE and recompute refused at open with its
 * own message.
 *
 * The model: 2 layers of attn, mamba, mlp (even layer) or router, preprocess, experts (odd
 * layer); M microbatches; forward then backward of each microbatch; an optimizer "kernel" last.
 * Device work is a host function that counts runs per module and direction.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/backend.h" /* CGRT_KIND_BIT */
#include "cgrt/cgrt.h"

#define MAX_MODS 16

struct model {
  cgrt_runtime *rt;
  cgrt_module *m[MAX_MODS];
  cgrt_kind kinds[MAX_MODS];
  int n;
  int microbatches;
  long ran[MAX_MODS][2];       /* device runs per module and direction */
  long callbacks[MAX_MODS][2]; /* callback invocations (eager, warm-up or capture) */
  long updates;                /* optimizer runs on the device */
  int prepares, bodies;
  struct ref {
    struct model *md;
    int i;
  } refs[MAX_MODS];
  struct ref bwd_refs[MAX_MODS];
  uint64_t key;
};

static void run_fwd(void *arg) {
  struct ref *r = arg;
  r->md->ran[r->i][0]++;
}

static void run_bwd(void *arg) {
  struct ref *r = arg;
  r->md->ran[r->i][1]++;
}

static void run_update(void *arg) {
  ((struct model *)arg)->updates++;
}

static int fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct ref *r = user;
  r->md->callbacks[r->i][0]++;
  return cgrt_enqueue_host(ctx, run_fwd, r);
}

static int bwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct ref *r = user;
  r->md->callbacks[r->i][1]++;
  return cgrt_enqueue_host(ctx, run_bwd, &r->md->bwd_refs[r->i]);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  (void)ctx;
  ((struct model *)user)->prepares++;
  return 0;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct model *md = user;
  md->bodies++;
  for (int mb = 0; mb < md->microbatches; mb++) {
    cgrt_args a = {.struct_size = sizeof(a), .key = md->key, .microbatch = mb};
    for (int i = 0; i < md->n; i++) {
      int rc = cgrt_forward(md->rt, md->m[i], ctx, &a);
      if (rc)
        return rc;
    }
    if (ctx->phase != CGRT_PHASE_TRAIN)
      continue;
    for (int i = md->n; i-- > 0;) {
      int rc = cgrt_backward(md->rt, md->m[i], ctx, &a);
      if (rc)
        return rc;
    }
  }
  return ctx->phase == CGRT_PHASE_TRAIN ? cgrt_enqueue_host(ctx, run_update, md) : 0;
}

static struct model *model_open(const char *cuda_graph, const char *host) {
  struct model *md = calloc(1, sizeof(*md));
  char ini[2048];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nwarmup_steps = 2\n%s\n[host]\n%s\n[runtime]\ndriver = host\nlog = off\n",
           cuda_graph, host ? host : "");
  if (cgrt_open_string(&md->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  md->microbatches = 2;
  static const cgrt_kind layer0[] = {CGRT_KIND_ATTN, CGRT_KIND_MAMBA, CGRT_KIND_MLP};
  static const cgrt_kind layer1[] = {CGRT_KIND_ATTN, CGRT_KIND_MAMBA, CGRT_KIND_MOE_ROUTER,
                                     CGRT_KIND_MOE_PREPROCESS, CGRT_KIND_MOE};
  for (int l = 0; l < 2; l++) {
    const cgrt_kind *k = l ? layer1 : layer0;
    int count = l ? 5 : 3;
    for (int j = 0; j < count; j++) {
      int i = md->n++;
      char name[48];
      snprintf(name, sizeof(name), "layer%d.%s", l, cgrt_kind_name(k[j]));
      md->kinds[i] = k[j];
      md->refs[i] = (struct ref){md, i};
      md->bwd_refs[i] = (struct ref){md, i};
      cgrt_module_desc d = {.struct_size = sizeof(d),
                            .name = name,
                            .kind = k[j],
                            .layer = l,
                            .forward = fwd,
                            .backward = bwd,
                            .user = &md->refs[i]};
      assert_int_equal(cgrt_module_register(md->rt, &d, &md->m[i]), 0);
    }
  }
  return md;
}

static void model_close(struct model *md) {
  assert_int_equal(cgrt_close(md->rt), 0);
  free(md);
}

static cgrt_step_report step(struct model *md, cgrt_phase phase) {
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = phase,
                      .tokens = 64,
                      .microbatches = md->microbatches,
                      .prepare = prepare,
                      .body = body,
                      .user = md};
  if (cgrt_step(md->rt, &d, &rep) != 0)
    fail_msg("step: %s", cgrt_last_error(md->rt));
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  return rep;
}

static cgrt_stats stats(struct model *md) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  return s;
}

static int scoped_count(struct model *md, uint32_t kinds) {
  int n = 0;
  for (int i = 0; i < md->n; i++)
    n += (kinds & CGRT_KIND_BIT(md->kinds[i])) != 0;
  return n;
}

/* ---------------------------------------------------------------- transformer_engine */

static void te_capture_step_and_counts(uint32_t kinds, const char *modules) {
  char cg[256];
  snprintf(cg, sizeof(cg), "impl = transformer_engine\nmodules = %s", modules);
  struct model *md = model_open(cg, "moe_experts = 4\nmoe_capacity = drop_and_pad\n"
                                    "moe_dispatcher = allgather\n");
  int scoped = scoped_count(md, kinds);
  int per_step = md->n * md->microbatches * 2;
  int graphs = scoped * md->microbatches * 2;
  cgrt_step_report r0 = step(md, CGRT_PHASE_TRAIN);
  cgrt_step_report r1 = step(md, CGRT_PHASE_TRAIN);
  assert_int_equal(r0.mode, CGRT_MODE_WARMUP);
  assert_int_equal(r1.mode, CGRT_MODE_WARMUP);
  assert_int_equal(stats(md).captures, 0);
  /* The step after warm-up captures every scoped call: one graph per module, mb, direction. */
  cgrt_step_report r2 = step(md, CGRT_PHASE_TRAIN);
  assert_int_equal(r2.mode, CGRT_MODE_CAPTURE);
  assert_int_equal(r2.calls_captured, graphs);
  assert_int_equal(r2.calls_eager, per_step - graphs);
  assert_int_equal(r2.graphs_built, graphs);
  for (int s = 0; s < 3; s++) {
    cgrt_step_report r = step(md, CGRT_PHASE_TRAIN);
    assert_int_equal(r.mode, CGRT_MODE_REPLAY);
    assert_int_equal(r.calls_replayed, graphs);
    assert_int_equal(r.calls_eager, per_step - graphs);
  }
  cgrt_stats st = stats(md);
  assert_int_equal(st.captures, graphs);
  assert_int_equal(st.live_graphs, graphs);
  /* Every call's device work ran every step; only unscoped callbacks ran after the capture. */
  for (int i = 0; i < md->n; i++) {
    int is_scoped = (kinds & CGRT_KIND_BIT(md->kinds[i])) != 0;
    for (int dir = 0; dir < 2; dir++) {
      assert_int_equal(md->ran[i][dir], 6 * md->microbatches);
      assert_int_equal(md->callbacks[i][dir], (is_scoped ? 3 : 6) * md->microbatches);
    }
  }
  assert_int_equal(md->updates, 6);
  model_close(md);
}

static void te_attn_mlp(void **state) {
  (void)state;
  te_capture_step_and_counts(CGRT_KIND_BIT(CGRT_KIND_ATTN) | CGRT_KIND_BIT(CGRT_KIND_MLP),
                             "attn mlp");
}

static void te_attn_router_preprocess(void **state) {
  (void)state;
  te_capture_step_and_counts(CGRT_KIND_BIT(CGRT_KIND_ATTN) | CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER) |
                                 CGRT_KIND_BIT(CGRT_KIND_MOE_PREPROCESS),
                             "attn moe_router moe_preprocess");
}

static void te_attn_moe(void **state) {
  (void)state;
  te_capture_step_and_counts(CGRT_KIND_BIT(CGRT_KIND_ATTN) | CGRT_KIND_BIT(CGRT_KIND_MOE),
                             "attn moe");
}

static void te_mamba_attn_router(void **state) {
  (void)state;
  te_capture_step_and_counts(CGRT_KIND_BIT(CGRT_KIND_MAMBA) | CGRT_KIND_BIT(CGRT_KIND_ATTN) |
                                 CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER),
                             "mamba attn moe_router");
}

static void te_late_key_warms_once(void **state) {
  (void)state;
  struct model *md = model_open("impl = transformer_engine\nmodules = attn", NULL);
  for (int s = 0; s < 4; s++)
    step(md, CGRT_PHASE_TRAIN);
  /* Another shape after the capture step: one eager run, then its capture. */
  md->key = 7;
  cgrt_step_report r = step(md, CGRT_PHASE_TRAIN);
  assert_int_equal(r.mode, CGRT_MODE_WARMUP);
  r = step(md, CGRT_PHASE_TRAIN);
  assert_int_equal(r.mode, CGRT_MODE_CAPTURE);
  r = step(md, CGRT_PHASE_TRAIN);
  assert_int_equal(r.mode, CGRT_MODE_REPLAY);
  model_close(md);
}

static void te_eval_has_its_own_warmup(void **state) {
  (void)state;
  struct model *md = model_open("impl = transformer_engine\nmodules = attn mlp", NULL);
  for (int s = 0; s < 3; s++)
    step(md, CGRT_PHASE_TRAIN);
  cgrt_step_report r = step(md, CGRT_PHASE_EVAL);
  assert_int_equal(r.mode, CGRT_MODE_WARMUP);
  step(md, CGRT_PHASE_EVAL);
  r = step(md, CGRT_PHASE_EVAL);
  assert_int_equal(r.mode, CGRT_MODE_CAPTURE);
  model_close(md);
}

/* ---------------------------------------------------------------- full_iteration */

static void fi_whole_step_per_phase(void **state) {
  (void)state;
  struct model *md = model_open("impl = full_iteration", "nan_check = off\n");
  cgrt_mode modes[6];
  for (int s = 0; s < 6; s++)
    modes[s] = step(md, CGRT_PHASE_TRAIN).mode;
  assert_int_equal(modes[0], CGRT_MODE_WARMUP);
  assert_int_equal(modes[1], CGRT_MODE_WARMUP);
  assert_int_equal(modes[2], CGRT_MODE_CAPTURE);
  assert_int_equal(modes[5], CGRT_MODE_REPLAY);
  assert_int_equal(md->bodies, 3);   /* replays skip the body */
  assert_int_equal(md->prepares, 6); /* prepare stages every step */
  assert_int_equal(md->updates, 6);  /* the optimizer is inside the graph */
  for (int i = 0; i < md->n; i++)
    assert_int_equal(md->ran[i][0], 6 * md->microbatches);
  assert_int_equal(stats(md).captures, 1);
  /* Eval: its own warm-up and graph. */
  for (int s = 0; s < 3; s++)
    step(md, CGRT_PHASE_EVAL);
  assert_int_equal(stats(md).captures, 2);
  assert_int_equal(step(md, CGRT_PHASE_EVAL).mode, CGRT_MODE_REPLAY);
  /* Another microbatch count is another step shape: its own graph, never a wrong replay. */
  md->microbatches = 3;
  assert_int_equal(step(md, CGRT_PHASE_TRAIN).mode, CGRT_MODE_WARMUP);
  model_close(md);
}

/* An infer step of `tokens` tokens; its report. */
static cgrt_step_report infer(struct model *md, int64_t tokens) {
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_INFER,
                      .tokens = tokens,
                      .prepare = prepare,
                      .body = body,
                      .user = md};
  if (cgrt_step(md->rt, &d, &rep) != 0)
    fail_msg("infer step of %lld tokens: %s", (long long)tokens, cgrt_last_error(md->rt));
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  return rep;
}

/* full_iteration's inference: the whole body per token bucket, eager above the largest. */
static void fi_infers_per_bucket(void **state) {
  (void)state;
  struct model *md = model_open("impl = full_iteration\n[inference]\nbuckets = list\nlist = 4 16",
                                "nan_check = off\n");
  md->microbatches = 1;
  cgrt_mode modes[4];
  for (int s = 0; s < 4; s++) {
    cgrt_step_report r = infer(md, 3);
    modes[s] = r.mode;
    assert_int_equal(r.padded_tokens, 4);
  }
  assert_int_equal(modes[0], CGRT_MODE_WARMUP);
  assert_int_equal(modes[2], CGRT_MODE_CAPTURE);
  assert_int_equal(modes[3], CGRT_MODE_REPLAY);
  assert_int_equal(stats(md).captures, 1);
  /* Another bucket: a graph of its own. */
  for (int s = 0; s < 3; s++)
    assert_int_equal(infer(md, 9).padded_tokens, 16);
  assert_int_equal(stats(md).captures, 2);
  assert_int_equal(infer(md, 16).mode, CGRT_MODE_REPLAY);
  /* Above the largest bucket: eager, unpadded, no graph. */
  cgrt_step_report r = infer(md, 20);
  assert_int_equal(r.mode, CGRT_MODE_EAGER);
  assert_int_equal(r.padded_tokens, 20);
  assert_int_equal(stats(md).captures, 2);
  for (int i = 0; i < md->n; i++)
    assert_int_equal(md->ran[i][0], 4 + 3 + 1 + 1); /* every step ran each forward once */
  cgrt_backend_info bi = {.struct_size = sizeof(bi)};
  assert_int_equal(cgrt_backend_info_get(md->rt, &bi), 0);
  assert_string_equal(bi.name, "full_iteration");
  assert_int_equal(bi.phases[CGRT_PHASE_INFER], CGRT_RUN_GRAPHS);
  assert_int_equal(stats(md).eager_phase_steps, 0);
  model_close(md);
}

/* transformer_engine has no form for inference: cgrt runs those steps eagerly, and says so. */
static void te_infer_steps_run_eagerly(void **state) {
  (void)state;
  struct model *md = model_open("impl = transformer_engine\nmodules = attn mlp", NULL);
  md->microbatches = 1;
  cgrt_backend_info bi = {.struct_size = sizeof(bi)};
  assert_int_equal(cgrt_backend_info_get(md->rt, &bi), 0);
  assert_int_equal(bi.phases[CGRT_PHASE_TRAIN], CGRT_RUN_GRAPHS);
  assert_int_equal(bi.phases[CGRT_PHASE_EVAL], CGRT_RUN_GRAPHS);
  assert_int_equal(bi.phases[CGRT_PHASE_INFER], CGRT_RUN_CORE_EAGER);
  assert_true(bi.caps & CGRT_BACKEND_GRAPHS);
  assert_false(bi.caps & CGRT_BACKEND_INFERENCE);
  for (int s = 0; s < 5; s++) {
    cgrt_step_report r = infer(md, 7);
    assert_int_equal(r.mode, CGRT_MODE_EAGER);
  }
  for (int i = 0; i < md->n; i++)
    assert_int_equal(md->ran[i][0], 5);
  cgrt_stats st = stats(md);
  assert_int_equal(st.eager_phase_steps, 5);
  assert_int_equal(st.captures, 0);
  assert_int_equal(st.calls_by_mode[CGRT_MODE_EAGER], 5 * md->n);
  /* Training still graphs its module kinds. */
  for (int s = 0; s < 4; s++)
    step(md, CGRT_PHASE_TRAIN);
  assert_true(stats(md).captures > 0);
  assert_int_equal(stats(md).eager_phase_steps, 5);
  model_close(md);
}

/* ---------------------------------------------------------------- the rules at open */

struct rule_case {
  const char *cuda_graph;
  const char *host;
  const char *message;
};

static void rules_refused_at_open(void **state) {
  (void)state;
  static const struct rule_case cases[] = {
      {"impl = transformer_engine\nmodules = moe moe_router", "moe_experts = 4",
       "'moe' and 'moe_router' exclude each other"},
      {"impl = transformer_engine\nmodules = attn moe_preprocess", "moe_experts = 4",
       "'moe_preprocess' needs 'moe_router'"},
      {"impl = transformer_engine\nmodules = moe_router", "moe_experts = 1",
       "needs [host] moe_experts > 1"},
      {"impl = transformer_engine\nmodules = moe", "moe_experts = 4\nmoe_capacity = drop",
       "needs [host] moe_capacity = drop_and_pad"},
      {"impl = transformer_engine\nmodules = moe_router moe_preprocess",
       "moe_experts = 4\nmoe_capacity = drop\nmoe_dispatcher = alltoall",
       "alltoall dispatcher and dropping capacity"},
      {"impl = transformer_engine\nmodules = moe_router moe_preprocess",
       "moe_experts = 4\nmoe_router_padding_fp8 = true", "FP8 router padding"},
      {"impl = transformer_engine\nmodules = attn", "recompute = full",
       "only graph-safe with whole-step graphs"},
      {"impl = dynamic_cp\n[dynamic_cp]\ngraph_scope = step", "nan_check = on",
       "graph_scope = step (line 4) graphs the whole step, which needs [host] nan_check = off"},
      {"impl = dynamic_cp\nmodules = attn\n[dynamic_cp]\ngraph_scope = step", "nan_check = off",
       "so [cuda_graph] modules must be empty, but modules = attn (line 3)"},
      {"impl = local\n[dynamic_cp]\ngraph_scope = step", "",
       "graph_scope = step (line 4) is only read by impl = dynamic_cp"},
      {"impl = dynamic_cp\nmodules = attn", "recompute = full",
       "only graph-safe with whole-step graphs"},
      {"impl = full_iteration", "nan_check = on", "needs [host] nan_check = off"},
      {"impl = full_iteration\nmodules = attn", "nan_check = off", "modules must be empty"},
      {"impl = transformer_engine\ninference_scope = layer", "",
       "is not allowed with impl = transformer_engine"},
      {"impl = transformer_engine\nmodules = attn", "graph_safe_rng = false",
       "graph_safe_rng must be true"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[cuda_graph]\n%s\n[host]\n%s\n[runtime]\ndriver = host\nlog = off\n",
             cases[i].cuda_graph, cases[i].host);
    cgrt_runtime *rt = NULL;
    int rc = cgrt_open_string(&rt, ini);
    if (rc != CGRT_E_CONFIG || !strstr(cgrt_last_error(NULL), cases[i].message))
      fail_msg("case %zu: rc %d, message: %s", i, rc, cgrt_last_error(NULL));
    assert_null(rt);
  }
  /* A drop_and_pad preprocess with the alltoall dispatcher is fine. */
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open_string(&rt, "[cuda_graph]\nimpl = transformer_engine\nmodules = "
                                         "attn moe_router moe_preprocess\n[host]\nmoe_experts = "
                                         "4\nmoe_capacity = drop_and_pad\n[runtime]\ndriver = "
                                         "host\nlog = off\n"),
                   0);
  cgrt_close(rt);
  /* Full recomputation inside dynamic_cp's whole-step graphs is fine. */
  rt = NULL;
  if (cgrt_open_string(&rt, "[cuda_graph]\nimpl = dynamic_cp\n[dynamic_cp]\ngraph_scope = step\n"
                            "[host]\nnan_check = off\nrecompute = full\n[runtime]\ndriver = "
                            "host\nlog = off\n") != 0)
    fail_msg("%s", cgrt_last_error(NULL));
  cgrt_close(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(te_attn_mlp),
      cmocka_unit_test(te_attn_router_preprocess),
      cmocka_unit_test(te_attn_moe),
      cmocka_unit_test(te_mamba_attn_router),
      cmocka_unit_test(te_late_key_warms_once),
      cmocka_unit_test(te_eval_has_its_own_warmup),
      cmocka_unit_test(fi_whole_step_per_phase),
      cmocka_unit_test(fi_infers_per_bucket),
      cmocka_unit_test(te_infer_steps_run_eagerly),
      cmocka_unit_test(rules_refused_at_open),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
