/*
 * bench_plugin.c - the table of libcgrt-bench.so (bench_plugin.h): the GPU workloads of `cgrt
 * bench` and `cgrt plan`, run from the command's parsed options.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "bench_plugin.h"
#include "tool.h"

static int bench(const struct bench_opts *o) {
  int is_chain = strcmp(o->workload, "chain") == 0;
  if (o->traffic)
    return bench_traffic(&bench_decode, o);
  if (o->explain)
    return bench_explain(is_chain ? &bench_chain : &bench_decode, o);
  if (strcmp(o->workload, "decode") == 0)
    return bench_gpu(&bench_decode, o);
  if (is_chain)
    return bench_gpu(&bench_chain, o);
  if (strcmp(o->workload, "train") == 0)
    return bench_train(o);
  if (strcmp(o->workload, "cp") == 0)
    return bench_cp(o);
  fprintf(stderr, "cgrt bench: workload '%s' is not a GPU workload (decode, chain, train, cp)\n",
          o->workload);
  return EXIT_UNUSABLE;
}

static int plan(const char *workload, const char *conf, plan_report_fn report, void *user) {
  if (strcmp(workload, "decode") == 0)
    return plan_decode(conf, report, user);
  if (strcmp(workload, "train") == 0)
    return plan_train(conf, report, user);
  fprintf(stderr, "cgrt plan: unknown workload '%s' (decode, train)\n", workload);
  return EXIT_UNUSABLE;
}

__attribute__((visibility("default"))) const struct cgrt_bench_plugin cgrt_bench_plugin_v1 = {
    .version = CGRT_BENCH_PLUGIN_VERSION,
    .struct_size = sizeof(struct cgrt_bench_plugin),
    .bench = bench,
    .plan = plan,
};
