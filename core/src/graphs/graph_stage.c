/*
 * graph_stage.c - the buffers of a graph cache unit: their moves, and the private copies an
 * executable works on under rebind = copy and auto (graph_stage.h).
 */
#include "graph_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_mem.h"

static uint64_t set_signature(const cgrt_buffer *b, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ n;
  for (size_t i = 0; i < n; i++) {
    h = (h ^ (uint64_t)(uintptr_t)b[i].ptr) * 0x100000001b3ull;
    h = (h ^ (uint64_t)b[i].bytes) * 0x100000001b3ull;
  }
  return h | 1; /* never 0: 0 is an empty slot */
}

int cgrt__stage_track(struct cgrt__stage *s, const cgrt_buffer *b, size_t n) {
  uint64_t call = ++s->calls;
  int any = 0;
  if (n != s->n) {
    /* Another number of buffers: a private copy cannot follow its index; the caller unstages. */
    struct cgrt__stage_buf *nb = n ? calloc(n, sizeof(*nb)) : NULL;
    if (n && !nb)
      return CGRT_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
      nb[i].host = b[i].ptr;
      nb[i].bytes = b[i].bytes;
      nb[i].moved = call > 1 ? call : 0;
    }
    free(s->b);
    s->b = nb;
    s->n = n;
    s->staged = 0;
    s->copy_bytes_per_call = 0;
    any = call > 1;
  } else {
    for (size_t i = 0; i < n; i++) {
      struct cgrt__stage_buf *x = &s->b[i];
      if (x->host == b[i].ptr && x->bytes == b[i].bytes)
        continue;
      x->host = b[i].ptr;
      x->bytes = b[i].bytes;
      x->moved = call;
      any = 1;
    }
  }
  if (any) {
    memmove(&s->moves[1], &s->moves[0], (AUTO_MOVES - 1) * sizeof(s->moves[0]));
    s->moves[0] = call;
  }
  if (any || call == 1) {
    memmove(&s->sets[1], &s->sets[0], (AUTO_WINDOW - 1) * sizeof(s->sets[0]));
    s->sets[0] = set_signature(b, n);
  }
  s->cycled = !any || cgrt__stage_cycling(s) ? s->cycled + 1 : 0;
  return any;
}

int cgrt__stage_thrashing(const struct cgrt__stage *s) {
  const uint64_t oldest = s->moves[AUTO_MOVES - 1];
  return s->moves[0] == s->calls && oldest != 0 && oldest + AUTO_WINDOW > s->calls;
}

int cgrt__stage_cycling(const struct cgrt__stage *s) {
  for (int i = 1; i < AUTO_WINDOW; i++)
    if (s->sets[i] == s->sets[0])
      return 1;
  return 0;
}

static int wanted(const struct cgrt__stage *s, size_t i, int all) {
  const struct cgrt__stage_buf *x = &s->b[i];
  if (x->priv)
    return 0;
  return all || x->sticky || (x->moved != 0 && x->moved + AUTO_WINDOW > s->calls);
}

static uint64_t per_call(const struct cgrt__stage *s, const cgrt_buffer *b, size_t n) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < n && i < s->n; i++)
    if (s->b[i].priv)
      bytes +=
          (uint64_t)b[i].bytes * (((b[i].access & CGRT_IN) != 0) + ((b[i].access & CGRT_OUT) != 0));
  return bytes;
}

int cgrt__stage_alloc(const struct cgrt_host_api *h, struct cgrt__graph_mem *mem,
                      struct cgrt__stage *s, const cgrt_buffer *b, size_t n, int all,
                      uint64_t budget, size_t *added, char *why, size_t whylen) {
  *added = 0;
  if (n != s->n)
    return CGRT_E_INVAL;
  uint64_t need = 0;
  for (size_t i = 0; i < n; i++)
    if (wanted(s, i, all))
      need += b[i].bytes ? b[i].bytes : 1;
  if (budget && cgrt__mem_total(mem) + need > budget) {
    char size[32], held[512];
    cgrt__mem_format(need, size, sizeof(size));
    cgrt__mem_describe(mem, budget, held, sizeof(held));
    snprintf(why, whylen, "private copies of %s do not fit under [cuda_graph] memory_budget (%s)",
             size, held);
    return CGRT_E_NOMEM;
  }
  size_t *fresh = n ? malloc(n * sizeof(*fresh)) : NULL;
  if (n && !fresh)
    return CGRT_E_NOMEM;
  size_t made = 0;
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (!wanted(s, i, all))
      continue;
    struct cgrt__stage_buf *x = &s->b[i];
    size_t bytes = b[i].bytes ? b[i].bytes : 1;
    rc = h->mem_alloc(h, &x->priv, bytes);
    if (rc != 0) {
      x->priv = NULL;
      snprintf(why, whylen,
               "there is no device memory for a private copy of buffer '%s' (%zu bytes): %s",
               b[i].name ? b[i].name : "?", bytes, h->last_error(h));
      break;
    }
    x->priv_bytes = bytes;
    fresh[made++] = i;
  }
  if (rc != 0) {
    /* Nothing newly allocated stays: no executable uses those yet. */
    while (made > 0) {
      struct cgrt__stage_buf *x = &s->b[fresh[--made]];
      h->mem_free(h, x->priv);
      x->priv = NULL;
      x->priv_bytes = 0;
    }
    free(fresh);
    return rc;
  }
  for (size_t k = 0; k < made; k++) {
    s->b[fresh[k]].sticky = 1;
    mem->staged += s->b[fresh[k]].priv_bytes;
  }
  free(fresh);
  s->staged += made;
  s->copy_bytes_per_call = per_call(s, b, n);
  *added = made;
  return 0;
}

int cgrt__stage_regrow(const struct cgrt_host_api *h, struct cgrt__graph_mem *mem,
                       struct cgrt__stage *s, const cgrt_buffer *b, size_t n, char *why,
                       size_t whylen) {
  int grew = 0;
  for (size_t i = 0; i < n && i < s->n; i++) {
    struct cgrt__stage_buf *x = &s->b[i];
    if (!x->priv || b[i].bytes <= x->priv_bytes)
      continue;
    void *bigger = NULL;
    int rc = h->mem_alloc(h, &bigger, b[i].bytes);
    if (rc != 0) {
      snprintf(why, whylen,
               "there is no device memory for a larger private copy of buffer '%s' (%zu bytes; "
               "it grew): %s",
               b[i].name ? b[i].name : "?", b[i].bytes, h->last_error(h));
      return rc;
    }
    /* Launched replays may still use the old one. */
    h->stream_sync(h, h->stream(h));
    h->mem_free(h, x->priv);
    mem->staged += b[i].bytes - x->priv_bytes;
    x->priv = bigger;
    x->priv_bytes = b[i].bytes;
    grew = 1;
  }
  if (grew)
    s->copy_bytes_per_call = per_call(s, b, n);
  return grew;
}

void cgrt__stage_unstage(const struct cgrt_host_api *h, struct cgrt__graph_mem *mem,
                         struct cgrt__stage *s) {
  if (!s->staged)
    return;
  /* Launched replays may still read or write the private buffers: let them finish. */
  h->stream_sync(h, h->stream(h));
  for (size_t i = 0; i < s->n; i++) {
    struct cgrt__stage_buf *x = &s->b[i];
    if (!x->priv)
      continue;
    h->mem_free(h, x->priv);
    mem->staged -= x->priv_bytes;
    x->priv = NULL;
    x->priv_bytes = 0;
  }
  s->staged = 0;
  s->copy_bytes_per_call = 0;
}

void cgrt__stage_free(const struct cgrt_host_api *h, struct cgrt__graph_mem *mem,
                      struct cgrt__stage *s) {
  cgrt__stage_unstage(h, mem, s);
  free(s->b);
  memset(s, 0, sizeof(*s));
}

int cgrt__stage_match(const struct cgrt__stage *s, const cgrt_buffer *used, const cgrt_buffer *b,
                      size_t n) {
  if (n != s->n)
    return 0;
  for (size_t i = 0; i < n; i++) {
    if (s->b[i].priv ? b[i].bytes > s->b[i].priv_bytes
                     : used[i].ptr != b[i].ptr || used[i].bytes != b[i].bytes)
      return 0;
  }
  return 1;
}

int cgrt__stage_compose(const struct cgrt__stage *s, const cgrt_buffer *b, size_t n,
                        cgrt_buffer **out) {
  *out = NULL;
  if (!n)
    return 0;
  cgrt_buffer *u = malloc(n * sizeof(*u));
  if (!u)
    return CGRT_E_NOMEM;
  memcpy(u, b, n * sizeof(*u));
  for (size_t i = 0; i < n && i < s->n; i++)
    if (s->b[i].priv) {
      u[i].ptr = s->b[i].priv;
      u[i].bytes = s->b[i].priv_bytes;
    }
  *out = u;
  return 0;
}

int cgrt__stage_copy(const struct cgrt_host_api *h, uint64_t *copy_bytes, struct cgrt__stage *s,
                     const cgrt_buffer *b, size_t n, int inputs) {
  const unsigned want = inputs ? CGRT_IN : CGRT_OUT;
  for (size_t i = 0; i < n && i < s->n; i++) {
    const struct cgrt__stage_buf *x = &s->b[i];
    if (!x->priv || !(b[i].access & want) || b[i].bytes == 0)
      continue;
    int rc = inputs ? h->memcpy_async(h, x->priv, b[i].ptr, b[i].bytes, h->stream(h))
                    : h->memcpy_async(h, b[i].ptr, x->priv, b[i].bytes, h->stream(h));
    if (rc != 0)
      return rc;
    *copy_bytes += b[i].bytes;
  }
  return 0;
}

void cgrt__stage_names(const struct cgrt__stage *s, const cgrt_buffer *b, size_t n, char *buf,
                       size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && i < s->n && used < len; i++) {
    if (!s->b[i].priv)
      continue;
    int w = snprintf(buf + used, len - used, "%s'%s' (#%zu)", used ? ", " : "",
                     b[i].name ? b[i].name : "?", i);
    if (w < 0)
      break;
    used += (size_t)w;
  }
}
