/*
 * cp_time.c - dynamic_cp's cp sizes served by time (issue 42); the schedule and the rule are in
 * cp_time.h.
 *
 * Where the figures come from: a pair of timed events (host->event_create_timed) per timed pass
 * of a round, recorded on the runtime's stream before prepare and after the body, as local's
 * bytime does: the device time between them is what the step cost the stream in the host's own
 * pipeline. No pass waits for them; the round's decision waits once for its last event, then
 * reads them all (host->event_elapsed). Beside it, the host's time to issue the pass (host->now_ns
 * after the start event is recorded and before the end event is): a round's cost is the larger of
 * the two (backends/common/step_cost.h: the host's median with waits left out, the device's
 * median), as in local's bytime.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cp_time.h"
#include "noise_rule.h"
#include "step_cost.h"

#define TIMED (CP_TIME_ROUND - 1) /* timed passes of a round: all but the first eager one */

struct cp_time {
  const struct cgrt_host_api *h;
  int cp;
  int64_t start_round; /* the bank's pass where its first round starts */
  int64_t first_round; /* where the rounds' schedule starts now (later after an early round) */
  enum cp_way inc;     /* the incumbent: how the bank is served between rounds */
  struct cp_time_figures *fig;
  void *events[2 * TIMED]; /* created at the first timed pass */
  int have_events;
  int kept[TIMED]; /* the pass of that pair is a sample (a graph pass kept when it replayed) */
  uint64_t host_start[TIMED]; /* the host's clock when the pass's start event was recorded */
  double host_us[TIMED];      /* the host's time to issue the pass */
  int copies_seen;            /* a graph step of this round replayed on private copies */
  int left_out;               /* this round's graph steps left out for copies, on this rank */
  int keep_copies;            /* the group saw copies last round: this round keeps them */
};

static const char *const way_names[] = {"by its graphs", "eagerly"};

int cp_time_create(const struct cgrt_host_api *h, int cp, int64_t first_round,
                   struct cp_time_figures *fig, struct cp_time **out) {
  *out = NULL;
  if (!CGRT_HOST_HAS(h, event_create_timed) || !CGRT_HOST_HAS(h, event_elapsed) ||
      !CGRT_HOST_HAS(h, comm_max))
    return h->set_error(h, CGRT_E_UNSUPPORTED,
                        "[dynamic_cp] by_time = on needs a core of host API minor 9 or later "
                        "(device timing, and comm_max for the cp group to agree); this core is "
                        "minor %u: set by_time = off",
                        h->minor);
  struct cp_time *t = calloc(1, sizeof(*t));
  if (!t)
    return h->set_error(h, CGRT_E_NOMEM, "dynamic_cp: out of memory for by_time");
  t->h = h;
  t->cp = cp;
  t->start_round = t->first_round = first_round;
  t->inc = CP_GRAPHS;
  t->fig = fig;
  *out = t;
  return 0;
}

void cp_time_destroy(struct cp_time *t) {
  if (!t)
    return;
  for (int i = 0; i < 2 * TIMED; i++)
    if (t->events[i])
      t->h->event_destroy(t->h, t->events[i]);
  free(t);
}

void cp_time_reset(struct cp_time *t) {
  if (t->inc == CP_EAGER && t->fig->eager_sizes > 0)
    t->fig->eager_sizes--;
  t->inc = CP_GRAPHS;
  t->first_round = t->start_round;
  t->copies_seen = t->left_out = t->keep_copies = 0;
}

/* The pass's index in its round, or -1 between rounds: a function of the pass count alone. */
static int64_t round_index(const struct cp_time *t, int64_t pass) {
  if (pass < t->first_round)
    return -1;
  int64_t k = (pass - t->first_round) % (CP_TIME_ROUND + NOISE_RECHECK);
  return k < CP_TIME_ROUND ? k : -1;
}

static int ensure_events(struct cp_time *t) {
  for (int i = 0; !t->have_events && i < 2 * TIMED; i++) {
    int rc = t->h->event_create_timed(t->h, &t->events[i]);
    if (rc != 0)
      return rc;
  }
  t->have_events = 1;
  return 0;
}

int cp_time_begin(struct cp_time *t, int64_t pass, struct cp_time_step *st) {
  st->way = t->inc;
  st->slot = -1;
  st->pass = pass;
  int64_t k = round_index(t, pass);
  if (k >= 0) {
    st->way = k < CP_TIME_GRAPHS ? CP_GRAPHS : CP_EAGER;
    if (k != CP_TIME_GRAPHS) /* the round's first eager pass is run and not kept */
      st->slot = (int)(k < CP_TIME_GRAPHS ? k : k - 1);
  }
  if (st->way == CP_EAGER && t->inc == CP_GRAPHS)
    t->fig->probe_steps++;
  else if (st->way == CP_EAGER)
    t->fig->eager_steps++;
  else if (t->inc == CP_EAGER)
    t->fig->graph_probe_steps++;
  if (st->slot < 0)
    return 0;
  int rc = ensure_events(t);
  if (rc != 0)
    return rc;
  t->kept[st->slot] = 0;
  if ((rc = t->h->event_record(t->h, t->events[2 * st->slot], t->h->stream(t->h))) != 0)
    return rc;
  t->host_start[st->slot] = step_cost_now_ns(t->h); /* prepare and body are issued from here */
  return 0;
}

/* The figures of the round's kept samples of each way (us -1 for a way without any). */
static void round_medians(struct cp_time *t, struct step_cost med[2]) {
  const struct cgrt_host_api *h = t->h;
  struct step_sample v[2][CP_TIME_EAGER];
  int n[2] = {0, 0};
  for (int slot = 0; slot < TIMED; slot++) {
    if (!t->kept[slot])
      continue;
    enum cp_way w = slot < CP_TIME_GRAPHS ? CP_GRAPHS : CP_EAGER;
    double us = 0;
    if (h->event_elapsed(h, t->events[2 * slot], t->events[2 * slot + 1], &us) != 0) {
      h->log(h, CGRT_LOG_DEBUG, "dynamic_cp by_time: a step's timing at cp %d is lost (%s)", t->cp,
             h->last_error(h));
      continue;
    }
    t->fig->timed_steps++;
    v[w][n[w]++] = (struct step_sample){t->host_us[slot], us, 0};
  }
  for (int w = 0; w < 2; w++)
    med[w] = n[w] > 0 ? step_cost_medians(v[w], n[w]) : (struct step_cost){-1, -1, -1, 0, 0};
}

/*
 * After the group agreed whether a rank saw graph steps on copies this round (seen): the next
 * round comes early when steps were left out for them, and keeps them; the number of passes to
 * it. The same on every rank: it depends on the group's values and the pass count only.
 */
static int copies_next(struct cp_time *t, int64_t pass, int seen) {
  const int early = seen && !t->keep_copies; /* some rank left steps out: keep_copies agreed */
  t->keep_copies = seen;
  t->copies_seen = t->left_out = 0;
  if (!early)
    return NOISE_RECHECK;
  t->first_round = pass + 1 + CP_TIME_EARLY;
  t->fig->copied_rechecks++;
  return CP_TIME_EARLY;
}

/* The end of a round: this rank's medians, the group's maxima, the rule, said once. */
static int decide(struct cp_time *t, int64_t pass, void *comm) {
  const struct cgrt_host_api *h = t->h;
  int rc = h->event_sync(h, t->events[2 * TIMED - 1]); /* once per round */
  if (rc != 0)
    return rc;
  struct step_cost own[2];
  double group[3];
  round_medians(t, own);
  group[0] = own[0].us;
  group[1] = own[1].us;
  group[2] = t->copies_seen ? 1 : 0;
  const int left_out = t->left_out;
  if ((rc = h->comm_max(h, comm, group, 3)) != 0)
    return rc;
  const int next = copies_next(t, pass, group[2] > 0);
  char copies[160] = "";
  if (next != NOISE_RECHECK)
    snprintf(copies, sizeof(copies),
             "; graph steps that replayed on private copies (moved buffers) were left out in "
             "the group, %d of them on this rank",
             left_out);
  t->fig->rounds++;
  enum cp_way was = t->inc, to = was;
  if (group[CP_GRAPHS] >= 0 && group[CP_EAGER] >= 0) {
    if (was == CP_GRAPHS && noise_challenger_wins(group[CP_EAGER], group[CP_GRAPHS]))
      to = CP_EAGER;
    else if (was == CP_EAGER && noise_challenger_wins(group[CP_GRAPHS], group[CP_EAGER]))
      to = CP_GRAPHS;
  } else {
    h->log(h, CGRT_LOG_INFO,
           "dynamic_cp by_time: cp %d still served %s: no rank of its group kept a device time "
           "of its %s steps this round (a graph step counts only when it replayed, and in place "
           "unless copies were seen the round before)%s; measured again in %d steps",
           t->cp, way_names[was], group[CP_GRAPHS] >= 0 ? "eager" : "graph", copies, next);
    return 0;
  }
  if (to == CP_EAGER)
    t->fig->eager_sizes++;
  else if (was == CP_EAGER && t->fig->eager_sizes > 0)
    t->fig->eager_sizes--;
  t->inc = to;
  char what[96], figures[192] = "";
  int len = 0;
  step_cost_say(figures, sizeof(figures), &len, "graphs", own[CP_GRAPHS]);
  step_cost_say(figures, sizeof(figures), &len, "eager", own[CP_EAGER]);
  if (to != was)
    snprintf(what, sizeof(what), "served %s from now on, not %s", way_names[to], way_names[was]);
  else
    snprintf(what, sizeof(what), "still served %s", way_names[to]);
  h->log(h, CGRT_LOG_INFO,
         "dynamic_cp by_time: cp %d %s (time per step, " STEP_COST_SAYS
         ", of %d steps: %s on this rank; the group's slowest rank: graphs %.1f us, eager %.1f us; "
         "the other way must be faster by more than %.0f%%%s; measured again in %d steps; "
         "[dynamic_cp] by_time = off keeps graphs)",
         t->cp, what, CP_TIME_GRAPHS, figures, group[CP_GRAPHS], group[CP_EAGER],
         NOISE_MARGIN * 100, copies, next);
  return 0;
}

int cp_time_end(struct cp_time *t, const struct cp_time_step *st, cgrt_mode mode, int copied,
                void *comm) {
  if (st->slot < 0)
    return 0;
  const struct cgrt_host_api *h = t->h;
  t->host_us[st->slot] = step_cost_host_us(h, t->host_start[st->slot]);
  int rc = h->event_record(h, t->events[2 * st->slot + 1], h->stream(h));
  if (rc != 0)
    return rc;
  /* A graph pass is a sample only when it replayed (not a capture, a fallback or a rebind), and
     in place, unless the group saw copies the round before (cp_time.h). */
  int kept = st->way == CP_EAGER || mode == CGRT_MODE_REPLAY;
  if (kept && st->way == CP_GRAPHS && copied) {
    t->copies_seen = 1;
    if (!t->keep_copies) {
      kept = 0;
      t->left_out++;
      t->fig->copied_samples++;
    }
  }
  t->kept[st->slot] = kept;
  return st->slot == TIMED - 1 ? decide(t, st->pass, comm) : 0;
}
