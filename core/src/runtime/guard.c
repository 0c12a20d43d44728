/*
 * guard.c - who may call into a runtime now: one thread at a time (an atomic owner), and, on that
 * thread, no callback that would pull the runtime from under the call that runs it.
 *
 * The owner is a token of the calling thread (the address of a thread-local), swapped in by the
 * outermost public call and cleared when it returns: a runtime may change hands between calls
 * (opened on one thread, closed on another), never during one. A call of another thread
 * meanwhile is refused before it reads anything of the runtime; its sentence is kept in a
 * thread-local, so that the driving thread's last error is not written from two threads.
 */
#include "guard.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char thread_token; /* its address names the thread */
static _Atomic uint64_t serials;

/* The last refusal of this thread by another thread's ownership. */
static _Thread_local struct {
  const cgrt_runtime *rt;
  uint64_t serial;
  char msg[1024];
} refusal;

void cgrt__guard_init(cgrt_runtime *rt) {
  rt->serial = atomic_fetch_add(&serials, 1) + 1;
}

const char *cgrt__refusal(const cgrt_runtime *rt) {
  return rt && refusal.rt == rt && refusal.serial == rt->serial ? refusal.msg : NULL;
}

void cgrt__keep_error(cgrt_runtime *rt, const char *fn, int rc) {
  if (rt->log.err[0])
    snprintf(rt->last_err, sizeof(rt->last_err), "%s", rt->log.err);
  else
    snprintf(rt->last_err, sizeof(rt->last_err), "%s failed: %s (error %d)", fn, cgrt_strerror(rc),
             rc);
}

int cgrt__fail_here(const cgrt_runtime *rt, int code, const char *fmt, ...) {
  refusal.rt = rt;
  refusal.serial = rt->serial;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(refusal.msg, sizeof(refusal.msg), fmt, ap);
  va_end(ap);
  return code;
}

int cgrt__bad_args(const cgrt_runtime *rt, const char *fn) {
  return cgrt__fail_here(rt, CGRT_E_INVAL,
                         "%s: an argument is NULL or out of range, or a struct's struct_size is "
                         "not set to its sizeof; nothing was done (cgrt.h lists what the call "
                         "takes)",
                         fn);
}

int cgrt__driving_here(const cgrt_runtime *rt) {
  return atomic_load_explicit(&rt->owner, memory_order_acquire) == (uintptr_t)&thread_token;
}

static int refuse_thread(cgrt_runtime *rt, const char *fn) {
  const char *outer = atomic_load_explicit(&rt->entry, memory_order_relaxed);
  return cgrt__fail_here(rt, CGRT_E_STATE,
                         "%s: the runtime is being driven by another thread (%s%s): one thread at "
                         "a time drives a runtime; open one per thread",
                         fn, outer ? "which is inside " : "which has just returned from a call",
                         outer ? outer : "");
}

/* A call of the owning thread from inside another of its calls: a callback of that call. */
static int reentry(cgrt_runtime *rt, const char *fn, enum cgrt_call_kind kind) {
  const char *outer = atomic_load_explicit(&rt->entry, memory_order_relaxed);
  int closing = kind == CGRT_CALL_CLOSE;
  unsigned busy = rt->busy;
  if (busy & CGRT_BUSY_CLOSE)
    return closing ? cgrt__fail(&rt->log, CGRT_E_STATE,
                                "cgrt_close called while the runtime is being closed (from the "
                                "log sink or a host function that cgrt_close ran); nothing was "
                                "freed by this call: the cgrt_close under it frees the runtime")
                   : cgrt__fail(&rt->log, CGRT_E_STATE,
                                "%s called while cgrt_close tears the runtime down (from the log "
                                "sink or a host function that it ran); nothing was done",
                                fn);
  if (busy & CGRT_BUSY_HOSTFN)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "%s called from a host function (run by %s): host functions must not call "
                      "cgrt (as with cudaLaunchHostFunc); %s",
                      fn, rt->stream_runner,
                      closing ? "nothing was freed: close after it returns" : "nothing was done");
  if (rt->graphs.in_step) {
    /* Each function's own check refuses what a step forbids, as it always did. */
    if (!closing)
      return 0;
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "cgrt_close called from inside a step (prepare, body, a module, a capture "
                      "hook, a host function or the log sink); nothing was freed: close after "
                      "cgrt_step returns");
  }
  if (rt->log.in_sink && kind != CGRT_CALL_USE && kind != CGRT_CALL_LIST)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "%s called from the log sink, in the middle of %s: the sink may read the "
                      "runtime (cgrt_stats_get, cgrt_config_get...) but not change it; %s after "
                      "%s returns",
                      fn, outer, closing ? "nothing was freed: close" : "call it", outer);
  if ((busy & CGRT_BUSY_DESCRIBE) && kind != CGRT_CALL_USE && kind != CGRT_CALL_LIST)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "%s called from the emit callback of cgrt_tool_describe: it may read the "
                      "runtime but not change it%s; call it after cgrt_tool_describe returns",
                      fn, closing ? ", and nothing was freed" : "");
  if ((busy & CGRT_BUSY_WALK) && (kind == CGRT_CALL_STEP || kind == CGRT_CALL_RELEASE || closing))
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "%s called from a cgrt_graph_list visitor: the graphs may not change while "
                      "they are listed%s; return nonzero from the visitor to stop the listing, "
                      "and call %s after cgrt_graph_list returns",
                      fn, closing ? ", and nothing was freed" : "", fn);
  if ((busy & CGRT_BUSY_RELEASE) &&
      (kind == CGRT_CALL_STEP || kind == CGRT_CALL_RELEASE || kind == CGRT_CALL_LIST || closing))
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "%s called while cgrt_release_graphs frees the graphs (from a callback it "
                      "ran)%s; call it after cgrt_release_graphs returns",
                      fn, closing ? ", and nothing was freed" : "");
  if (closing)
    return cgrt__fail(&rt->log, CGRT_E_STATE,
                      "cgrt_close called from inside %s (from a callback it ran); nothing was "
                      "freed: close after it returns",
                      outer);
  return 0;
}

int cgrt__enter(cgrt_runtime *rt, const char *fn, enum cgrt_call_kind kind) {
  uintptr_t me = (uintptr_t)&thread_token, owner = 0;
  if (atomic_compare_exchange_strong_explicit(&rt->owner, &owner, me, memory_order_acquire,
                                              memory_order_relaxed)) {
    rt->depth = 1;
    atomic_store_explicit(&rt->entry, fn, memory_order_relaxed);
  } else if (owner != me) {
    return refuse_thread(rt, fn);
  } else {
    int rc = reentry(rt, fn, kind);
    if (rc != 0) {
      cgrt__keep_error(rt, fn, rc); /* this thread drives rt: its refusal is rt's last error */
      return rc;
    }
    rt->depth++;
  }
  if (refusal.rt == rt)
    refusal.rt = NULL; /* this thread drives rt now: its errors are rt's last error again */
  return 0;
}

void cgrt__leave(cgrt_runtime *rt) {
  if (--rt->depth > 0)
    return;
  atomic_store_explicit(&rt->entry, NULL, memory_order_relaxed);
  atomic_store_explicit(&rt->owner, 0, memory_order_release);
}

struct cgrt_stream_run cgrt__stream_run_begin(cgrt_runtime *rt, const char *fn) {
  struct cgrt_stream_run saved = {rt->busy, rt->stream_runner};
  rt->busy |= CGRT_BUSY_HOSTFN;
  rt->stream_runner = fn;
  return saved;
}

void cgrt__stream_run_end(cgrt_runtime *rt, struct cgrt_stream_run saved) {
  rt->busy = saved.busy;
  rt->stream_runner = saved.runner;
}

int cgrt__run_stream(cgrt_runtime *rt, const char *fn) {
  struct cgrt_stream_run saved = cgrt__stream_run_begin(rt, fn);
  int rc = rt->dev.drv->stream_sync(&rt->dev, rt->stream);
  cgrt__stream_run_end(rt, saved);
  return rc;
}
