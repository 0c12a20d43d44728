/*
 * test_adaptive.c - `[inference] buckets = adaptive` end to end on the host driver: traffic that
 * shifts from one mode to another, the bucket set following it within one adapt_interval, the
 * graphs of retired buckets freed, every step's output correct (a graph of another bucket
 * replayed would show in the output), new buckets captured lazily or one per step; and the
 * configurations that cannot adapt refused with a clear message.
 *
 * Three modules in a chain, each "kernel" a host function: out = in * 2 + padded_tokens, with
 * padded_tokens baked into the launch as a kernel argument is. After a step at bucket p the last
 * output is 8 in + 7 p: a replay of a graph captured for bucket q != p gives 8 in + 7 q.
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

#define MODS       3
#define MAX_PARAMS (1 << 16)
#define STEPS      3000
#define SHIFT      1500
#define INTERVAL   100

struct params {
  const double *in;
  double *out;
  double add;
};

struct fixture {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  struct params params[MAX_PARAMS]; /* launch parameters, alive as long as the graphs */
  int num_params;
  struct params staged; /* prepare's launch: in = value */
  double value;
  double in, out[MODS];
};

static void work(void *arg) {
  struct params *p = arg;
  p->out[0] = p->in[0] * 2 + p->add;
}

static void stage(void *arg) {
  struct fixture *f = arg;
  f->in = f->value;
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fixture *f = user;
  if (f->num_params >= MAX_PARAMS)
    return -1;
  struct params *p = &f->params[f->num_params++];
  p->in = args->buffers[0].ptr;
  p->out = args->buffers[1].ptr;
  p->add = (double)ctx->padded_tokens;
  return cgrt_enqueue_host(ctx, work, p);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  return cgrt_enqueue_host(ctx, stage, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fixture *f = user;
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{i ? &f->out[i - 1] : &f->in, sizeof(double), CGRT_IN, "in"},
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

static struct fixture *fixture_open(const char *scope, const char *capture) {
  struct fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 2\ninference_scope = %s\n"
           "[inference]\nbuckets = adaptive\nmax_tokens = 128\nnum_graphs = 4\ncapture = %s\n"
           "adapt_interval = %d\nadapt_halflife = 50\n"
           /* each step must run at its padded bucket here: by_time would serve some counts
              eagerly at their own size to measure them (test_bytime.c) */
           "[local]\nby_time = off\n"
           "[runtime]\ndriver = host\nlog = off\n",
           scope, capture, INTERVAL);
  if (cgrt_open_string(&f->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
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

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Step i's token count: 20..40 before the shift, 90..120 after. */
static int64_t traffic(int i, uint64_t *seed) {
  uint64_t r = next_random(seed);
  return i < SHIFT ? 20 + (int64_t)(r % 21) : 90 + (int64_t)(r % 31);
}

/* The smallest bucket of the set in force >= tokens. */
static int64_t bucket_of(const cgrt_stats *s, int64_t tokens) {
  for (uint32_t i = 0; i < s->num_buckets; i++)
    if (s->buckets[i] >= tokens)
      return s->buckets[i];
  return -1;
}

/* Padding of a step of `tokens` under Megatron's exponential set for max 128, 4 graphs. */
static int64_t exponential_padding(int64_t tokens) {
  static const int64_t set[] = {1, 32, 64, 128};
  for (int i = 0; i < 4; i++)
    if (set[i] >= tokens)
      return set[i] - tokens;
  return 0;
}

struct run {
  int first_change_after_shift; /* step index, -1 if none */
  uint64_t changes;
  double padded_tail, exponential_tail; /* padding of the last 500 steps */
  uint64_t max_live;
  int most_built_in_a_step; /* after the first capture step */
  int non_replay_after_capture;
};

static void run_traffic(struct fixture *f, struct run *r) {
  memset(r, 0, sizeof(*r));
  r->first_change_after_shift = -1;
  uint64_t seed = 0x2545f4914f6cdd1dull;
  int captured_once = 0;
  uint64_t changes = 0;
  for (int i = 0; i < STEPS; i++) {
    int64_t tokens = traffic(i, &seed);
    f->value = (double)(i % 1000);
    cgrt_step_desc d = {.struct_size = sizeof(d),
                        .phase = CGRT_PHASE_INFER,
                        .tokens = tokens,
                        .prepare = prepare,
                        .body = body,
                        .user = f};
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    int rc = cgrt_step(f->rt, &d, &rep);
    if (rc != 0)
      fail_msg("step %d (%lld tokens): %s", i, (long long)tokens, cgrt_last_error(f->rt));
    assert_int_equal(cgrt_synchronize(f->rt), 0);
    cgrt_stats s = {.struct_size = sizeof(s)};
    assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
    /* the step ran at the smallest bucket of the set in force, and computed with that bucket */
    int64_t want = bucket_of(&s, tokens);
    if (rep.padded_tokens != want)
      fail_msg("step %d: %lld tokens ran at %lld, the set in force gives %lld", i,
               (long long)tokens, (long long)rep.padded_tokens, (long long)want);
    double expect = 8 * f->value + 7 * (double)want;
    if (f->out[MODS - 1] != expect)
      fail_msg("step %d (%lld tokens, bucket %lld, %s): output %.0f, expected %.0f (a stale "
               "replay of bucket %.0f?)",
               i, (long long)tokens, (long long)want, cgrt_mode_name(rep.mode), f->out[MODS - 1],
               expect, (f->out[MODS - 1] - 8 * f->value) / 7);
    if (s.bucket_changes > changes && i >= SHIFT && r->first_change_after_shift < 0)
      r->first_change_after_shift = i;
    changes = s.bucket_changes;
    if (s.live_graphs > r->max_live)
      r->max_live = s.live_graphs;
    if (captured_once) {
      if ((int)rep.graphs_built > r->most_built_in_a_step)
        r->most_built_in_a_step = (int)rep.graphs_built;
      if (rep.mode != CGRT_MODE_REPLAY)
        r->non_replay_after_capture++;
    }
    captured_once |= rep.graphs_built > 0;
    if (i >= STEPS - 500) {
      r->padded_tail += (double)(rep.padded_tokens - tokens);
      r->exponential_tail += (double)exponential_padding(tokens);
    }
  }
  r->changes = changes;
}

/* What every scope and capture time shares: the set follows the shift within one interval. */
static void check_follows(const struct fixture *f, const struct run *r) {
  assert_true(r->first_change_after_shift >= SHIFT);
  if (r->first_change_after_shift > SHIFT + INTERVAL)
    fail_msg("the set changed %d steps after the traffic did; adapt_interval is %d",
             r->first_change_after_shift - SHIFT, INTERVAL);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  int high = 0;
  for (uint32_t i = 0; i < s.num_buckets; i++)
    high += s.buckets[i] >= 90 && s.buckets[i] <= 120;
  if (high < 3)
    fail_msg("after the shift to 90..120 tokens only %d of %u buckets serve that range", high,
             s.num_buckets);
  assert_int_equal(s.buckets[s.num_buckets - 1], 128);
  /* a third of Megatron's padding at most */
  if (r->padded_tail * 3 > r->exponential_tail)
    fail_msg("last 500 steps padded %.0f tokens, exponential would pad %.0f", r->padded_tail,
             r->exponential_tail);
  assert_true(s.real_tokens > 0);
  assert_true(s.padding_tokens > 0);
}

static void layer_scope_follows_shifting_traffic(void **state) {
  (void)state;
  struct fixture *f = fixture_open("layer", "lazy");
  struct run r;
  run_traffic(f, &r);
  check_follows(f, &r);
  /* retired buckets' graphs are freed: never more than one set's worth alive */
  if (r.max_live > 4 * MODS)
    fail_msg("%llu executables alive at once; 4 buckets of %d modules need %d",
             (unsigned long long)r.max_live, MODS, 4 * MODS);
  assert_true(r.changes >= 2); /* the first plan, then the shift */
  cgrt_close(f->rt);
  free(f);
}

static void block_scope_follows_shifting_traffic(void **state) {
  (void)state;
  struct fixture *f = fixture_open("block", "lazy");
  struct run r;
  run_traffic(f, &r);
  check_follows(f, &r);
  if (r.max_live > 4)
    fail_msg("%llu body graphs alive at once, for 4 buckets", (unsigned long long)r.max_live);
  /* lazy: a new bucket is captured at its own first use after warm-up: one graph a step */
  assert_true(r.most_built_in_a_step <= 1);
  cgrt_close(f->rt);
  free(f);
}

static void eager_capture_takes_one_new_bucket_per_step(void **state) {
  (void)state;
  struct fixture *f = fixture_open("block", "eager");
  struct run r;
  run_traffic(f, &r);
  check_follows(f, &r);
  /* after the first capture step, no step captures more than one bucket, and no step waits
     for warm-up: a step's own new bucket is the one captured before it runs */
  assert_true(r.most_built_in_a_step <= 1);
  if (r.non_replay_after_capture != 0)
    fail_msg("%d steps after the first capture did not replay", r.non_replay_after_capture);
  cgrt_close(f->rt);
  free(f);
}

static void backends_that_cannot_adapt_are_refused(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  static const char *const others[] = {"none", "transformer_engine", "full_iteration"};
  for (int i = 0; i < 3; i++) {
    char ini[512];
    snprintf(ini, sizeof(ini),
             "[cuda_graph]\nimpl = %s\n[inference]\nbuckets = adaptive\n[host]\nnan_check = "
             "off\n[runtime]\ndriver = host\nlog = off\n",
             others[i]);
    assert_int_equal(cgrt_open_string(&rt, ini), CGRT_E_CONFIG);
    const char *e = cgrt_last_error(NULL);
    if (!strstr(e, "only works with impl = local") || !strstr(e, others[i]))
      fail_msg("impl = %s: %s", others[i], e);
  }
  /* a third-party backend that does not declare CGRT_CAP_ADAPTIVE_BUCKETS */
  const char *dir = getenv("CGRT_TEST_FIXTURES");
  if (dir) {
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[cuda_graph]\nimpl = %s/libcgrt-backend-newer_v1.so\n[inference]\nbuckets = "
             "adaptive\n[runtime]\ndriver = host\nlog = off\n",
             dir);
    assert_int_equal(cgrt_open_string(&rt, ini), CGRT_E_CONFIG);
    const char *e = cgrt_last_error(NULL);
    if (!strstr(e, "does not follow adaptive buckets"))
      fail_msg("%s", e);
  }
  /* bad values name their line */
  assert_int_equal(cgrt_open_string(&rt, "[cuda_graph]\nimpl = local\n[inference]\nbuckets = "
                                         "adaptive\nadapt_min_gain = 0.05x\n[runtime]\ndriver = "
                                         "host\n"),
                   CGRT_E_CONFIG);
  assert_non_null(strstr(cgrt_last_error(NULL), ":5:"));
  assert_non_null(strstr(cgrt_last_error(NULL), "percentage"));
  assert_int_equal(cgrt_open_string(&rt, "[cuda_graph]\nimpl = local\n[inference]\nbuckets = "
                                         "adaptive\nadapt_interval = 0\n[runtime]\ndriver = "
                                         "host\n"),
                   CGRT_E_CONFIG);
  assert_non_null(strstr(cgrt_last_error(NULL), "adapt_interval = 0: must be at least 1"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layer_scope_follows_shifting_traffic),
      cmocka_unit_test(block_scope_follows_shifting_traffic),
      cmocka_unit_test(eager_capture_takes_one_new_bucket_per_step),
      cmocka_unit_test(backends_that_cannot_adapt_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
