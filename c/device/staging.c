/* staging.c -- copies between pageable host memory and a device through
 * page-locked buffers from the pinned pool. Copies pipeline: host threads
 * fill buffer k (fill_threads.c) while the device copies buffer k-1, and a
 * buffer is refilled only after the event recorded behind its last copy has
 * happened. A copy of fewer than PIECES chunks goes in smaller pieces, so
 * that it pipelines too. From the configuration's threshold every fill
 * thread helps; below it (64 KiB up) the calling thread and, from
 * MEDIUM_THREADS_MIN, a few fill threads: waking more costs more than they
 * save there. The driver's own path for pageable memory stages through one
 * buffer with one thread (8 GB/s host to device on an H100 against 55
 * pinned). Semantics are the direct copy's: ordered after the work queued
 * on the stream, complete when the call returns.
 *
 * Buffers are taken only when idle in the pool: page-locking a new one
 * costs milliseconds, more than a medium copy takes whole, so a copy that
 * finds too few asks the pool to grow in the background (for the copies
 * after it) and makes do -- with the buffers it found, or directly. Only a
 * copy of at least PYXBUF__STAGING_COLD_CHUNKS chunks that finds none
 * page-locks buffers on its path: two small ones (COLD_BUFFER), since
 * page-locking runs at about 2 GB/s on an H200 machine and the driver's
 * path at 7-9 (bench/results/2026-11-28-h200-transfer.md). */

#include "device/device.h"

#include "base/platform.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pipeline {
    const pyxbuf_backend *b;
    int32_t id;
    int64_t stream;
    size_t n, chunk; /* chunk: bytes per piece, at most a buffer's */
    size_t bufsize;  /* the configuration's chunk: the buffers taken and grown */
    int32_t nbuf, threads;
    pyxbuf__pinned_block *buf[PYXBUF__STAGING_MAX_BUFFERS];
    void *event[PYXBUF__STAGING_MAX_BUFFERS]; /* behind buffer k's last copy */
    /* Buffer k may still be written or read by a copy nobody can wait for
     * (its event could not be recorded, nor the stream synchronised): it
     * never goes back to the pool, whose next owner the copy would corrupt. */
    int lost[PYXBUF__STAGING_MAX_BUFFERS];
    int32_t missing; /* buffers wanted that the pool had not idle */
} pipeline;

/* Below this a copy is direct: the driver copies small pageable buffers
 * inline, and no buffer would pay for itself. */
#define MEDIUM_MIN ((size_t)64 << 10)

/* A copy of fewer than PIECES chunks goes in pieces of about n / PIECES,
 * at least PIECE_MIN (a piece must outweigh the per-piece event and the
 * fill threads' wake-up), so the device copies one while the host fills the
 * next: 4 MiB up in two 2 MiB pieces took 270 us on an H200 against 470 in
 * one (bench/results/2026-11-28-h200-transfer.md). */
#define PIECES 4
#define PIECE_MIN ((size_t)2 << 20)

/* Under the threshold, from here MEDIUM_THREADS threads (the caller and
 * fill threads) fill a piece: 1 MiB up took 91-105 us with four against
 * 121-130 with one and 97-121 with two, and no less with eight or sixteen
 * (two runs, same record). */
#define MEDIUM_THREADS_MIN ((size_t)512 << 10)
#define MEDIUM_THREADS 4

/* The buffers a cold copy (no idle buffer in the pool) page-locks on its
 * path: two of 4 MiB, about 4 ms, where one chunk of 16 MiB took 8 and
 * left the copy serial. */
#define COLD_BUFFER ((size_t)4 << 20)
#define COLD_BUFFERS 2

/* Worth staging: on, at least medium, a backend that can, the stream given,
 * and host memory that is pageable (neither pooled nor memory the backend
 * knows, as CUDA knows page-locked memory another library allocated). */
static int worth_staging(const pyxbuf_backend *b, const void *host, size_t n, int64_t stream,
                         pyxbuf_transfer_config *cfg, pyxbuf_error *err) {
    if (pyxbuf__transfer_config(cfg, err) < 0) return -1; /* a bad environment variable */
    if (!cfg->enabled || n < MEDIUM_MIN || b->copy_async == NULL ||
        stream == PYXBUF_STREAM_NONE || pyxbuf__pinned_contains(host, n))
        return 0;
    pyxbuf_device d;
    return b->pointer_query(b->ctx, host, &d, NULL) != 0;
}

/* Page-locked on the path of a cold copy of at least
 * PYXBUF__STAGING_COLD_CHUNKS chunks: COLD_BUFFERS small buffers, and the
 * copy goes in pieces of their size. How many it got. */
static int32_t take_cold_buffers(pipeline *p) {
    size_t cold = p->chunk < COLD_BUFFER ? p->chunk : COLD_BUFFER;
    int32_t got = 0;
    if (p->n / p->bufsize < PYXBUF__STAGING_COLD_CHUNKS) return 0;
    while (got < COLD_BUFFERS && (p->buf[got] = pyxbuf__pinned_take(p->b, p->id, cold)) != NULL)
        got++;
    if (got > 0) p->chunk = cold;
    return got;
}

/* The buffers the pool has idle, up to nbuf (the rest are p->missing, to
 * grow). None idle: cold buffers, else 0 (the caller copies directly). */
static int take_buffers(pipeline *p) {
    int32_t want = p->nbuf, got = 0;
    while (got < want &&
           (p->buf[got] = pyxbuf__pinned_take_idle(p->b, p->id, p->bufsize)) != NULL)
        got++;
    p->missing = want - got;
    if (got == 0) got = take_cold_buffers(p);
    for (int32_t k = 0; k < got; k++) {
        p->event[k] = NULL;
        p->lost[k] = 0;
    }
    p->nbuf = got;
    return got > 0;
}

/* After the copy, not during it (page-locking competes with the copy's page
 * faults for the process's memory map): the pool grows the buffers this
 * copy went without, for the copies after it. */
static int grow_missing(const pipeline *p, int rc) {
    if (p->missing > 0) pyxbuf__pinned_grow(p->b, p->id, p->bufsize, p->missing);
    return rc;
}

/* Wait for buffer k's last copy; its event goes. */
static int wait_buffer(pipeline *p, int32_t k, pyxbuf_error *err) {
    if (p->event[k] == NULL) return 0;
    int rc = p->b->event_query(p->b->ctx, p->id, p->event[k], 1, err);
    if (rc < 0) return rc;
    p->b->event_destroy(p->b->ctx, p->id, p->event[k], NULL);
    p->event[k] = NULL;
    return 0;
}

/* Every copy waited for (after a failure too: no buffer goes back to the
 * pool with a copy in flight unless the wait itself failed, and then with
 * the event, which the pool checks before reuse). The first error stays. */
static int finish(pipeline *p, int rc, pyxbuf_error *err) {
    for (int32_t k = 0; k < p->nbuf; k++) {
        pyxbuf_error ignored;
        int w = wait_buffer(p, k, rc < 0 ? &ignored : err);
        if (rc == 0) rc = w;
        if (!p->lost[k]) pyxbuf__pinned_give(p->buf[k], p->event[k]);
    }
    return rc;
}

/* Bytes of chunk i (the last one may be short). */
static size_t chunk_len(const pipeline *p, size_t i) {
    size_t off = i * p->chunk;
    return p->n - off < p->chunk ? p->n - off : p->chunk;
}

/* The number of chunks of n bytes (chunk >= 64 KiB: no wrap). A chunk here
 * is one piece of the copy (p->chunk). */
static size_t chunk_count(const pipeline *p) {
    return p->n / p->chunk + (p->n % p->chunk != 0);
}

/* Enqueue chunk i's device copy through buffer k and record its event. A
 * copy queued without an event is waited for at once (the stream is
 * synchronised), or buffer k is lost to the pool. */
static int send_chunk(pipeline *p, size_t i, int32_t to_host, char *dev, pyxbuf_error *err) {
    int32_t k = (int32_t)(i % (size_t)p->nbuf);
    size_t off = i * p->chunk, len = chunk_len(p, i);
    void *host = p->buf[k]->ptr;
    int rc = to_host ? p->b->copy_async(p->b->ctx, p->id, 1, host, dev + off, len, p->stream, err)
                     : p->b->copy_async(p->b->ctx, p->id, 0, dev + off, host, len, p->stream, err);
    if (rc < 0) return rc;
    rc = p->b->event_record(p->b->ctx, p->id, p->stream, &p->event[k], err);
    if (rc < 0) {
        p->event[k] = NULL;
        pyxbuf_error ignored;
        if (p->b->synchronize(p->b->ctx, p->id, p->stream, &ignored) < 0) p->lost[k] = 1;
    }
    return rc;
}

static int stage_in(pipeline *p, char *dst, const char *src, pyxbuf_error *err) {
    int rc = 0;
    size_t chunks = chunk_count(p);
    for (size_t i = 0; i < chunks && rc == 0; i++) {
        int32_t k = (int32_t)(i % (size_t)p->nbuf);
        size_t off = i * p->chunk, len = chunk_len(p, i);
        if ((rc = wait_buffer(p, k, err)) < 0) break;
        pyxbuf__parallel_copy(p->buf[k]->ptr, src + off, len, p->threads);
        rc = send_chunk(p, i, 0, dst, err);
    }
    return finish(p, rc, err);
}

/* New pageable memory is faulted in page by page as the drain threads first
 * write it. Asking for transparent huge pages on the 2 MiB-aligned interior
 * of the destination makes that one fault per 2 MiB: opt-in
 * (PYXBUF_STAGING_HUGE_PAGES=1), since it measured slower where it matters,
 * on a 16-core H200 host (11.3-15.9 GB/s into new memory against 14.1-15.7
 * without, bench/results/2026-11-27-h200-staging.md), though faster on a
 * 2-core VM (8.8-9.5 against 4.3-5.4). Only a hint: pages already faulted
 * in stay as they are. */
static void ask_for_huge_pages(char *dst, size_t n) {
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)dst + huge - 1) & ~(huge - 1);
    uintptr_t hi = ((uintptr_t)dst + n) & ~(huge - 1);
    if (pyxbuf__staging_huge_pages() && hi > lo)
        pyxbuf__advise_huge_pages((void *)lo, (size_t)(hi - lo));
}

static int stage_out(pipeline *p, char *dst, const char *src, pyxbuf_error *err) {
    int rc = 0;
    ask_for_huge_pages(dst, p->n);
    size_t chunks = chunk_count(p);
    for (size_t i = 0; i < chunks && i < (size_t)p->nbuf && rc == 0; i++)
        rc = send_chunk(p, i, 1, (char *)src, err);
    for (size_t i = 0; i < chunks && rc == 0; i++) {
        int32_t k = (int32_t)(i % (size_t)p->nbuf);
        size_t off = i * p->chunk, len = chunk_len(p, i);
        if ((rc = wait_buffer(p, k, err)) < 0) break;
        pyxbuf__parallel_copy(dst + off, p->buf[k]->ptr, len, p->threads);
        if (i + (size_t)p->nbuf < chunks) rc = send_chunk(p, i + (size_t)p->nbuf, 1, (char *)src, err);
    }
    return finish(p, rc, err);
}

/* Bytes per piece of an n-byte copy through buffers of `chunk` bytes. */
static size_t piece_size(size_t n, size_t chunk) {
    const size_t align = (size_t)64 << 10;
    size_t piece = (n / PIECES + align - 1) & ~(align - 1);
    if (piece < PIECE_MIN) piece = PIECE_MIN;
    return piece < chunk ? piece : chunk;
}

/* Threads filling each piece: every configured one from the threshold, up
 * to MEDIUM_THREADS or one below it. */
static int32_t threads_for(size_t n, const pyxbuf_transfer_config *cfg) {
    if (n >= cfg->threshold) return cfg->threads;
    if (n < MEDIUM_THREADS_MIN) return 1;
    return cfg->threads < MEDIUM_THREADS ? cfg->threads : MEDIUM_THREADS;
}

static void start(pipeline *p, const pyxbuf_backend *b, int32_t id, size_t n, int64_t stream,
                  const pyxbuf_transfer_config *cfg) {
    *p = (pipeline){.b = b, .id = id, .stream = stream, .n = n,
                    .chunk = piece_size(n, (size_t)cfg->chunk), .bufsize = (size_t)cfg->chunk,
                    .threads = threads_for(n, cfg)};
    size_t chunks = chunk_count(p);
    p->nbuf = (int32_t)(chunks < (size_t)cfg->buffers ? chunks : (size_t)cfg->buffers);
}

int pyxbuf__copy_from_host(const pyxbuf_backend *b, int32_t id, void *dst, const void *src,
                           size_t n, int64_t stream, pyxbuf_error *err) {
    pyxbuf_transfer_config cfg;
    pipeline p = {.missing = 0};
    int worth = worth_staging(b, src, n, stream, &cfg, err);
    if (worth < 0) return PYXBUF_EINVAL;
    if (worth) {
        start(&p, b, id, n, stream, &cfg);
        if (take_buffers(&p)) return grow_missing(&p, stage_in(&p, dst, src, err));
    }
    return grow_missing(&p, b->copy_from_host(b->ctx, id, dst, src, n, stream, err));
}

int pyxbuf__copy_to_host(const pyxbuf_backend *b, int32_t id, void *dst, const void *src,
                         size_t n, int64_t stream, pyxbuf_error *err) {
    pyxbuf_transfer_config cfg;
    pipeline p = {.missing = 0};
    int worth = worth_staging(b, dst, n, stream, &cfg, err);
    if (worth < 0) return PYXBUF_EINVAL;
    if (worth) {
        start(&p, b, id, n, stream, &cfg);
        if (take_buffers(&p)) return grow_missing(&p, stage_out(&p, dst, src, err));
    }
    return grow_missing(&p, b->copy_to_host(b->ctx, id, dst, src, n, stream, err));
}

/* Whether n host bytes beside one device copy of b's are worth pooled
 * page-locked memory: staging on, n at least medium. */
static int worth_pinning(const pyxbuf_backend *b, size_t n) {
    pyxbuf_transfer_config cfg;
    if (b->host_alloc == NULL || pyxbuf__transfer_config(&cfg, NULL) < 0) return 0;
    return cfg.enabled && n >= MEDIUM_MIN; /* a bad configuration: the copy reports it */
}

void *pyxbuf__scratch_take(const pyxbuf_backend *b, int32_t id, size_t n,
                           pyxbuf__pinned_block **pinned, pyxbuf_error *err) {
    *pinned = worth_pinning(b, n) ? pyxbuf__pinned_take_idle(b, id, n) : NULL;
    /* Packing is host work beside the copy: the block grows at once. */
    if (*pinned == NULL && worth_pinning(b, n)) pyxbuf__pinned_grow(b, id, n, 1);
    void *p = *pinned ? (*pinned)->ptr : malloc(n ? n : 1);
    if (p == NULL)
        pyxbuf__error(err, PYXBUF_ENOMEM, -1, "cannot allocate %zu %s to stage a copy", n,
                      PYXBUF__PLURAL(n, "byte", "bytes"));
    return p;
}

void pyxbuf__scratch_give(void *p, pyxbuf__pinned_block *pinned) {
    if (pinned != NULL) pyxbuf__pinned_give(pinned, NULL); /* its copy completed */
    else free(p);
}

pyxbuf__pinned_block *pyxbuf__pinned_result(int32_t device_type, int32_t device_id, size_t n) {
    pyxbuf_backend b;
    if (pyxbuf_backend_get(device_type, &b, NULL) < 0 || !worth_pinning(&b, n)) return NULL;
    return pyxbuf__pinned_take_idle(&b, device_id, n);
}

/* The sizes of the last results that went without a page-locked block. A
 * block is grown for a size only when it misses a second time: page-locking
 * holds the CUDA driver (every other driver call of the process waits,
 * about 125 ms for 256 MiB on an H200 machine), which a size seen once, as
 * the first copy of a process, should not pay for (its copy returned at 1.5
 * GB/s instead of 7: bench/results/2026-11-28-h200-transfer.md). Relaxed
 * atomics: a lost or stale entry only moves a grow one miss later. */
#define MISSED_SIZES 8
static _Atomic size_t missed_sizes[MISSED_SIZES];
static _Atomic unsigned missed_next;

static int missed_before(size_t n) {
    for (int i = 0; i < MISSED_SIZES; i++)
        if (atomic_load_explicit(&missed_sizes[i], memory_order_relaxed) == n) {
            atomic_store_explicit(&missed_sizes[i], 0, memory_order_relaxed);
            return 1;
        }
    unsigned k = atomic_fetch_add_explicit(&missed_next, 1, memory_order_relaxed) % MISSED_SIZES;
    atomic_store_explicit(&missed_sizes[k], n, memory_order_relaxed);
    return 0;
}

void pyxbuf__pinned_result_missed(int32_t device_type, int32_t device_id, size_t n) {
    pyxbuf_backend b;
    if (pyxbuf_backend_get(device_type, &b, NULL) == 0 && worth_pinning(&b, n) &&
        missed_before(n))
        pyxbuf__pinned_grow(&b, device_id, n, 1);
}
