/* registry.c -- the cooperative borrow registry, shared by every copy
 * of libpyxbuf in the process: the first copy that needs it installs its
 * table (pyxbuf_shared_api_get) in sys.modules, later copies call it. Its
 * table of live borrows is registry.h's. */

#include "borrow/registry.h"

#include <stdio.h>
#include <stdlib.h>

registry_state pyxbuf__registry = {ATOMIC_FLAG_INIT, NULL, 0, 0, 0, 1};
registry_state *pyxbuf__inline_registry = NULL;

/* `why` may be NULL: the caller only wants to know (see tracked_acquire). */
PYXBUF_COLD int pyxbuf__registry_conflict(const tracked_borrow *t, char *why, size_t why_cap) {
    if (why == NULL) return PYXBUF_EBORROW;
    const char *kind = t->exclusive ? "an exclusive" : "a shared";
    unsigned long long lo = t->key.range.lo, hi = t->key.range.hi;
    unsigned long long size = t->key.itemsize & ~PYXBUF__KEY_DENSE, every = t->key.stride_gcd;
    if (every == 0) /* every byte of the range */
        snprintf(why, why_cap, "%s borrow of [0x%llx, 0x%llx)", kind, lo, hi);
    else
        snprintf(why, why_cap, "%s borrow of [0x%llx, 0x%llx) (items of %llu %s every %llu %s)",
                 kind, lo, hi, size, PYXBUF__PLURAL(size, "byte", "bytes"), every,
                 PYXBUF__PLURAL(every, "byte", "bytes"));
    return PYXBUF_EBORROW;
}

/* realloc: every copy in the process calls the one C library's allocator,
 * so any copy working on the table inline may grow it. */
PYXBUF_COLD int pyxbuf__registry_grow(registry_state *r, char *why, size_t why_cap) {
    size_t cap = r->capacity ? 2 * r->capacity : 16;
    tracked_borrow *grown = realloc(r->entries, cap * sizeof *grown);
    if (grown == NULL) {
        if (why != NULL) snprintf(why, why_cap, "out of memory in the borrow registry");
        return PYXBUF_ENOMEM;
    }
    r->entries = grown;
    r->capacity = cap;
    return 0;
}

static int registry_acquire_key(const pyxbuf_borrow_key *key, int32_t exclusive, int64_t *token,
                                char *why, size_t why_cap) {
    registry_state *r = &pyxbuf__registry;
    registry_lock(r);
    int rc = registry_acquire_locked(r, key, exclusive, token, why, why_cap);
    registry_unlock(r);
    return rc;
}

/* A version-1 range: one item covering all of it. */
static pyxbuf_borrow_key key_of_range(const pyxbuf_borrow_range *range) {
    pyxbuf_borrow_key key = {*range, 0, 0, 0}; /* stride_gcd 0: first, itemsize unread */
    return key;
}

static int registry_acquire(const pyxbuf_borrow_range *range, int32_t exclusive, int64_t *token,
                            char *why, size_t why_cap) {
    pyxbuf_borrow_key key = key_of_range(range);
    return registry_acquire_key(&key, exclusive, token, why, why_cap);
}

static void registry_release(int64_t token) {
    registry_state *r = &pyxbuf__registry;
    registry_lock(r);
    registry_release_locked(r, token);
    registry_unlock(r);
}

static int64_t registry_live(void) {
    registry_state *r = &pyxbuf__registry;
    registry_lock(r);
    int64_t n = (int64_t)r->count;
    registry_unlock(r);
    return n;
}

/* This copy's table, offered to sys.modules on the first call. */

const pyxbuf_shared_api pyxbuf__own_shared_api = {
    .version = PYXBUF_SHARED_API_VERSION,
    .size = sizeof(pyxbuf_shared_api),
    .installer_version = PYXBUF__VERSION_TEXT,
    .borrow_acquire = registry_acquire,
    .borrow_release = registry_release,
    .borrow_live = registry_live,
    .borrow_acquire_key = registry_acquire_key,
    .registry_layout = PYXBUF__REGISTRY_LAYOUT,
    .registry = &pyxbuf__registry,
};

/* The table in use: pyxbuf__own_shared_api, or the one a copy loaded earlier
 * installed. */
const pyxbuf_shared_api *pyxbuf__installed_shared_api = NULL;

const pyxbuf_shared_api *pyxbuf_shared_api_get(void) {
    const pyxbuf_shared_api *api = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__installed_shared_api);
    if (PYXBUF_LIKELY(api != NULL)) return api;
    PyObject *capsule =
        pyxbuf__shared_capsule("API", PYXBUF_SHARED_CAPSULE, (void *)&pyxbuf__own_shared_api);
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
    /* Its registry inline where the layout is this copy's (the registry is
     * published before the table: a thread that finds the table finds it). */
    registry_state *inline_registry = NULL;
    if (api == &pyxbuf__own_shared_api)
        inline_registry = &pyxbuf__registry;
    else if (api->version >= 4 && api->size >= offsetof(pyxbuf_shared_api, registry) +
                                                   sizeof(void *) &&
             api->registry_layout == PYXBUF__REGISTRY_LAYOUT && api->registry != NULL)
        inline_registry = api->registry;
    PYXBUF__FT_STORE_RELEASE(&pyxbuf__inline_registry, inline_registry);
    /* every thread finds the same table */
    PYXBUF__FT_STORE_RELEASE(&pyxbuf__installed_shared_api, api);
    return api;
}
