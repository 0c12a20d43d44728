/* cp_host.c - the cp workload as a cgrt host application (see cp_host.h). */
#include "cp_host.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The step's sum of lengths, or -1 if a length is negative. */
static int64_t total_tokens(const int32_t *seqlens, int nseq) {
  int64_t t = 0;
  for (int i = 0; i < nseq; i++) {
    if (seqlens[i] < 0)
      return -1;
    t += seqlens[i];
  }
  return t;
}

static int host_fail(struct cp_host *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records a failure of the host's own (not the workload's) and returns CGRT_E_INVAL. */
static int host_fail(struct cp_host *h, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->err, sizeof(h->err), fmt, ap);
  va_end(ap);
  return CGRT_E_INVAL;
}

/* The workload's own sentence after one of its calls failed. */
static int workload_fail(struct cp_host *h, int rc) {
  snprintf(h->err, sizeof(h->err), "%s", cgrtk_cp_last_error(h->w));
  return rc;
}

/*
 * Whether the runtime's THD metadata can split the step: present, covering its tokens, and a
 * padded total the cp size divides (a slot sized to the step's own tokens, as for a step run
 * eagerly over capacity, may not be). Otherwise prepare stages the workload's own.
 */
static int runtime_thd(const cgrt_ctx *ctx) {
  return ctx->cu_seqlens && ctx->cu_seqlens_padded && ctx->padded_sequences >= 1 &&
         ctx->cp_size >= 1 && ctx->padded_tokens >= ctx->tokens &&
         ctx->padded_tokens % ctx->cp_size == 0;
}

/* Where the module calls of the step at ctx find the split and the THD metadata. */
static int split_of(struct cp_host *h, const cgrt_ctx *ctx, int64_t *padded_total,
                    const int32_t **cu, const int32_t **cu_padded, int *padded_sequences) {
  if (runtime_thd(ctx)) {
    *padded_total = ctx->padded_tokens;
    *cu = ctx->cu_seqlens;
    *cu_padded = ctx->cu_seqlens_padded;
    *padded_sequences = ctx->padded_sequences;
    return 0;
  }
  const int cp = ctx->cp_size;
  if (cp < 1 || cp > CP_HOST_MAX_CP || !h->split[cp].prepared || !h->split[cp].own_thd)
    return host_fail(h,
                     "cp host: a module call at cp size %d has no usable THD metadata from the "
                     "runtime and prepare staged none",
                     cp);
  *padded_total = h->split[cp].padded_total;
  *cu = h->split[cp].cu_seqlens;
  *cu_padded = h->split[cp].cu_seqlens_padded;
  *padded_sequences = h->split[cp].padded_sequences;
  return 0;
}

static int attn_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct cp_host_ref *r = user;
  struct cp_host *h = r->h;
  int64_t padded = 0;
  const int32_t *cu = NULL, *cu_padded = NULL;
  int nseqp = 0;
  int rc = split_of(h, ctx, &padded, &cu, &cu_padded, &nseqp);
  if (rc)
    return rc;
  rc = cgrtk_cp_attn(h->w, r->layer, cu, cu_padded, nseqp, padded, ctx->cp_size, ctx->cp_rank,
                     ctx->comm, ctx->stream);
  return rc ? workload_fail(h, rc) : 0;
}

static int mlp_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct cp_host_ref *r = user;
  struct cp_host *h = r->h;
  int64_t padded = 0;
  const int32_t *cu = NULL, *cu_padded = NULL;
  int nseqp = 0;
  int rc = split_of(h, ctx, &padded, &cu, &cu_padded, &nseqp);
  if (rc)
    return rc;
  if (ctx->cp_size < 1 || padded % ctx->cp_size != 0)
    return host_fail(h, "cp host: cp size %d does not divide the padded total %lld", ctx->cp_size,
                     (long long)padded);
  rc = cgrtk_cp_mlp(h->w, r->layer, padded / ctx->cp_size, ctx->stream);
  return rc ? workload_fail(h, rc) : 0;
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  struct cp_host *h = user;
  const int cp = ctx->cp_size;
  if (cp < 1 || cp > CP_HOST_MAX_CP)
    return host_fail(h, "cp host: cp size %d outside [1, %d]", cp, CP_HOST_MAX_CP);
  struct cp_host_split *sp = &h->split[cp];
  const int64_t tokens = total_tokens(h->seqlens, h->nseq);
  int64_t padded = ctx->padded_tokens;
  int rc = 0;
  sp->own_thd = !runtime_thd(ctx);
  if (sp->own_thd) {
    /* No usable THD slot from the runtime: pad to a multiple of the cp size, stage our own. */
    if (padded < tokens || padded % cp != 0)
      padded = (tokens + cp - 1) / cp * cp;
    rc = cgrtk_cp_stage_thd(h->w, h->seqlens, h->nseq, padded, ctx->stream, &sp->cu_seqlens,
                            &sp->cu_seqlens_padded, &sp->padded_sequences);
    if (rc)
      return workload_fail(h, rc);
  }
  sp->padded_total = padded;
  sp->cp_rank = ctx->cp_rank;
  sp->prepared = 1;
  rc = cgrtk_cp_stage(h->w, h->data, h->seqlens, h->nseq, padded, cp, ctx->cp_rank, ctx->stream);
  return rc ? workload_fail(h, rc) : 0;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct cp_host *h = user;
  int64_t padded = 0;
  const int32_t *cu = NULL, *cu_padded = NULL;
  int nseqp = 0;
  int rc = split_of(h, ctx, &padded, &cu, &cu_padded, &nseqp);
  if (rc)
    return rc;
  cgrt_buffer bufs[2] = {
      {cgrtk_cp_hidden(h->w), (size_t)cgrtk_cp_max_rows(h->w) * cgrtk_cp_row_bytes(h->w),
       CGRT_INOUT, "hidden"},
      {cgrtk_cp_kv(h->w),
       (size_t)cgrtk_cp_config(h->w)->max_packed_tokens * 2 * cgrtk_cp_row_bytes(h->w), CGRT_INOUT,
       "kv"},
  };
  /* The call's shape: cp size and padded total (the backend keys its banks by cp size too). */
  const uint64_t key = ((uint64_t)ctx->cp_size << 40) | (uint64_t)padded;
  cgrt_args attn = {.struct_size = sizeof(attn), .key = key, .buffers = bufs, .num_buffers = 2};
  cgrt_args mlp = {.struct_size = sizeof(mlp), .key = key, .buffers = bufs, .num_buffers = 1};
  for (int l = 0; l < h->layers; l++) {
    if ((rc = cgrt_forward(h->rt, h->attn[l], ctx, &attn)) != 0)
      return rc;
    if ((rc = cgrt_forward(h->rt, h->mlp[l], ctx, &mlp)) != 0)
      return rc;
  }
  return 0;
}

int cp_host_open(struct cp_host *h, cgrtk_cp *w, cgrt_runtime *rt) {
  memset(h, 0, sizeof(*h));
  h->w = w;
  h->rt = rt;
  h->layers = cgrtk_cp_config(w)->layers;
  if (h->layers > CP_HOST_MAX_LAYERS)
    return host_fail(h, "cp host: %d layers, at most %d", h->layers, CP_HOST_MAX_LAYERS);
  for (int l = 0; l < h->layers; l++) {
    char name[32];
    h->refs[l] = (struct cp_host_ref){h, l};
    for (int k = 0; k < 2; k++) {
      snprintf(name, sizeof(name), "layer%d.%s", l, k == 0 ? "attn" : "mlp");
      cgrt_module_desc d = {.struct_size = sizeof(d),
                            .name = name,
                            .kind = k == 0 ? CGRT_KIND_ATTN : CGRT_KIND_MLP,
                            .layer = l,
                            .forward = k == 0 ? attn_fwd : mlp_fwd,
                            .user = &h->refs[l],
                            /* only attention all-gathers over the cp group */
                            .no_cp_comm = k != 0};
      int rc = cgrt_module_register(rt, &d, k == 0 ? &h->attn[l] : &h->mlp[l]);
      if (rc)
        return rc;
    }
  }
  return 0;
}

int cp_host_step(struct cp_host *h, uint64_t data, const int32_t *seqlens, int nseq, int cp_size,
                 cgrt_step_report *report) {
  if (nseq < 0 || (nseq > 0 && !seqlens))
    return host_fail(h, "cp host: %d sequences and no lengths", nseq);
  const int64_t tokens = total_tokens(seqlens, nseq);
  if (tokens < 0)
    return host_fail(h, "cp host: a negative sequence length among %d", nseq);
  h->err[0] = '\0';
  h->data = data;
  h->seqlens = seqlens;
  h->nseq = nseq;
  cgrt_buffer bufs[1] = {{cgrtk_cp_hidden(h->w),
                          (size_t)cgrtk_cp_max_rows(h->w) * cgrtk_cp_row_bytes(h->w), CGRT_INOUT,
                          "hidden"}};
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_TRAIN,
                      .tokens = tokens,
                      .seqlens = seqlens,
                      .num_sequences = nseq,
                      .cp_size = cp_size,
                      .buffers = bufs,
                      .num_buffers = 1,
                      .prepare = prepare,
                      .body = body,
                      .user = h};
  int rc = cgrt_step(h->rt, &d, report);
  h->seqlens = NULL;
  return rc;
}

int cp_host_local(const struct cp_host *h, int cp_size, int64_t *row0, int64_t *rows,
                  int64_t *padded_total) {
  if (cp_size < 1 || cp_size > CP_HOST_MAX_CP || !h->split[cp_size].prepared)
    return CGRT_E_STATE;
  const struct cp_host_split *sp = &h->split[cp_size];
  const int64_t r = sp->padded_total / cp_size;
  if (row0)
    *row0 = (int64_t)sp->cp_rank * r;
  if (rows)
    *rows = r;
  if (padded_total)
    *padded_total = sp->padded_total;
  return 0;
}

int cp_host_read(struct cp_host *h, int cp_size, float *dst, size_t cap, int64_t *rows_out) {
  int64_t rows = 0;
  int rc = cp_host_local(h, cp_size, NULL, &rows, NULL);
  if (rc)
    return host_fail(h, "cp host: no step was prepared at cp size %d", cp_size);
  const size_t d = (size_t)cgrtk_cp_config(h->w)->d_model;
  if ((size_t)rows * d > cap)
    return host_fail(h, "cp host: the destination holds fewer than %lld rows (%zu floats a row)",
                     (long long)rows, d);
  if ((rc = cgrt_synchronize(h->rt)) != 0)
    return rc;
  if ((rc = cgrtk_cp_read(h->w, rows, dst, cgrt_stream(h->rt))) != 0)
    return workload_fail(h, CGRT_E_DEVICE);
  if ((rc = cgrt_synchronize(h->rt)) != 0)
    return rc;
  if (rows_out)
    *rows_out = rows;
  return 0;
}

const char *cp_host_error(const struct cp_host *h) {
  return h->err[0] ? h->err : cgrt_last_error(h->rt);
}
