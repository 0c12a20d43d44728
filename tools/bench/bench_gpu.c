/*
 * bench_gpu.c - `cgrt bench --workload decode|chain`: the workload run as a host application
 * runs it (prepare stages and pads the input, the body calls one cgrt module per piece), under
 * the configured backend and under eager (impl = none, the same kernels), against two floors: the
 * same work captured by hand as one raw graph per step, and as one raw graph per module.
 *
 * Per token count T: per-step time (median of the intervals between CUDA events recorded on the
 * runtime's stream between steps, after warm-up), speedup over eager at T, the ratio to the
 * floor that matches the backend's scope, capture and instantiate time, graphs, and a bitwise
 * check of the backend's output against eager run on the same padded size (same kernels, same
 * arguments). Then: host dispatch cost per module call above cudaGraphLaunch, and the graph
 * memory of all buckets against the largest bucket's alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_plot.h"
#include "tool.h"
#include "tool_args.h"

#include "bench_fresh.h"
#include "bench_gpu.h"

#define MIB (1024.0 * 1024.0)

static int hm_prepare(const cgrt_ctx *ctx, void *user) {
  struct host_model *hm = user;
  uint64_t t0 = cgrt_tool_now_ns();
  /* The real tokens: the host's count, or fewer when cgrt prepares a smaller bucket. */
  int64_t tokens = hm->tokens < ctx->tokens ? hm->tokens : ctx->tokens;
  int rc = hm->w->stage(hm->ws, tokens, ctx->padded_tokens, ctx->stream);
  if (rc == 0 && hm->fresh)
    rc = cudaMemcpyAsync(hm->cur, hm->buf, (size_t)ctx->padded_tokens * hm->row_bytes,
                         cudaMemcpyDeviceToDevice, (cudaStream_t)ctx->stream) == cudaSuccess
             ? 0
             : CGRT_E_DEVICE;
  hm->prepare_ns += cgrt_tool_now_ns() - t0;
  return rc;
}

static int hm_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct module_ref *r = user;
  /* The declared buffer's address: a private copy under rebind = copy and verify's eager run. */
  return r->hm->w->run(r->hm->ws, r->index, ctx->padded_tokens, args->buffers[0].ptr, ctx->stream);
}

static int hm_body(const cgrt_ctx *ctx, void *user) {
  struct host_model *hm = user;
  /* The step's static buffer as the body must address it: a private copy when a whole-body
     graph runs on copies (rebind = copy, verify's eager run). */
  void *hidden = ctx->num_buffers ? ctx->buffers[0].ptr : hm->buf;
  cgrt_buffer b = {hidden, (size_t)ctx->padded_tokens * hm->row_bytes, CGRT_INOUT, "hidden"};
  cgrt_args a = {.struct_size = sizeof(a),
                 .key = (uint64_t)ctx->padded_tokens,
                 .buffers = &b,
                 .num_buffers = 1};
  for (int i = 0; i < hm->num_modules; i++) {
    int rc = cgrt_forward(hm->rt, hm->mods[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

int hm_open(struct host_model *hm, const struct bench_workload *w, void *ws, int64_t max_rows,
            cgrt_tool_config *cfg, void *stream) {
  memset(hm, 0, sizeof(*hm));
  hm->w = w;
  hm->ws = ws;
  hm->max_rows = max_rows;
  hm->stream = stream;
  hm->buf = w->buffer(ws, &hm->row_bytes);
  int rc = cgrt_tool_open_on(&hm->rt, cfg, NULL, NULL, stream);
  if (rc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(NULL));
    return rc;
  }
  hm->num_modules = w->num_modules(ws);
  for (int i = 0; i < hm->num_modules && rc == 0; i++) {
    char name[64];
    cgrt_kind kind;
    w->module(ws, i, name, sizeof(name), &kind);
    hm->refs[i] = (struct module_ref){hm, i};
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = kind,
                          .layer = i / 2,
                          .forward = hm_module,
                          .user = &hm->refs[i]};
    rc = cgrt_module_register(hm->rt, &d, &hm->mods[i]);
  }
  if (rc != 0)
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(hm->rt));
  return rc;
}

/* A fresh host's step: a new hidden buffer before it (declared as the step's buffer). */
static int fresh_begin(struct hm_stepper *st) {
  struct host_model *hm = st->hm;
  cudaStream_t s = (cudaStream_t)cgrt_stream(hm->rt);
  if (cudaMallocAsync(&hm->cur, (size_t)hm->max_rows * hm->row_bytes, s) != cudaSuccess)
    return CGRT_E_NOMEM;
  st->stat.ptr = hm->cur;
  return 0;
}

/* After it: the output out to the workload's buffer (read from there), the previous one freed. */
static int fresh_end(struct hm_stepper *st) {
  struct host_model *hm = st->hm;
  cudaStream_t s = (cudaStream_t)cgrt_stream(hm->rt);
  cudaError_t e = cudaMemcpyAsync(hm->buf, hm->cur, (size_t)st->rep.padded_tokens * hm->row_bytes,
                                  cudaMemcpyDeviceToDevice, s);
  if (e == cudaSuccess && hm->prev)
    e = cudaFreeAsync(hm->prev, s);
  hm->prev = hm->cur;
  hm->cur = NULL;
  return e == cudaSuccess ? 0 : CGRT_E_DEVICE;
}

void hm_close(struct host_model *hm) {
  if (hm->rt && hm->prev) {
    cudaStream_t s = (cudaStream_t)cgrt_stream(hm->rt);
    cudaFreeAsync(hm->prev, s);
    cudaStreamSynchronize(s);
  }
  hm->prev = NULL;
  cgrt_close(hm->rt);
  hm->rt = NULL;
}

int hm_step(void *arg, int timed) {
  struct hm_stepper *st = arg;
  uint64_t prepared = st->hm->prepare_ns;
  int rc = st->hm->fresh ? fresh_begin(st) : 0;
  if (rc != 0)
    return rc;
  rc = cgrt_step(st->hm->rt, &st->desc, &st->rep);
  if (st->hm->fresh) {
    int frc = fresh_end(st);
    rc = rc ? rc : frc;
  }
  if (timed) {
    st->host_ns += st->rep.host_ns;
    st->timed++;
  } else { /* warm-up preparation does not count */
    st->hm->prepare_ns = prepared;
  }
  return rc;
}

void hm_stepper_init(struct hm_stepper *st, struct host_model *hm, int64_t tokens,
                     int64_t step_tokens) {
  memset(st, 0, sizeof(*st));
  st->hm = hm;
  st->stat = (cgrt_buffer){hm->buf, (size_t)hm->max_rows * hm->row_bytes, CGRT_INOUT, "hidden"};
  st->desc = (cgrt_step_desc){.struct_size = sizeof(cgrt_step_desc),
                              .phase = CGRT_PHASE_INFER,
                              .tokens = step_tokens,
                              .buffers = &st->stat,
                              .num_buffers = 1,
                              .prepare = hm_prepare,
                              .body = hm_body,
                              .user = hm};
  st->rep.struct_size = sizeof(cgrt_step_report);
  st->bs = (struct bench_stepper){hm_step, st, cgrt_stream(hm->rt)};
  hm->tokens = tokens;
  hm->prepare_ns = 0;
}

void hm_stepper_result(const struct hm_stepper *st, double step_us, struct measure *m) {
  const double n = st->timed > 0 ? (double)st->timed : 1.0;
  m->step_us = step_us;
  m->host_us = (double)st->host_ns / 1e3 / n;
  m->prepare_us = (double)st->hm->prepare_ns / 1e3 / n;
  m->padded = st->rep.padded_tokens;
  m->mode = st->rep.mode;
  m->calls = st->rep.calls_eager + st->rep.calls_captured + st->rep.calls_replayed;
}

int hm_measure(struct host_model *hm, int64_t tokens, int64_t step_tokens,
               const struct bench_opts *o, struct measure *m) {
  struct hm_stepper st;
  hm_stepper_init(&st, hm, tokens, step_tokens);
  double us = 0;
  int rc = bench_time_steps(&st.bs, o, &us);
  if (rc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(hm->rt));
    return rc;
  }
  hm_stepper_result(&st, us, m);
  return 0;
}

int hm_settle(struct host_model *hm, int64_t tokens, const struct bench_opts *o,
              struct measure *m) {
  struct bench_opts settle = *o;
  settle.warmup = o->warmup + 100;
  settle.steps = 1;
  return hm_measure(hm, tokens, tokens, &settle, m);
}

int bench_hm_step(struct host_model *hm, int64_t tokens, cgrt_step_report *rep) {
  struct hm_stepper st;
  hm_stepper_init(&st, hm, tokens, tokens);
  int rc = hm_step(&st, 0);
  *rep = st.rep;
  if (rc != 0)
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(hm->rt));
  return rc;
}

int bench_no_device(const char *cmd) {
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce == cudaSuccess && n > 0)
    return 0;
  fprintf(stderr, "%s: no CUDA device: %s\n", cmd,
          ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaGetDeviceCount returned 0");
  return EXIT_UNUSABLE;
}

/* ---------------------------------------------------------------- the raw-graph floors */

static int floor_capture(const struct bench_workload *w, void *ws, cudaStream_t s, int first,
                         int last, int64_t rows, cudaGraphExec_t *exec, floor_graph_fn fn,
                         void *user, int per_module) {
  cudaGraph_t g = NULL;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    return CGRT_E_DEVICE;
  int rc = 0;
  for (int i = first; i <= last && rc == 0; i++)
    rc = w->run(ws, i, rows, NULL, s);
  cudaError_t e = cudaStreamEndCapture(s, &g);
  if (rc != 0 || e != cudaSuccess)
    return CGRT_E_CAPTURE;
  e = cudaGraphInstantiateWithFlags(exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  if (fn && e == cudaSuccess)
    fn(user, per_module, g, *exec);
  cudaGraphDestroy(g);
  if (e == cudaSuccess) /* as cgrt does after instantiating */
    e = cudaGraphUpload(*exec, s);
  return e == cudaSuccess ? 0 : CGRT_E_DEVICE;
}

int floor_build(struct floor *f, const struct bench_workload *w, void *ws, cudaStream_t s,
                int64_t rows, floor_graph_fn fn, void *user) {
  memset(f, 0, sizeof(*f));
  f->n = w->num_modules(ws);
  f->rows = rows;
  int rc = floor_capture(w, ws, s, 0, f->n - 1, rows, &f->whole, fn, user, 0);
  for (int i = 0; i < f->n && rc == 0; i++)
    rc = floor_capture(w, ws, s, i, i, rows, &f->each[i], fn, user, 1);
  return rc;
}

void floor_free(struct floor *f) {
  if (f->whole)
    cudaGraphExecDestroy(f->whole);
  for (int i = 0; i < f->n; i++)
    if (f->each[i])
      cudaGraphExecDestroy(f->each[i]);
  memset(f, 0, sizeof(*f));
}

int floor_step(void *arg, int timed) {
  (void)timed;
  struct floor_stepper *st = arg;
  struct floor *f = st->f;
  int rc = st->w->stage(st->ws, st->tokens, f->rows, st->s);
  if (st->per_module)
    for (int m = 0; m < f->n && rc == 0; m++)
      rc = cudaGraphLaunch(f->each[m], st->s) == cudaSuccess ? 0 : CGRT_E_DEVICE;
  else if (rc == 0)
    rc = cudaGraphLaunch(f->whole, st->s) == cudaSuccess ? 0 : CGRT_E_DEVICE;
  return rc;
}

/* ---------------------------------------------------------------- host dispatch cost */

/* The executables one cgrt step launched, in order (through cgrt_tool_watch_graphs). */
struct launched {
  cudaGraphExec_t exec[BENCH_MAX_MODULES];
  int n;
};

static void on_launch(void *user, const struct cgrt_tool_graph_event *ev) {
  struct launched *l = user;
  if (ev->op == CGRT_TOOL_GRAPH_LAUNCHED && l->n < BENCH_MAX_MODULES)
    l->exec[l->n++] = (cudaGraphExec_t)ev->exec;
}

/* Host time of launching n graphs on s (after the same staging as a step), in us. */
static double launch_by_hand(struct host_model *hm, int64_t tokens, int64_t rows,
                             const cudaGraphExec_t *g, int n, cudaStream_t s, int *rc) {
  if (*rc == 0)
    *rc = hm->w->stage(hm->ws, tokens, rows, s);
  const uint64_t t0 = cgrt_tool_now_ns();
  for (int m = 0; m < n && *rc == 0; m++)
    *rc = cudaGraphLaunch(g[m], s) == cudaSuccess ? 0 : CGRT_E_DEVICE;
  return (double)(cgrt_tool_now_ns() - t0) / 1e3;
}

/*
 * What dispatching a replayed step costs the host above launching the same graphs by hand, in
 * triples: n times in turn, each onto an idle stream (synchronized first, so no launch waits for
 * room in the queue) after the same staging kernel: one cgrt step (its host time less
 * prepare's), cgrt's own executables of that step launched by hand, and the floor's graphs
 * launched by hand, all on cgrt's stream. Differences are taken within each triple, which shares
 * the host's conditions of the moment (clock, caches, other load), and their medians kept: two
 * medians taken one block after the other differed by more than the difference itself (an H100,
 * 0.58 and -0.67 us a graph in two runs). *own_us: cgrt step less its executables by hand (what
 * cgrt's code costs); *floor_us: cgrt step less the floor's graphs (that, and any difference
 * between the graphs); *raw_us: the median launch of cgrt's executables by hand. Per step.
 */
static int dispatch_paired(struct host_model *hm, struct floor *f, int per_module, int64_t tokens,
                           int n, double *own_us, double *floor_us, double *raw_us) {
  cudaStream_t s = (cudaStream_t)cgrt_stream(hm->rt);
  struct hm_stepper st;
  hm_stepper_init(&st, hm, tokens, tokens);
  static struct launched own; /* large: off the stack */
  own.n = 0;
  cudaStreamSynchronize(s);
  cgrt_tool_watch_graphs(hm->rt, on_launch, &own);
  int rc = cgrt_step(hm->rt, &st.desc, &st.rep);
  cgrt_tool_watch_graphs(hm->rt, NULL, NULL);
  double *d_own = calloc((size_t)n, sizeof(double)), *d_floor = calloc((size_t)n, sizeof(double));
  double *raw = calloc((size_t)n, sizeof(double));
  if (!d_own || !d_floor || !raw)
    rc = CGRT_E_NOMEM;
  const cudaGraphExec_t *fg = per_module ? f->each : &f->whole;
  const int fn = per_module ? f->n : 1;
  for (int i = 0; i < n && rc == 0; i++) {
    /* The three in turn, each first in a third of the triples: no place in the order (the first
       launch after a drained stream, say) falls to one of them only. */
    double t[3] = {0};
    for (int k = 0; k < 3 && rc == 0; k++) {
      const int which = (i + k) % 3;
      cudaStreamSynchronize(s);
      if (which == 0) {
        hm->prepare_ns = 0;
        rc = cgrt_step(hm->rt, &st.desc, &st.rep);
        t[0] = (double)(st.rep.host_ns - hm->prepare_ns) / 1e3;
      } else if (which == 1) {
        t[1] = launch_by_hand(hm, tokens, f->rows, own.exec, own.n, s, &rc);
      } else {
        t[2] = launch_by_hand(hm, tokens, f->rows, fg, fn, s, &rc);
      }
    }
    raw[i] = t[1];
    d_own[i] = t[0] - t[1];
    d_floor[i] = t[0] - t[2];
  }
  cudaStreamSynchronize(s);
  if (rc == 0) {
    *own_us = bench_median(d_own, n);
    *floor_us = bench_median(d_floor, n);
    *raw_us = bench_median(raw, n);
  }
  free(d_own);
  free(d_floor);
  free(raw);
  return rc;
}

/* ordering_paired's figures, per step above the bare launch (n: 1 once measured, at `tokens`). */
struct order_cost {
  double four_us, two_us, legacy_us, blocking_us;
  int n;
  int64_t tokens;
};

/* ordering_paired's five ways to launch the floor's graph, taken in turn within each round. */
enum order_way { ORDER_FOUR, ORDER_TWO, ORDER_BARE, ORDER_LEGACY, ORDER_BLOCKING, ORDER_WAYS };

/*
 * What ordering a step with the legacy stream costs the host (issue 43, item 5), with the floor's
 * whole graph launched by hand, in rounds of five as dispatch_paired's triples, each way first in
 * a fifth of them: the launch on a non-blocking stream with the four calls cgrt makes on its own
 * stream (an event recorded on the legacy stream and waited for, one recorded after the launch
 * and waited for on the legacy stream); the launch on a blocking stream between two event records
 * on the legacy stream, the ordering a blocking step stream would need (docs/decisions.md, item 5);
 * the bare launch on the non-blocking stream; the launch on the legacy stream itself, as a host
 * that runs on stream 0 (PyTorch's default) replays, ordered with every blocking stream by CUDA
 * with no call; the launch on a blocking stream alone, ordered with stream 0 but not with other
 * blocking streams. Each figure: the median over `n` rounds of its launch less the bare one.
 */
static int ordering_paired(struct host_model *hm, struct floor *f, int64_t tokens, int n,
                           struct order_cost *out_cost) {
  cudaStream_t ns = NULL, bs = NULL;
  cudaEvent_t in = NULL, out = NULL;
  double *d = calloc((size_t)n * ORDER_WAYS, sizeof(double));
  int rc = d ? 0 : CGRT_E_NOMEM;
  if (rc == 0 && (cudaStreamCreateWithFlags(&ns, cudaStreamNonBlocking) != cudaSuccess ||
                  cudaStreamCreateWithFlags(&bs, cudaStreamDefault) != cudaSuccess ||
                  cudaEventCreateWithFlags(&in, cudaEventDisableTiming) != cudaSuccess ||
                  cudaEventCreateWithFlags(&out, cudaEventDisableTiming) != cudaSuccess))
    rc = CGRT_E_DEVICE;
  static const cudaStream_t legacy = cudaStreamLegacy;
  for (int i = 0; i < n && rc == 0; i++) {
    double t[ORDER_WAYS] = {0};
    for (int k = 0; k < ORDER_WAYS && rc == 0; k++) {
      const int way = (i + k) % ORDER_WAYS;
      cudaStream_t s = way == ORDER_TWO || way == ORDER_BLOCKING ? bs
                       : way == ORDER_LEGACY                     ? legacy
                                                                 : ns;
      cudaDeviceSynchronize();
      rc = hm->w->stage(hm->ws, tokens, f->rows, s);
      cudaError_t e = cudaSuccess;
      const uint64_t t0 = cgrt_tool_now_ns();
      if (way == ORDER_FOUR) {
        e = cudaEventRecord(in, legacy);
        e = e ? e : cudaStreamWaitEvent(ns, in, 0);
        e = e ? e : cudaGraphLaunch(f->whole, ns);
        e = e ? e : cudaEventRecord(out, ns);
        e = e ? e : cudaStreamWaitEvent(legacy, out, 0);
      } else if (way == ORDER_TWO) {
        e = cudaEventRecord(in, legacy);
        e = e ? e : cudaGraphLaunch(f->whole, bs);
        e = e ? e : cudaEventRecord(out, legacy);
      } else {
        e = cudaGraphLaunch(f->whole, s);
      }
      t[way] = (double)(cgrt_tool_now_ns() - t0) / 1e3;
      if (rc == 0 && e != cudaSuccess)
        rc = CGRT_E_DEVICE;
    }
    for (int w = 0; w < ORDER_WAYS; w++)
      d[(size_t)w * n + i] = t[w] - t[ORDER_BARE];
  }
  cudaDeviceSynchronize();
  if (rc == 0) {
    out_cost->four_us = bench_median(d + (size_t)ORDER_FOUR * n, n);
    out_cost->two_us = bench_median(d + (size_t)ORDER_TWO * n, n);
    out_cost->legacy_us = bench_median(d + (size_t)ORDER_LEGACY * n, n);
    out_cost->blocking_us = bench_median(d + (size_t)ORDER_BLOCKING * n, n);
    out_cost->n = 1;
    out_cost->tokens = tokens;
  } else {
    fprintf(stderr, "cgrt bench: timing the ordering calls failed\n");
  }
  if (in)
    cudaEventDestroy(in);
  if (out)
    cudaEventDestroy(out);
  if (ns)
    cudaStreamDestroy(ns);
  if (bs)
    cudaStreamDestroy(bs);
  free(d);
  return rc;
}

/* ---------------------------------------------------------------- bitwise check */

/* Reads the first `rows` rows of output (after the runtime's stream is idle). */
static unsigned char *read_output(struct host_model *hm, int64_t rows, size_t *bytes) {
  size_t len = (size_t)rows * hm->row_bytes;
  unsigned char *out = malloc(len ? len : 1);
  if (!out)
    return NULL;
  cgrt_synchronize(hm->rt);
  void *stream = cgrt_stream(hm->rt);
  *bytes = hm->w->read(hm->ws, rows, out, len, stream);
  cudaStreamSynchronize((cudaStream_t)stream);
  return out;
}

/*
 * One more backend step (the floors share the workload's buffers and ran last), its output
 * against eager at the padded size, the check's reference: the same kernels with the same
 * arguments.
 */
static int bitwise_equal(struct host_model *backend, struct host_model *eager, int64_t tokens,
                         int64_t padded, const struct bench_opts *o) {
  struct bench_opts one = *o;
  one.warmup = 0;
  one.warmup_ms = 0;
  one.steps = 1;
  struct measure m;
  if (hm_measure(backend, tokens, tokens, &one, &m) != 0)
    return 0;
  return bench_bitwise_equal(backend, eager, tokens, padded, o);
}

int bench_bitwise_equal(struct host_model *backend, struct host_model *eager, int64_t tokens,
                        int64_t padded, const struct bench_opts *o) {
  size_t nb = 0, ne = 0;
  struct bench_opts one = *o;
  one.warmup = 0;
  one.warmup_ms = 0;
  one.steps = 1;
  struct measure m;
  unsigned char *b = read_output(backend, padded, &nb);
  int ok = 0;
  if (b && hm_measure(eager, tokens, padded, &one, &m) == 0) {
    unsigned char *e = read_output(eager, padded, &ne);
    ok = e && nb == ne && memcmp(b, e, nb) == 0;
    free(e);
  }
  free(b);
  return ok;
}

/* ---------------------------------------------------------------- the run */

struct row {
  int64_t tokens, bucket;
  struct measure eager, backend;
  double floor_whole_us, floor_each_us;
  double capture_ms, instantiate_ms;
  uint64_t graphs;
  uint64_t graph_bytes, graph_nodes; /* the live graphs' after this row (cgrt_stats) */
  int bitwise;
  double read_bytes; /* what a step must read at least (0: the workload does not say) */
  double limit_us;   /* read_bytes at the measured copy bandwidth */
};

static const char *scope_of(const struct cgrt_config_view *v) {
  if (strcmp(v->impl, "none") == 0)
    return "none";
  return v->inference_scope == CGRT_SCOPE_BLOCK ? "block" : "layer";
}

/*
 * The token counts where cgrt ran slower than eager (speedup below 1), for the static host's rows
 * and the fresh host's: their count, and "T: 0.93x" for each into list (unless NULL). A
 * regression shows as a number; the table has the figures.
 */
static int slower_than_eager_by(const struct row *rows, const struct fresh_row *fresh, int n,
                                int fresh_rows, double below, char *list, size_t len) {
  int k = 0;
  size_t at = 0;
  if (list)
    list[0] = '\0';
  for (int i = 0; i < n; i++) {
    double x = fresh_rows ? fresh[i].eager_us / fresh[i].cgrt_us
                          : rows[i].eager.step_us / rows[i].backend.step_us;
    if (!(x < below))
      continue;
    k++;
    if (list && at < len) {
      int w = snprintf(list + at, len - at, "%s%lld: %.2fx", at ? ", " : "",
                       (long long)(fresh_rows ? fresh[i].tokens : rows[i].tokens), x);
      at += w > 0 ? (size_t)w : 0;
    }
  }
  return k;
}

static int slower_than_eager(const struct row *rows, const struct fresh_row *fresh, int n,
                             int fresh_rows, char *list, size_t len) {
  return slower_than_eager_by(rows, fresh, n, fresh_rows, 1.0, list, len);
}

/* Issue 43's target: no token count slower than eager by more than 2%. */
#define SLOWER_TARGET 0.98

/* How the backend's timed steps ran: replayed at a bucket, at their own size, or eagerly. */
static const char *served(const struct row *r) {
  if (r->backend.mode == CGRT_MODE_EAGER)
    return "eager";
  return r->bucket == r->tokens ? "exact" : "padded";
}

static void print_table(const struct bench_opts *o, const struct cgrt_config_view *v,
                        const char *what, const char *device, struct row *rows,
                        const struct fresh_row *fresh, int n, double dispatch_us, double floor_us,
                        double raw_launch_us, const struct order_cost *order, double mem_all,
                        double mem_one, uint64_t graphs, double copy_bw, cgrt_runtime *rt) {
  const double four = order->n ? order->four_us : 0, two = order->n ? order->two_us : 0;
  const double legacy = order->n ? order->legacy_us : 0;
  const double blocking = order->n ? order->blocking_us : 0;
  int block = strcmp(scope_of(v), "block") == 0;
  if (o->json) {
    /* impl may be a path and device is the driver's: both escaped */
    printf("{\"workload\":\"%s\",\"backend\":", o->workload);
    tool_json_string(v->impl);
    printf(",\"scope\":\"%s\",\"host_stream\":%s,\"max_queued_steps\":%d,\"device\":", scope_of(v),
           o->host_stream ? "true" : "false", v->max_queued_steps);
    tool_json_string(device);
    printf(",\"dispatch_us_per_call\":%.3f,\"dispatch_vs_floor_us\":%.3f,\"raw_launch_us\":%.3f,"
           "\"order_four_calls_us\":%.3f,\"order_two_records_us\":%.3f,"
           "\"order_legacy_launch_us\":%.3f,\"order_blocking_launch_us\":%.3f,"
           "\"graph_mem_all_mib\":%.1f,"
           "\"graph_mem_largest_mib\":%.1f,\"graphs\":%llu,\"copy_gb_per_s\":%.1f,\"rows\":[",
           dispatch_us, floor_us, raw_launch_us, four, two, legacy, blocking, mem_all / MIB,
           mem_one / MIB, (unsigned long long)graphs, copy_bw / 1e9);
    for (int i = 0; i < n; i++) {
      struct row *r = &rows[i];
      printf("%s{\"tokens\":%lld,\"bucket\":%lld,\"served\":\"%s\",\"eager_us\":%.2f,"
             "\"backend_us\":%.2f,"
             "\"speedup\":%.3f,\"floor_block_us\":%.2f,\"floor_layer_us\":%.2f,"
             "\"vs_floor\":%.4f,\"capture_ms\":%.3f,\"instantiate_ms\":%.3f,\"graphs\":%llu,"
             "\"graph_bytes\":%llu,\"graph_nodes\":%llu,\"bitwise\":%s",
             i ? "," : "", (long long)r->tokens, (long long)r->bucket, served(r), r->eager.step_us,
             r->backend.step_us, r->eager.step_us / r->backend.step_us, r->floor_whole_us,
             r->floor_each_us, r->backend.step_us / (block ? r->floor_whole_us : r->floor_each_us),
             r->capture_ms, r->instantiate_ms, (unsigned long long)r->graphs,
             (unsigned long long)r->graph_bytes, (unsigned long long)r->graph_nodes,
             r->bitwise ? "true" : "false");
      if (r->limit_us > 0)
        printf(",\"read_bytes\":%.0f,\"limit_us\":%.2f,\"x_limit\":%.3f", r->read_bytes,
               r->limit_us, r->backend.step_us / r->limit_us);
      printf("}");
    }
    printf("]");
    bench_fresh_print(fresh, n, 1);
    printf(",\"slower_than_eager\":%d,\"fresh_slower_than_eager\":%d,"
           "\"slower_than_eager_2pct\":%d,\"fresh_slower_than_eager_2pct\":%d",
           slower_than_eager(rows, fresh, n, 0, NULL, 0),
           slower_than_eager(rows, fresh, n, 1, NULL, 0),
           slower_than_eager_by(rows, fresh, n, 0, SLOWER_TARGET, NULL, 0),
           slower_than_eager_by(rows, fresh, n, 1, SLOWER_TARGET, NULL, 0));
    bench_print_checks(rt, 1);
    printf("}\n");
    return;
  }
  printf("cgrt bench: workload %s (%s), backend %s (scope %s), %s\n", o->workload, what, v->impl,
         scope_of(v), device);
  printf("median of %d steps after %d warm-up steps and %d ms; eager, cgrt and both floors timed "
         "in turn in %d blocks (same host and GPU conditions); floor = same work as raw graphs "
         "(block: one per step, layer: one per module)\n",
         o->steps, o->warmup, o->warmup_ms, o->blocks);
  if (o->host_stream)
    printf("--host-stream: eager and cgrt run on one stream of the bench's, handed at open "
           "(cgrt_open_options.stream): no ordering with the legacy stream, as for a host that "
           "hands its stream\n");
  bench_print_queue(o, v->max_queued_steps);
  bench_print_budget(o);
  const int limit = n > 0 && rows[0].limit_us > 0;
  if (limit)
    printf("limit = the bytes a step must read (read_MiB) at the copy bandwidth measured at start "
           "(%.1f GB/s, a device-to-device copy: bytes read + written / time); x_limit = "
           "cgrt_us / limit_us\n",
           copy_bw / 1e9);
  printf("%6s %6s %6s %10s %10s %8s %11s %11s %9s %10s %9s %6s %9s %7s %8s", "tokens", "bucket",
         "served", "eager_us", "cgrt_us", "speedup", "floor_blk", "floor_lay", "vs_floor",
         "capture_ms", "inst_ms", "graphs", "graph_MiB", "nodes", "bitwise");
  printf(limit ? " %9s %9s %8s\n" : "\n", "read_MiB", "limit_us", "x_limit");
  for (int i = 0; i < n; i++) {
    struct row *r = &rows[i];
    double fl = block ? r->floor_whole_us : r->floor_each_us;
    printf("%6lld %6lld %6s %10.1f %10.1f %7.2fx %11.1f %11.1f %8.3fx %10.2f %9.2f %6llu %9.1f "
           "%7llu %8s",
           (long long)r->tokens, (long long)r->bucket, served(r), r->eager.step_us,
           r->backend.step_us, r->eager.step_us / r->backend.step_us, r->floor_whole_us,
           r->floor_each_us, r->backend.step_us / fl, r->capture_ms, r->instantiate_ms,
           (unsigned long long)r->graphs, (double)r->graph_bytes / MIB,
           (unsigned long long)r->graph_nodes, r->bitwise ? "equal" : "DIFFER");
    if (limit)
      printf(" %9.1f %9.1f %7.2fx", r->read_bytes / MIB, r->limit_us,
             r->backend.step_us / r->limit_us);
    printf("\n");
  }
  bench_fresh_print(fresh, n, 0);
  char slow[512], slow_fresh[512];
  int ks = slower_than_eager(rows, fresh, n, 0, slow, sizeof(slow));
  int kf = slower_than_eager(rows, fresh, n, 1, slow_fresh, sizeof(slow_fresh));
  printf("slower than eager (speedup below 1): %d of %d token counts%s%s%s, with fresh inputs %d "
         "of %d%s%s%s\n",
         ks, n, ks ? " (" : "", slow, ks ? ")" : "", kf, n, kf ? " (" : "", slow_fresh,
         kf ? ")" : "");
  ks = slower_than_eager_by(rows, fresh, n, 0, SLOWER_TARGET, slow, sizeof(slow));
  kf = slower_than_eager_by(rows, fresh, n, 1, SLOWER_TARGET, slow_fresh, sizeof(slow_fresh));
  printf("slower than eager by more than 2%% (speedup below %.2f): %d of %d token counts%s%s%s, "
         "with fresh inputs %d of %d%s%s%s\n",
         SLOWER_TARGET, ks, n, ks ? " (" : "", slow, ks ? ")" : "", kf, n, kf ? " (" : "",
         slow_fresh, kf ? ")" : "");
  printf("replay dispatch: %.3f us of host time per replayed graph (%s) above cudaGraphLaunch of "
         "the same executables by hand (raw launch %.3f us), %.3f us above the floor's graphs "
         "by hand; medians of 400 differences within triples of steps\n",
         dispatch_us, block ? "one per step" : "one per module call", raw_launch_us, floor_us);
  if (order->n)
    printf("ordering with the legacy stream, per step (the floor's one graph at %lld tokens "
           "launched by hand, above its bare launch on a non-blocking stream, medians of 400 "
           "rounds): %.3f us for the four calls made on cgrt's own stream, %.3f us for two "
           "legacy-stream records beside a blocking stream; the launch itself on the legacy "
           "stream %+.3f us, on a blocking stream %+.3f us (docs/decisions.md, issue 43, item "
           "5)\n",
           (long long)order->tokens, four, two, legacy, blocking);
  if (mem_one > 0)
    printf("graph memory: every bucket captured (%llu graphs) %.1f MiB reserved, the largest "
           "bucket alone %.1f MiB (%.2fx)\n",
           (unsigned long long)graphs, mem_all / MIB, mem_one / MIB, mem_all / mem_one);
  else
    printf("graph memory: %.1f MiB reserved (the largest bucket alone reserved none)\n",
           mem_all / MIB);
  bench_print_checks(rt, 0);
}

/* --plot: step time per token count, eager, cgrt, the floor of cgrt's scope and the limit. */
static int plot_rows(const struct bench_opts *o, const struct cgrt_config_view *v, const char *what,
                     const char *device, const struct row *rows, int n) {
  double x[BENCH_MAX_TOKENS], ye[BENCH_MAX_TOKENS], yc[BENCH_MAX_TOKENS], yf[BENCH_MAX_TOKENS],
      yl[BENCH_MAX_TOKENS];
  const int block = strcmp(scope_of(v), "block") == 0;
  for (int i = 0; i < n; i++) {
    x[i] = (double)rows[i].tokens;
    ye[i] = rows[i].eager.step_us;
    yc[i] = rows[i].backend.step_us;
    yf[i] = block ? rows[i].floor_whole_us : rows[i].floor_each_us;
    yl[i] = rows[i].limit_us; /* 0 when the workload gives no bytes: left out */
  }
  char title[1200], floor_name[64], err[512];
  snprintf(title, sizeof(title), "%s (%s): %s, scope %s, %s", o->workload, what, v->impl,
           scope_of(v), device);
  snprintf(floor_name, sizeof(floor_name), "floor (%s)",
           block ? "one graph per step" : "one graph per module");
  const struct plot_series s[4] = {{"eager", "#d62728", ye, 0},
                                   {"cgrt", "#1f77b4", yc, 0},
                                   {floor_name, "#2ca02c", yf, 1},
                                   {"limit (bytes / copy bandwidth)", "#7f7f7f", yl, 1}};
  if (bench_plot_svg(o->plot, title, "tokens per step", "step time (us)", x, n, s, 4, err,
                     sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    return -1;
  }
  if (!o->json)
    printf("plot: %s\n", o->plot);
  return 0;
}

static uint64_t reserved_graph_mem(int device) {
  size_t v = 0;
  cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrReservedMemCurrent, &v);
  return v;
}

/*
 * Graph memory: with everything else released and trimmed, the backend captures every bucket,
 * largest first; reserved memory after the largest against after all.
 */
static int memory_pass(struct host_model *hm, const int64_t *buckets, size_t nb, int device,
                       const struct bench_opts *o, double *all, double *one) {
  cudaDeviceSynchronize();
  cudaDeviceGraphMemTrim(device);
  struct bench_opts few = *o;
  few.steps = 1;
  few.warmup_ms = 0;
  struct measure m;
  *one = 0;
  for (size_t i = nb; i-- > 0;) {
    if (buckets[i] > hm->max_rows)
      continue;
    few.warmup = cgrt_tool_view(hm->rt)->warmup_steps + 1;
    int rc = hm_measure(hm, buckets[i], buckets[i], &few, &m);
    if (rc != 0)
      return rc;
    if (*one == 0)
      *one = (double)reserved_graph_mem(device);
  }
  *all = (double)reserved_graph_mem(device);
  return 0;
}

/*
 * The device's copy bandwidth: a device-to-device cudaMemcpyAsync of 256 MiB (far above L2), the
 * best of 10 after one untimed, counted as bytes read plus bytes written per second: the memory
 * throughput a step that reads its weights streams at, at best. 0 if it could not be measured.
 */
static double copy_bandwidth(void) {
  const size_t bytes = (size_t)256 << 20;
  void *a = NULL, *b = NULL;
  cudaStream_t s = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  double best = 0;
  if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
      cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess &&
      cudaMemsetAsync(a, 1, bytes, s) == cudaSuccess) {
    for (int i = 0; i <= 10; i++) {
      float ms = 0;
      cudaEventRecord(e0, s);
      cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s);
      cudaEventRecord(e1, s);
      if (cudaEventSynchronize(e1) != cudaSuccess ||
          cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
        break;
      double bw = 2.0 * (double)bytes / (ms * 1e-3);
      if (i > 0 && ms > 0 && bw > best)
        best = bw;
    }
  }
  (void)cudaGetLastError();
  if (e0)
    cudaEventDestroy(e0);
  if (e1)
    cudaEventDestroy(e1);
  if (s)
    cudaStreamDestroy(s);
  cudaFree(a);
  cudaFree(b);
  return best;
}

/*
 * The figures of one row: backend steps first, until the size they run at holds still (under
 * adaptive buckets the set follows the row's traffic, and with [local] by_time a padded count may
 * be served eagerly or at an exact-size bucket once measured): the floors are built at that size.
 * Then eager, the backend and both floors in turn, in blocks (bench_time_blocks), so that they
 * run under the same host and GPU conditions; if the backend's steps ended at another size than
 * the floors', the row is measured again (at most twice more), and its bucket is the size the
 * backend's timed steps ran at. Then the bitwise check at that size. Eager is launch-bound: timed
 * alone, its figure followed the host's moment (decode at 1 token on an H100 VM: 684 and 961 us a
 * step in one process, 619 to 889 us between processes), and so did every speedup over it. fl
 * holds the floors afterwards (for the dispatch figures).
 */
static int measure_row(struct host_model *backend, struct host_model *eager, struct floor *fl,
                       cudaStream_t fs, struct row *r, const struct bench_opts *o) {
  cgrt_stats s0 = {.struct_size = sizeof(s0)}, s1 = {.struct_size = sizeof(s1)};
  cgrt_stats_get(backend->rt, &s0);
  struct measure probe;
  struct hm_stepper he, hs;
  double us[4] = {0};
  for (int attempt = 0; attempt < 3; attempt++) {
    if (hm_settle(backend, r->tokens, o, &probe) != 0)
      return -1;
    r->bucket = probe.padded;
    floor_free(fl);
    if (floor_build(fl, backend->w, backend->ws, fs, r->bucket, NULL, NULL) != 0) {
      fprintf(stderr, "cgrt bench: capturing the raw-graph floor failed\n");
      return -1;
    }
    hm_stepper_init(&he, eager, r->tokens, r->tokens);
    hm_stepper_init(&hs, backend, r->tokens, r->tokens);
    struct floor_stepper whole = {fl, backend->w, backend->ws, fs, r->tokens, 0};
    struct floor_stepper each = {fl, backend->w, backend->ws, fs, r->tokens, 1};
    struct bench_stepper st[4] = {he.bs, hs.bs, {floor_step, &whole, fs}, {floor_step, &each, fs}};
    if (bench_time_blocks(st, 4, o, us) != 0) {
      fprintf(stderr, "cgrt bench: %s / %s\n", cgrt_last_error(backend->rt),
              cgrt_last_error(eager->rt));
      return -1;
    }
    if (hs.rep.padded_tokens == r->bucket)
      break;
  }
  hm_stepper_result(&he, us[0], &r->eager);
  hm_stepper_result(&hs, us[1], &r->backend);
  r->bucket = r->backend.padded; /* the size the timed steps ran at */
  r->floor_whole_us = us[2];
  r->floor_each_us = us[3];
  cgrt_stats_get(backend->rt, &s1);
  r->capture_ms = (double)(s1.capture_ns - s0.capture_ns) / 1e6;
  r->instantiate_ms = (double)(s1.instantiate_ns - s0.instantiate_ns) / 1e6;
  r->graphs = s1.instantiations - s0.instantiations;
  r->graph_bytes = s1.graph_bytes;
  r->graph_nodes = s1.graph_nodes;
  r->bitwise = bitwise_equal(backend, eager, r->tokens, r->bucket, o);
  return 0;
}

int bench_gpu_configs(const struct bench_opts *o, cgrt_tool_config **cfg,
                      cgrt_tool_config **eager_cfg) {
  static const char *default_conf = "[cuda_graph]\nimpl = local\n[runtime]\ndriver = cuda\n"
                                    "log = warn\n";
  *cfg = *eager_cfg = NULL;
  int status = tool_load_config(o->conf, default_conf, "<bench default: local>", cfg, 0);
  if (status != EXIT_VALID)
    return status;
  cgrt_tool_config_view(*cfg)->driver = CGRT_DRIVER_CUDA;
  bench_opts_apply(o, cgrt_tool_config_view(*cfg));
  if (tool_eager_config(cgrt_tool_config_view(*cfg), eager_cfg) != EXIT_VALID) {
    cgrt_tool_config_free(*cfg);
    *cfg = NULL;
    return EXIT_UNUSABLE;
  }
  return EXIT_VALID;
}

int bench_gpu(const struct bench_workload *w, const struct bench_opts *o) {
  if (bench_no_device("cgrt bench"))
    return EXIT_UNUSABLE;
  cgrt_tool_config *cfg = NULL, *eager_cfg = NULL;
  int status = bench_gpu_configs(o, &cfg, &eager_cfg);
  if (status != EXIT_VALID)
    return status;
  const struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  int device = v->device < 0 ? 0 : v->device; /* current: a tool's is 0 */

  int64_t *buckets = NULL;
  size_t nb = 0;
  char err[512];
  if (cgrt_tool_buckets_build(v->buckets, v->max_tokens, v->num_graphs, v->tp_size, v->bucket_list,
                              v->bucket_list_len, &buckets, &nb, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    cgrt_tool_config_free(cfg);
    cgrt_tool_config_free(eager_cfg);
    return EXIT_INVALID;
  }
  int64_t max_rows = nb ? buckets[nb - 1] : 1;
  for (int i = 0; i < o->num_tokens; i++)
    if (o->tokens[i] > max_rows)
      max_rows = o->tokens[i];

  struct cudaDeviceProp prop;
  cudaSetDevice(device);
  cudaGetDeviceProperties(&prop, device);
  void *ws = NULL;
  struct host_model backend = {0}, eager = {0};
  struct row rows[BENCH_MAX_TOKENS];
  struct fresh_row fresh[BENCH_MAX_TOKENS];
  struct floor fl = {0};
  cudaStream_t fs = NULL, hs = NULL;
  char what[256] = "";
  /* The view goes with the configuration when the runtime opens: what the table shows, kept. */
  struct cgrt_config_view shown = *v;
  char impl[256];
  snprintf(impl, sizeof(impl), "%s", v->impl);
  shown.impl = impl;
  v = NULL;
  status = EXIT_UNUSABLE;
  int rc = w->create(o, max_rows, &ws, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    goto out;
  }
  w->describe(ws, what, sizeof(what));
  cgrt_tool_config *bcfg = cfg;
  cfg = NULL; /* consumed below, opened or not */
  /* --host-stream: every runtime of the table on this one stream, handed at open */
  if (o->host_stream && cudaStreamCreateWithFlags(&hs, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "cgrt bench: --host-stream: cudaStreamCreateWithFlags failed\n");
    cgrt_tool_config_free(bcfg);
    cgrt_tool_config_free(eager_cfg);
    eager_cfg = NULL;
    goto out;
  }
  int orc = hm_open(&eager, w, ws, max_rows, eager_cfg, hs);
  eager_cfg = NULL;
  if (orc == 0)
    orc = hm_open(&backend, w, ws, max_rows, bcfg, hs);
  else
    cgrt_tool_config_free(bcfg);
  if (orc != 0)
    goto out;
  cudaStreamCreateWithFlags(&fs, cudaStreamNonBlocking);
  const double copy_bw = w->step_bytes ? copy_bandwidth() : 0;

  double dispatch_sum = 0, floor_sum = 0, launch_sum = 0;
  int dispatch_n = 0;
  struct order_cost order = {0};
  for (int i = 0; i < o->num_tokens; i++) {
    struct row *r = &rows[i];
    memset(r, 0, sizeof(*r));
    r->tokens = o->tokens[i];
    if (measure_row(&backend, &eager, &fl, fs, r, o) != 0)
      goto out;
    if (w->step_bytes && copy_bw > 0) {
      r->read_bytes = w->step_bytes(ws, r->bucket);
      r->limit_us = r->read_bytes / copy_bw * 1e6;
    }
    /*
     * Host cost of a replayed step above the same graphs launched by hand, per graph: one per
     * module call in layer scope, one per step in block scope.
     */
    if (r->backend.mode == CGRT_MODE_REPLAY) {
      int per_module = r->backend.calls > 0;
      int graphs = per_module ? (int)r->backend.calls : 1;
      double own_us = 0, floor_us = 0, raw_us = 0;
      if (dispatch_paired(&backend, &fl, per_module, r->tokens, 400, &own_us, &floor_us, &raw_us) !=
          0)
        goto out;
      dispatch_sum += own_us / graphs;
      floor_sum += floor_us / graphs;
      launch_sum += raw_us / graphs;
      dispatch_n++;
      /* once, at the first replayed row: the calls' host cost does not follow the graph's size */
      if (order.n == 0 && ordering_paired(&backend, &fl, r->tokens, 400, &order) != 0)
        goto out;
    }
    floor_free(&fl);
  }
  /* The same host handing its layers a fresh buffer every step (bench_fresh.c). */
  if (bench_fresh_rows(w, ws, max_rows, &backend, o, fresh) != 0)
    goto out;
  double mem_all = 0, mem_one = 0;
  cgrt_release_graphs(eager.rt);
  cgrt_release_graphs(backend.rt);
  if (memory_pass(&backend, buckets, nb, device, o, &mem_all, &mem_one) != 0)
    goto out;
  cgrt_stats st = {.struct_size = sizeof(st)};
  cgrt_stats_get(backend.rt, &st);
  print_table(o, &shown, what, prop.name, rows, fresh, o->num_tokens,
              dispatch_n ? dispatch_sum / dispatch_n : 0, dispatch_n ? floor_sum / dispatch_n : 0,
              dispatch_n ? launch_sum / dispatch_n : 0, &order, mem_all, mem_one, st.live_graphs,
              copy_bw, backend.rt);
  status = o->plot && plot_rows(o, &shown, what, prop.name, rows, o->num_tokens) != 0
               ? EXIT_UNUSABLE
               : 0;
out:
  floor_free(&fl);
  if (fs)
    cudaStreamDestroy(fs);
  hm_close(&backend);
  hm_close(&eager);
  if (hs) { /* the host's: the runtimes on it are closed */
    cudaStreamSynchronize(hs);
    cudaStreamDestroy(hs);
  }
  if (ws)
    w->destroy(ws);
  cgrt_tool_free(buckets);
  cgrt_tool_config_free(cfg);
  cgrt_tool_config_free(eager_cfg);
  return status;
}

int plan_config(const char *conf, const char *default_conf, const char *name,
                cgrt_tool_config **cfg, uint64_t *budget) {
  if (bench_no_device("cgrt plan"))
    return EXIT_UNUSABLE;
  int status = tool_load_config(conf, default_conf, name, cfg, 0);
  if (status != EXIT_VALID)
    return status;
  struct cgrt_config_view *v = cgrt_tool_config_view(*cfg);
  v->driver = CGRT_DRIVER_CUDA;
  *budget = v->memory_budget;
  v->memory_budget = 0; /* every graph, unconstrained: the budget is judged against them */
  return EXIT_VALID;
}

int plan_decode(const char *conf, plan_report_fn report, void *user) {
  static const char *default_conf = "[cuda_graph]\nimpl = local\n[runtime]\ndriver = cuda\n"
                                    "log = warn\n";
  cgrt_tool_config *cfg = NULL;
  uint64_t budget = 0;
  int status = plan_config(conf, default_conf, "<plan default: local>", &cfg, &budget);
  if (status != EXIT_VALID)
    return status;
  struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  int64_t *buckets = NULL;
  size_t nb = 0;
  char err[512], what[256] = "";
  struct bench_opts o = {.workload = "decode", .steps = 1, .warmup = v->warmup_steps + 1};
  void *ws = NULL;
  struct host_model hm = {0};
  int device = v->device < 0 ? 0 : v->device; /* current: a tool's is 0 */
  if (cgrt_tool_buckets_build(v->buckets, v->max_tokens, v->num_graphs, v->tp_size, v->bucket_list,
                              v->bucket_list_len, &buckets, &nb, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt plan: %s\n", err);
    cgrt_tool_config_free(cfg);
    return EXIT_INVALID;
  }
  status = EXIT_UNUSABLE;
  int64_t max_rows = nb ? buckets[nb - 1] : 1;
  cudaSetDevice(device);
  if (bench_decode.create(&o, max_rows, &ws, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt plan: %s\n", err);
    goto out;
  }
  bench_decode.describe(ws, what, sizeof(what));
  int orc = hm_open(&hm, &bench_decode, ws, max_rows, cfg, NULL);
  cfg = NULL; /* consumed */
  if (orc != 0)
    goto out;
  /* Largest first, as [inference] capture = eager does: warm-up steps, then the capture. */
  struct measure m;
  for (size_t i = nb; i-- > 0;)
    if (hm_measure(&hm, buckets[i], buckets[i], &o, &m) != 0)
      goto out;
  status = report(hm.rt, what, budget, user);
out:
  cgrt_close(hm.rt);
  if (ws)
    bench_decode.destroy(ws);
  cgrt_tool_free(buckets);
  cgrt_tool_config_free(cfg);
  return status;
}
