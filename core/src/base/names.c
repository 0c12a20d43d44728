/* names.c - status and enum spellings of the public API. */
#include "cgrt/cgrt.h"

CGRT_API const char *cgrt_version(void) {
  return CGRT_VERSION_STRING;
}

CGRT_API const char *cgrt_strerror(int code) {
  switch (code) {
  case CGRT_OK:
    return "success";
  case CGRT_E_INVAL:
    return "invalid argument";
  case CGRT_E_NOMEM:
    return "out of host memory";
  case CGRT_E_IO:
    return "file could not be read";
  case CGRT_E_CONFIG:
    return "invalid configuration";
  case CGRT_E_NOTFOUND:
    return "not found (no such backend, or no such configuration key)";
  case CGRT_E_BACKEND:
    return "backend unusable";
  case CGRT_E_NODEV:
    return "no usable device";
  case CGRT_E_DEVICE:
    return "device operation failed";
  case CGRT_E_CAPTURE:
    return "graph capture failed";
  case CGRT_E_UPDATE:
    return "graph update refused";
  case CGRT_E_REBIND:
    return "buffer moved since capture";
  case CGRT_E_CAPACITY:
    return "over capacity";
  case CGRT_E_CALLBACK:
    return "host callback failed";
  case CGRT_E_STATE:
    return "not allowed in this state";
  case CGRT_E_UNSUPPORTED:
    return "not supported";
  case CGRT_E_NOTREADY:
    return "not ready";
  case CGRT_E_VERIFY:
    return "replay differs from eager";
  default:
    return "unknown error";
  }
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
