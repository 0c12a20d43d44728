/*
 * graphs.h - the graph layer's context: what graph_cache.c, capture.c, diagnose.c and graph_mem.c
 * share, instead of the whole runtime. Internal.
 *
 * The runtime embeds one (rt->graphs), fills the lent pointers when it is created and writes the
 * step's state as the step runs; the graph layer owns the rest (the ledger, the caches, the
 * capture hooks, the watcher, diagnose's state) and never reaches above it.
 */
#ifndef CGRT_GRAPHS_H
#define CGRT_GRAPHS_H

#include <stdint.h>

#include "capture.h"
#include "cgrt/backend.h"
#include "graph_mem.h"

struct cgrt_dev;              /* driver.h */
struct cgrt_log;              /* base/log.h */
struct cgrt_comms;            /* comm/comm.h */
struct cgrt_faults;           /* base/faults.h */
struct cgrt_graph_cache;      /* graph_cache.c */
struct cgrt_diag_state;       /* diagnose.c */
struct cgrt_tool_graph_event; /* cgrt/tool.h */

struct cgrt_graphs {
  /* Lent by the runtime, which owns them and outlives the graph layer's use of them. */
  const struct cgrt_host_api *host;    /* the host table: the device work, the module calls */
  struct cgrt_dev *dev;                /* the opened device and its driver */
  void *stream;                        /* the runtime's stream, NULL before it has one */
  struct cgrt_log *log;                /* the sink, its level and the last error */
  cgrt_stats *stats;                   /* the counters the graph layer counts in */
  const struct cgrt_config_view *view; /* the verify keys, memory_budget, diagnose */
  struct cgrt_comms *comms;            /* the communicators' capture bookkeeping and waits */
  struct cgrt_faults *faults;          /* armed by tests */

  /* The graph layer's own. */
  struct cgrt__graph_mem mem;      /* the graph memory ledger (graph_mem.c) */
  struct cgrt_graph_cache *caches; /* every cache the backend created, for listings */
  struct cgrt_hooks hooks;         /* cgrt_set_capture_hooks (capture.h) */
  /* cgrt_tool_watch_graphs (cgrt/tool.h): told of every instantiate, upload, launch, update. */
  void (*watch_fn)(void *user, const struct cgrt_tool_graph_event *ev);
  void *watch_user;
  struct cgrt_diag_state *diag; /* diagnose: the recording and the findings (diagnose.c) */
  /* The last recording (cgrt__record): its capture ended invalidated (the driver's end failed),
     and diagnose found none of its calls refused: it was broken from outside the captured work
     (another thread's cudaDeviceSynchronize), which gives a key up only after many in a row
     (graph_cache.c, CAPTURE_OUTSIDE_ATTEMPTS). */
  int capture_invalidated, broken_outside;
  /* [runtime] sync_guard: the runtime holds the driver's guard (runtime.c), and the count of the
     device's guarded synchronizes that went ahead at the bound, as last said after a capture. */
  int sync_guarded;
  uint64_t sync_late_seen;
  /* Per phase: step bodies in a row whose key (shape) a cache had not seen, whether that was
     said, and how many units have said it (the first at warn, the rest at info): graph_cache.c,
     UNREPEATED_SAY. Module calls keep theirs in their module. */
  uint32_t body_unrepeated[CGRT_PHASE_COUNT];
  int body_unrepeated_said[CGRT_PHASE_COUNT];
  int unrepeated_said;

  /* The step in flight, written by the runtime. */
  uint64_t step_index;
  int in_step;
  int in_body_graph;     /* the body runs as one unit of a graph cache (run_body_graph) */
  int body_stages;       /* the step's desc->stages_inputs: its body never gets private copies */
  cgrt_step_report *rep; /* the step's report, NULL outside a step */
  /*
   * The frame of the core function running a host callback now (a module, the body, prepare),
   * NULL while cgrt's own code runs: device calls made below it were made by the host (diagnose
   * names the caller from there). Set around every callback, cleared during module calls.
   */
  const void *host_frame;
};

#endif
