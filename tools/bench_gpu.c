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
#include "buckets.h"
#include "config.h"
#include "runtime.h"
#include "tool.h"

#ifdef CGRT_HAVE_CUDA
#include <cuda_runtime_api.h>

#define MIB (1024.0 * 1024.0)

/* One runtime driving the workload: what a host application holds. */
struct host_model {
  cgrt_runtime *rt;
  const struct bench_workload *w;
  void *ws;
  int num_modules;
  cgrt_module *mods[BENCH_MAX_MODULES];
  struct module_ref {
    struct host_model *hm;
    int index;
  } refs[BENCH_MAX_MODULES];
  int64_t tokens; /* the step's real token count; prepare pads to ctx->padded_tokens */
  uint64_t prepare_ns;
  void *buf;
  size_t row_bytes;
  int64_t max_rows;
};

struct measure {
  double step_us;    /* median interval between steps */
  double host_us;    /* mean host time in cgrt_step */
  double prepare_us; /* mean host time in prepare */
  int64_t padded;    /* the bucket the steps ran at */
  cgrt_mode mode;    /* the last step's mode */
  uint32_t calls;    /* module calls of the last step */
};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int hm_prepare(const cgrt_ctx *ctx, void *user) {
  struct host_model *hm = user;
  uint64_t t0 = cgrt__now_ns();
  /* The real tokens: the host's count, or fewer when cgrt prepares a smaller bucket. */
  int64_t tokens = hm->tokens < ctx->tokens ? hm->tokens : ctx->tokens;
  int rc = hm->w->stage(hm->ws, tokens, ctx->padded_tokens, ctx->stream);
  hm->prepare_ns += cgrt__now_ns() - t0;
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

static int hm_open(struct host_model *hm, const struct bench_workload *w, void *ws,
                   int64_t max_rows, struct cgrt_config *cfg) {
  memset(hm, 0, sizeof(*hm));
  hm->w = w;
  hm->ws = ws;
  hm->max_rows = max_rows;
  hm->buf = w->buffer(ws, &hm->row_bytes);
  int rc = cgrt__open_config(&hm->rt, cfg, NULL, NULL);
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

int bench_time_steps(const struct bench_stepper *st, const struct bench_opts *o, double *us) {
  cudaStream_t s = (cudaStream_t)st->stream;
  cudaEvent_t *ev = calloc((size_t)o->steps + 1, sizeof(*ev));
  double *dt = calloc((size_t)o->steps, sizeof(*dt));
  int rc = ev && dt ? 0 : CGRT_E_NOMEM;
  for (int i = 0; rc == 0 && i <= o->steps; i++)
    cudaEventCreate(&ev[i]);
  for (int i = 0; i < o->warmup && rc == 0; i++)
    rc = st->step(st->arg, 0);
  for (int i = 0; i < o->steps && rc == 0; i++) {
    cudaEventRecord(ev[i], s);
    rc = st->step(st->arg, 1);
  }
  if (rc == 0) {
    cudaEventRecord(ev[o->steps], s);
    if (cudaEventSynchronize(ev[o->steps]) != cudaSuccess)
      rc = CGRT_E_DEVICE;
  }
  for (int i = 0; i < o->steps && rc == 0; i++) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
    dt[i] = ms * 1e3;
  }
  if (rc == 0)
    *us = bench_median(dt, o->steps);
  for (int i = 0; ev && dt && i <= o->steps; i++)
    cudaEventDestroy(ev[i]);
  free(ev);
  free(dt);
  return rc;
}

/* One cgrt step of a host model; timed steps add to the host-time sums. */
struct hm_stepper {
  struct host_model *hm;
  cgrt_step_desc desc;
  cgrt_step_report rep;
  uint64_t host_ns;
};

static int hm_step(void *arg, int timed) {
  struct hm_stepper *st = arg;
  uint64_t prepared = st->hm->prepare_ns;
  int rc = cgrt_step(st->hm->rt, &st->desc, &st->rep);
  if (timed)
    st->host_ns += st->rep.host_ns;
  else /* warm-up preparation does not count */
    st->hm->prepare_ns = prepared;
  return rc;
}

/* Runs warm-up then timed steps of `tokens` real tokens (desc.tokens = step_tokens). */
static int hm_measure(struct host_model *hm, int64_t tokens, int64_t step_tokens,
                      const struct bench_opts *o, struct measure *m) {
  cgrt_buffer stat = {hm->buf, (size_t)hm->max_rows * hm->row_bytes, CGRT_INOUT, "hidden"};
  struct hm_stepper st = {.hm = hm,
                          .desc = {.struct_size = sizeof(cgrt_step_desc),
                                   .phase = CGRT_PHASE_INFER,
                                   .tokens = step_tokens,
                                   .buffers = &stat,
                                   .num_buffers = 1,
                                   .prepare = hm_prepare,
                                   .body = hm_body,
                                   .user = hm},
                          .rep = {.struct_size = sizeof(cgrt_step_report)}};
  struct bench_stepper bs = {hm_step, &st, cgrt_stream(hm->rt)};
  hm->tokens = tokens;
  hm->prepare_ns = 0;
  int rc = bench_time_steps(&bs, o, &m->step_us);
  if (rc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(hm->rt));
    return rc;
  }
  m->host_us = (double)st.host_ns / 1e3 / o->steps;
  m->prepare_us = (double)hm->prepare_ns / 1e3 / o->steps;
  m->padded = st.rep.padded_tokens;
  m->mode = st.rep.mode;
  m->calls = st.rep.calls_eager + st.rep.calls_captured + st.rep.calls_replayed;
  return 0;
}

/* ---------------------------------------------------------------- the raw-graph floors */

struct floor {
  cudaGraphExec_t whole;                   /* every module in one graph */
  cudaGraphExec_t each[BENCH_MAX_MODULES]; /* one graph per module */
  int n;
  int64_t rows;
};

static int floor_capture(const struct bench_workload *w, void *ws, cudaStream_t s, int first,
                         int last, int64_t rows, cudaGraphExec_t *exec) {
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
  cudaGraphDestroy(g);
  if (e == cudaSuccess) /* as cgrt does after instantiating */
    e = cudaGraphUpload(*exec, s);
  return e == cudaSuccess ? 0 : CGRT_E_DEVICE;
}

static int floor_build(struct floor *f, const struct bench_workload *w, void *ws, cudaStream_t s,
                       int64_t rows) {
  memset(f, 0, sizeof(*f));
  f->n = w->num_modules(ws);
  f->rows = rows;
  int rc = floor_capture(w, ws, s, 0, f->n - 1, rows, &f->whole);
  for (int i = 0; i < f->n && rc == 0; i++)
    rc = floor_capture(w, ws, s, i, i, rows, &f->each[i]);
  return rc;
}

static void floor_free(struct floor *f) {
  if (f->whole)
    cudaGraphExecDestroy(f->whole);
  for (int i = 0; i < f->n; i++)
    if (f->each[i])
      cudaGraphExecDestroy(f->each[i]);
  memset(f, 0, sizeof(*f));
}

/* One step of the floor: stage eagerly (as prepare does), then the raw graph(s). */
struct floor_stepper {
  struct floor *f;
  const struct bench_workload *w;
  void *ws;
  cudaStream_t s;
  int64_t tokens;
  int per_module;
};

static int floor_step(void *arg, int timed) {
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

static int floor_measure(struct floor *f, const struct bench_workload *w, void *ws, cudaStream_t s,
                         int64_t tokens, int per_module, const struct bench_opts *o,
                         double *step_us) {
  struct floor_stepper st = {f, w, ws, s, tokens, per_module};
  struct bench_stepper bs = {floor_step, &st, s};
  return bench_time_steps(&bs, o, step_us);
}

/* ---------------------------------------------------------------- host dispatch cost */

/*
 * Host time of the graph launches of one step with an idle stream (synchronized before each
 * step, so no launch waits for room in the queue): median over n steps, in us.
 */
static int hm_dispatch(struct host_model *hm, int64_t tokens, int n, double *us) {
  void *stream = cgrt_stream(hm->rt);
  cgrt_buffer stat = {hm->buf, (size_t)hm->max_rows * hm->row_bytes, CGRT_INOUT, "hidden"};
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_INFER,
                      .tokens = tokens,
                      .buffers = &stat,
                      .num_buffers = 1,
                      .prepare = hm_prepare,
                      .body = hm_body,
                      .user = hm};
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  double *t = calloc((size_t)n, sizeof(*t));
  int rc = 0;
  hm->tokens = tokens;
  for (int i = 0; i < n && rc == 0; i++) {
    cudaStreamSynchronize((cudaStream_t)stream);
    hm->prepare_ns = 0;
    rc = cgrt_step(hm->rt, &d, &rep);
    t[i] = (double)(rep.host_ns - hm->prepare_ns) / 1e3;
  }
  cudaStreamSynchronize((cudaStream_t)stream);
  if (rc == 0)
    *us = bench_median(t, n);
  free(t);
  return rc;
}

/* The same for the raw graphs: host time of their cudaGraphLaunch calls, median, in us. */
static int floor_dispatch(struct floor *f, cudaStream_t s, int per_module, int n, double *us) {
  double *t = calloc((size_t)n, sizeof(*t));
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    cudaStreamSynchronize(s);
    uint64_t t0 = cgrt__now_ns();
    if (per_module)
      for (int m = 0; m < f->n && rc == 0; m++)
        rc = cudaGraphLaunch(f->each[m], s) == cudaSuccess ? 0 : CGRT_E_DEVICE;
    else
      rc = cudaGraphLaunch(f->whole, s) == cudaSuccess ? 0 : CGRT_E_DEVICE;
    t[i] = (double)(cgrt__now_ns() - t0) / 1e3;
  }
  cudaStreamSynchronize(s);
  if (rc == 0)
    *us = bench_median(t, n);
  free(t);
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

/* Eager at the padded size, as the check's reference: the same kernels with the same arguments. */
static int bitwise_equal(struct host_model *backend, struct host_model *eager, int64_t tokens,
                         int64_t padded, const struct bench_opts *o) {
  size_t nb = 0, ne = 0;
  unsigned char *b = read_output(backend, padded, &nb);
  struct bench_opts one = *o;
  one.warmup = 0;
  one.steps = 1;
  struct measure m;
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
  int bitwise;
};

static const char *scope_of(const struct cgrt_config_view *v) {
  if (strcmp(v->impl, "none") == 0)
    return "none";
  return v->inference_scope == CGRT_SCOPE_BLOCK ? "block" : "layer";
}

static void print_table(const struct bench_opts *o, const struct cgrt_config_view *v,
                        const char *what, const char *device, struct row *rows, int n,
                        double dispatch_us, double raw_launch_us, double mem_all, double mem_one,
                        uint64_t graphs, cgrt_runtime *rt) {
  int block = strcmp(scope_of(v), "block") == 0;
  if (o->json) {
    printf("{\"workload\":\"%s\",\"backend\":\"%s\",\"scope\":\"%s\",\"device\":\"%s\","
           "\"dispatch_us_per_call\":%.3f,\"raw_launch_us\":%.3f,\"graph_mem_all_mib\":%.1f,"
           "\"graph_mem_largest_mib\":%.1f,\"graphs\":%llu,\"rows\":[",
           o->workload, v->impl, scope_of(v), device, dispatch_us, raw_launch_us, mem_all / MIB,
           mem_one / MIB, (unsigned long long)graphs);
    for (int i = 0; i < n; i++) {
      struct row *r = &rows[i];
      printf("%s{\"tokens\":%lld,\"bucket\":%lld,\"eager_us\":%.2f,\"backend_us\":%.2f,"
             "\"speedup\":%.3f,\"floor_block_us\":%.2f,\"floor_layer_us\":%.2f,"
             "\"vs_floor\":%.4f,\"capture_ms\":%.3f,\"instantiate_ms\":%.3f,\"graphs\":%llu,"
             "\"bitwise\":%s}",
             i ? "," : "", (long long)r->tokens, (long long)r->bucket, r->eager.step_us,
             r->backend.step_us, r->eager.step_us / r->backend.step_us, r->floor_whole_us,
             r->floor_each_us, r->backend.step_us / (block ? r->floor_whole_us : r->floor_each_us),
             r->capture_ms, r->instantiate_ms, (unsigned long long)r->graphs,
             r->bitwise ? "true" : "false");
    }
    printf("]");
    bench_print_checks(rt, 1);
    printf("}\n");
    return;
  }
  printf("cgrt bench: workload %s (%s), backend %s (scope %s), %s\n", o->workload, what, v->impl,
         scope_of(v), device);
  printf("median of %d steps after %d warm-up; floor = same work as raw graphs (block: one per "
         "step, layer: one per module)\n",
         o->steps, o->warmup);
  printf("%6s %6s %10s %10s %8s %11s %11s %9s %10s %9s %6s %8s\n", "tokens", "bucket", "eager_us",
         "cgrt_us", "speedup", "floor_blk", "floor_lay", "vs_floor", "capture_ms", "inst_ms",
         "graphs", "bitwise");
  for (int i = 0; i < n; i++) {
    struct row *r = &rows[i];
    double fl = block ? r->floor_whole_us : r->floor_each_us;
    printf("%6lld %6lld %10.1f %10.1f %7.2fx %11.1f %11.1f %8.3fx %10.2f %9.2f %6llu %8s\n",
           (long long)r->tokens, (long long)r->bucket, r->eager.step_us, r->backend.step_us,
           r->eager.step_us / r->backend.step_us, r->floor_whole_us, r->floor_each_us,
           r->backend.step_us / fl, r->capture_ms, r->instantiate_ms, (unsigned long long)r->graphs,
           r->bitwise ? "equal" : "DIFFER");
  }
  printf("replay dispatch: %.3f us of host time per replayed graph (%s) above cudaGraphLaunch "
         "(raw launch %.3f us)\n",
         dispatch_us, block ? "one per step" : "one per module call", raw_launch_us);
  if (mem_one > 0)
    printf("graph memory: every bucket captured (%llu graphs) %.1f MiB reserved, the largest "
           "bucket alone %.1f MiB (%.2fx)\n",
           (unsigned long long)graphs, mem_all / MIB, mem_one / MIB, mem_all / mem_one);
  else
    printf("graph memory: %.1f MiB reserved (the largest bucket alone reserved none)\n",
           mem_all / MIB);
  bench_print_checks(rt, 0);
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
  struct measure m;
  *one = 0;
  for (size_t i = nb; i-- > 0;) {
    if (buckets[i] > hm->max_rows)
      continue;
    few.warmup = hm->rt->cfg.view.warmup_steps + 1;
    int rc = hm_measure(hm, buckets[i], buckets[i], &few, &m);
    if (rc != 0)
      return rc;
    if (*one == 0)
      *one = (double)reserved_graph_mem(device);
  }
  *all = (double)reserved_graph_mem(device);
  return 0;
}

int bench_gpu(const struct bench_workload *w, const struct bench_opts *o) {
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess || n == 0) {
    printf("cgrt bench: no CUDA device: %s\n",
           ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaGetDeviceCount returned 0");
    return EXIT_UNUSABLE;
  }
  static const char *default_conf = "[cuda_graph]\nimpl = local\n[runtime]\ndriver = cuda\n"
                                    "log = warn\n";
  struct cgrt_config cfg = {0}, eager_cfg = {0};
  int status = tool_load_config(o->conf, default_conf, "<bench default: local>", &cfg, 0);
  if (status != EXIT_VALID)
    return status;
  cfg.view.driver = CGRT_DRIVER_CUDA;
  int device = cfg.view.device;
  if (tool_eager_config(&cfg, &eager_cfg) != EXIT_VALID) {
    cgrt__config_free(&cfg);
    return EXIT_UNUSABLE;
  }

  int64_t *buckets = NULL;
  size_t nb = 0;
  char err[512];
  const struct cgrt_config_view *v = &cfg.view;
  if (cgrt__buckets_build(v->buckets, v->max_tokens, v->num_graphs, v->tp_size, v->bucket_list,
                          v->bucket_list_len, &buckets, &nb, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    cgrt__config_free(&cfg);
    cgrt__config_free(&eager_cfg);
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
  struct floor fl = {0};
  cudaStream_t fs = NULL;
  char what[256] = "";
  struct cgrt_config_view shown = cfg.view;
  char impl[256];
  snprintf(impl, sizeof(impl), "%s", v->impl);
  shown.impl = impl;
  status = EXIT_UNUSABLE;
  int rc = w->create(o, max_rows, &ws, err, sizeof(err));
  if (rc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    goto out;
  }
  w->describe(ws, what, sizeof(what));
  if (hm_open(&eager, w, ws, max_rows, &eager_cfg) != 0 ||
      hm_open(&backend, w, ws, max_rows, &cfg) != 0)
    goto out;
  cudaStreamCreateWithFlags(&fs, cudaStreamNonBlocking);

  double dispatch_sum = 0, launch_sum = 0;
  int dispatch_n = 0;
  for (int i = 0; i < o->num_tokens; i++) {
    struct row *r = &rows[i];
    memset(r, 0, sizeof(*r));
    r->tokens = o->tokens[i];
    cgrt_stats s0 = {.struct_size = sizeof(s0)}, s1 = {.struct_size = sizeof(s1)};
    cgrt_stats_get(backend.rt, &s0);
    if (hm_measure(&backend, r->tokens, r->tokens, o, &r->backend) != 0 ||
        hm_measure(&eager, r->tokens, r->tokens, o, &r->eager) != 0)
      goto out;
    cgrt_stats_get(backend.rt, &s1);
    r->bucket = r->backend.padded;
    r->capture_ms = (double)(s1.capture_ns - s0.capture_ns) / 1e6;
    r->instantiate_ms = (double)(s1.instantiate_ns - s0.instantiate_ns) / 1e6;
    r->graphs = s1.instantiations - s0.instantiations;
    r->bitwise = bitwise_equal(&backend, &eager, r->tokens, r->bucket, o);
    if (floor_build(&fl, w, ws, fs, r->bucket) != 0 ||
        floor_measure(&fl, w, ws, fs, r->tokens, 0, o, &r->floor_whole_us) != 0 ||
        floor_measure(&fl, w, ws, fs, r->tokens, 1, o, &r->floor_each_us) != 0) {
      fprintf(stderr, "cgrt bench: capturing the raw-graph floor failed\n");
      goto out;
    }
    /*
     * Host cost of a replayed step above the same graphs launched by hand, per graph: one per
     * module call in layer scope, one per step in block scope.
     */
    if (r->backend.mode == CGRT_MODE_REPLAY) {
      int per_module = r->backend.calls > 0;
      int graphs = per_module ? (int)r->backend.calls : 1;
      double cgrt_us = 0, raw_us = 0;
      if (hm_dispatch(&backend, r->tokens, 100, &cgrt_us) != 0 ||
          floor_dispatch(&fl, fs, per_module, 100, &raw_us) != 0)
        goto out;
      dispatch_sum += (cgrt_us - raw_us) / graphs;
      launch_sum += raw_us / graphs;
      dispatch_n++;
    }
    floor_free(&fl);
  }
  double mem_all = 0, mem_one = 0;
  cgrt_release_graphs(eager.rt);
  cgrt_release_graphs(backend.rt);
  if (memory_pass(&backend, buckets, nb, device, o, &mem_all, &mem_one) != 0)
    goto out;
  cgrt_stats st = {.struct_size = sizeof(st)};
  cgrt_stats_get(backend.rt, &st);
  print_table(o, &shown, what, prop.name, rows, o->num_tokens,
              dispatch_n ? dispatch_sum / dispatch_n : 0, dispatch_n ? launch_sum / dispatch_n : 0,
              mem_all, mem_one, st.live_graphs, backend.rt);
  status = 0;
out:
  floor_free(&fl);
  if (fs)
    cudaStreamDestroy(fs);
  cgrt_close(backend.rt);
  cgrt_close(eager.rt);
  if (ws)
    w->destroy(ws);
  free(buckets);
  cgrt__config_free(&cfg);
  cgrt__config_free(&eager_cfg);
  return status;
}

#else /* no CUDA */

int bench_gpu(const struct bench_workload *w, const struct bench_opts *o) {
  (void)w;
  (void)o;
  printf("cgrt bench: no CUDA device: cgrt was built without CUDA support\n");
  return EXIT_UNUSABLE;
}

#endif
