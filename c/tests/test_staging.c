/* test_staging.c -- the pinned pool and the staging pipeline (issue 40) on
 * the emulated device, below the public API: a block goes out again only
 * after the event behind its last use, the cap holds, trim frees what is
 * idle, and staged copies from several threads at once stay right (run under
 * ThreadSanitizer by `make test-tsan`). Linked statically for the device
 * layer's hidden entry points. Needs no Python: nothing here touches it. */
#include "pyxbuf.h"
#include "device/device.h" /* linked statically: the pool and the pipeline */
#include "device/emulated.h"
#include "testing.h"
#include "emulated_fixture.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define CLASS ((size_t)256 << 10) /* a size that is its own size class */

static void configure(uint64_t cap, int32_t threads) {
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    c.enabled = 1, c.threshold = 1, c.chunk = 64 << 10, c.buffers = 3, c.threads = threads;
    c.pool_cap = cap;
    pyxbuf_error err;
    CHECK(pyxbuf_transfer_config_set(&c, &err) == 0);
}

/* `count` idle blocks of `size` in the pool: copies take only idle ones
 * (a copy that finds none goes direct and asks the pool to grow). */
static void stock(const pyxbuf_backend *b, size_t size, int count) {
    pyxbuf__pinned_block *blk[16];
    CHECK(count <= 16);
    for (int i = 0; i < count; i++) CHECK((blk[i] = pyxbuf__pinned_take(b, 0, size)) != NULL);
    for (int i = 0; i < count; i++)
        if (blk[i]) pyxbuf__pinned_give(blk[i], NULL);
}

/* Until the pool's grower has served every request (10 s at most). */
static pyxbuf_pinned_pool_stats grown(void) {
    pyxbuf_pinned_pool_stats st;
    for (int i = 0; i < 10000; i++) {
        pyxbuf_pinned_pool_stats_get(&st);
        if (st.background_pending == 0) break;
        usleep(1000);
    }
    CHECK_INT_EQ(st.background_pending, 0);
    return st;
}

/* An event that has not happened: recorded behind a pending write on a new
 * stream of the lazy emulated device. */
static void *pending_event(const pyxbuf_backend *b, int64_t *stream, void **dev) {
    pyxbuf_error err;
    void *ev = NULL;
    char byte = 1;
    CHECK(pyxbuf_emulated_stream_create(0, stream, &err) == 0);
    CHECK(b->alloc(b->ctx, 0, 1, dev, &err) == 0);
    CHECK(pyxbuf_emulated_enqueue_write(0, *stream, *dev, &byte, 1, &err) == 0);
    CHECK(b->event_record(b->ctx, 0, *stream, &ev, &err) == 0);
    CHECK(b->event_query(b->ctx, 0, ev, 0, &err) == 0);
    return ev;
}

static void end_stream(const pyxbuf_backend *b, int64_t stream, void *dev) {
    pyxbuf_error err;
    CHECK(pyxbuf_emulated_stream_destroy(stream, &err) == 0); /* runs what is queued */
    CHECK(b->free(b->ctx, 0, dev, &err) == 0);
}

TEST_CASE(a_block_goes_out_again_only_after_its_event) {
    pyxbuf_backend b = emulated();
    configure(64 * CLASS, 2);
    pyxbuf_pinned_pool_trim();
    int64_t stream;
    void *dev;
    pyxbuf__pinned_block *first = pyxbuf__pinned_take(&b, 0, CLASS);
    CHECK(first != NULL && first->size == CLASS && first->in_use);
    pyxbuf__pinned_give(first, pending_event(&b, &stream, &dev));
    pyxbuf__pinned_block *second = pyxbuf__pinned_take(&b, 0, CLASS);
    CHECK(second != NULL && second != first); /* first's last use is still queued */
    pyxbuf__pinned_give(second, NULL);
    pyxbuf_error err;
    CHECK(b.synchronize(b.ctx, 0, stream, &err) == 0); /* the event happens */
    pyxbuf__pinned_block *a = pyxbuf__pinned_take(&b, 0, CLASS);
    pyxbuf__pinned_block *c = pyxbuf__pinned_take(&b, 0, CLASS);
    CHECK((a == first && c == second) || (a == second && c == first));
    CHECK(first->event == NULL); /* destroyed once seen to have happened */
    pyxbuf__pinned_give(a, NULL);
    pyxbuf__pinned_give(c, NULL);
    end_stream(&b, stream, dev);
    pyxbuf_pinned_pool_trim();
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
}

TEST_CASE(at_the_cap_a_take_waits_for_a_queued_block_or_gets_none) {
    pyxbuf_backend b = emulated();
    pyxbuf_pinned_pool_trim();
    configure(3 * CLASS, 2); /* room for three blocks of the class */
    pyxbuf__pinned_block *held[3];
    for (int i = 0; i < 3; i++) CHECK((held[i] = pyxbuf__pinned_take(&b, 0, CLASS)) != NULL);
    CHECK(pyxbuf__pinned_take(&b, 0, CLASS) == NULL); /* all in use: the caller goes direct */
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st);
    CHECK_INT_EQ(st.held_bytes, 3 * CLASS);
    CHECK_INT_EQ(st.used_bytes, 3 * CLASS);
    int64_t stream;
    void *dev;
    pyxbuf__pinned_give(held[1], pending_event(&b, &stream, &dev));
    /* At the cap, the one idle block's event is waited for (the emulated
     * device runs its queue), then it is handed out. */
    CHECK(pyxbuf__pinned_take(&b, 0, CLASS) == held[1]);
    CHECK_INT_EQ(pyxbuf_emulated_pending(0, stream), 0);
    /* A larger class does not fit beside three blocks under the cap. */
    CHECK(pyxbuf__pinned_take(&b, 0, 2 * CLASS) == NULL);
    for (int i = 0; i < 3; i++) pyxbuf__pinned_give(held[i], NULL);
    /* Now idle blocks make room for it. */
    pyxbuf__pinned_block *big = pyxbuf__pinned_take(&b, 0, 2 * CLASS);
    CHECK(big != NULL);
    pyxbuf_pinned_pool_stats_get(&st);
    CHECK(st.held_bytes <= 3 * CLASS);
    pyxbuf__pinned_give(big, NULL);
    end_stream(&b, stream, dev);
    pyxbuf_pinned_pool_trim();
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
}

TEST_CASE(trim_keeps_a_block_whose_last_use_is_queued) {
    pyxbuf_backend b = emulated();
    configure(64 * CLASS, 2);
    pyxbuf_pinned_pool_trim();
    int64_t stream;
    void *dev;
    pyxbuf__pinned_block *blk = pyxbuf__pinned_take(&b, 0, CLASS);
    pyxbuf__pinned_give(blk, pending_event(&b, &stream, &dev));
    pyxbuf_pinned_pool_trim();
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st);
    CHECK_INT_EQ(st.held_bytes, CLASS); /* a copy may still read it */
    CHECK(pyxbuf__pinned_contains((char *)blk->ptr + 10, 100));
    CHECK(!pyxbuf__pinned_contains((char *)blk->ptr + CLASS - 10, 100));
    end_stream(&b, stream, dev);
    pyxbuf_pinned_pool_trim();
    pyxbuf_pinned_pool_stats_get(&st);
    CHECK_INT_EQ(st.held_bytes, 0);
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
}

typedef struct worker_arg {
    pyxbuf_backend b;
    unsigned seed;
    int failures;
} worker_arg;

/* Staged round trips of sizes that cross chunk and fill-thread boundaries. */
static void *round_trips(void *p) {
    worker_arg *w = p;
    for (int i = 0; i < 12; i++) {
        size_t n = ((size_t)((unsigned)i * 263167u + w->seed * 1000003u) % (3u << 20)) + 1;
        unsigned char *src = malloc(n), *back = malloc(n);
        for (size_t k = 0; k < n; k++) src[k] = (unsigned char)(k * 31u + w->seed);
        void *dev = NULL;
        pyxbuf_error err;
        int ok = w->b.alloc(w->b.ctx, 0, n, &dev, &err) == 0 &&
                 pyxbuf__copy_from_host(&w->b, 0, dev, src, n, 0, &err) == 0 &&
                 pyxbuf__copy_to_host(&w->b, 0, back, dev, n, 0, &err) == 0 &&
                 memcmp(src, back, n) == 0;
        if (!ok) w->failures++;
        if (dev) w->b.free(w->b.ctx, 0, dev, &err);
        free(src);
        free(back);
    }
    return NULL;
}

TEST_CASE(staged_copies_from_four_threads_at_once) {
    pyxbuf_backend b = emulated();
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    c.enabled = 1, c.threshold = 1, c.chunk = 1 << 20, c.buffers = 3, c.threads = 3;
    c.pool_cap = (uint64_t)64 << 20;
    pyxbuf_error err;
    CHECK(pyxbuf_transfer_config_set(&c, &err) == 0);
    stock(&b, (size_t)1 << 20, 6); /* fewer than 4 x 3: some copies make do, the pool grows */
    pthread_t t[4];
    worker_arg args[4];
    for (unsigned i = 0; i < 4; i++) {
        args[i] = (worker_arg){b, i + 1, 0};
        CHECK(pthread_create(&t[i], NULL, round_trips, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_INT_EQ(args[i].failures, 0);
    }
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st);
    CHECK_INT_EQ(st.used_bytes, 0); /* every staging buffer given back */
    CHECK(st.allocations + st.reuses >= 4 * 12 * 2);
    pyxbuf_pinned_pool_trim();
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), 0);
}

TEST_CASE(parallel_copy_splits_at_page_boundaries) {
    const size_t sizes[] = {0, 1, (256 << 10) - 1, 256 << 10, (1 << 20) + 4097, 5 << 20};
    for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        for (int32_t threads = 1; threads <= 8; threads *= 2) {
            size_t n = sizes[i];
            unsigned char *src = malloc(n + 1), *dst = calloc(n + 1, 1);
            for (size_t k = 0; k < n; k++) src[k] = (unsigned char)(k * 13u + (unsigned)threads);
            dst[n] = 0xEE; /* nothing past the end is written */
            pyxbuf__parallel_copy(dst, src, n, threads);
            CHECK(memcmp(src, dst, n) == 0);
            CHECK(dst[n] == 0xEE);
            free(src);
            free(dst);
        }
    }
}

TEST_CASE(bad_configurations_and_half_staging_backends) {
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    CHECK_INT_EQ(c.size, sizeof c);
    pyxbuf_transfer_config bad = c;
    bad.threads = 65;
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "threads is 65; it must be 1..64");
    bad = c;
    bad.size = 8;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "its size 8 is too small; start from pyxbuf_transfer_config_get");
    bad = c;
    bad.enabled = 0;
    bad.pool_cap = 0; /* allowed: nothing is staged */
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), 0);
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&c, &err), 0);
    /* A registrant with some staging functions but not all is refused. */
    pyxbuf_backend half = emulated();
    half.device_type = 40;
    half.copy_async = NULL;
    CHECK_INT_EQ(pyxbuf_backend_register(&half, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "has 3 of host_alloc, host_free, copy_async and event_query");
}

/* ------------------------------------------------------------------------- */
/* A backend that misbehaves on demand (issue 47's defects): the emulated    */
/* device's functions, with events that complete asynchronously, a           */
/* host_alloc that can fail, an event_record that can fail, and a host_free  */
/* that checks the pool's lock is not held while it runs.                    */
/* ------------------------------------------------------------------------- */

static pyxbuf_backend inner;          /* the emulated device's own functions */
static int fail_host_alloc;           /* 1: host_alloc fails */
static int64_t records_before_failure = -1; /* event_record: this many succeed, then fail */
static void *freed[16];               /* host_free's pointers, newest last */
static int nfreed;
static atomic_int lock_checks_pending, freed_under_lock;

/* An event that reports "not yet" to its first `late` queries, then "done":
 * it completes while the pool is between two looks at it. */
typedef struct late_event {
    int late;
} late_event;

static int flaky_host_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    if (fail_host_alloc) return pyxbuf__error(err, PYXBUF_ENOMEM, -1, "flaky: host_alloc fails");
    return inner.host_alloc(ctx, id, n, ptr, err);
}

static void *take_stats(void *unused) {
    (void)unused;
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st); /* blocks while the pool's lock is held */
    atomic_fetch_sub(&lock_checks_pending, 1);
    return NULL;
}

/* Another thread takes the pool's lock; if it cannot within a second, the
 * pool called host_free with its lock held. */
static void check_pool_lock_free(void) {
    pthread_t t;
    atomic_fetch_add(&lock_checks_pending, 1);
    if (pthread_create(&t, NULL, take_stats, NULL) != 0) {
        atomic_fetch_sub(&lock_checks_pending, 1);
        return;
    }
    pthread_detach(t);
    for (int i = 0; i < 1000 && atomic_load(&lock_checks_pending) > 0; i++) usleep(1000);
    if (atomic_load(&lock_checks_pending) > 0) atomic_store(&freed_under_lock, 1);
}

static int flaky_host_free(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    check_pool_lock_free();
    if (nfreed < 16) freed[nfreed++] = ptr;
    return inner.host_free(ctx, id, ptr, err);
}

static int flaky_event_record(void *ctx, int32_t id, int64_t stream, void **event,
                              pyxbuf_error *err) {
    if (records_before_failure == 0)
        return pyxbuf__error(err, PYXBUF_EDEVICE, -1, "flaky: event_record fails");
    if (records_before_failure > 0) records_before_failure--;
    return inner.event_record(ctx, id, stream, event, err);
}

/* For a backend whose every event is a late_event. */
static int late_event_query(void *ctx, int32_t id, void *event, int32_t block, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    late_event *e = event;
    if (block || e->late == 0) return 1;
    e->late--;
    return 0;
}

static int late_event_destroy(void *ctx, int32_t id, void *event, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    free(event);
    return 0;
}

static pyxbuf_backend flaky(void) {
    inner = emulated();
    pyxbuf_backend b = inner;
    b.host_alloc = flaky_host_alloc;
    b.host_free = flaky_host_free;
    return b;
}

static int blocks_freed_include(const void *p) {
    for (int i = 0; i < nfreed; i++)
        if (freed[i] == p) return 1;
    return 0;
}

TEST_CASE(a_block_freed_while_waited_for_is_never_handed_out) {
    /* issue 47 item 2: the pool kept a raw pointer to an idle block whose
     * event was pending, freed that block when the event completed during
     * make_room, then (host_alloc failing) handed the freed block out. */
    pyxbuf_backend b = flaky();
    b.event_query = late_event_query;
    b.event_destroy = late_event_destroy;
    pyxbuf_pinned_pool_trim();
    configure(2 * CLASS, 2);
    pyxbuf__pinned_block *a = pyxbuf__pinned_take(&b, 0, CLASS);
    pyxbuf__pinned_block *held = pyxbuf__pinned_take(&b, 0, CLASS);
    CHECK(a != NULL && held != NULL);
    void *a_ptr = a->ptr;
    late_event *ev = calloc(1, sizeof *ev);
    ev->late = 1; /* pending at the pool's first look, done at its second */
    pyxbuf__pinned_give(a, ev);
    fail_host_alloc = 1;
    nfreed = 0;
    pyxbuf__pinned_block *got = pyxbuf__pinned_take(&b, 0, CLASS);
    int freed_block = blocks_freed_include(a_ptr);
    /* Either the block was reused (not freed) or the take found none. */
    CHECK(got == NULL || !freed_block);
    if (got != NULL && !freed_block) pyxbuf__pinned_give(got, NULL);
    fail_host_alloc = 0;
    pyxbuf__pinned_give(held, NULL);
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st);
    CHECK_INT_EQ(st.used_bytes, 0);
    pyxbuf_pinned_pool_trim();
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
}

/* A staged copy whose second event_record fails after its copy was queued;
 * then the pool's next owner of that buffer writes it, and the stream runs. */
static void staged_copy_with_a_failed_record(int32_t to_host) {
    pyxbuf_backend b = flaky();
    b.event_record = flaky_event_record;
    pyxbuf_pinned_pool_trim();
    configure(64 * CLASS, 1);
    pyxbuf_error err;
    int64_t stream;
    CHECK(pyxbuf_emulated_stream_create(0, &stream, &err) == 0);
    size_t n = (size_t)3 << 16; /* three chunks of 64 KiB */
    unsigned char *host = malloc(n);
    memset(host, 0x11, n);
    void *dev = NULL;
    CHECK(b.alloc(b.ctx, 0, n, &dev, &err) == 0);
    CHECK(b.copy_from_host(b.ctx, 0, dev, host, n, PYXBUF_STREAM_NONE, &err) == 0);
    stock(&b, (size_t)64 << 10, 3);
    records_before_failure = 0; /* the first chunk's record fails: nothing waits for its copy */
    int rc = to_host ? pyxbuf__copy_to_host(&b, 0, host, dev, n, stream, &err)
                     : pyxbuf__copy_from_host(&b, 0, dev, host, n, stream, &err);
    records_before_failure = -1;
    CHECK(rc < 0);
    CHECK_CONTAINS(err.message, "event_record fails");
    /* The pool's next owners of the 64 KiB class fill their blocks. */
    pyxbuf__pinned_block *mine[3];
    for (int i = 0; i < 3; i++) {
        mine[i] = pyxbuf__pinned_take(&b, 0, (size_t)64 << 10);
        CHECK(mine[i] != NULL);
        if (mine[i]) memset(mine[i]->ptr, 0xAB, (size_t)64 << 10);
    }
    CHECK(b.synchronize(b.ctx, 0, stream, &err) == 0); /* whatever was queued runs now */
    for (int i = 0; i < 3; i++) {
        if (mine[i] == NULL) continue;
        const unsigned char *p = mine[i]->ptr;
        size_t bad = 0;
        for (size_t k = 0; k < ((size_t)64 << 10); k++) bad += p[k] != 0xAB;
        CHECK_INT_EQ(bad, 0); /* no copy queued before wrote into it afterwards */
        pyxbuf__pinned_give(mine[i], NULL);
    }
    /* Nor did a copy queued before send the new owners' bytes to the device. */
    unsigned char *now = malloc(n);
    CHECK(pyxbuf_emulated_peek(dev, now, n, &err) == 0);
    size_t leaked = 0;
    for (size_t k = 0; k < n; k++) leaked += now[k] == 0xAB;
    CHECK_INT_EQ(leaked, 0);
    free(now);
    CHECK(pyxbuf_emulated_stream_destroy(stream, &err) == 0);
    CHECK(b.free(b.ctx, 0, dev, &err) == 0);
    free(host);
    pyxbuf_pinned_pool_trim();
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
}

TEST_CASE(a_failed_record_keeps_a_device_to_host_buffer_out_of_the_pool) {
    staged_copy_with_a_failed_record(1); /* issue 47 item 3 */
}

TEST_CASE(a_failed_record_keeps_a_host_to_device_buffer_out_of_the_pool) {
    staged_copy_with_a_failed_record(0);
}

TEST_CASE(the_pool_frees_page_locked_memory_outside_its_lock) {
    /* issue 47 item 5: freeing page-locked memory takes the driver
     * milliseconds; every other thread's take waited behind pool_lock. */
    pyxbuf_backend b = flaky();
    configure(64 * CLASS, 1);
    pyxbuf__pinned_block *blk = pyxbuf__pinned_take(&b, 0, CLASS);
    CHECK(blk != NULL);
    pyxbuf__pinned_give(blk, NULL);
    atomic_store(&freed_under_lock, 0);
    pyxbuf_pinned_pool_trim(); /* frees it */
    for (int i = 0; i < 3000 && atomic_load(&lock_checks_pending) > 0; i++) usleep(1000);
    CHECK_INT_EQ(atomic_load(&freed_under_lock), 0);
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
}

/* issue 47 item 1: a chunk of 2^64 - 1 MiB made a staged copy of 0 chunks
 * that returned success having copied nothing; above 3 x 2^62 the pool's
 * size class wrapped to a 0-byte block that a whole chunk was written into. */
static void copy_with_chunk(uint64_t chunk) {
    pyxbuf_backend b = emulated();
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    c.enabled = 1, c.threshold = 1, c.buffers = 8, c.threads = 2;
    c.chunk = chunk;
    c.pool_cap = UINT64_MAX;
    pyxbuf_error err;
    int rc = pyxbuf_transfer_config_set(&c, &err);
    CHECK_INT_EQ(rc, PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "pyxbuf_transfer_config_set: chunk is ");
    CHECK_CONTAINS(err.message, "it must be 65536..1073741824 bytes");
    size_t n = (size_t)3 << 20;
    unsigned char *src = malloc(n), *back = calloc(n, 1);
    for (size_t k = 0; k < n; k++) src[k] = (unsigned char)(k * 7u + 1u);
    void *dev = NULL;
    CHECK(b.alloc(b.ctx, 0, n, &dev, &err) == 0);
    CHECK(pyxbuf__copy_from_host(&b, 0, dev, src, n, 0, &err) == 0);
    CHECK(b.copy_to_host(b.ctx, 0, back, dev, n, 0, &err) == 0);
    CHECK(memcmp(src, back, n) == 0); /* every byte arrived */
    CHECK(b.free(b.ctx, 0, dev, &err) == 0);
    free(src);
    free(back);
}

TEST_CASE(a_chunk_that_wraps_the_chunk_count_is_refused) {
    copy_with_chunk(UINT64_MAX - ((uint64_t)1 << 20) + 1);
}

TEST_CASE(a_chunk_that_wraps_the_size_class_is_refused) {
    copy_with_chunk((uint64_t)3 << 62 | ((uint64_t)1 << 20));
}

TEST_CASE(every_knob_is_bounded_and_every_product_checked) {
    pyxbuf_transfer_config c = {.size = sizeof c}, bad;
    pyxbuf_transfer_config_get(&c);
    pyxbuf_error err;
    bad = c, bad.chunk = ((uint64_t)1 << 30) + 1;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "chunk is 1073741825; it must be 65536..1073741824 bytes");
    bad = c, bad.pool_cap = UINT64_MAX;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "pool_cap is 18446744073709551615; it must be at most");
    bad = c, bad.threshold = UINT64_MAX;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "threshold is 18446744073709551615");
    bad = c, bad.enabled = 7;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "enabled is 7; it must be 0 or 1");
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&c, &err), 0);
    CHECK_INT_EQ(pyxbuf_transfer_config_check(&err), 0);
}

/* The environment goes through the same checks: a bad variable is an error
 * at first use, naming it, until the configuration is set. */
TEST_CASE(a_bad_environment_variable_is_an_error_at_first_use) {
    setenv("PYXBUF_STAGING_CHUNK", "17592186044415M", 1); /* 2^64 - 1 MiB */
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_transfer_config_check(&err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "PYXBUF_STAGING_CHUNK is '17592186044415M'");
    CHECK_CONTAINS(err.message, "65536..1073741824 bytes");
    pyxbuf_backend b = emulated();
    size_t n = (size_t)16 << 20;
    unsigned char *src = calloc(n, 1);
    void *dev = NULL;
    CHECK(b.alloc(b.ctx, 0, n, &dev, &err) == 0);
    CHECK_INT_EQ(pyxbuf__copy_from_host(&b, 0, dev, src, n, 0, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "PYXBUF_STAGING_CHUNK");
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c); /* the defaults, for a fresh start */
    CHECK_INT_EQ(c.chunk, (uint64_t)16 << 20);
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&c, &err), 0);
    CHECK_INT_EQ(pyxbuf_transfer_config_check(&err), 0);
    CHECK_INT_EQ(pyxbuf__copy_from_host(&b, 0, dev, src, n, 0, &err), 0);
    CHECK(b.free(b.ctx, 0, dev, &err) == 0);
    free(src);
}

/* issue 47 item 6: the emulated device's memory was one MAP_SHARED memfd, so
 * a forked child's device writes landed in its parent's device memory. */
TEST_CASE(a_forked_childs_device_writes_stay_in_the_child) {
    pyxbuf_backend b = emulated();
    pyxbuf_error err;
    size_t n = (size_t)1 << 16;
    unsigned char *host = malloc(n), *back = malloc(n);
    memset(host, 0x5A, n);
    void *dev = NULL;
    CHECK(b.alloc(b.ctx, 0, n, &dev, &err) == 0);
    CHECK(b.copy_from_host(b.ctx, 0, dev, host, n, PYXBUF_STREAM_NONE, &err) == 0);
    pid_t pid = fork();
    if (pid == 0) { /* the child: sees the parent's bytes, then writes its own */
        int ok = b.copy_to_host(b.ctx, 0, back, dev, n, PYXBUF_STREAM_NONE, &err) == 0 &&
                 memcmp(back, host, n) == 0;
        memset(host, 0xC3, n);
        ok = ok && b.copy_from_host(b.ctx, 0, dev, host, n, PYXBUF_STREAM_NONE, &err) == 0 &&
             b.copy_to_host(b.ctx, 0, back, dev, n, PYXBUF_STREAM_NONE, &err) == 0 &&
             memcmp(back, host, n) == 0;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(b.copy_to_host(b.ctx, 0, back, dev, n, PYXBUF_STREAM_NONE, &err) == 0);
    size_t changed = 0;
    for (size_t k = 0; k < n; k++) changed += back[k] != 0x5A;
    CHECK_INT_EQ(changed, 0); /* the parent's device memory is its own */
    CHECK(b.free(b.ctx, 0, dev, &err) == 0);
    free(host);
    free(back);
}

static atomic_int stop_copying, copies_made;

static void *copy_forever(void *p) {
    pyxbuf_backend *b = p;
    unsigned char host[4096];
    void *dev = NULL;
    pyxbuf_error err;
    if (b->alloc(b->ctx, 0, sizeof host, &dev, &err) != 0) return NULL;
    while (!atomic_load(&stop_copying)) {
        b->copy_to_host(b->ctx, 0, host, dev, sizeof host, PYXBUF_STREAM_NONE, &err);
        atomic_fetch_add(&copies_made, 1);
    }
    b->free(b->ctx, 0, dev, &err);
    return NULL;
}

/* A child forked while another thread held the emulated device's lock hung
 * at its first device call. Each child makes one and exits; a child still
 * running after ten seconds has hung. */
TEST_CASE(a_child_forked_while_another_thread_copies_is_not_stuck) {
    static pyxbuf_backend b;
    b = emulated();
    pthread_t t;
    atomic_store(&stop_copying, 0);
    CHECK(pthread_create(&t, NULL, copy_forever, &b) == 0);
    while (atomic_load(&copies_made) == 0) usleep(100); /* it is copying */
    int hung = 0;
    for (int i = 0; i < 40 && !hung; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            void *dev = NULL;
            pyxbuf_error err;
            int ok = b.alloc(b.ctx, 0, 64, &dev, &err) == 0 && b.free(b.ctx, 0, dev, &err) == 0;
            _exit(ok ? 0 : 1);
        }
        int status = 0;
        pid_t done = 0;
        for (int ms = 0; ms < 10000 && (done = waitpid(pid, &status, WNOHANG)) == 0; ms++)
            usleep(1000);
        if (done == 0) {
            hung = 1;
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        } else {
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
    }
    CHECK_INT_EQ(hung, 0);
    atomic_store(&stop_copying, 1);
    pthread_join(t, NULL);
}

/* issue 47 part 2: which published engine a copy may share. Without a
 * running interpreter (this program) every copy keeps its own. */
TEST_CASE(an_engine_of_another_layout_or_older_is_not_shared) {
    const pyxbuf__engine *own = &pyxbuf__own_engine;
    CHECK(pyxbuf__engine_in_use() == own);
    char why[256] = "";
    CHECK_INT_EQ(pyxbuf__engine_usable(own, why, sizeof why), 1);
    pyxbuf__engine same = *own; /* another copy of this very layout */
    CHECK_INT_EQ(pyxbuf__engine_usable(&same, why, sizeof why), 1);
    pyxbuf__engine other = *own;
    other.layout = 999;
    other.installer_version = "9.9.9";
    CHECK_INT_EQ(pyxbuf__engine_usable(&other, why, sizeof why), 0);
    CHECK_CONTAINS(why, "pyxbuf 9.9.9 installed it with layout 999");
    other = *own;
    other.backend_size -= 8; /* a pyxbuf_backend of another size */
    CHECK_INT_EQ(pyxbuf__engine_usable(&other, why, sizeof why), 0);
    CHECK_CONTAINS(why, "which this copy");
    other = *own;
    other.size = 16; /* older: fewer functions than this copy calls */
    CHECK_INT_EQ(pyxbuf__engine_usable(&other, why, sizeof why), 0);
    CHECK_CONTAINS(why, "older than this copy");
}

/* ------------------------------------------------------------------------- */
/* Idle buffers only; the pool grows in the background (issue 47 part 3)     */
/* ------------------------------------------------------------------------- */

static pyxbuf_backend plain;            /* the emulated device's own functions */
static pthread_t caller;                /* the test's thread */
static atomic_int allocs_on_caller, allocs_elsewhere;

static int counted_host_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    atomic_fetch_add(pthread_equal(pthread_self(), caller) ? &allocs_on_caller : &allocs_elsewhere,
                     1);
    return plain.host_alloc(ctx, id, n, ptr, err);
}

/* The emulated device with host_alloc counted by thread; chunks of 256 KiB,
 * 3 buffers, copies from 1 MiB pipelined, an empty pool. */
static pyxbuf_backend counting(uint64_t cap) {
    plain = emulated();
    pyxbuf_backend b = plain;
    b.host_alloc = counted_host_alloc;
    caller = pthread_self();
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    c.enabled = 1, c.threshold = 1 << 20, c.chunk = CLASS, c.buffers = 3, c.threads = 2;
    c.pool_cap = cap;
    pyxbuf_error err;
    CHECK(pyxbuf_transfer_config_set(&c, &err) == 0);
    grown();
    pyxbuf_pinned_pool_trim();
    atomic_store(&allocs_on_caller, 0);
    atomic_store(&allocs_elsewhere, 0);
    return b;
}

/* n bytes up and back through b, checked. */
static void round_trip(const pyxbuf_backend *b, size_t n) {
    unsigned char *src = malloc(n), *back = calloc(n, 1);
    for (size_t k = 0; k < n; k++) src[k] = (unsigned char)(k * 13u + n);
    void *dev = NULL;
    pyxbuf_error err;
    CHECK(b->alloc(b->ctx, 0, n, &dev, &err) == 0);
    CHECK(pyxbuf__copy_from_host(b, 0, dev, src, n, 0, &err) == 0);
    CHECK(pyxbuf__copy_to_host(b, 0, back, dev, n, 0, &err) == 0);
    CHECK(memcmp(src, back, n) == 0);
    CHECK(b->free(b->ctx, 0, dev, &err) == 0);
    free(src);
    free(back);
}

/* n bytes to the device through b. */
static void upload(const pyxbuf_backend *b, size_t n) {
    unsigned char *src = malloc(n), *back = calloc(n, 1);
    for (size_t k = 0; k < n; k++) src[k] = (unsigned char)(k * 11u + 5u);
    void *dev = NULL;
    pyxbuf_error err;
    CHECK(b->alloc(b->ctx, 0, n, &dev, &err) == 0);
    CHECK(pyxbuf__copy_from_host(b, 0, dev, src, n, 0, &err) == 0);
    CHECK(pyxbuf_emulated_peek(dev, back, n, &err) == 0);
    CHECK(memcmp(src, back, n) == 0);
    CHECK(b->free(b->ctx, 0, dev, &err) == 0);
    free(src);
    free(back);
}

TEST_CASE(a_medium_copy_never_page_locks_on_its_path_and_the_pool_grows_for_the_next) {
    pyxbuf_backend b = counting(64 * CLASS);
    upload(&b, (size_t)200 << 10); /* no idle buffer: direct, and one asked for */
    pyxbuf_pinned_pool_stats st = grown();
    CHECK_INT_EQ(atomic_load(&allocs_on_caller), 0);
    CHECK_INT_EQ(atomic_load(&allocs_elsewhere), 1);
    CHECK_INT_EQ(st.background_allocations, 1);
    CHECK_INT_EQ(st.held_bytes, CLASS);
    const size_t sizes[] = {64 << 10, (64 << 10) + 1, 200 << 10, CLASS, CLASS + 4097,
                            (1 << 20) - 1};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) round_trip(&b, sizes[i]);
    pyxbuf_pinned_pool_stats after = grown();
    CHECK_INT_EQ(atomic_load(&allocs_on_caller), 0);
    CHECK(after.reuses >= st.reuses + 6); /* every medium copy went through the buffer */
    CHECK_INT_EQ(after.used_bytes, 0);
    pyxbuf_pinned_pool_trim();
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
}

TEST_CASE(a_small_copy_is_direct) {
    pyxbuf_backend b = counting(64 * CLASS);
    round_trip(&b, (64 << 10) - 1);
    pyxbuf_pinned_pool_stats st = grown();
    CHECK_INT_EQ(st.allocations + st.reuses, 0);
}

TEST_CASE(a_cold_copy_of_many_chunks_page_locks_two_buffers_and_grows_the_rest) {
    pyxbuf_backend b = counting(64 * CLASS);
    size_t n = PYXBUF__STAGING_COLD_CHUNKS * CLASS + 1;
    unsigned char *src = malloc(n), *back = calloc(n, 1);
    for (size_t k = 0; k < n; k++) src[k] = (unsigned char)(k * 29u + 3u);
    void *dev = NULL;
    pyxbuf_error err;
    CHECK(b.alloc(b.ctx, 0, n, &dev, &err) == 0);
    CHECK(pyxbuf__copy_from_host(&b, 0, dev, src, n, 0, &err) == 0);
    CHECK_INT_EQ(atomic_load(&allocs_on_caller), 2); /* two cold buffers on its path */
    pyxbuf_pinned_pool_stats st = grown();
    CHECK_INT_EQ(st.held_bytes, 5 * CLASS); /* the two, and the three it wanted, grown */
    CHECK(pyxbuf__copy_to_host(&b, 0, back, dev, n, 0, &err) == 0);
    CHECK(memcmp(src, back, n) == 0);
    CHECK_INT_EQ(atomic_load(&allocs_on_caller), 2); /* warm now: three idle */
    CHECK(b.free(b.ctx, 0, dev, &err) == 0);
    free(src);
    free(back);
    pyxbuf_pinned_pool_trim();
}

TEST_CASE(a_copy_under_cold_chunks_that_finds_no_buffer_is_direct) {
    pyxbuf_backend b = counting(64 * CLASS);
    upload(&b, (PYXBUF__STAGING_COLD_CHUNKS - 1) * CLASS);
    CHECK_INT_EQ(atomic_load(&allocs_on_caller), 0);
    CHECK_INT_EQ(grown().held_bytes, 3 * CLASS);
    pyxbuf_pinned_pool_trim();
}

TEST_CASE(the_pool_grows_within_its_cap_freeing_idle_blocks_of_other_sizes) {
    pyxbuf_backend b = counting(3 * CLASS); /* the least: chunk x buffers */
    pyxbuf__pinned_block *idle = pyxbuf__pinned_take(&b, 0, (size_t)64 << 10);
    pyxbuf__pinned_block *used = pyxbuf__pinned_take(&b, 0, (size_t)128 << 10);
    CHECK(idle != NULL && used != NULL);
    pyxbuf__pinned_give(idle, NULL); /* idle, of another size: freed for the growth */
    pyxbuf__pinned_grow(&b, 0, CLASS, 5);
    pyxbuf__pinned_grow(&b, 0, CLASS, 2); /* asked already: the larger count stands */
    pyxbuf_pinned_pool_stats st = grown();
    CHECK_INT_EQ(st.held_bytes, ((size_t)128 << 10) + 2 * CLASS); /* in use: kept */
    CHECK_INT_EQ(st.background_allocations, 2);
    pyxbuf__pinned_grow(&b, 0, 4 * CLASS, 1); /* larger than the cap: never */
    CHECK_INT_EQ(grown().background_allocations, 2);
    pyxbuf__pinned_give(used, NULL);
    pyxbuf_pinned_pool_trim();
    CHECK_INT_EQ(pyxbuf_emulated_live_host_allocations(), 0);
}

TEST_CASE(a_result_is_page_locked_only_when_an_idle_block_waits) {
    counting(64 * CLASS);
    size_t n = (size_t)300 << 10;
    CHECK(pyxbuf__pinned_result(PYXBUF_DL_EXT_DEV, 0, n) == NULL); /* pageable */
    CHECK_INT_EQ(grown().background_allocations, 0); /* nothing asked yet */
    pyxbuf__pinned_result_missed(PYXBUF_DL_EXT_DEV, 0, n); /* a size seen once: none */
    CHECK_INT_EQ(grown().background_allocations, 0);
    pyxbuf__pinned_result_missed(PYXBUF_DL_EXT_DEV, 0, n + 1); /* another size */
    CHECK_INT_EQ(grown().background_allocations, 0);
    pyxbuf__pinned_result_missed(PYXBUF_DL_EXT_DEV, 0, n); /* missed again: one grows */
    CHECK_INT_EQ(grown().background_allocations, 1);
    pyxbuf__pinned_block *blk = pyxbuf__pinned_result(PYXBUF_DL_EXT_DEV, 0, n);
    CHECK(blk != NULL && blk->size >= n);
    CHECK(pyxbuf__pinned_result(PYXBUF_DL_EXT_DEV, 0, (size_t)63 << 10) == NULL); /* small */
    if (blk) pyxbuf__pinned_give(blk, NULL);
    grown();
    pyxbuf_pinned_pool_trim();
}

TEST_CASE(a_forked_child_grows_its_pool_with_a_grower_of_its_own) {
    counting(64 * CLASS);
    size_t n = (size_t)300 << 10;
    CHECK(pyxbuf__pinned_result(PYXBUF_DL_EXT_DEV, 0, n) == NULL);
    pyxbuf__pinned_result_missed(PYXBUF_DL_EXT_DEV, 0, n);
    pyxbuf__pinned_result_missed(PYXBUF_DL_EXT_DEV, 0, n); /* the parent's grower */
    grown();
    pyxbuf_pinned_pool_trim();
    pid_t pid = fork();
    if (pid == 0) {
        int ok = pyxbuf__pinned_result(PYXBUF_DL_EXT_DEV, 0, n) == NULL;
        pyxbuf__pinned_result_missed(PYXBUF_DL_EXT_DEV, 0, n);
        pyxbuf__pinned_result_missed(PYXBUF_DL_EXT_DEV, 0, n);
        pyxbuf_pinned_pool_stats st;
        for (int i = 0; i < 10000; i++) {
            pyxbuf_pinned_pool_stats_get(&st);
            if (st.background_pending == 0) break;
            usleep(1000);
        }
        pyxbuf__pinned_block *blk = pyxbuf__pinned_result(PYXBUF_DL_EXT_DEV, 0, n);
        ok = ok && st.background_pending == 0 && blk != NULL;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_MAIN(TEST_ENTRY(a_block_goes_out_again_only_after_its_event),
          TEST_ENTRY(at_the_cap_a_take_waits_for_a_queued_block_or_gets_none),
          TEST_ENTRY(trim_keeps_a_block_whose_last_use_is_queued),
          TEST_ENTRY(staged_copies_from_four_threads_at_once),
          TEST_ENTRY(parallel_copy_splits_at_page_boundaries),
          TEST_ENTRY(bad_configurations_and_half_staging_backends),
          TEST_ENTRY(a_block_freed_while_waited_for_is_never_handed_out),
          TEST_ENTRY(a_failed_record_keeps_a_device_to_host_buffer_out_of_the_pool),
          TEST_ENTRY(a_failed_record_keeps_a_host_to_device_buffer_out_of_the_pool),
          TEST_ENTRY(the_pool_frees_page_locked_memory_outside_its_lock),
          TEST_ENTRY(a_chunk_that_wraps_the_chunk_count_is_refused),
          TEST_ENTRY(a_chunk_that_wraps_the_size_class_is_refused),
          TEST_ENTRY(every_knob_is_bounded_and_every_product_checked),
          TEST_ENTRY(a_bad_environment_variable_is_an_error_at_first_use),
          TEST_ENTRY(a_forked_childs_device_writes_stay_in_the_child),
          TEST_ENTRY(a_child_forked_while_another_thread_copies_is_not_stuck),
          TEST_ENTRY(an_engine_of_another_layout_or_older_is_not_shared),
          TEST_ENTRY(a_medium_copy_never_page_locks_on_its_path_and_the_pool_grows_for_the_next),
          TEST_ENTRY(a_small_copy_is_direct),
          TEST_ENTRY(a_cold_copy_of_many_chunks_page_locks_two_buffers_and_grows_the_rest),
          TEST_ENTRY(a_copy_under_cold_chunks_that_finds_no_buffer_is_direct),
          TEST_ENTRY(the_pool_grows_within_its_cap_freeing_idle_blocks_of_other_sizes),
          TEST_ENTRY(a_result_is_page_locked_only_when_an_idle_block_waits),
          TEST_ENTRY(a_forked_child_grows_its_pool_with_a_grower_of_its_own))
