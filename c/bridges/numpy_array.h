/* numpy_array.h -- NumPy arrays read from their struct (PYXBUF_PATH_NUMPY):
 * the view NumPy's classic export would hand back, field for field, without
 * calling it.
 *
 * Why: NumPy's bf_getbuffer rebuilds a format string and a shape/strides
 * record for every export and files it in a per-array list (numpy/_core/src/
 * multiarray/buffer.c, _buffer_get_info): about 500 instructions, half of an
 * array argument's whole cost. Everything that record says is in the array's
 * struct, whose leading members NumPy's C API publishes (PyArrayObject_fields
 * in numpy/ndarraytypes.h: data, nd, dimensions, strides, base, descr, flags;
 * the same in NumPy 1.x and 2.x) and which rust-numpy and Cython read
 * directly too.
 *
 * What this route reads, and what it leaves to NumPy's export (return 0, and
 * the classic path runs as before, with NumPy's own errors and warnings):
 * - exactly numpy.ndarray (not a subclass: a subclass may export otherwise),
 *   once numpy_array.c has checked the type and NumPy's C ABI version (2.x);
 * - a built-in numeric dtype (bool, integers, floats, complex, half, long
 *   double) without fields (np.dtype((np.int32, {'lo': ...})) keeps int32's
 *   type number, but NumPy exports it as the struct its fields describe) of
 *   the item size pyxbuf's table says, in native byte order and
 *   aligned ('|' for one-byte types): NumPy's export then writes the bare
 *   struct code, as the table below; other byte orders and unaligned arrays
 *   get a prefix ("=f", ">f");
 * - or a NumPy user dtype (ml_dtypes' bfloat16, float8, ...; any other whose
 *   custom type pyxbuf's format registry knows), native and aligned, not
 *   warn-on-write for a writable request, without fields: read as NumPy
 *   has no export for them, with the answer the __array_interface__ bridge
 *   gives (its format "[ml_dtypes$bfloat16]", ndim 1 without PyBUF_ND), so
 *   that a request gets one answer whichever path reads it;
 * - up to PYXBUF_INLINE_NDIM dimensions (the view's own storage: NumPy may
 *   swap its dimensions array when Python code sets `a.shape`);
 * - a request NumPy would grant: its contiguity checks pass, and a writable
 *   one finds the array writeable without NPY_ARRAY_WARN_ON_WRITE (NumPy's
 *   export warns and clears that flag, which only it should do).
 * As NumPy's export does: readonly when not writeable or warn-on-write;
 * contiguous arrays get the strides their contiguity implies (NumPy
 * normalizes the strides of length-1 dimensions); no shape or strides at
 * ndim 0; a new reference to the array, and nothing else to release (NumPy's
 * type has no bf_releasebuffer, which the check requires, so release is
 * PyBuffer_Release's decref, as for the classic path). */
#ifndef PYXBUF_BRIDGES_NUMPY_ARRAY_H
#define PYXBUF_BRIDGES_NUMPY_ARRAY_H

#include "format/format.h"
#include "view/view.h"

#include <string.h>

/* The leading members of NumPy's PyArrayObject_fields and PyArray_Descr
 * (numpy/ndarraytypes.h), as far as this route reads them. */
typedef struct pyxbuf__numpy_array {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions; /* npy_intp */
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} pyxbuf__numpy_array;

typedef struct pyxbuf__numpy_descr {
    PyObject_HEAD
    PyTypeObject *typeobj;
    char kind, type, byteorder, former_flags;
    int type_num;
    uint64_t flags;     /* NumPy 2.x (the C ABI numpy_array.c checks) */
    Py_ssize_t elsize;  /* npy_intp */
    /* The rest of _PyArray_LegacyDescr, which every built-in type number's
     * descriptor is: */
    Py_ssize_t alignment;
    PyObject *metadata;
    Py_hash_t hash;
    void *reserved_null[2];
    void *subarray;
    PyObject *fields;
    PyObject *names; /* NULL unless the dtype has fields */
} pyxbuf__numpy_descr;

/* NumPy's array flags (numpy/ndarraytypes.h). */
#define PYXBUF__NPY_C_CONTIGUOUS 0x0001
#define PYXBUF__NPY_F_CONTIGUOUS 0x0002
#define PYXBUF__NPY_ALIGNED 0x0100
#define PYXBUF__NPY_WRITEABLE 0x0400
#define PYXBUF__NPY_WARN_ON_WRITE ((int)(1u << 31))

/* numpy.ndarray once numpy_array.c has checked it (a strong reference kept
 * for the process), else NULL: the route is off. */
extern PYXBUF_HIDDEN PyTypeObject *pyxbuf__numpy_ndarray;

/* numpy_array.c: if `type` is numpy.ndarray and the route may read it (the
 * checks above), turn the route on; otherwise leave it off for good. Called
 * on the slow path for any type, the first time one named numpy.ndarray is
 * seen; no error escapes (a failed check is an answer). */
void pyxbuf__numpy_array_discover(PyTypeObject *type);

/* Whether `type` is numpy.ndarray with the route on, for the slow paths
 * (the type cache's fill, an uncached acquisition): until the route is on,
 * a type of that name turns it on first. */
static inline int pyxbuf__numpy_array_type(PyTypeObject *type) {
    PyTypeObject *ndarray = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__numpy_ndarray);
    if (ndarray == NULL && strcmp(PYXBUF__TP_NAME(type), "numpy.ndarray") == 0) {
        pyxbuf__numpy_array_discover(type);
        ndarray = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__numpy_ndarray);
    }
    return type == ndarray;
}

/* The struct code and item size of each built-in dtype NumPy exports with a
 * bare code, indexed by type_num (NPY_BOOL 0 ... NPY_CLONGDOUBLE 16, NPY_HALF
 * 23); NULL: not this route. NPY_LONG is 'l', as NumPy writes it for native
 * aligned arrays. */
typedef struct pyxbuf__numpy_code {
    const char *format;
    Py_ssize_t itemsize;
    /* ndim without PyBUF_ND: 0 as NumPy's own export says it; 1 for user
     * dtypes, which NumPy does not export, as CPython's producers and the
     * __array_interface__ bridge say it (one flat run). */
    int flat_ndim;
} pyxbuf__numpy_code;

#define PYXBUF__NUMPY_NCODES 24
extern PYXBUF_HIDDEN const pyxbuf__numpy_code pyxbuf__numpy_codes[PYXBUF__NUMPY_NCODES];

/* NumPy's *user* dtypes (legacy ones, numbered from NPY_USERDEF = 256 in
 * registration order: ml_dtypes' bfloat16, float8, ... and any other
 * library's), read like the built-in ones with the custom format pyxbuf
 * gives them ("[ml_dtypes$bfloat16]", "[module$name]" of the dtype's scalar
 * type, the __array_interface__ bridge's rule). The current record of each
 * type number (numpy_array.c, pyxbuf__numpy_user_learn): the scalar type it
 * was learnt from (a strong reference, so its address names it), the code
 * (format NULL: not this route; the bridge answers or refuses) and the
 * format registry's generation it is valid for (a registration may change a
 * size: the record is learnt again).
 *
 * Lifetime: a reader holds a record, without a lock, on any thread of a
 * free-threaded build, and a view keeps its format pointer for as long as
 * the view lives. So records and their format strings are never freed; they
 * are reused instead. A registry change re-stamps `generation` of the type
 * number's record with the same content (type, itemsize, format), made once,
 * and publishes it again: a type number has at most a few records, whatever
 * the registry does (numpy_array.c, USER_RECORDS_MAX). Everything but
 * `generation` is immutable once published; `generation` is written in
 * place (PYXBUF__FT_*_RELAXED), only with a generation the record's content
 * was learnt at and never lowered, and a reader uses a record only when it
 * holds the registry's generation now (which never repeats): every stamp a
 * reader sees vouches for the content it reads. */
#define PYXBUF__NPY_USERDEF 256
#define PYXBUF__NUMPY_NUSER 64
typedef struct pyxbuf__numpy_user {
    PyTypeObject *typeobj;
    pyxbuf__numpy_code code;
    uint64_t generation;
} pyxbuf__numpy_user;
extern PYXBUF_HIDDEN const pyxbuf__numpy_user *pyxbuf__numpy_users[PYXBUF__NUMPY_NUSER];
/* How many records numpy_array.c has allocated (none is freed): bounded
 * however often the format registry changes (the tests read it). */
extern PYXBUF_HIDDEN size_t pyxbuf__numpy_user_records;

/* The code of descriptor d: the built-in table's for type numbers below
 * PYXBUF__NUMPY_NCODES; a user dtype's learnt record when it is for d's
 * scalar type and the registry's generation now; else NULL. */
static PYXBUF_ALWAYS_INLINE const pyxbuf__numpy_code *
pyxbuf__numpy_code_of(const pyxbuf__numpy_descr *d) {
    unsigned type_num = (unsigned)d->type_num;
    if (PYXBUF_LIKELY(type_num < PYXBUF__NUMPY_NCODES)) return &pyxbuf__numpy_codes[type_num];
    unsigned u = type_num - PYXBUF__NPY_USERDEF;
    if (u >= PYXBUF__NUMPY_NUSER) return NULL;
    const pyxbuf__numpy_user *rec = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__numpy_users[u]);
    if (rec == NULL || rec->typeobj != d->typeobj ||
        PYXBUF__FT_LOAD_RELAXED(&rec->generation) !=
            atomic_load_explicit(&pyxbuf__dtype_registry_generation, memory_order_relaxed))
        return NULL;
    return &rec->code;
}

/* numpy_array.c: the record of obj's dtype (obj an exact numpy.ndarray) when
 * it is a user dtype without one for the registry's generation now: 1 when a
 * record that the route reads was written (read the array again), else 0.
 * No error escapes (a dtype pyxbuf cannot name is an answer: not this route). */
int pyxbuf__numpy_user_learn(PyObject *obj);

/* 1 when NumPy would refuse the request `flags` on an array with NumPy flags
 * `af` (array_getbuffer's checks, in its order), else 0. */
static inline int pyxbuf__numpy_refuses(int af, int flags) {
    /* The common request (strides, no contiguity demand, read-only) passes
     * every check: one test. The contiguity bits beyond PyBUF_STRIDES are
     * 0x20 (C), 0x40 (F) and 0x80 (any). */
    if (PYXBUF_LIKELY((flags & (0xE0 | PyBUF_WRITABLE | PyBUF_STRIDES)) == PyBUF_STRIDES)) return 0;
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !(af & PYXBUF__NPY_C_CONTIGUOUS))
        return 1;
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !(af & PYXBUF__NPY_F_CONTIGUOUS))
        return 1;
    if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS &&
        !(af & (PYXBUF__NPY_C_CONTIGUOUS | PYXBUF__NPY_F_CONTIGUOUS)))
        return 1;
    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !(af & PYXBUF__NPY_C_CONTIGUOUS)) return 1;
    if ((flags & PyBUF_WRITABLE) &&
        (af & (PYXBUF__NPY_WRITEABLE | PYXBUF__NPY_WARN_ON_WRITE)) != PYXBUF__NPY_WRITEABLE)
        return 1;
    return 0;
}

/* Shape and strides into the view's inline storage, with NumPy's stride
 * normalization for contiguous arrays; the item count. */
static PYXBUF_ALWAYS_INLINE Py_ssize_t pyxbuf__numpy_dims(const pyxbuf__numpy_array *a, int af,
                                                          int flags, Py_ssize_t itemsize,
                                                          Py_ssize_t *shape, Py_ssize_t *strides) {
    int nd = a->nd;
    Py_ssize_t count = 1;
    int f_asked = (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS;
    if ((af & PYXBUF__NPY_C_CONTIGUOUS) && !(f_asked && (af & PYXBUF__NPY_F_CONTIGUOUS))) {
        for (int k = nd - 1; k >= 0; k--) {
            shape[k] = a->dimensions[k];
            strides[k] = itemsize * count;
            count *= shape[k];
        }
    } else if (af & PYXBUF__NPY_F_CONTIGUOUS) {
        for (int k = 0; k < nd; k++) {
            shape[k] = a->dimensions[k];
            strides[k] = itemsize * count;
            count *= shape[k];
        }
    } else {
        for (int k = 0; k < nd; k++) {
            shape[k] = a->dimensions[k];
            strides[k] = a->strides[k];
            count *= shape[k];
        }
    }
    return count;
}

/* The view of `obj`, an exact numpy.ndarray, for the classic request
 * `flags`: 1 filled (base.obj a new reference, path NUMPY; the extended
 * fields are the caller's), 0 not this route (nothing done). */
static PYXBUF_ALWAYS_INLINE int pyxbuf__numpy_array_read(PyObject *obj, pyxbuf_view *view,
                                                         int flags) {
    const pyxbuf__numpy_array *a = (const pyxbuf__numpy_array *)obj;
    int rc = 0;
    /* NumPy's export reads the array under its critical section (setting
     * `a.shape` swaps the dimensions); so does this. */
    Py_BEGIN_CRITICAL_SECTION(obj);
    const pyxbuf__numpy_descr *d = (const pyxbuf__numpy_descr *)a->descr;
    int af = a->flags;
    int nd = a->nd;
    const pyxbuf__numpy_code *code = pyxbuf__numpy_code_of(d);
    /* The table's size is checked against NumPy's (long double differs
     * between compilers); '|' is NumPy's order for one-byte types only (a
     * descriptor unpickled with '|' on a wider one gets standard-size codes
     * from NumPy's export). */
    if (PYXBUF_LIKELY(code != NULL && code->format != NULL &&
                      code->itemsize == d->elsize && (unsigned)nd <= PYXBUF_INLINE_NDIM &&
                      (d->byteorder == '|' ? code->itemsize == 1
                                           : d->byteorder == '=' && (af & PYXBUF__NPY_ALIGNED)) &&
                      d->names == NULL && !pyxbuf__numpy_refuses(af, flags))) {
        Py_buffer *b = &view->base;
        Py_ssize_t *shape = view->inline_dims, *strides = view->inline_dims + PYXBUF_INLINE_NDIM;
        Py_ssize_t count = pyxbuf__numpy_dims(a, af, flags, code->itemsize, shape, strides);
        b->buf = a->data;
        b->obj = Py_NewRef(obj);
        b->len = count * code->itemsize;
        b->itemsize = code->itemsize;
        b->readonly = (af & (PYXBUF__NPY_WRITEABLE | PYXBUF__NPY_WARN_ON_WRITE)) !=
                      PYXBUF__NPY_WRITEABLE;
        b->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? (char *)code->format : NULL;
        int nd_asked = (flags & PyBUF_ND) == PyBUF_ND;
        b->ndim = nd_asked ? nd : code->flat_ndim;
        b->shape = nd_asked && nd > 0 ? shape : NULL;
        b->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES && nd > 0 ? strides : NULL;
        b->suboffsets = NULL;
        b->internal = NULL;
        view->path = PYXBUF_PATH_NUMPY;
        rc = 1;
    }
    Py_END_CRITICAL_SECTION();
    return rc;
}

#endif
