/*
 * test_bytime_traffic.c - `[local] by_time` (issue 43) on the shipped traffic files, simulated on
 * the host driver under a cost model fitted to issue 43's H200 figures, against the padded-token
 * plan (by_time off) and eager (impl = none): what the next GPU run should show, if the model
 * holds.
 *
 * The run: each traffic file's steps in order through `local`, layer scope, 12 layers of attn and
 * mlp (24 module calls a step, one "kernel" each, keyed by the padded size) and a prepare that
 * enqueues one more. Two host modes:
 *  - free: the host never waits for the device, as `cgrt bench --traffic` replays a file; the
 *    device keeps up with it beside it (cgrt__host_run_device after each step), so by_time's
 *    events complete as they would on a GPU; one sync at the end. A stream holds at most
 *    QUEUE_LAUNCHES (400) unfinished launches, an eager kernel or a graph launch each (the host
 *    driver's queue_depth), as a GPU's launch queue does (about a thousand): a host that fills it
 *    waits in its next launch, inside the step, where by_time's host clock sees it (session 40;
 *    the model had bounded the host to 16 steps ahead by waiting between steps, which by_time
 *    never saw: under the in-launch wait, the rule of session 38, each sample's larger part,
 *    gave bimodal.txt free on/off 0.997 instead of 0.972, the rule of session 40 0.973);
 *  - synced: the host waits for the device after every step, as a decode server reading its
 *    logits does;
 *  - bounded: free, with [runtime] max_queued_steps = 2 (eager's runtime too), as the shipped
 *    traffic configurations run since session 51. Under the model: decode_small on/off 0.686
 *    against free's 0.694 (an H200: 0.656-0.664 against 0.689-0.692), bimodal 0.974 against 0.973
 *    (the model's host never waits long in its launches: a graph launch takes one place, where on
 *    a GPU a large graph's takes much of the queue; docs/decisions.md, session 51).
 * In both the device runs beside the host (the cost model's device_beside): whether a timed step's
 * start event has run when the host has issued the step reads as on a GPU (by_time's "the device
 * behind", session 50); the figures below did not move with it.
 * The simulated total is the host's clock after the final sync (the later of host and device),
 * plus CAPTURE_US per graph captured (the host driver charges captures nothing; a GPU does).
 *
 * The cost model (struct cgrt_host_cost), and where its constants come from:
 *  - device, a replay at bucket B: replay_us(B), the H200 table of issue 43 (layer scope decode,
 *    docs/decisions.md "Issue 43: the GPU run" and README's `cgrt plan` defaults): 500 us at B = 1,
 *    601 at 8, 630 at 32, 757 at 64, 1017 at 128, 1551 at 256, 2949 at 512; and, since session
 *    49, 18632 at 2048 and 59148 at 4096 (an H200's replays of those buckets in
 *    `cgrt bench conf/local_block_budget.ini --traffic traffic/decode_small_buckets.txt`, block
 *    scope: the same work; session 38-48's model went on from 512 along the last segment, 5.46 us
 *    a token, and gave 22.5 ms at 4096); linear between the points. It is spread evenly over the
 *    24 module kernels (graph_node_ns 0). The same run's eager figures fit: pooled eager medians at
 *    counts >= 2894, 3339 and 3672 of 37.0, 48.8 and 53.6 ms against the model's 35.4, 44.2 and
 *    50.8; the plan over eager 1.48-1.50 against the model's 1.45-1.48;
 *  - device, eager at T: replay_us(T) + EAGER_EXTRA_US (48 us, spread over the same 24 kernels):
 *    the device spans of eager steps the GPU run's info lines gave, 901-954 us at 90-99 tokens,
 *    against replay_us(95) = 883 us; it also gives the decode bench's eager 635 us at 20 tokens
 *    (model 663) and 2367 us at 400 (model 2385) within 5%;
 *  - host: an eager launch LAUNCH_US = 24 us (25 launches a step: 600 us, issue 43's "launch-bound
 *    at small T" host time of a step, 640-900 us per process at 1 token), a graph launch
 *    GRAPH_LAUNCH_US = 3 us (cudaGraphLaunch: 2.4-5.5 us on an H200, README);
 *  - CAPTURE_US = 250 us a graph, captured and instantiated: a guess (no GPU figure separates it).
 * Under it the eager step is about balanced between host (600 us) and device (615-680 us) at
 * 1-40 tokens, device-bound above; the padded replay of 90-115 tokens at bucket 128 (1017 us) is
 * slower than eager (about 910-1020 us), that of 33-40 at bucket 64 (757) too (about 680-700),
 * 20-32 at bucket 32 (630) faster. What it is not: noise (every step of a size costs the same:
 * the GPU's per-process spread of eager, 640-900 us at 1 token, is absent), the bench's decoder
 * beyond 512 tokens, capture costs measured, block scope.
 *
 * Asserts, per traffic file and host mode (all three): on bimodal.txt, by_time on no worse than off
 * by more than 1%, and better; on decode_small_buckets.txt under conf/local_block_budget.ini's
 * list, where padding dominates (the rare steps of 1500-3978 tokens pad to 4096; eager's total is
 * 31-32% below the padded plan's), the device-bound rule acts, and on/off stays below 0.71 (see
 * test_decode_small_buckets). BYTIME_TRAFFIC_STEPS (environment)
 * replays a prefix instead of the whole files (4000 steps each).
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
#include "traffic.h"

#define LAYERS          12
#define MODS            (2 * LAYERS) /* attn and mlp per layer: conf/local.ini's modules */
#define MAX_SIZE        4096
#define LAUNCH_US       24.0
#define GRAPH_LAUNCH_US 3.0
#define EAGER_EXTRA_US  48.0
#define CAPTURE_US      250.0
#define QUEUE_LAUNCHES  400

/* issue 43's H200 table: a padded replay's device time (us) at bucket B, layer scope decode */
static const double table_b[] = {1, 8, 32, 64, 128, 256, 512, 2048, 4096};
static const double table_us[] = {500, 601, 630, 757, 1017, 1551, 2949, 18632, 59148};
#define TABLE_N (sizeof(table_b) / sizeof(table_b[0]))

static double replay_us(double b) {
  size_t i = 1;
  while (i < TABLE_N - 1 && b > table_b[i])
    i++;
  double slope = (table_us[i] - table_us[i - 1]) / (table_b[i] - table_b[i - 1]);
  double us = table_us[i - 1] + slope * (b - table_b[i - 1]);
  return us < table_us[0] ? table_us[0] : us;
}

/* A kernel's cost is all it is: one per (size, captured), shared by every call of that shape. */
struct kernel {
  int64_t size;
  int captured;
};
static struct kernel kernels[2][MAX_SIZE + 1];

static void kernel_fn(void *arg) {
  (void)arg;
}

static void stage(void *arg) {
  (void)arg;
}

static uint64_t cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != kernel_fn)
    return 0;
  const struct kernel *k = arg;
  double us = replay_us((double)k->size) + (k->captured ? 0 : EAGER_EXTRA_US);
  return (uint64_t)(us * 1000.0 / MODS);
}

struct sim {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  double in, out[MODS];
};

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  (void)user;
  int64_t p = ctx->padded_tokens;
  if (p < 1 || p > MAX_SIZE)
    return -1;
  struct kernel *k = &kernels[ctx->mode == CGRT_MODE_CAPTURE][p];
  k->size = p;
  k->captured = ctx->mode == CGRT_MODE_CAPTURE;
  return cgrt_enqueue_host(ctx, kernel_fn, k);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  return cgrt_enqueue_host(ctx, stage, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct sim *s = user;
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{i ? &s->out[i - 1] : &s->in, sizeof(double), CGRT_IN, "in"},
                        {&s->out[i], sizeof(double), CGRT_OUT, "out"}};
    cgrt_args a = {.struct_size = sizeof(a),
                   .key = (uint64_t)ctx->padded_tokens,
                   .buffers = b,
                   .num_buffers = 2};
    int rc = cgrt_forward(s->rt, s->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  (void)user;
  if (getenv("BYTIME_VERBOSE") && level <= CGRT_LOG_INFO)
    fprintf(stderr, "log: %s\n", msg);
}

/* What a run gives. */
struct result {
  double total_ms; /* simulated, captures charged */
  double clock_ms; /* the clocks' alone */
  cgrt_stats s;
  uint64_t pooled_rounds; /* by_time's pooled probe rounds (cgrt_backend_figures) */
  uint64_t bound;         /* buckets by_time's device-bound rule acted in (the same) */
  uint64_t untimed;       /* its measuring steps left untimed, every timing pair in flight */
};

static void figure(void *user, const char *name, uint64_t value) {
  if (strcmp(name, "by_time_pooled_rounds") == 0)
    ((struct result *)user)->pooled_rounds = value;
  else if (strcmp(name, "by_time_bound_buckets") == 0)
    ((struct result *)user)->bound = value;
  else if (strcmp(name, "by_time_untimed_steps") == 0)
    ((struct result *)user)->untimed = value;
}

/*
 * The [cuda_graph] and [inference] sections of the shipped files, with the host driver:
 * conf/local.ini (and local_bytime.ini's [local]) and conf/local_block_budget.ini's list, in
 * layer scope (the scope of the H200 table).
 */
static const char *const conf_local = "[cuda_graph]\nimpl = local\nmodules = attn mlp\n"
                                      "warmup_steps = 3\ninference_scope = layer\n"
                                      "max_graphs = 512\n"
                                      "[inference]\nbuckets = exponential\nmax_tokens = 512\n"
                                      "num_graphs = 8\ntp_size = 1\ncapture = lazy\n";
static const char *const conf_budget_list = "[cuda_graph]\nimpl = local\nmodules = attn mlp\n"
                                            "warmup_steps = 2\ninference_scope = layer\n"
                                            "max_graphs = 512\n"
                                            "[inference]\nbuckets = list\n"
                                            "list = 1 2 4 8 16 64 1024 4096\ntp_size = 1\n"
                                            "max_tokens = 4096\ncapture = lazy\n";

enum way { WAY_ON, WAY_OFF, WAY_EAGER };

/* The host's modes (file comment): free, synced, bounded (free, with max_queued_steps = 2). */
enum host_mode { HOST_FREE, HOST_SYNCED, HOST_BOUNDED, HOST_MODES };

static void simulate(const char *conf, enum way way, enum host_mode mode, const struct traffic *t,
                     uint64_t max_steps, struct result *r) {
  const int synced = mode == HOST_SYNCED;
  const char *bound = mode == HOST_BOUNDED ? "max_queued_steps = 2\n" : "";
  char ini[2048];
  if (way == WAY_EAGER)
    snprintf(ini, sizeof(ini),
             "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = info\n%s", bound);
  else
    snprintf(ini, sizeof(ini),
             "%s[runtime]\ndriver = host\nlog = info\n%s[local]\nby_time = %s\n%s", conf, bound,
             way == WAY_ON ? "on" : "off", way == WAY_ON ? "exact_buckets = 4\n" : "");
  struct sim *s = calloc(1, sizeof(*s));
  assert_non_null(s);
  if (cgrt_open_string(&s->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  assert_int_equal(cgrt_set_log(s->rt, log_sink, s), 0);
  struct cgrt_host_cost c = {.launch_ns = (uint64_t)(LAUNCH_US * 1000),
                             .graph_launch_ns = (uint64_t)(GRAPH_LAUNCH_US * 1000),
                             .graph_node_ns = 0,
                             .node_ns = cost_ns,
                             .queue_depth = QUEUE_LAUNCHES,
                             .device_beside = 1};
  assert_int_equal(cgrt__host_set_cost(&s->rt->dev, &c), 0);
  for (int i = 0; i < MODS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.%s", i / 2, i % 2 ? "mlp" : "attn");
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = i % 2 ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .layer = i / 2,
                          .forward = module_fwd,
                          .user = s};
    assert_int_equal(cgrt_module_register(s->rt, &d, &s->m[i]), 0);
  }
  const struct cgrt_host_api *h = &s->rt->host;
  uint64_t t0 = h->now_ns(h), n = 0;
  for (size_t e = 0; e < t->n && n < max_steps; e++)
    for (int64_t k = 0; k < t->steps[e] && n < max_steps; k++, n++) {
      cgrt_step_desc d = {.struct_size = sizeof(d),
                          .phase = CGRT_PHASE_INFER,
                          .tokens = t->tokens[e],
                          .prepare = prepare,
                          .body = body,
                          .user = s};
      cgrt_step_report rep = {.struct_size = sizeof(rep)};
      if (cgrt_step(s->rt, &d, &rep) != 0)
        fail_msg("step %llu (%lld tokens): %s", (unsigned long long)n, (long long)t->tokens[e],
                 cgrt_last_error(s->rt));
      if (synced)
        assert_int_equal(cgrt_synchronize(s->rt), 0);
      else
        assert_int_equal(cgrt__host_run_device(&s->rt->dev), 0);
    }
  assert_int_equal(cgrt_synchronize(s->rt), 0);
  r->clock_ms = (double)(h->now_ns(h) - t0) / 1e6;
  r->s = (cgrt_stats){.struct_size = sizeof(r->s)};
  assert_int_equal(cgrt_stats_get(s->rt, &r->s), 0);
  r->pooled_rounds = r->bound = r->untimed = 0;
  assert_int_equal(cgrt_backend_figures(s->rt, figure, r), 0);
  r->total_ms = r->clock_ms + (double)r->s.captures * CAPTURE_US / 1e3;
  cgrt_close(s->rt);
  free(s);
}

static uint64_t steps_wanted(void) {
  const char *e = getenv("BYTIME_TRAFFIC_STEPS");
  return e && atoll(e) > 0 ? (uint64_t)atoll(e) : UINT64_MAX;
}

static void load(const char *name, struct traffic *t) {
  const char *src = getenv("CGRT_SOURCE_DIR");
  char path[1024], err[512];
  snprintf(path, sizeof(path), "%s/traffic/%s", src ? src : ".", name);
  if (traffic_load(path, 0, t, err, sizeof(err)) != 0)
    fail_msg("%s", err);
}

static void print_row(const char *file, const char *mode, const char *way, const struct result *r) {
  const cgrt_stats *s = &r->s;
  printf("%-26s %-7s %-6s %9.1f ms (clocks %9.1f, %3llu captures)  probe %4llu eager %5llu "
         "exact %5llu  counts eager %3llu exact %llu implied %3llu rare %3llu  pooled rounds %llu  "
         "device-bound buckets %llu untimed %llu\n",
         file, mode, way, r->total_ms, r->clock_ms, (unsigned long long)s->captures,
         (unsigned long long)s->time_probe_steps, (unsigned long long)s->time_eager_steps,
         (unsigned long long)s->time_exact_steps, (unsigned long long)s->time_eager_counts,
         (unsigned long long)s->time_exact_counts, (unsigned long long)s->time_implied_counts,
         (unsigned long long)s->time_rare_refused, (unsigned long long)r->pooled_rounds,
         (unsigned long long)r->bound, (unsigned long long)r->untimed);
}

static const char *const modes[HOST_MODES] = {"free", "synced", "bounded"};

/* Runs one file in every host mode, three ways; gives on/off and eager/off per mode, and the
   buckets the device-bound rule acted in when on. */
static void compare(const char *file, const char *conf, double ratio[HOST_MODES],
                    double eager_ratio[HOST_MODES], uint64_t bound[HOST_MODES]) {
  struct traffic t;
  load(file, &t);
  uint64_t steps = steps_wanted();
  for (int m = 0; m < HOST_MODES; m++) {
    struct result on, off, eager;
    simulate(conf, WAY_ON, m, &t, steps, &on);
    simulate(conf, WAY_OFF, m, &t, steps, &off);
    simulate(conf, WAY_EAGER, m, &t, steps, &eager);
    print_row(file, modes[m], "on", &on);
    print_row(file, modes[m], "off", &off);
    print_row(file, modes[m], "eager", &eager);
    ratio[m] = on.total_ms / off.total_ms;
    bound[m] = on.bound;
    eager_ratio[m] = eager.total_ms / off.total_ms;
    printf("%-26s %-7s on/off %.3f, on/eager %.3f, off/eager %.3f\n", file, modes[m], ratio[m],
           on.total_ms / eager.total_ms, off.total_ms / eager.total_ms);
  }
  fflush(stdout);
  traffic_free(&t);
}

/* 70% of the steps at 20-40 tokens, 30% at 90-120: the padded replays of 33-40 (bucket 64) and
   90-115 (bucket 128) are slower than eager under the model, the rest faster. */
static void test_bimodal(void **state) {
  (void)state;
  double ratio[HOST_MODES], eager_ratio[HOST_MODES];
  uint64_t bound[HOST_MODES];
  compare("bimodal.txt", conf_local, ratio, eager_ratio, bound);
  for (int m = 0; m < HOST_MODES; m++) {
    if (bound[m] != 0) /* replays of a few eager host times: launch-bound, never device-bound */
      fail_msg("bimodal.txt, host %s: the device-bound rule acted in %llu buckets", modes[m],
               (unsigned long long)bound[m]);
    if (ratio[m] > 1.01)
      fail_msg("bimodal.txt, host %s: by_time on takes %.3f x off", modes[m], ratio[m]);
    if (ratio[m] >= 1.0) /* the model's padding costs more than by_time's probes: it should gain */
      fail_msg("bimodal.txt, host %s: by_time on gains nothing (%.3f x off)", modes[m], ratio[m]);
  }
}

/*
 * 97% of the steps at 1-8 tokens, 3% at 1500-3978 padded to 4096. Padding dominates under the
 * model (eager's total is below the padded plan's). The large counts are distinct ones seen once
 * or twice each, none reaches BYTIME_MIN_SEEN (16): by the rule before pooled probes none was
 * probed or implied and on/off was 1.000 (docs/decisions.md, "by_time on the shipped traffic,
 * simulated"). Pooled probes (bucket 4096's sparse counts sampled on one side of a pivot) decide
 * them: on/off 0.945 free, 0.946 synced under the model (session 38). Session 49: pooled probes
 * decide late (the bisection needs steps on each side, and only the large steps sample them: on an
 * H200 about 113 of the 120 were replayed first); bucket 4096 is device-bound (a replay of 59 ms
 * against eager host times of 0.6-1.1 ms), so the device-bound rule serves its counts up to 2925
 * eagerly once its replay has its samples. Under the model fitted to 4096 (above): on/off 0.799
 * free, 0.801 synced without the rule (on over eager 1.18, 1.16; the H200's 0.96-0.97 and 1.42
 * show its pooled probes slower still than the model's), 0.726 and 0.721 with it up to
 * bucket / 1.4 and 16 timing pairs in flight (on over eager 1.07, 1.05), 0.694 and 0.690 with it
 * up to where eager beats the replay by the margin (3974 here: the replay is 99 times eager's host
 * time; on over eager 1.03, 1.00). Asserted: the rule acts, and on/off below 0.71 in both modes.
 */
static void test_decode_small_buckets(void **state) {
  (void)state;
  double ratio[HOST_MODES], eager_ratio[HOST_MODES];
  uint64_t bound[HOST_MODES];
  compare("decode_small_buckets.txt", conf_budget_list, ratio, eager_ratio, bound);
  for (int m = 0; m < HOST_MODES; m++) {
    if (bound[m] == 0)
      fail_msg("decode_small_buckets.txt, host %s: the device-bound rule never acted", modes[m]);
    if (eager_ratio[m] >= 1.0)
      fail_msg("decode_small_buckets.txt, host %s: padding no longer dominates under the model "
               "(eager %.3f x the padded plan)",
               modes[m], eager_ratio[m]);
    if (ratio[m] >= 0.71)
      fail_msg("decode_small_buckets.txt, host %s: by_time on takes %.3f x off (pooled probes "
               "and the device-bound rule should gain more than 29%% where padding dominates)",
               modes[m], ratio[m]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bimodal),
      cmocka_unit_test(test_decode_small_buckets),
  };
  return cmocka_run_group_tests_name("bytime_traffic", tests, NULL, NULL);
}
