/* cai.c -- the __cuda_array_interface__ (version 3) bridge.
 *
 * A producer that speaks only the CUDA Array Interface (Numba device arrays,
 * older CuPy and PyTorch, JAX on GPU, ...) gives a dict: shape, typestr,
 * data = (pointer, read_only), version, and optionally strides, descr, mask
 * and stream. pyxbuf turns it into a "pyxbuf.dlpack" device view:
 *
 * - Formats. typestr -> struct code with its byte order made explicit only
 *   where it is not the machine's: "<f4" -> "f" and ">f4" -> ">f" on a
 *   little-endian machine, "|b1" -> "?", "<f2" -> "e", "<c8" -> "Zf",
 *   "<c16" -> "Zd", "<i8" -> "q" (never the platform-sized "l"), "|S5" -> "5s",
 *   "<U3" -> "3w". Unstructured void ("|V2") -> "2x", as NumPy writes it: the
 *   bytes are opaque (a bfloat16 from JAX arrives so; CAI cannot say more).
 *   Structured void types are built from 'descr' into "T{...}" with an explicit
 *   packed byte-order prefix on every field ('<', '>', '=' for '|'), sub-array
 *   shapes as "(2,3)", padding as "Nx", names as ":name:". Every format is
 *   checked against pyxbuf's parser: its size must be the typestr's.
 * - Device. Recovered from the pointer by asking every registered backend
 *   (CUDA first, then e.g. the emulated device): a pointer no backend knows is
 *   refused ("CAI pointer 0x... is not device memory"). Empty arrays may carry
 *   pointer 0 (the specification says so): they are described as cuda:0.
 * - Streams (the producer-stream model of CAI v3). 'stream' names the stream
 *   on which the producer's work on the data is queued; None means the data is
 *   ready. For a stream, pyxbuf records an event on it through the device's
 *   backend and hands it to the consumer in pyxbuf_device_info.sync_event, so
 *   pyxbuf_device_wait(view, consumer_stream) orders the consumer's stream
 *   after the producer's work (pyxbuf_copy_to_host waits too). When the view
 *   was acquired with pyxbuf_get_stream and a consumer stream, the wait is
 *   also enqueued on that stream at once. Stream 0 is disallowed by the
 *   specification and refused.
 * - Ownership. The memory belongs to the producer: the view's base.obj (a
 *   reference to it, taken by pyxbuf_export_fill) keeps it alive. The view's
 *   owner is a holder that stores what the view points into (device info,
 *   format string, dimensions beyond PYXBUF_INLINE_NDIM) and destroys the sync
 *   event through the backend when the view is released.
 */

#include "bridges/bridges.h"
#include "device/device.h"

#include "bridges/array_dict.h"
#include "format/codes.h"
#include "format/format.h"

#include <stdio.h>
#include <string.h>

#define CAI "__cuda_array_interface__"
#define CAI_MAX_VERSION 3

/* ------------------------------------------------------------------------- */
/* typestr -> format                                                         */
/* ------------------------------------------------------------------------- */

/* The kind of struct code of a typestr's kind character. */
static pyxbuf__kind typestr_kind(char kind) {
    switch (kind) {
    case 'b': return PYXBUF__KIND_BOOL;
    case 'i': return PYXBUF__KIND_INT;
    case 'u': return PYXBUF__KIND_UINT;
    case 'f': return PYXBUF__KIND_FLOAT;
    case 'c': return PYXBUF__KIND_COMPLEX;
    default: return PYXBUF__KIND_NONE;
    }
}

/* The struct code for a typestr's kind and size, or NULL. `native` tells
 * whether long double codes are allowed (they have no standard size). */
static const char *scalar_code(char kind, int64_t size, int native) {
    return native ? pyxbuf__native_struct_code(typestr_kind(kind), size)
                  : pyxbuf__struct_code(typestr_kind(kind), size);
}

typedef struct typestr {
    char order; /* '<', '>', '|', '=' */
    char kind;
    int64_t size;     /* the number in the typestr */
    int64_t itemsize; /* bytes ('U' counts 4-byte characters) */
} typestr;

static int parse_typestr(PyObject *obj, const char *where, typestr *t) {
    if (!PyUnicode_Check(obj))
        return pyxbuf__dict_fail(CAI, "%s must be a typestr such as '<f4', found '%s' (%.100R)",
                                 where, PYXBUF__TYPE_NAME(obj), obj);
    const char *s = PyUnicode_AsUTF8(obj);
    if (s == NULL) return -1;
    t->order = s[0];
    t->kind = t->order ? s[1] : '\0';
    t->size = t->kind ? pyxbuf__typestr_size(s + 2) : -1;
    if (strchr("<>|=", t->order) == NULL || t->order == '\0' || t->size < 0)
        return pyxbuf__dict_fail(CAI,
                                 "%s = %R is not a typestr: expected a byte order ('<', '>', '|' "
                                 "or '='), a kind character and a size in bytes, e.g. '<f4'",
                                 where, obj);
    t->itemsize = t->size;
    if (t->kind == 'U') {
        if (t->size > INT64_MAX / 4)
            return pyxbuf__dict_fail(CAI, "%s = %R is too large", where, obj);
        t->itemsize = 4 * t->size;
    }
    return 0;
}

/* The order prefix of a scalar: inside a struct always explicit and packed
 * ('<', '>', '=' for native), at the top level only when not native. */
static const char *order_prefix(char order, int in_struct) {
    if (in_struct) return order == '<' ? "<" : order == '>' ? ">" : "=";
    if (!pyxbuf__typestr_swapped(order)) return "";
    return order == '<' ? "<" : ">";
}

/* Append "<n>x": n bytes nobody interprets. */
static void append_padding(pyxbuf__fmtbuf *b, int64_t n) {
    pyxbuf__fmtbuf_int(b, n);
    pyxbuf__fmtbuf_char(b, 'x');
}

/* Append the format of a non-void typestr. */
static int append_scalar(pyxbuf__fmtbuf *b, PyObject *obj, const typestr *t, const char *where,
                         int in_struct) {
    int native = !pyxbuf__typestr_swapped(t->order);
    if (t->kind == 'S' || t->kind == 'U') {
        const char *prefix = t->kind == 'U' ? order_prefix(t->order, in_struct) : "";
        if (in_struct && t->kind == 'S') prefix = "=";
        pyxbuf__fmtbuf_puts(b, prefix);
        pyxbuf__fmtbuf_int(b, t->size);
        pyxbuf__fmtbuf_char(b, t->kind == 'S' ? 's' : 'w');
        return 0;
    }
    const char *code = scalar_code(t->kind, t->size, native);
    if (code == NULL)
        return pyxbuf__dict_fail(CAI,
                                 "%s = %R names a type pyxbuf cannot describe (kinds b1, i, u, "
                                 "f2/f4/f8, c8/c16, S, U and V are understood); convert the "
                                 "array to one of those first",
                                 where, obj);
    const char *prefix = order_prefix(t->order, in_struct);
    if (t->size == 1 && !in_struct) prefix = "";
    pyxbuf__fmtbuf_puts(b, prefix);
    pyxbuf__fmtbuf_puts(b, code);
    return 0;
}

/* 1 if `descr` describes fields, 0 if it is absent or the trivial
 * [('', typestr)] NumPy gives for unstructured types. */
static int descr_is_structured(PyObject *descr) {
    if (descr == NULL || descr == Py_None) return 0;
    if (!PyList_Check(descr) || PyList_GET_SIZE(descr) != 1) return 1;
    PyObject *e = PyList_GET_ITEM(descr, 0);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) return 1;
    PyObject *name = PyTuple_GET_ITEM(e, 0), *type = PyTuple_GET_ITEM(e, 1);
    return !(PyUnicode_Check(name) && PyUnicode_GET_LENGTH(name) == 0 && PyUnicode_Check(type));
}

static int append_descr(pyxbuf__fmtbuf *b, PyObject *descr, int depth, int64_t declared,
                        int64_t *size);

/* A field's name: str, or the name of a (title, name) pair. */
static int field_name(PyObject *e, Py_ssize_t i, PyObject **name) {
    PyObject *n = PyTuple_GET_ITEM(e, 0);
    if (PyTuple_Check(n) && PyTuple_GET_SIZE(n) == 2) n = PyTuple_GET_ITEM(n, 1);
    if (!PyUnicode_Check(n))
        return pyxbuf__dict_fail(CAI,
                                 "'descr'[%zd] must start with a field name (str), found '%s' "
                                 "(%.100R)",
                                 i, PYXBUF__TYPE_NAME(n), n);
    *name = n;
    return 0;
}

/* The dimensions of a field's sub-array shape (a tuple) and their product. */
static int field_dims(PyObject *shape, Py_ssize_t i, int64_t *dims, int *ndim, int64_t *count) {
    if (PyTuple_GET_SIZE(shape) > PYXBUF_MAX_NDIM)
        return pyxbuf__dict_fail(CAI,
                                 "'descr'[%zd][2] (the sub-array shape) has %zd dimensions; a "
                                 "format's sub-array shape has at most %d: reshape the field",
                                 i, PyTuple_GET_SIZE(shape), PYXBUF_MAX_NDIM);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(shape); k++) {
        PyObject *d = PyTuple_GET_ITEM(shape, k);
        long long n = pyxbuf__is_int(d) ? PyLong_AsLongLong(d) : -1;
        if (n == -1 && PyErr_Occurred()) PyErr_Clear();
        if (n <= 0 || n > INT32_MAX || !PYXBUF__MUL_OK(*count, (int64_t)n, count))
            return pyxbuf__dict_fail(CAI,
                                     "'descr'[%zd][2] (the sub-array shape) must hold positive "
                                     "ints, found %.100R",
                                     i, shape);
        dims[(*ndim)++] = n;
    }
    return 0;
}

/* A field's sub-array shape "(2,3)" and its item count. */
static int field_shape(pyxbuf__fmtbuf *b, PyObject *e, Py_ssize_t i, int64_t *count) {
    *count = 1;
    if (PyTuple_GET_SIZE(e) < 3) return 0;
    PyObject *shape = PyTuple_GET_ITEM(e, 2);
    if (pyxbuf__is_int(shape)) {
        PyObject *t = PyTuple_Pack(1, shape);
        if (t == NULL) return -1;
        shape = t;
    } else if (!PyTuple_Check(shape)) {
        return pyxbuf__dict_fail(CAI,
                                 "'descr'[%zd][2] (the sub-array shape) must be a tuple of ints, "
                                 "found '%s' (%.100R)",
                                 i, PYXBUF__TYPE_NAME(shape), shape);
    } else {
        Py_INCREF(shape);
    }
    int64_t dims[PYXBUF_MAX_NDIM];
    int ndim = 0;
    int rc = field_dims(shape, i, dims, &ndim, count);
    if (rc == 0 && ndim > 0) pyxbuf__fmtbuf_shape(b, dims, ndim);
    Py_DECREF(shape);
    return rc;
}

static int append_field(pyxbuf__fmtbuf *b, PyObject *e, Py_ssize_t i, int depth, int64_t *size) {
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 2 || PyTuple_GET_SIZE(e) > 3)
        return pyxbuf__dict_fail(CAI,
                                 "'descr'[%zd] must be a (name, typestr) or (name, typestr, "
                                 "shape) tuple, found '%s' (%.100R)",
                                 i, PYXBUF__TYPE_NAME(e), e);
    PyObject *name = NULL, *type = PyTuple_GET_ITEM(e, 1);
    int64_t count, item = 0;
    if (field_name(e, i, &name) < 0) return -1;
    Py_ssize_t name_len;
    const char *name_s = PyUnicode_AsUTF8AndSize(name, &name_len);
    if (name_s == NULL) return -1;
    if (memchr(name_s, ':', (size_t)name_len) != NULL)
        return pyxbuf__dict_fail(CAI,
                                 "'descr'[%zd] field name %R contains ':', which a buffer format "
                                 "cannot carry; rename the field",
                                 i, name);
    if (field_shape(b, e, i, &count) < 0) return -1;
    int named = name_len > 0;
    if (PyList_Check(type)) {
        if (append_descr(b, type, depth + 1, -1, &item) < 0) return -1;
    } else {
        typestr t;
        char where[48];
        snprintf(where, sizeof where, "'descr'[%zd][1]", i);
        if (parse_typestr(type, where, &t) < 0) return -1;
        item = t.itemsize;
        if (t.kind == 'V') {
            /* Padding, or an opaque void field: bytes nobody interprets. */
            append_padding(b, t.size);
            named = 0;
        } else if (append_scalar(b, type, &t, where, 1) < 0) {
            return -1;
        }
    }
    if (named) pyxbuf__fmtbuf_name(b, name_s, (size_t)name_len);
    int64_t bytes;
    if (!PYXBUF__MUL_OK(item, count, &bytes) || !PYXBUF__ADD_OK(*size, bytes, size))
        return pyxbuf__dict_fail(CAI, "'descr' describes an item too large to address");
    return 0;
}

/* "T{...}" from a NumPy descr list. `declared` (or -1 for nested structs):
 * the typestr's size, reached with trailing padding. */
static int append_descr(pyxbuf__fmtbuf *b, PyObject *descr, int depth, int64_t declared,
                        int64_t *size) {
    if (depth > PYXBUF_FORMAT_MAX_DEPTH)
        return pyxbuf__dict_fail(CAI, "'descr' nests structs deeper than %d levels",
                                 PYXBUF_FORMAT_MAX_DEPTH);
    if (!PyList_Check(descr))
        return pyxbuf__dict_fail(CAI,
                                 "'descr' must be a list of (name, typestr[, shape]) tuples, "
                                 "found '%s' (%.100R)",
                                 PYXBUF__TYPE_NAME(descr), descr);
    *size = 0;
    pyxbuf__fmtbuf_puts(b, "T{");
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(descr); i++)
        if (append_field(b, PyList_GET_ITEM(descr, i), i, depth, size) < 0) return -1;
    if (declared >= 0 && *size > declared)
        return pyxbuf__dict_fail(CAI,
                                 "'descr' describes %lld %s per item but 'typestr' says %lld; "
                                 "the producer must make them agree",
                                 (long long)*size, PYXBUF__PLURAL(*size, "byte", "bytes"),
                                 (long long)declared);
    if (declared > *size) {
        append_padding(b, declared - *size);
        *size = declared;
    }
    pyxbuf__fmtbuf_char(b, '}');
    return 0;
}

/* The struct "T{...}" of a structured typestr `t` (from `ts`) whose fields
 * `descr` gives; the format pyxbuf's parser will read must be the size CAI
 * declared. */
static int append_struct(pyxbuf__fmtbuf *b, PyObject *descr, PyObject *ts, const typestr *t) {
    int64_t size = 0, parsed = -1;
    if (append_descr(b, descr, 1, t->size, &size) < 0) return -1;
    if (b->failed) return PyErr_NoMemory(), -1;
    pyxbuf_error err;
    if (pyxbuf_format_itemsize(b->p, &parsed, NULL, &err) < 0 || parsed != t->size)
        return pyxbuf__dict_fail(CAI,
                                 "'descr' %.200R gives the format '%s' of %lld %s, not the "
                                 "%lld of 'typestr' %R (%s)",
                                 descr, b->p, (long long)parsed,
                                 PYXBUF__PLURAL(parsed, "byte", "bytes"), (long long)t->size, ts,
                                 parsed < 0 ? err.message : "sizes differ");
    return 0;
}

/* The view's format for the dict's typestr (and descr). */
static int build_format(PyObject *dict, pyxbuf__fmtbuf *b, Py_ssize_t *itemsize) {
    PyObject *ts, *descr = NULL;
    typestr t;
    if (pyxbuf__dict_item(dict, CAI, "typestr", "a typestr such as '<f4'", 1, &ts) <= 0 ||
        parse_typestr(ts, "'typestr'", &t) < 0)
        return -1;
    if (t.itemsize > PY_SSIZE_T_MAX)
        return pyxbuf__dict_fail(CAI, "'typestr' %R is too large", ts);
    *itemsize = (Py_ssize_t)t.itemsize;
    int rc = 0;
    if (t.kind != 'V') rc = append_scalar(b, ts, &t, "'typestr'", 0);
    else if (pyxbuf__dict_item(dict, CAI, "descr", "", 0, &descr) < 0) rc = -1;
    else if (descr_is_structured(descr)) rc = append_struct(b, descr, ts, &t);
    else append_padding(b, t.size); /* unstructured void: opaque bytes, as NumPy writes it */
    if (rc == 0 && b->failed) return PyErr_NoMemory(), -1;
    return rc;
}

/* ------------------------------------------------------------------------- */
/* Streams                                                                   */
/* ------------------------------------------------------------------------- */

/* 'stream': 0 and *has = 0 for None/absent, *has = 1 and the handle else. */
static int parse_stream(PyObject *dict, int *has, int64_t *handle) {
    PyObject *s;
    *has = 0;
    *handle = PYXBUF_STREAM_NONE;
    int rc = pyxbuf__dict_item(dict, CAI, "stream", "", 0, &s);
    if (rc <= 0 || s == Py_None) return rc;
    if (!pyxbuf__is_int(s))
        return pyxbuf__dict_fail(CAI,
                                 "'stream' must be None or an int (1: legacy default stream, 2: "
                                 "per-thread default stream, else a stream handle), found '%s' "
                                 "(%.100R)",
                                 PYXBUF__TYPE_NAME(s), s);
    unsigned long long v = PyLong_AsUnsignedLongLong(s);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return pyxbuf__dict_fail(CAI, "'stream' = %R is not a stream handle (negative or too "
                                      "large)", s);
    }
    if (v == 0)
        return pyxbuf__dict_fail(CAI,
                                 "'stream' is 0, which the CUDA Array Interface disallows (it is "
                                 "ambiguous between None and the legacy and per-thread default "
                                 "streams); the producer must give None, 1, 2 or a stream handle");
    if (v > (unsigned long long)INT64_MAX)
        return pyxbuf__dict_fail(CAI, "'stream' = %R does not fit an int64 stream handle", s);
    *has = 1;
    *handle = (int64_t)v;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* The holder                                                                */
/* ------------------------------------------------------------------------- */

typedef struct cai_state {
    pyxbuf_device_info info;
    pyxbuf_backend backend; /* the device's backend: destroys info.sync_event */
    int32_t has_backend;
} cai_state;

#define STATE_BYTES ((sizeof(cai_state) + 15) & ~(size_t)15)

static void cai_finalize(void *storage) {
    cai_state *s = storage;
    if (s->info.sync_event != NULL && s->has_backend && s->backend.event_destroy != NULL) {
        pyxbuf_error err;
        (void)s->backend.event_destroy(s->backend.ctx, s->info.device_id, s->info.sync_event,
                                       &err);
    }
    s->info.sync_event = NULL;
}

static int raise_backend(int rc, const pyxbuf_error *err, const char *what, int64_t handle,
                         const pyxbuf_device *dev) {
    char where[64];
    pyxbuf_device_format(dev, where, sizeof where);
    PyObject *type = rc == PYXBUF_EDRIVER ? PyExc_RuntimeError
                     : rc == PYXBUF_ENOMEM ? PyExc_MemoryError
                                           : PyExc_BufferError;
    PyErr_Format(type, "pyxbuf: " CAI ": cannot %s stream %lld on device '%s': %s", what,
                 (long long)handle, where, err->message);
    return -1;
}

/* Record the producer's event and, for a consumer stream, enqueue the wait. */
static int order_after_producer(cai_state *s, const pyxbuf_device *dev, int64_t producer,
                                int64_t consumer) {
    const pyxbuf_backend *b = &s->backend;
    pyxbuf_error err;
    int rc;
    if (b->event_record == NULL) {
        /* No events: the producer's work must be finished before the view
         * is handed out. */
        if (b->synchronize == NULL) {
            pyxbuf__error(&err, PYXBUF_EUNSUPPORTED, -1,
                          "backend '%s' can neither record events nor synchronise streams",
                          b->name ? b->name : "?");
            return raise_backend(PYXBUF_EUNSUPPORTED, &err, "synchronise with the producer's",
                                 producer, dev);
        }
        Py_BEGIN_ALLOW_THREADS
        rc = b->synchronize(b->ctx, dev->device_id, producer, &err);
        Py_END_ALLOW_THREADS
        return rc < 0 ? raise_backend(rc, &err, "synchronise the producer's", producer, dev) : 0;
    }
    void *event = NULL;
    rc = b->event_record(b->ctx, dev->device_id, producer, &event, &err);
    if (rc < 0) return raise_backend(rc, &err, "record an event on the producer's", producer, dev);
    s->info.sync_event = event;
    if (consumer == PYXBUF__STREAM_UNSET || consumer == PYXBUF_STREAM_NONE) return 0;
    if (b->event_wait == NULL) return 0; /* pyxbuf_device_wait reports it */
    rc = b->event_wait(b->ctx, dev->device_id, event, consumer, &err);
    return rc < 0 ? raise_backend(rc, &err, "make the consumer wait on", consumer, dev) : 0;
}

/* ------------------------------------------------------------------------- */
/* The bridge                                                                */
/* ------------------------------------------------------------------------- */

typedef struct cai_desc {
    int ndim;
    Py_ssize_t itemsize, count;
    Py_ssize_t shape[PYXBUF_MAX_NDIM];
    Py_ssize_t strides[PYXBUF_MAX_NDIM];
    uintptr_t ptr;
    int readonly;
    int has_stream;
    int64_t stream;
} cai_desc;

static int read_dict(PyObject *dict, cai_desc *d, pyxbuf__fmtbuf *fmt) {
    long version = 0;
    d->ndim = 0;
    d->itemsize = 0;
    d->ptr = 0;
    d->readonly = 1;
    if (!PyDict_Check(dict))
        return pyxbuf__dict_fail(CAI, "it must be a dict, found '%s'", PYXBUF__TYPE_NAME(dict));
    if (pyxbuf__dict_version(dict, CAI, 0, CAI_MAX_VERSION, &version) < 0 ||
        pyxbuf__dict_shape(dict, CAI, d->shape, &d->ndim) < 0 ||
        build_format(dict, fmt, &d->itemsize) < 0 ||
        pyxbuf__dict_strides(dict, CAI, d->ndim, d->shape, d->itemsize, d->strides) < 0 ||
        pyxbuf__dict_data(dict, CAI, &d->ptr, &d->readonly) < 0 ||
        pyxbuf__dict_no_mask(dict, CAI) < 0 || parse_stream(dict, &d->has_stream, &d->stream) < 0)
        return -1;
    d->count = pyxbuf__dict_count(d->shape, d->ndim);
    if (d->count < 0 || (d->count > 0 && d->itemsize > PY_SSIZE_T_MAX / d->count))
        return pyxbuf__dict_fail(CAI, "'shape' describes more bytes than can be addressed");
    if (d->ptr == 0 && d->count > 0)
        return pyxbuf__dict_fail(CAI,
                                 "'data' holds a NULL pointer for %zd %s; only empty arrays "
                                 "may give pointer 0",
                                 d->count, PYXBUF__PLURAL(d->count, "item", "items"));
    return 0;
}

/* The device of the pointer and its backend (has_backend 0 for an empty
 * array without one). */
static int find_device(const cai_desc *d, pyxbuf_device *dev, cai_state *s) {
    pyxbuf_error err;
    if (d->ptr != 0 &&
        pyxbuf__backend_find_pointer((const void *)d->ptr, dev, &s->backend, &err) == 0) {
        s->has_backend = 1;
        return 0;
    }
    if (d->count == 0) { /* nothing to read: CAI's memory is CUDA's */
        dev->device_type = PYXBUF_DL_CUDA;
        dev->device_id = 0;
        return 0;
    }
    return pyxbuf__dict_fail(CAI,
                             "the CAI pointer %p is not device memory: %s; the CUDA Array "
                             "Interface carries device memory only (export host memory through "
                             "the buffer protocol or __array_interface__)",
                             (void *)d->ptr, err.message);
}

/* Bytes of the holder's storage for the dimensions beyond the view's inline
 * ones (shape, then strides), after the state; the format follows them. */
static size_t spill_bytes(int ndim) {
    return ndim > PYXBUF_INLINE_NDIM ? 2 * (size_t)ndim * sizeof(Py_ssize_t) : 0;
}

/* The view's owner: `found` (its device info filled from `d` and `dev`),
 * room for spilled dimensions, and the format; NULL with an exception. */
static PyObject *new_holder(const cai_desc *d, const pyxbuf_device *dev, const cai_state *found,
                            const pyxbuf__fmtbuf *fmt) {
    size_t spill = spill_bytes(d->ndim);
    PyObject *holder = pyxbuf__holder_new(STATE_BYTES + spill + fmt->len + 1, cai_finalize);
    if (holder == NULL) return NULL;
    unsigned char *storage = pyxbuf__holder_storage(holder);
    cai_state *s = (cai_state *)storage;
    *s = *found;
    memcpy(storage + STATE_BYTES + spill, fmt->p, fmt->len + 1);
    s->info.size = (uint32_t)sizeof(pyxbuf_device_info);
    s->info.device_type = dev->device_type;
    s->info.device_id = dev->device_id;
    s->info.stream = d->has_stream ? d->stream : PYXBUF_STREAM_NONE;
    s->info.dl_flags = d->readonly ? PYXBUF_DL_FLAG_READ_ONLY : 0;
    return holder;
}

/* Fills `view` for `flags` from `d`, pointing into `holder` (dimensions,
 * format, device info); -1 with BufferError when the request is refused. */
static int fill_view(PyObject *obj, pyxbuf_view *view, int32_t flags, const cai_desc *d,
                     PyObject *holder) {
    unsigned char *storage = pyxbuf__holder_storage(holder);
    Py_ssize_t *dims = pyxbuf__view_dims(view, d->ndim, (Py_ssize_t *)(storage + STATE_BYTES));
    memcpy(dims, d->shape, (size_t)d->ndim * sizeof(Py_ssize_t));
    memcpy(dims + d->ndim, d->strides, (size_t)d->ndim * sizeof(Py_ssize_t));
    pyxbuf_export_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.size = (uint32_t)sizeof desc;
    desc.ndim = d->ndim;
    desc.buf = (void *)d->ptr;
    desc.format = (const char *)storage + STATE_BYTES + spill_bytes(d->ndim);
    desc.itemsize = d->itemsize;
    desc.shape = dims;
    desc.strides = dims + d->ndim;
    desc.readonly = d->readonly;
    desc.device = PYXBUF_DEVICE_DLPACK;
    desc.device_info = &((cai_state *)storage)->info;
    return pyxbuf_export_fill(&view->base, obj, flags, &desc);
}

/* 1 when the view's last byte is on the device of its first (the pointer
 * told the device), or no backend can tell; else 0 with `err` filled. */
static int span_on_device(const pyxbuf_view *view, const cai_state *s, const pyxbuf_device *dev,
                          pyxbuf_error *err) {
    Py_ssize_t lo = 0, hi = 0;
    return !s->has_backend || pyxbuf__view_span(&view->base, &lo, &hi) != 0 ||
           pyxbuf__check_device_span(&s->backend, view->base.buf, lo, hi, dev, err) >= 0;
}

/* The dict read, its device found, and the holder that owns what the view
 * points into; NULL with an exception. */
static PyObject *read_cai(PyObject *dict, cai_desc *d, pyxbuf_device *dev) {
    pyxbuf__fmtbuf fmt;
    cai_state found;
    memset(&found, 0, sizeof found);
    pyxbuf__fmtbuf_init(&fmt);
    PyObject *holder = NULL;
    if (read_dict(dict, d, &fmt) == 0 && find_device(d, dev, &found) == 0)
        holder = new_holder(d, dev, &found, &fmt);
    pyxbuf__fmtbuf_free(&fmt);
    return holder;
}

static int cai_import(PyObject *obj, PyObject *dict, pyxbuf_view *view, int32_t flags,
                      int64_t consumer) {
    cai_desc d;
    pyxbuf_device dev;
    PyObject *holder = read_cai(dict, &d, &dev);
    if (holder == NULL) return -1;
    if (fill_view(obj, view, flags, &d, holder) < 0) {
        Py_DECREF(holder);
        return -1;
    }
    cai_state *s = pyxbuf__holder_storage(holder);
    pyxbuf_error span_err;
    if (!span_on_device(view, s, &dev, &span_err)) {
        Py_CLEAR(view->base.obj);
        Py_DECREF(holder);
        PyErr_Format(PyExc_BufferError, "pyxbuf: the CAI array of '%.200s' is invalid: %s",
                     PYXBUF__TYPE_NAME(obj), span_err.message);
        return -1;
    }
    view->path = PYXBUF_PATH_CAI;
    view->owner = holder;
    /* The request is granted: only now order the consumer after the
     * producer (no event is recorded for refused requests). */
    if (d.has_stream && d.count > 0 && s->has_backend &&
        order_after_producer(s, &dev, d.stream, consumer) < 0) {
        Py_CLEAR(view->base.obj);
        Py_CLEAR(view->owner);
        return -1;
    }
    return 0;
}

int pyxbuf__cai_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    static PyObject *slot = NULL;
    PyObject *name = pyxbuf__interned(&slot, CAI);
    if (name == NULL) return -1;
    PyObject *dict;
    int rc = pyxbuf__optional_attr(obj, name, &dict);
    if (rc <= 0) return rc;
    rc = cai_import(obj, dict, view, flags, stream);
    Py_DECREF(dict);
    return rc < 0 ? -1 : 1;
}
