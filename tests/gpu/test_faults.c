/*
 * test_faults.c (GPU) - the fault-injection suite (tests/common/faults.h) on the cuda driver,
 * plus the real thing: a module that synchronizes its stream while being captured (CUDA refuses
 * the call and invalidates the capture) falls back to eager, and the stream keeps working.
 */
#include <cuda_runtime_api.h>

#include "cgrt_kernels.h"
#include "common/faults.h"

struct syncing {
  cgrt_runtime *rt;
  cgrt_module *m;
  float *x;
  int calls;
};

static void count(void *arg) {
  ((struct syncing *)arg)->calls++;
}

/* A module with a bug: it synchronizes (legal eagerly, refused inside a capture). */
static int syncing_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct syncing *s = user;
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)ctx->stream);
  if (e != cudaSuccess && ctx->mode != CGRT_MODE_CAPTURE)
    return 1;
  return cgrt_enqueue_host(ctx, count, s);
}

static int syncing_body(const cgrt_ctx *ctx, void *user) {
  struct syncing *s = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  return cgrt_forward(s->rt, s->m, ctx, &a);
}

static void module_synchronizing_inside_capture(void **state) {
  (void)state;
  struct syncing s = {0};
  assert_int_equal(cgrt_open_string(&s.rt, "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n"
                                           "[runtime]\ndriver = cuda\nlog = error\n"),
                   0);
  cgrt_module_desc d = {.struct_size = sizeof(d),
                        .name = "buggy",
                        .kind = CGRT_KIND_MLP,
                        .forward = syncing_module,
                        .user = &s};
  assert_int_equal(cgrt_module_register(s.rt, &d, &s.m), 0);
  int fallbacks = 0;
  for (int i = 0; i < 6; i++) {
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    cgrt_step_desc sd = {
        .struct_size = sizeof(sd), .phase = CGRT_PHASE_EVAL, .body = syncing_body, .user = &s};
    assert_int_equal(cgrt_step(s.rt, &sd, &rep), 0);
    fallbacks += (int)rep.fallbacks;
    assert_int_not_equal(rep.mode, CGRT_MODE_REPLAY); /* never captured */
    enum cudaStreamCaptureStatus st;
    assert_int_equal(cudaStreamIsCapturing((cudaStream_t)cgrt_stream(s.rt), &st), cudaSuccess);
    assert_int_equal(st, cudaStreamCaptureStatusNone);
  }
  assert_int_equal(cgrt_synchronize(s.rt), 0);
  assert_int_equal(s.calls, 6);   /* every step's work ran, eagerly */
  assert_int_equal(fallbacks, 2); /* two attempts, then the key stays eager */
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  cgrt_close(s.rt);
}

/* Out of device memory for the copy policy's private buffers, with a kernel on device memory. */
struct oom {
  cgrt_runtime *rt;
  cgrt_module *m;
  float *x, *y;
};

static int oom_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)user;
  return cgrtk_axpy_f32(args->buffers[1].ptr, args->buffers[0].ptr, 1.0f, 1, ctx->stream) ? 1 : 0;
}

static int oom_body(const cgrt_ctx *ctx, void *user) {
  struct oom *o = user;
  cgrt_buffer b[2] = {{o->x, sizeof(float), CGRT_IN, "x"}, {o->y, sizeof(float), CGRT_INOUT, "y"}};
  cgrt_args a = {.struct_size = sizeof(a), .key = 1, .buffers = b, .num_buffers = 2};
  return cgrt_forward(o->rt, o->m, ctx, &a);
}

static void out_of_memory_falls_back_gpu(void **state) {
  (void)state;
  struct oom o = {0};
  assert_int_equal(cgrt_open_string(&o.rt,
                                    "[cuda_graph]\nimpl = local\nwarmup_steps = 1\n"
                                    "rebind = copy\n[runtime]\ndriver = cuda\nlog = error\n"),
                   0);
  cgrt_module_desc d = {
      .struct_size = sizeof(d), .name = "axpy", .kind = CGRT_KIND_MLP, .forward = oom_module};
  assert_int_equal(cgrt_module_register(o.rt, &d, &o.m), 0);
  float one = 1.0f, zero = 0.0f;
  assert_int_equal(cudaMalloc((void **)&o.x, sizeof(float)), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&o.y, sizeof(float)), cudaSuccess);
  assert_int_equal(cudaMemcpy(o.x, &one, sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(cudaMemcpy(o.y, &zero, sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  cgrt_mode modes[4];
  for (int i = 0; i < 4; i++) {
    if (i == 1)
      o.rt->faults.mem_alloc = 1;
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    cgrt_step_desc sd = {
        .struct_size = sizeof(sd), .phase = CGRT_PHASE_EVAL, .body = oom_body, .user = &o};
    assert_int_equal(cgrt_step(o.rt, &sd, &rep), 0);
    modes[i] = rep.mode;
    if (i == 1)
      assert_int_equal(rep.fallbacks, 1);
  }
  assert_int_equal(modes[1], CGRT_MODE_EAGER);
  assert_int_equal(modes[2], CGRT_MODE_CAPTURE);
  assert_int_equal(modes[3], CGRT_MODE_REPLAY);
  assert_int_equal(cgrt_synchronize(o.rt), 0);
  float y = 0;
  assert_int_equal(cudaMemcpy(&y, o.y, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  assert_true(y == 4.0f); /* every step's work, once each */
  cgrt_close(o.rt);
  cudaFree(o.x);
  cudaFree(o.y);
}

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  faults_driver = "cuda";
  const struct CMUnitTest tests[] = {FAULT_TESTS, cmocka_unit_test(out_of_memory_falls_back_gpu),
                                     cmocka_unit_test(module_synchronizing_inside_capture)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
