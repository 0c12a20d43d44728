/*
 * hooks.c - the host's capture hooks (cgrt_set_capture_hooks) around every capture cgrt makes:
 * a recording (capture.c) and diagnose's second recording of a failed one (diagnose.c) both
 * bracket their capture with them, so they sit below both.
 */
#include "capture.h"
#include "runtime.h"

int cgrt__hook_begin(cgrt_runtime *rt, void *stream) {
  if (!rt->hook_begin && !rt->hook_end)
    return 0;
  if (rt->hook_begin) {
    int rc = rt->hook_begin(rt->hook_user, stream);
    if (rc != 0)
      return rc;
  }
  rt->hook_depth++;
  return 0;
}

int cgrt__hook_end(cgrt_runtime *rt, void *stream) {
  if (rt->hook_depth == 0)
    return 0;
  rt->hook_depth--;
  return rt->hook_end ? rt->hook_end(rt->hook_user, stream) : 0;
}
