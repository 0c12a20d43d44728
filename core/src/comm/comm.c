/*
 * comm.c - one communicator per context-parallel size, split from the host's world communicator:
 * ranks in consecutive groups of cp (color rank / cp, key rank), so that a group's index of a
 * rank is rank % cp. The world communicator stays the host's; the split ones are cgrt's and are
 * destroyed at close, after the graphs that captured collectives on them.
 *
 * NCCL's graph mixing support (NCCL_GRAPH_MIXING_SUPPORT, on by default) lets a communicator's
 * captured and uncaptured collectives be outstanding together, at the price of an event wait and
 * an event record around every collective captured into a graph. A process that turns it off
 * must never launch a collective outside a graph while a graph that uses the communicator is
 * queued, and stream order does not make that safe (NCCL's documentation). cgrt keeps the rule
 * for what it runs itself: before work it runs outside a graph and hands a split communicator
 * (warm-up, a fallback, a verified replay's eager rerun, a step over capacity), it waits for the
 * graphs it launched on its stream. Only when a graph that may use them was launched since the
 * stream last drained, so replaying steps never wait; a graph captured while no callback was
 * handed a communicator (the graphs of modules registered with no_cp_comm) does not count.
 */
#include "comm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "driver.h"

int cgrt__comms_find(const struct cgrt_comms *c, int cp, void **comm, int *cp_rank) {
  for (int i = 0; i < c->count; i++)
    if (c->cp[i] == cp) {
      *comm = c->comm[i];
      *cp_rank = c->cp_rank[i];
      return 0;
    }
  return CGRT_E_INVAL;
}

/*
 * Whether NCCL's graph mixing support is off, read as NCCL 2.28 reads NCCL_GRAPH_MIXING_SUPPORT
 * (once per process, from the environment or nccl.conf, which NCCL copies into the environment at
 * its first initialization): strtoll in base 0, the default 1 when unset, empty or out of range.
 */
static int mixing_off(void) {
  const char *s = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  if (!s || !*s)
    return 0;
  errno = 0;
  long long v = strtoll(s, NULL, 0);
  return errno == 0 && v == 0;
}

static int clean_index(const struct cgrt_comms *c, const void *exec, size_t *at) {
  for (size_t i = 0; i < c->num_clean; i++)
    if (c->clean_execs[i] == exec) {
      *at = i;
      return 1;
    }
  return 0;
}

void cgrt__comms_exec_from(struct cgrt_comms *c, void *exec, void *graph) {
  size_t at;
  int known = clean_index(c, exec, &at);
  int clean = graph && graph == c->clean_graph;
  if (clean)
    c->clean_graph = NULL; /* one executable per capture: a later one counts as using them */
  if (known && !clean) {
    c->clean_execs[at] = c->clean_execs[--c->num_clean];
  } else if (clean && !known) {
    if (c->num_clean == c->cap_clean) {
      size_t cap = c->cap_clean ? 2 * c->cap_clean : 16;
      void **v = realloc(c->clean_execs, cap * sizeof(*v));
      if (!v)
        return; /* left out: it counts as using them, which only costs a wait */
      c->clean_execs = v;
      c->cap_clean = cap;
    }
    c->clean_execs[c->num_clean++] = exec;
  }
}

int cgrt__comms_exec_clean(const struct cgrt_comms *c, const void *exec) {
  size_t at;
  return clean_index(c, exec, &at);
}

/* A driver failure as the last error (CGRT_E_NOTREADY is an answer, not a failure). */
static int dev_rc(struct cgrt_dev *dev, struct cgrt_log *log, int rc) {
  if (rc != 0 && rc != CGRT_E_NOTREADY)
    cgrt__fail(log, rc, "%s", dev->err);
  return rc;
}

int cgrt__comms_wait(struct cgrt_comms *c, struct cgrt_dev *dev, void *stream, struct cgrt_log *log,
                     uint64_t *waits, const cgrt_ctx *ctx, const char *what) {
  if (!c->graphs_queued || !ctx->comm ||
      (ctx->mode != CGRT_MODE_EAGER && ctx->mode != CGRT_MODE_WARMUP))
    return 0;
  int ours = 0;
  for (int i = 0; i < c->count && !ours; i++)
    ours = c->comm[i] == ctx->comm;
  int capturing = 0;
  if (!ours || dev_rc(dev, log, dev->drv->capture_status(dev, stream, &capturing)) != 0 ||
      capturing)
    return 0;
  if (!c->wait_logged) {
    c->wait_logged = 1;
    cgrt__log(log, CGRT_LOG_INFO,
              "%s runs outside a graph after a graph that may use its communicator was "
              "launched: it waits for the stream to drain first, since NCCL's graph mixing "
              "support is off (NCCL_GRAPH_MIXING_SUPPORT=0); cgrt_stats.comm_waits counts these "
              "waits (if every step waits: graph every module that issues collectives, register "
              "those that issue none on the cp communicator with no_cp_comm = 1, or leave mixing "
              "on)",
              what);
  }
  (*waits)++;
  int rc = dev->drv->stream_sync(dev, stream);
  if (rc == 0)
    cgrt__comms_drained(c);
  return dev_rc(dev, log, rc);
}

/* The host driver: a world as large as the largest cp size, this process its rank 0. */
static int split_placeholders(struct cgrt_comms *c, const int *cp_sizes, size_t num_cp_sizes) {
  c->world_rank = 0;
  c->world_size = 1;
  for (size_t i = 0; i < num_cp_sizes; i++)
    if (cp_sizes[i] > c->world_size)
      c->world_size = cp_sizes[i];
  for (size_t i = 0; i < num_cp_sizes; i++) {
    c->cp[c->count] = cp_sizes[i];
    c->cp_rank[c->count] = 0;
    c->comm[c->count] = &c->placeholder[c->count];
    c->count++;
  }
  return 0;
}

/* The driver's communicators (NCCL on the cuda driver): one split of the world per cp size. */
static int split_world(struct cgrt_comms *c, struct cgrt_dev *dev, const int *cp_sizes,
                       size_t num_cp_sizes, struct cgrt_log *log, void *world) {
  if (dev->drv->comm_info(dev, world, &c->world_size, &c->world_rank) != 0)
    return cgrt__fail(log, CGRT_E_DEVICE, "cgrt_set_world_comm: %s", dev->err);
  for (size_t i = 0; i < num_cp_sizes; i++)
    if (c->world_size % cp_sizes[i] != 0)
      return cgrt__fail(log, CGRT_E_INVAL,
                        "cgrt_set_world_comm: [dynamic_cp] cp_sizes has %d, which does not divide "
                        "the world of %d ranks; use divisors of the world size",
                        cp_sizes[i], c->world_size);
  c->dev = dev;
  for (size_t i = 0; i < num_cp_sizes; i++) {
    int cp = cp_sizes[i];
    void *split = NULL;
    /* Collective over the world: every rank splits every size, in the same order. */
    if (dev->drv->comm_split(dev, world, c->world_rank / cp, c->world_rank, &split) != 0)
      return cgrt__fail(log, CGRT_E_DEVICE, "cgrt_set_world_comm: for cp size %d: %s", cp,
                        dev->err);
    c->cp[c->count] = cp;
    c->cp_rank[c->count] = c->world_rank % cp;
    c->comm[c->count] = split;
    c->count++;
  }
  return 0;
}

int cgrt__comms_split(struct cgrt_comms *c, struct cgrt_dev *dev, int host_driver,
                      const int *cp_sizes, size_t num_cp_sizes, struct cgrt_log *log, void *world) {
  if (c->ready)
    return cgrt__fail(log, CGRT_E_INVAL, "cgrt_set_world_comm: called twice; call it once");
  if (num_cp_sizes > CGRT_MAX_CP_SIZES)
    return cgrt__fail(log, CGRT_E_INVAL, "cgrt_set_world_comm: at most %d cp sizes",
                      CGRT_MAX_CP_SIZES);
  int rc;
  if (host_driver && !world) {
    rc = split_placeholders(c, cp_sizes, num_cp_sizes);
  } else if (!world) {
    rc = cgrt__fail(log, CGRT_E_INVAL, "cgrt_set_world_comm: world_comm is NULL");
  } else if (host_driver) {
    rc = cgrt__fail(log, CGRT_E_INVAL,
                    "cgrt_set_world_comm: the host driver has no NCCL; pass NULL for its "
                    "stand-in communicators");
  } else if (!dev->drv->comm_split || !dev->drv->comm_info || !dev->drv->comm_destroy) {
    rc = cgrt__fail(log, CGRT_E_UNSUPPORTED,
                    "cgrt_set_world_comm: the %s driver was built without NCCL; rebuild it with "
                    "NCCL to use context parallelism",
                    dev->drv->name);
  } else {
    rc = split_world(c, dev, cp_sizes, num_cp_sizes, log, world);
  }
  if (rc != 0) {
    cgrt__comms_destroy(c);
    return rc;
  }
  c->ready = 1;
  c->serial = mixing_off();
  cgrt__log(log, CGRT_LOG_INFO, "communicators: world rank %d of %d, %d cp sizes split; %s",
            c->world_rank, c->world_size, c->count,
            c->serial ? "NCCL graph mixing off (NCCL_GRAPH_MIXING_SUPPORT=0): work cgrt runs "
                        "outside a graph on them waits for the graphs it launched"
                      : "NCCL graph mixing on: every collective captured into a graph gets an "
                        "event wait and record (module scope at cp 2 replayed about 7% slower "
                        "with them on two H200s); a host whose own communicators never have an "
                        "uncaptured collective while a graph using them is queued may set "
                        "NCCL_GRAPH_MIXING_SUPPORT=0 before NCCL starts (README)");
  return 0;
}

void cgrt__comms_destroy(struct cgrt_comms *c) {
  free(c->clean_execs);
  if (c->dev)
    for (int i = 0; i < c->count; i++)
      if (c->comm[i])
        c->dev->drv->comm_destroy(c->dev, c->comm[i]);
  memset(c, 0, sizeof(*c));
}
