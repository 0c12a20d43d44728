/*
 * gate.c - the process's capture gate (gate.h): a ticket queue under one mutex. Each arrival
 * (a capture or a device synchronize) takes a ticket and is admitted in ticket order: a capture
 * when no synchronize runs, a synchronize when no capture is underway either. Admission moves the
 * queue on, so captures that follow one another run together, and a synchronize holds back every
 * later arrival until it is done.
 */
#include "gate.h"

#include <pthread.h>

#include "cgrt/types.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved = PTHREAD_COND_INITIALIZER;
static unsigned long long next_ticket, serving; /* the next ticket to hand out, to admit */
static int captures;                            /* captures underway, all threads */
static int syncing;                             /* a device synchronize runs */
static int waiting;                             /* threads waiting for admission */
static _Thread_local int held;                  /* captures this thread holds */

static void wait_turn(int is_sync) {
  unsigned long long ticket = next_ticket++;
  waiting++;
  while (serving != ticket || syncing || (is_sync && captures > 0))
    pthread_cond_wait(&moved, &lock);
  waiting--;
  serving++;
  pthread_cond_broadcast(&moved); /* the next ticket's turn */
}

void cgrt__gate_capture_enter(void) {
  pthread_mutex_lock(&lock);
  if (held == 0)
    wait_turn(0);
  captures++;
  held++;
  pthread_mutex_unlock(&lock);
}

void cgrt__gate_capture_leave(void) {
  pthread_mutex_lock(&lock);
  if (held > 0) {
    held--;
    if (--captures == 0)
      pthread_cond_broadcast(&moved);
  }
  pthread_mutex_unlock(&lock);
}

int cgrt__gate_captures_here(void) {
  return held;
}

int cgrt__gate_sync_enter(void) {
  if (held > 0)
    return CGRT_E_CAPTURE;
  pthread_mutex_lock(&lock);
  wait_turn(1);
  syncing = 1;
  pthread_mutex_unlock(&lock);
  return 0;
}

void cgrt__gate_sync_leave(void) {
  pthread_mutex_lock(&lock);
  syncing = 0;
  pthread_cond_broadcast(&moved);
  pthread_mutex_unlock(&lock);
}

int cgrt__gate_waiting(void) {
  pthread_mutex_lock(&lock);
  int n = waiting;
  pthread_mutex_unlock(&lock);
  return n;
}
