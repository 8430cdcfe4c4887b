/* exporter_over.c -- exporters over another object's memory
 * (pyxbuf_exporter_over): what unpickling a pyxbuf.Exporter makes, and
 * exporters over a SharedMemory block that worker processes fill in place.
 * The exporter holds a view of the base; exporter.c makes the object. */

#include "export/exporter.h"
#include "base/span.h"

#include <string.h>

/* The base's view, released when the exporter dies (with the GIL: exporters
 * die in their dealloc). */
static void release_base(void *ctx) {
    Py_buffer *held = ctx;
    PyBuffer_Release(held);
    PyMem_Free(held);
}

/* A contiguous (C or F) view of `base`, writable unless `readonly` asks
 * otherwise or the base refuses to write: a writable base gives a writable
 * exporter, a read-only one (bytes, Ray's object store) a read-only one, as
 * np.frombuffer answers. */
static Py_buffer *hold_base(PyObject *base, int readonly) {
    Py_buffer *held = PyMem_Calloc(1, sizeof *held);
    if (held == NULL) return (Py_buffer *)PyErr_NoMemory();
    int flags = PyBUF_STRIDES | PyBUF_ANY_CONTIGUOUS;
    if (!readonly && PyObject_GetBuffer(base, held, flags | PyBUF_WRITABLE) == 0) return held;
    if (!readonly) PyErr_Clear(); /* read-only: ask again without PyBUF_WRITABLE */
    if (PyObject_GetBuffer(base, held, flags) == 0) return held;
    PyMem_Free(held);
    PyObject *cause = PyErr_GetRaisedException();
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf_exporter_over: a '%.200s' gave no contiguous view of its memory (%S); "
                 "give a buffer whose bytes are one run (np.ascontiguousarray, bytes(...))",
                 PYXBUF__TYPE_NAME(base), cause ? cause : Py_None);
    PyObject *err = PyErr_GetRaisedException();
    PyException_SetCause(err, cause);
    PyErr_SetRaisedException(err);
    return NULL;
}

/* Whether a layout of `itemsize`-byte items at `offset` stays inside `len`
 * bytes: every byte any index can reach. -1 with ValueError when not. */
static int check_inside(const pyxbuf_export_desc *d, Py_ssize_t itemsize, Py_ssize_t offset,
                        Py_ssize_t len) {
    Py_ssize_t lo = 0, hi = 0, first = 0, end = 0;
    if (pyxbuf__checked_span(d->ndim, d->shape, d->strides, itemsize, &lo, &hi) < 0) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_exporter_over: the shape and strides "
                                          "overflow; give a layout whose bytes can be counted");
        return -1;
    }
    if (hi == lo) return offset >= 0 && offset <= len ? 0 : (PyErr_Format(PyExc_ValueError,
        "pyxbuf_exporter_over: offset %zd is outside the buffer's %zd bytes", offset, len), -1);
    if (offset < 0 || !PYXBUF__ADD_OK(offset, lo, &first) ||
        !PYXBUF__ADD_OK(offset, hi, &end) || first < 0 || end > len) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf_exporter_over: the items reach bytes [%zd, %zd) from offset %zd of "
                     "a buffer of %zd bytes; give a smaller shape, other strides or a larger "
                     "buffer",
                     lo, hi, offset, len);
        return -1;
    }
    return 0;
}

/* Without a shape, 1-D: as many items as fit after `offset` (np.frombuffer's
 * count=-1). 0 with ValueError when that is no whole number. */
static int items_that_fit(pyxbuf_export_desc *d, Py_ssize_t itemsize, Py_ssize_t offset,
                          Py_ssize_t len, Py_ssize_t *count) {
    if (d->ndim != 1 || itemsize <= 0 || offset < 0 || offset > len ||
        (len - offset) % itemsize != 0) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf_exporter_over: no shape given, and %zd bytes from offset %zd of a "
                     "buffer of %zd are not a whole number of %zd-byte items of 1 dimension; "
                     "give a shape",
                     len - offset, offset, len, itemsize);
        return 0;
    }
    *count = (len - offset) / itemsize;
    d->shape = count;
    return 1;
}

/* C-order strides into `out` when d has none (the description needs them
 * from 2 dimensions up); 0 with ValueError for a bad ndim. */
static int c_order_strides(pyxbuf_export_desc *d, Py_ssize_t itemsize, Py_ssize_t *out) {
    if (d->ndim < 0 || d->ndim > PYXBUF_MAX_NDIM || (d->ndim > 0 && d->shape == NULL)) {
        PyErr_Format(PyExc_ValueError, "pyxbuf_exporter_over: ndim %d is outside 0..%d or shape "
                     "is NULL", (int)d->ndim, PYXBUF_MAX_NDIM);
        return 0;
    }
    if (d->strides != NULL || d->ndim == 0) return 1;
    Py_ssize_t stride = itemsize;
    for (int32_t i = d->ndim - 1; i >= 0; i--) {
        out[i] = stride;
        if (d->shape[i] > 0 && !PYXBUF__MUL_OK(stride, d->shape[i], &stride)) {
            PyErr_SetString(PyExc_ValueError, "pyxbuf_exporter_over: the shape's bytes "
                                              "overflow; give a smaller shape");
            return 0;
        }
    }
    d->strides = out;
    return 1;
}

/* SharedMemory (anything that is no buffer but has `buf`, a buffer, and
 * `name`): its `buf`, with *shm the block itself (new references). */
static PyObject *shared_memory_buffer(PyObject *base, PyObject **shm) {
    *shm = NULL;
    if (PyObject_CheckBuffer(base)) return Py_NewRef(base);
    PyObject *buf = PyObject_GetAttrString(base, "buf");
    if (buf == NULL || !PyObject_HasAttrString(base, "name") || !PyObject_CheckBuffer(buf)) {
        Py_XDECREF(buf);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "pyxbuf_exporter_over: a '%.200s' is neither a buffer (bytes, bytearray, "
                     "memoryview, mmap, a NumPy array, ...) nor a "
                     "multiprocessing.shared_memory.SharedMemory; give one of those",
                     PYXBUF__TYPE_NAME(base));
        return NULL;
    }
    *shm = Py_NewRef(base);
    return buf;
}

PyObject *pyxbuf_exporter_over(PyObject *base, Py_ssize_t offset, const char *format,
                               Py_ssize_t itemsize, int32_t ndim, const Py_ssize_t *shape,
                               const Py_ssize_t *strides, int32_t options) {
    PyObject *shm = NULL, *source = shared_memory_buffer(base, &shm);
    if (source == NULL) return NULL;
    Py_buffer *held = hold_base(source, options & PYXBUF_OVER_READONLY);
    Py_DECREF(source);
    if (held == NULL) {
        Py_XDECREF(shm);
        return NULL;
    }
    pyxbuf_export_desc d;
    memset(&d, 0, sizeof d);
    d.size = (uint32_t)sizeof d;
    d.ndim = ndim;
    d.format = format;
    d.itemsize = itemsize > 0 ? itemsize : 0;
    d.shape = (Py_ssize_t *)shape;
    d.strides = (Py_ssize_t *)strides;
    d.readonly = held->readonly || (options & PYXBUF_OVER_READONLY);
    /* The base's owner may still write it: grants are tracked ones (never
     * stronger than this hold on the memory). */
    d.tracked = 1;
    Py_ssize_t c_strides[PYXBUF_MAX_NDIM], count = 0;
    PyObject *e = NULL;
    if (pyxbuf__desc_itemsize(&d, &itemsize) == 0 &&
        (shape != NULL || items_that_fit(&d, itemsize, offset, held->len, &count)) &&
        c_order_strides(&d, itemsize, c_strides) &&
        pyxbuf__check_desc(&d) == 0 && check_inside(&d, itemsize, offset, held->len) == 0) {
        d.buf = (char *)held->buf + offset;
        e = pyxbuf_exporter_wrap(&d, release_base, held);
    }
    if (e == NULL) {
        release_base(held);
        Py_XDECREF(shm);
        return NULL;
    }
    pyxbuf__exporter *x = (pyxbuf__exporter *)e;
    x->shared_memory = shm; /* owned; pickled by name */
    x->shared_memory_offset = offset;
    x->process_shared = shm != NULL || (options & PYXBUF_OVER_PROCESS_SHARED);
    x->slow_getbuffer = x->slow_getbuffer || x->process_shared;
    return e;
}
