/* test_dlpack.c -- the DLPack bridge through the public API: dtype mapping
 * both ways, capsule renaming, exactly-once deletion, versions refused.
 *
 * The tensors below are made here, in C, with this file's own declarations
 * of the DLPack structs (an independent check of dlpack.c's layout), and
 * handed to pyxbuf_get through a Python object whose __dlpack__ returns them. */
#include "python_fixture.h"

/* --- DLPack 1.x layout, declared again ------------------------------------ */

typedef struct {
    uint32_t major, minor;
} dl_version;

typedef struct {
    void *data;
    int32_t device_type, device_id;
    int32_t ndim;
    uint8_t code, bits;
    uint16_t lanes;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
    dl_tensor t;
    void *ctx;
    void (*deleter)(struct dl_managed *);
} dl_managed;

typedef struct dl_versioned {
    dl_version version;
    void *ctx;
    void (*deleter)(struct dl_versioned *);
    uint64_t flags;
    dl_tensor t;
} dl_versioned;

/* --- a C producer ---------------------------------------------------------- */

static int deleted = 0, exported = 0;
static int32_t next_major = 1, next_versioned = 1;
static uint8_t next_code = 2, next_bits = 32;
static int32_t next_device = 1; /* kDLCPU */
static float payload[6] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
static int64_t shape[2] = {2, 3};
static PyObject *last_capsule = NULL; /* borrowed: to read its name */

static void delete_versioned(dl_versioned *self) {
    deleted++;
    free(self);
}

static void delete_legacy(dl_managed *self) {
    deleted++;
    free(self);
}

static void capsule_destructor(PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        dl_versioned *v = PyCapsule_GetPointer(capsule, "dltensor_versioned");
        v->deleter(v);
    } else if (PyCapsule_IsValid(capsule, "dltensor")) {
        dl_managed *m = PyCapsule_GetPointer(capsule, "dltensor");
        m->deleter(m);
    }
    if (capsule == last_capsule) last_capsule = NULL;
}

static void fill(dl_tensor *t) {
    t->data = payload;
    t->device_type = next_device;
    t->device_id = 0;
    t->ndim = 2;
    t->code = next_code;
    t->bits = next_bits;
    t->lanes = 1;
    t->shape = shape;
    t->strides = NULL; /* C order */
    t->byte_offset = 0;
}

static PyObject *make_capsule(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self, (void)args, (void)kwargs;
    PyObject *capsule;
    exported++;
    if (next_versioned) {
        dl_versioned *v = calloc(1, sizeof *v);
        v->version.major = (uint32_t)next_major;
        v->version.minor = 3;
        v->deleter = delete_versioned;
        fill(&v->t);
        capsule = PyCapsule_New(v, "dltensor_versioned", capsule_destructor);
    } else {
        dl_managed *m = calloc(1, sizeof *m);
        m->deleter = delete_legacy;
        fill(&m->t);
        capsule = PyCapsule_New(m, "dltensor", capsule_destructor);
    }
    last_capsule = capsule;
    return capsule;
}

static PyMethodDef make_capsule_def = {"__dlpack__", (PyCFunction)(void (*)(void))make_capsule,
                                       METH_VARARGS | METH_KEYWORDS, NULL};

/* An instance of a class whose __dlpack__ is make_capsule. */
static PyObject *c_producer(void) {
    PyObject *fn = PyCFunction_New(&make_capsule_def, NULL);
    PyObject *dict = Py_BuildValue("{sN}", "__dlpack__", fn);
    PyObject *cls = PyObject_CallFunction((PyObject *)&PyType_Type, "s()N", "CProducer", dict);
    PyObject *obj = cls ? PyObject_CallNoArgs(cls) : NULL;
    Py_XDECREF(cls);
    CHECK(obj != NULL);
    return obj;
}

/* NumPy's own DLPack export of `array_expr`, behind an object that has
 * nothing else (NumPy arrays would take the classic path). */
static PyObject *numpy_dlpack(const char *array_expr) {
    char expr[512];
    snprintf(expr, sizeof expr,
             "(lambda a: type('DL', (), {'a': a, "
             "'__dlpack__': lambda self, **kw: self.a.__dlpack__(**kw), "
             "'__dlpack_device__': lambda self: self.a.__dlpack_device__()})())(%s)",
             array_expr);
    return py_eval(expr);
}

static int have_numpy(void) {
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL) {
        PyErr_Clear();
        fprintf(stderr, "numpy is not importable: skipping its cases\n");
        return 0;
    }
    Py_DECREF(np);
    return 1;
}

/* ------------------------------------------------------------------------- */

TEST_CASE(capsule_is_renamed_and_deleted_once_on_release) {
    PyObject *obj = c_producer();
    deleted = exported = 0;
    next_versioned = 1, next_major = 1, next_code = 2, next_bits = 32;
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) == 0);
    CHECK_INT_EQ(v.path, PYXBUF_PATH_DLPACK);
    CHECK(v.base.buf == payload);
    CHECK_STR_EQ(v.base.format, "f");
    CHECK_INT_EQ(v.base.ndim, 2);
    CHECK_INT_EQ(v.base.shape[1], 3);
    CHECK_INT_EQ(v.base.strides[0], 12); /* NULL strides: C order */
    CHECK(last_capsule == NULL);         /* the capsule died, renamed: not deleted */
    CHECK_INT_EQ(exported, 1);
    CHECK_INT_EQ(deleted, 0);
    pyxbuf_release(&v);
    CHECK_INT_EQ(deleted, 1);
    pyxbuf_release(&v);
    CHECK_INT_EQ(deleted, 1);
    Py_DECREF(obj);
}

TEST_CASE(legacy_capsule_is_deleted_once) {
    PyObject *obj = c_producer();
    deleted = exported = 0;
    next_versioned = 0, next_code = 0, next_bits = 32;
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_RECORDS) == 0); /* legacy: writable */
    CHECK_STR_EQ(v.base.format, "i");
    CHECK_INT_EQ(v.base.readonly, 0);
    pyxbuf_release(&v);
    CHECK_INT_EQ(exported, 1);
    CHECK_INT_EQ(deleted, 1);
    next_versioned = 1;
    Py_DECREF(obj);
}

TEST_CASE(major_version_2_is_refused_and_deleted) {
    PyObject *obj = c_producer();
    deleted = exported = 0;
    next_versioned = 1, next_major = 2, next_code = 2, next_bits = 32;
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) == -1);
    const char *msg = take_error(PyExc_BufferError);
    CHECK_CONTAINS(msg, "version 2.3");
    CHECK_CONTAINS(msg, "DLPack buffer of 'CProducer'");
    CHECK_INT_EQ(exported, 1);
    CHECK_INT_EQ(deleted, 1);
    CHECK(!pyxbuf_view_is_acquired(&v));
    next_major = 1;
    Py_DECREF(obj);
}

TEST_CASE(refused_dtypes_are_deleted_once) {
    static const struct {
        uint8_t code, bits;
        const char *why;
    } cases[] = {
        {0, 4, "sub-byte type kDLInt of 4 bits is packed"},
        {2, 128, "float128"},
        {3, 64, "kDLOpaqueHandle"},
        {6, 16, "kDLBool with 16 bits"},
        {18, 8, "dtype code 18 is unknown"},
    };
    PyObject *obj = c_producer();
    next_versioned = 1, next_major = 1;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        deleted = exported = 0;
        next_code = cases[i].code, next_bits = cases[i].bits;
        pyxbuf_view v;
        CHECK(pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) == -1);
        CHECK_CONTAINS(take_error(PyExc_BufferError), cases[i].why);
        CHECK_INT_EQ(deleted, 1);
    }
    next_code = 2, next_bits = 32;
    Py_DECREF(obj);
}

TEST_CASE(import_dtype_mapping) {
    static const struct {
        uint8_t code, bits;
        const char *format;
    } cases[] = {
        {0, 8, "b"},   {0, 16, "h"},  {0, 32, "i"},  {0, 64, "q"},  {1, 8, "B"},
        {1, 16, "H"},  {1, 32, "I"},  {1, 64, "Q"},  {2, 16, "e"},  {2, 32, "f"},
        {2, 64, "d"},  {6, 8, "?"},   {5, 64, "Zf"}, {5, 128, "Zd"},
        {4, 16, "[ml_dtypes$bfloat16]"},       {5, 32, "[ml_dtypes$complex32]"},
        {7, 8, "[ml_dtypes$float8_e3m4]"},     {8, 8, "[ml_dtypes$float8_e4m3]"},
        {9, 8, "[ml_dtypes$float8_e4m3b11fnuz]"}, {10, 8, "[ml_dtypes$float8_e4m3fn]"},
        {11, 8, "[ml_dtypes$float8_e4m3fnuz]"}, {12, 8, "[ml_dtypes$float8_e5m2]"},
        {13, 8, "[ml_dtypes$float8_e5m2fnuz]"}, {14, 8, "[ml_dtypes$float8_e8m0fnu]"},
    };
    PyObject *obj = c_producer();
    next_versioned = 1, next_major = 1;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        next_code = cases[i].code, next_bits = cases[i].bits;
        pyxbuf_view v;
        if (pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) != 0) {
            fprintf(stderr, "code %u bits %u: %s\n", cases[i].code, cases[i].bits,
                    take_error(NULL));
            pyxbuf_test_failures++;
            continue;
        }
        CHECK_STR_EQ(v.base.format, cases[i].format);
        CHECK_INT_EQ(v.base.itemsize, cases[i].bits / 8);
        pyxbuf_release(&v);
    }
    next_code = 2, next_bits = 32;
    Py_DECREF(obj);
}

/* Export then read the capsule: (code, bits) for each format. */
TEST_CASE(export_dtype_mapping) {
    static const struct {
        const char *format;
        uint8_t code, bits;
    } cases[] = {
        {"b", 0, 8},    {"<h", 0, 16}, {"i", 0, 32},  {"q", 0, 64},   {"l", 0, 64},
        {"B", 1, 8},    {"=H", 1, 16}, {"I", 1, 32},  {"Q", 1, 64},   {"e", 2, 16},
        {"f", 2, 32},   {"d", 2, 64},  {"?", 6, 8},   {"Zf", 5, 64},  {"Zd", 5, 128},
        {"[ml_dtypes$bfloat16]", 4, 16}, {"[ml_dtypes$float8_e4m3fn]", 10, 8},
        {"[ml_dtypes$float8_e5m2]", 12, 8}, {"[ml_dtypes$int4]", 0, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Py_ssize_t n = 4;
        PyObject *e = pyxbuf_exporter_new(cases[i].format, 1, &n, 0, NULL);
        PyObject *kw = Py_BuildValue("{s(ii)}", "max_version", 1, 3);
        PyObject *method = e ? PyObject_GetAttrString(e, "__dlpack__") : NULL;
        PyObject *args = PyTuple_New(0);
        PyObject *capsule = method ? PyObject_Call(method, args, kw) : NULL;
        CHECK(capsule != NULL && PyCapsule_IsValid(capsule, "dltensor_versioned"));
        if (capsule != NULL && PyCapsule_IsValid(capsule, "dltensor_versioned")) {
            dl_versioned *t = PyCapsule_GetPointer(capsule, "dltensor_versioned");
            CHECK_INT_EQ(t->version.major, 1);
            CHECK_INT_EQ(t->t.code, cases[i].code);
            CHECK_INT_EQ(t->t.bits, cases[i].bits);
            CHECK_INT_EQ(t->t.lanes, 1);
            CHECK(t->t.data == pyxbuf_exporter_data(e));
            CHECK_INT_EQ(t->t.strides[0], 1);
            CHECK_INT_EQ(t->flags, cases[i].bits < 8 ? 4 : 0); /* padded sub-byte */
        } else {
            fprintf(stderr, "format %s: %s\n", cases[i].format, take_error(NULL));
        }
        Py_XDECREF(capsule); /* unconsumed: its destructor deletes the tensor */
        Py_XDECREF(args);
        Py_XDECREF(method);
        Py_XDECREF(kw);
        /* every view the export took is released */
        PyObject *borrows = e ? PyObject_GetAttrString(e, "borrows") : NULL;
        PyObject *views = borrows ? PyDict_GetItemString(borrows, "views") : NULL;
        CHECK(views != NULL && PyLong_AsLong(views) == 0);
        Py_XDECREF(borrows);
        Py_XDECREF(e);
    }
}

TEST_CASE(numpy_export_reads_zero_copy) {
    if (!have_numpy()) return;
    PyObject *obj = numpy_dlpack("__import__('numpy').arange(12, dtype='uint16').reshape(3, 4)");
    CHECK(obj != NULL);
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) == 0);
    CHECK_INT_EQ(v.path, PYXBUF_PATH_DLPACK);
    CHECK_STR_EQ(v.base.format, "H");
    CHECK_INT_EQ(v.base.strides[0], 8);
    CHECK_INT_EQ(((uint16_t *)v.base.buf)[5], 5);
    PyObject *a = PyObject_GetAttrString(obj, "a");
    PyObject *iface = a ? PyObject_GetAttrString(a, "__array_interface__") : NULL;
    PyObject *data = iface ? PyDict_GetItemString(iface, "data") : NULL;
    CHECK(data != NULL && PyLong_AsVoidPtr(PyTuple_GetItem(data, 0)) == v.base.buf);
    Py_XDECREF(iface);
    pyxbuf_release(&v);
    Py_ssize_t before = a ? Py_REFCNT(a) : 0;
    for (int i = 0; i < 1000; i++) {
        if (pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) == 0) pyxbuf_release(&v);
    }
    CHECK_INT_EQ(a ? Py_REFCNT(a) : 0, before);
    Py_XDECREF(a);
    Py_XDECREF(obj);
}

TEST_CASE(host_tensor_with_device_flag_is_host_memory) {
    PyObject *obj = c_producer();
    deleted = exported = 0;
    next_versioned = 1, next_major = 1, next_code = 2, next_bits = 32;
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == 0);
    CHECK(v.device == NULL && v.device_info == NULL);
    CHECK_INT_EQ(v.flags, 0);
    pyxbuf_release(&v);
    CHECK_INT_EQ(deleted, 1);
    Py_DECREF(obj);
}

TEST_CASE(device_tensor_refusals_delete_once) {
    PyObject *obj = c_producer();
    deleted = exported = 0;
    next_versioned = 1, next_major = 1, next_code = 2, next_bits = 32;
    next_device = 2; /* kDLCUDA, but the memory is this file's static array */
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) == -1);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "holds memory on device 'cuda:0'");
    CHECK_INT_EQ(deleted, 1);
    /* With PYXBUF_DEVICE the CUDA backend is asked about the pointer: no
     * driver here, or a driver that says it is host memory -- refused. */
    CHECK(pyxbuf_get(obj, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == -1);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "is not memory of device 'cuda:0'");
    CHECK_INT_EQ(deleted, 2);
    CHECK_INT_EQ(exported, 2);
    next_device = 1;
    Py_DECREF(obj);
}

PYTHON_TEST_MAIN(TEST_ENTRY(capsule_is_renamed_and_deleted_once_on_release),
                 TEST_ENTRY(legacy_capsule_is_deleted_once),
                 TEST_ENTRY(major_version_2_is_refused_and_deleted),
                 TEST_ENTRY(refused_dtypes_are_deleted_once), TEST_ENTRY(import_dtype_mapping),
                 TEST_ENTRY(export_dtype_mapping), TEST_ENTRY(numpy_export_reads_zero_copy),
                 TEST_ENTRY(host_tensor_with_device_flag_is_host_memory),
                 TEST_ENTRY(device_tensor_refusals_delete_once))
