/*
 * config_rules.c - the rules between keys (DESIGN.md section 6), the check of a backend's own
 * section after its init(), and printing the normalized configuration.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket_plan.h"
#include "config_impl.h"

/* Describes key `id` for a message: "nan_check = on (default)" or "nan_check = off (line 5)". */
static void describe(const struct cgrt_config *cfg, int id, char *buf, size_t len) {
  char *v = cgrt__cfg_value_text(cfg, id);
  int line = cgrt__cfg_key_line(cfg, id);
  const char *name = cgrt__cfg_keys[id].name;
  const char *val = v ? v : "?";
  if (line)
    snprintf(buf, len, "%s%s%s (line %d)", name, val[0] ? " = " : " =", val, line);
  else
    snprintf(buf, len, "%s%s%s (default)", name, val[0] ? " = " : " =", val);
  free(v);
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

/*
 * The rules of a whole-step graph, which impl = full_iteration and dynamic_cp's graph_scope = step
 * both build: it cannot stop for the host to read the loss, and it graphs every call itself, so
 * no module list. `who` says what graphs the whole step (key `key`), `instead` the other fix;
 * modules is the modules line described.
 */
static void whole_step_rules(const struct cgrt_config *cfg, struct cgrt_diag *diag, int *errors,
                             int key, const char *who, const char *instead, const char *modules) {
  const struct cgrt_config_view *v = &cfg->view;
  char nan[256];
  if (v->nan_check) {
    describe(cfg, K_NAN_CHECK, nan, sizeof(nan));
    rule(cfg, diag, errors, K_NAN_CHECK, key,
         "%s graphs the whole step, which needs [host] nan_check = off (a whole-step graph cannot "
         "stop for the host to read the loss every step), but %s; set nan_check = off, or %s",
         who, nan, instead);
  }
  if (v->modules)
    rule(cfg, diag, errors, K_MODULES, key,
         "%s graphs the whole step, so [cuda_graph] modules must be empty, but %s; remove the "
         "modules line, or %s",
         who, modules, instead);
}

int cgrt__config_check(const struct cgrt_config *cfg, struct cgrt_diag *diag) {
  const struct cgrt_config_view *v = &cfg->view;
  const char *impl = v->impl ? v->impl : "none";
  int errors = 0;
  char d1[256], d2[256], d3[256];
  int none = strcmp(impl, "none") == 0;
  int local = strcmp(impl, "local") == 0;
  int full_iter = strcmp(impl, "full_iteration") == 0;
  int dcp = strcmp(impl, "dynamic_cp") == 0;
  int cp_step = v->cp_scope == CGRT_CP_SCOPE_STEP;
  int builtin = 0;
  for (int i = 0; i < CFG_NUM_BUILTINS; i++)
    builtin |= strcmp(impl, cgrt__cfg_builtins[i]) == 0;
  int moe = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE)) != 0;
  int router = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER)) != 0;
  int pre = (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE_PREPROCESS)) != 0;

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

  /* -- whole-step graphs -- */
  if (full_iter)
    whole_step_rules(cfg, diag, &errors, K_IMPL, "impl = full_iteration", "use impl = local", d1);
  describe(cfg, K_CP_SCOPE, d3, sizeof(d3));
  if (builtin && !dcp && !none && cp_step) /* none: eager, whatever the scope */
    rule(cfg, diag, &errors, K_CP_SCOPE, K_IMPL,
         "[dynamic_cp] %s is only read by impl = dynamic_cp, but impl = %s; remove graph_scope, "
         "or use impl = full_iteration to graph the whole step",
         d3, impl);
  if (dcp && cp_step) {
    char who[300];
    snprintf(who, sizeof(who), "[dynamic_cp] %s", d3);
    whole_step_rules(cfg, diag, &errors, K_CP_SCOPE, who, "set graph_scope = modules", d1);
  }
  if (v->recompute == CGRT_RECOMPUTE_FULL && !none && !full_iter && !(dcp && cp_step)) {
    describe(cfg, K_RECOMPUTE, d2, sizeof(d2));
    describe(cfg, K_IMPL, d3, sizeof(d3));
    rule(cfg, diag, &errors, K_RECOMPUTE, K_IMPL,
         "[host] %s is only graph-safe with whole-step graphs, impl = full_iteration or "
         "dynamic_cp with graph_scope = step (full recomputation inside per-module graphs replays "
         "stale activations), but %s; use one of those, or recompute = selective",
         d2, d3);
  }

  /* -- inference scope, by backend -- */
  describe(cfg, K_INFERENCE_SCOPE, d2, sizeof(d2));
  if (local && v->inference_scope == CGRT_SCOPE_NONE)
    rule(cfg, diag, &errors, K_INFERENCE_SCOPE, K_IMPL,
         "impl = local needs [cuda_graph] inference_scope = layer or block, but %s; write layer "
         "(one graph per module) or block (one graph per step body), or leave it out for layer",
         d2);
  else if (builtin && !local && v->inference_scope != CGRT_SCOPE_NONE)
    rule(cfg, diag, &errors, K_INFERENCE_SCOPE, K_IMPL,
         "[cuda_graph] %s is not allowed with impl = %s, whose inference scope is always none; "
         "remove inference_scope (only impl = local has layer and block)",
         d2, impl);

  /* -- anything that captures -- */
  if (!none && !v->graph_safe_rng) {
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
  int adaptive = v->buckets == CGRT_BUCKETS_ADAPTIVE;
  describe(cfg, K_BUCKETS, d2, sizeof(d2));
  if (adaptive && builtin && !local)
    rule(cfg, diag, &errors, K_BUCKETS, K_IMPL,
         "[inference] %s only works with impl = local, whose graphs are per token bucket; impl = "
         "%s does not graph per bucket; use buckets = exponential, linear or list, or impl = local",
         d2, impl);
  if (adaptive && v->tp_size >= 1 && v->max_tokens >= v->tp_size &&
      ((uint64_t)v->max_tokens + (uint64_t)v->tp_size - 1) / (uint64_t)v->tp_size >
          CGRT_ADAPT_MAX_SLOTS) {
    describe(cfg, K_MAX_TOKENS, d3, sizeof(d3));
    rule(cfg, diag, &errors, K_MAX_TOKENS, K_BUCKETS,
         "[inference] buckets = adaptive keeps one counter per multiple of tp_size up to "
         "max_tokens, and %s allows at most %u of them; lower max_tokens or raise tp_size",
         d3, (unsigned)CGRT_ADAPT_MAX_SLOTS);
  }
  if (strcmp(impl, "dynamic_cp") == 0 && v->num_cp_sizes == 0) {
    describe(cfg, K_CP_SIZES, d2, sizeof(d2));
    rule(cfg, diag, &errors, K_CP_SIZES, K_IMPL,
         "impl = dynamic_cp needs at least one context-parallel size in [dynamic_cp] cp_sizes "
         "(e.g. cp_sizes = 1 2), but %s",
         d2);
  }
  return errors ? CGRT_E_CONFIG : 0;
}

int cgrt__config_check_backend_keys(const struct cgrt_config *cfg, struct cgrt_diag *diag) {
  const char *own = cfg->backend_section;
  int errors = 0;
  if (!own || cfg->options) /* declared options: every key was checked when read */
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

int cgrt__config_print(const struct cgrt_config *cfg, FILE *out) {
  const char *section = NULL;
  int rc = 0;
  fprintf(out, "; cgrt configuration from %s: every key, defaults included\n",
          cfg->source ? cfg->source : "the defaults");
  for (int id = 0; id < K_COUNT; id++) {
    const struct cfg_key *k = &cgrt__cfg_keys[id];
    if (!section || strcmp(section, k->section) != 0) {
      fprintf(out, "%s[%s]\n", section ? "\n" : "", k->section);
      section = k->section;
    }
    char *v = cgrt__cfg_value_text(cfg, id);
    if (!v) {
      rc = CGRT_E_NOMEM;
      continue;
    }
    cgrt__cfg_print_pair(out, k->name, v);
    free(v);
  }
  const char *own = cfg->backend_section;
  if (own && cfg->options) {
    /* every option the backend declares, with its value or default */
    fprintf(out, "\n[%s]\n", own);
    for (size_t i = 0; i < cfg->num_options; i++)
      if (cfg->option_values[i].text)
        cgrt__cfg_print_pair(out, cfg->options[i].name, cfg->option_values[i].text);
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
