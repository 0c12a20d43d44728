/*
 * test_soak.c (GPU) - the soak test (tests/common/soak.h) on the cuda driver: 10,000 steps, the
 * device work a real kernel (axpy) on device memory.
 */
#include <cuda_runtime_api.h>

#include "cgrt_kernels.h"
#include "common/soak.h"

static int enqueue_axpy(const cgrt_ctx *ctx, float *y, const float *x, float a) {
  return cgrtk_axpy_f32(y, x, a, 1, ctx->stream) == 0 ? 0 : -1;
}

static float *dev_alloc(void) {
  float *p = NULL;
  assert_int_equal(cudaMalloc((void **)&p, sizeof(float)), cudaSuccess);
  return p;
}

static void dev_release(float *p) {
  cudaFree(p);
}

static void dev_set(float *p, float v) {
  assert_int_equal(cudaMemcpy(p, &v, sizeof(v), cudaMemcpyHostToDevice), cudaSuccess);
}

static float dev_get(const float *p) {
  float v = 0;
  assert_int_equal(cudaMemcpy(&v, p, sizeof(v), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

static const struct soak_ops ops = {"cuda", dev_alloc, dev_release, dev_set, dev_get, enqueue_axpy};

static void soak_gpu(void **state) {
  (void)state;
  soak_run(&ops, 10000);
}

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(soak_gpu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
