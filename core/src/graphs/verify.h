/*
 * verify.h - checking replays against eager runs ([cuda_graph] verify). Internal.
 *
 * The graph cache decides which replays are checked (graph_cache.c); this file does the checking:
 * private copies of a call's declared buffers (its inputs copied in before the replay runs), the
 * eager run's outputs compared with the replay's, bitwise or within verify_tolerance ulps for the
 * float types the host declares in cgrt_buffer.access, and the message that names the first
 * buffer and element that differ with both values.
 */
#ifndef CGRT_VERIFY_H
#define CGRT_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "cgrt/cgrt.h"

struct cgrt_host_api;
struct cgrt_log;

/* Private copies of a unit's buffers for one check. */
struct cgrt_verify_shadow {
  cgrt_buffer *bufs; /* same bytes, access and names as the unit's; NULL pointers until made */
  size_t n;
};

/* The first element that differs between a replay's output and the eager run's. */
struct cgrt_verify_diff {
  size_t index;    /* element (or byte, for an untyped buffer) */
  unsigned type;   /* CGRT_F32... or 0 for bytes */
  char replay[64]; /* the values as text: "1.5 (0x3fc00000)" */
  char eager[64];
  uint64_t ulps; /* distance in units in the last place (typed floats), else 0 */
};

/*
 * Compares `bytes` of two outputs as elements of `type` (a CGRT_ACCESS_TYPE value; unknown types
 * and 0 compare bytewise). With tolerance 0 every type compares bitwise; above, float elements
 * may differ by that many ulps (two NaNs are equal, a NaN and a number differ). A trailing part
 * shorter than one element compares bytewise. Returns 0 if equal, 1 with *d filled if not.
 */
int cgrt__verify_compare(const void *replay, const void *eager, size_t bytes, unsigned type,
                         int tolerance, struct cgrt_verify_diff *d);

/*
 * Allocates private copies of bufs[0..n) (device memory of the runtime's driver) and enqueues the
 * copy of every input (CGRT_IN, CGRT_INOUT) into its copy, on the runtime's stream. On failure
 * nothing is left allocated and the error is returned (the caller skips the check).
 */
int cgrt__verify_snapshot(const struct cgrt_host_api *h, struct cgrt_log *log,
                          const cgrt_buffer *bufs, size_t n, struct cgrt_verify_shadow *s);

/*
 * After the replay on `replayed` and the eager run on s->bufs were enqueued: waits for the
 * stream and compares every output. Returns 0 if they agree, 1 if they differ (a sentence naming
 * the buffer, element and both values in msg), or an error. `tolerance`: [cuda_graph]
 * verify_tolerance (cgrt__verify_compare).
 */
int cgrt__verify_outputs(const struct cgrt_host_api *h, int tolerance, const cgrt_buffer *replayed,
                         const struct cgrt_verify_shadow *s, char *msg, size_t len);

/* Enqueues the copy of the eager run's outputs over the replay's. */
int cgrt__verify_adopt(const struct cgrt_host_api *h, const cgrt_buffer *replayed,
                       const struct cgrt_verify_shadow *s);

/* Frees the private copies (the stream must have finished with them). */
void cgrt__verify_free(const struct cgrt_host_api *h, struct cgrt_verify_shadow *s);

#endif
