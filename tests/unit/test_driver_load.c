/*
 * test_driver_load.c - finding and loading device driver objects (libcgrt-driver-NAME.so): they
 * are found like backends, and each way one can be missing or broken gets its own message: not
 * found (the directories searched), found but not loadable (its libraries missing: this process
 * has no such device), found but not a driver of this cgrt (no table, another major, a short
 * table, another name, an operation missing), refused as untrusted. A good object, the host
 * driver built as a driver object answering to `cuda` (tests/fixtures), runs steps through the
 * loaded path without a GPU, and is loaded once for every runtime of the process.
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

/* The directory of driver fixture `name` (tests/fixtures/CMakeLists.txt). */
static const char *case_dir(const char *name) {
  static char dir[4096];
  snprintf(dir, sizeof(dir), "%s/drivers/%s", fixtures(), name);
  return dir;
}

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: %s", needle, haystack);
}

/* Opens a runtime on `driver` (impl local) with CGRT_DRIVER_PATH set to path (NULL: unset). */
static int open_on(cgrt_runtime **rt, const char *driver, const char *path) {
  if (path)
    setenv("CGRT_DRIVER_PATH", path, 1);
  else
    unsetenv("CGRT_DRIVER_PATH");
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n[runtime]\ndriver = %s\nlog = off\n",
           driver);
  int rc = cgrt_open_string(rt, ini);
  unsetenv("CGRT_DRIVER_PATH");
  return rc;
}

/* Opening on `driver = cuda` with the fixture `name` fails with code; the error, for checks. */
static const char *refused(const char *name, int code) {
  cgrt_runtime *rt = (cgrt_runtime *)1;
  int rc = open_on(&rt, "cuda", case_dir(name));
  if (rc != code)
    fail_msg("fixture %s: expected %d, got %d: %s", name, code, rc, cgrt_last_error(NULL));
  assert_null(rt);
  return cgrt_last_error(NULL);
}

static int setup(void **state) {
  (void)state;
  unsetenv("CGRT_DRIVER_PATH");
  return 0;
}

static void not_found_lists_directories(void **state) {
  (void)state;
  setenv("CGRT_DRIVER_PATH", "/opt/env", 1);
  void *dl = NULL;
  char *path = NULL, err[2048];
  const struct cgrt_driver *drv = NULL;
  assert_int_equal(
      cgrt__driver_object_open("nosuch", "/opt/one:/opt/two", &dl, &path, &drv, err, sizeof(err)),
      CGRT_E_NODEV);
  unsetenv("CGRT_DRIVER_PATH");
  assert_null(drv);
  assert_contains(err, "no NOSUCH device: driver 'nosuch' not found");
  assert_contains(err, "no libcgrt-driver-nosuch.so in /opt/one, /opt/two, /opt/env");
  assert_contains(err, "/cgrt/drivers");
  assert_contains(err, "CGRT_DRIVER_PATH");
  assert_contains(err, "driver = host");
}

#ifndef CGRT_HAVE_CUDA
/* A build without CUDA has no cuda driver object: `driver = cuda` is "no CUDA device". */
static void cuda_driver_not_built_is_no_device(void **state) {
  (void)state;
  cgrt_runtime *rt = (cgrt_runtime *)1;
  assert_int_equal(open_on(&rt, "cuda", NULL), CGRT_E_NODEV);
  assert_null(rt);
  assert_contains(cgrt_last_error(NULL), "no CUDA device: driver 'cuda' not found");
  assert_contains(cgrt_last_error(NULL), "libcgrt-driver-cuda.so");
  assert_contains(cgrt_last_error(NULL), "driver = host");
}
#endif

static void search_dirs_in_order(void **state) {
  (void)state;
  setenv("CGRT_DRIVER_PATH", "/env/a:/env/b:/env/a", 1);
  char **dirs = NULL;
  size_t n = 0;
  assert_int_equal(cgrt__object_search_dirs(&cgrt__kind_driver, NULL, &dirs, &n), 0);
  unsetenv("CGRT_DRIVER_PATH");
  assert_true(n >= 4);
  assert_string_equal(dirs[0], "/env/a");
  assert_string_equal(dirs[1], "/env/b");
  assert_non_null(strstr(dirs[2], "/cgrt/drivers")); /* beside the library (here: the test) */
  assert_string_equal(dirs[n - 1], CGRT_INSTALL_DRIVER_DIR_FOR_TESTS);
  cgrt__free_strings(dirs, n);
  /* The tool interface lists the same. */
  assert_int_equal(cgrt_tool_driver_search_dirs(&dirs, &n), 0);
  assert_string_equal(dirs[n - 1], CGRT_INSTALL_DRIVER_DIR_FOR_TESTS);
  cgrt_tool_free_strings(dirs, n);
}

static void missing_library_is_no_device(void **state) {
  (void)state;
  const char *e = refused("missing_library", CGRT_E_NODEV);
  assert_contains(e, "no CUDA device: driver 'cuda' was found at ");
  assert_contains(e, "missing_library/libcgrt-driver-cuda.so but could not be loaded");
  assert_contains(e, "libcgrt-test-absent.so");
  assert_contains(e, "driver = host");
}

static void not_an_object_is_not_loadable(void **state) {
  (void)state;
  const char *e = refused("garbage", CGRT_E_NODEV);
  assert_contains(e, "garbage/libcgrt-driver-cuda.so but could not be loaded");
}

static void no_table_symbol(void **state) {
  (void)state;
  const char *e = refused("no_symbol", CGRT_E_BACKEND);
  assert_contains(e, "is not a cgrt driver: it does not export the symbol cgrt_driver_v1");
}

static void future_major_names_both_versions(void **state) {
  (void)state;
  const char *e = refused("future_v2", CGRT_E_BACKEND);
  assert_contains(e, "speaks driver ABI major 2 (it exports cgrt_driver_v2)");
  assert_contains(e, "speaks major 1 (cgrt_driver_v1)");
}

static void wrong_major_in_table(void **state) {
  (void)state;
  const char *e = refused("bad_major", CGRT_E_BACKEND);
  assert_contains(e, "abi_major is 7 but this cgrt");
  assert_contains(e, "speaks driver ABI major 1");
}

static void short_table_is_refused(void **state) {
  (void)state;
  const char *e = refused("short_table", CGRT_E_BACKEND);
  assert_contains(e, "struct_size is 16, smaller than");
  assert_contains(e, "built from an older cgrt");
}

static void table_of_another_driver(void **state) {
  (void)state;
  const char *e = refused("wrong_name", CGRT_E_BACKEND);
  assert_contains(e, "its table names driver 'host', not 'cuda'");
}

static void mandatory_operation_missing(void **state) {
  (void)state;
  const char *e = refused("missing_op", CGRT_E_BACKEND);
  assert_contains(e, "the mandatory operation 'open' is NULL");
}

static void world_writable_driver_refused(void **state) {
  (void)state;
  char dir[64] = "/tmp/cgrt-driver-XXXXXX", cmd[8192], so[128];
  assert_non_null(mkdtemp(dir));
  assert_int_equal(chmod(dir, 0755), 0);
  snprintf(so, sizeof(so), "%s/libcgrt-driver-cuda.so", dir);
  snprintf(cmd, sizeof(cmd), "cp '%s/libcgrt-driver-cuda.so' '%s'", case_dir("host_as_cuda"), so);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(chmod(so, 0777), 0);
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_on(&rt, "cuda", dir), CGRT_E_BACKEND);
  assert_contains(cgrt_last_error(NULL), "refusing to load driver");
  assert_contains(cgrt_last_error(NULL), "writable by every user");
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

struct host {
  cgrt_runtime *rt;
  cgrt_module *m;
  int calls; /* module callbacks run (warm-up, capture; not replays) */
  int ran;   /* host functions the driver ran (every step) */
};

static void ran(void *arg) {
  ((struct host *)arg)->ran++;
}

static int forward(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct host *h = user;
  h->calls++;
  return cgrt_enqueue_host(ctx, ran, h);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  return cgrt_forward(h->rt, h->m, ctx, &a);
}

static void loaded_driver_runs_steps(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL, *rt2 = NULL;
  assert_int_equal(open_on(&rt, "cuda", case_dir("host_as_cuda")), 0);
  /* The table is the object's, not the built-in host driver's. */
  assert_ptr_not_equal(rt->dev.drv, &cgrt__driver_host);
  assert_string_equal(rt->dev.drv->name, "cuda");
  /* A second runtime shares the loaded object. */
  assert_int_equal(open_on(&rt2, "cuda", case_dir("host_as_cuda")), 0);
  assert_ptr_equal(rt2->dev.drv, rt->dev.drv);
  assert_int_equal(cgrt_close(rt2), 0);

  struct host h = {.rt = rt};
  cgrt_module_desc d = {.struct_size = sizeof(d),
                        .name = "m",
                        .kind = CGRT_KIND_ATTN,
                        .forward = forward,
                        .user = &h};
  assert_int_equal(cgrt_module_register(rt, &d, &h.m), 0);
  cgrt_mode modes[4];
  for (int i = 0; i < 4; i++) {
    cgrt_step_report r = {.struct_size = sizeof(r)};
    cgrt_step_desc s = {
        .struct_size = sizeof(s), .phase = CGRT_PHASE_INFER, .tokens = 1, .body = body, .user = &h};
    if (cgrt_step(rt, &s, &r) != 0)
      fail_msg("step %d: %s", i, cgrt_last_error(rt));
    modes[i] = r.mode;
  }
  assert_int_equal(cgrt_synchronize(rt), 0);
  assert_int_equal(modes[0], CGRT_MODE_WARMUP);
  assert_int_equal(modes[1], CGRT_MODE_CAPTURE);
  assert_int_equal(modes[2], CGRT_MODE_REPLAY);
  assert_int_equal(modes[3], CGRT_MODE_REPLAY);
  assert_int_equal(h.calls, 2); /* warm-up and capture; replays run the graph */
  assert_int_equal(h.ran, 4);   /* the capture step runs its graph too */
  assert_int_equal(cgrt_close(rt), 0);
}

static void host_driver_needs_no_object(void **state) {
  (void)state;
  const struct cgrt_driver *drv = NULL;
  char err[256];
  assert_int_equal(cgrt__driver_get(CGRT_DRIVER_HOST, &drv, err, sizeof(err)), 0);
  assert_ptr_equal(drv, &cgrt__driver_host);
  cgrt_runtime *rt = NULL;
  assert_int_equal(open_on(&rt, "host", "/nonexistent"), 0);
  assert_int_equal(cgrt_close(rt), 0);
}

static void emit_line(void *user, const char *line) {
  (void)line;
  (*(int *)user)++;
}

static void tool_describe_names_the_object(void **state) {
  (void)state;
  char path[4096], err[2048];
  int lines = 0;
  assert_int_equal(
      cgrt_tool_driver_describe("host", emit_line, &lines, path, sizeof(path), err, sizeof(err)),
      0);
  assert_string_equal(path, "(built in)");
  assert_int_equal(
      cgrt_tool_driver_describe("nosuch", emit_line, &lines, path, sizeof(path), err, sizeof(err)),
      CGRT_E_NODEV);
  assert_contains(err, "driver 'nosuch' not found");
  setenv("CGRT_DRIVER_PATH", case_dir("host_as_cuda"), 1);
  assert_int_equal(
      cgrt_tool_driver_describe("cuda", emit_line, &lines, path, sizeof(path), err, sizeof(err)),
      0);
  unsetenv("CGRT_DRIVER_PATH");
  assert_contains(path, "host_as_cuda/libcgrt-driver-cuda.so");
  assert_int_equal(lines, 0); /* the host driver describes nothing */
}

#define T(name) cmocka_unit_test_setup(name, setup)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(not_found_lists_directories),
#ifndef CGRT_HAVE_CUDA
      T(cuda_driver_not_built_is_no_device),
#endif
      T(search_dirs_in_order),
      T(missing_library_is_no_device),
      T(not_an_object_is_not_loadable),
      T(no_table_symbol),
      T(future_major_names_both_versions),
      T(wrong_major_in_table),
      T(short_table_is_refused),
      T(table_of_another_driver),
      T(mandatory_operation_missing),
      T(world_writable_driver_refused),
      T(loaded_driver_runs_steps),
      T(host_driver_needs_no_object),
      T(tool_describe_names_the_object),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
