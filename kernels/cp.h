/*
 * cp.h - the `cp` reference workload: L decoder layers over a packed batch of variable-length
 * sequences (THD layout) split across a context-parallel (cp) group, fp32 throughout.
 *
 * The batch: the step's sequences packed one after the other, padded to P rows (the padded
 * total, a multiple of the cp size). Rank r of a cp group of size cp holds the R = P / cp
 * contiguous global rows [r R, (r + 1) R) in its hidden buffer, rows 0..R-1 there. Sequence
 * boundaries come as cumulative lengths in global row coordinates: cu_seqlens (actual) and
 * cu_seqlens_padded, padded_sequences + 1 entries each (device int32), as cgrt's THD slots hold
 * them (real sequences, then a zero-length dummy whose padded length absorbs the padding, then
 * empty sequences). Global row g belongs to the last sequence s with cu_seqlens_padded[s] <= g;
 * it is real if g - cu_seqlens_padded[s] < cu_seqlens[s + 1] - cu_seqlens[s], else padding.
 *
 * Per layer (pre-norm, no biases; weights row-major [out, in] like nn.Linear):
 *   attn: x = RMSNorm(h) . gain_attn; q = x Wq^T; [k v] = x Wkv^T (Wqkv [3d, d]: rows q, k, v);
 *         the local rows' k and v are written at their global rows of a [P, 2d] buffer (row g:
 *         k then v) that one in-place ncclAllGather over the cp group's communicator completes
 *         (no NCCL at cp = 1); each real row attends causally (softmax(q k / 8)) to the rows of
 *         its own sequence up to itself, per head of 64; a padding row's attention output is 0;
 *         h += attention Wo^T.
 *   mlp:  h += silu(RMSNorm(h) . gain_mlp W1^T) W2^T   (W1 [ffn, d], W2 [d, ffn]).
 * Staged inputs of padding rows are 0 and stay 0 through every layer (finite by construction).
 *
 * Determinism: every kernel is our own, without atomics, each output element reduced in one
 * fixed order that depends only on the row's own data (GEMMs: k from 0 to K - 1 in one fma
 * chain; attention: the keys of the row's sequence from its first row, in chunks of 32, with
 * fixed warp reductions). So a row's result does not depend on the row count, on which rank
 * computes it, nor on eager versus replayed execution: the same global packed input gives
 * bitwise the same global output at every cp size.
 *
 * Calls that enqueue work (stage, stage_thd, attn, mlp, read) never synchronize, never call
 * cudaMalloc and never read device memory on the host, so they can be captured into a CUDA
 * graph (the NCCL all-gather included). attn and mlp each take their temporaries with one
 * cudaMallocAsync on the call's stream and free them with one cudaFreeAsync before returning.
 * The all-gathered K/V buffer is allocated once at create, so NCCL never sees stream-ordered
 * memory: with NCCL 2.27 or later by ncclMemAlloc, and registered as a symmetric window
 * (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC) on each communicator the all-gather first
 * runs over outside a capture, so that NCCL takes its low-latency kernels for registered
 * buffers (the same bytes land either way); else by cudaMalloc. The projection that writes a
 * rank's K/V rows lets the all-gather launch only when it completes (NCCL launches its symmetric
 * kernels as programmatic dependents: an early trigger let them read the rows unwritten and let
 * the peer overwrite kv while the previous layer's attention still read it; test_multigpu_cp
 * caught it). Drive one workload from one
 * stream at a time.
 *
 * Errors: 0, a cudaError_t (positive, below CGRTK_CP_NCCL_ERROR_BASE), or
 * CGRTK_CP_NCCL_ERROR_BASE + an ncclResult_t; cgrtk_cp_strerror() names either, and
 * cgrtk_cp_last_error() gives a sentence about the workload's last failure.
 * No CUDA or NCCL header is needed to use this file: streams and communicators are void *
 * (cudaStream_t, ncclComm_t).
 */
#ifndef CGRT_KERNELS_CP_H
#define CGRT_KERNELS_CP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Shape of a cp workload. Defaults (cgrtk_cp_default_cfg): 4 layers, d_model 512, 8 heads,
 * ffn 1024, max_packed_tokens 0, seed 1, fuse_norm 1, symmetric_kv 1, workspace and pdl_entry 0.
 * d_model must be heads * 64 and ffn a multiple of 64. */
struct cgrtk_cp_cfg {
  int layers;
  int d_model;
  int heads;
  int ffn;
  /* The largest padded total P (rows of the all-gathered K/V buffer); 0: max_rows_per_rank, which
   * covers every cp size when max_rows_per_rank is the largest P (cp = 1 needs R = P). */
  int64_t max_packed_tokens;
  uint64_t seed; /* every initial value derives from it */
  /* 0: each call takes its temporaries with cudaMallocAsync (graph memory once captured);
   * 1: from one workspace allocated at create (as engines with static buffers do), so a call's
   * graph holds no memory nodes. Calls of one workload then must not run concurrently. */
  int workspace;
  /* 1: at small shapes (launch_norm_gemm), each RMSNorm runs inside the projection after it (fewer
   * launches, less device time); 0: one kernel per operation, as an eager framework runs the
   * layer. The same bits either way. Environment CGRTK_CP_FUSE_NORM=0|1 overrides. */
  int fuse_norm;
  /* 1: the K/V buffer from ncclMemAlloc, registered as a symmetric window per communicator
   * (NCCL 2.27+; otherwise, or 0, cudaMalloc and NCCL's plain all-gather). The same bits either
   * way. Environment CGRTK_CP_SYMMETRIC=0 turns it off. */
  int symmetric_kv;
  /* 1: a call's first kernel too is a programmatic dependent of the kernel before it on the
   * stream (sm_90+, with the other kernels of the call), so that inside one graph of several calls
   * (a layer or the whole step) no call boundary costs a full kernel-launch gap. The kernel waits
   * for that predecessor's completion before it reads or writes anything but weights, so this is
   * safe wherever the predecessor's completion implies that of the work before it: any kernel
   * launched without the programmatic attribute, and any programmatic dependent that waits for its
   * own predecessor (all of this workload's kernels). A host that launches, right before a call, a
   * programmatic dependent that never waits (griddepcontrol.wait) must leave this 0. The same bits
   * either way. Environment CGRTK_CP_PDL_ENTRY=0|1 overrides. */
  int pdl_entry;
};

typedef struct cgrtk_cp cgrtk_cp;

#define CGRTK_CP_HEAD_DIM        64
#define CGRTK_CP_MAX_SEQUENCES   512 /* sequences cgrtk_cp_stage_thd takes at most */
#define CGRTK_CP_RMS_EPS         1e-5f
#define CGRTK_CP_NCCL_ERROR_BASE 0x20000
#define CGRTK_CP_MAX_COMMS       8 /* communicators a workload registers its K/V buffer on */
#define CGRTK_CP_NCCL_ERROR(st)  (CGRTK_CP_NCCL_ERROR_BASE + (int)(st))

/* Fill *cfg with the defaults above. */
void cgrtk_cp_default_cfg(struct cgrtk_cp_cfg *cfg);

/*
 * Fill *cfg with the launch-bound shape `cgrt bench --workload cp` measures by default: 16
 * layers, d_model 64 (one head), ffn 128, seed 1, temporaries from a workspace, one kernel
 * per operation (fuse_norm 0: RMSNorm, QKV, attention, Wo; RMSNorm, W1, W2), as an eager
 * framework runs such a layer, and pdl_entry 1. Each kernel then has one to three microseconds of
 * device time at short packed batches (64 to a few hundred tokens), less than the host needs to
 * launch it, so an eager step is bound by launches, which is what a graph bank per cp size removes.
 */
void cgrtk_cp_launch_bound_cfg(struct cgrtk_cp_cfg *cfg);

/*
 * Create a workload on the current device: allocate (cudaMalloc; the K/V buffer as said above)
 * and initialize every weight,
 * the hidden buffer [max_rows_per_rank, d] (zeroed), the K/V buffer [max_packed_tokens, 2d] and
 * the workload's own THD metadata arrays; raise the device's default memory pool release
 * threshold to UINT64_MAX so stream-ordered allocations stay cheap. Synchronizes a private
 * stream before it returns (never call it while a stream of this device captures in global
 * mode). On failure returns nonzero, leaves *out NULL and writes a sentence into err.
 */
int cgrtk_cp_create(cgrtk_cp **out, const struct cgrtk_cp_cfg *cfg, int64_t max_rows_per_rank,
                    char *err, size_t errlen);

/* Free everything create allocated, deregistering the K/V buffer's windows first: destroy the
 * workload before the communicators its all-gathers ran over (with cgrt: after
 * cgrt_release_graphs, before cgrt_close), on every rank (deregistration is collective). NULL is
 * a no-op. No work of w may still be pending. */
void cgrtk_cp_destroy(cgrtk_cp *w);

/* How many communicators the K/V buffer is registered on as a symmetric window; -1 if it came
 * from cudaMalloc (symmetric_kv 0, CGRTK_CP_SYMMETRIC=0, NCCL older than 2.27, or no NCCL). */
int cgrtk_cp_symmetric_windows(const cgrtk_cp *w);

/* The configuration w was created with (max_packed_tokens resolved). */
const struct cgrtk_cp_cfg *cgrtk_cp_config(const cgrtk_cp *w);

/* Capacity of the hidden buffer, in rows (max_rows_per_rank). */
int64_t cgrtk_cp_max_rows(const cgrtk_cp *w);

/*
 * Stage one step's input into this rank's rows: local row i (global row g = cp_rank R + i,
 * R = padded_total / cp_size) gets cgrtk_cp_input_value(cfg, step, g, col) if g < T (T: the sum
 * of host_seqlens[0..nseq)), 0 otherwise (padding). Requires padded_total a multiple of cp_size,
 * T <= padded_total <= max_packed_tokens, R <= max_rows, 0 <= cp_rank < cp_size, every length
 * >= 0. host_seqlens is read during the call only. One kernel; capturable.
 */
int cgrtk_cp_stage(cgrtk_cp *w, uint64_t step, const int32_t *host_seqlens, int nseq,
                   int64_t padded_total, int cp_size, int cp_rank, void *stream);

/*
 * THD metadata of the workload's own, for hosts whose runtime gives none: writes into w's device
 * arrays the layout of cgrt's THD slots for these nseq <= CGRTK_CP_MAX_SEQUENCES lengths and
 * padded_total (>= their sum), at a fixed capacity, and returns the arrays and the entry count
 * to pass to cgrtk_cp_attn (*padded_sequences is always CGRTK_CP_MAX_SEQUENCES + 1, so graphs
 * captured on them stay valid for any step that fits). The lengths travel as a kernel argument:
 * host_seqlens is free again when the call returns. One kernel; capturable. Any output pointer
 * may be NULL.
 */
int cgrtk_cp_stage_thd(cgrtk_cp *w, const int32_t *host_seqlens, int nseq, int64_t padded_total,
                       void *stream, const int32_t **cu_seqlens, const int32_t **cu_seqlens_padded,
                       int *padded_sequences);

/*
 * Attention block of `layer` on this rank's R = padded_total / cp_size rows, in place (see the
 * top of this file). cu_seqlens and cu_seqlens_padded: device, padded_sequences + 1 entries, in
 * global row coordinates. comm: the cp group's ncclComm_t (cp_size ranks, this one at cp_rank);
 * ignored (may be NULL) at cp_size 1. Every rank of the group must make the same call. R = 0 is
 * a no-op.
 */
int cgrtk_cp_attn(cgrtk_cp *w, int layer, const int32_t *cu_seqlens,
                  const int32_t *cu_seqlens_padded, int padded_sequences, int64_t padded_total,
                  int cp_size, int cp_rank, void *comm, void *stream);

/* MLP block of `layer` on the first `rows` rows of the hidden buffer, in place. rows = 0 is a
 * no-op. */
int cgrtk_cp_mlp(cgrtk_cp *w, int layer, int64_t rows, void *stream);

/* Enqueue a copy of the first `rows` rows of the hidden buffer (rows * d_model floats,
 * row-major) to host_dst. The caller synchronizes the stream before reading. */
int cgrtk_cp_read(cgrtk_cp *w, int64_t rows, void *host_dst, void *stream);

/* The hidden buffer (device, max_rows rows of cgrtk_cp_row_bytes each), owned by w. */
void *cgrtk_cp_hidden(cgrtk_cp *w);

/* The K/V buffer (device, max_packed_tokens rows of 2 * cgrtk_cp_row_bytes), owned by w. */
void *cgrtk_cp_kv(cgrtk_cp *w);

/* Bytes of one row of the hidden buffer: d_model * 4. */
size_t cgrtk_cp_row_bytes(const cgrtk_cp *w);

/* A sentence for a code returned by this workload (cudaError_t or CGRTK_CP_NCCL_ERROR(...)). */
const char *cgrtk_cp_strerror(int rc);

/* A sentence about w's last failed call (naming the call and the argument at fault); "" if
 * none. Valid until the next call on w. */
const char *cgrtk_cp_last_error(const cgrtk_cp *w);

/* ---------------------------------------------------------------- initial values
 * Shared by the device (initialization and stage kernels) and the host (references).
 * Tensor ids: ((uint64_t)layer << 8) | CGRTK_CP_T_* for a layer's tensors,
 * ((uint64_t)step << 8) | CGRTK_CP_T_INPUT for a step's input. Each value is a small integer
 * times a power of two: exact in float. */
enum {
  CGRTK_CP_T_ATTN_NORM = 0, /* [d] gain */
  CGRTK_CP_T_MLP_NORM = 1,  /* [d] gain */
  CGRTK_CP_T_WQKV = 2,      /* [3d, d] */
  CGRTK_CP_T_WO = 3,        /* [d, d] */
  CGRTK_CP_T_W1 = 4,        /* [ffn, d] */
  CGRTK_CP_T_W2 = 5,        /* [d, ffn] */
  CGRTK_CP_T_COUNT = 6,     /* tensors per layer */
  CGRTK_CP_T_INPUT = 0x80   /* [P, d], per step, by global row */
};

#if defined(__CUDACC__)
#define CGRTK_CP_INLINE static inline __host__ __device__
#else
#define CGRTK_CP_INLINE static inline
#endif

/* splitmix64's finalizer. */
CGRTK_CP_INLINE uint64_t cgrtk_cp_mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The key of one tensor: everything the hash needs except the element index. */
CGRTK_CP_INLINE uint64_t cgrtk_cp_tensor_key(uint64_t seed, uint64_t id) {
  return cgrtk_cp_mix(cgrtk_cp_mix(seed ^ 0x6370u) ^ id);
}

/* Element `index` of a tensor: an integer in [-128, 127] / 128 times `scale` (a power of two),
 * or, for a gain, 1 + an integer in [-8, 7] / 64. */
CGRTK_CP_INLINE float cgrtk_cp_value(uint64_t key, uint64_t index, int is_gain, float scale) {
  uint64_t h = cgrtk_cp_mix(key ^ index);
  if (is_gain)
    return 1.0f + (float)((int)(h >> 60) - 8) * (1.0f / 64.0f);
  return (float)((int)(h >> 56) - 128) * (1.0f / 128.0f) * scale;
}

/* The power of two s with s^2 in (t/2, 2t], t = 3 / fan_in. */
CGRTK_CP_INLINE float cgrtk_cp_weight_scale(int fan_in) {
  double t = 3.0 / (double)(fan_in > 0 ? fan_in : 1);
  double s = 1.0;
  while (s * s > 2.0 * t)
    s *= 0.5;
  return (float)s;
}

/* Element count of a layer tensor. */
CGRTK_CP_INLINE uint64_t cgrtk_cp_tensor_numel(const struct cgrtk_cp_cfg *cfg, int tensor) {
  uint64_t d = (uint64_t)cfg->d_model, f = (uint64_t)cfg->ffn;
  switch (tensor) {
  case CGRTK_CP_T_ATTN_NORM:
  case CGRTK_CP_T_MLP_NORM:
    return d;
  case CGRTK_CP_T_WQKV:
    return 3 * d * d;
  case CGRTK_CP_T_WO:
    return d * d;
  case CGRTK_CP_T_W1:
  case CGRTK_CP_T_W2:
    return f * d;
  default:
    return 0;
  }
}

/* Initial value of element `index` of tensor `tensor` (CGRTK_CP_T_*, not INPUT) of `layer`. */
CGRTK_CP_INLINE float cgrtk_cp_init_value(const struct cgrtk_cp_cfg *cfg, int layer, int tensor,
                                          uint64_t index) {
  uint64_t key = cgrtk_cp_tensor_key(cfg->seed, ((uint64_t)layer << 8) | (uint64_t)tensor);
  int gain = tensor == CGRTK_CP_T_ATTN_NORM || tensor == CGRTK_CP_T_MLP_NORM;
  float scale = tensor == CGRTK_CP_T_W2 ? cgrtk_cp_weight_scale(cfg->ffn)
                                        : cgrtk_cp_weight_scale(cfg->d_model);
  return cgrtk_cp_value(key, index, gain, scale);
}

/* Staged input of `step` at (global row, col), for real rows. */
CGRTK_CP_INLINE float cgrtk_cp_input_value(const struct cgrtk_cp_cfg *cfg, uint64_t step,
                                           int64_t row, int64_t col) {
  uint64_t key = cgrtk_cp_tensor_key(cfg->seed, (step << 8) | (uint64_t)CGRTK_CP_T_INPUT);
  return cgrtk_cp_value(key, (uint64_t)(row * cfg->d_model + col), 0, 1.0f);
}

#ifdef __cplusplus
}
#endif

#endif
