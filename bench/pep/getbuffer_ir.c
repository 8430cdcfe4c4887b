/* getbuffer_ir.c -- instruction counts for the extended buffer protocol in
 * CPython (cpython/'s patch series; bench/pep/pep_ir.py drives it under
 * Callgrind and writes bench/results/pep-ir-<date>.md). One acquisition and
 * release per iteration, counted between CALLGRIND_ZERO_STATS and
 * CALLGRIND_DUMP_STATS_AT:
 *   classic  PyObject_GetBuffer + PyBuffer_Release with a classic request
 *            (the cost to every existing caller: stock against patched);
 *   native   the same with PyBUF_DEVICE | ... into a grown Py_buffer
 *            (patched interpreters only);
 *   pyxbuf   pyxbuf_get + pyxbuf_release (built with PYXBUF_LINKED);
 *   empty    the loop alone, subtracted from the others. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <valgrind/callgrind.h>

#ifdef PYXBUF_LINKED
#include "pyxbuf.h"
#endif

typedef int (*acquire_fn)(PyObject *obj, int flags);

static int empty(PyObject *obj, int flags) {
    (void)obj, (void)flags;
    __asm__ volatile("" ::: "memory");
    return 0;
}

/* classic and native: the same call; native's requests carry PyBUF_DEVICE,
 * and its Py_buffer is the grown one of the headers that define it. */
static int getbuffer(PyObject *obj, int flags) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, flags) < 0) return -1;
    PyBuffer_Release(&view);
    return 0;
}

#ifdef PYXBUF_LINKED
static int pyxbuf(PyObject *obj, int flags) {
    pyxbuf_view view;
    if (pyxbuf_get(obj, &view, flags) < 0) return -1;
    pyxbuf_release(&view);
    return 0;
}
#endif

static acquire_fn find(const char *kind) {
    if (strcmp(kind, "empty") == 0) return empty;
    if (strcmp(kind, "classic") == 0) return getbuffer;
#ifdef PyBUF_DEVICE
    if (strcmp(kind, "native") == 0) return getbuffer;
#endif
#ifdef PYXBUF_LINKED
    if (strcmp(kind, "pyxbuf") == 0) return pyxbuf;
#endif
    return NULL;
}

/* measure(kind, obj, flags, n, label): n acquisitions, counted and dumped
 * under `label`. Warm-up first (caches, type version tags). */
static PyObject *measure(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *kind, *label;
    PyObject *obj;
    int flags;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "sOins", &kind, &obj, &flags, &n, &label)) return NULL;
    acquire_fn fn = find(kind);
    if (fn == NULL) return PyErr_Format(PyExc_ValueError, "kind '%s' is not built in", kind);
    for (int i = 0; i < 100; i++)
        if (fn(obj, flags) < 0) return NULL;
    CALLGRIND_ZERO_STATS;
    for (Py_ssize_t i = 0; i < n; i++)
        if (fn(obj, flags) < 0) return NULL;
    CALLGRIND_DUMP_STATS_AT(label);
    Py_RETURN_NONE;
}

static PyObject *kinds(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return Py_BuildValue("(ssss)", "empty", "classic",
#ifdef PyBUF_DEVICE
                         "native",
#else
                         "",
#endif
#ifdef PYXBUF_LINKED
                         "pyxbuf"
#else
                         ""
#endif
    );
}

static PyMethodDef methods[] = {
    {"measure", measure, METH_VARARGS, "measure(kind, obj, flags, n, label)"},
    {"kinds", kinds, METH_NOARGS, "the kinds this build has"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pep_ir", "Instruction counts of buffer acquisitions.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pep_ir(void) { return PyModule_Create(&module); }
