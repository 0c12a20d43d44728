/*
 * test_driver.c (GPU) - the cuda driver keeps the semantics the host driver models, with real CUDA
 * work: captured host functions and copies replay in order, exec update moves copy addresses and
 * is refused when the topology differs, a synchronizing call invalidates a capture and leaves the
 * stream usable, events report NOTREADY while a stream is held, graphs with stream-ordered
 * allocations report graph memory, and a missing device is named.
 *
 * Plain C (no kernels): the work is host functions, copies, memsets and stream-ordered
 * allocations, enqueued through the driver or, where the driver has no operation, through CUDA.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "driver.h"

#define REPLAYS 20

struct fx {
  struct cgrt_dev dev;
  const struct cgrt_driver *d;
  void *stream;
};

/* The cuda driver object, loaded as a runtime loads it (libcgrt-driver-cuda.so, driver.c). */
static const struct cgrt_driver *cuda_driver(void) {
  const struct cgrt_driver *d = NULL;
  char err[1024];
  if (cgrt__driver_get(CGRT_DRIVER_CUDA, &d, err, sizeof(err)) != 0)
    fail_msg("loading the cuda driver: %s", err);
  return d;
}

static int setup_mode(void **state, cgrt_capture_mode mode) {
  struct fx *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  f->d = cuda_driver();
  f->dev.drv = f->d;
  f->dev.device = 0;
  f->dev.capture_mode = mode;
  int rc = f->d->open(&f->dev);
  if (rc)
    fail_msg("open: %s", f->dev.err);
  assert_int_equal(f->d->stream_create(&f->dev, &f->stream), 0);
  *state = f;
  return 0;
}

static int setup(void **state) {
  return setup_mode(state, CGRT_CAPTURE_THREAD_LOCAL);
}

static int setup_global(void **state) {
  return setup_mode(state, CGRT_CAPTURE_GLOBAL);
}

static int setup_relaxed(void **state) {
  return setup_mode(state, CGRT_CAPTURE_RELAXED);
}

static int teardown(void **state) {
  struct fx *f = *state;
  f->d->stream_destroy(&f->dev, f->stream);
  f->d->close(&f->dev);
  /* Every test leaves CUDA without a pending error. */
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  free(f);
  return 0;
}

/* Asserts a driver call succeeded, printing dev->err if not. */
#define OK(f, call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0)                                                                                  \
      fail_msg("%s -> %d: %s", #call, rc_, (f)->dev.err);                                          \
  } while (0)

static void *pinned(size_t bytes) {
  void *p = NULL;
  assert_int_equal(cudaMallocHost(&p, bytes), cudaSuccess);
  memset(p, 0, bytes);
  return p;
}

static void *instantiate(struct fx *f, void *graph) {
  void *exec = NULL;
  OK(f, f->d->graph_instantiate(&f->dev, graph, &exec));
  assert_non_null(exec);
  return exec;
}

static int capturing(struct fx *f, void *stream) {
  int active = -1;
  OK(f, f->d->capture_status(&f->dev, stream, &active));
  return active;
}

/* Ends a capture that must have been invalidated; the stream is not capturing afterwards. */
static void end_invalidated(struct fx *f) {
  void *graph = (void *)1;
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), CGRT_E_CAPTURE);
  assert_null(graph);
  assert_non_null(strstr(f->dev.err, "cudaStreamEndCapture"));
  assert_int_equal(capturing(f, f->stream), 0);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
}

static void count(void *arg) {
  (*(int *)arg)++;
}

/* Captures `n` host functions that count into *counter. */
static void *capture_counts(struct fx *f, int n, int *counter) {
  void *graph = NULL;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  for (int i = 0; i < n; i++)
    OK(f, f->d->host_fn(&f->dev, f->stream, count, counter));
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  return graph;
}

/* A graph of one copy of `bytes` from src to dst. */
static void *copy_graph(struct fx *f, void *dst, const void *src, size_t bytes) {
  void *graph = NULL;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  OK(f, f->d->memcpy_async(&f->dev, dst, src, bytes, f->stream));
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  return graph;
}

/* ---------------------------------------------------------------- capture and replay */

/* Each replay: produce a value on the host, copy it to the device and back, record what came. */
struct relay {
  int *h_src, *h_dst; /* pinned */
  int produced;
  int seen[REPLAYS];
};

static void produce(void *arg) {
  struct relay *r = arg;
  r->produced++;
  *r->h_src = r->produced * 10;
}

static void consume(void *arg) {
  struct relay *r = arg;
  if (r->produced >= 1 && r->produced <= REPLAYS)
    r->seen[r->produced - 1] = *r->h_dst;
}

static void test_capture_replays_host_functions_and_copies(void **state) {
  struct fx *f = *state;
  struct relay r = {.h_src = pinned(sizeof(int)), .h_dst = pinned(sizeof(int))};
  void *d_buf = NULL, *graph = NULL;
  size_t nodes = 0;
  OK(f, f->d->mem_alloc(&f->dev, &d_buf, sizeof(int)));
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(capturing(f, f->stream), 1);
  OK(f, f->d->host_fn(&f->dev, f->stream, produce, &r));
  OK(f, f->d->memcpy_async(&f->dev, d_buf, r.h_src, sizeof(int), f->stream));
  OK(f, f->d->memcpy_async(&f->dev, r.h_dst, d_buf, sizeof(int), f->stream));
  OK(f, f->d->host_fn(&f->dev, f->stream, consume, &r));
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  assert_int_equal(capturing(f, f->stream), 0);
  OK(f, f->d->graph_node_count(&f->dev, graph, &nodes));
  assert_int_equal(nodes, 4);
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  assert_int_equal(r.produced, 0); /* recorded, not run */

  void *exec = instantiate(f, graph);
  OK(f, f->d->exec_upload(&f->dev, exec, f->stream));
  for (int i = 0; i < REPLAYS; i++)
    OK(f, f->d->exec_launch(&f->dev, exec, f->stream));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  assert_int_equal(r.produced, REPLAYS);
  for (int i = 0; i < REPLAYS; i++)
    assert_int_equal(r.seen[i], (i + 1) * 10);

  f->d->exec_destroy(&f->dev, exec);
  f->d->graph_destroy(&f->dev, graph);
  f->d->mem_free(&f->dev, d_buf);
  cudaFreeHost(r.h_src);
  cudaFreeHost(r.h_dst);
}

static void test_instantiate_twice_gives_independent_execs(void **state) {
  struct fx *f = *state;
  int a = 0, b = 0;
  void *ga = capture_counts(f, 1, &a), *gb = capture_counts(f, 1, &b);
  void *x1 = instantiate(f, ga), *x2 = instantiate(f, ga);
  f->d->graph_destroy(&f->dev, ga); /* the executables outlive their graph */
  OK(f, f->d->exec_update(&f->dev, x1, gb));
  OK(f, f->d->exec_launch(&f->dev, x1, f->stream));
  OK(f, f->d->exec_launch(&f->dev, x2, f->stream));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  assert_int_equal(a, 1);
  assert_int_equal(b, 1);
  f->d->graph_destroy(&f->dev, gb);
  f->d->exec_destroy(&f->dev, x1);
  f->d->exec_destroy(&f->dev, x2);
}

/* ---------------------------------------------------------------- exec update */

static void test_update_moves_copy_addresses(void **state) {
  struct fx *f = *state;
  const size_t bytes = 4096;
  void *d_a = NULL, *d_b = NULL;
  unsigned char *h_a = pinned(bytes), *h_b = pinned(bytes), *want = malloc(bytes);
  OK(f, f->d->mem_alloc(&f->dev, &d_a, bytes));
  OK(f, f->d->mem_alloc(&f->dev, &d_b, bytes));
  assert_int_equal(cudaMemset(d_a, 0x11, bytes), cudaSuccess);
  assert_int_equal(cudaMemset(d_b, 0x22, bytes), cudaSuccess);
  /* cudaMemset is asynchronous on the legacy stream, which our non-blocking stream ignores. */
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);

  void *g1 = copy_graph(f, h_a, d_a, bytes), *g2 = copy_graph(f, h_b, d_b, bytes);
  void *exec = instantiate(f, g1);
  OK(f, f->d->exec_launch(&f->dev, exec, f->stream));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  memset(want, 0x11, bytes);
  assert_memory_equal(h_a, want, bytes);

  OK(f, f->d->exec_update(&f->dev, exec, g2));
  memset(h_a, 0, bytes);
  OK(f, f->d->exec_launch(&f->dev, exec, f->stream));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  memset(want, 0x22, bytes);
  assert_memory_equal(h_b, want, bytes);
  memset(want, 0, bytes);
  assert_memory_equal(h_a, want, bytes); /* the old destination is no longer written */

  f->d->exec_destroy(&f->dev, exec);
  f->d->graph_destroy(&f->dev, g1);
  f->d->graph_destroy(&f->dev, g2);
  f->d->mem_free(&f->dev, d_a);
  f->d->mem_free(&f->dev, d_b);
  cudaFreeHost(h_a);
  cudaFreeHost(h_b);
  free(want);
}

static void test_update_refused_when_topology_differs(void **state) {
  struct fx *f = *state;
  int old = 0, new = 0;
  void *g2 = capture_counts(f, 2, &old), *g3 = capture_counts(f, 3, &new);
  void *exec = instantiate(f, g2);
  assert_int_equal(f->d->exec_update(&f->dev, exec, g3), CGRT_E_UPDATE);
  assert_non_null(strstr(f->dev.err, "cudaGraphExecUpdate refused"));
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  /* The executable is unchanged and still works. */
  OK(f, f->d->exec_launch(&f->dev, exec, f->stream));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  assert_int_equal(old, 2);
  assert_int_equal(new, 0);
  f->d->exec_destroy(&f->dev, exec);
  f->d->graph_destroy(&f->dev, g2);
  f->d->graph_destroy(&f->dev, g3);
}

/* ---------------------------------------------------------------- capture rules */

static void test_sync_inside_capture_invalidates_it(void **state) {
  struct fx *f = *state;
  int n = 0;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  OK(f, f->d->host_fn(&f->dev, f->stream, count, &n));
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), CGRT_E_CAPTURE);
  end_invalidated(f);
  /* The stream works normally again; the captured function never ran. */
  OK(f, f->d->host_fn(&f->dev, f->stream, count, &n));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  assert_int_equal(n, 1);
}

static void test_nested_capture_begin_refused(void **state) {
  struct fx *f = *state;
  int n = 0;
  void *graph = NULL;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), CGRT_E_CAPTURE);
  OK(f, f->d->host_fn(&f->dev, f->stream, count, &n)); /* the first capture goes on */
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  assert_non_null(graph);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_thread_local_mode_refuses_mem_alloc_in_capture(void **state) {
  struct fx *f = *state;
  void *ptr = (void *)1;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(f->d->mem_alloc(&f->dev, &ptr, 1 << 20), CGRT_E_CAPTURE);
  assert_null(ptr);
  end_invalidated(f);
}

static void test_relaxed_mode_allows_mem_alloc_in_capture(void **state) {
  struct fx *f = *state;
  void *ptr = NULL, *graph = NULL;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  OK(f, f->d->mem_alloc(&f->dev, &ptr, 1 << 20));
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  f->d->mem_free(&f->dev, ptr);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_global_mode_sync_of_other_stream_invalidates(void **state) {
  struct fx *f = *state;
  void *other = NULL;
  int n = 0;
  OK(f, f->d->stream_create(&f->dev, &other));
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  OK(f, f->d->host_fn(&f->dev, f->stream, count, &n));
  assert_int_equal(f->d->stream_sync(&f->dev, other), CGRT_E_CAPTURE);
  end_invalidated(f);
  OK(f, f->d->stream_sync(&f->dev, other));
  f->d->stream_destroy(&f->dev, other);
}

static void test_thread_local_mode_sync_of_other_stream_invalidates(void **state) {
  struct fx *f = *state;
  void *other = NULL;
  OK(f, f->d->stream_create(&f->dev, &other));
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(f->d->stream_sync(&f->dev, other), CGRT_E_CAPTURE);
  end_invalidated(f);
  f->d->stream_destroy(&f->dev, other);
}

static void test_relaxed_mode_allows_sync_of_other_stream(void **state) {
  struct fx *f = *state;
  void *other = NULL, *graph = NULL;
  int n = 0;
  OK(f, f->d->stream_create(&f->dev, &other));
  OK(f, f->d->host_fn(&f->dev, other, count, &n));
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  OK(f, f->d->stream_sync(&f->dev, other));
  assert_int_equal(n, 1);
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  f->d->graph_destroy(&f->dev, graph);
  f->d->stream_destroy(&f->dev, other);
}

static void test_async_work_on_other_stream_allowed_in_capture(void **state) {
  struct fx *f = *state;
  void *other = NULL, *graph = NULL, *ev = NULL;
  int n = 0, *h = pinned(sizeof(int));
  void *d = NULL;
  OK(f, f->d->mem_alloc(&f->dev, &d, sizeof(int)));
  assert_int_equal(cudaMemset(d, 0x7f, sizeof(int)), cudaSuccess);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  OK(f, f->d->stream_create(&f->dev, &other));
  OK(f, f->d->event_create(&f->dev, &ev));
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  OK(f, f->d->host_fn(&f->dev, f->stream, count, &n));
  OK(f, f->d->host_fn(&f->dev, other, count, &n));
  OK(f, f->d->memcpy_async(&f->dev, h, d, sizeof(int), other));
  OK(f, f->d->event_record(&f->dev, ev, other));
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  OK(f, f->d->stream_sync(&f->dev, other));
  assert_int_equal(n, 1); /* the other stream's function ran, the captured one did not */
  assert_int_equal(*h, 0x7f7f7f7f);
  OK(f, f->d->event_query(&f->dev, ev));
  f->d->graph_destroy(&f->dev, graph);
  f->d->event_destroy(&f->dev, ev);
  f->d->stream_destroy(&f->dev, other);
  f->d->mem_free(&f->dev, d);
  cudaFreeHost(h);
}

static void test_graph_launch_inside_capture_invalidates(void **state) {
  struct fx *f = *state;
  int n = 0;
  void *graph = capture_counts(f, 1, &n);
  void *exec = instantiate(f, graph);
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), CGRT_E_CAPTURE);
  end_invalidated(f);
  OK(f, f->d->exec_launch(&f->dev, exec, f->stream));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  assert_int_equal(n, 1);
  f->d->exec_destroy(&f->dev, exec);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_thread_local_mode_event_query_in_capture_invalidates(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  OK(f, f->d->event_create(&f->dev, &ev));
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_CAPTURE); /* any event */
  end_invalidated(f);
  f->d->event_destroy(&f->dev, ev);
}

static void test_query_of_captured_event_invalidates(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  OK(f, f->d->event_create(&f->dev, &ev));
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  OK(f, f->d->event_record(&f->dev, ev, f->stream));
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_CAPTURE);
  end_invalidated(f);
  f->d->event_destroy(&f->dev, ev);
}

static void test_thread_local_mode_instantiate_in_capture_invalidates(void **state) {
  struct fx *f = *state;
  int n = 0;
  void *graph = capture_counts(f, 1, &n), *exec = (void *)1;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(f->d->graph_instantiate(&f->dev, graph, &exec), CGRT_E_CAPTURE);
  assert_null(exec);
  end_invalidated(f);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_relaxed_mode_allows_instantiate_in_capture(void **state) {
  struct fx *f = *state;
  int n = 0;
  void *graph = capture_counts(f, 1, &n), *other = NULL;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  void *exec = instantiate(f, graph);
  OK(f, f->d->capture_end(&f->dev, f->stream, &other));
  f->d->exec_destroy(&f->dev, exec);
  f->d->graph_destroy(&f->dev, other);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_thread_local_mode_allows_exec_destroy_in_capture(void **state) {
  struct fx *f = *state;
  int n = 0;
  void *graph = capture_counts(f, 1, &n), *other = NULL;
  void *exec = instantiate(f, graph);
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  OK(f, f->d->host_fn(&f->dev, f->stream, count, &n));
  f->d->exec_destroy(&f->dev, exec); /* an eviction while capturing */
  OK(f, f->d->capture_end(&f->dev, f->stream, &other));
  f->d->graph_destroy(&f->dev, other);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_thread_local_mode_mem_free_in_capture_invalidates_and_frees(void **state) {
  struct fx *f = *state;
  void *ptr = NULL;
  struct cudaPointerAttributes attr;
  OK(f, f->d->mem_alloc(&f->dev, &ptr, 1 << 20));
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  f->d->mem_free(&f->dev, ptr);
  end_invalidated(f);
  /* Freed all the same: CUDA no longer knows the pointer. */
  assert_int_equal(cudaPointerGetAttributes(&attr, ptr), cudaSuccess);
  assert_int_equal(attr.type, cudaMemoryTypeUnregistered);
}

static void test_destroying_capturing_stream_ends_capture(void **state) {
  struct fx *f = *state;
  void *other = NULL;
  int n = 0;
  OK(f, f->d->stream_create(&f->dev, &other));
  OK(f, f->d->capture_begin(&f->dev, other));
  OK(f, f->d->host_fn(&f->dev, other, count, &n));
  f->d->stream_destroy(&f->dev, other);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  /* The device still works. */
  OK(f, f->d->host_fn(&f->dev, f->stream, count, &n));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  assert_int_equal(n, 1);
}

/* ---------------------------------------------------------------- events */

/* Holds a stream until opened (or 10 s pass, so that a broken test cannot hang). */
struct gate {
  atomic_int open;
  atomic_int timed_out;
};

static void wait_gate(void *arg) {
  struct gate *g = arg;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!atomic_load(&g->open)) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 10) {
      atomic_store(&g->timed_out, 1);
      return;
    }
  }
}

static void test_event_query_not_ready_while_stream_held(void **state) {
  struct fx *f = *state;
  struct gate g = {0};
  void *ev = NULL;
  OK(f, f->d->event_create(&f->dev, &ev));
  OK(f, f->d->host_fn(&f->dev, f->stream, wait_gate, &g));
  OK(f, f->d->event_record(&f->dev, ev, f->stream));
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_NOTREADY);
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_NOTREADY);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  atomic_store(&g.open, 1);
  OK(f, f->d->event_sync(&f->dev, ev));
  assert_int_equal(f->d->event_query(&f->dev, ev), 0);
  assert_int_equal(atomic_load(&g.timed_out), 0);
  f->d->event_destroy(&f->dev, ev);
}

/* ---------------------------------------------------------------- memory */

static void test_graph_memory_reported_after_launch(void **state) {
  struct fx *f = *state;
  const size_t bytes = 64u << 20;
  cudaStream_t s = f->stream;
  void *p = NULL, *graph = NULL;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(cudaMallocAsync(&p, bytes, s), cudaSuccess);
  assert_int_equal(cudaMemsetAsync(p, 0x5a, bytes, s), cudaSuccess);
  assert_int_equal(cudaFreeAsync(p, s), cudaSuccess);
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  void *exec = instantiate(f, graph);
  for (int i = 0; i < 3; i++) /* relaunchable: instantiated with auto free on launch */
    OK(f, f->d->exec_launch(&f->dev, exec, f->stream));
  OK(f, f->d->stream_sync(&f->dev, f->stream));
  uint64_t used = 0, reserved = 0;
  OK(f, f->d->graph_mem(&f->dev, &used, &reserved));
  assert_true(reserved >= bytes);
  f->d->exec_destroy(&f->dev, exec);
  f->d->graph_destroy(&f->dev, graph);
  assert_int_equal(cudaDeviceGraphMemTrim(f->dev.device), cudaSuccess);
}

static void test_mem_info_reports_device_memory(void **state) {
  struct fx *f = *state;
  size_t free_bytes = 0, total = 0;
  OK(f, f->d->mem_info(&f->dev, &free_bytes, &total));
  assert_true(total > 0);
  assert_true(free_bytes <= total);
}

/* ---------------------------------------------------------------- open */

static void test_open_beyond_device_count_names_the_count(void **state) {
  (void)state;
  int n = 0;
  assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
  struct cgrt_dev dev = {.drv = cuda_driver(), .device = n};
  char want[64];
  snprintf(want, sizeof(want), "sees %d CUDA device", n);
  assert_int_equal(dev.drv->open(&dev), CGRT_E_NODEV);
  assert_non_null(strstr(dev.err, "no CUDA device: "));
  assert_non_null(strstr(dev.err, want));
}

/*
 * Records the shape NCCL's graph mixing support gives a captured collective: the collective (a
 * copy A -> B here) on a side stream forked from the capturing one and joined back, and an event
 * record node added to the capture's graph after it, which no stream joins (a leaf). Then the
 * capturing stream copies B -> C. Returns the graph.
 */
static void *capture_collective_shape(struct fx *f, void *side, void *fork, void *join,
                                      cudaEvent_t serial, void *a, void *b, void *c, size_t bytes) {
  void *graph = NULL;
  cudaStream_t s = f->stream, t = side;
  OK(f, f->d->capture_begin(&f->dev, f->stream));
  assert_int_equal(cudaMemsetAsync(a, 7, bytes, s), cudaSuccess);
  OK(f, f->d->event_record(&f->dev, fork, s));
  assert_int_equal(cudaStreamWaitEvent(t, (cudaEvent_t)fork, 0), cudaSuccess);
  assert_int_equal(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, t), cudaSuccess);
  OK(f, f->d->event_record(&f->dev, join, t));
  assert_int_equal(cudaStreamWaitEvent(s, (cudaEvent_t)join, 0), cudaSuccess);
  enum cudaStreamCaptureStatus st;
  cudaGraph_t g = NULL;
  const cudaGraphNode_t *deps = NULL;
  size_t ndeps = 0;
  assert_int_equal(cudaStreamGetCaptureInfo(t, &st, NULL, &g, &deps, NULL, &ndeps), cudaSuccess);
  assert_int_equal(st, cudaStreamCaptureStatusActive);
  cudaGraphNode_t record = NULL;
  assert_int_equal(cudaGraphAddEventRecordNode(&record, g, deps, ndeps, serial), cudaSuccess);
  assert_int_equal(cudaMemcpyAsync(c, b, bytes, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  OK(f, f->d->capture_end(&f->dev, f->stream, &graph));
  return graph;
}

/* Nodes of a graph that nothing depends on; *records: how many of them are event records. */
static size_t leaves(void *graph, size_t *records) {
  size_t n = 0, count = 0;
  *records = 0;
  assert_int_equal(cudaGraphGetNodes((cudaGraph_t)graph, NULL, &n), cudaSuccess);
  cudaGraphNode_t *nodes = calloc(n, sizeof(*nodes));
  assert_non_null(nodes);
  assert_int_equal(cudaGraphGetNodes((cudaGraph_t)graph, nodes, &n), cudaSuccess);
  for (size_t i = 0; i < n; i++) {
    size_t after = 0;
    cudaError_t e = cudaGraphNodeGetDependentNodes(nodes[i], NULL, NULL, &after);
    assert_true(e == cudaSuccess || e == cudaErrorLossyQuery);
    enum cudaGraphNodeType type;
    assert_int_equal(cudaGraphNodeGetType(nodes[i], &type), cudaSuccess);
    count += after == 0;
    *records += after == 0 && type == cudaGraphNodeTypeEventRecord;
  }
  free(nodes);
  return count;
}

/*
 * CGRT_FOLD_EVENT_LEAVES: unfolded, the graph ends in two leaves, the copy and the event record;
 * folded at instantiation, the record precedes the copy after the collective, so one leaf is
 * left, the replay still copies what it did, and an update with the same shape is accepted.
 */
static void test_fold_event_leaves_joins_the_record_to_the_chain(void **state) {
  struct fx *f = *state;
  const size_t bytes = 256;
  void *side = NULL, *fork = NULL, *join = NULL, *a = NULL, *b = NULL, *c = NULL;
  cudaEvent_t serial = NULL;
  unsigned char *host = pinned(bytes);
  OK(f, f->d->stream_create(&f->dev, &side));
  OK(f, f->d->event_create(&f->dev, &fork));
  OK(f, f->d->event_create(&f->dev, &join));
  assert_int_equal(cudaEventCreateWithFlags(&serial, cudaEventDisableTiming), cudaSuccess);
  OK(f, f->d->mem_alloc(&f->dev, &a, bytes));
  OK(f, f->d->mem_alloc(&f->dev, &b, bytes));
  OK(f, f->d->mem_alloc(&f->dev, &c, bytes));
  for (int fold = 0; fold < 2; fold++) {
    f->dev.fold_event_leaves = fold;
    void *graph = capture_collective_shape(f, side, fork, join, serial, a, b, c, bytes);
    size_t records = 0;
    assert_int_equal(leaves(graph, &records), 2);
    assert_int_equal(records, 1);
    void *exec = instantiate(f, graph);
    assert_int_equal(leaves(graph, &records), fold ? 1 : 2);
    assert_int_equal(records, fold ? 0 : 1);
    f->d->graph_destroy(&f->dev, graph);
    for (int r = 0; r < 2; r++) {
      assert_int_equal(cudaMemset(c, 0, bytes), cudaSuccess);
      assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
      OK(f, f->d->exec_launch(&f->dev, exec, f->stream));
      OK(f, f->d->memcpy_async(&f->dev, host, c, bytes, f->stream));
      OK(f, f->d->stream_sync(&f->dev, f->stream));
      for (size_t i = 0; i < bytes; i++)
        assert_int_equal(host[i], 7);
      /* The second replay runs an update from a new capture of the same shape. */
      graph = capture_collective_shape(f, side, fork, join, serial, a, b, c, bytes);
      OK(f, f->d->exec_update(&f->dev, exec, graph));
      f->d->graph_destroy(&f->dev, graph);
    }
    f->d->exec_destroy(&f->dev, exec);
  }
  f->dev.fold_event_leaves = 0;
  f->d->mem_free(&f->dev, a);
  f->d->mem_free(&f->dev, b);
  f->d->mem_free(&f->dev, c);
  assert_int_equal(cudaEventDestroy(serial), cudaSuccess);
  f->d->event_destroy(&f->dev, fork);
  f->d->event_destroy(&f->dev, join);
  f->d->stream_destroy(&f->dev, side);
  cudaFreeHost(host);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no CUDA device: %s\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      T(test_capture_replays_host_functions_and_copies),
      T(test_instantiate_twice_gives_independent_execs),
      T(test_update_moves_copy_addresses),
      T(test_update_refused_when_topology_differs),
      T(test_sync_inside_capture_invalidates_it),
      T(test_nested_capture_begin_refused),
      T(test_thread_local_mode_refuses_mem_alloc_in_capture),
      cmocka_unit_test_setup_teardown(test_relaxed_mode_allows_mem_alloc_in_capture, setup_relaxed,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_global_mode_sync_of_other_stream_invalidates,
                                      setup_global, teardown),
      T(test_thread_local_mode_sync_of_other_stream_invalidates),
      cmocka_unit_test_setup_teardown(test_relaxed_mode_allows_sync_of_other_stream, setup_relaxed,
                                      teardown),
      T(test_async_work_on_other_stream_allowed_in_capture),
      cmocka_unit_test_setup_teardown(test_graph_launch_inside_capture_invalidates, setup_relaxed,
                                      teardown),
      T(test_thread_local_mode_event_query_in_capture_invalidates),
      cmocka_unit_test_setup_teardown(test_query_of_captured_event_invalidates, setup_relaxed,
                                      teardown),
      T(test_thread_local_mode_instantiate_in_capture_invalidates),
      cmocka_unit_test_setup_teardown(test_relaxed_mode_allows_instantiate_in_capture,
                                      setup_relaxed, teardown),
      T(test_thread_local_mode_allows_exec_destroy_in_capture),
      T(test_thread_local_mode_mem_free_in_capture_invalidates_and_frees),
      T(test_destroying_capturing_stream_ends_capture),
      T(test_event_query_not_ready_while_stream_held),
      T(test_graph_memory_reported_after_launch),
      T(test_fold_event_leaves_joins_the_record_to_the_chain),
      T(test_mem_info_reports_device_memory),
      T(test_open_beyond_device_count_names_the_count),
  };
  return cmocka_run_group_tests_name("gpu_driver", tests, NULL, NULL);
}
