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
  const char *src = cfg->source ? cfg->source : "<config>";
  if (line)
    cgrt__diag_add(diag, CGRT_LOG_ERROR, "%s:%d: %s", src, line, text);
  else
    cgrt__diag_add(diag, CGRT_LOG_ERROR, "%s: %s", src, text);
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

/* Where a backend's check() reports. */
struct check_report {
  const struct cgrt_config *cfg;
  struct cgrt_diag *diag;
  int errors;
};

static void backend_report(void *user, int line, const char *message) {
  struct check_report *r = user;
  const char *src = r->cfg->source ? r->cfg->source : "<config>";
  if (line > 0)
    cgrt__diag_add(r->diag, CGRT_LOG_ERROR, "%s:%d: %s", src, line, message ? message : "");
  else
    cgrt__diag_add(r->diag, CGRT_LOG_ERROR, "%s: %s", src, message ? message : "");
  r->errors++;
}

/*
 * The rules that depend on the backend: its own check() when it has one (since minor 5); else the
 * conservative rule of before, full recomputation refused with any backend that builds graphs.
 * `vt` is NULL when the backend could not be loaded: it is then taken to build graphs.
 */
static void backend_rules(const struct cgrt_config *cfg, const struct cgrt_backend_v1 *vt,
                          struct cgrt_diag *diag, int *errors) {
  const struct cgrt_config_view *v = &cfg->view;
  char d1[256], d2[256];
  if (vt && CGRT_BACKEND_HAS(vt, check)) {
    struct check_report r = {cfg, diag, 0};
    vt->check(v, backend_report, &r);
    *errors += r.errors;
    return;
  }
  int graphs = !vt || (vt->caps & CGRT_CAP_GRAPHS);
  if (graphs && v->recompute == CGRT_RECOMPUTE_FULL) {
    describe(cfg, K_RECOMPUTE, d1, sizeof(d1));
    describe(cfg, K_IMPL, d2, sizeof(d2));
    rule(cfg, diag, errors, K_RECOMPUTE, K_IMPL,
         "[host] %s is only graph-safe with whole-step graphs, impl = full_iteration or "
         "dynamic_cp with graph_scope = step (full recomputation inside per-module graphs replays "
         "stale activations), but %s; use one of those, or recompute = selective",
         d1, d2);
  }
}

int cgrt__config_check(const struct cgrt_config *cfg, struct cgrt_diag *diag) {
  const struct cgrt_config_view *v = &cfg->view;
  const char *impl = v->impl ? v->impl : "?";
  int errors = 0;
  char d1[256], d2[256], d3[256];
  int moe = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE)) != 0;
  int router = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER)) != 0;
  int pre = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE_PREPROCESS)) != 0;

  /* The configured backend's table: read with the file, or loaded now for a hand-built one. */
  const struct cgrt_option_set *conf = cgrt__cfg_configured_set(cfg);
  struct cgrt_backend_lib lib = {0};
  const struct cgrt_backend_v1 *vt = conf ? conf->lib.vt : NULL;
  if (!vt && v->impl) {
    char err[1024];
    if (cgrt__backend_open(&lib, v->impl, cfg->backend_path, err, sizeof(err)) == 0)
      vt = lib.vt;
  }

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

  /* -- the backend's own rules: inference scope, whole-step graphs, recomputation... -- */
  backend_rules(cfg, vt, diag, &errors);

  /* -- anything that captures (a backend that cannot be loaded now is taken to) -- */
  if ((!vt || (vt->caps & CGRT_CAP_GRAPHS)) && !v->graph_safe_rng) {
    describe(cfg, K_GRAPH_SAFE_RNG, d2, sizeof(d2));
    rule(cfg, diag, &errors, K_GRAPH_SAFE_RNG, K_IMPL,
         "impl = %s builds graphs, so [host] graph_safe_rng must be true (random numbers drawn "
         "inside a graph must come from a graph-safe generator), but %s; make the host's "
         "generator graph-safe and set graph_safe_rng = true, or use impl = none",
         impl, d2);
  }

  /* -- counts -- */
  for (int id = 0; id < K_COUNT; id++)
    below_minimum(cfg, diag, &errors, id);
  errors += cgrt__cfg_check_option_ranges(cfg, diag);
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
  cgrt__backend_close(&lib);
  return errors ? CGRT_E_CONFIG : 0;
}

int cgrt__config_check_backend_keys(const struct cgrt_config *cfg, struct cgrt_diag *diag) {
  const char *own = cfg->backend_section;
  const struct cgrt_option_set *conf = cgrt__cfg_configured_set(cfg);
  int errors = 0;
  if (!own || (conf && conf->closed)) /* declared options: every key was checked when read */
    return 0;
  for (size_t i = 0; i < cfg->num_entries; i++) {
    const struct cgrt_config_entry *e = &cfg->entries[i];
    if (e->used || strcmp(e->section, own) != 0 || cgrt__cfg_key_find(e->section, e->key) >= 0)
      continue;
    cgrt__diag_add(diag, CGRT_LOG_ERROR,
                   "%s:%d: unknown key '%s' in [%s]: backend '%s' does not read it",
                   cfg->source ? cfg->source : "<config>", e->line, e->key, own, own);
    errors++;
  }
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

int cgrt__config_print(const struct cgrt_config *cfg, FILE *out) {
  int rc = 0;
  fprintf(out, "; cgrt configuration from %s: every key, defaults included\n",
          cfg->source ? cfg->source : "the defaults");
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
  const char *own = cfg->backend_section;
  const struct cgrt_option_set *conf = cgrt__cfg_configured_set(cfg);
  if (own && !cgrt__cfg_section_known(own) && conf && conf->closed) {
    /* every option the backend declares, with its value or default; no header for none */
    print_options(cfg, own, out, 1);
  } else if (own && !cgrt__cfg_section_known(own)) {
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
  if (ferror(out))
    return CGRT_E_IO;
  return rc;
}
