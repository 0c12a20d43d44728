/* cgrt-nccl-boundary: what the end of a CUDA graph that holds an NCCL collective costs on the
 * device, against one that does not (issue 42: module scope's graph boundary is 1.6 us a boundary
 * at cp 1 and 3.3 at cp 2, and a kernel trace puts the difference after the graphs that hold the
 * all-gather).
 *
 * Two GPUs, one thread each, one NCCL communicator per GPU (ncclCommInitAll), NCCL's graph
 * mixing off unless NCCL_GRAPH_MIXING_SUPPORT is set (the cp bench's setting). A step is M
 * modules, A and B in turn, as the cp workload's attention and MLP: A is three small kernels with
 * a middle part between the first and the second, B two small kernels. The middle part, by
 * variant:
 *   ag      ncclAllGather of the step's rows (each GPU's share into the gathered buffer)
 *   peer    a kernel writing the same bytes straight into the other GPU's buffer (peer access)
 *   local   a kernel writing the same bytes into this GPU's own buffer
 *   cluster local's kernel launched with a cluster dimension of 4 (as NCCL launches its kernels
 *           on this GPU unless NCCL_CGA_CLUSTER_SIZE says otherwise)
 *   remote  local's kernel launched in the remote memory sync domain (as NCCL's are)
 *   smem    local's kernel with 40 KiB of static shared memory (its neighbours have none)
 *   host    local's kernel writing into mapped host memory instead (over PCIe)
 *   host1   one thread writing one word into mapped host memory (a progress report to the host)
 *   peer+remote   peer's writes launched in the remote memory sync domain
 *   spread  local's kernel with a cluster of 4 and the spread cluster scheduling policy (NCCL's)
 *   nvlsched  local's kernel with the NVLink-utilization-centric scheduling hint (CUDA 13; NCCL
 *           sets it on newer GPUs)
 *   bigarg  local's copy by a kernel whose parameters take 4 KiB (NCCL passes its work there)
 *   nccl-attrs  peer's writes with all of NCCL's launch attributes above at once
 *   peer+fence  peer's writes, each thread then a system-scope fence (__threadfence_system)
 *   peer+sync   peer's writes, then a one-thread kernel that meets the other GPU as a collective
 *           does: a system-scope atomic on the other GPU's counter, then a wait on its own
 *   ag+carve, smem+carve   ag and smem with every kernel node of every graph set to prefer the
 *           largest shared memory carveout (cudaLaunchAttributePreferredSharedMemoryCarveout)
 *   none    nothing (A is its three kernels)
 * Each variant runs two ways: a graph per module (M executables launched in turn on one stream:
 * module scope) and one graph of the whole step (step scope). A step's device time is the time
 * between events recorded around it, R steps queued back to back; both GPUs run the same variant
 * at once (the all-gather couples them) and each prints its median, p10 and p90, and the cost of a
 * boundary: (modules - step) / (M - 1). A graph of module A of each variant is described: its
 * nodes by type, and its kernel nodes' functions and memory sync domains.
 * Usage: cgrt-nccl-boundary [M [ROWS [R [VARIANTS]]]]   (defaults 32 32 400, every variant; M
 * even; VARIANTS: names joined by commas, e.g. ag,local). CGRT_PROBE_AHEAD=K: the host queues
 * at most K steps ahead of the device (it waits for step i - K before it launches step i).
 * Built with the project when CUDA and NCCL are found; needs two GPUs with peer access. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "cgrt-nccl-boundary: %s: %s (line %d)\n", #x, cudaGetErrorString(e_),   \
                   __LINE__);                                                                      \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)
#define NK(x)                                                                                      \
  do {                                                                                             \
    ncclResult_t r_ = (x);                                                                         \
    if (r_ != ncclSuccess) {                                                                       \
      std::fprintf(stderr, "cgrt-nccl-boundary: %s: %s (line %d)\n", #x, ncclGetErrorString(r_),   \
                   __LINE__);                                                                      \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

static const int kD = 128; /* floats a row */
static const int kThreads = 256;

/* A small kernel: a few dependent multiply-adds on every element of x. */
__global__ void work(float *x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float v = x[i];
    for (int k = 0; k < 16; k++)
      v = v * 0.999f + 0.001f;
    x[i] = v;
  }
}

/* The middle part of peer and local: n floats of src into dst (the other GPU's or this one's). */
__global__ void put(float *dst, const float *src, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = src[i];
}

enum variant {
  V_AG,
  V_PEER,
  V_LOCAL,
  V_CLUSTER,
  V_REMOTE,
  V_SMEM,
  V_NONE,
  V_AG_CARVE,
  V_SMEM_CARVE,
  V_HOST,
  V_HOST1,
  V_PEER_REMOTE,
  V_SPREAD,
  V_NVLSCHED,
  V_BIGARG,
  V_NCCL_ATTRS,
  V_PEER_FENCE,
  V_PEER_SYNC,
  V_COUNT
};
static const char *const kVariant[V_COUNT] = {
    "ag",     "peer",     "local",      "cluster",    "remote",     "smem",
    "none",   "ag+carve", "smem+carve", "host",       "host1",      "peer+remote",
    "spread", "nvlsched", "bigarg",     "nccl-attrs", "peer+fence", "peer+sync"};

/* peer's writes, each thread's followed by a system-scope fence. */
__global__ void put_fence(float *dst, const float *src, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = src[i];
  __threadfence_system();
}

/* The two GPUs meet, as a collective's kernels do: one thread counts this meeting (epoch), adds
   one to the other GPU's counter with a system-scope atomic and waits until its own counter,
   which the other GPU's kernel adds to, reaches the count. Both GPUs launch it equally often. */
__global__ void meet(unsigned *epoch, unsigned *peer_count, volatile unsigned *own_count) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned e = ++*epoch;
    __threadfence_system();
    atomicAdd_system(peer_count, 1u);
    while (*own_count < e) {
    }
    __threadfence_system();
  }
}

/* One word into host memory, as a kernel that reports its progress to the host does. */
__global__ void put_one(volatile unsigned *host_word, unsigned v) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *host_word = v;
}

/* local's kernel with 40 KiB of static shared memory: a kernel that needs a larger shared memory
   carveout than its neighbours, as NCCL's does. */
#define SMEM_FLOATS 10240
__global__ void put_smem(float *dst, const float *src, int n) {
  __shared__ float sb[SMEM_FLOATS];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    sb[threadIdx.x] = src[i];
    dst[i] = sb[threadIdx.x];
  }
}

/* local's kernel launched with one launch attribute of NCCL's kernels on this GPU: a cluster
   dimension (NCCL_CGA_CLUSTER_SIZE) or the remote memory sync domain (NCCL_MEM_SYNC_DOMAIN). */
/* Which of NCCL's launch attributes (src/enqueue.cc) put_with sets. */
enum { A_CLUSTER = 1, A_REMOTE = 2, A_SPREAD = 4, A_NVLSCHED = 8 };

static void put_with(float *dst, const float *src, int n, int blocks, cudaStream_t s, int attrs) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[4];
  unsigned k = 0;
  cfg.gridDim = dim3((unsigned)((blocks + 3) / 4 * 4));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = s;
  if (attrs & A_CLUSTER) {
    at[k].id = cudaLaunchAttributeClusterDimension;
    at[k].val.clusterDim.x = 4, at[k].val.clusterDim.y = 1, at[k].val.clusterDim.z = 1;
    k++;
  }
  if (attrs & A_SPREAD) {
    at[k].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
    at[k].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicySpread;
    k++;
  }
  if (attrs & A_REMOTE) {
    at[k].id = cudaLaunchAttributeMemSyncDomain;
    at[k].val.memSyncDomain = cudaLaunchMemSyncDomainRemote;
    k++;
  }
  if (attrs & A_NVLSCHED) {
    at[k].id = cudaLaunchAttributeNvlinkUtilCentricScheduling;
    at[k].val.nvlinkUtilCentricScheduling = 1;
    k++;
  }
  cfg.attrs = at;
  cfg.numAttrs = k;
  CK(cudaLaunchKernelEx(&cfg, put, dst, src, n));
}

/* A kernel whose parameters take 4 KiB, as NCCL's do (its work descriptors in the arguments). */
struct big_args {
  float *dst;
  const float *src;
  int n;
  char pad[4096 - 2 * sizeof(float *) - sizeof(int)];
};
__global__ void put_big(const __grid_constant__ big_args a) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += gridDim.x * blockDim.x)
    a.dst[i] = a.src[i] + (float)a.pad[i % 16];
}

struct rank {
  int dev, modules, rows, steps;
  ncclComm_t comm;
  cudaStream_t s;
  float *x, *send, *gathered, *peer_gathered; /* peer_gathered: the other GPU's gathered buffer */
  float *host;                                /* mapped pinned host memory, its device address */
  unsigned *count;      /* [0]: meet's epoch; [1]: this GPU's counter, the other GPU adds to it */
  unsigned *peer_count; /* the other GPU's counter */
  int run[V_COUNT];     /* the variants to run */
  int ahead;            /* steps the host may queue ahead (0: no limit) */
  pthread_barrier_t *bar;
  double med[V_COUNT][2], p10[V_COUNT][2], p90[V_COUNT][2];
};

static int blocks_for(int n) {
  return std::min(132, (n + kThreads - 1) / kThreads);
}

static void module(struct rank *r, int a, enum variant v) {
  const int n = r->rows * kD;
  v = v == V_AG_CARVE ? V_AG : v == V_SMEM_CARVE ? V_SMEM : v;
  work<<<blocks_for(n), kThreads, 0, r->s>>>(r->x, n);
  if (a) {
    const size_t off = (size_t)r->dev * n; /* this rank's share of the gathered buffer */
    switch (v) {
    case V_AG:
      NK(ncclAllGather(r->send, r->gathered, (size_t)n, ncclFloat, r->comm, r->s));
      break;
    case V_PEER:
      put<<<blocks_for(n), kThreads, 0, r->s>>>(r->peer_gathered + off, r->x, n);
      break;
    case V_LOCAL:
      put<<<blocks_for(n), kThreads, 0, r->s>>>(r->gathered + off, r->x, n);
      break;
    case V_CLUSTER:
    case V_REMOTE:
      put_with(r->gathered + off, r->x, n, blocks_for(n), r->s,
               v == V_CLUSTER ? A_CLUSTER : A_REMOTE);
      break;
    case V_SMEM:
      put_smem<<<blocks_for(n), kThreads, 0, r->s>>>(r->gathered + off, r->x, n);
      break;
    case V_HOST:
      put<<<blocks_for(n), kThreads, 0, r->s>>>(r->host, r->x, n);
      break;
    case V_PEER_REMOTE:
      put_with(r->peer_gathered + off, r->x, n, blocks_for(n), r->s, A_REMOTE);
      break;
    case V_SPREAD:
      put_with(r->gathered + off, r->x, n, blocks_for(n), r->s, A_CLUSTER | A_SPREAD);
      break;
    case V_NVLSCHED:
      put_with(r->gathered + off, r->x, n, blocks_for(n), r->s, A_NVLSCHED);
      break;
    case V_NCCL_ATTRS:
      put_with(r->peer_gathered + off, r->x, n, blocks_for(n), r->s,
               A_CLUSTER | A_SPREAD | A_REMOTE | A_NVLSCHED);
      break;
    case V_PEER_FENCE:
      put_fence<<<blocks_for(n), kThreads, 0, r->s>>>(r->peer_gathered + off, r->x, n);
      break;
    case V_PEER_SYNC:
      put<<<blocks_for(n), kThreads, 0, r->s>>>(r->peer_gathered + off, r->x, n);
      meet<<<1, 32, 0, r->s>>>(r->count, r->peer_count, r->count + 1);
      break;
    case V_BIGARG: {
      big_args a = {};
      a.dst = r->gathered + off, a.src = r->x, a.n = n;
      put_big<<<blocks_for(n), kThreads, 0, r->s>>>(a);
      break;
    } break;
    case V_HOST1:
      put_one<<<1, 32, 0, r->s>>>((volatile unsigned *)r->host, 1u);
      break;
    default:
      break;
    }
    work<<<blocks_for(n), kThreads, 0, r->s>>>(r->x, n);
  }
  work<<<blocks_for(n), kThreads, 0, r->s>>>(r->x, n);
  CK(cudaGetLastError());
}

static cudaGraphExec_t capture(struct rank *r, int first, int count, enum variant v,
                               cudaGraph_t *keep) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(r->s, cudaStreamCaptureModeThreadLocal));
  for (int m = first; m < first + count; m++)
    module(r, m % 2 == 0, v);
  CK(cudaStreamEndCapture(r->s, &g));
  if (v == V_AG_CARVE || v == V_SMEM_CARVE) {
    /* every kernel node prefers the largest shared memory carveout: one configuration for all */
    size_t n = 0;
    CK(cudaGraphGetNodes(g, NULL, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    CK(cudaGraphGetNodes(g, nodes.data(), &n));
    for (size_t i = 0; i < n; i++) {
      cudaGraphNodeType t;
      CK(cudaGraphNodeGetType(nodes[i], &t));
      cudaLaunchAttributeValue val = {};
      val.sharedMemCarveout = 100;
      if (t == cudaGraphNodeTypeKernel)
        CK(cudaGraphKernelNodeSetAttribute(nodes[i],
                                           cudaLaunchAttributePreferredSharedMemoryCarveout, &val));
    }
  }
  cudaGraphExec_t x;
  CK(cudaGraphInstantiateWithFlags(&x, g, 0));
  CK(cudaGraphUpload(x, r->s));
  if (keep)
    *keep = g;
  else
    CK(cudaGraphDestroy(g));
  return x;
}

static void describe(struct rank *r, cudaGraph_t g, enum variant v) {
  size_t n = 0;
  CK(cudaGraphGetNodes(g, NULL, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CK(cudaGraphGetNodes(g, nodes.data(), &n));
  std::printf("  rank %d, variant %s, module A's graph: %zu nodes:", r->dev, kVariant[v], n);
  for (size_t i = 0; i < n; i++) {
    cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(nodes[i], &t));
    if (t != cudaGraphNodeTypeKernel) {
      std::printf(" [type %d]", (int)t);
      continue;
    }
    cudaKernelNodeParams p;
    const char *name = "?";
    if (cudaGraphKernelNodeGetParams(nodes[i], &p) != cudaSuccess ||
        cudaFuncGetName(&name, p.func) != cudaSuccess || !name)
      name = "?";
    (void)cudaGetLastError();
    cudaLaunchAttributeValue d;
    int dom = -1;
    if (cudaGraphKernelNodeGetAttribute(nodes[i], cudaLaunchAttributeMemSyncDomain, &d) ==
        cudaSuccess)
      dom = (int)d.memSyncDomain;
    (void)cudaGetLastError();
    cudaFuncAttributes fa = {};
    if (cudaFuncGetAttributes(&fa, p.func) != cudaSuccess)
      fa.sharedSizeBytes = (size_t)-1;
    (void)cudaGetLastError();
    /* the attributes NCCL sets (src/enqueue.cc): cluster, its scheduling policy, NVLink hint */
    unsigned cl = 0, pol = 0, nvl = 0;
    if (cudaGraphKernelNodeGetAttribute(nodes[i], cudaLaunchAttributeClusterDimension, &d) ==
        cudaSuccess)
      cl = d.clusterDim.x * d.clusterDim.y * d.clusterDim.z;
    if (cudaGraphKernelNodeGetAttribute(
            nodes[i], cudaLaunchAttributeClusterSchedulingPolicyPreference, &d) == cudaSuccess)
      pol = (unsigned)d.clusterSchedulingPolicyPreference;
    if (cudaGraphKernelNodeGetAttribute(nodes[i], cudaLaunchAttributeNvlinkUtilCentricScheduling,
                                        &d) == cudaSuccess)
      nvl = d.nvlinkUtilCentricScheduling;
    (void)cudaGetLastError();
    std::printf(" [%.32s, %u blocks of %u, smem %u + static %zd, domain %d, cluster %u, policy %u, "
                "nvlink sched %u]",
                name, p.gridDim.x, p.blockDim.x, p.sharedMemBytes, (ssize_t)fa.sharedSizeBytes, dom,
                cl, pol, nvl);
  }
  std::printf("\n");
}

static void timed(struct rank *r, const std::vector<cudaGraphExec_t> &execs, double *med,
                  double *p10, double *p90) {
  std::vector<cudaEvent_t> ev(r->steps + 1);
  for (auto &e : ev)
    CK(cudaEventCreate(&e));
  for (int w = 0; w < 20; w++)
    for (auto x : execs)
      CK(cudaGraphLaunch(x, r->s));
  CK(cudaStreamSynchronize(r->s));
  pthread_barrier_wait(r->bar);
  CK(cudaEventRecord(ev[0], r->s));
  for (int i = 0; i < r->steps; i++) {
    if (r->ahead > 0 && i >= r->ahead) /* CGRT_PROBE_AHEAD: at most that many steps queued */
      CK(cudaEventSynchronize(ev[i + 1 - r->ahead]));
    for (auto x : execs)
      CK(cudaGraphLaunch(x, r->s));
    CK(cudaEventRecord(ev[i + 1], r->s));
  }
  CK(cudaStreamSynchronize(r->s));
  std::vector<double> t(r->steps);
  for (int i = 0; i < r->steps; i++) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    t[i] = ms * 1e3;
  }
  std::sort(t.begin(), t.end());
  *med = t[t.size() / 2];
  *p10 = t[t.size() / 10];
  *p90 = t[t.size() * 9 / 10];
  for (auto &e : ev)
    CK(cudaEventDestroy(e));
}

static void *run_rank(void *arg) {
  struct rank *r = (struct rank *)arg;
  CK(cudaSetDevice(r->dev));
  /* NCCL connects its peers at a communicator's first collective, which a capture cannot hold:
     one all-gather eagerly first, as the cp workload's warm-up steps do. */
  module(r, 1, V_AG);
  CK(cudaStreamSynchronize(r->s));
  for (int v = 0; v < V_COUNT; v++) {
    if (!r->run[v])
      continue;
    std::vector<cudaGraphExec_t> mods, step;
    cudaGraph_t a = NULL;
    for (int m = 0; m < r->modules; m++)
      mods.push_back(capture(r, m, 1, (enum variant)v, m == 0 ? &a : NULL));
    step.push_back(capture(r, 0, r->modules, (enum variant)v, NULL));
    if (r->dev == 0)
      describe(r, a, (enum variant)v);
    CK(cudaGraphDestroy(a));
    /* modules, step, modules, step: the first pair warms what a first run pays */
    for (int k = 0; k < 2; k++) {
      timed(r, mods, &r->med[v][0], &r->p10[v][0], &r->p90[v][0]);
      timed(r, step, &r->med[v][1], &r->p10[v][1], &r->p90[v][1]);
    }
    for (auto x : mods)
      CK(cudaGraphExecDestroy(x));
    CK(cudaGraphExecDestroy(step[0]));
    pthread_barrier_wait(r->bar);
  }
  return NULL;
}

int main(int argc, char **argv) {
  const int modules = argc > 1 ? std::atoi(argv[1]) : 32;
  const int rows = argc > 2 ? std::atoi(argv[2]) : 32;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 400;
  int run[V_COUNT];
  for (int v = 0; v < V_COUNT; v++) {
    run[v] = argc <= 4;
    for (const char *p = argc > 4 ? argv[4] : ""; *p;) {
      const size_t len = std::strcspn(p, ",");
      if (len == std::strlen(kVariant[v]) && std::strncmp(p, kVariant[v], len) == 0)
        run[v] = 1;
      p += len + (p[len] == ',');
    }
  }
  if (modules < 2 || modules % 2 || modules > 512 || rows < 1 || rows > 65536 || steps < 10 ||
      steps > 100000) {
    std::fprintf(stderr, "usage: cgrt-nccl-boundary [M [ROWS [R]]]: M even in [2, 512], ROWS in "
                         "[1, 65536], R in [10, 100000]\n");
    return 2;
  }
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cgrt-nccl-boundary: no CUDA device: %s\n", cudaGetErrorString(e));
    return 2;
  }
  if (ndev < 2) {
    std::fprintf(stderr, "cgrt-nccl-boundary: needs two GPUs, %d visible\n", ndev);
    return 2;
  }
  int can = 0;
  CK(cudaDeviceCanAccessPeer(&can, 0, 1));
  if (!can) {
    std::fprintf(stderr, "cgrt-nccl-boundary: GPUs 0 and 1 have no peer access\n");
    return 2;
  }
  setenv("NCCL_GRAPH_MIXING_SUPPORT", "0", 0);
  ncclComm_t comms[2];
  int devs[2] = {0, 1};
  NK(ncclCommInitAll(comms, 2, devs));
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  struct rank rk[2];
  const size_t n = (size_t)rows * kD;
  for (int i = 0; i < 2; i++) {
    struct rank *r = &rk[i];
    std::memset(r, 0, sizeof(*r));
    r->dev = i, r->modules = modules, r->rows = rows, r->steps = steps, r->comm = comms[i];
    r->bar = &bar;
    std::memcpy(r->run, run, sizeof(run));
    r->ahead = getenv("CGRT_PROBE_AHEAD") ? std::atoi(getenv("CGRT_PROBE_AHEAD")) : 0;
    CK(cudaSetDevice(i));
    CK(cudaDeviceEnablePeerAccess(1 - i, 0));
    CK(cudaStreamCreateWithFlags(&r->s, cudaStreamNonBlocking));
    CK(cudaMalloc(&r->x, n * sizeof(float)));
    CK(cudaMalloc(&r->send, n * sizeof(float)));
    CK(cudaMalloc(&r->gathered, 2 * n * sizeof(float)));
    CK(cudaMemset(r->x, 0, n * sizeof(float)));
    CK(cudaMemset(r->send, 0, n * sizeof(float)));
    CK(cudaHostAlloc(&r->host, n * sizeof(float), cudaHostAllocMapped));
    CK(cudaMalloc(&r->count, 2 * sizeof(unsigned)));
    CK(cudaMemset(r->count, 0, 2 * sizeof(unsigned)));
  }
  rk[0].peer_gathered = rk[1].gathered;
  rk[1].peer_gathered = rk[0].gathered;
  rk[0].peer_count = rk[1].count + 1;
  rk[1].peer_count = rk[0].count + 1;
  const char *mix = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  int version = 0;
  NK(ncclGetVersion(&version));
  std::printf("cgrt-nccl-boundary: %d modules a step (A, B in turn), %d rows of %d floats, %d "
              "steps a run; NCCL %d, NCCL_GRAPH_MIXING_SUPPORT=%s\n",
              modules, rows, kD, steps, version, mix ? mix : "(unset)");
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, run_rank, &rk[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  std::printf("  %-6s %4s %10s %8s %8s %10s %8s %8s %14s\n", "middle", "rank", "modules_us", "p10",
              "p90", "step_us", "p10", "p90", "per_boundary");
  for (int v = 0; v < V_COUNT; v++)
    for (int i = 0; i < 2 && run[v]; i++) {
      const struct rank *r = &rk[i];
      std::printf("  %-6s %4d %10.2f %8.2f %8.2f %10.2f %8.2f %8.2f %14.2f\n", kVariant[v], i,
                  r->med[v][0], r->p10[v][0], r->p90[v][0], r->med[v][1], r->p10[v][1],
                  r->p90[v][1], (r->med[v][0] - r->med[v][1]) / (modules - 1));
    }
  for (int i = 0; i < 2; i++)
    NK(ncclCommDestroy(comms[i]));
  return 0;
}
