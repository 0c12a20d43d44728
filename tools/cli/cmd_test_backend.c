/*
 * cmd_test_backend.c - `cgrt test-backend NAME|PATH [FILE]`: the conformance run of a backend,
 * built in or third party, by name (on the backend path) or by path. Fixed scenarios (training,
 * evaluation, inference over every bucket, moved buffers under every rebind policy, release,
 * close with graphs alive, stats, describe and check, failed captures, failing callbacks) run a
 * synthetic model on the host driver, then on the cuda driver when a GPU is there, and every
 * step's outputs are compared bit for bit with `impl = none` (../conformance/).
 *
 * FILE, if given, is a configuration whose every section applies, its [cuda_graph] impl replaced
 * by the backend under test and its [runtime] driver by the driver of each pass. Without FILE:
 * warmup_steps = 2, nan_check = off (a whole-step backend needs it) and every other default.
 *
 * Prints one line per scenario, "PASS [driver] name" or "FAIL [driver] name: reason", then
 * "N passed, N failed". Exit: 0 all passed, 1 any failed, 2 unusable (bad usage, an unreadable
 * or invalid FILE, a backend that cannot be found).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conformance.h"
#include "tool.h"
#include "tool_args.h"

#define USAGE "usage: cgrt test-backend NAME|PATH [FILE] [--verbose] [--driver host|cuda]\n"

struct tally {
  int passed, failed, skipped;
};

/* ---------------------------------------------------------------- the configuration */

struct text {
  char *s;
  size_t n, cap;
  int failed;
};

static void put(struct text *t, const char *s) {
  size_t k = strlen(s);
  if (t->failed)
    return;
  if (t->n + k + 2 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    while (cap < t->n + k + 2)
      cap *= 2;
    char *v = realloc(t->s, cap);
    if (!v) {
      t->failed = 1;
      return;
    }
    t->s = v;
    t->cap = cap;
  }
  memcpy(t->s + t->n, s, k);
  t->n += k;
  t->s[t->n++] = '\n';
  t->s[t->n] = '\0';
}

/* The section a line opens ("cuda_graph" for "  [cuda_graph] ; x"), or NULL. */
static int section_of(const char *line, char *name, size_t len) {
  line += strspn(line, " \t");
  if (*line != '[')
    return 0;
  const char *end = strchr(line, ']');
  if (!end)
    return 0;
  line++;
  line += strspn(line, " \t");
  size_t n = (size_t)(end - line);
  while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
    n--;
  snprintf(name, len, "%.*s", (int)n, line);
  return 1;
}

static int is_key(const char *line, const char *key) {
  line += strspn(line, " \t");
  size_t k = strlen(key);
  if (strncasecmp(line, key, k) != 0)
    return 0;
  line += k;
  line += strspn(line, " \t");
  return *line == '=';
}

/*
 * FILE's text with [cuda_graph] impl = IMPL: the key's line replaced where FILE gives it, else a
 * [cuda_graph] section of one line appended (a section may come twice), so that every line of
 * FILE keeps its number in messages. Returns NULL with err set.
 */
static char *config_text(const char *impl, const char *file, char *err, size_t errlen) {
  struct text t = {0};
  char impl_line[1200];
  snprintf(impl_line, sizeof(impl_line), "impl = %s", impl);
  if (!file) {
    put(&t, "; cgrt test-backend's defaults");
    put(&t, "[cuda_graph]");
    put(&t, impl_line);
    put(&t, "warmup_steps = 2");
    put(&t, "[runtime]");
    put(&t, "driver = host");
    put(&t, "log = warn");
    put(&t, "[host]");
    put(&t, "nan_check = off");
  } else {
    FILE *f = tool_open_input(file, err, errlen);
    if (!f)
      return NULL;
    char line[4096], name[64];
    size_t n;
    int in_graph = 0, done = 0, lineno = 0, rc;
    while ((rc = tool_read_line(f, line, sizeof(line), &n)) == 1) {
      lineno++;
      if (section_of(line, name, sizeof(name)))
        in_graph = strcmp(name, "cuda_graph") == 0;
      int replace = in_graph && !done && is_key(line, "impl");
      put(&t, replace ? impl_line : line);
      done |= replace;
    }
    fclose(f);
    if (rc != 0) {
      snprintf(err, errlen, "%s:%d: %s", file, lineno + 1,
               rc == TOOL_LINE_LONG  ? "a line longer than 4095 bytes"
               : rc == TOOL_LINE_NUL ? "a NUL byte"
                                     : "cannot be read");
      free(t.s);
      return NULL;
    }
    if (!done) {
      put(&t, "[cuda_graph]");
      put(&t, impl_line);
    }
  }
  if (t.failed) {
    snprintf(err, errlen, "out of memory");
    free(t.s);
    return NULL;
  }
  return t.s;
}

/* ---------------------------------------------------------------- the runs */

/* Whether this machine shows an NVIDIA GPU driver, from its files (as `cgrt info` asks): the
   cuda driver, which loads the CUDA runtime, is tried only then. */
static int gpu_driver_present(void) {
  static const char *const files[] = {"/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
    if (access(files[i], F_OK) == 0)
      return 1;
  return 0;
}

static const char *driver_name(cgrt_driver_kind d) {
  return d == CGRT_DRIVER_HOST ? "host" : "cuda";
}

static void print_plan(const struct conform_config *c) {
  static const char *const forms[] = {"eagerly", "with graphs", "eagerly by cgrt"};
  printf("%s driver: backend %s (%s), warmup_steps %d; train and eval steps run %s, %s; infer "
         "steps %s; %zu token buckets\n",
         driver_name(c->driver), c->backend_name, c->backend_path, c->warmup,
         forms[c->info.phases[CGRT_PHASE_TRAIN] % 3], forms[c->info.phases[CGRT_PHASE_EVAL] % 3],
         forms[c->info.phases[CGRT_PHASE_INFER] % 3], c->num_buckets);
}

static int run_scenario(const struct conform_config *c, const struct conform_scenario *sc,
                        char *why, size_t len) {
  struct conform_run t;
  int rc = conform_run_open(&t, c, &sc->open, 0, why, len);
  if (rc == 0)
    rc = sc->run(&t, why, len);
  if (rc == 0 && sc->compare)
    rc = conform_compare(&t, why, len);
  if (rc == 0 && t.rt && (rc = conform_run_close(&t)) != 0)
    snprintf(why, len, "cgrt_close returned %d: %s", rc, cgrt_last_error(t.rt));
  conform_run_free(&t);
  return rc;
}

/* The scenarios on one driver. EXIT_UNUSABLE when there is nothing to test (no such backend). */
static int run_driver(struct conform_config *c, cgrt_driver_kind driver, struct tally *n) {
  char why[2048];
  const char *d = driver_name(driver);
  c->driver = driver;
  int rc = conform_config_probe(c, why, sizeof(why));
  if (rc == CGRT_E_NODEV && driver == CGRT_DRIVER_CUDA) {
    printf("cuda driver: skipped (%s)\n", why);
    return 0;
  }
  if (rc == CGRT_E_NOTFOUND) {
    fprintf(stderr, "cgrt test-backend: %s\n", why);
    return EXIT_UNUSABLE;
  }
  if (rc != 0) { /* found, but it cannot be loaded or initialized: it fails */
    printf("FAIL [%s] open: %s\n", d, why);
    n->failed++;
    return 0;
  }
  if (driver == CGRT_DRIVER_CUDA && c->num_cp_sizes > 0) {
    printf("cuda driver: skipped (%s needs the host's NCCL world communicator, which this test "
           "does not make)\n",
           c->backend_name);
    return 0;
  }
  print_plan(c);
  fflush(stdout);
  for (size_t i = 0; i < conform_num_scenarios; i++) {
    const struct conform_scenario *sc = &conform_scenarios[i];
    if (driver == CGRT_DRIVER_CUDA && sc->skip_cuda) {
      printf("SKIP [%s] %s: %s\n", d, sc->name, sc->skip_cuda);
      n->skipped++;
      continue;
    }
    if (c->verbose)
      printf("  [%s] %s\n", d, sc->name);
    why[0] = '\0';
    if (run_scenario(c, sc, why, sizeof(why)) == 0) {
      printf("PASS [%s] %s\n", d, sc->name);
      n->passed++;
    } else {
      printf("FAIL [%s] %s: %s\n", d, sc->name, why[0] ? why : "(no reason given)");
      n->failed++;
    }
    fflush(stdout);
  }
  return 0;
}

int cmd_test_backend(int argc, char **argv) {
  const char *impl = NULL, *file = NULL, *only = NULL;
  int verbose = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf(USAGE);
      return 0;
    }
    if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0) {
      verbose = 1;
    } else if (strcmp(argv[i], "--driver") == 0) {
      if (i + 1 >= argc || (strcmp(argv[i + 1], "host") != 0 && strcmp(argv[i + 1], "cuda") != 0)) {
        fprintf(stderr, "cgrt test-backend: --driver needs host or cuda\n" USAGE);
        return EXIT_UNUSABLE;
      }
      only = argv[++i];
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "cgrt test-backend: unknown option '%s'\n" USAGE, argv[i]);
      return EXIT_UNUSABLE;
    } else if (!impl) {
      impl = argv[i];
    } else if (!file) {
      file = argv[i];
    } else {
      fprintf(stderr, "cgrt test-backend: one backend and one FILE at most: '%s'\n" USAGE, argv[i]);
      return EXIT_UNUSABLE;
    }
  }
  char err[1024];
  if (!impl) {
    fprintf(stderr, USAGE);
    return EXIT_UNUSABLE;
  }
  if (tool_check_ini_value("NAME|PATH", impl, err, sizeof(err)) != 0) {
    fprintf(stderr, "cgrt test-backend: %s\n", err);
    return EXIT_UNUSABLE;
  }
  char *text = config_text(impl, file, err, sizeof(err));
  if (!text) {
    fprintf(stderr, "cgrt test-backend: %s\n", err);
    return EXIT_UNUSABLE;
  }
  /* Read once with its messages shown: an invalid FILE, or a backend not found, tests nothing. */
  const char *name = file ? file : "<cgrt test-backend defaults>";
  cgrt_tool_config *cfg = NULL;
  struct tool_msgs msgs = {0};
  int rc = cgrt_tool_config_read(&cfg, NULL, text, name, tool_print_msg, &msgs);
  cgrt_tool_config_free(cfg);
  if (rc != 0) {
    fprintf(stderr, "cgrt test-backend: cannot test '%s' with %s (%d errors)\n", impl, name,
            msgs.errors);
    free(text);
    return EXIT_UNUSABLE;
  }
  struct conform_config c = {.text = text, .name = name, .verbose = verbose};
  struct tally n = {0};
  int status = 0;
  if (!only || strcmp(only, "host") == 0)
    status = run_driver(&c, CGRT_DRIVER_HOST, &n);
  if (status == 0 && (!only || strcmp(only, "cuda") == 0)) {
    if (gpu_driver_present())
      status = run_driver(&c, CGRT_DRIVER_CUDA, &n);
    else
      printf("cuda driver: skipped (no GPU)\n");
  }
  if (status != 0) {
    conform_config_free(&c);
    free(text);
    return status;
  }
  if (n.skipped)
    printf("%d passed, %d failed, %d skipped\n", n.passed, n.failed, n.skipped);
  else
    printf("%d passed, %d failed\n", n.passed, n.failed);
  conform_config_free(&c);
  free(text);
  return n.failed ? EXIT_INVALID : EXIT_VALID;
}
