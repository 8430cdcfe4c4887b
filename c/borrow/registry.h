/* registry.h -- the cooperative borrow registry's table, for the two
 * files that use it: registry.c (the shared table's functions, which
 * other copies of the library call) and tracked.c (tracked grants,
 * whose hot path takes the lock and scans the table inline). */
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

/* The table (registry.c): live borrows, how many, how many are
 * exclusive, the next token, and its lock. Touched only under the lock. */
extern PYXBUF_HIDDEN tracked_borrow *pyxbuf__tracked;
extern PYXBUF_HIDDEN size_t pyxbuf__tracked_count, pyxbuf__tracked_capacity;
extern PYXBUF_HIDDEN size_t pyxbuf__tracked_exclusive; /* entries with exclusive set */
extern PYXBUF_HIDDEN int64_t pyxbuf__next_token;
extern PYXBUF_HIDDEN atomic_flag pyxbuf__tracked_lock;

/* This copy's shared table, and the one in use: own, or the one a copy
 * loaded earlier installed (NULL until pyxbuf_shared_api_get). */
extern PYXBUF_HIDDEN const pyxbuf_shared_api pyxbuf__own_shared_api;
extern PYXBUF_HIDDEN const pyxbuf_shared_api *pyxbuf__installed_shared_api;

/* The table is thread-safe (pyxbuf.h): foreign callers may come without the
 * GIL. The critical sections are a few dozen instructions, so a spin on one
 * atomic flag (uncontended: one exchange and one store) serves where a
 * pthread mutex cost ~110 instructions per lock and unlock. */
static inline void registry_lock(void) {
    while (atomic_flag_test_and_set_explicit(&pyxbuf__tracked_lock, memory_order_acquire))
        sched_yield();
}

static inline void registry_unlock(void) {
    atomic_flag_clear_explicit(&pyxbuf__tracked_lock, memory_order_release);
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
    uint64_t a_item = a->stride_gcd ? a->itemsize : a->range.hi - a->range.lo;
    uint64_t b_item = b->stride_gcd ? b->itemsize : b->range.hi - b->range.lo;
    uint64_t r = a_first >= b_first ? (a_first - b_first) % g : (g - (b_first - a_first) % g) % g;
    return r < b_item || g - r < a_item;
}

static inline int keys_overlap(const pyxbuf_borrow_key *a, const pyxbuf_borrow_key *b) {
    return ranges_overlap(&a->range, &b->range) && lattices_meet(a, b);
}

/* `why` may be NULL: the caller only wants to know (see tracked_acquire). */
/* The cold halves (registry.c): describe a conflict, grow the table. */
int pyxbuf__registry_conflict(const tracked_borrow *t, char *why, size_t why_cap);
int pyxbuf__registry_grow(char *why, size_t why_cap);

/* The first live borrow that conflicts with a request, or NULL. A shared
 * request conflicts only with exclusive borrows, so it scans only when some
 * are live (the common case: none). */
static inline const tracked_borrow *registry_find_conflict(const pyxbuf_borrow_key *key,
                                                    int32_t exclusive) {
    if (!exclusive && pyxbuf__tracked_exclusive == 0) return NULL;
    for (size_t i = 0; i < pyxbuf__tracked_count; i++) {
        const tracked_borrow *t = &pyxbuf__tracked[i];
        if ((exclusive || t->exclusive) && keys_overlap(key, &t->key)) return t;
    }
    return NULL;
}

/* The live borrows are few (those of views alive right now), so a linear
 * scan beats any index. */
static inline int registry_acquire_locked(const pyxbuf_borrow_key *key, int32_t exclusive,
                                          int64_t *token, char *why, size_t why_cap) {
    const tracked_borrow *conflict = registry_find_conflict(key, exclusive);
    if (PYXBUF_UNLIKELY(conflict != NULL)) return pyxbuf__registry_conflict(conflict, why, why_cap);
    if (PYXBUF_UNLIKELY(pyxbuf__tracked_count == pyxbuf__tracked_capacity)) {
        int rc = pyxbuf__registry_grow(why, why_cap);
        if (rc != 0) return rc;
    }
    *token = pyxbuf__next_token++;
    tracked_borrow *t = &pyxbuf__tracked[pyxbuf__tracked_count++];
    t->token = *token;
    t->key.range = key->range;
    t->key.stride_gcd = key->stride_gcd;
    if (key->stride_gcd != 0) { /* else unset, and never read (lattices_meet) */
        t->key.first = key->first;
        t->key.itemsize = key->itemsize;
    }
    t->exclusive = exclusive;
    pyxbuf__tracked_exclusive += exclusive != 0;
    return 0;
}

/* The newest borrow is the likeliest to go first: scan from the end. */
static inline void registry_release_locked(int64_t token) {
    for (size_t i = pyxbuf__tracked_count; i-- > 0;) {
        if (pyxbuf__tracked[i].token != token) continue;
        pyxbuf__tracked_exclusive -= pyxbuf__tracked[i].exclusive != 0;
        if (i != --pyxbuf__tracked_count)
            pyxbuf__tracked[i] = pyxbuf__tracked[pyxbuf__tracked_count];
        return;
    }
}

#endif
