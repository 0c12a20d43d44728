/*
 * cmd_bench.c - `cgrt bench`: measure a workload under the configured backend.
 *
 * Workloads:
 *   decode    L decoder layers over a KV cache, token buckets (bench_gpu.c; needs a GPU)
 *   chain     N tiny dependent kernels in one module: launch overhead alone (needs a GPU)
 *   train     forward, backward and update over microbatches (bench_train.c; needs a GPU)
 *   cp        decoder layers over packed sequences split across a context-parallel group, one
 *             process per GPU (bench_cp.c; needs --ranks GPUs and NCCL)
 *   dispatch  the host-side cost of one module call through cgrt (core, backend vtable, host API)
 *             over a direct call of the same callback; runs on the host driver, no GPU needed.
 *
 * The GPU workloads live in libcgrt-bench.so (tools/bench/, through bench_plugin.h), loaded when
 * one is asked for; dispatch and the checks of the options run here, with no CUDA library loaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrt/cgrt.h"
#include "bench_plugin.h"
#include "tool.h"

#define REPS 9

struct dispatch {
  cgrt_runtime *rt;
  cgrt_module *m;
  long calls;
  volatile long sink;
  double ns_cgrt[REPS];
  double ns_direct[REPS];
  int rep;
};

static int noop_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)ctx;
  (void)args;
  ((struct dispatch *)user)->sink++;
  return 0;
}

/* Called through a volatile pointer so the compiler cannot inline the direct call. */
static cgrt_module_fn volatile direct_fn = noop_module;

static int dispatch_body(const cgrt_ctx *ctx, void *user) {
  struct dispatch *d = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  uint64_t t0 = cgrt_tool_now_ns();
  for (long i = 0; i < d->calls; i++) {
    int rc = cgrt_forward(d->rt, d->m, ctx, &a);
    if (rc)
      return rc;
  }
  uint64_t t1 = cgrt_tool_now_ns();
  for (long i = 0; i < d->calls; i++)
    direct_fn(ctx, &a, d);
  uint64_t t2 = cgrt_tool_now_ns();
  d->ns_cgrt[d->rep] = (double)(t1 - t0) / (double)d->calls;
  d->ns_direct[d->rep] = (double)(t2 - t1) / (double)d->calls;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return v[n / 2];
}

/* cfg is consumed. */
static int bench_dispatch(cgrt_tool_config *cfg, long calls, int json) {
  struct dispatch d = {.calls = calls};
  struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  v->driver = CGRT_DRIVER_HOST;
  v->bind_cpu = 0;
  v->log_level = CGRT_LOG_WARN;
  int rc = cgrt_tool_open(&d.rt, cfg, NULL, NULL);
  if (rc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(NULL));
    return EXIT_UNUSABLE;
  }
  cgrt_module_desc md = {.struct_size = sizeof(md),
                         .name = "noop",
                         .kind = CGRT_KIND_OTHER,
                         .layer = -1,
                         .forward = noop_module,
                         .user = &d};
  rc = cgrt_module_register(d.rt, &md, &d.m);
  /* One warm-up step (its figures land in slot 0 and are overwritten), then REPS measured. */
  for (int r = -1; rc == 0 && r < REPS; r++) {
    cgrt_step_desc sd = {
        .struct_size = sizeof(sd), .phase = CGRT_PHASE_TRAIN, .body = dispatch_body, .user = &d};
    d.rep = r < 0 ? 0 : r;
    rc = cgrt_step(d.rt, &sd, NULL);
  }
  if (rc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(d.rt));
    cgrt_close(d.rt);
    return EXIT_UNUSABLE;
  }
  const char *backend = cgrt_backend_name(d.rt);
  double via = median(d.ns_cgrt, REPS), direct = median(d.ns_direct, REPS);
  if (json)
    printf("{\"workload\":\"dispatch\",\"backend\":\"%s\",\"driver\":\"host\",\"calls\":%ld,"
           "\"repetitions\":%d,\"direct_ns\":%.2f,\"cgrt_ns\":%.2f,\"overhead_ns\":%.2f}\n",
           backend, calls, REPS, direct, via, via - direct);
  else
    printf("workload dispatch: backend %s, host driver, %ld calls x %d repetitions (median)\n"
           "  direct call of the module callback   %8.2f ns/call\n"
           "  cgrt_forward through the backend     %8.2f ns/call\n"
           "  overhead per call                    %8.2f ns/call\n",
           backend, calls, REPS, direct, via, via - direct);
  cgrt_close(d.rt);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: cgrt bench [CONF] [--workload decode|chain|train|cp|dispatch] [--tokens 'LIST']\n"
          "                  [--steps N] [--warmup N] [--warmup-ms MS] [--blocks N] [--kernels N]\n"
          "                  [--calls N] [--ranks N] [--timeout S] [--json] [--plot FILE.svg]\n"
          "                  [--explain] [--cp-shape launch|compute] [--traffic FILE]\n"
          "                  [--memory-budget SIZE|off]\n");
}

/* Parses a space- or comma-separated list of positive token counts. */
static int parse_tokens(const char *s, struct bench_opts *o) {
  o->num_tokens = 0;
  const char *p = s;
  while (*p) {
    while (*p == ' ' || *p == ',')
      p++;
    if (!*p)
      break;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 1 || o->num_tokens == BENCH_MAX_TOKENS)
      return -1;
    o->tokens[o->num_tokens++] = v;
    p = end;
  }
  return o->num_tokens > 0 ? 0 : -1;
}

/*
 * --memory-budget: read by the configuration's own parser (a one-key INI), so it takes what
 * [cuda_graph] memory_budget takes and is refused with the same message.
 */
static int parse_budget(const char *text, struct bench_opts *o) {
  char ini[256];
  if (snprintf(ini, sizeof(ini), "[cuda_graph]\nimpl = local\nmemory_budget = %s\n", text) >=
      (int)sizeof(ini))
    return -1;
  cgrt_tool_config *cfg = NULL;
  if (tool_load_config(NULL, ini, "--memory-budget", &cfg, 0) != EXIT_VALID)
    return -1;
  o->set_budget = 1;
  o->memory_budget = cgrt_tool_config_view(cfg)->memory_budget;
  cgrt_tool_config_free(cfg);
  return 0;
}

int cmd_bench(int argc, char **argv) {
  struct bench_opts o = {.workload = "decode",
                         .steps = 200,
                         .warmup = 20,
                         .warmup_ms = 100,
                         .blocks = 5,
                         .chain_kernels = 64};
  long calls = 2000000;
  const char *tokens = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--json") == 0)
      o.json = 1;
    else if (strcmp(a, "--workload") == 0 && val)
      o.workload = argv[++i];
    else if (strcmp(a, "--tokens") == 0 && val)
      tokens = argv[++i];
    else if (strcmp(a, "--steps") == 0 && val)
      o.steps = atoi(argv[++i]);
    else if (strcmp(a, "--warmup") == 0 && val)
      o.warmup = atoi(argv[++i]);
    else if (strcmp(a, "--warmup-ms") == 0 && val)
      o.warmup_ms = atoi(argv[++i]);
    else if (strcmp(a, "--blocks") == 0 && val)
      o.blocks = atoi(argv[++i]);
    else if (strcmp(a, "--explain") == 0)
      o.explain = 1;
    else if (strcmp(a, "--cp-shape") == 0 && val)
      o.cp_shape = argv[++i];
    else if (strcmp(a, "--plot") == 0 && val)
      o.plot = argv[++i];
    else if (strcmp(a, "--kernels") == 0 && val)
      o.chain_kernels = atoi(argv[++i]);
    else if (strcmp(a, "--calls") == 0 && val)
      calls = atol(argv[++i]);
    else if (strcmp(a, "--ranks") == 0 && val)
      o.ranks = atoi(argv[++i]);
    else if (strcmp(a, "--timeout") == 0 && val)
      o.timeout_s = atoi(argv[++i]);
    else if (strcmp(a, "--traffic") == 0 && val)
      o.traffic = argv[++i];
    else if (strcmp(a, "--memory-budget") == 0 && val) {
      if (parse_budget(argv[++i], &o) != 0) {
        fprintf(stderr, "cgrt bench: --memory-budget takes what [cuda_graph] memory_budget "
                        "takes: off, or e.g. 512 MiB\n");
        return EXIT_INVALID;
      }
    } else if (a[0] != '-' && !o.conf)
      o.conf = a;
    else {
      usage();
      return EXIT_UNUSABLE;
    }
  }
  if (o.steps < 1 || o.warmup < 0 || o.warmup_ms < 0 || o.blocks < 1 || o.chain_kernels < 1 ||
      calls < 1 || o.ranks < 0 || o.timeout_s < 0) {
    fprintf(stderr, "cgrt bench: --steps, --blocks, --kernels, --calls, --ranks, --timeout, "
                    "--warmup and --warmup-ms must be positive\n");
    return EXIT_UNUSABLE;
  }
  int gpu_rows = strcmp(o.workload, "decode") == 0 || strcmp(o.workload, "chain") == 0;
  if ((o.explain || o.plot) && !gpu_rows) {
    fprintf(stderr, "cgrt bench: --explain and --plot are for --workload decode or chain\n");
    return EXIT_UNUSABLE;
  }
  if (!gpu_rows)
    o.warmup_ms = 0; /* cp: every rank must run the same number of steps */
  int is_chain = strcmp(o.workload, "chain") == 0;
  if (parse_tokens(tokens ? tokens : is_chain ? "1" : "1 3 8 37 64", &o) != 0) {
    fprintf(stderr, "cgrt bench: --tokens wants positive integers, at most %d\n", BENCH_MAX_TOKENS);
    return EXIT_UNUSABLE;
  }
  if (o.traffic && strcmp(o.workload, "decode") != 0) {
    fprintf(stderr, "cgrt bench: --traffic replays token counts through the decode workload; "
                    "use --workload decode\n");
    return EXIT_UNUSABLE;
  }
  /* The GPU workloads are libcgrt-bench.so, loaded only now: dispatch runs on the host. */
  if (o.traffic || gpu_rows || strcmp(o.workload, "train") == 0 || strcmp(o.workload, "cp") == 0) {
    const struct cgrt_bench_plugin *p = NULL;
    int status = bench_plugin_load("cgrt bench", &p);
    return status == EXIT_VALID ? p->bench(&o) : status;
  }
  if (strcmp(o.workload, "dispatch") != 0) {
    fprintf(stderr, "cgrt bench: unknown workload '%s' (decode, chain, train, cp, dispatch)\n",
            o.workload);
    return EXIT_UNUSABLE;
  }
  cgrt_tool_config *cfg = NULL;
  int status = tool_load_config(o.conf, cgrt_tool_default_config(), "<default>", &cfg, 0);
  if (status == EXIT_VALID)
    status = bench_dispatch(cfg, calls, o.json);
  return status;
}
