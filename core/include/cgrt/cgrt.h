/*
 * cgrt.h - the host API of cgrt, a CUDA graph runtime.
 *
 * A host application (a training or inference engine) opens a runtime from an INI file, registers
 * its modules once, and hands cgrt one step at a time. The backend named by the configuration
 * decides how the step reaches the GPU: eagerly, as per-module graphs, as one graph per step...
 * The host never changes when the strategy does.
 *
 * This header is C99, includes no CUDA header and is stable within a major version. Streams and
 * communicators appear as `void *` (cudaStream_t, ncclComm_t on the cuda driver). The types it
 * shares with the backend ABI (status codes, phases, modes, the ctx, args, step desc and report,
 * the stats) are in types.h, which it includes; this header adds the functions of libcgrt.
 *
 * Conventions:
 * - Every function that can fail returns 0 or a negative CGRT_E_* code; results come back through
 *   out-parameters. cgrt_last_error() gives a sentence naming what is at fault.
 * - Structs the host fills or receives start with `struct_size`: set it to sizeof(the struct) as
 *   your header knows it. cgrt reads and writes only the fields that size covers, so a host built
 *   against an older header keeps working.
 * - Strings passed in live only during the call; cgrt copies what it keeps. Strings returned live
 *   as long as the object they came from, unless said otherwise.
 * - Threads: one thread at a time drives a runtime (calls any of its functions); it may change
 *   hands between calls (opened on one thread, closed on another). A call of a second thread
 *   made while one of the driving thread's calls runs returns CGRT_E_STATE having touched
 *   nothing, and cgrt_last_error(rt) on that second thread says "the runtime is being driven by
 *   another thread (...): one thread at a time drives a runtime; open one per thread"; the
 *   driving thread is unaffected. Separate runtimes are independent. cgrt_stream,
 *   cgrt_backend_name and cgrt_version read only what is fixed at open, from any thread;
 *   cgrt_device_synchronize may be called from any thread (cuda driver).
 * - Callbacks (prepare, body, module callbacks, capture hooks, the log sink, graph-list visitors,
 *   host functions, the tools' graph watcher) run on the driving thread, inside the cgrt call that
 *   runs them. What they may call back: inside a step, what each function says (module calls
 *   from the body, no nested step...); a graph-list visitor may read the runtime but not change
 *   its graphs; the log sink may read it but not change it; host functions must not call cgrt
 *   (the host driver refuses every call from one); cgrt_close is refused from every callback. A
 *   refused call returns CGRT_E_STATE with a sentence and changes nothing.
 * - Versions: whatever was added after 0.1 (struct fields, enum values, functions) is labelled
 *   `since 0.N`, the minor (CGRT_VERSION_MINOR) of the first release that has it; a label never
 *   names a minor above this header's own. A struct's new fields are read only as far as the
 *   caller's struct_size reaches.
 */
#ifndef CGRT_CGRT_H
#define CGRT_CGRT_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CGRT_API __attribute__((visibility("default")))
#else
#define CGRT_API
#endif

#define CGRT_VERSION_MAJOR  0
#define CGRT_VERSION_MINOR  4
#define CGRT_VERSION_PATCH  0
#define CGRT_VERSION_STRING "0.4.0"

/* A registered module. Owned by its runtime; valid until cgrt_close(). Opaque. */
typedef struct cgrt_module cgrt_module;

/*
 * A module's forward or backward work. Enqueue everything on ctx->stream; never synchronize, never
 * read device memory on the host, never allocate with cudaMalloc: the call may be captured.
 * `user` is the module's user pointer. Return 0, or nonzero to fail the call.
 */
typedef int (*cgrt_module_fn)(const cgrt_ctx *ctx, const cgrt_args *args, void *user);

/* Describes a module to cgrt_module_register(). */
typedef struct cgrt_module_desc {
  size_t struct_size;
  const char *name;        /* unique within the runtime, copied, e.g. "layer3.attn" */
  cgrt_kind kind;          /* decides whether scoped backends graph it */
  int layer;               /* layer index, for plans and messages; -1 if none */
  cgrt_module_fn forward;  /* required */
  cgrt_module_fn backward; /* optional; NULL if the module has no backward */
  void *user;              /* passed to the callbacks; cgrt never touches it */
  /*
   * -- since 0.4 (a desc whose struct_size ends before it reads as 0) --
   * 1: the module's calls issue no collectives on ctx->comm, the step's context-parallel
   * communicator (a Megatron MLP under context parallelism, whose only collectives are on other
   * groups). cgrt then passes them ctx->comm NULL, and with NCCL's graph mixing off it runs them
   * outside a graph without first waiting for the graphs it launched (cgrt_stats.comm_waits), and
   * launching their graphs does not make later eager work on ctx->comm wait. 0: they may issue
   * collectives on ctx->comm.
   */
  int no_cp_comm;
  /*
   * -- since 0.4 (reads as 0 in an older desc) --
   * 1: the host keeps the buffers this module reads in place itself (cgrt.torch copies moved
   * inputs into static tensors before the call, as torch's make_graphed_callables does), and the
   * module's callbacks address its own buffers rather than args->buffers. cgrt never hands it
   * private copies: under rebind = copy or auto a moved buffer is re-recorded (as update), and
   * under auto a key whose buffers still move on most calls runs eagerly (said once).
   */
  int stages_inputs;
} cgrt_module_desc;

/* How cgrt_stats_format() writes. */
typedef enum cgrt_stats_style {
  CGRT_STATS_TEXT = 0, /* one "name value" line per field ("steps_by_mode: eager 3 ...") */
  CGRT_STATS_JSON = 1  /* one JSON object, every field by its name */
} cgrt_stats_style;

/*
 * Writes every field of `s` (as far as s->struct_size covers) by its cgrt.h name into buf, NUL
 * terminated and cut to len, as snprintf does; returns the length the whole text needs (without
 * the NUL): call with len 0 to size the buffer. For hosts, tools and the Python package to print
 * the same figures the same way. Needs no runtime. (since 0.4) Errors: CGRT_E_INVAL.
 */
CGRT_API int cgrt_stats_format(const cgrt_stats *s, cgrt_stats_style style, char *buf, size_t len);

/*
 * Receives cgrt's log lines (no trailing newline). Called on the thread that drives the runtime,
 * from the middle of cgrt's own work, so it may read the runtime (cgrt_stats_get,
 * cgrt_config_get, cgrt_graph_list, cgrt_last_error...) but not change it: between steps,
 * cgrt_step, cgrt_module_register, cgrt_synchronize, cgrt_release_graphs, cgrt_set_world_comm,
 * cgrt_set_capture_hooks, cgrt_findings_clear and cgrt_close are refused (inside a step, what a
 * step refuses). It is never re-entered: cgrt_log_message from it is refused, and lines that its
 * own cgrt calls would log are dropped.
 */
typedef void (*cgrt_log_fn)(void *user, cgrt_log_level level, const char *msg);

/* Options for cgrt_open_ex(). */
typedef struct cgrt_open_options {
  size_t struct_size;
  const char *path;     /* INI file to read; NULL: use `ini`, then the default */
  const char *ini;      /* INI text, used when path is NULL; NULL: the default configuration */
  const char *ini_name; /* name of `ini` in messages; NULL: "<string>" */
  cgrt_log_fn log;      /* log sink from the first message on; NULL: stderr */
  void *log_user;
  /* -- since 0.4 -- */
  /*
   * The host's own stream for cgrt to run on (a cudaStream_t): cgrt enqueues, captures and
   * replays there, and cgrt_stream() returns it, so a host whose code is written for one stream
   * (a global it launches on) hands it over instead of switching to cgrt's in every callback.
   * Blocking or not, as the host made it; the host keeps it alive until cgrt_close(), which waits
   * for it but never destroys it. NULL: cgrt creates its own non-blocking stream. Refused
   * (CGRT_E_INVAL) with the host driver, which has no CUDA streams, and when the stream is
   * capturing already.
   */
  void *stream;
} cgrt_open_options;

/* The library's version string, e.g. "0.4.0". Static. */
CGRT_API const char *cgrt_version(void);

/*
 * Opens a runtime from an INI file. `path` NULL opens the default configuration: the file named by
 * CGRT_CONFIG if set (ignored in setuid processes), else the embedded default (impl = none).
 * Reads and validates the configuration, loads the backend, loads the device driver ([runtime]
 * driver: `host` is built in, `cuda` is libcgrt-driver-cuda.so, found as backends are), opens it
 * and creates the stream cgrt works on. On failure *out is NULL and cgrt_last_error(NULL) says
 * why.
 * Errors: CGRT_E_IO, CGRT_E_CONFIG, CGRT_E_NOTFOUND, CGRT_E_BACKEND, CGRT_E_NODEV, CGRT_E_DEVICE,
 * CGRT_E_NOMEM, CGRT_E_INVAL.
 */
CGRT_API int cgrt_open(cgrt_runtime **out, const char *path);

/* As cgrt_open(), from INI text held in memory. */
CGRT_API int cgrt_open_string(cgrt_runtime **out, const char *ini);

/* As cgrt_open(), with every option. */
CGRT_API int cgrt_open_ex(cgrt_runtime **out, const cgrt_open_options *opts);

/*
 * Closes a runtime: waits for its stream, releases every graph, finalizes the backend, closes the
 * driver and frees the modules. Release graphs that hold NCCL references before destroying
 * communicators (cgrt_release_graphs()). NULL is accepted (returns 0).
 * Returns:
 * - 0: the runtime is freed; rt must not be used again. A problem met while tearing down (a
 *   stream that could not be waited for) does not stop it: it is logged at level error, never
 *   returned.
 * - CGRT_E_STATE: refused up front, nothing freed, rt stays usable and cgrt_last_error(rt) says
 *   why; call it again once that state has passed. Refused: from a second thread while another
 *   drives the runtime; from every callback cgrt runs (inside a step: prepare, body, modules,
 *   capture hooks, the graph watcher, the log sink; a graph-list visitor; a host function run by
 *   cgrt_synchronize, cgrt_release_graphs or cgrt_close; the log sink between steps); and while
 *   the runtime's stream is capturing (a capture the host began on the stream it gave at open).
 * No other result.
 */
CGRT_API int cgrt_close(cgrt_runtime *rt);

/*
 * The last error of `rt` as a sentence naming the module, option, file:line or buffer at fault.
 * The rule (errno-like): it is the sentence of the last public call on rt that failed (returned
 * nonzero); a call that returns 0 leaves it as it was, whatever that call met and handled on its
 * way (a step above the largest bucket run eagerly, a capture that fell back: those are logged
 * and counted, not errors). Read it right after the failure. A failure nobody explained (a
 * backend callback that returned an error without a sentence) gets one naming the backend, the
 * callback and the code. With rt NULL: the last failed open on the calling thread. On a thread
 * whose last call of rt was refused before it took the runtime (another thread drives rt, or an
 * argument was NULL), that refusal, until this thread's next call of rt goes through. Never NULL;
 * "" if no call failed yet. Valid until the next failing call on the same runtime (or thread).
 */
CGRT_API const char *cgrt_last_error(const cgrt_runtime *rt);

/* A short static description of a status code: cgrt_status_text(code) (types.h). */
CGRT_API const char *cgrt_strerror(int code);

/* Replaces the log sink (NULL restores stderr). */
CGRT_API int cgrt_set_log(cgrt_runtime *rt, cgrt_log_fn fn, void *user);

/*
 * Writes `msg` to the runtime's log at `level` if that level is enabled ([runtime] log,
 * CGRT_LOG), through the sink cgrt's own lines take: for an adapter that adds lines of its own
 * (cgrt.torch). Since 0.4. Errors: CGRT_E_INVAL (rt or msg NULL).
 */
CGRT_API int cgrt_log_message(cgrt_runtime *rt, cgrt_log_level level, const char *msg);

/* The stream cgrt runs on (cudaStream_t on the cuda driver): the host's if it gave one
   (cgrt_open_options.stream), else cgrt's own, owned by the runtime. */
CGRT_API void *cgrt_stream(cgrt_runtime *rt);

/* The loaded backend's name, e.g. "local". Valid while rt is open. */
CGRT_API const char *cgrt_backend_name(const cgrt_runtime *rt);

/*
 * The value in force of configuration key `key` of `section` (since 0.4), as `cgrt
 * check` prints it ("auto", "512", "attn mlp"), into buf (len bytes, always terminated): a host
 * that adapts to the configuration reads it here (cgrt.torch reads [cuda_graph] rebind). Keys
 * of a backend's own section give their text as written. Errors: CGRT_E_INVAL (an argument
 * NULL, or the value longer than len - 1: it is cut), CGRT_E_NOTFOUND (no such key).
 */
CGRT_API int cgrt_config_get(cgrt_runtime *rt, const char *section, const char *key, char *buf,
                             size_t len);

/*
 * Registers a module. Register all modules before the first step that calls them; a name is
 * unique per runtime. The handle stays valid until cgrt_close().
 * Errors: CGRT_E_INVAL (NULL forward, empty or duplicate name, bad kind), CGRT_E_NOMEM,
 * CGRT_E_STATE (inside a step, from the log sink or a host function, another thread).
 */
CGRT_API int cgrt_module_register(cgrt_runtime *rt, const cgrt_module_desc *desc,
                                  cgrt_module **out);

/*
 * Runs one step: prepare (always eager), then the body, eagerly or captured or replaced by a
 * replay as the backend decides. `report` may be NULL. On error the stream is never left
 * capturing; a failed capture is retried eagerly within the step and counted as a fallback.
 * Every phase runs under every backend: one the backend has no form for runs eagerly
 * (cgrt_backend_info_get says which). Errors: CGRT_E_INVAL (a bad desc; a cp size dynamic_cp
 * has no bank for), CGRT_E_STATE (a step inside a step, a call from a graph-list visitor, the log
 * sink or a host function, or while another thread drives the runtime), CGRT_E_CALLBACK,
 * CGRT_E_CAPACITY (dynamic_cp, over_capacity = error), CGRT_E_REBIND, CGRT_E_DEVICE.
 * CGRT_E_UNSUPPORTED is not returned for a phase any more.
 */
CGRT_API int cgrt_step(cgrt_runtime *rt, const cgrt_step_desc *desc, cgrt_step_report *report);

/* What the configured backend does with the steps of one phase (cgrt_backend_info.phases). */
typedef enum cgrt_phase_run {
  CGRT_RUN_EAGER = 0,     /* the backend runs them eagerly, every step (impl = none) */
  CGRT_RUN_GRAPHS = 1,    /* the backend captures and replays graphs for them, its way */
  CGRT_RUN_CORE_EAGER = 2 /* the backend has no form for the phase: cgrt runs them eagerly
                             itself, as under none; said once at info, counted in
                             cgrt_stats.eager_phase_steps */
} cgrt_phase_run;

/* What a backend can do (cgrt_backend_info.caps), as its table declares it. */
#define CGRT_BACKEND_TRAINING   (1u << 0) /* has a form of its own for train and eval steps */
#define CGRT_BACKEND_INFERENCE  (1u << 1) /* has a form of its own for infer steps */
#define CGRT_BACKEND_BACKWARD   (1u << 2) /* handles backward module calls */
#define CGRT_BACKEND_GRAPHS     (1u << 3) /* builds graphs (otherwise eager only) */
#define CGRT_BACKEND_MULTI_GPU  (1u << 4) /* designed for several ranks */
#define CGRT_BACKEND_COMM       (1u << 5) /* needs the host's world communicator */
#define CGRT_BACKEND_ADAPTIVE   (1u << 6) /* follows [inference] buckets = adaptive */
#define CGRT_BACKEND_BUCKETS    (1u << 7) /* pads infer steps up to the [inference] token buckets */
#define CGRT_BACKEND_WHOLE_STEP (1u << 8) /* graphs the whole step (no host read inside it) */

/* The configured backend, for a host that wants to know before it runs (since 0.4). */
typedef struct cgrt_backend_info {
  size_t struct_size;
  const char *name; /* its table's name; lives as long as the runtime */
  const char *path; /* the shared object it was loaded from; lives as long as the runtime */
  uint64_t caps;    /* CGRT_BACKEND_* bits; unknown bits may appear: ignore them */
  cgrt_phase_run phases[CGRT_PHASE_COUNT]; /* per cgrt_phase: what its steps get */
} cgrt_backend_info;

/*
 * Fills `info` (set info->struct_size first; fields past it are left alone). Every phase runs
 * under every backend: a phase the backend has no form for runs eagerly (CGRT_RUN_CORE_EAGER), so
 * a host that swaps `impl` never meets CGRT_E_UNSUPPORTED for a phase. Errors: CGRT_E_INVAL.
 */
CGRT_API int cgrt_backend_info_get(cgrt_runtime *rt, cgrt_backend_info *info);

/* Receives one of the backend's own figures (cgrt_backend_figures). `name` lives during the call.
 */
typedef void (*cgrt_figure_fn)(void *user, const char *name, uint64_t value);

/*
 * The configured backend's own named figures (counts of its own decisions, which cgrt_stats does
 * not know), one fn(user, name, value) call each, in the backend's order; none for a backend that
 * reports none. (since 0.4, host API minor 7) Errors: CGRT_E_INVAL, CGRT_E_STATE (see the thread
 * rule), or the backend's.
 */
CGRT_API int cgrt_backend_figures(cgrt_runtime *rt, cgrt_figure_fn fn, void *user);

/*
 * Runs a module's forward (or backward) call from inside the step body, with the ctx the body was
 * given. The backend runs it eagerly, captures it or replays a graph.
 * Errors: CGRT_E_INVAL, CGRT_E_STATE (outside a body, or backward of a module without one),
 * CGRT_E_CALLBACK, CGRT_E_REBIND, CGRT_E_DEVICE.
 */
CGRT_API int cgrt_forward(cgrt_runtime *rt, cgrt_module *m, const cgrt_ctx *ctx,
                          const cgrt_args *args);
CGRT_API int cgrt_backward(cgrt_runtime *rt, cgrt_module *m, const cgrt_ctx *ctx,
                           const cgrt_args *args);

/*
 * Enqueues a host function on ctx->stream (cudaLaunchHostFunc on the cuda driver): it runs after
 * the work before it and is captured like a kernel. `fn` must not call cgrt or CUDA. On the host
 * driver fn runs on the driving thread when the stream is synchronized (cgrt_synchronize,
 * cgrt_release_graphs, cgrt_close), and every cgrt call it makes is refused (CGRT_E_STATE); on the
 * cuda driver it runs on a thread of CUDA's, whose calls the thread rule refuses while the driving
 * thread is inside cgrt and cgrt cannot tell apart otherwise.
 * `arg` is passed as a pointer: fn reads what it points to when it runs, not when it was
 * enqueued, and a graph that captured the call passes the same pointer at every replay. So `arg`
 * must stay valid until the work ran (cgrt_synchronize) and, if the call was captured, as long as
 * the graph lives (until cgrt_release_graphs or cgrt_close). To pass values, as a kernel's
 * parameters are passed, use cgrt_enqueue_host_copy.
 */
CGRT_API int cgrt_enqueue_host(const cgrt_ctx *ctx, void (*fn)(void *arg), void *arg);

/*
 * As cgrt_enqueue_host, but by value, as CUDA copies a kernel's parameters at launch: the `size`
 * bytes at `arg` are copied now, and fn receives the copy. A captured call keeps the values of its
 * capture for every replay; the host may reuse or free `arg` as soon as this returns. cgrt frees
 * the copy after fn ran (an eager call) or, for a captured call, at cgrt_release_graphs or
 * cgrt_close (an evicted graph's copies wait for those too). size 0 passes NULL. (since 0.4)
 * Errors: CGRT_E_INVAL, CGRT_E_NOMEM, CGRT_E_DEVICE, CGRT_E_CAPTURE.
 */
CGRT_API int cgrt_enqueue_host_copy(const cgrt_ctx *ctx, void (*fn)(void *arg), const void *arg,
                                    size_t size);

/*
 * Waits until all work enqueued on the runtime's stream has run (cudaStreamSynchronize on the cuda
 * driver). Not allowed inside a step, from the log sink or from a host function.
 */
CGRT_API int cgrt_synchronize(cgrt_runtime *rt);

/*
 * Waits until all work on the runtime's device has run (cudaDeviceSynchronize), but never during a
 * capture of any runtime of the process on that device: it waits for the captures underway there
 * to end and holds new ones back until it returns (captures on other devices go on). For a host
 * thread that must synchronize the whole device beside runtimes that capture (a loader, a monitor).
 * A raw cudaDeviceSynchronize there is refused by CUDA and invalidates the capture underway (cgrt
 * then runs that work eagerly and captures it again), and one that races a capture's begin or end
 * has crashed the CUDA driver (README, "Other threads and captures"). Any thread may call it while
 * another drives rt (cuda driver; the thread's current device is kept); rt must stay open until it
 * returns. A failure's sentence is this thread's cgrt_last_error(rt). Refused (CGRT_E_CAPTURE) on a
 * thread that is capturing: from a module or body inside a capture of another runtime (inside a
 * step of rt itself it is refused with CGRT_E_STATE, as cgrt_synchronize is). On the host driver it
 * is a call that drives rt, like cgrt_synchronize. A capture the host itself runs outside cgrt is
 * not held back: CUDA refuses the synchronize and invalidates it (CGRT_E_CAPTURE). Captures and
 * synchronizes are served in the order they came: a capture's work must not wait for another
 * thread's capture to begin while a synchronize may be queued between them. [runtime] sync_guard =
 * on passes the process's raw device synchronizes through the same wait. (since 0.4) Errors:
 * CGRT_E_INVAL, CGRT_E_CAPTURE, CGRT_E_DEVICE, CGRT_E_STATE.
 */
CGRT_API int cgrt_device_synchronize(cgrt_runtime *rt);

/*
 * Hands cgrt the host's world NCCL communicator (ncclComm_t) for context parallelism. Collective:
 * every rank calls it once, after cgrt_open and before its first step, at the same point of its
 * sequence of NCCL calls. For each [dynamic_cp] cp_sizes entry cgrt splits one communicator
 * (ncclCommSplit: ranks in consecutive groups of that size, rank order kept) and keeps them until
 * cgrt_close, which frees every graph before destroying them. The world communicator stays the
 * host's. A step names its cp size (cgrt_step_desc.cp_size) and its body finds that group's
 * communicator in ctx->comm and its index in ctx->cp_rank. The host driver, which has no NCCL,
 * accepts only NULL and stands in placeholders (rank 0 of a world as large as the largest cp
 * size) so that policies can be tested without GPUs.
 * Errors: CGRT_E_INVAL (a cp size that does not divide the world size, a second call, NULL on the
 * cuda driver or a communicator on the host driver), CGRT_E_UNSUPPORTED (the cuda driver was
 * built without NCCL), CGRT_E_DEVICE (an NCCL call failed).
 */
CGRT_API int cgrt_set_world_comm(cgrt_runtime *rt, void *world_comm);

/*
 * Waits for the stream, then frees every graph and executable the backend holds and gives the
 * graph memory no graph uses any more back to the device (cudaDeviceGraphMemTrim); later steps
 * warm up and capture again. Call it before destroying NCCL communicators graphs refer to. Not
 * inside a step, nor from a graph-list visitor, the log sink or a host function (CGRT_E_STATE,
 * nothing freed). If the stream cannot be waited for, the graphs are freed all the same and the
 * error returned.
 */
CGRT_API int cgrt_release_graphs(cgrt_runtime *rt);

/* What cgrt_release_graphs_ex() freed. */
typedef struct cgrt_release_report {
  size_t struct_size;
  uint64_t graphs;               /* executables freed */
  uint64_t bytes;                /* their bytes (cgrt_graph_info.bytes summed) */
  uint64_t nodes;                /* their nodes */
  uint64_t pool_reserved_before; /* the driver's reserved graph memory before the release */
  uint64_t pool_reserved_after;  /* and after it, once trimmed */
} cgrt_release_report;

/*
 * cgrt_release_graphs(), telling what was freed in *report (may be NULL; set its struct_size).
 * The pool figures are the driver's, device-wide.
 * Errors: CGRT_E_INVAL, CGRT_E_STATE (as cgrt_release_graphs), CGRT_E_DEVICE.
 */
CGRT_API int cgrt_release_graphs_ex(cgrt_runtime *rt, cgrt_release_report *report);

/*
 * Frees the graphs of module m's calls with one key (cgrt_args.key): every direction, phase,
 * microbatch and token size of it, in every graph cache of the backend, after waiting for the
 * stream (a replay of one may still run); later calls with that key warm up and capture again.
 * For a host that knows it is done with a key, whose graphs would otherwise stay until
 * max_graphs evicts them (the keys of a KV cache it dropped, or of tensors it replaced under a
 * graph). *released (may be NULL): the executables freed. Not inside a step, nor from a callback
 * (CGRT_E_STATE, nothing freed). If the stream cannot be waited for, the graphs are freed all the
 * same and the error returned. (since 0.4) Errors: CGRT_E_INVAL (m NULL or another runtime's),
 * CGRT_E_STATE, CGRT_E_DEVICE.
 */
CGRT_API int cgrt_module_release_key(cgrt_runtime *rt, cgrt_module *m, uint64_t key,
                                     size_t *released);

/* One live graph, as cgrt_graph_list() shows it. Owned by cgrt, valid during the callback. */
typedef struct cgrt_graph_info {
  size_t struct_size; /* how much of this struct the library fills: check before reading
                         fields newer than your header's */
  const char *name;   /* "layer3.attn fwd, infer, key 64", for tables */
  const char *module; /* the module's name, or NULL for a graph of a whole step body */
  cgrt_direction dir; /* of a module call */
  int microbatch;     /* microbatch slot */
  cgrt_phase phase;
  uint64_t shape;           /* the call's key (args->key) or the step's token bucket */
  uint64_t extra;           /* backend-defined: a bucket, a cp size... */
  uint64_t bytes;           /* pool_bytes + exec_bytes: the device memory charged to it */
  uint64_t pool_bytes;      /* growth of the driver's reserved graph memory (the pool) when it
                               was captured, instantiated and uploaded, plus pool memory it
                               shares with graphs freed since */
  uint64_t pool_used_bytes; /* growth of the pool's used figure then */
  uint64_t exec_bytes;      /* the executable's own device memory: the drop of free device
                               memory over instantiate and upload beyond the pool's growth */
  uint64_t alloc_bytes;     /* its stream-ordered allocations summed: its need if it shared no
                               pool memory (graphs launched on one stream share it) */
  uint64_t nodes;           /* nodes of the graph */
  uint64_t capture_ns;      /* host time of its capture */
  uint64_t instantiate_ns;  /* host time of its instantiation and upload */
  uint64_t last_use;        /* index of the last step that captured or replayed it */
  uint64_t replays;         /* replays since its capture */
} cgrt_graph_info;

/* Receives one graph; return 0 to go on, nonzero to stop the listing (returned by it). */
typedef int (*cgrt_graph_fn)(void *user, const cgrt_graph_info *graph);

/*
 * Calls fn once per live executable of the runtime (every cache of its backend), in no set
 * order. The figures are measured when the graph is built (see cgrt_graph_info); their sums are
 * in cgrt_stats (graph_bytes...). Not inside a step. Returns 0, fn's first nonzero value, or
 * CGRT_E_INVAL / CGRT_E_STATE.
 *
 * fn may read the runtime (cgrt_stats_get, cgrt_config_get, a nested cgrt_graph_list...) but not
 * change the graphs it is shown: cgrt_step, cgrt_release_graphs[_ex] and cgrt_close are refused
 * from it (CGRT_E_STATE, nothing done). The listing stands on the graph it reports, and a graph
 * freed under it would be read after its free; refusing keeps each `graph` valid for the whole
 * callback, as promised, without copying the list first. To release when the list shows too
 * many bytes, return nonzero from fn and release after cgrt_graph_list returns.
 */
CGRT_API int cgrt_graph_list(cgrt_runtime *rt, cgrt_graph_fn fn, void *user);

/*
 * Stream-ordered device memory for a callback's temporaries: cudaMallocAsync / cudaFreeAsync on
 * ctx->stream on the cuda driver. Allocated and freed inside a captured call, the memory belongs
 * to the graph (the driver maps it from its graph memory pool and shares it between graphs
 * launched on one stream) and is accounted per graph. The host driver models the same with host
 * memory. Free it on the same ctx's stream, in the same callback when it is captured.
 * Errors: CGRT_E_INVAL, CGRT_E_NOMEM, CGRT_E_DEVICE.
 */
CGRT_API int cgrt_alloc_async(const cgrt_ctx *ctx, size_t bytes, void **ptr);
CGRT_API int cgrt_free_async(const cgrt_ctx *ctx, void *ptr);

/* Copies the runtime's counters into *out (set out->struct_size first). */
CGRT_API int cgrt_stats_get(cgrt_runtime *rt, cgrt_stats *out);

/*
 * Capture notifications, for a host whose allocator must know when cgrt records work into a
 * graph. PyTorch's caching allocator is the example: while a stream is captured, the memory that
 * captured work allocates must come from a private pool and stay reserved for the graph, never be
 * handed to other work; the host tells its allocator so in `begin` and stops in `end`.
 *
 * cgrt calls `begin(user, stream)` immediately before it begins a stream capture
 * (cudaStreamBeginCapture) and `end(user, stream)` immediately after the capture has ended
 * (cudaStreamEndCapture), whether it succeeded, failed or was invalidated, before the graph is
 * instantiated. `stream` is the stream being captured (cudaStream_t on the cuda driver, the
 * runtime's stream). Both run on the thread that drives the runtime, which is the capturing
 * thread, inside cgrt_step(). Every capture the core makes is bracketed (a module call, a whole
 * body, a capture a backend begins by hand); pairs never nest, and every `begin` that returned 0
 * is followed by exactly one `end` within the same step (also when cgrt closes a capture a buggy
 * backend left open).
 *
 * `begin` returning nonzero refuses the capture: none is begun, `end` is not called for it, and
 * the work runs eagerly, as after any failed capture (counted in `fallbacks`, the reason logged).
 * `end` returning nonzero discards the graph just recorded; the work runs eagerly likewise.
 * The hooks must not call cgrt and must not synchronize the stream. Either may be NULL; both NULL
 * removes them. `user` is passed back untouched.
 * Errors: CGRT_E_INVAL (rt NULL), CGRT_E_STATE (inside a step).
 */
typedef int (*cgrt_capture_fn)(void *user, void *stream);
CGRT_API int cgrt_set_capture_hooks(cgrt_runtime *rt, cgrt_capture_fn begin, cgrt_capture_fn end,
                                    void *user);

/*
 * The capture hooks with what the host declares about them (since 0.4). `begin`, `end`
 * and `user` are cgrt_set_capture_hooks's.
 *
 * `pool_allocator` declares the host's pool allocator: the shared objects, separated by ':', whose
 * device allocations and frees made while cgrt captures come from a pool that `begin` routes them
 * to (PyTorch's caching allocator, in "libc10_cuda.so"). An entry without '/' names an object by
 * its file name ("libc10_cuda.so" is /any/dir/libc10_cuda.so), one with '/' by its path (symbolic
 * links resolved). Diagnose ([runtime] diagnose) then does not report, as a suspicious malloc, an
 * allocation or free that succeeded while capturing when the first function outside CUDA's
 * libraries and libcgrt on its call stack lies in a declared object; it logs their number at
 * level debug. Calls made by any other code (the host's own cudaMalloc in a module) are reported
 * as before, and so is a call refused because of the capture, wherever it comes from. NULL or ""
 * declares none.
 *
 * hooks->struct_size must be set (sizeof(cgrt_capture_hooks)); fields beyond it read as NULL. The
 * string is copied. Replaces whatever either function set before: cgrt_set_capture_hooks
 * declares no pool.
 * Errors: CGRT_E_INVAL (rt or hooks NULL, struct_size unset), CGRT_E_STATE (inside a step),
 * CGRT_E_NOMEM. On error nothing changes.
 */
typedef struct cgrt_capture_hooks {
  size_t struct_size;
  cgrt_capture_fn begin;
  cgrt_capture_fn end;
  void *user;
  const char *pool_allocator; /* "libc10_cuda.so", "/opt/x/libpool.so:libother.so", or NULL */
} cgrt_capture_hooks;
CGRT_API int cgrt_set_capture_hooks_ex(cgrt_runtime *rt, const cgrt_capture_hooks *hooks);

/*
 * Diagnose (since 0.4). When a capture fails, or for every capture with `[runtime]
 * diagnose = on` (or CGRT_DIAGNOSE=1), cgrt records the device API calls made while capturing
 * (on the cuda driver through CUPTI's callback API, loaded only then; on the host driver through
 * the driver's own checks) and reports each finding in one log line and in this list.
 */
typedef enum cgrt_finding_kind {
  CGRT_FINDING_SYNC = 0,          /* a stream, event or device synchronization or query */
  CGRT_FINDING_HOST_READ = 1,     /* a copy from device memory to host memory */
  CGRT_FINDING_PAGEABLE_COPY = 2, /* a copy from or to pageable (not pinned) host memory */
  CGRT_FINDING_MALLOC = 3,        /* an allocation or free outside stream-ordered memory */
  CGRT_FINDING_LEGACY_STREAM = 4, /* work on the legacy or per-thread default stream: not
                                     captured, it ran at once */
  CGRT_FINDING_OTHER = 5          /* another call refused while capturing */
} cgrt_finding_kind;
#define CGRT_FINDING_KIND_COUNT 6

/* One finding. Strings live until cgrt_findings_clear() or cgrt_close(). */
typedef struct cgrt_finding {
  size_t struct_size;
  cgrt_finding_kind kind;
  int broke_capture;       /* 1: the first call refused while capturing; it invalidated the
                              capture. 0: capturable but suspicious */
  const char *call;        /* "cudaStreamSynchronize", "cuMemAlloc_v2"; on the host driver the
                              driver operation ("stream_sync") */
  int result;              /* what the call returned: a cudaError_t or CUresult on the cuda
                              driver, a CGRT_E_* code on the host driver; 0 for success */
  const char *result_name; /* "cudaErrorStreamCaptureUnsupported", "success"... */
  const char *what;        /* the work being captured: "layer3.attn fwd", "the infer body" */
  uint64_t step;           /* the step of the capture (the first one, for repeats) */
  const char *caller;      /* the calling function, "sym+0x1c (libfoo.so)", or "" if unknown */
  const char *detail;      /* the log line's sentence: what it means and what to do */
  uint32_t count;          /* times this finding was seen (same kind, call, work and caller) */
} cgrt_finding;

/* The number of findings kept (at most 256 distinct ones; stats.findings counts them all). */
CGRT_API int cgrt_findings_count(const cgrt_runtime *rt, size_t *count);

/* Copies finding `index` (0 = the oldest) into *out (set out->struct_size first). CGRT_E_INVAL
   if index is out of range. */
CGRT_API int cgrt_finding_get(const cgrt_runtime *rt, size_t index, cgrt_finding *out);

/* Forgets every finding (their strings too). Not inside a step. */
CGRT_API int cgrt_findings_clear(cgrt_runtime *rt);

/* "sync", "host_read", "pageable_copy", "malloc", "legacy_stream", "other"; "?" if unknown. */
CGRT_API const char *cgrt_finding_kind_name(cgrt_finding_kind kind);

/* Short names of enum values ("train", "capture", "moe_router"...). Static; "?" if unknown. */
CGRT_API const char *cgrt_phase_name(cgrt_phase phase);
CGRT_API const char *cgrt_mode_name(cgrt_mode mode);
CGRT_API const char *cgrt_kind_name(cgrt_kind kind);

#ifdef __cplusplus
}
#endif

#endif /* CGRT_CGRT_H */
