/*
 * types.h - the types the host API (cgrt.h) and the backend ABI (backend.h) share.
 *
 * Both headers include this one; neither a host nor a backend includes it by itself. It declares
 * no function of libcgrt: a backend, which links nothing of libcgrt (the core lends it everything
 * through struct cgrt_host_api), includes backend.h, which includes this header and not cgrt.h, so
 * a call of a host function (cgrt_strerror, cgrt_open...) in a backend fails to compile instead of
 * failing to link. What a backend may call besides its host API table is here, static inline:
 * cgrt_status_text().
 *
 * C99; no CUDA header. Conventions (cgrt.h says them in full):
 * - Every struct here that may grow starts with `size_t struct_size`: the host API's structs, which
 *   the host fills or receives and a backend reads (as the host passed them) or fills (a step
 *   report, the stats). backend.h's own structs start with `uint32_t struct_size`: each ABI keeps
 *   the type it was first published with (docs/decisions.md, issue 40).
 * - Versions: whatever was added after 0.1 is labelled `since 0.N`, the library's minor
 *   (CGRT_VERSION_MINOR, cgrt.h) of the first release that has it.
 */
#ifndef CGRT_TYPES_H
#define CGRT_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. 0 is success; every error is negative. */
typedef enum cgrt_status {
  CGRT_OK = 0,
  CGRT_E_INVAL = -1,     /* a bad argument: NULL, a struct_size too small, a value out of range */
  CGRT_E_NOMEM = -2,     /* host memory ran out */
  CGRT_E_IO = -3,        /* a file could not be read */
  CGRT_E_CONFIG = -4,    /* the configuration is invalid */
  CGRT_E_NOTFOUND = -5,  /* not found: the backend on the search path, or the configuration key
                            cgrt_config_get was asked for */
  CGRT_E_BACKEND = -6,   /* the backend (or driver object) was found but cannot be used */
  CGRT_E_NODEV = -7,     /* the configured driver has no usable device (or cannot be loaded) */
  CGRT_E_DEVICE = -8,    /* a device operation failed */
  CGRT_E_CAPTURE = -9,   /* a capture failed or was invalidated */
  CGRT_E_UPDATE = -10,   /* an executable graph could not be updated in place */
  CGRT_E_REBIND = -11,   /* a call's buffers moved and the rebind policy refuses it */
  CGRT_E_CAPACITY = -12, /* the step exceeds a configured capacity */
  CGRT_E_CALLBACK = -13, /* a host callback (prepare, body, module) returned an error */
  CGRT_E_STATE = -14,    /* the call is not allowed in the runtime's present state: inside a step,
                            from a callback, or while another thread drives the runtime */
  CGRT_E_UNSUPPORTED = -15, /* the backend or driver does not offer this */
  CGRT_E_NOTREADY = -16,    /* asynchronous work has not finished yet (not a failure) */
  /* -- since 0.4 -- */
  CGRT_E_VERIFY = -17 /* a replay's outputs differed from an eager run ([cuda_graph] verify) */
} cgrt_status;

/* What a step is for. Graphs are never shared between phases. */
typedef enum cgrt_phase {
  CGRT_PHASE_TRAIN = 0,
  CGRT_PHASE_EVAL = 1,
  CGRT_PHASE_INFER = 2
} cgrt_phase;
#define CGRT_PHASE_COUNT 3

/* What cgrt is doing with the work at hand. */
typedef enum cgrt_mode {
  CGRT_MODE_EAGER = 0,   /* run directly, no graph involved */
  CGRT_MODE_WARMUP = 1,  /* run directly, counted towards warmup_steps before a capture */
  CGRT_MODE_CAPTURE = 2, /* being recorded into a graph: device work is not executed now */
  CGRT_MODE_REPLAY = 3   /* a captured graph runs instead of the callbacks */
} cgrt_mode;
#define CGRT_MODE_COUNT 4

/* Module kinds, as named in the `modules` option. */
typedef enum cgrt_kind {
  CGRT_KIND_ATTN = 0,
  CGRT_KIND_MLP = 1,
  CGRT_KIND_MOE = 2,
  CGRT_KIND_MOE_ROUTER = 3,
  CGRT_KIND_MOE_PREPROCESS = 4,
  CGRT_KIND_MAMBA = 5,
  CGRT_KIND_OTHER = 6
} cgrt_kind;
#define CGRT_KIND_COUNT 7

typedef enum cgrt_direction { CGRT_FORWARD = 0, CGRT_BACKWARD = 1 } cgrt_direction;

/*
 * How a module call uses a buffer: CGRT_IN, CGRT_OUT or CGRT_INOUT, optionally OR-ed with one
 * element type (since 0.4). The type only matters to `[cuda_graph] verify`: outputs of a
 * float type compare within `verify_tolerance` ulps, everything else bitwise. A buffer without a
 * type (or of a type this version does not know) compares bitwise. In C++ write
 * CGRT_ACCESS_TYPED(CGRT_OUT, CGRT_F32) to get a cgrt_access.
 */
typedef enum cgrt_access {
  CGRT_IN = 1,
  CGRT_OUT = 2,
  CGRT_INOUT = 3,
  CGRT_F32 = 0x10,  /* IEEE binary32 elements */
  CGRT_F16 = 0x20,  /* IEEE binary16 elements */
  CGRT_BF16 = 0x30, /* bfloat16 elements */
  CGRT_F64 = 0x40   /* IEEE binary64 elements */
} cgrt_access;
#define CGRT_ACCESS_DIRECTION           0x0fu /* the bits of cgrt_access that say in, out or both */
#define CGRT_ACCESS_TYPE                0xf0u /* the bits that give the element type */
#define CGRT_ACCESS_TYPED(access, type) ((cgrt_access)((unsigned)(access) | (unsigned)(type)))

typedef enum cgrt_log_level {
  CGRT_LOG_OFF = 0,
  CGRT_LOG_ERROR = 1,
  CGRT_LOG_WARN = 2,
  CGRT_LOG_INFO = 3,
  CGRT_LOG_DEBUG = 4
} cgrt_log_level;

/* An open runtime: its backend, device driver, modules, stream, statistics. Opaque. */
typedef struct cgrt_runtime cgrt_runtime;

/*
 * A device buffer a module call or a step uses. `ptr` is a device pointer on the cuda driver (host
 * memory on the host driver). `name` is optional and only used in messages; it need not outlive
 * the call.
 */
typedef struct cgrt_buffer {
  void *ptr;
  size_t bytes;
  cgrt_access access;
  const char *name;
} cgrt_buffer;

/*
 * What cgrt tells the host's callbacks about the work at hand. Owned by cgrt, read-only to the
 * host, valid only during the callback it is passed to.
 */
typedef struct cgrt_ctx {
  size_t struct_size;
  cgrt_runtime *rt;
  void *stream;          /* enqueue all device work here: cudaStream_t on the cuda driver */
  void *comm;            /* ncclComm_t of the step's context-parallel group, or NULL (always NULL
                            in calls of a module registered with no_cp_comm) */
  int cp_size;           /* context-parallel size of the step (1 without context parallelism) */
  cgrt_phase phase;      /* the step's phase */
  cgrt_mode mode;        /* what cgrt does with the work now: eager, warmup, capture or replay */
  int microbatch;        /* microbatch of the current module call; -1 outside module calls */
  uint64_t step;         /* index of the step, from 0 */
  int64_t tokens;        /* the step's actual token count */
  int64_t padded_tokens; /* the count the work is shaped for; prepare pads up to it */
  int num_sequences;     /* packed (THD) sequences of the step; 0 if not packed */
  int padded_sequences;  /* sequences including padding dummies */
  const int32_t *cu_seqlens;        /* device: cumulative actual lengths, or NULL */
  const int32_t *cu_seqlens_padded; /* device: cumulative padded lengths, or NULL */
  void *user;                       /* the step's user pointer (cgrt_step_desc.user) */
  /*
   * The step's static buffers as the body must address them: the host's own (desc->buffers),
   * or, when a whole-step graph works on private copies (rebind = copy), those copies. A body
   * that reads its static addresses from here works under every rebind policy.
   */
  const cgrt_buffer *buffers;
  size_t num_buffers;
  int cp_rank; /* this rank's index in the step's context-parallel group (0 without one) */
} cgrt_ctx;

/*
 * The arguments of one module call. `key` is the host's signature of the call's shape (token
 * count, microbatch shape...): calls with different keys never share a graph. `buffers` lists the
 * memory the call reads and writes, so cgrt can tell when it moved since a graph was captured.
 */
typedef struct cgrt_args {
  size_t struct_size;
  uint64_t key;
  int microbatch;
  const cgrt_buffer *buffers;
  size_t num_buffers;
} cgrt_args;

/* A step-level callback: prepare or body. `ctx->user` is the step's user pointer. */
typedef int (*cgrt_step_fn)(const cgrt_ctx *ctx, void *user);

/* Describes one step to cgrt_step(). */
typedef struct cgrt_step_desc {
  size_t struct_size;
  cgrt_phase phase;
  int64_t tokens;             /* actual tokens (inference: selects the token bucket) */
  const int32_t *seqlens;     /* host array of the packed sequences' lengths, or NULL */
  int num_sequences;          /* entries in seqlens */
  int cp_size;                /* context-parallel size; 0 or 1 means none */
  int microbatches;           /* microbatches in the body; 0 means 1 */
  const cgrt_buffer *buffers; /* the step's static buffers, checked by whole-step graphs */
  size_t num_buffers;
  /*
   * Optional; always runs eagerly before the body: stage ctx->tokens real tokens into the static
   * buffers and pad them up to ctx->padded_tokens. It may run more than once in a step (with
   * [inference] capture = eager, once per bucket being captured, with ctx->tokens clipped to that
   * bucket, then once for the step itself), so it must only write the step's static inputs.
   */
  cgrt_step_fn prepare;
  /*
   * Required; the graphable work, replaced by a replay once a whole-step graph holds it. It may
   * run more than once in a step (a failed capture is run again eagerly, and diagnose may record
   * it once more), so host state it changes belongs in prepare or is reset at its start. A graph
   * replays the kernel arguments it was recorded with: a value that changes every step (a
   * learning rate, a seed, a grid size from the batch) is staged by prepare into device memory
   * that the kernels read.
   */
  cgrt_step_fn body;
  void *user; /* passed to both callbacks as `user` and ctx->user */
  /*
   * -- since 0.4 (reads as 0 in an older desc) --
   * 1: the body addresses its own buffers, not ctx->buffers (a PyTorch body reads its tensors):
   * a whole-body graph is never handed private copies of the step's buffers; moved buffers are
   * re-recorded, and under rebind = auto a body whose buffers move on most steps runs eagerly.
   */
  int stages_inputs;
} cgrt_step_desc;

/* What happened during one step, filled by cgrt_step() if the host passes one. */
typedef struct cgrt_step_report {
  size_t struct_size;
  cgrt_mode mode;          /* the step as a whole: the mode of its body */
  int64_t padded_tokens;   /* the size the step ran at */
  uint32_t calls_eager;    /* module calls run directly (eager or warmup) */
  uint32_t calls_captured; /* module calls recorded into a new graph */
  uint32_t calls_replayed; /* module calls served by a replay */
  uint32_t graphs_built;   /* executables instantiated during the step */
  uint32_t fallbacks;      /* captures that failed and ran eagerly instead */
  uint64_t host_ns;        /* host time spent inside cgrt_step(), less a wait for an earlier
                              step before this one was issued (cgrt_stats.queue_wait_ns) */
  /*
   * -- since 0.4 --
   * Bytes the step's replays copied into and out of private copies of moved buffers (rebind =
   * copy, or auto on a key whose buffers move): part of what the step cost. 0 when every graph
   * replayed on the host's own buffers.
   */
  uint64_t copy_bytes;
} cgrt_step_report;

/* Buckets listed in cgrt_stats.buckets; a longer set is counted in num_buckets. */
#define CGRT_STATS_MAX_BUCKETS 64

/* Counters of a runtime since it opened (or since the last cgrt_release_graphs() for gauges). */
/*
 * [runtime] sync_guard: whether the process's raw device-wide synchronizes wait for cgrt's captures
 * (since 0.4, host API minor 12). On the cuda driver the guard attaches CUPTI, which makes every
 * graph launch of the process about ten times dearer for the host while it is attached: off by
 * default (README, Other threads and captures).
 */
typedef enum {
  CGRT_SYNC_GUARD_OFF = 0,
  CGRT_SYNC_GUARD_ON = 1 /* the open fails where the driver cannot guard */
} cgrt_sync_guard;

typedef struct cgrt_stats {
  size_t struct_size;
  uint64_t steps;
  uint64_t steps_by_mode[CGRT_MODE_COUNT]; /* indexed by cgrt_mode */
  uint64_t calls_by_mode[CGRT_MODE_COUNT]; /* module calls, indexed by cgrt_mode */
  uint64_t captures;                       /* graphs recorded */
  uint64_t instantiations;                 /* executables instantiated */
  uint64_t updates;                        /* executables updated in place */
  uint64_t update_refusals;                /* updates the driver refused (topology changed) */
  uint64_t rebinds;                        /* calls whose buffers moved since capture */
  uint64_t evictions;                      /* executables dropped by the max_graphs bound */
  uint64_t fallbacks;                      /* failed captures that ran eagerly */
  uint64_t live_graphs;                    /* executables alive now */
  /*
   * Tokens added by padding to buckets, summed over steps. Its name before 0.4 was padded_tokens,
   * which elsewhere (ctx, step report) is the size a step ran at: kept as an alias where the
   * compiler offers anonymous unions (C11, C++); use padding_tokens.
   */
#if (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L) || defined(__cplusplus)
  union {
    uint64_t padding_tokens;
    uint64_t padded_tokens; /* the old name of padding_tokens */
  };
#else
  uint64_t padding_tokens;
#endif
  uint64_t capture_ns;         /* host time spent capturing */
  uint64_t instantiate_ns;     /* host time spent instantiating, updating and uploading */
  uint64_t graph_mem_used;     /* bytes of graph memory in use (driver's figure) */
  uint64_t graph_mem_reserved; /* bytes of graph memory reserved (driver's figure) */
  /* -- since 0.2: token buckets -- */
  uint64_t real_tokens;    /* real tokens of inference steps, summed; the padded share of the
                              work is padding_tokens / (padding_tokens + real_tokens) */
  uint64_t bucket_changes; /* bucket sets adopted by [inference] buckets = adaptive */
  uint32_t num_buckets;    /* token buckets in force now; 0 under a backend that never pads to
                              them (CGRT_BACKEND_BUCKETS unset: none, transformer_engine,
                              dynamic_cp) */
  int64_t buckets[CGRT_STATS_MAX_BUCKETS]; /* the smallest min(num_buckets, 64) of them,
                                              ascending */
  /* -- since 0.3: graph memory (cgrt_graph_list() has the figures per graph) -- */
  uint64_t graph_bytes;      /* device memory of the live graphs: graph_pool_bytes +
                                graph_exec_bytes, the sum of their cgrt_graph_info.bytes */
  uint64_t graph_pool_bytes; /* graph memory pool charged to the live graphs */
  uint64_t graph_exec_bytes; /* the live executables' own device memory */
  uint64_t graph_pool_idle;  /* pool memory the driver still reserves for graphs that are gone
                                (given back by cgrt_release_graphs or the budget's trims) */
  uint64_t graph_bytes_peak; /* the highest graph_bytes + graph_pool_idle so far */
  uint64_t graph_nodes;      /* nodes of the live graphs */
  uint64_t memory_budget;    /* [cuda_graph] memory_budget in bytes; 0: no budget */
  uint64_t budget_eager;     /* calls (or bodies) run eagerly because their graph did not fit */
  uint64_t budget_evictions; /* executables evicted to make room under the budget (they are
                                counted in evictions too) */
  /* -- since 0.4: verify and diagnose -- */
  uint64_t verifications;     /* replays checked against an eager run ([cuda_graph] verify) */
  uint64_t verify_mismatches; /* of those, replays whose outputs differed */
  uint64_t verify_skipped;    /* checks that could not run (no memory for the private copies) */
  uint64_t findings;          /* diagnose findings reported (repeats of one included) */
  /* -- since 0.4: NCCL graph mixing -- */
  uint64_t comm_waits; /* times work cgrt ran outside a graph with a cp communicator first waited
                          for the graphs it had launched, because NCCL's graph mixing support is
                          off (NCCL_GRAPH_MIXING_SUPPORT=0); 0 while it is on */
  /* -- since 0.4: moved buffers (rebind = auto and copy) -- */
  uint64_t rebind_copy_keys;    /* keys rebind = auto switched to private copies: their buffers
                                   moved on 3 of 4 calls */
  uint64_t rebind_eager_keys;   /* keys sent eager for good because their buffers moved on most
                                   calls and private copies could not serve them */
  uint64_t copy_bytes;          /* bytes copied into and out of private copies around replays
                                   (rebind = copy and auto), summed; per step: / steps */
  uint64_t staged_bytes;        /* device memory the private copies hold now (counted against
                                   [cuda_graph] memory_budget) */
  uint64_t rebind_variant_keys; /* keys rebind = auto gave a graph per address set: their buffers
                                   moved on 3 of 4 calls among at most 4 sets they had before */
  /* -- since 0.4: every backend runs every phase -- */
  uint64_t eager_phase_steps; /* steps cgrt ran eagerly itself because the backend has no form
                                 for their phase (cgrt_backend_info.phases: CGRT_RUN_CORE_EAGER) */
  /* -- since 0.4: steps chosen by time ([local] by_time; [dynamic_cp] by_time, where a cp size
     stands for a token count and its graph steps for the padded replay) -- */
  uint64_t timed_steps;       /* steps whose device time was read (two timed events around them) */
  uint64_t time_probe_steps;  /* padded steps run eagerly at their own size to measure eager */
  uint64_t time_eager_steps;  /* padded steps run eagerly at their own size because their padded
                                 replay was measured slower than eager */
  uint64_t time_exact_steps;  /* steps run at an exact-size bucket for that reason (its warm-up
                                 and capture steps included; local only) */
  uint64_t time_eager_counts; /* token counts (dynamic_cp: cp sizes) served eagerly now for that
                                 reason */
  uint64_t time_exact_counts; /* token counts given an exact-size bucket now (local only) */
  /* -- since 0.4: fewer probes ([local] by_time shares measurements within a bucket) -- */
  uint64_t time_implied_counts; /* token counts whose way was decided by another count's
                                   measurement in their bucket, without probes of their own (a
                                   count decided again after a recheck counts again; local
                                   only) */
  uint64_t time_rare_refused;   /* token counts served eagerly that were refused an exact-size
                                   bucket because seen too rarely then (once per count; it may
                                   get one later, when seen often enough; local only) */
  /* -- since 0.4: a bound on the steps queued ahead of the device -- */
  uint64_t queue_waits;   /* steps whose issue first waited for the step [runtime]
                             max_queued_steps before them to finish on the device (the host was
                             that far ahead); 0 while max_queued_steps = 0 (no bound, the
                             default) */
  uint64_t queue_wait_ns; /* host time those waits took, summed (not in any step's host_ns) */
  /* -- since 0.4: [runtime] sync_guard, for this runtime's device and the whole process (every
     runtime of the device reports the same), since the process began guarding -- */
  uint64_t sync_guard_waits; /* raw device synchronizes of any thread that waited for a capture */
  uint64_t sync_guard_late;  /* of those, ones that went ahead when the bound ran out (the capture
                                outlasted it: its work may wait for the synchronizing thread);
                                each may have broken that capture, as without the guard */
  /* -- since 0.4: keys that never repeat -- */
  uint64_t unrepeated_units; /* modules (one per direction) and step phases whose last 64 graphed
                                calls each came with a key not seen before: none reaches its
                                warm-up, nothing of them is captured (said once each) */
} cgrt_stats;

/*
 * A short static description of a status code: the text cgrt_strerror() returns, for a backend,
 * which cannot call cgrt_strerror (it links nothing of libcgrt). "unknown error" for a code this
 * header does not know.
 */
static inline const char *cgrt_status_text(int code) {
  switch (code) {
  case CGRT_OK:
    return "success";
  case CGRT_E_INVAL:
    return "invalid argument";
  case CGRT_E_NOMEM:
    return "out of host memory";
  case CGRT_E_IO:
    return "file could not be read";
  case CGRT_E_CONFIG:
    return "invalid configuration";
  case CGRT_E_NOTFOUND:
    return "not found (no such backend, or no such configuration key)";
  case CGRT_E_BACKEND:
    return "backend unusable";
  case CGRT_E_NODEV:
    return "no usable device";
  case CGRT_E_DEVICE:
    return "device operation failed";
  case CGRT_E_CAPTURE:
    return "graph capture failed";
  case CGRT_E_UPDATE:
    return "graph update refused";
  case CGRT_E_REBIND:
    return "buffer moved since capture";
  case CGRT_E_CAPACITY:
    return "over capacity";
  case CGRT_E_CALLBACK:
    return "host callback failed";
  case CGRT_E_STATE:
    return "not allowed in this state";
  case CGRT_E_UNSUPPORTED:
    return "not supported";
  case CGRT_E_NOTREADY:
    return "not ready";
  case CGRT_E_VERIFY:
    return "replay differs from eager";
  default:
    return "unknown error";
  }
}

#ifdef __cplusplus
}
#endif

#endif /* CGRT_TYPES_H */
