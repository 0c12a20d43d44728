/*
 * graph_cache.c - keyed executables shared by every graph backend: per-key warm-up, capture,
 * replay, an LRU bound on live executables, and the rebind policy for buffers that moved since
 * a capture (update, copy, recapture, error). A stale address is never replayed: an executable
 * runs only with the buffers it was captured (or last updated) with.
 *
 * Entries live in a chained hash table on the key and in one recency list. An entry without an
 * executable is still warming up (or was evicted); those are bounded too, so a host that sends
 * endless distinct keys cannot grow the cache without limit.
 *
 * Each executable carries what it cost to build (graph_mem.h); under [cuda_graph] memory_budget
 * a capture first makes room by evicting least-recently-used executables, and runs the work
 * eagerly instead when the graph cannot fit (see capture_new).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "graph_cache.h"
#include "graph_stage.h"
#include "graphs.h"
#include "verify.h"
#include "base/log.h"
#include "comm/comm.h"
#include "module.h"

struct entry {
  struct cgrt_graph_key key;
  uint64_t hash;
  void *exec;        /* NULL while warming up or after eviction */
  int warm;          /* eager runs so far */
  int failures;      /* captures that failed in a row; at CAPTURE_ATTEMPTS the key stays eager */
  int outside;       /* captures broken from outside the work in a row (another thread's device
                        sync), not counted in failures; at CAPTURE_OUTSIDE_ATTEMPTS the key stays
                        eager */
  cgrt_buffer *bufs; /* the addresses the executable uses: the host's, or private ones */
  size_t num_bufs;   /* entries of bufs */
  struct cgrt__stage st; /* the host's buffers as followed, and the private copies (staged) */
  int eager;             /* auto: its buffers move on most calls and copies cannot serve it */
  int variants;          /* auto: its buffers cycle among a few address sets, each of which has
                            an entry of the key (as under recapture), at most AUTO_VARIANTS */
  int own;               /* its module stages its own inputs (never handed private copies) */
  int uncopied; /* auto: it left private copies for a graph per address set (once per key) */
  struct cgrt__graph_rec rec;  /* what its executable cost (the last one, after an eviction) */
  int has_rec;                 /* rec holds a measured build */
  int charged;                 /* rec is in the runtime's ledger (the executable is live) */
  int budget_logged;           /* the budget's refusal of this key was logged */
  uint64_t replays;            /* replays since the capture or update (counted only by verify) */
  struct entry *chain;         /* next in the hash bucket */
  struct entry *newer, *older; /* recency list */
};

struct cgrt_graph_cache {
  struct cgrt_graphs *g;            /* the graph layer it belongs to */
  const struct cgrt_host_api *host; /* g->host, one load nearer for every replay */
  int max_graphs;
  cgrt_rebind rebind;
  struct entry **table;
  size_t table_size; /* a power of two */
  size_t count;      /* entries */
  size_t live;       /* entries with an executable */
  struct entry *newest, *oldest;
  struct cgrt_graph_cache *next_cache; /* the runtime's list of caches */
  cgrt_verify verify;                  /* [cuda_graph] verify: off costs one branch per replay */
  int verify_every;
};

/* Failed captures in a row after which a key runs eagerly for good (until release). */
#define CAPTURE_ATTEMPTS 2
/* The same for captures broken from outside the work (diagnose: invalidated, none of the work's
   calls refused; another thread's cudaDeviceSynchronize): they say nothing of the key, so more are
   borne, but not for ever: each costs a capture and diagnose's second one (session 52). */
#define CAPTURE_OUTSIDE_ATTEMPTS 16
/* Graphed calls of a module (or step bodies of a phase) in a row, each with a key the cache had
   not seen, after which that is said: no key repeats, so none reaches its warm-up. Above any
   bucket count, so that a host meeting its buckets for the first time is never told. */
#define UNREPEATED_SAY 64

/* Entries without an executable beyond this many are forgotten, oldest first. */
static size_t pending_bound(const struct cgrt_graph_cache *c) {
  return 4 * (size_t)c->max_graphs + 64;
}

/* Every replay hashes its key: four independent products, then one finalizing round (a chain of
   five dependent rounds took 51 instructions of a replayed call's 445 on the host driver). */
static uint64_t key_hash(const struct cgrt_graph_key *k) {
  uint64_t a = ((uint64_t)k->module << 32) | k->dir;
  uint64_t b = ((uint64_t)(uint32_t)k->microbatch << 32) | k->phase;
  uint64_t h = a * 0x9e3779b97f4a7c15ull + b * 0xc2b2ae3d27d4eb4full +
               k->shape * 0x165667b19e3779f9ull + k->extra * 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 29);
}

static int key_equal(const struct cgrt_graph_key *a, const struct cgrt_graph_key *b) {
  return a->module == b->module && a->dir == b->dir && a->microbatch == b->microbatch &&
         a->phase == b->phase && a->shape == b->shape && a->extra == b->extra;
}

/* 1 if e's executable can serve a call with b[0..n) as it is (staged buffers are copied). */
static int buffers_match(const struct entry *e, const cgrt_buffer *b, size_t n) {
  if (e->st.staged)
    return cgrt__stage_match(&e->st, e->bufs, b, n);
  if (e->num_bufs != n)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (e->bufs[i].ptr != b[i].ptr || e->bufs[i].bytes != b[i].bytes)
      return 0;
  return 1;
}

/* ---------------------------------------------------------------- recency list */

static void list_unlink(struct cgrt_graph_cache *c, struct entry *e) {
  if (e->newer)
    e->newer->older = e->older;
  else
    c->newest = e->older;
  if (e->older)
    e->older->newer = e->newer;
  else
    c->oldest = e->newer;
  e->newer = e->older = NULL;
}

static void list_push_newest(struct cgrt_graph_cache *c, struct entry *e) {
  e->older = c->newest;
  e->newer = NULL;
  if (c->newest)
    c->newest->newer = e;
  c->newest = e;
  if (!c->oldest)
    c->oldest = e;
}

static void touch(struct cgrt_graph_cache *c, struct entry *e) {
  if (c->newest != e) {
    list_unlink(c, e);
    list_push_newest(c, e);
  }
}

/* ---------------------------------------------------------------- entries */

/* The executable's addresses and private copies go (the moves followed stay). */
static void free_private(struct cgrt_graph_cache *c, struct entry *e) {
  cgrt__stage_unstage(c->host, &c->g->mem, &e->st);
  free(e->bufs);
  e->bufs = NULL;
  e->num_bufs = 0;
}

static void drop_exec(struct cgrt_graph_cache *c, struct entry *e) {
  if (!e->exec)
    return;
  c->host->exec_destroy(c->host, e->exec);
  e->exec = NULL;
  c->live--;
  if (e->charged) {
    cgrt__mem_discharge(c->g, &e->rec);
    e->charged = 0;
  }
  free_private(c, e);
}

static void entry_remove(struct cgrt_graph_cache *c, struct entry *e) {
  struct entry **p = &c->table[e->hash & (c->table_size - 1)];
  while (*p != e)
    p = &(*p)->chain;
  *p = e->chain;
  list_unlink(c, e);
  drop_exec(c, e);
  cgrt__stage_free(c->host, &c->g->mem, &e->st);
  c->count--;
  free(e);
}

static int grow(struct cgrt_graph_cache *c) {
  size_t size = c->table_size * 2;
  struct entry **t = calloc(size, sizeof(*t));
  if (!t)
    return CGRT_E_NOMEM;
  for (size_t i = 0; i < c->table_size; i++)
    for (struct entry *e = c->table[i], *next; e; e = next) {
      next = e->chain;
      e->chain = t[e->hash & (size - 1)];
      t[e->hash & (size - 1)] = e;
    }
  free(c->table);
  c->table = t;
  c->table_size = size;
  return 0;
}

/* rebind = auto: address sets a key that cycles among them keeps an executable for each. */
#define AUTO_VARIANTS 4

/*
 * The entry of key for these buffers: under recapture, and for a key whose buffers cycle (auto),
 * several entries share a key (one per address set) and the one whose buffers match is wanted,
 * else one without an executable; otherwise a key has one entry.
 */
static struct entry *find(struct cgrt_graph_cache *c, const struct cgrt_graph_key *key,
                          uint64_t hash, const cgrt_buffer *bufs, size_t n) {
  struct entry *fallback = NULL;
  for (struct entry *e = c->table[hash & (c->table_size - 1)]; e; e = e->chain) {
    if (e->hash != hash || !key_equal(&e->key, key))
      continue;
    if (c->rebind != CGRT_REBIND_RECAPTURE && !e->variants)
      return e;
    if (e->exec && buffers_match(e, bufs, n))
      return e;
    if (!e->exec && !fallback)
      fallback = e;
  }
  return fallback;
}

static struct entry *insert(struct cgrt_graph_cache *c, const struct cgrt_graph_key *key,
                            uint64_t hash) {
  if (c->count + 1 > c->table_size * 2 && grow(c) != 0)
    return NULL;
  struct entry *e = calloc(1, sizeof(*e));
  if (!e)
    return NULL;
  e->key = *key;
  e->hash = hash;
  e->chain = c->table[hash & (c->table_size - 1)];
  c->table[hash & (c->table_size - 1)] = e;
  list_push_newest(c, e);
  c->count++;
  /* Forget the oldest entries that hold no executable beyond the bound. */
  for (struct entry *o = c->oldest, *newer; o && c->count - c->live > pending_bound(c); o = newer) {
    newer = o->newer;
    if (!o->exec && o != e)
      entry_remove(c, o);
  }
  return e;
}

/* Makes room for one more executable: evicts the least recently used ones, never `keep`. */
static void make_room(struct cgrt_graph_cache *c, const struct entry *keep) {
  for (struct entry *o = c->oldest; o && c->live >= (size_t)c->max_graphs; o = o->newer) {
    if (!o->exec || o == keep)
      continue;
    drop_exec(c, o);
    c->g->stats->evictions++;
  }
}

/* ---------------------------------------------------------------- memory budget */

/* Graphs of one module and direction in one phase (other shapes, buckets, slots) are alike. */
static int similar(const struct cgrt_graph_key *a, const struct cgrt_graph_key *b) {
  return a->module == b->module && a->dir == b->dir && a->phase == b->phase;
}

/*
 * What a new executable for e should take: the graph pool it needs when launched on the
 * runtime's stream (its pool mark) and its executable's own memory. e's last build; else the
 * largest alike graph built for a shape and extra no larger (shape and extra are token buckets
 * or the host's sizes, and a graph's temporaries grow with them); else nothing is known (0): the
 * build is tried and the budget checked with its measured size. The largest alike graph of any
 * shape is no estimate when the buckets' temporaries scale: one large bucket over the budget
 * would send every other bucket eager for good (seen on the H200 with buckets of 4 to 512 MiB).
 */
struct expectation {
  uint64_t pool; /* the pool it needs: an upper bound, shared with the other graphs */
  uint64_t exec;
};

static struct expectation expected_cost(const struct cgrt_graph_cache *c, const struct entry *e) {
  struct expectation x = {0, 0};
  if (e->has_rec) {
    x.pool = e->rec.pool_mark;
    x.exec = e->rec.exec_bytes;
    return x;
  }
  for (const struct entry *o = c->oldest; o; o = o->newer)
    if (o->has_rec && similar(&o->key, &e->key) && o->key.shape <= e->key.shape &&
        o->key.extra <= e->key.extra) {
      if (o->rec.pool_mark > x.pool)
        x.pool = o->rec.pool_mark;
      if (o->rec.exec_bytes > x.exec)
        x.exec = o->rec.exec_bytes;
    }
  return x;
}

/*
 * The bytes building x should add to the total: its own memory and what its pool need exceeds
 * the pool's reserved total by (the driver's figure: idle memory and the other graphs' shared
 * memory count as reusable).
 */
static uint64_t expected_growth(struct cgrt_graphs *g, const struct expectation *x) {
  struct cgrt__mem_probe p = {0};
  if (x->pool)
    cgrt__mem_probe(g, &p);
  uint64_t reserved = p.ok ? p.reserved : 0;
  return x->exec + (x->pool > reserved ? x->pool - reserved : 0);
}

/*
 * Makes room under the budget for a build expected to cost x: idle pool memory is trimmed, then
 * the least recently used executables are evicted, each followed by a trim, until the total
 * plus the expected growth fits (the growth is read again after each trim: a trim lowers the
 * pool, which raises the growth). 1 if it fits, 0 if not. Never evicted: `keep`, and graphs the
 * step in flight has run: the next step of that shape needs them again, and two graphs of one
 * step that cannot live together would evict each other at every step (a capture each time,
 * dearer than running one of them eagerly). The caller has checked that x alone fits.
 */
static int budget_fit(struct cgrt_graph_cache *c, const struct entry *keep,
                      const struct expectation *x) {
  struct cgrt_graphs *g = c->g;
  uint64_t budget = cgrt__mem_budget(g);
  if (cgrt__mem_total(&g->mem) + expected_growth(g, x) <= budget)
    return 1;
  if (g->mem.idle)
    cgrt__mem_reclaim(g, NULL);
  for (struct entry *o = c->oldest, *newer;
       o && cgrt__mem_total(&g->mem) + expected_growth(g, x) > budget; o = newer) {
    newer = o->newer;
    if (!o->exec || o == keep || (g->in_step && o->rec.last_use == g->step_index))
      continue;
    drop_exec(c, o);
    g->stats->evictions++;
    g->mem.budget_evictions++;
    cgrt__mem_reclaim(g, NULL);
  }
  return cgrt__mem_total(&g->mem) + expected_growth(g, x) <= budget;
}

static int run_eager(const struct cgrt_graph_work *w, cgrt_mode m, cgrt_mode *mode);

/* The work's graph does not fit under the budget: it runs eagerly, counted (logged once). */
static int budget_eager(struct cgrt_graph_cache *c, struct entry *e,
                        const struct cgrt_graph_work *w, uint64_t need, cgrt_mode *mode) {
  struct cgrt_graphs *g = c->g;
  g->mem.budget_eager++;
  if (!e->budget_logged) {
    char size[32], mem[512];
    e->budget_logged = 1;
    cgrt__mem_format(need, size, sizeof(size));
    cgrt__mem_describe(&g->mem, cgrt__mem_budget(g), mem, sizeof(mem));
    cgrt__log(g->log, CGRT_LOG_INFO,
              "%s runs eagerly: its graph takes about %s, which does not fit under "
              "[cuda_graph] memory_budget (%s)",
              w->what, size, mem);
  }
  return run_eager(w, CGRT_MODE_EAGER, mode);
}

/* ---------------------------------------------------------------- running work */

struct record_arg {
  const struct cgrt_graph_work *work;
  const cgrt_buffer *bufs;
};

static int record_work(void *arg) {
  struct record_arg *r = arg;
  return r->work->fn(r->work->arg, CGRT_MODE_CAPTURE, r->bufs, r->work->num_buffers);
}

/* e->bufs: the addresses the executable will use for a call with b[0..n) (private where staged). */
static int save_buffers(struct entry *e, const cgrt_buffer *b, size_t n) {
  cgrt_buffer *u = NULL;
  int rc = cgrt__stage_compose(&e->st, b, n, &u);
  if (rc != 0)
    return rc;
  free(e->bufs);
  e->bufs = u;
  e->num_bufs = n;
  return 0;
}

static int run_eager(const struct cgrt_graph_work *w, cgrt_mode m, cgrt_mode *mode) {
  *mode = m;
  return w->fn(w->arg, m, w->buffers, w->num_buffers);
}

static void drop_exec(struct cgrt_graph_cache *c, struct entry *e);

/*
 * The copies of e's staged buffers into them (inputs) or out of them around a replay; counted in
 * cgrt_stats.copy_bytes and in the step's report (by_time leaves such steps out of its figures
 * while the copies may still stop).
 */
static int copy_staged(struct cgrt_graph_cache *c, struct entry *e, const struct cgrt_graph_work *w,
                       int inputs) {
  if (!e->st.staged)
    return 0;
  uint64_t bytes = 0;
  int rc = cgrt__stage_copy(c->host, &bytes, &e->st, w->buffers, w->num_buffers, inputs);
  c->g->stats->copy_bytes += bytes;
  if (c->g->rep)
    c->g->rep->copy_bytes += bytes;
  return rc;
}

/*
 * Launches e's executable, with the copies the copy policy needs around it. If the launch itself
 * fails, the executable is dropped (it is captured again at the next call) and this call runs
 * eagerly instead.
 */
static int replay_checked(struct cgrt_graph_cache *c, struct entry *e,
                          const struct cgrt_graph_work *w, cgrt_mode *mode);

static int replay(struct cgrt_graph_cache *c, struct entry *e, const struct cgrt_graph_work *w,
                  cgrt_mode *mode) {
  const struct cgrt_host_api *h = c->host;
  if (__builtin_expect(c->verify != CGRT_VERIFY_OFF, 0))
    return replay_checked(c, e, w, mode);
  e->rec.last_use = c->g->step_index;
  if (*mode == CGRT_MODE_REPLAY)
    e->rec.replays++;
  int rc = copy_staged(c, e, w, 1);
  if (rc != 0)
    return rc;
  rc = h->exec_launch(h, e->exec, h->stream(h));
  if (rc != 0) {
    cgrt__capture_fallback(c->g, rc, w->what, h->last_error(h));
    drop_exec(c, e);
    return run_eager(w, CGRT_MODE_EAGER, mode);
  }
  return copy_staged(c, e, w, 0);
}

/*
 * replay() with [cuda_graph] verify on: a due replay (the first of the executable, then every
 * verify_every-th) also runs the work eagerly on private copies of its buffers, the inputs copied
 * in before the launch, and the outputs are compared. After a mismatch: warn keeps replaying;
 * eager and error keep the eager outputs, drop the executable and run the key eagerly from then
 * on (until release), error also fails the call with CGRT_E_VERIFY.
 */
static int replay_checked(struct cgrt_graph_cache *c, struct entry *e,
                          const struct cgrt_graph_work *w, cgrt_mode *mode) {
  struct cgrt_graphs *g = c->g;
  const struct cgrt_host_api *h = g->host;
  int due = 0;
  uint64_t nth = 0;
  e->rec.last_use = g->step_index;
  if (*mode == CGRT_MODE_REPLAY) {
    e->rec.replays++;
    nth = ++e->replays;
    due =
        nth == 1 || (c->verify == CGRT_VERIFY_EVERY && (nth - 1) % (uint64_t)c->verify_every == 0);
  }
  int rc = copy_staged(c, e, w, 1);
  if (rc != 0)
    return rc;
  struct cgrt_verify_shadow s = {0};
  if (due && cgrt__verify_snapshot(g->host, g->log, e->bufs, e->num_bufs, &s) != 0) {
    due = 0;
    g->stats->verify_skipped++;
    cgrt__log(g->log, CGRT_LOG_WARN, "verify: %s, replay %llu not checked: %s", w->what,
              (unsigned long long)nth, g->log->err);
  }
  rc = h->exec_launch(h, e->exec, h->stream(h));
  if (rc != 0) {
    cgrt__verify_free(g->host, &s);
    cgrt__capture_fallback(g, rc, w->what, h->last_error(h));
    drop_exec(c, e);
    return run_eager(w, CGRT_MODE_EAGER, mode);
  }
  int differ = 0;
  char msg[768];
  if (due) {
    /* The same work, eagerly, on the private copies (in_body_graph calls run directly). */
    rc = w->fn(w->arg, CGRT_MODE_EAGER, s.bufs, s.n);
    if (rc == 0)
      differ =
          cgrt__verify_outputs(g->host, g->view->verify_tolerance, e->bufs, &s, msg, sizeof(msg));
    if (differ < 0) {
      rc = differ;
      differ = 0;
    }
    g->stats->verifications += rc == 0;
  }
  cgrt_verify_action act = g->view->verify_action;
  if (differ) {
    g->stats->verify_mismatches++;
    cgrt__log(g->log, CGRT_LOG_WARN,
              "verify: %s (step %llu, replay %llu of its graph) differs from an eager run: %s; %s "
              "(a graph replays the kernel arguments it was captured with: a value computed on "
              "the host that changes between calls must be read from device memory, or the "
              "calls need different keys)",
              w->what, (unsigned long long)g->step_index, (unsigned long long)nth, msg,
              act == CGRT_VERIFY_WARN    ? "the graph keeps replaying (verify_action = warn)"
              : act == CGRT_VERIFY_EAGER ? "the eager outputs are kept and the call runs eagerly "
                                           "from now on (verify_action = eager)"
                                         : "the eager outputs are kept, the call runs eagerly "
                                           "from now on and the step fails (verify_action = "
                                           "error)");
    if (act != CGRT_VERIFY_WARN)
      rc = cgrt__verify_adopt(g->host, e->bufs, &s);
  }
  if (rc == 0)
    rc = copy_staged(c, e, w, 0);
  cgrt__verify_free(g->host, &s);
  if (differ && act != CGRT_VERIFY_WARN) {
    drop_exec(c, e);
    e->failures = CAPTURE_ATTEMPTS; /* eager until cgrt_release_graphs, as a key that fails */
    if (rc == 0 && act == CGRT_VERIFY_ERROR)
      rc = h->set_error(h, CGRT_E_VERIFY, "verify: %s (step %llu) differs from an eager run: %s",
                        w->what, (unsigned long long)g->step_index, msg);
  }
  return rc;
}

/*
 * rebind = auto met a key whose buffers move on most calls and that private copies cannot serve:
 * it runs eagerly from now on (until cgrt_release_graphs), said once.
 */
/*
 * "key 64, microbatch 0, extra 8": the parts of a graph key that tell a module's keys apart, as
 * cgrt_graph_list names them; a body's shape is the step's token count. `extra` is the backend's
 * own (local: the token bucket; full_iteration: the microbatch count; dynamic_cp: cp size and
 * slot), so it is printed as it is, not named.
 */
static void key_text(const struct cgrt_graph_key *k, char *buf, size_t len) {
  int n = k->module == CGRT_KEY_BODY
              ? snprintf(buf, len, "%llu tokens", (unsigned long long)k->shape)
              : snprintf(buf, len, "key %llu, microbatch %d", (unsigned long long)k->shape,
                         (int)k->microbatch);
  if (k->extra && n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ", extra %llu", (unsigned long long)k->extra);
}

/* rebind = auto gives a key up: eager until cgrt_release_graphs. why: the reason, a clause. */
static int give_up(struct cgrt_graph_cache *c, struct entry *e, const struct cgrt_graph_work *w,
                   const char *why, cgrt_mode *mode) {
  struct cgrt_graphs *g = c->g;
  char key[96];
  key_text(&e->key, key, sizeof(key));
  drop_exec(c, e);
  e->eager = 1;
  g->stats->rebind_eager_keys++;
  cgrt__log(g->log, CGRT_LOG_WARN,
            "%s (%s): %s: it runs eagerly from now on (rebind = auto, until "
            "cgrt_release_graphs); keep the buffers it is handed in place (allocate them once, "
            "outside the step) to graph it",
            w->what, key, why);
  return run_eager(w, CGRT_MODE_EAGER, mode);
}

/* Given up because its moving buffers need private copies it cannot have (why: the budget's or
   the allocation's clause). */
static int give_up_copies(struct cgrt_graph_cache *c, struct entry *e,
                          const struct cgrt_graph_work *w, const char *why, cgrt_mode *mode) {
  char reason[640];
  snprintf(reason, sizeof(reason), "its buffers moved and need private copies, but %s", why);
  return give_up(c, e, w, reason, mode);
}

/* Given up because its buffers keep moving and its module stages its own inputs. */
static int give_up_own(struct cgrt_graph_cache *c, struct entry *e, const struct cgrt_graph_work *w,
                       const char *moves, cgrt_mode *mode) {
  char reason[640];
  snprintf(reason, sizeof(reason),
           "%s, and its module stages its own inputs (stages_inputs), so it cannot run on "
           "private copies",
           moves);
  return give_up(c, e, w, reason, mode);
}

/* rebind = auto staged buffers of a key whose buffers move on most calls: said once per key. */
static void say_staged(struct cgrt_graph_cache *c, const struct entry *e,
                       const struct cgrt_graph_work *w) {
  struct cgrt_graphs *g = c->g;
  char names[512], key[96];
  cgrt__stage_names(&e->st, w->buffers, w->num_buffers, names, sizeof(names));
  key_text(&e->key, key, sizeof(key));
  g->stats->rebind_copy_keys++;
  cgrt__log(g->log, CGRT_LOG_WARN,
            "%s (%s): buffer%s %s moved on %d of its last %d calls (rebind = auto): its graph now "
            "works on private copies, copied in before and out after each replay (%llu bytes a "
            "call; its module must read their addresses from args->buffers); keep %s in place "
            "(allocate it once, outside the step, and hand the same address) to save the copies",
            w->what, key, e->st.staged == 1 ? "" : "s", names, AUTO_MOVES, AUTO_WINDOW,
            (unsigned long long)e->st.copy_bytes_per_call, e->st.staged == 1 ? "it" : "them");
}

/* rebind = auto: a key whose buffers cycle among a few address sets keeps an executable for
   each (entries of the key, as under recapture): no copies, no recording once all are built. */
static void to_variants(struct cgrt_graph_cache *c, struct entry *e,
                        const struct cgrt_graph_work *w) {
  char key[96];
  key_text(&e->key, key, sizeof(key));
  e->variants = 1;
  c->g->stats->rebind_variant_keys++;
  cgrt__log(c->g->log, CGRT_LOG_INFO,
            "%s (%s): its buffers moved on %d of its last %d calls, among address sets it had "
            "before (rebind = auto): it keeps a graph per address set, at most %d, and copies "
            "nothing",
            w->what, key, AUTO_MOVES, AUTO_WINDOW, AUTO_VARIANTS);
}

/*
 * The private copies a new capture of e works on: every buffer under copy; under auto those of a
 * key that thrashes (or was staged before its executable was evicted). A module that stages its
 * own inputs gets none. 0, or an error with the reason in why.
 */
static int stage_for_capture(struct cgrt_graph_cache *c, struct entry *e,
                             const struct cgrt_graph_work *w, char *why, size_t whylen) {
  const int all = c->rebind == CGRT_REBIND_COPY;
  if (e->variants || (!all && c->rebind != CGRT_REBIND_AUTO))
    return 0;
  if (!all) {
    int sticky = 0;
    for (size_t i = 0; i < e->st.n; i++)
      sticky |= e->st.b[i].sticky;
    if (!sticky && !cgrt__stage_thrashing(&e->st))
      return 0;
    if (!sticky && cgrt__stage_cycling(&e->st)) {
      to_variants(c, e, w);
      return 0;
    }
  }
  if (e->own)
    return 0; /* its host stages: captured as it is, its later moves are followed from here */
  size_t added = 0;
  uint64_t budget = all ? 0 : cgrt__mem_budget(c->g);
  int rc = cgrt__stage_alloc(c->host, &c->g->mem, &e->st, w->buffers, w->num_buffers, all, budget,
                             &added, why, whylen);
  if (rc == 0 && added && !all)
    say_staged(c, e, w);
  return rc;
}

/* Captures a new executable for e; on failure runs the work eagerly. */
static int capture_new(struct cgrt_graph_cache *c, struct entry *e, const struct cgrt_graph_work *w,
                       cgrt_mode *mode) {
  struct cgrt_graphs *g = c->g;
  const struct cgrt_host_api *h = g->host;
  uint64_t budget = cgrt__mem_budget(g);
  if (budget) {
    /* A graph that cannot fit even alone runs eagerly at once: evicting the others (say, the
       small buckets' graphs for a large bucket) could not make room for it. */
    struct expectation x = expected_cost(c, e);
    if (x.pool + x.exec > budget || !budget_fit(c, e, &x))
      return budget_eager(c, e, w, x.pool + x.exec, mode);
  }
  make_room(c, e);
  char why[512] = "";
  int rc = stage_for_capture(c, e, w, why, sizeof(why));
  if (rc != 0 && c->rebind == CGRT_REBIND_AUTO)
    return give_up_copies(c, e, w, why, mode);
  if (rc == 0)
    rc = save_buffers(e, w->buffers, w->num_buffers);
  if (rc != 0) {
    /* Out of memory for the private buffers: this call runs eagerly instead. */
    cgrt__capture_fallback(c->g, rc, w->what, why[0] ? why : h->last_error(h));
    free_private(c, e);
    e->failures++;
    return run_eager(w, CGRT_MODE_EAGER, mode);
  }
  struct record_arg r = {w, e->bufs};
  void *exec = NULL;
  if (h->capture(h, h->stream(h), record_work, &r, w->what, &exec) != 0) {
    free_private(c, e);
    /* A break from outside the work (another thread's device sync) says nothing of the key. */
    if (c->g->broken_outside) {
      if (++e->outside == CAPTURE_OUTSIDE_ATTEMPTS) {
        e->failures = CAPTURE_ATTEMPTS;
        h->log(h, CGRT_LOG_WARN,
               "%s: its capture was broken from outside the captured work %d times in a row "
               "(another thread's cudaDeviceSynchronize, most likely): it runs eagerly from now "
               "on (until cgrt_release_graphs); on other threads synchronize streams or events, "
               "or call cgrt_device_synchronize, which waits for captures, or set [runtime] "
               "sync_guard = on where that code is not yours",
               w->what, CAPTURE_OUTSIDE_ATTEMPTS);
      }
    } else if (++e->failures == CAPTURE_ATTEMPTS) {
      h->log(h, CGRT_LOG_WARN,
             "%s failed to capture %d times in a row: it runs eagerly from now on (until "
             "cgrt_release_graphs)",
             w->what, CAPTURE_ATTEMPTS);
    }
    return run_eager(w, CGRT_MODE_EAGER, mode);
  }
  e->failures = e->outside = 0;
  e->exec = exec;
  e->replays = 0;
  c->live++;
  if (g->mem.build_valid) {
    e->rec = g->mem.build;
    e->has_rec = 1;
    e->charged = 1;
    cgrt__mem_charge(g, &e->rec);
  }
  /* The expectation can be wrong (a first capture has none): the budget holds after the build
     too. A graph that cannot fit alone (its growth, or its pool mark, with its own memory over
     the budget) goes at once, without evicting the others. */
  if (budget && cgrt__mem_total(&g->mem) > budget) {
    struct expectation none = {0, 0};
    /* Idle memory first: its trim also lowers the new graph's mark to what the pool keeps. */
    if (g->mem.idle)
      cgrt__mem_reclaim(g, NULL);
    uint64_t alone = e->rec.pool_mark + e->rec.exec_bytes;
    if (cgrt__mem_total(&g->mem) > budget &&
        (e->rec.built_bytes > budget || alone > budget || !budget_fit(c, e, &none))) {
      drop_exec(c, e);
      cgrt__mem_reclaim(g, NULL);
      return budget_eager(c, e, w, alone > e->rec.built_bytes ? alone : e->rec.built_bytes, mode);
    }
  }
  *mode = CGRT_MODE_CAPTURE;
  return replay(c, e, w, mode);
}

/* Update policy: re-records the work with the new addresses and updates e's executable. */
static int rebind_update(struct cgrt_graph_cache *c, struct entry *e,
                         const struct cgrt_graph_work *w, cgrt_mode *mode) {
  struct cgrt_graphs *g = c->g;
  const struct cgrt_host_api *h = g->host;
  char why[sizeof(g->log->err)];
  void *graph = NULL;
  /* The new addresses: the host's, and the private copies of staged buffers. */
  cgrt_buffer *bufs = NULL;
  int rc = cgrt__stage_compose(&e->st, w->buffers, w->num_buffers, &bufs);
  if (rc != 0)
    return rc;
  struct record_arg r = {w, bufs ? bufs : w->buffers};
  struct cgrt__mem_probe before, after;
  if (e->charged)
    cgrt__mem_probe(g, &before);
  rc = cgrt__record(g, h->stream(h), record_work, &r, w->what, why, sizeof(why), &graph);
  if (rc != 0) {
    /* The old executable stays for its own addresses, unless it now has private copies it was
       not recorded with; this call runs eagerly. */
    free(bufs);
    if (e->st.staged)
      drop_exec(c, e);
    cgrt__capture_fallback(g, rc, w->what, why);
    return run_eager(w, CGRT_MODE_EAGER, mode);
  }
  rc = h->exec_update(h, e->exec, graph);
  if (rc == CGRT_E_UPDATE) {
    void *exec = NULL;
    rc = h->graph_instantiate(h, graph, &exec);
    if (rc == 0) {
      h->exec_destroy(h, e->exec);
      e->exec = exec;
      /* Map its graph memory now, as the capture helper does, so the reading below sees it. */
      rc = h->exec_upload(h, exec, h->stream(h));
    }
  }
  h->graph_destroy(h, graph);
  if (e->charged) {
    /* The executable may have changed: its record moves with the driver's figures. */
    cgrt__mem_probe(g, &after);
    cgrt__mem_adjust(g, &e->rec, &before, &after);
  }
  if (rc != 0) {
    free(bufs);
    if (e->st.staged)
      drop_exec(c, e);
    cgrt__capture_fallback(g, rc, w->what, g->log->err);
    return run_eager(w, CGRT_MODE_EAGER, mode);
  }
  free(e->bufs);
  e->bufs = bufs;
  e->num_bufs = w->num_buffers;
  e->replays = 0; /* new arguments: the next replay is checked again */
  *mode = CGRT_MODE_CAPTURE;
  return replay(c, e, w, mode);
}

/* Names the first buffer that moved, for the error policy. */
static int rebind_refused(struct cgrt_graph_cache *c, const struct entry *e,
                          const struct cgrt_graph_work *w) {
  const struct cgrt_host_api *h = c->host;
  if (e->num_bufs != w->num_buffers)
    return h->set_error(h, CGRT_E_REBIND,
                        "%s: called with %zu buffers, captured with %zu; rebind = error refuses "
                        "it (set [cuda_graph] rebind = update, copy or recapture)",
                        w->what, w->num_buffers, e->num_bufs);
  for (size_t i = 0; i < e->num_bufs; i++)
    if (e->bufs[i].ptr != w->buffers[i].ptr || e->bufs[i].bytes != w->buffers[i].bytes)
      return h->set_error(h, CGRT_E_REBIND,
                          "%s: buffer '%s' (#%zu) moved from %p (%zu bytes) to %p (%zu bytes) "
                          "since its capture; rebind = error refuses to replay stale addresses "
                          "(keep the buffer in place, or set [cuda_graph] rebind = update, copy "
                          "or recapture)",
                          w->what, w->buffers[i].name ? w->buffers[i].name : "?", i, e->bufs[i].ptr,
                          e->bufs[i].bytes, w->buffers[i].ptr, w->buffers[i].bytes);
  return CGRT_E_REBIND;
}

/* Another entry of the same key (recapture: an executable for another address set). */
static struct entry *sibling(struct cgrt_graph_cache *c, const struct cgrt_graph_key *key,
                             uint64_t hash) {
  for (struct entry *e = c->table[hash & (c->table_size - 1)]; e; e = e->chain)
    if (e->hash == hash && key_equal(&e->key, key))
      return e;
  return NULL;
}

/* Copy policy: a call the private copies cannot take (another count of buffers, one grew). */
static int copy_refused(struct cgrt_graph_cache *c, const struct entry *e,
                        const struct cgrt_graph_work *w) {
  const struct cgrt_host_api *h = c->host;
  if (w->num_buffers != e->st.n)
    return h->set_error(h, CGRT_E_REBIND,
                        "%s: called with %zu buffers, captured with %zu; give calls with other "
                        "buffers another key",
                        w->what, w->num_buffers, e->st.n);
  for (size_t i = 0; i < e->st.n; i++)
    if (e->st.b[i].priv && w->buffers[i].bytes > e->st.b[i].priv_bytes)
      return h->set_error(h, CGRT_E_REBIND,
                          "%s: buffer '%s' (#%zu) grew from %zu to %zu bytes under the same key; "
                          "give calls of another shape another key",
                          w->what, w->buffers[i].name ? w->buffers[i].name : "?", i,
                          e->st.b[i].priv_bytes, w->buffers[i].bytes);
  return rebind_refused(c, e, w);
}

/*
 * A key whose buffers cycle took more address sets than AUTO_VARIANTS: its entries but `keep` go,
 * and keep works on private copies of the buffers its address set does not share with this call.
 */
static int fold_variants(struct cgrt_graph_cache *c, struct entry *keep,
                         const struct cgrt_graph_work *w, cgrt_mode *mode) {
  for (struct entry *o = c->oldest, *newer; o; o = newer) {
    newer = o->newer;
    if (o != keep && o->hash == keep->hash && key_equal(&o->key, &keep->key))
      entry_remove(c, o);
  }
  keep->variants = 0;
  int rc = cgrt__stage_track(&keep->st, w->buffers, w->num_buffers);
  if (rc < 0)
    return rc;
  if (keep->own)
    return give_up_own(c, keep, w,
                       "its buffers cycle among more address sets than it keeps graphs for", mode);
  if (!keep->exec || keep->num_bufs != w->num_buffers)
    return capture_new(c, keep, w, mode);
  for (size_t i = 0; i < keep->st.n; i++)
    if (keep->bufs[i].ptr != w->buffers[i].ptr || keep->bufs[i].bytes != w->buffers[i].bytes)
      keep->st.b[i].sticky = 1;
  char why[512] = "";
  size_t added = 0;
  rc = cgrt__stage_alloc(c->host, &c->g->mem, &keep->st, w->buffers, w->num_buffers, 0,
                         cgrt__mem_budget(c->g), &added, why, sizeof(why));
  if (rc != 0)
    return give_up_copies(c, keep, w, why, mode);
  if (added)
    say_staged(c, keep, w);
  return rebind_update(c, keep, w, mode);
}

/*
 * rebind = auto, a key on private copies whose buffers have settled into a cycle of a few address
 * sets (AUTO_SETTLE calls in a row each took one of the sets before it: a host whose allocator
 * hands new addresses while it warms up, then the same two or three, as cudaMallocAsync's pool does
 * once its frees are reusable): its executable and private copies go, and it keeps a graph per set
 * from now on, as a key that cycled from the start. Once per key: should it meet more sets than
 * AUTO_VARIANTS again, it folds back to private copies for good (fold_variants), so a host
 * alternating between the two patterns costs a bounded number of captures.
 */
static int copies_to_variants(struct cgrt_graph_cache *c, struct entry *e,
                              const struct cgrt_graph_work *w, cgrt_mode *mode) {
  char key[96];
  key_text(&e->key, key, sizeof(key));
  unsigned long long bytes = (unsigned long long)e->st.copy_bytes_per_call;
  drop_exec(c, e); /* its executable works on the private copies: both go */
  for (size_t i = 0; i < e->st.n; i++)
    e->st.b[i].sticky = 0;
  e->uncopied = 1;
  e->variants = 1;
  c->g->stats->rebind_variant_keys++;
  cgrt__log(c->g->log, CGRT_LOG_INFO,
            "%s (%s): its buffers now cycle among a few address sets (each of its last %d calls "
            "took one of the %d sets before it; rebind = auto): its private copies (%llu bytes "
            "copied a call) are dropped, and it keeps a graph per address set, at most %d, and "
            "copies nothing",
            w->what, key, AUTO_SETTLE, AUTO_WINDOW - 1, bytes, AUTO_VARIANTS);
  return capture_new(c, e, w, mode);
}

/* A new entry of a key takes what belongs to the key, not to one address set, from another entry
   of it: its warm-up, its rebind state (uncopied too: whichever entry folds back to copies), its
   module's staging. */
static void key_state_from(struct entry *e, const struct entry *from) {
  e->warm = from->warm;
  e->variants = from->variants;
  e->own = from->own;
  e->uncopied = from->uncopied;
}

/* Entries of a key (several: recapture, or auto's address sets of a cycling key). */
static size_t count_entries(const struct cgrt_graph_cache *c, const struct cgrt_graph_key *key,
                            uint64_t hash) {
  size_t n = 0;
  for (const struct entry *e = c->table[hash & (c->table_size - 1)]; e; e = e->chain)
    n += e->hash == hash && key_equal(&e->key, key);
  return n;
}

/*
 * rebind = auto, a call whose buffers do not fit e's executable: staged buffers that grew get
 * larger private copies; a key whose buffers moved on most of its recent calls gets private
 * copies of those that move; then the call is recorded again into the executable (update).
 */
static int rebind_auto(struct cgrt_graph_cache *c, struct entry *e, const struct cgrt_graph_work *w,
                       cgrt_mode *mode) {
  char why[512] = "";
  if (w->num_buffers != e->st.n)
    free_private(c, e); /* private copies follow buffers by index: gone with another count */
  int rc =
      cgrt__stage_regrow(c->host, &c->g->mem, &e->st, w->buffers, w->num_buffers, why, sizeof(why));
  if (rc < 0)
    return give_up_copies(c, e, w, why, mode);
  rc = cgrt__stage_track(&e->st, w->buffers, w->num_buffers);
  if (rc < 0)
    return rc;
  if (cgrt__stage_thrashing(&e->st) && cgrt__stage_cycling(&e->st) && !e->st.staged) {
    /* The executable serves the address set it has; this call's set gets an entry of its own. */
    to_variants(c, e, w);
    struct entry *v = insert(c, &e->key, e->hash);
    if (!v)
      return c->host->set_error(c->host, CGRT_E_NOMEM, "out of memory in the graph cache (%s)",
                                w->what);
    key_state_from(v, e); /* variants included: to_variants set it */
    return capture_new(c, v, w, mode);
  }
  if (cgrt__stage_thrashing(&e->st)) {
    if (e->own) {
      char moves[96];
      snprintf(moves, sizeof(moves), "its buffers moved on %d of its last %d calls", AUTO_MOVES,
               AUTO_WINDOW);
      return give_up_own(c, e, w, moves, mode);
    }
    size_t added = 0;
    rc = cgrt__stage_alloc(c->host, &c->g->mem, &e->st, w->buffers, w->num_buffers, 0,
                           cgrt__mem_budget(c->g), &added, why, sizeof(why));
    if (rc != 0)
      return give_up_copies(c, e, w, why, mode);
    if (added)
      say_staged(c, e, w);
  }
  if (!e->exec) /* dropped above with its private copies: captured anew */
    return capture_new(c, e, w, mode);
  return rebind_update(c, e, w, mode);
}

/* cache_run, for a unit whose module may stage its own inputs (`own`: never private copies);
 *fresh: 1 when the cache had no entry of the key (follow_repeats). */
static int run_unit(struct cgrt_graph_cache *c, const struct cgrt_graph_key *key,
                    const struct cgrt_graph_work *w, int own, cgrt_mode *mode, int *fresh) {
  const struct cgrt_host_api *h = c->host;
  *fresh = 0;
  if (w->num_buffers && !w->buffers)
    return h->set_error(h, CGRT_E_INVAL, "%s: num_buffers is %zu but buffers is NULL", w->what,
                        w->num_buffers);
  uint64_t hash = key_hash(key);
  struct entry *e = find(c, key, hash, w->buffers, w->num_buffers);
  if (!e) {
    /* Under recapture a key seen with other addresses is warm already: capture at once. */
    struct entry *other = sibling(c, key, hash);
    *fresh = !other;
    if (other && other->variants && count_entries(c, key, hash) >= AUTO_VARIANTS) {
      touch(c, other);
      c->g->stats->rebinds++;
      return fold_variants(c, other, w, mode);
    }
    if (!(e = insert(c, key, hash)))
      return h->set_error(h, CGRT_E_NOMEM, "out of memory in the graph cache (%s)", w->what);
    if (other) {
      key_state_from(e, other);
      c->g->stats->rebinds++;
    }
  }
  touch(c, e);
  e->own = own;
  if (!e->exec) {
    if (e->failures >= CAPTURE_ATTEMPTS || e->eager)
      return run_eager(w, CGRT_MODE_EAGER, mode);
    /* The moves of warm-up calls count: a key whose buffers move every call is captured on
       private copies at once. A unit whose host stages its inputs is followed from its capture
       on (its host stages what moves during warm-up, where a module's inputs are the fresh
       outputs of eager modules before it). */
    if ((c->rebind == CGRT_REBIND_AUTO || c->rebind == CGRT_REBIND_COPY) &&
        (!own || e->warm >= w->warmup)) {
      int rc = cgrt__stage_track(&e->st, w->buffers, w->num_buffers);
      if (rc < 0)
        return rc;
    }
    if (e->warm < w->warmup) {
      e->warm++;
      return run_eager(w, CGRT_MODE_WARMUP, mode);
    }
    return capture_new(c, e, w, mode);
  }
  if (buffers_match(e, w->buffers, w->num_buffers)) {
    if (e->st.staged && c->rebind == CGRT_REBIND_AUTO && !e->uncopied) {
      /* on private copies: its addresses are followed, in case they settle into a cycle */
      int rc = cgrt__stage_track(&e->st, w->buffers, w->num_buffers);
      if (rc < 0)
        return rc;
      if (e->st.cycled >= AUTO_SETTLE)
        return copies_to_variants(c, e, w, mode);
    } else {
      cgrt__stage_tick(&e->st);
    }
    *mode = CGRT_MODE_REPLAY;
    return replay(c, e, w, mode);
  }
  /* The buffers moved (recapture never gets here: find() matched or made another entry). */
  c->g->stats->rebinds++;
  switch (c->rebind) {
  case CGRT_REBIND_AUTO:
    return rebind_auto(c, e, w, mode);
  case CGRT_REBIND_COPY:
    /* A module that stages its own inputs has no private copies: its moves are re-recorded. */
    return e->st.staged ? copy_refused(c, e, w) : rebind_update(c, e, w, mode);
  case CGRT_REBIND_UPDATE:
    return rebind_update(c, e, w, mode);
  default:
    return rebind_refused(c, e, w);
  }
}

int cgrt__cache_run(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                    const struct cgrt_graph_key *key, const struct cgrt_graph_work *w,
                    cgrt_mode *mode) {
  (void)h;
  int fresh;
  return run_unit(c, key, w, 0, mode, &fresh);
}

int cgrt__cache_has(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                    const struct cgrt_graph_key *key) {
  (void)h;
  uint64_t hash = key_hash(key);
  for (struct entry *e = c->table[hash & (c->table_size - 1)]; e; e = e->chain)
    if (e->hash == hash && key_equal(&e->key, key) && e->exec)
      return 1;
  return 0;
}

void cgrt__cache_clear(const struct cgrt_host_api *h, struct cgrt_graph_cache *c) {
  (void)h;
  while (c->oldest)
    entry_remove(c, c->oldest);
}

int cgrt__cache_retire(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                       int (*match)(void *arg, const struct cgrt_graph_key *key), void *arg,
                       size_t *dropped) {
  if (dropped)
    *dropped = 0;
  if (!c || !match)
    return h->set_error(h, CGRT_E_INVAL, "cache_retire: cache and match must be non-NULL");
  for (struct entry *e = c->oldest, *newer; e; e = newer) {
    newer = e->newer;
    if (!match(arg, &e->key))
      continue;
    if (e->exec && dropped)
      (*dropped)++;
    entry_remove(c, e);
  }
  return 0;
}

void cgrt__cache_destroy(const struct cgrt_host_api *h, struct cgrt_graph_cache *c) {
  if (!c)
    return;
  cgrt__cache_clear(h, c);
  for (struct cgrt_graph_cache **p = &c->g->caches; *p; p = &(*p)->next_cache)
    if (*p == c) {
      *p = c->next_cache;
      break;
    }
  free(c->table);
  free(c);
}

static const struct cgrt__graph_walkers walkers; /* below */

int cgrt__cache_create(struct cgrt_graphs *g, int max_graphs, cgrt_rebind rebind,
                       struct cgrt_graph_cache **out) {
  const struct cgrt_host_api *h = g->host;
  *out = NULL;
  if (max_graphs < 1 || (unsigned)rebind > CGRT_REBIND_AUTO)
    return h->set_error(h, CGRT_E_INVAL, "cache_create: max_graphs %d must be >= 1", max_graphs);
  struct cgrt_graph_cache *c = calloc(1, sizeof(*c));
  if (!c)
    return CGRT_E_NOMEM;
  c->g = g;
  c->host = g->host;
  c->max_graphs = max_graphs;
  c->rebind = rebind;
  c->verify = c->g->view->verify;
  c->verify_every = c->g->view->verify_every > 0 ? c->g->view->verify_every : 1;
  c->table_size = 64;
  c->table = calloc(c->table_size, sizeof(*c->table));
  if (!c->table) {
    free(c);
    return CGRT_E_NOMEM;
  }
  c->next_cache = c->g->caches;
  c->g->caches = c;
  c->g->mem.caches = &walkers;
  *out = c;
  return 0;
}

/* ---------------------------------------------------------------- for graph_mem.c */

int cgrt__caches_visit(struct cgrt_graphs *g,
                       int (*fn)(void *arg, const struct cgrt_graph_key *key,
                                 const struct cgrt__graph_rec *rec),
                       void *arg) {
  for (struct cgrt_graph_cache *c = g->caches; c; c = c->next_cache)
    for (struct entry *e = c->newest; e; e = e->older)
      if (e->exec) {
        int rc = fn(arg, &e->key, &e->rec);
        if (rc != 0)
          return rc;
      }
  return 0;
}

struct cgrt__graph_rec *cgrt__caches_largest(struct cgrt_graphs *g) {
  struct cgrt__graph_rec *best = NULL;
  for (struct cgrt_graph_cache *c = g->caches; c; c = c->next_cache)
    for (struct entry *e = c->oldest; e; e = e->newer)
      if (e->charged && e->rec.alloc_bytes > 0 &&
          (!best || e->rec.alloc_bytes >= best->alloc_bytes))
        best = &e->rec;
  return best;
}

void cgrt__caches_cap_marks(struct cgrt_graphs *g, uint64_t reserved) {
  for (struct cgrt_graph_cache *c = g->caches; c; c = c->next_cache)
    for (struct entry *e = c->oldest; e; e = e->newer)
      if (e->charged && e->rec.pool_mark > reserved)
        e->rec.pool_mark = reserved;
}

static int caches_retire(struct cgrt_graphs *g,
                         int (*match)(void *arg, const struct cgrt_graph_key *key), void *arg,
                         size_t *dropped) {
  *dropped = 0;
  for (struct cgrt_graph_cache *c = g->caches; c; c = c->next_cache) {
    size_t n = 0;
    int rc = cgrt__cache_retire(c->host, c, match, arg, &n);
    *dropped += n;
    if (rc != 0)
      return rc;
  }
  return 0;
}

static const struct cgrt__graph_walkers walkers = {
    .cap_marks = cgrt__caches_cap_marks,
    .visit = cgrt__caches_visit,
    .largest = cgrt__caches_largest,
    .retire = caches_retire,
};

/* ---------------------------------------------------------------- whole bodies */

struct body_unit {
  struct cgrt_graphs *g;
  struct cgrt_step_frame *f;
  const char *what;
};

static int run_body_unit(void *arg, cgrt_mode mode, const cgrt_buffer *bufs, size_t n) {
  struct body_unit *b = arg;
  struct cgrt_graphs *g = b->g;
  cgrt_ctx *ctx = b->f->ctx;
  const cgrt_buffer *saved = ctx->buffers;
  size_t saved_n = ctx->num_buffers;
  /* The body addresses the static buffers the unit works on: private ones under copy. */
  ctx->mode = mode;
  int rc =
      cgrt__comms_wait(g->comms, g->dev, g->stream, g->log, &g->stats->comm_waits, ctx, b->what);
  if (rc != 0)
    return rc;
  ctx->buffers = bufs;
  ctx->num_buffers = n;
  g->in_body_graph = 1;
  rc = g->host->run_body(g->host, b->f);
  g->in_body_graph = 0;
  ctx->buffers = saved;
  ctx->num_buffers = saved_n;
  return rc;
}

/*
 * After a unit ran (`fresh`: with a key its cache had no entry of): `run` counts its runs in a row
 * that met such a key (a module's calls in one direction, `what`, or the step bodies of
 * `phase`). At UNREPEATED_SAY, said once for the unit (the first unit of the runtime at warn, later
 * ones at info): its key changes on every call, so none is run through the warm-up and nothing is
 * ever captured, with no other sign.
 */
static void follow_repeats(struct cgrt_graphs *g, int fresh, uint32_t *run, int *said,
                           const char *what, const char *phase) {
  if (!fresh) {
    *run = 0;
    return;
  }
  if (++*run < UNREPEATED_SAY || *said)
    return;
  *said = 1;
  g->stats->unrepeated_units++;
  cgrt_log_level level = g->unrepeated_said++ ? CGRT_LOG_INFO : CGRT_LOG_WARN;
  if (phase)
    cgrt__log(g->log, level,
              "the %s steps: the last %d each came with a shape the step body had not run at "
              "before (its padded token count and microbatches), so none ran through the warm-up "
              "and none was captured: they run eagerly; pad the token count to a few sizes (infer "
              "steps: [inference] buckets) to graph them",
              phase, UNREPEATED_SAY);
  else
    cgrt__log(g->log, level,
              "%s: its last %d graphed calls each came with a key it had not been called with "
              "before (args->key, which cgrt.torch makes from the input shapes, with the step's "
              "token bucket), so none was called through the warm-up and none was captured: its "
              "calls run eagerly; a key names the call's shapes and must not change on every call "
              "(a length or an address in it): pad lengths to a few sizes to graph it",
              what, UNREPEATED_SAY);
}

/*
 * "the PHASE body at N tokens" ("the PHASE body" for N = 0) into what (96 bytes), as snprintf
 * would write it: every step of a whole-body unit names it, and snprintf cost a replayed block
 * step a third of its host instructions (issue 43, item 5).
 */
static void body_name(char what[96], const char *phase, uint64_t tokens) {
  static const char head[] = "the ", mid[] = " body", at[] = " at ", tail[] = " tokens";
  size_t plen = strnlen(phase, 32), n = 0;
  memcpy(what + n, head, sizeof(head) - 1);
  n += sizeof(head) - 1;
  memcpy(what + n, phase, plen);
  n += plen;
  memcpy(what + n, mid, sizeof(mid) - 1);
  n += sizeof(mid) - 1;
  if (tokens) {
    char digits[24];
    size_t d = sizeof(digits);
    do
      digits[--d] = (char)('0' + tokens % 10);
    while ((tokens /= 10) != 0);
    memcpy(what + n, at, sizeof(at) - 1);
    n += sizeof(at) - 1;
    memcpy(what + n, digits + d, sizeof(digits) - d);
    n += sizeof(digits) - d;
    memcpy(what + n, tail, sizeof(tail) - 1);
    n += sizeof(tail) - 1;
  }
  what[n] = '\0';
}

int cgrt__cache_run_body(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                         struct cgrt_step_frame *f, const struct cgrt_graph_key *key, int warmup,
                         cgrt_mode *mode) {
  char what[96];
  body_name(what, cgrt_phase_name(f->ctx->phase), key->shape);
  (void)h;
  struct body_unit b = {c->g, f, what};
  struct cgrt_graph_work work = {
      .struct_size = sizeof(work),
      .fn = run_body_unit,
      .arg = &b,
      .buffers = f->desc->buffers,
      .num_buffers = f->desc->num_buffers,
      .warmup = warmup,
      .what = what,
  };
  int fresh;
  int rc = run_unit(c, key, &work, b.g->body_stages, mode, &fresh);
  const cgrt_phase phase = f->ctx->phase;
  if ((unsigned)phase < CGRT_PHASE_COUNT)
    follow_repeats(c->g, fresh, &c->g->body_unrepeated[phase], &c->g->body_unrepeated_said[phase],
                   what, cgrt_phase_name(phase));
  f->ctx->mode = *mode;
  return rc;
}

/* ---------------------------------------------------------------- module calls */

struct call_unit {
  const struct cgrt_host_api *host;
  struct cgrt_call *call;
};

static int run_call_unit(void *arg, cgrt_mode mode, const cgrt_buffer *bufs, size_t n) {
  struct call_unit *u = arg;
  struct cgrt_call *c = u->call;
  const struct cgrt_host_api *h = u->host;
  c->ctx->mode = mode;
  if (bufs == c->args->buffers)
    return h->run_module(h, c);
  /* Under copy the executable works on private buffers: the module must see those. */
  cgrt_args args = *c->args;
  args.buffers = bufs;
  args.num_buffers = n;
  struct cgrt_call moved = *c;
  moved.args = &args;
  return h->run_module(h, &moved);
}

int cgrt__cache_run_call(const struct cgrt_host_api *h, struct cgrt_graph_cache *c,
                         struct cgrt_call *call, const struct cgrt_graph_key *key, int warmup,
                         cgrt_mode *mode) {
  struct call_unit u = {h, call};
  struct cgrt_graph_work work = {
      .struct_size = sizeof(work),
      .fn = run_call_unit,
      .arg = &u,
      .buffers = call->args->buffers,
      .num_buffers = call->args->num_buffers,
      .warmup = warmup,
      .what = cgrt__call_name(call),
  };
  /* The runtime owns its modules; a call only lends its info as const. */
  struct cgrt_module *m = (struct cgrt_module *)call->module;
  int fresh;
  int rc = run_unit(c, key, &work, m->stages_inputs, mode, &fresh);
  const int dir = call->dir == CGRT_BACKWARD;
  follow_repeats(c->g, fresh, &m->unrepeated[dir], &m->unrepeated_said[dir], work.what, NULL);
  call->ctx->mode = *mode;
  return rc;
}
