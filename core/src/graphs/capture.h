/*
 * capture.h - a capture and a graph's life (capture.c): recording work into a graph, the host's
 * capture hooks, the graph watcher of the tools, the count of a capture that fell back to eager
 * work. Internal.
 */
#ifndef CGRT_CAPTURE_H
#define CGRT_CAPTURE_H

#include "cgrt/cgrt.h"

struct cgrt_graphs; /* graphs.h */

/*
 * Records fn(arg) on stream into a new graph (*graph), counting the capture and its time. On
 * failure the capture is ended (the stream is never left capturing), *graph is NULL, `why` says
 * what happened (with the call that broke the capture, when diagnose found it) and the error is
 * returned; nothing is counted as a fallback yet. `what` names the work for diagnose's findings.
 */
int cgrt__record(struct cgrt_graphs *g, void *stream, int (*fn)(void *arg), void *arg,
                 const char *what, char *why, size_t whylen, void **graph);

/* cgrt_set_capture_hooks: called around every capture; depth counts begins owed an end. */
struct cgrt_hooks {
  cgrt_capture_fn begin;
  cgrt_capture_fn end;
  void *user;
  int depth;
  char *pool; /* cgrt_set_capture_hooks_ex's pool_allocator (a copy), or NULL (diagnose) */
};

/*
 * The host's capture hooks (cgrt_set_capture_hooks; hooks.c) around a capture of stream.
 * cgrt__hook_begin returns the hook's nonzero result when it refuses the capture (nothing is owed
 * then); cgrt__hook_end calls the end hook once for each begin that was accepted, and returns its
 * result.
 */
int cgrt__hook_begin(struct cgrt_hooks *k, void *stream);
int cgrt__hook_end(struct cgrt_hooks *k, void *stream);

/* Counts and logs a capture that failed; the caller runs the work eagerly. Returns code. */
int cgrt__capture_fallback(struct cgrt_graphs *g, int code, const char *what, const char *why);

/* Tells the graph watcher, if any, of a driver operation (op: a cgrt_tool_graph_op). */
void cgrt__watch(struct cgrt_graphs *g, int op, void *graph, void *exec, void *stream);

#endif
