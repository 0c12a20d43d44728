/*
 * traffic.h - token-count files for `cgrt buckets --histogram`, `cgrt bench --traffic` and `cgrt
 * plan --traffic`: one step's token count per line, or `count,steps` for `steps` steps of that
 * count; blank lines and lines starting with '#' are skipped.
 */
#ifndef CGRT_TRAFFIC_H
#define CGRT_TRAFFIC_H

#include <stddef.h>
#include <stdint.h>

/*
 * The planner adds token and step counts up in doubles (bucket_plan.c), exact up to 2^53: a file
 * whose counts pass it is refused (file:line) rather than planned with rounded figures.
 */
#define TRAFFIC_EXACT_MAX (1ull << 53)

/* The longest line read, in bytes (its '\n' aside): a longer one is refused with file:line. */
#define TRAFFIC_LINE_MAX 1024

/* The file's lines in order: entry i is steps[i] consecutive steps of tokens[i] tokens. */
struct traffic {
  int64_t *tokens;
  int64_t *steps;
  int *lines; /* the line of the file each entry was read from */
  size_t n;
  uint64_t total_steps;
  double total_tokens; /* real tokens over every step */
  int64_t largest;     /* the largest token count */
};

/*
 * Reads `path`, a regular file (tool_open_input: a directory, a FIFO or a device is refused
 * without blocking). max_tokens > 0: a count above it is an error. On error (a line that is not
 * `N` or `N,STEPS` with whole numbers, a line holding a NUL byte or longer than
 * TRAFFIC_LINE_MAX, a count or steps below 1, a count above max_tokens, the steps or the real
 * tokens summed up to a line passing TRAFFIC_EXACT_MAX, an unreadable or empty file) err says
 * "path:line: what is wrong; what to do" and -1 is returned with *t empty. Free with
 * traffic_free.
 */
int traffic_load(const char *path, int64_t max_tokens, struct traffic *t, char *err, size_t errlen);

/*
 * 0 if every padded-token figure of the traffic at buckets up to `largest` stays exact (its steps
 * times `largest` within TRAFFIC_EXACT_MAX); else -1 with err naming "path:line" of the first
 * line whose steps pass it.
 */
int traffic_check_padding(const struct traffic *t, const char *path, int64_t largest, char *err,
                          size_t errlen);
void traffic_free(struct traffic *t);

/*
 * The traffic as the planners' histogram: sizes[i] (ascending, distinct) the bucket size steps
 * need (their count rounded up to a multiple of tp, at most max: cgrt_tool_bucket_need), steps[i]
 * how many steps need it, tokens[i] their real tokens; *n entries. The arrays are malloc'ed (the
 * caller frees them, also after an error); -1 when out of memory.
 */
int traffic_histogram(const struct traffic *t, int64_t tp, int64_t max, int64_t **sizes,
                      double **steps, double **tokens, size_t *n);

#endif
