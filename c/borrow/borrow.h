/* borrow.h -- the borrow layer's private interface: producers' counters,
 * tracked grants in the process-wide registry, rust-numpy's borrow table. */
#ifndef PYXBUF_BORROW_BORROW_H
#define PYXBUF_BORROW_BORROW_H

#include "device/device.h"

#include <stddef.h>

/* A consistent copy of a counter another thread may be changing (counter.c). */
void pyxbuf__borrow_counts(const pyxbuf_borrow_counter *counter, pyxbuf_borrow_counter *out);

/* The cooperative borrow registry (registry.c, tracked.c) for views whose producer knows
 * nothing of borrows: grants PYXBUF_EXT_TRACKED with SHARED or EXCLUSIVE, or
 * refuses with BufferError when another pyxbuf consumer (in any copy of the
 * library) holds a conflicting borrow of overlapping memory. */
/* rust_numpy.c: a tracked borrow of an ndarray also taken in rust-numpy's
 * borrow checker (or rust-numpy's taken in pyxbuf's registry). The kind held
 * is kept in view->reserved[0], part of pyxbuf's bookkeeping. */
#define PYXBUF__RUST_NUMPY_SHARED 1
#define PYXBUF__RUST_NUMPY_EXCLUSIVE 2
int pyxbuf__rust_numpy_acquire(pyxbuf_view *view, int32_t exclusive);
/* 1 once rust_numpy.c found that NumPy's borrow table is pyxbuf's own (any
 * copy's): tracked borrows then need no call into rust_numpy.c. */
extern PYXBUF_HIDDEN int pyxbuf__rust_numpy_table_is_ours;
void pyxbuf__rust_numpy_release(pyxbuf_view *view);
/* The last type rust_numpy.c found not to be an ndarray, by (type, version
 * tag): a tag is never reused, so a new type at a dead one's address cannot
 * match, nor can a type and a tag written by two threads (each tag belongs to
 * one type). Read inline so that a tracked borrow of, say, a memoryview
 * makes no call to learn it needs no rust-numpy borrow. */
extern PYXBUF_HIDDEN PyTypeObject *pyxbuf__rust_numpy_other_type;
extern PYXBUF_HIDDEN unsigned int pyxbuf__rust_numpy_other_tag;
static inline int pyxbuf__rust_numpy_known_other(PyObject *obj) {
    PyTypeObject *tp = Py_TYPE(obj);
    unsigned int tag = PYXBUF__FT_LOAD_RELAXED(&pyxbuf__rust_numpy_other_tag);
    return tp == PYXBUF__FT_LOAD_RELAXED(&pyxbuf__rust_numpy_other_type) && tag != 0 &&
           pyxbuf__type_tag(tp) == tag;
}

/* Borrow lattices (pyxbuf_borrow_key): gcd(0, x) = x. */
static inline uint64_t pyxbuf__gcd(uint64_t a, uint64_t b) {
    while (b != 0) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}
static inline uint64_t pyxbuf__magnitude(Py_ssize_t x) {
    return x < 0 ? 0u - (uint64_t)x : (uint64_t)x;
}

/* Bit 63 of a key's itemsize (shared table version 3): the key is dense,
 * every point of its lattice within its range is an item -- a 1-D view, or
 * one whose dimensions chain (each |stride| the next smaller one's times its
 * length: rows of a strided C array, a channel of an HWC image). Two dense
 * keys whose spacings divide one another are decided exactly (registry.h).
 * A table older than version 3 gets keys without it (a huge itemsize there
 * would only refuse more). */
#define PYXBUF__KEY_DENSE (UINT64_C(1) << 63)

/* The lattice of a layout's items: the gcd of the magnitudes of its strides
 * over dimensions of more than one item (0: one item, or none), and whether
 * it is dense (above). Dimensions of stride 0 repeat items and add none. */
static inline uint64_t pyxbuf__lattice_of(int ndim, const Py_ssize_t *shape,
                                          const Py_ssize_t *strides, int *dense) {
    uint64_t g = 0, steps[PYXBUF_MAX_NDIM], counts[PYXBUF_MAX_NDIM];
    int n = 0;
    for (int i = 0; i < ndim && i < PYXBUF_MAX_NDIM; i++) {
        if (shape[i] <= 1 || strides[i] == 0) continue;
        uint64_t step = pyxbuf__magnitude(strides[i]), count = (uint64_t)shape[i];
        g = pyxbuf__gcd(g, step);
        int k = n++;
        for (; k > 0 && steps[k - 1] > step; k--) { /* insertion, by step */
            steps[k] = steps[k - 1];
            counts[k] = counts[k - 1];
        }
        steps[k] = step;
        counts[k] = count;
    }
    *dense = 1;
    for (int k = 1; k < n && *dense; k++) /* no wrap: the span was checked */
        *dense = steps[k] == steps[k - 1] * counts[k - 1];
    return g;
}

int pyxbuf__tracked_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags);
/* The shared table's grant of `key`, by range alone when the table was
 * installed by a copy older than version 2. Inline: a copy that does not own
 * the registry calls it on every tracked acquisition. */
static inline int pyxbuf__shared_acquire_key(const pyxbuf_shared_api *api,
                                             const pyxbuf_borrow_key *key, int32_t exclusive,
                                             int64_t *token, char *why, size_t why_cap) {
    if (api->size >= offsetof(pyxbuf_shared_api, borrow_acquire_key) + sizeof(void *) &&
        api->borrow_acquire_key != NULL) {
        if (PYXBUF_UNLIKELY(api->version < 3 && (key->itemsize & PYXBUF__KEY_DENSE))) {
            pyxbuf_borrow_key plain = *key; /* an older table: no dense bit */
            plain.itemsize &= ~PYXBUF__KEY_DENSE;
            return api->borrow_acquire_key(&plain, exclusive, token, why, why_cap);
        }
        return api->borrow_acquire_key(key, exclusive, token, why, why_cap);
    }
    return api->borrow_acquire(&key->range, exclusive, token, why, why_cap);
}
void pyxbuf__tracked_release(pyxbuf_view *view);
/* A tracked borrow of `view`'s memory in the registry, for a producer that
 * enforces borrows but cannot keep its promise alone (counter.c: views it
 * does not control are live): 0 and *token, or -1 with BufferError naming the
 * conflicting borrow. Undone by pyxbuf__tracked_unregister (token 0: none). */
int pyxbuf__tracked_register(PyObject *obj, const pyxbuf_view *view, int32_t exclusive,
                             int64_t *token);
void pyxbuf__tracked_unregister(int64_t token);

#endif
