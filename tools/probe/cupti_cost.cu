/* cgrt-cupti-cost: what a CUPTI callback subscription costs every other CUDA call (session 54).
 * [runtime] sync_guard holds one (callbacks on the enter and exit of cudaDeviceSynchronize,
 * cudaThreadSynchronize and cuCtxSynchronize); the bench showed cudaGraphLaunch and eager steps
 * far slower beside it. One process a mode, so that nothing of an earlier subscription stays:
 *   none       no CUPTI
 *   subscribe  cuptiSubscribe, no callback enabled
 *   driver     + the driver's cuCtxSynchronize (and _v2) enter and exit
 *   runtime    + the runtime's cudaDeviceSynchronize enter and exit (not the driver's)
 *   guard      all of them (sync_guard's set)
 *   after      guard's set, then cuptiUnsubscribe before measuring: does the cost go with it?
 *              (also prints what a subscribe, enable and unsubscribe cycle costs, median of 50)
 *   late       the guard's set while the graph is captured and instantiated, then unsubscribe and
 *              cuptiFinalize before measuring: does an executable made under CUPTI keep a cost?
 *   finalize   as after, then cuptiFinalize (CUPTI detached): does that take the cost away?
 *              (also prints what the finalize and a subscribe-unsubscribe-finalize cycle cost)
 * Printed, host time: an empty kernel's launch (20000, a sync every 1000), a 64-kernel graph's
 * launch (2000, a sync every 50) and an idle cudaDeviceSynchronize (2000), medians of 5 rounds,
 * and how many enter callbacks of each kind came (the runtime's synchronizes call the driver's
 * cuCtxSynchronize_v2 or not).
 * Usage: cgrt-cupti-cost MODE */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

__global__ void empty() {
}

static unsigned long long seen_runtime, seen_ctx, seen_ctx_v2; /* enter callbacks */
static CUpti_SubscriberHandle first;

static void CUPTIAPI on_call(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void *data) {
  if (static_cast<const CUpti_CallbackData *>(data)->callbackSite != CUPTI_API_ENTER)
    return;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
    seen_runtime++;
  else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize)
    seen_ctx++;
  else
    seen_ctx_v2++;
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/* Host time of a subscribe, enable and unsubscribe (and with finalize, cuptiFinalize) cycle, us:
   the median of n. */
static double cycle_us(int n, int finalize) {
  std::vector<double> cyc;
  for (int i = 0; i < n; i++) {
    double a = now_us();
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, on_call, nullptr) == CUPTI_SUCCESS) {
      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                          CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
      cuptiUnsubscribe(sub);
    }
    if (finalize)
      cuptiFinalize();
    cyc.push_back(now_us() - a);
  }
  return median(cyc);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "none";
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  cudaFree(0);
  const int late = !std::strcmp(mode, "late");
  const int finalize = !std::strcmp(mode, "finalize");
  const int after = !std::strcmp(mode, "after") || finalize;
  if (std::strcmp(mode, "none")) {
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, on_call, nullptr) != CUPTI_SUCCESS || !(first = sub)) {
      std::printf("cuptiSubscribe failed\n");
      return 1;
    }
    int drv = !std::strcmp(mode, "driver") || !std::strcmp(mode, "guard") || after || late;
    int rt = !std::strcmp(mode, "runtime") || !std::strcmp(mode, "guard") || after || late;
    if (drv) {
      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                          CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
#if CUDA_VERSION >= 13000
      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                          CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2);
#endif
    }
    if (rt) {
      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
                          CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020);
      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
                          CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020);
    }
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (after) {
    cuptiUnsubscribe(first);
    std::printf("a subscribe, enable and unsubscribe cycle: %.1f us (median of 50)\n",
                cycle_us(50, 0));
  }
  if (finalize) {
    double a = now_us();
    CUptiResult r = cuptiFinalize();
    double f = now_us() - a;
    std::printf("cuptiFinalize: %s, %.1f us; a subscribe-unsubscribe-finalize cycle %.1f us "
                "(median of 10)\n",
                r == CUPTI_SUCCESS ? "ok" : "failed", f,
                r == CUPTI_SUCCESS ? cycle_us(10, 1) : 0.0);
  }
  cudaGraph_t g;
  cudaGraphExec_t x;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  for (int i = 0; i < 64; i++)
    empty<<<1, 32, 0, s>>>();
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&x, g, 0);
  if (late) {
    cudaStreamSynchronize(s);
    cuptiUnsubscribe(first);
    std::printf("late: cuptiFinalize %s\n", cuptiFinalize() == CUPTI_SUCCESS ? "ok" : "failed");
  }
  std::vector<double> k, gl, sy;
  for (int round = 0; round < 5; round++) {
    double t = 0;
    for (int i = 0; i < 20000; i++) {
      double a = now_us();
      empty<<<1, 32, 0, s>>>();
      t += now_us() - a;
      if (i % 1000 == 999)
        cudaStreamSynchronize(s);
    }
    k.push_back(t / 20000);
    t = 0;
    for (int i = 0; i < 2000; i++) {
      double a = now_us();
      cudaGraphLaunch(x, s);
      t += now_us() - a;
      if (i % 50 == 49)
        cudaStreamSynchronize(s);
    }
    gl.push_back(t / 2000);
    cudaStreamSynchronize(s);
    double a = now_us();
    for (int i = 0; i < 2000; i++)
      cudaDeviceSynchronize();
    sy.push_back((now_us() - a) / 2000);
  }
  std::printf("mode %-9s kernel launch %.3f us, 64-node graph launch %.3f us, idle "
              "cudaDeviceSynchronize %.3f us (%s); enter callbacks: %llu runtime, %llu "
              "cuCtxSynchronize, %llu cuCtxSynchronize_v2\n",
              mode, median(k), median(gl), median(sy), cudaGetErrorString(cudaGetLastError()),
              seen_runtime, seen_ctx, seen_ctx_v2);
  return 0;
}
