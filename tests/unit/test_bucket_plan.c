/*
 * test_bucket_plan.c - buckets chosen from traffic: the planner's set costs exactly what brute
 * force over every set finds on small random histograms, the cost of a set is the padding a user
 * would count by hand, and the adaptive histogram decays by its half-life and adopts a set only
 * when it saves enough.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buckets/bucket_plan.h"
#include "config/config.h"

/* A small deterministic generator, so a failure can be replayed from its seed. */
static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

struct hist {
  int64_t sizes[32];
  double steps[32];
  double tokens[32];
  size_t n;
};

/* Least padding over every set of at most k buckets that ends at max (subsets of the sizes). */
static double brute_force(const struct hist *h, int64_t max, int k) {
  int64_t cand[32];
  size_t m = 0;
  for (size_t i = 0; i < h->n; i++)
    if (h->steps[i] > 0 && h->sizes[i] < max)
      cand[m++] = h->sizes[i];
  struct cgrt_histogram hg = {h->sizes, h->steps, h->tokens, h->n};
  double best = -1;
  for (uint32_t mask = 0; mask < (1u << m); mask++) {
    if (__builtin_popcount(mask) > k - 1)
      continue;
    int64_t set[33];
    size_t nb = 0;
    for (size_t i = 0; i < m; i++)
      if (mask & (1u << i))
        set[nb++] = cand[i];
    set[nb++] = max;
    double p = cgrt__buckets_padded(&hg, set, nb, NULL);
    if (best < 0 || p < best)
      best = p;
  }
  return best;
}

static void planner_equals_brute_force(void **state) {
  (void)state;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int trial = 0; trial < 2000; trial++) {
    struct hist h = {0};
    int64_t tp = 1 + (int64_t)(next_random(&seed) % 4);
    int64_t max = tp * (int64_t)(4 + next_random(&seed) % 60);
    if (next_random(&seed) % 3 == 0)
      max += (int64_t)(next_random(&seed) % (uint64_t)tp); /* max need not be a multiple of tp */
    /* distinct needed sizes: multiples of tp below max, maybe max itself */
    int64_t size = 0;
    while (h.n < 14) {
      size =
          cgrt__bucket_need(size + 1 + (int64_t)(next_random(&seed) % (uint64_t)(3 * tp)), tp, max);
      h.sizes[h.n] = size;
      int64_t steps = (int64_t)(next_random(&seed) % 50);
      h.steps[h.n] = (double)steps;
      /* real tokens: each step holds between size - tp + 1 and size tokens */
      double tok = 0;
      for (int64_t s = 0; s < steps; s++) {
        int64_t lo = size - tp + 1 > 1 ? size - tp + 1 : 1;
        tok += (double)(lo + (int64_t)(next_random(&seed) % (uint64_t)(size - lo + 1)));
      }
      h.tokens[h.n] = tok;
      h.n++;
      if (size == max)
        break;
    }
    int k = 1 + (int)(next_random(&seed) % 6);
    int64_t out[8];
    size_t count = 0;
    double padded = -1;
    struct cgrt_histogram hg = {h.sizes, h.steps, h.tokens, h.n};
    assert_int_equal(cgrt__buckets_optimal(&hg, max, k, out, &count, &padded), 0);
    double want = brute_force(&h, max, k);
    if (padded != want)
      fail_msg("trial %d (k %d, tp %lld, max %lld): planner pads %.1f, brute force %.1f", trial, k,
               (long long)tp, (long long)max, padded, want);
    /* the set it returns costs what it says, ends at max, is ascending and at most k long */
    assert_true(count >= 1 && count <= (size_t)k);
    assert_int_equal(out[count - 1], max);
    for (size_t i = 1; i < count; i++)
      assert_true(out[i] > out[i - 1]);
    assert_true(cgrt__buckets_padded(&hg, out, count, NULL) == padded);
  }
}

static void padding_is_counted_as_a_user_would(void **state) {
  (void)state;
  /* 3 steps of 5 tokens, 1 of 7, 2 of 30 tokens; buckets 8 and 32 */
  int64_t sizes[] = {5, 7, 30};
  double steps[] = {3, 1, 2};
  double tokens[] = {15, 7, 60};
  struct cgrt_histogram h = {sizes, steps, tokens, 3};
  int64_t set[] = {8, 32};
  double eager = -1;
  assert_true(cgrt__buckets_padded(&h, set, 2, &eager) == 3 * 3 + 1 + 2 * 2);
  assert_true(eager == 0);
  int64_t small[] = {8};
  assert_true(cgrt__buckets_padded(&h, small, 1, &eager) == 3 * 3 + 1);
  assert_true(eager == 2);
  /* two buckets suffice for two... three sizes with three buckets pad nothing */
  int64_t out[4];
  size_t n;
  double padded;
  assert_int_equal(cgrt__buckets_optimal(&h, 30, 4, out, &n, &padded), 0);
  assert_int_equal(n, 3);
  assert_true(padded == 0);
  assert_int_equal(out[0], 5);
  assert_int_equal(out[1], 7);
  assert_int_equal(out[2], 30);
  /* bad input */
  assert_int_equal(cgrt__buckets_optimal(&h, 29, 4, out, &n, &padded), CGRT_E_INVAL);
  assert_int_equal(cgrt__buckets_optimal(&h, 30, 0, out, &n, &padded), CGRT_E_INVAL);
}

static void need_rounds_to_tp_and_caps_at_max(void **state) {
  (void)state;
  assert_int_equal(cgrt__bucket_need(1, 8, 1000), 8);
  assert_int_equal(cgrt__bucket_need(9, 8, 1000), 16);
  assert_int_equal(cgrt__bucket_need(999, 8, 1000), 1000);
  assert_int_equal(cgrt__bucket_need(997, 8, 1003), 1000);
  assert_int_equal(cgrt__bucket_need(1001, 8, 1003), 1003);
  assert_int_equal(cgrt__bucket_need(0, 1, 10), 1);
}

static struct cgrt_config_view adaptive_view(int interval, int halflife, double min_gain) {
  struct cgrt_config cfg;
  cgrt__config_defaults(&cfg);
  struct cgrt_config_view v = cfg.view;
  cgrt__config_free(&cfg);
  v.buckets = CGRT_BUCKETS_ADAPTIVE;
  v.max_tokens = 128;
  v.num_graphs = 4;
  v.tp_size = 1;
  v.adapt_interval = interval;
  v.adapt_halflife = halflife;
  v.adapt_min_gain = min_gain;
  return v;
}

static void histogram_decays_by_its_half_life(void **state) {
  (void)state;
  struct cgrt_config_view v = adaptive_view(30, 10, 0.05);
  struct cgrt_bucket_adapt a;
  char err[256];
  assert_int_equal(cgrt__adapt_init(&a, &v, err, sizeof(err)), 0);
  cgrt__adapt_observe(&a, 5);
  for (int i = 0; i < 20; i++)
    cgrt__adapt_observe(&a, 9);
  cgrt__adapt_observe(&a, 500); /* above max_tokens: runs eagerly, not recorded, but time passes */
  int64_t cur[] = {1, 32, 64, 128}, out[4];
  size_t n;
  double now, best;
  int adopt;
  assert_int_equal(cgrt__adapt_plan(&a, cur, 4, out, &n, &now, &best, &adopt), 0);
  /* the step of 5 tokens is 22 steps old: weight 2^-2.2 against the newest step's 2^-0.1 */
  double w5 = a.steps[4], w9 = a.steps[8];
  assert_true(w5 > 0.2176 && w5 < 0.2177);
  double sum9 = 0;
  for (int i = 1; i <= 20; i++)
    sum9 += __builtin_exp2(-(double)(i + 1) / 10.0);
  assert_true(w9 > sum9 - 1e-9 && w9 < sum9 + 1e-9);
  double total = 0;
  for (size_t i = 0; i < a.slots; i++)
    total += a.steps[i];
  assert_true(total < w5 + w9 + 1e-12); /* nothing else recorded: not the step above max */
  assert_true(a.steps[a.slots - 1] == 0);
  /* two sizes, four buckets: the best set pads nothing and is adopted */
  assert_true(adopt);
  assert_true(best == 0);
  assert_int_equal(n, 3);
  assert_int_equal(out[0], 5);
  assert_int_equal(out[1], 9);
  assert_int_equal(out[2], 128);
  cgrt__adapt_free(&a);
}

static void plan_is_due_each_interval_and_needs_its_gain(void **state) {
  (void)state;
  struct cgrt_config_view v = adaptive_view(10, 1000000, 0.5);
  v.num_graphs = 2;
  struct cgrt_bucket_adapt a;
  char err[256];
  assert_int_equal(cgrt__adapt_init(&a, &v, err, sizeof(err)), 0);
  /* 13 steps of 30 tokens, 12 of 60 (a half-life this long keeps the weights nearly equal) */
  for (int i = 1; i <= 25; i++) {
    cgrt__adapt_observe(&a, i % 2 ? 30 : 60);
    assert_int_equal(cgrt__adapt_due(&a), i % 10 == 0);
  }
  int64_t out[2];
  size_t n;
  double now, best;
  int adopt;
  /* the best two: {60, 128}, padding the 30s by 30: 390 / 25 = 15.6 a step */
  int64_t opt[] = {60, 128};
  assert_int_equal(cgrt__adapt_plan(&a, opt, 2, out, &n, &now, &best, &adopt), 0);
  assert_false(adopt);
  assert_true(best > 15.59 && best < 15.61);
  assert_true(now > best - 1e-9 && now < best + 1e-9);
  assert_int_equal(n, 2);
  assert_int_equal(out[0], 60);
  /* {64, 128} pads (13 x 34 + 12 x 4) / 25 = 19.6: the best saves 20%, below the 50% asked */
  int64_t near[] = {64, 128};
  assert_int_equal(cgrt__adapt_plan(&a, near, 2, out, &n, &now, &best, &adopt), 0);
  assert_true(now > 19.59 && now < 19.61);
  assert_false(adopt);
  cgrt__adapt_free(&a);
  /* asking for 10% instead: adopted */
  v.adapt_min_gain = 0.1;
  assert_int_equal(cgrt__adapt_init(&a, &v, err, sizeof(err)), 0);
  for (int i = 1; i <= 25; i++)
    cgrt__adapt_observe(&a, i % 2 ? 30 : 60);
  assert_int_equal(cgrt__adapt_plan(&a, near, 2, out, &n, &now, &best, &adopt), 0);
  assert_true(adopt);
  cgrt__adapt_free(&a);
}

static void init_refuses_a_histogram_too_large(void **state) {
  (void)state;
  struct cgrt_config_view v = adaptive_view(10, 10, 0.05);
  v.max_tokens = (int64_t)CGRT_ADAPT_MAX_SLOTS * 4 + 1;
  v.tp_size = 4;
  struct cgrt_bucket_adapt a;
  char err[256];
  assert_int_equal(cgrt__adapt_init(&a, &v, err, sizeof(err)), CGRT_E_INVAL);
  assert_non_null(strstr(err, "max_tokens / tp_size"));
  v.max_tokens -= 1;
  assert_int_equal(cgrt__adapt_init(&a, &v, err, sizeof(err)), 0);
  cgrt__adapt_free(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(planner_equals_brute_force),
      cmocka_unit_test(padding_is_counted_as_a_user_would),
      cmocka_unit_test(need_rounds_to_tp_and_caps_at_max),
      cmocka_unit_test(histogram_decays_by_its_half_life),
      cmocka_unit_test(plan_is_due_each_interval_and_needs_its_gain),
      cmocka_unit_test(init_refuses_a_histogram_too_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
