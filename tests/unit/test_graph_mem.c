/*
 * test_graph_mem.c - graph memory per graph and the memory budget, end to end on the host
 * driver, which models graph memory as CUDA manages it (driver_host.c): the per-graph listing
 * and its sums against the driver's figures, releasing with a report, `memory_budget` parsing,
 * and the budget with a budget smaller than one graph, smaller than all graphs, traffic that
 * changes, and decode traffic whose small buckets share one pool granule (the host driver set to
 * reserve in granules, as CUDA does); an out-of-memory build logging the budget figures.
 *
 * The modules take a temporary of (bucket x UNIT) bytes with cgrt_alloc_async and do their
 * "device work" as a host function: out[i] = in * 2 + bucket + i, where prepare stages
 * in = step number through the stream, so every step's output is checked exactly. With `keep`
 * set, a captured call does not free its temporary: the graph keeps it, and such memory cannot
 * be shared between graphs, so the graphs' memory adds up.
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
#include "config/config.h"
#include "driver.h"
#include "runtime.h"

#define MODS       2
#define UNIT       (64u << 10) /* temporary bytes per token */
#define EXEC_BYTES (3 * 256)   /* the host driver's own memory of a 3-node executable */

struct params {
  const double *in;
  double *out;
  double add;
  unsigned char *tmp;
};

struct fixture {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  int mods;
  int keep; /* captured calls keep their temporary */
  struct params **params;
  size_t num_params, cap_params;
  double in, out[MODS];
  double step_value; /* what prepare stages */
  char log[8192];    /* warnings and info lines */
};

static void work(void *arg) {
  struct params *p = arg;
  p->tmp[0] = 1; /* the temporary is usable memory */
  p->out[0] = p->in[0] * 2 + p->add;
}

static struct params *new_params(struct fixture *f) {
  if (f->num_params == f->cap_params) {
    f->cap_params = f->cap_params ? 2 * f->cap_params : 256;
    f->params = realloc(f->params, f->cap_params * sizeof(*f->params));
    assert_non_null(f->params);
  }
  struct params *p = calloc(1, sizeof(*p));
  assert_non_null(p);
  f->params[f->num_params++] = p;
  return p;
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fixture *f = user;
  int index = (int)(args->buffers[1].ptr == &f->out[1]);
  struct params *p = new_params(f);
  void *tmp = NULL;
  int rc = cgrt_alloc_async(ctx, (size_t)ctx->padded_tokens * UNIT, &tmp);
  if (rc)
    return rc;
  p->in = args->buffers[0].ptr;
  p->out = args->buffers[1].ptr;
  p->add = (double)(ctx->padded_tokens + index);
  p->tmp = tmp;
  rc = cgrt_enqueue_host(ctx, work, p);
  if (rc == 0 && !(f->keep && ctx->mode == CGRT_MODE_CAPTURE))
    rc = cgrt_free_async(ctx, tmp);
  return rc;
}

static void stage(void *arg) {
  struct fixture *f = arg;
  f->in = f->step_value;
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  return cgrt_enqueue_host(ctx, stage, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fixture *f = user;
  for (int i = 0; i < f->mods; i++) {
    cgrt_buffer b[2] = {{&f->in, sizeof(double), CGRT_IN, "in"},
                        {&f->out[i], sizeof(double), CGRT_OUT, "out"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = 0, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(f->rt, f->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  struct fixture *f = user;
  if (level > CGRT_LOG_INFO)
    return;
  size_t n = strlen(f->log);
  snprintf(f->log + n, sizeof(f->log) - n, "%s\n", msg);
}

/* A runtime of `mods` modules, local layer scope, buckets `list`, and `budget` (or "off"); by_time
   off: these tests assert each step's mode and bucket, which by_time's probe steps would change. */
static struct fixture *fixture_open_list(int mods, int keep, const char *budget, const char *list) {
  struct fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  f->mods = mods;
  f->keep = keep;
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 1\ninference_scope = layer\n"
           "memory_budget = %s\n[inference]\nbuckets = list\nlist = %s\n[local]\nby_time = off\n"
           "[runtime]\ndriver = host\nlog = info\n",
           budget, list);
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = log_sink, .log_user = f};
  if (cgrt_open_ex(&f->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  for (int i = 0; i < mods; i++) {
    char name[16];
    snprintf(name, sizeof(name), "m%d", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .layer = i,
                          .forward = module_fwd,
                          .user = f};
    assert_int_equal(cgrt_module_register(f->rt, &d, &f->m[i]), 0);
  }
  return f;
}

/* The same with buckets 1 2 4 8. */
static struct fixture *fixture_open(int mods, int keep, const char *budget) {
  return fixture_open_list(mods, keep, budget, "1 2 4 8");
}

static void fixture_close(struct fixture *f) {
  assert_int_equal(cgrt_close(f->rt), 0);
  for (size_t i = 0; i < f->num_params; i++)
    free(f->params[i]);
  free(f->params);
  free(f);
}

static int teardown(void **state) {
  if (*state)
    fixture_close(*state);
  return 0;
}

/* One inference step of `tokens`; checks its output and returns its report. */
static cgrt_step_report step(struct fixture *f, int64_t tokens) {
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_INFER,
                      .tokens = tokens,
                      .prepare = prepare,
                      .body = body,
                      .user = f};
  cgrt_step_report r = {.struct_size = sizeof(r)};
  f->step_value += 1;
  for (int i = 0; i < f->mods; i++)
    f->out[i] = -1;
  int rc = cgrt_step(f->rt, &d, &r);
  if (rc != 0)
    fail_msg("step of %lld tokens: %s", (long long)tokens, cgrt_last_error(f->rt));
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  for (int i = 0; i < f->mods; i++)
    assert_true(f->out[i] == f->step_value * 2 + (double)(r.padded_tokens + i));
  return r;
}

static cgrt_stats stats(struct fixture *f) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  return s;
}

struct listing {
  int n;
  cgrt_graph_info g[64];
  char names[64][128];
  char modules[64][16];
};

static int collect(void *user, const cgrt_graph_info *g) {
  struct listing *l = user;
  assert_true(l->n < 64);
  assert_true(g->struct_size >= sizeof(*g));
  l->g[l->n] = *g;
  snprintf(l->names[l->n], sizeof(l->names[0]), "%s", g->name);
  snprintf(l->modules[l->n], sizeof(l->modules[0]), "%s", g->module ? g->module : "");
  l->n++;
  return 0;
}

static const cgrt_graph_info *find(const struct listing *l, uint64_t extra, const char *module) {
  for (int i = 0; i < l->n; i++)
    if (l->g[i].extra == extra && strcmp(l->modules[i], module) == 0)
      return &l->g[i];
  return NULL;
}

/* ---------------------------------------------------------------- accounting */

/*
 * Buckets captured smallest first: the pool grows by what each new graph needs beyond the
 * graphs before it (temporaries freed inside a graph are shared), so the per-graph figures sum
 * to the driver's reserved graph memory, and the executables' own memory is counted apart.
 */
static void test_graphs_listed_with_their_memory(void **state) {
  struct fixture *f = *state = fixture_open(1, 0, "off");
  const int64_t buckets[4] = {1, 2, 4, 8};
  uint64_t captured_at[4];
  for (int b = 0; b < 4; b++) {
    assert_int_equal(step(f, buckets[b]).mode, CGRT_MODE_WARMUP);
    captured_at[b] = f->rt->graphs.step_index;
    assert_int_equal(step(f, buckets[b]).mode, CGRT_MODE_CAPTURE);
  }
  step(f, 8);
  step(f, 7); /* also bucket 8 */

  struct listing l = {0};
  assert_int_equal(cgrt_graph_list(f->rt, collect, &l), 0);
  assert_int_equal(l.n, 4);
  uint64_t sum = 0, pool = 0, nodes = 0;
  const uint64_t growth[4] = {1, 1, 2, 4}; /* in UNITs: 1, then 2-1, 4-2, 8-4 */
  for (int b = 0; b < 4; b++) {
    const cgrt_graph_info *g = find(&l, (uint64_t)buckets[b], "m0");
    assert_non_null(g);
    assert_int_equal(g->nodes, 3); /* alloc, host function, free */
    assert_int_equal(g->alloc_bytes, (uint64_t)buckets[b] * UNIT);
    assert_int_equal(g->pool_bytes, growth[b] * UNIT);
    assert_int_equal(g->pool_used_bytes, growth[b] * UNIT);
    assert_int_equal(g->exec_bytes, EXEC_BYTES);
    assert_int_equal(g->bytes, g->pool_bytes + g->exec_bytes);
    assert_int_equal(g->dir, CGRT_FORWARD);
    assert_int_equal(g->phase, CGRT_PHASE_INFER);
    assert_non_null(strstr(l.names[g - l.g], "m0 fwd, infer"));
    assert_int_equal(g->replays, buckets[b] == 8 ? 2 : 0);
    assert_int_equal(g->last_use, buckets[b] == 8 ? f->rt->graphs.step_index - 1 : captured_at[b]);
    sum += g->bytes;
    pool += g->pool_bytes;
    nodes += g->nodes;
  }
  cgrt_stats s = stats(f);
  assert_int_equal(s.graph_bytes, sum);
  assert_int_equal(s.graph_pool_bytes, pool);
  assert_int_equal(s.graph_exec_bytes, 4 * EXEC_BYTES);
  assert_int_equal(s.graph_nodes, nodes);
  assert_int_equal(s.graph_pool_idle, 0);
  assert_int_equal(s.graph_bytes_peak, sum);
  assert_int_equal(pool, s.graph_mem_reserved); /* the per-graph sum is the driver's total */
  assert_int_equal(s.graph_mem_reserved, 8 * UNIT);
  assert_int_equal(s.memory_budget, 0);

  /* A listing can stop early: the callback's value comes back. */
  assert_int_equal(cgrt_graph_list(f->rt, NULL, NULL), CGRT_E_INVAL);
}

static int stop_at_first(void *user, const cgrt_graph_info *g) {
  (void)g;
  ++*(int *)user;
  return 42;
}

static void test_release_tells_what_was_freed(void **state) {
  struct fixture *f = *state = fixture_open(2, 0, "off");
  for (int i = 0; i < 2; i++) {
    step(f, 3);
    step(f, 8);
  }
  int seen = 0;
  assert_int_equal(cgrt_graph_list(f->rt, stop_at_first, &seen), 42);
  assert_int_equal(seen, 1);
  cgrt_stats before = stats(f);
  assert_int_equal(before.live_graphs, 4);
  cgrt_release_report r = {.struct_size = sizeof(r)};
  assert_int_equal(cgrt_release_graphs_ex(f->rt, &r), 0);
  assert_int_equal(r.graphs, 4);
  assert_int_equal(r.bytes, before.graph_bytes);
  assert_int_equal(r.nodes, 12);
  assert_int_equal(r.pool_reserved_before, 8 * UNIT);
  assert_int_equal(r.pool_reserved_after, 0); /* trimmed */
  cgrt_stats after = stats(f);
  assert_int_equal(after.graph_bytes, 0);
  assert_int_equal(after.graph_pool_idle, 0);
  assert_int_equal(after.graph_nodes, 0);
  assert_int_equal(after.graph_mem_reserved, 0);
  struct listing l = {0};
  assert_int_equal(cgrt_graph_list(f->rt, collect, &l), 0);
  assert_int_equal(l.n, 0);
  /* Steps go on: warm-up and capture again. */
  assert_int_equal(step(f, 8).mode, CGRT_MODE_WARMUP);
  assert_int_equal(step(f, 8).mode, CGRT_MODE_CAPTURE);
  /* An old report (a smaller struct_size) gets only the fields it knows. */
  struct {
    size_t struct_size;
    uint64_t graphs;
  } old = {sizeof(old), 0};
  assert_int_equal(cgrt_release_graphs_ex(f->rt, (cgrt_release_report *)&old), 0);
  assert_int_equal(old.graphs, 2);
  assert_int_equal(old.struct_size, sizeof(old));
}

/* Evicted graphs leave their pool memory reserved (idle) until a trim, as CUDA does. */
static void test_evicted_graph_memory_is_idle_until_released(void **state) {
  struct fixture *f = *state = fixture_open(1, 0, "off");
  for (int i = 0; i < 2; i++)
    step(f, 8);
  struct cgrt_graph_cache *c = f->rt->graphs.caches;
  assert_non_null(c);
  struct cgrt_graph_key k = {.module = 0, .phase = CGRT_PHASE_INFER, .extra = 8};
  assert_int_equal(f->rt->host.cache_has(&f->rt->host, c, &k), 1);
  f->rt->host.cache_clear(&f->rt->host, c);
  cgrt_stats s = stats(f);
  assert_int_equal(s.graph_bytes, 0);
  assert_int_equal(s.graph_pool_idle, 8 * UNIT);
  assert_int_equal(s.graph_mem_reserved, 8 * UNIT);
  cgrt_release_report r = {.struct_size = sizeof(r)};
  assert_int_equal(cgrt_release_graphs_ex(f->rt, &r), 0);
  assert_int_equal(r.graphs, 0);
  assert_int_equal(r.pool_reserved_after, 0);
  assert_int_equal(stats(f).graph_pool_idle, 0);
}

/* ---------------------------------------------------------------- configuration */

static void test_memory_budget_values(void **state) {
  (void)state;
  static const struct {
    const char *text;
    uint64_t bytes;
    const char *normal;
  } good[] = {{"512 MiB", 512ull << 20, "512 MiB"},
              {"2GiB", 2ull << 30, "2 GiB"},
              {"64 kib", 64ull << 10, "64 KiB"},
              {"2048 KiB", 2ull << 20, "2 MiB"},
              {"off", 0, "off"},
              {"OFF", 0, "off"}};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    char ini[128], *text = NULL;
    size_t len = 0;
    snprintf(ini, sizeof(ini), "[cuda_graph]\nimpl = local\nmemory_budget = %s\n", good[i].text);
    struct cgrt_config cfg;
    struct cgrt_diag diag = {0};
    assert_int_equal(cgrt__config_parse(&cfg, ini, "t.ini", &diag), 0);
    assert_int_equal(cfg.view.memory_budget, good[i].bytes);
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(cgrt__config_print(&cfg, out), 0);
    fclose(out);
    char want[64];
    snprintf(want, sizeof(want), "memory_budget = %s\n", good[i].normal);
    if (!strstr(text, want))
      fail_msg("'%s' printed as:\n%s", good[i].text, text);
    free(text);
    cgrt__diag_free(&diag);
    cgrt__config_free(&cfg);
  }
}

static void test_memory_budget_malformed_names_line_and_fix(void **state) {
  (void)state;
  static const struct {
    const char *text;
    const char *says;
  } bad[] = {{"512", "has no unit"},
             {"12 MB", "unit 'MB' is not accepted"},
             {"0 GiB", "write off"},
             {"1.5 GiB", "whole number followed by KiB, MiB or GiB"},
             {"-1 GiB", "whole number followed by KiB, MiB or GiB"},
             {"99999999999999 GiB", "too large"},
             {"lots", "e.g. 512 MiB"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char ini[160];
    snprintf(ini, sizeof(ini),
             "[cuda_graph]\nimpl = local\nmemory_budget = %s\n[runtime]\ndriver = host\n",
             bad[i].text);
    cgrt_runtime *rt = NULL;
    assert_int_equal(cgrt_open_string(&rt, ini), CGRT_E_CONFIG);
    assert_null(rt);
    const char *err = cgrt_last_error(NULL);
    if (!strstr(err, "<string>:3") || !strstr(err, "memory_budget") || !strstr(err, bad[i].says))
      fail_msg("memory_budget = %s: %s", bad[i].text, err);
  }
}

/* ---------------------------------------------------------------- budget */

/* Every graph is larger than the budget: calls run eagerly, counted, nothing fails. */
static void test_budget_smaller_than_one_graph(void **state) {
  struct fixture *f = *state = fixture_open(2, 1, "16 KiB");
  srand(7);
  for (int i = 0; i < 300; i++) {
    step(f, 1 + rand() % 8);
    cgrt_stats s = stats(f);
    assert_true(s.graph_bytes + s.graph_pool_idle <= 16 << 10);
    assert_true(s.graph_mem_reserved <= 16 << 10);
  }
  cgrt_stats s = stats(f);
  assert_int_equal(s.live_graphs, 0);
  assert_int_equal(s.fallbacks, 0);
  assert_true(s.budget_eager > 500);
  assert_int_equal(s.memory_budget, 16 << 10);
  /* A key is captured once at most, to learn its size: then, or when an alike graph built for
     no more tokens is already over the budget, it runs eagerly without trying (2 modules x 4
     buckets). The first keys are always tried. */
  assert_true(s.captures >= 2 && s.captures <= 2 * 4);
  assert_int_equal(s.calls_by_mode[CGRT_MODE_REPLAY], 0);
  assert_non_null(strstr(f->log, "does not fit under [cuda_graph] memory_budget"));
}

/*
 * The budget holds some graphs, not all: least-recently-used ones are evicted to make room, the
 * live total never exceeds the budget (nor the driver's reserved memory), outputs stay right.
 */
static void test_budget_smaller_than_all_graphs(void **state) {
  struct fixture *f = *state = fixture_open(2, 1, "768 KiB");
  const uint64_t budget = 768 << 10;
  srand(11);
  for (int i = 0; i < 2000; i++) {
    step(f, 1 + rand() % 8);
    cgrt_stats s = stats(f);
    if (s.graph_bytes + s.graph_pool_idle > budget || s.graph_mem_reserved > budget)
      fail_msg("step %d: %llu live + %llu idle, %llu reserved, budget %llu", i,
               (unsigned long long)s.graph_bytes, (unsigned long long)s.graph_pool_idle,
               (unsigned long long)s.graph_mem_reserved, (unsigned long long)budget);
  }
  cgrt_stats s = stats(f);
  /* All graphs would take 2 x (1 + 2 + 4 + 8) UNITs plus their own memory. */
  assert_true(2 * 15 * UNIT > budget);
  assert_int_equal(s.fallbacks, 0);
  assert_true(s.budget_evictions > 0);
  assert_true(s.evictions >= s.budget_evictions);
  /* Uniform traffic over a working set larger than the budget churns (LRU), yet graphs serve a
     good share of the calls, and a step's own graphs are never evicted for each other. */
  assert_true(s.calls_by_mode[CGRT_MODE_REPLAY] > 500);
  assert_true(s.budget_eager > 0);
  /* Bucket 8 fits one module's graph at a time (512 KiB each): never both. */
  struct listing l = {0};
  assert_int_equal(cgrt_graph_list(f->rt, collect, &l), 0);
  assert_true(!(find(&l, 8, "m0") && find(&l, 8, "m1")));
}

/* When traffic moves to other buckets, their graphs take the room of the ones no longer used. */
static void test_budget_follows_changing_traffic(void **state) {
  struct fixture *f = *state = fixture_open(2, 1, "768 KiB");
  for (int i = 0; i < 40; i++)
    step(f, 1 + i % 2); /* buckets 1 and 2: 2 x 3 UNITs */
  assert_int_equal(stats(f).live_graphs, 4);
  assert_int_equal(stats(f).budget_evictions, 0);
  cgrt_step_report r = {0};
  for (int i = 0; i < 40; i++) {
    r = step(f, 4); /* bucket 4: 2 x 4 UNITs, which fits only without the others */
    if (i >= 3)
      assert_int_equal(r.calls_replayed, 2);
  }
  struct listing l = {0};
  assert_int_equal(cgrt_graph_list(f->rt, collect, &l), 0);
  assert_non_null(find(&l, 4, "m0"));
  assert_non_null(find(&l, 4, "m1"));
  /* The least recently used went first: bucket 1's graphs (bucket 2 ran last before). */
  assert_null(find(&l, 1, "m0"));
  assert_null(find(&l, 1, "m1"));
  cgrt_stats s = stats(f);
  assert_true(s.budget_evictions >= 2);
  assert_int_equal(s.budget_eager, 0);
  assert_true(s.graph_bytes <= 768 << 10);
  /* And back: the small buckets come back in place of bucket 4. */
  for (int i = 0; i < 40; i++)
    r = step(f, 1);
  assert_int_equal(r.calls_replayed, 2);
  assert_true(stats(f).graph_bytes <= 768 << 10);
}

/*
 * Decode traffic under a budget of half the unconstrained total, with the pool reserved in
 * granules as CUDA 13 does (32 MiB there, 1 MiB here): the small buckets' temporaries (1 to 8
 * UNITs) fall in one shared granule, the large buckets' (32 and 48 UNITs) need 2 and 3. The
 * small buckets' graphs together take one granule, so they all fit and must be captured once and
 * replayed from then on (no two of them evicting each other at every step, as an expectation
 * blind to sharing would: each expects a granule of its own). A large step cannot fit even alone:
 * it runs eagerly, without evicting a small graph. The budget holds after every step, by cgrt's
 * count and by the driver's.
 */
#define GRANULE (1u << 20)

static uint64_t unconstrained_total(const char *list, const int64_t *tokens, int n) {
  struct fixture *f = fixture_open_list(2, 0, "off", list);
  assert_int_equal(cgrt__host_set_pool_granule(&f->rt->dev, GRANULE), 0);
  for (int i = 0; i < n; i++) {
    assert_int_equal(step(f, tokens[i]).mode, CGRT_MODE_WARMUP);
    assert_int_equal(step(f, tokens[i]).mode, CGRT_MODE_CAPTURE);
  }
  cgrt_stats s = stats(f);
  assert_int_equal(s.live_graphs, 2 * n);
  assert_int_equal(s.graph_mem_reserved, 3 * GRANULE); /* shared: the largest bucket's need */
  uint64_t total = s.graph_bytes + s.graph_pool_idle;
  fixture_close(f);
  return total;
}

static void test_budget_shares_pool_between_small_buckets(void **state) {
  static const int64_t buckets[] = {1, 2, 4, 8, 32, 48};
  const char *list = "1 2 4 8 32 48";
  uint64_t unconstrained = unconstrained_total(list, buckets, 6);
  uint64_t budget = (unconstrained / 2) & ~1023ull;
  assert_true(budget > GRANULE && budget < 2 * GRANULE); /* one granule fits, two do not */
  char text[64];
  snprintf(text, sizeof(text), "%llu KiB", (unsigned long long)(budget >> 10));
  struct fixture *f = *state = fixture_open_list(2, 0, text, list);
  assert_int_equal(cgrt__host_set_pool_granule(&f->rt->dev, GRANULE), 0);
  srand(5);
  int large_steps = 0, large_warmups = 0, small_late = 0;
  for (int i = 0; i < 3000; i++) {
    int large = rand() % 100 < 3;
    int64_t tokens = large ? 9 + rand() % 40 : 1 + rand() % 8;
    uint64_t eager_before = stats(f).budget_eager;
    cgrt_step_report r = step(f, tokens);
    cgrt_stats s = stats(f);
    if (s.graph_bytes + s.graph_pool_idle > budget ||
        s.graph_mem_reserved + s.graph_exec_bytes > budget)
      fail_msg("step %d (%lld tokens): %llu live + %llu idle, driver %llu reserved + %llu own, "
               "budget %llu",
               i, (long long)tokens, (unsigned long long)s.graph_bytes,
               (unsigned long long)s.graph_pool_idle, (unsigned long long)s.graph_mem_reserved,
               (unsigned long long)s.graph_exec_bytes, (unsigned long long)budget);
    if (large && r.mode == CGRT_MODE_WARMUP) {
      large_warmups++; /* a large bucket's first step */
    } else if (large) {
      large_steps++;
      assert_int_equal(r.mode, CGRT_MODE_EAGER);
      assert_int_equal(s.budget_eager, eager_before + 2);
    } else if (i >= 500) {
      /* every small bucket was seen twice long before: replayed, both modules */
      small_late++;
      assert_int_equal(r.mode, CGRT_MODE_REPLAY);
      assert_int_equal(r.calls_replayed, 2);
    }
  }
  cgrt_stats s = stats(f);
  assert_true(large_steps > 30 && large_warmups <= 2 && small_late > 2000);
  assert_int_equal(s.fallbacks, 0);
  assert_int_equal(s.evictions, 0);
  assert_int_equal(s.budget_evictions, 0);
  /* Each small key captured once; a large key at most once, to learn its size (the larger
     bucket is refused without a try once the smaller one's size is known). */
  assert_true(s.captures >= 2 * 4 && s.captures <= 2 * 4 + 2 * 2);
  assert_int_equal(s.live_graphs, 2 * 4);
  assert_int_equal(s.graph_mem_reserved, GRANULE);
  struct listing l = {0};
  assert_int_equal(cgrt_graph_list(f->rt, collect, &l), 0);
  for (int b = 0; b < 4; b++) {
    assert_non_null(find(&l, (uint64_t)buckets[b], "m0"));
    assert_non_null(find(&l, (uint64_t)buckets[b], "m1"));
  }
}

/* An out-of-memory build never fails the step; its log line gives the budget figures. */
static void test_out_of_memory_build_logs_budget_figures(void **state) {
  struct fixture *f = *state = fixture_open(1, 0, "768 KiB");
  step(f, 2);
  f->rt->faults.instantiate_nomem = 1;
  cgrt_step_report r = step(f, 2);
  assert_int_equal(r.fallbacks, 1);
  assert_int_equal(r.mode, CGRT_MODE_EAGER);
  const char *line = strstr(f->log, "out of device memory");
  assert_non_null(line);
  assert_non_null(strstr(line, "memory_budget 768.0 KiB"));
  assert_non_null(strstr(line, "in 0 live graphs"));
  /* A handled outcome (the step ran eagerly, and succeeded) is not a failed call's error. */
  assert_null(strstr(cgrt_last_error(f->rt), "memory_budget"));
  /* The next call captures. */
  assert_int_equal(step(f, 2).mode, CGRT_MODE_CAPTURE);
  assert_int_equal(stats(f).live_graphs, 1);
}

#define T(name) cmocka_unit_test_teardown(name, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_graphs_listed_with_their_memory),
      T(test_release_tells_what_was_freed),
      T(test_evicted_graph_memory_is_idle_until_released),
      cmocka_unit_test(test_memory_budget_values),
      cmocka_unit_test(test_memory_budget_malformed_names_line_and_fix),
      T(test_budget_smaller_than_one_graph),
      T(test_budget_smaller_than_all_graphs),
      T(test_budget_follows_changing_traffic),
      T(test_budget_shares_pool_between_small_buckets),
      T(test_out_of_memory_build_logs_budget_figures),
  };
  return cmocka_run_group_tests_name("graph_mem", tests, NULL, NULL);
}
