/*
 * test_capture_hooks.c - cgrt_set_capture_hooks on the host driver: the host hears the begin and
 * the end of every capture the core makes (module calls, whole bodies, captures a backend begins
 * by hand), on the capturing thread, with the runtime's stream, never nested; exactly the work
 * recorded runs between them (what a host allocator that routes a capture's allocations to a
 * private pool relies on); a refusing begin hook or a failing end hook makes the work run
 * eagerly with correct results; a failed capture still gets its end.
 *
 * The modules do their "device work" as host functions: out = in * 2 + padded_tokens.
 */
#include <pthread.h>
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

#define MODS       3
#define MAX_PARAMS 4096

struct params {
  const double *in;
  double *out;
  double add;
};

struct hooks {
  int begins, ends;
  int depth, max_depth;
  int refuse_begin; /* begins to refuse from now on (counted down) */
  int fail_end;     /* ends to fail from now on (counted down) */
  int wrong_thread;
  int wrong_stream;
  void *stream; /* the runtime's stream */
  pthread_t thread;
};

struct fixture {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  struct params params[MAX_PARAMS];
  int num_params;
  double in[MODS], out[MODS];
  struct hooks h;
  int captured_outside; /* callbacks in capture mode that ran outside begin/end */
  int eager_inside;     /* callbacks not in capture mode that ran inside begin/end */
  int capture_calls;    /* callbacks that ran in capture mode */
  int body_captures;    /* bodies that ran in capture mode, inside the hooks */
};

static int on_begin(void *user, void *stream) {
  struct hooks *h = user;
  if (!pthread_equal(pthread_self(), h->thread))
    h->wrong_thread++;
  if (stream != h->stream)
    h->wrong_stream++;
  if (h->refuse_begin > 0) {
    h->refuse_begin--;
    return 7;
  }
  h->begins++;
  h->depth++;
  if (h->depth > h->max_depth)
    h->max_depth = h->depth;
  return 0;
}

static int on_end(void *user, void *stream) {
  struct hooks *h = user;
  if (!pthread_equal(pthread_self(), h->thread))
    h->wrong_thread++;
  if (stream != h->stream)
    h->wrong_stream++;
  h->ends++;
  h->depth--;
  if (h->fail_end > 0) {
    h->fail_end--;
    return 9;
  }
  return 0;
}

static void work(void *arg) {
  struct params *p = arg;
  p->out[0] = p->in[0] * 2.0 + p->add;
}

static void note_mode(struct fixture *f, const cgrt_ctx *ctx) {
  int inside = f->h.depth > 0;
  if (ctx->mode == CGRT_MODE_CAPTURE) {
    f->capture_calls++;
    if (!inside)
      f->captured_outside++;
  } else if (inside) {
    f->eager_inside++;
  }
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fixture *f = user;
  note_mode(f, ctx);
  assert_true(f->num_params < MAX_PARAMS);
  struct params *p = &f->params[f->num_params++];
  p->in = args->buffers[0].ptr;
  p->out = args->buffers[1].ptr;
  p->add = (double)ctx->padded_tokens;
  return cgrt_enqueue_host(ctx, work, p);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fixture *f = user;
  if (ctx->mode == CGRT_MODE_CAPTURE && f->h.depth > 0)
    f->body_captures++;
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{&f->in[i], sizeof(double), CGRT_IN, "in"},
                        {&f->out[i], sizeof(double), CGRT_OUT, "out"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = 0, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(f->rt, f->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static struct fixture *fixture_open(const char *impl, const char *extra) {
  struct fixture *f = calloc(1, sizeof(*f));
  char ini[2048];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = %s\nwarmup_steps = 1\n%s\n[runtime]\ndriver = host\nlog = off\n",
           impl, extra ? extra : "");
  if (cgrt_open_string(&f->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  for (int i = 0; i < MODS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .layer = i,
                          .forward = module_fwd,
                          .user = f};
    assert_int_equal(cgrt_module_register(f->rt, &d, &f->m[i]), 0);
    f->in[i] = i + 1;
  }
  f->h.stream = cgrt_stream(f->rt);
  f->h.thread = pthread_self();
  assert_int_equal(cgrt_set_capture_hooks(f->rt, on_begin, on_end, &f->h), 0);
  return f;
}

static void fixture_close(struct fixture *f) {
  assert_int_equal(cgrt_close(f->rt), 0);
  free(f);
}

static int step(struct fixture *f, int64_t tokens, cgrt_step_report *rep) {
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_INFER,
                      .tokens = tokens,
                      .body = body,
                      .user = f};
  memset(f->out, 0, sizeof(f->out));
  int rc = cgrt_step(f->rt, &d, rep);
  if (rc == 0)
    assert_int_equal(cgrt_synchronize(f->rt), 0);
  return rc;
}

static void assert_outputs(struct fixture *f, int64_t padded) {
  for (int i = 0; i < MODS; i++)
    assert_true(f->out[i] == f->in[i] * 2.0 + (double)padded);
}

static cgrt_stats stats(struct fixture *f) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  return s;
}

/* The invariants every test ends with: pairs closed, on the right thread and stream, and the
 * recorded work (and only it) between them. */
static void assert_bracketed(struct fixture *f) {
  assert_int_equal(f->h.depth, 0);
  assert_int_equal(f->h.max_depth, f->h.begins ? 1 : 0);
  assert_int_equal(f->h.begins, f->h.ends);
  assert_int_equal(f->h.wrong_thread, 0);
  assert_int_equal(f->h.wrong_stream, 0);
  assert_int_equal(f->captured_outside, 0);
  assert_int_equal(f->eager_inside, 0);
}

/* ---------------------------------------------------------------- layer scope */

static void layer_captures_are_bracketed(void **state) {
  (void)state;
  struct fixture *f = fixture_open("local", "inference_scope = layer\n[inference]\nmax_tokens = 8");
  const int64_t tokens[] = {1, 1, 1, 3, 3, 3, 8, 8, 1, 3};
  const int64_t padded[] = {1, 1, 1, 4, 4, 4, 8, 8, 1, 4};
  for (int i = 0; i < 10; i++) {
    assert_int_equal(step(f, tokens[i], NULL), 0);
    assert_outputs(f, padded[i]);
  }
  cgrt_stats s = stats(f);
  assert_int_equal(s.captures, 3 * MODS); /* buckets 1, 4, 8 */
  assert_int_equal(f->h.begins, (int)s.captures);
  assert_int_equal(f->capture_calls, (int)s.captures);
  assert_bracketed(f);
  fixture_close(f);
}

/* ---------------------------------------------------------------- block scope */

static void block_captures_are_bracketed(void **state) {
  (void)state;
  struct fixture *f = fixture_open("local", "inference_scope = block\n[inference]\nmax_tokens = 8");
  for (int i = 0; i < 4; i++) {
    assert_int_equal(step(f, 5, NULL), 0);
    assert_outputs(f, 8);
  }
  assert_int_equal(stats(f).captures, 1);
  assert_int_equal(f->h.begins, 1);
  assert_int_equal(f->body_captures, 1);
  assert_int_equal(f->capture_calls, MODS); /* the body's calls, recorded inside its capture */
  assert_bracketed(f);
  fixture_close(f);
}

/* ---------------------------------------------------------------- refusals and failures */

static void refused_begin_runs_eagerly(void **state) {
  (void)state;
  struct fixture *f = fixture_open("local", "inference_scope = layer\n[inference]\nmax_tokens = 8");
  assert_int_equal(step(f, 2, NULL), 0); /* warm-up */
  f->h.refuse_begin = 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, 2, &rep), 0);
  assert_outputs(f, 2);
  /* The first module's capture was refused and ran eagerly; the others were captured. */
  assert_int_equal(rep.fallbacks, 1);
  assert_int_equal(f->h.begins, MODS - 1);
  cgrt_stats s = stats(f);
  assert_int_equal(s.fallbacks, 1);
  assert_int_equal(s.captures, MODS - 1);
  assert_int_equal(s.live_graphs, MODS - 1);
  assert_int_equal(f->capture_calls, MODS - 1);
  /* The refused key captures at its next call. */
  assert_int_equal(step(f, 2, NULL), 0);
  assert_outputs(f, 2);
  assert_int_equal(stats(f).live_graphs, MODS);
  assert_bracketed(f);
  fixture_close(f);
}

static void failed_end_discards_the_graph(void **state) {
  (void)state;
  struct fixture *f = fixture_open("local", "inference_scope = block\n[inference]\nmax_tokens = 8");
  assert_int_equal(step(f, 8, NULL), 0); /* warm-up */
  f->h.fail_end = 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, 8, &rep), 0);
  assert_outputs(f, 8);
  assert_int_equal(rep.fallbacks, 1);
  cgrt_stats s = stats(f);
  assert_int_equal(s.captures, 0);
  assert_int_equal(s.live_graphs, 0);
  assert_int_equal(f->h.begins, 1);
  /* Captured again next time, and replayed after. */
  for (int i = 0; i < 2; i++) {
    assert_int_equal(step(f, 8, &rep), 0);
    assert_outputs(f, 8);
  }
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(stats(f).live_graphs, 1);
  assert_bracketed(f);
  fixture_close(f);
}

static void invalidated_capture_still_ends(void **state) {
  (void)state;
  struct fixture *f = fixture_open("local", "inference_scope = block\n[inference]\nmax_tokens = 8");
  assert_int_equal(step(f, 8, NULL), 0);
  f->rt->faults.capture_sync = 1; /* a synchronizing call inside the captured body */
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(f, 8, &rep), 0);
  assert_outputs(f, 8);
  assert_int_equal(rep.fallbacks, 1);
  assert_int_equal(f->h.begins, 1);
  assert_bracketed(f);
  fixture_close(f);
}

/* A capture a backend begins by hand and leaves open: closed by the core, and the host told. */
static void stray_capture_gets_its_end(void **state) {
  (void)state;
  char ini[4096];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = stray_capture\nbackend_path = %s\n[runtime]\ndriver = host\n"
           "log = off\n",
           getenv("CGRT_TEST_FIXTURES") ? getenv("CGRT_TEST_FIXTURES") : ".");
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open_string(&rt, ini), 0);
  struct hooks h = {.stream = cgrt_stream(rt), .thread = pthread_self()};
  assert_int_equal(cgrt_set_capture_hooks(rt, on_begin, on_end, &h), 0);
  struct fixture unused = {0};
  cgrt_step_desc d = {
      .struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .body = body, .user = &unused};
  assert_int_equal(cgrt_step(rt, &d, NULL), CGRT_E_CAPTURE);
  assert_int_equal(h.begins, 1);
  assert_int_equal(h.ends, 1);
  assert_int_equal(h.depth, 0);
  /* A refusing begin hook: the backend's hand capture fails and nothing is owed. */
  h.refuse_begin = 1;
  assert_int_equal(cgrt_step(rt, &d, NULL), CGRT_E_CALLBACK);
  assert_non_null(strstr(cgrt_last_error(rt), "capture begin hook returned 7"));
  assert_int_equal(h.begins, 1);
  assert_int_equal(h.ends, 1);
  assert_int_equal(h.wrong_stream + h.wrong_thread, 0);
  cgrt_close(rt);
}

/* ---------------------------------------------------------------- the call itself */

static int set_hooks_in_body(const cgrt_ctx *ctx, void *user) {
  (void)user;
  return cgrt_set_capture_hooks(ctx->rt, NULL, NULL, NULL);
}

static void hooks_refused_inside_a_step_and_removable(void **state) {
  (void)state;
  assert_int_equal(cgrt_set_capture_hooks(NULL, on_begin, on_end, NULL), CGRT_E_INVAL);
  struct fixture *f = fixture_open("local", "inference_scope = layer\n[inference]\nmax_tokens = 8");
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_INFER,
                      .tokens = 1,
                      .body = set_hooks_in_body,
                      .user = f};
  assert_int_equal(cgrt_step(f->rt, &d, NULL), CGRT_E_CALLBACK);
  assert_non_null(strstr(cgrt_last_error(f->rt), "body callback"));
  /* Removed: captures happen and the hooks hear nothing. */
  assert_int_equal(cgrt_set_capture_hooks(f->rt, NULL, NULL, NULL), 0);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(step(f, 1, NULL), 0);
    assert_outputs(f, 1);
  }
  assert_int_equal(stats(f).captures, MODS);
  assert_int_equal(f->h.begins + f->h.ends, 0);
  fixture_close(f);
}

/* Other backends' captures go through the same helpers: full_iteration graphs the body. */
static void full_iteration_is_bracketed(void **state) {
  (void)state;
  struct fixture *f = fixture_open("full_iteration", "[host]\nnan_check = off");
  for (int i = 0; i < 4; i++) {
    cgrt_step_desc d = {
        .struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .body = body, .user = f};
    memset(f->out, 0, sizeof(f->out));
    assert_int_equal(cgrt_step(f->rt, &d, NULL), 0);
    assert_int_equal(cgrt_synchronize(f->rt), 0);
    assert_outputs(f, 0);
  }
  assert_int_equal(stats(f).captures, 1);
  assert_int_equal(f->h.begins, 1);
  assert_int_equal(f->body_captures, 1);
  assert_bracketed(f);
  fixture_close(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layer_captures_are_bracketed),
      cmocka_unit_test(block_captures_are_bracketed),
      cmocka_unit_test(refused_begin_runs_eagerly),
      cmocka_unit_test(failed_end_discards_the_graph),
      cmocka_unit_test(invalidated_capture_still_ends),
      cmocka_unit_test(stray_capture_gets_its_end),
      cmocka_unit_test(hooks_refused_inside_a_step_and_removable),
      cmocka_unit_test(full_iteration_is_bracketed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
