/*
 * test_runtime.c - the host API end to end on the host driver: open and close, module
 * registration, steps and module calls through the `none` backend, errors and their messages,
 * misuse refused, statistics, and the capture helper (capture, replay, fallback, release) through
 * the `sectioned` fixture backend, which graphs the whole body once warm.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "driver.h"
#include "runtime.h"

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: %s", needle, haystack);
}

/* A tiny "model": modules that append their id to a trace when the device runs their work. */
struct model {
  cgrt_runtime *rt;
  cgrt_module *m[4];
  int order[256]; /* ids of the work items in the order the device ran them */
  int ran;
  int prepared;
  int body_runs;
  int fail_module; /* module index whose forward returns 5, or -1 */
  int body_rc;     /* what the body returns if no call failed */
  int pass_errors; /* the body returns a failed call's code */
  struct item {
    struct model *md;
    int id;
  } items[4], bwd_item; /* bwd_item: the backward of module 0, id 100 */
};

static void run_item(void *arg) {
  struct item *it = arg;
  if (it->md->ran < 256)
    it->md->order[it->md->ran] = it->id;
  it->md->ran++;
}

static int fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct item *it = user;
  (void)args;
  if (it->md->fail_module == it->id)
    return 5;
  return cgrt_enqueue_host(ctx, run_item, it);
}

static int bwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct item *it = user;
  (void)args;
  return cgrt_enqueue_host(ctx, run_item, &it->md->bwd_item);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  struct model *md = user;
  (void)ctx;
  md->prepared++;
  return 0;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct model *md = user;
  md->body_runs++;
  cgrt_args a = {.struct_size = sizeof(a), .key = 7};
  for (int i = 0; i < 3; i++) {
    int rc = cgrt_forward(md->rt, md->m[i], ctx, &a);
    if (rc)
      return md->pass_errors ? rc : -1;
  }
  if (ctx->phase == CGRT_PHASE_TRAIN) {
    int rc = cgrt_backward(md->rt, md->m[0], ctx, &a);
    if (rc)
      return rc;
  }
  return md->body_rc;
}

static struct model *md_new(const char *impl) {
  struct model *md = calloc(1, sizeof(*md));
  char ini[4096];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = %s\nbackend_path = %s\nwarmup_steps = 2\n"
           "[runtime]\ndriver = host\nlog = off\n",
           impl, getenv("CGRT_TEST_FIXTURES") ? getenv("CGRT_TEST_FIXTURES") : ".");
  assert_int_equal(cgrt_open_string(&md->rt, ini), 0);
  md->fail_module = -1;
  md->pass_errors = 1;
  md->bwd_item = (struct item){md, 100};
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.%s", i, i % 2 ? "mlp" : "attn");
    md->items[i] = (struct item){md, i};
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = i % 2 ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .layer = i,
                          .forward = fwd,
                          .backward = i == 0 ? bwd : NULL,
                          .user = &md->items[i]};
    assert_int_equal(cgrt_module_register(md->rt, &d, &md->m[i]), 0);
  }
  return md;
}

static void md_free(struct model *md) {
  assert_int_equal(cgrt_close(md->rt), 0);
  free(md);
}

static int step(struct model *md, cgrt_phase phase, cgrt_step_report *rep) {
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = phase,
                      .tokens = 4,
                      .prepare = prepare,
                      .body = body,
                      .user = md};
  return cgrt_step(md->rt, &d, rep);
}

static int setup_none(void **state) {
  *state = md_new("none");
  return 0;
}

static int setup_sectioned(void **state) {
  *state = md_new("sectioned");
  return 0;
}

static int teardown(void **state) {
  md_free(*state);
  return 0;
}

/* ---------------------------------------------------------------- the none backend */

static void none_runs_eagerly_in_order(void **state) {
  struct model *md = *state;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(md, CGRT_PHASE_TRAIN, &rep), 0);
  assert_int_equal(md->prepared, 1);
  assert_int_equal(md->body_runs, 1);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(rep.calls_eager, 4);
  assert_int_equal(rep.calls_captured + rep.calls_replayed + rep.graphs_built, 0);
  /* Device work is asynchronous: nothing ran before the stream is synchronized. */
  assert_int_equal(md->ran, 0);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  assert_int_equal(md->ran, 4);
  int expect[] = {0, 1, 2, 100};
  assert_memory_equal(md->order, expect, sizeof(expect));
}

static void none_many_steps_counted(void **state) {
  struct model *md = *state;
  for (int i = 0; i < 50; i++)
    assert_int_equal(step(md, i % 2 ? CGRT_PHASE_INFER : CGRT_PHASE_TRAIN, NULL), 0);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  assert_int_equal(md->ran, 25 * 4 + 25 * 3);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.steps, 50);
  assert_int_equal(s.steps_by_mode[CGRT_MODE_EAGER], 50);
  assert_int_equal(s.calls_by_mode[CGRT_MODE_EAGER], 175);
  assert_int_equal(s.captures + s.instantiations + s.live_graphs, 0);
}

static void module_error_names_the_module(void **state) {
  struct model *md = *state;
  md->fail_module = 1;
  assert_int_equal(step(md, CGRT_PHASE_TRAIN, NULL), CGRT_E_CALLBACK);
  const char *e = cgrt_last_error(md->rt);
  assert_contains(e, "module 'layer1.mlp' forward returned 5");
  assert_contains(e, "step 0");
  /* The runtime keeps working after a failed step. */
  md->fail_module = -1;
  assert_int_equal(step(md, CGRT_PHASE_TRAIN, NULL), 0);
}

static void body_error_is_reported(void **state) {
  struct model *md = *state;
  md->body_rc = 7;
  assert_int_equal(step(md, CGRT_PHASE_EVAL, NULL), CGRT_E_CALLBACK);
  assert_contains(cgrt_last_error(md->rt), "body callback of step 0");
  assert_contains(cgrt_last_error(md->rt), "returned 7");
}

static int failing_prepare(const cgrt_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return 3;
}

static void prepare_error_skips_body(void **state) {
  struct model *md = *state;
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_TRAIN,
                      .prepare = failing_prepare,
                      .body = body,
                      .user = md};
  assert_int_equal(cgrt_step(md->rt, &d, NULL), CGRT_E_CALLBACK);
  assert_contains(cgrt_last_error(md->rt), "prepare callback of step 0 returned 3");
  assert_int_equal(md->body_runs, 0);
}

static void register_refuses_bad_modules(void **state) {
  struct model *md = *state;
  cgrt_module *m = NULL;
  cgrt_module_desc d = {.struct_size = sizeof(d), .name = "layer0.attn", .forward = fwd};
  assert_int_equal(cgrt_module_register(md->rt, &d, &m), CGRT_E_INVAL);
  assert_contains(cgrt_last_error(md->rt), "'layer0.attn' is already registered");
  d.name = "x";
  d.forward = NULL;
  assert_int_equal(cgrt_module_register(md->rt, &d, &m), CGRT_E_INVAL);
  assert_contains(cgrt_last_error(md->rt), "forward callback is NULL");
  d.forward = fwd;
  d.kind = (cgrt_kind)42;
  assert_int_equal(cgrt_module_register(md->rt, &d, &m), CGRT_E_INVAL);
  d.kind = CGRT_KIND_OTHER;
  d.name = "";
  assert_int_equal(cgrt_module_register(md->rt, &d, &m), CGRT_E_INVAL);
  d.struct_size = 0;
  d.name = "y";
  assert_int_equal(cgrt_module_register(md->rt, &d, &m), CGRT_E_INVAL);
}

static void step_refuses_bad_desc(void **state) {
  struct model *md = *state;
  cgrt_step_desc d = {.struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .user = md};
  assert_int_equal(cgrt_step(md->rt, &d, NULL), CGRT_E_INVAL);
  assert_contains(cgrt_last_error(md->rt), "body is NULL");
  d.body = body;
  d.tokens = -1;
  assert_int_equal(cgrt_step(md->rt, &d, NULL), CGRT_E_INVAL);
  d.tokens = 0;
  d.num_sequences = 2;
  assert_int_equal(cgrt_step(md->rt, &d, NULL), CGRT_E_INVAL);
  assert_contains(cgrt_last_error(md->rt), "seqlens is NULL");
  d.num_sequences = 0;
  d.phase = (cgrt_phase)9;
  assert_int_equal(cgrt_step(md->rt, &d, NULL), CGRT_E_INVAL);
  assert_int_equal(cgrt_step(md->rt, NULL, NULL), CGRT_E_INVAL);
}

static void call_outside_body_refused(void **state) {
  struct model *md = *state;
  cgrt_ctx fake = {.struct_size = sizeof(fake), .rt = md->rt};
  cgrt_args a = {.struct_size = sizeof(a)};
  assert_int_equal(cgrt_forward(md->rt, md->m[0], &fake, &a), CGRT_E_STATE);
  assert_contains(cgrt_last_error(md->rt), "module calls are made from the step body");
}

struct misuse {
  struct model *md;
  int nested_step_rc;
  int nested_call_rc;
  int backward_rc;
  int register_rc;
  int sync_rc;
  int close_rc;
  int null_args_rc;
  char close_msg[512];
};

static int nested_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct misuse *mu = user;
  mu->nested_call_rc = cgrt_forward(mu->md->rt, mu->md->m[1], ctx, args);
  return 0;
}

static int misuse_body(const cgrt_ctx *ctx, void *user) {
  struct misuse *mu = user;
  cgrt_step_desc d = {.struct_size = sizeof(d), .body = misuse_body, .user = mu};
  mu->nested_step_rc = cgrt_step(mu->md->rt, &d, NULL);
  cgrt_args a = {.struct_size = sizeof(a)};
  mu->backward_rc = cgrt_backward(mu->md->rt, mu->md->m[1], ctx, &a);
  mu->null_args_rc = cgrt_forward(mu->md->rt, mu->md->m[1], ctx, NULL);
  cgrt_module_desc md = {.struct_size = sizeof(md), .name = "late", .forward = fwd};
  cgrt_module *m = NULL;
  mu->register_rc = cgrt_module_register(mu->md->rt, &md, &m);
  mu->sync_rc = cgrt_synchronize(mu->md->rt);
  mu->close_rc = cgrt_close(mu->md->rt);
  snprintf(mu->close_msg, sizeof(mu->close_msg), "%s", cgrt_last_error(mu->md->rt));
  return 0;
}

static void misuse_inside_a_step_refused(void **state) {
  struct model *md = *state;
  struct misuse mu = {.md = md};
  cgrt_step_desc d = {
      .struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .body = misuse_body, .user = &mu};
  assert_int_equal(cgrt_step(md->rt, &d, NULL), 0);
  assert_int_equal(mu.nested_step_rc, CGRT_E_STATE);
  assert_int_equal(mu.backward_rc, CGRT_E_STATE);
  assert_int_equal(mu.null_args_rc, CGRT_E_INVAL);
  assert_int_equal(mu.register_rc, CGRT_E_STATE);
  assert_int_equal(mu.sync_rc, CGRT_E_STATE);
  assert_int_equal(mu.close_rc, CGRT_E_STATE); /* refused and not freed: teardown closes it */
  assert_contains(mu.close_msg, "cgrt_close called from inside a step");
  assert_contains(mu.close_msg, "nothing was freed");
  assert_int_equal(step(md, CGRT_PHASE_TRAIN, NULL), 0);
}

/* cgrt_close refuses, freeing nothing, while the runtime's stream is capturing (on the cuda
   driver, a capture the host began on the stream it handed over; begun here through the driver),
   and closes once the capture has ended. */
static void close_refused_while_the_stream_captures(void **state) {
  struct model *md = *state;
  cgrt_runtime *rt = md->rt;
  assert_int_equal(rt->dev.drv->capture_begin(&rt->dev, rt->stream), 0);
  assert_int_equal(cgrt_close(rt), CGRT_E_STATE);
  assert_contains(cgrt_last_error(rt), "the runtime's stream is capturing");
  assert_contains(cgrt_last_error(rt), "nothing was freed");
  void *graph = NULL;
  assert_int_equal(rt->dev.drv->capture_end(&rt->dev, rt->stream, &graph), 0);
  rt->dev.drv->graph_destroy(&rt->dev, graph);
  assert_int_equal(step(md, CGRT_PHASE_TRAIN, NULL), 0); /* still usable; teardown closes it */
}

static int nested_body(const cgrt_ctx *ctx, void *user) {
  struct misuse *mu = user;
  cgrt_args a = {.struct_size = sizeof(a)};
  return cgrt_forward(mu->md->rt, mu->md->m[3], ctx, &a);
}

static void module_calls_do_not_nest(void **state) {
  struct model *md = *state;
  struct misuse mu = {.md = md};
  cgrt_module_desc d = {
      .struct_size = sizeof(d), .name = "outer", .forward = nested_module, .user = &mu};
  assert_int_equal(cgrt_module_register(md->rt, &d, &md->m[3]), 0);
  cgrt_step_desc sd = {
      .struct_size = sizeof(sd), .phase = CGRT_PHASE_TRAIN, .body = nested_body, .user = &mu};
  assert_int_equal(cgrt_step(md->rt, &sd, NULL), 0);
  assert_int_equal(mu.nested_call_rc, CGRT_E_STATE);
}

/* ---------------------------------------------------------------- the capture helper */

static void sectioned_warms_captures_replays(void **state) {
  struct model *md = *state;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  cgrt_mode modes[6];
  for (int i = 0; i < 6; i++) {
    assert_int_equal(step(md, CGRT_PHASE_INFER, &rep), 0);
    modes[i] = rep.mode;
    if (i == 2) {
      assert_int_equal(rep.graphs_built, 1);
      assert_int_equal(rep.calls_captured, 3);
    }
  }
  assert_int_equal(modes[0], CGRT_MODE_WARMUP);
  assert_int_equal(modes[1], CGRT_MODE_WARMUP);
  assert_int_equal(modes[2], CGRT_MODE_CAPTURE);
  assert_int_equal(modes[3], CGRT_MODE_REPLAY);
  assert_int_equal(modes[5], CGRT_MODE_REPLAY);
  /* The body ran for warm-up and capture only; replays ran the recorded work. */
  assert_int_equal(md->body_runs, 3);
  assert_int_equal(md->prepared, 6);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  assert_int_equal(md->ran, 6 * 3);
  for (int i = 0; i < md->ran; i++)
    assert_int_equal(md->order[i], i % 3);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.captures, 1);
  assert_int_equal(s.instantiations, 1);
  assert_int_equal(s.live_graphs, 1);
  assert_int_equal(s.steps_by_mode[CGRT_MODE_REPLAY], 3);
  assert_int_equal(s.fallbacks, 0);
}

static void release_frees_graphs_and_recaptures(void **state) {
  struct model *md = *state;
  for (int i = 0; i < 4; i++)
    assert_int_equal(step(md, CGRT_PHASE_INFER, NULL), 0);
  assert_int_equal(cgrt_release_graphs(md->rt), 0);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.live_graphs, 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(step(md, CGRT_PHASE_INFER, NULL), 0);
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.captures, 2);
  assert_int_equal(s.live_graphs, 1);
}

static void capture_failure_falls_back_to_eager(void **state) {
  struct model *md = *state;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int i = 0; i < 2; i++)
    assert_int_equal(step(md, CGRT_PHASE_INFER, NULL), 0);
  md->rt->faults.instantiate = 1;
  assert_int_equal(step(md, CGRT_PHASE_INFER, &rep), 0);
  assert_int_equal(rep.fallbacks, 1);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  int active = 1;
  assert_int_equal(md->rt->dev.drv->capture_status(&md->rt->dev, md->rt->stream, &active), 0);
  assert_false(active);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  assert_int_equal(md->ran, 9); /* the failed capture's step still did its work, eagerly */
  /* The next step captures successfully. */
  assert_int_equal(step(md, CGRT_PHASE_INFER, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.live_graphs, 1);
}

static void error_inside_capture_leaves_stream_usable(void **state) {
  struct model *md = *state;
  for (int i = 0; i < 2; i++)
    assert_int_equal(step(md, CGRT_PHASE_INFER, NULL), 0);
  md->fail_module = 2;
  assert_int_equal(step(md, CGRT_PHASE_INFER, NULL), CGRT_E_CALLBACK);
  assert_contains(cgrt_last_error(md->rt), "module 'layer2.attn' forward returned 5");
  int active = 1;
  assert_int_equal(md->rt->dev.drv->capture_status(&md->rt->dev, md->rt->stream, &active), 0);
  assert_false(active);
  md->fail_module = -1;
  assert_int_equal(step(md, CGRT_PHASE_INFER, NULL), 0);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
}

struct warn_capture {
  int stray;
};

static void warn_sink(void *user, cgrt_log_level level, const char *msg) {
  struct warn_capture *w = user;
  if (level == CGRT_LOG_WARN && strstr(msg, "still capturing"))
    w->stray++;
}

/* A backend that returns with the stream capturing: the capture is ended and the step fails with
   CGRT_E_CAPTURE; when the step failed anyway (the fixture's inference steps), the host is told
   the backend's own error and the stray capture goes to the log at warn. */
static void stray_capture_is_closed(void **state) {
  (void)state;
  char ini[4096];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = stray_capture\nbackend_path = %s\n[runtime]\ndriver = host\n"
           "log = warn\n",
           getenv("CGRT_TEST_FIXTURES") ? getenv("CGRT_TEST_FIXTURES") : ".");
  struct warn_capture w = {0};
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = warn_sink, .log_user = &w};
  cgrt_runtime *rt = NULL;
  unsetenv("CGRT_LOG");
  assert_int_equal(cgrt_open_ex(&rt, &o), 0);
  cgrt_step_desc d = {.struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .body = body};
  assert_int_equal(cgrt_step(rt, &d, NULL), CGRT_E_CAPTURE);
  assert_contains(cgrt_last_error(rt), "still capturing");
  assert_int_equal(w.stray, 0);
  int active = 1;
  assert_int_equal(rt->dev.drv->capture_status(&rt->dev, rt->stream, &active), 0);
  assert_false(active);
  d.phase = CGRT_PHASE_INFER;
  assert_int_equal(cgrt_step(rt, &d, NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(rt), "stray_capture: the inference step failed");
  assert_int_equal(w.stray, 1);
  assert_int_equal(rt->dev.drv->capture_status(&rt->dev, rt->stream, &active), 0);
  assert_false(active);
  assert_int_equal(cgrt_synchronize(rt), 0);
  cgrt_close(rt);
}

/* ---------------------------------------------------------------- open, log, names */

struct log_capture {
  int lines;
  int saw_open;
};

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  struct log_capture *lc = user;
  lc->lines++;
  if (level == CGRT_LOG_INFO && strstr(msg, "backend none"))
    lc->saw_open = 1;
}

static void log_sink_gets_messages_from_the_start(void **state) {
  (void)state;
  struct log_capture lc = {0};
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = info\n",
                         .log = log_sink,
                         .log_user = &lc};
  cgrt_runtime *rt = NULL;
  unsetenv("CGRT_LOG");
  assert_int_equal(cgrt_open_ex(&rt, &o), 0);
  assert_true(lc.saw_open);
  cgrt_close(rt);
}

static void failed_open_explains_itself(void **state) {
  (void)state;
  cgrt_runtime *rt = (cgrt_runtime *)1;
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = "[cuda_graph]\nimpl = none\nwarmup_step = 3\n[runtime]\n"
                                "driver = host\nlog = off\n",
                         .ini_name = "my.ini"};
  assert_int_equal(cgrt_open_ex(&rt, &o), CGRT_E_CONFIG);
  assert_null(rt);
  assert_contains(cgrt_last_error(NULL), "my.ini:3");
  assert_contains(cgrt_last_error(NULL), "warmup_step");
  assert_int_equal(cgrt_open(&rt, "/nonexistent/cgrt.ini"), CGRT_E_IO);
  assert_contains(cgrt_last_error(NULL), "/nonexistent/cgrt.ini");
}

/* A host-owned stream is a CUDA stream: the host driver refuses one, saying so, and old callers
   (a struct_size without the field) still open. */
static void host_stream_refused_on_the_host_driver(void **state) {
  (void)state;
  int fake = 0;
  cgrt_runtime *rt = (cgrt_runtime *)1;
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = off\n",
                         .stream = &fake};
  assert_int_equal(cgrt_open_ex(&rt, &o), CGRT_E_INVAL);
  assert_null(rt);
  assert_contains(cgrt_last_error(NULL), "cgrt_open_options.stream");
  assert_contains(cgrt_last_error(NULL), "driver = host");
  o.struct_size = offsetof(cgrt_open_options, stream); /* built before the field existed */
  assert_int_equal(cgrt_open_ex(&rt, &o), 0);
  assert_ptr_not_equal(cgrt_stream(rt), &fake);
  cgrt_close(rt);
}

/* [runtime] sync_guard on the host driver, which has no raw synchronizes: `on` refuses the open
   with the cause and the fix; off (the default) opens and its counts stay 0; a backend that never
   builds graphs needs no guard, so `on` opens under none. */
static void sync_guard_on_the_host_driver(void **state) {
  (void)state;
  cgrt_runtime *rt = (cgrt_runtime *)1;
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = "[cuda_graph]\nimpl = local\n[runtime]\ndriver = host\nlog = off\n"
                                "sync_guard = on\n"};
  assert_int_equal(cgrt_open_ex(&rt, &o), CGRT_E_UNSUPPORTED);
  assert_null(rt);
  assert_contains(cgrt_last_error(NULL), "sync_guard = on: the host driver has no raw");
  assert_contains(cgrt_last_error(NULL), "set sync_guard = off");
  o.ini = "[cuda_graph]\nimpl = local\n[runtime]\ndriver = host\nlog = off\n";
  assert_int_equal(cgrt_open_ex(&rt, &o), 0);
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(rt, &st), 0);
  assert_int_equal(st.sync_guard_waits, 0);
  assert_int_equal(st.sync_guard_late, 0);
  cgrt_close(rt);
  o.ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = off\nsync_guard = on\n";
  assert_int_equal(cgrt_open_ex(&rt, &o), 0);
  cgrt_close(rt);
}

static void default_config_is_none_on_cuda(void **state) {
  (void)state;
  unsetenv("CGRT_CONFIG");
  cgrt_runtime *rt = NULL;
  int rc = cgrt_open(&rt, NULL);
  if (rc == 0) {
    /* A machine with a GPU. */
    assert_string_equal(cgrt_backend_name(rt), "none");
    cgrt_close(rt);
  } else {
    assert_int_equal(rc, CGRT_E_NODEV);
    assert_contains(cgrt_last_error(NULL), "no CUDA device: ");
  }
}

static void cgrt_config_env_names_the_default(void **state) {
  (void)state;
  char path[] = "/tmp/cgrt-test-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char *ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = off\n";
  assert_int_equal(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
  close(fd);
  setenv("CGRT_CONFIG", path, 1);
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open(&rt, NULL), 0);
  assert_string_equal(cgrt_backend_name(rt), "none");
  cgrt_close(rt);
  unsetenv("CGRT_CONFIG");
  unlink(path);
}

static void config_values_in_force_are_readable(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open_string(&rt, "[cuda_graph]\nimpl = local\nmodules = mlp attn\n"
                                         "[runtime]\ndriver = host\nlog = off\n"),
                   0);
  char v[64];
  assert_int_equal(cgrt_config_get(rt, "cuda_graph", "rebind", v, sizeof(v)), 0);
  assert_string_equal(v, "auto"); /* the default */
  assert_int_equal(cgrt_config_get(rt, "cuda_graph", "modules", v, sizeof(v)), 0);
  assert_string_equal(v, "attn mlp");
  assert_int_equal(cgrt_config_get(rt, "inference", "max_tokens", v, sizeof(v)), 0);
  assert_string_equal(v, "512");
  assert_int_equal(cgrt_config_get(rt, "cuda_graph", "rebnd", v, sizeof(v)), CGRT_E_NOTFOUND);
  assert_contains(cgrt_last_error(rt), "[cuda_graph] rebnd");
  char small[3];
  assert_int_equal(cgrt_config_get(rt, "cuda_graph", "impl", small, sizeof(small)), CGRT_E_INVAL);
  assert_string_equal(small, "lo");
  cgrt_close(rt);
}

static void strerror_covers_every_code(void **state) {
  (void)state;
  for (int c = 0; c >= CGRT_E_VERIFY; c--) {
    assert_string_not_equal(cgrt_strerror(c), "unknown error");
    for (int d = c - 1; d >= CGRT_E_VERIFY; d--)
      assert_string_not_equal(cgrt_strerror(c), cgrt_strerror(d));
  }
  assert_string_equal(cgrt_strerror(-999), "unknown error");
  assert_string_equal(cgrt_kind_name(CGRT_KIND_MOE_PREPROCESS), "moe_preprocess");
  assert_string_equal(cgrt_mode_name(CGRT_MODE_REPLAY), "replay");
  assert_string_equal(cgrt_phase_name(CGRT_PHASE_INFER), "infer");
  assert_string_equal(cgrt_version(), CGRT_VERSION_STRING);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(host_stream_refused_on_the_host_driver),
      cmocka_unit_test(sync_guard_on_the_host_driver),
      cmocka_unit_test_setup_teardown(none_runs_eagerly_in_order, setup_none, teardown),
      cmocka_unit_test_setup_teardown(none_many_steps_counted, setup_none, teardown),
      cmocka_unit_test_setup_teardown(module_error_names_the_module, setup_none, teardown),
      cmocka_unit_test_setup_teardown(body_error_is_reported, setup_none, teardown),
      cmocka_unit_test_setup_teardown(prepare_error_skips_body, setup_none, teardown),
      cmocka_unit_test_setup_teardown(register_refuses_bad_modules, setup_none, teardown),
      cmocka_unit_test_setup_teardown(step_refuses_bad_desc, setup_none, teardown),
      cmocka_unit_test_setup_teardown(call_outside_body_refused, setup_none, teardown),
      cmocka_unit_test_setup_teardown(misuse_inside_a_step_refused, setup_none, teardown),
      cmocka_unit_test_setup_teardown(module_calls_do_not_nest, setup_none, teardown),
      cmocka_unit_test_setup_teardown(close_refused_while_the_stream_captures, setup_none,
                                      teardown),
      cmocka_unit_test_setup_teardown(sectioned_warms_captures_replays, setup_sectioned, teardown),
      cmocka_unit_test_setup_teardown(release_frees_graphs_and_recaptures, setup_sectioned,
                                      teardown),
      cmocka_unit_test_setup_teardown(capture_failure_falls_back_to_eager, setup_sectioned,
                                      teardown),
      cmocka_unit_test_setup_teardown(error_inside_capture_leaves_stream_usable, setup_sectioned,
                                      teardown),
      cmocka_unit_test(stray_capture_is_closed),
      cmocka_unit_test(log_sink_gets_messages_from_the_start),
      cmocka_unit_test(failed_open_explains_itself),
      cmocka_unit_test(default_config_is_none_on_cuda),
      cmocka_unit_test(cgrt_config_env_names_the_default),
      cmocka_unit_test(config_values_in_force_are_readable),
      cmocka_unit_test(strerror_covers_every_code),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
