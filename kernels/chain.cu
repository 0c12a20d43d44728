/* chain.cu - the `chain` workload (chain.h): a sequence of dependent one-thread kernels. */
#include <cuda_runtime.h>

#include "chain.h"

namespace {

__global__ void chain_step(float *buf) {
  buf[0] = buf[0] + 1.0f;
}

} // namespace

extern "C" int cgrtk_chain(float *buf, int kernels, void *stream) {
  for (int i = 0; i < kernels; i++) {
    chain_step<<<1, 1, 0, (cudaStream_t)stream>>>(buf);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      return (int)e;
  }
  return 0;
}
