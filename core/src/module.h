/*
 * module.h - a registered module (cgrt_module_register), as the core keeps it: the runtime owns
 * the modules; the graph cache reads a call's name and whether its module stages its own inputs.
 * Internal.
 */
#ifndef CGRT_MODULE_H
#define CGRT_MODULE_H

#include "cgrt/backend.h"

struct cgrt_module {
  struct cgrt_module_info info; /* what backends see; info.name points at `name` (first member:
                                   the module is found from its info) */
  char *name;
  char *call_names[2]; /* "layer3.attn fwd", "layer3.attn bwd": names calls in messages */
  cgrt_module_fn forward;
  cgrt_module_fn backward;
  void *user;
  cgrt_runtime *rt;
  int no_cp_comm;    /* cgrt_module_desc.no_cp_comm: its calls see ctx->comm NULL and never wait */
  int stages_inputs; /* cgrt_module_desc.stages_inputs: never handed private copies */
  /* Per direction: its graphed calls in a row whose key the cache had not seen (graph_cache.c,
     UNREPEATED_SAY), and whether that was said. */
  uint32_t unrepeated[2];
  int unrepeated_said[2];
};

/* "layer3.attn fwd" for a call, for messages. Static for the runtime's life. */
static inline const char *cgrt__call_name(const struct cgrt_call *c) {
  const struct cgrt_module *m = (const struct cgrt_module *)c->module;
  return m->call_names[c->dir == CGRT_BACKWARD];
}

#endif
