/*
 * test_tool.c - cgrt/tool.h, the interface the `cgrt` command uses: reading, changing and opening
 * a configuration, and the graph watcher, which must report every executable cgrt instantiates,
 * uploads and launches (what `cgrt bench --explain` relies on to show the graphs cgrt builds).
 * Host driver: runs anywhere.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/tool.h"

#define MAX_EVENTS 256

struct watched {
  struct cgrt_tool_graph_event ev[MAX_EVENTS];
  int n;
  int with_graph[MAX_EVENTS]; /* the graph handle was set during the call */
};

static void watch(void *user, const struct cgrt_tool_graph_event *ev) {
  struct watched *w = user;
  assert_true(w->n < MAX_EVENTS);
  assert_int_equal(ev->struct_size, sizeof(*ev));
  w->with_graph[w->n] = ev->graph != NULL;
  w->ev[w->n++] = *ev;
}

struct msgs {
  int errors, warnings;
  char first[512];
};

static void collect(void *user, cgrt_log_level level, const char *text) {
  struct msgs *m = user;
  if (!m->errors && !m->warnings)
    snprintf(m->first, sizeof(m->first), "%s", text);
  level == CGRT_LOG_ERROR ? m->errors++ : m->warnings++;
}

static void tick(void *arg) {
  (*(int *)arg)++;
}

static int module(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  return cgrt_enqueue_host(ctx, tick, user);
}

struct model {
  cgrt_runtime *rt;
  cgrt_module *m[2];
};

static int body(const cgrt_ctx *ctx, void *user) {
  struct model *md = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = 1};
  for (int i = 0; i < 2; i++) {
    int rc = cgrt_forward(md->rt, md->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static const char *conf = "[cuda_graph]\nimpl = local\nwarmup_steps = 2\n[runtime]\n"
                          "driver = host\nbind_cpu = off\nlog = warn\n";

static int step(struct model *md) {
  cgrt_step_desc d = {
      .struct_size = sizeof(d), .phase = CGRT_PHASE_TRAIN, .tokens = 4, .body = body, .user = md};
  int rc = cgrt_step(md->rt, &d, NULL);
  return rc ? rc : cgrt_synchronize(md->rt);
}

/* Every executable is instantiated, uploaded to the runtime's stream, then launched there; the
 * events match the runtime's statistics; unwatching stops them. */
static void watcher_sees_every_graph(void **state) {
  (void)state;
  cgrt_tool_config *cfg = NULL;
  assert_int_equal(cgrt_tool_config_read(&cfg, NULL, conf, "<test>", NULL, NULL), 0);
  struct model md = {0};
  assert_int_equal(cgrt_tool_open(&md.rt, cfg, NULL, NULL), 0);
  int ticks = 0;
  for (int i = 0; i < 2; i++) {
    char name[16];
    snprintf(name, sizeof(name), "m%d", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = i ? CGRT_KIND_MLP : CGRT_KIND_ATTN,
                          .layer = 0,
                          .forward = module,
                          .user = &ticks};
    assert_int_equal(cgrt_module_register(md.rt, &d, &md.m[i]), 0);
  }
  struct watched w = {0};
  assert_int_equal(cgrt_tool_watch_graphs(md.rt, watch, &w), 0);
  for (int s = 0; s < 6; s++) /* 2 warm-up steps, 1 capture, 3 replays */
    assert_int_equal(step(&md), 0);
  assert_int_equal(ticks, 12);

  cgrt_stats st = {.struct_size = sizeof(st)};
  assert_int_equal(cgrt_stats_get(md.rt, &st), 0);
  int inst = 0, up = 0, launch = 0;
  for (int i = 0; i < w.n; i++) {
    const struct cgrt_tool_graph_event *e = &w.ev[i];
    assert_string_equal(e->driver, "host");
    assert_non_null(e->exec);
    if (e->op == CGRT_TOOL_GRAPH_INSTANTIATED) {
      inst++;
      assert_true(w.with_graph[i]);
      /* Uploaded next, to the runtime's stream, before any launch of it. */
      assert_true(i + 1 < w.n);
      assert_int_equal(w.ev[i + 1].op, CGRT_TOOL_GRAPH_UPLOADED);
      assert_ptr_equal(w.ev[i + 1].exec, e->exec);
      assert_ptr_equal(w.ev[i + 1].stream, cgrt_stream(md.rt));
    } else if (e->op == CGRT_TOOL_GRAPH_UPLOADED) {
      up++;
    } else if (e->op == CGRT_TOOL_GRAPH_LAUNCHED) {
      launch++;
      assert_ptr_equal(e->stream, cgrt_stream(md.rt));
      int seen = 0; /* launched only after it was instantiated */
      for (int j = 0; j < i; j++)
        seen |= w.ev[j].op == CGRT_TOOL_GRAPH_INSTANTIATED && w.ev[j].exec == e->exec;
      assert_true(seen);
    }
  }
  assert_int_equal(inst, 2);
  assert_int_equal((uint64_t)inst, st.instantiations);
  assert_int_equal(up, 2);
  assert_int_equal((uint64_t)launch,
                   st.calls_by_mode[CGRT_MODE_CAPTURE] + st.calls_by_mode[CGRT_MODE_REPLAY]);
  assert_int_equal(launch, 8); /* the capture step launches what it captured, then 3 replays */

  int before = w.n;
  assert_int_equal(cgrt_tool_watch_graphs(md.rt, NULL, NULL), 0);
  assert_int_equal(step(&md), 0);
  assert_int_equal(w.n, before);
  cgrt_close(md.rt);
}

/* Reading reports every message and refuses an invalid file; a changed view is what opens. */
static void config_read_change_open(void **state) {
  (void)state;
  cgrt_tool_config *cfg = NULL;
  struct msgs m = {0};
  assert_int_equal(
      cgrt_tool_config_read(&cfg, NULL, "[cuda_graph]\nwarmup_step = 3\n", "<bad>", collect, &m),
      CGRT_E_CONFIG);
  assert_null(cfg);
  assert_int_equal(m.errors, 1);
  assert_non_null(strstr(m.first, "<bad>:2"));
  assert_non_null(strstr(m.first, "warmup_steps"));
  assert_int_equal(cgrt_tool_config_read(&cfg, NULL, NULL, NULL, NULL, NULL), CGRT_E_INVAL);
  assert_int_equal(cgrt_tool_config_read(&cfg, "/nonexistent/x.ini", NULL, NULL, NULL, NULL),
                   CGRT_E_IO);

  assert_int_equal(cgrt_tool_config_read(&cfg, NULL,
                                         "[cuda_graph]\nimpl = dynamic_cp\nmodules = attn\n"
                                         "[dynamic_cp]\ncp_sizes = 1 2 4\n[runtime]\n"
                                         "driver = host\nbind_cpu = off\nlog = warn\n",
                                         "<cp>", NULL, NULL),
                   0);
  const int keep[] = {1, 2};
  assert_int_equal(cgrt_tool_config_set_cp_sizes(cfg, keep, 0), CGRT_E_INVAL);
  assert_int_equal(cgrt_tool_config_set_cp_sizes(cfg, keep, 2), 0);
  struct cgrt_config_view *v = cgrt_tool_config_view(cfg);
  assert_int_equal(v->num_cp_sizes, 2);
  v->warmup_steps = 7;
  char buf[4096] = "";
  FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
  assert_non_null(f);
  assert_int_equal(cgrt_tool_config_print(cfg, f), 0);
  fclose(f);
  assert_non_null(strstr(buf, "cp_sizes = 1 2\n"));
  assert_non_null(strstr(buf, "warmup_steps = 7\n"));
  cgrt_runtime *rt = NULL;
  assert_int_equal(cgrt_tool_open(&rt, cfg, NULL, NULL), 0);
  const struct cgrt_config_view *rv = cgrt_tool_view(rt);
  assert_int_equal(rv->num_cp_sizes, 2);
  assert_int_equal(rv->cp_sizes[1], 2);
  assert_int_equal(rv->warmup_steps, 7);
  const char *path = NULL;
  assert_string_equal(cgrt_tool_backend(rt, &path)->name, "dynamic_cp");
  assert_non_null(strstr(path, "libcgrt-backend-dynamic_cp.so"));
  cgrt_close(rt);
}

/* cgrt_tool_open_on hands the stream to the runtime as cgrt_open_options.stream does: the host
   driver refuses a host stream, naming the field (so it arrived); NULL opens on cgrt's own. */
static void open_on_a_host_stream(void **state) {
  (void)state;
  static const char ini[] = "[cuda_graph]\nimpl = none\n[runtime]\ndriver = host\nlog = off\n";
  int fake = 0;
  cgrt_tool_config *cfg = NULL;
  cgrt_runtime *rt = (cgrt_runtime *)1;
  assert_int_equal(cgrt_tool_config_read(&cfg, NULL, ini, "<s>", NULL, NULL), 0);
  assert_int_equal(cgrt_tool_open_on(&rt, cfg, NULL, NULL, &fake), CGRT_E_INVAL);
  assert_null(rt);
  assert_non_null(strstr(cgrt_last_error(NULL), "cgrt_open_options.stream"));
  assert_int_equal(cgrt_tool_config_read(&cfg, NULL, ini, "<s>", NULL, NULL), 0);
  assert_int_equal(cgrt_tool_open_on(&rt, cfg, NULL, NULL, NULL), 0);
  assert_ptr_not_equal(cgrt_stream(rt), &fake);
  cgrt_close(rt);
  assert_int_equal(cgrt_tool_open_on(&rt, NULL, NULL, NULL, NULL), CGRT_E_INVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(watcher_sees_every_graph),
      cmocka_unit_test(config_read_change_open),
      cmocka_unit_test(open_on_a_host_stream),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
