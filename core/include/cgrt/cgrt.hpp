/*
 * cgrt.hpp - the host API of cgrt for C++17, header-only, over the C ABI of cgrt.h.
 *
 * What it adds to cgrt.h, and nothing else:
 * - cgrt::Runtime, a move-only owner of a cgrt_runtime: opened by a static function, closed by
 *   its destructor (which never throws) or by close() (which reports a teardown error).
 * - Callables (lambdas with captures) for modules, step callbacks, host functions and the graph
 *   listing; the C functions get trampolines.
 * - Errors as exceptions: cgrt::Error carries the CGRT_E_* code and cgrt's sentence
 *   (cgrt_last_error). An exception thrown by a callable never crosses the C code: the
 *   trampoline catches it, makes the C call fail, and the wrapper that made that C call rethrows
 *   the same exception object (std::exception_ptr) once the C call has returned.
 *
 * Lifetimes:
 * - Module and HostFn handles, and the callables they hold, live as long as the runtime: until
 *   close() or the destructor, also after the Runtime object was moved (they belong to the runtime,
 *   not to the object). Register them once, at setup, as in C.
 * - Callables of one step (prepare, body) need live only during step().
 * - Closing waits for the stream, so host work still queued runs then: declare a Runtime after
 *   the host state its callables use (destroyed first), or close() it before that state goes.
 * - Like cgrt.h: one runtime is driven by one thread at a time; streams are `void *`.
 *
 * The C API stays available: Runtime::get() gives the cgrt_runtime for anything not wrapped here
 * (capture hooks, log sinks, cgrt_open_options.stream...). See docs/notes-i39-cpp.md for the
 * choices.
 */
#ifndef CGRT_CGRT_HPP
#define CGRT_CGRT_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cgrt.h"

namespace cgrt {

/*
 * A failed cgrt call: code() is the CGRT_E_* status, what() cgrt's sentence naming what is at
 * fault (cgrt_strerror(code) when cgrt gave none).
 */
class Error : public std::runtime_error {
public:
  Error(int code, const std::string &sentence)
      : std::runtime_error(sentence.empty() ? std::string(cgrt_strerror(code)) : sentence),
        code_(code) {
  }
  int code() const noexcept {
    return code_;
  }

private:
  int code_;
};

/* A module's forward or backward work: enqueue on ctx.stream, as cgrt_module_fn says. */
using ModuleFn = std::function<void(const cgrt_ctx &ctx, const cgrt_args &args)>;

/* A step's prepare or body: as cgrt_step_fn says. ctx.user belongs to this header: capture
   what the callable needs instead. */
using StepFn = std::function<void(const cgrt_ctx &ctx)>;

/* Work enqueued on a stream by enqueue_host(): runs later, on whatever thread runs the stream. */
using HostWork = std::function<void()>;

/* The optional fields of cgrt_module_desc (since 0.4 there). */
struct ModuleOptions {
  bool no_cp_comm = false;
  bool stages_inputs = false;
};

/* The fields of cgrt_step_desc besides phase, tokens and the callbacks. Pointers are read during
   step() only. */
struct StepOptions {
  const int32_t *seqlens = nullptr;
  int num_sequences = 0;
  int cp_size = 0;
  int microbatches = 0;
  const cgrt_buffer *buffers = nullptr;
  size_t num_buffers = 0;
  bool stages_inputs = false;
};

namespace detail {

struct State;

/* A module's callables, at a stable address for the runtime's life: the C module's `user`. */
struct ModuleRecord {
  State *state = nullptr;
  cgrt_module *handle = nullptr;
  ModuleFn forward;
  ModuleFn backward;
};

/*
 * What a Runtime owns: the C handle, the callables the C side points at, and the exception a
 * callable threw, kept until the wrapper that made the C call rethrows it. Heap-allocated so that
 * its address does not change when the Runtime object moves.
 */
struct State {
  cgrt_runtime *rt = nullptr;
  bool in_step = false;
  std::exception_ptr pending;
  std::vector<std::unique_ptr<ModuleRecord>> modules;
  std::vector<std::unique_ptr<HostWork>> host_work;
};

/* Called in a catch block: keeps the first exception of a C call (a failed capture runs the
   work again, which may throw again). */
inline void keep_exception(State *st) noexcept {
  if (!st->pending)
    st->pending = std::current_exception();
}

/* After a C call that may have run callables: rethrow what one threw, else throw on failure. */
inline void check(State *st, int rc, const cgrt_runtime *rt) {
  if (st->pending) {
    std::exception_ptr e = st->pending;
    st->pending = nullptr;
    std::rethrow_exception(e);
  }
  if (rc != 0)
    throw Error(rc, cgrt_last_error(rt));
}

/* For C calls that run no callable. */
inline void check(int rc, const cgrt_runtime *rt) {
  if (rc != 0)
    throw Error(rc, cgrt_last_error(rt));
}

inline int run_module(const cgrt_ctx *ctx, const cgrt_args *args, void *user,
                      bool backward) noexcept {
  ModuleRecord *rec = static_cast<ModuleRecord *>(user);
  try {
    if (backward)
      rec->backward(*ctx, *args);
    else
      rec->forward(*ctx, *args);
    return 0;
  } catch (...) {
    keep_exception(rec->state);
    return CGRT_E_CALLBACK;
  }
}

inline int module_forward(const cgrt_ctx *ctx, const cgrt_args *args, void *user) noexcept {
  return run_module(ctx, args, user, false);
}

inline int module_backward(const cgrt_ctx *ctx, const cgrt_args *args, void *user) noexcept {
  return run_module(ctx, args, user, true);
}

/* The callables of one step(), on its stack: the C step's `user`. */
struct StepCall {
  State *state;
  const StepFn *prepare;
  const StepFn *body;
};

inline int run_step_fn(const cgrt_ctx *ctx, State *st, const StepFn &fn) noexcept {
  try {
    fn(*ctx);
    return 0;
  } catch (...) {
    keep_exception(st);
    return CGRT_E_CALLBACK;
  }
}

inline int step_prepare(const cgrt_ctx *ctx, void *user) noexcept {
  StepCall *call = static_cast<StepCall *>(user);
  return run_step_fn(ctx, call->state, *call->prepare);
}

inline int step_body(const cgrt_ctx *ctx, void *user) noexcept {
  StepCall *call = static_cast<StepCall *>(user);
  return run_step_fn(ctx, call->state, *call->body);
}

/* noexcept: the work runs after the call that enqueued it has returned, maybe on another thread
   (CUDA's), where nothing could receive an exception; one ends the program (std::terminate). */
inline void run_host_work(void *arg) noexcept {
  (*static_cast<HostWork *>(arg))();
}

struct GraphCall {
  State *state;
  const std::function<void(const cgrt_graph_info &)> *fn;
};

inline int list_graph(void *user, const cgrt_graph_info *graph) noexcept {
  GraphCall *call = static_cast<GraphCall *>(user);
  try {
    (*call->fn)(*graph);
    return 0;
  } catch (...) {
    keep_exception(call->state);
    return 1; /* stops the listing */
  }
}

} // namespace detail

/*
 * A registered module (Runtime::register_module). A handle: copying it copies no module. Valid
 * until its runtime closes; a default-constructed one is empty.
 */
class Module {
public:
  Module() = default;

  /* The C module, for calls this header does not wrap. */
  cgrt_module *get() const noexcept {
    return rec_ ? rec_->handle : nullptr;
  }
  explicit operator bool() const noexcept {
    return rec_ != nullptr;
  }

  /*
   * cgrt_forward() from inside a step body, with the body's ctx; set args.struct_size. Throws
   * what the module's callable threw, else Error (CGRT_E_STATE outside a body, CGRT_E_REBIND,
   * CGRT_E_DEVICE..., CGRT_E_INVAL for an empty handle).
   */
  void forward(const cgrt_ctx &ctx, const cgrt_args &args) const {
    call(ctx, args, false);
  }

  /* The same with the arguments spelled out: key, buffers (read during the call), microbatch. */
  void forward(const cgrt_ctx &ctx, uint64_t key, std::initializer_list<cgrt_buffer> buffers = {},
               int microbatch = 0) const {
    call(ctx, make_args(key, buffers, microbatch), false);
  }

  /* cgrt_backward(): as forward(); Error CGRT_E_STATE if the module has no backward. */
  void backward(const cgrt_ctx &ctx, const cgrt_args &args) const {
    call(ctx, args, true);
  }
  void backward(const cgrt_ctx &ctx, uint64_t key, std::initializer_list<cgrt_buffer> buffers = {},
                int microbatch = 0) const {
    call(ctx, make_args(key, buffers, microbatch), true);
  }

private:
  friend class Runtime;
  explicit Module(detail::ModuleRecord *rec) : rec_(rec) {
  }

  static cgrt_args make_args(uint64_t key, std::initializer_list<cgrt_buffer> buffers,
                             int microbatch) {
    cgrt_args a{};
    a.struct_size = sizeof(a);
    a.key = key;
    a.microbatch = microbatch;
    a.buffers = buffers.size() ? buffers.begin() : nullptr;
    a.num_buffers = buffers.size();
    return a;
  }

  void call(const cgrt_ctx &ctx, const cgrt_args &args, bool backward) const {
    if (!rec_)
      throw Error(CGRT_E_INVAL, "cgrt::Module: forward or backward of an empty module handle");
    int rc = backward ? cgrt_backward(ctx.rt, rec_->handle, &ctx, &args)
                      : cgrt_forward(ctx.rt, rec_->handle, &ctx, &args);
    detail::check(rec_->state, rc, ctx.rt);
  }

  detail::ModuleRecord *rec_ = nullptr;
};

class HostFn;
inline void enqueue_host(const cgrt_ctx &ctx, const HostFn &fn);

/*
 * Host work registered with a runtime (Runtime::register_host_fn), kept until the runtime
 * closes, so that a graph that captured it can replay it any number of times. A handle; a
 * default-constructed one is empty.
 */
class HostFn {
public:
  HostFn() = default;
  explicit operator bool() const noexcept {
    return work_ != nullptr;
  }

private:
  friend class Runtime;
  friend void enqueue_host(const cgrt_ctx &ctx, const HostFn &fn);
  explicit HostFn(HostWork *work) : work_(work) {
  }
  HostWork *work_ = nullptr;
};

/*
 * cgrt_enqueue_host(): fn(arg) runs on ctx.stream after the work before it, or is captured and
 * runs at every replay. `arg` must stay valid until the work ran and every graph that captured
 * it is gone (cgrt_release_graphs, cgrt_close). Throws Error (CGRT_E_INVAL, CGRT_E_CAPTURE...).
 */
inline void enqueue_host(const cgrt_ctx &ctx, void (*fn)(void *arg), void *arg) {
  detail::check(cgrt_enqueue_host(&ctx, fn, arg), ctx.rt);
}

/*
 * Enqueues a registered HostFn on ctx.stream. Its callable reads the host state it needs when it
 * runs (a replay runs the one captured, with what it captured); it must not throw, and must not
 * call cgrt or CUDA. Throws Error (CGRT_E_INVAL for an empty handle, as the other overload).
 */
inline void enqueue_host(const cgrt_ctx &ctx, const HostFn &fn) {
  if (!fn.work_)
    throw Error(CGRT_E_INVAL, "cgrt::enqueue_host: an empty HostFn");
  enqueue_host(ctx, detail::run_host_work, fn.work_);
}

/* cgrt_alloc_async(): stream-ordered memory for a callable's temporaries. Throws Error
   (CGRT_E_INVAL, CGRT_E_NOMEM, CGRT_E_DEVICE). */
inline void *alloc_async(const cgrt_ctx &ctx, size_t bytes) {
  void *p = nullptr;
  detail::check(cgrt_alloc_async(&ctx, bytes, &p), ctx.rt);
  return p;
}

/* cgrt_free_async(): frees alloc_async() memory on the same ctx's stream. Throws Error. */
inline void free_async(const cgrt_ctx &ctx, void *ptr) {
  detail::check(cgrt_free_async(&ctx, ptr), ctx.rt);
}

/*
 * An open runtime, closed when the object is destroyed. Move-only; a moved-from or
 * default-constructed Runtime is inert: operator bool is false, get() NULL, close() does nothing,
 * and every other member throws Error(CGRT_E_STATE).
 */
class Runtime {
public:
  Runtime() noexcept = default;

  /* cgrt_open(): an INI file; NULL: CGRT_CONFIG or the embedded default. Throws Error with
     cgrt_last_error(NULL) (CGRT_E_IO, CGRT_E_CONFIG, CGRT_E_NOTFOUND, CGRT_E_NODEV...). */
  static Runtime open(const char *path = nullptr) {
    auto st = std::make_unique<detail::State>();
    detail::check(cgrt_open(&st->rt, path), nullptr);
    return Runtime(std::move(st));
  }
  static Runtime open(const std::string &path) {
    return open(path.c_str());
  }

  /* cgrt_open_string(): INI text. Throws Error as open(). */
  static Runtime open_string(const std::string &ini) {
    auto st = std::make_unique<detail::State>();
    detail::check(cgrt_open_string(&st->rt, ini.c_str()), nullptr);
    return Runtime(std::move(st));
  }

  /* cgrt_open_ex(): every option (a log sink, the host's stream...); set opts.struct_size; a log
     function and log_user must outlive the runtime. Throws Error as open(). */
  static Runtime open_ex(const cgrt_open_options &opts) {
    auto st = std::make_unique<detail::State>();
    detail::check(cgrt_open_ex(&st->rt, &opts), nullptr);
    return Runtime(std::move(st));
  }

  Runtime(Runtime &&other) noexcept = default;
  /* Closes what this object held (as the destructor), then takes other's runtime. */
  Runtime &operator=(Runtime &&other) noexcept {
    if (this != &other) {
      release();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;

  /*
   * cgrt_close(), ignoring its result: cgrt frees the runtime whatever teardown met, and the
   * destructor throws nothing. Destroyed inside one of its own steps (where cgrt_close refuses),
   * the runtime and its callables are left alive, never freed: the step still uses them.
   */
  ~Runtime() {
    release();
  }

  /*
   * Closes the runtime now (cgrt_close) and frees the callables; the object becomes inert. Throws
   * Error(CGRT_E_STATE) inside one of its own steps, and then keeps everything open. Throws
   * Error with the first teardown error (the stream's wait failed...) once everything is freed
   * anyway; the runtime being gone, what() has cgrt_strerror's text (cgrt's own sentence is in
   * its log at level debug). Does nothing on an inert Runtime.
   */
  void close() {
    if (!state_)
      return;
    if (state_->in_step)
      throw Error(CGRT_E_STATE, "cgrt::Runtime::close inside a step of the same runtime; close "
                                "it after the step");
    int rc = cgrt_close(state_->rt);
    state_.reset();
    if (rc != 0)
      throw Error(rc, std::string("cgrt_close: ") + cgrt_strerror(rc) +
                          " while tearing down; the runtime is freed all the same");
  }

  /* The C runtime, for calls this header does not wrap; NULL when inert. Do not close it. */
  cgrt_runtime *get() const noexcept {
    return state_ ? state_->rt : nullptr;
  }
  explicit operator bool() const noexcept {
    return state_ != nullptr;
  }

  /*
   * cgrt_module_register(): `forward` (required) and `backward` (empty: none) are kept until the
   * runtime closes. Throws Error (CGRT_E_INVAL: no forward, empty or duplicate name, bad kind;
   * CGRT_E_STATE inside a step) or std::bad_alloc.
   */
  Module register_module(const std::string &name, cgrt_kind kind, int layer, ModuleFn forward,
                         ModuleFn backward = nullptr, const ModuleOptions &opts = {}) {
    detail::State &st = live();
    if (!forward)
      throw Error(CGRT_E_INVAL,
                  "cgrt::Runtime::register_module: module '" + name + "' needs a forward callable");
    auto rec = std::make_unique<detail::ModuleRecord>();
    rec->state = &st;
    rec->forward = std::move(forward);
    rec->backward = std::move(backward);
    cgrt_module_desc d{};
    d.struct_size = sizeof(d);
    d.name = name.c_str();
    d.kind = kind;
    d.layer = layer;
    d.forward = detail::module_forward;
    d.backward = rec->backward ? detail::module_backward : nullptr;
    d.user = rec.get();
    d.no_cp_comm = opts.no_cp_comm ? 1 : 0;
    d.stages_inputs = opts.stages_inputs ? 1 : 0;
    st.modules.reserve(st.modules.size() + 1); /* push_back below cannot throw */
    detail::check(cgrt_module_register(st.rt, &d, &rec->handle), st.rt);
    st.modules.push_back(std::move(rec));
    return Module(st.modules.back().get());
  }

  /*
   * Keeps `work` until the runtime closes, for enqueue_host(ctx, handle). Register once (like a
   * module) and enqueue it as often as needed. Throws Error(CGRT_E_INVAL) for an empty callable,
   * std::bad_alloc.
   */
  HostFn register_host_fn(HostWork work) {
    detail::State &st = live();
    if (!work)
      throw Error(CGRT_E_INVAL, "cgrt::Runtime::register_host_fn: an empty callable");
    st.host_work.push_back(std::make_unique<HostWork>(std::move(work)));
    return HostFn(st.host_work.back().get());
  }

  /*
   * cgrt_step(): prepare (may be empty) and body (required) as cgrt_step_desc says; they need
   * live only during the call. Returns the step's report. Throws the exception a callable threw
   * during the step (the first one, the same object, even if cgrt ran the work again and it
   * succeeded then), else Error (CGRT_E_INVAL, CGRT_E_STATE for a nested step, CGRT_E_CALLBACK,
   * CGRT_E_CAPACITY, CGRT_E_REBIND, CGRT_E_DEVICE...). The runtime stays usable after either.
   */
  cgrt_step_report step(cgrt_phase phase, int64_t tokens, const StepFn &prepare, const StepFn &body,
                        const StepOptions &opts = {}) {
    detail::State &st = live();
    if (!body)
      throw Error(CGRT_E_INVAL, "cgrt::Runtime::step: the body is empty");
    detail::StepCall call{&st, &prepare, &body};
    cgrt_step_desc d{};
    d.struct_size = sizeof(d);
    d.phase = phase;
    d.tokens = tokens;
    d.seqlens = opts.seqlens;
    d.num_sequences = opts.num_sequences;
    d.cp_size = opts.cp_size;
    d.microbatches = opts.microbatches;
    d.buffers = opts.buffers;
    d.num_buffers = opts.num_buffers;
    d.prepare = prepare ? detail::step_prepare : nullptr;
    d.body = detail::step_body;
    d.user = &call;
    d.stages_inputs = opts.stages_inputs ? 1 : 0;
    cgrt_step_report rep{};
    rep.struct_size = sizeof(rep);
    /* Only `st` from here on: a callable may have moved or destroyed this object. */
    bool outer = st.in_step;
    st.in_step = true;
    int rc = cgrt_step(st.rt, &d, &rep);
    st.in_step = outer;
    detail::check(&st, rc, st.rt);
    return rep;
  }

  /* cgrt_stats_get(). Throws Error(CGRT_E_STATE) when inert. */
  cgrt_stats stats() const {
    detail::State &st = live();
    cgrt_stats s{};
    s.struct_size = sizeof(s);
    detail::check(cgrt_stats_get(st.rt, &s), st.rt);
    return s;
  }

  /* cgrt_synchronize(): waits for the stream. Throws Error (CGRT_E_STATE inside a step,
     CGRT_E_DEVICE). */
  void synchronize() {
    detail::State &st = live();
    detail::check(cgrt_synchronize(st.rt), st.rt);
  }

  /* cgrt_device_synchronize(): waits for the whole device, never during a capture of any runtime
     of the process. Throws Error (CGRT_E_CAPTURE from inside a capture, CGRT_E_STATE inside a
     step, CGRT_E_DEVICE). */
  void device_synchronize() {
    detail::State &st = live();
    detail::check(cgrt_device_synchronize(st.rt), st.rt);
  }

  /* cgrt_stream(): the stream cgrt runs on (a cudaStream_t on the cuda driver). Throws
     Error(CGRT_E_STATE) when inert. */
  void *stream() const {
    return cgrt_stream(live().rt);
  }

  /* cgrt_backend_name(), e.g. "local". Throws Error(CGRT_E_STATE) when inert. */
  std::string backend_name() const {
    return cgrt_backend_name(live().rt);
  }

  /* cgrt_backend_info_get(): the backend, its capabilities and what each phase gets. Throws
     Error(CGRT_E_STATE) when inert. */
  cgrt_backend_info backend_info() const {
    detail::State &st = live();
    cgrt_backend_info info{};
    info.struct_size = sizeof(info);
    detail::check(cgrt_backend_info_get(st.rt, &info), st.rt);
    return info;
  }

  /* cgrt_backend_figures(): the backend's own named counts, in its order. Throws Error. */
  std::vector<std::pair<std::string, uint64_t>> backend_figures() const {
    detail::State &st = live();
    std::vector<std::pair<std::string, uint64_t>> out;
    auto take = [](void *user, const char *name, uint64_t value) {
      static_cast<std::vector<std::pair<std::string, uint64_t>> *>(user)->emplace_back(name, value);
    };
    detail::check(cgrt_backend_figures(st.rt, take, &out), st.rt);
    return out;
  }

  /* cgrt_stats_format() of stats(): every figure by its name, as text or JSON. Throws
     Error(CGRT_E_STATE) when inert. */
  std::string stats_text(cgrt_stats_style style = CGRT_STATS_TEXT) const {
    cgrt_stats s = stats();
    int n = cgrt_stats_format(&s, style, nullptr, 0);
    if (n < 0)
      throw Error(n, cgrt_strerror(n));
    std::string out(static_cast<size_t>(n) + 1, '\0');
    cgrt_stats_format(&s, style, &out[0], out.size());
    out.resize(static_cast<size_t>(n));
    return out;
  }

  /* cgrt_config_get(): a value in force, as `cgrt check` prints it. Throws Error
     (CGRT_E_NOTFOUND: no such key). */
  std::string config_get(const std::string &section, const std::string &key) const {
    detail::State &st = live();
    std::vector<char> buf(256);
    for (;;) {
      int rc = cgrt_config_get(st.rt, section.c_str(), key.c_str(), buf.data(), buf.size());
      if (rc == 0)
        return std::string(buf.data());
      /* CGRT_E_INVAL with the buffer filled: the value was cut; try a larger buffer. */
      if (rc == CGRT_E_INVAL && std::strlen(buf.data()) + 1 == buf.size() &&
          buf.size() < (1u << 20)) {
        buf.resize(buf.size() * 2);
        continue;
      }
      throw Error(rc, cgrt_last_error(st.rt));
    }
  }

  /* cgrt_release_graphs_ex(): waits, frees every graph, returns what was freed. Throws Error
     (CGRT_E_STATE inside a step, CGRT_E_DEVICE). */
  cgrt_release_report release_graphs() {
    detail::State &st = live();
    cgrt_release_report r{};
    r.struct_size = sizeof(r);
    detail::check(cgrt_release_graphs_ex(st.rt, &r), st.rt);
    return r;
  }

  /* cgrt_module_release_key(): waits, frees module m's graphs of calls with this args.key,
     returns how many. Throws Error (CGRT_E_INVAL for an empty or another runtime's module,
     CGRT_E_STATE inside a step, CGRT_E_DEVICE). */
  size_t release_key(const Module &m, uint64_t key) {
    detail::State &st = live();
    size_t n = 0;
    detail::check(cgrt_module_release_key(st.rt, m.get(), key, &n), st.rt);
    return n;
  }

  /*
   * cgrt_graph_list(): calls fn once per live executable; `graph` (its strings too) is valid
   * during the call only. An exception fn throws stops the listing and is rethrown here; else
   * throws Error (CGRT_E_STATE inside a step).
   */
  void graph_list(const std::function<void(const cgrt_graph_info &graph)> &fn) {
    detail::State &st = live();
    detail::GraphCall call{&st, &fn};
    int rc = cgrt_graph_list(st.rt, detail::list_graph, &call);
    detail::check(&st, rc, st.rt);
  }

  /* The diagnose findings kept (cgrt_finding_get); their strings live until clear_findings() or
     close. Throws Error(CGRT_E_STATE) when inert. */
  std::vector<cgrt_finding> findings() const {
    detail::State &st = live();
    size_t n = 0;
    detail::check(cgrt_findings_count(st.rt, &n), st.rt);
    std::vector<cgrt_finding> out(n);
    for (size_t i = 0; i < n; i++) {
      out[i].struct_size = sizeof(cgrt_finding);
      detail::check(cgrt_finding_get(st.rt, i, &out[i]), st.rt);
    }
    return out;
  }

  /* cgrt_findings_clear(). Throws Error (CGRT_E_STATE inside a step). */
  void clear_findings() {
    detail::State &st = live();
    detail::check(cgrt_findings_clear(st.rt), st.rt);
  }

  /* cgrt_set_world_comm(): the host's ncclComm_t (NULL on the host driver). Throws Error
     (CGRT_E_INVAL, CGRT_E_UNSUPPORTED, CGRT_E_DEVICE). */
  void set_world_comm(void *world_comm) {
    detail::State &st = live();
    detail::check(cgrt_set_world_comm(st.rt, world_comm), st.rt);
  }

  /* cgrt_log_message(): a line of the host's own through cgrt's log sink. Throws
     Error(CGRT_E_STATE) when inert. */
  void log_message(cgrt_log_level level, const std::string &msg) {
    detail::State &st = live();
    detail::check(cgrt_log_message(st.rt, level, msg.c_str()), st.rt);
  }

private:
  explicit Runtime(std::unique_ptr<detail::State> st) noexcept : state_(std::move(st)) {
  }

  detail::State &live() const {
    if (!state_)
      throw Error(CGRT_E_STATE, "cgrt::Runtime: no runtime here (closed, moved from or never "
                                "opened)");
    return *state_;
  }

  /* The destructor's close: never throws. */
  void release() noexcept {
    if (!state_)
      return;
    if (state_->in_step) {
      (void)state_.release(); /* cgrt_close would refuse; the running step still uses both */
      return;
    }
    (void)cgrt_close(state_->rt);
    state_.reset();
  }

  std::unique_ptr<detail::State> state_;
};

} // namespace cgrt

#endif /* CGRT_CGRT_HPP */
