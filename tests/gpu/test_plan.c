/*
 * test_plan.c (GPU) - `cgrt plan` names the right graphs (issue 30): run as an operator runs it,
 * `cgrt plan conf/local_block_budget.ini --workload decode --json` (block scope, buckets 1 2 4 8
 * 16 64 1024 4096), then each bucket's graph built alone (the same settings, `list` and
 * `max_tokens` set to that bucket):
 * - a row per bucket, each once;
 * - a decode step's temporaries grow with its tokens: each row's alloc_bytes are non-decreasing
 *   with its token key, and the largest bucket allocates more than the smallest;
 * - each row's alloc_bytes are those of the same graph built alone (its name and figures belong
 *   to one graph).
 * The command is found in CGRT_BIN_DIR and the configuration in CGRT_SOURCE_DIR (ctest sets both).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

static const unsigned long long buckets[] = {1, 2, 4, 8, 16, 64, 1024, 4096};
#define NB (sizeof(buckets) / sizeof(buckets[0]))

struct row {
  unsigned long long key, alloc, nodes;
};

static const char *env_dir(const char *name) {
  const char *v = getenv(name);
  if (!v || !v[0])
    fail_msg("%s is not set (ctest sets it)", name);
  return v;
}

/* Runs `cgrt plan CONF --workload decode --json`; its rows into rows[0..cap), their count. */
static int plan_rows(const char *conf, struct row *rows, int cap) {
  char cmd[4096];
  snprintf(cmd, sizeof(cmd), "'%s/cgrt' plan '%s' --workload decode --json",
           env_dir("CGRT_BIN_DIR"), conf);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  static char out[1 << 20];
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  if (status != 0)
    fail_msg("%s exited with status %d:\n%s", cmd, status, out);
  static const char graph[] = "{\"graph\":\"body, infer, key ";
  int count = 0;
  for (const char *g = strstr(out, graph); g; g = strstr(g + 1, graph)) {
    assert_true(count < cap);
    struct row *r = &rows[count++];
    r->key = strtoull(g + strlen(graph), NULL, 10);
    const char *a = strstr(g, "\"alloc_bytes\":"), *d = strstr(g, "\"nodes\":");
    if (!a || !d)
      fail_msg("no alloc_bytes or nodes in a row of:\n%s", out);
    r->alloc = strtoull(a + strlen("\"alloc_bytes\":"), NULL, 10);
    r->nodes = strtoull(d + strlen("\"nodes\":"), NULL, 10);
  }
  if (count == 0)
    fail_msg("%s printed no graph of a whole body:\n%s", cmd, out);
  return count;
}

static const struct row *row_of(const struct row *rows, int n, unsigned long long key) {
  const struct row *found = NULL;
  for (int i = 0; i < n; i++)
    if (rows[i].key == key) {
      if (found)
        fail_msg("two rows for key %llu", key);
      found = &rows[i];
    }
  if (!found)
    fail_msg("no row for key %llu", key);
  return found;
}

static void decode_rows_carry_their_own_graphs(void **state) {
  (void)state;
  char conf[4096];
  snprintf(conf, sizeof(conf), "%s/conf/local_block_budget.ini", env_dir("CGRT_SOURCE_DIR"));
  struct row rows[64];
  int n = plan_rows(conf, rows, 64);
  assert_int_equal(n, NB);
  const struct row *prev = NULL;
  for (size_t b = 0; b < NB; b++) {
    const struct row *r = row_of(rows, n, buckets[b]);
    assert_true(r->nodes > 0);
    if (prev && r->alloc < prev->alloc)
      fail_msg("key %llu allocates %llu bytes, less than key %llu's %llu: a decode step's "
               "temporaries grow with its tokens",
               r->key, r->alloc, prev->key, prev->alloc);
    prev = r;
  }
  assert_true(row_of(rows, n, buckets[NB - 1])->alloc > row_of(rows, n, buckets[0])->alloc);

  /* Each bucket's graph built alone: the same figures as its row. */
  char dir[] = "/tmp/cgrt-test-plan-XXXXXX";
  assert_non_null(mkdtemp(dir));
  for (size_t b = 0; b < NB; b++) {
    char alone[4200];
    snprintf(alone, sizeof(alone), "%s/alone_%llu.ini", dir, buckets[b]);
    FILE *f = fopen(alone, "w");
    assert_non_null(f);
    fprintf(f,
            "[cuda_graph]\nimpl = local\nwarmup_steps = 2\ninference_scope = block\n"
            "max_graphs = 64\n[inference]\nbuckets = list\nlist = %llu\nmax_tokens = %llu\n"
            "[runtime]\ndriver = cuda\nlog = warn\n[host]\ngraph_safe_rng = true\n",
            buckets[b], buckets[b]);
    fclose(f);
    struct row one[4];
    assert_int_equal(plan_rows(alone, one, 4), 1);
    const struct row *r = row_of(rows, n, buckets[b]);
    assert_int_equal(one[0].key, buckets[b]);
    if (one[0].alloc != r->alloc)
      fail_msg("key %llu: the plan's row shows %llu alloc_bytes, the graph built alone %llu",
               buckets[b], r->alloc, one[0].alloc);
    unlink(alone);
  }
  rmdir(dir);
}

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(decode_rows_carry_their_own_graphs),
  };
  return cmocka_run_group_tests_name("gpu_plan", tests, NULL, NULL);
}
