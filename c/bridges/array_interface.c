/* array_interface.c -- NumPy arrays of user dtypes through __array_interface__
 * (DESIGN.md, Acquisition, item 5).
 *
 * ml_dtypes' bfloat16, float8_*, float6_*, float4_*, int2/int4 and friends
 * are NumPy *user* dtypes: NumPy refuses them in a classic buffer ("cannot
 * include dtype 'E' in a buffer") and in DLPack before NumPy 2.5's dtype
 * registration. Their arrays still describe themselves through
 * __array_interface__ (version 3): pointer, shape, strides; what the typestr
 * cannot say ('<V2' for bfloat16, '<f1' for float8_e5m2) the dtype's scalar
 * type says: ml_dtypes.bfloat16 -> the custom format "[ml_dtypes$bfloat16]".
 *
 * Rules:
 * - The bridge applies only to objects whose `dtype` is a user dtype: its
 *   `num` is outside NumPy's built-in range 0..255 (legacy user dtypes are
 *   numbered from NPY_USERDEF = 256, new-style DTypes have -1) AND its scalar
 *   type (`dtype.type`) is defined outside NumPy and builtins (which rules out
 *   NumPy's own StringDType, numbered 2056, whose type is str). Everything
 *   else returns 0 and is left to the other paths. No NumPy C API is used.
 * - The format is "[{dtype.type.__module__}${dtype.type.__name__}]", both
 *   of the characters the parser allows in a custom type (format/format.h:
 *   printable ASCII but ']', ';' and '$'; a space or '[' is fine); pyxbuf's
 *   format registry must know its size, and that size must equal
 *   dtype.itemsize and the typestr's: otherwise BufferError naming both (an
 *   unknown type is refused rather than exported opaque, with the key to
 *   register).
 * - Byte order comes from the typestr: a multi-byte item in the machine's
 *   opposite order gets the prefix (">[ml_dtypes$bfloat16]" on little-endian
 *   machines); native, '|' and one-byte items get none.
 * - version must be 3; 'data' must be a (pointer, read_only) tuple (the
 *   buffer-object form is not NumPy's and is refused); 'offset' applies only
 *   to that form in the specification, so a nonzero one next to a pointer is
 *   refused as ambiguous; 'mask' must be None; 'strides' None = C order.
 * - Zero-copy: the view's buf is the array's own pointer. The array keeps its
 *   memory alive and the view holds a reference to it (base.obj); the owner
 *   is a small holder for the format string and the dimensions beyond
 *   PYXBUF_INLINE_NDIM.
 */

#include "bridges/array_dict.h"
#include "base/fixes.h"
#include "format/format.h"

#include <stdio.h>
#include <string.h>

#define AI "__array_interface__"
#define NPY_USERDEF 256
#define NAME_MAX_LEN 200

/* ------------------------------------------------------------------------- */
/* Is this a user dtype?                                                     */
/* ------------------------------------------------------------------------- */

typedef struct names {
    PyObject *dtype, *num, *type, *module, *name, *itemsize, *iface;
} names;

static void names_free(names *n) {
    Py_XDECREF(n->dtype);
    Py_XDECREF(n->num);
    Py_XDECREF(n->type);
    Py_XDECREF(n->module);
    Py_XDECREF(n->name);
    Py_XDECREF(n->itemsize);
    Py_XDECREF(n->iface);
    PyMem_RawFree(n);
}

static const names *attr_names(void) {
    static void *published; /* a names, kept for the process */
    const names *p = PYXBUF__FT_LOAD_ACQUIRE(&published);
    if (PYXBUF_LIKELY(p != NULL)) return p;
    names *n = PyMem_RawCalloc(1, sizeof *n);
    if (n == NULL) return (const names *)PyErr_NoMemory();
    if ((n->dtype = PyUnicode_InternFromString("dtype")) == NULL ||
        (n->num = PyUnicode_InternFromString("num")) == NULL ||
        (n->type = PyUnicode_InternFromString("type")) == NULL ||
        (n->module = PyUnicode_InternFromString("__module__")) == NULL ||
        (n->name = PyUnicode_InternFromString("__name__")) == NULL ||
        (n->itemsize = PyUnicode_InternFromString("itemsize")) == NULL ||
        (n->iface = PyUnicode_InternFromString(AI)) == NULL) {
        names_free(n);
        return NULL;
    }
    p = pyxbuf__publish_ptr_once(&published, n);
    if (p != n) names_free(n); /* another thread published first */
    return p;
}

/* The user dtype of `obj`: 1 with its scalar type's module and name (new
 * references) and the dtype, 0 when obj has no user dtype, -1 on error. */
typedef struct user_dtype {
    PyObject *dtype, *module, *name;
} user_dtype;

static void user_dtype_clear(user_dtype *u) {
    Py_CLEAR(u->dtype);
    Py_CLEAR(u->module);
    Py_CLEAR(u->name);
}

typedef struct dtype_cache_entry dtype_cache_entry;
static int dtype_cache_find(PyObject *dtype, dtype_cache_entry *out);

static int find_user_dtype(PyObject *obj, const names *n, user_dtype *u) {
    PyObject *num = NULL, *type = NULL;
    memset(u, 0, sizeof *u);
    int rc = pyxbuf__optional_attr(obj, n->dtype, &u->dtype);
    if (rc <= 0) return rc;
    if (dtype_cache_find(u->dtype, NULL)) return 1; /* known: module and name unused */
    /* A dtype without these attributes is not NumPy's: not ours. */
    if ((rc = pyxbuf__optional_attr(u->dtype, n->num, &num)) <= 0) goto done;
    rc = 0;
    if (!pyxbuf__is_int(num)) goto done;
    long value = PyLong_AsLong(num);
    if (value == -1 && PyErr_Occurred()) PyErr_Clear();
    if (value >= 0 && value < NPY_USERDEF) goto done; /* a NumPy built-in */
    if ((rc = pyxbuf__optional_attr(u->dtype, n->type, &type)) <= 0) goto done;
    if ((rc = pyxbuf__optional_attr(type, n->module, &u->module)) <= 0) goto done;
    if ((rc = pyxbuf__optional_attr(type, n->name, &u->name)) <= 0) goto done;
    rc = 0;
    if (!PyUnicode_Check(u->module) || !PyUnicode_Check(u->name)) goto done;
    const char *module = PyUnicode_AsUTF8(u->module);
    if (module == NULL) {
        rc = -1;
        goto done;
    }
    rc = pyxbuf__numpy_owned_module(module) ? 0 : 1;
done:
    Py_XDECREF(num);
    Py_XDECREF(type);
    if (rc <= 0) user_dtype_clear(u);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* The format                                                                */
/* ------------------------------------------------------------------------- */

/* A part of the custom type "[module$name]" that the dtype's scalar type
 * names (`what`: "module" or "name"): 0 when it is 1 to NAME_MAX_LEN
 * characters that the custom-type rule (format/format.h, the parser's)
 * allows, else BufferError naming the first character it refuses. */
static int check_part(const user_dtype *u, const char *what, const char *s, Py_ssize_t len) {
    const char *bad = len > 0 ? pyxbuf__custom_type_bad_char(s, (size_t)len) : NULL;
    if (bad != NULL) {
        char cb[16];
        return pyxbuf__dict_fail(AI,
                                 "the dtype %.100R has the scalar type %.100R.%.100R, which "
                                 "cannot name a custom format type: its %s holds %s at "
                                 "position %zd, and a custom type's id and payload hold printable "
                                 "ASCII except ']', ';' and '$'; give the type a name without it",
                                 u->dtype, u->module, u->name, what,
                                 pyxbuf__fmt_char_desc((unsigned char)*bad, cb), bad - s);
    }
    if (len <= 0 || len > NAME_MAX_LEN)
        return pyxbuf__dict_fail(AI,
                                 "the dtype %.100R has the scalar type %.100R.%.100R, which "
                                 "cannot name a custom format type: its %s has %zd characters, "
                                 "not 1 to %d; give the type a shorter name",
                                 u->dtype, u->module, u->name, what, len, NAME_MAX_LEN);
    return 0;
}

/* What pyxbuf learnt of a user dtype: its format "[module$name]" (after a
 * slot for the byte-order prefix), in a holder every view of such an array
 * keeps alive, and its itemsize, which pyxbuf's registry agreed with at
 * `generation`. ml_dtypes' dtypes are a few long-lived singletons, and
 * finding one again costs five getattrs, string tests and a registry lookup.
 * The table keeps a reference to each dtype, so its address names it;
 * entries are replaced round-robin. A reader takes a copy with its own
 * reference to the holder: Python code that runs while the caller works
 * (another thread's lookup, or with the GIL off any thread) may replace the
 * entry. The table's lock exists on free-threaded builds only. */
typedef struct dtype_cache_entry {
    PyObject *dtype;
    PyObject *holder; /* the format, in a bridge holder: format[0] is the prefix slot */
    Py_ssize_t itemsize;
    uint64_t generation;
} dtype_cache_entry;

#define DTYPE_CACHE_SIZE 16
static dtype_cache_entry dtype_cache[DTYPE_CACHE_SIZE];
static unsigned dtype_cache_next;
PYXBUF__FT_MUTEX(dtype_cache_lock);

static const char *entry_format(const dtype_cache_entry *e) {
    return pyxbuf__holder_storage(e->holder);
}

/* 1 with a copy of the dtype's entry in *out (out->dtype borrowed, a new
 * reference to out->holder), else 0; `out` NULL: only whether it is there. */
static int dtype_cache_find(PyObject *dtype, dtype_cache_entry *out) {
    uint64_t now = atomic_load(&pyxbuf__dtype_registry_generation);
    int found = 0;
    PYXBUF__FT_LOCK(dtype_cache_lock);
    for (int i = 0; i < DTYPE_CACHE_SIZE && !found; i++) {
        if (dtype_cache[i].dtype != dtype || dtype_cache[i].generation != now) continue;
        found = 1;
        if (out != NULL) {
            *out = dtype_cache[i];
            Py_INCREF(out->holder);
        }
    }
    PYXBUF__FT_UNLOCK(dtype_cache_lock);
    return found;
}

/* Put `e` in the table, which takes its references; `e` keeps the caller's
 * (the holder's second reference, the caller's). The replaced entry's
 * references are dropped once the table is consistent again, unlocked. */
static void dtype_cache_put(const dtype_cache_entry *e) {
    Py_INCREF(e->holder);
    PYXBUF__FT_LOCK(dtype_cache_lock);
    dtype_cache_entry *slot = &dtype_cache[dtype_cache_next++ % DTYPE_CACHE_SIZE];
    dtype_cache_entry old = *slot;
    *slot = *e;
    PYXBUF__FT_UNLOCK(dtype_cache_lock);
    Py_XDECREF(old.holder);
    Py_XDECREF(old.dtype);
}

/* The prefix character that marks the byte order opposite to this machine's. */
static char swapped_prefix(void) { return pyxbuf__typestr_swapped('<') ? '<' : '>'; }

/* The dtype's half of the format: "[module$name]", checked against the
 * registry and the dtype's itemsize; written into e (not yet published). */
static int describe_dtype(const names *n, const user_dtype *u, dtype_cache_entry *e) {
    char format[2 * NAME_MAX_LEN + 8];
    Py_ssize_t mlen, nlen;
    const char *module = PyUnicode_AsUTF8AndSize(u->module, &mlen);
    const char *name = module ? PyUnicode_AsUTF8AndSize(u->name, &nlen) : NULL;
    if (name == NULL) return -1;
    if (check_part(u, "module", module, mlen) < 0 || check_part(u, "name", name, nlen) < 0)
        return -1;
    PyObject *size_obj = PyObject_GetAttr(u->dtype, n->itemsize);
    if (size_obj == NULL) return -1;
    Py_ssize_t dtype_size = pyxbuf__is_int(size_obj) ? PyLong_AsSsize_t(size_obj) : -1;
    Py_DECREF(size_obj);
    if (dtype_size == -1 && PyErr_Occurred()) return -1;
    int len = snprintf(format, sizeof format, "%c[%s$%s]", swapped_prefix(), module, name);
    if (len < 0 || (size_t)len >= sizeof format)
        return pyxbuf__dict_fail(AI, "the dtype's name is too long");
    int64_t registered = -1;
    pyxbuf_error err;
    uint64_t generation = atomic_load(&pyxbuf__dtype_registry_generation);
    if (pyxbuf_format_itemsize(format + 1, &registered, NULL, &err) < 0)
        return pyxbuf__dict_fail(AI,
                                 "the dtype %.100R is the custom type '%s$%s', whose size "
                                 "pyxbuf's format registry does not know (%s); register it "
                                 "(%s with key '%s$%s' and itemsize %zd) to read such arrays",
                                 u->dtype, module, name, err.message,
                                 pyxbuf__fix(PYXBUF__FIX_REGISTER_DTYPE_CALL), module, name,
                                 dtype_size);
    if (registered != dtype_size)
        return pyxbuf__dict_fail(AI,
                                 "the format '%s' has %lld-byte items in pyxbuf's registry, but "
                                 "the dtype %.100R says %zd %s; fix the registration of "
                                 "'%s$%s'",
                                 format + 1, (long long)registered, u->dtype, dtype_size,
                                 PYXBUF__PLURAL(dtype_size, "byte", "bytes"), module, name);
    if ((e->holder = pyxbuf__holder_new((size_t)len + 1, NULL)) == NULL) return -1;
    memcpy(pyxbuf__holder_storage(e->holder), format, (size_t)len + 1);
    e->dtype = Py_NewRef(u->dtype);
    e->itemsize = dtype_size;
    e->generation = generation;
    return 0;
}

/* The dict's half: 'typestr' must agree with the dtype's size, and its byte
 * order picks the prefix. *format points into the entry's holder. */
static int check_typestr(PyObject *dict, const dtype_cache_entry *e, const char **format) {
    PyObject *ts;
    if (pyxbuf__dict_item(dict, AI, "typestr", "a typestr such as '<V2'", 1, &ts) <= 0) return -1;
    const char *s = PyUnicode_Check(ts) ? PyUnicode_AsUTF8(ts) : NULL;
    if (s == NULL) {
        if (PyErr_Occurred()) return -1;
        return pyxbuf__dict_fail(AI, "'typestr' must be a str such as '<V2', found '%s' (%.100R)",
                                 PYXBUF__TYPE_NAME(ts), ts);
    }
    int64_t ts_size = s[0] && s[1] ? pyxbuf__typestr_size(s + 2) : -1;
    if (strchr("<>|=", s[0]) == NULL || s[0] == '\0' || ts_size < 0)
        return pyxbuf__dict_fail(AI,
                                 "'typestr' %R is not a typestr (byte order, kind, size in "
                                 "bytes, e.g. '<V2')",
                                 ts);
    if (ts_size != e->itemsize)
        return pyxbuf__dict_fail(AI,
                                 "the format '%s' has %zd-byte items (pyxbuf's registry and the "
                                 "dtype agree), but 'typestr' %R says %lld",
                                 entry_format(e) + 1, e->itemsize, ts, (long long)ts_size);
    *format = entry_format(e) + (ts_size > 1 && pyxbuf__typestr_swapped(s[0]) ? 0 : 1);
    return 0;
}

/* The entry for u's dtype, a copy holding a reference to its holder: the
 * table's, or a new one put in the table. The table is searched again
 * although find_user_dtype searched it: the getattr of __array_interface__ in
 * between may run Python that changes it. */
static int dtype_entry_of(const names *n, const user_dtype *u, dtype_cache_entry *e) {
    if (dtype_cache_find(u->dtype, e)) return 0;
    *e = (dtype_cache_entry){NULL, NULL, 0, 0};
    if (describe_dtype(n, u, e) < 0) return -1;
    dtype_cache_put(e);
    return 0;
}

/* ------------------------------------------------------------------------- */
/* The bridge                                                                */
/* ------------------------------------------------------------------------- */

/* 'offset': only meaningful for the buffer-object form of 'data'. */
static int check_offset(PyObject *dict) {
    PyObject *o;
    int rc = pyxbuf__dict_item(dict, AI, "offset", "", 0, &o);
    if (rc <= 0 || o == Py_None) return rc;
    if (pyxbuf__is_int(o)) {
        int zero = PyObject_Not(o);
        if (zero < 0) return -1;
        if (zero) return 0;
    }
    return pyxbuf__dict_fail(AI,
                             "'offset' is %.100R next to a pointer in 'data'; the specification "
                             "applies 'offset' only to buffer objects, so pyxbuf cannot tell "
                             "where the data starts: give the pointer of the first item and no "
                             "offset",
                             o);
}

/* Whether the layout's items follow one another in C order (`fortran` 0)
 * or Fortran order (1), dimensions of extent 1 aside; an empty array is
 * both (NumPy's flags, which its export follows). */
static int contiguous_in(int fortran, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                         Py_ssize_t itemsize) {
    Py_ssize_t expected = itemsize;
    int empty = 0;
    for (int k = 0; k < ndim; k++) empty |= shape[k] == 0;
    if (empty) return 1;
    for (int i = 0; i < ndim; i++) {
        int k = fortran ? i : ndim - 1 - i;
        if (shape[k] != 1 && strides[k] != expected) return 0;
        expected *= shape[k];
    }
    return 1;
}

/* The strides NumPy's own export hands out for this layout and request
 * (bridges/numpy_array.h, pyxbuf__numpy_dims): a contiguous array's are
 * the ones its contiguity implies -- Fortran's when PyBUF_F_CONTIGUOUS is
 * asked and the array is Fortran-contiguous (a zero-size (4, 0) array too,
 * whose dict says C order), else C's -- whatever the dict says of its
 * extent-1 dimensions. So the bridge and NumPy's struct route answer alike. */
static void numpy_strides(int flags, int ndim, const Py_ssize_t *shape, Py_ssize_t *strides,
                          Py_ssize_t itemsize) {
    int c = contiguous_in(0, ndim, shape, strides, itemsize);
    int f = contiguous_in(1, ndim, shape, strides, itemsize);
    int fortran = f && (!c || (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS);
    Py_ssize_t step = itemsize, normal[PYXBUF_MAX_NDIM];
    if (!c && !f) return;
    for (int i = 0; i < ndim; i++) {
        int k = fortran ? i : ndim - 1 - i;
        normal[k] = step;
        if (!PYXBUF__MUL_OK(step, shape[k], &step)) return; /* extents past an empty one */
    }
    memcpy(strides, normal, (size_t)ndim * sizeof *strides);
}

/* The dict read with the dtype's entry (which holds a reference to its
 * holder, the caller's). */
static int ai_import_entry(PyObject *obj, PyObject *dict, const dtype_cache_entry *entry,
                           pyxbuf_view *view, int32_t flags) {
    const char *fmt = NULL;
    int ndim = 0, readonly = 1;
    Py_ssize_t itemsize = entry->itemsize, shape[PYXBUF_MAX_NDIM], strides[PYXBUF_MAX_NDIM];
    uintptr_t ptr = 0;
    if (check_typestr(dict, entry, &fmt) < 0 ||
        pyxbuf__dict_shape(dict, AI, shape, &ndim) < 0 ||
        pyxbuf__dict_strides(dict, AI, ndim, shape, itemsize, strides) < 0 ||
        pyxbuf__dict_data(dict, AI, &ptr, &readonly) < 0 || check_offset(dict) < 0 ||
        pyxbuf__dict_no_mask(dict, AI) < 0)
        return -1;
    Py_ssize_t count = pyxbuf__dict_count(shape, ndim);
    if (count < 0 || (count > 0 && itemsize > PY_SSIZE_T_MAX / count))
        return pyxbuf__dict_fail(AI, "'shape' describes more bytes than can be addressed");
    if (ptr == 0 && count > 0)
        return pyxbuf__dict_fail(AI, "'data' holds a NULL pointer for %zd %s", count,
                                 PYXBUF__PLURAL(count, "item", "items"));
    numpy_strides(flags, ndim, shape, strides, itemsize);

    /* The view keeps the dtype entry's holder (its format) alive; views with
     * more dimensions than fit inline get a holder of their own for them and
     * a copy of the format. */
    size_t spill = ndim > PYXBUF_INLINE_NDIM ? 2 * (size_t)ndim * sizeof(Py_ssize_t) : 0;
    PyObject *holder;
    unsigned char *storage = NULL;
    const char *format = fmt;
    if (spill == 0) {
        holder = Py_NewRef(entry->holder);
    } else {
        size_t fmt_len = strlen(fmt) + 1;
        if ((holder = pyxbuf__holder_new(spill + fmt_len, NULL)) == NULL) return -1;
        storage = pyxbuf__holder_storage(holder);
        format = memcpy((char *)storage + spill, fmt, fmt_len);
    }
    Py_ssize_t *dims = pyxbuf__view_dims(view, ndim, (Py_ssize_t *)storage);
    memcpy(dims, shape, (size_t)ndim * sizeof(Py_ssize_t));
    memcpy(dims + ndim, strides, (size_t)ndim * sizeof(Py_ssize_t));

    pyxbuf_export_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.size = (uint32_t)sizeof desc;
    desc.ndim = ndim;
    desc.buf = (void *)ptr;
    desc.format = format;
    desc.itemsize = itemsize;
    desc.shape = dims;
    desc.strides = dims + ndim;
    desc.readonly = readonly;
    if (pyxbuf_export_fill(&view->base, obj, flags, &desc) < 0) {
        Py_DECREF(holder);
        return -1;
    }
    view->path = PYXBUF_PATH_ARRAY_INTERFACE;
    view->owner = holder;
    return 0;
}

static int ai_import(PyObject *obj, PyObject *dict, const names *n, const user_dtype *u,
                     pyxbuf_view *view, int32_t flags) {
    long version = 0;
    dtype_cache_entry entry;
    if (!PyDict_Check(dict))
        return pyxbuf__dict_fail(AI, "it must be a dict, found '%s'", PYXBUF__TYPE_NAME(dict));
    if (pyxbuf__dict_version(dict, AI, 3, 3, &version) < 0 || dtype_entry_of(n, u, &entry) < 0)
        return -1;
    int rc = ai_import_entry(obj, dict, &entry, view, flags);
    Py_DECREF(entry.holder);
    return rc;
}

int pyxbuf__array_interface_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                    int64_t stream) {
    (void)stream; /* host memory: nothing to order */
    const names *n = attr_names();
    if (n == NULL) return -1;
    user_dtype u;
    int rc = find_user_dtype(obj, n, &u);
    if (rc <= 0) return rc;
    PyObject *dict;
    rc = pyxbuf__optional_attr(obj, n->iface, &dict);
    if (rc > 0) {
        rc = ai_import(obj, dict, n, &u, view, flags) < 0 ? -1 : 1;
        Py_DECREF(dict);
    }
    user_dtype_clear(&u);
    return rc;
}
