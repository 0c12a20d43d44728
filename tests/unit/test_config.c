/*
 * test_config.c - reading, migrating and checking the INI configuration (DESIGN.md section 6):
 * every key and default, every legacy spelling and conflict, every rule, and the messages an
 * operator sees: file:line, the key, and what to write instead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <dirent.h>
#include <ini.h>
#include <pthread.h>
#include <unistd.h>

#include "config/config_impl.h" /* the tables of keys and options */

/* ---------------------------------------------------------------- fixture */

struct fx {
  struct cgrt_config cfg;
  struct cgrt_diag diag;
  int rc;
};

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof(*f));
  if (!f)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  cgrt__config_free(&f->cfg);
  cgrt__diag_free(&f->diag);
  free(f);
  return 0;
}

/* Parses text as "t.ini", after dropping what an earlier parse left. */
static int parse(struct fx *f, const char *text) {
  cgrt__config_free(&f->cfg);
  cgrt__diag_free(&f->diag);
  f->rc = cgrt__config_parse(&f->cfg, text, "t.ini", &f->diag);
  return f->rc;
}

static void dump(const struct fx *f) {
  for (size_t i = 0; i < f->diag.count; i++)
    print_message("  %s: %s\n", f->diag.msgs[i].level == CGRT_LOG_ERROR ? "error" : "warning",
                  f->diag.msgs[i].text);
}

static const char *find_msg(const struct fx *f, cgrt_log_level level, const char *needle) {
  for (size_t i = 0; i < f->diag.count; i++)
    if (f->diag.msgs[i].level == level && strstr(f->diag.msgs[i].text, needle))
      return f->diag.msgs[i].text;
  return NULL;
}

#define assert_msg(f, level, needle)                                                               \
  do {                                                                                             \
    if (!find_msg(f, level, needle)) {                                                             \
      dump(f);                                                                                     \
      fail_msg("no %s containing \"%s\"", level == CGRT_LOG_ERROR ? "error" : "warning", needle);  \
    }                                                                                              \
  } while (0)
#define assert_error(f, needle)   assert_msg(f, CGRT_LOG_ERROR, needle)
#define assert_warning(f, needle) assert_msg(f, CGRT_LOG_WARN, needle)
#define assert_no_msg(f, needle)                                                                   \
  do {                                                                                             \
    if (find_msg(f, CGRT_LOG_ERROR, needle) || find_msg(f, CGRT_LOG_WARN, needle)) {               \
      dump(f);                                                                                     \
      fail_msg("unexpected message containing \"%s\"", needle);                                    \
    }                                                                                              \
  } while (0)

/* Accepted without any message. */
#define assert_clean(f, text)                                                                      \
  do {                                                                                             \
    if (parse(f, text) != 0 || (f)->diag.count != 0) {                                             \
      dump(f);                                                                                     \
      fail_msg("expected a clean parse, got rc %d", (f)->rc);                                      \
    }                                                                                              \
  } while (0)

/* Refused with exactly one error, which contains needle. */
#define assert_refused(f, text, needle)                                                            \
  do {                                                                                             \
    int rc_ = parse(f, text);                                                                      \
    if (rc_ != CGRT_E_CONFIG || (f)->diag.errors != 1) {                                           \
      dump(f);                                                                                     \
      fail_msg("expected one error, got rc %d and %d errors", rc_, (f)->diag.errors);              \
    }                                                                                              \
    assert_error(f, needle);                                                                       \
  } while (0)

static const char *get(struct fx *f, const char *section, const char *key) {
  return f->cfg.view.get(&f->cfg.view, section, key);
}

/* ---------------------------------------------------------------- defaults */

static void assert_defaults(const struct cgrt_config_view *v) {
  assert_int_equal(v->struct_size, sizeof(struct cgrt_config_view));
  assert_string_equal(v->impl, "none");
  assert_int_equal(v->modules, 0);
  assert_int_equal(v->warmup_steps, 3);
  assert_int_equal(v->inference_scope, CGRT_SCOPE_NONE);
  assert_int_equal(v->capture_mode, CGRT_CAPTURE_THREAD_LOCAL);
  assert_int_equal(v->rebind, CGRT_REBIND_AUTO);
  assert_int_equal(v->max_graphs, 512);
  assert_int_equal(v->buckets, CGRT_BUCKETS_EXPONENTIAL);
  assert_int_equal(v->max_tokens, 512);
  assert_int_equal(v->num_graphs, 8);
  assert_int_equal(v->tp_size, 1);
  assert_null(v->bucket_list);
  assert_int_equal(v->bucket_list_len, 0);
  assert_int_equal(v->capture, CGRT_CAPTURE_LAZY);
  assert_int_equal(v->num_cp_sizes, 1);
  assert_int_equal(v->cp_sizes[0], 1);
  assert_int_equal(v->max_packed_tokens, 8192);
  assert_int_equal(v->max_sequences, 64);
  assert_int_equal(v->graph_slots, 2);
  assert_int_equal(v->over_capacity, CGRT_OVER_CAPACITY_ERROR);
  assert_int_equal(v->cp_scope, CGRT_CP_SCOPE_MODULES);
  assert_int_equal(v->device, -1); /* current */
  assert_int_equal(v->driver, CGRT_DRIVER_CUDA);
  assert_int_equal(v->bind_cpu, 1);
  assert_int_equal(v->log_level, CGRT_LOG_INFO);
  assert_int_equal(v->max_queued_steps, 0); /* no bound */
  assert_int_equal(v->sync_guard, CGRT_SYNC_GUARD_OFF);
  assert_int_equal(v->nan_check, 1);
  assert_int_equal(v->recompute, CGRT_RECOMPUTE_NONE);
  assert_int_equal(v->moe_experts, 0);
  assert_int_equal(v->moe_dispatcher, CGRT_MOE_ALLTOALL);
  assert_int_equal(v->moe_capacity, CGRT_MOE_CAPACITY_NONE);
  assert_int_equal(v->moe_router_padding_fp8, 0);
  assert_int_equal(v->graph_safe_rng, 1);
  assert_non_null(v->get);
}

static void defaults_without_text(void **state) {
  struct fx *f = *state;
  cgrt__config_defaults(&f->cfg);
  assert_defaults(&f->cfg.view);
  assert_int_equal(f->cfg.num_entries, 0);
  assert_null(get(f, "cuda_graph", "impl"));
  assert_int_equal(cgrt__config_check(&f->cfg, &f->diag), 0);
}

static void defaults_of_an_empty_file(void **state) {
  struct fx *f = *state;
  assert_clean(f, "");
  assert_defaults(&f->cfg.view);
  assert_int_equal(f->cfg.num_entries, 0);
  assert_string_equal(f->cfg.source, "t.ini");
  assert_null(f->cfg.backend_path);
  /* only comments and blank lines */
  assert_clean(f, "; a comment\n# another\n\n   \n[cuda_graph] ; nothing here\n");
  assert_defaults(&f->cfg.view);
}

static void inference_scope_default_follows_impl(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[cuda_graph]\nimpl = local\n");
  assert_int_equal(f->cfg.view.inference_scope, CGRT_SCOPE_LAYER);
  assert_null(get(f, "cuda_graph", "inference_scope")); /* a default, not given */
  assert_clean(f, "[cuda_graph]\nimpl = transformer_engine\n");
  assert_int_equal(f->cfg.view.inference_scope, CGRT_SCOPE_NONE);
  assert_clean(f, "[cuda_graph]\nimpl = dynamic_cp\n");
  assert_int_equal(f->cfg.view.inference_scope, CGRT_SCOPE_NONE);
  assert_clean(f, "[cuda_graph]\nimpl = ./libcgrt-backend-x.so\n");
  assert_int_equal(f->cfg.view.inference_scope, CGRT_SCOPE_NONE);
}

/* ---------------------------------------------------------------- every key */

static const char all_keys[] = "[cuda_graph]\n"
                               "impl = local\n"
                               "modules = attn mlp mamba\n"
                               "warmup_steps = 5\n"
                               "inference_scope = block\n"
                               "capture_mode = relaxed\n"
                               "rebind = recapture\n"
                               "max_graphs = 77\n"
                               "backend_path = /opt/cgrt/backends\n"
                               "[inference]\n"
                               "buckets = list\n"
                               "max_tokens = 4096\n"
                               "num_graphs = 3\n"
                               "tp_size = 2\n"
                               "list = 16 2 4\n"
                               "capture = eager\n"
                               "[dynamic_cp]\n"
                               "cp_sizes = 4 1 2\n"
                               "max_packed_tokens = 65536\n"
                               "max_sequences = 128\n"
                               "graph_slots = 3\n"
                               "over_capacity = eager\n"
                               "[runtime]\n"
                               "device = 3\n"
                               "driver = host\n"
                               "bind_cpu = off\n"
                               "log = debug\n"
                               "[host]\n"
                               "nan_check = on\n"
                               "recompute = selective\n"
                               "moe_experts = 16\n"
                               "moe_dispatcher = allgather\n"
                               "moe_capacity = drop\n"
                               "moe_router_padding_fp8 = true\n"
                               "graph_safe_rng = yes\n";

static void every_key_is_read(void **state) {
  struct fx *f = *state;
  assert_clean(f, all_keys);
  const struct cgrt_config_view *v = &f->cfg.view;
  assert_string_equal(v->impl, "local");
  assert_int_equal(v->modules, CGRT_KIND_BIT(CGRT_KIND_ATTN) | CGRT_KIND_BIT(CGRT_KIND_MLP) |
                                   CGRT_KIND_BIT(CGRT_KIND_MAMBA));
  assert_int_equal(v->warmup_steps, 5);
  assert_int_equal(v->inference_scope, CGRT_SCOPE_BLOCK);
  assert_int_equal(v->capture_mode, CGRT_CAPTURE_RELAXED);
  assert_int_equal(v->rebind, CGRT_REBIND_RECAPTURE);
  assert_int_equal(v->max_graphs, 77);
  assert_string_equal(f->cfg.backend_path, "/opt/cgrt/backends");
  assert_int_equal(v->buckets, CGRT_BUCKETS_LIST);
  assert_int_equal(v->max_tokens, 4096);
  assert_int_equal(v->num_graphs, 3);
  assert_int_equal(v->tp_size, 2);
  assert_int_equal(v->bucket_list_len, 3);
  assert_int_equal(v->bucket_list[0], 2);
  assert_int_equal(v->bucket_list[1], 4);
  assert_int_equal(v->bucket_list[2], 16);
  assert_int_equal(v->capture, CGRT_CAPTURE_EAGER);
  assert_int_equal(v->num_cp_sizes, 3);
  assert_int_equal(v->cp_sizes[0], 1);
  assert_int_equal(v->cp_sizes[1], 2);
  assert_int_equal(v->cp_sizes[2], 4);
  assert_int_equal(v->max_packed_tokens, 65536);
  assert_int_equal(v->max_sequences, 128);
  assert_int_equal(v->graph_slots, 3);
  assert_int_equal(v->over_capacity, CGRT_OVER_CAPACITY_EAGER);
  assert_int_equal(v->device, 3);
  assert_int_equal(v->driver, CGRT_DRIVER_HOST);
  assert_int_equal(v->bind_cpu, 0);
  assert_int_equal(v->log_level, CGRT_LOG_DEBUG);
  assert_int_equal(v->nan_check, 1);
  assert_int_equal(v->recompute, CGRT_RECOMPUTE_SELECTIVE);
  assert_int_equal(v->moe_experts, 16);
  assert_int_equal(v->moe_dispatcher, CGRT_MOE_ALLGATHER);
  assert_int_equal(v->moe_capacity, CGRT_MOE_CAPACITY_DROP);
  assert_int_equal(v->moe_router_padding_fp8, 1);
  assert_int_equal(v->graph_safe_rng, 1);

  /* raw access gives the normalized text; the entries keep their lines */
  assert_int_equal(f->cfg.num_entries, 30);
  assert_string_equal(get(f, "inference", "list"), "2 4 16");
  assert_string_equal(get(f, "dynamic_cp", "cp_sizes"), "1 2 4");
  assert_string_equal(get(f, "host", "graph_safe_rng"), "true");
  assert_string_equal(get(f, "cuda_graph", "modules"), "attn mlp mamba");
  assert_string_equal(f->cfg.entries[0].key, "impl");
  assert_int_equal(f->cfg.entries[0].line, 2);
  assert_string_equal(f->cfg.entries[29].key, "graph_safe_rng");
  assert_int_equal(f->cfg.entries[29].line, 35);
}

static void each_enumerated_value(void **state) {
  struct fx *f = *state;
  static const struct {
    const char *section, *key, *value;
    size_t offset;
    int expect;
  } cases[] = {
#define C(s, k, val, field, e) {s, k, val, offsetof(struct cgrt_config_view, field), (int)(e)}
      C("cuda_graph", "capture_mode", "global", capture_mode, CGRT_CAPTURE_GLOBAL),
      C("cuda_graph", "capture_mode", "thread_local", capture_mode, CGRT_CAPTURE_THREAD_LOCAL),
      C("cuda_graph", "capture_mode", "relaxed", capture_mode, CGRT_CAPTURE_RELAXED),
      C("cuda_graph", "rebind", "update", rebind, CGRT_REBIND_UPDATE),
      C("cuda_graph", "rebind", "copy", rebind, CGRT_REBIND_COPY),
      C("cuda_graph", "rebind", "recapture", rebind, CGRT_REBIND_RECAPTURE),
      C("cuda_graph", "rebind", "error", rebind, CGRT_REBIND_ERROR),
      C("inference", "buckets", "exponential", buckets, CGRT_BUCKETS_EXPONENTIAL),
      C("inference", "buckets", "linear", buckets, CGRT_BUCKETS_LINEAR),
      C("inference", "capture", "lazy", capture, CGRT_CAPTURE_LAZY),
      C("inference", "capture", "eager", capture, CGRT_CAPTURE_EAGER),
      C("dynamic_cp", "over_capacity", "error", over_capacity, CGRT_OVER_CAPACITY_ERROR),
      C("dynamic_cp", "over_capacity", "eager", over_capacity, CGRT_OVER_CAPACITY_EAGER),
      C("dynamic_cp", "graph_scope", "modules", cp_scope, CGRT_CP_SCOPE_MODULES),
      C("dynamic_cp", "graph_scope", "step", cp_scope, CGRT_CP_SCOPE_STEP),
      C("runtime", "driver", "cuda", driver, CGRT_DRIVER_CUDA),
      C("runtime", "driver", "host", driver, CGRT_DRIVER_HOST),
      C("runtime", "bind_cpu", "auto", bind_cpu, 1),
      C("runtime", "bind_cpu", "off", bind_cpu, 0),
      C("runtime", "log", "off", log_level, CGRT_LOG_OFF),
      C("runtime", "log", "error", log_level, CGRT_LOG_ERROR),
      C("runtime", "log", "warn", log_level, CGRT_LOG_WARN),
      C("runtime", "log", "info", log_level, CGRT_LOG_INFO),
      C("runtime", "log", "debug", log_level, CGRT_LOG_DEBUG),
      C("host", "recompute", "none", recompute, CGRT_RECOMPUTE_NONE),
      C("host", "recompute", "selective", recompute, CGRT_RECOMPUTE_SELECTIVE),
      C("host", "moe_dispatcher", "alltoall", moe_dispatcher, CGRT_MOE_ALLTOALL),
      C("host", "moe_dispatcher", "allgather", moe_dispatcher, CGRT_MOE_ALLGATHER),
      C("host", "moe_capacity", "none", moe_capacity, CGRT_MOE_CAPACITY_NONE),
      C("host", "moe_capacity", "drop", moe_capacity, CGRT_MOE_CAPACITY_DROP),
      C("host", "moe_capacity", "drop_and_pad", moe_capacity, CGRT_MOE_CAPACITY_DROP_AND_PAD),
      C("cuda_graph", "inference_scope", "none", inference_scope, CGRT_SCOPE_NONE),
#undef C
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char text[256];
    snprintf(text, sizeof(text), "[%s]\n%s = %s\n", cases[i].section, cases[i].key, cases[i].value);
    assert_clean(f, text);
    int got = *(const int *)((const char *)&f->cfg.view + cases[i].offset);
    if (got != cases[i].expect)
      fail_msg("%s = %s gave %d, expected %d", cases[i].key, cases[i].value, got, cases[i].expect);
    assert_string_equal(get(f, cases[i].section, cases[i].key), cases[i].value);
  }
}

static void enumerated_values_ignore_case(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[cuda_graph]\ncapture_mode = Thread_Local\n[runtime]\nlog = DEBUG\n");
  assert_int_equal(f->cfg.view.capture_mode, CGRT_CAPTURE_THREAD_LOCAL);
  assert_int_equal(f->cfg.view.log_level, CGRT_LOG_DEBUG);
  assert_string_equal(get(f, "cuda_graph", "capture_mode"), "thread_local");
  assert_string_equal(get(f, "runtime", "log"), "debug");
}

static void every_boolean_spelling(void **state) {
  struct fx *f = *state;
  static const char *const yes[] = {"true", "on", "yes", "1", "TRUE", "On", "Yes"};
  static const char *const no[] = {"false", "off", "no", "0", "FALSE", "Off", "NO"};
  char text[256];
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
    snprintf(text, sizeof(text),
             "[host]\nnan_check = %s\nmoe_router_padding_fp8 = %s\ngraph_safe_rng = %s\n", yes[i],
             yes[i], yes[i]);
    assert_clean(f, text);
    assert_int_equal(f->cfg.view.nan_check, 1);
    assert_int_equal(f->cfg.view.moe_router_padding_fp8, 1);
    assert_int_equal(f->cfg.view.graph_safe_rng, 1);
    /* normalized to the spelling each key documents */
    assert_string_equal(get(f, "host", "nan_check"), "on");
    assert_string_equal(get(f, "host", "moe_router_padding_fp8"), "true");
  }
  for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
    snprintf(text, sizeof(text),
             "[host]\nnan_check = %s\nmoe_router_padding_fp8 = %s\ngraph_safe_rng = %s\n", no[i],
             no[i], no[i]);
    assert_clean(f, text);
    assert_int_equal(f->cfg.view.nan_check, 0);
    assert_int_equal(f->cfg.view.moe_router_padding_fp8, 0);
    assert_int_equal(f->cfg.view.graph_safe_rng, 0);
    assert_string_equal(get(f, "host", "nan_check"), "off");
    assert_string_equal(get(f, "host", "graph_safe_rng"), "false");
  }
}

static void impl_names_and_paths(void **state) {
  struct fx *f = *state;
  static const char *const ok[] = {"none",       "local", "transformer_engine", "full_iteration",
                                   "dynamic_cp", "trace", "my-backend_2"};
  char text[256];
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[host]\nnan_check = off\n", ok[i]);
    assert_clean(f, text);
    assert_string_equal(f->cfg.view.impl, ok[i]);
    assert_string_equal(f->cfg.backend_section, ok[i]);
  }
  assert_clean(f, "[cuda_graph]\nimpl = /a/b/libcgrt-backend-foo.so\n");
  assert_string_equal(f->cfg.view.impl, "/a/b/libcgrt-backend-foo.so");
  assert_string_equal(f->cfg.backend_section, "foo");
  assert_clean(f, "[cuda_graph]\nimpl = ./x.so\n");
  assert_string_equal(f->cfg.backend_section, "x");
  assert_clean(f, "[cuda_graph]\nimpl = build/Backends/Mine\n"); /* a path: any spelling */
  assert_string_equal(f->cfg.backend_section, "Mine");
}

static void impl_bad_spellings(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nimpl = Local\n",
                 "t.ini:2: [cuda_graph] impl = 'Local': expected none, local, transformer_engine, "
                 "full_iteration, dynamic_cp");
  assert_error(f, "did you mean 'local'?");
  assert_refused(f, "[cuda_graph]\nimpl = my backend\n",
                 "t.ini:2: [cuda_graph] impl = 'my backend'");
  assert_refused(f, "[cuda_graph]\nimpl =\n", "t.ini:2: [cuda_graph] impl = '': expected");
  /* a near miss of a built-in is taken as a third-party name, with a warning */
  assert_int_equal(parse(f, "[cuda_graph]\nimpl = lcoal\n"), 0);
  assert_warning(f, "t.ini:2: [cuda_graph] impl = lcoal: 'lcoal' is not a built-in backend; did "
                    "you mean 'local'?");
  assert_warning(f, "libcgrt-backend-lcoal.so");
}

static void modules_lists(void **state) {
  struct fx *f = *state;
  assert_clean(f,
               "[cuda_graph]\nmodules = attn, mlp,moe_router  ,, mamba\n[host]\nmoe_experts = 4\n");
  assert_int_equal(f->cfg.view.modules,
                   CGRT_KIND_BIT(CGRT_KIND_ATTN) | CGRT_KIND_BIT(CGRT_KIND_MLP) |
                       CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER) | CGRT_KIND_BIT(CGRT_KIND_MAMBA));
  assert_string_equal(get(f, "cuda_graph", "modules"), "attn mlp moe_router mamba");
  assert_clean(f, "[cuda_graph]\nmodules = other\n");
  assert_int_equal(f->cfg.view.modules, CGRT_KIND_BIT(CGRT_KIND_OTHER));
  assert_clean(f, "[cuda_graph]\nmodules =\n");
  assert_int_equal(f->cfg.view.modules, 0);
  assert_string_equal(get(f, "cuda_graph", "modules"), "");
  assert_refused(f, "[cuda_graph]\nmodules = attn mlp attn\n",
                 "t.ini:2: [cuda_graph] modules = 'attn mlp attn': 'attn' is listed twice");
  assert_refused(f, "[cuda_graph]\nmodules = attn mpl\n",
                 "t.ini:2: [cuda_graph] modules = 'attn mpl': 'mpl' is not a module kind; did "
                 "you mean 'mlp'? (expected: attn, mlp, moe, moe_router, moe_preprocess, mamba, "
                 "other)");
  assert_refused(f, "[cuda_graph]\nmodules = transformer\n", "'transformer' is not a module kind");
  assert_no_msg(f, "did you mean");
}

static void integer_values(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[inference]\nmax_tokens = 9223372036854775807\n[cuda_graph]\nmax_graphs = "
                  "2147483647\nwarmup_steps = +4\n");
  assert_int_equal(f->cfg.view.max_tokens, INT64_MAX);
  assert_int_equal(f->cfg.view.max_graphs, 2147483647);
  assert_int_equal(f->cfg.view.warmup_steps, 4);
  assert_string_equal(get(f, "cuda_graph", "warmup_steps"), "4");

  static const char *const junk[] = {"3x", "1.5", "abc", "", "0x10", "1 2", "-"};
  char text[256];
  for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
    snprintf(text, sizeof(text), "[cuda_graph]\nwarmup_steps = %s\n", junk[i]);
    char want[256];
    snprintf(want, sizeof(want),
             "t.ini:2: [cuda_graph] warmup_steps = '%s': expected a whole number from 0 to "
             "2147483647",
             junk[i]);
    assert_refused(f, text, want);
  }
  assert_refused(f, "[runtime]\ndevice = -1\n",
                 "t.ini:2: [runtime] device = '-1': expected current (the host stream's device, "
                 "else the opening thread's) or a device index from 0 to 2147483647");
  assert_refused(f, "[runtime]\ndevice = curent\n",
                 "[runtime] device = 'curent': expected current");
  assert_refused(f, "[host]\nmoe_experts = -8\n", "[host] moe_experts = '-8': expected");
  assert_refused(f, "[cuda_graph]\nmax_graphs = 2147483648\n",
                 "t.ini:2: [cuda_graph] max_graphs = '2147483648': too large: expected a whole "
                 "number from 0 to 2147483647");
  assert_refused(f, "[inference]\nmax_tokens = 9223372036854775808\n",
                 "[inference] max_tokens = '9223372036854775808': too large: expected a whole "
                 "number from 0 to 9223372036854775807");
  assert_refused(f, "[dynamic_cp]\nmax_packed_tokens = 99999999999999999999999\n", "too large");
}

static void enumerated_bad_values_list_the_valid_ones(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nrebind = updte\n",
                 "t.ini:2: [cuda_graph] rebind = 'updte': expected one of update, copy, "
                 "recapture, error, auto; did you mean 'update'?");
  assert_refused(f, "[cuda_graph]\ncapture_mode = sometimes\n",
                 "t.ini:2: [cuda_graph] capture_mode = 'sometimes': expected one of global, "
                 "thread_local, relaxed");
  assert_no_msg(f, "did you mean");
  assert_refused(f, "[cuda_graph]\ninference_scope = layers\n",
                 "expected one of none, layer, block; did you mean 'layer'?");
  assert_refused(f, "[inference]\nbuckets = exp\n",
                 "[inference] buckets = 'exp': expected one of exponential, linear, list");
  assert_refused(f, "[inference]\ncapture = now\n", "expected one of lazy, eager");
  assert_refused(f, "[dynamic_cp]\nover_capacity = drop\n", "expected one of error, eager");
  assert_refused(f, "[runtime]\ndriver = gpu\n", "expected one of cuda, host");
  assert_refused(f, "[runtime]\nbind_cpu = yes\n", "expected one of off, auto");
  assert_refused(f, "[runtime]\nlog = verbose\n", "expected one of off, error, warn, info, debug");
  assert_refused(f, "[host]\nrecompute = partial\n", "expected one of none, selective, full");
  assert_refused(f, "[host]\nmoe_dispatcher = a2a\n", "expected one of alltoall, allgather");
  assert_refused(f, "[host]\nmoe_capacity = pad\n", "expected one of none, drop, drop_and_pad");
  assert_refused(f, "[host]\nnan_check = maybe\n",
                 "t.ini:2: [host] nan_check = 'maybe': expected on or off");
  assert_refused(f, "[host]\ngraph_safe_rng = 2\n",
                 "t.ini:2: [host] graph_safe_rng = '2': expected true or false");
}

static void bucket_list_sorted_without_repeats(void **state) {
  struct fx *f = *state;
  assert_int_equal(parse(f, "[inference]\nbuckets = list\nlist = 8, 2 4,2\n"), 0);
  assert_int_equal(f->cfg.view.bucket_list_len, 3);
  assert_int_equal(f->cfg.view.bucket_list[0], 2);
  assert_int_equal(f->cfg.view.bucket_list[1], 4);
  assert_int_equal(f->cfg.view.bucket_list[2], 8);
  assert_string_equal(get(f, "inference", "list"), "2 4 8");
  assert_int_equal(f->diag.warnings, 1);
  assert_warning(f, "t.ini:3: [inference] list = 8, 2 4,2: 2 is listed more than once");
  assert_refused(f, "[inference]\nlist = 1 0 4\n",
                 "t.ini:2: [inference] list = '1 0 4': '0' is not a token count");
  assert_refused(f, "[inference]\nlist = 1 -4\n", "'-4' is not a token count");
  assert_refused(f, "[inference]\nlist = 1 two\n", "'two' is not a token count");
  /* empty: as if not given */
  assert_clean(f, "[inference]\nlist =\n");
  assert_null(f->cfg.view.bucket_list);
  assert_int_equal(f->cfg.view.bucket_list_len, 0);
}

static void cp_sizes_sorted_and_distinct(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[dynamic_cp]\ncp_sizes = 8, 2 1\n");
  assert_int_equal(f->cfg.view.num_cp_sizes, 3);
  assert_int_equal(f->cfg.view.cp_sizes[0], 1);
  assert_int_equal(f->cfg.view.cp_sizes[1], 2);
  assert_int_equal(f->cfg.view.cp_sizes[2], 8);
  assert_string_equal(get(f, "dynamic_cp", "cp_sizes"), "1 2 8");
  assert_refused(f, "[dynamic_cp]\ncp_sizes = 1 2 2\n",
                 "t.ini:2: [dynamic_cp] cp_sizes = '1 2 2': 2 is listed twice");
  assert_refused(f, "[dynamic_cp]\ncp_sizes = 0 2\n",
                 "t.ini:2: [dynamic_cp] cp_sizes = '0 2': '0' is not a context-parallel size");
  assert_refused(f, "[dynamic_cp]\ncp_sizes = -2\n", "'-2' is not a context-parallel size");
  assert_refused(f, "[dynamic_cp]\ncp_sizes = 4294967296\n", "is not a context-parallel size");
  assert_clean(f, "[dynamic_cp]\ncp_sizes =\n");
  assert_int_equal(f->cfg.view.num_cp_sizes, 0);
}

static void backend_path_empty_means_default(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[cuda_graph]\nbackend_path =\n");
  assert_null(f->cfg.backend_path);
  assert_clean(f, "[cuda_graph]\nbackend_path = /x:/y z\n");
  assert_string_equal(f->cfg.backend_path, "/x:/y z");
}

/* ---------------------------------------------------------------- INI syntax */

static void comments_continuations_and_separators(void **state) {
  struct fx *f = *state;
  assert_clean(f, "\xEF\xBB\xBF; leading byte-order mark\r\n"
                  "[cuda_graph]\r\n"
                  "impl: local            ; name: value, as Python's configparser\r\n"
                  "modules = attn         ; inline comment\r\n"
                  "    mlp                ; continues the value above\r\n"
                  "  moe_router\r\n"
                  "[ host ]\r\n"
                  "moe_experts = 4\r\n");
  assert_string_equal(f->cfg.view.impl, "local");
  assert_int_equal(f->cfg.view.modules, CGRT_KIND_BIT(CGRT_KIND_ATTN) |
                                            CGRT_KIND_BIT(CGRT_KIND_MLP) |
                                            CGRT_KIND_BIT(CGRT_KIND_MOE_ROUTER));
  assert_string_equal(get(f, "cuda_graph", "modules"), "attn mlp moe_router");
  assert_int_equal(f->cfg.view.moe_experts, 4);
  /* a continuation is one value: not a repeat */
  assert_clean(f, "[inference]\nlist = 1 2\n  4 8\n\n  16\n");
  assert_int_equal(f->cfg.view.bucket_list_len, 5);
  assert_string_equal(get(f, "inference", "list"), "1 2 4 8 16");
}

static void syntax_errors_name_their_line(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nimpl = local\nthis is not ini\n",
                 "t.ini:3: syntax error: expected 'key = value' or '[section]'");
  assert_refused(f, "[cuda_graph\n",
                 "t.ini:1: syntax error: expected 'key = value' or '[section]'");
  assert_error(f, "no closing ']'");
  /* every such line is reported, not only the first */
  assert_int_equal(parse(f, "[host]\nfoo\n[runtime]\nbar\n"), CGRT_E_CONFIG);
  assert_int_equal(f->diag.errors, 2);
  assert_error(f, "t.ini:2: syntax error");
  assert_error(f, "t.ini:4: syntax error");
}

static void overlong_lines_are_refused(void **state) {
  struct fx *f = *state;
  int limit = INI_MAX_LINE - 2; /* inih's buffer: the line, '\n' and '\0' */
  char *text = malloc(4096), want[128];
  assert_non_null(text);
  /* exactly at the limit: read normally */
  int n = snprintf(text, 4096, "[cuda_graph]\nbackend_path = ");
  int start = n - (int)strlen("backend_path = ");
  while (n - start < limit)
    text[n++] = 'x';
  text[n++] = '\n';
  text[n] = '\0';
  assert_clean(f, text);
  assert_int_equal(strlen(f->cfg.backend_path), (size_t)limit - strlen("backend_path = "));
  /* one more: refused with a clear message, never read in pieces */
  n = snprintf(text, 4096, "[cuda_graph]\nbackend_path = ");
  while (n - start < limit + 1)
    text[n++] = 'x';
  n += snprintf(text + n, 4096 - (size_t)n, "\nimpl = local\n");
  snprintf(want, sizeof(want), "t.ini:2: line is longer than %d characters", limit);
  assert_refused(f, text, want);
  assert_string_equal(f->cfg.view.impl, "local"); /* the next line is still read */
  free(text);
}

static void repeated_keys_name_both_lines(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nwarmup_steps = 2\nimpl = local\nwarmup_steps = 4\n",
                 "t.ini:4: key 'warmup_steps' in [cuda_graph] is given twice (first at line 2); "
                 "keep only one");
  assert_int_equal(f->cfg.view.warmup_steps, 2);
  /* a section may be opened twice, but a key is still given once */
  assert_refused(f, "[host]\nmoe_experts = 2\n[runtime]\n[host]\nmoe_experts = 3\n",
                 "t.ini:5: key 'moe_experts' in [host] is given twice (first at line 2)");
}

static void messages_come_in_line_order(void **state) {
  struct fx *f = *state;
  assert_int_equal(parse(f, "[cuda_graph]\nwarmup = 1\n[nosuch]\nx = 1\n[host]\nnan_check = x\n"),
                   CGRT_E_CONFIG);
  assert_int_equal(f->diag.count, 3);
  assert_non_null(strstr(f->diag.msgs[0].text, "t.ini:2:"));
  assert_non_null(strstr(f->diag.msgs[1].text, "t.ini:3:"));
  assert_non_null(strstr(f->diag.msgs[2].text, "t.ini:6:"));
}

/* ---------------------------------------------------------------- unknown sections and keys */

static void unknown_section_suggests_the_nearest(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[inferense]\nmax_tokens = 8\n",
                 "t.ini:1: unknown section [inferense]; did you mean [inference]?");
  assert_refused(f, "[host]\n[RUNTIME]\ndevice = 1\n",
                 "t.ini:2: unknown section [RUNTIME]; did you mean [runtime]?");
  assert_refused(f, "[cuda-graph]\n",
                 "t.ini:1: unknown section [cuda-graph]; did you mean "
                 "[cuda_graph]?");
  assert_refused(f, "[cuda_graph]\nimpl = local\n[compiler]\nopt = 3\n",
                 "t.ini:3: unknown section [compiler]; the sections are [cuda_graph], "
                 "[inference], [dynamic_cp], [runtime], [host] and the configured backend's own "
                 "section ([local]");
  assert_no_msg(f, "did you mean");
  /* the keys of a refused section are neither kept nor reported one by one */
  assert_null(get(f, "compiler", "opt"));
  /* an empty section name is a section too */
  assert_refused(f, "[]\n", "t.ini:1: unknown section []");
}

static void unknown_key_suggests_the_nearest(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nwarmup_step = 2\n",
                 "t.ini:2: unknown key 'warmup_step' in [cuda_graph]; did you mean "
                 "'warmup_steps'?");
  assert_refused(f, "[runtime]\nDevice = 2\n",
                 "t.ini:2: unknown key 'Device' in [runtime]; did you mean 'device'?");
  assert_refused(f, "[host]\nnan_chekc = off\n", "did you mean 'nan_check'?");
  assert_refused(f, "[cuda_graph]\nmax_tokens = 128\n",
                 "t.ini:2: key 'max_tokens' belongs in [inference], not [cuda_graph]");
  assert_refused(f, "[inference]\ncp_sizes = 1 2\n",
                 "key 'cp_sizes' belongs in [dynamic_cp], not [inference]");
  assert_refused(f, "[runtime]\nenable_cuda_graph = true\n",
                 "t.ini:2: key 'enable_cuda_graph' belongs in [cuda_graph], not [runtime]");
  assert_refused(f, "[cuda_graph]\nmax_token = 128\n",
                 "t.ini:2: unknown key 'max_token' in [cuda_graph]; did you mean 'max_tokens' in "
                 "[inference]?");
  assert_refused(f, "[runtime]\ncolour = blue\n",
                 "t.ini:2: unknown key 'colour' in [runtime]; the keys of [runtime] are: device, "
                 "driver, bind_cpu, log");
}

static void keys_outside_any_section(void **state) {
  struct fx *f = *state;
  assert_refused(f, "impl = local\n[cuda_graph]\n",
                 "t.ini:1: key 'impl' is outside any section; put it under [cuda_graph]");
  assert_refused(f, "; comment\nfoo = 1\n", "t.ini:2: key 'foo' is outside any section");
}

/* ---------------------------------------------------------------- legacy spellings */

struct legacy_case {
  const char *line;    /* the legacy line, written as line 2 of [cuda_graph] */
  const char *warning; /* after "t.ini:2: " */
  const char *impl;
  uint32_t modules;
  cgrt_inference_scope scope;
};

static void legacy_spellings_migrate_with_a_warning(void **state) {
  struct fx *f = *state;
  const uint32_t attn = CGRT_KIND_BIT(CGRT_KIND_ATTN), mlp = CGRT_KIND_BIT(CGRT_KIND_MLP);
  static const char fi[] = "'impl = full_iteration'";
  const struct legacy_case cases[] = {
      {"enable_cuda_graph = true",
       "'enable_cuda_graph = true' is a legacy spelling; write 'impl = local' instead", "local", 0,
       CGRT_SCOPE_LAYER},
      {"enable_cuda_graph = false",
       "'enable_cuda_graph = false' is a legacy spelling; write 'impl = none' instead", "none", 0,
       CGRT_SCOPE_NONE},
      {"enable_cuda_graph = on", "'enable_cuda_graph = on' is a legacy spelling", "local", 0,
       CGRT_SCOPE_LAYER},
      {"external_cuda_graph = true",
       "'external_cuda_graph = true' is a legacy spelling; write 'impl = transformer_engine' "
       "instead",
       "transformer_engine", 0, CGRT_SCOPE_NONE},
      {"external_cuda_graph = 0",
       "'external_cuda_graph = 0' is a legacy spelling; write 'impl = none' instead", "none", 0,
       CGRT_SCOPE_NONE},
      {"scope = full_iteration", fi, "full_iteration", 0, CGRT_SCOPE_NONE},
      {"scope = full_iteration_inference",
       "'scope = full_iteration_inference' is a legacy spelling; write 'impl = local' and "
       "'inference_scope = block' instead",
       "local", 0, CGRT_SCOPE_BLOCK},
      {"scope = attn mlp",
       "'scope = attn mlp' is a legacy spelling; write 'modules = attn mlp' instead", "none",
       attn | mlp, CGRT_SCOPE_NONE},
      {"scope = attn,mlp",
       "'scope = attn,mlp' is a legacy spelling; write 'modules = attn mlp' instead", "none",
       attn | mlp, CGRT_SCOPE_NONE},
      {"scope = full", "'scope = full' is a legacy spelling; write 'modules =' (empty", "none", 0,
       CGRT_SCOPE_NONE},
      {"cuda_graph_impl = transformer_engine",
       "'cuda_graph_impl = transformer_engine' is a legacy spelling; write 'impl = "
       "transformer_engine' instead",
       "transformer_engine", 0, CGRT_SCOPE_NONE},
      {"cuda_graph_scope = attn",
       "'cuda_graph_scope = attn' is a legacy spelling; write 'modules = attn' instead", "none",
       attn, CGRT_SCOPE_NONE},
      {"cuda_graph_scope = full_iteration", fi, "full_iteration", 0, CGRT_SCOPE_NONE},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char text[256], want[256];
    snprintf(text, sizeof(text), "[cuda_graph]\n%s\n[host]\nnan_check = off\n", cases[i].line);
    int rc = parse(f, text);
    if (rc != 0 || f->diag.errors != 0 || f->diag.warnings != 1) {
      dump(f);
      fail_msg("'%s': rc %d, %d errors, %d warnings", cases[i].line, rc, f->diag.errors,
               f->diag.warnings);
    }
    snprintf(want, sizeof(want), "t.ini:2: %s", cases[i].warning);
    if (cases[i].warning == fi)
      snprintf(want, sizeof(want), "t.ini:2: '%s' is a legacy spelling; write %s instead",
               cases[i].line, fi);
    assert_warning(f, want);
    assert_string_equal(f->cfg.view.impl, cases[i].impl);
    assert_int_equal(f->cfg.view.modules, cases[i].modules);
    assert_int_equal(f->cfg.view.inference_scope, cases[i].scope);
    /* the entries hold the new spelling, at the legacy line */
    assert_true(f->cfg.num_entries >= 2);
    assert_int_equal(f->cfg.entries[0].line, 2);
    assert_string_equal(f->cfg.entries[0].section, "cuda_graph");
    assert_true(strcmp(f->cfg.entries[0].key, "impl") == 0 ||
                strcmp(f->cfg.entries[0].key, "modules") == 0);
  }
  assert_null(get(f, "cuda_graph", "cuda_graph_scope"));
  assert_null(get(f, "cuda_graph", "scope"));
}

static void legacy_and_new_keys_mix_when_they_set_different_keys(void **state) {
  struct fx *f = *state;
  assert_int_equal(parse(f, "[cuda_graph]\nenable_cuda_graph = true\nmodules = attn\n"), 0);
  assert_int_equal(f->diag.errors, 0);
  assert_string_equal(f->cfg.view.impl, "local");
  assert_int_equal(f->cfg.view.modules, CGRT_KIND_BIT(CGRT_KIND_ATTN));
  assert_string_equal(get(f, "cuda_graph", "impl"), "local");
  assert_int_equal(parse(f, "[cuda_graph]\nscope = mlp\nimpl = transformer_engine\n"), 0);
  assert_int_equal(parse(f, "[cuda_graph]\nenable_cuda_graph = true\nscope = attn\n"), 0);
  assert_int_equal(f->diag.warnings, 2);
}

static void legacy_bad_values(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nenable_cuda_graph = maybe\n",
                 "t.ini:2: [cuda_graph] enable_cuda_graph = 'maybe': expected true or false");
  assert_refused(f, "[cuda_graph]\nexternal_cuda_graph = 2\n",
                 "[cuda_graph] external_cuda_graph = '2': expected true or false");
  assert_refused(f, "[cuda_graph]\nscope = atn\n",
                 "t.ini:2: [cuda_graph] scope = 'atn': 'atn' is not a module kind; did you mean "
                 "'attn'?");
  assert_refused(f, "[cuda_graph]\nscope = full_iteration attn\n",
                 "t.ini:2: [cuda_graph] scope = 'full_iteration attn': 'full_iteration' must be "
                 "given alone");
  assert_refused(f, "[cuda_graph]\nscope =\n",
                 "t.ini:2: [cuda_graph] scope = '': expected full, full_iteration, "
                 "full_iteration_inference or module kinds");
  assert_refused(f, "[cuda_graph]\ncuda_graph_impl = Local\n",
                 "t.ini:2: [cuda_graph] cuda_graph_impl = 'Local': expected none, local");
}

static void conflicts_name_both_lines_and_spellings(void **state) {
  struct fx *f = *state;
  /* a legacy key, then the new one */
  assert_refused(f, "[cuda_graph]\nenable_cuda_graph = true\n\n\nimpl = none\n",
                 "t.ini:5: 'impl = none' conflicts with 'enable_cuda_graph = true' at line 2 "
                 "(which means 'impl = local'); keep only one");
  /* the new key, then a legacy one */
  assert_refused(f, "[cuda_graph]\nimpl = local\nenable_cuda_graph = true\n",
                 "t.ini:3: 'enable_cuda_graph = true' (which means 'impl = local') conflicts with "
                 "'impl = local' at line 2; keep only one");
  /* two legacy keys setting impl */
  assert_refused(f, "[cuda_graph]\nenable_cuda_graph = true\nexternal_cuda_graph = true\n",
                 "t.ini:3: 'external_cuda_graph = true' (which means 'impl = "
                 "transformer_engine') conflicts with 'enable_cuda_graph = true' at line 2 "
                 "(which means 'impl = local'); keep only one");
  assert_refused(f, "[cuda_graph]\nenable_cuda_graph = false\nexternal_cuda_graph = true\n",
                 "conflicts with 'enable_cuda_graph = false' at line 2 (which means 'impl = "
                 "none')");
  /* the Megatron spelling of impl */
  assert_refused(f, "[cuda_graph]\ncuda_graph_impl = local\nimpl = local\n",
                 "t.ini:3: 'impl = local' conflicts with 'cuda_graph_impl = local' at line 2");
  /* scope sets impl and inference_scope: each may conflict */
  assert_refused(f, "[cuda_graph]\ninference_scope = layer\nscope = full_iteration_inference\n",
                 "t.ini:3: 'scope = full_iteration_inference' (which means 'inference_scope = "
                 "block') conflicts with 'inference_scope = layer' at line 2; keep only one");
  assert_refused(f, "[cuda_graph]\nscope = attn\nmodules = mlp\n",
                 "t.ini:3: 'modules = mlp' conflicts with 'scope = attn' at line 2 (which means "
                 "'modules = attn')");
  assert_refused(f, "[cuda_graph]\nscope = full_iteration\nenable_cuda_graph = true\n",
                 "t.ini:3: 'enable_cuda_graph = true' (which means 'impl = local') conflicts with "
                 "'scope = full_iteration' at line 2 (which means 'impl = full_iteration')");
  /* two spellings of one legacy option */
  assert_refused(f, "[cuda_graph]\nscope = attn\ncuda_graph_scope = attn\n",
                 "t.ini:3: 'cuda_graph_scope = attn' conflicts with 'scope = attn' at line 2 "
                 "(two legacy spellings of one option); keep only one");
  /* one legacy key twice */
  assert_refused(f, "[cuda_graph]\nenable_cuda_graph = true\nenable_cuda_graph = true\n",
                 "t.ini:3: key 'enable_cuda_graph' in [cuda_graph] is given twice (first at line "
                 "2)");
  /* the value from the first line stays */
  assert_refused(f, "[cuda_graph]\nexternal_cuda_graph = true\nimpl = local\n", "keep only one");
  assert_string_equal(f->cfg.view.impl, "transformer_engine");
}

/* ---------------------------------------------------------------- rules between keys */

static void rule_moe_and_moe_router_exclude_each_other(void **state) {
  struct fx *f = *state;
  assert_refused(f,
                 "[cuda_graph]\nimpl = local\nmodules = moe moe_router\n[host]\nmoe_experts = "
                 "8\nmoe_capacity = drop_and_pad\n",
                 "t.ini:3: [cuda_graph] modules = moe moe_router (line 3): 'moe' and 'moe_router' "
                 "exclude each other");
}

static void rule_moe_preprocess_needs_moe_router(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nimpl = local\nmodules = attn moe_preprocess\n",
                 "t.ini:3: [cuda_graph] modules = attn moe_preprocess (line 3): 'moe_preprocess' "
                 "needs 'moe_router' in modules too");
  assert_clean(f, "[cuda_graph]\nmodules = moe_router moe_preprocess\n[host]\nmoe_experts = 2\n");
}

static void rule_moe_needs_experts(void **state) {
  struct fx *f = *state;
  assert_int_equal(parse(f, "[cuda_graph]\nmodules = moe\n[host]\nmoe_capacity = drop_and_pad\n"),
                   CGRT_E_CONFIG);
  assert_int_equal(f->diag.errors, 1);
  assert_error(f, "t.ini:2: [cuda_graph] modules names 'moe', which needs [host] moe_experts > 1, "
                  "but moe_experts = 0 (default); set moe_experts to the number of experts");
  assert_refused(f, "[cuda_graph]\nmodules = moe_router\n[host]\nmoe_experts = 1\n",
                 "t.ini:2: [cuda_graph] modules names 'moe_router', which needs [host] "
                 "moe_experts > 1, but moe_experts = 1 (line 4)");
  assert_clean(f, "[cuda_graph]\nmodules = moe_router\n[host]\nmoe_experts = 2\n");
}

static void rule_moe_needs_drop_and_pad(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nmodules = moe\n[host]\nmoe_experts = 8\n",
                 "t.ini:2: [cuda_graph] modules names 'moe', which needs [host] moe_capacity = "
                 "drop_and_pad (only then is the whole MoE layer free of host synchronization), "
                 "but moe_capacity = none (default)");
  assert_refused(f, "[cuda_graph]\nmodules = moe\n[host]\nmoe_experts = 8\nmoe_capacity = drop\n",
                 "but moe_capacity = drop (line 5)");
  assert_clean(f, "[cuda_graph]\nmodules = moe\n[host]\nmoe_experts = 8\nmoe_capacity = "
                  "drop_and_pad\n");
}

static void rule_moe_preprocess_alltoall_drop(void **state) {
  struct fx *f = *state;
  const char *text = "[cuda_graph]\nmodules = moe_router moe_preprocess\n[host]\nmoe_experts = "
                     "8\nmoe_capacity = drop\n";
  assert_refused(f, text,
                 "t.ini:2: [cuda_graph] modules names 'moe_preprocess', which is refused with "
                 "the alltoall dispatcher and dropping capacity ([host] moe_dispatcher = alltoall "
                 "(default), moe_capacity = drop (line 5)): preprocess then synchronizes with the "
                 "host");
  assert_clean(f, "[cuda_graph]\nmodules = moe_router moe_preprocess\n[host]\nmoe_experts = "
                  "8\nmoe_capacity = drop\nmoe_dispatcher = allgather\n");
}

static void rule_moe_preprocess_alltoall_padding_fp8(void **state) {
  struct fx *f = *state;
  assert_refused(f,
                 "[cuda_graph]\nmodules = moe_router moe_preprocess\n[host]\nmoe_experts = "
                 "8\nmoe_router_padding_fp8 = true\n",
                 "t.ini:2: [cuda_graph] modules names 'moe_preprocess', which is refused with "
                 "the alltoall dispatcher and FP8 router padding ([host] moe_dispatcher = "
                 "alltoall (default), moe_router_padding_fp8 = true (line 5))");
  assert_clean(f, "[cuda_graph]\nmodules = moe_router moe_preprocess\n[host]\nmoe_experts = "
                  "8\nmoe_router_padding_fp8 = true\nmoe_dispatcher = allgather\n");
  /* both reasons at once: two messages */
  assert_int_equal(parse(f,
                         "[cuda_graph]\nmodules = moe_router moe_preprocess\n[host]\n"
                         "moe_experts = 8\nmoe_router_padding_fp8 = true\nmoe_capacity = drop\n"),
                   CGRT_E_CONFIG);
  assert_int_equal(f->diag.errors, 2);
}

static void rule_full_iteration_needs_nan_check_off(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nimpl = full_iteration\n",
                 "t.ini:2: impl = full_iteration graphs the whole step, which needs [host] "
                 "nan_check = off (a whole-step graph cannot stop for the host to read the loss "
                 "every step), but nan_check = on (default); set nan_check = off, or use impl = "
                 "local");
  assert_refused(f, "[cuda_graph]\nimpl = full_iteration\n[host]\nnan_check = yes\n",
                 "t.ini:4: impl = full_iteration graphs the whole step, which needs [host] "
                 "nan_check = off");
  assert_clean(f, "[cuda_graph]\nimpl = full_iteration\n[host]\nnan_check = off\n");
}

static void rule_full_iteration_needs_empty_modules(void **state) {
  struct fx *f = *state;
  assert_refused(f,
                 "[cuda_graph]\nimpl = full_iteration\nmodules = attn\n[host]\nnan_check = off\n",
                 "t.ini:3: impl = full_iteration graphs the whole step, so [cuda_graph] modules "
                 "must be empty, but modules = attn (line 3)");
}

static void rule_recompute_full_needs_full_iteration(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nimpl = local\n[host]\nrecompute = full\n",
                 "t.ini:4: [host] recompute = full (line 4) is only graph-safe with whole-step "
                 "graphs, impl = full_iteration or dynamic_cp with graph_scope = step");
  assert_error(f, "but impl = local (line 2)");
  assert_clean(f, "[cuda_graph]\nimpl = full_iteration\n[host]\nrecompute = full\nnan_check = "
                  "off\n");
  assert_clean(f, "[host]\nrecompute = full\n"); /* eager: nothing is graphed */
}

static void rule_inference_scope_by_backend(void **state) {
  struct fx *f = *state;
  static const char *const none_only[] = {"transformer_engine", "full_iteration", "dynamic_cp",
                                          "none"};
  char text[256], want[256];
  for (size_t i = 0; i < 4; i++) {
    snprintf(text, sizeof(text),
             "[cuda_graph]\nimpl = %s\ninference_scope = layer\n[host]\nnan_check = off\n",
             none_only[i]);
    snprintf(want, sizeof(want),
             "t.ini:3: [cuda_graph] inference_scope = layer (line 3) is not allowed with impl = "
             "%s, whose inference scope is always none",
             none_only[i]);
    assert_refused(f, text, want);
    snprintf(text, sizeof(text),
             "[cuda_graph]\nimpl = %s\ninference_scope = none\n[host]\nnan_check = off\n",
             none_only[i]);
    assert_clean(f, text);
  }
  assert_refused(f, "[cuda_graph]\nimpl = local\ninference_scope = none\n",
                 "t.ini:3: impl = local needs [cuda_graph] inference_scope = layer or block, but "
                 "inference_scope = none (line 3)");
  assert_clean(f, "[cuda_graph]\nimpl = local\ninference_scope = block\n");
  assert_clean(f, "[cuda_graph]\nimpl = local\ninference_scope = layer\n");
  /* third-party backends decide for themselves */
  assert_clean(f, "[cuda_graph]\nimpl = /opt/x/libcgrt-backend-mine.so\ninference_scope = block\n");
  assert_clean(f, "[cuda_graph]\nimpl = mine\ninference_scope = layer\n");
}

static void rule_graphs_need_graph_safe_rng(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nimpl = local\n[host]\ngraph_safe_rng = false\n",
                 "t.ini:4: impl = local builds graphs, so [host] graph_safe_rng must be true");
  assert_error(f, "but graph_safe_rng = false (line 4)");
  assert_refused(f, "[cuda_graph]\nimpl = trace\n[host]\ngraph_safe_rng = no\n",
                 "impl = trace builds graphs");
  assert_clean(f, "[host]\ngraph_safe_rng = false\n");
}

static void rule_counts_at_least_one(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nwarmup_steps = 0\n",
                 "t.ini:2: [cuda_graph] warmup_steps = 0: must be at least 1 (a capture must "
                 "never be the first run of the work)");
  assert_refused(f, "[cuda_graph]\nmax_graphs = 0\n",
                 "t.ini:2: [cuda_graph] max_graphs = 0: must be at least 1 (the number of "
                 "executable graphs kept alive)");
  assert_refused(f, "[inference]\nnum_graphs = 0\n",
                 "t.ini:2: [inference] num_graphs = 0: must be at least 1 (the number of token "
                 "buckets");
  assert_refused(f, "[inference]\ntp_size = 0\n",
                 "t.ini:2: [inference] tp_size = 0: must be at least 1 (the tensor-parallel size");
  assert_refused(f, "[dynamic_cp]\ngraph_slots = 0\n",
                 "t.ini:2: [dynamic_cp] graph_slots = 0: must be at least 1 (THD metadata slots");
  assert_refused(f, "[dynamic_cp]\nmax_sequences = 0\n",
                 "t.ini:2: [dynamic_cp] max_sequences = 0: must be at least 1 (the capacity of a "
                 "THD slot in packed sequences)");
  assert_refused(f, "[dynamic_cp]\nmax_packed_tokens = 0\n",
                 "t.ini:2: [dynamic_cp] max_packed_tokens = 0: must be at least 1 (the capacity "
                 "of a THD slot in tokens)");
}

/* [runtime] sync_guard: off or on; anything else refused with the two spellings. */
static void sync_guard_values(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[runtime]\nsync_guard = on\n");
  assert_int_equal(f->cfg.view.sync_guard, CGRT_SYNC_GUARD_ON);
  assert_clean(f, "[runtime]\nsync_guard = off\n");
  assert_int_equal(f->cfg.view.sync_guard, CGRT_SYNC_GUARD_OFF);
  assert_refused(f, "[runtime]\nsync_guard = yes\n", "sync_guard");
  assert_refused(f, "[runtime]\nsync_guard = maybe\n", "sync_guard = 'maybe'");
}

/* [runtime] max_queued_steps: 0 (no bound) to 64, the events the runtime keeps for it. */
static void rule_max_queued_steps_at_most_64(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[runtime]\nmax_queued_steps = 65\n",
                 "t.ini:2: [runtime] max_queued_steps = 65: at most 64 (the steps cgrt lets the "
                 "host queue ahead of the device; 0: no limit)");
  /* its own bound in the sentence, not the type's (2147483647) */
  assert_refused(f, "[runtime]\nmax_queued_steps = -1\n",
                 "t.ini:2: [runtime] max_queued_steps = '-1': expected a whole number from 0 to 64 "
                 "(0: no limit)");
  assert_refused(f, "[runtime]\nmax_queued_steps = two\n",
                 "max_queued_steps = 'two': expected a whole number from 0 to 64");
  assert_clean(f, "[runtime]\nmax_queued_steps = 64\n");
  assert_int_equal(f->cfg.view.max_queued_steps, 64);
  int64_t v = 0;
  assert_int_equal(f->cfg.view.get_int(&f->cfg.view, "runtime", "max_queued_steps", &v), 0);
  assert_int_equal(v, 64);
  assert_clean(f, "[runtime]\nmax_queued_steps = 0\n");
  assert_int_equal(f->cfg.view.max_queued_steps, 0);
  assert_clean(f, "[runtime]\nmax_queued_steps = 2\n");
  assert_int_equal(f->cfg.view.max_queued_steps, 2);
}

static void rule_max_tokens_at_least_tp_size(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[inference]\nmax_tokens = 4\ntp_size = 8\n",
                 "t.ini:2: [inference] max_tokens = 4 (line 2) is smaller than tp_size = 8 (line "
                 "3): the smallest bucket holds one token per tensor-parallel rank");
  assert_refused(f, "[inference]\ntp_size = 1024\n",
                 "t.ini:2: [inference] max_tokens = 512 (default) is smaller than tp_size = 1024 "
                 "(line 2)");
  assert_clean(f, "[inference]\nmax_tokens = 8\ntp_size = 8\n");
}

static void rule_bucket_list_needs_sizes(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[inference]\nbuckets = list\n",
                 "t.ini:2: [inference] buckets = list needs the bucket sizes in [inference] list "
                 "(e.g. list = 1 2 4 8), but list is not given");
  assert_refused(f, "[inference]\nbuckets = list\nlist =\n", "but list is empty");
  /* a list without buckets = list is only unused */
  assert_clean(f, "[inference]\nlist = 1 2\n");
}

static void rule_dynamic_cp_needs_a_size(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nimpl = dynamic_cp\n[dynamic_cp]\ncp_sizes =\n",
                 "t.ini:4: impl = dynamic_cp needs at least one context-parallel size in "
                 "[dynamic_cp] cp_sizes (e.g. cp_sizes = 1 2), but cp_sizes = (line 4)");
  assert_clean(f, "[cuda_graph]\nimpl = local\n[dynamic_cp]\ncp_sizes =\n");
}

static void rules_are_reported_together(void **state) {
  struct fx *f = *state;
  assert_int_equal(parse(f, "[cuda_graph]\nimpl = full_iteration\nmodules = attn\nwarmup_steps = "
                            "0\n[host]\ngraph_safe_rng = false\n"),
                   CGRT_E_CONFIG);
  assert_int_equal(f->diag.errors, 4);
  assert_error(f, "needs [host] nan_check = off");
  assert_error(f, "modules must be empty");
  assert_error(f, "warmup_steps = 0: must be at least 1");
  assert_error(f, "graph_safe_rng must be true");
}

static void check_alone_on_a_built_config(void **state) {
  struct fx *f = *state;
  cgrt__config_defaults(&f->cfg);
  f->cfg.view.impl = "local";
  f->cfg.view.inference_scope = CGRT_SCOPE_NONE;
  assert_int_equal(cgrt__config_check(&f->cfg, &f->diag), CGRT_E_CONFIG);
  assert_int_equal(f->diag.errors, 1);
  assert_error(f, "inference_scope = none (default)");
  /* a value out of its range: said, and the backend's check() waits for it */
  cgrt__diag_free(&f->diag);
  f->cfg.view.num_graphs = 0;
  assert_int_equal(cgrt__config_check(&f->cfg, &f->diag), CGRT_E_CONFIG);
  assert_int_equal(f->diag.errors, 1);
  assert_error(f, "[inference] num_graphs = 0: must be at least 1");
}

/* ---------------------------------------------------------------- the backend's own section */

static void backend_section_is_kept_for_the_backend(void **state) {
  struct fx *f = *state;
  /* the section comes before impl: it is decided once the whole file is read */
  assert_clean(f, "[trace]\nformat   =   json  lines\nlevel = 2\n[cuda_graph]\nimpl = trace\n");
  assert_string_equal(f->cfg.backend_section, "trace");
  assert_string_equal(get(f, "trace", "format"), "json lines");
  assert_null(get(f, "trace", "missing"));
  /* `level` was never read */
  assert_int_equal(cgrt__config_check_backend_keys(&f->cfg, &f->diag), CGRT_E_CONFIG);
  assert_int_equal(f->diag.errors, 1);
  assert_error(f, "t.ini:3: unknown key 'level' in [trace]: backend 'trace' does not read it");
  cgrt__diag_free(&f->diag);
  assert_string_equal(get(f, "trace", "level"), "2");
  assert_int_equal(cgrt__config_check_backend_keys(&f->cfg, &f->diag), 0);
  assert_int_equal(f->diag.count, 0);
}

static void backend_section_of_a_path(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[cuda_graph]\nimpl = /a/b/libcgrt-backend-foo.so\n[foo]\nx = 1\n");
  assert_string_equal(get(f, "foo", "x"), "1");
  assert_clean(f, "[x]\nk = v\n[cuda_graph]\nimpl = ./x.so\n");
  assert_string_equal(get(f, "x", "k"), "v");
  assert_refused(f, "[cuda_graph]\nimpl = ./x.so\n[libcgrt-backend-x]\nk = v\n",
                 "t.ini:3: unknown section [libcgrt-backend-x]");
}

static void other_backends_sections_are_unknown(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[trace]\nformat = json\n[cuda_graph]\nimpl = local\n",
                 "t.ini:1: unknown section [trace]");
  assert_null(get(f, "trace", "format"));
  assert_refused(f, "[cuda_graph]\nimpl = trace\n[traec]\nformat = json\n",
                 "t.ini:3: unknown section [traec]; did you mean [trace]?");
  /* by default impl = none owns [none]; its keys are then refused after init */
  assert_clean(f, "[none]\nx = 1\n");
  assert_int_equal(cgrt__config_check_backend_keys(&f->cfg, &f->diag), CGRT_E_CONFIG);
  assert_error(f, "unknown key 'x' in [none]: backend 'none' does not read it");
}

static void backend_section_repeats_and_continuations(void **state) {
  struct fx *f = *state;
  assert_refused(f, "[cuda_graph]\nimpl = trace\n[trace]\na = 1\na = 2\n",
                 "t.ini:5: key 'a' in [trace] is given twice (first at line 4)");
  assert_clean(f, "[cuda_graph]\nimpl = trace\n[trace]\nwraps = one\n  two ; note\n  three\n");
  assert_string_equal(get(f, "trace", "wraps"), "one two three");
}

static void backend_named_like_a_core_section(void **state) {
  struct fx *f = *state;
  /* [dynamic_cp] is the core's: every key is checked now, none is refused after init */
  assert_clean(f, "[cuda_graph]\nimpl = dynamic_cp\n[dynamic_cp]\ncp_sizes = 1 2\n");
  assert_int_equal(cgrt__config_check_backend_keys(&f->cfg, &f->diag), 0);
  assert_string_equal(get(f, "dynamic_cp", "cp_sizes"), "1 2");
  assert_refused(f, "[cuda_graph]\nimpl = dynamic_cp\n[dynamic_cp]\nbank_size = 2\n",
                 "unknown key 'bank_size' in [dynamic_cp]");
}

/* ---------------------------------------------------------------- options backends declare */

static char *print_to_string(const struct cgrt_config *cfg);

/* The path of fixture backend `name` (tests/fixtures), into buf. */
static const char *fixture_path(const char *name, char *buf, size_t len) {
  const char *dir = getenv("CGRT_TEST_FIXTURES");
  snprintf(buf, len, "%s/libcgrt-backend-%s.so", dir ? dir : ".", name);
  return buf;
}

static void dynamic_cp_keys_are_its_options(void **state) {
  struct fx *f = *state;
  /* dynamic_cp's table declares them and is read though another backend is configured */
  assert_int_equal(cgrt__cfg_key_find("dynamic_cp", "graph_slots"), -1);
  assert_true(cgrt__cfg_key_find("dynamic_cp", "cp_sizes") >= 0); /* the communicator split */
  assert_clean(f, "[cuda_graph]\nimpl = none\n[dynamic_cp]\ngraph_slots = 3\ngraph_scope = Step\n");
  struct cgrt_option_value *ov = NULL;
  assert_non_null(cgrt__cfg_option_find(&f->cfg, "dynamic_cp", "graph_slots", &ov));
  assert_int_equal(ov->line, 4);
  int64_t v = 0;
  assert_int_equal(f->cfg.view.get_int(&f->cfg.view, "dynamic_cp", "graph_slots", &v), 0);
  assert_int_equal(v, 3);
  assert_int_equal(f->cfg.view.get_int(&f->cfg.view, "dynamic_cp", "max_sequences", &v), 0);
  assert_int_equal(v, 64);
  assert_string_equal(get(f, "dynamic_cp", "graph_scope"), "step");
  /* the retired view fields keep their values for backends built before minor 5 */
  assert_int_equal(f->cfg.view.graph_slots, 3);
  assert_int_equal(f->cfg.view.cp_scope, CGRT_CP_SCOPE_STEP);
  assert_int_equal(f->cfg.view.max_packed_tokens, 8192);
  assert_int_equal(f->cfg.view.max_sequences, 64);
  assert_int_equal(f->cfg.view.over_capacity, CGRT_OVER_CAPACITY_ERROR);
  /* how a message names them */
  char buf[128];
  assert_int_equal(
      f->cfg.view.describe(&f->cfg.view, "dynamic_cp", "graph_scope", buf, sizeof(buf)), 5);
  assert_string_equal(buf, "graph_scope = step (line 5)");
  assert_int_equal(
      f->cfg.view.describe(&f->cfg.view, "dynamic_cp", "over_capacity", buf, sizeof(buf)), 0);
  assert_string_equal(buf, "over_capacity = error (default)");
  assert_int_equal(f->cfg.view.describe(&f->cfg.view, "host", "nan_check", buf, sizeof(buf)), 0);
  assert_string_equal(buf, "nan_check = on (default)");
  assert_int_equal(f->cfg.view.describe(&f->cfg.view, "dynamic_cp", "nope", buf, sizeof(buf)),
                   CGRT_E_INVAL);
  /* read like the core's keys: spelling, place, repeats, values */
  assert_refused(f, "[dynamic_cp]\ngraph_slot = 2\n",
                 "t.ini:2: unknown key 'graph_slot' in [dynamic_cp]; did you mean 'graph_slots'?");
  assert_refused(f, "[cuda_graph]\ngraph_slots = 2\n",
                 "t.ini:2: key 'graph_slots' belongs in [dynamic_cp], not [cuda_graph]");
  assert_refused(f, "graph_slots = 2\n[cuda_graph]\n",
                 "t.ini:1: key 'graph_slots' is outside any section; put it under [dynamic_cp]");
  assert_refused(f, "[dynamic_cp]\ngraph_slots = 2\ngraph_slots = 3\n",
                 "t.ini:3: key 'graph_slots' in [dynamic_cp] is given twice (first at line 2)");
  assert_refused(f, "[dynamic_cp]\nover_capacity = maybe\n",
                 "t.ini:2: [dynamic_cp] over_capacity = 'maybe': expected one of error, eager");
  /* a range is said with the rules, once the file reads cleanly */
  assert_int_equal(parse(f, "[dynamic_cp]\nmax_sequences = 0\nbank = 1\n"), CGRT_E_CONFIG);
  assert_int_equal(f->diag.errors, 1);
  assert_error(f, "unknown key 'bank' in [dynamic_cp]");
}

static void tools_set_a_declared_option(void **state) {
  struct fx *f = *state;
  char why[256];
  assert_clean(f, "[cuda_graph]\nimpl = dynamic_cp\n");
  assert_int_equal(f->cfg.view.cp_scope, CGRT_CP_SCOPE_MODULES);
  assert_int_equal(
      cgrt__config_set_option(&f->cfg, "dynamic_cp", "graph_scope", "step", why, sizeof(why)), 0);
  assert_int_equal(f->cfg.view.cp_scope, CGRT_CP_SCOPE_STEP);
  assert_string_equal(get(f, "dynamic_cp", "graph_scope"), "step");
  assert_int_equal(
      cgrt__config_set_option(&f->cfg, "dynamic_cp", "graph_scope", "both", why, sizeof(why)),
      CGRT_E_CONFIG);
  assert_int_equal(
      cgrt__config_set_option(&f->cfg, "dynamic_cp", "graph_slots", "0", why, sizeof(why)),
      CGRT_E_CONFIG);
  assert_non_null(strstr(why, "must be at least 1"));
  assert_int_equal(
      cgrt__config_set_option(&f->cfg, "dynamic_cp", "cp_sizes", "1 2", why, sizeof(why)),
      CGRT_E_INVAL); /* the core's key, not an option */
}

static void a_backend_checks_its_own_rules(void **state) {
  struct fx *f = *state;
  char path[1024], text[2048];
  fixture_path("ruled", path, sizeof(path));
  /* its default of a core key; not given, so get() has none */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n", path);
  assert_clean(f, text);
  assert_int_equal(f->cfg.view.inference_scope, CGRT_SCOPE_BLOCK);
  assert_null(get(f, "cuda_graph", "inference_scope"));
  char *out = print_to_string(&f->cfg);
  assert_non_null(strstr(out, "inference_scope = block\n"));
  assert_non_null(strstr(out, "\n[ruled]\ndepth = 2\n"));
  assert_null(strstr(out, "cuda_graph.inference_scope")); /* a default, not a key of [ruled] */
  free(out);
  /* its check(), at the line it names */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\ninference_scope = none\n", path);
  assert_refused(f, text,
                 "t.ini:3: ruled needs an inference scope, but inference_scope = none (line 3)");
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\ninference_scope = layer\n[ruled]\ndepth = 6\n", path);
  assert_refused(f, text,
                 "t.ini:5: ruled: depth = 6 (line 5) is too deep for inference_scope = layer "
                 "(line 3)");
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[ruled]\ndepth = 9\n", path);
  assert_refused(f, text, "t.ini:4: [ruled] depth = 9: must be from 1 to 8 (depth)");
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[ruled]\ndpeth = 3\n", path);
  assert_refused(f, text, "t.ini:4: unknown key 'dpeth' in [ruled]; did you mean 'depth'?");
  /* eager, with rules of its own: none of the rules for graphs */
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[host]\ngraph_safe_rng = false\nrecompute = full\n", path);
  assert_clean(f, text);
  /* a hand-built configuration: check() loads the table to run its rules */
  cgrt__config_free(&f->cfg);
  cgrt__diag_free(&f->diag);
  cgrt__config_defaults(&f->cfg);
  f->cfg.view.impl = path;
  assert_int_equal(cgrt__config_check(&f->cfg, &f->diag), CGRT_E_CONFIG);
  assert_error(f, "ruled needs an inference scope, but inference_scope = none (default)");
  f->cfg.view.impl = NULL; /* not the configuration's to free */
}

static void backends_without_check_keep_the_core_rules(void **state) {
  struct fx *f = *state;
  char path[1024], text[2048];
  /* not found: taken to build graphs, as before */
  assert_refused(f, "[cuda_graph]\nimpl = mine\n[host]\nrecompute = full\n",
                 "t.ini:4: [host] recompute = full (line 4) is only graph-safe with whole-step "
                 "graphs");
  assert_refused(f, "[cuda_graph]\nimpl = mine\n[host]\ngraph_safe_rng = false\n",
                 "impl = mine builds graphs");
  /* built against the first v1 header: no check(), no graphs: neither rule */
  fixture_path("old_v1", path, sizeof(path));
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[host]\nrecompute = full\ngraph_safe_rng = false\n", path);
  assert_clean(f, text);
}

/* ---------------------------------------------------------------- issue 40: sections, rules */

/* A fresh folder holding fixture backend `name` copied as libcgrt-backend-AS.so: the folder into
   dir, the copy's path into buf. */
static const char *renamed_fixture(const char *name, const char *as, char *dir, size_t dirlen,
                                   char *buf, size_t len) {
  char src[1024];
  fixture_path(name, src, sizeof(src));
  snprintf(dir, dirlen, "/tmp/cgrt-renamed-XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(buf, len, "%s/libcgrt-backend-%s.so", dir, as);
  FILE *in = fopen(src, "rb"), *out = fopen(buf, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0)
    assert_int_equal(fwrite(chunk, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
  return buf;
}

static int64_t option_int(struct fx *f, const char *section, const char *key) {
  int64_t v = -1;
  assert_int_equal(f->cfg.view.get_int(&f->cfg.view, section, key, &v), 0);
  return v;
}

static void a_renamed_backend_reads_its_own_section(void **state) {
  struct fx *f = *state;
  char dir[64], path[1024], text[4096];
  renamed_fixture("capper", "stepcap", dir, sizeof(dir), path, sizeof(path));
  /* its section is its table's name, [capper], not its file's */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[capper]\nmax_steps = 7\n", path);
  assert_clean(f, text);
  assert_string_equal(f->cfg.backend_section, "capper");
  assert_int_equal(option_int(f, "capper", "max_steps"), 7);
  char *out = print_to_string(&f->cfg);
  assert_non_null(strstr(out, "\n[capper]\nmax_steps = 7\n"));
  assert_non_null(strstr(out, "backend 'capper'"));
  assert_non_null(strstr(out, "its check() ran"));
  free(out);
  /* no section at all: the declared default */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n", path);
  assert_clean(f, text);
  assert_int_equal(option_int(f, "capper", "max_steps"), 10);
  /* by name on backend_path: the same */
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = stepcap\nbackend_path = %s\n[capper]\nmax_steps = 9\n", dir);
  assert_clean(f, text);
  assert_int_equal(option_int(f, "capper", "max_steps"), 9);
  /* the file's name is no section, and the message says which is */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[stepcap]\nmax_steps = 7\n", path);
  assert_refused(f, text, "t.ini:3: unknown section [stepcap]: backend 'capper' (");
  assert_error(f, "reads its keys in [capper], the name in its table, whatever its file is called");
  /* its check() runs under any file name */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[capper]\nmax_steps = 80\n", path);
  assert_refused(f, text, "t.ini:4: capper: max_steps = 80 (line 4) is above 64; its check() ran");
  cgrt__config_free(&f->cfg);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(rmdir(dir), 0);
}

static void check_runs_only_on_values_in_range(void **state) {
  struct fx *f = *state;
  char path[1024], text[2048];
  fixture_path("capper", path, sizeof(path));
  /* out of its declared range: said, and check() does not run on it */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[capper]\nmax_steps = 500\n", path);
  assert_refused(f, text,
                 "t.ini:4: [capper] max_steps = 500: must be from 1 to 100 (steps graphed)");
  assert_no_msg(f, "its check() ran");
  /* nor on a core key out of its range */
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\nwarmup_steps = 0\n[capper]\nmax_steps = 80\n", path);
  assert_refused(f, text, "warmup_steps = 0: must be at least 1");
  /* in range: it runs */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[capper]\nmax_steps = 80\n", path);
  assert_refused(f, text, "its check() ran");
  char *out = print_to_string(&f->cfg);
  assert_non_null(strstr(out, "its check() ran"));
  free(out);
}

static void core_rules_apply_by_capability(void **state) {
  struct fx *f = *state;
  char capper[1024], whole[1024], text[4096];
  fixture_path("capper", capper, sizeof(capper));
  fixture_path("wholestep", whole, sizeof(whole));
  /* per-call graphs and a check() of its own: full recomputation is still refused */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[host]\nrecompute = full\n", capper);
  assert_refused(f, text,
                 "t.ini:4: [host] recompute = full (line 4) is only graph-safe with whole-step "
                 "graphs");
  assert_error(f, "(backend 'capper') builds per-module graphs");
  /* whole-step graphs (CGRT_CAP_WHOLE_STEP), no check(): the host cannot read the loss */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n", whole);
  assert_refused(f, text, "t.ini:2: impl = ");
  assert_error(f, "(backend 'wholestep') graphs the whole step, which needs [host] nan_check = "
                  "off (a whole-step graph cannot stop for the host to read the loss every "
                  "step), but nan_check = on (default)");
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[host]\nnan_check = off\n", whole);
  assert_clean(f, text);
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[host]\nnan_check = off\nrecompute = full\n", whole);
  assert_clean(f, text);
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\nmodules = attn\n[host]\nnan_check = off\n",
           whole);
  assert_refused(f, text, "t.ini:3: impl = ");
  assert_error(f, "graphs the whole step, so [cuda_graph] modules must be empty");
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[inference]\nbuckets = adaptive\n[host]\nnan_check = off\n",
           whole);
  assert_refused(f, text, "t.ini:4: [inference] buckets = adaptive (line 4) only works with");
  assert_error(f, "does not follow adaptive buckets");
  /* dynamic_cp: whole steps with graph_scope = step only (its config_caps()) */
  assert_clean(f, "[cuda_graph]\nimpl = dynamic_cp\n[dynamic_cp]\ngraph_scope = step\n[host]\n"
                  "nan_check = off\nrecompute = full\n");
  assert_refused(f, "[cuda_graph]\nimpl = dynamic_cp\n[dynamic_cp]\ngraph_scope = step\n",
                 "t.ini:2: impl = dynamic_cp with [dynamic_cp] graph_scope = step (line 4) graphs "
                 "the whole step, which needs [host] nan_check = off");
  assert_error(f, "set nan_check = off, or change [dynamic_cp] graph_scope = step (line 4)");
  assert_refused(f, "[cuda_graph]\nimpl = dynamic_cp\n[host]\nrecompute = full\n",
                 "is only graph-safe with whole-step graphs");
}

static void a_decorator_lends_its_inner_backends_section(void **state) {
  struct fx *f = *state;
  char trace[1024], capper[1024], other[1024], text[4096];
  fixture_path("trace", trace, sizeof(trace));
  fixture_path("capper", capper, sizeof(capper));
  /* [capper] is read with capper's declared options, for trace's inner backend */
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[trace]\ninner = %s\n[capper]\nmax_steps = 7\n", trace,
           capper);
  assert_clean(f, text);
  assert_int_equal(option_int(f, "capper", "max_steps"), 7);
  assert_string_equal(get(f, "trace", "inner"), capper);
  assert_string_equal(get(f, "trace", "calls"), "on");
  char *out = print_to_string(&f->cfg);
  assert_non_null(strstr(out, "\n[trace]\ninner = "));
  assert_non_null(strstr(out, "\ncalls = on\n\n[capper]\nmax_steps = 7\n"));
  assert_non_null(strstr(out, "it wraps the backend named below"));
  assert_non_null(strstr(out, "backend 'capper'"));
  free(out);
  /* typed, ranged and checked as if it were impl */
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[trace]\ninner = %s\n[capper]\nmax_step = 7\n", trace, capper);
  assert_refused(f, text, "t.ini:6: unknown key 'max_step' in [capper]; did you mean 'max_steps'?");
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[trace]\ninner = %s\n[capper]\nmax_steps = 500\n", trace,
           capper);
  assert_refused(f, text, "t.ini:6: [capper] max_steps = 500: must be from 1 to 100");
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[trace]\ninner = %s\n[capper]\nmax_steps = 80\n", trace,
           capper);
  assert_refused(f, text, "t.ini:6: capper: max_steps = 80 (line 6) is above 64; its check() ran");
  /* the core's rules judge the inner backend, not trace */
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[trace]\ninner = %s\n[host]\nrecompute = full\n", trace,
           capper);
  assert_refused(f, text, "is only graph-safe with whole-step graphs");
  assert_error(f, "but backend 'capper' ([trace] inner = ");
  fixture_path("wholestep", other, sizeof(other));
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[trace]\ninner = %s\n", trace, other);
  assert_refused(f, text, "t.ini:4: backend 'wholestep' ([trace] inner = ");
  assert_error(f, "graphs the whole step, which needs [host] nan_check = off");
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[trace]\ninner = none\n[host]\ngraph_safe_rng = false\n",
           trace);
  assert_clean(f, text); /* none builds no graph */
  /* trace's own keys are declared now */
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[trace]\ninner = none\ncolors = on\n",
           trace);
  assert_refused(f, text, "t.ini:5: unknown key 'colors' in [trace]; backend 'trace' (");
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[trace]\ncalls = maybe\n", trace);
  assert_int_equal(parse(f, text), CGRT_E_CONFIG);
  assert_error(f, "t.ini:4: [trace] calls = 'maybe': expected one of on, off");
  assert_error(f, "t.ini:2: backend 'trace' (");
  assert_error(f, "wraps the backend that [trace] inner names, but it is not given");
  snprintf(text, sizeof(text), "[cuda_graph]\nimpl = %s\n[trace]\ninner = %s\n", trace, trace);
  assert_refused(f, text, "t.ini:4: backend 'trace' (");
  assert_error(f, "a decorator cannot wrap itself");
  /* an inner backend that cannot be loaded now: its file's name, left to trace's init */
  snprintf(text, sizeof(text),
           "[cuda_graph]\nimpl = %s\n[trace]\ninner = nosuch\n[nosuch]\nx = 1\n", trace);
  assert_clean(f, text);
  out = print_to_string(&f->cfg);
  assert_non_null(strstr(out, "[trace] inner = nosuch: not loaded now"));
  assert_non_null(strstr(out, "its options and its check() were not read"));
  free(out);
}

/* ---------------------------------------------------------------- printing */

/* Prints cfg into a malloc'ed string. */
static char *print_to_string(const struct cgrt_config *cfg) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  assert_non_null(out);
  assert_int_equal(cgrt__config_print(cfg, out), 0);
  fclose(out);
  return buf;
}

static void assert_same_config(const struct cgrt_config *a, const struct cgrt_config *b) {
  const struct cgrt_config_view *x = &a->view, *y = &b->view;
  assert_string_equal(x->impl, y->impl);
  assert_int_equal(x->modules, y->modules);
  assert_int_equal(x->warmup_steps, y->warmup_steps);
  assert_int_equal(x->inference_scope, y->inference_scope);
  assert_int_equal(x->capture_mode, y->capture_mode);
  assert_int_equal(x->rebind, y->rebind);
  assert_int_equal(x->max_graphs, y->max_graphs);
  assert_true((a->backend_path == NULL) == (b->backend_path == NULL));
  if (a->backend_path)
    assert_string_equal(a->backend_path, b->backend_path);
  assert_int_equal(x->buckets, y->buckets);
  assert_int_equal(x->max_tokens, y->max_tokens);
  assert_int_equal(x->num_graphs, y->num_graphs);
  assert_int_equal(x->tp_size, y->tp_size);
  assert_int_equal(x->bucket_list_len, y->bucket_list_len);
  for (size_t i = 0; i < x->bucket_list_len; i++)
    assert_int_equal(x->bucket_list[i], y->bucket_list[i]);
  assert_int_equal(x->capture, y->capture);
  assert_int_equal(x->num_cp_sizes, y->num_cp_sizes);
  for (size_t i = 0; i < x->num_cp_sizes; i++)
    assert_int_equal(x->cp_sizes[i], y->cp_sizes[i]);
  assert_int_equal(x->max_packed_tokens, y->max_packed_tokens);
  assert_int_equal(x->max_sequences, y->max_sequences);
  assert_int_equal(x->graph_slots, y->graph_slots);
  assert_int_equal(x->over_capacity, y->over_capacity);
  assert_int_equal(x->cp_scope, y->cp_scope);
  assert_int_equal(x->device, y->device);
  assert_int_equal(x->driver, y->driver);
  assert_int_equal(x->bind_cpu, y->bind_cpu);
  assert_int_equal(x->log_level, y->log_level);
  assert_int_equal(x->nan_check, y->nan_check);
  assert_int_equal(x->recompute, y->recompute);
  assert_int_equal(x->moe_experts, y->moe_experts);
  assert_int_equal(x->moe_dispatcher, y->moe_dispatcher);
  assert_int_equal(x->moe_capacity, y->moe_capacity);
  assert_int_equal(x->moe_router_padding_fp8, y->moe_router_padding_fp8);
  assert_int_equal(x->graph_safe_rng, y->graph_safe_rng);
}

/* Parses text, prints it, parses the print: the same configuration, and the same print again. */
static void assert_round_trip(struct fx *f, const char *text) {
  if (parse(f, text) != 0) {
    dump(f);
    fail_msg("the original does not parse");
  }
  char *first = print_to_string(&f->cfg);
  struct cgrt_config again = {0};
  struct cgrt_diag diag = {0};
  int rc = cgrt__config_parse(&again, first, "printed", &diag);
  if (rc != 0 || diag.count != 0) {
    for (size_t i = 0; i < diag.count; i++)
      print_message("  %s\n", diag.msgs[i].text);
    fail_msg("the print does not parse cleanly:\n%s", first);
  }
  assert_same_config(&f->cfg, &again);
  char *second = print_to_string(&again);
  assert_string_equal(strchr(first, '\n'), strchr(second, '\n')); /* past the source comment */
  /* the backend's section comes along */
  if (f->cfg.backend_section) {
    for (size_t i = 0; i < f->cfg.num_entries; i++) {
      const struct cgrt_config_entry *e = &f->cfg.entries[i];
      if (strcmp(e->section, f->cfg.backend_section) == 0)
        assert_string_equal(again.view.get(&again.view, e->section, e->key), e->value);
    }
  }
  free(first);
  free(second);
  cgrt__config_free(&again);
  cgrt__diag_free(&diag);
}

static void print_writes_every_key_in_order(void **state) {
  struct fx *f = *state;
  assert_clean(f, "");
  char *text = print_to_string(&f->cfg);
  static const char *const in_order[] = {
      "[cuda_graph]\n",
      "impl = none\n",
      "modules =\n",
      "warmup_steps = 3\n",
      "inference_scope = none\n",
      "capture_mode = thread_local\n",
      "rebind = auto\n",
      "max_graphs = 512\n",
      "backend_path =\n",
      "[inference]\n",
      "buckets = exponential\n",
      "max_tokens = 512\n",
      "num_graphs = 8\n",
      "tp_size = 1\n",
      "list =\n",
      "capture = lazy\n",
      "[dynamic_cp]\n",
      "cp_sizes = 1\n",
      "max_packed_tokens = 8192\n",
      "max_sequences = 64\n",
      "graph_slots = 2\n",
      "over_capacity = error\n",
      "graph_scope = modules\n",
      "[runtime]\n",
      "device = current\n",
      "driver = cuda\n",
      "bind_cpu = auto\n",
      "log = info\n",
      "[host]\n",
      "nan_check = on\n",
      "recompute = none\n",
      "moe_experts = 0\n",
      "moe_dispatcher = alltoall\n",
      "moe_capacity = none\n",
      "moe_router_padding_fp8 = false\n",
      "graph_safe_rng = true\n",
  };
  const char *at = text;
  for (size_t i = 0; i < sizeof(in_order) / sizeof(in_order[0]); i++) {
    const char *next = strstr(at, in_order[i]);
    if (!next)
      fail_msg("'%s' missing or out of order in:\n%s", in_order[i], text);
    at = next + strlen(in_order[i]);
  }
  free(text);
}

static void print_round_trips(void **state) {
  struct fx *f = *state;
  assert_round_trip(f, "");
  assert_round_trip(f, all_keys);
  assert_round_trip(f, "[cuda_graph]\nimpl = trace\nmodules = mlp\n[trace]\nformat = json lines\n"
                       "inner = local\n[host]\nnan_check = off\n");
  assert_round_trip(f, "[cuda_graph]\nimpl = full_iteration\n[host]\nnan_check = off\n"
                       "[dynamic_cp]\ncp_sizes =\n");
  /* a legacy file prints in the new spelling, and reads back without warnings */
  assert_round_trip(f, "[cuda_graph]\nscope = full_iteration_inference\n");
  char *text = print_to_string(&f->cfg);
  assert_non_null(strstr(text, "impl = local\n"));
  assert_non_null(strstr(text, "inference_scope = block\n"));
  assert_null(strstr(text, "scope = full"));
  free(text);
}

static void print_wraps_long_values(void **state) {
  struct fx *f = *state;
  char text[8192];
  int n = snprintf(text, sizeof(text), "[inference]\nbuckets = list\nlist =\n");
  for (int i = 1; i <= 300; i++)
    n += snprintf(text + n, sizeof(text) - (size_t)n, "%s%d%s", i % 20 == 1 ? "  " : " ", i * 7,
                  i % 20 == 0 ? "\n" : "");
  snprintf(text + n, sizeof(text) - (size_t)n, "\n");
  assert_round_trip(f, text);
  assert_int_equal(f->cfg.view.bucket_list_len, 300);
  char *out = print_to_string(&f->cfg);
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
    assert_true(strlen(line) <= (size_t)(INI_MAX_LINE - 2));
  free(out);
}

/* ---------------------------------------------------------------- files */

static void load_reports_unreadable_files(void **state) {
  struct fx *f = *state;
  assert_int_equal(cgrt__config_load(&f->cfg, "/nonexistent/dir/x.ini", &f->diag), CGRT_E_IO);
  assert_error(f, "cannot read '/nonexistent/dir/x.ini': No such file or directory");
  cgrt__config_free(&f->cfg);
  cgrt__diag_free(&f->diag);
  assert_int_equal(cgrt__config_load(&f->cfg, "/", &f->diag), CGRT_E_CONFIG);
  assert_error(f, "cannot read '/': it is not a regular file (a directory, a device or a pipe)");
  cgrt__config_free(&f->cfg);
  cgrt__diag_free(&f->diag);
  /* A device that never ends and a FIFO that nobody writes: refused at once, never read. */
  assert_int_equal(cgrt__config_load(&f->cfg, "/dev/zero", &f->diag), CGRT_E_CONFIG);
  assert_error(f, "cannot read '/dev/zero': it is not a regular file");
  cgrt__config_free(&f->cfg);
  cgrt__diag_free(&f->diag);
  char fifo[] = "/tmp/cgrt-test-fifo-XXXXXX";
  int fd = mkstemp(fifo);
  assert_true(fd >= 0);
  close(fd);
  unlink(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(cgrt__config_load(&f->cfg, fifo, &f->diag), CGRT_E_CONFIG);
  assert_error(f, "it is not a regular file");
  unlink(fifo);
}

/* Writes text to a fresh temporary file; returns its malloc'ed name. */
static char *temp_file(const char *text, size_t len) {
  char *name = strdup("/tmp/cgrt-test-config-XXXXXX");
  assert_non_null(name);
  int fd = mkstemp(name);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, len), (ssize_t)len);
  close(fd);
  return name;
}

static void load_names_the_file_in_messages(void **state) {
  struct fx *f = *state;
  static const char text[] = "[cuda_graph]\nimpl = local\nwarmup_step = 1\n";
  char *name = temp_file(text, sizeof(text) - 1);
  assert_int_equal(cgrt__config_load(&f->cfg, name, &f->diag), CGRT_E_CONFIG);
  char want[256];
  snprintf(want, sizeof(want), "%s:3: unknown key 'warmup_step' in [cuda_graph]", name);
  assert_error(f, want);
  assert_string_equal(f->cfg.source, name);
  assert_string_equal(f->cfg.view.impl, "local");
  unlink(name);
  free(name);
}

static void load_refuses_binary_files(void **state) {
  struct fx *f = *state;
  static const char text[] = "[cuda_graph]\nimpl = local\n\0garbage";
  char *name = temp_file(text, sizeof(text) - 1);
  assert_int_equal(cgrt__config_load(&f->cfg, name, &f->diag), CGRT_E_CONFIG);
  char want[256];
  snprintf(want, sizeof(want), "%s:3: the file holds a NUL byte", name);
  assert_error(f, want);
  unlink(name);
  free(name);
}

/* A file's relative paths resolve from its folder; a string's and absolute ones stay. */
static void paths_resolve_from_the_files_folder(void **state) {
  struct fx *f = *state;
  static const char text[] = "[cuda_graph]\nimpl = ./x.so\nbackend_path = a::/abs:./b:.\n";
  char *name = temp_file(text, sizeof(text) - 1);
  assert_int_equal(cgrt__config_load(&f->cfg, name, &f->diag), 0);
  char tmp[4096];
  assert_non_null(realpath("/tmp", tmp));
  assert_string_equal(f->cfg.dir, tmp); /* mkstemp's folder, absolute */
  free(f->cfg.dir);
  f->cfg.dir = strdup("/tmp");                     /* the table below spells it so */
  assert_string_equal(f->cfg.view.impl, "./x.so"); /* as written: printed, cgrt_config_get */
  char *out = NULL;
  static const char *const impl[][2] = {
      {"./x.so", "/tmp/x.so"},   {"x.so", "/tmp/x.so"},
      {"././x.so", "/tmp/x.so"}, {"../lib/x.so", "/tmp/../lib/x.so"},
      {"sub/x", "/tmp/sub/x"},   {"/abs/x.so", NULL},
      {"local", NULL},           {"my-backend", NULL},
  };
  for (size_t i = 0; i < sizeof(impl) / sizeof(impl[0]); i++) {
    assert_int_equal(cgrt__config_resolve_impl(&f->cfg, impl[i][0], &out), 0);
    if (!impl[i][1])
      assert_null(out);
    else
      assert_string_equal(out, impl[i][1]);
    free(out);
  }
  assert_int_equal(cgrt__config_resolve_dirs(&f->cfg, f->cfg.backend_path, &out), 0);
  assert_string_equal(out, "/tmp/a::/abs:/tmp/b:/tmp");
  free(out);
  assert_int_equal(cgrt__config_resolve_dirs(&f->cfg, "/x:/y", &out), 0);
  assert_null(out);
  /* The root folder joins with one slash. */
  free(f->cfg.dir);
  f->cfg.dir = strdup("/");
  assert_int_equal(cgrt__config_resolve_impl(&f->cfg, "./x.so", &out), 0);
  assert_string_equal(out, "/x.so");
  free(out);
  unlink(name);
  free(name);

  /* Given as a string: no folder, paths resolve from the working directory (left as written). */
  assert_int_equal(parse(f, text), 0);
  assert_null(f->cfg.dir);
  assert_int_equal(cgrt__config_resolve_impl(&f->cfg, "./x.so", &out), 0);
  assert_null(out);
  assert_int_equal(cgrt__config_resolve_dirs(&f->cfg, "a:b", &out), 0);
  assert_null(out);
}

/* Loads every *.ini of dir: each must validate; legacy ones warn, the others say nothing. */
static int check_conf_dir(struct fx *f, const char *dir, int legacy) {
  DIR *d = opendir(dir);
  if (!d)
    fail_msg("cannot open %s", dir);
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 4 || strcmp(e->d_name + n - 4, ".ini") != 0)
      continue;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    cgrt__config_free(&f->cfg);
    cgrt__diag_free(&f->diag);
    int rc = cgrt__config_load(&f->cfg, path, &f->diag);
    if (rc != 0 || f->diag.errors || (legacy ? f->diag.warnings == 0 : f->diag.warnings != 0)) {
      dump(f);
      fail_msg("%s: rc %d, %d errors, %d warnings", path, rc, f->diag.errors, f->diag.warnings);
    }
    if (legacy)
      assert_warning(f, "is a legacy spelling; write");
    /* the examples are for real use: on the GPU */
    assert_int_equal(f->cfg.view.driver, CGRT_DRIVER_CUDA);
    /* each backend's example names that backend */
    static const char *const backends[] = {"none", "local", "transformer_engine", "full_iteration",
                                           "dynamic_cp"};
    for (size_t i = 0; !legacy && i < 5; i++)
      if (strncmp(e->d_name, backends[i], strlen(backends[i])) == 0 &&
          (e->d_name[strlen(backends[i])] == '.' || e->d_name[strlen(backends[i])] == '_'))
        assert_string_equal(f->cfg.view.impl, backends[i]);
    count++;
  }
  closedir(d);
  return count;
}

static void every_shipped_example_validates(void **state) {
  struct fx *f = *state;
  const char *src = getenv("CGRT_SOURCE_DIR");
  if (!src || !src[0]) {
    print_message("CGRT_SOURCE_DIR is not set (run through ctest): conf/ not checked\n");
    skip();
  }
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/conf", src);
  assert_true(check_conf_dir(f, dir, 0) >= 7); /* default + one per built-in backend */
  static const char *const needed[] = {
      "default",        "none",      "local", "local_block", "transformer_engine",
      "full_iteration", "dynamic_cp"};
  for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/conf/%s.ini", src, needed[i]);
    if (access(path, R_OK) != 0)
      fail_msg("missing example %s", path);
  }
  snprintf(dir, sizeof(dir), "%s/conf/legacy", src);
  assert_true(check_conf_dir(f, dir, 1) >= 2);
}

/* ---------------------------------------------------------------- small pieces */

static void names_and_distances(void **state) {
  (void)state;
  assert_string_equal(cgrt__scope_name(CGRT_SCOPE_BLOCK), "block");
  assert_string_equal(cgrt__rebind_name(CGRT_REBIND_RECAPTURE), "recapture");
  assert_string_equal(cgrt__capture_mode_name(CGRT_CAPTURE_THREAD_LOCAL), "thread_local");
  assert_string_equal(cgrt__driver_name(CGRT_DRIVER_HOST), "host");
  assert_string_equal(cgrt__bucket_dist_name(CGRT_BUCKETS_LINEAR), "linear");
  assert_string_equal(cgrt__scope_name((cgrt_inference_scope)42), "?");
  cgrt_kind k = CGRT_KIND_ATTN;
  assert_int_equal(cgrt__kind_from_name("moe_preprocess", &k), 0);
  assert_int_equal(k, CGRT_KIND_MOE_PREPROCESS);
  assert_int_equal(cgrt__kind_from_name("other", &k), 0);
  assert_int_equal(k, CGRT_KIND_OTHER);
  assert_int_equal(cgrt__kind_from_name("transformer", &k), CGRT_E_INVAL);
  assert_int_equal(cgrt__kind_from_name(NULL, &k), CGRT_E_INVAL);
  assert_int_equal(cgrt__edit_distance("kitten", "sitting"), 3);
  assert_int_equal(cgrt__edit_distance("", "abc"), 3);
  assert_int_equal(cgrt__edit_distance("abc", ""), 3);
  assert_int_equal(cgrt__edit_distance("same", "same"), 0);
  assert_int_equal(cgrt__edit_distance("warmup_step", "warmup_steps"), 1);
  assert_int_equal(cgrt__edit_distance("ab", "ba"), 2);
}

/* [runtime] device: `current` (any case) or an index. */
static void device_current_or_index(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[runtime]\ndevice = CURRENT\n");
  assert_int_equal(f->cfg.view.device, -1);
  assert_clean(f, "[runtime]\ndevice = 3\n");
  assert_int_equal(f->cfg.view.device, 3);
  assert_refused(f, "[runtime]\ndevice = 1 2\n", "[runtime] device = '1 2': expected current");
}

static void view_get_edge_cases(void **state) {
  struct fx *f = *state;
  assert_clean(f, "[runtime]\ndevice = 1\n");
  const struct cgrt_config_view *v = &f->cfg.view;
  assert_null(v->get(v, NULL, "device"));
  assert_null(v->get(v, "runtime", NULL));
  assert_null(v->get(NULL, "runtime", "device"));
  assert_int_equal(f->cfg.entries[0].used, 0);
  assert_string_equal(v->get(v, "runtime", "device"), "1");
  assert_int_equal(f->cfg.entries[0].used, 1);
  assert_null(v->get(v, "runtime", "driver")); /* a default: not given */
}

/* Many configurations read at once on separate threads must not interfere. */
static void *parse_many(void *arg) {
  long id = (long)arg;
  for (int i = 0; i < 200; i++) {
    char text[256];
    snprintf(text, sizeof(text),
             "[cuda_graph]\nimpl = local\nwarmup_steps = %ld\n[inference]\nlist = %d 1\n[nosuch]\n",
             id + 1, i + 2);
    struct cgrt_config cfg = {0};
    struct cgrt_diag diag = {0};
    int rc = cgrt__config_parse(&cfg, text, "thread", &diag);
    int ok = rc == CGRT_E_CONFIG && diag.errors == 1 && cfg.view.warmup_steps == id + 1 &&
             cfg.view.bucket_list_len == 2 && cfg.view.bucket_list[1] == i + 2 &&
             strstr(diag.msgs[0].text, "thread:6: unknown section [nosuch]") != NULL;
    cgrt__config_free(&cfg);
    cgrt__diag_free(&diag);
    if (!ok)
      return (void *)1;
  }
  return NULL;
}

static void parsing_is_thread_safe(void **state) {
  (void)state;
  pthread_t t[8];
  for (long i = 0; i < 8; i++)
    assert_int_equal(pthread_create(&t[i], NULL, parse_many, (void *)i), 0);
  for (int i = 0; i < 8; i++) {
    void *r = NULL;
    pthread_join(t[i], &r);
    assert_null(r);
  }
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(defaults_without_text),
      T(defaults_of_an_empty_file),
      T(inference_scope_default_follows_impl),
      T(every_key_is_read),
      T(each_enumerated_value),
      T(enumerated_values_ignore_case),
      T(every_boolean_spelling),
      T(impl_names_and_paths),
      T(impl_bad_spellings),
      T(paths_resolve_from_the_files_folder),
      T(modules_lists),
      T(integer_values),
      T(enumerated_bad_values_list_the_valid_ones),
      T(bucket_list_sorted_without_repeats),
      T(cp_sizes_sorted_and_distinct),
      T(backend_path_empty_means_default),
      T(comments_continuations_and_separators),
      T(syntax_errors_name_their_line),
      T(overlong_lines_are_refused),
      T(repeated_keys_name_both_lines),
      T(messages_come_in_line_order),
      T(unknown_section_suggests_the_nearest),
      T(unknown_key_suggests_the_nearest),
      T(keys_outside_any_section),
      T(legacy_spellings_migrate_with_a_warning),
      T(legacy_and_new_keys_mix_when_they_set_different_keys),
      T(legacy_bad_values),
      T(conflicts_name_both_lines_and_spellings),
      T(rule_moe_and_moe_router_exclude_each_other),
      T(rule_moe_preprocess_needs_moe_router),
      T(rule_moe_needs_experts),
      T(rule_moe_needs_drop_and_pad),
      T(rule_moe_preprocess_alltoall_drop),
      T(rule_moe_preprocess_alltoall_padding_fp8),
      T(rule_full_iteration_needs_nan_check_off),
      T(rule_full_iteration_needs_empty_modules),
      T(rule_recompute_full_needs_full_iteration),
      T(rule_inference_scope_by_backend),
      T(rule_graphs_need_graph_safe_rng),
      T(rule_counts_at_least_one),
      T(rule_max_queued_steps_at_most_64),
      T(sync_guard_values),
      T(rule_max_tokens_at_least_tp_size),
      T(rule_bucket_list_needs_sizes),
      T(rule_dynamic_cp_needs_a_size),
      T(rules_are_reported_together),
      T(check_alone_on_a_built_config),
      T(backend_section_is_kept_for_the_backend),
      T(backend_section_of_a_path),
      T(other_backends_sections_are_unknown),
      T(backend_section_repeats_and_continuations),
      T(backend_named_like_a_core_section),
      T(dynamic_cp_keys_are_its_options),
      T(tools_set_a_declared_option),
      T(a_backend_checks_its_own_rules),
      T(backends_without_check_keep_the_core_rules),
      T(a_renamed_backend_reads_its_own_section),
      T(check_runs_only_on_values_in_range),
      T(core_rules_apply_by_capability),
      T(a_decorator_lends_its_inner_backends_section),
      T(print_writes_every_key_in_order),
      T(print_round_trips),
      T(print_wraps_long_values),
      T(load_reports_unreadable_files),
      T(load_names_the_file_in_messages),
      T(load_refuses_binary_files),
      T(every_shipped_example_validates),
      T(names_and_distances),
      T(device_current_or_index),
      T(view_get_edge_cases),
      T(parsing_is_thread_safe),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
