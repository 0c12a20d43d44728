/*
 * gate.h - the process's capture gates, one a device (gate.c). Internal.
 *
 * A device-wide synchronize (cudaDeviceSynchronize) on one thread while another thread begins or
 * ends a stream capture on the same device can crash the CUDA driver: tools/probe/sync_race.cu
 * faulted inside libcuda's cuCtxSynchronize in every run of a few hundred milliseconds on an H200
 * (driver 580.159.04, sessions 53 and 54), and never when the two were kept apart. Outside a
 * fault, CUDA refuses the synchronize and invalidates the capture underway. So cgrt's device-wide
 * synchronize (cgrt_device_synchronize), and with [runtime] sync_guard the host's own raw ones
 * (the cuda driver's CUPTI callbacks), pass the gate of their device: a synchronize waits for
 * every capture of every runtime of the process on that device to end and holds new ones back
 * until it returns; the captures (begin to end) pass it the other way. Several captures pass
 * together; synchronizes pass one at a time; both are served in the order they came, so neither
 * side starves the other. A thread that holds a capture of the device passes again at once
 * (captures of two runtimes, one inside the other's work), and may not synchronize the device
 * (it would wait for itself); a thread that holds the device's synchronize passes it again at
 * once (cgrt_device_synchronize's own cudaDeviceSynchronize, seen by the guard). The order has
 * one consequence: while a synchronize waits for a capture, a capture that arrives on another
 * thread waits behind it, so captured work that waits for another thread's capture to begin
 * would wait for ever. Gates of different devices never wait for each other: a synchronize of
 * GPU 0 whose work waits for a collective that GPU 1's next graph holds does not hold back GPU
 * 1's capture of it. Devices past CGRT_GATE_DEVICES - 1 share the last gate.
 */
#ifndef CGRT_GATE_H
#define CGRT_GATE_H

#define CGRT_GATE_DEVICES 64

/* Before a capture on `device` begins: waits while a synchronize of it runs or is queued before
   it. */
void cgrt__gate_capture_enter(int device);
/* After that capture ended, or its begin failed: once per enter. */
void cgrt__gate_capture_leave(int device);
/* Captures this thread holds through the gate of `device` now. */
int cgrt__gate_captures_here(int device);

/*
 * Before a device-wide synchronize of `device`: waits until no capture of it is underway and
 * holds new ones back. 0, then cgrt__gate_sync_leave(device) after it; or CGRT_E_CAPTURE, nothing
 * held, when this thread holds a capture of the device itself.
 */
int cgrt__gate_sync_enter(int device);
/*
 * The same, waiting at most wait_ms milliseconds: CGRT_E_NOTREADY when they passed first, nothing
 * held and the queue as if it had never come. *waited (may be NULL): 1 when it had to wait.
 */
int cgrt__gate_sync_enter_within(int device, long wait_ms, int *waited);
void cgrt__gate_sync_leave(int device);

/* Tests only: threads waiting at the gates now (captures and synchronizes). */
int cgrt__gate_waiting(void);

#endif
