/* traffic.c - reading token-count files (traffic.h). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrt/tool.h"
#include "tool_args.h"
#include "traffic.h"

void traffic_free(struct traffic *t) {
  free(t->tokens);
  free(t->steps);
  free(t->lines);
  memset(t, 0, sizeof(*t));
}

/* A whole number (optional sign), surrounding blanks allowed; -1 if s is something else. */
static int parse_number(const char *s, const char *end, long long *out) {
  while (s < end && isspace((unsigned char)*s))
    s++;
  while (end > s && isspace((unsigned char)end[-1]))
    end--;
  if (s == end || (size_t)(end - s) > 30)
    return -1;
  char buf[32];
  memcpy(buf, s, (size_t)(end - s));
  buf[end - s] = '\0';
  char *stop;
  errno = 0;
  long long v = strtoll(buf, &stop, 10);
  if (errno || *stop || !(isdigit((unsigned char)buf[0]) || buf[0] == '-' || buf[0] == '+'))
    return -1;
  *out = v;
  return 0;
}

static int add(struct traffic *t, size_t *cap, int64_t tokens, int64_t steps, int line) {
  if (t->n == *cap) {
    size_t c = *cap ? *cap * 2 : 1024;
    int64_t *a = realloc(t->tokens, c * sizeof(*a));
    if (!a)
      return -1;
    t->tokens = a;
    int64_t *b = realloc(t->steps, c * sizeof(*b));
    if (!b)
      return -1;
    t->steps = b;
    int *l = realloc(t->lines, c * sizeof(*l));
    if (!l)
      return -1;
    t->lines = l;
    *cap = c;
  }
  t->tokens[t->n] = tokens;
  t->steps[t->n] = steps;
  t->lines[t->n] = line;
  t->n++;
  t->total_steps += (uint64_t)steps;
  t->total_tokens += (double)tokens * (double)steps;
  if (tokens > t->largest)
    t->largest = tokens;
  return 0;
}

int traffic_load(const char *path, int64_t max_tokens, struct traffic *t, char *err,
                 size_t errlen) {
  memset(t, 0, sizeof(*t));
  /* A regular file only: /dev/zero would never end, a FIFO could block forever. */
  FILE *fp = tool_open_input(path, err, errlen);
  if (!fp)
    return -1;
  char line[TRAFFIC_LINE_MAX + 1], q[64];
  size_t cap = 0, len = 0;
  int lineno = 0, rc = 0, got;
  uint64_t real = 0; /* real tokens summed exactly, up to TRAFFIC_EXACT_MAX */
  uint64_t product = 0;
  while (rc == 0 && (got = tool_read_line(fp, line, sizeof(line), &len)) != 0) {
    if (lineno == INT_MAX) { /* t->lines holds ints */
      snprintf(err, errlen,
               "%s: more than %d lines; split the file, or merge equal counts into "
               "N,STEPS lines",
               path, INT_MAX);
      rc = -1;
      break;
    }
    lineno++;
    if (got == TOOL_LINE_LONG) {
      snprintf(err, errlen,
               "%s:%d: a line longer than %d bytes: expected N or N,STEPS (or a # comment); "
               "shorten or remove the line, or give a traffic file",
               path, lineno, TRAFFIC_LINE_MAX);
      rc = -1;
      break;
    }
    if (got == TOOL_LINE_NUL) {
      snprintf(err, errlen,
               "%s:%d: a NUL byte at column %zu: a traffic file is text, N or N,STEPS per line; "
               "remove the byte, or give a traffic file",
               path, lineno, len + 1);
      rc = -1;
      break;
    }
    if (got == TOOL_LINE_ERROR) {
      snprintf(err, errlen, "%s:%d: read error: %s", path, lineno, strerror(errno));
      rc = -1;
      break;
    }
    const char *s = line;
    while (isspace((unsigned char)*s))
      s++;
    if (!*s || *s == '#')
      continue;
    const char *comma = strchr(s, ',');
    const char *end = s + strlen(s);
    long long tokens, steps = 1;
    if (parse_number(s, comma ? comma : end, &tokens) != 0 ||
        (comma && parse_number(comma + 1, end, &steps) != 0)) {
      snprintf(err, errlen,
               "%s:%d: '%s' is not a token count: expected N or N,STEPS (whole numbers: a step's "
               "tokens, and how many steps had them)",
               path, lineno, tool_quote(s, q, sizeof(q)));
      rc = -1;
    } else if (tokens < 1) {
      snprintf(err, errlen, "%s:%d: %lld tokens: a step's token count is at least 1", path, lineno,
               tokens);
      rc = -1;
    } else if (steps < 1) {
      snprintf(err, errlen, "%s:%d: %lld steps: the number of steps after the comma is at least 1",
               path, lineno, steps);
      rc = -1;
    } else if (max_tokens > 0 && tokens > max_tokens) {
      snprintf(err, errlen,
               "%s:%d: %lld tokens is above max_tokens = %lld, the largest bucket; raise "
               "max_tokens (--max-tokens, or [inference] max_tokens) or remove the line",
               path, lineno, tokens, (long long)max_tokens);
      rc = -1;
    } else if ((uint64_t)steps > TRAFFIC_EXACT_MAX - t->total_steps) {
      snprintf(err, errlen,
               "%s:%d: %lld steps: the file's steps summed up to this line pass 2^53 = %llu, the "
               "largest count the planner adds up exactly; scale the step counts down (the best "
               "buckets depend only on their proportions)",
               path, lineno, steps, TRAFFIC_EXACT_MAX);
      rc = -1;
    } else if (__builtin_mul_overflow((uint64_t)tokens, (uint64_t)steps, &product) ||
               product > TRAFFIC_EXACT_MAX - real) {
      snprintf(err, errlen,
               "%s:%d: %lld tokens x %lld steps: the file's real tokens summed up to this line "
               "pass 2^53 = %llu, the largest count the planner adds up exactly; scale the step "
               "counts down (the best buckets depend only on their proportions)",
               path, lineno, tokens, steps, TRAFFIC_EXACT_MAX);
      rc = -1;
    } else if (add(t, &cap, tokens, steps, lineno) != 0) {
      snprintf(err, errlen, "%s: out of memory", path);
      rc = -1;
    } else {
      real += product;
    }
  }
  fclose(fp);
  if (rc == 0 && t->n == 0) {
    snprintf(err, errlen, "%s: no token counts in it (one per line, or N,STEPS)", path);
    rc = -1;
  }
  if (rc != 0)
    traffic_free(t);
  return rc;
}

int traffic_check_padding(const struct traffic *t, const char *path, int64_t largest, char *err,
                          size_t errlen) {
  uint64_t steps = 0, most = 0;
  for (size_t i = 0; i < t->n; i++) {
    steps += (uint64_t)t->steps[i]; /* at most TRAFFIC_EXACT_MAX: traffic_load checked */
    if (largest > 0 &&
        (__builtin_mul_overflow(steps, (uint64_t)largest, &most) || most > TRAFFIC_EXACT_MAX)) {
      snprintf(err, errlen,
               "%s:%d: %llu steps up to this line, padded to buckets of up to %lld tokens, can "
               "pass 2^53 = %llu padded tokens, the largest count the planner adds up exactly; "
               "scale the step counts down (the best buckets depend only on their proportions)",
               path, t->lines[i], (unsigned long long)steps, (long long)largest, TRAFFIC_EXACT_MAX);
      return -1;
    }
  }
  return 0;
}

int traffic_histogram(const struct traffic *t, int64_t tp, int64_t max, int64_t **sizes,
                      double **steps, double **tokens, size_t *n) {
  size_t cnt = t->n;
  int64_t *need = malloc(cnt * sizeof(*need));
  *sizes = malloc(cnt * sizeof(**sizes));
  *steps = malloc(cnt * sizeof(**steps));
  *tokens = malloc(cnt * sizeof(**tokens));
  int rc = need && *sizes && *steps && *tokens ? 0 : -1;
  for (size_t i = 0; rc == 0 && i < cnt; i++)
    need[i] = cgrt_tool_bucket_need(t->tokens[i], tp, max);
  /* each entry merged into the ascending list of distinct sizes (binary search, insertion) */
  *n = 0;
  if (rc == 0) {
    for (size_t i = 0; i < cnt; i++) {
      size_t lo = 0, hi = *n;
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((*sizes)[mid] < need[i])
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == *n || (*sizes)[lo] != need[i]) {
        memmove(&(*sizes)[lo + 1], &(*sizes)[lo], (*n - lo) * sizeof(**sizes));
        memmove(&(*steps)[lo + 1], &(*steps)[lo], (*n - lo) * sizeof(**steps));
        memmove(&(*tokens)[lo + 1], &(*tokens)[lo], (*n - lo) * sizeof(**tokens));
        (*sizes)[lo] = need[i];
        (*steps)[lo] = 0;
        (*tokens)[lo] = 0;
        (*n)++;
      }
      (*steps)[lo] += (double)t->steps[i];
      (*tokens)[lo] += (double)t->steps[i] * (double)t->tokens[i];
    }
  }
  free(need);
  return rc;
}
