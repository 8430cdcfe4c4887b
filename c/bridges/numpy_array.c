/* numpy_array.c -- turning on the NumPy struct route (numpy_array.h): the
 * check that the type named numpy.ndarray is NumPy's, of a C ABI whose array
 * struct the route reads, and the table of the codes it writes. */

#include "bridges/bridges.h"
#include "bridges/numpy_array.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PyTypeObject *pyxbuf__numpy_ndarray;

/* NumPy's type numbers (numpy/ndarraytypes.h) to the codes its classic export
 * writes for native, aligned arrays (buffer.c, _buffer_format_string); flat
 * views without PyBUF_ND have ndim 0, as NumPy's export says. */
const pyxbuf__numpy_code pyxbuf__numpy_codes[PYXBUF__NUMPY_NCODES] = {
    [0] = {"?", 1, 0},                             /* NPY_BOOL */
    [1] = {"b", 1, 0},                             /* NPY_BYTE */
    [2] = {"B", 1, 0},                             /* NPY_UBYTE */
    [3] = {"h", sizeof(short), 0},                 /* NPY_SHORT */
    [4] = {"H", sizeof(unsigned short), 0},        /* NPY_USHORT */
    [5] = {"i", sizeof(int), 0},                   /* NPY_INT */
    [6] = {"I", sizeof(unsigned int), 0},          /* NPY_UINT */
    [7] = {"l", sizeof(long), 0},                  /* NPY_LONG */
    [8] = {"L", sizeof(unsigned long), 0},         /* NPY_ULONG */
    [9] = {"q", sizeof(long long), 0},             /* NPY_LONGLONG */
    [10] = {"Q", sizeof(unsigned long long), 0},   /* NPY_ULONGLONG */
    [11] = {"f", sizeof(float), 0},                /* NPY_FLOAT */
    [12] = {"d", sizeof(double), 0},               /* NPY_DOUBLE */
    [13] = {"g", sizeof(long double), 0},          /* NPY_LONGDOUBLE */
    [14] = {"Zf", 2 * sizeof(float), 0},           /* NPY_CFLOAT */
    [15] = {"Zd", 2 * sizeof(double), 0},          /* NPY_CDOUBLE */
    [16] = {"Zg", 2 * sizeof(long double), 0},     /* NPY_CLONGDOUBLE */
    [23] = {"e", 2, 0},                            /* NPY_HALF */
};

/* NumPy's C ABI version this route knows the array struct of
 * (NPY_ABI_VERSION in numpy/_core/setup_common.py and numpyconfig.h). */
#define NUMPY_ABI_2 0x02000000u

/* NumPy's C ABI version, from the C API table its extension module exports
 * (slot 0 is PyArray_GetNDArrayCVersion), or 0 when it cannot be read. */
static unsigned int numpy_abi_version(PyObject *module) {
    PyObject *capsule = PyObject_GetAttrString(module, "_ARRAY_API");
    if (capsule == NULL || !PyCapsule_CheckExact(capsule)) {
        Py_XDECREF(capsule);
        return 0;
    }
    void **api = (void **)PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule));
    Py_DECREF(capsule); /* the table lives as long as NumPy's module */
    if (api == NULL || api[0] == NULL) return 0;
    unsigned int (*version)(void) = (unsigned int (*)(void))(uintptr_t)api[0];
    return version();
}

/* 1 when `type` is the ndarray of a NumPy whose array struct the route
 * reads, 0 when it is not, -1 when it cannot tell yet (NumPy's module not
 * importable now, as while NumPy itself imports); never an error. */
static int is_readable_ndarray(PyTypeObject *type) {
    if (strcmp(type->tp_name, "numpy.ndarray") != 0 ||
        (type->tp_flags & Py_TPFLAGS_HEAPTYPE) != 0 || type->tp_as_buffer == NULL ||
        type->tp_as_buffer->bf_getbuffer == NULL || type->tp_as_buffer->bf_releasebuffer != NULL)
        return 0;
    /* Only NumPy 2's module has this name; importing it is a lookup in
     * sys.modules, as an array of the type exists. */
    PyObject *module = PyImport_ImportModule("numpy._core._multiarray_umath");
    if (module == NULL) return PyErr_ExceptionMatches(PyExc_ModuleNotFoundError) ? 0 : -1;
    PyObject *ndarray = PyObject_GetAttrString(module, "ndarray");
    int same = ndarray == (PyObject *)type;
    Py_XDECREF(ndarray);
    int known = same && numpy_abi_version(module) == NUMPY_ABI_2;
    Py_DECREF(module);
    return known;
}

void pyxbuf__numpy_array_discover(PyTypeObject *type) {
    static int checked; /* a type named numpy.ndarray got its answer */
    if (PYXBUF__FT_LOAD_ACQUIRE(&checked)) return;
    PyObject *exc = PyErr_GetRaisedException(); /* a caller's pending error survives */
    int readable = is_readable_ndarray(type);
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
    if (readable < 0) return; /* asked again on the next type-cache miss */
    /* Two threads of a free-threaded build may both get here: the same
     * answer, and at worst one reference to a static type kept twice. */
    if (readable) PYXBUF__FT_STORE_RELEASE(&pyxbuf__numpy_ndarray, (PyTypeObject *)Py_NewRef(type));
    PYXBUF__FT_STORE_RELEASE(&checked, 1);
}

/* ------------------------------------------------------------------------- */
/* User dtypes                                                               */
/* ------------------------------------------------------------------------- */

const pyxbuf__numpy_user *pyxbuf__numpy_users[PYXBUF__NUMPY_NUSER];

#define USER_NAME_MAX 200

/* The scalar type's __module__ or __name__ as UTF-8 (into buf), when it is
 * a str of characters a custom type may hold; else NULL. */
static const char *type_part(PyTypeObject *type, const char *attr, char *buf, size_t cap) {
    PyObject *value = PyObject_GetAttrString((PyObject *)type, attr);
    Py_ssize_t len = 0;
    const char *s = value != NULL && PyUnicode_Check(value) ? PyUnicode_AsUTF8AndSize(value, &len)
                                                            : NULL;
    int ok = s != NULL && len > 0 && (size_t)len < cap &&
             pyxbuf__custom_type_bad_char(s, (size_t)len) == NULL;
    if (ok) memcpy(buf, s, (size_t)len + 1);
    Py_XDECREF(value);
    return ok ? buf : NULL;
}

/* The format "[module$name]" of a user dtype's scalar type whose size
 * pyxbuf's format registry says is `elsize`: a built-in one's static string,
 * else a copy on the heap kept for the process (the views of every array of
 * the dtype point at it); NULL when the type cannot be named or the sizes
 * differ (the bridge then says why). */
static const char *user_format(PyTypeObject *type, Py_ssize_t elsize) {
    char module[USER_NAME_MAX], name[USER_NAME_MAX], key[2 * USER_NAME_MAX + 4];
    if (type_part(type, "__module__", module, sizeof module) == NULL ||
        type_part(type, "__name__", name, sizeof name) == NULL || pyxbuf__numpy_owned_module(module))
        return NULL;
    int len = snprintf(key, sizeof key, "[%s$%s]", module, name);
    if (len < 0 || (size_t)len >= sizeof key) return NULL;
    int64_t size = -1;
    pyxbuf_error err;
    if (pyxbuf_format_itemsize(key, &size, NULL, &err) < 0 || size != elsize) return NULL;
    const char *known = pyxbuf__dtype_builtin_format(key + 1, (size_t)len - 2);
    if (known != NULL) return known;
    char *kept = malloc((size_t)len + 1);
    if (kept != NULL) memcpy(kept, key, (size_t)len + 1);
    return kept;
}

int pyxbuf__numpy_user_learn(PyObject *obj) {
    PyObject *descr;
    Py_BEGIN_CRITICAL_SECTION(obj); /* `a.dtype = ...` may swap it */
    descr = Py_NewRef(((const pyxbuf__numpy_array *)obj)->descr);
    Py_END_CRITICAL_SECTION();
    const pyxbuf__numpy_descr *d = (const pyxbuf__numpy_descr *)descr;
    unsigned u = (unsigned)d->type_num - PYXBUF__NPY_USERDEF;
    int learnt = 0;
    if (u < PYXBUF__NUMPY_NUSER && pyxbuf__numpy_code_of(d) == NULL) {
        PyObject *exc = PyErr_GetRaisedException(); /* a caller's pending error survives */
        uint64_t generation = atomic_load(&pyxbuf__dtype_registry_generation);
        pyxbuf__numpy_user *rec = malloc(sizeof *rec);
        if (rec != NULL) {
            rec->typeobj = (PyTypeObject *)Py_NewRef(d->typeobj);
            rec->code.format = user_format(d->typeobj, d->elsize);
            rec->code.itemsize = d->elsize;
            rec->code.flat_ndim = 1;
            rec->generation = generation;
            /* The record it replaces stays allocated: a reader on another
             * thread may hold it; a new one per registry change and dtype. */
            PYXBUF__FT_STORE_RELEASE(&pyxbuf__numpy_users[u], rec);
            learnt = rec->code.format != NULL;
        }
        PyErr_Clear();
        PyErr_SetRaisedException(exc);
    }
    Py_DECREF(descr);
    return learnt;
}
