/* emulated.c -- the guarded emulated device (see emulated.h). Built into the
 * tests and the demo as libpyxbuf_emulated, registered through the public
 * pyxbuf_backend_register like any third-party backend. */
#include "device/emulated.h" /* pyxbuf.h, hence Python.h (and _GNU_SOURCE) first */

#include "base/platform.h" /* PYXBUF_HAVE_MEMFD, a macro: no library internals */

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if PYXBUF_HAVE_MEMFD
#include <sys/mman.h>
#include <unistd.h>
#endif

/* Like any third-party backend, this one uses only the public API. */
static int td_error(pyxbuf_error *err, int32_t code, const char *fmt, ...) {
    if (err == NULL) return code;
    memset(err, 0, sizeof *err);
    err->code = code;
    err->position = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

/* Address space per device. The memfd is sparse: only touched pages cost. */
#define DEVICE_BYTES ((size_t)1 << 30)
#define ALIGNMENT 256
#define MAX_STREAMS 64
#define DEFAULT_STREAMS 3 /* DLPack's 0, 1, 2 all mean the default stream */

/* ------------------------------------------------------------------------- */
/* Memory: two mappings of one memfd, and a first-fit allocator               */
/* ------------------------------------------------------------------------- */

typedef struct stream stream;

typedef struct block {
    size_t offset, size;
    int used;
    struct block *next; /* sorted by offset */
    int fresh;          /* allocated and not yet accessed: its bytes are due poison */
    /* The stream-ordered pool (alloc_async, free_async), CUDA's rules: */
    int pooled;             /* from alloc_async: counts in the pool's reserved bytes */
    int cached;             /* freed with free_async: the pool's, not the allocator's */
    int64_t pending_frees;  /* OP_FREEs of it queued and not yet run */
    stream *freed_on;       /* the stream of its latest free_async */
} block;

/* A device's pool, for pyxbuf_emulated_pool_stats_get. */
typedef struct pool_stats {
    uint64_t reserved, cached, allocations, reuses, releases;
} pool_stats;

typedef struct device {
    int ready;
    int lost;      /* a forked child could not copy it: gone */
    int fd;        /* the memfd behind both mappings */
    char *guarded; /* PROT_NONE: the addresses handed out */
    char *backing; /* read-write: what the backend touches */
    block *blocks;
    pool_stats pool;
} device;

/* ------------------------------------------------------------------------- */
/* Streams: queues of operations                                             */
/* ------------------------------------------------------------------------- */

typedef struct event {
    int done;
    int refs; /* the creator's handle plus queued operations that name it */
} event;

/* OP_WRITE: a "kernel" writing bytes captured when it was queued; OP_COPY:
 * an asynchronous copy between host memory and the device, which touches the
 * host bytes only when it runs (as a DMA engine does), so a host that refills
 * a staging buffer before the copy's event has happened sends the new bytes. */
enum op_kind { OP_WRITE, OP_RECORD, OP_WAIT, OP_COPY, OP_FREE };

typedef struct op {
    enum op_kind kind;
    char *dst; /* backing address, or host memory for a copy to the host */
    char *data; /* OP_COPY: the source (host memory, or a backing address) */
    size_t n;
    event *ev;
    struct op *next;
    block *blk; /* OP_FREE: the block freed in stream order */
} op;

struct stream {
    int used;
    int running; /* run_stream is draining it (an OP_WAIT inside runs the others) */
    int32_t device_id;
    op *head, *tail;
};

static device devices[PYXBUF_EMULATED_MAX_DEVICES];
static stream streams[MAX_STREAMS]; /* handle h < DEFAULT_STREAMS: per-device default */
static stream default_streams[PYXBUF_EMULATED_MAX_DEVICES];
static int64_t live_allocations = 0;
static int64_t live_host_allocations = 0;
static int64_t host_allocations_with_gil = 0; /* page-locking is slow: never under the GIL */
static int64_t copy_async_budget = -1; /* copies that succeed before one fails; -1: all */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#if !PYXBUF_HAVE_MEMFD
static void ensure_fork_rules(void) {} /* no memfd, no device, nothing to fork */

static int map_device(int32_t id, pyxbuf_error *err) {
    (void)id;
    return td_error(err, PYXBUF_EUNSUPPORTED,
                    "emulated: the guarded emulated device maps one memfd twice "
                    "(memfd_create, Linux); this system has none, so it is off: run the "
                    "device tests on Linux");
}
#else
/* A new sparse memfd of the device's size, or -1. */
static int new_memfd(void) {
    int fd = memfd_create("pyxbuf-emulated", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)DEVICE_BYTES) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The fork rules of a real device, whose memory a forked child never
 * shares with its parent: the lock is taken around fork() (no child starts
 * with it held by a thread it does not have), and a child's device memory
 * becomes a copy of the parent's as it was at fork() -- a new memfd holding
 * the live blocks, mapped at the same addresses -- so neither process's
 * device writes land in the other's (a MAP_SHARED memfd is shared across
 * fork). A child that cannot have its own memory loses the device: every
 * call then fails as on a device that is gone. */
static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&lock); }

static int remap_privately(device *d) {
    int fd = new_memfd();
    if (fd < 0) return -1;
    for (const block *b = d->blocks; b != NULL; b = b->next) {
        /* An idle cached block holds nothing anyone reads (it is poisoned
         * when handed out again): the child's pool keeps it, uncopied. One
         * whose free is still queued is copied, for the work before it. */
        int dead = b->cached && b->pending_frees == 0;
        size_t done = 0;
        while (b->used && !dead && done < b->size) {
            ssize_t w = pwrite(fd, d->backing + b->offset + done, b->size - done,
                               (off_t)(b->offset + done));
            if (w <= 0) {
                close(fd);
                return -1;
            }
            done += (size_t)w;
        }
    }
    void *g = mmap(d->guarded, DEVICE_BYTES, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0);
    void *k = mmap(d->backing, DEVICE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    close(d->fd);
    d->fd = fd;
    return g == MAP_FAILED || k == MAP_FAILED ? -1 : 0;
}

static void after_fork_child(void) {
    for (int i = 0; i < PYXBUF_EMULATED_MAX_DEVICES; i++)
        if (devices[i].ready && remap_privately(&devices[i]) < 0) {
            devices[i].ready = 0;
            devices[i].lost = 1;
        }
    pthread_mutex_unlock(&lock);
}

static void register_fork_rules(void) { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }
static pthread_once_t fork_rules_once = PTHREAD_ONCE_INIT;

/* Before the lock is first taken (at registration): a fork() that raced
 * the handlers' registration could copy the lock held. */
static void ensure_fork_rules(void) { pthread_once(&fork_rules_once, register_fork_rules); }

static int map_device(int32_t id, pyxbuf_error *err) {
    device *d = &devices[id];
    if (d->lost)
        return td_error(err, PYXBUF_EDEVICE, "emulated: device %d was lost in a forked child "
                        "(its memory could not be copied)", (int)id);
    if (d->ready) return 0;
    ensure_fork_rules();
    int fd = new_memfd();
    if (fd < 0) return td_error(err, PYXBUF_EDEVICE, "emulated: cannot create or size a memfd");
    void *guarded = mmap(NULL, DEVICE_BYTES, PROT_NONE, MAP_SHARED, fd, 0);
    void *backing = mmap(NULL, DEVICE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (guarded == MAP_FAILED || backing == MAP_FAILED) {
        close(fd);
        return td_error(err, PYXBUF_EDEVICE, "emulated: cannot map device memory");
    }
    d->fd = fd; /* kept: a forked child copies from it, another process may map it */
    d->guarded = guarded;
    d->backing = backing;
    d->blocks = calloc(1, sizeof(block));
    if (d->blocks == NULL) return td_error(err, PYXBUF_ENOMEM, "emulated: out of memory");
    d->blocks->size = DEVICE_BYTES;
    d->ready = 1;
    return 0;
}
#endif

static int check_id(int32_t id, pyxbuf_error *err) {
    if (id < 0 || id >= PYXBUF_EMULATED_MAX_DEVICES)
        return td_error(err, PYXBUF_EDEVICE, "emulated: no emulated device %d (ids are 0..%d)",
                        (int)id, PYXBUF_EMULATED_MAX_DEVICES - 1);
    return map_device(id, err);
}

/* The backing address of device address `p` on `id`, if n bytes fit. */
static char *backing_of(int32_t id, const void *p, size_t n) {
    device *d = &devices[id];
    const char *c = p;
    if (!d->ready || c < d->guarded || c > d->guarded + DEVICE_BYTES ||
        n > (size_t)(d->guarded + DEVICE_BYTES - c))
        return NULL;
    return d->backing + (c - d->guarded);
}

static int bad_address(int32_t id, const void *p, size_t n, pyxbuf_error *err) {
    return td_error(err, PYXBUF_EDEVICE,
                    "emulated: %zu %s at %p %s not memory of emulated device %d", n,
                    n == 1 ? "byte" : "bytes", p, n == 1 ? "is" : "are", (int)id);
}

/* Fresh memory reads as poison (PYXBUF_EMULATED_POISON), never as leftovers of
 * an earlier test. The poison is written at the first access of a fresh
 * block, not at allocation: a write that covers the block (to_device's copy)
 * leaves nothing to poison, so a copy to fresh memory is one pass over it,
 * as on a real device; any other first access poisons the bytes it does not
 * write. Every access goes through the backend (the addresses handed out are
 * PROT_NONE), so no read can see the bytes before they are poisoned. */
static void touch_device(device *d, const char *at, size_t n, int writes) {
    size_t lo = (size_t)(at - d->backing), hi = lo + n;
    for (block *b = d->blocks; b != NULL && b->offset < hi; b = b->next) {
        if (!b->fresh || b->offset + b->size <= lo) continue;
        b->fresh = 0;
        char *start = d->backing + b->offset, *end = start + b->size;
        if (!writes) {
            memset(start, PYXBUF_EMULATED_POISON, b->size);
            continue;
        }
        char *w0 = (char *)(at > start ? at : start), *w1 = (char *)(at + n < end ? at + n : end);
        memset(start, PYXBUF_EMULATED_POISON, (size_t)(w0 - start));
        memset(w1, PYXBUF_EMULATED_POISON, (size_t)(end - w1));
    }
}

/* touch_device for a backing address of any device (queued operations keep
 * only the address). */
static void touch(const char *at, size_t n, int writes) {
    for (int i = 0; i < PYXBUF_EMULATED_MAX_DEVICES; i++) {
        device *d = &devices[i];
        if (d->ready && at >= d->backing && at < d->backing + DEVICE_BYTES) {
            touch_device(d, at, n, writes);
            return;
        }
    }
}

/* The first free block of at least `size` bytes, split to fit, taken; NULL
 * when none is (*oom) or the split's record cannot be had. */
static block *carve(device *d, size_t size, int *oom) {
    block *b = d->blocks;
    while (b != NULL && (b->used || b->size < size)) b = b->next;
    *oom = b == NULL;
    if (b == NULL) return NULL;
    if (b->size > size) { /* split: the rest stays free */
        block *rest = calloc(1, sizeof *rest);
        if (rest == NULL) return NULL;
        *rest = (block){.offset = b->offset + size, .size = b->size - size, .next = b->next};
        b->size = size;
        b->next = rest;
    }
    /* fresh: poisoned at its first access, see touch() */
    *b = (block){.offset = b->offset, .size = b->size, .used = 1, .next = b->next, .fresh = 1};
    return b;
}

/* Merge every run of free blocks into one. */
static void coalesce(device *d) {
    for (block *b = d->blocks; b != NULL; b = b->next)
        while (!b->used && b->next != NULL && !b->next->used) {
            block *n = b->next;
            b->size += n->size;
            b->next = n->next;
            free(n);
        }
}

/* A cached block whose every free has run: nothing queued touches it. */
static int idle(const block *b) { return b->cached && b->pending_frees == 0; }

/* Give idle cached blocks back to the allocator until the pool reserves at
 * most `keep` bytes (what CUDA's pool does at a synchronisation above its
 * release threshold, and in cuMemPoolTrimTo). */
static void release_idle(device *d, uint64_t keep) {
    for (block *b = d->blocks; b != NULL && d->pool.reserved > keep; b = b->next) {
        if (!idle(b)) continue;
        d->pool.reserved -= b->size;
        d->pool.cached -= b->size;
        d->pool.releases++;
        *b = (block){.offset = b->offset, .size = b->size, .next = b->next};
    }
    coalesce(d);
}

static int no_room(int32_t id, size_t n, pyxbuf_error *err) {
    return td_error(err, PYXBUF_ENOMEM, "emulated: cannot allocate %zu %s on emulated device %d",
                    n, n == 1 ? "byte" : "bytes", (int)id);
}

/* Allocations are whole multiples of ALIGNMENT (at least one). */
static size_t rounded(size_t n) {
    return ((n ? n : 1) + ALIGNMENT - 1) & ~(size_t)(ALIGNMENT - 1);
}

/* A new block of n bytes on device id (checked). At the device's capacity
 * the pool's idle blocks go back to the allocator first, and the search is
 * made again: the pool never makes an allocation fail that would fit. */
static int allocate(int32_t id, size_t n, block **out, pyxbuf_error *err) {
    device *d = &devices[id];
    if (n > DEVICE_BYTES) return no_room(id, n, err);
    int oom = 0;
    block *b = carve(d, rounded(n), &oom);
    if (b == NULL && oom && d->pool.cached > 0) {
        release_idle(d, 0);
        b = carve(d, rounded(n), &oom);
    }
    if (b == NULL) return oom ? no_room(id, n, err) : td_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    *out = b;
    return 0;
}

static int td_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    block *b = NULL;
    int rc = check_id(id, err);
    if (rc == 0) rc = allocate(id, n, &b, err);
    if (rc == 0) {
        *ptr = devices[id].guarded + b->offset;
        live_allocations++;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static void run_stream(stream *s);

/* The live block (allocated, not freed) that starts at device address p. */
static block *live_block(int32_t id, const void *p) {
    size_t offset = (size_t)((const char *)p - devices[id].guarded);
    for (block *b = devices[id].blocks; b != NULL; b = b->next)
        if (b->offset == offset && b->used && !b->cached) return b;
    return NULL;
}

static int not_live(int32_t id, const void *ptr, pyxbuf_error *err) {
    return td_error(err, PYXBUF_EINVAL,
                    "emulated: %p is not a live allocation of emulated device %d", ptr, (int)id);
}

/* A plain free of pool memory whose earlier free is still queued (it was
 * handed out again on the same stream) waits for that stream, as cuMemFree
 * synchronises: the queued free must not outlive its block. */
static int td_free(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int ok = id >= 0 && id < PYXBUF_EMULATED_MAX_DEVICES && devices[id].ready;
    block *b = ok ? live_block(id, ptr) : NULL;
    if (b != NULL) {
        if (b->pending_frees > 0) run_stream(b->freed_on);
        if (b->pooled) devices[id].pool.reserved -= b->size;
        *b = (block){.offset = b->offset, .size = b->size, .next = b->next};
        live_allocations--;
        coalesce(&devices[id]);
    }
    pthread_mutex_unlock(&lock);
    return b != NULL ? 0 : not_live(id, ptr, err);
}

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

static void run_op(op *o) {
    switch (o->kind) {
    case OP_WRITE:
        touch(o->dst, o->n, 1);
        memcpy(o->dst, o->data, o->n);
        break;
    case OP_COPY:
        touch(o->dst, o->n, 1); /* no-op for host memory */
        touch(o->data, o->n, 0);
        memcpy(o->dst, o->data, o->n);
        o->data = NULL; /* not the op's to free */
        break;
    case OP_RECORD: o->ev->done = 1; break;
    case OP_FREE: /* what runs after it is the next owner's: fresh memory */
        o->blk->pending_frees--;
        o->blk->fresh = 1;
        break;
    case OP_WAIT:
        /* Run every queue until the event has happened: its recording stream
         * is unknown here, so run all (deterministic, and cheap in tests). */
        for (int i = 0; !o->ev->done && i < PYXBUF_EMULATED_MAX_DEVICES; i++)
            run_stream(&default_streams[i]);
        for (int i = 0; !o->ev->done && i < MAX_STREAMS; i++)
            if (streams[i].used) run_stream(&streams[i]);
        break;
    }
    free(o->data);
    release_event(o->ev);
    free(o);
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
    return td_error(err, PYXBUF_EDEVICE, "emulated: no stream %lld on emulated device %d",
                    (long long)handle, (int)id);
}

/* ------------------------------------------------------------------------- */
/* The backend                                                               */
/* ------------------------------------------------------------------------- */

/* Copies first run what is queued on their stream: they are ordered after it. */
static int td_copy(int32_t id, int64_t handle, char *dst_host, const char *src_host,
                   const void *dev, size_t n, int to_host, pyxbuf_error *err) {
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    stream *s = rc == 0 && handle != PYXBUF_STREAM_NONE ? find_stream(id, handle) : NULL;
    char *b = rc == 0 ? backing_of(id, dev, n) : NULL;
    if (rc == 0 && handle != PYXBUF_STREAM_NONE && s == NULL) rc = no_stream(id, handle, err);
    else if (rc == 0 && b == NULL) rc = bad_address(id, dev, n, err);
    if (rc == 0) {
        if (s) run_stream(s);
        touch(b, n, !to_host);
        if (to_host) memcpy(dst_host, b, n);
        else memcpy(b, src_host, n);
    }
    pthread_mutex_unlock(&lock);
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
    pthread_mutex_lock(&lock);
    int rc = check_id(dst_id, err);
    if (rc == 0) rc = check_id(src_id, err);
    /* A copy between devices is ordered after the work queued on the stream on
     * either side (the consumer's wait sits on the source's stream). */
    int ordered = rc == 0 && stream_handle != PYXBUF_STREAM_NONE;
    stream *s = ordered ? find_stream(dst_id, stream_handle) : NULL;
    stream *s_src = ordered ? find_stream(src_id, stream_handle) : NULL;
    if (s == NULL) s = s_src;
    if (s_src == s) s_src = NULL;
    char *d = rc == 0 ? backing_of(dst_id, dst, n) : NULL;
    char *from = rc == 0 ? backing_of(src_id, src, n) : NULL;
    if (rc == 0 && stream_handle != PYXBUF_STREAM_NONE && s == NULL)
        rc = no_stream(dst_id, stream_handle, err);
    else if (rc == 0 && d == NULL) rc = bad_address(dst_id, dst, n, err);
    else if (rc == 0 && from == NULL) rc = bad_address(src_id, src, n, err);
    if (rc == 0) {
        if (s_src) run_stream(s_src);
        if (s) run_stream(s);
        touch(from, n, 0);
        touch(d, n, 1);
        memmove(d, from, n);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int td_event_record(void *ctx, int32_t id, int64_t handle, void **out, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    event *ev = NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    if (rc == 0) {
        ev = calloc(1, sizeof *ev);
        o = calloc(1, sizeof *o);
        if (ev == NULL || o == NULL) rc = td_error(err, PYXBUF_ENOMEM, "emulated: OOM");
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
        *o = (op){OP_RECORD, NULL, NULL, 0, ev, NULL, NULL};
        enqueue(s, o);
        *out = ev;
    } else {
        free(ev);
        free(o);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int td_event_wait(void *ctx, int32_t id, void *ev, int64_t handle, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    if (rc == 0 && ((event *)ev)->done) {
        pthread_mutex_unlock(&lock); /* waiting for what has happened: nothing to queue */
        return 0;
    }
    if (rc == 0 && (o = calloc(1, sizeof *o)) == NULL)
        rc = td_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    if (rc == 0) {
        ((event *)ev)->refs++;
        *o = (op){OP_WAIT, NULL, NULL, 0, ev, NULL, NULL};
        enqueue(s, o); /* lazy: runs when this stream runs */
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int td_event_destroy(void *ctx, int32_t id, void *ev, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    pthread_mutex_lock(&lock);
    release_event(ev);
    pthread_mutex_unlock(&lock);
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
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    if (rc == 0) {
        run_stream(s);
        release_idle(&devices[id], keep);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* The stream-ordered pool (CUDA's cuMemAllocAsync / cuMemFreeAsync)         */
/* ------------------------------------------------------------------------- */

/* Rules, deterministically: a free_async queues an OP_FREE on its stream and
 * the block joins the pool at once. Work queued on that stream later is
 * ordered after the free, so an allocation there may have the block at once;
 * an allocation on another stream only once the free has run (CUDA's
 * opportunistic reuse; it never inserts dependencies here). A free on an
 * idle stream runs at once, as event_record's record does. Idle cached
 * blocks go back to the allocator above the release threshold when a stream
 * or event is synchronised, in pool_trim, and when an allocation would
 * otherwise not fit. */

/* The cached block for `size` bytes on stream s: one freed on s, or one whose
 * free has run; the smallest that fits, at most twice the size. */
static block *cached_fit(device *d, size_t size, const stream *s) {
    block *best = NULL;
    for (block *b = d->blocks; b != NULL; b = b->next)
        if (b->cached && (b->freed_on == s || b->pending_frees == 0) && b->size >= size &&
            b->size - size <= size && (best == NULL || b->size < best->size))
            best = b;
    return best;
}

/* A block from the pool or, failing that, from the allocator. */
static int pool_take(int32_t id, size_t n, const stream *s, block **out, pyxbuf_error *err) {
    device *d = &devices[id];
    block *b = n <= DEVICE_BYTES ? cached_fit(d, rounded(n), s) : NULL;
    if (b != NULL) {
        b->cached = 0;
        d->pool.cached -= b->size;
        d->pool.reuses++;
        if (b->pending_frees == 0) b->fresh = 1; /* else its queued free makes it fresh */
        *out = b;
        return 0;
    }
    int rc = allocate(id, n, &b, err);
    if (rc == 0) {
        b->pooled = 1;
        d->pool.reserved += b->size;
        *out = b;
    }
    return rc;
}

static stream *pool_stream(int32_t id, int64_t handle) {
    return find_stream(id, handle == PYXBUF_STREAM_NONE ? 0 : handle);
}

static int td_alloc_async(void *ctx, int32_t id, size_t n, int64_t handle, void **ptr,
                          pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    stream *s = rc == 0 ? pool_stream(id, handle) : NULL;
    block *b = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    if (rc == 0) rc = pool_take(id, n, s, &b, err);
    if (rc == 0) {
        devices[id].pool.allocations++;
        live_allocations++;
        *ptr = devices[id].guarded + b->offset;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int td_free_async(void *ctx, int32_t id, void *ptr, int64_t handle, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    stream *s = rc == 0 ? pool_stream(id, handle) : NULL;
    block *b = rc == 0 ? live_block(id, ptr) : NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    else if (rc == 0 && b == NULL) rc = not_live(id, ptr, err);
    else if (rc == 0 && !b->pooled)
        rc = td_error(err, PYXBUF_EINVAL, "emulated: %p on emulated device %d came from alloc, "
                      "not alloc_async: give it back with free", ptr, (int)id);
    else if (rc == 0 && s->head != NULL && (o = calloc(1, sizeof *o)) == NULL)
        rc = td_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    if (rc == 0) {
        b->cached = 1;
        b->freed_on = s;
        devices[id].pool.cached += b->size;
        live_allocations--;
        if (o == NULL) {
            b->fresh = 1; /* an idle stream passes the free at once */
        } else {
            b->pending_frees++;
            *o = (op){.kind = OP_FREE, .blk = b};
            enqueue(s, o);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int td_pool_trim(void *ctx, int32_t id, uint64_t keep, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    if (rc == 0) release_idle(&devices[id], keep);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Whether this thread holds the GIL (an attached thread state, on
 * free-threaded builds). Not PyGILState_Check: it answers 1 whenever
 * sub-interpreters have existed in the process. */
static int attached_to_python(void) {
    if (!Py_IsInitialized()) return 0;
#if PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked() != NULL;
#else
    return _PyThreadState_UncheckedGet() != NULL;
#endif
}

/* "Page-locked" host memory: ordinary memory here (the emulated device copies
 * any host memory); counted, so tests see the pinned pool free what it took. */
static int td_host_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    if (rc == 0 && (*ptr = malloc(n ? n : 1)) == NULL)
        rc = td_error(err, PYXBUF_ENOMEM, "emulated: cannot allocate %zu host bytes", n);
    if (rc == 0) live_host_allocations++;
    if (rc == 0 && attached_to_python()) host_allocations_with_gil++;
    pthread_mutex_unlock(&lock);
    return rc;
}

static int td_host_free(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    if (ptr == NULL) return 0;
    free(ptr);
    pthread_mutex_lock(&lock);
    live_host_allocations--;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Queued like a kernel: it runs when its stream runs (see OP_COPY). */
static int td_copy_async(void *ctx, int32_t id, int32_t to_host, void *dst, const void *src,
                         size_t n, int64_t handle, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    const void *dev = to_host ? src : dst;
    char *b = rc == 0 ? backing_of(id, dev, n) : NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    else if (rc == 0 && b == NULL) rc = bad_address(id, dev, n, err);
    else if (rc == 0 && copy_async_budget == 0)
        rc = td_error(err, PYXBUF_EDEVICE, "emulated: injected failure of an asynchronous copy "
                      "of %zu bytes (pyxbuf_emulated_fail_copies_after)", n);
    if (rc == 0 && copy_async_budget > 0) copy_async_budget--;
    if (rc == 0 && (o = calloc(1, sizeof *o)) == NULL)
        rc = td_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    if (rc == 0) {
        *o = to_host ? (op){OP_COPY, dst, b, n, NULL, NULL, NULL}
                     : (op){OP_COPY, b, (char *)src, n, NULL, NULL, NULL};
        enqueue(s, o);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Not done until something runs its stream; `wait` runs every queue until
 * it is (as OP_WAIT does: the recording stream is not kept), and is a
 * synchronisation for the pool. */
static int td_event_query(void *ctx, int32_t id, void *ev, int32_t wait, pyxbuf_error *err) {
    (void)ctx;
    uint64_t keep = wait ? release_threshold() : 0;
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    event *e = ev;
    if (rc == 0 && wait) {
        for (int i = 0; !e->done && i < PYXBUF_EMULATED_MAX_DEVICES; i++)
            run_stream(&default_streams[i]);
        for (int i = 0; !e->done && i < MAX_STREAMS; i++)
            if (streams[i].used) run_stream(&streams[i]);
        release_idle(&devices[id], keep); /* a synchronisation, as cuEventSynchronize */
    }
    if (rc == 0) rc = e->done;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Like cuPointerGetAttributes: only addresses inside a live allocation are
 * device memory (so a producer claiming more bytes than it owns is caught);
 * memory the pool caches is not. */
static int in_live_block(int32_t id, const void *ptr) {
    size_t offset = (size_t)((const char *)ptr - devices[id].guarded);
    for (const block *b = devices[id].blocks; b != NULL; b = b->next)
        if (b->used && !b->cached && offset >= b->offset && offset < b->offset + b->size)
            return 1;
    return 0;
}

static int td_pointer_query(void *ctx, const void *ptr, pyxbuf_device *out, pyxbuf_error *err) {
    (void)ctx;
    pthread_mutex_lock(&lock);
    int32_t found = -1;
    for (int32_t i = 0; i < PYXBUF_EMULATED_MAX_DEVICES && found < 0; i++)
        if (backing_of(i, ptr, 1) != NULL && in_live_block(i, ptr)) found = i;
    pthread_mutex_unlock(&lock);
    if (found < 0)
        return td_error(err, PYXBUF_EDEVICE,
                        "pointer %p is not in a live allocation of any emulated device", ptr);
    out->device_type = PYXBUF_DL_EXT_DEV;
    out->device_id = found;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* One emulated device per process                                           */
/* ------------------------------------------------------------------------- */

/* Every extension that links the emulated device has its own copy of this
 * file, but a process has one backend registry (the shared transfer engine):
 * the first copy registered serves every device array, and the test helpers
 * of every later copy forward to it, so all of them see the same device,
 * streams and counters. The registered backend's ctx is the serving copy's
 * table of helpers. Fields are only ever appended. */
#define EMULATED_API_MAGIC 0x70784555u /* "pxEU" */
typedef struct emulated_api {
    uint32_t magic, size;
    int64_t (*live_allocations)(void);
    void (*fail_copies_after)(int64_t copies);
    int64_t (*live_host_allocations)(void);
    int64_t (*host_allocations_with_gil)(void);
    int (*stream_create)(int32_t id, int64_t *handle, pyxbuf_error *err);
    int (*stream_destroy)(int64_t handle, pyxbuf_error *err);
    int (*enqueue_write)(int32_t id, int64_t handle, void *dst, const void *src, size_t n,
                         pyxbuf_error *err);
    int64_t (*pending)(int32_t id, int64_t handle);
    int (*peek)(const void *src, void *dst, size_t n, pyxbuf_error *err);
    void (*pool_stats)(int32_t id, pyxbuf_emulated_pool_stats *out);
} emulated_api;

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

int pyxbuf_emulated_register(pyxbuf_error *err) {
    static const pyxbuf_backend backend = {
        .size = sizeof(pyxbuf_backend),
        .device_type = PYXBUF_DL_EXT_DEV,
        .name = "pyxbuf.emulated",
        .ctx = (void *)&own_api,
        .copy_to_host = td_copy_to_host,
        .copy_from_host = td_copy_from_host,
        .copy_on_device = td_copy_on_device,
        .alloc = td_alloc,
        .free = td_free,
        .event_wait = td_event_wait,
        .event_record = td_event_record,
        .event_destroy = td_event_destroy,
        .pointer_query = td_pointer_query,
        .synchronize = td_synchronize,
        .host_alloc = td_host_alloc,
        .host_free = td_host_free,
        .copy_async = td_copy_async,
        .event_query = td_event_query,
        .alloc_async = td_alloc_async,
        .free_async = td_free_async,
        .pool_trim = td_pool_trim,
    };
    /* Another copy's emulated device serves the process: keep it (replacing
     * it would strand every array it holds). */
    if (serving() != &own_api) return 0;
    ensure_fork_rules();
    return pyxbuf_backend_register(&backend, err);
}

static int64_t own_live_allocations(void) {
    pthread_mutex_lock(&lock);
    int64_t n = live_allocations;
    pthread_mutex_unlock(&lock);
    return n;
}

static void own_fail_copies_after(int64_t copies) {
    pthread_mutex_lock(&lock);
    copy_async_budget = copies;
    pthread_mutex_unlock(&lock);
}

static int64_t own_live_host_allocations(void) {
    pthread_mutex_lock(&lock);
    int64_t n = live_host_allocations;
    pthread_mutex_unlock(&lock);
    return n;
}

static int64_t own_host_allocations_with_gil(void) {
    pthread_mutex_lock(&lock);
    int64_t n = host_allocations_with_gil;
    pthread_mutex_unlock(&lock);
    return n;
}

static int own_stream_create(int32_t id, int64_t *handle, pyxbuf_error *err) {
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    int slot = -1;
    for (int i = 0; rc == 0 && i < MAX_STREAMS && slot < 0; i++)
        if (!streams[i].used) slot = i;
    if (rc == 0 && slot < 0)
        rc = td_error(err, PYXBUF_ENOMEM, "emulated: all %d streams are in use", MAX_STREAMS);
    if (rc == 0) {
        streams[slot] = (stream){1, 0, id, NULL, NULL};
        *handle = slot + DEFAULT_STREAMS;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int own_stream_destroy(int64_t handle, pyxbuf_error *err) {
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (handle < DEFAULT_STREAMS || handle >= MAX_STREAMS + DEFAULT_STREAMS ||
        !streams[handle - DEFAULT_STREAMS].used) {
        rc = td_error(err, PYXBUF_EINVAL, "emulated: no stream %lld to destroy", (long long)handle);
    } else {
        stream *s = &streams[handle - DEFAULT_STREAMS];
        run_stream(s); /* like cuStreamDestroy: queued work still completes */
        s->used = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int own_enqueue_write(int32_t id, int64_t handle, void *dst, const void *src, size_t n,
                                  pyxbuf_error *err) {
    pthread_mutex_lock(&lock);
    int rc = check_id(id, err);
    stream *s = rc == 0 ? find_stream(id, handle) : NULL;
    char *b = rc == 0 ? backing_of(id, dst, n) : NULL;
    op *o = NULL;
    if (rc == 0 && s == NULL) rc = no_stream(id, handle, err);
    else if (rc == 0 && b == NULL) rc = bad_address(id, dst, n, err);
    if (rc == 0) {
        o = calloc(1, sizeof *o);
        char *data = malloc(n ? n : 1);
        if (o == NULL || data == NULL) {
            free(o);
            free(data);
            rc = td_error(err, PYXBUF_ENOMEM, "emulated: OOM");
        } else {
            memcpy(data, src, n);
            *o = (op){OP_WRITE, b, data, n, NULL, NULL, NULL};
            enqueue(s, o);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int64_t own_pending(int32_t id, int64_t handle) {
    pthread_mutex_lock(&lock);
    int64_t n = 0;
    stream *s = id >= 0 && id < PYXBUF_EMULATED_MAX_DEVICES ? find_stream(id, handle) : NULL;
    for (op *o = s ? s->head : NULL; o != NULL; o = o->next) n++;
    pthread_mutex_unlock(&lock);
    return n;
}

static int own_peek(const void *src, void *dst, size_t n, pyxbuf_error *err) {
    pthread_mutex_lock(&lock);
    char *b = NULL;
    for (int32_t i = 0; i < PYXBUF_EMULATED_MAX_DEVICES && b == NULL; i++)
        b = backing_of(i, src, n);
    if (b != NULL) {
        touch(b, n, 0);
        memcpy(dst, b, n);
    }
    pthread_mutex_unlock(&lock);
    return b ? 0 : bad_address(-1, src, n, err);
}

static void own_pool_stats(int32_t id, pyxbuf_emulated_pool_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&lock);
    if (id >= 0 && id < PYXBUF_EMULATED_MAX_DEVICES) {
        const pool_stats *p = &devices[id].pool;
        *out = (pyxbuf_emulated_pool_stats){p->reserved, p->cached, p->allocations, p->reuses,
                                            p->releases};
    }
    pthread_mutex_unlock(&lock);
}

static const emulated_api own_api = {
    .magic = EMULATED_API_MAGIC,
    .size = sizeof(emulated_api),
    .live_allocations = own_live_allocations,
    .fail_copies_after = own_fail_copies_after,
    .live_host_allocations = own_live_host_allocations,
    .host_allocations_with_gil = own_host_allocations_with_gil,
    .stream_create = own_stream_create,
    .stream_destroy = own_stream_destroy,
    .enqueue_write = own_enqueue_write,
    .pending = own_pending,
    .peek = own_peek,
    .pool_stats = own_pool_stats,
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
