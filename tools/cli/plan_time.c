/*
 * plan_time.c - `cgrt plan [FILE] --traffic TRAFFIC`: the bucket set that minimizes the expected
 * step time over a traffic file (issue 43), each size served by its bucket or eagerly, whichever
 * the step costs say is faster, printed beside the padded-token plan (the set `cgrt buckets
 * --histogram` gives, every step replayed at its bucket) and FILE's own set. Offline: no GPU.
 *
 * The step costs are measured figures (--costs: `replay SIZE US` and `eager SIZE US` lines, or
 * the output of `cgrt bench --json`, several runs pooled) or a model of three figures: a step
 * replayed at bucket B costs step_us + token_us B, run eagerly at T tokens step_us + launch_us +
 * token_us T (the same work per token either way; eager pays its launches).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_time.h"
#include "tool.h"
#include "tool_args.h"
#include "traffic.h"

/* The largest costs file read, in bytes: a bench's JSON is a few KiB a run. */
#define COSTS_MAX_BYTES (16 << 20)

/* Figures of one side summed per size, to pool several runs' rows (their mean is kept). */
struct pool {
  int64_t *size;
  double *sum;
  int *count;
  size_t n, cap;
};

static int pool_add(struct pool *p, int64_t size, double us) {
  for (size_t i = 0; i < p->n; i++)
    if (p->size[i] == size) {
      p->sum[i] += us;
      p->count[i]++;
      return 0;
    }
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 16;
    int64_t *s = realloc(p->size, cap * sizeof(*s));
    if (s)
      p->size = s;
    double *u = realloc(p->sum, cap * sizeof(*u));
    if (u)
      p->sum = u;
    int *c = realloc(p->count, cap * sizeof(*c));
    if (c)
      p->count = c;
    if (!s || !u || !c)
      return -1;
    p->cap = cap;
  }
  p->size[p->n] = size;
  p->sum[p->n] = us;
  p->count[p->n] = 1;
  p->n++;
  return 0;
}

static void pool_free(struct pool *p) {
  free(p->size);
  free(p->sum);
  free(p->count);
}

/* The whole file at path into a malloc'ed NUL-terminated buffer; NULL with err. */
static char *read_all(const char *path, char *err, size_t errlen) {
  FILE *f = tool_open_input(path, err, errlen);
  if (!f)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n + 1 == cap) {
      if (cap > COSTS_MAX_BYTES) {
        snprintf(err, errlen, "%s: larger than %d MiB: not a costs file", path,
                 COSTS_MAX_BYTES >> 20);
        free(buf);
        buf = NULL;
        break;
      }
      char *b = realloc(buf, 2 * cap);
      if (!b) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) {
        snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
        free(buf);
        buf = NULL;
      }
      break;
    }
  }
  fclose(f);
  if (!buf) {
    if (!err[0])
      snprintf(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  buf[n] = '\0';
  if (strlen(buf) != n) {
    snprintf(err, errlen, "%s: a NUL byte at offset %zu: a costs file is text", path, strlen(buf));
    free(buf);
    return NULL;
  }
  return buf;
}

/* A microsecond figure: a finite number >= 0, the whole of text. */
static int parse_us(const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end || errno || !isfinite(v) || v < 0)
    return -1;
  *out = v;
  return 0;
}

/* `replay SIZE US` / `eager SIZE US` lines; '#' comments and blank lines skipped. */
static int read_text(char *buf, const char *path, struct pool *side, char *err, size_t errlen) {
  int lineno = 0;
  for (char *line = buf; line; lineno++) {
    char *next = strchr(line, '\n');
    if (next)
      *next++ = '\0';
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char *word[4] = {0};
    int nw = 0;
    for (char *save, *tok = strtok_r(line, " \t\r,", &save); tok;
         tok = strtok_r(NULL, " \t\r,", &save))
      word[nw < 4 ? nw++ : 3] = tok;
    line = next;
    if (nw == 0)
      continue;
    int64_t size;
    double us;
    char perr[256];
    int eager = nw == 3 && strcmp(word[0], "eager") == 0;
    if (nw != 3 || (!eager && strcmp(word[0], "replay") != 0) ||
        tool_parse_int("SIZE", word[1], 1, INT64_MAX, &size, perr, sizeof(perr)) != 0 ||
        parse_us(word[2], &us) != 0) {
      snprintf(err, errlen,
               "%s:%d: expected `replay SIZE US` (a step replayed at bucket SIZE took US "
               "microseconds) or `eager SIZE US` (run eagerly at SIZE tokens), SIZE a whole "
               "number from 1, US a number from 0",
               path, lineno + 1);
      return -1;
    }
    if (pool_add(&side[eager], size, us) != 0) {
      snprintf(err, errlen, "%s: out of memory", path);
      return -1;
    }
  }
  return 0;
}

/* The value of "key": in the object [obj, end) as text; NULL if absent. */
static const char *json_value(const char *obj, const char *end, const char *key) {
  char pat[64];
  snprintf(pat, sizeof(pat), "\"%s\":", key);
  size_t n = strlen(pat);
  for (const char *p = obj; p + n <= end; p++)
    if (memcmp(p, pat, n) == 0)
      return p + n;
  return NULL;
}

/*
 * `cgrt bench --json` output (decode): each row of "rows" gives eager at its token count
 * (eager_us) and, when it was replayed (served padded or exact), its bucket's replay
 * (backend_us). Several runs (one JSON object a line) are pooled: the mean per size.
 */
static int read_bench_json(const char *buf, const char *path, struct pool *side, char *err,
                           size_t errlen) {
  int rows = 0;
  for (const char *p = strstr(buf, "\"rows\":["); p; p = strstr(p, "\"rows\":[")) {
    p += strlen("\"rows\":[");
    const char *close = strchr(p, ']');
    if (!close)
      break;
    for (const char *o = strchr(p, '{'); o && o < close; o = strchr(o, '{')) {
      const char *e = strchr(o, '}');
      if (!e || e > close)
        break;
      const char *tok = json_value(o, e, "tokens"), *bucket = json_value(o, e, "bucket");
      const char *served = json_value(o, e, "served"), *eus = json_value(o, e, "eager_us");
      const char *bus = json_value(o, e, "backend_us");
      if (!tok || !bucket || !eus || !bus) {
        snprintf(err, errlen,
                 "%s: a row without tokens, bucket, eager_us and backend_us: expected the "
                 "output of `cgrt bench --json` (workload decode)",
                 path);
        return -1;
      }
      long long t = strtoll(tok, NULL, 10), b = strtoll(bucket, NULL, 10);
      double ue = strtod(eus, NULL), ub = strtod(bus, NULL);
      int replayed = !served || strncmp(served, "\"eager\"", 7) != 0;
      if (t >= 1 && isfinite(ue) && ue >= 0 && pool_add(&side[1], t, ue) != 0)
        goto nomem;
      if (replayed && b >= 1 && isfinite(ub) && ub >= 0 && pool_add(&side[0], b, ub) != 0)
        goto nomem;
      rows++;
      o = e;
    }
    p = close;
  }
  if (rows == 0) {
    snprintf(err, errlen,
             "%s: no \"rows\" of `cgrt bench --json` found: give its output (workload decode), or "
             "`replay SIZE US` and `eager SIZE US` lines",
             path);
    return -1;
  }
  return 0;
nomem:
  snprintf(err, errlen, "%s: out of memory", path);
  return -1;
}

/* The costs file at path into c: text lines or a bench's JSON (its first non-blank is '{'). */
static int load_costs(const char *path, cgrt_tool_costs *c, size_t counts[2], char *err,
                      size_t errlen) {
  err[0] = '\0';
  char *buf = read_all(path, err, errlen);
  if (!buf)
    return -1;
  struct pool side[2] = {{0}}; /* replay, eager */
  const char *s = buf;
  while (isspace((unsigned char)*s))
    s++;
  int rc = *s == '{' ? read_bench_json(buf, path, side, err, errlen)
                     : read_text(buf, path, side, err, errlen);
  for (int e = 0; rc == 0 && e < 2; e++) {
    counts[e] = side[e].n;
    for (size_t i = 0; rc == 0 && i < side[e].n; i++)
      if (cgrt_tool_costs_set(c, e, side[e].size[i], side[e].sum[i] / side[e].count[i]) != 0) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -1;
      }
  }
  if (rc == 0 && (counts[0] < 2 || counts[1] < 2)) {
    snprintf(err, errlen,
             "%s: %zu replay and %zu eager sizes: planning by time needs two sizes of each at "
             "least (cgrt bench --tokens with counts in two buckets, padded)",
             path, counts[0], counts[1]);
    rc = -1;
  }
  pool_free(&side[0]);
  pool_free(&side[1]);
  free(buf);
  return rc;
}

/* The model as two points a side (it is linear: exact everywhere). */
static int model_costs(const struct plan_model *m, int64_t max, cgrt_tool_costs *c) {
  int64_t hi = max > 1 ? max : 2;
  int rc = 0;
  rc |= cgrt_tool_costs_set(c, 0, 1, m->step_us + m->token_us);
  rc |= cgrt_tool_costs_set(c, 0, hi, m->step_us + m->token_us * (double)hi);
  rc |= cgrt_tool_costs_set(c, 1, 1, m->step_us + m->launch_us + m->token_us);
  rc |= cgrt_tool_costs_set(c, 1, hi, m->step_us + m->launch_us + m->token_us * (double)hi);
  return rc;
}

#define NROWS 4

/* One plan: a bucket set, how it serves the histogram, what it costs. */
struct plan_row {
  const char *name;
  int eager_ok;
  int64_t *set;
  size_t nset;
  double us;               /* expected time per step */
  double padded_share;     /* padded tokens over all tokens the replayed steps ran */
  double eager_share;      /* steps run eagerly over all steps */
  unsigned char *eager_at; /* per histogram size: 1 if it runs eagerly */
};

struct hist {
  int64_t *sizes;
  double *steps, *tokens;
  size_t n;
};

/* The row's figures, by the rule of cgrt_tool_plan_time (each size by its bucket, or eagerly
   above the largest or, with eager_ok, where the costs say eager is faster). */
static void serve(const struct hist *h, const cgrt_tool_costs *c, struct plan_row *r) {
  double eager = 0, all = 0, padded = 0, real = 0;
  r->us = cgrt_tool_plan_time(h->sizes, h->steps, h->tokens, h->n, r->set, r->nset, c, r->eager_ok,
                              &eager);
  size_t b = 0;
  for (size_t i = 0; i < h->n; i++) {
    all += h->steps[i];
    while (b < r->nset && r->set[b] < h->sizes[i])
      b++;
    int e = b == r->nset || (r->eager_ok && cgrt_tool_costs_at(c, 1, h->sizes[i]) <
                                                cgrt_tool_costs_at(c, 0, r->set[b]));
    r->eager_at[i] = (unsigned char)e;
    if (!e) {
      padded += h->steps[i] * (double)r->set[b] - h->tokens[i];
      real += h->tokens[i];
    }
  }
  r->eager_share = all > 0 ? eager / all : 0;
  r->padded_share = padded + real > 0 ? padded / (padded + real) : 0;
}

/* The sizes served eagerly as ranges of the histogram's consecutive sizes: "300-400 480". */
static void eager_ranges(const struct hist *h, const struct plan_row *r, char *out, size_t len) {
  size_t off = 0;
  out[0] = '\0';
  for (size_t i = 0; i < h->n && off + 48 < len;) {
    if (!r->eager_at[i]) {
      i++;
      continue;
    }
    size_t j = i;
    while (j + 1 < h->n && r->eager_at[j + 1])
      j++;
    off += (size_t)snprintf(out + off, len - off, "%s%lld", off ? " " : "", (long long)h->sizes[i]);
    if (j > i)
      off += (size_t)snprintf(out + off, len - off, "-%lld", (long long)h->sizes[j]);
    i = j + 1;
  }
}

static void print_text(const char *traffic, const struct traffic *t, const struct hist *h,
                       const char *conf, int64_t k, int64_t tp, int64_t max, const char *costs,
                       const struct plan_model *m, const size_t counts[2],
                       const struct plan_row *rows, int nrows, int coincide) {
  printf("cgrt plan: traffic %s: %llu steps, %.0f real tokens, %zu distinct bucket sizes needed; "
         "num_graphs = %lld, tp_size = %lld, max_tokens = %lld (%s)\n",
         traffic, (unsigned long long)t->total_steps, t->total_tokens, h->n, (long long)k,
         (long long)tp, (long long)max, conf ? conf : "the defaults");
  if (costs)
    printf("step costs: measured, %s (%zu replay and %zu eager sizes, linear between them and "
           "beyond)\n",
           costs, counts[0], counts[1]);
  else
    printf("step costs: modeled, replayed at bucket B %.4g + %.4g B us, eagerly at T tokens %.4g "
           "+ %.4g T us (--step-us, --launch-us, --token-us; give --costs for measured ones)\n",
           m->step_us, m->token_us, m->step_us + m->launch_us, m->token_us);
  printf("%-16s %11s %10s %9s %12s %11s  %s\n", "plan", "us_per_step", "total_ms", "vs_tokens",
         "padded_share", "eager_share", "buckets (largest first); eager at");
  for (int i = 0; i < nrows; i++) {
    const struct plan_row *r = &rows[i];
    char set[1024], eager[1024];
    size_t off = 0;
    set[0] = '\0';
    for (size_t b = r->nset; b-- > 0 && off + 24 < sizeof(set);)
      off += (size_t)snprintf(set + off, sizeof(set) - off, "%s%lld", off ? " " : "",
                              (long long)r->set[b]);
    eager_ranges(h, r, eager, sizeof(eager));
    printf("%-16s %11.1f %10.1f %8.3fx %11.2f%% %10.2f%%  %s%s%s\n", r->name, r->us,
           r->us * (double)t->total_steps / 1e3, r->us / rows[1].us, 100.0 * r->padded_share,
           100.0 * r->eager_share, set, eager[0] ? "; eager at " : "", eager);
  }
  if (coincide)
    printf("the plan by time and the padded-token plan coincide: the same buckets, no size served "
           "eagerly, %.1f us per step\n",
           rows[0].us);
  else
    printf("the plan by time: %.1f us per step, %.2f%% less than the padded-token plan's %.1f us "
           "(%.1f ms over the traffic)\n",
           rows[0].us, 100.0 * (1.0 - rows[0].us / rows[1].us), rows[1].us,
           (rows[1].us - rows[0].us) * (double)t->total_steps / 1e3);
}

static void print_json(const char *traffic, const struct traffic *t, const struct hist *h,
                       int64_t k, int64_t tp, int64_t max, const char *costs,
                       const struct plan_model *m, const size_t counts[2],
                       const struct plan_row *rows, int nrows, int coincide) {
  printf("{\"traffic\":");
  tool_json_string(traffic);
  printf(",\"steps\":%llu,\"real_tokens\":%.0f,\"sizes\":%zu,\"num_graphs\":%lld,\"tp_size\":%lld,"
         "\"max_tokens\":%lld,\"costs\":",
         (unsigned long long)t->total_steps, t->total_tokens, h->n, (long long)k, (long long)tp,
         (long long)max);
  if (costs) {
    printf("{\"file\":");
    tool_json_string(costs);
    printf(",\"replay_sizes\":%zu,\"eager_sizes\":%zu}", counts[0], counts[1]);
  } else {
    printf("{\"step_us\":%g,\"launch_us\":%g,\"token_us\":%g}", m->step_us, m->launch_us,
           m->token_us);
  }
  printf(",\"plans\":[");
  for (int i = 0; i < nrows; i++) {
    const struct plan_row *r = &rows[i];
    printf("%s{\"plan\":\"%s\",\"us_per_step\":%.3f,\"total_ms\":%.3f,\"padded_share\":%.6f,"
           "\"eager_share\":%.6f,\"buckets\":[",
           i ? "," : "", r->name, r->us, r->us * (double)t->total_steps / 1e3, r->padded_share,
           r->eager_share);
    for (size_t b = 0; b < r->nset; b++)
      printf("%s%lld", b ? "," : "", (long long)r->set[b]);
    printf("],\"eager_sizes\":[");
    int first = 1;
    for (size_t s = 0; s < h->n; s++)
      if (r->eager_at[s]) {
        printf("%s%lld", first ? "" : ",", (long long)h->sizes[s]);
        first = 0;
      }
    printf("]}");
  }
  printf("],\"time_vs_tokens\":%.6f,\"coincide\":%s}\n", rows[0].us / rows[1].us,
         coincide ? "true" : "false");
}

int plan_traffic(const char *conf, const char *traffic, const char *costs,
                 const struct plan_model *model, int json) {
  cgrt_tool_config *cfg = NULL;
  int status = conf ? tool_load_config(conf, NULL, NULL, &cfg, 0)
                    : tool_load_config(NULL, "", "<defaults>", &cfg, 0);
  if (status != EXIT_VALID)
    return status;
  const struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  int64_t max = v->max_tokens, k = v->num_graphs, tp = v->tp_size;
  struct traffic t = {0};
  struct hist h = {0};
  cgrt_tool_costs *c = NULL;
  /* the plan by time, the padded-token plan, FILE's set as it is and as [local] by_time would
     serve it without exact buckets (each size by its bucket or eagerly, whichever is faster) */
  struct plan_row rows[NROWS] = {{.name = "by_time", .eager_ok = 1},
                                 {.name = "by_tokens"},
                                 {.name = "configured"},
                                 {.name = "configured+eager", .eager_ok = 1}};
  size_t counts[2] = {0, 0};
  char err[1024];
  status = EXIT_INVALID;
  if (traffic_load(traffic, max, &t, err, sizeof(err)) != 0 ||
      traffic_check_padding(&t, traffic, max, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt plan: %s\n", err);
    goto out;
  }
  status = EXIT_UNUSABLE;
  if (cgrt_tool_costs_new(&c) != 0 ||
      traffic_histogram(&t, tp, max, &h.sizes, &h.steps, &h.tokens, &h.n) != 0)
    goto nomem;
  if (costs) {
    if (load_costs(costs, c, counts, err, sizeof(err)) != 0) {
      fprintf(stderr, "cgrt plan: --costs %s\n", err);
      status = EXIT_INVALID;
      goto out;
    }
  } else if (model_costs(model, max, c) != 0) {
    goto nomem;
  }
  for (int i = 0; i < NROWS; i++)
    if (!(rows[i].eager_at = calloc(h.n ? h.n : 1, 1)))
      goto nomem;
  if (!(rows[0].set = malloc((size_t)k * sizeof(int64_t))) ||
      !(rows[1].set = malloc((size_t)k * sizeof(int64_t))))
    goto nomem;
  double t0 = 0, p1 = 0;
  int rc = cgrt_tool_buckets_fastest(h.sizes, h.steps, h.tokens, h.n, max, (int)k, c, 1,
                                     rows[0].set, &rows[0].nset, &t0);
  if (rc == CGRT_E_CAPACITY) {
    fprintf(stderr,
            "cgrt plan: %s: %zu distinct bucket sizes; planning by time takes at most 4096 "
            "(raise tp_size, or plan by padded tokens with cgrt buckets --histogram)\n",
            traffic, h.n);
    goto out;
  }
  if (rc == 0)
    rc = cgrt_tool_buckets_optimal(h.sizes, h.steps, h.tokens, h.n, max, (int)k, rows[1].set,
                                   &rows[1].nset, &p1);
  /* FILE's set (adaptive: the exponential set it starts from), every step at its bucket */
  if (rc == 0)
    rc = cgrt_tool_buckets_build(v->buckets, max, (int)k, (int)tp, v->bucket_list,
                                 v->bucket_list_len, &rows[2].set, &rows[2].nset, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "cgrt plan: planning %s failed: %s\n", traffic, cgrt_strerror(rc));
    goto out;
  }
  if (!(rows[3].set = malloc((rows[2].nset ? rows[2].nset : 1) * sizeof(int64_t))))
    goto nomem;
  memcpy(rows[3].set, rows[2].set, rows[2].nset * sizeof(int64_t));
  rows[3].nset = rows[2].nset;
  for (int i = 0; i < NROWS; i++)
    serve(&h, c, &rows[i]);
  int coincide = rows[0].nset == rows[1].nset && rows[0].eager_share == rows[1].eager_share &&
                 memcmp(rows[0].set, rows[1].set, rows[0].nset * sizeof(int64_t)) == 0;
  if (json)
    print_json(traffic, &t, &h, k, tp, max, costs, model, counts, rows, NROWS, coincide);
  else
    print_text(traffic, &t, &h, conf, k, tp, max, costs, model, counts, rows, NROWS, coincide);
  status = EXIT_VALID;
  goto out;
nomem:
  fprintf(stderr, "cgrt plan: out of memory\n");
out:
  for (int i = 0; i < NROWS; i++) {
    free(rows[i].eager_at);
    if (i == 2)
      cgrt_tool_free(rows[i].set);
    else
      free(rows[i].set);
  }
  free(h.sizes);
  free(h.steps);
  free(h.tokens);
  cgrt_tool_costs_free(c);
  traffic_free(&t);
  cgrt_tool_config_free(cfg);
  return status;
}
