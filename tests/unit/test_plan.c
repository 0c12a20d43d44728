/*
 * test_plan.c - `cgrt plan`'s table (tools/cli/cmd_plan.c): every row carries its own graph's
 * key. The plan's runner is the GPU's (tools/bench/bench_gpu.c, in libcgrt-bench.so, which the
 * command loads through bench_plugin_load); here that loader hands it a runner of the same shape
 * that builds a host-driver model instead (local, block scope, the buckets of
 * conf/local_block_budget.ini, largest first) whose modules take a temporary that grows with the
 * bucket, so a row that shows another graph's figures is seen: each row's allocations must be its
 * own key's, in the table and in --json.
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

#include "cgrt/cgrt.h"
#include "bench_plugin.h"
#include "tool.h"

#define MODS 2
#define UNIT (1u << 10) /* temporary bytes per token and module */

static const int64_t buckets[] = {1, 2, 4, 8, 16, 64, 1024, 4096};
#define NB (sizeof(buckets) / sizeof(buckets[0]))

static void nothing(void *arg) {
  (void)arg;
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  (void)user;
  void *tmp = NULL;
  int rc = cgrt_alloc_async(ctx, (size_t)ctx->padded_tokens * UNIT, &tmp);
  if (rc == 0)
    rc = cgrt_enqueue_host(ctx, nothing, NULL);
  if (rc == 0)
    rc = cgrt_free_async(ctx, tmp);
  return rc;
}

struct model {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
};

static int body(const cgrt_ctx *ctx, void *user) {
  struct model *md = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = (uint64_t)ctx->padded_tokens};
  for (int i = 0; i < MODS; i++) {
    int rc = cgrt_forward(md->rt, md->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

/* The plan's runner on the host driver: every bucket, largest first, warmed up and captured. */
static int plan_decode(const char *conf, plan_report_fn report, void *user) {
  struct model md = {0};
  if (cgrt_open(&md.rt, conf) != 0)
    fail_msg("open %s: %s", conf, cgrt_last_error(NULL));
  for (int i = 0; i < MODS; i++) {
    char name[16];
    snprintf(name, sizeof(name), "layer%d", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .layer = i,
                          .forward = module_fwd};
    assert_int_equal(cgrt_module_register(md.rt, &d, &md.m[i]), 0);
  }
  for (size_t b = NB; b-- > 0;)
    for (int s = 0; s < 4; s++) { /* warmup_steps = 2, the capture, a replay */
      cgrt_step_desc d = {.struct_size = sizeof(d),
                          .phase = CGRT_PHASE_INFER,
                          .tokens = buckets[b],
                          .body = body,
                          .user = &md};
      if (cgrt_step(md.rt, &d, NULL) != 0)
        fail_msg("step of %lld tokens: %s", (long long)buckets[b], cgrt_last_error(md.rt));
    }
  assert_int_equal(cgrt_synchronize(md.rt), 0);
  int status = report(md.rt, "host model", 0, user);
  cgrt_close(md.rt);
  return status;
}

static int plan_train(const char *conf, plan_report_fn report, void *user) {
  (void)conf;
  (void)report;
  (void)user;
  return EXIT_UNUSABLE;
}

/* The GPU half of the command (libcgrt-bench.so), as this test's runners. */
static int plan_runner(const char *workload, const char *conf, plan_report_fn report, void *user) {
  return strcmp(workload, "train") == 0 ? plan_train(conf, report, user)
                                        : plan_decode(conf, report, user);
}

int bench_plugin_load(const char *cmd, const struct cgrt_bench_plugin **p) {
  (void)cmd;
  static const struct cgrt_bench_plugin runners = {
      .version = CGRT_BENCH_PLUGIN_VERSION, .struct_size = sizeof(runners), .plan = plan_runner};
  *p = &runners;
  return EXIT_VALID;
}

/* Runs `cgrt plan CONF [--json]` and returns what it printed (malloc'ed). */
static char *run_plan(const char *conf, int json) {
  char out[] = "/tmp/cgrt-test-plan-XXXXXX";
  int fd = mkstemp(out);
  assert_true(fd >= 0);
  fflush(stdout);
  int saved = dup(1);
  assert_true(saved >= 0 && dup2(fd, 1) == 1);
  char *argv[] = {"plan", (char *)conf, json ? "--json" : NULL, NULL};
  int status = cmd_plan(json ? 3 : 2, argv);
  fflush(stdout);
  assert_int_equal(dup2(saved, 1), 1);
  close(saved);
  assert_int_equal(status, EXIT_VALID);
  FILE *f = fdopen(fd, "r");
  assert_non_null(f);
  rewind(f);
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(out);
  return strdup(text);
}

static char conf_path[64];

static int setup(void **state) {
  (void)state;
  snprintf(conf_path, sizeof(conf_path), "/tmp/cgrt-test-plan-conf-XXXXXX");
  int fd = mkstemp(conf_path);
  assert_true(fd >= 0);
  static const char ini[] = "[cuda_graph]\nimpl = local\nwarmup_steps = 2\n"
                            "inference_scope = block\n[inference]\nbuckets = list\n"
                            "list = 1 2 4 8 16 64 1024 4096\nmax_tokens = 4096\n"
                            "[runtime]\ndriver = host\nlog = warn\n";
  assert_int_equal(write(fd, ini, sizeof(ini) - 1), (ssize_t)(sizeof(ini) - 1));
  close(fd);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  unlink(conf_path);
  return 0;
}

static int bucket_seen(uint64_t key, int *seen) {
  for (size_t b = 0; b < NB; b++)
    if ((uint64_t)buckets[b] == key) {
      seen[b]++;
      return 1;
    }
  return 0;
}

/* --json: each graph's alloc_bytes are its key's temporaries, exactly. */
static void json_rows_carry_their_own_key(void **state) {
  (void)state;
  char *text = run_plan(conf_path, 1);
  int seen[NB] = {0}, rows = 0;
  for (const char *p = strstr(text, "{\"graph\":\"body, infer, key "); p;
       p = strstr(p + 1, "{\"graph\":\"body, infer, key ")) {
    unsigned long long key = strtoull(p + strlen("{\"graph\":\"body, infer, key "), NULL, 10);
    const char *a = strstr(p, "\"alloc_bytes\":");
    assert_non_null(a);
    unsigned long long alloc = strtoull(a + strlen("\"alloc_bytes\":"), NULL, 10);
    if (alloc != key * MODS * UNIT)
      fail_msg("row 'key %llu' shows %llu alloc_bytes, its graph allocates %llu:\n%s", key, alloc,
               key * MODS * UNIT, text);
    assert_true(bucket_seen(key, seen));
    rows++;
  }
  assert_int_equal(rows, NB);
  for (size_t b = 0; b < NB; b++)
    assert_int_equal(seen[b], 1);
  free(text);
}

/* The table: each row's alloc_MiB is its key's, and the rows run largest first. */
static void table_rows_carry_their_own_key(void **state) {
  (void)state;
  char *text = run_plan(conf_path, 0);
  int seen[NB] = {0}, rows = 0;
  double last = 1e300;
  for (const char *p = strstr(text, "\nbody, infer, key "); p;
       p = strstr(p + 1, "\nbody, infer, key ")) {
    char *end;
    unsigned long long key = strtoull(p + strlen("\nbody, infer, key "), &end, 10);
    double mib = 0, pool = 0, alloc = 0;
    assert_int_equal(sscanf(end, " %lf %lf %lf", &mib, &pool, &alloc), 3);
    double want = (double)(key * MODS * UNIT) / (1024.0 * 1024.0);
    if (alloc < want - 0.006 || alloc > want + 0.006)
      fail_msg("row 'key %llu' shows %.2f alloc_MiB, its graph allocates %.4f:\n%s", key, alloc,
               want, text);
    assert_true(mib <= last);
    last = mib;
    assert_true(bucket_seen(key, seen));
    rows++;
  }
  assert_int_equal(rows, NB);
  for (size_t b = 0; b < NB; b++)
    assert_int_equal(seen[b], 1);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(json_rows_carry_their_own_key, setup, teardown),
      cmocka_unit_test_setup_teardown(table_rows_carry_their_own_key, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
