/*
 * cp_time.h - dynamic_cp's cp sizes served by time ([dynamic_cp] by_time, issue 42).
 *
 * At a device-bound shape a bank's graphs can be slower than eager: each graph boundary ends the
 * programmatic-launch overlap eager keeps (docs/decisions.md, issue 42). With by_time, each bank
 * measures its graph steps and its eager steps on the device, in the host's own run, and serves
 * its cp size eagerly while its graphs are measurably slower.
 *
 * The schedule depends only on the bank's count of passes (its steps), so every rank of a cp
 * group, which runs the same steps at that size, measures, agrees and switches at the same step.
 * A round starts at the bank's first replaying pass, max(warmup_steps, graph_slots) +
 * graph_slots (every slot captured), and its CP_TIME_ROUND passes are:
 *   0 .. 7    graph steps, timed (kept when every scoped call, or the body, replayed);
 *   8         an eager step, run and not kept (a first eager step after graphs pays what the
 *             graphs leave: with NCCL's graph mixing off, the wait for them);
 *   9 .. 16   eager steps, timed.
 * Each step is timed by two timed events on the runtime's stream around prepare and body, and by
 * the host's clock (host->now_ns) around the same span; its cost is the larger of its device span
 * and its host time (backends/common/step_cost.h: in a backlogged stream an eager step's span
 * hides its launches; a host that waits inside the step counts the wait as host time). Read
 * at the end of pass 16, the round's decision: the bank waits for the round's last event (once
 * per round), takes the medians of graphs and eager, and the group agrees on them with comm_max
 * (host API minor 9): each rank then applies the noise rule (backends/common/noise_rule.h) to the
 * group's maxima, a group's step being as slow as its slowest rank's. Graphs are the first
 * incumbent; eager replaces them only when faster by more than NOISE_MARGIN, and graphs come back
 * on the same terms. After NOISE_RECHECK passes served one way, a new round. Graphs stay in the
 * cache while eager serves, for the next round.
 *
 * Replays on private copies (issue 43's mechanism, in dynamic_cp: a host whose buffers move while
 * it warms up, its graphs replaying on copies until they settle): a graph step whose report says
 * it copied (cgrt_step_report.copy_bytes) is left out of its round's samples, and the group agrees
 * (a third value in comm_max) whether any rank saw one; if so, the next round comes CP_TIME_EARLY
 * passes later, not NOISE_RECHECK, on every rank alike, and keeps such steps: copies still there
 * then are the cost, and the round decides on them. A round whose graph steps were all left out,
 * on every rank, keeps the way it had (graphs, at first) until that early round.
 */
#ifndef CGRT_DCP_CP_TIME_H
#define CGRT_DCP_CP_TIME_H

#include <stdint.h>

#include "cgrt/backend.h"

#define CP_TIME_GRAPHS 8 /* timed graph steps of a round */
#define CP_TIME_EAGER  9 /* eager steps of a round, the first not kept */
#define CP_TIME_ROUND  (CP_TIME_GRAPHS + CP_TIME_EAGER) /* passes of a round */
#define CP_TIME_EARLY  256 /* passes to the round after one whose graph steps made copies */

enum cp_way { CP_GRAPHS = 0, CP_EAGER = 1 };

/* The backend's figures, over its banks (cgrt_stats and cgrt_backend_figures). */
struct cp_time_figures {
  uint64_t timed_steps;       /* steps whose device time was read */
  uint64_t probe_steps;       /* steps run eagerly to measure eager while graphs serve */
  uint64_t graph_probe_steps; /* steps run as graphs to measure them while eager serves */
  uint64_t eager_steps;       /* steps run eagerly because eager was measured faster */
  uint64_t eager_sizes;       /* cp sizes served eagerly now */
  uint64_t rounds;            /* rounds decided */
  uint64_t copied_samples;    /* graph steps on private copies left out of a round's samples */
  uint64_t copied_rechecks;   /* rounds brought forward (CP_TIME_EARLY) for such steps */
};

/* One bank's measurements. */
struct cp_time;

/* How one pass is served; from cp_time_begin, handed back to cp_time_end. */
struct cp_time_step {
  enum cp_way way;
  int slot;     /* its pair of events, or -1: not timed */
  int64_t pass; /* the bank's pass it serves */
};

/*
 * A bank of cp size `cp` whose first round starts at its pass `first_round`; `fig` is the
 * backend's, shared by its banks, and outlives the bank's. CGRT_E_UNSUPPORTED with a sentence
 * when the core lacks the device timing (minor 8) or comm_max (minor 9).
 */
int cp_time_create(const struct cgrt_host_api *h, int cp, int64_t first_round,
                   struct cp_time_figures *fig, struct cp_time **out);
void cp_time_destroy(struct cp_time *t);

/* Before the bank's pass `pass` (its count of passes so far): how to serve it. Records the start
   event of a timed pass on the runtime's stream. */
int cp_time_begin(struct cp_time *t, int64_t pass, struct cp_time_step *st);
/*
 * After the pass ran (mode: ctx->mode after it; copied: its replays worked on private copies, the
 * step report's copy_bytes): records the end event of a timed pass; at the round's decision, waits
 * for the round's events and agrees with the group over `comm` (a collective of every rank of the
 * group, at the same pass on each).
 */
int cp_time_end(struct cp_time *t, const struct cp_time_step *st, cgrt_mode mode, int copied,
                void *comm);
/* The graphs were released: the bank warms up again, its first round as on a fresh runtime. */
void cp_time_reset(struct cp_time *t);

#endif
