/*
 * traffic.h - token-count files for `cgrt buckets --histogram` and `cgrt bench --traffic`: one
 * step's token count per line, or `count,steps` for `steps` steps of that count; blank lines and
 * lines starting with '#' are skipped.
 */
#ifndef CGRT_TRAFFIC_H
#define CGRT_TRAFFIC_H

#include <stddef.h>
#include <stdint.h>

/* The file's lines in order: entry i is steps[i] consecutive steps of tokens[i] tokens. */
struct traffic {
  int64_t *tokens;
  int64_t *steps;
  size_t n;
  uint64_t total_steps;
  double total_tokens; /* real tokens over every step */
  int64_t largest;     /* the largest token count */
};

/*
 * Reads `path`. max_tokens > 0: a count above it is an error. On error (a line that is not
 * `N` or `N,STEPS` with whole numbers, a count or steps below 1, a count above max_tokens, an
 * unreadable or empty file) err says "path:line: what is wrong; what to do" and -1 is returned
 * with *t empty. Free with traffic_free.
 */
int traffic_load(const char *path, int64_t max_tokens, struct traffic *t, char *err, size_t errlen);
void traffic_free(struct traffic *t);

#endif
