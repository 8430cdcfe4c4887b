/* exporter_attrs.c -- pyxbuf.Exporter's Python attributes (shape, strides,
 * format, device, borrows) and the device names its methods take. */
#include "export/exporter.h"

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
