/*
 * guard.h - who may call into a runtime now (guard.c). Internal.
 *
 * One thread at a time drives a runtime: the outermost public call of a thread takes the
 * runtime's owner (an atomic compare-and-swap) and gives it back when it returns, so a call of a
 * second thread meanwhile is refused with CGRT_E_STATE, a sentence on that thread's
 * cgrt_last_error, and nothing touched. The owner's own callbacks re-enter (depth counts the
 * calls in progress); what each may call is decided here from what the calls below it are doing
 * (rt->busy), so that no callback pulls the runtime from under the call that runs it.
 */
#ifndef CGRT_GUARD_H
#define CGRT_GUARD_H

#include "runtime.h"

/* What a public call does to the runtime, for the refusals of re-entrant calls. */
enum cgrt_call_kind {
  CGRT_CALL_USE,     /* reads it, or does what no call below it holds (stats, config, ctx work) */
  CGRT_CALL_CHANGE,  /* changes it (register, synchronize, hooks, comms, findings_clear) */
  CGRT_CALL_STEP,    /* cgrt_step: runs the backend, which changes the graphs */
  CGRT_CALL_RELEASE, /* cgrt_release_graphs: frees the graphs */
  CGRT_CALL_LIST,    /* cgrt_graph_list: walks the graphs */
  CGRT_CALL_CLOSE    /* cgrt_close: frees the runtime; refused from inside any call of it */
};

/* What the calls in progress are doing while the host's callbacks run (rt->busy, bits). */
#define CGRT_BUSY_WALK     1u /* a cgrt_graph_list visitor runs */
#define CGRT_BUSY_RELEASE  2u /* the backend frees its graphs */
#define CGRT_BUSY_HOSTFN   4u /* the stream runs: host functions run on this thread (host driver) */
#define CGRT_BUSY_CLOSE    8u /* cgrt_close tears the runtime down */
#define CGRT_BUSY_DESCRIBE 16u /* the backend describes itself to cgrt_tool_describe's emit */

/* Gives a new runtime its serial (refusals are kept per runtime and thread). */
void cgrt__guard_init(cgrt_runtime *rt);

/*
 * Enters public call `fn` (its name, for sentences) of rt. 0: go on, and cgrt__leave() when it
 * returns. CGRT_E_STATE: refused, nothing to leave: another thread drives rt (the sentence is kept
 * for this thread's cgrt_last_error, rt is not touched), or a callback of this thread may not make
 * this call now (the sentence is rt's last error). Inside a step, re-entrant calls pass: each
 * function's own checks refuse what a step forbids, with the sentences they always had.
 */
int cgrt__enter(cgrt_runtime *rt, const char *fn, enum cgrt_call_kind kind);
void cgrt__leave(cgrt_runtime *rt);

/*
 * The body of a public function of a non-NULL rt: enters call fn, evaluates `call` (an int
 * expression: the function's work) and leaves, returning its result or the refusal.
 */
#define CGRT_GUARDED(rt, fn, kind, call)                                                           \
  do {                                                                                             \
    int guarded_rc_ = cgrt__enter((rt), (fn), (kind));                                             \
    if (guarded_rc_ == 0) {                                                                        \
      guarded_rc_ = (call);                                                                        \
      if (guarded_rc_ != 0)                                                                        \
        cgrt__keep_error((rt), (fn), guarded_rc_);                                                 \
      cgrt__leave(rt);                                                                             \
    }                                                                                              \
    return guarded_rc_;                                                                            \
  } while (0)

/* This thread's refusal by rt's guard (another thread drove it), or NULL. */
const char *cgrt__refusal(const cgrt_runtime *rt);

/*
 * cgrt_last_error(rt)'s rule (cgrt.h): the sentence of the last public call on rt that failed.
 * cgrt__keep_error copies the call's sentence there when public call `fn` returns rc != 0 (a
 * generic one naming fn and the code when nothing said why); what a call that succeeds met on
 * its way (a fallback, a step above the buckets) never reaches it.
 */
void cgrt__keep_error(cgrt_runtime *rt, const char *fn, int rc);

/*
 * For a public call refused for its arguments before it takes the runtime (a NULL pointer, an
 * unset struct_size): the sentence goes to this thread's cgrt_last_error(rt), as the guard's
 * refusals do, without touching rt. Returns CGRT_E_INVAL.
 */
int cgrt__bad_args(const cgrt_runtime *rt, const char *fn);

/* Whether this thread is inside a call of rt now (a callback of it runs). */
int cgrt__driving_here(const cgrt_runtime *rt);

/*
 * For a public call that any thread may make without taking the runtime (cgrt_device_synchronize
 * on the cuda driver): its sentence goes to this thread's cgrt_last_error(rt), as the guard's
 * refusals do, without touching rt. Returns code.
 */
int cgrt__fail_here(const cgrt_runtime *rt, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Around a wait of public call fn for rt's stream (a sync, an event): on the host driver the
 * stream's host functions run during it, on this thread, and every cgrt call they make is refused
 * (rt->busy's CGRT_BUSY_HOSTFN, fn named as the runner). begin gives what end puts back.
 */
struct cgrt_stream_run {
  unsigned busy;
  const char *runner;
};
struct cgrt_stream_run cgrt__stream_run_begin(cgrt_runtime *rt, const char *fn);
void cgrt__stream_run_end(cgrt_runtime *rt, struct cgrt_stream_run saved);

/* Synchronizes rt's stream for public call fn, as above. Returns the driver's result (dev.err). */
int cgrt__run_stream(cgrt_runtime *rt, const char *fn);

#endif
