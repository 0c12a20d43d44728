/* cgrt-graph-boundary: what a boundary between two CUDA graphs costs on the device, and whether
 * any way of launching the graphs makes it cheaper (issue 42, module scope).
 *
 * The chain: M modules of K kernels each, every kernel reading and writing the same buffer, so
 * each depends on its predecessor. Inside a module the kernels are programmatic dependents (PDL:
 * each waits in griddepcontrol.wait and lets its successor launch early), as kernels/cp.cu's are.
 * Each variant runs the chain R times back to back with an event between chains; a chain's device
 * time is the elapsed time between its two events, the host having queued ahead (it is checked:
 * the host's time to queue one chain is printed beside it). Variants:
 *   eager      every kernel launched by itself, PDL throughout (the eager step with pdl_entry)
 *   one        one graph of the whole chain, captured with PDL (step scope)
 *   one_nopdl  one graph of the whole chain, no PDL (what PDL buys inside a graph)
 *   modules    one graph per module, launched one after the other on one stream (module scope)
 *   mod_nopdl  as modules, captured without PDL (against one_nopdl: the boundary's own gap)
 *   children   one graph whose nodes are the M module graphs as child graphs, in a chain
 *   devflag    modules instantiated with cudaGraphInstantiateFlagDeviceLaunch, launched by the host
 *   pingpong   modules on two streams in turn, each waiting for an event recorded after the
 *              previous module's launch (the ordering by event, not by stream)
 *   joined     one graph built from the M module graphs' kernel nodes, each module's first kernel
 *              joined to the previous module's last by a programmatic edge
 * Output: one line per variant, chain device time (median, p10, p90 of R), the host's queueing
 * time per chain, and per boundary ((variant - one) / (M - 1)). Every variant's buffer is checked
 * against the eager run's, bit for bit.
 * Usage: cgrt-graph-boundary [M [K [ITERS [R]]]]   (defaults 32 4 64 200)
 * Built with the project when CUDA is found; runs on one GPU (CUDA_VISIBLE_DEVICES picks it). */
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "cgrt-graph-boundary: %s: %s (line %d)\n", #x, cudaGetErrorString(e_),  \
                   __LINE__);                                                                      \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

static const int kThreads = 256;
static const int kBlocks = 132;

/* One step of the chain: wait for the predecessor (PDL), let the successor launch, then a few
 * dependent multiply-adds per element, ordered by the kernel's position so that the result tells
 * the order the kernels ran in. */
__global__ void step_kernel(float *buf, int n, int iters, float a) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float v = buf[i];
    for (int k = 0; k < iters; k++)
      v = v * 0.999f + a;
    buf[i] = v;
  }
}

struct cfg {
  int m, k, iters, reps, n;
};

static void launch_one(float *buf, const cfg &c, int index, cudaStream_t s, bool pdl) {
  cudaLaunchConfig_t lc = {};
  cudaLaunchAttribute at[1];
  lc.gridDim = dim3(kBlocks);
  lc.blockDim = dim3(kThreads);
  lc.stream = s;
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = at;
  lc.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&lc, step_kernel, buf, c.n, c.iters, 0.001f * (float)(index % 97 + 1)));
}

static void launch_module(float *buf, const cfg &c, int module, cudaStream_t s, bool pdl) {
  for (int j = 0; j < c.k; j++)
    launch_one(buf, c, module * c.k + j, s, pdl);
}

static cudaGraph_t capture(float *buf, const cfg &c, int first, int count, cudaStream_t s,
                           bool pdl) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int mod = first; mod < first + count; mod++)
    launch_module(buf, c, mod, s, pdl);
  CK(cudaStreamEndCapture(s, &g));
  return g;
}

static cudaGraphExec_t instantiate(cudaGraph_t g, unsigned long long flags) {
  cudaGraphExec_t x;
  CK(cudaGraphInstantiateWithFlags(&x, g, flags));
  return x;
}

/* The kernel nodes of a captured module graph, in their chain order (a captured chain: each node
 * has at most one kernel predecessor, the first none). */
static std::vector<cudaGraphNode_t> chain_nodes(cudaGraph_t g) {
  size_t n = 0;
  CK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n), out;
  CK(cudaGraphGetNodes(g, nodes.data(), &n));
  size_t roots = 0;
  CK(cudaGraphGetRootNodes(g, nullptr, &roots));
  std::vector<cudaGraphNode_t> r(roots);
  CK(cudaGraphGetRootNodes(g, r.data(), &roots));
  if (roots != 1) {
    std::fprintf(stderr, "cgrt-graph-boundary: a module graph has %zu roots, not 1\n", roots);
    std::exit(1);
  }
  cudaGraphNode_t cur = r[0];
  for (;;) {
    out.push_back(cur);
    /* programmatic edges cannot be listed without their edge data ("lossy" otherwise) */
    cudaGraphNode_t next[2];
    cudaGraphEdgeData ed[2];
    size_t d = 2;
    CK(cudaGraphNodeGetDependentNodes(cur, next, ed, &d));
    if (d == 0)
      break;
    if (d != 1) {
      std::fprintf(stderr, "cgrt-graph-boundary: a module graph is not a chain\n");
      std::exit(1);
    }
    cur = next[0];
  }
  return out;
}

/* One graph holding copies of every module's kernels, modules joined by programmatic edges. */
static cudaGraph_t joined_graph(const std::vector<cudaGraph_t> &mods) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t prev = nullptr;
  for (cudaGraph_t m : mods) {
    std::vector<cudaGraphNode_t> nodes = chain_nodes(m);
    for (size_t i = 0; i < nodes.size(); i++) {
      cudaKernelNodeParams p;
      CK(cudaGraphKernelNodeGetParams(nodes[i], &p));
      cudaGraphNode_t node;
      CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &p));
      if (prev) {
        cudaGraphEdgeData ed = {};
        ed.from_port = cudaGraphKernelNodePortProgrammatic;
        ed.type = cudaGraphDependencyTypeProgrammatic;
        CK(cudaGraphAddDependencies(g, &prev, &node, &ed, 1));
      }
      prev = node;
    }
  }
  return g;
}

struct result {
  const char *name;
  std::vector<double> dev_us;
  double host_us;
  bool same;
};

static double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t i = (size_t)(q * (double)(v.size() - 1) + 0.5);
  return v[i];
}

int main(int argc, char **argv) {
  cfg c;
  c.m = argc > 1 ? std::atoi(argv[1]) : 32;
  c.k = argc > 2 ? std::atoi(argv[2]) : 4;
  c.iters = argc > 3 ? std::atoi(argv[3]) : 64;
  c.reps = argc > 4 ? std::atoi(argv[4]) : 200;
  c.n = kBlocks * kThreads * 2;
  if (c.m < 2 || c.k < 1 || c.iters < 0 || c.reps < 3) {
    std::fprintf(stderr, "usage: cgrt-graph-boundary [M>=2 [K>=1 [ITERS>=0 [R>=3]]]]\n");
    return 2;
  }
  int dev = 0, count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::fprintf(stderr, "cgrt-graph-boundary: no CUDA device: %s\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    return 2;
  }
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %s; chain of %d modules x %d kernels (%d blocks x %d threads, %d iterations "
              "per element), %d chains per variant\n",
              prop.name, c.m, c.k, kBlocks, kThreads, c.iters, c.reps);

  float *buf;
  CK(cudaMalloc(&buf, (size_t)c.n * sizeof(float)));
  std::vector<float> init(c.n), ref(c.n), got(c.n);
  for (int i = 0; i < c.n; i++)
    init[i] = (float)(i % 1000) * 0.001f;
  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

  cudaGraph_t g_one = capture(buf, c, 0, c.m, s, true);
  cudaGraph_t g_one_nopdl = capture(buf, c, 0, c.m, s, false);
  std::vector<cudaGraph_t> g_mod(c.m);
  std::vector<cudaGraphExec_t> x_mod(c.m), x_dev(c.m), x_nopdl(c.m);
  bool dev_ok = true;
  for (int mod = 0; mod < c.m; mod++) {
    g_mod[mod] = capture(buf, c, mod, 1, s, true);
    x_mod[mod] = instantiate(g_mod[mod], 0);
    x_nopdl[mod] = instantiate(capture(buf, c, mod, 1, s, false), 0);
    if (dev_ok) {
      cudaError_t e = cudaGraphInstantiateWithFlags(&x_dev[mod], g_mod[mod],
                                                    cudaGraphInstantiateFlagDeviceLaunch);
      if (e != cudaSuccess) {
        std::printf("devflag: not run: cudaGraphInstantiateFlagDeviceLaunch: %s\n",
                    cudaGetErrorString(e));
        (void)cudaGetLastError();
        dev_ok = false;
      } else {
        CK(cudaGraphUpload(x_dev[mod], s));
      }
    }
  }
  cudaGraph_t g_children;
  CK(cudaGraphCreate(&g_children, 0));
  cudaGraphNode_t prev = nullptr;
  for (int mod = 0; mod < c.m; mod++) {
    cudaGraphNode_t node;
    CK(cudaGraphAddChildGraphNode(&node, g_children, prev ? &prev : nullptr, prev ? 1 : 0,
                                  g_mod[mod]));
    prev = node;
  }
  cudaGraph_t g_joined = joined_graph(g_mod);
  cudaGraphExec_t x_one = instantiate(g_one, 0), x_one_nopdl = instantiate(g_one_nopdl, 0);
  cudaGraphExec_t x_children = instantiate(g_children, 0), x_joined = instantiate(g_joined, 0);
  for (cudaGraphExec_t x : {x_one, x_one_nopdl, x_children, x_joined})
    CK(cudaGraphUpload(x, s));
  std::vector<cudaEvent_t> ev_mod(c.m);
  for (auto &e : ev_mod)
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  enum { EAGER, ONE, ONE_NOPDL, MODULES, MOD_NOPDL, CHILDREN, DEVFLAG, PINGPONG, JOINED, NVAR };
  const char *names[NVAR] = {"eager",    "one",     "one_nopdl", "modules", "mod_nopdl",
                             "children", "devflag", "pingpong",  "joined"};
  /* the modules' graphs one after the other on s */
  auto each = [&](const std::vector<cudaGraphExec_t> &x) {
    for (cudaGraphExec_t e : x)
      CK(cudaGraphLaunch(e, s));
  };
  auto chain = [&](int v) {
    switch (v) {
    case EAGER:
      for (int mod = 0; mod < c.m; mod++)
        launch_module(buf, c, mod, s, true);
      break;
    case ONE:
      CK(cudaGraphLaunch(x_one, s));
      break;
    case ONE_NOPDL:
      CK(cudaGraphLaunch(x_one_nopdl, s));
      break;
    case MODULES:
      each(x_mod);
      break;
    case MOD_NOPDL:
      each(x_nopdl);
      break;
    case CHILDREN:
      CK(cudaGraphLaunch(x_children, s));
      break;
    case DEVFLAG:
      each(x_dev);
      break;
    case PINGPONG:
      /* Module 0 on s (after the chain's start event), then each on the other stream after the
         previous one's event; the last one's event brings s back. */
      for (int mod = 0; mod < c.m; mod++) {
        cudaStream_t on = mod % 2 ? s2 : s;
        if (mod > 0)
          CK(cudaStreamWaitEvent(on, ev_mod[mod - 1], 0));
        CK(cudaGraphLaunch(x_mod[mod], on));
        CK(cudaEventRecord(ev_mod[mod], on));
      }
      CK(cudaStreamWaitEvent(s, ev_mod[c.m - 1], 0));
      break;
    case JOINED:
      CK(cudaGraphLaunch(x_joined, s));
      break;
    }
  };

  std::vector<result> res;
  std::vector<cudaEvent_t> ev(c.reps + 1);
  for (auto &e : ev)
    CK(cudaEventCreate(&e));
  for (int round = 0; round < 2; round++) { /* round 0 warms every variant up, round 1 is kept */
    for (int v = 0; v < NVAR; v++) {
      if (v == DEVFLAG && !dev_ok)
        continue;
      CK(cudaMemcpy(buf, init.data(), (size_t)c.n * sizeof(float), cudaMemcpyHostToDevice));
      CK(cudaDeviceSynchronize());
      auto t0 = std::chrono::steady_clock::now();
      CK(cudaEventRecord(ev[0], s));
      for (int r = 0; r < c.reps; r++) {
        chain(v);
        CK(cudaEventRecord(ev[r + 1], s));
      }
      auto t1 = std::chrono::steady_clock::now();
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(got.data(), buf, (size_t)c.n * sizeof(float), cudaMemcpyDeviceToHost));
      if (round == 0)
        continue;
      result r;
      r.name = names[v];
      r.host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / c.reps;
      for (int k = 1; k < c.reps; k++) { /* the first chain has no queue ahead of it: left out */
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]));
        r.dev_us.push_back(ms * 1000.0);
      }
      if (v == EAGER)
        ref = got;
      r.same = std::memcmp(ref.data(), got.data(), (size_t)c.n * sizeof(float)) == 0;
      res.push_back(r);
    }
  }
  const double one = pct(res[ONE].dev_us, 0.5); /* res[] holds eager, then one */
  std::printf("%-10s %10s %10s %10s %10s %14s %s\n", "variant", "median_us", "p10_us", "p90_us",
              "host_us", "per_boundary", "bitwise");
  for (const result &r : res) {
    const double med = pct(r.dev_us, 0.5);
    std::printf("%-10s %10.1f %10.1f %10.1f %10.1f %14.2f %s%s\n", r.name, med, pct(r.dev_us, 0.1),
                pct(r.dev_us, 0.9), r.host_us, (med - one) / (c.m - 1), r.same ? "yes" : "NO",
                r.host_us > med ? " (host-bound: the host queued slower than the device ran)" : "");
  }
  bool all = true;
  for (const result &r : res)
    all = all && r.same;
  return all ? 0 : 1;
}
