/* emulated_memory.c -- the emulated device's memory (see emulated.h): one
 * memfd mapped twice per device, what a forked child gets of it, and the
 * first-fit allocator with the stream-ordered pool's cache of blocks. The
 * bottom of the device's files (emulated_internal.h). */
#include "device/emulated_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if PYXBUF_HAVE_MEMFD
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
device emu_devices[PYXBUF_EMULATED_MAX_DEVICES];
emu_import *emu_imports;

/* Like any third-party backend, this one uses only the public API. */
int emu_error(pyxbuf_error *err, int32_t code, const char *fmt, ...) {
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

#if !PYXBUF_HAVE_MEMFD
void emu_ensure_fork_rules(void) {} /* no memfd, no device, nothing to fork */

static int map_device(int32_t id, pyxbuf_error *err) {
    (void)id;
    return emu_error(err, PYXBUF_EUNSUPPORTED,
                     "emulated: the guarded emulated device maps one memfd twice "
                     "(memfd_create, Linux); this system has none, so it is off: run the "
                     "device tests on Linux");
}
#else
/* A new sparse memfd of the device's size, or -1 with errno saying why. */
static int new_memfd(void) {
    int fd = memfd_create("pyxbuf-emulated", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)DEVICE_BYTES) != 0) {
        int why = errno;
        close(fd);
        errno = why;
        fd = -1;
    }
    return fd;
}

int emu_map_twice(int fd, size_t len, size_t offset, void **guarded, void **backing) {
    void *g = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, (off_t)offset);
    if (g == MAP_FAILED) return errno;
    void *k = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
    if (k == MAP_FAILED) {
        int why = errno;
        munmap(g, len);
        return why;
    }
    *guarded = g;
    *backing = k;
    return 0;
}

/* The fork rules of a real device, whose memory a forked child never
 * shares with its parent: the lock is taken around fork() (no child starts
 * with it held by a thread it does not have), and a child's device memory
 * is a copy of the parent's as it was at fork() -- a new memfd holding the
 * live blocks, mapped at the same addresses -- so neither process's device
 * writes land in the other's (a MAP_SHARED memfd is shared across fork).
 *
 * The copy is made before fork(), holding the lock: every write into device
 * memory (queued work runs only inside calls that hold it) has happened or
 * waits, and none starts until the parent's handler releases the lock after
 * fork(). Made in the child, it read the memfd while the parent's threads,
 * free again, wrote their next work into it: torn copies. The child only
 * maps it; the parent closes it. A child whose copy could not be made or
 * mapped loses the device: every call then fails as on a device that is
 * gone. */
static int fork_copies[PYXBUF_EMULATED_MAX_DEVICES]; /* fds for the child, or -1 */

/* A new memfd holding d's live blocks, or -1. */
static int private_copy(const device *d) {
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
    return fd;
}

/* The child's device memory becomes `fd`, at the same addresses. */
static int map_copy(device *d, int fd) {
    if (fd < 0) return -1;
    void *g = mmap(d->guarded, DEVICE_BYTES, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0);
    void *k = mmap(d->backing, DEVICE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    close(d->fd);
    d->fd = fd;
    return g == MAP_FAILED || k == MAP_FAILED ? -1 : 0;
}

static void before_fork(void) {
    pthread_mutex_lock(&emu_lock);
    for (int i = 0; i < PYXBUF_EMULATED_MAX_DEVICES; i++)
        fork_copies[i] = emu_devices[i].ready ? private_copy(&emu_devices[i]) : -1;
}

static void after_fork_parent(void) {
    for (int i = 0; i < PYXBUF_EMULATED_MAX_DEVICES; i++)
        if (fork_copies[i] >= 0) close(fork_copies[i]);
    pthread_mutex_unlock(&emu_lock);
}

static void after_fork_child(void) {
    for (int i = 0; i < PYXBUF_EMULATED_MAX_DEVICES; i++)
        if (emu_devices[i].ready && map_copy(&emu_devices[i], fork_copies[i]) < 0) {
            emu_devices[i].ready = 0;
            emu_devices[i].lost = 1;
        }
    pthread_mutex_unlock(&emu_lock);
}

static void register_fork_rules(void) {
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
static pthread_once_t fork_rules_once = PTHREAD_ONCE_INIT;

/* Before the lock is first taken (at registration): a fork() that raced
 * the handlers' registration could copy the lock held. */
void emu_ensure_fork_rules(void) { pthread_once(&fork_rules_once, register_fork_rules); }

static int map_device(int32_t id, pyxbuf_error *err) {
    device *d = &emu_devices[id];
    if (d->lost)
        return emu_error(err, PYXBUF_EDEVICE, "emulated: device %d was lost in a forked child "
                         "(its memory could not be copied)", (int)id);
    if (d->ready) return 0;
    emu_ensure_fork_rules();
    block *whole = calloc(1, sizeof(block));
    if (whole == NULL) return emu_error(err, PYXBUF_ENOMEM, "emulated: out of host memory");
    int fd = new_memfd();
    if (fd < 0) {
        int why = errno;
        free(whole);
        return emu_error(err, PYXBUF_EDEVICE, "emulated: device %d's memory, a memfd of %zu "
                         "bytes, cannot be created or sized (%s); free file descriptors or "
                         "space in /dev/shm",
                         (int)id, DEVICE_BYTES, strerror(why));
    }
    void *guarded = NULL, *backing = NULL;
    int why = emu_map_twice(fd, DEVICE_BYTES, 0, &guarded, &backing);
    if (why != 0) {
        close(fd);
        free(whole);
        return emu_error(err, PYXBUF_EDEVICE, "emulated: device %d's memory (twice %zu bytes "
                         "of address space: guarded and the backend's) cannot be mapped (mmap: "
                         "%s); raise the address-space limit (ulimit -v)",
                         (int)id, DEVICE_BYTES, strerror(why));
    }
    d->fd = fd; /* kept: a forked child's copy is made from it, another process may map it */
    d->guarded = guarded;
    d->backing = backing;
    d->blocks = whole;
    d->blocks->size = DEVICE_BYTES;
    d->ready = 1;
    return 0;
}
#endif

int emu_check_id(int32_t id, pyxbuf_error *err) {
    if (id < 0 || id >= PYXBUF_EMULATED_MAX_DEVICES)
        return emu_error(err, PYXBUF_EDEVICE, "emulated: no emulated device %d (ids are 0..%d)",
                         (int)id, PYXBUF_EMULATED_MAX_DEVICES - 1);
    return map_device(id, err);
}

/* The import of device `id` whose allocation holds [c, c + n), or NULL. */
static emu_import *import_of(int32_t id, const char *c, size_t n) {
    for (emu_import *im = emu_imports; im != NULL; im = im->next)
        if (im->device_id == id && c >= im->start && c <= im->start + im->size &&
            n <= (size_t)(im->start + im->size - c))
            return im;
    return NULL;
}

char *emu_backing_of(int32_t id, const void *p, size_t n) {
    device *d = &emu_devices[id];
    const char *c = p;
    if (!d->ready || c < d->guarded || c > d->guarded + DEVICE_BYTES ||
        n > (size_t)(d->guarded + DEVICE_BYTES - c)) {
        emu_import *im = emu_imports != NULL ? import_of(id, c, n) : NULL;
        return im != NULL ? im->backing + (c - im->guarded) : NULL;
    }
    return d->backing + (c - d->guarded);
}

int emu_bad_address(int32_t id, const void *p, size_t n, pyxbuf_error *err) {
    return emu_error(err, PYXBUF_EDEVICE,
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
void emu_touch(const char *at, size_t n, int writes) {
    for (int i = 0; i < PYXBUF_EMULATED_MAX_DEVICES; i++) {
        device *d = &emu_devices[i];
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
void emu_release_idle(device *d, uint64_t keep) {
    for (block *b = d->blocks; b != NULL && d->pool.reserved > keep; b = b->next) {
        if (!idle(b)) continue;
        d->pool.reserved -= b->size;
        d->pool.cached -= b->size;
        d->pool.releases++;
        *b = (block){.offset = b->offset, .size = b->size, .next = b->next};
    }
    coalesce(d);
}

void emu_release_block(device *d, block *b) {
    if (b->pooled) d->pool.reserved -= b->size;
    *b = (block){.offset = b->offset, .size = b->size, .next = b->next};
    coalesce(d);
}

static int no_room(int32_t id, size_t n, pyxbuf_error *err) {
    return emu_error(err, PYXBUF_ENOMEM, "emulated: cannot allocate %zu %s on emulated device %d",
                     n, n == 1 ? "byte" : "bytes", (int)id);
}

/* Allocations are whole multiples of ALIGNMENT (at least one). */
static size_t rounded(size_t n) {
    return ((n ? n : 1) + ALIGNMENT - 1) & ~(size_t)(ALIGNMENT - 1);
}

/* At the device's capacity the pool's idle blocks go back to the allocator
 * first, and the search is made again: the pool never makes an allocation
 * fail that would fit. */
int emu_allocate(int32_t id, size_t n, block **out, pyxbuf_error *err) {
    device *d = &emu_devices[id];
    if (n > DEVICE_BYTES) return no_room(id, n, err);
    int oom = 0;
    block *b = carve(d, rounded(n), &oom);
    if (b == NULL && oom && d->pool.cached > 0) {
        emu_release_idle(d, 0);
        b = carve(d, rounded(n), &oom);
    }
    if (b == NULL)
        return oom ? no_room(id, n, err) : emu_error(err, PYXBUF_ENOMEM, "emulated: OOM");
    *out = b;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* The stream-ordered pool's cache (CUDA's cuMemAllocAsync / cuMemFreeAsync) */
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

int emu_pool_take(int32_t id, size_t n, const stream *s, block **out, pyxbuf_error *err) {
    device *d = &emu_devices[id];
    block *b = n <= DEVICE_BYTES ? cached_fit(d, rounded(n), s) : NULL;
    if (b != NULL) {
        b->cached = 0;
        d->pool.cached -= b->size;
        d->pool.reuses++;
        if (b->pending_frees == 0) b->fresh = 1; /* else its queued free makes it fresh */
        *out = b;
        return 0;
    }
    int rc = emu_allocate(id, n, &b, err);
    if (rc == 0) {
        b->pooled = 1;
        d->pool.reserved += b->size;
        *out = b;
    }
    return rc;
}

block *emu_live_block(int32_t id, const void *p) {
    size_t offset = (size_t)((const char *)p - emu_devices[id].guarded);
    for (block *b = emu_devices[id].blocks; b != NULL; b = b->next)
        if (b->offset == offset && b->used && !b->cached) return b;
    return NULL;
}

int emu_not_live(int32_t id, const void *ptr, pyxbuf_error *err) {
    return emu_error(err, PYXBUF_EINVAL,
                     "emulated: %p is not a live allocation of emulated device %d", ptr, (int)id);
}

/* Like cuPointerGetAttributes: only addresses inside a live allocation are
 * device memory (so a producer claiming more bytes than it owns is caught);
 * memory the pool caches is not. */
int emu_in_live_block(int32_t id, const void *ptr) {
    if (emu_imports != NULL && import_of(id, ptr, 1) != NULL) return 1; /* open: live */
    size_t offset = (size_t)((const char *)ptr - emu_devices[id].guarded);
    for (const block *b = emu_devices[id].blocks; b != NULL; b = b->next)
        if (b->used && !b->cached && offset >= b->offset && offset < b->offset + b->size)
            return 1;
    return 0;
}
