/*
 * faults.h - one fault-injection suite for both drivers (tests/unit/test_faults.c runs it on the
 * host driver, tests/gpu/test_faults.c on the cuda driver). For each fault: the step reports it,
 * the stream is never left capturing, the work of the step is still done (eagerly), and the
 * runtime keeps working. Faults are armed in rt->faults and injected by the core where it calls
 * the driver (struct cgrt_faults, core/src/faults.h), so they are the same on both drivers; the
 * synchronizing call inside a capture is a real stream sync.
 *
 * The module's device work is a host function (captured like a kernel): y[0] += x[0], with the
 * addresses taken from its args, so results can be checked exactly after every step.
 */
#ifndef CGRT_TEST_FAULTS_H
#define CGRT_TEST_FAULTS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "runtime.h"

static const char *faults_driver = "host"; /* set by the test program */

struct fault_host {
  cgrt_runtime *rt;
  cgrt_module *m;
  double *x, *y;
  double x2[1]; /* a second input buffer, for moved-buffer tests */
  double expect;
  int fail_module; /* 1: the module returns 9 while capturing; 2: always */
  int warned;      /* the log said the key stays eager */
  struct fault_params {
    const double *x;
    double *y;
  } params[1024];
  int num_params;
};

static void fault_work(void *arg) {
  struct fault_params *p = arg;
  p->y[0] += p->x[0];
}

static int fault_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fault_host *f = user;
  if (f->fail_module == 2 || (f->fail_module == 1 && ctx->mode == CGRT_MODE_CAPTURE))
    return 9;
  struct fault_params *p = &f->params[f->num_params++ % 1024];
  p->x = args->buffers[0].ptr;
  p->y = args->buffers[1].ptr;
  return cgrt_enqueue_host(ctx, fault_work, p);
}

static int fault_body(const cgrt_ctx *ctx, void *user) {
  struct fault_host *f = user;
  cgrt_buffer b[2] = {{f->x, sizeof(double), CGRT_IN, "x"},
                      {f->y, sizeof(double), CGRT_INOUT, "y"}};
  cgrt_args a = {.struct_size = sizeof(a), .key = 1, .buffers = b, .num_buffers = 2};
  return cgrt_forward(f->rt, f->m, ctx, &a);
}

static void fault_log(void *user, cgrt_log_level level, const char *msg) {
  (void)level;
  if (strstr(msg, "runs eagerly from now on"))
    ((struct fault_host *)user)->warned = 1;
}

static struct fault_host *fault_open(const char *rebind) {
  struct fault_host *f = calloc(1, sizeof(*f));
  f->x = calloc(1, sizeof(double));
  f->y = calloc(1, sizeof(double));
  f->x[0] = 1.5;
  f->x2[0] = 4.0;
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 1\nrebind = %s\n[runtime]\ndriver = %s\n"
           "log = warn\n",
           rebind, faults_driver);
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = fault_log, .log_user = f};
  if (cgrt_open_ex(&f->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  cgrt_module_desc d = {.struct_size = sizeof(d),
                        .name = "layer0.mlp",
                        .kind = CGRT_KIND_MLP,
                        .forward = fault_module,
                        .user = f};
  assert_int_equal(cgrt_module_register(f->rt, &d, &f->m), 0);
  return f;
}

static void fault_close(struct fault_host *f) {
  assert_int_equal(cgrt_close(f->rt), 0);
  free(f->x);
  free(f->y);
  free(f);
}

static void assert_not_capturing(struct fault_host *f) {
  int active = 1;
  assert_int_equal(f->rt->dev.drv->capture_status(&f->rt->dev, f->rt->stream, &active), 0);
  assert_false(active);
}

/* One step; checks the result of every call so far. Returns the step's status. */
static int fault_step(struct fault_host *f, cgrt_step_report *rep) {
  cgrt_step_report local = {.struct_size = sizeof(local)};
  cgrt_step_desc d = {
      .struct_size = sizeof(d), .phase = CGRT_PHASE_EVAL, .body = fault_body, .user = f};
  int rc = cgrt_step(f->rt, &d, rep ? rep : &local);
  assert_not_capturing(f);
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  if (rc == 0) {
    f->expect += f->x[0];
    if (f->y[0] != f->expect)
      fail_msg("after a step y = %g, expected %g: work lost or doubled", f->y[0], f->expect);
  }
  return rc;
}

static cgrt_stats fault_stats(struct fault_host *f) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  return s;
}

/* Warm-up, then the capture step meets the fault; the next steps capture and replay. */
static void fault_then_recover(int *flag_of(struct fault_host *)) {
  struct fault_host *f = fault_open("update");
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_WARMUP);
  *flag_of(f) = 1;
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.fallbacks, 1);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(rep.graphs_built, 0);
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(fault_stats(f).fallbacks, 1);
  fault_close(f);
}

static int *flag_capture_sync(struct fault_host *f) {
  return &f->rt->faults.capture_sync;
}

static int *flag_instantiate(struct fault_host *f) {
  return &f->rt->faults.instantiate;
}

static void capture_invalidated_falls_back(void **state) {
  (void)state;
  fault_then_recover(flag_capture_sync);
}

static void instantiate_failure_falls_back(void **state) {
  (void)state;
  fault_then_recover(flag_instantiate);
}

static void repeated_invalidation_keeps_key_eager(void **state) {
  (void)state;
  struct fault_host *f = fault_open("update");
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(fault_step(f, &rep), 0);
  for (int i = 0; i < 2; i++) {
    f->rt->faults.capture_sync = 1;
    assert_int_equal(fault_step(f, &rep), 0);
    assert_int_equal(rep.fallbacks, 1);
  }
  assert_true(f->warned);
  /* No more capture attempts for that key: eager, no fallback, still right. */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(fault_step(f, &rep), 0);
    assert_int_equal(rep.mode, CGRT_MODE_EAGER);
    assert_int_equal(rep.fallbacks, 0);
  }
  /* Releasing the graphs gives the key another chance. */
  assert_int_equal(cgrt_release_graphs(f->rt), 0);
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  fault_close(f);
}

static void update_refused_reinstantiates(void **state) {
  (void)state;
  struct fault_host *f = fault_open("update");
  for (int i = 0; i < 3; i++)
    assert_int_equal(fault_step(f, NULL), 0);
  cgrt_stats before = fault_stats(f);
  double *own = f->x;
  f->x = f->x2; /* the input moved: the executable is updated, and the driver refuses */
  f->rt->faults.update = 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(fault_step(f, &rep), 0);
  cgrt_stats after = fault_stats(f);
  assert_int_equal(after.update_refusals - before.update_refusals, 1);
  assert_int_equal(after.instantiations - before.instantiations, 1);
  assert_int_equal(after.live_graphs, 1);
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  f->x = own; /* fault_close frees it */
  fault_close(f);
}

static void out_of_memory_falls_back(void **state) {
  (void)state;
  /*
   * rebind = copy allocates the executable's private buffers at capture. They are device memory
   * on the cuda driver, which the host-function module cannot touch: the GPU program runs its
   * own version of this test with a kernel (tests/gpu/test_faults.c).
   */
  if (strcmp(faults_driver, "host") != 0) {
    skip();
    return;
  }
  struct fault_host *f = fault_open("copy");
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(fault_step(f, &rep), 0);
  f->rt->faults.mem_alloc = 1;
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.fallbacks, 1);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  fault_close(f);
}

static void launch_failure_runs_eagerly(void **state) {
  (void)state;
  struct fault_host *f = fault_open("update");
  for (int i = 0; i < 3; i++)
    assert_int_equal(fault_step(f, NULL), 0);
  f->rt->faults.launch = 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.fallbacks, 1);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(fault_stats(f).live_graphs, 0); /* the executable was dropped */
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE); /* still warm: captured again at once */
  fault_close(f);
}

static void callback_error_in_capture_runs_eagerly(void **state) {
  (void)state;
  struct fault_host *f = fault_open("update");
  assert_int_equal(fault_step(f, NULL), 0);
  f->fail_module = 1; /* fails only while being captured: the eager retry succeeds */
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.fallbacks, 1);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  f->fail_module = 0;
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  fault_close(f);
}

static void callback_error_is_reported(void **state) {
  (void)state;
  struct fault_host *f = fault_open("update");
  assert_int_equal(fault_step(f, NULL), 0);
  f->fail_module = 2; /* fails however it runs: the step reports it */
  assert_int_equal(fault_step(f, NULL), CGRT_E_CALLBACK);
  if (!strstr(cgrt_last_error(f->rt), "module 'layer0.mlp' forward returned 9"))
    fail_msg("%s", cgrt_last_error(f->rt));
  f->fail_module = 0;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(fault_step(f, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  fault_close(f);
}

#define FAULT_TESTS                                                                                \
  cmocka_unit_test(capture_invalidated_falls_back),                                                \
      cmocka_unit_test(instantiate_failure_falls_back),                                            \
      cmocka_unit_test(repeated_invalidation_keeps_key_eager),                                     \
      cmocka_unit_test(update_refused_reinstantiates), cmocka_unit_test(out_of_memory_falls_back), \
      cmocka_unit_test(launch_failure_runs_eagerly),                                               \
      cmocka_unit_test(callback_error_in_capture_runs_eagerly),                                    \
      cmocka_unit_test(callback_error_is_reported)

#endif
