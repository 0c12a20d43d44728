/*
 * step_path.c - the host's cost of one cgrt_step (issue 43, item 5), on the host driver, for
 * callgrind: `valgrind --tool=callgrind --collect-atstart=no build/bin/cgrt-step-path block`
 * counts the instructions of STEPS steady steps only (warm-up and capture excluded, through
 * callgrind's client requests); `callgrind_annotate --inclusive=yes` then splits them per stage
 * (docs/decisions.md, issue 43, has the table and the commands). Run as a test it checks only
 * that every steady step replays.
 *
 * The host: LAYERS modules (kind mlp), each "kernel" a host function; prepare one more; 8 tokens
 * a step (a bucket of its own: no padding). Scope `block` (conf/local_block.ini's backend
 * options, one graph a step) or `layer` (one graph per module call). `bytime`: block scope with
 * `[local] by_time = on` and 5 tokens a step (padded to bucket 8, so followed): 200 steps of
 * warm-up let its first probe round end (the host driver's times are all 0 without a cost model,
 * so the bucket stays), and the steady steps are by_time's untimed path (its next round is 2048
 * steps away). `block` and `layer` set by_time off (on by default since session 41), so that they
 * stay the baseline by_time is compared with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrt/cgrt.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_TOGGLE_COLLECT
#define CALLGRIND_TOGGLE_COLLECT
#endif

#define LAYERS 4
#define STEPS  1000

struct host {
  cgrt_runtime *rt;
  cgrt_module *m[LAYERS];
  int64_t tokens;
  volatile long sink;
};

static void kernel(void *arg) {
  ((struct host *)arg)->sink++;
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, kernel, user);
}

static int prepare(const cgrt_ctx *ctx, void *user) {
  return cgrt_enqueue_host(ctx, kernel, user);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_args a = {.struct_size = sizeof(a)};
  for (int i = 0; i < LAYERS; i++) {
    int rc = cgrt_forward(h->rt, h->m[i], ctx, &a);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static int step(struct host *h, cgrt_step_report *rep) {
  cgrt_step_desc d = {.struct_size = sizeof(d),
                      .phase = CGRT_PHASE_INFER,
                      .tokens = h->tokens,
                      .prepare = prepare,
                      .body = body,
                      .user = h};
  *rep = (cgrt_step_report){.struct_size = sizeof(*rep)};
  return cgrt_step(h->rt, &d, rep);
}

int main(int argc, char **argv) {
  const char *scope = argc > 1 ? argv[1] : "block";
  int bytime = strcmp(scope, "bytime") == 0;
  if (strcmp(scope, "block") != 0 && strcmp(scope, "layer") != 0 && !bytime) {
    fprintf(stderr, "usage: cgrt-step-path [block|layer|bytime]\n");
    return 2;
  }
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\nwarmup_steps = 2\ninference_scope = %s\nmax_graphs = 64\n"
           "[inference]\nbuckets = list\nlist = 1 2 4 8 16 32 64 128\nmax_tokens = 128\n%s"
           "[runtime]\ndriver = host\nlog = warn\n",
           bytime ? "block" : scope,
           bytime ? "[local]\nby_time = on\n" : "[local]\nby_time = off\n");
  struct host h = {.tokens = bytime ? 5 : 8};
  if (cgrt_open_string(&h.rt, ini) != 0) {
    fprintf(stderr, "cgrt-step-path: open: %s\n", cgrt_last_error(NULL));
    return 1;
  }
  for (int i = 0; i < LAYERS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d.mlp", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .layer = i,
                          .forward = module_fwd,
                          .user = &h};
    if (cgrt_module_register(h.rt, &d, &h.m[i]) != 0) {
      fprintf(stderr, "cgrt-step-path: register: %s\n", cgrt_last_error(h.rt));
      return 1;
    }
  }
  cgrt_step_report rep;
  int rc = 0;
  for (int i = 0; rc == 0 && i < (bytime ? 200 : 10); i++) /* warm-up, capture (a probe round) */
    rc = step(&h, &rep);
  int replays = 0;
  CALLGRIND_TOGGLE_COLLECT;
  for (int i = 0; rc == 0 && i < STEPS; i++) {
    rc = step(&h, &rep);
    replays += rep.mode == CGRT_MODE_REPLAY;
  }
  CALLGRIND_TOGGLE_COLLECT;
  if (rc == 0)
    rc = cgrt_synchronize(h.rt);
  if (rc != 0) {
    fprintf(stderr, "cgrt-step-path: step: %s\n", cgrt_last_error(h.rt));
    return 1;
  }
  cgrt_close(h.rt);
  printf("cgrt-step-path: scope %s, %d steps, %d replayed\n", scope, STEPS, replays);
  return replays == STEPS ? 0 : 1;
}
