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
    if (strcmp(PYXBUF__TP_NAME(type), "numpy.ndarray") != 0 ||
        PyType_HasFeature(type, Py_TPFLAGS_HEAPTYPE) || !PYXBUF__HAS_GETBUFFER(type) ||
        PYXBUF__HAS_RELEASEBUFFER(type))
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
    if (readable)
        PYXBUF__FT_STORE_RELEASE(&pyxbuf__numpy_ndarray,
                                 (PyTypeObject *)Py_NewRef((PyObject *)type));
    PYXBUF__FT_STORE_RELEASE(&checked, 1);
}

/* ------------------------------------------------------------------------- */
/* User dtypes                                                               */
/* ------------------------------------------------------------------------- */

const pyxbuf__numpy_user *pyxbuf__numpy_users[PYXBUF__NUMPY_NUSER];
size_t pyxbuf__numpy_user_records;

/* Every record made for a type number (numpy_array.h says why none is
 * freed), the format it reads kept with it when it is not a built-in one's
 * static string: views of the dtype's arrays point at it. */
typedef struct user_record {
    pyxbuf__numpy_user pub; /* what pyxbuf__numpy_users points at */
    struct user_record *next;
    char text[];
} user_record;

/* A type number's records differ only when its scalar type or that type's
 * name changed (format NULL counts as one more): past this many, the route
 * declines the dtype and the bridge answers, so the records stay bounded. */
#define USER_RECORDS_MAX 8

static user_record *user_records[PYXBUF__NUMPY_NUSER];
/* Guards user_records and every stamp (no Python runs under it); the GIL
 * does without it. */
PYXBUF__FT_MUTEX(user_lock);

#define USER_NAME_MAX 200
#define USER_KEY_MAX (2 * USER_NAME_MAX + 4)

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

/* The format "[module$name]" (into key, USER_KEY_MAX bytes) of a user
 * dtype's scalar type whose size pyxbuf's format registry says is `elsize`;
 * NULL when the type cannot be named or the sizes differ (the bridge then
 * says why). */
static const char *user_key(PyTypeObject *type, Py_ssize_t elsize, char *key) {
    char module[USER_NAME_MAX], name[USER_NAME_MAX];
    if (type_part(type, "__module__", module, sizeof module) == NULL ||
        type_part(type, "__name__", name, sizeof name) == NULL || pyxbuf__numpy_owned_module(module))
        return NULL;
    int len = snprintf(key, USER_KEY_MAX, "[%s$%s]", module, name);
    if (len < 0 || len >= USER_KEY_MAX) return NULL;
    int64_t size = -1;
    pyxbuf_error err;
    if (pyxbuf_format_itemsize(key, &size, NULL, &err) < 0 || size != elsize) return NULL;
    return key;
}

static int same_format(const char *a, const char *b) {
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/* A new record of u (user_lock held) reading `key` (NULL: not this route),
 * with its format a built-in static string or a copy kept in it; NULL when
 * out of memory. */
static user_record *user_record_new(unsigned u, PyTypeObject *type, Py_ssize_t elsize,
                                    const char *key) {
    size_t len = key != NULL ? strlen(key) : 0;
    const char *builtin = key != NULL ? pyxbuf__dtype_builtin_format(key + 1, len - 2) : NULL;
    size_t kept = key != NULL && builtin == NULL ? len + 1 : 0;
    user_record *r = malloc(sizeof *r + kept);
    if (r == NULL) return NULL;
    if (kept > 0) memcpy(r->text, key, kept);
    r->pub.typeobj = (PyTypeObject *)Py_NewRef((PyObject *)type);
    r->pub.code = (pyxbuf__numpy_code){builtin != NULL ? builtin : kept > 0 ? r->text : NULL,
                                       elsize, 1};
    r->pub.generation = 0;
    r->next = user_records[u];
    user_records[u] = r;
    PYXBUF__FT_STORE_RELAXED(&pyxbuf__numpy_user_records, pyxbuf__numpy_user_records + 1);
    return r;
}

/* u's record of this content (user_lock held): the one made before, else a
 * new one while u has fewer than USER_RECORDS_MAX; else NULL. */
static user_record *user_record_of(unsigned u, PyTypeObject *type, Py_ssize_t elsize,
                                   const char *key) {
    int n = 0;
    for (user_record *r = user_records[u]; r != NULL; r = r->next, n++)
        if (r->pub.typeobj == type && r->pub.code.itemsize == elsize &&
            same_format(r->pub.code.format, key))
            return r;
    return n < USER_RECORDS_MAX ? user_record_new(u, type, elsize, key) : NULL;
}

/* Make u's record of this content, learnt at `generation`, the current one:
 * 1 when it is, and the route reads it. A learning that raced a newer one
 * (free-threaded) leaves the newer record in place. */
static int user_publish(unsigned u, PyTypeObject *type, Py_ssize_t elsize, const char *key,
                        uint64_t generation) {
    int learnt = 0;
    PYXBUF__FT_LOCK(user_lock);
    const pyxbuf__numpy_user *now = pyxbuf__numpy_users[u];
    user_record *r = now == NULL || now->generation <= generation
                         ? user_record_of(u, type, elsize, key)
                         : NULL;
    if (r != NULL) {
        /* Readers may hold r: the stamp is the only word they see change,
         * and it only rises (the current record holds the highest stamp,
         * and the test above gives r one no lower). */
        PYXBUF__FT_STORE_RELAXED(&r->pub.generation, generation);
        PYXBUF__FT_STORE_RELEASE(&pyxbuf__numpy_users[u], &r->pub);
        learnt = r->pub.code.format != NULL;
    }
    PYXBUF__FT_UNLOCK(user_lock);
    return learnt;
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
        /* Read before the registry is asked: a change meanwhile leaves the
         * record stale, learnt again on the next read. */
        uint64_t generation = atomic_load(&pyxbuf__dtype_registry_generation);
        char buf[USER_KEY_MAX];
        const char *key = user_key(d->typeobj, d->elsize, buf);
        learnt = user_publish(u, d->typeobj, d->elsize, key, generation);
        PyErr_Clear();
        PyErr_SetRaisedException(exc);
    }
    Py_DECREF(descr);
    return learnt;
}
