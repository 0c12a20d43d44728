/*
 * capture.c - what surrounds a capture and a graph's life, for the host and the tools: the host's
 * capture hooks (cgrt_set_capture_hooks), the graph watcher (cgrt_tool_watch_graphs) and the
 * count of a capture that fell back to eager work.
 */
#include <stdio.h>

#include "capture.h"
#include "cgrt/tool.h"
#include "graph_mem.h"
#include "runtime.h"

/* ---------------------------------------------------------------- the host's capture hooks */

int cgrt__hook_begin(cgrt_runtime *rt, void *stream) {
  if (!rt->hook_begin && !rt->hook_end)
    return 0;
  if (rt->hook_begin) {
    int rc = rt->hook_begin(rt->hook_user, stream);
    if (rc != 0)
      return rc;
  }
  rt->hook_depth++;
  return 0;
}

int cgrt__hook_end(cgrt_runtime *rt, void *stream) {
  if (rt->hook_depth == 0)
    return 0;
  rt->hook_depth--;
  return rt->hook_end ? rt->hook_end(rt->hook_user, stream) : 0;
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
    cgrt__mem_describe(rt, mem, sizeof(mem));
    cgrt__fail(rt, code,
               "capture of %s failed, running it eagerly: %s (%s; set [cuda_graph] "
               "memory_budget below the memory left for graphs)",
               what, why, mem);
    cgrt__log(rt, CGRT_LOG_WARN, "%s", rt->err);
    return code;
  }
  cgrt__fail(rt, code, "capture of %s failed, running it eagerly: %s", what, why);
  cgrt__log(rt, CGRT_LOG_WARN, "%s", rt->err);
  return code;
}
