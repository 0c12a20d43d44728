/*
 * test_driver_host.c - the host driver behaves like CUDA where backends rely on it: deferred
 * stream work, events, capture and replay, exec update, the capture rules of each capture mode,
 * and the faults the core injects into its operations (faults.c). No GPU needed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver.h"
#include "base/faults.h"

/* Host functions append one letter each to a log, so a test reads what ran, in order. */
struct log {
  char text[256];
  size_t len;
};

struct letter {
  struct log *log;
  char c;
};

struct fx {
  struct cgrt_dev dev;
  const struct cgrt_driver *d;
  void *stream;
  struct log log;
  struct letter letters[26];
};

static void append(void *arg) {
  struct letter *l = arg;
  if (l->log->len + 1 < sizeof(l->log->text)) {
    l->log->text[l->log->len++] = l->c;
    l->log->text[l->log->len] = '\0';
  }
}

/* The same effect through another function: a different host function for exec_update. */
static void append_again(void *arg) {
  append(arg);
}

static struct letter *L(struct fx *f, char c) {
  return &f->letters[c - 'a'];
}

static int setup_mode(void **state, cgrt_capture_mode mode) {
  struct fx *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  f->d = &cgrt__driver_host;
  f->dev.drv = f->d;
  f->dev.capture_mode = mode;
  assert_int_equal(f->d->open(&f->dev), 0);
  assert_int_equal(f->d->stream_create(&f->dev, &f->stream), 0);
  for (int i = 0; i < 26; i++)
    f->letters[i] = (struct letter){&f->log, (char)('a' + i)};
  *state = f;
  return 0;
}

static int setup(void **state) {
  return setup_mode(state, CGRT_CAPTURE_THREAD_LOCAL);
}

static int setup_global(void **state) {
  return setup_mode(state, CGRT_CAPTURE_GLOBAL);
}

static int setup_relaxed(void **state) {
  return setup_mode(state, CGRT_CAPTURE_RELAXED);
}

static int teardown(void **state) {
  struct fx *f = *state;
  f->d->stream_destroy(&f->dev, f->stream);
  f->d->close(&f->dev);
  free(f);
  return 0;
}

/* Enqueues one host function per letter of `letters` on `stream`. */
static void enqueue(struct fx *f, void *stream, const char *letters) {
  for (const char *p = letters; *p; p++)
    assert_int_equal(f->d->host_fn(&f->dev, stream, append, L(f, *p)), 0);
}

/* Captures one host function per letter into a new graph. */
static void *capture(struct fx *f, const char *letters) {
  void *graph = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, letters);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_non_null(graph);
  return graph;
}

static void *instantiate(struct fx *f, void *graph) {
  void *exec = NULL;
  assert_int_equal(f->d->graph_instantiate(&f->dev, graph, &exec), 0);
  assert_non_null(exec);
  return exec;
}

/* An executable of `letters`; its graph is destroyed. */
static void *exec_of(struct fx *f, const char *letters) {
  void *graph = capture(f, letters);
  void *exec = instantiate(f, graph);
  f->d->graph_destroy(&f->dev, graph);
  return exec;
}

static void sync_stream(struct fx *f) {
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), 0);
}

static int capturing(struct fx *f, void *stream) {
  int active = -1;
  assert_int_equal(f->d->capture_status(&f->dev, stream, &active), 0);
  return active;
}

/* Ends a capture that must have been invalidated. */
static void end_invalidated(struct fx *f, void *stream, const char *reason) {
  void *graph = (void *)1;
  assert_int_equal(f->d->capture_end(&f->dev, stream, &graph), CGRT_E_CAPTURE);
  assert_null(graph);
  assert_non_null(strstr(f->dev.err, reason));
  assert_int_equal(capturing(f, stream), 0);
}

/* ---------------------------------------------------------------- streams and events */

static void test_enqueued_work_waits_for_sync(void **state) {
  struct fx *f = *state;
  int src = 7, dst = 0;
  enqueue(f, f->stream, "ab");
  assert_int_equal(f->d->memcpy_async(&f->dev, &dst, &src, sizeof(src), f->stream), 0);
  assert_string_equal(f->log.text, "");
  assert_int_equal(dst, 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "ab");
  assert_int_equal(dst, 7);
}

struct set_int {
  int *p;
  int v;
};

static void set_int(void *arg) {
  struct set_int *s = arg;
  *s->p = s->v;
}

static void test_sync_runs_work_in_enqueue_order(void **state) {
  struct fx *f = *state;
  int src = 0, dst = 0;
  struct set_int set = {&src, 42};
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, set_int, &set), 0);
  /* The copy must see the value the host function before it wrote. */
  assert_int_equal(f->d->memcpy_async(&f->dev, &dst, &src, sizeof(src), f->stream), 0);
  enqueue(f, f->stream, "abc");
  sync_stream(f);
  assert_int_equal(dst, 42);
  assert_string_equal(f->log.text, "abc");
}

static void test_sync_runs_all_queued_work_once(void **state) {
  struct fx *f = *state;
  for (int i = 0; i < 100; i++)
    enqueue(f, f->stream, "a");
  sync_stream(f);
  assert_int_equal(f->log.len, 100);
  sync_stream(f);
  assert_int_equal(f->log.len, 100);
}

static void test_event_query_not_ready_until_its_record_ran(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  enqueue(f, f->stream, "a");
  assert_int_equal(f->d->event_record(&f->dev, ev, f->stream), 0);
  enqueue(f, f->stream, "b");
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_NOTREADY);
  /* event_sync runs the stream up to the record, not beyond. */
  assert_int_equal(f->d->event_sync(&f->dev, ev), 0);
  assert_string_equal(f->log.text, "a");
  assert_int_equal(f->d->event_query(&f->dev, ev), 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "ab");
  f->d->event_destroy(&f->dev, ev);
}

static void test_event_never_recorded_is_complete(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->event_query(&f->dev, ev), 0);
  assert_int_equal(f->d->event_sync(&f->dev, ev), 0);
  f->d->event_destroy(&f->dev, ev);
}

static void test_event_query_follows_the_last_record(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->event_record(&f->dev, ev, f->stream), 0);
  sync_stream(f);
  assert_int_equal(f->d->event_query(&f->dev, ev), 0);
  enqueue(f, f->stream, "a");
  assert_int_equal(f->d->event_record(&f->dev, ev, f->stream), 0);
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_NOTREADY);
  sync_stream(f);
  assert_int_equal(f->d->event_query(&f->dev, ev), 0);
  f->d->event_destroy(&f->dev, ev);
}

static void test_event_destroyed_before_its_record_ran(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->event_record(&f->dev, ev, f->stream), 0);
  f->d->event_destroy(&f->dev, ev); /* allowed, as in CUDA: the record still runs */
  enqueue(f, f->stream, "a");
  sync_stream(f);
  assert_string_equal(f->log.text, "a");
}

/* ---------------------------------------------------------------- capture and replay */

static void test_capture_records_instead_of_running(void **state) {
  struct fx *f = *state;
  int src = 1, dst = 0;
  void *graph = NULL;
  size_t count = 0;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(capturing(f, f->stream), 1);
  enqueue(f, f->stream, "ab");
  assert_int_equal(f->d->memcpy_async(&f->dev, &dst, &src, sizeof(src), f->stream), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_int_equal(capturing(f, f->stream), 0);
  assert_int_equal(f->d->graph_node_count(&f->dev, graph, &count), 0);
  assert_int_equal(count, 3);
  sync_stream(f);
  assert_string_equal(f->log.text, "");
  assert_int_equal(dst, 0);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_capture_leaves_earlier_work_queued(void **state) {
  struct fx *f = *state;
  enqueue(f, f->stream, "a");
  void *graph = capture(f, "b");
  sync_stream(f);
  assert_string_equal(f->log.text, "a");
  f->d->graph_destroy(&f->dev, graph);
}

static void test_replay_runs_recorded_work_each_launch_in_order(void **state) {
  struct fx *f = *state;
  void *exec = exec_of(f, "ab");
  assert_int_equal(f->d->exec_upload(&f->dev, exec, f->stream), 0);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  enqueue(f, f->stream, "c");
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  assert_string_equal(f->log.text, ""); /* launches are deferred too */
  sync_stream(f);
  assert_string_equal(f->log.text, "abcabab");
  f->d->exec_destroy(&f->dev, exec);
}

static void test_exec_destroyed_after_launch_still_runs(void **state) {
  struct fx *f = *state;
  void *exec = exec_of(f, "ab");
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  f->d->exec_destroy(&f->dev, exec);
  sync_stream(f);
  assert_string_equal(f->log.text, "ab");
}

static void test_instantiate_twice_gives_independent_execs(void **state) {
  struct fx *f = *state;
  void *graph = capture(f, "a");
  void *x1 = instantiate(f, graph);
  void *x2 = instantiate(f, graph);
  f->d->graph_destroy(&f->dev, graph); /* the executables outlive their graph */
  void *other = capture(f, "b");
  assert_int_equal(f->d->exec_update(&f->dev, x1, other), 0);
  assert_int_equal(f->d->exec_launch(&f->dev, x1, f->stream), 0);
  assert_int_equal(f->d->exec_launch(&f->dev, x2, f->stream), 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "ba");
  f->d->graph_destroy(&f->dev, other);
  f->d->exec_destroy(&f->dev, x1);
  f->d->exec_destroy(&f->dev, x2);
}

static void test_event_recorded_in_capture_is_recorded_by_replay(void **state) {
  struct fx *f = *state;
  void *ev = NULL, *graph = NULL;
  size_t count = 0;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, "a");
  assert_int_equal(f->d->event_record(&f->dev, ev, f->stream), 0);
  enqueue(f, f->stream, "b");
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_int_equal(f->d->graph_node_count(&f->dev, graph, &count), 0);
  assert_int_equal(count, 3);
  void *exec = instantiate(f, graph);
  f->d->graph_destroy(&f->dev, graph);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_NOTREADY);
  assert_int_equal(f->d->event_sync(&f->dev, ev), 0);
  assert_string_equal(f->log.text, "a");
  sync_stream(f);
  assert_string_equal(f->log.text, "ab");
  f->d->exec_destroy(&f->dev, exec);
  f->d->event_destroy(&f->dev, ev);
}

static void test_graph_launch_inside_capture_invalidates(void **state) {
  struct fx *f = *state;
  void *inner = exec_of(f, "ab");
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, "c");
  /* CUDA does not capture graph launches: cudaErrorStreamCaptureUnsupported in every mode. */
  assert_int_equal(f->d->exec_launch(&f->dev, inner, f->stream), CGRT_E_CAPTURE);
  end_invalidated(f, f->stream, "exec_launch");
  assert_int_equal(f->d->exec_launch(&f->dev, inner, f->stream), 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "ab");
  f->d->exec_destroy(&f->dev, inner);
}

/* ---------------------------------------------------------------- exec update */

static void test_update_with_same_topology_swaps_arguments(void **state) {
  struct fx *f = *state;
  void *exec = exec_of(f, "ab");
  void *graph = capture(f, "cd");
  assert_int_equal(f->d->exec_update(&f->dev, exec, graph), 0);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "cd");
  f->d->graph_destroy(&f->dev, graph);
  f->d->exec_destroy(&f->dev, exec);
}

static void test_update_leaves_pending_launches_alone(void **state) {
  struct fx *f = *state;
  void *exec = exec_of(f, "ab");
  void *graph = capture(f, "cd");
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  assert_int_equal(f->d->exec_update(&f->dev, exec, graph), 0);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "abcd");
  f->d->graph_destroy(&f->dev, graph);
  f->d->exec_destroy(&f->dev, exec);
}

/* exec_update refuses `graph`, says `why`, and `exec` still runs "ab". */
static void assert_update_refused(struct fx *f, void *exec, void *graph, const char *why) {
  assert_int_equal(f->d->exec_update(&f->dev, exec, graph), CGRT_E_UPDATE);
  assert_non_null(strstr(f->dev.err, why));
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "ab");
  f->d->graph_destroy(&f->dev, graph);
  f->d->exec_destroy(&f->dev, exec);
}

static void test_update_refused_on_node_count(void **state) {
  struct fx *f = *state;
  void *exec = exec_of(f, "ab");
  assert_update_refused(f, exec, capture(f, "cde"), "node count differs");
}

static void test_update_refused_on_host_function(void **state) {
  struct fx *f = *state;
  void *exec = exec_of(f, "ab"), *graph = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, "c");
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, append_again, L(f, 'd')), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_update_refused(f, exec, graph, "node 1: host function differs");
}

static void test_update_refused_on_node_type(void **state) {
  struct fx *f = *state;
  int src = 0, dst = 0;
  void *exec = exec_of(f, "ab"), *graph = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, "c");
  assert_int_equal(f->d->memcpy_async(&f->dev, &dst, &src, sizeof(src), f->stream), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_update_refused(f, exec, graph, "node 1: type differs");
}

/* A graph of one copy of `bytes` from src to dst. */
static void *copy_graph(struct fx *f, void *dst, const void *src, size_t bytes) {
  void *graph = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->memcpy_async(&f->dev, dst, src, bytes, f->stream), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  return graph;
}

static void test_memcpy_node_replays_and_updates_addresses(void **state) {
  struct fx *f = *state;
  char src1[4] = "abc", src2[8] = "defghij", dst1[8] = "", dst2[8] = "";
  void *g1 = copy_graph(f, dst1, src1, sizeof(src1));
  void *exec = instantiate(f, g1);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  sync_stream(f);
  assert_string_equal(dst1, "abc");
  void *g2 = copy_graph(f, dst2, src2, sizeof(src2));
  assert_int_equal(f->d->exec_update(&f->dev, exec, g2), 0);
  memset(dst1, 0, sizeof(dst1));
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  sync_stream(f);
  assert_string_equal(dst2, "defghij");
  assert_string_equal(dst1, ""); /* the old destination is no longer written */
  f->d->graph_destroy(&f->dev, g1);
  f->d->graph_destroy(&f->dev, g2);
  f->d->exec_destroy(&f->dev, exec);
}

/* ---------------------------------------------------------------- capture rules */

static void test_sync_inside_capture_invalidates_it(void **state) {
  struct fx *f = *state;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, "a");
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), CGRT_E_CAPTURE);
  assert_int_equal(capturing(f, f->stream), 1); /* still open: it must be ended */
  end_invalidated(f, f->stream, "stream_sync");
  /* The stream works normally again. */
  enqueue(f, f->stream, "b");
  sync_stream(f);
  assert_string_equal(f->log.text, "b");
}

static void test_work_into_invalidated_capture_is_refused(void **state) {
  struct fx *f = *state;
  void *exec = exec_of(f, "a");
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), CGRT_E_CAPTURE);
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, append, L(f, 'b')), CGRT_E_CAPTURE);
  assert_non_null(strstr(f->dev.err, "invalidated"));
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), CGRT_E_CAPTURE);
  end_invalidated(f, f->stream, "stream_sync");
  f->d->exec_destroy(&f->dev, exec);
}

static void test_event_query_of_captured_event_invalidates(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->event_record(&f->dev, ev, f->stream), 0);
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_CAPTURE);
  end_invalidated(f, f->stream, "event_query");
  f->d->event_destroy(&f->dev, ev);
}

static void test_event_sync_of_captured_event_invalidates(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->event_record(&f->dev, ev, f->stream), 0);
  assert_int_equal(f->d->event_sync(&f->dev, ev), CGRT_E_CAPTURE);
  end_invalidated(f, f->stream, "event_sync");
  f->d->event_destroy(&f->dev, ev);
}

static void test_global_mode_sync_of_other_stream_invalidates(void **state) {
  struct fx *f = *state;
  void *other = NULL;
  assert_int_equal(f->d->stream_create(&f->dev, &other), 0);
  enqueue(f, other, "a");
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, "b");
  assert_int_equal(f->d->stream_sync(&f->dev, other), CGRT_E_CAPTURE);
  assert_non_null(strstr(f->dev.err, "global"));
  end_invalidated(f, f->stream, "stream_sync");
  assert_int_equal(f->d->stream_sync(&f->dev, other), 0);
  assert_string_equal(f->log.text, "a");
  f->d->stream_destroy(&f->dev, other);
}

static void test_thread_local_mode_sync_of_other_stream_invalidates(void **state) {
  struct fx *f = *state;
  void *other = NULL;
  assert_int_equal(f->d->stream_create(&f->dev, &other), 0);
  enqueue(f, other, "a");
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  /* As CUDA does with one thread: thread_local differs from global only for other threads. */
  assert_int_equal(f->d->stream_sync(&f->dev, other), CGRT_E_CAPTURE);
  assert_string_equal(f->log.text, "");
  end_invalidated(f, f->stream, "stream_sync");
  f->d->stream_destroy(&f->dev, other);
}

static void test_relaxed_mode_allows_sync_of_other_stream(void **state) {
  struct fx *f = *state;
  void *other = NULL, *graph = NULL;
  assert_int_equal(f->d->stream_create(&f->dev, &other), 0);
  enqueue(f, other, "a");
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, "b");
  assert_int_equal(f->d->stream_sync(&f->dev, other), 0);
  assert_string_equal(f->log.text, "a");
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  f->d->graph_destroy(&f->dev, graph);
  f->d->stream_destroy(&f->dev, other);
}

static void test_thread_local_mode_event_query_in_capture_invalidates(void **state) {
  struct fx *f = *state;
  void *ev = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  /* Any event, even one never recorded. */
  assert_int_equal(f->d->event_query(&f->dev, ev), CGRT_E_CAPTURE);
  end_invalidated(f, f->stream, "event_query");
  f->d->event_destroy(&f->dev, ev);
}

static void test_relaxed_mode_allows_event_query_in_capture(void **state) {
  struct fx *f = *state;
  void *ev = NULL, *graph = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->event_query(&f->dev, ev), 0);
  assert_int_equal(f->d->event_sync(&f->dev, ev), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  f->d->graph_destroy(&f->dev, graph);
  f->d->event_destroy(&f->dev, ev);
}

static void test_thread_local_mode_instantiate_in_capture_invalidates(void **state) {
  struct fx *f = *state;
  void *graph = capture(f, "a"), *exec = (void *)1;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->graph_instantiate(&f->dev, graph, &exec), CGRT_E_CAPTURE);
  assert_null(exec);
  end_invalidated(f, f->stream, "graph_instantiate");
  f->d->graph_destroy(&f->dev, graph);
}

static void test_relaxed_mode_allows_instantiate_in_capture(void **state) {
  struct fx *f = *state;
  void *graph = capture(f, "a"), *other = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  void *exec = instantiate(f, graph);
  f->d->exec_destroy(&f->dev, exec);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &other), 0);
  f->d->graph_destroy(&f->dev, other);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_thread_local_mode_allows_exec_destroy_in_capture(void **state) {
  struct fx *f = *state;
  void *exec = exec_of(f, "a"), *graph = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  f->d->exec_destroy(&f->dev, exec); /* an eviction while capturing */
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_async_work_on_other_stream_allowed_in_capture(void **state) {
  struct fx *f = *state;
  void *other = NULL, *ev = NULL, *graph = NULL, *exec = exec_of(f, "ab");
  int src = 5, dst = 0;
  size_t count = 0;
  assert_int_equal(f->d->stream_create(&f->dev, &other), 0);
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  enqueue(f, f->stream, "x");
  enqueue(f, other, "c");
  assert_int_equal(f->d->memcpy_async(&f->dev, &dst, &src, sizeof(src), other), 0);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, other), 0);
  assert_int_equal(f->d->exec_upload(&f->dev, exec, other), 0);
  assert_int_equal(f->d->event_record(&f->dev, ev, other), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_int_equal(f->d->graph_node_count(&f->dev, graph, &count), 0);
  assert_int_equal(count, 1); /* only the capturing stream's work */
  assert_int_equal(f->d->stream_sync(&f->dev, other), 0);
  assert_string_equal(f->log.text, "cab");
  assert_int_equal(dst, 5);
  assert_int_equal(f->d->event_query(&f->dev, ev), 0);
  f->d->graph_destroy(&f->dev, graph);
  f->d->exec_destroy(&f->dev, exec);
  f->d->event_destroy(&f->dev, ev);
  f->d->stream_destroy(&f->dev, other);
}

static void test_relaxed_mode_allows_mem_alloc_in_capture(void **state) {
  struct fx *f = *state;
  void *ptr = NULL, *graph = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->mem_alloc(&f->dev, &ptr, 64), 0);
  assert_non_null(ptr);
  f->d->mem_free(&f->dev, ptr);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  f->d->graph_destroy(&f->dev, graph);
}

/* In `mode`, mem_alloc inside a capture is refused and invalidates it. */
static void assert_mem_alloc_refused_in_capture(struct fx *f, const char *mode) {
  void *ptr = (void *)1;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->mem_alloc(&f->dev, &ptr, 64), CGRT_E_CAPTURE);
  assert_null(ptr);
  assert_non_null(strstr(f->dev.err, mode));
  end_invalidated(f, f->stream, "mem_alloc");
  assert_int_equal(f->d->mem_alloc(&f->dev, &ptr, 64), 0); /* fine outside the capture */
  f->d->mem_free(&f->dev, ptr);
}

static void test_thread_local_mode_refuses_mem_alloc_in_capture(void **state) {
  assert_mem_alloc_refused_in_capture(*state, "thread_local");
}

static void test_global_mode_refuses_mem_alloc_in_capture(void **state) {
  assert_mem_alloc_refused_in_capture(*state, "global");
}

static void test_mem_free_in_capture_invalidates(void **state) {
  struct fx *f = *state;
  void *ptr = NULL;
  assert_int_equal(f->d->mem_alloc(&f->dev, &ptr, 64), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  f->d->mem_free(&f->dev, ptr);
  end_invalidated(f, f->stream, "mem_free");
}

static void test_nested_capture_begin_refused(void **state) {
  struct fx *f = *state;
  void *graph = NULL;
  size_t count = 0;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), CGRT_E_CAPTURE);
  assert_non_null(strstr(f->dev.err, "already capturing"));
  enqueue(f, f->stream, "a"); /* the first capture goes on */
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_int_equal(f->d->graph_node_count(&f->dev, graph, &count), 0);
  assert_int_equal(count, 1);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_capture_end_without_begin_refused(void **state) {
  struct fx *f = *state;
  void *graph = (void *)1;
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), CGRT_E_CAPTURE);
  assert_null(graph);
  assert_non_null(strstr(f->dev.err, "not capturing"));
}

/* ---------------------------------------------------------------- faults */

/*
 * Faults armed in a struct cgrt_faults fire where the core calls the driver (faults.c), here on
 * the host driver's operations: each fails once as the device would, then the driver's own runs.
 */
static void test_fault_instantiate_fails_once(void **state) {
  struct fx *f = *state;
  struct cgrt_faults faults = {.instantiate = 1};
  void *graph = capture(f, "a"), *exec = (void *)1;
  assert_int_equal(cgrt__fault_graph_instantiate(&faults, &f->dev, graph, &exec), CGRT_E_DEVICE);
  assert_null(exec);
  assert_non_null(strstr(f->dev.err, "injected"));
  assert_int_equal(faults.instantiate, 0);
  assert_int_equal(cgrt__fault_graph_instantiate(&faults, &f->dev, graph, &exec), 0);
  f->d->exec_destroy(&f->dev, exec);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_fault_update_refuses_once(void **state) {
  struct fx *f = *state;
  struct cgrt_faults faults = {.update = 1};
  void *exec = exec_of(f, "ab"), *graph = capture(f, "cd");
  assert_int_equal(cgrt__fault_exec_update(&faults, &f->dev, exec, graph), CGRT_E_UPDATE);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  assert_int_equal(cgrt__fault_exec_update(&faults, &f->dev, exec, graph), 0);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, f->stream), 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "abcd");
  f->d->graph_destroy(&f->dev, graph);
  f->d->exec_destroy(&f->dev, exec);
}

static void test_fault_mem_alloc_fails_once(void **state) {
  struct fx *f = *state;
  struct cgrt_faults faults = {.mem_alloc = 1};
  void *ptr = (void *)1;
  assert_int_equal(cgrt__fault_mem_alloc(&faults, &f->dev, &ptr, 16), CGRT_E_NOMEM);
  assert_null(ptr);
  assert_int_equal(cgrt__fault_mem_alloc(&faults, &f->dev, &ptr, 16), 0);
  f->d->mem_free(&f->dev, ptr);
}

static void test_fault_launch_fails_once(void **state) {
  struct fx *f = *state;
  struct cgrt_faults faults = {.launch = 1};
  void *exec = exec_of(f, "a");
  assert_int_equal(cgrt__fault_exec_launch(&faults, &f->dev, exec, f->stream), CGRT_E_DEVICE);
  assert_int_equal(cgrt__fault_exec_launch(&faults, &f->dev, exec, f->stream), 0);
  sync_stream(f);
  assert_string_equal(f->log.text, "a"); /* the failed launch ran nothing */
  f->d->exec_destroy(&f->dev, exec);
}

/* ---------------------------------------------------------------- lifetime and misuse */

static void test_destroy_stream_with_pending_work_runs_nothing(void **state) {
  struct fx *f = *state;
  void *other = NULL, *ev = NULL, *exec = exec_of(f, "ab");
  assert_int_equal(f->d->stream_create(&f->dev, &other), 0);
  assert_int_equal(f->d->event_create(&f->dev, &ev), 0);
  enqueue(f, other, "c");
  assert_int_equal(f->d->exec_launch(&f->dev, exec, other), 0);
  assert_int_equal(f->d->event_record(&f->dev, ev, other), 0);
  f->d->stream_destroy(&f->dev, other);
  assert_string_equal(f->log.text, "");
  /* Nobody waits forever for work that was dropped. */
  assert_int_equal(f->d->event_query(&f->dev, ev), 0);
  assert_int_equal(f->d->event_sync(&f->dev, ev), 0);
  f->d->event_destroy(&f->dev, ev);
  f->d->exec_destroy(&f->dev, exec);
}

static void test_destroy_capturing_stream_discards_capture(void **state) {
  struct fx *f = *state;
  void *other = NULL;
  assert_int_equal(f->d->stream_create(&f->dev, &other), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, other), 0);
  enqueue(f, other, "a");
  f->d->stream_destroy(&f->dev, other);
  sync_stream(f);
  assert_string_equal(f->log.text, "");
}

static void test_close_frees_streams_left_open(void **state) {
  (void)state;
  struct cgrt_dev dev = {.drv = &cgrt__driver_host};
  void *stream = NULL;
  struct log log = {.len = 0};
  struct letter a = {&log, 'a'};
  assert_int_equal(dev.drv->open(&dev), 0);
  assert_int_equal(dev.drv->stream_create(&dev, &stream), 0);
  assert_int_equal(dev.drv->host_fn(&dev, stream, append, &a), 0);
  assert_int_equal(dev.drv->capture_begin(&dev, stream), 0);
  dev.drv->close(&dev); /* valgrind: nothing leaks */
  assert_string_equal(log.text, "");
}

struct sync_from_fn {
  struct fx *f;
  int rc;
};

static void sync_inside(void *arg) {
  struct sync_from_fn *s = arg;
  s->rc = s->f->d->stream_sync(&s->f->dev, s->f->stream);
}

static void test_sync_from_host_function_refused(void **state) {
  struct fx *f = *state;
  struct sync_from_fn s = {f, 0};
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, sync_inside, &s), 0);
  sync_stream(f);
  assert_int_equal(s.rc, CGRT_E_STATE);
}

static void test_wrong_handle_kind_refused(void **state) {
  struct fx *f = *state;
  void *graph = capture(f, "a");
  void *exec = instantiate(f, graph);
  void *dummy = NULL;
  assert_int_equal(f->d->exec_launch(&f->dev, graph, f->stream), CGRT_E_INVAL);
  assert_int_equal(f->d->graph_instantiate(&f->dev, exec, &dummy), CGRT_E_INVAL);
  assert_int_equal(f->d->exec_launch(&f->dev, exec, graph), CGRT_E_INVAL);
  assert_int_equal(f->d->host_fn(&f->dev, NULL, append, L(f, 'a')), CGRT_E_INVAL);
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, NULL, NULL), CGRT_E_INVAL);
  f->d->exec_destroy(&f->dev, exec);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_devs_are_independent(void **state) {
  struct fx *f = *state;
  struct cgrt_dev other = {.drv = &cgrt__driver_host};
  void *stream = NULL;
  assert_int_equal(other.drv->open(&other), 0);
  assert_int_equal(other.drv->host_fn(&other, f->stream, append, L(f, 'a')), CGRT_E_INVAL);
  assert_int_equal(other.drv->stream_create(&other, &stream), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(other.drv->stream_sync(&other, stream), 0); /* f's capture is not other's */
  other.drv->stream_destroy(&other, stream);
  other.drv->close(&other);
  void *graph = NULL;
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  f->d->graph_destroy(&f->dev, graph);
}

static void test_memory_is_zeroed_host_memory(void **state) {
  struct fx *f = *state;
  unsigned char *p = NULL;
  size_t free_bytes = 0, total = 0;
  uint64_t used = 1, reserved = 1;
  assert_int_equal(f->d->mem_alloc(&f->dev, (void **)&p, 4096), 0);
  for (size_t i = 0; i < 4096; i++)
    assert_int_equal(p[i], 0);
  p[4095] = 1; /* host memory, writable */
  f->d->mem_free(&f->dev, p);
  assert_int_equal(f->d->mem_info(&f->dev, &free_bytes, &total), 0);
  assert_true(total > 0);
  assert_true(free_bytes <= total);
  assert_int_equal(f->d->graph_mem(&f->dev, &used, &reserved), 0);
  assert_int_equal(used, 0);
  assert_int_equal(reserved, 0);
}

/* ---------------------------------------------------------------- graph memory model */

/* Captures alloc(a), [alloc(b)], free(a), [free(b) unless keep_b] into an executable. */
static void *graph_with_allocs(struct fx *f, size_t a, size_t b, int keep_b, void **pa) {
  void *graph = NULL, *exec = NULL, *p = NULL, *q = NULL;
  uint64_t alloc = 0;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->mem_alloc_async(&f->dev, f->stream, a, &p), 0);
  assert_non_null(p);
  ((unsigned char *)p)[a - 1] = 7; /* the address is usable at once, as a graph's is */
  if (b)
    assert_int_equal(f->d->mem_alloc_async(&f->dev, f->stream, b, &q), 0);
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, append, L(f, 'a')), 0);
  assert_int_equal(f->d->mem_free_async(&f->dev, f->stream, p), 0);
  if (b && !keep_b)
    assert_int_equal(f->d->mem_free_async(&f->dev, f->stream, q), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_int_equal(f->d->graph_alloc_bytes(&f->dev, graph, &alloc), 0);
  assert_int_equal(alloc, a + b);
  assert_int_equal(f->d->graph_instantiate(&f->dev, graph, &exec), 0);
  f->d->graph_destroy(&f->dev, graph);
  if (pa)
    *pa = p;
  return exec;
}

static void graph_mem_is(struct fx *f, uint64_t used, uint64_t reserved) {
  uint64_t u = 0, r = 0;
  assert_int_equal(f->d->graph_mem(&f->dev, &u, &r), 0);
  assert_int_equal(u, used);
  assert_int_equal(r, reserved);
}

/* Graph memory is mapped at upload or first launch, not at capture or instantiate. */
static void test_graph_memory_mapped_at_upload_or_launch(void **state) {
  struct fx *f = *state;
  void *x = graph_with_allocs(f, 1000, 0, 0, NULL);
  void *y = graph_with_allocs(f, 3000, 0, 0, NULL);
  graph_mem_is(f, 0, 0);
  assert_int_equal(f->d->exec_upload(&f->dev, x, f->stream), 0);
  graph_mem_is(f, 1000, 1000);
  assert_int_equal(f->d->exec_launch(&f->dev, y, f->stream), 0);
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), 0);
  assert_string_equal(f->log.text, "a");
  graph_mem_is(f, 3000, 3000); /* shared: the largest footprint, not the sum */
  f->d->exec_destroy(&f->dev, x);
  f->d->exec_destroy(&f->dev, y);
}

/* Allocations a graph frees itself are shared between executables; others add up. */
static void test_graph_memory_shared_and_unshared(void **state) {
  struct fx *f = *state;
  void *x = graph_with_allocs(f, 100, 400, 1, NULL); /* 100 shared, 400 kept */
  void *y = graph_with_allocs(f, 300, 50, 0, NULL);  /* 350 shared (both live at once) */
  assert_int_equal(f->d->exec_upload(&f->dev, x, f->stream), 0);
  assert_int_equal(f->d->exec_upload(&f->dev, y, f->stream), 0);
  graph_mem_is(f, 400 + 350, 750);
  f->d->exec_destroy(&f->dev, y);
  graph_mem_is(f, 500, 750); /* reserved until a trim */
  assert_int_equal(f->d->graph_mem_trim(&f->dev), 0);
  graph_mem_is(f, 500, 500);
  f->d->exec_destroy(&f->dev, x);
  assert_int_equal(f->d->graph_mem_trim(&f->dev), 0);
  graph_mem_is(f, 0, 0);
}

/* With a granularity set, the pool reserves and trims in whole granules (CUDA's 32 MiB). */
static void test_graph_memory_reserved_in_granules(void **state) {
  struct fx *f = *state;
  assert_int_equal(cgrt__host_set_pool_granule(&f->dev, 4096), 0);
  void *x = graph_with_allocs(f, 100, 0, 0, NULL);
  void *y = graph_with_allocs(f, 3000, 0, 0, NULL); /* shares x's granule */
  void *z = graph_with_allocs(f, 4097, 0, 0, NULL); /* needs two */
  assert_int_equal(f->d->exec_upload(&f->dev, x, f->stream), 0);
  graph_mem_is(f, 100, 4096);
  assert_int_equal(f->d->exec_upload(&f->dev, y, f->stream), 0);
  graph_mem_is(f, 3000, 4096);
  assert_int_equal(f->d->exec_upload(&f->dev, z, f->stream), 0);
  graph_mem_is(f, 4097, 8192);
  f->d->exec_destroy(&f->dev, z);
  assert_int_equal(f->d->graph_mem_trim(&f->dev), 0);
  graph_mem_is(f, 3000, 4096); /* what the live graphs use, rounded up */
  f->d->exec_destroy(&f->dev, x);
  f->d->exec_destroy(&f->dev, y);
  assert_int_equal(f->d->graph_mem_trim(&f->dev), 0);
  graph_mem_is(f, 0, 0);
  struct cgrt_dev other = {0};
  assert_int_equal(cgrt__host_set_pool_granule(&other, 4096), CGRT_E_INVAL);
}

/* Free memory moves with the pool and the executables' own memory, nothing else. */
static void test_mem_info_counts_graph_memory(void **state) {
  struct fx *f = *state;
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  assert_int_equal(f->d->mem_info(&f->dev, &free0, &total), 0);
  void *x = graph_with_allocs(f, 8192, 0, 0, NULL); /* 3 nodes: alloc, host, free */
  assert_int_equal(f->d->mem_info(&f->dev, &free1, &total), 0);
  assert_int_equal(free0 - free1, 3 * 256);
  assert_int_equal(f->d->exec_upload(&f->dev, x, f->stream), 0);
  assert_int_equal(f->d->mem_info(&f->dev, &free2, &total), 0);
  assert_int_equal(free1 - free2, 8192);
  f->d->exec_destroy(&f->dev, x);
  assert_int_equal(f->d->graph_mem_trim(&f->dev), 0);
  assert_int_equal(f->d->mem_info(&f->dev, &free2, &total), 0);
  assert_int_equal(free2, free0);
}

/* Outside a capture, stream-ordered memory is freed once the work before the free has run. */
static void test_eager_async_memory_freed_in_stream_order(void **state) {
  struct fx *f = *state;
  void *p = NULL;
  assert_int_equal(f->d->mem_alloc_async(&f->dev, f->stream, 64, &p), 0);
  memset(p, 1, 64);
  assert_int_equal(f->d->mem_free_async(&f->dev, f->stream, p), 0);
  assert_int_equal(f->d->mem_free_async(&f->dev, f->stream, p), CGRT_E_INVAL); /* twice */
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), 0);
  graph_mem_is(f, 0, 0);
}

/* A free inside a capture of memory the capture did not allocate is refused. */
static void test_capture_free_of_outside_memory_refused(void **state) {
  struct fx *f = *state;
  void *p = NULL, *graph = NULL;
  assert_int_equal(f->d->mem_alloc_async(&f->dev, f->stream, 64, &p), 0);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->mem_free_async(&f->dev, f->stream, p), CGRT_E_INVAL);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), CGRT_E_CAPTURE);
  assert_null(graph);
  assert_int_equal(f->d->mem_free_async(&f->dev, f->stream, p), 0);
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), 0);
}

/* An executable with memory nodes is not updated in place: it must be instantiated again. */
static void test_update_refused_with_memory_nodes(void **state) {
  struct fx *f = *state;
  void *x = graph_with_allocs(f, 64, 0, 0, NULL), *graph = NULL, *p = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->mem_alloc_async(&f->dev, f->stream, 64, &p), 0);
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, append, L(f, 'a')), 0);
  assert_int_equal(f->d->mem_free_async(&f->dev, f->stream, p), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_int_equal(f->d->exec_update(&f->dev, x, graph), CGRT_E_UPDATE);
  assert_non_null(strstr(f->dev.err, "memory node"));
  f->d->graph_destroy(&f->dev, graph);
  f->d->exec_destroy(&f->dev, x);
}

/* ---------------------------------------------------------------- the cost model (issue 43) */

/* Letters 'a'..'z' cost 1000 ns each on the device, times the letter's rank (a: 1 us, b: 2 us). */
static uint64_t letter_ns(void *user, void (*fn)(void *), void *arg) {
  (void)user;
  (void)fn;
  const struct letter *l = arg;
  return 1000u * (uint64_t)(l->c - 'a' + 1);
}

/* Records a timed event pair around work, syncs, and gives the elapsed time in us. */
static double timed(struct fx *f, void *a, void *b, void (*work)(struct fx *f)) {
  assert_int_equal(f->d->event_record(&f->dev, a, f->stream), 0);
  work(f);
  assert_int_equal(f->d->event_record(&f->dev, b, f->stream), 0);
  double us = -1;
  assert_int_equal(f->d->event_elapsed(&f->dev, a, b, &us), CGRT_E_NOTREADY); /* nothing ran */
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), 0);
  assert_int_equal(f->d->event_elapsed(&f->dev, a, b, &us), 0);
  return us;
}

static void four_eager_a(struct fx *f) {
  for (int i = 0; i < 4; i++)
    assert_int_equal(f->d->host_fn(&f->dev, f->stream, append, L(f, 'a')), 0);
}

static void four_eager_c(struct fx *f) {
  for (int i = 0; i < 4; i++)
    assert_int_equal(f->d->host_fn(&f->dev, f->stream, append, L(f, 'c')), 0);
}

static void *exec_of_four(struct fx *f, char c) {
  void *graph = NULL, *x = NULL;
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(f->d->host_fn(&f->dev, f->stream, append, L(f, c)), 0);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), 0);
  assert_int_equal(f->d->graph_instantiate(&f->dev, graph, &x), 0);
  f->d->graph_destroy(&f->dev, graph);
  return x;
}

static void *launched;
static void launch_it(struct fx *f) {
  assert_int_equal(f->d->exec_launch(&f->dev, launched, f->stream), 0);
}

/*
 * Eager work of cheap nodes is bound by its launches (the device waits for the host), heavy
 * nodes by their own time; a launched graph pays its launch once and graph_node_ns per node. So
 * a graph of larger (padded) nodes can be slower than eager work of smaller ones, as on a GPU.
 */
static void test_cost_model_times_eager_and_graphs(void **state) {
  struct fx *f = *state;
  for (int i = 0; i < 26; i++)
    *L(f, (char)('a' + i)) = (struct letter){&f->log, (char)('a' + i)};
  void *a = NULL, *b = NULL;
  assert_int_equal(f->d->event_create_timed(&f->dev, &a), 0);
  assert_int_equal(f->d->event_create_timed(&f->dev, &b), 0);
  /* no model: no time passes */
  assert_true(timed(f, a, b, four_eager_a) == 0);
  struct cgrt_host_cost cost = {
      .launch_ns = 3000, .graph_launch_ns = 2000, .graph_node_ns = 500, .node_ns = letter_ns};
  assert_int_equal(cgrt__host_set_cost(&f->dev, &cost), 0);
  /* launch-bound: 4 launches of 3 us, each node 1 us: the last ends 4 * 3 + 1 us after start */
  double eager_a = timed(f, a, b, four_eager_a);
  assert_true(eager_a > 12.9 && eager_a < 13.1);
  /* work-bound: nodes of 3 us after launches of 3 us: 3 + 4 * 3 = 15 us */
  double eager_c = timed(f, a, b, four_eager_c);
  assert_true(eager_c > 14.9 && eager_c < 15.1);
  /* a graph of four 'c' nodes: launch 2 us, then 4 * (3 + 0.5) us */
  launched = exec_of_four(f, 'c');
  double graph_c = timed(f, a, b, launch_it);
  assert_true(graph_c > 15.9 && graph_c < 16.1);
  /* the padded graph ('c', three times the work) is slower than eager 'a' work; an exact one
     ('a' nodes) is faster than both */
  assert_true(graph_c > eager_a);
  f->d->exec_destroy(&f->dev, launched);
  launched = exec_of_four(f, 'a');
  double graph_a = timed(f, a, b, launch_it);
  assert_true(graph_a > 7.9 && graph_a < 8.1 && graph_a < eager_a);
  f->d->exec_destroy(&f->dev, launched);
  /* an event never recorded is refused; inside a capture, the elapsed read invalidates it */
  void *fresh = NULL, *graph = NULL;
  double us;
  assert_int_equal(f->d->event_create_timed(&f->dev, &fresh), 0);
  assert_int_equal(f->d->event_elapsed(&f->dev, fresh, b, &us), CGRT_E_INVAL);
  assert_int_equal(f->d->capture_begin(&f->dev, f->stream), 0);
  assert_int_equal(f->d->event_elapsed(&f->dev, a, b, &us), CGRT_E_CAPTURE);
  assert_int_equal(f->d->capture_end(&f->dev, f->stream, &graph), CGRT_E_CAPTURE);
  assert_int_equal(cgrt__host_set_cost(&f->dev, NULL), 0);
  f->d->event_destroy(&f->dev, fresh);
  f->d->event_destroy(&f->dev, a);
  f->d->event_destroy(&f->dev, b);
}

/* Appends c eagerly; the host clock after the launch, in us from t0. */
static double eager_at(struct fx *f, char c, uint64_t t0) {
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, append, L(f, c)), 0);
  return (double)(f->d->host_clock_ns(&f->dev) - t0) / 1000.0;
}

/*
 * queue_depth: a launch onto a stream holding that many unfinished launches waits until the
 * oldest has finished (its work runs then, the host clock moves up to its end), as a host far
 * ahead of a GPU waits in its launches; a graph launch is one launch whatever its nodes.
 */
static void test_cost_model_launch_queue_depth(void **state) {
  struct fx *f = *state;
  for (int i = 0; i < 26; i++)
    *L(f, (char)('a' + i)) = (struct letter){&f->log, (char)('a' + i)};
  struct cgrt_host_cost cost = {.launch_ns = 1000,
                                .graph_launch_ns = 2000,
                                .graph_node_ns = 500,
                                .node_ns = letter_ns,
                                .queue_depth = 3};
  assert_int_equal(cgrt__host_set_cost(&f->dev, &cost), 0);
  launched = exec_of_four(f, 'a'); /* four nodes of 1.5 us in a graph */
  const uint64_t t0 = f->d->host_clock_ns(&f->dev);
  /* three launches of 'j' (10 us each) queue at 1, 2 and 3 us; nothing has run */
  for (int i = 0; i < 3; i++)
    assert_true(eager_at(f, 'j', t0) == i + 1.0);
  assert_string_equal(f->log.text, "");
  /* the fourth waits for the first (1 to 11 us), the fifth for the second (11 to 21 us) */
  assert_true(eager_at(f, 'j', t0) == 12.0);
  assert_string_equal(f->log.text, "j");
  assert_true(eager_at(f, 'j', t0) == 21.0 + 1.0);
  /* the graph waits for the third 'j' (21 to 31 us) and takes one place in the queue */
  assert_int_equal(f->d->exec_launch(&f->dev, launched, f->stream), 0);
  assert_true(f->d->host_clock_ns(&f->dev) - t0 == 33000);
  assert_string_equal(f->log.text, "jjj");
  /* two more wait for the fourth and fifth 'j' (to 41 and 51 us); the next for the whole graph,
     four nodes from 51 to 57 us */
  assert_true(eager_at(f, 'a', t0) == 42.0);
  assert_true(eager_at(f, 'a', t0) == 52.0);
  assert_true(eager_at(f, 'a', t0) == 58.0);
  assert_string_equal(f->log.text, "jjjjjaaaa");
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), 0);
  assert_string_equal(f->log.text, "jjjjjaaaaaaa");
  /* without a depth, launches never wait */
  cost.queue_depth = 0;
  assert_int_equal(cgrt__host_set_cost(&f->dev, &cost), 0);
  const uint64_t t1 = f->d->host_clock_ns(&f->dev);
  for (int i = 0; i < 8; i++)
    assert_true(eager_at(f, 'j', t1) == i + 1.0);
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), 0);
  f->d->exec_destroy(&f->dev, launched);
  assert_int_equal(cgrt__host_set_cost(&f->dev, NULL), 0);
}

/*
 * device_beside: before an event is read, the queued work that starts by the host clock runs, so
 * an event reads as reached when a GPU beside the host would have reached it, and not when work
 * queued before it still runs past the host's clock. Without it, nothing runs until a wait.
 */
static void test_cost_model_device_beside(void **state) {
  struct fx *f = *state;
  for (int i = 0; i < 26; i++)
    *L(f, (char)('a' + i)) = (struct letter){&f->log, (char)('a' + i)};
  void *e = NULL;
  assert_int_equal(f->d->event_create(&f->dev, &e), 0);
  struct cgrt_host_cost cost = {.launch_ns = 1000, .node_ns = letter_ns, .device_beside = 1};
  assert_int_equal(cgrt__host_set_cost(&f->dev, &cost), 0);
  const uint64_t t0 = f->d->host_clock_ns(&f->dev);
  /* 'j' (10 us) launched at 1 us, the event recorded behind it: the device ends 'j' at 11 us */
  assert_true(eager_at(f, 'j', t0) == 1.0);
  assert_int_equal(f->d->event_record(&f->dev, e, f->stream), 0);
  /* host at 1 us: 'j' has started (it runs whole), the event is behind it */
  assert_int_equal(f->d->event_query(&f->dev, e), CGRT_E_NOTREADY);
  assert_string_equal(f->log.text, "j");
  for (int i = 0; i < 12; i++) /* cheap work the host issues until its clock passes 11 us */
    (void)eager_at(f, 'a', t0);
  assert_int_equal(f->d->event_query(&f->dev, e), 0);
  /* the 'a's launched at 2-13 us start after 'j', from 11 us: those by 13 us have run */
  assert_string_equal(f->log.text, "jaaa");
  assert_true(f->d->host_clock_ns(&f->dev) - t0 == 13000); /* the host waited for nothing */
  /* without it, the same reads as not reached until the stream is synchronized */
  cost.device_beside = 0;
  assert_int_equal(cgrt__host_set_cost(&f->dev, &cost), 0);
  assert_int_equal(f->d->event_record(&f->dev, e, f->stream), 0);
  for (int i = 0; i < 12; i++)
    (void)eager_at(f, 'a', t0);
  assert_int_equal(f->d->event_query(&f->dev, e), CGRT_E_NOTREADY);
  assert_int_equal(f->d->stream_sync(&f->dev, f->stream), 0);
  assert_int_equal(f->d->event_query(&f->dev, e), 0);
  assert_int_equal(cgrt__host_set_cost(&f->dev, NULL), 0);
  f->d->event_destroy(&f->dev, e);
}

/* A peer of the test's one-rank group: contributes 5 to values[0] and -1 to the others. */
static void peer_max(void *user, const void *comm, double *values, int n) {
  *(const void **)user = comm;
  values[0] = 5;
  for (int i = 1; i < n; i++)
    values[i] = -1;
}

/*
 * comm_max over the host driver's one-rank groups: the values stay this rank's, after the stream
 * ran (the cuda driver's reduction waits for it); with a test's peers, the maximum of both.
 */
static void test_comm_max_of_one_rank_and_of_peers(void **state) {
  struct fx *f = *state;
  int comm = 0;
  double v[2] = {1.5, 2.5};
  assert_int_equal(f->d->host_fn(&f->dev, f->stream, append, L(f, 'a')), 0);
  assert_int_equal(f->d->comm_max(&f->dev, &comm, v, 2, f->stream), 0);
  assert_string_equal(f->log.text, "a"); /* the stream was waited for */
  assert_true(v[0] == 1.5 && v[1] == 2.5);
  const void *seen = NULL;
  assert_int_equal(cgrt__host_set_peers(&f->dev, peer_max, &seen), 0);
  assert_int_equal(f->d->comm_max(&f->dev, &comm, v, 2, f->stream), 0);
  assert_ptr_equal(seen, &comm);
  assert_true(v[0] == 5 && v[1] == 2.5);
  assert_int_equal(f->d->comm_max(&f->dev, &comm, v, 0, f->stream), CGRT_E_INVAL);
  assert_int_equal(cgrt__host_set_peers(&f->dev, NULL, NULL), 0);
  v[0] = 1;
  assert_int_equal(f->d->comm_max(&f->dev, &comm, v, 1, f->stream), 0);
  assert_true(v[0] == 1);
}

#define T(name)         cmocka_unit_test_setup_teardown(name, setup, teardown)
#define T_GLOBAL(name)  cmocka_unit_test_setup_teardown(name, setup_global, teardown)
#define T_RELAXED(name) cmocka_unit_test_setup_teardown(name, setup_relaxed, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_enqueued_work_waits_for_sync),
      T(test_sync_runs_work_in_enqueue_order),
      T(test_sync_runs_all_queued_work_once),
      T(test_event_query_not_ready_until_its_record_ran),
      T(test_event_never_recorded_is_complete),
      T(test_event_query_follows_the_last_record),
      T(test_event_destroyed_before_its_record_ran),
      T(test_capture_records_instead_of_running),
      T(test_capture_leaves_earlier_work_queued),
      T(test_replay_runs_recorded_work_each_launch_in_order),
      T(test_exec_destroyed_after_launch_still_runs),
      T(test_instantiate_twice_gives_independent_execs),
      T(test_event_recorded_in_capture_is_recorded_by_replay),
      T_RELAXED(test_graph_launch_inside_capture_invalidates), /* in every mode */
      T(test_update_with_same_topology_swaps_arguments),
      T(test_update_leaves_pending_launches_alone),
      T(test_update_refused_on_node_count),
      T(test_update_refused_on_host_function),
      T(test_update_refused_on_node_type),
      T(test_memcpy_node_replays_and_updates_addresses),
      T_RELAXED(test_sync_inside_capture_invalidates_it), /* in every mode */
      T(test_work_into_invalidated_capture_is_refused),
      T_RELAXED(test_event_query_of_captured_event_invalidates), /* in every mode */
      T_RELAXED(test_event_sync_of_captured_event_invalidates),  /* in every mode */
      T_GLOBAL(test_global_mode_sync_of_other_stream_invalidates),
      T(test_thread_local_mode_sync_of_other_stream_invalidates),
      T_RELAXED(test_relaxed_mode_allows_sync_of_other_stream),
      T(test_thread_local_mode_event_query_in_capture_invalidates),
      T_RELAXED(test_relaxed_mode_allows_event_query_in_capture),
      T(test_thread_local_mode_instantiate_in_capture_invalidates),
      T_RELAXED(test_relaxed_mode_allows_instantiate_in_capture),
      T(test_thread_local_mode_allows_exec_destroy_in_capture),
      T(test_async_work_on_other_stream_allowed_in_capture),
      T_RELAXED(test_relaxed_mode_allows_mem_alloc_in_capture),
      T(test_thread_local_mode_refuses_mem_alloc_in_capture),
      T_GLOBAL(test_global_mode_refuses_mem_alloc_in_capture),
      T(test_mem_free_in_capture_invalidates),
      T(test_nested_capture_begin_refused),
      T(test_capture_end_without_begin_refused),
      T(test_fault_instantiate_fails_once),
      T(test_fault_update_refuses_once),
      T(test_fault_mem_alloc_fails_once),
      T(test_fault_launch_fails_once),
      T(test_destroy_stream_with_pending_work_runs_nothing),
      T(test_destroy_capturing_stream_discards_capture),
      T(test_close_frees_streams_left_open),
      T(test_sync_from_host_function_refused),
      T(test_wrong_handle_kind_refused),
      T(test_devs_are_independent),
      T(test_memory_is_zeroed_host_memory),
      T(test_graph_memory_mapped_at_upload_or_launch),
      T(test_graph_memory_shared_and_unshared),
      T(test_graph_memory_reserved_in_granules),
      T(test_mem_info_counts_graph_memory),
      T(test_eager_async_memory_freed_in_stream_order),
      T(test_comm_max_of_one_rank_and_of_peers),
      T(test_capture_free_of_outside_memory_refused),
      T(test_update_refused_with_memory_nodes),
      T(test_cost_model_times_eager_and_graphs),
      T(test_cost_model_launch_queue_depth),
      T(test_cost_model_device_beside),
  };
  return cmocka_run_group_tests_name("driver_host", tests, NULL, NULL);
}
