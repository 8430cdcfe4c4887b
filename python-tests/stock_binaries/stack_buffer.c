/* stack_buffer.c -- a C extension as binaries built for a stock CPython are:
 * compiled against the stock 3.15 headers (tools/test-matrix.sh builds it
 * that way for the 3.15-pep line), whose Py_buffer is the classic struct,
 * and run on the interpreter with the extended buffer protocol
 * (test_stock_binaries.py). Each function puts a Py_buffer on its stack with
 * guard bytes right after it: an interpreter that wrote past the classic
 * struct would change them. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#define GUARD 0xC3

typedef struct {
    Py_buffer view;
    unsigned char guard[64];
} frame;

static int guard_broken(const frame *f) {
    for (size_t i = 0; i < sizeof f->guard; i++) {
        if (f->guard[i] != GUARD) {
            PyErr_Format(PyExc_AssertionError,
                         "the stack was written past the classic Py_buffer (%zu bytes), at "
                         "guard byte %zu", sizeof f->view, i);
            return 1;
        }
    }
    return 0;
}

/* getbuffer(obj, flags) -> (sizeof(Py_buffer), len): PyObject_GetBuffer and
 * PyBuffer_Release on a stack Py_buffer. */
static PyObject *getbuffer(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *obj;
    int flags;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
    frame f;
    memset(f.guard, GUARD, sizeof f.guard);
    if (PyObject_GetBuffer(obj, &f.view, flags) < 0) {
        guard_broken(&f); /* a broken guard replaces the producer's refusal */
        return NULL;
    }
    Py_ssize_t len = f.view.len;
    PyBuffer_Release(&f.view);
    if (guard_broken(&f)) return NULL;
    return Py_BuildValue("(nn)", (Py_ssize_t)sizeof f.view, len);
}

/* copy(obj) -> bytes: the stack view through PyBuffer_ToContiguous and
 * PyMemoryView_FromBuffer, the functions that read a caller's Py_buffer. */
static PyObject *copy(PyObject *mod, PyObject *obj) {
    (void)mod;
    frame f;
    memset(f.guard, GUARD, sizeof f.guard);
    if (PyObject_GetBuffer(obj, &f.view, PyBUF_FULL_RO) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, f.view.len);
    if (out != NULL && PyBuffer_ToContiguous(PyBytes_AS_STRING(out), &f.view, f.view.len, 'C') < 0)
        Py_CLEAR(out);
    PyObject *mv = out != NULL ? PyMemoryView_FromBuffer(&f.view) : NULL;
    if (mv == NULL) Py_CLEAR(out);
    Py_XDECREF(mv);
    PyBuffer_Release(&f.view);
    if (guard_broken(&f)) Py_CLEAR(out);
    return out;
}

/* fill_info(flags) -> bytes: a view filled by hand on the stack
 * (PyBuffer_FillInfo), wrapped by PyMemoryView_FromBuffer, as _io does. */
static PyObject *fill_info(PyObject *mod, PyObject *args) {
    (void)mod;
    int flags;
    if (!PyArg_ParseTuple(args, "i", &flags)) return NULL;
    static char data[] = "filled by hand";
    frame f;
    memset(&f, GUARD, sizeof f); /* garbage where the extended fields would be */
    if (PyBuffer_FillInfo(&f.view, NULL, data, (Py_ssize_t)strlen(data), 1, flags) < 0)
        return NULL;
    PyObject *mv = PyMemoryView_FromBuffer(&f.view);
    if (mv == NULL) return NULL;
    PyObject *out = PyObject_CallMethod(mv, "tobytes", NULL);
    Py_DECREF(mv);
    if (guard_broken(&f)) Py_CLEAR(out);
    return out;
}

static PyMethodDef methods[] = {
    {"getbuffer", getbuffer, METH_VARARGS, "getbuffer(obj, flags) -> (sizeof(Py_buffer), len)"},
    {"copy", copy, METH_O, "copy(obj) -> bytes, through a stack Py_buffer"},
    {"fill_info", fill_info, METH_VARARGS, "fill_info(flags) -> bytes of a hand-filled view"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stock_stack_buffer",
    "A C extension compiled against stock CPython headers.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__stock_stack_buffer(void) { return PyModule_Create(&module); }
