/* array_dict.h -- reading the dicts of NumPy's __array_interface__ and the
 * __cuda_array_interface__ (which shares its keys), for cai.c and
 * array_interface.c. Header-only (static inline): includes bridges/bridges.h.
 *
 * Every refusal is a BufferError whose message names the interface, the key,
 * what was found and what the producer must do; the bridge caller's context
 * (pyxbuf: <path> buffer of '<type>' refused ...) is added by acquire.c. */
#ifndef PYXBUF_ARRAY_DICT_H
#define PYXBUF_ARRAY_DICT_H

#include "bridges/bridges.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* Raise BufferError "pyxbuf: <iface>: <message>" and return -1. */
static inline int pyxbuf__dict_fail(const char *iface, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (msg == NULL) return -1;
    PyErr_Format(PyExc_BufferError, "pyxbuf: %s: %U", iface, msg);
    Py_DECREF(msg);
    return -1;
}

/* getattr(obj, name) that tells absence from failure: 1 and a new reference,
 * 0 when the attribute does not exist (AttributeError cleared), -1 on any
 * other exception (a property that raised something else). */
static inline int pyxbuf__optional_attr(PyObject *obj, PyObject *name, PyObject **out) {
    /* CPython's own lookup skips building an AttributeError (and formatting
     * its message) for types with the generic getattr, such as NumPy's. */
    return PyObject_GetOptionalAttr(obj, name, out);
}

/* The interned str for a key (a string literal: cached by its address, one
 * cache per including file, kept for the process). NULL with an exception. */
static inline PyObject *pyxbuf__dict_key(const char *key, int *owned) {
    static struct {
        const char *literal;
        PyObject *str;
    } cache[16];
    *owned = 0;
    for (size_t i = 0; i < sizeof cache / sizeof *cache; i++) {
        if (cache[i].literal == key) return cache[i].str;
        if (cache[i].literal == NULL) {
            PyObject *str = PyUnicode_InternFromString(key);
            if (str == NULL) return NULL;
            cache[i].str = str;
            cache[i].literal = key;
            return str;
        }
    }
    *owned = 1;
    return PyUnicode_FromString(key);
}

/* dict[key] as a borrowed reference: 1 found, 0 absent, -1 error.
 * `required` turns absence into a BufferError that says what the key must
 * hold (`must`). */
static inline int pyxbuf__dict_item(PyObject *dict, const char *iface, const char *key,
                                    const char *must, int required, PyObject **out) {
    int owned;
    PyObject *k = pyxbuf__dict_key(key, &owned);
    if (k == NULL) return -1;
    *out = PyDict_GetItemWithError(dict, k);
    if (owned) Py_DECREF(k);
    if (*out != NULL) return 1;
    if (PyErr_Occurred()) return -1;
    if (!required) return 0;
    return pyxbuf__dict_fail(iface,
                             "the key '%s' is missing; it must be %s (the producer must provide "
                             "it, see the interface's specification)",
                             key, must);
}

/* A Python int that is not a bool. */
static inline int pyxbuf__is_int(PyObject *o) { return PyLong_Check(o) && !PyBool_Check(o); }

/* 'version': an int in [lo, hi]. */
static inline int pyxbuf__dict_version(PyObject *dict, const char *iface, long lo, long hi,
                                       long *version) {
    PyObject *v;
    int rc = pyxbuf__dict_item(dict, iface, "version", "an int", 1, &v);
    if (rc <= 0) return -1;
    if (!pyxbuf__is_int(v))
        return pyxbuf__dict_fail(iface, "'version' must be an int, found '%s' (%.100R)",
                                 PYXBUF__TYPE_NAME(v), v);
    int overflow = 0;
    *version = PyLong_AsLongAndOverflow(v, &overflow);
    if (*version == -1 && PyErr_Occurred()) return -1;
    if (!overflow && *version >= lo && *version <= hi) return 0;
    if (lo == hi)
        return pyxbuf__dict_fail(iface,
                                 "'version' is %R, but pyxbuf reads only version %ld; ask the "
                                 "producer for version %ld",
                                 v, hi, hi);
    return pyxbuf__dict_fail(iface,
                             "'version' is %R, which pyxbuf does not know (it reads versions "
                             "%ld to %ld); upgrade pyxbuf or ask the producer for version %ld",
                             v, lo, hi, hi);
}

/* 'shape': a tuple (or list) of non-negative ints, at most PYXBUF_MAX_NDIM. */
static inline int pyxbuf__dict_shape(PyObject *dict, const char *iface, Py_ssize_t *shape,
                                     int *ndim) {
    PyObject *s;
    int rc = pyxbuf__dict_item(dict, iface, "shape", "a tuple of ints", 1, &s);
    if (rc <= 0) return -1;
    if (!PyTuple_Check(s) && !PyList_Check(s))
        return pyxbuf__dict_fail(iface, "'shape' must be a tuple of ints, found '%s' (%.100R)",
                                 PYXBUF__TYPE_NAME(s), s);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(s);
    if (n > PYXBUF_MAX_NDIM)
        return pyxbuf__dict_fail(iface,
                                 "'shape' has %zd dimensions; pyxbuf accepts at most %d (NumPy's "
                                 "limit): reshape the array first",
                                 n, PYXBUF_MAX_NDIM);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(s, i);
        if (!pyxbuf__is_int(e))
            return pyxbuf__dict_fail(iface, "'shape'[%zd] must be an int, found '%s' (%.100R)", i,
                                     PYXBUF__TYPE_NAME(e), e);
        shape[i] = PyLong_AsSsize_t(e);
        if (shape[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return pyxbuf__dict_fail(iface, "'shape'[%zd] = %R does not fit a Py_ssize_t", i, e);
        }
        if (shape[i] < 0)
            return pyxbuf__dict_fail(iface,
                                     "'shape'[%zd] is negative (%zd); every extent must be >= 0",
                                     i, shape[i]);
    }
    *ndim = (int)n;
    return 0;
}

/* Items in `shape`, or -1 when the count overflows a Py_ssize_t. */
static inline Py_ssize_t pyxbuf__dict_count(const Py_ssize_t *shape, int ndim) {
    Py_ssize_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) return 0;
        if (n > PY_SSIZE_T_MAX / shape[i]) n = -1;
        if (n >= 0) n *= shape[i];
    }
    return n;
}

/* 'strides': absent or None = C-contiguous (computed here), else a tuple of
 * ndim ints in bytes (negative allowed, as NumPy allows). */
static inline int pyxbuf__dict_strides(PyObject *dict, const char *iface, int ndim,
                                       const Py_ssize_t *shape, Py_ssize_t itemsize,
                                       Py_ssize_t *strides) {
    PyObject *s;
    int rc = pyxbuf__dict_item(dict, iface, "strides", "", 0, &s);
    if (rc < 0) return -1;
    if (rc == 0 || s == Py_None) {
        Py_ssize_t step = itemsize;
        for (int i = ndim - 1; i >= 0; i--) {
            strides[i] = step;
            if (shape[i] != 0 && step > PY_SSIZE_T_MAX / shape[i]) step = 0; /* count overflows:
                                                                                 refused later */
            step *= shape[i];
        }
        return 0;
    }
    if (!PyTuple_Check(s) && !PyList_Check(s))
        return pyxbuf__dict_fail(iface,
                                 "'strides' must be None (C-contiguous) or a tuple of ints in "
                                 "bytes, found '%s' (%.100R)",
                                 PYXBUF__TYPE_NAME(s), s);
    if (PySequence_Fast_GET_SIZE(s) != ndim)
        return pyxbuf__dict_fail(iface,
                                 "'strides' has %zd %s but 'shape' has %d; give one stride "
                                 "per dimension",
                                 PySequence_Fast_GET_SIZE(s),
                                 PYXBUF__PLURAL(PySequence_Fast_GET_SIZE(s), "entry", "entries"),
                                 ndim);
    for (int i = 0; i < ndim; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(s, i);
        if (!pyxbuf__is_int(e))
            return pyxbuf__dict_fail(iface, "'strides'[%d] must be an int, found '%s' (%.100R)",
                                     i, PYXBUF__TYPE_NAME(e), e);
        strides[i] = PyLong_AsSsize_t(e);
        if (strides[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return pyxbuf__dict_fail(iface, "'strides'[%d] = %R does not fit a Py_ssize_t", i, e);
        }
    }
    return 0;
}

/* 'data': a (pointer: int, read_only: bool) tuple. */
static inline int pyxbuf__dict_data(PyObject *dict, const char *iface, uintptr_t *ptr,
                                    int *readonly) {
    PyObject *d;
    int rc = pyxbuf__dict_item(dict, iface, "data", "a (pointer, read_only) tuple", 1, &d);
    if (rc <= 0) return -1;
    if (!PyTuple_Check(d) || PyTuple_GET_SIZE(d) != 2)
        return pyxbuf__dict_fail(iface,
                                 "'data' must be a (pointer: int, read_only: bool) tuple, found "
                                 "'%s' (%.100R)",
                                 PYXBUF__TYPE_NAME(d), d);
    PyObject *p = PyTuple_GET_ITEM(d, 0), *ro = PyTuple_GET_ITEM(d, 1);
    if (!pyxbuf__is_int(p))
        return pyxbuf__dict_fail(iface,
                                 "'data'[0] (the pointer) must be an int, found '%s' (%.100R)",
                                 PYXBUF__TYPE_NAME(p), p);
    if (!PyBool_Check(ro) && !PyLong_Check(ro))
        return pyxbuf__dict_fail(iface,
                                 "'data'[1] (read_only) must be a bool, found '%s' (%.100R)",
                                 PYXBUF__TYPE_NAME(ro), ro);
    unsigned long long value = PyLong_AsUnsignedLongLong(p);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return pyxbuf__dict_fail(iface,
                                 "'data'[0] = %R is not an address (negative or too large)", p);
    }
    if (value > UINTPTR_MAX)
        return pyxbuf__dict_fail(iface, "'data'[0] = %R does not fit a pointer", p);
    int flag = PyObject_IsTrue(ro);
    if (flag < 0) return -1;
    *ptr = (uintptr_t)value;
    *readonly = flag;
    return 0;
}

/* 'mask': absent or None. */
static inline int pyxbuf__dict_no_mask(PyObject *dict, const char *iface) {
    PyObject *m;
    int rc = pyxbuf__dict_item(dict, iface, "mask", "", 0, &m);
    if (rc < 0) return -1;
    if (rc == 0 || m == Py_None) return 0;
    return pyxbuf__dict_fail(iface,
                             "'mask' is set (%.100R): masked arrays are not supported; fill the "
                             "masked items and export the data alone",
                             m);
}

/* The number in a typestr after its byte-order and kind characters
 * ("<f4" -> 4); -1 when it is not a positive decimal. */
static inline int64_t pyxbuf__typestr_size(const char *digits) {
    int64_t n = 0;
    if (*digits == '\0') return -1;
    for (const char *c = digits; *c; c++) {
        if (*c < '0' || *c > '9' || n > (INT64_MAX - 9) / 10) return -1;
        n = n * 10 + (*c - '0');
    }
    return n > 0 ? n : -1;
}

/* 1 when a typestr byte-order character means the machine's opposite order. */
static inline int pyxbuf__typestr_swapped(char order) {
#if PY_LITTLE_ENDIAN
    return order == '>';
#else
    return order == '<';
#endif
}

#endif
