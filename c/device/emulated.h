/* emulated.h -- pyxbuf's guarded emulated device (DLPack kDLExtDev), for tests
 * and the demo; never part of the release library.
 *
 * Device memory is one memfd mapped twice: the addresses handed out are in a
 * PROT_NONE mapping, so host code that dereferences them crashes at once; the
 * backend alone reads and writes through a second, read-write mapping of the
 * same pages. Streams are deterministic queues: work enqueued on a stream runs
 * only when that stream is synchronised, copied on, or made to wait for an
 * event recorded after the work — so a consumer that skips the wait reads
 * stale data every time. Allocations can come from a stream-ordered pool
 * (alloc_async) with CUDA's rules, below. */
#ifndef PYXBUF_EMULATED_H
#define PYXBUF_EMULATED_H

#include "pyxbuf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Emulated devices have ids 0 .. PYXBUF_EMULATED_MAX_DEVICES-1. */
#define PYXBUF_EMULATED_MAX_DEVICES 4
/* Every byte of a new allocation, so a read that skipped a wait is always
 * recognisable. */
#define PYXBUF_EMULATED_POISON 0xDB

/* Register the backend for PYXBUF_DL_EXT_DEV (idempotent). Returns 0 or a
 * negative code (mapping failures). A process has one emulated device: when
 * another extension's copy of it is registered already (the backend registry
 * is shared by every copy of libpyxbuf), that one stays, and the functions
 * below, in every copy, act on it. */
int pyxbuf_emulated_register(pyxbuf_error *err);

/* Live allocations across all emulated devices (tests assert 0 at the end). */
int64_t pyxbuf_emulated_live_allocations(void);
/* Live host_alloc blocks (the pinned pool's; freed by pyxbuf_pinned_pool_trim). */
int64_t pyxbuf_emulated_live_host_allocations(void);
/* host_alloc calls made by a thread holding the GIL (page-locking takes a
 * real driver milliseconds: pyxbuf makes these calls without it). */
int64_t pyxbuf_emulated_host_allocations_with_gil(void);
/* Let `copies` more asynchronous copies succeed, then fail every one until
 * called with -1 (tests of a staged copy failing midway). */
void pyxbuf_emulated_fail_copies_after(int64_t copies);

/* A new stream on `device_id`; streams 0, 1 and 2 are its default stream. */
int pyxbuf_emulated_stream_create(int32_t device_id, int64_t *stream, pyxbuf_error *err);
int pyxbuf_emulated_stream_destroy(int64_t stream, pyxbuf_error *err);

/* A "kernel" that writes n bytes (copied now from src) to device address dst
 * when `stream` runs. */
int pyxbuf_emulated_enqueue_write(int32_t device_id, int64_t stream, void *dst, const void *src,
                                  size_t n, pyxbuf_error *err);

/* Operations queued on `stream` that have not run yet. */
int64_t pyxbuf_emulated_pending(int32_t device_id, int64_t stream);

/* Read n bytes at device address src NOW, without running any queue: what a
 * consumer sees if it copies without waiting for the producer's event. */
int pyxbuf_emulated_peek(const void *src, void *dst, size_t n, pyxbuf_error *err);

/* The stream-ordered pool of one emulated device (alloc_async, free_async,
 * pool_trim), with CUDA's rules made deterministic: memory freed on a stream
 * goes to later work on that stream at once and to other streams only once
 * the stream has run past the free; idle cached memory goes back to the
 * allocator above the configuration's device_pool_release_threshold when a
 * stream or event is synchronised, in pool_trim, and when an allocation
 * would not fit otherwise. A forked child keeps the pool, and copies only
 * the blocks whose free is still queued. */
typedef struct pyxbuf_emulated_pool_stats {
    uint64_t reserved_bytes; /* alloc_async memory held: in use plus cached */
    uint64_t cached_bytes;   /* freed with free_async and kept for reuse */
    uint64_t allocations;    /* alloc_async calls that succeeded */
    uint64_t reuses;         /* of those, served from the cache */
    uint64_t releases;       /* cached blocks given back to the allocator */
} pyxbuf_emulated_pool_stats;
void pyxbuf_emulated_pool_stats_get(int32_t device_id, pyxbuf_emulated_pool_stats *out);

/* Device memory shared with another process on this machine, as CUDA's IPC
 * shares it (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle): a
 * handle names the live allocation holding `ptr` -- the exporting process,
 * the memfd behind its device, the allocation's range in it -- and another
 * process that opens it maps that range of the same memfd (through
 * /proc/<pid>/fd/<fd>: no copy) as memory of the same emulated device id,
 * guarded as its own. As with CUDA: a process cannot open its own handle;
 * the exporter keeps the allocation alive until every process that opened it
 * has closed it (nothing counts the openers across processes: an allocation
 * freed and reused meanwhile shows the new owner's bytes there); the opener
 * waits for the exporter's work on it before reading (the exporter
 * synchronises, or hands over an event that has happened). */
typedef struct pyxbuf_emulated_ipc_handle {
    int64_t pid;       /* the exporting process */
    int32_t fd;        /* its memfd, as numbered there */
    int32_t device_id; /* the emulated device the memory is on */
    uint64_t offset;   /* of the allocation in the memfd */
    uint64_t size;     /* of the allocation */
    uint64_t delta;    /* of `ptr` from the allocation's first byte */
} pyxbuf_emulated_ipc_handle;
int pyxbuf_emulated_ipc_export(const void *ptr, pyxbuf_emulated_ipc_handle *out,
                               pyxbuf_error *err);
/* Map the handle's allocation here; *ptr is where `ptr` was in the exporter
 * (the allocation's first byte plus `delta`). */
int pyxbuf_emulated_ipc_open(const pyxbuf_emulated_ipc_handle *h, void **ptr, pyxbuf_error *err);
/* Unmap what pyxbuf_emulated_ipc_open mapped (`ptr` as it returned). */
int pyxbuf_emulated_ipc_close(void *ptr, pyxbuf_error *err);

#ifdef __cplusplus
}
#endif

#endif
