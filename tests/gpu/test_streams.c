/*
 * test_streams.c (GPU) - a step is ordered with the host's streams (issue 37, README "Streams").
 *
 * Each step the host writes its input with a kernel on its own stream (the legacy default stream,
 * a per-thread default stream, or the stream it handed at open) queued behind a kernel that spins
 * for about a millisecond, runs a step whose four layers compute y = 2x + 1, and copies the output
 * back on that same stream. Nothing else synchronizes. If cgrt's stream did not wait for the
 * host's at the step's entry, the layers would read the input before the spin ends (an old one);
 * if the host's stream did not wait for the step at its exit, the copy would run while the step
 * is still queued behind the spin. Either way the result is wrong on every step, not only when
 * the GPU happens to be busy. Under none, local (layer and block scope), transformer_engine,
 * full_iteration, rebind copy and auto; and, with another thread copying on the legacy stream all
 * the while, captures still succeed (cgrt's stream is non-blocking: nothing implicit ties them);
 * two runtimes, one per thread, step side by side while the other thread opens and closes; a
 * thread's cudaDeviceSynchronize met inside a capture breaks it, and the capture says so and
 * recovers; a thread looping cgrt_device_synchronize beside the captures breaks none, and with
 * [runtime] sync_guard = on held by a runtime neither does a thread looping a raw
 * cudaDeviceSynchronize, which crashed the CUDA driver without it (session 53).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "cgrt/cgrt.h"
#include "cgrt_kernels.h"
#include "probe.h"

#define N      4096
#define LAYERS 4
#define STEPS  300
#define SPIN   2000000LL /* SM cycles: about a millisecond */

struct host {
  cgrt_runtime *rt;
  cgrt_module *m[LAYERS];
  float *x, *y[LAYERS];
  unsigned long long *probe;
  float *out;      /* pinned: y[LAYERS-1][0] and [N-1] */
  cudaStream_t hs; /* the host's stream: cudaStreamLegacy, cudaStreamPerThread or its own */
};

static float *input_of(const struct host *h, int l) {
  return l == 0 ? h->x : h->y[l - 1];
}

/* y = 1 + 2 * x: a fill, then an axpy, on ctx->stream, at the addresses in args (under rebind =
   copy a capture records on private copies of the buffers, so a module reads them from args). */
static void hand_over(const cgrt_ctx *ctx, int l);

static int layer_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  hand_over(ctx, (int)(intptr_t)user); /* device_sync_handed_over_inside_a_capture only */
  float *x = args->buffers[0].ptr, *y = args->buffers[1].ptr;
  if (cgrtk_fill_f32(y, 1.0f, N, ctx->stream) != 0)
    return -1;
  return cgrtk_axpy_f32(y, x, 2.0f, N, ctx->stream) == 0 ? 0 : -1;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  for (int l = 0; l < LAYERS; l++) {
    cgrt_buffer b[] = {{input_of(h, l), N * sizeof(float), CGRT_IN, "x"},
                       {h->y[l], N * sizeof(float), CGRT_OUT, "y"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = N, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(h->rt, h->m[l], ctx, &a);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static float expected(float x) {
  for (int l = 0; l < LAYERS; l++)
    x = 1.0f + 2.0f * x;
  return x;
}

static int have_gpu(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* Layer l's module: attn for even l, mlp for odd, y = 2x + 1 either way. */
static int register_layer(cgrt_runtime *rt, int l, cgrt_module **m) {
  char name[32];
  snprintf(name, sizeof(name), "layer%d.%s", l, l % 2 ? "mlp" : "attn");
  cgrt_module_desc d = {.struct_size = sizeof(d),
                        .name = name,
                        .kind = l % 2 ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                        .layer = l,
                        .forward = layer_fwd,
                        .user = (void *)(intptr_t)l};
  return cgrt_module_register(rt, &d, m);
}

/* Writes a failure's sentence into err (the helpers below are shared with threads, where cmocka's
   asserts may not run); -1. */
static int failf(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int failf(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* Opens h->rt under cuda_graph (handed = 1 hands h->hs at open: a stream the host created; log:
   the sink, NULL for stderr) and allocates the host's buffers and layers; no device sync. 0, or
   -1 with the sentence in err. */
static int host_setup(struct host *h, const char *cuda_graph, int handed, cgrt_log_fn log,
                      void *log_user, char *err, size_t len) {
  char ini[1024];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\n%s\nwarmup_steps = 2\n[runtime]\ndriver = cuda\nlog = warn\n"
           "[host]\nnan_check = off\n",
           cuda_graph);
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = ini,
                         .stream = handed ? h->hs : NULL,
                         .log = log,
                         .log_user = log_user};
  if (cgrt_open_ex(&h->rt, &o) != 0)
    return failf(err, len, "open (%s): %s", cuda_graph, cgrt_last_error(NULL));
  if (cudaMalloc((void **)&h->x, N * sizeof(float)) != cudaSuccess ||
      cudaMalloc((void **)&h->probe, 2 * sizeof(unsigned long long)) != cudaSuccess ||
      cudaMallocHost((void **)&h->out, 2 * sizeof(float)) != cudaSuccess)
    return failf(err, len, "allocating the host's buffers failed");
  for (int l = 0; l < LAYERS; l++) {
    if (cudaMalloc((void **)&h->y[l], N * sizeof(float)) != cudaSuccess)
      return failf(err, len, "allocating the host's buffers failed");
    if (register_layer(h->rt, l, &h->m[l]) != 0)
      return failf(err, len, "module_register: %s", cgrt_last_error(h->rt));
  }
  return 0;
}

/* Closes h->rt if it is open and frees the host's buffers; cgrt_close's result. */
static int host_teardown(struct host *h) {
  int rc = h->rt ? cgrt_close(h->rt) : 0;
  cudaFree(h->x);
  for (int l = 0; l < LAYERS; l++)
    cudaFree(h->y[l]);
  cudaFree(h->probe);
  cudaFreeHost(h->out);
  return rc;
}

/* Opens a runtime as host_setup does, then syncs the device (no other thread captures here). */
static struct host *host_open(const char *cuda_graph, cudaStream_t hs, int handed) {
  struct host *h = calloc(1, sizeof(*h));
  assert_non_null(h);
  h->hs = hs;
  char err[512];
  if (host_setup(h, cuda_graph, handed, NULL, NULL, err, sizeof(err)) != 0)
    fail_msg("%s", err);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  return h;
}

static void host_close(struct host *h) {
  assert_int_equal(host_teardown(h), 0);
  free(h);
}

/* STEPS steps of input (s + salt) % 97 / 4, each behind a spin of `spin` SM cycles; the host's
   spin, fill and read-back on h->hs, waited for there alone; *done (if given) counts the steps
   read right. 0, or -1 with the sentence in err. */
static int check_steps(struct host *h, const char *what, cgrt_phase phase, long long spin, int salt,
                       unsigned long long *done, char *err, size_t len) {
  for (int s = 0; s < STEPS; s++) {
    float v = (float)((s + salt) % 97) * 0.25f;
    if (cgrtk_clock_probe(h->probe, spin, h->hs) != 0 || cgrtk_fill_f32(h->x, v, N, h->hs) != 0)
      return failf(err, len, "%s, step %d: the host's kernels failed", what, s);
    cgrt_step_desc d = {
        .struct_size = sizeof(d), .phase = phase, .tokens = N, .body = body, .user = h};
    if (cgrt_step(h->rt, &d, NULL) != 0)
      return failf(err, len, "%s, step %d: %s", what, s, cgrt_last_error(h->rt));
    float *last = h->y[LAYERS - 1];
    if (cudaMemcpyAsync(&h->out[0], last, sizeof(float), cudaMemcpyDeviceToHost, h->hs) !=
            cudaSuccess ||
        cudaMemcpyAsync(&h->out[1], last + N - 1, sizeof(float), cudaMemcpyDeviceToHost, h->hs) !=
            cudaSuccess ||
        cudaStreamSynchronize(h->hs) != cudaSuccess)
      return failf(err, len, "%s, step %d: reading the output back failed", what, s);
    float want = expected(v);
    if (memcmp(&h->out[0], &want, sizeof(want)) != 0 || memcmp(&h->out[1], &want, sizeof(want)))
      return failf(err, len,
                   "%s, %s step %d: the host read %g and %g on its stream after the step, which "
                   "computes %g from the input the host wrote there",
                   what, cgrt_phase_name(phase), s, h->out[0], h->out[1], want);
    if (done)
      ++*done;
  }
  return 0;
}

static void run_steps(struct host *h, const char *what, cgrt_phase phase) {
  char err[512];
  if (check_steps(h, what, phase, SPIN, 0, NULL, err, sizeof(err)) != 0)
    fail_msg("%s", err);
}

static const struct {
  const char *cuda_graph;
  cgrt_phase phase;
} configs[] = {
    {"impl = none", CGRT_PHASE_TRAIN},
    {"impl = none", CGRT_PHASE_INFER},
    {"impl = local\nmodules =", CGRT_PHASE_TRAIN},
    {"impl = local\nmodules =", CGRT_PHASE_INFER},
    {"impl = local\nmodules =\ninference_scope = block", CGRT_PHASE_INFER},
    {"impl = transformer_engine\nmodules = attn mlp", CGRT_PHASE_TRAIN},
    {"impl = full_iteration", CGRT_PHASE_TRAIN},
    {"impl = local\nmodules =\nrebind = copy", CGRT_PHASE_TRAIN},
    {"impl = full_iteration\nrebind = auto", CGRT_PHASE_TRAIN},
};

static void each_config(cudaStream_t hs, int handed, const char *stream_name) {
  for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
    struct host *h = host_open(configs[i].cuda_graph, hs, handed);
    char what[256];
    snprintf(what, sizeof(what), "%s (host stream: %s)", configs[i].cuda_graph, stream_name);
    run_steps(h, what, configs[i].phase);
    cgrt_stats st = {.struct_size = sizeof(st)};
    assert_int_equal(cgrt_stats_get(h->rt, &st), 0);
    assert_int_equal(st.fallbacks, 0);
    host_close(h);
  }
}

static void legacy_default_stream(void **state) {
  (void)state;
  if (!have_gpu())
    skip();
  each_config(cudaStreamLegacy, 0, "legacy default");
}

static void per_thread_default_stream(void **state) {
  (void)state;
  if (!have_gpu())
    skip();
  each_config(cudaStreamPerThread, 0, "per-thread default");
}

static void stream_handed_at_open(void **state) {
  (void)state;
  if (!have_gpu())
    skip();
  cudaStream_t s = NULL;
  assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  each_config(s, 1, "its own, handed at open");
  assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

/* Another thread's copies on the legacy stream, all the while: no capture of cgrt's may break. */
static volatile int stop_copier;

static void *copier(void *arg) {
  float *buf = arg, host[64];
  while (!stop_copier)
    (void)cudaMemcpy(host, buf, sizeof(host), cudaMemcpyDeviceToHost); /* legacy, blocking */
  return NULL;
}

static void captures_survive_another_threads_legacy_work(void **state) {
  (void)state;
  if (!have_gpu())
    skip();
  float *buf = NULL;
  assert_int_equal(cudaMalloc((void **)&buf, 64 * sizeof(float)), cudaSuccess);
  stop_copier = 0;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, copier, buf), 0);
  const char *graphs[] = {"impl = local\nmodules =", "impl = full_iteration"};
  for (int i = 0; i < 2; i++) {
    struct host *h = host_open(graphs[i], cudaStreamLegacy, 0);
    run_steps(h, graphs[i], CGRT_PHASE_TRAIN);
    cgrt_stats st = {.struct_size = sizeof(st)};
    assert_int_equal(cgrt_stats_get(h->rt, &st), 0);
    if (st.fallbacks != 0)
      fail_msg("%s: %llu captures fell back while another thread copied on the legacy stream",
               graphs[i], (unsigned long long)st.fallbacks);
    host_close(h);
  }
  stop_copier = 1;
  pthread_join(t, NULL);
  cudaFree(buf);
}

/*
 * Two runtimes, one per thread, stepping at the same time on one GPU (a server with a model per
 * worker thread). Each thread opens its runtime, runs the steps above and closes it, config after
 * config, so one thread's opens (cudaMalloc, cudaMallocHost, a device sync) and closes (cudaFree)
 * land in the middle of the other's captures and replays. Thread 0 works on its per-thread default
 * stream, thread 1 on a stream of its own handed at open. Every step of both must read its own
 * result, and no capture may fall back. Failures are kept per thread and asserted after the join
 * (cmocka's asserts jump: they belong to the main thread).
 */
struct worker {
  int index;
  int outside_ok; /* fallbacks allowed where the log names a break from outside the capture */
  void (*each_config)(void); /* called before each config's runtime opens, if set */
  int verbose;               /* prints each config's captures, fallbacks and replays */
  char failure[512];
  unsigned long long steps;
  unsigned long long fallback_lines, outside_lines; /* the open runtime's, from its log */
  unsigned long long fallbacks;                     /* every runtime's, from their stats */
  unsigned long long captures;                      /* every runtime's, from their stats */
};

/* A runtime on GPU 0 that holds the sync guard (sync_guard = on: the open fails where the guard
   cannot be had) while the test runs. */
static cgrt_runtime *guard_open(void) {
  cgrt_runtime *rt = NULL;
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = "[cuda_graph]\nimpl = local\n[runtime]\ndriver = cuda\ndevice = "
                                "0\nsync_guard = on\nlog = warn\n"};
  if (cgrt_open_ex(&rt, &o) != 0)
    fail_msg("sync_guard = on: %s", cgrt_last_error(NULL));
  return rt;
}

/* The guard's counts of GPU 0 (process-wide), through a runtime that holds it. */
static void guard_counts(cgrt_runtime *rt, unsigned long long *waits, unsigned long long *late) {
  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(rt, &st), 0);
  *waits = st.sync_guard_waits;
  *late = st.sync_guard_late;
}

static void worker_log(void *user, cgrt_log_level level, const char *msg) {
  struct worker *w = user;
  if (level <= CGRT_LOG_WARN)
    fprintf(stderr, "[thread %d] %s\n", w->index, msg);
  if (level == CGRT_LOG_WARN && strstr(msg, "failed, running it eagerly"))
    w->fallback_lines++;
  if (level == CGRT_LOG_WARN && strstr(msg, "failed, running it eagerly") &&
      strstr(msg, "broken from outside the captured work"))
    w->outside_lines++;
}

static void *worker_run(void *arg) {
  struct worker *w = arg;
  cudaStream_t own = NULL;
  const int handed = w->index == 1;
  if (handed && cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) != cudaSuccess) {
    failf(w->failure, sizeof(w->failure), "cudaStreamCreateWithFlags failed");
    return NULL;
  }
  /* thread 1 starts at the other end of the list, so the two are in different configs */
  const size_t n = sizeof(configs) / sizeof(configs[0]);
  for (size_t k = 0; k < n && !w->failure[0]; k++) {
    size_t i = w->index == 0 ? k : n - 1 - k;
    struct host h = {.hs = handed ? own : cudaStreamPerThread};
    char what[256];
    snprintf(what, sizeof(what), "thread %d, %s", w->index, configs[i].cuda_graph);
    for (char *c = what; *c; c++)
      *c = *c == '\n' ? ';' : *c;
    /* No cudaDeviceSynchronize after the setup: with the other thread's runtime capturing, CUDA
       refuses it and invalidates that capture (device_sync_handed_over_inside_a_capture below). */
    w->fallback_lines = w->outside_lines = 0;
    if (w->each_config)
      w->each_config();
    if (host_setup(&h, configs[i].cuda_graph, handed, worker_log, w, w->failure,
                   sizeof(w->failure)) == 0 &&
        check_steps(&h, what, configs[i].phase, SPIN / 4, 31 * w->index, &w->steps, w->failure,
                    sizeof(w->failure)) == 0) {
      cgrt_stats st = {.struct_size = sizeof(st)};
      if (cgrt_stats_get(h.rt, &st) != 0)
        failf(w->failure, sizeof(w->failure), "%s: stats: %s", what, cgrt_last_error(h.rt));
      else if (st.fallbacks != 0 && !w->outside_ok)
        failf(w->failure, sizeof(w->failure),
              "%s: %llu captures fell back with another runtime stepping beside it", what,
              (unsigned long long)st.fallbacks);
      else if (st.fallbacks != w->outside_lines || st.fallbacks != w->fallback_lines)
        failf(w->failure, sizeof(w->failure),
              "%s: %llu captures fell back, %llu said so, %llu of them named a break "
              "from outside the capture",
              what, (unsigned long long)st.fallbacks, w->fallback_lines, w->outside_lines);
      else if (st.fallbacks > 0 &&
               st.steps_by_mode[CGRT_MODE_REPLAY] + st.calls_by_mode[CGRT_MODE_REPLAY] == 0)
        failf(w->failure, sizeof(w->failure),
              "%s: %llu captures broke and nothing replayed in %d steps: the graphs "
              "were given up",
              what, (unsigned long long)st.fallbacks, STEPS);
      w->fallbacks += st.fallbacks;
      w->captures += st.captures;
      if (w->verbose)
        printf("  %s: %llu captures, %llu fell back, %llu replays\n", what,
               (unsigned long long)st.captures, (unsigned long long)st.fallbacks,
               (unsigned long long)(st.steps_by_mode[CGRT_MODE_REPLAY] +
                                    st.calls_by_mode[CGRT_MODE_REPLAY]));
    }
    if (host_teardown(&h) != 0 && !w->failure[0])
      failf(w->failure, sizeof(w->failure), "%s: close: %s", what, cgrt_last_error(NULL));
  }
  if (own)
    cudaStreamDestroy(own);
  return NULL;
}

static void two_runtimes_on_two_threads(void **state) {
  (void)state;
  if (!have_gpu())
    skip();
  struct worker w[2] = {{.index = 0}, {.index = 1}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++)
    if (w[i].failure[0])
      fail_msg("thread %d: %s", i, w[i].failure);
  const unsigned long long want = STEPS * (sizeof(configs) / sizeof(configs[0]));
  assert_int_equal(w[0].steps, want);
  assert_int_equal(w[1].steps, want);
}

/*
 * A host thread that calls cudaDeviceSynchronize while a runtime captures (a preprocessing or
 * monitoring thread, as in TensorRT's issue 2888 and llama.cpp's PR 14033). CUDA refuses the sync
 * while any capture of the device runs and invalidates that capture, whatever its mode (session
 * 52, tools/probe/capture_threads.cu). The sync is handed over from inside the captured work: a
 * module being captured (a layer's first capture in a config, one a step) gives the other thread
 * the turn and waits until its cudaDeviceSynchronize has returned, so every sync meets a capture
 * and none races a capture's begin or end (a raw loop of them does, and crashed the CUDA driver:
 * tools/probe/sync_race.cu, session 53). Each sync must be refused, each broke one capture that
 * fell back with a line naming a break from outside the captured work, every step still reads its
 * own result, and the graphs are captured again and replayed. With the sync guard held (the second
 * test) each handed sync first waits at the capture gate for the capture that waits for it: the
 * bound (CGRT_SYNC_GUARD_WAIT_MS, 100 ms here) ends that wait, the sync goes ahead as without the
 * guard, and the guard counts it late, exactly once each; the rest is the same.
 */
static struct breaker {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int turn; /* 1: the syncing thread's */
  int stop;
  int broken[LAYERS]; /* this config's layers whose first capture was broken */
  uint64_t last_step; /* 1 + the step of the last handover in this config; 0: none yet */
  unsigned long long handed, refused;
  unsigned long long unlike; /* capture calls whose stream CUDA said was not capturing */
} * breaker;

/* Before each config: its layers' first captures are still to be broken. */
static void unbreak(void) {
  memset(breaker->broken, 0, sizeof(breaker->broken));
  breaker->last_step = 0;
}

/* From layer l's forward on ctx's stream: hands the turn over if it is being captured, its first
   capture in this config has not been broken yet, and no capture of this step was (diagnose
   captures a failed capture's work again in the same step: that one is left whole). */
static void hand_over(const cgrt_ctx *ctx, int l) {
  struct breaker *b = breaker;
  if (!b || ctx->mode != CGRT_MODE_CAPTURE)
    return;
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)ctx->stream, &st) != cudaSuccess ||
      st != cudaStreamCaptureStatusActive) {
    b->unlike++;
    return;
  }
  if (b->broken[l] || b->last_step == ctx->step + 1)
    return;
  b->broken[l] = 1;
  b->last_step = ctx->step + 1;
  pthread_mutex_lock(&b->mu);
  b->turn = 1;
  pthread_cond_broadcast(&b->cv);
  while (b->turn == 1)
    pthread_cond_wait(&b->cv, &b->mu);
  pthread_mutex_unlock(&b->mu);
}

static void *handed_syncer(void *arg) {
  struct breaker *b = arg;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (b->turn != 1 && !b->stop)
      pthread_cond_wait(&b->cv, &b->mu);
    if (b->stop)
      break;
    pthread_mutex_unlock(&b->mu);
    cudaError_t e = cudaDeviceSynchronize();
    (void)cudaGetLastError();
    pthread_mutex_lock(&b->mu);
    b->handed++;
    if (e != cudaSuccess)
      b->refused++;
    b->turn = 0;
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

static void handed_over(int guarded) {
  if (!have_gpu())
    skip();
  unsigned long long waits0 = 0, late0 = 0, waits1 = 0, late1 = 0;
  assert_int_equal(setenv("CGRT_SYNC_GUARD_WAIT_MS", "100", 1), 0);
  cgrt_runtime *keep = guarded ? guard_open() : NULL;
  if (keep)
    guard_counts(keep, &waits0, &late0);
  struct breaker b = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, handed_syncer, &b), 0);
  breaker = &b;
  struct worker w = {.index = 0, .outside_ok = 1, .each_config = unbreak, .verbose = 1};
  (void)worker_run(&w);
  breaker = NULL;
  if (keep) {
    guard_counts(keep, &waits1, &late1);
    assert_int_equal(cgrt_close(keep), 0);
  }
  unsetenv("CGRT_SYNC_GUARD_WAIT_MS");
  pthread_mutex_lock(&b.mu);
  b.stop = 1;
  pthread_cond_broadcast(&b.cv);
  pthread_mutex_unlock(&b.mu);
  pthread_join(t, NULL);
  printf("device_sync_handed_over_inside_a_capture%s: %llu cudaDeviceSynchronize handed over, %llu "
         "refused, %llu captures broken and run eagerly, all named, every step right; %llu "
         "capture calls on a stream CUDA said was not capturing; the guard: %llu waited, %llu "
         "went ahead at the bound\n",
         guarded ? " (guard held)" : "", b.handed, b.refused, w.fallbacks, b.unlike,
         waits1 - waits0, late1 - late0);
  if (w.failure[0])
    fail_msg("%s", w.failure);
  assert_int_equal(w.steps, STEPS * (sizeof(configs) / sizeof(configs[0])));
  /* One a step while a config captures: local's per-layer training configs (rebind off and copy)
     and transformer_engine break layer 0's first capture; each full_iteration config's step
     capture breaks at layer 0, then 1, 2 and 3 in the steps after (LAYERS in a row). Inference at
     N tokens, above the buckets, runs eagerly and captures nothing. */
  assert_int_equal(b.handed, 3 + 2 * LAYERS);
  assert_int_equal(b.unlike, 0);
  assert_int_equal(b.refused, b.handed);
  assert_int_equal(w.fallbacks, b.handed);
  assert_int_equal(late1 - late0, guarded ? b.handed : 0);
  assert_int_equal(waits1 - waits0, guarded ? b.handed : 0);
}

static void device_sync_handed_over_inside_a_capture(void **state) {
  (void)state;
  handed_over(0);
}

static void device_sync_handed_over_with_the_guard(void **state) {
  (void)state;
  handed_over(1);
}

/*
 * The same thread synchronizes the device through cgrt_device_synchronize instead, in a loop, free
 * running, on a runtime of its own that stays open while the worker's runtimes open, capture, step
 * and close config after config: the gate holds each sync back while any capture of the process
 * runs, so no capture may fall back, no sync may fail, and the syncs go on between the captures.
 */
static _Atomic int stop_syncer;

/* Runs the worker's configs (verbose) while `loop` runs on a thread of its own, until they end. */
static void worker_beside(void *(*loop)(void *), void *arg, struct worker *w) {
  stop_syncer = 0;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, loop, arg), 0);
  (void)worker_run(w);
  stop_syncer = 1;
  pthread_join(t, NULL);
}

struct gated {
  cgrt_runtime *rt;
  unsigned long long calls, failed;
  char msg[512];
};

static void *gated_syncer(void *arg) {
  struct gated *g = arg;
  while (!stop_syncer) {
    g->calls++;
    if (cgrt_device_synchronize(g->rt) != 0 && g->failed++ == 0)
      snprintf(g->msg, sizeof(g->msg), "%s", cgrt_last_error(g->rt));
  }
  return NULL;
}

static void device_synchronize_beside_captures(void **state) {
  (void)state;
  if (!have_gpu())
    skip();
  struct gated g = {.rt = NULL};
  cgrt_open_options o = {.struct_size = sizeof(o),
                         .ini = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\n"};
  assert_int_equal(cgrt_open_ex(&g.rt, &o), 0);
  struct worker w = {.index = 0, .verbose = 1};
  worker_beside(gated_syncer, &g, &w);
  assert_int_equal(cgrt_close(g.rt), 0);
  printf("device_synchronize_beside_captures: %llu cgrt_device_synchronize, %llu failed; %llu "
         "captures, %llu fell back\n",
         g.calls, g.failed, w.captures, w.fallbacks);
  if (w.failure[0])
    fail_msg("%s", w.failure);
  if (g.failed)
    fail_msg("%llu of %llu cgrt_device_synchronize failed; the first: %s", g.failed, g.calls,
             g.msg);
  assert_int_equal(w.steps, STEPS * (sizeof(configs) / sizeof(configs[0])));
  assert_int_equal(w.fallbacks, 0);
  assert_true(w.captures >= 7); /* every config but none's captured */
  assert_true(g.calls > 0);
}

/*
 * The session 52 loop that crashed the driver, with the guard: a thread loops a raw
 * cudaDeviceSynchronize, free running, while the worker's runtimes open, capture, step and close
 * config after config. Each sync passes the capture gate of GPU 0 from the guard's callback, so
 * none meets a capture: none may fail, no capture may fall back, and the process must not crash.
 * A runtime holding the guard stays open throughout (a guard taken while a raw sync is already in
 * flight does not see that one: README, Other threads and captures).
 */
struct raw {
  unsigned long long calls, failed;
  cudaError_t first;
};

static void *raw_syncer(void *arg) {
  struct raw *r = arg;
  cudaSetDevice(0);
  while (!stop_syncer) {
    r->calls++;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess && r->failed++ == 0)
      r->first = e;
    (void)cudaGetLastError();
  }
  return NULL;
}

static void raw_device_sync_beside_captures(void **state) {
  (void)state;
  if (!have_gpu())
    skip();
  cgrt_runtime *keep = guard_open();
  unsigned long long waits0, late0, waits1, late1;
  guard_counts(keep, &waits0, &late0);
  struct raw r = {0};
  struct worker w = {.index = 0, .verbose = 1};
  worker_beside(raw_syncer, &r, &w);
  guard_counts(keep, &waits1, &late1);
  assert_int_equal(cgrt_close(keep), 0);
  printf("raw_device_sync_beside_captures: %llu cudaDeviceSynchronize, %llu failed; %llu captures, "
         "%llu fell back; the guard: %llu syncs waited for a capture, %llu went ahead at the "
         "bound\n",
         r.calls, r.failed, w.captures, w.fallbacks, waits1 - waits0, late1 - late0);
  if (w.failure[0])
    fail_msg("%s", w.failure);
  if (r.failed)
    fail_msg("%llu of %llu raw cudaDeviceSynchronize failed; the first: %s", r.failed, r.calls,
             cudaGetErrorString(r.first));
  assert_int_equal(w.steps, STEPS * (sizeof(configs) / sizeof(configs[0])));
  assert_int_equal(w.fallbacks, 0);
  assert_int_equal(late1 - late0, 0);
  assert_true(w.captures >= 7);
  assert_true(r.calls > 0);
}

int main(void) {
  if (!have_gpu()) {
    printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(legacy_default_stream),
      cmocka_unit_test(per_thread_default_stream),
      cmocka_unit_test(stream_handed_at_open),
      cmocka_unit_test(captures_survive_another_threads_legacy_work),
      cmocka_unit_test(two_runtimes_on_two_threads),
      cmocka_unit_test(device_sync_handed_over_inside_a_capture),
      cmocka_unit_test(device_sync_handed_over_with_the_guard),
      cmocka_unit_test(device_synchronize_beside_captures),
      cmocka_unit_test(raw_device_sync_beside_captures),
  };
  /* CGRT_TEST_FILTER=NAME runs the tests it matches (scripts/gpu-gdb-loop.sh repeats one). */
  const char *only = getenv("CGRT_TEST_FILTER");
  if (only && only[0])
    cmocka_set_test_filter(only);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
