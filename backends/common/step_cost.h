/*
 * step_cost.h - what a timed step costs the pipeline, for the backends that choose by time
 * (issue 43): local's buckets by time (backends/local/bytime.h) and dynamic_cp's cp sizes by
 * time (backends/dynamic_cp/cp_time.h), so that the two do not diverge.
 *
 * A step's cost is the larger of the host's time to issue it and its device span (two timed
 * events around it on the runtime's stream): what the step takes from the pipeline, whichever
 * side bounds it. The device span alone misleads when the host runs ahead of the device (a host
 * that does not wait every step): an eager step's kernels are then all queued before the device
 * reaches its start event, its span is its kernels' time only, and the launches it cost the host
 * are hidden. The host time is read from host->now_ns (host API minor 10; CLOCK_MONOTONIC on an
 * older core) just after the start event is recorded and just before the end event is: prepare
 * and body as issued. Two clock reads per timed step, none for the others.
 *
 * A round's figure (what the noise rule, noise_rule.h, compares) is the larger of the device
 * spans' median and the host's: the median of the host times that are at most twice the round's
 * lower quartile; the others are waits, left out (and counted: `waits`). A wait inside the step
 * only adds host time, and a host far ahead of the device waits in its launches: CUDA queues about
 * a thousand launches a stream; past that a launch returns only when the device has retired an
 * earlier one, so a step of many launches issued behind a backlog takes the host the device's time
 * for the work ahead of it, whatever that is (issue 43, session 40, an H200: 200 tokens run
 * eagerly, a fresh input every step, eight samples in a round: host 714-831 us in three of them,
 * 1661, 2998 and 6355-6373 us in five, behind padded replays of 1560 us each; device 1362-1369 us
 * in all eight; the median of the larger of the two, 2330 us, lost to the 1562 us replay that
 * eager beats by 12% on the device; here the host's figure is 760). A prepare or body that
 * synchronizes waits alike. Why the quartile and a factor of two: a host's own issue time varies
 * by tens of percent between steps (launch-bound eager at 3 tokens on an H200: 656-898 us over one
 * run's rounds), a wait by whole steps of the device; the quartile holds while waits hit at most
 * six samples of eight (more, and the figure is high, which keeps the way that serves now); the
 * median of what is kept is not biased low by that noise, as the quartile alone would be.
 *
 * Samples taken with the device behind (a backend that reads it: the step's start event not yet
 * reached when the host had issued the step) may also hold waits where the quartile does not see
 * them: behind a backlog of long steps nearly every sample waits (issue 43, session 50, an H200:
 * decode_small_buckets.txt under exponential buckets, eager rounds of 2 to 8 tokens behind replays
 * of 59 ms, host 1.2-125 ms in seven samples of eight and 580 us in the eighth; device 530-595 us
 * against the padded replay's 676). So a sample taken behind is also a wait when its host time is
 * more than twice the round's smallest (each host time holds the step's own issue time; the
 * smallest is kept). Where every sample waited even so, the round cannot tell a slow host from a
 * waiting one: step_cost_behind_us gives the figure without the host's, for a backend's rule to
 * see whether the host's figure decided (bytime.h).
 */
#ifndef CGRT_BACKENDS_STEP_COST_H
#define CGRT_BACKENDS_STEP_COST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "cgrt/backend.h"
#include "noise_rule.h"

/* The host's clock in ns: the core's (the host driver's simulated one), else CLOCK_MONOTONIC. */
static inline uint64_t step_cost_now_ns(const struct cgrt_host_api *h) {
  if (CGRT_HOST_HAS(h, now_ns))
    return h->now_ns(h);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The host's time in us from `start_ns` (a step_cost_now_ns reading) to now. */
static inline double step_cost_host_us(const struct cgrt_host_api *h, uint64_t start_ns) {
  uint64_t now = step_cost_now_ns(h);
  return now > start_ns ? (double)(now - start_ns) / 1000.0 : 0.0;
}

/* Whether a step's replays worked on private copies (moved buffers: the step report's copy_bytes,
   since 0.4), which both backends leave out of their samples for a while. A core before the field:
   no copies seen, every sample kept, as before. */
static inline int step_cost_copied(const cgrt_step_report *rep) {
  return rep->struct_size >= offsetof(cgrt_step_report, copy_bytes) + sizeof(rep->copy_bytes) &&
         rep->copy_bytes > 0;
}

/* How the figure is said in the backends' lines: "time per step, " STEP_COST_SAYS ... */
#define STEP_COST_SAYS "the larger of host issue (median, waits left out) and device time (median)"

/* One timed step: its host time, its device span, and whether the device was behind: it had not
   reached the step's start when the host had issued the step (local's by_time reads it; 0 where
   a backend does not). */
struct step_sample {
  double host_us, device_us;
  int behind;
};

/* A round's figures: its cost, the host's (waits left out) and the device spans' median; `waits`:
   the samples left out of the host's; `behind`: the samples taken with the device behind. */
struct step_cost {
  double us, host_us, device_us;
  int waits, behind;
};

/* The figures of v[0..n), 0 < n <= NOISE_SAMPLES. */
static inline struct step_cost step_cost_medians(const struct step_sample *v, int n) {
  double host[NOISE_SAMPLES], device[NOISE_SAMPLES], kept[NOISE_SAMPLES];
  double least = 0;
  int behind = 0;
  for (int i = 0; i < n; i++) {
    host[i] = v[i].host_us;
    device[i] = v[i].device_us;
    least = i == 0 || host[i] < least ? host[i] : least;
    behind += v[i].behind != 0;
  }
  const double limit = 2 * noise_quantile(host, n, 0.25);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (host[i] <= limit && !(v[i].behind && host[i] > 2 * least))
      kept[k++] = host[i]; /* the smallest at least (host times are not negative) */
  struct step_cost c = {0, k > 0 ? noise_median(kept, k) : least, noise_median(device, n), n - k,
                        behind};
  c.us = c.host_us > c.device_us ? c.host_us : c.device_us;
  return c;
}

/* The round's figure as its device spans alone give it, where every one of its n samples was taken
   with the device behind (its host figure may be waits in every sample: bytime.h); else its
   figure. */
static inline double step_cost_behind_us(struct step_cost c, int n) {
  return n > 0 && c.behind == n ? c.device_us : c.us;
}

/*
 * Appends "NAME 954.0 us (host 960.1, device 901.3)" to buf, after ", " unless it is the first
 * (*len: what buf holds, 0 at first; kept below size).
 */
static inline void step_cost_say(char *buf, size_t size, int *len, const char *name,
                                 struct step_cost c) {
  if (*len < 0 || (size_t)*len >= size)
    return;
  int n = snprintf(buf + *len, size - (size_t)*len, "%s%s %.1f us (host %.1f, device %.1f)",
                   *len ? ", " : "", name, c.us, c.host_us, c.device_us);
  if (n > 0)
    *len = (size_t)(*len + n) < size ? *len + n : (int)size - 1;
}

#endif
