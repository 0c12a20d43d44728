/*
 * diagnose.c - findings about the calls made while capturing: recording around cgrt__record, the
 * host driver's notes, the caller of a call (backtrace and dladdr), the log lines and the public
 * list (cgrt_findings_count, cgrt_finding_get, cgrt_findings_clear), and the allocations of the
 * host's declared pool allocator (cgrt_set_capture_hooks_ex) that are not findings. The CUDA side
 * of recording is the cuda driver's recorder (drivers/cuda/diagnose_cupti.c).
 */
#include "diagnose.h"

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unwind.h>

#include "base/faults.h"
#include "base/gate.h"
#include "capture.h"
#include "graphs.h"
#include "base/log.h"
#include "driver.h"

/* Distinct findings kept; repeats of one are counted in it. */
#define MAX_FINDINGS 256

struct finding {
  cgrt_finding pub;
  char *call, *result_name, *what, *caller, *detail;
};

struct cgrt_diag_state {
  int recording;       /* between begin and pause: the host driver's notes are kept */
  int recorder;        /* this recording goes through the driver's recorder (CUPTI) */
  int recorder_used;   /* this runtime used the recorder at least once (release at close) */
  int recorder_warned; /* the recorder could not be used: said once */
  struct cgrt_diag_rec rec;
  struct finding *findings;
  size_t count;
};

/* ---------------------------------------------------------------- the caller */

/* CUDA's libraries, CUPTI, and cgrt's driver objects (whose recorder runs in the call). */
static int is_device_library(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  return strncmp(base, "libcupti", 8) == 0 || strncmp(base, "libcudart", 9) == 0 ||
         strncmp(base, "libcuda.", 8) == 0 || strncmp(base, "libnvidia", 9) == 0 ||
         strncmp(base, "libcgrt-driver-", 15) == 0;
}

/* Names of the CUDA APIs themselves (a statically linked cudart lives in the caller's object). */
static int is_device_api(const char *name) {
  return strncmp(name, "cuda", 4) == 0 || strncmp(name, "__cuda", 6) == 0 ||
         strncmp(name, "cupti", 5) == 0 ||
         (name[0] == 'c' && name[1] == 'u' && isupper((unsigned char)name[2]));
}

struct frames {
  void *ip[64];
  uintptr_t cfa[64];
  int n;
};

static _Unwind_Reason_Code collect(struct _Unwind_Context *ctx, void *arg) {
  struct frames *f = arg;
  if (f->n == 64)
    return _URC_END_OF_STACK;
  f->ip[f->n] = (void *)_Unwind_GetIP(ctx);
  f->cfa[f->n] = _Unwind_GetCFA(ctx);
  f->n++;
  return _URC_NO_REASON;
}

void cgrt__diag_caller(const void *host_frame, struct cgrt_diag_call *c) {
  char *buf = c->caller;
  size_t len = sizeof(c->caller);
  buf[0] = '\0';
  c->object[0] = '\0';
  /* Only frames inside the host callback now running: none if cgrt itself made the call. */
  uintptr_t boundary = (uintptr_t)host_frame;
  if (!boundary)
    return;
  struct frames fr;
  fr.n = 0;
  _Unwind_Backtrace(collect, &fr);
  Dl_info self;
  if (!dladdr((void *)cgrt__diag_caller, &self))
    self.dli_fbase = NULL;
  for (int i = 1; i < fr.n && fr.cfa[i] <= boundary; i++) {
    if (!fr.ip[i])
      continue;
    /* a return address: the call instruction is just before it */
    void *pc = (char *)fr.ip[i] - 1;
    Dl_info di;
    const ElfW(Sym) *sym = NULL;
    if (!dladdr1(pc, &di, (void **)&sym, RTLD_DL_SYMENT) || !di.dli_fname)
      continue;
    if (is_device_library(di.dli_fname))
      continue;
    const char *name = NULL;
    if (di.dli_sname && sym && (char *)pc >= (char *)di.dli_saddr &&
        (char *)pc < (char *)di.dli_saddr + (sym->st_size ? sym->st_size : 1))
      name = di.dli_sname;
    if (name && is_device_api(name))
      continue;
    /*
     * cgrt's own frames (cgrt_enqueue_host, the drivers): hidden functions without a symbol, or
     * the API. When the core is linked into the host's executable, the host's frames share its
     * object: only an exported symbol outside the API tells them apart.
     */
    if (di.dli_fbase == self.dli_fbase && (!name || strncmp(name, "cgrt", 4) == 0))
      continue;
    const char *obj = strrchr(di.dli_fname, '/');
    obj = obj ? obj + 1 : di.dli_fname;
    if (!obj[0])
      obj = "the executable";
    snprintf(c->object, sizeof(c->object), "%s", di.dli_fname);
    if (name)
      snprintf(buf, len, "%s+0x%lx (%s)", name,
               (unsigned long)((char *)fr.ip[i] - (char *)di.dli_saddr), obj);
    else
      snprintf(buf, len, "%s+0x%lx", obj, (unsigned long)((char *)fr.ip[i] - (char *)di.dli_fbase));
    return;
  }
}

/* ---------------------------------------------------------------- the host driver's notes */

static void dev_note(struct cgrt_dev *dev, cgrt_finding_kind kind, int refused, const char *op,
                     int result, const char *detail) {
  struct cgrt_graphs *g = dev->note_user;
  struct cgrt_diag_state *d = g ? g->diag : NULL;
  if (!d || !d->recording)
    return;
  d->rec.seen++;
  struct cgrt_diag_call *c = cgrt__diag_rec_add(&d->rec);
  if (!c)
    return;
  c->kind = kind;
  c->refused = refused;
  c->result = result;
  snprintf(c->call, sizeof(c->call), "%s", op);
  snprintf(c->result_name, sizeof(c->result_name), "%s",
           result == 0 ? "success" : cgrt_strerror(result));
  snprintf(c->detail, sizeof(c->detail), "%s", detail ? detail : "");
  cgrt__diag_caller(g->host_frame, c);
}

void cgrt__diagnose_open(struct cgrt_graphs *g) {
  g->diag = calloc(1, sizeof(*g->diag));
  g->dev->note = dev_note;
  g->dev->note_user = g;
}

static void findings_free(struct cgrt_diag_state *d) {
  for (size_t i = 0; i < d->count; i++) {
    struct finding *f = &d->findings[i];
    free(f->call);
    free(f->result_name);
    free(f->what);
    free(f->caller);
    free(f->detail);
  }
  free(d->findings);
  d->findings = NULL;
  d->count = 0;
}

void cgrt__diagnose_close(struct cgrt_graphs *g) {
  struct cgrt_diag_state *d = g->diag;
  if (!d)
    return;
  if (d->recorder_used)
    g->dev->drv->record_release();
  findings_free(d);
  free(d);
  g->diag = NULL;
}

/* ---------------------------------------------------------------- the host's pool allocator */

/* Whether two paths name the same file once symbolic links, "." and ".." are resolved. */
static int same_file(const char *a, const char *b) {
  if (strcmp(a, b) == 0)
    return 1;
  char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
  int same = ra && rb && strcmp(ra, rb) == 0;
  free(ra);
  free(rb);
  return same;
}

/*
 * Whether `object` (a caller's dladdr file name) is one of the ':'-separated entries of `pool`
 * (cgrt_set_capture_hooks_ex's pool_allocator): a file name without '/' matches the object's file
 * name, a path the object's path.
 */
static int in_pool(const char *pool, const char *object) {
  if (!pool || !object[0])
    return 0;
  const char *base = strrchr(object, '/');
  base = base ? base + 1 : object;
  for (const char *p = pool; *p;) {
    size_t n = strcspn(p, ":");
    if (n > 0 && memchr(p, '/', n)) {
      char path[PATH_MAX];
      if (n < sizeof(path)) {
        memcpy(path, p, n);
        path[n] = '\0';
        if (same_file(path, object))
          return 1;
      }
    } else if (n > 0 && strlen(base) == n && strncmp(base, p, n) == 0) {
      return 1;
    }
    p += n;
    if (*p == ':')
      p++;
  }
  return 0;
}

/* ---------------------------------------------------------------- reporting */

static const char *advice(cgrt_finding_kind kind, int refused) {
  switch (kind) {
  case CGRT_FINDING_SYNC:
    return "a synchronization inside captured work is refused and invalidates the capture: "
           "synchronize before or after the step, or in `prepare`";
  case CGRT_FINDING_HOST_READ:
    return refused ? "reading device memory on the host needs a synchronization, refused while "
                     "capturing: read results after the step, or keep the decision on the device"
                   : "the copy to host memory is captured and replays every time, but nothing "
                     "waits for it: a host read of that memory inside the step sees stale data";
  case CGRT_FINDING_PAGEABLE_COPY:
    return refused ? "copies from or to pageable host memory cannot be captured: use pinned "
                     "memory (cudaMallocHost) or device memory"
                   : "the graph copies from or to that pageable address at every replay, not "
                     "the value it had at capture: keep it alive and pinned (cudaMallocHost)";
  case CGRT_FINDING_MALLOC:
    return refused ? "cudaMalloc and cudaFree are refused while capturing: allocate before the "
                     "step, or use stream-ordered memory (cudaMallocAsync)"
                   : "the allocation ran once, at capture (capture_mode = relaxed): every replay "
                     "reuses that address; allocate outside the step, or with cudaMallocAsync";
  case CGRT_FINDING_LEGACY_STREAM:
    return "work on the default (legacy or per-thread) stream is not captured: it ran once, now, "
           "and replays will not run it; enqueue on ctx->stream";
  default:
    return "the call is not permitted while a stream captures; make it before or after the step";
  }
}

static char *dup_or_empty(const char *s) {
  return strdup(s ? s : "");
}

/* Adds or counts one finding and logs it the first time. */
static void add_finding(struct cgrt_graphs *g, const struct cgrt_diag_call *c, int broke,
                        const char *what) {
  struct cgrt_diag_state *d = g->diag;
  g->stats->findings++;
  for (size_t i = 0; i < d->count; i++) {
    struct finding *f = &d->findings[i];
    if (f->pub.kind == c->kind && f->pub.broke_capture == broke && strcmp(f->call, c->call) == 0 &&
        strcmp(f->what, what) == 0 && strcmp(f->caller, c->caller) == 0) {
      f->pub.count++;
      cgrt__log(g->log, CGRT_LOG_DEBUG, "diagnose: %s in %s seen again (%u times)", c->call, what,
                f->pub.count);
      return;
    }
  }
  char line[1536];
  char result[96];
  if (c->refused)
    snprintf(result, sizeof(result), "returned %s", c->result_name);
  else
    snprintf(result, sizeof(result), "succeeded");
  snprintf(line, sizeof(line), "diagnose: %s %s while capturing %s (step %llu)%s%s%s [%s]: %s; %s",
           c->call, result, what, (unsigned long long)g->step_index,
           c->caller[0] ? ", called from " : "", c->caller,
           broke        ? ", and broke the capture"
           : c->refused ? ", after the capture broke"
                        : ", suspicious",
           cgrt_finding_kind_name(c->kind), c->detail[0] ? c->detail : "no detail",
           advice(c->kind, c->refused));
  cgrt__log(g->log, CGRT_LOG_WARN, "%s", line);
  if (d->count == MAX_FINDINGS)
    return;
  if (!d->findings && !(d->findings = calloc(MAX_FINDINGS, sizeof(*d->findings))))
    return;
  struct finding *f = &d->findings[d->count];
  f->call = dup_or_empty(c->call);
  f->result_name = dup_or_empty(c->result_name);
  f->what = dup_or_empty(what);
  f->caller = dup_or_empty(c->caller);
  f->detail = dup_or_empty(line + strlen("diagnose: "));
  if (!f->call || !f->result_name || !f->what || !f->caller || !f->detail) {
    free(f->call);
    free(f->result_name);
    free(f->what);
    free(f->caller);
    free(f->detail);
    memset(f, 0, sizeof(*f));
    return;
  }
  f->pub.struct_size = sizeof(f->pub);
  f->pub.kind = c->kind;
  f->pub.broke_capture = broke;
  f->pub.result = c->result;
  f->pub.step = g->step_index;
  f->pub.count = 1;
  d->count++;
}

void cgrt__diagnose_begin(struct cgrt_graphs *g) {
  struct cgrt_diag_state *d = g->diag;
  if (!d || g->view->diagnose == CGRT_DIAGNOSE_OFF)
    return;
  memset(&d->rec, 0, sizeof(d->rec));
  d->recording = 1;
  d->recorder = 0;
  const struct cgrt_driver *drv = g->dev->drv;
  if (g->view->diagnose != CGRT_DIAGNOSE_ON || !drv->record_start)
    return;
  char err[512];
  if (drv->record_start(&d->rec, &g->host_frame, cgrt__diag_caller, err, sizeof(err)) == 0) {
    d->recorder = 1;
    if (!d->recorder_used++)
      drv->record_acquire();
  } else if (!d->recorder_warned) {
    d->recorder_warned = 1;
    cgrt__log(g->log, CGRT_LOG_WARN,
              "diagnose: the CUDA calls made while capturing are not recorded: %s", err);
  }
}

void cgrt__diagnose_pause(struct cgrt_graphs *g) {
  struct cgrt_diag_state *d = g->diag;
  if (!d || !d->recording)
    return;
  if (d->recorder)
    g->dev->drv->record_stop();
  d->recording = 0;
}

/* A driver with a recorder (cuda), diagnose = failures: the failed work captured once more with
 * recording on. */
static void record_again(struct cgrt_graphs *g, void *stream, int (*again)(void *arg), void *arg) {
  struct cgrt_diag_state *d = g->diag;
  char err[512], saved[sizeof(g->log->err)], saved_dev[sizeof(g->dev->err)];
  snprintf(saved, sizeof(saved), "%s", g->log->err);
  snprintf(saved_dev, sizeof(saved_dev), "%s", g->dev->err);
  memset(&d->rec, 0, sizeof(d->rec));
  /* The host's capture hooks bracket this capture too (its allocator must know). */
  if (cgrt__hook_begin(&g->hooks, stream) != 0)
    goto out;
  cgrt__gate_capture_enter(g->dev->device);
  if (g->dev->drv->capture_begin(g->dev, stream) != 0) {
    cgrt__gate_capture_leave(g->dev->device);
    (void)cgrt__hook_end(&g->hooks, stream);
    goto out;
  }
  const struct cgrt_driver *drv = g->dev->drv;
  if (drv->record_start(&d->rec, &g->host_frame, cgrt__diag_caller, err, sizeof(err)) != 0) {
    if (!d->recorder_warned) {
      d->recorder_warned = 1;
      cgrt__log(g->log, CGRT_LOG_WARN,
                "diagnose: cannot record the CUDA calls of the failed capture: %s", err);
    }
  } else {
    d->recorder = 1;
    if (!d->recorder_used++)
      drv->record_acquire();
  }
  (void)again(arg);
  cgrt__fault_capture_sync_again(g->faults, g->dev, stream);
  if (d->recorder)
    drv->record_stop();
  void *graph = NULL;
  g->dev->drv->capture_end(g->dev, stream, &graph);
  cgrt__gate_capture_leave(g->dev->device);
  (void)cgrt__hook_end(&g->hooks, stream);
  if (graph)
    g->dev->drv->graph_destroy(g->dev, graph);
out:
  snprintf(g->log->err, sizeof(g->log->err), "%s", saved);
  snprintf(g->dev->err, sizeof(g->dev->err), "%s", saved_dev);
}

/* The call failed because its capture had been invalidated before it (CUDA's
   cudaErrorStreamCaptureInvalidated, the driver's CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). */
static int already_invalidated(const struct cgrt_diag_call *c) {
  return strstr(c->result_name, "CaptureInvalidated") ||
         strstr(c->result_name, "CAPTURE_INVALIDATED");
}

void cgrt__diagnose_end(struct cgrt_graphs *g, const char *what, int failed, void *stream,
                        int (*again)(void *arg), void *arg, char *why_more, size_t len) {
  struct cgrt_diag_state *d = g->diag;
  why_more[0] = '\0';
  if (!d || g->view->diagnose == CGRT_DIAGNOSE_OFF)
    return;
  d->recording = 0;
  if (failed && !d->recorder && g->dev->drv->record_start && again)
    record_again(g, stream, again, arg);
  /* The calls were seen: a recorder ran (CUPTI on the cuda driver), or the driver reports them
     itself (the host driver's rules, through dev->note). Without either, nothing is known. */
  const int seen = d->recorder || !g->dev->drv->record_start;
  if (d->recorder)
    g->dev->drv->record_finish(&d->rec);
  d->recorder = 0;
  if (!failed && g->view->diagnose != CGRT_DIAGNOSE_ON)
    return;
  int broke = 0;
  size_t pooled = 0;
  for (size_t i = 0; i < d->rec.n; i++) {
    const struct cgrt_diag_call *c = &d->rec.calls[i];
    /* Refused before any other only because the capture was already invalidated: the break came
       before the work's own calls, from elsewhere (below); this call is not its cause. */
    if (c->refused && !broke && already_invalidated(c))
      continue;
    /* Refused after the first: a launch refused only because the capture was invalidated says
       nothing, but what the host meant there (a synchronization, a copy, an allocation) would
       have broken the capture by itself, and is reported too. */
    if (c->refused && broke && c->kind == CGRT_FINDING_OTHER)
      continue;
    if (c->refused && broke) {
      add_finding(g, c, 0, what);
      continue;
    }
    /*
     * The host's pool allocator, declared with its hooks: its allocations while capturing come
     * from the pool its begin hook opened, reserved for the graph, as the host meant. One that
     * was refused broke the capture all the same: reported below.
     */
    if (c->kind == CGRT_FINDING_MALLOC && !c->refused && in_pool(g->hooks.pool, c->object)) {
      pooled++;
      continue;
    }
    if (c->refused) {
      broke = 1;
      snprintf(why_more, len, "; diagnose: the first call refused was %s (%s)%s%s", c->call,
               c->result_name, c->caller[0] ? " from " : "", c->caller);
    }
    add_finding(g, c, c->refused, what);
  }
  if (pooled)
    cgrt__log(g->log, CGRT_LOG_DEBUG,
              "diagnose: %zu allocations or frees by the host's pool allocator (%s) while "
              "capturing %s (step %llu) are not reported: they come from its pool",
              pooled, g->hooks.pool, what, (unsigned long long)g->step_index);
  if (d->rec.dropped)
    cgrt__log(g->log, CGRT_LOG_WARN, "diagnose: %zu more calls while capturing %s were not kept",
              d->rec.dropped, what);
  if (failed && !broke && seen && g->capture_invalidated) {
    /* Invalidated, yet none of the captured work's calls was refused: the break came from
       elsewhere in the process. On another thread, only cudaDeviceSynchronize does that to a
       capture in thread_local or relaxed mode; under global nearly any CUDA call does
       (tools/probe/capture_threads.cu, an H100, session 52). */
    g->broken_outside = 1;
    snprintf(why_more, len,
             "; diagnose: the capture was invalidated, yet none of the %llu device calls recorded "
             "while capturing it was refused: it was broken from outside the captured work, most "
             "likely by a cudaDeviceSynchronize on another thread while it ran (CUDA invalidates "
             "every capture on the GPU then, whatever its capture_mode; under global nearly any "
             "CUDA call on another thread does); on other threads synchronize streams or events, "
             "or call cgrt_device_synchronize, which waits for captures. It is captured again at "
             "its next call",
             (unsigned long long)d->rec.seen);
  } else if (failed && !broke) {
    cgrt__log(g->log, CGRT_LOG_INFO,
              "diagnose: the capture of %s failed, but none of the %llu device calls recorded "
              "while capturing was refused (an error of the captured work itself, or an injected "
              "fault)",
              what, (unsigned long long)d->rec.seen);
  }
}

/* ---------------------------------------------------------------- the list, for the runtime */

size_t cgrt__findings_count(const struct cgrt_graphs *g) {
  return g->diag ? g->diag->count : 0;
}

int cgrt__finding_get(const struct cgrt_graphs *g, size_t index, cgrt_finding *out) {
  if (!g->diag || index >= g->diag->count)
    return CGRT_E_INVAL;
  const struct finding *f = &g->diag->findings[index];
  *out = f->pub;
  out->call = f->call;
  out->result_name = f->result_name;
  out->what = f->what;
  out->caller = f->caller;
  out->detail = f->detail;
  return 0;
}

void cgrt__findings_clear(struct cgrt_graphs *g) {
  if (g->diag)
    findings_free(g->diag);
}
