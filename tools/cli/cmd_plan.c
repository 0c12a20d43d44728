/*
 * cmd_plan.c - `cgrt plan FILE [--workload decode|train] [--json]`: on a GPU, warms up and
 * captures every graph the configuration would build for a reference workload (decode: every
 * token bucket; train: every scoped call of a step), prints each graph's device memory, nodes,
 * capture and instantiate time, and the total against the configured memory_budget, then
 * releases them. The question an operator asks before a deployment: what will the graphs cost?
 * With --traffic TRAFFIC (plan_time.c): the buckets that minimize the expected step time over a
 * traffic file beside the padded-token plan, offline.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrt/cgrt.h"
#include "bench_plugin.h"
#include "plan_time.h"
#include "tool.h"
#include "tool_args.h"

#define MIB (1024.0 * 1024.0)

/* One graph's figures and its own copy of its name. g.name is left NULL: the rows are moved
   (realloc, qsort), so a pointer into a row would name whichever row comes to sit there. */
struct plan_row {
  char name[160];
  cgrt_graph_info g;
};

struct plan {
  int json;
  const char *workload;
  struct plan_row *rows;
  size_t n, cap;
};

static int collect(void *user, const cgrt_graph_info *g) {
  struct plan *p = user;
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    struct plan_row *r = realloc(p->rows, cap * sizeof(*r));
    if (!r)
      return CGRT_E_NOMEM;
    p->rows = r;
    p->cap = cap;
  }
  struct plan_row *r = &p->rows[p->n++];
  r->g = *g;
  snprintf(r->name, sizeof(r->name), "%s", g->name);
  r->g.name = NULL;
  r->g.module = NULL; /* cgrt's, valid only during the callback */
  return 0;
}

static int by_bytes(const void *a, const void *b) {
  const struct plan_row *x = a, *y = b;
  if (x->g.bytes != y->g.bytes)
    return x->g.bytes < y->g.bytes ? 1 : -1;
  return strcmp(x->name, y->name);
}

static int report(cgrt_runtime *rt, const char *what, uint64_t budget, void *user) {
  struct plan *p = user;
  int rc = cgrt_graph_list(rt, collect, p);
  if (rc != 0) {
    fprintf(stderr, "cgrt plan: listing the graphs: %s\n", cgrt_strerror(rc));
    return EXIT_UNUSABLE;
  }
  qsort(p->rows, p->n, sizeof(*p->rows), by_bytes);
  cgrt_stats s = {.struct_size = sizeof(s)};
  cgrt_stats_get(rt, &s);
  double cap_ms = 0, inst_ms = 0;
  uint64_t nodes = 0;
  for (size_t i = 0; i < p->n; i++) {
    cap_ms += (double)p->rows[i].g.capture_ns / 1e6;
    inst_ms += (double)p->rows[i].g.instantiate_ns / 1e6;
    nodes += p->rows[i].g.nodes;
  }
  uint64_t total = s.graph_bytes + s.graph_pool_idle;
  cgrt_release_report rel = {.struct_size = sizeof(rel)};
  rc = cgrt_release_graphs_ex(rt, &rel);
  if (p->json) {
    printf("{\"workload\":\"%s\",\"backend\":", p->workload); /* decode or train */
    tool_json_string(cgrt_backend_name(rt));
    printf(",\"what\":");
    tool_json_string(what);
    printf(",\"graphs\":[");
    for (size_t i = 0; i < p->n; i++) {
      const cgrt_graph_info *g = &p->rows[i].g;
      printf("%s{\"graph\":", i ? "," : "");
      tool_json_string(p->rows[i].name);
      printf(",\"bytes\":%llu,\"pool_bytes\":%llu,\"exec_bytes\":%llu,\"alloc_bytes\":%llu,"
             "\"nodes\":%llu,\"capture_ms\":%.3f,\"instantiate_ms\":%.3f}",
             (unsigned long long)g->bytes, (unsigned long long)g->pool_bytes,
             (unsigned long long)g->exec_bytes, (unsigned long long)g->alloc_bytes,
             (unsigned long long)g->nodes, (double)g->capture_ns / 1e6,
             (double)g->instantiate_ns / 1e6);
    }
    printf("],\"total_bytes\":%llu,\"pool_idle_bytes\":%llu,\"driver_reserved_bytes\":%llu,"
           "\"nodes\":%llu,\"capture_ms\":%.3f,\"instantiate_ms\":%.3f,\"memory_budget\":%llu,"
           "\"fits\":%s,\"released_graphs\":%llu,\"released_bytes\":%llu,"
           "\"reserved_after_release\":%llu}\n",
           (unsigned long long)total, (unsigned long long)s.graph_pool_idle,
           (unsigned long long)s.graph_mem_reserved, (unsigned long long)nodes, cap_ms, inst_ms,
           (unsigned long long)budget, !budget || total <= budget ? "true" : "false",
           (unsigned long long)rel.graphs, (unsigned long long)rel.bytes,
           (unsigned long long)rel.pool_reserved_after);
    return rc == 0 ? EXIT_VALID : EXIT_UNUSABLE;
  }
  printf("cgrt plan: workload %s (%s), backend %s: %zu graphs\n", p->workload, what,
         cgrt_backend_name(rt), p->n);
  printf("bytes = growth of the graph memory pool while the graph was built (graphs launched on "
         "one stream share it) + the executable's own memory\n");
  printf("%-44s %10s %10s %10s %7s %10s %8s\n", "graph", "MiB", "pool_MiB", "alloc_MiB", "nodes",
         "capture_ms", "inst_ms");
  for (size_t i = 0; i < p->n; i++) {
    const cgrt_graph_info *g = &p->rows[i].g;
    printf("%-44.44s %10.2f %10.2f %10.2f %7llu %10.3f %8.3f\n", p->rows[i].name,
           (double)g->bytes / MIB, (double)g->pool_bytes / MIB, (double)g->alloc_bytes / MIB,
           (unsigned long long)g->nodes, (double)g->capture_ns / 1e6,
           (double)g->instantiate_ns / 1e6);
  }
  printf("%-44s %10.2f %10s %10s %7llu %10.3f %8.3f\n", "total", (double)s.graph_bytes / MIB, "",
         "", (unsigned long long)nodes, cap_ms, inst_ms);
  printf("driver: %.2f MiB of graph memory reserved (%.2f MiB idle in the pool)\n",
         (double)s.graph_mem_reserved / MIB, (double)s.graph_pool_idle / MIB);
  if (budget)
    printf("memory_budget %.2f MiB: %s\n", (double)budget / MIB,
           total <= budget ? "every graph fits"
                           : "the graphs do not all fit: the least recently used are evicted, "
                             "and calls whose graph cannot fit run eagerly (budget_eager)");
  else
    printf("memory_budget off: set [cuda_graph] memory_budget to keep graphs under a size\n");
  printf("released: %llu graphs, %.2f MiB; the driver now reserves %.2f MiB of graph memory\n",
         (unsigned long long)rel.graphs, (double)rel.bytes / MIB,
         (double)rel.pool_reserved_after / MIB);
  return rc == 0 ? EXIT_VALID : EXIT_UNUSABLE;
}

/* The usage, on out: stdout for --help, stderr after a misuse. */
static void usage(FILE *out) {
  fprintf(out, "usage: cgrt plan FILE [--workload decode|train] [--json]\n"
               "       cgrt plan [FILE] --traffic TRAFFIC [--costs COSTS | [--step-us A]\n"
               "                 [--launch-us L] [--token-us W]] [--json]\n");
}

/* A model figure in microseconds: a finite number from 0. */
static int model_figure(const char *opt, const char *text, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !(v >= 0) || v > 1e12) {
    char q[64];
    fprintf(stderr, "cgrt plan: %s '%s': expected microseconds, a number from 0 to 1e12\n", opt,
            tool_quote(text, q, sizeof(q)));
    return -1;
  }
  *out = v;
  return 0;
}

int cmd_plan(int argc, char **argv) {
  struct plan p = {.workload = "decode"};
  const char *conf = NULL, *traffic = NULL, *costs = NULL, *model_opt = NULL;
  int workload_given = 0;
  struct plan_model model = {PLAN_MODEL_STEP_US, PLAN_MODEL_LAUNCH_US, PLAN_MODEL_TOKEN_US};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    int valued = strcmp(a, "--workload") == 0 || strcmp(a, "--traffic") == 0 ||
                 strcmp(a, "--costs") == 0 || strcmp(a, "--step-us") == 0 ||
                 strcmp(a, "--launch-us") == 0 || strcmp(a, "--token-us") == 0;
    if (strcmp(a, "--json") == 0) {
      p.json = 1;
    } else if (valued && val) {
      i++;
      if (strcmp(a, "--workload") == 0) {
        p.workload = val;
        workload_given = 1;
      } else if (strcmp(a, "--traffic") == 0) {
        traffic = val;
      } else if (strcmp(a, "--costs") == 0) {
        costs = val;
      } else {
        model_opt = a;
        if (model_figure(a, val,
                         strcmp(a, "--step-us") == 0     ? &model.step_us
                         : strcmp(a, "--launch-us") == 0 ? &model.launch_us
                                                         : &model.token_us) != 0)
          return EXIT_UNUSABLE;
      }
    } else if (a[0] != '-' && !conf) {
      conf = a;
    } else {
      if (valued)
        fprintf(stderr, "cgrt plan: %s needs a value\n", a);
      else if (a[0] != '-')
        fprintf(stderr, "cgrt plan: one configuration file: '%s' after '%s'\n", a, conf);
      else
        fprintf(stderr, "cgrt plan: unknown option '%s'\n", a);
      usage(stderr);
      return EXIT_UNUSABLE;
    }
  }
  if (!traffic && (costs || model_opt)) {
    fprintf(stderr, "cgrt plan: %s plans a traffic file: give --traffic TRAFFIC\n",
            costs ? "--costs" : model_opt);
    return EXIT_UNUSABLE;
  }
  if (traffic && (workload_given || (costs && model_opt))) {
    fprintf(stderr,
            workload_given ? "cgrt plan: --workload is the GPU plan's, not --traffic's\n"
                           : "cgrt plan: --costs or the model's figures (%s), not both\n",
            model_opt);
    return EXIT_UNUSABLE;
  }
  if (!conf && !traffic) {
    fprintf(stderr, "cgrt plan: which configuration? give its FILE\n");
    usage(stderr);
    return EXIT_UNUSABLE;
  }
  if (strcmp(p.workload, "decode") != 0 && strcmp(p.workload, "train") != 0) {
    fprintf(stderr, "cgrt plan: unknown workload '%s' (decode, train)\n", p.workload);
    return EXIT_UNUSABLE;
  }
  /* The file first: without a GPU, a wrong path is said before "no CUDA device". */
  char err[1024];
  if (conf && tool_check_input(conf, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt plan: %s\n", err);
    return EXIT_UNUSABLE;
  }
  if (traffic) /* offline: no GPU, no libcgrt-bench.so */
    return plan_traffic(conf, traffic, costs, &model, p.json);
  /* The workloads are libcgrt-bench.so (bench_plugin.h), loaded only now. */
  const struct cgrt_bench_plugin *plugin = NULL;
  int status = bench_plugin_load("cgrt plan", &plugin);
  if (status == EXIT_VALID)
    status = plugin->plan(p.workload, conf, report, &p);
  free(p.rows);
  return status;
}
