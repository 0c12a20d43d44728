/*
 * graph_mem.h - per-graph memory accounting and the memory budget. Internal.
 *
 * Every executable the core builds (the capture helper, the graph cache's rebinds) is measured:
 * the driver's graph-pool figures (used, reserved) and the device's free memory are read before
 * the capture and after the upload. The growth of the pool is charged to that graph
 * (`pool_bytes`); the rest of the drop in free memory is the executable's own memory
 * (`exec_bytes`). The runtime's ledger sums the live graphs' figures. When an executable goes,
 * its pool bytes stay reserved by the driver until a trim, so they move to `idle`;
 * cgrt__mem_reclaim() trims and settles `idle` against what the driver really gave back (what
 * it kept is shared with live graphs and is charged to the live graph with the largest
 * allocations). The budget ([cuda_graph] memory_budget) compares the ledger plus `idle` with
 * the configured size; its expectation of a build is the pool growth the graph's pool mark
 * implies (sharing-aware, see pool_mark) plus its executable's own memory.
 */
#ifndef CGRT_GRAPH_MEM_H
#define CGRT_GRAPH_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "cgrt/backend.h"

/* What one executable cost when it was built, and its use since. */
struct cgrt__graph_rec {
  uint64_t pool_bytes;      /* graph-pool memory charged to it (its growth, plus what moved) */
  uint64_t pool_used_bytes; /* growth of the pool's `used` figure when it was built */
  uint64_t exec_bytes;      /* device memory of the executable itself */
  uint64_t built_bytes;     /* pool_bytes + exec_bytes as measured at build: the expectation */
  uint64_t alloc_bytes;     /* its allocation nodes summed: its need if it shares nothing */
  /*
   * The graph pool this graph needs when launched on the runtime's stream, an upper bound:
   * graphs launched on one stream share the pool's physical memory (what each frees inside
   * itself), so a graph that reused memory at its build (grew the pool by less than it
   * allocates) may need all the pool reserved right after its build; one that took fresh memory
   * for all it allocates needs its growth. Lowered to the pool's reserved total after every trim
   * while the graph lives. The budget expects a build to grow the pool by what this exceeds the
   * pool's reserved total by.
   */
  uint64_t pool_mark;
  uint64_t nodes;
  uint64_t capture_ns;
  uint64_t instantiate_ns; /* instantiate and upload */
  uint64_t last_use;       /* step index of its last capture or replay */
  uint64_t replays;
};

struct cgrt_graphs; /* graphs.h */
struct cgrt_graph_key;

/*
 * What the ledger needs of the graph caches above it (graph_cache.c lends it when it creates a
 * cache, NULL before: no cache, no live executable), so the ledger calls nothing above itself.
 */
struct cgrt__graph_walkers {
  /* Lowers the pool mark of every live executable of g to `reserved` (the pool after a trim). */
  void (*cap_marks)(struct cgrt_graphs *g, uint64_t reserved);
  /* Calls fn for every live executable of every cache of g; stops at fn's first nonzero. */
  int (*visit)(struct cgrt_graphs *g,
               int (*fn)(void *arg, const struct cgrt_graph_key *key,
                         const struct cgrt__graph_rec *rec),
               void *arg);
  /* The record of the live executable with the largest allocations, or NULL if none has any. */
  struct cgrt__graph_rec *(*largest)(struct cgrt_graphs *g);
  /* Forgets every entry of every cache of g whose key match() accepts (cgrt__cache_retire);
   *dropped: the executables destroyed. */
  int (*retire)(struct cgrt_graphs *g, int (*match)(void *arg, const struct cgrt_graph_key *key),
                void *arg, size_t *dropped);
};

/* The graph layer's ledger (struct cgrt_graphs, mem). */
struct cgrt__graph_mem {
  const struct cgrt__graph_walkers *caches; /* the caches' live records, NULL if none yet */
  struct cgrt__graph_rec build;             /* the capture helper's last build */
  int build_valid;                          /* `build` describes the executable it just returned */
  uint64_t graphs;                          /* live executables with a record */
  uint64_t pool, exec, nodes;               /* sums over them */
  uint64_t idle;             /* pool memory the driver keeps for no live graph (until a trim) */
  uint64_t staged;           /* private copies the graph caches' executables work on */
  uint64_t peak;             /* highest pool + exec + idle */
  uint64_t budget_eager;     /* calls run eagerly because their graph did not fit */
  uint64_t budget_evictions; /* executables evicted to fit the budget */
};

/* A reading of the driver's memory figures. */
struct cgrt__mem_probe {
  int ok; /* 0: the driver gave no figures (nothing is charged then) */
  uint64_t used, reserved, free;
};

struct cgrt_graph_cache;

void cgrt__mem_probe(struct cgrt_graphs *g, struct cgrt__mem_probe *p);

/* Fills g->mem.build from the readings around a build and the graph's figures. */
void cgrt__mem_build_done(struct cgrt_graphs *g, const struct cgrt__mem_probe *before,
                          const struct cgrt__mem_probe *after, uint64_t nodes, uint64_t alloc_bytes,
                          uint64_t capture_ns, uint64_t instantiate_ns);

/* Adds a live graph's record to the ledger, or takes it out (its pool bytes become idle). */
void cgrt__mem_charge(struct cgrt_graphs *g, const struct cgrt__graph_rec *r);
void cgrt__mem_discharge(struct cgrt_graphs *g, const struct cgrt__graph_rec *r);

/*
 * A rebind changed a live graph's executable: the readings around it change its record (and the
 * ledger) by what the driver's figures moved.
 */
void cgrt__mem_adjust(struct cgrt_graphs *g, struct cgrt__graph_rec *r,
                      const struct cgrt__mem_probe *before, const struct cgrt__mem_probe *after);

/*
 * Waits for the stream, trims the graph pool and settles `idle` with what the driver gave back;
 * what it kept is shared with live graphs and charged to the one with the largest allocations.
 * Not while the stream captures (then nothing is done). *released: bytes given back (may be
 * NULL).
 */
void cgrt__mem_reclaim(struct cgrt_graphs *g, uint64_t *released);

/* The configured budget in bytes, 0 if off. */
uint64_t cgrt__mem_budget(const struct cgrt_graphs *g);

/* What the budget is compared with: the live graphs' bytes, idle pool memory and private copies. */
uint64_t cgrt__mem_total(const struct cgrt__graph_mem *m);

/*
 * "graph memory: 12.0 MiB in 4 live graphs (+0.0 MiB idle), budget 16.0 MiB" for log lines (budget:
 * cgrt__mem_budget, 0 if off).
 */
void cgrt__mem_describe(const struct cgrt__graph_mem *m, uint64_t budget, char *buf, size_t len);

/* Bytes as "12.5 MiB" (KiB, MiB, GiB). */
void cgrt__mem_format(uint64_t bytes, char *buf, size_t len);

#endif
