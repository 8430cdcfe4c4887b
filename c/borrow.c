/* borrow.c -- borrow grants (ext_flags) for producers that count their views.
 *
 * A producer embeds a pyxbuf_borrow_counter and calls pyxbuf_borrow_acquire
 * from bf_getbuffer and pyxbuf_borrow_release from bf_releasebuffer. The kind
 * of each view is remembered in view->internal, so release needs nothing but
 * the view. Producers that know nothing of borrows get pyxbuf's cooperative
 * registry instead (PYXBUF_EXT_TRACKED), shared by every copy of the library
 * through the capsule table of pyxbuf_shared_api_get. */

#include "internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* What a view counts as; stored in view->internal. WRITABLE_BIT marks views
 * that were handed out writable. */
#define KIND_PLAIN 1
#define KIND_SHARED 2
#define KIND_EXCLUSIVE 3
#define KIND_MASK 0x0f
#define WRITABLE_BIT 0x10

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

/* A refusal, decided under the lock and reported after it. */
typedef struct refusal {
    const char *asked, *why;
} refusal;

static int refuse(const pyxbuf_borrow_counter *c, const char *owner, refusal r) {
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant %s of %s: %s (live now: %lld view(s), %lld writable, "
                 "%lld shared borrow(s), %lld exclusive); release those views first",
                 r.asked, owner ? owner : "the object", r.why, (long long)c->views,
                 (long long)c->writable, (long long)c->shared, (long long)c->exclusive);
    return -1;
}

static void grant(Py_buffer *view, int32_t request_bit, int32_t ext_bit) {
    /* Only extended requests carry a pyxbuf_view behind the Py_buffer. */
    pyxbuf_view *x = (pyxbuf_view *)view;
    x->flags |= request_bit;
    x->ext_flags |= ext_bit;
}

/* Each decide_* returns the kind, or 0 with *r set. */
static int decide_exclusive(const pyxbuf_borrow_counter *c, refusal *r) {
    r->asked = "an exclusive borrow";
    if (c->exclusive > 0) r->why = "an exclusive borrow is live";
    else if (c->views > 0) r->why = "other views are live";
    else return KIND_EXCLUSIVE;
    return 0;
}

static int decide_shared(const pyxbuf_borrow_counter *c, Py_buffer *view, int flags,
                         refusal *r) {
    r->asked = "a shared borrow";
    if (flags & PyBUF_WRITABLE) {
        r->asked = "a writable shared borrow";
        r->why = "a shared borrow promises that nobody writes; ask for "
                 "PYXBUF_BORROW_EXCLUSIVE to write";
    } else if (c->exclusive > 0) {
        r->why = "an exclusive borrow is live";
    } else if (c->writable > 0) {
        r->why = "a writable view is live";
    } else {
        view->readonly = 1;
        return KIND_SHARED;
    }
    return 0;
}

static int decide_plain(const pyxbuf_borrow_counter *c, Py_buffer *view, int flags,
                        refusal *r) {
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

static int decide(const pyxbuf_borrow_counter *c, Py_buffer *view, int flags, refusal *r) {
    if (flags & PYXBUF_BORROW_EXCLUSIVE) return decide_exclusive(c, r);
    if (flags & PYXBUF_BORROW_SHARED) return decide_shared(c, view, flags, r);
    return decide_plain(c, view, flags, r);
}

static void count(pyxbuf_borrow_counter *c, Py_buffer *view, int kind) {
    if (kind == KIND_EXCLUSIVE) {
        grant(view, PYXBUF_BORROW_EXCLUSIVE, PYXBUF_EXT_EXCLUSIVE);
        c->exclusive++;
    } else if (kind == KIND_SHARED) {
        grant(view, PYXBUF_BORROW_SHARED, PYXBUF_EXT_SHARED);
        c->shared++;
    }
    int writable = !view->readonly;
    c->views++;
    if (writable) c->writable++;
    view->internal = (void *)(uintptr_t)(unsigned)(kind | (writable ? WRITABLE_BIT : 0));
}

int pyxbuf_borrow_acquire(pyxbuf_borrow_counter *counter, Py_buffer *view, int flags,
                          const char *owner_name) {
    if (counter == NULL || view == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_borrow_acquire: counter and view are required");
        return -1;
    }
    refusal r;
    pyxbuf_borrow_counter seen;
    COUNTER_LOCK(counter);
    int kind = decide(counter, view, flags, &r);
    if (kind != 0) count(counter, view, kind);
    else seen = *counter;
    COUNTER_UNLOCK(counter);
    return kind != 0 ? 0 : refuse(&seen, owner_name, r);
}

void pyxbuf_borrow_release(pyxbuf_borrow_counter *counter, Py_buffer *view) {
    if (counter == NULL || view == NULL) return;
    uintptr_t tag = (uintptr_t)view->internal;
    int kind = (int)(tag & KIND_MASK);
    if (kind == 0) return; /* not counted: nothing to undo */
    COUNTER_LOCK(counter);
    counter->views--;
    if (tag & WRITABLE_BIT) counter->writable--;
    if (kind == KIND_SHARED) counter->shared--;
    if (kind == KIND_EXCLUSIVE) counter->exclusive--;
    COUNTER_UNLOCK(counter);
    view->internal = NULL;
}

void pyxbuf__borrow_counts(const pyxbuf_borrow_counter *counter, pyxbuf_borrow_counter *out) {
    COUNTER_LOCK(counter);
    *out = *counter;
    COUNTER_UNLOCK(counter);
}

/* ------------------------------------------------------------------------- */
/* The cooperative registry, shared by every copy of libpyxbuf               */
/* ------------------------------------------------------------------------- */

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

static tracked_borrow *tracked = NULL;
static size_t tracked_count = 0, tracked_capacity = 0;
static size_t tracked_exclusive = 0; /* entries with exclusive set */
static int64_t next_token = 1;

/* The table is thread-safe (pyxbuf.h): foreign callers may come without the
 * GIL. The critical sections are a few dozen instructions, so a spin on one
 * atomic flag (uncontended: one exchange and one store) serves where a
 * pthread mutex cost ~110 instructions per lock and unlock. */
static atomic_flag tracked_lock = ATOMIC_FLAG_INIT;

static void registry_lock(void) {
    while (atomic_flag_test_and_set_explicit(&tracked_lock, memory_order_acquire)) sched_yield();
}

static void registry_unlock(void) { atomic_flag_clear_explicit(&tracked_lock, memory_order_release); }

static int ranges_overlap(const pyxbuf_borrow_range *a, const pyxbuf_borrow_range *b) {
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
static int lattices_meet(const pyxbuf_borrow_key *a, const pyxbuf_borrow_key *b) {
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

static int keys_overlap(const pyxbuf_borrow_key *a, const pyxbuf_borrow_key *b) {
    return ranges_overlap(&a->range, &b->range) && lattices_meet(a, b);
}

/* A version-1 range: one item covering all of it. */
static pyxbuf_borrow_key key_of_range(const pyxbuf_borrow_range *range) {
    pyxbuf_borrow_key key = {*range, range->lo, 0, range->hi - range->lo};
    return key;
}

/* `why` may be NULL: the caller only wants to know (see tracked_acquire). */
static PYXBUF_COLD int registry_conflict(const tracked_borrow *t, char *why, size_t why_cap) {
    if (why != NULL)
        snprintf(why, why_cap, "%s borrow of [0x%llx, 0x%llx) (items of %llu bytes every %llu)",
                 t->exclusive ? "an exclusive" : "a shared", (unsigned long long)t->key.range.lo,
                 (unsigned long long)t->key.range.hi, (unsigned long long)t->key.itemsize,
                 (unsigned long long)t->key.stride_gcd);
    return PYXBUF_EBORROW;
}

static PYXBUF_COLD int registry_grow(char *why, size_t why_cap) {
    size_t cap = tracked_capacity ? 2 * tracked_capacity : 16;
    tracked_borrow *grown = realloc(tracked, cap * sizeof *grown);
    if (grown == NULL) {
        if (why != NULL) snprintf(why, why_cap, "out of memory in the borrow registry");
        return PYXBUF_ENOMEM;
    }
    tracked = grown;
    tracked_capacity = cap;
    return 0;
}

/* The first live borrow that conflicts with a request, or NULL. A shared
 * request conflicts only with exclusive borrows, so it scans only when some
 * are live (the common case: none). */
static const tracked_borrow *registry_find_conflict(const pyxbuf_borrow_key *key,
                                                    int32_t exclusive) {
    if (!exclusive && tracked_exclusive == 0) return NULL;
    for (size_t i = 0; i < tracked_count; i++) {
        const tracked_borrow *t = &tracked[i];
        if ((exclusive || t->exclusive) && keys_overlap(key, &t->key)) return t;
    }
    return NULL;
}

/* The live borrows are few (those of views alive right now), so a linear
 * scan beats any index. */
static inline int registry_acquire_locked(const pyxbuf_borrow_key *key, int32_t exclusive,
                                          int64_t *token, char *why, size_t why_cap) {
    const tracked_borrow *conflict = registry_find_conflict(key, exclusive);
    if (PYXBUF_UNLIKELY(conflict != NULL)) return registry_conflict(conflict, why, why_cap);
    if (PYXBUF_UNLIKELY(tracked_count == tracked_capacity)) {
        int rc = registry_grow(why, why_cap);
        if (rc != 0) return rc;
    }
    *token = next_token++;
    tracked_borrow *t = &tracked[tracked_count++];
    t->token = *token;
    t->key.range = key->range;
    t->key.stride_gcd = key->stride_gcd;
    if (key->stride_gcd != 0) { /* else unset, and never read (lattices_meet) */
        t->key.first = key->first;
        t->key.itemsize = key->itemsize;
    }
    t->exclusive = exclusive;
    tracked_exclusive += exclusive != 0;
    return 0;
}

static int registry_acquire_key(const pyxbuf_borrow_key *key, int32_t exclusive, int64_t *token,
                                char *why, size_t why_cap) {
    registry_lock();
    int rc = registry_acquire_locked(key, exclusive, token, why, why_cap);
    registry_unlock();
    return rc;
}

static int registry_acquire(const pyxbuf_borrow_range *range, int32_t exclusive, int64_t *token,
                            char *why, size_t why_cap) {
    pyxbuf_borrow_key key = key_of_range(range);
    return registry_acquire_key(&key, exclusive, token, why, why_cap);
}

/* The newest borrow is the likeliest to go first: scan from the end. */
static inline void registry_release_locked(int64_t token) {
    for (size_t i = tracked_count; i-- > 0;) {
        if (tracked[i].token != token) continue;
        tracked_exclusive -= tracked[i].exclusive != 0;
        if (i != --tracked_count) tracked[i] = tracked[tracked_count];
        return;
    }
}

static void registry_release(int64_t token) {
    registry_lock();
    registry_release_locked(token);
    registry_unlock();
}

static int64_t registry_live(void) {
    registry_lock();
    int64_t n = (int64_t)tracked_count;
    registry_unlock();
    return n;
}

/* This copy's table, offered to sys.modules on the first call. */
static PyObject *shared_module_name;

static const pyxbuf_shared_api own_api = {
    .version = PYXBUF_SHARED_API_VERSION,
    .size = sizeof(pyxbuf_shared_api),
    .installer_version = PYXBUF__VERSION_TEXT,
    .borrow_acquire = registry_acquire,
    .borrow_release = registry_release,
    .borrow_live = registry_live,
    .borrow_acquire_key = registry_acquire_key,
};

/* The table in use: own_api, or the one a copy loaded earlier installed. */
static const pyxbuf_shared_api *shared_api = NULL;

/* The module holding the table every copy uses (a new reference): the one
 * in sys.modules, or a new one holding this copy's table, put there unless
 * another thread or copy put one first (setdefault, so two first calls at
 * once cannot install two registries). */
static PyObject *shared_module(PyObject *modules) {
    PyObject *ours = PyModule_New(PYXBUF_SHARED_MODULE);
    PyObject *capsule = PyCapsule_New((void *)&own_api, PYXBUF_SHARED_CAPSULE, NULL);
    int rc = ours && capsule ? PyModule_AddObjectRef(ours, "API", capsule) : -1;
    Py_XDECREF(capsule);
    PyObject *module = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    if (rc == 0) PyDict_SetDefaultRef(modules, pyxbuf__interned(&shared_module_name,
                                      PYXBUF_SHARED_MODULE), ours, &module);
#else
    PyObject *key = rc == 0 ? pyxbuf__interned(&shared_module_name, PYXBUF_SHARED_MODULE) : NULL;
    if (key != NULL) module = Py_XNewRef(PyDict_SetDefault(modules, key, ours));
#endif
    Py_XDECREF(ours);
    return module;
}

const pyxbuf_shared_api *pyxbuf_shared_api_get(void) {
    const pyxbuf_shared_api *api = PYXBUF__FT_LOAD_ACQUIRE(&shared_api);
    if (PYXBUF_LIKELY(api != NULL)) return api;
    PyObject *module = shared_module(PyImport_GetModuleDict());
    if (module == NULL) return NULL;
    PyObject *capsule = PyObject_GetAttrString(module, "API");
    Py_DECREF(module);
    api = capsule ? PyCapsule_GetPointer(capsule, PYXBUF_SHARED_CAPSULE) : NULL;
    Py_XDECREF(capsule);
    if (api == NULL) return NULL;
    if (api->version < 1 || api->size < offsetof(pyxbuf_shared_api, borrow_live) + sizeof(void *)) {
        PyErr_Format(PyExc_RuntimeError,
                     "pyxbuf: sys.modules['%s'] holds a shared table of version %u and size %u, "
                     "older than this copy of pyxbuf (%s) can use; load a newer pyxbuf first",
                     PYXBUF_SHARED_MODULE, (unsigned)api->version, (unsigned)api->size,
                     pyxbuf_version_string());
        return NULL;
    }
    PYXBUF__FT_STORE_RELEASE(&shared_api, api); /* every thread finds the same table */
    return api;
}

static PYXBUF_COLD int refuse_writable_shared(PyObject *obj) {
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant a writable shared borrow of '%.200s': a shared borrow "
                 "promises that nobody writes; ask for PYXBUF_BORROW_EXCLUSIVE to write",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

static PYXBUF_COLD int refuse_tracked(PyObject *obj, int32_t exclusive,
                                      const pyxbuf_borrow_key *key, const char *why) {
    const pyxbuf_borrow_range *range = &key->range;
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant %s borrow of '%.200s': its memory [%p, %p) overlaps %s "
                 "held by another pyxbuf consumer (in any copy of pyxbuf in this process); "
                 "release that view first",
                 exclusive ? "an exclusive" : "a shared", Py_TYPE(obj)->tp_name,
                 (void *)(uintptr_t)range->lo, (void *)(uintptr_t)range->hi, why);
    return -1;
}

static PYXBUF_COLD int refuse_span(PyObject *obj) {
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot track a borrow of '%.200s': its shape and strides overflow",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

/* The lattice of a view whose items do not fill [0, len) in C order: the gcd
 * of its strides over dimensions of more than one item. A view without
 * strides, or with suboffsets (pointers to follow), counts as every byte of
 * its range (0). */
static PYXBUF_NOINLINE uint64_t strided_lattice(const Py_buffer *b) {
    if (b->itemsize <= 0 || b->suboffsets != NULL || b->shape == NULL || b->strides == NULL)
        return 0;
    uint64_t g = 0;
    for (int i = 0; i < b->ndim; i++)
        if (b->shape[i] > 1) g = pyxbuf__gcd(g, pyxbuf__magnitude(b->strides[i]));
    return g;
}

/* What a tracked borrow covers: the view's device, byte span and lattice. */
static inline int tracked_key(PyObject *obj, const pyxbuf_view *view, pyxbuf_borrow_key *key) {
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
    key->stride_gcd = strided_lattice(b);
    key->first = buf;
    key->itemsize = b->itemsize > 0 ? (uint64_t)b->itemsize : 1;
    return 0;
}

/* Through the installed table (another copy's, or this one's on a conflict):
 * the grant with the registry's reason when it refuses. */
/* A table installed by a copy of pyxbuf older than version 2 compares
 * whole ranges only. */
int pyxbuf__shared_acquire_key(const pyxbuf_shared_api *api, const pyxbuf_borrow_key *key,
                               int32_t exclusive, int64_t *token, char *why, size_t why_cap) {
    if (api->size >= offsetof(pyxbuf_shared_api, borrow_acquire_key) + sizeof(void *) &&
        api->borrow_acquire_key != NULL)
        return api->borrow_acquire_key(key, exclusive, token, why, why_cap);
    return api->borrow_acquire(&key->range, exclusive, token, why, why_cap);
}

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

/* The registry's grant: inline when the installed table is this copy's own
 * (no call through the table, no message buffer), else through the table. */
static inline int tracked_grant(PyObject *obj, const pyxbuf_borrow_key *key, int32_t exclusive,
                                int64_t *token) {
    if (PYXBUF_LIKELY(PYXBUF__FT_LOAD_ACQUIRE(&shared_api) == &own_api)) {
        registry_lock();
        int rc = registry_acquire_locked(key, exclusive, token, NULL, 0);
        registry_unlock();
        if (PYXBUF_LIKELY(rc == 0)) return 0;
    }
    return tracked_grant_slow(obj, key, exclusive, token);
}

static inline void tracked_ungrant(int64_t token) {
    const pyxbuf_shared_api *api = PYXBUF__FT_LOAD_ACQUIRE(&shared_api);
    if (PYXBUF_LIKELY(api == &own_api)) {
        registry_lock();
        registry_release_locked(token);
        registry_unlock();
    } else if (api != NULL) {
        api->borrow_release(token);
    }
}

int pyxbuf__tracked_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags) {
    int32_t exclusive = (flags & PYXBUF_BORROW_EXCLUSIVE) != 0;
    if (PYXBUF_UNLIKELY(!exclusive && (flags & PyBUF_WRITABLE))) return refuse_writable_shared(obj);
    pyxbuf_borrow_key key;
    if (PYXBUF_UNLIKELY(tracked_key(obj, view, &key) < 0)) return -1;
    int64_t token = 0;
    if (PYXBUF_UNLIKELY(tracked_grant(obj, &key, exclusive, &token) < 0)) return -1;
    view->reserved[0] = 0;
    if (PYXBUF_UNLIKELY(!PYXBUF__FT_LOAD_RELAXED(&pyxbuf__rust_numpy_table_is_ours)) &&
        pyxbuf__rust_numpy_acquire(view, exclusive) < 0) {
        tracked_ungrant(token);
        return -1;
    }
    view->borrow_token = token;
    view->ext_flags |= PYXBUF_EXT_TRACKED | (exclusive ? PYXBUF_EXT_EXCLUSIVE : PYXBUF_EXT_SHARED);
    view->flags |= exclusive ? PYXBUF_BORROW_EXCLUSIVE : PYXBUF_BORROW_SHARED;
    if (!exclusive) view->base.readonly = 1; /* the holder of a shared borrow reads only */
    return 0;
}

void pyxbuf__tracked_release(pyxbuf_view *view) {
    if (PYXBUF_LIKELY(view->borrow_token != 0)) tracked_ungrant(view->borrow_token);
    view->borrow_token = 0;
    if (PYXBUF_UNLIKELY(view->reserved[0] != 0)) pyxbuf__rust_numpy_release(view);
    view->ext_flags &= ~PYXBUF_EXT_TRACKED;
}
