/*
 * cgrt_kernels.h - C entry points of the reference workloads and helper kernels (CUDA C).
 * Each launcher enqueues on `stream` (a cudaStream_t) and returns 0 or the cudaError_t of the
 * launch; none synchronizes, so every one of them can be captured into a graph.
 */
#ifndef CGRT_KERNELS_H
#define CGRT_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = a * x[i] + y[i] for i < n (fp32). */
int cgrtk_axpy_f32(float *y, const float *x, float a, long n, void *stream);

/* y[i] = v for i < n (fp32). */
int cgrtk_fill_f32(float *y, float v, long n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
