/* names.c - status and enum spellings of the public API. */
#include "cgrt/cgrt.h"

CGRT_API const char *cgrt_version(void) {
  return CGRT_VERSION_STRING;
}

/* The texts are types.h's, which a backend reads there (it cannot call this function). */
CGRT_API const char *cgrt_strerror(int code) {
  return cgrt_status_text(code);
}

CGRT_API const char *cgrt_phase_name(cgrt_phase phase) {
  static const char *const names[] = {"train", "eval", "infer"};
  return (unsigned)phase < CGRT_PHASE_COUNT ? names[phase] : "?";
}

CGRT_API const char *cgrt_mode_name(cgrt_mode mode) {
  static const char *const names[] = {"eager", "warmup", "capture", "replay"};
  return (unsigned)mode < CGRT_MODE_COUNT ? names[mode] : "?";
}

CGRT_API const char *cgrt_kind_name(cgrt_kind kind) {
  static const char *const names[] = {"attn",           "mlp",   "moe",  "moe_router",
                                      "moe_preprocess", "mamba", "other"};
  return (unsigned)kind < CGRT_KIND_COUNT ? names[kind] : "?";
}

CGRT_API const char *cgrt_finding_kind_name(cgrt_finding_kind kind) {
  static const char *const names[] = {"sync",   "host_read",     "pageable_copy",
                                      "malloc", "legacy_stream", "other"};
  return (unsigned)kind < CGRT_FINDING_KIND_COUNT ? names[kind] : "?";
}
