/* fill.c -- filling a view from a description (pyxbuf_export_desc): the
 * producer half every exporter and every bridge shares, honouring the classic
 * flags as NumPy does and the extended ones as the proposal says. */

#include "view/view.h"
#include "base/fixes.h"

#include <stdio.h>

static const char *type_name(PyObject *exporter) {
    return exporter ? PYXBUF__TYPE_NAME(exporter) : "the exporter";
}

/* An empty array is contiguous whatever its strides say (CPython's
 * PyBuffer_IsContiguous and NumPy agree; NumPy's DLPack export of a (0, 3)
 * array has strides (0, 0)). */
static int has_empty_dim(int32_t ndim, const Py_ssize_t *shape) {
    for (int32_t i = 0; i < ndim; i++)
        if (shape[i] == 0) return 1;
    return 0;
}

static int is_c_contiguous(int32_t ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                           Py_ssize_t itemsize) {
    if (strides == NULL || has_empty_dim(ndim, shape)) return 1;
    Py_ssize_t expected = itemsize;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        if (shape[i] != 1 && strides[i] != expected) return 0;
        expected *= shape[i];
    }
    return 1;
}

static int is_f_contiguous(int32_t ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                           Py_ssize_t itemsize) {
    if (has_empty_dim(ndim, shape)) return 1;
    if (strides == NULL) return ndim <= 1;
    Py_ssize_t expected = itemsize;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] != 1 && strides[i] != expected) return 0;
        expected *= shape[i];
    }
    return 1;
}

/* `c`: whether the layout is C-contiguous. */
static int check_contiguity(PyObject *exporter, int flags, const pyxbuf_export_desc *d,
                            Py_ssize_t itemsize, int c) {
    const char *need = NULL;
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !c)
        need = "C-contiguous";
    else if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS &&
             !is_f_contiguous(d->ndim, d->shape, d->strides, itemsize))
        need = "Fortran-contiguous";
    else if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS && !c &&
             !is_f_contiguous(d->ndim, d->shape, d->strides, itemsize))
        need = "contiguous";
    else if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !c)
        need = "C-contiguous (the request has no PyBUF_STRIDES)";
    if (need == NULL) return 0;
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: '%.200s' is not %s; request PyBUF_STRIDES and follow the strides, or "
                 "copy it first",
                 type_name(exporter), need);
    return -1;
}

int pyxbuf__desc_itemsize(const pyxbuf_export_desc *d, Py_ssize_t *itemsize) {
    if (d->itemsize > 0) {
        *itemsize = d->itemsize;
        return 0;
    }
    int64_t size;
    pyxbuf_error err;
    if (pyxbuf_format_itemsize(d->format, &size, NULL, &err) < 0) return pyxbuf_error_raise(&err);
    *itemsize = (Py_ssize_t)size;
    return 0;
}

/* Bytes of the items; also refuses shapes whose non-zero extents overflow
 * (strides are computed from them, even when another extent is 0). */
int pyxbuf__desc_nbytes(const pyxbuf_export_desc *d, Py_ssize_t itemsize,
                        Py_ssize_t *nbytes) {
    Py_ssize_t n = itemsize, extent = itemsize;
    for (int32_t i = 0; i < d->ndim; i++) {
        Py_ssize_t dim = d->shape[i];
        if (dim < 0 || !PYXBUF__MUL_OK(extent, dim > 0 ? dim : 1, &extent)) {
            PyErr_Format(PyExc_ValueError,
                         "pyxbuf: export shape[%d] = %zd is negative or overflows the size",
                         (int)i, dim);
            return -1;
        }
        n = dim == 0 ? 0 : n * dim; /* cannot overflow: n <= extent */
    }
    *nbytes = n;
    return 0;
}

/* The layout checks one dimension at a time, each with its own message: what
 * pyxbuf__layout_pass falls back to. Also takes layouts with an empty dimension. */
static PYXBUF_NOINLINE int careful_layout(PyObject *exporter, const pyxbuf_export_desc *d,
                                          Py_ssize_t itemsize, Py_ssize_t *nbytes, int *c) {
    Py_ssize_t lo, hi;
    if (pyxbuf__desc_nbytes(d, itemsize, nbytes) < 0) return -1;
    if (pyxbuf__checked_span(d->ndim, d->shape, d->strides, itemsize, &lo, &hi) < 0) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: the strides of '%.200s' overflow the address space; the producer's "
                     "layout is invalid",
                     type_name(exporter));
        return -1;
    }
    *c = is_c_contiguous(d->ndim, d->shape, d->strides, itemsize);
    return 0;
}

int pyxbuf__check_desc(const pyxbuf_export_desc *d) {
    if (d == NULL || d->size < sizeof(pyxbuf_export_desc)) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf_export_fill: desc is NULL or its size %u is smaller than %zu; set "
                     "desc.size = sizeof(pyxbuf_export_desc)",
                     d ? (unsigned)d->size : 0u, sizeof(pyxbuf_export_desc));
        return -1;
    }
    if (d->ndim < 0 || d->ndim > PYXBUF_MAX_NDIM || (d->ndim > 0 && d->shape == NULL)) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf_export_fill: ndim %d is outside 0..%d or shape is NULL", (int)d->ndim,
                     PYXBUF_MAX_NDIM);
        return -1;
    }
    if (d->ndim > 1 && d->strides == NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "pyxbuf_export_fill: strides are required for ndim > 1 (they must "
                        "outlive the view)");
        return -1;
    }
    return 0;
}

static int is_device_memory(const pyxbuf_export_desc *d) {
    return d->device != NULL && !pyxbuf_device_equal(d->device, NULL);
}

int pyxbuf_export_fill(Py_buffer *view, PyObject *exporter, int flags,
                       const pyxbuf_export_desc *d) {
    if (view == NULL) {
        PyErr_SetString(PyExc_BufferError, "pyxbuf_export_fill: view is NULL");
        return -1;
    }
    view->obj = NULL;
    if (pyxbuf__check_desc(d) < 0) return -1;
    if (is_device_memory(d) && !(flags & PYXBUF_DEVICE)) {
        char name[64];
        snprintf(name, sizeof name, "%s", d->device);
        if (pyxbuf_device_equal(d->device, PYXBUF_DEVICE_DLPACK) && d->device_info != NULL) {
            const pyxbuf_device_info *info = d->device_info;
            pyxbuf_device where = {info->device_type, info->device_id};
            pyxbuf_device_format(&where, name, sizeof name);
        }
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: '%.200s' holds memory on device '%s', which the host cannot read; %s",
                     type_name(exporter), name, pyxbuf__fix(PYXBUF__FIX_DEVICE_VIEW));
        return -1;
    }
    if ((flags & PyBUF_WRITABLE) && d->readonly) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: '%.200s' is read-only; the request asks for PyBUF_WRITABLE: "
                     "to write, pass a writable copy (numpy's a.copy()); to read, ask for "
                     "read-only access (no PyBUF_WRITABLE, a shared borrow: PyXBuffer<T> in "
                     "Rust, view<const T> in C++)",
                     type_name(exporter));
        return -1;
    }
    Py_ssize_t itemsize = 0, nbytes = 0;
    if (pyxbuf__desc_itemsize(d, &itemsize) < 0) return -1;
    /* Foreign producers' numbers (the bridges fill views through here): the
     * span must not wrap and the memory must exist. */
    int c_contiguous;
    if (PYXBUF_UNLIKELY(pyxbuf__layout_pass(d, itemsize, &nbytes, &c_contiguous) < 0) &&
        careful_layout(exporter, d, itemsize, &nbytes, &c_contiguous) < 0)
        return -1;
    if (d->buf == NULL && nbytes > 0) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: '%.200s' describes %zd %s at a NULL address; the producer's "
                     "buffer is invalid",
                     type_name(exporter), nbytes, PYXBUF__PLURAL(nbytes, "byte", "bytes"));
        return -1;
    }
    if (check_contiguity(exporter, flags, d, itemsize, c_contiguous) < 0) return -1;

    pyxbuf__export_store(view, exporter, flags, d, itemsize, nbytes);
    if ((flags & PYXBUF_DEVICE) && is_device_memory(d)) {
        pyxbuf_view *x = (pyxbuf_view *)view;
        x->flags |= PYXBUF_DEVICE;
        x->device = d->device;
        x->device_info = d->device_info;
    }
    return 0;
}
