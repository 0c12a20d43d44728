/* diag.c - message lists for config and plan checks. */
#include "diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void cgrt__diag_add(struct cgrt_diag *d, cgrt_log_level level, const char *fmt, ...) {
  if (level == CGRT_LOG_ERROR)
    d->errors++;
  else
    d->warnings++;
  if (d->count == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    struct cgrt_diag_msg *m = realloc(d->msgs, cap * sizeof(*m));
    if (!m)
      return;
    d->msgs = m;
    d->cap = cap;
  }
  va_list ap;
  va_start(ap, fmt);
  char *text = NULL;
  int n = vasprintf(&text, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  d->msgs[d->count].level = level;
  d->msgs[d->count].text = text;
  d->count++;
}

const char *cgrt__diag_first_error(const struct cgrt_diag *d) {
  for (size_t i = 0; i < d->count; i++)
    if (d->msgs[i].level == CGRT_LOG_ERROR)
      return d->msgs[i].text;
  return NULL;
}

void cgrt__diag_free(struct cgrt_diag *d) {
  for (size_t i = 0; i < d->count; i++)
    free(d->msgs[i].text);
  free(d->msgs);
  d->msgs = NULL;
  d->count = d->cap = 0;
  d->errors = d->warnings = 0;
}
