/*
 * train_host.h - the train workload driven through cgrt the way a training engine would: each
 * workload module registered as a cgrt module (forward and backward), prepare stages the step's
 * batch, the body runs every microbatch's forward, loss and backward, then the optimizer update
 * (the loss and the update are the host's own kernels between module calls). Shared by the GPU
 * tests and `cgrt bench --workload train`.
 */
#ifndef CGRT_TRAIN_HOST_H
#define CGRT_TRAIN_HOST_H

#include "cgrt/cgrt.h"
#include "train.h"

#define TRAIN_HOST_MAX_MODULES 128

struct train_host {
  cgrt_runtime *rt;
  cgrtk_train *t;
  int num_modules;
  cgrt_module *mods[TRAIN_HOST_MAX_MODULES];
  struct train_host_ref {
    struct train_host *h;
    int index;
  } refs[TRAIN_HOST_MAX_MODULES];
  uint64_t step; /* the batch the next step stages */
};

/* Registers the workload's modules with rt. 0 or a cgrt error (cgrt_last_error(rt) says why). */
int train_host_open(struct train_host *h, cgrtk_train *t, cgrt_runtime *rt);

/* One training step (phase train, all microbatches). `report` may be NULL. */
int train_host_step(struct train_host *h, cgrt_step_report *report);

#endif
