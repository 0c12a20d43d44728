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
#include "tool_args.h"
#include "traffic.h"

#define REPS 9

struct dispatch {
  cgrt_runtime *rt;
  cgrt_module *m;
  int calls;
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
  for (int i = 0; i < d->calls; i++) {
    int rc = cgrt_forward(d->rt, d->m, ctx, &a);
    if (rc)
      return rc;
  }
  uint64_t t1 = cgrt_tool_now_ns();
  for (int i = 0; i < d->calls; i++)
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
static int bench_dispatch(cgrt_tool_config *cfg, const struct bench_opts *o, int calls) {
  struct dispatch d = {.calls = calls};
  const int json = o->json;
  struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  v->driver = CGRT_DRIVER_HOST;
  v->bind_cpu = 0;
  v->log_level = CGRT_LOG_WARN;
  bench_opts_apply(o, v);
  const int queued = v->max_queued_steps; /* cfg goes with the runtime */
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
    printf("{\"workload\":\"dispatch\",\"backend\":\"%s\",\"driver\":\"host\",\"calls\":%d,"
           "\"repetitions\":%d,\"max_queued_steps\":%d,\"direct_ns\":%.2f,\"cgrt_ns\":%.2f,"
           "\"overhead_ns\":%.2f}\n",
           backend, calls, REPS, queued, direct, via, via - direct);
  else {
    printf("workload dispatch: backend %s, host driver, %d calls x %d repetitions (median)\n",
           backend, calls, REPS);
    bench_print_queue(o, queued);
    bench_print_budget(o);
    printf("  direct call of the module callback   %8.2f ns/call\n"
           "  cgrt_forward through the backend     %8.2f ns/call\n"
           "  overhead per call                    %8.2f ns/call\n",
           direct, via, via - direct);
  }
  cgrt_close(d.rt);
  return 0;
}

/* The numeric options' ranges (printed by usage): wide enough for any run that ends. */
#define STEPS_MAX      1000000    /* --steps: timed steps per measurement */
#define WARMUP_MAX     1000000    /* --warmup: untimed steps before */
#define WARMUP_MS_MAX  3600000    /* --warmup-ms: an hour */
#define BLOCKS_MAX     1000       /* --blocks */
#define KERNELS_MAX    100000     /* --kernels: the chain's kernels, one graph node each */
#define CALLS_MAX      1000000000 /* --calls: dispatch's calls per repetition */
#define TIMEOUT_MAX    86400      /* --timeout: a day, in seconds */
#define TOKENS_MAX     1000000    /* each --tokens count: rows of the workload's buffers */
#define PASSES_MAX     4          /* --passes: each --traffic run's passes */
#define PASSES_DEFAULT 2          /* ... without --passes: A B C D D C B A */
#define SETTLE_MAX     8          /* --settle: untimed rounds before them */
#define SETTLE_DEFAULT 2          /* ... without --settle: past a process's slow first runtimes */
#define QUEUED_MAX     64         /* --max-queued-steps: [runtime] max_queued_steps's range */

/* The usage, on out: stdout for --help, stderr after a misuse. */
static void usage(FILE *out) {
  fprintf(
      out,
      "usage: cgrt bench [CONF] [--workload decode|chain|train|cp|dispatch] [--tokens 'LIST']\n"
      "                  [--steps N] [--warmup N] [--warmup-ms MS] [--blocks N] [--kernels N]\n"
      "                  [--calls N] [--ranks N] [--timeout S] [--json] [--plot FILE.svg]\n"
      "                  [--explain] [--cp-shape launch|compute] [--traffic FILE]\n"
      "                  [--passes N] [--settle N] [--memory-budget SIZE|off] [--host-stream]\n"
      "                  [--max-queued-steps N]\n"
      "  whole numbers: --tokens 1 to %d each (at most %d of them), --steps 1 to %d,\n"
      "  --warmup 0 to %d, --warmup-ms 0 to %d, --blocks 1 to %d, --kernels 1 to %d,\n"
      "  --calls 1 to %d, --ranks 0 to %d (0: the largest cp size), --timeout 0 to %d\n"
      "  (0: 600 s), --passes 1 to %d (--traffic: each run twice in the order A B C D D C B A,\n"
      "  the default; once, A B C D: half the time, a drift over the bench not cancelled; 3 or 4:\n"
      "  on in turn, A B C D D C B A A B C D ..., to read a run against the process's age),\n"
      "  --settle 0 to %d (--traffic: rounds of every run over the trace's first steps, untimed,\n"
      "  before the passes, each on a runtime of its own; 2, the default, puts every timed pass\n"
      "  past a process's first graphed runtimes, which replay slower; 0: none),\n"
      "  --max-queued-steps 0 to %d ([runtime] max_queued_steps of every runtime the bench opens,\n"
      "  the configured, eager and cp ones: at most N steps queued ahead of the device; 0: none)\n",
      TOKENS_MAX, BENCH_MAX_TOKENS, STEPS_MAX, WARMUP_MAX, WARMUP_MS_MAX, BLOCKS_MAX, KERNELS_MAX,
      CALLS_MAX, BENCH_MAX_RANKS, TIMEOUT_MAX, PASSES_MAX, SETTLE_MAX, QUEUED_MAX);
}

/* An int option from min to max (within int): 0, or -1 with the sentence printed. */
static int int_opt(const char *opt, const char *text, int64_t min, int64_t max, int *out) {
  int64_t v;
  if (tool_opt_int("cgrt bench", opt, text, min, max, &v) != 0)
    return -1;
  *out = (int)v;
  return 0;
}

/* Parses a space- or comma-separated list of token counts, each from 1 to TOKENS_MAX. */
static int parse_tokens(const char *s, struct bench_opts *o) {
  char *copy = strdup(s);
  int rc = copy ? 0 : -1;
  o->num_tokens = 0;
  for (char *save, *tok = copy ? strtok_r(copy, " ,", &save) : NULL; rc == 0 && tok;
       tok = strtok_r(NULL, " ,", &save)) {
    int64_t v;
    if (o->num_tokens == BENCH_MAX_TOKENS) {
      fprintf(stderr, "cgrt bench: --tokens: more than %d token counts; give at most %d\n",
              BENCH_MAX_TOKENS, BENCH_MAX_TOKENS);
      rc = -1;
    } else if (tool_opt_int("cgrt bench", "--tokens", tok, 1, TOKENS_MAX, &v) != 0) {
      rc = -1;
    } else {
      o->tokens[o->num_tokens++] = v;
    }
  }
  if (rc == 0 && o->num_tokens == 0) {
    char q[64];
    fprintf(stderr,
            "cgrt bench: --tokens '%s': expected token counts, whole numbers from 1 to %d "
            "separated by spaces or commas\n",
            tool_quote(s, q, sizeof(q)), TOKENS_MAX);
    rc = -1;
  }
  free(copy);
  return rc;
}

/*
 * --memory-budget: read by the configuration's own parser (a one-key INI), so it takes what
 * [cuda_graph] memory_budget takes and is refused with the same message. The text is pasted into
 * that INI, so what would change its meaning (a line break, a comment, a section, a key) is
 * refused first.
 */
static int parse_budget(const char *text, struct bench_opts *o) {
  char ini[256], err[256];
  if (tool_check_ini_value("--memory-budget", text, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s, such as 512 MiB or off\n", err);
    return -1;
  }
  if (snprintf(ini, sizeof(ini), "[cuda_graph]\nimpl = local\nmemory_budget = %s\n", text) >=
      (int)sizeof(ini)) {
    fprintf(stderr,
            "cgrt bench: --memory-budget: %zu characters is too long for a size; give "
            "one such as 512 MiB, or off\n",
            strlen(text));
    return -1;
  }
  cgrt_tool_config *cfg = NULL;
  if (tool_load_config(NULL, ini, "--memory-budget", &cfg, 0) != EXIT_VALID) {
    fprintf(stderr, "cgrt bench: --memory-budget takes what [cuda_graph] memory_budget "
                    "takes: off, or e.g. 512 MiB\n");
    return -1;
  }
  o->set_budget = 1;
  o->memory_budget = cgrt_tool_config_view(cfg)->memory_budget;
  cgrt_tool_config_free(cfg);
  return 0;
}

/* The options that take a value. */
static int takes_value(const char *a) {
  static const char *const names[] = {
      "--workload", "--tokens", "--steps",   "--warmup",        "--warmup-ms",       "--blocks",
      "--cp-shape", "--plot",   "--kernels", "--calls",         "--ranks",           "--timeout",
      "--traffic",  "--passes", "--settle",  "--memory-budget", "--max-queued-steps"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(a, names[i]) == 0)
      return 1;
  return 0;
}

/*
 * The files the command reads, checked before the GPU half is loaded (without a GPU, a wrong
 * path is said before "no CUDA device"), and the --plot file checked writable before anything
 * is measured. The exit code.
 */
static int check_files(const struct bench_opts *o) {
  char err[1024];
  if (o->conf && tool_check_input(o->conf, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    return EXIT_UNUSABLE;
  }
  if (o->traffic) { /* read whole: max_tokens is the configuration's, checked again then */
    struct traffic t;
    if (traffic_load(o->traffic, 0, &t, err, sizeof(err)) != 0) {
      fprintf(stderr, "cgrt bench: %s\n", err);
      return EXIT_INVALID;
    }
    traffic_free(&t);
  }
  if (o->plot && tool_check_output("--plot", o->plot, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    return EXIT_UNUSABLE;
  }
  return EXIT_VALID;
}

int cmd_bench(int argc, char **argv) {
  struct bench_opts o = {.workload = "decode",
                         .steps = 200,
                         .warmup = 20,
                         .warmup_ms = 100,
                         .blocks = 5,
                         .chain_kernels = 64,
                         .traffic_passes = PASSES_DEFAULT,
                         .traffic_settle = SETTLE_DEFAULT};
  int passes_given = 0, settle_given = 0;
  int calls = 2000000;
  const char *tokens = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (takes_value(a) && !val) {
      fprintf(stderr, "cgrt bench: %s needs a value\n", a);
      usage(stderr);
      return EXIT_UNUSABLE;
    }
    if (strcmp(a, "--json") == 0)
      o.json = 1;
    else if (strcmp(a, "--explain") == 0)
      o.explain = 1;
    else if (strcmp(a, "--host-stream") == 0)
      o.host_stream = 1;
    else if (strcmp(a, "--workload") == 0)
      o.workload = argv[++i];
    else if (strcmp(a, "--tokens") == 0)
      tokens = argv[++i];
    else if (strcmp(a, "--steps") == 0)
      rc = int_opt(a, argv[++i], 1, STEPS_MAX, &o.steps);
    else if (strcmp(a, "--warmup") == 0)
      rc = int_opt(a, argv[++i], 0, WARMUP_MAX, &o.warmup);
    else if (strcmp(a, "--warmup-ms") == 0)
      rc = int_opt(a, argv[++i], 0, WARMUP_MS_MAX, &o.warmup_ms);
    else if (strcmp(a, "--blocks") == 0)
      rc = int_opt(a, argv[++i], 1, BLOCKS_MAX, &o.blocks);
    else if (strcmp(a, "--cp-shape") == 0)
      o.cp_shape = argv[++i];
    else if (strcmp(a, "--plot") == 0)
      o.plot = argv[++i];
    else if (strcmp(a, "--kernels") == 0)
      rc = int_opt(a, argv[++i], 1, KERNELS_MAX, &o.chain_kernels);
    else if (strcmp(a, "--calls") == 0)
      rc = int_opt(a, argv[++i], 1, CALLS_MAX, &calls);
    else if (strcmp(a, "--ranks") == 0)
      rc = int_opt(a, argv[++i], 0, BENCH_MAX_RANKS, &o.ranks);
    else if (strcmp(a, "--timeout") == 0)
      rc = int_opt(a, argv[++i], 0, TIMEOUT_MAX, &o.timeout_s);
    else if (strcmp(a, "--traffic") == 0)
      o.traffic = argv[++i];
    else if (strcmp(a, "--passes") == 0) {
      passes_given = 1;
      rc = int_opt(a, argv[++i], 1, PASSES_MAX, &o.traffic_passes);
    } else if (strcmp(a, "--settle") == 0) {
      settle_given = 1;
      rc = int_opt(a, argv[++i], 0, SETTLE_MAX, &o.traffic_settle);
    } else if (strcmp(a, "--max-queued-steps") == 0) {
      o.set_queue = 1;
      rc = int_opt(a, argv[++i], 0, QUEUED_MAX, &o.max_queued_steps);
    } else if (strcmp(a, "--memory-budget") == 0) {
      if (parse_budget(argv[++i], &o) != 0)
        return EXIT_INVALID;
    } else if (a[0] != '-' && !o.conf) {
      o.conf = a;
    } else {
      if (a[0] != '-')
        fprintf(stderr, "cgrt bench: one configuration file at most: '%s' after '%s'\n", a, o.conf);
      else
        fprintf(stderr, "cgrt bench: unknown option '%s'\n", a);
      usage(stderr);
      return EXIT_UNUSABLE;
    }
    if (rc != 0)
      return EXIT_UNUSABLE;
  }
  int gpu_rows = strcmp(o.workload, "decode") == 0 || strcmp(o.workload, "chain") == 0;
  if ((o.explain || o.plot) && !gpu_rows) {
    fprintf(stderr, "cgrt bench: --explain and --plot are for --workload decode or chain\n");
    return EXIT_UNUSABLE;
  }
  /* --host-stream: the runtimes of the table run on one stream the bench creates and hands at
     open, as a host does that passes cgrt_open_options.stream (no ordering with stream 0) */
  if (o.host_stream && (!gpu_rows || o.explain || o.traffic)) {
    fprintf(stderr, "cgrt bench: --host-stream is for the table of --workload decode or chain "
                    "(not --explain or --traffic)\n");
    return EXIT_UNUSABLE;
  }
  if (!gpu_rows)
    o.warmup_ms = 0; /* cp: every rank must run the same number of steps */
  int is_chain = strcmp(o.workload, "chain") == 0;
  /* decode: inside every exponential bucket up to 512 as well as at some (issue 43) */
  if (parse_tokens(tokens ? tokens : is_chain ? "1" : "1 3 8 20 37 64 100 200 400", &o) != 0)
    return EXIT_UNUSABLE;
  if (passes_given && !o.traffic) {
    fprintf(stderr, "cgrt bench: --passes is for --traffic (each run's passes over the trace)\n");
    return EXIT_UNUSABLE;
  }
  if (settle_given && !o.traffic) {
    fprintf(stderr, "cgrt bench: --settle is for --traffic (untimed rounds of its runs before "
                    "the passes)\n");
    return EXIT_UNUSABLE;
  }
  if (o.traffic && strcmp(o.workload, "decode") != 0) {
    fprintf(stderr, "cgrt bench: --traffic replays token counts through the decode workload; "
                    "use --workload decode\n");
    return EXIT_UNUSABLE;
  }
  if (o.cp_shape && strcmp(o.cp_shape, "launch") != 0 && strcmp(o.cp_shape, "compute") != 0) {
    fprintf(stderr, "cgrt bench: --cp-shape '%s': expected launch or compute\n", o.cp_shape);
    return EXIT_UNUSABLE;
  }
  int gpu =
      o.traffic || gpu_rows || strcmp(o.workload, "train") == 0 || strcmp(o.workload, "cp") == 0;
  if (!gpu && strcmp(o.workload, "dispatch") != 0) {
    fprintf(stderr, "cgrt bench: unknown workload '%s' (decode, chain, train, cp, dispatch)\n",
            o.workload);
    return EXIT_UNUSABLE;
  }
  int status = check_files(&o);
  if (status != EXIT_VALID)
    return status;
  /* The GPU workloads are libcgrt-bench.so, loaded only now: dispatch runs on the host. */
  if (gpu) {
    const struct cgrt_bench_plugin *p = NULL;
    status = bench_plugin_load("cgrt bench", &p);
    return status == EXIT_VALID ? p->bench(&o) : status;
  }
  cgrt_tool_config *cfg = NULL;
  status = tool_load_config(o.conf, cgrt_tool_default_config(), "<default>", &cfg, 0);
  if (status == EXIT_VALID)
    status = bench_dispatch(cfg, &o, calls);
  return status;
}
