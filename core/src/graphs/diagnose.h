/*
 * diagnose.h - what broke a capture ([runtime] diagnose). Internal.
 *
 * While the core records work into a graph (cgrt__record), the device API calls made on the
 * capturing thread are recorded: on the cuda driver through its recorder (struct cgrt_driver's
 * record_* operations: CUPTI's callback API in drivers/cuda/diagnose_cupti.c, libcupti loaded with
 * dlopen only when needed), on the host driver through the driver's own capture checks (struct
 * cgrt_dev's note hook). The structs below are part of the driver interface (driver.h). After the
 * capture, the first call refused because of the capture and every capturable but suspicious call
 * become findings: one log line each and an entry of the runtime's list (cgrt_findings_count /
 * cgrt_finding_get).
 *
 * When: diagnose = failures (default) reports only captures that failed; on the cuda driver a
 * failed capture is captured once more with CUPTI recording (the callbacks run again in capture
 * mode, as they just did, and nothing recorded runs), then discarded. diagnose = on records every
 * capture and reports suspicious calls of captures that succeeded too. diagnose = off never
 * records.
 */
#ifndef CGRT_DIAGNOSE_H
#define CGRT_DIAGNOSE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cgrt/cgrt.h"

struct cgrt_graphs; /* graphs.h */

/* One device API call seen while capturing, as the recorder classified it. */
struct cgrt_diag_call {
  cgrt_finding_kind kind;
  int refused; /* the call was refused because a capture was running (it invalidates it) */
  int result;  /* cudaError_t, CUresult or CGRT_E_* */
  char call[64];
  char result_name[64];
  char caller[256];
  char object[512]; /* the caller's shared object (dladdr's file name), "" if unknown */
  char detail[384]; /* what the call did, e.g. "copies 64 bytes from pageable memory" */
  /* CUPTI: copies are classified after the capture (pointer attributes cannot be asked inside) */
  int domain; /* 0 host driver, 1 runtime API, 2 driver API */
  int classify;
  const void *dst, *src;
  int copy_kind;
  size_t bytes;
};

#define CGRT_DIAG_MAX_CALLS 64

/* The calls of one capture that may become findings. */
struct cgrt_diag_rec {
  struct cgrt_diag_call calls[CGRT_DIAG_MAX_CALLS];
  size_t n;
  uint64_t seen;  /* every call recorded, findings or not */
  size_t dropped; /* candidates beyond CGRT_DIAG_MAX_CALLS */
};

/* Appends a call to rec (counts it as dropped if full); returns the slot or NULL. Inline: the
 * cuda driver's recorder uses it too. */
static inline struct cgrt_diag_call *cgrt__diag_rec_add(struct cgrt_diag_rec *rec) {
  if (rec->n == CGRT_DIAG_MAX_CALLS) {
    rec->dropped++;
    return NULL;
  }
  struct cgrt_diag_call *c = &rec->calls[rec->n++];
  memset(c, 0, sizeof(*c));
  return c;
}

/*
 * The function that made the device call being recorded, from a backtrace of the calling thread:
 * the first frame below `boundary` (struct cgrt_graphs' host_frame) outside libcgrt, CUDA's
 * libraries and CUPTI, into c->caller as "symbol+0xoff (object)" or "object+0xoff" when the symbol
 * is not exported, and its object's file name into c->object; both "" if the call was made by cgrt
 * itself, or no frame qualifies.
 */
void cgrt__diag_caller(const void *boundary, struct cgrt_diag_call *c);

/* Sets up diagnose for an opened runtime (the driver's note hook); close frees the findings. */
void cgrt__diagnose_open(struct cgrt_graphs *g);
void cgrt__diagnose_close(struct cgrt_graphs *g);

/*
 * Around one recording (cgrt__record): begin right after the capture began, pause right before it
 * ends, end after it ended. `failed` says whether the capture failed; `again(arg)` captures the
 * same work once more on `stream` (cuda driver, diagnose = failures). end writes the sentence of
 * the call that broke the capture, if one was found, into why_more (else "").
 */
void cgrt__diagnose_begin(struct cgrt_graphs *g);
void cgrt__diagnose_pause(struct cgrt_graphs *g);
void cgrt__diagnose_end(struct cgrt_graphs *g, const char *what, int failed, void *stream,
                        int (*again)(void *arg), void *arg, char *why_more, size_t len);

/*
 * The findings kept so far, for cgrt_findings_count, cgrt_finding_get and cgrt_findings_clear
 * (runtime/): get fills the whole of *out (its strings live until the findings are cleared or the
 * runtime closes), CGRT_E_INVAL past the end.
 */
size_t cgrt__findings_count(const struct cgrt_graphs *g);
int cgrt__finding_get(const struct cgrt_graphs *g, size_t index, cgrt_finding *out);
void cgrt__findings_clear(struct cgrt_graphs *g);

#endif
