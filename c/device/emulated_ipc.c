/* emulated_ipc.c -- the emulated device's memory shared with other processes
 * (emulated.h: pyxbuf_emulated_ipc_*), as CUDA's IPC handles share a GPU
 * allocation: the exporter names the allocation's range of its memfd, the
 * opener maps that range of the same memfd twice (guarded, and read-write
 * for the backend) and serves it as memory of the same device id. The memfd
 * travels beside the handle (SCM_RIGHTS) where the caller passes it, as a
 * CUDA pool's descriptor must; without it, it is opened through /proc. Above
 * emulated_memory.c (the imports' lookups live there), below emulated.c. */
#include "device/emulated_internal.h"

#include <stdlib.h>
#include <string.h>
#if PYXBUF_HAVE_MEMFD
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#if !PYXBUF_HAVE_MEMFD
static int no_ipc(pyxbuf_error *err) {
    return emu_error(err, PYXBUF_EUNSUPPORTED,
                     "emulated: sharing device memory between processes maps the device's "
                     "memfd (Linux); this system has none");
}
int emu_ipc_export(const void *ptr, pyxbuf_emulated_ipc_handle *out, pyxbuf_error *err) {
    (void)ptr, (void)out;
    return no_ipc(err);
}
int emu_ipc_open(const pyxbuf_emulated_ipc_handle *h, int fd, void **ptr, pyxbuf_error *err) {
    (void)h, (void)fd, (void)ptr;
    return no_ipc(err);
}
int emu_ipc_close(void *ptr, pyxbuf_error *err) {
    (void)ptr;
    return no_ipc(err);
}
#else

/* The live block of this process's own device `id` holding `p`, or NULL. */
static block *own_block_holding(int32_t id, const char *p) {
    device *d = &emu_devices[id];
    if (!d->ready || p < d->guarded || p >= d->guarded + DEVICE_BYTES) return NULL;
    size_t offset = (size_t)(p - d->guarded);
    for (block *b = d->blocks; b != NULL; b = b->next)
        if (b->used && !b->cached && offset >= b->offset && offset < b->offset + b->size)
            return b;
    return NULL;
}

static int export_locked(const void *ptr, pyxbuf_emulated_ipc_handle *out, pyxbuf_error *err) {
    for (int32_t id = 0; id < PYXBUF_EMULATED_MAX_DEVICES; id++) {
        block *b = own_block_holding(id, ptr);
        if (b == NULL) continue;
        const device *d = &emu_devices[id];
        *out = (pyxbuf_emulated_ipc_handle){
            .pid = (int64_t)getpid(),
            .fd = d->fd,
            .device_id = id,
            .offset = b->offset,
            .size = b->size,
            .delta = (uint64_t)((const char *)ptr - (d->guarded + b->offset)),
        };
        return 0;
    }
    return emu_error(err, PYXBUF_EINVAL,
                     "emulated: %p is not in a live allocation of this process's emulated "
                     "device (an opened handle's memory cannot be exported again, as with "
                     "CUDA's IPC)",
                     ptr);
}

/* The producer's memfd: a duplicate of the one that arrived (`given`), or
 * the file itself through /proc: the same file either way, no copy. */
static int open_memfd(const pyxbuf_emulated_ipc_handle *h, int given, pyxbuf_error *err) {
    if (given >= 0) {
        int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
        struct stat st;
        if (fd < 0) {
            emu_error(err, PYXBUF_EDEVICE,
                      "emulated: cannot duplicate descriptor %d, the memfd that arrived with "
                      "process %lld's handle (%s): pass the descriptor that travelled with it, "
                      "still open",
                      given, (long long)h->pid, strerror(errno));
        } else if (fstat(fd, &st) != 0 || st.st_size < 0 ||
                   (uint64_t)st.st_size < h->offset + h->size) {
            /* Not the device's memfd: mapping past its end would fault later. */
            emu_error(err, PYXBUF_EDEVICE,
                      "emulated: descriptor %d is not the memfd of process %lld's handle (it "
                      "holds %lld bytes, the handle names bytes up to %llu): pass the "
                      "descriptor that travelled with the handle",
                      given, (long long)h->pid, (long long)st.st_size,
                      (unsigned long long)(h->offset + h->size));
            close(fd);
            fd = -1;
        }
        return fd;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%d", (long long)h->pid, (int)h->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        emu_error(err, PYXBUF_EDEVICE,
                  "emulated: cannot open %s, the device memory of process %lld (it has exited, "
                  "or this process may not read its descriptors): the exporter must outlive "
                  "every process that opens its memory",
                  path, (long long)h->pid);
    return fd;
}

static int open_locked(const pyxbuf_emulated_ipc_handle *h, int given, void **ptr,
                       pyxbuf_error *err) {
    if (h->pid == (int64_t)getpid())
        return emu_error(err, PYXBUF_EINVAL,
                         "emulated: the handle was exported by this process (%lld): its "
                         "memory is here already; a handle is opened in another process, as "
                         "cuIpcOpenMemHandle's are",
                         (long long)h->pid);
    if (h->device_id < 0 || h->device_id >= PYXBUF_EMULATED_MAX_DEVICES || h->size == 0 ||
        h->offset > DEVICE_BYTES || h->size > DEVICE_BYTES - h->offset || h->delta >= h->size)
        return emu_error(err, PYXBUF_EINVAL,
                         "emulated: an IPC handle of device %d, bytes [%llu, +%llu) at +%llu, "
                         "is not one pyxbuf_emulated_ipc_export gives",
                         (int)h->device_id, (unsigned long long)h->offset,
                         (unsigned long long)h->size, (unsigned long long)h->delta);
    int rc = emu_check_id(h->device_id, err); /* the device exists here too */
    if (rc != 0) return rc;
    int fd = open_memfd(h, given, err);
    if (fd < 0) return PYXBUF_EDEVICE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t first = (size_t)h->offset / page * page;
    size_t mapped = ((size_t)(h->offset + h->size) - first + page - 1) / page * page;
    emu_import *im = calloc(1, sizeof *im);
    void *g = NULL, *k = NULL;
    int why = im == NULL ? ENOMEM : emu_map_twice(fd, mapped, first, &g, &k);
    close(fd); /* the mappings keep the memfd */
    if (why != 0) {
        free(im);
        return emu_error(err, PYXBUF_ENOMEM, "emulated: process %lld's device memory, %zu "
                         "bytes mapped twice (guarded and the backend's), cannot be mapped here "
                         "(%s); raise the address-space limit (ulimit -v) or free memory, or "
                         "pickle the array (a host copy travels)",
                         (long long)h->pid, mapped, strerror(why));
    }
    *im = (emu_import){.device_id = h->device_id, .guarded = g, .backing = k, .mapped = mapped,
                       .start = (char *)g + (h->offset - first), .size = (size_t)h->size,
                       .next = emu_imports};
    emu_imports = im;
    *ptr = im->start + h->delta;
    return 0;
}

static int close_locked(void *ptr, pyxbuf_error *err) {
    for (emu_import **at = &emu_imports; *at != NULL; at = &(*at)->next) {
        emu_import *im = *at;
        if ((char *)ptr < im->start || (char *)ptr >= im->start + im->size) continue;
        *at = im->next;
        munmap(im->guarded, im->mapped);
        munmap(im->backing, im->mapped);
        free(im);
        return 0;
    }
    return emu_error(err, PYXBUF_EINVAL,
                     "emulated: %p is not memory that pyxbuf_emulated_ipc_open mapped", ptr);
}

/* The helpers of emulated.h and the backend's functions call these, which
 * take the lock around the work above. */
int emu_ipc_export(const void *ptr, pyxbuf_emulated_ipc_handle *out, pyxbuf_error *err) {
    pthread_mutex_lock(&emu_lock);
    int rc = export_locked(ptr, out, err);
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

int emu_ipc_open(const pyxbuf_emulated_ipc_handle *h, int fd, void **ptr, pyxbuf_error *err) {
    pthread_mutex_lock(&emu_lock);
    int rc = open_locked(h, fd, ptr, err);
    pthread_mutex_unlock(&emu_lock);
    return rc;
}

int emu_ipc_close(void *ptr, pyxbuf_error *err) {
    pthread_mutex_lock(&emu_lock);
    int rc = close_locked(ptr, err);
    pthread_mutex_unlock(&emu_lock);
    return rc;
}
#endif

/* The backend's functions (pyxbuf_backend's ipc_*): the handle travels as
 * the bytes of a pyxbuf_emulated_ipc_handle. */
int emu_backend_ipc_export(void *ctx, int32_t id, const void *ptr, void *handle,
                           size_t *handle_len, int *fd, pyxbuf_error *err) {
    (void)ctx;
    pyxbuf_emulated_ipc_handle h;
    int rc = emu_ipc_export(ptr, &h, err);
    if (rc == 0 && h.device_id != id)
        rc = emu_error(err, PYXBUF_EINVAL, "emulated: %p is memory of emulated device %d, not %d",
                       ptr, (int)h.device_id, (int)id);
    if (rc == 0) {
        memcpy(handle, &h, sizeof h);
        *handle_len = sizeof h;
        *fd = h.fd; /* the device's memfd, open for the process's life */
    }
    return rc;
}

int emu_backend_ipc_open(void *ctx, int32_t id, const void *handle, size_t handle_len,
                         int fd, void **ptr, pyxbuf_error *err) {
    (void)ctx;
    pyxbuf_emulated_ipc_handle h;
    if (handle_len != sizeof h)
        return emu_error(err, PYXBUF_EINVAL, "emulated: an IPC handle of %zu bytes, not %zu",
                         handle_len, sizeof h);
    memcpy(&h, handle, sizeof h);
    if (h.device_id != id)
        return emu_error(err, PYXBUF_EINVAL, "emulated: the handle names emulated device %d, "
                         "not %d", (int)h.device_id, (int)id);
    return emu_ipc_open(&h, fd, ptr, err);
}

int emu_backend_ipc_close(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    (void)ctx, (void)id;
    return emu_ipc_close(ptr, err);
}
