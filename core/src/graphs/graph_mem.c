/*
 * graph_mem.c - what graphs cost in device memory: readings of the driver around each build,
 * the runtime's ledger of live graphs, idle pool memory and its reclaiming, the figures the
 * budget and the log lines use. The budget's decisions are the graph cache's; the host API of it
 * (the per-graph listing, releasing with a report) is the runtime's (runtime/graph_api.c).
 */
#include <stdio.h>
#include <string.h>

#include "graph_mem.h"
#include "graphs.h"
#include "driver.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

static uint64_t minus(uint64_t a, uint64_t b) {
  return a > b ? a - b : 0;
}

void cgrt__mem_probe(struct cgrt_graphs *g, struct cgrt__mem_probe *p) {
  size_t free_bytes = 0, total = 0;
  memset(p, 0, sizeof(*p));
  if (g->dev->drv->graph_mem(g->dev, &p->used, &p->reserved) != 0 ||
      g->dev->drv->mem_info(g->dev, &free_bytes, &total) != 0)
    return; /* no figures: the build is not charged (the driver's message stays in dev.err) */
  p->free = free_bytes;
  p->ok = 1;
}

void cgrt__mem_build_done(struct cgrt_graphs *g, const struct cgrt__mem_probe *before,
                          const struct cgrt__mem_probe *after, uint64_t nodes, uint64_t alloc_bytes,
                          uint64_t capture_ns, uint64_t instantiate_ns) {
  struct cgrt__graph_rec *r = &g->mem.build;
  memset(r, 0, sizeof(*r));
  r->nodes = nodes;
  r->alloc_bytes = alloc_bytes;
  r->capture_ns = capture_ns;
  r->instantiate_ns = instantiate_ns;
  r->last_use = g->step_index;
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
  g->mem.build_valid = 1;
}

static void note_peak(struct cgrt_graphs *g) {
  uint64_t t = cgrt__mem_total(&g->mem);
  if (t > g->mem.peak)
    g->mem.peak = t;
}

void cgrt__mem_charge(struct cgrt_graphs *g, const struct cgrt__graph_rec *r) {
  struct cgrt__graph_mem *m = &g->mem;
  m->graphs++;
  m->pool += r->pool_bytes;
  m->exec += r->exec_bytes;
  m->nodes += r->nodes;
  /* A graph that reuses idle pool memory grew the pool by less than it uses: the memory it
     reuses stays counted once, as idle, until a reclaim finds it in use and charges it. */
  note_peak(g);
}

void cgrt__mem_discharge(struct cgrt_graphs *g, const struct cgrt__graph_rec *r) {
  struct cgrt__graph_mem *m = &g->mem;
  m->graphs = minus(m->graphs, 1);
  m->pool = minus(m->pool, r->pool_bytes);
  m->exec = minus(m->exec, r->exec_bytes);
  m->nodes = minus(m->nodes, r->nodes);
  /* The driver keeps the executable's pool memory reserved until a trim. */
  m->idle += r->pool_bytes;
}

void cgrt__mem_adjust(struct cgrt_graphs *g, struct cgrt__graph_rec *r,
                      const struct cgrt__mem_probe *before, const struct cgrt__mem_probe *after) {
  if (!before->ok || !after->ok)
    return;
  struct cgrt__graph_mem *m = &g->mem;
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
  note_peak(g);
}

void cgrt__mem_reclaim(struct cgrt_graphs *g, uint64_t *released) {
  const struct cgrt_driver *d = g->dev->drv;
  struct cgrt__graph_mem *m = &g->mem;
  struct cgrt__mem_probe before, after;
  int active = 0;
  if (released)
    *released = 0;
  if (d->capture_status(g->dev, g->stream, &active) != 0 || active)
    return;
  /* Launched executables still hold their memory: the trim only frees what nothing will use. */
  if (d->stream_sync(g->dev, g->stream) != 0)
    return;
  cgrt__mem_probe(g, &before);
  if (!before.ok || d->graph_mem_trim(g->dev) != 0)
    return;
  cgrt__mem_probe(g, &after);
  if (!after.ok)
    return;
  uint64_t gone = minus(before.reserved, after.reserved);
  if (released)
    *released = gone;
  /* Every live graph runs within what the pool kept. */
  if (g->mem.caches)
    g->mem.caches->cap_marks(g, after.reserved);
  m->idle = minus(m->idle, gone);
  if (m->idle == 0)
    return;
  /* What the trim kept is still mapped by live graphs (shared pages): charge it to the graph
     most likely to hold it. */
  struct cgrt__graph_rec *r = g->mem.caches ? g->mem.caches->largest(g) : NULL;
  if (!r)
    return;
  r->pool_bytes += m->idle;
  m->pool += m->idle;
  m->idle = 0;
}

uint64_t cgrt__mem_budget(const struct cgrt_graphs *g) {
  return g->view->memory_budget;
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
