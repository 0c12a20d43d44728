/*
 * diagnose_cupti.c - recording the CUDA runtime and driver API calls a thread makes while it
 * captures, through CUPTI's callback API: the cuda driver's record_* operations. Built when
 * CUPTI's headers were found; libcupti itself is loaded with dlopen the first time a recording
 * starts, so the driver has no link dependency on it and a process that never diagnoses never
 * loads it. The core lends the function that names a call's caller (cgrt__diag_caller).
 *
 * CUPTI allows one subscriber per process: it is shared by every runtime (a mutex guards it), its
 * domains are enabled only while at least one recording runs, and once none runs (and no sync guard
 * needs it) CUPTI is detached again: attached, it makes every graph launch of the process about
 * ten times dearer for the host (unsubscribe_if_idle). The callback keeps a call only
 * on a thread that records (thread-local state), and only if it was refused because of the
 * capture (a cudaErrorStreamCapture* / CUDA_ERROR_STREAM_CAPTURE_* result), is a synchronizing
 * call made after the capture broke, or is suspicious:
 * an allocation outside stream-ordered memory, a copy (classified after the capture, by pointer
 * attributes, as a host read or a pageable copy), work on the legacy or per-thread default stream.
 * Driver API calls made by the runtime on the host's behalf (inside a runtime call) are skipped.
 * Inside the callback no CUDA call is made: result names and pointer attributes come after.
 *
 * The same subscription carries [runtime] sync_guard (session 54): while a runtime holds the
 * guard, the enter and exit of cudaDeviceSynchronize, cudaThreadSynchronize and cuCtxSynchronize
 * are enabled on every thread, and the callback passes the call through the capture gate of its
 * context's device, which the core lends (struct cgrt_sync_gate): the call waits there for cgrt's
 * captures on that device to end, with a bound, and holds new ones back until it returns. A raw
 * device synchronize racing a capture's begin or end crashed the driver in every probe run
 * (tools/probe/sync_race.cu); passed through a gate from these callbacks, in none
 * (docs/decisions.md, session 54). Once enabled, the guard's callbacks stay enabled while the
 * subscription lives (diagnose's domain switches enable them again), so that no exit of a guarded
 * call is missed.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "graphs/diagnose.h"

typedef CUptiResult (*subscribe_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
typedef CUptiResult (*unsubscribe_fn)(CUpti_SubscriberHandle);
typedef CUptiResult (*enable_domain_fn)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
typedef CUptiResult (*result_string_fn)(CUptiResult, const char **);
typedef CUptiResult (*enable_callback_fn)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                          CUpti_CallbackId);
typedef CUptiResult (*device_id_fn)(CUcontext, uint32_t *);
typedef CUptiResult (*finalize_fn)(void);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *lib;
static subscribe_fn cupti_subscribe;
static unsubscribe_fn cupti_unsubscribe;
static enable_domain_fn cupti_enable_domain;
static result_string_fn cupti_result_string;
static enable_callback_fn cupti_enable_callback;
static device_id_fn cupti_get_device_id;
static finalize_fn cupti_finalize;
static CUpti_SubscriberHandle subscriber;
static int recording;     /* recordings running: domains are enabled while > 0 */
static int guarding;      /* sync guard acquires not released (under lock) */
static int guard_enabled; /* the guard's callbacks are enabled in the subscription */
static int cupti_shared;  /* libcupti was in the process before cgrt loaded it: another tool (a
                             tracer, a profiler) uses CUPTI, so cgrt never detaches it */

static __thread struct cgrt_diag_rec *tls_rec;
static __thread const void *const *tls_host_frame;
static __thread cgrt_diag_caller_fn tls_caller;
static __thread int tls_depth; /* runtime API calls in progress on this thread */

/* ---------------------------------------------------------------- loading */

static const char *cupti_error(CUptiResult r) {
  const char *s = NULL;
  if (cupti_result_string && cupti_result_string(r, &s) == CUPTI_SUCCESS && s)
    return s;
  return "unknown CUPTI error";
}

/* dlopen of libcupti: CGRT_CUPTI, then the loader's path, then the toolkit found at build. */
static int load(char *err, size_t len) {
  if (lib)
    return 0;
  const char *env = secure_getenv("CGRT_CUPTI");
  const char *tries[] = {env && env[0] ? env : NULL,
                         "libcupti.so",
                         "libcupti.so.13",
                         "libcupti.so.12",
#ifdef CGRT_CUPTI_LIB
                         CGRT_CUPTI_LIB,
#endif
                         NULL};
  char last[256] = "not found";
  for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]) && !cupti_shared; i++) {
    void *there = tries[i] ? dlopen(tries[i], RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (there) {
      cupti_shared = 1;
      dlclose(there);
    }
  }
  for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
    if (!tries[i])
      continue;
    lib = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
    if (lib)
      break;
    const char *e = dlerror();
    snprintf(last, sizeof(last), "%s", e ? e : tries[i]);
    if (i == 0)
      break; /* CGRT_CUPTI names the one to use */
  }
  if (!lib) {
    snprintf(err, len,
             "libcupti could not be loaded (%s); install the CUDA toolkit's CUPTI or set "
             "CGRT_CUPTI to the path of libcupti.so",
             last);
    return CGRT_E_UNSUPPORTED;
  }
  cupti_subscribe = (subscribe_fn)dlsym(lib, "cuptiSubscribe");
  cupti_unsubscribe = (unsubscribe_fn)dlsym(lib, "cuptiUnsubscribe");
  cupti_enable_domain = (enable_domain_fn)dlsym(lib, "cuptiEnableDomain");
  cupti_result_string = (result_string_fn)dlsym(lib, "cuptiGetResultString");
  cupti_enable_callback = (enable_callback_fn)dlsym(lib, "cuptiEnableCallback");
  cupti_get_device_id = (device_id_fn)dlsym(lib, "cuptiGetDeviceId");
  cupti_finalize = (finalize_fn)dlsym(lib, "cuptiFinalize");
  if (!cupti_subscribe || !cupti_unsubscribe || !cupti_enable_domain) {
    snprintf(err, len, "libcupti lacks cuptiSubscribe, cuptiUnsubscribe or cuptiEnableDomain");
    dlclose(lib);
    lib = NULL;
    return CGRT_E_UNSUPPORTED;
  }
  return 0;
}

/* ---------------------------------------------------------------- the callback */

static int capture_error(int r) {
  return r >= 900 && r <= 908; /* cudaErrorStreamCapture* and CUDA_ERROR_STREAM_CAPTURE_* */
}

static int starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The name without _ptsz/_ptds/_v2 suffixes, for the tables below. */
static int is_name(const char *name, const char *base) {
  size_t n = strlen(base);
  return strncmp(name, base, n) == 0 && (name[n] == '\0' || name[n] == '_');
}

static int legacy_stream(cudaStream_t s) {
  return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

/* The stream a runtime call enqueues on, if it is one of those below; 0 if it takes none. */
static int stream_param(CUpti_CallbackId cbid, const char *name, const void *params,
                        cudaStream_t *stream) {
  switch (cbid) {
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
    *stream = ((const cudaLaunchKernel_v7000_params *)params)->stream;
    return 1;
  case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020:
    *stream = ((const cudaMemsetAsync_v3020_params *)params)->stream;
    return 1;
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000:
    *stream = ((const cudaLaunchHostFunc_v10000_params *)params)->stream;
    return 1;
  case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020:
    *stream = ((const cudaEventRecord_v3020_params *)params)->stream;
    return 1;
  case CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020:
    *stream = ((const cudaStreamWaitEvent_v3020_params *)params)->stream;
    return 1;
  case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060: {
    const cudaLaunchConfig_t *cfg = ((const cudaLaunchKernelExC_v11060_params *)params)->config;
    *stream = cfg ? cfg->stream : NULL;
    return 1;
  }
  default:
    break;
  }
  /*
   * CUDA 13 launches <<<>>> kernels through __cudaLaunchKernel(_ptsz), whose parameters are laid
   * out as cudaLaunchKernel's (a kernel handle in place of the function pointer).
   */
  if (is_name(name, "__cudaLaunchKernel")) {
    *stream = ((const cudaLaunchKernel_v7000_params *)params)->stream;
    return 1;
  }
  return 0;
}

/* Whether a call recorded so far broke the capture: every later synchronizing call is kept too
   (it is what the host meant to do there, and it would have broken the capture by itself), even
   when the broken capture lets it through. */
static int capture_broken(const struct cgrt_diag_rec *rec) {
  for (size_t i = 0; i < rec->n; i++)
    if (rec->calls[i].refused)
      return 1;
  return 0;
}

/* A call refused only because an earlier one invalidated the capture (every launch after the
   break fails so): a consequence, not kept as a finding of its own, so that the record does not
   fill with them before the calls that matter (a host's later cudaDeviceSynchronize). */
static int after_break(const struct cgrt_diag_rec *rec, int r) {
  return r == (int)cudaErrorStreamCaptureInvalidated && capture_broken(rec);
}

static void note_runtime(struct cgrt_diag_rec *rec, CUpti_CallbackId cbid,
                         const CUpti_CallbackData *cb) {
  const char *name = cb->functionName ? cb->functionName : "?";
  int r = cb->functionReturnValue ? (int)*(const cudaError_t *)cb->functionReturnValue : 0;
  rec->seen++;
  int refused = capture_error(r) && !after_break(rec, r);
  cgrt_finding_kind kind = CGRT_FINDING_OTHER;
  int keep = refused, classify = 0, copy_kind = 0;
  const void *dst = NULL, *src = NULL;
  size_t bytes = 0;
  cudaStream_t stream = NULL;
  char detail[128] = "";
  if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020 ||
      cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000) {
    const cudaMemcpy_v3020_params *p = cb->functionParams;
    dst = p->dst, src = p->src, bytes = p->count, copy_kind = p->kind;
    classify = keep = 1; /* synchronous: at least a default-stream copy */
    kind = CGRT_FINDING_LEGACY_STREAM;
  } else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020 ||
             cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000) {
    const cudaMemcpyAsync_v3020_params *p = cb->functionParams;
    dst = p->dst, src = p->src, bytes = p->count, copy_kind = p->kind;
    classify = keep = 1;
    if (legacy_stream(p->stream))
      kind = CGRT_FINDING_LEGACY_STREAM;
  } else if (is_name(name, "cudaStreamSynchronize") || is_name(name, "cudaDeviceSynchronize") ||
             is_name(name, "cudaEventSynchronize") || is_name(name, "cudaStreamQuery") ||
             is_name(name, "cudaEventQuery") || is_name(name, "cudaThreadSynchronize")) {
    kind = CGRT_FINDING_SYNC;
    if (!refused && capture_broken(rec)) {
      keep = 1;
      snprintf(detail, sizeof(detail), "made after the capture broke");
    }
  } else if ((starts(name, "cudaMalloc") && !strstr(name, "Async")) ||
             (starts(name, "cudaFree") && !strstr(name, "Async")) ||
             is_name(name, "cudaHostAlloc") || is_name(name, "cudaHostRegister")) {
    kind = CGRT_FINDING_MALLOC;
    keep = 1;
    if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020)
      snprintf(detail, sizeof(detail), "allocates %zu bytes",
               ((const cudaMalloc_v3020_params *)cb->functionParams)->size);
  } else if (is_name(name, "cudaMemset")) {
    kind = CGRT_FINDING_LEGACY_STREAM; /* synchronous, on the legacy stream */
    keep = 1;
  } else if (stream_param(cbid, name, cb->functionParams, &stream) && legacy_stream(stream)) {
    kind = CGRT_FINDING_LEGACY_STREAM;
    keep = 1;
    snprintf(detail, sizeof(detail), "enqueues on the %s stream",
             stream == cudaStreamPerThread ? "per-thread default" : "legacy default");
  }
  if (!keep)
    return;
  struct cgrt_diag_call *c = cgrt__diag_rec_add(rec);
  if (!c)
    return;
  c->domain = 1;
  c->kind = kind;
  c->refused = refused;
  c->result = r;
  c->classify = classify;
  c->dst = dst;
  c->src = src;
  c->bytes = bytes;
  c->copy_kind = copy_kind;
  snprintf(c->call, sizeof(c->call), "%s", name);
  snprintf(c->detail, sizeof(c->detail), "%s", detail);
  tls_caller(*tls_host_frame, c);
}

static void note_driver(struct cgrt_diag_rec *rec, const CUpti_CallbackData *cb) {
  const char *name = cb->functionName ? cb->functionName : "?";
  int r = cb->functionReturnValue ? (int)*(const CUresult *)cb->functionReturnValue : 0;
  rec->seen++;
  int refused = capture_error(r) && !after_break(rec, r);
  cgrt_finding_kind kind = CGRT_FINDING_OTHER;
  int keep = refused;
  if (is_name(name, "cuStreamSynchronize") || is_name(name, "cuCtxSynchronize") ||
      is_name(name, "cuEventSynchronize") || is_name(name, "cuStreamQuery") ||
      is_name(name, "cuEventQuery")) {
    kind = CGRT_FINDING_SYNC;
    keep = keep || capture_broken(rec);
  } else if (starts(name, "cuMemcpyDtoH")) {
    kind = CGRT_FINDING_HOST_READ;
    keep = 1;
  } else if ((is_name(name, "cuMemAlloc") || is_name(name, "cuMemFree") ||
              is_name(name, "cuMemAllocHost") || is_name(name, "cuMemHostAlloc") ||
              is_name(name, "cuMemAllocManaged") || is_name(name, "cuMemAllocPitch"))) {
    kind = CGRT_FINDING_MALLOC;
    keep = 1;
  }
  if (!keep)
    return;
  struct cgrt_diag_call *c = cgrt__diag_rec_add(rec);
  if (!c)
    return;
  c->domain = 2;
  c->kind = kind;
  c->refused = refused;
  c->result = r;
  snprintf(c->call, sizeof(c->call), "%s", name);
  tls_caller(*tls_host_frame, c);
}

/* ---------------------------------------------------------------- the sync guard */

#define GUARD_DEVICES 64

static struct cgrt_sync_gate guard_gate; /* the core's, set before guard_on */
static long guard_wait_ms;
static _Atomic int guard_on;       /* the guard acts on new calls */
static _Atomic int guard_inflight; /* guarded calls between their enter and exit */
static _Atomic uint64_t guard_waited[GUARD_DEVICES], guard_late[GUARD_DEVICES];
static __thread int tls_sync_depth;  /* guarded calls in progress on this thread (nested) */
static __thread int tls_sync_device; /* the device of the outermost one */
static __thread int tls_sync_held;   /* it holds that device's gate */
static __thread CUcontext tls_ctx;   /* the last context seen, and its device */
static __thread int tls_ctx_device;

static const struct {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
} guarded[] = {
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize},
#if CUDA_VERSION >= 13000
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2},
#endif
};

static int is_guarded(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  for (size_t i = 0; i < sizeof(guarded) / sizeof(guarded[0]); i++)
    if (guarded[i].domain == domain && guarded[i].cbid == cbid)
      return 1;
  return 0;
}

/* The counters' slot of a device: devices past the last share it, as the core's gates do. */
static int guard_slot(int device) {
  return device < 0 ? 0 : device < GUARD_DEVICES ? device : GUARD_DEVICES - 1;
}

/* The device of ctx; 0 without one (the runtime then makes device 0's current). */
static int context_device(CUcontext ctx) {
  if (!ctx)
    return 0;
  if (ctx != tls_ctx) {
    uint32_t id = 0;
    if (!cupti_get_device_id || cupti_get_device_id(ctx, &id) != CUPTI_SUCCESS)
      id = 0;
    tls_ctx = ctx;
    tls_ctx_device = (int)id;
  }
  return tls_ctx_device;
}

/* The enter or exit of a guarded call: through the gate of its device (the outermost only). */
static void guard_call(const CUpti_CallbackData *cb) {
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (tls_sync_depth++ > 0 || !guard_on)
      return;
    const int d = context_device(cb->context);
    int waited = 0;
    int rc = guard_gate.enter(d, guard_wait_ms, &waited);
    if (waited)
      guard_waited[guard_slot(d)]++;
    if (rc == CGRT_E_NOTREADY)
      guard_late[guard_slot(d)]++;
    tls_sync_device = d;
    tls_sync_held = rc == 0;
    if (tls_sync_held)
      guard_inflight++;
    return;
  }
  if (tls_sync_depth == 0 || --tls_sync_depth > 0)
    return;
  if (tls_sync_held) {
    tls_sync_held = 0;
    guard_gate.leave(tls_sync_device);
    guard_inflight--;
  }
}

static void CUPTIAPI on_call(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void *data) {
  (void)user;
  const CUpti_CallbackData *cb = data;
  if (cb && is_guarded(domain, cbid))
    guard_call(cb);
  struct cgrt_diag_rec *rec = tls_rec;
  if (!rec || !cb)
    return;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    if (cb->callbackSite == CUPTI_API_ENTER) {
      tls_depth++;
      return;
    }
    if (tls_depth > 0)
      tls_depth--;
    if (tls_depth == 0)
      note_runtime(rec, cbid, cb);
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    /* inside a runtime call: the runtime's own use of the driver */
    if (tls_depth == 0 && cb->callbackSite == CUPTI_API_EXIT)
      note_driver(rec, cb);
  }
}

/* ---------------------------------------------------------------- recording */

/* The guard's callbacks, on (under lock). */
static CUptiResult enable_guard(void) {
  CUptiResult r = CUPTI_SUCCESS;
  for (size_t i = 0; r == CUPTI_SUCCESS && i < sizeof(guarded) / sizeof(guarded[0]); i++)
    r = cupti_enable_callback(1, subscriber, guarded[i].domain, guarded[i].cbid);
  return r;
}

static int set_domains(uint32_t on) {
  CUptiResult r = cupti_enable_domain(on, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
  if (r == CUPTI_SUCCESS)
    r = cupti_enable_domain(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  if (r == CUPTI_SUCCESS && !on && guard_enabled)
    r = enable_guard(); /* switching the domains off switched them off too */
  return (int)r;
}

/* Subscribes once (under lock): 0, or CGRT_E_UNSUPPORTED with the reason. */
static int subscribe(char *err, size_t len) {
  if (subscriber)
    return 0;
  CUptiResult r = cupti_subscribe(&subscriber, on_call, NULL);
  if (r == CUPTI_SUCCESS)
    return 0;
  subscriber = NULL;
  snprintf(err, len, "cuptiSubscribe failed: %s%s", cupti_error(r),
           r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
               ? " (another tool, a profiler for instance, holds CUPTI's one subscriber)"
               : "");
  return CGRT_E_UNSUPPORTED;
}

/*
 * Unsubscribes and detaches CUPTI (cuptiFinalize) once nothing needs the subscription: no
 * recording, no guard (under lock). While CUPTI is attached, a graph launch costs the host about
 * ten times as much (a 64-kernel graph 13-22 us against 1.3-1.9 us on an H200), and unsubscribing
 * alone leaves it so; only cuptiFinalize takes that away (tools/probe/cupti_cost.cu, session 54).
 * So diagnose detaches after each recording (about 11 ms to attach and detach again for the next
 * failed capture) rather than keep the subscription for the runtime's life, as it did before. A
 * guarded call still between its enter and exit keeps it, so that its exit is seen; the next
 * release tries again. Where libcupti was in the process before cgrt loaded it (libcgrt-trace.so,
 * a profiler's activity tracing), CUPTI is another tool's too: cgrt only unsubscribes, since a
 * cuptiFinalize would end that tool's tracing.
 */
static void unsubscribe_if_idle(void) {
  if (recording == 0 && guarding == 0 && guard_inflight == 0 && subscriber) {
    cupti_unsubscribe(subscriber);
    subscriber = NULL;
    guard_enabled = 0;
    if (cupti_finalize && !cupti_shared)
      (void)cupti_finalize();
  }
}

int cgrt__cupti_start(struct cgrt_diag_rec *rec, const void *const *host_frame,
                      cgrt_diag_caller_fn caller, char *err, size_t len) {
  pthread_mutex_lock(&lock);
  int rc = load(err, len);
  if (rc == 0)
    rc = subscribe(err, len);
  if (rc == 0 && recording == 0) {
    int r = set_domains(1);
    if (r != CUPTI_SUCCESS) {
      snprintf(err, len, "cuptiEnableDomain failed: %s", cupti_error((CUptiResult)r));
      rc = CGRT_E_UNSUPPORTED;
    }
  }
  if (rc == 0) {
    recording++;
    tls_rec = rec;
    tls_host_frame = host_frame;
    tls_caller = caller;
    tls_depth = 0;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

void cgrt__cupti_stop(void) {
  if (!tls_rec)
    return;
  tls_rec = NULL;
  pthread_mutex_lock(&lock);
  if (recording > 0 && --recording == 0) {
    (void)set_domains(0);
    unsubscribe_if_idle();
  }
  pthread_mutex_unlock(&lock);
}

/* Nothing to hold: each recording's stop detaches what it no longer needs (unsubscribe_if_idle). */
void cgrt__cupti_acquire(void) {
}

/* A runtime closes: detaches what a guarded call in flight kept at the last stop, if it is done. */
void cgrt__cupti_release(void) {
  pthread_mutex_lock(&lock);
  unsubscribe_if_idle();
  pthread_mutex_unlock(&lock);
}

int cgrt__cupti_guard_acquire(const struct cgrt_sync_gate *gate, long wait_ms, char *err,
                              size_t len) {
  pthread_mutex_lock(&lock);
  int rc = load(err, len);
  if (rc == 0 && !cupti_enable_callback) {
    snprintf(err, len, "libcupti lacks cuptiEnableCallback");
    rc = CGRT_E_UNSUPPORTED;
  }
  if (rc == 0)
    rc = subscribe(err, len);
  if (rc == 0 && !guard_enabled) {
    CUptiResult r = enable_guard();
    if (r != CUPTI_SUCCESS) {
      snprintf(err, len, "cuptiEnableCallback failed: %s", cupti_error(r));
      rc = CGRT_E_UNSUPPORTED;
    } else {
      guard_enabled = 1;
    }
  }
  if (rc == 0) {
    if (guarding++ == 0) {
      guard_gate = *gate;
      guard_wait_ms = wait_ms;
      guard_on = 1;
    }
  } else {
    unsubscribe_if_idle();
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

void cgrt__cupti_guard_release(void) {
  pthread_mutex_lock(&lock);
  if (guarding > 0 && --guarding == 0)
    guard_on = 0; /* calls already past their enter still leave at their exit */
  unsubscribe_if_idle();
  pthread_mutex_unlock(&lock);
}

void cgrt__cupti_guard_counts(int device, uint64_t *waited, uint64_t *late) {
  *waited = guard_waited[guard_slot(device)];
  *late = guard_late[guard_slot(device)];
}

/* ---------------------------------------------------------------- after the capture */

/* What kind of memory p is: -1 unknown, else a cudaMemoryType. */
static int memory_type(const void *p) {
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof(a));
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return (int)a.type;
}

static const char *driver_error_name(int r) {
  static const char *const capture[] = {
      "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
      "CUDA_ERROR_STREAM_CAPTURE_MERGE",       "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
      "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",    "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
      "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",    "CUDA_ERROR_CAPTURED_EVENT",
      "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"};
  if (r == 0)
    return "CUDA_SUCCESS";
  return capture_error(r) ? capture[r - 900] : "CUresult error";
}

void cgrt__cupti_finish(struct cgrt_diag_rec *rec) {
  size_t out = 0;
  for (size_t i = 0; i < rec->n; i++) {
    struct cgrt_diag_call *c = &rec->calls[i];
    if (c->domain == 1)
      snprintf(c->result_name, sizeof(c->result_name), "%s",
               cudaGetErrorName((cudaError_t)c->result));
    else
      snprintf(c->result_name, sizeof(c->result_name), "%s", driver_error_name(c->result));
    int keep = 1;
    if (c->classify) {
      int dt = memory_type(c->dst), st = memory_type(c->src);
      int dst_host = dt == cudaMemoryTypeHost || dt == cudaMemoryTypeUnregistered;
      int src_dev = st == cudaMemoryTypeDevice || st == cudaMemoryTypeManaged;
      int pageable = dt == cudaMemoryTypeUnregistered || st == cudaMemoryTypeUnregistered;
      if (c->copy_kind == cudaMemcpyDeviceToHost || (src_dev && dst_host)) {
        c->kind = CGRT_FINDING_HOST_READ;
        snprintf(c->detail, sizeof(c->detail),
                 "copies %zu bytes from device memory to %s host "
                 "memory %p",
                 c->bytes, dt == cudaMemoryTypeHost ? "pinned" : "pageable", c->dst);
      } else if (pageable) {
        c->kind = CGRT_FINDING_PAGEABLE_COPY;
        snprintf(c->detail, sizeof(c->detail), "copies %zu bytes %s pageable host memory %p",
                 c->bytes, st == cudaMemoryTypeUnregistered ? "from" : "to",
                 st == cudaMemoryTypeUnregistered ? c->src : c->dst);
      } else if (c->kind == CGRT_FINDING_LEGACY_STREAM) {
        snprintf(c->detail, sizeof(c->detail), "copies %zu bytes on the default stream", c->bytes);
      } else if (!c->refused) {
        keep = 0; /* an asynchronous device or pinned copy on a stream: captured as it should */
      }
    }
    if (keep)
      rec->calls[out++] = *c;
  }
  rec->n = out;
}
