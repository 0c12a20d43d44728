/*
 * bench_explain.c - `cgrt bench --workload chain|decode --explain`: what distinguishes the graphs
 * cgrt replays from the raw floor captured by hand, and what decides their step times, in one
 * run, at the first --tokens count.
 *
 * 1. The graphs: every graph cgrt instantiates is seen through the graph watcher (cgrt/tool.h)
 *    and every floor graph as it is built: node count by type, edges (and how many are
 *    programmatic, i.e. programmatic dependent launch), kernel functions, launch shapes, kernel
 *    node attributes (priority, cooperative, cluster, memory sync domain), the executable's
 *    instantiate flags (cudaGraphExecGetFlags), whether it was uploaded and on which stream it
 *    is launched; then the streams' flags and priorities. A difference is printed as such.
 * 2. The times: the same measurements in a fixed sequence, each with its median step, spread,
 *    host time per step, how far the host ran ahead, and the SM clock (an in-band probe kernel
 *    right after the timed steps, and NVML before and after when libnvidia-ml can be loaded):
 *    first in the order the bench used to take them (cgrt, eager, floor, each after a short
 *    warm-up), then each after a long warm-up, the floor on cgrt's stream, cgrt's own
 *    executables launched by hand on the floor's stream, the floor paced at cgrt's host time per
 *    step, and again right after eager. Which of these moves the floor/cgrt ratio says why it is
 *    what it is (docs/decisions.md, issue 15, first session).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tool.h"

#include "bench_gpu.h"
#include "probe.h"

#define MAX_EXECS    1024
#define MAX_FUNCS    8
#define NODE_TYPES   16
#define PROBE_CYCLES 400000 /* about 200 us at 2 GHz: a reading within 1% */

/* ---------------------------------------------------------------- graph description */

struct graph_info {
  int graphs;
  size_t nodes, types[NODE_TYPES], edges, edges_programmatic, edges_completion, edges_typed;
  size_t kernels, k_priority, k_cooperative, k_cluster, k_memsync, k_smem, k_threads_max;
  size_t k_blocks_max;
  const void *funcs[MAX_FUNCS];
  int num_funcs, more_funcs;
  unsigned long long flags; /* instantiate flags of the first executable */
  int flags_differ;         /* another executable had other flags */
  int uploaded;             /* executables uploaded before their first launch */
};

static const char *node_type_name(int t) {
  static const char *names[NODE_TYPES] = {
      "kernel",     "memcpy",      "memset",         "host",         "child graph", "empty",
      "wait event", "record",      "ext sem signal", "ext sem wait", "mem alloc",   "mem free",
      "type 12",    "conditional", "type 14",        "type 15"};
  return t >= 0 && t < NODE_TYPES ? names[t] : "other";
}

static void note_func(struct graph_info *gi, const void *f) {
  for (int i = 0; i < gi->num_funcs; i++)
    if (gi->funcs[i] == f)
      return;
  if (gi->num_funcs < MAX_FUNCS)
    gi->funcs[gi->num_funcs++] = f;
  else
    gi->more_funcs = 1;
}

static int attr_set(cudaGraphNode_t n, cudaLaunchAttributeID id, cudaLaunchAttributeValue *v) {
  memset(v, 0, sizeof(*v));
  if (cudaGraphKernelNodeGetAttribute(n, id, v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 1;
}

static void describe_kernel(struct graph_info *gi, cudaGraphNode_t n) {
  struct cudaKernelNodeParams p;
  memset(&p, 0, sizeof(p));
  if (cudaGraphKernelNodeGetParams(n, &p) == cudaSuccess) {
    note_func(gi, p.func);
    size_t threads = (size_t)p.blockDim.x * p.blockDim.y * p.blockDim.z;
    size_t blocks = (size_t)p.gridDim.x * p.gridDim.y * p.gridDim.z;
    if (threads > gi->k_threads_max)
      gi->k_threads_max = threads;
    if (blocks > gi->k_blocks_max)
      gi->k_blocks_max = blocks;
    gi->k_smem += p.sharedMemBytes > 0;
  } else {
    (void)cudaGetLastError();
  }
  cudaLaunchAttributeValue v;
  if (attr_set(n, cudaLaunchAttributePriority, &v) && v.priority != 0)
    gi->k_priority++;
  if (attr_set(n, cudaLaunchAttributeCooperative, &v) && v.cooperative != 0)
    gi->k_cooperative++;
  if (attr_set(n, cudaLaunchAttributeClusterDimension, &v) &&
      (size_t)v.clusterDim.x * v.clusterDim.y * v.clusterDim.z > 1)
    gi->k_cluster++;
  if (attr_set(n, cudaLaunchAttributeMemSyncDomain, &v) &&
      v.memSyncDomain != cudaLaunchMemSyncDomainDefault)
    gi->k_memsync++;
}

/* Adds graph g (and, if exec is set, its executable's flags) to gi. */
static void describe_graph(struct graph_info *gi, cudaGraph_t g, cudaGraphExec_t exec) {
  size_t n = 0, e = 0;
  gi->graphs++;
  if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof(*nodes));
  if (nodes && cudaGraphGetNodes(g, nodes, &n) == cudaSuccess) {
    gi->nodes += n;
    for (size_t i = 0; i < n; i++) {
      enum cudaGraphNodeType t;
      if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess)
        continue;
      gi->types[(int)t >= 0 && (int)t < NODE_TYPES ? (int)t : NODE_TYPES - 1]++;
      if (t == cudaGraphNodeTypeKernel) {
        gi->kernels++;
        describe_kernel(gi, nodes[i]);
      }
    }
  }
  free(nodes);
  if (cudaGraphGetEdges(g, NULL, NULL, NULL, &e) == cudaSuccess && e > 0) {
    cudaGraphNode_t *from = calloc(e, sizeof(*from)), *to = calloc(e, sizeof(*to));
    cudaGraphEdgeData *data = calloc(e, sizeof(*data));
    if (from && to && data && cudaGraphGetEdges(g, from, to, data, &e) == cudaSuccess) {
      gi->edges += e;
      for (size_t i = 0; i < e; i++) {
        gi->edges_programmatic += data[i].from_port == cudaGraphKernelNodePortProgrammatic;
        gi->edges_completion += data[i].from_port == cudaGraphKernelNodePortLaunchCompletion;
        gi->edges_typed += data[i].type != cudaGraphDependencyTypeDefault;
      }
    }
    free(from);
    free(to);
    free(data);
  }
  (void)cudaGetLastError();
  unsigned long long flags = 0;
  if (exec && cudaGraphExecGetFlags(exec, &flags) == cudaSuccess) {
    if (gi->graphs == 1)
      gi->flags = flags;
    else if (flags != gi->flags)
      gi->flags_differ = 1;
  }
  (void)cudaGetLastError();
}

static void print_flags(unsigned long long f) {
  printf("0x%llx", f);
  if (f & cudaGraphInstantiateFlagAutoFreeOnLaunch)
    printf(" AutoFreeOnLaunch");
  if (f & cudaGraphInstantiateFlagUpload)
    printf(" Upload");
  if (f & cudaGraphInstantiateFlagDeviceLaunch)
    printf(" DeviceLaunch");
  if (f & cudaGraphInstantiateFlagUseNodePriority)
    printf(" UseNodePriority");
}

static void print_info(const char *what, const struct graph_info *gi) {
  printf("  %-22s %d graph%s, %zu nodes:", what, gi->graphs, gi->graphs == 1 ? "" : "s", gi->nodes);
  for (int t = 0; t < NODE_TYPES; t++)
    if (gi->types[t])
      printf(" %zu %s,", gi->types[t], node_type_name(t));
  printf(" %zu edges (%zu programmatic, %zu launch-completion, %zu typed)\n", gi->edges,
         gi->edges_programmatic, gi->edges_completion, gi->edges_typed);
  printf("  %-22s kernels: %d function%s", "", gi->num_funcs, gi->num_funcs == 1 ? "" : "s");
  for (int i = 0; i < gi->num_funcs; i++) {
    const char *name = NULL;
    if (cudaFuncGetName(&name, gi->funcs[i]) != cudaSuccess || !name) {
      (void)cudaGetLastError();
      name = "?";
    }
    printf("%s%.40s", i ? ", " : " (", name);
  }
  printf("%s; at most %zu blocks of %zu threads; with priority %zu, cooperative %zu, cluster "
         "%zu, mem sync domain %zu, dynamic smem %zu\n",
         gi->more_funcs  ? ", ...)"
         : gi->num_funcs ? ")"
                         : "",
         gi->k_blocks_max, gi->k_threads_max, gi->k_priority, gi->k_cooperative, gi->k_cluster,
         gi->k_memsync, gi->k_smem);
  printf("  %-22s instantiate flags ", "");
  print_flags(gi->flags);
  printf("%s; uploaded before first launch: %d of %d\n", gi->flags_differ ? " (others differ)" : "",
         gi->uploaded, gi->graphs);
}

/* Prints each field where a and b differ; returns the number of differences. */
static int compare_info(const struct graph_info *a, const struct graph_info *b) {
  int d = 0;
#define DIFF(field, fmt)                                                                           \
  if (a->field != b->field) {                                                                      \
    printf("  DIFFERENT " #field ": cgrt " fmt ", floor " fmt "\n", a->field, b->field);           \
    d++;                                                                                           \
  }
  DIFF(graphs, "%d");
  DIFF(nodes, "%zu");
  DIFF(edges, "%zu");
  DIFF(edges_programmatic, "%zu");
  DIFF(edges_completion, "%zu");
  DIFF(edges_typed, "%zu");
  DIFF(kernels, "%zu");
  DIFF(k_priority, "%zu");
  DIFF(k_cooperative, "%zu");
  DIFF(k_cluster, "%zu");
  DIFF(k_memsync, "%zu");
  DIFF(k_smem, "%zu");
  DIFF(k_threads_max, "%zu");
  DIFF(k_blocks_max, "%zu");
  DIFF(num_funcs, "%d");
  DIFF(flags, "0x%llx");
  DIFF(flags_differ, "%d");
  DIFF(uploaded, "%d");
#undef DIFF
  for (int t = 0; t < NODE_TYPES; t++)
    if (a->types[t] != b->types[t]) {
      printf("  DIFFERENT %s nodes: cgrt %zu, floor %zu\n", node_type_name(t), a->types[t],
             b->types[t]);
      d++;
    }
  return d;
}

/* ---------------------------------------------------------------- what cgrt does, watched */

struct watched {
  struct graph_info info;
  cudaGraphExec_t execs[MAX_EXECS];
  int uploaded[MAX_EXECS], launched[MAX_EXECS];
  int num_execs;
  void *upload_stream, *launch_stream;
  int streams_mixed;
  /* The executables one step launched, in order (recorded while `recording`). */
  int recording;
  cudaGraphExec_t step[MAX_EXECS];
  int step_len;
  long launches, updates;
};

static int exec_index(struct watched *w, void *exec) {
  for (int i = 0; i < w->num_execs; i++)
    if (w->execs[i] == exec)
      return i;
  return -1;
}

static void on_graph(void *user, const struct cgrt_tool_graph_event *ev) {
  struct watched *w = user;
  int i = exec_index(w, ev->exec);
  switch (ev->op) {
  case CGRT_TOOL_GRAPH_INSTANTIATED:
    describe_graph(&w->info, (cudaGraph_t)ev->graph, (cudaGraphExec_t)ev->exec);
    if (i < 0 && w->num_execs < MAX_EXECS) {
      i = w->num_execs++;
      w->execs[i] = (cudaGraphExec_t)ev->exec;
      w->uploaded[i] = w->launched[i] = 0;
    }
    break;
  case CGRT_TOOL_GRAPH_UPLOADED:
    if (i >= 0 && !w->launched[i] && !w->uploaded[i]) {
      w->uploaded[i] = 1;
      w->info.uploaded++;
    }
    w->upload_stream = ev->stream;
    break;
  case CGRT_TOOL_GRAPH_LAUNCHED:
    if (i >= 0)
      w->launched[i]++;
    if (w->launch_stream && w->launch_stream != ev->stream)
      w->streams_mixed = 1;
    w->launch_stream = ev->stream;
    w->launches++;
    if (w->recording && w->step_len < MAX_EXECS)
      w->step[w->step_len++] = (cudaGraphExec_t)ev->exec;
    break;
  case CGRT_TOOL_GRAPH_UPDATED:
    w->updates++; /* an executable re-pointed at moved buffers: the same graph shape */
    break;
  }
}

struct floor_seen {
  struct graph_info whole, each;
};

static void on_floor_graph(void *user, int per_module, cudaGraph_t g, cudaGraphExec_t exec) {
  struct floor_seen *f = user;
  struct graph_info *gi = per_module ? &f->each : &f->whole;
  describe_graph(gi, g, exec);
  gi->uploaded++; /* floor_build uploads every executable right after instantiating it */
}

/* ---------------------------------------------------------------- clocks */

/* NVML through dlopen: no build dependency; absent, the in-band probe alone is printed. */
struct nvml {
  void *dl;
  void *dev;
  int (*clock)(void *dev, int type, unsigned *mhz);
  int (*reasons)(void *dev, unsigned long long *r);
};

static void nvml_open(struct nvml *n, int device) {
  memset(n, 0, sizeof(*n));
  n->dl = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->dl)
    return;
  int (*init)(void) = (int (*)(void))dlsym(n->dl, "nvmlInit_v2");
  int (*by_bus)(const char *, void **) =
      (int (*)(const char *, void **))dlsym(n->dl, "nvmlDeviceGetHandleByPciBusId_v2");
  n->clock = (int (*)(void *, int, unsigned *))dlsym(n->dl, "nvmlDeviceGetClockInfo");
  n->reasons =
      (int (*)(void *, unsigned long long *))dlsym(n->dl, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!n->reasons)
    n->reasons = (int (*)(void *, unsigned long long *))dlsym(
        n->dl, "nvmlDeviceGetCurrentClocksThrottleReasons");
  char bus[64];
  if (!init || !by_bus || !n->clock || init() != 0 ||
      cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess || by_bus(bus, &n->dev) != 0) {
    (void)cudaGetLastError();
    dlclose(n->dl);
    memset(n, 0, sizeof(*n));
  }
}

/* The SM clock NVML reports now (MHz), 0 if unknown; *reasons: the clock event reasons mask. */
static unsigned nvml_sm_mhz(const struct nvml *n, unsigned long long *reasons) {
  unsigned mhz = 0;
  *reasons = 0;
  if (!n->dev || n->clock(n->dev, 1 /* NVML_CLOCK_SM */, &mhz) != 0)
    return 0;
  if (n->reasons)
    n->reasons(n->dev, reasons);
  return mhz;
}

static void nvml_close(struct nvml *n) {
  if (n->dl) {
    int (*shutdown)(void) = (int (*)(void))dlsym(n->dl, "nvmlShutdown");
    if (shutdown)
      shutdown();
    dlclose(n->dl);
  }
  memset(n, 0, sizeof(*n));
}

/* ---------------------------------------------------------------- the measurements */

struct explain {
  const struct bench_opts *o;
  struct nvml nvml;
  unsigned long long *probe_dev, *probe_host; /* 2 values */
  int index;
};

struct result {
  double med, p10, p90, host_us, ahead, probe_mhz;
  unsigned nvml_before, nvml_after;
  unsigned long long reasons;
};

/* Host time per step of a stepper: measured around each step call (timed steps only). */
struct timed_stepper {
  const struct bench_stepper *inner;
  uint64_t host_ns;
  int timed;
  uint64_t pace_ns; /* the host spins until at least this much time per step has passed */
};

static int timed_step(void *arg, int timed) {
  struct timed_stepper *t = arg;
  uint64_t t0 = cgrt_tool_now_ns();
  int rc = t->inner->step(t->inner->arg, timed);
  while (t->pace_ns && cgrt_tool_now_ns() - t0 < t->pace_ns)
    ;
  if (timed) {
    t->host_ns += cgrt_tool_now_ns() - t0;
    t->timed++;
  }
  return rc;
}

/*
 * Warm-up (o->warmup steps and warm_ms), then o->steps timed steps with events between them,
 * the clock probe right after the last on the same stream, then one sync.
 */
static int measure(struct explain *x, const struct bench_stepper *st, int warm_ms, uint64_t pace_ns,
                   struct result *r) {
  const struct bench_opts *o = x->o;
  cudaStream_t s = (cudaStream_t)st->stream;
  struct timed_stepper ts = {st, 0, 0, pace_ns};
  cudaEvent_t *ev = calloc((size_t)o->steps + 1, sizeof(*ev));
  double *dt = calloc((size_t)o->steps, sizeof(*dt));
  int rc = ev && dt ? 0 : CGRT_E_NOMEM;
  for (int i = 0; rc == 0 && i <= o->steps; i++)
    if (cudaEventCreate(&ev[i]) != cudaSuccess)
      rc = CGRT_E_DEVICE;
  memset(r, 0, sizeof(*r));
  const uint64_t w0 = cgrt_tool_now_ns();
  for (int i = 0;
       rc == 0 && (i < o->warmup || cgrt_tool_now_ns() - w0 < (uint64_t)warm_ms * 1000000u); i++)
    rc = timed_step(&ts, 0);
  unsigned long long reasons = 0;
  r->nvml_before = nvml_sm_mhz(&x->nvml, &reasons);
  const uint64_t h0 = cgrt_tool_now_ns();
  for (int i = 0; i < o->steps && rc == 0; i++) {
    cudaEventRecord(ev[i], s);
    rc = timed_step(&ts, 1);
  }
  const uint64_t h1 = cgrt_tool_now_ns();
  if (rc == 0) {
    cudaEventRecord(ev[o->steps], s);
    if (cgrtk_clock_probe(x->probe_dev, PROBE_CYCLES, s) != 0 ||
        cudaMemcpyAsync(x->probe_host, x->probe_dev, 2 * sizeof(*x->probe_host),
                        cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
      rc = CGRT_E_DEVICE;
  }
  if (rc == 0) {
    r->nvml_after = nvml_sm_mhz(&x->nvml, &r->reasons);
    double sum = 0;
    for (int i = 0; i < o->steps; i++) {
      float ms = 0;
      cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
      dt[i] = ms * 1e3;
      sum += dt[i];
    }
    r->med = bench_median(dt, o->steps); /* sorts dt */
    r->p10 = dt[o->steps / 10];
    r->p90 = dt[o->steps - 1 - o->steps / 10];
    r->host_us = ts.timed ? (double)ts.host_ns / 1e3 / ts.timed : 0;
    r->ahead = sum > 0 ? (double)(h1 - h0) / 1e3 / sum : 0;
    r->probe_mhz = x->probe_host[1] ? (double)x->probe_host[0] * 1e3 / (double)x->probe_host[1] : 0;
  }
  for (int i = 0; ev && i <= o->steps; i++)
    if (ev[i])
      cudaEventDestroy(ev[i]);
  free(ev);
  free(dt);
  return rc;
}

static void print_result(struct explain *x, const char *what, int warm_ms, const struct result *r) {
  printf("%3d  %-34s %6d %9.2f %9.2f %9.2f %9.2f %7.2f %8.0f", ++x->index, what, warm_ms, r->med,
         r->p10, r->p90, r->host_us, r->ahead, r->probe_mhz);
  if (x->nvml.dev)
    printf(" %5u->%-5u 0x%llx", r->nvml_before, r->nvml_after, r->reasons);
  printf("\n");
}

/* cgrt's own executables of one step, launched by hand on a stream, after staging there. */
struct exec_stepper {
  const struct watched *w;
  const struct bench_workload *wl;
  void *ws;
  int64_t tokens, rows;
  cudaStream_t s;
};

static int exec_step(void *arg, int timed) {
  (void)timed;
  struct exec_stepper *e = arg;
  int rc = e->wl->stage(e->ws, e->tokens, e->rows, e->s);
  for (int i = 0; i < e->w->step_len && rc == 0; i++)
    rc = cudaGraphLaunch(e->w->step[i], e->s) == cudaSuccess ? 0 : CGRT_E_DEVICE;
  return rc;
}

static void print_stream(const char *what, void *stream) {
  unsigned flags = 0;
  int prio = 0;
  cudaStreamGetFlags((cudaStream_t)stream, &flags);
  cudaStreamGetPriority((cudaStream_t)stream, &prio);
  printf("  %-22s %p: flags 0x%x%s, priority %d\n", what, stream, flags,
         flags & cudaStreamNonBlocking ? " (non-blocking)" : "", prio);
}

int bench_explain(const struct bench_workload *w, const struct bench_opts *o) {
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess || n == 0) {
    fprintf(stderr, "cgrt bench: no CUDA device: %s\n",
            ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaGetDeviceCount returned 0");
    return EXIT_UNUSABLE;
  }
  static const char *default_conf = "[cuda_graph]\nimpl = local\n[runtime]\ndriver = cuda\n"
                                    "log = warn\n";
  cgrt_tool_config *cfg = NULL, *eager_cfg = NULL;
  int status = tool_load_config(o->conf, default_conf, "<bench default: local>", &cfg, 0);
  if (status != EXIT_VALID)
    return status;
  struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  v->driver = CGRT_DRIVER_CUDA;
  bench_opts_apply(o, v);
  const int device = v->device < 0 ? 0 : v->device; /* current: a tool's is 0 */
  const int block = v->inference_scope == CGRT_SCOPE_BLOCK;
  const int eager_impl = strcmp(v->impl, "none") == 0;
  const int max_queued_steps = v->max_queued_steps; /* cfg goes with the runtime */
  char impl[128];
  snprintf(impl, sizeof(impl), "%s", v->impl);
  if (tool_eager_config(v, &eager_cfg) != EXIT_VALID) {
    cgrt_tool_config_free(cfg);
    return EXIT_UNUSABLE;
  }
  const int64_t tokens = o->tokens[0];
  int64_t *buckets = NULL, max_rows = tokens;
  size_t nb = 0;
  char err[512], what[256] = "";
  if (cgrt_tool_buckets_build(v->buckets, v->max_tokens, v->num_graphs, v->tp_size, v->bucket_list,
                              v->bucket_list_len, &buckets, &nb, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    cgrt_tool_config_free(cfg);
    cgrt_tool_config_free(eager_cfg);
    return EXIT_INVALID;
  }
  if (nb && buckets[nb - 1] > max_rows)
    max_rows = buckets[nb - 1];
  cgrt_tool_free(buckets);

  struct explain x = {.o = o};
  struct host_model backend = {0}, eager = {0};
  struct floor fl = {0};
  struct floor_seen seen = {0};
  static struct watched wat; /* large: off the stack */
  memset(&wat, 0, sizeof(wat));
  cudaStream_t fs = NULL;
  void *ws = NULL;
  status = EXIT_UNUSABLE;
  cudaSetDevice(device);
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, device);
  if (w->create(o, max_rows, &ws, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    cgrt_tool_config_free(cfg);
    cgrt_tool_config_free(eager_cfg);
    return EXIT_UNUSABLE;
  }
  w->describe(ws, what, sizeof(what));
  int orc = hm_open(&eager, w, ws, max_rows, eager_cfg, NULL);
  if (orc == 0)
    orc = hm_open(&backend, w, ws, max_rows, cfg, NULL);
  else
    cgrt_tool_config_free(cfg);
  cfg = eager_cfg = NULL; /* consumed */
  if (orc != 0 || cudaStreamCreateWithFlags(&fs, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc((void **)&x.probe_dev, 2 * sizeof(*x.probe_dev)) != cudaSuccess ||
      cudaMallocHost((void **)&x.probe_host, 2 * sizeof(*x.probe_host)) != cudaSuccess)
    goto out;
  cgrt_tool_watch_graphs(backend.rt, on_graph, &wat);
  nvml_open(&x.nvml, device);

  printf("cgrt bench --explain: workload %s (%s), backend %s (scope %s), %s, %lld tokens\n",
         w->name, what, impl, block ? "block" : "layer", prop.name, (long long)tokens);
  bench_print_queue(o, max_queued_steps);
  bench_print_budget(o);

  /* Warm cgrt up (it captures here), learn the bucket, record one replayed step's launches. */
  struct result r;
  struct hm_stepper hs;
  hm_stepper_init(&hs, &backend, tokens, tokens);
  if (measure(&x, &hs.bs, 0, 0, &r) != 0) /* as the bench used to: warm-up steps only */
    goto fail;
  const int64_t bucket = hs.rep.padded_tokens;
  wat.recording = 1;
  if (hm_step(&hs, 0) != 0 || cudaStreamSynchronize(cgrt_stream(backend.rt)) != cudaSuccess)
    goto fail;
  wat.recording = 0;
  if (floor_build(&fl, w, ws, fs, bucket, on_floor_graph, &seen) != 0)
    goto fail;

  printf("\ngraphs at bucket %lld (cgrt: every graph it instantiated, seen through "
         "cgrt_tool_watch_graphs; the floor: as captured by hand)\n",
         (long long)bucket);
  print_info("cgrt", &wat.info);
  print_info("floor, one per module", &seen.each);
  print_info("floor, one per step", &seen.whole);
  printf("  cgrt launches on %p%s, uploads on %p; one replayed step launched %d executable%s\n",
         wat.launch_stream, wat.streams_mixed ? " (and others)" : "", wat.upload_stream,
         wat.step_len, wat.step_len == 1 ? "" : "s");
  print_stream("cgrt's stream", cgrt_stream(backend.rt));
  print_stream("floor's stream", fs);
  int diffs = 0;
  if (eager_impl) {
    printf("  (impl = none: cgrt builds no graph; nothing to compare)\n");
  } else {
    printf("against the floor of its scope (%s):\n", block ? "one per step" : "one per module");
    diffs = compare_info(&wat.info, block ? &seen.whole : &seen.each);
    printf("  %s\n", diffs ? "the graphs differ as listed: a difference above can explain a "
                             "difference in time"
                           : "no difference: same nodes, edges, kernels, launch attributes, "
                             "instantiate flags and upload");
  }

  struct floor_stepper fw = {&fl, w, ws, fs, tokens, !block};
  struct floor_stepper fc = {&fl, w, ws, (cudaStream_t)cgrt_stream(backend.rt), tokens, !block};
  struct exec_stepper xs = {&wat, w, ws, tokens, bucket, fs};
  struct hm_stepper es;
  hm_stepper_init(&es, &eager, tokens, tokens);
  const struct bench_stepper s_floor = {floor_step, &fw, fs};
  const struct bench_stepper s_floor_c = {floor_step, &fc, cgrt_stream(backend.rt)};
  const struct bench_stepper s_exec = {exec_step, &xs, fs};
  const int long_ms = o->warmup_ms > 0 ? o->warmup_ms : 100;

  printf("\nstep times (us; median and 10th/90th percentile of %d steps after %d warm-up steps "
         "and warm_ms of them); host_us: host time per step; ahead: host time of the timed "
         "steps over their GPU time (< 1: the host ran ahead, the GPU decides); probe_MHz: SM "
         "clock right after the timed steps (in-band)%s\n",
         o->steps, o->warmup,
         x.nvml.dev ? "; nvml: SM MHz before->after the timed steps, then the clock event "
                      "reasons mask"
                    : " (NVML not loaded)");
  printf("%3s  %-34s %6s %9s %9s %9s %9s %7s %8s%s\n", "#", "measurement", "warm_ms", "median",
         "p10", "p90", "host_us", "ahead", "probe_MHz", x.nvml.dev ? " nvml" : "");
  struct result c_first = r, f_after_eager, c_long, f_long, c_after, f_after;
  print_result(&x, "cgrt, first (it captures in warm-up)", 0, &r);
  /* The order the bench used to take: cgrt, eager, then the floor, each after a short warm-up. */
  if (measure(&x, &es.bs, 0, 0, &r) != 0)
    goto fail;
  print_result(&x, "eager", 0, &r);
  if (measure(&x, &s_floor, 0, 0, &f_after_eager) != 0)
    goto fail;
  print_result(&x, "floor, right after eager", 0, &f_after_eager);
  if (measure(&x, &hs.bs, 0, 0, &r) != 0)
    goto fail;
  print_result(&x, "cgrt, right after that floor", 0, &r);
  /* Each after a long warm-up of its own. */
  if (measure(&x, &s_floor, long_ms, 0, &f_long) != 0)
    goto fail;
  print_result(&x, "floor", long_ms, &f_long);
  if (measure(&x, &hs.bs, long_ms, 0, &c_long) != 0)
    goto fail;
  print_result(&x, "cgrt", long_ms, &c_long);
  if (measure(&x, &s_floor_c, long_ms, 0, &r) != 0)
    goto fail;
  print_result(&x, "floor on cgrt's stream", long_ms, &r);
  if (!eager_impl && wat.step_len > 0) {
    if (measure(&x, &s_exec, long_ms, 0, &r) != 0)
      goto fail;
    print_result(&x, "cgrt's executables by hand, floor's", long_ms, &r);
  } else {
    printf("%3d  (cgrt launched no executable: nothing to launch by hand)\n", ++x.index);
  }
  const uint64_t pace = (uint64_t)(c_long.host_us * 1e3);
  if (measure(&x, &s_floor, long_ms, pace, &r) != 0)
    goto fail;
  print_result(&x, "floor paced at cgrt's host_us", long_ms, &r);
  /* Eager again, then both right after it. */
  if (measure(&x, &es.bs, 0, 0, &r) != 0)
    goto fail;
  print_result(&x, "eager", 0, &r);
  if (measure(&x, &hs.bs, 0, 0, &c_after) != 0)
    goto fail;
  print_result(&x, "cgrt, right after eager", 0, &c_after);
  if (measure(&x, &s_floor, 0, 0, &f_after) != 0)
    goto fail;
  print_result(&x, "floor, after that cgrt", 0, &f_after);

  printf("\ncgrt / floor: in the old order (#1 / #3) %.3fx; each after a long warm-up "
         "(#6 / #5) %.3fx; right after eager, cgrt first (#11 / #12) %.3fx\n",
         c_first.med / f_after_eager.med, c_long.med / f_long.med, c_after.med / f_after.med);
  printf("reading: same graphs and a ratio near 1 after long warm-ups, with the SM clock lower "
         "where the time is higher: the GPU's clock state, left by what ran before, decided the "
         "old figure, not the work. A ratio that stays away from 1 with the graphs the same: "
         "compare #7 (stream), #8 (executables), #9 (host pace).\n");
  status = 0;
  goto out;
fail:
  fprintf(stderr, "cgrt bench: %s\n", backend.rt ? cgrt_last_error(backend.rt) : "failed");
out:
  if (backend.rt)
    cgrt_tool_watch_graphs(backend.rt, NULL, NULL);
  nvml_close(&x.nvml);
  floor_free(&fl);
  if (fs)
    cudaStreamDestroy(fs);
  cudaFree(x.probe_dev);
  cudaFreeHost(x.probe_host);
  cgrt_close(backend.rt);
  cgrt_close(eager.rt);
  if (ws)
    w->destroy(ws);
  cgrt_tool_config_free(cfg);
  cgrt_tool_config_free(eager_cfg);
  return status;
}
