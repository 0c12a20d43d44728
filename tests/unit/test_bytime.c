/*
 * test_bytime.c - `[local] by_time` (issue 43) end to end on the host driver, whose cost model
 * (cgrt__host_set_cost) makes time pass: eager launches cost the host 1 us each, a graph launch
 * 0.1 us, a module's "kernel" 0.2 us plus 10 ns per padded token (and 50 ns more inside a graph).
 * Under it a step of 65 or 90 tokens padded to bucket 128 replays slower than it runs eagerly,
 * while 3 tokens padded to 32 replays much faster (launch-bound eager). The buckets: 1 32 64 128.
 * What the tests check: the slower counts are served the faster way (an exact-size bucket while
 * exact_buckets allows, else eagerly), the others keep their bucket, every step's output is right,
 * each change is said once at info, cgrt_stats counts it; `by_time = off`, the default, keeps
 * every padded bucket; with no cost model (every time equal) nothing changes (the margin);
 * adaptive buckets plan by time from the figures by_time reports; and a step's cost is the larger
 * of its host and device times (a backlogged stream keeps a bucket whose eager steps cost the host
 * more, a device-bound eager count is served by its device time, a host that waits in its
 * launches behind a full launch queue is judged by its own time); and a host that hands a fresh
 * input every step gets the same decision.
 *
 * Three modules in a chain, each "kernel" a host function out = 2 in + 1: row-independent, so a
 * step served eagerly or at another bucket gives the same output, 8 in + 7.
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

#define MODS       3
#define MAX_PARAMS (1 << 16)

struct params {
  const double *in;
  double *out;
  int64_t padded; /* the size the kernel runs at: its cost */
};

struct fixture {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  struct params params[MAX_PARAMS];
  int num_params;
  double value;
  double in, out[MODS];
  double fresh_in[64]; /* with fresh > 0, each step's input: one of `fresh` slots */
  int fresh, fresh_at;
  int pads;          /* kernels each module launches before its work (`pads` when opened) */
  int switches_said; /* info lines of by_time */
  char said[4][512];
  int planned_by_time; /* info lines of the adaptive planner that planned by time */
  char kept[512];      /* the last debug line of a measured count that kept its way */
};

static int log_debug;         /* the next fixture logs at debug (a test that reads debug lines) */
static const char *inference; /* the next fixture's [inference] lines, when not the usual ones */

static void work(void *arg) {
  struct params *p = arg;
  p->out[0] = p->in[0] * 2 + 1;
}

/* The step's input: in place, or (fresh > 0) this step's slot. */
static double *input_of(struct fixture *f) {
  return f->fresh ? &f->fresh_in[f->fresh_at] : &f->in;
}

static void stage(void *arg) {
  struct fixture *f = arg;
  *input_of(f) = f->value;
}

static uint64_t cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != work)
    return 0;
  return 200 + 10 * (uint64_t)((struct params *)arg)->padded;
}

/*
 * A cost with a threshold (the tests of session 38): a module's kernel costs 0.2 us below
 * THRESHOLD tokens and 3 us from it on (non-decreasing in tokens, as bytime.h assumes). In bucket
 * 128 (3 us a kernel, padded) eager at T < THRESHOLD (4 launches of 1 us, 3 kernels of 0.2 us)
 * is far faster than the replay (about 9.3 us), and at T >= THRESHOLD far slower (about 13 us):
 * every count's answer is plain, none within the margin.
 */
#define THRESHOLD 96

static uint64_t step_cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != work)
    return 0;
  return ((struct params *)arg)->padded < THRESHOLD ? 200 : 3000;
}

static int pads; /* the next fixture's modules launch this many kernels before their work */

static void pad(void *arg) {
  (void)arg;
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fixture *f = user;
  if (f->num_params >= MAX_PARAMS)
    return -1;
  struct params *p = &f->params[f->num_params++];
  p->in = args->buffers[0].ptr;
  p->out = args->buffers[1].ptr;
  p->padded = ctx->padded_tokens;
  for (int i = 0; i < f->pads; i++) {
    int rc = cgrt_enqueue_host(ctx, pad, p);
    if (rc)
      return rc;
  }
  return cgrt_enqueue_host(ctx, work, p);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  return cgrt_enqueue_host(ctx, stage, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fixture *f = user;
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{i ? &f->out[i - 1] : input_of(f), sizeof(double), CGRT_IN, "in"},
                        {&f->out[i], sizeof(double), CGRT_OUT, "out"}};
    cgrt_args a = {.struct_size = sizeof(a),
                   .key = (uint64_t)ctx->padded_tokens,
                   .buffers = b,
                   .num_buffers = 2};
    int rc = cgrt_forward(f->rt, f->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  struct fixture *f = user;
  if (level == CGRT_LOG_INFO && strstr(msg, "by_time")) {
    if (f->switches_said < 4)
      snprintf(f->said[f->switches_said], sizeof(f->said[0]), "%s", msg);
    f->switches_said++;
  }
  if (level == CGRT_LOG_DEBUG && strstr(msg, "by_time") && strstr(msg, "still served"))
    snprintf(f->kept, sizeof(f->kept), "%s", msg);
  if (getenv("BYTIME_VERBOSE") &&
      level <= (getenv("BYTIME_DEBUG") ? CGRT_LOG_DEBUG : CGRT_LOG_INFO))
    fprintf(stderr, "log: %s\n", msg);
  if (level == CGRT_LOG_INFO && strstr(msg, "adaptive buckets") && strstr(msg, "by time"))
    f->planned_by_time++;
}

static struct fixture *fixture_open(const char *extra, int with_cost) {
  struct fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 2\n"
           "[inference]\n%s%s"
           "[runtime]\ndriver = host\nlog = %s\n",
           inference ? inference : "max_tokens = 128\nnum_graphs = 4\n", extra,
           getenv("BYTIME_DEBUG") || log_debug ? "debug" : "info");
  if (cgrt_open_string(&f->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  assert_int_equal(cgrt_set_log(f->rt, log_sink, f), 0);
  f->pads = pads;
  if (with_cost) {
    struct cgrt_host_cost c = {.launch_ns = 1000,
                               .graph_launch_ns = 100,
                               .graph_node_ns = 50,
                               .node_ns = with_cost == 2 ? step_cost_ns : cost_ns};
    assert_int_equal(cgrt__host_set_cost(&f->rt->dev, &c), 0);
  }
  for (int i = 0; i < MODS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.mlp", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .layer = i,
                          .forward = module_fwd,
                          .user = f};
    assert_int_equal(cgrt_module_register(f->rt, &d, &f->m[i]), 0);
  }
  return f;
}

static void fixture_close(struct fixture *f) {
  cgrt_close(f->rt);
  free(f);
}

/* Step i of `tokens` with input `value`, the host not waiting for the device (no check). */
static void step_nowait(struct fixture *f, int i, int value, int64_t tokens,
                        cgrt_step_report *rep) {
  f->value = (double)value;
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_INFER,
                      .tokens = tokens,
                      .prepare = prepare,
                      .body = body,
                      .user = f};
  *rep = (cgrt_step_report){.struct_size = sizeof(*rep)};
  if (cgrt_step(f->rt, &d, rep) != 0)
    fail_msg("step %d (%lld tokens): %s", i, (long long)tokens, cgrt_last_error(f->rt));
}

/* One inference step of `tokens`; checks its output; gives its report. */
static void step(struct fixture *f, int i, int64_t tokens, cgrt_step_report *rep) {
  if (f->fresh < 0) /* -k: a new slot for each of the first k steps, then two alternating */
    f->fresh_at = i < -f->fresh ? i % 62 : 62 + i % 2;
  else if (f->fresh)
    f->fresh_at = (int)((unsigned)(i * 7 + i / 3) % (unsigned)f->fresh);
  step_nowait(f, i, i % 100, tokens, rep);
  /* the host reads its output: the stream runs, and the step's events with it */
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  if (f->out[MODS - 1] != 8 * f->value + 7)
    fail_msg("step %d (%lld tokens, at %lld): output %g, expected %g", i, (long long)tokens,
             (long long)rep->padded_tokens, f->out[MODS - 1], 8 * f->value + 7);
}

static const int64_t counts[] = {65, 90, 3};

/* Runs `n` steps cycling through `counts`; returns the last report of each count. */
static void run(struct fixture *f, int n, cgrt_step_report last[3]) {
  for (int i = 0; i < n; i++)
    step(f, i, counts[i % 3], &last[i % 3]);
}

static void test_slower_counts_served_exact_then_eager(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 1\n", 1);
  cgrt_step_report last[3];
  /* 600 steps (300 before session 38): a count gets an exact-size bucket only once seen
     BYTIME_EXACT_SEEN (64) times, so 65 runs eagerly from its decision (seen 26 or so) to then */
  run(f, 600, last);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.time_exact_counts, 1);
  assert_int_equal(s.time_eager_counts, 1);
  assert_true(s.timed_steps >= 3 * 16);
  assert_true(s.time_probe_steps >= 2 * 9 && s.time_probe_steps < 40);
  assert_true(s.time_eager_steps > 50 && s.time_exact_steps > 50);
  /* both were decided at fewer than 64 steps, with room for an exact bucket: refused as rare
     then (65 got it at its 64th step; 90 found no room left at its own) */
  assert_int_equal(s.time_rare_refused, 2);
  /* 65 and 90 share bucket 128, but eager winning at 65 says nothing of 90: both measured */
  assert_int_equal(s.time_implied_counts, 0);
  /* one count replays at its own size, the other runs eagerly at it; 3 keeps bucket 4 */
  int exact = last[0].mode == CGRT_MODE_REPLAY ? 0 : 1, eager = 1 - exact;
  assert_int_equal(last[exact].mode, CGRT_MODE_REPLAY);
  assert_int_equal(last[exact].padded_tokens, counts[exact]);
  assert_int_equal(last[eager].mode, CGRT_MODE_EAGER);
  assert_int_equal(last[eager].padded_tokens, counts[eager]);
  assert_int_equal(last[2].mode, CGRT_MODE_REPLAY);
  assert_int_equal(last[2].padded_tokens, 32);
  /* said once per change, with the figures: both counts eagerly, then one at its exact-size
     bucket (since session 38 a change of its own: it comes when the count is seen 64 times) */
  assert_int_equal(f->switches_said, 3);
  assert_non_null(strstr(f->said[2], "exact-size bucket"));
  for (int i = 0; i < 3; i++) {
    assert_non_null(strstr(f->said[i], "us"));
    assert_non_null(strstr(f->said[i], "bucket 128"));
  }
  fixture_close(f);
}

/*
 * A host that hands a fresh input every step (session 39: on an H200 the bench's fresh rows kept
 * 200 tokens at bucket 256, 1.14x eager's time, where the static rows served it eagerly): by_time
 * decides the same with the input in place, in a new slot every step (the key goes to private
 * copies), in one of two or three slots (a graph per address set), and in a new slot for each of
 * the first 12 or 40 steps, then two (an allocator that settles, session 42: the keys go on copies,
 * then drop them for a graph per set, meanwhile by_time measures). 90 tokens, bucket 128:
 * eager beats the replay, so the count runs at its own size (eagerly, or at an exact-size bucket).
 */
static void fresh_decides(int slots) {
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 1\n", 1);
  f->fresh = slots;
  cgrt_step_report rep;
  for (int i = 0; i < 300; i++)
    step(f, i, 90, &rep);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  if (rep.padded_tokens != 90 || s.time_eager_counts + s.time_exact_counts != 1)
    fail_msg("input in %d slots: the last step ran at %lld (mode %d); by_time: %llu counts eager, "
             "%llu exact, %llu probe steps",
             slots, (long long)rep.padded_tokens, rep.mode, (unsigned long long)s.time_eager_counts,
             (unsigned long long)s.time_exact_counts, (unsigned long long)s.time_probe_steps);
  assert_true(s.time_probe_steps >= 9 && s.time_probe_steps < 20);
  fixture_close(f);
}

static void test_fresh_inputs_decide_alike(void **state) {
  (void)state;
  fresh_decides(0);
  fresh_decides(64);
  fresh_decides(2);
  fresh_decides(3);
  fresh_decides(-12);
  fresh_decides(-40);
}

/*
 * A count whose padded replay and eager steps are within the margin (session 39: 37 tokens at
 * bucket 64 on an H200, 0.91x eager's time in two processes, probed and kept at its bucket): an
 * exact-size bucket is tried, and kept when it beats the faster of the two by the margin.
 * CONTESTED tokens at bucket 128 under cost_ns: eager 5.6 us a step, the replay 5.7 (within the
 * 2% margin both ways), the exact-size replay 4.8.
 */
#define CONTESTED 100

/*
 * 300 steps of `tokens` under cost_ns (bucket 128, one exact-size bucket allowed, each module
 * launching `npads` kernels before its work); the last is
 * replayed at its exact size when `exact`, else at 128, and no count is served eagerly. Returns
 * the fixture, for what a test checks besides.
 */
static struct fixture *settle_at(int64_t tokens, int exact, int npads) {
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 1\n", 1);
  f->pads = npads;
  cgrt_step_report rep;
  for (int i = 0; i < 300; i++)
    step(f, i, tokens, &rep);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  if (rep.mode != CGRT_MODE_REPLAY || rep.padded_tokens != (exact ? tokens : 128) ||
      s.time_exact_counts != (uint64_t)exact || s.time_eager_counts != 0)
    fail_msg("%lld tokens: the last step mode %d at %lld; %llu exact, %llu eager counts; said: %s",
             (long long)tokens, rep.mode, (long long)rep.padded_tokens,
             (unsigned long long)s.time_exact_counts, (unsigned long long)s.time_eager_counts,
             f->switches_said ? f->said[0] : "nothing");
  return f;
}

static void test_contested_count_gets_an_exact_bucket(void **state) {
  (void)state;
  struct fixture *f = settle_at(CONTESTED, 1, 0);
  assert_int_equal(f->switches_said, 1);
  assert_non_null(strstr(f->said[0], "exact-size bucket from now on, not replayed at its bucket"));
  fixture_close(f);
}

/*
 * A count whose padded replay beats eager, but by less than BYTIME_NEAR (session 41: 3 tokens at
 * bucket 8 on an H200, kept at its bucket, then 0.976x of an eager row that drew faster; session
 * 42: eager rows of one process up to 1.37x apart, 37 tokens kept at bucket 64 by 13.8%, then
 * 0.96x of a faster eager row): contested too, so an exact-size bucket is tried. Each module
 * launches one kernel more (pads = 1: 3 us more a step eagerly, 0.15 us more replayed), so eager
 * is well behind the replay at bucket 128 under cost_ns: NARROW tokens, eager about 30% slower
 * (beyond session 41's band of 10%, within BYTIME_NEAR), the exact size faster than both; WIDE
 * tokens, eager about 47% slower: the bucket stays, no exact-size bucket.
 */
#define NARROW 67
#define WIDE   100

static void test_narrow_win_gets_an_exact_bucket(void **state) {
  (void)state;
  fixture_close(settle_at(NARROW, 1, 1));
  fixture_close(settle_at(WIDE, 0, 1));
}

/* What the tests read of cgrt_backend_figures (local's by_time figures). */
struct figures {
  uint64_t samples, rechecks;   /* by_time_copied_samples, by_time_copied_rechecks */
  uint64_t watched, overturned; /* by_time_watched_steps, by_time_eager_overturned */
};

static void figure(void *user, const char *name, uint64_t value) {
  static const struct {
    const char *name;
    size_t at;
  } known[] = {{"by_time_copied_samples", offsetof(struct figures, samples)},
               {"by_time_copied_rechecks", offsetof(struct figures, rechecks)},
               {"by_time_watched_steps", offsetof(struct figures, watched)},
               {"by_time_eager_overturned", offsetof(struct figures, overturned)}};
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
    if (strcmp(name, known[i].name) == 0)
      *(uint64_t *)((char *)user + known[i].at) = value;
}

/*
 * Replays measured while their keys work on private copies that later go away (session 42: on an
 * H200 a fresh host's cudaMallocAsync handed new addresses while it warmed up, then two in turn;
 * the 100-token exact-size trial ran on copies in 7 of its 8 samples, 1023-1042 us against a clean
 * 931.6, lost to eager, and 100 tokens stayed at 0.96x of eager until the recheck). CONTESTED
 * tokens (the exact size wins by 14% once its keys replay in place), the input in a new slot for
 * the first `settle` steps, then in one of two: the count ends at its exact size within 600 steps,
 * whether the copies last a few steps (12 new addresses: left out of the figures, no early
 * recheck) or longer than a round waits (150: the trial lost on copies, and the bucket is
 * measured again once, early).
 */
static void copies_then_settle(int settle, int rechecks) {
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 1\n", 1);
  f->fresh = -settle;
  cgrt_step_report rep;
  for (int i = 0; i < 600; i++)
    step(f, i, CONTESTED, &rep);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  struct figures c = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, figure, &c), 0);
  if (rep.mode != CGRT_MODE_REPLAY || rep.padded_tokens != CONTESTED || s.time_exact_counts != 1 ||
      c.rechecks != (uint64_t)rechecks || c.samples == 0 || s.copy_bytes == 0)
    fail_msg("new addresses for %d steps: the last step mode %d at %lld; %llu exact, %llu eager "
             "counts; %llu samples left out as copied, %llu early rechecks (%d expected), %llu "
             "bytes copied; said: %s",
             settle, rep.mode, (long long)rep.padded_tokens,
             (unsigned long long)s.time_exact_counts, (unsigned long long)s.time_eager_counts,
             (unsigned long long)c.samples, (unsigned long long)c.rechecks, rechecks,
             (unsigned long long)s.copy_bytes, f->switches_said ? f->said[0] : "nothing");
  fixture_close(f);
}

static void test_copies_that_settle(void **state) {
  (void)state;
  copies_then_settle(12, 0);  /* decided once the copies stop: none of them in the figures */
  copies_then_settle(150, 1); /* decided on copies, then measured again */
}

static void test_no_exact_bucket_allowed_serves_eagerly(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 1);
  cgrt_step_report last[3];
  run(f, 200, last);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.time_exact_counts, 0);
  assert_int_equal(s.time_eager_counts, 2);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(last[i].mode, CGRT_MODE_EAGER);
    assert_int_equal(last[i].padded_tokens, counts[i]);
  }
  assert_int_equal(last[2].padded_tokens, 32);
  fixture_close(f);
}

/*
 * A count served eagerly whose eager steps get slower later (session 45, bimodal traffic on an
 * H200 beside a busy host: counts 90-99 served eagerly on a probe where eager's host time was
 * 0.9 ms a step, later about 3 ms, for the rest of the trace: 1.045x the padded plan's total).
 * 90 tokens at bucket 128 under cost_ns, no exact-size bucket: served eagerly within 300 steps.
 * `slower`: then the host's launches cost 6 us in place of 1 (an eager step now costs the host
 * about 24 us, the replay 5.7 on the device): the watch sends the count back to its bucket within
 * 300 more steps, said once at info, and the bucket's new probe keeps it there. Else the watch
 * times the eager steps and keeps them (the figures still hold).
 */
static void eager_gets_slower(int slower) {
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 1);
  cgrt_step_report rep;
  for (int i = 0; i < 300; i++)
    step(f, i, 90, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(rep.padded_tokens, 90);
  int said = f->switches_said;
  if (slower) {
    struct cgrt_host_cost c = {
        .launch_ns = 6000, .graph_launch_ns = 100, .graph_node_ns = 50, .node_ns = cost_ns};
    assert_int_equal(cgrt__host_set_cost(&f->rt->dev, &c), 0);
  }
  for (int i = 300; i < 600; i++)
    step(f, i, 90, &rep);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  struct figures w = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, figure, &w), 0);
  int ok = slower ? rep.mode == CGRT_MODE_REPLAY && rep.padded_tokens == 128 && w.overturned == 1 &&
                        s.time_eager_counts == 0 && f->switches_said == said + 1 &&
                        strstr(f->said[said < 4 ? said : 3], "no longer eagerly") != NULL
                  : rep.mode == CGRT_MODE_EAGER && w.overturned == 0 && w.watched >= 8 &&
                        f->switches_said == said;
  if (!ok)
    fail_msg("eager %s: the last step mode %d at %lld; watched %llu steps, overturned %llu "
             "times, %llu counts eager; %d lines said after the first 300 steps (last: %s)",
             slower ? "slower after 300 steps" : "as fast throughout", rep.mode,
             (long long)rep.padded_tokens, (unsigned long long)w.watched,
             (unsigned long long)w.overturned, (unsigned long long)s.time_eager_counts,
             f->switches_said - said,
             f->switches_said ? f->said[f->switches_said < 4 ? f->switches_said - 1 : 3] : "-");
  fixture_close(f);
}

static void test_eager_that_gets_slower_goes_back_to_its_bucket(void **state) {
  (void)state;
  eager_gets_slower(1);
  eager_gets_slower(0);
}

/* With by_time off, padded steps keep their bucket. */
static void test_off_keeps_every_padded_bucket(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = off\n", 1);
  cgrt_step_report last[3];
  for (int i = 0; i < 200; i++) {
    step(f, i, counts[i % 3], &last[i % 3]);
    assert_int_equal(last[i % 3].padded_tokens, counts[i % 3] == 3 ? 32 : 128);
  }
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.timed_steps, 0);
  assert_int_equal(s.time_probe_steps + s.time_eager_steps + s.time_exact_steps, 0);
  assert_int_equal(f->switches_said, 0);
  fixture_close(f);
}

/* On by default since session 41 (docs/decisions.md, issue 43: "Default on"): with no [local]
   section the counts of test_slower_counts_served_exact_then_eager are timed and moved. */
static void test_on_by_default(void **state) {
  (void)state;
  struct fixture *f = fixture_open("", 1);
  cgrt_step_report last[3];
  run(f, 600, last);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_true(s.timed_steps > 0);
  if (s.time_eager_counts + s.time_exact_counts < 2)
    fail_msg("by_time's default: %llu timed steps, %llu counts eager, %llu exact (2 expected)",
             (unsigned long long)s.timed_steps, (unsigned long long)s.time_eager_counts,
             (unsigned long long)s.time_exact_counts);
  assert_int_equal(last[2].padded_tokens, 32); /* 3 tokens: the replay is far faster */
  fixture_close(f);
}

/* Every step the same device time (no cost model): within the margin, nothing moves. */
static void test_equal_times_change_nothing(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = on\n", 0);
  cgrt_step_report last[3];
  run(f, 300, last);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.time_eager_counts + s.time_exact_counts, 0);
  assert_int_equal(s.time_eager_steps, 0);
  /* since session 39 a measured count whose replay and eager are within the margin (here 65 and
     3, every time equal) has an exact-size bucket tried once seen 64 times; equal, it loses and
     is retired: its steps at the exact bucket while measured (a capture's warm-up included) are
     the price, once per count until a recheck */
  if (s.time_exact_steps > 2 * (9 + 3))
    fail_msg("%llu steps at exact-size buckets", (unsigned long long)s.time_exact_steps);
  /* each bucket was measured once: 8 eager steps kept, the first run and not kept; since
     session 38, 65 keeping bucket 128 implies 90 keeps it too (3 * 9 before) */
  assert_int_equal(s.time_probe_steps, 2 * 9);
  assert_int_equal(s.time_implied_counts, 1);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(last[i].mode, CGRT_MODE_REPLAY);
    assert_int_equal(last[i].padded_tokens, counts[i] == 3 ? 32 : 128);
  }
  assert_int_equal(f->switches_said, 0);
  fixture_close(f);
}

/* The many counts of bucket 128 in the tests below: 65 67 ... 127, in a scrambled cycle. */
#define NCOUNTS 32
static int64_t many_count(int i) {
  return 65 + 2 * ((i * 13) % NCOUNTS); /* 13 is odd: every residue once per cycle */
}

/* How each count of bucket 128 ran at its last step: whether eagerly, and at what size. */
struct last_way {
  int seen, eager;
  int64_t padded;
};

/*
 * Many counts in one bucket, eager faster below THRESHOLD and slower from it on (session 38):
 * each count ends served the way the threshold says, most of them decided by implication, with
 * a number of eager probe steps bounded by the rounds of a bisection (not 9 per count); a count
 * seen fewer than BYTIME_MIN_SEEN (16) times, alone in its bucket, is never probed.
 */
static void test_many_counts_one_bucket_bisected(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 2);
  struct last_way w[128] = {{0}};
  cgrt_step_report rep;
  const int steps = NCOUNTS * 150;
  int rare_steps = 0;
  for (int i = 0; i < 3; i++) /* bucket 64 captured: 64 tokens, unpadded, not followed */
    step(f, i, 64, &rep);
  for (int i = 0; i < steps; i++) {
    /* 40 tokens (bucket 64) every 500th step: 9 steps in all, below 16 */
    int64_t t = i % 500 == 499 ? 40 : many_count(i);
    step(f, i, t, &rep);
    if (t == 40) {
      rare_steps++;
      assert_int_equal(rep.mode, CGRT_MODE_REPLAY); /* never run eagerly: never probed */
      assert_int_equal(rep.padded_tokens, 64);
      continue;
    }
    w[t].seen++;
    w[t].eager = rep.mode == CGRT_MODE_EAGER;
    w[t].padded = rep.padded_tokens;
  }
  assert_true(rare_steps > 0 && rare_steps < 16);
  for (int64_t t = 65; t < 128; t += 2) {
    assert_true(w[t].seen >= 100);
    if (t < THRESHOLD) {
      if (!w[t].eager || w[t].padded != t)
        fail_msg("%lld tokens: eager is faster, but its last step ran %s at %lld", (long long)t,
                 w[t].eager ? "eagerly" : "replayed", (long long)w[t].padded);
    } else if (w[t].eager || w[t].padded != 128) {
      fail_msg("%lld tokens: its bucket is faster, but its last step ran %s at %lld", (long long)t,
               w[t].eager ? "eagerly" : "replayed", (long long)w[t].padded);
    }
  }
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  int below = (THRESHOLD - 65 + 1) / 2; /* 65 67 ... 95: 16 counts */
  assert_int_equal(s.time_eager_counts, below);
  assert_int_equal(s.time_exact_counts + s.time_exact_steps + s.time_rare_refused, 0);
  /* a bisection of 32 counts: floor(log2 32) + 1 = 6 rounds of 9 eager steps, one more round for
     the first count to reach 16 steps (it alone was eligible then); per count it was 32 x 9.
     Since session 39 a bucket may pool after 16 steps of undecided counts, before any count is
     seen 16 times: here one pivot (91, beside the threshold 96), both sides shown nothing, 2
     rounds, then no pooling until a recheck */
  if (s.time_probe_steps > (7 + 2) * 9 || s.time_probe_steps < 9)
    fail_msg("%llu eager probe steps for %d counts", (unsigned long long)s.time_probe_steps,
             NCOUNTS);
  /* every count not probed was decided by implication: at least 32 - 7 of them */
  assert_true(s.time_implied_counts >= NCOUNTS - 7);
  assert_true(s.time_implied_counts + s.time_probe_steps / 9 >= NCOUNTS);
  /* implied ranges said once per decision, not once per count: per round at most the measured
     count's line and its implied range's */
  assert_true(f->switches_said >= 2 && f->switches_said <= 2 * 7);
  fixture_close(f);
}

/*
 * Exact-size buckets only for counts seen often (session 38): in bucket 128, 80 tokens every
 * other step and 70 72 ... 78 in turn the other steps (24 steps each), eager faster than the
 * padded replay for all of them. 80 is probed first (the first seen 16 times); eager winning
 * there implies the others, none probed. 80 gets an exact-size bucket at its 64th step; the
 * others, seen fewer than 64 times, run eagerly and are counted as refused as rare, as is 80,
 * decided before its 64th step.
 */
static void test_rare_counts_get_no_exact_bucket(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 4\n", 2);
  cgrt_step_report rep;
  int64_t at_own_size[128] = {0};
  for (int i = 0; i < 240; i++) {
    int64_t t = i % 2 ? 80 : 70 + 2 * ((i / 2) % 5);
    step(f, i, t, &rep);
    if (rep.mode == CGRT_MODE_REPLAY && rep.padded_tokens == t)
      at_own_size[t]++;
    if (i >= 200 && t != 80) { /* implied: eager at their own size */
      assert_int_equal(rep.mode, CGRT_MODE_EAGER);
      assert_int_equal(rep.padded_tokens, t);
    }
  }
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.time_exact_counts, 1);
  assert_true(at_own_size[80] > 8);
  assert_int_equal(rep.padded_tokens, 80); /* the last step */
  for (int64_t t = 70; t <= 78; t += 2)
    assert_int_equal(at_own_size[t], 0);
  assert_int_equal(s.time_eager_counts, 5);
  assert_int_equal(s.time_rare_refused, 6);
  assert_int_equal(s.time_implied_counts, 5);
  assert_int_equal(s.time_probe_steps, 9);
  fixture_close(f);
}

/* The cost of test_sparse_counts_pooled: a kernel of 0.2 us below POOL_THRESHOLD tokens, 3 us from
   it on (test_many_counts_one_bucket_bisected's threshold, higher). */
#define POOL_THRESHOLD 3900

static uint64_t pool_cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != work)
    return 0;
  return ((struct params *)arg)->padded < POOL_THRESHOLD ? 200 : 3000;
}

/* by_time's own figures (cgrt_backend_figures): its pooled rounds and their probe steps, and
   the samples whose host waited. */
struct pooled {
  uint64_t rounds, probe_steps, waited, bound, overturned, set_aside;
};

static void pooled_figure(void *user, const char *name, uint64_t value) {
  struct pooled *p = user;
  if (strcmp(name, "by_time_pooled_rounds") == 0)
    p->rounds = value;
  else if (strcmp(name, "by_time_pooled_probe_steps") == 0)
    p->probe_steps = value;
  else if (strcmp(name, "by_time_waited_samples") == 0)
    p->waited = value;
  else if (strcmp(name, "by_time_bound_buckets") == 0)
    p->bound = value;
  else if (strcmp(name, "by_time_eager_overturned") == 0)
    p->overturned = value;
  else if (strcmp(name, "by_time_set_aside_rounds") == 0)
    p->set_aside = value;
}

/*
 * Counts too sparse to probe one by one (session 38, pooled probes): buckets 1 32 1024 4096, and
 * 4000 steps alternating between bucket 1024 (33-1023) and bucket 4096 (1025-4095), each count in a
 * scrambled order seen once or twice in all, so none reaches BYTIME_MIN_SEEN (16) and no count is
 * ever probed on its own. Bucket 4096 (a kernel of 3 us padded): eager is far faster below
 * POOL_THRESHOLD (about 4.6 us against the replay's 9.5) and far slower from it on (about 13 us);
 * bucket 1024 (kernels of 0.2 us): the replay (about 1 us) beats eager (4.6 us) everywhere. Pooled
 * probes decide both: counts of bucket 4096 up to a pivot well below the threshold end eager
 * (eager samples of counts >= P beat the replay), no count at or above the threshold is served
 * eagerly but to sample it, bucket 1024 keeps its replay (eager samples of counts <= P lose to it),
 * and the probe steps stay within BYTIME_POOL_ROUNDS (8) rounds of 9 per bucket. Without pooling
 * nothing of this is decided: every count keeps its bucket (the rule before).
 */
static void test_sparse_counts_pooled(void **state) {
  (void)state;
  inference = "buckets = list\nlist = 1 32 1024 4096\nmax_tokens = 4096\n";
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 0);
  inference = NULL;
  struct cgrt_host_cost c = {
      .launch_ns = 1000, .graph_launch_ns = 100, .graph_node_ns = 50, .node_ns = pool_cost_ns};
  assert_int_equal(cgrt__host_set_cost(&f->rt->dev, &c), 0);
  static unsigned char seen[4096];
  int64_t eager_big_below = 0, big_below = 0; /* bucket 4096, counts < 3000, the last 1000 steps */
  int eager_above = 0, eager_small = 0;       /* eager at >= the threshold; in bucket 1024 */
  cgrt_step_report rep;
  const int steps = 4000;
  for (int i = 0; i < steps; i++) {
    int k = i / 2;
    int64_t t = i % 2 ? 1025 + (k * 1237) % 3071 : 33 + (k * 577) % 991;
    step(f, i, t, &rep);
    seen[t]++;
    int eager = rep.mode == CGRT_MODE_EAGER;
    if (eager)
      assert_int_equal(rep.padded_tokens, t);
    else
      assert_int_equal(rep.padded_tokens, t > 1024 ? 4096 : 1024);
    eager_above += eager && t >= POOL_THRESHOLD;
    eager_small += eager && t <= 1024;
    if (i >= steps - 1000 && t > 1024 && t < 3000) {
      big_below++;
      eager_big_below += eager;
    }
  }
  for (int t = 0; t < 4096; t++)
    assert_true(seen[t] <= 3);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  struct pooled p = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  /* every eager probe step was a pooled one (no count was probed on its own), within the bound */
  assert_int_equal(p.probe_steps, s.time_probe_steps);
  /* at most 8 rounds of 9 eager steps per bucket; each completed round, and one running at the
     end in either bucket, 9 at most */
  assert_true(p.rounds >= 3 && p.rounds <= 2 * 8);
  if (s.time_probe_steps > 2 * 8 * 9 || s.time_probe_steps > (p.rounds + 2) * 9 ||
      s.time_probe_steps < 9)
    fail_msg("%llu probe steps for %llu pooled rounds", (unsigned long long)s.time_probe_steps,
             (unsigned long long)p.rounds);
  /* below the threshold, bucket 4096's counts end eager (decided, then implied as they come) */
  if (eager_big_below != big_below)
    fail_msg("%lld of %lld late steps of bucket 4096 below 3000 tokens ran eagerly",
             (long long)eager_big_below, (long long)big_below);
  assert_true(s.time_eager_counts > 500 && s.time_implied_counts > s.time_eager_counts);
  assert_true(s.time_eager_steps > 500);
  /* at or above it, eager only to sample it; in bucket 1024, likewise */
  assert_true((uint64_t)(eager_above + eager_small) <= s.time_probe_steps);
  fixture_close(f);
}

/* Adaptive buckets by time: by_time's figures reach the planner, which plans by time. */
static void test_adaptive_plans_by_time(void **state) {
  (void)state;
  struct fixture *f = fixture_open("buckets = adaptive\nadapt_interval = 150\n"
                                   "[local]\nby_time = on\nexact_buckets = 0\n",
                                   1);
  cgrt_step_report last[3];
  run(f, 600, last);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  /* the padded-token plan would give 3, 65 and 90 buckets of their own; planned by time, a set
     came that serves the traffic no slower, and the log said it planned by time */
  assert_true(s.bucket_changes >= 1);
  assert_true(f->planned_by_time >= 1);
  fixture_close(f);
}

static void nothing(void *arg) {
  (void)arg;
}

/* The figures of `way` in a by_time line: "WAY 20.0 us (host 20.0, device 0.6)", or fails. */
static void figures_of(const char *line, const char *way, double *us, double *host,
                       double *device) {
  char what[64];
  snprintf(what, sizeof(what), "%s ", way);
  for (const char *p = strstr(line, what); p; p = strstr(p + 1, what))
    if (sscanf(p + strlen(what), "%lf us (host %lf, device %lf)", us, host, device) == 3)
      return;
  fail_msg("no figures of '%s' in: %s", way, line);
}

/* Device work of `arg` ns (a uint64_t) that the host queues and never waits for. */
static void hold(void *arg) {
  (void)arg;
}

static uint64_t backlog_cost_ns(void *user, void (*fn)(void *), void *arg) {
  if (fn == hold)
    return *(const uint64_t *)arg;
  return step_cost_ns(user, fn, arg);
}

static uint64_t held_cost_ns(void *user, void (*fn)(void *), void *arg) {
  if (fn == hold)
    return *(const uint64_t *)arg;
  return cost_ns(user, fn, arg);
}

/*
 * A watch taken wholly behind the device (session 50): 90 tokens served eagerly as in
 * eager_gets_slower, then each step issued behind 8 queued holds of 50 us on a stream that holds 8
 * launches: each of the step's 4 launches waits for a hold to finish (host about 204 us a step),
 * and the device is still behind the step when the host has issued it; its kernels then run back
 * to back (about 3.3 us, the replay 5.7). Every watched sample waited alike, so the waits are not
 * told from the host's issue time, but the device stayed behind with eager serving: its launches
 * were hidden, and the watch holds eager by its device spans. Judged by the host's figure, it
 * sent the count back to its bucket (the rule before).
 */
static void test_watch_behind_the_device_judged_by_device_spans(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 1);
  cgrt_step_report rep;
  for (int i = 0; i < 300; i++)
    step(f, i, 90, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  struct figures before = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, figure, &before), 0);
  struct cgrt_host_cost c = {.launch_ns = 1000,
                             .graph_launch_ns = 100,
                             .graph_node_ns = 50,
                             .node_ns = held_cost_ns,
                             .queue_depth = 8};
  assert_int_equal(cgrt__host_set_cost(&f->rt->dev, &c), 0);
  const struct cgrt_host_api *h = &f->rt->host;
  uint64_t hold_ns = 50 * 1000;
  for (int i = 300; i < 600; i++) {
    for (int k = 0; k < 8; k++)
      assert_int_equal(h->host_fn(h, h->stream(h), hold, &hold_ns), 0);
    uint64_t t0 = h->now_ns(h);
    step_nowait(f, i, i % 100, 90, &rep);
    assert_true(h->now_ns(h) - t0 > 150 * 1000); /* the host waited in its launches */
    assert_int_equal(cgrt_synchronize(f->rt), 0);
    assert_true(f->out[MODS - 1] == 8 * f->value + 7);
    assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  }
  struct figures w = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, figure, &w), 0);
  assert_true(w.watched >= before.watched + 8);
  assert_int_equal(w.overturned, 0);
  fixture_close(f);
}

/*
 * A backlogged stream (issue 43, session 38): the host never waits for the device within a batch
 * of steps, and 10 ms of device work queued before each batch keeps the device behind, so every
 * step's kernels are queued before the device reaches its start event. 80 tokens in bucket 128,
 * eager launches costing the host 5 us each: eager issues 4 launches (prepare's and 3 modules'),
 * 20 us of host time, while its device span is its kernels' alone (3 x 0.2 us); the padded replay
 * takes about 9.2 us of device time and about 5.3 us of host time. By device time alone (the rule
 * before) eager looked 15 times faster and served the count; a step's cost is the larger of its
 * host and device times, so the replay (9.2 us) beats eager (20 us) and the bucket stays.
 */
/* Batches of 6 steps of `tokens` (ntok counts in turn), each batch behind 10 ms of held device
   work, the host never waiting within a batch (unless `bounded`: [runtime] max_queued_steps makes
   it wait); eager launches cost the host 5 us. The last report; *eager_after: the steps run
   eagerly from batch 20 on. */
static cgrt_step_report run_queue(struct fixture *f, int batches, const int64_t *tokens, int ntok,
                                  int *eager_after, int bounded) {
  uint64_t hold_ns = 10 * 1000 * 1000;
  struct cgrt_host_cost c = {
      .launch_ns = 5000, .graph_launch_ns = 100, .graph_node_ns = 50, .node_ns = backlog_cost_ns};
  assert_int_equal(cgrt__host_set_cost(&f->rt->dev, &c), 0);
  const struct cgrt_host_api *h = &f->rt->host;
  cgrt_step_report rep = {0};
  *eager_after = 0;
  for (int batch = 0; batch < batches; batch++) {
    assert_int_equal(h->host_fn(h, h->stream(h), hold, &hold_ns), 0);
    uint64_t t0 = h->now_ns(h);
    for (int i = 0; i < 6; i++) {
      step_nowait(f, batch * 6 + i, batch % 100, tokens[(batch * 6 + i) % ntok], &rep);
      *eager_after += batch >= 20 && rep.mode == CGRT_MODE_EAGER;
    }
    /* the host ran far ahead of the device: the batch was backlogged throughout */
    assert_true(bounded || h->now_ns(h) - t0 < hold_ns / 10);
    assert_int_equal(cgrt_synchronize(f->rt), 0);
    assert_true(f->out[MODS - 1] == 8 * f->value + 7);
  }
  return rep;
}

static cgrt_step_report run_backlogged(struct fixture *f, int batches, const int64_t *tokens,
                                       int ntok, int *eager_after) {
  return run_queue(f, batches, tokens, ntok, eager_after, 0);
}

static void test_backlogged_stream_keeps_graphs_when_eager_costs_the_host_more(void **state) {
  (void)state;
  log_debug = 1;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 0);
  log_debug = 0;
  int eager_after;
  const int64_t eighty = 80;
  cgrt_step_report rep = run_backlogged(f, 40, &eighty, 1, &eager_after);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  /* eager was measured by rounds of 9 eager steps exactly: a probe step that finds every timing
     pair in flight is served the count's own way (it once ran eagerly untimed: 11 here). Every
     sample was taken behind the device, and only eager's host figure kept the bucket (by its
     device span eager is far faster): the first BYTIME_RETRIES (2) rounds were set aside, the
     third stands (session 50) */
  assert_int_equal(s.time_probe_steps, 27);
  struct pooled p = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.set_aside, 2);
  assert_int_equal(s.time_eager_counts, 0);
  assert_int_equal(eager_after, 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(rep.padded_tokens, 128);
  /* one line at info, at the first round set aside: the host's distance ahead, and the key that
     bounds it (session 51) */
  assert_int_equal(f->switches_said, 1);
  assert_non_null(strstr(f->said[0], "80 tokens (bucket 128): a probe round was set aside"));
  assert_non_null(strstr(f->said[0], "[runtime] max_queued_steps = 2"));
  /* the decision, with its figures: eager's device span alone is far below the replay's */
  assert_non_null(strstr(f->kept, "80 tokens (bucket 128) still served replayed at its bucket"));
  double us, host, device, rus, rhost, rdevice;
  figures_of(f->kept, "eager", &us, &host, &device);
  figures_of(f->kept, "replayed at its bucket", &rus, &rhost, &rdevice);
  assert_true(host == 20.0 && device < 1.0 && us == host);
  assert_true(rdevice > 9.0 && rdevice < 9.5 && rhost < rdevice && rus == rdevice);
  assert_true(device < rdevice && rus < us);
  fixture_close(f);
}

/*
 * The same with one exact-size bucket allowed (session 50): the count kept its bucket by a figure
 * taken wholly behind the device, so it is contested: once seen 64 more times it gets an
 * exact-size trial, a replay timed on the device, which beats the padded replay (about 9.2 us)
 * and serves it from then on. Before, a replay that beat eager's figure by more than BYTIME_NEAR
 * kept the count at its bucket with no trial.
 */
static void test_backlogged_stream_doubtful_count_gets_an_exact_bucket(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 1\n", 0);
  int eager_after;
  const int64_t eighty = 80;
  cgrt_step_report rep = run_backlogged(f, 80, &eighty, 1, &eager_after);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  struct pooled p = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.set_aside, 2);
  assert_int_equal(s.time_exact_counts, 1);
  assert_int_equal(s.time_eager_counts, 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(rep.padded_tokens, 80);
  assert_int_equal(f->switches_said, 2); /* the hint of max_queued_steps, then the decision */
  assert_non_null(strstr(f->said[0], "max_queued_steps = 2"));
  assert_non_null(strstr(f->said[1], "80 tokens (bucket 128) served at an exact-size bucket"));
  fixture_close(f);
}

/*
 * The same host and device with [runtime] max_queued_steps = 2 (session 51): before issuing a step
 * the host waits for the step two before it, so no step is queued behind the held work of more
 * than the step before it, and eager's rounds are not set aside: the first stands, its figures
 * eager's own (host 20 us against the replay's 9.2 us: the bucket stays), and nothing is said at
 * info. On an H200, decode_small's rounds had the same turn (docs/decisions.md, session 51).
 */
static void test_bounded_queue_rounds_measure_the_step(void **state) {
  (void)state;
  log_debug = 1;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n"
                                   "[runtime]\nmax_queued_steps = 2\n",
                                   0);
  log_debug = 0;
  int eager_after;
  const int64_t eighty = 80;
  cgrt_step_report rep = run_queue(f, 40, &eighty, 1, &eager_after, 1);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_true(s.queue_waits > 0);
  struct pooled p = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.set_aside, 0);
  assert_int_equal(s.time_probe_steps, 9);
  assert_int_equal(s.time_eager_counts, 0);
  assert_int_equal(eager_after, 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(rep.padded_tokens, 128);
  assert_int_equal(f->switches_said, 0);
  double us, host, device, rus, rhost, rdevice;
  figures_of(f->kept, "eager", &us, &host, &device);
  figures_of(f->kept, "replayed at its bucket", &rus, &rhost, &rdevice);
  assert_true(host == 20.0 && us == host);
  assert_true(rus == rdevice && rus < us);
  fixture_close(f);
}

/*
 * A doubtful decision implies nothing (session 50): 70 tokens behind the backlog until its rounds
 * stand (the bucket kept only by host figures taken wholly behind the device), then 71 tokens.
 * Eager cost is non-decreasing in tokens, but a figure of waits is not eager's cost: 71 is not
 * implied to keep the bucket by 70's, and is probed on its own (its rounds set aside alike).
 * Before, every count >= 70 kept the bucket unprobed: an H200 kept 7 and 8 tokens at bucket 64 so,
 * implied by 6.
 */
static void test_backlogged_doubtful_decision_implies_nothing(void **state) {
  (void)state;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 0);
  int eager_after;
  const int64_t seventy = 70, seventy_one = 71;
  (void)run_backlogged(f, 40, &seventy, 1, &eager_after);
  struct pooled p = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.set_aside, 2);
  cgrt_step_report rep = run_backlogged(f, 40, &seventy_one, 1, &eager_after);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(s.time_implied_counts, 0);
  assert_int_equal(p.set_aside, 4);
  assert_int_equal(s.time_probe_steps, 54);
  assert_int_equal(rep.padded_tokens, 128);
  fixture_close(f);
}

static uint64_t device_bound_cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != work)
    return 0;
  return 250 * (uint64_t)((struct params *)arg)->padded;
}

/* by_time on, no exact-size buckets, kernels costing `node_ns`: 1 us an eager launch. */
static struct fixture *device_bound_fixture(uint64_t (*node_ns)(void *, void (*)(void *), void *)) {
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 0);
  struct cgrt_host_cost c = {
      .launch_ns = 1000, .graph_launch_ns = 100, .graph_node_ns = 50, .node_ns = node_ns};
  assert_int_equal(cgrt__host_set_cost(&f->rt->dev, &c), 0);
  return f;
}

/*
 * The opposite: a host that waits every step, eager bound by the device. 80 tokens' kernels take
 * 20 us each eagerly and 32 us padded to 128: eager's device time (about 62 us) is above its host
 * time (4 us) and is its cost, the replay's (about 97 us) too; eager is faster and serves.
 */
static void test_device_bound_eager_served_by_its_device_time(void **state) {
  (void)state;
  struct fixture *f = device_bound_fixture(device_bound_cost_ns);
  cgrt_step_report rep;
  for (int i = 0; i < 60; i++)
    step(f, i, 80, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(rep.padded_tokens, 80);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.time_eager_counts, 1);
  assert_int_equal(f->switches_said, 1);
  assert_non_null(strstr(f->said[0], "80 tokens (bucket 128) served eagerly from now on"));
  assert_non_null(strstr(
      f->said[0], "the larger of host issue (median, waits left out) and device time (median)"));
  struct pooled p = {0}; /* a host that waits between steps, never in them: no sample waited */
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.waited, 0);
  double us, host, device, rus, rhost, rdevice;
  figures_of(f->said[0], "eagerly", &us, &host, &device);
  figures_of(f->said[0], "replayed at its bucket", &rus, &rhost, &rdevice);
  assert_true(host == 4.0 && device > 60 && device < 63 && us == device);
  assert_true(rdevice > 96 && rdevice < 98 && rhost < 2 && rus == rdevice);
  fixture_close(f);
}

/*
 * The device-bound rule (bytime.h): under the same costs, bucket 128's replay (about 97 us) costs
 * more than 8 times the host's time to issue an eager step (4 us, from 3 tokens' probe at bucket
 * 32, whose own replay of about 24 us is not device-bound; an earlier, slower round does not
 * count). Counts of bucket 128 that each come once, too sparse for a probe of their own or a pooled
 * round yet: once the bucket's replay has its samples, every count up to 128 / 1.4 (91) is served
 * eagerly, none probed, said once at info; a count above stays at its bucket.
 */
static void test_device_bound_bucket_serves_sparse_counts_eagerly(void **state) {
  (void)state;
  struct fixture *f = device_bound_fixture(device_bound_cost_ns);
  cgrt_step_report rep;
  int i = 0;
  /* 20 tokens' probe with 40 more launches a module: an eager round whose host time (124 us) is
     more than bucket 128's replay / 8, as a round whose every sample waited behind a backlog (it
     keeps bucket 32); then 3 tokens' probe without them (4 us, eager wins): the rule takes the
     fastest round's figure */
  f->pads = 40;
  for (; i < 40; i++)
    step(f, i, 20, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  f->pads = 0;
  for (; i < 80; i++)
    step(f, i, 3, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  cgrt_stats s0 = {.struct_size = sizeof(s0)};
  assert_int_equal(cgrt_stats_get(f->rt, &s0), 0);
  struct pooled p = {0};
  int64_t t = 65, first_eager = 0;
  for (; t <= 91; t++) {
    step(f, i++, t, &rep);
    if (rep.mode == CGRT_MODE_EAGER && !first_eager)
      first_eager = t;
    if (first_eager && (rep.mode != CGRT_MODE_EAGER || rep.padded_tokens != t))
      fail_msg("%lld tokens: mode %d at %lld after the rule", (long long)t, (int)rep.mode,
               (long long)rep.padded_tokens);
  }
  /* two warm-up steps, the capture, then the replay's 8 samples (read a step later) */
  if (first_eager == 0 || first_eager > 65 + 12)
    fail_msg("the first count of bucket 128 served eagerly: %lld", (long long)first_eager);
  step(f, i++, 100, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(rep.padded_tokens, 128);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.time_probe_steps, s0.time_probe_steps); /* none of them probed */
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.bound, 1);
  assert_int_equal(p.rounds, 0);
  int said = 0;
  for (int k = 0; k < f->switches_said && k < 4; k++)
    if (strstr(f->said[k], "counts <= 91 of bucket 128 served eagerly from now on") &&
        strstr(f->said[k], "the bucket is device-bound"))
      said++;
  assert_int_equal(said, 1);
  fixture_close(f);
}

/*
 * The same, the slow round alone known when bucket 128's replay has its samples (the rule judges
 * it launch-bound then: 97 us against 8 x 124), the fast one later: judged again, it acts.
 */
static void test_device_bound_judged_again_after_a_faster_round(void **state) {
  (void)state;
  struct fixture *f = device_bound_fixture(device_bound_cost_ns);
  cgrt_step_report rep;
  int i = 0;
  f->pads = 40;
  for (; i < 40; i++)
    step(f, i, 20, &rep);
  f->pads = 0;
  /* two warm-up steps, then the replay's 8 samples (read a step later); too few for pooling */
  for (int64_t t = 65; t <= 76; t++, i++)
    step(f, i, t, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY); /* no rule yet */
  struct pooled p = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.bound, 0);
  for (int k = 0; k < 40; k++, i++)
    step(f, i, 3, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  for (int64_t t = 77; t <= 91; t++, i++) {
    step(f, i, t, &rep);
    assert_int_equal(rep.mode, CGRT_MODE_EAGER);
    assert_int_equal(rep.padded_tokens, t);
  }
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.bound, 1);
  fixture_close(f);
}

/* Kernels of 1 ns a padded token: bucket 128's replay about 384 us, 96 times eager's host time. */
static uint64_t steep_cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != work)
    return 0;
  return 1000 * (uint64_t)((struct params *)arg)->padded;
}

/*
 * Far past BYTIME_BOUND: with the replay 96 times eager's host time, eager's worst case at any
 * count (its launches over the replay, about 1%) is within the margin, so the rule goes up to where
 * eager's work and launches beat the replay by the margin if work grows with tokens:
 * 128 x (1 / 1.02 - 1 / 96) = 124. 125 stays at its bucket.
 */
static void test_device_bound_far_goes_up_to_the_margin(void **state) {
  (void)state;
  struct fixture *f = device_bound_fixture(steep_cost_ns);
  cgrt_step_report rep;
  int i = 0;
  for (; i < 40; i++)
    step(f, i, 3, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  int64_t first_eager = 0;
  for (int64_t t = 65; t <= 124; t++, i++) {
    step(f, i, t, &rep);
    if (rep.mode == CGRT_MODE_EAGER && !first_eager)
      first_eager = t;
    if (first_eager && rep.mode != CGRT_MODE_EAGER)
      fail_msg("%lld tokens: mode %d after the rule", (long long)t, (int)rep.mode);
  }
  if (first_eager == 0 || first_eager > 65 + 12)
    fail_msg("the first count of bucket 128 served eagerly: %lld", (long long)first_eager);
  step(f, i++, 125, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  int said = 0;
  for (int k = 0; k < f->switches_said && k < 4; k++)
    if (strstr(f->said[k], "counts <= 124 of bucket 128 served eagerly from now on") &&
        strstr(f->said[k], "is at most 1.0% slower"))
      said++;
  assert_int_equal(said, 1);
  fixture_close(f);
}

/* From 64 tokens, work that does not shrink with tokens and runs faster at multiples of 64 (a
   kernel's tiles): 96 us a kernel at 64 or 128 padded tokens, 125 us at 65-127; 0.2 us below. */
static uint64_t uneven_cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != work)
    return 0;
  int64_t padded = ((struct params *)arg)->padded;
  return padded < 64 ? 200 : padded % 64 == 0 ? 96000 : 125000;
}

/*
 * Where the rule's assumption fails (eager at 65-124 tokens 30% slower than the replay at 128 on
 * the device): every eager step of the bucket is watched, so 8 of them overturn it, the counts go
 * back to the bucket, and the rule stays off there (the bucket measured again does not send them
 * eager a second time).
 */
static void test_device_bound_rule_overturned_by_its_watch(void **state) {
  (void)state;
  struct fixture *f = device_bound_fixture(uneven_cost_ns);
  cgrt_step_report rep;
  int i = 0;
  for (; i < 40; i++) /* an eager round (3 tokens' probe, bucket 32 kept): the host figure, 4 us */
    step(f, i, 3, &rep);
  /* two warm-up steps, the capture, 8 replays (the replay's samples), then eager from the rule
     until its watch's 8th sample is read a step later: 8 eager steps, then replays */
  int eager = 0;
  for (int64_t t = 65; t <= 90; t++, i++) {
    step(f, i, t, &rep);
    eager += rep.mode == CGRT_MODE_EAGER;
  }
  if (eager < 8 || eager > 10)
    fail_msg("%d steps of bucket 128 ran eagerly before the watch overturned the rule", eager);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  /* measured again: the rule stays off (a pooled round may still probe eager, and loses) */
  for (int64_t t = 91; t <= 127; t++, i++)
    step(f, i, t, &rep);
  struct pooled p = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_int_equal(p.bound, 1);
  assert_int_equal(p.overturned, 1);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(rep.padded_tokens, 128);
  int said = 0;
  for (int k = 0; k < f->switches_said && k < 4; k++)
    said += strstr(f->said[k], "served replayed at their bucket again") != NULL;
  assert_int_equal(said, 1);
  fixture_close(f);
}

static uint64_t queued_cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != work && fn != pad)
    return 0;
  return 40 * (uint64_t)((struct params *)arg)->padded;
}

/*
 * A host far ahead of the device, waiting in its launches (issue 43, session 40: on an H200, 200
 * tokens eagerly with a fresh input drew host times of 714-831 us in three samples of a round and
 * 1661-6373 us in five, behind padded replays, against 1362-1369 us on the device; eager, 12%
 * faster on the device, lost to the replay). The host never waits for the device, and a stream
 * holds at most 160 unfinished launches (the host driver's queue_depth, as CUDA's holds about a
 * thousand). Each module launches 8 kernels of 40 ns a padded token: 80 tokens eagerly are 25
 * launches of 1 us and 77 us on the device, the replay at 128 three graph launches and 124 us.
 * by_time keeps at most 4 timed steps in flight, so with the device this far behind some probe
 * steps are served at the bucket, and eager steps are issued behind replays: half of eager's
 * samples wait for them (264-787 us of host time against 25). The median of each sample's larger
 * part, the rule before, put eager at 171 us and kept the bucket; the host's median with those
 * waits left out and the device's median (step_cost.h) serve eager, on its device time.
 */
static void test_host_waiting_in_a_full_launch_queue_serves_by_its_own_time(void **state) {
  (void)state;
  log_debug = 1;
  pads = 7;
  struct fixture *f = fixture_open("[local]\nby_time = on\nexact_buckets = 0\n", 0);
  pads = 0;
  log_debug = 0;
  struct cgrt_host_cost c = {.launch_ns = 1000,
                             .graph_launch_ns = 100,
                             .graph_node_ns = 50,
                             .node_ns = queued_cost_ns,
                             .queue_depth = 160};
  assert_int_equal(cgrt__host_set_cost(&f->rt->dev, &c), 0);
  const struct cgrt_host_api *h = &f->rt->host;
  cgrt_step_report rep;
  uint64_t waited = 0; /* the largest host time of one step */
  for (int i = 0; i < 300; i++) {
    uint64_t t0 = h->now_ns(h);
    step_nowait(f, i, i % 100, 80, &rep);
    if (h->now_ns(h) - t0 > waited)
      waited = h->now_ns(h) - t0;
    if (i % 50 == 49) { /* the host reads an output now and then */
      assert_int_equal(cgrt_synchronize(f->rt), 0);
      assert_true(f->out[MODS - 1] == 8 * f->value + 7);
    }
  }
  /* the host did wait in its launches, for more than a replay's time in one step, and by_time
     counted the samples that waited (four of eager's at least) */
  assert_true(waited > 200 * 1000);
  struct pooled p = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, pooled_figure, &p), 0);
  assert_true(p.waited >= 4);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.time_eager_counts, 1);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(rep.padded_tokens, 80);
  assert_int_equal(f->switches_said, 1);
  assert_non_null(strstr(f->said[0], "80 tokens (bucket 128) served eagerly from now on"));
  double us, host, device, rus, rhost, rdevice;
  figures_of(f->said[0], "eagerly", &us, &host, &device);
  figures_of(f->said[0], "replayed at its bucket", &rus, &rhost, &rdevice);
  assert_true(device > 76 && device < 79 && us == device && host < device);
  assert_true(rdevice > 120 && rdevice < 128 && rus == rdevice);
  fixture_close(f);
}

/* now_ns (host API minor 10): on the host driver, its simulated host clock: launches advance it,
   a wait for the stream moves it up to the device's. */
static void test_now_ns_is_the_host_drivers_host_clock(void **state) {
  (void)state;
  struct fixture *f = fixture_open("", 1);
  const struct cgrt_host_api *h = &f->rt->host;
  assert_true(h->minor >= 10 && CGRT_HOST_HAS(h, now_ns));
  uint64_t t0 = h->now_ns(h);
  assert_int_equal(h->host_fn(h, h->stream(h), nothing, NULL), 0);
  assert_int_equal(h->host_fn(h, h->stream(h), work, &f->params[0]), 0);
  assert_true(h->now_ns(h) == t0 + 2000);                       /* two eager launches of 1 us */
  f->params[0] = (struct params){&f->value, &f->out[0], 10000}; /* a kernel of 100.2 us */
  assert_int_equal(h->stream_sync(h, h->stream(h)), 0);
  assert_true(h->now_ns(h) >= t0 + 2000 + 100200); /* the host waited for the device */
  fixture_close(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fresh_inputs_decide_alike),
      cmocka_unit_test(test_contested_count_gets_an_exact_bucket),
      cmocka_unit_test(test_narrow_win_gets_an_exact_bucket),
      cmocka_unit_test(test_copies_that_settle),
      cmocka_unit_test(test_slower_counts_served_exact_then_eager),
      cmocka_unit_test(test_no_exact_bucket_allowed_serves_eagerly),
      cmocka_unit_test(test_off_keeps_every_padded_bucket),
      cmocka_unit_test(test_on_by_default),
      cmocka_unit_test(test_equal_times_change_nothing),
      cmocka_unit_test(test_adaptive_plans_by_time),
      cmocka_unit_test(test_many_counts_one_bucket_bisected),
      cmocka_unit_test(test_rare_counts_get_no_exact_bucket),
      cmocka_unit_test(test_sparse_counts_pooled),
      cmocka_unit_test(test_eager_that_gets_slower_goes_back_to_its_bucket),
      cmocka_unit_test(test_watch_behind_the_device_judged_by_device_spans),
      cmocka_unit_test(test_now_ns_is_the_host_drivers_host_clock),
      cmocka_unit_test(test_backlogged_stream_keeps_graphs_when_eager_costs_the_host_more),
      cmocka_unit_test(test_backlogged_stream_doubtful_count_gets_an_exact_bucket),
      cmocka_unit_test(test_backlogged_doubtful_decision_implies_nothing),
      cmocka_unit_test(test_bounded_queue_rounds_measure_the_step),
      cmocka_unit_test(test_device_bound_eager_served_by_its_device_time),
      cmocka_unit_test(test_device_bound_bucket_serves_sparse_counts_eagerly),
      cmocka_unit_test(test_device_bound_judged_again_after_a_faster_round),
      cmocka_unit_test(test_device_bound_far_goes_up_to_the_margin),
      cmocka_unit_test(test_device_bound_rule_overturned_by_its_watch),
      cmocka_unit_test(test_host_waiting_in_a_full_launch_queue_serves_by_its_own_time),
  };
  return cmocka_run_group_tests_name("bytime", tests, NULL, NULL);
}
