/*
 * test_dcp.c - the `dynamic_cp` backend's policy on the host driver (stand-in communicators):
 * bank selection by the step's cp size and refusal of a size without a bank, the THD slot ring
 * (rotation, the reuse guard against a replay that has not run yet, the padding metadata),
 * capacity errors and the eager fallback, and each bank warming up and capturing its slots on its
 * own steps; with graph_scope = step, one whole-body graph per bank and slot. Every step, warm-up,
 * capture or replay, runs the body's work once (issue 42). With NCCL's graph mixing support off,
 * work run outside a graph on a bank's communicator starts only after every graph launched before
 * it has run.
 *
 * The module's device work is a host function that reads the step's THD metadata when it runs,
 * so the test sees what a kernel would have read.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/backend.h"
#include "cgrt/tool.h"
#include "comm/comm.h"

#define MAX_SEEN   256
#define CAP_TOKENS 64
#define CAP_SEQS   4

struct seen {
  int32_t cu[CAP_SEQS + 2];
  int32_t cu_padded[CAP_SEQS + 2];
  void *comm;
  int cp;
};

struct host {
  cgrt_runtime *rt;
  cgrt_module *m[2];
  struct seen seen[MAX_SEEN]; /* per module run on the device, in order */
  int runs;
  struct launch {
    struct host *h;
    const int32_t *cu, *cu_padded;
    int entries;
    void *comm;
    int cp;
  } launches[4096]; /* launch parameters outlive the graphs that hold them */
  int num_launches;
  int prepares;
  int prepared_padded_seqs;
  int64_t prepared_padded_tokens;
  /* The stream's FIFO as the test sees it: device_reads enqueued in order (eagerly, or as the
     nodes of a launched graph), and the position of the last graph's last node. */
  int enqueued;
  int graph_end;      /* ... of any graph */
  int comm_graph_end; /* ... of a graph whose capture handed a callback the communicator */
  int capture_nodes;  /* nodes recorded by the capture in progress */
  int capture_comm;   /* a callback of the capture in progress saw ctx->comm */
  struct {
    void *exec;
    int nodes;
    int comm;
  } execs[64];
  int num_execs;
  int eager_calls; /* module calls run outside a graph */
  /* Of those: calls that saw the communicator and started while a launched graph that may use it
     had not yet run (NCCL's rule with mixing off); the same behind any graph (one that holds no
     collectives included); calls that saw no communicator (no_cp_comm) behind any graph. */
  int behind_graph;
  int behind_any;
  int behind_free;
  int calls_comm, calls_no_comm; /* module calls (any mode) that saw ctx->comm set, or NULL */
  int mlp_calls;                 /* of those, calls of the mlp module */
};

static void device_reads(void *arg) {
  struct launch *l = arg;
  struct host *h = l->h;
  if (h->runs >= MAX_SEEN)
    return;
  struct seen *s = &h->seen[h->runs++];
  memcpy(s->cu, l->cu, (size_t)l->entries * sizeof(int32_t));
  memcpy(s->cu_padded, l->cu_padded, (size_t)l->entries * sizeof(int32_t));
  s->comm = l->comm;
  s->cp = l->cp;
}

static int module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct host *h = user;
  if (ctx->mode == CGRT_MODE_CAPTURE) {
    h->capture_nodes++;
    h->capture_comm |= ctx->comm != NULL;
  } else {
    h->eager_calls++;
    /* The host driver runs the FIFO in order. NCCL's rule binds only calls on the communicator,
       behind graphs that use it. */
    if (ctx->comm) {
      h->behind_graph += h->runs < h->comm_graph_end;
      h->behind_any += h->runs < h->graph_end;
    } else {
      h->behind_free += h->runs < h->graph_end;
    }
    h->enqueued++;
  }
  if (ctx->comm)
    h->calls_comm++;
  else
    h->calls_no_comm++;
  struct launch *l = &h->launches[h->num_launches++];
  *l =
      (struct launch){h,         ctx->cu_seqlens, ctx->cu_seqlens_padded, ctx->padded_sequences + 1,
                      ctx->comm, ctx->cp_size};
  return cgrt_enqueue_host(ctx, device_reads, l);
}

static int module_mlp(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  ((struct host *)user)->mlp_calls++;
  return module(ctx, args, user);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  h->prepares++;
  h->prepared_padded_seqs = ctx->padded_sequences;
  h->prepared_padded_tokens = ctx->padded_tokens;
  return 0;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  for (int i = 0; i < 2; i++) {
    int rc = cgrt_forward(h->rt, h->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

/* Follows the graphs through the FIFO: nodes per executable, and where each launch ends. */
static void watch(void *user, const struct cgrt_tool_graph_event *ev) {
  struct host *h = user;
  if (ev->op == CGRT_TOOL_GRAPH_INSTANTIATED && h->num_execs < 64) {
    h->execs[h->num_execs].exec = ev->exec;
    h->execs[h->num_execs].comm = h->capture_comm;
    h->execs[h->num_execs++].nodes = h->capture_nodes;
    h->capture_nodes = 0;
    h->capture_comm = 0;
  } else if (ev->op == CGRT_TOOL_GRAPH_LAUNCHED) {
    int found = 0;
    for (int i = h->num_execs - 1; i >= 0 && !found; i--)
      if (h->execs[i].exec == ev->exec) {
        h->enqueued += h->execs[i].nodes;
        if (h->execs[i].comm)
          h->comm_graph_end = h->enqueued;
        found = 1;
      }
    assert_true(found);
    h->graph_end = h->enqueued;
  }
}

/* mlp_no_comm: the mlp module is registered with no_cp_comm (its calls issue no collectives). */
static struct host *host_open_full(const char *extra, int with_comm, int warmup, int mlp_no_comm) {
  struct host *h = calloc(1, sizeof(*h));
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = dynamic_cp\nwarmup_steps = %d\n[dynamic_cp]\ncp_sizes = 1 2\n"
           "max_packed_tokens = %d\nmax_sequences = %d\ngraph_slots = 2\n%s\n"
           "[runtime]\ndriver = host\nlog = off\n",
           warmup, CAP_TOKENS, CAP_SEQS, extra ? extra : "");
  if (cgrt_open_string(&h->rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  for (int i = 0; i < 2; i++) {
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = i ? "l0.mlp" : "l0.attn",
                          .kind = i ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .forward = i ? module_mlp : module,
                          .user = h,
                          .no_cp_comm = i && mlp_no_comm};
    assert_int_equal(cgrt_module_register(h->rt, &d, &h->m[i]), 0);
  }
  assert_int_equal(cgrt_tool_watch_graphs(h->rt, watch, h), 0);
  if (with_comm)
    assert_int_equal(cgrt_set_world_comm(h->rt, NULL), 0);
  return h;
}

static struct host *host_open_warm(const char *extra, int with_comm, int warmup) {
  return host_open_full(extra, with_comm, warmup, 0);
}

static struct host *host_open(const char *extra, int with_comm) {
  return host_open_warm(extra, with_comm, 2);
}

static void host_close(struct host *h) {
  assert_int_equal(cgrt_close(h->rt), 0);
  free(h);
}

static int step(struct host *h, int cp, const int32_t *lens, int n, cgrt_step_report *rep) {
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_TRAIN,
                      .seqlens = lens,
                      .num_sequences = n,
                      .cp_size = cp,
                      .prepare = prepare,
                      .body = body,
                      .user = h};
  for (int i = 0; i < n; i++)
    d.tokens += lens[i];
  return cgrt_step(h->rt, &d, rep);
}

static void expect_meta(const struct seen *s, const int32_t *lens, int n) {
  int32_t total = 0;
  assert_int_equal(s->cu[0], 0);
  for (int i = 0; i < n; i++) {
    total += lens[i];
    assert_int_equal(s->cu[i + 1], total);
    assert_int_equal(s->cu_padded[i + 1], total);
  }
  /* The dummy: zero-length in cu_seqlens, padding to the captured size in cu_seqlens_padded. */
  assert_int_equal(s->cu[n + 1], total);
  assert_int_equal(s->cu_padded[n + 1], CAP_TOKENS);
  for (int i = n + 2; i < CAP_SEQS + 2; i++) {
    assert_int_equal(s->cu[i], total);
    assert_int_equal(s->cu_padded[i], CAP_TOKENS);
  }
}

static void padding_metadata(void **state) {
  (void)state;
  struct host *h = host_open(NULL, 1);
  const int32_t lens[] = {5, 17, 3};
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(h, 1, lens, 3, &rep), 0);
  assert_int_equal(rep.padded_tokens, CAP_TOKENS);
  assert_int_equal(h->prepared_padded_seqs, CAP_SEQS + 1);
  assert_int_equal(h->prepared_padded_tokens, CAP_TOKENS);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->runs, 2);
  expect_meta(&h->seen[0], lens, 3);
  host_close(h);
}

static void banks_selected_by_cp_size(void **state) {
  (void)state;
  struct host *h = host_open(NULL, 1);
  const int32_t lens[] = {8, 8};
  assert_int_equal(step(h, 1, lens, 2, NULL), 0);
  assert_int_equal(step(h, 2, lens, 2, NULL), 0);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->seen[0].cp, 1);
  assert_int_equal(h->seen[2].cp, 2);
  assert_non_null(h->seen[0].comm);
  assert_ptr_not_equal(h->seen[0].comm, h->seen[2].comm); /* each bank its communicator */
  /* A size without a bank is refused, naming the sizes that have one; nothing runs. */
  int before = h->prepares;
  assert_int_equal(step(h, 4, lens, 2, NULL), CGRT_E_INVAL);
  if (!strstr(cgrt_last_error(h->rt), "cp size 4 has no graph bank") ||
      !strstr(cgrt_last_error(h->rt), "cp sizes 1 2"))
    fail_msg("%s", cgrt_last_error(h->rt));
  assert_int_equal(h->prepares, before);
  host_close(h);
}

static void refuses_without_world_comm(void **state) {
  (void)state;
  struct host *h = host_open(NULL, 0);
  assert_int_equal(cgrt_tool_nccl_mixing_off(h->rt), -1); /* nothing split yet */
  const int32_t lens[] = {8};
  assert_int_equal(step(h, 1, lens, 1, NULL), CGRT_E_STATE);
  if (!strstr(cgrt_last_error(h->rt), "cgrt_set_world_comm"))
    fail_msg("%s", cgrt_last_error(h->rt));
  host_close(h);
}

static void slots_rotate_and_wait_for_readers(void **state) {
  (void)state;
  struct host *h = host_open_warm(NULL, 1, 100); /* eager steps only */
  /* The host driver runs work only when synchronized: nothing of these steps has run yet when
   * the third rewrites slot 0, so the ring must wait for the first step's readers first. */
  const int32_t a[] = {10}, b[] = {20, 1}, c[] = {30, 2, 3};
  assert_int_equal(step(h, 1, a, 1, NULL), 0);
  assert_int_equal(step(h, 1, b, 2, NULL), 0);
  assert_int_equal(step(h, 1, c, 3, NULL), 0);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->runs, 6);
  expect_meta(&h->seen[0], a, 1);
  expect_meta(&h->seen[2], b, 2);
  expect_meta(&h->seen[4], c, 3);
  /* Steps alternate between the two slots. */
  assert_ptr_equal(h->launches[0].cu, h->launches[4].cu);
  assert_ptr_not_equal(h->launches[0].cu, h->launches[2].cu);
  host_close(h);
}

static void over_capacity_error_runs_nothing(void **state) {
  (void)state;
  struct host *h = host_open(NULL, 1);
  const int32_t big[] = {60, 10};
  assert_int_equal(step(h, 1, big, 2, NULL), CGRT_E_CAPACITY);
  const char *e = cgrt_last_error(h->rt);
  if (!strstr(e, "70 tokens in 2 sequences") || !strstr(e, "max_packed_tokens") ||
      !strstr(e, "over_capacity = eager"))
    fail_msg("%s", e);
  const int32_t many[] = {1, 1, 1, 1, 1};
  assert_int_equal(step(h, 1, many, 5, NULL), CGRT_E_CAPACITY);
  assert_int_equal(h->prepares, 0);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->runs, 0);
  host_close(h);
}

static void over_capacity_eager_runs_at_its_size(void **state) {
  (void)state;
  struct host *h = host_open("over_capacity = eager", 1);
  const int32_t big[] = {60, 10};
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  assert_int_equal(step(h, 2, big, 2, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(rep.padded_tokens, 70);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->runs, 2);
  assert_int_equal(h->seen[0].cu[2], 70);
  assert_int_equal(h->seen[0].cp, 2);
  host_close(h);
}

/*
 * Steps at cp 2 and cp 1 in turn: each bank warms up on its own steps (warmup_steps = 2, one on
 * each slot), then captures slot 0 and slot 1, `per_step` graphs each, then replays; a step of
 * one bank never builds the other's graphs. Ends synchronized.
 */
static void capture_then_replays(struct host *h, uint64_t per_step) {
  static const cgrt_mode modes[] = {CGRT_MODE_WARMUP,  CGRT_MODE_WARMUP, CGRT_MODE_CAPTURE,
                                    CGRT_MODE_CAPTURE, CGRT_MODE_REPLAY, CGRT_MODE_REPLAY};
  const int32_t lens[] = {8, 9};
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int s = 0; s < 12; s++) {
    assert_int_equal(step(h, s % 2 ? 1 : 2, lens, 2, &rep), 0);
    assert_int_equal(rep.mode, modes[s / 2]);
    assert_int_equal(rep.graphs_built, rep.mode == CGRT_MODE_CAPTURE ? per_step : 0);
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(h->rt, &st), 0);
  assert_int_equal(st.captures, 2 * 2 * per_step); /* 2 banks x 2 slots */
  assert_int_equal(cgrt_synchronize(h->rt), 0);
}

/* After capture_then_replays: one step at cp with three other lengths, a replay; run. */
static const int32_t other[] = {3, 4, 5};
static void replay_other_lengths(struct host *h, int cp) {
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  h->runs = 0;
  assert_int_equal(step(h, cp, other, 3, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
}

static void banks_capture_on_their_own_steps(void **state) {
  (void)state;
  struct host *h = host_open(NULL, 1);
  capture_then_replays(h, 2); /* a graph per module */
  /* Replays read the slot written for their step: other lengths, right metadata. */
  replay_other_lengths(h, 1);
  expect_meta(&h->seen[0], other, 3);
  host_close(h);
}

static void step_scope_graphs_the_body_per_bank_and_slot(void **state) {
  (void)state;
  struct host *h = host_open("graph_scope = step\n[host]\nnan_check = off", 1);
  capture_then_replays(h, 1); /* one body graph per bank and slot */
  /* A replay is the whole body: both modules' work runs, on the slot written for its step,
   * with the bank's communicator. */
  replay_other_lengths(h, 1);
  assert_int_equal(h->runs, 2);
  expect_meta(&h->seen[0], other, 3);
  expect_meta(&h->seen[1], other, 3);
  assert_int_equal(h->seen[0].cp, 1);
  replay_other_lengths(h, 2);
  assert_int_equal(h->runs, 2);
  assert_int_equal(h->seen[1].cp, 2);
  expect_meta(&h->seen[1], other, 3);
  host_close(h);
}

static uint64_t comm_waits(struct host *h) {
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(h->rt, &st), 0);
  return st.comm_waits;
}

/*
 * With graph mixing `off` (NCCL_GRAPH_MIXING_SUPPORT=0 when the communicators are split) or on,
 * nothing synchronized between steps: cp 2 warms up and captures, then cp 1 (whose warm-up runs
 * eagerly after cp 2's graphs were launched), replays of both sizes, then a step over capacity
 * that runs eagerly. Returns the waits of the replay steps alone in *replay_waits.
 */
static struct host *mixed_steps_full(const char *extra, int off, int mlp_no_comm,
                                     uint64_t *replay_waits) {
  if (off)
    setenv("NCCL_GRAPH_MIXING_SUPPORT", "0", 1);
  struct host *h = host_open_full(extra, 1, 2, mlp_no_comm);
  unsetenv("NCCL_GRAPH_MIXING_SUPPORT"); /* read once, at the split */
  assert_int_equal(cgrt_tool_nccl_mixing_off(h->rt), off);
  const int32_t lens[] = {8, 9}, big[] = {60, 10};
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int s = 0; s < 8; s++) {
    assert_int_equal(step(h, s < 4 ? 2 : 1, lens, 2, &rep), 0);
    assert_int_equal(rep.mode, s % 4 < 2 ? CGRT_MODE_WARMUP : CGRT_MODE_CAPTURE);
  }
  uint64_t before = comm_waits(h);
  for (int s = 0; s < 4; s++) {
    assert_int_equal(step(h, s % 2 ? 1 : 2, lens, 2, &rep), 0);
    assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  }
  *replay_waits = comm_waits(h) - before;
  assert_int_equal(step(h, 2, big, 2, &rep), 0);
  assert_int_equal(rep.mode, CGRT_MODE_EAGER);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  return h;
}

static struct host *mixed_steps(const char *extra, int off, uint64_t *replay_waits) {
  return mixed_steps_full(extra, off, 0, replay_waits);
}

static void mixing_off_eager_work_waits_for_graphs(void **state) {
  (void)state;
  static const char *scopes[] = {NULL, "graph_scope = step\n[host]\nnan_check = off"};
  char extra[160];
  for (int i = 0; i < 2; i++) {
    uint64_t replay_waits = 0;
    snprintf(extra, sizeof(extra), "over_capacity = eager\n%s", scopes[i] ? scopes[i] : "");
    struct host *h = mixed_steps(extra, 1, &replay_waits);
    assert_true(h->eager_calls > 0);
    assert_int_equal(h->behind_graph, 0);
    /* cp 1's warm-up behind cp 2's graphs and the step over capacity waited; replays never do. */
    assert_true(comm_waits(h) >= 2);
    assert_int_equal(replay_waits, 0);
    host_close(h);

    /* Mixing on: the same steps start eager work behind queued graphs, and nothing waits. */
    h = mixed_steps(extra, 0, &replay_waits);
    assert_true(h->behind_graph > 0);
    assert_int_equal(comm_waits(h), 0);
    host_close(h);
  }
}

/* A verified replay's eager rerun comes right after the launch: with mixing off it waits too. */
static void mixing_off_verified_replays_wait(void **state) {
  (void)state;
  uint64_t replay_waits = 0;
  struct host *h =
      mixed_steps("over_capacity = eager\n[cuda_graph]\nverify = every:1", 1, &replay_waits);
  assert_int_equal(h->behind_graph, 0);
  assert_true(replay_waits > 0);
  host_close(h);
}

/* Only attn is graphed: each replaying step's eager mlp call waits for the attn graph. */
static void mixing_off_partial_modules_wait_each_step(void **state) {
  (void)state;
  uint64_t replay_waits = 0;
  struct host *h =
      mixed_steps("over_capacity = eager\n[cuda_graph]\nmodules = attn", 1, &replay_waits);
  assert_int_equal(h->behind_graph, 0);
  assert_int_equal(replay_waits, 4);
  assert_int_equal(h->calls_no_comm, 0);
  host_close(h);
}

/*
 * The same, with mlp registered as issuing no collectives on the cp communicator (no_cp_comm):
 * its eager calls see ctx->comm NULL and start behind the queued attn graphs without waiting, and
 * attn's calls still never start behind a graph.
 */
static void mixing_off_modules_without_collectives_never_wait(void **state) {
  (void)state;
  uint64_t replay_waits = 0;
  struct host *h =
      mixed_steps_full("over_capacity = eager\n[cuda_graph]\nmodules = attn", 1, 1, &replay_waits);
  assert_int_equal(h->behind_graph, 0);
  assert_true(h->behind_free > 0);
  assert_int_equal(replay_waits, 0);
  assert_true(h->mlp_calls > 0);
  assert_int_equal(h->calls_no_comm, h->mlp_calls); /* attn sees its communicator */
  assert_true(h->calls_comm > 0);
  host_close(h);
}

/*
 * Only mlp is graphed. Registered with no_cp_comm, its graphs hold no collectives: launching them
 * does not make the eager attn calls wait, which start behind them. Not registered so, they may
 * hold collectives, and each replaying step's eager attn call waits for them.
 */
static void mixing_off_graphs_without_collectives_are_not_waited_for(void **state) {
  (void)state;
  uint64_t replay_waits = 0;
  struct host *h =
      mixed_steps_full("over_capacity = eager\n[cuda_graph]\nmodules = mlp", 1, 1, &replay_waits);
  assert_int_equal(h->behind_graph, 0);
  assert_true(h->behind_any > 0);
  assert_int_equal(comm_waits(h), 0);
  host_close(h);

  h = mixed_steps_full("over_capacity = eager\n[cuda_graph]\nmodules = mlp", 1, 0, &replay_waits);
  assert_int_equal(h->behind_graph, 0);
  assert_int_equal(h->behind_any, 0);
  assert_int_equal(replay_waits, 4);
  host_close(h);
}

/*
 * The core's bookkeeping of which executables hold no work on the communicators, by hand: only
 * one instantiated or updated from the last graph captured clean is clean; updating it to another
 * graph, or destroying it, forgets it; with mixing on nothing is tracked.
 */
static void clean_executables_are_tracked_exactly(void **state) {
  (void)state;
  struct cgrt_comms c = {.serial = 1};
  char comm, g[4], e[3];
  cgrt__comms_capture_begin(&c);
  cgrt__comms_handed(&c, NULL);
  cgrt__comms_capture_end(&c, &g[0], c.capture_comm);
  cgrt__comms_exec_from(&c, &e[0], &g[0]);
  cgrt__comms_exec_from(&c, &e[1], &g[0]); /* a second one from the same graph */
  cgrt__comms_launched(&c, &e[0]);
  assert_int_equal(c.graphs_queued, 0);
  cgrt__comms_launched(&c, &e[1]);
  assert_int_equal(c.graphs_queued, 1);
  cgrt__comms_drained(&c);

  cgrt__comms_capture_begin(&c);
  cgrt__comms_handed(&c, &comm);
  cgrt__comms_handed(&c, NULL);
  cgrt__comms_capture_end(&c, &g[1], c.capture_comm);
  assert_null(c.clean_graph);
  cgrt__comms_exec_from(&c, &e[0], &g[1]); /* updated to a graph that may use them */
  cgrt__comms_launched(&c, &e[0]);
  assert_int_equal(c.graphs_queued, 1);
  cgrt__comms_drained(&c);

  cgrt__comms_capture_begin(&c);
  cgrt__comms_capture_end(&c, &g[2], c.capture_comm);
  cgrt__comms_exec_from(&c, &e[0], &g[2]); /* updated back to a clean one */
  cgrt__comms_launched(&c, &e[0]);
  assert_int_equal(c.graphs_queued, 0);
  cgrt__comms_exec_from(&c, &e[0], NULL); /* destroyed: its address may come back */
  cgrt__comms_launched(&c, &e[0]);
  assert_int_equal(c.graphs_queued, 1);
  cgrt__comms_drained(&c);

  cgrt__comms_capture_begin(&c);
  cgrt__comms_capture_end(&c, &g[3], c.capture_comm);
  cgrt__comms_graph_gone(&c, &g[3]); /* destroyed before it was instantiated */
  cgrt__comms_exec_from(&c, &e[2], &g[3]);
  cgrt__comms_launched(&c, &e[2]);
  assert_int_equal(c.graphs_queued, 1);
  cgrt__comms_destroy(&c);

  c.serial = 0; /* mixing on: no graph is ever waited for, so none is tracked */
  cgrt__comms_capture_begin(&c);
  cgrt__comms_capture_end(&c, &g[0], c.capture_comm);
  assert_null(c.clean_graph);
  assert_int_equal(c.num_clean, 0);
}

/* A desc of before no_cp_comm (a smaller struct_size) may issue collectives: it sees ctx->comm,
 * whatever lies where the field would be. */
static void older_module_desc_sees_the_communicator(void **state) {
  (void)state;
  struct host *h = host_open_full(NULL, 1, 2, 0);
  cgrt_module_desc d = {.struct_size = offsetof(cgrt_module_desc, no_cp_comm),
                        .name = "l1.mlp",
                        .kind = CGRT_KIND_MLP,
                        .forward = module_mlp,
                        .user = h,
                        .no_cp_comm = 1};
  cgrt_module *m = NULL;
  assert_int_equal(cgrt_module_register(h->rt, &d, &m), 0);
  h->m[1] = m; /* the body calls attn, then this one */
  const int32_t lens[] = {8, 9};
  assert_int_equal(step(h, 2, lens, 2, NULL), 0);
  assert_int_equal(cgrt_synchronize(h->rt), 0);
  assert_int_equal(h->mlp_calls, 1);
  assert_int_equal(h->calls_no_comm, 0);
  assert_int_equal(h->calls_comm, 2);
  host_close(h);
}

/* ---------------------------------------------------------------- once a step */

/*
 * A training host whose body changes state: the body enqueues an update of its own (a counter
 * the host function increments when it runs, as an optimizer step or a gradient accumulation
 * would change weights), and each module's forward and backward enqueue theirs.
 */
struct trainer {
  cgrt_runtime *rt;
  cgrt_module *m[2];
  int64_t updates;           /* the body's own work, run */
  int64_t module_runs[2][2]; /* [module][forward, backward] work, run */
  int64_t prepares;          /* prepare callbacks */
  int64_t bodies;            /* body callbacks (a replayed whole-step graph makes none) */
};

static void count_run(void *arg) {
  (*(int64_t *)arg)++;
}

static int counted_module(const cgrt_ctx *ctx, void *counter) {
  return cgrt_enqueue_host(ctx, count_run, counter);
}

static int trainer_attn_fwd(const cgrt_ctx *ctx, const cgrt_args *a, void *u) {
  (void)a;
  return counted_module(ctx, &((struct trainer *)u)->module_runs[0][0]);
}
static int trainer_attn_bwd(const cgrt_ctx *ctx, const cgrt_args *a, void *u) {
  (void)a;
  return counted_module(ctx, &((struct trainer *)u)->module_runs[0][1]);
}
static int trainer_mlp_fwd(const cgrt_ctx *ctx, const cgrt_args *a, void *u) {
  (void)a;
  return counted_module(ctx, &((struct trainer *)u)->module_runs[1][0]);
}
static int trainer_mlp_bwd(const cgrt_ctx *ctx, const cgrt_args *a, void *u) {
  (void)a;
  return counted_module(ctx, &((struct trainer *)u)->module_runs[1][1]);
}

static int trainer_prepare(const cgrt_ctx *ctx, void *user) {
  (void)ctx;
  ((struct trainer *)user)->prepares++;
  return 0;
}

static int trainer_body(const cgrt_ctx *ctx, void *user) {
  struct trainer *t = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  t->bodies++;
  for (int i = 0; i < 2; i++) {
    int rc = cgrt_forward(t->rt, t->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  for (int i = 1; i >= 0; i--) {
    int rc = cgrt_backward(t->rt, t->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return cgrt_enqueue_host(ctx, count_run, &t->updates); /* the update, after the backward */
}

/*
 * Steps at every size of cp_sizes in turn under `conf` (lines of [cuda_graph] then
 * [dynamic_cp]), each followed by a synchronize: after each, every counter has moved by exactly
 * one, whatever the step did; by the end every bank has warmed up, captured and replayed.
 */
static void trainer_steps(const char *cuda_graph, const int *cps, int ncp, const char *dcp) {
  struct trainer t = {0};
  char ini[1024], sizes[64] = "";
  for (int i = 0, n = 0; i < ncp; i++)
    n += snprintf(sizes + n, sizeof(sizes) - (size_t)n, "%s%d", i ? " " : "", cps[i]);
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = dynamic_cp\n%s\n[dynamic_cp]\ncp_sizes = %s\n"
           "max_packed_tokens = %d\nmax_sequences = %d\n%s\n[runtime]\ndriver = host\n"
           "log = off\n",
           cuda_graph, sizes, CAP_TOKENS, CAP_SEQS, dcp);
  if (cgrt_open_string(&t.rt, ini) != 0)
    fail_msg("open: %s\n%s", cgrt_last_error(NULL), ini);
  static const char *const names[] = {"l0.attn", "l0.mlp"};
  cgrt_module_fn fwd[] = {trainer_attn_fwd, trainer_mlp_fwd};
  cgrt_module_fn bwd[] = {trainer_attn_bwd, trainer_mlp_bwd};
  for (int i = 0; i < 2; i++) {
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = names[i],
                          .kind = i ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .forward = fwd[i],
                          .backward = bwd[i],
                          .user = &t};
    assert_int_equal(cgrt_module_register(t.rt, &d, &t.m[i]), 0);
  }
  assert_int_equal(cgrt_set_world_comm(t.rt, NULL), 0);
  const int32_t lens[] = {8, 9};
  int seen[8][4] = {{0}}; /* steps per (cp size index, mode) */
  const int steps = 10 * ncp;
  for (int s = 0; s < steps; s++) {
    const int k = s % ncp;
    cgrt_step_desc d = {.struct_size = sizeof(d),
                        .phase = CGRT_PHASE_TRAIN,
                        .tokens = 17,
                        .seqlens = lens,
                        .num_sequences = 2,
                        .cp_size = cps[k],
                        .prepare = trainer_prepare,
                        .body = trainer_body,
                        .user = &t};
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    assert_int_equal(cgrt_step(t.rt, &d, &rep), 0);
    assert_int_equal(cgrt_synchronize(t.rt), 0);
    seen[k][rep.mode]++;
    const int64_t n = s + 1;
    if (t.updates != n || t.prepares != n || t.bodies > n)
      fail_msg("%s / cp_sizes %s / %s: step %d (cp %d, %s): %lld updates, %lld prepares and %lld "
               "body callbacks after %lld steps",
               cuda_graph, sizes, dcp, s, cps[k], cgrt_mode_name(rep.mode), (long long)t.updates,
               (long long)t.prepares, (long long)t.bodies, (long long)n);
    for (int i = 0; i < 2; i++)
      for (int dir = 0; dir < 2; dir++)
        if (t.module_runs[i][dir] != n)
          fail_msg("%s / cp_sizes %s / %s: step %d (cp %d, %s): %s's %s work ran %lld times in "
                   "%lld steps",
                   cuda_graph, sizes, dcp, s, cps[k], cgrt_mode_name(rep.mode), names[i],
                   dir ? "backward" : "forward", (long long)t.module_runs[i][dir], (long long)n);
  }
  for (int k = 0; k < ncp; k++)
    if (!seen[k][CGRT_MODE_WARMUP] || !seen[k][CGRT_MODE_CAPTURE] || !seen[k][CGRT_MODE_REPLAY])
      fail_msg("%s / cp_sizes %s / %s: cp %d ran %d warm-up, %d capture and %d replay steps",
               cuda_graph, sizes, dcp, cps[k], seen[k][CGRT_MODE_WARMUP],
               seen[k][CGRT_MODE_CAPTURE], seen[k][CGRT_MODE_REPLAY]);
  assert_int_equal(cgrt_close(t.rt), 0);
}

static void training_steps_run_the_body_once(void **state) {
  (void)state;
  static const int one[] = {1}, three[] = {1, 2, 4}, two[] = {1, 2};
  static const char *const step_scope = "warmup_steps = 2\n[host]\nnan_check = off";
  /* Module graphs: every kind, and attn only (mlp and the body's own work run eagerly). */
  trainer_steps("warmup_steps = 2", one, 1, "graph_slots = 2");
  trainer_steps("warmup_steps = 2", three, 3, "graph_slots = 2");
  trainer_steps("warmup_steps = 1\nmodules = attn", two, 2, "graph_slots = 3");
  /* One graph of the whole body per bank and slot. */
  trainer_steps(step_scope, one, 1, "graph_slots = 2\ngraph_scope = step");
  trainer_steps(step_scope, three, 3, "graph_slots = 2\ngraph_scope = step");
  trainer_steps("warmup_steps = 3\n[host]\nnan_check = off", two, 2,
                "graph_slots = 3\ngraph_scope = step");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(padding_metadata),
      cmocka_unit_test(banks_selected_by_cp_size),
      cmocka_unit_test(refuses_without_world_comm),
      cmocka_unit_test(slots_rotate_and_wait_for_readers),
      cmocka_unit_test(over_capacity_error_runs_nothing),
      cmocka_unit_test(over_capacity_eager_runs_at_its_size),
      cmocka_unit_test(banks_capture_on_their_own_steps),
      cmocka_unit_test(training_steps_run_the_body_once),
      cmocka_unit_test(step_scope_graphs_the_body_per_bank_and_slot),
      cmocka_unit_test(mixing_off_eager_work_waits_for_graphs),
      cmocka_unit_test(mixing_off_verified_replays_wait),
      cmocka_unit_test(mixing_off_partial_modules_wait_each_step),
      cmocka_unit_test(mixing_off_modules_without_collectives_never_wait),
      cmocka_unit_test(mixing_off_graphs_without_collectives_are_not_waited_for),
      cmocka_unit_test(clean_executables_are_tracked_exactly),
      cmocka_unit_test(older_module_desc_sees_the_communicator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
