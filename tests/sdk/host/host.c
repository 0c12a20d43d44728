/*
 * host.c - a minimal host application of the installed SDK: opens a runtime with the backend it
 * is given, registers two modules whose device work counts its runs, runs train steps and checks
 * what each step did against the expected modes.
 *
 * usage: sdk_host IMPL DRIVER BACKEND_PATH EXPECT [EXTRA]
 *   EXPECT  one letter per step: E eager, W warmup, C capture, R replay
 *   EXTRA   more [cuda_graph] lines and sections, "\n" written as two characters
 * Exit: 0 as expected, 1 not, 77 no device for the cuda driver (skipped).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cgrt/cgrt.h>

static long device_runs;

static void tick(void *arg) {
  (void)arg;
  device_runs++;
}

static int module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  (void)user;
  return cgrt_enqueue_host(ctx, tick, NULL);
}

struct host {
  cgrt_runtime *rt;
  cgrt_module *m[2];
};

static int body(const cgrt_ctx *ctx, void *user) {
  struct host *h = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  for (int i = 0; i < 2; i++) {
    int rc = cgrt_forward(h->rt, h->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static void log_line(void *user, cgrt_log_level level, const char *msg) {
  (void)user;
  (void)level;
  printf("log: %s\n", msg);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: sdk_host IMPL DRIVER BACKEND_PATH EXPECT [EXTRA]\n");
    return 1;
  }
  char extra[1024] = "";
  if (argc > 5) {
    size_t j = 0;
    for (const char *p = argv[5]; *p && j + 1 < sizeof(extra); p++)
      if (p[0] == '\\' && p[1] == 'n') {
        extra[j++] = '\n';
        p++;
      } else {
        extra[j++] = *p;
      }
    extra[j] = '\0';
  }
  char ini[4096];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = %s\nbackend_path = %s\nwarmup_steps = 2\n%s\n"
           "[runtime]\ndriver = %s\nlog = info\n",
           argv[1], argv[3], extra, argv[2]);
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = log_line};
  struct host h = {0};
  int rc = cgrt_open_ex(&h.rt, &o);
  if (rc == CGRT_E_NODEV) {
    printf("SKIPPED: %s\n", cgrt_last_error(NULL));
    return 77;
  }
  if (rc != 0) {
    printf("open failed: %s\n", cgrt_last_error(NULL));
    return 1;
  }
  static const char *const names[] = {"layer0.attn", "layer0.mlp"};
  for (int i = 0; i < 2; i++) {
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = names[i],
                          .kind = i ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .forward = module};
    if (cgrt_module_register(h.rt, &d, &h.m[i]) != 0)
      return printf("register: %s\n", cgrt_last_error(h.rt)), 1;
  }
  const char *expect = argv[4];
  int steps = (int)strlen(expect), bad = 0;
  for (int s = 0; s < steps; s++) {
    cgrt_step_desc d = {
        .struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .tokens = 8, .body = body, .user = &h};
    cgrt_step_report rep = {.struct_size = sizeof(rep)};
    if (cgrt_step(h.rt, &d, &rep) != 0)
      return printf("step %d: %s\n", s, cgrt_last_error(h.rt)), 1;
    char got = "EWCR"[rep.mode];
    printf("step %d: %s\n", s, cgrt_mode_name(rep.mode));
    if (got != expect[s]) {
      printf("step %d: expected %c, got %c\n", s, expect[s], got);
      bad = 1;
    }
  }
  if (cgrt_synchronize(h.rt) != 0)
    return printf("sync: %s\n", cgrt_last_error(h.rt)), 1;
  if (device_runs != 2L * steps) {
    printf("the device ran %ld module works, expected %d\n", device_runs, 2 * steps);
    bad = 1;
  }
  cgrt_close(h.rt);
  printf("%s\n", bad ? "FAILED" : "ok");
  return bad;
}
