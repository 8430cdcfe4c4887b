/* testext_format.c -- the format functions of the _pyxbuf_testext module:
 * format_parse, format_itemsize, format_write, dtype_register,
 * dtype_unregister, numpy_user_records, and the FormatError exception they
 * raise.
 *
 * Every pyxbuf error code raises FormatError (a ValueError), PYXBUF_EOVERFLOW
 * and PYXBUF_EUNSUPPORTED included, so that tests check one type and read the
 * code from `.code` and the byte position from `.position`. */
#include "pyxbuf.h"

#include <stdbool.h>
#include <string.h>

int pyxbuf_testext_add_format(PyObject *module);

static PyObject *format_error; /* _pyxbuf_testext.FormatError */

/* Raise FormatError(message) with .position and .code. Returns NULL. */
static PyObject *raise_format_error(int32_t code, int64_t position, const char *message) {
    PyObject *exc = PyObject_CallFunction(format_error, "s", message);
    if (exc == NULL) return NULL;
    PyObject *pos = PyLong_FromLongLong((long long)position);
    PyObject *cod = PyLong_FromLong((long)code);
    if (pos && cod && PyObject_SetAttrString(exc, "position", pos) == 0 &&
        PyObject_SetAttrString(exc, "code", cod) == 0)
        PyErr_SetObject(format_error, exc);
    Py_XDECREF(pos);
    Py_XDECREF(cod);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_error(const pyxbuf_error *err) {
    return raise_format_error(err->code, err->position, err->message);
}

/* The format argument: bytes (or str, UTF-8), without NUL bytes. */
static int format_arg(PyObject *arg, PyObject **holder, const char **fmt) {
    if (PyUnicode_Check(arg)) *holder = PyUnicode_AsUTF8String(arg);
    else if (PyBytes_Check(arg)) *holder = Py_NewRef(arg);
    else {
        PyErr_Format(PyExc_TypeError, "format must be bytes or str, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return -1;
    }
    if (*holder == NULL) return -1;
    const char *s = PyBytes_AS_STRING(*holder);
    Py_ssize_t n = PyBytes_GET_SIZE(*holder);
    const char *nul = memchr(s, '\0', (size_t)n);
    if (nul != NULL) {
        char msg[160];
        snprintf(msg, sizeof msg, "format contains a NUL byte at position %lld",
                 (long long)(nul - s));
        raise_format_error(PYXBUF_EFORMAT, nul - s, msg);
        Py_CLEAR(*holder);
        return -1;
    }
    *fmt = s;
    return 0;
}

static const char *kind_name(int32_t kind) {
    switch (kind) {
    case PYXBUF_FMT_ROOT: return "root";
    case PYXBUF_FMT_SCALAR: return "scalar";
    case PYXBUF_FMT_STRUCT: return "struct";
    case PYXBUF_FMT_CUSTOM: return "custom";
    case PYXBUF_FMT_PADDING: return "padding";
    default: return "unknown";
    }
}

/* A (pointer, length) string as str, or None when pointer is NULL. */
static PyObject *str_or_none(const char *s, Py_ssize_t n) {
    if (s == NULL) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, n, "surrogateescape");
}

static int set_item(PyObject *d, const char *key, PyObject *value) {
    if (value == NULL) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *node_dict(const pyxbuf_format *f, const pyxbuf_format_node *n) {
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    const int64_t *dims = pyxbuf_format_dims(f) + n->dims_start;
    PyObject *shape = PyTuple_New(n->ndim);
    if (shape == NULL) goto fail;
    for (int32_t i = 0; i < n->ndim; i++) {
        PyObject *v = PyLong_FromLongLong((long long)dims[i]);
        if (v == NULL) {
            Py_DECREF(shape);
            goto fail;
        }
        PyTuple_SET_ITEM(shape, i, v);
    }
    char code[2] = {(char)n->code, '\0'};
    char order[2] = {(char)n->byte_order, '\0'};
    const char *custom = n->kind == PYXBUF_FMT_CUSTOM ? n->custom : NULL;
    const char *alts = n->kind == PYXBUF_FMT_CUSTOM ? n->alternatives : NULL;
    if (set_item(d, "kind", PyUnicode_FromString(kind_name(n->kind))) < 0 ||
        set_item(d, "code", n->code ? PyUnicode_FromString(code) : Py_NewRef(Py_None)) < 0 ||
        set_item(d, "byte_order", PyUnicode_FromString(order)) < 0 ||
        set_item(d, "flags", PyLong_FromLong((long)n->flags)) < 0 ||
        set_item(d, "parent", PyLong_FromLong((long)n->parent)) < 0 ||
        set_item(d, "first_child", PyLong_FromLong((long)n->first_child)) < 0 ||
        set_item(d, "next", PyLong_FromLong((long)n->next)) < 0 ||
        set_item(d, "nchildren", PyLong_FromLong((long)n->nchildren)) < 0 ||
        set_item(d, "offset", PyLong_FromLongLong((long long)n->offset)) < 0 ||
        set_item(d, "itemsize", PyLong_FromLongLong((long long)n->itemsize)) < 0 ||
        set_item(d, "nbytes", PyLong_FromLongLong((long long)n->nbytes)) < 0 ||
        set_item(d, "repeat", PyLong_FromLongLong((long long)n->repeat)) < 0 ||
        set_item(d, "alignment", PyLong_FromLongLong((long long)n->alignment)) < 0 ||
        set_item(d, "shape", shape) < 0 ||
        set_item(d, "name", str_or_none(n->name, n->name_len)) < 0 ||
        set_item(d, "custom", str_or_none(custom, custom ? n->custom_len : 0)) < 0 ||
        set_item(d, "custom_id", str_or_none(custom, custom ? n->custom_id_len : 0)) < 0 ||
        set_item(d, "alternatives", str_or_none(alts, alts ? n->alternatives_len : 0)) < 0)
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *format_dict(const pyxbuf_format *f) {
    PyObject *nodes = PyList_New(f->nnodes);
    if (nodes == NULL) return NULL;
    const pyxbuf_format_node *n = pyxbuf_format_nodes(f);
    for (int32_t i = 0; i < f->nnodes; i++) {
        PyObject *nd = node_dict(f, &n[i]);
        if (nd == NULL) {
            Py_DECREF(nodes);
            return NULL;
        }
        PyList_SET_ITEM(nodes, i, nd);
    }
    PyObject *d = PyDict_New();
    if (d == NULL || set_item(d, "itemsize", PyLong_FromLongLong((long long)f->itemsize)) < 0 ||
        set_item(d, "alignment", PyLong_FromLongLong((long long)f->alignment)) < 0 ||
        set_item(d, "flags", PyLong_FromLong((long)f->flags)) < 0 ||
        set_item(d, "heap", PyBool_FromLong((f->heap_nodes != NULL && f->node_capacity > 0) ||
                                                          f->heap_dims != NULL)) < 0 ||
        set_item(d, "nodes", nodes) < 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *format_parse(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *holder;
    const char *fmt;
    if (format_arg(arg, &holder, &fmt) < 0) return NULL;
    pyxbuf_format f;
    pyxbuf_error err;
    PyObject *result;
    if (pyxbuf_format_parse(fmt, &f, &err) < 0) result = raise_error(&err);
    else {
        result = format_dict(&f);
        pyxbuf_format_clear(&f);
    }
    Py_DECREF(holder);
    return result;
}

static PyObject *format_itemsize(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *holder;
    const char *fmt;
    if (format_arg(arg, &holder, &fmt) < 0) return NULL;
    int64_t size, align;
    pyxbuf_error err;
    int rc = pyxbuf_format_itemsize(fmt, &size, &align, &err);
    Py_DECREF(holder);
    if (rc < 0) return raise_error(&err);
    return Py_BuildValue("(LL)", (long long)size, (long long)align);
}

static PyObject *format_write(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *holder;
    const char *fmt;
    if (format_arg(arg, &holder, &fmt) < 0) return NULL;
    pyxbuf_format f;
    pyxbuf_error err;
    PyObject *result = NULL;
    if (pyxbuf_format_parse(fmt, &f, &err) < 0) {
        Py_DECREF(holder);
        return raise_error(&err);
    }
    size_t len = 0;
    int rc = pyxbuf_format_write(&f, NULL, 0, &len, NULL); /* measure */
    char *buf = PyMem_Malloc(len + 1);
    if (buf == NULL) PyErr_NoMemory();
    else if ((rc = pyxbuf_format_write(&f, buf, len + 1, NULL, &err)) < 0) raise_error(&err);
    else result = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    PyMem_Free(buf);
    pyxbuf_format_clear(&f);
    Py_DECREF(holder);
    return result;
}

/* For keys registered with payload_size=True: the payload is "SIZE" or
 * "SIZE,ALIGN" in decimal; anything else leaves the type opaque. */
static int payload_size_fn(const char *payload, size_t n, int64_t *itemsize, int64_t *alignment,
                           void *ctx) {
    (void)ctx;
    int64_t v[2] = {0, 1};
    int which = 0;
    bool digits = false;
    for (size_t i = 0; i < n; i++) {
        char c = payload[i];
        if (c == ',' && which == 0 && digits) {
            which = 1;
            v[1] = 0;
            digits = false;
        } else if (c >= '0' && c <= '9' && v[which] < INT64_MAX / 10 - 10) {
            v[which] = v[which] * 10 + (c - '0');
            digits = true;
        } else {
            return PYXBUF_EFORMAT;
        }
    }
    if (!digits || v[1] < 1) return PYXBUF_EFORMAT;
    *itemsize = v[0];
    *alignment = v[1];
    return 0;
}

static PyObject *dtype_register(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"key", "itemsize", "alignment", "payload_size", NULL};
    const char *key;
    long long itemsize = 0, alignment = 1;
    int payload_size = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|LLp", kwlist, &key, &itemsize, &alignment,
                                     &payload_size))
        return NULL;
    pyxbuf_dtype_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.size = sizeof spec;
    spec.key = key;
    spec.itemsize = itemsize;
    spec.alignment = alignment;
    spec.size_fn = payload_size ? payload_size_fn : NULL;
    int rc = pyxbuf_dtype_register(&spec);
    if (rc < 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "pyxbuf_dtype_register('%.100s') failed with code %d", key, rc);
        return raise_format_error(rc, -1, msg);
    }
    Py_RETURN_NONE;
}

static PyObject *dtype_unregister(PyObject *self, PyObject *arg) {
    (void)self;
    const char *key = PyUnicode_AsUTF8(arg);
    if (key == NULL) return NULL;
    int rc = pyxbuf_dtype_unregister(key);
    if (rc < 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "pyxbuf_dtype_unregister('%.100s') failed with code %d", key,
                 rc);
        return raise_format_error(rc, -1, msg);
    }
    Py_RETURN_NONE;
}

size_t pyxbuf__numpy_user_records_now(void); /* testext_hooks.c */

static PyObject *numpy_user_records(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromSize_t(pyxbuf__numpy_user_records_now());
}

static PyMethodDef format_methods[] = {
    {"format_parse", format_parse, METH_O,
     "format_parse(fmt: bytes) -> dict: itemsize, alignment, flags, heap, nodes"},
    {"format_itemsize", format_itemsize, METH_O,
     "format_itemsize(fmt: bytes) -> (itemsize, alignment)"},
    {"format_write", format_write, METH_O,
     "format_write(fmt: bytes) -> bytes: the canonical form of the parsed format"},
    {"dtype_register", (PyCFunction)(void (*)(void))dtype_register, METH_VARARGS | METH_KEYWORDS,
     "dtype_register(key, itemsize=0, alignment=1, payload_size=False)"},
    {"dtype_unregister", dtype_unregister, METH_O, "dtype_unregister(key)"},
    {"numpy_user_records", numpy_user_records, METH_NOARGS,
     "numpy_user_records() -> int: the NumPy route's user-dtype records allocated, not freed"},
    {NULL, NULL, 0, NULL},
};

int pyxbuf_testext_add_format(PyObject *module) {
    if (format_error == NULL) {
        format_error = PyErr_NewExceptionWithDoc(
            "_pyxbuf_testext.FormatError",
            "A pyxbuf format error: .position (byte offset or -1) and .code (PYXBUF_E*).",
            PyExc_ValueError, NULL);
        if (format_error == NULL) return -1;
    }
    if (PyModule_AddObjectRef(module, "FormatError", format_error) < 0) return -1;
    if (PyModule_AddFunctions(module, format_methods) < 0) return -1;
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"PYXBUF_FMTN_COMPLEX", PYXBUF_FMTN_COMPLEX},
        {"PYXBUF_FMTN_OPAQUE", PYXBUF_FMTN_OPAQUE},
        {"PYXBUF_FMTN_POINTER", PYXBUF_FMTN_POINTER},
        {"PYXBUF_FMTF_SINGLE_SCALAR", PYXBUF_FMTF_SINGLE_SCALAR},
        {"PYXBUF_FMTF_HAS_STRUCT", PYXBUF_FMTF_HAS_STRUCT},
        {"PYXBUF_FMTF_HAS_CUSTOM", PYXBUF_FMTF_HAS_CUSTOM},
        {"PYXBUF_FMTF_HAS_OPAQUE", PYXBUF_FMTF_HAS_OPAQUE},
        {"PYXBUF_FORMAT_MAX_DEPTH", PYXBUF_FORMAT_MAX_DEPTH},
        {"PYXBUF_FORMAT_INLINE_NODES", PYXBUF_FORMAT_INLINE_NODES},
        {"PYXBUF_EFORMAT", PYXBUF_EFORMAT},
        {"PYXBUF_EUNSUPPORTED", PYXBUF_EUNSUPPORTED},
        {"PYXBUF_EOVERFLOW", PYXBUF_EOVERFLOW},
        {"PYXBUF_EINVAL", PYXBUF_EINVAL},
    };
    for (size_t i = 0; i < sizeof constants / sizeof *constants; i++)
        if (PyModule_AddIntConstant(module, constants[i].name, constants[i].value) < 0) return -1;
    return 0;
}
