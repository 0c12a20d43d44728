/*
 * comm.h - communicators per context-parallel size, split from the host's world communicator
 * (ncclCommSplit). Internal. The host driver, which has no NCCL, stands in placeholders.
 */
#ifndef CGRT_COMM_H
#define CGRT_COMM_H

#define CGRT_MAX_CP_SIZES 16

struct cgrt_runtime;

struct cgrt_comms {
  int ready;      /* cgrt_set_world_comm done */
  int nccl;       /* real NCCL communicators (else placeholders) */
  int world_size; /* ranks of the world communicator */
  int world_rank;
  int count;
  int cp[CGRT_MAX_CP_SIZES];
  int cp_rank[CGRT_MAX_CP_SIZES];
  void *comm[CGRT_MAX_CP_SIZES];
  char placeholder[CGRT_MAX_CP_SIZES]; /* their addresses are the host driver's communicators */
};

/* Splits one communicator per [dynamic_cp] cp_sizes entry; errors name the cause. */
int cgrt__comms_split(struct cgrt_runtime *rt, void *world);

/* The communicator of cp size `cp` and this rank's index in it; CGRT_E_INVAL if none. */
int cgrt__comms_find(const struct cgrt_comms *c, int cp, void **comm, int *cp_rank);

/* Destroys the split communicators (after every graph that uses them is gone). */
void cgrt__comms_destroy(struct cgrt_comms *c);

#endif
