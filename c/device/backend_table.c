/* backend_table.c -- the table of device backends, by DLPack device type:
 * store, remove and look up, under one lock (backends register from any
 * thread). It knows no backend; registry.c fills it, through the transfer
 * engine (engine.c), so that the table in use is the process's. */

#include "device/device.h"
#include "base/platform.h"

#include <pthread.h>
#include <string.h>

static pyxbuf_backend backends[PYXBUF__MAX_DEVICE_TYPES];
static int backend_present[PYXBUF__MAX_DEVICE_TYPES];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

#if PYXBUF_HAVE_FORK
/* A child must not start with the lock held by a thread it does not have:
 * registered (once) before the lock is first taken. */
static void before_fork(void) { pthread_mutex_lock(&table_lock); }
static void after_fork(void) { pthread_mutex_unlock(&table_lock); }
static void register_fork_rules(void) { pthread_atfork(before_fork, after_fork, after_fork); }
#else
static void register_fork_rules(void) {}
#endif
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void lock_table(void) {
    pthread_once(&fork_once, register_fork_rules);
    pthread_mutex_lock(&table_lock);
}

int pyxbuf__backend_check(const pyxbuf_backend *b, pyxbuf_error *err) {
    if (b == NULL || b->size < offsetof(pyxbuf_backend, host_alloc))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: backend is NULL or its size %u is too "
                             "small; set size = sizeof(pyxbuf_backend)",
                             b ? (unsigned)b->size : 0u);
    if (b->device_type < 1 || b->device_type >= PYXBUF__MAX_DEVICE_TYPES)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: device type %d is outside 1..%d",
                             (int)b->device_type, PYXBUF__MAX_DEVICE_TYPES - 1);
    if (!b->copy_to_host || !b->copy_from_host || !b->alloc || !b->free || !b->pointer_query)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: backend '%s' lacks copy_to_host, "
                             "copy_from_host, alloc, free or pointer_query",
                             b->name ? b->name : "?");
    /* A registrant whose struct predates the staging functions has none. */
    int have = b->size >= offsetof(pyxbuf_backend, alloc_async);
    int staging = have ? !!b->host_alloc + !!b->host_free + !!b->copy_async + !!b->event_query : 0;
    if (staging != 0 && (staging != 4 || !b->event_record || !b->event_destroy))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: backend '%s' has %d of host_alloc, "
                             "host_free, copy_async and event_query; give all four (with "
                             "event_record and event_destroy) or none",
                             b->name ? b->name : "?", staging);
    /* Nor one that predates the device pool functions those. Frees are
     * ordered after other streams with events, so the pool needs them. */
    int have_pool = b->size >= offsetof(pyxbuf_backend, ipc_export);
    int pool = have_pool ? !!b->alloc_async + !!b->free_async : 0;
    int trim = have_pool && b->pool_trim;
    if (pool == 1 || (pool == 0 && trim))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: backend '%s' has %d of alloc_async and "
                             "free_async%s; give both or neither (pool_trim only with them)",
                             b->name ? b->name : "?", pool, trim ? " and a pool_trim" : "");
    if (pool == 2 && (!b->event_record || !b->event_wait || !b->event_destroy))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: backend '%s' has alloc_async and "
                             "free_async but not event_record, event_wait and event_destroy, "
                             "which order a free after the other streams using the memory; "
                             "give all three",
                             b->name ? b->name : "?");
    int have_ipc = b->size >= sizeof(pyxbuf_backend);
    int ipc = have_ipc ? !!b->ipc_export + !!b->ipc_open + !!b->ipc_close : 0;
    if (ipc != 0 && ipc != 3)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: backend '%s' has %d of ipc_export, "
                             "ipc_open and ipc_close; give all three or none",
                             b->name ? b->name : "?", ipc);
    return 0;
}

/* Store under table_lock unless `keep` and the type has a backend already. */
static int store(const pyxbuf_backend *backend, int keep) {
    if (pyxbuf__backend_check(backend, NULL) < 0) return PYXBUF_EINVAL;
    lock_table();
    if (keep && backend_present[backend->device_type]) {
        pthread_mutex_unlock(&table_lock);
        return 0;
    }
    memset(&backends[backend->device_type], 0, sizeof(pyxbuf_backend));
    size_t n = backend->size < sizeof(pyxbuf_backend) ? backend->size : sizeof(pyxbuf_backend);
    memcpy(&backends[backend->device_type], backend, n);
    backends[backend->device_type].size = (uint32_t)sizeof(pyxbuf_backend);
    backend_present[backend->device_type] = 1;
    pthread_mutex_unlock(&table_lock);
    return 0;
}

int pyxbuf__own_backend_store(const pyxbuf_backend *backend) { return store(backend, 0); }

int pyxbuf__own_backend_store_if_absent(const pyxbuf_backend *backend) {
    return store(backend, 1);
}

int pyxbuf__own_backend_remove(int32_t device_type) {
    if (device_type < 1 || device_type >= PYXBUF__MAX_DEVICE_TYPES) return PYXBUF_EINVAL;
    lock_table();
    int was = backend_present[device_type];
    backend_present[device_type] = 0;
    pthread_mutex_unlock(&table_lock);
    return was ? 0 : PYXBUF_EINVAL;
}

int pyxbuf__own_backend_lookup(int32_t device_type, pyxbuf_backend *out) {
    int found = 0;
    lock_table();
    if (device_type >= 1 && device_type < PYXBUF__MAX_DEVICE_TYPES &&
        backend_present[device_type]) {
        *out = backends[device_type];
        found = 1;
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}
