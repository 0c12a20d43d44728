/*
 * model.c - the synthetic model of `cgrt test-backend`: a chain of modules and a head whose
 * kernels are host functions over static buffers.
 *
 * A step stages its input in prepare (a host function writing the real token count, a seed and
 * the inputs of CONFORM_MBS microbatches, zeros past the real tokens), then its body runs each
 * microbatch: every chain module forward (act[k+1] from act[k], act[0] being the input), the head
 * (the output, and in training the first gradient), and in training every module backward (the
 * next gradient, and the module's weights updated from what it saw). A kernel works on
 * ctx->padded_tokens tokens as shaped at its call (a graph replays that count) and reads the real
 * count from the staged meta buffer, as a real kernel reads its sequence lengths: the padding's
 * outputs are zero, the real tokens' do not depend on the padding. A module takes its addresses
 * from args->buffers, the body from ctx->buffers, so the run works under every rebind policy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

/* Where a step's buffers sit in a set's list (M chain modules). */
#define B_META        0
#define B_X           1
#define B_ACT(k)      (1 + (size_t)(k)) /* k = 1..M; act[0] is the input */
#define B_OUT(M)      (2 + (size_t)(M))
#define B_G(M, k)     (3 + (size_t)(M) + (size_t)(k)) /* k = 0..M */
#define B_W(M, k)     (4 + 2 * (size_t)(M) + (size_t)(k))
#define NUM_BUFS(M)   (4 + 3 * (size_t)(M))
#define META_WORDS    2
#define FAULT_RESULT  7 /* what a failing module callback returns */
#define PREPARE_FAULT 5

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b * 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* ---------------------------------------------------------------- the kernels (host functions) */

/* Each kernel's scalars, copied at its enqueue (and kept by a graph that captured it). */
struct stage_args {
  uint64_t *meta, *x;
  uint64_t tokens, seed, cap;
};
struct fwd_args {
  const uint64_t *meta, *in, *w;
  uint64_t *out;
  uint64_t n, salt;
};
struct head_args {
  const uint64_t *meta, *in;
  uint64_t *out, *g;
  uint64_t n, train;
};
struct bwd_args {
  const uint64_t *meta, *g_out, *in;
  uint64_t *w, *g_in;
  uint64_t n, salt;
};
struct snap_args {
  const uint64_t *out, *w;
  struct conform_snap *dst;
  uint64_t nw;
};

static void stage_run(void *arg) {
  const struct stage_args *p = arg;
  p->meta[0] = p->tokens;
  p->meta[1] = p->seed;
  for (uint64_t i = 0; i < CONFORM_MBS * p->cap; i++)
    p->x[i] = i % p->cap < p->tokens ? mix(p->seed + 1, i) : 0;
}

static uint64_t real_tokens(const uint64_t *meta, uint64_t n) {
  return meta[0] < n ? meta[0] : n;
}

static void fwd_run(void *arg) {
  const struct fwd_args *p = arg;
  uint64_t real = real_tokens(p->meta, p->n);
  for (uint64_t i = 0; i < p->n; i++)
    p->out[i] = i < real ? mix(p->in[i] + p->salt, p->w[i % CONFORM_WEIGHTS]) : 0;
}

static void head_run(void *arg) {
  const struct head_args *p = arg;
  uint64_t real = real_tokens(p->meta, p->n);
  for (uint64_t i = 0; i < p->n; i++) {
    p->out[i] = i < real ? mix(p->in[i], 0x68656164) : 0;
    if (p->train)
      p->g[i] = i < real ? mix(p->out[i], 0x6c6f7373) : 0;
  }
}

static void bwd_run(void *arg) {
  const struct bwd_args *p = arg;
  uint64_t real = real_tokens(p->meta, p->n), acc = p->salt;
  for (uint64_t i = 0; i < p->n; i++) {
    if (i >= real) {
      p->g_in[i] = 0;
      continue;
    }
    p->g_in[i] = mix(p->g_out[i], p->w[(i + 1) % CONFORM_WEIGHTS] + p->salt);
    acc = mix(acc ^ p->g_out[i], p->in[i]);
  }
  for (uint64_t j = 0; j < CONFORM_WEIGHTS; j++)
    p->w[j] = mix(p->w[j] + j, acc);
}

static void snap_run(void *arg) {
  const struct snap_args *p = arg;
  memcpy(p->dst->out, p->out, p->dst->ntok * sizeof(uint64_t));
  memcpy(p->dst->w, p->w, p->nw * sizeof(uint64_t));
  p->dst->taken = 1;
}

/* ---------------------------------------------------------------- the callbacks */

static uint64_t shaped_tokens(const struct conform_model *m, const cgrt_ctx *ctx) {
  if (ctx->padded_tokens <= 0)
    return 0;
  return (uint64_t)ctx->padded_tokens < m->cfg->cap ? (uint64_t)ctx->padded_tokens : m->cfg->cap;
}

static int fault(struct conform_model *m, size_t index, const cgrt_ctx *ctx) {
  if (m->fail_module == (long)index)
    return FAULT_RESULT;
  if (m->fail_next_capture && ctx->mode == CGRT_MODE_CAPTURE) {
    m->fail_next_capture = 0;
    return FAULT_RESULT;
  }
  return 0;
}

static uint64_t *buf(const cgrt_args *a, size_t i) {
  return (uint64_t *)a->buffers[i].ptr;
}

/* Forward of a chain module (buffers meta, in, w, out) or of the head (meta, in, out, g). */
static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *a, void *user) {
  struct conform_modref *r = user;
  struct conform_model *m = r->m;
  int rc = fault(m, r->index, ctx);
  if (rc != 0 || a->num_buffers != 4)
    return rc != 0 ? rc : 3;
  if (r->index == m->mods) {
    struct head_args p = {buf(a, 0),
                          buf(a, 1),
                          buf(a, 2),
                          buf(a, 3),
                          shaped_tokens(m, ctx),
                          ctx->phase == CGRT_PHASE_TRAIN};
    return cgrt_enqueue_host_copy(ctx, head_run, &p, sizeof(p));
  }
  struct fwd_args p = {buf(a, 0),       buf(a, 1), buf(a, 2), buf(a, 3), shaped_tokens(m, ctx),
                       0x100 + r->index};
  return cgrt_enqueue_host_copy(ctx, fwd_run, &p, sizeof(p));
}

/* Backward of a chain module: buffers meta, g_out, in, w (updated), g_in. */
static int module_bwd(const cgrt_ctx *ctx, const cgrt_args *a, void *user) {
  struct conform_modref *r = user;
  struct conform_model *m = r->m;
  int rc = fault(m, r->index, ctx);
  if (rc != 0 || a->num_buffers != 5)
    return rc != 0 ? rc : 3;
  struct bwd_args p = {buf(a, 0),       buf(a, 1), buf(a, 2),
                       buf(a, 3),       buf(a, 4), shaped_tokens(m, ctx),
                       0x200 + r->index};
  return cgrt_enqueue_host_copy(ctx, bwd_run, &p, sizeof(p));
}

static cgrt_buffer use(const cgrt_buffer *b, void *ptr, size_t bytes, cgrt_access access) {
  cgrt_buffer u = {ptr ? ptr : b->ptr, bytes ? bytes : b->bytes, access, b->name};
  return u;
}

static int call(struct conform_model *m, const cgrt_ctx *ctx, size_t index, cgrt_direction dir,
                int mb, const cgrt_buffer *bufs, size_t n) {
  cgrt_args a = {.struct_size = sizeof(a),
                 .key = (uint64_t)ctx->padded_tokens,
                 .microbatch = mb,
                 .buffers = bufs,
                 .num_buffers = n};
  m->calls++;
  return dir == CGRT_FORWARD ? cgrt_forward(m->rt, m->mod[index], ctx, &a)
                             : cgrt_backward(m->rt, m->mod[index], ctx, &a);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct conform_model *m = user;
  size_t M = m->mods;
  if (ctx->num_buffers != m->num_bufs)
    return 3; /* the core handed the body another list than the step's */
  const cgrt_buffer *b = ctx->buffers;
  size_t slice = m->cfg->cap * sizeof(uint64_t);
  int mbs = ctx->phase == CGRT_PHASE_TRAIN ? CONFORM_MBS : 1;
  for (int mb = 0; mb < mbs; mb++) {
    uint64_t *x = (uint64_t *)b[B_X].ptr + (size_t)mb * m->cfg->cap;
    int rc = 0;
    for (size_t k = 0; k < M && rc == 0; k++) {
      cgrt_buffer in = k == 0 ? use(&b[B_X], x, slice, CGRT_IN) : use(&b[B_ACT(k)], 0, 0, CGRT_IN);
      cgrt_buffer list[4] = {use(&b[B_META], 0, 0, CGRT_IN), in, use(&b[B_W(M, k)], 0, 0, CGRT_IN),
                             use(&b[B_ACT(k + 1)], 0, 0, CGRT_OUT)};
      rc = call(m, ctx, k, CGRT_FORWARD, mb, list, 4);
    }
    if (rc == 0) {
      cgrt_buffer list[4] = {use(&b[B_META], 0, 0, CGRT_IN), use(&b[B_ACT(M)], 0, 0, CGRT_IN),
                             use(&b[B_OUT(M)], 0, 0, CGRT_OUT), use(&b[B_G(M, M)], 0, 0, CGRT_OUT)};
      rc = call(m, ctx, M, CGRT_FORWARD, mb, list, 4);
    }
    for (size_t k = M; ctx->phase == CGRT_PHASE_TRAIN && k-- > 0 && rc == 0;) {
      cgrt_buffer in = k == 0 ? use(&b[B_X], x, slice, CGRT_IN) : use(&b[B_ACT(k)], 0, 0, CGRT_IN);
      cgrt_buffer list[5] = {use(&b[B_META], 0, 0, CGRT_IN), use(&b[B_G(M, k + 1)], 0, 0, CGRT_IN),
                             in, use(&b[B_W(M, k)], 0, 0, CGRT_INOUT),
                             use(&b[B_G(M, k)], 0, 0, CGRT_OUT)};
      rc = call(m, ctx, k, CGRT_BACKWARD, mb, list, 5);
    }
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* Space for the outputs of operation op (its real tokens known). */
static int snap_alloc(struct conform_model *m, size_t op) {
  struct conform_snap *s = m->snaps[op];
  if (!s->out)
    s->out = calloc(s->ntok ? s->ntok : 1, sizeof(uint64_t));
  if (!s->w)
    s->w = calloc(m->mods * CONFORM_WEIGHTS, sizeof(uint64_t));
  return s->out && s->w ? 0 : -1;
}

static struct snap_args snap_of(struct conform_model *m) {
  struct snap_args p = {m->set[m->pending_set].bufs[B_OUT(m->mods)].ptr, m->w, m->snaps[m->pending],
                        m->mods * CONFORM_WEIGHTS};
  return p;
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  struct conform_model *m = user;
  if (m->fail_prepare)
    return PREPARE_FAULT;
  /* The previous step's outputs, read after its work and before this step's. Once a step: a
     prepare run again (capture = eager warms every bucket first) must not read them twice. */
  if (m->pending >= 0) {
    if (snap_alloc(m, (size_t)m->pending) != 0)
      return 4;
    struct snap_args p = snap_of(m);
    int rc = cgrt_enqueue_host_copy(ctx, snap_run, &p, sizeof(p));
    if (rc != 0)
      return rc;
    m->pending = -1;
  }
  const struct conform_set *s = &m->set[m->cur];
  struct stage_args p = {s->bufs[B_META].ptr, s->bufs[B_X].ptr, (uint64_t)ctx->tokens,
                         0x5eed0000u + m->op, m->cfg->cap};
  return cgrt_enqueue_host_copy(ctx, stage_run, &p, sizeof(p));
}

/* ---------------------------------------------------------------- the model */

void conform_model_desc(struct conform_model *m, const struct conform_op *op,
                        cgrt_step_desc *desc) {
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = op->phase,
                      .tokens = op->tokens,
                      .cp_size = op->cp,
                      .microbatches = op->phase == CGRT_PHASE_TRAIN ? CONFORM_MBS : 1,
                      .buffers = m->set[op->set].bufs,
                      .num_buffers = m->num_bufs,
                      .prepare = prepare,
                      .body = body,
                      .user = m};
  *desc = d;
}

int conform_model_reserve(struct conform_model *m, size_t ops) {
  if (ops > m->num_snaps) {
    size_t n = m->num_snaps ? m->num_snaps : 64;
    while (n < ops)
      n *= 2;
    struct conform_snap **v = realloc(m->snaps, n * sizeof(*v));
    if (!v)
      return -1;
    memset(v + m->num_snaps, 0, (n - m->num_snaps) * sizeof(*v));
    m->snaps = v;
    m->num_snaps = n;
  }
  for (size_t i = 0; i < ops; i++)
    if (!m->snaps[i] && !(m->snaps[i] = calloc(1, sizeof(struct conform_snap))))
      return -1;
  return 0;
}

int conform_model_snap_now(struct conform_model *m) {
  if (m->pending < 0)
    return 0;
  if (snap_alloc(m, (size_t)m->pending) != 0)
    return -1;
  struct snap_args p = snap_of(m);
  snap_run(&p);
  m->pending = -1;
  return 0;
}

static void set_names(struct conform_model *m) {
  size_t M = m->mods;
  char(*names)[sizeof(m->bufname[0])] = m->bufname;
  snprintf(names[B_META], sizeof(names[0]), "conform.meta");
  snprintf(names[B_X], sizeof(names[0]), "conform.x");
  for (size_t k = 1; k <= M; k++)
    snprintf(names[B_ACT(k)], sizeof(names[0]), "conform.act%u", (unsigned)k);
  snprintf(names[B_OUT(M)], sizeof(names[0]), "conform.out");
  for (size_t k = 0; k <= M; k++)
    snprintf(names[B_G(M, k)], sizeof(names[0]), "conform.grad%u", (unsigned)k);
  for (size_t k = 0; k < M; k++)
    snprintf(names[B_W(M, k)], sizeof(names[0]), "conform.w%u", (unsigned)k);
}

static int make_set(struct conform_model *m, struct conform_set *s) {
  size_t M = m->mods, cap = m->cfg->cap;
  size_t words = META_WORDS + CONFORM_MBS * cap + M * cap + cap + (M + 1) * cap;
  s->mem = calloc(words, sizeof(uint64_t));
  s->bufs = calloc(m->num_bufs, sizeof(cgrt_buffer));
  if (!s->mem || !s->bufs)
    return -1;
  uint64_t *p = s->mem;
  for (size_t i = 0; i < B_W(M, 0); i++) {
    size_t n = i == B_META ? META_WORDS : i == B_X ? CONFORM_MBS * cap : cap;
    s->bufs[i] = (cgrt_buffer){p, n * sizeof(uint64_t), CGRT_INOUT, m->bufname[i]};
    p += n;
  }
  for (size_t k = 0; k < M; k++)
    s->bufs[B_W(M, k)] =
        (cgrt_buffer){m->w + k * CONFORM_WEIGHTS, CONFORM_WEIGHTS * sizeof(uint64_t), CGRT_INOUT,
                      m->bufname[B_W(M, k)]};
  return 0;
}

int conform_model_init(struct conform_model *m, const struct conform_config *cfg, cgrt_runtime *rt,
                       char *why, size_t len) {
  memset(m, 0, sizeof(*m));
  m->rt = rt;
  m->cfg = cfg;
  m->pending = -1;
  m->fail_module = -1;
  for (int layer = 0; layer < 2; layer++)
    for (int k = 0; k < CGRT_KIND_COUNT && m->mods < CONFORM_MAX_MODS; k++)
      if (cfg->kinds & CGRT_KIND_BIT(k)) {
        snprintf(m->name[m->mods], sizeof(m->name[0]), "layer%d.%s", layer,
                 cgrt_kind_name((cgrt_kind)k));
        m->kind[m->mods++] = (cgrt_kind)k;
      }
  snprintf(m->name[m->mods], sizeof(m->name[0]), "head");
  m->kind[m->mods] = CGRT_KIND_OTHER;
  m->num_bufs = NUM_BUFS(m->mods);
  set_names(m);
  m->w = calloc(m->mods * CONFORM_WEIGHTS, sizeof(uint64_t));
  if (!m->w)
    goto nomem;
  for (size_t i = 0; i < m->mods * CONFORM_WEIGHTS; i++)
    m->w[i] = mix(i + 1, 0x77);
  for (int s = 0; s < CONFORM_SETS; s++)
    if (make_set(m, &m->set[s]) != 0)
      goto nomem;
  for (size_t i = 0; i <= m->mods; i++) {
    m->ref[i] = (struct conform_modref){m, i};
    int head = i == m->mods;
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = m->name[i],
                          .kind = m->kind[i],
                          .layer = head ? -1 : (int)(i / (m->mods / 2)),
                          .forward = module_fwd,
                          .backward = head ? NULL : module_bwd,
                          .user = &m->ref[i]};
    int rc = cgrt_module_register(rt, &d, &m->mod[i]);
    if (rc != 0) {
      snprintf(why, len, "cgrt_module_register(%s): %s", m->name[i], cgrt_last_error(rt));
      return rc;
    }
  }
  return 0;
nomem:
  snprintf(why, len, "out of memory for the model's buffers (%llu tokens each)",
           (unsigned long long)cfg->cap);
  return CGRT_E_NOMEM;
}

void conform_model_free(struct conform_model *m) {
  for (int s = 0; s < CONFORM_SETS; s++) {
    free(m->set[s].mem);
    free(m->set[s].bufs);
  }
  for (size_t i = 0; i < m->num_snaps; i++)
    if (m->snaps[i]) {
      free(m->snaps[i]->out);
      free(m->snaps[i]->w);
      free(m->snaps[i]);
    }
  free(m->snaps);
  free(m->w);
  memset(m, 0, sizeof(*m));
}
