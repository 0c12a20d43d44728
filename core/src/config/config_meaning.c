/*
 * config_meaning.c - the second pass over the configuration: each `key = value` read by config.c
 * becomes a typed value (config_values.c), a legacy spelling is migrated with a warning giving the
 * new one, and what cannot be taken is reported with "source:line:": unknown sections and keys
 * with the nearest valid spelling, a key given twice, two spellings setting one key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_impl.h"

/* The legacy keys of [cuda_graph], the option each spells and, for an older name of a key
   (config_keys.def's RENAMED rows), that key. */
static const struct legacy_key {
  const char *name;
  int option;
  int key; /* the key renamed, or -1 */
} legacy_keys[] = {
    {"enable_cuda_graph", LEG_ENABLE, -1},
    {"external_cuda_graph", LEG_EXTERNAL, -1},
    {"scope", LEG_SCOPE, -1},
    {"cuda_graph_scope", LEG_SCOPE, -1},
#define KEY(...)
#define RENAMED(id, old) {old, LEG_RENAMED_##id, id},
#include "config_keys.def"
};
#define NUM_LEGACY (sizeof(legacy_keys) / sizeof(legacy_keys[0]))

/* The section a legacy key is read in: its key's for an older name, else [cuda_graph]. */
static const char *legacy_section(const struct legacy_key *lk) {
  return lk->key >= 0 ? cgrt__cfg_keys[lk->key].section : "cuda_graph";
}

/* "key = value", or "key =" for an empty value. */
static char *key_value(const char *key, const char *value) {
  return value[0] ? cgrt__cfg_format("%s = %s", key, value) : cgrt__cfg_format("%s =", key);
}

/* Appends an entry; takes ownership of value. */
static void add_entry(struct cfg_parse *st, const char *section, const char *key, char *value,
                      int line) {
  struct cgrt_config *cfg = st->cfg;
  size_t cap = cfg->num_entries; /* the array is grown one at a time: configs are small */
  struct cgrt_config_entry *e = realloc(cfg->entries, (cap + 1) * sizeof(*e));
  char *s = strdup(section), *k = strdup(key);
  if (!e || !s || !k || !value) {
    if (e)
      cfg->entries = e;
    free(s);
    free(k);
    free(value);
    st->nomem = 1;
    return;
  }
  cfg->entries = e;
  e[cfg->num_entries++] = (struct cgrt_config_entry){s, k, value, line, 0};
}

/*
 * Gives key `id` the value `text` from `line`. `lkey`/`lvalue` name the legacy spelling it came
 * from, or are NULL. A key set twice, by any two spellings, is refused naming both lines.
 * Returns 0 if the value was taken.
 */
static int set_key(struct cfg_parse *st, int id, const char *text, int line, const char *lkey,
                   const char *lvalue) {
  const struct cfg_key *k = &cgrt__cfg_keys[id];
  struct cfg_origin *o = &st->origins[id];
  if (o->line) {
    if (!lkey && !o->means) {
      CFG_ERROR(st, line, "key '%s' in [%s] is given twice (first at line %d); keep only one",
                k->name, k->section, o->line);
      return -1;
    }
    char *now = key_value(k->name, text), *was = key_value(o->key, o->value);
    char *lg = lkey ? key_value(lkey, lvalue) : NULL;
    if (!now || !was || (lkey && !lg))
      st->nomem = 1;
    else if (lkey && o->means)
      CFG_ERROR(
          st, line,
          "'%s' (which means '%s') conflicts with '%s' at line %d (which means '%s'); keep only "
          "one",
          lg, now, was, o->line, o->means);
    else if (lkey)
      CFG_ERROR(st, line, "'%s' (which means '%s') conflicts with '%s' at line %d; keep only one",
                lg, now, was, o->line);
    else
      CFG_ERROR(st, line, "'%s' conflicts with '%s' at line %d (which means '%s'); keep only one",
                now, was, o->line, o->means);
    free(now);
    free(was);
    free(lg);
    return -1;
  }
  o->line = line;
  o->key = lkey ? lkey : k->name;
  o->value = strdup(lkey ? lvalue : text);
  o->means = lkey ? key_value(k->name, text) : NULL;
  if (!o->value || (lkey && !o->means))
    st->nomem = 1;

  char *norm = NULL, why[512], warn[512];
  int rc = cgrt__cfg_set_value(st->cfg, id, text, &norm, why, sizeof(why), warn, sizeof(warn));
  if (rc == CGRT_E_NOMEM) {
    st->nomem = 1;
    return -1;
  }
  if (rc != 0) {
    /* inih ends a value only at " ;": a " #" comment stays in the value */
    const char *hint = strstr(lkey ? lvalue : text, " #")
                           ? " (after a value, only ';' starts a comment, not '#')"
                           : "";
    CFG_ERROR(st, line, "[%s] %s = '%s': %s%s", k->section, lkey ? lkey : k->name,
              lkey ? lvalue : text, why, hint);
    return -1;
  }
  if (warn[0])
    CFG_WARN(st, line, "[%s] %s = %s: %s", k->section, k->name, text, warn);
  add_entry(st, k->section, k->name, norm, line);
  return 0;
}

/* A legacy key: migrated to the new spelling with a warning that gives it. */
static void migrate(struct cfg_parse *st, const struct cfg_pair *pr, const struct legacy_key *lk) {
  struct cfg_origin *o = &st->legacy[lk->option];
  const char *v = pr->value;
  if (o->line) {
    if (strcmp(o->key, lk->name) == 0)
      CFG_ERROR(st, pr->line,
                "key '%s' in [cuda_graph] is given twice (first at line %d); keep only one",
                lk->name, o->line);
    else
      CFG_ERROR(
          st, pr->line,
          "'%s = %s' conflicts with '%s = %s' at line %d (two legacy spellings of one option); "
          "keep only one",
          lk->name, v, o->key, o->value, o->line);
    return;
  }
  o->line = pr->line;
  o->key = lk->name;
  if (!(o->value = strdup(v)))
    st->nomem = 1;

  if (lk->option == LEG_ENABLE || lk->option == LEG_EXTERNAL) {
    int b = cgrt__cfg_parse_bool(v);
    if (b < 0) {
      CFG_ERROR(
          st, pr->line,
          "[cuda_graph] %s = '%s': expected true or false (true/false, on/off, yes/no and 1/0 "
          "are accepted)",
          lk->name, v);
      return;
    }
    const char *impl = !b ? "none" : lk->option == LEG_ENABLE ? "local" : "transformer_engine";
    if (set_key(st, K_IMPL, impl, pr->line, lk->name, v) == 0)
      CFG_WARN(st, pr->line, "'%s = %s' is a legacy spelling; write 'impl = %s' instead", lk->name,
               v, impl);
    return;
  }
  if (lk->key >= 0) { /* an older name of a key, its values unchanged */
    if (set_key(st, lk->key, v, pr->line, lk->name, v) == 0)
      CFG_WARN(st, pr->line, "'%s = %s' is a legacy spelling; write '%s = %s' instead", lk->name, v,
               cgrt__cfg_keys[lk->key].name, v);
    return;
  }
  /* scope: a whole-step graph, or the module kinds to graph */
  if (strcasecmp(v, "full_iteration") == 0) {
    if (set_key(st, K_IMPL, "full_iteration", pr->line, lk->name, v) == 0)
      CFG_WARN(st, pr->line,
               "'%s = %s' is a legacy spelling; write 'impl = full_iteration' instead", lk->name,
               v);
  } else if (strcasecmp(v, "full_iteration_inference") == 0) {
    int a = set_key(st, K_IMPL, "local", pr->line, lk->name, v);
    int b = set_key(st, K_INFERENCE_SCOPE, "block", pr->line, lk->name, v);
    if (a == 0 && b == 0)
      CFG_WARN(st, pr->line,
               "'%s = %s' is a legacy spelling; write 'impl = local' and 'inference_scope = block' "
               "instead",
               lk->name, v);
  } else if (strcasecmp(v, "full") == 0) {
    if (set_key(st, K_MODULES, "", pr->line, lk->name, v) == 0)
      CFG_WARN(st, pr->line,
               "'%s = %s' is a legacy spelling; write 'modules =' (empty: no kind named) instead",
               lk->name, v);
  } else if (!v[0]) {
    CFG_ERROR(
        st, pr->line,
        "[cuda_graph] %s = '': expected full, full_iteration, full_iteration_inference or module "
        "kinds such as 'attn mlp'",
        lk->name);
  } else {
    static const char *const whole[] = {"full", "full_iteration", "full_iteration_inference"};
    for (size_t i = 0; i < 3; i++) {
      const char *at = strstr(v, whole[i]);
      size_t n = strlen(whole[i]);
      if (at && (at == v || at[-1] == ' ' || at[-1] == ',') &&
          (at[n] == '\0' || at[n] == ' ' || at[n] == ',')) {
        CFG_ERROR(st, pr->line, "[cuda_graph] %s = '%s': '%s' must be given alone", lk->name, v,
                  whole[i]);
        return;
      }
    }
    if (set_key(st, K_MODULES, v, pr->line, lk->name, v) == 0 && !st->nomem)
      CFG_WARN(st, pr->line, "'%s = %s' is a legacy spelling; write 'modules = %s' instead",
               lk->name, v, st->cfg->entries[st->cfg->num_entries - 1].value);
  }
}

/* The section that key `name` belongs in, if it is a key of another section than `section`. */
static const char *home_of(const char *name, const char *section) {
  for (int i = 0; i < K_COUNT; i++)
    if (strcmp(cgrt__cfg_keys[i].name, name) == 0 &&
        (!section || strcmp(cgrt__cfg_keys[i].section, section) != 0))
      return cgrt__cfg_keys[i].section;
  for (size_t i = 0; i < NUM_LEGACY; i++) {
    const char *home = legacy_section(&legacy_keys[i]);
    if (strcmp(legacy_keys[i].name, name) == 0 && (!section || strcmp(section, home) != 0))
      return home;
  }
  return NULL;
}

/* The keys a message may name: the core's, then those the loaded tables declare. */
struct known_keys {
  const char *name[K_COUNT + 128];
  const char *section[K_COUNT + 128];
  size_t n;
};

static void known_keys(const struct cgrt_config *cfg, struct known_keys *kk) {
  kk->n = 0;
  for (int i = 0; i < K_COUNT; i++) {
    kk->name[kk->n] = cgrt__cfg_keys[i].name;
    kk->section[kk->n++] = cgrt__cfg_keys[i].section;
  }
  for (size_t s = 0; s < cfg->num_sets; s++) {
    const struct cgrt_option_set *set = &cfg->sets[s];
    for (size_t i = 0; set->options && i < set->num_options; i++) {
      const char *name = set->options[i].name;
      /* a "SECTION.KEY" row is a default, not a key; a configured backend's own section keeps
         its own messages (config_options.c) */
      if (!name || strchr(name, '.') || !cgrt__cfg_section_known(set->section) ||
          kk->n == sizeof(kk->name) / sizeof(kk->name[0]))
        continue;
      kk->name[kk->n] = name;
      kk->section[kk->n++] = set->section;
    }
  }
}

void cgrt__cfg_unknown_key(struct cfg_parse *st, const char *section, const char *key, int line) {
  struct known_keys kk;
  known_keys(st->cfg, &kk);
  for (size_t i = 0; i < kk.n; i++)
    if (strcmp(kk.name[i], key) == 0 && strcmp(kk.section[i], section) != 0) {
      CFG_ERROR(st, line, "key '%s' belongs in [%s], not [%s]", key, kk.section[i], section);
      return;
    }
  const char *own[K_COUNT + 128];
  size_t n = 0;
  for (size_t i = 0; i < kk.n; i++)
    if (strcmp(kk.section[i], section) == 0)
      own[n++] = kk.name[i];
  const char *near = cgrt__cfg_closest(key, own, n);
  if (near) {
    CFG_ERROR(st, line, "unknown key '%s' in [%s]; did you mean '%s'?", key, section, near);
    return;
  }
  near = cgrt__cfg_closest(key, kk.name, kk.n);
  if (near) {
    size_t at = 0;
    while (kk.name[at] != near)
      at++;
    CFG_ERROR(st, line, "unknown key '%s' in [%s]; did you mean '%s' in [%s]?", key, section, near,
              kk.section[at]);
    return;
  }
  char list[512];
  size_t off = 0;
  list[0] = '\0';
  for (size_t i = 0; i < n && off < sizeof(list); i++)
    off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", i ? ", " : "", own[i]);
  CFG_ERROR(st, line, "unknown key '%s' in [%s]; the keys of [%s] are: %s", key, section, section,
            list);
}

void cgrt__cfg_interpret(struct cfg_parse *st, const struct cfg_pair *pr) {
  if (!pr->section) {
    const char *home = home_of(pr->key, NULL);
    if (home)
      CFG_ERROR(st, pr->line, "key '%s' is outside any section; put it under [%s]", pr->key, home);
    else /* perhaps a key a backend declares: said once the tables are loaded */
      add_entry(st, "", pr->key, strdup(pr->value), pr->line);
    return;
  }
  if (!cgrt__cfg_section_known(pr->section)) {
    /* decided once impl is known: the backend's own section, or unknown */
    add_entry(st, pr->section, pr->key, strdup(pr->value), pr->line);
    return;
  }
  int id = cgrt__cfg_key_find(pr->section, pr->key);
  if (id >= 0) {
    set_key(st, id, pr->value, pr->line, NULL, NULL);
    return;
  }
  for (size_t i = 0; i < NUM_LEGACY; i++)
    if (strcmp(pr->key, legacy_keys[i].name) == 0 &&
        strcmp(pr->section, legacy_section(&legacy_keys[i])) == 0) {
      migrate(st, pr, &legacy_keys[i]);
      return;
    }
  const char *home = home_of(pr->key, pr->section);
  if (home) {
    CFG_ERROR(st, pr->line, "key '%s' belongs in [%s], not [%s]", pr->key, home, pr->section);
    return;
  }
  /* Perhaps a key a backend declares for this section: decided once the tables are loaded
     (config_options.c), which needs impl and backend_path, given anywhere in the file. */
  add_entry(st, pr->section, pr->key, strdup(pr->value), pr->line);
}

int cgrt__cfg_section_lent(const struct cgrt_config *cfg, const char *name) {
  if (cfg->backend_section && strcmp(cfg->backend_section, name) == 0)
    return 1;
  for (size_t s = 0; s < cfg->num_sets; s++)
    if (cfg->sets[s].configured && strcmp(cfg->sets[s].section, name) == 0)
      return 1;
  return 0;
}

/*
 * A section named after the file of a backend of the chain whose table has another name: that
 * backend reads [its table's name], whatever its file is called. 1 if said.
 */
static int file_named_section(struct cfg_parse *st, const char *name, int line) {
  const struct cgrt_config *cfg = st->cfg;
  for (size_t s = 0; s < cfg->num_sets; s++) {
    const struct cgrt_option_set *set = &cfg->sets[s];
    if (!set->configured || !set->lib.vt || !set->impl)
      continue;
    const char *base;
    size_t n = cgrt__cfg_backend_base(set->impl, &base);
    if (n != strlen(name) || strncmp(base, name, n) != 0 || strcmp(name, set->section) == 0)
      continue;
    CFG_ERROR(st, line,
              "unknown section [%s]: backend '%s' (%s) reads its keys in [%s], the name in its "
              "table, whatever its file is called; rename the section [%s]",
              name, set->lib.vt->name, set->lib.path, set->section, set->section);
    return 1;
  }
  return 0;
}

void cgrt__cfg_settle_sections(struct cfg_parse *st) {
  struct cgrt_config *cfg = st->cfg;
  for (size_t i = 0; i < st->num_sections; i++) {
    const char *name = st->sections[i].name;
    if (cgrt__cfg_section_known(name) || cgrt__cfg_section_lent(cfg, name))
      continue;
    int seen = 0;
    for (size_t j = 0; j < i; j++)
      seen |= strcmp(st->sections[j].name, name) == 0;
    if (seen || file_named_section(st, name, st->sections[i].line))
      continue;
    /* the core's sections, then those of the configured chain (its backends' table names) */
    const char *cand[CFG_NUM_SECTIONS + CGRT_CFG_MAX_OPTION_SETS + 1];
    size_t n = 0;
    for (int j = 0; j < CFG_NUM_SECTIONS; j++)
      cand[n++] = cgrt__cfg_sections[j];
    char lent[256];
    size_t off = 0;
    lent[0] = '\0';
    for (size_t s = 0; s < cfg->num_sets; s++)
      if (cfg->sets[s].configured && !cgrt__cfg_section_known(cfg->sets[s].section)) {
        cand[n++] = cfg->sets[s].section;
        if (off < sizeof(lent))
          off += (size_t)snprintf(lent + off, sizeof(lent) - off, "%s[%s]", off ? ", " : "",
                                  cfg->sets[s].section);
      }
    if (!off && cfg->backend_section) {
      cand[n++] = cfg->backend_section;
      snprintf(lent, sizeof(lent), "[%s]", cfg->backend_section);
    }
    const char *near = NULL;
    size_t best = 3;
    for (size_t j = 0; j < n; j++) {
      size_t d = cgrt__cfg_distance_nocase(name, cand[j]);
      if (d < best) {
        best = d;
        near = cand[j];
      }
    }
    if (near)
      CFG_ERROR(st, st->sections[i].line, "unknown section [%s]; did you mean [%s]?", name, near);
    else
      CFG_ERROR(st, st->sections[i].line,
                "unknown section [%s]; the sections are [cuda_graph], [inference], [dynamic_cp], "
                "[runtime], [host] and the configured backend's own section (%s, read only by "
                "impl = %s)",
                name, lent[0] ? lent : "[none]", cfg->view.impl);
  }
  /* drop the entries of refused sections; repeats in the backend's section are refused */
  size_t m = 0;
  for (size_t i = 0; i < cfg->num_entries; i++) {
    struct cgrt_config_entry *e = &cfg->entries[i];
    /* "": keys before any section header, said by config_options.c */
    int keep = cgrt__cfg_section_known(e->section) || cgrt__cfg_section_lent(cfg, e->section) ||
               !e->section[0];
    if (keep && e->section[0] && !cgrt__cfg_section_known(e->section))
      for (size_t j = 0; j < m; j++)
        if (strcmp(cfg->entries[j].section, e->section) == 0 &&
            strcmp(cfg->entries[j].key, e->key) == 0) {
          CFG_ERROR(st, e->line,
                    "key '%s' in [%s] is given twice (first at line %d); keep only one", e->key,
                    e->section, cfg->entries[j].line);
          keep = 0;
          break;
        }
    if (keep) {
      cfg->entries[m++] = *e;
    } else {
      free(e->section);
      free(e->key);
      free(e->value);
    }
  }
  cfg->num_entries = m;
}
