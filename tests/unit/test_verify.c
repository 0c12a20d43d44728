/*
 * test_verify.c - [cuda_graph] verify on the host driver: a module whose work takes an argument
 * computed on the host that changes every step (captured once, its replays are stale) is caught
 * on its first replay; verify_action warn, eager and error; every:N; the whole-body scope; the copy
 * rebind policy; tolerance in ulps for declared float buffers; the comparison itself; the keys.
 *
 * Device work is a host function on the stream (captured like a kernel), y[i] = x[i] * s, with s
 * held in a parameter block the call fills at enqueue time: like a kernel argument, a graph keeps
 * the block it was captured with, so a replay computes with the s of the capture.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "config/config.h"
#include "runtime.h"
#include "graphs/verify.h"

#define N          4
#define MAX_PARAMS 1024

struct params {
  const float *x;
  float *y;
  float s;
};

struct fx {
  cgrt_runtime *rt;
  cgrt_module *m;
  float x[N], y[N];
  float x2[N], y2[N]; /* moved buffers (rebind = copy) */
  float *xp, *yp;     /* the buffers the body passes */
  struct params params[MAX_PARAMS];
  int num_params;
  int stale;        /* 1: s = step + 1 (changes per step); 0: s = 2 */
  int ulp_drift;    /* s = 1 + step ulps (a tiny per-step change) */
  int typed;        /* declare the buffers as f32 */
  int verify_lines; /* log lines starting "verify:" */
  char last_line[2048];
};

static void work(void *arg) {
  struct params *p = arg;
  for (int i = 0; i < N; i++)
    p->y[i] = p->x[i] * p->s;
}

static float step_scale(const struct fx *f, uint64_t step) {
  if (f->ulp_drift)
    return nextafterf(1.0f, 2.0f) + (float)step * FLT_EPSILON;
  return f->stale ? (float)(step + 1) : 2.0f;
}

/* The scale is computed on the host from the step: a graph replays the one it captured. */
static int verify_scale_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fx *f = user;
  struct params *p = &f->params[f->num_params++ % MAX_PARAMS];
  p->x = args->buffers[0].ptr;
  p->y = args->buffers[1].ptr;
  p->s = step_scale(f, ctx->step);
  return cgrt_enqueue_host(ctx, work, p);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fx *f = user;
  unsigned t = f->typed ? CGRT_F32 : 0;
  cgrt_buffer b[2] = {{f->xp, sizeof(f->x), CGRT_ACCESS_TYPED(CGRT_IN, t), "x"},
                      {f->yp, sizeof(f->y), CGRT_ACCESS_TYPED(CGRT_OUT, t), "y"}};
  cgrt_args a = {.struct_size = sizeof(a), .key = 1, .buffers = b, .num_buffers = 2};
  return cgrt_forward(f->rt, f->m, ctx, &a);
}

/* Whole-body scope: the body addresses the step's static buffers from ctx->buffers. */
static int body_static(const cgrt_ctx *ctx, void *user) {
  struct fx *f = user;
  cgrt_args a = {
      .struct_size = sizeof(a), .key = 1, .buffers = ctx->buffers, .num_buffers = ctx->num_buffers};
  return cgrt_forward(f->rt, f->m, ctx, &a);
}

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  struct fx *f = user;
  (void)level;
  if (strncmp(msg, "verify:", 7) == 0) {
    f->verify_lines++;
    snprintf(f->last_line, sizeof(f->last_line), "%s", msg);
  }
}

static struct fx *fx_open(const char *extra) {
  struct fx *f = calloc(1, sizeof(*f));
  f->xp = f->x;
  f->yp = f->y;
  f->stale = 1;
  for (int i = 0; i < N; i++) {
    f->x[i] = (float)(i + 1);
    f->x2[i] = (float)(10 * (i + 1));
  }
  char ini[1024];
  snprintf(
      ini, sizeof(ini),
      "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n%s\n[runtime]\ndriver = host\nlog = warn\n",
      extra);
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = log_sink, .log_user = f};
  if (cgrt_open_ex(&f->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  cgrt_module_desc d = {.struct_size = sizeof(d),
                        .name = "layer0.scale",
                        .kind = CGRT_KIND_MLP,
                        .forward = verify_scale_module,
                        .user = f};
  assert_int_equal(cgrt_module_register(f->rt, &d, &f->m), 0);
  return f;
}

static void fx_close(struct fx *f) {
  assert_int_equal(cgrt_close(f->rt), 0);
  free(f);
}

/* One step; *correct says whether y is x * s of this step. */
static int fx_step(struct fx *f, cgrt_step_report *rep, int *correct) {
  cgrt_step_report local = {.struct_size = sizeof(local)};
  uint64_t step = f->rt->graphs.step_index;
  cgrt_step_desc d = {.struct_size = sizeof(d), .phase = CGRT_PHASE_EVAL, .body = body, .user = f};
  int rc = cgrt_step(f->rt, &d, rep ? rep : &local);
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  *correct = 1;
  float s = step_scale(f, step);
  for (int i = 0; i < N; i++)
    if (f->yp[i] != f->xp[i] * s)
      *correct = 0;
  return rc;
}

static cgrt_stats stats(struct fx *f) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  return s;
}

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: %s", needle, haystack);
}

/* ---------------------------------------------------------------- the stale replay */

/* Without verify the fixture's replays are stale: what verify must catch. */
static void stale_replay_goes_unnoticed_without_verify(void **state) {
  (void)state;
  struct fx *f = fx_open("");
  int ok;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(fx_step(f, &rep, &ok), 0); /* warm-up */
  assert_true(ok);
  assert_int_equal(fx_step(f, &rep, &ok), 0); /* capture: launched with this step's scale */
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  assert_true(ok);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_false(ok); /* stale */
  assert_int_equal(stats(f).verifications, 0);
  assert_int_equal(f->verify_lines, 0);
  fx_close(f);
}

static void first_replay_mismatch_runs_eagerly_after(void **state) {
  (void)state;
  struct fx *f = fx_open("verify = first\nverify_action = eager");
  f->typed = 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  cgrt_mode modes[8];
  for (int i = 0; i < 8; i++) {
    int ok;
    assert_int_equal(fx_step(f, &rep, &ok), 0);
    modes[i] = rep.mode;
    if (!ok)
      fail_msg("step %d (%s): an output is wrong; every output must be correct", i,
               cgrt_mode_name(rep.mode));
  }
  assert_int_equal(modes[1], CGRT_MODE_CAPTURE);
  assert_int_equal(modes[2], CGRT_MODE_REPLAY); /* caught here; the eager outputs were kept */
  for (int i = 3; i < 8; i++)
    assert_int_equal(modes[i], CGRT_MODE_EAGER);
  cgrt_stats s = stats(f);
  assert_int_equal(s.verifications, 1);
  assert_int_equal(s.verify_mismatches, 1);
  assert_int_equal(s.live_graphs, 0);
  assert_int_equal(f->verify_lines, 1);
  assert_contains(f->last_line, "layer0.scale fwd (step 2, replay 1 of its graph)");
  assert_contains(f->last_line, "buffer 'y' (#1, 16 bytes) differs at element 0 (f32)");
  assert_contains(f->last_line, "replay 2 (0x40000000), eager 3 (0x40400000)");
  assert_contains(f->last_line, "verify_action = eager");
  /* Released graphs give the key another chance (and verify catches it again). */
  assert_int_equal(cgrt_release_graphs(f->rt), 0);
  int ok;
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_true(ok);
  assert_int_equal(stats(f).verify_mismatches, 2);
  fx_close(f);
}

static void warn_keeps_replaying(void **state) {
  (void)state;
  struct fx *f = fx_open("verify = first\nverify_action = warn");
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int ok;
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_false(ok); /* warn keeps the replay's outputs */
  assert_int_equal(f->verify_lines, 1);
  assert_contains(f->last_line,
                  "differs at byte 2 (bytes): replay 0x00, eager 0x40"); /* bytewise */
  assert_contains(f->last_line, "the graph keeps replaying (verify_action = warn)");
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY); /* first: checked once, stale again */
  assert_false(ok);
  cgrt_stats s = stats(f);
  assert_int_equal(s.verifications, 1);
  assert_int_equal(s.verify_mismatches, 1);
  assert_int_equal(s.live_graphs, 1);
  fx_close(f);
}

static void error_fails_the_step(void **state) {
  (void)state;
  struct fx *f = fx_open("verify = first\nverify_action = error");
  f->typed = 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int ok;
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(fx_step(f, &rep, &ok), CGRT_E_VERIFY);
  assert_true(ok); /* the eager outputs were kept */
  const char *err = cgrt_last_error(f->rt);
  assert_contains(err, "verify: layer0.scale fwd (step 2) differs from an eager run");
  assert_contains(err, "buffer 'y'");
  assert_contains(err, "replay 2 (0x40000000), eager 3 (0x40400000)");
  for (int i = 0; i < 3; i++) {
    assert_int_equal(fx_step(f, &rep, &ok), 0);
    assert_int_equal(rep.mode, CGRT_MODE_EAGER);
    assert_true(ok);
  }
  fx_close(f);
}

/* every:N checks the 1st, N+1st, 2N+1st... replay of each graph; a correct graph passes. */
static void every_n_counts_checks(void **state) {
  (void)state;
  struct fx *f = fx_open("verify = every:3");
  f->stale = 0;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int i = 0; i < 12; i++) { /* warm-up, capture, then 10 replays */
    int ok;
    assert_int_equal(fx_step(f, &rep, &ok), 0);
    assert_true(ok);
  }
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  cgrt_stats s = stats(f);
  assert_int_equal(s.verifications, 4); /* replays 1, 4, 7, 10 */
  assert_int_equal(s.verify_mismatches, 0);
  assert_int_equal(f->verify_lines, 0);
  fx_close(f);
}

/* Stale only every third step: every:N catches it when a checked replay meets a change. */
static void every_n_catches_a_later_change(void **state) {
  (void)state;
  struct fx *f = fx_open("verify = every:2\nverify_action = eager");
  f->stale = 0;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int ok;
  for (int i = 0; i < 5; i++) /* replays 1..3: correct, two of them checked */
    assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(stats(f).verifications, 2);
  f->stale = 1;                               /* from now on the scale moves */
  assert_int_equal(fx_step(f, &rep, &ok), 0); /* replay 4: unchecked, stale */
  assert_false(ok);
  assert_int_equal(fx_step(f, &rep, &ok), 0); /* replay 5: checked, caught, corrected */
  assert_true(ok);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_true(ok);
  assert_int_equal(stats(f).verify_mismatches, 1);
  fx_close(f);
}

static void tolerance_applies_to_typed_floats_only(void **state) {
  (void)state;
  /* The scale drifts by one ulp of 1.0 per step: the replay is off by a few ulps. */
  for (int typed = 0; typed < 2; typed++) {
    struct fx *f = fx_open("verify = every:1\nverify_tolerance = 16");
    f->ulp_drift = 1;
    f->typed = typed;
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    int ok;
    for (int i = 0; i < 5; i++)
      assert_int_equal(fx_step(f, &rep, &ok), 0);
    cgrt_stats s = stats(f);
    assert_int_equal(s.verifications, 3);
    /* typed f32: within 16 ulps, accepted; untyped: bitwise, every check differs */
    assert_int_equal(s.verify_mismatches, typed ? 0 : 3);
    fx_close(f);
  }
}

static void block_scope_body_is_checked(void **state) {
  (void)state;
  struct fx *f = fx_open("inference_scope = block\nverify = first\nverify_action = eager\n"
                         "[inference]\nmax_tokens = 8\nnum_graphs = 1");
  f->typed = 1;
  cgrt_buffer b[2] = {{f->x, sizeof(f->x), CGRT_ACCESS_TYPED(CGRT_IN, CGRT_F32), "x"},
                      {f->y, sizeof(f->y), CGRT_ACCESS_TYPED(CGRT_OUT, CGRT_F32), "y"}};
  cgrt_mode modes[6];
  for (int i = 0; i < 6; i++) {
    uint64_t step = f->rt->graphs.step_index;
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    cgrt_step_desc d = {.struct_size = sizeof(d),
                        .phase = CGRT_PHASE_INFER,
                        .tokens = 8,
                        .buffers = b,
                        .num_buffers = 2,
                        .body = body_static,
                        .user = f};
    assert_int_equal(cgrt_step(f->rt, &d, &rep), 0);
    assert_int_equal(cgrt_synchronize(f->rt), 0);
    modes[i] = rep.mode;
    for (int k = 0; k < N; k++)
      if (f->y[k] != f->x[k] * (float)(step + 1))
        fail_msg("step %d (%s): y[%d] = %g, expected %g", i, cgrt_mode_name(rep.mode), k,
                 (double)f->y[k], (double)(f->x[k] * (float)(step + 1)));
  }
  assert_int_equal(modes[1], CGRT_MODE_CAPTURE);
  assert_int_equal(modes[2], CGRT_MODE_REPLAY);
  assert_int_equal(modes[3], CGRT_MODE_EAGER);
  assert_contains(f->last_line, "the infer body at 8 tokens");
  assert_int_equal(stats(f).verify_mismatches, 1);
  fx_close(f);
}

/* Under rebind = copy the check runs on the executable's private buffers. */
static void copy_policy_is_checked(void **state) {
  (void)state;
  struct fx *f = fx_open("rebind = copy\nverify = first\nverify_action = eager");
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int ok;
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  f->xp = f->x2; /* moved: the copy policy copies in and out around the replay */
  f->yp = f->y2;
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_true(ok);
  assert_int_equal(stats(f).verify_mismatches, 1);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_true(ok);
  fx_close(f);
}

/* No memory for the private copies: the replay runs unchecked, and that is counted. */
static void out_of_memory_skips_the_check(void **state) {
  (void)state;
  struct fx *f = fx_open("verify = first\nverify_action = eager");
  f->stale = 0;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int ok;
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  f->rt->faults.mem_alloc = 1;
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_true(ok);
  cgrt_stats s = stats(f);
  assert_int_equal(s.verify_skipped, 1);
  assert_int_equal(s.verifications, 0);
  assert_contains(f->last_line, "replay 1 not checked");
  fx_close(f);
}

/* ---------------------------------------------------------------- the comparison */

static void compare_bitwise_and_ulps(void **state) {
  (void)state;
  struct cgrt_verify_diff d;
  float a[3] = {1.0f, 2.0f, 3.0f}, b[3] = {1.0f, 2.0f, 3.0f};
  assert_int_equal(cgrt__verify_compare(a, b, sizeof(a), CGRT_F32, 0, &d), 0);
  b[1] = nextafterf(2.0f, 3.0f);
  assert_int_equal(cgrt__verify_compare(a, b, sizeof(a), CGRT_F32, 0, &d), 1);
  assert_int_equal(d.index, 1);
  assert_int_equal(d.ulps, 1);
  assert_string_equal(d.replay, "2 (0x40000000)");
  assert_int_equal(cgrt__verify_compare(a, b, sizeof(a), CGRT_F32, 1, &d), 0);
  assert_int_equal(cgrt__verify_compare(a, b, sizeof(a), 0, 1, &d), 1); /* untyped: bytes */
  assert_int_equal(d.index, 4);
  /* both zeros are 0 ulps apart; a NaN equals a NaN within tolerance, never a number */
  float z[2] = {0.0f, NAN}, nz[2] = {-0.0f, NAN};
  assert_int_equal(cgrt__verify_compare(z, nz, sizeof(z), CGRT_F32, 1, &d), 0);
  assert_int_equal(cgrt__verify_compare(z, nz, sizeof(z), CGRT_F32, 0, &d), 1);
  float n1[1] = {NAN}, n2[1] = {1.0f};
  assert_int_equal(cgrt__verify_compare(n1, n2, sizeof(n1), CGRT_F32, 1000000, &d), 1);
  /* across zero: -1 ulp to +1 ulp is 2 ulps */
  float s1[1] = {-FLT_TRUE_MIN}, s2[1] = {FLT_TRUE_MIN};
  assert_int_equal(cgrt__verify_compare(s1, s2, sizeof(s1), CGRT_F32, 1, &d), 1);
  assert_int_equal(d.ulps, 2);
  assert_int_equal(cgrt__verify_compare(s1, s2, sizeof(s1), CGRT_F32, 2, &d), 0);
  /* f64, f16 (0x3c00 = 1.0, 0x3c01 its next), bf16 (0x3f80 = 1.0) */
  double x[1] = {1.0}, y[1] = {nextafter(1.0, 2.0)};
  assert_int_equal(cgrt__verify_compare(x, y, sizeof(x), CGRT_F64, 1, &d), 0);
  assert_int_equal(cgrt__verify_compare(x, y, sizeof(x), CGRT_F64, 0, &d), 1);
  uint16_t h1[2] = {0x3c00, 0x3c00}, h2[2] = {0x3c00, 0x3c03};
  assert_int_equal(cgrt__verify_compare(h1, h2, sizeof(h1), CGRT_F16, 2, &d), 1);
  assert_int_equal(d.index, 1);
  assert_int_equal(d.ulps, 3);
  assert_string_equal(d.replay, "1 (0x3c00)");
  assert_int_equal(cgrt__verify_compare(h1, h2, sizeof(h1), CGRT_F16, 3, &d), 0);
  uint16_t g1[1] = {0x3f80}, g2[1] = {0x3f81};
  assert_int_equal(cgrt__verify_compare(g1, g2, sizeof(g1), CGRT_BF16, 0, &d), 1);
  assert_string_equal(d.eager, "1.00781 (0x3f81)");
  /* a tail shorter than an element compares bytewise */
  unsigned char t1[6] = {0, 0, 0x80, 0x3f, 1, 2}, t2[6] = {0, 0, 0x80, 0x3f, 1, 3};
  assert_int_equal(cgrt__verify_compare(t1, t2, 6, CGRT_F32, 4, &d), 1);
  assert_int_equal(d.type, 0);
  assert_int_equal(d.index, 2); /* one element, then tail byte 1 */
}

/* ---------------------------------------------------------------- the keys */

static int parse(const char *text, struct cgrt_config *cfg, struct cgrt_diag *diag) {
  memset(cfg, 0, sizeof(*cfg));
  memset(diag, 0, sizeof(*diag));
  return cgrt__config_parse(cfg, text, "v.ini", diag);
}

static void keys_parse_and_print(void **state) {
  (void)state;
  struct cgrt_config cfg;
  struct cgrt_diag diag;
  assert_int_equal(parse("[cuda_graph]\nverify = Every:100\nverify_tolerance = 4\n"
                         "verify_action = eager\n[runtime]\ndiagnose = on\n",
                         &cfg, &diag),
                   0);
  assert_int_equal(cfg.view.verify, CGRT_VERIFY_EVERY);
  assert_int_equal(cfg.view.verify_every, 100);
  assert_int_equal(cfg.view.verify_tolerance, 4);
  assert_int_equal(cfg.view.verify_action, CGRT_VERIFY_EAGER);
  assert_int_equal(cfg.view.diagnose, CGRT_DIAGNOSE_ON);
  assert_string_equal(cfg.view.get(&cfg.view, "cuda_graph", "verify"), "every:100");
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  assert_int_equal(cgrt__config_print(&cfg, out), 0);
  fclose(out);
  assert_contains(buf, "verify = every:100\nverify_tolerance = 4\nverify_action = eager\n");
  assert_contains(buf, "diagnose = on\n");
  free(buf);
  cgrt__config_free(&cfg);
  cgrt__diag_free(&diag);
  /* defaults */
  assert_int_equal(parse("[cuda_graph]\nimpl = none\n", &cfg, &diag), 0);
  assert_int_equal(cfg.view.verify, CGRT_VERIFY_OFF);
  assert_int_equal(cfg.view.verify_action, CGRT_VERIFY_WARN);
  assert_int_equal(cfg.view.diagnose, CGRT_DIAGNOSE_FAILURES);
  cgrt__config_free(&cfg);
  cgrt__diag_free(&diag);
}

static void bad_values_name_the_line(void **state) {
  (void)state;
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"[cuda_graph]\n\nverify = every:0\n", "v.ini:3: "},
      {"[cuda_graph]\nverify = every:0\n", "N of every:N must be a whole number from 1"},
      {"[cuda_graph]\nverify = sometimes\n", "expected off, first or every:N"},
      {"[cuda_graph]\nverify = every 5\n", "expected off, first or every:N"},
      {"[cuda_graph]\nverify_action = abort\n", "expected one of warn, eager, error"},
      {"[cuda_graph]\nverify_tolerance = -1\n", "verify_tolerance"},
      {"[runtime]\ndiagnose = maybe\n", "expected one of failures, on, off"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct cgrt_config cfg;
    struct cgrt_diag diag;
    assert_int_equal(parse(cases[i].text, &cfg, &diag), CGRT_E_CONFIG);
    const char *first = cgrt__diag_first_error(&diag);
    assert_non_null(first);
    assert_contains(first, cases[i].want);
    cgrt__config_free(&cfg);
    cgrt__diag_free(&diag);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(stale_replay_goes_unnoticed_without_verify),
      cmocka_unit_test(first_replay_mismatch_runs_eagerly_after),
      cmocka_unit_test(warn_keeps_replaying),
      cmocka_unit_test(error_fails_the_step),
      cmocka_unit_test(every_n_counts_checks),
      cmocka_unit_test(every_n_catches_a_later_change),
      cmocka_unit_test(tolerance_applies_to_typed_floats_only),
      cmocka_unit_test(block_scope_body_is_checked),
      cmocka_unit_test(copy_policy_is_checked),
      cmocka_unit_test(out_of_memory_skips_the_check),
      cmocka_unit_test(compare_bitwise_and_ulps),
      cmocka_unit_test(keys_parse_and_print),
      cmocka_unit_test(bad_values_name_the_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
