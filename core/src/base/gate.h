/*
 * gate.h - the process's capture gate (gate.c). Internal.
 *
 * A device-wide synchronize (cudaDeviceSynchronize) on one thread while another thread begins or
 * ends a stream capture can crash the CUDA driver: tools/probe/sync_race.cu faulted inside
 * libcuda's cuCtxSynchronize in every run of a few hundred milliseconds on an H200 (driver
 * 580.159.04, session 53), and never when the two were kept apart. Outside a fault, CUDA refuses
 * the synchronize and invalidates the capture underway. So cgrt's device-wide synchronize
 * (cgrt_device_synchronize) passes this gate: it waits for every capture of every runtime of the
 * process to end and holds new ones back until it returns; the captures (begin to end) pass it
 * the other way. Several captures pass together; device synchronizes pass one at a time; both
 * are served in the order they came, so neither side starves the other. A thread that holds a
 * capture passes again at once (captures of two runtimes, one inside the other's work), and may
 * not synchronize the device (it would wait for itself). The order has one consequence: while a
 * synchronize waits for a capture, a capture that arrives on another thread waits behind it, so
 * captured work that waits for another thread's capture to begin would wait for ever.
 */
#ifndef CGRT_GATE_H
#define CGRT_GATE_H

/* Before a capture begins: waits while a device synchronize runs or is queued before it. */
void cgrt__gate_capture_enter(void);
/* After that capture ended, or its begin failed: once per enter. */
void cgrt__gate_capture_leave(void);
/* Captures this thread holds through the gate now. */
int cgrt__gate_captures_here(void);

/*
 * Before a device-wide synchronize: waits until no capture is underway and holds new ones back.
 * 0, then cgrt__gate_sync_leave() after it; or CGRT_E_CAPTURE, nothing held, when this thread
 * holds a capture itself.
 */
int cgrt__gate_sync_enter(void);
void cgrt__gate_sync_leave(void);

/* Tests only: threads waiting at the gate now (captures and synchronizes). */
int cgrt__gate_waiting(void);

#endif
