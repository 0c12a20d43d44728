/* runtime.h - the runtime object and the core's internal services. Internal. */
#ifndef CGRT_RUNTIME_H
#define CGRT_RUNTIME_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "cgrt/backend.h"
#include "buckets/bucket_plan.h"
#include "comm/comm.h"
#include "config/config.h"
#include "driver.h"
#include "graphs/capture.h"
#include "graphs/graph_mem.h"
#include "base/faults.h"
#include "base/loader.h"
#include "base/log.h"

struct cgrt_tool_graph_event; /* cgrt/tool.h */

struct cgrt_module {
  struct cgrt_module_info info; /* what backends see; info.name points at `name` (first member:
                                   the module is found from its info) */
  char *name;
  char *call_names[2]; /* "layer3.attn fwd", "layer3.attn bwd": names calls in messages */
  cgrt_module_fn forward;
  cgrt_module_fn backward;
  void *user;
  cgrt_runtime *rt;
  int no_cp_comm;    /* cgrt_module_desc.no_cp_comm: its calls see ctx->comm NULL and never wait */
  int stages_inputs; /* cgrt_module_desc.stages_inputs: never handed private copies */
};

struct cgrt_runtime {
  struct cgrt_host_api host; /* lent to the backend; the functions find rt from it */
  struct cgrt_config cfg;
  struct cgrt_dev dev;
  int dev_open;
  void *stream;
  void *host_stream; /* cgrt_open_options.stream: used as `stream`, never destroyed */
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
  int in_step;
  int in_body;
  int in_call;
  int body_error;        /* code of the last failed cgrt call inside the body, 0 if none */
  int open_captures;     /* captures begun through the host API and not ended yet */
  int in_body_graph;     /* the body runs as one unit of a graph cache (run_body_graph) */
  unsigned call_modes;   /* bit per cgrt_mode among the step's module calls */
  int body_stages;       /* the step's desc->stages_inputs: its body never gets private copies */
  cgrt_ctx *ctx;         /* the ctx of the step in flight */
  cgrt_step_report *rep; /* its report */
  uint64_t step_index;

  struct cgrt_hooks hooks; /* cgrt_set_capture_hooks (graphs/capture.h) */

  struct cgrt_comms comms;   /* per cp size, after cgrt_set_world_comm */
  struct cgrt_faults faults; /* armed by tests (faults.h) */

  struct cgrt__graph_mem mem;      /* graph memory ledger (graph_mem.c) */
  struct cgrt_graph_cache *caches; /* every cache the backend created, for listings */
  /* cgrt_tool_watch_graphs (cgrt/tool.h): told of every instantiate, upload, launch, update. */
  void (*watch_fn)(void *user, const struct cgrt_tool_graph_event *ev);
  void *watch_user;
  struct cgrt_diag_state *diag; /* diagnose: the recording and the findings (diagnose.c) */
  /*
   * The frame of the core function running a host callback now (a module, the body, prepare),
   * NULL while cgrt's own code runs: device calls made below it were made by the host (diagnose
   * names the caller from there). Set around every callback, cleared during module calls.
   */
  const void *host_frame;
};

/* The runtime that lent the host API table h. */
#define CGRT_RT(h) ((cgrt_runtime *)((char *)(h)-offsetof(struct cgrt_runtime, host)))

/* "layer3.attn fwd" for a call, for messages. Static for the runtime's life. */
static inline const char *cgrt__call_name(const struct cgrt_call *c) {
  const struct cgrt_module *m = (const struct cgrt_module *)c->module;
  return m->call_names[c->dir == CGRT_BACKWARD];
}

/*
 * Opens a runtime from an already parsed configuration, taking ownership of *cfg (left zeroed).
 * For the cgrt command: `check --dry-run` switches the driver to host before opening.
 */
int cgrt__open_config(cgrt_runtime **out, struct cgrt_config *cfg, cgrt_log_fn log, void *log_user);

/*
 * buckets = adaptive: checks that the loaded backend follows adaptive buckets and sets up the
 * traffic histogram (rt->adapt); nothing for other distributions. Close frees it.
 */
int cgrt__adaptive_open(cgrt_runtime *rt);
void cgrt__adaptive_close(cgrt_runtime *rt);

/* The embedded default configuration (conf/default.ini), NUL-terminated. */
extern const char cgrt__default_config[];

#endif
