/*
 * dynamic_cp.c - Megatron-Bridge's dynamic context parallelism, in C: a bank of graphs per
 * context-parallel size in [dynamic_cp] cp_sizes, each bound to the communicator split for that
 * size, with packed-sequence (THD) metadata in slots of fixed capacity.
 *
 * A step names its cp size; its sequence lengths go into the next THD slot of that size's bank
 * in turn (the slot is reused only after the replay that read it has finished), padded by one
 * zero-length dummy sequence to the captured size (max_packed_tokens); ctx carries the group's
 * communicator, this rank's index in it and the slot's device metadata. Module calls of scoped
 * kinds are graphs keyed by (cp size, slot, module, direction, microbatch), as in
 * transformer_engine. A step over a slot's capacity is refused (over_capacity = error, nothing
 * run) or run eagerly with metadata of its own size (eager).
 *
 * Every step runs its body once, on its own bank and slot, through the core's graph cache: a key
 * (a call, or with graph_scope = step the body, of one bank and slot) runs eagerly while it warms
 * up, is captured at its next use (the capture records; the launch that follows it is the step's
 * one execution) and replayed after. So a training body's update, or a gradient accumulation,
 * happens once a step whatever the step does (issue 42: the banks were once all captured in one
 * step, which ran the body once per bank and slot). A bank warms up for its first warmup_steps
 * steps, whichever slots they take; a slot is captured at its first step after that, once it has
 * run eagerly (slot_warmup). Every rank of a cp group runs the same steps at that group's size
 * (their collectives must match), and the counts that decide depend on those steps alone, so every
 * rank of a group captures the same graphs at the same step, in the same order.
 *
 * graph_scope = step: each (cp size, slot) holds one graph of the whole step body instead of
 * module graphs (the core's run_body_graph, as full_iteration and local's block scope), warmed
 * up and captured the same way. One graph launch a step instead of one per module call:
 * the kernels of consecutive calls chain inside one graph, and the ranks meet at each collective
 * within a single launch.
 *
 * by_time = on (off unless set; the shipped conf/dynamic_cp.ini sets it: docs/decisions.md, issue
 * 42): once a bank's slots are captured, it times its graph steps and its eager steps on the
 * device, the cp group agrees on the figures, and the cp size is served eagerly while its graphs
 * are measurably slower (cp_time.h has the schedule and the rule). Served eagerly, a step still
 * takes its bank's slot and metadata: only how its calls (or its body) run changes, so its outputs
 * are the same.
 */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrt/backend.h"
#include "cp_time.h"
#include "noise_rule.h"
#include "rules.h"
#include "step_cost.h"

#define MAX_BANKS 16
#define MAX_SLOTS 16

struct bank {
  int cp;
  void *comm;
  int cp_rank;
  struct cgrt_thd_ring *ring;
  int64_t passes;                 /* steps run on the bank (since release) */
  int64_t slot_passes[MAX_SLOTS]; /* ... on each of its slots */
  uint32_t built;                 /* bit per slot: a step on it has captured (for the log) */
  struct cp_time *time;           /* by_time = on: its measurements, else NULL */
};

/*
 * dynamic_cp's options, the keys of [dynamic_cp] beside cp_sizes (the core's: it splits the
 * communicators). The core reads them whenever it reads a configuration, this backend configured
 * or not, since [dynamic_cp] is also one of its sections.
 */
static const struct cgrt_option dcp_options[] = {
    {.name = "max_packed_tokens",
     .type = CGRT_OPTION_INT,
     .def = "8192",
     .min = 1,
     .meaning = "the capacity of a THD slot in tokens"},
    {.name = "max_sequences",
     .type = CGRT_OPTION_INT,
     .def = "64",
     .min = 1,
     .meaning = "the capacity of a THD slot in packed sequences"},
    {.name = "graph_slots",
     .type = CGRT_OPTION_INT,
     .def = "2",
     .min = 1,
     .meaning = "THD metadata slots per bank; 2 lets a step fill one while the last replay reads "
                "the other"},
    {.name = "over_capacity",
     .type = CGRT_OPTION_ENUM,
     .def = "error",
     .values = "error eager",
     .meaning = "what a step over a slot's capacity does"},
    {.name = "graph_scope",
     .type = CGRT_OPTION_ENUM,
     .def = "modules",
     .values = "modules step",
     .meaning = "what one graph of a bank holds"},
    {.name = "by_time",
     .type = CGRT_OPTION_BOOL,
     .def = "off",
     .meaning = "a cp size whose graph steps are measured slower on the device than its eager "
                "steps (on the group's slowest rank) is served eagerly"},
};

/* The options as read: through get_int() (a core of minor 4 or later reads them, or the key as
   its own row before minor 5), else the view fields a core before minor 4 fills. */
struct dcp_options {
  int64_t max_packed_tokens;
  int64_t max_sequences;
  int64_t graph_slots;
  int64_t over_capacity; /* cgrt_over_capacity */
  int64_t step_scope;    /* graph_scope = step */
  int64_t by_time;       /* by_time = on */
};

static int64_t option(const struct cgrt_config_view *cfg, const char *key, int64_t field) {
  int64_t v;
  if (CGRT_VIEW_HAS(cfg, get_int) && cfg->get_int && cfg->get_int(cfg, "dynamic_cp", key, &v) == 0)
    return v;
  return field;
}

static void read_options(const struct cgrt_config_view *cfg, struct dcp_options *o) {
  o->max_packed_tokens = option(cfg, "max_packed_tokens", cfg->max_packed_tokens);
  o->max_sequences = option(cfg, "max_sequences", cfg->max_sequences);
  o->graph_slots = option(cfg, "graph_slots", cfg->graph_slots);
  o->over_capacity = option(cfg, "over_capacity", cfg->over_capacity);
  /* A core older than graph_scope gives no such field: module scope. */
  o->step_scope = option(cfg, "graph_scope", CGRT_VIEW_HAS(cfg, cp_scope) ? cfg->cp_scope : 0) ==
                  CGRT_CP_SCOPE_STEP;
  o->by_time = option(cfg, "by_time", 0); /* a core before minor 4: off */
}

struct dcp_state {
  const struct cgrt_host_api *h;
  const struct cgrt_config_view *cfg;
  struct dcp_options o;
  struct cgrt_graph_cache *cache;
  struct bank banks[MAX_BANKS];
  int num_banks;
  int comms_ready;
  int step_scope; /* graph_scope = step: one body graph per (bank, slot) */
  struct bank *cur;
  int cur_slot;
  int cur_warmup; /* the warm-up the keys of the pass in flight take (slot_warmup) */
  int cur_eager;  /* the pass in flight is served eagerly (by_time) */
  struct cp_time_figures time_fig; /* by_time's, over the banks */
};

static int scoped(const struct dcp_state *s, cgrt_kind kind) {
  return s->cfg->modules == 0 || (s->cfg->modules & CGRT_KIND_BIT(kind));
}

static struct bank *bank_for(struct dcp_state *s, int cp) {
  for (int i = 0; i < s->num_banks; i++)
    if (s->banks[i].cp == cp)
      return &s->banks[i];
  return NULL;
}

/*
 * A bank's first pass that replays every slot: its first warmup_steps passes run eagerly, then
 * each slot captures at its next pass once it ran eagerly (slot_warmup), so with graph_slots
 * slots every pass from max(warmup_steps, graph_slots) + graph_slots on replays.
 */
static int64_t first_replay(const struct dcp_state *s) {
  int64_t warmup = s->cfg->warmup_steps, slots = s->o.graph_slots;
  return (warmup > slots ? warmup : slots) + slots;
}

static int dcp_init(const struct cgrt_host_api *h, const struct cgrt_config_view *cfg, void **state,
                    char *err, size_t errlen) {
  struct dcp_options o;
  read_options(cfg, &o);
  if (cfg->num_cp_sizes == 0 || cfg->num_cp_sizes > MAX_BANKS || o.graph_slots > MAX_SLOTS) {
    snprintf(err, errlen,
             "dynamic_cp needs 1 to %d [dynamic_cp] cp_sizes and at most %d graph_slots", MAX_BANKS,
             MAX_SLOTS);
    return CGRT_E_CONFIG;
  }
  if (o.max_sequences > INT_MAX) {
    snprintf(err, errlen, "[dynamic_cp] max_sequences = %lld: at most %d",
             (long long)o.max_sequences, INT_MAX);
    return CGRT_E_CONFIG;
  }
  for (size_t i = 0; i < cfg->num_cp_sizes; i++)
    if (o.max_packed_tokens % cfg->cp_sizes[i] != 0) {
      snprintf(err, errlen,
               "[dynamic_cp] max_packed_tokens = %lld is not a multiple of cp size %d: every "
               "rank of a group holds an equal share of the padded tokens",
               (long long)o.max_packed_tokens, cfg->cp_sizes[i]);
      return CGRT_E_CONFIG;
    }
  int step_scope = (int)o.step_scope;
  /* The core's rules refuse these first (config_caps: whole-step graphs); a core before minor 6
     does not apply them. */
  if (step_scope && (cfg->modules != 0 || cfg->nan_check)) {
    snprintf(err, errlen,
             "dynamic_cp with graph_scope = step graphs the whole step: it needs [cuda_graph] "
             "modules empty and [host] nan_check = off");
    return CGRT_E_CONFIG;
  }
  struct dcp_state *s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return CGRT_E_NOMEM;
  }
  s->h = h;
  s->cfg = cfg;
  s->step_scope = step_scope;
  s->o = o;
  int rc = h->cache_create(h, cfg->max_graphs, cfg->rebind, &s->cache);
  /* Banks in ascending cp order (the config keeps cp_sizes sorted). */
  for (size_t i = 0; rc == 0 && i < cfg->num_cp_sizes; i++) {
    struct bank *b = &s->banks[s->num_banks++];
    b->cp = cfg->cp_sizes[i];
    rc = h->thd_create(h, (int)o.graph_slots, o.max_packed_tokens, (int)o.max_sequences, &b->ring);
    if (rc == 0 && o.by_time)
      rc = cp_time_create(h, b->cp, first_replay(s), &s->time_fig, &b->time);
  }
  if (rc != 0) {
    snprintf(err, errlen, "%s", h->last_error(h));
    for (int i = 0; i < s->num_banks; i++) {
      h->thd_destroy(h, s->banks[i].ring);
      cp_time_destroy(s->banks[i].time);
    }
    h->cache_destroy(h, s->cache);
    free(s);
    return rc;
  }
  *state = s;
  return 0;
}

static void dcp_fini(void *state) {
  struct dcp_state *s = state;
  s->h->cache_destroy(s->h, s->cache);
  for (int i = 0; i < s->num_banks; i++) {
    s->h->thd_destroy(s->h, s->banks[i].ring);
    cp_time_destroy(s->banks[i].time);
  }
  free(s);
}

/* The communicators, once: the host hands its world communicator after open. */
static int find_comms(struct dcp_state *s) {
  if (s->comms_ready)
    return 0;
  for (int i = 0; i < s->num_banks; i++) {
    struct bank *b = &s->banks[i];
    int rc = s->h->comm_for_cp(s->h, b->cp, &b->comm, &b->cp_rank);
    if (rc != 0)
      return rc; /* the message says what the host must do */
  }
  s->comms_ready = 1;
  return 0;
}

/* Points ctx at a bank and at a THD slot's metadata. */
static void bind(struct dcp_state *s, cgrt_ctx *ctx, struct bank *b,
                 const struct cgrt_thd_slot *slot) {
  ctx->cp_size = b->cp;
  ctx->comm = b->comm;
  ctx->cp_rank = b->cp_rank;
  ctx->tokens = slot->tokens;
  ctx->padded_tokens = slot->padded_tokens;
  ctx->num_sequences = slot->sequences;
  ctx->padded_sequences = slot->padded_sequences;
  ctx->cu_seqlens = slot->cu_seqlens;
  ctx->cu_seqlens_padded = slot->cu_seqlens_padded;
  s->cur = b;
  s->cur_slot = slot->index;
}

/*
 * The eager uses a key of bank b's slot `slot` takes before its capture, for the pass about to
 * run there: the bank warms up for its first warmup_steps steps, whichever slots they take, and
 * a slot's key still runs eagerly once on that slot before it is captured (a capture is never
 * the first run of a key). So with graph_slots = 2 and warmup_steps = 2 a bank's steps run
 * eager, eager, capture (slot 0), capture (slot 1), then replay. A key first seen after the
 * bank's warm-up runs eagerly once on a slot, then is captured there.
 */
static int slot_warmup(const struct dcp_state *s, const struct bank *b, int slot) {
  int64_t w = s->cfg->warmup_steps - (b->passes - b->slot_passes[slot]);
  return w > 1 ? (int)w : 1;
}

/*
 * The step's one pass of prepare and body, on bank b and its next THD slot. Each key of the
 * pass (its scoped calls, or the body under graph_scope = step) warms up, is captured or
 * replays by its own count of uses, so the body's work runs once whatever the pass does.
 */
static int pass(struct dcp_state *s, struct cgrt_step_frame *f, struct bank *b, const int32_t *lens,
                int n) {
  const struct cgrt_host_api *h = s->h;
  struct cgrt_thd_slot meta;
  int rc = h->thd_write(h, b->ring, lens, n, -1, &meta);
  if (rc != 0)
    return rc;
  bind(s, f->ctx, b, &meta);
  s->cur_warmup = slot_warmup(s, b, meta.index);
  struct cp_time_step timing = {CP_GRAPHS, -1, 0};
  if (b->time && (rc = cp_time_begin(b->time, b->passes, &timing)) != 0) {
    s->cur = NULL;
    (void)h->thd_release(h, b->ring, meta.index);
    return rc;
  }
  s->cur_eager = timing.way == CP_EAGER;
  b->passes++;
  b->slot_passes[meta.index]++;
  rc = h->run_prepare(h, f);
  if (rc == 0 && s->cur_eager) {
    /* by_time: served eagerly on the same slot and metadata; the graphs stay cached */
    f->ctx->mode = CGRT_MODE_EAGER;
    rc = h->run_body(h, f);
    f->ctx->mode = CGRT_MODE_EAGER;
  } else if (rc == 0 && s->step_scope) {
    struct cgrt_graph_key key = {
        .module = CGRT_KEY_BODY,
        .phase = (uint32_t)f->ctx->phase,
        .microbatch = (uint32_t)(f->desc->microbatches > 0 ? f->desc->microbatches : 1),
        .extra = ((uint64_t)(uint32_t)b->cp << 32) | (uint32_t)meta.index,
    };
    cgrt_mode mode; /* also in f->ctx->mode */
    rc = h->run_body_graph(h, s->cache, f, &key, s->cur_warmup, &mode);
  } else if (rc == 0) {
    f->ctx->mode = CGRT_MODE_EAGER;
    rc = h->run_body(h, f);
    f->ctx->mode = h->calls_mode(h);
  }
  if (rc == 0 && f->ctx->mode == CGRT_MODE_CAPTURE && !(b->built & (1u << meta.index))) {
    b->built |= 1u << meta.index;
    h->log(h, CGRT_LOG_INFO, "dynamic_cp: cp %d, THD slot %d: first graphs captured at step %llu",
           b->cp, meta.index, (unsigned long long)f->ctx->step);
  }
  int rel = h->thd_release(h, b->ring, meta.index);
  s->cur = NULL;
  s->cur_eager = 0;
  if (rc == 0 && rel == 0 && b->time)
    rc = cp_time_end(b->time, &timing, f->ctx->mode, step_cost_copied(f->report), b->comm);
  return rc ? rc : rel;
}

/* Over capacity with over_capacity = eager: metadata of the step's own size, no graphs. */
static int run_over_capacity(struct dcp_state *s, struct cgrt_step_frame *f, struct bank *b,
                             const int32_t *lens, int n, int64_t tokens) {
  const struct cgrt_host_api *h = s->h;
  struct cgrt_thd_ring *ring = NULL;
  /* Padded to a multiple of the cp size, like the slots: equal shares for the ranks. */
  int64_t size = (tokens > 0 ? tokens : 1) + b->cp - 1;
  size -= size % b->cp;
  int rc = h->thd_create(h, 1, size, n > 0 ? n : 1, &ring);
  struct cgrt_thd_slot meta;
  if (rc == 0)
    rc = h->thd_write(h, ring, lens, n, 0, &meta);
  if (rc == 0) {
    bind(s, f->ctx, b, &meta);
    s->cur = NULL; /* calls run directly */
    rc = h->run_prepare(h, f);
    if (rc == 0)
      rc = h->run_body(h, f);
    /* The ring is freed below: its metadata must have been read. */
    int sync = h->stream_sync(h, h->stream(h));
    rc = rc ? rc : sync;
  }
  h->thd_destroy(h, ring);
  h->log(h, CGRT_LOG_INFO, "dynamic_cp: step %llu over a slot's capacity ran eagerly",
         (unsigned long long)f->ctx->step);
  return rc;
}

static int dcp_step(void *state, struct cgrt_step_frame *f) {
  struct dcp_state *s = state;
  const struct cgrt_host_api *h = s->h;
  const cgrt_step_desc *d = f->desc;
  int rc = find_comms(s);
  if (rc != 0)
    return rc;
  int cp = d->cp_size > 1 ? d->cp_size : 1;
  struct bank *b = bank_for(s, cp);
  if (!b) {
    char sizes[128];
    int n = 0;
    for (int i = 0; i < s->num_banks && n < (int)sizeof(sizes) - 8; i++)
      n += snprintf(sizes + n, sizeof(sizes) - (size_t)n, "%s%d", i ? " " : "", s->banks[i].cp);
    return h->set_error(h, CGRT_E_INVAL,
                        "dynamic_cp: the step's cp size %d has no graph bank; banks exist for cp "
                        "sizes %s ([dynamic_cp] cp_sizes)",
                        cp, sizes);
  }
  /* Without packed sequences the step is one sequence of its tokens. */
  int32_t one = (int32_t)d->tokens;
  const int32_t *lens = d->num_sequences > 0 ? d->seqlens : &one;
  int n = d->num_sequences > 0 ? d->num_sequences : (d->tokens > 0 ? 1 : 0);
  int64_t tokens = 0;
  for (int i = 0; i < n; i++)
    tokens += lens[i];
  if (tokens > s->o.max_packed_tokens || n > s->o.max_sequences) {
    struct cgrt_thd_slot unused;
    if (s->o.over_capacity == CGRT_OVER_CAPACITY_EAGER)
      rc = run_over_capacity(s, f, b, lens, n, tokens);
    else /* refused before anything is written: the message names both capacities */
      rc = h->thd_write(h, b->ring, lens, n, -1, &unused);
    f->ctx->mode = CGRT_MODE_EAGER;
    return rc;
  }
  return pass(s, f, b, lens, n);
}

static int dcp_call(void *state, struct cgrt_call *c) {
  struct dcp_state *s = state;
  const struct cgrt_host_api *h = s->h;
  if (s->step_scope) /* every call belongs to the body being warmed, captured or run eagerly */
    return h->run_module(h, c);
  if (!s->cur || s->cur_eager || !scoped(s, c->module->kind)) {
    c->ctx->mode = CGRT_MODE_EAGER;
    return h->run_module(h, c);
  }
  struct cgrt_graph_key key = {
      .module = c->module->id,
      .dir = (uint32_t)c->dir,
      .microbatch = c->args->microbatch,
      .phase = (uint32_t)c->ctx->phase,
      .shape = c->args->key,
      .extra = ((uint64_t)(uint32_t)s->cur->cp << 32) | (uint32_t)s->cur_slot,
  };
  cgrt_mode mode;
  return h->run_call_graph(h, s->cache, c, &key, s->cur_warmup, &mode);
}

static int dcp_release(void *state) {
  struct dcp_state *s = state;
  s->h->cache_clear(s->h, s->cache);
  for (int i = 0; i < s->num_banks; i++) {
    struct bank *b = &s->banks[i];
    b->passes = 0;
    b->built = 0;
    if (b->time)
      cp_time_reset(b->time);
    for (int j = 0; j < MAX_SLOTS; j++)
      b->slot_passes[j] = 0;
  }
  return 0;
}

static int dcp_describe(void *state, void (*emit)(void *user, const char *line), void *user) {
  struct dcp_state *s = state;
  const struct cgrt_config_view *c = s->cfg;
  char line[512];
  int n = snprintf(line, sizeof(line), "dynamic_cp: a graph bank per cp size:");
  for (int i = 0; i < s->num_banks; i++)
    n += snprintf(line + n, sizeof(line) - (size_t)n, " %d", s->banks[i].cp);
  snprintf(line + n, sizeof(line) - (size_t)n,
           "; %d THD slots per bank of %lld tokens and %d sequences (padded by a dummy sequence "
           "to %lld tokens)",
           (int)s->o.graph_slots, (long long)s->o.max_packed_tokens, (int)s->o.max_sequences,
           (long long)s->o.max_packed_tokens);
  emit(user, line);
  emit(user, s->step_scope ? "graph_scope = step: a graph of the whole step body per cp size and "
                             "slot (module calls run inside it)"
                           : "graph_scope = modules: a graph per call of a module of a kind in "
                             "modules (empty: every kind)");
  emit(user, s->step_scope ? "replay key: (phase, microbatches, cp size, slot)"
                           : "replay key: (module, direction, microbatch, phase, args.key, cp "
                             "size, slot)");
  const int slots = (int)s->o.graph_slots;
  snprintf(line, sizeof(line),
           "a bank's first %d steps run eagerly, then each slot captures at its next step (once it "
           "has run eagerly): a bank's steps replay after its first %d; every step runs the body "
           "once; steps over capacity: %s",
           c->warmup_steps, (c->warmup_steps > slots ? c->warmup_steps : slots) + slots,
           s->o.over_capacity == CGRT_OVER_CAPACITY_EAGER ? "run eagerly" : "refused");
  emit(user, line);
  if (s->o.by_time) {
    snprintf(line, sizeof(line),
             "by_time = on: from a bank's step %lld, %d graph steps and %d eager steps (the "
             "first not kept) timed on the device; the cp group agrees on the slowest rank's "
             "medians and serves the size eagerly while its graphs are slower by more than "
             "%.0f%%; measured again every %d steps",
             (long long)first_replay(s) + 1, CP_TIME_GRAPHS, CP_TIME_EAGER, NOISE_MARGIN * 100,
             NOISE_RECHECK);
    emit(user, line);
  }
  return 0;
}

/* cgrt_stats: by_time's counts (the fields local's by_time fills too; a cp size where local
   counts a token count). */
static int dcp_stats(void *state, cgrt_stats *out) {
  struct dcp_state *s = state;
  const struct cp_time_figures *t = &s->time_fig;
  if (out->struct_size < offsetof(cgrt_stats, time_exact_counts) + sizeof(out->time_exact_counts))
    return 0; /* a host built before these fields: nothing of ours to fill */
  out->timed_steps = t->timed_steps;
  out->time_probe_steps = t->probe_steps;
  out->time_eager_steps = t->eager_steps;
  out->time_eager_counts = t->eager_sizes;
  return 0;
}

/* What dynamic_cp decides that cgrt_stats does not count (cgrt_backend_figures). */
static int dcp_figures(void *state, void (*emit)(void *user, const char *name, uint64_t value),
                       void *user) {
  struct dcp_state *s = state;
  emit(user, "by_time_rounds", s->time_fig.rounds);
  emit(user, "by_time_graph_probe_steps", s->time_fig.graph_probe_steps);
  emit(user, "by_time_eager_cp_sizes", s->time_fig.eager_sizes);
  emit(user, "by_time_copied_samples", s->time_fig.copied_samples);
  emit(user, "by_time_copied_rechecks", s->time_fig.copied_rechecks);
  return 0;
}

/*
 * graph_scope = step graphs the whole step: the core then applies the rules of whole-step graphs
 * (no host read of the loss, no module list, full recomputation allowed); modules graphs calls
 * (no full recomputation).
 */
#define DCP_CAPS                                                                                   \
  (CGRT_CAP_TRAINING | CGRT_CAP_INFERENCE | CGRT_CAP_BACKWARD | CGRT_CAP_GRAPHS |                  \
   CGRT_CAP_MULTI_GPU | CGRT_CAP_NEEDS_COMM)

static uint64_t dcp_config_caps(const struct cgrt_config_view *cfg, char *why, size_t whylen) {
  struct dcp_options o;
  read_options(cfg, &o);
  if (!o.step_scope)
    return DCP_CAPS;
  char d[256];
  cfg->describe(cfg, "dynamic_cp", "graph_scope", d, sizeof(d));
  snprintf(why, whylen, "[dynamic_cp] %s", d);
  return DCP_CAPS | CGRT_CAP_WHOLE_STEP;
}

/*
 * Training and inference steps alike, never per token bucket, so no inference scope (adaptive
 * buckets are the core's rule, by the caps). A bank per cp size needs one cp size at least.
 */
static int dcp_check(const struct cgrt_config_view *cfg,
                     void (*report)(void *user, int line, const char *message), void *user) {
  struct rules r = {cfg, report, user, 0};
  char d[256];
  rules_scope_none(&r);
  if (cfg->num_cp_sizes == 0) {
    int line = rules_key(&r, "dynamic_cp", "cp_sizes", d, sizeof(d));
    rules_say(&r, line ? line : rules_impl_line(&r),
              "impl = dynamic_cp needs at least one context-parallel size in [dynamic_cp] "
              "cp_sizes (e.g. cp_sizes = 1 2), but %s",
              d);
  }
  return r.errors ? CGRT_E_CONFIG : 0;
}

CGRT_BACKEND_EXPORT const struct cgrt_backend_v1 cgrt_backend_v1 = {
    .abi_major = CGRT_BACKEND_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_backend_v1),
    .name = "dynamic_cp",
    .caps = DCP_CAPS,
    .init = dcp_init,
    .fini = dcp_fini,
    .step = dcp_step,
    .call = dcp_call,
    .release = dcp_release,
    .stats = dcp_stats,
    .describe = dcp_describe,
    .figures = dcp_figures,
    .options = dcp_options,
    .num_options = sizeof(dcp_options) / sizeof(dcp_options[0]),
    .check = dcp_check,
    .config_caps = dcp_config_caps,
};
