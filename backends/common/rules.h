/*
 * rules.h - the rules between configuration keys that several built-in backends share, for their
 * check() (struct cgrt_backend_v1, since host API minor 5). Each backend states the rules of its
 * own way of graphing (which inference scopes it has, a key it alone reads); the core names no
 * backend. The rules that follow from what a backend can do (graphs, whole-step graphs, adaptive
 * buckets) are not here: the core applies them to every backend by its CGRT_CAP_* bits (since
 * minor 6), check() or not. Static inline and built on the public header alone: a third-party
 * backend may copy it.
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
