/*
 * toy_host.c - the README host guide's complete small host: a 3-layer model (4 features, a 4x4
 * weight matrix and a bias per layer), trained 50 steps at 16, 32 and 48 tokens (forward, a squared
 * error loss, backward, SGD), then 50 inference steps at 1 to 40 tokens, through cgrt on the host
 * driver. Every piece of work is a host function enqueued on ctx->stream, as a kernel would be on
 * a GPU; its scalars (rows, the layer) are passed by value (cgrt_enqueue_host_copy), its arrays
 * live in static buffers, so the same calls run eagerly, captured or replayed.
 *
 *   toy_host CONFIG.ini     prints the results and what cgrt did; swap the INI file alone
 *
 * The results line is the same, bit for bit, under every backend (the INI files in conf/).
 * Exit 0 on success, 1 on any cgrt error (its sentence printed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cgrt/cgrt.h>

#define LAYERS 3
#define D      4
#define MAXT   64 /* rows the buffers hold: the largest training step and inference bucket */

/* The model's memory ("device" memory on the host driver): static, so graphs may keep pointers. */
static double w[LAYERS][D][D], b[LAYERS][D];
static double gw[LAYERS][D][D], gb[LAYERS][D];
static double act[LAYERS + 1][MAXT][D]; /* act[0]: the input; act[l+1]: layer l's output */
static double grad[LAYERS + 1][MAXT][D];
static double target[MAXT][D];
static double loss; /* the last training step's loss */
static const double lr = 0.01;

/* A piece of work's scalars, copied at enqueue (and so at capture). */
struct job {
  int layer;
  int rows;
};

static void layer_fwd_run(void *arg) {
  const struct job *j = arg;
  for (int r = 0; r < j->rows; r++)
    for (int o = 0; o < D; o++) {
      double s = b[j->layer][o];
      for (int i = 0; i < D; i++)
        s += w[j->layer][o][i] * act[j->layer][r][i];
      act[j->layer + 1][r][o] = s > 0 ? s : 0.1 * s; /* leaky ReLU */
    }
}

static void layer_bwd_run(void *arg) {
  const struct job *j = arg;
  int l = j->layer;
  memset(gw[l], 0, sizeof(gw[l]));
  memset(gb[l], 0, sizeof(gb[l]));
  for (int r = 0; r < j->rows; r++)
    for (int o = 0; o < D; o++) {
      double g = grad[l + 1][r][o] * (act[l + 1][r][o] > 0 ? 1.0 : 0.1);
      gb[l][o] += g;
      for (int i = 0; i < D; i++)
        gw[l][o][i] += g * act[l][r][i];
    }
  for (int r = 0; r < j->rows; r++)
    for (int i = 0; i < D; i++) {
      double s = 0;
      for (int o = 0; o < D; o++)
        s += w[l][o][i] * grad[l + 1][r][o] * (act[l + 1][r][o] > 0 ? 1.0 : 0.1);
      grad[l][r][i] = s;
    }
}

/* Mean squared error over the step's rows, and its gradient into grad[LAYERS]. */
static void loss_run(void *arg) {
  const struct job *j = arg;
  double s = 0;
  for (int r = 0; r < j->rows; r++)
    for (int o = 0; o < D; o++) {
      double e = act[LAYERS][r][o] - target[r][o];
      s += e * e;
      grad[LAYERS][r][o] = 2.0 * e / (j->rows * D);
    }
  loss = s / (j->rows * D);
}

static void sgd_run(void *arg) {
  (void)arg;
  for (int l = 0; l < LAYERS; l++)
    for (int o = 0; o < D; o++) {
      b[l][o] -= lr * gb[l][o];
      for (int i = 0; i < D; i++)
        w[l][o][i] -= lr * gw[l][o][i];
    }
}

/* The modules: one per layer (kind mlp), and the loss with the update (kind other). */
static int layer_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct job j = {(int)(intptr_t)user, (int)ctx->padded_tokens};
  (void)args;
  return cgrt_enqueue_host_copy(ctx, layer_fwd_run, &j, sizeof(j));
}

static int layer_bwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct job j = {(int)(intptr_t)user, (int)ctx->padded_tokens};
  (void)args;
  return cgrt_enqueue_host_copy(ctx, layer_bwd_run, &j, sizeof(j));
}

static int loss_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  struct job j = {0, (int)ctx->padded_tokens};
  (void)args;
  (void)user;
  return cgrt_enqueue_host_copy(ctx, loss_run, &j, sizeof(j));
}

static int update_fwd(const cgrt_ctx *ctx, const cgrt_args *args, void *user) {
  (void)args;
  (void)user;
  return cgrt_enqueue_host_copy(ctx, sgd_run, NULL, 0);
}

struct toy {
  cgrt_runtime *rt;
  cgrt_module *layer[LAYERS], *loss, *update;
  int step;
};

/* The data of a step: made on the host, staged into the static buffers by prepare. */
static double input_value(int step, int r, int i) {
  return 0.01 * (double)(((step * 7 + r * 3 + i * 5) % 23) - 11);
}

/* Stages the step's rows; rows past the real tokens (padding up to a bucket) are zero. */
static int prepare(const cgrt_ctx *ctx, void *user) {
  struct toy *t = user;
  for (int r = 0; r < MAXT; r++)
    for (int i = 0; i < D; i++) {
      int real = r < ctx->tokens;
      act[0][r][i] = real ? input_value(t->step, r, i) : 0.0;
      target[r][i] = real ? 0.5 * input_value(t->step, r, (i + 1) % D) : 0.0;
    }
  return 0;
}

static int body(const cgrt_ctx *ctx, void *user) {
  struct toy *t = user;
  cgrt_args a = {.struct_size = sizeof(a), .key = (uint64_t)ctx->padded_tokens};
  int rc = 0;
  for (int l = 0; l < LAYERS && rc == 0; l++)
    rc = cgrt_forward(t->rt, t->layer[l], ctx, &a);
  if (rc != 0 || ctx->phase != CGRT_PHASE_TRAIN)
    return rc;
  rc = cgrt_forward(t->rt, t->loss, ctx, &a);
  for (int l = LAYERS; l-- > 0 && rc == 0;)
    rc = cgrt_backward(t->rt, t->layer[l], ctx, &a);
  return rc ? rc : cgrt_forward(t->rt, t->update, ctx, &a);
}

static int fail(cgrt_runtime *rt, const char *what) {
  fprintf(stderr, "toy_host: %s: %s\n", what, cgrt_last_error(rt));
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: toy_host CONFIG.ini\n");
    return 2;
  }
  struct toy t = {0};
  if (cgrt_open(&t.rt, argv[1]) != 0)
    return fail(NULL, "open");
  for (int l = 0; l < LAYERS; l++) {
    for (int o = 0; o < D; o++)
      for (int i = 0; i < D; i++)
        w[l][o][i] = (o == i ? 0.9 : 0.05 * (double)((o * 3 + i + l) % 5 - 2));
    char name[32];
    snprintf(name, sizeof(name), "layer%d.mlp", l);
    cgrt_module_desc d = {.struct_size = sizeof(d),
                          .name = name,
                          .kind = CGRT_KIND_MLP,
                          .layer = l,
                          .forward = layer_fwd,
                          .backward = layer_bwd,
                          .user = (void *)(intptr_t)l};
    if (cgrt_module_register(t.rt, &d, &t.layer[l]) != 0)
      return fail(t.rt, "register");
  }
  cgrt_module_desc dl = {.struct_size = sizeof(dl),
                         .name = "loss",
                         .kind = CGRT_KIND_OTHER,
                         .layer = -1,
                         .forward = loss_fwd};
  cgrt_module_desc du = {.struct_size = sizeof(du),
                         .name = "update",
                         .kind = CGRT_KIND_OTHER,
                         .layer = -1,
                         .forward = update_fwd};
  if (cgrt_module_register(t.rt, &dl, &t.loss) != 0 ||
      cgrt_module_register(t.rt, &du, &t.update) != 0)
    return fail(t.rt, "register");

  /* Training: 50 steps of 16, 32 and 48 tokens; the loss read after each. */
  static const int train_tokens[] = {16, 32, 48};
  double losses = 0;
  for (t.step = 0; t.step < 50; t.step++) {
    cgrt_step_desc s = {.struct_size = sizeof(s),
                        .phase = CGRT_PHASE_TRAIN,
                        .tokens = train_tokens[t.step % 3],
                        .prepare = prepare,
                        .body = body,
                        .user = &t};
    if (cgrt_step(t.rt, &s, NULL) != 0 || cgrt_synchronize(t.rt) != 0)
      return fail(t.rt, "train step");
    losses += loss;
  }
  /* Inference: 50 steps of 1 to 40 tokens; the real rows' outputs summed. */
  double outputs = 0;
  for (int i = 0; i < 50; i++, t.step++) {
    int tokens = 1 + (i * 17) % 40;
    cgrt_step_desc s = {.struct_size = sizeof(s),
                        .phase = CGRT_PHASE_INFER,
                        .tokens = tokens,
                        .prepare = prepare,
                        .body = body,
                        .user = &t};
    if (cgrt_step(t.rt, &s, NULL) != 0 || cgrt_synchronize(t.rt) != 0)
      return fail(t.rt, "infer step");
    for (int r = 0; r < tokens; r++)
      for (int o = 0; o < D; o++)
        outputs += act[LAYERS][r][o] * (double)(r + 1);
  }
  printf("results: last loss %a, loss sum %a, inference sum %a, w[2][1][3] %a\n", loss, losses,
         outputs, w[2][1][3]);

  cgrt_backend_info bi = {.struct_size = sizeof(bi)};
  cgrt_stats st = {.struct_size = sizeof(st)};
  if (cgrt_backend_info_get(t.rt, &bi) != 0 || cgrt_stats_get(t.rt, &st) != 0)
    return fail(t.rt, "stats");
  static const char *const how[] = {"eager", "graphs", "eager (by cgrt)"};
  printf("backend %s: train %s, infer %s; steps %llu: eager %llu, warmup %llu, capture %llu, "
         "replay %llu; graphs %llu, fallbacks %llu, run eagerly by cgrt %llu\n",
         bi.name, how[bi.phases[CGRT_PHASE_TRAIN]], how[bi.phases[CGRT_PHASE_INFER]],
         (unsigned long long)st.steps, (unsigned long long)st.steps_by_mode[CGRT_MODE_EAGER],
         (unsigned long long)st.steps_by_mode[CGRT_MODE_WARMUP],
         (unsigned long long)st.steps_by_mode[CGRT_MODE_CAPTURE],
         (unsigned long long)st.steps_by_mode[CGRT_MODE_REPLAY],
         (unsigned long long)st.instantiations, (unsigned long long)st.fallbacks,
         (unsigned long long)st.eager_phase_steps);
  if (cgrt_close(t.rt) != 0)
    return fail(NULL, "close");
  return 0;
}
