/*
 * config_keys.c - the table of every key (built from config_keys.def, one row a key), the names
 * of enum values; suggestions by edit distance; a backend's own section.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_impl.h"

/* Enumerated options are stored through an int pointer: they must be int-sized. */
_Static_assert(sizeof(cgrt_inference_scope) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_capture_mode) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_rebind) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_bucket_dist) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_capture_time) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_over_capacity) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_cp_scope) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_driver_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_log_level) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_recompute) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_moe_dispatcher) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_moe_capacity) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_verify) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_verify_action) == sizeof(int), "enum size");
_Static_assert(sizeof(cgrt_diagnose) == sizeof(int), "enum size");

/* Spellings, indexed by the value they stand for. */
static const char *const scope_names[] = {"none", "layer", "block"};
static const char *const capture_mode_names[] = {"global", "thread_local", "relaxed"};
static const char *const rebind_names[] = {"update", "copy", "recapture", "error", "auto"};
static const char *const bucket_names[] = {"exponential", "linear", "list", "adaptive"};
static const char *const capture_names[] = {"lazy", "eager"};
static const char *const adapt_by_names[] = {"time", "tokens"};
static const char *const driver_names[] = {"cuda", "host"};
static const char *const bind_cpu_names[] = {"off", "auto"};
static const char *const sync_guard_names[] = {"off", "on"};
static const char *const log_names[] = {"off", "error", "warn", "info", "debug"};
static const char *const recompute_names[] = {"none", "selective", "full"};
static const char *const dispatcher_names[] = {"alltoall", "allgather"};
static const char *const capacity_names[] = {"none", "drop", "drop_and_pad"};
static const char *const on_off[] = {"off", "on"};
static const char *const verify_action_names[] = {"warn", "eager", "error"};
static const char *const diagnose_names[] = {"failures", "on", "off"};
static const char *const true_false[] = {"false", "true"};

#define NAMES(a) a, sizeof(a) / sizeof(a[0])
#define FIELD(f) offsetof(struct cgrt_config_view, f)
#define NOFIELD  0
#define NONAMES  NULL, 0

const struct cfg_key cgrt__cfg_keys[K_COUNT] = {
#define KEY(id, section, name, type, field, names, def, min, why)                                  \
  [id] = {section, name, type, field, names, def, min, why},
#include "config_keys.def"
};

const char *const cgrt__cfg_sections[CFG_NUM_SECTIONS] = {"cuda_graph", "inference", "dynamic_cp",
                                                          "runtime", "host"};

#ifndef CGRT_BUILTIN_BACKENDS
#error "CGRT_BUILTIN_BACKENDS: the build names the built-in backends (CMakeLists.txt)"
#endif

void cgrt__cfg_builtins(struct cfg_builtins *b) {
  snprintf(b->buf, sizeof(b->buf), "%s", CGRT_BUILTIN_BACKENDS);
  b->n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(b->buf, " ", &save); tok && b->n < sizeof(b->name) / sizeof(b->name[0]);
       tok = strtok_r(NULL, " ", &save))
    b->name[b->n++] = tok;
}

static const char *name_of(const char *const *names, size_t n, int v) {
  return v >= 0 && (size_t)v < n ? names[v] : "?";
}

const char *cgrt__scope_name(cgrt_inference_scope v) {
  return name_of(NAMES(scope_names), (int)v);
}

const char *cgrt__rebind_name(cgrt_rebind v) {
  return name_of(NAMES(rebind_names), (int)v);
}

const char *cgrt__capture_mode_name(cgrt_capture_mode v) {
  return name_of(NAMES(capture_mode_names), (int)v);
}

const char *cgrt__driver_name(cgrt_driver_kind v) {
  return name_of(NAMES(driver_names), (int)v);
}

const char *cgrt__bucket_dist_name(cgrt_bucket_dist v) {
  return name_of(NAMES(bucket_names), (int)v);
}

const char *cgrt__diagnose_name(cgrt_diagnose v) {
  return name_of(NAMES(diagnose_names), (int)v);
}

int cgrt__diagnose_from_text(const char *text) {
  for (size_t i = 0; i < sizeof(diagnose_names) / sizeof(diagnose_names[0]); i++)
    if (strcasecmp(text, diagnose_names[i]) == 0)
      return (int)i;
  int b = cgrt__cfg_parse_bool(text);
  return b < 0 ? -1 : b ? CGRT_DIAGNOSE_ON : CGRT_DIAGNOSE_OFF;
}

int cgrt__kind_from_name(const char *name, cgrt_kind *out) {
  if (!name)
    return CGRT_E_INVAL;
  for (int k = 0; k < CGRT_KIND_COUNT; k++)
    if (strcmp(name, cgrt_kind_name((cgrt_kind)k)) == 0) {
      if (out)
        *out = (cgrt_kind)k;
      return 0;
    }
  return CGRT_E_INVAL;
}

int cgrt__cfg_key_find(const char *section, const char *name) {
  for (int i = 0; i < K_COUNT; i++)
    if (strcmp(cgrt__cfg_keys[i].section, section) == 0 &&
        strcmp(cgrt__cfg_keys[i].name, name) == 0)
      return i;
  return -1;
}

int cgrt__cfg_section_known(const char *name) {
  for (int i = 0; i < CFG_NUM_SECTIONS; i++)
    if (strcmp(cgrt__cfg_sections[i], name) == 0)
      return 1;
  return 0;
}

int cgrt__cfg_key_line(const struct cgrt_config *cfg, int id) {
  const struct cfg_key *k = &cgrt__cfg_keys[id];
  for (size_t i = 0; i < cfg->num_entries; i++)
    if (strcmp(cfg->entries[i].section, k->section) == 0 &&
        strcmp(cfg->entries[i].key, k->name) == 0)
      return cfg->entries[i].line;
  return 0;
}

/* ---------------------------------------------------------------- edit distance */

/* Optimal string alignment distance (a swap of two neighbours counts 1), optionally ignoring case.
   SIZE_MAX if memory ran out: no suggestion is better than a wrong one. */
static size_t distance(const char *a, const char *b, int nocase) {
  size_t la = strlen(a), lb = strlen(b);
  size_t *rows = malloc(3 * (lb + 1) * sizeof(*rows));
  if (!rows)
    return SIZE_MAX;
  size_t *pp = rows, *p = rows + lb + 1, *c = rows + 2 * (lb + 1);
  for (size_t j = 0; j <= lb; j++)
    p[j] = j;
  for (size_t i = 1; i <= la; i++) {
    c[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      int ca = (unsigned char)a[i - 1], cb = (unsigned char)b[j - 1];
      if (nocase) {
        ca = tolower(ca);
        cb = tolower(cb);
      }
      size_t best = p[j - 1] + (ca != cb);
      if (p[j] + 1 < best)
        best = p[j] + 1;
      if (c[j - 1] + 1 < best)
        best = c[j - 1] + 1;
      if (nocase && i > 1 && j > 1) {
        int pa = tolower((unsigned char)a[i - 2]), pb = tolower((unsigned char)b[j - 2]);
        if (ca == pb && pa == cb && pp[j - 2] + 1 < best)
          best = pp[j - 2] + 1;
      }
      c[j] = best;
    }
    size_t *t = pp;
    pp = p;
    p = c;
    c = t;
  }
  size_t d = p[lb];
  free(rows);
  return d;
}

size_t cgrt__edit_distance(const char *a, const char *b) {
  /* Plain Levenshtein: case counts, a swap costs two. */
  size_t la = strlen(a), lb = strlen(b);
  size_t *row = malloc((lb + 1) * sizeof(*row));
  if (!row)
    return la > lb ? la : lb;
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  size_t d = row[lb];
  free(row);
  return d;
}

size_t cgrt__cfg_distance_nocase(const char *a, const char *b) {
  return distance(a, b, 1);
}

/* The closest of names to word, if close enough to be a likely typo; NULL otherwise. */
const char *cgrt__cfg_closest(const char *word, const char *const *names, size_t n) {
  const char *best = NULL;
  size_t bd = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    size_t d = cgrt__cfg_distance_nocase(word, names[i]);
    size_t l = strlen(names[i]) > strlen(word) ? strlen(names[i]) : strlen(word);
    if (d <= 3 && 3 * d <= l && d < bd) {
      best = names[i];
      bd = d;
    }
  }
  return best;
}

/* The base name of a backend given by impl: start in *base, length returned (0: none). */
size_t cgrt__cfg_backend_base(const char *impl, const char **base) {
  static const char prefix[] = "libcgrt-backend-";
  const char *b = strrchr(impl, '/');
  b = b ? b + 1 : impl;
  size_t n = strlen(b);
  if (n >= 3 && strcmp(b + n - 3, ".so") == 0)
    n -= 3;
  if (n > sizeof(prefix) - 1 && strncmp(b, prefix, sizeof(prefix) - 1) == 0) {
    b += sizeof(prefix) - 1;
    n -= sizeof(prefix) - 1;
  }
  *base = b;
  return n;
}

char *cgrt__cfg_backend_section(const char *impl) {
  const char *base;
  size_t n = cgrt__cfg_backend_base(impl, &base);
  return n ? strndup(base, n) : NULL;
}

int cgrt__cfg_parse_bool(const char *text) {
  static const char *const yes[] = {"true", "on", "yes", "1"};
  static const char *const no[] = {"false", "off", "no", "0"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(text, yes[i]) == 0)
      return 1;
    if (strcasecmp(text, no[i]) == 0)
      return 0;
  }
  return -1;
}
