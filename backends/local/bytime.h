/*
 * bytime.h - local's inference buckets chosen by time ([local] by_time, issue 43).
 *
 * A step of T real tokens padded to bucket B > T is timed on the device (two timed events around
 * the step on the runtime's stream, read without waiting at a later step), and so are steps run
 * eagerly at T, as the host sends them. A token count whose padded replay is measurably slower
 * than eager at its own size is then served the faster way: by an exact-size bucket (graphs at T)
 * while exact_buckets and the memory budget allow one more, else eagerly.
 *
 * The noise rule (backends/common/noise_rule.h), per token count: a round measures the way that
 * serves it now (the incumbent) and the other way (the challenger), at least BYTIME_SAMPLES
 * device times each, the first eager step of a round run but not kept (a new row count's first
 * eager run pays one-time costs: cuBLASLt's heuristic, lazy loading), replays kept only from
 * steps whose calls all replayed. The challenger replaces the incumbent only when faster by more
 * than BYTIME_MARGIN (hysteresis). After BYTIME_RECHECK steps of a count served one way, a new
 * round measures both again. The padded bucket is the first incumbent.
 */
#ifndef CGRT_LOCAL_BYTIME_H
#define CGRT_LOCAL_BYTIME_H

#include <stdint.h>

#include "cgrt/backend.h"
#include "noise_rule.h"

#define BYTIME_SAMPLES NOISE_SAMPLES
#define BYTIME_MARGIN  NOISE_MARGIN
#define BYTIME_RECHECK NOISE_RECHECK
#define BYTIME_COUNTS  4096 /* token counts followed at most; others keep their padded bucket */
#define BYTIME_PENDING 4    /* timed steps whose events have not been read yet, at most */

/* How a padded step is served. */
enum bytime_way {
  BYTIME_BUCKET = 0, /* replayed at its bucket, padded */
  BYTIME_EAGER = 1,  /* run eagerly at its own size */
  BYTIME_EXACT = 2   /* replayed at an exact-size bucket: graphs at its own size */
};

struct bytime;

/* What bytime_choose decided for one step; hand it back to bytime_end. */
struct bytime_step {
  enum bytime_way way;
  int64_t tokens, bucket;
  int timed; /* events recorded around it */
  int probe; /* run eagerly to measure eager, not because eager won */
  void *rec; /* the count's record (internal) */
};

/* Its figures for cgrt_stats (the fields of issue 43). */
struct bytime_figures {
  uint64_t timed_steps, probe_steps, eager_steps, exact_steps, eager_counts, exact_counts;
};

/* max_exact: [local] exact_buckets. cache: where exact-size graphs live (retired from it). */
int bytime_create(const struct cgrt_host_api *h, struct cgrt_graph_cache *cache, int max_exact,
                  struct bytime **out);
void bytime_destroy(struct bytime *bt);

/*
 * Before an inference step of `tokens` padded to `bucket` (> tokens): reads the timings that are
 * ready, and says how to serve this step. Records the start event when the step is timed.
 */
int bytime_choose(struct bytime *bt, int64_t tokens, int64_t bucket, struct bytime_step *st);
/* After the step ran (mode: ctx->mode after it): records the end event of a timed step. */
int bytime_end(struct bytime *bt, struct bytime_step *st, cgrt_mode mode);
/*
 * The bucket set changed (adaptive buckets): every count's decisions are forgotten and the
 * exact-size graphs retired (the counts are measured again against their new buckets).
 */
int bytime_forget(struct bytime *bt);
void bytime_figures(const struct bytime *bt, struct bytime_figures *out);

#endif
