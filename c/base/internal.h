/* internal.h -- helpers shared by the C files of libpyxbuf. Nothing here is
 * exported: the library is built with -fvisibility=hidden. */
#ifndef PYXBUF_INTERNAL_H
#define PYXBUF_INTERNAL_H

#include "pyxbuf.h"

#include "base/checked.h"

#include <stdatomic.h>

#if defined(__GNUC__)
#define PYXBUF_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define PYXBUF_LIKELY(x) __builtin_expect(!!(x), 1)
#define PYXBUF_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Error and rare paths: out of line, so hot callers save no registers for them. */
#define PYXBUF_COLD __attribute__((noinline, cold))
/* Taken often enough to stay warm, but kept out of a hot caller's frame. */
#define PYXBUF_NOINLINE __attribute__((noinline))
/* A small step of a hot loop whose call would cost more than its body. */
#define PYXBUF_ALWAYS_INLINE inline __attribute__((always_inline))
/* On an extern variable one file defines and others read: -fvisibility=hidden
 * hides the definition, but a plain declaration makes readers go through the
 * GOT (an extra load per access). */
#define PYXBUF_HIDDEN __attribute__((visibility("hidden")))
#else
#define PYXBUF_HIDDEN
#define PYXBUF_COLD
#define PYXBUF_NOINLINE
#define PYXBUF_ALWAYS_INLINE inline
#define PYXBUF_PRINTF(f, a)
#define PYXBUF_LIKELY(x) (x)
#define PYXBUF_UNLIKELY(x) (x)
#endif

/* pyxbuf_version_string()'s text, a constant. */
#define PYXBUF__STR2(x) #x
#define PYXBUF__STR(x) PYXBUF__STR2(x)
#define PYXBUF__VERSION_TEXT                                                                 \
    PYXBUF__STR(PYXBUF_VERSION_MAJOR) "." PYXBUF__STR(PYXBUF_VERSION_MINOR) "." PYXBUF__STR( \
        PYXBUF_VERSION_PATCH)

/* Fill `err` (if not NULL) and return `code`. */
int pyxbuf__error(pyxbuf_error *err, int32_t code, int64_t position, const char *fmt, ...)
    PYXBUF_PRINTF(4, 5);

/* Shared state on free-threaded builds (Py_GIL_DISABLED). With the GIL one
 * thread runs the library at a time, switching only where it calls Python or
 * releases the GIL, so plain loads and stores serve and the hot path stays
 * free of atomics. Without the GIL every word another thread may write at
 * the same time is read and written through these: acquire/release where the
 * word publishes other data, relaxed where it stands alone. */
#ifdef Py_GIL_DISABLED
#define PYXBUF__FT_LOAD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define PYXBUF__FT_LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define PYXBUF__FT_STORE_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define PYXBUF__FT_STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#else
#define PYXBUF__FT_LOAD_ACQUIRE(p) (*(p))
#define PYXBUF__FT_LOAD_RELAXED(p) (*(p))
#define PYXBUF__FT_STORE_RELEASE(p, v) ((void)(*(p) = (v)))
#define PYXBUF__FT_STORE_RELAXED(p, v) ((void)(*(p) = (v)))
#endif

/* A lock that exists on free-threaded builds only, for state that the GIL
 * guards otherwise. Never held across a call that may run Python. */
#ifdef Py_GIL_DISABLED
#define PYXBUF__FT_MUTEX(name) static PyMutex name
#define PYXBUF__FT_LOCK(m) PyMutex_Lock(&(m))
#define PYXBUF__FT_UNLOCK(m) PyMutex_Unlock(&(m))
#else
#define PYXBUF__FT_MUTEX(name) typedef int pyxbuf__unused_##name
#define PYXBUF__FT_LOCK(m) ((void)0)
#define PYXBUF__FT_UNLOCK(m) ((void)0)
#endif

/* Py_IsFinalizing is public since CPython 3.13 (gh-108014); 3.11 and 3.12
 * have it as _Py_IsFinalizing. */
#if PY_VERSION_HEX < 0x030D0000
#define Py_IsFinalizing() _Py_IsFinalizing()
#endif

/* Per-object critical sections: CPython 3.13 and later (a no-op there with
 * the GIL); before 3.13 only GIL builds exist. */
#if PY_VERSION_HEX < 0x030D0000
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* A type's version tag: CPython assigns it without a lock on free-threaded
 * builds (relaxed atomics there). */
static inline unsigned int pyxbuf__type_tag(PyTypeObject *type) {
    return PYXBUF__FT_LOAD_RELAXED(&type->tp_version_tag);
}

/* Publish `made` (a new reference) in the process-lifetime *slot unless
 * another thread published one while `made` was being built: building
 * allocates, which may run finalizers that switch threads (with the GIL), and
 * without it two threads really build at once. The first object published
 * stays; returns it (borrowed). Read the slot with PYXBUF__FT_LOAD_ACQUIRE. */
static inline PyObject *pyxbuf__publish_once(PyObject **slot, PyObject *made) {
#ifdef Py_GIL_DISABLED
    PyObject *first = NULL;
    if (__atomic_compare_exchange_n(slot, &first, made, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return made;
    Py_DECREF(made);
    return first;
#else
    if (*slot == NULL)
        *slot = made;
    else
        Py_DECREF(made);
    return *slot;
#endif
}

/* The same for a pointer to memory the caller built: returns the pointer
 * published first; when that is not `made`, the caller frees `made`. */
static inline void *pyxbuf__publish_ptr_once(void **slot, void *made) {
#ifdef Py_GIL_DISABLED
    void *first = NULL;
    if (__atomic_compare_exchange_n(slot, &first, made, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return made;
    return first;
#else
    if (*slot == NULL) *slot = made;
    return *slot;
#endif
}

/* The interned string `text`, made once and kept in *slot for the process.
 * Borrowed; NULL with an exception set if it could not be made. */
static inline PyObject *pyxbuf__interned(PyObject **slot, const char *text) {
    PyObject *s = PYXBUF__FT_LOAD_ACQUIRE(slot);
    if (PYXBUF_LIKELY(s != NULL)) return s;
    s = PyUnicode_InternFromString(text);
    return s == NULL ? NULL : pyxbuf__publish_once(slot, s);
}

/* One entry of a per-type cache (the supported-flags cache in view.c, the
 * DLPack bridge's in dlpack.c): `key` holds the type's version tag in its low
 * 32 bits (never reused, so a dead type's entry cannot answer for a new type
 * at its address) and 32 bits of the cache's own; `data` a pointer the type's
 * dict keeps alive while the tag holds. Read on every acquisition without a
 * lock. On free-threaded builds a sequence count makes the three words one
 * snapshot: a writer makes it odd, stores, makes it even; a reader that saw it
 * change (or odd) treats the entry as a miss, and a writer that finds another
 * writing skips the store: it is a cache. No standalone fences (ThreadSanitizer
 * cannot follow them): the writer's word stores release, so a reader whose
 * acquire load sees one also sees the odd count on its second read. */
typedef struct pyxbuf__type_cache_entry {
#ifdef Py_GIL_DISABLED
    uint32_t seq;
#endif
    PyTypeObject *type;
    uint64_t key;
    const void *data;
} pyxbuf__type_cache_entry;

/* 1 with *key and *data when `e` holds an answer for `type`, else 0. */
static PYXBUF_ALWAYS_INLINE int pyxbuf__type_cache_get(const pyxbuf__type_cache_entry *e,
                                                       PyTypeObject *type, uint64_t *key,
                                                       const void **data) {
#ifdef Py_GIL_DISABLED
    uint32_t seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    PyTypeObject *t = __atomic_load_n(&e->type, __ATOMIC_ACQUIRE);
    *key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
    *data = __atomic_load_n(&e->data, __ATOMIC_ACQUIRE);
    return (seq & 1) == 0 && t == type && __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == seq;
#else
    *key = e->key;
    *data = e->data;
    return e->type == type;
#endif
}

static inline void pyxbuf__type_cache_put(pyxbuf__type_cache_entry *e, PyTypeObject *type,
                                          uint64_t key, const void *data) {
#ifdef Py_GIL_DISABLED
    uint32_t seq = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
    if ((seq & 1) || !__atomic_compare_exchange_n(&e->seq, &seq, seq + 1, 0, __ATOMIC_ACQUIRE,
                                                  __ATOMIC_RELAXED))
        return; /* another thread is writing it */
    __atomic_store_n(&e->type, type, __ATOMIC_RELEASE);
    __atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
    __atomic_store_n(&e->data, data, __ATOMIC_RELEASE);
    __atomic_store_n(&e->seq, seq + 2, __ATOMIC_RELEASE);
#else
    e->type = type;
    e->key = key;
    e->data = data;
#endif
}

/* view.c: drop `type`'s supported-flags cache entry (a test hook). */
void pyxbuf__type_cache_forget(PyTypeObject *type);

/* Markers in pyxbuf_view.state. */
#define PYXBUF__STATE_ACQUIRED 0x50584231u /* "PXB1" */
#define PYXBUF__STATE_RELEASED 0x50584230u /* "PXB0" */

/* pyxbuf_view_is_acquired, for every layer (it reads one field). */
static inline int pyxbuf__view_acquired(const pyxbuf_view *view) {
    return view != NULL && view->state == PYXBUF__STATE_ACQUIRED;
}

/* Raise BufferError with the formatted message (at most
 * PYXBUF_ERROR_MESSAGE_SIZE bytes) and return -1. */
int pyxbuf__buffer_error(const char *fmt, ...) PYXBUF_PRINTF(1, 2);

/* Writes a human-readable list of the request bits in `flags`
 * ("WRITABLE|STRIDES|PYXBUF_DEVICE") into buf. */
void pyxbuf__flag_names(int32_t flags, char *buf, size_t cap);

/* type_dict.c: set `name` in `type`'s dict (static and immutable types too) and
 * tell the type it changed. Steals `value` (NULL: an error is already set).
 * Returns 0, or -1 with a Python exception set. */
int pyxbuf__type_dict_set(PyTypeObject *type, const char *name, PyObject *value);

/* The backend table (backend_table.c), by DLPack device type: check a
 * backend's description; store one (replacing the type's), remove one, look
 * one up (1 and *out, or 0). backends.c alone fills it. */
#define PYXBUF__MAX_DEVICE_TYPES 64
int pyxbuf__backend_check(const pyxbuf_backend *b, pyxbuf_error *err);
int pyxbuf__backend_store(const pyxbuf_backend *backend);
int pyxbuf__backend_remove(int32_t device_type);
int pyxbuf__backend_lookup(int32_t device_type, pyxbuf_backend *out);
/* The backends built into the library (cpu_backend.c, cuda.c), which
 * backends.c registers the first time the registry is used. */
const pyxbuf_backend *pyxbuf__cpu_backend(void);
const pyxbuf_backend *pyxbuf__cuda_backend(void);
/* device_ids.c: memory the host may dereference (host, pinned, managed). */
int pyxbuf__host_accessible(int32_t device_type);

/* device.c, for pyxbuf_to_device (export.c): the view can be copied (acquired,
 * its len agrees with its layout, no suboffsets); fill `dst`, memory of
 * `target`, from it in C order (call without the GIL); an event after that on
 * `target` (NULL when there is nothing to wait for). */
int pyxbuf__check_copy(const pyxbuf_view *view);
int pyxbuf__copy_view_into(const pyxbuf_view *view, const pyxbuf_device *src, void *dst,
                           const pyxbuf_device *target, int64_t stream, pyxbuf_error *err);
int pyxbuf__record_event(const pyxbuf_device *target, int64_t stream, void **event,
                         pyxbuf_error *err);
/* pyxbuf_exporter_new with the item size given (0 = from the format): a copy
 * keeps its source's itemsize even where the format disagrees (ctypes). */
PyObject *pyxbuf__exporter_new_sized(const char *format, Py_ssize_t itemsize, int32_t ndim,
                                     const Py_ssize_t *shape, int32_t readonly,
                                     const pyxbuf_device *device);
/* The exporter takes `event` (recorded after its memory was written) as the
 * one its consumers wait for; the caller knows `obj` is an exporter. */
void pyxbuf__exporter_adopt_event(PyObject *obj, void *event, int64_t stream);

/* ------------------------------------------------------------------------- */
/* Bridges: DLPack, __cuda_array_interface__, __array_interface__            */
/* ------------------------------------------------------------------------- */

/* Each bridge returns 1 when it acquired the view, 0 when it does not apply
 * to `obj` (nothing set), -1 with a Python exception when it applies but
 * failed (the next bridge is then tried; the first error is what the consumer
 * sees if none succeeds). On 1 the bridge has filled view->base (base.obj a
 * new reference to `obj`), view->path and view->owner, the object whose
 * death frees the memory (e.g. calls the DLPack deleter); release is generic
 * (Py_XDECREF of base.obj and owner). The usual way to fill the view is
 * pyxbuf_export_fill with a description of the foreign array: it honours the
 * classic request flags and the device rules exactly as pyxbuf's exporters do. */
/* `stream` is the consumer's stream (DLPack's integer convention) from
 * pyxbuf_get_stream, or PYXBUF__STREAM_UNSET from pyxbuf_get (DLPack:
 * stream=None, the producer assumes the default stream). */
#define PYXBUF__STREAM_UNSET INT64_MIN
int pyxbuf__dlpack_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream);
/* A DLPack view of a host tensor with few dimensions has no owner object:
 * view->owner is NULL and view->bridge_data the DLManagedTensorVersioned
 * itself, whose deleter this runs at release (the one exception to the
 * generic release above). */
void pyxbuf__dlpack_release_bare(void *tensor);
/* 1 if the DLPack bridge would try `type` (it has __dlpack__ or a C exchange
 * table); answered from the per-type cache, calls nothing. */
int pyxbuf__dlpack_type_speaks(PyTypeObject *type);
/* The DLPack C exchange table (a DLPackExchangeAPI) of the type that pyxbuf
 * can read, or NULL; answered from the DLPack bridge's per-type cache. */
const void *pyxbuf__dlpack_c_table_of(PyTypeObject *type);
/* pyxbuf_get's route for a type with no classic buffer whose C exchange
 * table is `api` (view.c caches it per type), for a request without borrow
 * bits: the DLPack bridge called with no other bookkeeping. 1 = acquired (the
 * view marked so); else a bridge's answer (0 or -1), and view.c tries the
 * other bridges, as it would have without the route. */
int pyxbuf__dlpack_get_c(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                         const void *api);
int pyxbuf__cai_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream);
int pyxbuf__array_interface_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                    int64_t stream);

/* The device holding `ptr`, asking every registered backend (CUDA first):
 * fills *device and *backend, or returns PYXBUF_EDEVICE with a message that
 * names what each backend said. */
int pyxbuf__backend_find_pointer(const void *ptr, pyxbuf_device *device, pyxbuf_backend *backend,
                                 pyxbuf_error *err);

/* A consistent copy of a counter another thread may be changing (borrow.c). */
void pyxbuf__borrow_counts(const pyxbuf_borrow_counter *counter, pyxbuf_borrow_counter *out);

/* The cooperative borrow registry (borrow.c) for views whose producer knows
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
/* borrow.c: the shared table's grant of `key`, by range alone when the table
 * was installed by a copy older than version 2. */
int pyxbuf__shared_acquire_key(const pyxbuf_shared_api *api, const pyxbuf_borrow_key *key,
                               int32_t exclusive, int64_t *token, char *why, size_t why_cap);
void pyxbuf__tracked_release(pyxbuf_view *view);

/* Whether b's items fill [0, len) in C order: every stride the C-order one
 * (dimensions of extent 1 excepted) and len their product. The common case,
 * answered without an overflow-checked walk of the layout. */
static inline int pyxbuf__fills_c_order(const Py_buffer *b) {
    if (b->shape == NULL || b->ndim > PYXBUF_MAX_NDIM) return 0;
    Py_ssize_t expected = b->itemsize;
    for (int i = b->ndim - 1; i >= 0; i--) {
        Py_ssize_t n = b->shape[i];
        if (b->strides != NULL && n != 1 && b->strides[i] != expected) return 0;
        if (n < 0 || !PYXBUF__MUL_OK(expected, n, &expected)) return 0;
    }
    return expected == b->len;
}

/* The byte span [lo, hi) a view's items touch, relative to base.buf; -1 when
 * the producer's shape and strides overflow. The C-order case inline, the
 * walk out of line (device.c). */
int pyxbuf__view_span_walk(const Py_buffer *b, Py_ssize_t *lo, Py_ssize_t *hi);
static inline int pyxbuf__view_span(const Py_buffer *b, Py_ssize_t *lo, Py_ssize_t *hi) {
    if (PYXBUF_LIKELY(pyxbuf__fills_c_order(b))) {
        *lo = 0;
        *hi = b->len;
        return 0;
    }
    return pyxbuf__view_span_walk(b, lo, hi);
}

/* device.c: -1 if `id` is a valid device identifier (non-empty UTF-8, at most
 * PYXBUF__DEVICE_ID_MAX bytes), else the offset of the first bad byte. */
#define PYXBUF__DEVICE_ID_MAX 256
int64_t pyxbuf__device_id_invalid_at(const char *id);
/* The same from raw shape/strides (strides NULL = C order), all checked. */
int pyxbuf__checked_span(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                         Py_ssize_t itemsize, Py_ssize_t *lo, Py_ssize_t *hi);
/* PYXBUF_EDEVICE unless the backend says both ends of [buf+lo, buf+hi) are
 * memory of `claimed` (a "cuda" claim also accepts CUDA managed memory). */
int pyxbuf__check_device_span(const pyxbuf_backend *b, const char *buf, Py_ssize_t lo,
                              Py_ssize_t hi, const pyxbuf_device *claimed, pyxbuf_error *err);

/* holder.c: a Python object holding `size` bytes of zeroed, 16-byte-aligned storage
 * for a bridge's state (device info, spilled dims, format strings);
 * `finalize(storage)`, if not NULL, runs once when it dies, with the GIL. */
PyObject *pyxbuf__holder_new(size_t size, void (*finalize)(void *storage));
void *pyxbuf__holder_storage(PyObject *holder);
/* holder.c: move an acquired view to `dst` (for a view kept past the call that
 * acquired it): pointers into the view itself (inline dims, &base.itemsize
 * for 1-d strides, a format or device info stored in it) follow it. */
void pyxbuf__view_move(pyxbuf_view *dst, const pyxbuf_view *src);

/* fill.c: a description's item size (from its format when 0), its bytes
 * (refusing negative or overflowing shapes), and its basic sanity (size,
 * ndim, shape, strides); each sets a Python exception on failure. */
int pyxbuf__desc_itemsize(const pyxbuf_export_desc *d, Py_ssize_t *itemsize);
int pyxbuf__desc_nbytes(const pyxbuf_export_desc *d, Py_ssize_t itemsize, Py_ssize_t *nbytes);
int pyxbuf__check_desc(const pyxbuf_export_desc *d);

/* Filling a view from a pyxbuf_export_desc (fill.c). */

/* Bytes, C-contiguity and a sound span of d's layout in one pass, for the
 * common layout: no empty dimension, nothing overflows, itemsize > 0. -1 (no
 * exception) otherwise: pyxbuf_export_fill's careful checks then say why. */
static PYXBUF_ALWAYS_INLINE int pyxbuf__layout_pass(const pyxbuf_export_desc *d,
                                                    Py_ssize_t itemsize, Py_ssize_t *nbytes,
                                                    int *c) {
    Py_ssize_t expected = itemsize, lo = 0, hi = 0, extent, span;
    int contiguous = 1;
    if (itemsize <= 0) return -1;
    for (int32_t i = d->ndim - 1; i >= 0; i--) {
        Py_ssize_t n = d->shape[i], s = d->strides ? d->strides[i] : expected;
        if (n <= 0) return -1;
        if (n != 1 && s != expected) contiguous = 0;
        if (!PYXBUF__MUL_OK(expected, n, &expected) ||
            !PYXBUF__MUL_OK(s, n - 1, &extent) ||
            (extent < 0 ? !PYXBUF__ADD_OK(lo, extent, &lo)
                        : !PYXBUF__ADD_OK(hi, extent, &hi)))
            return -1;
    }
    if (!PYXBUF__ADD_OK(hi, itemsize, &hi) || !PYXBUF__SUB_OK(hi, lo, &span))
        return -1;
    *nbytes = expected; /* every dimension is at least 1 */
    *c = contiguous;
    return 0;
}

/* The stores of a checked fill: what the request flags ask for, nothing
 * more (PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES), and a new reference. As
 * CPython's producers answer (PyBuffer_FillInfo, array.array, memoryview):
 * without PyBUF_ND one flat run, ndim 1 and no shape (a consumer copies ndim
 * shape entries: ndim 2 with a NULL shape crashes PyMemoryView_FromBuffer);
 * at ndim 0 no shape and no strides. The caller has refused a layout that is
 * not C-contiguous when the request has no strides. */
static PYXBUF_ALWAYS_INLINE void pyxbuf__export_store(Py_buffer *view, PyObject *exporter,
                                                      int flags, const pyxbuf_export_desc *d,
                                                      Py_ssize_t itemsize, Py_ssize_t nbytes) {
    int nd = (flags & PyBUF_ND) == PyBUF_ND;
    view->buf = d->buf;
    view->obj = Py_XNewRef(exporter);
    view->len = nbytes;
    view->itemsize = itemsize;
    view->readonly = d->readonly ? 1 : 0;
    view->ndim = nd ? (int)d->ndim : 1;
    view->format = (flags & PyBUF_FORMAT) ? (char *)(d->format ? d->format : "B") : NULL;
    view->shape = nd && d->ndim > 0 ? d->shape : NULL;
    view->strides = NULL;
    if ((flags & PyBUF_STRIDES) == PyBUF_STRIDES && d->ndim > 0) /* ndim > 1 has strides */
        view->strides = d->strides ? d->strides : &view->itemsize;
    view->suboffsets = NULL;
    view->internal = NULL;
}

/* pyxbuf_export_fill for a bridge's host array, inline: the common case (a
 * sound C-contiguous layout, a request it meets) is checked and stored here;
 * anything else goes to pyxbuf_export_fill, which checks each rule with its
 * message. `d` must describe host memory (device NULL) with d->size set,
 * ndim in 0..PYXBUF_MAX_NDIM and a shape. */
static PYXBUF_ALWAYS_INLINE int pyxbuf__export_fill_host(Py_buffer *view, PyObject *exporter,
                                                         int flags,
                                                         const pyxbuf_export_desc *d) {
    Py_ssize_t nbytes;
    int c;
    if (PYXBUF_LIKELY((d->ndim <= 1 || d->strides != NULL) &&
                      pyxbuf__layout_pass(d, d->itemsize, &nbytes, &c) == 0 && c &&
                      (d->buf != NULL || nbytes == 0) &&
                      !((flags & PyBUF_WRITABLE) && d->readonly) &&
                      (flags & PyBUF_F_CONTIGUOUS) != PyBUF_F_CONTIGUOUS)) {
        pyxbuf__export_store(view, exporter, flags, d, d->itemsize, nbytes);
        return 0;
    }
    return pyxbuf_export_fill(view, exporter, flags, d);
}

/* The extended fields of a view being acquired for `flags`, before a path
 * fills it: no device, no grants. The Py_buffer, `state`, `path` and the
 * bridge fields are the path's to set. */
static inline void pyxbuf__view_clear_extended(pyxbuf_view *view, int32_t flags) {
    view->flags = 0;
    view->ext_flags = 0;
    view->device = NULL;
    view->device_info = NULL;
    view->requested = flags;
}

/* The same, and not yet acquired (reset_view in view.c clears the rest too). */
static inline void pyxbuf__view_begin(pyxbuf_view *view, int32_t flags) {
    pyxbuf__view_clear_extended(view, flags);
    view->state = PYXBUF__STATE_RELEASED;
}

/* Room for ndim shape entries followed by ndim strides: the view's inline_dims
 * when ndim <= PYXBUF_INLINE_NDIM, else `spill` (2 * ndim entries the bridge
 * keeps alive, e.g. in its holder's storage). */
static inline Py_ssize_t *pyxbuf__view_dims(pyxbuf_view *view, int ndim, Py_ssize_t *spill) {
    return ndim <= PYXBUF_INLINE_NDIM ? view->inline_dims : spill;
}

#endif
