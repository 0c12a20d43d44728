/*
 * test_bucket_time.c - buckets chosen by time (issue 43): the cost model through measured points,
 * the expected step time of a set, and the planner that minimizes it, checked against brute
 * force over every set on random histograms and costs, with and without eager as an option; and
 * a case where the padded-token plan is slower than the time plan.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buckets/bucket_time.h"

static void test_model_is_linear_between_points(void **state) {
  (void)state;
  struct cgrt_step_costs c = {0};
  assert_true(cgrt__costs_at(c.replay, c.nreplay, 10) == 0);
  assert_int_equal(cgrt__costs_set(&c, 0, 64, 300), 0);
  assert_true(cgrt__costs_at(c.replay, c.nreplay, 1) == 300); /* one point: constant */
  assert_int_equal(cgrt__costs_set(&c, 0, 1, 100), 0);
  assert_int_equal(cgrt__costs_set(&c, 0, 128, 700), 0);
  assert_false(cgrt__costs_ready(&c));
  assert_true(fabs(cgrt__costs_at(c.replay, c.nreplay, 33) - (100 + 200.0 * 32 / 63)) < 1e-9);
  assert_true(fabs(cgrt__costs_at(c.replay, c.nreplay, 96) - 500) < 1e-9);
  assert_true(fabs(cgrt__costs_at(c.replay, c.nreplay, 256) - 1500) < 1e-9); /* extrapolated */
  assert_int_equal(cgrt__costs_set(&c, 0, 64, 400), 0);                      /* replaced */
  assert_int_equal((int)c.nreplay, 3);
  assert_int_equal(cgrt__costs_set(&c, 1, 0, 5), CGRT_E_INVAL);
  assert_int_equal(cgrt__costs_set(&c, 1, 5, -1), CGRT_E_INVAL);
  assert_int_equal(cgrt__costs_set(&c, 1, 1, 50), 0);
  assert_int_equal(cgrt__costs_set(&c, 1, 100, 900), 0);
  assert_true(cgrt__costs_ready(&c));
  cgrt__costs_free(&c);
}

/* The least expected time over every set of at most k buckets ending at max (brute force). */
static double brute(const struct cgrt_histogram *h, int64_t max, int k,
                    const struct cgrt_step_costs *c, int eager_ok) {
  int64_t cand[16];
  size_t m = 0;
  for (size_t i = 0; i < h->n; i++)
    if (h->steps[i] > 0 && h->sizes[i] < max)
      cand[m++] = h->sizes[i];
  double best = INFINITY;
  for (uint32_t mask = 0; mask < (1u << m); mask++) {
    int64_t set[17];
    size_t n = 0;
    for (size_t i = 0; i < m; i++)
      if (mask & (1u << i))
        set[n++] = cand[i];
    if ((int)n + 1 > k)
      continue;
    set[n++] = max;
    double t = cgrt__plan_time(h, set, n, c, eager_ok, NULL);
    if (t < best)
      best = t;
  }
  return best;
}

static void test_planner_matches_brute_force(void **state) {
  (void)state;
  srand(43);
  for (int trial = 0; trial < 400; trial++) {
    int64_t sizes[12];
    double steps[12], tokens[12];
    size_t n = 0;
    int64_t max = 64;
    for (int64_t s = 1; s <= max && n < 12; s += 1 + rand() % 8) {
      sizes[n] = s;
      steps[n] = rand() % 3 == 0 ? 0 : 1 + rand() % 50;
      tokens[n] = steps[n] * (double)s;
      n++;
    }
    struct cgrt_histogram h = {sizes, steps, tokens, n};
    /* replay: a launch floor plus a slope; eager: a higher floor and a steeper or flatter slope,
       sometimes measured crookedly (non-monotone points) */
    struct cgrt_step_costs c = {0};
    double r0 = 100 + rand() % 200, r1 = 1 + rand() % 20;
    double e0 = 150 + rand() % 300, e1 = 0.5 + rand() % 25;
    for (int64_t s = 1; s <= 128; s *= 2) {
      double wobble = rand() % 4 == 0 ? (rand() % 60) - 30 : 0;
      assert_int_equal(cgrt__costs_set(&c, 0, s, r0 + r1 * (double)s + wobble), 0);
      assert_int_equal(cgrt__costs_set(&c, 1, s, e0 + e1 * (double)s), 0);
    }
    int k = 1 + rand() % 5;
    for (int eager_ok = 0; eager_ok <= 1; eager_ok++) {
      int64_t out[8];
      size_t count = 0;
      double t = 0;
      assert_int_equal(cgrt__buckets_fastest(&h, max, k, &c, eager_ok, out, &count, &t), 0);
      assert_true(count >= 1 && (int)count <= k);
      assert_int_equal(out[count - 1], max);
      for (size_t i = 1; i < count; i++)
        assert_true(out[i - 1] < out[i]);
      double again = cgrt__plan_time(&h, out, count, &c, eager_ok, NULL);
      double b = brute(&h, max, k, &c, eager_ok);
      if (fabs(t - b) > 1e-6 * (1 + b) || fabs(again - t) > 1e-6 * (1 + t))
        fail_msg("trial %d (k %d, eager %d): planner %.6f (set %.6f), brute force %.6f", trial, k,
                 eager_ok, t, again, b);
    }
    cgrt__costs_free(&c);
  }
}

/*
 * Decode-like costs (issue 43's H200 row shape): the padded-token plan pads 200 to 256 where the
 * time plan serves 200 eagerly or gives it a bucket of its own; the time plan is never slower.
 */
static void test_time_plan_beats_padded_plan_where_padding_dominates(void **state) {
  (void)state;
  int64_t sizes[] = {1, 3, 200, 400};
  double steps[] = {100, 100, 100, 100}, tokens[] = {100, 300, 20000, 40000};
  struct cgrt_histogram h = {sizes, steps, tokens, 4};
  struct cgrt_step_costs c = {0};
  /* replay at b: 500 + 4.8 b us; eager at s: 800 + 3.9 s us (eager launch-bound at 1 token,
     graphs work-bound at 512) */
  for (int64_t s = 1; s <= 512; s *= 2) {
    assert_int_equal(cgrt__costs_set(&c, 0, s, 500 + 4.8 * (double)s), 0);
    assert_int_equal(cgrt__costs_set(&c, 1, s, 800 + 3.9 * (double)s), 0);
  }
  int64_t tok[2], fast[2];
  size_t ntok = 0, nfast = 0;
  double padded = 0, t = 0;
  assert_int_equal(cgrt__buckets_optimal(&h, 512, 2, tok, &ntok, &padded), 0);
  assert_int_equal(cgrt__buckets_fastest(&h, 512, 2, &c, 1, fast, &nfast, &t), 0);
  double t_tok = cgrt__plan_time(&h, tok, ntok, &c, 0, NULL);
  double t_tok_eager = cgrt__plan_time(&h, tok, ntok, &c, 1, NULL);
  assert_true(t <= t_tok_eager + 1e-9);
  assert_true(t < t_tok * 0.95);
  double eager_steps = 0;
  (void)cgrt__plan_time(&h, fast, nfast, &c, 1, &eager_steps);
  assert_true(eager_steps > 0); /* some range runs eagerly */
  cgrt__costs_free(&c);
}

static void test_refusals(void **state) {
  (void)state;
  int64_t sizes[] = {4, 2};
  double steps[] = {1, 1}, tokens[] = {4, 2};
  struct cgrt_histogram h = {sizes, steps, tokens, 2};
  struct cgrt_step_costs c = {0};
  int64_t out[4];
  size_t n;
  double t;
  assert_int_equal(cgrt__buckets_fastest(&h, 8, 2, &c, 1, out, &n, &t), CGRT_E_INVAL); /* costs */
  for (int64_t s = 1; s <= 8; s *= 2) {
    assert_int_equal(cgrt__costs_set(&c, 0, s, (double)s), 0);
    assert_int_equal(cgrt__costs_set(&c, 1, s, (double)s), 0);
  }
  assert_int_equal(cgrt__buckets_fastest(&h, 8, 2, &c, 1, out, &n, &t), CGRT_E_INVAL); /* order */
  assert_int_equal(cgrt__buckets_fastest(&h, 8, 0, &c, 1, out, &n, &t), CGRT_E_INVAL);
  cgrt__costs_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_model_is_linear_between_points),
      cmocka_unit_test(test_planner_matches_brute_force),
      cmocka_unit_test(test_time_plan_beats_padded_plan_where_padding_dominates),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests_name("bucket_time", tests, NULL, NULL);
}
