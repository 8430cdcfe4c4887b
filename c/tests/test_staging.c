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

#include <pthread.h>

#define CLASS ((size_t)256 << 10) /* a size that is its own size class */

static pyxbuf_backend emulated(void) {
    pyxbuf_error err;
    pyxbuf_backend b;
    CHECK(pyxbuf_emulated_register(&err) == 0);
    CHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, &err) == 0);
    return b;
}

static void configure(uint64_t cap, int32_t threads) {
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    c.enabled = 1, c.threshold = 1, c.chunk = 64 << 10, c.buffers = 3, c.threads = threads;
    c.pool_cap = cap;
    pyxbuf_error err;
    CHECK(pyxbuf_transfer_config_set(&c, &err) == 0);
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

TEST_MAIN(TEST_ENTRY(a_block_goes_out_again_only_after_its_event),
          TEST_ENTRY(at_the_cap_a_take_waits_for_a_queued_block_or_gets_none),
          TEST_ENTRY(trim_keeps_a_block_whose_last_use_is_queued),
          TEST_ENTRY(staged_copies_from_four_threads_at_once),
          TEST_ENTRY(parallel_copy_splits_at_page_boundaries),
          TEST_ENTRY(bad_configurations_and_half_staging_backends))
