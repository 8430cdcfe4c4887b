/* dlpack_import.c -- the DLPack bridge: pyxbuf_get reading a DLPack tensor,
 * through the DLPack 1.3 C exchange table or __dlpack__. Its DLPack
 * declarations are bridges/dlpack_abi.h; the export is export/dlpack_export.c.
 *
 * Import rules (each is a decision; DESIGN.md "Acquisition" item 2):
 *  - The C exchange table, type(obj).__dlpack_c_exchange_api__ (a capsule
 *    named "dlpack_exchange_api"), is looked up once per type and cached under
 *    (type, tp_version_tag); when present, acquisition makes no Python call.
 *  - Otherwise __dlpack__(max_version=(1, 3), stream=..., copy=False when the
 *    request is writable). dl_device is never passed: pyxbuf never asks a
 *    producer to move data (the Array API's "no implicit transfer"); a device
 *    tensor asked without PYXBUF_DEVICE is refused. A producer that raises
 *    TypeError for those keywords (pre-2023 producers) is called again as
 *    __dlpack__() or __dlpack__(stream=...) and must give the legacy capsule.
 *  - Consumed capsules are renamed "used_dltensor[_versioned]"; from then on
 *    the tensor belongs to a holder object (the view's owner) whose death calls
 *    the DLPack deleter, once, with the GIL. Every failure after the rename
 *    goes through the holder too, so the deleter runs exactly once whatever
 *    happens.
 *  - dtypes become formats as bridges/dlpack_dtype.c says.
 *  - kDLCPU, kDLCUDAHost and kDLROCMHost are host memory (device NULL);
 *    anything else is device memory described as PYXBUF_DEVICE_DLPACK with a
 *    pyxbuf_device_info in the holder, and, when a backend for its device type
 *    is registered, the backend must agree that the pointer is on that device.
 *  - Streams. pyxbuf_get passes stream=None (the producer assumes the default
 *    stream). pyxbuf_get_stream passes the consumer's stream after asking
 *    __dlpack_device__: None for host tensors (the specification allows only
 *    None there), 1 for pyxbuf's 0 on CUDA (DLPack forbids 0 on CUDA; 1 is the
 *    legacy default stream that 0 means in pyxbuf's convention), the integer
 *    otherwise. The producer then orders its work before that stream, so the
 *    view's sync_event is NULL (ready for work on that stream). Without a
 *    stream the producer orders its work before the default stream only, so
 *    for a device tensor pyxbuf records an event there and hands it over as
 *    sync_event, destroyed with the view. The C exchange table is "no sync": for a device
 *    tensor pyxbuf records an event on the producer's current work stream
 *    (current_work_stream) and hands it over as sync_event (the consumer waits
 *    with pyxbuf_device_wait; a stream given to pyxbuf_get_stream is made to
 *    wait at once), destroyed with the view.
 */

#include "bridges/dlpack.h"
#include "base/fixes.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Import: the holder that owns a consumed tensor                            */
/* ------------------------------------------------------------------------- */

static void run_deleter(void *tensor, int versioned) {
    if (versioned) {
        DLManagedTensorVersioned *t = tensor;
        if (t->deleter != NULL) t->deleter(t);
    } else {
        DLManagedTensor *t = tensor;
        if (t->deleter != NULL) t->deleter(t);
    }
    if (PYXBUF_UNLIKELY(PyErr_Occurred() != NULL)) PyErr_WriteUnraisable(NULL);
}

void pyxbuf__dlpack_call_deleter(void *tensor, int versioned) {
    if (tensor == NULL) return;
    if (PYXBUF_LIKELY(PyErr_Occurred() == NULL)) {
        run_deleter(tensor, versioned);
        return;
    }
    /* The deleter runs arbitrary code (often Py_DECREF): keep a pending
     * exception (an error path's) out of its way. */
    PyObject *pending = PyErr_GetRaisedException();
    run_deleter(tensor, versioned);
    PyErr_SetRaisedException(pending);
}

void pyxbuf__dlpack_release_bare(void *tensor) { pyxbuf__dlpack_call_deleter(tensor, 1); }

static void hold_finalize(void *storage) {
    pyxbuf__dl_hold *h = storage;
    if (h->info.sync_event != NULL) {
        pyxbuf_backend b;
        if (pyxbuf_backend_get(h->info.device_type, &b, NULL) == 0 && b.event_destroy != NULL)
            b.event_destroy(b.ctx, h->info.device_id, h->info.sync_event, NULL);
        h->info.sync_event = NULL;
    }
    void *t = h->tensor;
    h->tensor = NULL;
    pyxbuf__dlpack_call_deleter(t, h->versioned);
}

PyObject *pyxbuf__dlpack_hold_new(void *tensor, int versioned, int32_t path,
                                  pyxbuf__dl_hold **out) {
    int32_t ndim = versioned ? ((DLManagedTensorVersioned *)tensor)->dl_tensor.ndim
                             : ((DLManagedTensor *)tensor)->dl_tensor.ndim;
    /* A versioned tensor of another major version has no ndim we may read. */
    if (versioned && ((DLManagedTensorVersioned *)tensor)->version.major != DL_MAJOR) ndim = 0;
    size_t spill = ndim > PYXBUF_INLINE_NDIM && ndim <= PYXBUF_MAX_NDIM ? (size_t)ndim : 0;
    PyObject *holder = pyxbuf__holder_new(sizeof(pyxbuf__dl_hold) + 2 * spill * sizeof(Py_ssize_t),
                                          hold_finalize);
    if (holder == NULL) {
        pyxbuf__dlpack_call_deleter(tensor, versioned);
        return NULL;
    }
    pyxbuf__dl_hold *h = pyxbuf__holder_storage(holder);
    h->tensor = tensor;
    h->versioned = versioned;
    h->path = path;
    *out = h;
    return holder;
}
/* ------------------------------------------------------------------------- */
/* Import: describing the tensor                                             */
/* ------------------------------------------------------------------------- */

static int host_device_type(int32_t t) {
    return t == kDLCPU || t == kDLCUDAHost || t == kDLROCMHost;
}

/* When a backend serves the tensor's device type, it must agree that both
 * ends of the tensor's bytes are memory of that very device. */
static int check_device_pointer(const Py_buffer *base, int32_t type, int32_t id) {
    pyxbuf_backend b;
    if (pyxbuf_backend_get(type, &b, NULL) < 0) return 0;
    Py_ssize_t lo = 0, hi = 0;
    if (pyxbuf__view_span(base, &lo, &hi) < 0)
        return pyxbuf__buffer_error("pyxbuf: the DLPack tensor's shape and strides overflow");
    pyxbuf_device claimed = {type, id};
    pyxbuf_error err;
    if (pyxbuf__check_device_span(&b, base->buf, lo, hi, &claimed, &err) < 0)
        return pyxbuf__buffer_error("pyxbuf: the DLPack tensor is invalid: %s", err.message);
    return 0;
}

/* The DLTensor inside the tensor `h` holds, its version and flags recorded in
 * `h`; NULL with BufferError for a major version pyxbuf cannot read. */
static PYXBUF_ALWAYS_INLINE DLTensor *tensor_of(pyxbuf__dl_hold *h) {
    if (!h->versioned) return &((DLManagedTensor *)h->tensor)->dl_tensor;
    DLManagedTensorVersioned *m = h->tensor;
    h->version = m->version;
    if (m->version.major != DL_MAJOR) {
        pyxbuf__buffer_error("pyxbuf: the DLPack tensor has version %u.%u; pyxbuf reads major "
                             "version %d (DLPack %d.%d); ask the producer for max_version (1, 3)",
                             m->version.major, m->version.minor, DL_MAJOR, DL_MAJOR, DL_MINOR);
        return NULL;
    }
    h->dl_flags = m->flags;
    return &m->dl_tensor;
}

/* The tensor's format (a static string) and itemsize, or -1 with
 * BufferError: its ndim, shape pointer and dtype must be ones a buffer can
 * say, and a copy (IS_COPIED) cannot be written through. */
static PYXBUF_ALWAYS_INLINE int tensor_format(const DLTensor *t, uint64_t dl_flags, int32_t flags,
                                              const char **format, Py_ssize_t *itemsize) {
    if (t->ndim < 0 || t->ndim > PYXBUF_MAX_NDIM)
        return pyxbuf__buffer_error(
            "pyxbuf: the DLPack tensor has %d dimensions; pyxbuf accepts 0..%d", (int)t->ndim,
            PYXBUF_MAX_NDIM);
    if (t->ndim > 0 && t->shape == NULL)
        return pyxbuf__buffer_error("pyxbuf: the DLPack tensor has %d %s but a NULL shape",
                                    (int)t->ndim,
                                    PYXBUF__PLURAL(t->ndim, "dimension", "dimensions"));
    char why[320];
    *format = pyxbuf__dlpack_dtype_to_format(t->dtype, (dl_flags & DL_FLAG_SUBBYTE_PADDED) != 0,
                                             itemsize, why, sizeof why);
    if (*format == NULL) return pyxbuf__buffer_error("pyxbuf: the DLPack tensor's %s", why);
    if ((dl_flags & DL_FLAG_IS_COPIED) && (flags & PyBUF_WRITABLE))
        return pyxbuf__buffer_error(
            "pyxbuf: the producer exported a copy (DLPACK_FLAG_BITMASK_IS_COPIED), so "
            "writes would not reach it; the request asks for PyBUF_WRITABLE");
    return 0;
}

/* The tensor's shape and strides in bytes into `shape` and `strides` (ndim
 * entries each): every count a Py_ssize_t and their product and the byte
 * strides free of overflow. -1 with BufferError. */
static PYXBUF_ALWAYS_INLINE int tensor_dims(const DLTensor *t, Py_ssize_t itemsize,
                                            Py_ssize_t *shape, Py_ssize_t *strides) {
    int ndim = (int)t->ndim;
    Py_ssize_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > PY_SSIZE_T_MAX)
            return pyxbuf__buffer_error("pyxbuf: the DLPack tensor's shape[%d] = %lld is invalid",
                                        i, (long long)t->shape[i]);
        shape[i] = (Py_ssize_t)t->shape[i];
        if (!PYXBUF__MUL_OK(count, shape[i], &count))
            return pyxbuf__buffer_error(
                "pyxbuf: the DLPack tensor's shape overflows the address space");
    }
    Py_ssize_t next = itemsize;
    for (int i = ndim - 1; i >= 0; i--) {
        if (t->strides == NULL) { /* C order, as DLPack defines a NULL strides */
            strides[i] = next;
            if (shape[i] > 1 && !PYXBUF__MUL_OK(next, shape[i], &next))
                return pyxbuf__buffer_error(
                    "pyxbuf: the DLPack tensor's size overflows the address space");
        } else if (t->strides[i] < -PY_SSIZE_T_MAX || t->strides[i] > PY_SSIZE_T_MAX ||
                   !PYXBUF__MUL_OK((Py_ssize_t)t->strides[i], itemsize, &strides[i])) {
            return pyxbuf__buffer_error(
                "pyxbuf: the DLPack tensor's strides[%d] = %lld overflows in bytes", i,
                (long long)t->strides[i]);
        }
    }
    return 0;
}

/* The address of the tensor's first item, data + byte_offset, as an integer:
 * an offset of 2^63 or more is a negative index to C's pointer arithmetic
 * (undefined), yet a valid address for DLPack. -1 with BufferError when it
 * leaves the address space. */
static PYXBUF_ALWAYS_INLINE int tensor_data(const DLTensor *t, char **data) {
    *data = t->data;
    if (*data == NULL) return 0;
    if (t->byte_offset > UINTPTR_MAX - (uintptr_t)*data)
        return pyxbuf__buffer_error(
            "pyxbuf: the DLPack tensor's byte_offset %llu overflows its data pointer",
            (unsigned long long)t->byte_offset);
    *data = (char *)((uintptr_t)*data + t->byte_offset);
    return 0;
}

/* Fill the view from the tensor `h` describes: the holder owns it, or with
 * no holder (NULL) the view does (bridge_data). -1 with BufferError. */
static PYXBUF_ALWAYS_INLINE int fill_view(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                         int64_t stream, PyObject *holder, pyxbuf__dl_hold *h) {
    DLTensor *t = tensor_of(h);
    if (t == NULL) return -1;
    Py_ssize_t itemsize = 0;
    const char *format = NULL;
    if (tensor_format(t, h->dl_flags, flags, &format, &itemsize) < 0) return -1;
    int ndim = (int)t->ndim;
    Py_ssize_t *dims = pyxbuf__view_dims(view, ndim, h->dims);
    char *data;
    if (tensor_dims(t, itemsize, dims, dims + ndim) < 0 || tensor_data(t, &data) < 0) return -1;
    int32_t type = t->device.device_type;
    int host = host_device_type(type);
    /* Fields not named (reserved, device) are zero. */
    pyxbuf_export_desc desc = {.size = (uint32_t)sizeof desc,
                               .ndim = ndim,
                               .buf = data,
                               .format = format,
                               .itemsize = itemsize,
                               .shape = dims,
                               .strides = dims + ndim,
                               .readonly = (h->dl_flags & DL_FLAG_READ_ONLY) != 0};
    if (!host) {
        h->info.size = (uint32_t)sizeof h->info;
        h->info.device_type = type;
        h->info.device_id = t->device.device_id;
        h->info.stream = stream == PYXBUF__STREAM_UNSET ? PYXBUF_STREAM_DEFAULT : stream;
        h->info.dl_flags = h->dl_flags & (DL_FLAG_READ_ONLY | DL_FLAG_IS_COPIED);
        desc.device = PYXBUF_DEVICE_DLPACK;
        desc.device_info = &h->info;
    }
    if ((host ? pyxbuf__export_fill_host(&view->base, obj, flags, &desc)
              : pyxbuf_export_fill(&view->base, obj, flags, &desc)) < 0)
        return -1;
    if (!host && check_device_pointer(&view->base, type, t->device.device_id) < 0) {
        Py_CLEAR(view->base.obj);
        return -1;
    }
    view->path = h->path;
    view->owner = holder;
    view->bridge_data = holder != NULL ? (void *)h : h->tensor;
    return 0;
}

int pyxbuf__dlpack_fill_view(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                             PyObject *holder, pyxbuf__dl_hold *h) {
    return fill_view(obj, view, flags, stream, holder, h);
}

/* A host tensor of DLPack major version 1 with at most PYXBUF_INLINE_NDIM
 * dimensions needs no holder: its shape fits the view and nothing about it
 * outlives the call but the tensor itself (see pyxbuf__dlpack_release_bare). */
static int can_go_bare(const DLManagedTensorVersioned *m) {
    return m->version.major == DL_MAJOR && m->dl_tensor.ndim >= 0 &&
           m->dl_tensor.ndim <= PYXBUF_INLINE_NDIM &&
           host_device_type(m->dl_tensor.device.device_type);
}

/* Describes `tensor` into the view and takes it over: 1 = acquired, -1 =
 * failed (its deleter has run). `*held` is the holder's storage when one was
 * needed (device tensors, many dimensions, legacy or foreign versions), else
 * NULL. */
static PYXBUF_ALWAYS_INLINE int adopt_tensor(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                             int64_t stream, void *tensor, int versioned,
                                             int32_t path, pyxbuf__dl_hold **held) {
    pyxbuf__dl_hold bare, *h = &bare; /* fill_view's scratch for a bare tensor: host, so its
                                 `info` and `dims` stay unused */
    pyxbuf__dl_hold *stored = NULL;    /* the holder's storage; never &bare, which dies here */
    PyObject *holder = NULL;
    if (versioned && can_go_bare(tensor)) {
        bare.tensor = tensor;
        bare.versioned = 1;
        bare.path = path;
        bare.dl_flags = 0;
        bare.info.size = 0;
    } else if ((holder = pyxbuf__dlpack_hold_new(tensor, versioned, path, &stored)) == NULL) {
        return -1;
    } else {
        h = stored;
    }
    if (fill_view(obj, view, flags, stream, holder, h) < 0) { /* view->owner not set */
        if (holder != NULL) Py_DECREF(holder); /* calls the deleter */
        else
            pyxbuf__dlpack_call_deleter(tensor, 1);
        return -1;
    }
    *held = stored;
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Import: the C exchange table                                              */
/* ------------------------------------------------------------------------- */

/* What a type offers the DLPack bridge. */
typedef struct type_offer {
    int has_dlpack; /* __dlpack__ is defined on the type */
    const DLPackExchangeAPI *api;
} type_offer;

/* Per type, by address: `key` the version tag and has_dlpack (bit 32),
 * `data` the table (kept alive by the capsule in the type's dict). */
#define API_CACHE_SIZE 64
#define API_CACHE_HAS_DLPACK ((uint64_t)1 << 32)
static pyxbuf__type_cache_entry api_cache[API_CACHE_SIZE];

static PyObject *name_exchange_api, *name_exchange_api_older, *name_dlpack, *name_dlpack_device;

/* The table of major version 1 reachable from a table's header (its own,
 * or one of its prev_api chain), or NULL. */
static const DLPackExchangeAPI *api_from_header(const DLPackExchangeAPIHeader *h) {
    for (int hops = 0; h != NULL && hops < 16; hops++, h = h->prev_api) {
        if (h->version.major != DL_MAJOR) continue;
        const DLPackExchangeAPI *api = (const DLPackExchangeAPI *)h;
        return api->managed_tensor_from_py_object_no_sync != NULL ? api : NULL;
    }
    return NULL;
}

/* DLPack 1.3's __dlpack_c_exchange_api__: a "dlpack_exchange_api" capsule. */
static const DLPackExchangeAPI *api_from_capsule(PyObject *capsule) {
    if (capsule == NULL || !PyCapsule_IsValid(capsule, CAPSULE_EXCHANGE_API)) return NULL;
    return api_from_header(PyCapsule_GetPointer(capsule, CAPSULE_EXCHANGE_API));
}

/* The same table under its name before DLPack 1.3, __c_dlpack_exchange_api__:
 * the table's address as an int in the 1.2-era proposal (apache-tvm-ffi
 * before the rename), or the capsule (PaddlePaddle 3.3 sets both names). The
 * header's version is checked before any function pointer is read. */
static const DLPackExchangeAPI *api_from_older_name(PyObject *value) {
    if (value == NULL) return NULL;
    if (!PyLong_Check(value)) return api_from_capsule(value);
    unsigned long long address = PyLong_AsUnsignedLongLong(value);
    if (address == 0 || address > UINTPTR_MAX || PyErr_Occurred()) {
        PyErr_Clear(); /* 0, negative or too large: not a table */
        return NULL;
    }
    return api_from_header((const DLPackExchangeAPIHeader *)(uintptr_t)address);
}

/* What the type offers, from the cache when its version tag still matches. */
static type_offer type_dlpack(PyTypeObject *type) {
    uintptr_t p = (uintptr_t)type;
    pyxbuf__type_cache_entry *e = &api_cache[((p >> 4) ^ (p >> 10)) & (API_CACHE_SIZE - 1)];
    unsigned int tag = pyxbuf__type_tag(type);
    uint64_t key;
    const void *data;
    if (PYXBUF_LIKELY(pyxbuf__type_cache_get(e, type, &key, &data) && tag != 0 &&
                      (uint32_t)key == tag))
        return (type_offer){(key & API_CACHE_HAS_DLPACK) != 0, data};
    PyObject *n_api = pyxbuf__interned(&name_exchange_api, "__dlpack_c_exchange_api__");
    PyObject *n_older = pyxbuf__interned(&name_exchange_api_older, "__c_dlpack_exchange_api__");
    PyObject *n_dl = pyxbuf__interned(&name_dlpack, "__dlpack__");
    if (n_api == NULL || n_older == NULL || n_dl == NULL) {
        PyErr_Clear();
        return (type_offer){0, NULL};
    }
    /* _PyType_Lookup: MRO only, raises nothing, and gives the type a version
     * tag to cache under. DLPack 1.3's name first, then the older one. The
     * table outlives the references dropped here: the type's dict holds
     * what names it while the tag holds. */
    PyObject *api = pyxbuf__type_lookup(type, n_api);
    type_offer offer = {pyxbuf__type_has(type, n_dl), api_from_capsule(api)};
    Py_XDECREF(api);
    if (offer.api == NULL) {
        PyObject *older = pyxbuf__type_lookup(type, n_older);
        offer.api = api_from_older_name(older);
        Py_XDECREF(older);
    }
    tag = pyxbuf__type_tag_to_store(type);
    if (tag != 0) /* else it cannot be cached */
        pyxbuf__type_cache_put(e, type, tag | (offer.has_dlpack ? API_CACHE_HAS_DLPACK : 0),
                               offer.api);
    return offer;
}

/* The no-sync table hands over a tensor without ordering the producer's work:
 * an event recorded on the producer's current work stream does that. */
static int order_after_producer(const DLPackExchangeAPI *api, pyxbuf__dl_hold *h, int64_t stream) {
    if (h->info.size == 0 || api->current_work_stream == NULL || stream == PYXBUF_STREAM_NONE)
        return 0;
    void *producer_stream = NULL;
    if (api->current_work_stream(h->info.device_type, h->info.device_id, &producer_stream) != 0) {
        if (!PyErr_Occurred())
            pyxbuf__buffer_error(
                "pyxbuf: current_work_stream of the DLPack C exchange table failed");
        return -1;
    }
    int64_t ps = (int64_t)(intptr_t)producer_stream;
    h->info.stream = ps;
    pyxbuf_backend b;
    pyxbuf_error err;
    if (pyxbuf_backend_get(h->info.device_type, &b, NULL) < 0 || b.event_record == NULL) return 0;
    void *event = NULL;
    if (b.event_record(b.ctx, h->info.device_id, ps, &event, &err) < 0)
        return pyxbuf_error_raise(&err);
    h->info.sync_event = event; /* destroyed by hold_finalize */
    if (stream != PYXBUF__STREAM_UNSET && b.event_wait != NULL &&
        b.event_wait(b.ctx, h->info.device_id, event, stream, &err) < 0)
        return pyxbuf_error_raise(&err);
    return 0;
}

/* Undo an adopted tensor whose view cannot be handed out: the holder's
 * reference goes (its finalizer calls the deleter), and the view holds
 * nothing. Returns -1. */
static int drop_adopted(pyxbuf_view *view) {
    PyObject *holder = view->owner;
    view->owner = NULL;
    Py_CLEAR(view->base.obj);
    Py_DECREF(holder);
    return -1;
}

/* __dlpack__ called without a stream (DLPack's None): the producer ordered
 * its work before the device's default stream only. An event recorded on
 * that stream now is what a consumer on any other stream must wait for, so
 * the view carries it; a NULL sync_event would tell that consumer the data
 * is ready when nothing ordered it. Without a backend for the device there is
 * no way to record one, and no way for pyxbuf to use the memory either. */
static int order_after_default_stream(pyxbuf__dl_hold *h) {
    pyxbuf_backend b;
    pyxbuf_error err;
    if (h->info.size == 0 || pyxbuf_backend_get(h->info.device_type, &b, NULL) < 0 ||
        b.event_record == NULL)
        return 0;
    void *event = NULL;
    if (b.event_record(b.ctx, h->info.device_id, PYXBUF_STREAM_DEFAULT, &event, &err) < 0)
        return pyxbuf_error_raise(&err);
    h->info.sync_event = event; /* destroyed by hold_finalize */
    return 0;
}

/* 1 = acquired, -1 = failed (exception set). */
static PYXBUF_ALWAYS_INLINE int acquire_c(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                          int64_t stream, const DLPackExchangeAPI *api) {
    DLManagedTensorVersioned *m = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0 || m == NULL) {
        if (m != NULL) pyxbuf__dlpack_call_deleter(m, 1);
        if (!PyErr_Occurred())
            pyxbuf__buffer_error(
                "pyxbuf: the DLPack C exchange table of '%.200s' failed without an error",
                PYXBUF__TYPE_NAME(obj));
        return -1;
    }
    pyxbuf__dl_hold *h;
    if (adopt_tensor(obj, view, flags, stream, m, 1, PYXBUF_PATH_DLPACK_C, &h) < 0) return -1;
    if (h != NULL && order_after_producer(api, h, stream) < 0) return drop_adopted(view);
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Import: __dlpack__                                                        */
/* ------------------------------------------------------------------------- */

/* The device __dlpack_device__ reports: 0 with type and id set, or -1. */
static int dlpack_device_of(PyObject *obj, int32_t *type, int32_t *id) {
    PyObject *name = pyxbuf__interned(&name_dlpack_device, "__dlpack_device__");
    if (name == NULL) return -1;
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL) return -1;
    int ok = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2;
    long t = ok ? PyLong_AsLong(PyTuple_GET_ITEM(r, 0)) : -1;
    long i = ok ? PyLong_AsLong(PyTuple_GET_ITEM(r, 1)) : -1;
    Py_DECREF(r);
    if (PyErr_Occurred()) return -1;
    if (!ok || t < 0 || t > INT32_MAX || i < 0 || i > INT32_MAX)
        return pyxbuf__buffer_error(
            "pyxbuf: __dlpack_device__ of '%.200s' must return (device_type, "
            "device_id)",
            PYXBUF__TYPE_NAME(obj));
    *type = (int32_t)t;
    *id = (int32_t)i;
    return 0;
}

/* The stream argument for a tensor on `device_type` (None for host memory
 * and for pyxbuf_get), a new reference. */
static PyObject *stream_arg(int64_t stream, int32_t device_type) {
    if (stream == PYXBUF__STREAM_UNSET || host_device_type(device_type)) Py_RETURN_NONE;
    if (device_type == kDLCUDA && stream == PYXBUF_STREAM_DEFAULT) stream = 1;
    return PyLong_FromLongLong((long long)stream);
}

/* The keyword names of the __dlpack__ calls, each a tuple of interned
 * strings (a producer matches interned names by identity, others by
 * comparing text), and max_version's value. Made once, kept for the process. */
enum { KW_MAX, KW_MAX_COPY, KW_MAX_STREAM, KW_MAX_STREAM_COPY, KW_STREAM, KW_COUNT };
typedef struct call_names {
    PyObject *kwnames[KW_COUNT];
    PyObject *max_version;
} call_names;
static void *dlpack_names; /* a call_names */

static PyObject *kwnames_of(const char *const *names, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
        PyObject *s = PyUnicode_InternFromString(names[i]);
        if (s == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static void call_names_free(call_names *n) {
    for (int i = 0; i < KW_COUNT; i++) Py_XDECREF(n->kwnames[i]);
    Py_XDECREF(n->max_version);
    PyMem_RawFree(n);
}

/* The names, built whole before they are published in one pointer: building
 * may switch threads (see pyxbuf__publish_once), and publishing a tuple
 * first once let a second thread pass a NULL max_version to __dlpack__ and
 * crash (test_threads.py, test_first_dlpack_calls_race_with_a_finalizer).
 * NULL with an exception set on failure. */
static const call_names *dlpack_call_names(void) {
    const call_names *published = PYXBUF__FT_LOAD_ACQUIRE(&dlpack_names);
    if (PYXBUF_LIKELY(published != NULL)) return published;
    static const char *const names[] = {"max_version", "stream", "copy"};
    static const char *const max_copy[] = {"max_version", "copy"};
    call_names *n = PyMem_RawCalloc(1, sizeof *n);
    if (n == NULL) return (const call_names *)PyErr_NoMemory();
    n->kwnames[KW_MAX] = kwnames_of(names, 1);
    n->kwnames[KW_MAX_COPY] = kwnames_of(max_copy, 2);
    n->kwnames[KW_MAX_STREAM] = kwnames_of(names, 2);
    n->kwnames[KW_MAX_STREAM_COPY] = kwnames_of(names, 3);
    n->kwnames[KW_STREAM] = kwnames_of(names + 1, 1);
    n->max_version = Py_BuildValue("(ii)", DL_MAJOR, DL_MINOR);
    int complete = n->max_version != NULL;
    for (int i = 0; i < KW_COUNT; i++) complete &= n->kwnames[i] != NULL;
    if (!complete) {
        call_names_free(n);
        return NULL;
    }
    published = pyxbuf__publish_ptr_once(&dlpack_names, n);
    if (published != n) call_names_free(n); /* another thread published first */
    return published;
}

/* Call __dlpack__ with the modern keywords, then without them if the producer
 * predates them. `stream` None (host memory, or no stream asked for) is not
 * passed: it is the keyword's default. New reference or NULL. */
static PyObject *call_dlpack(PyObject *obj, PyObject *stream, int writable) {
    PyObject *name = pyxbuf__interned(&name_dlpack, "__dlpack__");
    const call_names *n = name != NULL ? dlpack_call_names() : NULL;
    if (n == NULL) return NULL;
    /* copy=False only for writable requests: writes must reach the producer;
     * a reader may take a copy (the tensor then says IS_COPIED). */
    int with_stream = stream != Py_None;
    PyObject *args[4] = {obj, n->max_version, with_stream ? stream : Py_False, Py_False};
    PyObject *kwnames = with_stream ? n->kwnames[writable ? KW_MAX_STREAM_COPY : KW_MAX_STREAM]
                                    : n->kwnames[writable ? KW_MAX_COPY : KW_MAX];
    PyObject *r = PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            kwnames);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_TypeError)) return r;
    /* A producer from before the 2023 Array API: no max_version, no copy. */
    PyObject *first = PyErr_GetRaisedException();
    PyObject *legacy_args[2] = {obj, stream};
    r = PyObject_VectorcallMethod(name, legacy_args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                  with_stream ? n->kwnames[KW_STREAM] : NULL);
    if (r != NULL) {
        Py_DECREF(first);
        return r;
    }
    /* Both failed: the first error is the informative one. */
    PyErr_Clear();
    PyErr_SetRaisedException(first);
    return NULL;
}

/* Take the tensor out of a capsule __dlpack__ returned: *versioned says
 * which struct. The capsule is renamed, so its destructor no longer deletes. */
static void *consume_capsule(PyObject *obj, PyObject *capsule, int *versioned) {
    const char *used = NULL;
    void *tensor = NULL;
    if (PyCapsule_IsValid(capsule, CAPSULE_VERSIONED)) {
        tensor = PyCapsule_GetPointer(capsule, CAPSULE_VERSIONED);
        used = CAPSULE_USED_VERSIONED;
        *versioned = 1;
    } else if (PyCapsule_IsValid(capsule, CAPSULE_LEGACY)) {
        tensor = PyCapsule_GetPointer(capsule, CAPSULE_LEGACY);
        used = CAPSULE_USED_LEGACY;
        *versioned = 0;
    }
    if (tensor == NULL) {
        const char *name = PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
        PyErr_Clear();
        if (PyCapsule_CheckExact(capsule))
            pyxbuf__buffer_error(
                "pyxbuf: __dlpack__ of '%.200s' returned a capsule named '%.100s', not "
                "'" CAPSULE_VERSIONED "' or '" CAPSULE_LEGACY "'%s",
                PYXBUF__TYPE_NAME(obj), name ? name : "(null)",
                name && strncmp(name, "used_", 5) == 0 ? " (it was already consumed)" : "");
        else
            pyxbuf__buffer_error(
                "pyxbuf: __dlpack__ of '%.200s' returned '%.200s', not a DLPack capsule",
                PYXBUF__TYPE_NAME(obj), PYXBUF__TYPE_NAME(capsule));
        return NULL;
    }
    if (PyCapsule_SetName(capsule, used) < 0) return NULL; /* cannot fail for a valid capsule */
    return tensor;
}

static int refuse_device(PyObject *obj, int32_t type, int32_t id) {
    pyxbuf_device d = {type, id};
    char name[64];
    pyxbuf_device_format(&d, name, sizeof name);
    return pyxbuf__buffer_error(
        "pyxbuf: '%.200s' holds memory on device '%s', which the host cannot read; %s",
        PYXBUF__TYPE_NAME(obj), name, pyxbuf__fix(PYXBUF__FIX_DEVICE_VIEW));
}

static int acquire_py(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    int32_t dev_type = kDLCPU, dev_id = 0;
    /* A stream is passed only for device tensors: ask where the tensor is
     * (pyxbuf_get passes no stream and skips this call). */
    if (stream != PYXBUF__STREAM_UNSET) {
        if (dlpack_device_of(obj, &dev_type, &dev_id) < 0) {
            /* The specification requires __dlpack_device__; without one the
             * stream goes to __dlpack__ as given. */
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
            dev_type = -1;
        } else if (!host_device_type(dev_type) && !(flags & PYXBUF_DEVICE)) {
            return refuse_device(obj, dev_type, dev_id); /* before anything is exported */
        }
    }
    PyObject *s = stream_arg(stream, dev_type);
    if (s == NULL) return -1;
    PyObject *capsule = call_dlpack(obj, s, (flags & PyBUF_WRITABLE) != 0);
    Py_DECREF(s);
    if (capsule == NULL) return -1;
    int versioned = 0;
    void *tensor = consume_capsule(obj, capsule, &versioned);
    Py_DECREF(capsule);
    if (tensor == NULL) return -1;
    pyxbuf__dl_hold *h;
    if (adopt_tensor(obj, view, flags, stream, tensor, versioned, PYXBUF_PATH_DLPACK, &h) < 0)
        return -1;
    if (stream == PYXBUF__STREAM_UNSET && h != NULL && order_after_default_stream(h) < 0)
        return drop_adopted(view);
    return 1;
}

int pyxbuf__dlpack_type_speaks(PyTypeObject *type) {
    type_offer offer = type_dlpack(type);
    return offer.api != NULL || offer.has_dlpack;
}

const void *pyxbuf__dlpack_c_table_of(PyTypeObject *type) { return type_dlpack(type).api; }

int pyxbuf__dlpack_get_c(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                         const void *api) {
    pyxbuf__view_begin(view, flags);
    int rc = acquire_c(obj, view, flags, stream, api);
    if (PYXBUF_LIKELY(rc == 1)) view->state = PYXBUF__STATE_ACQUIRED;
    return rc;
}

int pyxbuf__dlpack_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    type_offer offer = type_dlpack(Py_TYPE(obj));
    if (offer.api != NULL) return acquire_c(obj, view, flags, stream, offer.api);
    if (!offer.has_dlpack) return 0;
    return acquire_py(obj, view, flags, stream);
}
