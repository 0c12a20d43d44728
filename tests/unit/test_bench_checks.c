/*
 * test_bench_checks.c - the lines `cgrt bench` prints of what went wrong during a run
 * (tools/bench/bench_checks.c), on the host driver: a failed capture, an in-place update the
 * driver refused, executables dropped by max_graphs, steps of a phase the backend has no graphs
 * for and modules whose keys never repeat each show as a number, in text and in JSON.
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

#include "bench.h"
#include "cgrt/cgrt.h"
#include "runtime.h"

struct host {
  cgrt_runtime *rt;
  cgrt_module *m;
  double in, out;
  double *in_ptr; /* the buffer the body passes (a test moves it) */
  uint64_t key;
};

static void work(void *arg) {
  struct host *h = arg;
  h->out = h->in_ptr[0] * 2.0;
}

static int fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, work, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_buffer b[2] = {{h->in_ptr, sizeof(double), CGRT_IN, "in"},
                      {&h->out, sizeof(double), CGRT_OUT, "out"}};
  cgrt_args a = {.struct_size = sizeof(a), .key = h->key, .buffers = b, .num_buffers = 2};
  return cgrt_forward(h->rt, h->m, ctx, &a);
}

static struct host *host_open(const char *cuda_graph) {
  struct host *h = calloc(1, sizeof(*h));
  char ini[512];
  snprintf(ini, sizeof(ini), "[cuda_graph]\n%s\n[runtime]\ndriver = host\nlog = off\n", cuda_graph);
  if (cgrt_open_string(&h->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  cgrt_module_desc d = {
      .struct_size = sizeof(d), .name = "layer0", .kind = CGRT_KIND_MLP, .forward = fwd, .user = h};
  assert_int_equal(cgrt_module_register(h->rt, &d, &h->m), 0);
  h->in = 1.0;
  h->in_ptr = &h->in;
  return h;
}

static void host_close(struct host *h) {
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

static void step(struct host *h, cgrt_phase phase) {
  cgrt_step_desc d = {.struct_size = sizeof(d), .phase = phase, .body = body, .user = h};
  assert_int_equal(cgrt_step(h->rt, &d, NULL), 0);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
}

/* What bench_print_checks printed (json: its JSON fields). */
static char *printed(cgrt_runtime *rt, int json) {
  fflush(stdout);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  int saved = dup(STDOUT_FILENO);
  assert_true(saved >= 0);
  assert_true(dup2(fileno(tmp), STDOUT_FILENO) >= 0);
  bench_print_checks(rt, json);
  fflush(stdout);
  assert_true(dup2(saved, STDOUT_FILENO) >= 0);
  close(saved);
  long n = ftell(tmp);
  assert_true(n >= 0);
  char *text = calloc((size_t)n + 1, 1);
  rewind(tmp);
  assert_int_equal(fread(text, 1, (size_t)n, tmp), (size_t)n);
  fclose(tmp);
  return text;
}

static void expect(const char *text, const char *want) {
  if (!strstr(text, want))
    fail_msg("expected '%s' in:\n%s", want, text);
}

/* What bench_print_checks prints (json: its JSON fields) holds `want`. */
static void expect_printed(cgrt_runtime *rt, int json, const char *want) {
  char *text = printed(rt, json);
  expect(text, want);
  free(text);
}

static void quiet_run_prints_no_lines(void **state) {
  (void)state;
  struct host *h = host_open("impl = local\nwarmup_steps = 1");
  for (int i = 0; i < 4; i++)
    step(h, CGRT_PHASE_TRAIN);
  /* only the backend's own figures, which every run prints */
  char *text = printed(h->rt, 0);
  if (strncmp(text, "backend figures: ", 17) != 0 || strchr(text, '\n') != text + strlen(text) - 1)
    fail_msg("expected the backend's figures alone:\n%s", text);
  free(text);
  host_close(h);
}

static void each_wrong_thing_is_a_number(void **state) {
  (void)state;
  struct host *h = host_open("impl = local\nwarmup_steps = 1\nmax_graphs = 1\nrebind = update");
  step(h, CGRT_PHASE_TRAIN); /* key 0: warm-up */
  step(h, CGRT_PHASE_TRAIN); /* captured */
  /* its buffer moved and the driver refuses the update: recorded and instantiated anew */
  double moved = 1.0;
  h->in_ptr = &moved;
  h->rt->faults.update = 1;
  step(h, CGRT_PHASE_TRAIN);
  /* key 1 takes the one executable max_graphs allows: key 0's is dropped */
  h->key = 1;
  step(h, CGRT_PHASE_TRAIN);
  step(h, CGRT_PHASE_TRAIN);
  /* key 2's capture meets a synchronizing call: run eagerly */
  h->key = 2;
  step(h, CGRT_PHASE_TRAIN);
  h->rt->faults.capture_sync = 1;
  step(h, CGRT_PHASE_TRAIN);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(h->rt, &s), 0);
  assert_int_equal(s.update_refusals, 1);
  assert_int_equal(s.fallbacks, 1);
  assert_true(s.evictions >= 1);
  char *text = printed(h->rt, 0);
  expect(text, "checks: 1 fallbacks (failed captures run eagerly)");
  char want[512];
  snprintf(want, sizeof(want),
           "graphs: 1 in-place updates refused by the driver (recorded and instantiated anew), "
           "%llu executables dropped by max_graphs or the memory budget (0 for the budget), 0 "
           "steps of a phase the backend has no graphs for run eagerly by cgrt, 0 modules or step "
           "phases whose keys never repeat (never captured)\n",
           (unsigned long long)s.evictions);
  expect(text, want);
  free(text);
  expect_printed(h->rt, 1, "\"fallbacks\":1,");
  expect_printed(h->rt, 1, "\"update_refusals\":1");
  host_close(h);
}

static void phase_without_graphs_is_counted(void **state) {
  (void)state;
  struct host *h = host_open("impl = transformer_engine\nmodules = mlp\nwarmup_steps = 1");
  for (int i = 0; i < 3; i++)
    step(h, CGRT_PHASE_INFER);
  expect_printed(h->rt, 0,
                 "graphs: 0 in-place updates refused by the driver (recorded and instantiated "
                 "anew), 0 executables dropped by max_graphs or the memory budget (0 for the "
                 "budget), 3 steps of a phase the backend has no graphs for run eagerly by cgrt, 0 "
                 "modules or step phases whose keys never repeat (never captured)\n");
  host_close(h);
}

static void keys_that_never_repeat_are_counted(void **state) {
  (void)state;
  struct host *h = host_open("impl = local\nwarmup_steps = 1");
  for (int i = 0; i < 70; i++) { /* a key new on every call: none is ever captured */
    h->key = 100 + (uint64_t)i;
    step(h, CGRT_PHASE_TRAIN);
  }
  expect_printed(h->rt, 0,
                 "run eagerly by cgrt, 1 modules or step phases whose keys never repeat (never "
                 "captured)\n");
  expect_printed(h->rt, 1, "\"unrepeated_units\":1");
  host_close(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(quiet_run_prints_no_lines),
      cmocka_unit_test(each_wrong_thing_is_a_number),
      cmocka_unit_test(phase_without_graphs_is_counted),
      cmocka_unit_test(keys_that_never_repeat_are_counted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
