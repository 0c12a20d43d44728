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

#include "bytime_impl.h"

const char *const bytime_way_names[3] = {"replayed at its bucket", "eagerly",
                                         "at an exact-size bucket"};

int bytime_create(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache, int max_exact,
                  int max_queued, struct bytime **out) {
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
  bt->max_queued = max_queued;
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

/*
 * The round's figures (step_cost.h); the samples it left out of the host's figure as waits (more
 * than twice the host's lower quartile: a host far ahead waiting in its launches, or a prepare or
 * body that synchronizes) are counted once in fig.waited_samples.
 */
struct step_cost bytime_series_cost(struct bytime *bt, struct series *s) {
  s->median = step_cost_medians(s->v, s->n);
  if (!s->counted) {
    s->counted = 1;
    bt->fig.waited_samples += (uint64_t)s->median.waits;
  }
  return s->median;
}

/* The first record of tokens >= `tokens` (its index in *at). */
struct count_rec *bytime_find(struct bytime *bt, int64_t tokens, size_t *at) {
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
  struct count_rec *r = bytime_find(bt, tokens, &at);
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

/* ---------------------------------------------------------------- timing */

/* Which way a pending timing measures, for the debug line of its sample. */
static const char *sample_way(const struct pending *p) {
  if (p->s == &p->b->replay)
    return "replayed at its bucket";
  if (p->s == &p->b->pool)
    return "eagerly (pooled)";
  if (p->s == &p->b->watch)
    return "eagerly as served (watched)";
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
    s->v[s->n++] = (struct step_sample){p->host_us, us, p->behind};
    s->copied += p->copied;
    h->log(h, CGRT_LOG_DEBUG,
           "local by_time: %lld tokens (bucket %lld), a sample %s: host %.1f us, "
           "device %.1f us%s%s",
           (long long)p->r->tokens, (long long)p->b->bucket, sample_way(p), p->host_us, us,
           p->behind ? ", the device behind" : "", p->copied ? ", with private copies" : "");
    if ((rc = bytime_settle(bt, p->b, p->r)) != 0)
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

/* A step of r served eagerly by a decision: one in BYTIME_WATCH_EVERY of the bucket's is timed
   for its watch (bytime.h), every one in a bucket the device-bound rule sent eager, while no probe
   of the bucket runs and its replay has a median. */
static void watch_eager(struct bucket_rec *b, struct count_rec *r, struct bytime_step *st) {
  if (r->inc != BYTIME_EAGER || r->decided == UNDECIDED || b->replay.median.us <= 0 || b->probing ||
      b->pivot || ++b->watch_since < (b->bound_on ? 1 : BYTIME_WATCH_EVERY))
    return;
  if (!b->watch.active)
    series_start(&b->watch, 0);
  if (!series_wants(&b->watch))
    return; /* its last samples are still being read */
  b->watch_since = 0;
  measure(st, BYTIME_EAGER, &b->watch);
  st->watched = 1;
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
      r->seen >= BYTIME_MIN_SEEN && bytime_target(bt, b) == r) {
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
    bytime_pool_start(bt, b);
  if (b->pivot && series_wants(&b->pool)) {
    if (bytime_pool_side_has(b, r)) { /* eager at r bounds eager at the pivot: a pooled sample */
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
  if (series_wants(&b->replay) && r->inc != BYTIME_EXACT) {
    if (r->inc == BYTIME_BUCKET) {
      measure(st, BYTIME_BUCKET, &b->replay);
      return;
    }
    if ((b->probing && !series_wants(&b->probing->eager)) ||
        (b->pivot && !series_wants(&b->pool))) {
      /* the probe waits for the replay and this count runs eagerly: a graph probe */
      measure(st, BYTIME_BUCKET, &b->replay);
      st->graph_probe = 1;
      return;
    }
  }
  watch_eager(b, r, st);
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
      if ((rc = bytime_retire_exact(bt, r)) != 0)
        return rc;
    if (r->b->probing == r)
      r->b->probing = NULL;
    bytime_switch_to(bt, r, BYTIME_BUCKET, 0);
    r->b = b;
    r->decided = UNDECIDED;
    r->exact_checked = r->exact_round = r->contested = r->retried = 0;
    r->eager.active = r->exact.active = 0;
  }
  st->rec = r;
  st->b = b;
  r->seen++;
  bytime_bound(bt, b);
  if (++b->since >= BYTIME_RECHECK * (b->rounds ? b->rounds : 1) && !b->probing && !b->pivot)
    bytime_recheck(bt, b);
  else if (b->copied == 1 && ++b->copied_since >= BYTIME_COPIED_RECHECK && !b->probing && !b->pivot)
    bytime_recheck_copied(bt, b);
  (void)bytime_imply(bt, r);
  if (r->decided == UNDECIDED && r->inc != BYTIME_EXACT && !r->exact_round)
    bytime_pool_follow(b, tokens);
  if ((r->inc == BYTIME_EAGER || r->contested) && !r->exact_checked && r->seen == BYTIME_EXACT_SEEN)
    bytime_consider_exact(bt, r);
  choose_way(bt, b, r, st);
  if (st->timed && bt->npending == BYTIME_PENDING) {
    /* Every pair still in flight (the device far behind a host that does not wait): a measuring
       step that cannot be timed would measure nothing, so it is served the count's own way, not
       run eagerly (or at its bucket) for a sample it cannot give. */
    st->timed = 0;
    st->series = NULL;
    st->probe = st->graph_probe = st->pooled = st->watched = 0;
    st->way = r->inc;
    bt->fig.untimed_steps++;
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
  if (st->watched)
    bt->fig.watched_steps++;
  if (st->probe)
    bt->fig.probe_steps++;
  else if (st->way == BYTIME_EAGER)
    bt->fig.eager_steps++;
  else if (st->way == BYTIME_EXACT)
    bt->fig.exact_steps++;
  return 0;
}

int bytime_end(struct bytime *bt, struct bytime_step *st, cgrt_mode mode, int copied) {
  if (!st->timed)
    return 0;
  struct series *s = st->series;
  /* A replay is kept only when the step's calls replayed (not a warm-up or a capture). */
  if (st->way != BYTIME_EAGER && mode != CGRT_MODE_REPLAY)
    return 0;
  /* nor, for a while, when they replayed on private copies that may yet stop (bytime.h) */
  if (copied && s->copied_out < BYTIME_COPIED_WAIT) {
    s->copied_out++;
    bt->fig.copied_samples++;
    return 0;
  }
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
      start, bt->events[2 * slot + 1], s, st->b, st->rec, s->round, host_us, copied, behind};
  bt->npending++;
  s->taken++;
  return 0;
}

int bytime_forget(struct bytime *bt) {
  int rc = 0;
  for (size_t i = 0; i < bt->nrecs; i++) {
    struct count_rec *r = bt->recs[i];
    if (r->inc == BYTIME_EXACT || r->exact_round) {
      int e = bytime_retire_exact(bt, r);
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
