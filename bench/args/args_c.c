/* args_c.c -- the C floor of the per-argument race (make bench-args).
 *
 * Each function takes one 1-D float32 array and returns its length, as every
 * route of the race does; `noop` takes the argument and returns 0, the call's
 * own cost. METH_O, so CPython passes the argument with no parsing:
 *   classic(x)        PyObject_GetBuffer + PyBuffer_Release (PyBUF_RECORDS_RO)
 *   pyxbuf(x)         pyxbuf_get + pyxbuf_release, the same request
 *   pyxbuf_shared(x)  the same with PYXBUF_BORROW_SHARED: what PyXBuffer<f32>,
 *                     pyxbuf::view<const float> and the Cython route ask for
 *   pyxbuf_bf16(x), pyxbuf_shared_bf16(x), pyxbuf_f8(x), pyxbuf_shared_f8(x)
 *                     pyxbuf's and pyxbuf_shared's requests on a 1-D ml_dtypes
 *                     bfloat16 / float8_e4m3fn array (its format checked)
 * Refusals raise as any extension would (wrong ndim or format: TypeError).
 *
 * ir_zero() and ir_dump(label) are Callgrind's client requests (no-ops
 * outside valgrind): the driver zeroes the counters, runs one loop and dumps
 * them under the loop's label, all in one valgrind run.
 *
 * Built twice: as _args_c, and as _args_owner (ARGS_MODULE), whose
 * take_registry() the driver calls first. The process-wide borrow registry
 * belongs to the first copy of pyxbuf that asks for it; every other copy
 * reaches it through its table. In a real process that is most extensions
 * (the pyxbuf module, or another extension, came first), so the race makes
 * every measured module such a copy, the C floor included. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "pyxbuf.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define ARGS_HAVE_CALLGRIND 1
#endif
#endif
#ifndef ARGS_HAVE_CALLGRIND
#define ARGS_HAVE_CALLGRIND 0
#endif

static PyObject *noop(PyObject *mod, PyObject *x) {
    (void)mod, (void)x;
    return PyLong_FromLong(0);
}

/* The one check every route makes: one dimension of float32. */
static int is_f32_1d(const Py_buffer *b) {
    if (b->ndim == 1 && b->format != NULL && strcmp(b->format, "f") == 0) return 1;
    PyErr_Format(PyExc_TypeError, "expected a 1-D float32 array, found %d-D '%s'", b->ndim,
                 b->format ? b->format : "B");
    return 0;
}

static PyObject *classic(PyObject *mod, PyObject *x) {
    (void)mod;
    Py_buffer b;
    if (PyObject_GetBuffer(x, &b, PyBUF_RECORDS_RO) < 0) return NULL;
    PyObject *out = is_f32_1d(&b) ? PyLong_FromSsize_t(b.shape[0]) : NULL;
    PyBuffer_Release(&b);
    return out;
}

static PyObject *acquire(PyObject *x, int32_t flags) {
    pyxbuf_view v;
    if (pyxbuf_get(x, &v, flags) < 0) return NULL;
    PyObject *out = is_f32_1d(&v.base) ? PyLong_FromSsize_t(v.base.shape[0]) : NULL;
    pyxbuf_release(&v);
    return out;
}

static PyObject *pyxbuf(PyObject *mod, PyObject *x) {
    (void)mod;
    return acquire(x, PyBUF_RECORDS_RO);
}

static PyObject *pyxbuf_shared(PyObject *mod, PyObject *x) {
    (void)mod;
    return acquire(x, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED);
}

/* The machine-learning dtypes: ml_dtypes' arrays, read from NumPy's array
 * struct with the custom formats pyxbuf gives them (the classic protocol
 * cannot say them at all), checked as a consumer checks float32: one
 * dimension, the format it reads. */
static PyObject *acquire_custom(PyObject *x, int32_t flags, const char *format, const char *what) {
    pyxbuf_view v;
    if (pyxbuf_get(x, &v, flags) < 0) return NULL;
    const char *fmt = v.base.format ? v.base.format : "B";
    PyObject *out = NULL;
    if (v.base.ndim == 1 && strcmp(fmt, format) == 0)
        out = PyLong_FromSsize_t(v.base.shape[0]);
    else
        PyErr_Format(PyExc_TypeError, "expected a 1-D %s array, found %d-D '%s'", what,
                     v.base.ndim, fmt);
    pyxbuf_release(&v);
    return out;
}

#define BF16 "[ml_dtypes$bfloat16]"
#define F8 "[ml_dtypes$float8_e4m3fn]"

static PyObject *pyxbuf_bf16(PyObject *mod, PyObject *x) {
    (void)mod;
    return acquire_custom(x, PyBUF_RECORDS_RO, BF16, "bfloat16");
}

static PyObject *pyxbuf_shared_bf16(PyObject *mod, PyObject *x) {
    (void)mod;
    return acquire_custom(x, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED, BF16, "bfloat16");
}

static PyObject *pyxbuf_f8(PyObject *mod, PyObject *x) {
    (void)mod;
    return acquire_custom(x, PyBUF_RECORDS_RO, F8, "float8_e4m3fn");
}

static PyObject *pyxbuf_shared_f8(PyObject *mod, PyObject *x) {
    (void)mod;
    return acquire_custom(x, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED, F8, "float8_e4m3fn");
}

static PyObject *ir_zero(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
#if ARGS_HAVE_CALLGRIND
    CALLGRIND_ZERO_STATS;
#endif
    Py_RETURN_NONE;
}

static PyObject *ir_dump(PyObject *mod, PyObject *label) {
    (void)mod;
    const char *text = PyUnicode_AsUTF8(label);
    if (text == NULL) return NULL;
#if ARGS_HAVE_CALLGRIND
    CALLGRIND_DUMP_STATS_AT(text);
#endif
    Py_RETURN_NONE;
}

static PyObject *under_callgrind(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
#if ARGS_HAVE_CALLGRIND
    return PyBool_FromLong(RUNNING_ON_VALGRIND != 0);
#else
    Py_RETURN_FALSE;
#endif
}

/* This copy's registry becomes the process's (see the top). */
static PyObject *take_registry(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    if (pyxbuf_shared_api_get() == NULL) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"take_registry", take_registry, METH_NOARGS,
     "take_registry()\n--\n\nInstall this copy's borrow registry as the process's."},
    {"noop", noop, METH_O, "noop(x, /)\n--\n\nTake x, return 0: the call alone."},
    {"classic", classic, METH_O,
     "classic(x, /)\n--\n\nLength of a 1-D float32 array via PyObject_GetBuffer."},
    {"pyxbuf", pyxbuf, METH_O, "pyxbuf(x, /)\n--\n\nLength via pyxbuf_get."},
    {"pyxbuf_shared", pyxbuf_shared, METH_O,
     "pyxbuf_shared(x, /)\n--\n\nLength via pyxbuf_get with a shared borrow."},
    {"pyxbuf_bf16", pyxbuf_bf16, METH_O,
     "pyxbuf_bf16(x, /)\n--\n\nLength of a 1-D bfloat16 array via pyxbuf_get."},
    {"pyxbuf_shared_bf16", pyxbuf_shared_bf16, METH_O,
     "pyxbuf_shared_bf16(x, /)\n--\n\nThe same with a shared borrow."},
    {"pyxbuf_f8", pyxbuf_f8, METH_O,
     "pyxbuf_f8(x, /)\n--\n\nLength of a 1-D float8_e4m3fn array via pyxbuf_get."},
    {"pyxbuf_shared_f8", pyxbuf_shared_f8, METH_O,
     "pyxbuf_shared_f8(x, /)\n--\n\nThe same with a shared borrow."},
    {"ir_zero", ir_zero, METH_NOARGS, "ir_zero()\n--\n\nZero Callgrind's counters."},
    {"ir_dump", ir_dump, METH_O, "ir_dump(label, /)\n--\n\nDump Callgrind's counters."},
    {"under_callgrind", under_callgrind, METH_NOARGS,
     "under_callgrind()\n--\n\nTrue when running under valgrind with client requests."},
    {NULL, NULL, 0, NULL},
};

#ifndef ARGS_MODULE
#define ARGS_MODULE _args_c
#endif
#define ARGS_STR2(x) #x
#define ARGS_STR(x) ARGS_STR2(x)
#define ARGS_CAT2(a, b) a##b
#define ARGS_CAT(a, b) ARGS_CAT2(a, b)

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, ARGS_STR(ARGS_MODULE), NULL, 0, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC ARGS_CAT(PyInit_, ARGS_MODULE)(void) { return PyModule_Create(&module); }
