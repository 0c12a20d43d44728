/*
 * test_last_error.c - every failure has a sentence, and cgrt_last_error follows one rule (issue
 * 40): it is the sentence of the last public call on the runtime that failed; a call that returns
 * 0 leaves it as it was, whatever it met on its way (a step above the largest bucket run eagerly,
 * a capture that fell back). A backend callback that fails without a sentence gets one from the
 * core naming the backend, the callback and the code; a failing stats callback still gives the
 * host the core's counters.
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

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: \"%s\"", needle, haystack);
}

static void tick(void *arg) {
  (void)arg;
}

static int fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, tick, user);
}

struct host {
  cgrt_runtime *rt;
  cgrt_module *m;
  uint64_t key;
};

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = h->key};
  return cgrt_forward(h->rt, h->m, ctx, &a);
}

static void open_host(struct host *h, const char *cuda_graph) {
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\n%s\nbackend_path = %s\nwarmup_steps = 1\n[inference]\nbuckets = "
           "list\nlist = 4 8\n[runtime]\ndriver = host\nlog = off\n",
           cuda_graph, getenv("CGRT_TEST_FIXTURES") ? getenv("CGRT_TEST_FIXTURES") : ".");
  memset(h, 0, sizeof(*h));
  if (cgrt_open_string(&h->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  cgrt_module_desc d = {
      .struct_size = sizeof(d), .name = "l0.attn", .kind = CGRT_KIND_ATTN, .forward = fwd};
  assert_int_equal(cgrt_module_register(h->rt, &d, &h->m), 0);
  h->key = 1;
}

static int step(struct host *h, cgrt_phase phase, int64_t tokens) {
  cgrt_step_desc d = {
      .struct_size = sizeof(d), .phase = phase, .tokens = tokens, .body = body, .user = h};
  return cgrt_step(h->rt, &d, NULL);
}

static void unexplained_failures_get_a_sentence(void **state) {
  (void)state;
  struct host h;
  open_host(&h, "impl = mute");
  assert_int_equal(step(&h, CGRT_PHASE_TRAIN, 8), CGRT_E_DEVICE);
  assert_contains(cgrt_last_error(h.rt), "backend 'mute'");
  assert_contains(cgrt_last_error(h.rt), "its step callback returned");
  assert_contains(cgrt_last_error(h.rt), "without saying why");
  h.key = 7;
  assert_int_equal(step(&h, CGRT_PHASE_TRAIN, 2), CGRT_E_REBIND);
  assert_contains(cgrt_last_error(h.rt), "its call callback returned");
  /* A failing stats callback: an error with a sentence, and the core's own counters. */
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(h.rt, &st), CGRT_E_NOMEM);
  assert_contains(cgrt_last_error(h.rt), "its stats callback returned");
  assert_contains(cgrt_last_error(h.rt), "the core's own counters");
  assert_int_equal(st.steps, 2);
  assert_int_equal(st.captures, 0); /* not the 999 the failing backend wrote */
  assert_int_equal(cgrt_close(h.rt), 0);
}

/* errno-like: the last failed call's sentence, kept through later calls that succeed. */
static void the_last_failed_calls_sentence_stays(void **state) {
  (void)state;
  struct host h;
  open_host(&h, "impl = local\nmodules =");
  assert_string_equal(cgrt_last_error(h.rt), "");
  /* Handled outcomes do not set it: a step above the largest bucket runs eagerly. */
  assert_int_equal(step(&h, CGRT_PHASE_INFER, 100), 0);
  assert_string_equal(cgrt_last_error(h.rt), "");
  cgrt_step_desc bad = {.struct_size = sizeof(bad), .phase = CGRT_PHASE_TRAIN};
  assert_int_equal(cgrt_step(h.rt, &bad, NULL), CGRT_E_INVAL);
  assert_contains(cgrt_last_error(h.rt), "desc->body is NULL");
  /* Later calls that succeed leave it: it is what the host reads after a failure. */
  for (int s = 0; s < 4; s++)
    assert_int_equal(step(&h, CGRT_PHASE_TRAIN, 4), 0);
  assert_int_equal(cgrt_synchronize(h.rt), 0);
  assert_contains(cgrt_last_error(h.rt), "desc->body is NULL");
  /* An argument refused before the call takes the runtime still says so, on this thread. */
  assert_int_equal(cgrt_stats_get(h.rt, NULL), CGRT_E_INVAL);
  assert_contains(cgrt_last_error(h.rt), "cgrt_stats_get: an argument is NULL");
  assert_int_equal(cgrt_close(h.rt), 0);
}

/* module_added and figures (host API minor 7), through a fixture backend. */
static void emit_figure(void *user, const char *name, uint64_t value) {
  char *out = user;
  size_t n = strlen(out);
  snprintf(out + n, 512 - n, "%s=%llu;", name, (unsigned long long)value);
}

static void modules_are_announced_and_figures_reported(void **state) {
  (void)state;
  struct host h;
  open_host(&h, "impl = census");
  /* open_host registered l0.attn (id 0); two more, and two the backend refuses */
  cgrt_module *m2 = NULL, *bad = NULL;
  cgrt_module_desc d = {
      .struct_size = sizeof(d), .name = "l1.mlp", .kind = CGRT_KIND_MLP, .forward = fwd};
  assert_int_equal(cgrt_module_register(h.rt, &d, &m2), 0);
  d.name = "refuse-me";
  assert_int_equal(cgrt_module_register(h.rt, &d, &bad), CGRT_E_INVAL);
  assert_null(bad);
  assert_contains(cgrt_last_error(h.rt), "'refuse-me' is not welcome here");
  d.name = "refuse-mute";
  assert_int_equal(cgrt_module_register(h.rt, &d, &bad), CGRT_E_INVAL);
  assert_contains(cgrt_last_error(h.rt), "its module_added callback returned");
  d.name = "l2.attn";
  assert_int_equal(cgrt_module_register(h.rt, &d, &m2), 0);
  for (int s = 0; s < 3; s++)
    assert_int_equal(step(&h, CGRT_PHASE_TRAIN, 2), 0);
  char figures[512] = "";
  assert_int_equal(cgrt_backend_figures(h.rt, emit_figure, figures), 0);
  /* the refused modules took no id: the third module registered is id 2 */
  assert_string_equal(figures, "modules_seen=3;calls_counted=3;last_module_id=2;");
  assert_int_equal(cgrt_backend_figures(h.rt, NULL, NULL), CGRT_E_INVAL);
  assert_int_equal(cgrt_close(h.rt), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unexplained_failures_get_a_sentence),
      cmocka_unit_test(the_last_failed_calls_sentence_stays),
      cmocka_unit_test(modules_are_announced_and_figures_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
