/* traffic.c - reading token-count files (traffic.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traffic.h"

void traffic_free(struct traffic *t) {
  free(t->tokens);
  free(t->steps);
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

static int add(struct traffic *t, size_t *cap, int64_t tokens, int64_t steps) {
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
    *cap = c;
  }
  t->tokens[t->n] = tokens;
  t->steps[t->n] = steps;
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
  FILE *fp = fopen(path, "r");
  if (!fp) {
    snprintf(err, errlen, "%s: cannot read it: %s", path, strerror(errno));
    return -1;
  }
  char line[256];
  size_t cap = 0;
  int lineno = 0, rc = 0;
  while (rc == 0 && fgets(line, sizeof(line), fp)) {
    lineno++;
    size_t len = strlen(line);
    if (len == sizeof(line) - 1 && line[len - 1] != '\n' && !feof(fp)) {
      snprintf(err, errlen, "%s:%d: line too long: expected N or N,STEPS", path, lineno);
      rc = -1;
      break;
    }
    line[strcspn(line, "\r\n")] = '\0';
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
               path, lineno, s);
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
    } else if (add(t, &cap, tokens, steps) != 0) {
      snprintf(err, errlen, "%s: out of memory", path);
      rc = -1;
    }
  }
  if (rc == 0 && ferror(fp)) {
    snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
    rc = -1;
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
