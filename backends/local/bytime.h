/*
 * bytime.h - local's inference buckets chosen by time ([local] by_time, issue 43).
 *
 * A step of T real tokens padded to bucket B > T is timed on the device (two timed events around
 * the step on the runtime's stream, read without waiting at a later step), and so are steps run
 * eagerly at T, as the host sends them. A round's cost is the larger of the device spans' median
 * and the median of the host's times to issue the steps (host->now_ns around prepare and body;
 * backends/common/step_cost.h), waits left out: in a backlogged stream an eager step's span is its
 * kernels' alone, its launches hidden, and eager would look cheaper than it is; waits (more than
 * twice the host times' lower quartile) left out, since a host far ahead waits in its launches for
 * whatever is queued before it. Replays cost the host little, so their cost is their span in
 * practice. A token count whose padded replay is measurably slower than eager at its own size is
 * then served the faster way: by an exact-size bucket (graphs at T) while exact_buckets and the
 * memory budget allow one more and the count is not rare, else eagerly.
 *
 * Measurements are shared within a bucket (issue 43, session 38: probing every count cost more
 * than it saved on real traffic). Two assumptions:
 *  - a bucket's padded replay costs the same for every count it serves (the same graphs, the same
 *    padded work): it is measured once per bucket, its samples pooled from any count it serves;
 *  - eager cost is non-decreasing in tokens (more rows, never less work or fewer launches).
 * So within a bucket, when eager at T loses to the replay (by the noise rule), every count >= T
 * keeps the bucket, and when eager at T wins, every count <= T is served eagerly (or gets the
 * exact-size treatment), none of them probed. Only a count whose answer is not implied is probed:
 * the middle one (the lower of two) of the bucket's undecided counts seen at least BYTIME_MIN_SEEN
 * times, one count at a time per bucket, so a bucket of n such counts needs at most
 * floor(log2 n) + 1 probe rounds, not n. A target that stops coming (BYTIME_STALL steps of its
 * bucket without it) is dropped and must be seen BYTIME_MIN_SEEN times again.
 *
 * The noise rule (backends/common/noise_rule.h): a probe round takes at least BYTIME_SAMPLES device
 * times of eager at T (the first eager step of a round run but not kept: a new row count's first
 * eager run pays one-time costs, cuBLASLt's heuristic, lazy loading) and compares their median
 * with the bucket's replay median (replays kept only from steps whose calls all replayed). The
 * way that serves T now stays unless the other is faster by more than BYTIME_MARGIN
 * (hysteresis); the counts it implies follow T's way. The padded bucket is the first way.
 *
 * Exact-size buckets: a count served eagerly gets one only once it has been seen BYTIME_EXACT_SEEN
 * times (a capture costs a few eager steps and the capture itself; a count seen less would not
 * pay it back), while exact_buckets and the budget allow one more. Its round times its own eager
 * steps (the probe's samples, or steps it is served eagerly anyway: no probes) against the exact
 * bucket's replays, and keeps the exact bucket only when faster by more than the margin; tried
 * once per count until a recheck. A contested count (its probe kept the bucket, but the replay did
 * not beat eager by more than BYTIME_NEAR: the crossover, where padding costs about what the
 * launches save, and a later, faster eager draw of the process could turn the answer) is treated
 * alike, seen as often, and keeps the exact bucket only when it beats the faster of the replay and
 * eager by the margin; else it stays at its bucket (issue 43, session 39: 37 tokens at bucket 64
 * ran 0.91x eager's time on an H200 with no exact bucket tried).
 *
 * Pooled probes (issue 43, session 38: counts too sparse to probe one by one). A bucket whose
 * counts rarely repeat (decode traffic whose long prompts are thousands of distinct counts) has
 * none seen BYTIME_MIN_SEEN times, so nothing above would decide it. By the same assumption, eager
 * samples at counts >= P are upper bounds of eager at P, and samples at counts <= P lower bounds:
 *  - "eager wins at P": the median of BYTIME_SAMPLES eager samples taken from steps of the bucket's
 *    undecided counts >= P (after one run and not kept) beats the replay's median by more than the
 *    margin: every count <= P of the bucket is served eagerly (implied), counts seen later too;
 *  - "eager loses at P": the median of samples from its undecided counts <= P is slower than the
 *    replay's by more than the margin: every count >= P keeps the bucket.
 * When: no single-count probe runs or is due (no undecided count seen BYTIME_MIN_SEEN times), the
 * bucket has had BYTIME_POOL_SEEN steps of undecided counts since it was last measured, and of its
 * last BYTIME_POOL_RECENT such steps (those still undecided), at least BYTIME_POOL_MIN, more than
 * half are of counts seen once among them (at that rate a count needs about 16 x 64 of the bucket's
 * steps to be probed on its own). P: the median (the lower of two) of those recent steps' counts,
 * so either side holds about half of the traffic. The side tested first is the one last shown in
 * the bucket, "wins" at first (sparse counts mean a wide bucket, where padding is largest); if it
 * is not shown, the other side at the same P. A shown side moves the bucket's bounds and the next
 * pivot is taken at once from the recent steps still undecided (a bisection toward the count where
 * eager stops winning); a pivot where neither side is shown (within the margin, or the threshold
 * near P so that each side's samples straddle it) ends pooling until the bucket's next recheck.
 * Bounds: one pooled round (at most 1 + BYTIME_SAMPLES eager probe steps) at a time per bucket,
 * never beside a single-count probe, at most BYTIME_POOL_ROUNDS rounds per recheck; a round that
 * gets no sample for BYTIME_STALL steps of its bucket is dropped. Each pooled round counts as a
 * probe round for the recheck below.
 *
 * Counts served eagerly are watched (issue 43, session 45: a launch-bound eager step's host time
 * moves between speeds within a process, 0.9 ms and 3 ms a step on a busy host, and a probe of 8
 * steps sees one of them; a bucket's regular recheck comes after 2048 of its steps, later than a
 * whole trace): one in BYTIME_WATCH_EVERY of a bucket's steps served eagerly by a decision (not a
 * probe) is timed, and once BYTIME_SAMPLES of them are in, their cost (the same figures as a
 * probe's) is held against the bucket's last replay median by the noise rule. When the replay
 * beats them by more than the margin, every count of the bucket served eagerly goes back to the
 * bucket (the first way) and the bucket is measured again, said at info. The samples come from
 * whichever eager counts the host sends, at or below the bucket's eager bound, so they are lower
 * bounds of eager at that bound: losing with them, eager loses there. A count's first eager step
 * is not left out, as a probe's round leaves out its first: served eagerly, a host that keeps
 * sending new counts pays their one-time costs every time. A watch costs two event records a
 * timed step, and no step is served another way for it.
 *
 * Device-bound buckets (issue 43, session 49: traffic/decode_small_buckets.txt, 120 prompts of
 * 1500-3978 tokens among 4000 decode steps, padded to bucket 4096 and replayed in 59 ms where eager
 * took 22-52 ms: the pooled probes' bisection decided them after 59, 85, 100 and 113 of them, and
 * the run took 1.41x eager's time). A step's eager device work at T is at most the bucket's (eager
 * cost non-decreasing in tokens), and what eager adds to it is its launches, which cost the host
 * about its issue time; so where a bucket's replay costs BYTIME_BOUND times the host's time to
 * issue an eager step or more, eager at any count of it loses at most about 1 / BYTIME_BOUND to the
 * replay, and wins by the work it does not pad. Once the bucket's replay has its figure (its
 * BYTIME_SAMPLES replays) and some eager round has given a host figure (the fastest round's, waits
 * left out), every count up to bucket / (1 + BYTIME_NEAR) (at least 29% padding) is served eagerly,
 * implied, as a pooled probe's "eager wins" would (below a count that measured the bucket faster,
 * never), said at info; counts above stay with the probes. Its eager steps are all watched (each
 * costs the replay's BYTIME_BOUND-th part or more, so two event records a step are nothing to it,
 * and a rare bucket's 8 watched steps would otherwise take 128 of its steps: longer than a trace).
 * Where the replay costs 1 / BYTIME_MARGIN (50) times the host figure or more, eager's worst case
 * (its launches over the replay, work that does not shrink with tokens) is within the noise rule's
 * margin, and the bound goes up to where eager wins by the margin if its work grows with tokens:
 * bucket x (1 / (1 + BYTIME_MARGIN) - H / R), H the host figure and R the replay's (an H200's
 * bucket 4096 of decode: R / H about 99, so 3974). Why the fastest round: a host behind a backlog
 * waits in its launches for the device's queued work, and when every sample of a round waited its
 * figure is the device's (session 49, an H200: 30.6-32.6 ms for eager steps that issue in 0.6 ms,
 * behind replays of 59 ms); a wait never makes a round faster, and a bucket judged with a slower
 * figure is judged again when a faster round comes. The watch below checks it as it checks a
 * measured decision: overturned, the bucket goes back to its replay and the rule is off in it for
 * the runtime's life. A launch-bound bucket (a replay of a few eager host times) is never touched.
 *
 * Rounds behind the device (issue 43, session 50: decode_small_buckets.txt under exponential
 * buckets on an H200, eager rounds of 2-8 tokens queued behind replays of 59 ms: host 1.2-125 ms
 * in nearly every sample, against an issue time of about 0.6 ms; the counts stayed at bucket 64,
 * 676 us, where eager's device spans were 530-595). Each sample says whether the device had
 * reached the step's start when the host had issued it; one taken behind is also a wait when its
 * host time is more than twice the round's smallest (step_cost.h). A probe round whose every
 * sample was behind, and whose host figure alone kept the bucket (eager's device median beats the
 * replay by the margin), cannot tell a host that issues slowly from one that waited every time:
 * it is set aside (no decision, the count seen afresh, probed again once seen BYTIME_MIN_SEEN
 * times), at most BYTIME_RETRIES times per count and recheck; then the figures stand for the
 * count alone (a figure of waits is not eager's cost: it implies nothing of the bucket's other
 * counts and moves no bound), and the count is contested: it gets an exact-size trial, a replay
 * timed on the device, as a narrow win would (below). The first round set aside says at info,
 * once, that [runtime] max_queued_steps = 2 bounds the host's distance ahead, unless it is set:
 * with it, none of decode_small's rounds was set aside on an H200 (session 51). The probe's
 * device spans alone would not do: the backlog may be the bucket's own replays, cheap for the host,
 * which would drain once eager serves and its launches show. A watch is judged by its device
 * spans when every watched step was behind: there eager already serves, and the device staying
 * behind means eager's launches were hidden; once they are not, its samples are not behind.
 *
 * After BYTIME_RECHECK x r steps of a bucket, r its probe rounds since it was last measured (at
 * least 1), its measurements are forgotten (each count keeps its way until measured or implied
 * again; exact-size buckets stay) and the bucket is measured again: at most one probe round per
 * BYTIME_RECHECK steps of a bucket, as when a count was measured on its own. Where every count of
 * the bucket is served eagerly, the replay is measured by steps run at the bucket for that (graph
 * probes).
 */
#ifndef CGRT_LOCAL_BYTIME_H
#define CGRT_LOCAL_BYTIME_H

#include <stdint.h>

#include "cgrt/backend.h"
#include "noise_rule.h"

#define BYTIME_SAMPLES NOISE_SAMPLES
#define BYTIME_MARGIN  NOISE_MARGIN
#define BYTIME_RECHECK NOISE_RECHECK
#define BYTIME_COUNTS  4096 /* token counts followed at most; others keep their padded bucket */
/* Timed steps whose events have not been read yet, at most (4 until session 49). A host ahead of
   the device has a step's pair in flight until the device reaches it, and a measuring step that
   finds every pair in flight goes untimed (by_time_untimed_steps): with 4, the host traffic
   model's free host lost 46 measuring steps on bimodal.txt and 28 on decode_small_buckets.txt;
   with 16, none (on/off 0.977 -> 0.975 and 0.857 -> 0.851). 32 events, made at the first timed
   step. */
#define BYTIME_PENDING 16
/* Steps of a count before it may be probed: a probe round costs 9 eager steps; a count seen
   fewer times than about twice that would pay more for the round than it could save. */
#define BYTIME_MIN_SEEN 16
/* Steps of a count before it may get an exact-size bucket (its warm-up and capture cost several
   eager steps and milliseconds of host time; 64 steps of a launch-bound count pay that back). */
#define BYTIME_EXACT_SEEN 64
/* A probe that keeps the bucket by less than this (the replay's median at most 1 + BYTIME_NEAR
   times faster than eager's) leaves the count contested: where a faster eager draw later in the
   process can overturn the win. 0.10 in session 41 (3 tokens at bucket 8 kept, then 0.976x of an
   eager row that drew 590.6 us); 0.40 since session 42: launch-bound eager moves between a fast
   and a slow speed within one process, not only between processes (decode on four H200s, 1-64
   tokens, eager rows of one process 647-711 us and 847-925 us at the same counts, up to 1.37x
   apart), and a probe of 8 steps sees one of them: 37 tokens kept at bucket 64 (its static row:
   eager 866.7 us, the replay 761.7) ran 0.96x of the fresh row's eager, 711.5 us. The exact-size
   bucket of a count pads nothing, so on the device it is never slower than the padded replay; a
   wider band costs exact-size captures within exact_buckets, never an eager step. */
#define BYTIME_NEAR 0.40
/* Replays on private copies (rebind = auto on keys whose buffers move: the copies in and out
   are part of the step): a round leaves out up to BYTIME_COPIED_WAIT samples of steps that
   copied, the time it takes the core to see whether the keys' addresses settle into a cycle
   (then a graph per address set, no copies: 8 calls) with room to spare; after that it keeps them,
   copies being the way those keys run. A bucket where a way measured on replays that copied lost
   (its replay to eager, or an exact-size trial of one of its counts) is measured again after
   BYTIME_COPIED_RECHECK of its steps, once until its next recheck (issue 43, session 43: a fresh
   host's allocator handed new addresses for a while, then two in turn; an exact-size trial ran on
   copies in 7 of its 8 samples, lost to eager by 7%, and would have won by 3% without them). */
#define BYTIME_COPIED_WAIT    (2 * BYTIME_SAMPLES)
#define BYTIME_COPIED_RECHECK 256
/* Steps of a bucket served eagerly by a decision per watched (timed) one (above): 8 samples span
   128 such steps, and the timing costs 1 step in 16 two event records. */
#define BYTIME_WATCH_EVERY 16 /* every one in a bucket the device-bound rule sent eager (below) */
/* The device-bound rule (above): a bucket whose replay costs at least this many times eager's
   host time serves its counts up to bucket / (1 + BYTIME_NEAR) eagerly without a probe. */
#define BYTIME_BOUND 8
/* Probe rounds of a count set aside (bytime.h: every sample behind the device, and only the
   host's figure kept the bucket) before its figures stand as they are, per recheck. */
#define BYTIME_RETRIES 2
/* Steps of a bucket without a step of its probe target before the target is dropped. */
#define BYTIME_STALL 256
/* Pooled probes (above): steps of a bucket's undecided counts since it was last measured before
   it may pool (16, 64 before session 39: a bucket of sparse counts 3% of the traffic, prompts of
   1500-3978 tokens at bucket 4096, was decided only after 75 of its 120 steps on an H200); its
   recent such steps followed (the pivot's median, the sparseness test); recent steps still
   undecided needed to pool (the side sampled holds about half: about 2 x a round); pooled rounds
   per bucket between rechecks (a bisection of the recent steps' counts, each pivot tested on at
   most two sides). */
#define BYTIME_POOL_SEEN   16
#define BYTIME_POOL_RECENT 64
#define BYTIME_POOL_MIN    (2 * BYTIME_SAMPLES)
#define BYTIME_POOL_ROUNDS 8

/* How a padded step is served. */
enum bytime_way {
  BYTIME_BUCKET = 0, /* replayed at its bucket, padded */
  BYTIME_EAGER = 1,  /* run eagerly at its own size */
  BYTIME_EXACT = 2   /* replayed at an exact-size bucket: graphs at its own size */
};

struct bytime;

/* What bytime_choose decided for one step; hand it back to bytime_end. */
struct bytime_step {
  enum bytime_way way;
  int64_t tokens, bucket;
  int timed;       /* events recorded around it */
  int probe;       /* run eagerly to measure eager, not because eager won */
  int graph_probe; /* replayed at its bucket to measure the replay, not because it won */
  int pooled;      /* run eagerly for a pooled probe (its sample pooled with other counts') */
  int watched;     /* served eagerly by a decision, and timed to watch that decision */
  uint64_t host_start_ns; /* the host's clock when its start event was recorded */
  void *series;           /* the measurement it feeds (internal) */
  void *rec, *b;          /* the count's and the bucket's records (internal) */
};

/* Its figures for cgrt_stats (the fields of issue 43) and cgrt_backend_figures. */
struct bytime_figures {
  uint64_t timed_steps, probe_steps, eager_steps, exact_steps, eager_counts, exact_counts;
  uint64_t implied_counts;     /* counts decided by a neighbour's measurement in their bucket */
  uint64_t rare_refused;       /* counts refused an exact-size bucket as rare (once per count) */
  uint64_t graph_probe_steps;  /* steps run at their bucket to measure its replay, eager serving */
  uint64_t pooled_rounds;      /* pooled probe rounds completed (decided or not) */
  uint64_t pooled_probe_steps; /* eager probe steps of pooled rounds (counted in probe_steps too) */
  uint64_t waited_samples;     /* samples left out as waits (> 2x their round's lower quartile) */
  uint64_t copied_samples;     /* samples left out: their replays made private copies */
  uint64_t copied_rechecks;    /* buckets measured again early: decided on replays with copies */
  uint64_t watched_steps;      /* steps served eagerly by a decision and timed to watch it */
  uint64_t eager_overturned;   /* watches that sent a bucket's eager counts back to the bucket */
  uint64_t bound_buckets;      /* buckets where the device-bound rule sent counts eager */
  uint64_t untimed_steps;      /* measuring steps left untimed: every timing pair was in flight */
  uint64_t set_aside_rounds;   /* probe rounds set aside: every sample behind, the host's decided */
};

/* max_exact: [local] exact_buckets. max_queued: [runtime] max_queued_steps (for a hint only).
   cache: where exact-size graphs live (retired from it). */
int bytime_create(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache, int max_exact,
                  int max_queued, struct bytime **out);
void bytime_destroy(struct bytime *bt);

/*
 * Before an inference step of `tokens` padded to `bucket` (> tokens): reads the timings that are
 * ready, and says how to serve this step. Records the start event when the step is timed.
 */
int bytime_choose(struct bytime *bt, int64_t tokens, int64_t bucket, struct bytime_step *st);
/*
 * After the step ran (mode: ctx->mode after it; copied: its replays copied into or out of private
 * copies, cgrt_step_report.copy_bytes > 0): records the end event of a timed step.
 */
int bytime_end(struct bytime *bt, struct bytime_step *st, cgrt_mode mode, int copied);
/*
 * The bucket set changed (adaptive buckets): every count's decisions are forgotten and the
 * exact-size graphs retired (the counts are measured again against their new buckets).
 */
int bytime_forget(struct bytime *bt);
void bytime_figures(const struct bytime *bt, struct bytime_figures *out);

#endif
