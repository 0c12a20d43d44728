/*
 * gate.c - the capture gates (gate.h): one mutex, and a queue of arrivals a device. Each arrival
 * (a capture or a synchronize) joins its device's queue and is admitted when it is at the head:
 * a capture when no synchronize of the device runs, a synchronize when no capture of it is
 * underway either. Admission moves the queue on, so captures that follow one another run
 * together, and a synchronize holds back every later arrival until it is done. A synchronize
 * that waits with a bound and runs out of it leaves the queue, and those behind it move up.
 */
#include "gate.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "cgrt/types.h"

struct waiter {
  struct waiter *next;
  int is_sync;
};

struct gate {
  struct waiter *head, *tail; /* arrivals not admitted yet, in order */
  int captures;               /* captures underway, all threads */
  int syncing;                /* a synchronize runs */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct gate gates[CGRT_GATE_DEVICES];
static int waiting;                                     /* threads waiting for admission */
static _Thread_local int held[CGRT_GATE_DEVICES];       /* captures this thread holds */
static _Thread_local int syncs_here[CGRT_GATE_DEVICES]; /* synchronizes this thread holds */

static void init(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* a bound the wall clock cannot move */
  pthread_cond_init(&moved, &a);
  pthread_condattr_destroy(&a);
}

static int slot(int device) {
  return device < 0 ? 0 : device < CGRT_GATE_DEVICES ? device : CGRT_GATE_DEVICES - 1;
}

static int admissible(const struct gate *g, const struct waiter *w) {
  return g->head == w && !g->syncing && (!w->is_sync || g->captures == 0);
}

static void unlink_waiter(struct gate *g, struct waiter *w) {
  struct waiter **p = &g->head, *prev = NULL;
  while (*p && *p != w) {
    prev = *p;
    p = &(*p)->next;
  }
  if (!*p)
    return;
  *p = w->next;
  if (g->tail == w)
    g->tail = prev;
}

/* Joins g's queue and waits for admission; with deadline, until then: 0, or CGRT_E_NOTREADY. */
static int wait_turn(struct gate *g, int is_sync, const struct timespec *deadline, int *waited) {
  struct waiter w = {NULL, is_sync};
  if (g->tail)
    g->tail->next = &w;
  else
    g->head = &w;
  g->tail = &w;
  waiting++;
  int late = 0;
  while (!admissible(g, &w) && !late) {
    if (waited)
      *waited = 1;
    if (!deadline)
      pthread_cond_wait(&moved, &lock);
    else if (pthread_cond_timedwait(&moved, &lock, deadline) == ETIMEDOUT)
      late = !admissible(g, &w);
  }
  waiting--;
  unlink_waiter(g, &w);
  pthread_cond_broadcast(&moved); /* the next arrival's turn */
  return late ? CGRT_E_NOTREADY : 0;
}

void cgrt__gate_capture_enter(int device) {
  pthread_once(&once, init);
  const int d = slot(device);
  pthread_mutex_lock(&lock);
  if (held[d] == 0)
    (void)wait_turn(&gates[d], 0, NULL, NULL);
  gates[d].captures++;
  held[d]++;
  pthread_mutex_unlock(&lock);
}

void cgrt__gate_capture_leave(int device) {
  const int d = slot(device);
  pthread_mutex_lock(&lock);
  if (held[d] > 0) {
    held[d]--;
    if (--gates[d].captures == 0)
      pthread_cond_broadcast(&moved);
  }
  pthread_mutex_unlock(&lock);
}

int cgrt__gate_captures_here(int device) {
  return held[slot(device)];
}

int cgrt__gate_sync_enter_within(int device, long wait_ms, int *waited) {
  const int d = slot(device);
  if (waited)
    *waited = 0;
  if (held[d] > 0)
    return CGRT_E_CAPTURE;
  if (syncs_here[d] > 0) { /* a synchronize inside this thread's own */
    syncs_here[d]++;
    return 0;
  }
  pthread_once(&once, init);
  struct timespec deadline;
  if (wait_ms >= 0) {
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += wait_ms / 1000;
    deadline.tv_nsec += (wait_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000L;
    }
  }
  pthread_mutex_lock(&lock);
  int rc = wait_turn(&gates[d], 1, wait_ms >= 0 ? &deadline : NULL, waited);
  if (rc == 0) {
    gates[d].syncing = 1;
    syncs_here[d] = 1;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int cgrt__gate_sync_enter(int device) {
  return cgrt__gate_sync_enter_within(device, -1, NULL);
}

void cgrt__gate_sync_leave(int device) {
  const int d = slot(device);
  if (syncs_here[d] == 0 || --syncs_here[d] > 0)
    return;
  pthread_mutex_lock(&lock);
  gates[d].syncing = 0;
  pthread_cond_broadcast(&moved);
  pthread_mutex_unlock(&lock);
}

int cgrt__gate_waiting(void) {
  pthread_mutex_lock(&lock);
  int n = waiting;
  pthread_mutex_unlock(&lock);
  return n;
}
