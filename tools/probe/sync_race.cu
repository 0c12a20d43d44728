/* cgrt-sync-race: does a cudaDeviceSynchronize loop on one thread, racing captures on another,
 * hurt the process without cgrt? (test_gpu_streams' device_sync_on_another_thread faulted inside
 * libcuda's cuCtxSynchronize, on the looping thread, while the runtime's thread instantiated a
 * captured graph: session 53.)
 *
 * Thread B loops for --seconds: begin a capture on a non-blocking stream of its own (--mode,
 * thread_local by default), launch --kernels kernels into it, end it; a graph that came out is
 * instantiated, launched, its stream synchronized and both destroyed (not with --no-instantiate).
 * Thread A loops cudaDeviceSynchronize meanwhile (--call device; not with --no-sync: the control),
 * or a kernel on a stream of its own and cudaStreamSynchronize (--call stream) or an event
 * recorded there and cudaEventSynchronize (--call event), cudaMalloc and cudaFree of 1 MiB (--call
 * free) or cudaDeviceGraphMemTrim (--call trim). No handover: the race is the point.
 * With --gate, B holds a reader-writer lock shared from its capture's begin to its end and A holds
 * it exclusively around each call: the calls and the captures never overlap, as cgrt's
 * cgrt_device_synchronize arranges. Printed: B's rounds, captures broken, instantiations, A's
 * calls and how many were refused. A fault ends the process: run it several times (a shell loop)
 * and count.
 * --call ctx calls the driver's cuCtxSynchronize, --call legacy launches a kernel on the legacy
 * stream and synchronizes it (cudaStreamSynchronize(0)).
 * --cupti-gate (built where CUPTI is found; session 54): A makes its calls raw, and a CUPTI
 * callback on the enter and exit of cudaDeviceSynchronize and cuCtxSynchronize takes the lock
 * exclusively around them instead (once per thread: the runtime's call makes the driver's inside
 * it); B holds it shared as with --gate. So: can a process keep a raw synchronize away from
 * captures without touching the caller? The counts of both callbacks are printed.
 * --sync-device N: A synchronizes device N (--call device or ctx) while B captures on device 0:
 * does a synchronize of one GPU race another GPU's captures? (cgrt's gates are per device.)
 *
 * Usage: cgrt-sync-race [--seconds S] [--mode global|thread_local|relaxed] [--kernels K]
 *                       [--call device|ctx|legacy|stream|event|free|trim] [--gate]
 *                       [--cupti-gate] [--sync-device N] [--no-sync] [--no-instantiate]
 * Exit status 0 when the loops ran to the end with every B round's kernels right. */
#include <cuda.h>
#include <cuda_runtime.h>
#ifdef CGRT_PROBE_CUPTI
#include <cupti.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <shared_mutex>
#include <thread>

__global__ void add_one(float *p) {
  p[threadIdx.x] += 1.0f;
}

static std::shared_mutex lock;

#ifdef CGRT_PROBE_CUPTI
static thread_local int sync_depth; /* synchronizes in progress on this thread */
static std::atomic<unsigned long long> cb_runtime{0}, cb_driver{0};

static void CUPTIAPI on_sync(void *, CUpti_CallbackDomain domain, CUpti_CallbackId,
                             const void *data) {
  const CUpti_CallbackData *info = static_cast<const CUpti_CallbackData *>(data);
  if (info->callbackSite == CUPTI_API_ENTER) {
    (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? cb_runtime : cb_driver)++;
    if (sync_depth++ == 0)
      lock.lock();
  } else if (--sync_depth == 0) {
    lock.unlock();
  }
}

static int cupti_gate(void) {
  CUpti_SubscriberHandle sub;
  if (cuptiSubscribe(&sub, on_sync, nullptr) != CUPTI_SUCCESS ||
      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
                          CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020) != CUPTI_SUCCESS ||
      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                          CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize) != CUPTI_SUCCESS)
    return 1;
  return 0;
}
#endif

int main(int argc, char **argv) {
  double seconds = 5;
  int kernels = 3, sync = 1, instantiate = 1, gate = 0, cgate = 0, sync_device = 0;
  const char *call = "device";
  cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
  const char *mode_name = "thread_local";
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--kernels") && i + 1 < argc)
      kernels = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--mode") && i + 1 < argc) {
      mode_name = argv[++i];
      if (!std::strcmp(mode_name, "global"))
        mode = cudaStreamCaptureModeGlobal;
      else if (!std::strcmp(mode_name, "relaxed"))
        mode = cudaStreamCaptureModeRelaxed;
      else if (std::strcmp(mode_name, "thread_local")) {
        std::fprintf(stderr, "--mode is global, thread_local or relaxed, not %s\n", mode_name);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--call") && i + 1 < argc) {
      call = argv[++i];
      if (std::strcmp(call, "device") && std::strcmp(call, "stream") &&
          std::strcmp(call, "event") && std::strcmp(call, "free") && std::strcmp(call, "trim") &&
          std::strcmp(call, "ctx") && std::strcmp(call, "legacy")) {
        std::fprintf(stderr, "--call is device, ctx, legacy, stream, event, free or trim, not %s\n",
                     call);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--gate"))
      gate = 1;
    else if (!std::strcmp(argv[i], "--cupti-gate"))
      cgate = 1;
    else if (!std::strcmp(argv[i], "--sync-device") && i + 1 < argc)
      sync_device = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-sync"))
      sync = 0;
    else if (!std::strcmp(argv[i], "--no-instantiate"))
      instantiate = 0;
    else {
      std::fprintf(stderr,
                   "usage: cgrt-sync-race [--seconds S] [--mode global|thread_local|relaxed] "
                   "[--kernels K] [--call device|ctx|legacy|stream|event|free|trim] [--gate] "
                   "[--cupti-gate] [--sync-device N] [--no-sync] [--no-instantiate]\n");
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  if (sync_device < 0 || sync_device >= n) {
    std::printf("SKIPPED: --sync-device %d, with %d devices\n", sync_device, n);
    return 77;
  }
#ifdef CGRT_PROBE_CUPTI
  if (cgate && cupti_gate()) {
    std::printf("CUPTI's subscription failed\n");
    return 1;
  }
#else
  if (cgate) {
    std::printf("SKIPPED: built without CUPTI\n");
    return 77;
  }
#endif
  cudaStream_t bs = nullptr, as = nullptr;
  cudaEvent_t ev = nullptr;
  float *buf = nullptr, *abuf = nullptr;
  float host[32];
  if (cudaStreamCreateWithFlags(&bs, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&as, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
      cudaMalloc(&buf, sizeof(host)) != cudaSuccess ||
      cudaMalloc(&abuf, sizeof(host)) != cudaSuccess ||
      cudaMemset(buf, 0, sizeof(host)) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("setup failed\n");
    return 1;
  }
  std::atomic<int> stop{0};
  unsigned long long syncs = 0, refused = 0;
  const int which = !std::strcmp(call, "stream")   ? 1
                    : !std::strcmp(call, "event")  ? 2
                    : !std::strcmp(call, "free")   ? 3
                    : !std::strcmp(call, "trim")   ? 4
                    : !std::strcmp(call, "ctx")    ? 5
                    : !std::strcmp(call, "legacy") ? 6
                                                   : 0;
  std::thread a([&] {
    cudaSetDevice(which == 0 || which == 5 ? sync_device : 0);
    while (sync && !stop.load()) {
      if (gate)
        lock.lock();
      cudaError_t e;
      if (which == 0) {
        e = cudaDeviceSynchronize();
      } else if (which == 3) {
        void *p = nullptr;
        e = cudaMalloc(&p, 1 << 20);
        if (e == cudaSuccess)
          e = cudaFree(p);
      } else if (which == 4) {
        e = cudaDeviceGraphMemTrim(0);
      } else if (which == 5) {
        e = cuCtxSynchronize() == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown;
      } else if (which == 6) {
        add_one<<<1, 32, 0, 0>>>(abuf);
        e = cudaStreamSynchronize(0);
      } else {
        add_one<<<1, 32, 0, as>>>(abuf);
        e = which == 1                                     ? cudaStreamSynchronize(as)
            : (e = cudaEventRecord(ev, as)) != cudaSuccess ? e
                                                           : cudaEventSynchronize(ev);
      }
      if (gate)
        lock.unlock();
      ++syncs;
      if (e != cudaSuccess) {
        ++refused;
        (void)cudaGetLastError();
      }
    }
  });
  unsigned long long rounds = 0, broken = 0, graphs = 0, wrong = 0;
  float want = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    rounds++;
    cudaGraph_t g = nullptr;
    if (gate || cgate)
      lock.lock_shared();
    cudaError_t e = cudaStreamBeginCapture(bs, mode);
    for (int k = 0; k < kernels && e == cudaSuccess; k++) {
      add_one<<<1, 32, 0, bs>>>(buf);
      e = cudaGetLastError();
    }
    cudaError_t end_rc = cudaStreamEndCapture(bs, &g);
    if (gate || cgate)
      lock.unlock_shared();
    (void)cudaGetLastError();
    if (e != cudaSuccess || end_rc != cudaSuccess || !g) {
      broken++;
      if (g)
        cudaGraphDestroy(g);
      continue;
    }
    if (instantiate) {
      cudaGraphExec_t x = nullptr;
      if (cudaGraphInstantiate(&x, g, 0) == cudaSuccess) {
        graphs++;
        if (cudaGraphLaunch(x, bs) == cudaSuccess && cudaStreamSynchronize(bs) == cudaSuccess)
          want += (float)kernels;
        cudaGraphExecDestroy(x);
      }
      (void)cudaGetLastError();
    }
    cudaGraphDestroy(g);
    if (rounds % 1024 == 0) {
      if (cudaMemcpyAsync(host, buf, sizeof(host), cudaMemcpyDeviceToHost, bs) != cudaSuccess ||
          cudaStreamSynchronize(bs) != cudaSuccess)
        (void)cudaGetLastError();
      else if (host[0] != want || host[31] != want)
        wrong++;
    }
  }
  stop.store(1);
  a.join();
  if (sync_device != 0)
    std::printf("A synchronizes device %d, B captures on device 0; ", sync_device);
  std::printf("mode %s, %d kernels, %s, %s, %s: %llu rounds, %llu captures broken, %llu graphs "
              "instantiated and run, %llu checks wrong; A: %llu calls, %llu refused\n",
              mode_name, kernels, sync ? call : "A idle (control)",
              cgate  ? "gated by CUPTI callbacks"
              : gate ? "gated"
                     : "not gated",
              instantiate ? "instantiate" : "no instantiate", rounds, broken, graphs, wrong, syncs,
              refused);
#ifdef CGRT_PROBE_CUPTI
  if (cgate)
    std::printf("CUPTI callbacks: %llu cudaDeviceSynchronize, %llu cuCtxSynchronize\n",
                cb_runtime.load(), cb_driver.load());
#endif
  return wrong ? 1 : 0;
}
