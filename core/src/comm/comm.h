/*
 * comm.h - communicators per context-parallel size, split from the host's world communicator
 * through the driver (the cuda driver's comm_split: ncclCommSplit). Internal. The host driver,
 * which has no NCCL, stands in placeholders.
 */
#ifndef CGRT_COMM_H
#define CGRT_COMM_H

#include <stddef.h>
#include <stdint.h>

#define CGRT_MAX_CP_SIZES 16

struct cgrt_ctx;
struct cgrt_dev;
struct cgrt_log;

struct cgrt_comms {
  int ready;            /* cgrt_set_world_comm done */
  struct cgrt_dev *dev; /* the driver's communicators were split on it (else placeholders) */
  int world_size;       /* ranks of the world communicator */
  int world_rank;
  int count;
  int cp[CGRT_MAX_CP_SIZES];
  int cp_rank[CGRT_MAX_CP_SIZES];
  void *comm[CGRT_MAX_CP_SIZES];
  char placeholder[CGRT_MAX_CP_SIZES]; /* their addresses are the host driver's communicators */
  /*
   * NCCL's graph mixing support is off for them (NCCL_GRAPH_MIXING_SUPPORT=0, read as NCCL reads
   * it): a collective launched outside a graph while a graph that uses the communicator is still
   * queued is then not supported, stream order or not. cgrt keeps that rule for its own calls.
   */
  int serial;
  int graphs_queued; /* serial, and a graph using them was launched since the stream drained */
  int wait_logged;   /* the first wait was logged */
  /*
   * With serial, which executables hold no work on the split communicators, so that launching
   * them does not make later eager work wait: a graph is clean if no callback was handed a
   * communicator while it was captured. An executable is clean only if it was instantiated (or
   * updated) from the last clean graph; anything else counts as using them.
   */
  int capture_comm;  /* a callback was handed a communicator since the last capture began */
  void *clean_graph; /* the last graph captured clean, until it is instantiated or destroyed */
  void **clean_execs;
  size_t num_clean, cap_clean;
};

/*
 * Splits one communicator of `world` per cp size (the num_cp_sizes entries of cp_sizes,
 * [dynamic_cp] cp_sizes) on dev's driver; with host_driver (the host driver, which has no NCCL) and
 * world NULL, stands in placeholders. Errors name the cause in log.
 */
int cgrt__comms_split(struct cgrt_comms *c, struct cgrt_dev *dev, int host_driver,
                      const int *cp_sizes, size_t num_cp_sizes, struct cgrt_log *log, void *world);

/* The communicator of cp size `cp` and this rank's index in it; CGRT_E_INVAL if none. */
int cgrt__comms_find(const struct cgrt_comms *c, int cp, void **comm, int *cp_rank);

/* A capture began: nothing in it has been handed a communicator yet. */
static inline void cgrt__comms_capture_begin(struct cgrt_comms *c) {
  c->capture_comm = 0;
  c->clean_graph = NULL;
}

/* A callback was handed `comm` (ctx->comm as it sees it): a capture in progress may use it. */
static inline void cgrt__comms_handed(struct cgrt_comms *c, const void *comm) {
  if (comm)
    c->capture_comm = 1;
}

/* A capture ended with `graph`; `used`: a callback was handed a communicator inside it. */
static inline void cgrt__comms_capture_end(struct cgrt_comms *c, void *graph, int used) {
  c->clean_graph = c->serial && !used ? graph : NULL;
}

/* `exec` was instantiated from, or updated to, `graph`; or it is destroyed (graph NULL). */
void cgrt__comms_exec_from(struct cgrt_comms *c, void *exec, void *graph);

/* `graph` is destroyed. */
static inline void cgrt__comms_graph_gone(struct cgrt_comms *c, void *graph) {
  if (graph && graph == c->clean_graph)
    c->clean_graph = NULL;
}

/* Whether `exec` is known to hold no work on the communicators. */
int cgrt__comms_exec_clean(const struct cgrt_comms *c, const void *exec);

/* `exec` was launched on the runtime's stream (the core's caches launch there; a backend that
 * launches a graph on another stream by hand orders that one itself). Inline: every launch. */
static inline void cgrt__comms_launched(struct cgrt_comms *c, void *exec) {
  if (c->serial && !c->graphs_queued && !cgrt__comms_exec_clean(c, exec))
    c->graphs_queued = 1;
}

/* The runtime's stream drained: no graph of it is queued. */
static inline void cgrt__comms_drained(struct cgrt_comms *c) {
  c->graphs_queued = 0;
}

/*
 * With mixing off, before work the core runs outside a graph (ctx->mode eager or warmup) that is
 * handed one of the split communicators: waits for the runtime's stream (on dev) to drain if a
 * graph was launched since it last did (counted in *waits, cgrt_stats.comm_waits; the first one
 * logged). `what` names the work for the log. Errors: the driver's, from the synchronization, in
 * log.
 */
int cgrt__comms_wait(struct cgrt_comms *c, struct cgrt_dev *dev, void *stream, struct cgrt_log *log,
                     uint64_t *waits, const struct cgrt_ctx *ctx, const char *what);

/* Destroys the split communicators (after every graph that uses them is gone). */
void cgrt__comms_destroy(struct cgrt_comms *c);

#endif
