/*
 * bench_fresh.c - the rows of `cgrt bench --workload decode|chain` where the host hands its
 * layers a fresh input every step, as host code written without graphs in mind does (a PyTorch
 * body computing tensors afresh; here, a hidden buffer from cudaMallocAsync per step, the
 * previous step's freed after it). The same host code runs under eager (impl = none) and under
 * the configured backend, from runtimes of their own; the backend's figure is timed in blocks
 * against the same backend with the static buffer (bench_gpu.c's runtime), so the two see the
 * same GPU conditions. What a regression would show: captures (recordings) per steady step,
 * keys sent eager, bytes copied per step, fallbacks, a row that differs from eager.
 */
#include <stdio.h>
#include <string.h>

#include "bench_fresh.h"

/* Steady-state counters: this many more steps after the timing. */
#define PROBE_STEPS 20

static int probe(struct host_model *hm, int64_t tokens, struct fresh_row *r) {
  cgrt_stats s0 = {.struct_size = sizeof(s0)}, s1 = {.struct_size = sizeof(s1)};
  cgrt_stats_get(hm->rt, &s0);
  struct hm_stepper st;
  hm_stepper_init(&st, hm, tokens, tokens);
  int rc = 0;
  for (int i = 0; i < PROBE_STEPS && rc == 0; i++)
    rc = hm_step(&st, 0);
  if (rc != 0) {
    fprintf(stderr, "cgrt bench: %s\n", cgrt_last_error(hm->rt));
    return rc;
  }
  cgrt_stats_get(hm->rt, &s1);
  r->recordings_per_step = (double)(s1.captures - s0.captures) / PROBE_STEPS;
  r->copy_bytes_per_step = (double)(s1.copy_bytes - s0.copy_bytes) / PROBE_STEPS;
  r->copy_keys = s1.rebind_copy_keys;
  r->variant_keys = s1.rebind_variant_keys;
  r->eager_keys = s1.rebind_eager_keys;
  r->fallbacks = s1.fallbacks;
  r->timed_steps = s1.timed_steps;
  r->probe_steps = s1.time_probe_steps;
  r->eager_counts = s1.time_eager_counts;
  r->exact_counts = s1.time_exact_counts;
  r->mode = st.rep.mode;
  return 0;
}

int bench_fresh_rows(const struct bench_workload *w, void *ws, int64_t max_rows,
                     struct host_model *backend, const struct bench_opts *o,
                     struct fresh_row *rows) {
  cgrt_tool_config *cfg = NULL, *eager_cfg = NULL;
  struct host_model fresh = {0}, eager = {0};
  int rc = bench_gpu_configs(o, &cfg, &eager_cfg) == EXIT_VALID ? 0 : -1;
  if (rc == 0) {
    rc = hm_open(&eager, w, ws, max_rows, eager_cfg, backend->stream);
    eager_cfg = NULL;
  }
  if (rc == 0) {
    rc = hm_open(&fresh, w, ws, max_rows, cfg, backend->stream);
    cfg = NULL;
  }
  eager.fresh = fresh.fresh = 1;
  for (int i = 0; i < o->num_tokens && rc == 0; i++) {
    struct fresh_row *r = &rows[i];
    memset(r, 0, sizeof(*r));
    r->tokens = o->tokens[i];
    /* The fresh runtime settles first, as measure_row's static one does, so the timed blocks
       see the way by_time settled on for this count, not a mix of before and after. */
    struct measure settled;
    if ((rc = hm_settle(&fresh, r->tokens, o, &settled)) != 0)
      break;
    /* Eager, the static host under the backend and the fresh one in turn (measure_row). */
    struct measure me, mf, ms;
    struct hm_stepper he, hs, hf;
    hm_stepper_init(&he, &eager, r->tokens, r->tokens);
    hm_stepper_init(&hs, backend, r->tokens, r->tokens);
    hm_stepper_init(&hf, &fresh, r->tokens, r->tokens);
    const struct bench_stepper st[3] = {he.bs, hs.bs, hf.bs};
    double us[3] = {0};
    rc = bench_time_blocks(st, 3, o, us);
    if (rc != 0) {
      fprintf(stderr, "cgrt bench: %s / %s\n", cgrt_last_error(fresh.rt),
              cgrt_last_error(eager.rt));
      break;
    }
    hm_stepper_result(&he, us[0], &me);
    hm_stepper_result(&hs, us[1], &ms);
    hm_stepper_result(&hf, us[2], &mf);
    r->bucket = mf.padded;
    r->eager_us = me.step_us;
    r->static_us = ms.step_us;
    r->cgrt_us = mf.step_us;
    rc = probe(&fresh, r->tokens, r);
    if (rc == 0)
      r->bitwise = bench_bitwise_equal(&fresh, &eager, r->tokens, r->bucket, o);
  }
  hm_close(&fresh);
  hm_close(&eager);
  cgrt_tool_config_free(cfg);
  cgrt_tool_config_free(eager_cfg);
  return rc;
}

void bench_fresh_print(const struct fresh_row *rows, int n, int json) {
  if (json) {
    printf(",\"fresh\":[");
    for (int i = 0; i < n; i++) {
      const struct fresh_row *r = &rows[i];
      printf("%s{\"tokens\":%lld,\"bucket\":%lld,\"eager_us\":%.2f,\"backend_us\":%.2f,"
             "\"static_us\":%.2f,\"vs_static\":%.4f,\"vs_eager\":%.4f,\"bitwise\":%s,"
             "\"recordings_per_step\":%.3f,\"copy_bytes_per_step\":%.0f,\"copy_keys\":%llu,"
             "\"variant_keys\":%llu,\"eager_keys\":%llu,\"fallbacks\":%llu,\"timed_steps\":%llu,"
             "\"time_probe_steps\":%llu,\"time_eager_counts\":%llu,\"time_exact_counts\":%llu,"
             "\"mode\":\"%s\"}",
             i ? "," : "", (long long)r->tokens, (long long)r->bucket, r->eager_us, r->cgrt_us,
             r->static_us, r->cgrt_us / r->static_us, r->cgrt_us / r->eager_us,
             r->bitwise ? "true" : "false", r->recordings_per_step, r->copy_bytes_per_step,
             (unsigned long long)r->copy_keys, (unsigned long long)r->variant_keys,
             (unsigned long long)r->eager_keys, (unsigned long long)r->fallbacks,
             (unsigned long long)r->timed_steps, (unsigned long long)r->probe_steps,
             (unsigned long long)r->eager_counts, (unsigned long long)r->exact_counts,
             cgrt_mode_name(r->mode));
    }
    printf("]");
    return;
  }
  printf("fresh inputs (the host allocates the hidden buffer with cudaMallocAsync every step and "
         "frees the last one after; same host code under eager and cgrt): vs_static = cgrt_us / "
         "static_us (the same backend, buffer in place; eager, static and fresh timed in turn); "
         "rec/step and copy_B/step "
         "over %d steady steps; keys on private copies, with a graph per address set (var_keys) "
         "and sent eager, since the runtime opened; with [local] by_time, its timed steps, probe "
         "steps and counts served eagerly or at exact-size buckets, since the runtime opened\n",
         PROBE_STEPS);
  printf("%6s %6s %10s %10s %10s %10s %9s %8s %9s %11s %10s %9s %10s %9s %6s %6s %7s %7s\n",
         "tokens", "bucket", "eager_us", "cgrt_us", "static_us", "vs_static", "vs_eager", "bitwise",
         "rec/step", "copy_B/step", "copy_keys", "var_keys", "eager_keys", "fallback", "timed",
         "probes", "eager_n", "exact_n");
  for (int i = 0; i < n; i++) {
    const struct fresh_row *r = &rows[i];
    printf("%6lld %6lld %10.1f %10.1f %10.1f %9.3fx %8.3fx %8s %9.2f %11.0f %10llu %9llu %10llu "
           "%9llu %6llu %6llu %7llu %7llu\n",
           (long long)r->tokens, (long long)r->bucket, r->eager_us, r->cgrt_us, r->static_us,
           r->cgrt_us / r->static_us, r->cgrt_us / r->eager_us, r->bitwise ? "equal" : "DIFFER",
           r->recordings_per_step, r->copy_bytes_per_step, (unsigned long long)r->copy_keys,
           (unsigned long long)r->variant_keys, (unsigned long long)r->eager_keys,
           (unsigned long long)r->fallbacks, (unsigned long long)r->timed_steps,
           (unsigned long long)r->probe_steps, (unsigned long long)r->eager_counts,
           (unsigned long long)r->exact_counts);
  }
}
