/* emulated_internal.h -- what the files of the guarded emulated device (see
 * emulated.h) share, bottom first: emulated_memory.c (the memfd mappings,
 * fork(), the first-fit allocator and the pool's cache of blocks, the lookup
 * of other processes' memory mapped here), emulated_ipc.c (sharing memory
 * with other processes), emulated_streams.c (the queues, copies, events and the backend's
 * functions), emulated.c (the pointer query, registration, and the helpers
 * of emulated.h that every copy forwards to the serving one). Calls run
 * down that list only. Every name here is hidden: each extension that
 * links the device keeps a copy of its own, as when it was one file of
 * statics. */
#ifndef PYXBUF_DEVICE_EMULATED_INTERNAL_H
#define PYXBUF_DEVICE_EMULATED_INTERNAL_H

#include "device/emulated.h" /* pyxbuf.h, hence Python.h (and _GNU_SOURCE) first */

#include "base/platform.h" /* PYXBUF_HAVE_MEMFD, PYXBUF_HAVE_FORK: macros, no library internals */

#include <pthread.h>

#if defined(__GNUC__) || defined(__clang__)
#define EMU_HIDDEN __attribute__((visibility("hidden")))
#else
#define EMU_HIDDEN
#endif

/* Address space per device. The memfd is sparse: only touched pages cost. */
#define DEVICE_BYTES ((size_t)1 << 30)
#define ALIGNMENT 256
#define MAX_STREAMS 64
#define DEFAULT_STREAMS 3 /* DLPack's 0, 1, 2 all mean the default stream */

/* ------------------------------------------------------------------------- */
/* Memory: two mappings of one memfd, and a first-fit allocator              */
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

/* Every piece of the device's state, memory, queues and counters, is read
 * and written only under this lock; queued work runs only inside calls
 * that hold it. */
extern EMU_HIDDEN pthread_mutex_t emu_lock;
extern EMU_HIDDEN device emu_devices[PYXBUF_EMULATED_MAX_DEVICES];

/* Fill *err (when not NULL) with `code` and the message; returns `code`. */
EMU_HIDDEN int emu_error(pyxbuf_error *err, int32_t code, const char *fmt, ...);
/* Register the fork rules (once), before the lock is first taken. */
EMU_HIDDEN void emu_ensure_fork_rules(void);
/* Map `len` bytes of memfd `fd` from `offset` twice, as the device's own
 * memory is: PROT_NONE (the address handed out, so a host access faults)
 * and read-write (the backend's). 0, or errno with neither left mapped. */
EMU_HIDDEN int emu_map_twice(int fd, size_t len, size_t offset, void **guarded, void **backing);
/* 0 when `id` names an emulated device, mapped now if it was not; else an
 * error. Under the lock, as are the functions below. */
EMU_HIDDEN int emu_check_id(int32_t id, pyxbuf_error *err);
/* The backing address of device address `p` on `id`, if n bytes fit. */
EMU_HIDDEN char *emu_backing_of(int32_t id, const void *p, size_t n);
EMU_HIDDEN int emu_bad_address(int32_t id, const void *p, size_t n, pyxbuf_error *err);
/* Before n bytes at backing address `at` are read or written (`writes`):
 * the fresh memory among them is poisoned first. */
EMU_HIDDEN void emu_touch(const char *at, size_t n, int writes);
/* A new block of n bytes on device id (checked) from the allocator. */
EMU_HIDDEN int emu_allocate(int32_t id, size_t n, block **out, pyxbuf_error *err);
/* Give a live block back to the allocator. */
EMU_HIDDEN void emu_release_block(device *d, block *b);
/* Give idle cached blocks back until the pool reserves at most `keep`. */
EMU_HIDDEN void emu_release_idle(device *d, uint64_t keep);
/* A block for alloc_async on stream s: from the pool's cache or, failing
 * that, the allocator. */
EMU_HIDDEN int emu_pool_take(int32_t id, size_t n, const stream *s, block **out,
                             pyxbuf_error *err);
/* Another process's device memory mapped here (emulated_ipc.c): the two
 * mappings of a range of its memfd, as the device's own, at addresses of
 * their own. Device addresses inside [start, start + size) are memory of
 * device `device_id` here, live until closed. */
typedef struct emu_import {
    int32_t device_id;
    char *guarded, *backing; /* the whole mapped range (page-aligned) */
    size_t mapped;
    char *start; /* the address handed out: the allocation's first byte */
    size_t size;
    struct emu_import *next;
} emu_import;
extern EMU_HIDDEN emu_import *emu_imports;

/* The live block (allocated, not freed) that starts at device address p. */
EMU_HIDDEN block *emu_live_block(int32_t id, const void *p);
EMU_HIDDEN int emu_not_live(int32_t id, const void *ptr, pyxbuf_error *err);
/* Whether `ptr` is inside a live allocation of `id`. */
EMU_HIDDEN int emu_in_live_block(int32_t id, const void *ptr);

/* ------------------------------------------------------------------------- */
/* Streams: queues of operations                                             */
/* ------------------------------------------------------------------------- */

typedef struct event {
    int done;
    int refs;   /* the creator's handle plus queued operations that name it */
    stream *on; /* the stream its record is queued on (while not done) */
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

/* Counters, under the lock. */
extern EMU_HIDDEN int64_t emu_live_allocations;
extern EMU_HIDDEN int64_t emu_live_host_allocations;
/* host_alloc calls made holding the GIL (page-locking is slow: never under it) */
extern EMU_HIDDEN int64_t emu_host_allocations_with_gil;
extern EMU_HIDDEN int64_t emu_copy_async_budget; /* copies that succeed before one fails; -1: all */

/* Set every function of the backend but pointer_query (size, type, name
 * and ctx are the caller's). */
EMU_HIDDEN void emu_backend_functions(pyxbuf_backend *b);
/* The helpers of emulated.h that work on streams (each takes the lock). */
EMU_HIDDEN int emu_stream_create(int32_t id, int64_t *handle, pyxbuf_error *err);
EMU_HIDDEN int emu_stream_destroy(int64_t handle, pyxbuf_error *err);
EMU_HIDDEN int emu_enqueue_write(int32_t id, int64_t handle, void *dst, const void *src, size_t n,
                                 pyxbuf_error *err);
EMU_HIDDEN int64_t emu_pending(int32_t id, int64_t handle);

/* ------------------------------------------------------------------------- */
/* One emulated device per process                                           */
/* ------------------------------------------------------------------------- */

/* Every extension that links the emulated device has its own copy of it,
 * but a process has one backend registry (the shared transfer engine): the
 * first copy registered serves every device array, and the test helpers of
 * every later copy forward to it, so all of them see the same device,
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
    int (*ipc_export)(const void *ptr, pyxbuf_emulated_ipc_handle *out, pyxbuf_error *err);
    int (*ipc_open)(const pyxbuf_emulated_ipc_handle *h, void **ptr, pyxbuf_error *err);
    int (*ipc_close)(void *ptr, pyxbuf_error *err);
} emulated_api;

/* emulated_ipc.c; these take the lock themselves (the serving copy's). */
EMU_HIDDEN int emu_ipc_export(const void *ptr, pyxbuf_emulated_ipc_handle *out,
                              pyxbuf_error *err);
/* fd: the exporter's memfd as it arrived here (SCM_RIGHTS), or -1 to open
 * it through /proc/<pid>/fd. */
EMU_HIDDEN int emu_ipc_open(const pyxbuf_emulated_ipc_handle *h, int fd, void **ptr,
                            pyxbuf_error *err);
EMU_HIDDEN int emu_ipc_close(void *ptr, pyxbuf_error *err);
/* The backend's ipc_*, over the three above. */
EMU_HIDDEN int emu_backend_ipc_export(void *ctx, int32_t id, const void *ptr, void *handle,
                                      size_t *handle_len, int *fd, pyxbuf_error *err);
EMU_HIDDEN int emu_backend_ipc_open(void *ctx, int32_t id, const void *handle, size_t handle_len,
                                    int fd, void **ptr, pyxbuf_error *err);
EMU_HIDDEN int emu_backend_ipc_close(void *ctx, int32_t id, void *ptr, pyxbuf_error *err);

/* The copies register one at a time, under the lock at this attribute of
 * sys.modules[PYXBUF_SHARED_MODULE] (a capsule of a pthread_mutex_t *). */
#define EMULATED_REGISTRATION_ATTR "EMULATED_REGISTRATION"
#define EMULATED_REGISTRATION_CAPSULE PYXBUF_SHARED_MODULE "." EMULATED_REGISTRATION_ATTR

#endif
