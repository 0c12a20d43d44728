/*
 * rules.h - the rules between configuration keys that several built-in backends share, for their
 * check() (struct cgrt_backend_v1, since host API minor 5). Each backend states the rules of its
 * own way of graphing (which inference scopes it has, whether it graphs whole steps); the core
 * names no backend. Static inline and built on the public header alone: a third-party backend
 * may copy it.
 */
#ifndef CGRT_BACKEND_RULES_H
#define CGRT_BACKEND_RULES_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cgrt/backend.h"

/* One check(): the configuration and where broken rules are reported. */
struct rules {
  const struct cgrt_config_view *cfg;
  void (*report)(void *user, int line, const char *message);
  void *user;
  int errors;
};

/* "key = value (line N)" or "(default)" into buf; the line where it is given, else 0. */
static inline int rules_key(const struct rules *r, const char *section, const char *key, char *buf,
                            size_t len) {
  int line = r->cfg->describe(r->cfg, section, key, buf, len);
  return line > 0 ? line : 0;
}

/* Reports one broken rule at `line`. */
static inline void rules_say(struct rules *r, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline void rules_say(struct rules *r, int line, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  r->report(r->user, line, text);
  r->errors++;
}

/* The line of [cuda_graph] impl, where a rule about the backend itself is reported. */
static inline int rules_impl_line(const struct rules *r) {
  char buf[256];
  return rules_key(r, "cuda_graph", "impl", buf, sizeof(buf));
}

/* A backend whose inference scope is always none. */
static inline void rules_scope_none(struct rules *r) {
  char d[256];
  if (r->cfg->inference_scope == CGRT_SCOPE_NONE)
    return;
  int line = rules_key(r, "cuda_graph", "inference_scope", d, sizeof(d));
  rules_say(r, line ? line : rules_impl_line(r),
            "[cuda_graph] %s is not allowed with impl = %s, whose inference scope is always none; "
            "remove inference_scope (only impl = local has layer and block)",
            d, r->cfg->impl);
}

/* A backend whose graphs are not per token bucket: no adaptive buckets. */
static inline void rules_no_adaptive(struct rules *r) {
  char d[256];
  if (r->cfg->buckets != CGRT_BUCKETS_ADAPTIVE)
    return;
  int line = rules_key(r, "inference", "buckets", d, sizeof(d));
  rules_say(r, line ? line : rules_impl_line(r),
            "[inference] %s only works with impl = local, whose graphs are per token bucket; "
            "impl = %s does not graph per bucket; use buckets = exponential, linear or list, or "
            "impl = local",
            d, r->cfg->impl);
}

/*
 * A whole-step graph cannot stop for the host to read the loss, and it graphs every call itself,
 * so no module list. `who` says what graphs the whole step (given at line `line`), `instead` the
 * other fix.
 */
static inline void rules_whole_step(struct rules *r, int line, const char *who,
                                    const char *instead) {
  char d[256];
  if (r->cfg->nan_check) {
    int at = rules_key(r, "host", "nan_check", d, sizeof(d));
    rules_say(r, at ? at : line,
              "%s graphs the whole step, which needs [host] nan_check = off (a whole-step graph "
              "cannot stop for the host to read the loss every step), but %s; set nan_check = "
              "off, or %s",
              who, d, instead);
  }
  if (r->cfg->modules) {
    int at = rules_key(r, "cuda_graph", "modules", d, sizeof(d));
    rules_say(r, at ? at : line,
              "%s graphs the whole step, so [cuda_graph] modules must be empty, but %s; remove "
              "the modules line, or %s",
              who, d, instead);
  }
}

/* A backend of per-module graphs: full recomputation would replay stale activations. */
static inline void rules_recompute_full(struct rules *r) {
  char d[256], impl[256];
  if (r->cfg->recompute != CGRT_RECOMPUTE_FULL)
    return;
  int line = rules_key(r, "host", "recompute", d, sizeof(d));
  int impl_line = rules_key(r, "cuda_graph", "impl", impl, sizeof(impl));
  rules_say(r, line ? line : impl_line,
            "[host] %s is only graph-safe with whole-step graphs, impl = full_iteration or "
            "dynamic_cp with graph_scope = step (full recomputation inside per-module graphs "
            "replays stale activations), but %s; use one of those, or recompute = selective",
            d, impl);
}

/* [dynamic_cp] graph_scope = step belongs to dynamic_cp: another built-in backend refuses it. */
static inline void rules_cp_scope_unread(struct rules *r) {
  char d[256];
  const char *scope = r->cfg->get(r->cfg, "dynamic_cp", "graph_scope");
  if (!scope || strcmp(scope, "step") != 0)
    return;
  int line = rules_key(r, "dynamic_cp", "graph_scope", d, sizeof(d));
  rules_say(r, line ? line : rules_impl_line(r),
            "[dynamic_cp] %s is only read by impl = dynamic_cp, but impl = %s; remove "
            "graph_scope, or use impl = full_iteration to graph the whole step",
            d, r->cfg->impl);
}

#endif /* CGRT_BACKEND_RULES_H */
