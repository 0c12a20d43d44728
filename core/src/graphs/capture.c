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
#include "runtime.h"

/* ---------------------------------------------------------------- a recording */

int cgrt__record(cgrt_runtime *rt, void *stream, int (*fn)(void *arg), void *arg, const char *what,
                 char *why, size_t whylen, void **graph) {
  const struct cgrt_driver *drv = rt->dev.drv;
  *graph = NULL;
  uint64_t t0 = cgrt__now_ns();
  int rc = cgrt__hook_begin(&rt->hooks, stream);
  if (rc != 0) {
    snprintf(why, whylen, "the host's capture begin hook returned %d and refused the capture", rc);
    return CGRT_E_CALLBACK;
  }
  rc = drv->capture_begin(&rt->dev, stream);
  cgrt__comms_capture_begin(&rt->comms);
  if (rc != 0) {
    snprintf(why, whylen, "%s", rt->dev.err);
    (void)cgrt__hook_end(&rt->hooks, stream); /* no capture began: close the pair the hook opened */
    return rc;
  }
  cgrt__diagnose_begin(rt);
  rt->log.err[0] = '\0';
  int work_rc = fn(arg);
  int used_comm = rt->comms.capture_comm; /* before diagnose may run the work again */
  /* Armed by a test: a synchronizing call inside the captured work, as a buggy module makes. */
  cgrt__fault_capture_sync(&rt->faults, &rt->dev, stream);
  cgrt__diagnose_pause(rt);
  /* Always end the capture, whatever the work did: the stream must never stay capturing. */
  snprintf(why, whylen, "%s", rt->log.err);
  int end_rc = drv->capture_end(&rt->dev, stream, graph);
  int hook_rc = cgrt__hook_end(&rt->hooks, stream);
  rt->stats.capture_ns += cgrt__now_ns() - t0;
  rc = 0;
  if (work_rc != 0) {
    if (*graph)
      drv->graph_destroy(&rt->dev, *graph);
    *graph = NULL;
    if (!why[0])
      snprintf(why, whylen, "the captured work returned %d", work_rc);
    rc = work_rc < 0 ? work_rc : CGRT_E_CALLBACK;
  } else if (end_rc != 0) {
    snprintf(why, whylen,
             "%s (a synchronizing call, a host read of device memory or an allocation outside "
             "stream-ordered memory inside the captured work invalidates the capture)",
             rt->dev.err);
    rc = CGRT_E_CAPTURE;
  }
  int failed = rc != 0;
  if (rc == 0 && hook_rc != 0) {
    drv->graph_destroy(&rt->dev, *graph);
    *graph = NULL;
    snprintf(why, whylen,
             "the host's capture end hook returned %d; the recorded graph was discarded", hook_rc);
    rc = CGRT_E_CALLBACK;
  }
  char more[512];
  cgrt__diagnose_end(rt, what, failed, stream, fn, arg, more, sizeof(more));
  if (more[0]) {
    size_t used = strlen(why);
    snprintf(why + used, whylen - used, "%s", more);
  }
  if (rc == 0) {
    rt->stats.captures++;
    cgrt__comms_capture_end(&rt->comms, *graph, used_comm);
  }
  return rc;
}

/* ---------------------------------------------------------------- the graph watcher */

void cgrt__watch(cgrt_runtime *rt, int op, void *graph, void *exec, void *stream) {
  if (!rt->watch_fn)
    return;
  struct cgrt_tool_graph_event ev = {.struct_size = sizeof(ev),
                                     .op = (cgrt_tool_graph_op)op,
                                     .graph = graph,
                                     .exec = exec,
                                     .stream = stream,
                                     .driver = rt->dev.drv->name};
  rt->watch_fn(rt->watch_user, &ev);
}

/* ---------------------------------------------------------------- fallbacks */

int cgrt__capture_fallback(cgrt_runtime *rt, int code, const char *what, const char *why) {
  rt->stats.fallbacks++;
  if (rt->rep)
    rt->rep->fallbacks++;
  if (code == CGRT_E_NOMEM) {
    /* Out of memory: say where graph memory stands, so the budget can be set from the line. */
    char mem[512];
    cgrt__mem_describe(&rt->mem, cgrt__mem_budget(rt), mem, sizeof(mem));
    cgrt__fail(&rt->log, code,
               "capture of %s failed, running it eagerly: %s (%s; set [cuda_graph] "
               "memory_budget below the memory left for graphs)",
               what, why, mem);
    cgrt__log(&rt->log, CGRT_LOG_WARN, "%s", rt->log.err);
    return code;
  }
  cgrt__fail(&rt->log, code, "capture of %s failed, running it eagerly: %s", what, why);
  cgrt__log(&rt->log, CGRT_LOG_WARN, "%s", rt->log.err);
  return code;
}
