/*
 * bench_time.c - timing steps with CUDA events on the stream they run on (bench.h): one
 * measurement alone (bench_time_steps), or several interleaved in blocks so that they share the
 * GPU's conditions (bench_time_blocks).
 */
#include <stdlib.h>

#include "bench.h"
#include "tool.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#include <cuda_runtime_api.h>

/* Untimed steps: at least `steps`, and until `ms` milliseconds of host time have passed. */
static int warm(const struct bench_stepper *st, int steps, int ms) {
  const uint64_t t0 = cgrt_tool_now_ns(), until = (uint64_t)(ms > 0 ? ms : 0) * 1000000u;
  int rc = 0;
  for (int i = 0; rc == 0 && (i < steps || cgrt_tool_now_ns() - t0 < until); i++)
    rc = st->step(st->arg, 0);
  return rc;
}

/*
 * `steps` timed steps of st with an event before each and one after the last; the intervals
 * (us) go to dt[0..steps). Waits for the last event.
 */
static int timed(const struct bench_stepper *st, int steps, cudaEvent_t *ev, double *dt) {
  cudaStream_t s = (cudaStream_t)st->stream;
  int rc = 0;
  for (int i = 0; i < steps && rc == 0; i++) {
    cudaEventRecord(ev[i], s);
    rc = st->step(st->arg, 1);
  }
  if (rc != 0)
    return rc;
  cudaEventRecord(ev[steps], s);
  if (cudaEventSynchronize(ev[steps]) != cudaSuccess)
    return CGRT_E_DEVICE;
  for (int i = 0; i < steps; i++) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
    dt[i] = ms * 1e3;
  }
  return 0;
}

static cudaEvent_t *events(int n) {
  cudaEvent_t *ev = calloc((size_t)n, sizeof(*ev));
  for (int i = 0; ev && i < n; i++)
    if (cudaEventCreate(&ev[i]) != cudaSuccess) {
      for (int j = 0; j < i; j++)
        cudaEventDestroy(ev[j]);
      free(ev);
      return NULL;
    }
  return ev;
}

static void events_free(cudaEvent_t *ev, int n) {
  for (int i = 0; ev && i < n; i++)
    cudaEventDestroy(ev[i]);
  free(ev);
}

int bench_time_steps(const struct bench_stepper *st, const struct bench_opts *o, double *us) {
  cudaEvent_t *ev = events(o->steps + 1);
  double *dt = calloc((size_t)o->steps, sizeof(*dt));
  int rc = ev && dt ? 0 : CGRT_E_NOMEM;
  if (rc == 0)
    rc = warm(st, o->warmup, o->warmup_ms);
  if (rc == 0)
    rc = timed(st, o->steps, ev, dt);
  if (rc == 0)
    *us = bench_median(dt, o->steps);
  events_free(ev, o->steps + 1);
  free(dt);
  return rc;
}

int bench_time_blocks(const struct bench_stepper *st, int n, const struct bench_opts *o,
                      double *us) {
  const int blocks = o->blocks < 1 ? 1 : o->blocks > o->steps ? o->steps : o->blocks;
  const int per = (o->steps + blocks - 1) / blocks; /* the last block may be shorter */
  const int rewarm = o->warmup < 10 ? o->warmup : 10;
  cudaEvent_t *ev = events(per + 1);
  double *dt = calloc((size_t)n * (size_t)o->steps, sizeof(*dt));
  int rc = ev && dt ? 0 : CGRT_E_NOMEM;
  /* Each its own warm-up first (a backend captures there), the device idle between them. */
  for (int v = 0; v < n && rc == 0; v++) {
    rc = warm(&st[v], o->warmup, o->warmup_ms);
    if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess)
      rc = CGRT_E_DEVICE;
  }
  for (int b = 0, done = 0; b < blocks && rc == 0; b++, done += per) {
    const int k = o->steps - done < per ? o->steps - done : per;
    for (int v = 0; v < n && rc == 0; v++) {
      /* Refill the queue after the idle device: the block's first interval is then a step like
       * the others, not a start from idle. */
      rc = warm(&st[v], rewarm, 0);
      if (rc == 0)
        rc = timed(&st[v], k, ev, dt + (size_t)v * (size_t)o->steps + done);
      if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess)
        rc = CGRT_E_DEVICE;
    }
  }
  for (int v = 0; v < n && rc == 0; v++)
    us[v] = bench_median(dt + (size_t)v * (size_t)o->steps, o->steps);
  events_free(ev, per + 1);
  free(dt);
  return rc;
}

int bench_host_cost(const struct bench_stepper *st, int steps, double *us) {
  double *dt = calloc((size_t)(steps > 0 ? steps : 1), sizeof(*dt));
  int rc = dt ? 0 : CGRT_E_NOMEM;
  for (int i = 0; i < steps && rc == 0; i++) {
    if (cudaDeviceSynchronize() != cudaSuccess) {
      rc = CGRT_E_DEVICE;
      break;
    }
    const uint64_t t0 = cgrt_tool_now_ns();
    rc = st->step(st->arg, 0);
    dt[i] = (double)(cgrt_tool_now_ns() - t0) / 1e3;
  }
  if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess)
    rc = CGRT_E_DEVICE;
  if (rc == 0)
    *us = bench_median(dt, steps);
  free(dt);
  return rc;
}
