/* type_cache.h -- per-type caches read without a lock on every acquisition
 * (the supported-flags cache in acquire/supported.c, the DLPack bridge's). */
#ifndef PYXBUF_BASE_TYPE_CACHE_H
#define PYXBUF_BASE_TYPE_CACHE_H

#include "base/base.h"

/* One entry of a per-type cache (the supported-flags cache in acquire/supported.c,
 * the DLPack bridge's in dlpack_import.c): `key` holds the type's version tag in its low
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
#elif PYXBUF_LIMITED
    /* The entry holds its type (see pyxbuf__type_tag): the reference it
     * held before goes last, once the entry is whole again. */
    PyTypeObject *old = e->type;
    e->type = (PyTypeObject *)Py_NewRef((PyObject *)type);
    e->key = key;
    e->data = data;
    Py_XDECREF((PyObject *)old);
#else
    e->type = type;
    e->key = key;
    e->data = data;
#endif
}


#endif
