/*
 * test_loader.c - finding and loading backends: each way a backend can be missing or broken gets
 * its own message, and good backends load by name, by path, from backend_path, from
 * CGRT_BACKEND_PATH and from the default directory beside the library.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "cgrt/tool.h"
#include "runtime.h"

static const char *fixtures(void) {
  const char *dir = getenv("CGRT_TEST_FIXTURES");
  return dir ? dir : "tests/fixtures/lib";
}

/* Opens a runtime on the host driver with `impl`, `backend_path` (NULL: none) and extra INI. */
static int open_with(cgrt_runtime **rt, const char *impl, const char *backend_path,
                     const char *extra) {
  char ini[16384];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = %s\n%s%s%s\n[runtime]\ndriver = host\nlog = off\n%s", impl,
           backend_path ? "backend_path = " : "", backend_path ? backend_path : "",
           backend_path ? "\n" : "", extra ? extra : "");
  return cgrt_open_string(rt, ini);
}

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: %s", needle, haystack);
}

static int setup(void **state) {
  (void)state;
  unsetenv("CGRT_BACKEND_PATH");
  return 0;
}

static void not_found_by_name_lists_directories(void **state) {
  (void)state;
  cgrt_runtime *rt = (cgrt_runtime *)1;
  assert_int_equal(open_with(&rt, "nosuch", "/opt/one:/opt/two", NULL), CGRT_E_NOTFOUND);
  assert_null(rt);
  const char *e = cgrt_last_error(NULL);
  assert_contains(e, "backend 'nosuch' not found");
  assert_contains(e, "libcgrt-backend-nosuch.so");
  assert_contains(e, "/opt/one");
  assert_contains(e, "/opt/two");
  assert_contains(e, "CGRT_BACKEND_PATH");
}

static void not_found_by_path(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "/nonexistent/libcgrt-backend-x.so", NULL, NULL),
                   CGRT_E_NOTFOUND);
  assert_contains(cgrt_last_error(NULL), "/nonexistent/libcgrt-backend-x.so does not exist");
}

static void not_a_loadable_object(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "garbage", fixtures(), NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "was found at");
  assert_contains(cgrt_last_error(NULL), "is not a loadable object");
}

static void no_backend_symbol(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "no_symbol", fixtures(), NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "is not a cgrt backend");
  assert_contains(cgrt_last_error(NULL), "cgrt_backend_v1");
}

static void wrong_major(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "bad_major", fixtures(), NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "abi_major is 2");
  assert_contains(cgrt_last_error(NULL), "speaks backend ABI major 1");
}

static void future_major_names_both_versions(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "future_v2", fixtures(), NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "speaks backend ABI major 2");
  assert_contains(cgrt_last_error(NULL), "speaks major 1");
}

static void struct_too_small(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "short_struct", fixtures(), NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "struct_size is 24");
}

static void mandatory_function_missing(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "missing_fn", fixtures(), NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "mandatory function 'step' is NULL");
}

static void init_failure_carries_backend_reason(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "init_fail", fixtures(), NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "backend 'init_fail'");
  assert_contains(cgrt_last_error(NULL), "failed to initialize");
  assert_contains(cgrt_last_error(NULL), "the frobnicator is not calibrated");
}

static void loads_by_path(void **state) {
  (void)state;
  char path[4096];
  snprintf(path, sizeof(path), "%s/libcgrt-backend-sectioned.so", fixtures());
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, path, NULL, NULL), 0);
  assert_string_equal(cgrt_backend_name(rt), "sectioned");
  cgrt_close(rt);
}

static void loads_from_backend_path_list(void **state) {
  (void)state;
  char list[4096];
  snprintf(list, sizeof(list), "/nonexistent:%s", fixtures());
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "sectioned", list, NULL), 0);
  assert_string_equal(cgrt_backend_name(rt), "sectioned");
  cgrt_close(rt);
}

static void loads_from_environment(void **state) {
  (void)state;
  setenv("CGRT_BACKEND_PATH", fixtures(), 1);
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "sectioned", NULL, NULL), 0);
  assert_string_equal(cgrt_backend_name(rt), "sectioned");
  cgrt_close(rt);
  unsetenv("CGRT_BACKEND_PATH");
}

static void builtin_found_beside_the_library(void **state) {
  (void)state;
  /* No backend_path, no CGRT_BACKEND_PATH: the default directory must hold the built-ins. */
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "none", NULL, NULL), 0);
  assert_string_equal(cgrt_backend_name(rt), "none");
  cgrt_close(rt);
}

static void search_dirs_in_order(void **state) {
  (void)state;
  setenv("CGRT_BACKEND_PATH", "/env/a:/env/b", 1);
  char **dirs = NULL;
  size_t n = 0;
  assert_int_equal(cgrt__backend_search_dirs("/cfg/a:/cfg/b:/cfg/a", &dirs, &n), 0);
  assert_true(n >= 5);
  assert_string_equal(dirs[0], "/cfg/a");
  assert_string_equal(dirs[1], "/cfg/b");
  assert_string_equal(dirs[2], "/env/a");
  assert_string_equal(dirs[3], "/env/b");
  assert_string_equal(dirs[n - 1], CGRT_INSTALL_BACKEND_DIR_FOR_TESTS);
  cgrt__free_strings(dirs, n);
  unsetenv("CGRT_BACKEND_PATH");
}

static void backend_section_keys_are_the_backends(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "sectioned", fixtures(), "[sectioned]\nalpha = ok\n"), 0);
  cgrt_close(rt);

  rt = NULL;
  assert_int_equal(open_with(&rt, "sectioned", fixtures(), "[sectioned]\nbeta = 1\n"),
                   CGRT_E_CONFIG);
  assert_contains(cgrt_last_error(NULL), "beta");
  assert_contains(cgrt_last_error(NULL), "[sectioned]");

  rt = NULL;
  assert_int_equal(open_with(&rt, "sectioned", fixtures(), "[sectioned]\nalpha = bad\n"),
                   CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "alpha = 'bad': expected 'ok'");
}

/* Runs a few steps with the runtime's backend: a module whose callback counts its calls. */
static int counted;

static int count_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)ctx;
  (void)args;
  (void)user;
  counted++;
  return 0;
}

static int count_body(const cgrt_ctx *ctx, void *user) {
  cgrt_args a = {.struct_size = sizeof(a)};
  return cgrt_forward(ctx->rt, user, ctx, &a);
}

static void run_steps(cgrt_runtime *rt, int steps) {
  cgrt_module *m = NULL;
  cgrt_module_desc d = {.struct_size = sizeof(d), .name = "m", .forward = count_module};
  assert_int_equal(cgrt_module_register(rt, &d, &m), 0);
  counted = 0;
  for (int i = 0; i < steps; i++) {
    cgrt_step_desc sd = {
        .struct_size = sizeof(sd), .phase = CGRT_PHASE_TRAIN, .body = count_body, .user = m};
    assert_int_equal(cgrt_step(rt, &sd, NULL), 0);
  }
  assert_int_equal(counted, steps);
  assert_int_equal(cgrt_release_graphs(rt), 0); /* release is optional: not in this table */
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(rt, &st), 0); /* stats too */
  assert_int_equal(st.steps, (uint64_t)steps);
}

static void older_v1_table_loads_and_runs(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "old_v1", fixtures(), NULL), 0);
  assert_string_equal(cgrt_backend_name(rt), "old_v1");
  run_steps(rt, 5);
  assert_int_equal(cgrt_close(rt), 0);
}

static void newer_v1_table_loads_and_runs(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "newer_v1", fixtures(), NULL), 0);
  assert_string_equal(cgrt_backend_name(rt), "newer_v1");
  run_steps(rt, 5);
  assert_int_equal(cgrt_close(rt), 0);
}

/* A backend built against the frozen oldest v1 header (tests/fixtures/abi/backend_v1_0.h) loads,
   reads warmup_steps where that header put it, and captures and replays through its host API. */
static void oldest_v1_header_fixture_loads_and_replays(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "v1_0", fixtures(), "[cuda_graph]\nwarmup_steps = 2\n"), 0);
  assert_string_equal(cgrt_backend_name(rt), "v1_0");
  cgrt_module *m = NULL;
  cgrt_module_desc d = {.struct_size = sizeof(d), .name = "m", .forward = count_module};
  assert_int_equal(cgrt_module_register(rt, &d, &m), 0);
  for (int i = 0; i < 6; i++) {
    cgrt_step_desc sd = {
        .struct_size = sizeof(sd), .phase = CGRT_PHASE_TRAIN, .body = count_body, .user = m};
    assert_int_equal(cgrt_step(rt, &sd, NULL), 0);
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(rt, &st), 0);
  assert_int_equal(st.steps_by_mode[CGRT_MODE_WARMUP], 2);
  assert_int_equal(st.steps_by_mode[CGRT_MODE_CAPTURE], 1);
  assert_int_equal(st.steps_by_mode[CGRT_MODE_REPLAY], 3);
  assert_int_equal(cgrt_close(rt), 0);
}

/* Copies the sectioned fixture into a fresh directory; returns the .so path. */
static void copy_fixture(char *dir, size_t dlen, char *so, size_t slen) {
  snprintf(dir, dlen, "/tmp/cgrt-trust-XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(so, slen, "%s/libcgrt-backend-sectioned.so", dir);
  char cmd[8192];
  snprintf(cmd, sizeof(cmd), "cp '%s/libcgrt-backend-sectioned.so' '%s'", fixtures(), so);
  assert_int_equal(system(cmd), 0);
}

static void remove_dir(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void world_writable_backend_refused(void **state) {
  (void)state;
  char dir[64], so[128];
  copy_fixture(dir, sizeof(dir), so, sizeof(so));
  cgrt_runtime *rt = NULL;
  assert_int_equal(chmod(dir, 0755), 0);
  assert_int_equal(open_with(&rt, so, NULL, NULL), 0); /* trusted as it is */
  cgrt_close(rt);

  assert_int_equal(chmod(so, 0777), 0);
  rt = NULL;
  assert_int_equal(open_with(&rt, so, NULL, NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "writable by every user");
  assert_contains(cgrt_last_error(NULL), "chmod o-w");

  assert_int_equal(chmod(so, 0755), 0);
  assert_int_equal(chmod(dir, 0777), 0);
  rt = NULL;
  assert_int_equal(open_with(&rt, "sectioned", dir, NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "its directory");

  /* A sticky directory (like /tmp) protects the files it holds: accepted. */
  assert_int_equal(chmod(dir, 01777), 0);
  rt = NULL;
  assert_int_equal(open_with(&rt, "sectioned", dir, NULL), 0);
  cgrt_close(rt);
  remove_dir(dir);
}

static void foreign_owned_backend_refused(void **state) {
  (void)state;
  if (geteuid() != 0) {
    skip(); /* only root can give a file away to test this */
    return;
  }
  char dir[64], so[128];
  copy_fixture(dir, sizeof(dir), so, sizeof(so));
  assert_int_equal(chmod(dir, 0755), 0);
  assert_int_equal(chown(so, 65534, 65534), 0);
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, so, NULL, NULL), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "belongs to uid 65534");
  remove_dir(dir);
}

/* ---------------------------------------------------------------- relative paths */

/*
 * A tree for the relative-path tests: ROOT/sub/rel.ini's backend beside it, and
 * ROOT/sub/backends/ holding the fixture for backend_path; the working directory is ROOT.
 */
struct tree {
  char root[64];
  char real[4096]; /* ROOT as realpath() spells it */
  char cwd[4096];  /* to go back to */
};

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void tree_make(struct tree *t) {
  snprintf(t->root, sizeof(t->root), "/tmp/cgrt-rel-XXXXXX");
  assert_non_null(mkdtemp(t->root));
  assert_non_null(realpath(t->root, t->real));
  assert_non_null(getcwd(t->cwd, sizeof(t->cwd)));
  char cmd[8192];
  snprintf(cmd, sizeof(cmd),
           "mkdir -p '%s/sub/backends' && cp '%s/libcgrt-backend-sectioned.so' '%s/sub/' && "
           "cp '%s/libcgrt-backend-sectioned.so' '%s/sub/backends/'",
           t->root, fixtures(), t->root, fixtures(), t->root);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(chdir(t->root), 0);
}

static void tree_remove(struct tree *t) {
  assert_int_equal(chdir(t->cwd), 0);
  remove_dir(t->root);
}

/* The case: `impl = ./x.so` beside the file, the file named from another directory. */
static void relative_impl_resolves_from_the_files_folder(void **state) {
  (void)state;
  struct tree t;
  tree_make(&t);
  write_file("sub/rel.ini", "[cuda_graph]\nimpl = ./libcgrt-backend-sectioned.so\n"
                            "[runtime]\ndriver = host\nlog = off\n");
  cgrt_runtime *rt = NULL;
  if (cgrt_open(&rt, "sub/rel.ini") != 0)
    fail_msg("sub/rel.ini: %s", cgrt_last_error(NULL));
  assert_string_equal(cgrt_backend_name(rt), "sectioned");
  char want[4200];
  snprintf(want, sizeof(want), "%s/sub/libcgrt-backend-sectioned.so", t.real);
  assert_string_equal(rt->lib.path, want);
  /* What was written stays what the configuration says. */
  char buf[256];
  assert_int_equal(cgrt_config_get(rt, "cuda_graph", "impl", buf, sizeof(buf)), 0);
  assert_string_equal(buf, "./libcgrt-backend-sectioned.so");
  /* A path a backend hands to backend_open (a decorator's inner backend) resolves alike. */
  const struct cgrt_backend_v1 *vt = NULL;
  void *handle = NULL;
  assert_int_equal(rt->host.backend_open(&rt->host, "libcgrt-backend-sectioned.so", &vt, &handle),
                   0);
  assert_string_equal(vt->name, "sectioned");
  rt->host.backend_close(&rt->host, handle);
  cgrt_close(rt);

  /* A file name ending in .so is a path too; and an absolute name of the file works the same. */
  write_file("sub/plain.ini", "[cuda_graph]\nimpl = libcgrt-backend-sectioned.so\n"
                              "[runtime]\ndriver = host\nlog = off\n");
  char abs[4200];
  snprintf(abs, sizeof(abs), "%s/sub/plain.ini", t.real);
  rt = NULL;
  if (cgrt_open(&rt, abs) != 0)
    fail_msg("%s: %s", abs, cgrt_last_error(NULL));
  assert_string_equal(rt->lib.path, want);
  cgrt_close(rt);

  /* CGRT_CONFIG names a file as well. */
  setenv("CGRT_CONFIG", "sub/rel.ini", 1);
  rt = NULL;
  int rc = cgrt_open(&rt, NULL);
  unsetenv("CGRT_CONFIG");
  if (rc != 0)
    fail_msg("CGRT_CONFIG=sub/rel.ini: %s", cgrt_last_error(NULL));
  cgrt_close(rt);
  tree_remove(&t);
}

static void relative_backend_path_resolves_from_the_files_folder(void **state) {
  (void)state;
  struct tree t;
  tree_make(&t);
  write_file("sub/path.ini",
             "[cuda_graph]\nimpl = sectioned\nbackend_path = /nonexistent:backends\n"
             "[runtime]\ndriver = host\nlog = off\n");
  cgrt_runtime *rt = NULL;
  if (cgrt_open(&rt, "sub/path.ini") != 0)
    fail_msg("sub/path.ini: %s", cgrt_last_error(NULL));
  char want[4200];
  snprintf(want, sizeof(want), "%s/sub/backends/libcgrt-backend-sectioned.so", t.real);
  assert_string_equal(rt->lib.path, want);
  cgrt_close(rt);

  /* Not found: the message names what was written and where it was looked for. */
  write_file("sub/missing.ini", "[cuda_graph]\nimpl = nosuch\nbackend_path = here\n"
                                "[runtime]\ndriver = host\nlog = off\n");
  rt = NULL;
  assert_int_equal(cgrt_open(&rt, "sub/missing.ini"), CGRT_E_NOTFOUND);
  const char *e = cgrt_last_error(NULL);
  snprintf(want, sizeof(want), "%s/sub/here", t.real);
  assert_contains(e, want);
  assert_contains(e, "backend_path = 'here' in sub/missing.ini is read from that file's folder");
  tree_remove(&t);
}

static void missing_relative_impl_names_both_spellings(void **state) {
  (void)state;
  struct tree t;
  tree_make(&t);
  write_file("sub/nope.ini", "[cuda_graph]\nimpl = ./nope.so\n[runtime]\ndriver = host\n");
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open(&rt, "sub/nope.ini"), CGRT_E_NOTFOUND);
  const char *e = cgrt_last_error(NULL);
  char want[4200];
  snprintf(want, sizeof(want), "%s/sub/nope.so does not exist", t.real);
  assert_contains(e, want);
  assert_contains(e, "impl = './nope.so' in sub/nope.ini is read from that file's folder");
  tree_remove(&t);
}

/* An INI given as a string has no folder: its paths resolve from the working directory. */
static void ini_string_resolves_from_the_working_directory(void **state) {
  (void)state;
  struct tree t;
  tree_make(&t);
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "./libcgrt-backend-sectioned.so", NULL, NULL), CGRT_E_NOTFOUND);
  assert_contains(cgrt_last_error(NULL), "./libcgrt-backend-sectioned.so does not exist");
  assert_null(strstr(cgrt_last_error(NULL), "folder"));
  assert_int_equal(open_with(&rt, "sectioned", "sub/backends", NULL), 0);
  cgrt_close(rt);
  assert_int_equal(chdir("sub"), 0);
  rt = NULL;
  assert_int_equal(open_with(&rt, "./libcgrt-backend-sectioned.so", NULL, NULL), 0);
  assert_string_equal(cgrt_backend_name(rt), "sectioned");
  cgrt_close(rt);
  tree_remove(&t);
}

/* ---------------------------------------------------------------- issue 40: sections, rules */

/* The plan a runtime's backend describes, its lines joined with '\n' into buf. */
struct plan {
  char text[4096];
  size_t len;
};

static void plan_line(void *user, const char *line) {
  struct plan *p = user;
  if (p->len < sizeof(p->text))
    p->len += (size_t)snprintf(p->text + p->len, sizeof(p->text) - p->len, "%s\n", line);
}

static const char *plan_of(cgrt_runtime *rt, struct plan *p) {
  p->len = 0;
  p->text[0] = '\0';
  assert_int_equal(cgrt_tool_describe(rt, plan_line, p), 0);
  return p->text;
}

/* A copy of fixture `name` as libcgrt-backend-AS.so in a fresh folder: the folder and the path. */
static void copy_fixture_as(const char *name, const char *as, char *dir, size_t dlen, char *so,
                            size_t slen) {
  snprintf(dir, dlen, "/tmp/cgrt-renamed-XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(so, slen, "%s/libcgrt-backend-%s.so", dir, as);
  char cmd[8192];
  snprintf(cmd, sizeof(cmd), "cp '%s/libcgrt-backend-%s.so' '%s'", fixtures(), name, so);
  assert_int_equal(system(cmd), 0);
}

/* A backend copied under another file name reads its own section, its table's name: init() gets
   its option (the default without one), by path and by name. */
static void renamed_backend_initializes_from_its_section(void **state) {
  (void)state;
  char dir[64], so[128];
  struct plan p;
  copy_fixture_as("capper", "stepcap", dir, sizeof(dir), so, sizeof(so));
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, so, NULL, "[capper]\nmax_steps = 7\n"), 0);
  assert_string_equal(cgrt_backend_name(rt), "capper");
  assert_contains(plan_of(rt, &p), "capper: max_steps 7");
  run_steps(rt, 3);
  cgrt_close(rt);
  rt = NULL;
  assert_int_equal(open_with(&rt, "stepcap", dir, NULL), 0);
  assert_contains(plan_of(rt, &p), "capper: max_steps 10");
  cgrt_close(rt);
  rt = NULL;
  assert_int_equal(open_with(&rt, so, NULL, "[stepcap]\nmax_steps = 7\n"), CGRT_E_CONFIG);
  assert_contains(cgrt_last_error(NULL), "reads its keys in [capper]");
  remove_dir(dir);
}

/* trace lends the inner backend its section: declared, typed, range-checked, check()ed, and
   init() reads it; an open inner section is checked after init, as impl's would be. */
static void trace_lends_the_inner_backends_section(void **state) {
  (void)state;
  char trace[1024], extra[2048];
  struct plan p;
  snprintf(trace, sizeof(trace), "%s/libcgrt-backend-trace.so", fixtures());
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, trace, fixtures(),
                             "[trace]\ninner = capper\ncalls = off\n"
                             "[capper]\nmax_steps = 7\n"),
                   0);
  assert_string_equal(cgrt_backend_name(rt), "trace");
  assert_contains(plan_of(rt, &p), "capper: max_steps 7");
  run_steps(rt, 3);
  cgrt_close(rt);
  static const struct {
    const char *ini, *message;
  } refused[] = {
      {"[trace]\ninner = capper\n[capper]\nmax_step = 7\n", "did you mean 'max_steps'?"},
      {"[trace]\ninner = capper\n[capper]\nmax_steps = 0\n", "must be from 1 to 100"},
      {"[trace]\ninner = capper\n[capper]\nmax_steps = 80\n", "is above 64; its check() ran"},
      {"[trace]\ninner = capper\n[host]\nrecompute = full\n", "builds per-module graphs"},
      {"[trace]\ninner = wholestep\n", "graphs the whole step, which needs [host] nan_check"},
      {"[trace]\ninner = sectioned\n[sectioned]\nbeta = 1\n",
       "unknown key 'beta' in [sectioned]: backend 'sectioned' does not read it"},
      {"[trace]\ncalls = on\n", "wraps the backend that [trace] inner names"},
  };
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    rt = NULL;
    snprintf(extra, sizeof(extra), "%s", refused[i].ini);
    int rc = open_with(&rt, trace, fixtures(), extra);
    if (rc != CGRT_E_CONFIG || !strstr(cgrt_last_error(NULL), refused[i].message))
      fail_msg("case %zu: rc %d: %s", i, rc, cgrt_last_error(NULL));
  }
  rt = NULL;
  assert_int_equal(open_with(&rt, trace, fixtures(),
                             "[trace]\ninner = sectioned\n"
                             "[sectioned]\nalpha = ok\n"),
                   0);
  cgrt_close(rt);
}

/* A third-party whole-step backend without a check(): the core's rules by its caps. */
static void whole_step_backend_gets_the_core_rules(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "wholestep", fixtures(), NULL), CGRT_E_CONFIG);
  assert_contains(cgrt_last_error(NULL),
                  "graphs the whole step, which needs [host] nan_check = off");
  rt = NULL;
  assert_int_equal(open_with(&rt, "wholestep", fixtures(),
                             "[host]\nnan_check = off\n"
                             "recompute = full\n"),
                   0);
  cgrt_module *m = NULL;
  cgrt_module_desc d = {.struct_size = sizeof(d), .name = "m", .forward = count_module};
  assert_int_equal(cgrt_module_register(rt, &d, &m), 0);
  for (int i = 0; i < 5; i++) {
    cgrt_step_desc sd = {
        .struct_size = sizeof(sd), .phase = CGRT_PHASE_TRAIN, .body = count_body, .user = m};
    assert_int_equal(cgrt_step(rt, &sd, NULL), 0);
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(rt, &st), 0);
  assert_int_equal(st.steps_by_mode[CGRT_MODE_WARMUP], 3);
  assert_int_equal(st.steps_by_mode[CGRT_MODE_CAPTURE], 1);
  assert_int_equal(st.steps_by_mode[CGRT_MODE_REPLAY], 1);
  cgrt_close(rt);
}

static void other_backends_section_is_unknown(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_with(&rt, "none", NULL, "[sectioned]\nalpha = ok\n"), CGRT_E_CONFIG);
  assert_contains(cgrt_last_error(NULL), "[sectioned]");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(not_found_by_name_lists_directories, setup),
      cmocka_unit_test_setup(not_found_by_path, setup),
      cmocka_unit_test_setup(not_a_loadable_object, setup),
      cmocka_unit_test_setup(no_backend_symbol, setup),
      cmocka_unit_test_setup(wrong_major, setup),
      cmocka_unit_test_setup(future_major_names_both_versions, setup),
      cmocka_unit_test_setup(struct_too_small, setup),
      cmocka_unit_test_setup(mandatory_function_missing, setup),
      cmocka_unit_test_setup(init_failure_carries_backend_reason, setup),
      cmocka_unit_test_setup(loads_by_path, setup),
      cmocka_unit_test_setup(loads_from_backend_path_list, setup),
      cmocka_unit_test_setup(loads_from_environment, setup),
      cmocka_unit_test_setup(builtin_found_beside_the_library, setup),
      cmocka_unit_test_setup(search_dirs_in_order, setup),
      cmocka_unit_test_setup(backend_section_keys_are_the_backends, setup),
      cmocka_unit_test_setup(other_backends_section_is_unknown, setup),
      cmocka_unit_test_setup(renamed_backend_initializes_from_its_section, setup),
      cmocka_unit_test_setup(trace_lends_the_inner_backends_section, setup),
      cmocka_unit_test_setup(whole_step_backend_gets_the_core_rules, setup),
      cmocka_unit_test_setup(relative_impl_resolves_from_the_files_folder, setup),
      cmocka_unit_test_setup(relative_backend_path_resolves_from_the_files_folder, setup),
      cmocka_unit_test_setup(missing_relative_impl_names_both_spellings, setup),
      cmocka_unit_test_setup(ini_string_resolves_from_the_working_directory, setup),
      cmocka_unit_test_setup(older_v1_table_loads_and_runs, setup),
      cmocka_unit_test_setup(newer_v1_table_loads_and_runs, setup),
      cmocka_unit_test_setup(oldest_v1_header_fixture_loads_and_replays, setup),
      cmocka_unit_test_setup(world_writable_backend_refused, setup),
      cmocka_unit_test_setup(foreign_owned_backend_refused, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
