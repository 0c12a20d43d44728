/* runtime.h - the runtime object and the core's internal services. Internal. */
#ifndef CGRT_RUNTIME_H
#define CGRT_RUNTIME_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cgrt/backend.h"
#include "buckets/bucket_plan.h"
#include "comm/comm.h"
#include "config/config.h"
#include "driver.h"
#include "graphs/graphs.h"
#include "module.h"
#include "base/faults.h"
#include "base/loader.h"
#include "base/log.h"

struct cgrt_runtime {
  struct cgrt_host_api host; /* lent to the backend; the functions find rt from it */
  struct cgrt_config cfg;
  struct cgrt_dev dev;
  int dev_open;
  void *stream;
  void *host_stream; /* cgrt_open_options.stream: used as `stream`, never destroyed */
  /*
   * On cgrt's own stream, the events that order it with the host's legacy default stream at a
   * step's entry and exit (runtime.c, order_with_host); NULL on the host's stream.
   */
  void *order_in, *order_out;
  /*
   * [runtime] max_queued_steps (runtime/step_queue.c): `depth` events, one a step in turn,
   * recorded on the stream at the step's exit; before step i is issued the host waits for the
   * record of step i - depth. depth 0: no bound, no events.
   */
  struct cgrt_step_queue {
    int depth;
    void *events[CGRT_CFG_MAX_QUEUED_STEPS];
    uint64_t recorded; /* bit per event: it holds the record of an earlier step's end */
  } queue;
  /* cgrt_last_error(rt): the sentence of the last public call that failed (guard.h) */
  char last_err[sizeof(((struct cgrt_log *)0)->err)];
  /*
   * A step of a phase the backend has no form for runs eagerly in the core (runtime.c): its module
   * calls go to the module directly, not to the backend. phase_said: the phases said once at info.
   */
  int core_eager;
  unsigned phase_said;
  /* cgrt_enqueue_host_copy's records of captured calls, freed with the graphs (host_copy.c) */
  struct cgrt_host_copy *host_copies;
  struct cgrt_backend_lib lib;
  void *be_state; /* the backend's state after a good init() */
  int be_ready;

  struct cgrt_module **modules;
  size_t num_modules;
  size_t cap_modules;

  int64_t *buckets; /* [inference] token buckets, ascending */
  size_t num_buckets;
  struct cgrt_bucket_adapt *adapt; /* buckets = adaptive: the traffic histogram, else NULL */

  cgrt_stats stats;
  struct cgrt_log log; /* the sink, its level and the last error (base/log.h) */

  /* The step in flight. */
  int in_body;
  int in_call;
  int body_error;      /* code of the last failed cgrt call inside the body, 0 if none */
  int open_captures;   /* captures begun through the host API and not ended yet */
  unsigned call_modes; /* bit per cgrt_mode among the step's module calls */
  cgrt_ctx *ctx;       /* the ctx of the step in flight */

  struct cgrt_comms comms;   /* per cp size, after cgrt_set_world_comm */
  struct cgrt_faults faults; /* armed by tests (faults.h) */

  /* The graph layer's context (graphs/graphs.h): what it is lent of the above, its own state
     (ledger, caches, hooks, watcher, diagnose) and the step's state it reads (in_step,
     step_index, the report, host_frame...), written here. */
  struct cgrt_graphs graphs;

  /*
   * Who calls it now (runtime/guard.c): the driving thread's token while one of its public calls
   * runs (0 between calls), the outermost of those calls, how many are in progress (callbacks
   * re-enter), and what they are doing while the host's callbacks run (CGRT_BUSY_*).
   */
  _Atomic uintptr_t owner;
  _Atomic(const char *) entry;
  unsigned depth;
  unsigned busy;
  const char *stream_runner; /* the public call whose stream sync runs host functions now */
  uint64_t serial;           /* unique in the process: a thread's refusal names its runtime */
};

/* The runtime that lent the host API table h. */
#define CGRT_RT(h) ((cgrt_runtime *)((char *)(h)-offsetof(struct cgrt_runtime, host)))

/*
 * Opens a runtime from an already parsed configuration, taking ownership of *cfg (left zeroed).
 * For the cgrt command: `check --dry-run` switches the driver to host before opening. stream: the
 * host's (cgrt_open_options.stream), or NULL.
 */
int cgrt__open_config(cgrt_runtime **out, struct cgrt_config *cfg, cgrt_log_fn log, void *log_user,
                      void *stream);

/*
 * buckets = adaptive: checks that the loaded backend follows adaptive buckets and sets up the
 * traffic histogram (rt->adapt); nothing for other distributions. Close frees it.
 */
int cgrt__adaptive_open(cgrt_runtime *rt);
void cgrt__adaptive_close(cgrt_runtime *rt);
/*
 * [runtime] max_queued_steps (step_queue.c): no more than that many steps queued ahead of the
 * device. open: creates the events (none at 0). wait: at a step's entry, outside any capture and
 * before its host time starts, waits until the step max_queued_steps before it has finished on the
 * device (counted in queue_waits, queue_wait_ns). record: at the step's exit, after its work and
 * its ordering with the host, also after a failed step, marks its end; 0, or the record's error
 * with its sentence. close: destroys the events. Errors come with their sentence; the runtime
 * stays usable after one.
 */
int cgrt__queue_open(cgrt_runtime *rt);
int cgrt__queue_wait(cgrt_runtime *rt);
int cgrt__queue_record(cgrt_runtime *rt);
void cgrt__queue_close(cgrt_runtime *rt);

/* Frees cgrt_enqueue_host_copy's records of captured calls: call only once no graph can run. */
void cgrt__host_copies_free(cgrt_runtime *rt);

/*
 * Waits for the stream (its host functions run meanwhile on the host driver, refused any cgrt
 * call), then has the backend free every graph and settles the ledger, for public call fn
 * (cgrt_release_graphs, cgrt_close; graph_api.c). Fills *report if not NULL. Returns the first
 * error; the graphs are freed in any case.
 */
int cgrt__graphs_release(cgrt_runtime *rt, const char *fn, cgrt_release_report *report);

/* The embedded default configuration (conf/default.ini), NUL-terminated. */
extern const char cgrt__default_config[];

#endif
