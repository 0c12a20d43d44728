/*
 * driver.h - the device driver vtable (DESIGN.md section 3). Internal.
 *
 * The core reaches the device only through these operations, so every backend runs on both the
 * `cuda` driver (the real one) and the `host` driver (a CPU executor with the same semantics:
 * streams are FIFO queues of host functions, capture records them into a graph, instantiate
 * freezes it, launch replays it, update swaps parameters when the topology matches).
 *
 * Drivers are loaded like backends (driver.c, loader.h): the host driver is built into the core
 * (drivers/host/), every other one is a shared object, libcgrt-driver-NAME.so (drivers/NAME/),
 * that exports its table as the data symbol `cgrt_driver_v1` (CGRT_DRIVER_EXPORT) and links what
 * it needs (the cuda driver: the CUDA runtime, NCCL, hwloc; CUPTI through dlopen), so that
 * libcgrt itself needs no device library to load. A driver object calls nothing of the core: it
 * is linked with --no-undefined, and what it needs of the core comes through its arguments.
 *
 * This interface is internal: a driver object is built from the same source tree as the core it
 * is loaded into. The table starts with abi_major and struct_size; the core refuses a table of
 * another major, or one smaller than this header's (an object built from an older tree), naming
 * both. Appending a field keeps the major; changing a field, struct cgrt_dev, struct
 * cgrt_diag_rec or the meaning of an operation is a new major (CGRT_DRIVER_ABI_MAJOR).
 *
 * Handles (streams, graphs, executables, events) are opaque `void *` of the driver. Every function
 * returning int gives 0 or a negative CGRT_E_* code and, on error, writes a sentence into
 * dev->err naming the operation and what to do (cgrt__dev_fail()).
 */
#ifndef CGRT_DRIVER_H
#define CGRT_DRIVER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cgrt/backend.h"
#include "cgrt/cgrt.h"

/* The major of the driver table this core speaks. */
#define CGRT_DRIVER_ABI_MAJOR 1
/* The symbol a driver object exports its table as. */
#define CGRT_DRIVER_SYMBOL "cgrt_driver_v1"
/* Marks that table for export (driver objects are built with hidden visibility). */
#define CGRT_DRIVER_EXPORT __attribute__((visibility("default")))

struct cgrt_driver;
struct cgrt_diag_rec;
struct cgrt_diag_call;

/* One opened driver instance. */
struct cgrt_dev {
  const struct cgrt_driver *drv;
  void *impl; /* the driver's private state */
  /*
   * Device ordinal ([runtime] device). -1 (`current`) before open: open resolves it to the device
   * of `host_stream` when the host handed one, else to the device current on the opening thread.
   */
  int device;
  void *host_stream;              /* the host's stream (cgrt_open_options.stream), or NULL */
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

/* cores_near with bind, the thread's own narrower affinity kept: near the GPU, or not. */
#define CGRT_CORES_KEPT     1
#define CGRT_CORES_KEPT_FAR 2

/*
 * Names the caller of a device call being recorded into c (diagnose.c's cgrt__diag_caller, lent
 * to the driver's recorder): the first frame below boundary outside cgrt, its drivers and the
 * device's libraries.
 */
typedef void (*cgrt_diag_caller_fn)(const void *boundary, struct cgrt_diag_call *c);

/*
 * The capture gates (base/gate.h), lent to a driver's sync guard: enter before a device-wide
 * synchronize of `device` (0; CGRT_E_CAPTURE: this thread captures on it, nothing held;
 * CGRT_E_NOTREADY: wait_ms passed first, nothing held), leave after it when enter gave 0.
 */
struct cgrt_sync_gate {
  int (*enter)(int device, long wait_ms, int *waited);
  void (*leave)(int device);
};

/* Receives one line of a driver's description (versions, devices). Lives during the call. */
typedef void (*cgrt_driver_emit_fn)(void *user, const char *line);

struct cgrt_driver {
  uint32_t abi_major;   /* CGRT_DRIVER_ABI_MAJOR */
  uint32_t struct_size; /* sizeof(struct cgrt_driver) as the driver was built */
  const char *name;     /* "cuda" or "host": the [runtime] driver value it answers to */

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
  /*
   * Makes later work on `stream` wait, on the device, for the work before `event`'s last record
   * (cudaStreamWaitEvent): the host does not wait. Either may be the legacy default stream. On a
   * capturing stream, an event recorded in that capture joins its branch; one recorded outside
   * it is refused and invalidates the capture (cgrt waits only outside captures).
   */
  int (*stream_wait)(struct cgrt_dev *dev, void *stream, void *event);

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

  /*
   * Optional operations: NULL when the driver has no such thing (the host driver has none). The
   * core checks before each use and says what is missing.
   */

  /*
   * Communicators (NCCL on the cuda driver). comm_info: the size of a communicator the host
   * handed over and this process's rank in it. comm_split: a new communicator of the ranks of
   * `world` that pass the same color, ordered by key (collective over world: every rank calls
   * it, in the same order). comm_destroy: destroys one comm_split made.
   */
  int (*comm_info)(struct cgrt_dev *dev, void *comm, int *size, int *rank);
  int (*comm_split)(struct cgrt_dev *dev, void *world, int color, int key, void **comm);
  void (*comm_destroy)(struct cgrt_dev *dev, void *comm);

  /*
   * The CPU cores near device `device`, as a list ("0-15,32-47") into cores; with bind, also
   * binds the calling thread there, unless its affinity was narrowed before cgrt opened (taskset,
   * numactl, the host's pinning): that is kept, its cores go into cores, a sentence into err,
   * and CGRT_CORES_KEPT is returned (CGRT_CORES_KEPT_FAR when none of them is near the GPU).
   * Needs no open dev (`cgrt info` asks before any runtime). Errors leave a sentence in err.
   */
  int (*cores_near)(int device, int bind, char *cores, size_t len, char *err, size_t errlen);

  /*
   * Diagnose's recorder of the device API calls a thread makes while it captures (diagnose.h):
   * record_start begins recording this thread's calls into rec, naming callers below
   * *host_frame with `caller`; 0, or an error with the reason in err. record_stop ends it on
   * this thread. record_finish, after the capture: classifies what needs device queries and
   * names results. record_acquire and record_release bracket a runtime's use (the cuda driver
   * detaches CUPTI at each stop already; release retries what a guarded call in flight kept).
   */
  int (*record_start)(struct cgrt_diag_rec *rec, const void *const *host_frame,
                      cgrt_diag_caller_fn caller, char *err, size_t len);
  void (*record_stop)(void);
  void (*record_finish)(struct cgrt_diag_rec *rec);
  void (*record_acquire)(void);
  void (*record_release)(void);

  /*
   * What the driver sees, line by line for `cgrt info`: the versions of what it links (CUDA
   * runtime and driver, NCCL) and each device with the cores near it. Needs no open dev.
   */
  void (*describe)(cgrt_driver_emit_fn emit, void *user);

  /* -- appended for issue 43: device-side timing -- */
  /* An event whose records carry a device timestamp (cudaEventCreate without DisableTiming). */
  int (*event_create_timed)(struct cgrt_dev *dev, void **event);
  /*
   * The device time between the last records of two timed events, in microseconds
   * (cudaEventElapsedTime): CGRT_E_NOTREADY (no sentence) while either has not run yet, so a
   * caller can read it later without waiting; CGRT_E_INVAL for an event never recorded. Never
   * waits for the device.
   */
  int (*event_elapsed)(struct cgrt_dev *dev, void *start, void *end, double *us);

  /* -- appended for issue 42: a cp group's agreement (dynamic_cp's by_time) -- */
  /*
   * Replaces values[0..n) by their maximum over the ranks of `comm` (a communicator comm_split
   * made, or on a driver without comm_split the core's stand-in), through `stream`, and waits for
   * the stream: the values are the group's when it returns. Collective: every rank of comm calls
   * it at the same point with the same n. Never on a capturing stream (the core refuses first).
   * Optional like the other communicator operations: NULL where the driver has none.
   */
  int (*comm_max)(struct cgrt_dev *dev, void *comm, double *values, int n, void *stream);

  /* -- appended for issue 43: a step's host time (host API now_ns) -- */
  /*
   * The host's clock in nanoseconds as the driver models it. Optional: NULL where the host's is
   * the real one (the core then reads its monotonic clock); the host driver gives its simulated
   * host clock, so that a test's host and device times compare.
   */
  uint64_t (*host_clock_ns)(struct cgrt_dev *dev);

  /* -- appended in session 53: cgrt_device_synchronize -- */
  /*
   * Waits until all work of dev's device has run (cudaDeviceSynchronize on it), from any thread,
   * while another may drive dev: it reads dev->device alone and leaves the calling thread's current
   * device as it was; the sentence of a failure goes to err, not dev->err. The core calls it
   * through the capture gate (base/gate.h), never during a capture of its own; a capture the host
   * runs outside cgrt is refused and invalidated, as in CUDA (CGRT_E_CAPTURE). The host driver,
   * which is not thread-safe, runs the device's streams and must be called on the driving thread.
   */
  int (*device_sync)(struct cgrt_dev *dev, char *err, size_t errlen);

  /* -- appended in session 54: [runtime] sync_guard -- */
  /*
   * Optional (NULL: the driver has none; the host driver, which is not thread-safe). While at
   * least one acquire is not released, every device-wide synchronize of the process, on any
   * thread and by any library (cudaDeviceSynchronize, cuCtxSynchronize: CUPTI callbacks on the
   * cuda driver), passes gate->enter for its device with a bound of wait_ms first and
   * gate->leave after; one that runs out of the bound goes ahead as it would have without the
   * guard. 0, or an error with the reason in err (CUPTI missing, or its one subscriber held by
   * another tool). sync_guard_counts: the synchronizes of `device` since the process began
   * guarding that had to wait for a capture, and those that went ahead at the bound.
   */
  int (*sync_guard_acquire)(const struct cgrt_sync_gate *gate, long wait_ms, char *err,
                            size_t errlen);
  void (*sync_guard_release)(void);
  void (*sync_guard_counts)(int device, uint64_t *waited, uint64_t *late);
};

/* The built-in host driver (drivers/host/driver_host.c). */
extern const struct cgrt_driver cgrt__driver_host;

/*
 * The driver of that kind: the host driver, or the object libcgrt-driver-NAME.so found on the
 * driver search path (loader.h) and loaded once per process (it stays loaded: CUDA and CUPTI keep
 * state and callbacks in it). On failure *drv is NULL and err holds the sentence; CGRT_E_NODEV,
 * the sentence starting "no CUDA device: " for the cuda driver (not found, or its libraries
 * missing: this process has no CUDA), or CGRT_E_BACKEND (found and loaded, but not a driver of
 * this core: no table, another major, a short table, a mandatory operation missing).
 */
int cgrt__driver_get(cgrt_driver_kind kind, const struct cgrt_driver **drv, char *err,
                     size_t errlen);

/*
 * The steps of cgrt__driver_get for a driver object named `name` on the directories of
 * `path_list` (NULL: CGRT_DRIVER_PATH and the default ones), without the process's cache: for
 * tests and for `cgrt info`. *dl, *path (malloc'ed) and *drv are set on success; the caller may
 * dlclose(*dl) and free(*path).
 */
int cgrt__driver_object_open(const char *name, const char *path_list, void **dl, char **path,
                             const struct cgrt_driver **drv, char *err, size_t errlen);

/* Checks a driver table found in `path` answers to `name`; CGRT_E_BACKEND with the reason. */
int cgrt__driver_check(const struct cgrt_driver *d, const char *name, const char *path, char *err,
                       size_t errlen);

/* Writes the formatted sentence into dev->err and returns code. Inline: driver objects use it. */
static inline int cgrt__dev_fail(struct cgrt_dev *dev, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int cgrt__dev_fail(struct cgrt_dev *dev, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dev->err, sizeof(dev->err), fmt, ap);
  va_end(ap);
  return code;
}

/*
 * Tests only: the host driver's model of time (see drivers/host/driver_host.c). node_ns (may be
 * NULL) gives the device time of one host function node from its function and argument.
 */
struct cgrt_host_cost {
  uint64_t launch_ns;       /* host time of one eager host function or copy enqueued */
  uint64_t graph_launch_ns; /* host time of one exec_launch */
  uint64_t graph_node_ns;   /* device time a host function node adds inside a launched graph */
  uint64_t (*node_ns)(void *user, void (*fn)(void *), void *arg);
  void *user;
  /* launches a stream queues before the host waits (0: no limit): as CUDA's queue of about a
     thousand, a launch (an eager host function or copy, or a graph launch) onto a stream holding
     this many that have not finished waits until the oldest has */
  uint64_t queue_depth;
  /* the device runs beside the host (non-zero): before an event is queried or its time read, the
     queued work of every stream that starts by the host clock runs, as cgrt__host_run_device
     does, so an event the device would have reached by now on a GPU has run, and one behind a
     backlog has not (by_time's "the device behind", issue 43, session 50) */
  int device_beside;
};

/* Sets (NULL: clears) the host driver's cost model from now on. CGRT_E_INVAL for another driver. */
int cgrt__host_set_cost(struct cgrt_dev *dev, const struct cgrt_host_cost *cost);

/*
 * Tests only: the host driver's device keeps up with its host, as a GPU runs beside a host that
 * does not wait: on every stream, the queued work that starts by the simulated host clock runs now
 * (its events complete, their times as the cost model says), and the host clock stays where it is.
 * Without it queued work runs only when something waits for it. CGRT_E_INVAL for another driver,
 * CGRT_E_STATE from inside a host function.
 */
int cgrt__host_run_device(struct cgrt_dev *dev);

/*
 * Tests only: the other ranks of the host driver's one-rank groups. From now on its comm_max
 * folds in what `peers` gives (NULL: none, the default): called with the communicator and n, it
 * writes what the other ranks of that group would contribute into values[0..n), and the result is
 * the maximum of those and this rank's. CGRT_E_INVAL for another driver.
 */
int cgrt__host_set_peers(struct cgrt_dev *dev,
                         void (*peers)(void *user, const void *comm, double *values, int n),
                         void *user);

/*
 * Tests only: another thread of the process calls cudaDeviceSynchronize now. As CUDA does (an
 * H100, CUDA 13: tools/probe/capture_threads.cu, session 52), every capture of the dev is
 * invalidated, whatever its capture_mode, and the call fails: CGRT_E_CAPTURE if a capture ran,
 * else 0. Nothing is noted for diagnose: the capturing thread made no call. CGRT_E_INVAL for
 * another driver.
 */
int cgrt__host_sync_elsewhere(struct cgrt_dev *dev);

/*
 * Tests only: the host driver's graph pool reserves (and trims to) whole granules of `bytes`
 * from now on, as CUDA's does (32 MiB on CUDA 13); 0, the default, reserves to the byte.
 * CGRT_E_INVAL for another driver.
 */
int cgrt__host_set_pool_granule(struct cgrt_dev *dev, uint64_t bytes);

#endif
