/* testext_bridges.c -- _pyxbuf_testext functions for the bridge tests
 * (python-tests/test_cai.py, test_array_interface.py): what Python cannot
 * do alone -- read a view's device info (sync event, producer stream, DLPack
 * flags), acquire on a consumer stream, make a stream wait and run it, and
 * read emulated-device memory by address without waiting. */
#include <string.h>

#include "pyxbuf.h"

#include "device/emulated.h"

int pyxbuf_testext_add_bridges(PyObject *module);

#define DEVICE_VIEW (PyBUF_RECORDS_RO | PYXBUF_DEVICE)

static int put(PyObject *d, const char *key, PyObject *value) {
    if (value == NULL) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *ssize_tuple(const Py_ssize_t *values, int n) {
    if (values == NULL) Py_RETURN_NONE;
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t != NULL && i < n; i++) {
        PyObject *v = PyLong_FromSsize_t(values[i]);
        if (v == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* None, or an int stream from a Python object. */
static int stream_arg(PyObject *arg, int *given, long long *stream) {
    *given = 0;
    if (arg == NULL || arg == Py_None) return 0;
    *stream = PyLong_AsLongLong(arg);
    if (*stream == -1 && PyErr_Occurred()) return -1;
    *given = 1;
    return 0;
}

static int acquire(PyObject *obj, pyxbuf_view *view, int flags, PyObject *stream_obj) {
    int given;
    long long stream;
    if (stream_arg(stream_obj, &given, &stream) < 0) return -1;
    return given ? pyxbuf_get_stream(obj, view, flags, stream) : pyxbuf_get(obj, view, flags);
}

/* Whether a bridge filled the view: only then is `owner` the view's
 * (pyxbuf_view: pyxbuf's bookkeeping, left alone by the other paths). */
static int bridged(const pyxbuf_view *v) {
    return v->path == PYXBUF_PATH_DLPACK || v->path == PYXBUF_PATH_DLPACK_C ||
           v->path == PYXBUF_PATH_CAI || v->path == PYXBUF_PATH_ARRAY_INTERFACE;
}

/* bridge_view(obj, flags=RECORDS_RO|DEVICE, consumer_stream=None) -> dict of
 * the view, with the pyxbuf_device_info fields (sync_event as an address or
 * None, stream, dl_flags) when the device is "pyxbuf.dlpack". */
static PyObject *bridge_view(PyObject *mod, PyObject *args, PyObject *kwargs) {
    (void)mod;
    static char *kwlist[] = {"obj", "flags", "consumer_stream", NULL};
    PyObject *obj, *stream_obj = Py_None;
    int flags = DEVICE_VIEW;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|iO", kwlist, &obj, &flags, &stream_obj))
        return NULL;
    pyxbuf_view v;
    if (acquire(obj, &v, flags, stream_obj) < 0) return NULL;
    const Py_buffer *b = &v.base;
    PyObject *d = PyDict_New();
    int ok = d != NULL && put(d, "path", PyUnicode_FromString(pyxbuf_path_name(v.path))) == 0 &&
             put(d, "buf", PyLong_FromVoidPtr(b->buf)) == 0 &&
             put(d, "len", PyLong_FromSsize_t(b->len)) == 0 &&
             put(d, "itemsize", PyLong_FromSsize_t(b->itemsize)) == 0 &&
             put(d, "readonly", PyBool_FromLong(b->readonly)) == 0 &&
             put(d, "ndim", PyLong_FromLong(b->ndim)) == 0 &&
             put(d, "format", b->format ? PyUnicode_FromString(b->format) : Py_NewRef(Py_None)) == 0 &&
             put(d, "shape", ssize_tuple(b->shape, b->ndim)) == 0 &&
             put(d, "strides", ssize_tuple(b->strides, b->ndim)) == 0 &&
             put(d, "flags", PyLong_FromLong(v.flags)) == 0 &&
             put(d, "obj_is", PyBool_FromLong(b->obj == obj)) == 0 &&
             put(d, "owner", bridged(&v) && v.owner
                                 ? PyUnicode_FromString(Py_TYPE(v.owner)->tp_name)
                                 : Py_NewRef(Py_None)) == 0 &&
             put(d, "device", v.device ? PyUnicode_FromString(v.device) : Py_NewRef(Py_None)) == 0;
    if (ok && v.device != NULL && strcmp(v.device, PYXBUF_DEVICE_DLPACK) == 0 &&
        v.device_info != NULL) {
        const pyxbuf_device_info *info = v.device_info;
        ok = put(d, "info_size", PyLong_FromUnsignedLong(info->size)) == 0 &&
             put(d, "device_type", PyLong_FromLong(info->device_type)) == 0 &&
             put(d, "device_id", PyLong_FromLong(info->device_id)) == 0 &&
             put(d, "sync_event", info->sync_event ? PyLong_FromVoidPtr(info->sync_event)
                                                   : Py_NewRef(Py_None)) == 0 &&
             put(d, "stream", PyLong_FromLongLong(info->stream)) == 0 &&
             put(d, "dl_flags", PyLong_FromUnsignedLongLong(info->dl_flags)) == 0 &&
             put(d, "reserved_zero",
                 PyBool_FromLong(info->reserved0 == 0 && info->reserved[0] == 0 &&
                                 info->reserved[1] == 0 && info->reserved[2] == 0)) == 0;
    }
    pyxbuf_release(&v);
    if (!ok) Py_CLEAR(d);
    return d;
}

/* emulated_stream(device_id=0) -> a new emulated-device stream. */
static PyObject *emulated_stream(PyObject *mod, PyObject *args) {
    (void)mod;
    int id = 0;
    if (!PyArg_ParseTuple(args, "|i", &id)) return NULL;
    int64_t stream;
    pyxbuf_error err;
    if (pyxbuf_emulated_stream_create(id, &stream, &err) < 0)
        return (pyxbuf_error_raise(&err), NULL);
    return PyLong_FromLongLong(stream);
}

/* stream_sync((device_type, device_id), stream): run everything queued on
 * the stream (the backend's synchronize). */
static PyObject *stream_sync(PyObject *mod, PyObject *args) {
    (void)mod;
    int type, id;
    long long stream;
    if (!PyArg_ParseTuple(args, "(ii)L", &type, &id, &stream)) return NULL;
    pyxbuf_backend b;
    pyxbuf_error err;
    int rc = pyxbuf_backend_get(type, &b, &err);
    if (rc == 0 && b.synchronize == NULL) {
        PyErr_Format(PyExc_RuntimeError, "backend '%s' cannot synchronise", b.name);
        return NULL;
    }
    if (rc == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = b.synchronize(b.ctx, id, stream, &err);
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) return (pyxbuf_error_raise(&err), NULL);
    Py_RETURN_NONE;
}

/* emulated_peek_at(address, n) -> the bytes of emulated-device memory now,
 * running no queue. */
static PyObject *emulated_peek_at(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *addr;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On", &addr, &n)) return NULL;
    void *p = PyLong_AsVoidPtr(addr);
    if (p == NULL && PyErr_Occurred()) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    pyxbuf_error err;
    if (out != NULL && pyxbuf_emulated_peek(p, PyBytes_AS_STRING(out), (size_t)n, &err) < 0) {
        Py_DECREF(out);
        return (pyxbuf_error_raise(&err), NULL);
    }
    return out;
}

/* wait_and_peek(obj, consumer_stream, wait=True): acquire a device view,
 * pyxbuf_device_wait on consumer_stream when `wait`, run the consumer
 * stream, then read the view's bytes without any further waiting (a
 * consumer kernel on that stream). Returns the bytes. */
static PyObject *wait_and_peek(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    long long stream;
    int wait = 1;
    if (!PyArg_ParseTuple(args, "OL|p", &obj, &stream, &wait)) return NULL;
    pyxbuf_view v;
    if (pyxbuf_get(obj, &v, DEVICE_VIEW) < 0) return NULL;
    PyObject *out = NULL;
    pyxbuf_device dev;
    pyxbuf_backend b;
    pyxbuf_error err;
    int rc = wait ? pyxbuf_device_wait(&v, stream) : 0;
    if (rc == 0 && (pyxbuf_view_device(&v, &dev, &err) < 0 ||
                    pyxbuf_backend_get(dev.device_type, &b, &err) < 0 ||
                    b.synchronize(b.ctx, dev.device_id, stream, &err) < 0))
        rc = pyxbuf_error_raise(&err);
    if (rc == 0) out = PyBytes_FromStringAndSize(NULL, v.base.len);
    if (out != NULL &&
        pyxbuf_emulated_peek(v.base.buf, PyBytes_AS_STRING(out), (size_t)v.base.len, &err) < 0) {
        Py_CLEAR(out);
        pyxbuf_error_raise(&err);
    }
    pyxbuf_release(&v);
    return out;
}

/* cycle_stream(obj, flags, n, consumer_stream): n acquire/release pairs
 * through pyxbuf_get_stream. */
static PyObject *cycle_stream(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj, *stream_obj;
    int flags;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OinO", &obj, &flags, &n, &stream_obj)) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        pyxbuf_view v;
        if (acquire(obj, &v, flags, stream_obj) < 0) return NULL;
        pyxbuf_release(&v);
    }
    Py_RETURN_NONE;
}

static PyMethodDef bridge_methods[] = {
    {"bridge_view", (PyCFunction)(void (*)(void))bridge_view, METH_VARARGS | METH_KEYWORDS,
     "bridge_view(obj, flags=RECORDS_RO|DEVICE, consumer_stream=None) -> dict with device info"},
    {"emulated_stream", emulated_stream, METH_VARARGS, "emulated_stream(device_id=0) -> stream"},
    {"stream_sync", stream_sync, METH_VARARGS, "stream_sync((type, id), stream): run the stream"},
    {"emulated_peek_at", emulated_peek_at, METH_VARARGS,
     "emulated_peek_at(address, n) -> emulated-device bytes now, no wait"},
    {"wait_and_peek", wait_and_peek, METH_VARARGS,
     "wait_and_peek(obj, consumer_stream, wait=True) -> bytes read on that stream"},
    {"cycle_stream", cycle_stream, METH_VARARGS,
     "cycle_stream(obj, flags, n, consumer_stream): n pyxbuf_get_stream/release pairs"},
    {NULL, NULL, 0, NULL},
};

int pyxbuf_testext_add_bridges(PyObject *module) {
    if (PyModule_AddFunctions(module, bridge_methods) < 0 ||
        PyModule_AddIntConstant(module, "PYXBUF_STREAM_NONE", PYXBUF_STREAM_NONE) < 0 ||
        PyModule_AddIntConstant(module, "PYXBUF_DL_FLAG_READ_ONLY", PYXBUF_DL_FLAG_READ_ONLY) < 0)
        return -1;
    return 0;
}
