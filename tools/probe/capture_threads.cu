/* cgrt-capture-threads: which CUDA calls made on one thread break a stream capture that another
 * thread has underway on the same GPU (two runtimes of one process, each on a thread of its own;
 * a host thread beside a runtime).
 *
 * For each call and each capture mode (global, thread_local, relaxed): thread B begins a capture
 * on a non-blocking stream of its own, launches a kernel into it and hands over to thread A; A
 * makes the call (on its own non-blocking stream where the call takes one) and hands back; B
 * launches a second kernel and ends the capture. The handover is by a mutex and a condition
 * variable, so the call lies inside the capture every time: no timing. Printed per call and mode:
 * what the call returned to A, what B's second launch and its capture end returned, and whether B
 * got a graph. Before the next row, both threads clear any sticky error state left.
 *
 * Usage: cgrt-capture-threads   (one GPU; CUDA_VISIBLE_DEVICES picks it). Exit status 0 when
 * every row ran; the table is the result (docs/decisions.md, session 52). */
#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

__global__ void touch(float *p) {
  p[threadIdx.x] += 1.0f;
}

namespace {

struct Call {
  const char *name;
  cudaError_t (*run)(struct Side &a);
};

struct Side {
  cudaStream_t stream = nullptr;
  float *buf = nullptr;    /* A's device buffer, allocated before the row */
  float *spare = nullptr;  /* freed by the cudaFree row, reallocated after */
  float *pinned = nullptr; /* freed by the cudaFreeHost row, reallocated after */
  void *extra = nullptr;   /* allocated by the cudaMalloc row, freed after */
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t event = nullptr;
  float host[32];
};

cudaError_t do_none(Side &) {
  return cudaSuccess;
}
cudaError_t do_device_sync(Side &) {
  return cudaDeviceSynchronize();
}
cudaError_t do_free(Side &a) {
  cudaError_t e = cudaFree(a.spare);
  a.spare = nullptr;
  return e;
}
cudaError_t do_malloc(Side &a) {
  return cudaMalloc(&a.extra, 1 << 20); /* freed after the row */
}
cudaError_t do_malloc_host(Side &) {
  void *p = nullptr;
  cudaError_t e = cudaMallocHost(&p, 1 << 16);
  if (e == cudaSuccess)
    cudaFreeHost(p); /* after the row's verdict: the next call's effect is its own */
  return e;
}
cudaError_t do_free_host(Side &a) {
  cudaError_t e = cudaFreeHost(a.pinned);
  a.pinned = nullptr;
  return e;
}
cudaError_t do_graph_mem_trim(Side &) {
  int dev = 0;
  cudaGetDevice(&dev);
  return cudaDeviceGraphMemTrim(dev);
}
cudaError_t do_stream_sync(Side &a) {
  touch<<<1, 32, 0, a.stream>>>(a.buf);
  return cudaStreamSynchronize(a.stream);
}
cudaError_t do_event_sync(Side &a) {
  touch<<<1, 32, 0, a.stream>>>(a.buf);
  cudaEventRecord(a.event, a.stream);
  return cudaEventSynchronize(a.event);
}
cudaError_t do_legacy_memcpy(Side &a) {
  return cudaMemcpy(a.host, a.buf, sizeof(a.host), cudaMemcpyDeviceToHost);
}
cudaError_t do_legacy_sync(Side &a) {
  touch<<<1, 32, 0, cudaStreamLegacy>>>(a.buf);
  return cudaStreamSynchronize(cudaStreamLegacy);
}
cudaError_t do_memcpy_async_sync(Side &a) {
  cudaError_t e = cudaMemcpyAsync(a.host, a.buf, sizeof(a.host), cudaMemcpyDeviceToHost, a.stream);
  return e != cudaSuccess ? e : cudaStreamSynchronize(a.stream);
}
cudaError_t do_graph_launch(Side &a) {
  cudaError_t e = cudaGraphLaunch(a.exec, a.stream);
  return e != cudaSuccess ? e : cudaStreamSynchronize(a.stream);
}
cudaError_t do_instantiate_destroy(Side &a) {
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaGraphCreate(&g, 0);
  if (e != cudaSuccess)
    return e;
  cudaKernelNodeParams p = {};
  void *args[] = {&a.buf};
  p.func = (void *)touch;
  p.gridDim = dim3(1);
  p.blockDim = dim3(32);
  p.kernelParams = args;
  cudaGraphNode_t n;
  e = cudaGraphAddKernelNode(&n, g, nullptr, 0, &p);
  cudaGraphExec_t x = nullptr;
  if (e == cudaSuccess)
    e = cudaGraphInstantiate(&x, g, 0);
  if (e == cudaSuccess)
    e = cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  return e;
}
cudaError_t do_async_alloc(Side &a) {
  void *p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, 1 << 20, a.stream);
  if (e == cudaSuccess)
    e = cudaFreeAsync(p, a.stream);
  return e != cudaSuccess ? e : cudaStreamSynchronize(a.stream);
}
cudaError_t do_mem_get_info(Side &) {
  size_t f = 0, t = 0;
  return cudaMemGetInfo(&f, &t);
}
cudaError_t do_stream_create_destroy(Side &) {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  return e != cudaSuccess ? e : cudaStreamDestroy(s);
}
cudaError_t do_event_query(Side &a) {
  cudaEventRecord(a.event, a.stream);
  cudaError_t e = cudaEventQuery(a.event);
  return e == cudaErrorNotReady ? cudaSuccess : e;
}

const Call calls[] = {
    {"(none)", do_none},
    {"cudaDeviceSynchronize", do_device_sync},
    {"cudaFree", do_free},
    {"cudaMalloc", do_malloc},
    {"cudaMallocHost+cudaFreeHost", do_malloc_host},
    {"cudaFreeHost", do_free_host},
    {"cudaDeviceGraphMemTrim", do_graph_mem_trim},
    {"cudaStreamSynchronize(own stream)", do_stream_sync},
    {"cudaEventSynchronize(own stream)", do_event_sync},
    {"cudaMemcpy D2H (legacy stream)", do_legacy_memcpy},
    {"cudaStreamSynchronize(legacy)", do_legacy_sync},
    {"cudaMemcpyAsync+StreamSynchronize", do_memcpy_async_sync},
    {"cudaGraphLaunch+StreamSynchronize", do_graph_launch},
    {"cudaGraphInstantiate+ExecDestroy", do_instantiate_destroy},
    {"cudaMallocAsync+FreeAsync+sync", do_async_alloc},
    {"cudaMemGetInfo", do_mem_get_info},
    {"cudaStreamCreate+Destroy", do_stream_create_destroy},
    {"cudaEventRecord+Query", do_event_query},
};

const struct {
  cudaStreamCaptureMode mode;
  const char *name;
} modes[] = {{cudaStreamCaptureModeGlobal, "global"},
             {cudaStreamCaptureModeThreadLocal, "thread_local"},
             {cudaStreamCaptureModeRelaxed, "relaxed"}};

std::mutex mu;
std::condition_variable cv;
int turn = 0; /* 0: B's; 1: A's call; 2: B again; 3: row done */

void wait_for(int t) {
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [t] { return turn == t; });
}

void give(int t) {
  {
    std::lock_guard<std::mutex> l(mu);
    turn = t;
  }
  cv.notify_all();
}

const char *err(cudaError_t e) {
  return e == cudaSuccess ? "ok" : cudaGetErrorName(e);
}

} // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  Side a;
  float *bbuf = nullptr;
  cudaStream_t bs = nullptr;
  if (cudaStreamCreateWithFlags(&a.stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&bs, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&a.buf, 32 * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&bbuf, 32 * sizeof(float)) != cudaSuccess ||
      cudaEventCreateWithFlags(&a.event, cudaEventDisableTiming) != cudaSuccess) {
    std::printf("setup failed\n");
    return 1;
  }
  {
    cudaGraph_t g = nullptr;
    cudaStreamBeginCapture(a.stream, cudaStreamCaptureModeThreadLocal);
    touch<<<1, 32, 0, a.stream>>>(a.buf);
    cudaStreamEndCapture(a.stream, &g);
    if (!g || cudaGraphInstantiate(&a.exec, g, 0) != cudaSuccess) {
      std::printf("setup of A's graph failed\n");
      return 1;
    }
    cudaGraphDestroy(g);
  }
  cudaDeviceSynchronize();
  std::printf("%-36s %-13s %-32s %-32s %-32s %s\n", "call on thread A", "B's mode", "A's result",
              "B's launch after it", "B's capture end", "graph");
  int rows = 0;
  for (const auto &m : modes) {
    for (const auto &c : calls) {
      if (!a.spare && cudaMalloc(&a.spare, 1 << 20) != cudaSuccess)
        return 1;
      if (!a.pinned && cudaMallocHost(&a.pinned, 1 << 16) != cudaSuccess)
        return 1;
      cudaDeviceSynchronize();
      turn = 0;
      cudaError_t a_rc = cudaSuccess, b_launch = cudaSuccess, b_end = cudaSuccess;
      cudaGraph_t graph = nullptr;
      std::thread tb([&] {
        cudaSetDevice(0);
        cudaStreamBeginCapture(bs, m.mode);
        touch<<<1, 32, 0, bs>>>(bbuf);
        give(1);
        wait_for(2);
        touch<<<1, 32, 0, bs>>>(bbuf);
        b_launch = cudaGetLastError();
        b_end = cudaStreamEndCapture(bs, &graph);
        (void)cudaGetLastError();
        give(3);
      });
      std::thread ta([&] {
        cudaSetDevice(0);
        wait_for(1);
        a_rc = c.run(a);
        (void)cudaGetLastError();
        give(2);
      });
      ta.join();
      tb.join();
      std::printf("%-36s %-13s %-32s %-32s %-32s %s\n", c.name, m.name, err(a_rc), err(b_launch),
                  err(b_end), graph ? "yes" : "NO");
      std::fflush(stdout);
      if (graph)
        cudaGraphDestroy(graph);
      /* a capture left open on B's stream (it cannot be, but a broken row must not spoil the
         next): end it */
      cudaStreamCaptureStatus st;
      if (cudaStreamIsCapturing(bs, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
        cudaGraph_t g2 = nullptr;
        cudaStreamEndCapture(bs, &g2);
        if (g2)
          cudaGraphDestroy(g2);
      }
      (void)cudaGetLastError();
      if (a.extra) {
        cudaFree(a.extra);
        a.extra = nullptr;
      }
      rows++;
    }
  }
  std::printf("%d rows\n", rows);
  return 0;
}
