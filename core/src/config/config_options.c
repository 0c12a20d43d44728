/*
 * config_options.c - the options backends declare in their tables (struct cgrt_option, since host
 * API minor 4), read and checked by the core like its own keys. When the configuration is read,
 * two kinds of table are loaded (never initialized): those of the configured chain (the
 * configured backend and, when it is a decorator, the backend its `wraps` key names, in turn),
 * and that of each backend named like one of the core's sections ([dynamic_cp]: the core reads
 * cp_sizes there, dynamic_cp declares the rest), whether it is configured or not. A backend's
 * section is its table's name, whatever its file is called. Every key they declare is read by
 * its type and range, a repeat refused, a default filled; the chain's "SECTION.KEY" rows give
 * core keys their defaults. A key of a core section that nobody knows, or of a closed section of
 * the chain, is refused with the nearest spelling. `cgrt check` then prints them all; the view's
 * get() and get_int() give their values, and the view fields of config_retired.def keep theirs
 * for older backends. Nothing here names a backend.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_impl.h"

/* The spellings of an ENUM option ("modules step"), split into words (at most 32 kept). */
struct spellings {
  char buf[512];
  const char *word[32];
  size_t n;
};

static void split_values(const char *values, struct spellings *sp) {
  snprintf(sp->buf, sizeof(sp->buf), "%s", values ? values : "");
  sp->n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(sp->buf, " ,", &save); tok && sp->n < 32;
       tok = strtok_r(NULL, " ,", &save))
    sp->word[sp->n++] = tok;
}

/* "a, b, c": the words joined for a message. */
static void join(const char *const *w, size_t n, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", w[i]);
}

/* The range of an option, for messages: "from 1 to 64", "at least 1". */
static void range_text(const struct cgrt_option *o, char *buf, size_t len) {
  if (o->max > 0)
    snprintf(buf, len, "from %" PRId64 " to %" PRId64, o->min, o->max);
  else
    snprintf(buf, len, "at least %" PRId64, o->min);
}

static int in_range(const struct cgrt_option *o, int64_t v) {
  return v >= o->min && (o->max <= 0 || v <= o->max);
}

/*
 * Reads `text` as the value of option o: 0 with *norm (malloc'ed) and *num, CGRT_E_CONFIG with
 * the reason in why (what was expected), CGRT_E_NOMEM. A whole number read but out of o's range
 * is still read (0), with *out_of_range set and the range and the option's meaning in why: it
 * is reported with the core's own ranges, on a file that reads cleanly otherwise.
 */
static int read_option(const struct cgrt_option *o, const char *text, char **norm, int64_t *num,
                       int *out_of_range, char *why, size_t whylen) {
  char buf[1024], range[96];
  *norm = NULL;
  *num = 0;
  *out_of_range = 0;
  range_text(o, range, sizeof(range));
  switch (o->type) {
  case CGRT_OPTION_BOOL: {
    int b = cgrt__cfg_parse_bool(text);
    if (b < 0) {
      snprintf(why, whylen,
               "expected true or false (true/false, on/off, yes/no and 1/0 are accepted)");
      return CGRT_E_CONFIG;
    }
    *num = b;
    snprintf(buf, sizeof(buf), "%s", b ? "true" : "false");
    break;
  }
  case CGRT_OPTION_INT:
  case CGRT_OPTION_SIZE: {
    if (o->type == CGRT_OPTION_INT) {
      if (cgrt__cfg_parse_count(text, INT64_MAX, num, why, whylen) != 0)
        return CGRT_E_CONFIG;
      snprintf(buf, sizeof(buf), "%" PRId64, *num);
    } else {
      uint64_t bytes;
      if (cgrt__cfg_parse_size(text, &bytes, why, whylen) != 0)
        return CGRT_E_CONFIG;
      *num = (int64_t)bytes;
      cgrt__cfg_size_text(bytes, buf, sizeof(buf));
    }
    if (!in_range(o, *num)) {
      *out_of_range = 1;
      snprintf(why, whylen, "must be %s (%s)", range, o->meaning ? o->meaning : o->name);
    }
    break;
  }
  case CGRT_OPTION_ENUM: {
    struct spellings sp;
    split_values(o->values, &sp);
    for (size_t i = 0; i < sp.n; i++)
      if (strcasecmp(text, sp.word[i]) == 0) {
        *num = (int64_t)i;
        snprintf(buf, sizeof(buf), "%s", sp.word[i]);
        goto done;
      }
    char all[256];
    join(sp.word, sp.n, all, sizeof(all));
    const char *near = text[0] ? cgrt__cfg_closest(text, sp.word, sp.n) : NULL;
    if (near)
      snprintf(why, whylen, "expected one of %s; did you mean '%s'?", all, near);
    else
      snprintf(why, whylen, "expected one of %s", all);
    return CGRT_E_CONFIG;
  }
  case CGRT_OPTION_LIST: {
    size_t off = 0;
    const char *p = text;
    buf[0] = '\0';
    while (*p) {
      while (*p == ' ' || *p == ',')
        p++;
      if (!*p)
        break;
      size_t n = strcspn(p, " ,");
      char tok[64];
      int64_t v;
      snprintf(tok, sizeof(tok), "%.*s", (int)(n < 63 ? n : 63), p);
      if (cgrt__cfg_parse_count(tok, INT64_MAX, &v, why, whylen) != 0 || !in_range(o, v)) {
        snprintf(why, whylen, "'%s' is not allowed: expected whole numbers %s (%s)", tok, range,
                 o->meaning ? o->meaning : o->name);
        return CGRT_E_CONFIG;
      }
      off += (size_t)snprintf(buf + off, off < sizeof(buf) ? sizeof(buf) - off : 0, "%s%" PRId64,
                              off ? " " : "", v);
      (*num)++; /* the count of numbers */
      p += n;
    }
    break;
  }
  case CGRT_OPTION_PATH:
    if (!text[0]) {
      snprintf(why, whylen, "expected a file or directory name (%s)",
               o->meaning ? o->meaning : o->name);
      return CGRT_E_CONFIG;
    }
    /* fall through */
  case CGRT_OPTION_STRING:
    return (*norm = strdup(text)) ? 0 : CGRT_E_NOMEM;
  default:
    snprintf(why, whylen, "the backend declares it with a type this cgrt does not know (%d)",
             (int)o->type);
    return CGRT_E_CONFIG;
  }
done:
  return (*norm = strdup(buf)) ? 0 : CGRT_E_NOMEM;
}

/* A "SECTION.KEY" row: the default of a core key, not a key of the backend's section. */
static int is_core_default(const struct cgrt_option *o) {
  return o->name && strchr(o->name, '.') != NULL;
}

const struct cgrt_option *cgrt__cfg_option_find(const struct cgrt_config *cfg, const char *section,
                                                const char *key, struct cgrt_option_value **value) {
  for (size_t s = 0; s < cfg->num_sets; s++) {
    const struct cgrt_option_set *set = &cfg->sets[s];
    if (!set->options || strcmp(set->section, section) != 0)
      continue;
    for (size_t i = 0; i < set->num_options; i++) {
      const struct cgrt_option *o = &set->options[i];
      if (o->name && !is_core_default(o) && strcmp(o->name, key) == 0) {
        if (value)
          *value = &set->values[i];
        return o;
      }
    }
  }
  return NULL;
}

const struct cgrt_option_set *cgrt__cfg_chain_set(const struct cgrt_config *cfg, int place) {
  for (size_t s = 0; place > 0 && s < cfg->num_sets; s++)
    if (cfg->sets[s].configured == place)
      return &cfg->sets[s];
  return NULL;
}

const struct cgrt_option_set *cgrt__cfg_configured_set(const struct cgrt_config *cfg) {
  return cgrt__cfg_chain_set(cfg, 1);
}

/* The set whose options are keys of `section`, or NULL. */
static struct cgrt_option_set *set_of(struct cgrt_config *cfg, const char *section) {
  for (size_t s = 0; s < cfg->num_sets; s++)
    if (cfg->sets[s].options && strcmp(cfg->sets[s].section, section) == 0)
      return &cfg->sets[s];
  return NULL;
}

/* A key of a closed section of the configured chain that its backend does not declare. */
static void unknown_option(struct cfg_parse *st, const struct cgrt_option_set *set,
                           const struct cgrt_config_entry *e) {
  const char *names[64] = {0};
  size_t n = 0;
  for (size_t i = 0; i < set->num_options && n < 64; i++)
    if (set->options[i].name && !is_core_default(&set->options[i]))
      names[n++] = set->options[i].name;
  const char *near = cgrt__cfg_closest(e->key, names, n);
  if (near) {
    CFG_ERROR(st, e->line, "unknown key '%s' in [%s]; did you mean '%s'?", e->key, e->section,
              near);
    return;
  }
  char all[512];
  join(names, n, all, sizeof(all));
  CFG_ERROR(st, e->line, "unknown key '%s' in [%s]; backend '%s' (%s) reads only: %s", e->key,
            e->section, set->lib.vt->name, set->lib.path, n ? all : "(no keys)");
}

/* A key before any section header that is not the core's (config_meaning.c says where those go):
   where a loaded table declares it, else where keys go. */
static void outside_sections(struct cfg_parse *st, const struct cgrt_config_entry *e) {
  const struct cgrt_config *cfg = st->cfg;
  for (size_t s = 0; s < cfg->num_sets; s++) {
    const struct cgrt_option_set *set = &cfg->sets[s];
    if (!cgrt__cfg_section_known(set->section))
      continue; /* the configured backend's own section is named in the generic message */
    for (size_t i = 0; set->options && i < set->num_options; i++)
      if (set->options[i].name && !is_core_default(&set->options[i]) &&
          strcmp(set->options[i].name, e->key) == 0) {
        CFG_ERROR(st, e->line, "key '%s' is outside any section; put it under [%s]", e->key,
                  set->section);
        return;
      }
  }
  CFG_ERROR(st, e->line,
            "key '%s' is outside any section; put keys under a section header such as "
            "[cuda_graph]",
            e->key);
}

/* Loads the table of backend `impl` (a name on the backend path, or a path) into lib; the reason
   into err when it cannot. */
static int load_table(const struct cgrt_config *cfg, const char *impl, struct cgrt_backend_lib *lib,
                      char *err, size_t errlen) {
  char *resolved = NULL, *dirs = NULL;
  int rc = cgrt__config_resolve_impl(cfg, impl, &resolved);
  if (rc == 0)
    rc = cgrt__config_resolve_dirs(cfg, cfg->backend_path, &dirs);
  if (rc == 0)
    rc = cgrt__backend_open(lib, resolved ? resolved : impl, dirs ? dirs : cfg->backend_path, err,
                            errlen);
  else
    snprintf(err, errlen, "out of memory resolving the backend's path");
  free(resolved);
  free(dirs);
  return rc; /* not found or unusable: the runtime's loader says why, with its advice */
}

/* Adds the set of a loaded table (lib->vt), or of one that could not be loaded (lib NULL, `unread`
   why); 0, or -1 (lib closed) if memory ran out. */
static int add_set(struct cfg_parse *st, struct cgrt_backend_lib *lib, const char *section,
                   int configured, const char *unread) {
  struct cgrt_config *cfg = st->cfg;
  struct cgrt_option_set *set = &cfg->sets[cfg->num_sets];
  const struct cgrt_backend_v1 *vt = lib ? lib->vt : NULL;
  memset(set, 0, sizeof(*set));
  set->section = strdup(section);
  if (unread)
    set->unread = strdup(unread);
  /* num_options came with options (one group of one minor): a table that has one has both */
  if (vt && CGRT_BACKEND_HAS(vt, options)) {
    set->num_options = vt->num_options;
    set->values = calloc(set->num_options ? set->num_options : 1, sizeof(*set->values));
  }
  if (!set->section || (unread && !set->unread) ||
      (vt && CGRT_BACKEND_HAS(vt, options) && !set->values)) {
    free(set->section);
    free(set->unread);
    free(set->values);
    if (lib)
      cgrt__backend_close(lib);
    st->nomem = 1;
    return -1;
  }
  if (set->values)
    set->options = vt->options;
  for (size_t i = 0; set->options && i < set->num_options; i++)
    set->closed |= set->options[i].name && !is_core_default(&set->options[i]);
  if (lib)
    set->lib = *lib;
  set->configured = configured;
  cfg->num_sets++;
  return 0;
}

/* The value given for `key` of `section`, its line in *line (0: not given), or NULL. */
static const char *given(const struct cgrt_config *cfg, const char *section, const char *key,
                         int *line) {
  *line = 0;
  for (size_t i = 0; i < cfg->num_entries; i++)
    if (strcmp(cfg->entries[i].section, section) == 0 && strcmp(cfg->entries[i].key, key) == 0) {
      *line = cfg->entries[i].line;
      return cfg->entries[i].value;
    }
  return NULL;
}

/*
 * The configured chain: the configured backend, then, while the last one is a decorator (its
 * table's `wraps`), the backend its key names. Each is read in its own section, its table's name.
 * A backend that cannot be loaded ends the chain: its section is the base name of its file.
 */
static void load_chain(struct cfg_parse *st) {
  struct cgrt_config *cfg = st->cfg;
  const char *impl = cfg->view.impl;
  int line = st->origins[K_IMPL].line;
  char err[1024];
  for (int place = 1; impl && place <= CGRT_CFG_MAX_CHAIN; place++) {
    if (cfg->num_sets >= CGRT_CFG_MAX_OPTION_SETS)
      return;
    struct cgrt_backend_lib lib = {0};
    size_t before = cfg->num_sets;
    struct cgrt_option_set *set = &cfg->sets[before];
    if (load_table(cfg, impl, &lib, err, sizeof(err)) != 0) {
      char *section = cgrt__cfg_backend_section(impl);
      if (section)
        add_set(st, NULL, section, place, err);
      free(section);
    } else {
      const struct cgrt_backend_v1 *vt = lib.vt;
      for (size_t s = 0; s < cfg->num_sets; s++)
        if (cfg->sets[s].configured && cfg->sets[s].lib.vt &&
            strcmp(cfg->sets[s].lib.vt->name, vt->name) == 0) {
          CFG_ERROR(st, line,
                    "backend '%s' (%s) wraps backend '%s' (%s): a decorator cannot wrap itself, "
                    "nor a backend that wraps it; name another backend",
                    cfg->sets[place - 2].lib.vt->name, cfg->sets[place - 2].lib.path, vt->name,
                    lib.path);
          cgrt__backend_close(&lib);
          return;
        }
      add_set(st, &lib, vt->name, place, NULL);
    }
    if (cfg->num_sets == before) /* out of memory, or no section to name */
      return;
    if (!(set->impl = strdup(impl))) {
      st->nomem = 1;
      return;
    }
    set->impl_line = line;
    if (place == 1 && set->lib.vt) { /* its section is its table's name */
      char *own = strdup(set->lib.vt->name);
      if (!own) {
        st->nomem = 1;
        return;
      }
      free(cfg->backend_section);
      cfg->backend_section = own;
    }
    const struct cgrt_backend_v1 *vt = set->lib.vt;
    if (!vt || !CGRT_BACKEND_HAS(vt, wraps) || !vt->wraps[0])
      return;
    /* a decorator: the backend its key names, given or by its declared default */
    impl = given(cfg, vt->name, vt->wraps, &line);
    for (size_t i = 0; !impl && set->options && i < set->num_options; i++)
      if (set->options[i].name && strcmp(set->options[i].name, vt->wraps) == 0)
        impl = set->options[i].def;
    if (!impl || !impl[0]) {
      CFG_ERROR(st, line ? line : set->impl_line,
                "backend '%s' (%s) wraps the backend that [%s] %s names, but %s; add it, e.g. "
                "[%s] %s = local",
                vt->name, set->lib.path, vt->name, vt->wraps,
                impl ? "it is empty" : "it is not given", vt->name, vt->wraps);
      return;
    }
  }
  if (impl)
    CFG_ERROR(st, line,
              "backends wrap each other more than %d deep (the last one named '%s'); wrap fewer",
              CGRT_CFG_MAX_CHAIN, impl);
}

/* The tables: the configured chain's, then one per core section named like a backend. */
void cgrt__cfg_load_tables(struct cfg_parse *st) {
  struct cgrt_config *cfg = st->cfg;
  load_chain(st);
  if (st->nomem)
    return;
  for (int i = 0; i < CFG_NUM_SECTIONS && cfg->num_sets < CGRT_CFG_MAX_OPTION_SETS; i++) {
    const char *section = cgrt__cfg_sections[i];
    if (set_of(cfg, section))
      continue; /* the configured backend is the one named so, and declares options */
    struct cgrt_backend_lib shared = {0};
    char err[1024];
    if (load_table(cfg, section, &shared, err, sizeof(err)) != 0)
      continue; /* no backend of that name: the core's keys alone */
    if (!CGRT_BACKEND_HAS(shared.vt, options) || shared.vt->num_options == 0) {
      cgrt__backend_close(&shared);
      continue;
    }
    if (add_set(st, &shared, section, 0, NULL) != 0)
      return;
  }
}

/* Reads the entry given for option k of set: 0 if taken (normalized), -1 if refused. */
static int read_given(struct cfg_parse *st, struct cgrt_option_set *set, size_t k,
                      struct cgrt_config_entry *e) {
  struct cgrt_option_value *ov = &set->values[k];
  if (ov->line) {
    CFG_ERROR(st, e->line, "key '%s' in [%s] is given twice (first at line %d); keep only one",
              e->key, e->section, ov->line);
    return -1;
  }
  char why[512], *norm = NULL;
  int range = 0;
  int rc = read_option(&set->options[k], e->value, &norm, &ov->num, &range, why, sizeof(why));
  if (rc == CGRT_E_NOMEM) {
    st->nomem = 1;
    return -1;
  }
  if (rc != 0) {
    CFG_ERROR(st, e->line, "[%s] %s = '%s': %s", e->section, e->key, e->value, why);
    ov->num = 0;
    return -1;
  }
  ov->out_of_range = range; /* cgrt__cfg_check_option_ranges says so */
  free(e->value);
  e->value = norm; /* normalized, as the core's own keys are */
  e->used = 1;
  ov->line = e->line;
  if (!(ov->text = strdup(norm)))
    st->nomem = 1;
  return 0;
}

/* The keys given: each a core key, a declared option, or refused. Refused entries are dropped. */
static void read_entries(struct cfg_parse *st) {
  struct cgrt_config *cfg = st->cfg;
  size_t m = 0;
  for (size_t i = 0; i < cfg->num_entries; i++) {
    struct cgrt_config_entry *e = &cfg->entries[i];
    int keep = 1, core = cgrt__cfg_section_known(e->section);
    if (!st->nomem && (!core || cgrt__cfg_key_find(e->section, e->key) < 0)) {
      struct cgrt_option_set *set = set_of(cfg, e->section);
      size_t k = 0;
      while (set && k < set->num_options &&
             !(set->options[k].name && !is_core_default(&set->options[k]) &&
               strcmp(set->options[k].name, e->key) == 0))
        k++;
      if (set && k < set->num_options) {
        keep = read_given(st, set, k, e) == 0;
      } else if (core) {
        cgrt__cfg_unknown_key(st, e->section, e->key, e->line);
        keep = 0;
      } else if (!e->section[0]) {
        outside_sections(st, e);
        keep = 0;
      } else if (set && set->configured && set->closed) {
        unknown_option(st, set, e);
      }
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

/* The defaults: of the options not given, and of core keys the configured chain sets (the
   outer backend's first: a decorator's default wins over its inner backend's). */
static void read_defaults(struct cfg_parse *st) {
  struct cgrt_config *cfg = st->cfg;
  char why[512], warn[512];
  unsigned char set_by_chain[K_COUNT] = {0};
  for (size_t s = 0; s < cfg->num_sets && !st->nomem; s++) {
    struct cgrt_option_set *set = &cfg->sets[s]; /* the chain's sets come first, outer first */
    for (size_t k = 0; set->options && k < set->num_options; k++) {
      struct cgrt_option_value *ov = &set->values[k];
      const struct cgrt_option *o = &set->options[k];
      if (ov->line || !o->def || !o->name)
        continue;
      int rc, range = 0;
      if (is_core_default(o)) {
        if (!set->configured)
          continue; /* only the configured chain's defaults apply */
        char section[64];
        const char *dot = strchr(o->name, '.');
        snprintf(section, sizeof(section), "%.*s", (int)(dot - o->name), o->name);
        int id = cgrt__cfg_key_find(section, dot + 1);
        if (id < 0) {
          snprintf(why, sizeof(why), "[%s] %s is not a key of the core", section, dot + 1);
          rc = CGRT_E_CONFIG;
        } else if (st->origins[id].line || set_by_chain[id]) {
          continue; /* the file gives the key, or an outer backend of the chain its default */
        } else {
          char *norm = NULL;
          rc = cgrt__cfg_set_value(cfg, id, o->def, &norm, why, sizeof(why), warn, sizeof(warn));
          free(norm);
          set_by_chain[id] = 1;
        }
      } else {
        rc = read_option(o, o->def, &ov->text, &ov->num, &range, why, sizeof(why));
        rc = rc == 0 && range ? CGRT_E_CONFIG : rc;
      }
      if (rc == CGRT_E_NOMEM) {
        st->nomem = 1;
        return;
      }
      if (rc != 0 && is_core_default(o))
        CFG_ERROR(st, 0,
                  "backend '%s' (%s) declares the default '%s' for %s: %s; fix the backend's "
                  "option table",
                  set->lib.vt->name, set->lib.path, o->def, o->name, why);
      else if (rc != 0)
        CFG_ERROR(st, 0,
                  "backend '%s' (%s) declares [%s] %s with the default '%s': %s; fix the "
                  "backend's option table",
                  set->lib.vt->name, set->lib.path, set->section, o->name, o->def, why);
    }
  }
}

void cgrt__cfg_bind_options(struct cfg_parse *st) {
  if (!st->nomem)
    read_entries(st);
  if (!st->nomem)
    read_defaults(st);
  cgrt__cfg_fill_retired(st->cfg);
}

void cgrt__cfg_fill_retired(struct cgrt_config *cfg) {
  struct cgrt_config_view *v = &cfg->view;
  struct cgrt_option_value *ov;
#define RETIRED(section, key, field, type, def)                                                    \
  v->field = (type)(cgrt__cfg_option_find(cfg, section, key, &ov) && ov->text ? ov->num : (def));
#include "config_retired.def"
}

int cgrt__config_set_option(struct cgrt_config *cfg, const char *section, const char *key,
                            const char *text, char *why, size_t whylen) {
  struct cgrt_option_value *ov;
  const struct cgrt_option *o =
      section && key ? cgrt__cfg_option_find(cfg, section, key, &ov) : NULL;
  if (!o || !text)
    return CGRT_E_INVAL;
  char *norm = NULL;
  int64_t num;
  int range;
  int rc = read_option(o, text, &norm, &num, &range, why, whylen);
  if (rc == 0 && range) {
    free(norm);
    rc = CGRT_E_CONFIG;
  }
  if (rc != 0)
    return rc;
  free(ov->text);
  ov->text = norm;
  ov->num = num;
  ov->out_of_range = 0;
  cgrt__cfg_fill_retired(cfg);
  return 0;
}

int cgrt__cfg_check_option_ranges(const struct cgrt_config *cfg, struct cgrt_diag *diag) {
  int errors = 0;
  char why[512];
  for (size_t s = 0; s < cfg->num_sets; s++) {
    const struct cgrt_option_set *set = &cfg->sets[s];
    for (size_t i = 0; set->options && i < set->num_options; i++) {
      const struct cgrt_option_value *ov = &set->values[i];
      const struct cgrt_option *o = &set->options[i];
      char range[96];
      if (!ov->out_of_range || !ov->text)
        continue;
      range_text(o, range, sizeof(range));
      snprintf(why, sizeof(why), "must be %s (%s)", range, o->meaning ? o->meaning : o->name);
      const char *src = cfg->source ? cfg->source : "<config>";
      /* as the core's own ranges are said: the value as read, unquoted */
      if (ov->line)
        cgrt__diag_add(diag, CGRT_LOG_ERROR, "%s:%d: [%s] %s = %s: %s", src, ov->line, set->section,
                       o->name, ov->text, why);
      else
        cgrt__diag_add(diag, CGRT_LOG_ERROR, "%s: [%s] %s = %s: %s", src, set->section, o->name,
                       ov->text, why);
      errors++;
    }
  }
  return errors;
}

int cgrt__cfg_view_get_int(const struct cgrt_config_view *view, const char *section,
                           const char *key, int64_t *out) {
  if (!view || !section || !key || !out)
    return CGRT_E_INVAL;
  const struct cgrt_config *cfg = cgrt__cfg_of_view(view);
  struct cgrt_option_value *ov;
  const struct cgrt_option *o = cgrt__cfg_option_find(cfg, section, key, &ov);
  if (o) {
    cgrt_option_type t = o->type;
    if (t != CGRT_OPTION_BOOL && t != CGRT_OPTION_INT && t != CGRT_OPTION_SIZE &&
        t != CGRT_OPTION_ENUM)
      return CGRT_E_INVAL;
    *out = ov->num;
    return 0;
  }
  int id = cgrt__cfg_key_find(section, key);
  if (id < 0)
    return CGRT_E_INVAL;
  const struct cfg_key *c = &cgrt__cfg_keys[id];
  const char *field = (const char *)view + c->offset;
  switch (c->type) {
  case CFG_INT:
  case CFG_DEVICE:
  case CFG_ENUM:
  case CFG_BOOL:
    *out = *(const int *)field;
    return 0;
  case CFG_INT64:
    *out = *(const int64_t *)field;
    return 0;
  case CFG_SIZE:
    *out = (int64_t) * (const uint64_t *)field;
    return 0;
  default:
    return CGRT_E_INVAL;
  }
}
