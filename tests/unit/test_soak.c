/*
 * test_soak.c - the soak test (tests/common/soak.h) on the host driver, 10,000 steps like the GPU:
 * device work is a host function on host memory, its parameters kept per (y, x) pair the way a
 * kernel's arguments are kept by the graph that captured them.
 */
#include "common/soak.h"

struct axpy_params {
  float *y;
  const float *x;
  float a;
};

/* One parameter block per (y, x) pair: a captured host node keeps pointing at it. */
static struct axpy_params params[16];
static int num_params;

static void host_axpy(void *arg) {
  struct axpy_params *p = arg;
  p->y[0] += p->a * p->x[0];
}

static int enqueue_axpy(const cgrt_ctx *ctx, float *y, const float *x, float a) {
  struct axpy_params *p = NULL;
  for (int i = 0; i < num_params && !p; i++)
    if (params[i].y == y && params[i].x == x)
      p = &params[i];
  if (!p) {
    assert_true(num_params < 16);
    p = &params[num_params++];
    *p = (struct axpy_params){y, x, a};
  }
  return cgrt_enqueue_host(ctx, host_axpy, p);
}

static float *host_alloc(void) {
  return calloc(1, sizeof(float));
}

static void host_release(float *p) {
  free(p);
}

static void host_set(float *p, float v) {
  *p = v;
}

static float host_get(const float *p) {
  return *p;
}

static const struct soak_ops ops = {"host",   host_alloc, host_release,
                                    host_set, host_get,   enqueue_axpy};

static void soak_host(void **state) {
  (void)state;
  soak_run(&ops, 10000);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(soak_host)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
