/*
 * test_diagnose.c (GPU) - diagnose and verify on the cuda driver.
 *
 * Diagnose: fixture modules that break a capture each way with real CUDA calls (a stream
 * synchronization, a copy from pageable memory, cudaMalloc, a device-to-host cudaMemcpy, a kernel
 * on the legacy default stream); CUPTI records the calls made while capturing and cgrt names each
 * one: the call, its result, the work, the step and the calling function (the fixture is exported
 * so that dladdr can name it). With the default diagnose = failures, a failed capture is captured
 * once more with CUPTI recording. Every step's work still runs and the stream is never left
 * capturing. A host's pool allocator in an object of its own (tests/fixtures/pool_allocator.c,
 * cudaMalloc through the cuda driver, as PyTorch's caching allocator in libc10_cuda.so), declared
 * with cgrt_set_capture_hooks_ex: its allocations are not reported, the host's own still are.
 *
 * Verify: a module whose kernel takes an argument computed on the host that changes every step
 * (the replay keeps the value of the capture): caught on the first replay with verify = first,
 * and with verify_action = eager every output is right, before and after.
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
#include <cuda_runtime_api.h>

#include "cgrt/cgrt.h"
#include "cgrt_kernels.h"
#include "driver.h"  /* struct cgrt_dev: the pool allocator fixture allocates through it */
#include "runtime.h" /* step_index: the step a check expects */
#include "common/pool_fixture.h"

#define N 256

enum fault { F_NONE, F_SYNC, F_PAGEABLE, F_MALLOC, F_HOST_READ, F_LEGACY, F_POOL };

struct fx {
  cgrt_runtime *rt;
  cgrt_module *m;
  enum fault fault;
  float *y;     /* device: the module's output */
  float *other; /* device: scratch for the faults */
  float *host;  /* pageable host memory */
  void *leaked[16];
  int num_leaked;
  int stale; /* verify fixture: fill with step + 1 (else 7) */
  int lines;
  int pool_lines; /* debug lines about the pool allocator's calls, not reported */
};

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  struct fx *f = user;
  if (level == CGRT_LOG_WARN &&
      (strncmp(msg, "diagnose:", 9) == 0 || strncmp(msg, "verify:", 7) == 0))
    f->lines++;
  if (level == CGRT_LOG_DEBUG && strncmp(msg, "diagnose:", 9) == 0 && strstr(msg, "pool allocator"))
    f->pool_lines++;
}

/* The fault, then the real work: y = 7 (or step + 1 for the verify fixture). */
CGRT_API int gpu_fixture_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fx *f = user;
  cudaStream_t s = (cudaStream_t)ctx->stream;
  switch (f->fault) {
  case F_SYNC:
    (void)cudaStreamSynchronize(s);
    break;
  case F_PAGEABLE:
    (void)cudaMemcpyAsync(f->other, f->host, N * sizeof(float), cudaMemcpyHostToDevice, s);
    break;
  case F_MALLOC:
    if (cudaMalloc(&f->leaked[f->num_leaked], 256) == cudaSuccess)
      f->num_leaked++;
    break;
  case F_HOST_READ:
    (void)cudaMemcpy(f->host, f->other, N * sizeof(float), cudaMemcpyDeviceToHost);
    break;
  case F_LEGACY:
    (void)cgrtk_fill_f32(f->other, 1.0f, N, NULL);
    break;
  case F_POOL: {
    pool_alloc_fn pool_alloc = pool_library_fn();
    if (pool_alloc(&f->rt->dev, &f->leaked[f->num_leaked], 256) == 0)
      f->num_leaked++;
    break;
  }
  case F_NONE:
    break;
  }
  (void)cudaGetLastError(); /* a refused call leaves its error: the module goes on, as hosts do */
  float v = f->stale ? (float)(ctx->step + 1) : 7.0f;
  return cgrtk_fill_f32(args->buffers[0].ptr, v, N, ctx->stream) ? 1 : 0;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fx *f = user;
  cgrt_buffer b[1] = {{f->y, N * sizeof(float), CGRT_ACCESS_TYPED(CGRT_OUT, CGRT_F32), "y"}};
  cgrt_args a = {.struct_size = sizeof(a), .key = 1, .buffers = b, .num_buffers = 1};
  return cgrt_forward(f->rt, f->m, ctx, &a);
}

static struct fx *fx_open(enum fault fault, const char *graph, const char *runtime) {
  struct fx *f = calloc(1, sizeof(*f));
  f->fault = fault;
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n%s\n[runtime]\ndriver = cuda\n"
           "log = warn\n%s\n",
           graph, runtime);
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = log_sink, .log_user = f};
  if (cgrt_open_ex(&f->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  cgrt_module_desc d = {.struct_size = sizeof(d),
                        .name = "layer0.fixture",
                        .kind = CGRT_KIND_MLP,
                        .forward = gpu_fixture_module,
                        .user = f};
  assert_int_equal(cgrt_module_register(f->rt, &d, &f->m), 0);
  assert_int_equal(cudaMalloc((void **)&f->y, N * sizeof(float)), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&f->other, N * sizeof(float)), cudaSuccess);
  f->host = calloc(N, sizeof(float));
  return f;
}

static void fx_close(struct fx *f) {
  assert_int_equal(cgrt_close(f->rt), 0);
  for (int i = 0; i < f->num_leaked; i++)
    cudaFree(f->leaked[i]);
  cudaFree(f->y);
  cudaFree(f->other);
  free(f->host);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  free(f);
}

/* One step: returns its status; checks the stream and whether y holds this step's value. */
static int fx_step(struct fx *f, cgrt_step_report *rep, int *correct) {
  uint64_t step = f->rt->graphs.step_index;
  cgrt_step_desc d = {.struct_size = sizeof(d), .phase = CGRT_PHASE_EVAL, .body = body, .user = f};
  int rc = cgrt_step(f->rt, &d, rep);
  enum cudaStreamCaptureStatus st;
  assert_int_equal(cudaStreamIsCapturing((cudaStream_t)cgrt_stream(f->rt), &st), cudaSuccess);
  assert_int_equal(st, cudaStreamCaptureStatusNone);
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  float y[N];
  assert_int_equal(cudaMemcpy(y, f->y, sizeof(y), cudaMemcpyDeviceToHost), cudaSuccess);
  float want = f->stale ? (float)(step + 1) : 7.0f;
  *correct = 1;
  for (int i = 0; i < N; i++)
    if (y[i] != want)
      *correct = 0;
  return rc;
}

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle))
    fail_msg("expected \"%s\" in: %s", needle, haystack);
}

/* The first finding of `kind`, which must exist; prints them all if not. */
static cgrt_finding find(struct fx *f, cgrt_finding_kind kind) {
  size_t n = 0;
  assert_int_equal(cgrt_findings_count(f->rt, &n), 0);
  for (size_t i = 0; i < n; i++) {
    cgrt_finding g = {.struct_size = sizeof(g)};
    assert_int_equal(cgrt_finding_get(f->rt, i, &g), 0);
    if (g.kind == kind)
      return g;
  }
  for (size_t i = 0; i < n; i++) {
    cgrt_finding g = {.struct_size = sizeof(g)};
    cgrt_finding_get(f->rt, i, &g);
    print_message("finding %zu: %s\n", i, g.detail);
  }
  fail_msg("no %s finding among %zu", cgrt_finding_kind_name(kind), n);
  cgrt_finding none = {0};
  return none;
}

/* Runs warm-up and the capture step (and one more); every step's output must be right. */
static void run_steps(struct fx *f, int steps) {
  for (int i = 0; i < steps; i++) {
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    int ok;
    assert_int_equal(fx_step(f, &rep, &ok), 0);
    if (!ok)
      fail_msg("step %d (%s): wrong output", i, cgrt_mode_name(rep.mode));
  }
}

/* ---------------------------------------------------------------- diagnose */

/* The default mode: the failed capture is captured again with CUPTI recording. */
static void sync_found_after_a_failure(void **state) {
  (void)state;
  struct fx *f = fx_open(F_SYNC, "", "");
  run_steps(f, 3);
  cgrt_finding g = find(f, CGRT_FINDING_SYNC);
  assert_int_equal(g.broke_capture, 1);
  assert_string_equal(g.call, "cudaStreamSynchronize");
  assert_contains(g.result_name, "StreamCapture");
  assert_string_equal(g.what, "layer0.fixture fwd");
  assert_int_equal(g.step, 1);
  assert_contains(g.caller, "gpu_fixture_module");
  assert_true(f->lines >= 1);
  fx_close(f);
}

static void malloc_named(void **state) {
  (void)state;
  struct fx *f = fx_open(F_MALLOC, "", "diagnose = on");
  run_steps(f, 3);
  cgrt_finding g = find(f, CGRT_FINDING_MALLOC);
  assert_string_equal(g.call, "cudaMalloc");
  assert_int_equal(g.broke_capture, 1); /* refused in capture_mode thread_local */
  assert_contains(g.caller, "gpu_fixture_module");
  fx_close(f);
}

static void host_read_named(void **state) {
  (void)state;
  struct fx *f = fx_open(F_HOST_READ, "", "diagnose = on");
  run_steps(f, 3);
  cgrt_finding g = find(f, CGRT_FINDING_HOST_READ);
  assert_string_equal(g.call, "cudaMemcpy");
  assert_contains(g.detail, "from device memory to pageable host memory");
  assert_contains(g.caller, "gpu_fixture_module");
  fx_close(f);
}

static void pageable_copy_named(void **state) {
  (void)state;
  struct fx *f = fx_open(F_PAGEABLE, "", "diagnose = on");
  run_steps(f, 3);
  cgrt_finding g = find(f, CGRT_FINDING_PAGEABLE_COPY);
  assert_string_equal(g.call, "cudaMemcpyAsync");
  assert_contains(g.detail, "from pageable host memory");
  assert_contains(g.caller, "gpu_fixture_module");
  fx_close(f);
}

static void legacy_stream_named(void **state) {
  (void)state;
  struct fx *f = fx_open(F_LEGACY, "", "diagnose = on");
  run_steps(f, 3);
  cgrt_finding g = find(f, CGRT_FINDING_LEGACY_STREAM);
  assert_contains(g.call, "LaunchKernel");
  assert_contains(g.detail, "legacy default stream");
  fx_close(f);
}

/* A clean module recorded with diagnose = on: the capture and replays work, no finding. */
static void clean_module_has_no_finding(void **state) {
  (void)state;
  struct fx *f = fx_open(F_NONE, "", "diagnose = on");
  run_steps(f, 4);
  size_t n = 1;
  assert_int_equal(cgrt_findings_count(f->rt, &n), 0);
  assert_int_equal(n, 0);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.fallbacks, 0);
  assert_int_equal(s.calls_by_mode[CGRT_MODE_REPLAY], 2);
  fx_close(f);
}

/* ---------------------------------------------------------------- the host's pool allocator */

static int declare_pool(struct fx *f, const char *pool) {
  cgrt_capture_hooks h = {.struct_size = sizeof(h), .pool_allocator = pool};
  return cgrt_set_capture_hooks_ex(f->rt, &h);
}

/* A pool declared to be other objects does not hide the host's own cudaMalloc. */
static void malloc_reported_with_another_pool_declared(void **state) {
  (void)state;
  struct fx *f = fx_open(F_MALLOC, "capture_mode = relaxed", "diagnose = on");
  assert_int_equal(declare_pool(f, "libc10_cuda.so:libcgrt-test-pool.so"), 0);
  run_steps(f, 3);
  cgrt_finding g = find(f, CGRT_FINDING_MALLOC);
  assert_string_equal(g.call, "cudaMalloc");
  assert_int_equal(g.broke_capture, 0); /* relaxed: captured, suspicious */
  assert_contains(g.detail, "suspicious [malloc]");
  assert_contains(g.caller, "gpu_fixture_module");
  fx_close(f);
}

/* cudaMalloc made by the declared pool allocator's object while capturing: not a finding. */
static void declared_pool_malloc_not_reported(void **state) {
  (void)state;
  for (int declared = 1; declared >= 0; declared--) {
    struct fx *f = fx_open(F_POOL, "capture_mode = relaxed", "diagnose = on");
    f->rt->log.level = CGRT_LOG_DEBUG;
    if (declared)
      assert_int_equal(declare_pool(f, "libcgrt-test-pool.so"), 0);
    run_steps(f, 3);
    assert_int_equal(f->num_leaked, 2); /* warm-up and capture allocated */
    size_t n = 99;
    assert_int_equal(cgrt_findings_count(f->rt, &n), 0);
    if (declared) {
      if (n != 0) {
        cgrt_finding g = {.struct_size = sizeof(g)};
        assert_int_equal(cgrt_finding_get(f->rt, 0, &g), 0);
        fail_msg("%zu findings with the pool allocator declared, the first: %s", n, g.detail);
      }
      assert_int_equal(f->pool_lines, 1);
    } else {
      cgrt_finding g = find(f, CGRT_FINDING_MALLOC);
      assert_string_equal(g.call, "cudaMalloc");
      assert_int_equal(g.broke_capture, 0);
      assert_contains(g.caller, "cgrt_test_pool_alloc");
      assert_contains(g.caller, "libcgrt-test-pool.so");
      assert_int_equal(f->pool_lines, 0);
    }
    fx_close(f);
  }
}

/* ---------------------------------------------------------------- verify */

static void stale_argument_unnoticed_without_verify(void **state) {
  (void)state;
  struct fx *f = fx_open(F_NONE, "", "");
  f->stale = 1;
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int ok;
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_CAPTURE);
  assert_true(ok);
  assert_int_equal(fx_step(f, &rep, &ok), 0);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  assert_false(ok); /* the kernel argument of the capture */
  fx_close(f);
}

static void stale_argument_caught_and_run_eagerly(void **state) {
  (void)state;
  struct fx *f = fx_open(F_NONE, "verify = first\nverify_action = eager", "");
  f->stale = 1;
  cgrt_mode modes[6];
  for (int i = 0; i < 6; i++) {
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    int ok;
    assert_int_equal(fx_step(f, &rep, &ok), 0);
    modes[i] = rep.mode;
    if (!ok)
      fail_msg("step %d (%s): wrong output", i, cgrt_mode_name(rep.mode));
  }
  assert_int_equal(modes[2], CGRT_MODE_REPLAY);
  for (int i = 3; i < 6; i++)
    assert_int_equal(modes[i], CGRT_MODE_EAGER);
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.verifications, 1);
  assert_int_equal(s.verify_mismatches, 1);
  assert_int_equal(f->lines, 1);
  fx_close(f);
}

static void correct_graph_passes_every_n(void **state) {
  (void)state;
  struct fx *f = fx_open(F_NONE, "verify = every:4", "");
  run_steps(f, 12); /* warm-up, capture, 10 replays: 1, 5, 9 checked */
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  assert_int_equal(s.verifications, 3);
  assert_int_equal(s.verify_mismatches, 0);
  assert_int_equal(s.calls_by_mode[CGRT_MODE_REPLAY], 10);
  fx_close(f);
}

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  unsetenv("CGRT_DIAGNOSE");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sync_found_after_a_failure),
      cmocka_unit_test(malloc_named),
      cmocka_unit_test(host_read_named),
      cmocka_unit_test(pageable_copy_named),
      cmocka_unit_test(legacy_stream_named),
      cmocka_unit_test(clean_module_has_no_finding),
      cmocka_unit_test(malloc_reported_with_another_pool_declared),
      cmocka_unit_test(declared_pool_malloc_not_reported),
      cmocka_unit_test(stale_argument_unnoticed_without_verify),
      cmocka_unit_test(stale_argument_caught_and_run_eagerly),
      cmocka_unit_test(correct_graph_passes_every_n),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
