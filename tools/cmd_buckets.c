/*
 * cmd_buckets.c - `cgrt buckets`: the inference token buckets for given options (from a config
 * file's [inference] section, then the command-line options), largest first, as Megatron-LM
 * prints them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"

#define MAX_LIST 1024

static int parse_i64(const char *opt, const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end) {
    fprintf(stderr, "cgrt buckets: %s '%s' is not an integer\n", opt, s);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_list(const char *s, int64_t *list, size_t *n) {
  *n = 0;
  char *copy = strdup(s);
  if (!copy)
    return -1;
  int rc = 0;
  for (char *save, *tok = strtok_r(copy, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
    if (*n == MAX_LIST || parse_i64("--list", tok, &list[*n]) != 0) {
      rc = -1;
      break;
    }
    (*n)++;
  }
  free(copy);
  return rc;
}

static void usage(void) {
  fprintf(stderr, "usage: cgrt buckets [FILE] [--max-tokens N] [--num-graphs K] [--tp T]\n"
                  "                    [--dist exponential|linear|list] [--list 'A B ...']\n");
}

int cmd_buckets(int argc, char **argv) {
  cgrt_tool_config *cfg = NULL;
  int status = tool_load_config(NULL, "", "<defaults>", &cfg, 0);
  if (status != EXIT_VALID)
    return status;
  const struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  status = EXIT_UNUSABLE;
  int64_t list[MAX_LIST];
  size_t list_len = 0;
  int have_list = 0, dist_given = 0;
  int64_t max = v->max_tokens, graphs = v->num_graphs, tp = v->tp_size;
  cgrt_bucket_dist dist = v->buckets;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (a[0] != '-') {
      cgrt_tool_config_free(cfg);
      cfg = NULL;
      status = tool_load_config(a, NULL, NULL, &cfg, 0);
      if (status != EXIT_VALID)
        goto out;
      status = EXIT_UNUSABLE;
      v = cgrt_tool_config_view(cfg);
      max = v->max_tokens;
      graphs = v->num_graphs;
      tp = v->tp_size;
      dist = v->buckets;
      continue;
    }
    if (!val) {
      usage();
      goto out;
    }
    i++;
    if (strcmp(a, "--max-tokens") == 0 && parse_i64(a, val, &max) == 0)
      continue;
    if (strcmp(a, "--num-graphs") == 0 && parse_i64(a, val, &graphs) == 0)
      continue;
    if (strcmp(a, "--tp") == 0 && parse_i64(a, val, &tp) == 0)
      continue;
    if (strcmp(a, "--list") == 0 && parse_list(val, list, &list_len) == 0) {
      have_list = 1;
      continue;
    }
    if (strcmp(a, "--dist") == 0) {
      dist_given = 1;
      if (strcmp(val, "exponential") == 0)
        dist = CGRT_BUCKETS_EXPONENTIAL;
      else if (strcmp(val, "linear") == 0)
        dist = CGRT_BUCKETS_LINEAR;
      else if (strcmp(val, "list") == 0)
        dist = CGRT_BUCKETS_LIST;
      else {
        fprintf(stderr, "cgrt buckets: --dist '%s': expected exponential, linear or list\n", val);
        goto out;
      }
      continue;
    }
    usage();
    goto out;
  }
  if (have_list && !dist_given)
    dist = CGRT_BUCKETS_LIST; /* --list alone means a list */
  const int64_t *lp = have_list ? list : v->bucket_list;
  size_t ln = have_list ? list_len : v->bucket_list_len;
  if (graphs > 1000000 || tp > 1000000 || graphs < -1000000 || tp < -1000000) {
    fprintf(stderr, "cgrt buckets: --num-graphs and --tp must be below one million\n");
    goto out;
  }
  int64_t *sizes = NULL;
  size_t n = 0;
  char err[512];
  if (cgrt_tool_buckets_build(dist, max, (int)graphs, (int)tp, lp, ln, &sizes, &n, err,
                              sizeof(err)) != 0) {
    fprintf(stderr, "cgrt buckets: %s\n", err);
    status = EXIT_INVALID;
    goto out;
  }
  for (size_t i = n; i-- > 0;)
    printf("%lld%s", (long long)sizes[i], i ? " " : "\n");
  cgrt_tool_free(sizes);
  status = 0;
out:
  cgrt_tool_config_free(cfg);
  return status;
}
