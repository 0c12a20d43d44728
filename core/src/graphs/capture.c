/*
 * capture.c - a capture and what surrounds it and a graph's life, for the host and the tools:
 * recording work into a graph (cgrt__record, with diagnose and the communicators' capture
 * bookkeeping around it, inside the host's capture hooks of hooks.c), the graph watcher
 * (cgrt_tool_watch_graphs) and the count of a capture that fell back to eager work.
 */
#include <stdio.h>
#include <string.h>

#include "capture.h"
#include "cgrt/tool.h"
#include "diagnose.h"
#include "graph_mem.h"
#include "graphs.h"
#include "base/faults.h"
#include "base/gate.h"
#include "base/log.h"
#include "comm/comm.h"
#include "driver.h"

/* ---------------------------------------------------------------- a recording */

/*
 * After a capture: raw device synchronizes of other threads that the sync guard let go ahead at
 * its bound while a capture of this device was underway, said once for each new batch.
 */
static void say_late_syncs(struct cgrt_graphs *g) {
  if (!g->sync_guarded)
    return;
  uint64_t waited = 0, late = 0;
  g->dev->drv->sync_guard_counts(g->dev->device, &waited, &late);
  if (late <= g->sync_late_seen)
    return;
  cgrt__log(g->log, CGRT_LOG_WARN,
            "sync_guard: %llu raw device synchronize(s) of another thread waited for a capture on "
            "GPU %d until the bound and then went ahead, which CUDA refuses and which breaks the "
            "capture (or can crash the driver): captured work (a module or a body) waits for that "
            "thread, or a capture lasted longer than the bound; hand no synchronize to another "
            "thread from inside a step (sync_guard_late in cgrt_stats)",
            (unsigned long long)(late - g->sync_late_seen), g->dev->device);
  g->sync_late_seen = late;
}

int cgrt__record(struct cgrt_graphs *g, void *stream, int (*fn)(void *arg), void *arg,
                 const char *what, char *why, size_t whylen, void **graph) {
  const struct cgrt_driver *drv = g->dev->drv;
  *graph = NULL;
  g->capture_invalidated = g->broken_outside = 0;
  uint64_t t0 = cgrt__now_ns();
  int rc = cgrt__hook_begin(&g->hooks, stream);
  if (rc != 0) {
    snprintf(why, whylen, "the host's capture begin hook returned %d and refused the capture", rc);
    return CGRT_E_CALLBACK;
  }
  /* no device synchronize through cgrt while it captures */
  cgrt__gate_capture_enter(g->dev->device);
  rc = drv->capture_begin(g->dev, stream);
  cgrt__comms_capture_begin(g->comms);
  if (rc != 0) {
    cgrt__gate_capture_leave(g->dev->device);
    snprintf(why, whylen, "%s", g->dev->err);
    (void)cgrt__hook_end(&g->hooks, stream); /* no capture began: close the pair the hook opened */
    return rc;
  }
  cgrt__diagnose_begin(g);
  g->log->err[0] = '\0';
  int work_rc = fn(arg);
  int used_comm = g->comms->capture_comm; /* before diagnose may run the work again */
  /* Armed by a test: a synchronizing call inside the captured work, as a buggy module makes. */
  cgrt__fault_capture_sync(g->faults, g->dev, stream);
  cgrt__diagnose_pause(g);
  /* Always end the capture, whatever the work did: the stream must never stay capturing. */
  snprintf(why, whylen, "%s", g->log->err);
  int end_rc = drv->capture_end(g->dev, stream, graph);
  cgrt__gate_capture_leave(g->dev->device);
  int hook_rc = cgrt__hook_end(&g->hooks, stream);
  g->stats->capture_ns += cgrt__now_ns() - t0;
  say_late_syncs(g);
  rc = 0;
  if (work_rc != 0) {
    if (*graph)
      drv->graph_destroy(g->dev, *graph);
    *graph = NULL;
    if (!why[0])
      snprintf(why, whylen, "the captured work returned %d", work_rc);
    rc = work_rc < 0 ? work_rc : CGRT_E_CALLBACK;
  } else if (end_rc != 0) {
    snprintf(why, whylen,
             "%s (a synchronizing call, a host read of device memory or an allocation outside "
             "stream-ordered memory inside the captured work invalidates the capture)",
             g->dev->err);
    rc = CGRT_E_CAPTURE;
  }
  int failed = rc != 0;
  g->capture_invalidated = failed && end_rc == CGRT_E_CAPTURE;
  if (rc == 0 && hook_rc != 0) {
    drv->graph_destroy(g->dev, *graph);
    *graph = NULL;
    snprintf(why, whylen,
             "the host's capture end hook returned %d; the recorded graph was discarded", hook_rc);
    rc = CGRT_E_CALLBACK;
  }
  char more[1024]; /* diagnose's cause: up to about 520 characters */
  cgrt__diagnose_end(g, what, failed, stream, fn, arg, more, sizeof(more));
  if (more[0]) {
    size_t used = strlen(why);
    snprintf(why + used, whylen - used, "%s", more);
  }
  if (rc == 0) {
    g->stats->captures++;
    cgrt__comms_capture_end(g->comms, *graph, used_comm);
  }
  return rc;
}

/* ---------------------------------------------------------------- the graph watcher */

void cgrt__watch(struct cgrt_graphs *g, int op, void *graph, void *exec, void *stream) {
  if (!g->watch_fn)
    return;
  struct cgrt_tool_graph_event ev = {.struct_size = sizeof(ev),
                                     .op = (cgrt_tool_graph_op)op,
                                     .graph = graph,
                                     .exec = exec,
                                     .stream = stream,
                                     .driver = g->dev->drv->name};
  g->watch_fn(g->watch_user, &ev);
}

/* ---------------------------------------------------------------- fallbacks */

int cgrt__capture_fallback(struct cgrt_graphs *g, int code, const char *what, const char *why) {
  g->stats->fallbacks++;
  if (g->rep)
    g->rep->fallbacks++;
  if (code == CGRT_E_NOMEM) {
    /* Out of memory: say where graph memory stands, so the budget can be set from the line. */
    char mem[512];
    cgrt__mem_describe(&g->mem, cgrt__mem_budget(g), mem, sizeof(mem));
    cgrt__fail(g->log, code,
               "capture of %s failed, running it eagerly: %s (%s; set [cuda_graph] "
               "memory_budget below the memory left for graphs)",
               what, why, mem);
    cgrt__log(g->log, CGRT_LOG_WARN, "%s", g->log->err);
    return code;
  }
  cgrt__fail(g->log, code, "capture of %s failed, running it eagerly: %s", what, why);
  cgrt__log(g->log, CGRT_LOG_WARN, "%s", g->log->err);
  return code;
}
