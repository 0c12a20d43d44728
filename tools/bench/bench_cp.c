/*
 * bench_cp.c - `cgrt bench CONF --workload cp --ranks N`: the cp workload (decoder layers over
 * packed variable-length sequences split across a context-parallel group; kernels/cp_host.c)
 * on N GPUs, one process each (ranks.c), under the configured backend (dynamic_cp expected) and
 * under eager.
 *
 * Each rank opens runtimes from CONF on GPU `rank` and hands each its world communicator: the
 * one under test, and the eager reference, the same configuration with warmup_steps = 1000000
 * (graphs never captured: the same kernels with the same arguments, run directly). Without CONF
 * dynamic_cp is measured in both graph scopes, so two runtimes are under test: graph_scope =
 * modules (a graph per module call) and graph_scope = step (a graph per step body); each gets
 * its rows. For
 * each [dynamic_cp] cp_sizes entry that divides N (the others are dropped from both runtimes'
 * configuration, since a communicator cannot be split for them), both warm up, then their timed
 * steps alternate in blocks (the same host and GPU conditions for both) over four patterns of
 * packed sequence lengths in turn, then one more step per pattern
 * whose output rows on every rank are compared bitwise between the two, and (cp > 1) with the
 * same global rows of the cp 1 step of that pattern. The parent (which never
 * touches CUDA) prints one row per cp size and scope: the median step time of the slowest rank
 * under eager and under the backend, the speedup, the capture and instantiate time and the graphs
 * built during that cp size's steps, whether the backend's steps were replays, and the comparison.
 *
 * With [dynamic_cp] by_time = on, each bank's warm-up also covers its first by_time round, so the
 * timed steps are served the way the round chose; a row says how they were served (served:
 * graphs, eager, or mixed) and a line gives by_time's counters per cp size, so a cp size served
 * the wrong way, or a row slower than eager, shows as a number.
 *
 * The ranks run with NCCL's graph mixing off unless NCCL_GRAPH_MIXING_SUPPORT is set: the setting
 * a dynamic_cp host should run (README, on NCCL_GRAPH_MIXING_SUPPORT); the header says
 * which ran.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ranks.h"
#include "tool.h"
#include "tool_args.h"

_Static_assert(BENCH_MAX_RANKS == CGRT_RANKS_MAX, "cgrt bench checks --ranks against "
                                                  "BENCH_MAX_RANKS: keep it CGRT_RANKS_MAX");

#if defined(CGRT_HAVE_CUDA) && defined(CGRT_HAVE_NCCL)
#include "cp.h"
#endif

#define CP_PATTERNS     4
#define CP_PATTERN_SEQS 64 /* sequences of a pattern, at most */
#define CP_MAX_SIZES    16
#define CP_MAX_SCOPES   2
#define CP_HOST_STEPS   21 /* steps issued onto an idle device per host cost */
/* A by_time round's steps (backends/dynamic_cp/cp_time.h, CP_TIME_ROUND): the warm-up covers it. */
#define CP_BYTIME_ROUND 17

/*
 * Without CONF: dynamic_cp at cp 1 and 2. The launch shape (the default, --cp-shape launch) packs
 * short batches (64 tokens) through 16 narrow layers (cgrtk_cp_launch_bound_cfg): eager is bound
 * by its launches there, which is what a graph bank per cp size removes. The compute shape
 * (--cp-shape compute) is the workload's default (4 layers, d 512) over 4096-token batches:
 * bound by the GPU, where graphs gain nothing.
 */
static const char cp_launch_conf[] = "[cuda_graph]\nimpl = dynamic_cp\nmodules = attn mlp\n"
                                     "warmup_steps = 3\n[dynamic_cp]\ncp_sizes = 1 2\n"
                                     "max_packed_tokens = 64\nmax_sequences = 16\n"
                                     "[runtime]\ndriver = cuda\nlog = warn\n";
static const char cp_compute_conf[] = "[cuda_graph]\nimpl = dynamic_cp\nmodules = attn mlp\n"
                                      "warmup_steps = 3\n[dynamic_cp]\ncp_sizes = 1 2\n"
                                      "max_packed_tokens = 4096\nmax_sequences = 32\n"
                                      "[runtime]\ndriver = cuda\nlog = warn\n";

struct cp_pattern {
  int n;
  int32_t len[CP_PATTERN_SEQS];
  int64_t total;
};

/* One rank's figures at one cp size, written by the rank into shared memory. */
struct cp_result {
  int done;
  int equal;    /* outputs of the check steps bitwise equal to eager */
  int replayed; /* every check step of the backend was a replay */
  int64_t rows; /* rows per rank */
  double cgrt_us, eager_us;
  double cgrt_host_us, eager_host_us; /* the host's cost of issuing one step (bench_host_cost) */
  double launch_us;                   /* the host's cost of one kernel launch, before these steps */
  double capture_ms, instantiate_ms;
  uint64_t graphs_built, live_graphs;
  uint64_t comm_waits;  /* cgrt_stats.comm_waits during these steps (NCCL graph mixing off) */
  uint64_t queue_waits; /* cgrt_stats.queue_waits during these steps ([runtime] max_queued_steps) */
  int timed_replays, timed_eager; /* the backend's timed steps that replayed, that ran eagerly */
  /* by_time's counters during these steps (cgrt_stats), and the cp sizes served eagerly after */
  uint64_t time_timed, time_probe, time_eager, eager_sizes;
};

/* Shared between the parent and the ranks. */
struct cp_shared {
  char device[256];
  char impl[128];
  int kv_windows;  /* rank 0's first workload under test: cgrtk_cp_symmetric_windows */
  char mixing[48]; /* NCCL's graph mixing as rank 0's runtime read it (mixing_setting) */
  struct cp_result res[CGRT_RANKS_MAX][CP_MAX_SIZES][CP_MAX_SCOPES];
};

/* What every rank needs, set up by the parent before the fork. */
struct cp_bench {
  const struct bench_opts *o;
  int nranks;
  int cps[CP_MAX_SIZES]; /* cp sizes dividing nranks, ascending */
  int ncps;
  int warmup;  /* untimed steps per runtime and cp size */
  int by_time; /* [dynamic_cp] by_time = on */
  /* The runtimes under test: CONF's graph scope, or (without CONF) modules then step. */
  cgrt_cp_scope scopes[CP_MAX_SCOPES];
  int nscopes;
  struct cp_pattern pat[CP_PATTERNS];
  struct cp_shared *sh;
};

/* Four patterns of sequence lengths: 1, 3, 7 and 16 sequences (fewer if max_sequences says so),
 * filling 7/8, all, 3/4 and 5/8 of max_packed_tokens, lengths uneven. */
static void make_patterns(struct cp_pattern *p, int64_t max_tokens, int max_sequences) {
  static const int nseq[CP_PATTERNS] = {1, 3, 7, 16};
  static const int eighths[CP_PATTERNS] = {7, 8, 6, 5};
  for (int k = 0; k < CP_PATTERNS; k++) {
    int n = nseq[k] < max_sequences ? nseq[k] : max_sequences;
    if (n < 1)
      n = 1;
    int64_t target = max_tokens * eighths[k] / 8;
    if (target < n)
      target = n <= max_tokens ? n : max_tokens;
    int64_t wsum = 0, total = 0;
    for (int i = 0; i < n; i++)
      wsum += 1 + (i * 5 + k * 3) % 7;
    for (int i = 0; i < n; i++) {
      int64_t l = target * (1 + (i * 5 + k * 3) % 7) / wsum;
      p[k].len[i] = (int32_t)(l > 0 ? l : 0);
      total += p[k].len[i];
    }
    p[k].len[0] += (int32_t)(target - total); /* the rounding remainder */
    p[k].n = n;
    p[k].total = target;
  }
}

#if defined(CGRT_HAVE_CUDA) && defined(CGRT_HAVE_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cp_host.h"
#include "probe.h"

/*
 * What one kernel launch costs this host right now: the median over 5 rounds of 100 empty
 * launches on an idle stream, in microseconds (0 if a launch fails). An eager step of a
 * launch-bound shape costs about its launches times this, and it differs between hosts and even
 * between processes on one host (CPU placement, clocks): printed beside eager_us so that a
 * moving eager figure can be told from a moving replay.
 */
static double launch_cost_us(void) {
  cudaStream_t s = NULL;
  double r[5];
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    return 0;
  for (int k = 0; k < 5; k++) {
    cudaStreamSynchronize(s);
    const uint64_t t0 = cgrt_tool_now_ns();
    for (int i = 0; i < 100; i++)
      if (cgrtk_empty_launch(s) != 0) {
        cudaStreamDestroy(s);
        return 0;
      }
    r[k] = (double)(cgrt_tool_now_ns() - t0) / 1e3 / 100;
  }
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  return bench_median(r, 5);
}

/* The workload's shape (*wc) and the configuration used without CONF, for o->cp_shape. */
static const char *cp_shape(const struct bench_opts *o, struct cgrtk_cp_cfg *wc) {
  if (o->cp_shape && strcmp(o->cp_shape, "compute") == 0) {
    cgrtk_cp_default_cfg(wc);
    return cp_compute_conf;
  }
  cgrtk_cp_launch_bound_cfg(wc);
  return cp_launch_conf;
}

/* Loads CONF (or the default) for rank `rank`: the cuda driver on GPU `rank`, only the cp sizes
 * that divide the world, --max-queued-steps and --memory-budget if given, and for the eager
 * reference (scope < 0) warmup_steps = 1000000. A runtime under test of the default configuration
 * gets graph scope `scope`; step scope graphs every call, so it takes no modules list and no
 * per-step loss read (the rules of graph_scope = step; the bench's host reads no loss). */
static int load_config(const struct cp_bench *b, int rank, int scope, cgrt_tool_config **cfg) {
  /* Quiet: the parent printed the messages. */
  struct cgrtk_cp_cfg wc;
  if (tool_load_config(b->o->conf, cp_shape(b->o, &wc), "<bench cp default>", cfg, 1) != EXIT_VALID)
    return CGRT_E_CONFIG;
  struct cgrt_config_view *v = cgrt_tool_config_view(*cfg);
  v->driver = CGRT_DRIVER_CUDA;
  v->device = rank;
  /* every runtime: under test, of the default's scopes, and eager (which captures nothing, so the
     budget binds nothing there) */
  bench_opts_apply(b->o, v);
  if (scope < 0)
    v->warmup_steps = 1000000;
  else if (!b->o->conf && scope == CGRT_CP_SCOPE_STEP) {
    /* dynamic_cp's own option, not a view field (host API minor 5) */
    int rc = cgrt_tool_config_set_option(*cfg, "dynamic_cp", "graph_scope", "step");
    if (rc != 0)
      return rc;
    v->modules = 0;
    v->nan_check = 0;
  }
  return cgrt_tool_config_set_cp_sizes(*cfg, b->cps, (size_t)b->ncps);
}

/* Steps at one cp size, cycling through the length patterns. */
struct cp_stepper {
  struct cp_host *h;
  const struct cp_bench *b;
  int cp;
  uint64_t i;
  int replays, eager; /* timed steps that replayed, that ran eagerly */
};

static int cp_step(void *arg, int timed) {
  struct cp_stepper *st = arg;
  const struct cp_pattern *p = &st->b->pat[st->i % CP_PATTERNS];
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int rc = cp_host_step(st->h, st->i, p->len, p->n, st->cp, &rep);
  st->i++;
  if (rc == 0 && timed) {
    st->replays += rep.mode == CGRT_MODE_REPLAY;
    st->eager += rep.mode == CGRT_MODE_EAGER;
  }
  return rc;
}

/*
 * Steps at cp size cp under each runtime under test (hg[0..b->nscopes)) and under eager (he):
 * each warms up, then their timed steps alternate in o->blocks blocks (bench_time_blocks), so all
 * see the same host and GPU conditions; an eager step is bound by the host's launches, whose cost
 * moves with the host's state, and timing them one after the other let that drift into the
 * speedup. us_g[s] and *us_e get the median step times, host_g[s] and *host_e what issuing a
 * step costs the host (bench_host_cost): a replay whose host cost is near its step time is bound
 * by the host.
 */
static int run_steps(struct cp_host *hg, struct cp_host *he, const struct cp_bench *b, int cp,
                     double *us_g, double *us_e, double *host_g, double *host_e,
                     struct cp_result *r) {
  struct cp_stepper st[CP_MAX_SCOPES + 1];
  struct bench_stepper bs[CP_MAX_SCOPES + 1];
  const int n = b->nscopes + 1;
  for (int i = 0; i < n; i++) {
    struct cp_host *h = i < b->nscopes ? &hg[i] : he;
    st[i] = (struct cp_stepper){h, b, cp, 0, 0, 0};
    bs[i] = (struct bench_stepper){cp_step, &st[i], cgrt_stream(h->rt)};
  }
  struct bench_opts o = *b->o;
  o.warmup = b->warmup;
  double us[CP_MAX_SCOPES + 1] = {0};
  double host[CP_MAX_SCOPES + 1] = {0};
  int rc = bench_time_blocks(bs, n, &o, us);
  for (int i = 0; i < n && rc == 0; i++)
    rc = bench_host_cost(&bs[i], CP_HOST_STEPS, &host[i]);
  for (int i = 0; i < b->nscopes; i++) {
    us_g[i] = us[i];
    host_g[i] = host[i];
    r[i].timed_replays = st[i].replays;
    r[i].timed_eager = st[i].eager;
  }
  *us_e = us[b->nscopes];
  *host_e = host[b->nscopes];
  return rc;
}

/*
 * One check step per pattern on both runtimes; 1 if every output is bitwise equal, and equal to
 * the same global rows of cp 1's output for that pattern (cp1[k], kept at cp 1 from the eager
 * runtime; NULL when cp 1 is not measured): a row's math does not depend on the cp size, so a
 * wrong all-gather shows even when graphs and eager share it.
 */
static int check_steps(struct cp_host *hg, struct cp_host *he, const struct cp_bench *b, int cp,
                       float *og, float *oe, size_t cap, float *cp1, int *replayed, int64_t *rows) {
  int equal = 1, rc = 0;
  *replayed = 1;
  for (int k = 0; rc == 0 && k < CP_PATTERNS; k++) {
    const struct cp_pattern *p = &b->pat[k];
    const uint64_t data = (1ull << 32) | (uint64_t)k;
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    int64_t rg = 0, re = 0;
    rc = cp_host_step(hg, data, p->len, p->n, cp, &rep);
    if (rc == 0)
      rc = cp_host_read(hg, cp, og, cap, &rg);
    if (rc == 0 && rep.mode != CGRT_MODE_REPLAY)
      *replayed = 0;
    if (rc == 0 && (rc = cp_host_step(he, data, p->len, p->n, cp, NULL)) == 0)
      rc = cp_host_read(he, cp, oe, cap, &re);
    const size_t row_bytes = cgrtk_cp_row_bytes(hg->w);
    if (rc == 0 && (rg != re || memcmp(og, oe, (size_t)rg * row_bytes) != 0))
      equal = 0;
    int64_t row0 = 0;
    if (rc == 0 && cp1 && (rc = cp_host_local(he, cp, &row0, NULL, NULL)) == 0) {
      float *ref = cp1 + (size_t)k * cap;
      if (cp == 1)
        memcpy(ref, oe, (size_t)re * row_bytes);
      else if (memcmp(oe, (char *)ref + (size_t)row0 * row_bytes, (size_t)re * row_bytes) != 0)
        equal = 0;
    }
    *rows = rg;
  }
  return rc ? -1 : equal;
}

/* NCCL's graph mixing as rt read NCCL_GRAPH_MIXING_SUPPORT at the split (as NCCL reads it), and
 * whether the variable was set, for the header (printed into JSON too: never the raw text). */
static void mixing_setting(const cgrt_runtime *rt, char *buf, size_t len) {
  const int off = cgrt_tool_nccl_mixing_off(rt);
  const char *m = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  snprintf(buf, len, "%s (NCCL_GRAPH_MIXING_SUPPORT%s)",
           off < 0   ? "unknown"
           : off > 0 ? "off"
                     : "on",
           !m                    ? " unset"
           : strcmp(m, "0") == 0 ? "=0"
           : strcmp(m, "1") == 0 ? "=1"
                                 : " set");
}

static int cp_rank_main(int rank, int nranks, const void *nccl_id, size_t id_len, void *arg) {
  struct cp_bench *b = arg;
  static struct cp_host hg[CP_MAX_SCOPES], he; /* large: off the stack */
  cgrt_runtime *rg[CP_MAX_SCOPES] = {NULL}, *re = NULL;
  cgrtk_cp *wg[CP_MAX_SCOPES] = {NULL}, *we = NULL;
  void *world = NULL;
  float *og = NULL, *oe = NULL, *cp1 = NULL;
  char err[512] = "";
  int status = EXIT_UNUSABLE, rc = 0;
  const int ns = b->nscopes;

  if (cgrt_rank_comm_init(&world, rank, nranks, nccl_id, id_len, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    return EXIT_UNUSABLE;
  }
  struct cgrtk_cp_cfg wc;
  cp_shape(b->o, &wc);
  int64_t max_rows = 0; /* cp 1 holds the whole padded batch */
  /* The runtimes under test, then the eager reference; each consumes its configuration. */
  for (int i = 0; i <= ns && rc == 0; i++) {
    cgrt_tool_config *c = NULL;
    if (load_config(b, rank, i < ns ? (int)b->scopes[i] : -1, &c) != 0) {
      fprintf(stderr, "cgrt bench: rank %d: the configuration no longer loads\n", rank);
      goto out;
    }
    max_rows = cgrt_tool_config_view(c)->max_packed_tokens;
    if (i == 0 && rank == 0) {
      struct cudaDeviceProp prop;
      if (cudaGetDeviceProperties(&prop, rank) == cudaSuccess)
        snprintf(b->sh->device, sizeof(b->sh->device), "%s", prop.name);
      snprintf(b->sh->impl, sizeof(b->sh->impl), "%s", cgrt_tool_config_view(c)->impl);
    }
    cgrtk_cp **w = i < ns ? &wg[i] : &we;
    if (cgrtk_cp_create(w, &wc, max_rows, err, sizeof(err)) != 0) {
      fprintf(stderr, "cgrt bench: rank %d: %s\n", rank, err);
      cgrt_tool_config_free(c);
      goto out;
    }
    rc = cgrt_tool_open(i < ns ? &rg[i] : &re, c, NULL, NULL);
  }
  const size_t cap = (size_t)max_rows * (size_t)wc.d_model;
  og = malloc(cap * sizeof(float));
  oe = malloc(cap * sizeof(float));
  if (b->cps[0] == 1) /* cp 1 runs first: its rows are the others' reference */
    cp1 = malloc(CP_PATTERNS * cap * sizeof(float));
  if (rc != 0 || !og || !oe || (b->cps[0] == 1 && !cp1)) {
    fprintf(stderr, "cgrt bench: rank %d: %s\n", rank,
            rc ? cgrt_last_error(NULL) : "out of host memory");
    goto out;
  }
  for (int i = 0; i <= ns; i++) {
    cgrt_runtime *rt = i < ns ? rg[i] : re;
    if (cp_host_open(i < ns ? &hg[i] : &he, i < ns ? wg[i] : we, rt) != 0 ||
        cgrt_set_world_comm(rt, world) != 0) {
      fprintf(stderr, "cgrt bench: rank %d: %s\n", rank, cgrt_last_error(rt));
      goto out;
    }
  }
  for (int i = 0; i < b->ncps; i++) {
    const int cp = b->cps[i];
    struct cp_result *r = b->sh->res[rank][i];
    cgrt_stats s0[CP_MAX_SCOPES], s1[CP_MAX_SCOPES];
    for (int k = 0; k < ns; k++) {
      s0[k] = s1[k] = (cgrt_stats){.struct_size = sizeof(cgrt_stats)};
      cgrt_stats_get(rg[k], &s0[k]);
    }
    const double launch_us = launch_cost_us();
    double us_g[CP_MAX_SCOPES] = {0}, us_e = 0, host_g[CP_MAX_SCOPES] = {0}, host_e = 0;
    rc = run_steps(hg, &he, b, cp, us_g, &us_e, host_g, &host_e, r);
    for (int k = 0; k < ns && rc == 0; k++) {
      int equal = check_steps(&hg[k], &he, b, cp, og, oe, cap, cp1, &r[k].replayed, &r[k].rows);
      if (equal < 0) {
        fprintf(stderr, "cgrt bench: rank %d, cp %d: %s (backend: %s; eager: %s)\n", rank, cp,
                cgrt_strerror(rc), cp_host_error(&hg[k]), cp_host_error(&he));
        goto out;
      }
      cgrt_stats_get(rg[k], &s1[k]);
      r[k].equal = equal;
      r[k].cgrt_us = us_g[k];
      r[k].eager_us = us_e;
      r[k].cgrt_host_us = host_g[k];
      r[k].eager_host_us = host_e;
      r[k].launch_us = launch_us;
      r[k].capture_ms = (double)(s1[k].capture_ns - s0[k].capture_ns) / 1e6;
      r[k].instantiate_ms = (double)(s1[k].instantiate_ns - s0[k].instantiate_ns) / 1e6;
      r[k].graphs_built = s1[k].instantiations - s0[k].instantiations;
      r[k].live_graphs = s1[k].live_graphs;
      r[k].comm_waits = s1[k].comm_waits - s0[k].comm_waits;
      r[k].queue_waits = s1[k].queue_waits - s0[k].queue_waits;
      r[k].time_timed = s1[k].timed_steps - s0[k].timed_steps;
      r[k].time_probe = s1[k].time_probe_steps - s0[k].time_probe_steps;
      r[k].time_eager = s1[k].time_eager_steps - s0[k].time_eager_steps;
      r[k].eager_sizes = s1[k].time_eager_counts;
      r[k].done = 1;
    }
    if (rc != 0) {
      fprintf(stderr, "cgrt bench: rank %d, cp %d: %s (backend: %s; eager: %s)\n", rank, cp,
              cgrt_strerror(rc), cp_host_error(&hg[0]), cp_host_error(&he));
      goto out;
    }
  }
  if (rank == 0) {
    b->sh->kv_windows = cgrtk_cp_symmetric_windows(wg[0]);
    mixing_setting(rg[0], b->sh->mixing, sizeof(b->sh->mixing));
  }
  status = 0;
out:
  /* Graphs hold references to the split communicators: release them; destroy the workloads
   * (their K/V windows are registered on the splits), then close (which destroys the splits),
   * and only then the world communicator. */
  for (int i = 0; i < ns; i++)
    if (rg[i])
      cgrt_release_graphs(rg[i]);
  if (re)
    cgrt_release_graphs(re);
  for (int i = 0; i < ns; i++)
    cgrtk_cp_destroy(wg[i]);
  cgrtk_cp_destroy(we);
  for (int i = 0; i < ns; i++)
    cgrt_close(rg[i]);
  cgrt_close(re);
  free(og);
  free(oe);
  free(cp1);
  if (cgrt_rank_comm_destroy(world, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: rank %d: %s\n", rank, err);
    status = EXIT_UNUSABLE;
  }
  return status;
}

/* What decides how the all-gathers run, for the header: NCCL's version, its graph mixing mode
 * (NCCL_GRAPH_MIXING_SUPPORT: with 1, its default, NCCL orders each captured collective against
 * the communicator's other graphs and eager calls with event nodes in the graph) and whether
 * the K/V buffer is a symmetric window. */
static void comm_setup(const struct cp_shared *sh, char *buf, size_t len) {
  int nv = 0;
  if (ncclGetVersion(&nv) != ncclSuccess)
    nv = 0;
  char kv[96];
  if (sh->kv_windows < 0)
    snprintf(kv, sizeof(kv), "plain (cudaMalloc)");
  else
    snprintf(kv, sizeof(kv), "from ncclMemAlloc, a symmetric window on %d communicator%s",
             sh->kv_windows, sh->kv_windows == 1 ? "" : "s");
  snprintf(buf, len, "NCCL %d.%d.%d, graph mixing %s, K/V buffer %s", nv / 10000,
           (nv % 10000) / 100, nv % 100, sh->mixing, kv);
}

/*
 * How rank r's timed steps of a row were served: "graphs" (every one replayed), "eager" (every
 * one ran eagerly, by_time's choice), else "mixed".
 */
static const char *served(const struct cp_result *x) {
  const int n = x->timed_replays + x->timed_eager;
  return x->timed_eager == 0 ? "graphs" : x->timed_replays == 0 && n > 0 ? "eager" : "mixed";
}

/* What module scope costs over step scope per graph boundary, at each cp size both scopes served
 * with graphs: when every module call of the step is graphed (attn and mlp), module scope's step
 * is step scope's work in 2 x layers graphs launched one after the other, so the difference over
 * the 2 x layers - 1 boundaries is what one costs on the device, at most (what module scope runs
 * outside its graphs, the slot's staging, is in it too; docs/decisions.md, issue 42, session 46:
 * about 3.3 us at the launch-bound shape on an H200). */
static void print_boundaries(const struct cp_bench *b, const struct cgrt_config_view *v,
                             const struct cgrtk_cp_cfg *wc,
                             const double graphed_us[CP_MAX_SIZES][CP_MAX_SCOPES]) {
  const uint64_t both = CGRT_KIND_BIT(CGRT_KIND_ATTN) | CGRT_KIND_BIT(CGRT_KIND_MLP);
  int km = -1, ks = -1;
  for (int k = 0; k < b->nscopes; k++)
    *(b->scopes[k] == CGRT_CP_SCOPE_STEP ? &ks : &km) = k;
  const int boundaries = 2 * wc->layers - 1;
  if (km < 0 || ks < 0 || (v->modules & both) != both || boundaries < 1)
    return;
  for (int i = 0; i < b->ncps; i++) {
    const double m = graphed_us[i][km], st = graphed_us[i][ks];
    if (m > 0 && st > 0)
      printf("cp %d: module scope %.1f us a step over step scope, %.2f us per graph boundary "
             "(%d module graphs a step)\n",
             b->cps[i], m - st, (m - st) / boundaries, boundaries + 1);
  }
}

/* The parent's table from every rank's figures: the slowest rank's times, all ranks' checks. */
static int print_results(const struct cp_bench *b, const struct cgrt_config_view *v) {
  const struct cp_shared *sh = b->sh;
  char comm[224];
  comm_setup(sh, comm, sizeof(comm));
  struct cgrtk_cp_cfg wc;
  cp_shape(b->o, &wc);
  char modules[128] = "";
  for (int k = 0, n = 0; k < CGRT_KIND_COUNT; k++)
    if (v->modules & CGRT_KIND_BIT(k))
      n += snprintf(modules + n, sizeof(modules) - (size_t)n, "%s%s", n ? " " : "",
                    cgrt_kind_name((cgrt_kind)k));
  if (!b->o->json) {
    printf("cgrt bench: workload cp (%d layers, d %d, %d heads, ffn %d, fp32), backend %s%s%s%s, "
           "%d ranks, %s\n",
           wc.layers, wc.d_model, wc.heads, wc.ffn, sh->impl, modules[0] ? " (modules " : "",
           modules, modules[0] ? ")" : "", b->nranks, sh->device);
    printf("%s\n", comm);
    bench_print_queue(b->o, v->max_queued_steps);
    bench_print_budget(b->o);
    if (b->nscopes > 1)
      printf("graph_scope modules: a graph per module call; graph_scope step: one graph per step "
             "body (modules empty); one eager reference for both\n");
    printf("packed batches padded to max_packed_tokens %lld (max_sequences %d), %d length "
           "patterns in turn (",
           (long long)v->max_packed_tokens, v->max_sequences, CP_PATTERNS);
    for (int k = 0; k < CP_PATTERNS; k++)
      printf("%s%d seqs/%lld tokens", k ? ", " : "", b->pat[k].n, (long long)b->pat[k].total);
    printf("); median of %d steps, eager and cgrt in turn in %d blocks, slowest rank\n",
           b->o->steps, b->o->blocks);
    printf("%4s %8s %10s %10s %10s %10s %10s %8s %10s %11s %9s %7s %9s %8s %7s\n", "cp", "scope",
           "rows/rank", "eager_us", "eager_host", "cgrt_us", "cgrt_host", "speedup", "launch_us",
           "capture_ms", "inst_ms", "graphs", "replayed", "bitwise", "served");
  }
  int all_equal = 1, slower = 0, slower_2pct = 0;
  uint64_t all_waits = 0, all_queue_waits = 0;
  /* each row's step time when every rank replayed graphs (0 otherwise), for the boundary line */
  double graphed_us[CP_MAX_SIZES][CP_MAX_SCOPES] = {{0}};
  char counters[1024] = "";
  size_t nc = 0;
  for (int row = 0; row < b->ncps * b->nscopes; row++) {
    const int i = row / b->nscopes, k = row % b->nscopes;
    const char *scope = b->scopes[k] == CGRT_CP_SCOPE_STEP ? "step" : "modules";
    double cg = 0, ce = 0, hg = 0, he = 0, cap = 0, inst = 0, lu = 0;
    uint64_t built = 0, live = 0, waits = 0, queue_waits = 0;
    int equal = 1, replayed = 1, done = 1;
    int64_t rows = 0;
    /* by_time's choice must be the group's: every rank served the row the same way */
    const char *way = served(&sh->res[0][i][k]);
    for (int r = 0; r < b->nranks; r++) {
      const struct cp_result *x = &sh->res[r][i][k];
      done &= x->done;
      equal &= x->equal;
      replayed &= x->replayed;
      if (strcmp(served(x), way) != 0)
        way = "ranks differ";
      cg = x->cgrt_us > cg ? x->cgrt_us : cg;
      ce = x->eager_us > ce ? x->eager_us : ce;
      lu = x->launch_us > lu ? x->launch_us : lu;
      hg = x->cgrt_host_us > hg ? x->cgrt_host_us : hg;
      he = x->eager_host_us > he ? x->eager_host_us : he;
      if (r == 0) {
        cap = x->capture_ms, inst = x->instantiate_ms, built = x->graphs_built;
        live = x->live_graphs, rows = x->rows, waits = x->comm_waits;
        queue_waits = x->queue_waits;
      }
    }
    equal &= done;
    all_equal &= equal;
    if (done && strcmp(way, "graphs") == 0)
      graphed_us[i][k] = cg;
    all_waits += waits;
    all_queue_waits += queue_waits;
    slower += cg > ce;
    slower_2pct += cg > ce * 1.02;
    const struct cp_result *x0 = &sh->res[0][i][k];
    if (b->by_time && nc < sizeof(counters))
      nc +=
          (size_t)snprintf(counters + nc, sizeof(counters) - nc,
                           "%s cp %d %s: %llu timed, %llu eager to measure, %llu eager by choice",
                           nc ? ";" : "", b->cps[i], scope, (unsigned long long)x0->time_timed,
                           (unsigned long long)x0->time_probe, (unsigned long long)x0->time_eager);
    if (b->o->json) {
      printf("{\"workload\":\"cp\",\"backend\":");
      tool_json_string(sh->impl); /* may be a path */
      printf(",\"device\":");
      tool_json_string(sh->device);
      printf(",\"ranks\":%d,\"cp\":%d,"
             "\"graph_scope\":\"%s\",\"rows_per_rank\":%lld,\"eager_us\":%.1f,"
             "\"eager_host_us\":%.1f,\"cgrt_us\":%.1f,\"cgrt_host_us\":%.1f,\"speedup\":%.3f,"
             "\"launch_us\":%.2f,\"capture_ms\":%.3f,\"instantiate_ms\":%.3f,"
             "\"graphs_built\":%llu,\"live_graphs\":%llu,\"comm_waits\":%llu,"
             "\"max_queued_steps\":%d,\"queue_waits\":%llu,\"replayed\":%s,"
             "\"bitwise\":%s,\"comm\":\"%s\",\"by_time\":%s,\"served\":\"%s\","
             "\"timed_steps\":%llu,\"time_probe_steps\":%llu,\"time_eager_steps\":%llu,"
             "\"time_eager_counts\":%llu}\n",
             b->nranks, b->cps[i], scope, (long long)rows, ce, he, cg, hg, cg > 0 ? ce / cg : 0.0,
             lu, cap, inst, (unsigned long long)built, (unsigned long long)live,
             (unsigned long long)waits, v->max_queued_steps, (unsigned long long)queue_waits,
             replayed ? "true" : "false", equal ? "true" : "false", comm,
             b->by_time ? "true" : "false", way, (unsigned long long)x0->time_timed,
             (unsigned long long)x0->time_probe, (unsigned long long)x0->time_eager,
             (unsigned long long)x0->eager_sizes);
    } else {
      printf("%4d %8s %10lld %10.1f %10.1f %10.1f %10.1f %7.2fx %10.2f %11.2f %9.2f %7llu %9s %8s "
             "%7s\n",
             b->cps[i], scope, (long long)rows, ce, he, cg, hg, cg > 0 ? ce / cg : 0.0, lu, cap,
             inst, (unsigned long long)built, replayed ? "yes" : "no", equal ? "equal" : "DIFFER",
             way);
    }
  }
  if (!b->o->json)
    printf("eager_host, cgrt_host: what issuing one step cost the host, in us (median of %d steps "
           "each issued onto an idle device, slowest rank); a step whose host cost is near its "
           "step time is bound by the host\nlaunch_us: what one kernel launch cost the host just "
           "before that cp size's steps (empty kernel, slowest rank); an eager step of a "
           "launch-bound shape costs about its launches times this\ncapture_ms, inst_ms, graphs: "
           "during that cp size's steps on rank "
           "0 (each bank is captured on its own steps)\nbitwise: "
           "every rank's output rows equal eager's and (cp > 1) the same rows at cp 1\nserved: how "
           "the timed steps ran on every rank (graphs; eager: by_time served the cp size eagerly; "
           "mixed; ranks differ)\n",
           CP_HOST_STEPS);
  if (!b->o->json) {
    print_boundaries(b, v, &wc, graphed_us);
    printf("rows slower than eager: %d; more than 2%% slower: %d (the target of issue 42: 0)\n",
           slower, slower_2pct);
    if (b->by_time)
      printf("by_time (rank 0, during each row's steps, warm-up included):%s\n", counters);
  }
  if (!b->o->json && all_waits)
    printf("NCCL graph mixing off: work cgrt ran outside a graph waited %llu times for the graphs "
           "it had launched (rank 0, warm-up steps included; comm_waits in "
           "--json)\n",
           (unsigned long long)all_waits);
  if (!b->o->json && all_queue_waits)
    printf("max_queued_steps = %d: steps waited %llu times for the step %d before them to finish "
           "before they were issued (rank 0, warm-up steps included; queue_waits in --json)\n",
           v->max_queued_steps, (unsigned long long)all_queue_waits, v->max_queued_steps);
  return all_equal ? 0 : EXIT_INVALID;
}

int bench_cp(const struct bench_opts *o) {
  cgrt_tool_config *cfg = NULL;
  struct cgrtk_cp_cfg wc;
  if (o->cp_shape && strcmp(o->cp_shape, "launch") != 0 && strcmp(o->cp_shape, "compute") != 0) {
    fprintf(stderr, "cgrt bench: --cp-shape '%s': expected launch or compute\n", o->cp_shape);
    return EXIT_UNUSABLE;
  }
  int status = tool_load_config(o->conf, cp_shape(o, &wc), "<bench cp default>", &cfg, 0);
  if (status != EXIT_VALID)
    return status;
  if (o->set_queue) /* as the ranks' runtimes have it (load_config), for the table */
    cgrt_tool_config_view(cfg)->max_queued_steps = o->max_queued_steps;
  const struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  struct cp_bench b = {.o = o};
  b.nranks = o->ranks > 0 ? o->ranks : v->cp_sizes[v->num_cp_sizes - 1];
  char skipped[128] = "";
  for (size_t i = 0, n = 0; i < v->num_cp_sizes; i++) {
    if (b.nranks % v->cp_sizes[i] == 0 && b.ncps < CP_MAX_SIZES)
      b.cps[b.ncps++] = v->cp_sizes[i];
    else
      n += (size_t)snprintf(skipped + n, sizeof(skipped) - n, " %d", v->cp_sizes[i]);
  }
  status = EXIT_UNUSABLE;
  if (strcmp(v->impl, "dynamic_cp") != 0)
    fprintf(stderr,
            "cgrt bench: note: impl = %s; the cp workload is meant for dynamic_cp (other backends "
            "give no THD slots: the workload stages its own metadata)\n",
            v->impl);
  if (skipped[0])
    fprintf(stderr, "cgrt bench: note: cp sizes%s do not divide %d ranks; left out\n", skipped,
            b.nranks);
  if (b.nranks > CGRT_RANKS_MAX || b.ncps == 0) {
    fprintf(stderr, "cgrt bench: no [dynamic_cp] cp_sizes entry divides %d ranks (at most %d)\n",
            b.nranks, CGRT_RANKS_MAX);
    goto out;
  }
  make_patterns(b.pat, v->max_packed_tokens, v->max_sequences);
  b.scopes[b.nscopes++] = v->cp_scope;
  if (!o->conf && strcmp(v->impl, "dynamic_cp") == 0) /* the default: both scopes */
    b.scopes[b.nscopes++] = CGRT_CP_SCOPE_STEP;
  /* dynamic_cp captures a bank's slots on its own steps: after its first warmup_steps, each slot
     at its next step once it ran eagerly, so every step replays after max(warmup_steps,
     graph_slots) + graph_slots of them; the timed steps must all be replays. */
  const int slots = v->graph_slots > 0 ? v->graph_slots : 1;
  const int to_replay = (v->warmup_steps > slots ? v->warmup_steps : slots) + slots;
  b.warmup = o->warmup > to_replay ? o->warmup : to_replay;
  /* by_time: a bank's first round starts at its first replay; the warm-up covers it, so the timed
     steps are served the way it chose (the eager reference never reaches a round). */
  int64_t by_time = 0;
  if (CGRT_VIEW_HAS(v, get_int) && v->get_int &&
      v->get_int(v, "dynamic_cp", "by_time", &by_time) == 0 && by_time) {
    b.by_time = 1;
    if (b.warmup < to_replay + CP_BYTIME_ROUND + 1)
      b.warmup = to_replay + CP_BYTIME_ROUND + 1;
  }
  b.sh = cgrt_ranks_shared(sizeof(struct cp_shared));
  if (!b.sh) {
    fprintf(stderr, "cgrt bench: mmap of the results failed\n");
    goto out;
  }
  /* NCCL's graph mixing off unless the environment names it (before the ranks start NCCL, which
     reads it once). With it on, every collective captured into a graph gets an event wait and an
     event record: module scope at cp 2 replayed 352-391 us a step against 332-338 with it off, 12
     runs each on two and four H200s (docs/decisions.md, issue 42, session 39). Off is safe for what
     the bench runs: cgrt waits for its queued graphs before it runs work outside a graph on its
     split communicators (core/src/comm/comm.c), and the bench's world communicator is never
     captured. NCCL_GRAPH_MIXING_SUPPORT=1 measures it on; the header says which ran. */
  setenv("NCCL_GRAPH_MIXING_SUPPORT", "0", 0);
  char err[1024];
  int rc = cgrt_run_ranks(b.nranks, cp_rank_main, &b, o->timeout_s > 0 ? o->timeout_s : 600, err,
                          sizeof(err));
  if (rc == 0)
    status = print_results(&b, v);
  else
    fprintf(stderr, "cgrt bench: %s\n", err);
  cgrt_ranks_shared_free(b.sh, sizeof(struct cp_shared));
out:
  cgrt_tool_config_free(cfg);
  return status;
}

#else

int bench_cp(const struct bench_opts *o) {
  (void)o;
  (void)make_patterns;
  (void)cp_launch_conf;
  (void)cp_compute_conf;
  fprintf(stderr,
          "cgrt bench: no CUDA device: cgrt was built without NCCL (the cp workload needs it)\n");
  return EXIT_UNUSABLE;
}

#endif
