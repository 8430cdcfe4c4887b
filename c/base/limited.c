/* limited.c -- what the limited C API (PYXBUF_LIMITED, base/compat.h) lacks
 * and libpyxbuf needs: a type's name for messages, an MRO attribute lookup,
 * the per-type caches' generation, PyObject_VectorcallMethod before 3.12, and
 * the interpreter's Py_IsFinalizing and PyGILState_Check (not in the limited
 * API, exported by every CPython). Empty in the full-API build. */

#include "base/base.h"

#if PYXBUF_LIMITED

#include <stdio.h>
#include <string.h>

#if defined(_WIN32)
#include <windows.h>
#else
#include <dlfcn.h>
#endif

unsigned int pyxbuf__limited_generation;

/* Names for messages: a small ring per thread, so that a message naming two
 * or three types (each from its own call) sees each one intact. */
#define NAME_RING 8
#define NAME_SIZE 256

static void copy_text(char *out, size_t cap, PyObject *s) {
    Py_ssize_t n = 0;
    const char *text = s != NULL && PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    if (text == NULL) {
        PyErr_Clear();
        text = "?";
        n = 1;
    }
    size_t len = (size_t)n < cap - 1 ? (size_t)n : cap - 1;
    memcpy(out, text, len);
    out[len] = '\0';
}

/* Whether heap type `type` was made by a class statement (or type()): its
 * __module__ is then the very object its module's __name__ holds, as the
 * class body read it from the module's globals; a type made from a spec
 * has a string of its own, cut from the spec's dotted name. */
static int made_by_class_statement(PyObject *module) {
    PyObject *m = PyDict_GetItemWithError(PyImport_GetModuleDict(), module); /* borrowed */
    PyObject *name = m != NULL ? PyObject_GetAttrString(m, "__name__") : NULL;
    Py_XDECREF(name); /* the module holds it */
    PyErr_Clear();
    return name == module;
}

/* tp_name's text where the limited API hides it, rebuilt from __module__
 * and __name__: a static type's is "module.name" ("numpy.ndarray"; a
 * builtin's has no module), a heap type's made from a dotted spec name too
 * ("pyxbuf.Exporter"), a Python class's its bare __name__. A pending
 * exception survives. */
const char *pyxbuf__limited_type_name(PyTypeObject *type) {
    static _Thread_local char ring[NAME_RING][NAME_SIZE];
    static _Thread_local unsigned int next;
    char *out = ring[next++ % NAME_RING];
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *name = PyType_GetName(type);
    PyObject *module = PyObject_GetAttrString((PyObject *)type, "__module__");
    int prefixed = module != NULL && PyUnicode_Check(module);
    if (prefixed && !PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE))
        prefixed = PyUnicode_CompareWithASCIIString(module, "builtins") != 0;
    else if (prefixed)
        prefixed = !made_by_class_statement(module);
    if (prefixed) {
        char first[NAME_SIZE / 2], last[NAME_SIZE / 2 - 1];
        copy_text(first, sizeof first, module);
        copy_text(last, sizeof last, name);
        snprintf(out, NAME_SIZE, "%s.%s", first, last);
    } else {
        copy_text(out, NAME_SIZE, name);
    }
    Py_XDECREF(module);
    Py_XDECREF(name);
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    return out;
}

PyObject *pyxbuf__type_lookup(PyTypeObject *type, PyObject *name) {
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *value = NULL;
    if (PyObject_GetOptionalAttr((PyObject *)type, name, &value) < 0) value = NULL;
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    return value;
}

#if Py_LIMITED_API + 0 < 0x030C0000
PyObject *pyxbuf__limited_vectorcall_method(PyObject *name, PyObject *const *args, size_t nargsf,
                                            PyObject *kwnames) {
    Py_ssize_t nargs = (Py_ssize_t)(nargsf & ~PY_VECTORCALL_ARGUMENTS_OFFSET);
    PyObject *method = PyObject_GetAttr(args[0], name);
    if (method == NULL) return NULL;
    PyObject *pos = PyTuple_New(nargs - 1);
    PyObject *kw = kwnames != NULL ? PyDict_New() : NULL;
    PyObject *r = NULL;
    if (pos == NULL || (kwnames != NULL && kw == NULL)) goto done;
    for (Py_ssize_t i = 1; i < nargs; i++) PyTuple_SET_ITEM(pos, i - 1, Py_NewRef(args[i]));
    for (Py_ssize_t j = 0; kwnames != NULL && j < PyTuple_Size(kwnames); j++)
        if (PyDict_SetItem(kw, PyTuple_GetItem(kwnames, j), args[nargs + j]) < 0) goto done;
    r = PyObject_Call(method, pos, kw);
done:
    Py_DECREF(method);
    Py_XDECREF(pos);
    Py_XDECREF(kw);
    return r;
}
#endif

/* The interpreter's own function `name` (or `older`, its name before 3.13),
 * found once; NULL when it has neither. */
typedef int (*int_fn)(void);

static int_fn find_function(const char *name, const char *older) {
    void *f = NULL;
#if defined(_WIN32)
    /* The DLL that holds Py_IsInitialized (python3.dll forwards to it). */
    HMODULE h = NULL;
    if (GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS |
                               GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                           (LPCSTR)(uintptr_t)&Py_IsInitialized, &h)) {
        f = (void *)(uintptr_t)GetProcAddress(h, name);
        if (f == NULL && older != NULL) f = (void *)(uintptr_t)GetProcAddress(h, older);
    }
#else
    f = dlsym(RTLD_DEFAULT, name);
    if (f == NULL && older != NULL) f = dlsym(RTLD_DEFAULT, older);
#endif
    return (int_fn)(uintptr_t)f;
}

/* Deleters ask from any thread: the pointer is looked up again rather than
 * locked (each lookup finds the same). */
static int_fn resolved(int_fn *slot, int *done, const char *name, const char *older) {
    if (__atomic_load_n(done, __ATOMIC_ACQUIRE)) return __atomic_load_n(slot, __ATOMIC_RELAXED);
    int_fn f = find_function(name, older);
    __atomic_store_n(slot, f, __ATOMIC_RELAXED);
    __atomic_store_n(done, 1, __ATOMIC_RELEASE);
    return f;
}

int pyxbuf__limited_is_finalizing(void) {
    static int_fn fn;
    static int done;
    int_fn f = resolved(&fn, &done, "Py_IsFinalizing", "_Py_IsFinalizing");
    return f != NULL ? f() : 0;
}

int pyxbuf__limited_gil_check(void) {
    static int_fn fn;
    static int done;
    int_fn f = resolved(&fn, &done, "PyGILState_Check", NULL);
    return f != NULL ? f() : 0;
}

#else
typedef int pyxbuf__limited_unused; /* ISO C: no empty translation unit */
#endif
