/* share.c -- device memory shared with another process on this machine,
 * through the backend's IPC functions (CUDA's IPC handles; the emulated
 * device's memfd): the handle of an object's device memory
 * (pyxbuf_device_share) and an exporter over a handle opened here
 * (pyxbuf_exporter_open_shared). Above exporter.c, which makes the object. */

#include "export/exporter.h"
#include "base/platform.h"

#include <stdlib.h>
#include <string.h>

/* What pyxbuf puts before the backend's handle: the exporting process and
 * the address there, so that the process's own opens need no backend (CUDA
 * refuses a handle in the process that made it). */
typedef struct share_header {
    int64_t pid;
    uint64_t pid_namespace; /* equal pids in two containers are two processes */
    uint64_t ptr;
    int32_t device_type, device_id; /* the memory's device, checked at the open */
} share_header;

_Static_assert(sizeof(share_header) + PYXBUF_IPC_BACKEND_HANDLE_MAX == PYXBUF_IPC_HANDLE_MAX,
               "pyxbuf's header and the backend's handle fill PYXBUF_IPC_HANDLE_MAX");

/* The backend of `device`, with its IPC functions; -1 with an exception. */
static int ipc_backend(const pyxbuf_device *device, pyxbuf_backend *b, const char *what) {
    pyxbuf_error err;
    if (pyxbuf_backend_get(device->device_type, b, &err) < 0) return pyxbuf_error_raise(&err);
    if (b->ipc_export != NULL) return 0;
    char name[64];
    pyxbuf_device_format(device, name, sizeof name);
    PyErr_Format(PyExc_BufferError,
                 "%s: the backend of '%s' (%s) cannot share device memory with another "
                 "process (it has no ipc_export/ipc_open/ipc_close); pickle the array instead "
                 "(a host copy travels)",
                 what, name, b->name ? b->name : "?");
    return -1;
}

int pyxbuf_device_share(PyObject *obj, pyxbuf_device *device, void *handle,
                        size_t *handle_len, int *fd) {
    pyxbuf_view v;
    *fd = -1;
    pyxbuf_error err;
    pyxbuf_backend b;
    if (pyxbuf_get(obj, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE | PYXBUF_EXTENDED_FORMAT) < 0)
        return -1;
    int rc = pyxbuf_view_device(&v, device, &err) < 0 ? pyxbuf_error_raise(&err) : 0;
    if (rc == 0 && device->device_type == PYXBUF_DL_CPU) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf_device_share: a '%.200s' holds host memory, which pickle sends "
                     "out of band (protocol 5) or a SharedMemory block shares; device memory "
                     "only here",
                     PYXBUF__TYPE_NAME(obj));
        rc = -1;
    }
    if (rc == 0) rc = ipc_backend(device, &b, "pyxbuf_device_share");
    /* Stream order: the producer's writes happen before the handle leaves,
     * so that the process that opens it reads them (the host waits for the
     * producer's event; the opener then needs no event of this process). */
    if (rc == 0) rc = pyxbuf_device_wait(&v, PYXBUF_STREAM_DEFAULT);
    if (rc == 0) {
        size_t n = PYXBUF_IPC_BACKEND_HANDLE_MAX;
        share_header h = {.pid = pyxbuf__process_id(),
                          .pid_namespace = pyxbuf__pid_namespace(),
                          .ptr = (uint64_t)(uintptr_t)v.base.buf,
                          .device_type = device->device_type,
                          .device_id = device->device_id};
        Py_BEGIN_ALLOW_THREADS
        rc = b.synchronize ? b.synchronize(b.ctx, device->device_id, PYXBUF_STREAM_DEFAULT, &err)
                           : 0;
        if (rc == 0)
            rc = b.ipc_export(b.ctx, device->device_id, v.base.buf, (char *)handle + sizeof h,
                              &n, fd, &err);
        Py_END_ALLOW_THREADS
        if (rc != 0) rc = pyxbuf_error_raise(&err);
        memcpy(handle, &h, sizeof h);
        *handle_len = sizeof h + n;
    }
    pyxbuf_release(&v);
    return rc;
}

/* What an exporter over an opened handle closes when it dies. */
typedef struct opened {
    pyxbuf_device device;
    void *ptr;
    int own; /* this process's own memory: nothing was mapped */
} opened;

static void close_opened(void *ctx) {
    opened *o = ctx;
    pyxbuf_backend b;
    if (!o->own && pyxbuf_backend_get(o->device.device_type, &b, NULL) == 0 &&
        b.ipc_close != NULL)
        b.ipc_close(b.ctx, o->device.device_id, o->ptr, NULL);
    free(o);
}

/* Map the memory `handle` names (with `fd`, the descriptor that travelled
 * with it, or -1), or find it here when this process made it. */
static int open_handle(const pyxbuf_backend *b, opened *o, const void *handle, size_t len,
                       int fd) {
    share_header h;
    if (handle == NULL || len <= sizeof h) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf_exporter_open_shared: a handle of %zu bytes is not one "
                     "pyxbuf_device_share made (more than %zu bytes); pass its handle unchanged",
                     len, sizeof h);
        return -1;
    }
    memcpy(&h, handle, sizeof h);
    if (h.device_type != o->device.device_type || h.device_id != o->device.device_id) {
        char theirs[64], asked[64];
        pyxbuf_device_format(&(pyxbuf_device){h.device_type, h.device_id}, theirs,
                             sizeof theirs);
        pyxbuf_device_format(&o->device, asked, sizeof asked);
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf_exporter_open_shared: the handle names memory of '%s', not of "
                     "'%s'; open it on the device pyxbuf_device_share returned with it",
                     theirs, asked);
        return -1;
    }
    if (h.pid == pyxbuf__process_id() && h.pid_namespace == pyxbuf__pid_namespace()) {
        o->own = 1;
        o->ptr = (void *)(uintptr_t)h.ptr;
        return 0;
    }
    pyxbuf_error err;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = b->ipc_open(b->ctx, o->device.device_id, (const char *)handle + sizeof h,
                     len - sizeof h, fd, &o->ptr, &err);
    Py_END_ALLOW_THREADS
    return rc != 0 ? pyxbuf_error_raise(&err) : 0;
}

PyObject *pyxbuf_exporter_open_shared(const pyxbuf_device *device, const void *handle,
                                      size_t handle_len, int fd, const char *format,
                                      Py_ssize_t itemsize,
                                      int32_t ndim, const Py_ssize_t *shape,
                                      const Py_ssize_t *strides, int32_t readonly) {
    pyxbuf_backend b;
    if (ipc_backend(device, &b, "pyxbuf_exporter_open_shared") < 0) return NULL;
    opened *o = calloc(1, sizeof *o);
    if (o == NULL) return PyErr_NoMemory();
    o->device = *device;
    if (open_handle(&b, o, handle, handle_len, fd) < 0) {
        free(o);
        return NULL;
    }
    pyxbuf_device_info info = {.size = (uint32_t)sizeof info,
                               .device_type = device->device_type,
                               .device_id = device->device_id};
    pyxbuf_export_desc d = {.size = (uint32_t)sizeof d,
                            .ndim = ndim,
                            .buf = o->ptr,
                            .format = format,
                            .itemsize = itemsize,
                            .shape = (Py_ssize_t *)shape,
                            .strides = (Py_ssize_t *)strides,
                            .readonly = readonly,
                            .device = PYXBUF_DEVICE_DLPACK,
                            .device_info = &info};
    PyObject *e = pyxbuf_exporter_wrap(&d, close_opened, o);
    if (e == NULL) {
        close_opened(o);
        return NULL;
    }
    /* Other processes write this memory too: no grant (exporter_over.c). */
    ((pyxbuf__exporter *)e)->process_shared = 1;
    ((pyxbuf__exporter *)e)->slow_getbuffer = 1;
    return e;
}
