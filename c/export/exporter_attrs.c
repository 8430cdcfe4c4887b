/* exporter_attrs.c -- pyxbuf.Exporter's Python attributes (shape, strides,
 * format, device, borrows, __cuda_array_interface__), its __array__ (with the
 * NumPy dtypes of custom items) and the device names its methods take. */
#include "bridges/dlpack.h"
#include "export/exporter.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PyObject *tuple_of(const Py_ssize_t *values, int32_t n) {
    PyObject *t = PyTuple_New(n);
    for (int32_t i = 0; t != NULL && i < n; i++) {
        PyObject *v = PyLong_FromSsize_t(values[i]);
        if (v == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

PyObject *pyxbuf__exporter_get_shape(PyObject *self, void *closure) {
    (void)closure;
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    return tuple_of(e->desc.shape, e->desc.ndim);
}

PyObject *pyxbuf__exporter_get_strides(PyObject *self, void *closure) {
    (void)closure;
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    return tuple_of(e->desc.strides, e->desc.ndim);
}

PyObject *pyxbuf__exporter_get_format(PyObject *self, void *closure) {
    (void)closure;
    return PyUnicode_FromString(((pyxbuf__exporter *)self)->desc.format);
}

PyObject *pyxbuf__exporter_get_device(PyObject *self, void *closure) {
    (void)closure;
    char name[64];
    if (pyxbuf_device_format(&((pyxbuf__exporter *)self)->device, name, sizeof name) < 0)
        return PyUnicode_FromString("unknown");
    return PyUnicode_FromString(name);
}

int pyxbuf__parse_device(PyObject *arg, pyxbuf_device *out) {
    if (PyTuple_Check(arg))
        return PyArg_ParseTuple(arg, "ii", &out->device_type, &out->device_id) ? 0 : -1;
    const char *text = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (text == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "pyxbuf: a device is 'cpu', 'cuda:0', 'ext_dev:1' ... or a (device_type, "
                     "device_id) tuple, not '%.200s'",
                     PYXBUF__TYPE_NAME(arg));
        return -1;
    }
    for (int32_t t = 1; t < 64; t++) {
        const char *name = pyxbuf_device_type_name(t);
        size_t n = strlen(name);
        if (strcmp(name, "unknown") == 0 || strncmp(text, name, n) != 0) continue;
        out->device_type = t;
        out->device_id = 0;
        if (text[n] == '\0') return 0;
        char *end = NULL;
        long id = text[n] == ':' ? strtol(text + n + 1, &end, 10) : -1;
        if (end != NULL && *end == '\0' && id >= 0 && id <= INT32_MAX) {
            out->device_id = (int32_t)id;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError,
                 "pyxbuf: unknown device '%s'; write it as 'cpu', 'cuda:0', 'ext_dev:1', ...",
                 text);
    return -1;
}

PyObject *pyxbuf__exporter_sizeof(PyObject *self, PyObject *unused) {
    (void)unused;
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    size_t dims = e->desc.ndim > 0 ? (size_t)e->desc.ndim : 1;
    size_t n = sizeof *e + 3 * dims * sizeof(Py_ssize_t) + strlen(e->desc.format) + 1;
    if (e->owns_memory) n += (size_t)e->nbytes;
    return PyLong_FromSize_t(n);
}

PyObject *pyxbuf__exporter_get_borrows(PyObject *self, void *closure) {
    (void)closure;
    pyxbuf_borrow_counter b;
    pyxbuf__borrow_counts(&((pyxbuf__exporter *)self)->borrows, &b);
    return Py_BuildValue("{sLsLsLsL}", "views", (long long)b.views, "writable",
                         (long long)b.writable, "shared", (long long)b.shared, "exclusive",
                         (long long)b.exclusive);
}

/* ------------------------------------------------------------------------- */
/* __cuda_array_interface__ (version 3), for CUDA memory only                */
/* ------------------------------------------------------------------------- */

/* The CAI typestr of a format DLPack can express as one plain scalar ("<f4",
 * "|b1"); 0, or -1 with AttributeError naming the format (bfloat16, float8,
 * structs: no typestr spells them, __dlpack__ does). */
static int cai_typestr(const char *format, char *out, size_t cap) {
    static const char KIND[] = {'i', 'u', 'f', 0, 0, 'c', 'b'}; /* by DLPack code */
    DLDataType dt;
    int padded = 0;
    if (pyxbuf__dlpack_format_to_dtype(format, &dt, &padded) < 0) PyErr_Clear();
    else if (dt.code < sizeof KIND && KIND[dt.code] != 0 && dt.lanes == 1 && !padded) {
        unsigned bytes = (unsigned)dt.bits / 8u;
        snprintf(out, cap, "%c%c%u", bytes == 1 ? '|' : '<', KIND[dt.code], bytes);
        return 0;
    }
    PyErr_Format(PyExc_AttributeError,
                 "pyxbuf.Exporter: format '%s' has no __cuda_array_interface__ typestr; read it "
                 "through __dlpack__ (cupy.from_dlpack, torch.from_dlpack)",
                 format);
    return -1;
}

/* Without an event the memory is ready; with one, the legacy default stream
 * (1) is made to wait for it and named, so a consumer orders its work after
 * the producer's as CAI v3 asks. Called in the exporter's critical section. */
static int cai_stream(pyxbuf__exporter *e, PyObject **out) {
    void *event = e->device_info.sync_event;
    if (event == NULL) return (*out = Py_NewRef(Py_None), 0);
    pyxbuf_backend b;
    pyxbuf_error err;
    if (pyxbuf_backend_get(e->device.device_type, &b, &err) < 0 || b.event_wait == NULL ||
        b.event_wait(b.ctx, e->device.device_id, event, 1, &err) < 0)
        return pyxbuf_error_raise(&err);
    return (*out = PyLong_FromLong(1)) == NULL ? -1 : 0;
}

/* Strides in bytes, or None when they are C order's. */
static PyObject *cai_strides(const pyxbuf__exporter *e) {
    const pyxbuf_export_desc *d = &e->desc;
    Py_ssize_t expect = e->itemsize;
    int c_order = 1;
    for (int32_t i = d->ndim - 1; i >= 0 && d->strides != NULL; i--) {
        if (d->shape[i] > 1 && d->strides[i] != expect) c_order = 0;
        expect *= d->shape[i];
    }
    return c_order ? Py_NewRef(Py_None) : tuple_of(d->strides, d->ndim);
}

PyObject *pyxbuf__exporter_get_cai(PyObject *self, void *closure) {
    (void)closure;
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    int32_t type = e->device.device_type;
    if (type != PYXBUF_DL_CUDA && type != PYXBUF_DL_CUDA_MANAGED) {
        char name[64];
        if (pyxbuf_device_format(&e->device, name, sizeof name) < 0) strcpy(name, "unknown");
        PyErr_Format(PyExc_AttributeError,
                     "pyxbuf.Exporter: __cuda_array_interface__ describes CUDA memory; this "
                     "Exporter's memory is on '%s' (read it through __dlpack__ or the buffer "
                     "protocol)",
                     name);
        return NULL;
    }
    char typestr[16];
    if (cai_typestr(e->desc.format, typestr, sizeof typestr) < 0) return NULL;
    PyObject *stream = NULL;
    int rc;
    Py_BEGIN_CRITICAL_SECTION(self);
    rc = cai_stream(e, &stream);
    Py_END_CRITICAL_SECTION();
    if (rc < 0) return NULL;
    return Py_BuildValue("{s:N,s:s,s:(N,O),s:N,s:i,s:N}", "shape",
                         tuple_of(e->desc.shape, e->desc.ndim), "typestr", typestr, "data",
                         PyLong_FromVoidPtr(e->desc.buf), e->desc.readonly ? Py_True : Py_False,
                         "strides", cai_strides(e), "version", 3, "stream", stream);
}

/* ------------------------------------------------------------------------- */
/* __array__, and the NumPy dtypes of custom items                           */
/* ------------------------------------------------------------------------- */

/* A NumPy dtype is found for custom items ("[id$payload;...]", one item) by
 * the rule the __array_interface__ bridge reads NumPy's user dtypes by
 * (bridges/array_interface.c), run backwards: "[module$name]" is
 * np.dtype(module.name) -- ml_dtypes.bfloat16, quaternion.quaternion -- and a
 * struct$ or buffer$ alternative is a classic format, which NumPy parses
 * itself. The alternatives are tried in order and the first that gives a
 * dtype wins ("consumers can and should, stop as soon as they understand the
 * first one"). A dtype is taken only when its items are the exporter's size
 * and hold no Python objects (the memory is raw bytes: an object dtype, or
 * StringDType's references, would read them as pointers). pyxbuf imports
 * the module of a type its format registry knows (ml_dtypes' built in, the
 * registered ones); any other module only when it is imported already: a
 * format string names no module to run. */

/* Appends the reason an alternative gave no dtype to `reasons`; -1 on error. */
static int note(PyObject *reasons, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    PyObject *text = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (text == NULL) return -1;
    int rc = PyList_Append(reasons, text);
    Py_DECREF(text);
    return rc;
}

/* The pending exception as the reason `alt` gave no dtype, when it says so
 * (a module or attribute that is not there, np.dtype's or NumPy's parser's
 * refusal); 0, or -1 with other exceptions (MemoryError, KeyboardInterrupt)
 * left pending. */
static int note_failure(PyObject *reasons, PyObject *alt, const char *what) {
    if (!PyErr_ExceptionMatches(PyExc_ImportError) &&
        !PyErr_ExceptionMatches(PyExc_AttributeError) &&
        !PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_ValueError) &&
        !PyErr_ExceptionMatches(PyExc_RuntimeError))
        return -1;
    PyObject *exc = PyErr_GetRaisedException();
    int rc = note(reasons, "'%U': %s raised %s: %S", alt, what, PYXBUF__TYPE_NAME(exc), exc);
    Py_DECREF(exc);
    return rc;
}

/* 1 when pyxbuf's format registry sizes the custom type "[alt]". */
static int registry_knows(const char *alt, size_t len) {
    char *format = PyMem_Malloc(len + 3);
    if (format == NULL) return 0;
    format[0] = '[';
    memcpy(format + 1, alt, len);
    memcpy(format + 1 + len, "]", 2);
    int64_t size = -1;
    int known = pyxbuf_format_itemsize(format, &size, NULL, NULL) == 0 && size > 0;
    PyMem_Free(format);
    return known;
}

/* np.dtype(module.name) for the alternative "module$name" (alt[0..len), the
 * id id_len bytes); NULL with a reason noted (no exception) or an error. */
static PyObject *named_dtype(PyObject *numpy, PyObject *alt_text, const char *alt, size_t len,
                             size_t id_len, PyObject *reasons) {
    PyObject *module_name = PyUnicode_FromStringAndSize(alt, (Py_ssize_t)id_len);
    PyObject *attr = module_name ? PyUnicode_FromStringAndSize(alt + id_len + 1,
                                                               (Py_ssize_t)(len - id_len - 1))
                                 : NULL;
    PyObject *module = NULL, *type = NULL, *dtype = NULL;
    if (attr == NULL) goto done;
    if (registry_knows(alt, len)) {
        module = PyImport_Import(module_name);
        if (module == NULL) note_failure(reasons, alt_text, "import");
        goto found;
    }
    module = PyImport_GetModule(module_name);
    if (module == NULL && !PyErr_Occurred())
        note(reasons,
             "'%U': no module '%U' is imported, and pyxbuf's format registry does not know the "
             "type (pyxbuf imports only the modules of types it knows)",
             alt_text, module_name);
found:
    if (module == NULL) goto done;
    type = PyObject_GetAttr(module, attr);
    if (type == NULL) {
        note_failure(reasons, alt_text, "getattr");
        goto done;
    }
    dtype = PyObject_CallMethod(numpy, "dtype", "O", type);
    if (dtype == NULL) note_failure(reasons, alt_text, "np.dtype");
done:
    Py_XDECREF(type);
    Py_XDECREF(module);
    Py_XDECREF(attr);
    Py_XDECREF(module_name);
    return dtype;
}

/* One read-only item of zero bytes and a classic format, for NumPy's PEP
 * 3118 parser (classic_dtype): NumPy reads a format only through a
 * memoryview of a buffer, and checks the item size against it. (A
 * memoryview of a bare Py_buffer will not do: NumPy's size check reads the
 * type of the view's object, which that has none of. Nor will an exporter:
 * this file may not call exporter.c, which calls it.) */
typedef struct format_item {
    PyObject_VAR_HEAD
    Py_ssize_t itemsize;
    char *format;                       /* in `bytes`, after the item */
    _Alignas(16) unsigned char bytes[]; /* the item's zero bytes, then the format */
} format_item;

static int format_item_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    format_item *f = (format_item *)self;
    if (PyBuffer_FillInfo(view, self, f->bytes, f->itemsize, 1, flags) < 0) return -1;
    view->format = (flags & PyBUF_FORMAT) ? f->format : NULL;
    view->itemsize = f->itemsize;
    view->ndim = 0; /* one item */
    view->shape = view->strides = NULL;
    return 0;
}

static void format_item_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PYXBUF__TP_FREE(tp)(self);
    Py_DECREF(tp);
}

static PyType_Slot format_item_slots[] = {
    {Py_tp_dealloc, (void *)format_item_dealloc},
    {Py_bf_getbuffer, (void *)format_item_getbuffer},
    {Py_tp_doc, (void *)"One item of a classic format, for NumPy's PEP 3118 parser."},
    {0, NULL},
};

static PyType_Spec format_item_spec = {
    .name = "pyxbuf._FormatItem",
    .basicsize = (int)sizeof(format_item),
    .itemsize = 1,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = format_item_slots,
};

static PyObject *format_item_new(const char *format, size_t len, Py_ssize_t itemsize) {
    static PyObject *type_object = NULL; /* one per library copy, kept */
    PyObject *type = PYXBUF__FT_LOAD_ACQUIRE(&type_object);
    if (type == NULL) {
        PyObject *tp = PyType_FromSpec(&format_item_spec);
        if (tp == NULL) return NULL;
        type = pyxbuf__publish_once(&type_object, tp);
    }
    Py_ssize_t size = itemsize + (Py_ssize_t)len + 1; /* both from a parsed format */
    format_item *f = PyObject_NewVar(format_item, (PyTypeObject *)type, size);
    if (f == NULL) return NULL;
    memset(f->bytes, 0, (size_t)size);
    f->itemsize = itemsize;
    f->format = (char *)f->bytes + itemsize;
    memcpy(f->format, format, len);
    return (PyObject *)f;
}

/* The dtype NumPy reads the classic format payload[0..len) as (a struct$ or
 * buffer$ payload): NumPy's own PEP 3118 parser, on one item of that format
 * and of the exporter's `itemsize` (NumPy refuses a format of another size);
 * NULL with a reason noted (no exception) or an error. */
static PyObject *classic_dtype(PyObject *numpy, PyObject *alt_text, const char *payload,
                               size_t len, Py_ssize_t itemsize, PyObject *reasons) {
    PyObject *item = format_item_new(payload, len, itemsize);
    PyObject *array = item ? PyObject_CallMethod(numpy, "asarray", "O", item) : NULL;
    PyObject *dtype = array ? PyObject_GetAttrString(array, "dtype") : NULL;
    if (item != NULL && array == NULL) note_failure(reasons, alt_text, "NumPy's parser");
    Py_XDECREF(array);
    Py_XDECREF(item);
    return dtype;
}

/* `dtype` when its items can be the exporter's (`itemsize` bytes, no Python
 * objects), with the byte order `order` ('<', '>' or '!' swap multi-byte
 * items where the machine's differs); else NULL with a reason noted (no
 * exception) or an error. Steals `dtype`. */
static PyObject *checked_dtype(PyObject *dtype, PyObject *alt_text, int32_t order,
                               Py_ssize_t itemsize, PyObject *reasons) {
    PyObject *has = PyObject_GetAttrString(dtype, "hasobject");
    PyObject *size = has ? PyObject_GetAttrString(dtype, "itemsize") : NULL;
    Py_ssize_t n = size ? PyLong_AsSsize_t(size) : -1;
    int objects = has ? PyObject_IsTrue(has) : -1;
    Py_XDECREF(size);
    Py_XDECREF(has);
    if (objects < 0 || (n == -1 && PyErr_Occurred())) {
        Py_DECREF(dtype);
        return NULL;
    }
    if (objects || n != itemsize) {
        if (objects)
            note(reasons, "'%U': %R holds Python object references, which an exporter's raw "
                          "memory cannot", alt_text, dtype);
        else
            note(reasons, "'%U': %R has %zd-byte items, the exporter's are %zd bytes", alt_text,
                 dtype, n, itemsize);
        Py_DECREF(dtype);
        return NULL;
    }
    if (n > 1 && (order == '<' || order == '>' || order == '!')) {
        PyObject *swapped = PyObject_CallMethod(dtype, "newbyteorder", "s",
                                                order == '<' ? "<" : ">");
        Py_DECREF(dtype);
        return swapped;
    }
    return dtype;
}

/* The NumPy dtype of one alternative "id$payload" (alt[0..len)); NULL with
 * a reason noted (no exception) or an error. */
static PyObject *alternative_dtype(PyObject *numpy, const char *alt, size_t len, int32_t order,
                                   Py_ssize_t itemsize, PyObject *reasons) {
    const char *dollar = memchr(alt, '$', len);
    PyObject *alt_text = PyUnicode_FromStringAndSize(alt, (Py_ssize_t)len);
    if (alt_text == NULL) return NULL;
    PyObject *dtype = NULL;
    size_t id_len = dollar ? (size_t)(dollar - alt) : len;
    if (dollar == NULL) {
        note(reasons, "'%U': not 'id$payload'", alt_text);
    } else if (pyxbuf__fmt_reserved_id(alt, id_len)) {
        /* A payload is a format of its own: the outer prefix places the item
         * only (cpython/PROPOSAL-NOTES.md, section 7). */
        dtype = classic_dtype(numpy, alt_text, dollar + 1, len - id_len - 1, itemsize, reasons);
        order = '@';
    } else {
        dtype = named_dtype(numpy, alt_text, alt, len, id_len, reasons);
    }
    if (dtype != NULL) dtype = checked_dtype(dtype, alt_text, order, itemsize, reasons);
    Py_DECREF(alt_text);
    return dtype;
}

/* Items of `format` (`itemsize` bytes) as the first of their custom type's
 * alternatives that NumPy has a dtype for; else pyxbuf.ItemTypeError (a
 * TypeError and a BufferError) naming the format, what each alternative gave
 * and what to do. */
static PyObject *custom_dtype(const char *who, const char *format, Py_ssize_t itemsize,
                              PyObject *numpy) {
    pyxbuf_format f;
    pyxbuf_error err;
    PyObject *dtype = NULL, *reasons = PyList_New(0);
    if (reasons == NULL) return NULL;
    if (pyxbuf_format_parse(format, &f, &err) < 0) {
        note(reasons, "the format is malformed: %s", err.message);
        goto refuse;
    }
    const pyxbuf_format_node *nodes = pyxbuf_format_nodes(&f);
    const pyxbuf_format_node *c = nodes[0].nchildren == 1 ? &nodes[1] : NULL;
    if (c == NULL || c->kind != PYXBUF_FMT_CUSTOM || c->repeat != 1 || c->ndim != 0 ||
        (c->flags & (PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER))) {
        note(reasons, "an item that is not one custom type (a struct, count, sub-array, complex "
                      "or pointer of one) has no NumPy dtype pyxbuf builds");
    } else {
        const char *p = c->alternatives, *end = p + c->alternatives_len;
        while (dtype == NULL && p < end && !PyErr_Occurred()) {
            const char *semi = memchr(p, ';', (size_t)(end - p));
            const char *stop = semi ? semi : end;
            dtype = alternative_dtype(numpy, p, (size_t)(stop - p), c->byte_order, itemsize,
                                      reasons);
            p = stop + 1;
        }
    }
    pyxbuf_format_clear(&f);
refuse:
    if (dtype != NULL || PyErr_Occurred()) {
        Py_DECREF(reasons);
        return dtype;
    }
    PyObject *why = PyUnicode_FromString("; ");
    PyObject *joined = why ? PyUnicode_Join(why, reasons) : NULL;
    PyObject *cls = joined ? pyxbuf_item_type_error() : NULL;
    if (cls != NULL)
        PyErr_Format(cls,
                     "%.200s.__array__: NumPy has no dtype for the items of format "
                     "'%.200s' (%U); read them through pyxbuf (pyxbuf.inspect, PyXBuffer<T> in "
                     "Rust, pyxbuf_get in C), or let the format name a NumPy dtype of %zd-byte "
                     "items: '[module$name]' is np.dtype(module.name), as '[ml_dtypes$bfloat16]' "
                     "is ml_dtypes.bfloat16",
                     who, format, joined, itemsize);
    Py_XDECREF(joined);
    Py_XDECREF(why);
    Py_DECREF(reasons);
    return NULL;
}

static void release_held_view(void *storage) { PyBuffer_Release((Py_buffer *)storage); }

/* A zero-copy ndarray of the exporter's custom items, of their NumPy dtype.
 * It rests on a view of the exporter, so the exporter's borrow rules hold
 * as for any view (refused under an exclusive borrow, read-only while a
 * shared one lives); the view is asked without PyBUF_FORMAT, which classic
 * requests may (the format is the exporter's own). A holder keeps the view
 * until the array and every view of it are gone: the array is made from an
 * __array_interface__ of '|V<itemsize>' items on an object that holds the
 * holder (the array's base), then viewed as the dtype, strides and
 * read-only flag kept. */
static PyObject *custom_array(PyObject *self, const char *format, Py_ssize_t itemsize,
                              PyObject *numpy) {
    PyObject *dtype = custom_dtype(PYXBUF__TYPE_NAME(self), format, itemsize, numpy);
    if (dtype == NULL) return NULL;
    PyObject *holder = pyxbuf__holder_new(sizeof(Py_buffer), release_held_view);
    PyObject *iface = NULL, *types = NULL, *base = NULL, *raw = NULL, *out = NULL;
    Py_buffer *b = holder ? pyxbuf__holder_storage(holder) : NULL;
    if (b == NULL || PyObject_GetBuffer(self, b, PyBUF_STRIDES) < 0) goto done;
    char typestr[32];
    snprintf(typestr, sizeof typestr, "|V%zd", b->itemsize);
    iface = Py_BuildValue("{s:N,s:s,s:(N,O),s:N,s:i}", "shape", tuple_of(b->shape, b->ndim),
                          "typestr", typestr, "data", PyLong_FromVoidPtr(b->buf),
                          b->readonly ? Py_True : Py_False, "strides",
                          b->ndim > 0 ? tuple_of(b->strides, b->ndim) : Py_NewRef(Py_None),
                          "version", 3);
    types = iface ? PyImport_ImportModule("types") : NULL;
    PyObject *kw = types ? Py_BuildValue("{s:O,s:O}", "__array_interface__", iface,
                                         "pyxbuf_view", holder)
                         : NULL;
    PyObject *ns = kw ? PyObject_GetAttrString(types, "SimpleNamespace") : NULL;
    PyObject *none = PyTuple_New(0);
    base = ns && none ? PyObject_Call(ns, none, kw) : NULL;
    Py_XDECREF(none);
    Py_XDECREF(ns);
    Py_XDECREF(kw);
    raw = base ? PyObject_CallMethod(numpy, "asarray", "O", base) : NULL;
    out = raw ? PyObject_CallMethod(raw, "view", "O", dtype) : NULL;
done:
    Py_XDECREF(raw);
    Py_XDECREF(base);
    Py_XDECREF(types);
    Py_XDECREF(iface);
    Py_XDECREF(holder); /* the array's base holds it; else it releases the view */
    Py_DECREF(dtype);
    return out;
}

/* np.asarray(view, dtype, copy=copy) of the memory view or array `view`. */
static PyObject *as_array(PyObject *numpy, PyObject *view, PyObject *dtype, PyObject *copy) {
    PyObject *out = NULL;
    PyObject *asarray = PyObject_GetAttrString(numpy, "asarray");
    PyObject *pos = asarray ? PyTuple_Pack(2, view, dtype) : NULL;
    PyObject *kw = pos && copy != Py_None ? Py_BuildValue("{sO}", "copy", copy) : NULL;
    if (pos != NULL && (copy == Py_None || kw != NULL)) out = PyObject_Call(asarray, pos, kw);
    Py_XDECREF(kw);
    Py_XDECREF(pos);
    Py_XDECREF(asarray);
    return out;
}

/* NumPy 2's __array__(dtype=None, copy=None) of an extended producer. np.asarray
 * tries the buffer first and, when it fails, swallows the BufferError and
 * falls back to a 0-d object array -- under an exclusive borrow a user would
 * get that silently. NumPy reaches __array__ after the buffer failed (or when
 * asked directly): the zero-copy view through the buffer, or the buffer's
 * refusal, which then reaches the user. Custom items (whose format the
 * producer refuses NumPy, PYXBUF_EXTENDED_FORMAT) come as an ndarray of
 * their NumPy dtype (custom_array); pyxbuf_get, which passes that bit, reads
 * their format. `copy` as NumPy means it: True always copies, False never
 * (NumPy's ValueError when dtype needs one). */
PyObject *pyxbuf_numpy_array(PyObject *obj, PyObject *dtype, PyObject *copy) {
    if (obj == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_numpy_array: obj is NULL");
        return NULL;
    }
    dtype = dtype != NULL ? dtype : Py_None;
    copy = copy != NULL ? copy : Py_None;
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL) return NULL;
    pyxbuf_view v;
    PyObject *view = NULL, *out = NULL;
    if (pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) == 0) { /* the refusal, if any, says why */
        view = pyxbuf__format_holds_custom(v.base.format)
                   ? custom_array(obj, v.base.format, v.base.itemsize, numpy)
                   : PyMemoryView_FromObject(obj);
        pyxbuf_release(&v);
    }
    if (view != NULL) {
        out = as_array(numpy, view, dtype, copy);
        Py_DECREF(view);
    }
    Py_DECREF(numpy);
    return out;
}

/* pyxbuf.Exporter.__array__: pyxbuf_numpy_array. */
PyObject *pyxbuf__exporter_array(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$O:__array__", kwlist, &dtype, &copy))
        return NULL;
    return pyxbuf_numpy_array(self, dtype, copy);
}
