/*
 * test_diagnose.c - diagnose on the host driver: fixture modules that break a capture each way
 * (a synchronization, a pageable copy, an allocation, a device-to-host read, work on the legacy
 * stream) and what cgrt reports about them: the call, its result, the work and step, the calling
 * function, one log line per finding and the structured list (cgrt_finding_get). The host
 * driver's own capture rules produce the findings, so the reporting is tested without a GPU;
 * tests/gpu/test_diagnose.c does the same through CUPTI on the cuda driver.
 *
 * The modules call the driver directly (as a host calls CUDA) and are exported (the test is
 * linked with -rdynamic) so that the caller can be named. One allocates through a host's pool
 * allocator in a shared object of its own (tests/fixtures/pool_allocator.c, as PyTorch's caching
 * allocator in libc10_cuda.so): declared with cgrt_set_capture_hooks_ex, its allocations are not
 * findings; the host's own still are.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "driver.h"
#include "runtime.h"
#include "common/pool_fixture.h"

enum fault {
  F_NONE,
  F_SYNC,
  F_PAGEABLE,
  F_MALLOC,
  F_HOST_READ,
  F_LEGACY,
  F_POOL,
  F_SYNC_MALLOC,
  F_ELSEWHERE /* another thread's cudaDeviceSynchronize lands in the capture (f->elsewhere times) */
};

struct fx {
  cgrt_runtime *rt;
  cgrt_module *m;
  enum fault fault;
  double *dev;      /* device memory (mem_alloc) */
  double host[4];   /* pageable host memory */
  void *leaked[16]; /* what the malloc module allocated */
  int num_leaked;
  int ran;   /* host functions run */
  int lines; /* "diagnose:" log lines */
  char last[2048];
  char fallback[4096]; /* the last warning that a capture fell back, with its reason */
  int pool_lines;      /* debug lines about the pool allocator's calls, not reported */
  char pool_last[2048];
  int begins, ends;   /* the capture hooks' calls */
  int elsewhere;      /* F_ELSEWHERE: captures still to be broken from outside */
  int outside;        /* fallback warnings that name a break from outside the captured work */
  int given_up;       /* warnings that a key runs eagerly from now on */
  char gave_up[1024]; /* the last of them */
};

static void count_run(void *arg) {
  ((struct fx *)arg)->ran++;
}

/* Each fixture does its fault, then its real work (a host function on ctx->stream). */
CGRT_API int diag_fixture_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct fx *f = user;
  struct cgrt_dev *dev = &f->rt->dev;
  const struct cgrt_driver *drv = dev->drv;
  switch (f->fault) {
  case F_SYNC:
    (void)drv->stream_sync(dev, ctx->stream);
    break;
  case F_PAGEABLE:
    (void)drv->memcpy_async(dev, f->dev, f->host, sizeof(f->host), ctx->stream);
    break;
  case F_MALLOC:
    if (drv->mem_alloc(dev, &f->leaked[f->num_leaked], 64) == 0)
      f->num_leaked++;
    break;
  case F_HOST_READ:
    (void)drv->memcpy_async(dev, f->host, f->dev, sizeof(f->host), ctx->stream);
    (void)drv->stream_sync(dev, ctx->stream); /* to read it */
    break;
  case F_LEGACY:
    (void)drv->host_fn(dev, CGRT_LEGACY_STREAM, count_run, f);
    break;
  case F_POOL: {
    pool_alloc_fn pool_alloc = pool_library_fn();
    if (pool_alloc(dev, &f->leaked[f->num_leaked], 64) == 0)
      f->num_leaked++;
    break;
  }
  case F_SYNC_MALLOC: /* the sync breaks the capture; the allocation after it is refused too */
    (void)drv->stream_sync(dev, ctx->stream);
    if (drv->mem_alloc(dev, &f->leaked[f->num_leaked], 64) == 0)
      f->num_leaked++;
    break;
  case F_ELSEWHERE: { /* while capturing: the module itself calls nothing CUDA refuses */
    int active = 0;
    if (f->elsewhere > 0 && drv->capture_status(dev, ctx->stream, &active) == 0 && active) {
      f->elsewhere--;
      (void)cgrt__host_sync_elsewhere(dev);
    }
    break;
  }
  case F_NONE:
    break;
  }
  return cgrt_enqueue_host(ctx, count_run, f);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fx *f = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  return cgrt_forward(f->rt, f->m, ctx, &a);
}

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  struct fx *f = user;
  (void)level;
  if (strncmp(msg, "diagnose:", 9) == 0 && level == CGRT_LOG_WARN) {
    f->lines++;
    snprintf(f->last, sizeof(f->last), "%s", msg);
  }
  if (level == CGRT_LOG_WARN && strstr(msg, "diagnose: the first call refused"))
    snprintf(f->fallback, sizeof(f->fallback), "%s", msg);
  if (level == CGRT_LOG_WARN && strstr(msg, "failed, running it eagerly") &&
      strstr(msg, "broken from outside the captured work")) {
    f->outside++;
    snprintf(f->fallback, sizeof(f->fallback), "%s", msg);
  }
  if (level == CGRT_LOG_WARN && strstr(msg, "runs eagerly from now on")) {
    f->given_up++;
    snprintf(f->gave_up, sizeof(f->gave_up), "%s", msg);
  }
  if (strncmp(msg, "diagnose:", 9) == 0 && level == CGRT_LOG_DEBUG &&
      strstr(msg, "pool allocator")) {
    f->pool_lines++;
    snprintf(f->pool_last, sizeof(f->pool_last), "%s", msg);
  }
}

/* graph: more [cuda_graph] keys; runtime: more [runtime] keys. */
static struct fx *fx_open(enum fault fault, const char *graph, const char *runtime) {
  struct fx *f = calloc(1, sizeof(*f));
  f->fault = fault;
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n%s\n[runtime]\ndriver = host\n"
           "log = warn\n%s\n",
           graph, runtime);
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = log_sink, .log_user = f};
  if (cgrt_open_ex(&f->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  cgrt_module_desc d = {.struct_size = sizeof(d),
                        .name = "layer0.fixture",
                        .kind = CGRT_KIND_MLP,
                        .forward = diag_fixture_module,
                        .user = f};
  assert_int_equal(cgrt_module_register(f->rt, &d, &f->m), 0);
  void *p = NULL;
  assert_int_equal(f->rt->dev.drv->mem_alloc(&f->rt->dev, &p, sizeof(f->host)), 0);
  f->dev = p;
  return f;
}

static void fx_close(struct fx *f) {
  for (int i = 0; i < f->num_leaked; i++)
    f->rt->dev.drv->mem_free(&f->rt->dev, f->leaked[i]);
  f->rt->dev.drv->mem_free(&f->rt->dev, f->dev);
  assert_int_equal(cgrt_close(f->rt), 0);
  free(f);
}

static cgrt_mode fx_step(struct fx *f) {
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  cgrt_step_desc d = {.struct_size = sizeof(d), .phase = CGRT_PHASE_EVAL, .body = body, .user = f};
  assert_int_equal(cgrt_step(f->rt, &d, &rep), 0);
  int active = 1;
  assert_int_equal(f->rt->dev.drv->capture_status(&f->rt->dev, f->rt->stream, &active), 0);
  assert_false(active);
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  return rep.mode;
}

static size_t count(struct fx *f) {
  size_t n = 99;
  assert_int_equal(cgrt_findings_count(f->rt, &n), 0);
  return n;
}

static cgrt_finding get(struct fx *f, size_t i) {
  cgrt_finding g = {.struct_size = sizeof(g)};
  assert_int_equal(cgrt_finding_get(f->rt, i, &g), 0);
  return g;
}

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: %s", needle, haystack);
}

/* The finding of kind `kind`, which must exist. */
static cgrt_finding find(struct fx *f, cgrt_finding_kind kind) {
  for (size_t i = 0; i < count(f); i++) {
    cgrt_finding g = get(f, i);
    if (g.kind == kind)
      return g;
  }
  fail_msg("no %s finding among %zu", cgrt_finding_kind_name(kind), count(f));
  cgrt_finding none = {0};
  return none;
}

/* ---------------------------------------------------------------- each way to break a capture */

static void sync_is_named_with_its_caller(void **state) {
  (void)state;
  struct fx *f = fx_open(F_SYNC, "", "");
  assert_int_equal(fx_step(f), CGRT_MODE_WARMUP);
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER); /* capture failed, ran eagerly */
  assert_int_equal(count(f), 1);
  cgrt_finding g = get(f, 0);
  assert_int_equal(g.kind, CGRT_FINDING_SYNC);
  assert_int_equal(g.broke_capture, 1);
  assert_string_equal(g.call, "stream_sync");
  assert_int_equal(g.result, CGRT_E_CAPTURE);
  assert_string_equal(g.result_name, cgrt_strerror(CGRT_E_CAPTURE));
  assert_string_equal(g.what, "layer0.fixture fwd");
  assert_int_equal(g.step, 1);
  assert_int_equal(g.count, 1);
  assert_contains(g.caller, "diag_fixture_module+0x");
  assert_contains(g.detail, "stream_sync returned graph capture failed while capturing "
                            "layer0.fixture fwd (step 1), called from diag_fixture_module");
  assert_contains(g.detail, "and broke the capture [sync]");
  assert_int_equal(f->lines, 1);
  assert_string_equal(f->last + strlen("diagnose: "), g.detail);
  /* The fallback message carries the culprit too. */
  assert_contains(f->fallback, "diagnose: the first call refused was stream_sync");
  /* The second attempt fails the same way: counted, not logged again. */
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER);
  assert_int_equal(count(f), 1);
  assert_int_equal(get(f, 0).count, 2);
  assert_int_equal(f->lines, 1);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.findings, 2);
  assert_int_equal(s.fallbacks, 2);
  assert_int_equal(f->ran, 3); /* the work of every step ran once */
  fx_close(f);
}

/* What the host does after the call that broke the capture is reported too (it would have broken
   it by itself), as refused after the break: the first call alone keeps broke_capture. */
static void calls_after_the_break_are_reported(void **state) {
  (void)state;
  struct fx *f = fx_open(F_SYNC_MALLOC, "", "");
  assert_int_equal(fx_step(f), CGRT_MODE_WARMUP);
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER);
  assert_int_equal(count(f), 2);
  cgrt_finding sync = find(f, CGRT_FINDING_SYNC), alloc = find(f, CGRT_FINDING_MALLOC);
  assert_int_equal(sync.broke_capture, 1);
  assert_int_equal(alloc.broke_capture, 0);
  assert_int_equal(alloc.result, CGRT_E_CAPTURE);
  assert_contains(alloc.detail, "after the capture broke [malloc]");
  assert_contains(alloc.caller, "diag_fixture_module+0x");
  assert_contains(f->fallback, "diagnose: the first call refused was stream_sync");
  fx_close(f);
}

static void malloc_refused_or_suspicious(void **state) {
  (void)state;
  struct fx *f = fx_open(F_MALLOC, "", "");
  fx_step(f);
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER);
  cgrt_finding g = find(f, CGRT_FINDING_MALLOC);
  assert_int_equal(g.broke_capture, 1);
  assert_string_equal(g.call, "mem_alloc");
  assert_contains(g.detail, "allocate before the step, or use stream-ordered memory");
  fx_close(f);
  /* relaxed allows it: captured, but the allocation ran once; reported with diagnose = on */
  f = fx_open(F_MALLOC, "capture_mode = relaxed", "diagnose = on");
  fx_step(f);
  assert_int_equal(fx_step(f), CGRT_MODE_CAPTURE);
  g = find(f, CGRT_FINDING_MALLOC);
  assert_int_equal(g.broke_capture, 0);
  assert_int_equal(g.result, 0);
  assert_string_equal(g.result_name, "success");
  assert_contains(g.detail, "mem_alloc succeeded while capturing layer0.fixture fwd (step 1)");
  assert_contains(g.detail, "suspicious [malloc]");
  fx_close(f);
}

static void pageable_copy_reported_when_on(void **state) {
  (void)state;
  /* Capturable: by default (failures only) nothing is reported. */
  struct fx *f = fx_open(F_PAGEABLE, "", "");
  fx_step(f);
  assert_int_equal(fx_step(f), CGRT_MODE_CAPTURE);
  assert_int_equal(count(f), 0);
  assert_int_equal(f->lines, 0);
  fx_close(f);
  f = fx_open(F_PAGEABLE, "", "diagnose = on");
  fx_step(f);
  assert_int_equal(fx_step(f), CGRT_MODE_CAPTURE);
  assert_int_equal(fx_step(f), CGRT_MODE_REPLAY);
  assert_int_equal(count(f), 1);
  cgrt_finding g = get(f, 0);
  assert_int_equal(g.kind, CGRT_FINDING_PAGEABLE_COPY);
  assert_int_equal(g.broke_capture, 0);
  assert_string_equal(g.call, "memcpy_async");
  assert_contains(g.detail, "copies 32 bytes from pageable host memory");
  assert_contains(g.caller, "diag_fixture_module");
  fx_close(f);
}

static void host_read_and_the_sync_it_needs(void **state) {
  (void)state;
  struct fx *f = fx_open(F_HOST_READ, "", "");
  fx_step(f);
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER);
  assert_int_equal(count(f), 2);
  cgrt_finding read = get(f, 0), sync = get(f, 1);
  assert_int_equal(read.kind, CGRT_FINDING_HOST_READ);
  assert_int_equal(read.broke_capture, 0);
  assert_contains(read.detail, "copies 32 bytes from device memory to host memory");
  assert_int_equal(sync.kind, CGRT_FINDING_SYNC);
  assert_int_equal(sync.broke_capture, 1);
  assert_int_equal(f->lines, 2);
  fx_close(f);
}

static void legacy_stream_reported_when_on(void **state) {
  (void)state;
  struct fx *f = fx_open(F_LEGACY, "", "diagnose = on");
  fx_step(f);
  assert_int_equal(fx_step(f), CGRT_MODE_CAPTURE);
  cgrt_finding g = find(f, CGRT_FINDING_LEGACY_STREAM);
  assert_int_equal(g.broke_capture, 0);
  assert_string_equal(g.call, "host_fn");
  assert_contains(g.detail, "not captured");
  assert_contains(g.detail, "enqueue on ctx->stream");
  /* the legacy stream's work is not in the graph: it ran when that stream was synchronized */
  assert_int_equal(f->rt->dev.drv->stream_sync(&f->rt->dev, CGRT_LEGACY_STREAM), 0);
  fx_close(f);
}

/* Only calls made while capturing are recorded; a clean module has no finding. */
static void clean_capture_has_no_finding(void **state) {
  (void)state;
  struct fx *f = fx_open(F_NONE, "", "diagnose = on");
  for (int i = 0; i < 4; i++)
    fx_step(f);
  assert_int_equal(count(f), 0);
  assert_int_equal(f->lines, 0);
  fx_close(f);
}

/* ---------------------------------------------------------------- the host's pool allocator */

static int hook_begin(void *user, void *stream) {
  (void)stream;
  ((struct fx *)user)->begins++;
  return 0;
}

static int hook_end(void *user, void *stream) {
  (void)stream;
  ((struct fx *)user)->ends++;
  return 0;
}

/* Sets the capture hooks, declaring `pool` (NULL: none) as the host's pool allocator. */
static int declare_pool(struct fx *f, const char *pool) {
  cgrt_capture_hooks h = {.struct_size = sizeof(h),
                          .begin = hook_begin,
                          .end = hook_end,
                          .user = f,
                          .pool_allocator = pool};
  return cgrt_set_capture_hooks_ex(f->rt, &h);
}

/* relaxed lets the allocations be captured; diagnose = on reports those of successful captures */
#define RELAXED "capture_mode = relaxed"

/* Steps to a capture and a replay; the allocations were made (eagerly and while capturing). */
static void capture_and_replay(struct fx *f) {
  assert_int_equal(fx_step(f), CGRT_MODE_WARMUP);
  assert_int_equal(fx_step(f), CGRT_MODE_CAPTURE);
  assert_int_equal(fx_step(f), CGRT_MODE_REPLAY);
  assert_int_equal(f->num_leaked, 2);
}

static void declared_pool_allocations_are_not_findings(void **state) {
  (void)state;
  char dir_path[4096], dotted_path[4096];
  snprintf(dir_path, sizeof(dir_path), "%s/libcgrt-test-pool.so", fixtures());
  snprintf(dotted_path, sizeof(dotted_path), "%s/../lib/./libcgrt-test-pool.so", fixtures());
  /* by file name, among others; by path; by a path that resolves to it */
  const char *declarations[] = {"libc10_cuda.so:libcgrt-test-pool.so", dir_path, dotted_path};
  for (size_t i = 0; i < sizeof(declarations) / sizeof(declarations[0]); i++) {
    struct fx *f = fx_open(F_POOL, RELAXED, "diagnose = on");
    f->rt->log.level = CGRT_LOG_DEBUG;
    char copy[4096];
    snprintf(copy, sizeof(copy), "%s", declarations[i]);
    assert_int_equal(declare_pool(f, copy), 0);
    memset(copy, 0, sizeof(copy)); /* the runtime keeps its own copy */
    capture_and_replay(f);
    if (count(f) != 0)
      fail_msg("declared as \"%s\": %s", declarations[i], get(f, 0).detail);
    assert_int_equal(f->lines, 0);
    cgrt_stats s = {.struct_size = sizeof(s)};
    assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
    assert_int_equal(s.findings, 0);
    assert_int_equal(s.fallbacks, 0);
    /* the hooks bracketed the capture; the allocation is counted in a debug line */
    assert_int_equal(f->begins, 1);
    assert_int_equal(f->ends, 1);
    assert_int_equal(f->pool_lines, 1);
    assert_contains(f->pool_last, "1 allocations or frees by the host's pool allocator");
    assert_contains(f->pool_last, "while capturing layer0.fixture fwd (step 1)");
    fx_close(f);
  }
}

static void undeclared_pool_allocations_are_findings(void **state) {
  (void)state;
  /* no pool declared, another object declared, the declaration removed by the older setter */
  for (int i = 0; i < 3; i++) {
    struct fx *f = fx_open(F_POOL, RELAXED, "diagnose = on");
    if (i == 1)
      assert_int_equal(declare_pool(f, "libc10_cuda.so:/nonexistent/libcgrt-test-pool.so"), 0);
    if (i == 2) {
      assert_int_equal(declare_pool(f, "libcgrt-test-pool.so"), 0);
      assert_int_equal(cgrt_set_capture_hooks(f->rt, hook_begin, hook_end, f), 0);
    }
    capture_and_replay(f);
    assert_int_equal(count(f), 1);
    cgrt_finding g = get(f, 0);
    assert_int_equal(g.kind, CGRT_FINDING_MALLOC);
    assert_int_equal(g.broke_capture, 0);
    assert_string_equal(g.call, "mem_alloc");
    assert_contains(g.caller, "cgrt_test_pool_alloc+0x");
    assert_contains(g.caller, "(libcgrt-test-pool.so)");
    assert_contains(g.detail, "suspicious [malloc]");
    assert_int_equal(f->lines, 1);
    fx_close(f);
  }
}

/* The host's own allocation in its module is reported, a pool declared or not. */
static void host_malloc_reported_with_a_pool_declared(void **state) {
  (void)state;
  struct fx *f = fx_open(F_MALLOC, RELAXED, "diagnose = on");
  assert_int_equal(declare_pool(f, "libcgrt-test-pool.so"), 0);
  capture_and_replay(f);
  cgrt_finding g = find(f, CGRT_FINDING_MALLOC);
  assert_int_equal(g.broke_capture, 0);
  assert_string_equal(g.call, "mem_alloc");
  assert_contains(g.caller, "diag_fixture_module+0x");
  assert_contains(g.detail, "suspicious [malloc]");
  fx_close(f);
}

/* An allocation the capture refused broke it: reported even from the declared pool allocator. */
static void refused_pool_allocation_is_reported(void **state) {
  (void)state;
  struct fx *f = fx_open(F_POOL, "", "");
  assert_int_equal(declare_pool(f, "libcgrt-test-pool.so"), 0);
  assert_int_equal(fx_step(f), CGRT_MODE_WARMUP);
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER); /* capture failed, ran eagerly */
  cgrt_finding g = find(f, CGRT_FINDING_MALLOC);
  assert_int_equal(g.broke_capture, 1);
  assert_contains(g.caller, "cgrt_test_pool_alloc");
  assert_contains(f->fallback, "diagnose: the first call refused was mem_alloc");
  fx_close(f);
}

static void capture_hooks_ex_checks_arguments(void **state) {
  (void)state;
  struct fx *f = fx_open(F_NONE, "", "");
  assert_int_equal(cgrt_set_capture_hooks_ex(NULL, NULL), CGRT_E_INVAL);
  assert_int_equal(cgrt_set_capture_hooks_ex(f->rt, NULL), CGRT_E_INVAL);
  cgrt_capture_hooks h = {.begin = hook_begin, .end = hook_end, .user = f};
  assert_int_equal(cgrt_set_capture_hooks_ex(f->rt, &h), CGRT_E_INVAL);
  assert_contains(cgrt_last_error(f->rt), "struct_size");
  /* a struct of an older header, without pool_allocator, still sets the hooks */
  h.struct_size = offsetof(cgrt_capture_hooks, pool_allocator);
  assert_int_equal(cgrt_set_capture_hooks_ex(f->rt, &h), 0);
  fx_step(f);
  assert_int_equal(fx_step(f), CGRT_MODE_CAPTURE);
  assert_int_equal(f->begins, 1);
  assert_int_equal(f->ends, 1);
  fx_close(f);
}

/* ---------------------------------------------------------------- switches and the list */

static void environment_overrides_the_key(void **state) {
  (void)state;
  setenv("CGRT_DIAGNOSE", "1", 1);
  struct fx *f = fx_open(F_PAGEABLE, "", "");
  fx_step(f);
  fx_step(f);
  assert_int_equal(count(f), 1);
  fx_close(f);
  setenv("CGRT_DIAGNOSE", "off", 1);
  f = fx_open(F_SYNC, "", "diagnose = on");
  fx_step(f);
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER); /* the fallback works as ever */
  assert_int_equal(count(f), 0);
  assert_int_equal(f->lines, 0);
  fx_close(f);
  unsetenv("CGRT_DIAGNOSE");
}

static void list_api_checks_arguments(void **state) {
  (void)state;
  struct fx *f = fx_open(F_SYNC, "", "");
  fx_step(f);
  fx_step(f);
  assert_int_equal(count(f), 1);
  cgrt_finding g = {.struct_size = sizeof(g)};
  assert_int_equal(cgrt_finding_get(f->rt, 1, &g), CGRT_E_INVAL);
  g.struct_size = 4;
  assert_int_equal(cgrt_finding_get(f->rt, 0, &g), CGRT_E_INVAL);
  assert_int_equal(cgrt_findings_count(NULL, NULL), CGRT_E_INVAL);
  assert_string_equal(cgrt_finding_kind_name(CGRT_FINDING_HOST_READ), "host_read");
  assert_string_equal(cgrt_finding_kind_name((cgrt_finding_kind)42), "?");
  assert_int_equal(cgrt_findings_clear(f->rt), 0);
  assert_int_equal(count(f), 0);
  fx_close(f);
}

/* The core's injected synchronization (no module to blame): reported, caller unknown. */
static void injected_sync_has_no_caller(void **state) {
  (void)state;
  struct fx *f = fx_open(F_NONE, "", "");
  fx_step(f);
  f->rt->faults.capture_sync = 1;
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER);
  assert_int_equal(count(f), 1);
  cgrt_finding g = get(f, 0);
  assert_int_equal(g.broke_capture, 1);
  assert_string_equal(g.caller, "");
  fx_close(f);
}

/*
 * Another thread's cudaDeviceSynchronize during a capture (session 52: on a GPU it invalidates
 * every capture of the device, whatever the capture mode; tests/gpu/test_streams.c meets it with
 * two threads). The module calls nothing CUDA refuses: the fallback says the break came from
 * outside the captured work and names the likely call, nothing is a finding, and three such
 * breaks in a row do not give the key up (two breaks by the work itself do): the next capture
 * succeeds and replays.
 */
static void break_from_another_thread_is_named_and_retried(void **state) {
  (void)state;
  struct fx *f = fx_open(F_ELSEWHERE, "", "");
  assert_int_equal(fx_step(f), CGRT_MODE_WARMUP);
  f->elsewhere = 3;
  for (int i = 0; i < 3; i++)
    assert_int_equal(fx_step(f), CGRT_MODE_EAGER); /* the capture broke: ran eagerly */
  assert_int_equal(f->elsewhere, 0);
  assert_int_equal(f->outside, 3);
  assert_non_null(strstr(f->fallback, "module 'layer0.fixture'"));
  assert_non_null(strstr(f->fallback, "cudaDeviceSynchronize on another thread"));
  assert_non_null(strstr(f->fallback, "It is captured again at its next call"));
  assert_int_equal(count(f), 0);
  assert_int_equal(f->given_up, 0);
  assert_int_equal(fx_step(f), CGRT_MODE_CAPTURE);
  assert_int_equal(fx_step(f), CGRT_MODE_REPLAY);
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(f->rt, &st), 0);
  assert_int_equal(st.fallbacks, 3);
  assert_int_equal(f->ran, 6); /* every step's work ran once: eagerly or replayed */
  fx_close(f);
}

/* Breaks from outside every time: borne 16 times in a row (each costs a capture and diagnose's
   second one), then the key runs eagerly for good, with a line that says why. */
static void break_from_another_thread_every_time_gives_up_at_last(void **state) {
  (void)state;
  struct fx *f = fx_open(F_ELSEWHERE, "", "");
  assert_int_equal(fx_step(f), CGRT_MODE_WARMUP);
  f->elsewhere = 100;
  for (int i = 0; i < 16; i++)
    assert_int_equal(fx_step(f), CGRT_MODE_EAGER);
  assert_int_equal(f->outside, 16);
  assert_int_equal(f->given_up, 1);
  /* the fixes, as diagnose's own line names them */
  assert_non_null(strstr(f->gave_up, "broken from outside the captured work 16 times"));
  assert_non_null(strstr(f->gave_up, "cgrt_device_synchronize"));
  assert_non_null(strstr(f->gave_up, "sync_guard = on"));
  assert_int_equal(f->elsewhere, 100 - 16);
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER); /* no capture tried: nothing broken */
  assert_int_equal(f->elsewhere, 100 - 16);
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(f->rt, &st), 0);
  assert_int_equal(st.fallbacks, 16);
  fx_close(f);
}

/* The same count of breaks by the captured work itself (a sync in the module) gives the key up
   after two, as before: the break is the work's, every time. */
static void break_by_the_work_gives_the_key_up(void **state) {
  (void)state;
  struct fx *f = fx_open(F_SYNC, "", "");
  assert_int_equal(fx_step(f), CGRT_MODE_WARMUP);
  for (int i = 0; i < 3; i++)
    assert_int_equal(fx_step(f), CGRT_MODE_EAGER);
  assert_int_equal(f->outside, 0);
  assert_int_equal(f->given_up, 1);
  assert_int_equal(fx_step(f), CGRT_MODE_EAGER);
  fx_close(f);
}

int main(void) {
  unsetenv("CGRT_DIAGNOSE");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sync_is_named_with_its_caller),
      cmocka_unit_test(calls_after_the_break_are_reported),
      cmocka_unit_test(malloc_refused_or_suspicious),
      cmocka_unit_test(pageable_copy_reported_when_on),
      cmocka_unit_test(host_read_and_the_sync_it_needs),
      cmocka_unit_test(legacy_stream_reported_when_on),
      cmocka_unit_test(clean_capture_has_no_finding),
      cmocka_unit_test(declared_pool_allocations_are_not_findings),
      cmocka_unit_test(undeclared_pool_allocations_are_findings),
      cmocka_unit_test(host_malloc_reported_with_a_pool_declared),
      cmocka_unit_test(refused_pool_allocation_is_reported),
      cmocka_unit_test(capture_hooks_ex_checks_arguments),
      cmocka_unit_test(environment_overrides_the_key),
      cmocka_unit_test(list_api_checks_arguments),
      cmocka_unit_test(injected_sync_has_no_caller),
      cmocka_unit_test(break_from_another_thread_is_named_and_retried),
      cmocka_unit_test(break_from_another_thread_every_time_gives_up_at_last),
      cmocka_unit_test(break_by_the_work_gives_the_key_up),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
