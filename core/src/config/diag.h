/* diag.h - messages gathered while reading and checking input (config, plans). Internal. */
#ifndef CGRT_DIAG_H
#define CGRT_DIAG_H

#include <stddef.h>

#include "cgrt/cgrt.h"

/* One message: an error (refuses the input) or a warning (accepted, with advice). */
struct cgrt_diag_msg {
  cgrt_log_level level; /* CGRT_LOG_ERROR or CGRT_LOG_WARN */
  char *text;           /* "conf/a.ini:3: unknown key 'warmup_step' ...", owned */
};

struct cgrt_diag {
  struct cgrt_diag_msg *msgs;
  size_t count;
  size_t cap;
  int errors;
  int warnings;
};

/* Appends a formatted message; on allocation failure the message is dropped but still counted. */
void cgrt__diag_add(struct cgrt_diag *d, cgrt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The first error's text, or NULL if there is none. */
const char *cgrt__diag_first_error(const struct cgrt_diag *d);
void cgrt__diag_free(struct cgrt_diag *d);

#endif
