/*
 * ranks.h - one process per GPU for the multi-GPU bench and tests (DESIGN.md section 7).
 *
 * cgrt_run_ranks() forks one child per rank before anything touches CUDA in the calling process
 * (a child that inherits an initialized CUDA context fails with "initialization error"; the caller
 * must not have called CUDA or NCCL, and never does here: device counting runs in a child too).
 * Rank 0's child creates the NCCL unique id and hands it to the others through an anonymous
 * shared mapping made before the fork. Every child sets NCCL_NVLS_ENABLE=0 (NVLink multicast is
 * not to be used on the lent machines; any other value in the environment is overridden), selects
 * GPU `rank`, and runs rank_main; rank_main creates its world communicator from the id
 * (cgrt_rank_comm_init), releases every graph that refers to it, destroys it
 * (cgrt_rank_comm_destroy) and returns its exit code. The child then exits normally, teardown
 * included, and the parent waits for all of them under a timeout: a rank that has not exited by
 * then is killed and reported as hung, since a hang at teardown is a failure too.
 *
 * Children's stdout and stderr come back to the parent through one pipe each, line by line:
 * rank 0's lines go to the parent's stdout as they are, other ranks' to its stderr prefixed with
 * "[rank N] ". For results the parent prints itself, hand rank_main a cgrt_ranks_shared() buffer
 * through `arg`: children write into it, the parent reads it after cgrt_run_ranks() returns.
 */
#ifndef CGRT_TOOLS_RANKS_H
#define CGRT_TOOLS_RANKS_H

#include <stddef.h>

#define CGRT_RANKS_MAX 64

/* A rank's work, run in its own process with GPU `rank` selected. nccl_id (id_len bytes, an
 * ncclUniqueId) is the same on every rank. Returns the process's exit code (0: success). */
typedef int (*cgrt_rank_main_fn)(int rank, int nranks, const void *nccl_id, size_t id_len,
                                 void *arg);

/*
 * Runs rank_main in nranks child processes, one per GPU (see above), and waits at most
 * timeout_s seconds for all of them; when one rank fails, the others get 20 more seconds (they
 * may be waiting on it in a collective) before they are killed. Returns 0 only if every rank
 * exited with 0; otherwise err says which rank failed and how ("rank 1 exited with code 1",
 * "rank 0 hung (timeout after 300 s): a hang at teardown is a failure"...).
 * Errors: CGRT_E_INVAL (bad arguments), CGRT_E_NODEV (no CUDA device, or fewer GPUs than ranks:
 * err starts with "no CUDA device: " in the first case), CGRT_E_UNSUPPORTED (built without CUDA
 * or NCCL), CGRT_E_IO (fork, pipe or mmap failed), CGRT_E_CALLBACK (a rank failed or hung).
 */
int cgrt_run_ranks(int nranks, cgrt_rank_main_fn rank_main, void *arg, int timeout_s, char *err,
                   size_t errlen);

/*
 * The number of visible CUDA devices, counted in a short-lived child process so that the caller
 * never initializes CUDA. CGRT_E_NODEV with "no CUDA device: <why>" in err when there is none.
 */
int cgrt_count_devices(int *count, char *err, size_t errlen);

/* In a rank: creates the world NCCL communicator (ncclCommInitRank) of nranks ranks from the id
 * rank_main was given; *comm is an ncclComm_t. CGRT_E_DEVICE with NCCL's message on failure. */
int cgrt_rank_comm_init(void **comm, int rank, int nranks, const void *nccl_id, size_t id_len,
                        char *err, size_t errlen);

/* In a rank: finalizes and destroys a communicator from cgrt_rank_comm_init. Release every graph
 * that refers to it (cgrt_release_graphs, cgrt_close) first. NULL is a no-op. */
int cgrt_rank_comm_destroy(void *comm, char *err, size_t errlen);

/* Zeroed memory shared between the parent and the children forked after this call (an anonymous
 * MAP_SHARED mapping); NULL if mmap failed. Free with cgrt_ranks_shared_free. */
void *cgrt_ranks_shared(size_t bytes);
void cgrt_ranks_shared_free(void *p, size_t bytes);

#endif
