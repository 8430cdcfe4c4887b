/* dlpack_export.c -- any object's memory as a DLPack tensor: the capsule
 * __dlpack__ returns, the managed and non-owning tensors of DLPack's C
 * exchange table, and the parsing of __dlpack__'s arguments. It makes no
 * exporters: pyxbuf.Exporter's methods and the exchange table that need one
 * (copies, allocations) are exporter.c's, which calls down here. */
#include "export/dlpack_export.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* The capsule of __dlpack__                                                 */
/* ------------------------------------------------------------------------- */

/* One allocation per exported tensor: the DLPack struct, the pyxbuf view of
 * the exporter that keeps the memory alive, and the int64 shape and strides.
 * malloc, not PyMem: the deleter may run on any thread, and frees after
 * taking the GIL only because pyxbuf_release needs it. */
typedef struct export_block {
    union {
        DLManagedTensorVersioned versioned;
        DLManagedTensor legacy;
    } t;
    pyxbuf_view view;
    int64_t dims[]; /* shape then strides, max(ndim, 1) each */
} export_block;

/* Release the view and free the block. Deleters may be called from any
 * thread, with or without the GIL, even after Python is gone: after
 * finalization (or during it, from a thread that does not hold the GIL and
 * could not get it) the block is leaked, as NumPy's deleter does, because the
 * exporter it references can no longer be released. */
static void export_block_free(export_block *b) {
    if (!Py_IsInitialized()) return;
    if (Py_IsFinalizing() && !PyGILState_Check()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    pyxbuf_release(&b->view);
    PyGILState_Release(state);
    free(b);
}

static void deleter_versioned(DLManagedTensorVersioned *self) {
    export_block_free(self->manager_ctx);
}

static void deleter_legacy(DLManagedTensor *self) { export_block_free(self->manager_ctx); }

/* Capsule destructors: delete the tensor unless a consumer took it (renamed). */
static void capsule_destructor(PyObject *capsule) {
    PyObject *pending = PyErr_GetRaisedException();
    if (PyCapsule_IsValid(capsule, CAPSULE_VERSIONED)) {
        DLManagedTensorVersioned *t = PyCapsule_GetPointer(capsule, CAPSULE_VERSIONED);
        if (t != NULL && t->deleter != NULL) t->deleter(t);
    } else if (PyCapsule_IsValid(capsule, CAPSULE_LEGACY)) {
        DLManagedTensor *t = PyCapsule_GetPointer(capsule, CAPSULE_LEGACY);
        if (t != NULL && t->deleter != NULL) t->deleter(t);
    }
    PyErr_SetRaisedException(pending);
}

/* A device argument: None, or a (device_type, device_id) pair. */
static int parse_dl_device(PyObject *arg, pyxbuf_device *out, int *given) {
    *given = 0;
    if (arg == NULL || arg == Py_None) return 0;
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != 2) {
        PyErr_SetString(PyExc_TypeError,
                        "pyxbuf: dl_device must be a (device_type, device_id) tuple or None");
        return -1;
    }
    long t = PyLong_AsLong(PyTuple_GET_ITEM(arg, 0));
    long i = PyLong_AsLong(PyTuple_GET_ITEM(arg, 1));
    if (PyErr_Occurred()) return -1;
    if (t < 1 || t > INT32_MAX || i < 0 || i > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "pyxbuf: dl_device (%ld, %ld) is not a DLPack device", t,
                     i);
        return -1;
    }
    out->device_type = (int32_t)t;
    out->device_id = (int32_t)i;
    *given = 1;
    return 0;
}

/* max_version None or (major, minor): the version to write, or 0 = legacy. */
static int parse_max_version(PyObject *arg, DLPackVersion *v) {
    v->major = 0;
    v->minor = 0;
    if (arg == NULL || arg == Py_None) return 0;
    long major = -1, minor = -1;
    if (PyTuple_Check(arg) && PyTuple_GET_SIZE(arg) == 2) {
        major = PyLong_AsLong(PyTuple_GET_ITEM(arg, 0));
        minor = PyLong_AsLong(PyTuple_GET_ITEM(arg, 1));
        if (PyErr_Occurred()) return -1;
    }
    if (major < 0 || minor < 0) {
        PyErr_SetString(PyExc_TypeError,
                        "pyxbuf: max_version must be a (major, minor) tuple of ints or None");
        return -1;
    }
    if (major < DL_MAJOR) return 0;
    v->major = DL_MAJOR;
    v->minor = major > DL_MAJOR || minor > DL_MINOR ? DL_MINOR : (uint32_t)minor;
    return 0;
}

/* The consumer's stream waits for the exporter's last write (its sync event):
 * DLPack's consumer-stream model on top of the Arrow-style event. None means
 * the device's default stream, -1 no synchronisation. Host memory takes only
 * None (or -1), as the Array API says of devices without streams. */
static int order_before_consumer(const pyxbuf_view *view, PyObject *stream_obj) {
    int64_t stream = PYXBUF_STREAM_DEFAULT;
    if (stream_obj != NULL && stream_obj != Py_None) {
        long long s = PyLong_AsLongLong(stream_obj);
        if (s == -1 && PyErr_Occurred()) return -1;
        stream = (int64_t)s;
        if (view->device == NULL && stream != PYXBUF_STREAM_NONE) {
            PyErr_Format(PyExc_BufferError,
                         "pyxbuf: stream=%lld was passed for a CPU tensor; only None (or -1) is "
                         "accepted for devices without streams",
                         s);
            return -1;
        }
    }
    return pyxbuf_device_wait(view, stream);
}

/* Describe the view in `b` in its DLPack struct (versioned unless
 * version->major is 0). Returns 0, or -1 with BufferError set. */
static int fill_tensor(export_block *b, const DLPackVersion *version, int copied) {
    const Py_buffer *base = &b->view.base;
    int ndim = base->ndim;
    DLDataType dt;
    int padded = 0;
    if (pyxbuf__dlpack_format_to_dtype(base->format, &dt, &padded) < 0) return -1;
    if ((Py_ssize_t)(dt.bits * dt.lanes / 8) != base->itemsize && !padded) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: format '%s' is %d %s per item but the buffer's itemsize is %zd; "
                     "DLPack cannot describe the disagreement",
                     base->format, (int)dt.bits * dt.lanes,
                     PYXBUF__PLURAL(dt.bits * dt.lanes, "bit", "bits"), base->itemsize);
        return -1;
    }
    int legacy = version->major == 0;
    if (legacy && (base->readonly || padded)) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: a %s tensor cannot be exported as a legacy DLPack capsule, which "
                     "cannot say so; pass max_version=(1, 0) or newer",
                     padded ? "padded sub-byte" : "read-only");
        return -1;
    }
    int64_t *shape = b->dims, *strides = b->dims + (ndim > 0 ? ndim : 1);
    for (int i = 0; i < ndim; i++) {
        shape[i] = base->shape[i];
        Py_ssize_t s = base->strides ? base->strides[i] : base->itemsize;
        if (s % base->itemsize != 0) {
            PyErr_Format(PyExc_BufferError,
                         "pyxbuf: stride %zd of dimension %d is not a multiple of the item size "
                         "%zd; DLPack counts strides in elements",
                         s, i, base->itemsize);
            return -1;
        }
        strides[i] = s / base->itemsize;
    }
    pyxbuf_device dev;
    pyxbuf_error err;
    if (pyxbuf_view_device(&b->view, &dev, &err) < 0) return pyxbuf_error_raise(&err);
    DLTensor *t = legacy ? &b->t.legacy.dl_tensor : &b->t.versioned.dl_tensor;
    t->data = base->buf;
    t->device.device_type = dev.device_type;
    t->device.device_id = dev.device_id;
    t->ndim = ndim;
    t->dtype = dt;
    t->shape = shape;
    t->strides = strides;
    t->byte_offset = 0;
    if (legacy) {
        b->t.legacy.manager_ctx = b;
        b->t.legacy.deleter = deleter_legacy;
    } else {
        b->t.versioned.version = *version;
        b->t.versioned.manager_ctx = b;
        b->t.versioned.deleter = deleter_versioned;
        b->t.versioned.flags = (base->readonly ? DL_FLAG_READ_ONLY : 0) |
                               (copied ? DL_FLAG_IS_COPIED : 0) |
                               (padded ? DL_FLAG_SUBBYTE_PADDED : 0);
    }
    return 0;
}

/* A block owning the view `v` (moved in), or NULL with MemoryError (and `v`
 * released). */
static export_block *block_new(pyxbuf_view *v) {
    size_t n = v->base.ndim > 0 ? (size_t)v->base.ndim : 1;
    export_block *b = malloc(sizeof *b + 2 * n * sizeof(int64_t));
    if (b == NULL) {
        pyxbuf_release(v);
        PyErr_NoMemory();
        return NULL;
    }
    memset(&b->t, 0, sizeof b->t);
    pyxbuf__view_move(&b->view, v);
    return b;
}

/* Build the capsule for the view in `b` (which it then owns). */
static PyObject *make_capsule(export_block *b, const DLPackVersion *version, int copied) {
    if (fill_tensor(b, version, copied) < 0) return NULL;
    int legacy = version->major == 0;
    return PyCapsule_New(&b->t, legacy ? CAPSULE_LEGACY : CAPSULE_VERSIONED, capsule_destructor);
}

int pyxbuf__dlpack_parse_request(PyObject *args, PyObject *kwargs, pyxbuf__dlpack_request *r) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    r->stream = Py_None;
    r->copy = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:__dlpack__", kwlist, &r->stream,
                                     &max_version, &dl_device, &copy) ||
        parse_max_version(max_version, &r->version) < 0 ||
        parse_dl_device(dl_device, &r->device, &r->device_given) < 0)
        return -1;
    if (copy != Py_None && (r->copy = PyObject_IsTrue(copy)) < 0) return -1;
    return 0;
}

PyObject *pyxbuf__dlpack_capsule_of(pyxbuf_view *v, const pyxbuf__dlpack_request *r, int copied) {
    if (order_before_consumer(v, r->stream) < 0) {
        pyxbuf_release(v);
        return NULL;
    }
    export_block *b = block_new(v);
    if (b == NULL) return NULL;
    PyObject *capsule = make_capsule(b, &r->version, copied);
    if (capsule == NULL) {
        pyxbuf_release(&b->view);
        free(b);
    }
    return capsule;
}

/* ------------------------------------------------------------------------- */
/* The tensors of the C exchange table                                       */
/* ------------------------------------------------------------------------- */

_Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t),
               "a non-owning DLTensor's shape and strides point at Py_ssize_t arrays");

int pyxbuf__dlpack_managed_tensor_of(PyObject *obj, DLManagedTensorVersioned **out) {
    pyxbuf_view v;
    if (pyxbuf_get(obj, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) < 0) return -1;
    /* No stream is given here: the consumer works on current_work_stream,
     * the default stream, so the producer's event is waited for there. */
    if (pyxbuf_device_wait(&v, PYXBUF_STREAM_DEFAULT) < 0) {
        pyxbuf_release(&v);
        return -1;
    }
    export_block *b = block_new(&v);
    if (b == NULL) return -1;
    DLPackVersion version = {DL_MAJOR, DL_MINOR};
    if (fill_tensor(b, &version, 0) < 0) {
        pyxbuf_release(&b->view);
        free(b);
        return -1;
    }
    *out = &b->t.versioned;
    return 0;
}

int pyxbuf__dlpack_dltensor_of(PyObject *obj, const Py_ssize_t *shape,
                               const Py_ssize_t *item_strides, DLTensor *out) {
    pyxbuf_view v;
    if (pyxbuf_get(obj, &v, PyBUF_RECORDS | PYXBUF_DEVICE) < 0) return -1;
    DLDataType dt;
    int padded = 0, rc = -1;
    pyxbuf_device dev;
    pyxbuf_error err;
    if (pyxbuf__dlpack_format_to_dtype(v.base.format, &dt, &padded) < 0) goto done;
    if (padded || item_strides == NULL) {
        pyxbuf__buffer_error("pyxbuf: a DLTensor of this pyxbuf.Exporter cannot say %s; use "
                             "managed_tensor_from_py_object_no_sync",
                             padded ? "that its sub-byte items are padded"
                                    : "its strides in items");
        goto done;
    }
    if (pyxbuf_view_device(&v, &dev, &err) < 0) {
        pyxbuf_error_raise(&err);
        goto done;
    }
    if (pyxbuf_device_wait(&v, PYXBUF_STREAM_DEFAULT) < 0) goto done;
    out->data = v.base.buf;
    out->device.device_type = dev.device_type;
    out->device.device_id = dev.device_id;
    out->ndim = v.base.ndim;
    out->dtype = dt;
    /* The object's own arrays: valid while it lives, which the caller
     * guarantees until control returns. */
    out->shape = (int64_t *)(uintptr_t)shape;
    out->strides = (int64_t *)(uintptr_t)item_strides;
    out->byte_offset = 0;
    rc = 0;
done:
    pyxbuf_release(&v);
    return rc;
}

void pyxbuf__dlpack_report_to(void *error_ctx,
                              void (*set_error)(void *, const char *, const char *)) {
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *text = exc ? PyObject_Str(exc) : NULL;
    const char *message = text ? PyUnicode_AsUTF8(text) : NULL;
    if (message == NULL) {
        PyErr_Clear();
        message = "pyxbuf: the allocation failed";
    }
    const char *kind = exc ? PYXBUF__TYPE_NAME(exc) : "RuntimeError";
    if (set_error != NULL) set_error(error_ctx, kind, message);
    Py_XDECREF(text);
    Py_XDECREF(exc);
}
