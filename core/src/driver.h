/*
 * driver.h - the device driver vtable (DESIGN.md section 3). Internal.
 *
 * The core reaches the device only through these operations, so every backend runs on both the
 * `cuda` driver (the real one) and the `host` driver (a CPU executor with the same semantics:
 * streams are FIFO queues of host functions, capture records them into a graph, instantiate
 * freezes it, launch replays it, update swaps parameters when the topology matches).
 *
 * Handles (streams, graphs, executables, events) are opaque `void *` of the driver. Every function
 * returning int gives 0 or a negative CGRT_E_* code and, on error, writes a sentence into
 * dev->err naming the operation and what to do (cgrt__dev_fail()).
 */
#ifndef CGRT_DRIVER_H
#define CGRT_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "cgrt/backend.h"

struct cgrt_driver;

/* One opened driver instance. */
struct cgrt_dev {
  const struct cgrt_driver *drv;
  void *impl;                     /* the driver's private state */
  int device;                     /* device ordinal ([runtime] device) */
  cgrt_capture_mode capture_mode; /* how captures begin ([cuda_graph] capture_mode) */
  /*
   * An experiment, from the environment (CGRT_FOLD_EVENT_LEAVES=1): the cuda driver folds leaf
   * event record nodes into the graph's chain before instantiating or updating (see
   * driver_cuda.c). Only edges are added. The host driver has no such nodes and ignores it.
   */
  int fold_event_leaves;
  char err[1024]; /* the last failure's sentence */
  /*
   * Set by the core (diagnose): the host driver reports here every call its capture rules meet
   * while a capture runs, refused (it invalidated the capture) or suspicious (captured, but not
   * what the host likely meant). NULL: nobody listens.
   */
  void (*note)(struct cgrt_dev *dev, cgrt_finding_kind kind, int refused, const char *op,
               int result, const char *detail);
  void *note_user;
};

/*
 * The legacy default stream, as cudaStreamLegacy spells it: the host driver accepts this handle
 * for work (host_fn, memcpy_async, event_record, stream_sync) and never captures it.
 */
#define CGRT_LEGACY_STREAM ((void *)0x1)

struct cgrt_driver {
  const char *name; /* "cuda" or "host" */

  /*
   * Opens device `dev->device`. The cuda driver fails with CGRT_E_NODEV and a message starting
   * "no CUDA device: " when there is none (or cgrt was built without CUDA).
   */
  int (*open)(struct cgrt_dev *dev);
  void (*close)(struct cgrt_dev *dev);

  int (*stream_create)(struct cgrt_dev *dev, void **stream);
  void (*stream_destroy)(struct cgrt_dev *dev, void *stream);
  /* Waits until all work on the stream has run. Refused (CGRT_E_CAPTURE) on a capturing stream,
     which invalidates the capture, as in CUDA. */
  int (*stream_sync)(struct cgrt_dev *dev, void *stream);

  /* Starts recording the stream's work into a graph instead of running it. */
  int (*capture_begin)(struct cgrt_dev *dev, void *stream);
  /*
   * Stops recording. The stream is not capturing afterwards, whatever happened. *graph is the
   * recorded graph, or NULL with CGRT_E_CAPTURE if the capture was invalidated (a synchronizing
   * call inside it, an error while recording); any sticky error is cleared.
   */
  int (*capture_end)(struct cgrt_dev *dev, void *stream, void **graph);
  int (*capture_status)(struct cgrt_dev *dev, void *stream, int *active);

  int (*graph_instantiate)(struct cgrt_dev *dev, void *graph, void **exec);
  void (*graph_destroy)(struct cgrt_dev *dev, void *graph);
  /* Number of nodes of a graph (plans and tests). */
  int (*graph_node_count)(struct cgrt_dev *dev, void *graph, size_t *count);
  /*
   * Makes exec run `graph`'s parameters without re-instantiating: 0, or CGRT_E_UPDATE (exec
   * unchanged and still usable) if the topology differs.
   */
  int (*exec_update)(struct cgrt_dev *dev, void *exec, void *graph);
  int (*exec_upload)(struct cgrt_dev *dev, void *exec, void *stream);
  int (*exec_launch)(struct cgrt_dev *dev, void *exec, void *stream);
  void (*exec_destroy)(struct cgrt_dev *dev, void *exec);

  /* Enqueues fn(arg) to run after the work before it (cudaLaunchHostFunc). Captured if capturing.
   */
  int (*host_fn)(struct cgrt_dev *dev, void *stream, void (*fn)(void *), void *arg);
  /* Stream-ordered copy of `bytes` between device (or host-pinned) addresses. Captured too. */
  int (*memcpy_async)(struct cgrt_dev *dev, void *dst, const void *src, size_t bytes, void *stream);

  int (*event_create)(struct cgrt_dev *dev, void **event);
  int (*event_record)(struct cgrt_dev *dev, void *event, void *stream);
  /* 0 if the work before the last record has finished, CGRT_E_NOTREADY if not yet. */
  int (*event_query)(struct cgrt_dev *dev, void *event);
  int (*event_sync)(struct cgrt_dev *dev, void *event);
  void (*event_destroy)(struct cgrt_dev *dev, void *event);

  /* Device memory (host memory on the host driver). */
  int (*mem_alloc)(struct cgrt_dev *dev, void **ptr, size_t bytes);
  void (*mem_free)(struct cgrt_dev *dev, void *ptr);
  int (*mem_info)(struct cgrt_dev *dev, size_t *free_bytes, size_t *total_bytes);
  /* Graph memory (stream-ordered allocations owned by graphs), current and reserved bytes. */
  int (*graph_mem)(struct cgrt_dev *dev, uint64_t *used, uint64_t *reserved);

  /*
   * Stream-ordered memory (cudaMallocAsync / cudaFreeAsync). Inside a capture the allocation
   * becomes an allocation node of the graph: its address is fixed at capture, its memory comes
   * from the device's graph memory pool when the executable is uploaded or first launched.
   */
  int (*mem_alloc_async)(struct cgrt_dev *dev, void *stream, size_t bytes, void **ptr);
  int (*mem_free_async)(struct cgrt_dev *dev, void *stream, void *ptr);
  /* Sum of the sizes of a graph's allocation nodes (what it needs if it shares nothing). */
  int (*graph_alloc_bytes)(struct cgrt_dev *dev, void *graph, uint64_t *bytes);
  /* Returns graph-pool memory no executable uses to the device (cudaDeviceGraphMemTrim). */
  int (*graph_mem_trim)(struct cgrt_dev *dev);
  /*
   * Page-locked host memory to stage asynchronous copies from (cudaMallocHost; plain memory on
   * the host driver): a cudaMemcpyAsync from pageable memory waits for the stream first, which
   * would serialize the host with the device at every step.
   */
  int (*host_alloc)(struct cgrt_dev *dev, void **ptr, size_t bytes);
  void (*host_free)(struct cgrt_dev *dev, void *ptr);
};

extern const struct cgrt_driver cgrt__driver_host;
extern const struct cgrt_driver cgrt__driver_cuda;

/* The driver of that kind. */
const struct cgrt_driver *cgrt__driver_for(cgrt_driver_kind kind);

/* Writes the formatted sentence into dev->err and returns code. */
int cgrt__dev_fail(struct cgrt_dev *dev, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Host driver fault injection, for tests of failure handling (no GPU needed). Each flag makes the
 * next matching operation fail once, as the real driver would, then clears itself.
 */
struct cgrt_host_faults {
  int instantiate; /* next graph_instantiate fails with CGRT_E_DEVICE */
  int update;      /* next exec_update refuses with CGRT_E_UPDATE */
  int mem_alloc;   /* next mem_alloc fails with CGRT_E_NOMEM */
  int launch;      /* next exec_launch fails with CGRT_E_DEVICE */
};
/* The fault flags of an opened host-driver instance (NULL for another driver). */
struct cgrt_host_faults *cgrt__host_faults(struct cgrt_dev *dev);
/*
 * Tests only: the host driver's graph pool reserves (and trims to) whole granules of `bytes`
 * from now on, as CUDA's does (32 MiB on CUDA 13); 0, the default, reserves to the byte.
 * CGRT_E_INVAL for another driver.
 */
int cgrt__host_set_pool_granule(struct cgrt_dev *dev, uint64_t bytes);

#endif
