/* rust_numpy.c -- pyxbuf's tracked borrows of NumPy arrays and rust-numpy's
 * borrow checker see each other.
 *
 * rust-numpy (the `numpy` crate) keeps its own process-wide registry of
 * PyReadonlyArray / PyReadwriteArray borrows, shared by every extension
 * through a capsule named "_RUST_NUMPY_BORROW_CHECKING_API" in NumPy's
 * multiarray module: a versioned table {version, flags, acquire, acquire_mut,
 * release, release_mut}, each function taking the table's `flags` and the
 * array, the acquires answering 0 (granted), -1 (conflicts with a live
 * borrow) or -2 (the array is not writeable).
 *
 * - When the capsule is there (a rust-numpy extension ran first), a tracked
 *   borrow of an ndarray is also taken in it: rust-numpy's borrows refuse
 *   pyxbuf's and the other way round.
 * - When it is not, pyxbuf installs a table of its own there, backed by
 *   pyxbuf's registry; rust-numpy extensions loaded later find it and take
 *   their borrows in pyxbuf's registry. The capsule's context says
 *   "pyxbuf", so every copy of pyxbuf knows not to register twice.
 * Either way one registry sees both kinds of borrow. Arrays other than
 * ndarrays (and processes without NumPy) are not affected. */
#include "borrow/borrow.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAPSULE_NAME "_RUST_NUMPY_BORROW_CHECKING_API"
#define CONTEXT_MARK "pyxbuf"

/* rust-numpy's table, version 1 (fields are only appended). */
typedef struct rust_numpy_api {
    uint64_t version;
    void *flags;
    int (*acquire)(void *flags, PyObject *array);
    int (*acquire_mut)(void *flags, PyObject *array);
    void (*release)(void *flags, PyObject *array);
    void (*release_mut)(void *flags, PyObject *array);
} rust_numpy_api;

/* The leading fields of NumPy's PyArrayObject (ndarraytypes.h), the same in
 * NumPy 1.x and 2.x. */
typedef struct numpy_array_head {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} numpy_array_head;

#define NUMPY_WRITEABLE 0x0400 /* NPY_ARRAY_WRITEABLE */

/* ------------------------------------------------------------------------- */
/* pyxbuf's own table, for rust-numpy extensions                             */
/* ------------------------------------------------------------------------- */

/* The borrows rust-numpy took through pyxbuf's table. Its release gives only
 * the array back, so each entry remembers the array object (rust-numpy's
 * PyReadonlyArray / PyReadwriteArray hold it until they release, so the
 * address names it) and the key that was recorded: release drops that
 * entry's token, never one found by a key recomputed from the array, whose
 * shape, strides or data may have changed since, and which another borrow
 * over the same bytes with another spacing may share. */
typedef struct numpy_borrow {
    PyObject *array;
    pyxbuf_borrow_key key;
    int32_t exclusive;
    int64_t token;
} numpy_borrow;

static numpy_borrow *numpy_borrows;
static size_t numpy_borrow_count, numpy_borrow_cap;
static pthread_mutex_t numpy_borrow_lock = PTHREAD_MUTEX_INITIALIZER;

/* The key of `array` as it is now: the bytes it spans as rust-numpy computes
 * them (empty when a dimension is 0), its first item, lattice (the gcd of
 * its strides' magnitudes over dimensions of more than one item, as
 * rust-numpy computes it; pyxbuf__lattice_of) and itemsize.
 * Returns -1 with an exception set (no itemsize). */
static int array_key(PyObject *array, pyxbuf_borrow_key *key) {
    const numpy_array_head *a = (const numpy_array_head *)array;
    PyObject *size_obj = PyObject_GetAttrString(array, "itemsize");
    if (size_obj == NULL) return -1;
    Py_ssize_t itemsize = PyLong_AsSsize_t(size_obj);
    Py_DECREF(size_obj);
    if (itemsize < 0) return -1;
    Py_ssize_t start = 0, end = 0;
    int empty = 0;
    for (int d = 0; d < a->nd; d++)
        if (a->dimensions[d] == 0) empty = 1;
    if (!empty) {
        for (int d = 0; d < a->nd; d++) {
            Py_ssize_t offset = (a->dimensions[d] - 1) * a->strides[d];
            if (offset >= 0) end += offset;
            else start += offset;
        }
        end += itemsize;
    }
    uint64_t data = (uint64_t)(uintptr_t)a->data;
    int dense = 0;
    uint64_t g = pyxbuf__lattice_of(a->nd, a->dimensions, a->strides, &dense);
    uint64_t size = (itemsize > 0 ? (uint64_t)itemsize : 1) | (dense ? PYXBUF__KEY_DENSE : 0);
    *key = (pyxbuf_borrow_key){{PYXBUF_DL_CPU, 0, data + (uint64_t)start, data + (uint64_t)end},
                               data, g, size};
    return 0;
}

static int same_key(const pyxbuf_borrow_key *a, const pyxbuf_borrow_key *b) {
    return a->range.lo == b->range.lo && a->range.hi == b->range.hi && a->first == b->first &&
           a->stride_gcd == b->stride_gcd && a->itemsize == b->itemsize;
}

/* The shared table, or NULL with the failure reported as unraisable
 * (rust-numpy's callers expect no exception). */
static const pyxbuf_shared_api *table_or_unraisable(PyObject *array) {
    const pyxbuf_shared_api *api = pyxbuf_shared_api_get();
    if (api == NULL) PyErr_WriteUnraisable(array);
    return api;
}

static int record_borrow(const numpy_borrow *entry) {
    pthread_mutex_lock(&numpy_borrow_lock);
    if (numpy_borrow_count == numpy_borrow_cap) {
        size_t cap = numpy_borrow_cap ? 2 * numpy_borrow_cap : 16;
        numpy_borrow *grown = realloc(numpy_borrows, cap * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&numpy_borrow_lock);
            return -1;
        }
        numpy_borrows = grown;
        numpy_borrow_cap = cap;
    }
    numpy_borrows[numpy_borrow_count++] = *entry;
    pthread_mutex_unlock(&numpy_borrow_lock);
    return 0;
}

static int table_acquire(PyObject *array, int32_t exclusive) {
    const pyxbuf_shared_api *api = table_or_unraisable(array);
    if (api == NULL) return -1;
    numpy_borrow entry = {array, {{0, 0, 0, 0}, 0, 0, 0}, exclusive, 0};
    if (array_key(array, &entry.key) < 0) {
        PyErr_WriteUnraisable(array);
        return -1;
    }
    char why[160];
    if (pyxbuf__shared_acquire_key(api, &entry.key, exclusive, &entry.token, why, sizeof why) != 0)
        return -1;
    if (record_borrow(&entry) < 0) {
        api->borrow_release(entry.token);
        return -1;
    }
    return 0;
}

/* The entry of this array's borrow of this kind: the one whose recorded key
 * the array still has (two borrows of one array object taken before and
 * after a reshape are told apart), else the newest of that array (its
 * layout changed since). rust-numpy releases with the array it borrowed
 * (it holds it meanwhile); a caller that releases through another array
 * object releases an entry of the same kind and whole key. -1 when none. */
static ptrdiff_t find_borrow(PyObject *array, int32_t exclusive, const pyxbuf_borrow_key *now) {
    ptrdiff_t newest = -1, same = -1;
    for (size_t i = numpy_borrow_count; i-- > 0;) {
        const numpy_borrow *b = &numpy_borrows[i];
        if (b->exclusive != exclusive) continue;
        int key_matches = now != NULL && same_key(&b->key, now);
        if (b->array != array) {
            if (key_matches && same < 0) same = (ptrdiff_t)i;
            continue;
        }
        if (key_matches) return (ptrdiff_t)i;
        if (newest < 0) newest = (ptrdiff_t)i;
    }
    return newest >= 0 ? newest : same;
}

static void table_release(PyObject *array, int32_t exclusive) {
    const pyxbuf_shared_api *api = table_or_unraisable(array);
    if (api == NULL) return;
    pyxbuf_borrow_key now; /* read before locking: getting it may run Python code */
    int known = array_key(array, &now) == 0;
    if (!known) PyErr_Clear();
    int64_t token = 0;
    pthread_mutex_lock(&numpy_borrow_lock);
    ptrdiff_t i = find_borrow(array, exclusive, known ? &now : NULL);
    if (i >= 0) {
        token = numpy_borrows[i].token;
        numpy_borrows[i] = numpy_borrows[--numpy_borrow_count];
    }
    pthread_mutex_unlock(&numpy_borrow_lock);
    if (token != 0) api->borrow_release(token);
}

static int pyxbuf_table_acquire(void *flags, PyObject *array) {
    (void)flags;
    return table_acquire(array, 0);
}

static int pyxbuf_table_acquire_mut(void *flags, PyObject *array) {
    (void)flags;
    if (!(((const numpy_array_head *)array)->flags & NUMPY_WRITEABLE)) return -2;
    return table_acquire(array, 1);
}

static void pyxbuf_table_release(void *flags, PyObject *array) {
    (void)flags;
    table_release(array, 0);
}

static void pyxbuf_table_release_mut(void *flags, PyObject *array) {
    (void)flags;
    table_release(array, 1);
}

static rust_numpy_api pyxbuf_table = {
    .version = 1,
    .flags = NULL,
    .acquire = pyxbuf_table_acquire,
    .acquire_mut = pyxbuf_table_acquire_mut,
    .release = pyxbuf_table_release,
    .release_mut = pyxbuf_table_release_mut,
};

/* ------------------------------------------------------------------------- */
/* Finding the table                                                         */
/* ------------------------------------------------------------------------- */

#define TABLE_UNKNOWN 0
#define TABLE_PYXBUF 1 /* pyxbuf's (this copy's or another's): nothing to add */
#define TABLE_RUST_NUMPY 2

/* Found once; on free-threaded builds two threads may find it at once (both
 * find the same table) and others read it meanwhile: rust_numpy_table is
 * stored before table_kind publishes it. */
static int table_kind = TABLE_UNKNOWN;
int pyxbuf__rust_numpy_table_is_ours = 0;
static const rust_numpy_api *rust_numpy_table;
static PyObject *ndarray_type; /* numpy.ndarray, a static type */

static void found_table(int kind, const rust_numpy_api *api) {
    PYXBUF__FT_STORE_RELAXED(&rust_numpy_table, api);
    PYXBUF__FT_STORE_RELEASE(&table_kind, kind);
    if (kind == TABLE_PYXBUF) PYXBUF__FT_STORE_RELEASE(&pyxbuf__rust_numpy_table_is_ours, 1);
}

/* NumPy's major version from numpy.__version__ ("1.26.4" -> 1), 0 if unknown. */
static long numpy_major(void) {
    PyObject *numpy = PyImport_ImportModule("numpy");
    PyObject *version = numpy ? PyObject_GetAttrString(numpy, "__version__") : NULL;
    const char *text = version && PyUnicode_Check(version) ? PyUnicode_AsUTF8(version) : NULL;
    long major = text ? strtol(text, NULL, 10) : 0;
    Py_XDECREF(version);
    Py_XDECREF(numpy);
    PyErr_Clear();
    return major;
}

/* The module rust-numpy keeps its table in, chosen as rust-numpy chooses
 * it (by NumPy's version, not by which module imports): numpy._core.multiarray
 * on NumPy 2, numpy.core.multiarray on NumPy 1 -- whose numpy._core is a
 * separate forwarding module (1.26), so a table put there would be a second
 * table, and borrows through the two would not exclude each other. New
 * reference or NULL (no error). */
static PyObject *multiarray_module(void) {
    const char *name = numpy_major() >= 2 ? "numpy._core.multiarray" : "numpy.core.multiarray";
    PyObject *m = PyImport_ImportModule(name);
    if (m == NULL) PyErr_Clear();
    return m;
}

/* Decide, once, whose table borrows go through. -1 with an exception set. */
static int find_table(void) {
    PyObject *module = multiarray_module();
    if (module == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pyxbuf: NumPy is imported but its multiarray module is not found; "
                        "cannot share borrows with rust-numpy");
        return -1;
    }
    PyObject *capsule = PyObject_GetAttrString(module, CAPSULE_NAME);
    if (capsule == NULL) {
        PyErr_Clear();
        capsule = PyCapsule_New(&pyxbuf_table, CAPSULE_NAME, NULL);
        int rc = capsule == NULL ? -1 : PyCapsule_SetContext(capsule, (void *)CONTEXT_MARK);
        if (rc == 0) rc = PyObject_SetAttrString(module, CAPSULE_NAME, capsule);
        Py_XDECREF(capsule);
        Py_DECREF(module);
        if (rc < 0) return -1;
        found_table(TABLE_PYXBUF, NULL);
        return 0;
    }
    Py_DECREF(module);
    const rust_numpy_api *api = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    const char *context = api != NULL ? PyCapsule_GetContext(capsule) : NULL;
    /* The capsule stays in NumPy's module for the process (rust-numpy leaks
     * a reference to it too), so the table pointer outlives this reference. */
    Py_DECREF(capsule);
    if (api == NULL) return -1;
    if (context != NULL && strcmp(context, CONTEXT_MARK) == 0) {
        found_table(TABLE_PYXBUF, NULL);
        return 0;
    }
    if (api->version < 1) {
        PyErr_Format(PyExc_RuntimeError,
                     "pyxbuf: NumPy's %s is version %llu; pyxbuf shares borrows with version 1 "
                     "and later (load a newer rust-numpy extension)",
                     CAPSULE_NAME, (unsigned long long)api->version);
        return -1;
    }
    found_table(TABLE_RUST_NUMPY, api);
    return 0;
}

/* 1 if `obj` is a NumPy array; 0 when not (or NumPy is not imported). */
/* Whether a type named numpy.ndarray is in tp's MRO: until NumPy's type is
 * found, only such objects can be arrays (and asking sys.modules for every
 * bytes object would cost more than the rest of its acquisition). */
static int named_ndarray_in_mro(PyTypeObject *tp) {
#if PYXBUF_LIMITED
    PyObject *mro = PyObject_GetAttrString((PyObject *)tp, "__mro__");
    if (mro == NULL) PyErr_Clear();
#else
    PyObject *mro = tp->tp_mro;
#endif
    int found = 0;
    if (mro != NULL && PyTuple_Check(mro)) {
        for (Py_ssize_t i = 0; !found && i < PyTuple_GET_SIZE(mro); i++) {
            const char *name = PYXBUF__TP_NAME((PyTypeObject *)PyTuple_GET_ITEM(mro, i));
            found = strcmp(name, "numpy.ndarray") == 0;
        }
    }
#if PYXBUF_LIMITED
    Py_XDECREF(mro);
#endif
    return found;
}

/* The last type found not to be an array (borrow.h says why the pair names
 * one type). */
PyTypeObject *pyxbuf__rust_numpy_other_type;
unsigned int pyxbuf__rust_numpy_other_tag;

static PyObject *numpy_name;

static void remember_other(PyTypeObject *tp, unsigned int tag) {
#if PYXBUF_LIMITED
    /* The tag is the type's address there (base/compat.h): the slot holds
     * the type, so that no other type takes the address while it answers. */
    if (tag == 0) return;
    PyTypeObject *old = pyxbuf__rust_numpy_other_type;
    pyxbuf__rust_numpy_other_type = (PyTypeObject *)Py_NewRef((PyObject *)tp);
    pyxbuf__rust_numpy_other_tag = tag;
    Py_XDECREF((PyObject *)old);
#else
    PYXBUF__FT_STORE_RELAXED(&pyxbuf__rust_numpy_other_type, tp);
    PYXBUF__FT_STORE_RELAXED(&pyxbuf__rust_numpy_other_tag, tag);
#endif
}

static int is_ndarray(PyObject *obj) {
    if (obj == NULL) return 0;
    if (pyxbuf__rust_numpy_known_other(obj)) return 0;
    PyTypeObject *tp = Py_TYPE(obj);
    unsigned int tag = pyxbuf__type_tag_to_store(tp);
    PyObject *ndarray = PYXBUF__FT_LOAD_ACQUIRE(&ndarray_type);
    if (ndarray == NULL && !named_ndarray_in_mro(tp)) {
        remember_other(tp, tag);
        return 0;
    }
    if (ndarray == NULL) {
        PyObject *np = PyImport_GetModule(pyxbuf__interned(&numpy_name, "numpy"));
        if (np == NULL) {
            PyErr_Clear();
            return 0; /* not imported: nothing can be an ndarray */
        }
        PyObject *found = PyObject_GetAttrString(np, "ndarray");
        Py_DECREF(np);
        if (found == NULL || !PyType_Check(found)) {
            Py_XDECREF(found);
            PyErr_Clear();
            return 0;
        }
        ndarray = pyxbuf__publish_once(&ndarray_type, found); /* kept: NumPy's static type */
    }
    if (PyObject_TypeCheck(obj, (PyTypeObject *)ndarray)) return 1;
    remember_other(tp, tag);
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Called by the tracked-borrow path                                         */
/* ------------------------------------------------------------------------- */

int pyxbuf__rust_numpy_acquire(pyxbuf_view *view, int32_t exclusive) {
    PyObject *array = view->base.obj;
    /* pyxbuf's own table (the common case): its borrows are the registry's. */
    int kind = PYXBUF__FT_LOAD_ACQUIRE(&table_kind);
    if (PYXBUF_LIKELY(kind == TABLE_PYXBUF)) return 0;
    if (!is_ndarray(array)) return 0;
    if (kind == TABLE_UNKNOWN && find_table() < 0) return -1;
    if (PYXBUF__FT_LOAD_ACQUIRE(&table_kind) != TABLE_RUST_NUMPY) return 0;
    const rust_numpy_api *t = PYXBUF__FT_LOAD_RELAXED(&rust_numpy_table);
    int rc = exclusive ? t->acquire_mut(t->flags, array) : t->acquire(t->flags, array);
    if (rc == 0) {
        view->reserved[0] = exclusive ? PYXBUF__RUST_NUMPY_EXCLUSIVE : PYXBUF__RUST_NUMPY_SHARED;
        return 0;
    }
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: cannot grant %s borrow of this NumPy array: %s; release the "
                 "rust-numpy borrow (PyReadonlyArray / PyReadwriteArray) first",
                 exclusive ? "an exclusive" : "a shared",
                 rc == -2 ? "rust-numpy says it is not writeable"
                 : exclusive ? "rust-numpy holds a borrow of it (a PyReadonlyArray or "
                               "PyReadwriteArray in some extension)"
                             : "rust-numpy holds an exclusive borrow of it (a PyReadwriteArray "
                               "in some extension)");
    return -1;
}

void pyxbuf__rust_numpy_release(pyxbuf_view *view) {
    int64_t kind = view->reserved[0];
    view->reserved[0] = 0;
    const rust_numpy_api *t = PYXBUF__FT_LOAD_ACQUIRE(&rust_numpy_table);
    if (kind == 0 || t == NULL) return;
    if (kind == PYXBUF__RUST_NUMPY_EXCLUSIVE)
        t->release_mut(t->flags, view->base.obj);
    else
        t->release(t->flags, view->base.obj);
}
