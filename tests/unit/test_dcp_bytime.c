/*
 * test_dcp_bytime.c - `[dynamic_cp] by_time` (issue 42) end to end on the host driver, whose cost
 * model (cgrt__host_set_cost) makes time pass: an eager launch costs the host 1 us, a graph launch
 * 0.1 us, a module's "kernel" 0.1 us at cp 1 (eager is bound by its launches: graphs win) and
 * 20 us at cp 2 (bound by the device), plus, at cp 2, 5 us more when it was captured: what a
 * graph boundary costs a device-bound shape on a GPU, the programmatic-launch overlap eager keeps
 * and a graph ends. So cp 2's graph steps are slower than its eager steps and cp 1's faster.
 *
 * What the tests check: the schedule, step by step, from the bank's pass count alone (graphs
 * replayed and timed, an eager step not kept, eager steps timed, the decision); a slower cp size
 * served eagerly after its round and a faster one keeping its graphs; every step's output right
 * (the modules read the slot's THD metadata when they run); the decision said once at info with
 * the figures, and counted in cgrt_stats and the backend's figures; the group's slowest rank
 * deciding (the host driver's groups are of one rank: a test peer, cgrt__host_set_peers, stands in
 * the others); graphs coming back when a later round finds them faster; release starting over;
 * step scope; graph steps on private copies left out and measured again early, or kept when the
 * copies stay; by_time off (the default) changing nothing; comm_max's refusals.
 *
 * Three modules in a chain, each "kernel" a host function out = 2 in + 1 + (what the slot's
 * cu_seqlens_padded says beyond the captured size: 0 when the metadata is right), so a step gives
 * 8 in + 7 whichever way it is served.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "driver.h"
#include "runtime.h"

#define MODS       3
#define MAX_PARAMS (1 << 15)
#define CAP_TOKENS 64
#define MAX_STEPS  2200
/* cp_time.h's schedule with warmup_steps 2 and graph_slots 2: a bank replays from its pass 4. */
#define FIRST_ROUND 4
#define DECISION    (FIRST_ROUND + 16) /* the pass whose end decides */
#define RECHECK     2048

struct params {
  struct fixture *f;
  const double *in;
  double *out;
  const int32_t *cu_padded; /* the slot's metadata */
  int entries;
  int cp;
  int captured; /* enqueued while captured: part of a graph */
};

struct fixture {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  struct params params[MAX_PARAMS];
  int num_params;
  double value;
  double in, out[MODS];
  /* fresh < 0: the step's buffers in a new place for each of the first -fresh passes, then in
     one of two; fresh > 0: in one of `fresh` places for good (copies_then_settle) */
  int fresh, fresh_at;
  double fresh_in[64], fresh_out[64][MODS];
  uint64_t penalty_ns; /* what a captured kernel at cp 2 costs more */
  uint64_t eager_ns;   /* what an eager kernel at cp 2 costs more */
  int decisions;       /* info lines of by_time's decisions */
  char said[8][640];
  int peer_calls;
  double peer_scale[2];          /* the peer's figures: this rank's times these (0: no peer) */
  int peer_copies;               /* the peer's next comm_max calls that say it saw copies */
  cgrt_mode modes[3][MAX_STEPS]; /* per cp size, per pass of its bank */
};

static void work(void *arg) {
  struct params *p = arg;
  p->out[0] = p->in[0] * 2 + 1 + (p->cu_padded[p->entries - 1] - CAP_TOKENS);
}

/* The step's input and module i's output: in place, or (fresh) in this step's place. */
static double *input_of(struct fixture *f) {
  return f->fresh ? &f->fresh_in[f->fresh_at] : &f->in;
}

static double *output_of(struct fixture *f, int i) {
  return f->fresh ? &f->fresh_out[f->fresh_at][i] : &f->out[i];
}

static void stage(void *arg) {
  struct fixture *f = arg;
  *input_of(f) = f->value;
}

static uint64_t cost_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  if (fn != work)
    return 0;
  const struct params *p = arg;
  if (p->cp == 1)
    return 100;
  return 20000 + (p->captured ? p->f->penalty_ns : p->f->eager_ns);
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fixture *f = user;
  if (f->num_params >= MAX_PARAMS)
    return -1;
  struct params *p = &f->params[f->num_params++];
  *p = (struct params){f,
                       args->buffers[0].ptr,
                       args->buffers[1].ptr,
                       ctx->cu_seqlens_padded,
                       ctx->padded_sequences + 1,
                       ctx->cp_size,
                       ctx->mode == CGRT_MODE_CAPTURE};
  return cgrt_enqueue_host(ctx, work, p);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  return cgrt_enqueue_host(ctx, stage, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fixture *f = user;
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{i ? output_of(f, i - 1) : input_of(f), sizeof(double), CGRT_IN, "in"},
                        {output_of(f, i), sizeof(double), CGRT_OUT, "out"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = 1, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(f->rt, f->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  struct fixture *f = user;
  if (level == CGRT_LOG_INFO && strstr(msg, "dynamic_cp by_time")) {
    if (f->decisions < 8)
      snprintf(f->said[f->decisions], sizeof(f->said[0]), "%s", msg);
    f->decisions++;
  }
  if (getenv("BYTIME_VERBOSE") && level <= CGRT_LOG_INFO)
    fprintf(stderr, "log: %s\n", msg);
}

/* The other rank of each group: its times are this rank's scaled by peer_scale. */
static void peer(void *user, const void *comm, double *values, int n) {
  (void)comm;
  struct fixture *f = user;
  f->peer_calls++;
  for (int i = 0; i < n && i < 2; i++)
    values[i] *= f->peer_scale[i];
  if (n >= 3 && f->peer_copies > 0) {
    values[2] = 1;
    f->peer_copies--;
  }
}

static struct fixture *fixture_open(const char *extra, int with_cost) {
  struct fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  f->penalty_ns = 5000;
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = dynamic_cp\nwarmup_steps = 2\n%s"
           "[dynamic_cp]\ncp_sizes = 1 2\nmax_packed_tokens = %d\nmax_sequences = 4\n"
           "graph_slots = 2\n%s"
           "[runtime]\ndriver = host\nlog = info\n",
           strstr(extra, "graph_scope = step") ? "modules =\n[host]\nnan_check = off\n" : "",
           CAP_TOKENS, extra);
  if (cgrt_open_string(&f->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  assert_int_equal(cgrt_set_log(f->rt, log_sink, f), 0);
  if (with_cost) {
    struct cgrt_host_cost c = {
        .launch_ns = 1000, .graph_launch_ns = 100, .graph_node_ns = 50, .node_ns = cost_ns};
    assert_int_equal(cgrt__host_set_cost(&f->rt->dev, &c), 0);
  }
  for (int i = 0; i < MODS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.attn", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_ATTN,
                          .layer = i,
                          .forward = module_fwd,
                          .user = f};
    assert_int_equal(cgrt_module_register(f->rt, &d, &f->m[i]), 0);
  }
  assert_int_equal(cgrt_set_world_comm(f->rt, NULL), 0);
  return f;
}

static void fixture_close(struct fixture *f) {
  assert_int_equal(cgrt_close(f->rt), 0);
  free(f);
}

/* One training step at cp size `cp`, pass `pass` of its bank; checks its output when `read`. */
static void step(struct fixture *f, int cp, int pass, int read) {
  f->value = (double)(pass % 100);
  if (f->fresh < 0)
    f->fresh_at = pass < -f->fresh ? pass % 62 : 62 + pass % 2;
  else if (f->fresh)
    f->fresh_at = (int)((unsigned)(pass * 7 + pass / 3) % (unsigned)f->fresh);
  const int32_t lens[] = {20, 9, 3};
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_TRAIN,
                      .tokens = 32,
                      .seqlens = lens,
                      .num_sequences = 3,
                      .cp_size = cp,
                      .prepare = prepare,
                      .body = body,
                      .user = f};
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  if (cgrt_step(f->rt, &d, &rep) != 0)
    fail_msg("cp %d, pass %d: %s", cp, pass, cgrt_last_error(f->rt));
  assert_int_equal(rep.padded_tokens, CAP_TOKENS); /* the slot's padding, whichever way */
  if (pass < MAX_STEPS)
    f->modes[cp][pass] = rep.mode;
  if (!read)
    return;
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  if (*output_of(f, MODS - 1) != 8 * f->value + 7)
    fail_msg("cp %d, pass %d (%s): output %g, expected %g", cp, pass, cgrt_mode_name(rep.mode),
             *output_of(f, MODS - 1), 8 * f->value + 7);
}

/* Passes [from, to) of both banks, in turn; outputs read every step when `read`. */
static void run(struct fixture *f, int from, int to, int read) {
  for (int i = from; i < to; i++) {
    step(f, 1, i, read);
    step(f, 2, i, read);
  }
}

static cgrt_stats stats(struct fixture *f) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  return s;
}

struct figure_seen {
  uint64_t rounds, graph_probes, eager_sizes, copied_samples, copied_rechecks;
};

static void figure(void *user, const char *name, uint64_t value) {
  struct figure_seen *s = user;
  if (strcmp(name, "by_time_rounds") == 0)
    s->rounds = value;
  else if (strcmp(name, "by_time_graph_probe_steps") == 0)
    s->graph_probes = value;
  else if (strcmp(name, "by_time_eager_cp_sizes") == 0)
    s->eager_sizes = value;
  else if (strcmp(name, "by_time_copied_samples") == 0)
    s->copied_samples = value;
  else if (strcmp(name, "by_time_copied_rechecks") == 0)
    s->copied_rechecks = value;
}

static struct figure_seen figures(struct fixture *f) {
  struct figure_seen s = {0};
  assert_int_equal(cgrt_backend_figures(f->rt, figure, &s), 0);
  return s;
}

/* The modes of passes [from, to) of bank cp are all `mode`. */
static void modes_are(struct fixture *f, int cp, int from, int to, cgrt_mode mode) {
  for (int i = from; i < to; i++)
    if (f->modes[cp][i] != mode)
      fail_msg("cp %d, pass %d: %s, expected %s", cp, i, cgrt_mode_name(f->modes[cp][i]),
               cgrt_mode_name(mode));
}

/* The decision line said about `cp`, or fails. */
static const char *said_of(struct fixture *f, int cp) {
  char what[32];
  snprintf(what, sizeof(what), "by_time: cp %d ", cp);
  for (int i = 0; i < f->decisions && i < 8; i++)
    if (strstr(f->said[i], what))
      return f->said[i];
  fail_msg("nothing said about cp %d", cp);
  return NULL;
}

static void slower_cp_size_served_eagerly_faster_keeps_graphs(void **state) {
  (void)state;
  struct fixture *f = fixture_open("by_time = on\n", 1);
  run(f, 0, 30, 1);
  for (int cp = 1; cp <= 2; cp++) {
    /* warm-up and captures, graphs timed, one eager step not kept, eager timed: the decision */
    modes_are(f, cp, FIRST_ROUND, FIRST_ROUND + 8, CGRT_MODE_REPLAY);
    modes_are(f, cp, FIRST_ROUND + 8, DECISION + 1, CGRT_MODE_EAGER);
  }
  modes_are(f, 1, DECISION + 1, 30, CGRT_MODE_REPLAY);
  modes_are(f, 2, DECISION + 1, 30, CGRT_MODE_EAGER);
  cgrt_stats s = stats(f);
  assert_int_equal(s.time_eager_counts, 1);
  assert_int_equal(s.timed_steps, 2 * 16);
  assert_int_equal(s.time_probe_steps, 2 * 9);
  assert_int_equal(s.time_eager_steps, 30 - (DECISION + 1));
  assert_int_equal(s.time_exact_steps + s.time_exact_counts, 0);
  struct figure_seen fs = figures(f);
  assert_int_equal(fs.rounds, 2);
  assert_int_equal(fs.eager_sizes, 1);
  assert_int_equal(fs.graph_probes, 0);
  /* said once per decision, with the figures */
  assert_int_equal(f->decisions, 2);
  const char *two = said_of(f, 2), *one = said_of(f, 1);
  assert_non_null(strstr(two, "served eagerly from now on, not by its graphs"));
  assert_non_null(strstr(one, "still served by its graphs"));
  for (int i = 0; i < 2; i++) {
    assert_non_null(strstr(f->said[i], "graphs "));
    assert_non_null(strstr(f->said[i], " us, eager "));
    assert_non_null(strstr(f->said[i], "the group's slowest rank"));
  }
  fixture_close(f);
}

/*
 * No step is synchronized until the end: the timings are read at the round's decision alone, and
 * the banks run in turn, so cp 2's steps, bound by the device and never waited for, leave the
 * stream far behind the host. cp 1's steps are then backlogged: their kernels are all queued
 * before the device reaches their start event, and eager's device span is its kernels' alone
 * (3 x 0.1 us), below the graphs' (3 x 0.15 us), while the host spent 4 us issuing it. By device
 * time alone (before session 38) cp 1 went eager here; a step's cost being the larger of its host
 * and device times, its graphs stay (about 1.3 us of host time against eager's 4 us), and cp 2,
 * bound by the device either way, still goes eager.
 */
static void decided_without_the_host_waiting(void **state) {
  (void)state;
  struct fixture *f = fixture_open("by_time = on\n", 1);
  run(f, 0, 30, 0);
  step(f, 2, 30, 1); /* the host reads an output: the first wait */
  modes_are(f, 1, FIRST_ROUND + 8, DECISION + 1, CGRT_MODE_EAGER); /* eager was measured */
  modes_are(f, 1, DECISION + 1, 30, CGRT_MODE_REPLAY);
  modes_are(f, 2, DECISION + 1, 31, CGRT_MODE_EAGER);
  assert_int_equal(stats(f).time_eager_counts, 1);
  const char *one = said_of(f, 1);
  assert_non_null(strstr(one, "still served by its graphs"));
  /* the figures: eager's device span below the graphs', its host time above both */
  double g, gh, gd, e, eh, ed;
  const char *p = strstr(one, ": graphs ");
  assert_non_null(p);
  p += 2;
  assert_int_equal(sscanf(p,
                          "graphs %lf us (host %lf, device %lf), eager %lf us (host %lf, "
                          "device %lf)",
                          &g, &gh, &gd, &e, &eh, &ed),
                   6);
  assert_true(ed < gd && eh == 4.0 && e == eh && gh > gd && g == gh && g < e);
  fixture_close(f);
}

/*
 * The group decides on its slowest rank's figures: a peer whose graph steps are 10 times as slow
 * sends cp 1 eager too; one whose eager steps are 10 times as slow keeps cp 2's graphs. One
 * agreement per round and bank.
 */
static void group_slowest_rank_decides(void **state) {
  (void)state;
  struct fixture *f = fixture_open("by_time = on\n", 1);
  f->peer_scale[0] = 10, f->peer_scale[1] = 1;
  assert_int_equal(cgrt__host_set_peers(&f->rt->dev, peer, f), 0);
  run(f, 0, 24, 1);
  assert_int_equal(f->peer_calls, 2);
  modes_are(f, 1, DECISION + 1, 24, CGRT_MODE_EAGER);
  modes_are(f, 2, DECISION + 1, 24, CGRT_MODE_EAGER);
  assert_int_equal(stats(f).time_eager_counts, 2);
  assert_non_null(strstr(said_of(f, 1), "served eagerly from now on"));
  fixture_close(f);

  f = fixture_open("by_time = on\n", 1);
  f->peer_scale[0] = 1, f->peer_scale[1] = 10;
  assert_int_equal(cgrt__host_set_peers(&f->rt->dev, peer, f), 0);
  run(f, 0, 24, 1);
  modes_are(f, 1, DECISION + 1, 24, CGRT_MODE_REPLAY);
  modes_are(f, 2, DECISION + 1, 24, CGRT_MODE_REPLAY);
  assert_int_equal(stats(f).time_eager_counts, 0);
  assert_non_null(strstr(said_of(f, 2), "still served by its graphs"));
  fixture_close(f);
}

/* A round after NOISE_RECHECK steps served eagerly finds cp 2's graphs faster now (its graphs lost
   their penalty, its eager kernels became slower by a quarter): back to them. */
static void graphs_come_back_when_measured_faster(void **state) {
  (void)state;
  struct fixture *f = fixture_open("by_time = on\n", 1);
  const int second = DECISION + 1 + RECHECK; /* the second round's first pass */
  for (int i = 0; i < second + 20; i++) {
    if (i == DECISION + 1)
      f->penalty_ns = 0, f->eager_ns = 5000;
    step(f, 2, i, i % 64 == 0 || i >= second);
  }
  modes_are(f, 2, DECISION + 1, second, CGRT_MODE_EAGER);
  modes_are(f, 2, second, second + 8, CGRT_MODE_REPLAY); /* the graphs were kept */
  modes_are(f, 2, second + 8, second + 17, CGRT_MODE_EAGER);
  modes_are(f, 2, second + 17, second + 20, CGRT_MODE_REPLAY);
  cgrt_stats s = stats(f);
  assert_int_equal(s.time_eager_counts, 0);
  assert_int_equal(s.instantiations, MODS * 2); /* a graph per module and slot, kept */
  assert_int_equal(figures(f).graph_probes, 8);
  assert_int_equal(f->decisions, 2);
  assert_non_null(strstr(f->said[1], "cp 2 served by its graphs from now on, not eagerly"));
  fixture_close(f);
}

/* cgrt_release_graphs: the banks warm up and capture again, graphs first, as on a fresh runtime. */
static void release_starts_over(void **state) {
  (void)state;
  struct fixture *f = fixture_open("by_time = on\n", 1);
  run(f, 0, 24, 1);
  assert_int_equal(stats(f).time_eager_counts, 1);
  assert_int_equal(cgrt_release_graphs(f->rt), 0);
  assert_int_equal(stats(f).time_eager_counts, 0);
  memset(f->modes, 0, sizeof(f->modes));
  run(f, 0, 24, 1);
  modes_are(f, 2, FIRST_ROUND, FIRST_ROUND + 8, CGRT_MODE_REPLAY);
  modes_are(f, 2, DECISION + 1, 24, CGRT_MODE_EAGER);
  assert_int_equal(stats(f).time_eager_counts, 1);
  fixture_close(f);
}

/* graph_scope = step: the body graph of cp 2 is slower, its body then runs eagerly. */
static void step_scope_served_eagerly(void **state) {
  (void)state;
  struct fixture *f = fixture_open("graph_scope = step\nby_time = on\n", 1);
  run(f, 0, 30, 1);
  modes_are(f, 1, FIRST_ROUND, FIRST_ROUND + 8, CGRT_MODE_REPLAY);
  modes_are(f, 1, DECISION + 1, 30, CGRT_MODE_REPLAY);
  modes_are(f, 2, DECISION + 1, 30, CGRT_MODE_EAGER);
  assert_int_equal(stats(f).time_eager_counts, 1);
  fixture_close(f);
}

/* No cost model: every step takes no device time; within the margin graphs stay. */
static void equal_times_keep_graphs(void **state) {
  (void)state;
  struct fixture *f = fixture_open("by_time = on\n", 0);
  run(f, 0, 30, 1);
  modes_are(f, 1, DECISION + 1, 30, CGRT_MODE_REPLAY);
  modes_are(f, 2, DECISION + 1, 30, CGRT_MODE_REPLAY);
  assert_int_equal(stats(f).time_eager_counts, 0);
  assert_int_equal(f->decisions, 2);
  assert_non_null(strstr(said_of(f, 2), "still served by its graphs"));
  fixture_close(f);
}

/*
 * Graph steps on private copies (issue 43's mechanism, in dynamic_cp): every buffer of the step
 * moves. Each moved buffer costs a replay a copy, 1 us of the host's time apiece, so cp 1's graph
 * steps on copies (about 7 us) are slower than its eager steps (4 us), in place faster (1.3 us).
 * Settling after 40 passes (two places in turn from then on, a graph for each): the first round's
 * graph steps, all on copies, are left out, no decision is taken and both cp sizes keep their
 * graphs; a round 256 passes later measures them in place: cp 1 keeps its graphs, cp 2 (bound by
 * the device) goes eager. Moving for good: the early round keeps the copies as the graphs' cost,
 * and cp 1 goes eager too. Decided on copies at the first round (before), cp 1 went eager for the
 * 2048 passes to the next round.
 */
static void copies_then_settle(int fresh, int cp1_mode) {
  struct fixture *f = fixture_open("by_time = on\n", 1);
  f->fresh = fresh;
  const int early = DECISION + 1 + 256; /* the early round's first pass */
  run(f, 0, early + 30, 1);
  const char *first = said_of(f, 1);
  if (!strstr(first, "still served by its graphs: no rank of its group kept a device time of its "
                     "graph steps") ||
      !strstr(first, "graph steps that replayed on private copies (moved buffers) were left "
                     "out in the group") ||
      !strstr(first, "measured again in 256 steps"))
    fail_msg("fresh %d, the first round of cp 1 said: %s", fresh, first);
  for (int cp = 1; cp <= 2; cp++) /* graphs kept (captures of the new address sets too) */
    for (int i = DECISION + 1; i < early; i++)
      if (f->modes[cp][i] == CGRT_MODE_EAGER)
        fail_msg("fresh %d: cp %d, pass %d served eagerly before the early round", fresh, cp, i);
  modes_are(f, 1, early + 17, early + 30, (cgrt_mode)cp1_mode);
  modes_are(f, 2, early + 17, early + 30, CGRT_MODE_EAGER);
  struct figure_seen fig = figures(f);
  assert_true(fig.copied_samples >= 8); /* of the first round's graph steps, both banks */
  assert_int_equal(fig.copied_rechecks, 2);
  assert_int_equal(fig.rounds, 4); /* two per bank */
  assert_int_equal(stats(f).time_eager_counts, cp1_mode == CGRT_MODE_EAGER ? 2 : 1);
  assert_true(stats(f).copy_bytes > 0);
  fixture_close(f);
}

static void copies_left_out_then_measured_again(void **state) {
  (void)state;
  copies_then_settle(-40, CGRT_MODE_REPLAY);
  copies_then_settle(64, CGRT_MODE_EAGER);
}

/*
 * Only the other rank of the group saw copies in the first round: this rank, whose buffers never
 * moved, decides on the round as usual and still moves its next round to 256 passes later with
 * the group (its collectives must meet the other rank's). cp 1: the early round's eager probe
 * steps run here too.
 */
static void a_peers_copies_move_the_group(void **state) {
  (void)state;
  struct fixture *f = fixture_open("by_time = on\n", 1);
  f->peer_scale[0] = f->peer_scale[1] = 1;
  f->peer_copies = 2; /* the first round of each bank */
  assert_int_equal(cgrt__host_set_peers(&f->rt->dev, peer, f), 0);
  const int early = DECISION + 1 + 256;
  run(f, 0, early + 20, 0);
  modes_are(f, 1, DECISION + 1, early, CGRT_MODE_REPLAY);
  modes_are(f, 1, early, early + 8, CGRT_MODE_REPLAY);
  modes_are(f, 1, early + 8, early + 17, CGRT_MODE_EAGER); /* the early round's eager steps */
  modes_are(f, 1, early + 17, early + 20, CGRT_MODE_REPLAY);
  modes_are(f, 2, DECISION + 1, early, CGRT_MODE_EAGER); /* decided at the first round */
  struct figure_seen fig = figures(f);
  assert_int_equal(fig.copied_samples, 0); /* none of this rank's */
  assert_int_equal(fig.copied_rechecks, 2);
  assert_non_null(strstr(said_of(f, 1), "were left out in the group, 0 of them on this rank"));
  assert_non_null(strstr(said_of(f, 1), "measured again in 256 steps"));
  fixture_close(f);
}

/* Off, by default or said: every step after the captures replays, nothing is timed or said. */
static void check_off(const char *extra) {
  struct fixture *f = fixture_open(extra, 1);
  run(f, 0, 30, 1);
  modes_are(f, 1, FIRST_ROUND, 30, CGRT_MODE_REPLAY);
  modes_are(f, 2, FIRST_ROUND, 30, CGRT_MODE_REPLAY);
  cgrt_stats s = stats(f);
  assert_int_equal(s.timed_steps + s.time_probe_steps + s.time_eager_steps, 0);
  assert_int_equal(f->decisions, 0);
  assert_int_equal(figures(f).rounds, 0);
  fixture_close(f);
}

static void off_by_default(void **state) {
  (void)state;
  check_off("");
}

static void off_changes_nothing(void **state) {
  (void)state;
  check_off("by_time = off\n");
}

/* comm_max (host API minor 9): a communicator of comm_for_cp only, never inside a capture. */
static void comm_max_refusals(void **state) {
  (void)state;
  struct fixture *f = fixture_open("", 0);
  const struct cgrt_host_api *h = &f->rt->host;
  assert_true(h->minor >= 9 && CGRT_HOST_HAS(h, comm_max));
  void *comm = NULL;
  int cp_rank = -1;
  assert_int_equal(h->comm_for_cp(h, 2, &comm, &cp_rank), 0);
  double v[2] = {3, 4};
  assert_int_equal(h->comm_max(h, comm, v, 2), 0); /* a group of one rank */
  assert_true(v[0] == 3 && v[1] == 4);
  int other = 0;
  assert_int_equal(h->comm_max(h, &other, v, 2), CGRT_E_INVAL);
  assert_non_null(strstr(h->last_error(h), "comm_for_cp"));
  assert_int_equal(h->comm_max(h, comm, v, 17), CGRT_E_INVAL);
  assert_int_equal(h->capture_begin(h, h->stream(h)), 0);
  assert_int_equal(h->comm_max(h, comm, v, 2), CGRT_E_CAPTURE);
  assert_non_null(strstr(h->last_error(h), "captures"));
  void *graph = NULL;
  assert_int_equal(h->capture_end(h, h->stream(h), &graph), 0); /* the capture was not harmed */
  assert_non_null(graph);
  h->graph_destroy(h, graph);
  fixture_close(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(slower_cp_size_served_eagerly_faster_keeps_graphs),
      cmocka_unit_test(decided_without_the_host_waiting),
      cmocka_unit_test(group_slowest_rank_decides),
      cmocka_unit_test(graphs_come_back_when_measured_faster),
      cmocka_unit_test(release_starts_over),
      cmocka_unit_test(step_scope_served_eagerly),
      cmocka_unit_test(equal_times_keep_graphs),
      cmocka_unit_test(copies_left_out_then_measured_again),
      cmocka_unit_test(a_peers_copies_move_the_group),
      cmocka_unit_test(off_by_default),
      cmocka_unit_test(off_changes_nothing),
      cmocka_unit_test(comm_max_refusals),
  };
  return cmocka_run_group_tests_name("dcp_bytime", tests, NULL, NULL);
}
