/* cgrt.c - the `cgrt` command: inspect the installation, check configs, print buckets, bench,
 * plan graph memory, test a backend's conformance. It links libcgrt alone; the GPU workloads of
 * bench and plan are loaded on demand (bench_plugin.h). */
#include <stdio.h>
#include <string.h>

#include "cgrt/cgrt.h"
#include "tool.h"

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: cgrt COMMAND [ARGS]\n"
      "\n"
      "  info [--probe]            versions, drivers, devices and the cores near each GPU,\n"
      "                            backends found (the cuda driver is asked only when an\n"
      "                            NVIDIA GPU driver is seen, or with --probe)\n"
      "  check FILE [--dry-run]    validate a config; print warnings and the normalized\n"
      "                            config; --dry-run also loads the backend on the host\n"
      "                            driver and prints its plan (exit 0 valid, 1 invalid,\n"
      "                            2 unusable)\n"
      "  buckets [FILE] [--max-tokens N] [--num-graphs K] [--tp T]\n"
      "          [--dist exponential|linear|list] [--list 'A B ...']\n"
      "                            the inference token buckets, largest first\n"
      "  buckets --histogram FILE --num-graphs K [--tp T] [--max-tokens N]\n"
      "                            the K buckets that pad FILE's traffic least, against the\n"
      "                            exponential and linear sets\n"
      "  bench [FILE] [--workload decode|chain|train|cp|dispatch] [--tokens 'LIST'] [--steps N]\n"
      "        [--traffic FILE] [--json]\n"
      "                            a workload under the configured backend against eager\n"
      "                            and the raw-graph floor (decode, chain: GPU); --traffic:\n"
      "                            replay a file of token counts through decode\n"
      "  plan FILE [--workload decode|train] [--json]\n"
      "                            capture every graph the config would build (GPU) and\n"
      "                            print each one's memory, nodes and build time\n"
      "  test-backend NAME|PATH [FILE] [--verbose] [--driver host|cuda]\n"
      "                            the conformance run of a backend (built in or not, by\n"
      "                            name or path): fixed scenarios on the host driver, and\n"
      "                            the cuda driver with a GPU, each step's outputs compared\n"
      "                            bit for bit with impl = none; FILE's sections apply\n"
      "                            (exit 0 all pass, 1 any fails, 2 unusable)\n"
      "  version                   print the version\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_UNUSABLE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "info") == 0)
    return cmd_info(argc - 1, argv + 1);
  if (strcmp(cmd, "check") == 0)
    return cmd_check(argc - 1, argv + 1);
  if (strcmp(cmd, "buckets") == 0)
    return cmd_buckets(argc - 1, argv + 1);
  if (strcmp(cmd, "bench") == 0)
    return cmd_bench(argc - 1, argv + 1);
  if (strcmp(cmd, "plan") == 0)
    return cmd_plan(argc - 1, argv + 1);
  if (strcmp(cmd, "test-backend") == 0)
    return cmd_test_backend(argc - 1, argv + 1);
  int version = strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0;
  int help = strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0;
  if ((version || help) && argc > 2) {
    fprintf(stderr, "cgrt %s: takes no arguments, but '%s' was given; usage: cgrt %s\n", cmd,
            argv[2], cmd);
    return EXIT_UNUSABLE;
  }
  if (version) {
    printf("cgrt %s\n", cgrt_version());
    return 0;
  }
  if (help) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "cgrt: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return EXIT_UNUSABLE;
}
