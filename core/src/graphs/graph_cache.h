/*
 * graph_cache.h - keyed executables (warm-up, capture, replay, LRU, rebind): what graph_cache.c
 * gives the rest of the core. Internal.
 *
 * The cgrt__cache_* functions are the host API table's graph cache entries (backend.h documents
 * them: run_body_graph, run_call_graph, cache_create...), with its signatures but for
 * cgrt__cache_create, which takes the graph layer the cache belongs to (the table's entry finds it
 * from the runtime); the table is filled with them in one place, cgrt__host_api_init
 * (runtime/hostapi.c). A cache keeps its graph layer: the other entries find it there.
 */
#ifndef CGRT_GRAPH_CACHE_H
#define CGRT_GRAPH_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "cgrt/backend.h"
#include "graph_mem.h"

struct cgrt_graphs; /* graphs.h */

/* -- the host API table's entries -- */

int cgrt__cache_create(struct cgrt_graphs *g, int max_graphs, cgrt_rebind rebind,
                       struct cgrt_graph_cache **out);
void cgrt__cache_destroy(const struct cgrt_host_api *h, struct cgrt_graph_cache *c);
void cgrt__cache_clear(const struct cgrt_host_api *h, struct cgrt_graph_cache *c);
int cgrt__cache_run(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                    const struct cgrt_graph_key *key, const struct cgrt_graph_work *w,
                    cgrt_mode *mode);
int cgrt__cache_has(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                    const struct cgrt_graph_key *key);
int cgrt__cache_retire(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                       int (*match)(void *arg, const struct cgrt_graph_key *key), void *arg,
                       size_t *dropped);
int cgrt__cache_run_body(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                         struct cgrt_step_frame *f, const struct cgrt_graph_key *key, int warmup,
                         cgrt_mode *mode);
int cgrt__cache_run_call(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                         struct cgrt_call *call, const struct cgrt_graph_key *key, int warmup,
                         cgrt_mode *mode);

/* -- the walks of the live executables, lent to the ledger (struct cgrt__graph_walkers) -- */

/* Lowers the pool mark of every live executable of g to `reserved` (the pool after a trim). */
void cgrt__caches_cap_marks(struct cgrt_graphs *g, uint64_t reserved);

/* Calls fn for every live executable of every cache of g; stops at fn's first nonzero. */
int cgrt__caches_visit(struct cgrt_graphs *g,
                       int (*fn)(void *arg, const struct cgrt_graph_key *key,
                                 const struct cgrt__graph_rec *rec),
                       void *arg);
/* The record of the live executable with the largest allocations (ties: the most recently
   used), or NULL if none has any. */
struct cgrt__graph_rec *cgrt__caches_largest(struct cgrt_graphs *g);

#endif
