/*
 * launch_common.cuh - what the workloads' CUDA kernels share: programmatic dependent launch
 * (sm_90+) inside kernels, and a launch with the programmatic-serialization attribute.
 *
 * A kernel launched with the attribute may start once its predecessor on the stream calls
 * pdl_trigger (or exits); pdl_wait then waits for the predecessor to complete and its memory to
 * be visible. Launched without the attribute both are no-ops; below sm_90 they are compiled out.
 * Each workload states which of its reads and writes may come before the wait.
 */
#ifndef CGRT_KERNELS_LAUNCH_COMMON_CUH
#define CGRT_KERNELS_LAUNCH_COMMON_CUH

#include <cuda_runtime.h>

namespace cgrtk_launch {

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Launch with the programmatic-serialization attribute when pdl is set; the cudaError_t. */
template <typename... Params, typename... Args>
int launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, bool pdl,
           Args... args) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return (int)cudaLaunchKernelEx(&cfg, kernel, args...);
}

} // namespace cgrtk_launch

#endif
