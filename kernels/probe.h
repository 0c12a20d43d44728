/*
 * probe.h - an in-band reading of the SM clock: what the GPU ran at, right where a measurement
 * ended, without NVML; and an empty kernel, to time what one launch costs the host. No CUDA
 * header is needed: the stream is a void * (cudaStream_t).
 */
#ifndef CGRT_KERNELS_PROBE_H
#define CGRT_KERNELS_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Enqueue one single-thread kernel on `stream` that spins for at least `cycles` SM cycles
 * (clock64) and writes into out[0] the SM cycles and into out[1] the nanoseconds
 * (%globaltimer) it spun: out[0] * 1000 / out[1] is the SM clock in MHz during the spin. out is
 * device memory (2 x unsigned long long). The global timer ticks every 32 ns to 1 us depending on
 * the GPU: spin 200000 cycles (about 100 us) or more for a reading within 1%. Returns 0 or the
 * cudaError_t of the launch. Never synchronizes.
 */
int cgrtk_clock_probe(unsigned long long *out, long long cycles, void *stream);

/* Enqueue one empty kernel (one thread) on `stream`. Returns 0 or the cudaError_t of the launch. */
int cgrtk_empty_launch(void *stream);

#ifdef __cplusplus
}
#endif

#endif
