/*
 * bench_traffic.c - `cgrt bench --workload decode --traffic FILE`: the decode workload driven by
 * a recorded (or synthetic) sequence of token counts, step after step, as a continuous-batching
 * server would drive it: under eager, under the configured backend, and under the same backend
 * with buckets = exponential of the same K (or adaptive, when exponential is the configured one).
 *
 * Each run replays the whole trace once from a fresh runtime, cold start, captures and bucket
 * changes included, and reports the wall time (the host enqueues, then waits for the stream
 * once at the end), the mean per step, the steady per-step time of the trace's second half
 * (device timeline between two events), the padded share of the tokens processed, captures and
 * bucket changes. Then the trace is replayed again on the same runtime and on a sample of steps
 * the output is compared bitwise with eager run at the same padded size.
 *
 * The runs go twice, in the order A B C D D C B A, each pass from a fresh runtime, and a run's
 * times are the mean of its passes (its counters and checks are the first pass's): a drift
 * of the host or the GPU over the bench (a load that starts with it, clocks that settle) then
 * falls on every run alike, where one pass in a fixed order charged it to the earlier runs (on a
 * loaded host the first run's total came out 3-5% slower than the last's: docs/decisions.md,
 * issue 43, session 44). Every pass is printed. `--passes 1` runs each once, A B C D, in half
 * the time (the suite's checks of the output and the bucket changes need no more); `--passes 3`
 * and `4` go on in turn (A B C D D C B A A B C D ...), so that a run's figure can be read against
 * the process's age (issue 43, session 46: a first pass slower than the later ones).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tool.h"
#include "tool_args.h"
#include "traffic.h"

#include "bench_gpu.h"

#define SAMPLES      48
#define PASSES       4   /* at most, over the trace per run (--passes) */
#define SETTLE_STEPS 800 /* --settle: steps of the trace a settling run replays, untimed */

/* One timed replay of the trace. */
struct pass {
  double wall_ms, steady_us;
  cgrt_stats st;         /* its runtime's counters after it */
  cgrt_stats mid;        /* the same at the start of the steady window (the trace's second half) */
  double window_host_us; /* the host's time per step issuing the steady window's steps */
  uint64_t overturned;   /* by_time's eager decisions undone by their watch (a backend figure) */
  uint64_t bound;        /* buckets by_time's device-bound rule sent eager (a backend figure) */
  uint64_t untimed;      /* by_time's measuring steps left untimed, every pair in flight (same) */
  uint64_t set_aside;    /* by_time's probe rounds set aside: every sample behind the device */
  double longest_ms;     /* the host's longest single step call: a one-off stall shows here */
  uint64_t longest_step; /* which step it was, and its token count */
  int64_t longest_tokens;
  uint64_t start_ns; /* when it began (the host's clock) */
};

static void by_time_figures(void *user, const char *name, uint64_t value) {
  struct pass *p = user;
  if (strcmp(name, "by_time_eager_overturned") == 0)
    p->overturned = value;
  else if (strcmp(name, "by_time_bound_buckets") == 0)
    p->bound = value;
  else if (strcmp(name, "by_time_untimed_steps") == 0)
    p->untimed = value;
  else if (strcmp(name, "by_time_set_aside_rounds") == 0)
    p->set_aside = value;
}

struct traffic_run {
  char label[160];
  int graphed;
  struct pass pass[PASSES];  /* A B C D D C B A ...; the first's counters are the run's */
  int passes;                /* --passes: 1 to PASSES, 2 by default */
  double wall_ms, steady_us; /* the mean of the passes */
  uint64_t steps;
  int checked, equal;
};

/* The trace's i-th step's token count (entries expanded). */
struct cursor {
  const struct traffic *t;
  size_t entry;
  int64_t left;
};

static int64_t next_tokens(struct cursor *c) {
  while (c->left == 0) {
    c->entry++;
    c->left = c->t->steps[c->entry];
  }
  c->left--;
  return c->t->tokens[c->entry];
}

static struct cursor cursor_start(const struct traffic *t) {
  struct cursor c = {t, 0, t->steps[0]};
  return c;
}

/* One timed replay of the whole trace from a fresh runtime. */
static int replay_timed(struct host_model *hm, const struct traffic *t, struct pass *r) {
  cudaStream_t s = (cudaStream_t)cgrt_stream(hm->rt);
  cudaEvent_t mid = NULL, end = NULL;
  cudaEventCreate(&mid);
  cudaEventCreate(&end);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  struct cursor c = cursor_start(t);
  uint64_t half = t->total_steps / 2, t0 = cgrt_tool_now_ns(), t_mid = t0;
  r->start_ns = t0;
  int rc = 0;
  r->mid.struct_size = sizeof(r->mid);
  r->longest_ms = 0;
  for (uint64_t i = 0; i < t->total_steps && rc == 0; i++) {
    if (i == half) {
      cgrt_stats_get(hm->rt, &r->mid);
      t_mid = cgrt_tool_now_ns();
      cudaEventRecord(mid, s);
    }
    int64_t tokens = next_tokens(&c);
    uint64_t t_step = cgrt_tool_now_ns();
    rc = bench_hm_step(hm, tokens, &rep);
    double ms = (double)(cgrt_tool_now_ns() - t_step) / 1e6;
    if (ms > r->longest_ms) {
      r->longest_ms = ms;
      r->longest_step = i;
      r->longest_tokens = tokens;
    }
  }
  r->window_host_us = (double)(cgrt_tool_now_ns() - t_mid) / 1e3 / (double)(t->total_steps - half);
  cudaEventRecord(end, s);
  if (rc == 0 && cudaEventSynchronize(end) != cudaSuccess)
    rc = CGRT_E_DEVICE;
  r->wall_ms = (double)(cgrt_tool_now_ns() - t0) / 1e6;
  float ms = 0;
  if (rc == 0)
    cudaEventElapsedTime(&ms, mid, end);
  r->steady_us = (double)ms * 1e3 / (double)(t->total_steps - half);
  r->st.struct_size = sizeof(r->st);
  cgrt_stats_get(hm->rt, &r->st);
  r->overturned = r->bound = r->untimed = r->set_aside = 0;
  (void)cgrt_backend_figures(hm->rt, by_time_figures, r);
  cudaEventDestroy(mid);
  cudaEventDestroy(end);
  return rc;
}

/* The trace again on the same runtime; every stride-th step checked against eager. */
static int replay_checked(struct host_model *hm, struct host_model *eager, const struct traffic *t,
                          const struct bench_opts *o, struct traffic_run *r) {
  uint64_t stride = t->total_steps / SAMPLES ? t->total_steps / SAMPLES : 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  struct cursor c = cursor_start(t);
  int rc = 0;
  for (uint64_t i = 0; i < t->total_steps && rc == 0; i++) {
    int64_t tokens = next_tokens(&c);
    rc = bench_hm_step(hm, tokens, &rep);
    /* the last step too: it runs at the set the trace ended with */
    if (rc == 0 && (i % stride == stride - 1 || i + 1 == t->total_steps)) {
      r->checked++;
      r->equal += bench_bitwise_equal(hm, eager, tokens, rep.padded_tokens, o);
    }
  }
  return rc;
}

static void set_text(const cgrt_stats *s, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  uint32_t n = s->num_buckets < CGRT_STATS_MAX_BUCKETS ? s->num_buckets : CGRT_STATS_MAX_BUCKETS;
  for (uint32_t i = n; i-- > 0 && off + 24 < len;)
    off +=
        (size_t)snprintf(buf + off, len - off, "%s%lld", off ? " " : "", (long long)s->buckets[i]);
}

static double padded_share(const cgrt_stats *s) {
  double p = (double)s->padded_tokens, r = (double)s->real_tokens;
  return p + r > 0 ? p / (p + r) : 0;
}

/* Writes " a / b / ..." of one figure over run r's passes into the array buf: the arguments
 * after fmt are its values for one pass, read through pp (that pass); cut at the array's end. */
#define PASS_LIST(buf, r, fmt, ...)                                                                \
  do {                                                                                             \
    size_t off_ = 0;                                                                               \
    (buf)[0] = '\0';                                                                               \
    for (int p_ = 0; p_ < (r)->passes && off_ + 1 < sizeof(buf); p_++) {                           \
      const struct pass *pp = &(r)->pass[p_];                                                      \
      off_ += (size_t)snprintf((buf) + off_, sizeof(buf) - off_, "%s" fmt, p_ ? " / " : " ",       \
                               __VA_ARGS__);                                                       \
    }                                                                                              \
  } while (0)

/*
 * What each pass of a graphed run did, first / second / ..., so that a difference between its
 * passes can be traced to where it went: the host's capture and instantiation time, the steps
 * replayed, run eagerly (by_time's probes and counts served eagerly, or a budget's), at an
 * exact-size bucket, the bytes copied around replays (buffers that moved), the steady device time.
 */
static void per_pass_lines(const struct traffic_run *runs, int n) {
  /* Every run's longest step call per pass: a stall of the host (a driver call held up by another
     process, a first launch) that the pass's total carries and its steady window may not. */
  for (int i = 0; i < n; i++) {
    const struct traffic_run *r = &runs[i];
    char longest[256];
    PASS_LIST(longest, r, "%.2f ms at step %llu (%lld)", pp->longest_ms,
              (unsigned long long)pp->longest_step, (long long)pp->longest_tokens);
    printf("%s, longest step call per pass (host, ms; step of the trace, its tokens):%s\n",
           r->label, longest);
  }
  for (int i = 1; i < n && runs[0].passes >= 2; i++) {
    const struct traffic_run *r = &runs[i];
    if (!r->graphed)
      continue;
    char cap[128], rep[128], eag[128], probe[128], undone[128], bound[128], untimed[128],
        aside[128], exact[128], copied[128], steady[128], start[128];
    /* in seconds since the first timed pass (eager's first) began */
    PASS_LIST(start, r, "%.1f", (double)(pp->start_ns - runs[0].pass[0].start_ns) / 1e9);
    PASS_LIST(cap, r, "%.1f", (double)(pp->st.capture_ns + pp->st.instantiate_ns) / 1e6);
    PASS_LIST(rep, r, "%llu", (unsigned long long)pp->st.steps_by_mode[CGRT_MODE_REPLAY]);
    PASS_LIST(eag, r, "%llu", (unsigned long long)pp->st.steps_by_mode[CGRT_MODE_EAGER]);
    PASS_LIST(probe, r, "%llu", (unsigned long long)pp->st.time_probe_steps);
    PASS_LIST(undone, r, "%llu", (unsigned long long)pp->overturned);
    PASS_LIST(bound, r, "%llu", (unsigned long long)pp->bound);
    PASS_LIST(untimed, r, "%llu", (unsigned long long)pp->untimed);
    PASS_LIST(aside, r, "%llu", (unsigned long long)pp->set_aside);
    PASS_LIST(exact, r, "%llu", (unsigned long long)pp->st.time_exact_steps);
    PASS_LIST(copied, r, "%.1f", (double)pp->st.copy_bytes / (1024.0 * 1024.0));
    PASS_LIST(steady, r, "%.1f", pp->steady_us);
    printf("%s, per pass: capture+instantiate%s ms, steps replayed%s, eager%s (by_time probes%s, "
           "eager undone%s, device-bound buckets%s, samples lost in flight%s, rounds set aside "
           "behind the device%s), exact-size%s, copied%s MiB, steady%s us; started at%s s\n",
           r->label, cap, rep, eag, probe, undone, bound, untimed, aside, exact, copied, steady,
           start);
    /* The steady window alone: what of the above fell in it, and whether the host kept ahead
       (its issue time per step well under the steady time) or bound the window. */
    char weag[128], wprobe[128], wcap[128], wms[128], whost[128];
    PASS_LIST(weag, r, "%llu",
              (unsigned long long)(pp->st.steps_by_mode[CGRT_MODE_EAGER] -
                                   pp->mid.steps_by_mode[CGRT_MODE_EAGER]));
    PASS_LIST(wprobe, r, "%llu",
              (unsigned long long)(pp->st.time_probe_steps - pp->mid.time_probe_steps));
    PASS_LIST(wcap, r, "%llu", (unsigned long long)(pp->st.captures - pp->mid.captures));
    PASS_LIST(wms, r, "%.1f",
              (double)(pp->st.capture_ns + pp->st.instantiate_ns - pp->mid.capture_ns -
                       pp->mid.instantiate_ns) /
                  1e6);
    PASS_LIST(whost, r, "%.1f", pp->window_host_us);
    printf("%s, steady window (second half) per pass: eager%s (by_time probes%s), captures%s "
           "(capture+instantiate%s ms), host issue%s us a step\n",
           r->label, weag, wprobe, wcap, wms, whost);
  }
}

/* The order the runs went in, for the header. */
static const char *order_text(int passes) {
  switch (passes) {
  case 1:
    return "once, in the order A B C D (--passes 1: a drift over the bench falls on the later "
           "runs)";
  case 2:
    return "twice, in the order A B C D D C B A; total and steady: the mean of both passes";
  case 3:
    return "three times, in the order A B C D D C B A A B C D; total and steady: the mean of the "
           "passes";
  default:
    return "four times, in the order A B C D D C B A A B C D D C B A; total and steady: the mean "
           "of the passes";
  }
}

/* Closes the JSON array before it and writes `"key":[a,b,...]` of run r's by_time figure `member`
   (struct pass) over its passes, left open: eager decisions undone by their watch (a decision
   that went wrong), buckets the device-bound rule sent eager, measuring steps left untimed, probe
   rounds set aside behind the device. */
#define JSON_PASS_COUNTS(key, r, member)                                                           \
  do {                                                                                             \
    printf("],\"" key "\":[");                                                                     \
    for (int p_ = 0; p_ < (r)->passes; p_++)                                                       \
      printf("%s%llu", p_ ? "," : "", (unsigned long long)(r)->pass[p_].member);                   \
  } while (0)

static void print_runs(const struct bench_opts *o, const struct traffic *t, const char *what,
                       const char *device, int queued, const struct traffic_run *runs, int n) {
  char set[512];
  const struct traffic_run *eager = &runs[0];
  if (o->json) {
    printf("{\"workload\":\"decode\",\"traffic\":");
    tool_json_string(o->traffic); /* a path: any text */
    printf(",\"steps\":%llu,\"real_tokens\":%.0f,\"settle\":%d,\"max_queued_steps\":%d,"
           "\"device\":",
           (unsigned long long)t->total_steps, t->total_tokens, o->traffic_settle, queued);
    tool_json_string(device);
    printf(",\"runs\":[");
    for (int i = 0; i < n; i++) {
      const struct traffic_run *r = &runs[i];
      const cgrt_stats *st = &r->pass[0].st;
      set_text(st, set, sizeof(set));
      printf("%s{\"run\":\"%s\",\"total_ms\":%.2f,\"step_us\":%.2f,\"steady_us\":%.2f,"
             "\"speedup\":%.3f,\"padded_tokens\":%llu,\"padded_share\":%.4f,\"captures\":%llu,"
             "\"bucket_changes\":%llu,\"budget_eager\":%llu,\"evictions\":%llu,"
             "\"budget_evictions\":%llu,\"graph_bytes_peak\":%llu,\"memory_budget\":%llu,"
             "\"buckets\":\"%s\",\"checked\":%d,\"bitwise_equal\":%d,"
             "\"pass_ms\":[",
             i ? "," : "", r->label, r->wall_ms, r->wall_ms * 1e3 / (double)r->steps, r->steady_us,
             eager->wall_ms / r->wall_ms, (unsigned long long)st->padding_tokens, padded_share(st),
             (unsigned long long)st->captures, (unsigned long long)st->bucket_changes,
             (unsigned long long)st->budget_eager, (unsigned long long)st->evictions,
             (unsigned long long)st->budget_evictions, (unsigned long long)st->graph_bytes_peak,
             (unsigned long long)st->memory_budget, r->graphed ? set : "", r->checked, r->equal);
      for (int p = 0; p < r->passes; p++)
        printf("%s%.2f", p ? "," : "", r->pass[p].wall_ms);
      JSON_PASS_COUNTS("eager_undone", r, overturned);
      JSON_PASS_COUNTS("device_bound_buckets", r, bound);
      JSON_PASS_COUNTS("untimed_steps", r, untimed);
      JSON_PASS_COUNTS("set_aside_rounds", r, set_aside);
      printf("]}");
    }
    printf("]}\n");
    return;
  }
  printf("cgrt bench: traffic %s (%llu steps, %.0f real tokens, up to %lld a step), workload "
         "decode (%s), %s\n",
         o->traffic, (unsigned long long)t->total_steps, t->total_tokens, (long long)t->largest,
         what, device);
  if (o->traffic_settle > 0)
    printf("settled: %d round%s of every run over the trace's first %llu steps, untimed, each on "
           "a runtime of its own, before the passes\n",
           o->traffic_settle, o->traffic_settle > 1 ? "s" : "",
           (unsigned long long)(t->total_steps < SETTLE_STEPS ? t->total_steps : SETTLE_STEPS));
  bench_print_queue(o, queued);
  printf("each run replays the whole trace from a fresh runtime (captures included), %s; "
         "steady = the second half's device time per step; bitwise: sampled steps against eager "
         "at the same padded size; b_eager: calls run eagerly for [cuda_graph] memory_budget, "
         "b_evict: graphs evicted for it, peak_MiB: graph memory at its highest (live + idle)\n",
         order_text(runs[0].passes));
  if (runs[1].pass[0].st.memory_budget)
    printf("memory_budget %.1f MiB\n",
           (double)runs[1].pass[0].st.memory_budget / (1024.0 * 1024.0));
  printf("%-20s %10s %9s %10s %8s %12s %9s %8s %9s %9s %9s %10s  %s\n", "run", "total_ms",
         "us/step", "steady_us", "speedup", "padded_share", "captures", "changes", "b_eager",
         "b_evict", "peak_MiB", "bitwise", "buckets at the end (largest first)");
  for (int i = 0; i < n; i++) {
    const struct traffic_run *r = &runs[i];
    char check[32] = "-";
    if (r->graphed)
      snprintf(check, sizeof(check), "%d/%d", r->equal, r->checked);
    const cgrt_stats *st = &r->pass[0].st;
    set_text(st, set, sizeof(set));
    printf("%-20s %10.1f %9.1f %10.1f %7.2fx %11.2f%% %9llu %8llu %9llu %9llu %9.1f %10s  %s\n",
           r->label, r->wall_ms, r->wall_ms * 1e3 / (double)r->steps, r->steady_us,
           eager->wall_ms / r->wall_ms, 100.0 * padded_share(st), (unsigned long long)st->captures,
           (unsigned long long)st->bucket_changes, (unsigned long long)st->budget_eager,
           (unsigned long long)st->budget_evictions,
           (double)st->graph_bytes_peak / (1024.0 * 1024.0), check, r->graphed ? set : "");
  }
  per_pass_lines(runs, n);
  if (runs[0].passes >= 2) {
    printf("passes, total_ms (%s):", runs[0].passes == 2 ? "first / second" : "pass by pass");
    for (int i = 0; i < n; i++) {
      char list[128];
      PASS_LIST(list, &runs[i], "%.1f", pp->wall_ms);
      printf("%s %s%s", i ? ";" : "", runs[i].label, list);
    }
    printf("\n");
  }
  if (n == 4 && runs[0].passes >= 2) {
    printf("%s against its padded-token plan: %.3f of its total (passes", runs[1].label,
           runs[1].wall_ms / runs[3].wall_ms);
    for (int p = 0; p < runs[1].passes; p++)
      printf("%s %.3f", p ? "," : "", runs[1].pass[p].wall_ms / runs[3].pass[p].wall_ms);
    printf(")\n");
  } else if (n == 4)
    printf("%s against its padded-token plan: %.3f of its total (one pass)\n", runs[1].label,
           runs[1].wall_ms / runs[3].wall_ms);
  for (int i = 1; i < n; i++)
    if (runs[i].checked && runs[i].equal != runs[i].checked)
      printf("%s: output DIFFERS from eager on %d of %d sampled steps\n", runs[i].label,
             runs[i].checked - runs[i].equal, runs[i].checked);
  for (int i = 1; i < n; i++)
    if (runs[i].graphed && strstr(runs[i].label, "adaptive"))
      printf("adaptive buckets: %llu changes over the trace\n",
             (unsigned long long)runs[i].pass[0].st.bucket_changes);
}

/*
 * Loads the configuration under test, or a variant of it with another bucket distribution, or
 * (by_tokens) the padded-token plan of issue 43's comparison: [local] by_time = off and
 * [inference] adapt_by = tokens, every step at its padded bucket as before buckets by time.
 */
static int load_variant(const struct bench_opts *o, int set_dist, cgrt_bucket_dist dist,
                        int by_tokens, cgrt_tool_config **cfg) {
  static const char *default_conf = "[cuda_graph]\nimpl = local\n[runtime]\ndriver = cuda\n"
                                    "log = warn\n";
  int status = tool_load_config(o->conf, default_conf, "<bench default: local>", cfg, set_dist);
  if (status != EXIT_VALID)
    return status;
  struct cgrt_config_view *v = cgrt_tool_config_view(*cfg);
  v->driver = CGRT_DRIVER_CUDA;
  if (set_dist)
    v->buckets = dist;
  bench_opts_apply(o, v);
  if (by_tokens) {
    v->adapt_by = CGRT_ADAPT_BY_TOKENS;
    if (cgrt_tool_config_set_option(*cfg, "local", "by_time", "off") != 0) {
      fprintf(stderr, "cgrt bench: setting [local] by_time = off: %s\n", cgrt_last_error(NULL));
      cgrt_tool_config_free(*cfg);
      *cfg = NULL;
      return EXIT_UNUSABLE;
    }
  }
  return EXIT_VALID;
}

/* Run i's configuration again, for its second pass (the first's was consumed by its runtime). */
static int reload(const struct bench_opts *o, int i, cgrt_bucket_dist alt_dist,
                  cgrt_tool_config **cfg) {
  if (i != 0)
    return load_variant(o, i == 2, i == 2 ? alt_dist : 0, i == 3, cfg);
  cgrt_tool_config *base = NULL;
  int status = load_variant(o, 0, 0, 0, &base);
  if (status == EXIT_VALID)
    status = tool_eager_config(cgrt_tool_config_view(base), cfg);
  cgrt_tool_config_free(base);
  return status;
}

static const char *dist_name(cgrt_bucket_dist d) {
  static const char *const names[] = {"exponential", "linear", "list", "adaptive"};
  return (unsigned)d < sizeof(names) / sizeof(names[0]) ? names[d] : "?";
}

int bench_traffic(const struct bench_workload *w, const struct bench_opts *o) {
  if (bench_no_device("cgrt bench"))
    return EXIT_UNUSABLE;
  cgrt_tool_config *cfg = NULL, *alt = NULL, *eager_cfg = NULL, *check_cfg = NULL, *tok = NULL;
  struct traffic t = {0};
  struct host_model hm[4] = {{0}}, check_eager = {0};
  struct traffic_run runs[4];
  memset(runs, 0, sizeof(runs));
  void *ws = NULL;
  char err[1024], what[256] = "";
  int status = load_variant(o, 0, 0, 0, &cfg);
  if (status != EXIT_VALID)
    return status;
  status = EXIT_INVALID;
  const struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  char impl[128];
  snprintf(impl, sizeof(impl), "%s", v->impl);
  const int queued = v->max_queued_steps; /* every run's, the eager ones' too */
  int local = strcmp(impl, "local") == 0;
  /* the other distribution to compare with: exponential, or adaptive if that is configured */
  int have_alt = local || v->buckets != CGRT_BUCKETS_EXPONENTIAL;
  cgrt_bucket_dist alt_dist =
      v->buckets == CGRT_BUCKETS_EXPONENTIAL ? CGRT_BUCKETS_ADAPTIVE : CGRT_BUCKETS_EXPONENTIAL;
  snprintf(runs[0].label, sizeof(runs[0].label), "eager");
  snprintf(runs[1].label, sizeof(runs[1].label), "%s %s", impl, dist_name(v->buckets));
  snprintf(runs[2].label, sizeof(runs[2].label), "%s %s", impl, dist_name(alt_dist));
  /* local by time against its padded-token plan (issue 43) */
  snprintf(runs[3].label, sizeof(runs[3].label), "%s %s, padded-token plan", impl,
           dist_name(v->buckets));
  runs[1].graphed = runs[2].graphed = runs[3].graphed = strcmp(impl, "none") != 0;
  if (traffic_load(o->traffic, v->max_tokens, &t, err, sizeof(err)) != 0 ||
      traffic_check_padding(&t, o->traffic, v->max_tokens, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    goto out;
  }
  status = EXIT_UNUSABLE;
  if (tool_eager_config(v, &eager_cfg) != EXIT_VALID ||
      (have_alt && load_variant(o, 1, alt_dist, 0, &alt) != EXIT_VALID) ||
      (local && load_variant(o, 0, 0, 1, &tok) != EXIT_VALID))
    goto out;
  int device = v->device < 0 ? 0 : v->device; /* current: a tool's is 0 */
  struct cudaDeviceProp prop;
  cudaSetDevice(device);
  cudaGetDeviceProperties(&prop, device);
  int64_t max_rows = v->max_tokens;
  if (w->create(o, max_rows, &ws, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    goto out;
  }
  w->describe(ws, what, sizeof(what));
  /* the eager reference of the checks keeps a configuration of its own */
  if (tool_eager_config(v, &check_cfg) != EXIT_VALID)
    goto out;
  int orc = hm_open(&check_eager, w, ws, max_rows, check_cfg, NULL);
  check_cfg = NULL; /* consumed */
  if (orc != 0)
    goto out;
  /* warm the device (kernels loaded, clocks up) before the first timed run */
  struct pass warm = {0};
  struct traffic head = t;
  head.n = 1;
  head.total_steps = t.steps[0] < 64 ? (uint64_t)t.steps[0] : 64;
  if (replay_timed(&check_eager, &head, &warm) != 0)
    goto out;
  cgrt_tool_config **cfgs[4] = {&eager_cfg, &cfg, &alt, &tok};
  int n = local ? 4 : have_alt ? 3 : 2;
  /* --settle N: N rounds of every run, untimed, over the trace's first SETTLE_STEPS steps, each
     on a runtime of its own, before the timed passes. The same graphs replayed 2-3% slower in a
     process's first four graphed runtimes than in its later ones, whatever the time or the
     trace's length (docs/decisions.md, issue 43, session 47): without settling that falls on the
     padded-token plan's first two passes and on the configured run's first only. */
  struct traffic lead = t;
  lead.total_steps = t.total_steps < SETTLE_STEPS ? t.total_steps : SETTLE_STEPS;
  for (int k = 0; k < o->traffic_settle * n; k++) {
    cgrt_tool_config *c = NULL;
    struct host_model sh;
    struct pass sp = {0};
    if (reload(o, k % n, alt_dist, &c) != EXIT_VALID)
      goto out;
    int src = hm_open(&sh, w, ws, max_rows, c, NULL); /* c consumed */
    if (src == 0)
      src = replay_timed(&sh, &lead, &sp);
    cgrt_close(sh.rt);
    if (src != 0)
      goto out;
  }
  const int passes = o->traffic_passes < 1        ? 2
                     : o->traffic_passes > PASSES ? PASSES
                                                  : o->traffic_passes;
  v = NULL;                              /* the view goes with its configuration */
  for (int k = 0; k < passes * n; k++) { /* A B C D, D C B A, A B C D, ... */
    const int pass = k / n, i = pass % 2 ? n - 1 - k % n : k % n;
    struct traffic_run *r = &runs[i];
    if (pass > 0 && reload(o, i, alt_dist, cfgs[i]) != EXIT_VALID)
      goto out;
    orc = hm_open(&hm[i], w, ws, max_rows, *cfgs[i], NULL);
    *cfgs[i] = NULL; /* consumed */
    if (orc != 0 || replay_timed(&hm[i], &t, &r->pass[pass]) != 0)
      goto out;
    r->steps = t.total_steps;
    r->passes = pass + 1;
    r->wall_ms = r->steady_us = 0; /* the mean of its passes so far */
    for (int p = 0; p < r->passes; p++) {
      r->wall_ms += r->pass[p].wall_ms / r->passes;
      r->steady_us += r->pass[p].steady_us / r->passes;
    }
    if (pass == 0 && r->graphed && i > 0 && replay_checked(&hm[i], &check_eager, &t, o, r) != 0)
      goto out;
    /* one runtime at a time holds graphs and graph memory */
    cgrt_close(hm[i].rt);
    hm[i].rt = NULL;
  }
  print_runs(o, &t, what, prop.name, queued, runs, n);
  status = 0;
out:
  for (int i = 0; i < 4; i++)
    cgrt_close(hm[i].rt);
  cgrt_close(check_eager.rt);
  if (ws)
    w->destroy(ws);
  traffic_free(&t);
  cgrt_tool_config_free(cfg);
  cgrt_tool_config_free(alt);
  cgrt_tool_config_free(tok);
  cgrt_tool_config_free(eager_cfg);
  cgrt_tool_config_free(check_cfg);
  return status;
}
