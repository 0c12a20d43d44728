/*
 * test_host_copy.c - cgrt_enqueue_host_copy passes its argument by value, as CUDA passes a
 * kernel's parameters: the host may reuse the argument at once, and a captured call replays the
 * values of its capture; cgrt_enqueue_host passes a pointer, read when the function runs (issue
 * 39). On the host driver, where work runs only at a synchronize, so a pointer read late is seen
 * late every time. Leaks (a record never freed) show under the ASan build of CI.
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

struct rec {
  int64_t step;
  char tag[24];
};

struct host {
  cgrt_runtime *rt;
  cgrt_module *m;
  struct rec live;     /* what the module passes: changed by the host every step */
  struct rec seen[64]; /* what the host functions saw, in the order they ran */
  int nseen;
  int by_value;
};

static struct host *the_host;

static void note(void *arg) {
  struct host *h = the_host;
  if (h->nseen < 64)
    h->seen[h->nseen] = *(struct rec *)arg;
  h->nseen++;
}

static int fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct host *h = user;
  return h->by_value ? cgrt_enqueue_host_copy(ctx, note, &h->live, sizeof(h->live))
                     : cgrt_enqueue_host(ctx, note, &h->live);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  return cgrt_forward(h->rt, h->m, ctx, &a);
}

static struct host *open_host(const char *impl, int by_value) {
  struct host *h = calloc(1, sizeof(*h));
  assert_non_null(h);
  h->by_value = by_value;
  char ini[256];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = %s\nwarmup_steps = 1\n[runtime]\ndriver = host\nlog = off\n",
           impl);
  assert_int_equal(cgrt_open_string(&h->rt, ini), 0);
  cgrt_module_desc d = {.struct_size = sizeof(d),
                        .name = "layer0.attn",
                        .kind = CGRT_KIND_ATTN,
                        .forward = fwd,
                        .user = h};
  assert_int_equal(cgrt_module_register(h->rt, &d, &h->m), 0);
  the_host = h;
  return h;
}

/* Steps 0..n-1, each changing h->live after cgrt_step returned and before the work runs. */
static void run(struct host *h, int n) {
  for (int s = 0; s < n; s++) {
    h->live.step = s;
    snprintf(h->live.tag, sizeof(h->live.tag), "step %d", s);
    cgrt_step_desc d = {
        .struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .tokens = 4, .body = body, .user = h};
    assert_int_equal(cgrt_step(h->rt, &d, NULL), 0);
    h->live.step = -1; /* the host reuses its struct at once */
    strcpy(h->live.tag, "overwritten");
  }
  assert_int_equal(cgrt_synchronize(h->rt), 0);
}

static void eager_copies_are_the_values_at_the_call(void **state) {
  (void)state;
  struct host *h = open_host("none", 1);
  run(h, 5);
  assert_int_equal(h->nseen, 5);
  for (int s = 0; s < 5; s++) {
    assert_int_equal(h->seen[s].step, s);
    char want[24];
    snprintf(want, sizeof(want), "step %d", s);
    assert_string_equal(h->seen[s].tag, want);
  }
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

/* A pointer is read when the work runs: here, after the host overwrote it. */
static void pointers_are_read_when_the_work_runs(void **state) {
  (void)state;
  struct host *h = open_host("none", 0);
  run(h, 3);
  assert_int_equal(h->nseen, 3);
  for (int s = 0; s < 3; s++)
    assert_int_equal(h->seen[s].step, -1);
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

/* Captured at step 1 (warm-up 1): every replay passes step 1's values, as a kernel's parameters. */
static void captured_copies_replay_the_capture(void **state) {
  (void)state;
  struct host *h = open_host("local\nmodules =", 1);
  run(h, 6);
  assert_int_equal(h->nseen, 6);
  assert_int_equal(h->seen[0].step, 0); /* warm-up: eager */
  for (int s = 1; s < 6; s++)
    assert_int_equal(h->seen[s].step, 1); /* the capture's copy, replayed */
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(h->rt, &st), 0);
  assert_int_equal(st.steps_by_mode[CGRT_MODE_REPLAY], 4);
  /* Released with the graphs; a new capture copies anew. */
  assert_int_equal(cgrt_release_graphs(h->rt), 0);
  h->nseen = 0;
  run(h, 3);
  assert_int_equal(h->seen[2].step, 1); /* warm-up 0, capture 1, replay of capture 1 */
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

static void bad_arguments_refused(void **state) {
  (void)state;
  struct host *h = open_host("none", 1);
  cgrt_ctx ctx = {.struct_size = sizeof(ctx), .rt = h->rt, .stream = cgrt_stream(h->rt)};
  assert_int_equal(cgrt_enqueue_host_copy(NULL, note, &h->live, 8), CGRT_E_INVAL);
  assert_int_equal(cgrt_enqueue_host_copy(&ctx, NULL, &h->live, 8), CGRT_E_INVAL);
  assert_int_equal(cgrt_enqueue_host_copy(&ctx, note, NULL, 8), CGRT_E_INVAL);
  assert_int_equal(cgrt_enqueue_host_copy(&ctx, note, &h->live, SIZE_MAX), CGRT_E_INVAL);
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(eager_copies_are_the_values_at_the_call),
      cmocka_unit_test(pointers_are_read_when_the_work_runs),
      cmocka_unit_test(captured_copies_replay_the_capture),
      cmocka_unit_test(bad_arguments_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
