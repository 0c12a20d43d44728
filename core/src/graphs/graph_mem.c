/*
 * graph_mem.c - what graphs cost in device memory: readings of the driver around each build,
 * the runtime's ledger of live graphs, idle pool memory and its reclaiming, the figures the
 * budget and the log lines use, and the host API of it (the per-graph listing, releasing with a
 * report, stream-ordered temporaries). The budget's decisions are the graph cache's.
 */
#include <stdio.h>
#include <string.h>

#include "runtime.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

static uint64_t minus(uint64_t a, uint64_t b) {
  return a > b ? a - b : 0;
}

void cgrt__mem_probe(cgrt_runtime *rt, struct cgrt__mem_probe *p) {
  size_t free_bytes = 0, total = 0;
  memset(p, 0, sizeof(*p));
  if (rt->dev.drv->graph_mem(&rt->dev, &p->used, &p->reserved) != 0 ||
      rt->dev.drv->mem_info(&rt->dev, &free_bytes, &total) != 0)
    return; /* no figures: the build is not charged (the driver's message stays in dev.err) */
  p->free = free_bytes;
  p->ok = 1;
}

void cgrt__mem_build_done(cgrt_runtime *rt, const struct cgrt__mem_probe *before,
                          const struct cgrt__mem_probe *after, uint64_t nodes, uint64_t alloc_bytes,
                          uint64_t capture_ns, uint64_t instantiate_ns) {
  struct cgrt__graph_rec *r = &rt->mem.build;
  memset(r, 0, sizeof(*r));
  r->nodes = nodes;
  r->alloc_bytes = alloc_bytes;
  r->capture_ns = capture_ns;
  r->instantiate_ns = instantiate_ns;
  r->last_use = rt->step_index;
  if (before->ok && after->ok) {
    r->pool_bytes = minus(after->reserved, before->reserved);
    r->pool_used_bytes = minus(after->used, before->used);
    /* The pool's growth is device memory too: what free memory lost beyond it is the
       executable's own. */
    r->exec_bytes = minus(minus(before->free, after->free), r->pool_bytes);
    /* Grown by less than it allocates: it reuses memory other graphs map too (graphs on one
       stream share the pool), and needs at most what the pool holds now. */
    r->pool_mark = r->pool_bytes >= alloc_bytes ? r->pool_bytes : after->reserved;
  }
  r->built_bytes = r->pool_bytes + r->exec_bytes;
  rt->mem.build_valid = 1;
}

static void note_peak(cgrt_runtime *rt) {
  uint64_t t = cgrt__mem_total(&rt->mem);
  if (t > rt->mem.peak)
    rt->mem.peak = t;
}

void cgrt__mem_charge(cgrt_runtime *rt, const struct cgrt__graph_rec *r) {
  struct cgrt__graph_mem *m = &rt->mem;
  m->graphs++;
  m->pool += r->pool_bytes;
  m->exec += r->exec_bytes;
  m->nodes += r->nodes;
  /* A graph that reuses idle pool memory grew the pool by less than it uses: the memory it
     reuses stays counted once, as idle, until a reclaim finds it in use and charges it. */
  note_peak(rt);
}

void cgrt__mem_discharge(cgrt_runtime *rt, const struct cgrt__graph_rec *r) {
  struct cgrt__graph_mem *m = &rt->mem;
  m->graphs = minus(m->graphs, 1);
  m->pool = minus(m->pool, r->pool_bytes);
  m->exec = minus(m->exec, r->exec_bytes);
  m->nodes = minus(m->nodes, r->nodes);
  /* The driver keeps the executable's pool memory reserved until a trim. */
  m->idle += r->pool_bytes;
}

void cgrt__mem_adjust(cgrt_runtime *rt, struct cgrt__graph_rec *r,
                      const struct cgrt__mem_probe *before, const struct cgrt__mem_probe *after) {
  if (!before->ok || !after->ok)
    return;
  struct cgrt__graph_mem *m = &rt->mem;
  uint64_t grew = minus(after->reserved, before->reserved);
  uint64_t took = minus(minus(before->free, after->free), grew);
  uint64_t gave = minus(after->free, before->free);
  r->pool_bytes += grew;
  m->pool += grew;
  if (grew && after->reserved > r->pool_mark)
    r->pool_mark = after->reserved;
  r->exec_bytes += took;
  m->exec += took;
  /* Free memory came back (an old executable replaced by a smaller one): its own memory. */
  uint64_t back = gave < r->exec_bytes ? gave : r->exec_bytes;
  r->exec_bytes -= back;
  m->exec = minus(m->exec, back);
  note_peak(rt);
}

void cgrt__mem_reclaim(cgrt_runtime *rt, uint64_t *released) {
  const struct cgrt_driver *d = rt->dev.drv;
  struct cgrt__graph_mem *m = &rt->mem;
  struct cgrt__mem_probe before, after;
  int active = 0;
  if (released)
    *released = 0;
  if (d->capture_status(&rt->dev, rt->stream, &active) != 0 || active)
    return;
  /* Launched executables still hold their memory: the trim only frees what nothing will use. */
  if (d->stream_sync(&rt->dev, rt->stream) != 0)
    return;
  cgrt__mem_probe(rt, &before);
  if (!before.ok || d->graph_mem_trim(&rt->dev) != 0)
    return;
  cgrt__mem_probe(rt, &after);
  if (!after.ok)
    return;
  uint64_t gone = minus(before.reserved, after.reserved);
  if (released)
    *released = gone;
  /* Every live graph runs within what the pool kept. */
  if (rt->mem.caches)
    rt->mem.caches->cap_marks(rt, after.reserved);
  m->idle = minus(m->idle, gone);
  if (m->idle == 0)
    return;
  /* What the trim kept is still mapped by live graphs (shared pages): charge it to the graph
     most likely to hold it. */
  struct cgrt__graph_rec *r = rt->mem.caches ? rt->mem.caches->largest(rt) : NULL;
  if (!r)
    return;
  r->pool_bytes += m->idle;
  m->pool += m->idle;
  m->idle = 0;
}

uint64_t cgrt__mem_budget(const cgrt_runtime *rt) {
  return rt->cfg.view.memory_budget;
}

uint64_t cgrt__mem_total(const struct cgrt__graph_mem *m) {
  return m->pool + m->exec + m->idle + m->staged;
}

void cgrt__mem_format(uint64_t bytes, char *buf, size_t len) {
  if (bytes >= GIB)
    snprintf(buf, len, "%.2f GiB", (double)bytes / (double)GIB);
  else if (bytes >= MIB)
    snprintf(buf, len, "%.1f MiB", (double)bytes / (double)MIB);
  else
    snprintf(buf, len, "%.1f KiB", (double)bytes / (double)KIB);
}

void cgrt__mem_describe(const struct cgrt__graph_mem *m, uint64_t budget_bytes, char *buf,
                        size_t len) {
  char live[32], idle[32], budget[32];
  cgrt__mem_format(m->pool + m->exec, live, sizeof(live));
  cgrt__mem_format(m->idle, idle, sizeof(idle));
  if (budget_bytes)
    cgrt__mem_format(budget_bytes, budget, sizeof(budget));
  else
    snprintf(budget, sizeof(budget), "off");
  snprintf(buf, len,
           "graph memory: %s in %llu live graphs, %s idle in the pool, memory_budget %s, %llu "
           "calls run eagerly for the budget so far",
           live, (unsigned long long)m->graphs, idle, budget, (unsigned long long)m->budget_eager);
}

/* ---------------------------------------------------------------- host API */

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

CGRT_API int cgrt_graph_list(cgrt_runtime *rt, cgrt_graph_fn fn, void *user) {
  if (!rt)
    return CGRT_E_INVAL;
  if (!fn)
    return cgrt__fail(&rt->log, CGRT_E_INVAL, "cgrt_graph_list: fn is NULL");
  if (rt->in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE, "cgrt_graph_list: not allowed inside a step");
  struct list_arg a = {rt, fn, user};
  return rt->mem.caches ? rt->mem.caches->visit(rt, list_one, &a) : 0;
}

CGRT_API int cgrt_release_graphs_ex(cgrt_runtime *rt, cgrt_release_report *report) {
  if (!rt)
    return CGRT_E_INVAL;
  if (report && report->struct_size < sizeof(size_t))
    return cgrt__fail(&rt->log, CGRT_E_INVAL,
                      "cgrt_release_graphs_ex: report->struct_size is not set");
  if (rt->in_step)
    return cgrt__fail(&rt->log, CGRT_E_STATE, "cgrt_release_graphs: not allowed inside a step");
  cgrt_release_report rep = {.struct_size = sizeof(rep)};
  struct cgrt__graph_mem m0 = rt->mem;
  uint64_t used = 0;
  int rc = rt->dev.drv->stream_sync(&rt->dev, rt->stream);
  if (rc != 0)
    cgrt__fail(&rt->log, rc, "cgrt_release_graphs: %s", rt->dev.err);
  (void)rt->dev.drv->graph_mem(&rt->dev, &used, &rep.pool_reserved_before);
  if (CGRT_BACKEND_HAS(rt->lib.vt, release)) {
    int brc = rt->lib.vt->release(rt->be_state);
    rc = rc ? rc : brc;
  }
  rep.graphs = minus(m0.graphs, rt->mem.graphs);
  rep.bytes = minus(m0.pool + m0.exec, rt->mem.pool + rt->mem.exec);
  rep.nodes = minus(m0.nodes, rt->mem.nodes);
  if (rc == 0)
    cgrt__mem_reclaim(rt, NULL);
  rep.pool_reserved_after = rep.pool_reserved_before;
  (void)rt->dev.drv->graph_mem(&rt->dev, &used, &rep.pool_reserved_after);
  if (report) {
    size_t keep = report->struct_size;
    memcpy(report, &rep, keep < sizeof(rep) ? keep : sizeof(rep));
    report->struct_size = keep;
  }
  return rc;
}

CGRT_API int cgrt_alloc_async(const cgrt_ctx *ctx, size_t bytes, void **ptr) {
  if (!ctx || !ctx->rt || !ptr)
    return CGRT_E_INVAL;
  cgrt_runtime *rt = ctx->rt;
  int rc = rt->dev.drv->mem_alloc_async(&rt->dev, ctx->stream, bytes, ptr);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "cgrt_alloc_async of %zu bytes: %s", bytes, rt->dev.err);
  return 0;
}

CGRT_API int cgrt_free_async(const cgrt_ctx *ctx, void *ptr) {
  if (!ctx || !ctx->rt)
    return CGRT_E_INVAL;
  cgrt_runtime *rt = ctx->rt;
  int rc = rt->dev.drv->mem_free_async(&rt->dev, ctx->stream, ptr);
  if (rc != 0)
    return cgrt__fail(&rt->log, rc, "cgrt_free_async: %s", rt->dev.err);
  return 0;
}
