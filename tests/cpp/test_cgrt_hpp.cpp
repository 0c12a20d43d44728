/*
 * test_cgrt_hpp.cpp - the C++ header (cgrt/cgrt.hpp) on the host driver: open failures as
 * cgrt::Error, modules and host work as capturing lambdas, a 3-layer toy (y = 2x + 1 per layer)
 * for 20 steps under impl = none and impl = local (warmup, capture, replays), exceptions thrown in
 * callables coming out of step() unchanged, and moves.
 *
 * A plain main(): each CHECK that fails prints its line; the exit status is the number of them.
 */
#include <cgrt/cgrt.hpp>

#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* Fails the test when `what` returns instead of throwing E; returns the exception caught. */
template <class E, class F> static E expect_throw(int line, F what) {
  try {
    what();
  } catch (const E &e) {
    return e;
  }
  std::fprintf(stderr, "%s:%d: expected an exception, none was thrown\n", __FILE__, line);
  failures++;
  throw std::logic_error("expected an exception");
}

static bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

static std::string ini_for(const std::string &cuda_graph) {
  return "[cuda_graph]\n" + cuda_graph + "\nwarmup_steps = 2\n" +
         "[runtime]\ndriver = host\nlog = off\n[host]\nnan_check = off\n";
}

/* Thrown by a module's lambda: a type cgrt knows nothing of, not even a std::exception. */
struct LayerRefused {
  int layer;
  std::string why;
};

constexpr int kLayers = 3;
constexpr int kSteps = 20;

/*
 * The toy: act[0] is the input, act[l + 1] = 2 * act[l] + 1 the output of layer l. All the work
 * is host work enqueued on ctx.stream, so (the host driver running a stream when it is
 * synchronized) it only reads what runs in stream order. Not movable: the lambdas capture `this`.
 * The runtime is the last member, so destroyed first: closing runs the work still queued, which
 * uses the members above it.
 */
struct Toy {
  std::array<int64_t, kLayers + 1> act{};
  std::vector<int64_t> inputs; /* the input of each step, staged in stream order */
  size_t staged = 0;
  std::vector<int64_t> outputs; /* act[kLayers] after each body, in stream order */
  std::array<cgrt::Module, kLayers> layers;
  std::array<cgrt::HostFn, kLayers> work;
  cgrt::HostFn stage, collect;
  int module_calls = 0;       /* the modules' lambdas run (not their replays) */
  int refuse_layer = -1;      /* the layer whose lambda throws LayerRefused */
  bool backward_here = false; /* the body calls backward of a module without one */
  cgrt::Runtime rt;

  explicit Toy(const std::string &cuda_graph)
      : rt(cgrt::Runtime::open_string(ini_for(cuda_graph))) {
    stage = rt.register_host_fn([this] { act[0] = inputs[staged++]; });
    collect = rt.register_host_fn([this] { outputs.push_back(act[kLayers]); });
    for (int l = 0; l < kLayers; l++) {
      work[l] = rt.register_host_fn([this, l] { act[l + 1] = 2 * act[l] + 1; });
      layers[l] =
          rt.register_module("layer" + std::to_string(l) + (l % 2 ? ".mlp" : ".attn"),
                             l % 2 ? CGRT_KIND_MLP : CGRT_KIND_ATTN, l,
                             [this, l](const cgrt_ctx &ctx, const cgrt_args &) {
                               module_calls++;
                               if (refuse_layer == l)
                                 throw LayerRefused{l, "layer " + std::to_string(l) + " refuses"};
                               cgrt::enqueue_host(ctx, work[l]);
                             });
    }
  }
  Toy(const Toy &) = delete;
  Toy &operator=(const Toy &) = delete;

  cgrt_step_report step(int64_t input) {
    inputs.push_back(input);
    return rt.step(
        CGRT_PHASE_TRAIN, 8, [this](const cgrt_ctx &ctx) { cgrt::enqueue_host(ctx, stage); },
        [this](const cgrt_ctx &ctx) {
          for (const cgrt::Module &m : layers)
            m.forward(ctx, 1);
          if (backward_here)
            layers[0].backward(ctx, 1);
          cgrt::enqueue_host(ctx, collect);
        });
  }
};

static int64_t expected(int64_t x) {
  for (int l = 0; l < kLayers; l++)
    x = 2 * x + 1;
  return x;
}

static void open_failures() {
  cgrt::Error e =
      expect_throw<cgrt::Error>(__LINE__, [] { cgrt::Runtime::open("/nonexistent/x.ini"); });
  CHECK(e.code() == CGRT_E_IO);
  CHECK(std::string(e.what()) == cgrt_last_error(nullptr));
  CHECK(contains(e.what(), "/nonexistent/x.ini"));

  e = expect_throw<cgrt::Error>(__LINE__, [] {
    cgrt::Runtime::open_string("[cuda_graph]\nwarmup_step = 2\n[runtime]\ndriver = host\n");
  });
  CHECK(e.code() == CGRT_E_CONFIG);
  CHECK(contains(e.what(), "did you mean 'warmup_steps'"));

  cgrt_open_options o{};
  e = expect_throw<cgrt::Error>(__LINE__, [&] { cgrt::Runtime::open_ex(o); }); /* no struct_size */
  CHECK(e.code() == CGRT_E_INVAL);
  CHECK(contains(e.what(), "struct_size"));
}

/* 20 steps; every output read after one synchronize at the end. */
static void toy_runs(const char *cuda_graph, const char *modes) {
  Toy toy(cuda_graph);
  for (int s = 0; s < kSteps; s++) {
    cgrt_step_report rep = toy.step(1000 + s);
    char want = modes[s < 3 ? s : 3];
    if ("EWCR"[rep.mode] != want) {
      std::fprintf(stderr, "%s, step %d: %s, expected %c\n", cuda_graph, s,
                   cgrt_mode_name(rep.mode), want);
      failures++;
    }
  }
  CHECK(toy.outputs.empty()); /* nothing ran yet: the host driver runs work when synchronized */
  toy.rt.synchronize();
  CHECK(toy.outputs.size() == static_cast<size_t>(kSteps));
  for (size_t s = 0; s < toy.outputs.size(); s++)
    if (toy.outputs[s] != expected(1000 + static_cast<int64_t>(s))) {
      std::fprintf(stderr, "%s, step %zu: output %lld, expected %lld\n", cuda_graph, s,
                   static_cast<long long>(toy.outputs[s]),
                   static_cast<long long>(expected(1000 + static_cast<int64_t>(s))));
      failures++;
    }
  cgrt_stats st = toy.rt.stats();
  CHECK(st.steps == static_cast<uint64_t>(kSteps));
  CHECK(toy.rt.stream() != nullptr);
  cgrt_backend_info bi = toy.rt.backend_info();
  CHECK(toy.rt.backend_name() == bi.name);
  CHECK(bi.phases[CGRT_PHASE_INFER] != CGRT_RUN_CORE_EAGER); /* none and local infer themselves */
  std::string text = toy.rt.stats_text(), json = toy.rt.stats_text(CGRT_STATS_JSON);
  CHECK(text.find("\nsteps " + std::to_string(kSteps) + "\n") != std::string::npos);
  CHECK(json.front() == '{' && json.back() == '}');
  if (modes[3] == 'R') {
    /* warmup twice, capture once: the lambdas ran 3 times per layer, replays did the rest */
    CHECK(toy.module_calls == 3 * kLayers);
    CHECK(toy.rt.backend_name() == "local");
    CHECK(toy.rt.config_get("cuda_graph", "impl") == "local");
    CHECK(toy.rt.config_get("cuda_graph", "warmup_steps") == "2");
    int graphs = 0;
    toy.rt.graph_list([&](const cgrt_graph_info &g) {
      graphs++;
      CHECK(g.module != nullptr);
    });
    CHECK(graphs == kLayers);
    /* an exception thrown by the listing's lambda comes out of graph_list */
    std::out_of_range r = expect_throw<std::out_of_range>(__LINE__, [&] {
      toy.rt.graph_list([](const cgrt_graph_info &) { throw std::out_of_range("enough"); });
    });
    CHECK(std::string(r.what()) == "enough");
    /* one module's graphs of one key: the body's calls use key 1 */
    CHECK(toy.rt.release_key(toy.layers[0], 1) == 1);
    CHECK(toy.rt.release_key(toy.layers[0], 1) == 0);
    cgrt::Error k =
        expect_throw<cgrt::Error>(__LINE__, [&] { toy.rt.release_key(cgrt::Module(), 1); });
    CHECK(k.code() == CGRT_E_INVAL);
    CHECK(toy.rt.release_graphs().graphs == static_cast<uint64_t>(kLayers - 1));
  } else {
    CHECK(toy.module_calls == kSteps * kLayers);
  }
  cgrt::Error e =
      expect_throw<cgrt::Error>(__LINE__, [&] { toy.rt.config_get("cuda_graph", "nosuch"); });
  CHECK(e.code() == CGRT_E_NOTFOUND);
  toy.rt.close();
  CHECK(!toy.rt);
}

/*
 * A module's lambda throws at step `at` (under local, step 2 is its capture: cgrt runs the call
 * again eagerly and it throws again): step() throws that very exception; the steps after it work.
 */
static void module_exception(const char *cuda_graph, int at) {
  Toy toy(cuda_graph);
  std::vector<int64_t> want;
  for (int s = 0; s < 8; s++) {
    toy.refuse_layer = s == at ? 1 : -1;
    if (s != at) {
      toy.step(1000 + s);
      want.push_back(expected(1000 + s));
      continue;
    }
    LayerRefused r = expect_throw<LayerRefused>(__LINE__, [&] { toy.step(1000 + s); });
    CHECK(r.layer == 1);
    CHECK(r.why == "layer 1 refuses");
  }
  toy.rt.synchronize();
  CHECK(toy.outputs == want);

  /* A step callable's std::exception, from prepare and from the body. */
  std::invalid_argument p = expect_throw<std::invalid_argument>(__LINE__, [&] {
    toy.rt.step(
        CGRT_PHASE_TRAIN, 8, [](const cgrt_ctx &) { throw std::invalid_argument("bad batch"); },
        [](const cgrt_ctx &) {});
  });
  CHECK(std::string(p.what()) == "bad batch");
  std::length_error b = expect_throw<std::length_error>(__LINE__, [&] {
    toy.rt.step(CGRT_PHASE_TRAIN, 8, nullptr,
                [](const cgrt_ctx &) { throw std::length_error("too long"); });
  });
  CHECK(std::string(b.what()) == "too long");

  /* A cgrt call refused inside the body: cgrt::Error with its code and sentence. */
  toy.backward_here = true;
  cgrt::Error e = expect_throw<cgrt::Error>(__LINE__, [&] { toy.step(2000); });
  CHECK(e.code() == CGRT_E_STATE);
  CHECK(contains(e.what(), "layer0.attn"));
  toy.backward_here = false;

  /* Closing inside one of its own steps is refused; the runtime goes on. */
  e = expect_throw<cgrt::Error>(__LINE__, [&] {
    toy.rt.step(CGRT_PHASE_TRAIN, 8, nullptr, [&](const cgrt_ctx &) { toy.rt.close(); });
  });
  CHECK(e.code() == CGRT_E_STATE);
  CHECK(toy.rt);

  toy.outputs.clear();
  toy.step(3000);
  toy.rt.device_synchronize(); /* the whole device: on the host driver, every stream runs */
  CHECK(toy.outputs.size() == 1 && toy.outputs[0] == expected(3000));
  /* Inside a step it throws, as synchronize does. */
  e = expect_throw<cgrt::Error>(__LINE__, [&] {
    toy.rt.step(CGRT_PHASE_TRAIN, 8, nullptr,
                [&](const cgrt_ctx &) { toy.rt.device_synchronize(); });
  });
  CHECK(e.code() == CGRT_E_STATE);
}

static void moves() {
  cgrt::Runtime none;
  CHECK(!none && none.get() == nullptr);
  none.close(); /* nothing to close */

  cgrt::Runtime a = cgrt::Runtime::open_string(ini_for("impl = none"));
  cgrt_runtime *handle = a.get();
  int runs = 0;
  cgrt::HostFn count = a.register_host_fn([&runs] { runs++; });
  cgrt::Module m =
      a.register_module("solo", CGRT_KIND_OTHER, -1, [&](const cgrt_ctx &ctx, const cgrt_args &) {
        cgrt::enqueue_host(ctx, count);
      });
  cgrt::Runtime b = std::move(a);
  CHECK(!a && a.get() == nullptr);
  CHECK(b && b.get() == handle);
  cgrt::Error e = expect_throw<cgrt::Error>(__LINE__, [&] { a.synchronize(); });
  CHECK(e.code() == CGRT_E_STATE);
  e = expect_throw<cgrt::Error>(
      __LINE__, [&] { a.step(CGRT_PHASE_TRAIN, 8, nullptr, [](const cgrt_ctx &) {}); });
  CHECK(e.code() == CGRT_E_STATE);
  a.close(); /* inert: nothing happens */

  /* Handles registered before the move still work through the new owner. */
  b.step(CGRT_PHASE_TRAIN, 8, nullptr, [&](const cgrt_ctx &ctx) { m.forward(ctx, 1); });
  b.synchronize();
  CHECK(runs == 1);

  /* Move assignment closes what b held (running the work still queued, whose callable lives
     until then) and takes a fresh runtime. */
  b.step(CGRT_PHASE_TRAIN, 8, nullptr, [&](const cgrt_ctx &ctx) { m.forward(ctx, 1); });
  CHECK(runs == 1);
  b = cgrt::Runtime::open_string(ini_for("impl = local\nmodules ="));
  CHECK(runs == 2);
  CHECK(b && b.get() != nullptr);
  CHECK(b.backend_name() == "local");
  cgrt::Runtime c(std::move(b));
  CHECK(!b && c);
  c.close();
  CHECK(!c);
}

int main() {
  try {
    open_failures();
    toy_runs("impl = none", "EEEE");
    toy_runs("impl = local\nmodules =", "WWCR");
    module_exception("impl = none", 3);
    module_exception("impl = local\nmodules =", 2);
    moves();
  } catch (const cgrt::Error &e) {
    std::fprintf(stderr, "unexpected Error %d: %s\n", e.code(), e.what());
    failures++;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    failures++;
  } catch (...) {
    std::fprintf(stderr, "unexpected exception of another type\n");
    failures++;
  }
  if (failures)
    std::fprintf(stderr, "%d failure(s)\n", failures);
  else
    std::printf("ok\n");
  return failures ? 1 : 0;
}
