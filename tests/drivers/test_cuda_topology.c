/*
 * test_cuda_topology.c - the cuda driver's cores_near with bind (drivers/cuda/topology.c): a
 * thread whose affinity was narrowed before cgrt opened (an operator's taskset, a host's own
 * pinning) keeps it, told why; a thread free on every core is bound to the cores it is told, near
 * the GPU (its share of them where other GPUs are near them too: test_core_share.c; that part
 * needs a GPU and skips without one). Label unit: the first part needs no GPU.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>
#include <hwloc.h>

#include "cuda_driver.h"

static cpu_set_t saved;

static int save_affinity(void **state) {
  (void)state;
  return pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved);
}

static int restore_affinity(void **state) {
  (void)state;
  return pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
}

static void narrowed_affinity_is_kept(void **state) {
  (void)state;
  if (CPU_COUNT(&saved) < 2)
    skip(); /* one core: nothing narrower than the machine to keep */
  int cpu = -1;
  for (int i = CPU_SETSIZE - 1; i >= 0 && cpu < 0; i--)
    if (CPU_ISSET(i, &saved))
      cpu = i; /* the last allowed core: rarely the one a GPU's node lists first */
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);

  char cores[256] = "", err[512] = "", want[64];
  int rc = cgrt__cuda_cores_near(0, 1, cores, sizeof(cores), err, sizeof(err));
  print_message("cores_near: rc %d, cores %s: %s\n", rc, cores, err);
  assert_true(rc == CGRT_CORES_KEPT || rc == CGRT_CORES_KEPT_FAR);
  snprintf(want, sizeof(want), "%d", cpu);
  assert_string_equal(cores, want);
  snprintf(want, sizeof(want), "left on cores %d, the affinity", cpu);
  assert_non_null(strstr(err, want));

  cpu_set_t now;
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(now), &now), 0);
  assert_true(CPU_EQUAL(&now, &one)); /* not widened */
}

static void free_thread_is_bound_near_the_gpu(void **state) {
  (void)state;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    print_message("SKIPPED: no CUDA device (binding near a GPU needs one)\n");
    skip();
  }
  char cores[256] = "", err[512] = "";
  int rc = cgrt__cuda_cores_near(0, 1, cores, sizeof(cores), err, sizeof(err));
  print_message("cores_near: rc %d, cores %s %s\n", rc, cores, err);
  assert_int_equal(rc, 0);
  assert_true(cores[0] != '\0');
  cpu_set_t now;
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof(now), &now), 0);
  assert_true(CPU_COUNT(&now) >= 1);
  /* bound to the cores it names: the list, before whose share it is "(...)" */
  char *paren = strstr(cores, " (");
  if (paren)
    *paren = '\0';
  hwloc_bitmap_t named = hwloc_bitmap_alloc();
  assert_non_null(named);
  assert_int_equal(hwloc_bitmap_list_sscanf(named, cores), 0);
  assert_int_equal(hwloc_bitmap_weight(named), CPU_COUNT(&now));
  for (int i = 0; i < CPU_SETSIZE; i++)
    if (CPU_ISSET(i, &now))
      assert_true(hwloc_bitmap_isset(named, (unsigned)i));
  hwloc_bitmap_free(named);
  /* bound again, from the near set: now narrowed, so kept */
  rc = cgrt__cuda_cores_near(0, 1, cores, sizeof(cores), err, sizeof(err));
  if (CPU_COUNT(&now) < CPU_COUNT(&saved))
    assert_int_equal(rc, CGRT_CORES_KEPT);
  else
    assert_int_equal(rc, 0); /* near set = every core: nothing narrowed */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(narrowed_affinity_is_kept, save_affinity, restore_affinity),
      cmocka_unit_test_setup_teardown(free_thread_is_bound_near_the_gpu, save_affinity,
                                      restore_affinity),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
