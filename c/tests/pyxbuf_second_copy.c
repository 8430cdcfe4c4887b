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

/* Whether this copy has a backend for the emulated device: it never
 * registered one, so a private registry answers no. */
static PyObject *has_emulated_device(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    pyxbuf_backend b;
    return PyBool_FromLong(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) == 0);
}

static PyMethodDef methods[] = {
    {"acquire", acquire, METH_VARARGS, "acquire(obj, flags) -> Held view (this copy's pyxbuf_get)"},
    {"shared_info", shared_info, METH_NOARGS, "(table address, live borrows, installer)"},
    {"has_emulated_device", has_emulated_device, METH_NOARGS, "Private backend registry check."},
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
