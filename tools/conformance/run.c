/*
 * run.c - runs of the synthetic model for `cgrt test-backend`: a runtime opened from the tested
 * configuration (or `impl = none` for the reference), the operations made on it recorded with
 * what each returned, and their replay under `impl = none` with every step's outputs compared
 * bit for bit.
 *
 * The reference replays only what succeeded on the tested runtime, with the same inputs (each
 * step's seed is its index in the run), the same buffer places and cp sizes: a step the tested
 * backend refused (a rebind policy's error, a failing module) changed no weight, so the two runs
 * stay comparable after it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

/* ---------------------------------------------------------------- configurations */

struct msgs {
  char *why;
  size_t len;
};

static void first_error(void *user, cgrt_log_level level, const char *text) {
  struct msgs *m = user;
  if (level == CGRT_LOG_ERROR && m->why[0] == '\0')
    snprintf(m->why, m->len, "%s", text);
}

static int read_config(const struct conform_config *cfg, int reference, cgrt_tool_config **out,
                       char *why, size_t len) {
  static const char none[] = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = warn\n";
  struct msgs m = {why, len};
  why[0] = '\0';
  int rc = cgrt_tool_config_read(out, NULL, reference ? none : cfg->text,
                                 reference ? "<impl = none>" : cfg->name, first_error, &m);
  if (rc != 0 && why[0] == '\0')
    snprintf(why, len, "cannot read the configuration: %s", cgrt_strerror(rc));
  if (rc != 0)
    return rc;
  struct cgrt_config_view *v = cgrt_tool_config_view(*out);
  v->driver = cfg->driver;
  v->bind_cpu = 0;
  v->log_level = cfg->verbose ? CGRT_LOG_INFO : CGRT_LOG_WARN;
  /* verify reruns replays on private copies in device memory on the cuda driver, where the
     model's host functions cannot read them. */
  if (cfg->driver == CGRT_DRIVER_CUDA)
    v->verify = CGRT_VERIFY_OFF;
  /* The reference takes the same cp sizes, so that the same steps are valid there. */
  if (reference && cfg->num_cp_sizes > 0)
    rc = cgrt_tool_config_set_cp_sizes(*out, cfg->cp_sizes, cfg->num_cp_sizes);
  return rc;
}

static void run_log(void *user, cgrt_log_level level, const char *msg) {
  struct conform_run *r = user;
  if (level <= CGRT_LOG_WARN)
    snprintf(r->log, sizeof(r->log), "%s", msg);
  if (r->cfg->verbose)
    printf("      %s%s: %s\n", r->reference ? "(none) " : "",
           level == CGRT_LOG_ERROR  ? "error"
           : level == CGRT_LOG_WARN ? "warning"
                                    : "info",
           msg);
}

int conform_config_probe(struct conform_config *cfg, char *why, size_t len) {
  cgrt_tool_config *c = NULL;
  int rc = read_config(cfg, 0, &c, why, len);
  if (rc != 0)
    return rc;
  cgrt_runtime *rt = NULL;
  rc = cgrt_tool_open(&rt, c, NULL, NULL);
  if (rc != 0) {
    snprintf(why, len, "%s", cgrt_last_error(NULL));
    return rc;
  }
  cfg->info = (cgrt_backend_info){.struct_size = sizeof(cfg->info)};
  rc = cgrt_backend_info_get(rt, &cfg->info);
  if (rc != 0) {
    snprintf(why, len, "cgrt_backend_info_get: %s", cgrt_last_error(rt));
    cgrt_close(rt);
    return rc;
  }
  snprintf(cfg->backend_name, sizeof(cfg->backend_name), "%s", cfg->info.name);
  snprintf(cfg->backend_path, sizeof(cfg->backend_path), "%s", cfg->info.path);
  cfg->info.name = cfg->backend_name;
  cfg->info.path = cfg->backend_path;
  const struct cgrt_config_view *v = cgrt_tool_view(rt);
  cfg->warmup = v->warmup_steps;
  cfg->adaptive = v->buckets == CGRT_BUCKETS_ADAPTIVE;
  /* attn and mlp in every layer, and every kind the configuration names (the dry run's set) */
  cfg->kinds = CGRT_KIND_BIT(CGRT_KIND_ATTN) | CGRT_KIND_BIT(CGRT_KIND_MLP) | v->modules;
  if (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER))
    cfg->kinds |= CGRT_KIND_BIT(CGRT_KIND_MOE);
  const int64_t *sizes = NULL;
  size_t n = 0;
  cgrt_tool_buckets(rt, &sizes, &n);
  free(cfg->buckets);
  cfg->buckets = malloc((n ? n : 1) * sizeof(*cfg->buckets));
  if (cfg->buckets) /* the runtime's own array: copied before it closes */
    memcpy(cfg->buckets, sizes, n * sizeof(*cfg->buckets));
  free(cfg->cp_sizes);
  cfg->cp_sizes = NULL;
  cfg->num_cp_sizes = 0;
  if ((cfg->info.caps & CGRT_BACKEND_COMM) && v->num_cp_sizes > 0) {
    cfg->cp_sizes = malloc(v->num_cp_sizes * sizeof(*cfg->cp_sizes));
    if (cfg->cp_sizes) {
      memcpy(cfg->cp_sizes, v->cp_sizes, v->num_cp_sizes * sizeof(*cfg->cp_sizes));
      cfg->num_cp_sizes = v->num_cp_sizes;
    }
  }
  cgrt_close(rt);
  if (!cfg->buckets) {
    snprintf(why, len, "out of memory");
    return CGRT_E_NOMEM;
  }
  cfg->num_buckets = n;
  /* The second training shape is the larger: a graph of the first replayed for it leaves
     tokens unwritten. */
  cfg->train_tokens = 48;
  cfg->reshaped = 72;
  int64_t largest = n ? cfg->buckets[n - 1] : 0;
  /* Room for the largest bucket and steps above it (the infer scenario's largest + 17). */
  cfg->cap = (uint64_t)(largest > cfg->reshaped ? largest : cfg->reshaped) + 32;
  return 0;
}

void conform_config_free(struct conform_config *cfg) {
  free(cfg->buckets);
  free(cfg->cp_sizes);
  cfg->buckets = NULL;
  cfg->cp_sizes = NULL;
}

/* ---------------------------------------------------------------- runs */

int conform_run_open(struct conform_run *r, const struct conform_config *cfg,
                     const struct conform_open *o, int reference, char *why, size_t len) {
  memset(r, 0, sizeof(*r));
  r->cfg = cfg;
  r->reference = reference;
  r->model.pending = -1;
  cgrt_tool_config *c = NULL;
  int rc = read_config(cfg, reference, &c, why, len);
  if (rc != 0)
    return rc;
  if (!reference && o && o->rebind >= 0)
    cgrt_tool_config_view(c)->rebind = (cgrt_rebind)o->rebind;
  rc = cgrt_tool_open(&r->rt, c, run_log, r);
  if (rc != 0) {
    snprintf(why, len, "%s%s", reference ? "impl = none: " : "", cgrt_last_error(NULL));
    return rc;
  }
  /* The host driver's stand-in communicators, for a backend of cp banks. */
  if (cfg->num_cp_sizes > 0 && cfg->driver == CGRT_DRIVER_HOST) {
    rc = cgrt_set_world_comm(r->rt, NULL);
    if (rc != 0) {
      snprintf(why, len, "cgrt_set_world_comm: %s", cgrt_last_error(r->rt));
      return rc;
    }
  }
  return conform_model_init(&r->model, cfg, r->rt, why, len);
}

static int reserve_ops(struct conform_run *r, size_t n) {
  if (n > r->cap_ops) {
    size_t cap = r->cap_ops ? r->cap_ops * 2 : 64;
    while (cap < n)
      cap *= 2;
    struct conform_op *v = realloc(r->ops, cap * sizeof(*v));
    if (!v)
      return CGRT_E_NOMEM;
    r->ops = v;
    r->cap_ops = cap;
  }
  return conform_model_reserve(&r->model, n) == 0 ? 0 : CGRT_E_NOMEM;
}

static const char mode_letters[] = "EWCR";

static void print_step(const struct conform_run *r, size_t i) {
  const struct conform_op *op = &r->ops[i];
  printf("    %sstep %zu: %s %" PRId64 " tokens, place %d", r->reference ? "(none) " : "", i,
         cgrt_phase_name(op->phase), op->tokens, op->set);
  if (op->cp)
    printf(", cp %d", op->cp);
  if (op->rc != 0) {
    printf(": error %d (%s)\n", op->rc, cgrt_last_error(r->rt));
    return;
  }
  printf(": %s, padded %" PRId64 "; calls eager %u, captured %u, replayed %u; graphs built %u, "
         "fallbacks %u\n",
         cgrt_mode_name(op->rep.mode), op->rep.padded_tokens, op->rep.calls_eager,
         op->rep.calls_captured, op->rep.calls_replayed, op->rep.graphs_built, op->rep.fallbacks);
}

/* Runs operation i (a step already described in r->ops[i]). */
static int run_step_at(struct conform_run *r, size_t i) {
  struct conform_op *op = &r->ops[i];
  struct conform_model *m = &r->model;
  m->snaps[i]->ntok = (uint64_t)op->tokens;
  m->op = i;
  m->cur = op->set;
  cgrt_step_desc d;
  conform_model_desc(m, op, &d);
  op->rep = (cgrt_step_report){.struct_size = sizeof(op->rep)};
  op->rc = cgrt_step(r->rt, &d, &op->rep);
  if (op->rc == 0) {
    /* Its outputs are read by the next step's prepare, or once the stream is idle. A prepare
       that never ran left the previous step's unread: the comparison says so. */
    m->pending = (long)i;
    m->pending_set = op->set;
    r->steps_ok++;
  }
  if (r->cfg->verbose)
    print_step(r, i);
  return op->rc;
}

int conform_step(struct conform_run *r, cgrt_phase phase, int64_t tokens, int set) {
  int rc = reserve_ops(r, r->num_ops + 1);
  if (rc != 0)
    return rc;
  size_t i = r->num_ops++;
  int cp = 0;
  if (r->cfg->num_cp_sizes > 0) /* a backend of cp banks sees every cp size in turn */
    cp = r->cfg->cp_sizes[i % r->cfg->num_cp_sizes];
  r->ops[i] = (struct conform_op){
      .kind = CONFORM_OP_STEP, .phase = phase, .tokens = tokens, .set = set, .cp = cp};
  return run_step_at(r, i);
}

int conform_release(struct conform_run *r) {
  int rc = reserve_ops(r, r->num_ops + 1);
  if (rc != 0)
    return rc;
  size_t i = r->num_ops++;
  r->ops[i] = (struct conform_op){.kind = CONFORM_OP_RELEASE};
  r->ops[i].rc = cgrt_release_graphs(r->rt);
  if (r->cfg->verbose)
    printf("    %srelease: %d\n", r->reference ? "(none) " : "", r->ops[i].rc);
  /* The release waited for the stream: what it ran is there to read. */
  if (r->ops[i].rc == 0 && conform_model_snap_now(&r->model) != 0)
    return CGRT_E_NOMEM;
  return r->ops[i].rc;
}

int conform_sync(struct conform_run *r) {
  int rc = cgrt_synchronize(r->rt);
  if (rc == 0 && conform_model_snap_now(&r->model) != 0)
    rc = CGRT_E_NOMEM;
  return rc;
}

int conform_run_close(struct conform_run *r) {
  int rc = cgrt_close(r->rt);
  if (rc == 0) {
    r->rt = NULL; /* every piece of work ran before the close returned */
    if (conform_model_snap_now(&r->model) != 0)
      rc = CGRT_E_NOMEM;
  }
  return rc;
}

void conform_run_free(struct conform_run *r) {
  if (r->rt)
    cgrt_close(r->rt);
  r->rt = NULL;
  conform_model_free(&r->model);
  free(r->ops);
  r->ops = NULL;
  r->num_ops = r->cap_ops = 0;
}

const char *conform_modes(const struct conform_run *r, size_t from, size_t to, char *buf,
                          size_t len) {
  size_t j = 0;
  for (size_t i = from; i < to && i < r->num_ops && j + 1 < len; i++) {
    const struct conform_op *op = &r->ops[i];
    if (op->kind == CONFORM_OP_RELEASE)
      buf[j++] = '/';
    else if (op->rc != 0)
      buf[j++] = '!';
    else
      buf[j++] = (unsigned)op->rep.mode < 4 ? mode_letters[op->rep.mode] : '?';
  }
  buf[j] = '\0';
  return buf;
}

/* ---------------------------------------------------------------- the comparison */

static void describe_op(const struct conform_run *t, size_t i, char *buf, size_t len) {
  const struct conform_op *op = &t->ops[i];
  int n = snprintf(buf, len, "step %zu (%s, %" PRId64 " tokens", i, cgrt_phase_name(op->phase),
                   op->tokens);
  if (op->rep.padded_tokens != op->tokens && n > 0 && (size_t)n < len)
    n += snprintf(buf + n, len - (size_t)n, " padded to %" PRId64, op->rep.padded_tokens);
  if (op->set != 0 && n > 0 && (size_t)n < len)
    n += snprintf(buf + n, len - (size_t)n, ", buffers at place %d", op->set);
  if (op->cp != 0 && n > 0 && (size_t)n < len)
    n += snprintf(buf + n, len - (size_t)n, ", cp %d", op->cp);
  if (n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ", %s)", cgrt_mode_name(op->rep.mode));
}

static int compare_snaps(const struct conform_run *t, const struct conform_run *ref, size_t i,
                         char *why, size_t len) {
  const struct conform_snap *a = t->model.snaps[i], *b = ref->model.snaps[i];
  char what[192];
  describe_op(t, i, what, sizeof(what));
  if (!b->taken) {
    snprintf(why, len, "%s: impl = none recorded no outputs (a fault of the test)", what);
    return -1;
  }
  if (!a->taken) {
    snprintf(why, len,
             "%s: its outputs were never read: the next step's prepare did not run eagerly (or "
             "the step's work never ran)",
             what);
    return -1;
  }
  for (uint64_t j = 0; j < a->ntok; j++)
    if (a->out[j] != b->out[j]) {
      snprintf(why, len,
               "%s: output of token %" PRIu64 " is %016" PRIx64 ", under impl = none %016" PRIx64,
               what, j, a->out[j], b->out[j]);
      return -1;
    }
  for (size_t j = 0; j < t->model.mods * CONFORM_WEIGHTS; j++)
    if (a->w[j] != b->w[j]) {
      snprintf(why, len,
               "%s: the weights of %s after it differ from impl = none's (word %zu: %016" PRIx64
               ", under none %016" PRIx64 ")",
               what, t->model.name[j / CONFORM_WEIGHTS], j % CONFORM_WEIGHTS, a->w[j], b->w[j]);
      return -1;
    }
  return 0;
}

int conform_compare(struct conform_run *t, char *why, size_t len) {
  if (t->rt) {
    int rc = conform_sync(t);
    if (rc != 0) {
      snprintf(why, len, "cgrt_synchronize: %s", cgrt_last_error(t->rt));
      return rc;
    }
  }
  struct conform_run ref;
  int rc = conform_run_open(&ref, t->cfg, NULL, 1, why, len);
  if (rc == 0)
    rc = reserve_ops(&ref, t->num_ops);
  for (size_t i = 0; rc == 0 && i < t->num_ops; i++) {
    const struct conform_op *op = &t->ops[i];
    ref.ops[i] = *op;
    ref.num_ops = i + 1;
    if (op->rc != 0)
      continue; /* refused by the tested backend: it ran nothing of the step */
    if (op->kind == CONFORM_OP_RELEASE) {
      rc = cgrt_release_graphs(ref.rt);
      if (rc == 0 && conform_model_snap_now(&ref.model) != 0)
        rc = CGRT_E_NOMEM;
    } else {
      rc = run_step_at(&ref, i);
    }
    if (rc != 0)
      snprintf(why, len, "impl = none failed operation %zu: %s", i, cgrt_last_error(ref.rt));
  }
  if (rc == 0 && (rc = conform_run_close(&ref)) != 0)
    snprintf(why, len, "closing impl = none: %s", cgrt_last_error(ref.rt));
  for (size_t i = 0; rc == 0 && i < t->num_ops; i++)
    if (t->ops[i].kind == CONFORM_OP_STEP && t->ops[i].rc == 0 &&
        compare_snaps(t, &ref, i, why, len) != 0)
      rc = -1;
  conform_run_free(&ref);
  return rc;
}
