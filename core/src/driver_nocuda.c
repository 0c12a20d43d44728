/*
 * driver_nocuda.c - the `cuda` driver of a cgrt built without CUDA: open fails with CGRT_E_NODEV
 * and says how to get a working setup. Nothing else is ever called (the core calls no operation
 * after a failed open); each one fails the same way all the same.
 */
#include "driver.h"

static const char *no_cuda = "no CUDA device: cgrt was built without CUDA support; rebuild with "
                             "the CUDA Toolkit, or set [runtime] driver = host";

static int nocuda_fail(struct cgrt_dev *dev) {
  return cgrt__dev_fail(dev, CGRT_E_NODEV, "%s", no_cuda);
}

static int nocuda_open(struct cgrt_dev *dev) {
  dev->impl = NULL;
  return nocuda_fail(dev);
}

static void nocuda_close(struct cgrt_dev *dev) {
  (void)dev;
}

static int nocuda_handle_out(struct cgrt_dev *dev, void **out) {
  if (out)
    *out = NULL;
  return nocuda_fail(dev);
}

static int nocuda_one_handle(struct cgrt_dev *dev, void *handle) {
  (void)handle;
  return nocuda_fail(dev);
}

static void nocuda_release(struct cgrt_dev *dev, void *handle) {
  (void)dev;
  (void)handle;
}

static int nocuda_capture_end(struct cgrt_dev *dev, void *stream, void **graph) {
  (void)stream;
  return nocuda_handle_out(dev, graph);
}

static int nocuda_capture_status(struct cgrt_dev *dev, void *stream, int *active) {
  (void)stream;
  if (active)
    *active = 0;
  return nocuda_fail(dev);
}

static int nocuda_graph_instantiate(struct cgrt_dev *dev, void *graph, void **exec) {
  (void)graph;
  return nocuda_handle_out(dev, exec);
}

static int nocuda_graph_node_count(struct cgrt_dev *dev, void *graph, size_t *count) {
  (void)graph;
  if (count)
    *count = 0;
  return nocuda_fail(dev);
}

static int nocuda_two_handles(struct cgrt_dev *dev, void *a, void *b) {
  (void)a;
  (void)b;
  return nocuda_fail(dev);
}

static int nocuda_host_fn(struct cgrt_dev *dev, void *stream, void (*fn)(void *), void *arg) {
  (void)stream;
  (void)fn;
  (void)arg;
  return nocuda_fail(dev);
}

static int nocuda_memcpy_async(struct cgrt_dev *dev, void *dst, const void *src, size_t bytes,
                               void *stream) {
  (void)dst;
  (void)src;
  (void)bytes;
  (void)stream;
  return nocuda_fail(dev);
}

static int nocuda_mem_alloc(struct cgrt_dev *dev, void **ptr, size_t bytes) {
  (void)bytes;
  return nocuda_handle_out(dev, ptr);
}

static int nocuda_mem_info(struct cgrt_dev *dev, size_t *free_bytes, size_t *total_bytes) {
  if (free_bytes)
    *free_bytes = 0;
  if (total_bytes)
    *total_bytes = 0;
  return nocuda_fail(dev);
}

static int nocuda_graph_mem(struct cgrt_dev *dev, uint64_t *used, uint64_t *reserved) {
  if (used)
    *used = 0;
  if (reserved)
    *reserved = 0;
  return nocuda_fail(dev);
}

static int nocuda_alloc_async(struct cgrt_dev *dev, void *stream, size_t bytes, void **ptr) {
  (void)stream;
  (void)bytes;
  return nocuda_handle_out(dev, ptr);
}

static int nocuda_alloc_bytes(struct cgrt_dev *dev, void *graph, uint64_t *bytes) {
  (void)graph;
  if (bytes)
    *bytes = 0;
  return nocuda_fail(dev);
}

const struct cgrt_driver cgrt__driver_cuda = {
    .name = "cuda",
    .open = nocuda_open,
    .close = nocuda_close,
    .stream_create = nocuda_handle_out,
    .stream_destroy = nocuda_release,
    .stream_sync = nocuda_one_handle,
    .capture_begin = nocuda_one_handle,
    .capture_end = nocuda_capture_end,
    .capture_status = nocuda_capture_status,
    .graph_instantiate = nocuda_graph_instantiate,
    .graph_destroy = nocuda_release,
    .graph_node_count = nocuda_graph_node_count,
    .exec_update = nocuda_two_handles,
    .exec_upload = nocuda_two_handles,
    .exec_launch = nocuda_two_handles,
    .exec_destroy = nocuda_release,
    .host_fn = nocuda_host_fn,
    .memcpy_async = nocuda_memcpy_async,
    .event_create = nocuda_handle_out,
    .event_record = nocuda_two_handles,
    .event_query = nocuda_one_handle,
    .event_sync = nocuda_one_handle,
    .event_destroy = nocuda_release,
    .mem_alloc = nocuda_mem_alloc,
    .host_alloc = nocuda_mem_alloc,
    .mem_free = nocuda_release,
    .host_free = nocuda_release,
    .mem_info = nocuda_mem_info,
    .graph_mem = nocuda_graph_mem,
    .mem_alloc_async = nocuda_alloc_async,
    .mem_free_async = nocuda_two_handles,
    .graph_alloc_bytes = nocuda_alloc_bytes,
    .graph_mem_trim = nocuda_fail,
};
