/*
 * cupti_trace.c - libcgrt-trace.so: device timestamps of every kernel, copy and memset a process
 * runs, through CUPTI's activity API, for any CUDA program and without rebuilding it:
 *
 *   CGRT_TRACE_OUT=run.csv LD_PRELOAD=build/lib/libcgrt-trace.so ./train_gpt2cu ...
 *   python3 tools/trace/trace_summary.py run.csv --step encoder_forward
 *
 * One CSV row per record: kind (kernel, memcpy, memset, graph, api), name, start_ns, end_ns (the
 * device's clock for device work, CUPTI's timestamp for API calls; one clock), stream, graph id,
 * graph node id, correlation id. Kernels inside a replayed graph are reported one by one, with the
 * graph's id. Options, from the environment:
 *   CGRT_TRACE_OUT     the CSV file (default cgrt-trace.csv); %p in it becomes the process id, so
 *                      that the processes of a multi-rank run write a file each
 *   CGRT_TRACE_GRAPHS  1: one record per graph launch instead of its kernels (CUPTI's graph trace)
 *   CGRT_TRACE_API     1: also the runtime API calls (host side)
 *   CGRT_TRACE_MIN_US  N: only records that lasted at least N us (any kind), to find the long
 *                      calls and replays of a long run without writing each of its kernels
 *   CGRT_TRACE_FORKED  1: trace the processes this one forks, not itself. For a launcher that
 *                      forks its ranks before any CUDA call (cgrt bench --ranks N): CUPTI set up
 *                      in the launcher initializes CUDA there, and CUDA state does not survive a
 *                      fork (the ranks hang in their first CUDA call). Each child starts its own
 *                      trace at the fork, in a file of its own (use %p)
 * Nsight Systems gives the same timestamps, where it runs; the lent GPU machines have no nsys.
 */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRACE_BUFFER_BYTES (8u << 20)

static FILE *trace_out;
static int trace_api;
static uint64_t trace_min_ns;
static uint64_t trace_dropped;

static void trace_fail(const char *call, CUptiResult r) {
  const char *why = "?";
  cuptiGetResultString(r, &why);
  fprintf(stderr, "cgrt-trace: %s failed: %s; no trace is written (is libcupti the driver's?)\n",
          call, why);
}

static void trace_finish(void);

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  /* Registered here, after the CUDA runtime registered its own teardown (it ran before the first
     record): exit handlers run in reverse, so the records are flushed while the context lives. */
  static int finish_registered;
  if (!finish_registered)
    finish_registered = 1, atexit(trace_finish);
  *buffer = aligned_alloc(8, TRACE_BUFFER_BYTES);
  *size = *buffer ? TRACE_BUFFER_BYTES : 0;
  *max_records = 0;
}

static const char *api_name(uint32_t cbid) {
  const char *name = NULL;
  if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS || !name)
    return "?";
  return name;
}

static void write_record(const CUpti_Activity *rec) {
  /* Names may hold commas (template arguments): they are quoted, quotes doubled. */
  const char *kind = NULL, *name = "";
  uint64_t start = 0, end = 0, graph_node = 0;
  uint32_t stream = 0, graph = 0, corr = 0;
  char label[64];
  switch (rec->kind) {
  case CUPTI_ACTIVITY_KIND_KERNEL:
  case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
    kind = "kernel", name = k->name ? k->name : "?";
    start = k->start, end = k->end, stream = k->streamId, graph = k->graphId;
    graph_node = k->graphNodeId, corr = k->correlationId;
    break;
  }
  case CUPTI_ACTIVITY_KIND_MEMCPY: {
    const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
    snprintf(label, sizeof label, "memcpy kind %u, %llu bytes", (unsigned)m->copyKind,
             (unsigned long long)m->bytes);
    kind = "memcpy", name = label;
    start = m->start, end = m->end, stream = m->streamId, graph = m->graphId;
    graph_node = m->graphNodeId, corr = m->correlationId;
    break;
  }
  case CUPTI_ACTIVITY_KIND_MEMSET: {
    const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
    snprintf(label, sizeof label, "memset %llu bytes", (unsigned long long)m->bytes);
    kind = "memset", name = label;
    start = m->start, end = m->end, stream = m->streamId, graph = m->graphId;
    graph_node = m->graphNodeId, corr = m->correlationId;
    break;
  }
  case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {
    const CUpti_ActivityGraphTrace2 *g = (const CUpti_ActivityGraphTrace2 *)rec;
    kind = "graph", name = "graph launch";
    start = g->start, end = g->end, stream = g->streamId, graph = g->graphId;
    corr = g->correlationId;
    break;
  }
  case CUPTI_ACTIVITY_KIND_RUNTIME: {
    const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
    kind = "api", name = api_name(a->cbid);
    start = a->start, end = a->end, corr = a->correlationId;
    break;
  }
  default:
    return;
  }
  if (end - start < trace_min_ns)
    return;
  fprintf(trace_out, "%s,\"", kind);
  for (const char *c = name; *c; c++) {
    if (*c == '"')
      fputc('"', trace_out);
    fputc(*c, trace_out);
  }
  fprintf(trace_out, "\",%llu,%llu,%u,%u,%llu,%u\n", (unsigned long long)start,
          (unsigned long long)end, stream, graph, (unsigned long long)graph_node, corr);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid) {
  (void)ctx, (void)stream_id, (void)size;
  CUpti_Activity *rec = NULL;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
    if (trace_out)
      write_record(rec);
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
    trace_dropped += dropped;
  free(buffer);
}

static void trace_finish(void) {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (!trace_out)
    return;
  if (trace_dropped)
    fprintf(stderr, "cgrt-trace: %llu records dropped (CUPTI's buffers were full)\n",
            (unsigned long long)trace_dropped);
  fclose(trace_out);
  trace_out = NULL;
}

static void trace_begin(void) {
  const char *path = getenv("CGRT_TRACE_OUT");
  const char *graphs = getenv("CGRT_TRACE_GRAPHS");
  const char *api = getenv("CGRT_TRACE_API");
  const char *min_us = getenv("CGRT_TRACE_MIN_US");
  if (!path || !*path)
    path = "cgrt-trace.csv";
  trace_api = api && strcmp(api, "1") == 0;
  trace_min_ns = min_us ? strtoull(min_us, NULL, 10) * 1000u : 0;
  char file[4096];
  size_t n = 0;
  for (const char *c = path; *c && n + 24 < sizeof(file); c++) {
    if (c[0] == '%' && c[1] == 'p') {
      n += (size_t)snprintf(file + n, sizeof(file) - n, "%ld", (long)getpid());
      c++;
    } else {
      file[n++] = *c;
    }
  }
  file[n] = '\0';
  trace_out = fopen(file, "w");
  if (!trace_out) {
    fprintf(stderr, "cgrt-trace: cannot write %s; set CGRT_TRACE_OUT to a writable file\n", file);
    return;
  }
  fprintf(trace_out, "kind,name,start_ns,end_ns,stream,graph,graph_node,correlation\n");
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    trace_fail("cuptiActivityRegisterCallbacks", r);
    fclose(trace_out);
    trace_out = NULL;
    return;
  }
  CUpti_ActivityKind kinds[4] = {
      graphs && strcmp(graphs, "1") == 0 ? CUPTI_ACTIVITY_KIND_GRAPH_TRACE
                                         : CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
      CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME};
  for (int i = 0; i < (trace_api ? 4 : 3); i++) {
    r = cuptiActivityEnable(kinds[i]);
    if (r != CUPTI_SUCCESS) {
      trace_fail("cuptiActivityEnable", r);
      fclose(trace_out);
      trace_out = NULL;
      return;
    }
  }
  atexit(trace_finish); /* the last resort, after the runtime's teardown */
}

__attribute__((constructor)) static void trace_start(void) {
  const char *forked = getenv("CGRT_TRACE_FORKED");
  if (forked && strcmp(forked, "1") == 0) {
    if (pthread_atfork(NULL, NULL, trace_begin) != 0)
      fprintf(stderr, "cgrt-trace: pthread_atfork failed; nothing is traced\n");
    return;
  }
  trace_begin();
}
