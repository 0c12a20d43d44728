/*
 * step_queue.c - [runtime] max_queued_steps: at most N steps queued ahead of the device.
 *
 * A host that never waits can queue many steps ahead of the GPU. When each step is many small
 * graphs that each hold an NCCL collective (a probe on the pattern of dynamic_cp's module scope),
 * two H200s measured slow steps that way: some processes drew a mode 2.3-2.6x slower (4 of 18 runs)
 * and most of the others had a p90 over 1.2x their median (11 of 14); with the host waiting so that
 * at most 2 steps were queued, 0 of 18 runs were slow and every p90 was within 1.5% of the median,
 * at the same median (tools/probe/nccl_boundary.cu, session 48; docs/decisions.md, issue 42). JAX
 * bounds its in-flight computations the same way.
 *
 * A ring of N events, one a step in turn (step i uses event i % N): recorded on cgrt's stream at
 * the step's exit, after all its work and its ordering with the host; at the entry of step i, the
 * host waits for the record of step i - N, so before step i is issued step i - N has finished.
 * Cost: one event record a step, and a wait only when the host is N steps ahead. N = 0 (the
 * default): no events, nothing done.
 */
#include <stdio.h>

#include "guard.h"
#include "runtime.h"

int cgrt__queue_open(cgrt_runtime *rt) {
  struct cgrt_step_queue *q = &rt->queue;
  const int n = rt->cfg.view.max_queued_steps;
  /* The configuration refuses more; a view a tool set by hand is checked here. */
  if (n < 0 || n > CGRT_CFG_MAX_QUEUED_STEPS)
    return cgrt__fail(&rt->log, CGRT_E_CONFIG,
                      "[runtime] max_queued_steps = %d: expected 0 to %d (the steps cgrt lets the "
                      "host queue ahead of the device; 0: no limit)",
                      n, CGRT_CFG_MAX_QUEUED_STEPS);
  for (int i = 0; i < n; i++) {
    int rc = rt->dev.drv->event_create(&rt->dev, &q->events[i]);
    if (rc != 0) {
      q->events[i] = NULL;
      char why[sizeof(rt->dev.err)];
      snprintf(why, sizeof(why), "%s", rt->dev.err);
      cgrt__queue_close(rt);
      return cgrt__fail(&rt->log, rc,
                        "[runtime] max_queued_steps = %d: creating its event %d failed: %s; set "
                        "max_queued_steps = 0 to run without the bound",
                        n, i + 1, why);
    }
    q->depth = i + 1;
  }
  if (n > 0)
    cgrt__log(&rt->log, CGRT_LOG_DEBUG,
              "[runtime] max_queued_steps = %d: before a step is issued, the host waits for the "
              "step %d before it to finish on the device",
              n, n);
  return 0;
}

void cgrt__queue_close(cgrt_runtime *rt) {
  struct cgrt_step_queue *q = &rt->queue;
  for (int i = 0; i < q->depth; i++) {
    if (q->events[i])
      rt->dev.drv->event_destroy(&rt->dev, q->events[i]);
    q->events[i] = NULL;
  }
  q->depth = 0;
  q->recorded = 0;
}

/* The ring's slot of `step` (q->depth > 0), and its bit in q->recorded. */
static int slot_of(const struct cgrt_step_queue *q, uint64_t step, uint64_t *bit) {
  const int slot = (int)(step % (uint64_t)q->depth);
  *bit = 1ull << slot;
  return slot;
}

int cgrt__queue_wait(cgrt_runtime *rt) {
  struct cgrt_step_queue *q = &rt->queue;
  if (q->depth == 0)
    return 0;
  const uint64_t step = rt->graphs.step_index;
  uint64_t bit;
  const int slot = slot_of(q, step, &bit);
  if (!(q->recorded & bit)) /* the first steps: nothing recorded there yet */
    return 0;
  void *event = q->events[slot];
  int rc = rt->dev.drv->event_query(&rt->dev, event);
  if (rc == 0)
    return 0;
  if (rc == CGRT_E_NOTREADY) {
    const uint64_t t0 = cgrt__now_ns(); /* the clock of the step's host_ns */
    /* On the host driver the wait runs the stream's host functions: they may not call cgrt. */
    struct cgrt_stream_run saved = cgrt__stream_run_begin(rt, "cgrt_step");
    rc = cgrt__fault_queue_wait(&rt->faults, &rt->dev, event);
    cgrt__stream_run_end(rt, saved);
    rt->stats.queue_waits++;
    rt->stats.queue_wait_ns += cgrt__now_ns() - t0;
    if (rc == 0)
      return 0;
  }
  /* Not waited for again: the slot's next record replaces this one. */
  q->recorded &= ~bit;
  return cgrt__fail(&rt->log, rc,
                    "cgrt_step: waiting for step %llu to finish on the device before issuing step "
                    "%llu ([runtime] max_queued_steps = %d) failed: %s; step %llu was not issued. "
                    "The error is the device's, met by the work of step %llu or before "
                    "(cgrt_synchronize would meet it too); max_queued_steps = 0 issues steps "
                    "without this wait",
                    (unsigned long long)(step - (uint64_t)q->depth), (unsigned long long)step,
                    q->depth, rt->dev.err, (unsigned long long)step,
                    (unsigned long long)(step - (uint64_t)q->depth));
}

int cgrt__queue_record(cgrt_runtime *rt) {
  struct cgrt_step_queue *q = &rt->queue;
  if (q->depth == 0)
    return 0;
  const uint64_t step = rt->graphs.step_index;
  uint64_t bit;
  const int slot = slot_of(q, step, &bit);
  int rc =
      cgrt__fault_event_record(&rt->faults.queue_record, &rt->dev, q->events[slot], rt->stream);
  if (rc == 0) {
    q->recorded |= bit;
    return 0;
  }
  /* The event may hold an older record or none: the step max_queued_steps later waits for none. */
  q->recorded &= ~bit;
  return cgrt__fail(&rt->log, rc,
                    "cgrt_step: recording the end of step %llu on cgrt's stream for [runtime] "
                    "max_queued_steps = %d failed: %s; step %llu's work was issued, but step %llu "
                    "will not wait for it (a device error: cgrt_synchronize reports it too; "
                    "max_queued_steps = 0 records nothing)",
                    (unsigned long long)step, q->depth, rt->dev.err, (unsigned long long)step,
                    (unsigned long long)(step + (uint64_t)q->depth));
}
