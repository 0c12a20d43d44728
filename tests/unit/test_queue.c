/*
 * test_queue.c - [runtime] max_queued_steps on the host driver: before step i is issued, step
 * i - N has finished on the device, under every backend; nothing waits without the key or at 0;
 * the waits are counted (cgrt_stats.queue_waits, queue_wait_ns) and left out of the step's
 * host_ns; host functions the wait runs may not call cgrt; a failed wait or record is said and
 * leaves the runtime usable, a step's own error first.
 *
 * The host driver runs a stream's work only when something waits for it, so what has run after
 * each step is exactly what cgrt waited for: each step's two layers are host functions, and the
 * second counts the steps whose work has run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "runtime.h"

#define STEPS 12

struct host {
  cgrt_runtime *rt;
  cgrt_module *m[2];
  int layer_of[2];
  int dcp;       /* impl = dynamic_cp: steps carry packed sequences */
  int works;     /* layers' work run on the device */
  int done;      /* steps whose work has run: the second layer's runs */
  long sleep_ms; /* what the second layer's work takes the host (it runs on the host) */
  int call_rc;   /* what a cgrt call from that work returned (call_from_work) */
  int call_from_work;
  int body_rc; /* what the body returns after its calls */
};

static struct host *the_host;

static void layer_run(void *arg) {
  int l = *(int *)arg;
  struct host *h = the_host;
  h->works++;
  if (l == 0)
    return;
  if (h->sleep_ms) {
    struct timespec ts = {h->sleep_ms / 1000, (h->sleep_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (h->call_from_work)
    h->call_rc = cgrt_synchronize(h->rt);
  h->done++;
}

static int layer_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, layer_run, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  for (int l = 0; l < 2; l++) {
    int rc = cgrt_forward(h->rt, h->m[l], ctx, &a);
    if (rc != 0)
      return rc;
  }
  return h->body_rc;
}

/* A runtime of `cuda_graph` ([cuda_graph] lines) with `runtime` ([runtime] lines) and `extra`. */
static struct host *host_open(const char *cuda_graph, const char *runtime, const char *extra) {
  struct host *h = calloc(1, sizeof(*h));
  assert_non_null(h);
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\n%s\nwarmup_steps = 1\n[runtime]\ndriver = host\nlog = off\n%s\n"
           "[host]\nnan_check = off\n%s\n",
           cuda_graph, runtime, extra ? extra : "");
  if (cgrt_open_string(&h->rt, ini) != 0)
    fail_msg("open (%s, %s): %s", cuda_graph, runtime, cgrt_last_error(NULL));
  h->dcp = strstr(cuda_graph, "dynamic_cp") != NULL;
  for (int l = 0; l < 2; l++) {
    h->layer_of[l] = l;
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = l ? "layer0.mlp" : "layer0.attn",
                          .kind = l ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .layer = 0,
                          .forward = layer_fwd,
                          .user = &h->layer_of[l]};
    assert_int_equal(cgrt_module_register(h->rt, &d, &h->m[l]), 0);
  }
  if (h->dcp)
    assert_int_equal(cgrt_set_world_comm(h->rt, NULL), 0);
  the_host = h;
  return h;
}

static void host_close(struct host *h) {
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

static int step(struct host *h, cgrt_phase phase, cgrt_step_report *rep) {
  static const int32_t lens[] = {3, 5};
  cgrt_step_desc d = {
      .struct_size = sizeof(d), .phase = phase, .tokens = 8, .body = body, .user = h};
  if (h->dcp) {
    d.seqlens = lens;
    d.num_sequences = 2;
  }
  return cgrt_step(h->rt, &d, rep);
}

static cgrt_stats stats_of(struct host *h) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(h->rt, &s), 0);
  return s;
}

/*
 * STEPS steps issued without a sync under max_queued_steps = n: after step i, exactly the steps
 * up to i - n have run (the wait before step i ran step i - n's work, and nothing more), each
 * wait counted; a sync runs the rest.
 */
static void run_bounded(const char *cuda_graph, cgrt_phase phase, int n, const char *extra) {
  char runtime[64];
  snprintf(runtime, sizeof(runtime), "max_queued_steps = %d", n);
  struct host *h = host_open(cuda_graph, runtime, extra);
  for (int i = 0; i < STEPS; i++) {
    if (step(h, phase, NULL) != 0)
      fail_msg("%s, step %d: %s", cuda_graph, i, cgrt_last_error(h->rt));
    const int want = i >= n ? i - n + 1 : 0;
    if (h->done != want)
      fail_msg("%s, max_queued_steps = %d: after step %d, %d steps' work had run, not %d",
               cuda_graph, n, i, h->done, want);
  }
  const int waits = STEPS > n ? STEPS - n : 0;
  cgrt_stats s = stats_of(h);
  assert_int_equal(s.queue_waits, waits);
  assert_int_equal(s.steps, STEPS);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->done, STEPS);
  assert_int_equal(h->works, 2 * STEPS);
  /* the work already done is not waited for again */
  assert_int_equal(step(h, phase, NULL), 0);
  assert_int_equal(stats_of(h).queue_waits, waits);
  host_close(h);
}

/* The spec's case: 5 steps at max_queued_steps = 2, the work of steps 0, 1 and 2 run. */
static void two_queued_steps(void **state) {
  (void)state;
  struct host *h = host_open("impl = none", "max_queued_steps = 2", NULL);
  for (int i = 0; i < 5; i++)
    assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0);
  assert_int_equal(h->done, 3);
  assert_int_equal(stats_of(h).queue_waits, 3);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->done, 5);
  host_close(h);
}

static void every_backend_is_bounded(void **state) {
  (void)state;
  run_bounded("impl = none", CGRT_PHASE_TRAIN, 2, NULL);
  run_bounded("impl = none", CGRT_PHASE_INFER, 1, NULL);
  run_bounded("impl = local\nmodules =", CGRT_PHASE_TRAIN, 2, NULL);
  run_bounded("impl = local\nmodules =", CGRT_PHASE_TRAIN, 3, NULL);
  run_bounded("impl = local\nmodules =\ninference_scope = block", CGRT_PHASE_INFER, 2,
              "[local]\nby_time = off");
  run_bounded("impl = transformer_engine\nmodules = attn mlp", CGRT_PHASE_TRAIN, 2, NULL);
  run_bounded("impl = full_iteration", CGRT_PHASE_TRAIN, 2, NULL);
  /* its THD slot ring waits for the step graph_slots before on the same bank: 4 bind less */
  run_bounded("impl = dynamic_cp\nmodules = attn mlp", CGRT_PHASE_TRAIN, 2,
              "[dynamic_cp]\ncp_sizes = 1\nmax_packed_tokens = 16\nmax_sequences = 4\n"
              "graph_slots = 4");
  run_bounded("impl = local\nmodules =", CGRT_PHASE_TRAIN, 64, NULL);
}

/* Without the key, or at 0: no event, no wait, nothing run before the host synchronizes. */
static void no_bound_by_default(void **state) {
  (void)state;
  static const char *const runtime[] = {"", "max_queued_steps = 0"};
  static const char *const impls[] = {"impl = none", "impl = local\nmodules ="};
  for (int k = 0; k < 2; k++)
    for (int b = 0; b < 2; b++) {
      struct host *h = host_open(impls[b], runtime[k], NULL);
      assert_int_equal(h->rt->queue.depth, 0);
      for (int i = 0; i < 5; i++)
        assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0);
      assert_int_equal(h->done, 0);
      cgrt_stats s = stats_of(h);
      assert_int_equal(s.queue_waits, 0);
      assert_int_equal(s.queue_wait_ns, 0);
      assert_int_equal(cgrt_synchronize(h->rt), 0);
      assert_int_equal(h->done, 5);
      host_close(h);
    }
}

/*
 * The wait is the host's time before the step is issued: counted in queue_wait_ns, not in the
 * step's host_ns. Each step's work takes 30 ms of the host's time when it runs, in the wait.
 */
static void the_wait_is_timed_apart_from_the_step(void **state) {
  (void)state;
  const long ms = 30;
  struct host *h = host_open("impl = none", "max_queued_steps = 1", NULL);
  h->sleep_ms = ms;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, &rep), 0); /* nothing to wait for */
  assert_int_equal(h->done, 0);
  for (int i = 1; i <= 3; i++) {
    assert_int_equal(step(h, CGRT_PHASE_TRAIN, &rep), 0);
    assert_int_equal(h->done, i); /* the wait ran the step before */
    if (rep.host_ns >= (uint64_t)ms * 1000000u)
      fail_msg("step %d: host_ns %llu counts the wait for the step before", i,
               (unsigned long long)rep.host_ns);
  }
  cgrt_stats s = stats_of(h);
  assert_int_equal(s.queue_waits, 3);
  assert_true(s.queue_wait_ns >= 3 * (uint64_t)ms * 1000000u);
  h->sleep_ms = 0;
  host_close(h);
}

/* The work the wait runs is the device's: a cgrt call from it is refused, as from any host
   function, and the step goes on. */
static void work_run_by_the_wait_may_not_call_cgrt(void **state) {
  (void)state;
  struct host *h = host_open("impl = none", "max_queued_steps = 1", NULL);
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0);
  h->call_from_work = 1;
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0);
  h->call_from_work = 0;
  assert_int_equal(h->done, 1);
  assert_int_equal(h->call_rc, CGRT_E_STATE);
  assert_non_null(strstr(cgrt_last_error(h->rt), "called from a host function (run by cgrt_step)"));
  host_close(h);
}

/* A failed wait: the step is not issued, the sentence says why and what to do; the next step
   runs. */
static void a_failed_wait_is_said_and_the_runtime_goes_on(void **state) {
  (void)state;
  struct host *h = host_open("impl = none", "max_queued_steps = 2", NULL);
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0);
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0);
  h->rt->faults.queue_wait = 1;
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), CGRT_E_DEVICE);
  const char *err = cgrt_last_error(h->rt);
  assert_non_null(strstr(err, "cgrt_step: waiting for step 0 to finish on the device before "
                              "issuing step 2 ([runtime] max_queued_steps = 2) failed: "
                              "event_sync failed (injected fault); step 2 was not issued"));
  assert_non_null(strstr(err, "max_queued_steps = 0 issues steps without this wait"));
  assert_int_equal(h->works, 0);
  assert_int_equal(stats_of(h).steps, 2); /* not issued */
  /* the runtime goes on: step 2 again, then more, bounded again */
  for (int i = 0; i < 3; i++)
    assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0);
  assert_int_equal(stats_of(h).steps, 5);
  assert_int_equal(h->done, 3);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->done, 5);
  host_close(h);
}

/* A failed record: the step's work was issued; the step says so, and a failed step's own error
   comes first (the record's is logged). */
static void a_failed_record_is_said_after_the_steps_own_error(void **state) {
  (void)state;
  struct host *h = host_open("impl = none", "max_queued_steps = 1", NULL);
  h->rt->faults.queue_record = 1;
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), CGRT_E_DEVICE);
  assert_non_null(strstr(cgrt_last_error(h->rt),
                         "cgrt_step: recording the end of step 0 on cgrt's stream for [runtime] "
                         "max_queued_steps = 1 failed: event_record failed (injected fault); step "
                         "0's work was issued, but step 1 will not wait for it"));
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0); /* nothing recorded to wait for */
  assert_int_equal(h->done, 0);
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0); /* waits for step 1, after step 0 */
  assert_int_equal(h->done, 2);
  /* a step that fails and whose record fails: the step's error is returned and kept */
  h->rt->faults.queue_record = 1;
  h->body_rc = 7;
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), CGRT_E_CALLBACK);
  assert_non_null(strstr(cgrt_last_error(h->rt), "returned 7"));
  assert_null(strstr(cgrt_last_error(h->rt), "max_queued_steps"));
  /* a failed step's end is recorded like any other: the next step waits for its work */
  h->body_rc = 7;
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), CGRT_E_CALLBACK);
  h->body_rc = 0;
  const int before = h->done;
  assert_int_equal(step(h, CGRT_PHASE_TRAIN, NULL), 0);
  assert_int_equal(h->done, before + 2); /* the two failed steps' work ran, in order */
  host_close(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_queued_steps),
      cmocka_unit_test(every_backend_is_bounded),
      cmocka_unit_test(no_bound_by_default),
      cmocka_unit_test(the_wait_is_timed_apart_from_the_step),
      cmocka_unit_test(work_run_by_the_wait_may_not_call_cgrt),
      cmocka_unit_test(a_failed_wait_is_said_and_the_runtime_goes_on),
      cmocka_unit_test(a_failed_record_is_said_after_the_steps_own_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
