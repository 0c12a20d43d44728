/*
 * host.cpp - host.c's checks in C++ through the installed cgrt/cgrt.hpp: two modules as
 * capturing lambdas whose host work counts its runs, train steps checked against the expected
 * modes, the runs counted after synchronize.
 *
 * usage: sdk_cpp_host IMPL DRIVER EXPECT
 *   EXPECT  one letter per step: E eager, W warmup, C capture, R replay
 * Exit: 0 as expected, 1 not, 77 no device for the cuda driver (skipped).
 */
#include <cstdio>
#include <cstring>
#include <string>

#include <cgrt/cgrt.hpp>

int main(int argc, char **argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: sdk_cpp_host IMPL DRIVER EXPECT\n");
    return 1;
  }
  long runs = 0; /* before the runtime: closing it may still run queued work */
  try {
    cgrt::Runtime rt = cgrt::Runtime::open_string(
        std::string("[cuda_graph]\nimpl = ") + argv[1] +
        "\nwarmup_steps = 2\n[runtime]\ndriver = " + argv[2] + "\nlog = warn\n");
    cgrt::HostFn tick = rt.register_host_fn([&runs] { runs++; });
    auto work = [tick](const cgrt_ctx &ctx, const cgrt_args &) { cgrt::enqueue_host(ctx, tick); };
    cgrt::Module m[2] = {rt.register_module("layer0.attn", CGRT_KIND_ATTN, 0, work),
                         rt.register_module("layer0.mlp", CGRT_KIND_MLP, 0, work)};
    const char *expect = argv[3];
    int steps = static_cast<int>(std::strlen(expect)), bad = 0;
    for (int s = 0; s < steps; s++) {
      cgrt_step_report rep = rt.step(CGRT_PHASE_TRAIN, 8, nullptr, [&m](const cgrt_ctx &ctx) {
        for (const cgrt::Module &mod : m)
          mod.forward(ctx, 1);
      });
      std::printf("step %d: %s\n", s, cgrt_mode_name(rep.mode));
      if ("EWCR"[rep.mode] != expect[s]) {
        std::printf("step %d: expected %c\n", s, expect[s]);
        bad = 1;
      }
    }
    rt.synchronize();
    if (runs != 2L * steps) {
      std::printf("the device ran %ld module works, expected %d\n", runs, 2 * steps);
      bad = 1;
    }
    rt.close();
    std::printf("%s\n", bad ? "FAILED" : "ok");
    return bad;
  } catch (const cgrt::Error &e) {
    std::printf("%s: %s\n", e.code() == CGRT_E_NODEV ? "SKIPPED" : "error", e.what());
    return e.code() == CGRT_E_NODEV ? 77 : 1;
  }
}
