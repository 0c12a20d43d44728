/*
 * stats_format.c - cgrt_stats_format: every field of cgrt_stats by its name, as text or JSON, so
 * that hosts, `cgrt check --dry-run` and the Python package print the same figures the same way
 * instead of each writing its own printf (issue 39).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "cgrt/cgrt.h"

/* The scalar fields, in cgrt.h's order, by name (the arrays are printed apart). */
#define F(name)                                                                                    \
  { #name, offsetof(cgrt_stats, name) }
static const struct {
  const char *name;
  size_t at;
} fields[] = {F(steps),
              F(captures),
              F(instantiations),
              F(updates),
              F(update_refusals),
              F(rebinds),
              F(evictions),
              F(fallbacks),
              F(live_graphs),
              F(padding_tokens),
              F(capture_ns),
              F(instantiate_ns),
              F(graph_mem_used),
              F(graph_mem_reserved),
              F(real_tokens),
              F(bucket_changes),
              F(graph_bytes),
              F(graph_pool_bytes),
              F(graph_exec_bytes),
              F(graph_pool_idle),
              F(graph_bytes_peak),
              F(graph_nodes),
              F(memory_budget),
              F(budget_eager),
              F(budget_evictions),
              F(verifications),
              F(verify_mismatches),
              F(verify_skipped),
              F(findings),
              F(comm_waits),
              F(rebind_copy_keys),
              F(rebind_eager_keys),
              F(copy_bytes),
              F(staged_bytes),
              F(rebind_variant_keys),
              F(eager_phase_steps),
              F(timed_steps),
              F(time_probe_steps),
              F(time_eager_steps),
              F(time_exact_steps),
              F(time_eager_counts),
              F(time_exact_counts),
              F(time_implied_counts),
              F(time_rare_refused),
              F(queue_waits),
              F(queue_wait_ns),
              F(sync_guard_waits),
              F(sync_guard_late),
              F(unrepeated_units)};
#undef F

/* snprintf into buf at *n, counting what did not fit, so the caller learns the length needed. */
struct out {
  char *buf;
  size_t len;
  size_t n;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k =
      vsnprintf(o->n < o->len ? o->buf + o->n : NULL, o->n < o->len ? o->len - o->n : 0, fmt, ap);
  va_end(ap);
  if (k > 0)
    o->n += (size_t)k;
}

CGRT_API int cgrt_stats_format(const cgrt_stats *s, cgrt_stats_style style, char *buf, size_t len) {
  if (!s || s->struct_size < offsetof(cgrt_stats, captures) || (!buf && len) ||
      (style != CGRT_STATS_TEXT && style != CGRT_STATS_JSON))
    return CGRT_E_INVAL;
  static const char *const modes[CGRT_MODE_COUNT] = {"eager", "warmup", "capture", "replay"};
  struct out o = {buf, len, 0};
  int json = style == CGRT_STATS_JSON;
  if (len)
    buf[0] = '\0';
  put(&o, json ? "{" : "");
  for (int a = 0; a < 2; a++) { /* steps_by_mode, calls_by_mode */
    const uint64_t *v = a ? s->calls_by_mode : s->steps_by_mode;
    const char *name = a ? "calls_by_mode" : "steps_by_mode";
    put(&o, json ? "%s\"%s\":{" : "%s%s:", a ? (json ? "," : "\n") : "", name);
    for (int m = 0; m < CGRT_MODE_COUNT; m++)
      put(&o, json ? "%s\"%s\":%" PRIu64 : "%s %s %" PRIu64, m && json ? "," : "", modes[m], v[m]);
    put(&o, json ? "}" : "");
  }
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    if (fields[i].at + sizeof(uint64_t) > s->struct_size)
      break; /* an older caller's struct ends before this field */
    uint64_t v = *(const uint64_t *)(const void *)((const char *)s + fields[i].at);
    put(&o, json ? ",\"%s\":%" PRIu64 : "\n%s %" PRIu64, fields[i].name, v);
  }
  if (offsetof(cgrt_stats, buckets) + sizeof(s->buckets) <= s->struct_size) {
    uint32_t nb = s->num_buckets < CGRT_STATS_MAX_BUCKETS ? s->num_buckets : CGRT_STATS_MAX_BUCKETS;
    put(&o, json ? ",\"num_buckets\":%" PRIu32 ",\"buckets\":[" : "\nnum_buckets %" PRIu32,
        s->num_buckets);
    put(&o, json ? "" : "\nbuckets");
    for (uint32_t i = 0; i < nb; i++) {
      if (json)
        put(&o, "%s%" PRId64, i ? "," : "", s->buckets[i]);
      else
        put(&o, " %" PRId64, s->buckets[i]);
    }
    put(&o, json ? "]" : "");
  }
  put(&o, json ? "}" : "\n");
  return o.n > (size_t)INT32_MAX ? CGRT_E_NOMEM : (int)o.n;
}
