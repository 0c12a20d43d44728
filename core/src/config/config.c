/*
 * config.c - reading the INI configuration (DESIGN.md section 6): inih splits the text into
 * sections and `key = value` pairs; this file keeps the line of each, joins continuation lines,
 * and hands each to config_meaning.c, which migrates legacy spellings and reports unknown
 * sections and keys, repeats and conflicts. Values are read by config_values.c, the rules between
 * keys checked by config_rules.c.
 *
 * Reading happens in two passes. The first (inih and the callbacks below) only collects the
 * pairs with their lines, so a continuation line can still extend a value. The second
 * (config_meaning.c) interprets them in source order; a section the core does not know is decided
 * last, because `impl` (whose table names the extra section a backend owns) may come after it in
 * the file.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "config_impl.h"

/* ---------------------------------------------------------------- small helpers */

/* Makes room for one more element of an array; 0, or -1 (and st->nomem) if memory ran out. */
/* Copies s with runs of whitespace made one space, and no space at either end. */
static char *collapse(const char *s) {
  char *out = malloc(strlen(s) + 1);
  if (!out)
    return NULL;
  size_t n = 0;
  int space = 0;
  for (; *s; s++) {
    if (isspace((unsigned char)*s)) {
      space = n > 0;
      continue;
    }
    if (space)
      out[n++] = ' ';
    space = 0;
    out[n++] = *s;
  }
  out[n] = '\0';
  return out;
}

/* ---------------------------------------------------------------- first pass: inih */

const char *cgrt__cfg_find_comment(const char *s, const char *chars) {
  int was_space = 0;
  while (*s && (!chars || !strchr(chars, *s)) && !(was_space && *s == ';')) {
    was_space = isspace((unsigned char)*s);
    s++;
  }
  return s;
}

/* Follows inih's reading of the line in buf (section headers, continuation lines, syntax errors)
   so that each pair lands in the right section and a continuation joins the right value. */
static void classify(struct cfg_parse *st, const char *buf) {
  const char *start = buf;
  if (st->lineno == 1 && (unsigned char)buf[0] == 0xEF && (unsigned char)buf[1] == 0xBB &&
      (unsigned char)buf[2] == 0xBF)
    start += 3;
  while (isspace((unsigned char)*start))
    start++;
  st->cont = 0;
  if (*start == '\0' || *start == ';' || *start == '#')
    return;
  if (st->prev >= 0 && start > buf) {
    st->cont = 1;
    return;
  }
  if (*start == '[') {
    const char *end = cgrt__cfg_find_comment(start + 1, "]");
    if (*end != ']') {
      cgrt__cfg_report(
          st, st->lineno, 1, CGRT_LOG_ERROR,
          "syntax error: expected 'key = value' or '[section]' (this section header has no "
          "closing ']')");
      return;
    }
    const char *a = start + 1;
    while (a < end && isspace((unsigned char)*a))
      a++;
    const char *b = end;
    while (b > a && isspace((unsigned char)b[-1]))
      b--;
    char *name = strndup(a, (size_t)(b - a));
    if (!name || cgrt__cfg_grow(st, (void **)&st->sections, &st->cap_sections, st->num_sections,
                                sizeof(*st->sections))) {
      free(name);
      st->nomem = 1;
      return;
    }
    st->sections[st->num_sections++] = (struct cfg_section_seen){name, st->lineno};
    st->section = name;
    st->prev = -1;
    return;
  }
  const char *end = cgrt__cfg_find_comment(start, "=:");
  if (*end != '=' && *end != ':')
    cgrt__cfg_report(st, st->lineno, 1, CGRT_LOG_ERROR,
                     "syntax error: expected 'key = value' or '[section]'");
}

/* inih's fgets: hands over the next line, counting lines. A line too long for inih's buffer is
   reported and handed over as an empty line, so it is never parsed in pieces. */
static char *read_line(char *buf, int num, void *stream) {
  struct cfg_parse *st = stream;
  if (st->pos >= st->len || num < 2)
    return NULL;
  const char *p = st->text + st->pos;
  const char *nl = memchr(p, '\n', st->len - st->pos);
  size_t n = nl ? (size_t)(nl - p) : st->len - st->pos;
  st->pos += n + (nl != NULL);
  st->lineno++;
  if (n && p[n - 1] == '\r')
    n--;
  if (n > (size_t)num - 2) {
    cgrt__cfg_report(
        st, st->lineno, 0, CGRT_LOG_ERROR,
        "line is longer than %d characters; split a long list over several lines, each "
        "continuation line indented",
        num - 2);
    st->cont = 0;
    buf[0] = '\n';
    buf[1] = '\0';
    return buf;
  }
  memcpy(buf, p, n);
  buf[n] = '\n';
  buf[n + 1] = '\0';
  classify(st, buf);
  return buf;
}

static int on_pair(void *user, const char *section, const char *name, const char *value) {
  struct cfg_parse *st = user;
  (void)section; /* the reader's own record: inih truncates long names */
  if (st->cont && st->prev >= 0 && strcmp(st->pairs[st->prev].key, name) == 0) {
    struct cfg_pair *pr = &st->pairs[st->prev];
    /* inih 55 keeps an inline comment on a continuation line; later versions drop it */
    int n = (int)(cgrt__cfg_find_comment(value, NULL) - value);
    char *v =
        pr->value[0] ? cgrt__cfg_format("%s %.*s", pr->value, n, value) : strndup(value, (size_t)n);
    if (!v) {
      st->nomem = 1;
      return 0;
    }
    free(pr->value);
    pr->value = v;
    return 1;
  }
  if (cgrt__cfg_grow(st, (void **)&st->pairs, &st->cap_pairs, st->num_pairs, sizeof(*st->pairs)))
    return 0;
  struct cfg_pair pr = {st->section ? strdup(st->section) : NULL, strdup(name), strdup(value),
                        st->lineno};
  if ((st->section && !pr.section) || !pr.key || !pr.value) {
    free(pr.section);
    free(pr.key);
    free(pr.value);
    st->nomem = 1;
    return 0;
  }
  st->pairs[st->num_pairs] = pr;
  st->prev = name[0] ? (long)st->num_pairs : -1;
  st->num_pairs++;
  return 1;
}

static int by_line(const void *a, const void *b) {
  const struct cfg_msg *x = a, *y = b;
  if (x->line != y->line)
    return (x->line > y->line) - (x->line < y->line);
  return (x->seq > y->seq) - (x->seq < y->seq);
}

static void parse_free(struct cfg_parse *st) {
  for (size_t i = 0; i < st->num_pairs; i++) {
    free(st->pairs[i].section);
    free(st->pairs[i].key);
    free(st->pairs[i].value);
  }
  free(st->pairs);
  for (size_t i = 0; i < st->num_sections; i++)
    free(st->sections[i].name);
  free(st->sections);
  for (size_t i = 0; i < st->num_msgs; i++)
    free(st->msgs[i].text);
  free(st->msgs);
  for (int i = 0; i < K_COUNT; i++) {
    free(st->origins[i].value);
    free(st->origins[i].means);
  }
  for (int i = 0; i < LEG_COUNT; i++)
    free(st->legacy[i].value);
}

/* ---------------------------------------------------------------- the configuration */

static const char *view_get(const struct cgrt_config_view *view, const char *section,
                            const char *key) {
  if (!view || !section || !key)
    return NULL;
  struct cgrt_config *cfg = cgrt__cfg_of_view(view);
  for (size_t i = 0; i < cfg->num_entries; i++) {
    struct cgrt_config_entry *e = &cfg->entries[i];
    if (strcmp(e->section, section) == 0 && strcmp(e->key, key) == 0) {
      e->used = 1;
      return e->value;
    }
  }
  /* a declared option not given: its default */
  struct cgrt_option_value *ov;
  return cgrt__cfg_option_find(cfg, section, key, &ov) ? ov->text : NULL;
}

int cgrt__config_defaults(struct cgrt_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->view.struct_size = sizeof(cfg->view);
  cfg->view.get = view_get;
  cfg->view.get_int = cgrt__cfg_view_get_int;
  cfg->view.describe = cgrt__cfg_view_describe;
  cgrt__cfg_fill_retired(cfg);
  /* Each key's default is its row's text, read as a file's value would be. */
  for (int id = 0; id < K_COUNT; id++) {
    char *norm = NULL;
    int rc = cgrt__cfg_set_value(cfg, id, cgrt__cfg_keys[id].def, &norm, NULL, 0, NULL, 0);
    free(norm);
    if (rc != 0)
      return rc == CGRT_E_NOMEM ? rc : CGRT_E_CONFIG; /* a bad default: a bug of the table */
  }
  return 0;
}

/* cgrt__config_parse, for the text of `file` when not NULL: its relative paths (a backend's,
   which is loaded to read its options) resolve from its folder. */
static int parse_text(struct cgrt_config *cfg, const char *text, const char *source,
                      const char *file, struct cgrt_diag *diag) {
  if (cgrt__config_defaults(cfg) != 0 || (file && cgrt__config_set_dir(cfg, file) != 0))
    return CGRT_E_NOMEM;
  if (!source)
    source = "<string>";
  if (!(cfg->source = strdup(source)))
    return CGRT_E_NOMEM;
  if (!text) {
    cgrt__diag_add(diag, CGRT_LOG_ERROR, "%s: no configuration text", source);
    return CGRT_E_INVAL;
  }

  struct cfg_parse st = {
      .cfg = cfg, .source = cfg->source, .text = text, .len = strlen(text), .prev = -1};
  int r = ini_parse_stream(read_line, &st, on_pair, &st);
  if (r > 0 && !st.nomem) {
    int known = 0;
    for (size_t i = 0; i < st.num_msgs; i++)
      known |= st.msgs[i].syntax && st.msgs[i].line == r;
    if (!known)
      cgrt__cfg_report(&st, r, 1, CGRT_LOG_ERROR,
                       "syntax error: expected 'key = value' or '[section]'");
  } else if (r < 0) {
    st.nomem = 1;
  }

  for (size_t i = 0; i < st.num_pairs && !st.nomem; i++) {
    char *v = collapse(st.pairs[i].value);
    if (!v) {
      st.nomem = 1;
      break;
    }
    free(st.pairs[i].value);
    st.pairs[i].value = v;
    cgrt__cfg_interpret(&st, &st.pairs[i]);
  }
  /* the backends' tables first: a backend's section is its table's name */
  if (!st.nomem)
    cgrt__cfg_load_tables(&st);
  if (!st.nomem)
    cgrt__cfg_settle_sections(&st);
  if (!st.nomem)
    cgrt__cfg_bind_options(&st);

  if (st.num_msgs)
    qsort(st.msgs, st.num_msgs, sizeof(*st.msgs), by_line);
  for (size_t i = 0; i < st.num_msgs; i++)
    cgrt__diag_add(diag, st.msgs[i].level, "%s", st.msgs[i].text);
  int errors = st.errors, nomem = st.nomem;
  parse_free(&st);
  if (nomem)
    return CGRT_E_NOMEM;
  if (errors)
    return CGRT_E_CONFIG;
  return cgrt__config_check(cfg, diag);
}

int cgrt__config_parse(struct cgrt_config *cfg, const char *text, const char *source,
                       struct cgrt_diag *diag) {
  return parse_text(cfg, text, source, NULL, diag);
}

static const char *error_text(int e, char *buf, size_t len) {
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  return strerror_r(e, buf, len);
#else
  if (strerror_r(e, buf, len) != 0)
    snprintf(buf, len, "error %d", e);
  return buf;
#endif
}

/* The largest configuration file read (a shipped one is a few KiB). */
#define CONFIG_MAX_BYTES (16 << 20)

int cgrt__config_load(struct cgrt_config *cfg, const char *path, struct cgrt_diag *diag) {
  char ebuf[256];
  char *text = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  if (!path) {
    cgrt__config_defaults(cfg);
    cgrt__diag_add(diag, CGRT_LOG_ERROR, "no configuration file named");
    return CGRT_E_INVAL;
  }
  /*
   * A regular file only, opened without blocking (a FIFO with no writer would wait for ever) and
   * read up to CONFIG_MAX_BYTES: /dev/zero, a directory or a pipe is refused with a sentence.
   */
  FILE *f = NULL;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    goto io_fail;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    goto io_fail;
  }
  if (!S_ISREG(st.st_mode) || st.st_size > CONFIG_MAX_BYTES) {
    close(fd);
    cgrt__config_defaults(cfg);
    cfg->source = strdup(path);
    if (!S_ISREG(st.st_mode))
      cgrt__diag_add(diag, CGRT_LOG_ERROR,
                     "cannot read '%s': it is not a regular file (a directory, a device or a "
                     "pipe); name an INI file",
                     path);
    else
      cgrt__diag_add(diag, CGRT_LOG_ERROR,
                     "cannot read '%s': %lld bytes is too large for a configuration file (at "
                     "most %d); is it the right file?",
                     path, (long long)st.st_size, CONFIG_MAX_BYTES);
    return cfg->source ? CGRT_E_CONFIG : CGRT_E_NOMEM;
  }
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    goto io_fail;
  }
  for (;;) {
    if (len > CONFIG_MAX_BYTES) { /* it grew while read */
      errno = EFBIG;
      goto io_fail;
    }
    if (cap - len < 4096) {
      cap = cap ? cap * 2 : 8192;
      char *t = realloc(text, cap + 1);
      if (!t) {
        rc = CGRT_E_NOMEM;
        goto fail;
      }
      text = t;
    }
    size_t n = fread(text + len, 1, cap - len, f);
    len += n;
    if (n == 0)
      break;
  }
  if (ferror(f))
    goto io_fail;
  fclose(f);
  f = NULL;
  text[len] = '\0';
  const char *nul = memchr(text, '\0', len);
  if (nul) {
    int line = 1;
    for (const char *p = text; p < nul; p++)
      line += *p == '\n';
    cgrt__config_defaults(cfg);
    cfg->source = strdup(path);
    cgrt__diag_add(diag, CGRT_LOG_ERROR, "%s:%d: the file holds a NUL byte; is it a text file?",
                   path, line);
    rc = cfg->source ? CGRT_E_CONFIG : CGRT_E_NOMEM;
    goto fail;
  }
  /* Its relative paths resolve from its folder (config_paths.c). */
  rc = parse_text(cfg, text, path, path, diag);
  free(text);
  return rc;

io_fail:
  rc = errno;
  cgrt__config_defaults(cfg);
  cfg->source = strdup(path);
  cgrt__diag_add(diag, CGRT_LOG_ERROR, "cannot read '%s': %s", path,
                 error_text(rc, ebuf, sizeof(ebuf)));
  rc = CGRT_E_IO;
fail:
  if (f)
    fclose(f);
  free(text);
  return rc;
}

void cgrt__config_free(struct cgrt_config *cfg) {
  if (!cfg)
    return;
  for (size_t i = 0; i < cfg->num_entries; i++) {
    free(cfg->entries[i].section);
    free(cfg->entries[i].key);
    free(cfg->entries[i].value);
  }
  free(cfg->entries);
  free(cfg->source);
  free(cfg->dir);
  free(cfg->impl);
  free(cfg->backend_path);
  free(cfg->backend_section);
  free(cfg->bucket_list);
  free(cfg->cp_sizes);
  for (size_t s = 0; s < cfg->num_sets; s++) {
    struct cgrt_option_set *set = &cfg->sets[s];
    for (size_t i = 0; set->values && i < set->num_options; i++)
      free(set->values[i].text);
    free(set->values);
    free(set->section);
    free(set->impl);
    free(set->unread);
    cgrt__backend_close(&set->lib);
  }
  memset(cfg, 0, sizeof(*cfg));
}
