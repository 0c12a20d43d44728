/* faults.c - fault injection where the core calls the driver (faults.h). */
#include "base/faults.h"

#include "driver.h"

/* Consumes an armed fault: nonzero once if the flag was set. */
static int fires(int *flag) {
  if (!*flag)
    return 0;
  *flag = 0;
  return 1;
}

int cgrt__fault_graph_instantiate(struct cgrt_faults *f, struct cgrt_dev *dev, void *graph,
                                  void **exec) {
  if (fires(&f->instantiate)) {
    *exec = NULL;
    return cgrt__dev_fail(dev, CGRT_E_DEVICE, "instantiation failed (injected fault)");
  }
  if (fires(&f->instantiate_nomem)) {
    *exec = NULL;
    return cgrt__dev_fail(dev, CGRT_E_NOMEM,
                          "instantiation ran out of device memory (injected fault)");
  }
  return dev->drv->graph_instantiate(dev, graph, exec);
}

int cgrt__fault_exec_update(struct cgrt_faults *f, struct cgrt_dev *dev, void *exec, void *graph) {
  if (fires(&f->update))
    return cgrt__dev_fail(dev, CGRT_E_UPDATE, "update refused (injected fault)");
  return dev->drv->exec_update(dev, exec, graph);
}

int cgrt__fault_exec_launch(struct cgrt_faults *f, struct cgrt_dev *dev, void *exec, void *stream) {
  if (fires(&f->launch))
    return cgrt__dev_fail(dev, CGRT_E_DEVICE, "graph launch failed (injected fault)");
  return dev->drv->exec_launch(dev, exec, stream);
}

int cgrt__fault_mem_alloc(struct cgrt_faults *f, struct cgrt_dev *dev, void **ptr, size_t bytes) {
  if (fires(&f->mem_alloc)) {
    *ptr = NULL;
    return cgrt__dev_fail(dev, CGRT_E_NOMEM,
                          "out of device memory allocating %zu bytes (injected fault)", bytes);
  }
  return dev->drv->mem_alloc(dev, ptr, bytes);
}

int cgrt__fault_queue_wait(struct cgrt_faults *f, struct cgrt_dev *dev, void *event) {
  if (fires(&f->queue_wait))
    return cgrt__dev_fail(dev, CGRT_E_DEVICE, "event_sync failed (injected fault)");
  return dev->drv->event_sync(dev, event);
}

int cgrt__fault_event_record(int *armed, struct cgrt_dev *dev, void *event, void *stream) {
  if (armed && fires(armed))
    return cgrt__dev_fail(dev, CGRT_E_DEVICE, "event_record failed (injected fault)");
  return dev->drv->event_record(dev, event, stream);
}

void cgrt__fault_capture_sync(struct cgrt_faults *f, struct cgrt_dev *dev, void *stream) {
  f->capture_sync_fired = fires(&f->capture_sync);
  if (f->capture_sync_fired)
    (void)dev->drv->stream_sync(dev, stream);
}

void cgrt__fault_capture_sync_again(struct cgrt_faults *f, struct cgrt_dev *dev, void *stream) {
  if (f->capture_sync_fired)
    (void)dev->drv->stream_sync(dev, stream);
}
