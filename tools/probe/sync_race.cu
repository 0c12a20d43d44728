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
 *
 * Usage: cgrt-sync-race [--seconds S] [--mode global|thread_local|relaxed] [--kernels K]
 *                       [--call device|stream|event|free|trim] [--gate] [--no-sync]
 * [--no-instantiate] Exit status 0 when the loops ran to the end with every B round's kernels
 * right. */
#include <cuda_runtime.h>

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

int main(int argc, char **argv) {
  double seconds = 5;
  int kernels = 3, sync = 1, instantiate = 1, gate = 0;
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
          std::strcmp(call, "event") && std::strcmp(call, "free") && std::strcmp(call, "trim")) {
        std::fprintf(stderr, "--call is device, stream, event, free or trim, not %s\n", call);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--gate"))
      gate = 1;
    else if (!std::strcmp(argv[i], "--no-sync"))
      sync = 0;
    else if (!std::strcmp(argv[i], "--no-instantiate"))
      instantiate = 0;
    else {
      std::fprintf(stderr,
                   "usage: cgrt-sync-race [--seconds S] [--mode global|thread_local|relaxed] "
                   "[--kernels K] [--call device|stream|event|free|trim] [--gate] [--no-sync] "
                   "[--no-instantiate]\n");
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
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
  std::shared_mutex lock;
  unsigned long long syncs = 0, refused = 0;
  const int which = !std::strcmp(call, "stream")  ? 1
                    : !std::strcmp(call, "event") ? 2
                    : !std::strcmp(call, "free")  ? 3
                    : !std::strcmp(call, "trim")  ? 4
                                                  : 0;
  std::thread a([&] {
    cudaSetDevice(0);
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
    if (gate)
      lock.lock_shared();
    cudaError_t e = cudaStreamBeginCapture(bs, mode);
    for (int k = 0; k < kernels && e == cudaSuccess; k++) {
      add_one<<<1, 32, 0, bs>>>(buf);
      e = cudaGetLastError();
    }
    cudaError_t end_rc = cudaStreamEndCapture(bs, &g);
    if (gate)
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
  std::printf("mode %s, %d kernels, %s, %s, %s: %llu rounds, %llu captures broken, %llu graphs "
              "instantiated and run, %llu checks wrong; A: %llu calls, %llu refused\n",
              mode_name, kernels, sync ? call : "A idle (control)", gate ? "gated" : "not gated",
              instantiate ? "instantiate" : "no instantiate", rounds, broken, graphs, wrong, syncs,
              refused);
  return wrong ? 1 : 0;
}
