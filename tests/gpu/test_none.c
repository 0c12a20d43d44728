/*
 * test_none.c (GPU) - the `none` backend on the cuda driver: modules that launch real kernels run
 * for many steps and give exactly the result of the same kernels launched by hand; host functions
 * enqueued through cgrt run in stream order; the runtime's stream is a real CUDA stream.
 */
#include <sched.h>
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

#define N      (1 << 20)
#define STEPS  1000
#define LAYERS 4

struct layer {
  float *x;
  float *y;
  float a;
};

struct model {
  cgrt_runtime *rt;
  cgrt_module *mods[LAYERS];
  struct layer layers[LAYERS];
  long host_ticks;
};

static int axpy_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  struct layer *l = user;
  return cgrtk_axpy_f32(l->y, l->x, l->a, N, ctx->stream) == 0 ? 0 : -1;
}

static void tick(void *arg) {
  ((struct model *)arg)->host_ticks++;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct model *m = user;
  for (int i = 0; i < LAYERS; i++) {
    cgrt_buffer bufs[] = {{m->layers[i].x, N * sizeof(float), CGRT_IN, "x"},
                          {m->layers[i].y, N * sizeof(float), CGRT_INOUT, "y"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = N, .buffers = bufs, .num_buffers = 2};
    int rc = cgrt_forward(m->rt, m->mods[i], ctx, &a);
    if (rc)
      return rc;
  }
  return cgrt_enqueue_host(ctx, tick, m);
}

/* Layer i: y_i += a_i * y_{i-1} (x of layer 0 is a fixed input); chained, so order matters. */
static void init_layers(struct model *m, float *input) {
  for (int i = 0; i < LAYERS; i++) {
    m->layers[i].x = i == 0 ? input : m->layers[i - 1].y;
    assert_int_equal(cudaMalloc((void **)&m->layers[i].y, N * sizeof(float)), cudaSuccess);
    assert_int_equal(cgrtk_fill_f32(m->layers[i].y, 0.25f * (float)i, N, NULL), 0);
    m->layers[i].a = 0.5f / (float)(i + 1);
  }
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
}

static void free_layers(struct model *m) {
  for (int i = 0; i < LAYERS; i++)
    cudaFree(m->layers[i].y);
}

static void none_matches_hand_launched_kernels(void **state) {
  (void)state;
  float *input = NULL;
  assert_int_equal(cudaMalloc((void **)&input, N * sizeof(float)), cudaSuccess);
  assert_int_equal(cgrtk_fill_f32(input, 1.0f, N, NULL), 0);

  /* Reference: the same kernels launched by hand on a plain stream. */
  struct model ref = {0};
  init_layers(&ref, input);
  cudaStream_t s;
  assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
  for (int step = 0; step < STEPS; step++)
    for (int i = 0; i < LAYERS; i++)
      assert_int_equal(cgrtk_axpy_f32(ref.layers[i].y, ref.layers[i].x, ref.layers[i].a, N, s), 0);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);

  /* Through cgrt, backend none, cuda driver. */
  struct model m = {0};
  init_layers(&m, input);
  assert_int_equal(cgrt_open_string(&m.rt, "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\n"
                                           "device = 0\nlog = warn\n"),
                   0);
  assert_string_equal(cgrt_backend_name(m.rt), "none");
  for (int i = 0; i < LAYERS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.mlp", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .layer = i,
                          .forward = axpy_module,
                          .user = &m.layers[i]};
    assert_int_equal(cgrt_module_register(m.rt, &d, &m.mods[i]), 0);
  }
  for (int step = 0; step < STEPS; step++) {
    cgrt_step_desc d = {
        .struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .body = body, .user = &m};
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    assert_int_equal(cgrt_step(m.rt, &d, &rep), 0);
    assert_int_equal(rep.mode, CGRT_MODE_EAGER);
    assert_int_equal(rep.calls_eager, LAYERS);
  }
  assert_int_equal(cgrt_synchronize(m.rt), 0);
  assert_int_equal(m.host_ticks, STEPS);

  size_t bytes = N * sizeof(float);
  float *got = malloc(bytes), *want = malloc(bytes);
  for (int i = 0; i < LAYERS; i++) {
    assert_int_equal(cudaMemcpy(got, m.layers[i].y, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(want, ref.layers[i].y, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(got, want, bytes);
  }
  /* Spot check against the closed form for layer 0: y = 0 + STEPS * 0.5 * 1. */
  assert_int_equal(cudaMemcpy(got, m.layers[0].y, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_true(got[0] == 0.5f * STEPS && got[N - 1] == 0.5f * STEPS);

  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(m.rt, &st), 0);
  assert_int_equal(st.steps, STEPS);
  assert_int_equal(st.calls_by_mode[CGRT_MODE_EAGER], STEPS * LAYERS);
  assert_int_equal(st.live_graphs, 0);
  free(got);
  free(want);
  assert_int_equal(cgrt_close(m.rt), 0);
  free_layers(&m);
  free_layers(&ref);
  cudaStreamDestroy(s);
  cudaFree(input);
}

static void stream_is_a_cuda_stream(void **state) {
  (void)state;
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open_string(&rt, "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\n"
                                         "log = warn\n"),
                   0);
  cudaStream_t s = (cudaStream_t)cgrt_stream(rt);
  assert_non_null(s);
  assert_int_equal(cudaStreamQuery(s), cudaSuccess);
  cgrt_close(rt);
}

struct bind_log {
  int bound;
};

static void bind_sink(void *user, cgrt_log_level level, const char *msg) {
  (void)level;
  if (strstr(msg, "bind_cpu = auto: bound this thread to cores"))
    ((struct bind_log *)user)->bound = 1;
  printf("log: %s\n", msg);
}

/* The main thread's affinity when the process started: the tests before this one open runtimes
   with bind_cpu = auto on this thread, which bind it to its GPU's share of the near cores, and a
   runtime keeps a binding it finds (the "kept" rule), so this test starts from the process's. */
static cpu_set_t start_affinity;

static void bind_cpu_auto_binds_near_the_gpu(void **state) {
  (void)state;
  struct bind_log bl = {0};
  assert_int_equal(sched_setaffinity(0, sizeof(start_affinity), &start_affinity), 0);
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\n"
                                "bind_cpu = auto\nlog = info\n",
                         .log = bind_sink,
                         .log_user = &bl};
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_open_ex(&rt, &o), 0);
  assert_true(bl.bound);
  cpu_set_t set;
  assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
  assert_true(CPU_COUNT(&set) > 0);
  assert_true(CPU_COUNT(&set) <= CPU_COUNT(&start_affinity));
  cgrt_close(rt);
}

int main(void) {
  if (sched_getaffinity(0, sizeof(start_affinity), &start_affinity) != 0) {
    perror("sched_getaffinity");
    return 1;
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(none_matches_hand_launched_kernels),
      cmocka_unit_test(stream_is_a_cuda_stream),
      cmocka_unit_test(bind_cpu_auto_binds_near_the_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
