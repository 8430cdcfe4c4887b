/* device_alloc.c -- pyxbuf's own device memory (to_device results, device
 * exporters): from the backend's stream-ordered pool where it has one and
 * the configuration's device_pool_off is 0, else its alloc/free; and the
 * streams the memory was handed to, so that its free is ordered after them.
 *
 * The rule, applied where the memory is freed (pyxbuf__device_block_free,
 * when its exporter dies): a pooled block goes back with free_async on the
 * stream it was allocated on, after that stream has been made to wait for
 * every other stream the memory was handed to -- a stream named to
 * pyxbuf_get_stream or pyxbuf_device_wait for a view of it, so
 * __dlpack__(stream=T) too. For each such stream T an event is recorded on
 * T when the view that named it is released (pyxbuf_release: the consumer's
 * work queued on T so far is what it used the memory for, and T may be
 * destroyed after), or at the free when that view is still held. That is
 * PyTorch's record_stream, done for the consumer, with no device-wide
 * synchronisation. Work on a stream pyxbuf was never told of is the
 * consumer's to finish before it lets go (as with PyTorch's caching
 * allocator and CuPy's pool); the allocation stream must still exist when
 * the memory is freed (as cuMemFreeAsync requires). When an event cannot be
 * recorded or waited for, or the free fails, the block is kept out of the
 * pool for good (counted) rather than freed early: a leak, never a reuse
 * under work still queued. Views are found by the address they start at
 * (pyxbuf's exporters hand out the block's first byte), in one index per
 * process: these functions are the engine's (engine.c routes every copy of
 * libpyxbuf to the serving copy's), so a view taken through any copy finds
 * a block any copy allocated, and one copy's code alone walks the index. */

#include "device/device.h"

#include <pthread.h>
#include <stdlib.h>

/* Pooled blocks by address, so that a view's stream can be noted on the
 * block behind it: this copy's index (device.h), which serves the process
 * when this copy's engine does (engine.c registers its lock's fork rules).
 * Only pooled blocks are there: a plain free is the backend's own business
 * (cuMemFree synchronises). */
pyxbuf__device_blocks pyxbuf__own_device_blocks = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pyxbuf__device_blocks *blocks_index(void) { return &pyxbuf__own_device_blocks; }

static size_t bucket_of(const void *p) {
    uintptr_t u = (uintptr_t)p;
    return (size_t)((u >> 8) ^ (u >> 20)) % PYXBUF__DEVICE_BLOCK_BUCKETS;
}

/* DLPack's per-thread default stream (2) of CUDA and ROCm is a different
 * stream on each thread, and an exporter dies on any: pool work for it goes
 * to the legacy default stream (1), which every thread's per-thread stream
 * is ordered with. PYXBUF_STREAM_NONE means the default stream. */
static int64_t pool_stream(const pyxbuf_device *d, int64_t stream) {
    if (stream == PYXBUF_STREAM_NONE) return PYXBUF_STREAM_DEFAULT;
    int dlpack_streams = d->device_type == PYXBUF_DL_CUDA || d->device_type == PYXBUF_DL_ROCM;
    return dlpack_streams && stream == 2 ? 1 : stream;
}

/* The backend first: host memory (the CPU backend has no pool) reads no
 * configuration. This copy's is the process's: these functions run in the
 * copy whose engine serves it. */
static int pool_wanted(const pyxbuf_backend *b) {
    if (b->alloc_async == NULL || b->free_async == NULL) return 0;
    pyxbuf_transfer_config c;
    pyxbuf__own_transfer_config(&c, NULL); /* a bad environment: the defaults (pool on) */
    return !c.device_pool_off;
}

static void remember(pyxbuf__device_block *b) {
    pyxbuf__device_blocks *x = blocks_index();
    pthread_mutex_lock(&x->lock);
    size_t k = bucket_of(b->ptr);
    b->next = x->by_address[k];
    x->by_address[k] = b;
    pthread_mutex_unlock(&x->lock);
}

static void forget(pyxbuf__device_block *b) {
    pyxbuf__device_blocks *x = blocks_index();
    pthread_mutex_lock(&x->lock);
    pyxbuf__device_block **at = &x->by_address[bucket_of(b->ptr)];
    while (*at != NULL && *at != b) at = &(*at)->next;
    if (*at != NULL) *at = b->next;
    pthread_mutex_unlock(&x->lock);
}

int pyxbuf__own_device_block_new(const pyxbuf_backend *backend, const pyxbuf_device *device,
                                 size_t n, int64_t stream, pyxbuf__device_block **out,
                                 pyxbuf_error *err) {
    pyxbuf__device_block *b = calloc(1, sizeof *b);
    if (b == NULL)
        return pyxbuf__error(err, PYXBUF_ENOMEM, -1, "out of memory allocating %zu device %s", n,
                             PYXBUF__PLURAL(n, "byte", "bytes"));
    b->backend = *backend;
    b->device = *device;
    b->stream = pool_stream(device, stream);
    b->pooled = pool_wanted(&b->backend);
    int rc = b->pooled ? b->backend.alloc_async(b->backend.ctx, device->device_id, n, b->stream,
                                                &b->ptr, err)
                       : b->backend.alloc(b->backend.ctx, device->device_id, n, &b->ptr, err);
    if (rc != 0) {
        free(b);
        return rc;
    }
    if (b->pooled) remember(b);
    *out = b;
    return 0;
}

/* Room for one more of *n items in the array *items of *cap (doubling, at
 * most 4096); 0 when there is none (the free can no longer be ordered). */
static int room(void **items, int32_t n, int32_t *cap, size_t size) {
    if (n < *cap) return 1;
    int32_t grown = *cap ? 2 * *cap : 4;
    void *more = grown <= 4096 ? realloc(*items, (size_t)grown * size) : NULL;
    if (more == NULL) return 0;
    *items = more;
    *cap = grown;
    return 1;
}

/* The use of `stream`, added when new; NULL when there is no room. */
static pyxbuf__stream_use *use_of(pyxbuf__device_block *b, int64_t stream) {
    for (int32_t i = 0; i < b->nuses; i++)
        if (b->uses[i].stream == stream) return &b->uses[i];
    if (!room((void **)&b->uses, b->nuses, &b->ucap, sizeof *b->uses)) return NULL;
    b->uses[b->nuses] = (pyxbuf__stream_use){stream, NULL};
    return &b->uses[b->nuses++];
}

/* The pooled block at `ptr` of `device`, or NULL (under x->lock). */
static pyxbuf__device_block *find(pyxbuf__device_blocks *x, const pyxbuf_device *device,
                                  const void *ptr) {
    pyxbuf__device_block *b = ptr != NULL ? x->by_address[bucket_of(ptr)] : NULL;
    while (b != NULL && (b->ptr != ptr || !pyxbuf_device_same(&b->device, device))) b = b->next;
    return b;
}

/* A view's mark (its reserved[1]) says which streams it named: the tag
 * keeps whatever an unmarked view's bytes hold from passing for one, and a
 * released view's mark is found in no block. */
#define MARK_TAG ((int64_t)0x50594d << 40) /* "PYM" */

static int marked_here(const pyxbuf__device_block *b, int64_t mark) {
    for (int32_t i = 0; i < b->nnamers; i++)
        if (b->namers[i].mark == mark) return 1;
    return 0;
}

/* Whether the view marked `mark` named `stream` already (a consumer that
 * waits on the same stream once per step adds nothing). */
static int named_here(const pyxbuf__device_block *b, int64_t mark, int64_t stream) {
    for (int32_t i = 0; i < b->nnamers; i++)
        if (b->namers[i].mark == mark && b->namers[i].stream == stream) return 1;
    return 0;
}

/* The view marked `mark` named `stream` (under x->lock). */
static void note(pyxbuf__device_block *b, int64_t mark, int64_t stream) {
    if (use_of(b, stream) == NULL ||
        !room((void **)&b->namers, b->nnamers, &b->ncap, sizeof *b->namers))
        b->unordered = 1;
    else
        b->namers[b->nnamers++] = (pyxbuf__stream_namer){mark, stream};
}

void pyxbuf__own_device_block_used_on(const pyxbuf_view *view, const pyxbuf_device *device,
                                      int64_t stream) {
    if (stream < 0) return; /* PYXBUF_STREAM_NONE: no stream to order after */
    pyxbuf__device_blocks *x = blocks_index();
    pthread_mutex_lock(&x->lock);
    pyxbuf__device_block *b = find(x, device, view->base.buf);
    int64_t s = b != NULL ? pool_stream(device, stream) : 0;
    if (b != NULL && s != b->stream) {
        /* The consumer's own view: pyxbuf's bookkeeping in it is pyxbuf's. */
        pyxbuf_view *v = (pyxbuf_view *)(uintptr_t)view;
        if (!marked_here(b, v->reserved[1]))
            v->reserved[1] = MARK_TAG | (++x->marks & 0xFFFFFFFFFF);
        /* A consumer that waits on the same stream every step adds nothing. */
        if (!named_here(b, v->reserved[1], s)) note(b, v->reserved[1], s);
    }
    pthread_mutex_unlock(&x->lock);
}

/* An event after the work queued on `use` so far, replacing the one it
 * had; 0, or the backend's code (the old event then stays). */
static int record_use(const pyxbuf__device_block *b, pyxbuf__stream_use *use) {
    const pyxbuf_backend *be = &b->backend;
    int32_t id = b->device.device_id;
    void *event = NULL;
    int rc = be->event_record(be->ctx, id, use->stream, &event, NULL);
    if (rc != 0) return rc;
    if (use->event != NULL) be->event_destroy(be->ctx, id, use->event, NULL);
    use->event = event;
    return 0;
}

/* Only the streams this view named are recorded: after its last view is
 * released a consumer may destroy its stream, and a later release (someone
 * else's view) must not touch it. The events are recorded without the
 * index's lock (a backend takes its own: the two are never nested, so no
 * fork or thread finds them taken in the other order); the block stays
 * alive meanwhile, since its exporter outlives the view being released. */
#define RELEASED_MAX 16
void pyxbuf__own_device_block_view_released(const pyxbuf_view *view,
                                            const pyxbuf_device *device) {
    pyxbuf__device_blocks *x = blocks_index();
    int64_t streams[RELEASED_MAX];
    int32_t n = 0;
    pthread_mutex_lock(&x->lock);
    pyxbuf__device_block *b = find(x, device, view->base.buf);
    for (int32_t i = 0; b != NULL && i < b->nnamers;) {
        if (b->namers[i].mark != view->reserved[1]) {
            i++;
            continue;
        }
        if (n < RELEASED_MAX) streams[n++] = b->namers[i].stream;
        else b->unordered = 1; /* more streams than one release records */
        b->namers[i] = b->namers[--b->nnamers];
    }
    pthread_mutex_unlock(&x->lock);
    for (int32_t i = 0; i < n; i++) {
        void *event = NULL;
        int rc = b->backend.event_record(b->backend.ctx, b->device.device_id, streams[i], &event,
                                         NULL);
        pthread_mutex_lock(&x->lock);
        pyxbuf__stream_use *use = use_of(b, streams[i]); /* there already */
        if (rc != 0 || use == NULL) {
            b->unordered = 1;
        } else {
            void *old = use->event;
            use->event = event;
            event = old;
        }
        pthread_mutex_unlock(&x->lock);
        if (event != NULL)
            b->backend.event_destroy(b->backend.ctx, b->device.device_id, event, NULL);
    }
}

/* Make the block's stream wait for the work `use` had queued when the last
 * view that named it was released (or now, when one was not). */
static int order_after(const pyxbuf__device_block *b, pyxbuf__stream_use *use) {
    int open = use->event == NULL;
    for (int32_t i = 0; !open && i < b->nnamers; i++) open = b->namers[i].stream == use->stream;
    int rc = open ? record_use(b, use) : 0;
    const pyxbuf_backend *be = &b->backend;
    if (rc == 0) rc = be->event_wait(be->ctx, b->device.device_id, use->event, b->stream, NULL);
    return rc;
}

void pyxbuf__own_device_block_free(void *p) {
    pyxbuf__device_block *b = p;
    const pyxbuf_backend *be = &b->backend;
    int32_t id = b->device.device_id;
    if (!b->pooled) {
        be->free(be->ctx, id, b->ptr, NULL);
        free(b);
        return;
    }
    forget(b); /* found by no view now */
    int ok = !b->unordered;
    for (int32_t i = 0; ok && i < b->nuses; i++) ok = order_after(b, &b->uses[i]) == 0;
    ok = ok && be->free_async(be->ctx, id, b->ptr, b->stream, NULL) == 0;
    for (int32_t i = 0; i < b->nuses; i++)
        if (b->uses[i].event != NULL) be->event_destroy(be->ctx, id, b->uses[i].event, NULL);
    if (!ok) {
        pyxbuf__device_blocks *x = blocks_index();
        pthread_mutex_lock(&x->lock);
        x->kept_out++;
        pthread_mutex_unlock(&x->lock);
    }
    free(b->uses);
    free(b->namers);
    free(b);
}

uint64_t pyxbuf__own_device_blocks_kept_out(void) {
    pyxbuf__device_blocks *x = blocks_index();
    pthread_mutex_lock(&x->lock);
    uint64_t n = x->kept_out;
    pthread_mutex_unlock(&x->lock);
    return n;
}
