/*
 * test_rebind.c - buffers that move between calls, under rebind = auto (the default) and the
 * explicit policies, end to end on the host driver with the `local` backend: a host that hands
 * its layers a fresh input every step is captured a bounded number of times, every output is
 * right, and one warning per key names the moving buffer; a buffer that moves now and then is
 * re-recorded in place; copies that cannot be made send the key eager, said once; a module that
 * stages its own inputs is never handed private copies; update keeps its meaning.
 *
 * The modules do "device work" as host functions on the stream: out[0] = in[0] * 2 + layer. Like
 * kernel arguments, the parameters of a launch live in blocks that outlive the graphs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/cgrt.h"
#include "runtime.h"

#define MODS       3
#define STEPS      100
#define MAX_PARAMS 4096

struct params {
  const double *in;
  double *out;
  double add;
};

struct fx {
  cgrt_runtime *rt;
  cgrt_module *m[MODS];
  struct params params[MAX_PARAMS];
  int num_params;
  double fresh[STEPS + 8]; /* the inputs a fresh-input host hands: a new address every step */
  double *in;              /* this step's input */
  double out[MODS];        /* static outputs */
  int moved_warnings;      /* warn lines about moving buffers */
  int uncopied_infos;      /* info lines of keys that left their copies for a graph per set */
  int eager_warnings;      /* warn lines about keys sent eager */
  char last[1024];
  char eager_msg[1024];           /* the last of those */
  int own_addresses_seen_private; /* a stages_inputs module was handed another address */
};

static void work(void *arg) {
  struct params *p = arg;
  p->out[0] = p->in[0] * 2 + p->add;
}

static int module_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fx *f = user;
  assert_true(f->num_params < MAX_PARAMS);
  struct params *p = &f->params[f->num_params++];
  p->in = args->buffers[0].ptr;
  p->out = args->buffers[1].ptr;
  p->add = args->key;
  return cgrt_enqueue_host(ctx, work, p);
}

/* A module that addresses the host's own buffers (as cgrt.torch modules do). */
static int own_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct fx *f = user;
  if (args->buffers[0].ptr != f->in)
    f->own_addresses_seen_private = 1;
  struct params *p = &f->params[f->num_params++];
  p->in = f->in;
  p->out = args->buffers[1].ptr;
  p->add = args->key;
  return cgrt_enqueue_host(ctx, work, p);
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct fx *f = user;
  for (int i = 0; i < MODS; i++) {
    cgrt_buffer b[2] = {{f->in, sizeof(double), CGRT_IN, "x"},
                        {&f->out[i], sizeof(double), CGRT_OUT, "y"}};
    cgrt_args a = {.struct_size = sizeof(a), .key = (uint64_t)i, .buffers = b, .num_buffers = 2};
    int rc = cgrt_forward(f->rt, f->m[i], ctx, &a);
    if (rc)
      return rc;
  }
  return 0;
}

static void log_sink(void *user, cgrt_log_level level, const char *msg) {
  struct fx *f = user;
  if (level == CGRT_LOG_INFO && strstr(msg, "now cycle among a few address sets"))
    f->uncopied_infos++;
  if (level != CGRT_LOG_WARN)
    return;
  if (strstr(msg, "moved on 3 of its last 4 calls (rebind = auto)"))
    f->moved_warnings++;
  if (strstr(msg, "it runs eagerly from now on (rebind = auto")) {
    f->eager_warnings++;
    snprintf(f->eager_msg, sizeof(f->eager_msg), "%s", msg);
  }
  snprintf(f->last, sizeof(f->last), "%s", msg);
}

/* extra: more [cuda_graph] keys; own: register the modules with stages_inputs. */
static struct fx *fx_open(const char *extra, int own) {
  struct fx *f = calloc(1, sizeof(*f));
  char ini[512];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = local\n%s\n[runtime]\ndriver = host\nlog = info\n",
           extra ? extra : "");
  cgrt_open_options o = {.struct_size = sizeof(o), .ini = ini, .log = log_sink, .log_user = f};
  if (cgrt_open_ex(&f->rt, &o) != 0)
    fail_msg("open: %s", cgrt_last_error(NULL));
  for (int i = 0; i < MODS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "layer%d", i);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .layer = i,
                          .forward = own ? own_fwd : module_fwd,
                          .user = f,
                          .stages_inputs = own};
    assert_int_equal(cgrt_module_register(f->rt, &d, &f->m[i]), 0);
  }
  f->in = &f->fresh[0];
  return f;
}

static void fx_close(struct fx *f) {
  assert_int_equal(cgrt_close(f->rt), 0);
  free(f);
}

static cgrt_stats stats(struct fx *f) {
  cgrt_stats s = {.struct_size = sizeof(s)};
  assert_int_equal(cgrt_stats_get(f->rt, &s), 0);
  return s;
}

/* One step with input address `in` holding `value`; every output checked after. */
static void step_with(struct fx *f, double *in, double value, cgrt_step_report *rep) {
  f->in = in;
  *in = value;
  for (int i = 0; i < MODS; i++)
    f->out[i] = -1;
  cgrt_step_desc d = {.struct_size = sizeof(d), .phase = CGRT_PHASE_EVAL, .body = body, .user = f};
  if (cgrt_step(f->rt, &d, rep) != 0)
    fail_msg("step: %s", cgrt_last_error(f->rt));
  assert_int_equal(cgrt_synchronize(f->rt), 0);
  for (int i = 0; i < MODS; i++)
    if (f->out[i] != value * 2 + i)
      fail_msg("module %d: out %g, expected %g", i, f->out[i], value * 2 + i);
}

/* ---------------------------------------------------------------- auto */

/* The default policy, a fresh input every step: bounded captures, then replays on copies. */
static void fresh_inputs_are_staged_once_per_key(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1", 0);
  assert_int_equal(f->rt->cfg.view.rebind, CGRT_REBIND_AUTO);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int s = 0; s < STEPS; s++)
    step_with(f, &f->fresh[s], 1.5 * s, &rep);
  assert_int_equal(rep.mode, CGRT_MODE_REPLAY);
  cgrt_stats st = stats(f);
  /* warm-up, capture, one update, then the update onto private copies: 3 recordings a key. */
  assert_true(st.captures <= 3 * MODS);
  assert_int_equal(st.rebind_copy_keys, MODS);
  assert_int_equal(st.rebind_eager_keys, 0);
  assert_int_equal(st.staged_bytes, MODS * sizeof(double));
  assert_true(st.copy_bytes >= (STEPS - 4) * MODS * sizeof(double));
  /* the step's report says what it copied: each key's input in (its output is the host's) */
  assert_int_equal(rep.copy_bytes, MODS * sizeof(double));
  assert_int_equal(f->moved_warnings, MODS);
  if (!strstr(f->last, "layer2 fwd (key 2, microbatch 0)") || !strstr(f->last, "buffer 'x' (#0)") ||
      !strstr(f->last, "keep it in place"))
    fail_msg("the warning does not name the module, key, buffer and remedy: %s", f->last);
  fx_close(f);
}

/* Warm-up calls count: with three warm-up steps the first capture is on copies already. */
static void moves_during_warmup_stage_at_capture(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 3", 0);
  for (int s = 0; s < 20; s++)
    step_with(f, &f->fresh[s], s + 0.25, NULL);
  cgrt_stats st = stats(f);
  assert_int_equal(st.captures, MODS);
  assert_int_equal(st.updates, 0);
  assert_int_equal(st.rebind_copy_keys, MODS);
  fx_close(f);
}

/* A buffer that moves now and then is re-recorded in place, never copied. */
static void rare_moves_update_in_place(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1", 0);
  for (int s = 0; s < 40; s++)
    step_with(f, &f->fresh[s / 10], s, NULL);
  cgrt_stats st = stats(f);
  assert_int_equal(st.rebind_copy_keys, 0);
  assert_int_equal(st.copy_bytes, 0);
  assert_int_equal(st.updates, 3 * MODS);
  assert_int_equal(f->moved_warnings, 0);
  fx_close(f);
}

/* A host that double-buffers: the key keeps a graph per address set and copies nothing. */
static void alternating_addresses_get_a_graph_each(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1", 0);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int s = 0; s < 30; s++)
    step_with(f, &f->fresh[s % 2], s, &rep);
  cgrt_stats st = stats(f);
  assert_int_equal(st.rebind_variant_keys, MODS);
  assert_int_equal(st.rebind_copy_keys, 0);
  assert_int_equal(st.copy_bytes, 0);
  assert_int_equal(st.live_graphs, 2 * MODS);
  assert_true(st.captures <= 3 * MODS);
  assert_int_equal(rep.calls_replayed, MODS);
  assert_int_equal(rep.copy_bytes, 0);
  assert_int_equal(f->moved_warnings, 0); /* no cost to warn about */
  fx_close(f);

  /* A module whose host stages its inputs cycles the same way (no copies needed). */
  f = fx_open("warmup_steps = 1", 1);
  for (int s = 0; s < 30; s++)
    step_with(f, &f->fresh[s % 2], s, &rep);
  st = stats(f);
  assert_int_equal(st.rebind_variant_keys, MODS);
  assert_int_equal(st.rebind_eager_keys, 0);
  assert_int_equal(rep.calls_replayed, MODS);
  assert_int_equal(f->own_addresses_seen_private, 0);
  fx_close(f);
}

/* A cycle longer than the window is not seen as one: private copies at once. A key that
   cycled, then meets more address sets than the graphs it may keep: back to private copies. */
static void long_cycles_fold_to_copies(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1", 0);
  for (int s = 0; s < 30; s++)
    step_with(f, &f->fresh[s % 6], s, NULL);
  assert_int_equal(stats(f).rebind_variant_keys, 0);
  assert_int_equal(stats(f).rebind_copy_keys, MODS);
  fx_close(f);

  f = fx_open("warmup_steps = 1", 0);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  for (int s = 0; s < 10; s++)
    step_with(f, &f->fresh[s % 2], s, &rep);
  assert_int_equal(stats(f).rebind_variant_keys, MODS);
  for (int s = 10; s < 60; s++)
    step_with(f, &f->fresh[2 + s % 6], s, &rep);
  cgrt_stats st = stats(f);
  assert_int_equal(st.rebind_variant_keys, MODS);
  assert_int_equal(st.rebind_copy_keys, MODS);
  assert_int_equal(st.live_graphs, MODS);
  assert_int_equal(rep.calls_replayed, MODS);
  uint64_t captures = st.captures;
  for (int s = 60; s < 80; s++)
    step_with(f, &f->fresh[s % 6], s, NULL);
  assert_int_equal(stats(f).captures, captures); /* steady: no recording */
  assert_int_equal(f->moved_warnings, MODS);
  fx_close(f);
}

/*
 * A host whose allocator hands new addresses while it warms up, then the same two (session 42: the
 * bench's fresh rows, cudaMallocAsync per step, went on private copies at 1 token in every
 * process, 100 us a step of copies on an H200, then alternated): the keys go on copies, then, once
 * their last AUTO_SETTLE calls took sets they had, drop them for a graph per set, said once each;
 * no copies after that, no recording in the steady state. Once per key: a longer cycle sends it
 * back to copies for good, and a short cycle after that keeps them.
 */
static void copies_settle_into_a_graph_per_set(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1", 0);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  int s = 0;
  for (; s < 8; s++)
    step_with(f, &f->fresh[s], s, &rep); /* new addresses: copies */
  assert_int_equal(stats(f).rebind_copy_keys, MODS);
  assert_int_equal(f->uncopied_infos, 0);
  for (; s < 30; s++)
    step_with(f, &f->fresh[8 + s % 2], s, &rep); /* then two, alternating */
  cgrt_stats st = stats(f);
  assert_int_equal(st.rebind_variant_keys, MODS);
  assert_int_equal(f->uncopied_infos, MODS);
  assert_int_equal(rep.calls_replayed, MODS);
  assert_int_equal(st.live_graphs, 2 * MODS);
  for (; s < 50; s++)
    step_with(f, &f->fresh[8 + s % 2], s, &rep);
  cgrt_stats steady = stats(f);
  assert_int_equal(steady.copy_bytes, st.copy_bytes);
  assert_int_equal(steady.captures, st.captures);
  assert_int_equal(steady.updates, st.updates);

  for (; s < 80; s++)
    step_with(f, &f->fresh[10 + s % 6], s, &rep); /* six sets: back to copies */
  for (; s < 110; s++)
    step_with(f, &f->fresh[8 + s % 2], s, &rep); /* two again: copies stay */
  st = stats(f);
  assert_int_equal(f->uncopied_infos, MODS);
  assert_int_equal(st.rebind_variant_keys, MODS);
  assert_int_equal(st.live_graphs, MODS);
  assert_int_equal(rep.calls_replayed, MODS);
  step_with(f, &f->fresh[8 + s % 2], s, &rep);
  assert_true(stats(f).copy_bytes > st.copy_bytes);
  fx_close(f);
}

/* No memory for the copies: the key runs eagerly, said once, outputs still right. */
static void copies_that_cannot_be_made_send_the_key_eager(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1", 0);
  for (int s = 0; s < 3; s++)
    step_with(f, &f->fresh[s], s, NULL);
  /* the next step thrashes: its first private copy fails, then every other one */
  f->rt->faults.mem_alloc = 1;
  step_with(f, &f->fresh[3], 3, NULL);
  cgrt_stats st = stats(f);
  assert_int_equal(st.rebind_eager_keys, 1);
  assert_int_equal(f->eager_warnings, 1);
  if (!strstr(f->eager_msg, "layer0 fwd") ||
      !strstr(f->eager_msg, "its buffers moved and need private copies, but there is no device "
                            "memory for a private copy"))
    fail_msg("unexpected warning: %s", f->eager_msg);
  cgrt_step_report rep = {.struct_size = sizeof(rep)};
  uint64_t captures = st.captures;
  for (int s = 4; s < 30; s++)
    step_with(f, &f->fresh[s], s, &rep);
  st = stats(f);
  assert_int_equal(st.rebind_eager_keys, 1);
  assert_int_equal(st.rebind_copy_keys, MODS - 1);
  assert_int_equal(f->eager_warnings, 1);
  assert_true(st.captures <= captures + 2 * (MODS - 1));
  assert_int_equal(rep.calls_eager, 1);
  assert_int_equal(rep.calls_replayed, MODS - 1);
  fx_close(f);
}

/* Under a budget too small for the copies, likewise. */
static void copies_over_the_budget_send_the_key_eager(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1\nmemory_budget = 1 MiB", 0);
  for (int s = 0; s < 3; s++)
    step_with(f, &f->fresh[s], s, NULL);
  /* The next step thrashes while the budget is full (of what the ledger counts as private
     copies of others). */
  f->rt->graphs.mem.staged += 1u << 20;
  step_with(f, &f->fresh[3], 3, NULL);
  f->rt->graphs.mem.staged -= 1u << 20;
  for (int s = 4; s < 12; s++)
    step_with(f, &f->fresh[s], s, NULL);
  cgrt_stats st = stats(f);
  assert_int_equal(st.rebind_eager_keys, MODS);
  assert_int_equal(st.staged_bytes, 0);
  assert_int_equal(f->eager_warnings, MODS);
  if (!strstr(f->eager_msg, "its buffers moved and need private copies, but private copies of") ||
      !strstr(f->eager_msg, "do not fit under [cuda_graph] memory_budget"))
    fail_msg("unexpected warning: %s", f->eager_msg);
  fx_close(f);
}

/* A module that stages its own inputs never sees private copies; if its buffers still move on
   most calls it runs eagerly. */
static void stages_inputs_modules_get_no_private_copies(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1", 1);
  for (int s = 0; s < 20; s++)
    step_with(f, &f->fresh[s], s, NULL);
  assert_int_equal(f->own_addresses_seen_private, 0);
  cgrt_stats st = stats(f);
  assert_int_equal(st.rebind_copy_keys, 0);
  assert_int_equal(st.rebind_eager_keys, MODS);
  if (!strstr(f->eager_msg, "its buffers moved on 3 of its last 4 calls, and its module stages "
                            "its own inputs (stages_inputs), so it cannot run on private copies"))
    fail_msg("unexpected warning: %s", f->eager_msg);
  fx_close(f);

  /* Under copy it is re-recorded (the host stages), never handed copies. */
  f = fx_open("warmup_steps = 1\nrebind = copy", 1);
  for (int s = 0; s < 6; s++)
    step_with(f, &f->fresh[s], s, NULL);
  assert_int_equal(f->own_addresses_seen_private, 0);
  assert_true(stats(f).updates > 0);
  fx_close(f);
}

/* ---------------------------------------------------------------- explicit policies */

static void update_keeps_rerecording(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1\nrebind = update", 0);
  for (int s = 0; s < 20; s++)
    step_with(f, &f->fresh[s], s, NULL);
  cgrt_stats st = stats(f);
  assert_int_equal(st.updates, 18 * MODS);
  assert_int_equal(st.rebind_copy_keys, 0);
  assert_int_equal(st.copy_bytes, 0);
  assert_int_equal(f->moved_warnings, 0);
  fx_close(f);
}

static void copy_stages_every_buffer_from_the_capture(void **state) {
  (void)state;
  struct fx *f = fx_open("warmup_steps = 1\nrebind = copy", 0);
  for (int s = 0; s < 20; s++)
    step_with(f, &f->fresh[s], s, NULL);
  cgrt_stats st = stats(f);
  assert_int_equal(st.captures, MODS);
  assert_int_equal(st.staged_bytes, 2 * MODS * sizeof(double));
  /* copy is asked for: not a switch, no warning */
  assert_int_equal(st.rebind_copy_keys, 0);
  assert_int_equal(f->moved_warnings, 0);
  fx_close(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fresh_inputs_are_staged_once_per_key),
      cmocka_unit_test(moves_during_warmup_stage_at_capture),
      cmocka_unit_test(rare_moves_update_in_place),
      cmocka_unit_test(alternating_addresses_get_a_graph_each),
      cmocka_unit_test(long_cycles_fold_to_copies),
      cmocka_unit_test(copies_settle_into_a_graph_per_set),
      cmocka_unit_test(copies_that_cannot_be_made_send_the_key_eager),
      cmocka_unit_test(copies_over_the_budget_send_the_key_eager),
      cmocka_unit_test(stages_inputs_modules_get_no_private_copies),
      cmocka_unit_test(update_keeps_rerecording),
      cmocka_unit_test(copy_stages_every_buffer_from_the_capture),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
