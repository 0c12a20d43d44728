/*
 * bench_workloads.c - the kernels/ workloads as `cgrt bench` drives them: decode (L decoder
 * layers, each an attn and an mlp module, over a KV cache) and chain (N tiny dependent kernels in
 * one module: launch overhead alone).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#include <cuda_runtime_api.h>

#include "chain.h"
#include "decode.h"

/* ---------------------------------------------------------------- decode */

static int decode_create(const struct bench_opts *o, int64_t max_rows, void **state, char *err,
                         size_t errlen) {
  (void)o;
  struct cgrtk_decode_cfg cfg;
  cgrtk_decode_default_cfg(&cfg);
  if (max_rows > cfg.max_tokens)
    cfg.max_tokens = (int)max_rows;
  cgrtk_decode *w = NULL;
  int rc = cgrtk_decode_create(&w, &cfg, err, errlen);
  *state = w;
  return rc;
}

static void decode_destroy(void *state) {
  cgrtk_decode_destroy(state);
}

static void decode_describe(void *state, char *buf, size_t len) {
  const struct cgrtk_decode_cfg *c = cgrtk_decode_config(state);
  snprintf(buf, len, "%d layers, d %d, %d heads, ffn %d, KV cache %d, bf16", c->layers, c->d_model,
           c->heads, c->ffn, c->cache_len);
}

static int decode_num_modules(void *state) {
  return 2 * cgrtk_decode_config(state)->layers;
}

static void decode_module(void *state, int i, char *name, size_t len, cgrt_kind *kind) {
  (void)state;
  snprintf(name, len, "layer%d.%s", i / 2, i % 2 ? "mlp" : "attn");
  *kind = i % 2 ? CGRT_KIND_MLP : CGRT_KIND_ATTN;
}

static int decode_stage(void *state, int64_t tokens, int64_t rows, void *stream) {
  /* Every step stages the same input (step 0): any step's output is comparable. */
  return cgrtk_decode_stage(state, tokens, rows, 0, stream);
}

static int decode_run(void *state, int module, int64_t rows, void *buffer, void *stream) {
  void *own = buffer ? cgrtk_decode_use_hidden(state, buffer) : NULL;
  int rc = module % 2 ? cgrtk_decode_mlp(state, module / 2, rows, stream)
                      : cgrtk_decode_attn(state, module / 2, rows, stream);
  if (own)
    cgrtk_decode_use_hidden(state, own);
  return rc;
}

static size_t decode_read(void *state, int64_t rows, void *dst, size_t len, void *stream) {
  size_t bytes = (size_t)rows * cgrtk_decode_row_bytes(state);
  if (bytes > len || cgrtk_decode_read(state, rows, dst, stream) != 0)
    return 0;
  return bytes;
}

static void *decode_buffer(void *state, size_t *row_bytes) {
  *row_bytes = cgrtk_decode_row_bytes(state);
  return cgrtk_decode_hidden(state);
}

/* Every layer's weights and norm gains and its K and V cache, bf16: what any step reads at least,
 * whatever its row count (the rows' own activations are not counted: a lower bound). */
static double decode_step_bytes(void *state, int64_t rows) {
  (void)rows;
  const struct cgrtk_decode_cfg *c = cgrtk_decode_config(state);
  uint64_t numel = 0;
  for (int t = 0; t < CGRTK_DECODE_T_COUNT; t++)
    numel += cgrtk_decode_tensor_numel(c, t);
  return (double)numel * (double)c->layers * 2.0; /* bf16 */
}

const struct bench_workload bench_decode = {
    .name = "decode",
    .create = decode_create,
    .destroy = decode_destroy,
    .describe = decode_describe,
    .num_modules = decode_num_modules,
    .module = decode_module,
    .stage = decode_stage,
    .run = decode_run,
    .read = decode_read,
    .buffer = decode_buffer,
    .step_bytes = decode_step_bytes,
};

/* ---------------------------------------------------------------- chain */

struct chain {
  float *value; /* device: the value the chain updates */
  int kernels;
};

static int chain_create(const struct bench_opts *o, int64_t max_rows, void **state, char *err,
                        size_t errlen) {
  (void)max_rows;
  struct chain *c = calloc(1, sizeof(*c));
  if (!c)
    return snprintf(err, errlen, "out of memory"), 1;
  c->kernels = o->chain_kernels;
  cudaError_t e = cudaMalloc((void **)&c->value, sizeof(float));
  if (e != cudaSuccess) {
    snprintf(err, errlen, "cudaMalloc: %s", cudaGetErrorString(e));
    free(c);
    return 1;
  }
  *state = c;
  return 0;
}

static void chain_destroy(void *state) {
  struct chain *c = state;
  cudaFree(c->value);
  free(c);
}

static void chain_describe(void *state, char *buf, size_t len) {
  snprintf(buf, len, "%d dependent one-thread kernels", ((struct chain *)state)->kernels);
}

static int chain_num_modules(void *state) {
  (void)state;
  return 1;
}

static void chain_module(void *state, int i, char *name, size_t len, cgrt_kind *kind) {
  (void)state;
  (void)i;
  snprintf(name, len, "chain");
  *kind = CGRT_KIND_OTHER;
}

static int chain_stage(void *state, int64_t tokens, int64_t rows, void *stream) {
  (void)tokens;
  (void)rows;
  struct chain *c = state;
  return (int)cudaMemsetAsync(c->value, 0, sizeof(float), (cudaStream_t)stream);
}

static int chain_run(void *state, int module, int64_t rows, void *buffer, void *stream) {
  (void)module;
  (void)rows;
  struct chain *c = state;
  return cgrtk_chain(buffer ? buffer : c->value, c->kernels, stream);
}

static size_t chain_read(void *state, int64_t rows, void *dst, size_t len, void *stream) {
  (void)rows;
  struct chain *c = state;
  if (len < sizeof(float) || cudaMemcpyAsync(dst, c->value, sizeof(float), cudaMemcpyDeviceToHost,
                                             (cudaStream_t)stream) != cudaSuccess)
    return 0;
  return sizeof(float);
}

static void *chain_buffer(void *state, size_t *row_bytes) {
  *row_bytes = sizeof(float); /* one value, whatever the token count (run chain at 1 token) */
  return ((struct chain *)state)->value;
}

const struct bench_workload bench_chain = {
    .name = "chain",
    .create = chain_create,
    .destroy = chain_destroy,
    .describe = chain_describe,
    .num_modules = chain_num_modules,
    .module = chain_module,
    .stage = chain_stage,
    .run = chain_run,
    .read = chain_read,
    .buffer = chain_buffer,
};
