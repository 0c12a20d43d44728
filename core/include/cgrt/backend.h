/*
 * backend.h - the cgrt backend ABI, major version 1.
 *
 * A backend is a shared object that decides how a step's work reaches the device (eagerly, as
 * per-module graphs, one graph per step...). It exports exactly one const data symbol per ABI
 * major it speaks:
 *
 *     const struct cgrt_backend_v1 cgrt_backend_v1 = { .abi_major = 1, ... };
 *
 * and hides everything else (-fvisibility=hidden). The core dlopen()s it, checks the leading
 * fields and calls through the table. The backend never calls CUDA itself: the core lends it the
 * device operations and the shared graph mechanism through struct cgrt_host_api, so one backend
 * runs on the cuda driver and on the host driver (a CPU executor with graph semantics, used in CI
 * and by `cgrt check --dry-run`).
 *
 * Compatibility rules (the same ones keep NCCL plugins and SQLite VFSes working for years):
 * - The first four fields of struct cgrt_backend_v1 never change.
 * - Within major 1, fields are only appended. The core reads a field only when the backend's
 *   struct_size covers it and, for functions, the pointer is non-NULL: CGRT_BACKEND_HAS().
 * - struct cgrt_host_api likewise only grows; a backend checks host->struct_size (or
 *   CGRT_HOST_HAS()) before using a field newer than the ones it was built with.
 * - Unknown caps bits are ignored.
 * - Versions: the first v1 header is minor 0 (tests/fixtures/abi/backend_v1_0.h keeps it, frozen,
 *   and a fixture built against it must keep loading). Whatever was appended since (fields of
 *   the three tables, enum values, caps bits) is labelled `since minor N`: present in a core whose
 *   CGRT_HOST_API_MINOR (host->minor) is N or more. No label names a minor above this header's.
 *   A backend built against this header may still meet an older core: test a field with
 *   CGRT_HOST_HAS(), CGRT_VIEW_HAS() or, in the core, CGRT_BACKEND_HAS(); never by hand.
 * - A change that cannot be made by appending is a new major: a new struct cgrt_backend_v2 and a
 *   new symbol `cgrt_backend_v2`; a backend may export both.
 *
 * Threading: the core calls a backend from the one thread that drives its runtime. Separate
 * runtimes get separate states and may run on separate threads. Strings handed to a backend live
 * only during the call.
 *
 * C99; no CUDA header: streams, graphs, executables, events and communicators are `void *`.
 */
#ifndef CGRT_BACKEND_H
#define CGRT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/*
 * The types a backend shares with the host API, and nothing of libcgrt: not cgrt.h, whose functions
 * a backend must not call (it links nothing of libcgrt). Errors: the CGRT_E_* codes and their text,
 * cgrt_status_text() (static inline).
 */
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CGRT_BACKEND_ABI_MAJOR 1
#define CGRT_HOST_API_MINOR    12

/* Capability bits a backend declares in cgrt_backend_v1.caps. */
#define CGRT_CAP_TRAINING   (1u << 0) /* runs train/eval steps */
#define CGRT_CAP_INFERENCE  (1u << 1) /* runs infer steps */
#define CGRT_CAP_BACKWARD   (1u << 2) /* handles backward module calls */
#define CGRT_CAP_GRAPHS     (1u << 3) /* builds graphs (otherwise: eager only) */
#define CGRT_CAP_MULTI_GPU  (1u << 4) /* designed for several ranks */
#define CGRT_CAP_NEEDS_COMM (1u << 5) /* needs the host's world communicator */
/* since minor 1: follows the token buckets when [inference] buckets = adaptive changes them
   (buckets_observe) */
#define CGRT_CAP_ADAPTIVE_BUCKETS (1u << 6)
/* pads infer steps up to the [inference] token buckets (bucket_for_tokens): cgrt_stats lists the
   buckets only for such a backend (a core before 0.4 ignores the bit) */
#define CGRT_CAP_TOKEN_BUCKETS (1u << 7)
/* since minor 6: graphs the whole step body as one graph (full_iteration). The core's rules then
   ask for [host] nan_check = off and an empty [cuda_graph] modules, and allow recompute = full;
   a backend whose options decide it sets it in config_caps() */
#define CGRT_CAP_WHOLE_STEP (1u << 8)

/* Values of the enumerated options, shared by the core's parser and backends. */
typedef enum cgrt_inference_scope {
  CGRT_SCOPE_NONE = 0,
  CGRT_SCOPE_LAYER = 1,
  CGRT_SCOPE_BLOCK = 2
} cgrt_inference_scope;
typedef enum cgrt_capture_mode {
  CGRT_CAPTURE_GLOBAL = 0,
  CGRT_CAPTURE_THREAD_LOCAL = 1,
  CGRT_CAPTURE_RELAXED = 2
} cgrt_capture_mode;
typedef enum cgrt_rebind {
  CGRT_REBIND_UPDATE = 0,
  CGRT_REBIND_COPY = 1,
  CGRT_REBIND_RECAPTURE = 2,
  CGRT_REBIND_ERROR = 3,
  /* since minor 3: update while a key's buffers move now and then; a key whose buffers move
     on most calls works on private copies (see cache_run), or runs eagerly if copies cannot serve
   */
  CGRT_REBIND_AUTO = 4
} cgrt_rebind;
typedef enum cgrt_bucket_dist {
  CGRT_BUCKETS_EXPONENTIAL = 0,
  CGRT_BUCKETS_LINEAR = 1,
  CGRT_BUCKETS_LIST = 2,
  CGRT_BUCKETS_ADAPTIVE = 3 /* since minor 1: start exponential, then follow the traffic */
} cgrt_bucket_dist;
typedef enum cgrt_capture_time { CGRT_CAPTURE_LAZY = 0, CGRT_CAPTURE_EAGER = 1 } cgrt_capture_time;
/* since minor 8: [inference] adapt_by, what the adaptive planner minimizes. */
typedef enum cgrt_adapt_by {
  CGRT_ADAPT_BY_TIME = 0,  /* the expected step time, from the backend's measured step costs
                              (buckets_cost); padded tokens until it has figures enough */
  CGRT_ADAPT_BY_TOKENS = 1 /* the expected padded tokens (the planner of minor 1) */
} cgrt_adapt_by;
typedef enum cgrt_over_capacity {
  CGRT_OVER_CAPACITY_ERROR = 0,
  CGRT_OVER_CAPACITY_EAGER = 1
} cgrt_over_capacity;
/* since minor 3: [dynamic_cp] graph_scope, what one graph of a bank holds. */
typedef enum cgrt_cp_scope {
  CGRT_CP_SCOPE_MODULES = 0, /* one call of a module of a kind in `modules` (Megatron-Bridge) */
  CGRT_CP_SCOPE_STEP = 1     /* the whole step body, per cp size and THD slot */
} cgrt_cp_scope;
typedef enum cgrt_driver_kind { CGRT_DRIVER_CUDA = 0, CGRT_DRIVER_HOST = 1 } cgrt_driver_kind;
/* since minor 3: [cuda_graph] verify, which replays also run eagerly on private copies. */
typedef enum cgrt_verify {
  CGRT_VERIFY_OFF = 0,
  CGRT_VERIFY_FIRST = 1, /* the first replay of each executable */
  CGRT_VERIFY_EVERY = 2  /* its 1st, N+1st, 2N+1st... replays (verify_every = N) */
} cgrt_verify;
/* since minor 3: [cuda_graph] verify_action. */
typedef enum cgrt_verify_action {
  CGRT_VERIFY_WARN = 0,  /* log and count; keep replaying */
  CGRT_VERIFY_EAGER = 1, /* the eager outputs are kept; the key runs eagerly from then on */
  CGRT_VERIFY_ERROR = 2  /* as eager, and the call fails with CGRT_E_VERIFY */
} cgrt_verify_action;
/* since minor 3: [runtime] diagnose, when the calls made while capturing are recorded. */
typedef enum cgrt_diagnose {
  CGRT_DIAGNOSE_FAILURES = 0, /* a failed capture is captured once more, recorded, reported */
  CGRT_DIAGNOSE_ON = 1,       /* every capture is recorded; suspicious calls reported too */
  CGRT_DIAGNOSE_OFF = 2       /* never (CUPTI is never loaded) */
} cgrt_diagnose;
typedef enum cgrt_recompute {
  CGRT_RECOMPUTE_NONE = 0,
  CGRT_RECOMPUTE_SELECTIVE = 1,
  CGRT_RECOMPUTE_FULL = 2
} cgrt_recompute;
typedef enum cgrt_moe_dispatcher {
  CGRT_MOE_ALLTOALL = 0,
  CGRT_MOE_ALLGATHER = 1
} cgrt_moe_dispatcher;
typedef enum cgrt_moe_capacity {
  CGRT_MOE_CAPACITY_NONE = 0,
  CGRT_MOE_CAPACITY_DROP = 1,
  CGRT_MOE_CAPACITY_DROP_AND_PAD = 2
} cgrt_moe_capacity;

/* since minor 4: how the core reads the value of a backend's option (struct cgrt_option). */
typedef enum cgrt_option_type {
  CGRT_OPTION_BOOL = 0,   /* true/false, on/off, yes/no, 1/0, written true or false */
  CGRT_OPTION_INT = 1,    /* a whole number in [min, max] */
  CGRT_OPTION_SIZE = 2,   /* off (0) or a whole number of KiB, MiB or GiB; bytes in [min, max] */
  CGRT_OPTION_ENUM = 3,   /* one of `values` (case-insensitive), written as spelled there */
  CGRT_OPTION_LIST = 4,   /* whole numbers, space or comma separated, each in [min, max] */
  CGRT_OPTION_STRING = 5, /* any text, as written */
  CGRT_OPTION_PATH = 6    /* a non-empty file or directory name, as written */
} cgrt_option_type;

/*
 * since minor 4: one option of a backend, a key of its own section [NAME] (NAME its table's
 * name), declared in its table (cgrt_backend_v1.options). The core reads and checks it as it
 * does its own keys, before init(): the type, the range, a key the backend does not declare
 * (refused with the nearest declared spelling), the default; `cgrt check` prints each option with
 * its value or default. The backend reads the value with cfg->get() (text, the default when not
 * given) or cfg->get_int() (the number). Static data: it must outlive the loaded library's use.
 *
 * since minor 5, two more uses of the same row:
 * - A section the core reads too: a backend named like one ([dynamic_cp]) declares there the keys
 *   the core does not read. The core loads that backend's table (never initializing it) whenever
 *   it reads a configuration, configured or not, so those keys are checked, defaulted and printed
 *   in every configuration, after the core's keys of that section, in declared order.
 * - A default for a core key: a row named "SECTION.KEY" (e.g. "cuda_graph.inference_scope")
 *   gives that core key the default `def` while this backend is the configured one and the file
 *   does not set the key. Only name and def are read: the core reads def as the key's value. Such
 *   a row is not a key of [NAME].
 */
struct cgrt_option {
  const char *name;      /* the key, e.g. "depth" */
  cgrt_option_type type; /* how the value is read */
  const char *def;       /* the default, as written in a file; NULL: none (get() gives NULL) */
  int64_t min, max;      /* INT, SIZE, LIST: the range; max 0: no upper bound */
  const char *values;    /* ENUM: the spellings allowed, space-separated ("modules step") */
  const char *meaning;   /* one line: what the value is (messages say it) */
};

/* The bit of a kind in cgrt_config_view.modules. */
#define CGRT_KIND_BIT(kind) (1u << (unsigned)(kind))

/*
 * The validated configuration, as typed values. Owned by the core, valid for the runtime's life
 * (a backend may keep the pointer). Arrays are valid as long as the view.
 */
struct cgrt_config_view {
  uint32_t struct_size;
  /* [cuda_graph] */
  const char *impl; /* backend name or path as configured */
  uint32_t modules; /* CGRT_KIND_BIT() of each kind in `modules`; 0: none named */
  int warmup_steps; /* >= 1 */
  cgrt_inference_scope inference_scope;
  cgrt_capture_mode capture_mode;
  cgrt_rebind rebind;
  int max_graphs; /* >= 1 */
  /* [inference] */
  cgrt_bucket_dist buckets;
  int64_t max_tokens;
  int num_graphs;
  int tp_size;
  const int64_t *bucket_list; /* `list`, ascending; NULL if not given */
  size_t bucket_list_len;
  cgrt_capture_time capture; /* lazy: a bucket at its first use; eager: all at once */
  /* [dynamic_cp] */
  const int *cp_sizes; /* ascending, distinct */
  size_t num_cp_sizes;
  /*
   * Retired since minor 5: dynamic_cp's own options (declared in its table), read with
   * get_int("dynamic_cp", "max_packed_tokens"...). The core still fills these four and cp_scope
   * below with their values, for backends built before minor 5 that read them here.
   */
  int64_t max_packed_tokens;
  int max_sequences;
  int graph_slots;
  cgrt_over_capacity over_capacity;
  /* [runtime] */
  int device;
  cgrt_driver_kind driver;
  int bind_cpu; /* 1: auto, 0: off */
  cgrt_log_level log_level;
  /* [host] */
  int nan_check;
  cgrt_recompute recompute;
  int moe_experts;
  cgrt_moe_dispatcher moe_dispatcher;
  cgrt_moe_capacity moe_capacity;
  int moe_router_padding_fp8;
  int graph_safe_rng;
  /*
   * Raw normalized value of any key, or NULL if the key was not given. A backend reads its own
   * section ([NAME] where NAME is its name) through this; every key of that section the backend
   * never reads during init() is refused as unknown after init().
   */
  const char *(*get)(const struct cgrt_config_view *view, const char *section, const char *key);
  /* -- since minor 1: [inference] buckets = adaptive -- */
  int adapt_interval;    /* steps between two plans of the bucket set; >= 1 */
  int adapt_halflife;    /* steps after which a step's weight in the histogram has halved */
  double adapt_min_gain; /* fraction of the padded tokens a new set must save to be adopted */
  /* -- since minor 2: [cuda_graph] memory_budget -- */
  uint64_t memory_budget; /* [cuda_graph] memory_budget in bytes; 0: no budget. The graph cache
                             keeps its live graphs' memory under it (LRU eviction, else eager) */
  /* -- since minor 3: verify and diagnose, the core's mechanism -- */
  cgrt_verify verify;
  int verify_every;     /* N of `verify = every:N` (>= 1); 0 otherwise */
  int verify_tolerance; /* ulps a typed float output may differ by; 0: bitwise */
  cgrt_verify_action verify_action;
  cgrt_diagnose diagnose; /* [runtime] diagnose, after CGRT_DIAGNOSE */
  /* -- since minor 3: [dynamic_cp] graph_scope -- */
  cgrt_cp_scope cp_scope; /* retired since minor 5 (still filled): dynamic_cp's graph_scope */
  /* -- since minor 4: typed values -- */
  /*
   * The number a key holds: a core key or an option the configured backend declares (struct
   * cgrt_option), its default when not given. BOOL: 1 or 0; INT: the number; SIZE: bytes; ENUM:
   * the index of the value in its spellings. 0, or CGRT_E_INVAL if the key is none of those (a
   * LIST, STRING or PATH: read it with get()). For a declared option, get() also gives the
   * default when the key was not given.
   */
  int (*get_int)(const struct cgrt_config_view *view, const char *section, const char *key,
                 int64_t *out);
  /* -- since minor 5: messages about keys -- */
  /*
   * Writes how a message names the key, a core key or a declared option: "nan_check = on
   * (default)", "modules = attn (line 3)". Returns the line where the file gives it (> 0), 0 when
   * it holds its default, CGRT_E_INVAL when the key is neither (buf then says "key = ?").
   */
  int (*describe)(const struct cgrt_config_view *view, const char *section, const char *key,
                  char *buf, size_t len);
  /* -- since minor 8: buckets chosen by time -- */
  cgrt_adapt_by adapt_by; /* [inference] adapt_by */
  /* -- since minor 11: a bound on the steps queued ahead of the device -- */
  int max_queued_steps; /* [runtime] max_queued_steps, 0 to 64; 0: no bound. Before issuing step
                           i the core waits for step i - max_queued_steps to finish */
  /* -- since minor 12: raw device synchronizes kept out of captures -- */
  cgrt_sync_guard sync_guard; /* [runtime] sync_guard */
};

/* What a backend knows of a registered module. Owned by the core, valid until close. */
struct cgrt_module_info {
  uint32_t struct_size;
  uint32_t id; /* dense, from 0, in registration order: index your per-module arrays with it */
  const char *name;
  cgrt_kind kind;
  int layer;
  int has_backward;
};

/* One step in flight. Owned by the core, valid during backend->step(). */
struct cgrt_step_frame {
  uint32_t struct_size;
  const cgrt_step_desc *desc; /* as the host passed it */
  cgrt_ctx *ctx;              /* the backend sets mode and padded_tokens before running work */
  cgrt_step_report *report;   /* always non-NULL (the core's own if the host passed none) */
};

/* One module call in flight. Owned by the core, valid during backend->call(). */
struct cgrt_call {
  uint32_t struct_size;
  const struct cgrt_module_info *module;
  cgrt_direction dir;
  const cgrt_args *args;
  cgrt_ctx *ctx; /* the backend sets ctx->mode before running the callback */
  /*
   * Nonzero when the call is made by a body that host->run_body_graph() is running as one unit
   * (warm-up, capture or eager fallback): run it directly (host->run_module) in ctx->mode.
   */
  int in_body_graph;
};

/*
 * Counters a backend reports through cgrt_host_api.count() for mechanism it runs by hand. The core
 * counts by itself everything that passes through it: module calls by the ctx->mode the backend
 * left them in (eager, warmup, capture, replay), captures, instantiations, updates and their time,
 * fallbacks of the capture helper and the cache, rebinds and evictions of the cache, live
 * executables, padded tokens (from ctx->padded_tokens).
 */
typedef enum cgrt_counter {
  CGRT_COUNT_UPDATES = 0,         /* an executable was updated in place */
  CGRT_COUNT_UPDATE_REFUSALS = 1, /* the driver refused an update */
  CGRT_COUNT_REBINDS = 2,         /* a call's buffers had moved since its capture */
  CGRT_COUNT_EVICTIONS = 3,       /* an executable was dropped to respect max_graphs */
  CGRT_COUNT_FALLBACKS = 4        /* a capture done without the helpers failed, ran eagerly */
} cgrt_counter;

/* A keyed set of executables owned by the core (see cgrt_host_api.cache_*). Opaque. */
struct cgrt_graph_cache;

/* The backend table, defined below (a decorator backend loads others through the host API). */
struct cgrt_backend_v1;

/* A ring of device slots for packed-sequence (THD) metadata (see cgrt_host_api.thd_*). Opaque. */
struct cgrt_thd_ring;

/* One step's packed-sequence metadata, written into a slot of a ring. */
struct cgrt_thd_slot {
  int index;                        /* slot used; pass it to thd_release */
  const int32_t *cu_seqlens;        /* device: 0, l1, l1+l2, ..., T, then T repeated */
  const int32_t *cu_seqlens_padded; /* device: as cu_seqlens, then the captured size repeated */
  int64_t tokens;                   /* T, the real tokens */
  int64_t padded_tokens;            /* the captured size: the dummy sequence pads up to it */
  int sequences;                    /* real sequences */
  int padded_sequences;             /* entries the graphs iterate over (real, dummy, empty) */
};

/* What identifies one graph in a cache. Fields a backend does not use stay 0. */
struct cgrt_graph_key {
  uint32_t module;    /* module id, or CGRT_KEY_BODY for a graph of a whole step body */
  uint32_t dir;       /* cgrt_direction */
  int32_t microbatch; /* microbatch slot */
  uint32_t phase;     /* cgrt_phase */
  uint64_t shape;     /* the host's args->key, or a token bucket */
  uint64_t extra;     /* backend-defined: a second shape, a cp size... */
};
#define CGRT_KEY_BODY 0xffffffffu

/* The work of one cache_run(). */
struct cgrt_graph_work {
  uint32_t struct_size;
  /*
   * Enqueues the work on the runtime's stream; `mode` is how it is being run (set ctx->mode to
   * it), `buffers` the addresses to use. Returns 0 or an error (a cgrt code or the host's).
   */
  int (*fn)(void *arg, cgrt_mode mode, const cgrt_buffer *buffers, size_t num_buffers);
  void *arg;
  const cgrt_buffer *buffers; /* the addresses the work uses now */
  size_t num_buffers;
  int warmup;       /* eager runs of this key before its capture (0: capture at once) */
  const char *what; /* names the work in messages: "layer3.attn fwd, 64 tokens" */
};

/*
 * What the core lends a backend. Valid from init() to fini(); keep the pointer in your state.
 * Every function takes the table itself first. Device handles (streams, graphs, executables,
 * events) are those of the configured driver. Functions returning int give 0 or CGRT_E_*; on
 * error they have also set the runtime's last error (a backend may add context with set_error).
 */
struct cgrt_host_api {
  uint32_t struct_size;
  uint32_t minor; /* CGRT_HOST_API_MINOR of the core */

  /* -- log and errors -- */
  void (*log)(const struct cgrt_host_api *h, cgrt_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 3, 4)))
#endif
      ;
  /* Sets the runtime's last error to the formatted sentence and returns `code`. */
  int (*set_error)(const struct cgrt_host_api *h, int code, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 3, 4)))
#endif
      ;
  /* The last error set, "" if none. */
  const char *(*last_error)(const struct cgrt_host_api *h);

  /* -- the host's callbacks: run them with the right ctx and error handling -- */
  int (*run_prepare)(const struct cgrt_host_api *h, struct cgrt_step_frame *f);
  int (*run_body)(const struct cgrt_host_api *h, struct cgrt_step_frame *f);
  int (*run_module)(const struct cgrt_host_api *h, struct cgrt_call *c);

  /* -- device operations of the configured driver -- */
  void *(*stream)(const struct cgrt_host_api *h); /* the runtime's stream */
  int (*stream_sync)(const struct cgrt_host_api *h, void *stream);
  int (*capture_begin)(const struct cgrt_host_api *h, void *stream);
  /* Ends the capture in any case; *graph is NULL when the capture was invalidated. */
  int (*capture_end)(const struct cgrt_host_api *h, void *stream, void **graph);
  int (*capturing)(const struct cgrt_host_api *h, void *stream, int *active);
  int (*graph_instantiate)(const struct cgrt_host_api *h, void *graph, void **exec);
  void (*graph_destroy)(const struct cgrt_host_api *h, void *graph);
  /* Updates exec from graph in place: 0, or CGRT_E_UPDATE if the topology differs. */
  int (*exec_update)(const struct cgrt_host_api *h, void *exec, void *graph);
  int (*exec_upload)(const struct cgrt_host_api *h, void *exec, void *stream);
  int (*exec_launch)(const struct cgrt_host_api *h, void *exec, void *stream);
  void (*exec_destroy)(const struct cgrt_host_api *h, void *exec);
  int (*host_fn)(const struct cgrt_host_api *h, void *stream, void (*fn)(void *), void *arg);
  int (*memcpy_async)(const struct cgrt_host_api *h, void *dst, const void *src, size_t bytes,
                      void *stream);
  int (*event_create)(const struct cgrt_host_api *h, void **event);
  int (*event_record)(const struct cgrt_host_api *h, void *event, void *stream);
  /* 0 when the work before the record has finished, CGRT_E_NOTREADY if not yet. */
  int (*event_query)(const struct cgrt_host_api *h, void *event);
  int (*event_sync)(const struct cgrt_host_api *h, void *event);
  void (*event_destroy)(const struct cgrt_host_api *h, void *event);
  int (*mem_alloc)(const struct cgrt_host_api *h, void **ptr, size_t bytes);
  void (*mem_free)(const struct cgrt_host_api *h, void *ptr);

  /* -- shared mechanism -- */
  /*
   * Captures fn(arg) on `stream` into a new executable: begin, run fn, end, instantiate, upload.
   * `what` names the work in messages ("layer3.attn fwd"). On any failure (fn returned nonzero,
   * the capture was invalidated, instantiation failed) the capture is ended, the driver error
   * cleared, the reason logged and set as last error, a fallback counted, *exec left NULL, and
   * the error returned: the caller then runs the work eagerly. Counts captures, instantiations
   * and their time. The captured work has not run: launch *exec to run it.
   */
  int (*capture)(const struct cgrt_host_api *h, void *stream, int (*fn)(void *arg), void *arg,
                 const char *what, void **exec);
  void (*count)(const struct cgrt_host_api *h, cgrt_counter which, int64_t delta);
  /*
   * The token buckets of [inference], ascending, owned by the core. bucket_for_tokens gives the
   * smallest bucket >= tokens, or CGRT_E_CAPACITY if tokens is above the largest.
   */
  int (*buckets)(const struct cgrt_host_api *h, const int64_t **sizes, size_t *count);
  int (*bucket_for_tokens)(const struct cgrt_host_api *h, int64_t tokens, int64_t *bucket);

  /* -- graph cache: keyed executables, warm-up, LRU bound, rebind policy -- */
  /* A new cache of at most max_graphs executables, rebinding moved buffers per `rebind`. */
  int (*cache_create)(const struct cgrt_host_api *h, int max_graphs, cgrt_rebind rebind,
                      struct cgrt_graph_cache **cache);
  /* Frees every executable and entry of the cache, and the cache. The stream is idle. */
  void (*cache_destroy)(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache);
  /* Frees every executable and forgets warm-up counts; the cache stays usable. */
  void (*cache_clear)(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache);
  /*
   * Runs `work` for `key` on the runtime's stream:
   * - its first work->warmup runs are eager (*mode = CGRT_MODE_WARMUP);
   * - the next is captured (evicting the least recently used executable if the cache is full),
   *   instantiated and launched (*mode = CGRT_MODE_CAPTURE); if the capture fails the work runs
   *   eagerly instead (*mode = CGRT_MODE_EAGER), the fallback counted and logged;
   * - later runs replay the executable (*mode = CGRT_MODE_REPLAY) if work->buffers are where they
   *   were at capture. If one moved, the cache's rebind policy applies: update (capture again
   *   and update the executable in place, re-instantiating if the driver refuses), copy (the
   *   executable works on private copies of the buffers: inputs are copied in and outputs out
   *   around every replay), recapture (another executable for the new address set, within the
   *   bound), error (CGRT_E_REBIND naming the buffer), auto (update; a key whose buffers moved on
   *   3 of its last 4 calls, warm-up calls included, works from then on on private copies of the
   *   buffers that move, copied in and out around each replay, or runs eagerly if copies cannot
   *   serve it; each said once in the log). A stale address is never replayed.
   * work->fn must enqueue the work on the runtime's stream using the buffer addresses it is
   * given (they differ from work->buffers under the copy policy).
   */
  int (*cache_run)(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache,
                   const struct cgrt_graph_key *key, const struct cgrt_graph_work *work,
                   cgrt_mode *mode);
  /* 1 if key has a live executable now, 0 if not. */
  int (*cache_has)(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache,
                   const struct cgrt_graph_key *key);
  /*
   * Runs the step's whole body as one unit of `cache` under `key` (cache_run semantics: warm-up
   * runs, capture, replay, rebind of the step's static buffers desc->buffers). A replay skips the
   * body; prepare is the caller's. Module calls the body makes meanwhile reach call() with
   * c->in_body_graph set. Sets f->ctx->mode and *mode to what happened. Used by every backend that
   * graphs whole bodies (local's block scope, full_iteration).
   */
  int (*run_body_graph)(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache,
                        struct cgrt_step_frame *f, const struct cgrt_graph_key *key, int warmup,
                        cgrt_mode *mode);
  /*
   * Runs one module call as a unit of `cache` under `key` (cache_run semantics, the call's
   * args->buffers being the unit's buffers; under copy the module sees the private ones). Sets
   * c->ctx->mode and *mode to what happened. Used by every backend that graphs module calls.
   */
  int (*run_call_graph)(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache,
                        struct cgrt_call *c, const struct cgrt_graph_key *key, int warmup,
                        cgrt_mode *mode);
  /*
   * The mode of the step in flight judged by its module calls so far: capture if any was
   * captured, else warmup, else replay, else eager. For a backend whose body runs eagerly around
   * graphed calls: set f->ctx->mode to it after the body.
   */
  cgrt_mode (*calls_mode)(const struct cgrt_host_api *h);

  /* -- decorators: a backend that wraps another one -- */
  /*
   * Loads another backend, `impl` resolved as [cuda_graph] impl is (a name on the backend path,
   * or a path; a relative path from the configuration file's folder, or from the working
   * directory when the configuration was given as a string), and checks its table like the
   * core's own loader. *vt is the table; pass *handle
   * to backend_close after the inner backend's fini. CGRT_E_NOTFOUND or CGRT_E_BACKEND with the
   * reason set as last error.
   */
  int (*backend_open)(const struct cgrt_host_api *h, const char *impl,
                      const struct cgrt_backend_v1 **vt, void **handle);
  void (*backend_close)(const struct cgrt_host_api *h, void *handle);

  /* -- context parallelism -- */
  /*
   * The communicator split for cp size `cp` at cgrt_set_world_comm and this rank's index in it.
   * CGRT_E_STATE if the host handed no world communicator, CGRT_E_INVAL if cp is not in
   * [dynamic_cp] cp_sizes.
   */
  int (*comm_for_cp)(const struct cgrt_host_api *h, int cp, void **comm, int *cp_rank);
  /*
   * A ring of `slots` device slots, each holding the actual and padded cumulative sequence
   * lengths of one step: at most max_sequences real sequences of max_tokens tokens in all.
   */
  int (*thd_create)(const struct cgrt_host_api *h, int slots, int64_t max_tokens, int max_sequences,
                    struct cgrt_thd_ring **ring);
  void (*thd_destroy)(const struct cgrt_host_api *h, struct cgrt_thd_ring *ring);
  /*
   * Writes a step's sequence lengths into the next slot of the ring, after waiting until the
   * work that last read that slot has finished (never while capturing): cu_seqlens of the real
   * sequences, then one dummy sequence, zero-length in cu_seqlens and padding the total up to
   * max_tokens in cu_seqlens_padded, then empty sequences up to the slot's capacity. With `slot`
   * < 0 the next slot in turn is used, else that one. CGRT_E_CAPACITY (nothing written) when the
   * step holds more tokens or sequences than a slot, naming both and the options to raise.
   */
  int (*thd_write)(const struct cgrt_host_api *h, struct cgrt_thd_ring *ring,
                   const int32_t *seqlens, int num_sequences, int slot, struct cgrt_thd_slot *out);
  /* Marks the slot as read by the work enqueued so far: it is reused only after that work. */
  int (*thd_release)(const struct cgrt_host_api *h, struct cgrt_thd_ring *ring, int slot);

  /* -- since minor 1 -- */
  /*
   * Adaptive token buckets ([inference] buckets = adaptive; a backend that calls this declares
   * CGRT_CAP_ADAPTIVE_BUCKETS). Records an inference step of `tokens` real tokens in the core's
   * traffic histogram (exponential decay, adapt_halflife steps) and, every adapt_interval steps,
   * computes the num_graphs buckets that minimize the expected padded tokens (the largest always
   * max_tokens). When that saves at least adapt_min_gain of the current padding, the core adopts
   * the new set, logs the old and new sets and the expected gain, counts a bucket change and sets
   * *changed to 1: buckets() and bucket_for_tokens() answer with the new set from then on, and the
   * backend retires the graphs of buckets no longer in it (cache_retire). Call it once per
   * inference step, before choosing the step's bucket. Without adaptive buckets it records
   * nothing and sets *changed to 0.
   */
  int (*buckets_observe)(const struct cgrt_host_api *h, int64_t tokens, int *changed);
  /*
   * Forgets every entry of `cache` whose key `match(arg, key)` accepts (nonzero): executables
   * destroyed (their graph memory returned to the driver), private buffers freed, warm-up counts
   * dropped. *dropped (may be NULL) is the number of executables destroyed. Not inside a capture.
   */
  int (*cache_retire)(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache,
                      int (*match)(void *arg, const struct cgrt_graph_key *key), void *arg,
                      size_t *dropped);

  /* -- since minor 8: steps timed on the device, buckets chosen by time (issue 43) -- */
  /*
   * An event whose records carry a device timestamp (event_create makes cheaper ones that do
   * not): record two on the stream around work, then read the device time between them with
   * event_elapsed. Destroy it with event_destroy.
   */
  int (*event_create_timed)(const struct cgrt_host_api *h, void **event);
  /*
   * The device time between the last records of two timed events, in microseconds. Never waits:
   * CGRT_E_NOTREADY (not an error: no last error set) while either record has not run yet, so a
   * backend reads it at a later step. CGRT_E_INVAL for an event never recorded.
   */
  int (*event_elapsed)(const struct cgrt_host_api *h, void *start, void *end, double *us);
  /*
   * What the live graphs of this runtime take now (cgrt_stats.graph_bytes plus the idle graph
   * pool, what [cuda_graph] memory_budget bounds), and the budget in bytes (0: none).
   */
  int (*graph_memory)(const struct cgrt_host_api *h, uint64_t *bytes, uint64_t *budget);
  /*
   * Tells the core what a step cost on the device (us, median of the samples the backend took):
   * a step of `tokens` real tokens replayed at `bucket` tokens, or run eagerly at its own size
   * (`bucket` 0). With [inference] buckets = adaptive and adapt_by = time, the planner chooses
   * the set that minimizes the expected step time over the traffic from these figures (a model
   * through them: linear between the sizes measured), once it has two sizes of each kind;
   * otherwise they are kept and shown, and plans minimize padded tokens.
   */
  int (*buckets_cost)(const struct cgrt_host_api *h, int64_t tokens, int64_t bucket, double us);

  /* -- since minor 9: a cp group's agreement (dynamic_cp's by_time, issue 42) -- */
  /*
   * Replaces values[0..n) (host memory, 1 <= n <= 16) by their maximum over the ranks of `comm`,
   * a communicator comm_for_cp gave: on the cuda driver an ncclAllReduce on the runtime's stream,
   * then a wait for that stream (the host driver's groups are of one rank: values stay as they
   * are). Collective: every rank of the group calls it at the same point of the same sequence of
   * steps, with the same n, or the group hangs. It waits for the device: call it rarely (by_time
   * calls it once per round). CGRT_E_CAPTURE while the runtime's stream captures, CGRT_E_INVAL
   * for a communicator comm_for_cp did not give, CGRT_E_UNSUPPORTED where the driver has no
   * communicators (built without NCCL).
   */
  int (*comm_max)(const struct cgrt_host_api *h, void *comm, double *values, int n);

  /* -- since minor 10: a step's host time (by_time, issue 43) -- */
  /*
   * The host's monotonic clock, in nanoseconds: the one the core's statistics use
   * (cgrt_step_report.host_ns), or, on the host driver, its simulated host clock (a test's cost
   * model), which compares with its simulated device times. Cheap: read it around a step to time
   * what the host spent issuing it. A backend on an older core reads CLOCK_MONOTONIC itself.
   */
  uint64_t (*now_ns)(const struct cgrt_host_api *h);
};

/* True if the host table `h` has field `f` (check before using a field newer than yours). */
#define CGRT_HOST_HAS(h, f)                                                                        \
  ((h)->struct_size >= offsetof(struct cgrt_host_api, f) + sizeof((h)->f) && (h)->f != NULL)

/*
 * True if the configuration view `v` has field `f`: the core that made it is new enough (a field
 * `since minor N` needs a core of minor N). Before reading a field newer than minor 0, as
 * dynamic_cp reads graph_scope. For a function field, also test it against NULL.
 */
#define CGRT_VIEW_HAS(v, f)                                                                        \
  ((v)->struct_size >= offsetof(struct cgrt_config_view, f) + sizeof((v)->f))

/*
 * The backend table, ABI major 1. Export it as `const struct cgrt_backend_v1 cgrt_backend_v1`.
 */
struct cgrt_backend_v1 {
  /* -- fixed forever -- */
  uint32_t abi_major;   /* CGRT_BACKEND_ABI_MAJOR (1) */
  uint32_t struct_size; /* sizeof(struct cgrt_backend_v1) as the backend was built */
  const char *name;     /* short name, e.g. "local"; also the name of its config section,
                           whatever its file is called */
  uint64_t caps;        /* CGRT_CAP_* bits */

  /* -- mandatory -- */
  /*
   * Creates the backend's state for one runtime. `host` and `cfg` stay valid until fini().
   * On failure: return a negative code, leave *state NULL, write the reason (a sentence naming
   * the option to change) into err (errlen bytes, always terminated). fini() is not called then.
   */
  int (*init)(const struct cgrt_host_api *host, const struct cgrt_config_view *cfg, void **state,
              char *err, size_t errlen);
  /* Frees the state and everything the backend still holds. The stream is idle. */
  void (*fini)(void *state);
  /*
   * Runs one step: set f->ctx->mode and padded_tokens, run prepare (host->run_prepare), then the
   * body eagerly (host->run_body), captured, or replace it by a replay. Must never return with
   * the stream capturing.
   */
  int (*step)(void *state, struct cgrt_step_frame *f);
  /* Runs one module call: eagerly (host->run_module), captured, or as a replay. */
  int (*call)(void *state, struct cgrt_call *c);

  /* -- optional: check with CGRT_BACKEND_HAS() -- */
  /* Frees every graph and executable; the stream is idle. Later steps capture again. */
  int (*release)(void *state);
  /* Adds the backend's own figures to *out (fields the core cannot count). */
  int (*stats)(void *state, cgrt_stats *out);
  /* Writes the backend's plan, one line per emit() call, for `cgrt check --dry-run`. */
  int (*describe)(void *state, void (*emit)(void *user, const char *line), void *user);

  /* -- since minor 4: the backend's own options -- */
  /*
   * The keys of its section [name], num_options of them (struct cgrt_option). Declaring them
   * closes the section: the core refuses any other key there when it reads the configuration,
   * before init(). NULL: the section is open (a key init() never reads with get() is refused
   * after init(), as before minor 4).
   */
  const struct cgrt_option *options;
  size_t num_options;

  /* -- since minor 5: the backend's rules between keys -- */
  /*
   * Checks the rules that depend on this backend (which inference scopes it has, whether it
   * graphs whole steps...) on a configuration read cleanly, before init() and under `cgrt check`.
   * Calls report() once per broken rule: `line` is where the key at fault is given (0: none; see
   * cfg->describe()), `message` one sentence naming the keys and what to write instead (the core
   * prefixes "file:line: "). Returns 0, or CGRT_E_CONFIG if it reported anything. Runs only for
   * the configured backend (and, since minor 6, the backend a decorator wraps: see wraps); the
   * table is loaded but never initialized for it. Since minor 6 it runs only when every value is
   * inside its declared range (the core's keys and the options), and the core's rules by
   * capability (CGRT_CAP_*: graph_safe_rng with graphs, recompute = full only with whole-step
   * graphs, nan_check = off and no modules with them, adaptive buckets only for a backend that
   * follows them) apply whether or not a backend has a check(): state only your own rules here.
   */
  int (*check)(const struct cgrt_config_view *cfg,
               void (*report)(void *user, int line, const char *message), void *user);

  /* -- since minor 6: capabilities that depend on the options, and decorators -- */
  /*
   * The caps this backend has under `cfg`, when its options change them (dynamic_cp graphs whole
   * steps with graph_scope = step: caps | CGRT_CAP_WHOLE_STEP). The core's rules by capability
   * read these instead of `caps`; the runtime still reads `caps`. When they differ from `caps`,
   * write into `why` (whylen bytes, terminated) the keys that make them differ, as cfg->describe()
   * names them ("[dynamic_cp] graph_scope = step (line 4)"): messages say it. Runs as check()
   * does: on a configuration read cleanly, every value in its range, the table never initialized.
   * NULL: `caps` under every configuration.
   */
  uint64_t (*config_caps)(const struct cgrt_config_view *cfg, char *why, size_t whylen);
  /*
   * A decorator (a backend that loads another one with host->backend_open and forwards to it,
   * as plugins/trace does): the key of its own section that names the backend it wraps, a name
   * or a path as [cuda_graph] impl is written ("inner"). Declare that key among the options. The
   * core then loads the wrapped backend's table too when it reads the configuration: its section
   * (its table's name) is read with its declared options, its check() runs, and the core's rules
   * by capability judge it, not the decorator. The key is required. NULL: not a decorator.
   */
  const char *wraps;

  /* -- since minor 7: modules as they are registered, and the backend's own figures -- */
  /*
   * Called once per module, in registration order (ids 0, 1, ...), when the host registers it
   * (cgrt_module_register, after init()): a backend sizes its per-module state here instead of at
   * a module's first call. `info` lives as long as the runtime. A nonzero result refuses the
   * registration (the host gets it, with host->set_error's sentence); the module is not added.
   */
  int (*module_added)(void *state, const struct cgrt_module_info *info);
  /*
   * The backend's own named figures (counts of its own decisions: steps it refused, buckets it
   * retired...), reported on demand: call emit(user, name, value) once per figure, names in
   * snake_case, stable between calls. Shown by cgrt_backend_figures() (hosts, Python),
   * `cgrt check --dry-run` after its steps and `cgrt bench`. Returns 0 or an error.
   */
  int (*figures)(void *state, void (*emit)(void *user, const char *name, uint64_t value),
                 void *user);
};

/* The smallest struct_size the core accepts: the fixed fields and the mandatory functions. */
#define CGRT_BACKEND_V1_MIN_SIZE (offsetof(struct cgrt_backend_v1, call) + sizeof(void (*)(void)))

/* True if backend table `b` has field `f` and, for a function, it is set. */
#define CGRT_BACKEND_HAS(b, f)                                                                     \
  ((b)->struct_size >= offsetof(struct cgrt_backend_v1, f) + sizeof((b)->f) && (b)->f != NULL)

/* Exports the table with default visibility from a library built with hidden visibility. */
#if defined(__GNUC__)
#define CGRT_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define CGRT_BACKEND_EXPORT
#endif

#ifdef __cplusplus
}
#endif

#endif /* CGRT_BACKEND_H */
