/*
 * cgrt/tool.h - what the `cgrt` command needs of libcgrt beyond the host API: internal, but
 * stable.
 *
 * Internal: this is not part of the host API (cgrt.h) nor of the backend ABI (backend.h); hosts
 * and backends must not use it. It exists so that the `cgrt` command (tools/) is a client of
 * libcgrt.so like any host, reaching the runtime through installed headers and exported symbols
 * only, never through the core's sources. Other tools of the project (benches, planners) use it
 * too.
 *
 * Stable: within a soname (libcgrt.so.0) functions are only added, never changed or removed, and
 * struct cgrt_tool_graph_event only grows at its end (it starts with struct_size).
 * CGRT_TOOL_API_VERSION counts the additions.
 *
 * C99, no CUDA header. The conventions of cgrt.h hold: 0 or a negative CGRT_E_* code, results
 * through out-parameters, strings passed in live only during the call.
 */
#ifndef CGRT_TOOL_API_H
#define CGRT_TOOL_API_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cgrt/backend.h"
#include "cgrt/cgrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CGRT_TOOL_API_VERSION 3

/* ---------------------------------------------------------------- configurations */

/* A parsed and validated configuration, before a runtime is opened from it. Opaque. */
typedef struct cgrt_tool_config cgrt_tool_config;

/* Receives each message (CGRT_LOG_ERROR or CGRT_LOG_WARN) found while reading a configuration:
 * "conf/a.ini:3: unknown key 'warmup_step' ...". text lives during the call. */
typedef void (*cgrt_tool_msg_fn)(void *user, cgrt_log_level level, const char *text);

/*
 * Reads the INI file at `path`, or, when path is NULL, the INI `text` (named `name` in messages),
 * and checks every rule of the configuration. Every error and warning goes to msg (may be NULL).
 * Returns 0 with *out set (free it with cgrt_tool_config_free, or hand it to cgrt_tool_open);
 * otherwise *out is NULL and the code is CGRT_E_CONFIG (invalid: msg got at least one error),
 * CGRT_E_IO (unreadable file), CGRT_E_NOMEM or CGRT_E_INVAL (no path and no text).
 */
CGRT_API int cgrt_tool_config_read(cgrt_tool_config **out, const char *path, const char *text,
                                   const char *name, cgrt_tool_msg_fn msg, void *user);

/*
 * The typed values of cfg. Writable: a tool may change a value before cgrt_tool_open (the driver,
 * the device, bind_cpu, the log level, warmup_steps...); what it writes is not checked again.
 * Arrays (cp_sizes, bucket_list) are changed with the setters below only. Valid until cfg is
 * freed or opened.
 */
CGRT_API struct cgrt_config_view *cgrt_tool_config_view(cgrt_tool_config *cfg);

/* Replaces [dynamic_cp] cp_sizes by sizes[0..n) (ascending, distinct, n >= 1: not checked
 * again). CGRT_E_INVAL (n = 0 or sizes NULL), CGRT_E_NOMEM. */
CGRT_API int cgrt_tool_config_set_cp_sizes(cgrt_tool_config *cfg, const int *sizes, size_t n);

/*
 * Sets an option a backend declares (struct cgrt_option; e.g. [dynamic_cp] graph_scope) to `value`
 * as if the file gave it: read by its type and range, the retired view fields refilled. Options
 * are not view fields: writing those fields changes nothing for a backend of host API minor 5.
 * CGRT_E_INVAL if no loaded backend table declares section/key, CGRT_E_CONFIG if the value is
 * refused, CGRT_E_NOMEM.
 */
CGRT_API int cgrt_tool_config_set_option(cgrt_tool_config *cfg, const char *section,
                                         const char *key, const char *value);

/* Writes the normalized configuration (every section and value, defaults included) as INI. */
CGRT_API int cgrt_tool_config_print(const cgrt_tool_config *cfg, FILE *out);

/* Frees cfg. NULL is a no-op. */
CGRT_API void cgrt_tool_config_free(cgrt_tool_config *cfg);

/* The embedded default configuration (conf/default.ini, impl = none) as INI text. Static. */
CGRT_API const char *cgrt_tool_default_config(void);

/*
 * Opens a runtime from cfg, as cgrt_open_ex would from its file. cfg is consumed whatever
 * happens (do not free it). log/log_user: as in cgrt_open_options (NULL: stderr). On failure
 * *rt is NULL and cgrt_last_error(NULL) says why.
 */
CGRT_API int cgrt_tool_open(cgrt_runtime **rt, cgrt_tool_config *cfg, cgrt_log_fn log,
                            void *log_user);

/*
 * As cgrt_tool_open, on the host's stream `stream` (as cgrt_open_options.stream: cgrt enqueues
 * there and adds no ordering with the legacy stream; NULL: a stream of cgrt's own). For `cgrt
 * bench --host-stream`, which measures the step path of a host that hands its stream.
 */
CGRT_API int cgrt_tool_open_on(cgrt_runtime **rt, cgrt_tool_config *cfg, cgrt_log_fn log,
                               void *log_user, void *stream);

/* ---------------------------------------------------------------- an open runtime */

/* The configuration rt runs with. Valid until rt is closed. */
CGRT_API const struct cgrt_config_view *cgrt_tool_view(const cgrt_runtime *rt);

/* The loaded backend's table; *path (may be NULL) gets the file it was loaded from. */
CGRT_API const struct cgrt_backend_v1 *cgrt_tool_backend(const cgrt_runtime *rt, const char **path);

/* Runs the backend's describe() (its plan) line by line into emit. CGRT_E_UNSUPPORTED if the
 * backend does not describe itself. */
CGRT_API int cgrt_tool_describe(cgrt_runtime *rt, void (*emit)(void *user, const char *line),
                                void *user);

/* rt's token buckets, ascending ([inference]). Valid until rt is closed or the buckets adapt. */
CGRT_API int cgrt_tool_buckets(const cgrt_runtime *rt, const int64_t **sizes, size_t *count);

/*
 * What the runtime's driver did with a graph (cgrt_tool_watch_graphs). Handles are the driver's:
 * on the cuda driver cudaGraph_t, cudaGraphExec_t and cudaStream_t.
 */
typedef enum cgrt_tool_graph_op {
  CGRT_TOOL_GRAPH_INSTANTIATED = 0, /* graph -> exec; graph is alive during the call only */
  CGRT_TOOL_GRAPH_UPLOADED = 1,     /* exec uploaded to stream */
  CGRT_TOOL_GRAPH_LAUNCHED = 2,     /* exec launched on stream */
  CGRT_TOOL_GRAPH_UPDATED = 3       /* exec updated in place from graph (alive during the call) */
} cgrt_tool_graph_op;

struct cgrt_tool_graph_event {
  uint32_t struct_size;
  cgrt_tool_graph_op op;
  void *graph;        /* INSTANTIATED, UPDATED; else NULL */
  void *exec;         /* every op */
  void *stream;       /* UPLOADED, LAUNCHED; else NULL */
  const char *driver; /* "cuda" or "host": what the handles are */
};

typedef void (*cgrt_tool_graph_fn)(void *user, const struct cgrt_tool_graph_event *ev);

/*
 * Calls fn after every successful instantiation, upload, launch and in-place update of an
 * executable that rt's core and backend make, on the thread making it, before the handle can be
 * used again: so a tool sees the graphs cgrt really builds (node types, launch attributes,
 * instantiate flags) and how they are launched. fn must not call back into rt nor synchronize.
 * fn NULL stops watching. Costs one test per operation when no one watches.
 */
CGRT_API int cgrt_tool_watch_graphs(cgrt_runtime *rt, cgrt_tool_graph_fn fn, void *user);

/* ---------------------------------------------------------------- without a runtime */

/*
 * The token buckets of an [inference] distribution, ascending, into *out (free it with
 * cgrt_tool_free); see `cgrt buckets` in README.md for the rules. Errors (CGRT_E_INVAL, a
 * sentence naming the option in err; CGRT_E_NOMEM) leave *out NULL and *count 0. err may be NULL.
 */
/*
 * The bucket planner of `buckets = adaptive` (bucket_plan.h), for `cgrt buckets --histogram`.
 * A histogram is sizes[i] (ascending, distinct: the bucket sizes steps need) with steps[i] steps
 * holding tokens[i] real tokens. _optimal: the at most k buckets (ascending into out, k entries),
 * the largest max_size, with the least padded tokens (*padded); CGRT_E_INVAL for k < 1 or a
 * size above max_size. _padded: the padded tokens of the set `buckets` (steps above its largest
 * run eagerly). _need: the bucket size a step of `tokens` needs (a multiple of tp, at most max).
 */
CGRT_API int cgrt_tool_buckets_optimal(const int64_t *sizes, const double *steps,
                                       const double *tokens, size_t n, int64_t max_size, int k,
                                       int64_t *out, size_t *count, double *padded);
CGRT_API double cgrt_tool_buckets_padded(const int64_t *sizes, const double *steps,
                                         const double *tokens, size_t n, const int64_t *buckets,
                                         size_t nb);
CGRT_API int64_t cgrt_tool_bucket_need(int64_t tokens, int64_t tp, int64_t max);

CGRT_API int cgrt_tool_buckets_build(cgrt_bucket_dist dist, int64_t max_tokens, int num_graphs,
                                     int tp_size, const int64_t *list, size_t list_len,
                                     int64_t **out, size_t *count, char *err, size_t errlen);

/*
 * The planner by time (issue 43; bucket_time.h), for `cgrt plan --traffic`. (Added in tool API
 * 3.) A cgrt_tool_costs holds what a step costs in microseconds: replayed at a bucket of `size`
 * tokens (eager = 0) or run eagerly at `size` tokens (eager = 1), one figure per size (a later
 * one replaces it), the model linear between sizes and following the nearest two beyond them.
 * _costs_new: CGRT_E_NOMEM. _costs_set: CGRT_E_INVAL (size < 1, us negative or not finite),
 * CGRT_E_NOMEM. _costs_at: the model at size (0 without a figure on that side).
 * _buckets_fastest: the at most k buckets (ascending into out, k entries, the largest max_size)
 * that minimize the histogram's expected time per step (*time), each size served by its bucket
 * or, when eager_ok and the model says it is faster, eagerly; CGRT_E_INVAL (k < 1, a size above
 * max_size, fewer than two figures on a side), CGRT_E_CAPACITY (more than 4,096 distinct sizes),
 * CGRT_E_NOMEM. _plan_time: the expected time per step of the set `buckets` (steps above its
 * largest run eagerly), the weight of the steps run eagerly into *eager_steps (may be NULL).
 */
typedef struct cgrt_tool_costs cgrt_tool_costs;
CGRT_API int cgrt_tool_costs_new(cgrt_tool_costs **out);
CGRT_API int cgrt_tool_costs_set(cgrt_tool_costs *c, int eager, int64_t size, double us);
CGRT_API double cgrt_tool_costs_at(const cgrt_tool_costs *c, int eager, int64_t size);
CGRT_API void cgrt_tool_costs_free(cgrt_tool_costs *c);
CGRT_API int cgrt_tool_buckets_fastest(const int64_t *sizes, const double *steps,
                                       const double *tokens, size_t n, int64_t max_size, int k,
                                       const cgrt_tool_costs *c, int eager_ok, int64_t *out,
                                       size_t *count, double *time);
CGRT_API double cgrt_tool_plan_time(const int64_t *sizes, const double *steps, const double *tokens,
                                    size_t n, const int64_t *buckets, size_t nb,
                                    const cgrt_tool_costs *c, int eager_ok, double *eager_steps);

/* Frees memory this header's functions allocated. NULL is a no-op. */
CGRT_API void cgrt_tool_free(void *p);

/* The directories a bare backend name is searched in when no backend_path is set, in order:
 * CGRT_BACKEND_PATH, beside libcgrt, the install directory. Free with cgrt_tool_free_strings. */
CGRT_API int cgrt_tool_backend_search_dirs(char ***dirs, size_t *count);
CGRT_API void cgrt_tool_free_strings(char **v, size_t n);

/* Checks the cgrt_backend_v1 table of an object the caller dlopen()ed (path for messages). 0 with
 * *vt set, or CGRT_E_BACKEND with the reason in err. */
CGRT_API int cgrt_tool_backend_check(void *dl, const char *path, const struct cgrt_backend_v1 **vt,
                                     char *err, size_t errlen);

/* The CPU cores near CUDA device `device` ("0-15,32-47", hwloc), asked of the cuda driver
 * (which this loads). CGRT_E_UNSUPPORTED when the cuda driver cannot be loaded (cgrt built
 * without CUDA, or no CUDA here), CGRT_E_DEVICE otherwise, with a sentence in err. */
CGRT_API int cgrt_tool_cores_near_gpu(int device, char *cores, size_t len, char *err,
                                      size_t errlen);

/* The file libcgrt was loaded from (the executable's, when the core is linked into it), into buf:
 * tools find their own objects beside it (LIBDIR/cgrt/). CGRT_E_IO if it cannot be told,
 * CGRT_E_INVAL if buf is too small. (Added in tool API 2.) */
CGRT_API int cgrt_tool_library_path(char *buf, size_t len);

/* The directories `[runtime] driver = NAME` is searched in, in order: CGRT_DRIVER_PATH, beside
 * libcgrt (LIBDIR/cgrt/drivers), the install directory. Free with cgrt_tool_free_strings.
 * (Added in tool API 2.) */
CGRT_API int cgrt_tool_driver_search_dirs(char ***dirs, size_t *count);

/*
 * Loads the driver `name` as a runtime would (the host driver is built in: nothing is loaded)
 * and has it describe what it sees, line by line into emit: for the cuda driver the CUDA runtime
 * and driver versions, NCCL's, and each device with the cores near it. path (may be NULL) gets
 * the file it was loaded from. Loading the cuda driver loads the CUDA runtime and NCCL: a tool
 * that must stay light asks only when a GPU is there. Errors as a runtime's open gives them
 * (CGRT_E_NODEV: not found or its libraries missing; CGRT_E_BACKEND: not a driver of this cgrt),
 * with the sentence in err. (Added in tool API 2.)
 */
CGRT_API int cgrt_tool_driver_describe(const char *name, void (*emit)(void *user, const char *line),
                                       void *user, char *path, size_t pathlen, char *err,
                                       size_t errlen);

/* Whether rt's split communicators run with NCCL's graph mixing off, as cgrt read
 * NCCL_GRAPH_MIXING_SUPPORT at cgrt_set_world_comm (so it waits for queued graphs before work
 * outside them, cgrt_stats.comm_waits): 1 off, 0 on, -1 before cgrt_set_world_comm or with no
 * rt. */
CGRT_API int cgrt_tool_nccl_mixing_off(const cgrt_runtime *rt);

/* A monotonic clock in nanoseconds (the one cgrt's statistics use). */
CGRT_API uint64_t cgrt_tool_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif
