/*
 * bench_light.c - `cgrt-bench-light CGRT SOURCE_DIR [--runs N]`: the light `cgrt` commands, timed
 * (issue 30). What needs no GPU must start fast and small: for each of `cgrt version`, `check
 * conf/local.ini --dry-run`, `buckets ...` and `info`, the warm wall time (median of N runs after
 * 3 unmeasured ones) and the peak resident memory (the largest ru_maxrss over the runs, from
 * wait4 of that very child), against at most 20 ms and 20 MB (10^6 bytes) each.
 *
 * A benchmark row printed by scripts/run.sh, not a test: it prints pass or FAIL and exits 0
 * whatever it measured (a loaded machine is slower). A small C program and not a script: a child's
 * ru_maxrss starts at its parent's resident size (the kernel keeps the larger of the two at exec),
 * so the parent must be small. On a machine that shows an NVIDIA GPU driver, `info` asks the cuda
 * driver (CUDA runtime, NCCL) by design, and the target is not applied to it. Not installed.
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tool_args.h"

#define TARGET_MS 20.0
#define TARGET_MB 20.0
#define WARMUP    3
#define MAX_RUNS  1001

extern char **environ;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Runs argv `runs` times (output discarded): median wall ms, peak RSS MB, first failing status. */
static int measure(char **argv, int runs, double *ms, double *mb, int *status) {
  static double walls[MAX_RUNS];
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  *mb = 0;
  *status = 0;
  for (int i = 0; i < WARMUP + runs; i++) {
    pid_t pid;
    int st = 0;
    struct rusage ru;
    double t0 = now_ms();
    if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0 || wait4(pid, &st, 0, &ru) < 0) {
      perror(argv[0]);
      posix_spawn_file_actions_destroy(&fa);
      return -1;
    }
    double t1 = now_ms();
    if (!*status && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
      *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (i < WARMUP)
      continue;
    walls[i - WARMUP] = t1 - t0;
    double peak = (double)ru.ru_maxrss * 1024.0 / 1e6; /* ru_maxrss: KiB on Linux */
    if (peak > *mb)
      *mb = peak;
  }
  posix_spawn_file_actions_destroy(&fa);
  qsort(walls, (size_t)runs, sizeof(walls[0]), cmp_double);
  *ms = walls[runs / 2];
  return 0;
}

static int gpu_driver_present(void) {
  return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0 ||
         access("/dev/dxg", F_OK) == 0;
}

int main(int argc, char **argv) {
  int runs = 21;
  const char *cgrt = NULL, *src = NULL;
  for (int i = 1; i < argc; i++) {
    int64_t v;
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      if (tool_opt_int("cgrt-bench-light", "--runs", argv[++i], 1, MAX_RUNS, &v) != 0)
        return 2;
      runs = (int)v;
    } else if (!cgrt && argv[i][0] != '-') {
      cgrt = argv[i];
    } else if (!src && argv[i][0] != '-') {
      src = argv[i];
    } else {
      fprintf(stderr, "cgrt-bench-light: '%s' is not an argument it takes\n", argv[i]);
      cgrt = NULL;
      break;
    }
  }
  if (!cgrt || !src) {
    fprintf(stderr, "usage: cgrt-bench-light CGRT SOURCE_DIR [--runs N (1 to %d)]\n", MAX_RUNS);
    return 2;
  }
  char conf[4096];
  snprintf(conf, sizeof(conf), "%s/conf/local.ini", src);
  int gpu = gpu_driver_present();
  struct {
    const char *name;
    char *args[8];
    int target;
  } rows[] = {
      {"version", {"version"}, 1},
      {"check conf/local.ini --dry-run", {"check", conf, "--dry-run"}, 1},
      {"buckets --max-tokens 512 --num-graphs 8",
       {"buckets", "--max-tokens", "512", "--num-graphs", "8"},
       1},
      {gpu ? "info (GPU driver seen: asks cuda)" : "info", {"info"}, !gpu},
  };
  printf("light cgrt commands (%s): warm wall time, median of %d runs, and peak RSS; target: at "
         "most %.0f ms and %.0f MB each\n",
         cgrt, runs, TARGET_MS, TARGET_MB);
  printf("  %-48s %8s %7s  %s\n", "command", "wall_ms", "rss_MB", "result");
  for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
    char *cmd[10] = {(char *)cgrt};
    for (int k = 0; k < 8 && rows[r].args[k]; k++)
      cmd[k + 1] = rows[r].args[k];
    double ms = 0, mb = 0;
    int status = 0;
    if (measure(cmd, runs, &ms, &mb, &status) != 0)
      return 2;
    char result[64];
    if (status)
      snprintf(result, sizeof(result), "FAIL (exit %d)", status);
    else if (!rows[r].target)
      snprintf(result, sizeof(result), "(no target)");
    else
      snprintf(result, sizeof(result), "%s", ms <= TARGET_MS && mb <= TARGET_MB ? "pass" : "FAIL");
    printf("  cgrt %-43s %8.2f %7.2f  %s\n", rows[r].name, ms, mb, result);
  }
  return 0;
}
