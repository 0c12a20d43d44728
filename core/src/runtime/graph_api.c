/*
 * graph_api.c - the host API of the graph layer, which needs the runtime (its modules, its
 * backend, whether a step runs): the per-graph listing and releasing with a report over the
 * ledger (graphs/graph_mem.c), stream-ordered temporaries, and diagnose's findings
 * (graphs/diagnose.c).
 */
#include <stdio.h>
#include <string.h>

#include "graphs/diagnose.h"
#include "graphs/graph_mem.h"
#include "guard.h"
#include "runtime.h"

static uint64_t minus(uint64_t a, uint64_t b) {
  return a > b ? a - b : 0;
}

/* ---------------------------------------------------------------- the live graphs */

struct list_arg {
  cgrt_runtime *rt;
  cgrt_graph_fn fn;
  void *user;
};

static int list_one(void *arg, const struct cgrt_graph_key *k, const struct cgrt__graph_rec *r) {
  struct list_arg *a = arg;
  cgrt_runtime *rt = a->rt;
  const char *module = NULL;
  if (k->module != CGRT_KEY_BODY && k->module < rt->num_modules)
    module = rt->modules[k->module]->name;
  char name[256];
  int n;
  if (module)
    n = snprintf(name, sizeof(name), "%s %s, %s, key %llu", module,
                 k->dir == CGRT_BACKWARD ? "bwd" : "fwd", cgrt_phase_name((cgrt_phase)k->phase),
                 (unsigned long long)k->shape);
  else
    n = snprintf(name, sizeof(name), "body, %s, key %llu", cgrt_phase_name((cgrt_phase)k->phase),
                 (unsigned long long)k->shape);
  if (n > 0 && (size_t)n < sizeof(name) && k->microbatch > 0)
    n += snprintf(name + n, sizeof(name) - (size_t)n, ", microbatch %d", (int)k->microbatch);
  if (n > 0 && (size_t)n < sizeof(name) && k->extra)
    snprintf(name + n, sizeof(name) - (size_t)n, ", extra %llu", (unsigned long long)k->extra);
  cgrt_graph_info g = {
      .struct_size = sizeof(g),
      .name = name,
      .module = module,
      .dir = k->dir == CGRT_BACKWARD ? CGRT_BACKWARD : CGRT_FORWARD,
      .microbatch = k->microbatch,
      .phase = (cgrt_phase)k->phase,
      .shape = k->shape,
      .extra = k->extra,
      .bytes = r->pool_bytes + r->exec_bytes,
      .pool_bytes = r->pool_bytes,
      .pool_used_bytes = r->pool_used_bytes,
      .exec_bytes = r->exec_bytes,
      .alloc_bytes = r->alloc_bytes,
      .nodes = r->nodes,
      .capture_ns = r->capture_ns,
      .instantiate_ns = r->instantiate_ns,
      .last_use = r->last_use,
      .replays = r->replays,
  };
  return a->fn(a->user, &g);
}

/*
 * The visitor may read the runtime but not change the graphs it is shown (the walk stands on
 * them): cgrt_step, cgrt_release_graphs and cgrt_close are refused while it runs (guard.c).
 */
static int graph_list(cgrt_runtime *rt, cgrt_graph_fn fn, void *user) {
  if (!fn)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_graph_list: fn is NULL");
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE, "cgrt_graph_list: not allowed inside a step");
  if (!rt->graphs.mem.caches)
    return 0;
  struct list_arg a = {rt, fn, user};
  unsigned busy = rt->busy;
  rt->busy |= CGRT_BUSY_WALK;
  int rc = rt->graphs.mem.caches->visit(&rt->graphs, list_one, &a);
  rt->busy = busy;
  return rc;
}

CGRT_API int cgrt_graph_list(cgrt_runtime *rt, cgrt_graph_fn fn, void *user) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_graph_list", CGRT_CALL_LIST, graph_list(rt, fn, user));
}

/* Before graphs are freed: the stream is waited for (a replay of one may still read its private
   copies). A failure is said and returned; the caller frees the graphs all the same. */
static int wait_before_freeing(cgrt_runtime *rt, const char *fn) {
  int rc = cgrt__run_stream(rt, fn);
  if (rc != 0)
    cgrt__fail(&rt->log, rc, "%s: %s", fn, rt->dev.err);
  return rc;
}

int cgrt__graphs_release(cgrt_runtime *rt, const char *fn, cgrt_release_report *report) {
  cgrt_release_report rep = {.struct_size = sizeof(rep)};
  struct cgrt__graph_mem m0 = rt->graphs.mem;
  uint64_t used = 0;
  int rc = wait_before_freeing(rt, fn);
  (void)rt->dev.drv->graph_mem(&rt->dev, &used, &rep.pool_reserved_before);
  if (CGRT_BACKEND_HAS(rt->lib.vt, release)) {
    unsigned busy = rt->busy;
    rt->busy |= CGRT_BUSY_RELEASE;
    int brc = rt->lib.vt->release(rt->be_state);
    rt->busy = busy;
    rc = rc ? rc : brc;
  }
  rep.graphs = minus(m0.graphs, rt->graphs.mem.graphs);
  rep.bytes = minus(m0.pool + m0.exec, rt->graphs.mem.pool + rt->graphs.mem.exec);
  rep.nodes = minus(m0.nodes, rt->graphs.mem.nodes);
  if (rc == 0) {
    cgrt__mem_reclaim(&rt->graphs, NULL);
    cgrt__host_copies_free(rt); /* no graph is left to replay a captured call */
  }
  rep.pool_reserved_after = rep.pool_reserved_before;
  (void)rt->dev.drv->graph_mem(&rt->dev, &used, &rep.pool_reserved_after);
  if (report) {
    size_t keep = report->struct_size;
    memcpy(report, &rep, keep < sizeof(rep) ? keep : sizeof(rep));
    report->struct_size = keep;
  }
  return rc;
}

static int release_graphs(cgrt_runtime *rt, cgrt_release_report *report, const char *fn) {
  if (report && report->struct_size < sizeof(size_t))
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "%s: report->struct_size is not set", fn);
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE, "cgrt_release_graphs: not allowed inside a step");
  return cgrt__graphs_release(rt, fn, report);
}

CGRT_API int cgrt_release_graphs_ex(cgrt_runtime *rt, cgrt_release_report *report) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_release_graphs_ex", CGRT_CALL_RELEASE,
               release_graphs(rt, report, "cgrt_release_graphs_ex"));
}

CGRT_API int cgrt_release_graphs(cgrt_runtime *rt) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_release_graphs", CGRT_CALL_RELEASE,
               release_graphs(rt, NULL, "cgrt_release_graphs"));
}

/* ---------------------------------------------------------------- one key's graphs */

struct key_match {
  uint32_t module;
  uint64_t shape;
};

static int key_matches(void *arg, const struct cgrt_graph_key *k) {
  const struct key_match *a = arg;
  return k->module == a->module && k->shape == a->shape;
}

static int release_key(cgrt_runtime *rt, cgrt_module *m, uint64_t key, size_t *released) {
  static const char fn[] = "cgrt_module_release_key";
  if (!m || m->rt != rt)
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "%s: the module is NULL or belongs to another runtime", fn);
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE, "%s('%s'): not allowed inside a step", fn, m->name);
  if (!rt->graphs.mem.caches)
    return 0; /* no cache, no graph */
  int rc = wait_before_freeing(rt, fn);
  struct key_match a = {m->info.id, key};
  size_t n = 0;
  int rrc = rt->graphs.mem.caches->retire(&rt->graphs, key_matches, &a, &n);
  if (n > 0)
    cgrt__mem_reclaim(&rt->graphs, NULL);
  if (released)
    *released = n;
  return rc ? rc : rrc;
}

CGRT_API int cgrt_module_release_key(cgrt_runtime *rt, cgrt_module *m, uint64_t key,
                                     size_t *released) {
  if (released)
    *released = 0;
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_module_release_key", CGRT_CALL_RELEASE, release_key(rt, m, key, released));
}

/* ---------------------------------------------------------------- stream-ordered temporaries */

static int alloc_async(cgrt_runtime *rt, const cgrt_ctx *ctx, size_t bytes, void **ptr) {
  int rc = rt->dev.drv->mem_alloc_async(&rt->dev, ctx->stream, bytes, ptr);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "cgrt_alloc_async of %zu bytes: %s", bytes, rt->dev.err);
  return 0;
}

CGRT_API int cgrt_alloc_async(const cgrt_ctx *ctx, size_t bytes, void **ptr) {
  if (!ctx || !ctx->rt)
    return CGRT_E_INVAL;
  if (!ptr)
    return cgrt__bad_args(ctx->rt, "cgrt_alloc_async");
  CGRT_GUARDED(ctx->rt, "cgrt_alloc_async", CGRT_CALL_USE, alloc_async(ctx->rt, ctx, bytes, ptr));
}

static int free_async(cgrt_runtime *rt, const cgrt_ctx *ctx, void *ptr) {
  int rc = rt->dev.drv->mem_free_async(&rt->dev, ctx->stream, ptr);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "cgrt_free_async: %s", rt->dev.err);
  return 0;
}

CGRT_API int cgrt_free_async(const cgrt_ctx *ctx, void *ptr) {
  if (!ctx || !ctx->rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(ctx->rt, "cgrt_free_async", CGRT_CALL_USE, free_async(ctx->rt, ctx, ptr));
}

/* ---------------------------------------------------------------- diagnose's findings */

static int findings_count(const cgrt_runtime *rt, size_t *count) {
  *count = cgrt__findings_count(&rt->graphs);
  return 0;
}

/* The guard writes the owner of a runtime that the reading functions take as const. */
#define MUTABLE(rt) ((cgrt_runtime *)(rt))

CGRT_API int cgrt_findings_count(const cgrt_runtime *rt, size_t *count) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!count)
    return cgrt__bad_args(rt, "cgrt_findings_count");
  CGRT_GUARDED(MUTABLE(rt), "cgrt_findings_count", CGRT_CALL_USE, findings_count(rt, count));
}

static int finding_get(cgrt_runtime *rt, size_t index, cgrt_finding *out) {
  cgrt_finding v;
  int rc = cgrt__finding_get(&rt->graphs, index, &v);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc,
                      "cgrt_finding_get: no finding %zu (cgrt_findings_count has %zu)", index,
                      cgrt__findings_count(&rt->graphs));
  size_t keep = out->struct_size;
  memcpy(out, &v, keep < sizeof(v) ? keep : sizeof(v));
  out->struct_size = keep;
  return 0;
}

CGRT_API int cgrt_finding_get(const cgrt_runtime *rt, size_t index, cgrt_finding *out) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!out || out->struct_size < offsetof(cgrt_finding, count) + sizeof(out->count))
    return cgrt__bad_args(rt, "cgrt_finding_get");
  CGRT_GUARDED(MUTABLE(rt), "cgrt_finding_get", CGRT_CALL_USE,
               finding_get(MUTABLE(rt), index, out));
}

static int findings_clear(cgrt_runtime *rt) {
  if (rt->graphs.in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE, "cgrt_findings_clear: not allowed inside a step");
  cgrt__findings_clear(&rt->graphs);
  return 0;
}

CGRT_API int cgrt_findings_clear(cgrt_runtime *rt) {
  if (!rt)
    return CGRT_E_INVAL;
  CGRT_GUARDED(rt, "cgrt_findings_clear", CGRT_CALL_CHANGE, findings_clear(rt));
}
