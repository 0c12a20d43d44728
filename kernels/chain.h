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
 * buf[0] = buf[0] + 1.0f (buf is device memory): the result counts the kernels that ran (exactly,
 * from 0, up to 2^24 of them), so a bitwise check of it shows that none was lost. (A contracting
 * recurrence such as x * 0.5 + 1 reaches its fixed point after about 25 kernels and could not.)
 * kernels <= 0 enqueues nothing. Never synchronizes: capturable.
 * Returns 0 or the cudaError_t of the first launch that failed (later kernels are not launched).
 */
int cgrtk_chain(float *buf, int kernels, void *stream);

#ifdef __cplusplus
}
#endif

#endif
