/* log.c - the log sink, error recording, and small process utilities. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"

static const char *const level_names[] = {"off", "error", "warn", "info", "debug"};

int cgrt__log_level_from_name(const char *name) {
  for (int i = 0; i <= CGRT_LOG_DEBUG; i++)
    if (strcmp(name, level_names[i]) == 0)
      return i;
  return -1;
}

void cgrt__vlog(const struct cgrt_log *log, cgrt_log_level level, const char *fmt, va_list ap) {
  cgrt_log_level threshold = log ? log->level : CGRT_LOG_INFO;
  if (level == CGRT_LOG_OFF || level > threshold)
    return;
  if (log && log->fn && log->in_sink)
    return;
  char msg[2048];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  if (log && log->fn) {
    /* The log is the runtime's own (never const there): the flag keeps the sink from being
       re-entered by the lines of the cgrt calls it makes. */
    struct cgrt_log *own = (struct cgrt_log *)log;
    own->in_sink = 1;
    log->fn(log->user, level, msg);
    own->in_sink = 0;
  } else {
    fprintf(stderr, "cgrt: %s: %s\n", level_names[level], msg);
  }
}

void cgrt__log(const struct cgrt_log *log, cgrt_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cgrt__vlog(log, level, fmt, ap);
  va_end(ap);
}

int cgrt__fail(struct cgrt_log *log, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(log->err, sizeof(log->err), fmt, ap);
  va_end(ap);
  cgrt__log(log, CGRT_LOG_DEBUG, "error %d (%s): %s", code, cgrt_strerror(code), log->err);
  return code;
}

uint64_t cgrt__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *cgrt__getenv(const char *name) {
  /* A setuid host must not let its caller choose which code it loads or which file it reads. */
  return secure_getenv(name);
}
