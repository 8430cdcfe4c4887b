/* tracked_fast.h -- the common tracked grant and its release, inline: a
 * shared borrow of host memory in one C-order run (what memoryview, bytes,
 * array.array and contiguous arrays hand out), in a registry this copy works
 * on inline. tracked.c's entry points start with them, and the acquire
 * layer's fast paths (acquire.c) inline them where the producer's answer is
 * still in registers, so the common grant makes no call at all. Everything
 * else (exclusive requests, strided views, a busy lock, a live exclusive
 * borrow, rust-numpy's own table, a foreign registry) answers 0 here and
 * takes tracked.c's full path, which decides and says why. */
#ifndef PYXBUF_BORROW_TRACKED_FAST_H
#define PYXBUF_BORROW_TRACKED_FAST_H

#include "borrow/registry.h"

/* Whether a host view is one C-order run of items, its bytes [buf, buf + len)
 * (`host_known`: the caller knows the view is host memory, a classic
 * producer's, whose device field the producer cannot set):
 * 0-d or 1-D with unit strides without a walk, more dimensions through the
 * walk; else 0 (the full key, tracked.c). A 1-D view's len must equal its
 * extent times itemsize: the classic path does not check it, and a key over
 * a shorter len would leave items out. */
static PYXBUF_ALWAYS_INLINE int pyxbuf__simple_run(const pyxbuf_view *view, int host_known) {
    const Py_buffer *b = &view->base;
    if ((!host_known && view->device != NULL) || b->suboffsets != NULL) return 0;
    if ((unsigned)b->ndim > 1) return pyxbuf__fills_c_order(b);
    if (b->ndim == 0 || b->shape == NULL) return b->ndim == 0 || b->strides == NULL;
    Py_ssize_t bytes;
    return (b->strides == NULL || b->strides[0] == b->itemsize || b->shape[0] <= 1) &&
           b->shape[0] >= 0 && PYXBUF__MUL_OK(b->shape[0], b->itemsize, &bytes) &&
           bytes == b->len;
}

/* Whether a tracked borrow of this view must also be taken in rust-numpy's
 * own table: NumPy's capsule is not pyxbuf's and the object may be an
 * ndarray (rust_numpy.c decides). */
static PYXBUF_ALWAYS_INLINE int pyxbuf__may_ask_rust_numpy(const pyxbuf_view *view) {
    return !PYXBUF__FT_LOAD_RELAXED(&pyxbuf__rust_numpy_table_is_ours) &&
           view->base.obj != NULL && !pyxbuf__rust_numpy_known_other(view->base.obj);
}

/* The view's fields once its tracked borrow `token` is held, and back
 * (borrow_token is read only while TRACKED is set, which only mark_tracked,
 * with a new token, or a native producer's grant after reset_view, token 0,
 * sets: unmarking leaves it stale). */
static PYXBUF_ALWAYS_INLINE void pyxbuf__mark_tracked(pyxbuf_view *view, int64_t token,
                                                     int32_t exclusive) {
    view->borrow_token = token;
    view->ext_flags |= PYXBUF_EXT_TRACKED | (exclusive ? PYXBUF_EXT_EXCLUSIVE : PYXBUF_EXT_SHARED);
    view->flags |= exclusive ? PYXBUF_BORROW_EXCLUSIVE : PYXBUF_BORROW_SHARED;
    if (!exclusive) view->base.readonly = 1; /* the holder of a shared borrow reads only */
}

static PYXBUF_ALWAYS_INLINE void pyxbuf__unmark_tracked(pyxbuf_view *view) {
    view->ext_flags &= ~PYXBUF_EXT_TRACKED;
}

/* The common grant, for a request whose borrow bits (with PyBUF_WRITABLE)
 * are exactly PYXBUF_BORROW_SHARED: 1 when granted and the view marked; 0
 * when the full path must decide (nothing done). No call, so the caller
 * saves no registers for it; a busy lock is left to the full path's wait. */
static PYXBUF_ALWAYS_INLINE int pyxbuf__tracked_shared_fast(pyxbuf_view *view, int host_known) {
    registry_state *r = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__inline_registry);
    if (PYXBUF_UNLIKELY(r == NULL) || !pyxbuf__simple_run(view, host_known) ||
        PYXBUF_UNLIKELY(pyxbuf__may_ask_rust_numpy(view)) || PYXBUF_UNLIKELY(!registry_try_lock(r)))
        return 0;
    if (PYXBUF_UNLIKELY(!registry_shared_room_locked(r))) {
        registry_unlock(r);
        return 0;
    }
    uint64_t buf = (uint64_t)(uintptr_t)view->base.buf;
    int64_t token = registry_append_shared_locked(r, buf, buf + (uint64_t)view->base.len);
    registry_unlock(r);
    view->reserved[0] = 0; /* no rust-numpy borrow */
    pyxbuf__mark_tracked(view, token, 0);
    return 1;
}

/* The common release: a registry entry and no rust-numpy borrow, in a
 * registry this copy works on inline, its lock free. 1 when done (the view
 * unmarked); 0 when the full path must release (nothing done). */
static PYXBUF_ALWAYS_INLINE int pyxbuf__tracked_release_fast(pyxbuf_view *view) {
    registry_state *r = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__inline_registry);
    int64_t token = view->borrow_token;
    if (PYXBUF_UNLIKELY(r == NULL || view->reserved[0] != 0 || token == 0) ||
        PYXBUF_UNLIKELY(!registry_try_lock(r)))
        return 0;
    /* The newest entry, shared, is the likeliest (views die in the order
     * they were taken); any other through the scan. */
    size_t n = r->count;
    if (PYXBUF_LIKELY(n != 0 && r->entries[n - 1].token == token && !r->entries[n - 1].exclusive))
        r->count = n - 1;
    else
        registry_release_locked(r, token);
    registry_unlock(r);
    pyxbuf__unmark_tracked(view);
    return 1;
}

#endif
