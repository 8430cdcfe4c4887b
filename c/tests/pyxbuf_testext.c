/* pyxbuf_testext.c -- a Python extension that exposes libpyxbuf to the pytest
 * suite until the Rust module exists, plus producers that only C can write
 * (a liar that breaks the protocol on purpose). It links the static library:
 * its own private copy, as a PyO3 extension would. */
#include <string.h>

#include "pyxbuf.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/emulated.h"
#include "testext_sync.h"

int pyxbuf_testext_add_format(PyObject *module);  /* testext_format.c */
int pyxbuf_testext_add_dlpack(PyObject *module);  /* testext_dlpack.c */
int pyxbuf_testext_add_bridges(PyObject *module); /* testext_bridges.c */
int pyxbuf_testext_add_pep(PyObject *module);     /* testext_pep.c */

/* ------------------------------------------------------------------------- */
/* Views as dicts                                                            */
/* ------------------------------------------------------------------------- */

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

static int put(PyObject *d, const char *key, PyObject *value) {
    if (value == NULL) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

/* The classic fields, exactly as the producer filled them. */
static PyObject *classic_dict(const Py_buffer *b) {
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    int ok = put(d, "buf", PyLong_FromVoidPtr(b->buf)) == 0 &&
             put(d, "obj", Py_NewRef(b->obj ? b->obj : Py_None)) == 0 &&
             put(d, "len", PyLong_FromSsize_t(b->len)) == 0 &&
             put(d, "itemsize", PyLong_FromSsize_t(b->itemsize)) == 0 &&
             put(d, "readonly", PyLong_FromLong(b->readonly)) == 0 &&
             put(d, "ndim", PyLong_FromLong(b->ndim)) == 0 &&
             put(d, "format", b->format ? PyUnicode_FromString(b->format) : Py_NewRef(Py_None)) == 0 &&
             put(d, "shape", ssize_tuple(b->shape, b->ndim)) == 0 &&
             put(d, "strides", ssize_tuple(b->strides, b->ndim)) == 0 &&
             put(d, "suboffsets", ssize_tuple(b->suboffsets, b->ndim)) == 0 &&
             put(d, "internal", PyLong_FromVoidPtr(b->internal)) == 0;
    if (!ok) Py_CLEAR(d);
    return d;
}

static PyObject *view_dict(const pyxbuf_view *v) {
    PyObject *d = classic_dict(&v->base);
    if (d == NULL) return NULL;
    int ok = put(d, "flags", PyLong_FromLong(v->flags)) == 0 &&
             put(d, "ext_flags", PyLong_FromLong(v->ext_flags)) == 0 &&
             put(d, "device", v->device ? PyUnicode_FromString(v->device) : Py_NewRef(Py_None)) == 0 &&
             put(d, "device_info", v->device_info ? PyLong_FromVoidPtr(v->device_info)
                                                  : Py_NewRef(Py_None)) == 0 &&
             put(d, "path", PyUnicode_FromString(pyxbuf_path_name(v->path))) == 0 &&
             put(d, "requested", PyLong_FromLong(v->requested)) == 0 &&
             put(d, "is_host", PyBool_FromLong(pyxbuf_view_is_host(v))) == 0;
    if (ok && v->device_info != NULL && v->device != NULL &&
        strcmp(v->device, PYXBUF_DEVICE_DLPACK) == 0) {
        const pyxbuf_device_info *info = v->device_info;
        ok = put(d, "device_type", PyLong_FromLong(info->device_type)) == 0 &&
             put(d, "device_id", PyLong_FromLong(info->device_id)) == 0;
    }
    if (!ok) Py_CLEAR(d);
    return d;
}

/* ------------------------------------------------------------------------- */
/* View: a held acquisition                                                  */
/* ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    pyxbuf_view view;
    atomic_int busy; /* testext_claim: one thread at a time uses or releases the view */
} ViewObject;

static PyTypeObject *View_type;

static void View_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    ViewObject *v = (ViewObject *)self;
    if (pyxbuf_view_is_acquired(&v->view)) pyxbuf_release(&v->view); /* exactly once */
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *View_release(PyObject *self, PyObject *unused) {
    (void)unused;
    ViewObject *v = (ViewObject *)self;
    if (testext_claim(&v->busy) < 0) return NULL;
    if (pyxbuf_view_is_acquired(&v->view)) pyxbuf_release(&v->view);
    testext_unclaim(&v->busy);
    Py_RETURN_NONE;
}

static PyObject *View_info(PyObject *self, PyObject *unused) {
    (void)unused;
    ViewObject *v = (ViewObject *)self;
    if (testext_claim(&v->busy) < 0) return NULL;
    PyObject *d = NULL;
    if (!pyxbuf_view_is_acquired(&v->view))
        PyErr_SetString(PyExc_ValueError, "view is released");
    else
        d = view_dict(&v->view);
    testext_unclaim(&v->busy);
    return d;
}

/* The held view's items in C order, by pyxbuf_copy_to_host (device views
 * too): reads the memory through this view, not a new acquisition, so a test
 * can check what a view still sees after its producer lost every other
 * reference. */
static PyObject *View_copy_to_host(PyObject *self, PyObject *unused) {
    (void)unused;
    ViewObject *v = (ViewObject *)self;
    if (testext_claim(&v->busy) < 0) return NULL;
    PyObject *out = NULL;
    if (!pyxbuf_view_is_acquired(&v->view)) {
        PyErr_SetString(PyExc_ValueError, "view is released");
    } else {
        out = PyBytes_FromStringAndSize(NULL, v->view.base.len);
        if (out != NULL &&
            pyxbuf_copy_to_host(&v->view, PyBytes_AS_STRING(out), (size_t)v->view.base.len) < 0)
            Py_CLEAR(out);
    }
    testext_unclaim(&v->busy);
    return out;
}

static PyObject *View_acquired(PyObject *self, void *closure) {
    (void)closure;
    ViewObject *v = (ViewObject *)self;
    if (testext_claim(&v->busy) < 0) return NULL;
    int acquired = pyxbuf_view_is_acquired(&v->view);
    testext_unclaim(&v->busy);
    return PyBool_FromLong(acquired);
}

static PyMethodDef View_methods[] = {
    {"release", View_release, METH_NOARGS, "Release the view (a second call is a no-op)."},
    {"info", View_info, METH_NOARGS, "The view's classic and extended fields as a dict."},
    {"copy_to_host", View_copy_to_host, METH_NOARGS,
     "The held view's items in C order as bytes (pyxbuf_copy_to_host)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef View_getset[] = {
    {"acquired", View_acquired, NULL, "Whether the view is held.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot View_slots[] = {
    {Py_tp_dealloc, (void *)View_dealloc},
    {Py_tp_methods, View_methods},
    {Py_tp_getset, View_getset},
    {0, NULL},
};

static PyType_Spec View_spec = {
    .name = "_pyxbuf_testext.View",
    .basicsize = (int)sizeof(ViewObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = View_slots,
};

static PyObject *acquire(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags = PyBUF_FULL_RO;
    if (!PyArg_ParseTuple(args, "O|i", &obj, &flags)) return NULL;
    ViewObject *v = PyObject_New(ViewObject, View_type);
    if (v == NULL) return NULL;
    memset(&v->view, 0, sizeof v->view);
    atomic_init(&v->busy, 0);
    if (pyxbuf_get(obj, &v->view, flags) < 0) {
        Py_DECREF(v);
        return NULL;
    }
    return (PyObject *)v;
}

/* ------------------------------------------------------------------------- */
/* One-shot functions                                                        */
/* ------------------------------------------------------------------------- */

static PyObject *inspect(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags = PyBUF_FULL_RO, dirty = 0;
    if (!PyArg_ParseTuple(args, "O|ip", &obj, &flags, &dirty)) return NULL;
    pyxbuf_view view;
    /* dirty: a view full of garbage, as a consumer's stack may hold */
    memset(&view, dirty ? 0xAB : 0, sizeof view);
    if (pyxbuf_get(obj, &view, flags) < 0) return NULL;
    PyObject *d = view_dict(&view);
    pyxbuf_release(&view);
    return d;
}

/* fill_and_getbuffer(obj, flags): PyObject_GetBuffer straight into a
 * pyxbuf_view full of 0xAB bytes, as no pyxbuf consumer would call it, then
 * release. Returns the extended fields as the producer left them:
 * (flags, ext_flags, device set, device_info set). */
static PyObject *fill_and_getbuffer(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
    pyxbuf_view view;
    memset(&view, 0xAB, sizeof view);
    if (PyObject_GetBuffer(obj, &view.base, flags) < 0) return NULL;
    PyObject *out = Py_BuildValue("(iiii)", (int)view.flags, (int)view.ext_flags,
                                  view.device != NULL, view.device_info != NULL);
    PyBuffer_Release(&view.base);
    return out;
}

/* inspect() after dropping the type's cache entry: the uncached path. */
void pyxbuf__type_cache_forget(PyTypeObject *type); /* testext_hooks.c */
static PyObject *inspect_uncached(PyObject *mod, PyObject *args) {
    PyObject *obj;
    int flags = PyBUF_FULL_RO;
    if (!PyArg_ParseTuple(args, "O|i", &obj, &flags)) return NULL;
    pyxbuf__type_cache_forget(Py_TYPE(obj));
    return inspect(mod, args);
}

/* What CPython makes of a pyxbuf view: PyMemoryView_FromBuffer of it, read
 * back as (ndim, shape, strides, tobytes()). A view whose fields disagree
 * (ndim 2 with a NULL shape) crashes here, as it would in any consumer. */
static PyObject *memoryview_of(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags = PyBUF_FULL_RO;
    if (!PyArg_ParseTuple(args, "O|i", &obj, &flags)) return NULL;
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, flags) < 0) return NULL;
    PyObject *mv = PyMemoryView_FromBuffer(&view.base), *r = NULL;
    if (mv != NULL) {
        PyObject *ndim = PyObject_GetAttrString(mv, "ndim");
        PyObject *shape = PyObject_GetAttrString(mv, "shape");
        PyObject *strides = PyObject_GetAttrString(mv, "strides");
        PyObject *bytes = PyObject_CallMethod(mv, "tobytes", NULL);
        if (ndim && shape && strides && bytes)
            r = PyTuple_Pack(4, ndim, shape, strides, bytes);
        Py_XDECREF(ndim);
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        Py_XDECREF(bytes);
        Py_DECREF(mv); /* the only reference: gone before the view is released */
    }
    pyxbuf_release(&view);
    return r;
}

static PyObject *classic(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags = PyBUF_FULL_RO;
    if (!PyArg_ParseTuple(args, "O|i", &obj, &flags)) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, flags) < 0) return NULL;
    PyObject *d = classic_dict(&b);
    PyBuffer_Release(&b);
    return d;
}

static PyObject *cycle(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "Oin", &obj, &flags, &n)) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        pyxbuf_view view;
        if (pyxbuf_get(obj, &view, flags) < 0) return NULL;
        pyxbuf_release(&view);
    }
    Py_RETURN_NONE;
}

/* Acquire, then release twice; report whether the view was held after each
 * step and that the second release changed nothing. */
static PyObject *release_twice(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags = PyBUF_FULL_RO;
    if (!PyArg_ParseTuple(args, "O|i", &obj, &flags)) return NULL;
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, flags) < 0) return NULL;
    int held = pyxbuf_view_is_acquired(&view);
    pyxbuf_release(&view);
    int after_first = pyxbuf_view_is_acquired(&view);
    pyxbuf_view snapshot = view;
    pyxbuf_release(&view);
    int unchanged = memcmp(&snapshot, &view, sizeof view) == 0;
    return Py_BuildValue("(iii)", held, after_first, unchanged);
}

static PyObject *check_supports(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
    int rc = pyxbuf_check_supports(obj, flags);
    if (rc < 0) return NULL;
    return PyBool_FromLong(rc);
}

static PyObject *set_supported_flags(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *type;
    int flags;
    if (!PyArg_ParseTuple(args, "O!i", &PyType_Type, &type, &flags)) return NULL;
    if (pyxbuf_type_set_supported_flags((PyTypeObject *)type, flags) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *type_supported_flags(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *type;
    if (!PyArg_ParseTuple(args, "O!", &PyType_Type, &type)) return NULL;
    int32_t mask;
    if (pyxbuf_type_supported_flags((PyTypeObject *)type, &mask) < 0) return NULL;
    return PyLong_FromLong(mask);
}

static int shape_from_sequence(PyObject *seq, Py_ssize_t *shape, int32_t *ndim) {
    PyObject *fast = PySequence_Fast(seq, "shape must be a sequence of ints");
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > PYXBUF_MAX_NDIM) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "too many dimensions");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        shape[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (shape[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    *ndim = (int32_t)n;
    return 0;
}

/* None = host, or a (device_type, device_id) tuple. */
static int device_arg(PyObject *arg, pyxbuf_device *out, const pyxbuf_device **ptr) {
    *ptr = NULL;
    if (arg == NULL || arg == Py_None) return 0;
    if (!PyArg_ParseTuple(arg, "ii", &out->device_type, &out->device_id)) return -1;
    *ptr = out;
    return 0;
}

static PyObject *exporter(PyObject *mod, PyObject *args, PyObject *kwargs) {
    (void)mod;
    static char *kwlist[] = {"format", "shape", "readonly", "device", NULL};
    const char *format;
    PyObject *shape_obj, *device_obj = NULL;
    int readonly = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|pO", kwlist, &format, &shape_obj, &readonly,
                                     &device_obj))
        return NULL;
    Py_ssize_t shape[PYXBUF_MAX_NDIM];
    int32_t ndim;
    pyxbuf_device device;
    const pyxbuf_device *where;
    if (shape_from_sequence(shape_obj, shape, &ndim) < 0 || device_arg(device_obj, &device, &where) < 0)
        return NULL;
    return pyxbuf_exporter_new(format, ndim, shape, readonly, where);
}

/* --- the emulated device ------------------------------------------------ */

static int raise_err(const pyxbuf_error *err) { return pyxbuf_error_raise(err); }

/* emulated_write(exporter, data, offset=0, record=True): a producer "kernel"
 * on its own stream writes data into the exporter's device memory; with
 * record, the exporter gets the event recorded after it. */
static PyObject *emulated_write(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    Py_buffer data;
    Py_ssize_t offset = 0;
    int record = 1;
    if (!PyArg_ParseTuple(args, "Oy*|np", &obj, &data, &offset, &record)) return NULL;
    pyxbuf_device d;
    char *base = pyxbuf_exporter_data(obj);
    pyxbuf_error err;
    int64_t stream = 0;
    void *event = NULL;
    pyxbuf_backend b;
    int rc = base && pyxbuf_exporter_device(obj, &d) == 0 ? 0 : -1;
    if (rc == 0 && (pyxbuf_emulated_stream_create(d.device_id, &stream, &err) < 0 ||
                    pyxbuf_emulated_enqueue_write(d.device_id, stream, base + offset, data.buf,
                                                  (size_t)data.len, &err) < 0 ||
                    (record && (pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, &err) < 0 ||
                                b.event_record(b.ctx, d.device_id, stream, &event, &err) < 0))))
        rc = raise_err(&err);
    PyBuffer_Release(&data);
    if (rc == 0 && record && pyxbuf_exporter_set_event(obj, event, stream) < 0) rc = -1;
    if (rc < 0) return NULL;
    return PyLong_FromLongLong(stream);
}

static PyObject *emulated_new_stream(PyObject *mod, PyObject *arg) {
    (void)mod;
    pyxbuf_error err;
    int64_t stream = 0;
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (pyxbuf_emulated_stream_create((int32_t)id, &stream, &err) < 0) return (raise_err(&err), NULL);
    return PyLong_FromLongLong(stream);
}

static PyObject *emulated_destroy_stream(PyObject *mod, PyObject *arg) {
    (void)mod;
    pyxbuf_error err;
    long long stream = PyLong_AsLongLong(arg);
    if (stream == -1 && PyErr_Occurred()) return NULL;
    if (pyxbuf_emulated_stream_destroy(stream, &err) < 0) return (raise_err(&err), NULL);
    Py_RETURN_NONE;
}

static PyObject *emulated_pending(PyObject *mod, PyObject *args) {
    (void)mod;
    int id;
    long long stream;
    if (!PyArg_ParseTuple(args, "iL", &id, &stream)) return NULL;
    return PyLong_FromLongLong(pyxbuf_emulated_pending(id, stream));
}

/* What a consumer that does not wait would read: the device bytes now. */
static PyObject *emulated_peek(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On", &obj, &n)) return NULL;
    void *base = pyxbuf_exporter_data(obj);
    if (base == NULL) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    pyxbuf_error err;
    if (out != NULL && pyxbuf_emulated_peek(base, PyBytes_AS_STRING(out), (size_t)n, &err) < 0) {
        Py_DECREF(out);
        return (raise_err(&err), NULL);
    }
    return out;
}

static PyObject *emulated_live_allocations(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return PyLong_FromLongLong(pyxbuf_emulated_live_allocations());
}

/* --- the device pool -------------------------------------------------------- */

/* emulated_pool_stats(device_id=0) -> pyxbuf_emulated_pool_stats_get as a dict. */
static PyObject *emulated_pool_stats(PyObject *mod, PyObject *args) {
    (void)mod;
    int id = 0;
    if (!PyArg_ParseTuple(args, "|i", &id)) return NULL;
    pyxbuf_emulated_pool_stats st;
    pyxbuf_emulated_pool_stats_get(id, &st);
    return Py_BuildValue("{sKsKsKsKsK}", "reserved_bytes", (unsigned long long)st.reserved_bytes,
                         "cached_bytes", (unsigned long long)st.cached_bytes, "allocations",
                         (unsigned long long)st.allocations, "reuses",
                         (unsigned long long)st.reuses, "releases",
                         (unsigned long long)st.releases);
}

/* device_pool_trim((device_type, device_id), keep_bytes): the backend's pool_trim. */
static PyObject *device_pool_trim(PyObject *mod, PyObject *args) {
    (void)mod;
    int type, id;
    unsigned long long keep;
    if (!PyArg_ParseTuple(args, "(ii)K", &type, &id, &keep)) return NULL;
    pyxbuf_backend b;
    pyxbuf_error err;
    int rc = pyxbuf_backend_get(type, &b, &err);
    if (rc == 0 && b.pool_trim == NULL) {
        PyErr_Format(PyExc_RuntimeError, "backend '%s' has no device pool", b.name);
        return NULL;
    }
    if (rc == 0) rc = b.pool_trim(b.ctx, id, keep, &err);
    if (rc < 0) return (raise_err(&err), NULL);
    Py_RETURN_NONE;
}

/* emulated_enqueue_write(address, stream, data, device_id=0): a "kernel" on
 * `stream` that writes data at the device address when the stream runs. */
static PyObject *emulated_enqueue_write(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *addr;
    long long stream;
    Py_buffer data;
    int id = 0;
    if (!PyArg_ParseTuple(args, "OLy*|i", &addr, &stream, &data, &id)) return NULL;
    void *p = PyLong_AsVoidPtr(addr);
    pyxbuf_error err;
    int rc = p == NULL && PyErr_Occurred() ? -1 : 0;
    if (rc == 0 && pyxbuf_emulated_enqueue_write(id, stream, p, data.buf, (size_t)data.len, &err) < 0)
        rc = raise_err(&err);
    PyBuffer_Release(&data);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* Dereference the exporter's first byte in a child process; return the
 * signal that ended the child (0 if it read the byte and exited). */
static PyObject *deref_in_child(PyObject *mod, PyObject *arg) {
    (void)mod;
    volatile char *p = pyxbuf_exporter_data(arg);
    if (p == NULL) return NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        char c = *p; /* the host touching device memory */
        _exit(c == 0x7f ? 3 : 0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* --- device semantics ----------------------------------------------------- */

#define VIEW_FLAGS (PyBUF_RECORDS_RO | PYXBUF_DEVICE)

static PyObject *copy_to_host(PyObject *mod, PyObject *obj) {
    (void)mod;
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, VIEW_FLAGS) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, view.base.len);
    if (out != NULL && pyxbuf_copy_to_host(&view, PyBytes_AS_STRING(out), (size_t)view.base.len) < 0)
        Py_CLEAR(out);
    pyxbuf_release(&view);
    return out;
}

static PyObject *to_device(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj, *device_obj;
    long long stream = PYXBUF_STREAM_DEFAULT;
    int flags = VIEW_FLAGS;
    if (!PyArg_ParseTuple(args, "OO|Li", &obj, &device_obj, &stream, &flags)) return NULL;
    pyxbuf_device device;
    const pyxbuf_device *where;
    if (device_arg(device_obj, &device, &where) < 0) return NULL;
    if (where == NULL) {
        device.device_type = PYXBUF_DL_CPU;
        device.device_id = 0;
    }
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, flags) < 0) return NULL;
    PyObject *out = pyxbuf_to_device(&view, &device, stream);
    pyxbuf_release(&view);
    return out;
}

/* --- staging: the transfer configuration and the pinned pool -------------- */

static int put_u64(PyObject *d, const char *key, unsigned long long v) {
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, key, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static PyObject *config_dict(const pyxbuf_transfer_config *c) {
    PyObject *d = PyDict_New();
    if (d == NULL || put_u64(d, "enabled", (unsigned long long)c->enabled) < 0 ||
        put_u64(d, "threads", (unsigned long long)c->threads) < 0 ||
        put_u64(d, "buffers", (unsigned long long)c->buffers) < 0 ||
        put_u64(d, "threshold", c->threshold) < 0 || put_u64(d, "chunk", c->chunk) < 0 ||
        put_u64(d, "pool_cap", c->pool_cap) < 0 ||
        put_u64(d, "device_pool_off", (unsigned long long)c->device_pool_off) < 0 ||
        put_u64(d, "device_pool_shareable", (unsigned long long)c->device_pool_shareable) < 0 ||
        put_u64(d, "device_pool_release_threshold", c->device_pool_release_threshold) < 0)
        Py_CLEAR(d);
    return d;
}

/* transfer_config(**fields) -> the configuration before the call; with
 * fields, pyxbuf_transfer_config_set of it with those replaced. */
static PyObject *transfer_config(PyObject *mod, PyObject *args, PyObject *kwargs) {
    (void)mod;
    static char *names[] = {"enabled", "threads", "buffers", "threshold", "chunk", "pool_cap",
                            "device_pool_off", "device_pool_release_threshold",
                            "device_pool_shareable", NULL};
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    PyObject *before = config_dict(&c);
    int enabled = c.enabled, threads = c.threads, buffers = c.buffers, off = c.device_pool_off;
    unsigned long long threshold = c.threshold, chunk = c.chunk, cap = c.pool_cap;
    unsigned long long keep = c.device_pool_release_threshold;
    int shareable = c.device_pool_shareable;
    if (before == NULL ||
        !PyArg_ParseTupleAndKeywords(args, kwargs, "|iiiKKKiKi", names, &enabled, &threads,
                                     &buffers, &threshold, &chunk, &cap, &off, &keep,
                                     &shareable)) {
        Py_XDECREF(before);
        return NULL;
    }
    pyxbuf_error err;
    if (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0) {
        if (pyxbuf_transfer_config_check(&err) == 0) return before; /* a bad environment: */
        Py_DECREF(before);
        PyErr_SetString(PyExc_ValueError, err.message);
        return NULL;
    }
    c.enabled = enabled;
    c.threads = threads;
    c.buffers = buffers;
    c.threshold = threshold;
    c.chunk = chunk;
    c.pool_cap = cap;
    c.device_pool_off = off;
    c.device_pool_release_threshold = keep;
    c.device_pool_shareable = shareable;
    if (pyxbuf_transfer_config_set(&c, &err) < 0) {
        Py_DECREF(before);
        PyErr_SetString(PyExc_ValueError, err.message);
        return NULL;
    }
    return before;
}

static PyObject *pinned_pool_stats(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st);
    PyObject *d = PyDict_New();
    if (d == NULL || put_u64(d, "held_bytes", st.held_bytes) < 0 ||
        put_u64(d, "used_bytes", st.used_bytes) < 0 ||
        put_u64(d, "allocations", st.allocations) < 0 || put_u64(d, "reuses", st.reuses) < 0 ||
        put_u64(d, "fill_threads", st.fill_threads) < 0 ||
        put_u64(d, "background_allocations", st.background_allocations) < 0 ||
        put_u64(d, "background_pending", st.background_pending) < 0 ||
        put_u64(d, "emulated_host_blocks",
                (unsigned long long)pyxbuf_emulated_live_host_allocations()) < 0 ||
        put_u64(d, "emulated_host_allocations_with_gil",
                (unsigned long long)pyxbuf_emulated_host_allocations_with_gil()) < 0)
        Py_CLEAR(d);
    return d;
}

static PyObject *pinned_pool_trim(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    pyxbuf_pinned_pool_trim();
    Py_RETURN_NONE;
}

static PyObject *emulated_fail_copies_after(PyObject *mod, PyObject *arg) {
    (void)mod;
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    pyxbuf_emulated_fail_copies_after(n);
    Py_RETURN_NONE;
}

/* host_address(obj) -> the address of obj's host buffer (to tell pooled
 * page-locked results from others). */
static PyObject *host_address(PyObject *mod, PyObject *obj) {
    (void)mod;
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyLong_FromVoidPtr(view.base.buf);
    pyxbuf_release(&view);
    return out;
}

static PyObject *same_device(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *a, *b;
    if (!PyArg_ParseTuple(args, "OO", &a, &b)) return NULL;
    pyxbuf_view va, vb;
    if (pyxbuf_get(a, &va, VIEW_FLAGS) < 0) return NULL;
    if (pyxbuf_get(b, &vb, VIEW_FLAGS) < 0) {
        pyxbuf_release(&va);
        return NULL;
    }
    int rc = pyxbuf_same_device(&va, &vb);
    pyxbuf_release(&vb);
    pyxbuf_release(&va);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *view_device(PyObject *mod, PyObject *obj) {
    (void)mod;
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, VIEW_FLAGS) < 0) return NULL;
    pyxbuf_device d;
    pyxbuf_error err;
    int rc = pyxbuf_view_device(&view, &d, &err);
    pyxbuf_release(&view);
    if (rc < 0) return (raise_err(&err), NULL);
    return Py_BuildValue("(ii)", d.device_type, d.device_id);
}

/* host_only(obj, op): run a host-only operation on a PYXBUF_DEVICE view;
 * op is "item", "memoryview" or "contiguous". */
static PyObject *host_only(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    const char *op;
    if (!PyArg_ParseTuple(args, "Os", &obj, &op)) return NULL;
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, VIEW_FLAGS) < 0) return NULL;
    PyObject *out = NULL;
    if (strcmp(op, "item") == 0) {
        Py_ssize_t zeros[PYXBUF_MAX_NDIM] = {0};
        void *p = pyxbuf_view_item_ptr(&view, zeros);
        out = p ? PyBytes_FromStringAndSize(p, view.base.itemsize) : NULL;
    } else if (strcmp(op, "memoryview") == 0) {
        out = pyxbuf_view_memoryview(&view);
    } else {
        out = PyBytes_FromStringAndSize(NULL, view.base.len);
        char order = strcmp(op, "fortran") == 0 ? 'F' : 'C';
        if (out && pyxbuf_view_copy_contiguous(&view, PyBytes_AS_STRING(out),
                                               (size_t)view.base.len, order) < 0)
            Py_CLEAR(out);
    }
    pyxbuf_release(&view);
    return out;
}

static PyObject *exporter_poke(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    Py_ssize_t index;
    int value;
    if (!PyArg_ParseTuple(args, "Oni", &obj, &index, &value)) return NULL;
    unsigned char *data = pyxbuf_exporter_data(obj);
    if (data == NULL) return NULL;
    data[index] = (unsigned char)value;
    Py_RETURN_NONE;
}

/* (address of the shared table, borrows live, installer's version). */
static PyObject *shared_info(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    const pyxbuf_shared_api *api = pyxbuf_shared_api_get();
    if (api == NULL) return NULL;
    return Py_BuildValue("(NLs)", PyLong_FromVoidPtr((void *)api), (long long)api->borrow_live(),
                         api->installer_version);
}

/* This copy's pyxbuf_item_type_error(): the process's pyxbuf.ItemTypeError. */
static PyObject *item_type_error(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return Py_XNewRef(pyxbuf_item_type_error());
}

/* expect_format(obj, format): a C consumer of items of `format`: True when
 * obj's items are of it, else the item-type refusal pyxbuf.h documents
 * (pyxbuf.ItemTypeError naming both formats); the view released either way. */
static PyObject *expect_format(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    const char *want;
    if (!PyArg_ParseTuple(args, "Os", &obj, &want)) return NULL;
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, PyBUF_RECORDS_RO) < 0) return NULL;
    const char *have = view.base.format != NULL ? view.base.format : "B";
    PyObject *result = Py_True;
    if (strcmp(have, want) != 0) {
        PyObject *cls = pyxbuf_item_type_error();
        if (cls != NULL)
            PyErr_Format(cls, "expect_format: the buffer of '%.200s' holds items of format "
                              "'%s', expected format '%s'; convert it first",
                         Py_TYPE(obj)->tp_name, have, want);
        result = NULL;
    }
    pyxbuf_release(&view);
    return Py_XNewRef(result);
}

/* pyxbuf_dtype_register / _unregister of a fixed-size custom type. */
static PyObject *dtype_register(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *key;
    long long itemsize, alignment;
    if (!PyArg_ParseTuple(args, "sLL", &key, &itemsize, &alignment)) return NULL;
    pyxbuf_dtype_spec spec = {.size = sizeof spec, .key = key, .itemsize = itemsize,
                              .alignment = alignment};
    int rc = pyxbuf_dtype_register(&spec);
    if (rc < 0) return PyErr_Format(PyExc_ValueError, "pyxbuf_dtype_register('%s'): %d", key, rc);
    Py_RETURN_NONE;
}

static PyObject *dtype_unregister(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *key;
    if (!PyArg_ParseTuple(args, "s", &key)) return NULL;
    int rc = pyxbuf_dtype_unregister(key);
    if (rc < 0) return PyErr_Format(PyExc_ValueError, "pyxbuf_dtype_unregister('%s'): %d", key, rc);
    Py_RETURN_NONE;
}

static PyObject *versions(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    return Py_BuildValue("(Is)", pyxbuf_abi_version(), pyxbuf_version_string());
}

/* ------------------------------------------------------------------------- */
/* Liar: a producer that breaks the extended protocol in a chosen way        */
/* ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    int mode;
    atomic_int last_flags; /* the request flags of the last getbuffer call */
    testext_counter gets, releases;
    Py_ssize_t shape;
    unsigned char data[16];
    /* "recorder": the extended fields as the last getbuffer call found them */
    int32_t entry_flags, entry_ext_flags;
    int entry_device_set, entry_device_info_set;
} LiarObject;

static const char *const liar_modes[] = {
    "honest",               /* 0: fills the view correctly, CPU memory */
    "unrequested_flag",     /* 1: sets PYXBUF_TEMPORARY in flags though not asked */
    "device_without_flag",  /* 2: sets device but leaves the PYXBUF_DEVICE bit clear */
    "null_device_with_bit", /* 3: sets the PYXBUF_DEVICE bit with a NULL device */
    "cpu_device",           /* 4: names the reserved "cpu" device */
    "unrequested_grant",    /* 5: grants EXT_EXCLUSIVE though only SHARED was asked */
    "tracked_grant",        /* 6: honest: marks its shared grant EXT_TRACKED (a wrapper of tracked memory) */
    "readonly_for_writable",/* 7: hands out read-only memory for a WRITABLE request */
    "device_unrequested",   /* 8: fills device fields without PYXBUF_DEVICE asked */
    "wrong_device_pointer", /* 9: claims emulated device 0 for host memory */
    "ndim_65",              /* 10: ndim above PYXBUF_MAX_NDIM */
    "ndim_negative",        /* 11: ndim -1 */
    "len_disagrees",        /* 12: len 15 for shape (16,) of 1-byte items */
    "itemsize_vs_format",   /* 13: format "i" with itemsize 1 */
    "negative_shape",       /* 14: shape (-16,) */
    "itemsize_zero",        /* 15: itemsize 0 */
    "null_shape",           /* 16: shape NULL though PyBUF_ND was asked */
    "raises",               /* 17: getbuffer raises ValueError */
    "fails_silently",       /* 18: getbuffer returns -1 with no exception set */
    "shape_overflows",      /* 19: shape (PY_SSIZE_T_MAX,) of 2-byte items, len 16 */
    "ndim_65_device",       /* 20: ndim 65 and a device view (the device check walks shape) */
    "grant_without_flag",   /* 21: EXT_SHARED in ext_flags, no BORROW bit in flags */
    "device_info_without_flag", /* 22: device_info set, device NULL, PYXBUF_DEVICE clear */
    "device_not_utf8",      /* 23: a device identifier with a stray continuation byte */
    "device_info_too_small",/* 24: pyxbuf.dlpack info whose size field is 8 */
    "device_empty",         /* 25: the device identifier "" */
    "shared_for_exclusive", /* 26: honest: answers BORROW_EXCLUSIVE with the weaker EXT_SHARED */
    "tracked_alone",        /* 27: EXT_TRACKED with BORROW_SHARED in flags but no grant */
    "recorder",             /* 28: honest; records the extended fields it finds on entry
                               (called through pyxbuf only: it reads past a Py_buffer) */
    "foreign_device",       /* 29: honest: names a device of its own, "my_accel:0", which no
                               pyxbuf backend knows (its bytes are host memory) */
    "bytes_owner",          /* 30: read-only view of its own data naming a new bytes object
                               (a copy) as view->obj: memory outside the bytes it names */
    NULL,
};

static PyTypeObject *Liar_type;

static PyObject *Liar_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    (void)kwargs;
    const char *mode;
    if (!PyArg_ParseTuple(args, "s", &mode)) return NULL;
    int m = -1;
    for (int i = 0; liar_modes[i] != NULL; i++)
        if (strcmp(liar_modes[i], mode) == 0) m = i;
    if (m < 0) {
        PyErr_Format(PyExc_ValueError, "unknown liar mode '%s'", mode);
        return NULL;
    }
    LiarObject *self = (LiarObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->mode = m;
    self->shape = (Py_ssize_t)sizeof self->data;
    return (PyObject *)self;
}

static pyxbuf_device_info liar_info = {sizeof(pyxbuf_device_info), PYXBUF_DL_EXT_DEV, 0, 0,
                                       NULL, 0, 0, {0, 0, 0}};
static pyxbuf_device_info liar_small_info = {8, PYXBUF_DL_EXT_DEV, 0, 0, NULL, 0, 0, {0, 0, 0}};

static int Liar_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    LiarObject *l = (LiarObject *)self;
    pyxbuf_view *x = (pyxbuf_view *)view; /* valid: pyxbuf passes a pyxbuf_view */
    atomic_store(&l->last_flags, flags);
    if (l->mode == 28) {
        l->entry_flags = x->flags;
        l->entry_ext_flags = x->ext_flags;
        l->entry_device_set = x->device != NULL;
        l->entry_device_info_set = x->device_info != NULL;
    }
    view->obj = Py_NewRef(self);
    view->buf = l->data;
    view->len = l->shape;
    view->itemsize = 1;
    view->readonly = l->mode == 7;
    view->ndim = 1;
    view->format = (flags & PyBUF_FORMAT) ? "B" : NULL;
    view->shape = (flags & PyBUF_ND) ? &l->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? &view->itemsize : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    static Py_ssize_t negative = -16, huge = (Py_ssize_t)(((size_t)-1) >> 1);
    switch (l->mode) {
    case 10: view->ndim = 65; break;
    case 11: view->ndim = -1; break;
    case 12: view->len = l->shape - 1; break;
    case 13: view->format = (flags & PyBUF_FORMAT) ? "i" : NULL; break;
    case 14: view->shape = (flags & PyBUF_ND) ? &negative : NULL; break;
    case 15: view->itemsize = 0; break;
    case 16: view->shape = NULL; break;
    case 17:
        Py_CLEAR(view->obj);
        testext_count(&l->gets);
        PyErr_SetString(PyExc_ValueError, "the liar refuses");
        return -1;
    case 18:
        Py_CLEAR(view->obj);
        testext_count(&l->gets);
        return -1;
    case 19:
        view->shape = (flags & PyBUF_ND) ? &huge : NULL;
        view->itemsize = 2;
        view->format = (flags & PyBUF_FORMAT) ? "H" : NULL;
        break;
    case 20:
        view->ndim = 65;
        x->flags |= PYXBUF_DEVICE;
        x->device = PYXBUF_DEVICE_DLPACK;
        x->device_info = &liar_info;
        break;
    case 1: x->flags |= PYXBUF_TEMPORARY; break;
    case 2: x->device = PYXBUF_DEVICE_DLPACK; x->device_info = &liar_info; break;
    case 3: x->flags |= PYXBUF_DEVICE; break;
    case 4: x->flags |= PYXBUF_DEVICE; x->device = PYXBUF_DEVICE_CPU; break;
    case 5: x->flags |= PYXBUF_BORROW_SHARED; x->ext_flags |= PYXBUF_EXT_EXCLUSIVE; break;
    case 6: x->flags |= PYXBUF_BORROW_SHARED; x->ext_flags |= PYXBUF_EXT_SHARED | PYXBUF_EXT_TRACKED; break;
    case 8:
    case 9: x->flags |= PYXBUF_DEVICE; x->device = PYXBUF_DEVICE_DLPACK; x->device_info = &liar_info; break;
    case 21: x->ext_flags |= PYXBUF_EXT_SHARED; break;
    case 27: x->flags |= PYXBUF_BORROW_SHARED; x->ext_flags |= PYXBUF_EXT_TRACKED; break;
    case 22: x->device_info = &liar_info; break;
    case 23: x->flags |= PYXBUF_DEVICE; x->device = "liar.dev\x80ice"; break;
    case 24: x->flags |= PYXBUF_DEVICE; x->device = PYXBUF_DEVICE_DLPACK; x->device_info = &liar_small_info; break;
    case 25: x->flags |= PYXBUF_DEVICE; x->device = ""; break;
    case 29:
        if (flags & PYXBUF_DEVICE) {
            x->flags |= PYXBUF_DEVICE;
            x->device = "my_accel:0";
        }
        break;
    case 30:
        Py_SETREF(view->obj, PyBytes_FromStringAndSize((const char *)l->data, l->shape));
        view->readonly = 1;
        break;
    case 26:
        if (flags & PYXBUF_BORROW_EXCLUSIVE) {
            x->flags |= PYXBUF_BORROW_EXCLUSIVE;
            x->ext_flags |= PYXBUF_EXT_SHARED;
        }
        break;
    default: break;
    }
    testext_count(&l->gets);
    return 0;
}

static void Liar_releasebuffer(PyObject *self, Py_buffer *view) {
    (void)view;
    testext_count(&((LiarObject *)self)->releases);
}

static void Liar_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *Liar_last_flags(PyObject *self, void *closure) {
    (void)closure;
    return PyLong_FromLong(atomic_load(&((LiarObject *)self)->last_flags));
}

static PyObject *Liar_entry(PyObject *self, void *closure) {
    (void)closure;
    LiarObject *l = (LiarObject *)self;
    return Py_BuildValue("(iiii)", (int)l->entry_flags, (int)l->entry_ext_flags,
                         l->entry_device_set, l->entry_device_info_set);
}

static PyGetSetDef Liar_getset[] = {
    {"entry", Liar_entry, NULL,
     "recorder: (flags, ext_flags, device set, device_info set) found on entry", NULL},
    TESTEXT_COUNTER_GETSET(LiarObject, gets, "getbuffer calls"),
    {"last_flags", Liar_last_flags, NULL, "request flags of the last getbuffer call", NULL},
    TESTEXT_COUNTER_GETSET(LiarObject, releases, "releasebuffer calls"),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Liar_slots[] = {
    {Py_tp_new, (void *)Liar_new},
    {Py_tp_dealloc, (void *)Liar_dealloc},
    {Py_tp_getset, Liar_getset},
    {Py_bf_getbuffer, (void *)Liar_getbuffer},
    {Py_bf_releasebuffer, (void *)Liar_releasebuffer},
    {0, NULL},
};

static PyType_Spec Liar_spec = {
    .name = "_pyxbuf_testext.Liar",
    .basicsize = (int)sizeof(LiarObject),
    /* BASETYPE: a Python subclass with __pyxbuf_supported_flags__ = 0 tells
     * the same lies through the classic path. */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = Liar_slots,
};

/* ------------------------------------------------------------------------- */
/* Module                                                                    */
/* ------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"acquire", acquire, METH_VARARGS, "acquire(obj, flags) -> View held until release()."},
    {"inspect", inspect, METH_VARARGS,
     "inspect(obj, flags, dirty=False) -> dict of the pyxbuf view (dirty: fill it with 0xAB "
     "before pyxbuf_get)."},
    {"classic", classic, METH_VARARGS, "classic(obj, flags) -> dict from PyObject_GetBuffer."},
    {"fill_and_getbuffer", fill_and_getbuffer, METH_VARARGS,
     "fill_and_getbuffer(obj, flags) -> the extended fields after PyObject_GetBuffer into a "
     "view full of 0xAB"},
    {"inspect_uncached", inspect_uncached, METH_VARARGS,
     "inspect() with obj's type first dropped from pyxbuf's type cache."},
    {"memoryview_of", memoryview_of, METH_VARARGS,
     "memoryview_of(obj, flags) -> (ndim, shape, strides, bytes) of PyMemoryView_FromBuffer."},
    {"cycle", cycle, METH_VARARGS, "cycle(obj, flags, n): n pyxbuf_get/pyxbuf_release pairs."},
    {"release_twice", release_twice, METH_VARARGS, "Acquire, release twice; report states."},
    {"check_supports", check_supports, METH_VARARGS, "pyxbuf_check_supports(obj, flags)."},
    {"set_supported_flags", set_supported_flags, METH_VARARGS, "Set a type's supported flags."},
    {"type_supported_flags", type_supported_flags, METH_VARARGS, "A type's supported mask."},
    {"exporter", (PyCFunction)(void (*)(void))exporter, METH_VARARGS | METH_KEYWORDS,
     "exporter(format, shape, readonly=False) -> pyxbuf.Exporter"},
    {"emulated_write", emulated_write, METH_VARARGS,
     "emulated_write(exporter, data, offset=0, record=True) -> producer stream"},
    {"emulated_destroy_stream", emulated_destroy_stream, METH_O, "Destroy a emulated stream."},
    {"emulated_new_stream", emulated_new_stream, METH_O, "A new stream on emulated device id."},
    {"emulated_pending", emulated_pending, METH_VARARGS, "emulated_pending(device_id, stream)"},
    {"emulated_peek", emulated_peek, METH_VARARGS, "emulated_peek(exporter, n): bytes now, no wait"},
    {"emulated_live_allocations", emulated_live_allocations, METH_NOARGS, "Live allocations."},
    {"emulated_pool_stats", emulated_pool_stats, METH_VARARGS,
     "emulated_pool_stats(device_id=0) -> the emulated device pool's counters"},
    {"device_pool_trim", device_pool_trim, METH_VARARGS,
     "device_pool_trim((type, id), keep_bytes): the backend's pool_trim"},
    {"emulated_enqueue_write", emulated_enqueue_write, METH_VARARGS,
     "emulated_enqueue_write(address, stream, data, device_id=0): a queued write"},
    {"transfer_config", (PyCFunction)(void (*)(void))transfer_config, METH_VARARGS | METH_KEYWORDS,
     "transfer_config(**fields) -> the configuration before; fields replace (pyxbuf_transfer_config_set)"},
    {"pinned_pool_stats", pinned_pool_stats, METH_NOARGS, "pyxbuf_pinned_pool_stats_get as a dict"},
    {"pinned_pool_trim", pinned_pool_trim, METH_NOARGS, "pyxbuf_pinned_pool_trim()"},
    {"emulated_fail_copies_after", emulated_fail_copies_after, METH_O,
     "pyxbuf_emulated_fail_copies_after(n): n more async copies succeed, then all fail"},
    {"host_address", host_address, METH_O, "address of obj's host buffer"},
    {"deref_in_child", deref_in_child, METH_O, "Signal ending a child that reads the memory."},
    {"copy_to_host", copy_to_host, METH_O, "pyxbuf_copy_to_host of obj -> bytes (C order)"},
    {"to_device", to_device, METH_VARARGS, "to_device(obj, (type, id) or None, stream=0, flags=RECORDS_RO|DEVICE)"},
    {"same_device", same_device, METH_VARARGS, "pyxbuf_same_device(view(a), view(b))"},
    {"view_device", view_device, METH_O, "(device_type, device_id) of obj's view"},
    {"host_only", host_only, METH_VARARGS, "host_only(obj, 'item'|'memoryview'|'contiguous')"},
    {"exporter_poke", exporter_poke, METH_VARARGS, "Write one byte of an exporter's memory."},
    {"versions", versions, METH_NOARGS, "(abi_version, version_string)"},
    {"shared_info", shared_info, METH_NOARGS, "(shared table address, live borrows, installer)"},
    {"item_type_error", item_type_error, METH_NOARGS, "This copy's pyxbuf_item_type_error()."},
    {"expect_format", expect_format, METH_VARARGS,
     "expect_format(obj, format): True, or pyxbuf.ItemTypeError naming both formats"},
    {"dtype_register", dtype_register, METH_VARARGS,
     "dtype_register(key, itemsize, alignment): pyxbuf_dtype_register of a fixed size"},
    {"dtype_unregister", dtype_unregister, METH_VARARGS, "dtype_unregister(key)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_pyxbuf_testext", "pyxbuf's C test extension", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

static int add_constants(PyObject *m) {
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"PyBUF_SIMPLE", PyBUF_SIMPLE}, {"PyBUF_WRITABLE", PyBUF_WRITABLE},
        {"PyBUF_FORMAT", PyBUF_FORMAT}, {"PyBUF_ND", PyBUF_ND}, {"PyBUF_STRIDES", PyBUF_STRIDES},
        {"PyBUF_C_CONTIGUOUS", PyBUF_C_CONTIGUOUS}, {"PyBUF_F_CONTIGUOUS", PyBUF_F_CONTIGUOUS},
        {"PyBUF_ANY_CONTIGUOUS", PyBUF_ANY_CONTIGUOUS}, {"PyBUF_INDIRECT", PyBUF_INDIRECT},
        {"PyBUF_CONTIG", PyBUF_CONTIG}, {"PyBUF_CONTIG_RO", PyBUF_CONTIG_RO},
        {"PyBUF_STRIDED", PyBUF_STRIDED}, {"PyBUF_STRIDED_RO", PyBUF_STRIDED_RO},
        {"PyBUF_RECORDS", PyBUF_RECORDS}, {"PyBUF_RECORDS_RO", PyBUF_RECORDS_RO},
        {"PyBUF_FULL", PyBUF_FULL}, {"PyBUF_FULL_RO", PyBUF_FULL_RO},
        {"PYXBUF_DEVICE", PYXBUF_DEVICE}, {"PYXBUF_BORROW_SHARED", PYXBUF_BORROW_SHARED},
        {"PYXBUF_BORROW_EXCLUSIVE", PYXBUF_BORROW_EXCLUSIVE},
        {"PYXBUF_TEMPORARY", PYXBUF_TEMPORARY}, {"PYXBUF_EXTENDED_FORMAT", PYXBUF_EXTENDED_FORMAT}, {"PYXBUF_CLASSIC_FLAGS", PYXBUF_CLASSIC_FLAGS},
        {"PYXBUF_EXTENDED_FLAGS", PYXBUF_EXTENDED_FLAGS},
        {"PYXBUF_REQUIRED_FLAGS", PYXBUF_REQUIRED_FLAGS},
        {"PYXBUF_EXT_SHARED", PYXBUF_EXT_SHARED}, {"PYXBUF_EXT_EXCLUSIVE", PYXBUF_EXT_EXCLUSIVE},
        {"PYXBUF_EXT_TRACKED", PYXBUF_EXT_TRACKED}, {"PYXBUF_ABI_VERSION", PYXBUF_ABI_VERSION},
        {"PYXBUF_DL_EXT_DEV", PYXBUF_DL_EXT_DEV}, {"PYXBUF_DL_CUDA", PYXBUF_DL_CUDA},
        {"PYXBUF_DL_CPU", PYXBUF_DL_CPU},
    };
    for (size_t i = 0; i < sizeof constants / sizeof *constants; i++)
        if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0) return -1;
    return PyModule_AddStringConstant(m, "PYXBUF_DEVICE_DLPACK", PYXBUF_DEVICE_DLPACK);
}

PyMODINIT_FUNC PyInit__pyxbuf_testext(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (testext_gil_not_used(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    pyxbuf_error err;
    if (pyxbuf_emulated_register(&err) < 0) {
        Py_DECREF(m);
        return (pyxbuf_error_raise(&err), NULL);
    }
    View_type = (PyTypeObject *)PyType_FromSpec(&View_spec);
    Liar_type = (PyTypeObject *)PyType_FromSpec(&Liar_spec);
    if (View_type == NULL || Liar_type == NULL ||
        pyxbuf_type_set_supported_flags(Liar_type, PYXBUF_CLASSIC_FLAGS | PYXBUF_EXTENDED_FLAGS) < 0 ||
        PyModule_AddObjectRef(m, "View", (PyObject *)View_type) < 0 ||
        PyModule_AddObjectRef(m, "Liar", (PyObject *)Liar_type) < 0 ||
        PyModule_AddObjectRef(m, "Exporter", (PyObject *)pyxbuf_exporter_type()) < 0 ||
        add_constants(m) < 0 || pyxbuf_testext_add_format(m) < 0 ||
        pyxbuf_testext_add_dlpack(m) < 0 || pyxbuf_testext_add_bridges(m) < 0 ||
        pyxbuf_testext_add_pep(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
