/* engine.c -- one transfer engine per process: the table of this copy's
 * backend table, configuration, pinned pool and fill threads, which copy's
 * table is in use (device.h says how that is decided), and the entry points
 * that call through it, public (the configuration, the pool's statistics
 * and trim) and private (the rest of the device layer's). */

#include "device/device.h"
#include "base/platform.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#if PYXBUF_HAVE_FORK
/* A child must not start with the device-block index's lock held by a
 * thread it does not have. Registered by the copy whose engine is in use
 * (resolve): once per lock, whatever the number of copies. */
static void before_fork(void) { pthread_mutex_lock(&pyxbuf__own_device_blocks.lock); }
static void after_fork(void) { pthread_mutex_unlock(&pyxbuf__own_device_blocks.lock); }
static void register_fork_rules(void) { pthread_atfork(before_fork, after_fork, after_fork); }
#else
static void register_fork_rules(void) {}
#endif
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

const pyxbuf__engine pyxbuf__own_engine = {
    .version = PYXBUF__ENGINE_VERSION,
    .size = (uint32_t)sizeof(pyxbuf__engine),
    .layout = PYXBUF__ENGINE_LAYOUT,
    .backend_size = (uint32_t)sizeof(pyxbuf_backend),
    .config_size = (uint32_t)sizeof(pyxbuf_transfer_config),
    .block_size = (uint32_t)sizeof(pyxbuf__pinned_block),
    .stats_size = (uint32_t)sizeof(pyxbuf_pinned_pool_stats),
    .installer_version = PYXBUF__VERSION_TEXT,
    .backend_store = pyxbuf__own_backend_store,
    .backend_store_if_absent = pyxbuf__own_backend_store_if_absent,
    .backend_remove = pyxbuf__own_backend_remove,
    .backend_lookup = pyxbuf__own_backend_lookup,
    .config_get = pyxbuf__own_transfer_config,
    .config_set = pyxbuf__own_transfer_config_set,
    .staging_huge_pages = pyxbuf__own_staging_huge_pages,
    .pinned_take = pyxbuf__own_pinned_take,
    .pinned_give = pyxbuf__own_pinned_give,
    .pinned_contains = pyxbuf__own_pinned_contains,
    .pinned_pool_fit = pyxbuf__own_pinned_pool_fit,
    .pinned_pool_stats = pyxbuf__own_pinned_pool_stats,
    .parallel_copy = pyxbuf__own_parallel_copy,
    .fill_threads = pyxbuf__own_fill_threads,
    .device_blocks = &pyxbuf__own_device_blocks,
    .device_block_size = (uint32_t)sizeof(pyxbuf__device_block),
    .device_blocks_size = (uint32_t)sizeof(pyxbuf__device_blocks),
    .pinned_take_idle = pyxbuf__own_pinned_take_idle,
    .pinned_grow = pyxbuf__own_pinned_grow,
    .device_block_new = pyxbuf__own_device_block_new,
    .device_block_free = pyxbuf__own_device_block_free,
    .device_block_view_released = pyxbuf__own_device_block_view_released,
    .device_block_used_on = pyxbuf__own_device_block_used_on,
    .device_blocks_kept_out = pyxbuf__own_device_blocks_kept_out,
};

/* Set once, for good, by the first call (threads may race to it: the
 * first compare-exchange wins and every thread uses what it set). Read
 * without the GIL by copies and fill paths: an atomic. */
static _Atomic(const pyxbuf__engine *) in_use;

int pyxbuf__engine_usable(const pyxbuf__engine *e, char *why, size_t cap) {
    const pyxbuf__engine *own = &pyxbuf__own_engine;
    if (e == own) return 1;
    const char *v = e->version >= 1 && e->installer_version ? e->installer_version : "?";
    if (e->version < 1 || e->size < own->size)
        snprintf(why, cap, "pyxbuf %s installed it, older than this copy (%s) can use", v,
                 own->installer_version);
    else if (e->layout != own->layout || e->backend_size != own->backend_size ||
             e->config_size != own->config_size || e->block_size != own->block_size ||
             e->stats_size != own->stats_size || e->device_block_size != own->device_block_size ||
             e->device_blocks_size != own->device_blocks_size)
        snprintf(why, cap,
                 "pyxbuf %s installed it with layout %u (backend %u, configuration %u, block %u "
                 "bytes), which this copy (%s, layout %u: %u, %u, %u) cannot share",
                 v, (unsigned)e->layout, (unsigned)e->backend_size, (unsigned)e->config_size,
                 (unsigned)e->block_size, own->installer_version, (unsigned)own->layout,
                 (unsigned)own->backend_size, (unsigned)own->config_size,
                 (unsigned)own->block_size);
    else
        return 1;
    return 0;
}

/* The published engine if this copy can use it, else its own (and a
 * RuntimeWarning saying why, once: only the first call gets here). Under
 * the GIL. */
static const pyxbuf__engine *find_published(void) {
    PyObject *capsule = pyxbuf__shared_capsule("ENGINE", PYXBUF__ENGINE_CAPSULE,
                                               (void *)&pyxbuf__own_engine);
    const pyxbuf__engine *e =
        capsule ? PyCapsule_GetPointer(capsule, PYXBUF__ENGINE_CAPSULE) : NULL;
    Py_XDECREF(capsule);
    char why[PYXBUF_ERROR_MESSAGE_SIZE] = "";
    if (e == NULL) {
        PyObject *exc = PyErr_GetRaisedException();
        PyObject *text = exc ? PyObject_Str(exc) : NULL;
        snprintf(why, sizeof why, "%s", text ? PyUnicode_AsUTF8(text) : "it could not be read");
        Py_XDECREF(text);
        Py_XDECREF(exc);
        PyErr_Clear();
    } else if (pyxbuf__engine_usable(e, why, sizeof why)) {
        return e;
    }
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "pyxbuf %s keeps its own transfer engine (pinned pool, fill threads, "
                         "configuration, device backends) beside the process's: %s",
                         pyxbuf__own_engine.installer_version, why) < 0)
        PyErr_WriteUnraisable(NULL); /* warnings are errors here: say it anyway */
    return &pyxbuf__own_engine;
}

static PYXBUF_COLD const pyxbuf__engine *resolve(void) {
    const pyxbuf__engine *found = &pyxbuf__own_engine;
    /* Without a running interpreter (a C program) there is nothing to share
     * through; at shutdown, nothing to wait for. Otherwise the GIL is taken
     * if this thread does not hold it: no pyxbuf lock is held here. */
    if (Py_IsInitialized() && !Py_IsFinalizing()) {
        PyGILState_STATE g = PyGILState_Ensure();
        PyObject *exc = PyErr_GetRaisedException(); /* a caller's pending error survives */
        found = find_published();
        PyErr_SetRaisedException(exc);
        PyGILState_Release(g);
    }
    /* Before this copy's engine is in use (and another copy can take its
     * index's lock), once: concurrent first calls may both get here. */
    if (found == &pyxbuf__own_engine) pthread_once(&fork_once, register_fork_rules);
    const pyxbuf__engine *expected = NULL;
    if (!atomic_compare_exchange_strong(&in_use, &expected, found)) found = expected;
    return found;
}

const pyxbuf__engine *pyxbuf__engine_in_use(void) {
    const pyxbuf__engine *e = atomic_load_explicit(&in_use, memory_order_acquire);
    return PYXBUF_LIKELY(e != NULL) ? e : resolve();
}

/* ------------------------------------------------------------------------- */
/* The device layer's entry points                                           */
/* ------------------------------------------------------------------------- */

int pyxbuf__backend_store(const pyxbuf_backend *backend) {
    return pyxbuf__engine_in_use()->backend_store(backend);
}

int pyxbuf__backend_store_if_absent(const pyxbuf_backend *backend) {
    return pyxbuf__engine_in_use()->backend_store_if_absent(backend);
}

int pyxbuf__backend_remove(int32_t device_type) {
    return pyxbuf__engine_in_use()->backend_remove(device_type);
}

int pyxbuf__backend_lookup(int32_t device_type, pyxbuf_backend *out) {
    return pyxbuf__engine_in_use()->backend_lookup(device_type, out);
}

int pyxbuf__transfer_config(pyxbuf_transfer_config *out, pyxbuf_error *err) {
    return pyxbuf__engine_in_use()->config_get(out, err);
}

int pyxbuf__staging_huge_pages(void) { return pyxbuf__engine_in_use()->staging_huge_pages(); }

pyxbuf__pinned_block *pyxbuf__pinned_take(const pyxbuf_backend *b, int32_t device_id, size_t n) {
    return pyxbuf__engine_in_use()->pinned_take(b, device_id, n);
}

pyxbuf__pinned_block *pyxbuf__pinned_take_idle(const pyxbuf_backend *b, int32_t device_id,
                                               size_t n) {
    return pyxbuf__engine_in_use()->pinned_take_idle(b, device_id, n);
}

void pyxbuf__pinned_grow(const pyxbuf_backend *b, int32_t device_id, size_t n, int32_t count) {
    pyxbuf__engine_in_use()->pinned_grow(b, device_id, n, count);
}

void pyxbuf__pinned_give(pyxbuf__pinned_block *blk, void *event) {
    pyxbuf__engine_in_use()->pinned_give(blk, event);
}

void pyxbuf__pinned_give_finished(void *blk) { pyxbuf__pinned_give(blk, NULL); }

int pyxbuf__pinned_contains(const void *p, size_t n) {
    return pyxbuf__engine_in_use()->pinned_contains(p, n);
}

void pyxbuf__pinned_pool_fit(uint64_t cap) { pyxbuf__engine_in_use()->pinned_pool_fit(cap); }

void pyxbuf__parallel_copy(void *dst, const void *src, size_t n, int32_t threads) {
    pyxbuf__engine_in_use()->parallel_copy(dst, src, n, threads);
}

/* pyxbuf's own device memory: one copy's code keeps the process's index of
 * pooled blocks, whichever copy allocated a block or took a view of it
 * (device_memory.c allocates: the backend is looked up first). */
void pyxbuf__device_block_free(void *block) { pyxbuf__engine_in_use()->device_block_free(block); }

void pyxbuf__device_block_view_released(const pyxbuf_view *view, const pyxbuf_device *device) {
    pyxbuf__engine_in_use()->device_block_view_released(view, device);
}

void pyxbuf__device_block_used_on(const pyxbuf_view *view, const pyxbuf_device *device,
                                  int64_t stream) {
    pyxbuf__engine_in_use()->device_block_used_on(view, device, stream);
}

uint64_t pyxbuf__device_blocks_kept_out(void) {
    return pyxbuf__engine_in_use()->device_blocks_kept_out();
}

/* ------------------------------------------------------------------------- */
/* The public entry points                                                   */
/* ------------------------------------------------------------------------- */

void pyxbuf_transfer_config_get(pyxbuf_transfer_config *out) {
    pyxbuf_transfer_config c;
    pyxbuf__transfer_config(&c, NULL);
    uint32_t n = out->size >= sizeof c || out->size == 0 ? (uint32_t)sizeof c : out->size;
    memcpy(out, &c, n);
    out->size = n;
}

int pyxbuf_transfer_config_check(pyxbuf_error *err) {
    pyxbuf_transfer_config c;
    return pyxbuf__transfer_config(&c, err);
}

int pyxbuf_transfer_config_set(const pyxbuf_transfer_config *in, pyxbuf_error *err) {
    if (in == NULL || in->size < offsetof(pyxbuf_transfer_config, reserved))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_transfer_config_set: config is NULL or its size %u is too "
                             "small; start from pyxbuf_transfer_config_get",
                             in ? (unsigned)in->size : 0u);
    /* A whole configuration of this layout: fields the caller's struct
     * lacks are zero (their defaults), reserved space stays zero. */
    pyxbuf_transfer_config c;
    memset(&c, 0, sizeof c);
    memcpy(&c, in, in->size < sizeof c ? in->size : sizeof c);
    memset(c.reserved, 0, sizeof c.reserved);
    c.size = (uint32_t)sizeof c;
    return pyxbuf__engine_in_use()->config_set(&c, err);
}

void pyxbuf_pinned_pool_stats_get(pyxbuf_pinned_pool_stats *out) {
    const pyxbuf__engine *e = pyxbuf__engine_in_use();
    e->pinned_pool_stats(out);
    out->fill_threads = (uint64_t)e->fill_threads();
}

void pyxbuf_pinned_pool_trim(void) { pyxbuf__pinned_pool_fit(0); }
