/* pyxbuf_second_copy.c -- a second Python extension with its OWN static copy
 * of libpyxbuf, as a second PyO3 extension would have. Tests use it next to
 * _pyxbuf_testext to check that process-wide state (the cooperative borrow
 * registry) is shared between copies while everything else is private. */
#include "pyxbuf.h"

#include "testext_sync.h"

typedef struct {
    PyObject_HEAD
    pyxbuf_view view;
    atomic_int busy; /* testext_claim: one thread at a time reads or releases the view */
} HeldObject;

static PyTypeObject *Held_type;

static void Held_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    HeldObject *h = (HeldObject *)self;
    if (pyxbuf_view_is_acquired(&h->view)) pyxbuf_release(&h->view);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *Held_release(PyObject *self, PyObject *unused) {
    (void)unused;
    HeldObject *h = (HeldObject *)self;
    if (testext_claim(&h->busy) < 0) return NULL;
    if (pyxbuf_view_is_acquired(&h->view)) pyxbuf_release(&h->view);
    testext_unclaim(&h->busy);
    Py_RETURN_NONE;
}

static PyObject *Held_ext_flags(PyObject *self, void *closure) {
    (void)closure;
    HeldObject *h = (HeldObject *)self;
    if (testext_claim(&h->busy) < 0) return NULL;
    long flags = h->view.ext_flags;
    testext_unclaim(&h->busy);
    return PyLong_FromLong(flags);
}

static PyMethodDef Held_methods[] = {
    {"release", Held_release, METH_NOARGS, "Release the view."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Held_getset[] = {
    {"ext_flags", Held_ext_flags, NULL, "The view's grants.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Held_slots[] = {
    {Py_tp_dealloc, (void *)Held_dealloc},
    {Py_tp_methods, Held_methods},
    {Py_tp_getset, Held_getset},
    {0, NULL},
};

static PyType_Spec Held_spec = {
    .name = "_pyxbuf_second_copy.Held",
    .basicsize = (int)sizeof(HeldObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Held_slots,
};

static PyObject *acquire(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
    HeldObject *h = PyObject_New(HeldObject, Held_type);
    if (h == NULL) return NULL;
    atomic_init(&h->busy, 0);
    if (pyxbuf_get(obj, &h->view, flags) < 0) {
        h->view.state = 0;
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

/* (address of the shared table, borrows live, installer's version). */
static PyObject *shared_info(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    const pyxbuf_shared_api *api = pyxbuf_shared_api_get();
    if (api == NULL) return NULL;
    return Py_BuildValue("(NLs)", PyLong_FromVoidPtr((void *)api), (long long)api->borrow_live(),
                         api->installer_version);
}

/* This copy's pyxbuf_item_type_error(): the class another copy made first. */
static PyObject *item_type_error(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return Py_XNewRef(pyxbuf_item_type_error());
}

/* Whether this copy has a backend for the emulated device: it registers
 * none itself, so only the process's shared registry answers yes. */
static PyObject *has_emulated_device(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    pyxbuf_backend b;
    return PyBool_FromLong(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) == 0);
}

/* to_device(obj, device_type, device_id): this copy's pyxbuf_to_device on
 * the default stream (device_type 1: the host). */
static PyObject *to_device(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int type, id;
    if (!PyArg_ParseTuple(args, "Oii", &obj, &type, &id)) return NULL;
    pyxbuf_device device = {type, id};
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, PyBUF_RECORDS_RO | PYXBUF_DEVICE) < 0) return NULL;
    PyObject *out = pyxbuf_to_device(&view, &device, PYXBUF_STREAM_DEFAULT);
    pyxbuf_release(&view);
    return out;
}

/* (held, used, allocations, reuses, fill_threads) of the pinned pool, and
 * (threads, chunk, pool_cap) of the configuration, as this copy sees them. */
static PyObject *engine_state(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st);
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    return Py_BuildValue("((KKKKK)(iKK))", (unsigned long long)st.held_bytes,
                         (unsigned long long)st.used_bytes, (unsigned long long)st.allocations,
                         (unsigned long long)st.reuses, (unsigned long long)st.fill_threads,
                         (int)c.threads, (unsigned long long)c.chunk,
                         (unsigned long long)c.pool_cap);
}

/* cycle_stream(obj, flags, stream): this copy's pyxbuf_get_stream, then
 * pyxbuf_release (a consumer that worked on `stream` and let go). */
static PyObject *cycle_stream(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    long long stream;
    if (!PyArg_ParseTuple(args, "OiL", &obj, &flags, &stream)) return NULL;
    pyxbuf_view view;
    if (pyxbuf_get_stream(obj, &view, flags, stream) < 0) return NULL;
    pyxbuf_release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"cycle_stream", cycle_stream, METH_VARARGS, "cycle_stream(obj, flags, stream): get, release"},
    {"to_device", to_device, METH_VARARGS, "to_device(obj, type, id): this copy's pyxbuf_to_device"},
    {"engine_state", engine_state, METH_NOARGS, "((pool stats), (threads, chunk, pool_cap))"},
    {"acquire", acquire, METH_VARARGS, "acquire(obj, flags) -> Held view (this copy's pyxbuf_get)"},
    {"shared_info", shared_info, METH_NOARGS, "(table address, live borrows, installer)"},
    {"item_type_error", item_type_error, METH_NOARGS, "This copy's pyxbuf_item_type_error()."},
    {"has_emulated_device", has_emulated_device, METH_NOARGS, "Whether the registry in use has it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_pyxbuf_second_copy", "A second private copy of libpyxbuf", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pyxbuf_second_copy(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL || testext_gil_not_used(m) < 0) {
        Py_XDECREF(m);
        return NULL;
    }
    Held_type = (PyTypeObject *)PyType_FromSpec(&Held_spec);
    if (Held_type == NULL || PyModule_AddObjectRef(m, "Held", (PyObject *)Held_type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
