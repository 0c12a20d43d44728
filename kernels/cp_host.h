/*
 * cp_host.h - the cp workload driven through cgrt the way a context-parallel training engine
 * would: each layer's attention and MLP registered as cgrt modules (kinds attn and mlp), prepare
 * stages the step's packed input into this rank's rows, the body calls the modules layer by
 * layer. Everything a module call needs about the step's split comes from the cgrt_ctx it is
 * given: the cp size, this rank's index in its cp group, the group's communicator, the padded
 * total and the THD metadata of the step's slot. When the runtime gives no usable THD metadata
 * (a backend other than dynamic_cp, or a slot whose padded total the cp size does not divide),
 * prepare stages the workload's own (cgrtk_cp_stage_thd) and pads the total up to a multiple of
 * the cp size. Shared by the tests and
 * `cgrt bench --workload cp`.
 */
#ifndef CGRT_CP_HOST_H
#define CGRT_CP_HOST_H

#include "cgrt/cgrt.h"
#include "cp.h"

#define CP_HOST_MAX_LAYERS 64
#define CP_HOST_MAX_CP     64 /* cp sizes 1..CP_HOST_MAX_CP */

struct cp_host {
  cgrt_runtime *rt;
  cgrtk_cp *w;
  int layers;
  cgrt_module *attn[CP_HOST_MAX_LAYERS];
  cgrt_module *mlp[CP_HOST_MAX_LAYERS];
  struct cp_host_ref {
    struct cp_host *h;
    int layer;
  } refs[CP_HOST_MAX_LAYERS];
  /* The step in flight, for prepare. */
  uint64_t data; /* which input values the step stages (cgrtk_cp_stage's step) */
  const int32_t *seqlens;
  int nseq;
  /* How the last prepare at each cp size split the batch (index: cp size). */
  struct cp_host_split {
    int64_t padded_total;
    int cp_rank;
    int prepared;
    int own_thd; /* the runtime gave no THD metadata: the workload's own is used */
    const int32_t *cu_seqlens;
    const int32_t *cu_seqlens_padded;
    int padded_sequences;
  } split[CP_HOST_MAX_CP + 1];
  char err[256]; /* why the last failed call failed, beyond cgrt_last_error(rt) */
};

/* Registers the workload's 2 * layers modules ("layerN.attn", "layerN.mlp") with rt. 0 or a
 * cgrt error (cgrt_last_error(rt) says why). */
int cp_host_open(struct cp_host *h, cgrtk_cp *w, cgrt_runtime *rt);

/*
 * One step over the packed sequences seqlens[0..nseq) at context-parallel size cp_size (phase
 * train, forward calls only): prepare stages input `data` (cgrtk_cp_stage's step) into this
 * rank's rows, the body runs attn and mlp of every layer. seqlens must stay valid during the
 * call. `report` may be NULL. Returns 0 or a cgrt error; h->err and cgrt_last_error(rt) say why.
 */
int cp_host_step(struct cp_host *h, uint64_t data, const int32_t *seqlens, int nseq, int cp_size,
                 cgrt_step_report *report);

/* This rank's rows of the last step prepared at cp_size: global rows [*row0, *row0 + *rows) of
 * the padded total *padded_total. Any output may be NULL. CGRT_E_STATE if none was prepared. */
int cp_host_local(const struct cp_host *h, int cp_size, int64_t *row0, int64_t *rows,
                  int64_t *padded_total);

/*
 * Waits for the runtime's stream and copies this rank's rows of the last step at cp_size
 * (cp_host_local) into dst (room for cap floats): rows * d_model floats, row-major. *rows_out
 * (may be NULL) gets the row count. Not inside a step.
 */
int cp_host_read(struct cp_host *h, int cp_size, float *dst, size_t cap, int64_t *rows_out);

/* The sentence of the last failure: h->err if set, else cgrt_last_error(h->rt). */
const char *cp_host_error(const struct cp_host *h);

#endif
