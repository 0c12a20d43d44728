/*
 * test_step_cost.c - the figure by_time compares (backends/common/step_cost.h, issue 43): the
 * larger of the device spans' median and the host's median with its waits left out (host times
 * more than twice the round's lower quartile), on rounds of eight samples as a GPU drew them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "step_cost.h"

/* A round of n samples, each taken with the device behind or not as `behind` says. */
static struct step_cost round_behind(const double *host, const double *device, int n, int behind) {
  struct step_sample v[NOISE_SAMPLES];
  for (int i = 0; i < n; i++)
    v[i] = (struct step_sample){host[i], device[i], behind};
  return step_cost_medians(v, n);
}

static struct step_cost round_of(const double *host, const double *device, int n) {
  return round_behind(host, device, n, 0);
}

/* Session 40's fresh round of 200 tokens run eagerly (an H200): five samples waited in their
   launches behind queued replays; the figure is the host's own, below the device's. */
static void test_waits_left_out(void **state) {
  (void)state;
  const double host[] = {760.5, 714.4, 831.3, 2998.1, 1660.8, 6372.9, 6354.5, 6370.8};
  const double device[] = {1362.2, 1364.8, 1367.8, 1368.5, 1366.0, 1367.3, 1368.3, 1368.5};
  struct step_cost c = round_of(host, device, 8);
  assert_int_equal(c.waits, 5);
  assert_true(c.host_us == 760.5);
  assert_true(c.device_us > 1367.0 && c.device_us < 1368.0);
  assert_true(c.us == c.device_us); /* not 2330, the median of each sample's larger part */
}

/* Honest noise (no sample twice another's quartile): every sample kept, the figure their median,
   not the quartile (700), which would favour eager by a tenth here. */
static void test_honest_noise_kept_whole(void **state) {
  (void)state;
  const double host[] = {656, 898, 700, 860, 740, 830, 780, 800};
  const double device[] = {540, 541, 542, 543, 544, 545, 546, 547};
  struct step_cost c = round_of(host, device, 8);
  assert_int_equal(c.waits, 0);
  assert_true(c.host_us == 790.0);
  assert_true(c.us == 790.0);
}

/* Waits in seven samples of eight: the quartile is a wait, so they are kept and the figure is
   high (the way that serves now stays: the safe side). Six of eight are still left out. */
static void test_too_many_waits_err_high(void **state) {
  (void)state;
  const double device[] = {100, 100, 100, 100, 100, 100, 100, 100};
  const double seven[] = {50, 900, 950, 1000, 1050, 1100, 1150, 1200};
  struct step_cost c = round_of(seven, device, 8);
  assert_true(c.host_us > 900);
  const double six[] = {50, 55, 900, 950, 1000, 1050, 1100, 1150};
  c = round_of(six, device, 8);
  assert_int_equal(c.waits, 6);
  assert_true(c.host_us == 52.5 && c.us == 100);
}

/* Session 50's round of 2 tokens run eagerly (an H200, exponential buckets on
   decode_small_buckets.txt), every sample behind the device: seven waited behind replays of 59 ms,
   so the quartile (32-40 ms) is a wait and kept them all but the longest (figure 39.8 ms against a
   replay of 676 us). Taken behind, a host time above twice the round's smallest is a wait too:
   the figure is the one that did not wait. The same times not behind keep the quartile rule. */
static void test_behind_waits_left_out_by_the_smallest(void **state) {
  (void)state;
  const double host[] = {40150.4, 33367.1, 39771.1, 82211.8, 32209.2, 40541.0, 40252.6, 580.4};
  const double device[] = {530.4, 534.9, 536.0, 534.8, 531.7, 527.8, 531.4, 532.1};
  struct step_cost c = round_behind(host, device, 8, 1);
  assert_int_equal(c.behind, 8);
  assert_int_equal(c.waits, 7);
  assert_true(c.host_us == 580.4 && c.us == 580.4);
  assert_true(step_cost_behind_us(c, 8) == c.device_us);
  c = round_of(host, device, 8);
  assert_int_equal(c.behind, 0);
  assert_true(c.host_us > 30000);
  assert_true(step_cost_behind_us(c, 8) == c.us);
  /* honest noise behind the device: nothing is twice the smallest, all kept */
  const double honest[] = {656, 898, 700, 860, 740, 830, 780, 800};
  c = round_behind(honest, device, 8, 1);
  assert_int_equal(c.waits, 0);
  assert_true(c.host_us == 790.0);
}

/* No cost model on the host driver: every time 0, nothing left out. */
static void test_all_zero(void **state) {
  (void)state;
  const double zero[] = {0, 0, 0, 0, 0, 0, 0, 0};
  struct step_cost c = round_of(zero, zero, 8);
  assert_int_equal(c.waits, 0);
  assert_true(c.us == 0 && c.host_us == 0 && c.device_us == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_waits_left_out),
      cmocka_unit_test(test_honest_noise_kept_whole),
      cmocka_unit_test(test_too_many_waits_err_high),
      cmocka_unit_test(test_behind_waits_left_out_by_the_smallest),
      cmocka_unit_test(test_all_zero),
  };
  return cmocka_run_group_tests_name("step_cost", tests, NULL, NULL);
}
