/*
 * test_misuse.c - misuse gets a sentence, never memory corruption (issue 38), on the host driver.
 *
 * - A second thread calling a runtime that one thread drives gets CGRT_E_STATE with a sentence
 *   (on its own thread's cgrt_last_error) and the first thread is unaffected; two threads racing
 *   steps on one runtime never corrupt it (run under TSan too: test_misuse_tsan); two runtimes,
 *   one per thread, open, step and close under every backend at once, each right.
 * - A cgrt_graph_list visitor may not change the graphs it is shown: release, step and close are
 *   refused, and the walk finishes.
 * - cgrt_close refuses up front, freeing nothing, from every callback (host functions run by
 *   cgrt_synchronize, cgrt_release_graphs or cgrt_close itself included), and returns 0 once it
 *   has freed the runtime.
 * - Every public call from every callback cgrt runs (prepare, body, module, capture hooks, graph
 *   watcher, log sink in and out of a step, graph-list visitor, host functions): either it works
 *   or it is refused with a sentence; the table is printed with CGRT_TEST_MATRIX=1
 *   (docs/decisions.md, "Issue 38: misuse of the core").
 * - CGRT_E_NOTFOUND's text fits each of its uses (a backend, a configuration key).
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "cgrt/tool.h"

#define MODS 3

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: %s", needle, haystack);
}

static const char *fixtures(void) {
  return getenv("CGRT_TEST_FIXTURES") ? getenv("CGRT_TEST_FIXTURES") : ".";
}

/* ---------------------------------------------------------------- a small model */

struct model {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  int ran; /* host work items run by the stream */
  /* What the callbacks do besides their work (each test sets what it needs). */
  void (*in_body)(struct model *md, const cgrt_ctx *ctx);
  void (*in_module)(struct model *md, const cgrt_ctx *ctx);
  void (*in_prepare)(struct model *md, const cgrt_ctx *ctx);
  void *test; /* the test's own state */
};

static void work(void *arg) {
  struct model *md = arg;
  md->ran++;
}

static int fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct model *md = user;
  (void)args;
  if (md->in_module)
    md->in_module(md, ctx);
  return cgrt_enqueue_host(ctx, work, md);
}

static int bwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct model *md = user;
  (void)args;
  return cgrt_enqueue_host(ctx, work, md);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  struct model *md = user;
  if (md->in_prepare)
    md->in_prepare(md, ctx);
  return 0;
}

static double buf_in[MODS], buf_out[MODS];

static int body(const cgrt_ctx *ctx, void *user) {
  struct model *md = user;
  if (md->in_body)
    md->in_body(md, ctx);
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{&buf_in[i], sizeof(double), CGRT_IN, "in"},
                        {&buf_out[i], sizeof(double), CGRT_OUT, "out"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = 1, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(md->rt, md->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  if (ctx->phase == CGRT_PHASE_TRAIN) {
    cgrt_buffer b[2] = {{&buf_in[0], sizeof(double), CGRT_OUT, "in"},
                        {&buf_out[0], sizeof(double), CGRT_IN, "out"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = 1, .buffers = b, .num_buffers = 2};
    return cgrt_backward(md->rt, md->m[0], ctx, &a);
  }
  return 0;
}

static cgrt_step_desc step_desc(struct model *md) {
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_TRAIN,
                      .tokens = 4,
                      .prepare = prepare,
                      .body = body,
                      .user = md};
  return d;
}

static int step(struct model *md, cgrt_step_report *rep) {
  cgrt_step_desc d = step_desc(md);
  return cgrt_step(md->rt, &d, rep);
}

/* The model's MODS modules (layer i: attn for even i, mlp for odd; layer 0 has a backward). */
static int md_register(struct model *md) {
  for (int i = 0; i < MODS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.%s", i, i % 2 ? "mlp" : "attn");
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = i % 2 ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .layer = i,
                          .forward = fwd,
                          .backward = i == 0 ? bwd : NULL,
                          .user = md};
    int rc = cgrt_module_register(md->rt, &d, &md->m[i]);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* impl: none, local or a fixture; log: the level; sink may be NULL. */
static struct model *md_open(const char *impl, const char *log, cgrt_log_fn sink, void *user) {
  struct model *md = calloc(1, sizeof(*md));
  char ini[2048];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = %s\nbackend_path = %s\nwarmup_steps = 2\n%s"
           "[runtime]\ndriver = host\nlog = %s\n",
           impl, fixtures(), strcmp(impl, "local") == 0 ? "modules = attn mlp\n" : "", log);
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = sink, .log_user = user};
  if (cgrt_open_ex(&md->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  assert_int_equal(md_register(md), 0);
  return md;
}

static void md_close(struct model *md) {
  if (md->rt)
    assert_int_equal(cgrt_close(md->rt), 0);
  free(md);
}

/* ---------------------------------------------------------------- a second thread */

#define INTRUDER_CALLS 27

/* Thread A (the test's) steps; thread B calls in while A's body waits for it. */
struct duel {
  struct model *md;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stage; /* 1: A is inside its body; 2: B is done */
  const cgrt_ctx *ctx;
  const char *name[INTRUDER_CALLS];
  int rc[INTRUDER_CALLS];
  char msg[INTRUDER_CALLS][512];
  int calls;
};

static void set_stage(struct duel *d, int stage) {
  pthread_mutex_lock(&d->mu);
  d->stage = stage;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

static void wait_stage(struct duel *d, int stage) {
  pthread_mutex_lock(&d->mu);
  while (d->stage < stage)
    pthread_cond_wait(&d->cv, &d->mu);
  pthread_mutex_unlock(&d->mu);
}

static int visit_count(void *user, const cgrt_graph_info *g) {
  (void)g;
  ++*(int *)user;
  return 0;
}

static void emit_nothing(void *user, const char *line) {
  (void)user;
  (void)line;
}

static void nop(void *arg) {
  (void)arg;
}

static void record(struct duel *d, const char *name, int rc) {
  int i = d->calls++;
  d->name[i] = name;
  d->rc[i] = rc;
  snprintf(d->msg[i], sizeof(d->msg[i]), "%s", rc ? cgrt_last_error(d->md->rt) : "");
}

static void *intruder(void *arg) {
  struct duel *d = arg;
  wait_stage(d, 1);
  cgrt_runtime *rt = d->md->rt;
  cgrt_step_desc sd = step_desc(d->md);
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  cgrt_stats s = {.struct_size = sizeof(s)};
  cgrt_release_report rr = {.struct_size = sizeof(rr)};
  cgrt_module_desc md = {.struct_size = sizeof(md), .name = "intruder", .forward = fwd};
  cgrt_module *m = NULL;
  cgrt_capture_hooks hk = {.struct_size = sizeof(hk)};
  cgrt_finding f = {.struct_size = sizeof(f)};
  size_t n = 0;
  int seen = 0;
  void *p = NULL;
  const int64_t *sizes = NULL;
  char v[64];
  record(d, "cgrt_step", cgrt_step(rt, &sd, NULL));
  record(d, "cgrt_forward", cgrt_forward(rt, d->md->m[1], d->ctx, &a));
  record(d, "cgrt_backward", cgrt_backward(rt, d->md->m[0], d->ctx, &a));
  record(d, "cgrt_enqueue_host", cgrt_enqueue_host(d->ctx, nop, NULL));
  record(d, "cgrt_alloc_async", cgrt_alloc_async(d->ctx, 64, &p));
  record(d, "cgrt_free_async", cgrt_free_async(d->ctx, p));
  record(d, "cgrt_module_register", cgrt_module_register(rt, &md, &m));
  record(d, "cgrt_synchronize", cgrt_synchronize(rt));
  record(d, "cgrt_device_synchronize", cgrt_device_synchronize(rt)); /* host driver: it drives */
  record(d, "cgrt_release_graphs", cgrt_release_graphs(rt));
  record(d, "cgrt_release_graphs_ex", cgrt_release_graphs_ex(rt, &rr));
  record(d, "cgrt_module_release_key", cgrt_module_release_key(rt, d->md->m[0], 1, &n));
  record(d, "cgrt_graph_list", cgrt_graph_list(rt, visit_count, &seen));
  record(d, "cgrt_stats_get", cgrt_stats_get(rt, &s));
  record(d, "cgrt_config_get", cgrt_config_get(rt, "cuda_graph", "impl", v, sizeof(v)));
  record(d, "cgrt_set_world_comm", cgrt_set_world_comm(rt, NULL));
  record(d, "cgrt_set_capture_hooks", cgrt_set_capture_hooks(rt, NULL, NULL, NULL));
  record(d, "cgrt_set_capture_hooks_ex", cgrt_set_capture_hooks_ex(rt, &hk));
  record(d, "cgrt_findings_count", cgrt_findings_count(rt, &n));
  record(d, "cgrt_finding_get", cgrt_finding_get(rt, 0, &f));
  record(d, "cgrt_findings_clear", cgrt_findings_clear(rt));
  record(d, "cgrt_set_log", cgrt_set_log(rt, NULL, NULL));
  record(d, "cgrt_log_message", cgrt_log_message(rt, CGRT_LOG_ERROR, "from thread B"));
  record(d, "cgrt_tool_watch_graphs", cgrt_tool_watch_graphs(rt, NULL, NULL));
  record(d, "cgrt_tool_describe", cgrt_tool_describe(rt, emit_nothing, NULL));
  record(d, "cgrt_tool_buckets", cgrt_tool_buckets(rt, &sizes, &n));
  record(d, "cgrt_close", cgrt_close(rt));
  set_stage(d, 2);
  return NULL;
}

static void body_waits_for_intruder(struct model *md, const cgrt_ctx *ctx) {
  struct duel *d = md->test;
  d->ctx = ctx;
  set_stage(d, 1);
  wait_stage(d, 2);
}

static int last_error_has_another_thread(struct model *md) {
  return strstr(cgrt_last_error(md->rt), "another thread") != NULL;
}

static void *stats_from_another_thread(void *arg) {
  struct model *md = arg;
  cgrt_stats s = {.struct_size = sizeof(s)};
  return (void *)(intptr_t)cgrt_stats_get(md->rt, &s);
}

/* While thread A is inside a step, every call of thread B is refused; A's step is unaffected. */
static void second_thread_refused_while_one_steps(void **state) {
  (void)state;
  struct model *md = md_open("local", "off", NULL, NULL);
  struct duel d = {.md = md, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  md->test = &d;
  md->in_body = body_waits_for_intruder;
  pthread_t b;
  assert_int_equal(pthread_create(&b, NULL, intruder, &d), 0);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int rc = step(md, &rep);
  pthread_join(b, NULL);
  md->in_body = NULL;
  assert_int_equal(rc, 0);
  assert_int_equal(d.calls, INTRUDER_CALLS);
  for (int i = 0; i < d.calls; i++) {
    if (d.rc[i] != CGRT_E_STATE)
      fail_msg("%s from a second thread returned %d (%s), not CGRT_E_STATE", d.name[i], d.rc[i],
               d.msg[i]);
    assert_contains(d.msg[i], d.name[i]);
    assert_contains(d.msg[i], "the runtime is being driven by another thread");
    assert_contains(d.msg[i], "one thread at a time drives a runtime; open one per thread");
  }
  assert_contains(d.msg[0], "inside cgrt_step");
  /* Thread A: its step ran whole, and its last error is not B's. */
  assert_int_equal(rep.calls_eager, MODS + 1);
  assert_false(last_error_has_another_thread(md));
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  assert_int_equal(md->ran, MODS + 1);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.steps, 1);
  /* Between calls the runtime may change hands: one thread at a time, not one thread forever. */
  assert_int_equal(pthread_create(&b, NULL, stats_from_another_thread, md), 0);
  void *brc = NULL;
  pthread_join(b, &brc);
  assert_int_equal((int)(intptr_t)brc, 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(step(md, NULL), 0);
  md_close(md);
}

#define RACE_STEPS 300
#define RACE_TRIES 1000000

struct racer {
  struct model *md;
  pthread_barrier_t *start;
  int ok, busy, other, bad_report, bad_message;
};

/* Steps until RACE_STEPS went through, with a synchronization or a listing and the stats after
   each attempt; a refused call is tried again. */
static void *race(void *arg) {
  struct racer *r = arg;
  pthread_barrier_wait(r->start);
  for (int i = 0; r->ok < RACE_STEPS && i < RACE_TRIES; i++) {
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    int rc = step(r->md, &rep);
    if (rc == 0) {
      r->ok++;
      if (rep.calls_eager + rep.calls_captured + rep.calls_replayed != MODS + 1)
        r->bad_report++;
    } else if (rc == CGRT_E_STATE) {
      r->busy++;
      if (!strstr(cgrt_last_error(r->md->rt), "driven by another thread"))
        r->bad_message++;
      sched_yield(); /* let the driving thread go on */
    } else {
      r->other++;
    }
    int graphs = 0;
    rc = i % 2 ? cgrt_synchronize(r->md->rt) : cgrt_graph_list(r->md->rt, visit_count, &graphs);
    if (rc != 0 && rc != CGRT_E_STATE)
      r->other++;
    cgrt_stats s = {.struct_size = sizeof(s)};
    rc = cgrt_stats_get(r->md->rt, &s);
    if (rc != 0 && rc != CGRT_E_STATE)
      r->other++;
    sched_yield(); /* between calls the runtime may change hands */
  }
  return NULL;
}

/* Lets the other thread run while this one is inside its step. */
static void body_yields(struct model *md, const cgrt_ctx *ctx) {
  (void)md;
  (void)ctx;
  sched_yield();
}

/* Two threads race steps, synchronizations, listings and stats on one runtime: each call runs
   whole or is refused with the sentence, and the counters add up. */
static void two_threads_racing_never_corrupt(void **state) {
  (void)state;
  struct model *md = md_open("local", "off", NULL, NULL);
  md->in_body = body_yields;
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  struct racer r[2] = {{.md = md, .start = &start}, {.md = md, .start = &start}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&start);
  printf("race: %d and %d steps refused on the way to %d each\n", r[0].busy, r[1].busy, RACE_STEPS);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(r[i].ok, RACE_STEPS);
    assert_int_equal(r[i].other, 0);
    assert_int_equal(r[i].bad_report, 0);
    assert_int_equal(r[i].bad_message, 0);
  }
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.steps, 2 * RACE_STEPS);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  assert_int_equal(md->ran, 2 * RACE_STEPS * (MODS + 1));
  assert_false(last_error_has_another_thread(md));
  md_close(md);
}

/* ---------------------------------------------------------------- two runtimes, two threads */

#define SIDE_ROUNDS 8
#define SIDE_STEPS  12

/* One thread's runtimes, opened, stepped and closed in turn under each backend: the other thread
   does the same at once, so opens (backends loaded), captures, replays and closes (backends
   unloaded) of the two interleave. cmocka's asserts belong to the main thread: failures are kept.
 */
struct side {
  int index;
  pthread_barrier_t *start;
  int steps;
  char failure[512];
};

static void *side_run(void *arg) {
  struct side *sd = arg;
  static const char *const impls[] = {"local", "transformer_engine", "full_iteration", "none"};
  pthread_barrier_wait(sd->start);
  for (int round = 0; round < SIDE_ROUNDS && !sd->failure[0]; round++) {
    const char *impl = impls[(round + sd->index) % 4];
    struct model md = {0};
    char ini[512];
    snprintf(ini, sizeof(ini),
             "[cuda_graph]\nimpl = %s\nwarmup_steps = 2\n%s"
             "[runtime]\ndriver = host\nlog = off\n[host]\nnan_check = off\n",
             impl,
             strcmp(impl, "local") == 0 || strcmp(impl, "transformer_engine") == 0
                 ? "modules = attn mlp\n"
                 : "");
    cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini};
    if (cgrt_open_ex(&md.rt, &o) != 0) {
      snprintf(sd->failure, sizeof(sd->failure), "open (%s): %s", impl, cgrt_last_error(NULL));
      break;
    }
    if (md_register(&md) != 0)
      snprintf(sd->failure, sizeof(sd->failure), "register (%s): %s", impl, cgrt_last_error(md.rt));
    for (int s = 0; s < SIDE_STEPS && !sd->failure[0]; s++) {
      if (step(&md, NULL) != 0)
        snprintf(sd->failure, sizeof(sd->failure), "%s, step %d: %s", impl, s,
                 cgrt_last_error(md.rt));
      else
        sd->steps++;
    }
    if (!sd->failure[0] && cgrt_synchronize(md.rt) != 0)
      snprintf(sd->failure, sizeof(sd->failure), "%s: synchronize: %s", impl,
               cgrt_last_error(md.rt));
    cgrt_stats st = {.struct_size = sizeof(st)};
    if (!sd->failure[0] && cgrt_stats_get(md.rt, &st) == 0 &&
        (md.ran != SIDE_STEPS * (MODS + 1) || st.fallbacks != 0))
      snprintf(sd->failure, sizeof(sd->failure),
               "%s: %d host functions ran for %d expected, %llu fallbacks", impl, md.ran,
               SIDE_STEPS * (MODS + 1), (unsigned long long)st.fallbacks);
    if (cgrt_close(md.rt) != 0 && !sd->failure[0])
      snprintf(sd->failure, sizeof(sd->failure), "%s: close: %s", impl, cgrt_last_error(NULL));
  }
  return NULL;
}

/* Two runtimes, one per thread, under every backend at once (a server with a model per worker):
   each step's work runs exactly once on its own runtime, no capture falls back, and under TSan
   (test_misuse_tsan) the core's and the backends' shared state shows no race. */
static void two_runtimes_two_threads_side_by_side(void **state) {
  (void)state;
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  struct side sd[2] = {{.index = 0, .start = &start}, {.index = 1, .start = &start}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, side_run, &sd[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < 2; i++) {
    if (sd[i].failure[0])
      fail_msg("thread %d: %s", i, sd[i].failure);
    assert_int_equal(sd[i].steps, SIDE_ROUNDS * SIDE_STEPS);
  }
}

/* ---------------------------------------------------------------- cgrt_device_synchronize */

struct crossing {
  struct model *other; /* the runtime whose device the module synchronizes */
  int ok, refused, other_rc;
  char msg[512];
};

/* A module of one runtime synchronizes another runtime's device, as a host's layer might. */
static void module_syncs_the_other(struct model *md, const cgrt_ctx *ctx) {
  struct crossing *c = md->test;
  (void)ctx;
  int rc = cgrt_device_synchronize(c->other->rt);
  if (rc == 0) {
    c->ok++;
  } else if (rc == CGRT_E_CAPTURE) {
    c->refused++;
    snprintf(c->msg, sizeof(c->msg), "%s", cgrt_last_error(c->other->rt));
  } else {
    c->other_rc = rc;
    snprintf(c->msg, sizeof(c->msg), "%s", cgrt_last_error(c->other->rt));
  }
}

/*
 * cgrt_device_synchronize on the host driver: between steps it runs all the device's work; from
 * a module inside a capture (of any runtime) it is refused with a sentence and the capture goes
 * on, unbroken; eager module calls pass. (Its gate: test_gate; from another thread beside
 * captures on a GPU: test_gpu_streams.)
 */
static void device_synchronize_never_inside_a_capture(void **state) {
  (void)state;
  assert_int_equal(cgrt_device_synchronize(NULL), CGRT_E_INVAL);
  struct model *a = md_open("none", "off", NULL, NULL);
  struct model *b = md_open("local", "off", NULL, NULL);
  assert_int_equal(step(a, NULL), 0);
  assert_int_equal(cgrt_device_synchronize(a->rt), 0);
  int ran = a->ran;
  assert_true(ran > 0);
  assert_int_equal(cgrt_synchronize(a->rt), 0);
  assert_int_equal(a->ran, ran); /* the device synchronize had run it all */

  struct crossing c = {.other = a};
  b->test = &c;
  b->in_module = module_syncs_the_other;
  for (int i = 0; i < 6; i++)
    assert_int_equal(step(b, NULL), 0);
  if (c.other_rc)
    fail_msg("cgrt_device_synchronize from a module returned %d: %s", c.other_rc, c.msg);
  assert_true(c.ok > 0);      /* warm-up and replays: module calls run eagerly or not at all */
  assert_true(c.refused > 0); /* the captures */
  assert_contains(c.msg, "cgrt_device_synchronize: called while this thread captures");
  assert_contains(c.msg, "synchronize after the step returns");
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(b->rt, &s), 0);
  assert_int_equal(s.fallbacks, 0); /* the refused synchronize broke no capture */
  assert_true(s.captures > 0);
  md_close(b);
  md_close(a);
}

/* ---------------------------------------------------------------- graph-list visitors */

struct lister {
  struct model *md;
  int seen;
  int release_rc, release_ex_rc, step_rc, close_rc, list_rc, stats_rc;
  char release_msg[512], close_msg[512], step_msg[512];
};

/* "Release when the list shows more than N bytes", written the natural way. */
static int release_when_listed(void *user, const cgrt_graph_info *g) {
  struct lister *l = user;
  (void)g;
  if (l->seen++ == 0) {
    cgrt_runtime *rt = l->md->rt;
    cgrt_release_report rr = {.struct_size = sizeof(rr)};
    l->release_rc = cgrt_release_graphs(rt);
    snprintf(l->release_msg, sizeof(l->release_msg), "%s", cgrt_last_error(rt));
    l->release_ex_rc = cgrt_release_graphs_ex(rt, &rr);
    l->step_rc = step(l->md, NULL);
    snprintf(l->step_msg, sizeof(l->step_msg), "%s", cgrt_last_error(rt));
    l->close_rc = cgrt_close(rt);
    snprintf(l->close_msg, sizeof(l->close_msg), "%s", cgrt_last_error(rt));
    int nested = 0;
    l->list_rc = cgrt_graph_list(rt, visit_count, &nested);
    cgrt_stats s = {.struct_size = sizeof(s)};
    l->stats_rc = cgrt_stats_get(rt, &s);
  }
  return 0;
}

static void visitor_may_not_change_the_graphs(void **state) {
  (void)state;
  struct model *md = md_open("local", "off", NULL, NULL);
  for (int i = 0; i < 4; i++)
    assert_int_equal(step(md, NULL), 0);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_true(s.live_graphs >= 2);
  struct lister l = {.md = md};
  assert_int_equal(cgrt_graph_list(md->rt, release_when_listed, &l), 0);
  /* The walk saw every graph: none was freed under it. */
  assert_int_equal(l.seen, (int)s.live_graphs);
  assert_int_equal(l.release_rc, CGRT_E_STATE);
  assert_contains(l.release_msg, "cgrt_release_graphs called from a cgrt_graph_list visitor");
  assert_contains(l.release_msg, "return nonzero from the visitor");
  assert_int_equal(l.release_ex_rc, CGRT_E_STATE);
  assert_int_equal(l.step_rc, CGRT_E_STATE);
  assert_contains(l.step_msg, "cgrt_step called from a cgrt_graph_list visitor");
  assert_int_equal(l.close_rc, CGRT_E_STATE);
  assert_contains(l.close_msg, "cgrt_close called from a cgrt_graph_list visitor");
  assert_contains(l.close_msg, "nothing was freed");
  /* Reading is allowed. */
  assert_int_equal(l.list_rc, 0);
  assert_int_equal(l.stats_rc, 0);
  /* After the listing, the release works. */
  assert_int_equal(cgrt_release_graphs(md->rt), 0);
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.live_graphs, 0);
  md_close(md);
}

/* ---------------------------------------------------------------- cgrt_close from host functions
 */

struct closer {
  struct model *md;
  int armed;
  int runs;
  int rc;
  char msg[512];
};

static void close_from_host_function(void *arg) {
  struct closer *c = arg;
  c->runs++;
  c->rc = cgrt_close(c->md->rt);
  snprintf(c->msg, sizeof(c->msg), "%s", c->rc ? cgrt_last_error(c->md->rt) : "(freed)");
}

static void body_enqueues_closer(struct model *md, const cgrt_ctx *ctx) {
  struct closer *c = md->test;
  if (c->armed) {
    c->armed = 0;
    assert_int_equal(cgrt_enqueue_host(ctx, close_from_host_function, c), 0);
  }
}

static void close_refused_from_host_functions(void **state) {
  (void)state;
  struct model *md = md_open("local", "off", NULL, NULL);
  struct closer c = {.md = md};
  md->test = &c;
  md->in_body = body_enqueues_closer;

  /* Run by cgrt_synchronize: refused, nothing freed, the runtime goes on. */
  c.armed = 1;
  assert_int_equal(step(md, NULL), 0);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  assert_int_equal(c.runs, 1);
  assert_int_equal(c.rc, CGRT_E_STATE);
  assert_contains(c.msg, "cgrt_close called from a host function (run by cgrt_synchronize)");
  assert_contains(c.msg, "nothing was freed");
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(md, NULL), 0);
  assert_int_equal(cgrt_synchronize(md->rt), 0);

  /* Run by cgrt_release_graphs: refused; the release itself goes through. */
  c.armed = 1;
  assert_int_equal(step(md, NULL), 0);
  assert_int_equal(cgrt_release_graphs(md->rt), 0);
  assert_int_equal(c.runs, 2);
  assert_int_equal(c.rc, CGRT_E_STATE);
  assert_contains(c.msg, "(run by cgrt_release_graphs)");
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_int_equal(s.live_graphs, 0);

  /* Run by cgrt_close itself: refused inside, and the outer close frees the runtime. */
  c.armed = 1;
  assert_int_equal(step(md, NULL), 0);
  assert_int_equal(cgrt_close(md->rt), 0);
  assert_int_equal(c.runs, 3);
  assert_int_equal(c.rc, CGRT_E_STATE);
  assert_contains(c.msg, "cgrt_close called while the runtime is being closed");
  md->rt = NULL;
  md_close(md);
}

/* cgrt_close of a runtime another runtime's host function names is fine: runtimes are
   independent. */
static void close_of_another_runtime_from_a_host_function(void **state) {
  (void)state;
  struct model *md = md_open("none", "off", NULL, NULL);
  struct model *other = md_open("none", "off", NULL, NULL);
  struct closer c = {.md = other, .armed = 1};
  md->test = &c;
  md->in_body = body_enqueues_closer;
  assert_int_equal(step(md, NULL), 0);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  assert_int_equal(c.rc, 0);
  other->rt = NULL;
  md_close(other);
  md_close(md);
}

/* ---------------------------------------------------------------- every call from every callback
 */

enum where {
  W_PREPARE,
  W_BODY,
  W_MODULE,
  W_HOOK_BEGIN,
  W_HOOK_END,
  W_WATCH,
  W_SINK_STEP,
  W_VISITOR,
  W_DESCRIBE,
  W_SINK_IDLE,
  W_HOST_SYNC,
  W_HOST_RELEASE,
  W_HOST_CLOSE,
  W_COUNT
};

static const char *const where_names[W_COUNT] = {"prepare",
                                                 "body",
                                                 "module forward",
                                                 "capture begin hook",
                                                 "capture end hook",
                                                 "graph watcher",
                                                 "log sink (in a step)",
                                                 "graph-list visitor",
                                                 "tool describe's emit",
                                                 "log sink (between steps)",
                                                 "host fn run by cgrt_synchronize",
                                                 "host fn run by cgrt_release_graphs",
                                                 "host fn run by cgrt_close"};

enum call {
  C_STEP,
  C_FORWARD,
  C_BACKWARD,
  C_ENQUEUE,
  C_ALLOC,
  C_REGISTER,
  C_SYNC,
  C_DEVICE_SYNC,
  C_RELEASE,
  C_RELEASE_EX,
  C_RELEASE_KEY,
  C_LIST,
  C_STATS,
  C_CONFIG,
  C_WORLD,
  C_HOOKS,
  C_HOOKS_EX,
  C_FINDINGS,
  C_FINDING_GET,
  C_FINDINGS_CLEAR,
  C_SET_LOG,
  C_LOG_MESSAGE,
  C_WATCH,
  C_DESCRIBE,
  C_BUCKETS,
  C_CLOSE,
  C_COUNT
};

static const char *const call_names[C_COUNT] = {"cgrt_step",
                                                "cgrt_forward",
                                                "cgrt_backward",
                                                "cgrt_enqueue_host",
                                                "cgrt_alloc_async",
                                                "cgrt_module_register",
                                                "cgrt_synchronize",
                                                "cgrt_device_synchronize",
                                                "cgrt_release_graphs",
                                                "cgrt_release_graphs_ex",
                                                "cgrt_module_release_key",
                                                "cgrt_graph_list",
                                                "cgrt_stats_get",
                                                "cgrt_config_get",
                                                "cgrt_set_world_comm",
                                                "cgrt_set_capture_hooks",
                                                "cgrt_set_capture_hooks_ex",
                                                "cgrt_findings_count",
                                                "cgrt_finding_get",
                                                "cgrt_findings_clear",
                                                "cgrt_set_log",
                                                "cgrt_log_message",
                                                "cgrt_tool_watch_graphs",
                                                "cgrt_tool_describe",
                                                "cgrt_tool_buckets",
                                                "cgrt_close"};

struct matrix {
  struct model *md;
  int armed[W_COUNT];
  int done[W_COUNT];
  int running;  /* a row runs: no other row starts inside it */
  int stepping; /* the test is inside cgrt_step */
  int rc[W_COUNT][C_COUNT];
  char msg[W_COUNT][C_COUNT][400];
};

static int hook_begin(void *user, void *stream);
static int hook_end(void *user, void *stream);
static void sink(void *user, cgrt_log_level level, const char *msg);
static void watcher(void *user, const struct cgrt_tool_graph_event *ev);

static int visit_nothing(void *user, const cgrt_graph_info *g) {
  (void)user;
  (void)g;
  return 0;
}

/* Makes every call from where `w` stands (ctx: the callback's, or NULL). */
static void run_row(struct matrix *x, enum where w, const cgrt_ctx *ctx) {
  cgrt_runtime *rt = x->md->rt;
  cgrt_ctx own = {.struct_size = sizeof(own), .rt = rt, .stream = cgrt_stream(rt)};
  const cgrt_ctx *c = ctx ? ctx : &own;
  cgrt_step_desc sd = step_desc(x->md);
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  cgrt_stats s = {.struct_size = sizeof(s)};
  cgrt_release_report rr = {.struct_size = sizeof(rr)};
  char name[64];
  snprintf(name, sizeof(name), "late.%d", (int)w);
  cgrt_module_desc md = {.struct_size = sizeof(md), .name = name, .forward = fwd, .user = x->md};
  cgrt_module *m = NULL;
  cgrt_capture_hooks hk = {
      .struct_size = sizeof(hk), .begin = hook_begin, .end = hook_end, .user = x};
  cgrt_finding f = {.struct_size = sizeof(f)};
  size_t n = 0;
  void *p = NULL;
  const int64_t *sizes = NULL;
  char v[64];
  x->running = 1;
  for (int k = 0; k < C_COUNT; k++) {
    int rc = 0;
    switch ((enum call)k) {
    case C_STEP:
      rc = cgrt_step(rt, &sd, NULL);
      break;
    case C_FORWARD:
      rc = cgrt_forward(rt, x->md->m[1], c, &a);
      break;
    case C_BACKWARD:
      rc = cgrt_backward(rt, x->md->m[0], c, &a);
      break;
    case C_ENQUEUE:
      rc = cgrt_enqueue_host(c, nop, NULL);
      break;
    case C_ALLOC:
      rc = cgrt_alloc_async(c, 64, &p);
      if (rc == 0)
        rc = cgrt_free_async(c, p);
      break;
    case C_REGISTER:
      rc = cgrt_module_register(rt, &md, &m);
      break;
    case C_SYNC:
      rc = cgrt_synchronize(rt);
      break;
    case C_DEVICE_SYNC:
      rc = cgrt_device_synchronize(rt);
      break;
    case C_RELEASE:
      rc = cgrt_release_graphs(rt);
      break;
    case C_RELEASE_EX:
      rc = cgrt_release_graphs_ex(rt, &rr);
      break;
    case C_RELEASE_KEY:
      rc = cgrt_module_release_key(rt, x->md->m[1], 1, &n);
      break;
    case C_LIST:
      rc = cgrt_graph_list(rt, visit_nothing, NULL);
      break;
    case C_STATS:
      rc = cgrt_stats_get(rt, &s);
      break;
    case C_CONFIG:
      rc = cgrt_config_get(rt, "cuda_graph", "impl", v, sizeof(v));
      break;
    case C_WORLD:
      rc = cgrt_set_world_comm(rt, NULL);
      break;
    case C_HOOKS:
      rc = cgrt_set_capture_hooks(rt, hook_begin, hook_end, x);
      break;
    case C_HOOKS_EX:
      rc = cgrt_set_capture_hooks_ex(rt, &hk);
      break;
    case C_FINDINGS:
      rc = cgrt_findings_count(rt, &n);
      break;
    case C_FINDING_GET:
      rc = cgrt_finding_get(rt, 0, &f);
      break;
    case C_FINDINGS_CLEAR:
      rc = cgrt_findings_clear(rt);
      break;
    case C_SET_LOG:
      rc = cgrt_set_log(rt, sink, x);
      break;
    case C_LOG_MESSAGE:
      rc = cgrt_log_message(rt, CGRT_LOG_DEBUG, "a line from a callback");
      break;
    case C_WATCH:
      rc = cgrt_tool_watch_graphs(rt, watcher, x);
      break;
    case C_DESCRIBE:
      rc = cgrt_tool_describe(rt, emit_nothing, NULL);
      break;
    case C_BUCKETS:
      rc = cgrt_tool_buckets(rt, &sizes, &n);
      break;
    case C_CLOSE:
      rc = cgrt_close(rt);
      break;
    case C_COUNT:
      break;
    }
    x->rc[w][k] = rc;
    snprintf(x->msg[w][k], sizeof(x->msg[w][k]), "%s", rc ? cgrt_last_error(rt) : "");
  }
  x->running = 0;
  x->done[w] = 1;
}

static int take(struct matrix *x, enum where w) {
  if (x->running || !x->armed[w])
    return 0;
  x->armed[w] = 0;
  return 1;
}

static int hook_begin(void *user, void *stream) {
  struct matrix *x = user;
  (void)stream;
  if (take(x, W_HOOK_BEGIN))
    run_row(x, W_HOOK_BEGIN, NULL);
  return 0;
}

static int hook_end(void *user, void *stream) {
  struct matrix *x = user;
  (void)stream;
  if (take(x, W_HOOK_END))
    run_row(x, W_HOOK_END, NULL);
  return 0;
}

static void sink(void *user, cgrt_log_level level, const char *msg) {
  struct matrix *x = user;
  (void)level;
  (void)msg;
  enum where w = x->stepping ? W_SINK_STEP : W_SINK_IDLE;
  if (take(x, w))
    run_row(x, w, NULL);
}

static void watcher(void *user, const struct cgrt_tool_graph_event *ev) {
  struct matrix *x = user;
  (void)ev;
  if (take(x, W_WATCH))
    run_row(x, W_WATCH, NULL);
}

static void matrix_prepare(struct model *md, const cgrt_ctx *ctx) {
  struct matrix *x = md->test;
  if (take(x, W_PREPARE))
    run_row(x, W_PREPARE, ctx);
}

static void host_row(void *arg) {
  struct matrix *x = arg;
  enum where w = x->armed[W_HOST_SYNC]      ? W_HOST_SYNC
                 : x->armed[W_HOST_RELEASE] ? W_HOST_RELEASE
                                            : W_HOST_CLOSE;
  if (take(x, w))
    run_row(x, w, NULL);
}

static int host_row_pending;

static void matrix_body(struct model *md, const cgrt_ctx *ctx) {
  struct matrix *x = md->test;
  if (take(x, W_BODY))
    run_row(x, W_BODY, ctx);
  if (host_row_pending) {
    host_row_pending = 0;
    assert_int_equal(cgrt_enqueue_host(ctx, host_row, x), 0);
  }
}

static void matrix_module(struct model *md, const cgrt_ctx *ctx) {
  struct matrix *x = md->test;
  if (ctx->mode != CGRT_MODE_CAPTURE && take(x, W_MODULE))
    run_row(x, W_MODULE, ctx);
}

static int matrix_visitor(void *user, const cgrt_graph_info *g) {
  struct matrix *x = user;
  (void)g;
  if (take(x, W_VISITOR))
    run_row(x, W_VISITOR, NULL);
  return 0;
}

static void matrix_emit(void *user, const char *line) {
  struct matrix *x = user;
  (void)line;
  if (take(x, W_DESCRIBE))
    run_row(x, W_DESCRIBE, NULL);
}

static int matrix_step(struct matrix *x) {
  x->stepping = 1;
  int rc = step(x->md, NULL);
  x->stepping = 0;
  return rc;
}

/* Runs the host row `w`: a step enqueues it, then `run` (a sync, a release or a close) runs it. */
static void host_context(struct matrix *x, enum where w) {
  x->armed[w] = 1;
  host_row_pending = 1;
  assert_int_equal(matrix_step(x), 0);
}

static int rc_of(struct matrix *x, enum where w, enum call k) {
  if (!x->done[w])
    fail_msg("the row of %s never ran", where_names[w]);
  return x->rc[w][k];
}

static void print_matrix(const struct matrix *x) {
  printf("| call |");
  for (int w = 0; w < W_COUNT; w++)
    printf(" %s |", where_names[w]);
  printf("\n|---|");
  for (int w = 0; w < W_COUNT; w++)
    printf("---|");
  printf("\n");
  for (int k = 0; k < C_COUNT; k++) {
    printf("| %s |", call_names[k]);
    for (int w = 0; w < W_COUNT; w++)
      printf(" %s |", x->rc[w][k] == 0              ? "ok"
                      : x->rc[w][k] == CGRT_E_STATE ? "STATE"
                      : x->rc[w][k] == CGRT_E_INVAL ? "INVAL"
                                                    : cgrt_strerror(x->rc[w][k]));
    printf("\n");
  }
  printf("\nSentences:\n");
  for (int w = 0; w < W_COUNT; w++)
    for (int k = 0; k < C_COUNT; k++)
      if (x->rc[w][k])
        printf("- %s / %s: %d: %s\n", where_names[w], call_names[k], x->rc[w][k], x->msg[w][k]);
}

static void every_call_from_every_callback(void **state) {
  (void)state;
  struct matrix *x = calloc(1, sizeof(*x));
  struct model *md = md_open("local", "debug", sink, x);
  x->md = md;
  md->test = x;
  md->in_prepare = matrix_prepare;
  md->in_body = matrix_body;
  md->in_module = matrix_module;
  assert_int_equal(cgrt_set_capture_hooks(md->rt, hook_begin, hook_end, x), 0);
  assert_int_equal(cgrt_tool_watch_graphs(md->rt, watcher, x), 0);

  /* Inside steps: warm-up steps run prepare, body and modules; a capture step runs the hooks,
     the watcher and debug lines. */
  x->armed[W_PREPARE] = 1;
  assert_int_equal(matrix_step(x), 0);
  x->armed[W_BODY] = 1;
  x->armed[W_MODULE] = 1;
  assert_int_equal(matrix_step(x), 0);
  x->armed[W_HOOK_BEGIN] = x->armed[W_HOOK_END] = x->armed[W_WATCH] = x->armed[W_SINK_STEP] = 1;
  for (int i = 0; i < 6 && !(x->done[W_HOOK_BEGIN] && x->done[W_HOOK_END] && x->done[W_WATCH] &&
                             x->done[W_SINK_STEP]);
       i++)
    assert_int_equal(matrix_step(x), 0);
  assert_int_equal(cgrt_synchronize(md->rt), 0);

  /* Between steps. */
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(md->rt, &s), 0);
  assert_true(s.live_graphs > 0);
  x->armed[W_VISITOR] = 1;
  assert_int_equal(cgrt_graph_list(md->rt, matrix_visitor, x), 0);
  x->armed[W_DESCRIBE] = 1;
  assert_int_equal(cgrt_tool_describe(md->rt, matrix_emit, x), 0);
  x->armed[W_SINK_IDLE] = 1;
  char v[8];
  assert_int_equal(cgrt_config_get(md->rt, "cuda_graph", "no_such_key", v, sizeof(v)),
                   CGRT_E_NOTFOUND);
  host_context(x, W_HOST_SYNC);
  assert_int_equal(cgrt_synchronize(md->rt), 0);
  host_context(x, W_HOST_RELEASE);
  assert_int_equal(cgrt_release_graphs(md->rt), 0);
  host_context(x, W_HOST_CLOSE);
  assert_int_equal(cgrt_close(md->rt), 0); /* runs the row, then frees */
  md->rt = NULL;

  if (getenv("CGRT_TEST_MATRIX"))
    print_matrix(x);

  /* cgrt_close: refused from every callback, nothing freed (the runtime went on each time). */
  for (int w = 0; w < W_COUNT; w++) {
    if (rc_of(x, w, C_CLOSE) != CGRT_E_STATE)
      fail_msg("cgrt_close from the %s returned %d", where_names[w], x->rc[w][C_CLOSE]);
    assert_contains(x->msg[w][C_CLOSE], "nothing was freed");
  }
  /* Inside a step: what changes the runtime is refused, as before; reading works. */
  static const enum where in_step[] = {W_PREPARE,  W_BODY,  W_MODULE,   W_HOOK_BEGIN,
                                       W_HOOK_END, W_WATCH, W_SINK_STEP};
  static const enum call changes[] = {C_STEP,    C_REGISTER,   C_SYNC,        C_DEVICE_SYNC,
                                      C_RELEASE, C_RELEASE_EX, C_RELEASE_KEY, C_LIST,
                                      C_WORLD,   C_HOOKS,      C_HOOKS_EX,    C_FINDINGS_CLEAR};
  for (size_t i = 0; i < sizeof(in_step) / sizeof(in_step[0]); i++) {
    enum where w = in_step[i];
    for (size_t j = 0; j < sizeof(changes) / sizeof(changes[0]); j++)
      if (rc_of(x, w, changes[j]) != CGRT_E_STATE)
        fail_msg("%s from the %s returned %d", call_names[changes[j]], where_names[w],
                 x->rc[w][changes[j]]);
    assert_int_equal(rc_of(x, w, C_STATS), 0);
    assert_int_equal(rc_of(x, w, C_CONFIG), 0);
    assert_int_equal(rc_of(x, w, C_FINDINGS), 0);
  }
  assert_contains(x->msg[W_BODY][C_STEP], "steps do not nest");
  assert_contains(x->msg[W_MODULE][C_DEVICE_SYNC], "not allowed inside a step");
  assert_int_equal(rc_of(x, W_BODY, C_FORWARD), 0); /* the one place module calls belong */
  assert_int_equal(rc_of(x, W_PREPARE, C_FORWARD), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_MODULE, C_FORWARD), CGRT_E_STATE);
  /* The log sink is never re-entered. */
  assert_int_equal(rc_of(x, W_SINK_STEP, C_LOG_MESSAGE), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_SINK_IDLE, C_LOG_MESSAGE), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_BODY, C_LOG_MESSAGE), 0);
  /* A visitor reads, and may not change the graphs. */
  assert_int_equal(rc_of(x, W_VISITOR, C_STEP), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_VISITOR, C_RELEASE), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_VISITOR, C_RELEASE_EX), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_VISITOR, C_RELEASE_KEY), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_VISITOR, C_LIST), 0);
  assert_int_equal(rc_of(x, W_VISITOR, C_STATS), 0);
  /* So does the emit callback of cgrt_tool_describe (the backend walks its state meanwhile). */
  assert_int_equal(rc_of(x, W_DESCRIBE, C_STEP), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_DESCRIBE, C_RELEASE), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_DESCRIBE, C_RELEASE_KEY), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_DESCRIBE, C_STATS), 0);
  /* The log sink between steps reads, and may not change the runtime. */
  assert_int_equal(rc_of(x, W_SINK_IDLE, C_STEP), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_SINK_IDLE, C_RELEASE), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_SINK_IDLE, C_RELEASE_KEY), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_SINK_IDLE, C_REGISTER), CGRT_E_STATE);
  assert_int_equal(rc_of(x, W_SINK_IDLE, C_STATS), 0);
  /* Host functions must not call cgrt: every call is refused, saying so. */
  for (int w = W_HOST_SYNC; w <= W_HOST_CLOSE; w++)
    for (int k = 0; k < C_COUNT; k++) {
      if (rc_of(x, w, k) != CGRT_E_STATE)
        fail_msg("%s from a %s returned %d", call_names[k], where_names[w], x->rc[w][k]);
    }
  assert_contains(x->msg[W_HOST_SYNC][C_STATS], "host functions must not call cgrt");
  assert_contains(x->msg[W_HOST_CLOSE][C_STATS], "while cgrt_close tears the runtime down");
  md_close(md);
  free(x);
}

/* ---------------------------------------------------------------- status texts */

struct lines {
  char text[16][512];
  int n;
};

static void keep_line(void *user, cgrt_log_level level, const char *msg) {
  struct lines *l = user;
  (void)level;
  if (l->n < 16)
    snprintf(l->text[l->n++], sizeof(l->text[0]), "%s", msg);
}

static void notfound_text_fits_every_use(void **state) {
  (void)state;
  const char *t = cgrt_strerror(CGRT_E_NOTFOUND);
  assert_contains(t, "not found");
  /* Its uses: a backend on the search path, a configuration key (cgrt_config_get). */
  assert_contains(t, "backend");
  assert_contains(t, "configuration key");
  struct lines l = {.n = 0};
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini =
                             "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = debug\n",
                         .log = keep_line,
                         .log_user = &l};
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open_ex(&rt, &o), 0);
  l.n = 0;
  char v[8];
  assert_int_equal(cgrt_config_get(rt, "cuda_graph", "rebnd", v, sizeof(v)), CGRT_E_NOTFOUND);
  assert_int_equal(l.n, 1);
  assert_contains(l.text[0], "error -5 (");
  assert_contains(l.text[0], "[cuda_graph] rebnd");
  if (strstr(l.text[0], "(backend not found)"))
    fail_msg("an unknown key is logged as a missing backend: %s", l.text[0]);
  assert_int_equal(cgrt_close(rt), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(second_thread_refused_while_one_steps),
      cmocka_unit_test(two_threads_racing_never_corrupt),
      cmocka_unit_test(two_runtimes_two_threads_side_by_side),
      cmocka_unit_test(device_synchronize_never_inside_a_capture),
      cmocka_unit_test(visitor_may_not_change_the_graphs),
      cmocka_unit_test(close_refused_from_host_functions),
      cmocka_unit_test(close_of_another_runtime_from_a_host_function),
      cmocka_unit_test(every_call_from_every_callback),
      cmocka_unit_test(notfound_text_fits_every_use),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
