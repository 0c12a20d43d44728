/*
 * conformance.h - `cgrt test-backend`, the conformance run of a backend: a synthetic model
 * (model.c), runs of it under a runtime that record what they did and are replayed under
 * `impl = none` (run.c), and the fixed scenarios with what each expects (scenarios.c). The
 * command (../cli/cmd_test_backend.c) builds the configuration and prints one line a scenario.
 *
 * The model's "kernels" are host functions enqueued on ctx->stream with cgrt_enqueue_host_copy
 * (their scalars by value, as a kernel's parameters), over static buffers in host memory, so the
 * same run works on the host driver and, as cudaLaunchHostFunc work, on the cuda driver. Every
 * value is a 64-bit integer mixed by a fixed function: the outputs under a backend equal those
 * under `impl = none` bit for bit, or the backend ran something else.
 */
#ifndef CGRT_TOOLS_CONFORMANCE_H
#define CGRT_TOOLS_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

#include "cgrt/tool.h"

#define CONFORM_WEIGHTS  4  /* weight words per module */
#define CONFORM_MBS      2  /* microbatches of a training step */
#define CONFORM_SETS     8  /* places the host's per-step buffers can sit (the moves) */
#define CONFORM_MAX_MODS 16 /* modules of the chain, the head not counted */

/* What every run of one conformance run shares: the configuration and what it holds. */
struct conform_config {
  const char *text;        /* INI text of the tested configuration (impl = the backend) */
  const char *name;        /* its name in messages (FILE, or "<defaults>") */
  cgrt_driver_kind driver; /* the driver the scenarios run on now */
  int verbose;             /* print every step and the runtime's log on stdout */
  /* Read from a first runtime of the tested configuration (conform_config_probe). */
  cgrt_backend_info info;
  char backend_name[64];
  char backend_path[1024];
  int warmup;                     /* [cuda_graph] warmup_steps */
  uint32_t kinds;                 /* CGRT_KIND_BIT of every kind the model registers */
  int adaptive;                   /* [inference] buckets = adaptive: the buckets may change */
  int64_t *buckets;               /* [inference] token buckets, ascending */
  size_t num_buckets;             /* 0 if none */
  int *cp_sizes;                  /* cp sizes steps cycle through (needs-comm backends) */
  size_t num_cp_sizes;            /* 0: steps name none */
  uint64_t cap;                   /* tokens a per-step buffer holds */
  int64_t train_tokens, reshaped; /* the training steps' two token counts */
};

/* One operation a run made, as the tested runtime made it; the reference replays the steps that
   succeeded there and every release. */
enum conform_op_kind { CONFORM_OP_STEP = 0, CONFORM_OP_RELEASE = 1 };
struct conform_op {
  enum conform_op_kind kind;
  cgrt_phase phase;
  int64_t tokens;
  int set; /* where the step's buffers sat (0..CONFORM_SETS-1) */
  int cp;  /* the step's cp size, 0 for none */
  int rc;  /* what the call returned */
  cgrt_step_report rep;
};

/* The outputs one step left: its real tokens' outputs and every weight after it. */
struct conform_snap {
  int taken;
  uint64_t ntok;
  uint64_t *out; /* ntok values */
  uint64_t *w;   /* modules x CONFORM_WEIGHTS values */
};

/* The per-step buffers at one place: meta (real tokens, seed), x (CONFORM_MBS inputs), the
   activations, the output, the gradients; listed with the weights as the step's buffers. */
struct conform_set {
  uint64_t *mem;
  cgrt_buffer *bufs; /* the step's buffers: this set's, then the weights */
};

/* The synthetic model: a chain of modules (attn and mlp per layer, plus every kind the
   configuration graphs) and a head (kind other) that writes the output and the first gradient. */
struct conform_model {
  cgrt_runtime *rt;
  const struct conform_config *cfg;
  size_t mods;
  cgrt_module *mod[CONFORM_MAX_MODS + 1]; /* mod[mods] is the head */
  char name[CONFORM_MAX_MODS + 1][32];
  cgrt_kind kind[CONFORM_MAX_MODS + 1];
  char bufname[4 + 3 * CONFORM_MAX_MODS][32]; /* the step's buffers, as messages name them */
  struct conform_modref {
    struct conform_model *m;
    size_t index;
  } ref[CONFORM_MAX_MODS + 1];
  uint64_t *w; /* mods x CONFORM_WEIGHTS, in place for good */
  struct conform_set set[CONFORM_SETS];
  size_t num_bufs; /* entries of a set's bufs */
  /* The step in flight (set by the run before cgrt_step). */
  size_t op;
  int cur;
  /* Outputs are recorded per operation: by a host function that the next step's prepare
     enqueues (ordered after the step's work), or on the host once the stream is idle. */
  struct conform_snap **snaps; /* one allocation each: queued host functions point at them */
  size_t num_snaps;
  long pending; /* the operation whose outputs are not recorded yet, -1 if none */
  int pending_set;
  /* Faults a scenario asks for. */
  long fail_module;      /* index whose callbacks return 7 however they run, -1 none */
  int fail_next_capture; /* the next module callback run while capturing returns 7, once */
  int fail_prepare;      /* prepare returns 5 */
  uint64_t calls;        /* module calls the bodies made */
};

/* model.c */
int conform_model_init(struct conform_model *m, const struct conform_config *cfg, cgrt_runtime *rt,
                       char *why, size_t len);
void conform_model_free(struct conform_model *m);
/* Fills desc for cgrt_step to make operation op (set m->op and m->cur to it first). */
void conform_model_desc(struct conform_model *m, const struct conform_op *op, cgrt_step_desc *desc);
/* Records the pending outputs now; the stream must be idle. */
int conform_model_snap_now(struct conform_model *m);
/* Makes room for the outputs of operations 0..ops-1. */
int conform_model_reserve(struct conform_model *m, size_t ops);

/* A runtime with the model, and the operations made on it. */
struct conform_run {
  const struct conform_config *cfg;
  int reference; /* 1: impl = none, replaying another run */
  cgrt_runtime *rt;
  struct conform_model model;
  struct conform_op *ops;
  size_t num_ops, cap_ops;
  uint64_t steps_ok; /* steps that returned 0 */
  char log[2048];    /* the last warning or error the runtime logged */
};

/* How a scenario wants its runtime. */
struct conform_open {
  int rebind; /* -1: as configured; else a cgrt_rebind */
};

/* run.c */
/* Opens the tested configuration on cfg->driver once and fills what cfg holds from it (the
   backend's info, warmup_steps, buckets, cp sizes, the buffers' capacity). 0, or the code of
   the failed open with the sentence in why. */
int conform_config_probe(struct conform_config *cfg, char *why, size_t len);
void conform_config_free(struct conform_config *cfg);
/* A runtime of the tested configuration (o may change its rebind), or with reference set of
   impl = none, with the model registered. Free r with conform_run_free whatever it returns. */
int conform_run_open(struct conform_run *r, const struct conform_config *cfg,
                     const struct conform_open *o, int reference, char *why, size_t len);
/* One step: phase, tokens, the buffers at `set`; the cp size cycles. Returns cgrt_step's code. */
int conform_step(struct conform_run *r, cgrt_phase phase, int64_t tokens, int set);
/* cgrt_release_graphs, recorded (the reference releases too); cgrt_synchronize, not recorded. */
int conform_release(struct conform_run *r);
int conform_sync(struct conform_run *r);
/* Closes the runtime (graphs alive or not) and records the last outputs. */
int conform_run_close(struct conform_run *r);
void conform_run_free(struct conform_run *r);
/* Replays run t's operations that succeeded under impl = none and compares the outputs of
   every step: 0, or -1 with the first difference (the step, its mode, the token or weight). */
int conform_compare(struct conform_run *t, char *why, size_t len);
/* "WWCRR!" for operations from..to of r (E eager, W warm-up, C capture, R replay, ! failed,
   / a release). */
const char *conform_modes(const struct conform_run *r, size_t from, size_t to, char *buf,
                          size_t len);

/* scenarios.c */
struct conform_scenario {
  const char *name;
  int (*run)(struct conform_run *t, char *why, size_t len);
  struct conform_open open;
  int compare;           /* compare with impl = none afterwards */
  const char *skip_cuda; /* NULL, or why it cannot run on the cuda driver */
};
extern const struct conform_scenario conform_scenarios[];
extern const size_t conform_num_scenarios;

#endif
