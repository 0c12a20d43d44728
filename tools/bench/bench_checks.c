/*
 * bench_checks.c - what went wrong or was checked during a `cgrt bench` run: fallbacks, moved
 * buffers (keys on private copies, keys sent eager, bytes copied), calls eager for the memory
 * budget, in-place updates the driver refused, executables dropped by max_graphs or the memory
 * budget, steps of a phase the backend has no graphs for, replays checked against eager and how
 * many differed ([cuda_graph] verify), steps that waited for an earlier one ([runtime]
 * max_queued_steps), raw device synchronizes of other threads that waited for a capture or went
 * ahead at the bound ([runtime] sync_guard), and diagnose's findings, as text lines or as JSON
 * fields.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "tool_args.h"

/* The backend's own figures (cgrt_backend_figures): a JSON member each, or one text line. */
struct figures {
  int json, n;
};

static void print_figure(void *user, const char *name, uint64_t value) {
  struct figures *f = user;
  if (f->json) {
    printf("%s", f->n ? "," : "");
    tool_json_string(name);
    printf(":%llu", (unsigned long long)value);
  } else {
    printf("%s%s %llu", f->n ? ", " : "backend figures: ", name, (unsigned long long)value);
  }
  f->n++;
}

void bench_print_checks(cgrt_runtime *rt, int json) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  size_t n = 0;
  if (cgrt_stats_get(rt, &s) != 0 || cgrt_findings_count(rt, &n) != 0)
    return;
  if (json) {
    printf(",\"fallbacks\":%llu,\"rebinds\":%llu,\"rebind_copy_keys\":%llu,"
           "\"rebind_variant_keys\":%llu,\"rebind_eager_keys\":%llu,\"copy_bytes\":%llu,"
           "\"budget_eager\":%llu,\"timed_steps\":%llu,\"time_probe_steps\":%llu,"
           "\"time_eager_steps\":%llu,\"time_exact_steps\":%llu,\"time_eager_counts\":%llu,"
           "\"time_exact_counts\":%llu,\"time_implied_counts\":%llu,\"time_rare_refused\":%llu,"
           "\"queue_waits\":%llu,\"queue_wait_ns\":%llu,\"sync_guard_waits\":%llu,"
           "\"sync_guard_late\":%llu,\"unrepeated_units\":%llu",
           (unsigned long long)s.fallbacks, (unsigned long long)s.rebinds,
           (unsigned long long)s.rebind_copy_keys, (unsigned long long)s.rebind_variant_keys,
           (unsigned long long)s.rebind_eager_keys, (unsigned long long)s.copy_bytes,
           (unsigned long long)s.budget_eager, (unsigned long long)s.timed_steps,
           (unsigned long long)s.time_probe_steps, (unsigned long long)s.time_eager_steps,
           (unsigned long long)s.time_exact_steps, (unsigned long long)s.time_eager_counts,
           (unsigned long long)s.time_exact_counts, (unsigned long long)s.time_implied_counts,
           (unsigned long long)s.time_rare_refused, (unsigned long long)s.queue_waits,
           (unsigned long long)s.queue_wait_ns, (unsigned long long)s.sync_guard_waits,
           (unsigned long long)s.sync_guard_late, (unsigned long long)s.unrepeated_units);
    printf(",\"verifications\":%llu,\"verify_mismatches\":%llu,\"verify_skipped\":%llu,"
           "\"findings\":[",
           (unsigned long long)s.verifications, (unsigned long long)s.verify_mismatches,
           (unsigned long long)s.verify_skipped);
    for (size_t i = 0; i < n; i++) {
      cgrt_finding f = {.struct_size = sizeof(f)};
      if (cgrt_finding_get(rt, i, &f) != 0)
        continue;
      printf("%s{\"kind\":\"%s\",\"broke_capture\":%s,\"call\":", i ? "," : "",
             cgrt_finding_kind_name(f.kind), f.broke_capture ? "true" : "false");
      tool_json_string(f.call);
      printf(",\"result\":");
      tool_json_string(f.result_name);
      printf(",\"what\":");
      tool_json_string(f.what);
      printf(",\"step\":%llu,\"caller\":", (unsigned long long)f.step);
      tool_json_string(f.caller);
      printf(",\"count\":%u}", f.count);
    }
    printf("]");
    /* and the whole record, as every host prints it (cgrt_stats_format) */
    int len = cgrt_stats_format(&s, CGRT_STATS_JSON, NULL, 0);
    char *all = len > 0 ? malloc((size_t)len + 1) : NULL;
    if (all && cgrt_stats_format(&s, CGRT_STATS_JSON, all, (size_t)len + 1) == len)
      printf(",\"stats\":%s", all);
    free(all);
    struct figures f = {1, 0};
    printf(",\"backend_figures\":{");
    (void)cgrt_backend_figures(rt, print_figure, &f);
    printf("}");
    return;
  }
  struct figures f = {0, 0};
  (void)cgrt_backend_figures(rt, print_figure, &f);
  if (f.n)
    printf("\n");
  /* What went wrong, or cost more than a replay, whenever it is not zero. */
  if (s.fallbacks || s.rebind_copy_keys || s.rebind_variant_keys || s.rebind_eager_keys ||
      s.budget_eager)
    printf("checks: %llu fallbacks (failed captures run eagerly), %llu calls with moved buffers, "
           "%llu keys on private copies (%llu bytes copied), %llu keys with a graph per address "
           "set, %llu keys eager for moving buffers, %llu calls eager for the memory budget\n",
           (unsigned long long)s.fallbacks, (unsigned long long)s.rebinds,
           (unsigned long long)s.rebind_copy_keys, (unsigned long long)s.copy_bytes,
           (unsigned long long)s.rebind_variant_keys, (unsigned long long)s.rebind_eager_keys,
           (unsigned long long)s.budget_eager);
  if (s.update_refusals || s.evictions || s.eager_phase_steps || s.unrepeated_units)
    printf("graphs: %llu in-place updates refused by the driver (recorded and instantiated anew), "
           "%llu executables dropped by max_graphs or the memory budget (%llu for the budget), "
           "%llu steps of a phase the backend has no graphs for run eagerly by cgrt, %llu modules "
           "or step phases whose keys never repeat (never captured)\n",
           (unsigned long long)s.update_refusals, (unsigned long long)s.evictions,
           (unsigned long long)s.budget_evictions, (unsigned long long)s.eager_phase_steps,
           (unsigned long long)s.unrepeated_units);
  if (s.timed_steps || s.time_probe_steps)
    printf(
        "by_time: %llu steps timed on the device, %llu padded steps run eagerly to measure "
        "eager; %llu token counts served eagerly (%llu steps) and %llu at an exact-size bucket "
        "(%llu steps) because their padded replay was measured slower; %llu token counts decided "
        "by another count's measurement in their bucket (no probes of their own), %llu refused "
        "an exact-size bucket as rare\n",
        (unsigned long long)s.timed_steps, (unsigned long long)s.time_probe_steps,
        (unsigned long long)s.time_eager_counts, (unsigned long long)s.time_eager_steps,
        (unsigned long long)s.time_exact_counts, (unsigned long long)s.time_exact_steps,
        (unsigned long long)s.time_implied_counts, (unsigned long long)s.time_rare_refused);
  if (s.queue_waits)
    printf("max_queued_steps: %llu steps waited for an earlier step to finish on the device before "
           "they were issued, %.3f ms of host time in all\n",
           (unsigned long long)s.queue_waits, (double)s.queue_wait_ns / 1e6);
  if (s.sync_guard_waits || s.sync_guard_late)
    printf("sync_guard: %llu raw device synchronizes of the process waited for a capture on this "
           "GPU, %llu of them went ahead at the bound (each may have broken the capture)\n",
           (unsigned long long)s.sync_guard_waits, (unsigned long long)s.sync_guard_late);
  if (s.verifications || s.verify_skipped)
    printf("verify: %llu replays checked against eager, %llu differed, %llu not checked (no "
           "memory for the private copies)\n",
           (unsigned long long)s.verifications, (unsigned long long)s.verify_mismatches,
           (unsigned long long)s.verify_skipped);
  if (n == 0)
    return;
  printf("diagnose: %zu finding%s\n", n, n == 1 ? "" : "s");
  for (size_t i = 0; i < n; i++) {
    cgrt_finding f = {.struct_size = sizeof(f)};
    if (cgrt_finding_get(rt, i, &f) == 0)
      printf("  %s (x%u)\n", f.detail, f.count);
  }
}
