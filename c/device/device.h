/* device.h -- the device layer's private interface: the backend table and
 * registry, the built-in backends, device identifiers, and what a view's
 * device allows. */
#ifndef PYXBUF_DEVICE_DEVICE_H
#define PYXBUF_DEVICE_DEVICE_H

#include "base/span.h"

/* The backend table (backend_table.c), by DLPack device type: check a
 * backend's description; store one (replacing the type's), remove one, look
 * one up (1 and *out, or 0). registry.c alone fills it. */
#define PYXBUF__MAX_DEVICE_TYPES 64
int pyxbuf__backend_check(const pyxbuf_backend *b, pyxbuf_error *err);
int pyxbuf__backend_store(const pyxbuf_backend *backend);
int pyxbuf__backend_remove(int32_t device_type);
int pyxbuf__backend_lookup(int32_t device_type, pyxbuf_backend *out);
/* The backends built into the library (cpu.c, cuda.c), which
 * registry.c registers the first time the registry is used. */
const pyxbuf_backend *pyxbuf__cpu_backend(void);
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

/* transfer_config.c: the staging configuration in force (a copy). */
#define PYXBUF__STAGING_MAX_THREADS 64
#define PYXBUF__STAGING_MAX_BUFFERS 16
#define PYXBUF__STAGING_MIN_CHUNK ((uint64_t)64 << 10)
#define PYXBUF__STAGING_MAX_CHUNK ((uint64_t)1 << 30)
/* 0, or PYXBUF_EINVAL with err naming the environment variable that is out
 * of range (*out then holds the defaults). */
int pyxbuf__transfer_config(pyxbuf_transfer_config *out, pyxbuf_error *err);
/* Whether staging asks for huge pages on destination memory (opt-in:
 * PYXBUF_STAGING_HUGE_PAGES=1, read with the configuration). */
int pyxbuf__staging_huge_pages(void);

/* pinned_pool.c: page-locked host memory from a backend's host_alloc,
 * cached. A block is the caller's from take to give. */
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
/* Back to the pool; `event` (may be NULL) is behind its last use, and the
 * block is handed out again only once it has happened. */
void pyxbuf__pinned_give(pyxbuf__pinned_block *blk, void *event);
/* pyxbuf__pinned_give(blk, NULL) as a free function for exporters. */
void pyxbuf__pinned_give_finished(void *blk);
/* 1 if [p, p+n) lies in one pooled block. */
int pyxbuf__pinned_contains(const void *p, size_t n);
/* Free idle finished blocks until the pool holds at most `cap` bytes. */
void pyxbuf__pinned_pool_fit(uint64_t cap);

/* fill_threads.c: memcpy(dst, src, n) split across up to `threads` threads. */
void pyxbuf__parallel_copy(void *dst, const void *src, size_t n, int32_t threads);

/* staging.c: the backend's copy_from_host / copy_to_host of n contiguous
 * bytes, through pinned staging buffers when the configuration says the copy
 * is worth it (same ordering and completion as the direct call). */
int pyxbuf__copy_from_host(const pyxbuf_backend *b, int32_t id, void *dst, const void *src,
                           size_t n, int64_t stream, pyxbuf_error *err);
int pyxbuf__copy_to_host(const pyxbuf_backend *b, int32_t id, void *dst, const void *src,
                         size_t n, int64_t stream, pyxbuf_error *err);
/* staging.c: host scratch of n bytes for packing or unpacking beside one
 * device copy: a pooled page-locked block of b's (*pinned set) when staging
 * is on and n is large, so that copy is direct at the link's rate, else
 * malloc'd memory (*pinned NULL); NULL with err set (PYXBUF_ENOMEM) when
 * neither can be had. Give it back once the copy has completed. */
void *pyxbuf__scratch_take(const pyxbuf_backend *b, int32_t id, size_t n,
                           pyxbuf__pinned_block **pinned, pyxbuf_error *err);
void pyxbuf__scratch_give(void *p, pyxbuf__pinned_block *pinned);
/* staging.c: pooled page-locked memory for n bytes copied from the device
 * (device_type, device_id) into a new host result, or NULL when staging is
 * off, n is under the threshold or the pool cannot give it. */
pyxbuf__pinned_block *pyxbuf__pinned_result(int32_t device_type, int32_t device_id, size_t n);

#endif
