/*
 * config_options.c - the options a backend declares in its table (struct cgrt_option, since host
 * API minor 4), read and checked by the core like its own keys. When the configuration is read,
 * the configured backend's library is loaded (not initialized) and, if its table declares
 * options, every key of its section [NAME] is read against them: a key it does not declare is
 * refused with the nearest declared spelling, a value by its type and range, and each option
 * gets its default. `cgrt check` then prints them all; the view's get() and get_int() give their
 * values. A backend declaring nothing keeps the open section of before: whatever init() reads
 * with get(). Nothing here names a backend.
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
  for (char *tok = strtok(sp->buf, " ,"); tok && sp->n < 32; tok = strtok(NULL, " ,"))
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
 * the reason in why (what was expected, or the range and the option's meaning), CGRT_E_NOMEM.
 */
static int read_option(const struct cgrt_option *o, const char *text, char **norm, int64_t *num,
                       char *why, size_t whylen) {
  char buf[1024], range[96];
  *norm = NULL;
  *num = 0;
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
      snprintf(why, whylen, "must be %s (%s)", range, o->meaning ? o->meaning : o->name);
      return CGRT_E_CONFIG;
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

int cgrt__cfg_option_find(const struct cgrt_config *cfg, const char *section, const char *key) {
  if (!cfg->options || !cfg->backend_section || strcmp(section, cfg->backend_section) != 0)
    return -1;
  for (size_t i = 0; i < cfg->num_options; i++)
    if (cfg->options[i].name && strcmp(cfg->options[i].name, key) == 0)
      return (int)i;
  return -1;
}

/* A key of the backend's section it does not declare: the nearest declared spelling, or all. */
static void unknown_option(struct cfg_parse *st, const struct cgrt_config_entry *e) {
  const struct cgrt_config *cfg = st->cfg;
  const char *names[64];
  size_t n = 0;
  for (size_t i = 0; i < cfg->num_options && n < 64; i++)
    if (cfg->options[i].name)
      names[n++] = cfg->options[i].name;
  const char *near = cgrt__cfg_closest(e->key, names, n);
  if (near) {
    CFG_ERROR(st, e->line, "unknown key '%s' in [%s]; did you mean '%s'?", e->key, e->section,
              near);
    return;
  }
  char all[512];
  join(names, n, all, sizeof(all));
  CFG_ERROR(st, e->line, "unknown key '%s' in [%s]; backend '%s' reads only: %s", e->key,
            e->section, e->section, n ? all : "(no keys)");
}

/* Loads the configured backend's table; 0 if it declares options (lib then holds it). */
static int load_table(const struct cgrt_config *cfg, struct cgrt_backend_lib *lib) {
  char *impl = NULL, *dirs = NULL, err[1024];
  int rc = cgrt__config_resolve_impl(cfg, cfg->view.impl, &impl);
  if (rc == 0)
    rc = cgrt__config_resolve_dirs(cfg, cfg->backend_path, &dirs);
  if (rc == 0)
    rc = cgrt__backend_open(lib, impl ? impl : cfg->view.impl, dirs ? dirs : cfg->backend_path, err,
                            sizeof(err));
  free(impl);
  free(dirs);
  if (rc != 0)
    return rc; /* not found or unusable: the runtime's loader says why, with its advice */
  if (!CGRT_BACKEND_HAS(lib->vt, options)) {
    cgrt__backend_close(lib);
    return CGRT_E_UNSUPPORTED;
  }
  return 0;
}

void cgrt__cfg_bind_options(struct cfg_parse *st) {
  struct cgrt_config *cfg = st->cfg;
  const char *own = cfg->backend_section;
  if (!own || cgrt__cfg_section_known(own) || load_table(cfg, &cfg->options_lib) != 0)
    return;
  const struct cgrt_backend_v1 *vt = cfg->options_lib.vt;
  /* num_options came with options (one group of one minor): a table that has one has both */
  size_t n = vt->num_options;
  cfg->option_values = calloc(n ? n : 1, sizeof(*cfg->option_values));
  if (!cfg->option_values) {
    st->nomem = 1;
    return;
  }
  cfg->options = vt->options;
  cfg->num_options = n;
  char why[512];
  /* The keys given: each a declared option, read by its type. */
  for (size_t i = 0; i < cfg->num_entries; i++) {
    struct cgrt_config_entry *e = &cfg->entries[i];
    if (strcmp(e->section, own) != 0)
      continue;
    int k = cgrt__cfg_option_find(cfg, own, e->key);
    if (k < 0) {
      unknown_option(st, e);
      continue;
    }
    struct cgrt_option_value *ov = &cfg->option_values[k];
    char *norm = NULL;
    int rc = read_option(&cfg->options[k], e->value, &norm, &ov->num, why, sizeof(why));
    if (rc == CGRT_E_NOMEM) {
      st->nomem = 1;
      return;
    }
    if (rc != 0) {
      CFG_ERROR(st, e->line, "[%s] %s = '%s': %s", own, e->key, e->value, why);
      continue;
    }
    free(e->value);
    e->value = norm; /* normalized, as the core's own keys are */
    e->used = 1;
    ov->line = e->line;
    if (!(ov->text = strdup(norm))) {
      st->nomem = 1;
      return;
    }
  }
  /* The others: their defaults, read the same way (a bad one is the backend's bug, said so). */
  for (size_t k = 0; k < n; k++) {
    struct cgrt_option_value *ov = &cfg->option_values[k];
    const struct cgrt_option *o = &cfg->options[k];
    if (ov->line || !o->def)
      continue;
    int rc = read_option(o, o->def, &ov->text, &ov->num, why, sizeof(why));
    if (rc == CGRT_E_NOMEM) {
      st->nomem = 1;
      return;
    }
    if (rc != 0)
      CFG_ERROR(st, 0,
                "backend '%s' (%s) declares [%s] %s with the default '%s': %s; fix the "
                "backend's option table",
                vt->name, cfg->options_lib.path, own, o->name, o->def, why);
  }
}

int cgrt__cfg_view_get_int(const struct cgrt_config_view *view, const char *section,
                           const char *key, int64_t *out) {
  if (!view || !section || !key || !out)
    return CGRT_E_INVAL;
  const struct cgrt_config *cfg = cgrt__cfg_of_view(view);
  int k = cgrt__cfg_option_find(cfg, section, key);
  if (k >= 0) {
    cgrt_option_type t = cfg->options[k].type;
    if (t != CGRT_OPTION_BOOL && t != CGRT_OPTION_INT && t != CGRT_OPTION_SIZE &&
        t != CGRT_OPTION_ENUM)
      return CGRT_E_INVAL;
    *out = cfg->option_values[k].num;
    return 0;
  }
  int id = cgrt__cfg_key_find(section, key);
  if (id < 0)
    return CGRT_E_INVAL;
  const struct cfg_key *c = &cgrt__cfg_keys[id];
  const char *field = (const char *)view + c->offset;
  switch (c->type) {
  case CFG_INT:
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
