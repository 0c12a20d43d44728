/*
 * log.h - the log sink and the last error of one runtime, the clock, getenv. Internal.
 *
 * Every layer logs and records errors through a struct cgrt_log (the runtime's is rt->log),
 * never through the runtime itself, so that base/ knows nothing of the layers above it.
 */
#ifndef CGRT_LOG_H
#define CGRT_LOG_H

#include <stdarg.h>
#include <stdint.h>

#include "cgrt/cgrt.h"

/* Where a runtime's lines go and the sentence of its last error. */
struct cgrt_log {
  cgrt_log_fn fn; /* the host's sink, or NULL: stderr */
  void *user;
  cgrt_log_level level; /* lines above it are dropped */
  char err[2048];       /* the last error (cgrt_last_error) */
  int in_sink;          /* the sink runs: it is not re-entered (lines its calls log are dropped) */
};

/*
 * Logs a formatted line at `level` through log's sink (log NULL: stderr, at info and below). A
 * line logged while the sink runs (by a cgrt call the sink makes) is dropped: the sink is never
 * re-entered.
 */
void cgrt__log(const struct cgrt_log *log, cgrt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void cgrt__vlog(const struct cgrt_log *log, cgrt_log_level level, const char *fmt, va_list ap);

/* Sets log->err (logged at debug level) and returns code. */
int cgrt__fail(struct cgrt_log *log, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parses a level name ("off", "error", "warn", "info", "debug"); -1 if unknown. */
int cgrt__log_level_from_name(const char *name);

/* Monotonic clock in nanoseconds. */
uint64_t cgrt__now_ns(void);

/* getenv that ignores the environment in setuid/setgid processes (secure_getenv). */
const char *cgrt__getenv(const char *name);

#endif
