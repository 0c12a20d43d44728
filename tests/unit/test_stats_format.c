/*
 * test_stats_format.c - cgrt_stats_format: every field of cgrt_stats, as types.h declares it, by
 * its name, in text and JSON; sizes as snprintf; an older caller's shorter struct (issue 39).
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

static void tick(void *arg) {
  (void)arg;
}

static int fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, tick, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  cgrt_module *m = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  return cgrt_forward(ctx->rt, m, ctx, &a);
}

/* Stats of a local runtime after 5 train and 3 infer steps. */
static cgrt_stats some_stats(void) {
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open_string(&rt, "[cuda_graph]\nimpl = local\nmodules =\nwarmup_steps = "
                                         "1\n[runtime]\ndriver = host\nlog = off\n"),
                   0);
  cgrt_module *m = NULL;
  cgrt_module_desc d = {
      .struct_size = sizeof(d), .name = "l0.attn", .kind = CGRT_KIND_ATTN, .forward = fwd};
  assert_int_equal(cgrt_module_register(rt, &d, &m), 0);
  for (int s = 0; s < 8; s++) {
    cgrt_step_desc sd = {.struct_size = sizeof(sd),
                         .phase = s < 5 ? CGRT_PHASE_TRAIN : CGRT_PHASE_INFER,
                         .tokens = 3,
                         .body = body,
                         .user = m};
    assert_int_equal(cgrt_step(rt, &sd, NULL), 0);
  }
  assert_int_equal(cgrt_synchronize(rt), 0);
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(rt, &st), 0);
  assert_int_equal(cgrt_close(rt), 0);
  return st;
}

/* Each field name of struct cgrt_stats in types.h, which cgrt.h includes (the padded_tokens alias
   left out). */
static int header_fields(char names[][64], int max) {
  const char *src = getenv("CGRT_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof(path), "%s/core/include/cgrt/types.h", src ? src : ".");
  FILE *f = fopen(path, "r");
  if (!f)
    fail_msg("cannot read %s (CGRT_SOURCE_DIR)", path);
  char line[512];
  int in = 0, n = 0;
  while (fgets(line, sizeof(line), f)) {
    if (strstr(line, "typedef struct cgrt_stats {"))
      in = 1;
    else if (in && strstr(line, "} cgrt_stats;"))
      break;
    if (!in)
      continue;
    const char *types[] = {"uint64_t ", "uint32_t ", "int64_t "};
    for (int t = 0; t < 3; t++) {
      char *p = strstr(line, types[t]), *comment = strstr(line, "/*");
      if (!p || (comment && comment < p))
        continue;
      p += strlen(types[t]);
      size_t k = strcspn(p, ";[ ");
      if (k == 0 || k >= 64 || n >= max)
        continue;
      memcpy(names[n], p, k);
      names[n][k] = '\0';
      if (strcmp(names[n], "padded_tokens") != 0)
        n++;
      break;
    }
  }
  fclose(f);
  return n;
}

static void every_field_by_name_in_json(void **state) {
  (void)state;
  cgrt_stats st = some_stats();
  int need = cgrt_stats_format(&st, CGRT_STATS_JSON, NULL, 0);
  assert_true(need > 0);
  char *buf = malloc((size_t)need + 1);
  assert_int_equal(cgrt_stats_format(&st, CGRT_STATS_JSON, buf, (size_t)need + 1), need);
  assert_int_equal(strlen(buf), (size_t)need);
  assert_int_equal(buf[0], '{');
  assert_int_equal(buf[need - 1], '}');
  char names[128][64];
  int n = header_fields(names, 128);
  assert_true(n > 40);
  for (int i = 0; i < n; i++) {
    char key[80];
    snprintf(key, sizeof(key), "\"%.63s\":", names[i]);
    if (!strstr(buf, key))
      fail_msg("cgrt_stats.%s is not in cgrt_stats_format's JSON: %s", names[i], buf);
  }
  char steps[64];
  snprintf(steps, sizeof(steps), "\"steps\":%llu,", (unsigned long long)st.steps);
  assert_non_null(strstr(buf, steps));
  assert_non_null(strstr(buf, "\"steps_by_mode\":{\"eager\":"));
  assert_non_null(strstr(buf, "\"buckets\":[1,8,"));
  assert_null(strstr(buf, "padded_tokens"));
  free(buf);
}

static void text_and_truncation(void **state) {
  (void)state;
  cgrt_stats st = some_stats();
  char buf[4096];
  int n = cgrt_stats_format(&st, CGRT_STATS_TEXT, buf, sizeof(buf));
  assert_true(n > 0 && n < (int)sizeof(buf));
  char line[64];
  snprintf(line, sizeof(line), "\ncaptures %llu\n", (unsigned long long)st.captures);
  assert_non_null(strstr(buf, line));
  assert_non_null(strstr(buf, "steps_by_mode: eager "));
  char small[16];
  assert_int_equal(cgrt_stats_format(&st, CGRT_STATS_TEXT, small, sizeof(small)), n);
  assert_int_equal(strlen(small), sizeof(small) - 1); /* cut, terminated */
  assert_int_equal(strncmp(small, buf, sizeof(small) - 1), 0);
}

/* A host built against an older cgrt.h passes a shorter struct: only what it covers is read. */
static void an_older_struct_prints_what_it_has(void **state) {
  (void)state;
  cgrt_stats st = some_stats();
  st.struct_size = offsetof(cgrt_stats, real_tokens);
  char buf[4096];
  assert_true(cgrt_stats_format(&st, CGRT_STATS_JSON, buf, sizeof(buf)) > 0);
  assert_non_null(strstr(buf, "\"graph_mem_reserved\":"));
  assert_null(strstr(buf, "\"real_tokens\":"));
  assert_null(strstr(buf, "\"buckets\":"));
  assert_int_equal(cgrt_stats_format(NULL, CGRT_STATS_JSON, buf, sizeof(buf)), CGRT_E_INVAL);
  assert_int_equal(cgrt_stats_format(&st, (cgrt_stats_style)7, buf, sizeof(buf)), CGRT_E_INVAL);
  assert_int_equal(cgrt_stats_format(&st, CGRT_STATS_TEXT, NULL, 8), CGRT_E_INVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_field_by_name_in_json),
      cmocka_unit_test(text_and_truncation),
      cmocka_unit_test(an_older_struct_prints_what_it_has),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
