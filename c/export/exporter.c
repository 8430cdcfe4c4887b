/* exporter.c -- the ready-made exporter type (pyxbuf.Exporter) that owns a
 * block of memory, counts borrows and exports it through the extended
 * protocol and DLPack; the only file that makes exporters (pyxbuf_to_device
 * too). Filling its views is fill.c's. */

#include "export/dlpack_export.h"
#include "export/exporter.h"
#include "base/platform.h" /* pyxbuf__aligned_free */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <structmember.h>

/* ------------------------------------------------------------------------- */
/* The exporter type                                                         */
/* ------------------------------------------------------------------------- */

static PyObject *exporter_type_object = NULL; /* a type; kept for the process */

/* A request for the format of custom items without PYXBUF_EXTENDED_FORMAT:
 * a classic consumer, which cannot read it (format/format.h). Refused, so
 * that np.asarray, whose memoryview of the exporter fails, falls back to
 * __array__ (NumPy's _array_from_array_like clears that error and tries
 * __array_struct__, __array_interface__, then __array__) instead of failing
 * on the format ("... is not a valid PEP 3118 buffer format string"). */
static int refuse_classic_format(pyxbuf__exporter *e, Py_buffer *view) {
    view->obj = NULL;
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf.Exporter: its format '%.200s' holds a custom type, which a classic "
                 "buffer consumer (memoryview, bytes(), np.frombuffer) cannot read; for a NumPy "
                 "array of its NumPy dtype use np.asarray(exporter) (zero-copy), for the items "
                 "pyxbuf's consumers (pyxbuf.inspect, PyXBuffer<T> in Rust, pyxbuf_get in C)",
                 e->desc.format);
    return -1;
}

/* The exporter's event (device_info) may be replaced by another thread
 * (pyxbuf_exporter_set_event): a view is filled in a critical section on the
 * exporter, so it sees one event or the other. */
static PYXBUF_ALWAYS_INLINE int fill_and_grant(pyxbuf__exporter *e, Py_buffer *view, int flags) {
    PyObject *self = (PyObject *)e;
    int rc;
    Py_BEGIN_CRITICAL_SECTION(self);
    rc = pyxbuf_export_fill(view, self, flags, &e->desc);
    Py_END_CRITICAL_SECTION();
    if (rc < 0) return -1;
    if (pyxbuf_borrow_acquire(&e->borrows, view, flags, "a pyxbuf.Exporter") < 0) {
        Py_CLEAR(view->obj);
        return -1;
    }
    /* A grant is only as strong as the exporter's own hold on the memory. */
    pyxbuf_view *x = (pyxbuf_view *)view;
    if (e->desc.tracked && (flags & PYXBUF_EXTENDED_FLAGS) &&
        (x->ext_flags & (PYXBUF_EXT_SHARED | PYXBUF_EXT_EXCLUSIVE)))
        x->ext_flags |= PYXBUF_EXT_TRACKED;
    return 0;
}

/* A custom format or memory shared with other processes. */
static PYXBUF_NOINLINE int slow_getbuffer(pyxbuf__exporter *e, Py_buffer *view, int flags) {
    /* (Device memory a request without PYXBUF_DEVICE cannot have: fill.c
     * says so, the first thing to fix.) */
    if (e->custom_format && (flags & PyBUF_FORMAT) && !(flags & PYXBUF_EXTENDED_FORMAT) &&
        (e->desc.device == NULL || (flags & PYXBUF_DEVICE)))
        return refuse_classic_format(e, view);
    if (!e->process_shared) return fill_and_grant(e, view, flags);
    /* Other processes may write the memory whatever this one grants: no
     * grant at all (ext_flags stays 0), and nothing counted to release. */
    return pyxbuf_export_fill(view, (PyObject *)e, flags, &e->desc);
}

static int exporter_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    if (PYXBUF_UNLIKELY(e->slow_getbuffer)) return slow_getbuffer(e, view, flags);
    return fill_and_grant(e, view, flags);
}

static void exporter_releasebuffer(PyObject *self, Py_buffer *view) {
    pyxbuf_borrow_release(&((pyxbuf__exporter *)self)->borrows, view);
}

/* The producer's last event dies with the exporter (or when replaced). */
static void destroy_event(pyxbuf__exporter *e) {
    void *event = e->device_info.sync_event;
    e->device_info.sync_event = NULL;
    if (event == NULL) return;
    pyxbuf_backend b;
    if (pyxbuf_backend_get(e->device.device_type, &b, NULL) == 0 && b.event_destroy != NULL)
        b.event_destroy(b.ctx, e->device.device_id, event, NULL);
}

static void exporter_dealloc(PyObject *self) {
    pyxbuf__exporter *e = (pyxbuf__exporter *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (e->weakreflist != NULL) PyObject_ClearWeakRefs(self);
    destroy_event(e);
    if (e->free_fn != NULL) e->free_fn(e->free_ctx);
    Py_XDECREF(e->shared_memory);
    PyMem_Free(e->desc.shape); /* shape and strides share one block */
    PyMem_Free((void *)e->desc.format);
    PyMem_Free((void *)e->desc.device);
    PYXBUF__TP_FREE(tp)(self);
    Py_DECREF(tp);
}

/* Exporter.to_device(device): the Array API's method. */
static PyObject *exporter_to_device(PyObject *self, PyObject *arg) {
    pyxbuf_device target;
    if (pyxbuf__parse_device(arg, &target) < 0) return NULL;
    pyxbuf_view view;
    if (pyxbuf_get(self, &view, PyBUF_RECORDS_RO | PYXBUF_DEVICE) < 0) return NULL;
    PyObject *out = pyxbuf_to_device(&view, &target, PYXBUF_STREAM_DEFAULT);
    pyxbuf_release(&view);
    return out;
}

static PyObject *exporter_dlpack(PyObject *self, PyObject *args, PyObject *kwargs);
static PyObject *exporter_dlpack_device(PyObject *self, PyObject *unused);

/* Each docstring starts with the method's text signature ("name($self, ...)"
 * then "--"), which help() and inspect.signature() read. */
static PyMethodDef exporter_methods[] = {
    {"to_device", exporter_to_device, METH_O,
     "to_device($self, device, /)\n--\n\n"
     "The same data on `device` ('cpu', 'cuda:0', 'ext_dev:0', ... or a (device_type, "
     "device_id) tuple): this object when it is already there, else a new Exporter holding a "
     "C-order copy."},
    {"__dlpack__", (PyCFunction)(void (*)(void))exporter_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule of the memory: 'dltensor_versioned', or the legacy 'dltensor' when "
     "max_version is None. `stream` is the consumer's stream (DLPack's integers), "
     "`max_version` the newest (major, minor) DLPack version the consumer reads, `dl_device` "
     "a (device_type, device_id) to export to, `copy` True (always copy), False (never: "
     "refused when dl_device needs one) or None (copy only when dl_device needs one)."},
    {"__sizeof__", pyxbuf__exporter_sizeof, METH_NOARGS,
     "__sizeof__($self, /)\n--\n\n"
     "Bytes the object takes, its items included when it owns them (as NumPy counts an "
     "array that owns its data): what sys.getsizeof reports, and Dask's sizeof with it."},
    {"__reduce_ex__", pyxbuf__exporter_reduce_ex, METH_O,
     "__reduce_ex__($self, protocol, /)\n--\n\n"
     "Pickle support. With `protocol` 5 and later the items go out as one "
     "pickle.PickleBuffer: out of band when the pickler has a buffer_callback (no copy), in "
     "band otherwise; before 5, as bytes. Format, shape, strides (C or Fortran order; any other layout is sent as a "
     "C-order copy), read-only flag and device come back; device memory travels through a "
     "host copy and is restored on a device of the same kind and index (pyxbuf._pickle). "
     "An exporter over a SharedMemory block pickles the block's name (no copy)."},
    {"__dlpack_device__", exporter_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n"
     "Where the memory lives, as DLPack's integers: (device_type, device_id)."},
    {"__array__", (PyCFunction)(void (*)(void))pyxbuf__exporter_array,
     METH_VARARGS | METH_KEYWORDS,
     "__array__($self, /, dtype=None, *, copy=None)\n--\n\n"
     "A NumPy array of the memory: a zero-copy view through the buffer protocol, or a copy. "
     "Custom items ('[ml_dtypes$bfloat16]', a registered '[module$name]') come as their "
     "NumPy dtype (ml_dtypes.bfloat16, np.dtype(module.name)), strides and read-only flag "
     "kept; pyxbuf.ItemTypeError when NumPy has none. `dtype` the NumPy dtype wanted (None: "
     "the buffer's own); `copy` True (always copy), False (never: ValueError when `dtype` "
     "needs one) or None (copy only when needed). The buffer's BufferError when a borrow "
     "forbids the view (np.asarray would otherwise return a 0-d object array)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef exporter_getset[] = {
    {"shape", pyxbuf__exporter_get_shape, NULL, "Shape of the exported array.", NULL},
    {"strides", pyxbuf__exporter_get_strides, NULL, "Strides in bytes.", NULL},
    {"format", pyxbuf__exporter_get_format, NULL, "Buffer format string of one item.", NULL},
    {"device", pyxbuf__exporter_get_device, NULL, "Where the memory lives: 'cpu', 'cuda:0', ...",
     NULL},
    {"borrows", pyxbuf__exporter_get_borrows, NULL, "Live views and borrow grants, by kind.", NULL},
    {"__cuda_array_interface__", pyxbuf__exporter_get_cai, NULL,
     "The CUDA Array Interface (version 3) of CUDA memory, for cupy.asarray and Numba; "
     "AttributeError for memory elsewhere and for formats no typestr spells.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef exporter_members[] = {
    {"itemsize", T_PYSSIZET, offsetof(pyxbuf__exporter, itemsize), READONLY, "Bytes per item."},
    {"nbytes", T_PYSSIZET, offsetof(pyxbuf__exporter, nbytes), READONLY, "Bytes in total."},
    {"readonly", T_INT, offsetof(pyxbuf__exporter, desc.readonly), READONLY, "Read-only memory."},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pyxbuf__exporter, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot exporter_slots[] = {
    {Py_tp_dealloc, (void *)exporter_dealloc},
    {Py_tp_getset, exporter_getset},
    {Py_tp_methods, exporter_methods},
    {Py_tp_members, exporter_members},
    {Py_bf_getbuffer, (void *)exporter_getbuffer},
    {Py_bf_releasebuffer, (void *)exporter_releasebuffer},
    {Py_tp_doc, (void *)"A block of memory exported through the extended buffer protocol "
                        "and DLPack, with borrow counting. Not created by calling the type: "
                        "from Python by pyxbuf.exporter(), pyxbuf.from_dlpack() and "
                        "pyxbuf.to_device(), from C by pyxbuf_exporter_new or "
                        "pyxbuf_exporter_wrap."},
    {0, NULL},
};

static PyType_Spec exporter_spec = {
    .name = "pyxbuf.Exporter",
    .basicsize = (int)sizeof(pyxbuf__exporter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = exporter_slots,
};

PyTypeObject *pyxbuf_exporter_type(void) {
    PyObject *published = PYXBUF__FT_LOAD_ACQUIRE(&exporter_type_object);
    if (published != NULL) return (PyTypeObject *)published;
    PyObject *tp = PyType_FromSpec(&exporter_spec);
    if (tp == NULL) return NULL;
    /* PYXBUF_EXTENDED_FORMAT: pyxbuf's consumers say that they read custom
     * items; a request for their format without it is refused. */
    int32_t supported = PYXBUF_CLASSIC_FLAGS | PYXBUF_EXTENDED_FLAGS | PYXBUF_EXTENDED_FORMAT;
    if (pyxbuf_type_set_supported_flags((PyTypeObject *)tp, supported) < 0 ||
        pyxbuf_type_set_dlpack_exchange_api((PyTypeObject *)tp) < 0) {
        Py_DECREF(tp);
        return NULL;
    }
    /* A second type would make its exporters fail the type checks. (One
     * type per copy of libpyxbuf: its slots raise messages in the terms of
     * that copy's binding, fixes.c.) */
    return (PyTypeObject *)pyxbuf__publish_once(&exporter_type_object, tp);
}

static char *copy_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = PyMem_Malloc(n);
    if (c == NULL) return (char *)PyErr_NoMemory();
    memcpy(c, s, n);
    return c;
}

/* The caller's device identifier and info into `e`: "pyxbuf.dlpack" info is
 * copied (its size says how much the writer filled) and names the device;
 * other identifiers' info is the caller's, kept as given. */
static int adopt_device(pyxbuf__exporter *e, const pyxbuf_export_desc *d) {
    e->device.device_type = PYXBUF_DL_CPU;
    e->desc.device_info = d->device_info;
    if (d->device == NULL || pyxbuf_device_equal(d->device, NULL)) return 0;
    int64_t bad = pyxbuf__device_id_invalid_at(d->device);
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf_exporter_wrap: desc.device is not a device identifier (byte %lld "
                     "is invalid: identifiers are non-empty UTF-8 of at most %d bytes)",
                     (long long)bad, PYXBUF__DEVICE_ID_MAX);
        return -1;
    }
    e->desc.device = copy_string(d->device);
    if (e->desc.device == NULL) return -1;
    if (!pyxbuf_device_equal(e->desc.device, PYXBUF_DEVICE_DLPACK)) return 0;
    const pyxbuf_device_info *info = d->device_info;
    if (info == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_exporter_wrap: device \"" PYXBUF_DEVICE_DLPACK
                                          "\" needs a pyxbuf_device_info in desc.device_info");
        return -1;
    }
    size_t n = info->size < sizeof e->device_info ? info->size : sizeof e->device_info;
    memcpy(&e->device_info, info, n);
    e->device_info.size = (uint32_t)sizeof e->device_info;
    e->desc.device_info = &e->device_info;
    e->device.device_type = info->device_type;
    e->device.device_id = info->device_id;
    return 0;
}

/* The caller's shape and strides (C strides when absent) into one block the
 * exporter owns, with the strides in items that DLPack needs (NULL when a
 * byte stride is not a whole number of items), and the item size and bytes. */
static int adopt_dims(pyxbuf__exporter *e, const pyxbuf_export_desc *d) {
    size_t dims = d->ndim > 0 ? (size_t)d->ndim : 1;
    Py_ssize_t *block = PyMem_Calloc(3 * dims, sizeof(Py_ssize_t));
    if (block == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    e->desc.shape = block;
    e->desc.strides = block + dims;
    if (pyxbuf__desc_itemsize(&e->desc, &e->itemsize) < 0) return -1;
    e->desc.itemsize = e->itemsize;
    Py_ssize_t stride = e->itemsize;
    Py_ssize_t *items = block + 2 * dims;
    int whole = e->itemsize > 0;
    for (int32_t i = d->ndim - 1; i >= 0; i--) {
        e->desc.shape[i] = d->shape[i];
        e->desc.strides[i] = d->strides ? d->strides[i] : stride;
        stride *= d->shape[i] > 0 ? d->shape[i] : 1;
        if (whole && e->desc.strides[i] % e->itemsize == 0)
            items[i] = e->desc.strides[i] / e->itemsize;
        else
            whole = 0;
    }
    e->item_strides = whole ? items : NULL;
    return pyxbuf__desc_nbytes(&e->desc, e->itemsize, &e->nbytes);
}


/* Copy the caller's description into `e`: what it points to becomes the
 * exporter's own (freed in exporter_dealloc), the memory itself excepted. */
static int adopt_desc(pyxbuf__exporter *e, const pyxbuf_export_desc *d) {
    e->desc = *d;
    e->desc.shape = NULL;
    e->desc.strides = NULL;
    e->desc.device = NULL;
    e->desc.device_info = NULL;
    e->desc.format = copy_string(d->format ? d->format : "B");
    if (e->desc.format == NULL || adopt_device(e, d) < 0) return -1;
    e->custom_format = pyxbuf__format_holds_custom(e->desc.format);
    e->slow_getbuffer = e->custom_format;
    return adopt_dims(e, d);
}

PyObject *pyxbuf_exporter_wrap(const pyxbuf_export_desc *desc, void (*free_fn)(void *),
                               void *free_ctx) {
    if (pyxbuf__check_desc(desc) < 0) return NULL;
    PyTypeObject *tp = pyxbuf_exporter_type();
    if (tp == NULL) return NULL;
    pyxbuf__exporter *e = PyObject_New(pyxbuf__exporter, tp);
    if (e == NULL) return NULL;
    memset((char *)e + sizeof(PyObject), 0, sizeof *e - sizeof(PyObject));
    if (adopt_desc(e, desc) < 0) {
        e->device_info.sync_event = NULL; /* still the caller's on failure */
        Py_DECREF(e); /* frees what adopt_desc copied; free_fn not yet owned */
        return NULL;
    }
    e->free_fn = free_fn;
    e->free_ctx = free_ctx;
    return (PyObject *)e;
}

/* New pageable memory for a host result the copy fills whole: the CPU
 * backend's alloc zeroes, one thread faulting every page in first (87 ms of
 * a 256 MiB result's first copy, which took 171 ms, on an H200 machine:
 * bench/results/2026-11-28-h200-transfer.md); here the staging threads
 * fault the pages in, in parallel, as they drain into them. Only while the
 * CPU backend is pyxbuf's own (one registered in its place allocates as it
 * likes).
 * 1 with *buf, or 0 to allocate as usual. */
static int unzeroed_host(size_t nbytes, void **buf, void (**free_fn)(void *), void **free_ctx) {
    pyxbuf_backend cpu;
    if (pyxbuf_backend_get(PYXBUF_DL_CPU, &cpu, NULL) < 0 ||
        cpu.alloc != pyxbuf__cpu_backend()->alloc)
        return 0;
    void *p = pyxbuf__cpu_alloc_unzeroed(nbytes);
    if (p == NULL) return 0; /* the usual path reports it */
    *buf = p;
    *free_fn = pyxbuf__aligned_free;
    *free_ctx = p;
    return 1;
}

/* Allocate `nbytes` on `device` for work on `stream`; free_fn(free_ctx)
 * releases it. Host memory that a device `from` fills is pooled page-locked
 * memory when the pool has an idle block of its size (the copy then runs at
 * the link's rate, with no page faulted in during it); else pageable memory,
 * which the copy fills through staging buffers. Device memory comes from the backend's
 * stream-ordered pool where it has one, and is freed when the exporter dies
 * in the order device/device_alloc.c writes down: on `stream`, after every
 * other stream a view of it was handed to (pyxbuf_get_stream,
 * pyxbuf_device_wait, __dlpack__(stream=)). *pooled says which. 0 and
 * *buf, or -1 with an exception. */
static int allocate_on(const pyxbuf_device *device, size_t nbytes, const pyxbuf_device *from,
                       int64_t stream, void **buf, int *pooled, void (**free_fn)(void *),
                       void **free_ctx) {
    pyxbuf_error err;
    *pooled = 0;
    if (from != NULL && device->device_type == PYXBUF_DL_CPU &&
        !pyxbuf__host_accessible(from->device_type)) {
        /* An idle pooled block or none (never a page-locking on this
         * path: the pool grows in the background), so the GIL stays. */
        pyxbuf__pinned_block *pinned =
            pyxbuf__pinned_result(from->device_type, from->device_id, nbytes);
        if (pinned != NULL) {
            *free_fn = pyxbuf__pinned_give_finished; /* the copy completed before return */
            *free_ctx = pinned;
            *buf = pinned->ptr;
            return 0;
        }
        if (unzeroed_host(nbytes, buf, free_fn, free_ctx)) return 0;
    }
    /* Also for the host: the CPU backend may be replaced. */
    pyxbuf__device_block *block = NULL;
    if (pyxbuf__device_block_new(device, nbytes, stream, &block, &err) < 0)
        return pyxbuf_error_raise(&err);
    *free_fn = pyxbuf__device_block_free;
    *free_ctx = block;
    *buf = block->ptr;
    *pooled = block->pooled;
    return 0;
}

static PyObject *exporter_new_filled_from(const char *format, Py_ssize_t itemsize_given,
                                          int32_t ndim, const Py_ssize_t *shape, int32_t readonly,
                                          const pyxbuf_device *device, const pyxbuf_device *from,
                                          int64_t stream);

/* A new host result of a device copy in pageable memory (the pool had no
 * idle block of its size). */
static int result_went_without_pinned(PyObject *out, const pyxbuf_device *from,
                                      const pyxbuf_device *target) {
    return target->device_type == PYXBUF_DL_CPU && !pyxbuf__host_accessible(from->device_type) &&
           ((pyxbuf__exporter *)out)->free_fn != pyxbuf__pinned_give_finished;
}

PyObject *pyxbuf_exporter_new(const char *format, int32_t ndim, const Py_ssize_t *shape,
                              int32_t readonly, const pyxbuf_device *device) {
    return pyxbuf__exporter_new_sized(format, 0, ndim, shape, readonly, device);
}

PyObject *pyxbuf__exporter_new_sized(const char *format, Py_ssize_t itemsize_given, int32_t ndim,
                                     const Py_ssize_t *shape, int32_t readonly,
                                     const pyxbuf_device *device) {
    return exporter_new_filled_from(format, itemsize_given, ndim, shape, readonly, device, NULL,
                                    PYXBUF_STREAM_DEFAULT);
}

/* Pool memory is usable by work on its allocation stream, and on another
 * stream once it has waited for that stream (memory freed there may have
 * come back with the previous owner's work still queued): an exporter the
 * caller fills carries an event recorded after the allocation, which a
 * consumer on another stream waits for (pyxbuf_device_wait), as for any
 * producer -- unless it has happened already (an idle stream): then none,
 * and the memory is ready everywhere. */
static int mark_allocated(PyObject *e, const pyxbuf_device *device, int64_t stream) {
    void *event = NULL;
    pyxbuf_error err;
    pyxbuf_backend b;
    if (pyxbuf__record_event(device, stream, &event, &err) < 0) {
        Py_DECREF(e);
        return pyxbuf_error_raise(&err);
    }
    if (event != NULL && pyxbuf_backend_get(device->device_type, &b, NULL) == 0 &&
        b.event_query != NULL && b.event_query(b.ctx, device->device_id, event, 0, NULL) == 1) {
        b.event_destroy(b.ctx, device->device_id, event, NULL);
        event = NULL;
    }
    if (event != NULL) pyxbuf__exporter_adopt_event(e, event, stream);
    return 0;
}

/* A new exporter on `device`, its memory to be filled from device `from` on
 * `stream` (from NULL: by the caller, on the default stream). */
static PyObject *exporter_new_filled_from(const char *format, Py_ssize_t itemsize_given,
                                          int32_t ndim, const Py_ssize_t *shape, int32_t readonly,
                                          const pyxbuf_device *device, const pyxbuf_device *from,
                                          int64_t stream) {
    static const pyxbuf_device host = {PYXBUF_DL_CPU, 0};
    if (device == NULL) device = &host;
    if (ndim < 0 || ndim > PYXBUF_MAX_NDIM || (ndim > 0 && shape == NULL)) {
        PyErr_Format(PyExc_ValueError, "pyxbuf_exporter_new: ndim %d is outside 0..%d or shape is "
                     "NULL", (int)ndim, PYXBUF_MAX_NDIM);
        return NULL;
    }
    pyxbuf_export_desc d;
    memset(&d, 0, sizeof d);
    d.size = (uint32_t)sizeof d;
    d.ndim = ndim;
    d.format = format ? format : "B";
    d.shape = (Py_ssize_t *)shape;
    d.readonly = readonly;
    d.itemsize = itemsize_given;
    Py_ssize_t itemsize = 0, nbytes = 0;
    if (pyxbuf__desc_itemsize(&d, &itemsize) < 0 || pyxbuf__desc_nbytes(&d, itemsize, &nbytes) < 0)
        return NULL;
    /* C strides; pyxbuf__check_desc needs them for ndim > 1, adopt_desc copies them. */
    Py_ssize_t strides[PYXBUF_MAX_NDIM];
    Py_ssize_t stride = itemsize;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        strides[i] = stride;
        stride *= shape[i] > 0 ? shape[i] : 1;
    }
    d.strides = ndim > 0 ? strides : NULL;
    pyxbuf_device_info info;
    memset(&info, 0, sizeof info);
    if (device->device_type != PYXBUF_DL_CPU) {
        info.size = (uint32_t)sizeof info;
        info.device_type = device->device_type;
        info.device_id = device->device_id;
        d.device = PYXBUF_DEVICE_DLPACK;
        d.device_info = &info;
    }
    void (*free_fn)(void *) = NULL;
    void *free_ctx = NULL;
    int pooled = 0;
    if (allocate_on(device, (size_t)nbytes, from, stream, &d.buf, &pooled, &free_fn, &free_ctx) <
        0)
        return NULL;
    PyObject *e = pyxbuf_exporter_wrap(&d, free_fn, free_ctx);
    if (e == NULL) free_fn(free_ctx);
    if (e != NULL) ((pyxbuf__exporter *)e)->owns_memory = 1;
    if (e != NULL && pooled && from == NULL && mark_allocated(e, device, stream) < 0) return NULL;
    return e;
}

/* The format an exporter of the view's items gets. */
static const char *view_format(const pyxbuf_view *view, char *buf, size_t cap) {
    if (view->base.format != NULL) return view->base.format;
    if (view->base.itemsize == 1) return "B";
    snprintf(buf, cap, "%zds", view->base.itemsize);
    return buf;
}

/* pyxbuf_to_device: the same data on `target` -- the object itself when it
 * is there already, else a new exporter filled by the device layer's copy
 * and holding the event recorded after it. */
PyObject *pyxbuf_to_device(const pyxbuf_view *view, const pyxbuf_device *target,
                           int64_t stream) {
    pyxbuf_device src = {0, 0};
    pyxbuf_error err;
    if (view == NULL || target == NULL || !pyxbuf__view_acquired(view)) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_to_device: an acquired view and a device are "
                                          "required");
        return NULL;
    }
    if (pyxbuf_view_device(view, &src, &err) < 0) return (pyxbuf_error_raise(&err), NULL);
    if (pyxbuf_device_same(&src, target)) {
        if (view->base.obj == NULL) {
            PyErr_SetString(PyExc_BufferError, "pyxbuf_to_device: the view has no object");
            return NULL;
        }
        return Py_NewRef(view->base.obj);
    }
    if (pyxbuf__check_copy_size(view, (size_t)view->base.len) < 0) return NULL;
    char fmt[32];
    Py_ssize_t flat = view->base.itemsize ? view->base.len / view->base.itemsize : 0;
    /* Without a shape the view is one flat run of `flat` items, whatever its
     * ndim says (NumPy answers a request without PyBUF_ND with ndim 0 at any
     * length); only a single item keeps a 0-d shape. */
    int32_t ndim = view->base.shape ? view->base.ndim
                                    : (view->base.ndim == 0 && flat == 1 ? 0 : 1);
    const Py_ssize_t *shape = view->base.shape ? view->base.shape : &flat;
    PyObject *out = exporter_new_filled_from(view_format(view, fmt, sizeof fmt),
                                             view->base.itemsize, ndim, shape, 0, target, &src,
                                             stream);
    if (out == NULL) return NULL;
    void *dst = ((pyxbuf__exporter *)out)->desc.buf;
    void *event = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pyxbuf__copy_view_into(view, &src, dst, target, stream, &err);
    Py_END_ALLOW_THREADS
    if (rc == 0 && result_went_without_pinned(out, &src, target))
        pyxbuf__pinned_result_missed(src.device_type, src.device_id, (size_t)view->base.len);
    if (rc == 0) rc = pyxbuf__record_event(target, stream, &event, &err);
    if (rc < 0) {
        Py_DECREF(out);
        pyxbuf_error_raise(&err);
        return NULL;
    }
    if (event != NULL) pyxbuf__exporter_adopt_event(out, event, stream);
    return out;
}

/* 1 if `obj` (may be NULL) is a pyxbuf.Exporter: one published type. */
static int is_exporter(PyObject *obj) {
    PyObject *type = PYXBUF__FT_LOAD_ACQUIRE(&exporter_type_object);
    return obj != NULL && type != NULL && PyObject_TypeCheck(obj, (PyTypeObject *)type);
}

static pyxbuf__exporter *as_exporter(PyObject *obj, const char *who) {
    if (!is_exporter(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a pyxbuf.Exporter, got '%.200s'", who,
                     obj ? PYXBUF__TYPE_NAME(obj) : "NULL");
        return NULL;
    }
    return (pyxbuf__exporter *)obj;
}

int pyxbuf_exporter_device(PyObject *obj, pyxbuf_device *out) {
    pyxbuf__exporter *e = as_exporter(obj, "pyxbuf_exporter_device");
    if (e == NULL) return -1;
    *out = e->device;
    return 0;
}

void pyxbuf__exporter_adopt_event(PyObject *obj, void *event, int64_t stream) {
    pyxbuf__exporter *e = (pyxbuf__exporter *)obj;
    Py_BEGIN_CRITICAL_SECTION(obj);
    destroy_event(e);
    e->device_info.sync_event = event;
    e->device_info.stream = stream;
    Py_END_CRITICAL_SECTION();
}

int pyxbuf_exporter_set_event(PyObject *obj, void *event, int64_t stream) {
    pyxbuf__exporter *e = as_exporter(obj, "pyxbuf_exporter_set_event");
    if (e == NULL) return -1;
    if (e->device.device_type == PYXBUF_DL_CPU && event != NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "pyxbuf_exporter_set_event: host memory needs no event (pass NULL)");
        return -1;
    }
    pyxbuf__exporter_adopt_event(obj, event, stream);
    return 0;
}

void *pyxbuf_exporter_data(PyObject *obj) {
    pyxbuf__exporter *e = as_exporter(obj, "pyxbuf_exporter_data");
    return e ? e->desc.buf : NULL;
}

/* ------------------------------------------------------------------------- */
/* DLPack: __dlpack__ and the C exchange table, where they make exporters    */
/* ------------------------------------------------------------------------- */

/* An exact copy of the view's items on `device` (a new exporter). */
static PyObject *copy_on(const pyxbuf_view *view, const pyxbuf_device *device) {
    static const pyxbuf_device host = {PYXBUF_DL_CPU, 0};
    pyxbuf_device src;
    pyxbuf_error err;
    if (pyxbuf_view_device(view, &src, &err) < 0) return (pyxbuf_error_raise(&err), NULL);
    if (!pyxbuf_device_same(&src, device)) return pyxbuf_to_device(view, device, 0);
    /* Same device: through the host (pyxbuf_to_device copies only across
     * devices). Rare: copy=True for a tensor already where it is wanted. */
    PyObject *staged = src.device_type == PYXBUF_DL_CPU ? NULL : pyxbuf_to_device(view, &host, 0);
    if (src.device_type != PYXBUF_DL_CPU && staged == NULL) return NULL;
    PyObject *out = NULL;
    if (device->device_type == PYXBUF_DL_CPU) {
        const Py_buffer *b = &view->base;
        Py_ssize_t flat = b->itemsize ? b->len / b->itemsize : 0;
        out = pyxbuf_exporter_new(b->format, b->shape ? b->ndim : 1, b->shape ? b->shape : &flat,
                                  0, NULL);
        if (out != NULL && pyxbuf_view_copy_contiguous(view, pyxbuf_exporter_data(out),
                                                       (size_t)b->len, 'C') < 0)
            Py_CLEAR(out);
    } else {
        pyxbuf_view hv;
        if (pyxbuf_get(staged, &hv, PyBUF_RECORDS_RO) == 0) {
            out = pyxbuf_to_device(&hv, device, 0);
            pyxbuf_release(&hv);
        }
    }
    Py_XDECREF(staged);
    return out;
}

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None).
 *
 * - The capsule (pyxbuf__dlpack_capsule_of) holds a pyxbuf view of the
 *   exporter (PyBUF_RECORDS_RO | PYXBUF_DEVICE), so the exporter's borrow
 *   rules apply: the view counts as live until the consumer calls the
 *   deleter, an exclusive borrow refuses the export, and while a shared
 *   borrow is live the tensor is READ_ONLY.
 * - dl_device other than the exporter's: copy=False raises BufferError; None
 *   or True copy there (the Array API's rule: a copy is allowed unless
 *   forbidden). copy=True always copies. Copies carry IS_COPIED. */
static PyObject *exporter_dlpack(PyObject *self, PyObject *args, PyObject *kwargs) {
    pyxbuf__dlpack_request r;
    pyxbuf_device have;
    if (pyxbuf__dlpack_parse_request(args, kwargs, &r) < 0 ||
        pyxbuf_exporter_device(self, &have) < 0)
        return NULL;
    int moving = r.device_given && !pyxbuf_device_same(&r.device, &have);
    if (moving && r.copy == 0) {
        char a[64], b[64];
        pyxbuf_device_format(&have, a, sizeof a);
        pyxbuf_device_format(&r.device, b, sizeof b);
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: the exporter is on '%s' and dl_device asks for '%s', which needs a "
                     "copy, but copy=False",
                     a, b);
        return NULL;
    }
    pyxbuf_view v;
    if (pyxbuf_get(self, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) < 0) return NULL;
    int copied = moving || r.copy == 1;
    if (copied) { /* the copy waits for the exporter's event itself */
        PyObject *dup = copy_on(&v, r.device_given ? &r.device : &have);
        pyxbuf_release(&v);
        if (dup == NULL) return NULL;
        int rc = pyxbuf_get(dup, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE);
        Py_DECREF(dup); /* the view keeps it */
        if (rc < 0) return NULL;
    }
    return pyxbuf__dlpack_capsule_of(&v, &r, copied);
}

static PyObject *exporter_dlpack_device(PyObject *self, PyObject *unused) {
    (void)unused;
    pyxbuf_device d;
    if (pyxbuf_exporter_device(self, &d) < 0) return NULL;
    return Py_BuildValue("(ii)", d.device_type, d.device_id);
}

static int null_argument(void) {
    PyErr_SetString(PyExc_ValueError, "pyxbuf: NULL argument to the DLPack C exchange table");
    return -1;
}

static int xc_from_py_object(void *py_object, DLManagedTensorVersioned **out) {
    if (out != NULL) *out = NULL;
    if (py_object == NULL || out == NULL) return null_argument();
    return pyxbuf__dlpack_managed_tensor_of(py_object, out);
}

/* Only an exporter has shape and item strides that outlive the call. */
static int xc_dltensor_from_py_object(void *py_object, DLTensor *out) {
    PyObject *obj = py_object;
    if (obj == NULL || out == NULL) return null_argument();
    if (!is_exporter(obj))
        return pyxbuf__buffer_error(
            "pyxbuf: a non-owning DLTensor of '%.200s' is not available (its shape may not "
            "outlive a view); use managed_tensor_from_py_object_no_sync",
            PYXBUF__TYPE_NAME(obj));
    const pyxbuf__exporter *e = (const pyxbuf__exporter *)obj;
    return pyxbuf__dlpack_dltensor_of(obj, e->desc.shape, e->item_strides, out);
}

/* The tensor's memory as a pyxbuf.Exporter that owns the tensor. */
static void release_heap_view(void *ctx) {
    pyxbuf_release(ctx);
    free(ctx);
}

static int xc_to_py_object(DLManagedTensorVersioned *tensor, void **out_py_object) {
    if (out_py_object != NULL) *out_py_object = NULL;
    if (tensor == NULL || out_py_object == NULL) {
        if (tensor != NULL) pyxbuf__dlpack_call_deleter(tensor, 1);
        return null_argument();
    }
    pyxbuf__dl_hold *h;
    PyObject *holder =
        pyxbuf__dlpack_hold_new(tensor, 1, PYXBUF_PATH_DLPACK_C, &h); /* owns it now */
    if (holder == NULL) return -1;
    pyxbuf_view *v = calloc(1, sizeof *v);
    if (v == NULL) {
        Py_DECREF(holder);
        PyErr_NoMemory();
        return -1;
    }
    if (pyxbuf__dlpack_fill_view(holder, v, PyBUF_RECORDS_RO | PYXBUF_DEVICE, PYXBUF__STREAM_UNSET,
                                 holder, h) < 0) { /* v->owner not set */
        free(v);
        Py_DECREF(holder); /* calls the deleter */
        return -1;
    }
    /* The view owns hold_new's reference now (view->owner), as in acquire_c. */
    v->state = PYXBUF__STATE_ACQUIRED;
    pyxbuf_export_desc desc = {.size = sizeof desc,
                               .ndim = v->base.ndim,
                               .buf = v->base.buf,
                               .format = v->base.format,
                               .itemsize = v->base.itemsize,
                               .shape = v->base.shape,
                               .strides = v->base.strides,
                               .readonly = v->base.readonly,
                               /* The tensor's framework may still write it:
                                  nothing enforces the exporter's grants. */
                               .tracked = 1,
                               .device = v->device,
                               .device_info = v->device_info};
    PyObject *e = pyxbuf_exporter_wrap(&desc, release_heap_view, v);
    if (e == NULL) {
        release_heap_view(v);
        return -1;
    }
    *out_py_object = e;
    return 0;
}

static int xc_allocator(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                        void (*set_error)(void *error_ctx, const char *kind, const char *message)) {
    if (out != NULL) *out = NULL;
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = -1;
    PyObject *e = NULL;
    Py_ssize_t shape[PYXBUF_MAX_NDIM];
    char why[320];
    Py_ssize_t itemsize = 0;
    if (prototype == NULL || out == NULL || prototype->ndim < 0 ||
        prototype->ndim > PYXBUF_MAX_NDIM || (prototype->ndim > 0 && prototype->shape == NULL)) {
        PyErr_SetString(PyExc_ValueError,
                        "pyxbuf: managed_tensor_allocator needs a prototype with 0..64 "
                        "dimensions and a shape, and an out pointer");
        goto done;
    }
    /* pyxbuf stores sub-byte items one per byte (ml_dtypes' layout). */
    const char *format =
        pyxbuf__dlpack_dtype_to_format(prototype->dtype, 1, &itemsize, why, sizeof why);
    if (format == NULL) {
        pyxbuf__buffer_error("pyxbuf: managed_tensor_allocator cannot allocate the prototype's %s",
                             why);
        goto done;
    }
    for (int32_t i = 0; i < prototype->ndim; i++) shape[i] = (Py_ssize_t)prototype->shape[i];
    pyxbuf_device device = {prototype->device.device_type, prototype->device.device_id};
    e = pyxbuf_exporter_new(format, prototype->ndim, shape, 0,
                            device.device_type == PYXBUF_DL_CPU ? NULL : &device);
    if (e == NULL) goto done;
    rc = pyxbuf__dlpack_managed_tensor_of(e, out); /* the tensor's view keeps the exporter */
done:
    Py_XDECREF(e);
    if (rc < 0) pyxbuf__dlpack_report_to(error_ctx, set_error);
    PyGILState_Release(gil);
    return rc;
}

static int xc_current_work_stream(int32_t device_type, int32_t device_id, void **out_stream) {
    (void)device_type;
    (void)device_id;
    /* pyxbuf orders its work on the default stream: NULL, as DLPack says
     * for CPU and for producers without a current-stream notion. */
    if (out_stream != NULL) *out_stream = NULL;
    return 0;
}

static DLPackExchangeAPI exchange_api = {
    .header = {.version = {DL_MAJOR, DL_MINOR}, .prev_api = NULL},
    .managed_tensor_allocator = xc_allocator,
    .managed_tensor_from_py_object_no_sync = xc_from_py_object,
    .managed_tensor_to_py_object_no_sync = xc_to_py_object,
    .dltensor_from_py_object_no_sync = xc_dltensor_from_py_object,
    .current_work_stream = xc_current_work_stream,
};

int pyxbuf_type_set_dlpack_exchange_api(PyTypeObject *type) {
    if (type == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_type_set_dlpack_exchange_api: type is NULL");
        return -1;
    }
    return pyxbuf__type_dict_set(type, "__dlpack_c_exchange_api__",
                                 PyCapsule_New(&exchange_api, CAPSULE_EXCHANGE_API, NULL));
}
