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

#endif
