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

int pyxbuf__tracked_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags);
/* The shared table's grant of `key`, by range alone when the table was
 * installed by a copy older than version 2. Inline: a copy that does not own
 * the registry calls it on every tracked acquisition. */
static inline int pyxbuf__shared_acquire_key(const pyxbuf_shared_api *api,
                                             const pyxbuf_borrow_key *key, int32_t exclusive,
                                             int64_t *token, char *why, size_t why_cap) {
    if (api->size >= offsetof(pyxbuf_shared_api, borrow_acquire_key) + sizeof(void *) &&
        api->borrow_acquire_key != NULL)
        return api->borrow_acquire_key(key, exclusive, token, why, why_cap);
    return api->borrow_acquire(&key->range, exclusive, token, why, why_cap);
}
void pyxbuf__tracked_release(pyxbuf_view *view);

#endif
