/*
 * bytime.c - local's inference buckets chosen by time (issue 43); the rule is in bytime.h.
 *
 * Where the figures come from: two timed events (host->event_create_timed) recorded on the
 * runtime's stream before and after a step, read with host->event_elapsed at a later step, when
 * both records have run (never a wait: a timing whose events are not done stays pending, and at
 * most BYTIME_PENDING are). The device time between them is what the step cost the stream in the
 * host's own pipeline: for a step bound by its launches, the launches; for one bound by its work,
 * the work. Eager steps are timed the same way, back to back with the host's other steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytime.h"

/* One token count followed. Allocated once, never moved: pending timings point at it. */
struct count_rec {
  int64_t tokens, bucket;
  enum bytime_way inc;     /* the incumbent: how the count is served between rounds */
  int in_round;            /* measuring */
  enum bytime_way ways[2]; /* the round's ways: [0] the one to beat, [1] the challenger */
  uint32_t round;          /* bumped at every round and reset: late samples are dropped */
  int eager_skip;          /* the round's first eager step is run but not kept */
  int taken[3];            /* timed steps queued this round, per way */
  int n[3];                /* samples read this round, per way */
  double us[3][BYTIME_SAMPLES];
  double median[3]; /* of the last complete samples, per way (0: none) */
  uint64_t served;  /* steps served by the incumbent since the last round */
};

struct pending {
  void *start, *end;
  struct count_rec *rec;
  uint32_t round;
  enum bytime_way way;
};

struct bytime {
  const struct cgrt_host_api *h;
  struct cgrt_graph_cache *cache;
  int max_exact;
  struct count_rec **recs; /* ascending by tokens */
  size_t nrecs;
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

void bytime_destroy(struct bytime *bt) {
  if (!bt)
    return;
  for (size_t i = 0; i < 2 * BYTIME_PENDING; i++)
    if (bt->events[i])
      bt->h->event_destroy(bt->h, bt->events[i]);
  for (size_t i = 0; i < bt->nrecs; i++)
    free(bt->recs[i]);
  free(bt->recs);
  free(bt);
}

void bytime_figures(const struct bytime *bt, struct bytime_figures *out) {
  *out = bt->fig;
}

/* ---------------------------------------------------------------- records */

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

static void start_round(struct count_rec *r, enum bytime_way challenger) {
  r->in_round = 1;
  r->ways[0] = r->inc;
  r->ways[1] = challenger;
  r->round++;
  r->eager_skip = 1;
  memset(r->taken, 0, sizeof(r->taken));
  memset(r->n, 0, sizeof(r->n));
  r->served = 0;
}

/* A fresh record: the padded bucket serves it, and a first round measures it against eager. */
static void rec_reset(struct count_rec *r, int64_t bucket) {
  r->bucket = bucket;
  r->inc = BYTIME_BUCKET;
  memset(r->median, 0, sizeof(r->median));
  start_round(r, BYTIME_EAGER);
}

static struct count_rec *rec_of(struct bytime *bt, int64_t tokens, int64_t bucket) {
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
  rec_reset(r, bucket);
  return r;
}

/* ---------------------------------------------------------------- decisions */

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

static void report_cost(struct bytime *bt, const struct count_rec *r, enum bytime_way w) {
  const struct cgrt_host_api *h = bt->h;
  if (!CGRT_HOST_HAS(h, buckets_cost) || r->median[w] <= 0)
    return;
  int64_t bucket = w == BYTIME_BUCKET ? r->bucket : w == BYTIME_EXACT ? r->tokens : 0;
  (void)h->buckets_cost(h, r->tokens, bucket, r->median[w]);
}

static void switch_to(struct bytime *bt, struct count_rec *r, enum bytime_way to) {
  const struct cgrt_host_api *h = bt->h;
  enum bytime_way from = r->inc;
  if (from == BYTIME_EAGER && bt->fig.eager_counts > 0)
    bt->fig.eager_counts--;
  if (to == BYTIME_EAGER)
    bt->fig.eager_counts++;
  r->inc = to;
  char figures[256];
  int n = 0;
  for (int w = 0; w < 3; w++)
    if (r->median[w] > 0)
      n += snprintf(figures + n, sizeof(figures) - (size_t)n, "%s%s %.1f us", n ? ", " : "",
                    w == BYTIME_BUCKET ? "replayed at its bucket" : way_names[w], r->median[w]);
  h->log(h, CGRT_LOG_INFO,
         "local by_time: %lld tokens (bucket %lld) served %s from now on, not %s (device time per "
         "step, medians of %d: %s; [local] by_time = off keeps the padded bucket)",
         (long long)r->tokens, (long long)r->bucket, way_names[to], way_names[from], BYTIME_SAMPLES,
         figures);
}

/* Every way of the round has its samples: the noise rule decides (bytime.h). */
static int decide(struct bytime *bt, struct count_rec *r) {
  for (int i = 0; i < 2; i++) {
    enum bytime_way w = r->ways[i];
    r->median[w] = noise_median(r->us[w], r->n[w]);
    report_cost(bt, r, w);
  }
  /* inc: the way the challenger must beat (in a second stage, eager, which beat the bucket) */
  enum bytime_way inc = r->ways[0], ch = r->ways[1];
  r->in_round = 0;
  r->served = 0;
  int rc = 0;
  if (!noise_challenger_wins(r->median[ch], r->median[inc])) {
    /* The incumbent stays. An exact-size bucket that did not beat eager is given back, and
       eager, which beat the padded bucket, serves the count. */
    if (ch == BYTIME_EXACT) {
      rc = retire_exact(bt, r);
      switch_to(bt, r, BYTIME_EAGER);
    }
    return rc;
  }
  /* The challenger is faster by more than the margin. */
  if (ch == BYTIME_EAGER && inc == BYTIME_BUCKET && exact_allowed(bt)) {
    /* Eager beats the padded replay; an exact-size bucket may beat both: measure it against
       eager's samples (kept), serving it from now on while it is measured. */
    bt->fig.exact_counts++;
    r->in_round = 1;
    r->round++;
    r->ways[0] = BYTIME_EAGER;
    r->ways[1] = BYTIME_EXACT;
    r->taken[BYTIME_EXACT] = r->n[BYTIME_EXACT] = 0;
    return 0;
  }
  if (inc == BYTIME_EXACT)
    rc = retire_exact(bt, r);
  switch_to(bt, r, ch);
  return rc;
}

/* ---------------------------------------------------------------- timing */

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
    struct count_rec *r = p->rec;
    if (!r->in_round || p->round != r->round || r->n[p->way] >= BYTIME_SAMPLES)
      continue; /* a round that ended or was reset since */
    r->us[p->way][r->n[p->way]++] = us;
    int done = 1;
    for (int i = 0; i < 2; i++)
      done = done && r->n[r->ways[i]] >= BYTIME_SAMPLES;
    if (done && (rc = decide(bt, r)) != 0)
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

int bytime_choose(struct bytime *bt, int64_t tokens, int64_t bucket, struct bytime_step *st) {
  memset(st, 0, sizeof(*st));
  st->tokens = tokens;
  st->bucket = bucket;
  st->way = BYTIME_BUCKET;
  int rc = poll(bt);
  if (rc != 0)
    return rc;
  struct count_rec *r = rec_of(bt, tokens, bucket);
  if (!r)
    return 0; /* too many counts followed: this one keeps its bucket */
  st->rec = r;
  if (r->bucket != bucket) { /* its bucket changed under it: measure it afresh */
    if (r->inc == BYTIME_EXACT || (r->in_round && r->ways[1] == BYTIME_EXACT))
      if ((rc = retire_exact(bt, r)) != 0)
        return rc;
    if (r->inc == BYTIME_EAGER && bt->fig.eager_counts > 0)
      bt->fig.eager_counts--;
    rec_reset(r, bucket);
  }
  if (!r->in_round && ++r->served >= BYTIME_RECHECK)
    start_round(r, r->inc == BYTIME_BUCKET  ? BYTIME_EAGER
                   : r->inc == BYTIME_EXACT ? BYTIME_EAGER
                                            : BYTIME_BUCKET);
  st->way = r->inc;
  if (r->in_round) {
    /* the first way of the round still short of timed steps */
    for (int i = 0; i < 2; i++) {
      enum bytime_way w = r->ways[i];
      if (r->taken[w] < BYTIME_SAMPLES) {
        st->way = w;
        st->timed = 1;
        break;
      }
    }
    if (st->timed && st->way == BYTIME_EAGER && r->eager_skip) {
      r->eager_skip = 0; /* run, not kept: a new row count's first eager run */
      st->timed = 0;
    }
    st->probe = st->way == BYTIME_EAGER && r->inc != BYTIME_EAGER;
  }
  if (st->timed && bt->npending == BYTIME_PENDING)
    st->timed = 0; /* every pair still in flight: this step goes untimed */
  if (st->timed) {
    if ((rc = ensure_events(bt)) != 0)
      return rc;
    size_t slot = (bt->head + bt->npending) % BYTIME_PENDING;
    if ((rc = bt->h->event_record(bt->h, bt->events[2 * slot], bt->h->stream(bt->h))) != 0)
      return rc;
  }
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
  struct count_rec *r = st->rec;
  /* A replay is kept only when the step's calls replayed (not a warm-up or a capture). */
  if (st->way != BYTIME_EAGER && mode != CGRT_MODE_REPLAY)
    return 0;
  size_t slot = (bt->head + bt->npending) % BYTIME_PENDING;
  int rc = bt->h->event_record(bt->h, bt->events[2 * slot + 1], bt->h->stream(bt->h));
  if (rc != 0)
    return rc;
  bt->ring[slot] =
      (struct pending){bt->events[2 * slot], bt->events[2 * slot + 1], r, r->round, st->way};
  bt->npending++;
  r->taken[st->way]++;
  return 0;
}

int bytime_forget(struct bytime *bt) {
  int rc = 0;
  for (size_t i = 0; i < bt->nrecs; i++) {
    struct count_rec *r = bt->recs[i];
    if (r->inc == BYTIME_EXACT || (r->in_round && r->ways[1] == BYTIME_EXACT)) {
      int e = retire_exact(bt, r);
      if (rc == 0)
        rc = e;
    }
    free(r);
  }
  bt->nrecs = 0;
  bt->fig.eager_counts = bt->fig.exact_counts = 0;
  bt->npending = 0; /* their records are gone: the events are simply recorded again */
  bt->head = 0;
  return rc;
}
