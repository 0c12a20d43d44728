/*
 * cmd_buckets.c - `cgrt buckets`: the inference token buckets for given options (from a config
 * file's [inference] section, then the command-line options), largest first, as Megatron-LM
 * prints them. With --histogram FILE: the offline planner, the K buckets that pad the file's
 * traffic least, against the exponential and linear sets of the same K.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"
#include "tool_args.h"
#include "traffic.h"

#define MAX_LIST 1024

/* The options' ranges: those of [inference] max_tokens and list; num_graphs and tp_size up to
   a million (the planner's arrays hold num_graphs sizes). */
#define GRAPHS_MAX 1000000
#define TP_MAX     1000000

static int parse_list(const char *s, int64_t *list, size_t *n) {
  *n = 0;
  char *copy = strdup(s);
  if (!copy)
    return -1;
  int rc = 0;
  for (char *save, *tok = strtok_r(copy, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
    if (*n == MAX_LIST) {
      fprintf(stderr, "cgrt buckets: --list: more than %d sizes; give at most %d\n", MAX_LIST,
              MAX_LIST);
      rc = -1;
      break;
    }
    if (tool_opt_int("cgrt buckets", "--list", tok, 1, INT64_MAX, &list[*n]) != 0) {
      rc = -1;
      break;
    }
    (*n)++;
  }
  if (rc == 0 && *n == 0) {
    char q[64];
    fprintf(stderr,
            "cgrt buckets: --list '%s': expected bucket sizes, whole numbers from 1 to %" PRId64
            " separated by spaces or commas\n",
            tool_quote(s, q, sizeof(q)), INT64_MAX);
    rc = -1;
  }
  free(copy);
  return rc;
}

/* The usage, on out: stdout for --help, stderr after a misuse. */
static void usage(FILE *out) {
  fprintf(out,
          "usage: cgrt buckets [FILE] [--max-tokens N] [--num-graphs K] [--tp T]\n"
          "                    [--dist exponential|linear|list] [--list 'A B ...']\n"
          "       cgrt buckets --histogram TRAFFIC --num-graphs K [--tp T] [--max-tokens N]\n"
          "  whole numbers: --max-tokens and each --list size 1 to %" PRId64 ",\n"
          "  --num-graphs 1 to %d, --tp 1 to %d\n",
          INT64_MAX, GRAPHS_MAX, TP_MAX);
}

static void print_set_row(const char *name, const int64_t *set, size_t n, double padded,
                          double real) {
  char text[1024];
  size_t off = 0;
  text[0] = '\0';
  for (size_t i = n; i-- > 0 && off < sizeof(text) - 24;)
    off += (size_t)snprintf(text + off, sizeof(text) - off, "%s%lld", off ? " " : "",
                            (long long)set[i]);
  printf("%-12s %14.0f %12.2f%%  %s\n", name, padded,
         padded + real > 0 ? 100.0 * padded / (padded + real) : 0.0, text);
}

/*
 * --histogram: the optimal set for the file's traffic and the padded-token share (padding over
 * all tokens processed) of it, of the exponential set and of the linear set with the same K.
 */
static int plan_histogram(const char *path, int64_t k, int64_t tp, int64_t max, int max_given) {
  if (k < 1 || tp < 1 || (max_given && max < tp)) {
    fprintf(stderr, "cgrt buckets: --num-graphs and --tp must be at least 1, --max-tokens at "
                    "least --tp\n");
    return EXIT_INVALID;
  }
  struct traffic t;
  char err[1024];
  if (traffic_load(path, max_given ? max : 0, &t, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt buckets: %s\n", err);
    return EXIT_INVALID;
  }
  if (!max_given) /* the largest count seen, as a bucket size */
    max = t.largest % tp ? t.largest + (tp - t.largest % tp) : t.largest;
  if (traffic_check_padding(&t, path, max, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt buckets: %s\n", err);
    traffic_free(&t);
    return EXIT_INVALID;
  }
  int64_t *sizes = NULL, *opt = NULL, *expo = NULL, *lin = NULL;
  double *steps = NULL, *tokens = NULL;
  size_t n = 0, nopt = 0, nexpo = 0, nlin = 0;
  int status = EXIT_UNUSABLE;
  double padded_opt = 0;
  if (traffic_histogram(&t, tp, max, &sizes, &steps, &tokens, &n) != 0 ||
      !(opt = malloc((size_t)k * sizeof(*opt))))
    goto out;
  if (cgrt_tool_buckets_optimal(sizes, steps, tokens, n, max, (int)k, opt, &nopt, &padded_opt) !=
          0 ||
      cgrt_tool_buckets_build(CGRT_BUCKETS_EXPONENTIAL, max, (int)k, (int)tp, NULL, 0, &expo,
                              &nexpo, err, sizeof(err)) != 0 ||
      cgrt_tool_buckets_build(CGRT_BUCKETS_LINEAR, max, (int)k, (int)tp, NULL, 0, &lin, &nlin, err,
                              sizeof(err)) != 0) {
    fprintf(stderr, "cgrt buckets: planning failed\n");
    goto out;
  }
  printf("traffic %s: %llu steps, %.0f real tokens, %zu distinct bucket sizes needed; "
         "K = %lld, tp = %lld, max_tokens = %lld%s\n",
         path, (unsigned long long)t.total_steps, t.total_tokens, n, (long long)k, (long long)tp,
         (long long)max, max_given ? "" : " (the largest count in the file)");
  printf("%-12s %14s %13s  %s\n", "set", "padded_tokens", "padded_share",
         "buckets (largest first)");
  print_set_row("optimal", opt, nopt, padded_opt, t.total_tokens);
  print_set_row("exponential", expo, nexpo,
                cgrt_tool_buckets_padded(sizes, steps, tokens, n, expo, nexpo), t.total_tokens);
  print_set_row("linear", lin, nlin, cgrt_tool_buckets_padded(sizes, steps, tokens, n, lin, nlin),
                t.total_tokens);
  status = 0;
out:
  free(sizes);
  free(steps);
  free(tokens);
  free(opt);
  cgrt_tool_free(expo);
  cgrt_tool_free(lin);
  traffic_free(&t);
  return status;
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
  int have_list = 0, dist_given = 0, max_given = 0;
  const char *histogram = NULL;
  int64_t max = v->max_tokens, graphs = v->num_graphs, tp = v->tp_size;
  cgrt_bucket_dist dist = v->buckets;
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      status = 0;
      goto out;
    }
    if (a[0] != '-') {
      if (file) {
        fprintf(stderr, "cgrt buckets: one FILE at most: '%s' after '%s'\n", a, file);
        usage(stderr);
        goto out;
      }
      file = a;
      char err[1024];
      if (tool_check_input(a, err, sizeof(err)) != 0) {
        fprintf(stderr, "cgrt buckets: %s\n", err);
        goto out;
      }
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
      max_given = 1;
      continue;
    }
    int known = strcmp(a, "--max-tokens") == 0 || strcmp(a, "--histogram") == 0 ||
                strcmp(a, "--num-graphs") == 0 || strcmp(a, "--tp") == 0 ||
                strcmp(a, "--list") == 0 || strcmp(a, "--dist") == 0;
    if (!known || !val) {
      if (known)
        fprintf(stderr, "cgrt buckets: %s needs a value\n", a);
      else
        fprintf(stderr, "cgrt buckets: unknown option '%s'\n", a);
      usage(stderr);
      goto out;
    }
    i++;
    if (strcmp(a, "--max-tokens") == 0) {
      if (tool_opt_int("cgrt buckets", a, val, 1, INT64_MAX, &max) != 0)
        goto out;
      max_given = 1;
    } else if (strcmp(a, "--histogram") == 0) {
      histogram = val;
    } else if (strcmp(a, "--num-graphs") == 0) {
      if (tool_opt_int("cgrt buckets", a, val, 1, GRAPHS_MAX, &graphs) != 0)
        goto out;
    } else if (strcmp(a, "--tp") == 0) {
      if (tool_opt_int("cgrt buckets", a, val, 1, TP_MAX, &tp) != 0)
        goto out;
    } else if (strcmp(a, "--list") == 0) {
      if (parse_list(val, list, &list_len) != 0)
        goto out;
      have_list = 1;
    } else {
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
    }
  }
  /* A FILE's [inference] counts are checked by the configuration, but not against these. */
  if (graphs > GRAPHS_MAX || tp > TP_MAX) {
    fprintf(stderr,
            "cgrt buckets: num_graphs = %lld, tp_size = %lld: each must be at most one million; "
            "lower them in FILE's [inference], or give --num-graphs and --tp\n",
            (long long)graphs, (long long)tp);
    goto out;
  }
  if (histogram) {
    status = plan_histogram(histogram, graphs, tp, max, max_given);
    goto out;
  }
  if (have_list && !dist_given)
    dist = CGRT_BUCKETS_LIST; /* --list alone means a list */
  const int64_t *lp = have_list ? list : v->bucket_list;
  size_t ln = have_list ? list_len : v->bucket_list_len;
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
