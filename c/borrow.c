/* borrow.c -- borrow grants (ext_flags) for producers that count their views.
 *
 * A producer embeds a pyxbuf_borrow_counter and calls pyxbuf_borrow_acquire
 * from bf_getbuffer and pyxbuf_borrow_release from bf_releasebuffer. The kind
 * of each view is remembered in view->internal, so release needs nothing but
 * the view. (The process-wide registry for producers that know nothing of
 * borrows, PYXBUF_EXT_TRACKED, comes with the bridges.) */

#include "internal.h"

#include <stdio.h>

/* What a view counts as; stored in view->internal. WRITABLE_BIT marks views
 * that were handed out writable. */
#define KIND_PLAIN 1
#define KIND_SHARED 2
#define KIND_EXCLUSIVE 3
#define KIND_MASK 0x0f
#define WRITABLE_BIT 0x10

static int refuse(const pyxbuf_borrow_counter *c, const char *owner, const char *asked,
                  const char *why) {
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant %s of %s: %s (live now: %lld view(s), %lld writable, "
                 "%lld shared borrow(s), %lld exclusive); release those views first",
                 asked, owner ? owner : "the object", why, (long long)c->views,
                 (long long)c->writable, (long long)c->shared, (long long)c->exclusive);
    return -1;
}

static void grant(Py_buffer *view, int32_t request_bit, int32_t ext_bit) {
    /* Only extended requests carry a pyxbuf_view behind the Py_buffer. */
    pyxbuf_view *x = (pyxbuf_view *)view;
    x->flags |= request_bit;
    x->ext_flags |= ext_bit;
}

static int decide_exclusive(const pyxbuf_borrow_counter *c, const char *owner) {
    if (c->exclusive > 0)
        return refuse(c, owner, "an exclusive borrow", "an exclusive borrow is live");
    if (c->views > 0) return refuse(c, owner, "an exclusive borrow", "other views are live");
    return KIND_EXCLUSIVE;
}

static int decide_shared(pyxbuf_borrow_counter *c, Py_buffer *view, int flags,
                         const char *owner) {
    if (flags & PyBUF_WRITABLE)
        return refuse(c, owner, "a writable shared borrow",
                      "a shared borrow promises that nobody writes; ask for "
                      "PYXBUF_BORROW_EXCLUSIVE to write");
    if (c->exclusive > 0) return refuse(c, owner, "a shared borrow", "an exclusive borrow is live");
    if (c->writable > 0) return refuse(c, owner, "a shared borrow", "a writable view is live");
    view->readonly = 1;
    return KIND_SHARED;
}

static int decide_plain(pyxbuf_borrow_counter *c, Py_buffer *view, int flags,
                        const char *owner) {
    if (c->exclusive > 0) return refuse(c, owner, "a view", "an exclusive borrow is live");
    if (c->shared > 0 && !view->readonly) {
        if (flags & PyBUF_WRITABLE)
            return refuse(c, owner, "a writable view", "a shared borrow is live");
        /* Keep the shared borrow's promise: readers get read-only memory. */
        view->readonly = 1;
    }
    return KIND_PLAIN;
}

int pyxbuf_borrow_acquire(pyxbuf_borrow_counter *counter, Py_buffer *view, int flags,
                          const char *owner_name) {
    if (counter == NULL || view == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_borrow_acquire: counter and view are required");
        return -1;
    }
    int kind;
    if (flags & PYXBUF_BORROW_EXCLUSIVE)
        kind = decide_exclusive(counter, owner_name);
    else if (flags & PYXBUF_BORROW_SHARED)
        kind = decide_shared(counter, view, flags, owner_name);
    else
        kind = decide_plain(counter, view, flags, owner_name);
    if (kind < 0) return -1;

    if (kind == KIND_EXCLUSIVE) {
        grant(view, PYXBUF_BORROW_EXCLUSIVE, PYXBUF_EXT_EXCLUSIVE);
        counter->exclusive++;
    } else if (kind == KIND_SHARED) {
        grant(view, PYXBUF_BORROW_SHARED, PYXBUF_EXT_SHARED);
        counter->shared++;
    }
    int writable = !view->readonly;
    counter->views++;
    if (writable) counter->writable++;
    view->internal = (void *)(uintptr_t)(unsigned)(kind | (writable ? WRITABLE_BIT : 0));
    return 0;
}

void pyxbuf_borrow_release(pyxbuf_borrow_counter *counter, Py_buffer *view) {
    if (counter == NULL || view == NULL) return;
    uintptr_t tag = (uintptr_t)view->internal;
    int kind = (int)(tag & KIND_MASK);
    if (kind == 0) return; /* not counted: nothing to undo */
    counter->views--;
    if (tag & WRITABLE_BIT) counter->writable--;
    if (kind == KIND_SHARED) counter->shared--;
    if (kind == KIND_EXCLUSIVE) counter->exclusive--;
    view->internal = NULL;
}
