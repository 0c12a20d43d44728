/*
 * test_cp.c (multi-GPU) - the cp workload (kernels/cp_host.c) under dynamic_cp on 2 GPUs, one
 * process each (tools/bench/ranks.c), cp_sizes = 1 2: steps alternating cp 1 and cp 2 over varying
 * packed sequence lengths (sequences crossing the ranks' chunk boundary included) give on every
 * rank output bitwise equal to the eager reference at the same cp size (the same configuration
 * with warmup_steps = 1000000); a cp 2 step's rows equal the same rows of the cp 1 step over the
 * same input (the math of a row does not depend on which rank computes it); the graphs of both
 * banks were captured and replayed; the same with graph_scope = step (one graph per step body
 * and bank slot); the K/V buffer is registered as an NCCL symmetric window on the cp 2
 * communicator when NCCL has them; with NCCL's graph mixing off (test_multigpu_cp_mixing_off),
 * the same; cp 2's first (eager) step issued behind cp 1's queued graphs equals eager, and with
 * mixing off the core waited for those graphs first; cgrt_release_graphs runs before the
 * communicators are destroyed, and every process exits within the timeout (a hang at teardown is
 * a failure). A step at a cp size without a bank is refused, naming the sizes that have one.
 *
 * The parent never touches CUDA: it forks the ranks and reports. Each rank runs the cmocka group
 * below; its output comes back prefixed "[rank N]" (rank 0's unprefixed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "cgrt/tool.h"
#include "ranks.h"

#define NRANKS    2
#define TIMEOUT_S 240

#if defined(CGRT_HAVE_CUDA) && defined(CGRT_HAVE_NCCL)
#include "cp_host.h"

#define MAX_PACKED 1024 /* [dynamic_cp] max_packed_tokens: 512 rows a rank at cp 2 */
#define MAX_SEQS   8
#define LAYERS     2
/* Steps alternating cp 1 and cp 2: per bank 2 warm-ups, 2 captures (a slot each), replays. */
#define STEPS 16

/* The rank this process is, and its world communicator (set up per group). */
static int my_rank;
static const void *my_id;
static size_t my_id_len;
static void *world;

struct lengths {
  int n;
  int32_t len[MAX_SEQS];
};

static const struct lengths patterns[] = {
    {1, {1024}},
    {3, {300, 17, 400}},
    {1, {1}},
    {4, {5, 0, 700, 2}},
    {8, {10, 600, 30, 40, 50, 60, 70, 80}},
    {1, {1023}},
    {1, {600}},
};
#define NUM_PATTERNS (int)(sizeof(patterns) / sizeof(patterns[0]))

struct side {
  cgrt_runtime *rt;
  cgrtk_cp *w;
  struct cp_host h;
};

static void side_open(struct side *s, int warmup, int step_scope) {
  char ini[512], err[256];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = dynamic_cp\n%swarmup_steps = %d\n"
           "[dynamic_cp]\ncp_sizes = 1 2\nmax_packed_tokens = %d\nmax_sequences = %d\n"
           "graph_slots = 2\nover_capacity = error\n%s[runtime]\ndriver = cuda\ndevice = %d\n"
           "log = warn\n%s",
           step_scope ? "" : "modules = attn mlp\n", warmup, MAX_PACKED, MAX_SEQS,
           step_scope ? "graph_scope = step\n" : "", my_rank,
           step_scope ? "[host]\nnan_check = off\n" : "");
  struct cgrtk_cp_cfg cfg;
  cgrtk_cp_default_cfg(&cfg);
  cfg.layers = LAYERS;
  if (cgrtk_cp_create(&s->w, &cfg, MAX_PACKED, err, sizeof(err)) != 0)
    fail_msg("rank %d: cgrtk_cp_create: %s", my_rank, err);
  if (cgrt_open_string(&s->rt, ini) != 0)
    fail_msg("rank %d: open: %s", my_rank, cgrt_last_error(NULL));
  if (cp_host_open(&s->h, s->w, s->rt) != 0)
    fail_msg("rank %d: modules: %s", my_rank, cp_host_error(&s->h));
  if (cgrt_set_world_comm(s->rt, world) != 0)
    fail_msg("rank %d: cgrt_set_world_comm: %s", my_rank, cgrt_last_error(s->rt));
}

/* Graphs hold references to the split communicators: release them explicitly, destroy the
 * workload (its K/V windows are registered on the splits), then close (which destroys the
 * splits); the world communicator goes in the group teardown. */
static void side_close(struct side *s) {
  assert_int_equal(cgrt_release_graphs(s->rt), 0);
  cgrtk_cp_destroy(s->w);
  assert_int_equal(cgrt_close(s->rt), 0);
}

/* One step at cp size cp, its local rows read into out; the row count (fails on error). */
static int64_t run_step(struct side *s, uint64_t data, const struct lengths *l, int cp, float *out,
                        cgrt_step_report *rep) {
  int rc = cp_host_step(&s->h, data, l->len, l->n, cp, rep);
  if (rc != 0)
    fail_msg("rank %d: step at cp %d: %s: %s", my_rank, cp, cgrt_strerror(rc),
             cp_host_error(&s->h));
  int64_t rows = 0;
  if (cp_host_read(&s->h, cp, out, (size_t)MAX_PACKED * 512, &rows) != 0)
    fail_msg("rank %d: read: %s", my_rank, cp_host_error(&s->h));
  return rows;
}

static float *out_graph, *out_eager, *out_cp1;

static int setup(void **state) {
  (void)state;
  char err[256];
  if (cgrt_rank_comm_init(&world, my_rank, NRANKS, my_id, my_id_len, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  const size_t n = (size_t)MAX_PACKED * 512;
  out_graph = malloc(n * sizeof(float));
  out_eager = malloc(n * sizeof(float));
  out_cp1 = malloc(n * sizeof(float));
  return out_graph && out_eager && out_cp1 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char err[256];
  free(out_graph);
  free(out_eager);
  free(out_cp1);
  if (cgrt_rank_comm_destroy(world, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  return 0;
}

/* NCCL's graph mixing off, as test_multigpu_cp_mixing_off runs (NCCL_GRAPH_MIXING_SUPPORT=0). */
static int mixing_off_env(void) {
  const char *mixing = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  return mixing && strcmp(mixing, "0") == 0;
}

static void alternating_cp(int step_scope) {
  struct side g = {0}, e = {0};
  side_open(&g, 2, step_scope);
  side_open(&e, 1000000, 0);
  const int64_t d = cgrtk_cp_config(g.w)->d_model;
  /* Mismatches are collected, not asserted at once: a rank that stopped early would leave the
   * other waiting in a collective. Every rank runs every step, then the test judges. */
  char first[256] = "";
  cgrt_mode last_mode[3] = {CGRT_MODE_EAGER, CGRT_MODE_EAGER, CGRT_MODE_EAGER};
  for (int s = 0; s < STEPS; s++) {
    const int cp = s % 2 ? 2 : 1;
    const struct lengths *l = &patterns[(s / 2) % NUM_PATTERNS];
    const uint64_t data = (uint64_t)(s / 2); /* a cp 2 step repeats the cp 1 step's input */
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    const int64_t rg = run_step(&g, data, l, cp, out_graph, &rep);
    const int64_t re = run_step(&e, data, l, cp, out_eager, NULL);
    last_mode[cp] = rep.mode;
    int64_t row0 = 0;
    assert_int_equal(cp_host_local(&g.h, cp, &row0, NULL, NULL), 0);
    assert_int_equal(rg, MAX_PACKED / cp);
    assert_int_equal(row0, cp == 2 ? my_rank * (MAX_PACKED / 2) : 0);
    if (!first[0] && (rg != re || memcmp(out_graph, out_eager, (size_t)(rg * d) * sizeof(float))))
      snprintf(first, sizeof(first), "step %d (cp %d): the output differs from eager", s, cp);
    if (cp == 1)
      memcpy(out_cp1, out_graph, (size_t)(rg * d) * sizeof(float));
    else if (!first[0] &&
             memcmp(out_graph, out_cp1 + row0 * d, (size_t)(rg * d) * sizeof(float)) != 0)
      snprintf(first, sizeof(first),
               "step %d: rows %lld..%lld at cp 2 differ from the same rows at cp 1", s,
               (long long)row0, (long long)(row0 + rg - 1));
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(g.rt, &st), 0);
  /* Only the cp 2 steps all-gather: one communicator, registered once (-1: no windows here). */
  const int windows = cgrtk_cp_symmetric_windows(g.w);
  print_message("rank %d: K/V symmetric windows: %d\n", my_rank, windows);
  /* Every step here is read (synchronized) before the next: nothing waits, mixing off or on
   * (warmup_behind_queued_graphs makes eager work follow queued graphs). */
  const int mixing_off = mixing_off_env();
  print_message("rank %d: NCCL graph mixing %s, comm waits: %llu\n", my_rank,
                mixing_off ? "off" : "on", (unsigned long long)st.comm_waits);
  const int read_off = cgrt_tool_nccl_mixing_off(g.rt); /* as the core read it at the split */
  side_close(&g);
  side_close(&e);
  if (first[0])
    fail_msg("rank %d: %s", my_rank, first);
  assert_true(windows == -1 || windows == 1);
  if (step_scope) /* both banks (cp 1, cp 2) x 2 slots, a body graph each */
    assert_int_equal(st.captures, 2 * 2);
  else /* both banks x 2 slots x (attn, mlp) per layer */
    assert_true(st.captures >= 2 * 2 * 2 * LAYERS);
  assert_true(step_scope || st.calls_by_mode[CGRT_MODE_REPLAY] > 0);
  assert_int_equal(st.fallbacks, 0);
  assert_int_equal(read_off, mixing_off);
  assert_int_equal(st.comm_waits, 0);
  assert_int_equal(last_mode[1], CGRT_MODE_REPLAY);
  assert_int_equal(last_mode[2], CGRT_MODE_REPLAY);
}

static void alternating_cp_equals_eager(void **state) {
  (void)state;
  alternating_cp(0);
}

static void step_scope_equals_eager(void **state) {
  (void)state;
  alternating_cp(1);
}

/*
 * Eager work on a communicator behind queued graphs: cp 1 warms up, captures both slots and
 * replays, then one more cp 1 replay is left queued (not read) and cp 2's first step, a warm-up
 * whose all-gathers run eagerly on the cp 2 communicator, is issued behind it. Its rows equal
 * eager's; with NCCL's graph mixing off the core drained the stream first (NCCL forbids an
 * uncaptured collective while a graph that may use the communicators is outstanding), with it on
 * nothing waited.
 */
static void warmup_behind_queued_graphs(void **state) {
  (void)state;
  struct side g = {0}, e = {0};
  side_open(&g, 2, 0);
  side_open(&e, 1000000, 0);
  const int64_t d = cgrtk_cp_config(g.w)->d_model;
  const struct lengths *l = &patterns[1];
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  cgrt_mode modes[6];
  for (int s = 0; s < 5; s++) { /* warm-up, warm-up, capture, capture, replay */
    run_step(&g, (uint64_t)s, l, 1, out_graph, &rep);
    modes[s] = rep.mode;
  }
  int rc = cp_host_step(&g.h, 5, l->len, l->n, 1, &rep); /* queued, not read */
  modes[5] = rep.mode;
  cgrt_step_report rep2 = {.struct_size = sizeof(rep2)};
  const int64_t rg = run_step(&g, 6, l, 2, out_graph, &rep2);
  const int64_t re = run_step(&e, 6, l, 2, out_eager, NULL);
  const int equal = rg == re && memcmp(out_graph, out_eager, (size_t)(rg * d) * sizeof(float)) == 0;
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(g.rt, &st), 0);
  print_message("rank %d: NCCL graph mixing %s, comm waits: %llu\n", my_rank,
                mixing_off_env() ? "off" : "on", (unsigned long long)st.comm_waits);
  side_close(&g);
  side_close(&e);
  static const cgrt_mode want[] = {CGRT_MODE_WARMUP,  CGRT_MODE_WARMUP, CGRT_MODE_CAPTURE,
                                   CGRT_MODE_CAPTURE, CGRT_MODE_REPLAY, CGRT_MODE_REPLAY};
  assert_int_equal(rc, 0);
  for (int s = 0; s < 6; s++)
    assert_int_equal(modes[s], want[s]);
  assert_int_equal(rep2.mode, CGRT_MODE_WARMUP);
  if (!equal)
    fail_msg("rank %d: cp 2's warm-up step behind cp 1's graphs differs from eager", my_rank);
  if (mixing_off_env())
    assert_true(st.comm_waits > 0);
  else
    assert_int_equal(st.comm_waits, 0);
  assert_int_equal(st.fallbacks, 0);
}

static void cp_size_without_bank_refused(void **state) {
  (void)state;
  struct side g = {0};
  side_open(&g, 2, 0);
  const struct lengths *l = &patterns[1];
  int rc = cp_host_step(&g.h, 0, l->len, l->n, 4, NULL);
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", cgrt_last_error(g.rt));
  /* The refusal happens before any collective: the runtime still works at cp 2. */
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  run_step(&g, 1, l, 2, out_graph, &rep);
  side_close(&g);
  assert_true(rc < 0);
  if (!strstr(msg, "1 2"))
    fail_msg("rank %d: the refusal does not name the cp sizes with a bank: %s", my_rank, msg);
}

static int rank_main(int rank, int nranks, const void *nccl_id, size_t id_len, void *arg) {
  (void)nranks;
  (void)arg;
  my_rank = rank;
  my_id = nccl_id;
  my_id_len = id_len;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(alternating_cp_equals_eager),
      cmocka_unit_test(step_scope_equals_eager),
      cmocka_unit_test(warmup_behind_queued_graphs),
      cmocka_unit_test(cp_size_without_bank_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown) == 0 ? 0 : 1;
}

int main(void) {
  char err[1024];
  int rc = cgrt_run_ranks(NRANKS, rank_main, NULL, TIMEOUT_S, err, sizeof(err));
  if (rc == CGRT_E_NODEV || rc == CGRT_E_UNSUPPORTED) {
    printf("SKIPPED: %s\n", err);
    return 77;
  }
  if (rc != 0) {
    printf("FAILED: %s\n", err);
    return 1;
  }
  printf("test_cp: %d ranks passed and exited cleanly\n", NRANKS);
  return 0;
}

#else

int main(void) {
  printf("SKIPPED: the multi-GPU cp test needs CUDA and NCCL; cgrt was built without %s\n",
#ifdef CGRT_HAVE_CUDA
         "NCCL"
#else
         "CUDA"
#endif
  );
  return 77;
}

#endif
