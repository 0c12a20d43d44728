/*
 * test_streams.c - a step is ordered with the host's work on the legacy default stream (issue 37,
 * README "Streams"), under every backend, on the host driver.
 *
 * The host driver runs a stream's work only when that stream is synchronized, so work on two
 * streams that nothing orders runs in whatever order the syncs come: a race on a GPU is a wrong
 * result here, every time. The host below writes each step's input with work on the legacy
 * stream, runs a step whose four layers compute y = 2x + 1 on cgrt's stream, reads the output
 * with work on the legacy stream and synchronizes only the legacy stream, never cgrt's. Unless
 * cgrt's stream waits for the legacy stream at the step's entry and the legacy stream waits for
 * cgrt's at its exit, the read sees an old output (or none) and the layers an old input.
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

#define LAYERS 4
#define STEPS  200

struct host {
  cgrt_runtime *rt;
  cgrt_module *m[LAYERS];
  int layer_of[LAYERS];
  /* the "device" memory: the input, each layer's output */
  int64_t x, y[LAYERS];
  /* the host's side of the legacy stream */
  int64_t next_input; /* what the fill writes */
  int64_t seen;       /* what the read saw */
};

static struct host *the_host;

static void fill(void *arg) {
  struct host *h = arg;
  h->x = h->next_input;
}

static void read_out(void *arg) {
  struct host *h = arg;
  h->seen = h->y[LAYERS - 1];
}

/* One layer's work on cgrt's stream: y[l] = 2 * (l ? y[l-1] : x) + 1. */
static void layer_run(void *arg) {
  int l = *(int *)arg;
  int64_t in = l ? the_host->y[l - 1] : the_host->x;
  the_host->y[l] = 2 * in + 1;
}

static int layer_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, layer_run, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  for (int l = 0; l < LAYERS; l++) {
    int rc = cgrt_forward(h->rt, h->m[l], ctx, &a);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static struct host *host_open(const char *cuda_graph) {
  struct host *h = calloc(1, sizeof(*h));
  assert_non_null(h);
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\n%s\nwarmup_steps = 2\n[runtime]\ndriver = host\nlog = off\n"
           "[host]\nnan_check = off\n",
           cuda_graph);
  if (cgrt_open_string(&h->rt, ini) != 0)
    fail_msg("open (%s): %s", cuda_graph, cgrt_last_error(NULL));
  for (int l = 0; l < LAYERS; l++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.%s", l, l % 2 ? "mlp" : "attn");
    h->layer_of[l] = l;
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = l % 2 ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .layer = l,
                          .forward = layer_fwd,
                          .user = &h->layer_of[l]};
    assert_int_equal(cgrt_module_register(h->rt, &d, &h->m[l]), 0);
  }
  the_host = h;
  return h;
}

static int64_t expected(int64_t x) {
  for (int l = 0; l < LAYERS; l++)
    x = 2 * x + 1;
  return x;
}

/*
 * STEPS steps, each with its input filled on the legacy stream before it; then, in turn, the output
 * read on the legacy stream with only the legacy stream synchronized, or only cgrt's stream
 * synchronized. Every read must see that step's own result.
 */
static void run_steps(const char *cuda_graph, cgrt_phase phase) {
  struct host *h = host_open(cuda_graph);
  struct cgrt_dev *dev = &h->rt->dev;
  const struct cgrt_driver *drv = dev->drv;
  for (int s = 0; s < STEPS; s++) {
    h->next_input = 1000 + s;
    assert_int_equal(drv->host_fn(dev, CGRT_LEGACY_STREAM, fill, h), 0);
    cgrt_step_desc d = {
        .struct_size = sizeof(d), .phase = phase, .tokens = 8, .body = body, .user = h};
    if (cgrt_step(h->rt, &d, NULL) != 0)
      fail_msg("%s, step %d: %s", cuda_graph, s, cgrt_last_error(h->rt));
    if (s % 2) {
      /* cgrt's stream alone: its layers must have waited for the fill (the entry's wait) */
      assert_int_equal(cgrt_synchronize(h->rt), 0);
      h->seen = h->y[LAYERS - 1];
    } else {
      /* the legacy stream alone: the read must wait for the step (the exit's wait) */
      assert_int_equal(drv->host_fn(dev, CGRT_LEGACY_STREAM, read_out, h), 0);
      assert_int_equal(drv->stream_sync(dev, CGRT_LEGACY_STREAM), 0);
    }
    if (h->seen != expected(1000 + s))
      fail_msg("%s, %s step %d: the host read %lld after the step, which computes %lld "
               "from the input it wrote there",
               cuda_graph, cgrt_phase_name(phase), s, (long long)h->seen,
               (long long)expected(1000 + s));
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(h->rt, &st), 0);
  assert_int_equal(st.steps, STEPS);
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

static void none_is_ordered(void **state) {
  (void)state;
  run_steps("impl = none", CGRT_PHASE_TRAIN);
  run_steps("impl = none", CGRT_PHASE_INFER);
}

static void local_layer_scope_is_ordered(void **state) {
  (void)state;
  run_steps("impl = local\nmodules =", CGRT_PHASE_TRAIN);
  run_steps("impl = local\nmodules =", CGRT_PHASE_INFER);
}

static void local_block_scope_is_ordered(void **state) {
  (void)state;
  run_steps("impl = local\nmodules =\ninference_scope = block", CGRT_PHASE_INFER);
}

static void transformer_engine_is_ordered(void **state) {
  (void)state;
  run_steps("impl = transformer_engine\nmodules = attn mlp", CGRT_PHASE_TRAIN);
}

static void full_iteration_is_ordered(void **state) {
  (void)state;
  run_steps("impl = full_iteration", CGRT_PHASE_TRAIN);
}

/* Both rebind policies that copy the host's buffers in and out run inside the step, too. */
static void rebind_copy_and_auto_are_ordered(void **state) {
  (void)state;
  run_steps("impl = local\nmodules =\nrebind = copy", CGRT_PHASE_TRAIN);
  run_steps("impl = full_iteration\nrebind = auto", CGRT_PHASE_TRAIN);
}

/* A failed step still comes before the host's next work on the legacy stream. */
static int failing_body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  int rc = body(ctx, user);
  (void)h;
  return rc == 0 ? 7 : rc;
}

static void a_failed_step_is_ordered_too(void **state) {
  (void)state;
  struct host *h = host_open("impl = none");
  struct cgrt_dev *dev = &h->rt->dev;
  h->next_input = 5;
  assert_int_equal(dev->drv->host_fn(dev, CGRT_LEGACY_STREAM, fill, h), 0);
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_TRAIN,
                      .tokens = 8,
                      .body = failing_body,
                      .user = h};
  assert_int_equal(cgrt_step(h->rt, &d, NULL), CGRT_E_CALLBACK);
  assert_int_equal(dev->drv->host_fn(dev, CGRT_LEGACY_STREAM, read_out, h), 0);
  assert_int_equal(dev->drv->stream_sync(dev, CGRT_LEGACY_STREAM), 0);
  assert_int_equal(h->seen, expected(5)); /* the layers it enqueued ran before the read */
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

/* A failed step whose exit ordering fails too: the step's own error is returned and kept as the
   last error; the ordering's sentence goes to the log. A step that only fails its ordering says
   so. (A fault injected where the core calls the driver: runtime faults, base/faults.h.) */
static int logged_order;

static void on_log(void *user, cgrt_log_level level, const char *text) {
  (void)user;
  if (level == CGRT_LOG_WARN && strstr(text, "making the legacy default stream wait for the step"))
    logged_order++;
}

static void a_failed_ordering_keeps_a_failed_steps_error(void **state) {
  (void)state;
  struct host *h = host_open("impl = none");
  assert_int_equal(cgrt_set_log(h->rt, on_log, NULL), 0);
  h->rt->log.level = CGRT_LOG_WARN; /* the fixture opens with log = off */
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_TRAIN,
                      .tokens = 8,
                      .body = failing_body,
                      .user = h};
  assert_int_equal(cgrt_step(h->rt, &d, NULL), CGRT_E_CALLBACK);
  logged_order = 0;
  h->rt->faults.order_exit = 1;
  assert_int_equal(cgrt_step(h->rt, &d, NULL), CGRT_E_CALLBACK);
  assert_string_equal(cgrt_last_error(h->rt), "the body callback of step 1 (eager) returned 7");
  assert_int_equal(logged_order, 1);
  /* the ordering alone failing: the step says so */
  h->rt->faults.order_exit = 1;
  d.body = body;
  assert_int_equal(cgrt_step(h->rt, &d, NULL), CGRT_E_DEVICE);
  assert_non_null(strstr(cgrt_last_error(h->rt),
                         "cgrt_step: making the legacy default stream wait for the step failed: "
                         "event_record failed (injected fault)"));
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(none_is_ordered),
      cmocka_unit_test(local_layer_scope_is_ordered),
      cmocka_unit_test(local_block_scope_is_ordered),
      cmocka_unit_test(transformer_engine_is_ordered),
      cmocka_unit_test(full_iteration_is_ordered),
      cmocka_unit_test(rebind_copy_and_auto_are_ordered),
      cmocka_unit_test(a_failed_step_is_ordered_too),
      cmocka_unit_test(a_failed_ordering_keeps_a_failed_steps_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
