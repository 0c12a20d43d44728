/*
 * test_buckets.c - inference token buckets (DESIGN.md section 5): the sizes graphs are built for
 * under each distribution, Megatron-LM's published examples, and which bucket a step lands in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buckets/buckets.h"

struct fx {
  int64_t *sizes;
  size_t count;
  char err[256];
};

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof(*f));
  if (!f)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  free(f->sizes);
  free(f);
  return 0;
}

static int build(struct fx *f, cgrt_bucket_dist dist, int64_t max, int n, int tp,
                 const int64_t *list, size_t len) {
  free(f->sizes);
  f->sizes = NULL;
  f->count = 0;
  f->err[0] = '\0';
  return cgrt__buckets_build(dist, max, n, tp, list, len, &f->sizes, &f->count, f->err,
                             sizeof(f->err));
}

/* The built sizes equal want[0..n), ascending. */
static void assert_sizes(const struct fx *f, const int64_t *want, size_t n) {
  int same = f->count == n;
  for (size_t i = 0; same && i < n; i++)
    same = f->sizes[i] == want[i];
  if (!same) {
    char got[1024] = "";
    size_t off = 0;
    for (size_t i = 0; i < f->count && off < sizeof(got); i++)
      off += (size_t)snprintf(got + off, sizeof(got) - off, " %lld", (long long)f->sizes[i]);
    fail_msg("got [%s ] (%zu sizes), expected %zu sizes", got, f->count, n);
  }
}

#define EXPECT(f, ...)                                                                             \
  do {                                                                                             \
    static const int64_t want_[] = {__VA_ARGS__};                                                  \
    assert_sizes(f, want_, sizeof(want_) / sizeof(want_[0]));                                      \
  } while (0)

#define EXP  CGRT_BUCKETS_EXPONENTIAL
#define LIN  CGRT_BUCKETS_LINEAR
#define LIST CGRT_BUCKETS_LIST

/* ---------------------------------------------------------------- exponential */

static void megatron_example_powers_of_two(void **state) {
  struct fx *f = *state;
  /* 128 / 8 graphs / tp 1 -> 128 64 32 16 8 4 2 1 */
  assert_int_equal(build(f, EXP, 128, 8, 1, NULL, 0), 0);
  EXPECT(f, 1, 2, 4, 8, 16, 32, 64, 128);
}

static void megatron_example_tensor_parallel(void **state) {
  struct fx *f = *state;
  /* 1000 / 6 graphs / tp 8 -> 1000 504 256 128 64 8 */
  assert_int_equal(build(f, EXP, 1000, 6, 8, NULL, 0), 0);
  EXPECT(f, 8, 64, 128, 256, 504, 1000);
}

static void exponential_one_graph_is_max(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, EXP, 128, 1, 1, NULL, 0), 0);
  EXPECT(f, 128);
  assert_int_equal(build(f, EXP, 1000, 1, 8, NULL, 0), 0);
  EXPECT(f, 1000);
}

static void exponential_two_graphs_keep_both_ends(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, EXP, 128, 2, 1, NULL, 0), 0);
  EXPECT(f, 1, 128);
  assert_int_equal(build(f, EXP, 1000, 3, 8, NULL, 0), 0);
  EXPECT(f, 8, 504, 1000);
}

static void exponential_max_equal_to_tp(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, EXP, 8, 8, 8, NULL, 0), 0);
  EXPECT(f, 8);
  assert_int_equal(build(f, EXP, 1, 8, 1, NULL, 0), 0);
  EXPECT(f, 1);
}

static void exponential_max_not_a_power_of_two(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, EXP, 100, 8, 1, NULL, 0), 0);
  EXPECT(f, 1, 3, 6, 12, 25, 50, 100);
  /* each halving rounded up to a multiple of tp; max itself kept as given */
  assert_int_equal(build(f, EXP, 100, 8, 8, NULL, 0), 0);
  EXPECT(f, 8, 16, 32, 56, 100);
  assert_int_equal(build(f, EXP, 100, 8, 30, NULL, 0), 0);
  EXPECT(f, 30, 60, 100);
  assert_int_equal(build(f, EXP, 64, 8, 48, NULL, 0), 0);
  EXPECT(f, 48, 64);
}

static void exponential_fewer_sizes_than_graphs(void **state) {
  struct fx *f = *state;
  /* no padding graphs are invented: fewer distinct sizes than asked for */
  assert_int_equal(build(f, EXP, 16, 100, 1, NULL, 0), 0);
  EXPECT(f, 1, 2, 4, 8, 16);
  assert_int_equal(build(f, EXP, 512, 8, 1, NULL, 0), 0);
  EXPECT(f, 1, 8, 16, 32, 64, 128, 256, 512);
}

static void exponential_properties(void **state) {
  struct fx *f = *state;
  for (int64_t max = 1; max <= 300; max++)
    for (int tp = 1; tp <= 8 && tp <= max; tp++)
      for (int n = 1; n <= 10; n++) {
        assert_int_equal(build(f, EXP, max, n, tp, NULL, 0), 0);
        /* distinct sizes: max, each halving rounded to tp, and tp */
        size_t distinct = 1;
        int64_t last = max;
        for (int64_t v = max / 2; v > tp; v /= 2) {
          int64_t r = (v + tp - 1) / tp * tp;
          if (r != last)
            distinct++;
          last = r;
        }
        if (last != tp)
          distinct++;
        size_t want = (size_t)n < distinct ? (size_t)n : distinct;
        if (f->count != want)
          fail_msg("max %lld tp %d n %d: %zu sizes, expected %zu", (long long)max, tp, n, f->count,
                   want);
        assert_int_equal(f->sizes[f->count - 1], max);
        if (n >= 2 || max == tp)
          assert_int_equal(f->sizes[0], tp);
        for (size_t i = 0; i + 1 < f->count; i++) {
          assert_true(f->sizes[i] < f->sizes[i + 1]);
          assert_int_equal(f->sizes[i] % tp, 0);
        }
      }
}

static void exponential_huge_max(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, EXP, INT64_MAX, 100, 1, NULL, 0), 0);
  /* 2^63 - 1, then 2^k - 1 for k = 62 .. 2, then 1 */
  assert_int_equal(f->count, 63);
  assert_int_equal(f->sizes[0], 1);
  assert_int_equal(f->sizes[1], 3);
  assert_int_equal(f->sizes[62], INT64_MAX);
  assert_int_equal(build(f, EXP, INT64_MAX, 4, 7, NULL, 0), 0);
  assert_int_equal(f->count, 4);
  assert_int_equal(f->sizes[0], 7);
  assert_int_equal(f->sizes[3], INT64_MAX);
}

/* ---------------------------------------------------------------- linear */

static void linear_steps(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, LIN, 64, 8, 1, NULL, 0), 0);
  EXPECT(f, 8, 16, 24, 32, 40, 48, 56, 64);
  /* ceil(100 / 8) = 13 */
  assert_int_equal(build(f, LIN, 100, 8, 1, NULL, 0), 0);
  EXPECT(f, 13, 26, 39, 52, 65, 78, 91, 100);
  /* the step rounded up to a multiple of tp: 13 -> 16 */
  assert_int_equal(build(f, LIN, 100, 8, 4, NULL, 0), 0);
  EXPECT(f, 16, 32, 48, 64, 80, 96, 100);
  assert_int_equal(build(f, LIN, 100, 1, 4, NULL, 0), 0);
  EXPECT(f, 100);
  assert_int_equal(build(f, LIN, 10, 8, 8, NULL, 0), 0);
  EXPECT(f, 8, 10);
  assert_int_equal(build(f, LIN, 3, 8, 1, NULL, 0), 0);
  EXPECT(f, 1, 2, 3);
}

static void linear_properties(void **state) {
  struct fx *f = *state;
  for (int64_t max = 1; max <= 200; max++)
    for (int tp = 1; tp <= 4 && tp <= max; tp++)
      for (int n = 1; n <= 12; n++) {
        assert_int_equal(build(f, LIN, max, n, tp, NULL, 0), 0);
        assert_true(f->count >= 1 && f->count <= (size_t)n);
        assert_int_equal(f->sizes[f->count - 1], max);
        for (size_t i = 0; i + 1 < f->count; i++) {
          assert_true(f->sizes[i] < f->sizes[i + 1]);
          assert_int_equal(f->sizes[i] % tp, 0);
          assert_true(f->sizes[i + 1] - f->sizes[i] <= f->sizes[0]);
        }
      }
  assert_int_equal(build(f, LIN, INT64_MAX, 3, 1, NULL, 0), 0);
  assert_int_equal(f->count, 3);
  assert_int_equal(f->sizes[2], INT64_MAX);
}

/* ---------------------------------------------------------------- list */

static void list_sorted_without_repeats(void **state) {
  struct fx *f = *state;
  static const int64_t list[] = {64, 8, 1, 8, 512, 64};
  /* num_graphs does not trim a list the operator wrote out */
  assert_int_equal(build(f, LIST, 512, 2, 1, list, 6), 0);
  EXPECT(f, 1, 8, 64, 512);
  static const int64_t one[] = {3};
  assert_int_equal(build(f, LIST, 512, 8, 1, one, 1), 0);
  EXPECT(f, 3);
}

static void list_errors(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, LIST, 512, 8, 1, NULL, 0), CGRT_E_INVAL);
  assert_non_null(strstr(f->err, "buckets = list needs at least one size in list"));
  assert_null(f->sizes);
  assert_int_equal(f->count, 0);
  static const int64_t zero[] = {4, 0};
  assert_int_equal(build(f, LIST, 512, 8, 1, zero, 2), CGRT_E_INVAL);
  assert_non_null(strstr(f->err, "list holds 0: every size must be at least 1"));
  static const int64_t neg[] = {-4};
  assert_int_equal(build(f, LIST, 512, 8, 1, neg, 1), CGRT_E_INVAL);
  assert_non_null(strstr(f->err, "list holds -4"));
}

/* ---------------------------------------------------------------- bad parameters */

static void parameter_errors_name_the_option(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, EXP, 0, 8, 1, NULL, 0), CGRT_E_INVAL);
  assert_string_equal(f->err, "max_tokens = 0: must be at least 1");
  assert_int_equal(build(f, EXP, 128, 0, 1, NULL, 0), CGRT_E_INVAL);
  assert_string_equal(f->err, "num_graphs = 0: must be at least 1");
  assert_int_equal(build(f, LIN, 128, 8, 0, NULL, 0), CGRT_E_INVAL);
  assert_string_equal(f->err, "tp_size = 0: must be at least 1");
  assert_int_equal(build(f, EXP, 4, 8, 8, NULL, 0), CGRT_E_INVAL);
  assert_non_null(strstr(f->err, "max_tokens = 4 is smaller than tp_size = 8"));
  assert_null(f->sizes);
  assert_int_equal(build(f, (cgrt_bucket_dist)7, 128, 8, 1, NULL, 0), CGRT_E_INVAL);
  assert_non_null(strstr(f->err, "expected exponential, linear or list"));
  /* no room for the reason is fine */
  int64_t *out = (int64_t *)1;
  size_t count = 99;
  assert_int_equal(cgrt__buckets_build(EXP, -1, 8, 1, NULL, 0, &out, &count, NULL, 0),
                   CGRT_E_INVAL);
  assert_null(out);
  assert_int_equal(count, 0);
}

/* ---------------------------------------------------------------- lookup */

static void bucket_index_finds_the_smallest_fit(void **state) {
  (void)state;
  static const int64_t s[] = {8, 64, 128, 256, 504, 1000};
  const size_t n = 6;
  assert_int_equal(cgrt__bucket_index(s, n, 1), 0);
  assert_int_equal(cgrt__bucket_index(s, n, 8), 0); /* exact hit */
  assert_int_equal(cgrt__bucket_index(s, n, 9), 1);
  assert_int_equal(cgrt__bucket_index(s, n, 64), 1);
  assert_int_equal(cgrt__bucket_index(s, n, 65), 2);
  assert_int_equal(cgrt__bucket_index(s, n, 300), 4);
  assert_int_equal(cgrt__bucket_index(s, n, 504), 4);
  assert_int_equal(cgrt__bucket_index(s, n, 505), 5);
  assert_int_equal(cgrt__bucket_index(s, n, 1000), 5);  /* the largest */
  assert_int_equal(cgrt__bucket_index(s, n, 1001), -1); /* above: runs eagerly */
  assert_int_equal(cgrt__bucket_index(s, n, INT64_MAX), -1);
  assert_int_equal(cgrt__bucket_index(s, n, 0), 0);
  assert_int_equal(cgrt__bucket_index(s, n, -5), 0);
  assert_int_equal(cgrt__bucket_index(s, n, INT64_MIN), 0);
}

static void bucket_index_edge_lists(void **state) {
  (void)state;
  static const int64_t one[] = {16};
  assert_int_equal(cgrt__bucket_index(one, 1, 16), 0);
  assert_int_equal(cgrt__bucket_index(one, 1, 3), 0);
  assert_int_equal(cgrt__bucket_index(one, 1, 17), -1);
  assert_int_equal(cgrt__bucket_index(one, 0, 1), -1);
  assert_int_equal(cgrt__bucket_index(NULL, 0, 1), -1);
}

static void bucket_index_agrees_with_a_scan(void **state) {
  struct fx *f = *state;
  assert_int_equal(build(f, EXP, 1000, 6, 8, NULL, 0), 0);
  for (int64_t t = -2; t <= 1010; t++) {
    long want = -1;
    for (size_t i = 0; i < f->count; i++)
      if (f->sizes[i] >= t) {
        want = (long)i;
        break;
      }
    if (cgrt__bucket_index(f->sizes, f->count, t) != want)
      fail_msg("%lld tokens: index %ld, expected %ld", (long long)t,
               cgrt__bucket_index(f->sizes, f->count, t), want);
  }
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(megatron_example_powers_of_two),
      T(megatron_example_tensor_parallel),
      T(exponential_one_graph_is_max),
      T(exponential_two_graphs_keep_both_ends),
      T(exponential_max_equal_to_tp),
      T(exponential_max_not_a_power_of_two),
      T(exponential_fewer_sizes_than_graphs),
      T(exponential_properties),
      T(exponential_huge_max),
      T(linear_steps),
      T(linear_properties),
      T(list_sorted_without_repeats),
      T(list_errors),
      T(parameter_errors_name_the_option),
      T(bucket_index_finds_the_smallest_fit),
      T(bucket_index_edge_lists),
      T(bucket_index_agrees_with_a_scan),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
