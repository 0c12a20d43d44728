/*
 * driver_host.c - the `host` driver: a CPU executor with the stream and graph semantics of CUDA.
 *
 * It lets every backend's policy run end to end without a GPU (CI), and lets `cgrt check
 * --dry-run` show which graphs a configuration builds. What it models:
 *
 * - A stream is a FIFO queue of operations: host functions, copies, event records and the nodes
 *   of launched graphs. Work is DEFERRED: enqueuing runs nothing. The queue runs, in order, on the
 *   calling thread when the stream is synchronized: stream_sync runs all of it, event_sync runs
 *   it up to that event's record. event_query never runs work: it answers CGRT_E_NOTREADY until
 *   the record's position has run, 0 after (unless a cost model sets device_beside, below). This
 * deterministic asynchrony catches code that assumes work ran at enqueue time (on a GPU, a race).
 * - capture_begin makes the stream record its work into a graph instead of queueing it; captures
 *   do not nest. What CUDA forbids during a capture fails here with CGRT_E_CAPTURE and invalidates
 *   the capture, as CUDA does (cudaErrorStreamCaptureUnsupported, then
 *   cudaErrorStreamCaptureInvalidated at the end). The rules, measured on CUDA 13.0 (driver 580)
 *   with one thread:
 *   . in every mode: stream_sync of the capturing stream; event_query or event_sync of an event
 *     recorded into the running capture; exec_launch into the capturing stream (CUDA does not
 *     capture graph launches);
 *   . while a capture begun in capture_mode global or thread_local runs (the two differ only for
 *     other threads, and a dev has one thread): stream_sync of any stream, event_query or
 *     event_sync of any event, mem_alloc, graph_instantiate; mem_free frees but invalidates the
 *     capture (the cuda driver does the same). relaxed allows these;
 *   . allowed: asynchronous work on other streams, and exec_destroy (the cuda driver destroys in
 *     relaxed interaction mode, so that an executable can be evicted during a capture).
 *   Work enqueued into an invalidated capture is refused. capture_end gives the graph, or NULL and
 *   CGRT_E_CAPTURE with the reason; either way the stream is not capturing afterwards and works
 *   normally. A capture rules only its own dev: CUDA's global mode, which reaches every thread of
 *   the process, is not modelled across devs.
 * - A graph is a list of nodes: host function, copy, event record. graph_instantiate freezes a
 *   copy, so graphs and executables are destroyed independently. exec_launch enqueues the nodes'
 *   parameters as they are at launch: a later exec_update or exec_destroy does not change a launch
 *   that has not run yet. exec_update swaps every parameter (arguments, copy addresses and sizes,
 *   events) when both have the same number of nodes, of the same types in the same order, and
 *   host nodes call the same functions (stricter than CUDA, which also swaps a host node's
 *   function); otherwise it refuses with CGRT_E_UPDATE, names the first difference and leaves the
 *   executable unchanged.
 * - Device memory is host memory, zeroed (calloc) so that tests are deterministic.
 * - Graph memory is modelled as CUDA manages it (graph_mem.c accounts for it per graph on both
 *   drivers): mem_alloc_async inside a capture records an allocation node (its address, fixed
 *   for the graph's life, is valid at once), mem_free_async of it a free node. An executable's
 *   allocations are mapped from the device's graph pool when it is first uploaded or launched.
 *   Allocations freed inside their own graph can share physical memory with those of every other
 *   executable (they never run at the same time on a stream), so they need the largest such
 *   footprint once; allocations a graph never frees cannot be shared. `used` is the sum of the
 *   unshared footprints plus the largest shared one over mapped executables; `reserved` only
 *   grows, to cover `used`, until graph_mem_trim gives back what no executable uses. By default
 *   reserved grows and trims to the byte; cgrt__host_set_pool_granule (tests only, off by
 *   default) makes it grow and trim in whole granules, as CUDA 13 does in 32 MiB ones (a graph
 *   allocating 1 MB reserves 32 MiB, 33 MiB reserves 64 MiB), so that small graphs share one
 *   granule and a large one needs several. Each
 *   executable also owns HOST_EXEC_NODE_BYTES of device memory per node, from instantiate to
 *   destroy. mem_info reports the physical memory size as the device's total and that total less
 *   the graph pool and the executables' own memory as free, so it moves only with graphs.
 * - Destroying a stream with pending work runs none of it and frees it; events recorded there
 *   count as complete. Destroying a capturing stream ends the capture and discards it. close
 *   destroys the streams still open.
 * - CGRT_LEGACY_STREAM ((void *)1, as cudaStreamLegacy) is the dev's legacy default stream: work
 *   can be queued there (it runs when that stream is synchronized) but it is never captured.
 * - stream_wait queues a wait for an event's last record: when the queue reaches it, the stream
 *   of that record runs up to it first, so work on two streams keeps the order the waits give it
 *   (and, without a wait, runs in whatever order the syncs come: a race on a GPU is a wrong
 *   result here, every time).
 * - Diagnose: while a capture runs, each rule that refuses a call, and each call that is captured
 *   but suspicious (a mem_alloc or mem_free in relaxed mode, a copy from or to memory that did not
 *   come from mem_alloc, i.e. "pageable" host memory, or from it to host memory, work on the
 *   legacy stream), is reported through dev->note, if the core set it.
 *
 * - Time, modelled (cgrt__host_set_cost, tests only; all costs 0 by default, so no time passes):
 *   a simulated host clock advances by launch_ns at each host function or copy enqueued outside a
 *   capture and by graph_launch_ns at each exec_launch; each stream has a simulated device clock.
 *   A node starts when its stream has finished the work before it and the host had enqueued it
 *   (the host clock then), and a host function takes node_ns(fn, arg), plus graph_node_ns when it
 *   runs as part of a launched graph. An event record takes its stream's clock when it runs, and
 *   event_elapsed gives the difference of two records' clocks (CGRT_E_NOTREADY until both ran).
 *   A sync moves the host clock up to the stream's (the host waited). The host API's now_ns
 *   reads the simulated host clock (0 while no cost model is set). Queued work runs only when
 *   something waits for it, unless a test lets the device keep up with the host
 *   (cgrt__host_run_device: what starts by the host clock runs, the host waiting for nothing), as
 *   a GPU runs beside a host that never waits; with device_beside the same happens before every
 *   event query or elapsed-time read, so whether the device has reached an event by the host's
 *   clock reads as on a GPU. So eager work of cheap
 *   nodes is bound by its launches, graphs by their nodes, as on a GPU, and a test can make a
 *   padded graph slower than eager work of fewer tokens. With queue_depth set, a launch (an eager
 *   host function or copy, or a graph launch: one whatever its nodes) onto a stream already
 *   holding that many unfinished launches waits until the oldest has finished: its work runs then
 *   and the host clock moves up to its end, as a host far ahead of a GPU waits in its launches.
 * - Communicators: none of its own (no comm_split); the core stands in one per cp size for a world
 *   of one rank, so comm_max, the maximum over a group, is this rank's values, unless a test
 *   stands in the other ranks' (cgrt__host_set_peers).
 *
 * All state hangs off the dev instance, none is global: many runtimes live in one process. One
 * thread drives a dev. Host functions must not call the driver (as with cudaLaunchHostFunc); a
 * synchronizing call from inside one is refused with CGRT_E_STATE.
 *
 * Built into the core (cgrt__driver_host), so that the host path needs no object beside libcgrt.
 * The loader's tests also build this file as a driver object answering to another name
 * (CGRT_HOST_DRIVER_OBJECT_NAME, tests/fixtures), to run the loaded path without a GPU.
 */
#include "driver.h"

#ifdef CGRT_HOST_DRIVER_OBJECT_NAME
#define HOST_TABLE  cgrt_driver_v1
#define HOST_NAME   CGRT_HOST_DRIVER_OBJECT_NAME
#define HOST_EXPORT CGRT_DRIVER_EXPORT
HOST_EXPORT extern const struct cgrt_driver cgrt_driver_v1;
#else
#define HOST_TABLE cgrt__driver_host
#define HOST_NAME  "host"
#define HOST_EXPORT
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum node_type { NODE_HOST, NODE_MEMCPY, NODE_EVENT, NODE_ALLOC, NODE_FREE, NODE_WAIT };
static const char *const node_type_names[] = {"host function",     "memcpy",      "event record",
                                              "memory allocation", "memory free", "event wait"};

/* Device memory an executable owns per node (kernel parameters, launch state), modelled. */
#define HOST_EXEC_NODE_BYTES 256

/* Handle tags: a handle of the wrong kind, or of another dev, is refused instead of misused. */
enum {
  MAGIC_STREAM = 0x68537472,
  MAGIC_EVENT = 0x68457665,
  MAGIC_GRAPH = 0x68477261,
  MAGIC_EXEC = 0x68457865
};

struct host_event;

/* A stream-ordered allocation: of a graph (held by its nodes) or eager (held by the dev). */
struct host_block {
  int refs;
  size_t bytes;
  void *ptr;
  struct host_block *next; /* eager blocks: the dev's list */
};

struct node_list {
  struct node *v;
  size_t n, cap;
};

/* One operation: queued on a stream, or a node of a graph. */
struct node {
  enum node_type type;
  void (*fn)(void *); /* NODE_HOST */
  void *arg;
  void *dst; /* NODE_MEMCPY */
  const void *src;
  size_t bytes;
  struct host_event *event; /* NODE_EVENT, NODE_WAIT: holding a reference */
  uint64_t seq;             /* NODE_EVENT on a queue: which record of `event` this is;
                               NODE_WAIT: the record waited for */
  struct host_block *block; /* NODE_ALLOC, NODE_FREE: holding a reference */
  uint64_t issued;          /* on a queue: the simulated host clock when it was enqueued */
  int in_graph;             /* on a queue: part of a launched graph (cost model) */
  int entry;                /* on a queue: ends a launch (an eager one, or a graph's last node) */
};

struct host_alloc {
  char *ptr;
  size_t bytes;
};

struct host_dev {
  struct host_stream *streams; /* every live stream, for the capture rules that span streams */
  uint64_t next_id;            /* ids of streams and captures, never reused */
  int running;                 /* a sync is running host functions */
  struct host_graph *execs;    /* every live executable, for the graph pool */
  struct host_block *eager;    /* stream-ordered allocations made outside captures */
  uint64_t pool_used, pool_reserved; /* the graph memory pool (see the top of the file) */
  uint64_t pool_granule;             /* reserved grows and trims in these (0: bytes) */
  uint64_t exec_bytes;               /* device memory the executables own */
  struct host_stream *legacy;        /* CGRT_LEGACY_STREAM: never captured */
  struct host_alloc *allocs; /* live mem_alloc blocks: "device" memory, for diagnose's notes */
  size_t num_allocs, cap_allocs;
  struct cgrt_host_cost cost; /* the simulated clocks' cost model (all 0: no time passes) */
  uint64_t host_clock;        /* simulated host time, ns: enqueues and waits advance it */
  /* the other ranks of a group, in comm_max (cgrt__host_set_peers; tests only) */
  void (*peers)(void *user, const void *comm, double *values, int n);
  void *peers_user;
};

struct host_graph {
  uint32_t magic; /* MAGIC_GRAPH or MAGIC_EXEC: one shape serves both */
  struct host_dev *hd;
  struct node_list nodes;
  /* executables only */
  struct host_graph *next_exec;
  uint64_t shared;   /* peak of the allocations it frees itself: shareable between graphs */
  uint64_t unshared; /* allocations it never frees */
  int mapped;        /* uploaded or launched: its allocations hold pool memory */
};

struct host_stream {
  uint32_t magic;
  struct host_dev *hd;
  struct host_stream *next;
  uint64_t id;
  struct node_list queue; /* queue.v[head .. n) has not run yet */
  size_t head;
  struct host_graph *capture; /* non-NULL while capturing */
  uint64_t capture_id;
  cgrt_capture_mode capture_mode;
  char invalid[256]; /* why the capture was invalidated; "" while it is valid */
  uint64_t clock;    /* simulated device time, ns, at which the work run so far has finished */
  uint64_t entries;  /* launches queued that have not finished (cost.queue_depth) */
};

struct host_event {
  uint32_t magic;
  struct host_dev *hd;
  int refs;            /* the handle, plus every queued record and graph node naming it */
  uint64_t records;    /* records enqueued so far; the last one is the one that counts */
  uint64_t done;       /* the highest record that has run */
  uint64_t stream_id;  /* the stream of the last record */
  uint64_t capture_id; /* the capture it was last recorded into, 0 if none */
  uint64_t at;         /* simulated device time, ns, when record `done` ran */
};

static const char *mode_name(cgrt_capture_mode mode) {
  return mode == CGRT_CAPTURE_GLOBAL         ? "global"
         : mode == CGRT_CAPTURE_THREAD_LOCAL ? "thread_local"
                                             : "relaxed";
}

/* ---------------------------------------------------------------- handles */

static struct host_stream *as_stream(struct cgrt_dev *dev, void *h) {
  if (h == CGRT_LEGACY_STREAM && dev->impl)
    return ((struct host_dev *)dev->impl)->legacy;
  struct host_stream *s = h;
  return s && s->magic == MAGIC_STREAM && s->hd == dev->impl ? s : NULL;
}

static struct host_graph *as_graph(struct cgrt_dev *dev, void *h, uint32_t magic) {
  struct host_graph *g = h;
  return g && g->magic == magic && g->hd == dev->impl ? g : NULL;
}

static struct host_event *as_event(struct cgrt_dev *dev, void *h) {
  struct host_event *e = h;
  return e && e->magic == MAGIC_EVENT && e->hd == dev->impl ? e : NULL;
}

static int bad_handle(struct cgrt_dev *dev, const char *op, const char *what) {
  return cgrt__dev_fail(dev, CGRT_E_INVAL,
                        "%s: invalid %s (NULL, destroyed, or not a handle of this host driver "
                        "instance)",
                        op, what);
}

static void event_unref(struct host_event *e) {
  if (--e->refs == 0) {
    e->magic = 0;
    free(e);
  }
}

static void block_unref(struct host_block *b) {
  if (--b->refs == 0) {
    free(b->ptr);
    free(b);
  }
}

/* ---------------------------------------------------------------- node lists */

/* Drops what a node holds: its event reference. */
static void node_release(struct node *n) {
  if (n->event)
    event_unref(n->event);
  n->event = NULL;
  if (n->block)
    block_unref(n->block);
  n->block = NULL;
}

static void list_free(struct node_list *l) {
  for (size_t i = 0; i < l->n; i++)
    node_release(&l->v[i]);
  free(l->v);
  memset(l, 0, sizeof(*l));
}

static int list_reserve(struct node_list *l, size_t extra) {
  if (l->n + extra <= l->cap)
    return 0;
  size_t cap = l->cap ? l->cap : 8;
  while (cap < l->n + extra)
    cap *= 2;
  struct node *v = realloc(l->v, cap * sizeof(*v));
  if (!v)
    return -1;
  l->v = v;
  l->cap = cap;
  return 0;
}

/* A copy that takes its own event references. */
static int list_copy(struct node_list *dst, const struct node_list *src) {
  memset(dst, 0, sizeof(*dst));
  if (list_reserve(dst, src->n))
    return -1;
  for (size_t i = 0; i < src->n; i++) {
    struct node n = src->v[i];
    if (n.event)
      n.event->refs++;
    if (n.block)
      n.block->refs++;
    dst->v[dst->n++] = n;
  }
  return 0;
}

/* The first difference that keeps exec from taking graph's parameters, into why; 0 if none. */
static int list_differ(const struct node_list *exec, const struct node_list *graph, char *why,
                       size_t len) {
  if (exec->n != graph->n) {
    snprintf(why, len, "node count differs (executable: %zu, graph: %zu)", exec->n, graph->n);
    return 1;
  }
  for (size_t i = 0; i < exec->n; i++) {
    const struct node *a = &exec->v[i], *b = &graph->v[i];
    if (a->type != b->type) {
      snprintf(why, len, "node %zu: type differs (executable: %s, graph: %s)", i,
               node_type_names[a->type], node_type_names[b->type]);
      return 1;
    }
    if (a->type == NODE_HOST && a->fn != b->fn) {
      snprintf(why, len, "node %zu: host function differs", i);
      return 1;
    }
    if (a->type == NODE_ALLOC || a->type == NODE_FREE) {
      snprintf(why, len, "node %zu: a graph memory node cannot be updated in place", i);
      return 1;
    }
  }
  return 0;
}

/* Copies every parameter of graph's nodes into exec's (same topology: cannot fail). */
static void list_take_params(struct node_list *exec, const struct node_list *graph) {
  for (size_t i = 0; i < exec->n; i++) {
    struct node *a = &exec->v[i];
    const struct node *b = &graph->v[i];
    a->arg = b->arg;
    a->dst = b->dst;
    a->src = b->src;
    a->bytes = b->bytes;
    if (a->type == NODE_EVENT) {
      b->event->refs++;
      event_unref(a->event);
      a->event = b->event;
    }
  }
}

/* ---------------------------------------------------------------- streams */

/* Appends n to the queue (capacity reserved by the caller); the queue takes n's references. */
static void queue_put(struct host_stream *s, struct node *n) {
  s->queue.v[s->queue.n++] = *n;
}

/* Room for `extra` more queued nodes; compacts the queue's run prefix first. */
static int queue_reserve(struct host_stream *s, size_t extra) {
  if (s->head > 0 && s->queue.n + extra > s->queue.cap) {
    memmove(s->queue.v, s->queue.v + s->head, (s->queue.n - s->head) * sizeof(*s->queue.v));
    s->queue.n -= s->head;
    s->head = 0;
  }
  return list_reserve(&s->queue, extra);
}

/* Queues a launch's nodes; each event record node makes a new record of its event. */
static void queue_launch(struct host_stream *s, const struct node_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    struct node n = l->v[i];
    n.issued = s->hd->host_clock;
    n.in_graph = 1;
    if (n.type == NODE_ALLOC || n.type == NODE_FREE)
      continue; /* nothing to run: the memory was mapped at upload or launch */
    if (n.type == NODE_EVENT) {
      n.event->refs++;
      n.seq = ++n.event->records;
      n.event->stream_id = s->id;
      n.event->capture_id = 0;
    }
    queue_put(s, &n);
  }
  /* The graph's memory outlives the launch's work even if the executable goes first, as in
     CUDA: a node after the launch holds each allocation until it has run. */
  for (size_t i = 0; i < l->n; i++)
    if (l->v[i].type == NODE_ALLOC) {
      struct node hold = {.type = NODE_FREE, .block = l->v[i].block};
      hold.block->refs++;
      queue_put(s, &hold);
    }
}

static void stream_run(struct host_stream *s, struct host_event *ev, uint64_t seq);
static struct host_stream *stream_by_id(struct host_dev *hd, uint64_t id);

/*
 * The cost model: a node starts when the stream has finished the work before it and the host has
 * enqueued it, and takes what the model says it costs (a host function: node_ns, plus
 * graph_node_ns inside a launched graph).
 */
static uint64_t node_start(struct host_stream *s, const struct node *n) {
  if (s->clock < n->issued)
    s->clock = n->issued;
  return s->clock;
}

static void node_run(struct host_stream *s, const struct node *n) {
  const struct cgrt_host_cost *cost = &s->hd->cost;
  node_start(s, n);
  switch (n->type) {
  case NODE_WAIT: {
    /* The work before that record first: the other stream runs up to it, here, now. */
    struct host_stream *t =
        n->event->done < n->seq ? stream_by_id(n->event->hd, n->event->stream_id) : NULL;
    if (t)
      stream_run(t, n->event, n->seq);
    if (n->event->done >= n->seq && s->clock < n->event->at)
      s->clock = n->event->at;
    break;
  }
  case NODE_HOST:
    n->fn(n->arg);
    if (cost->node_ns)
      s->clock += cost->node_ns(cost->user, n->fn, n->arg);
    if (n->in_graph)
      s->clock += cost->graph_node_ns;
    break;
  case NODE_MEMCPY:
    if (n->bytes)
      memmove(n->dst, n->src, n->bytes);
    break;
  case NODE_EVENT:
    if (n->event->done < n->seq) {
      n->event->done = n->seq;
      n->event->at = s->clock;
    }
    break;
  case NODE_ALLOC:
  case NODE_FREE: /* an eager free: the memory goes when the node is released after it ran */
    break;
  }
}

/* Runs the queue's next node (the dev's `running` set by the caller). */
static void run_next(struct host_stream *s) {
  /* A copy: a host function may (wrongly) enqueue, moving the queue. */
  struct node n = s->queue.v[s->head++];
  node_run(s, &n);
  if (n.entry && s->entries > 0)
    s->entries--;
  node_release(&n);
}

/* After a run: an emptied queue starts over at its beginning. */
static void queue_rewind(struct host_stream *s) {
  if (s->head == s->queue.n)
    s->head = s->queue.n = 0;
}

/*
 * Runs the queue in order until it is empty, or, if ev is given, its record `seq` has run, or the
 * next node would start after `until` (its stream free and the node issued by then; UINT64_MAX:
 * no such bound).
 */
static void stream_run_to(struct host_stream *s, struct host_event *ev, uint64_t seq,
                          uint64_t until) {
  int was_running = s->hd->running; /* a wait node runs another stream from inside a run */
  s->hd->running = 1;
  while (s->head < s->queue.n && !(ev && ev->done >= seq)) {
    const struct node *next = &s->queue.v[s->head];
    if (until != UINT64_MAX && (s->clock > next->issued ? s->clock : next->issued) > until)
      break;
    run_next(s);
  }
  s->hd->running = was_running;
  queue_rewind(s);
}

/* Runs the queue in order until it is empty or, if ev is given, its record `seq` has run. */
static void stream_run(struct host_stream *s, struct host_event *ev, uint64_t seq) {
  stream_run_to(s, ev, seq, UINT64_MAX);
}

/*
 * Before a launch onto s: with cost.queue_depth launches queued and unfinished, the host waits
 * until the oldest has finished (its work runs now), as CUDA's launch queue makes a host far ahead
 * of the device wait; the host clock moves up to then.
 */
static void launch_slot(struct host_stream *s) {
  struct host_dev *hd = s->hd;
  uint64_t depth = hd->cost.queue_depth;
  if (!depth || hd->running || s->entries < depth)
    return;
  hd->running = 1;
  while (s->entries >= depth && s->head < s->queue.n)
    run_next(s);
  hd->running = 0;
  queue_rewind(s);
  if (hd->host_clock < s->clock)
    hd->host_clock = s->clock; /* the host waited for a place in the queue */
}

static struct host_stream *stream_by_id(struct host_dev *hd, uint64_t id) {
  for (struct host_stream *t = hd->streams; t; t = t->next)
    if (t->id == id)
      return t;
  return NULL;
}

static struct host_stream *stream_by_capture(struct host_dev *hd, uint64_t capture_id) {
  for (struct host_stream *t = hd->streams; capture_id && t; t = t->next)
    if (t->capture && t->capture_id == capture_id)
      return t;
  return NULL;
}

static void graph_free(struct host_graph *g) {
  if (!g)
    return;
  list_free(&g->nodes);
  g->magic = 0;
  free(g);
}

/* ---------------------------------------------------------------- capture rules */

/* Tells diagnose (dev->note) about a call the capture rules met. */
static void note(struct cgrt_dev *dev, cgrt_finding_kind kind, int refused, const char *op,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void note(struct cgrt_dev *dev, cgrt_finding_kind kind, int refused, const char *op,
                 const char *fmt, ...) {
  if (!dev->note)
    return;
  char detail[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof(detail), fmt, ap);
  va_end(ap);
  dev->note(dev, kind, refused, op, refused ? CGRT_E_CAPTURE : 0, detail);
}

/* The stream of a capture running on the dev, or NULL. */
static struct host_stream *any_capture(struct host_dev *hd) {
  for (struct host_stream *t = hd->streams; t; t = t->next)
    if (t->capture)
      return t;
  return NULL;
}

static int in_block(const struct host_block *b, const void *p) {
  return b && b->ptr && (const char *)p >= (const char *)b->ptr &&
         (const char *)p < (const char *)b->ptr + b->bytes;
}

static int in_graph_blocks(const struct host_graph *g, const void *p) {
  for (size_t i = 0; g && i < g->nodes.n; i++)
    if (g->nodes.v[i].type == NODE_ALLOC && in_block(g->nodes.v[i].block, p))
      return 1;
  return 0;
}

/* 1 if p is device memory: from mem_alloc, or a stream-ordered block (eager or a graph's). */
static int is_device(const struct host_dev *hd, const void *p) {
  for (size_t i = 0; i < hd->num_allocs; i++)
    if ((const char *)p >= hd->allocs[i].ptr &&
        (const char *)p < hd->allocs[i].ptr + hd->allocs[i].bytes)
      return 1;
  for (const struct host_block *b = hd->eager; b; b = b->next)
    if (in_block(b, p))
      return 1;
  for (const struct host_graph *x = hd->execs; x; x = x->next_exec)
    if (in_graph_blocks(x, p))
      return 1;
  for (const struct host_stream *t = hd->streams; t; t = t->next)
    if (in_graph_blocks(t->capture, p))
      return 1;
  return 0;
}

/* Marks the capture of s invalid; the first reason is the one kept. */
static void capture_invalidate(struct host_stream *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void capture_invalidate(struct host_stream *s, const char *fmt, ...) {
  if (s->invalid[0])
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->invalid, sizeof(s->invalid), fmt, ap);
  va_end(ap);
}

/*
 * For an operation CUDA forbids while the calling thread captures in capture_mode global or
 * thread_local: invalidates every such capture of the dev and fails with CGRT_E_CAPTURE; 0 if
 * there is none (or only relaxed ones).
 */
static int forbid_in_captures(struct cgrt_dev *dev, cgrt_finding_kind kind, const char *op,
                              const char *advice) {
  struct host_dev *hd = dev->impl;
  struct host_stream *hit = NULL, *relaxed = NULL;
  for (struct host_stream *t = hd->streams; t; t = t->next) {
    if (t->capture && t->capture_mode != CGRT_CAPTURE_RELAXED) {
      capture_invalidate(t, "%s during the capture (capture_mode %s)", op,
                         mode_name(t->capture_mode));
      hit = t;
    } else if (t->capture) {
      relaxed = t;
    }
  }
  if (!hit) {
    if (relaxed && kind == CGRT_FINDING_MALLOC)
      note(dev, kind, 0, op, "%s during a capture in capture_mode relaxed: it ran once, now", op);
    return 0;
  }
  note(dev, kind, 1, op, "%s is not permitted while a stream captures in capture_mode %s", op,
       mode_name(hit->capture_mode));
  return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                        "%s is not permitted while a stream captures in capture_mode %s, as in "
                        "CUDA (cudaErrorStreamCaptureUnsupported); the capture is invalidated; %s",
                        op, mode_name(hit->capture_mode), advice);
}

static const char *sync_advice =
    "synchronize before capture_begin or after capture_end, or set capture_mode = relaxed";

/* Appends n to the capture of s, which takes n's references in every case. */
static int capture_put(struct cgrt_dev *dev, struct host_stream *s, struct node *n,
                       const char *op) {
  if (s->invalid[0]) {
    node_release(n);
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                          "%s: the capture on this stream was invalidated (%s); end it with "
                          "capture_end",
                          op, s->invalid);
  }
  if (list_reserve(&s->capture->nodes, 1)) {
    node_release(n);
    capture_invalidate(s, "out of host memory recording %s", op);
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "%s: out of host memory recording into a capture", op);
  }
  s->capture->nodes.v[s->capture->nodes.n++] = *n;
  return 0;
}

/* Captures n if s captures, else queues it; takes n's references in every case. */
static int submit(struct cgrt_dev *dev, struct host_stream *s, struct node *n, const char *op) {
  struct host_dev *hd = dev->impl;
  if (s == hd->legacy && dev->note && any_capture(hd))
    note(dev, CGRT_FINDING_LEGACY_STREAM, 0, op,
         "%s on the legacy default stream while a stream captures: not captured", op);
  if (s->capture)
    return capture_put(dev, s, n, op);
  if (queue_reserve(s, 1)) {
    node_release(n);
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "%s: out of host memory queueing work", op);
  }
  if (n->type == NODE_HOST || n->type == NODE_MEMCPY) {
    launch_slot(s);
    hd->host_clock += hd->cost.launch_ns; /* the host's cost of one eager launch */
    n->entry = 1;
    s->entries++;
  }
  n->issued = hd->host_clock;
  queue_put(s, n);
  return 0;
}

/* ---------------------------------------------------------------- graph memory */

/* An executable's footprints: the peak of the allocations it frees itself, and the others. */
static void exec_footprint(struct host_graph *x) {
  uint64_t cur = 0, peak = 0, unshared = 0;
  for (size_t i = 0; i < x->nodes.n; i++) {
    const struct node *n = &x->nodes.v[i];
    if (n->type == NODE_ALLOC) {
      int freed = 0;
      for (size_t j = i + 1; j < x->nodes.n && !freed; j++)
        freed = x->nodes.v[j].type == NODE_FREE && x->nodes.v[j].block == n->block;
      if (!freed) {
        unshared += n->block->bytes;
        continue;
      }
      cur += n->block->bytes;
      if (cur > peak)
        peak = cur;
    } else if (n->type == NODE_FREE) {
      cur -= n->block->bytes;
    }
  }
  x->shared = peak;
  x->unshared = unshared;
}

/* What the pool reserves to cover `bytes`: whole granules, when a granularity is set. */
static uint64_t pool_rounded(const struct host_dev *hd, uint64_t bytes) {
  uint64_t g = hd->pool_granule;
  return g ? (bytes + g - 1) / g * g : bytes;
}

/* The pool's use from the mapped executables; reserved grows to cover it. */
static void pool_update(struct host_dev *hd) {
  uint64_t shared = 0, unshared = 0;
  for (struct host_graph *x = hd->execs; x; x = x->next_exec)
    if (x->mapped) {
      unshared += x->unshared;
      if (x->shared > shared)
        shared = x->shared;
    }
  hd->pool_used = shared + unshared;
  if (hd->pool_reserved < hd->pool_used)
    hd->pool_reserved = pool_rounded(hd, hd->pool_used);
}

static void exec_map(struct host_graph *x) {
  if (x->mapped)
    return;
  x->mapped = 1;
  pool_update(x->hd);
}

/* ---------------------------------------------------------------- the driver */

static int host_stream_create(struct cgrt_dev *dev, void **stream);

static int host_open(struct cgrt_dev *dev) {
  struct host_dev *hd = calloc(1, sizeof(*hd));
  if (!hd)
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "host driver: out of host memory opening it");
  dev->impl = hd;
  void *legacy = NULL;
  if (host_stream_create(dev, &legacy) != 0) {
    free(hd);
    dev->impl = NULL;
    return CGRT_E_NOMEM;
  }
  hd->legacy = legacy;
  return 0;
}

static void stream_free(struct host_stream *s) {
  graph_free(s->capture);
  /* Work that never ran: events recorded there count as complete, so nobody waits for them. */
  for (size_t i = s->head; i < s->queue.n; i++) {
    struct node *n = &s->queue.v[i];
    if (n->type == NODE_EVENT && n->event->done < n->seq)
      n->event->done = n->seq;
    node_release(n);
  }
  free(s->queue.v);
  s->magic = 0;
  free(s);
}

static void host_close(struct cgrt_dev *dev) {
  struct host_dev *hd = dev->impl;
  if (!hd)
    return;
  while (hd->streams) {
    struct host_stream *s = hd->streams;
    hd->streams = s->next;
    stream_free(s);
  }
  while (hd->eager) {
    struct host_block *b = hd->eager;
    hd->eager = b->next;
    block_unref(b);
  }
  free(hd->allocs);
  free(hd);
  dev->impl = NULL;
}

static int host_stream_create(struct cgrt_dev *dev, void **stream) {
  struct host_dev *hd = dev->impl;
  if (!stream)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "stream_create: NULL out-parameter");
  *stream = NULL;
  struct host_stream *s = calloc(1, sizeof(*s));
  if (!s)
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "stream_create: out of host memory");
  s->magic = MAGIC_STREAM;
  s->hd = hd;
  s->id = ++hd->next_id;
  s->next = hd->streams;
  hd->streams = s;
  *stream = s;
  return 0;
}

static void host_stream_destroy(struct cgrt_dev *dev, void *stream) {
  struct host_stream *s = as_stream(dev, stream);
  if (!s || s == ((struct host_dev *)dev->impl)->legacy)
    return;
  struct host_dev *hd = dev->impl;
  for (struct host_stream **p = &hd->streams; *p; p = &(*p)->next) {
    if (*p == s) {
      *p = s->next;
      break;
    }
  }
  stream_free(s);
}

/* Runs stream s to its end; the host waited for it, so its clock moves up to the stream's. */
static void run_and_wait(struct host_dev *hd, struct host_stream *s) {
  stream_run(s, NULL, 0);
  if (hd->host_clock < s->clock)
    hd->host_clock = s->clock;
}

/* A device-wide synchronize meets the captures of the device: each is invalidated (`why` says
   by what), as CUDA does whatever the capture mode. Whether there was one. */
static int invalidate_captures(struct host_dev *hd, const char *why) {
  int hit = 0;
  for (struct host_stream *s = hd->streams; s; s = s->next)
    if (s->capture) {
      capture_invalidate(s, "%s", why);
      hit = 1;
    }
  return hit;
}

static int host_stream_sync(struct cgrt_dev *dev, void *stream) {
  struct host_dev *hd = dev->impl;
  struct host_stream *s = as_stream(dev, stream);
  if (!s)
    return bad_handle(dev, "stream_sync", "stream");
  if (hd->running)
    return cgrt__dev_fail(dev, CGRT_E_STATE,
                          "stream_sync called from a host function; host functions must not call "
                          "the driver (as with cudaLaunchHostFunc)");
  if (s->capture) {
    capture_invalidate(s, "stream_sync of the capturing stream (a synchronizing call inside a "
                          "captured region)");
    note(dev, CGRT_FINDING_SYNC, 1, "stream_sync", "stream_sync of the capturing stream");
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                          "stream_sync on a capturing stream is not permitted (in CUDA: "
                          "cudaErrorStreamCaptureUnsupported); the capture is invalidated: end "
                          "it with capture_end and run the work eagerly");
  }
  int rc = forbid_in_captures(dev, CGRT_FINDING_SYNC, "stream_sync", sync_advice);
  if (rc)
    return rc;
  run_and_wait(hd, s);
  return 0;
}

/* cudaDeviceSynchronize: refused, and every capture of the device invalidated, while one runs,
   whatever its mode (as CUDA does: session 52's table); else every stream runs to its end. */
static int host_device_sync(struct cgrt_dev *dev, char *err, size_t errlen) {
  struct host_dev *hd = dev->impl;
  if (hd->running) {
    snprintf(err, errlen,
             "device_sync called from a host function; host functions must not call the driver "
             "(as with cudaLaunchHostFunc)");
    return CGRT_E_STATE;
  }
  if (invalidate_captures(hd, "a device-wide synchronize during the capture")) {
    snprintf(err, errlen,
             "device_sync while a stream of the device captures is not permitted, as in CUDA "
             "(cudaErrorStreamCaptureUnsupported); the capture is invalidated");
    return CGRT_E_CAPTURE;
  }
  for (struct host_stream *s = hd->streams; s; s = s->next)
    run_and_wait(hd, s);
  return 0;
}

static int host_capture_begin(struct cgrt_dev *dev, void *stream) {
  struct host_dev *hd = dev->impl;
  struct host_stream *s = as_stream(dev, stream);
  if (!s)
    return bad_handle(dev, "capture_begin", "stream");
  if (s->capture)
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                          "capture_begin on a stream that is already capturing; captures do not "
                          "nest: end the first with capture_end");
  if (s == hd->legacy)
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                          "capture_begin on the legacy default stream is not permitted, as in "
                          "CUDA: capture a stream of your own");
  struct host_graph *g = calloc(1, sizeof(*g));
  if (!g)
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "capture_begin: out of host memory");
  g->magic = MAGIC_GRAPH;
  g->hd = hd;
  s->capture = g;
  s->capture_id = ++hd->next_id;
  s->capture_mode = dev->capture_mode;
  s->invalid[0] = '\0';
  return 0;
}

static int host_capture_end(struct cgrt_dev *dev, void *stream, void **graph) {
  struct host_stream *s = as_stream(dev, stream);
  if (!graph)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "capture_end: NULL out-parameter");
  *graph = NULL;
  if (!s)
    return bad_handle(dev, "capture_end", "stream");
  if (!s->capture)
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE, "capture_end on a stream that is not capturing");
  struct host_graph *g = s->capture;
  s->capture = NULL;
  s->capture_id = 0;
  if (s->invalid[0]) {
    graph_free(g);
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                          "the capture was invalidated by %s; nothing recorded ran and the "
                          "stream is no longer capturing: run the work eagerly",
                          s->invalid);
  }
  *graph = g;
  return 0;
}

static int host_capture_status(struct cgrt_dev *dev, void *stream, int *active) {
  struct host_stream *s = as_stream(dev, stream);
  if (!active)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "capture_status: NULL out-parameter");
  if (!s)
    return bad_handle(dev, "capture_status", "stream");
  *active = s->capture != NULL;
  return 0;
}

static int host_graph_instantiate(struct cgrt_dev *dev, void *graph, void **exec) {
  struct host_dev *hd = dev->impl;
  struct host_graph *g = as_graph(dev, graph, MAGIC_GRAPH);
  if (!exec)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "graph_instantiate: NULL out-parameter");
  *exec = NULL;
  if (!g)
    return bad_handle(dev, "graph_instantiate", "graph");
  int rc = forbid_in_captures(dev, CGRT_FINDING_OTHER, "graph_instantiate",
                              "instantiate after capture_end, or set capture_mode = relaxed");
  if (rc)
    return rc;
  struct host_graph *x = calloc(1, sizeof(*x));
  if (!x || list_copy(&x->nodes, &g->nodes)) {
    free(x);
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "graph_instantiate: out of host memory");
  }
  x->magic = MAGIC_EXEC;
  x->hd = hd;
  exec_footprint(x);
  x->next_exec = hd->execs;
  hd->execs = x;
  hd->exec_bytes += HOST_EXEC_NODE_BYTES * (uint64_t)x->nodes.n;
  *exec = x;
  return 0;
}

static void host_graph_destroy(struct cgrt_dev *dev, void *graph) {
  graph_free(as_graph(dev, graph, MAGIC_GRAPH));
}

static int host_graph_node_count(struct cgrt_dev *dev, void *graph, size_t *count) {
  struct host_graph *g = as_graph(dev, graph, MAGIC_GRAPH);
  if (!count)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "graph_node_count: NULL out-parameter");
  if (!g)
    return bad_handle(dev, "graph_node_count", "graph");
  *count = g->nodes.n;
  return 0;
}

static int host_exec_update(struct cgrt_dev *dev, void *exec, void *graph) {
  struct host_graph *x = as_graph(dev, exec, MAGIC_EXEC);
  struct host_graph *g = as_graph(dev, graph, MAGIC_GRAPH);
  if (!x || !g)
    return bad_handle(dev, "exec_update", x ? "graph" : "executable graph");
  char why[600];
  if (list_differ(&x->nodes, &g->nodes, why, sizeof(why)))
    return cgrt__dev_fail(dev, CGRT_E_UPDATE,
                          "exec_update refused: %s; the executable is unchanged: instantiate the "
                          "new graph instead",
                          why);
  list_take_params(&x->nodes, &g->nodes);
  return 0;
}

static int host_exec_upload(struct cgrt_dev *dev, void *exec, void *stream) {
  struct host_graph *x = as_graph(dev, exec, MAGIC_EXEC);
  if (!x)
    return bad_handle(dev, "exec_upload", "executable graph");
  if (!as_stream(dev, stream))
    return bad_handle(dev, "exec_upload", "stream");
  exec_map(x);
  return 0;
}

static int host_exec_launch(struct cgrt_dev *dev, void *exec, void *stream) {
  struct host_graph *x = as_graph(dev, exec, MAGIC_EXEC);
  struct host_stream *s = as_stream(dev, stream);
  if (!x || !s)
    return bad_handle(dev, "exec_launch", x ? "stream" : "executable graph");
  if (s->capture) {
    capture_invalidate(s, "exec_launch into the capturing stream");
    note(dev, CGRT_FINDING_OTHER, 1, "exec_launch", "a graph launch into the capturing stream");
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                          "exec_launch into a capturing stream: CUDA does not capture graph "
                          "launches (cudaErrorStreamCaptureUnsupported); the capture is "
                          "invalidated: capture the work itself, or launch outside the capture");
  }
  if (queue_reserve(s, 2 * x->nodes.n))
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "exec_launch: out of host memory queueing work");
  exec_map(x);
  launch_slot(s);
  x->hd->host_clock += x->hd->cost.graph_launch_ns;
  size_t before = s->queue.n;
  queue_launch(s, &x->nodes);
  if (s->queue.n > before) { /* the launch ends with its last node */
    s->queue.v[s->queue.n - 1].entry = 1;
    s->entries++;
  }
  return 0;
}

static void host_exec_destroy(struct cgrt_dev *dev, void *exec) {
  struct host_graph *x = as_graph(dev, exec, MAGIC_EXEC);
  if (!x)
    return;
  struct host_dev *hd = x->hd;
  for (struct host_graph **p = &hd->execs; *p; p = &(*p)->next_exec)
    if (*p == x) {
      *p = x->next_exec;
      break;
    }
  hd->exec_bytes -= HOST_EXEC_NODE_BYTES * (uint64_t)x->nodes.n;
  pool_update(hd);
  graph_free(x);
}

static int host_host_fn(struct cgrt_dev *dev, void *stream, void (*fn)(void *), void *arg) {
  struct host_stream *s = as_stream(dev, stream);
  if (!s)
    return bad_handle(dev, "host_fn", "stream");
  if (!fn)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "host_fn: NULL function");
  struct node n = {.type = NODE_HOST, .fn = fn, .arg = arg};
  return submit(dev, s, &n, "host_fn");
}

static int host_memcpy_async(struct cgrt_dev *dev, void *dst, const void *src, size_t bytes,
                             void *stream) {
  struct host_stream *s = as_stream(dev, stream);
  if (!s)
    return bad_handle(dev, "memcpy_async", "stream");
  if (bytes && (!dst || !src))
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "memcpy_async: NULL %s address for %zu bytes",
                          dst ? "source" : "destination", bytes);
  if (s->capture && dev->note && bytes) {
    struct host_dev *hd = dev->impl;
    int src_dev = is_device(hd, src), dst_dev = is_device(hd, dst);
    if (src_dev && !dst_dev)
      note(dev, CGRT_FINDING_HOST_READ, 0, "memcpy_async",
           "copies %zu bytes from device memory to host memory %p", bytes, dst);
    else if (!src_dev || !dst_dev)
      note(dev, CGRT_FINDING_PAGEABLE_COPY, 0, "memcpy_async",
           "copies %zu bytes %s pageable host memory %p", bytes, src_dev ? "to" : "from",
           src_dev ? dst : src);
  }
  struct node n = {.type = NODE_MEMCPY, .dst = dst, .src = src, .bytes = bytes};
  return submit(dev, s, &n, "memcpy_async");
}

static int host_event_create(struct cgrt_dev *dev, void **event) {
  if (!event)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "event_create: NULL out-parameter");
  *event = NULL;
  struct host_event *e = calloc(1, sizeof(*e));
  if (!e)
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "event_create: out of host memory");
  e->magic = MAGIC_EVENT;
  e->hd = dev->impl;
  e->refs = 1;
  *event = e;
  return 0;
}

static int host_event_record(struct cgrt_dev *dev, void *event, void *stream) {
  struct host_event *e = as_event(dev, event);
  struct host_stream *s = as_stream(dev, stream);
  if (!e || !s)
    return bad_handle(dev, "event_record", e ? "stream" : "event");
  struct node n = {.type = NODE_EVENT, .event = e};
  e->refs++;
  if (s->capture) {
    int rc = capture_put(dev, s, &n, "event_record");
    if (rc == 0)
      e->capture_id = s->capture_id;
    return rc;
  }
  if (queue_reserve(s, 1)) {
    e->refs--;
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "event_record: out of host memory queueing work");
  }
  n.seq = ++e->records;
  n.issued = s->hd->host_clock;
  e->stream_id = s->id;
  e->capture_id = 0;
  queue_put(s, &n);
  return 0;
}

static int host_stream_wait(struct cgrt_dev *dev, void *stream, void *event) {
  struct host_event *e = as_event(dev, event);
  struct host_stream *s = as_stream(dev, stream);
  if (!e || !s)
    return bad_handle(dev, "stream_wait", e ? "stream" : "event");
  if (e->records == 0)
    return 0; /* never recorded: nothing to wait for, as in CUDA */
  if (s->capture) {
    if (e->capture_id == s->capture_id)
      return 0; /* recorded earlier in this capture: the graph's order already holds it */
    capture_invalidate(s, "stream_wait on an event recorded outside the capture");
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                          "stream_wait on a capturing stream of an event recorded outside the "
                          "capture is not permitted (CUDA needs cudaEventWaitExternal for it); "
                          "the capture is invalidated; wait before capture_begin");
  }
  struct node n = {.type = NODE_WAIT, .event = e, .seq = e->records};
  e->refs++;
  return submit(dev, s, &n, "stream_wait");
}

/* Refuses (and invalidates that capture) if e was last recorded into a capture still running. */
static int event_in_capture(struct cgrt_dev *dev, struct host_event *e, const char *op) {
  struct host_stream *t = stream_by_capture(dev->impl, e->capture_id);
  if (!t)
    return 0;
  capture_invalidate(t, "%s of an event recorded during the capture", op);
  note(dev, CGRT_FINDING_SYNC, 1, op, "%s of an event recorded inside the running capture", op);
  return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                        "%s of an event recorded inside a capture that is still running is not "
                        "permitted, as in CUDA; the capture is invalidated",
                        op);
}

/* With cost.device_beside, the device catches up with the host clock before an event is read. */
static void keep_up(struct host_dev *hd) {
  if (!hd->cost.device_beside || hd->running)
    return;
  for (struct host_stream *s = hd->streams; s; s = s->next)
    stream_run_to(s, NULL, 0, hd->host_clock);
}

static int host_event_query(struct cgrt_dev *dev, void *event) {
  struct host_event *e = as_event(dev, event);
  if (!e)
    return bad_handle(dev, "event_query", "event");
  int rc = event_in_capture(dev, e, "event_query");
  if (rc == 0)
    rc = forbid_in_captures(dev, CGRT_FINDING_SYNC, "event_query", sync_advice);
  if (rc)
    return rc;
  keep_up(dev->impl);
  return e->done >= e->records ? 0 : CGRT_E_NOTREADY;
}

static int host_event_sync(struct cgrt_dev *dev, void *event) {
  struct host_dev *hd = dev->impl;
  struct host_event *e = as_event(dev, event);
  if (!e)
    return bad_handle(dev, "event_sync", "event");
  if (hd->running)
    return cgrt__dev_fail(dev, CGRT_E_STATE,
                          "event_sync called from a host function; host functions must not call "
                          "the driver (as with cudaLaunchHostFunc)");
  int rc = event_in_capture(dev, e, "event_sync");
  if (rc == 0)
    rc = forbid_in_captures(dev, CGRT_FINDING_SYNC, "event_sync", sync_advice);
  if (rc)
    return rc;
  if (e->done < e->records) {
    /* Not complete, so its record is still queued there (destroying a stream completes them). */
    struct host_stream *s = stream_by_id(hd, e->stream_id);
    if (s)
      stream_run(s, e, e->records);
  }
  if (hd->host_clock < e->at)
    hd->host_clock = e->at; /* the host waited for the record */
  return 0;
}

/* Timing is modelled for every event: a timed one is a plain one. */
static int host_event_create_timed(struct cgrt_dev *dev, void **event) {
  return host_event_create(dev, event);
}

static int host_event_elapsed(struct cgrt_dev *dev, void *start, void *end, double *us) {
  struct host_event *a = as_event(dev, start), *b = as_event(dev, end);
  if (!a || !b || !us)
    return bad_handle(dev, "event_elapsed",
                      !us ? "out-parameter"
                      : a ? "end event"
                          : "start event");
  int rc = event_in_capture(dev, a, "event_elapsed");
  if (rc == 0)
    rc = event_in_capture(dev, b, "event_elapsed");
  if (rc == 0)
    rc = forbid_in_captures(dev, CGRT_FINDING_SYNC, "event_elapsed", sync_advice);
  if (rc)
    return rc;
  if (a->records == 0 || b->records == 0)
    return cgrt__dev_fail(dev, CGRT_E_INVAL,
                          "event_elapsed of an event never recorded (as in CUDA: record both "
                          "events first)");
  keep_up(dev->impl);
  if (a->done < a->records || b->done < b->records)
    return CGRT_E_NOTREADY;
  *us = ((double)b->at - (double)a->at) / 1e3;
  return 0;
}

static void host_event_destroy(struct cgrt_dev *dev, void *event) {
  struct host_event *e = as_event(dev, event);
  if (e)
    event_unref(e);
}

/* Host memory stands in for page-locked memory: plain, and not "device" memory. */
static int host_host_alloc(struct cgrt_dev *dev, void **ptr, size_t bytes) {
  if (!(*ptr = malloc(bytes ? bytes : 1)))
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "host_alloc: out of memory (%zu bytes)", bytes);
  return 0;
}

static void host_host_free(struct cgrt_dev *dev, void *ptr) {
  (void)dev;
  free(ptr);
}

static int host_mem_alloc(struct cgrt_dev *dev, void **ptr, size_t bytes) {
  struct host_dev *hd = dev->impl;
  if (!ptr)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "mem_alloc: NULL out-parameter");
  *ptr = NULL;
  int rc = forbid_in_captures(dev, CGRT_FINDING_MALLOC, "mem_alloc",
                              "allocate before capturing, or set capture_mode = relaxed");
  if (rc)
    return rc;
  if (hd->num_allocs == hd->cap_allocs) {
    size_t cap = hd->cap_allocs ? hd->cap_allocs * 2 : 16;
    struct host_alloc *a = realloc(hd->allocs, cap * sizeof(*a));
    if (!a)
      return cgrt__dev_fail(dev, CGRT_E_NOMEM, "mem_alloc of %zu bytes: out of host memory", bytes);
    hd->allocs = a;
    hd->cap_allocs = cap;
  }
  *ptr = calloc(1, bytes ? bytes : 1);
  if (!*ptr)
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "mem_alloc of %zu bytes: out of host memory", bytes);
  hd->allocs[hd->num_allocs++] = (struct host_alloc){*ptr, bytes ? bytes : 1};
  return 0;
}

static void host_mem_free(struct cgrt_dev *dev, void *ptr) {
  if (!ptr)
    return;
  /* Freed in any case, as the cuda driver does after CUDA refuses; the capture still fails. */
  forbid_in_captures(dev, CGRT_FINDING_MALLOC, "mem_free",
                     "free after capture_end, or set capture_mode = relaxed");
  struct host_dev *hd = dev->impl;
  for (size_t i = 0; i < hd->num_allocs; i++)
    if (hd->allocs[i].ptr == ptr) {
      hd->allocs[i] = hd->allocs[--hd->num_allocs];
      break;
    }
  free(ptr);
}

static int host_mem_info(struct cgrt_dev *dev, size_t *free_bytes, size_t *total_bytes) {
  long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  if (!free_bytes || !total_bytes)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "mem_info: NULL out-parameter");
  if (pages <= 0 || avail < 0 || page <= 0)
    return cgrt__dev_fail(dev, CGRT_E_DEVICE,
                          "mem_info: sysconf(_SC_PHYS_PAGES) gives no physical memory size");
  (void)avail;
  struct host_dev *hd = dev->impl;
  uint64_t total = (uint64_t)pages * (uint64_t)page, taken = hd->pool_reserved + hd->exec_bytes;
  *total_bytes = (size_t)total;
  *free_bytes = (size_t)(taken < total ? total - taken : 0);
  return 0;
}

static int host_graph_mem(struct cgrt_dev *dev, uint64_t *used, uint64_t *reserved) {
  struct host_dev *hd = dev->impl;
  if (!used || !reserved)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "graph_mem: NULL out-parameter");
  *used = hd->pool_used;
  *reserved = hd->pool_reserved;
  return 0;
}

static int host_graph_mem_trim(struct cgrt_dev *dev) {
  struct host_dev *hd = dev->impl;
  hd->pool_reserved = pool_rounded(hd, hd->pool_used);
  return 0;
}

static int host_graph_alloc_bytes(struct cgrt_dev *dev, void *graph, uint64_t *bytes) {
  struct host_graph *g = as_graph(dev, graph, MAGIC_GRAPH);
  if (!bytes)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "graph_alloc_bytes: NULL out-parameter");
  *bytes = 0;
  if (!g)
    return bad_handle(dev, "graph_alloc_bytes", "graph");
  for (size_t i = 0; i < g->nodes.n; i++)
    if (g->nodes.v[i].type == NODE_ALLOC)
      *bytes += g->nodes.v[i].block->bytes;
  return 0;
}

static int host_mem_alloc_async(struct cgrt_dev *dev, void *stream, size_t bytes, void **ptr) {
  struct host_dev *hd = dev->impl;
  struct host_stream *s = as_stream(dev, stream);
  if (!ptr)
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "mem_alloc_async: NULL out-parameter");
  *ptr = NULL;
  if (!s)
    return bad_handle(dev, "mem_alloc_async", "stream");
  struct host_block *b = calloc(1, sizeof(*b));
  if (b)
    b->ptr = calloc(1, bytes ? bytes : 1);
  if (!b || !b->ptr) {
    free(b);
    return cgrt__dev_fail(dev, CGRT_E_NOMEM, "mem_alloc_async of %zu bytes: out of host memory",
                          bytes);
  }
  b->refs = 1;
  b->bytes = bytes;
  void *p = b->ptr;
  if (s->capture) {
    struct node n = {.type = NODE_ALLOC, .block = b};
    int rc = capture_put(dev, s, &n, "mem_alloc_async"); /* takes the block in every case */
    if (rc)
      return rc;
  } else {
    b->next = hd->eager;
    hd->eager = b;
  }
  *ptr = p;
  return 0;
}

static int host_mem_free_async(struct cgrt_dev *dev, void *stream, void *ptr) {
  struct host_dev *hd = dev->impl;
  struct host_stream *s = as_stream(dev, stream);
  if (!s)
    return bad_handle(dev, "mem_free_async", "stream");
  if (!ptr)
    return 0;
  if (s->capture) {
    struct node_list *l = &s->capture->nodes;
    for (size_t i = 0; i < l->n; i++)
      if (l->v[i].type == NODE_ALLOC && l->v[i].block->ptr == ptr) {
        struct node n = {.type = NODE_FREE, .block = l->v[i].block};
        n.block->refs++;
        return capture_put(dev, s, &n, "mem_free_async");
      }
    capture_invalidate(s, "mem_free_async of memory not allocated in this capture");
    return cgrt__dev_fail(dev, CGRT_E_INVAL,
                          "mem_free_async inside a capture of %p, which was not allocated in the "
                          "same capture (the host driver models only graph-local frees); the "
                          "capture is invalidated",
                          ptr);
  }
  for (struct host_block **p = &hd->eager; *p; p = &(*p)->next)
    if ((*p)->ptr == ptr) {
      struct host_block *b = *p;
      *p = b->next;
      /* Freed when the node has run: work queued before it may still use the memory. */
      struct node n = {.type = NODE_FREE, .block = b};
      return submit(dev, s, &n, "mem_free_async");
    }
  return cgrt__dev_fail(dev, CGRT_E_INVAL,
                        "mem_free_async of %p, which mem_alloc_async did not return (or was "
                        "freed already)",
                        ptr);
}

/*
 * The core's stand-in communicators on this driver are groups of one rank (core/src/comm/comm.c),
 * so the maximum over the group is this rank's own values, or with peers set (tests) the maximum
 * of those and what the peers give. The stream is synchronized first, as the cuda driver's
 * reduction, which runs there, is waited for.
 */
static int host_comm_max(struct cgrt_dev *dev, void *comm, double *values, int n, void *stream) {
  (void)comm;
  struct host_dev *hd = dev->impl;
  double other[64];
  if (n < 1 || n > (int)(sizeof(other) / sizeof(other[0])))
    return cgrt__dev_fail(dev, CGRT_E_INVAL, "comm_max of %d values: 1 to 64", n);
  int rc = host_stream_sync(dev, stream);
  if (rc != 0 || !hd->peers)
    return rc;
  for (int i = 0; i < n; i++)
    other[i] = values[i];
  hd->peers(hd->peers_user, comm, other, n);
  for (int i = 0; i < n; i++)
    if (other[i] > values[i])
      values[i] = other[i];
  return 0;
}

int cgrt__host_set_peers(struct cgrt_dev *dev,
                         void (*peers)(void *user, const void *comm, double *values, int n),
                         void *user) {
  if (!dev || dev->drv != &HOST_TABLE || !dev->impl)
    return CGRT_E_INVAL;
  struct host_dev *hd = dev->impl;
  hd->peers = peers;
  hd->peers_user = user;
  return 0;
}

/* The simulated host clock: what the cost model's launches and waits have made pass. */
static uint64_t host_host_clock_ns(struct cgrt_dev *dev) {
  return ((struct host_dev *)dev->impl)->host_clock;
}

int cgrt__host_set_cost(struct cgrt_dev *dev, const struct cgrt_host_cost *cost) {
  if (!dev || dev->drv != &HOST_TABLE || !dev->impl)
    return CGRT_E_INVAL;
  struct host_dev *hd = dev->impl;
  if (cost)
    hd->cost = *cost;
  else
    memset(&hd->cost, 0, sizeof(hd->cost));
  return 0;
}

int cgrt__host_run_device(struct cgrt_dev *dev) {
  if (!dev || dev->drv != &HOST_TABLE || !dev->impl)
    return CGRT_E_INVAL;
  struct host_dev *hd = dev->impl;
  if (hd->running)
    return CGRT_E_STATE;
  for (struct host_stream *s = hd->streams; s; s = s->next)
    stream_run_to(s, NULL, 0, hd->host_clock);
  return 0;
}

int cgrt__host_sync_elsewhere(struct cgrt_dev *dev) {
  if (!dev || dev->drv != &HOST_TABLE || !dev->impl)
    return CGRT_E_INVAL;
  return invalidate_captures(dev->impl,
                             "a cudaDeviceSynchronize on another thread during the capture")
             ? CGRT_E_CAPTURE
             : 0;
}

int cgrt__host_set_pool_granule(struct cgrt_dev *dev, uint64_t bytes) {
  if (!dev || dev->drv != &HOST_TABLE || !dev->impl)
    return CGRT_E_INVAL;
  struct host_dev *hd = dev->impl;
  hd->pool_granule = bytes;
  pool_update(hd);
  return 0;
}

HOST_EXPORT const struct cgrt_driver HOST_TABLE = {
    .abi_major = CGRT_DRIVER_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_driver),
    .name = HOST_NAME,
    .open = host_open,
    .close = host_close,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_sync = host_stream_sync,
    .capture_begin = host_capture_begin,
    .capture_end = host_capture_end,
    .capture_status = host_capture_status,
    .graph_instantiate = host_graph_instantiate,
    .graph_destroy = host_graph_destroy,
    .graph_node_count = host_graph_node_count,
    .exec_update = host_exec_update,
    .exec_upload = host_exec_upload,
    .exec_launch = host_exec_launch,
    .exec_destroy = host_exec_destroy,
    .host_fn = host_host_fn,
    .memcpy_async = host_memcpy_async,
    .event_create = host_event_create,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_sync = host_event_sync,
    .event_destroy = host_event_destroy,
    .stream_wait = host_stream_wait,
    .mem_alloc = host_mem_alloc,
    .host_alloc = host_host_alloc,
    .host_free = host_host_free,
    .mem_free = host_mem_free,
    .mem_info = host_mem_info,
    .graph_mem = host_graph_mem,
    .mem_alloc_async = host_mem_alloc_async,
    .mem_free_async = host_mem_free_async,
    .graph_alloc_bytes = host_graph_alloc_bytes,
    .graph_mem_trim = host_graph_mem_trim,
    .event_create_timed = host_event_create_timed,
    .event_elapsed = host_event_elapsed,
    .comm_max = host_comm_max,
    .host_clock_ns = host_host_clock_ns,
    .device_sync = host_device_sync,
};
