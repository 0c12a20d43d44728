/*
 * pool_fixture.h - the pool allocator fixture (tests/fixtures/pool_allocator.c,
 * libcgrt-test-pool.so) for the diagnose tests on both drivers: a shared object whose allocation
 * function a test declares as the host's pool allocator (cgrt_capture_hooks.pool_allocator).
 * Include after cmocka.h and driver.h.
 */
#ifndef CGRT_TESTS_POOL_FIXTURE_H
#define CGRT_TESTS_POOL_FIXTURE_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

/* The fixture's allocation function: the driver's mem_alloc, called from the fixture's object. */
typedef int (*pool_alloc_fn)(struct cgrt_dev *dev, void **ptr, size_t bytes);

/* Where the test fixtures are built ($CGRT_TEST_FIXTURES, set by ctest). */
static inline const char *fixtures(void) {
  const char *dir = getenv("CGRT_TEST_FIXTURES");
  return dir ? dir : "tests/fixtures/lib";
}

/* The fixture, loaded once; its path is "<fixtures>/libcgrt-test-pool.so". */
static inline pool_alloc_fn pool_library_fn(void) {
  static pool_alloc_fn fn;
  if (!fn) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/libcgrt-test-pool.so", fixtures());
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      fail_msg("dlopen %s: %s", path, dlerror());
    fn = (pool_alloc_fn)dlsym(lib, "cgrt_test_pool_alloc");
    if (!fn)
      fail_msg("%s has no cgrt_test_pool_alloc", path);
  }
  return fn;
}

#endif
