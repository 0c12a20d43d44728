/*
 * noise_rule.h - the noise rule of steps chosen by time (issue 43), shared by the backends that
 * measure one way of serving steps against another on the device: local's buckets by time
 * (backends/local/bytime.h) and dynamic_cp's cp sizes by time (backends/dynamic_cp/cp_time.h).
 *
 * A round measures the way that serves now (the incumbent) and the other way (the challenger):
 * at least NOISE_SAMPLES device times each, medians compared. The challenger replaces the
 * incumbent only when its median is below the incumbent's divided by (1 + NOISE_MARGIN): within
 * the margin the incumbent stays (hysteresis), so a way does not flip on noise. After
 * NOISE_RECHECK steps served one way, a new round measures both again. Constants, not keys
 * (docs/decisions.md, issue 43: one switch per backend is what an operator needs).
 *
 * Why medians of 8: the noise that matters is per process (a launch-bound eager step draws a
 * speed per process), not per step; within one process the device spans of consecutive steps are
 * steady, and 8 each keeps a round's cost at 9 eager steps (the first is run and not kept).
 */
#ifndef CGRT_BACKENDS_NOISE_RULE_H
#define CGRT_BACKENDS_NOISE_RULE_H

#include <string.h>

#define NOISE_SAMPLES 8    /* device times per side of a round, at least */
#define NOISE_MARGIN  0.02 /* a challenger must be faster than the incumbent by more than this */
#define NOISE_RECHECK 2048 /* steps served one way before both are measured again */

/* v[0..n) sorted into s, 0 < n <= NOISE_SAMPLES; v is left as it is. */
static inline void noise_sorted(const double *v, int n, double *s) {
  memcpy(s, v, (size_t)n * sizeof(*s));
  for (int i = 1; i < n; i++) /* insertion sort: n is small */
    for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
      double t = s[j];
      s[j] = s[j - 1];
      s[j - 1] = t;
    }
}

/* The median of v[0..n), 0 < n <= NOISE_SAMPLES; v is left as it is. */
static inline double noise_median(const double *v, int n) {
  double s[NOISE_SAMPLES];
  noise_sorted(v, n, s);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The q quantile of v[0..n), 0 <= q <= 1, the sample at rank floor(q (n - 1)) (of 8: q 0.25 is the
   second lowest); v is left as it is. */
static inline double noise_quantile(const double *v, int n, double q) {
  double s[NOISE_SAMPLES];
  noise_sorted(v, n, s);
  return s[(int)(q * (n - 1))];
}

/* Whether a challenger of median `challenger` replaces an incumbent of median `incumbent`. */
static inline int noise_challenger_wins(double challenger, double incumbent) {
  return challenger * (1 + NOISE_MARGIN) < incumbent;
}

#endif
