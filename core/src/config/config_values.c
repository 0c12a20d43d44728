/*
 * config_values.c - reading a key's value by its type (numbers, enums, booleans, lists, module
 * kinds, the backend's name), storing it in the configuration, and writing it back as the
 * normalized text the view's get() and cgrt__config_print show.
 */
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_impl.h"

static const char *enum_name(const struct cfg_key *k, int v) {
  return v >= 0 && (size_t)v < k->num_names ? k->names[v] : "?";
}

/* ---------------------------------------------------------------- small helpers */

static void say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t len, const char *fmt, ...) {
  if (!buf || !len)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

/* Appends to a growing string; on allocation failure the string is freed and *s set to NULL. */
struct sbuf {
  char *s;
  size_t len, cap;
  int failed;
};

static void sb_add(struct sbuf *b, const char *text) {
  if (b->failed)
    return;
  size_t n = strlen(text);
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 32;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      free(b->s);
      b->s = NULL;
      b->failed = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
  memcpy(b->s + b->len, text, n + 1);
  b->len += n;
}

static char *sb_done(struct sbuf *b) {
  if (!b->failed && !b->s)
    sb_add(b, "");
  return b->failed ? NULL : b->s;
}

/* Splits a list on spaces, tabs and commas: the next token of *p into tok, 0 at the end. */
static int next_token(const char **p, char *tok, size_t len) {
  const char *s = *p;
  while (*s && (isspace((unsigned char)*s) || *s == ','))
    s++;
  if (!*s)
    return 0;
  size_t n = 0;
  while (s[n] && !isspace((unsigned char)s[n]) && s[n] != ',')
    n++;
  size_t c = n < len - 1 ? n : len - 1;
  memcpy(tok, s, c);
  tok[c] = '\0';
  *p = s + n;
  return 1;
}

/* A whole number in [0, max]: 0, or -1 with the reason in why. */
int cgrt__cfg_parse_count(const char *text, int64_t max, int64_t *out, char *why, size_t whylen) {
  const char *s = text;
  if (*s == '+')
    s++;
  if (!isdigit((unsigned char)*s)) {
    say(why, whylen, "expected a whole number from 0 to %" PRId64, max);
    return -1;
  }
  int64_t v = 0;
  for (; *s; s++) {
    if (!isdigit((unsigned char)*s)) {
      say(why, whylen, "expected a whole number from 0 to %" PRId64, max);
      return -1;
    }
    int d = *s - '0';
    if (v > (max - d) / 10) {
      say(why, whylen, "too large: expected a whole number from 0 to %" PRId64, max);
      return -1;
    }
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* Units of a CFG_SIZE, largest first (the normalized text uses the largest exact one). */
static const struct {
  const char *name;
  unsigned shift;
} size_units[] = {{"GiB", 30}, {"MiB", 20}, {"KiB", 10}};

/*
 * "512 MiB", "2GiB", "64 kib", "off": a size in bytes (off: 0). The unit is required: a bare
 * number would be a guess between bytes and megabytes. At least 1 KiB, at most 2^63 bytes.
 */
int cgrt__cfg_parse_size(const char *text, uint64_t *out, char *why, size_t whylen) {
  static const char *expect = "expected off, or a whole number followed by KiB, MiB or GiB "
                              "(e.g. 512 MiB or 40 GiB)";
  if (strcasecmp(text, "off") == 0) {
    *out = 0;
    return 0;
  }
  const char *s = text;
  uint64_t v = 0;
  if (!isdigit((unsigned char)*s)) {
    say(why, whylen, "%s", expect);
    return -1;
  }
  for (; isdigit((unsigned char)*s); s++) {
    if (v > (UINT64_MAX - 9) / 10) {
      say(why, whylen, "too large: %s", expect);
      return -1;
    }
    v = v * 10 + (uint64_t)(*s - '0');
  }
  while (*s == ' ' || *s == '\t')
    s++;
  for (size_t i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++)
    if (strcasecmp(s, size_units[i].name) == 0) {
      if (v == 0) {
        say(why, whylen,
            "a budget of 0 keeps every graph out: write off to have no budget, or "
            "a size of at least 1 KiB");
        return -1;
      }
      if (v > (UINT64_MAX >> 1) >> size_units[i].shift) {
        say(why, whylen, "too large: %s", expect);
        return -1;
      }
      *out = v << size_units[i].shift;
      return 0;
    }
  if (!*s)
    say(why, whylen, "'%s' has no unit: %s", text, expect);
  else if (strcasecmp(s, "KB") == 0 || strcasecmp(s, "MB") == 0 || strcasecmp(s, "GB") == 0 ||
           strcasecmp(s, "K") == 0 || strcasecmp(s, "M") == 0 || strcasecmp(s, "G") == 0 ||
           strcasecmp(s, "B") == 0)
    say(why, whylen, "unit '%s' is not accepted: %s (binary units: 1 MiB = 1048576 bytes)", s,
        expect);
  else
    say(why, whylen, "%s", expect);
  return -1;
}

/* The normalized text of a size: off, or the largest unit that divides it exactly. */
void cgrt__cfg_size_text(uint64_t v, char *buf, size_t len) {
  if (v == 0) {
    snprintf(buf, len, "off");
    return;
  }
  for (size_t i = 0; i < sizeof(size_units) / sizeof(size_units[0]); i++)
    if (v % (1ull << size_units[i].shift) == 0) {
      snprintf(buf, len, "%" PRIu64 " %s", v >> size_units[i].shift, size_units[i].name);
      return;
    }
  snprintf(buf, len, "%" PRIu64 " KiB", (v + 1023) >> 10);
}

/* "5", "5%", "2.5 %": a percentage from 0 to 100 (no exponent, no sign, nothing after the %). */
static int parse_percent(const char *text, double *out) {
  const char *s = text;
  int digits = 0, dot = 0;
  for (; *s && (isdigit((unsigned char)*s) || (*s == '.' && !dot)); s++) {
    if (*s == '.')
      dot = 1;
    else
      digits++;
  }
  if (!digits)
    return -1;
  const char *end = s;
  while (*s == ' ')
    s++;
  if (*s == '%')
    s++;
  if (*s)
    return -1;
  char num[64];
  size_t len = (size_t)(end - text);
  if (len >= sizeof(num))
    return -1;
  memcpy(num, text, len);
  num[len] = '\0';
  double v = strtod(num, NULL);
  if (!(v >= 0 && v <= 100))
    return -1;
  *out = v;
  return 0;
}

/* Joins names as "a, b, c" into buf. */
static void join_names(const char *const *names, size_t n, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && off < len; i++) {
    int w = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", names[i]);
    if (w < 0)
      break;
    off += (size_t)w;
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- readers by type */

static int is_path(const char *s) {
  size_t n = strlen(s);
  return strchr(s, '/') != NULL || (n >= 3 && strcmp(s + n - 3, ".so") == 0);
}

static int set_impl(struct cgrt_config *cfg, const char *text, char **norm, char *why,
                    size_t whylen, char *warn, size_t warnlen) {
  struct cfg_builtins bi;
  cgrt__cfg_builtins(&bi);
  char names[256];
  join_names(bi.name, bi.n, names, sizeof(names));
  int ok = text[0] != '\0';
  if (ok && !is_path(text))
    for (const char *s = text; *s; s++)
      if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_' || *s == '-'))
        ok = 0;
  if (!ok) {
    const char *near = text[0] ? cgrt__cfg_closest(text, bi.name, bi.n) : NULL;
    say(why, whylen,
        "expected %s, the name of another backend on backend_path (letters a-z, digits, '_', "
        "'-') or the path of a .so%s%s%s",
        names, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    return CGRT_E_CONFIG;
  }
  if (!is_path(text)) {
    int builtin = 0;
    for (size_t i = 0; i < bi.n; i++)
      builtin |= strcmp(text, bi.name[i]) == 0;
    const char *near = builtin ? NULL : cgrt__cfg_closest(text, bi.name, bi.n);
    if (near)
      say(warn, warnlen,
          "'%s' is not a built-in backend; did you mean '%s'? (otherwise "
          "libcgrt-backend-%s.so must be on backend_path)",
          text, near, text);
  }
  const char *base;
  char *impl = strdup(text), *n = strdup(text), *section = cgrt__cfg_backend_section(text);
  if (!impl || !n || (!section && cgrt__cfg_backend_base(text, &base) > 0)) {
    free(impl);
    free(n);
    free(section);
    return CGRT_E_NOMEM;
  }
  free(cfg->impl);
  free(cfg->backend_section);
  cfg->impl = impl;
  cfg->view.impl = impl;
  cfg->backend_section = section;
  *norm = n;
  return 0;
}

static int set_modules(struct cgrt_config *cfg, const char *text, char **norm, char *why,
                       size_t whylen) {
  const char *p = text;
  char tok[256];
  uint32_t mask = 0;
  struct sbuf out = {0};
  while (next_token(&p, tok, sizeof(tok))) {
    int kind = -1;
    for (int k = 0; k < CGRT_KIND_COUNT; k++)
      if (strcasecmp(tok, cgrt_kind_name((cgrt_kind)k)) == 0)
        kind = k;
    if (kind < 0) {
      const char *names[CGRT_KIND_COUNT];
      char all[256];
      for (int k = 0; k < CGRT_KIND_COUNT; k++)
        names[k] = cgrt_kind_name((cgrt_kind)k);
      join_names(names, CGRT_KIND_COUNT, all, sizeof(all));
      const char *near = cgrt__cfg_closest(tok, names, CGRT_KIND_COUNT);
      if (near)
        say(why, whylen, "'%s' is not a module kind; did you mean '%s'? (expected: %s)", tok, near,
            all);
      else
        say(why, whylen, "'%s' is not a module kind (expected: %s)", tok, all);
      free(out.s);
      return CGRT_E_CONFIG;
    }
    if (mask & CGRT_KIND_BIT(kind)) {
      say(why, whylen, "'%s' is listed twice; name each module kind once",
          cgrt_kind_name((cgrt_kind)kind));
      free(out.s);
      return CGRT_E_CONFIG;
    }
    mask |= CGRT_KIND_BIT(kind);
    if (out.len)
      sb_add(&out, " ");
    sb_add(&out, cgrt_kind_name((cgrt_kind)kind));
  }
  char *n = sb_done(&out);
  if (!n)
    return CGRT_E_NOMEM;
  cfg->view.modules = mask;
  *norm = n;
  return 0;
}

static int set_sizes64(struct cgrt_config *cfg, const char *text, char **norm, char *why,
                       size_t whylen, char *warn, size_t warnlen) {
  size_t cap = strlen(text) / 2 + 1, n = 0;
  int64_t *v = malloc(cap * sizeof(*v));
  if (!v)
    return CGRT_E_NOMEM;
  const char *p = text;
  char tok[256];
  while (next_token(&p, tok, sizeof(tok))) {
    int64_t x;
    if (cgrt__cfg_parse_count(tok, INT64_MAX, &x, why, whylen) != 0 || x < 1) {
      say(why, whylen, "'%s' is not a token count: expected whole numbers from 1 to %" PRId64, tok,
          (int64_t)INT64_MAX);
      free(v);
      return CGRT_E_CONFIG;
    }
    v[n++] = x;
  }
  qsort(v, n, sizeof(*v), cmp_i64);
  size_t m = 0;
  int64_t repeated = 0;
  for (size_t i = 0; i < n; i++) {
    if (m && v[m - 1] == v[i]) {
      repeated = v[i];
      continue;
    }
    v[m++] = v[i];
  }
  if (repeated)
    say(warn, warnlen, "%" PRId64 " is listed more than once; repeats are dropped", repeated);
  struct sbuf out = {0};
  for (size_t i = 0; i < m; i++) {
    char num[32];
    snprintf(num, sizeof(num), "%s%" PRId64, i ? " " : "", v[i]);
    sb_add(&out, num);
  }
  char *s = sb_done(&out);
  if (!s) {
    free(v);
    return CGRT_E_NOMEM;
  }
  free(cfg->bucket_list);
  if (m == 0) {
    free(v);
    v = NULL;
  }
  cfg->bucket_list = v;
  cfg->view.bucket_list = v;
  cfg->view.bucket_list_len = m;
  *norm = s;
  return 0;
}

static int set_cp_sizes(struct cgrt_config *cfg, const char *text, char **norm, char *why,
                        size_t whylen) {
  size_t cap = strlen(text) / 2 + 1, n = 0;
  int *v = malloc(cap * sizeof(*v));
  if (!v)
    return CGRT_E_NOMEM;
  const char *p = text;
  char tok[256];
  while (next_token(&p, tok, sizeof(tok))) {
    int64_t x;
    if (cgrt__cfg_parse_count(tok, INT_MAX, &x, why, whylen) != 0 || x < 1) {
      say(why, whylen,
          "'%s' is not a context-parallel size: expected whole numbers from 1 to %d, e.g. 1 2 4",
          tok, INT_MAX);
      free(v);
      return CGRT_E_CONFIG;
    }
    for (size_t i = 0; i < n; i++)
      if (v[i] == (int)x) {
        say(why, whylen, "%d is listed twice; name each size once", (int)x);
        free(v);
        return CGRT_E_CONFIG;
      }
    v[n++] = (int)x;
  }
  qsort(v, n, sizeof(*v), cmp_int);
  struct sbuf out = {0};
  for (size_t i = 0; i < n; i++) {
    char num[32];
    snprintf(num, sizeof(num), "%s%d", i ? " " : "", v[i]);
    sb_add(&out, num);
  }
  char *s = sb_done(&out);
  if (!s) {
    free(v);
    return CGRT_E_NOMEM;
  }
  free(cfg->cp_sizes);
  if (n == 0) {
    free(v);
    v = NULL;
  }
  cfg->cp_sizes = v;
  cfg->view.cp_sizes = v;
  cfg->view.num_cp_sizes = n;
  *norm = s;
  return 0;
}

/* off | first | every:N (N >= 1; "every N" and "every" alone are refused with the spelling). */
static int set_verify(struct cgrt_config *cfg, const char *text, char **norm, char *why,
                      size_t whylen) {
  static const char expected[] = "expected off, first or every:N (N a whole number >= 1, e.g. "
                                 "every:100)";
  char buf[64];
  int64_t n = 0;
  cgrt_verify v;
  if (strcasecmp(text, "off") == 0 || strcasecmp(text, "false") == 0 || strcmp(text, "0") == 0)
    v = CGRT_VERIFY_OFF;
  else if (strcasecmp(text, "first") == 0)
    v = CGRT_VERIFY_FIRST;
  else if (strncasecmp(text, "every:", 6) == 0) {
    char sub[128];
    if (cgrt__cfg_parse_count(text + 6, INT_MAX, &n, sub, sizeof(sub)) != 0 || n < 1) {
      say(why, whylen, "'%s': N of every:N must be a whole number from 1 to %d", text, INT_MAX);
      return CGRT_E_CONFIG;
    }
    v = CGRT_VERIFY_EVERY;
  } else {
    say(why, whylen, "%s", expected);
    return CGRT_E_CONFIG;
  }
  if (v == CGRT_VERIFY_EVERY)
    snprintf(buf, sizeof(buf), "every:%" PRId64, n);
  else
    snprintf(buf, sizeof(buf), "%s", v == CGRT_VERIFY_FIRST ? "first" : "off");
  if (!(*norm = strdup(buf)))
    return CGRT_E_NOMEM;
  cfg->view.verify = v;
  cfg->view.verify_every = (int)n;
  return 0;
}

int cgrt__cfg_set_value(struct cgrt_config *cfg, int id, const char *text, char **norm, char *why,
                        size_t whylen, char *warn, size_t warnlen) {
  const struct cfg_key *k = &cgrt__cfg_keys[id];
  char *field = (char *)&cfg->view + k->offset;
  char buf[512];
  *norm = NULL;
  say(why, whylen, "%s", "");
  say(warn, warnlen, "%s", "");
  switch (k->type) {
  case CFG_IMPL:
    return set_impl(cfg, text, norm, why, whylen, warn, warnlen);
  case CFG_PATH: {
    char *n = strdup(text), *path = text[0] ? strdup(text) : NULL;
    if (!n || (text[0] && !path)) {
      free(n);
      free(path);
      return CGRT_E_NOMEM;
    }
    free(cfg->backend_path);
    cfg->backend_path = path;
    *norm = n;
    return 0;
  }
  case CFG_MODULES:
    return set_modules(cfg, text, norm, why, whylen);
  case CFG_SIZES64:
    return set_sizes64(cfg, text, norm, why, whylen, warn, warnlen);
  case CFG_CP_SIZES:
    return set_cp_sizes(cfg, text, norm, why, whylen);
  case CFG_VERIFY:
    return set_verify(cfg, text, norm, why, whylen);
  case CFG_DEVICE:
  case CFG_INT:
  case CFG_INT64: {
    if (k->type == CFG_DEVICE && strcasecmp(text, "current") == 0) {
      *(int *)field = -1;
      return (*norm = strdup("current")) ? 0 : CGRT_E_NOMEM;
    }
    int64_t v;
    if (cgrt__cfg_parse_count(text, k->type == CFG_INT64 ? INT64_MAX : INT_MAX, &v, why, whylen) !=
        0) {
      if (k->type == CFG_DEVICE)
        say(why, whylen,
            "expected current (the host stream's device, else the opening "
            "thread's) or a device index from 0 to 2147483647");
      else if (k == &cgrt__cfg_keys[K_MAX_QUEUED_STEPS]) /* the one key with an upper bound */
        say(why, whylen, "expected a whole number from 0 to %d (0: no limit)",
            CGRT_CFG_MAX_QUEUED_STEPS);
      return CGRT_E_CONFIG;
    }
    snprintf(buf, sizeof(buf), "%" PRId64, v);
    if (!(*norm = strdup(buf)))
      return CGRT_E_NOMEM;
    if (k->type == CFG_INT64)
      *(int64_t *)field = v;
    else
      *(int *)field = (int)v;
    return 0;
  }
  case CFG_PERCENT: {
    double pct;
    if (parse_percent(text, &pct) != 0) {
      say(why, whylen, "expected a percentage from 0 to 100, such as 5%% or 2.5%%");
      return CGRT_E_CONFIG;
    }
    snprintf(buf, sizeof(buf), "%g%%", pct);
    if (!(*norm = strdup(buf)))
      return CGRT_E_NOMEM;
    *(double *)field = pct / 100.0;
    return 0;
  }
  case CFG_SIZE: {
    uint64_t v;
    if (cgrt__cfg_parse_size(text, &v, why, whylen) != 0)
      return CGRT_E_CONFIG;
    cgrt__cfg_size_text(v, buf, sizeof(buf));
    if (!(*norm = strdup(buf)))
      return CGRT_E_NOMEM;
    *(uint64_t *)field = v;
    return 0;
  }
  case CFG_BOOL: {
    int b = cgrt__cfg_parse_bool(text);
    if (b < 0) {
      say(why, whylen, "expected %s or %s (true/false, on/off, yes/no and 1/0 are accepted)",
          k->names[1], k->names[0]);
      return CGRT_E_CONFIG;
    }
    if (!(*norm = strdup(k->names[b])))
      return CGRT_E_NOMEM;
    *(int *)field = b;
    return 0;
  }
  case CFG_ENUM: {
    for (size_t i = 0; i < k->num_names; i++)
      if (strcasecmp(text, k->names[i]) == 0) {
        if (!(*norm = strdup(k->names[i])))
          return CGRT_E_NOMEM;
        *(int *)field = (int)i;
        return 0;
      }
    join_names(k->names, k->num_names, buf, sizeof(buf));
    const char *near = text[0] ? cgrt__cfg_closest(text, k->names, k->num_names) : NULL;
    if (near)
      say(why, whylen, "expected one of %s; did you mean '%s'?", buf, near);
    else
      say(why, whylen, "expected one of %s", buf);
    return CGRT_E_CONFIG;
  }
  }
  return CGRT_E_CONFIG;
}

/* ---------------------------------------------------------------- values as text */

char *cgrt__cfg_value_text(const struct cgrt_config *cfg, int id) {
  const struct cfg_key *k = &cgrt__cfg_keys[id];
  const char *field = (const char *)&cfg->view + k->offset;
  const struct cgrt_config_view *v = &cfg->view;
  struct sbuf out = {0};
  char num[32];
  switch (k->type) {
  case CFG_IMPL:
    sb_add(&out, v->impl ? v->impl : cgrt__cfg_keys[K_IMPL].def);
    break;
  case CFG_PATH:
    sb_add(&out, cfg->backend_path ? cfg->backend_path : "");
    break;
  case CFG_MODULES:
    for (int kind = 0; kind < CGRT_KIND_COUNT; kind++)
      if (v->modules & CGRT_KIND_BIT(kind)) {
        if (out.len)
          sb_add(&out, " ");
        sb_add(&out, cgrt_kind_name((cgrt_kind)kind));
      }
    break;
  case CFG_INT:
    snprintf(num, sizeof(num), "%d", *(const int *)field);
    sb_add(&out, num);
    break;
  case CFG_DEVICE:
    if (*(const int *)field < 0)
      sb_add(&out, "current");
    else {
      snprintf(num, sizeof(num), "%d", *(const int *)field);
      sb_add(&out, num);
    }
    break;
  case CFG_INT64:
    snprintf(num, sizeof(num), "%" PRId64, *(const int64_t *)field);
    sb_add(&out, num);
    break;
  case CFG_PERCENT:
    snprintf(num, sizeof(num), "%g%%", *(const double *)field * 100.0);
    sb_add(&out, num);
    break;
  case CFG_SIZE:
    cgrt__cfg_size_text(*(const uint64_t *)field, num, sizeof(num));
    sb_add(&out, num);
    break;
  case CFG_ENUM:
  case CFG_BOOL:
    sb_add(&out, enum_name(k, *(const int *)field));
    break;
  case CFG_SIZES64:
    for (size_t i = 0; i < v->bucket_list_len; i++) {
      snprintf(num, sizeof(num), "%s%" PRId64, i ? " " : "", v->bucket_list[i]);
      sb_add(&out, num);
    }
    break;
  case CFG_VERIFY:
    if (v->verify == CGRT_VERIFY_EVERY)
      snprintf(num, sizeof(num), "every:%d", v->verify_every);
    else
      snprintf(num, sizeof(num), "%s", v->verify == CGRT_VERIFY_FIRST ? "first" : "off");
    sb_add(&out, num);
    break;
  case CFG_CP_SIZES:
    for (size_t i = 0; i < v->num_cp_sizes; i++) {
      snprintf(num, sizeof(num), "%s%d", i ? " " : "", v->cp_sizes[i]);
      sb_add(&out, num);
    }
    break;
  }
  return sb_done(&out);
}

char *cgrt__cfg_vformat(const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (n < 0)
    return NULL;
  char *s = malloc((size_t)n + 1);
  if (s)
    vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

char *cgrt__cfg_format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = cgrt__cfg_vformat(fmt, ap);
  va_end(ap);
  return s;
}

/* ---------------------------------------------------------------- messages and growth */

int cgrt__cfg_grow(struct cfg_parse *st, void **arr, size_t *cap, size_t count, size_t size) {
  if (count < *cap)
    return 0;
  size_t n = *cap ? *cap * 2 : 16;
  void *p = realloc(*arr, n * size);
  if (!p) {
    st->nomem = 1;
    return -1;
  }
  *arr = p;
  *cap = n;
  return 0;
}

void cgrt__cfg_report(struct cfg_parse *st, int line, int syntax, cgrt_log_level level,
                      const char *fmt, ...) {
  if (level == CGRT_LOG_ERROR)
    st->errors++;
  va_list ap;
  va_start(ap, fmt);
  char *body = cgrt__cfg_vformat(fmt, ap);
  va_end(ap);
  char *text = NULL;
  if (body)
    text = line > 0 ? cgrt__cfg_format("%s:%d: %s", st->source, line, body)
                    : cgrt__cfg_format("%s: %s", st->source, body);
  free(body);
  if (!text ||
      cgrt__cfg_grow(st, (void **)&st->msgs, &st->cap_msgs, st->num_msgs, sizeof(*st->msgs))) {
    free(text);
    st->nomem = 1;
    return;
  }
  st->msgs[st->num_msgs] = (struct cfg_msg){line, st->num_msgs, syntax, level, text};
  st->num_msgs++;
}
