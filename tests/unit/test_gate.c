/*
 * test_gate.c - the process's capture gate (core/src/base/gate.h), with threads and no driver:
 * a device synchronize waits for the captures underway and holds later ones back; a thread that
 * holds a capture passes again at once and may not synchronize; arrivals are served in order, so
 * neither side starves; under a free-running mix of both, no synchronize ever overlaps a capture.
 * Gates of two devices never wait for each other; a synchronize inside this thread's own passes;
 * a synchronize with a bound that runs out leaves the queue as if it had never come. Every wait is
 * observed through cgrt__gate_waiting(); the only clock is the bound's, and no outcome depends on
 * it but the one test of the bound running out (the capture it waits for never ends before). Run
 * under TSan too.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/gate.h"
#include "cgrt/types.h"

/* Spins until `n` threads wait at the gate. */
static void until_waiting(int n) {
  while (cgrt__gate_waiting() != n)
    sched_yield();
}

static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static char order[16];
static int order_n;

static void mark(char c) {
  pthread_mutex_lock(&order_lock);
  order[order_n++] = c;
  pthread_mutex_unlock(&order_lock);
}

static void *syncer(void *arg) {
  (void)arg;
  assert_int_equal(cgrt__gate_sync_enter(0), 0);
  mark('S');
  cgrt__gate_sync_leave(0);
  return NULL;
}

static void *capturer(void *arg) {
  (void)arg;
  cgrt__gate_capture_enter(0);
  mark('C');
  cgrt__gate_capture_leave(0);
  return NULL;
}

static void reset(void) {
  memset(order, 0, sizeof(order));
  order_n = 0;
}

/* A synchronize waits for the capture underway; the capturing thread nests a second capture (two
   runtimes, one inside the other's work) without waiting, and may not synchronize itself. */
static void sync_waits_for_the_capture(void **state) {
  (void)state;
  reset();
  cgrt__gate_capture_enter(0);
  assert_int_equal(cgrt__gate_captures_here(0), 1);
  pthread_t s;
  assert_int_equal(pthread_create(&s, NULL, syncer, NULL), 0);
  until_waiting(1);
  cgrt__gate_capture_enter(0); /* nested: passes although a synchronize is queued */
  assert_int_equal(cgrt__gate_captures_here(0), 2);
  assert_int_equal(cgrt__gate_sync_enter(0), CGRT_E_CAPTURE);
  mark('c');
  cgrt__gate_capture_leave(0);
  mark('c');
  cgrt__gate_capture_leave(0);
  assert_int_equal(cgrt__gate_captures_here(0), 0);
  pthread_join(s, NULL);
  assert_string_equal(order, "ccS");
  assert_int_equal(cgrt__gate_waiting(), 0);
}

/* A capture waits while a synchronize runs. */
static void capture_waits_for_the_sync(void **state) {
  (void)state;
  reset();
  assert_int_equal(cgrt__gate_sync_enter(0), 0);
  pthread_t c;
  assert_int_equal(pthread_create(&c, NULL, capturer, NULL), 0);
  until_waiting(1);
  mark('s');
  cgrt__gate_sync_leave(0);
  pthread_join(c, NULL);
  assert_string_equal(order, "sC");
}

/* First come, first served: a capture that came after a queued synchronize waits for it, even
   though captures underway would let it pass; one that came before passes with them. */
static void served_in_order(void **state) {
  (void)state;
  reset();
  cgrt__gate_capture_enter(0);
  pthread_t s, c;
  assert_int_equal(pthread_create(&s, NULL, syncer, NULL), 0);
  until_waiting(1);
  assert_int_equal(pthread_create(&c, NULL, capturer, NULL), 0);
  until_waiting(2);
  mark('c');
  cgrt__gate_capture_leave(0);
  pthread_join(s, NULL);
  pthread_join(c, NULL);
  assert_string_equal(order, "cSC");
}

/* A capture on device 1 passes while a synchronize of device 0 runs, and a synchronize of device
   1 while a capture of device 0 is underway: a GPU's synchronize never holds another GPU back. */
static void devices_apart(void **state) {
  (void)state;
  assert_int_equal(cgrt__gate_sync_enter(0), 0);
  cgrt__gate_capture_enter(1); /* would wait for ever on one gate */
  assert_int_equal(cgrt__gate_captures_here(1), 1);
  assert_int_equal(cgrt__gate_captures_here(0), 0);
  cgrt__gate_capture_leave(1);
  cgrt__gate_sync_leave(0);
  cgrt__gate_capture_enter(0);
  assert_int_equal(cgrt__gate_sync_enter(1), 0);
  cgrt__gate_sync_leave(1);
  cgrt__gate_capture_leave(0);
  assert_int_equal(cgrt__gate_waiting(), 0);
}

/* A synchronize inside this thread's own (cgrt_device_synchronize's cudaDeviceSynchronize, seen
   by sync_guard's callback) passes at once, and the gate opens at the outer one's leave. */
static void sync_inside_sync(void **state) {
  (void)state;
  reset();
  assert_int_equal(cgrt__gate_sync_enter(0), 0);
  int waited = -1;
  assert_int_equal(cgrt__gate_sync_enter_within(0, 0, &waited), 0);
  assert_int_equal(waited, 0);
  cgrt__gate_sync_leave(0);
  pthread_t c;
  assert_int_equal(pthread_create(&c, NULL, capturer, NULL), 0);
  until_waiting(1); /* still held by the outer synchronize */
  mark('s');
  cgrt__gate_sync_leave(0);
  pthread_join(c, NULL);
  assert_string_equal(order, "sC");
}

static void *bounded_syncer(void *arg) {
  int waited = 0;
  *(int *)arg = cgrt__gate_sync_enter_within(0, 20, &waited);
  if (*(int *)arg == 0)
    cgrt__gate_sync_leave(0);
  assert_int_equal(waited, 1);
  return NULL;
}

/* A synchronize with a bound, behind a capture that does not end in time, gives up with
   CGRT_E_NOTREADY and leaves the queue: a capture that came after it passes at once beside the
   one underway, and a later synchronize waits for both as usual. */
static void bound_runs_out(void **state) {
  (void)state;
  reset();
  cgrt__gate_capture_enter(0);
  int rc = 1;
  pthread_t b;
  assert_int_equal(pthread_create(&b, NULL, bounded_syncer, &rc), 0);
  pthread_join(b, NULL); /* the capture outlives the bound: the join returns only once it ran out */
  assert_int_equal(rc, CGRT_E_NOTREADY);
  assert_int_equal(cgrt__gate_waiting(), 0);
  pthread_t c;
  assert_int_equal(pthread_create(&c, NULL, capturer, NULL), 0);
  pthread_join(c, NULL); /* passed beside the capture underway: nothing queued before it */
  assert_string_equal(order, "C");
  pthread_t s;
  assert_int_equal(pthread_create(&s, NULL, syncer, NULL), 0);
  until_waiting(1);
  mark('c');
  cgrt__gate_capture_leave(0);
  pthread_join(s, NULL);
  assert_string_equal(order, "CcS");
}

/* ---------------------------------------------------------------- a free-running mix */

#define ROUNDS 2000
static _Atomic int in_capture, in_sync, overlaps;

static void *capture_loop(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    cgrt__gate_capture_enter(0);
    in_capture++;
    if (in_sync)
      overlaps++;
    sched_yield();
    in_capture--;
    cgrt__gate_capture_leave(0);
  }
  return NULL;
}

static void *sync_loop(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    assert_int_equal(cgrt__gate_sync_enter(0), 0);
    if (in_sync++ || in_capture)
      overlaps++;
    sched_yield();
    in_sync--;
    cgrt__gate_sync_leave(0);
  }
  return NULL;
}

/* Four capturing threads and two synchronizing ones, each a fixed number of rounds: all finish
   (neither side starves the other), and no synchronize ever overlapped a capture or another. */
static void never_together(void **state) {
  (void)state;
  pthread_t t[6];
  for (int i = 0; i < 6; i++)
    assert_int_equal(pthread_create(&t[i], NULL, i < 4 ? capture_loop : sync_loop, NULL), 0);
  for (int i = 0; i < 6; i++)
    pthread_join(t[i], NULL);
  assert_int_equal(overlaps, 0);
  assert_int_equal(in_capture, 0);
  assert_int_equal(cgrt__gate_waiting(), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sync_waits_for_the_capture),
      cmocka_unit_test(capture_waits_for_the_sync),
      cmocka_unit_test(served_in_order),
      cmocka_unit_test(devices_apart),
      cmocka_unit_test(sync_inside_sync),
      cmocka_unit_test(bound_runs_out),
      cmocka_unit_test(never_together),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
