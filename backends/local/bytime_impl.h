/*
 * bytime_impl.h - what local's by_time keeps, shared by its two files: bytime.c (the records, the
 * timing of steps and the way each step is served) and bytime_rules.c (what the measurements
 * decide: the noise rule per probe, the ranges it implies, pooled probes, exact-size buckets,
 * rechecks). The rule itself is in bytime.h.
 */
#ifndef CGRT_LOCAL_BYTIME_IMPL_H
#define CGRT_LOCAL_BYTIME_IMPL_H

#include <stdint.h>

#include "bytime.h"
#include "step_cost.h"

/* Samples of one way of serving, taken in one round; restarted by bumping `round`. */
struct series {
  uint32_t round; /* late samples of an earlier round are dropped */
  int active;     /* taking samples */
  int skip;       /* an eager series' first step is run but not kept */
  int taken;      /* timed steps queued this round */
  int n;          /* samples read this round */
  struct step_sample v[BYTIME_SAMPLES];
  struct step_cost median; /* of the last complete round (us 0: none) */
  int counted;             /* this round's waits are in fig.waited_samples */
  int copied_out;          /* samples left out this round: steps that copied (BYTIME_COPIED_WAIT) */
  int copied;              /* samples kept this round from steps that copied */
};

enum decided { UNDECIDED = 0, MEASURED = 1, IMPLIED = 2 };

/* The side of a pooled probe: its samples from counts >= P (eager wins at P?) or <= P (loses?). */
enum pool_side { POOL_WINS = 1, POOL_LOSES = 2 };

/* One bucket of the set: its replay, measured once for every count it serves. */
struct bucket_rec {
  int64_t bucket;
  struct series replay;
  int64_t eager_upto;        /* counts <= this are served eagerly (0: none) */
  int64_t bucket_from;       /* counts >= this keep the bucket (INT64_MAX: none) */
  struct count_rec *probing; /* the count probed now, or NULL */
  uint64_t since_target;     /* steps of the bucket since its target's last step */
  uint64_t since;            /* steps of the bucket since it was created or last rechecked */
  uint64_t rounds;           /* probe rounds completed since then */
  /* a way of the bucket measured on replays that copied lost: measured again after
     BYTIME_COPIED_RECHECK steps (1), once until a regular recheck (2: done) */
  int copied;
  uint64_t copied_since; /* steps of the bucket since `copied` became 1 */
  /* pooled probes (bytime.h) */
  struct series pool;                 /* eager samples of several counts on one side of the pivot */
  int64_t pivot;                      /* P of the pooled round running (0: none) */
  enum pool_side side;                /* the side the round samples */
  int tried;                          /* sides tested at this pivot (pool_side bits) */
  enum pool_side first;               /* the side a new pivot tests first: the last one shown */
  int pool_stopped;                   /* a pivot showed neither side: no pooling until a recheck */
  uint64_t pool_rounds;               /* pooled rounds since the recheck */
  uint64_t undecided_steps;           /* steps of undecided counts since the recheck */
  uint64_t since_sample;              /* steps of the bucket since the pooled round's last sample */
  int64_t recent[BYTIME_POOL_RECENT]; /* the counts of its last steps of undecided counts */
  size_t nrecent, recent_at;
  /* the watch of its counts served eagerly (bytime.h) */
  struct series watch;  /* samples of steps served eagerly by a decision */
  uint64_t watch_since; /* such steps since the last one timed */
  /* the device-bound rule (bytime.h), since the bucket was last measured: the eager host figure
     it was judged with (0: not yet; judged again when a faster round comes), whether it sent
     counts eager; off for good once a watch overturned eager serving in it */
  double bound_host;
  int bound_on, bound_off;
};

/* One token count followed. Allocated once, never moved: pending timings point at it. */
struct count_rec {
  int64_t tokens;
  struct bucket_rec *b;
  enum bytime_way inc; /* how the count is served now */
  enum decided decided;
  uint64_t seen;     /* steps of the count (reset when dropped as a stalled target) */
  int exact_checked; /* an exact-size bucket was considered (until a recheck) */
  int contested;     /* its probe kept the bucket, whose replay beat eager by BYTIME_NEAR at most */
  int exact_round;   /* an exact-size bucket is measured against eager */
  int rare_counted;  /* counted once in rare_refused */
  int retried;       /* its probe rounds set aside: every sample behind the device (bytime.h) */
  struct series eager, exact;
};

struct pending {
  void *start, *end;
  struct series *s;
  struct bucket_rec *b;
  struct count_rec *r;
  uint32_t round;
  double host_us; /* the host's time to issue the step */
  int copied;     /* its replays copied into or out of private copies */
  int behind;     /* its start event was still pending when the host had issued it */
};

struct bytime {
  const struct cgrt_host_api *h;
  struct cgrt_graph_cache *cache;
  int max_exact;
  int max_queued;          /* [runtime] max_queued_steps (0: the host may run any distance ahead) */
  int told_queue;          /* the set-aside round's hint about max_queued_steps was said (once) */
  struct count_rec **recs; /* ascending by tokens */
  size_t nrecs;
  struct bucket_rec **bks;
  size_t nbks;
  void *events[2 * BYTIME_PENDING]; /* created at the first timed step */
  int have_events;
  struct pending ring[BYTIME_PENDING];
  size_t head, npending;
  double eager_host_us; /* the smallest host figure of an eager round so far (0: none yet) */
  struct bytime_figures fig;
};

/* How a count can be served, as the lines say it (enum bytime_way's order). */
extern const char *const bytime_way_names[3];

static inline void series_start(struct series *s, int skip) {
  s->active = 1;
  s->round++;
  s->skip = skip;
  s->taken = s->n = 0;
  s->counted = 0;
  s->copied_out = s->copied = 0;
}

static inline int series_done(const struct series *s) {
  return s->active && s->n >= BYTIME_SAMPLES;
}

static inline int series_wants(const struct series *s) {
  return s->active && s->taken < BYTIME_SAMPLES;
}

/* bytime.c: the round's figures of s (step_cost.h), its waits counted once. */
struct step_cost bytime_series_cost(struct bytime *bt, struct series *s);
/* bytime.c: the first record of tokens >= `tokens` (its index in *at). */
struct count_rec *bytime_find(struct bytime *bt, int64_t tokens, size_t *at);

/* bytime_rules.c: the graphs of r's exact-size bucket are retired, counted off. */
int bytime_retire_exact(struct bytime *bt, struct count_rec *r);
/* bytime_rules.c: r, served eagerly or contested, gets an exact-size round if allowed. */
void bytime_consider_exact(struct bytime *bt, struct count_rec *r);
/* bytime_rules.c: r is served `to` from now on; said at info when `said`, with the figures. */
void bytime_switch_to(struct bytime *bt, struct count_rec *r, enum bytime_way to, int said);
/* bytime_rules.c: r takes the way its bucket's decided ranges imply; -1 if none, else changed. */
int bytime_imply(struct bytime *bt, struct count_rec *r);
/* bytime_rules.c: a step of an undecided count of b, for its pooled probes. */
void bytime_pool_follow(struct bucket_rec *b, int64_t tokens);
/* bytime_rules.c: a sample of r (or of b's replay or pool) came in: decides what is complete. */
int bytime_settle(struct bytime *bt, struct bucket_rec *b, struct count_rec *r);
/* bytime_rules.c: the count of b to probe next, or NULL. */
struct count_rec *bytime_target(struct bytime *bt, struct bucket_rec *b);
/* bytime_rules.c: starts a pooled round of b if it is due. */
void bytime_pool_start(struct bytime *bt, struct bucket_rec *b);
/* bytime_rules.c: whether a step of r gives a sample of b's pooled round (its side of the pivot).
 */
int bytime_pool_side_has(const struct bucket_rec *b, const struct count_rec *r);
/* bytime_rules.c: the device-bound rule (bytime.h) on b, once its replay has a figure. */
void bytime_bound(struct bytime *bt, struct bucket_rec *b);
/* bytime_rules.c: b's measurements are forgotten and b is measured again. */
void bytime_recheck(struct bytime *bt, struct bucket_rec *b);
/* bytime_rules.c: bytime_recheck, early, of a bucket decided on replays that copied (bytime.h). */
void bytime_recheck_copied(struct bytime *bt, struct bucket_rec *b);

#endif
