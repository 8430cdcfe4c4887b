/* test_device_pool.c -- the stream-ordered device pool (issue 47, part 3) on
 * the emulated device: its CUDA rules made deterministic (reuse on the
 * freeing stream at once, on another only once the stream ran past the free,
 * trim, the release threshold at a synchronisation, the cap, fork), the
 * backend table's and the configuration's refusals, and pyxbuf's own device
 * blocks (device_alloc.c: a free ordered after every stream the memory was
 * handed to). Linked statically for the device layer's hidden entry points;
 * needs no Python. */
#include "pyxbuf.h"
#include "device/device.h" /* linked statically: pyxbuf's device blocks */
#include "device/emulated.h"
#include "testing.h"
#include "emulated_fixture.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static pyxbuf_emulated_pool_stats stats(void) {
    pyxbuf_emulated_pool_stats st;
    pyxbuf_emulated_pool_stats_get(0, &st);
    return st;
}

static int64_t new_stream(void) {
    int64_t s = 0;
    pyxbuf_error err;
    CHECK(pyxbuf_emulated_stream_create(0, &s, &err) == 0);
    return s;
}

static void end_stream(int64_t s) {
    pyxbuf_error err;
    CHECK(pyxbuf_emulated_stream_destroy(s, &err) == 0);
}

static void *alloc_on(const pyxbuf_backend *b, size_t n, int64_t s) {
    void *p = NULL;
    pyxbuf_error err;
    int rc = b->alloc_async(b->ctx, 0, n, s, &p, &err);
    if (rc != 0) fprintf(stderr, "alloc_async: %s\n", err.message);
    CHECK_INT_EQ(rc, 0);
    return p;
}

static void free_on(const pyxbuf_backend *b, void *p, int64_t s) {
    pyxbuf_error err;
    int rc = b->free_async(b->ctx, 0, p, s, &err);
    if (rc != 0) fprintf(stderr, "free_async: %s\n", err.message);
    CHECK_INT_EQ(rc, 0);
}

/* Work still queued on `s`: a write of one byte somewhere else. */
static void *keep_busy(const pyxbuf_backend *b, int64_t s) {
    void *other = NULL;
    pyxbuf_error err;
    char byte = 7;
    CHECK(b->alloc(b->ctx, 0, 1, &other, &err) == 0);
    CHECK(pyxbuf_emulated_enqueue_write(0, s, other, &byte, 1, &err) == 0);
    return other;
}

static void sync_stream(const pyxbuf_backend *b, int64_t s) {
    pyxbuf_error err;
    CHECK(b->synchronize(b->ctx, 0, s, &err) == 0);
}

static void trim_all(const pyxbuf_backend *b) {
    pyxbuf_error err;
    CHECK(b->pool_trim(b->ctx, 0, 0, &err) == 0);
}

static void set_pool(int32_t off, uint64_t release_threshold) {
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    c.device_pool_off = off;
    c.device_pool_release_threshold = release_threshold;
    pyxbuf_error err;
    CHECK(pyxbuf_transfer_config_set(&c, &err) == 0);
}

/* ------------------------------------------------------------------------- */
/* The emulated device's pool                                                */
/* ------------------------------------------------------------------------- */

TEST_CASE(memory_freed_on_a_stream_goes_to_that_stream_at_once) {
    pyxbuf_backend b = emulated();
    int64_t s = new_stream();
    void *busy = keep_busy(&b, s);
    pyxbuf_emulated_pool_stats before = stats();
    void *p = alloc_on(&b, 64 * KIB, s);
    free_on(&b, p, s); /* queued behind the busy write */
    CHECK_INT_EQ(pyxbuf_emulated_pending(0, s), 2);
    CHECK(alloc_on(&b, 64 * KIB, s) == p); /* later work on s is ordered after the free */
    pyxbuf_emulated_pool_stats after = stats();
    CHECK_INT_EQ(after.allocations - before.allocations, 2);
    CHECK_INT_EQ(after.reuses - before.reuses, 1);
    free_on(&b, p, s);
    end_stream(s);
    pyxbuf_error err;
    CHECK(b.free(b.ctx, 0, busy, &err) == 0);
    trim_all(&b);
    CHECK_INT_EQ(stats().reserved_bytes, 0);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), 0);
}

/* The rule a real device keeps: a block freed on A while A's work is queued
 * is not handed to B (B's work could run before A's); once A has run past
 * the free, it is. */
TEST_CASE(a_block_freed_with_work_pending_goes_to_another_stream_only_after_it_ran) {
    pyxbuf_backend b = emulated();
    int64_t a = new_stream(), s_b = new_stream();
    void *busy = keep_busy(&b, a);
    void *p = alloc_on(&b, 64 * KIB, a);
    free_on(&b, p, a);
    void *q = alloc_on(&b, 64 * KIB, s_b);
    CHECK(q != p); /* A's free has not run */
    free_on(&b, q, s_b); /* B is idle: its free runs at once */
    sync_stream(&b, a);  /* A runs past its free */
    uint64_t reuses = stats().reuses;
    void *r = alloc_on(&b, 64 * KIB, s_b);
    void *r2 = alloc_on(&b, 64 * KIB, s_b);
    CHECK((r == p && r2 == q) || (r == q && r2 == p)); /* both blocks, across streams */
    CHECK_INT_EQ(stats().reuses - reuses, 2);
    free_on(&b, r, s_b);
    free_on(&b, r2, s_b);
    end_stream(a);
    end_stream(s_b);
    pyxbuf_error err;
    CHECK(b.free(b.ctx, 0, busy, &err) == 0);
    trim_all(&b);
}

/* Stream order inside one stream: the old owner's queued read sees its own
 * bytes, the new owner's memory reads as fresh (poison) after the free. */
TEST_CASE(the_previous_owners_queued_work_runs_before_the_next_owners) {
    pyxbuf_backend b = emulated();
    int64_t s = new_stream();
    size_t n = 4 * KIB;
    unsigned char old_bytes[4096], seen[4096], fresh[4096], mine[4096];
    memset(old_bytes, 0x11, n);
    memset(mine, 0x22, n);
    pyxbuf_error err;
    void *p = alloc_on(&b, n, s);
    CHECK(pyxbuf_emulated_enqueue_write(0, s, p, old_bytes, n, &err) == 0);
    CHECK(b.copy_async(b.ctx, 0, 1, seen, p, n, s, &err) == 0); /* the old owner reads, later */
    free_on(&b, p, s);
    CHECK(alloc_on(&b, n, s) == p);
    CHECK(b.copy_async(b.ctx, 0, 1, fresh, p, n, s, &err) == 0); /* the new owner's first read */
    CHECK(pyxbuf_emulated_enqueue_write(0, s, p, mine, n, &err) == 0);
    sync_stream(&b, s);
    CHECK(memcmp(seen, old_bytes, n) == 0);
    size_t poison = 0;
    for (size_t i = 0; i < n; i++) poison += fresh[i] == PYXBUF_EMULATED_POISON;
    CHECK_INT_EQ(poison, n);
    CHECK(b.copy_to_host(b.ctx, 0, seen, p, n, s, &err) == 0);
    CHECK(memcmp(seen, mine, n) == 0);
    free_on(&b, p, s);
    end_stream(s);
    trim_all(&b);
}

TEST_CASE(trim_gives_back_idle_blocks_down_to_what_is_kept) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    pyxbuf_emulated_pool_stats st0 = stats();
    void *p[3];
    for (int i = 0; i < 3; i++) p[i] = alloc_on(&b, MIB, 0);
    for (int i = 0; i < 3; i++) free_on(&b, p[i], 0); /* the idle default stream: at once */
    CHECK_INT_EQ(stats().cached_bytes, 3 * MIB);
    CHECK_INT_EQ(stats().reserved_bytes, 3 * MIB);
    pyxbuf_error err;
    CHECK(b.pool_trim(b.ctx, 0, MIB, &err) == 0);
    CHECK_INT_EQ(stats().reserved_bytes, MIB);
    CHECK_INT_EQ(stats().releases - st0.releases, 2);
    trim_all(&b);
    CHECK_INT_EQ(stats().reserved_bytes, 0);
    /* A block whose free is still queued is not idle: trim keeps it. */
    int64_t s = new_stream();
    void *busy = keep_busy(&b, s);
    void *q = alloc_on(&b, MIB, s);
    free_on(&b, q, s);
    trim_all(&b);
    CHECK_INT_EQ(stats().cached_bytes, MIB);
    end_stream(s); /* runs the queue: the free */
    trim_all(&b);
    CHECK_INT_EQ(stats().cached_bytes, 0);
    CHECK(b.free(b.ctx, 0, busy, &err) == 0);
    CHECK(b.pool_trim(b.ctx, 9, 0, &err) == PYXBUF_EDEVICE);
    CHECK_CONTAINS(err.message, "no emulated device 9");
}

TEST_CASE(a_synchronisation_gives_back_what_is_above_the_release_threshold) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    set_pool(0, 2 * MIB);
    void *p[4];
    for (int i = 0; i < 4; i++) p[i] = alloc_on(&b, MIB, 0);
    for (int i = 0; i < 4; i++) free_on(&b, p[i], 0);
    CHECK_INT_EQ(stats().cached_bytes, 4 * MIB); /* nothing happens before a synchronisation */
    sync_stream(&b, 0);
    CHECK_INT_EQ(stats().reserved_bytes, 2 * MIB);
    set_pool(0, 0); /* 0: the default, 256 MiB, keeps the rest */
    sync_stream(&b, 0);
    CHECK_INT_EQ(stats().reserved_bytes, 2 * MIB);
    trim_all(&b);
}

/* The cap: a full device gives back the pool's idle blocks before an
 * allocation fails, never a block whose free is still queued. */
TEST_CASE(a_full_device_gives_back_idle_cached_blocks_first) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    pyxbuf_error err;
    size_t quarter = 256 * MIB;
    void *p[4];
    for (int i = 0; i < 4; i++) p[i] = alloc_on(&b, quarter, 0);
    void *none = NULL;
    CHECK_INT_EQ(b.alloc(b.ctx, 0, MIB, &none, &err), PYXBUF_ENOMEM); /* full */
    int64_t s = new_stream();
    void *busy = NULL;
    free_on(&b, p[0], 0);
    free_on(&b, p[1], 0); /* two idle cached quarters */
    CHECK(b.alloc(b.ctx, 0, 512 * MIB, &none, &err) == 0); /* both given back, merged */
    CHECK_INT_EQ(stats().cached_bytes, 0);
    CHECK(b.free(b.ctx, 0, none, &err) == 0);
    CHECK(b.alloc(b.ctx, 0, 256 * MIB, &busy, &err) == 0);
    CHECK(b.alloc(b.ctx, 0, 256 * MIB - 256, &none, &err) == 0); /* full again */
    char byte = 1;
    CHECK(pyxbuf_emulated_enqueue_write(0, s, busy, &byte, 1, &err) == 0);
    free_on(&b, p[2], s); /* queued behind the write */
    CHECK_INT_EQ(b.alloc(b.ctx, 0, quarter, &none, &err) == 0 ? 0 : err.code, PYXBUF_ENOMEM);
    CHECK_CONTAINS(err.message, "cannot allocate 268435456 bytes on emulated device 0");
    end_stream(s); /* the free runs: now it can go */
    void *q = alloc_on(&b, quarter, 0);
    CHECK(q == p[2]);
    free_on(&b, q, 0);
    free_on(&b, p[3], 0);
    CHECK(b.free(b.ctx, 0, busy, &err) == 0);
    CHECK(b.free(b.ctx, 0, none, &err) == 0);
    trim_all(&b);
    CHECK_INT_EQ(stats().reserved_bytes, 0);
}

/* A forked child gets a private copy of the device (issue 47 item 6) and a
 * pool consistent with it: blocks whose free is queued are copied (the work
 * before the free still reads them), idle cached blocks are not (they read
 * as fresh memory when handed out again). */
TEST_CASE(a_forked_child_keeps_a_pool_consistent_with_its_copy) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    pyxbuf_error err;
    size_t n = 64 * KIB;
    static unsigned char pattern[64 * 1024], seen[64 * 1024], peek[64 * 1024];
    memset(pattern, 0x5A, n);
    int64_t s = new_stream();
    void *x = alloc_on(&b, n, s), *y = alloc_on(&b, n, 0);
    CHECK(b.copy_from_host(b.ctx, 0, x, pattern, n, PYXBUF_STREAM_NONE, &err) == 0);
    CHECK(b.copy_async(b.ctx, 0, 1, seen, x, n, s, &err) == 0); /* x's owner reads, later */
    free_on(&b, x, s); /* queued */
    free_on(&b, y, 0); /* idle */
    pyxbuf_emulated_pool_stats st = stats();
    pid_t pid = fork();
    if (pid == 0) {
        pyxbuf_emulated_pool_stats c;
        pyxbuf_emulated_pool_stats_get(0, &c);
        int ok = c.cached_bytes == st.cached_bytes && c.reserved_bytes == st.reserved_bytes;
        ok = ok && b.synchronize(b.ctx, 0, s, &err) == 0 && memcmp(seen, pattern, n) == 0;
        void *again = NULL;
        ok = ok && b.alloc_async(b.ctx, 0, n, 0, &again, &err) == 0 && (again == x || again == y);
        ok = ok && pyxbuf_emulated_peek(again, peek, n, &err) == 0 &&
             peek[0] == PYXBUF_EMULATED_POISON && peek[n - 1] == PYXBUF_EMULATED_POISON;
        ok = ok && b.free_async(b.ctx, 0, again, 0, &err) == 0 &&
             b.pool_trim(b.ctx, 0, 0, &err) == 0;
        pyxbuf_emulated_pool_stats_get(0, &c);
        _exit(ok && c.reserved_bytes == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_INT_EQ(stats().cached_bytes, st.cached_bytes); /* the parent's pool is its own */
    memset(seen, 0, n);
    sync_stream(&b, s);
    CHECK(memcmp(seen, pattern, n) == 0);
    end_stream(s);
    trim_all(&b);
    CHECK_INT_EQ(stats().reserved_bytes, 0);
}

TEST_CASE(bad_pool_calls_are_refused) {
    pyxbuf_backend b = emulated();
    pyxbuf_error err;
    void *plain = NULL, *p = NULL;
    CHECK(b.alloc(b.ctx, 0, 64, &plain, &err) == 0);
    CHECK_INT_EQ(b.free_async(b.ctx, 0, plain, 0, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "came from alloc, not alloc_async: give it back with free");
    CHECK(b.free(b.ctx, 0, plain, &err) == 0);
    p = alloc_on(&b, 64, 0);
    free_on(&b, p, 0);
    CHECK_INT_EQ(b.free_async(b.ctx, 0, p, 0, &err), PYXBUF_EINVAL); /* twice */
    CHECK_CONTAINS(err.message, "is not a live allocation of emulated device 0");
    CHECK_INT_EQ(b.free(b.ctx, 0, p, &err), PYXBUF_EINVAL); /* the pool's now */
    CHECK_CONTAINS(err.message, "is not a live allocation of emulated device 0");
    pyxbuf_device where;
    CHECK_INT_EQ(b.pointer_query(b.ctx, p, &where, &err), PYXBUF_EDEVICE);
    CHECK_CONTAINS(err.message, "is not in a live allocation of any emulated device");
    CHECK_INT_EQ(b.alloc_async(b.ctx, 0, 64, 60, &p, &err), PYXBUF_EDEVICE);
    CHECK_CONTAINS(err.message, "no stream 60 on emulated device 0");
    CHECK_INT_EQ(b.alloc_async(b.ctx, 0, (size_t)2 << 30, 0, &p, &err), PYXBUF_ENOMEM);
    CHECK_CONTAINS(err.message, "cannot allocate 2147483648 bytes on emulated device 0");
    trim_all(&b);
}

/* ------------------------------------------------------------------------- */
/* The backend table and the configuration                                   */
/* ------------------------------------------------------------------------- */

TEST_CASE(a_backend_gives_both_pool_functions_or_neither) {
    pyxbuf_backend half = emulated();
    half.device_type = 41;
    half.free_async = NULL;
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_backend_register(&half, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "has 1 of alloc_async and free_async and a pool_trim; give "
                                "both or neither");
    pyxbuf_backend trim_only = emulated();
    trim_only.device_type = 41;
    trim_only.alloc_async = NULL, trim_only.free_async = NULL;
    CHECK_INT_EQ(pyxbuf_backend_register(&trim_only, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "has 0 of alloc_async and free_async and a pool_trim; give "
                                "both or neither (pool_trim only with them)");
    pyxbuf_backend no_wait = emulated();
    no_wait.device_type = 41;
    no_wait.event_wait = NULL;
    CHECK_INT_EQ(pyxbuf_backend_register(&no_wait, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "has alloc_async and free_async but not event_record, "
                                "event_wait and event_destroy");
    /* A registrant whose struct predates the pool: whatever follows its size
     * is not read, and it keeps its staging functions. */
    pyxbuf_backend old = emulated();
    old.device_type = 41;
    old.size = (uint32_t)offsetof(pyxbuf_backend, alloc_async);
    old.free_async = NULL; /* past its size: ignored */
    CHECK_INT_EQ(pyxbuf_backend_register(&old, &err), 0);
    pyxbuf_backend got;
    CHECK(pyxbuf_backend_get(41, &got, &err) == 0);
    CHECK(got.alloc_async == NULL && got.free_async == NULL && got.pool_trim == NULL);
    CHECK(got.host_alloc != NULL && got.copy_async != NULL);
    CHECK(pyxbuf_backend_unregister(41) == 0);
    /* The IPC functions come all three or none; one predating them keeps
     * its pool and has none. */
    pyxbuf_backend half_ipc = emulated();
    half_ipc.device_type = 41;
    half_ipc.ipc_close = NULL;
    CHECK_INT_EQ(pyxbuf_backend_register(&half_ipc, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "has 2 of ipc_export, ipc_open and ipc_close; give all three "
                                "or none");
    pyxbuf_backend before_ipc = emulated();
    before_ipc.device_type = 41;
    before_ipc.size = (uint32_t)offsetof(pyxbuf_backend, ipc_export);
    before_ipc.ipc_close = NULL; /* past its size: ignored */
    CHECK_INT_EQ(pyxbuf_backend_register(&before_ipc, &err), 0);
    CHECK(pyxbuf_backend_get(41, &got, &err) == 0);
    CHECK(got.alloc_async != NULL && got.pool_trim != NULL);
    CHECK(got.ipc_export == NULL && got.ipc_open == NULL && got.ipc_close == NULL);
    CHECK(pyxbuf_backend_unregister(41) == 0);
}

TEST_CASE(the_pool_knobs_are_checked_and_zero_means_the_defaults) {
    pyxbuf_transfer_config c = {.size = sizeof c}, bad;
    pyxbuf_transfer_config_get(&c);
    CHECK_INT_EQ(c.device_pool_off, 0);
    pyxbuf_error err;
    bad = c, bad.device_pool_off = 2;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "pyxbuf_transfer_config_set: device_pool_off is 2; it must be "
                                "0 or 1");
    bad = c, bad.device_pool_release_threshold = UINT64_MAX;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "device_pool_release_threshold is 18446744073709551615; it must "
                                "be at most 2^63 - 1 bytes");
    bad = c, bad.device_pool_shareable = 2;
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&bad, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "device_pool_shareable is 2; it must be 0 or 1");
    /* A caller that zeroes what it does not know gets the pool, on. */
    pyxbuf_transfer_config zeroed = c;
    memset(&zeroed.device_pool_off, 0,
           sizeof zeroed - offsetof(pyxbuf_transfer_config, device_pool_off));
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&zeroed, &err), 0);
    pyxbuf_backend b = emulated();
    pyxbuf__device_block *blk = NULL;
    pyxbuf_device dev = {PYXBUF_DL_EXT_DEV, 0};
    CHECK(pyxbuf__device_block_new(&dev, 64, 0, &blk, &err) == 0);
    CHECK_INT_EQ(blk->pooled, 1);
    pyxbuf__device_block_free(blk);
    trim_all(&b);
    CHECK_INT_EQ(pyxbuf_transfer_config_set(&c, &err), 0);
}

/* ------------------------------------------------------------------------- */
/* pyxbuf's own device blocks (device_alloc.c)                               */
/* ------------------------------------------------------------------------- */

static pyxbuf__device_block *block_on(size_t n, int64_t stream) {
    pyxbuf__device_block *blk = NULL;
    pyxbuf_device dev = {PYXBUF_DL_EXT_DEV, 0};
    pyxbuf_error err;
    int rc = pyxbuf__device_block_new(&dev, n, stream, &blk, &err);
    if (rc != 0) fprintf(stderr, "device block: %s\n", err.message);
    CHECK_INT_EQ(rc, 0);
    return blk;
}

TEST_CASE(device_blocks_come_from_the_pool_unless_it_is_off) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    pyxbuf__device_block *p = block_on(MIB, 0);
    CHECK_INT_EQ(p->pooled, 1);
    void *at = p->ptr;
    pyxbuf__device_block_free(p);
    pyxbuf__device_block *again = block_on(MIB, 0);
    CHECK(again->ptr == at);
    pyxbuf__device_block_free(again);
    set_pool(1, 0);
    uint64_t allocations = stats().allocations;
    pyxbuf__device_block *plain = block_on(MIB, 0);
    CHECK_INT_EQ(plain->pooled, 0);
    CHECK_INT_EQ(stats().allocations, allocations);
    pyxbuf__device_block_free(plain);
    set_pool(0, 0);
    pyxbuf__device_block *host = NULL;
    pyxbuf_device cpu = {PYXBUF_DL_CPU, 0};
    pyxbuf_error err;
    CHECK(pyxbuf__device_block_new(&cpu, 64, 0, &host, &err) == 0);
    CHECK_INT_EQ(host->pooled, 0); /* the CPU backend has no pool */
    pyxbuf__device_block_free(host);
    trim_all(&b);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), 0);
}

/* The cross-stream rule: memory a consumer was handed on stream T, with its
 * work still queued there, is not reused by another stream when its owner
 * lets go: the free waits for T. */
TEST_CASE(a_free_waits_for_a_stream_the_memory_was_handed_to) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    pyxbuf_error err;
    size_t n = 64 * KIB;
    static unsigned char data[64 * 1024], seen[64 * 1024], other[64 * 1024];
    memset(data, 0x3C, n);
    memset(other, 0xA5, n);
    int64_t t = new_stream(), u = new_stream();
    pyxbuf__device_block *blk = block_on(n, 0);
    void *at = blk->ptr;
    CHECK(b.copy_from_host(b.ctx, 0, at, data, n, 0, &err) == 0);
    pyxbuf_device dev = {PYXBUF_DL_EXT_DEV, 0};
    pyxbuf_view view = {.base = {.buf = at}}; /* a consumer's view, for T ... */
    pyxbuf__device_block_used_on(&view, &dev, t);
    CHECK(b.copy_async(b.ctx, 0, 1, seen, at, n, t, &err) == 0); /* ... reads it, later */
    pyxbuf__device_block_view_released(&view, &dev);
    pyxbuf__device_block_free(blk); /* the owner lets go first */
    void *q = alloc_on(&b, n, u);
    CHECK(q != at); /* the free waits for T */
    CHECK(pyxbuf_emulated_enqueue_write(0, u, q, other, n, &err) == 0);
    sync_stream(&b, u);
    sync_stream(&b, t);
    CHECK(memcmp(seen, data, n) == 0); /* T read the owner's bytes */
    sync_stream(&b, 0); /* the default stream runs past the free */
    void *r = alloc_on(&b, n, u);
    CHECK(r == at);
    free_on(&b, q, u);
    free_on(&b, r, u);
    end_stream(t);
    end_stream(u);
    trim_all(&b);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), 0);
}

/* Without the rule the same block goes to U at once (the emulated device
 * keeps CUDA's reuse rules): the test above would then see U's bytes. */
TEST_CASE(a_free_on_an_idle_stream_alone_would_hand_the_block_out_at_once) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    int64_t t = new_stream(), u = new_stream();
    void *busy = keep_busy(&b, t);
    void *p = alloc_on(&b, 64 * KIB, 0);
    free_on(&b, p, 0); /* the default stream is idle, T's work notwithstanding */
    CHECK(alloc_on(&b, 64 * KIB, u) == p);
    free_on(&b, p, u);
    end_stream(t);
    end_stream(u);
    pyxbuf_error err;
    CHECK(b.free(b.ctx, 0, busy, &err) == 0);
    trim_all(&b);
}

/* The event is taken when the consumer releases its view: its stream may be
 * destroyed after that without the memory being lost. */
TEST_CASE(a_consumer_stream_destroyed_after_its_release_still_orders_the_free) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    uint64_t kept = pyxbuf__device_blocks_kept_out();
    int64_t t = new_stream();
    void *busy = keep_busy(&b, t);
    pyxbuf__device_block *blk = block_on(KIB, 0);
    void *at = blk->ptr;
    pyxbuf_device dev = {PYXBUF_DL_EXT_DEV, 0};
    pyxbuf_view view = {.base = {.buf = at}}, other_view = {.base = {.buf = at}};
    pyxbuf__device_block_used_on(&view, &dev, t);
    pyxbuf_view moved = view; /* a Rust PyXBuffer moves; a DLPack capsule keeps a copy */
    memset(&view, 0, sizeof view);
    pyxbuf__device_block_view_released(&moved, &dev);
    end_stream(t);
    /* Another view's release, after T is gone: T is not the stream it named. */
    pyxbuf__device_block_view_released(&other_view, &dev);
    pyxbuf__device_block_free(blk);
    CHECK_INT_EQ(pyxbuf__device_blocks_kept_out(), kept);
    CHECK(alloc_on(&b, KIB, 0) == at);
    free_on(&b, at, 0);
    /* Named but never released, then destroyed: no event can be had, so the
     * block is kept out of the pool rather than freed early. */
    int64_t t2 = new_stream();
    pyxbuf__device_block *lost = block_on(KIB, 0);
    void *lost_at = lost->ptr;
    pyxbuf_view held = {.base = {.buf = lost_at}};
    pyxbuf__device_block_used_on(&held, &dev, t2);
    end_stream(t2);
    pyxbuf__device_block_free(lost);
    CHECK_INT_EQ(pyxbuf__device_blocks_kept_out(), kept + 1);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), 2); /* it and busy */
    pyxbuf_error err;
    CHECK(b.free(b.ctx, 0, lost_at, &err) == 0); /* the test knows it is done with */
    CHECK(b.free(b.ctx, 0, busy, &err) == 0);
    trim_all(&b);
}

/* DLPack's per-thread default stream (2) names another stream on each
 * thread: CUDA and ROCm blocks allocated there live on the legacy default
 * stream (1); the emulated device's streams are its own. */
TEST_CASE(streams_none_and_the_default_streams_are_the_default_stream) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    pyxbuf__device_block *blk = block_on(KIB, PYXBUF_STREAM_NONE);
    CHECK_INT_EQ(blk->stream, PYXBUF_STREAM_DEFAULT);
    pyxbuf__device_block_free(blk);
    blk = block_on(KIB, 2);
    CHECK_INT_EQ(blk->stream, 2);
    pyxbuf__device_block_free(blk);
    trim_all(&b);
}

/* Blocks made, handed to a stream, released and freed from four threads at
 * once (run under ThreadSanitizer by `make test-tsan`). */
static void *churn(void *arg) {
    int64_t s = *(const int64_t *)arg;
    pyxbuf_device dev = {PYXBUF_DL_EXT_DEV, 0};
    for (int i = 0; i < 200; i++) {
        pyxbuf__device_block *blk = NULL;
        pyxbuf_error err;
        if (pyxbuf__device_block_new(&dev, (size_t)(1 + i % 7) * KIB, 0, &blk, &err) != 0)
            return (void *)1;
        pyxbuf_view view = {.base = {.buf = blk->ptr}};
        pyxbuf__device_block_used_on(&view, &dev, s);
        pyxbuf__device_block_view_released(&view, &dev);
        pyxbuf__device_block_free(blk);
    }
    return NULL;
}

TEST_CASE(device_blocks_from_four_threads_at_once) {
    pyxbuf_backend b = emulated();
    trim_all(&b);
    uint64_t kept = pyxbuf__device_blocks_kept_out();
    int64_t streams[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) streams[i] = new_stream();
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&threads[i], NULL, churn, &streams[i]) == 0);
    for (int i = 0; i < 4; i++) {
        void *failed = NULL;
        CHECK(pthread_join(threads[i], &failed) == 0 && failed == NULL);
    }
    for (int i = 0; i < 4; i++) end_stream(streams[i]);
    sync_stream(&b, 0);
    CHECK_INT_EQ(pyxbuf__device_blocks_kept_out(), kept);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), 0);
    trim_all(&b);
    CHECK_INT_EQ(stats().reserved_bytes, 0);
}

TEST_MAIN(TEST_ENTRY(memory_freed_on_a_stream_goes_to_that_stream_at_once),
          TEST_ENTRY(a_block_freed_with_work_pending_goes_to_another_stream_only_after_it_ran),
          TEST_ENTRY(the_previous_owners_queued_work_runs_before_the_next_owners),
          TEST_ENTRY(trim_gives_back_idle_blocks_down_to_what_is_kept),
          TEST_ENTRY(a_synchronisation_gives_back_what_is_above_the_release_threshold),
          TEST_ENTRY(a_full_device_gives_back_idle_cached_blocks_first),
          TEST_ENTRY(a_forked_child_keeps_a_pool_consistent_with_its_copy),
          TEST_ENTRY(bad_pool_calls_are_refused),
          TEST_ENTRY(a_backend_gives_both_pool_functions_or_neither),
          TEST_ENTRY(the_pool_knobs_are_checked_and_zero_means_the_defaults),
          TEST_ENTRY(device_blocks_come_from_the_pool_unless_it_is_off),
          TEST_ENTRY(a_free_waits_for_a_stream_the_memory_was_handed_to),
          TEST_ENTRY(a_free_on_an_idle_stream_alone_would_hand_the_block_out_at_once),
          TEST_ENTRY(a_consumer_stream_destroyed_after_its_release_still_orders_the_free),
          TEST_ENTRY(streams_none_and_the_default_streams_are_the_default_stream),
          TEST_ENTRY(device_blocks_from_four_threads_at_once))
