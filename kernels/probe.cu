/* probe.cu - the SM clock probe and the empty launch (probe.h). */
#include <cuda_runtime.h>

#include "probe.h"

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void clock_probe(unsigned long long *out, long long cycles) {
  const unsigned long long t0 = global_ns();
  const long long c0 = clock64();
  long long c = c0;
  while (c - c0 < cycles)
    c = clock64();
  const unsigned long long t1 = global_ns();
  out[0] = (unsigned long long)(c - c0);
  out[1] = t1 - t0;
}

__global__ void empty() {
}

} // namespace

extern "C" int cgrtk_clock_probe(unsigned long long *out, long long cycles, void *stream) {
  clock_probe<<<1, 1, 0, (cudaStream_t)stream>>>(out, cycles);
  return (int)cudaGetLastError();
}

extern "C" int cgrtk_empty_launch(void *stream) {
  empty<<<1, 1, 0, (cudaStream_t)stream>>>();
  return (int)cudaGetLastError();
}
