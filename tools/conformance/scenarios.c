/*
 * scenarios.c - the fixed scenarios of `cgrt test-backend` and what each expects of a backend.
 *
 * A scenario makes steps on a fresh runtime of the tested configuration and checks what they did
 * by what cgrt_backend_info_get says the phase gets: a phase run with graphs warms up for
 * warmup_steps steps, captures, and replays from then on (whatever the backend's keys and units);
 * a phase run eagerly, by the backend or by cgrt, never captures. Whatever it expects of the
 * modes, every scenario's outputs are then compared with `impl = none` (run.c), step by step.
 * A scenario returns 0, or -1 with the reason in why.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

#define FAIL(...) (snprintf(why, len, __VA_ARGS__), -1)

static int graphs(const struct conform_run *t, cgrt_phase p) {
  return t->cfg->info.phases[p] == CGRT_RUN_GRAPHS;
}

static const char *form(const struct conform_run *t, cgrt_phase p) {
  static const char *const forms[] = {"eagerly by the backend", "with graphs",
                                      "eagerly by cgrt (no form of the backend's)"};
  return (unsigned)t->cfg->info.phases[p] < 3 ? forms[t->cfg->info.phases[p]] : "?";
}

/* count steps of one kind; each must succeed and run at least its tokens. */
static int steps(struct conform_run *t, cgrt_phase p, int64_t tokens, int set, int count, char *why,
                 size_t len) {
  for (int c = 0; c < count; c++) {
    int rc = conform_step(t, p, tokens, set);
    const struct conform_op *op = &t->ops[t->num_ops - 1];
    if (rc != 0)
      return FAIL("step %zu (%s, %" PRId64 " tokens) returned %d (%s): %s", t->num_ops - 1,
                  cgrt_phase_name(p), tokens, rc, cgrt_strerror(rc), cgrt_last_error(t->rt));
    if (op->rep.padded_tokens < tokens)
      return FAIL("step %zu (%s, %" PRId64 " tokens) ran padded to %" PRId64
                  ", fewer than its tokens",
                  t->num_ops - 1, cgrt_phase_name(p), tokens, op->rep.padded_tokens);
  }
  return 0;
}

#define STEPS(p, tokens, set, count)                                                               \
  do {                                                                                             \
    if (steps(t, p, tokens, set, count, why, len) != 0)                                            \
      return -1;                                                                                   \
  } while (0)

/*
 * At least `count` steps; then, in a phase with graphs, more until two replay in a row, at most
 * 8 x (warmup_steps + 1) more: a backend whose keys warm up one after the other (a THD slot
 * each, a bucket each) gets the steps it needs, and the reference replays as many.
 */
static int steps_to_replay(struct conform_run *t, cgrt_phase p, int64_t tokens, int set, int count,
                           char *why, size_t len) {
  if (steps(t, p, tokens, set, count, why, len) != 0)
    return -1;
  int more = 8 * (t->cfg->warmup + 1);
  while (graphs(t, p) && more-- > 0 &&
         (t->ops[t->num_ops - 1].rep.mode != CGRT_MODE_REPLAY ||
          t->ops[t->num_ops - 2].rep.mode != CGRT_MODE_REPLAY))
    if (steps(t, p, tokens, set, 1, why, len) != 0)
      return -1;
  return 0;
}

#define STEPS_TO_REPLAY(p, tokens, set, count)                                                     \
  do {                                                                                             \
    if (steps_to_replay(t, p, tokens, set, count, why, len) != 0)                                  \
      return -1;                                                                                   \
  } while (0)

/*
 * The modes of steps from..to, all of one phase. fresh: the first steps of their keys (the
 * backend has no graph for them): the first warmup_steps run eagerly, one captures, and none
 * replays before a capture. In a phase with graphs the last `tail` steps replay and none falls
 * back; in an eager phase none captures.
 */
static int expect_tail(struct conform_run *t, size_t from, size_t to, int fresh, size_t tail,
                       const char *what, char *why, size_t len) {
  char modes[512];
  conform_modes(t, from, to, modes, sizeof(modes));
  cgrt_phase p = t->ops[from].phase;
  size_t W = (size_t)t->cfg->warmup;
  if (!graphs(t, p)) {
    for (size_t i = from; i < to; i++)
      if (t->ops[i].rep.mode != CGRT_MODE_EAGER || t->ops[i].rep.graphs_built != 0)
        return FAIL("%s ran %s (E eager, W warm-up, C capture, R replay): the backend runs %s "
                    "steps %s, so every step must run eagerly and build no graph",
                    what, modes, cgrt_phase_name(p), form(t, p));
    return 0;
  }
  long capture = -1;
  for (size_t i = from; i < to; i++) {
    const cgrt_step_report *rep = &t->ops[i].rep;
    if (rep->fallbacks != 0)
      return FAIL("%s ran %s: step %zu fell back to eager work: %s", what, modes, i, t->log);
    if (fresh && i - from < W && rep->mode != CGRT_MODE_EAGER && rep->mode != CGRT_MODE_WARMUP)
      return FAIL("%s ran %s (E eager, W warm-up, C capture, R replay): the first %zu steps "
                  "(warmup_steps) must run eagerly",
                  what, modes, W);
    /* A step that built graphs captured, whatever mode it reports for its own body (local's
       capture = eager builds every bucket's graph, then replays the step's own). */
    if ((rep->mode == CGRT_MODE_CAPTURE || rep->graphs_built > 0) && capture < 0)
      capture = (long)i;
    if (fresh && rep->mode == CGRT_MODE_REPLAY && capture < 0)
      return FAIL("%s ran %s (E eager, W warm-up, C capture, R replay): step %zu replayed "
                  "before any capture",
                  what, modes, i);
  }
  if (fresh && capture < 0)
    return FAIL("%s ran %s (E eager, W warm-up, C capture, R replay): the backend runs %s steps "
                "with graphs, but none was captured",
                what, modes, cgrt_phase_name(p));
  for (size_t i = to - tail; i < to; i++)
    if (t->ops[i].rep.mode != CGRT_MODE_REPLAY) {
      /* A bound that evicts every graph before its replay is the configuration's doing. */
      cgrt_stats s = {.struct_size = sizeof(s)};
      char bound[160] = "";
      if (cgrt_stats_get(t->rt, &s) == 0 && s.evictions + s.budget_eager > 0)
        snprintf(bound, sizeof(bound),
                 " (%" PRIu64 " executables evicted, %" PRIu64
                 " runs eager for the memory budget: max_graphs or memory_budget leaves no room)",
                 s.evictions, s.budget_eager);
      return FAIL("%s ran %s (E eager, W warm-up, C capture, R replay): the backend runs %s "
                  "steps with graphs, so the last %s must replay%s",
                  what, modes, cgrt_phase_name(p), tail == 2 ? "two" : "one", bound);
    }
  return 0;
}

/* expect_tail, the segment ending in two replays (fresh and long enough) or one. */
static int expect(struct conform_run *t, size_t from, size_t to, int fresh, const char *what,
                  char *why, size_t len) {
  size_t tail = fresh && to - from >= (size_t)t->cfg->warmup + 3 ? 2 : 1;
  return expect_tail(t, from, to, fresh, tail, what, why, len);
}

#define EXPECT(from, fresh, ...)                                                                   \
  do {                                                                                             \
    char what_[96];                                                                                \
    snprintf(what_, sizeof(what_), __VA_ARGS__);                                                   \
    if (expect(t, from, t->num_ops, fresh, what_, why, len) != 0)                                  \
      return -1;                                                                                   \
  } while (0)

static int stats(struct conform_run *t, cgrt_stats *s, char *why, size_t len) {
  *s = (cgrt_stats){.struct_size = sizeof(*s)};
  int rc = cgrt_stats_get(t->rt, s);
  return rc == 0 ? 0 : FAIL("cgrt_stats_get returned %d: %s", rc, cgrt_last_error(t->rt));
}

/* ---------------------------------------------------------------- training and evaluation */

static int train(struct conform_run *t, char *why, size_t len) {
  int W = t->cfg->warmup;
  int64_t T = t->cfg->train_tokens, T2 = t->cfg->reshaped;
  size_t a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, W + 4);
  EXPECT(a, 1, "train steps at %" PRId64 " tokens", T);
  /* Another shape: its own graphs (or the padded one's), never the first shape's replayed. */
  a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T2, 0, W + 3);
  EXPECT(a, 0, "train steps at %" PRId64 " tokens, after %" PRId64, T2, T);
  a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, 2);
  EXPECT(a, 0, "train steps back at %" PRId64 " tokens", T);
  return 0;
}

static int eval(struct conform_run *t, char *why, size_t len) {
  int W = t->cfg->warmup;
  int64_t T = t->cfg->train_tokens;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, W + 3);
  /* Graphs are never shared between phases: an eval step replaying a train graph would run
     the backward and change the weights. */
  size_t a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_EVAL, T, 0, W + 4);
  EXPECT(a, 1, "eval steps after training");
  a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, 2);
  EXPECT(a, 0, "train steps after eval");
  return 0;
}

/* ---------------------------------------------------------------- inference */

static int64_t bucket_for(const struct conform_config *c, int64_t tokens) {
  for (size_t i = 0; i < c->num_buckets; i++)
    if (c->buckets[i] >= tokens)
      return c->buckets[i];
  return -1;
}

static int infer(struct conform_run *t, char *why, size_t len) {
  const struct conform_config *c = t->cfg;
  int W = c->warmup;
  int pads = (c->info.caps & CGRT_BACKEND_BUCKETS) && !c->adaptive;
  int g = graphs(t, CGRT_PHASE_INFER);
  size_t first = t->num_ops;
  for (size_t b = 0; b < c->num_buckets; b++) {
    int64_t size = c->buckets[b];
    size_t a = t->num_ops;
    STEPS_TO_REPLAY(CGRT_PHASE_INFER, size, 0, W + 2);
    EXPECT(a, 0, "infer steps at the %" PRId64 "-token bucket", size);
    for (size_t i = a; pads && i < t->num_ops; i++)
      if (t->ops[i].rep.padded_tokens != size)
        return FAIL("an infer step of %" PRId64 " tokens, a bucket, ran padded to %" PRId64, size,
                    t->ops[i].rep.padded_tokens);
    /* A step between two buckets runs padded to the larger one, its graph replayed. */
    int64_t below = b > 0 ? c->buckets[b - 1] : 0;
    if (below + 1 < size) {
      int64_t tokens = below + 1 + (size - below - 1) / 2;
      STEPS(CGRT_PHASE_INFER, tokens, 0, 1);
      const cgrt_step_report *rep = &t->ops[t->num_ops - 1].rep;
      if (pads && rep->padded_tokens != bucket_for(c, tokens))
        return FAIL("an infer step of %" PRId64 " tokens ran padded to %" PRId64
                    ", not to its bucket %" PRId64,
                    tokens, rep->padded_tokens, bucket_for(c, tokens));
      if (pads && g && rep->mode != CGRT_MODE_REPLAY)
        return FAIL("an infer step of %" PRId64 " tokens ran %s, not as a replay of the %" PRId64
                    "-token bucket's graph",
                    tokens, cgrt_mode_name(rep->mode), size);
    }
  }
  /* Over all buckets: warmed up first, then captured before any replay. */
  if (g && expect_tail(t, first, t->num_ops, 1, 0, "infer steps", why, len) != 0)
    return -1;
  /* Above the largest bucket: eagerly, at the step's own size. */
  int64_t largest = c->num_buckets ? c->buckets[c->num_buckets - 1] : c->train_tokens;
  size_t a = t->num_ops;
  STEPS(CGRT_PHASE_INFER, largest + 1, 0, 2);
  STEPS(CGRT_PHASE_INFER, largest + 17, 0, 1);
  for (size_t i = a; pads && i < t->num_ops; i++) {
    const struct conform_op *op = &t->ops[i];
    if (op->rep.mode != CGRT_MODE_EAGER || op->rep.padded_tokens != op->tokens)
      return FAIL("an infer step of %" PRId64 " tokens, above the largest bucket (%" PRId64
                  "), ran %s padded to %" PRId64 ": it must run eagerly at its own size",
                  op->tokens, largest, cgrt_mode_name(op->rep.mode), op->rep.padded_tokens);
  }
  return g ? 0 : expect(t, first, t->num_ops, 0, "infer steps", why, len);
}

/* ---------------------------------------------------------------- moved buffers */

static int moves(struct conform_run *t, const int *places, size_t n, const char *policy, char *why,
                 size_t len) {
  int W = t->cfg->warmup;
  int64_t T = t->cfg->train_tokens;
  size_t a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, W + 3);
  EXPECT(a, 1, "train steps before the buffers move");
  for (size_t i = 0; i < n; i++)
    if (steps(t, CGRT_PHASE_TRAIN, T, places[i], 1, why, len) != 0) {
      size_t used = strlen(why);
      snprintf(why + used, len - used, " (rebind = %s, buffers moved to place %d)", policy,
               places[i]);
      return -1;
    }
  a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, 2);
  EXPECT(a, 0, "train steps back in place after the moves (rebind = %s)", policy);
  return 0;
}

static int rebind_update(struct conform_run *t, char *why, size_t len) {
  static const int places[] = {1, 1, 0, 0, 2, 0, 3, 3, 0};
  return moves(t, places, sizeof(places) / sizeof(places[0]), "update", why, len);
}

static int rebind_copy(struct conform_run *t, char *why, size_t len) {
  static const int places[] = {1, 1, 0, 0, 2, 0, 3, 3, 0};
  return moves(t, places, sizeof(places) / sizeof(places[0]), "copy", why, len);
}

static int rebind_recapture(struct conform_run *t, char *why, size_t len) {
  static const int places[] = {1, 1, 0, 0, 2, 0, 1, 1, 0};
  return moves(t, places, sizeof(places) / sizeof(places[0]), "recapture", why, len);
}

/* auto: moves now and then (update), two places in turn (a graph per place), then, on the host
   driver, a new place every step (private copies, which host functions cannot address in device
   memory on the cuda driver). */
static int rebind_auto(struct conform_run *t, char *why, size_t len) {
  static const int places[] = {1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 2, 3, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7};
  size_t n = sizeof(places) / sizeof(places[0]);
  if (t->cfg->driver != CGRT_DRIVER_HOST)
    n = 11;
  return moves(t, places, n, "auto", why, len);
}

static int rebind_error(struct conform_run *t, char *why, size_t len) {
  int W = t->cfg->warmup;
  int64_t T = t->cfg->train_tokens;
  size_t a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, W + 3);
  EXPECT(a, 1, "train steps before the buffers move");
  int rc = conform_step(t, CGRT_PHASE_TRAIN, T, 1);
  const char *err = cgrt_last_error(t->rt);
  if (graphs(t, CGRT_PHASE_TRAIN)) {
    if (rc != CGRT_E_REBIND)
      return FAIL("a train step whose buffers moved after their capture returned %d (%s), not "
                  "CGRT_E_REBIND (rebind = error refuses to replay stale addresses)",
                  rc, rc ? cgrt_last_error(t->rt) : "success");
    if (!strstr(err, "conform."))
      return FAIL("the refusal does not name the buffer that moved: \"%s\"", err);
  } else if (rc != 0) {
    return FAIL("a train step run %s with its buffers moved returned %d: %s (only a graph's "
                "stale addresses are refused)",
                form(t, CGRT_PHASE_TRAIN), rc, err);
  }
  a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, 2);
  EXPECT(a, 0, "train steps back in place after the refusal");
  return 0;
}

/* ---------------------------------------------------------------- graphs' lifetime */

static int release(struct conform_run *t, char *why, size_t len) {
  int W = t->cfg->warmup;
  int64_t T = t->cfg->train_tokens;
  size_t a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, W + 3);
  EXPECT(a, 1, "train steps before the release");
  int rc = conform_release(t);
  if (rc != 0)
    return FAIL("cgrt_release_graphs returned %d: %s", rc, cgrt_last_error(t->rt));
  cgrt_stats s;
  if (stats(t, &s, why, len) != 0)
    return -1;
  if (s.live_graphs != 0)
    return FAIL("%" PRIu64 " executables alive after cgrt_release_graphs", s.live_graphs);
  /* Released: warmed up, captured and replayed again, as a fresh runtime would. */
  a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, W + 3);
  EXPECT(a, 1, "train steps after the release");
  return 0;
}

static int close_alive(struct conform_run *t, char *why, size_t len) {
  int W = t->cfg->warmup;
  int64_t T = t->cfg->train_tokens;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, W + 3);
  STEPS_TO_REPLAY(CGRT_PHASE_EVAL, T, 0, W + 3);
  if (t->cfg->num_buckets)
    STEPS_TO_REPLAY(CGRT_PHASE_INFER, t->cfg->buckets[0], 0, W + 2);
  cgrt_stats s;
  if (stats(t, &s, why, len) != 0)
    return -1;
  int any =
      graphs(t, CGRT_PHASE_TRAIN) || graphs(t, CGRT_PHASE_EVAL) || graphs(t, CGRT_PHASE_INFER);
  if (any && s.live_graphs == 0)
    return FAIL("no executable alive after replaying steps: nothing for the close to free");
  /* No cgrt_release_graphs: cgrt_close frees them (the ASan run finds a leak). */
  int rc = conform_run_close(t);
  return rc == 0 ? 0
                 : FAIL("cgrt_close with %" PRIu64 " graphs alive returned %d: %s", s.live_graphs,
                        rc, cgrt_last_error(t->rt));
}

/* ---------------------------------------------------------------- stats, describe, check */

static void count_line(void *user, const char *line) {
  (void)line;
  ++*(int *)user;
}

static int count_graph(void *user, const cgrt_graph_info *g) {
  (void)g;
  ++*(uint64_t *)user;
  return 0;
}

static int describe(struct conform_run *t, const char *when, char *why, size_t len) {
  int lines = 0;
  int rc = cgrt_tool_describe(t->rt, count_line, &lines);
  if (rc != 0 && rc != CGRT_E_UNSUPPORTED)
    return FAIL("describe %s returned %d: %s", when, rc, cgrt_last_error(t->rt));
  if (rc == 0 && lines == 0)
    return FAIL("describe %s returned 0 but wrote no line of the plan", when);
  return 0;
}

static int info_consistent(struct conform_run *t, char *why, size_t len) {
  const cgrt_backend_info *bi = &t->cfg->info;
  static const uint64_t cap_of[CGRT_PHASE_COUNT] = {CGRT_BACKEND_TRAINING, CGRT_BACKEND_TRAINING,
                                                    CGRT_BACKEND_INFERENCE};
  if (strcmp(bi->name, cgrt_backend_name(t->rt)) != 0)
    return FAIL("cgrt_backend_info_get names '%s', cgrt_backend_name '%s'", bi->name,
                cgrt_backend_name(t->rt));
  for (int p = 0; p < CGRT_PHASE_COUNT; p++) {
    int has = (bi->caps & cap_of[p]) != 0;
    cgrt_phase_run run = bi->phases[p];
    if (has == (run == CGRT_RUN_CORE_EAGER) ||
        (run == CGRT_RUN_GRAPHS && !(bi->caps & CGRT_BACKEND_GRAPHS)))
      return FAIL("cgrt_backend_info_get: %s steps run %s, which its caps (0x%" PRIx64
                  ") do not say",
                  cgrt_phase_name((cgrt_phase)p), form(t, (cgrt_phase)p), bi->caps);
  }
  return 0;
}

static int stats_describe_check(struct conform_run *t, char *why, size_t len) {
  int W = t->cfg->warmup;
  int64_t T = t->cfg->train_tokens;
  /* check() ran when the configuration was read: the run would not have opened otherwise. */
  if (info_consistent(t, why, len) != 0 || describe(t, "before any step", why, len) != 0)
    return -1;
  STEPS(CGRT_PHASE_TRAIN, T, 0, W + 3);
  STEPS(CGRT_PHASE_EVAL, T, 0, W + 3);
  for (size_t b = 0; b < t->cfg->num_buckets && b < 2; b++)
    STEPS(CGRT_PHASE_INFER, t->cfg->buckets[t->cfg->num_buckets - 1 - b], 0, W + 2);
  if (describe(t, "after the steps", why, len) != 0)
    return -1;
  cgrt_stats s;
  if (stats(t, &s, why, len) != 0)
    return -1;
  uint64_t by_mode[CGRT_MODE_COUNT] = {0}, core_eager = 0, calls = 0;
  for (size_t i = 0; i < t->num_ops; i++) {
    by_mode[t->ops[i].rep.mode % CGRT_MODE_COUNT]++;
    core_eager += t->cfg->info.phases[t->ops[i].phase] == CGRT_RUN_CORE_EAGER;
  }
  if (s.steps != t->steps_ok)
    return FAIL("cgrt_stats: steps %" PRIu64 ", but %" PRIu64 " steps ran", s.steps, t->steps_ok);
  for (int m = 0; m < CGRT_MODE_COUNT; m++)
    if (s.steps_by_mode[m] != by_mode[m])
      return FAIL("cgrt_stats: steps_by_mode %s %" PRIu64 ", but %" PRIu64
                  " steps reported %s to the host",
                  cgrt_mode_name((cgrt_mode)m), s.steps_by_mode[m], by_mode[m],
                  cgrt_mode_name((cgrt_mode)m));
  for (int m = 0; m < CGRT_MODE_COUNT; m++)
    calls += s.calls_by_mode[m];
  if (calls != t->model.calls)
    return FAIL("cgrt_stats: %" PRIu64 " module calls by mode, but the bodies made %" PRIu64, calls,
                t->model.calls);
  if (s.eager_phase_steps != core_eager)
    return FAIL("cgrt_stats: eager_phase_steps %" PRIu64 ", but %" PRIu64
                " steps were of phases the backend has no form for",
                s.eager_phase_steps, core_eager);
  if (s.fallbacks != 0)
    return FAIL("cgrt_stats: %" PRIu64 " fallbacks with nothing failing: %s", s.fallbacks, t->log);
  if (!(t->cfg->info.caps & CGRT_BACKEND_GRAPHS) && (s.captures || s.live_graphs))
    return FAIL("cgrt_stats: %" PRIu64 " captures and %" PRIu64
                " live executables under a backend that declares no graphs",
                s.captures, s.live_graphs);
  uint64_t listed = 0;
  int rc = cgrt_graph_list(t->rt, count_graph, &listed);
  if (rc != 0)
    return FAIL("cgrt_graph_list returned %d: %s", rc, cgrt_last_error(t->rt));
  /* Executables a backend built by hand with host->capture are alive but listed by no cache:
     the list may be shorter, never longer. */
  if (listed > s.live_graphs)
    return FAIL("cgrt_graph_list lists %" PRIu64 " executables, cgrt_stats live_graphs %" PRIu64,
                listed, s.live_graphs);
  if (cgrt_stats_format(&s, CGRT_STATS_TEXT, NULL, 0) <= 0 ||
      cgrt_stats_format(&s, CGRT_STATS_JSON, NULL, 0) <= 0)
    return FAIL("cgrt_stats_format wrote nothing");
  return 0;
}

/* ---------------------------------------------------------------- failures */

struct hooks {
  int begins, ends, refused;
};

static int hook_begin(void *user, void *stream) {
  (void)stream;
  ((struct hooks *)user)->begins++;
  return 0;
}

/* The host's end hook discards the first graph recorded, as a host's allocator may. */
static int hook_end(void *user, void *stream) {
  struct hooks *h = user;
  (void)stream;
  h->ends++;
  if (h->refused)
    return 0;
  h->refused = 1;
  return 1;
}

/*
 * Train steps until happened(t, arg): warmup_steps + 2, then in a phase with graphs, as in
 * steps_to_replay, at most 8 x (warmup_steps + 1) more: a backend whose keys warm up one after the
 * other (dynamic_cp's banks, whose cp sizes the steps take in turn, and their THD slots)
 * captures its first graph later than warmup_steps + 1 steps.
 */
static int steps_until(struct conform_run *t,
                       int (*happened)(const struct conform_run *t, void *arg), void *arg,
                       char *why, size_t len) {
  if (steps(t, CGRT_PHASE_TRAIN, t->cfg->train_tokens, 0, t->cfg->warmup + 2, why, len) != 0)
    return -1;
  for (int more = 8 * (t->cfg->warmup + 1);
       !happened(t, arg) && graphs(t, CGRT_PHASE_TRAIN) && more > 0; more--)
    if (steps(t, CGRT_PHASE_TRAIN, t->cfg->train_tokens, 0, 1, why, len) != 0)
      return -1;
  return 0;
}

static int fell_back(struct conform_run *t, const char *how, int happened, char *why, size_t len) {
  int W = t->cfg->warmup;
  int64_t T = t->cfg->train_tokens;
  cgrt_stats s;
  if (stats(t, &s, why, len) != 0)
    return -1;
  if (!graphs(t, CGRT_PHASE_TRAIN))
    return 0; /* nothing captured, nothing to fail */
  if (!happened)
    return FAIL("%s never happened: no capture in %zu train steps", how, t->num_ops);
  if (s.fallbacks == 0)
    return FAIL("%s, but cgrt_stats counts no fallback", how);
  /* Once failed, captured again later, and replayed. */
  size_t a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, W + 2);
  EXPECT(a, 0, "train steps after a failed capture");
  return 0;
}

static int hook_refused(const struct conform_run *t, void *arg) {
  (void)t;
  return ((const struct hooks *)arg)->refused;
}

static int fallback_hook(struct conform_run *t, char *why, size_t len) {
  struct hooks h = {0};
  int rc = cgrt_set_capture_hooks(t->rt, hook_begin, hook_end, &h);
  if (rc != 0)
    return FAIL("cgrt_set_capture_hooks returned %d: %s", rc, cgrt_last_error(t->rt));
  if (steps_until(t, hook_refused, &h, why, len) != 0)
    return -1;
  if (h.begins != h.ends)
    return FAIL("%d captures begun, %d ended", h.begins, h.ends);
  return fell_back(t, "the host's capture end hook refusing the first graph", h.refused, why, len);
}

static int module_failed(const struct conform_run *t, void *arg) {
  (void)arg;
  return !t->model.fail_next_capture;
}

static int fallback_module(struct conform_run *t, char *why, size_t len) {
  t->model.fail_next_capture = 1;
  if (steps_until(t, module_failed, NULL, why, len) != 0)
    return -1;
  int happened = !t->model.fail_next_capture;
  t->model.fail_next_capture = 0;
  return fell_back(t, "a module failing while captured", happened, why, len);
}

static int callback_errors(struct conform_run *t, char *why, size_t len) {
  int64_t T = t->cfg->train_tokens;
  size_t bad = t->model.mods - 1;
  t->model.fail_module = (long)bad;
  int rc = conform_step(t, CGRT_PHASE_TRAIN, T, 0);
  t->model.fail_module = -1;
  if (rc != CGRT_E_CALLBACK)
    return FAIL("a step whose module %s returned 7 returned %d (%s), not CGRT_E_CALLBACK",
                t->model.name[bad], rc, rc ? cgrt_last_error(t->rt) : "success");
  if (!strstr(cgrt_last_error(t->rt), t->model.name[bad]))
    return FAIL("a failing module's error does not name it: \"%s\"", cgrt_last_error(t->rt));
  t->model.fail_prepare = 1;
  rc = conform_step(t, CGRT_PHASE_TRAIN, T, 0);
  t->model.fail_prepare = 0;
  if (rc != CGRT_E_CALLBACK || !strstr(cgrt_last_error(t->rt), "prepare"))
    return FAIL("a step whose prepare returned 5 returned %d (%s), not CGRT_E_CALLBACK naming "
                "the prepare callback",
                rc, rc ? cgrt_last_error(t->rt) : "success");
  /* The runtime goes on as if the failed steps had not been made. */
  size_t a = t->num_ops;
  STEPS_TO_REPLAY(CGRT_PHASE_TRAIN, T, 0, t->cfg->warmup + 3);
  EXPECT(a, 0, "train steps after the failures");
  return 0;
}

/* ---------------------------------------------------------------- the table */

#define ASIS                                                                                       \
  { -1 }
const struct conform_scenario conform_scenarios[] = {
    {"train (warm-up, capture, replay, a second shape)", train, ASIS, 1, NULL},
    {"eval after training", eval, ASIS, 1, NULL},
    {"infer over every bucket, padded and above the largest", infer, ASIS, 1, NULL},
    {"moved buffers, rebind = update", rebind_update, {CGRT_REBIND_UPDATE}, 1, NULL},
    {"moved buffers, rebind = copy",
     rebind_copy,
     {CGRT_REBIND_COPY},
     1,
     "host functions cannot address the private device copies rebind = copy makes"},
    {"moved buffers, rebind = recapture", rebind_recapture, {CGRT_REBIND_RECAPTURE}, 1, NULL},
    {"moved buffers, rebind = error refuses", rebind_error, {CGRT_REBIND_ERROR}, 1, NULL},
    {"moved buffers, rebind = auto", rebind_auto, {CGRT_REBIND_AUTO}, 1, NULL},
    {"release and recapture", release, ASIS, 1, NULL},
    {"close with graphs alive", close_alive, ASIS, 1, NULL},
    {"stats, describe, check", stats_describe_check, ASIS, 1, NULL},
    {"a capture the host's end hook discards falls back", fallback_hook, ASIS, 1, NULL},
    {"a module failing while captured falls back", fallback_module, ASIS, 1, NULL},
    {"a failing module or prepare gives CGRT_E_CALLBACK naming it", callback_errors, ASIS, 1, NULL},
};
const size_t conform_num_scenarios = sizeof(conform_scenarios) / sizeof(conform_scenarios[0]);
