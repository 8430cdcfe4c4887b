/* pinned_pool.c -- page-locked host memory, cached: blocks from a backend's
 * host_alloc, kept by size class after use and handed out again only once
 * the event recorded after their last use has happened (a query, never a
 * device-wide synchronisation), within a cap on the bytes held; idle blocks
 * are freed at exit. Page-locked allocation costs milliseconds (the pages are
 * pinned one by one), so a pipeline or a result that took one new each time
 * would lose what the link gains. */

#include "device/device.h"
#include "base/platform.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pyxbuf__pinned_block *blocks; /* every block held, idle or in use */
static uint64_t held_bytes, used_bytes, allocations, reuses;
static int exit_hook_set;

/* Size classes a quarter of a power of two apart (a block is at most 25%
 * larger than asked), in whole pages; 64 KiB at least. 0 for a size no
 * class can hold (above a quarter of the address space): never pooled. */
static size_t size_class(size_t n) {
    if (n <= ((size_t)64 << 10)) return (size_t)64 << 10;
    if (n > (SIZE_MAX >> 2)) return 0;
    size_t step = (size_t)1 << 12;
    while (step < n / 4) step <<= 1;
    return (n + step - 1) & ~(step - 1);
}

static int same_backend(const pyxbuf_backend *a, const pyxbuf_backend *b) {
    return a->host_alloc == b->host_alloc && a->ctx == b->ctx;
}

/* Whether the block's last use is over; destroys its event once it is.
 * `block`: wait for it. Under pool_lock unless the block is the caller's. */
static int last_use_done(pyxbuf__pinned_block *blk, int32_t block) {
    if (blk->event == NULL) return 1;
    const pyxbuf_backend *b = &blk->backend;
    if (b->event_query(b->ctx, blk->device_id, blk->event, block, NULL) != 1) return 0;
    b->event_destroy(b->ctx, blk->device_id, blk->event, NULL);
    blk->event = NULL;
    return 1;
}

/* Unlink an idle, finished block onto *doomed, to be freed (free_doomed)
 * once pool_lock is released: freeing page-locked memory takes the driver
 * milliseconds, which no other thread should wait for. Under pool_lock. */
static void unlink_block(pyxbuf__pinned_block **link, pyxbuf__pinned_block **doomed) {
    pyxbuf__pinned_block *blk = *link;
    *link = blk->next;
    held_bytes -= blk->size;
    blk->next = *doomed;
    *doomed = blk;
}

/* Outside pool_lock: the blocks are no longer in the pool. */
static void free_doomed(pyxbuf__pinned_block *doomed) {
    while (doomed != NULL) {
        pyxbuf__pinned_block *next = doomed->next;
        doomed->backend.host_free(doomed->backend.ctx, doomed->device_id, doomed->ptr, NULL);
        free(doomed);
        doomed = next;
    }
}

/* Unlink idle finished blocks until `need` more bytes fit under `cap`.
 * Under pool_lock. */
static void make_room(uint64_t need, uint64_t cap, pyxbuf__pinned_block **doomed) {
    pyxbuf__pinned_block **link = &blocks;
    while (*link != NULL && (need > cap || held_bytes > cap - need)) {
        if (!(*link)->in_use && last_use_done(*link, 0)) unlink_block(link, doomed);
        else link = &(*link)->next;
    }
}

static void drain_at_exit(void) {
    pyxbuf__pinned_block *doomed = NULL;
    pthread_mutex_lock(&pool_lock);
    pyxbuf__pinned_block **link = &blocks;
    while (*link != NULL) {
        if (!(*link)->in_use && last_use_done(*link, 1)) unlink_block(link, &doomed);
        else link = &(*link)->next; /* an exporter still alive owns it */
    }
    pthread_mutex_unlock(&pool_lock);
    free_doomed(doomed);
}

#if PYXBUF_HAVE_FORK
/* fork() in another thread must not leave pool_lock held in the child:
 * registered once, before the lock is first taken (lock_pool). */
static void before_fork(void) { pthread_mutex_lock(&pool_lock); }
static void after_fork(void) { pthread_mutex_unlock(&pool_lock); }
static void register_fork_rules(void) { pthread_atfork(before_fork, after_fork, after_fork); }
#else
static void register_fork_rules(void) {}
#endif
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void lock_pool(void) {
    pthread_once(&fork_once, register_fork_rules);
    pthread_mutex_lock(&pool_lock);
}

/* A new block of `size` bytes, counted in held_bytes before the (slow)
 * allocation runs outside the lock. Called and returns under pool_lock. */
static pyxbuf__pinned_block *allocate(const pyxbuf_backend *b, int32_t device_id, size_t size) {
    held_bytes += size;
    pthread_mutex_unlock(&pool_lock);
    pyxbuf__pinned_block *blk = calloc(1, sizeof *blk);
    void *ptr = NULL;
    int ok = blk != NULL && b->host_alloc(b->ctx, device_id, size, &ptr, NULL) == 0 && ptr;
    lock_pool();
    if (!ok) {
        held_bytes -= size;
        free(blk);
        return NULL;
    }
    *blk = (pyxbuf__pinned_block){*b, device_id, ptr, size, NULL, 1, blocks};
    blocks = blk;
    allocations++;
    if (!exit_hook_set) exit_hook_set = atexit(drain_at_exit) == 0;
    return blk;
}

/* An idle block of the class and backend, finished (its last use over), or
 * else *pending: one whose last use is still queued. Under pool_lock. */
static pyxbuf__pinned_block *find_idle(const pyxbuf_backend *b, size_t size,
                                       pyxbuf__pinned_block **pending) {
    *pending = NULL;
    for (pyxbuf__pinned_block *blk = blocks; blk != NULL; blk = blk->next) {
        if (blk->in_use || blk->size != size || !same_backend(&blk->backend, b)) continue;
        if (last_use_done(blk, 0)) return blk;
        if (*pending == NULL) *pending = blk;
    }
    return NULL;
}

/* At the cap: wait, outside the lock, for an idle block of the class whose
 * last use is queued. It is looked for now, under the lock, never
 * remembered from before make_room or allocate (which may free it or let
 * another thread take it). The block is marked in use before the lock is
 * dropped, so no other take, make_room or trim touches it meanwhile. Called
 * and returns under pool_lock. */
static pyxbuf__pinned_block *wait_for_queued(const pyxbuf_backend *b, size_t size) {
    pyxbuf__pinned_block *pending = NULL, *found = find_idle(b, size, &pending);
    if (found != NULL) return found; /* finished meanwhile */
    if (pending == NULL) return NULL;
    pending->in_use = 1;
    pthread_mutex_unlock(&pool_lock);
    int done = last_use_done(pending, 1);
    lock_pool();
    pending->in_use = 0;
    return done ? pending : NULL;
}

pyxbuf__pinned_block *pyxbuf__own_pinned_take(const pyxbuf_backend *b, int32_t device_id, size_t n) {
    pyxbuf_transfer_config cfg;
    size_t size = size_class(n);
    if (b->host_alloc == NULL || size == 0 || pyxbuf__own_transfer_config(&cfg, NULL) < 0)
        return NULL;
    /* Larger than the whole pool may hold: never pooled (and no idle block
     * is freed for it). */
    if (size > cfg.pool_cap) return NULL;
    pyxbuf__pinned_block *doomed = NULL, *pending;
    lock_pool();
    pyxbuf__pinned_block *found = find_idle(b, size, &pending);
    if (found != NULL) {
        reuses++;
    } else {
        make_room(size, cfg.pool_cap, &doomed);
        if (size <= cfg.pool_cap && held_bytes <= cfg.pool_cap - size)
            found = allocate(b, device_id, size);
        if (found == NULL && (found = wait_for_queued(b, size)) != NULL) reuses++;
    }
    if (found != NULL) {
        found->in_use = 1;
        used_bytes += found->size;
    }
    pthread_mutex_unlock(&pool_lock);
    free_doomed(doomed);
    return found;
}

void pyxbuf__own_pinned_give(pyxbuf__pinned_block *blk, void *event) {
    pyxbuf_transfer_config cfg;
    pyxbuf__own_transfer_config(&cfg, NULL);
    pyxbuf__pinned_block *doomed = NULL;
    lock_pool();
    blk->event = event;
    blk->in_use = 0;
    used_bytes -= blk->size;
    make_room(0, cfg.pool_cap, &doomed); /* the cap may have shrunk while it was out */
    pthread_mutex_unlock(&pool_lock);
    free_doomed(doomed);
}

int pyxbuf__own_pinned_contains(const void *p, size_t n) {
    const char *c = p;
    int inside = 0;
    lock_pool();
    for (const pyxbuf__pinned_block *blk = blocks; blk != NULL && !inside; blk = blk->next) {
        const char *lo = blk->ptr;
        inside = c >= lo && c < lo + blk->size && n <= (size_t)(lo + blk->size - c);
    }
    pthread_mutex_unlock(&pool_lock);
    return inside;
}

void pyxbuf__own_pinned_pool_fit(uint64_t cap) {
    pyxbuf__pinned_block *doomed = NULL;
    lock_pool();
    make_room(0, cap, &doomed);
    pthread_mutex_unlock(&pool_lock);
    free_doomed(doomed);
}

void pyxbuf__own_pinned_pool_stats(pyxbuf_pinned_pool_stats *out) {
    memset(out, 0, sizeof *out);
    lock_pool();
    out->held_bytes = held_bytes;
    out->used_bytes = used_bytes;
    out->allocations = allocations;
    out->reuses = reuses;
    pthread_mutex_unlock(&pool_lock);
}
