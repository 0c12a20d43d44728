/*
 * graph_stage.h - the buffers of one graph cache unit as the cache follows them: the host's
 * addresses at each call, when each moved, and the private copies ("staged" buffers) an
 * executable works on instead of the host's under rebind = copy and auto. Internal; the policy
 * that decides when to stage is graph_cache.c's.
 *
 * A staged buffer has a private device buffer of its own: the executable reads and writes that
 * one, the host's inputs are copied into it before each replay and its outputs out after, so the
 * host may hand a new address at every call without a new recording. Under copy every buffer is
 * staged at capture; under auto only those that moved within the last AUTO_WINDOW calls when the
 * unit's buffers moved on AUTO_MOVES of them ("thrash": more than half of its recent calls), and
 * the others stay the host's. The address sets of the unit's recent calls are kept too: a unit
 * whose buffers cycle among a few sets (a host that double-buffers) needs no copies at all.
 */
#ifndef CGRT_GRAPH_STAGE_H
#define CGRT_GRAPH_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "cgrt/cgrt.h"

struct cgrt_host_api;
struct cgrt__graph_mem;

/* rebind = auto: a unit whose buffers moved on AUTO_MOVES of its last AUTO_WINDOW calls thrashes.
 */
#define AUTO_WINDOW 4
#define AUTO_MOVES  3
/* rebind = auto: a unit on private copies whose last AUTO_SETTLE calls each took an address set
   among the AUTO_WINDOW - 1 before it (so at most AUTO_WINDOW - 1 sets among them, none new) has
   settled into a cycle: it may drop its copies for a graph per set (graph_cache.c). */
#define AUTO_SETTLE (2 * AUTO_WINDOW)

/* One declared buffer of a unit. */
struct cgrt__stage_buf {
  void *host;        /* the host's address at the unit's last followed call */
  size_t bytes;      /* and its size */
  void *priv;        /* staged: the private buffer the executable works on; NULL if not staged */
  size_t priv_bytes; /* its size */
  uint64_t moved;    /* the call (cgrt__stage.calls) of its last move; 0: none seen */
  int sticky;        /* it was staged once: staged again when the unit is captured anew */
};

/* The buffers of one unit. Zeroed: nothing followed yet. */
struct cgrt__stage {
  struct cgrt__stage_buf *b;
  size_t n;
  size_t staged;                /* buffers with a private copy */
  uint64_t calls;               /* calls followed */
  uint64_t moves[AUTO_MOVES];   /* the calls of the unit's last moves, the latest first */
  uint64_t sets[AUTO_WINDOW];   /* signatures of its last address sets, the latest first */
  uint64_t copy_bytes_per_call; /* what the staged buffers copy around one replay */
  uint32_t cycled; /* calls in a row, the latest included, whose set was one of the AUTO_WINDOW - 1
                      before it (or did not move) */
};

/*
 * Counts a call of the unit with buffers b[0..n) and notes which moved (address or size) since
 * the last followed call; a call with another number of buffers counts all as moved. The first
 * call moves nothing. 1 if any moved, 0 if none, CGRT_E_NOMEM.
 */
int cgrt__stage_track(struct cgrt__stage *s, const cgrt_buffer *b, size_t n);

/* A call that moved nothing (the replay's fast path): only counted. */
static inline void cgrt__stage_tick(struct cgrt__stage *s) {
  s->calls++;
}

/* 1 if the last call moved and the unit's buffers moved on AUTO_MOVES of its last AUTO_WINDOW. */
int cgrt__stage_thrashing(const struct cgrt__stage *s);

/* 1 if the last call's address set is one of the unit's AUTO_WINDOW - 1 sets before it: its
   buffers cycle among a few sets. */
int cgrt__stage_cycling(const struct cgrt__stage *s);

/*
 * Gives private buffers to the buffers of b[0..n) not staged yet that should be: all of them
 * (`all`, rebind = copy), else those sticky or moved within the last AUTO_WINDOW calls. With
 * `budget` nonzero, refuses (CGRT_E_NOMEM, nothing allocated, the reason in why) when their bytes
 * would take the runtime's graph memory total above it. Allocation failures leave nothing newly
 * allocated and are returned with the reason in why. *added: buffers newly staged.
 */
int cgrt__stage_alloc(const struct cgrt_host_api *h, struct cgrt__graph_mem *mem,
                      struct cgrt__stage *s, const cgrt_buffer *b, size_t n, int all,
                      uint64_t budget, size_t *added, char *why, size_t whylen);

/*
 * A staged buffer the host now hands larger than its private one gets a larger one (the unit must
 * then be recorded again). 1 if one was replaced, 0 if none grew, an error (reason in why).
 */
int cgrt__stage_regrow(const struct cgrt_host_api *h, struct cgrt__graph_mem *mem,
                       struct cgrt__stage *s, const cgrt_buffer *b, size_t n, char *why,
                       size_t whylen);

/* Frees every private buffer after the stream has finished with them; the following goes on. */
void cgrt__stage_unstage(const struct cgrt_host_api *h, struct cgrt__graph_mem *mem,
                         struct cgrt__stage *s);

/* Frees everything (the stream has finished with the private buffers). */
void cgrt__stage_free(const struct cgrt_host_api *h, struct cgrt__graph_mem *mem,
                      struct cgrt__stage *s);

/*
 * 1 if the executable recorded with `used` (the addresses cgrt__stage_compose gave) can serve a
 * call with b[0..n): the buffers not staged are where they were, the staged ones no larger than
 * their private copies (their address does not matter: they are copied).
 */
int cgrt__stage_match(const struct cgrt__stage *s, const cgrt_buffer *used, const cgrt_buffer *b,
                      size_t n);

/* The addresses the executable works on for a call with b[0..n): private ones where staged.
 *out is malloc'ed (NULL for n = 0); CGRT_E_NOMEM. */
int cgrt__stage_compose(const struct cgrt__stage *s, const cgrt_buffer *b, size_t n,
                        cgrt_buffer **out);

/*
 * Enqueues, on the runtime's stream, the copy of the host's inputs into their private buffers
 * (`inputs`), or of the private outputs back to the host's buffers; counted in
 * cgrt_stats.copy_bytes.
 */
int cgrt__stage_copy(const struct cgrt_host_api *h, uint64_t *copy_bytes, struct cgrt__stage *s,
                     const cgrt_buffer *b, size_t n, int inputs);

/* "'x' (#0), 'mask' (#2)": the staged buffers, by the names of b, for log lines. */
void cgrt__stage_names(const struct cgrt__stage *s, const cgrt_buffer *b, size_t n, char *buf,
                       size_t len);

#endif
