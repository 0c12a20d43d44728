/*
 * cmd_check.c - `cgrt check FILE [--dry-run]`: validate a configuration, print its warnings and
 * its normalized form; with --dry-run, load the backend on the host driver, print its plan and
 * run a small synthetic model through it to show which graphs it builds.
 * Exit: 0 valid, 1 invalid, 2 unusable (unreadable file, backend that cannot be loaded).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrt/cgrt.h"
#include "tool.h"
#include "tool_args.h"

#define SIM_LAYERS 2

struct sim_model {
  cgrt_runtime *rt;
  cgrt_module *mods[SIM_LAYERS * CGRT_KIND_COUNT];
  size_t n;
  long executed; /* host functions the device ran: proves the work reached the stream */
};

static void sim_tick(void *arg) {
  ((struct sim_model *)arg)->executed++;
}

static int sim_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, sim_tick, user);
}

static int sim_body(const cgrt_ctx *ctx, void *user) {
  struct sim_model *s = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = (uint64_t)ctx->padded_tokens};
  for (size_t i = 0; i < s->n; i++) {
    int rc = cgrt_forward(s->rt, s->mods[i], ctx, &a);
    if (rc)
      return rc;
  }
  if (ctx->phase != CGRT_PHASE_TRAIN)
    return 0;
  for (size_t i = s->n; i-- > 0;) {
    int rc = cgrt_backward(s->rt, s->mods[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

/* The kinds the synthetic layer has: attn and mlp, plus every kind the config names. */
static uint32_t sim_kinds(const struct cgrt_config_view *v) {
  uint32_t kinds = CGRT_KIND_BIT(CGRT_KIND_ATTN) | CGRT_KIND_BIT(CGRT_KIND_MLP) | v->modules;
  if (v->modules & CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER))
    kinds |= CGRT_KIND_BIT(CGRT_KIND_MOE); /* the experts (kind moe), not scoped here */
  return kinds;
}

static int sim_register(struct sim_model *s, uint32_t kinds) {
  for (int layer = 0; layer < SIM_LAYERS; layer++)
    for (int k = 0; k < CGRT_KIND_COUNT; k++) {
      if (!(kinds & CGRT_KIND_BIT(k)))
        continue;
      char name[64];
      snprintf(name, sizeof(name), "layer%d.%s", layer, cgrt_kind_name((cgrt_kind)k));
      cgrt_module_desc d = {.struct_size = sizeof(d),
                            .name = name,
                            .kind = (cgrt_kind)k,
                            .layer = layer,
                            .forward = sim_module,
                            .backward = sim_module,
                            .user = s};
      int rc = cgrt_module_register(s->rt, &d, &s->mods[s->n]);
      if (rc)
        return rc;
      s->n++;
    }
  return 0;
}

/* count steps; a backend with cp banks gets count at each cp size, the sizes in turn (a bank
   warms up and captures on its own steps). */
static int sim_steps(struct sim_model *s, cgrt_phase phase, int64_t tokens, int count) {
  const struct cgrt_config_view *v = cgrt_tool_view(s->rt);
  int by_cp = (cgrt_tool_backend(s->rt, NULL)->caps & CGRT_CAP_NEEDS_COMM) && v->num_cp_sizes > 0;
  if (by_cp)
    count *= (int)v->num_cp_sizes;
  for (int i = 0; i < count; i++) {
    cgrt_step_desc d = {.struct_size = sizeof(d),
                        .phase = phase,
                        .tokens = tokens,
                        .cp_size = by_cp ? v->cp_sizes[i % (int)v->num_cp_sizes] : 0,
                        .microbatches = 1,
                        .body = sim_body,
                        .user = s};
    int rc = cgrt_step(s->rt, &d, NULL);
    if (rc)
      return rc;
  }
  return 0;
}

static void print_sim(const char *what, cgrt_runtime *rt, const cgrt_stats *before) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  cgrt_stats_get(rt, &s);
  printf("  %s: %llu steps; module calls eager %llu, warmup %llu, captured %llu, replayed %llu; "
         "graphs built %llu, live %llu, fallbacks %llu",
         what, (unsigned long long)(s.steps - before->steps),
         (unsigned long long)(s.calls_by_mode[0] - before->calls_by_mode[0]),
         (unsigned long long)(s.calls_by_mode[1] - before->calls_by_mode[1]),
         (unsigned long long)(s.calls_by_mode[2] - before->calls_by_mode[2]),
         (unsigned long long)(s.calls_by_mode[3] - before->calls_by_mode[3]),
         (unsigned long long)(s.instantiations - before->instantiations),
         (unsigned long long)s.live_graphs, (unsigned long long)(s.fallbacks - before->fallbacks));
  /* Whole-step graphs replay without module calls: the steps say it. */
  printf("; steps replayed %llu", (unsigned long long)(s.steps_by_mode[CGRT_MODE_REPLAY] -
                                                       before->steps_by_mode[CGRT_MODE_REPLAY]));
  if (s.eager_phase_steps > before->eager_phase_steps)
    printf("; run eagerly by cgrt %llu",
           (unsigned long long)(s.eager_phase_steps - before->eager_phase_steps));
  /* NCCL's graph mixing off: how often eager work waited for queued graphs (README). */
  if (s.comm_waits > before->comm_waits)
    printf("; waits for queued graphs %llu",
           (unsigned long long)(s.comm_waits - before->comm_waits));
  printf("\n");
}

static void print_figure(void *user, const char *name, uint64_t value) {
  ++*(int *)user;
  printf("  %s %llu\n", name, (unsigned long long)value);
}

static void emit_line(void *user, const char *line) {
  (void)user;
  printf("  %s\n", line);
}

static void log_to_stderr(void *user, cgrt_log_level level, const char *msg) {
  (void)user;
  if (level <= CGRT_LOG_WARN)
    fprintf(stderr, "%s: %s\n", level == CGRT_LOG_ERROR ? "error" : "warning", msg);
}

static int exit_for(int rc) {
  return rc == CGRT_E_CONFIG || rc == CGRT_E_UNSUPPORTED || rc == CGRT_E_CALLBACK ? EXIT_INVALID
                                                                                  : EXIT_UNUSABLE;
}

/* Loads the backend on the host driver, prints its plan, runs the synthetic model (cfg is
 * consumed). */
static int dry_run(cgrt_tool_config *cfg) {
  struct cgrt_config_view *cv = cgrt_tool_config_view(cfg);
  cv->driver = CGRT_DRIVER_HOST;
  cv->bind_cpu = 0;
  cv->log_level = CGRT_LOG_WARN;
  uint32_t kinds = sim_kinds(cv);
  struct sim_model s = {0};
  int rc = cgrt_tool_open(&s.rt, cfg, log_to_stderr, NULL);
  if (rc != 0) {
    fprintf(stderr, "error: %s\n", cgrt_last_error(NULL)); /* the log says it at debug only */
    return exit_for(rc);
  }
  const struct cgrt_config_view *v = cgrt_tool_view(s.rt);
  const char *path = NULL;
  const struct cgrt_backend_v1 *vt = cgrt_tool_backend(s.rt, &path);
  /* A copy: adaptive buckets may change while the synthetic steps run. */
  const int64_t *sizes = NULL;
  size_t num_buckets = 0;
  cgrt_tool_buckets(s.rt, &sizes, &num_buckets);
  int64_t *buckets = malloc((num_buckets ? num_buckets : 1) * sizeof(*buckets));
  if (!buckets) {
    cgrt_close(s.rt);
    return EXIT_UNUSABLE;
  }
  memcpy(buckets, sizes, num_buckets * sizeof(*buckets));
  /* The modules first: a backend learns of them at registration (module_added), and then
     describes its plan for them. */
  rc = sim_register(&s, kinds);
  printf("\nplan: backend %s (%s), dry run on the host driver\n", vt->name, path);
  if (cgrt_tool_describe(s.rt, emit_line, NULL) != 0)
    printf("  (the backend does not describe its plan)\n");
  if (rc == 0) /* the host driver's stand-in communicators, for backends that use them */
    rc = cgrt_set_world_comm(s.rt, NULL);
  printf("synthetic model: %d layers of", SIM_LAYERS);
  for (int k = 0; k < CGRT_KIND_COUNT; k++)
    if (kinds & CGRT_KIND_BIT(k))
      printf(" %s", cgrt_kind_name((cgrt_kind)k));
  printf(", forward and backward\n");
  /* Every phase, under every backend: what a host that swaps `impl` will meet. */
  cgrt_backend_info bi = {.struct_size = sizeof(bi)};
  if (rc == 0)
    rc = cgrt_backend_info_get(s.rt, &bi);
  static const char *const runs[] = {"eagerly (the backend's way)",
                                     "with graphs (the backend's way)",
                                     "eagerly by cgrt: the backend has no form for this phase"};
  cgrt_stats before = {.struct_size = sizeof(before)};
  for (int p = 0; rc == 0 && p < CGRT_PHASE_COUNT; p++) {
    printf("  %s steps run %s\n", cgrt_phase_name((cgrt_phase)p),
           (unsigned)bi.phases[p] < 3 ? runs[bi.phases[p]] : "(unknown)");
    cgrt_stats_get(s.rt, &before);
    char what[64];
    if (p == CGRT_PHASE_INFER) {
      for (size_t i = num_buckets; rc == 0 && i-- > 0;)
        rc = sim_steps(&s, CGRT_PHASE_INFER, buckets[i], v->warmup_steps + 2);
      snprintf(what, sizeof(what), "infer (%zu token buckets)", num_buckets);
    } else {
      rc = sim_steps(&s, (cgrt_phase)p, 64, v->warmup_steps + 3);
      snprintf(what, sizeof(what), "%s", cgrt_phase_name((cgrt_phase)p));
    }
    if (rc == 0)
      print_sim(what, s.rt, &before);
  }
  if (rc == 0) { /* the whole record, as cgrt_stats_format writes it for every host */
    cgrt_stats all = {.struct_size = sizeof(all)};
    char text[8192];
    printf("the backend's own figures (cgrt_backend_figures):\n");
    int before_figures = 0;
    rc = cgrt_backend_figures(s.rt, print_figure, &before_figures);
    if (rc == 0 && before_figures == 0)
      printf("  (none: the backend reports no figures of its own)\n");
    if (rc == 0)
      rc = cgrt_stats_get(s.rt, &all); /* a backend's failing stats fails the dry run */
    if (rc == 0 && cgrt_stats_format(&all, CGRT_STATS_TEXT, text, sizeof(text)) > 0) {
      printf("statistics after the dry run (cgrt_stats):\n");
      for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        printf("  %s\n", line);
    }
    if (rc == 0)
      rc = cgrt_release_graphs(s.rt);
  }
  if (rc != 0)
    fprintf(stderr, "error: dry run: %s\n", cgrt_last_error(s.rt));
  free(buckets);
  cgrt_close(s.rt);
  return rc == 0 ? EXIT_VALID : exit_for(rc);
}

int cmd_check(int argc, char **argv) {
  const char *path = NULL;
  int dry = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: cgrt check FILE [--dry-run]\n");
      return 0;
    }
    if (strcmp(argv[i], "--dry-run") == 0) {
      dry = 1;
    } else if (!path && argv[i][0] != '-') {
      path = argv[i];
    } else {
      if (argv[i][0] != '-')
        fprintf(stderr, "cgrt check: one FILE at a time: '%s' after '%s'\n", argv[i], path);
      else
        fprintf(stderr, "cgrt check: unknown option '%s'\n", argv[i]);
      fprintf(stderr, "usage: cgrt check FILE [--dry-run]\n");
      return EXIT_UNUSABLE;
    }
  }
  if (!path) {
    fprintf(stderr, "usage: cgrt check FILE [--dry-run]\n");
    return EXIT_UNUSABLE;
  }
  /* A directory, a FIFO or a device is refused here, before the library reads it. */
  char err[1024];
  if (tool_check_input(path, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt check: %s\n", err);
    return EXIT_UNUSABLE;
  }
  cgrt_tool_config *cfg = NULL;
  struct tool_msgs msgs = {0};
  int rc = cgrt_tool_config_read(&cfg, path, NULL, NULL, tool_print_msg, &msgs);
  int status;
  if (rc == CGRT_E_IO || rc == CGRT_E_NOMEM) {
    status = EXIT_UNUSABLE;
  } else if (rc != 0) {
    fprintf(stderr, "%s: invalid (%d errors, %d warnings)\n", path, msgs.errors, msgs.warnings);
    status = EXIT_INVALID;
  } else {
    cgrt_tool_config_print(cfg, stdout);
    fprintf(stderr, "%s: valid (%d warnings)\n", path, msgs.warnings);
    if (dry) {
      status = dry_run(cfg); /* consumes cfg */
      cfg = NULL;
    } else {
      status = EXIT_VALID;
    }
  }
  cgrt_tool_config_free(cfg);
  return status;
}
