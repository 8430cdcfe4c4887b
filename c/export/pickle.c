/* pickle.c -- Exporter.__reduce_ex__: pickle protocol 5 with the items out
 * of band (PEP 574), bytes before it; a SharedMemory exporter by the block's
 * name.
 *
 * The functions that rebuild an exporter are in the pyxbuf package
 * (pyxbuf._pickle): pickle names them in the stream by module and name, so
 * both processes need that package, as NumPy's arrays need numpy. (A
 * function of libpyxbuf itself has no importable name: every extension
 * carries its own copy of the library.) The reduction asks for the byte
 * view and the host copy it needs through that package and the exporter's
 * own Python methods, below exporter.c, which makes exporters. */

#include "export/exporter.h"

#include <string.h>

/* pyxbuf._pickle.<name>: the functions pickle names in the stream, and the
 * byte view. */
static PyObject *pickle_function(const char *name) {
    PyObject *module = PyImport_ImportModule("pyxbuf._pickle");
    if (module == NULL) {
        PyObject *cause = PyErr_GetRaisedException();
        PyErr_Format(PyExc_TypeError,
                     "cannot pickle a 'pyxbuf.Exporter': its rebuilding function "
                     "pyxbuf._pickle.%s is in the pyxbuf package, which this process cannot "
                     "import; install it (pip install pyxbuf) here and where the pickle is "
                     "loaded",
                     name);
        PyObject *err = PyErr_GetRaisedException();
        PyException_SetCause(err, cause);
        PyErr_SetRaisedException(err);
        return NULL;
    }
    PyObject *f = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    return f;
}

/* The bytes that travel, as a buffer object: a byte view ("B", so that a
 * custom format needs no classic consumer) of the items when they are host
 * memory in C or F order (*order 'C' or 'F'; writable when they are, so that
 * an in-band copy comes back writable); else a C-order copy in a bytearray
 * (a strided layout, whose span may be far larger than its items and hold
 * bytes that are not the array's, which must not leave the process). Device
 * memory is copied to the host first (Exporter.to_device, which waits for
 * the producer's event). New reference. */
static PyObject *items_buffer(PyObject *self, char *order) {
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    if (e->device.device_type != PYXBUF_DL_CPU) {
        PyObject *host = PyObject_CallMethod(self, "to_device", "s", "cpu");
        PyObject *out = host ? items_buffer(host, order) : NULL;
        Py_XDECREF(host);
        return out;
    }
    pyxbuf_view v;
    if (pyxbuf_get(self, &v, PyBUF_RECORDS_RO | PYXBUF_EXTENDED_FORMAT) < 0) return NULL;
    PyObject *out = NULL;
    *order = PyBuffer_IsContiguous(&v.base, 'C') ? 'C' : 'F';
    if (*order == 'C' || PyBuffer_IsContiguous(&v.base, 'F')) {
        PyObject *byte_view = pickle_function("byte_view");
        out = byte_view ? PyObject_CallFunctionObjArgs(byte_view, self, NULL) : NULL;
        Py_XDECREF(byte_view);
    } else {
        *order = 'C';
        out = PyByteArray_FromStringAndSize(NULL, v.base.len);
        if (out != NULL && pyxbuf_view_copy_contiguous(&v, PyByteArray_AsString(out),
                                                       (size_t)v.base.len, 'C') < 0)
            Py_CLEAR(out);
    }
    pyxbuf_release(&v);
    return out;
}

/* The items for the stream: a pickle.PickleBuffer over them from protocol 5
 * (out of band when the pickler has a buffer_callback, else written in band,
 * bytearray when writable), before it bytes (bytearray when the items are
 * writable, so that they come back writable). */
static PyObject *payload(PyObject *items, long protocol, int readonly) {
    if (protocol < 5)
        return readonly ? PyBytes_FromObject(items) : PyByteArray_FromObject(items);
    PyObject *pickle = PyImport_ImportModule("pickle");
    PyObject *cls = pickle ? PyObject_GetAttrString(pickle, "PickleBuffer") : NULL;
    Py_XDECREF(pickle);
    PyObject *out = cls ? PyObject_CallFunctionObjArgs(cls, items, NULL) : NULL;
    Py_XDECREF(cls);
    return out;
}

/* An exporter over a SharedMemory block: its name, where the items start,
 * and the layout, so that the receiver maps the same block (no copy). */
static PyObject *reduce_shared(pyxbuf__exporter *e) {
    PyObject *f = pickle_function("rebuild_shared");
    PyObject *name = f ? PyObject_GetAttrString(e->shared_memory, "name") : NULL;
    PyObject *shape = name ? pyxbuf__exporter_get_shape((PyObject *)e, NULL) : NULL;
    PyObject *strides = shape ? pyxbuf__exporter_get_strides((PyObject *)e, NULL) : NULL;
    PyObject *out = strides ? Py_BuildValue("O(OnsnOOi)", f, name, e->shared_memory_offset,
                                            e->desc.format, e->itemsize, shape, strides,
                                            (int)e->desc.readonly)
                            : NULL;
    Py_XDECREF(f);
    Py_XDECREF(name);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return out;
}

PyObject *pyxbuf__exporter_reduce_ex(PyObject *self, PyObject *arg) {
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    long protocol = PyLong_AsLong(arg);
    if (protocol == -1 && PyErr_Occurred()) return NULL;
    if (e->shared_memory != NULL) return reduce_shared(e);
    char order = 'C';
    PyObject *items = items_buffer(self, &order);
    PyObject *data = items ? payload(items, protocol, e->desc.readonly) : NULL;
    PyObject *f = data ? pickle_function("rebuild") : NULL;
    PyObject *shape = f ? pyxbuf__exporter_get_shape(self, NULL) : NULL;
    PyObject *strides = order == 'F' && shape ? pyxbuf__exporter_get_strides(self, NULL)
                                              : Py_NewRef(Py_None);
    char device[64] = "";
    if (e->device.device_type != PYXBUF_DL_CPU)
        pyxbuf_device_format(&e->device, device, sizeof device);
    PyObject *out = shape && strides
                        ? Py_BuildValue("O(OsnOOiz)", f, data, e->desc.format, e->itemsize,
                                        shape, strides, (int)e->desc.readonly,
                                        device[0] ? device : NULL)
                        : NULL;
    Py_XDECREF(items);
    Py_XDECREF(data);
    Py_XDECREF(f);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return out;
}
