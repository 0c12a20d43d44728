/*
 * config_impl.h - what the parts of the configuration reader share: config.c reads the INI
 * (first pass) and holds the entry points, config_meaning.c interprets each pair (second pass),
 * config_keys.c knows every key, config_values.c reads and writes values, config_rules.c checks
 * the rules between keys and prints. Internal to those files; the rest of the core uses config.h.
 */
#ifndef CGRT_CONFIG_IMPL_H
#define CGRT_CONFIG_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"

/* How a key's value is read. */
enum cfg_type {
  CFG_IMPL,     /* backend name or path to a .so */
  CFG_PATH,     /* free text; empty means not given */
  CFG_MODULES,  /* module kinds, space or comma separated, no repeats */
  CFG_INT,      /* int >= 0 */
  CFG_INT64,    /* int64_t >= 0 */
  CFG_ENUM,     /* one of `names` (case-insensitive), stored as its index */
  CFG_BOOL,     /* true/false/on/off/yes/no/1/0, written as names[0] or names[1] */
  CFG_SIZES64,  /* positive int64 list, sorted, repeats dropped with a warning */
  CFG_CP_SIZES, /* positive int list, no repeats, sorted */
  CFG_PERCENT,  /* a percentage from 0 to 100 ("5" or "5%"), stored as a fraction (double) */
  CFG_SIZE,     /* `off` (0) or a whole number of KiB, MiB or GiB, stored as bytes (uint64_t) */
  CFG_VERIFY,   /* off | first | every:N, into view.verify and view.verify_every */
  CFG_DEVICE,   /* `current` (stored as -1) or a device index >= 0, an int */
};

/* The known keys, one row each in config_keys.def, in DESIGN.md order (the print order). */
enum cfg_key_id {
#define KEY(id, ...) id,
#include "config_keys.def"
  K_COUNT
};

struct cfg_key {
  const char *section;
  const char *name;
  enum cfg_type type;
  size_t offset;            /* of the typed field in struct cgrt_config_view (not CFG_IMPL/PATH) */
  const char *const *names; /* CFG_ENUM: spelling of each value; CFG_BOOL: {false, true} */
  size_t num_names;
  const char *def; /* the default, as written in a file */
  int64_t min;     /* CFG_INT, CFG_INT64: the smallest value allowed */
  const char *why; /* what the value is, for range messages */
};

/* Indexed by enum cfg_key_id. */
extern const struct cfg_key cgrt__cfg_keys[K_COUNT];

/* The sections the core reads, in DESIGN.md order. */
#define CFG_NUM_SECTIONS 5
extern const char *const cgrt__cfg_sections[CFG_NUM_SECTIONS];

/*
 * The names of the built-in backends, as the build names them (CGRT_BUILTIN_BACKENDS, from the
 * top-level CMakeLists.txt, the list backends/CMakeLists.txt builds), in that order. Only for
 * what a message about `impl` suggests; no rule depends on a backend's name.
 */
struct cfg_builtins {
  char buf[256];
  const char *name[16];
  size_t n;
};
void cgrt__cfg_builtins(struct cfg_builtins *b);

/* Id of key `name` in `section` (exact), or -1. */
int cgrt__cfg_key_find(const char *section, const char *name);
/* 1 if `name` is one of the sections the core reads. */
int cgrt__cfg_section_known(const char *name);

/*
 * Reads `text` as the value of key `id` into cfg (the view's typed field and the storage behind
 * it). On success returns 0 and sets *norm to the normalized text (malloc'ed), and may write a
 * warning (without location) into warn. On a bad value returns CGRT_E_CONFIG with the reason
 * ("expected ...") in why; cfg is unchanged. CGRT_E_NOMEM if memory ran out.
 */
int cgrt__cfg_set_value(struct cgrt_config *cfg, int id, const char *text, char **norm, char *why,
                        size_t whylen, char *warn, size_t warnlen);

/* Reads a boolean spelling: 1 or 0, or -1 if `text` is not one (config_keys.c). */
int cgrt__cfg_parse_bool(const char *text);

/* The value key `id` has in cfg (defaults included) as normalized INI text, malloc'ed; NULL if
   memory ran out. */
char *cgrt__cfg_value_text(const struct cgrt_config *cfg, int id);

/* Line where key `id` was given in cfg->entries, or 0 if it holds its default. */
int cgrt__cfg_key_line(const struct cgrt_config *cfg, int id);

/* The base name of a backend given by `impl` (no directory, no .so, no libcgrt-backend- prefix):
   its start in *base and its length; 0 if it has none. */
size_t cgrt__cfg_backend_base(const char *impl, const char **base);

/* Name of the section a backend given by `impl` may own (its base name), malloc'ed, or NULL. */
char *cgrt__cfg_backend_section(const char *impl);

/* Edit distance ignoring case, a swap of neighbours counting one, for suggestions. */
size_t cgrt__cfg_distance_nocase(const char *a, const char *b);

/* The closest of names[0..n) to word if close enough to be a likely typo, else NULL. */
const char *cgrt__cfg_closest(const char *word, const char *const *names, size_t n);

/* One `key = value` as inih gave it, continuation lines joined. */
struct cfg_pair {
  char *section; /* NULL before the first section header */
  char *key;
  char *value;
  int line;
};

/* A section header, for "unknown section" messages. */
struct cfg_section_seen {
  char *name;
  int line;
};

/* A message waiting to be sorted into line order. */
struct cfg_msg {
  int line;
  size_t seq; /* order of reporting, kept among messages of one line */
  int syntax; /* a syntax error: inih's own report of that line is then redundant */
  cgrt_log_level level;
  char *text;
};

/* Where a key got its value, for repeat and conflict messages. */
struct cfg_origin {
  int line;        /* 0: not given */
  const char *key; /* the spelling used: the key itself or a legacy key (static strings) */
  char *value;     /* the value as written */
  char *means;     /* for a legacy spelling, what it stands for ("impl = local"); else NULL */
};

/*
 * Legacy spellings in [cuda_graph]; `scope` and `cuda_graph_scope` are one option. Then one per
 * RENAMED row of config_keys.def (LEG_RENAMED_<key id>).
 */
enum {
  LEG_ENABLE,
  LEG_EXTERNAL,
  LEG_SCOPE,
#define KEY(...)
#define RENAMED(id, old) LEG_RENAMED_##id,
#include "config_keys.def"
  LEG_COUNT
};

/* The state of one cgrt__config_parse(). */
struct cfg_parse {
  struct cgrt_config *cfg;
  const char *source;
  /* the reader's position */
  const char *text;
  size_t len, pos;
  int lineno;
  int cont;      /* the line just read continues the value of pair `prev` */
  long prev;     /* the pair an indented line would continue (inih's prev_name), -1: none */
  char *section; /* the section of the lines being read, NULL before the first header */
  /* what the first pass collected */
  struct cfg_pair *pairs;
  size_t num_pairs, cap_pairs;
  struct cfg_section_seen *sections;
  size_t num_sections, cap_sections;
  /* messages, sorted by line before they go to the caller's diag */
  struct cfg_msg *msgs;
  size_t num_msgs, cap_msgs;
  int errors;
  int nomem;
  struct cfg_origin origins[K_COUNT];
  struct cfg_origin legacy[LEG_COUNT];
};

/* Grows *arr (of *cap elements of size bytes) to hold count + 1; sets st->nomem on failure. */
int cgrt__cfg_grow(struct cfg_parse *st, void **arr, size_t *cap, size_t count, size_t size);

/* Records "source:line: text" (or "source: text" for line 0) for the caller's diag. */
void cgrt__cfg_report(struct cfg_parse *st, int line, int syntax, cgrt_log_level level,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define CFG_ERROR(st, line, ...) cgrt__cfg_report(st, line, 0, CGRT_LOG_ERROR, __VA_ARGS__)
#define CFG_WARN(st, line, ...)  cgrt__cfg_report(st, line, 0, CGRT_LOG_WARN, __VA_ARGS__)

/* A malloc'ed formatted string, or NULL if memory ran out (config_values.c). */
char *cgrt__cfg_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *cgrt__cfg_vformat(const char *fmt, va_list ap);

/* Where inih stops reading s: at one of `chars` (NULL: none), or at an inline comment, a ';'
   that follows whitespace. */
const char *cgrt__cfg_find_comment(const char *s, const char *chars);

/* The second pass: gives the pair its meaning (typed value, legacy migration, messages). */
void cgrt__cfg_interpret(struct cfg_parse *st, const struct cfg_pair *pr);
/* After every pair: keeps the sections the core does not know only if the backend owns them. */
void cgrt__cfg_settle_sections(struct cfg_parse *st);

/*
 * After every pair, before the sections are settled (config_options.c): loads the tables (no
 * init) of the configured chain (the configured backend, then the backend each decorator of it
 * wraps) and of each backend named like a core section. The configured backend's section
 * (cfg->backend_section) becomes its table's name. A backend that cannot be loaded now is left
 * to the runtime's loader to report: its section is then its file's base name.
 */
void cgrt__cfg_load_tables(struct cfg_parse *st);

/*
 * Last (config_options.c): reads every key the loaded tables declare as the core's own keys are
 * read: values by type, ranges, repeats; defaults filled, the configured chain's defaults of core
 * keys ("SECTION.KEY" rows, the outer backend's first) applied. Keys of the core's sections that
 * neither the core nor a table knows, and keys of a closed section of the chain its backend does
 * not declare, are refused with the nearest spelling.
 */
void cgrt__cfg_bind_options(struct cfg_parse *st);

/* 1 if `name` is the section of a backend of the configured chain, loaded or not
   (config_meaning.c). */
int cgrt__cfg_section_lent(const struct cgrt_config *cfg, const char *name);

/* The set at place `place` of the configured chain (1: the configured backend), or NULL. */
const struct cgrt_option_set *cgrt__cfg_chain_set(const struct cgrt_config *cfg, int place);

/* The option `key` of `section` a loaded table declares (its value in *value when not NULL), or
   NULL. */
const struct cgrt_option *cgrt__cfg_option_find(const struct cgrt_config *cfg, const char *section,
                                                const char *key, struct cgrt_option_value **value);

/* The configured backend's set (place 1 of the chain), or NULL. */
const struct cgrt_option_set *cgrt__cfg_configured_set(const struct cgrt_config *cfg);

/* Fills the view fields of config_retired.def from the options that declare them, or defaults. */
void cgrt__cfg_fill_retired(struct cgrt_config *cfg);

/*
 * A key of a section the core reads that is neither the core's nor declared by a loaded table:
 * refused with the section it belongs in, or the nearest spelling among the section's keys (the
 * core's and the declared ones), or the list of them (config_meaning.c).
 */
void cgrt__cfg_unknown_key(struct cfg_parse *st, const char *section, const char *key, int line);

/* Reports each declared option given out of its range ("must be at least 1 (...)"), as the core's
   own ranges are checked; the number of errors. */
int cgrt__cfg_check_option_ranges(const struct cgrt_config *cfg, struct cgrt_diag *diag);

/* The view's describe() (config_rules.c). */
int cgrt__cfg_view_describe(const struct cgrt_config_view *view, const char *section,
                            const char *key, char *buf, size_t len);

/* The view's get_int() (config_options.c). */
int cgrt__cfg_view_get_int(const struct cgrt_config_view *view, const char *section,
                           const char *key, int64_t *out);

/* The configuration a view is embedded in. */
static inline struct cgrt_config *cgrt__cfg_of_view(const struct cgrt_config_view *view) {
  /* the view is embedded in its configuration; marking an entry read changes only bookkeeping */
  return (struct cgrt_config *)((char *)(uintptr_t)view - offsetof(struct cgrt_config, view));
}

/* Readers shared with config_options.c (config_values.c). A whole number in [0, max]; a size
   ("512 MiB", "off"); a size as its normalized text. 0, or -1 with the reason in why. */
int cgrt__cfg_parse_count(const char *text, int64_t max, int64_t *out, char *why, size_t whylen);
int cgrt__cfg_parse_size(const char *text, uint64_t *out, char *why, size_t whylen);
void cgrt__cfg_size_text(uint64_t v, char *buf, size_t len);

/* Writes `key = value`, long values continued on indented lines (config_rules.c). */
void cgrt__cfg_print_pair(FILE *out, const char *key, const char *value);

#endif
