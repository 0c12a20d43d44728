/*
 * bench_train.c - `cgrt bench CONF --workload train`: the train workload (attention, mamba scan,
 * MLP and MoE layers over microbatches; forward, backward, SGD) run as a training engine runs it
 * (kernels/train_host.c), under the configured backend and under eager, against two raw-graph
 * floors: the whole step body as one graph (what full_iteration should match), and one graph per
 * call of a scoped module with everything else eager (what transformer_engine and local should
 * match). The backend's losses and weights after all steps are compared bitwise with eager's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tool.h"
#include "tool_args.h"

#include <cuda_runtime_api.h>

#include "train_host.h"

#define MAX_CALLS 512

/* The raw floors, captured by hand on one workload. */
struct train_floor {
  cgrtk_train *t;
  cudaStream_t s;
  uint32_t scoped; /* CGRT_KIND_BIT of the kinds graphed per call; 0: all */
  int n, mb;
  int kinds[TRAIN_HOST_MAX_MODULES];
  cudaGraphExec_t call[2][8][TRAIN_HOST_MAX_MODULES]; /* [dir][microbatch][module] */
  cudaGraphExec_t whole;
};

static int is_scoped(const struct train_floor *f, int i) {
  return f->scoped == 0 || (f->scoped & CGRT_KIND_BIT(f->kinds[i]));
}

static int run_call(struct train_floor *f, int dir, int mb, int i) {
  return dir ? cgrtk_train_backward(f->t, i, mb, f->s) : cgrtk_train_forward(f->t, i, mb, f->s);
}

/* The step body as the host runs it; per_call: scoped calls launch their raw graphs. */
static int floor_body(struct train_floor *f, int per_call) {
  int rc = 0;
  for (int mb = 0; mb < f->mb && rc == 0; mb++) {
    for (int i = 0; i < f->n && rc == 0; i++)
      rc = per_call && is_scoped(f, i) ? (int)cudaGraphLaunch(f->call[0][mb][i], f->s)
                                       : run_call(f, 0, mb, i);
    if (rc == 0)
      rc = cgrtk_train_loss(f->t, mb, f->s);
    for (int i = f->n; rc == 0 && i-- > 0;)
      rc = per_call && is_scoped(f, i) ? (int)cudaGraphLaunch(f->call[1][mb][i], f->s)
                                       : run_call(f, 1, mb, i);
  }
  return rc == 0 ? cgrtk_train_update(f->t, f->s) : rc;
}

static int capture(struct train_floor *f, int dir, int mb, int i, cudaGraphExec_t *exec) {
  cudaGraph_t g = NULL;
  if (cudaStreamBeginCapture(f->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    return CGRT_E_DEVICE;
  int rc = i < 0 ? floor_body(f, 0) : run_call(f, dir, mb, i);
  if (cudaStreamEndCapture(f->s, &g) != cudaSuccess || rc != 0)
    return CGRT_E_CAPTURE;
  cudaError_t e = cudaGraphInstantiateWithFlags(exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  cudaGraphDestroy(g);
  if (e == cudaSuccess)
    e = cudaGraphUpload(*exec, f->s);
  return e == cudaSuccess ? 0 : CGRT_E_DEVICE;
}

static int floor_build(struct train_floor *f) {
  int rc = capture(f, 0, 0, -1, &f->whole);
  for (int dir = 0; dir < 2 && rc == 0; dir++)
    for (int mb = 0; mb < f->mb && rc == 0; mb++)
      for (int i = 0; i < f->n && rc == 0; i++)
        if (is_scoped(f, i))
          rc = capture(f, dir, mb, i, &f->call[dir][mb][i]);
  return rc;
}

static void floor_free(struct train_floor *f) {
  if (f->whole)
    cudaGraphExecDestroy(f->whole);
  for (int dir = 0; dir < 2; dir++)
    for (int mb = 0; mb < 8; mb++)
      for (int i = 0; i < TRAIN_HOST_MAX_MODULES; i++)
        if (f->call[dir][mb][i])
          cudaGraphExecDestroy(f->call[dir][mb][i]);
}

static int host_step(void *arg, int timed) {
  (void)timed;
  return train_host_step(arg, NULL);
}

struct floor_step {
  struct train_floor *f;
  int per_call;
};

static int floor_step(void *arg, int timed) {
  (void)timed;
  struct floor_step *fs = arg;
  int rc = cgrtk_train_stage(fs->f->t, 0, fs->f->s);
  if (rc == 0)
    rc = fs->per_call ? floor_body(fs->f, 1) : (int)cudaGraphLaunch(fs->f->whole, fs->f->s);
  return rc;
}

/* A workload whose shape follows the config's [host] section. */
static int train_create(const struct cgrt_config_view *v, cgrtk_train **t, char *err,
                        size_t errlen) {
  struct cgrtk_train_cfg cfg;
  cgrtk_train_default_cfg(&cfg);
  if (v->moe_experts > 1)
    cfg.experts = v->moe_experts;
  cfg.capacity_mode =
      v->moe_capacity == CGRT_MOE_CAPACITY_DROP ? CGRTK_MOE_DROP : CGRTK_MOE_DROP_AND_PAD;
  return cgrtk_train_create(t, &cfg, err, errlen);
}

/*
 * The backend's host and eager's, each over its own workload, timed in turn in blocks
 * (bench_time_blocks) so that both meet the same host and GPU conditions: timed one after the
 * other, a launch-bound eager figure follows the host's moment, and the speedup with it.
 */
static int run_hosts(struct train_host *backend, struct train_host *eager,
                     const struct bench_opts *o, double *backend_us, double *eager_us) {
  const struct bench_stepper st[2] = {{host_step, backend, cgrt_stream(backend->rt)},
                                      {host_step, eager, cgrt_stream(eager->rt)}};
  double us[2] = {0};
  int rc = bench_time_blocks(st, 2, o, us);
  *backend_us = us[0];
  *eager_us = us[1];
  return rc;
}

static int same_state(struct train_host *a, struct train_host *b) {
  size_t n = cgrtk_train_param_count(a->t);
  float *pa = malloc(n * sizeof(float)), *pb = malloc(n * sizeof(float));
  float la[8] = {0}, lb[8] = {0};
  int same = 0;
  cgrt_synchronize(a->rt);
  cgrt_synchronize(b->rt);
  if (pa && pb && cgrtk_train_read_params(a->t, pa, n, cgrt_stream(a->rt)) == 0 &&
      cgrtk_train_read_params(b->t, pb, n, cgrt_stream(b->rt)) == 0 &&
      cgrtk_train_read_loss(a->t, la, cgrt_stream(a->rt)) == 0 &&
      cgrtk_train_read_loss(b->t, lb, cgrt_stream(b->rt)) == 0) {
    cgrt_synchronize(a->rt);
    cgrt_synchronize(b->rt);
    same = memcmp(pa, pb, n * sizeof(float)) == 0 && memcmp(la, lb, sizeof(la)) == 0;
  }
  free(pa);
  free(pb);
  return same;
}

int bench_train(const struct bench_opts *o) {
  if (bench_no_device("cgrt bench"))
    return EXIT_UNUSABLE;
  static const char *default_conf = "[cuda_graph]\nimpl = transformer_engine\nmodules = attn "
                                    "mlp\n[runtime]\ndriver = cuda\nlog = warn\n";
  cgrt_tool_config *cfg = NULL, *eager_cfg = NULL;
  int status = tool_load_config(o->conf, default_conf, "<bench default>", &cfg, 0);
  if (status != EXIT_VALID)
    return status;
  cgrt_tool_config_view(cfg)->driver = CGRT_DRIVER_CUDA;
  bench_opts_apply(o, cgrt_tool_config_view(cfg));
  struct cgrt_config_view v = *cgrt_tool_config_view(cfg);
  char impl[128], err[512];
  snprintf(impl, sizeof(impl), "%s", v.impl);
  v.impl = impl; /* the view's own string goes with the configuration */
  if (tool_eager_config(&v, &eager_cfg) != EXIT_VALID) {
    cgrt_tool_config_free(cfg);
    return EXIT_UNUSABLE;
  }
  cudaSetDevice(v.device);
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, v.device);

  status = EXIT_UNUSABLE;
  cgrtk_train *tb = NULL, *te = NULL;
  cgrt_runtime *rb = NULL, *re = NULL;
  struct train_host hb, he;
  struct train_floor fl = {0};
  double backend_us = 0, eager_us = 0, whole_us = 0, scoped_us = 0;
  if (train_create(&v, &tb, err, sizeof(err)) != 0 ||
      train_create(&v, &te, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", err);
    goto out;
  }
  int orc = cgrt_tool_open(&rb, cfg, NULL, NULL);
  cfg = NULL; /* consumed */
  if (orc == 0)
    orc = cgrt_tool_open(&re, eager_cfg, NULL, NULL);
  else
    cgrt_tool_config_free(eager_cfg);
  eager_cfg = NULL;
  if (orc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(NULL));
    goto out;
  }
  if (train_host_open(&hb, tb, rb) != 0 || train_host_open(&he, te, re) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(rb));
    goto out;
  }
  struct bench_opts ob = *o;
  if (ob.warmup < v.warmup_steps + 2)
    ob.warmup = v.warmup_steps + 2; /* past the capture step */
  cgrt_stats st = {.struct_size = sizeof(st)};
  if (run_hosts(&hb, &he, &ob, &backend_us, &eager_us) != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(rb));
    goto out;
  }
  cgrt_stats_get(rb, &st);
  int bitwise = same_state(&hb, &he);

  /* The floors run on the eager runtime's workload (its numbers no longer matter). */
  fl.t = te;
  fl.s = (cudaStream_t)cgrt_stream(re);
  fl.scoped = strcmp(impl, "full_iteration") == 0 ? 0 : v.modules;
  fl.n = cgrtk_train_num_modules(te);
  fl.mb = cgrtk_train_config(te)->microbatches;
  for (int i = 0; i < fl.n; i++) {
    char name[64];
    int layer;
    cgrtk_train_module(te, i, name, sizeof(name), &fl.kinds[i], &layer);
  }
  if (fl.mb > 8 || floor_build(&fl) != 0) {
    fprintf(stderr, "cgrt bench: capturing the raw-graph floor failed\n");
    goto out;
  }
  struct floor_step fw = {&fl, 0}, fc = {&fl, 1};
  struct bench_stepper sw = {floor_step, &fw, fl.s}, sc = {floor_step, &fc, fl.s};
  if (bench_time_steps(&sw, o, &whole_us) != 0 || bench_time_steps(&sc, o, &scoped_us) != 0) {
    fprintf(stderr, "cgrt bench: timing the raw-graph floor failed\n");
    goto out;
  }
  int whole = strcmp(impl, "full_iteration") == 0 || strcmp(impl, "none") == 0;
  double vs = backend_us / (whole ? whole_us : scoped_us);
  char modules[128] = "";
  for (int k = 0, n = 0; k < CGRT_KIND_COUNT; k++)
    if (v.modules & CGRT_KIND_BIT(k))
      n += snprintf(modules + n, sizeof(modules) - (size_t)n, "%s%s", n ? " " : "",
                    cgrt_kind_name((cgrt_kind)k));
  const struct cgrtk_train_cfg *tc = cgrtk_train_config(te);
  if (o->json) {
    printf("{\"workload\":\"train\",\"backend\":");
    tool_json_string(impl); /* may be a path */
    printf(",\"modules\":\"%s\",\"max_queued_steps\":%d,\"device\":", modules, v.max_queued_steps);
    tool_json_string(prop.name);
    printf(",\"eager_us\":%.1f,\"backend_us\":%.1f,\"speedup\":%.3f,\"floor_whole_us\":%.1f,"
           "\"floor_scoped_us\":%.1f,\"vs_floor\":%.4f,\"capture_ms\":%.3f,"
           "\"instantiate_ms\":%.3f,\"graphs\":%llu,\"graph_mem_mib\":%.1f,"
           "\"graph_bytes\":%llu,\"graph_nodes\":%llu,\"bitwise\":%s",
           eager_us, backend_us, eager_us / backend_us, whole_us, scoped_us, vs,
           (double)st.capture_ns / 1e6, (double)st.instantiate_ns / 1e6,
           (unsigned long long)st.live_graphs, (double)st.graph_mem_reserved / (1 << 20),
           (unsigned long long)st.graph_bytes, (unsigned long long)st.graph_nodes,
           bitwise ? "true" : "false");
    bench_print_checks(rb, 1);
    printf("}\n");
  } else {
    printf("cgrt bench: workload train (%d layers x %d microbatches of %d tokens, d %d, %d "
           "experts, fp32), backend %s%s%s%s, %s\n",
           tc->layers, tc->microbatches, tc->tokens, tc->d_model, tc->experts, impl,
           modules[0] ? " (modules " : "", modules, modules[0] ? ")" : "", prop.name);
    printf("median of %d steps; floor: %s\n", o->steps,
           whole ? "the whole body as one raw graph"
                 : "one raw graph per call of a scoped module, the rest eager");
    bench_print_queue(o, v.max_queued_steps);
    bench_print_budget(o);
    printf("%10s %10s %8s %12s %12s %9s %10s %9s %6s %10s %10s %7s %8s\n", "eager_us", "cgrt_us",
           "speedup", "floor_whole", "floor_scoped", "vs_floor", "capture_ms", "inst_ms", "graphs",
           "graph_MiB", "pool_MiB", "nodes", "bitwise");
    printf("%10.1f %10.1f %7.2fx %12.1f %12.1f %8.3fx %10.2f %9.2f %6llu %10.1f %10.1f %7llu %8s\n",
           eager_us, backend_us, eager_us / backend_us, whole_us, scoped_us, vs,
           (double)st.capture_ns / 1e6, (double)st.instantiate_ns / 1e6,
           (unsigned long long)st.live_graphs, (double)st.graph_bytes / (1 << 20),
           (double)st.graph_mem_reserved / (1 << 20), (unsigned long long)st.graph_nodes,
           bitwise ? "equal" : "DIFFER");
    bench_print_checks(rb, 0);
  }
  status = bitwise ? 0 : EXIT_INVALID;
out:
  floor_free(&fl);
  cgrt_close(rb);
  cgrt_close(re);
  cgrtk_train_destroy(tb);
  cgrtk_train_destroy(te);
  cgrt_tool_config_free(cfg);
  cgrt_tool_config_free(eager_cfg);
  return status;
}

int plan_train(const char *conf, plan_report_fn report, void *user) {
  static const char *default_conf = "[cuda_graph]\nimpl = transformer_engine\nmodules = attn "
                                    "mlp\n[runtime]\ndriver = cuda\nlog = warn\n";
  cgrt_tool_config *cfg = NULL;
  uint64_t budget = 0;
  int status = plan_config(conf, default_conf, "<plan default>", &cfg, &budget);
  if (status != EXIT_VALID)
    return status;
  struct cgrt_config_view v = *cgrt_tool_config_view(cfg);
  char err[512], what[256];
  cgrtk_train *t = NULL;
  cgrt_runtime *rt = NULL;
  struct train_host h;
  status = EXIT_UNUSABLE;
  cudaSetDevice(v.device);
  if (train_create(&v, &t, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt plan: %s\n", err);
    goto out;
  }
  int orc = cgrt_tool_open(&rt, cfg, NULL, NULL);
  cfg = NULL; /* consumed */
  if (orc != 0) {
    fprintf(stderr, "cgrt plan: %s\n", cgrt_last_error(NULL));
    goto out;
  }
  if (train_host_open(&h, t, rt) != 0) {
    fprintf(stderr, "cgrt plan: %s\n", cgrt_last_error(rt));
    goto out;
  }
  /* Warm-up steps, the capture step, and one more for keys first seen late. */
  for (int i = 0; i < v.warmup_steps + 2; i++)
    if (train_host_step(&h, NULL) != 0) {
      fprintf(stderr, "cgrt plan: %s\n", cgrt_last_error(rt));
      goto out;
    }
  const struct cgrtk_train_cfg *tc = cgrtk_train_config(t);
  snprintf(what, sizeof(what), "%d layers x %d microbatches of %d tokens, d %d, %d experts, fp32",
           tc->layers, tc->microbatches, tc->tokens, tc->d_model, tc->experts);
  status = report(rt, what, budget, user);
out:
  cgrt_close(rt);
  cgrtk_train_destroy(t);
  cgrt_tool_config_free(cfg);
  return status;
}
