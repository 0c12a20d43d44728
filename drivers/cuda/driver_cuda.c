/*
 * driver_cuda.c - the `cuda` driver: the device operations on the CUDA runtime API (cudart), and
 * the table of libcgrt-driver-cuda.so with the communicators (comm_nccl.c), the cores near a GPU
 * (topology.c), the CUPTI recorder (diagnose_cupti.c) and the description (describe.c).
 *
 * Handles are the CUDA ones cast to void *: cudaStream_t, cudaGraph_t, cudaGraphExec_t,
 * cudaEvent_t. Every CUDA call is checked; a failure writes a sentence naming the call and the
 * CUDA error into dev->err and clears the error CUDA keeps for cudaGetLastError(), so that a
 * non-sticky failure (a refused capture, an update refused) leaves the runtime working. Sticky
 * errors (a kernel fault) cannot be cleared; every later call then fails and says so.
 *
 * Streams are non-blocking (they do not synchronize with the legacy default stream). Captures
 * begin in the dev's capture_mode. Executables are instantiated with
 * cudaGraphInstantiateFlagAutoFreeOnLaunch, so graphs holding stream-ordered allocations
 * (cudaMallocAsync inside the capture) can be relaunched.
 *
 * Calls that act on the current device (creating streams and events, allocating, instantiating)
 * first make dev->device current on the calling thread: the thread driving a runtime need not be
 * the one that opened it. close frees only the driver's own state: no cudaDeviceReset, other users
 * of the device live in the process.
 *
 * CUDA refuses cudaGraphExecDestroy and cudaFree while the calling thread captures in global or
 * thread_local mode, invalidating the capture, and the handle leaks. exec_destroy therefore runs
 * with the thread's capture interaction mode relaxed (cudaThreadExchangeStreamCaptureMode): an
 * executable can be evicted during a capture. mem_free is refused as CUDA refuses it (freeing
 * memory during a capture is a bug to report), then freed in relaxed mode, so nothing leaks.
 */
#include "cuda_driver.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

/* The cgrt code of a CUDA error. */
static int status_of(cudaError_t e) {
  switch (e) {
  case cudaErrorNotReady:
    return CGRT_E_NOTREADY;
  case cudaErrorMemoryAllocation:
    return CGRT_E_NOMEM;
  case cudaErrorInvalidValue:
  case cudaErrorInvalidResourceHandle:
    return CGRT_E_INVAL;
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorInvalidDevice:
    return CGRT_E_NODEV;
  case cudaErrorStreamCaptureUnsupported:
  case cudaErrorStreamCaptureInvalidated:
  case cudaErrorStreamCaptureMerge:
  case cudaErrorStreamCaptureUnmatched:
  case cudaErrorStreamCaptureUnjoined:
  case cudaErrorStreamCaptureIsolation:
  case cudaErrorStreamCaptureImplicit:
  case cudaErrorStreamCaptureWrongThread:
  case cudaErrorCapturedEvent:
    return CGRT_E_CAPTURE;
  case cudaErrorGraphExecUpdateFailure:
    return CGRT_E_UPDATE;
  default:
    return CGRT_E_DEVICE;
  }
}

static const char *capture_advice =
    "a synchronizing or unsafe call inside a captured region (stream or event sync or query, "
    "cudaMalloc, cudaFree, graph instantiate, graph launch into the capturing stream) invalidates "
    "the capture: keep captured work asynchronous, or run it eagerly";

/*
 * Clears CUDA's last error, then reports `call` failing with e. `advice` may be NULL; a capture
 * error without advice gets the capture advice.
 */
static int cuda_fail(struct cgrt_dev *dev, cudaError_t e, const char *call, const char *advice) {
  int code = status_of(e);
  (void)cudaGetLastError();
  if (!advice && code == CGRT_E_CAPTURE)
    advice = capture_advice;
  return cgrt__dev_fail(dev, code, "%s failed: %s (%s)%s%s", call, cudaGetErrorString(e),
                        cudaGetErrorName(e), advice ? "; " : "", advice ? advice : "");
}

/* Makes dev->device current on this thread. */
static int use_device(struct cgrt_dev *dev) {
  cudaError_t e = cudaSetDevice(dev->device);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaSetDevice", NULL);
}

/*
 * [runtime] device = current (-1): the device of the host's stream when it handed one (a process
 * per GPU sets its device and creates its stream before opening cgrt), else the device current on
 * this thread. An index must be the host stream's device, if there is one.
 */
static int resolve_device(struct cgrt_dev *dev) {
  if (dev->host_stream) {
    /* First, and alone: on a capturing stream other calls fail with a capture error (or make the
       legacy stream depend on the capture) instead of saying why. */
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)dev->host_stream, &st);
    if (e != cudaSuccess)
      return cuda_fail(dev, e, "cudaStreamIsCapturing(cgrt_open_options.stream)",
                       "pass a cudaStream_t the host created, or NULL");
    if (st != cudaStreamCaptureStatusNone)
      return cgrt__dev_fail(dev, CGRT_E_INVAL,
                            "cgrt_open_options.stream is capturing: open cgrt before the host's "
                            "own capture begins, or after it ends");
    int of_stream = -1;
    e = cudaStreamGetDevice((cudaStream_t)dev->host_stream, &of_stream);
    if (e != cudaSuccess)
      return cuda_fail(dev, e, "cudaStreamGetDevice(cgrt_open_options.stream)",
                       "pass a cudaStream_t the host created, or NULL");
    if (dev->device >= 0 && dev->device != of_stream)
      return cgrt__dev_fail(dev, CGRT_E_INVAL,
                            "cgrt_open_options.stream is a stream of device %d, but [runtime] "
                            "device = %d: cgrt runs on the host's stream, so set device = current "
                            "(or %d), or hand a stream of device %d",
                            of_stream, dev->device, of_stream, dev->device);
    dev->device = of_stream;
  }
  if (dev->device < 0) {
    int current = 0;
    cudaError_t e = cudaGetDevice(&current);
    if (e != cudaSuccess)
      return cuda_fail(dev, e, "cudaGetDevice ([runtime] device = current)", NULL);
    dev->device = current;
  }
  return 0;
}

static int cuda_open(struct cgrt_dev *dev) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cgrt__dev_fail(dev, CGRT_E_NODEV,
                          "no CUDA device: %s (%s); set [runtime] driver = host to run without a "
                          "GPU",
                          cudaGetErrorString(e), cudaGetErrorName(e));
  }
  if (count == 0)
    return cgrt__dev_fail(dev, CGRT_E_NODEV,
                          "no CUDA device: cudaGetDeviceCount found none; set [runtime] driver = "
                          "host to run without a GPU");
  int rc = resolve_device(dev);
  if (rc != 0)
    return rc;
  if (dev->device >= count)
    return cgrt__dev_fail(dev, CGRT_E_NODEV,
                          "no CUDA device: [runtime] device = %d, but this process sees %d CUDA "
                          "device%s (0 to %d); set [runtime] device, or check CUDA_VISIBLE_DEVICES",
                          dev->device, count, count == 1 ? "" : "s", count - 1);
  e = cudaSetDevice(dev->device);
  if (e != cudaSuccess)
    return cuda_fail(dev, e, "cudaSetDevice",
                     "the device may be in exclusive or prohibited compute mode (nvidia-smi)");
  /* Creates the primary context now, so that a broken setup fails here and not mid-step. */
  e = cudaFree(NULL);
  if (e != cudaSuccess)
    return cuda_fail(dev, e, "cudaFree(0) (creating the CUDA context)", NULL);
  dev->impl = NULL;
  return 0;
}

/* cudaGraphExecDestroy (is_exec) or cudaFree, with this thread's capture interaction relaxed. */
static cudaError_t free_relaxed(int is_exec, void *handle) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaError_t x = cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t e = is_exec ? cudaGraphExecDestroy((cudaGraphExec_t)handle) : cudaFree(handle);
  if (x == cudaSuccess)
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return e;
}

static void cuda_close(struct cgrt_dev *dev) {
  dev->impl = NULL;
}

static int cuda_stream_create(struct cgrt_dev *dev, void **stream) {
  cudaStream_t s = NULL;
  *stream = NULL;
  int rc = use_device(dev);
  if (rc)
    return rc;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess)
    return cuda_fail(dev, e, "cudaStreamCreateWithFlags", NULL);
  *stream = s;
  return 0;
}

/* Ends a capture whatever its state and drops its graph, leaving no error behind. */
static void capture_abandon(cudaStream_t s) {
  for (int tries = 0; tries < 2; tries++) {
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &st) != cudaSuccess || st == cudaStreamCaptureStatusNone)
      break;
    cudaGraph_t g = NULL;
    (void)cudaStreamEndCapture(s, &g);
    if (g)
      (void)cudaGraphDestroy(g);
  }
  (void)cudaGetLastError();
}

static void cuda_stream_destroy(struct cgrt_dev *dev, void *stream) {
  if (!stream)
    return;
  capture_abandon((cudaStream_t)stream);
  cudaError_t e = cudaStreamDestroy((cudaStream_t)stream);
  if (e != cudaSuccess)
    cuda_fail(dev, e, "cudaStreamDestroy", NULL);
}

static int cuda_stream_sync(struct cgrt_dev *dev, void *stream) {
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaStreamSynchronize", NULL);
}

static int cuda_capture_begin(struct cgrt_dev *dev, void *stream) {
  enum cudaStreamCaptureMode mode =
      dev->capture_mode == CGRT_CAPTURE_GLOBAL    ? cudaStreamCaptureModeGlobal
      : dev->capture_mode == CGRT_CAPTURE_RELAXED ? cudaStreamCaptureModeRelaxed
                                                  : cudaStreamCaptureModeThreadLocal;
  cudaError_t e = cudaStreamBeginCapture((cudaStream_t)stream, mode);
  if (e == cudaSuccess)
    return 0;
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  (void)cudaStreamIsCapturing((cudaStream_t)stream, &st);
  cuda_fail(dev, e, "cudaStreamBeginCapture",
            st != cudaStreamCaptureStatusNone
                ? "the stream is already capturing; captures do not nest: end the first"
                : NULL);
  return CGRT_E_CAPTURE;
}

static int cuda_capture_end(struct cgrt_dev *dev, void *stream, void **graph) {
  cudaStream_t s = stream;
  cudaGraph_t g = NULL;
  *graph = NULL;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  if (e == cudaSuccess && g) {
    *graph = g;
    return 0;
  }
  if (g)
    (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
  /* The stream must not stay capturing, whatever happened (it should not, after an end). */
  capture_abandon(s);
  if (e == cudaSuccess)
    return cgrt__dev_fail(dev, CGRT_E_CAPTURE, "cudaStreamEndCapture gave no graph");
  return cgrt__dev_fail(dev, CGRT_E_CAPTURE,
                        "cudaStreamEndCapture failed: %s (%s); the captured work was discarded "
                        "and the stream is no longer capturing; %s",
                        cudaGetErrorString(e), cudaGetErrorName(e), capture_advice);
}

static int cuda_capture_status(struct cgrt_dev *dev, void *stream, int *active) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  *active = 0;
  cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &st);
  if (e != cudaSuccess)
    return cuda_fail(dev, e, "cudaStreamIsCapturing", NULL);
  /* An invalidated capture is still open: it must be ended. */
  *active = st != cudaStreamCaptureStatusNone;
  return 0;
}

/* A graph's nodes, malloc'd (NULL when it has none); errors are the driver's. */
static int graph_nodes(struct cgrt_dev *dev, cudaGraph_t g, cudaGraphNode_t **nodes, size_t *n) {
  *nodes = NULL;
  *n = 0;
  cudaError_t e = cudaGraphGetNodes(g, NULL, n);
  if (e == cudaSuccess && *n > 0) {
    if (!(*nodes = malloc(*n * sizeof(**nodes))))
      return cgrt__dev_fail(dev, CGRT_E_NOMEM, "reading a graph's nodes: out of host memory");
    e = cudaGraphGetNodes(g, *nodes, n);
  }
  if (e == cudaSuccess)
    return 0;
  free(*nodes);
  *nodes = NULL;
  return cuda_fail(dev, e, "cudaGraphGetNodes", NULL);
}

/* The nodes a node depends on (out = 0) or that depend on it (out = 1), with their edge data;
 * *n is their count. The arrays are malloc'd (NULL when *n is 0); the caller frees them. */
static cudaError_t node_edges(cudaGraphNode_t x, int out, cudaGraphNode_t **nodes,
                              cudaGraphEdgeData **data, size_t *n) {
  *nodes = NULL;
  *data = NULL;
  *n = 0;
  cudaError_t e = out ? cudaGraphNodeGetDependentNodes(x, NULL, NULL, n)
                      : cudaGraphNodeGetDependencies(x, NULL, NULL, n);
  if (e == cudaErrorLossyQuery)
    e = cudaSuccess; /* the count is given; the data is read below */
  if (e != cudaSuccess || *n == 0)
    return e;
  *nodes = malloc(*n * sizeof(**nodes));
  *data = malloc(*n * sizeof(**data));
  if (!*nodes || !*data)
    return cudaErrorMemoryAllocation;
  return out ? cudaGraphNodeGetDependentNodes(x, *nodes, *data, n)
             : cudaGraphNodeGetDependencies(x, *nodes, *data, n);
}

/* Gives the event record node x, if nothing depends on it and it follows one node K, a plain
 * edge to each other node that depends on K. */
static cudaError_t fold_leaf(cudaGraph_t g, cudaGraphNode_t x) {
  size_t dependents = 0;
  cudaError_t e = cudaGraphNodeGetDependentNodes(x, NULL, NULL, &dependents);
  if (e == cudaErrorLossyQuery)
    e = cudaSuccess;
  if (e != cudaSuccess || dependents > 0)
    return e;
  cudaGraphNode_t *before = NULL, *after = NULL;
  cudaGraphEdgeData *before_data = NULL, *after_data = NULL;
  size_t nb = 0, na = 0;
  e = node_edges(x, 0, &before, &before_data, &nb);
  if (e == cudaSuccess && nb == 1)
    e = node_edges(before[0], 1, &after, &after_data, &na);
  for (size_t j = 0; e == cudaSuccess && j < na; j++)
    if (after[j] != x)
      e = cudaGraphAddDependencies(g, &x, &after[j], NULL, 1);
  free(before);
  free(before_data);
  free(after);
  free(after_data);
  return e;
}

/*
 * CGRT_FOLD_EVENT_LEAVES=1 (an experiment, to be measured with `cgrt bench --workload cp`): every
 * leaf event record node that follows one node K is folded (fold_leaf). NCCL's graph mixing
 * support (NCCL_GRAPH_MIXING_SUPPORT=1, the default) leaves such a node after every collective
 * it captures, recording the communicator's serial event (added to the capture's graph directly,
 * so no stream joins it), and graph instantiation may map a leaf to a hardware channel of its
 * own. Folded, the record still runs after K and the work after K now also runs after the
 * record: edges are only added, so every node keeps what it waited for, and NCCL's ordering
 * across graphs is unchanged. A dependent that K launched early as a programmatic dependent now
 * waits for K's completion.
 */
static int fold_event_leaves(struct cgrt_dev *dev, cudaGraph_t g) {
  cudaGraphNode_t *nodes = NULL;
  size_t n = 0;
  int rc = graph_nodes(dev, g, &nodes, &n);
  cudaError_t e = cudaSuccess;
  for (size_t i = 0; rc == 0 && e == cudaSuccess && i < n; i++) {
    enum cudaGraphNodeType type;
    e = cudaGraphNodeGetType(nodes[i], &type);
    if (e == cudaSuccess && type == cudaGraphNodeTypeEventRecord)
      e = fold_leaf(g, nodes[i]);
  }
  free(nodes);
  if (rc == 0 && e != cudaSuccess)
    rc = cuda_fail(dev, e, "folding a leaf event record node", NULL);
  return rc;
}

static int cuda_graph_instantiate(struct cgrt_dev *dev, void *graph, void **exec) {
  cudaGraphExec_t x = NULL;
  *exec = NULL;
  int rc = use_device(dev);
  if (rc)
    return rc;
  if (dev->fold_event_leaves && (rc = fold_event_leaves(dev, (cudaGraph_t)graph)) != 0)
    return rc;
  cudaError_t e = cudaGraphInstantiateWithFlags(&x, (cudaGraph_t)graph,
                                                cudaGraphInstantiateFlagAutoFreeOnLaunch);
  if (e != cudaSuccess) {
    rc = cuda_fail(dev, e, "cudaGraphInstantiateWithFlags",
                   e == cudaErrorStreamCaptureUnsupported
                       ? "instantiating is not permitted during a capture in capture_mode global "
                         "or thread_local; the capture is invalidated: instantiate after "
                         "capture_end, or set capture_mode = relaxed"
                       : "run the work eagerly");
    return rc == CGRT_E_INVAL ? CGRT_E_DEVICE : rc;
  }
  *exec = x;
  return 0;
}

static void cuda_graph_destroy(struct cgrt_dev *dev, void *graph) {
  if (!graph)
    return;
  cudaError_t e = cudaGraphDestroy((cudaGraph_t)graph);
  if (e != cudaSuccess)
    cuda_fail(dev, e, "cudaGraphDestroy", NULL);
}

static int cuda_graph_node_count(struct cgrt_dev *dev, void *graph, size_t *count) {
  *count = 0;
  cudaError_t e = cudaGraphGetNodes((cudaGraph_t)graph, NULL, count);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaGraphGetNodes", NULL);
}

static const char *update_reason(enum cudaGraphExecUpdateResult r) {
  switch (r) {
  case cudaGraphExecUpdateErrorTopologyChanged:
    return "the topology changed (nodes or edges differ)";
  case cudaGraphExecUpdateErrorNodeTypeChanged:
    return "a node's type changed";
  case cudaGraphExecUpdateErrorFunctionChanged:
  case cudaGraphExecUpdateErrorUnsupportedFunctionChange:
    return "a kernel node's function changed in a way that cannot be updated";
  case cudaGraphExecUpdateErrorParametersChanged:
    return "a node's parameters changed in a way that cannot be updated";
  case cudaGraphExecUpdateErrorNotSupported:
    return "a node cannot be updated";
  case cudaGraphExecUpdateErrorAttributesChanged:
    return "a node's attributes changed in a way that cannot be updated";
  default:
    return "an unexpected reason";
  }
}

static int cuda_exec_update(struct cgrt_dev *dev, void *exec, void *graph) {
  cudaGraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof(info));
  /* Folded as at instantiation, so that the same capture keeps the same topology. */
  int rc = dev->fold_event_leaves ? fold_event_leaves(dev, (cudaGraph_t)graph) : 0;
  if (rc != 0)
    return rc;
  cudaError_t e = cudaGraphExecUpdate((cudaGraphExec_t)exec, (cudaGraph_t)graph, &info);
  if (e == cudaSuccess)
    return 0;
  (void)cudaGetLastError();
  if (e != cudaErrorGraphExecUpdateFailure)
    return cgrt__dev_fail(dev, status_of(e), "cudaGraphExecUpdate failed: %s (%s)",
                          cudaGetErrorString(e), cudaGetErrorName(e));
  return cgrt__dev_fail(dev, CGRT_E_UPDATE,
                        "cudaGraphExecUpdate refused: %s (cudaGraphExecUpdateResult %d); the "
                        "executable is unchanged: instantiate the new graph instead",
                        update_reason(info.result), (int)info.result);
}

static int cuda_exec_upload(struct cgrt_dev *dev, void *exec, void *stream) {
  cudaError_t e = cudaGraphUpload((cudaGraphExec_t)exec, (cudaStream_t)stream);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaGraphUpload", NULL);
}

static int cuda_exec_launch(struct cgrt_dev *dev, void *exec, void *stream) {
  cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaGraphLaunch", NULL);
}

static void cuda_exec_destroy(struct cgrt_dev *dev, void *exec) {
  if (!exec)
    return;
  cudaError_t e = free_relaxed(1, exec);
  if (e != cudaSuccess)
    cuda_fail(dev, e, "cudaGraphExecDestroy", NULL);
}

static int cuda_host_fn(struct cgrt_dev *dev, void *stream, void (*fn)(void *), void *arg) {
  cudaError_t e = cudaLaunchHostFunc((cudaStream_t)stream, fn, arg);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaLaunchHostFunc", NULL);
}

static int cuda_memcpy_async(struct cgrt_dev *dev, void *dst, const void *src, size_t bytes,
                             void *stream) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
  if (e == cudaSuccess)
    return 0;
  return cuda_fail(dev, e, "cudaMemcpyAsync",
                   status_of(e) == CGRT_E_CAPTURE
                       ? "a copy inside a capture needs device or pinned host memory "
                         "(cudaMallocHost), never pageable memory; the capture is invalidated"
                       : NULL);
}

static int cuda_event_create(struct cgrt_dev *dev, void **event) {
  cudaEvent_t ev = NULL;
  *event = NULL;
  int rc = use_device(dev);
  if (rc)
    return rc;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess)
    return cuda_fail(dev, e, "cudaEventCreateWithFlags", NULL);
  *event = ev;
  return 0;
}

/* Timed events carry a timestamp per record: only the replay timing of issue 43 uses them. */
static int cuda_event_create_timed(struct cgrt_dev *dev, void **event) {
  cudaEvent_t ev = NULL;
  *event = NULL;
  int rc = use_device(dev);
  if (rc)
    return rc;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDefault);
  if (e != cudaSuccess)
    return cuda_fail(dev, e, "cudaEventCreateWithFlags (timed)", NULL);
  *event = ev;
  return 0;
}

/* Never waits: cudaEventElapsedTime answers cudaErrorNotReady while either record is pending. */
static int cuda_event_elapsed(struct cgrt_dev *dev, void *start, void *end, double *us) {
  float ms = 0;
  cudaError_t e = cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return CGRT_E_NOTREADY;
  }
  if (e != cudaSuccess)
    return cuda_fail(dev, e, "cudaEventElapsedTime", NULL);
  *us = (double)ms * 1e3;
  return 0;
}

static int cuda_event_record(struct cgrt_dev *dev, void *event, void *stream) {
  cudaError_t e = cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaEventRecord", NULL);
}

static int cuda_stream_wait(struct cgrt_dev *dev, void *stream, void *event) {
  cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaStreamWaitEvent", NULL);
}

static int cuda_event_query(struct cgrt_dev *dev, void *event) {
  cudaError_t e = cudaEventQuery((cudaEvent_t)event);
  if (e == cudaSuccess)
    return 0;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return CGRT_E_NOTREADY;
  }
  return cuda_fail(dev, e, "cudaEventQuery", NULL);
}

static int cuda_event_sync(struct cgrt_dev *dev, void *event) {
  cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaEventSynchronize", NULL);
}

static void cuda_event_destroy(struct cgrt_dev *dev, void *event) {
  if (!event)
    return;
  cudaError_t e = cudaEventDestroy((cudaEvent_t)event);
  if (e != cudaSuccess)
    cuda_fail(dev, e, "cudaEventDestroy", NULL);
}

static int cuda_mem_alloc(struct cgrt_dev *dev, void **ptr, size_t bytes) {
  *ptr = NULL;
  int rc = use_device(dev);
  if (rc)
    return rc;
  cudaError_t e = cudaMalloc(ptr, bytes);
  if (e == cudaSuccess)
    return 0;
  *ptr = NULL;
  if (status_of(e) == CGRT_E_CAPTURE)
    return cuda_fail(dev, e, "cudaMalloc",
                     "cudaMalloc is not permitted during a capture in capture_mode global or "
                     "thread_local: allocate before capturing, or set capture_mode = relaxed");
  return cuda_fail(dev, e, "cudaMalloc", NULL);
}

static int cuda_host_alloc(struct cgrt_dev *dev, void **ptr, size_t bytes) {
  *ptr = NULL;
  int rc = use_device(dev);
  if (rc)
    return rc;
  cudaError_t e = cudaMallocHost(ptr, bytes);
  if (e == cudaSuccess)
    return 0;
  *ptr = NULL;
  return cuda_fail(dev, e, "cudaMallocHost", NULL);
}

static void cuda_host_free(struct cgrt_dev *dev, void *ptr) {
  if (!ptr)
    return;
  cudaError_t e = cudaFreeHost(ptr);
  if (e != cudaSuccess)
    cuda_fail(dev, e, "cudaFreeHost", NULL);
}

static void cuda_mem_free(struct cgrt_dev *dev, void *ptr) {
  if (!ptr)
    return;
  cudaError_t e = cudaFree(ptr);
  if (e == cudaErrorStreamCaptureUnsupported) {
    /* The capture is invalidated now (capture_end reports it); free the memory all the same. */
    cuda_fail(dev, e, "cudaFree",
              "freeing memory is not permitted during a capture in capture_mode global or "
              "thread_local; the capture is invalidated (the memory was freed)");
    e = free_relaxed(0, ptr);
  }
  if (e != cudaSuccess)
    cuda_fail(dev, e, "cudaFree", NULL);
}

static int cuda_mem_info(struct cgrt_dev *dev, size_t *free_bytes, size_t *total_bytes) {
  *free_bytes = *total_bytes = 0;
  int rc = use_device(dev);
  if (rc)
    return rc;
  cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaMemGetInfo", NULL);
}

static int cuda_graph_mem(struct cgrt_dev *dev, uint64_t *used, uint64_t *reserved) {
  unsigned long long u = 0, r = 0;
  *used = *reserved = 0;
  cudaError_t e = cudaDeviceGetGraphMemAttribute(dev->device, cudaGraphMemAttrUsedMemCurrent, &u);
  if (e == cudaSuccess)
    e = cudaDeviceGetGraphMemAttribute(dev->device, cudaGraphMemAttrReservedMemCurrent, &r);
  if (e != cudaSuccess)
    return cuda_fail(dev, e, "cudaDeviceGetGraphMemAttribute", NULL);
  *used = u;
  *reserved = r;
  return 0;
}

static int cuda_mem_alloc_async(struct cgrt_dev *dev, void *stream, size_t bytes, void **ptr) {
  *ptr = NULL;
  cudaError_t e = cudaMallocAsync(ptr, bytes, (cudaStream_t)stream);
  if (e == cudaSuccess)
    return 0;
  *ptr = NULL;
  return cuda_fail(dev, e, "cudaMallocAsync", NULL);
}

static int cuda_mem_free_async(struct cgrt_dev *dev, void *stream, void *ptr) {
  if (!ptr)
    return 0;
  cudaError_t e = cudaFreeAsync(ptr, (cudaStream_t)stream);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaFreeAsync", NULL);
}

static int cuda_graph_alloc_bytes(struct cgrt_dev *dev, void *graph, uint64_t *bytes) {
  *bytes = 0;
  cudaGraphNode_t *nodes = NULL;
  size_t n = 0;
  int rc = graph_nodes(dev, (cudaGraph_t)graph, &nodes, &n);
  if (rc != 0)
    return rc;
  cudaError_t e = cudaSuccess;
  for (size_t i = 0; e == cudaSuccess && i < n; i++) {
    enum cudaGraphNodeType type;
    e = cudaGraphNodeGetType(nodes[i], &type);
    if (e == cudaSuccess && type == cudaGraphNodeTypeMemAlloc) {
      struct cudaMemAllocNodeParams params;
      memset(&params, 0, sizeof(params));
      e = cudaGraphMemAllocNodeGetParams(nodes[i], &params);
      if (e == cudaSuccess)
        *bytes += params.bytesize;
    }
  }
  free(nodes);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "reading a graph's allocation nodes", NULL);
}

static int cuda_graph_mem_trim(struct cgrt_dev *dev) {
  cudaError_t e = cudaDeviceGraphMemTrim(dev->device);
  return e == cudaSuccess ? 0 : cuda_fail(dev, e, "cudaDeviceGraphMemTrim", NULL);
}

/* cudaDeviceSynchronize of dev's device from any thread, the thread's current device kept. */
static int cuda_device_sync(struct cgrt_dev *dev, char *err, size_t errlen) {
  int prev = -1;
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess && prev != dev->device)
    e = cudaSetDevice(dev->device);
  if (e == cudaSuccess)
    e = cudaDeviceSynchronize();
  if (prev >= 0 && prev != dev->device)
    (void)cudaSetDevice(prev);
  if (e == cudaSuccess)
    return 0;
  (void)cudaGetLastError();
  int code = status_of(e);
  snprintf(err, errlen, "cudaDeviceSynchronize on device %d failed: %s (%s)%s", dev->device,
           cudaGetErrorString(e), cudaGetErrorName(e),
           code == CGRT_E_CAPTURE
               ? "; a capture that cgrt does not run (the host's own) was underway on the device, "
                 "and CUDA invalidated it: synchronize after that capture ends"
               : "");
  return code;
}

CGRT_DRIVER_EXPORT const struct cgrt_driver cgrt_driver_v1 = {
    .abi_major = CGRT_DRIVER_ABI_MAJOR,
    .struct_size = sizeof(struct cgrt_driver),
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .capture_status = cuda_capture_status,
    .graph_instantiate = cuda_graph_instantiate,
    .graph_destroy = cuda_graph_destroy,
    .graph_node_count = cuda_graph_node_count,
    .exec_update = cuda_exec_update,
    .exec_upload = cuda_exec_upload,
    .exec_launch = cuda_exec_launch,
    .exec_destroy = cuda_exec_destroy,
    .host_fn = cuda_host_fn,
    .memcpy_async = cuda_memcpy_async,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .event_destroy = cuda_event_destroy,
    .event_create_timed = cuda_event_create_timed,
    .event_elapsed = cuda_event_elapsed,
    .device_sync = cuda_device_sync,
    .stream_wait = cuda_stream_wait,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .mem_info = cuda_mem_info,
    .graph_mem = cuda_graph_mem,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .mem_alloc_async = cuda_mem_alloc_async,
    .mem_free_async = cuda_mem_free_async,
    .graph_alloc_bytes = cuda_graph_alloc_bytes,
    .graph_mem_trim = cuda_graph_mem_trim,
#ifdef CGRT_HAVE_NCCL
    .comm_info = cgrt__cuda_comm_info,
    .comm_split = cgrt__cuda_comm_split,
    .comm_destroy = cgrt__cuda_comm_destroy,
    .comm_max = cgrt__cuda_comm_max,
#endif
    .cores_near = cgrt__cuda_cores_near,
    .record_start = cgrt__cupti_start,
    .record_stop = cgrt__cupti_stop,
    .record_finish = cgrt__cupti_finish,
    .record_acquire = cgrt__cupti_acquire,
    .record_release = cgrt__cupti_release,
    .sync_guard_acquire = cgrt__cupti_guard_acquire,
    .sync_guard_release = cgrt__cupti_guard_release,
    .sync_guard_counts = cgrt__cupti_guard_counts,
    .describe = cgrt__cuda_describe,
};
