/*
 * config_rules.c - the rules between keys (DESIGN.md section 6), the check of a backend's own
 * section after its init(), and printing the normalized configuration.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buckets/bucket_plan.h"
#include "config_impl.h"

/* "name = value (line N)" or "name = value (default)"; "name = (line N)" for an empty value. */
static void format_key(const char *name, const char *val, int line, char *buf, size_t len) {
  if (line)
    snprintf(buf, len, "%s%s%s (line %d)", name, val[0] ? " = " : " =", val, line);
  else
    snprintf(buf, len, "%s%s%s (default)", name, val[0] ? " = " : " =", val);
}

/* Describes key `id` for a message: "nan_check = on (default)" or "nan_check = off (line 5)". */
static void describe(const struct cgrt_config *cfg, int id, char *buf, size_t len) {
  char *v = cgrt__cfg_value_text(cfg, id);
  format_key(cgrt__cfg_keys[id].name, v ? v : "?", cgrt__cfg_key_line(cfg, id), buf, len);
  free(v);
}

int cgrt__cfg_view_describe(const struct cgrt_config_view *view, const char *section,
                            const char *key, char *buf, size_t len) {
  if (!view || !section || !key || !buf || !len)
    return CGRT_E_INVAL;
  const struct cgrt_config *cfg = cgrt__cfg_of_view(view);
  int id = cgrt__cfg_key_find(section, key);
  if (id >= 0) {
    describe(cfg, id, buf, len);
    return cgrt__cfg_key_line(cfg, id);
  }
  struct cgrt_option_value *ov;
  if (cgrt__cfg_option_find(cfg, section, key, &ov)) {
    format_key(key, ov->text ? ov->text : "", ov->line, buf, len);
    return ov->line;
  }
  snprintf(buf, len, "%s = ?", key);
  return CGRT_E_INVAL;
}

/* One error of the configuration, "file:line: text" (line 0: "file: text"). */
static void report_line(const struct cgrt_config *cfg, struct cgrt_diag *diag, int line,
                        const char *text) {
  const char *src = cfg->source ? cfg->source : "<config>";
  if (line > 0)
    cgrt__diag_add(diag, CGRT_LOG_ERROR, "%s:%d: %s", src, line, text ? text : "");
  else
    cgrt__diag_add(diag, CGRT_LOG_ERROR, "%s: %s", src, text ? text : "");
}

/* Reports one broken rule at the line of the first of keys a, b that was given. */
static void rule(const struct cgrt_config *cfg, struct cgrt_diag *diag, int *errors, int a, int b,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void rule(const struct cgrt_config *cfg, struct cgrt_diag *diag, int *errors, int a, int b,
                 const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  int line = cgrt__cfg_key_line(cfg, a);
  if (!line && b >= 0)
    line = cgrt__cfg_key_line(cfg, b);
  report_line(cfg, diag, line, text);
  (*errors)++;
}

/* One check of a count that must be at least `min`. */
static void at_least(const struct cgrt_config *cfg, struct cgrt_diag *diag, int *errors, int id,
                     int64_t value, int64_t min) {
  if (value >= min)
    return;
  const struct cfg_key *k = &cgrt__cfg_keys[id];
  rule(cfg, diag, errors, id, -1, "[%s] %s = %lld: must be at least %lld (%s)", k->section, k->name,
       (long long)value, (long long)min, k->why);
}

/* The range of key `id` as its row gives it (whole numbers only). */
static void below_minimum(const struct cgrt_config *cfg, struct cgrt_diag *diag, int *errors,
                          int id) {
  const struct cfg_key *k = &cgrt__cfg_keys[id];
  const char *field = (const char *)&cfg->view + k->offset;
  if (k->min == 0)
    return;
  if (k->type == CFG_INT)
    at_least(cfg, diag, errors, id, *(const int *)field, k->min);
  else if (k->type == CFG_INT64)
    at_least(cfg, diag, errors, id, *(const int64_t *)field, k->min);
}

/* One check of a count that must be at most `max`. */
static void at_most(const struct cgrt_config *cfg, struct cgrt_diag *diag, int *errors, int id,
                    int64_t value, int64_t max) {
  if (value <= max)
    return;
  const struct cfg_key *k = &cgrt__cfg_keys[id];
  rule(cfg, diag, errors, id, -1, "[%s] %s = %lld: at most %lld (%s)", k->section, k->name,
       (long long)value, (long long)max, k->why);
}

/* Where a backend's check() reports. */
struct check_report {
  const struct cgrt_config *cfg;
  struct cgrt_diag *diag;
  int errors;
};

static void backend_report(void *user, int line, const char *message) {
  struct check_report *r = user;
  report_line(r->cfg, r->diag, line, message);
  r->errors++;
}

/* Reports one broken rule at `line` (0: none). */
static void rule_at(const struct cgrt_config *cfg, struct cgrt_diag *diag, int *errors, int line,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void rule_at(const struct cgrt_config *cfg, struct cgrt_diag *diag, int *errors, int line,
                    const char *fmt, ...) {
  char text[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  struct check_report r = {cfg, diag, 0};
  backend_report(&r, line, text);
  (*errors)++;
}

/*
 * The backend the core's rules by capability judge: the one that does the work, the configured
 * backend or, through its decorators, the last backend of the configured chain.
 */
struct judged {
  const struct cgrt_backend_v1 *vt; /* NULL: it could not be loaded (taken to build graphs) */
  int known;                        /* its caps under this configuration are known */
  uint64_t caps;
  char who[640]; /* "impl = full_iteration", "backend 'knobs' (inner = knobs, wrapped by ...)" */
  char at[640];  /* who with where it is given: "impl = local (line 2)" */
  char why[256]; /* config_caps(): the keys that made its caps, or "" */
  int line;      /* where it is named; 0: a default */
};

static void judge(const struct cgrt_config *cfg, const struct cgrt_backend_v1 *by_hand,
                  int values_ok, struct judged *j) {
  const struct cgrt_config_view *v = &cfg->view;
  const struct cgrt_option_set *conf = cgrt__cfg_configured_set(cfg), *last = conf;
  for (int place = 2; last && cgrt__cfg_chain_set(cfg, place); place++)
    last = cgrt__cfg_chain_set(cfg, place);
  memset(j, 0, sizeof(*j));
  j->vt = last ? last->lib.vt : by_hand;
  char impl[512];
  describe(cfg, K_IMPL, impl, sizeof(impl));
  const char *written = v->impl ? v->impl : "?";
  if (last && last != conf) {
    const struct cgrt_option_set *outer = cgrt__cfg_chain_set(cfg, last->configured - 1);
    const char *name = j->vt ? j->vt->name : last->section;
    snprintf(j->who, sizeof(j->who), "backend '%s' ([%s] %s = %s, wrapped by impl = %s)", name,
             outer->section, outer->lib.vt->wraps, last->impl, written);
    snprintf(j->at, sizeof(j->at), "%s", j->who);
    j->line = last->impl_line;
  } else {
    int renamed = j->vt && strcmp(j->vt->name, written) != 0;
    snprintf(j->who, sizeof(j->who), "impl = %s%s%s%s", written, renamed ? " (backend '" : "",
             renamed ? j->vt->name : "", renamed ? "')" : "");
    snprintf(j->at, sizeof(j->at), "%s%s%s%s", impl, renamed ? " (backend '" : "",
             renamed ? j->vt->name : "", renamed ? "')" : "");
    j->line = cgrt__cfg_key_line(cfg, K_IMPL);
  }
  if (!j->vt) { /* not loaded now: taken to build per-call graphs, as before minor 5 */
    j->caps = CGRT_CAP_GRAPHS;
    j->known = 1;
  } else if (CGRT_BACKEND_HAS(j->vt, config_caps)) {
    /* run, as check() is, only on values inside their ranges */
    if (values_ok) {
      j->caps = j->vt->config_caps(v, j->why, sizeof(j->why));
      j->why[sizeof(j->why) - 1] = '\0';
      if (j->caps == j->vt->caps)
        j->why[0] = '\0';
      j->known = 1;
    }
  } else {
    j->caps = j->vt->caps;
    j->known = 1;
  }
}

/*
 * The core's rules by capability, for every backend, whether or not it has a check(): graphs need
 * a graph-safe generator; a whole-step graph cannot stop for the host to read the loss and graphs
 * every call itself; full recomputation only inside whole-step graphs; adaptive buckets only for
 * a backend that follows them.
 */
static void capability_rules(const struct cgrt_config *cfg, const struct judged *j,
                             struct cgrt_diag *diag, int *errors) {
  const struct cgrt_config_view *v = &cfg->view;
  char d[256], who[1024], instead[320];
  if (!j->known)
    return; /* its caps depend on values out of range: judged once they are in range */
  int graphs = (j->caps & CGRT_CAP_GRAPHS) != 0, whole = (j->caps & CGRT_CAP_WHOLE_STEP) != 0;
  int line;
  if (graphs && !v->graph_safe_rng) {
    describe(cfg, K_GRAPH_SAFE_RNG, d, sizeof(d));
    line = cgrt__cfg_key_line(cfg, K_GRAPH_SAFE_RNG);
    rule_at(cfg, diag, errors, line ? line : j->line,
            "%s builds graphs, so [host] graph_safe_rng must be true (random numbers drawn inside "
            "a graph must come from a graph-safe generator), but %s; make the host's generator "
            "graph-safe and set graph_safe_rng = true, or use impl = none",
            j->who, d);
  }
  snprintf(who, sizeof(who), "%s%s%s", j->who, j->why[0] ? " with " : "", j->why);
  if (j->why[0])
    snprintf(instead, sizeof(instead), "change %s", j->why);
  else
    snprintf(instead, sizeof(instead), "use impl = local or another backend of per-module graphs");
  if (whole && v->nan_check) {
    describe(cfg, K_NAN_CHECK, d, sizeof(d));
    line = cgrt__cfg_key_line(cfg, K_NAN_CHECK);
    rule_at(cfg, diag, errors, line ? line : j->line,
            "%s graphs the whole step, which needs [host] nan_check = off (a whole-step graph "
            "cannot stop for the host to read the loss every step), but %s; set nan_check = off, "
            "or %s",
            who, d, instead);
  }
  if (whole && v->modules) {
    describe(cfg, K_MODULES, d, sizeof(d));
    line = cgrt__cfg_key_line(cfg, K_MODULES);
    rule_at(cfg, diag, errors, line ? line : j->line,
            "%s graphs the whole step, so [cuda_graph] modules must be empty, but %s; remove the "
            "modules line, or %s",
            who, d, instead);
  }
  if (graphs && !whole && v->recompute == CGRT_RECOMPUTE_FULL) {
    describe(cfg, K_RECOMPUTE, d, sizeof(d));
    line = cgrt__cfg_key_line(cfg, K_RECOMPUTE);
    rule_at(cfg, diag, errors, line ? line : j->line,
            "[host] %s is only graph-safe with whole-step graphs, impl = full_iteration or "
            "dynamic_cp with graph_scope = step (full recomputation inside per-module graphs "
            "replays stale activations), but %s %s; use one of those, or recompute = selective",
            d, j->at,
            j->vt ? "builds per-module graphs"
                  : "could not be loaded now and is taken to build per-module graphs");
  }
  if (j->vt && v->buckets == CGRT_BUCKETS_ADAPTIVE && !(j->caps & CGRT_CAP_ADAPTIVE_BUCKETS)) {
    describe(cfg, K_BUCKETS, d, sizeof(d));
    line = cgrt__cfg_key_line(cfg, K_BUCKETS);
    rule_at(cfg, diag, errors, line ? line : j->line,
            "[inference] %s only works with impl = local or another backend that follows adaptive "
            "buckets (CGRT_CAP_ADAPTIVE_BUCKETS), and %s does not follow adaptive buckets; use "
            "buckets = exponential, linear or list",
            d, j->who);
  }
}

/* The check() of each backend of the configured chain, outer first (or of one loaded by hand). */
static void backend_checks(struct cgrt_config *cfg, const struct cgrt_backend_v1 *by_hand,
                           struct cgrt_diag *diag, int *errors) {
  struct check_report r = {cfg, diag, 0};
  if (by_hand && CGRT_BACKEND_HAS(by_hand, check))
    by_hand->check(&cfg->view, backend_report, &r);
  for (int place = 1;; place++) {
    struct cgrt_option_set *set = (struct cgrt_option_set *)cgrt__cfg_chain_set(cfg, place);
    if (!set)
      break;
    if (!set->lib.vt || !CGRT_BACKEND_HAS(set->lib.vt, check))
      continue;
    set->lib.vt->check(&cfg->view, backend_report, &r);
    set->check_ran = 1;
  }
  *errors += r.errors;
}

int cgrt__config_check(struct cgrt_config *cfg, struct cgrt_diag *diag) {
  const struct cgrt_config_view *v = &cfg->view;
  int errors = 0;
  char d1[256], d2[256], d3[256];
  int moe = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE)) != 0;
  int router = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER)) != 0;
  int pre = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE_PREPROCESS)) != 0;

  /* The configured chain's tables: read with the file, or the configured one loaded now for a
     configuration built by hand. */
  struct cgrt_backend_lib lib = {0};
  if (!cgrt__cfg_configured_set(cfg) && v->impl) {
    char err[1024];
    (void)cgrt__backend_open(&lib, v->impl, cfg->backend_path, err, sizeof(err));
  }
  for (size_t s = 0; s < cfg->num_sets; s++)
    cfg->sets[s].check_ran = 0;

  /* -- what is graphed: MoE -- */
  describe(cfg, K_MODULES, d1, sizeof(d1));
  if (moe && router)
    rule(cfg, diag, &errors, K_MODULES, -1,
         "[cuda_graph] %s: 'moe' and 'moe_router' exclude each other (moe graphs the whole MoE "
         "layer, its router included); keep one of them",
         d1);
  if (pre && !router)
    rule(cfg, diag, &errors, K_MODULES, -1,
         "[cuda_graph] %s: 'moe_preprocess' needs 'moe_router' in modules too (the preprocess "
         "graph follows the router's graph); add moe_router or remove moe_preprocess",
         d1);
  if ((moe || router) && v->moe_experts <= 1) {
    describe(cfg, K_MOE_EXPERTS, d2, sizeof(d2));
    const char *kind = moe ? "moe" : "moe_router";
    rule(cfg, diag, &errors, K_MODULES, K_MOE_EXPERTS,
         "[cuda_graph] modules names '%s', which needs [host] moe_experts > 1, but %s; set "
         "moe_experts to the number of experts, or remove '%s' from modules",
         kind, d2, kind);
  }
  if (moe && v->moe_capacity != CGRT_MOE_CAPACITY_DROP_AND_PAD) {
    describe(cfg, K_MOE_CAPACITY, d2, sizeof(d2));
    rule(cfg, diag, &errors, K_MODULES, K_MOE_CAPACITY,
         "[cuda_graph] modules names 'moe', which needs [host] moe_capacity = drop_and_pad (only "
         "then is the whole MoE layer free of host synchronization), but %s; set moe_capacity = "
         "drop_and_pad, or graph moe_router instead of moe",
         d2);
  }
  if (pre && v->moe_dispatcher == CGRT_MOE_ALLTOALL) {
    describe(cfg, K_MOE_DISPATCHER, d2, sizeof(d2));
    if (v->moe_capacity == CGRT_MOE_CAPACITY_DROP) {
      describe(cfg, K_MOE_CAPACITY, d3, sizeof(d3));
      rule(cfg, diag, &errors, K_MODULES, K_MOE_CAPACITY,
           "[cuda_graph] modules names 'moe_preprocess', which is refused with the alltoall "
           "dispatcher and dropping capacity ([host] %s, %s): preprocess then synchronizes with "
           "the host; set moe_dispatcher = allgather or moe_capacity = drop_and_pad, or remove "
           "moe_preprocess",
           d2, d3);
    }
    if (v->moe_router_padding_fp8) {
      describe(cfg, K_MOE_ROUTER_PADDING_FP8, d3, sizeof(d3));
      rule(cfg, diag, &errors, K_MODULES, K_MOE_ROUTER_PADDING_FP8,
           "[cuda_graph] modules names 'moe_preprocess', which is refused with the alltoall "
           "dispatcher and FP8 router padding ([host] %s, %s): preprocess then synchronizes with "
           "the host; set moe_dispatcher = allgather or moe_router_padding_fp8 = false, or remove "
           "moe_preprocess",
           d2, d3);
    }
  }

  /* -- counts and the options' ranges: the backends' rules below read only values in range -- */
  int before = errors;
  for (int id = 0; id < K_COUNT; id++)
    below_minimum(cfg, diag, &errors, id);
  at_most(cfg, diag, &errors, K_MAX_QUEUED_STEPS, v->max_queued_steps, CGRT_CFG_MAX_QUEUED_STEPS);
  errors += cgrt__cfg_check_option_ranges(cfg, diag);
  int values_ok = errors == before;
  if (v->tp_size >= 1 && v->max_tokens < v->tp_size) {
    describe(cfg, K_MAX_TOKENS, d2, sizeof(d2));
    describe(cfg, K_TP_SIZE, d3, sizeof(d3));
    rule(cfg, diag, &errors, K_MAX_TOKENS, K_TP_SIZE,
         "[inference] %s is smaller than %s: the smallest bucket holds one token per "
         "tensor-parallel rank; raise max_tokens or lower tp_size",
         d2, d3);
  } else if (v->tp_size < 1) {
    at_least(cfg, diag, &errors, K_MAX_TOKENS, v->max_tokens, 1);
  }
  if (v->buckets == CGRT_BUCKETS_LIST && v->bucket_list_len == 0)
    rule(cfg, diag, &errors, K_BUCKETS, K_LIST,
         "[inference] buckets = list needs the bucket sizes in [inference] list (e.g. list = 1 2 4 "
         "8), but list is %s",
         cgrt__cfg_key_line(cfg, K_LIST) ? "empty" : "not given");
  /* -- adaptive buckets -- */
  if (v->buckets == CGRT_BUCKETS_ADAPTIVE && v->tp_size >= 1 && v->max_tokens >= v->tp_size &&
      ((uint64_t)v->max_tokens + (uint64_t)v->tp_size - 1) / (uint64_t)v->tp_size >
          CGRT_ADAPT_MAX_SLOTS) {
    describe(cfg, K_MAX_TOKENS, d3, sizeof(d3));
    rule(cfg, diag, &errors, K_MAX_TOKENS, K_BUCKETS,
         "[inference] buckets = adaptive keeps one counter per multiple of tp_size up to "
         "max_tokens, and %s allows at most %u of them; lower max_tokens or raise tp_size",
         d3, (unsigned)CGRT_ADAPT_MAX_SLOTS);
  }

  /* -- the core's rules by capability, then the backends' own, only on values in range -- */
  struct judged j;
  judge(cfg, lib.vt, values_ok, &j);
  capability_rules(cfg, &j, diag, &errors);
  if (values_ok)
    backend_checks(cfg, lib.vt, diag, &errors);
  cgrt__backend_close(&lib);
  return errors ? CGRT_E_CONFIG : 0;
}

/* Reports each key of the open section `own` (of backend `name`) never read; the errors. */
static int unread_keys(const struct cgrt_config *cfg, const char *own, const char *name,
                       struct cgrt_diag *diag) {
  int errors = 0;
  for (size_t i = 0; i < cfg->num_entries; i++) {
    const struct cgrt_config_entry *e = &cfg->entries[i];
    if (e->used || strcmp(e->section, own) != 0 || cgrt__cfg_key_find(e->section, e->key) >= 0)
      continue;
    cgrt__diag_add(diag, CGRT_LOG_ERROR,
                   "%s:%d: unknown key '%s' in [%s]: backend '%s' does not read it",
                   cfg->source ? cfg->source : "<config>", e->line, e->key, own, name);
    errors++;
  }
  return errors;
}

int cgrt__config_check_backend_keys(const struct cgrt_config *cfg, struct cgrt_diag *diag) {
  int errors = 0, chain = 0;
  for (int place = 1;; place++) {
    const struct cgrt_option_set *set = cgrt__cfg_chain_set(cfg, place);
    if (!set)
      break;
    chain = 1;
    if (set->closed) /* declared options: every key was checked when read */
      continue;
    errors += unread_keys(cfg, set->section, set->lib.vt ? set->lib.vt->name : set->section, diag);
  }
  if (!chain && cfg->backend_section) /* a configuration whose backend was not read with it */
    errors += unread_keys(cfg, cfg->backend_section, cfg->backend_section, diag);
  return errors ? CGRT_E_CONFIG : 0;
}

/* Writes `key = value`, continuing a long value on indented lines so no line is too long to
   read back. A continuation line never starts with a comment character. */
void cgrt__cfg_print_pair(FILE *out, const char *key, const char *value) {
  enum { WIDTH = 120 };
  int w = fprintf(out, "%s =", key);
  size_t col = w > 0 ? (size_t)w : 0;
  const char *p = value;
  while (*p) {
    while (*p == ' ')
      p++;
    if (!*p)
      break;
    size_t n = strcspn(p, " ");
    /* a continuation line is one space, then tokens: a token read back fits on its own line */
    if (col + 1 + n > WIDTH && *p != ';' && *p != '#') {
      fputc('\n', out);
      col = 0;
    }
    fprintf(out, " %.*s", (int)n, p);
    col += 1 + n;
    p += n;
  }
  fputc('\n', out);
}

/* The options loaded tables declare as keys of `section` (not "SECTION.KEY" defaults), after a
   header of the section when `header` is set and there is one at least. */
static void print_options(const struct cgrt_config *cfg, const char *section, FILE *out,
                          int header) {
  int printed = 0;
  for (size_t s = 0; s < cfg->num_sets; s++) {
    const struct cgrt_option_set *set = &cfg->sets[s];
    if (!set->options || strcmp(set->section, section) != 0)
      continue;
    for (size_t i = 0; i < set->num_options; i++) {
      const struct cgrt_option *o = &set->options[i];
      if (!o->name || strchr(o->name, '.') || !set->values[i].text)
        continue;
      if (header && !printed++)
        fprintf(out, "\n[%s]\n", section);
      cgrt__cfg_print_pair(out, o->name, set->values[i].text);
    }
  }
}

/* What was read of each backend of the configured chain: its section, its options, its check().
   (Comment lines: the printed configuration reads back as it is.) */
static void print_chain(const struct cgrt_config *cfg, FILE *out) {
  for (int place = 1;; place++) {
    const struct cgrt_option_set *set = cgrt__cfg_chain_set(cfg, place);
    if (!set)
      break;
    const struct cgrt_option_set *outer = cgrt__cfg_chain_set(cfg, place - 1);
    if (outer)
      fprintf(out, "; [%s] %s = %s: ", outer->section, outer->lib.vt->wraps, set->impl);
    else
      fprintf(out, "; impl = %s: ", set->impl);
    const struct cgrt_backend_v1 *vt = set->lib.vt;
    if (!vt) {
      fprintf(out,
              "not loaded now (the runtime's loader says why)\n;   its section is taken to be "
              "[%s] (its file's name); its options and its check() were not read\n",
              set->section);
      continue;
    }
    fprintf(out, "backend '%s' from %s\n", vt->name, set->lib.path);
    size_t n = 0;
    for (size_t i = 0; set->options && i < set->num_options; i++)
      n += set->options[i].name && !strchr(set->options[i].name, '.');
    if (set->closed)
      fprintf(out, ";   its section [%s]: %zu declared option%s", set->section, n,
              n == 1 ? "" : "s");
    else
      fprintf(out, ";   its section [%s]: open (keys it does not read are refused when it starts)",
              set->section);
    fprintf(out, "; %s%s\n",
            !CGRT_BACKEND_HAS(vt, check) ? "it has no check()"
            : set->check_ran             ? "its check() ran"
                                         : "its check() did not run",
            CGRT_BACKEND_HAS(vt, wraps) ? "; it wraps the backend named below" : "");
  }
}

/* A backend's own section: every option it declares (closed), or the keys given (open). */
static void print_own_section(const struct cgrt_config *cfg, const char *own, int closed,
                              FILE *out) {
  if (cgrt__cfg_section_known(own))
    return;     /* printed with the core's keys */
  if (closed) { /* every option the backend declares, with its value or default */
    print_options(cfg, own, out, 1);
    return;
  }
  int header = 0;
  for (size_t i = 0; i < cfg->num_entries; i++) {
    const struct cgrt_config_entry *e = &cfg->entries[i];
    if (strcmp(e->section, own) != 0)
      continue;
    if (!header++)
      fprintf(out, "\n[%s]\n", own);
    cgrt__cfg_print_pair(out, e->key, e->value);
  }
}

int cgrt__config_print(const struct cgrt_config *cfg, FILE *out) {
  int rc = 0;
  fprintf(out, "; cgrt configuration from %s: every key, defaults included\n",
          cfg->source ? cfg->source : "the defaults");
  print_chain(cfg, out);
  /* Each core section: the core's keys, then those a backend declares there. */
  for (int s = 0; s < CFG_NUM_SECTIONS; s++) {
    const char *section = cgrt__cfg_sections[s];
    fprintf(out, "%s[%s]\n", s ? "\n" : "", section);
    for (int id = 0; id < K_COUNT; id++) {
      const struct cfg_key *k = &cgrt__cfg_keys[id];
      if (strcmp(k->section, section) != 0)
        continue;
      char *v = cgrt__cfg_value_text(cfg, id);
      if (!v) {
        rc = CGRT_E_NOMEM;
        continue;
      }
      cgrt__cfg_print_pair(out, k->name, v);
      free(v);
    }
    print_options(cfg, section, out, 0);
  }
  /* the sections of the configured chain, outer first */
  int chain = 0;
  for (int place = 1;; place++) {
    const struct cgrt_option_set *set = cgrt__cfg_chain_set(cfg, place);
    if (!set)
      break;
    chain = 1;
    print_own_section(cfg, set->section, set->closed, out);
  }
  if (!chain && cfg->backend_section)
    print_own_section(cfg, cfg->backend_section, 0, out);
  if (ferror(out))
    return CGRT_E_IO;
  return rc;
}
