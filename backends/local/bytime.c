/*
 * bytime.c - local's inference buckets chosen by time (issue 43); the rule is in bytime.h.
 *
 * Where the figures come from: two timed events (host->event_create_timed) recorded on the
 * runtime's stream before and after a step, read with host->event_elapsed at a later step, when
 * both records have run (never a wait: a timing whose events are not done stays pending, and at
 * most BYTIME_PENDING are). The device time between them is what the step cost the stream in the
 * host's own pipeline: for a step bound by its launches, the launches; for one bound by its work,
 * the work. Eager steps are timed the same way, back to back with the host's other steps. Beside
 * it, the host's time to issue the step (host->now_ns after the start event is recorded and before
 * the end event is): a round's cost is the larger of the two (backends/common/step_cost.h: the
 * host's median with waits left out, the device's median), so a step whose launches the device
 * hides, being behind, still costs them. Whether the device had begun the step when the host had
 * issued it is said in each sample's debug line (a host far ahead waits in its launches:
 * step_cost.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
};

/* One token count followed. Allocated once, never moved: pending timings point at it. */
struct count_rec {
  int64_t tokens;
  struct bucket_rec *b;
  enum bytime_way inc; /* how the count is served now */
  enum decided decided;
  uint64_t seen;     /* steps of the count (reset when dropped as a stalled target) */
  int exact_checked; /* an exact-size bucket was considered (until a recheck) */
  int contested;     /* its probe kept the bucket, whose replay did not beat eager by the margin */
  int exact_round;   /* an exact-size bucket is measured against eager */
  int rare_counted;  /* counted once in rare_refused */
  struct series eager, exact;
};

struct pending {
  void *start, *end;
  struct series *s;
  struct bucket_rec *b;
  struct count_rec *r;
  uint32_t round;
  double host_us; /* the host's time to issue the step */
  int behind;     /* its start event was still pending when the host had issued it */
};

struct bytime {
  const struct cgrt_host_api *h;
  struct cgrt_graph_cache *cache;
  int max_exact;
  struct count_rec **recs; /* ascending by tokens */
  size_t nrecs;
  struct bucket_rec **bks;
  size_t nbks;
  void *events[2 * BYTIME_PENDING]; /* created at the first timed step */
  int have_events;
  struct pending ring[BYTIME_PENDING];
  size_t head, npending;
  struct bytime_figures fig;
};

static const char *const way_names[] = {"replayed at its bucket", "eagerly",
                                        "at an exact-size bucket"};

int bytime_create(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache, int max_exact,
                  struct bytime **out) {
  *out = NULL;
  if (!CGRT_HOST_HAS(h, event_elapsed) || !CGRT_HOST_HAS(h, event_create_timed))
    return h->set_error(h, CGRT_E_UNSUPPORTED,
                        "[local] by_time = on needs a core of host API minor 8 or later (device "
                        "timing); set by_time = off");
  struct bytime *bt = calloc(1, sizeof(*bt));
  if (!bt)
    return h->set_error(h, CGRT_E_NOMEM, "local: out of memory for by_time");
  bt->h = h;
  bt->cache = cache;
  bt->max_exact = max_exact;
  *out = bt;
  return 0;
}

static void free_records(struct bytime *bt) {
  for (size_t i = 0; i < bt->nrecs; i++)
    free(bt->recs[i]);
  for (size_t i = 0; i < bt->nbks; i++)
    free(bt->bks[i]);
  bt->nrecs = bt->nbks = 0;
}

void bytime_destroy(struct bytime *bt) {
  if (!bt)
    return;
  for (size_t i = 0; i < 2 * BYTIME_PENDING; i++)
    if (bt->events[i])
      bt->h->event_destroy(bt->h, bt->events[i]);
  free_records(bt);
  free(bt->recs);
  free(bt->bks);
  free(bt);
}

void bytime_figures(const struct bytime *bt, struct bytime_figures *out) {
  *out = bt->fig;
}

/* ---------------------------------------------------------------- records */

static void series_start(struct series *s, int skip) {
  s->active = 1;
  s->round++;
  s->skip = skip;
  s->taken = s->n = 0;
  s->counted = 0;
}

/*
 * The round's figures (step_cost.h); the samples it left out of the host's figure as waits (more
 * than twice the host's lower quartile: a host far ahead waiting in its launches, or a prepare or
 * body that synchronizes) are counted once in fig.waited_samples.
 */
static struct step_cost series_cost(struct bytime *bt, struct series *s) {
  s->median = step_cost_medians(s->v, s->n);
  if (!s->counted) {
    s->counted = 1;
    bt->fig.waited_samples += (uint64_t)s->median.waits;
  }
  return s->median;
}

static int series_done(const struct series *s) {
  return s->active && s->n >= BYTIME_SAMPLES;
}

static int series_wants(const struct series *s) {
  return s->active && s->taken < BYTIME_SAMPLES;
}

/* The first record of tokens >= `tokens` (its index in *at). */
static struct count_rec *find(struct bytime *bt, int64_t tokens, size_t *at) {
  size_t lo = 0, hi = bt->nrecs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (bt->recs[mid]->tokens < tokens)
      lo = mid + 1;
    else
      hi = mid;
  }
  *at = lo;
  return lo < bt->nrecs && bt->recs[lo]->tokens == tokens ? bt->recs[lo] : NULL;
}

static struct bucket_rec *bucket_of(struct bytime *bt, int64_t bucket) {
  for (size_t i = 0; i < bt->nbks; i++)
    if (bt->bks[i]->bucket == bucket)
      return bt->bks[i];
  struct bucket_rec **v = realloc(bt->bks, (bt->nbks + 1) * sizeof(*v));
  if (!v)
    return NULL;
  bt->bks = v;
  struct bucket_rec *b = calloc(1, sizeof(*b));
  if (!b)
    return NULL;
  v[bt->nbks++] = b;
  b->bucket = bucket;
  b->bucket_from = INT64_MAX;
  b->first = POOL_WINS;
  series_start(&b->replay, 0);
  return b;
}

static struct count_rec *rec_of(struct bytime *bt, int64_t tokens, struct bucket_rec *b) {
  size_t at;
  struct count_rec *r = find(bt, tokens, &at);
  if (r)
    return r;
  if (bt->nrecs >= BYTIME_COUNTS)
    return NULL;
  struct count_rec **v = realloc(bt->recs, (bt->nrecs + 1) * sizeof(*v));
  if (!v)
    return NULL;
  bt->recs = v;
  if (!(r = calloc(1, sizeof(*r))))
    return NULL;
  memmove(&v[at + 1], &v[at], (bt->nrecs - at) * sizeof(*v));
  v[at] = r;
  bt->nrecs++;
  r->tokens = tokens;
  r->b = b;
  r->inc = BYTIME_BUCKET;
  return r;
}

/* ---------------------------------------------------------------- exact-size buckets */

/* A graph of the exact-size bucket `tokens` (local.c keys inference graphs by their bucket). */
static int graph_of_size(void *arg, const struct cgrt_graph_key *key) {
  int64_t size = *(const int64_t *)arg;
  if (key->phase != CGRT_PHASE_INFER)
    return 0;
  return key->module == CGRT_KEY_BODY ? key->shape == (uint64_t)size : key->extra == (uint64_t)size;
}

static int retire_exact(struct bytime *bt, struct count_rec *r) {
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
static void consider_exact(struct bytime *bt, struct count_rec *r) {
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

static void report_cost(struct bytime *bt, int64_t tokens, int64_t bucket, double us) {
  const struct cgrt_host_api *h = bt->h;
  if (CGRT_HOST_HAS(h, buckets_cost) && us > 0)
    (void)h->buckets_cost(h, tokens, bucket, us);
}

/* The count's way changes; said at info when `said`, with the figures. */
static void switch_to(struct bytime *bt, struct count_rec *r, enum bytime_way to, int said) {
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
      step_cost_say(figures, sizeof(figures), &n, way_names[w], m[w]);
  h->log(h, CGRT_LOG_INFO,
         "local by_time: %lld tokens (bucket %lld) served %s from now on, not %s (time per "
         "step, " STEP_COST_SAYS
         ", of %d steps: %s; [local] by_time = off keeps the padded bucket)",
         (long long)r->tokens, (long long)r->b->bucket, way_names[to], way_names[from],
         BYTIME_SAMPLES, figures);
}

/*
 * An undecided count (not at an exact-size bucket) in a range its bucket decided takes the way
 * the range says. Returns -1 if it is not implied, else whether its way changed.
 */
static int imply(struct bytime *bt, struct count_rec *r) {
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
  switch_to(bt, r, to, 0);
  if (to == BYTIME_EAGER)
    consider_exact(bt, r);
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
  find(bt, from, &at);
  for (; at < bt->nrecs && bt->recs[at]->tokens <= to; at++) {
    struct count_rec *o = bt->recs[at];
    int c = o->b == b ? imply(bt, o) : -1;
    if (c < 0)
      continue;
    d.lo = d.n++ ? d.lo : o->tokens;
    d.hi = o->tokens;
    d.changed += (size_t)c;
  }
  return d;
}

/* The probe of r (its eager samples) and its bucket's replay are in: the noise rule decides. */
static void decide_probe(struct bytime *bt, struct bucket_rec *b, struct count_rec *r) {
  const struct cgrt_host_api *h = bt->h;
  struct step_cost ec = series_cost(bt, &r->eager);
  struct step_cost pc = series_cost(bt, &b->replay);
  double e = ec.us, p = pc.us;
  report_cost(bt, r->tokens, b->bucket, p);
  report_cost(bt, r->tokens, 0, e);
  b->probing = NULL;
  b->rounds++;
  r->decided = MEASURED;
  /* the way that serves T now stays within the margin (hysteresis) */
  int eager_wins =
      r->inc == BYTIME_EAGER ? !noise_challenger_wins(p, e) : noise_challenger_wins(e, p);
  /* the counts it implies lie between the bucket's earlier bounds and T */
  int64_t from = eager_wins ? b->eager_upto + 1 : r->tokens + 1;
  int64_t to =
      eager_wins ? r->tokens - 1 : (b->bucket_from < b->bucket ? b->bucket_from - 1 : b->bucket);
  if (eager_wins)
    b->eager_upto = r->tokens;
  else
    b->bucket_from = r->tokens;
  enum bytime_way was = r->inc;
  switch_to(bt, r, eager_wins ? BYTIME_EAGER : BYTIME_BUCKET, 1);
  struct implied d = imply_range(bt, b, from, to);
  /* said once for the bucket, at info when a way changed */
  char figures[256] = "";
  int len = 0;
  step_cost_say(figures, sizeof(figures), &len, "eager", ec);
  step_cost_say(figures, sizeof(figures), &len, "replayed at its bucket", pc);
  if (was == r->inc) /* switch_to said nothing */
    h->log(
        h, CGRT_LOG_DEBUG,
        "local by_time: %lld tokens (bucket %lld) still served %s (time per step, " STEP_COST_SAYS
        ", of %d steps: %s)",
        (long long)r->tokens, (long long)b->bucket, way_names[r->inc], BYTIME_SAMPLES, figures);
  if (d.n > 0)
    h->log(h, d.changed ? CGRT_LOG_INFO : CGRT_LOG_DEBUG,
           "local by_time: counts %lld-%lld of bucket %lld (%zu seen, %zu changed) served %s from "
           "now on, implied by %lld tokens (time per step, " STEP_COST_SAYS
           ": %s; eager cost taken as non-decreasing in tokens; none of them probed)",
           (long long)d.lo, (long long)d.hi, (long long)b->bucket, d.n, d.changed,
           way_names[eager_wins ? BYTIME_EAGER : BYTIME_BUCKET], (long long)r->tokens, figures);
  /* neither way is faster by the margin: an exact-size bucket may beat both */
  r->contested = !eager_wins && !noise_challenger_wins(p, e);
  if (eager_wins || r->contested)
    consider_exact(bt, r);
}

/* An exact-size bucket's round is complete: it stays only when faster than eager. */
static int decide_exact(struct bytime *bt, struct count_rec *r) {
  series_cost(bt, &r->eager);
  series_cost(bt, &r->exact);
  report_cost(bt, r->tokens, 0, r->eager.median.us);
  report_cost(bt, r->tokens, r->tokens, r->exact.median.us);
  r->exact_round = 0;
  r->exact.active = 0;
  /* a contested count at its bucket: the exact-size bucket must beat the faster of the two */
  double base = r->eager.median.us, replay = r->b->replay.median.us;
  if (r->inc == BYTIME_BUCKET && replay > 0 && replay < base)
    base = replay;
  if (noise_challenger_wins(r->exact.median.us, base)) {
    switch_to(bt, r, BYTIME_EXACT, 1);
    return 0;
  }
  /* the way that served it (eager, which beat the padded bucket, or the bucket) goes on */
  return retire_exact(bt, r);
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
  struct step_cost ec = series_cost(bt, &b->pool);
  struct step_cost pc = series_cost(bt, &b->replay);
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
  report_cost(bt, p, b->bucket, pc.us); /* eager's median is a bound at p, not a cost: not said */
  char figures[256] = "";
  int len = 0;
  step_cost_say(figures, sizeof(figures), &len, "eager", ec);
  step_cost_say(figures, sizeof(figures), &len, "replayed at its bucket", pc);
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
         side == POOL_WINS ? "<=" : ">=", (long long)p, (long long)b->bucket, way_names[way], d.n,
         (long long)d.lo, (long long)d.hi, d.changed, side_says(side), (long long)p,
         side == POOL_WINS ? "beats" : "loses to", BYTIME_SAMPLES, figures);
}

/* What a new sample of b or r completes. */
static int settle(struct bytime *bt, struct bucket_rec *b, struct count_rec *r) {
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
static struct count_rec *target(struct bytime *bt, struct bucket_rec *b) {
  size_t first, at, n = 0;
  find(bt, b->eager_upto + 1, &first);
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
static int pool_side_has(const struct bucket_rec *b, const struct count_rec *r) {
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
static void pool_start(struct bytime *bt, struct bucket_rec *b) {
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
  if (2 * once <= n || target(bt, b))
    return;
  b->tried = 0;
  pool_round(b, v[(n - 1) / 2], b->first);
}

/* A step of b's undecided count `tokens`: followed for pooling. */
static void pool_follow(struct bucket_rec *b, int64_t tokens) {
  b->undecided_steps++;
  b->recent[b->recent_at] = tokens;
  b->recent_at = (b->recent_at + 1) % BYTIME_POOL_RECENT;
  if (b->nrecent < BYTIME_POOL_RECENT)
    b->nrecent++;
}

/* Time for b's counts to be measured again (bytime.h: at most one probe round per BYTIME_RECHECK
   steps of the bucket, as when each count was measured on its own). */
static void recheck(struct bytime *bt, struct bucket_rec *b) {
  b->since = b->rounds = 0;
  b->probing = NULL;
  b->pivot = 0;
  b->pool.active = 0;
  b->pool_stopped = 0;
  b->pool_rounds = b->undecided_steps = 0;
  b->first = POOL_WINS;
  b->eager_upto = 0;
  b->bucket_from = INT64_MAX;
  series_start(&b->replay, 0);
  for (size_t i = 0; i < bt->nrecs; i++) {
    struct count_rec *o = bt->recs[i];
    if (o->b != b || o->inc == BYTIME_EXACT || o->exact_round)
      continue;
    o->decided = UNDECIDED;
    o->exact_checked = 0;
    o->contested = 0;
    o->eager.active = 0;
  }
}

/* ---------------------------------------------------------------- timing */

/* Which way a pending timing measures, for the debug line of its sample. */
static const char *sample_way(const struct pending *p) {
  if (p->s == &p->b->replay)
    return "replayed at its bucket";
  if (p->s == &p->b->pool)
    return "eagerly (pooled)";
  return p->s == &p->r->exact ? "at an exact-size bucket" : "eagerly";
}

/* Reads the pending timings whose events have run, oldest first; never waits. */
static int poll(struct bytime *bt) {
  const struct cgrt_host_api *h = bt->h;
  while (bt->npending > 0) {
    struct pending *p = &bt->ring[bt->head];
    double us = 0;
    int rc = h->event_elapsed(h, p->start, p->end, &us);
    if (rc == CGRT_E_NOTREADY)
      return 0;
    bt->head = (bt->head + 1) % BYTIME_PENDING;
    bt->npending--;
    if (rc != 0) {
      h->log(h, CGRT_LOG_DEBUG, "local by_time: a step's timing is lost (%s)", h->last_error(h));
      continue;
    }
    bt->fig.timed_steps++;
    struct series *s = p->s;
    if (!s->active || p->round != s->round || s->n >= BYTIME_SAMPLES)
      continue; /* a round that ended or was restarted since */
    s->v[s->n++] = (struct step_sample){p->host_us, us};
    h->log(h, CGRT_LOG_DEBUG,
           "local by_time: %lld tokens (bucket %lld), a sample %s: host %.1f us, "
           "device %.1f us%s",
           (long long)p->r->tokens, (long long)p->b->bucket, sample_way(p), p->host_us, us,
           p->behind ? ", the device behind" : "");
    if ((rc = settle(bt, p->b, p->r)) != 0)
      return rc;
  }
  return 0;
}

static int ensure_events(struct bytime *bt) {
  if (bt->have_events)
    return 0;
  for (size_t i = 0; i < 2 * BYTIME_PENDING; i++) {
    int rc = bt->h->event_create_timed(bt->h, &bt->events[i]);
    if (rc != 0)
      return rc;
  }
  bt->have_events = 1;
  return 0;
}

/* The step is served `way` and feeds series s (eager series skip their first step). */
static void measure(struct bytime_step *st, enum bytime_way way, struct series *s) {
  st->way = way;
  st->series = s;
  st->timed = 1;
  if (s->skip) {
    s->skip = 0; /* run, not kept: a new row count's first eager run */
    st->timed = 0;
  }
}

/* How r's step is served, and what it measures. */
static void choose_way(struct bytime *bt, struct bucket_rec *b, struct count_rec *r,
                       struct bytime_step *st) {
  st->way = r->inc;
  if (r->exact_round) { /* eager's samples first, then the exact-size bucket's */
    if (series_wants(&r->eager))
      measure(st, BYTIME_EAGER, &r->eager);
    else if (series_wants(&r->exact))
      measure(st, BYTIME_EXACT, &r->exact);
    else
      st->way = BYTIME_EXACT; /* served so while its last samples are read */
    return;
  }
  if (!b->probing && !b->pivot && r->decided == UNDECIDED && r->inc != BYTIME_EXACT &&
      r->seen >= BYTIME_MIN_SEEN && target(bt, b) == r) {
    b->probing = r;
    series_start(&r->eager, 1);
  }
  if (b->probing == r) {
    b->since_target = 0;
    if (series_wants(&r->eager)) {
      measure(st, BYTIME_EAGER, &r->eager);
      st->probe = r->inc != BYTIME_EAGER;
      return;
    }
  } else if (b->probing && series_wants(&b->probing->eager) && ++b->since_target > BYTIME_STALL) {
    /* the target stopped coming: dropped, eligible again once seen often enough */
    b->probing->seen = 0;
    b->probing->eager.active = 0;
    b->probing = NULL;
  }
  if (!b->probing && r->decided == UNDECIDED)
    pool_start(bt, b);
  if (b->pivot && series_wants(&b->pool)) {
    if (pool_side_has(b, r)) { /* eager at r bounds eager at the pivot: a pooled sample */
      b->since_sample = 0;
      measure(st, BYTIME_EAGER, &b->pool);
      st->probe = r->inc != BYTIME_EAGER;
      st->pooled = 1;
      return;
    }
    if (++b->since_sample > BYTIME_STALL) { /* its side stopped coming: dropped, followed anew */
      b->pool.active = 0;
      b->pivot = 0;
      b->undecided_steps = 0;
    }
  }
  if (!series_wants(&b->replay) || r->inc == BYTIME_EXACT)
    return;
  if (r->inc == BYTIME_BUCKET) {
    measure(st, BYTIME_BUCKET, &b->replay);
  } else if ((b->probing && !series_wants(&b->probing->eager)) ||
             (b->pivot && !series_wants(&b->pool))) {
    /* the probe waits for the replay and this count runs eagerly: a graph probe */
    measure(st, BYTIME_BUCKET, &b->replay);
    st->graph_probe = 1;
  }
}

int bytime_choose(struct bytime *bt, int64_t tokens, int64_t bucket, struct bytime_step *st) {
  memset(st, 0, sizeof(*st));
  st->tokens = tokens;
  st->bucket = bucket;
  st->way = BYTIME_BUCKET;
  int rc = poll(bt);
  if (rc != 0)
    return rc;
  struct bucket_rec *b = bucket_of(bt, bucket);
  struct count_rec *r = b ? rec_of(bt, tokens, b) : NULL;
  if (!r)
    return 0;      /* too many counts followed (or no memory): this one keeps its bucket */
  if (r->b != b) { /* its bucket changed under it (bytime_forget should have run): afresh */
    if (r->inc == BYTIME_EXACT || r->exact_round)
      if ((rc = retire_exact(bt, r)) != 0)
        return rc;
    if (r->b->probing == r)
      r->b->probing = NULL;
    switch_to(bt, r, BYTIME_BUCKET, 0);
    r->b = b;
    r->decided = UNDECIDED;
    r->exact_checked = r->exact_round = r->contested = 0;
    r->eager.active = r->exact.active = 0;
  }
  st->rec = r;
  st->b = b;
  r->seen++;
  if (++b->since >= BYTIME_RECHECK * (b->rounds ? b->rounds : 1) && !b->probing && !b->pivot)
    recheck(bt, b);
  (void)imply(bt, r);
  if (r->decided == UNDECIDED && r->inc != BYTIME_EXACT && !r->exact_round)
    pool_follow(b, tokens);
  if ((r->inc == BYTIME_EAGER || r->contested) && !r->exact_checked && r->seen == BYTIME_EXACT_SEEN)
    consider_exact(bt, r);
  choose_way(bt, b, r, st);
  if (st->timed && bt->npending == BYTIME_PENDING) {
    /* Every pair still in flight (the device far behind a host that does not wait): a measuring
       step that cannot be timed would measure nothing, so it is served the count's own way, not
       run eagerly (or at its bucket) for a sample it cannot give. */
    st->timed = 0;
    st->series = NULL;
    st->probe = st->graph_probe = st->pooled = 0;
    st->way = r->inc;
  }
  if (st->graph_probe)
    bt->fig.graph_probe_steps++;
  if (st->timed) {
    if ((rc = ensure_events(bt)) != 0)
      return rc;
    size_t slot = (bt->head + bt->npending) % BYTIME_PENDING;
    if ((rc = bt->h->event_record(bt->h, bt->events[2 * slot], bt->h->stream(bt->h))) != 0)
      return rc;
    st->host_start_ns = step_cost_now_ns(bt->h); /* the host issues prepare and body from here */
  }
  if (st->probe && st->pooled)
    bt->fig.pooled_probe_steps++;
  if (st->probe)
    bt->fig.probe_steps++;
  else if (st->way == BYTIME_EAGER)
    bt->fig.eager_steps++;
  else if (st->way == BYTIME_EXACT)
    bt->fig.exact_steps++;
  return 0;
}

int bytime_end(struct bytime *bt, struct bytime_step *st, cgrt_mode mode) {
  if (!st->timed)
    return 0;
  struct series *s = st->series;
  /* A replay is kept only when the step's calls replayed (not a warm-up or a capture). */
  if (st->way != BYTIME_EAGER && mode != CGRT_MODE_REPLAY)
    return 0;
  double host_us = step_cost_host_us(bt->h, st->host_start_ns);
  size_t slot = (bt->head + bt->npending) % BYTIME_PENDING;
  /* Has the device begun the step? Said in the sample's debug line only (a host far ahead
     waits in its launches: step_cost.h). A failed read is not NOTREADY: "not behind"; the read
     of the pair in poll() meets the same failure and says the timing is lost. */
  double unused;
  void *start = bt->events[2 * slot];
  int behind = bt->h->event_elapsed(bt->h, start, start, &unused) == CGRT_E_NOTREADY;
  int rc = bt->h->event_record(bt->h, bt->events[2 * slot + 1], bt->h->stream(bt->h));
  if (rc != 0)
    return rc;
  bt->ring[slot] = (struct pending){
      start, bt->events[2 * slot + 1], s, st->b, st->rec, s->round, host_us, behind};
  bt->npending++;
  s->taken++;
  return 0;
}

int bytime_forget(struct bytime *bt) {
  int rc = 0;
  for (size_t i = 0; i < bt->nrecs; i++) {
    struct count_rec *r = bt->recs[i];
    if (r->inc == BYTIME_EXACT || r->exact_round) {
      int e = retire_exact(bt, r);
      if (rc == 0)
        rc = e;
    }
  }
  free_records(bt);
  bt->fig.eager_counts = bt->fig.exact_counts = 0;
  bt->npending = 0; /* their records are gone: the events are simply recorded again */
  bt->head = 0;
  return rc;
}
