/* acquire.h -- the acquire layer's private interface (acquire/): the
 * supported-flags cache the fast paths read inline (supported.c keeps it), the
 * validation of producers' answers (validate.c), and the view reset every
 * path starts from. */
#ifndef PYXBUF_ACQUIRE_ACQUIRE_H
#define PYXBUF_ACQUIRE_ACQUIRE_H

#include "base/type_cache.h"
#include "borrow/borrow.h"
#include "bridges/bridges.h"
#include "bridges/numpy_array.h"

#define BORROW_FLAGS (PYXBUF_BORROW_SHARED | PYXBUF_BORROW_EXCLUSIVE)

/* A request's bits below the extended range (0x400 up): every producer
 * receives them as asked, as CPython's PyObject_GetBuffer passes them (the
 * classic flags, and the 0x2 and PyBUF_WRITE bits producers ignore).
 * Extended bits reach only the types that declare them. */
#define CLASSIC_RANGE 0x3FF

/* A type that declares any extended bit speaks the extended protocol:
 * pyxbuf passes it the extended (and newer) bits it declares. */
static inline int speaks_extended(int32_t supported) {
    return (supported & ~CLASSIC_RANGE) != 0;
}

/* One entry per type version seen recently, indexed by the version tag's low
 * bits. A type's version tag changes whenever its dict changes and is never
 * reused, so (type, tag) identifies the answer even if the type dies and
 * another is allocated at the same address; the type is compared too because
 * sub-interpreters number their heap types independently. `key` packs the tag
 * (low 32 bits, never 0 once stored) and the expanded mask (high 32 bits), with
 * one route bit set in the mask when a fast route applies to a type that
 * supports every classic flag and nothing more: CACHE_FAST when it has a
 * bf_getbuffer slot, CACHE_DLPACK_C when it has none but a DLPack C exchange
 * table (the bridge DESIGN.md tries first). A route then tests one word, and
 * a type without a tag (0) never hits. */
#define SUPPORTED_CACHE_SIZE 256
#define CACHE_FAST 0x40000000     /* above PYXBUF_SUPPORTED_FLAGS_MAX */
#define CACHE_DLPACK_C 0x20000000 /* likewise */
/* numpy.ndarray once the NumPy struct route is on (bridges/numpy_array.h):
 * a buffer slot too, but the route first (the sign bit, above the rest). */
#define CACHE_NUMPY INT32_MIN
#define CACHE_ROUTES (CACHE_FAST | CACHE_DLPACK_C | CACHE_NUMPY)
/* data: CACHE_DLPACK_C's table (kept alive by the type's dict); under the
 * limited API, CACHE_FAST's bf_getbuffer slot (base/compat.h). */
extern PYXBUF_HIDDEN pyxbuf__type_cache_entry pyxbuf__supported_cache[SUPPORTED_CACHE_SIZE];

static inline pyxbuf__type_cache_entry *cache_entry(unsigned int tag) {
    return &pyxbuf__supported_cache[tag & (SUPPORTED_CACHE_SIZE - 1)];
}

static inline uint64_t cache_key(unsigned int tag, int32_t mask) {
    return (uint64_t)tag | (uint64_t)(uint32_t)mask << 32;
}

/* 1 and *supported on a cache hit, else 0. */
static inline int cached_supported(PyTypeObject *type, int32_t *supported) {
    unsigned int tag = pyxbuf__type_tag(type);
    uint64_t key;
    const void *data;
    if (pyxbuf__type_cache_get(cache_entry(tag), type, &key, &data) && tag != 0 &&
        (uint32_t)key == tag) {
        *supported = (int32_t)(key >> 32) & ~CACHE_ROUTES;
        return 1;
    }
    return 0;
}

/* The fast path's test, one cache lookup for two routes: CACHE_FAST when
 * the type is cached as a classic producer with a bf_getbuffer slot (and
 * *data what PYXBUF__CACHED_GETBUFFER reads the slot from), CACHE_NUMPY when
 * it is numpy.ndarray with the struct route on, else 0. */
static inline int32_t cached_host_route(PyTypeObject *type, const void **data) {
    unsigned int tag = pyxbuf__type_tag(type);
    uint64_t key;
    if (!pyxbuf__type_cache_get(cache_entry(tag), type, &key, data)) return 0;
    if (PYXBUF_LIKELY(key == cache_key(tag, PYXBUF_CLASSIC_FLAGS | CACHE_FAST))) return CACHE_FAST;
    return key == cache_key(tag, PYXBUF_CLASSIC_FLAGS | CACHE_NUMPY) ? CACHE_NUMPY : 0;
}

/* The DLPack C route's table for the type, or NULL when it has no such
 * route (see the comment on supported_cache). */
static inline const void *cached_dlpack_c(PyTypeObject *type) {
    unsigned int tag = pyxbuf__type_tag(type);
    uint64_t key;
    const void *data;
    int hit = pyxbuf__type_cache_get(cache_entry(tag), type, &key, &data) &&
              key == cache_key(tag, PYXBUF_CLASSIC_FLAGS | CACHE_DLPACK_C);
    return hit ? data : NULL;
}

/* CPython 3.13+ refuses PyBUF_READ or PyBUF_WRITE alone in PyObject_GetBuffer
 * (SystemError, before any producer runs); older versions pass them on.
 * pyxbuf answers as the interpreter it runs on, on every path, for the
 * request without its PYXBUF_* bits. The fast routes call producers
 * directly, so such a request leaves them for get_view_slow, which refuses
 * it (PyBUF_WRITE is outside the routes' masks already). A library built for
 * 3.12 or older runs on no 3.13 (there is no stable-ABI build), so it pays
 * nothing for the test. */
#if PYXBUF__REFUSES_READ_OR_WRITE_ALONE
#define ROUTE_READ_ALONE(flags) (((flags) & CLASSIC_RANGE) == PyBUF_READ)

/* PyBUF_READ or PyBUF_WRITE alone in what a classic producer would receive
 * (3.13's PyBuffer_FillInfo refuses READ too, and bytearray then hands back
 * an unfilled view), extended bits or not: the extended protocol's
 * PyObject_GetBuffer refuses the same (cpython/ 0001). */
static inline int read_or_write_alone(int32_t flags) {
    int32_t classic = flags & CLASSIC_RANGE;
    return classic == PyBUF_READ || classic == PyBUF_WRITE;
}

/* Raise the SystemError of such a request; -1. */
int pyxbuf__refuse_read_write_alone(int32_t flags);
#else
#define ROUTE_READ_ALONE(flags) 0
#endif

/* Empty the view. The classic fields are left to the producer, which fills
 * every one of them (clearing them here would cost more than the rest of
 * the fast path); only `obj` and `buf` are cleared so a failed view holds
 * nothing. */
static inline void reset_view(pyxbuf_view *view, int32_t requested) {
    view->base.obj = NULL;
    view->base.buf = NULL;
    pyxbuf__view_begin(view, requested);
    view->path = PYXBUF_PATH_NONE;
    view->owner = NULL;
    view->bridge_data = NULL;
    view->borrow_token = 0;
    view->reserved[0] = 0; /* no rust-numpy borrow: a native TRACKED grant releases as one */
}

/* validate.c: a producer's answer for the request bits it was `passed`, or
 * -1 with the view released and BufferError naming the broken rule. */
int pyxbuf__validate_classic(pyxbuf_view *view, PyObject *obj, int32_t passed);
int pyxbuf__validate_native_layout(pyxbuf_view *view, PyObject *obj, int32_t passed);
int pyxbuf__validate_extended(pyxbuf_view *view, PyObject *obj, int32_t passed);

#endif
