/* counter.c -- borrow grants (ext_flags) for producers that count
 * their views. A producer embeds a pyxbuf_borrow_counter and calls
 * pyxbuf_borrow_acquire from bf_getbuffer and pyxbuf_borrow_release from
 * bf_releasebuffer. The kind of each view is remembered in view->internal, so
 * release needs nothing but the view. (Producers that know nothing of borrows
 * get tracked grants instead: tracked.c.) */

#include "borrow/borrow.h"
#include "base/fixes.h"

#include <stdio.h>

/* What a view counts as; stored in view->internal. WRITABLE_BIT marks views
 * that were handed out writable; TRACKED_BIT a borrow granted tracked, whose
 * registry token fills the bits from TOKEN_SHIFT up (tokens count from 1 and
 * stay far below 2^55). */
#define KIND_PLAIN 1
#define KIND_SHARED 2
#define KIND_EXCLUSIVE 3
#define KIND_MASK 0x0f
#define WRITABLE_BIT 0x10
#define TRACKED_BIT 0x20
#define TOKEN_SHIFT 8

/* Free-threaded builds: two threads may run one producer's bf_getbuffer at
 * once, so a counter is changed under a lock, one of a few picked by its
 * address (the counter's layout is public and has no room for one). Refusals
 * are formatted after unlocking: formatting may run Python, which may ask
 * the same producer for a view. With the GIL the lock does not exist. */
#ifdef Py_GIL_DISABLED
#define COUNTER_LOCKS 64
static PyMutex counter_locks[COUNTER_LOCKS];

static PyMutex *counter_lock(const pyxbuf_borrow_counter *c) {
    uintptr_t p = (uintptr_t)c;
    return &counter_locks[((p >> 5) ^ (p >> 12)) & (COUNTER_LOCKS - 1)];
}
#define COUNTER_LOCK(c) PyMutex_Lock(counter_lock(c))
#define COUNTER_UNLOCK(c) PyMutex_Unlock(counter_lock(c))
#else
#define COUNTER_LOCK(c) ((void)0)
#define COUNTER_UNLOCK(c) ((void)0)
#endif

/* A conflict with the live views, decided under the lock and reported after it. */
typedef struct borrow_conflict {
    const char *asked, *why;
    const char *fix; /* the binding's phrase (fixes.h), or NULL: release the live views */
} borrow_conflict;

static int report_conflict(const pyxbuf_borrow_counter *c, const char *owner, borrow_conflict r) {
    long long views = (long long)c->views, shared = (long long)c->shared;
    if (r.fix != NULL) {
        PyErr_Format(PyExc_BufferError, "pyxbuf: cannot grant %s of %s: %s; %s", r.asked,
                     owner ? owner : "the object", r.why, r.fix);
        return -1;
    }
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant %s of %s: %s (live now: %lld %s, %lld writable, "
                 "%lld shared %s, %lld exclusive); release those views first (one may be another "
                 "argument of the same call)",
                 r.asked, owner ? owner : "the object", r.why, views,
                 PYXBUF__PLURAL(views, "view", "views"), (long long)c->writable, shared,
                 PYXBUF__PLURAL(shared, "borrow", "borrows"), (long long)c->exclusive);
    return -1;
}

static void grant(Py_buffer *view, int32_t request_bit, int32_t ext_bit) {
    /* Only extended requests carry a pyxbuf_view behind the Py_buffer. */
    pyxbuf_view *x = (pyxbuf_view *)view;
    x->flags |= request_bit;
    x->ext_flags |= ext_bit;
}

/* Each decide_* returns the kind, or 0 with *r set. A borrow the counter
 * cannot keep alone -- views it does not control are live: classic views
 * (a NumPy array or memoryview over the memory), DLPack exports, plain
 * pyxbuf views -- is granted with TRACKED_BIT: the strongest grant it can
 * keep, as pyxbuf treats NumPy's memory (tracked.c), instead of a refusal
 * the user could not act on. Conflicts between borrowers are still refused. */
static int decide_exclusive(const pyxbuf_borrow_counter *c, borrow_conflict *r) {
    r->asked = "an exclusive borrow";
    if (c->exclusive > 0) r->why = "an exclusive borrow is live";
    else if (c->shared > 0) r->why = "a shared borrow is live";
    else if (c->views > 0) return KIND_EXCLUSIVE | TRACKED_BIT; /* plain views only */
    else return KIND_EXCLUSIVE;
    return 0;
}

static int decide_shared(const pyxbuf_borrow_counter *c, Py_buffer *view, int flags,
                         borrow_conflict *r) {
    r->asked = "a shared borrow";
    if (flags & PyBUF_WRITABLE) {
        r->asked = "a writable shared borrow";
        r->why = "a shared borrow promises that nobody writes";
        r->fix = pyxbuf__fix(PYXBUF__FIX_WRITE_EXCLUSIVE);
    } else if (c->exclusive > 0) {
        r->why = "an exclusive borrow is live";
    } else {
        view->readonly = 1;
        /* Writable views handed out before any borrow (none is handed out
         * while one is live): the counter cannot stop their writes. */
        return KIND_SHARED | (c->writable > 0 ? TRACKED_BIT : 0);
    }
    return 0;
}

static int decide_plain(const pyxbuf_borrow_counter *c, Py_buffer *view, int flags,
                        borrow_conflict *r) {
    r->asked = "a view";
    if (c->exclusive > 0) {
        r->why = "an exclusive borrow is live";
        return 0;
    }
    if (c->shared > 0 && !view->readonly) {
        if (flags & PyBUF_WRITABLE) {
            r->asked = "a writable view";
            r->why = "a shared borrow is live";
            return 0;
        }
        /* Keep the shared borrow's promise: readers get read-only memory. */
        view->readonly = 1;
    }
    return KIND_PLAIN;
}

static int decide(const pyxbuf_borrow_counter *c, Py_buffer *view, int flags, borrow_conflict *r) {
    if (flags & PYXBUF_BORROW_EXCLUSIVE) return decide_exclusive(c, r);
    if (flags & PYXBUF_BORROW_SHARED) return decide_shared(c, view, flags, r);
    return decide_plain(c, view, flags, r);
}

static void count(pyxbuf_borrow_counter *c, Py_buffer *view, int kind) {
    if ((kind & KIND_MASK) == KIND_EXCLUSIVE) {
        grant(view, PYXBUF_BORROW_EXCLUSIVE, PYXBUF_EXT_EXCLUSIVE);
        c->exclusive++;
    } else if ((kind & KIND_MASK) == KIND_SHARED) {
        grant(view, PYXBUF_BORROW_SHARED, PYXBUF_EXT_SHARED);
        c->shared++;
    }
    int writable = !view->readonly;
    c->views++;
    if (writable) c->writable++;
    view->internal = (void *)(uintptr_t)(unsigned)(kind | (writable ? WRITABLE_BIT : 0));
}

static void uncount(pyxbuf_borrow_counter *c, uintptr_t tag) {
    int kind = (int)(tag & KIND_MASK);
    c->views--;
    if (tag & WRITABLE_BIT) c->writable--;
    if (kind == KIND_SHARED) c->shared--;
    if (kind == KIND_EXCLUSIVE) c->exclusive--;
}

/* A grant decided TRACKED: its borrow in the registry, where pyxbuf's
 * consumers of the foreign views (a NumPy array over the memory, a tensor of
 * a DLPack export) take theirs, so the two kinds see each other. The token
 * rides in view->internal. On a conflict the count is undone and the view
 * refused. Outside the counter's lock: the registry has its own, and a
 * refusal formats a message. */
static int track_grant(pyxbuf_borrow_counter *c, Py_buffer *view, PyObject *owner_obj) {
    pyxbuf_view *x = (pyxbuf_view *)view;
    uintptr_t tag = (uintptr_t)view->internal;
    int32_t exclusive = (tag & KIND_MASK) == KIND_EXCLUSIVE;
    int64_t token = 0;
    if (pyxbuf__tracked_register(owner_obj, x, exclusive, &token) < 0) {
        COUNTER_LOCK(c);
        uncount(c, tag);
        COUNTER_UNLOCK(c);
        view->internal = NULL;
        x->ext_flags = 0;
        x->flags &= ~(PYXBUF_BORROW_SHARED | PYXBUF_BORROW_EXCLUSIVE);
        return -1;
    }
    x->ext_flags |= PYXBUF_EXT_TRACKED;
    view->internal = (void *)(tag | ((uintptr_t)token << TOKEN_SHIFT));
    return 0;
}

int pyxbuf_borrow_acquire(pyxbuf_borrow_counter *counter, Py_buffer *view, int flags,
                          const char *owner_name) {
    if (counter == NULL || view == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_borrow_acquire: counter and view are required");
        return -1;
    }
    borrow_conflict r = {NULL, NULL, NULL};
    pyxbuf_borrow_counter seen;
    COUNTER_LOCK(counter);
    int kind = decide(counter, view, flags, &r);
    if (kind != 0) count(counter, view, kind);
    else seen = *counter;
    COUNTER_UNLOCK(counter);
    if (kind == 0) return report_conflict(&seen, owner_name, r);
    if (PYXBUF_UNLIKELY(kind & TRACKED_BIT)) {
        PyObject *obj = view->obj != NULL ? view->obj : Py_None;
        return track_grant(counter, view, obj);
    }
    return 0;
}

void pyxbuf_borrow_release(pyxbuf_borrow_counter *counter, Py_buffer *view) {
    if (counter == NULL || view == NULL) return;
    uintptr_t tag = (uintptr_t)view->internal;
    if ((tag & KIND_MASK) == 0) return; /* not counted: nothing to undo */
    if (PYXBUF_UNLIKELY(tag & TRACKED_BIT)) { /* only extended requests are tracked */
        pyxbuf__tracked_unregister((int64_t)(tag >> TOKEN_SHIFT));
        ((pyxbuf_view *)view)->ext_flags &= ~PYXBUF_EXT_TRACKED;
    }
    COUNTER_LOCK(counter);
    uncount(counter, tag);
    COUNTER_UNLOCK(counter);
    view->internal = NULL;
}

void pyxbuf__borrow_counts(const pyxbuf_borrow_counter *counter, pyxbuf_borrow_counter *out) {
    COUNTER_LOCK(counter);
    *out = *counter;
    COUNTER_UNLOCK(counter);
}
