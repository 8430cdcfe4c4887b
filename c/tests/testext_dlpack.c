/* testext_dlpack.c -- the DLPack part of the _pyxbuf_testext module: DLPack
 * producers that only C can write (malformed tensors, counted deleters, the
 * C exchange table) and helpers that read what the bridge and the exporter
 * made.
 *
 *   DLPackProducer(data, *, shape=None, strides=None, null_strides=False,
 *                  dtype_code=None, bits=None, lanes=1, versioned=True,
 *                  legacy_only=False, read_only=False, is_copied=False,
 *                  padded=False, major=1, minor=3, byte_offset=0,
 *                  device=None, capsule_name=None, null_deleter=False,
 *                  deleter_raises=False, ndim=None)
 *     ndim, when given, is written into the tensor whatever the shape's
 *     length (a lying producer; only shape's entries exist).
 *     `data` is any object pyxbuf can view (NumPy array, bytes, an Exporter
 *     on the emulated device); the producer holds that view and exports its
 *     memory, describing it as told. Its __dlpack__ follows the Python spec:
 *     a versioned capsule when max_version >= (1, 0) is passed (and
 *     versioned=True), else the legacy one; legacy_only=True accepts no
 *     keyword but `stream` (a pre-2023 producer). Counters: .exported,
 *     .deleted (deleter calls), .dlpack_calls, .c_calls; .last_kwargs.
 *   DLPackCProducer(...): the same, with type(obj).__dlpack_c_exchange_api__
 *     (a "dlpack_exchange_api" capsule, DLPack 1.3) whose no-sync function
 *     exports the tensor; DLPackCProducerV2's table says major version 2 and
 *     chains (prev_api) to the version-1 table.
 *   dlpack_info(obj, flags=PyBUF_RECORDS_RO, stream=None) -> dict of the
 *     pyxbuf view and what the bridge recorded (path, versioned, version,
 *     dl_flags, ...); pyxbuf_get_stream when a stream is given.
 *   capsule_info(capsule) -> dict of the tensor inside a DLPack capsule.
 *   capsule_consume(capsule, in_thread=False): take the tensor as a consumer
 *     does (rename) and call its deleter, on a new thread without the GIL
 *     when asked.
 *   dlpack_set_work_stream(stream): what current_work_stream reports for
 *     non-CPU devices.
 *   dlpack_totals() -> (exported, deleted) over every producer, alive or not.
 */
#include "pyxbuf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack_abi.h"
#include "testext_sync.h"

int pyxbuf_testext_add_dlpack(PyObject *module);

/* testext_hooks.c: what the bridge recorded for a view. */
int pyxbuf__dlpack_view_info(const pyxbuf_view *view, uint64_t *dl_flags, uint32_t *major,
                             uint32_t *minor, int32_t *versioned);

/* ------------------------------------------------------------------------- */
/* DLPackProducer                                                            */
/* ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    pyxbuf_view view; /* of `data`, held for the producer's life */
    int has_view;
    int32_t ndim;
    int64_t *shape;   /* PyMem, ndim entries */
    int64_t *strides; /* PyMem, ndim entries; unused when null_strides */
    int null_strides;
    t_dtype dtype;
    uint32_t major, minor;
    uint64_t flags;
    uint64_t byte_offset;
    t_device device;
    int versioned, legacy_only, null_deleter;
    int deleter_raises; /* the deleter leaves a RuntimeError set (a broken producer) */
    int ndim_lie;       /* ndim written into the tensor instead of the shape's length */
    int lie_ndim;
    char *capsule_name; /* PyMem; NULL = the standard name */
    /* Bumped by __dlpack__, the C table and deleters on any thread. */
    testext_counter exported, deleted, dlpack_calls, c_calls;
    PyObject *last_kwargs; /* swapped and read in a critical section on the producer */
} Producer;

static PyTypeObject *Producer_type, *CProducer_type, *CProducerV2_type;

/* One per exported tensor. */
typedef struct {
    union {
        t_versioned v;
        t_managed m;
    } t;
    Producer *owner; /* strong reference, dropped by the deleter */
    int versioned;
    int64_t dims[];
} block;

/* Process-wide counts over every producer (python-tests/test_soak.py reads
 * them after the producers themselves are gone). */
static testext_counter total_exported, total_deleted;

static void block_delete(block *b) {
    PyGILState_STATE st = PyGILState_Ensure();
    testext_count(&b->owner->deleted);
    testext_count(&total_deleted);
    int raises = b->owner->deleter_raises;
    Py_DECREF(b->owner);
    free(b);
    if (raises) PyErr_SetString(PyExc_RuntimeError, "the DLPack deleter raises");
    PyGILState_Release(st);
}

static void deleter_v(t_versioned *self) { block_delete(self->manager_ctx); }
static void deleter_m(t_managed *self) { block_delete(self->manager_ctx); }

/* A new tensor over the producer's memory; NULL with MemoryError. */
static block *make_tensor(Producer *p, int versioned) {
    size_t n = p->ndim > 0 ? (size_t)p->ndim : 1;
    block *b = calloc(1, sizeof *b + 2 * n * sizeof(int64_t));
    if (b == NULL) return (block *)PyErr_NoMemory();
    b->owner = (Producer *)Py_NewRef((PyObject *)p);
    b->versioned = versioned;
    memcpy(b->dims, p->shape, (size_t)p->ndim * sizeof(int64_t));
    memcpy(b->dims + n, p->strides, (size_t)p->ndim * sizeof(int64_t));
    t_tensor *t = versioned ? &b->t.v.dl_tensor : &b->t.m.dl_tensor;
    t->data = (char *)p->view.base.buf - p->byte_offset;
    t->device = p->device;
    t->ndim = p->lie_ndim ? p->ndim_lie : p->ndim;
    t->dtype = p->dtype;
    t->shape = b->dims;
    t->strides = p->null_strides ? NULL : b->dims + n;
    t->byte_offset = p->byte_offset;
    if (versioned) {
        b->t.v.version.major = p->major;
        b->t.v.version.minor = p->minor;
        b->t.v.manager_ctx = b;
        b->t.v.deleter = p->null_deleter ? NULL : deleter_v;
        b->t.v.flags = p->flags;
    } else {
        b->t.m.manager_ctx = b;
        b->t.m.deleter = p->null_deleter ? NULL : deleter_m;
    }
    testext_count(&p->exported);
    testext_count(&total_exported);
    return b;
}

static void block_call_deleter(block *b) {
    if (b->versioned) {
        if (b->t.v.deleter) b->t.v.deleter(&b->t.v);
    } else if (b->t.m.deleter) {
        b->t.m.deleter(&b->t.m);
    }
}

/* Deletes the tensor unless a consumer took it (renamed it "used_..."). The
 * block is the capsule's context, so a nonstandard name works too. */
static void capsule_destructor(PyObject *capsule) {
    const char *name = PyCapsule_GetName(capsule);
    block *b = PyCapsule_GetContext(capsule);
    if (b == NULL || (name != NULL && strncmp(name, "used_", 5) == 0)) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    block_call_deleter(b);
    PyErr_Restore(type, value, tb);
}

static int kw_is_set(PyObject *kwargs, const char *key, PyObject **value) {
    *value = kwargs ? PyDict_GetItemString(kwargs, key) : NULL;
    return *value != NULL && *value != Py_None;
}

static PyObject *Producer_dlpack(PyObject *self, PyObject *args, PyObject *kwargs) {
    Producer *p = (Producer *)self;
    testext_count(&p->dlpack_calls);
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "__dlpack__() takes keyword arguments only");
        return NULL;
    }
    PyObject *copy = kwargs ? PyDict_Copy(kwargs) : PyDict_New(), *old;
    if (copy == NULL) return NULL;
    Py_BEGIN_CRITICAL_SECTION(self);
    old = p->last_kwargs;
    p->last_kwargs = copy;
    Py_END_CRITICAL_SECTION();
    Py_XDECREF(old);
    if (p->legacy_only && kwargs != NULL) {
        PyObject *key;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &key, NULL))
            if (PyUnicode_CompareWithASCIIString(key, "stream") != 0) {
                PyErr_Format(PyExc_TypeError,
                             "__dlpack__() got an unexpected keyword argument '%U'", key);
                return NULL;
            }
    }
    PyObject *mv;
    int versioned = 0;
    if (!p->legacy_only && p->versioned && kw_is_set(kwargs, "max_version", &mv)) {
        long major = PyLong_AsLong(PyTuple_Check(mv) && PyTuple_GET_SIZE(mv) == 2
                                       ? PyTuple_GET_ITEM(mv, 0)
                                       : mv);
        if (major == -1 && PyErr_Occurred()) return NULL;
        versioned = major >= 1;
    }
    block *b = make_tensor(p, versioned);
    if (b == NULL) return NULL;
    const char *name = p->capsule_name ? p->capsule_name
                       : versioned      ? "dltensor_versioned"
                                        : "dltensor";
    PyObject *capsule = PyCapsule_New(&b->t, name, capsule_destructor);
    if (capsule == NULL || PyCapsule_SetContext(capsule, b) < 0) {
        Py_XDECREF(capsule);
        block_call_deleter(b);
        return NULL;
    }
    return capsule;
}

static PyObject *Producer_dlpack_device(PyObject *self, PyObject *unused) {
    (void)unused;
    Producer *p = (Producer *)self;
    return Py_BuildValue("(ii)", p->device.device_type, p->device.device_id);
}

/* (code, bits) of a buffer format, for the default dtype. */
static int dtype_of_format(const char *fmt, Py_ssize_t itemsize, t_dtype *dt) {
    if (fmt == NULL) fmt = "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    int complex = *fmt == 'Z';
    if (complex) fmt++;
    if (fmt[0] == '\0' || fmt[1] != '\0') return -1;
    dt->bits = (uint8_t)(itemsize * 8);
    dt->lanes = 1;
    if (complex) {
        if (*fmt != 'f' && *fmt != 'd') return -1;
        dt->code = 5;
        return 0;
    }
    if (strchr("bhilqn", *fmt)) dt->code = 0;
    else if (strchr("BHILQN", *fmt)) dt->code = 1;
    else if (strchr("efd", *fmt)) dt->code = 2;
    else if (*fmt == '?') dt->code = 6;
    else return -1;
    return 0;
}

static int int64_list(PyObject *seq, int64_t **out, int32_t *n) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (fast == NULL) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Calloc(len > 0 ? (size_t)len : 1, sizeof(int64_t));
    for (Py_ssize_t i = 0; *out != NULL && i < len; i++) {
        (*out)[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if ((*out)[i] == -1 && PyErr_Occurred()) break;
    }
    Py_DECREF(fast);
    if (*out == NULL) return (PyErr_NoMemory(), -1);
    if (PyErr_Occurred()) return -1;
    *n = (int32_t)len;
    return 0;
}

static PyObject *Producer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"data", "shape", "strides", "null_strides", "dtype_code", "bits",
                             "lanes", "versioned", "legacy_only", "read_only", "is_copied",
                             "padded", "major", "minor", "byte_offset", "device",
                             "capsule_name", "null_deleter", "deleter_raises", "ndim", NULL};
    PyObject *data, *shape = Py_None, *strides = Py_None, *code = Py_None, *bits = Py_None;
    PyObject *device = Py_None;
    int null_strides = 0, lanes = 1, versioned = 1, legacy_only = 0, read_only = 0;
    int is_copied = 0, padded = 0, null_deleter = 0, deleter_raises = 0;
    unsigned int major = 1, minor = 3;
    unsigned long long byte_offset = 0;
    const char *capsule_name = NULL;
    PyObject *ndim_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOpOOipppppIIKOzppO:DLPackProducer", kwlist,
                                     &data, &shape, &strides, &null_strides, &code, &bits, &lanes,
                                     &versioned, &legacy_only, &read_only, &is_copied, &padded,
                                     &major, &minor, &byte_offset, &device, &capsule_name,
                                     &null_deleter, &deleter_raises, &ndim_obj))
        return NULL;
    Producer *p = (Producer *)type->tp_alloc(type, 0);
    if (p == NULL) return NULL;
    if (pyxbuf_get(data, &p->view, PyBUF_RECORDS_RO | PYXBUF_DEVICE) < 0) goto fail;
    p->has_view = 1;
    const Py_buffer *b = &p->view.base;
    pyxbuf_device where;
    pyxbuf_error err;
    if (pyxbuf_view_device(&p->view, &where, &err) < 0) {
        pyxbuf_error_raise(&err);
        goto fail;
    }
    p->device.device_type = where.device_type;
    p->device.device_id = where.device_id;
    if (device != Py_None &&
        !PyArg_ParseTuple(device, "ii", &p->device.device_type, &p->device.device_id))
        goto fail;
    if (dtype_of_format(b->format, b->itemsize, &p->dtype) < 0) {
        p->dtype.code = 1;
        p->dtype.bits = 8;
        p->dtype.lanes = 1;
        if (code == Py_None) {
            PyErr_Format(PyExc_ValueError, "format '%s' has no default DLPack dtype; pass "
                         "dtype_code and bits", b->format);
            goto fail;
        }
    }
    if (code != Py_None) p->dtype.code = (uint8_t)PyLong_AsLong(code);
    if (bits != Py_None) p->dtype.bits = (uint8_t)PyLong_AsLong(bits);
    p->dtype.lanes = (uint16_t)lanes;
    if (PyErr_Occurred()) goto fail;
    if (shape != Py_None) {
        if (int64_list(shape, &p->shape, &p->ndim) < 0) goto fail;
        if (strides != Py_None) {
            int32_t n;
            if (int64_list(strides, &p->strides, &n) < 0) goto fail;
            if (n != p->ndim) {
                PyErr_SetString(PyExc_ValueError, "strides and shape differ in length");
                goto fail;
            }
        } else { /* C order in elements */
            p->strides = PyMem_Calloc(p->ndim > 0 ? (size_t)p->ndim : 1, sizeof(int64_t));
            if (p->strides == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            int64_t s = 1;
            for (int32_t i = p->ndim - 1; i >= 0; i--) {
                p->strides[i] = s;
                s *= p->shape[i] > 0 ? p->shape[i] : 1;
            }
        }
    } else {
        p->ndim = b->ndim;
        size_t n = b->ndim > 0 ? (size_t)b->ndim : 1;
        p->shape = PyMem_Calloc(n, sizeof(int64_t));
        p->strides = PyMem_Calloc(n, sizeof(int64_t));
        if (p->shape == NULL || p->strides == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        for (int i = 0; i < b->ndim; i++) {
            p->shape[i] = b->shape[i];
            p->strides[i] = b->strides[i] / b->itemsize;
        }
        if (strides != Py_None) {
            PyMem_Free(p->strides);
            p->strides = NULL;
            int32_t n2;
            if (int64_list(strides, &p->strides, &n2) < 0) goto fail;
        }
    }
    p->null_strides = null_strides;
    p->versioned = versioned;
    p->legacy_only = legacy_only;
    p->null_deleter = null_deleter;
    p->deleter_raises = deleter_raises;
    if (ndim_obj != Py_None) {
        p->ndim_lie = (int)PyLong_AsLong(ndim_obj);
        if (PyErr_Occurred()) goto fail;
        p->lie_ndim = 1;
    }
    p->major = major;
    p->minor = minor;
    p->byte_offset = byte_offset;
    p->flags = (read_only ? FLAG_READ_ONLY : 0) | (is_copied ? FLAG_IS_COPIED : 0) |
               (padded ? FLAG_PADDED : 0);
    if (capsule_name != NULL) {
        size_t len = strlen(capsule_name) + 1;
        p->capsule_name = PyMem_Malloc(len);
        if (p->capsule_name == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        memcpy(p->capsule_name, capsule_name, len);
    }
    return (PyObject *)p;
fail:
    Py_DECREF(p);
    return NULL;
}

static void Producer_dealloc(PyObject *self) {
    Producer *p = (Producer *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (p->has_view) pyxbuf_release(&p->view);
    PyMem_Free(p->shape);
    PyMem_Free(p->strides);
    PyMem_Free(p->capsule_name);
    Py_XDECREF(p->last_kwargs);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *Producer_get_last_kwargs(PyObject *self, void *closure) {
    (void)closure;
    PyObject *k;
    Py_BEGIN_CRITICAL_SECTION(self);
    k = ((Producer *)self)->last_kwargs;
    k = Py_NewRef(k ? k : Py_None);
    Py_END_CRITICAL_SECTION();
    return k;
}

static PyMethodDef Producer_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))Producer_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(**kwargs) -> a DLPack capsule over the producer's memory."},
    {"__dlpack_device__", Producer_dlpack_device, METH_NOARGS, "(device_type, device_id)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Producer_getset[] = {
    {"last_kwargs", Producer_get_last_kwargs, NULL, "keywords of the last __dlpack__ call", NULL},
    TESTEXT_COUNTER_GETSET(Producer, exported, "tensors made"),
    TESTEXT_COUNTER_GETSET(Producer, deleted, "deleter calls"),
    TESTEXT_COUNTER_GETSET(Producer, dlpack_calls, "__dlpack__ calls"),
    TESTEXT_COUNTER_GETSET(Producer, c_calls, "calls of the C exchange table's no-sync export"),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Producer_slots[] = {
    {Py_tp_new, (void *)Producer_new},
    {Py_tp_dealloc, (void *)Producer_dealloc},
    {Py_tp_methods, Producer_methods},
    {Py_tp_getset, Producer_getset},
    {0, NULL},
};

static PyType_Spec Producer_spec = {
    .name = "_pyxbuf_testext.DLPackProducer",
    .basicsize = (int)sizeof(Producer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = Producer_slots,
};

/* --- the C exchange table ------------------------------------------------ */

static _Atomic int64_t work_stream = 0; /* set from Python, read by any consumer thread */

static int c_from_py(void *py_object, t_versioned **out) {
    PyObject *obj = py_object;
    if (!PyObject_TypeCheck(obj, Producer_type)) {
        PyErr_SetString(PyExc_TypeError, "not a DLPackProducer");
        return -1;
    }
    Producer *p = (Producer *)obj;
    testext_count(&p->c_calls);
    block *b = make_tensor(p, 1);
    if (b == NULL) return -1;
    *out = &b->t.v;
    return 0;
}

static int c_current_work_stream(int32_t device_type, int32_t device_id, void **out) {
    (void)device_id;
    *out = device_type == 1 ? NULL : (void *)(intptr_t)atomic_load(&work_stream);
    return 0;
}

static t_api api_v1 = {{{1, 3}, NULL}, NULL, c_from_py, NULL, NULL, c_current_work_stream};
/* A future major version: only its header is readable; prev_api leads back. */
static t_api_header api_v2 = {{2, 0}, &api_v1.header};

static PyObject *set_work_stream(PyObject *mod, PyObject *arg) {
    (void)mod;
    long long s = PyLong_AsLongLong(arg);
    if (s == -1 && PyErr_Occurred()) return NULL;
    atomic_store(&work_stream, s);
    Py_RETURN_NONE;
}

static PyTypeObject *make_c_type(const char *name, void *table) {
    PyType_Slot slots[] = {{0, NULL}};
    PyType_Spec spec = {name, (int)sizeof(Producer), 0, Py_TPFLAGS_DEFAULT, slots};
    PyObject *bases = PyTuple_Pack(1, (PyObject *)Producer_type);
    if (bases == NULL) return NULL;
    PyObject *tp = PyType_FromSpecWithBases(&spec, bases);
    Py_DECREF(bases);
    if (tp == NULL) return NULL;
    PyObject *capsule = PyCapsule_New(table, "dlpack_exchange_api", NULL);
    if (capsule == NULL || PyObject_SetAttrString(tp, "__dlpack_c_exchange_api__", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(tp);
        return NULL;
    }
    Py_DECREF(capsule);
    return (PyTypeObject *)tp;
}

/* ------------------------------------------------------------------------- */
/* Inspecting views and capsules                                             */
/* ------------------------------------------------------------------------- */

static int put(PyObject *d, const char *key, PyObject *value) {
    if (value == NULL) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *ssize_tuple(const Py_ssize_t *v, int n) {
    if (v == NULL) Py_RETURN_NONE;
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *x = PyLong_FromSsize_t(v[i]);
        if (x == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static PyObject *int64_tuple(const int64_t *v, int n) {
    if (v == NULL) Py_RETURN_NONE;
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static PyObject *dlpack_info(PyObject *mod, PyObject *args, PyObject *kwargs) {
    (void)mod;
    static char *kwlist[] = {"obj", "flags", "stream", NULL};
    PyObject *obj, *stream = Py_None;
    int flags = PyBUF_RECORDS_RO;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|iO", kwlist, &obj, &flags, &stream))
        return NULL;
    pyxbuf_view v;
    long long s = stream == Py_None ? 0 : PyLong_AsLongLong(stream);
    if (s == -1 && PyErr_Occurred()) return NULL;
    if ((stream == Py_None ? pyxbuf_get(obj, &v, flags) : pyxbuf_get_stream(obj, &v, flags, s)) < 0)
        return NULL;
    const Py_buffer *b = &v.base;
    PyObject *d = PyDict_New();
    uint64_t dl_flags = 0;
    uint32_t major = 0, minor = 0;
    int32_t versioned = 0;
    int bridged = pyxbuf__dlpack_view_info(&v, &dl_flags, &major, &minor, &versioned) == 0;
    int ok = d != NULL &&
             put(d, "path", PyUnicode_FromString(pyxbuf_path_name(v.path))) == 0 &&
             put(d, "buf", PyLong_FromVoidPtr(b->buf)) == 0 &&
             put(d, "len", PyLong_FromSsize_t(b->len)) == 0 &&
             put(d, "itemsize", PyLong_FromSsize_t(b->itemsize)) == 0 &&
             put(d, "readonly", PyBool_FromLong(b->readonly)) == 0 &&
             put(d, "ndim", PyLong_FromLong(b->ndim)) == 0 &&
             put(d, "format", b->format ? PyUnicode_FromString(b->format)
                                         : Py_NewRef(Py_None)) == 0 &&
             put(d, "shape", ssize_tuple(b->shape, b->ndim)) == 0 &&
             put(d, "strides", ssize_tuple(b->strides, b->ndim)) == 0 &&
             put(d, "obj", Py_NewRef(b->obj ? b->obj : Py_None)) == 0 &&
             put(d, "device", v.device ? PyUnicode_FromString(v.device) : Py_NewRef(Py_None)) == 0;
    if (ok && bridged)
        ok = put(d, "versioned", PyBool_FromLong(versioned)) == 0 &&
             put(d, "version", Py_BuildValue("(II)", major, minor)) == 0 &&
             put(d, "dl_flags", PyLong_FromUnsignedLongLong(dl_flags)) == 0 &&
             put(d, "is_copied", PyBool_FromLong((dl_flags & FLAG_IS_COPIED) != 0)) == 0;
    if (ok && v.device_info != NULL && v.device != NULL &&
        strcmp(v.device, PYXBUF_DEVICE_DLPACK) == 0) {
        const pyxbuf_device_info *info = v.device_info;
        ok = put(d, "device_type", PyLong_FromLong(info->device_type)) == 0 &&
             put(d, "device_id", PyLong_FromLong(info->device_id)) == 0 &&
             put(d, "stream", PyLong_FromLongLong(info->stream)) == 0 &&
             put(d, "sync_event", PyBool_FromLong(info->sync_event != NULL)) == 0 &&
             put(d, "info_dl_flags", PyLong_FromUnsignedLongLong(info->dl_flags)) == 0;
    }
    pyxbuf_release(&v);
    if (!ok) Py_CLEAR(d);
    return d;
}

/* The tensor inside an unconsumed capsule, and whether it is versioned. */
static void *capsule_tensor(PyObject *capsule, int *versioned) {
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        *versioned = 1;
        return PyCapsule_GetPointer(capsule, "dltensor_versioned");
    }
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        *versioned = 0;
        return PyCapsule_GetPointer(capsule, "dltensor");
    }
    PyErr_SetString(PyExc_ValueError, "not an unconsumed DLPack capsule");
    return NULL;
}

static PyObject *capsule_info(PyObject *mod, PyObject *capsule) {
    (void)mod;
    int versioned;
    void *p = capsule_tensor(capsule, &versioned);
    if (p == NULL) return NULL;
    const t_tensor *t = versioned ? &((t_versioned *)p)->dl_tensor : &((t_managed *)p)->dl_tensor;
    PyObject *d = PyDict_New();
    int ok = d != NULL && put(d, "name", PyUnicode_FromString(PyCapsule_GetName(capsule))) == 0 &&
             put(d, "data", PyLong_FromVoidPtr(t->data)) == 0 &&
             put(d, "device", Py_BuildValue("(ii)", t->device.device_type,
                                            t->device.device_id)) == 0 &&
             put(d, "ndim", PyLong_FromLong(t->ndim)) == 0 &&
             put(d, "dtype", Py_BuildValue("(iii)", t->dtype.code, t->dtype.bits,
                                           t->dtype.lanes)) == 0 &&
             put(d, "shape", int64_tuple(t->shape, t->ndim)) == 0 &&
             put(d, "strides", int64_tuple(t->strides, t->ndim)) == 0 &&
             put(d, "byte_offset", PyLong_FromUnsignedLongLong(t->byte_offset)) == 0;
    if (ok && versioned) {
        const t_versioned *v = p;
        ok = put(d, "version", Py_BuildValue("(II)", v->version.major, v->version.minor)) == 0 &&
             put(d, "flags", PyLong_FromUnsignedLongLong(v->flags)) == 0 &&
             put(d, "has_deleter", PyBool_FromLong(v->deleter != NULL)) == 0;
    } else if (ok) {
        ok = put(d, "has_deleter", PyBool_FromLong(((t_managed *)p)->deleter != NULL)) == 0;
    }
    if (!ok) Py_CLEAR(d);
    return d;
}

typedef struct {
    void *tensor;
    int versioned;
} deletion;

static void *delete_tensor(void *arg) {
    deletion *d = arg;
    if (d->versioned) {
        t_versioned *v = d->tensor;
        if (v->deleter) v->deleter(v);
    } else {
        t_managed *m = d->tensor;
        if (m->deleter) m->deleter(m);
    }
    return NULL;
}

static PyObject *capsule_consume(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *capsule;
    int in_thread = 0;
    if (!PyArg_ParseTuple(args, "O|p", &capsule, &in_thread)) return NULL;
    deletion d;
    d.tensor = capsule_tensor(capsule, &d.versioned);
    if (d.tensor == NULL) return NULL;
    if (PyCapsule_SetName(capsule, d.versioned ? "used_dltensor_versioned" : "used_dltensor") < 0)
        return NULL;
    if (!in_thread) {
        delete_tensor(&d);
        Py_RETURN_NONE;
    }
    pthread_t thread;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pthread_create(&thread, NULL, delete_tensor, &d);
    if (rc == 0) pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_create failed");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *dlpack_totals(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    /* deleted first: each deletion it counts was counted as an export before */
    Py_ssize_t deleted = atomic_load(&total_deleted);
    return Py_BuildValue("(nn)", atomic_load(&total_exported), deleted);
}

static PyMethodDef methods[] = {
    {"dlpack_totals", dlpack_totals, METH_NOARGS,
     "(tensors exported, deleter calls) over every DLPackProducer in the process"},
    {"dlpack_info", (PyCFunction)(void (*)(void))dlpack_info, METH_VARARGS | METH_KEYWORDS,
     "dlpack_info(obj, flags=PyBUF_RECORDS_RO, stream=None) -> the view and what the DLPack "
     "bridge recorded; with a stream, acquired by pyxbuf_get_stream"},
    {"capsule_info", capsule_info, METH_O, "capsule_info(capsule) -> dict of its tensor"},
    {"capsule_consume", capsule_consume, METH_VARARGS,
     "capsule_consume(capsule, in_thread=False): rename, then call the deleter"},
    {"dlpack_set_work_stream", set_work_stream, METH_O,
     "Set what the C exchange table's current_work_stream reports for devices."},
    {NULL, NULL, 0, NULL},
};

int pyxbuf_testext_add_dlpack(PyObject *module) {
    Producer_type = (PyTypeObject *)PyType_FromSpec(&Producer_spec);
    if (Producer_type == NULL) return -1;
    CProducer_type = make_c_type("_pyxbuf_testext.DLPackCProducer", &api_v1);
    CProducerV2_type = make_c_type("_pyxbuf_testext.DLPackCProducerV2", &api_v2);
    if (CProducer_type == NULL || CProducerV2_type == NULL ||
        PyModule_AddObjectRef(module, "DLPackProducer", (PyObject *)Producer_type) < 0 ||
        PyModule_AddObjectRef(module, "DLPackCProducer", (PyObject *)CProducer_type) < 0 ||
        PyModule_AddObjectRef(module, "DLPackCProducerV2", (PyObject *)CProducerV2_type) < 0 ||
        PyModule_AddFunctions(module, methods) < 0)
        return -1;
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"PYXBUF_DL_CUDA_HOST", PYXBUF_DL_CUDA_HOST},
        {"DLPACK_FLAG_READ_ONLY", FLAG_READ_ONLY},
        {"DLPACK_FLAG_IS_COPIED", FLAG_IS_COPIED},
        {"DLPACK_FLAG_SUBBYTE_PADDED", FLAG_PADDED},
    };
    for (size_t i = 0; i < sizeof constants / sizeof *constants; i++)
        if (PyModule_AddIntConstant(module, constants[i].name, constants[i].value) < 0) return -1;
    return 0;
}
