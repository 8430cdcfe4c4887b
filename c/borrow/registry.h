/* registry.h -- the cooperative borrow registry's table, for the files
 * that work on it: registry.c (the shared table's functions, which other
 * copies of the library call), tracked.c (tracked grants) and
 * tracked_fast.h (their common case, which takes the lock and appends
 * inline, and which acquire.c inlines too). */
#ifndef PYXBUF_BORROW_REGISTRY_H
#define PYXBUF_BORROW_REGISTRY_H

#include "borrow/borrow.h"

#include <sched.h>
#include <stdatomic.h>

/* Borrows are keyed by device and address range: two objects that share
 * memory share addresses, so this catches more than "same base object" would
 * (a NumPy array and a view of it are different objects). Within a range, a
 * strided view's items sit on a lattice (pyxbuf_borrow_key), so interleaved
 * views do not conflict. */
typedef struct tracked_borrow {
    int64_t token;
    pyxbuf_borrow_key key;
    int32_t exclusive;
} tracked_borrow;

/* The table: live borrows, how many, how many are exclusive, the next token,
 * and its lock; every field but the lock touched only under the lock. Every
 * copy of the library has one (pyxbuf__registry); the copy that installed
 * the shared table owns the one in use, and later copies built with the same
 * layout (PYXBUF__REGISTRY_LAYOUT, published in the table from version 4)
 * work on it inline, as the owner does, instead of through the table's
 * function pointers: a tracked grant then costs the same in every copy. The
 * layout only ever changes with a new layout number; a copy that finds
 * another number uses the function pointers. */
#define PYXBUF__REGISTRY_LAYOUT 1
typedef struct registry_state {
    atomic_flag lock;
    tracked_borrow *entries;
    size_t count, capacity;
    size_t exclusive; /* entries with exclusive set */
    int64_t next_token;
} registry_state;

extern PYXBUF_HIDDEN registry_state pyxbuf__registry;

/* This copy's shared table, and the one in use: own, or the one a copy
 * loaded earlier installed (NULL until pyxbuf_shared_api_get). */
extern PYXBUF_HIDDEN const pyxbuf_shared_api pyxbuf__own_shared_api;
extern PYXBUF_HIDDEN const pyxbuf_shared_api *pyxbuf__installed_shared_api;
/* The registry in use when this copy can work on it inline (its own, or the
 * installer's of the same layout), else NULL: set with the installed table. */
extern PYXBUF_HIDDEN registry_state *pyxbuf__inline_registry;

/* The table is thread-safe (pyxbuf.h): foreign callers may come without the
 * GIL. The critical sections are a few dozen instructions, so a spin on one
 * atomic flag (uncontended: one exchange and one store) serves where a
 * pthread mutex cost ~110 instructions per lock and unlock. */
static inline void registry_lock(registry_state *r) {
    while (atomic_flag_test_and_set_explicit(&r->lock, memory_order_acquire)) sched_yield();
}

static inline void registry_unlock(registry_state *r) {
    atomic_flag_clear_explicit(&r->lock, memory_order_release);
}

/* One try at the lock, for the inline fast paths: they make no call (so they
 * save no registers), and when the lock is busy they leave the wait to the
 * full path. 1 when taken. */
static inline int registry_try_lock(registry_state *r) {
    return !atomic_flag_test_and_set_explicit(&r->lock, memory_order_acquire);
}

static inline int ranges_overlap(const pyxbuf_borrow_range *a, const pyxbuf_borrow_range *b) {
    if (a->lo == a->hi || b->lo == b->hi) return 0; /* no bytes, no conflict */
    return a->device_type == b->device_type && a->device_id == b->device_id && a->lo < b->hi &&
           b->lo < a->hi;
}

/* Whether an item of `a` can share a byte with an item of `b`, ranges aside.
 * Every item of either starts at its `first` plus a multiple of g, the gcd of
 * both lattices, so the distance between an item of a and one of b is
 * d = a.first - b.first modulo g. Items [x, x + ia) and [y, y + ib) meet iff
 * -ia < x - y < ib: possible iff the residue r of d, or r - g, lies there.
 * Sound for any strides and itemsizes (rust-numpy's test is the same lattice
 * argument without the item lengths, exact only for equal itemsizes); it
 * ignores where the lattices end, which the ranges bound. */
static inline int lattices_meet(const pyxbuf_borrow_key *a, const pyxbuf_borrow_key *b) {
    uint64_t g = pyxbuf__gcd(a->stride_gcd, b->stride_gcd);
    if (g == 0) return 1; /* two single items: the ranges decided */
    /* A single item (stride_gcd 0) is its whole range; its `first` and
     * `itemsize` are not read (the hot path does not store them). */
    uint64_t a_first = a->stride_gcd ? a->first : a->range.lo;
    uint64_t b_first = b->stride_gcd ? b->first : b->range.lo;
    uint64_t a_item = a->stride_gcd ? a->itemsize & ~PYXBUF__KEY_DENSE : a->range.hi - a->range.lo;
    uint64_t b_item = b->stride_gcd ? b->itemsize & ~PYXBUF__KEY_DENSE : b->range.hi - b->range.lo;
    uint64_t r = a_first >= b_first ? (a_first - b_first) % g : (g - (b_first - a_first) % g) % g;
    return r < b_item || g - r < a_item;
}

/* A key as a run of items: `count` items of `item` bytes, the first at `lo`,
 * one every `step` bytes (a single item: count 1, its whole range). */
typedef struct item_run {
    uint64_t lo, step, count, item;
} item_run;

/* 1 and *run for a dense key or a single item (every item is known), else
 * 0. Ranges too wide for signed arithmetic are left to the lattice. */
static inline int run_of(const pyxbuf_borrow_key *k, item_run *run) {
    uint64_t span = k->range.hi - k->range.lo;
    if (span >= (UINT64_C(1) << 61)) return 0;
    if (k->stride_gcd == 0) {
        *run = (item_run){k->range.lo, 0, 1, span};
        return 1;
    }
    uint64_t item = k->itemsize & ~PYXBUF__KEY_DENSE;
    if (!(k->itemsize & PYXBUF__KEY_DENSE) || item > span || item >= (UINT64_C(1) << 61))
        return 0;
    *run = (item_run){k->range.lo, k->stride_gcd, (span - item) / k->stride_gcd + 1, item};
    return 1;
}

static inline int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
    return a / b - (a % b != 0 && a < 0);
}

/* Whether runs a and b share a byte, exactly, when a's step is m times b's
 * (m >= 1; a single item takes b's step). An item of a at a.lo + i*m*s and
 * one of b at b.lo + j*s meet iff -ia < D + t*s < ib, with D = a.lo - b.lo
 * and t = i*m - j: for each of the few t that puts the two items within
 * reach, is there an i in [0, a.count) with j = i*m - t in [0, b.count)?
 * -1 when there are too many t to try (items much longer than the step):
 * the lattice answers then. */
static inline int runs_meet(item_run a, item_run b) {
    if (b.step == 0) return 1; /* two single items overlapping by range */
    int64_t s = (int64_t)b.step, m = a.count > 1 ? (int64_t)(a.step / b.step) : 1;
    int64_t d = (int64_t)(a.lo - b.lo); /* within 2^62: both runs meet one range */
    int64_t t_lo = floor_div(-(int64_t)a.item - d, s) + 1;
    int64_t t_hi = -floor_div(-((int64_t)b.item - d), s) - 1; /* ceil, then - 1 */
    if (t_hi - t_lo > 64) return -1;
    for (int64_t t = t_lo; t <= t_hi; t++) {
        int64_t i_lo = -floor_div(-t, m); /* ceil(t / m) */
        int64_t i_hi = floor_div(t + (int64_t)b.count - 1, m);
        if (i_lo < 0) i_lo = 0;
        if (i_hi > (int64_t)a.count - 1) i_hi = (int64_t)a.count - 1;
        if (i_lo <= i_hi) return 1;
    }
    return 0;
}

/* Exact where it is cheap: two runs whose steps divide one another (1-D
 * views with equal strides, or one stride a multiple of the other -- real
 * and imaginary parts, channels, columns); else the lattice, which is sound
 * and ignores where the items end. */
static inline int items_meet(const pyxbuf_borrow_key *a, const pyxbuf_borrow_key *b) {
    item_run ra, rb;
    if (run_of(a, &ra) && run_of(b, &rb)) {
        /* ra: the single item, else the larger step (rb.step > 0 then). */
        if (rb.count == 1 || (ra.count > 1 && ra.step < rb.step)) {
            item_run t = ra;
            ra = rb;
            rb = t;
        }
        int meet = ra.count == 1 || ra.step % rb.step == 0 ? runs_meet(ra, rb) : -1;
        if (meet >= 0) return meet;
    }
    return lattices_meet(a, b);
}

static inline int keys_overlap(const pyxbuf_borrow_key *a, const pyxbuf_borrow_key *b) {
    return ranges_overlap(&a->range, &b->range) && items_meet(a, b);
}

/* The cold halves (registry.c): describe a conflict (`why` may be NULL: the
 * caller only wants to know), grow the table. */
int pyxbuf__registry_conflict(const tracked_borrow *t, char *why, size_t why_cap);
int pyxbuf__registry_grow(registry_state *r, char *why, size_t why_cap);

/* The first live borrow that conflicts with a request, or NULL. A shared
 * request conflicts only with exclusive borrows, so it scans only when some
 * are live (the common case: none). */
static inline const tracked_borrow *registry_find_conflict(const registry_state *r,
                                                           const pyxbuf_borrow_key *key,
                                                           int32_t exclusive) {
    if (!exclusive && r->exclusive == 0) return NULL;
    for (size_t i = 0; i < r->count; i++) {
        const tracked_borrow *t = &r->entries[i];
        if ((exclusive || t->exclusive) && keys_overlap(key, &t->key)) return t;
    }
    return NULL;
}

/* A new entry for `key` (the table has room): its token. */
static PYXBUF_ALWAYS_INLINE int64_t registry_append_locked(registry_state *r,
                                                          const pyxbuf_borrow_key *key,
                                                          int32_t exclusive) {
    int64_t token = r->next_token++;
    tracked_borrow *t = &r->entries[r->count++];
    t->token = token;
    t->key.range = key->range;
    t->key.stride_gcd = key->stride_gcd;
    if (key->stride_gcd != 0) { /* else unset, and never read (lattices_meet) */
        t->key.first = key->first;
        t->key.itemsize = key->itemsize;
    }
    t->exclusive = exclusive;
    r->exclusive += exclusive != 0;
    return token;
}

/* The live borrows are few (those of views alive right now), so a linear
 * scan beats any index. */
static inline int registry_acquire_locked(registry_state *r, const pyxbuf_borrow_key *key,
                                          int32_t exclusive, int64_t *token, char *why,
                                          size_t why_cap) {
    const tracked_borrow *conflict = registry_find_conflict(r, key, exclusive);
    if (PYXBUF_UNLIKELY(conflict != NULL)) return pyxbuf__registry_conflict(conflict, why, why_cap);
    if (PYXBUF_UNLIKELY(r->count == r->capacity)) {
        int rc = pyxbuf__registry_grow(r, why, why_cap);
        if (rc != 0) return rc;
    }
    *token = registry_append_locked(r, key, exclusive);
    return 0;
}

/* Whether a shared borrow can be appended without the full path: no
 * exclusive borrow is live (a shared request then conflicts with nothing)
 * and the table has room (else the full path grows it). */
static inline int registry_shared_room_locked(const registry_state *r) {
    return r->exclusive == 0 && r->count != r->capacity;
}

/* A shared borrow of the host bytes [lo, hi) as one item, when
 * registry_shared_room_locked: its token. */
static PYXBUF_ALWAYS_INLINE int64_t registry_append_shared_locked(registry_state *r, uint64_t lo,
                                                                 uint64_t hi) {
    int64_t token = r->next_token++;
    tracked_borrow *t = &r->entries[r->count++];
    t->token = token;
    t->key.range = (pyxbuf_borrow_range){PYXBUF_DL_CPU, 0, lo, hi};
    t->key.stride_gcd = 0; /* one item: first and itemsize unread (lattices_meet) */
    t->exclusive = 0;      /* and r->exclusive stays as it is: 0 */
    return token;
}

/* The newest borrow is the likeliest to go first: scan from the end. */
static inline void registry_release_locked(registry_state *r, int64_t token) {
    for (size_t i = r->count; i-- > 0;) {
        if (r->entries[i].token != token) continue;
        r->exclusive -= r->entries[i].exclusive != 0;
        if (i != --r->count) r->entries[i] = r->entries[r->count];
        return;
    }
}

#endif
