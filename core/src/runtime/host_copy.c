/*
 * host_copy.c - cgrt_enqueue_host_copy: host functions whose argument is passed by value.
 *
 * The argument is copied into a record at the call and the record is what the driver's host
 * function gets. An eager call's record is freed by the host function after it ran (on whatever
 * thread runs host functions). A captured call's record belongs to the graphs: every replay runs
 * it, so it is kept on the runtime's list and freed when no graph can run it any more, at
 * cgrt_release_graphs and cgrt_close. An executable evicted by the cache keeps its records until
 * then: they are small, and nothing tells the core which records an evicted graph held.
 */
#include <stdlib.h>
#include <string.h>

#include "cgrt/cgrt.h"
#include "guard.h"
#include "hostapi.h"
#include "runtime.h"

struct cgrt_host_copy {
  struct cgrt_host_copy *next; /* the runtime's list: captured records only */
  void (*fn)(void *arg);
  int captured; /* 0: freed by run_copy after it ran */
  size_t size;
  _Alignas(max_align_t) unsigned char data[]; /* the copy, aligned as malloc aligns */
};

static void run_copy(void *arg) {
  struct cgrt_host_copy *c = arg;
  c->fn(c->size ? c->data : NULL);
  if (!c->captured)
    free(c);
}

static int enqueue_copy(cgrt_runtime *rt, const cgrt_ctx *ctx, void (*fn)(void *arg),
                        const void *arg, size_t size) {
  if (size > SIZE_MAX - sizeof(struct cgrt_host_copy))
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_enqueue_host_copy: size %zu is too large",
                      size);
  struct cgrt_host_copy *c = malloc(sizeof(*c) + size);
  if (!c)
    return cgrt__fail(&rt->log, CGRT_E_NOMEM,
                      "cgrt_enqueue_host_copy: out of host memory copying %zu bytes", size);
  c->fn = fn;
  c->size = size;
  if (size)
    memcpy(c->data, arg, size);
  int active = 0;
  if (rt->dev.drv->capture_status(&rt->dev, ctx->stream, &active) != 0)
    active = 0;
  c->captured = active;
  int rc = rt->dev.drv->host_fn(&rt->dev, ctx->stream, run_copy, c);
  if (rc != 0) {
    free(c);
    return cgrt__fail(&rt->log, rc, "cgrt_enqueue_host_copy: %s", rt->dev.err);
  }
  if (active) {
    c->next = rt->host_copies;
    rt->host_copies = c;
  }
  return 0;
}

CGRT_API int cgrt_enqueue_host_copy(const cgrt_ctx *ctx, void (*fn)(void *arg), const void *arg,
                                    size_t size) {
  if (!ctx || !ctx->rt)
    return CGRT_E_INVAL;
  if (!fn || (size && !arg))
    return cgrt__bad_args(ctx->rt, "cgrt_enqueue_host_copy");
  CGRT_GUARDED(ctx->rt, "cgrt_enqueue_host_copy", CGRT_CALL_USE,
               enqueue_copy(ctx->rt, ctx, fn, arg, size));
}

void cgrt__host_copies_free(cgrt_runtime *rt) {
  while (rt->host_copies) {
    struct cgrt_host_copy *c = rt->host_copies;
    rt->host_copies = c->next;
    free(c);
  }
}
