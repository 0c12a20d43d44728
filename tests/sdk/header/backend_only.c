/*
 * backend_only.c - compiled by tests/sdk/run.sh against the installed headers alone, as a backend
 * is (-std=c99 -pedantic -Werror): what a backend may use compiles. With -DHOST_CALL=f, a call of
 * libcgrt's function f must not compile: backend.h declares no function of libcgrt (a backend
 * links nothing of it, so such a call could only fail later, at link or load).
 */
#include <cgrt/backend.h>

#if !defined(CGRT_HOST_API_MINOR) || !defined(CGRT_BACKEND_ABI_MAJOR)
#error "backend.h gives CGRT_HOST_API_MINOR and CGRT_BACKEND_ABI_MAJOR"
#endif

const char *reason(int rc, const cgrt_ctx *ctx, cgrt_stats *stats);

const char *reason(int rc, const cgrt_ctx *ctx, cgrt_stats *stats) {
  stats->steps += ctx->mode == CGRT_MODE_REPLAY;
#ifdef HOST_CALL
  return HOST_CALL(rc);
#else
  return cgrt_status_text(rc == 0 ? CGRT_E_CONFIG : rc);
#endif
}
