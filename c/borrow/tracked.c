/* tracked.c -- tracked grants (PYXBUF_EXT_TRACKED): the borrows
 * pyxbuf_get takes in the cooperative registry for producers that know
 * nothing of borrows, keyed by the view's device, span and lattice, and
 * mirrored in rust-numpy's borrow checker for NumPy arrays. */

#include "borrow/tracked_fast.h"
#include "base/fixes.h"

#include <stdio.h>

static PYXBUF_COLD int refuse_writable_shared(PyObject *obj) {
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant a writable shared borrow of '%.200s': a shared borrow "
                 "promises that nobody writes; %s",
                 PYXBUF__TYPE_NAME(obj), pyxbuf__fix(PYXBUF__FIX_WRITE_EXCLUSIVE));
    return -1;
}

static PYXBUF_COLD int refuse_tracked(PyObject *obj, int32_t exclusive,
                                      const pyxbuf_borrow_key *key, const char *why) {
    const pyxbuf_borrow_range *range = &key->range;
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant %s borrow of '%.200s': its memory [%p, %p) overlaps %s "
                 "held by another view in this process (for example another argument of the "
                 "same call, or a view held by any copy of pyxbuf); release that view first, "
                 "or pass a copy of the array",
                 exclusive ? "an exclusive" : "a shared", PYXBUF__TYPE_NAME(obj),
                 (void *)(uintptr_t)range->lo, (void *)(uintptr_t)range->hi, why);
    return -1;
}

static PYXBUF_COLD int refuse_span(PyObject *obj) {
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot track a borrow of '%.200s': its shape and strides overflow",
                 PYXBUF__TYPE_NAME(obj));
    return -1;
}

/* A view with suboffsets reaches its items through pointers: its span covers
 * the pointer table, not the items, so a key over it would let a conflicting
 * borrow of the items through. */
static PYXBUF_COLD int refuse_suboffsets(PyObject *obj, int32_t exclusive) {
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant %s borrow of '%.200s': its view has suboffsets "
                 "(PIL-style pointers to its items), and pyxbuf's registry tracks a borrow by "
                 "the bytes its items span, which such a view does not tell; %s, or pass a "
                 "contiguous copy",
                 exclusive ? "an exclusive" : "a shared", PYXBUF__TYPE_NAME(obj),
                 pyxbuf__fix(PYXBUF__FIX_WITHOUT_BORROW));
    return -1;
}

/* Whether a view with suboffsets dereferences any (a negative suboffset
 * means none for that dimension: its items are in place). */
static PYXBUF_NOINLINE int follows_pointers(const Py_buffer *b) {
    for (int i = 0; i < b->ndim; i++)
        if (b->suboffsets[i] >= 0) return 1;
    return 0;
}

/* The lattice of a view whose items do not fill [0, len) in C order
 * (pyxbuf__lattice_of), with the dense bit in *dense_bit. A view without
 * strides, or with suboffsets (all negative here: in place), counts as every
 * byte of its range (0). */
static PYXBUF_NOINLINE uint64_t strided_lattice(const Py_buffer *b, uint64_t *dense_bit) {
    *dense_bit = 0;
    if (b->itemsize <= 0 || b->suboffsets != NULL || b->shape == NULL || b->strides == NULL)
        return 0;
    int dense = 0;
    uint64_t g = pyxbuf__lattice_of(b->ndim, b->shape, b->strides, &dense);
    *dense_bit = dense ? PYXBUF__KEY_DENSE : 0;
    return g;
}

/* What a tracked borrow covers: the view's device, byte span and lattice. */
static PYXBUF_ALWAYS_INLINE int tracked_key(PyObject *obj, const pyxbuf_view *view,
                                            pyxbuf_borrow_key *key) {
    const Py_buffer *b = &view->base;
    pyxbuf_device device = {PYXBUF_DL_CPU, 0};
    if (PYXBUF_UNLIKELY(view->device != NULL)) pyxbuf_view_device(view, &device, NULL);
    key->range.device_type = device.device_type;
    key->range.device_id = device.device_id;
    uint64_t buf = (uint64_t)(uintptr_t)b->buf;
    if (PYXBUF_LIKELY(pyxbuf__fills_c_order(b))) {
        /* Every byte of the range: one item as far as conflicts go, whose
         * first byte and length the range gives (lattices_meet). */
        key->range.lo = buf;
        key->range.hi = buf + (uint64_t)b->len;
        key->stride_gcd = 0;
        return 0;
    }
    Py_ssize_t lo = 0, hi = 0;
    if (PYXBUF_UNLIKELY(pyxbuf__view_span_walk(b, &lo, &hi) < 0)) return refuse_span(obj);
    key->range.lo = buf + (uint64_t)lo;
    key->range.hi = buf + (uint64_t)hi;
    uint64_t dense = 0;
    key->stride_gcd = strided_lattice(b, &dense);
    key->first = buf;
    key->itemsize = (b->itemsize > 0 ? (uint64_t)b->itemsize : 1) | dense;
    return 0;
}

/* Through the installed table (another copy's, or this one's on a conflict):
 * the grant with the registry's reason when it refuses. */
static PYXBUF_COLD int tracked_grant_slow(PyObject *obj, const pyxbuf_borrow_key *key,
                                          int32_t exclusive, int64_t *token) {
    const pyxbuf_shared_api *api = pyxbuf_shared_api_get();
    if (api == NULL) return -1;
    char why[256];
    if (PYXBUF_UNLIKELY(pyxbuf__shared_acquire_key(api, key, exclusive, token, why, sizeof why) !=
                        0))
        return refuse_tracked(obj, exclusive, key, why);
    return 0;
}

/* The registry's grant: inline when this copy can work on the registry in
 * use (its own, or the installer's of the same layout: most extensions'
 * case), with no call and no message buffer; else one call through the
 * table another copy installed, with a one-byte message buffer. Only a
 * refusal, rare, goes the slow way for its reason. */
static PYXBUF_ALWAYS_INLINE int tracked_grant(PyObject *obj, const pyxbuf_borrow_key *key,
                                             int32_t exclusive, int64_t *token) {
    registry_state *r = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__inline_registry);
    if (PYXBUF_LIKELY(r != NULL)) {
        registry_lock(r);
        int rc = registry_acquire_locked(r, key, exclusive, token, NULL, 0);
        registry_unlock(r);
        if (PYXBUF_LIKELY(rc == 0)) return 0;
    } else {
        const pyxbuf_shared_api *installed = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__installed_shared_api);
        char brief[1]; /* a writer bounded by why_cap leaves it alone or truncates */
        if (installed != NULL && pyxbuf__shared_acquire_key(installed, key, exclusive, token, brief,
                                                            sizeof brief) == 0)
            return 0;
    }
    return tracked_grant_slow(obj, key, exclusive, token);
}

static inline void tracked_ungrant(int64_t token) {
    registry_state *r = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__inline_registry);
    if (PYXBUF_LIKELY(r != NULL)) {
        registry_lock(r);
        registry_release_locked(r, token);
        registry_unlock(r);
        return;
    }
    const pyxbuf_shared_api *api = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__installed_shared_api);
    if (api != NULL) api->borrow_release(token);
}

int pyxbuf__tracked_register(PyObject *obj, const pyxbuf_view *view, int32_t exclusive,
                             int64_t *token) {
    pyxbuf_borrow_key key;
    if (PYXBUF_UNLIKELY(tracked_key(obj, view, &key) < 0)) return -1;
    return tracked_grant(obj, &key, exclusive, token);
}

void pyxbuf__tracked_unregister(int64_t token) {
    if (token != 0) tracked_ungrant(token);
}

/* Everything but tracked_acquire's common case (below). */
static PYXBUF_NOINLINE int tracked_acquire_slow(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    int32_t exclusive = (flags & PYXBUF_BORROW_EXCLUSIVE) != 0;
    if (PYXBUF_UNLIKELY(!exclusive && (flags & PyBUF_WRITABLE))) return refuse_writable_shared(obj);
    if (PYXBUF_UNLIKELY(view->base.suboffsets != NULL) && follows_pointers(&view->base))
        return refuse_suboffsets(obj, exclusive);
    pyxbuf_borrow_key key;
    if (PYXBUF_UNLIKELY(tracked_key(obj, view, &key) < 0)) return -1;
    int64_t token = 0;
    if (PYXBUF_UNLIKELY(tracked_grant(obj, &key, exclusive, &token) < 0)) return -1;
    view->reserved[0] = 0;
    if (PYXBUF_UNLIKELY(pyxbuf__may_ask_rust_numpy(view)) &&
        pyxbuf__rust_numpy_acquire(view, exclusive) < 0) {
        tracked_ungrant(token);
        return -1;
    }
    pyxbuf__mark_tracked(view, token, exclusive);
    return 0;
}

/* The common case (tracked_fast.h) without a call, the rest out of line;
 * refusals say why from there. */
int pyxbuf__tracked_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    if (PYXBUF_LIKELY((flags & (PYXBUF_BORROW_EXCLUSIVE | PyBUF_WRITABLE)) == 0) &&
        pyxbuf__tracked_shared_fast(view, 0))
        return 0;
    return tracked_acquire_slow(obj, view, flags);
}

static PYXBUF_NOINLINE void tracked_release_slow(pyxbuf_view *view) {
    if (PYXBUF_LIKELY(view->borrow_token != 0)) tracked_ungrant(view->borrow_token);
    if (PYXBUF_UNLIKELY(view->reserved[0] != 0)) pyxbuf__rust_numpy_release(view);
    pyxbuf__unmark_tracked(view);
}

/* As tracked_acquire: the common case without a call, the rest out of line. */
void pyxbuf__tracked_release(pyxbuf_view *view) {
    if (PYXBUF_LIKELY(pyxbuf__tracked_release_fast(view))) return;
    tracked_release_slow(view);
}
