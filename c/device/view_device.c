/* view_device.c -- a view's device in the Array API's terms: which device
 * holds it, whether its bytes are memory of the device it claims (asked of
 * the backend), and the operations that need the host to read it (element
 * access, memoryview, contiguous copies), refused for device memory. Copies
 * and waits across devices are the export layer's (export/transfer.c). */

#include "device/device.h"

#include <stdio.h>
#include <string.h>

static const pyxbuf_device host_device = {PYXBUF_DL_CPU, 0};

int pyxbuf_view_device(const pyxbuf_view *view, pyxbuf_device *out, pyxbuf_error *err) {
    if (view->device == NULL) {
        *out = host_device;
        return 0;
    }
    if (!pyxbuf_device_equal(view->device, PYXBUF_DEVICE_DLPACK) || view->device_info == NULL)
        return pyxbuf__error(err, PYXBUF_EUNSUPPORTED, -1,
                             "view device '%s' is not '%s'; pyxbuf cannot tell which device "
                             "holds it",
                             view->device, PYXBUF_DEVICE_DLPACK);
    const pyxbuf_device_info *info = view->device_info;
    out->device_type = info->device_type;
    out->device_id = info->device_id;
    return 0;
}

/* The view's device as "cuda:0", for messages. */
void pyxbuf__describe_view_device(const pyxbuf_view *view, char *buf, size_t cap) {
    pyxbuf_device d;
    if (pyxbuf_view_device(view, &d, NULL) < 0 || pyxbuf_device_format(&d, buf, cap) < 0)
        snprintf(buf, cap, "%s", view->device ? view->device : "cpu");
}

/* The address buf + off, computed as an integer (a lying producer's offset
 * may leave the address space, where pointer arithmetic is undefined);
 * 0 when it does. */
static int address_at(const char *buf, Py_ssize_t off, uintptr_t *out) {
    uintptr_t base = (uintptr_t)buf;
    if (off >= 0) return PYXBUF__ADD_OK(base, (uintptr_t)off, out);
    uintptr_t back = (uintptr_t)0 - (uintptr_t)off;
    if (back > base) return 0;
    *out = base - back;
    return 1;
}

/* A device view's first and last bytes must both be memory of the device it
 * claims; "cuda" claims are also met by CUDA managed memory, which is what
 * PyTorch and RAPIDS hand out under kDLCUDA when managed memory is on. */
int pyxbuf__check_device_span(const pyxbuf_backend *b, const char *buf, Py_ssize_t lo,
                              Py_ssize_t hi, const pyxbuf_device *claimed, pyxbuf_error *err) {
    if (hi <= lo) return 0;
    uintptr_t first, last;
    if (!address_at(buf, lo, &first) || !address_at(buf, hi - 1, &last))
        return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                             "its bytes [%p%+zd, %p%+zd) wrap around the address space",
                             (const void *)buf, lo, (const void *)buf, hi);
    const void *ends[2] = {(const void *)first, (const void *)last};
    for (int i = 0; i < 2; i++) {
        pyxbuf_device found = {0, 0};
        char claim[64], where[64];
        pyxbuf_device_format(claimed, claim, sizeof claim);
        pyxbuf_error why;
        if (b->pointer_query(b->ctx, ends[i], &found, &why) < 0)
            return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                                 "its %s byte %p is not memory of device '%s' (%.300s)",
                                 i ? "last" : "first", ends[i], claim, why.message);
        int same = pyxbuf_device_same(&found, claimed) ||
                   (claimed->device_type == PYXBUF_DL_CUDA &&
                    found.device_type == PYXBUF_DL_CUDA_MANAGED &&
                    found.device_id == claimed->device_id);
        if (!same) {
            pyxbuf_device_format(&found, where, sizeof where);
            return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                                 "it claims device '%s' but its %s byte %p is on '%s'", claim,
                                 i ? "last" : "first", ends[i], where);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Host-only operations                                                      */
/* ------------------------------------------------------------------------- */

static int refuse_device_view(const pyxbuf_view *view, const char *what) {
    char name[64];
    pyxbuf__describe_view_device(view, name, sizeof name);
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: %s needs host memory, but the view is on device '%s'; copy it to the "
                 "host first (pyxbuf_copy_to_host, or pyxbuf_to_device with a CPU device)",
                 what, name);
    return -1;
}

static int is_host_view(const pyxbuf_view *view) {
    pyxbuf_device d = {0, 0};
    if (view->device == NULL) return 1;
    return pyxbuf_view_device(view, &d, NULL) == 0 && pyxbuf__host_accessible(d.device_type);
}

static int refuse_released(void) {
    PyErr_SetString(PyExc_BufferError,
                    "pyxbuf: the view is not acquired (released already?); acquire it with "
                    "pyxbuf_get first");
    return -1;
}

/* The view is acquired and the host may read its memory; else -1 with
 * BufferError naming `what` needed it. */
static int check_host_readable(const pyxbuf_view *view, const char *what) {
    if (!pyxbuf__view_acquired(view)) return refuse_released();
    return is_host_view(view) ? 0 : refuse_device_view(view, what);
}

void *pyxbuf_view_item_ptr(const pyxbuf_view *view, const Py_ssize_t *indices) {
    if (check_host_readable(view, "element access") < 0) return NULL;
    const Py_buffer *b = &view->base;
    char *p = b->buf;
    for (int i = 0; b->shape != NULL && i < b->ndim; i++) {
        if (indices[i] < 0 || indices[i] >= b->shape[i]) {
            PyErr_Format(PyExc_IndexError,
                         "pyxbuf: index %zd is out of bounds for dimension %d of size %zd",
                         indices[i], i, b->shape[i]);
            return NULL;
        }
        p += indices[i] * pyxbuf__stride_of(b, i);
        if (b->suboffsets && b->suboffsets[i] >= 0) p = *(char **)p + b->suboffsets[i];
    }
    return p;
}

PyObject *pyxbuf_view_memoryview(const pyxbuf_view *view) {
    if (check_host_readable(view, "a memoryview") < 0) return NULL;
    if (view->base.obj == NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "pyxbuf: the view has no object to make a memoryview of");
        return NULL;
    }
    return PyMemoryView_FromObject(view->base.obj);
}

int pyxbuf__check_copy_size(const pyxbuf_view *view, size_t nbytes) {
    if (!pyxbuf__view_acquired(view)) return refuse_released();
    pyxbuf__layout l = pyxbuf__view_layout(&view->base);
    Py_ssize_t want = 0;
    if (!l.ok || !PYXBUF__MUL_OK(l.count, view->base.itemsize, &want) || want != view->base.len) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: the view's len %zd disagrees with its shape and itemsize %zd, or "
                     "its strides overflow; the producer's buffer is inconsistent",
                     view->base.len, view->base.itemsize);
        return -1;
    }
    if (view->base.suboffsets != NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "pyxbuf: cannot copy a view with suboffsets (PIL-style indirect arrays); "
                        "request it without PyBUF_INDIRECT");
        return -1;
    }
    if ((Py_ssize_t)nbytes != view->base.len || view->base.len < 0) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf: destination holds %zu %s but the view's items take %zd; pass a "
                     "buffer of exactly base.len bytes",
                     nbytes, PYXBUF__PLURAL(nbytes, "byte", "bytes"), view->base.len);
        return -1;
    }
    return 0;
}

int pyxbuf_view_copy_contiguous(const pyxbuf_view *view, void *dst, size_t nbytes, char order) {
    if (pyxbuf__check_copy_size(view, nbytes) < 0) return -1;
    if (!is_host_view(view)) return refuse_device_view(view, "a contiguous copy");
    if (order != 'C' && order != 'F') {
        PyErr_Format(PyExc_ValueError, "pyxbuf: order must be 'C' or 'F', not '%c'", order);
        return -1;
    }
    if (order == 'C')
        pyxbuf__gather_c_order(&view->base, view->base.buf, dst);
    else
        pyxbuf__gather_f_order(&view->base, view->base.buf, dst);
    return 0;
}
