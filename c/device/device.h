/* device.h -- the device layer's private interface: the backend table and
 * registry, the built-in backends, device identifiers, and what a view's
 * device allows. */
#ifndef PYXBUF_DEVICE_DEVICE_H
#define PYXBUF_DEVICE_DEVICE_H

#include "base/span.h"

#include <pthread.h>

/* The backend table, by DLPack device type: check a backend's description
 * (backend_table.c); through the process's engine (engine.c): store one
 * (replacing the type's, or only where the type has none), remove one, look
 * one up (1 and *out, or 0). registry.c alone fills it. */
#define PYXBUF__MAX_DEVICE_TYPES 64
int pyxbuf__backend_check(const pyxbuf_backend *b, pyxbuf_error *err);
int pyxbuf__backend_store(const pyxbuf_backend *backend);
int pyxbuf__backend_store_if_absent(const pyxbuf_backend *backend);
int pyxbuf__backend_remove(int32_t device_type);
int pyxbuf__backend_lookup(int32_t device_type, pyxbuf_backend *out);
/* The backends built into the library (cpu.c, cuda.c), which
 * registry.c registers the first time the registry is used. */
const pyxbuf_backend *pyxbuf__cpu_backend(void);
/* cpu.c: the CPU backend's memory without its zeroing (the padding past n
 * to a whole cache line is zeroed): for a buffer about to be filled whole.
 * Free with pyxbuf__aligned_free, as the backend's free does. */
void *pyxbuf__cpu_alloc_unzeroed(size_t n);
const pyxbuf_backend *pyxbuf__cuda_backend(void);
/* ids.c: memory the host may dereference (host, pinned, managed). */
int pyxbuf__host_accessible(int32_t device_type);

/* The device holding `ptr`, asking every registered backend (CUDA first):
 * fills *device and *backend, or returns PYXBUF_EDEVICE with a message that
 * names what each backend said. */
int pyxbuf__backend_find_pointer(const void *ptr, pyxbuf_device *device, pyxbuf_backend *backend,
                                 pyxbuf_error *err);

/* ids.c: -1 if `id` is a valid device identifier (non-empty UTF-8, at most
 * PYXBUF__DEVICE_ID_MAX bytes), else the offset of the first bad byte. */
#define PYXBUF__DEVICE_ID_MAX 256
int64_t pyxbuf__device_id_invalid_at(const char *id);
/* PYXBUF_EDEVICE unless the backend says both ends of [buf+lo, buf+hi) are
 * memory of `claimed` (a "cuda" claim also accepts CUDA managed memory). */
int pyxbuf__check_device_span(const pyxbuf_backend *b, const char *buf, Py_ssize_t lo,
                              Py_ssize_t hi, const pyxbuf_device *claimed, pyxbuf_error *err);

/* view_device.c: the view's device as "cuda:0", for messages. */
void pyxbuf__describe_view_device(const pyxbuf_view *view, char *buf, size_t cap);
/* view_device.c: the view can be copied whole into `nbytes` bytes: acquired,
 * its len agrees with its layout, no suboffsets, nbytes == len; else -1 with
 * BufferError or ValueError. */
int pyxbuf__check_copy_size(const pyxbuf_view *view, size_t nbytes);

/* The staging configuration in force (a copy), through the engine. */
#define PYXBUF__STAGING_MAX_THREADS 64
#define PYXBUF__STAGING_MAX_BUFFERS 16
#define PYXBUF__STAGING_MIN_CHUNK ((uint64_t)64 << 10)
#define PYXBUF__STAGING_MAX_CHUNK ((uint64_t)1 << 30)
/* A copy of this many chunks that finds no idle buffer allocates one on its
 * path (staging.c says why). */
#define PYXBUF__STAGING_COLD_CHUNKS 4
/* 0, or PYXBUF_EINVAL with err naming the environment variable that is out
 * of range (*out then holds the defaults). */
int pyxbuf__transfer_config(pyxbuf_transfer_config *out, pyxbuf_error *err);
/* Whether staging asks for huge pages on destination memory (opt-in:
 * PYXBUF_STAGING_HUGE_PAGES=1, read with the configuration), through the
 * engine. */
int pyxbuf__staging_huge_pages(void);

/* The pinned pool (pinned_pool.c, through the engine): page-locked host
 * memory from a backend's host_alloc, cached. A block is the caller's from
 * take to give. */
typedef struct pyxbuf__pinned_block {
    pyxbuf_backend backend; /* the one that allocated it (and frees it) */
    int32_t device_id;
    void *ptr;
    size_t size;  /* its size class: at least what was asked */
    void *event;  /* behind its last use, owned by the pool; NULL = finished */
    int in_use;
    struct pyxbuf__pinned_block *next;
} pyxbuf__pinned_block;
/* A block of at least n bytes, or NULL when the backend has no host_alloc,
 * the cap leaves no room (after freeing idle blocks and waiting for a
 * busy one of the size) or the allocation fails: callers copy directly. */
pyxbuf__pinned_block *pyxbuf__pinned_take(const pyxbuf_backend *b, int32_t device_id, size_t n);
/* An idle block of n's class whose last use is over, or NULL: never
 * allocates, never waits (the copies' path). */
pyxbuf__pinned_block *pyxbuf__pinned_take_idle(const pyxbuf_backend *b, int32_t device_id,
                                               size_t n);
/* Ask for `count` new idle blocks of n's class (a caller that found too
 * few idle): allocated by the pool's grower thread within the room the cap
 * leaves, off the caller's path. Requests for a class not yet served merge
 * (the larger count stands). */
void pyxbuf__pinned_grow(const pyxbuf_backend *b, int32_t device_id, size_t n, int32_t count);
/* Back to the pool; `event` (may be NULL) is behind its last use, and the
 * block is handed out again only once it has happened. */
void pyxbuf__pinned_give(pyxbuf__pinned_block *blk, void *event);
/* pyxbuf__pinned_give(blk, NULL) as a free function for exporters. */
void pyxbuf__pinned_give_finished(void *blk);
/* 1 if [p, p+n) lies in one pooled block. */
int pyxbuf__pinned_contains(const void *p, size_t n);
/* Free idle finished blocks until the pool holds at most `cap` bytes. */
void pyxbuf__pinned_pool_fit(uint64_t cap);

/* memcpy(dst, src, n) split across up to `threads` of the engine's fill
 * threads (fill_threads.c). */
void pyxbuf__parallel_copy(void *dst, const void *src, size_t n, int32_t threads);

/* staging.c: the backend's copy_from_host / copy_to_host of n contiguous
 * bytes, through pinned staging buffers when the configuration says the copy
 * is worth it and the pool has them idle (same ordering and completion as
 * the direct call). */
int pyxbuf__copy_from_host(const pyxbuf_backend *b, int32_t id, void *dst, const void *src,
                           size_t n, int64_t stream, pyxbuf_error *err);
int pyxbuf__copy_to_host(const pyxbuf_backend *b, int32_t id, void *dst, const void *src,
                         size_t n, int64_t stream, pyxbuf_error *err);
/* staging.c: host scratch of n bytes for packing or unpacking beside one
 * device copy: a pooled page-locked block of b's (*pinned set) when staging
 * is on, n at least 64 KiB and one is idle, so that copy is direct at the
 * link's rate (else the pool grows one for the next call), else
 * malloc'd memory (*pinned NULL); NULL with err set (PYXBUF_ENOMEM) when
 * neither can be had. Give it back once the copy has completed. */
void *pyxbuf__scratch_take(const pyxbuf_backend *b, int32_t id, size_t n,
                           pyxbuf__pinned_block **pinned, pyxbuf_error *err);
void pyxbuf__scratch_give(void *p, pyxbuf__pinned_block *pinned);
/* staging.c: pooled page-locked memory for n bytes copied from the device
 * (device_type, device_id) into a new host result, or NULL when staging is
 * off, n is under 64 KiB or the pool has no idle block of its size; then,
 * once the copy into pageable memory is done, pinned_result_missed asks the
 * pool to grow one in the background for the next such result -- when a
 * result of that size missed before (one seen once is not worth holding
 * the driver while it is page-locked). */
pyxbuf__pinned_block *pyxbuf__pinned_result(int32_t device_type, int32_t device_id, size_t n);
void pyxbuf__pinned_result_missed(int32_t device_type, int32_t device_id, size_t n);

/* device_alloc.c: pyxbuf's own device memory (to_device results, device
 * exporters), from the backend's stream-ordered pool unless the
 * configuration's device_pool_off or the backend says otherwise, freed in
 * stream order after every stream it was handed to (the rule is written
 * down in device_alloc.c). */
typedef struct pyxbuf__stream_use {
    int64_t stream; /* a stream views of the memory were handed to */
    void *event;    /* recorded there when such a view was last released */
} pyxbuf__stream_use;
typedef struct pyxbuf__stream_namer {
    int64_t mark;   /* a view still held that named (its reserved[1])... */
    int64_t stream; /* ...this stream */
} pyxbuf__stream_namer;
typedef struct pyxbuf__device_block {
    pyxbuf_backend backend; /* the one that allocated it (and frees it) */
    pyxbuf_device device;
    void *ptr;
    int64_t stream;    /* the allocation stream: frees go there */
    int32_t pooled;    /* from alloc_async, freed with free_async */
    int32_t unordered; /* a use could not be noted or recorded: never freed */
    pyxbuf__stream_use *uses;     /* other streams the memory was handed to */
    pyxbuf__stream_namer *namers; /* and the views that named them */
    int32_t nuses, ucap, nnamers, ncap;
    struct pyxbuf__device_block *next; /* among the pooled blocks by address */
} pyxbuf__device_block;
/* n bytes on `device`, usable by work on `stream` (device exporters: the
 * default stream); 0 and *out, or a code with err filled. */
int pyxbuf__device_block_new(const pyxbuf_device *device, size_t n, int64_t stream,
                             pyxbuf__device_block **out, pyxbuf_error *err);
/* Free it (exporters' free_fn): see device_alloc.c for the order. */
void pyxbuf__device_block_free(void *block);
/* `view` is being released: each stream it named for a pooled block gets an
 * event after the work queued there so far, which the free will wait for. */
void pyxbuf__device_block_view_released(const pyxbuf_view *view, const pyxbuf_device *device);
/* `view` (of `device` memory) was handed to a consumer working on `stream`:
 * if it starts a pooled block, the block's free is ordered after the work
 * queued there until the view is released. Anything else is ignored. The
 * view is marked (reserved[1]) so that its release finds what it named,
 * wherever the view was moved to meanwhile. */
void pyxbuf__device_block_used_on(const pyxbuf_view *view, const pyxbuf_device *device,
                                  int64_t stream);
/* Pooled blocks never freed because their free could not be ordered. */
uint64_t pyxbuf__device_blocks_kept_out(void);
/* The index of pooled blocks that device_alloc.c works on: the engine's
 * (engine.c keeps it), so that a view taken through any copy of libpyxbuf
 * notes its stream on a block another copy allocated. Every field under
 * `lock`. */
#define PYXBUF__DEVICE_BLOCK_BUCKETS 256
typedef struct pyxbuf__device_blocks {
    pthread_mutex_t lock;
    pyxbuf__device_block *by_address[PYXBUF__DEVICE_BLOCK_BUCKETS];
    uint64_t kept_out; /* blocks whose free could not be ordered */
    int64_t marks;     /* views marked so far */
} pyxbuf__device_blocks;

/* ------------------------------------------------------------------------- */
/* The transfer engine (engine.c)                                            */
/* ------------------------------------------------------------------------- */

/* The engine is process state, like the borrow registry: the backend table,
 * the configuration, the pinned pool and the fill threads of ONE copy of
 * libpyxbuf serve every copy in the process. Its table of functions is
 * published at sys.modules[PYXBUF_SHARED_MODULE].ENGINE by the first copy
 * that needs it; every later copy whose layout (the structs the functions
 * pass, below) is the same uses it, and one of another layout keeps its own
 * and says so once (a RuntimeWarning). Fields are only ever appended. The
 * entry points above (pyxbuf__backend_store, pyxbuf__pinned_take, ...) call
 * through the engine in use; the own implementations below are this copy's
 * and only engine.c names them. */
#define PYXBUF__ENGINE_VERSION 1
#define PYXBUF__ENGINE_LAYOUT 1
#define PYXBUF__ENGINE_CAPSULE "_pyxbuf_shared.ENGINE"
typedef struct pyxbuf__engine {
    uint32_t version, size;   /* PYXBUF__ENGINE_VERSION, sizeof as the installer knew it */
    uint32_t layout;          /* PYXBUF__ENGINE_LAYOUT of the installer */
    uint32_t backend_size, config_size, block_size, stats_size, reserved0;
    const char *installer_version; /* pyxbuf_version_string() of the installer */
    int (*backend_store)(const pyxbuf_backend *backend);
    int (*backend_store_if_absent)(const pyxbuf_backend *backend);
    int (*backend_remove)(int32_t device_type);
    int (*backend_lookup)(int32_t device_type, pyxbuf_backend *out);
    int (*config_get)(pyxbuf_transfer_config *out, pyxbuf_error *err);
    int (*config_set)(const pyxbuf_transfer_config *in, pyxbuf_error *err);
    int (*staging_huge_pages)(void);
    pyxbuf__pinned_block *(*pinned_take)(const pyxbuf_backend *b, int32_t device_id, size_t n);
    void (*pinned_give)(pyxbuf__pinned_block *blk, void *event);
    int (*pinned_contains)(const void *p, size_t n);
    void (*pinned_pool_fit)(uint64_t cap);
    void (*pinned_pool_stats)(pyxbuf_pinned_pool_stats *out);
    void (*parallel_copy)(void *dst, const void *src, size_t n, int32_t threads);
    int32_t (*fill_threads)(void);
    pyxbuf__device_blocks *device_blocks; /* the index the functions below work on */
    uint32_t device_block_size, device_blocks_size;
    pyxbuf__pinned_block *(*pinned_take_idle)(const pyxbuf_backend *b, int32_t device_id,
                                              size_t n);
    void (*pinned_grow)(const pyxbuf_backend *b, int32_t device_id, size_t n, int32_t count);
    int (*device_block_new)(const pyxbuf_backend *b, const pyxbuf_device *device, size_t n,
                            int64_t stream, pyxbuf__device_block **out, pyxbuf_error *err);
    void (*device_block_free)(void *block);
    void (*device_block_view_released)(const pyxbuf_view *view, const pyxbuf_device *device);
    void (*device_block_used_on)(const pyxbuf_view *view, const pyxbuf_device *device,
                                 int64_t stream);
    uint64_t (*device_blocks_kept_out)(void);
} pyxbuf__engine;

/* The engine in use: decided at the first call, for good (this copy's when
 * Python is not running, or when the published one is of another layout). */
const pyxbuf__engine *pyxbuf__engine_in_use(void);
/* Whether `e` (found published) can serve this copy: 1, or 0 with the
 * reason in why[cap]. */
int pyxbuf__engine_usable(const pyxbuf__engine *e, char *why, size_t cap);
/* This copy's engine. */
extern PYXBUF_HIDDEN const pyxbuf__engine pyxbuf__own_engine;

/* This copy's implementations, for engine.c's table only. */
int pyxbuf__own_backend_store(const pyxbuf_backend *backend);
int pyxbuf__own_backend_store_if_absent(const pyxbuf_backend *backend);
int pyxbuf__own_backend_remove(int32_t device_type);
int pyxbuf__own_backend_lookup(int32_t device_type, pyxbuf_backend *out);
int pyxbuf__own_transfer_config(pyxbuf_transfer_config *out, pyxbuf_error *err);
int pyxbuf__own_transfer_config_set(const pyxbuf_transfer_config *in, pyxbuf_error *err);
int pyxbuf__own_staging_huge_pages(void);
pyxbuf__pinned_block *pyxbuf__own_pinned_take(const pyxbuf_backend *b, int32_t device_id, size_t n);
pyxbuf__pinned_block *pyxbuf__own_pinned_take_idle(const pyxbuf_backend *b, int32_t device_id,
                                                   size_t n);
void pyxbuf__own_pinned_grow(const pyxbuf_backend *b, int32_t device_id, size_t n, int32_t count);
void pyxbuf__own_pinned_give(pyxbuf__pinned_block *blk, void *event);
int pyxbuf__own_pinned_contains(const void *p, size_t n);
void pyxbuf__own_pinned_pool_fit(uint64_t cap);
void pyxbuf__own_pinned_pool_stats(pyxbuf_pinned_pool_stats *out);
void pyxbuf__own_parallel_copy(void *dst, const void *src, size_t n, int32_t threads);
int32_t pyxbuf__own_fill_threads(void);
int pyxbuf__own_device_block_new(const pyxbuf_backend *b, const pyxbuf_device *device, size_t n,
                                 int64_t stream, pyxbuf__device_block **out, pyxbuf_error *err);
/* device_alloc.c's index, which the engine's table names. */
extern PYXBUF_HIDDEN pyxbuf__device_blocks pyxbuf__own_device_blocks;
void pyxbuf__own_device_block_free(void *block);
void pyxbuf__own_device_block_view_released(const pyxbuf_view *view,
                                            const pyxbuf_device *device);
void pyxbuf__own_device_block_used_on(const pyxbuf_view *view, const pyxbuf_device *device,
                                      int64_t stream);
uint64_t pyxbuf__own_device_blocks_kept_out(void);

#endif
