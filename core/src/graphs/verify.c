/*
 * verify.c - checking a replay against an eager run of the same work on private copies of its
 * buffers: the copies, the comparison (bitwise, or within ulps for declared float types) and the
 * sentence that names the first difference. Which replays are checked, and what happens after a
 * mismatch, is the graph cache's (graph_cache.c).
 */
#include "verify.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cgrt/backend.h"

/* ---------------------------------------------------------------- comparing elements */

static size_t type_size(unsigned type) {
  switch (type) {
  case CGRT_F32:
    return 4;
  case CGRT_F16:
  case CGRT_BF16:
    return 2;
  case CGRT_F64:
    return 8;
  default:
    return 1;
  }
}

static const char *type_name(unsigned type) {
  switch (type) {
  case CGRT_F32:
    return "f32";
  case CGRT_F16:
    return "f16";
  case CGRT_BF16:
    return "bf16";
  case CGRT_F64:
    return "f64";
  default:
    return "bytes";
  }
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v;
  if (e == 0)
    v = ldexpf((float)m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = ldexpf((float)(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

static float bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

/*
 * An element as a signed integer that grows with the float's value (both zeros map to 0), so
 * that the difference of two of them counts the representable values between: ulps. `nan` is
 * set if the element is a NaN.
 */
static int64_t ordered(const unsigned char *p, unsigned type, int *nan) {
  switch (type) {
  case CGRT_F32: {
    uint32_t u;
    memcpy(&u, p, 4);
    *nan = (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu);
    int64_t mag = u & 0x7fffffffu;
    return (u & 0x80000000u) ? -mag : mag;
  }
  case CGRT_F64: {
    uint64_t u;
    memcpy(&u, p, 8);
    *nan = (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (u & 0x000fffffffffffffull);
    /* 63 bits of magnitude: the difference below is taken in unsigned arithmetic */
    int64_t mag = (int64_t)(u & 0x7fffffffffffffffull);
    return (u & 0x8000000000000000ull) ? -mag : mag;
  }
  case CGRT_F16:
  case CGRT_BF16: {
    uint16_t u;
    memcpy(&u, p, 2);
    uint16_t exp = type == CGRT_F16 ? 0x7c00 : 0x7f80;
    *nan = (u & exp) == exp && (u & (uint16_t)(0x7fff & ~exp));
    int64_t mag = u & 0x7fff;
    return (u & 0x8000) ? -mag : mag;
  }
  default:
    *nan = 0;
    return p[0];
  }
}

static uint64_t distance(int64_t a, int64_t b) {
  return a > b ? (uint64_t)a - (uint64_t)b : (uint64_t)b - (uint64_t)a;
}

/* "1.5 (0x3fc00000)" */
static void element_text(const unsigned char *p, unsigned type, char *buf, size_t len) {
  switch (type) {
  case CGRT_F32: {
    float f;
    uint32_t u;
    memcpy(&f, p, 4);
    memcpy(&u, p, 4);
    snprintf(buf, len, "%.9g (0x%08" PRIx32 ")", (double)f, u);
    break;
  }
  case CGRT_F64: {
    double f;
    uint64_t u;
    memcpy(&f, p, 8);
    memcpy(&u, p, 8);
    snprintf(buf, len, "%.17g (0x%016" PRIx64 ")", f, u);
    break;
  }
  case CGRT_F16:
  case CGRT_BF16: {
    uint16_t u;
    memcpy(&u, p, 2);
    float f = type == CGRT_F16 ? half_to_float(u) : bf16_to_float(u);
    snprintf(buf, len, "%.6g (0x%04x)", (double)f, (unsigned)u);
    break;
  }
  default:
    snprintf(buf, len, "0x%02x", (unsigned)p[0]);
    break;
  }
}

int cgrt__verify_compare(const void *replay, const void *eager, size_t bytes, unsigned type,
                         int tolerance, struct cgrt_verify_diff *d) {
  const unsigned char *a = replay, *b = eager;
  size_t es = type_size(type);
  if (es == 1)
    type = 0;
  size_t whole = bytes / es * es;
  if (tolerance <= 0 || type == 0) {
    /* Bitwise: find the first differing element quickly, then describe it. */
    if (memcmp(a, b, bytes) == 0)
      return 0;
    size_t i = 0;
    while (a[i] == b[i])
      i++;
    size_t at = i < whole ? i / es * es : i;
    unsigned t = i < whole ? type : 0;
    d->index = i < whole ? i / es : (whole / es) + (i - whole);
    d->type = t;
    d->ulps = 0;
    if (t) {
      int n1, n2;
      d->ulps = distance(ordered(a + at, t, &n1), ordered(b + at, t, &n2));
    }
    element_text(a + at, t, d->replay, sizeof(d->replay));
    element_text(b + at, t, d->eager, sizeof(d->eager));
    return 1;
  }
  for (size_t off = 0; off < whole; off += es) {
    if (memcmp(a + off, b + off, es) == 0)
      continue;
    int n1, n2;
    int64_t x = ordered(a + off, type, &n1), y = ordered(b + off, type, &n2);
    if (n1 && n2)
      continue;
    uint64_t ulps = distance(x, y);
    if (!n1 && !n2 && ulps <= (uint64_t)tolerance)
      continue;
    d->index = off / es;
    d->type = type;
    d->ulps = (n1 || n2) ? 0 : ulps;
    element_text(a + off, type, d->replay, sizeof(d->replay));
    element_text(b + off, type, d->eager, sizeof(d->eager));
    return 1;
  }
  for (size_t off = whole; off < bytes; off++)
    if (a[off] != b[off]) {
      d->index = whole / es + (off - whole);
      d->type = 0;
      d->ulps = 0;
      element_text(a + off, 0, d->replay, sizeof(d->replay));
      element_text(b + off, 0, d->eager, sizeof(d->eager));
      return 1;
    }
  return 0;
}

/* ---------------------------------------------------------------- private copies */

void cgrt__verify_free(const struct cgrt_host_api *h, struct cgrt_verify_shadow *s) {
  if (!s->bufs)
    return;
  /* Copies into them may still be queued (a launch that failed after the snapshot). */
  h->stream_sync(h, h->stream(h));
  for (size_t i = 0; i < s->n; i++)
    h->mem_free(h, s->bufs[i].ptr);
  free(s->bufs);
  s->bufs = NULL;
  s->n = 0;
}

int cgrt__verify_snapshot(const struct cgrt_host_api *h, struct cgrt_log *log,
                          const cgrt_buffer *bufs, size_t n, struct cgrt_verify_shadow *s) {
  s->bufs = NULL;
  s->n = 0;
  if (n == 0)
    return 0;
  s->bufs = calloc(n, sizeof(*s->bufs));
  if (!s->bufs)
    return h->set_error(h, CGRT_E_NOMEM, "verify: out of host memory");
  s->n = n;
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    s->bufs[i] = bufs[i];
    s->bufs[i].ptr = NULL;
    rc = h->mem_alloc(h, &s->bufs[i].ptr, bufs[i].bytes ? bufs[i].bytes : 1);
    if (rc == 0 && (bufs[i].access & CGRT_IN) && bufs[i].bytes)
      rc = h->memcpy_async(h, s->bufs[i].ptr, bufs[i].ptr, bufs[i].bytes, h->stream(h));
  }
  if (rc != 0) {
    char why[sizeof(log->err)];
    snprintf(why, sizeof(why), "%s", log->err);
    cgrt__verify_free(h, s);
    snprintf(log->err, sizeof(log->err), "%s", why);
  }
  return rc;
}

int cgrt__verify_adopt(const struct cgrt_host_api *h, const cgrt_buffer *replayed,
                       const struct cgrt_verify_shadow *s) {
  for (size_t i = 0; i < s->n; i++) {
    if (!(s->bufs[i].access & CGRT_OUT) || !s->bufs[i].bytes)
      continue;
    int rc = h->memcpy_async(h, replayed[i].ptr, s->bufs[i].ptr, s->bufs[i].bytes, h->stream(h));
    if (rc != 0)
      return rc;
  }
  return 0;
}

int cgrt__verify_outputs(const struct cgrt_host_api *h, int tolerance, const cgrt_buffer *replayed,
                         const struct cgrt_verify_shadow *s, char *msg, size_t len) {
  size_t total = 0;
  for (size_t i = 0; i < s->n; i++)
    if ((s->bufs[i].access & CGRT_OUT) && s->bufs[i].bytes)
      total += s->bufs[i].bytes;
  if (total == 0) {
    snprintf(msg, len, "no declared output");
    return h->stream_sync(h, h->stream(h));
  }
  /* Host copies of both outputs, read after one wait for the stream. */
  unsigned char *mine = malloc(total), *theirs = malloc(total);
  int rc = mine && theirs ? 0 : h->set_error(h, CGRT_E_NOMEM, "verify: out of host memory");
  size_t off = 0;
  for (size_t i = 0; i < s->n && rc == 0; i++) {
    size_t bytes = s->bufs[i].bytes;
    if (!(s->bufs[i].access & CGRT_OUT) || !bytes)
      continue;
    rc = h->memcpy_async(h, mine + off, replayed[i].ptr, bytes, h->stream(h));
    if (rc == 0)
      rc = h->memcpy_async(h, theirs + off, s->bufs[i].ptr, bytes, h->stream(h));
    off += bytes;
  }
  if (rc == 0)
    rc = h->stream_sync(h, h->stream(h));
  off = 0;
  int differ = 0;
  for (size_t i = 0; i < s->n && rc == 0 && !differ; i++) {
    const cgrt_buffer *b = &s->bufs[i];
    if (!(b->access & CGRT_OUT) || !b->bytes)
      continue;
    unsigned type = (unsigned)b->access & CGRT_ACCESS_TYPE;
    struct cgrt_verify_diff d;
    if (cgrt__verify_compare(mine + off, theirs + off, b->bytes, type, tolerance, &d)) {
      differ = 1;
      char apart[96] = "";
      if (d.type && d.ulps)
        snprintf(apart, sizeof(apart), ", %" PRIu64 " ulps apart (verify_tolerance %d)", d.ulps,
                 tolerance);
      snprintf(msg, len,
               "buffer '%s' (#%zu, %zu bytes) differs at %s %zu (%s): replay %s, eager %s%s",
               b->name ? b->name : "?", i, b->bytes, d.type ? "element" : "byte", d.index,
               type_name(d.type), d.replay, d.eager, apart);
    }
    off += b->bytes;
  }
  free(mine);
  free(theirs);
  return rc != 0 ? rc : differ;
}
