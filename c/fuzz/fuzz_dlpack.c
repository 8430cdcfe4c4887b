/* fuzz_dlpack.c -- the DLPack import on arbitrary DLManagedTensor(Versioned)
 * contents: versions, flags, devices, ndim, shapes, strides, dtypes, byte
 * offsets and data pointers, through __dlpack__ (versioned and legacy
 * capsules, with and without a consumer stream) and the C exchange table.
 *
 * Input layout (little-endian; missing bytes read as zero):
 *   u8  route       0 versioned capsule, 1 legacy capsule, 2 C exchange table,
 *                   3 versioned capsule through pyxbuf_get_stream
 *   u8  data        0 NULL, 1 host region, 2 emulated-device region, 3 raw
 *   u8  layout      bit 0 strides NULL, bit 1 shape NULL, bit 2 deleter NULL,
 *                   bit 3 the deleter raises
 *   u8  (unused)
 *   u32 major, u32 minor, u64 flags
 *   i32 device_type, i32 device_id, i32 ndim
 *   u8  dtype code, u8 bits, u16 lanes
 *   u64 byte_offset (added to the data pointer by the producer's contract)
 *   u64 data offset into the region, or the raw pointer
 *   i32 request flags, i64 consumer stream
 *   i64 shape[min(ndim, 64)], i64 strides[min(ndim, 64)]  (exactly that many
 *                   are allocated, so a read past ndim is an ASan report)
 *
 * Checks: a refusal is an ordinary exception with a message; an acquired view
 * is self-consistent (fuzz_check_view) and, when it lies inside a known
 * region, copies exactly the reference items; every exported tensor is
 * deleted exactly once, by the time the capsule and the view are gone; the
 * producer's reference count and the emulated device's allocations are what
 * they were. */
#include "fuzz_common.h"

#include "dlpack_abi.h"

typedef struct tensor_spec {
    uint8_t route, data, layout;
    uint32_t major, minor;
    uint64_t flags;
    int32_t device_type, device_id, ndim;
    t_dtype dtype;
    uint64_t byte_offset, where;
    int32_t request;
    int64_t stream;
    int32_t nalloc; /* shape/strides entries that exist */
    const int64_t *shape, *strides;
} tensor_spec;

#define LAYOUT_NULL_STRIDES 1
#define LAYOUT_NULL_SHAPE 2
#define LAYOUT_NULL_DELETER 4
#define LAYOUT_DELETER_RAISES 8

fuzz_outcome_counts fuzz_outcomes;
static const tensor_spec *current; /* what the producers export now */
static Py_ssize_t exported, deleted;

/* One exported tensor: the managed struct and its own exactly-sized copies
 * of shape and strides. */
typedef struct block {
    union {
        t_versioned v;
        t_managed m;
    } t;
    int versioned, raises;
    int64_t *shape, *strides;
} block;

static void block_delete(block *b) {
    deleted++;
    if (b->raises) PyErr_SetString(PyExc_RuntimeError, "fuzz producer's deleter failed");
    free(b->shape);
    free(b->strides);
    free(b);
}
static void deleter_v(t_versioned *self) { block_delete(self->manager_ctx); }
static void deleter_m(t_managed *self) { block_delete(self->manager_ctx); }

static int64_t *copy_dims(const int64_t *src, int32_t n) {
    int64_t *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    FUZZ_CHECK(d != NULL, "out of memory");
    if (n > 0) memcpy(d, src, (size_t)n * sizeof *d);
    return d;
}

static void *data_pointer(const tensor_spec *s) {
    switch (s->data & 3) {
    case 0: return NULL;
    case 1: return fuzz_mem.host + s->where % FUZZ_REGION;
    case 2: return fuzz_mem.device + s->where % FUZZ_REGION;
    default: return (void *)(uintptr_t)s->where;
    }
}

static block *make_block(const tensor_spec *s, int versioned) {
    block *b = calloc(1, sizeof *b);
    FUZZ_CHECK(b != NULL, "out of memory");
    b->versioned = versioned;
    b->raises = (s->layout & LAYOUT_DELETER_RAISES) != 0;
    b->shape = copy_dims(s->shape, s->nalloc);
    b->strides = copy_dims(s->strides, s->nalloc);
    t_tensor *t = versioned ? &b->t.v.dl_tensor : &b->t.m.dl_tensor;
    t->data = data_pointer(s);
    t->device.device_type = s->device_type;
    t->device.device_id = s->device_id;
    t->ndim = s->ndim;
    t->dtype = s->dtype;
    t->shape = (s->layout & LAYOUT_NULL_SHAPE) ? NULL : b->shape;
    t->strides = (s->layout & LAYOUT_NULL_STRIDES) ? NULL : b->strides;
    t->byte_offset = s->byte_offset;
    int null_deleter = (s->layout & LAYOUT_NULL_DELETER) != 0;
    if (versioned) {
        b->t.v.version.major = s->major;
        b->t.v.version.minor = s->minor;
        b->t.v.flags = s->flags;
        b->t.v.manager_ctx = b;
        b->t.v.deleter = null_deleter ? NULL : deleter_v;
    } else {
        b->t.m.manager_ctx = b;
        b->t.m.deleter = null_deleter ? NULL : deleter_m;
    }
    exported++;
    if (null_deleter) deleted++; /* nobody can delete it: freed by the harness below */
    return b;
}

/* Blocks without a deleter, freed after each input. */
static block *orphans[8];
static int norphans;

static void *export_tensor(int versioned) {
    block *b = make_block(current, versioned);
    if (current->layout & LAYOUT_NULL_DELETER) {
        FUZZ_CHECK(norphans < 8, "too many exports for one input");
        orphans[norphans++] = b;
    }
    return &b->t;
}

/* The producer's capsule destructor (DLPack's Python specification): an
 * unconsumed capsule deletes its tensor. */
static void capsule_destructor(PyObject *capsule) {
    const char *name = PyCapsule_GetName(capsule);
    if (name == NULL || strncmp(name, "used_", 5) == 0) return;
    void *t = PyCapsule_GetPointer(capsule, name);
    if (strcmp(name, T_CAPSULE_VERSIONED) == 0) {
        t_versioned *v = t;
        if (v->deleter) v->deleter(v);
    } else {
        t_managed *m = t;
        if (m->deleter) m->deleter(m);
    }
    PyErr_Clear(); /* a raising deleter in a destructor has nowhere to report */
}

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) */
static PyObject *producer_dlpack(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    (void)args;
    (void)kwargs;
    int versioned = current->route != 1;
    void *t = export_tensor(versioned);
    return PyCapsule_New(t, versioned ? T_CAPSULE_VERSIONED : T_CAPSULE_LEGACY,
                         capsule_destructor);
}

static PyObject *producer_dlpack_device(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("(ii)", current->device_type, current->device_id);
}

static PyMethodDef producer_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))producer_dlpack, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"__dlpack_device__", producer_dlpack_device, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot producer_slots[] = {{Py_tp_methods, producer_methods}, {0, NULL}};
static PyType_Spec producer_spec = {"fuzz.DLPackProducer", sizeof(PyObject), 0,
                                    Py_TPFLAGS_DEFAULT, producer_slots};

/* The C exchange table's producer: the same tensors, no Python call. */
static int c_from_py(void *py_object, t_versioned **out) {
    (void)py_object;
    *out = export_tensor(1);
    return 0;
}

static int c_work_stream(int32_t device_type, int32_t device_id, void **out) {
    (void)device_type;
    (void)device_id;
    *out = NULL;
    return 0;
}

static t_api exchange_api = {{{1, 3}, NULL}, NULL, c_from_py, NULL, NULL, c_work_stream};

static PyObject *py_producer, *c_producer;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_start_python();
    PyObject *py_type = PyType_FromSpec(&producer_spec);
    FUZZ_CHECK(py_type != NULL, "producer type");
    producer_spec.name = "fuzz.DLPackCProducer";
    PyObject *c_type = PyType_FromSpec(&producer_spec);
    FUZZ_CHECK(c_type != NULL, "C-table producer type");
    PyObject *table = PyCapsule_New(&exchange_api, T_CAPSULE_EXCHANGE_API, NULL);
    FUZZ_CHECK(table != NULL &&
                   PyObject_SetAttrString(c_type, "__dlpack_c_exchange_api__", table) == 0,
               "exchange table attribute");
    Py_DECREF(table);
    py_producer = PyObject_CallNoArgs(py_type);
    c_producer = PyObject_CallNoArgs(c_type);
    FUZZ_CHECK(py_producer && c_producer, "producers");
    Py_DECREF(py_type);
    Py_DECREF(c_type);
    return 0;
}

static void decode(fuzz_reader *r, tensor_spec *s, int64_t *dims) {
    s->route = fuzz_u8(r) & 3;
    s->data = fuzz_u8(r);
    s->layout = fuzz_u8(r);
    (void)fuzz_u8(r);
    s->major = fuzz_u32(r);
    s->minor = fuzz_u32(r);
    s->flags = fuzz_u64(r);
    s->device_type = fuzz_i32(r);
    s->device_id = fuzz_i32(r);
    s->ndim = fuzz_i32(r);
    s->dtype.code = fuzz_u8(r);
    s->dtype.bits = fuzz_u8(r);
    s->dtype.lanes = fuzz_u16(r);
    s->byte_offset = fuzz_u64(r);
    s->where = fuzz_u64(r);
    s->request = fuzz_i32(r);
    s->stream = fuzz_i64(r);
    s->nalloc = s->ndim < 0 ? 0 : s->ndim > PYXBUF_MAX_NDIM ? PYXBUF_MAX_NDIM : s->ndim;
    for (int32_t i = 0; i < 2 * s->nalloc; i++) dims[i] = fuzz_i64(r);
    s->shape = dims;
    s->strides = dims + s->nalloc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_reader r = {data, size};
    int64_t dims[2 * PYXBUF_MAX_NDIM];
    tensor_spec spec;
    decode(&r, &spec, dims);
    current = &spec;
    exported = deleted = 0;
    norphans = 0;

    PyObject *producer = spec.route == 2 ? c_producer : py_producer;
    Py_ssize_t refs = Py_REFCNT(producer);
    int64_t allocations = pyxbuf_emulated_live_allocations();
    pyxbuf_view view;
    int rc = spec.route == 3 ? pyxbuf_get_stream(producer, &view, spec.request, spec.stream)
                             : pyxbuf_get(producer, &view, spec.request);
    if (rc == 0) {
        FUZZ_CHECK(!PyErr_Occurred(), "success with an exception set");
        FUZZ_CHECK(view.path == (spec.route == 2 ? PYXBUF_PATH_DLPACK_C : PYXBUF_PATH_DLPACK),
                   "path %s", pyxbuf_path_name(view.path));
        /* Without PyBUF_ND a view is one flat run of len bytes (ndim 1, no
         * shape), as CPython's PyBuffer_FillInfo hands out. */
        int32_t ndim = (spec.request & PyBUF_ND) == PyBUF_ND ? spec.ndim : 1;
        FUZZ_CHECK(view.base.ndim == ndim, "ndim %d, expected %d (tensor %d, request 0x%x)",
                   view.base.ndim, ndim, spec.ndim, (unsigned)spec.request);
        FUZZ_CHECK((view.base.shape != NULL) == ((spec.request & PyBUF_ND) == PyBUF_ND &&
                                                  spec.ndim > 0),
                   "shape %p for request 0x%x, ndim %d", (void *)view.base.shape,
                   (unsigned)spec.request, spec.ndim);
        for (int i = 0; i < view.base.ndim && view.base.shape; i++)
            FUZZ_CHECK(view.base.shape[i] == spec.shape[i], "shape[%d]", i);
        fuzz_check_view(&view, spec.request);
        if (view.device == NULL || pyxbuf_device_wait(&view, 0) == 0)
            fuzz_check_copy(&view);
        PyErr_Clear(); /* a wait on a stream the input invented may fail */
        pyxbuf_release(&view);
        FUZZ_CHECK(!pyxbuf_view_is_acquired(&view), "released view still acquired");
    } else {
        FUZZ_CHECK(rc == -1, "pyxbuf_get returned %d", rc);
        fuzz_check_refusal();
    }
    PyErr_Clear(); /* deleters may have raised after the checks */
    FUZZ_CHECK(exported == deleted, "%zd tensors exported, %zd deleted", exported, deleted);
    FUZZ_CHECK(Py_REFCNT(producer) == refs, "producer refcount %zd -> %zd", refs,
               Py_REFCNT(producer));
    FUZZ_CHECK(pyxbuf_emulated_live_allocations() == allocations, "emulated allocations leaked");
    for (int i = 0; i < norphans; i++) {
        free(orphans[i]->shape);
        free(orphans[i]->strides);
        free(orphans[i]);
    }
    return 0;
}
