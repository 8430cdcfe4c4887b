/* pinned_pool.c -- page-locked host memory, cached: blocks from a backend's
 * host_alloc, kept by size class after use and handed out again only once
 * the event recorded after their last use has happened (a query, never a
 * device-wide synchronisation), within a cap on the bytes held; idle blocks
 * are freed at exit. Page-locked allocation costs milliseconds (the pages are
 * pinned one by one), so a pipeline or a result that took one new each time
 * would lose what the link gains. So a call that finds no idle block of its
 * class goes without one (a direct copy, a pageable result) and asks for
 * it: one grower thread allocates such blocks off the critical path, for
 * the calls after it. */

#include "device/device.h"
#include "base/platform.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pyxbuf__pinned_block *blocks; /* every block held, idle or in use */
static uint64_t held_bytes, used_bytes, allocations, reuses;
static int exit_hook_set;

/* Requests for idle blocks (grow_class), served in order by one detached
 * grower thread, started at the first request. All under pool_lock. */
#define GROW_QUEUE 16
typedef struct grow_request {
    pyxbuf_backend backend;
    int32_t device_id, count; /* new blocks of the class asked for */
    size_t size;             /* the class */
    uint64_t cap;            /* the pool's cap when asked */
} grow_request;
static grow_request grow_queue[GROW_QUEUE];
static int32_t grow_queued;  /* requests in grow_queue[0, grow_queued) */
static int grower_started, grower_busy, exiting;
static uint64_t growing_bytes; /* counted in held_bytes, not yet a block */
static uint64_t background_allocations;
static pthread_cond_t grow_cond = PTHREAD_COND_INITIALIZER; /* a request, or the grower idle */

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

/* Unlink idle finished blocks, other than those of size `keep`, until
 * `need` more bytes fit under `cap`. Under pool_lock. */
static void make_room_keeping(uint64_t need, uint64_t cap, size_t keep,
                              pyxbuf__pinned_block **doomed) {
    pyxbuf__pinned_block **link = &blocks;
    while (*link != NULL && (need > cap || held_bytes > cap - need)) {
        if (!(*link)->in_use && (*link)->size != keep && last_use_done(*link, 0))
            unlink_block(link, doomed);
        else
            link = &(*link)->next;
    }
}

static void make_room(uint64_t need, uint64_t cap, pyxbuf__pinned_block **doomed) {
    make_room_keeping(need, cap, 0, doomed);
}

static void drain_at_exit(void) {
    pyxbuf__pinned_block *doomed = NULL;
    pthread_mutex_lock(&pool_lock);
    /* No driver call of the grower's may run on into the driver's own
     * teardown: it stops, and an allocation under way is waited for. */
    exiting = 1;
    pthread_cond_broadcast(&grow_cond);
    while (grower_busy) pthread_cond_wait(&grow_cond, &pool_lock);
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
static void after_fork_parent(void) { pthread_mutex_unlock(&pool_lock); }
/* The child has no grower: its queue goes, and the bytes of an allocation
 * the parent's grower had under way are not the child's. */
static void after_fork_child(void) {
    held_bytes -= growing_bytes;
    growing_bytes = 0;
    grow_queued = 0;
    grower_started = grower_busy = 0;
    pthread_cond_init(&grow_cond, NULL);
    pthread_mutex_unlock(&pool_lock);
}
static void register_fork_rules(void) {
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
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

pyxbuf__pinned_block *pyxbuf__own_pinned_take_idle(const pyxbuf_backend *b, int32_t device_id,
                                                   size_t n) {
    (void)device_id; /* blocks are the backend's, as for pinned_take */
    size_t size = size_class(n);
    if (b->host_alloc == NULL || size == 0) return NULL;
    pyxbuf__pinned_block *pending;
    lock_pool();
    pyxbuf__pinned_block *found = find_idle(b, size, &pending);
    if (found != NULL) {
        reuses++;
        found->in_use = 1;
        used_bytes += found->size;
    }
    pthread_mutex_unlock(&pool_lock);
    return found;
}

/* Allocate the request's new blocks, idle, under the cap: idle finished
 * blocks of other sizes are freed to make room, as a take that allocates
 * frees them (the request stands for a call that went without). Called and
 * returns under pool_lock (allocate and the frees drop it). */
static void grow_class(const grow_request *r) {
    for (int32_t i = 0; i < r->count && !exiting && r->size <= r->cap; i++) {
        pyxbuf__pinned_block *doomed = NULL;
        make_room_keeping(r->size, r->cap, r->size, &doomed); /* never the ones just grown */
        if (doomed != NULL) {
            pthread_mutex_unlock(&pool_lock);
            free_doomed(doomed);
            lock_pool();
        }
        if (exiting || held_bytes > r->cap - r->size) return; /* blocks in use fill it */
        growing_bytes += r->size;
        pyxbuf__pinned_block *blk = allocate(&r->backend, r->device_id, r->size);
        growing_bytes -= r->size;
        if (blk == NULL) return; /* the driver refused: the next request asks again */
        blk->in_use = 0;
        background_allocations++;
    }
}

static void *grower(void *unused) {
    (void)unused;
    lock_pool();
    for (;;) {
        while (grow_queued == 0 && !exiting) pthread_cond_wait(&grow_cond, &pool_lock);
        if (exiting) break;
        grow_request r = grow_queue[0];
        grow_queued--;
        memmove(grow_queue, grow_queue + 1, (size_t)grow_queued * sizeof r);
        grower_busy = 1;
        grow_class(&r);
        grower_busy = 0;
        pthread_cond_broadcast(&grow_cond); /* drain_at_exit may wait for it */
    }
    pthread_mutex_unlock(&pool_lock);
    return NULL;
}

/* The grower, started once (detached: it lives as long as the process, as
 * the fill threads do). Under pool_lock; 0 if it cannot be started. */
static int start_grower(void) {
    if (grower_started) return 1;
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return 0;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    grower_started = pthread_create(&t, &attr, grower, NULL) == 0;
    pthread_attr_destroy(&attr);
    return grower_started;
}

void pyxbuf__own_pinned_grow(const pyxbuf_backend *b, int32_t device_id, size_t n, int32_t count) {
    pyxbuf_transfer_config cfg;
    size_t size = size_class(n);
    if (b->host_alloc == NULL || size == 0 || count < 1 ||
        pyxbuf__own_transfer_config(&cfg, NULL) < 0 || size > cfg.pool_cap)
        return;
    lock_pool();
    int32_t i = 0;
    while (i < grow_queued && !(grow_queue[i].size == size &&
                                same_backend(&grow_queue[i].backend, b)))
        i++;
    if (i < grow_queued) {
        /* Asked already, and not yet served: the larger count stands. */
        if (grow_queue[i].count < count) grow_queue[i].count = count;
    } else if (!exiting && grow_queued < GROW_QUEUE && start_grower()) {
        grow_queue[grow_queued++] = (grow_request){*b, device_id, count, size, cfg.pool_cap};
        pthread_cond_broadcast(&grow_cond);
    } /* else a full queue: the request is dropped, and made again next time */
    pthread_mutex_unlock(&pool_lock);
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
    out->background_allocations = background_allocations;
    out->background_pending = (uint64_t)grow_queued + (uint64_t)grower_busy;
    pthread_mutex_unlock(&pool_lock);
}
