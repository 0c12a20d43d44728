/*
 * bytime_rules.c - what local's by_time measurements decide (bytime.h has the rule): exact-size
 * buckets, the noise rule of a probe and the counts it implies, pooled probes, rechecks. The
 * records and the timing are bytime.c's (bytime_impl.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytime_impl.h"

/* ---------------------------------------------------------------- exact-size buckets */

/* A graph of the exact-size bucket `tokens` (local.c keys inference graphs by their bucket). */
static int graph_of_size(void *arg, const struct cgrt_graph_key *key) {
  int64_t size = *(const int64_t *)arg;
  if (key->phase != CGRT_PHASE_INFER)
    return 0;
  return key->module == CGRT_KEY_BODY ? key->shape == (uint64_t)size : key->extra == (uint64_t)size;
}

int bytime_retire_exact(struct bytime *bt, struct count_rec *r) {
  size_t dropped = 0;
  int64_t size = r->tokens;
  if (bt->fig.exact_counts > 0)
    bt->fig.exact_counts--;
  return bt->h->cache_retire(bt->h, bt->cache, graph_of_size, &size, &dropped);
}

/*
 * One more exact-size bucket fits: fewer than exact_buckets, and under a memory budget, the live
 * graphs plus one bucket's worth (their bytes over the buckets that hold them, an average) fit.
 */
static int exact_allowed(struct bytime *bt) {
  const struct cgrt_host_api *h = bt->h;
  if (bt->fig.exact_counts >= (uint64_t)bt->max_exact)
    return 0;
  uint64_t bytes = 0, budget = 0;
  if (!CGRT_HOST_HAS(h, graph_memory) || h->graph_memory(h, &bytes, &budget) != 0 || budget == 0)
    return 1;
  const int64_t *sizes;
  size_t n = 0;
  h->buckets(h, &sizes, &n);
  uint64_t holders = (uint64_t)n + bt->fig.exact_counts;
  uint64_t one = bytes / (holders ? holders : 1);
  return bytes + one <= budget;
}

/* A count served eagerly, or a contested one at its bucket: an exact-size bucket is measured
   against the way it is served if it may have one. */
void bytime_consider_exact(struct bytime *bt, struct count_rec *r) {
  const int contested = r->inc == BYTIME_BUCKET && r->contested;
  if (r->exact_checked || (r->inc != BYTIME_EAGER && !contested) || r->decided == UNDECIDED ||
      !exact_allowed(bt))
    return;
  if (r->seen < BYTIME_EXACT_SEEN) { /* rare: considered again when seen often enough */
    if (!r->rare_counted)
      bt->fig.rare_refused++;
    r->rare_counted = 1;
    return;
  }
  r->exact_checked = 1;
  r->exact_round = 1;
  bt->fig.exact_counts++;
  if (!series_done(&r->eager)) /* no probe of its own: its eager steps are timed as served */
    series_start(&r->eager, 1);
  series_start(&r->exact, 0);
}

/* ---------------------------------------------------------------- decisions */

/* A way measured on replays that copied (s) lost: b is measured again once (bytime.h), since
   without the copies it may have won. */
static void lost_with_copies(struct bucket_rec *b, const struct series *s) {
  if (s->copied && !b->copied) {
    b->copied = 1;
    b->copied_since = 0;
  }
}

static void report_cost(struct bytime *bt, int64_t tokens, int64_t bucket, double us) {
  const struct cgrt_host_api *h = bt->h;
  if (CGRT_HOST_HAS(h, buckets_cost) && us > 0)
    (void)h->buckets_cost(h, tokens, bucket, us);
}

/* The count's way changes; said at info when `said`, with the figures. */
void bytime_switch_to(struct bytime *bt, struct count_rec *r, enum bytime_way to, int said) {
  const struct cgrt_host_api *h = bt->h;
  enum bytime_way from = r->inc;
  if (from == to)
    return;
  if (from == BYTIME_EAGER && bt->fig.eager_counts > 0)
    bt->fig.eager_counts--;
  if (to == BYTIME_EAGER)
    bt->fig.eager_counts++;
  r->inc = to;
  if (!said)
    return;
  struct step_cost m[3] = {r->b->replay.median, r->eager.median, r->exact.median};
  char figures[384] = "";
  int n = 0;
  for (int w = 0; w < 3; w++)
    if (m[w].us > 0)
      step_cost_say(figures, sizeof(figures), &n, bytime_way_names[w], m[w]);
  h->log(h, CGRT_LOG_INFO,
         "local by_time: %lld tokens (bucket %lld) served %s from now on, not %s (time per "
         "step, " STEP_COST_SAYS
         ", of %d steps: %s; [local] by_time = off keeps the padded bucket)",
         (long long)r->tokens, (long long)r->b->bucket, bytime_way_names[to],
         bytime_way_names[from], BYTIME_SAMPLES, figures);
}

/*
 * An undecided count (not at an exact-size bucket) in a range its bucket decided takes the way
 * the range says. Returns -1 if it is not implied, else whether its way changed.
 */
int bytime_imply(struct bytime *bt, struct count_rec *r) {
  struct bucket_rec *b = r->b;
  if (r->decided != UNDECIDED || r->inc == BYTIME_EXACT || r->exact_round)
    return -1;
  enum bytime_way to;
  if (r->tokens <= b->eager_upto)
    to = BYTIME_EAGER;
  else if (r->tokens >= b->bucket_from)
    to = BYTIME_BUCKET;
  else
    return -1;
  r->decided = IMPLIED;
  bt->fig.implied_counts++;
  int changed = r->inc != to;
  bytime_switch_to(bt, r, to, 0);
  if (to == BYTIME_EAGER)
    bytime_consider_exact(bt, r);
  return changed;
}

/* The counts imply_range decided: lo-hi, n of them, `changed` of them changing way. */
struct implied {
  int64_t lo, hi;
  size_t n, changed;
};

/* The undecided counts of b in [from, to] take the way b's bounds now say. */
static struct implied imply_range(struct bytime *bt, struct bucket_rec *b, int64_t from,
                                  int64_t to) {
  struct implied d = {0, 0, 0, 0};
  size_t at;
  bytime_find(bt, from, &at);
  for (; at < bt->nrecs && bt->recs[at]->tokens <= to; at++) {
    struct count_rec *o = bt->recs[at];
    int c = o->b == b ? bytime_imply(bt, o) : -1;
    if (c < 0)
      continue;
    d.lo = d.n++ ? d.lo : o->tokens;
    d.hi = o->tokens;
    d.changed += (size_t)c;
  }
  return d;
}

/* "EAGER_NAME 954.0 us (host .., device ..), replayed at its bucket ..." into buf: an eager figure
   against its bucket's replay, as the decisions' lines say them. */
static void say_against_replay(char *buf, size_t size, const char *eager_name, struct step_cost ec,
                               struct step_cost pc) {
  int len = 0;
  buf[0] = '\0';
  step_cost_say(buf, size, &len, eager_name, ec);
  step_cost_say(buf, size, &len, bytime_way_names[BYTIME_BUCKET], pc);
}

/* An eager round's host figure, for the device-bound rule (bytime.h): the smallest so far. */
static void eager_host(struct bytime *bt, struct step_cost ec) {
  if (ec.host_us > 0 && (bt->eager_host_us <= 0 || ec.host_us < bt->eager_host_us))
    bt->eager_host_us = ec.host_us;
}

/* r's probe round kept its bucket only by a host figure taken behind the device in every sample
   (bytime.h): set aside, r undecided, probed again once seen BYTIME_MIN_SEEN times more. */
static void set_aside(struct bytime *bt, struct bucket_rec *b, struct count_rec *r,
                      struct step_cost ec, struct step_cost pc) {
  const struct cgrt_host_api *h = bt->h;
  r->retried++;
  r->seen = 0;
  bt->fig.set_aside_rounds++;
  char figures[256];
  say_against_replay(figures, sizeof(figures), "eager", ec, pc);
  h->log(h, CGRT_LOG_DEBUG,
         "local by_time: %lld tokens (bucket %lld): a probe round set aside (%d of %d): every "
         "sample was taken with the device behind, and only the host's figure kept the bucket "
         "(waits in its launches cannot be told from its issue time there; time per "
         "step, " STEP_COST_SAYS ", of %d steps: %s); probed again once seen %d times more",
         (long long)r->tokens, (long long)b->bucket, r->retried, BYTIME_RETRIES, BYTIME_SAMPLES,
         figures, BYTIME_MIN_SEEN);
  /* The cause is the host's distance ahead, which the configuration can bound (session 51: on an
     H200, decode_small's rounds measured cleanly with max_queued_steps = 2, none set aside) */
  if (!bt->told_queue && bt->max_queued == 0) {
    bt->told_queue = 1;
    h->log(h, CGRT_LOG_INFO,
           "local by_time: %lld tokens (bucket %lld): a probe round was set aside, every sample "
           "taken with the device behind the host: the host queues steps far ahead, and a "
           "step's launches wait for the work queued before them, so its issue time cannot be "
           "read; [runtime] max_queued_steps = 2 keeps the host at most two steps ahead and "
           "the rounds measure the step itself (said once)",
           (long long)r->tokens, (long long)b->bucket);
  }
}

/* The probe of r (its eager samples) and its bucket's replay are in: the noise rule decides. */
static void decide_probe(struct bytime *bt, struct bucket_rec *b, struct count_rec *r) {
  const struct cgrt_host_api *h = bt->h;
  struct step_cost ec = bytime_series_cost(bt, &r->eager);
  eager_host(bt, ec);
  struct step_cost pc = bytime_series_cost(bt, &b->replay);
  double e = ec.us, p = pc.us;
  report_cost(bt, r->tokens, b->bucket, p);
  report_cost(bt, r->tokens, 0, e);
  b->probing = NULL;
  b->rounds++;
  /* the way that serves T now stays within the margin (hysteresis) */
  int eager_wins =
      r->inc == BYTIME_EAGER ? !noise_challenger_wins(p, e) : noise_challenger_wins(e, p);
  /* kept only by a host figure taken wholly behind the device (bytime.h) */
  const int doubtful = !eager_wins && r->inc == BYTIME_BUCKET &&
                       noise_challenger_wins(step_cost_behind_us(ec, r->eager.n), p);
  if (doubtful && r->retried < BYTIME_RETRIES) {
    set_aside(bt, b, r, ec, pc);
    return;
  }
  r->decided = MEASURED;
  /* the counts it implies lie between the bucket's earlier bounds and T; a doubtful figure
     implies nothing and moves no bound */
  int64_t from = eager_wins ? b->eager_upto + 1 : r->tokens + 1;
  int64_t to = doubtful     ? 0
               : eager_wins ? r->tokens - 1
                            : (b->bucket_from < b->bucket ? b->bucket_from - 1 : b->bucket);
  if (eager_wins)
    b->eager_upto = r->tokens;
  else if (!doubtful)
    b->bucket_from = r->tokens;
  if (eager_wins)
    lost_with_copies(b, &b->replay);
  enum bytime_way was = r->inc;
  bytime_switch_to(bt, r, eager_wins ? BYTIME_EAGER : BYTIME_BUCKET, 1);
  struct implied d = imply_range(bt, b, from, to);
  /* said once for the bucket, at info when a way changed */
  char figures[256];
  say_against_replay(figures, sizeof(figures), "eager", ec, pc);
  if (was == r->inc) /* switch_to said nothing */
    h->log(
        h, CGRT_LOG_DEBUG,
        "local by_time: %lld tokens (bucket %lld) still served %s (time per step, " STEP_COST_SAYS
        ", of %d steps: %s)",
        (long long)r->tokens, (long long)b->bucket, bytime_way_names[r->inc], BYTIME_SAMPLES,
        figures);
  if (d.n > 0)
    h->log(h, d.changed ? CGRT_LOG_INFO : CGRT_LOG_DEBUG,
           "local by_time: counts %lld-%lld of bucket %lld (%zu seen, %zu changed) served %s from "
           "now on, implied by %lld tokens (time per step, " STEP_COST_SAYS
           ": %s; eager cost taken as non-decreasing in tokens; none of them probed)",
           (long long)d.lo, (long long)d.hi, (long long)b->bucket, d.n, d.changed,
           bytime_way_names[eager_wins ? BYTIME_EAGER : BYTIME_BUCKET], (long long)r->tokens,
           figures);
  /* the replay kept the bucket narrowly, if at all, or by a doubtful figure: an exact-size bucket
     (a replay, timed on the device) may beat both */
  r->contested = !eager_wins && (doubtful || p * (1 + BYTIME_NEAR) >= e);
  if (eager_wins || r->contested)
    bytime_consider_exact(bt, r);
}

/* An exact-size bucket's round is complete: it stays only when faster than eager. */
static int decide_exact(struct bytime *bt, struct count_rec *r) {
  eager_host(bt, bytime_series_cost(bt, &r->eager));
  bytime_series_cost(bt, &r->exact);
  report_cost(bt, r->tokens, 0, r->eager.median.us);
  report_cost(bt, r->tokens, r->tokens, r->exact.median.us);
  r->exact_round = 0;
  r->exact.active = 0;
  /* a contested count at its bucket: the exact-size bucket must beat the faster of the two */
  double base = r->eager.median.us, replay = r->b->replay.median.us;
  if (r->inc == BYTIME_BUCKET && replay > 0 && replay < base)
    base = replay;
  if (noise_challenger_wins(r->exact.median.us, base)) {
    bytime_switch_to(bt, r, BYTIME_EXACT, 1);
    return 0;
  }
  /* the way that served it (eager, which beat the padded bucket, or the bucket) goes on */
  lost_with_copies(r->b, &r->exact);
  return bytime_retire_exact(bt, r);
}

static void pool_round(struct bucket_rec *b, int64_t pivot, enum pool_side side) {
  b->pivot = pivot;
  b->side = side;
  b->since_sample = 0;
  series_start(&b->pool, 1); /* its first step run, not kept, as a probe's */
}

static const char *side_says(enum pool_side side) {
  return side == POOL_WINS ? ">=" : "<=";
}

/*
 * A pooled round's samples (counts on one side of the pivot) and the bucket's replay are in: a
 * side shown moves the bucket's bounds; one not shown has the other side tested at the same pivot,
 * or, both tested, ends pooling until a recheck (bytime.h).
 */
static void decide_pool(struct bytime *bt, struct bucket_rec *b) {
  const struct cgrt_host_api *h = bt->h;
  struct step_cost ec = bytime_series_cost(bt, &b->pool);
  struct step_cost pc = bytime_series_cost(bt, &b->replay);
  eager_host(bt, ec);
  int64_t p = b->pivot;
  enum pool_side side = b->side;
  b->pool.active = 0;
  b->pivot = 0;
  b->rounds++;
  b->pool_rounds++;
  bt->fig.pooled_rounds++;
  b->tried |= (int)side;
  /* the replay is the way a bucket's undecided counts start with: each side needs the margin */
  int shown =
      side == POOL_WINS ? noise_challenger_wins(ec.us, pc.us) : noise_challenger_wins(pc.us, ec.us);
  if (side == POOL_WINS ? shown : !shown) /* the replay did not win */
    lost_with_copies(b, &b->replay);
  report_cost(bt, p, b->bucket, pc.us); /* eager's median is a bound at p, not a cost: not said */
  char figures[256];
  say_against_replay(figures, sizeof(figures), "eager", ec, pc);
  if (!shown) {
    enum pool_side other = side == POOL_WINS ? POOL_LOSES : POOL_WINS;
    int again = !(b->tried & (int)other) && b->pool_rounds < BYTIME_POOL_ROUNDS;
    h->log(h, CGRT_LOG_DEBUG,
           "local by_time: a pooled probe of bucket %lld at %lld tokens (eager samples of its "
           "counts %s %lld) shows nothing (time per step, " STEP_COST_SAYS ", of %d steps: %s)%s",
           (long long)b->bucket, (long long)p, side_says(side), (long long)p, BYTIME_SAMPLES,
           figures, again ? "; the other side is sampled" : "; no more pooling until a recheck");
    if (again)
      pool_round(b, p, other);
    else
      b->pool_stopped = 1;
    return;
  }
  int64_t from, to;
  if (side == POOL_WINS) {
    from = b->eager_upto + 1;
    to = p;
    b->eager_upto = p;
  } else {
    from = p;
    to = b->bucket_from < b->bucket ? b->bucket_from - 1 : b->bucket;
    b->bucket_from = p;
  }
  b->first = side;
  b->tried = 0;
  enum bytime_way way = side == POOL_WINS ? BYTIME_EAGER : BYTIME_BUCKET;
  struct implied d = imply_range(bt, b, from, to);
  h->log(h, d.changed ? CGRT_LOG_INFO : CGRT_LOG_DEBUG,
         "local by_time: counts %s %lld of bucket %lld served %s from now on (%zu seen, %lld-%lld, "
         "%zu changed), implied by a pooled probe: eager at counts %s %lld %s the replay (time "
         "per step, " STEP_COST_SAYS ", of %d steps: %s; eager cost "
         "taken as non-decreasing in tokens)",
         side == POOL_WINS ? "<=" : ">=", (long long)p, (long long)b->bucket, bytime_way_names[way],
         d.n, (long long)d.lo, (long long)d.hi, d.changed, side_says(side), (long long)p,
         side == POOL_WINS ? "beats" : "loses to", BYTIME_SAMPLES, figures);
}

/*
 * b's watch of its counts served eagerly is complete (bytime.h): if its replay beats them by more
 * than the margin, they go back to the bucket and b is measured again.
 */
static void decide_watch(struct bytime *bt, struct bucket_rec *b) {
  const struct cgrt_host_api *h = bt->h;
  struct step_cost ec = bytime_series_cost(bt, &b->watch), pc = b->replay.median;
  b->watch.active = 0;
  eager_host(bt, ec);
  char figures[256];
  say_against_replay(figures, sizeof(figures), "eagerly as served", ec, pc);
  /* every watched step behind the device: eager's host time ran beside the device's queued
     work, so the device spans say what serving eagerly cost (bytime.h) */
  const int behind = ec.behind == b->watch.n;
  if (!noise_challenger_wins(pc.us, step_cost_behind_us(ec, b->watch.n))) {
    h->log(h, CGRT_LOG_DEBUG,
           "local by_time: bucket %lld's counts served eagerly still hold against its replay "
           "(time per step, " STEP_COST_SAYS ", of %d steps: %s%s)",
           (long long)b->bucket, BYTIME_SAMPLES, figures,
           behind ? "; every step behind the device, so its device time is eager's" : "");
    return;
  }
  size_t back = 0;
  int64_t lo = 0, hi = 0;
  for (size_t i = 0; i < bt->nrecs; i++) {
    struct count_rec *o = bt->recs[i];
    if (o->b != b || o->inc != BYTIME_EAGER || o->exact_round)
      continue;
    bytime_switch_to(bt, o, BYTIME_BUCKET, 0);
    lo = back++ ? lo : o->tokens;
    hi = o->tokens;
  }
  if (back == 0) { /* they went to exact-size buckets meanwhile: nothing is served eagerly */
    h->log(h, CGRT_LOG_DEBUG,
           "local by_time: bucket %lld's watch of its eager counts lost to its replay, but none "
           "is served eagerly any more (%s)",
           (long long)b->bucket, figures);
    return;
  }
  h->log(h, CGRT_LOG_INFO,
         "local by_time: counts %lld-%lld of bucket %lld (%zu of them) served replayed at their "
         "bucket again, no longer eagerly: their eager steps, timed as served, now lose to the "
         "replay (time per step, " STEP_COST_SAYS ", of %d steps: %s); the bucket is measured "
         "again",
         (long long)lo, (long long)hi, (long long)b->bucket, back, BYTIME_SAMPLES, figures);
  bt->fig.eager_overturned++;
  if (b->bound_on) /* the device-bound rule sent them: not again in this bucket */
    b->bound_off = 1;
  bytime_recheck(bt, b);
}

void bytime_bound(struct bytime *bt, struct bucket_rec *b) {
  const struct cgrt_host_api *h = bt->h;
  if (b->bound_on || b->bound_off || bt->eager_host_us <= 0 || !series_done(&b->replay) ||
      (b->bound_host > 0 && bt->eager_host_us >= b->bound_host))
    return;
  b->bound_host = bt->eager_host_us;
  struct step_cost pc = bytime_series_cost(bt, &b->replay);
  double ratio = pc.us / bt->eager_host_us;
  if (ratio < BYTIME_BOUND)
    return;
  /* up to bucket / (1 + BYTIME_NEAR); where eager's worst case (its launches over the replay,
     1 / ratio) is within the margin, up to where eager's work and launches beat the replay by
     the margin if work grows with tokens (bytime.h) */
  double frac = 1 / (1 + BYTIME_NEAR);
  if (ratio * BYTIME_MARGIN >= 1 && 1 / (1 + BYTIME_MARGIN) - 1 / ratio > frac)
    frac = 1 / (1 + BYTIME_MARGIN) - 1 / ratio;
  int64_t p = (int64_t)((double)b->bucket * frac);
  if (b->bucket_from <= p)
    p = b->bucket_from - 1; /* a count measured the bucket faster: eager stays below it */
  if (p <= b->eager_upto)
    return;
  /* a probe or pooled round running at or below p asks what the rule now answers: dropped */
  if (b->probing && b->probing->tokens <= p) {
    b->probing->eager.active = 0;
    b->probing = NULL;
  }
  if (b->pivot && b->pivot <= p) {
    b->pool.active = 0;
    b->pivot = 0;
  }
  int64_t from = b->eager_upto + 1;
  b->eager_upto = p;
  b->bound_on = 1;
  bt->fig.bound_buckets++;
  struct implied d = imply_range(bt, b, from, p);
  char figures[128] = "";
  int len = 0;
  step_cost_say(figures, sizeof(figures), &len, "replayed at its bucket", pc);
  h->log(h, d.changed ? CGRT_LOG_INFO : CGRT_LOG_DEBUG,
         "local by_time: counts <= %lld of bucket %lld served eagerly from now on (%zu seen, %zu "
         "changed), none probed: the bucket is device-bound, its replay (time per "
         "step, " STEP_COST_SAYS
         ": %s) %.0f times the host's time to issue an eager step (%.1f us, the fastest eager "
         "round so far), so eager at a count of it, doing no more device work than the bucket, "
         "is at most %.1f%% slower and skips at least %.0f%% padding; watched as served",
         (long long)p, (long long)b->bucket, d.n, d.changed, figures, ratio, bt->eager_host_us,
         100.0 / ratio, 100.0 * (1 - (double)p / (double)b->bucket));
}

/* What a new sample of b or r completes. */
int bytime_settle(struct bytime *bt, struct bucket_rec *b, struct count_rec *r) {
  if (series_done(&b->watch))
    decide_watch(bt, b);
  if (b->probing && series_done(&b->replay) && series_done(&b->probing->eager))
    decide_probe(bt, b, b->probing);
  if (b->pivot && series_done(&b->replay) && series_done(&b->pool))
    decide_pool(bt, b);
  if (r && r->exact_round && series_done(&r->eager) && series_done(&r->exact))
    return decide_exact(bt, r);
  return 0;
}

/*
 * The count to probe in b: the middle one (the lower of two) of its undecided counts seen at least
 * BYTIME_MIN_SEEN times, so each round decides at least half of them.
 */
struct count_rec *bytime_target(struct bytime *bt, struct bucket_rec *b) {
  size_t first, at, n = 0;
  bytime_find(bt, b->eager_upto + 1, &first);
  for (at = first;
       at < bt->nrecs && bt->recs[at]->tokens < b->bucket_from && bt->recs[at]->tokens <= b->bucket;
       at++) {
    struct count_rec *o = bt->recs[at];
    n += o->b == b && o->decided == UNDECIDED && o->inc != BYTIME_EXACT && !o->exact_round &&
         o->seen >= BYTIME_MIN_SEEN;
  }
  size_t want = n ? (n - 1) / 2 : 0, i = 0;
  for (at = first; n && at < bt->nrecs; at++) {
    struct count_rec *o = bt->recs[at];
    if (o->b == b && o->decided == UNDECIDED && o->inc != BYTIME_EXACT && !o->exact_round &&
        o->seen >= BYTIME_MIN_SEEN && i++ == want)
      return o;
  }
  return NULL;
}

static int cmp_tokens(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Whether r's steps feed b's pooled samples: an undecided count on the round's side of P. */
int bytime_pool_side_has(const struct bucket_rec *b, const struct count_rec *r) {
  if (!b->pivot || r->decided != UNDECIDED || r->inc == BYTIME_EXACT || r->exact_round ||
      r->tokens <= b->eager_upto || r->tokens >= b->bucket_from)
    return 0;
  return b->side == POOL_WINS ? r->tokens >= b->pivot : r->tokens <= b->pivot;
}

/*
 * A pooled round starts in b if its counts are too sparse to probe one by one (bytime.h): enough
 * recent steps still undecided, most of them of counts seen once among them, and no count due a
 * probe of its own. Its pivot is their median (the lower of two).
 */
void bytime_pool_start(struct bytime *bt, struct bucket_rec *b) {
  if (b->pivot || b->probing || b->pool_stopped || b->pool_rounds >= BYTIME_POOL_ROUNDS ||
      b->undecided_steps < BYTIME_POOL_SEEN)
    return;
  int64_t v[BYTIME_POOL_RECENT];
  size_t n = 0, once = 0;
  for (size_t i = 0; i < b->nrecent; i++)
    if (b->recent[i] > b->eager_upto && b->recent[i] < b->bucket_from)
      v[n++] = b->recent[i];
  if (n < BYTIME_POOL_MIN)
    return;
  qsort(v, n, sizeof(*v), cmp_tokens);
  for (size_t i = 0; i < n; i++)
    once += (i == 0 || v[i] != v[i - 1]) && (i + 1 == n || v[i + 1] != v[i]);
  if (2 * once <= n || bytime_target(bt, b))
    return;
  b->tried = 0;
  pool_round(b, v[(n - 1) / 2], b->first);
}

/* A step of b's undecided count `tokens`: followed for pooling. */
void bytime_pool_follow(struct bucket_rec *b, int64_t tokens) {
  b->undecided_steps++;
  b->recent[b->recent_at] = tokens;
  b->recent_at = (b->recent_at + 1) % BYTIME_POOL_RECENT;
  if (b->nrecent < BYTIME_POOL_RECENT)
    b->nrecent++;
}

/* Time for b's counts to be measured again (bytime.h: at most one probe round per BYTIME_RECHECK
   steps of the bucket, as when each count was measured on its own). */
void bytime_recheck(struct bytime *bt, struct bucket_rec *b) {
  b->since = b->rounds = 0;
  b->copied = 0;
  b->probing = NULL;
  b->pivot = 0;
  b->pool.active = 0;
  b->pool_stopped = 0;
  b->pool_rounds = b->undecided_steps = 0;
  b->first = POOL_WINS;
  b->eager_upto = 0;
  b->bucket_from = INT64_MAX;
  b->watch.active = 0;
  b->watch_since = 0;
  b->bound_host = 0;
  b->bound_on = 0;
  series_start(&b->replay, 0);
  for (size_t i = 0; i < bt->nrecs; i++) {
    struct count_rec *o = bt->recs[i];
    if (o->b != b || o->inc == BYTIME_EXACT || o->exact_round)
      continue;
    o->decided = UNDECIDED;
    o->exact_checked = 0;
    o->contested = 0;
    o->retried = 0;
    o->eager.active = 0;
  }
}

/* b was decided on replays that copied (its own, or an exact-size trial of one of its counts):
   measured again now that the copies may have stopped, once until its regular recheck. */
void bytime_recheck_copied(struct bytime *bt, struct bucket_rec *b) {
  const struct cgrt_host_api *h = bt->h;
  h->log(h, CGRT_LOG_INFO,
         "local by_time: bucket %lld is measured again: its figures were taken from replays on "
         "private copies of moved buffers (rebind = auto), which may have stopped since (a graph "
         "per address set); once until its regular recheck",
         (long long)b->bucket);
  bytime_recheck(bt, b);
  b->copied = 2;
  bt->fig.copied_rechecks++;
}
