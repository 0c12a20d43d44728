/*
 * chain.h - the `chain` reference workload: N tiny dependent kernels, pure launch overhead.
 * No CUDA header is needed: the stream is a void * (cudaStream_t).
 */
#ifndef CGRT_KERNELS_CHAIN_H
#define CGRT_KERNELS_CHAIN_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Enqueue `kernels` single-thread kernels on `stream`, one after the other, each doing
 * buf[0] = buf[0] * 0.5f + 1.0f (buf is device memory). The result is that recurrence applied
 * `kernels` times in float, bit for bit (the multiply by 0.5 is exact, so fused or not, one
 * rounding happens per kernel). kernels <= 0 enqueues nothing. Never synchronizes: capturable.
 * Returns 0 or the cudaError_t of the first launch that failed (later kernels are not launched).
 */
int cgrtk_chain(float *buf, int kernels, void *stream);

#ifdef __cplusplus
}
#endif

#endif
