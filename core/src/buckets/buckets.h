/*
 * buckets.h - inference token buckets (DESIGN.md section 5): the graph sizes a step of T tokens is
 * padded up to. Internal.
 */
#ifndef CGRT_BUCKETS_H
#define CGRT_BUCKETS_H

#include <stddef.h>
#include <stdint.h>

#include "cgrt/backend.h"

/*
 * Builds the bucket list, ascending, into a malloc'ed array (*out, *count); the caller frees it.
 * - exponential: halve from max_tokens (integer halving of the unrounded value, as Megatron-LM
 *   does), rounding each value up to a multiple of tp_size, until a value <= tp_size is reached,
 *   which becomes tp_size (the one-token-per-rank graph); keep max_tokens itself as given; drop
 *   duplicates; if more than num_graphs remain, drop from the small end but keep the smallest
 *   (tp_size), so exactly min(num_graphs, distinct) remain (num_graphs = 1: max_tokens alone).
 *   128/8/tp1 -> 1 2 4 8 16 32 64 128; 1000/6/tp8 -> 8 64 128 256 504 1000.
 * - linear: step = ceil(max_tokens / num_graphs) rounded up to a multiple of tp_size; the sizes
 *   step, 2 step, ... below max_tokens, then max_tokens.
 * - list: `list` (list_len entries) sorted ascending, duplicates dropped.
 * - adaptive: the exponential set, which the traffic then reshapes (bucket_plan.h).
 * Errors (CGRT_E_INVAL, with a sentence in err naming the option; *out NULL, *count 0):
 * max_tokens < 1, num_graphs < 1, tp_size < 1, max_tokens < tp_size (checked for every
 * distribution, as the configuration rules do), an empty list or a value < 1 in it.
 * CGRT_E_NOMEM if memory ran out. err may be NULL.
 */
int cgrt__buckets_build(cgrt_bucket_dist dist, int64_t max_tokens, int num_graphs, int tp_size,
                        const int64_t *list, size_t list_len, int64_t **out, size_t *count,
                        char *err, size_t errlen);

/*
 * Index of the smallest bucket >= tokens in the ascending list, or -1 if tokens is above the
 * largest. tokens <= 0 maps to the smallest bucket.
 */
long cgrt__bucket_index(const int64_t *sizes, size_t count, int64_t tokens);

#endif
