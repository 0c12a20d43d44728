/*
 * hostapi.h - the host API table (struct cgrt_host_api, backend.h) lent to backends. Internal.
 *
 * The table is filled in one place, cgrt__host_api_init (hostapi.c), from the entries of the
 * runtime folder declared here (thd.c, adaptive.c) and those of the graph cache
 * (graphs/graph_cache.h). Each entry finds its runtime from the table's address (CGRT_RT).
 */
#ifndef CGRT_HOSTAPI_H
#define CGRT_HOSTAPI_H

#include <stdint.h>

#include "cgrt/backend.h"
#include "runtime.h"

/* Fills the whole host API table of rt: every entry, the graph cache's included. */
void cgrt__host_api_init(cgrt_runtime *rt);

/* -- thd.c: communicators per cp size and THD metadata rings -- */

int cgrt__comm_for_cp(const struct cgrt_host_api *h, int cp, void **comm, int *cp_rank);
int cgrt__thd_create(const struct cgrt_host_api *h, int slots, int64_t max_tokens,
                     int max_sequences, struct cgrt_thd_ring **out);
void cgrt__thd_destroy(const struct cgrt_host_api *h, struct cgrt_thd_ring *r);
int cgrt__thd_write(const struct cgrt_host_api *h, struct cgrt_thd_ring *r, const int32_t *seqlens,
                    int n, int slot, struct cgrt_thd_slot *out);
int cgrt__thd_release(const struct cgrt_host_api *h, struct cgrt_thd_ring *r, int slot);

/* -- adaptive.c: buckets = adaptive -- */

int cgrt__buckets_observe(const struct cgrt_host_api *h, int64_t tokens, int *changed);
int cgrt__buckets_cost(const struct cgrt_host_api *h, int64_t tokens, int64_t bucket, double us);

#endif
