/* elementwise.cu - small element-wise kernels: test workloads and the runtime's helpers. */
#include <cuda_runtime.h>

#include "cgrt_kernels.h"

namespace {

constexpr int kThreads = 256;

__global__ void axpy_f32(float *__restrict__ y, const float *__restrict__ x, float a, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x)
    y[i] = fmaf(a, x[i], y[i]);
}

__global__ void fill_f32(float *__restrict__ y, float v, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x)
    y[i] = v;
}

unsigned blocks_for(long n) {
  long b = (n + kThreads - 1) / kThreads;
  if (b < 1)
    b = 1;
  return (unsigned)(b > 65535 ? 65535 : b);
}

} // namespace

extern "C" int cgrtk_axpy_f32(float *y, const float *x, float a, long n, void *stream) {
  axpy_f32<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(y, x, a, n);
  return (int)cudaGetLastError();
}

extern "C" int cgrtk_fill_f32(float *y, float v, long n, void *stream) {
  fill_f32<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(y, v, n);
  return (int)cudaGetLastError();
}
