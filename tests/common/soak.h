/*
 * soak.h - one soak test for both drivers (tests/unit/test_soak.c: a short run on the host driver
 * in CI; tests/gpu/test_soak.c: 10,000 steps with kernels on the GPU). Inference steps of random
 * token counts (some above the largest bucket), input buffers that move now and then, and more
 * keys than max_graphs so executables are evicted all along. Every step's output is checked
 * exactly; live executables never exceed max_graphs; graph memory and the process's resident
 * memory do not grow after warm-up.
 *
 * The test program supplies the device operations (struct soak_ops).
 */
#ifndef CGRT_TEST_SOAK_H
#define CGRT_TEST_SOAK_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"

#define SOAK_MODS       3
#define SOAK_MAX_GRAPHS 8

struct soak_ops {
  const char *driver;
  float *(*alloc)(void); /* one float of device memory */
  void (*release)(float *p);
  void (*set)(float *p, float v); /* synchronous */
  float (*get)(const float *p);   /* synchronous */
  /* Enqueues y[0] += a * x[0] on ctx->stream. */
  int (*axpy)(const cgrt_ctx *ctx, float *y, const float *x, float a);
};

struct soak {
  const struct soak_ops *ops;
  cgrt_runtime *rt;
  cgrt_module *m[SOAK_MODS];
  float *x[2]; /* the input moves between these */
  float *y[SOAK_MODS];
  int cur; /* which x is in use */
};

static const float soak_coef[SOAK_MODS] = {0.5f, 0.25f, 0.125f};

static int soak_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct soak *s = ctx->user;
  int i = (int)(intptr_t)user;
  return s->ops->axpy(ctx, args->buffers[1].ptr, args->buffers[0].ptr, soak_coef[i]);
}

static int soak_body(const cgrt_ctx *ctx, void *user) {
  struct soak *s = user;
  for (int i = 0; i < SOAK_MODS; i++) {
    cgrt_buffer b[2] = {{s->x[s->cur], sizeof(float), CGRT_IN, "x"},
                        {s->y[i], sizeof(float), CGRT_INOUT, "y"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = 1, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(s->rt, s->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static long resident_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f)
    return 0;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
    resident = 0;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Runs `steps` steps; prints and checks the figures. */
static void soak_run(const struct soak_ops *ops, int steps) {
  struct soak s = {.ops = ops};
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 1\nrebind = update\nmax_graphs = %d\n"
           "[inference]\nmax_tokens = 64\nnum_graphs = 7\n[runtime]\ndriver = %s\nlog = error\n",
           SOAK_MAX_GRAPHS, ops->driver);
  if (cgrt_open_string(&s.rt, ini) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  for (int i = 0; i < SOAK_MODS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.mlp", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .forward = soak_module,
                          .user = (void *)(intptr_t)i};
    assert_int_equal(cgrt_module_register(s.rt, &d, &s.m[i]), 0);
    s.y[i] = ops->alloc();
    ops->set(s.y[i], 0.0f);
  }
  s.x[0] = ops->alloc();
  s.x[1] = ops->alloc();
  ops->set(s.x[0], 1.0f);
  ops->set(s.x[1], 2.0f);
  float expect[SOAK_MODS] = {0};
  unsigned seed = 12345;
  long rss_warm = 0;
  uint64_t mem_warm = 0, max_live = 0;
  for (int step = 0; step < steps; step++) {
    seed = seed * 1103515245u + 12345u;
    int64_t tokens = 1 + (int64_t)((seed >> 8) % 80); /* 65..80: above the buckets, eager */
    if ((seed >> 4) % 17 == 0)
      s.cur ^= 1; /* the input moved: executables are updated in place */
    cgrt_step_desc d = {.struct_size = sizeof(d),
                        .phase = CGRT_PHASE_INFER,
                        .tokens = tokens,
                        .body = soak_body,
                        .user = &s};
    if (cgrt_step(s.rt, &d, NULL) != 0)
      fail_msg("step %d: %s", step, cgrt_last_error(s.rt));
    assert_int_equal(cgrt_synchronize(s.rt), 0);
    float xv = s.cur ? 2.0f : 1.0f;
    for (int i = 0; i < SOAK_MODS; i++) {
      expect[i] += soak_coef[i] * xv;
      float got = ops->get(s.y[i]);
      if (got != expect[i])
        fail_msg("step %d, module %d: y = %g, expected %g", step, i, got, expect[i]);
    }
    cgrt_stats st = {.struct_size = sizeof(st)};
    assert_int_equal(cgrt_stats_get(s.rt, &st), 0);
    if (st.live_graphs > SOAK_MAX_GRAPHS)
      fail_msg("step %d: %llu live executables, bound %d", step, (unsigned long long)st.live_graphs,
               SOAK_MAX_GRAPHS);
    if (st.live_graphs > max_live)
      max_live = st.live_graphs;
    if (step == steps / 10) {
      rss_warm = resident_kib();
      mem_warm = st.graph_mem_reserved;
    }
  }
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(s.rt, &st), 0);
  long rss_end = resident_kib();
  printf("soak (%s driver): %d steps; captures %llu, updates %llu, rebinds %llu, evictions %llu, "
         "live at most %llu of %d; graph memory %llu -> %llu bytes, resident %ld -> %ld KiB "
         "after warm-up\n",
         ops->driver, steps, (unsigned long long)st.captures, (unsigned long long)st.updates,
         (unsigned long long)st.rebinds, (unsigned long long)st.evictions,
         (unsigned long long)max_live, SOAK_MAX_GRAPHS, (unsigned long long)mem_warm,
         (unsigned long long)st.graph_mem_reserved, rss_warm, rss_end);
  assert_true(st.evictions > 0);
  assert_true(st.rebinds > 0);
  assert_true(st.graph_mem_reserved <= mem_warm);
#if !defined(__SANITIZE_ADDRESS__)
  /* (Under AddressSanitizer freed memory sits in its quarantine: LeakSanitizer checks instead.) */
  if (rss_end - rss_warm > 1024)
    fail_msg("resident memory grew by %ld KiB after warm-up", rss_end - rss_warm);
#endif
  assert_int_equal(cgrt_close(s.rt), 0);
  for (int i = 0; i < SOAK_MODS; i++)
    ops->release(s.y[i]);
  ops->release(s.x[0]);
  ops->release(s.x[1]);
}

#endif
