/* emulated.c -- the guarded emulated device (see emulated.h): its pointer
 * query, its registration, and the helpers of emulated.h, which every copy
 * of the device in a process forwards to the one that serves it. Built into
 * the tests and the demo with emulated_streams.c and emulated_memory.c
 * (emulated_internal.h), registered through the public
 * pyxbuf_backend_register like any third-party backend. */
#include "device/emulated_internal.h"

#include "base/compat.h" /* static inline shims of CPython's API: no library internals */

#include <stdatomic.h>
#include <string.h>

/* Like cuPointerGetAttributes: only addresses inside a live allocation are
 * device memory (so a producer claiming more bytes than it owns is caught);
 * memory the pool caches is not. */
static int td_pointer_query(void *ctx, const void *ptr, pyxbuf_device *out, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int32_t found = -1;
    for (int32_t i = 0; i < PYXBUF_EMULATED_MAX_DEVICES && found < 0; i++)
        if (emu_backing_of(i, ptr, 1) != NULL && emu_in_live_block(i, ptr)) found = i;
    pthread_mutex_unlock(&emu_lock);
    if (found < 0)
        return emu_error(err, PYXBUF_EDEVICE,
                         "pointer %p is not in a live allocation of any emulated device", ptr);
    out->device_type = PYXBUF_DL_EXT_DEV;
    out->device_id = found;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* One emulated device per process (emulated_internal.h says how)            */
/* ------------------------------------------------------------------------- */


/* The table's ipc_open (its signature predates descriptors that travel):
 * the memfd through /proc. */
static int api_ipc_open(const pyxbuf_emulated_ipc_handle *h, void **ptr, pyxbuf_error *err) {
    return emu_ipc_open(h, -1, ptr, err);
}
static const emulated_api own_api;

/* The helpers of the copy whose backend is registered, or this copy's. */
static const emulated_api *serving(void) {
    pyxbuf_backend b;
    if (pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) < 0 || b.name == NULL ||
        strcmp(b.name, "pyxbuf.emulated") != 0 || b.ctx == NULL)
        return &own_api;
    const emulated_api *api = b.ctx;
    return api->magic == EMULATED_API_MAGIC && api->size >= sizeof(emulated_api) ? api : &own_api;
}

/* Registering is a check (does another copy's device serve?) and a store
 * that replaces what the device type has (the public API has no "only where
 * none is"): two copies doing both at once could each find none, and the
 * second replace the first after it had handed out memory, stranding it.
 * So copies register one at a time, under one lock: the one the first copy
 * published in sys.modules[PYXBUF_SHARED_MODULE], where the copies of
 * libpyxbuf meet to share their backend registry. Without a running
 * interpreter, or where that module cannot be used, no registry is shared
 * (engine.c) and this copy's lock serves. */
static pthread_mutex_t own_registration_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(pthread_mutex_t *) registration_lock_in_use;

#if PYXBUF_HAVE_FORK
/* A child must not start with the lock held by a thread it does not have. */
static void before_fork(void) { pthread_mutex_lock(&own_registration_lock); }
static void after_fork(void) { pthread_mutex_unlock(&own_registration_lock); }
static void register_fork_rules(void) { pthread_atfork(before_fork, after_fork, after_fork); }
#else
static void register_fork_rules(void) {}
#endif
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The lock at EMULATED_REGISTRATION_ATTR of the shared module: the one
 * there, or this copy's, put there first (setdefault, so two first callers
 * install one). NULL if it cannot be had (then engine.c, unable to share
 * its engine there either, has said why). Under the GIL. */
static pthread_mutex_t *published_lock(void) {
    PyObject *fresh = PyModule_New(PYXBUF_SHARED_MODULE), *module = NULL, *found = NULL;
    PyObject *name = PyUnicode_FromString(PYXBUF_SHARED_MODULE);
    PyObject *attr = PyUnicode_FromString(EMULATED_REGISTRATION_ATTR);
    PyObject *capsule = PyCapsule_New(&own_registration_lock, EMULATED_REGISTRATION_CAPSULE, NULL);
    if (fresh && name && attr && capsule &&
        PyDict_SetDefaultRef(PyImport_GetModuleDict(), name, fresh, &module) >= 0 &&
        PyModule_Check(module))
        PyDict_SetDefaultRef(PyModule_GetDict(module), attr, capsule, &found);
    pthread_mutex_t *lock =
        found ? PyCapsule_GetPointer(found, EMULATED_REGISTRATION_CAPSULE) : NULL;
    Py_XDECREF(found);
    Py_XDECREF(module);
    Py_XDECREF(capsule);
    Py_XDECREF(attr);
    Py_XDECREF(name);
    Py_XDECREF(fresh);
    return lock;
}

/* The lock the copies register under, found once (the first time under
 * the GIL, taken here when this thread does not hold it). */
static pthread_mutex_t *registration_lock(void) {
    pthread_mutex_t *lock = atomic_load(&registration_lock_in_use);
    if (lock != NULL) return lock;
    pthread_once(&fork_once, register_fork_rules); /* before another copy can take it */
    lock = &own_registration_lock;
    if (Py_IsInitialized() && !Py_IsFinalizing()) {
        PyGILState_STATE g = PyGILState_Ensure();
        PyObject *exc = PyErr_GetRaisedException(); /* a caller's pending error survives */
        pthread_mutex_t *published = published_lock();
        if (published != NULL) lock = published;
        PyErr_Clear(); /* none published: this copy's lock, as no registry is shared */
        PyErr_SetRaisedException(exc);
        PyGILState_Release(g);
    }
    pthread_mutex_t *expected = NULL;
    if (!atomic_compare_exchange_strong(&registration_lock_in_use, &expected, lock))
        lock = expected;
    return lock;
}

int pyxbuf_emulated_register(pyxbuf_error *err) {
    pyxbuf_backend backend = {
        .size = sizeof(pyxbuf_backend),
        .device_type = PYXBUF_DL_EXT_DEV,
        .name = "pyxbuf.emulated",
        .ctx = (void *)&own_api,
        .pointer_query = td_pointer_query,
    };
    emu_backend_functions(&backend);
    /* Another copy's emulated device serves the process: keep it (replacing
     * it would strand every array it holds). This first look also resolves
     * the registry outside the lock (its first use may wait for the GIL,
     * which a thread waiting for the lock may hold) and registers its fork
     * rules before the lock's (so fork() takes the two in the order
     * registering does). */
    if (serving() != &own_api) return 0;
    emu_ensure_fork_rules();
    pthread_mutex_t *one_at_a_time = registration_lock();
    pthread_mutex_lock(one_at_a_time);
    int rc = serving() != &own_api ? 0 : pyxbuf_backend_register(&backend, err);
    pthread_mutex_unlock(one_at_a_time);
    return rc;
}

static int64_t own_live_allocations(void) {
    pthread_mutex_lock(&emu_lock);
    int64_t n = emu_live_allocations;
    pthread_mutex_unlock(&emu_lock);
    return n;
}

static void own_fail_copies_after(int64_t copies) {
    pthread_mutex_lock(&emu_lock);
    emu_copy_async_budget = copies;
    pthread_mutex_unlock(&emu_lock);
}

static int64_t own_live_host_allocations(void) {
    pthread_mutex_lock(&emu_lock);
    int64_t n = emu_live_host_allocations;
    pthread_mutex_unlock(&emu_lock);
    return n;
}

static int64_t own_host_allocations_with_gil(void) {
    pthread_mutex_lock(&emu_lock);
    int64_t n = emu_host_allocations_with_gil;
    pthread_mutex_unlock(&emu_lock);
    return n;
}

static int own_peek(const void *src, void *dst, size_t n, pyxbuf_error *err) {
    pthread_mutex_lock(&emu_lock);
    char *b = NULL;
    for (int32_t i = 0; i < PYXBUF_EMULATED_MAX_DEVICES && b == NULL; i++)
        b = emu_backing_of(i, src, n);
    if (b != NULL) {
        emu_touch(b, n, 0);
        memcpy(dst, b, n);
    }
    pthread_mutex_unlock(&emu_lock);
    return b ? 0 : emu_bad_address(-1, src, n, err);
}

static void own_pool_stats(int32_t id, pyxbuf_emulated_pool_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&emu_lock);
    if (id >= 0 && id < PYXBUF_EMULATED_MAX_DEVICES) {
        const pool_stats *p = &emu_devices[id].pool;
        *out = (pyxbuf_emulated_pool_stats){p->reserved, p->cached, p->allocations, p->reuses,
                                            p->releases};
    }
    pthread_mutex_unlock(&emu_lock);
}

static const emulated_api own_api = {
    .magic = EMULATED_API_MAGIC,
    .size = sizeof(emulated_api),
    .live_allocations = own_live_allocations,
    .fail_copies_after = own_fail_copies_after,
    .live_host_allocations = own_live_host_allocations,
    .host_allocations_with_gil = own_host_allocations_with_gil,
    .stream_create = emu_stream_create,
    .stream_destroy = emu_stream_destroy,
    .enqueue_write = emu_enqueue_write,
    .pending = emu_pending,
    .peek = own_peek,
    .pool_stats = own_pool_stats,
    .ipc_export = emu_ipc_export,
    .ipc_open = api_ipc_open,
    .ipc_close = emu_ipc_close,
};

int64_t pyxbuf_emulated_live_allocations(void) { return serving()->live_allocations(); }

void pyxbuf_emulated_fail_copies_after(int64_t copies) { serving()->fail_copies_after(copies); }

int64_t pyxbuf_emulated_live_host_allocations(void) { return serving()->live_host_allocations(); }

int64_t pyxbuf_emulated_host_allocations_with_gil(void) {
    return serving()->host_allocations_with_gil();
}

int pyxbuf_emulated_stream_create(int32_t id, int64_t *handle, pyxbuf_error *err) {
    return serving()->stream_create(id, handle, err);
}

int pyxbuf_emulated_stream_destroy(int64_t handle, pyxbuf_error *err) {
    return serving()->stream_destroy(handle, err);
}

int pyxbuf_emulated_enqueue_write(int32_t id, int64_t handle, void *dst, const void *src, size_t n,
                                  pyxbuf_error *err) {
    return serving()->enqueue_write(id, handle, dst, src, n, err);
}

int64_t pyxbuf_emulated_pending(int32_t id, int64_t handle) {
    return serving()->pending(id, handle);
}

int pyxbuf_emulated_peek(const void *src, void *dst, size_t n, pyxbuf_error *err) {
    return serving()->peek(src, dst, n, err);
}

void pyxbuf_emulated_pool_stats_get(int32_t id, pyxbuf_emulated_pool_stats *out) {
    serving()->pool_stats(id, out);
}

int pyxbuf_emulated_ipc_export(const void *ptr, pyxbuf_emulated_ipc_handle *out,
                               pyxbuf_error *err) {
    return serving()->ipc_export(ptr, out, err);
}

int pyxbuf_emulated_ipc_open(const pyxbuf_emulated_ipc_handle *h, void **ptr, pyxbuf_error *err) {
    return serving()->ipc_open(h, ptr, err);
}

int pyxbuf_emulated_ipc_close(void *ptr, pyxbuf_error *err) {
    return serving()->ipc_close(ptr, err);
}
