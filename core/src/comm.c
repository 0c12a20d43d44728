/*
 * comm.c - one communicator per context-parallel size, split from the host's world communicator:
 * ranks in consecutive groups of cp (color rank / cp, key rank), so that a group's index of a
 * rank is rank % cp. The world communicator stays the host's; the split ones are cgrt's and are
 * destroyed at close, after the graphs that captured collectives on them.
 */
#include "comm.h"

#include <string.h>

#include "runtime.h"

#ifdef CGRT_HAVE_NCCL
#include <nccl.h>
#endif

int cgrt__comms_find(const struct cgrt_comms *c, int cp, void **comm, int *cp_rank) {
  for (int i = 0; i < c->count; i++)
    if (c->cp[i] == cp) {
      *comm = c->comm[i];
      *cp_rank = c->cp_rank[i];
      return 0;
    }
  return CGRT_E_INVAL;
}

/* The host driver: a world as large as the largest cp size, this process its rank 0. */
static int split_placeholders(cgrt_runtime *rt, struct cgrt_comms *c) {
  const struct cgrt_config_view *v = &rt->cfg.view;
  c->world_rank = 0;
  c->world_size = 1;
  for (size_t i = 0; i < v->num_cp_sizes; i++)
    if (v->cp_sizes[i] > c->world_size)
      c->world_size = v->cp_sizes[i];
  for (size_t i = 0; i < v->num_cp_sizes; i++) {
    c->cp[c->count] = v->cp_sizes[i];
    c->cp_rank[c->count] = 0;
    c->comm[c->count] = &c->placeholder[c->count];
    c->count++;
  }
  return 0;
}

#ifdef CGRT_HAVE_NCCL
static int split_nccl(cgrt_runtime *rt, struct cgrt_comms *c, void *world) {
  const struct cgrt_config_view *v = &rt->cfg.view;
  ncclComm_t w = (ncclComm_t)world;
  ncclResult_t r = ncclCommCount(w, &c->world_size);
  if (r == ncclSuccess)
    r = ncclCommUserRank(w, &c->world_rank);
  if (r != ncclSuccess)
    return cgrt__fail(rt, CGRT_E_DEVICE, "cgrt_set_world_comm: ncclCommCount/UserRank: %s",
                      ncclGetErrorString(r));
  for (size_t i = 0; i < v->num_cp_sizes; i++)
    if (c->world_size % v->cp_sizes[i] != 0)
      return cgrt__fail(rt, CGRT_E_INVAL,
                        "cgrt_set_world_comm: [dynamic_cp] cp_sizes has %d, which does not divide "
                        "the world of %d ranks; use divisors of the world size",
                        v->cp_sizes[i], c->world_size);
  c->nccl = 1;
  for (size_t i = 0; i < v->num_cp_sizes; i++) {
    int cp = v->cp_sizes[i];
    ncclComm_t split = NULL;
    /* Collective over the world: every rank splits every size, in the same order. */
    r = ncclCommSplit(w, c->world_rank / cp, c->world_rank, &split, NULL);
    if (r != ncclSuccess)
      return cgrt__fail(rt, CGRT_E_DEVICE, "cgrt_set_world_comm: ncclCommSplit for cp size %d: %s",
                        cp, ncclGetErrorString(r));
    c->cp[c->count] = cp;
    c->cp_rank[c->count] = c->world_rank % cp;
    c->comm[c->count] = split;
    c->count++;
  }
  return 0;
}
#endif

int cgrt__comms_split(cgrt_runtime *rt, void *world) {
  struct cgrt_comms *c = &rt->comms;
  if (c->ready)
    return cgrt__fail(rt, CGRT_E_INVAL, "cgrt_set_world_comm: called twice; call it once");
  if (rt->cfg.view.num_cp_sizes > CGRT_MAX_CP_SIZES)
    return cgrt__fail(rt, CGRT_E_INVAL, "cgrt_set_world_comm: at most %d cp sizes",
                      CGRT_MAX_CP_SIZES);
  int rc;
  if (rt->cfg.view.driver == CGRT_DRIVER_HOST && !world) {
    rc = split_placeholders(rt, c);
  } else if (!world) {
    rc = cgrt__fail(rt, CGRT_E_INVAL, "cgrt_set_world_comm: world_comm is NULL");
  } else {
#ifdef CGRT_HAVE_NCCL
    rc = split_nccl(rt, c, world);
#else
    rc = cgrt__fail(rt, CGRT_E_UNSUPPORTED,
                    "cgrt_set_world_comm: cgrt was built without NCCL; rebuild with NCCL to "
                    "use context parallelism");
#endif
  }
  if (rc != 0) {
    cgrt__comms_destroy(c);
    return rc;
  }
  c->ready = 1;
  cgrt__log(rt, CGRT_LOG_INFO, "communicators: world rank %d of %d, %d cp sizes split",
            c->world_rank, c->world_size, c->count);
  return 0;
}

void cgrt__comms_destroy(struct cgrt_comms *c) {
#ifdef CGRT_HAVE_NCCL
  if (c->nccl)
    for (int i = 0; i < c->count; i++)
      if (c->comm[i])
        ncclCommDestroy((ncclComm_t)c->comm[i]);
#endif
  memset(c, 0, sizeof(*c));
}
