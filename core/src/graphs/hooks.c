/*
 * hooks.c - the host's capture hooks (cgrt_set_capture_hooks) around every capture cgrt makes:
 * a recording (capture.c) and diagnose's second recording of a failed one (diagnose.c) both
 * bracket their capture with them, so they sit below both.
 */
#include "capture.h"

int cgrt__hook_begin(struct cgrt_hooks *k, void *stream) {
  if (!k->begin && !k->end)
    return 0;
  if (k->begin) {
    int rc = k->begin(k->user, stream);
    if (rc != 0)
      return rc;
  }
  k->depth++;
  return 0;
}

int cgrt__hook_end(struct cgrt_hooks *k, void *stream) {
  if (k->depth == 0)
    return 0;
  k->depth--;
  return k->end ? k->end(k->user, stream) : 0;
}
