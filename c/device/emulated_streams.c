/* emulated_streams.c -- the emulated device's streams (see emulated.h):
 * deterministic queues of operations, run only when something orders work
 * after them; and the backend's functions built on them (copies, events,
 * synchronisation, allocation and the stream-ordered pool, page-locked host
 * memory). Below emulated.c, above emulated_memory.c
 * (emulated_internal.h). */
#include "device/emulated_internal.h"

#include <stdlib.h>
#include <string.h>
#if defined(Py_LIMITED_API)
#include <dlfcn.h>
#endif

static stream streams[MAX_STREAMS]; /* handle h < DEFAULT_STREAMS: per-device default */
static stream default_streams[PYXBUF_EMULATED_MAX_DEVICES];
int64_t emu_live_allocations = 0;
int64_t emu_live_host_allocations = 0;
int64_t emu_host_allocations_with_gil = 0;
int64_t emu_copy_async_budget = -1;

/* ------------------------------------------------------------------------- */
/* Queues                                                                    */
/* ------------------------------------------------------------------------- */

static stream *find_stream(int32_t id, int64_t handle) {
    if (handle >= 0 && handle < DEFAULT_STREAMS) return &default_streams[id];
    if (handle < 0 || handle >= MAX_STREAMS + DEFAULT_STREAMS) return NULL;
    stream *s = &streams[handle - DEFAULT_STREAMS];
    return s->used && s->device_id == id ? s : NULL;
}

static void release_event(event *ev) {
    if (ev != NULL && --ev->refs == 0) free(ev);
}

static void run_stream(stream *s);
static void run_until(event *ev);

static void run_op(op *o) {
    switch (o->kind) {
    case OP_WRITE:
        emu_touch(o->dst, o->n, 1);
        memcpy(o->dst, o->data, o->n);
        break;
    case OP_COPY:
        emu_touch(o->dst, o->n, 1); /* no-op for host memory */
        emu_touch(o->data, o->n, 0);
        memcpy(o->dst, o->data, o->n);
        o->data = NULL; /* not the op's to free */
        break;
    case OP_RECORD:
        o->ev->done = 1;
        o->ev->on = NULL;
        break;
    case OP_FREE: /* what runs after it is the next owner's: fresh memory */
        o->blk->pending_frees--;
        o->blk->fresh = 1;
        break;
    case OP_WAIT: run_until(o->ev); break;
    }
    free(o->data);
    release_event(o->ev);
    free(o);
}

/* Run the event's own stream until it has happened, as a device runs the
 * work an event waits for and nothing else; every queue only when that
 * stream is being drained already (an OP_WAIT inside it). */
static void run_until(event *ev) {
    if (!ev->done && ev->on != NULL) run_stream(ev->on);
    for (int i = 0; !ev->done && i < PYXBUF_EMULATED_MAX_DEVICES; i++)
        run_stream(&default_streams[i]);
    for (int i = 0; !ev->done && i < MAX_STREAMS; i++)
        if (streams[i].used) run_stream(&streams[i]);
}

/* A stream already being drained is left to its own loop: an OP_WAIT that
 * runs every queue must not run the operations queued after itself on its
 * own stream before the event it waits for. */
static void run_stream(stream *s) {
    if (s->running) return;
    s->running = 1;
    while (s->head != NULL) {
        op *o = s->head;
        s->head = o->next;
        if (s->head == NULL) s->tail = NULL;
        run_op(o);
    }
    s->running = 0;
}

static int enqueue(stream *s, op *o) {
    o->next = NULL;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    return 0;
}

static int no_stream(int32_t id, int64_t handle, pyxbuf_error *err) {
    return emu_error(err, PYXBUF_EDEVICE, "emulated: no stream %lld on emulated device %d",
                     (long long)handle, (int)id);
}

/* ------------------------------------------------------------------------- */
/* Allocation                                                                */
/* ------------------------------------------------------------------------- */

static int td_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    block *b = NULL;
    int rc = emu_check_id(id, err);
    if (rc == 0) rc = emu_allocate(id, n, &b, err);
    if (rc == 0) {
        *ptr = emu_devices[id].guarded + b->offset;
        emu_live_allocations++;
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

/* A plain free of pool memory whose earlier free is still queued (it was
 * handed out again on the same stream) waits for that stream, as cuMemFree
 * synchronises: the queued free must not outlive its block. */
static int td_free(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int ok = id >= 0 && id < PYXBUF_EMULATED_MAX_DEVICES && emu_devices[id].ready;
    block *b = ok ? emu_live_block(id, ptr) : NULL;
    if (b != NULL) {
        if (b->pending_frees > 0) run_stream(b->freed_on);
        emu_release_block(&emu_devices[id], b);
        emu_live_allocations--;
    }
    pthread_mutex_unlock(&emu_lock);
    return b != NULL ? 0 : emu_not_live(id, ptr, err);
}

/* ------------------------------------------------------------------------- */
/* Copies, events, synchronisation                                           */
/* ------------------------------------------------------------------------- */

/* Copies first run what is queued on their stream: they are ordered after it. */
static int td_copy(int32_t id, int64_t handle, char *dst_host, const char *src_host,
                   const void *dev, size_t n, int to_host, pyxbuf_error *err) {
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    stream *s = rc == 0 && handle != PYXBUF_STREAM_NONE ? find_stream(id, handle) : NULL;
    char *b = rc == 0 ? emu_backing_of(id, dev, n) : NULL;
    if (rc == 0 && handle != PYXBUF_STREAM_NONE && s == NULL) rc = no_stream(id, handle, err);
    else if (rc == 0 && b == NULL) rc = emu_bad_address(id, dev, n, err);
    if (rc == 0) {
        if (s) run_stream(s);
        emu_touch(b, n, !to_host);
        if (to_host) memcpy(dst_host, b, n);
        else memcpy(b, src_host, n);
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

static int td_copy_to_host(void *ctx, int32_t id, void *dst, const void *src, size_t n,
                           int64_t stream_handle, pyxbuf_error *err) {
    (void)ctx;
    return td_copy(id, stream_handle, dst, NULL, src, n, 1, err);
}

static int td_copy_from_host(void *ctx, int32_t id, void *dst, const void *src, size_t n,
                             int64_t stream_handle, pyxbuf_error *err) {
    (void)ctx;
    return td_copy(id, stream_handle, NULL, src, dst, n, 0, err);
}

static int td_copy_on_device(void *ctx, int32_t dst_id, void *dst, int32_t src_id, const void *src,
                             size_t n, int64_t stream_handle, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(dst_id, err);
    if (rc == 0) rc = emu_check_id(src_id, err);
    /* A copy between devices is ordered after the work queued on the stream on
     * either side (the consumer's wait sits on the source's stream). */
    int ordered = rc == 0 && stream_handle != PYXBUF_STREAM_NONE;
    stream *s = ordered ? find_stream(dst_id, stream_handle) : NULL;
    stream *s_src = ordered ? find_stream(src_id, stream_handle) : NULL;
    if (s == NULL) s = s_src;
    if (s_src == s) s_src = NULL;
    char *d = rc == 0 ? emu_backing_of(dst_id, dst, n) : NULL;
    char *from = rc == 0 ? emu_backing_of(src_id, src, n) : NULL;
    if (rc == 0 && stream_handle != PYXBUF_STREAM_NONE && s == NULL)
        rc = no_stream(dst_id, stream_handle, err);
    else if (rc == 0 && d == NULL) rc = emu_bad_address(dst_id, dst, n, err);
    else if (rc == 0 && from == NULL) rc = emu_bad_address(src_id, src, n, err);
    if (rc == 0) {
        if (s_src) run_stream(s_src);
        if (s) run_stream(s);
        emu_touch(from, n, 0);
        emu_touch(d, n, 1);
        memmove(d, from, n);
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

static int td_event_record(void *ctx, int32_t id, int64_t handle, void **out, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    event *ev = NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    if (rc == 0) {
        ev = calloc(1, sizeof *ev);
        o = calloc(1, sizeof *o);
        if (ev == NULL || o == NULL) rc = emu_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    }
    if (rc == 0 && s->head == NULL) {
        /* An idle stream: the event has happened, as a real device says at
         * once. Queueing it would grow a queue nobody ever runs (a default
         * stream that only records). */
        ev->done = 1;
        ev->refs = 1;
        free(o);
        *out = ev;
    } else if (rc == 0) {
        ev->refs = 2; /* the handle and the queued record */
        ev->on = s;
        *o = (op){OP_RECORD, NULL, NULL, 0, ev, NULL, NULL};
        enqueue(s, o);
        *out = ev;
    } else {
        free(ev);
        free(o);
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

static int td_event_wait(void *ctx, int32_t id, void *ev, int64_t handle, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    if (rc == 0 && ((event *)ev)->done) {
        pthread_mutex_unlock(&emu_lock); /* waiting for what has happened: nothing to queue */
        return 0;
    }
    if (rc == 0 && (o = calloc(1, sizeof *o)) == NULL)
        rc = emu_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    if (rc == 0) {
        ((event *)ev)->refs++;
        *o = (op){OP_WAIT, NULL, NULL, 0, ev, NULL, NULL};
        enqueue(s, o); /* lazy: runs when this stream runs */
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

static int td_event_destroy(void *ctx, int32_t id, void *ev, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    pthread_mutex_lock(&emu_lock);
    release_event(ev);
    pthread_mutex_unlock(&emu_lock);
    return 0;
}

/* What the pool keeps across a synchronisation: the configuration's release
 * threshold (read before taking the device's lock). */
static uint64_t release_threshold(void) {
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    return c.device_pool_release_threshold ? c.device_pool_release_threshold
                                           : PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD_DEFAULT;
}

static int td_synchronize(void *ctx, int32_t id, int64_t handle, pyxbuf_error *err) {
    (void)ctx;
    uint64_t keep = release_threshold();
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    if (rc == 0) {
        run_stream(s);
        emu_release_idle(&emu_devices[id], keep);
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* The stream-ordered pool (its rules: emulated_memory.c)                    */
/* ------------------------------------------------------------------------- */

static stream *pool_stream(int32_t id, int64_t handle) {
    return find_stream(id, handle == PYXBUF_STREAM_NONE ? 0 : handle);
}

static int td_alloc_async(void *ctx, int32_t id, size_t n, int64_t handle, void **ptr,
                          pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    stream *s = rc == 0 ? pool_stream(id, handle) : NULL;
    block *b = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    if (rc == 0) rc = emu_pool_take(id, n, s, &b, err);
    if (rc == 0) {
        emu_devices[id].pool.allocations++;
        emu_live_allocations++;
        *ptr = emu_devices[id].guarded + b->offset;
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

static int td_free_async(void *ctx, int32_t id, void *ptr, int64_t handle, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    stream *s = rc == 0 ? pool_stream(id, handle) : NULL;
    block *b = rc == 0 ? emu_live_block(id, ptr) : NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    else if (rc == 0 && b == NULL) rc = emu_not_live(id, ptr, err);
    else if (rc == 0 && !b->pooled)
        rc = emu_error(err, PYXBUF_EINVAL, "emulated: %p on emulated device %d came from alloc, "
                       "not alloc_async: give it back with free", ptr, (int)id);
    else if (rc == 0 && s->head != NULL && (o = calloc(1, sizeof *o)) == NULL)
        rc = emu_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    if (rc == 0) {
        b->cached = 1;
        b->freed_on = s;
        emu_devices[id].pool.cached += b->size;
        emu_live_allocations--;
        if (o == NULL) {
            b->fresh = 1; /* an idle stream passes the free at once */
        } else {
            b->pending_frees++;
            *o = (op){.kind = OP_FREE, .blk = b};
            enqueue(s, o);
        }
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

static int td_pool_trim(void *ctx, int32_t id, uint64_t keep, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    if (rc == 0) emu_release_idle(&emu_devices[id], keep);
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* Page-locked host memory and asynchronous copies                           */
/* ------------------------------------------------------------------------- */

/* Whether this thread holds the GIL (an attached thread state, on
 * free-threaded builds). Not PyGILState_Check: it answers 1 whenever
 * sub-interpreters have existed in the process. */
static int attached_to_python(void) {
    if (!Py_IsInitialized()) return 0;
#if defined(Py_LIMITED_API)
    /* (Built into a limited-API library: Rust's emulated-device feature.)
     * The interpreter's own unchecked getter, found by name: 3.13's, else
     * 3.11 and 3.12's; neither is in the limited API. */
    typedef PyThreadState *(*state_getter)(void);
    static state_getter get;
    if (__atomic_load_n(&get, __ATOMIC_RELAXED) == NULL) {
        void *f = dlsym(RTLD_DEFAULT, "PyThreadState_GetUnchecked");
        if (f == NULL) f = dlsym(RTLD_DEFAULT, "_PyThreadState_UncheckedGet");
        if (f == NULL) return PyGILState_GetThisThreadState() != NULL;
        __atomic_store_n(&get, (state_getter)(uintptr_t)f, __ATOMIC_RELAXED);
    }
    PyThreadState *current = __atomic_load_n(&get, __ATOMIC_RELAXED)();
    if (Py_Version >= 0x030C0000) return current != NULL; /* this thread's (thread-local) */
    PyThreadState *mine = PyGILState_GetThisThreadState();
    return mine != NULL && mine == current; /* 3.11: see below */
#elif PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked() != NULL;
#elif PY_VERSION_HEX >= 0x030C0000
    return _PyThreadState_UncheckedGet() != NULL; /* this thread's (thread-local) */
#else
    /* 3.11's is the process's current thread state, whichever thread holds
     * the GIL: this thread holds it when that state is its own. */
    PyThreadState *mine = PyGILState_GetThisThreadState();
    return mine != NULL && mine == _PyThreadState_UncheckedGet();
#endif
}

/* "Page-locked" host memory: ordinary memory here (the emulated device copies
 * any host memory); counted, so tests see the pinned pool free what it took. */
static int td_host_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    if (rc == 0 && (*ptr = malloc(n ? n : 1)) == NULL)
        rc = emu_error(err, PYXBUF_ENOMEM, "emulated: cannot allocate %zu host bytes", n);
    if (rc == 0) emu_live_host_allocations++;
    if (rc == 0 && attached_to_python()) emu_host_allocations_with_gil++;
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

static int td_host_free(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    if (ptr == NULL) return 0;
    free(ptr);
    pthread_mutex_lock(&emu_lock);
    emu_live_host_allocations--;
    pthread_mutex_unlock(&emu_lock);
    return 0;
}

/* Queued like a kernel: it runs when its stream runs (see OP_COPY). */
static int td_copy_async(void *ctx, int32_t id, int32_t to_host, void *dst, const void *src,
                         size_t n, int64_t handle, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    const void *dev = to_host ? src : dst;
    char *b = rc == 0 ? emu_backing_of(id, dev, n) : NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    else if (rc == 0 && b == NULL) rc = emu_bad_address(id, dev, n, err);
    else if (rc == 0 && emu_copy_async_budget == 0)
        rc = emu_error(err, PYXBUF_EDEVICE, "emulated: injected failure of an asynchronous copy "
                       "of %zu bytes (pyxbuf_emulated_fail_copies_after)", n);
    if (rc == 0 && emu_copy_async_budget > 0) emu_copy_async_budget--;
    if (rc == 0 && (o = calloc(1, sizeof *o)) == NULL)
        rc = emu_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    if (rc == 0) {
        *o = to_host ? (op){OP_COPY, dst, b, n, NULL, NULL, NULL}
                     : (op){OP_COPY, b, (char *)src, n, NULL, NULL, NULL};
        enqueue(s, o);
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

/* Not done until something runs its stream; `wait` runs that stream until
 * it is (as OP_WAIT does), and is a synchronisation for the pool. */
static int td_event_query(void *ctx, int32_t id, void *ev, int32_t wait, pyxbuf_error *err) {
    (void)ctx;
    uint64_t keep = wait ? release_threshold() : 0;
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    event *e = ev;
    if (rc == 0 && wait) {
        run_until(e);
        emu_release_idle(&emu_devices[id], keep); /* a synchronisation, as cuEventSynchronize */
    }
    if (rc == 0) rc = e->done;
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

void emu_backend_functions(pyxbuf_backend *b) {
    b->copy_to_host = td_copy_to_host;
    b->copy_from_host = td_copy_from_host;
    b->copy_on_device = td_copy_on_device;
    b->alloc = td_alloc;
    b->free = td_free;
    b->event_wait = td_event_wait;
    b->event_record = td_event_record;
    b->event_destroy = td_event_destroy;
    b->synchronize = td_synchronize;
    b->host_alloc = td_host_alloc;
    b->host_free = td_host_free;
    b->copy_async = td_copy_async;
    b->event_query = td_event_query;
    b->alloc_async = td_alloc_async;
    b->free_async = td_free_async;
    b->pool_trim = td_pool_trim;
    b->ipc_export = emu_backend_ipc_export;
    b->ipc_open = emu_backend_ipc_open;
    b->ipc_close = emu_backend_ipc_close;
}

/* ------------------------------------------------------------------------- */
/* The helpers of emulated.h that work on streams                            */
/* ------------------------------------------------------------------------- */

int emu_stream_create(int32_t id, int64_t *handle, pyxbuf_error *err) {
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    int slot = -1;
    for (int i = 0; rc == 0 && i < MAX_STREAMS && slot < 0; i++)
        if (!streams[i].used) slot = i;
    if (rc == 0 && slot < 0)
        rc = emu_error(err, PYXBUF_ENOMEM, "emulated: all %d streams are in use", MAX_STREAMS);
    if (rc == 0) {
        streams[slot] = (stream){1, 0, id, NULL, NULL};
        *handle = slot + DEFAULT_STREAMS;
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

int emu_stream_destroy(int64_t handle, pyxbuf_error *err) {
    pthread_mutex_lock(&emu_lock);
    int rc = 0;
    if (handle < DEFAULT_STREAMS || handle >= MAX_STREAMS + DEFAULT_STREAMS ||
        !streams[handle - DEFAULT_STREAMS].used) {
        rc = emu_error(err, PYXBUF_EINVAL, "emulated: no stream %lld to destroy",
                       (long long)handle);
    } else {
        stream *s = &streams[handle - DEFAULT_STREAMS];
        run_stream(s); /* like cuStreamDestroy: queued work still completes */
        s->used = 0;
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

int emu_enqueue_write(int32_t id, int64_t handle, void *dst, const void *src, size_t n,
                      pyxbuf_error *err) {
    pthread_mutex_lock(&emu_lock);
    int rc = emu_check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    char *b = rc == 0 ? emu_backing_of(id, dst, n) : NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    else if (rc == 0 && b == NULL) rc = emu_bad_address(id, dst, n, err);
    if (rc == 0) {
        o = calloc(1, sizeof *o);
        char *data = malloc(n ? n : 1);
        if (o == NULL || data == NULL) {
            free(o);
            free(data);
            rc = emu_error(err, PYXBUF_ENOMEM, "emulated: OOM");
        } else {
            memcpy(data, src, n);
            *o = (op){OP_WRITE, b, data, n, NULL, NULL, NULL};
            enqueue(s, o);
        }
    }
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

int64_t emu_pending(int32_t id, int64_t handle) {
    pthread_mutex_lock(&emu_lock);
    int64_t n = 0;
    stream *s = id >= 0 && id < PYXBUF_EMULATED_MAX_DEVICES ? find_stream(id, handle) : NULL;
    for (op *o = s ? s->head : NULL; o != NULL; o = o->next) n++;
    pthread_mutex_unlock(&emu_lock);
    return n;
}
