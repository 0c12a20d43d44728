/*
 * test_local.c - the `local` backend's policy, end to end on the host driver: per-key warm-up,
 * capture and replay for training calls; token buckets, padding and the two inference scopes;
 * eager capture of every bucket; each rebind policy with moved buffers (a stale address is never
 * replayed); the max_graphs bound; a failed capture falling back to eager; a key new on every
 * call (and full_iteration's step shape new on every step) said once, keys that repeat never.
 *
 * The test modules do "device work" as host functions on the stream: out[0] = in[0] * mul + add.
 * Like kernel arguments, the parameters of a launch are kept in blocks that outlive the graphs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "driver.h"
#include "runtime.h"

#define MODS       4
#define MAX_PARAMS 4096
#define MAX_LINES  32

struct params {
  const double *in;
  double *out;
  double mul;
  double add;
};

struct fixture {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  struct params params[MAX_PARAMS]; /* launch parameters, alive as long as the graphs */
  int num_params;
  double in[64], out[64]; /* the default buffers of module i: in[i], out[i] */
  double *in_ptr[MODS];   /* the buffers the body passes (tests move them) */
  double *out_ptr[MODS];
  int64_t prepared_padded[64]; /* ctx->padded_tokens seen by each prepare */
  int prepares;
  int bodies;
  int64_t body_padded;
  int calls_run;       /* module callbacks run (eager, warm-up or capture) */
  uint64_t key;        /* args.key the body passes */
  int release_in_body; /* the body calls cgrt_module_release_key first: its result */
  int release_rc;
  /* the log, when opened with a level (fixture_open_log) */
  char lines[MAX_LINES][1024];
  cgrt_log_level levels[MAX_LINES];
  int num_lines;
};

static void work(void *arg) {
  struct params *p = arg;
  p->out[0] = p->in[0] * p->mul + p->add;
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fixture *f = user;
  assert_true(f->num_params < MAX_PARAMS);
  struct params *p = &f->params[f->num_params++];
  p->in = args->buffers[0].ptr;
  p->out = args->buffers[1].ptr;
  p->mul = 2.0;
  p->add = (double)ctx->padded_tokens;
  f->calls_run++;
  return cgrt_enqueue_host(ctx, work, p);
}

static int module_bwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fixture *f = user;
  struct params *p = &f->params[f->num_params++];
  p->in = args->buffers[1].ptr;
  p->out = args->buffers[0].ptr;
  p->mul = 0.5;
  p->add = 0;
  f->calls_run++;
  return cgrt_enqueue_host(ctx, work, p);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  struct fixture *f = user;
  if (f->prepares < 64)
    f->prepared_padded[f->prepares] = ctx->padded_tokens;
  f->prepares++;
  return 0;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fixture *f = user;
  f->bodies++;
  f->body_padded = ctx->padded_tokens;
  if (f->release_in_body)
    f->release_rc = cgrt_module_release_key(f->rt, f->m[0], f->key, NULL);
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{f->in_ptr[i], sizeof(double), CGRT_IN, "in"},
                        {f->out_ptr[i], sizeof(double), CGRT_INOUT, "out"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = f->key, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(f->rt, f->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  if (ctx->phase == CGRT_PHASE_TRAIN)
    for (int i = MODS; i-- > 0;) {
      cgrt_buffer b[2] = {{f->in_ptr[i], sizeof(double), CGRT_INOUT, "in"},
                          {f->out_ptr[i], sizeof(double), CGRT_IN, "out"}};
      cgrt_args a = {.struct_size = sizeof(a), .key = f->key, .buffers = b, .num_buffers = 2};
      int rc = cgrt_backward(f->rt, f->m[i], ctx, &a);
      if (rc)
        return rc;
    }
  return 0;
}

static void keep_line(void *user, cgrt_log_level level, const char *msg) {
  struct fixture *f = user;
  if (f->num_lines < MAX_LINES) {
    snprintf(f->lines[f->num_lines], sizeof(f->lines[0]), "%s", msg);
    f->levels[f->num_lines] = level;
  }
  f->num_lines++;
}

/* Lines of the log holding `text`; *first: the index of the first, -1 if none. */
static int lines_with(const struct fixture *f, const char *text, int *first) {
  int n = 0;
  *first = -1;
  for (int i = 0; i < f->num_lines && i < MAX_LINES; i++)
    if (strstr(f->lines[i], text)) {
      if (n++ == 0)
        *first = i;
    }
  return n;
}

/* A runtime of backend `impl` on the host driver, its log at `level` kept in the fixture. */
static struct fixture *fixture_open_log(const char *impl, const char *extra, const char *level) {
  struct fixture *f = calloc(1, sizeof(*f));
  char ini[2048];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = %s\nwarmup_steps = 2\n%s\n"
           "[runtime]\ndriver = host\nlog = %s\n",
           impl, extra ? extra : "", level);
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = keep_line, .log_user = f};
  int rc = cgrt_open_ex(&f->rt, &o);
  if (rc != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  f->num_lines = 0; /* what opening said */
  static const cgrt_kind kinds[MODS] = {CGRT_KIND_ATTN, CGRT_KIND_MLP, CGRT_KIND_ATTN,
                                        CGRT_KIND_MOE};
  for (int i = 0; i < MODS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.%s", i, cgrt_kind_name(kinds[i]));
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = kinds[i],
                          .layer = i,
                          .forward = module_fwd,
                          .backward = module_bwd,
                          .user = f};
    assert_int_equal(cgrt_module_register(f->rt, &d, &f->m[i]), 0);
    f->in_ptr[i] = &f->in[i];
    f->out_ptr[i] = &f->out[i];
    f->in[i] = i + 1;
  }
  return f;
}

static struct fixture *fixture_open(const char *extra) {
  return fixture_open_log("local", extra, "off");
}

static void fixture_close(struct fixture *f) {
  assert_int_equal(cgrt_close(f->rt), 0);
  free(f);
}

static int step(struct fixture *f, cgrt_phase phase, int64_t tokens, cgrt_step_report *rep) {
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = phase,
                      .tokens = tokens,
                      .prepare = prepare,
                      .body = body,
                      .user = f};
  int rc = cgrt_step(f->rt, &d, rep);
  if (rc == 0)
    assert_int_equal(cgrt_synchronize(f->rt), 0);
  return rc;
}

static cgrt_stats stats(struct fixture *f) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  return s;
}

/* ---------------------------------------------------------------- training */

static void train_warms_captures_replays_per_key(void **state) {
  (void)state;
  struct fixture *f = fixture_open(NULL);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  cgrt_mode modes[5];
  for (int i = 0; i < 5; i++) {
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, &rep), 0);
    modes[i] = rep.mode;
  }
  assert_int_equal(modes[0], CGRT_MODE_WARMUP);
  assert_int_equal(modes[1], CGRT_MODE_WARMUP);
  assert_int_equal(modes[2], CGRT_MODE_CAPTURE);
  assert_int_equal(modes[3], CGRT_MODE_REPLAY);
  assert_int_equal(modes[4], CGRT_MODE_REPLAY);
  assert_int_equal(rep.calls_replayed, 2 * MODS);
  /* Forward and backward graphs are separate: 2 per module. */
  cgrt_stats s = stats(f);
  assert_int_equal(s.captures, 2 * MODS);
  assert_int_equal(s.live_graphs, 2 * MODS);
  assert_int_equal(s.calls_by_mode[CGRT_MODE_WARMUP], 2 * 2 * MODS);
  assert_int_equal(s.calls_by_mode[CGRT_MODE_REPLAY], 2 * 2 * MODS);
  /* Callbacks ran for warm-up and capture only. */
  assert_int_equal(f->calls_run, 3 * 2 * MODS);
  /* The replays computed: out = in*2 + 0, then in = out*0.5. */
  assert_true(f->out[0] == 2.0 && f->in[0] == 1.0);
  fixture_close(f);
}

static void train_keys_split_by_key_microbatch_phase(void **state) {
  (void)state;
  struct fixture *f = fixture_open(NULL);
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, NULL), 0);
  assert_int_equal(stats(f).captures, 2 * MODS);
  /* Another host key: warms up and captures its own graphs. */
  f->key = 99;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_WARMUP);
  /* Eval is another phase: forward-only graphs of its own. */
  f->key = 0;
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  assert_int_equal(stats(f).captures, 2 * MODS + MODS);
  fixture_close(f);
}

static void modules_option_scopes_kinds(void **state) {
  (void)state;
  struct fixture *f = fixture_open("modules = attn");
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int i = 0; i < 4; i++)
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, &rep), 0);
  /* Two attn modules graphed (fwd+bwd); the mlp and moe ones run eagerly every step. */
  assert_int_equal(rep.calls_replayed, 4);
  assert_int_equal(rep.calls_eager, 4);
  assert_int_equal(stats(f).live_graphs, 4);
  fixture_close(f);
}

/* ---------------------------------------------------------------- inference */

static void infer_layer_pads_to_buckets(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[inference]\nmax_tokens = 64\nnum_graphs = 7\n");
  const int64_t tokens[] = {1, 3, 8, 37, 64};
  const int64_t bucket[] = {1, 4, 8, 64, 64};
  for (int t = 0; t < 5; t++) {
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    for (int i = 0; i < 4; i++)
      assert_int_equal(step(f, CGRT_PHASE_INFER, tokens[t], &rep), 0);
    assert_int_equal(rep.padded_tokens, bucket[t]);
    assert_int_equal(f->prepared_padded[f->prepares - 1], bucket[t]);
    assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
    /* The replay computed with the bucket baked in: out = in*2 + bucket. */
    assert_true(f->out[1] == 2.0 * 2 + (double)bucket[t]);
  }
  cgrt_stats s = stats(f);
  assert_int_equal(s.captures, 4 * MODS); /* buckets 1, 4, 8, 64 */
  assert_int_equal(s.padding_tokens, 4 * ((4 - 3) + (64 - 37)));
  fixture_close(f);
}

static void infer_above_max_runs_eagerly(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[inference]\nmax_tokens = 16\n");
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(step(f, CGRT_PHASE_INFER, 17, &rep), 0);
    assert_int_equal(rep.mode, CGRT_MODE_EAGER);
    assert_int_equal(rep.padded_tokens, 17);
  }
  assert_int_equal(stats(f).captures, 0);
  assert_int_equal(f->bodies, 5);
  fixture_close(f);
}

static void infer_block_replays_whole_body(void **state) {
  (void)state;
  struct fixture *f =
      fixture_open("inference_scope = block\n[inference]\nmax_tokens = 64\nnum_graphs = 7\n");
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int i = 0; i < 6; i++)
    assert_int_equal(step(f, CGRT_PHASE_INFER, 37, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(f->bodies, 3); /* two warm-ups and the capture; replays skip the body */
  assert_int_equal(f->prepares, 6);
  cgrt_stats s = stats(f);
  assert_int_equal(s.captures, 1);
  assert_int_equal(s.steps_by_mode[CGRT_MODE_REPLAY], 3);
  assert_true(f->out[3] == 4.0 * 2 + 64);
  /* Another bucket: its own graph. */
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(f, CGRT_PHASE_INFER, 2, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  assert_int_equal(stats(f).captures, 2);
  fixture_close(f);
}

static void infer_eager_capture_takes_every_bucket_largest_first(void **state) {
  (void)state;
  struct fixture *f = fixture_open("inference_scope = block\n[inference]\nmax_tokens = 8\n"
                                   "num_graphs = 4\ncapture = eager\n");
  for (int i = 0; i < 2; i++)
    assert_int_equal(step(f, CGRT_PHASE_INFER, 3, NULL), 0);
  assert_int_equal(stats(f).captures, 0);
  int before = f->prepares;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, CGRT_PHASE_INFER, 3, &rep), 0);
  assert_int_equal(stats(f).captures, 4); /* 8 4 2 1 */
  assert_int_equal(rep.graphs_built, 4);
  /* Passes ran largest first; the step's own prepare ran last, at its own bucket. */
  assert_int_equal(f->prepared_padded[before], 8);
  assert_int_equal(f->prepared_padded[f->prepares - 1], 4);
  /* Every bucket replays from now on. */
  for (int t = 1; t <= 8; t++) {
    assert_int_equal(step(f, CGRT_PHASE_INFER, t, &rep), 0);
    assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  }
  fixture_close(f);
}

/* ---------------------------------------------------------------- rebind */

/* Warms and captures, then moves module 1's output buffer and runs one more step. */
static struct fixture *moved_output(const char *policy, int *rc) {
  char extra[128];
  snprintf(extra, sizeof(extra), "rebind = %s", policy);
  struct fixture *f = fixture_open(extra);
  for (int i = 0; i < 4; i++)
    assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
  f->out_ptr[1] = &f->out[40];
  f->out[1] = -1;
  *rc = step(f, CGRT_PHASE_EVAL, 0, NULL);
  return f;
}

static void rebind_update_rewires_executable(void **state) {
  (void)state;
  int rc;
  struct fixture *f = moved_output("update", &rc);
  assert_int_equal(rc, 0);
  assert_true(f->out[40] == 2.0 * 2);
  assert_true(f->out[1] == -1); /* the stale address was not written */
  cgrt_stats s = stats(f);
  assert_int_equal(s.rebinds, 1);
  assert_int_equal(s.updates, 1);
  assert_int_equal(s.live_graphs, MODS);
  /* Replays from now on use the new address. */
  f->out[40] = 0;
  assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
  assert_true(f->out[40] == 4.0 && f->out[1] == -1);
  fixture_close(f);
}

static void rebind_copy_works_on_private_buffers(void **state) {
  (void)state;
  int rc;
  struct fixture *f = moved_output("copy", &rc);
  assert_int_equal(rc, 0);
  assert_true(f->out[40] == 4.0);
  assert_true(f->out[1] == -1);
  /* Inputs are copied in on every replay: a new input value is seen. */
  f->in[1] = 10;
  assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
  assert_true(f->out[40] == 20.0);
  assert_int_equal(stats(f).captures, MODS);
  fixture_close(f);
}

static void rebind_recapture_keeps_both_address_sets(void **state) {
  (void)state;
  int rc;
  struct fixture *f = moved_output("recapture", &rc);
  assert_int_equal(rc, 0);
  assert_true(f->out[40] == 4.0 && f->out[1] == -1);
  assert_int_equal(stats(f).live_graphs, MODS + 1);
  /* Back to the first address set: its own executable replays it. */
  f->out_ptr[1] = &f->out[1];
  f->out[40] = 0;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_true(f->out[1] == 4.0 && f->out[40] == 0);
  assert_int_equal(stats(f).captures, MODS + 1);
  fixture_close(f);
}

static void rebind_error_names_module_and_buffer(void **state) {
  (void)state;
  int rc;
  struct fixture *f = moved_output("error", &rc);
  assert_int_equal(rc, CGRT_E_REBIND);
  const char *e = cgrt_last_error(f->rt);
  if (!strstr(e, "layer1.mlp fwd") || !strstr(e, "buffer 'out'") || !strstr(e, "moved"))
    fail_msg("unexpected: %s", e);
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  assert_true(f->out[1] == -1 && f->out[40] == 0);
  fixture_close(f);
}

/* ---------------------------------------------------------------- bound and faults */

static void max_graphs_bounds_live_executables(void **state) {
  (void)state;
  struct fixture *f = fixture_open("max_graphs = 3\n");
  for (uint64_t k = 0; k < 10; k++) {
    f->key = k;
    for (int i = 0; i < 3; i++)
      assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
    assert_true(stats(f).live_graphs <= 3);
  }
  cgrt_stats s = stats(f);
  assert_int_equal(s.captures, 10 * MODS);
  assert_int_equal(s.evictions, 10 * MODS - 3);
  /* An evicted key was warm: it is captured again at once, not warmed again. */
  f->key = 0;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, &rep), 0);
  assert_int_equal(rep.calls_captured, MODS);
  fixture_close(f);
}

static void failed_capture_runs_eagerly_then_recovers(void **state) {
  (void)state;
  struct fixture *f = fixture_open(NULL);
  for (int i = 0; i < 2; i++)
    assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
  f->rt->faults.instantiate = 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, &rep), 0);
  assert_int_equal(rep.fallbacks, 1);
  assert_int_equal(rep.calls_captured, MODS - 1);
  assert_true(f->out[0] == 2.0 && f->out[3] == 8.0); /* all the work was done */
  assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, &rep), 0);
  assert_int_equal(rep.calls_captured, 1);
  assert_int_equal(stats(f).live_graphs, MODS);
  fixture_close(f);
}

/* ---------------------------------------------------------------- keys that never repeat */

static const char key_line[] = "graphed calls each came with a key it had not been called with";

/* A host whose key changes on every call (a step counter in it): no key reaches its warm-up and
   nothing is ever captured. Said once per module and direction at the 64th such call, the first
   at warn and the rest at info, never before. */
static void a_key_new_on_every_call_is_said_once(void **state) {
  (void)state;
  struct fixture *f = fixture_open_log("local", NULL, "info");
  int first;
  for (int i = 0; i < 63; i++) {
    f->key = 1000 + (uint64_t)i;
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, NULL), 0);
  }
  assert_int_equal(lines_with(f, key_line, &first), 0);
  for (int i = 0; i < 40; i++) {
    f->key = 5000 + (uint64_t)i;
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, NULL), 0);
  }
  assert_int_equal(lines_with(f, key_line, &first), 2 * MODS); /* forward and backward */
  assert_int_equal(stats(f).unrepeated_units, 2 * MODS);
  assert_int_equal(f->levels[first], CGRT_LOG_WARN);
  assert_non_null(strstr(f->lines[first], "layer0.attn fwd: its last 64 graphed calls"));
  assert_non_null(strstr(f->lines[first], "none was captured"));
  for (int i = first + 1; i < first + 2 * MODS; i++)
    assert_int_equal(f->levels[i], CGRT_LOG_INFO);
  assert_int_equal(stats(f).captures, 0);
  fixture_close(f);
}

/* Keys that come back (a few shapes in turn, a bucket sweep met for the first time): never said,
   however many calls. */
static void keys_that_repeat_are_never_said(void **state) {
  (void)state;
  struct fixture *f = fixture_open_log("local", NULL, "info");
  int first;
  for (int i = 0; i < 200; i++) {
    f->key = (uint64_t)(i % 16);
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, NULL), 0);
  }
  assert_int_equal(stats(f).captures, 16 * 2 * MODS);
  for (int pass = 0; pass < 2; pass++)
    for (int64_t t = 1; t <= 512; t++)
      assert_int_equal(step(f, CGRT_PHASE_INFER, t, NULL), 0);
  assert_int_equal(lines_with(f, "had not", &first), 0);
  assert_int_equal(stats(f).unrepeated_units, 0);
  fixture_close(f);
}

/* full_iteration keys its step graph by the step's shape: a training host whose token count
   changes on every step (unpadded) is told once, at the 64th such step. */
static void step_shapes_new_on_every_step_are_said_once(void **state) {
  (void)state;
  struct fixture *f = fixture_open_log("full_iteration", "[host]\nnan_check = off", "info");
  int first;
  for (int64_t i = 0; i < 63; i++)
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 100 + i, NULL), 0);
  assert_int_equal(lines_with(f, "had not run at before", &first), 0);
  for (int64_t i = 0; i < 10; i++)
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 1000 + i, NULL), 0);
  assert_int_equal(lines_with(f, "had not run at before", &first), 1);
  assert_int_equal(stats(f).unrepeated_units, 1);
  assert_int_equal(f->levels[first], CGRT_LOG_WARN);
  assert_non_null(strstr(f->lines[first], "the train steps: the last 64 each came with a shape"));
  assert_int_equal(stats(f).captures, 0);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int i = 0; i < 4; i++) /* one shape again: warmed up, captured, replayed */
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 7, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  fixture_close(f);
}

static void release_drops_graphs(void **state) {
  (void)state;
  struct fixture *f = fixture_open(NULL);
  for (int i = 0; i < 4; i++)
    assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
  assert_int_equal(cgrt_release_graphs(f->rt), 0);
  assert_int_equal(stats(f).live_graphs, 0);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_WARMUP);
  fixture_close(f);
}

/* One module's graphs of one key go (every direction and phase of it); its next calls with that
   key warm up and capture again; the other modules, and the module's other keys, replay. */
static void release_key_frees_one_keys_graphs(void **state) {
  (void)state;
  struct fixture *f = fixture_open(NULL);
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, NULL), 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
  f->key = 2;
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, NULL), 0);
  assert_int_equal(stats(f).live_graphs, 5 * MODS);
  size_t n = 99;
  assert_int_equal(cgrt_module_release_key(f->rt, f->m[0], 0, &n), 0);
  assert_int_equal(n, 3); /* train forward and backward, eval forward */
  assert_int_equal(stats(f).live_graphs, 5 * MODS - 3);
  assert_int_equal(cgrt_module_release_key(f->rt, f->m[0], 0, &n), 0);
  assert_int_equal(n, 0); /* nothing left of it */
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, &rep), 0); /* key 2: untouched */
  assert_int_equal(rep.calls_replayed, 2 * MODS);
  f->key = 0;
  int run = f->calls_run;
  assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, &rep), 0);
  assert_int_equal(rep.calls_replayed, 2 * (MODS - 1));
  assert_int_equal(f->calls_run - run, 2); /* module 0 warms up again, forward and backward */
  assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, NULL), 0);
  assert_int_equal(step(f, CGRT_PHASE_TRAIN, 0, &rep), 0);
  assert_int_equal(rep.calls_captured, 2);
  assert_int_equal(stats(f).live_graphs, 5 * MODS - 1); /* its eval graph is not back yet */
  assert_true(f->out[0] == 2.0 && f->in[0] == 1.0);     /* and the work is right */
  fixture_close(f);
}

/* Misuse gets a sentence and frees nothing: no module, another runtime's, inside a step. */
static void release_key_refuses_misuse(void **state) {
  (void)state;
  struct fixture *f = fixture_open(NULL);
  struct fixture *g = fixture_open(NULL);
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
  size_t n = 99;
  assert_int_equal(cgrt_module_release_key(f->rt, NULL, 0, &n), CGRT_E_INVAL);
  assert_int_equal(n, 0);
  assert_non_null(strstr(cgrt_last_error(f->rt), "belongs to another runtime"));
  assert_int_equal(cgrt_module_release_key(f->rt, g->m[0], 0, &n), CGRT_E_INVAL);
  assert_int_equal(cgrt_module_release_key(NULL, f->m[0], 0, &n), CGRT_E_INVAL);
  f->release_in_body = 1;
  assert_int_equal(step(f, CGRT_PHASE_EVAL, 0, NULL), 0);
  assert_int_equal(f->release_rc, CGRT_E_STATE);
  assert_non_null(strstr(cgrt_last_error(f->rt), "not allowed inside a step"));
  assert_int_equal(stats(f).live_graphs, MODS);
  fixture_close(g);
  fixture_close(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(train_warms_captures_replays_per_key),
      cmocka_unit_test(train_keys_split_by_key_microbatch_phase),
      cmocka_unit_test(modules_option_scopes_kinds),
      cmocka_unit_test(infer_layer_pads_to_buckets),
      cmocka_unit_test(infer_above_max_runs_eagerly),
      cmocka_unit_test(infer_block_replays_whole_body),
      cmocka_unit_test(infer_eager_capture_takes_every_bucket_largest_first),
      cmocka_unit_test(rebind_update_rewires_executable),
      cmocka_unit_test(rebind_copy_works_on_private_buffers),
      cmocka_unit_test(rebind_recapture_keeps_both_address_sets),
      cmocka_unit_test(rebind_error_names_module_and_buffer),
      cmocka_unit_test(max_graphs_bounds_live_executables),
      cmocka_unit_test(failed_capture_runs_eagerly_then_recovers),
      cmocka_unit_test(release_drops_graphs),
      cmocka_unit_test(release_key_frees_one_keys_graphs),
      cmocka_unit_test(release_key_refuses_misuse),
      cmocka_unit_test(a_key_new_on_every_call_is_said_once),
      cmocka_unit_test(keys_that_repeat_are_never_said),
      cmocka_unit_test(step_shapes_new_on_every_step_are_said_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
