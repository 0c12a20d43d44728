/*
 * config.h - reading, migrating and validating the INI configuration (DESIGN.md section 6).
 * Internal to libcgrt; the tests and the config fuzzer link the core statically (cgrt_core) and use
 * it directly.
 */
#ifndef CGRT_CONFIG_H
#define CGRT_CONFIG_H

#include <stdio.h>

#include "cgrt/backend.h"
#include "diag.h"
#include "base/loader.h"

/* One key as given (after legacy migration), kept for raw access, printing and messages. */
struct cgrt_config_entry {
  char *section; /* "cuda_graph", ... or the backend's own section */
  char *key;     /* the new spelling, after migration */
  char *value;   /* normalized text (whitespace collapsed, lists space-separated) */
  int line;      /* line in the source where it was given (the legacy line if migrated) */
  int used;      /* set by the view's get(): keys of a backend's own section never read are
                    refused after the backend's init() */
};

/* The value in force of one option a loaded backend table declares (struct cgrt_option). */
struct cgrt_option_value {
  char *text;       /* normalized text: as given, or the default; NULL: neither */
  int64_t num;      /* BOOL, INT, SIZE: the number; ENUM: the index of the spelling */
  int line;         /* where it was given; 0: the default */
  int out_of_range; /* read, but outside the option's range: reported by cgrt__config_check */
};

/*
 * A backend table whose options the configuration reads (config_options.c): the configured
 * backend's and those of the backends it wraps (a decorator's inner backend, named by the key its
 * table's `wraps` names), and that of each backend named like one of the core's sections
 * ([dynamic_cp]), configured or not. Its library stays open while the configuration lives, so the
 * table can be read; it is never initialized for this.
 */
struct cgrt_option_set {
  struct cgrt_backend_lib lib; /* empty when the table could not be loaded (see unread) */
  char *section;               /* the section its options are keys of: its table's name */
  int configured; /* its place in the configured chain: 1 the configured backend, 2 the one it
                     wraps, ...; 0 a table read only for a core section it shares */
  int closed;     /* it declares keys of its section: no other key may be given there */
  const struct cgrt_option *options; /* NULL: it declares none (its own section is open) */
  struct cgrt_option_value *values;  /* one per option */
  size_t num_options;
  char *impl;    /* in the chain: how it was named (impl, or the decorator's key) as written */
  int impl_line; /* where that was given; 0: a default */
  char *unread;  /* in the chain, the table could not be loaded: why (section is then the base
                    name of its file; the runtime's loader reports it), else NULL */
  int check_ran; /* its check() ran on this configuration (cgrt__config_check) */
};

/*
 * The largest [runtime] max_queued_steps (config_rules.c refuses more): the runtime keeps one event
 * per step it lets the host queue ahead of the device (runtime/step_queue.c).
 */
#define CGRT_CFG_MAX_QUEUED_STEPS 64

/* At most the configured chain and one set for each of the core's sections. */
#define CGRT_CFG_MAX_OPTION_SETS 8
/* The longest chain of decorators read: the configured backend and what it wraps, in turn. */
#define CGRT_CFG_MAX_CHAIN 3

/*
 * A parsed configuration. `view` holds the typed values (defaults where a key was absent) and is
 * what backends see; its arrays point into this struct. view.get() finds the configuration from
 * the view's address: hand out &cfg->view, never a copy of it. Free with cgrt__config_free().
 */
struct cgrt_config {
  struct cgrt_config_view view;
  char *source;          /* file name or "<string>", for messages */
  char *dir;             /* the folder of the file it was read from (absolute where it could be
                            resolved): its relative paths resolve from there; NULL when given as
                            a string (they resolve from the working directory) */
  char *impl;            /* storage of view.impl */
  char *backend_path;    /* [cuda_graph] backend_path, or NULL */
  char *backend_section; /* the section the configured backend owns: its table's name, or impl's
                            base name while its table could not be loaded; NULL: neither */
  int64_t *bucket_list;
  int *cp_sizes;
  struct cgrt_config_entry *entries; /* every key given, in source order */
  size_t num_entries;
  /* The backend tables whose options this configuration reads (config_options.c). */
  struct cgrt_option_set sets[CGRT_CFG_MAX_OPTION_SETS];
  size_t num_sets;
};

/* Fills cfg with every default (impl = none): each key's row in config_keys.def. cfg must be
   zeroed or freed before; free it after. 0, or CGRT_E_NOMEM (cfg then holds some defaults). */
int cgrt__config_defaults(struct cgrt_config *cfg);

/*
 * Parses INI text named `source` (for messages) into cfg: unknown sections and keys, duplicate
 * keys, bad values, legacy spellings (migrated with a warning giving the new spelling) and
 * conflicts between old and new spellings are reported into diag with "source:line: ...". Then,
 * if all of that read cleanly, checks every rule of DESIGN.md section 6 (cgrt__config_check; not
 * on a file with errors, whose defaults would give misleading messages). Returns 0 if this call
 * reported no error, CGRT_E_CONFIG otherwise (cfg then holds what could be read; free it either
 * way), CGRT_E_NOMEM on allocation failure, CGRT_E_INVAL if text is NULL.
 */
int cgrt__config_parse(struct cgrt_config *cfg, const char *text, const char *source,
                       struct cgrt_diag *diag);

/* Reads the file at path and parses it as above. CGRT_E_IO (reported into diag) if unreadable. */
int cgrt__config_load(struct cgrt_config *cfg, const char *path, struct cgrt_diag *diag);

/*
 * Paths in a configuration file resolve from the file's folder (config_paths.c). Sets cfg->dir
 * to the folder of `file` (cgrt__config_load does). 0 or CGRT_E_NOMEM.
 */
int cgrt__config_set_dir(struct cgrt_config *cfg, const char *file);

/*
 * impl resolved from cfg->dir when it is a relative path (a '/' in it, or a name ending in .so)
 * and cfg came from a file: *out (malloc'ed); else *out is NULL and impl stands as written
 * (absolute, a backend name, or a configuration given as a string). 0 or CGRT_E_NOMEM.
 */
int cgrt__config_resolve_impl(const struct cgrt_config *cfg, const char *impl, char **out);

/* A colon-separated list of directories (backend_path) with its relative entries resolved from
   cfg->dir: *out (malloc'ed), or NULL when nothing changes. 0 or CGRT_E_NOMEM. */
int cgrt__config_resolve_dirs(const struct cgrt_config *cfg, const char *list, char **out);

/* Appends to the message in buf what `what` = `written` resolved to and why (nothing when
   resolved is NULL): a message about a resolved path names both spellings. */
void cgrt__config_paths_note(const struct cgrt_config *cfg, const char *what, const char *written,
                             const char *resolved, char *buf, size_t len);

/*
 * Checks the cross-key rules of DESIGN.md section 6; each violation is its own message. Ranges
 * first; then the core's rules by capability (CGRT_CAP_*, or the backend's config_caps()) on the
 * backend that does the work (the configured one, or the one a decorator wraps), whether or not
 * it has a check(); then, only when every value is in its range, the check() of each backend of
 * the configured chain. The tables are read from cfg->sets, or the configured one loaded for the
 * check when cfg holds none (a configuration built by hand). Records which check() ran.
 */
int cgrt__config_check(struct cgrt_config *cfg, struct cgrt_diag *diag);

/*
 * After a backend's init(): reports every key of an open section of the configured chain (a
 * backend that declares no options) that the backend never read as unknown ("source:line:
 * unknown key 'x' in [sectioned]: backend 'sectioned' does not read it").
 */
int cgrt__config_check_backend_keys(const struct cgrt_config *cfg, struct cgrt_diag *diag);

/*
 * Sets option `key` of `section`, declared by a loaded table, to `text` as if the file gave it
 * (for tools that adjust a configuration they read). 0; CGRT_E_INVAL if no loaded table declares
 * it; CGRT_E_CONFIG with the reason in why if the value is refused; CGRT_E_NOMEM.
 */
int cgrt__config_set_option(struct cgrt_config *cfg, const char *section, const char *key,
                            const char *text, char *why, size_t whylen);

/* Writes the normalized configuration (every section, every value, defaults included) as INI. */
int cgrt__config_print(const struct cgrt_config *cfg, FILE *out);

void cgrt__config_free(struct cgrt_config *cfg);

/* Spelling of enum values, as written in the INI ("thread_local", "drop_and_pad"...). */
const char *cgrt__scope_name(cgrt_inference_scope v);
const char *cgrt__rebind_name(cgrt_rebind v);
const char *cgrt__capture_mode_name(cgrt_capture_mode v);
const char *cgrt__driver_name(cgrt_driver_kind v);
const char *cgrt__bucket_dist_name(cgrt_bucket_dist v);
int cgrt__kind_from_name(const char *name, cgrt_kind *out); /* 0 or CGRT_E_INVAL */
const char *cgrt__diagnose_name(cgrt_diagnose v);
/* A diagnose spelling (failures, on, off, or a boolean: 1/true = on) as its value; -1 if none. */
int cgrt__diagnose_from_text(const char *text);

/* Levenshtein distance, for "did you mean" suggestions. */
size_t cgrt__edit_distance(const char *a, const char *b);

#endif
