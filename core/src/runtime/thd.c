/*
 * thd.c - the ring of packed-sequence (THD) metadata slots a graph bank reads. Each slot holds,
 * on the device, the cumulative actual and padded sequence lengths of one step at a fixed
 * capacity, so graphs captured on a slot stay valid for any step that fits. A step's lengths go
 * into the next slot, after the work that last read that slot has finished: the host-side
 * staging a slot's copy reads from is then free to rewrite, and the device data is never changed
 * under a replay that still reads it.
 *
 * Layout of a slot for n real sequences of total T, capacity S sequences and P tokens
 * (S + 2 entries each): cu_seqlens = 0, l1, l1+l2, ..., T (n + 1 entries), T for the dummy
 * sequence (zero-length), then T repeated (empty sequences); cu_seqlens_padded = the same up to
 * T, then P for the dummy (it pads the total up to the captured size), then P repeated.
 */
#include <stdlib.h>
#include <string.h>

#include "hostapi.h"
#include "runtime.h"

struct thd_slot_state {
  int32_t *dev;  /* 2 * entries: actual, then padded */
  int32_t *host; /* staging for the copy */
  void *event;   /* recorded after the last work that read the slot */
  int used;
};

struct cgrt_thd_ring {
  cgrt_runtime *rt;
  int slots;
  int64_t max_tokens;
  int max_sequences;
  int entries; /* max_sequences + 2 */
  int next;
  struct thd_slot_state *s;
};

static void ring_free(const struct cgrt_host_api *h, struct cgrt_thd_ring *r) {
  if (!r)
    return;
  for (int i = 0; r->s && i < r->slots; i++) {
    h->mem_free(h, r->s[i].dev);
    h->event_destroy(h, r->s[i].event);
    r->rt->dev.drv->host_free(&r->rt->dev, r->s[i].host);
  }
  free(r->s);
  free(r);
}

int cgrt__thd_create(const struct cgrt_host_api *h, int slots, int64_t max_tokens,
                     int max_sequences, struct cgrt_thd_ring **out) {
  *out = NULL;
  if (slots < 1 || max_tokens < 1 || max_sequences < 1 || max_tokens > INT32_MAX)
    return h->set_error(h, CGRT_E_INVAL,
                        "THD ring: %d slots of %lld tokens and %d sequences: each must be >= 1 "
                        "(and tokens fit in int32)",
                        slots, (long long)max_tokens, max_sequences);
  struct cgrt_thd_ring *r = calloc(1, sizeof(*r));
  if (!r || !(r->s = calloc((size_t)slots, sizeof(*r->s)))) {
    free(r);
    return h->set_error(h, CGRT_E_NOMEM, "out of memory creating a THD ring");
  }
  r->rt = CGRT_RT(h);
  r->slots = slots;
  r->max_tokens = max_tokens;
  r->max_sequences = max_sequences;
  r->entries = max_sequences + 2;
  size_t bytes = 2 * (size_t)r->entries * sizeof(int32_t);
  for (int i = 0; i < slots; i++) {
    int rc = h->mem_alloc(h, (void **)&r->s[i].dev, bytes);
    if (rc == 0)
      rc = h->event_create(h, &r->s[i].event);
    /* page-locked: the step's copy into the slot must not wait for the stream */
    if (rc == 0 &&
        (rc = r->rt->dev.drv->host_alloc(&r->rt->dev, (void **)&r->s[i].host, bytes)) != 0)
      rc = h->set_error(h, rc, "creating a THD ring: %s", r->rt->dev.err);
    if (rc != 0) {
      ring_free(h, r);
      return rc;
    }
  }
  *out = r;
  return 0;
}

void cgrt__thd_destroy(const struct cgrt_host_api *h, struct cgrt_thd_ring *r) {
  ring_free(h, r);
}

int cgrt__thd_write(const struct cgrt_host_api *h, struct cgrt_thd_ring *r, const int32_t *seqlens,
                    int n, int slot, struct cgrt_thd_slot *out) {
  int64_t total = 0;
  if (n < 0 || (n > 0 && !seqlens))
    return h->set_error(h, CGRT_E_INVAL, "THD: %d sequences and lengths %p", n, (void *)seqlens);
  for (int i = 0; i < n; i++) {
    if (seqlens[i] < 0)
      return h->set_error(h, CGRT_E_INVAL, "THD: sequence %d has a negative length (%d)", i,
                          seqlens[i]);
    total += seqlens[i];
  }
  if (total > r->max_tokens || n > r->max_sequences)
    return h->set_error(h, CGRT_E_CAPACITY,
                        "the step packs %lld tokens in %d sequences, but a THD slot holds %lld "
                        "tokens and %d sequences ([dynamic_cp] max_packed_tokens, max_sequences); "
                        "raise them (graphs are captured at that size), or set over_capacity = "
                        "eager to run such steps without graphs",
                        (long long)total, n, (long long)r->max_tokens, r->max_sequences);
  if (slot >= r->slots)
    return h->set_error(h, CGRT_E_INVAL, "THD: slot %d of a ring of %d", slot, r->slots);
  int idx = slot >= 0 ? slot : r->next;
  if (slot < 0)
    r->next = (r->next + 1) % r->slots;
  struct thd_slot_state *s = &r->s[idx];
  if (s->used) {
    /* The replay that read this slot must be done before its staging is rewritten. */
    int rc = h->event_sync(h, s->event);
    if (rc != 0)
      return rc;
    s->used = 0;
  }
  int32_t *cu = s->host, *cp = s->host + r->entries;
  cu[0] = cp[0] = 0;
  for (int i = 0; i < n; i++)
    cu[i + 1] = cp[i + 1] = cu[i] + seqlens[i];
  for (int i = n + 1; i < r->entries; i++) {
    cu[i] = (int32_t)total;
    cp[i] = (int32_t)r->max_tokens;
  }
  int rc =
      h->memcpy_async(h, s->dev, s->host, 2 * (size_t)r->entries * sizeof(int32_t), h->stream(h));
  if (rc != 0)
    return rc;
  *out = (struct cgrt_thd_slot){.index = idx,
                                .cu_seqlens = s->dev,
                                .cu_seqlens_padded = s->dev + r->entries,
                                .tokens = total,
                                .padded_tokens = r->max_tokens,
                                .sequences = n,
                                .padded_sequences = r->entries - 1};
  return 0;
}

int cgrt__thd_release(const struct cgrt_host_api *h, struct cgrt_thd_ring *r, int slot) {
  if (slot < 0 || slot >= r->slots)
    return h->set_error(h, CGRT_E_INVAL, "THD: slot %d of a ring of %d", slot, r->slots);
  int rc = h->event_record(h, r->s[slot].event, h->stream(h));
  if (rc == 0)
    r->s[slot].used = 1;
  return rc;
}

int cgrt__comm_for_cp(const struct cgrt_host_api *h, int cp, void **comm, int *cp_rank) {
  cgrt_runtime *rt = CGRT_RT(h);
  if (!rt->comms.ready)
    return h->set_error(h, CGRT_E_STATE,
                        "no communicator: the host has not handed its world communicator "
                        "(call cgrt_set_world_comm after cgrt_open, on every rank)");
  if (cgrt__comms_find(&rt->comms, cp, comm, cp_rank) != 0)
    return h->set_error(h, CGRT_E_INVAL, "no communicator for cp size %d", cp);
  return 0;
}
