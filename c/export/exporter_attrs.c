/* exporter_attrs.c -- pyxbuf.Exporter's Python attributes (shape, strides,
 * format, device, borrows, __cuda_array_interface__), its __array__ and the
 * device names its methods take. */
#include "bridges/dlpack.h"
#include "export/exporter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PyObject *tuple_of(const Py_ssize_t *values, int32_t n) {
    PyObject *t = PyTuple_New(n);
    for (int32_t i = 0; t != NULL && i < n; i++) {
        PyObject *v = PyLong_FromSsize_t(values[i]);
        if (v == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

PyObject *pyxbuf__exporter_get_shape(PyObject *self, void *closure) {
    (void)closure;
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    return tuple_of(e->desc.shape, e->desc.ndim);
}

PyObject *pyxbuf__exporter_get_strides(PyObject *self, void *closure) {
    (void)closure;
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    return tuple_of(e->desc.strides, e->desc.ndim);
}

PyObject *pyxbuf__exporter_get_format(PyObject *self, void *closure) {
    (void)closure;
    return PyUnicode_FromString(((pyxbuf__exporter *)self)->desc.format);
}

PyObject *pyxbuf__exporter_get_device(PyObject *self, void *closure) {
    (void)closure;
    char name[64];
    if (pyxbuf_device_format(&((pyxbuf__exporter *)self)->device, name, sizeof name) < 0)
        return PyUnicode_FromString("unknown");
    return PyUnicode_FromString(name);
}

int pyxbuf__parse_device(PyObject *arg, pyxbuf_device *out) {
    if (PyTuple_Check(arg))
        return PyArg_ParseTuple(arg, "ii", &out->device_type, &out->device_id) ? 0 : -1;
    const char *text = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (text == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "pyxbuf: a device is 'cpu', 'cuda:0', 'ext_dev:1' ... or a (device_type, "
                     "device_id) tuple, not '%.200s'",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    for (int32_t t = 1; t < 64; t++) {
        const char *name = pyxbuf_device_type_name(t);
        size_t n = strlen(name);
        if (strcmp(name, "unknown") == 0 || strncmp(text, name, n) != 0) continue;
        out->device_type = t;
        out->device_id = 0;
        if (text[n] == '\0') return 0;
        char *end = NULL;
        long id = text[n] == ':' ? strtol(text + n + 1, &end, 10) : -1;
        if (end != NULL && *end == '\0' && id >= 0 && id <= INT32_MAX) {
            out->device_id = (int32_t)id;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError,
                 "pyxbuf: unknown device '%s'; write it as 'cpu', 'cuda:0', 'ext_dev:1', ...",
                 text);
    return -1;
}

PyObject *pyxbuf__exporter_get_borrows(PyObject *self, void *closure) {
    (void)closure;
    pyxbuf_borrow_counter b;
    pyxbuf__borrow_counts(&((pyxbuf__exporter *)self)->borrows, &b);
    return Py_BuildValue("{sLsLsLsL}", "views", (long long)b.views, "writable",
                         (long long)b.writable, "shared", (long long)b.shared, "exclusive",
                         (long long)b.exclusive);
}

/* ------------------------------------------------------------------------- */
/* __cuda_array_interface__ (version 3), for CUDA memory only                */
/* ------------------------------------------------------------------------- */

/* The CAI typestr of a format DLPack can express as one plain scalar ("<f4",
 * "|b1"); 0, or -1 with AttributeError naming the format (bfloat16, float8,
 * structs: no typestr spells them, __dlpack__ does). */
static int cai_typestr(const char *format, char *out, size_t cap) {
    static const char KIND[] = {'i', 'u', 'f', 0, 0, 'c', 'b'}; /* by DLPack code */
    DLDataType dt;
    int padded = 0;
    if (pyxbuf__dlpack_format_to_dtype(format, &dt, &padded) < 0) PyErr_Clear();
    else if (dt.code < sizeof KIND && KIND[dt.code] != 0 && dt.lanes == 1 && !padded) {
        unsigned bytes = (unsigned)dt.bits / 8u;
        snprintf(out, cap, "%c%c%u", bytes == 1 ? '|' : '<', KIND[dt.code], bytes);
        return 0;
    }
    PyErr_Format(PyExc_AttributeError,
                 "pyxbuf.Exporter: format '%s' has no __cuda_array_interface__ typestr; read it "
                 "through __dlpack__ (cupy.from_dlpack, torch.from_dlpack)",
                 format);
    return -1;
}

/* Without an event the memory is ready; with one, the legacy default stream
 * (1) is made to wait for it and named, so a consumer orders its work after
 * the producer's as CAI v3 asks. Called in the exporter's critical section. */
static int cai_stream(pyxbuf__exporter *e, PyObject **out) {
    void *event = e->device_info.sync_event;
    if (event == NULL) return (*out = Py_NewRef(Py_None), 0);
    pyxbuf_backend b;
    pyxbuf_error err;
    if (pyxbuf_backend_get(e->device.device_type, &b, &err) < 0 || b.event_wait == NULL ||
        b.event_wait(b.ctx, e->device.device_id, event, 1, &err) < 0)
        return pyxbuf_error_raise(&err);
    return (*out = PyLong_FromLong(1)) == NULL ? -1 : 0;
}

/* Strides in bytes, or None when they are C order's. */
static PyObject *cai_strides(const pyxbuf__exporter *e) {
    const pyxbuf_export_desc *d = &e->desc;
    Py_ssize_t expect = e->itemsize;
    int c_order = 1;
    for (int32_t i = d->ndim - 1; i >= 0 && d->strides != NULL; i--) {
        if (d->shape[i] > 1 && d->strides[i] != expect) c_order = 0;
        expect *= d->shape[i];
    }
    return c_order ? Py_NewRef(Py_None) : tuple_of(d->strides, d->ndim);
}

PyObject *pyxbuf__exporter_get_cai(PyObject *self, void *closure) {
    (void)closure;
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    int32_t type = e->device.device_type;
    if (type != PYXBUF_DL_CUDA && type != PYXBUF_DL_CUDA_MANAGED) {
        char name[64];
        if (pyxbuf_device_format(&e->device, name, sizeof name) < 0) strcpy(name, "unknown");
        PyErr_Format(PyExc_AttributeError,
                     "pyxbuf.Exporter: __cuda_array_interface__ describes CUDA memory; this "
                     "Exporter's memory is on '%s' (read it through __dlpack__ or the buffer "
                     "protocol)",
                     name);
        return NULL;
    }
    char typestr[16];
    if (cai_typestr(e->desc.format, typestr, sizeof typestr) < 0) return NULL;
    PyObject *stream = NULL;
    int rc;
    Py_BEGIN_CRITICAL_SECTION(self);
    rc = cai_stream(e, &stream);
    Py_END_CRITICAL_SECTION();
    if (rc < 0) return NULL;
    return Py_BuildValue("{s:N,s:s,s:(N,O),s:N,s:i,s:N}", "shape",
                         tuple_of(e->desc.shape, e->desc.ndim), "typestr", typestr, "data",
                         PyLong_FromVoidPtr(e->desc.buf), e->desc.readonly ? Py_True : Py_False,
                         "strides", cai_strides(e), "version", 3, "stream", stream);
}

/* __array__(dtype=None, copy=None), NumPy 2's signature. np.asarray tries
 * the buffer first and, when it fails, swallows the BufferError and falls
 * back to a 0-d object array -- under an exclusive borrow a user would get
 * that silently. NumPy reaches this method after the buffer failed (or when
 * asked directly): the zero-copy view through the buffer, or the buffer's
 * refusal, which then reaches the user. `copy` as NumPy means it: True
 * always copies, False never (NumPy's ValueError when dtype needs one). */
PyObject *pyxbuf__exporter_array(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$O:__array__", kwlist, &dtype, &copy))
        return NULL;
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL) return NULL;
    PyObject *view = PyMemoryView_FromObject(self); /* the refusal, if any, says why */
    PyObject *out = NULL;
    if (view != NULL) {
        PyObject *asarray = PyObject_GetAttrString(numpy, "asarray");
        PyObject *pos = asarray ? PyTuple_Pack(2, view, dtype) : NULL;
        PyObject *kw = pos && copy != Py_None ? Py_BuildValue("{sO}", "copy", copy) : NULL;
        if (pos != NULL && (copy == Py_None || kw != NULL)) out = PyObject_Call(asarray, pos, kw);
        Py_XDECREF(kw);
        Py_XDECREF(pos);
        Py_XDECREF(asarray);
        Py_DECREF(view);
    }
    Py_DECREF(numpy);
    return out;
}
