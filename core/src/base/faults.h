/*
 * faults.h - fault injection, for tests of failure handling. Internal.
 *
 * One mechanism: a test arms a flag of struct cgrt_faults (for a runtime, rt->faults, the only
 * place to set one), and the next matching operation fails once, as the device would (same codes,
 * a sentence in dev->err saying "injected fault"), then the flag clears itself. Faults fire only
 * here, where the core calls the driver (faults.c), never inside a driver: so the host and cuda
 * drivers see the same faults, a test needs no GPU to meet one, and no driver carries test code.
 * (Until issue 31 the host driver had a second set of its own, struct cgrt_host_faults.)
 *
 * Each cgrt__fault_* function is the driver's operation of that name, unless the fault armed in f
 * fires instead; hostapi.c calls the driver through them. f may not be NULL.
 */
#ifndef CGRT_FAULTS_H
#define CGRT_FAULTS_H

#include <stddef.h>

struct cgrt_dev;

struct cgrt_faults {
  int capture_sync; /* the next capture meets a synchronizing call (a real stream sync) inside */
  int instantiate;  /* the next instantiation fails (CGRT_E_DEVICE) */
  int update;       /* the next in-place update is refused (CGRT_E_UPDATE) */
  int mem_alloc;    /* the next device allocation fails (CGRT_E_NOMEM: out of device memory) */
  int launch;       /* the next graph launch fails (CGRT_E_DEVICE) */
  int instantiate_nomem; /* the next instantiation runs out of device memory (CGRT_E_NOMEM) */
  /* [runtime] max_queued_steps (runtime/step_queue.c) */
  int queue_wait;   /* the next wait for an earlier step to finish fails (CGRT_E_DEVICE) */
  int queue_record; /* the next record of a step's end fails (CGRT_E_DEVICE) */
  int order_exit;   /* the next ordering of the legacy stream after a step fails (CGRT_E_DEVICE) */
  /* capture_sync fired in the capture being recorded now: diagnose's second capture of the same
     work meets it again, as it would meet a module's own synchronizing call */
  int capture_sync_fired;
};

/* graph_instantiate; an injected failure leaves *exec NULL. */
int cgrt__fault_graph_instantiate(struct cgrt_faults *f, struct cgrt_dev *dev, void *graph,
                                  void **exec);
/* exec_update; an injected refusal leaves the executable unchanged. */
int cgrt__fault_exec_update(struct cgrt_faults *f, struct cgrt_dev *dev, void *exec, void *graph);
/* exec_launch; an injected failure launches nothing. */
int cgrt__fault_exec_launch(struct cgrt_faults *f, struct cgrt_dev *dev, void *exec, void *stream);
/* mem_alloc; an injected failure leaves *ptr NULL. */
int cgrt__fault_mem_alloc(struct cgrt_faults *f, struct cgrt_dev *dev, void **ptr, size_t bytes);
/* event_sync, for the wait of [runtime] max_queued_steps; an injected failure waits for nothing. */
int cgrt__fault_queue_wait(struct cgrt_faults *f, struct cgrt_dev *dev, void *event);
/*
 * event_record, failing instead when `armed`, the flag of struct cgrt_faults that stands for this
 * record, fires: queue_record (a step's end under [runtime] max_queued_steps) or order_exit (a
 * step's exit ordering with the legacy default stream); NULL where no fault stands for it. An
 * injected failure records nothing.
 */
int cgrt__fault_event_record(int *armed, struct cgrt_dev *dev, void *event, void *stream);
/*
 * Called between the captured work and the end of a capture on `stream`: when capture_sync is
 * armed, makes a synchronizing call there (stream_sync), as a module that synchronizes would, so
 * the capture is invalidated by the driver's own rules (and diagnose sees the call).
 */
void cgrt__fault_capture_sync(struct cgrt_faults *f, struct cgrt_dev *dev, void *stream);
/* The same call again in diagnose's capture of the work, if capture_sync fired in the first. */
void cgrt__fault_capture_sync_again(struct cgrt_faults *f, struct cgrt_dev *dev, void *stream);

#endif
