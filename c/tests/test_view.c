/* test_view.c -- acquisition, release and supported flags, from C. */
#include "python_fixture.h"

TEST_CASE(abi_version_matches_header) {
    CHECK_INT_EQ(pyxbuf_abi_version(), PYXBUF_ABI_VERSION);
    CHECK_STR_EQ(pyxbuf_version_string(), "0.1.0");
}

TEST_CASE(classic_path_matches_getbuffer) {
    PyObject *obj = py_eval("bytearray(b'abcdef')");
    pyxbuf_view v;
    Py_buffer b;
    CHECK(pyxbuf_get(obj, &v, PyBUF_FULL) == 0);
    CHECK(PyObject_GetBuffer(obj, &b, PyBUF_FULL) == 0);
    CHECK(v.base.buf == b.buf);
    CHECK_INT_EQ(v.base.len, b.len);
    CHECK_INT_EQ(v.base.readonly, 0);
    CHECK_STR_EQ(v.base.format, b.format);
    CHECK_INT_EQ(v.path, PYXBUF_PATH_CLASSIC);
    CHECK_INT_EQ(v.flags, 0);
    CHECK_INT_EQ(v.ext_flags, 0);
    CHECK(v.device == NULL && v.device_info == NULL);
    CHECK(pyxbuf_view_is_host(&v));
    PyBuffer_Release(&b);
    pyxbuf_release(&v);
    Py_DECREF(obj);
}

TEST_CASE(extended_fields_are_zeroed_before_the_producer) {
    /* A view full of garbage: whatever path answers, no extended field keeps
     * a stale value (the classic producer writes none of them). */
    PyObject *objs[2] = {py_eval("b'xyz'"), py_eval("bytearray(b'xyz')")};
    int32_t requests[2] = {PyBUF_FULL_RO, PyBUF_RECORDS_RO | PYXBUF_DEVICE | PYXBUF_TEMPORARY};
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 2; r++) {
            pyxbuf_view v;
            memset(&v, 0xAB, sizeof v);
            CHECK(pyxbuf_get(objs[i], &v, requests[r]) == 0);
            CHECK_INT_EQ(v.flags, 0);
            CHECK_INT_EQ(v.ext_flags, 0);
            CHECK(v.device == NULL && v.device_info == NULL);
            pyxbuf_release(&v);
        }
    Py_DECREF(objs[0]);
    Py_DECREF(objs[1]);
}

TEST_CASE(extended_bits_are_not_passed_to_classic_producers) {
    /* A classic producer asked with extended bits still answers, and the
     * extended fields stay zero (borrow requests are answered by the
     * cooperative registry instead: test_tracked_borrows.py). */
    PyObject *obj = py_eval("b'xyz'");
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_FULL_RO | PYXBUF_DEVICE | PYXBUF_TEMPORARY) == 0);
    CHECK_INT_EQ(v.flags, 0);
    CHECK_INT_EQ(v.ext_flags, 0);
    CHECK(v.device == NULL);
    pyxbuf_release(&v);
    Py_DECREF(obj);
}

TEST_CASE(release_twice_is_a_noop) {
    /* A new object: a literal is a code constant, immortal on free-threaded
     * builds, whose refcount never moves. */
    PyObject *obj = py_eval("bytes(range(3))");
    Py_ssize_t before = Py_REFCNT(obj);
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_SIMPLE) == 0);
    CHECK(pyxbuf_view_is_acquired(&v));
    CHECK_INT_EQ(Py_REFCNT(obj), before + 1);
    pyxbuf_release(&v);
    CHECK(!pyxbuf_view_is_acquired(&v));
    pyxbuf_release(&v);
    CHECK_INT_EQ(Py_REFCNT(obj), before);
    Py_DECREF(obj);
}

TEST_CASE(no_buffer_is_type_error) {
    PyObject *obj = py_eval("12345");
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_SIMPLE) == -1);
    CHECK_CONTAINS(take_error(PyExc_TypeError), "'int' exports no buffer");
    CHECK(!pyxbuf_view_is_acquired(&v));
    Py_DECREF(obj);
}

TEST_CASE(unknown_request_bits_pass_through) {
    /* The proposal: "it is typical practice to ignore unknown flags". */
    PyObject *obj = py_eval("b'abc'");
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_FULL_RO | 0x40000) == 0);
    CHECK_INT_EQ(v.base.len, 3);
    CHECK_INT_EQ(v.flags, 0);
    CHECK_INT_EQ(v.requested, PyBUF_FULL_RO | 0x40000);
    pyxbuf_release(&v);
    CHECK_INT_EQ(pyxbuf_check_supports(obj, 0x40000), 0); /* nobody advertises it */
    Py_DECREF(obj);
}

TEST_CASE(producer_refusal_names_type_path_and_request) {
    PyObject *obj = py_eval("b'read only'");
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_WRITABLE) == -1);
    const char *msg = take_error(PyExc_BufferError);
    CHECK_CONTAINS(msg, "classic buffer of 'bytes'");
    CHECK_CONTAINS(msg, "WRITABLE");
    Py_DECREF(obj);
}

TEST_CASE(supported_flags_values) {
    PyObject *cls = py_eval("type('SimpleOnly', (bytearray,), {'__pyxbuf_supported_flags__': -1})");
    int32_t mask = 0;
    CHECK(pyxbuf_type_supported_flags((PyTypeObject *)cls, &mask) == 0);
    CHECK_INT_EQ(mask, 0); /* -1 is PyBUF_SIMPLE only: the empty mask */
    PyObject *obj = PyObject_CallNoArgs(cls);
    CHECK_INT_EQ(pyxbuf_check_supports(obj, PyBUF_SIMPLE), 1);
    CHECK_INT_EQ(pyxbuf_check_supports(obj, PyBUF_ND), 0);
    /* FORMAT is required: a SIMPLE-only type is refused it up front. */
    CHECK_INT_EQ(pyxbuf_check_supports(obj, PyBUF_FORMAT), 0);
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_STRIDES) == -1);
    const char *msg = take_error(PyExc_BufferError);
    CHECK_CONTAINS(msg, "'SimpleOnly' does not support the required flags ND|STRIDES");
    CHECK(pyxbuf_get(obj, &v, PyBUF_SIMPLE) == 0);
    pyxbuf_release(&v);
    CHECK(pyxbuf_get(obj, &v, PyBUF_FORMAT) == -1);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "required flag FORMAT of");

    /* The cache follows the type: changing the attribute changes the answer. */
    CHECK(PyObject_SetAttrString(cls, "__pyxbuf_supported_flags__", PyLong_FromLong(0)) == 0);
    CHECK(pyxbuf_type_supported_flags((PyTypeObject *)cls, &mask) == 0);
    CHECK_INT_EQ(mask, PYXBUF_CLASSIC_FLAGS);
    CHECK(pyxbuf_get(obj, &v, PyBUF_STRIDES) == 0);
    pyxbuf_release(&v);
    Py_DECREF(obj);
    Py_DECREF(cls);
}

TEST_CASE(supported_flags_bad_values) {
    PyObject *cls = py_eval("type('Bad', (bytearray,), {'__pyxbuf_supported_flags__': 'x'})");
    int32_t mask;
    CHECK(pyxbuf_type_supported_flags((PyTypeObject *)cls, &mask) == -1);
    CHECK_CONTAINS(take_error(PyExc_TypeError), "must be an int, found 'str'");
    CHECK(pyxbuf_type_set_supported_flags((PyTypeObject *)cls, 0x20000000) == -1);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "supported flags 536870912 for type 'Bad'");
    /* A bit newer than pyxbuf is a valid declaration (a backported flag). */
    CHECK(pyxbuf_type_set_supported_flags((PyTypeObject *)cls, PYXBUF_CLASSIC_FLAGS | 0x100000) == 0);
    CHECK(pyxbuf_type_supported_flags((PyTypeObject *)cls, &mask) == 0);
    CHECK_INT_EQ(mask, PYXBUF_CLASSIC_FLAGS | 0x100000);
    CHECK(pyxbuf_type_set_supported_flags((PyTypeObject *)cls, -2) == -1);
    take_error(PyExc_ValueError);
    Py_DECREF(cls);
}

TEST_CASE(set_supported_flags_on_immutable_type) {
    PyTypeObject *tp = pyxbuf_exporter_type();
    int32_t mask;
    CHECK(tp != NULL);
    CHECK(pyxbuf_type_supported_flags(tp, &mask) == 0);
    /* and PYXBUF_EXTENDED_FORMAT: a classic request for custom items'
     * format is refused (NumPy then calls __array__). */
    CHECK_INT_EQ(mask, PYXBUF_CLASSIC_FLAGS | PYXBUF_EXTENDED_FLAGS | PYXBUF_EXTENDED_FORMAT);
}

TEST_CASE(device_equal_rules) {
    static const char id[] = "pyxbuf.dlpack";
    char copy[sizeof id];
    memcpy(copy, id, sizeof id);
    CHECK(pyxbuf_device_equal(id, id));
    CHECK(pyxbuf_device_equal(id, copy));
    CHECK(pyxbuf_device_equal(NULL, "cpu"));
    CHECK(pyxbuf_device_equal(NULL, NULL));
    CHECK(!pyxbuf_device_equal(NULL, id));
    CHECK(!pyxbuf_device_equal("pyxbuf.other", id));
}

/* A bytearray subclass whose type declares `mask`. */
static PyObject *declaring(int32_t mask) {
    char code[160];
    snprintf(code, sizeof code,
             "type('Declares', (bytearray,), {'__pyxbuf_supported_flags__': %d})(b'abcd')",
             (int)mask);
    return py_eval(code);
}

TEST_CASE(required_flags_are_the_proposals_hard_ones) {
    CHECK_INT_EQ(PYXBUF_REQUIRED_FLAGS, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_ND |
                                            (PyBUF_STRIDES & ~PyBUF_ND) |
                                            (PyBUF_C_CONTIGUOUS & ~PyBUF_STRIDES) |
                                            (PyBUF_F_CONTIGUOUS & ~PyBUF_STRIDES) |
                                            (PyBUF_ANY_CONTIGUOUS & ~PyBUF_STRIDES));
    /* Each hard bit, both ways: refused when the type lacks it, served when
     * it has it. The request is the classic flag that carries the bit. */
    static const struct {
        int32_t bit, request;
        const char *name;
    } hard[] = {
        {PyBUF_WRITABLE, PyBUF_WRITABLE, "WRITABLE"},
        {PyBUF_FORMAT, PyBUF_FORMAT, "FORMAT"},
        {PyBUF_ND, PyBUF_ND, "ND"},
        {PyBUF_STRIDES & ~PyBUF_ND, PyBUF_STRIDES, "STRIDES"},
        {PyBUF_C_CONTIGUOUS & ~PyBUF_STRIDES, PyBUF_C_CONTIGUOUS, "C_CONTIGUOUS"},
        {PyBUF_F_CONTIGUOUS & ~PyBUF_STRIDES, PyBUF_F_CONTIGUOUS, "F_CONTIGUOUS"},
        {PyBUF_ANY_CONTIGUOUS & ~PyBUF_STRIDES, PyBUF_ANY_CONTIGUOUS, "ANY_CONTIGUOUS"},
    };
    for (size_t i = 0; i < sizeof hard / sizeof *hard; i++) {
        CHECK(PYXBUF_REQUIRED_FLAGS & hard[i].bit);
        PyObject *lacks = declaring(PYXBUF_CLASSIC_FLAGS & ~hard[i].bit);
        PyObject *has = declaring(PYXBUF_CLASSIC_FLAGS);
        pyxbuf_view v;
        CHECK_INT_EQ(pyxbuf_check_supports(lacks, hard[i].request), 0);
        CHECK(pyxbuf_get(lacks, &v, hard[i].request) == -1);
        CHECK_CONTAINS(take_error(PyExc_BufferError), hard[i].name);
        CHECK_INT_EQ(pyxbuf_check_supports(has, hard[i].request), 1);
        CHECK(pyxbuf_get(has, &v, hard[i].request) == 0);
        pyxbuf_release(&v);
        Py_DECREF(lacks);
        Py_DECREF(has);
    }
    /* The one soft classic bit, both ways: never refused up front, though
     * check_supports answers whether the type advertises it. */
    const int32_t soft = PyBUF_INDIRECT & ~PyBUF_STRIDES;
    CHECK(!(PYXBUF_REQUIRED_FLAGS & soft));
    CHECK_INT_EQ(PYXBUF_REQUIRED_FLAGS | soft, PYXBUF_CLASSIC_FLAGS & ~0x2); /* 0x2: no flag */
    for (int with = 0; with < 2; with++) {
        PyObject *obj = declaring(with ? PYXBUF_CLASSIC_FLAGS : PYXBUF_CLASSIC_FLAGS & ~soft);
        pyxbuf_view v;
        CHECK_INT_EQ(pyxbuf_check_supports(obj, PyBUF_INDIRECT), with);
        CHECK(pyxbuf_get(obj, &v, PyBUF_INDIRECT) == 0);
        CHECK(v.base.suboffsets == NULL);
        pyxbuf_release(&v);
        Py_DECREF(obj);
    }
}

TEST_CASE(full_requests_reach_records_plus_device_types) {
    /* The audit's case: RECORDS | DEVICE (no INDIRECT) and FULL / FULL_RO,
     * answered with NULL suboffsets as NumPy answers them. */
    PyObject *obj = declaring(PyBUF_RECORDS | PYXBUF_DEVICE);
    pyxbuf_view v;
    /* INDIRECT is soft: pyxbuf_get goes ahead, but the type does not
     * advertise it, and check_supports asks about every bit. */
    CHECK_INT_EQ(pyxbuf_check_supports(obj, PyBUF_FULL_RO), 0);
    CHECK_INT_EQ(pyxbuf_check_supports(obj, PyBUF_RECORDS | PYXBUF_DEVICE), 1);
    CHECK(pyxbuf_get(obj, &v, PyBUF_FULL_RO) == 0);
    CHECK_INT_EQ(v.path, PYXBUF_PATH_NATIVE);
    CHECK(v.base.suboffsets == NULL);
    pyxbuf_release(&v);
    CHECK(pyxbuf_get(obj, &v, PyBUF_FULL | PYXBUF_DEVICE) == 0);
    pyxbuf_release(&v);
    Py_DECREF(obj);
}

TEST_CASE(check_supports_means_what_get_does) {
    pyxbuf_view v;
    /* Not a buffer at all: pyxbuf_get raises TypeError, the answer is 0. */
    PyObject *list = py_eval("[1, 2, 3]");
    CHECK_INT_EQ(pyxbuf_check_supports(list, PyBUF_SIMPLE), 0);
    CHECK_INT_EQ(pyxbuf_check_supports(list, PyBUF_FULL_RO), 0);
    CHECK(pyxbuf_get(list, &v, PyBUF_SIMPLE) == -1);
    take_error(PyExc_TypeError);
    /* A classic buffer: every classic flag, and borrows (pyxbuf's registry);
     * not device memory, which no protocol of bytes can carry. */
    PyObject *bytes = py_eval("b'xyz'");
    CHECK_INT_EQ(pyxbuf_check_supports(bytes, PyBUF_FULL_RO), 1);
    CHECK_INT_EQ(pyxbuf_check_supports(bytes, PyBUF_FULL_RO | PYXBUF_DEVICE), 0);
    CHECK_INT_EQ(pyxbuf_check_supports(bytes, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED), 1);
    CHECK_INT_EQ(pyxbuf_check_supports(bytes, PyBUF_RECORDS_RO | PYXBUF_TEMPORARY), 0);
    /* Bits nobody advertises. */
    CHECK_INT_EQ(pyxbuf_check_supports(bytes, 0x100000), 0);
    /* DLPack only (no buffer slot): answered from the type, not called. */
    PyObject *dl = py_eval("type('DLPackOnly', (), {'__dlpack__': lambda self, **kw: "
                           "1 / 0, '__dlpack_device__': lambda self: 1 / 0})()");
    CHECK_INT_EQ(pyxbuf_check_supports(dl, PyBUF_RECORDS_RO | PYXBUF_DEVICE), 1);
    CHECK(!PyErr_Occurred());
    /* CUDA Array Interface as a property on the type (not evaluated) or as an
     * instance attribute; a type with its own __getattr__ is not asked. */
    PyObject *cai_prop = py_eval("type('CaiProp', (), {'__cuda_array_interface__': "
                                 "property(lambda self: 1 / 0)})()");
    CHECK_INT_EQ(pyxbuf_check_supports(cai_prop, PyBUF_RECORDS_RO | PYXBUF_DEVICE), 1);
    PyObject *cai_inst = py_eval("(lambda o: (setattr(o, '__cuda_array_interface__', {}), o)[1])"
                                 "(type('CaiInst', (), {})())");
    CHECK_INT_EQ(pyxbuf_check_supports(cai_inst, PyBUF_RECORDS_RO), 1);
    PyObject *dynamic = py_eval("type('Dynamic', (), {'__getattr__': lambda self, n: 1 / 0})()");
    CHECK_INT_EQ(pyxbuf_check_supports(dynamic, PyBUF_SIMPLE), 0);
    CHECK(!PyErr_Occurred());
    Py_DECREF(list);
    Py_DECREF(bytes);
    Py_DECREF(dl);
    Py_DECREF(cai_prop);
    Py_DECREF(cai_inst);
    Py_DECREF(dynamic);
}

/* The proposal: "A producer must not touch additional fields if the
 * corresponding request flag was not passed." pyxbuf_export_fill, asked with
 * classic flags only, writes none of the extended fields of a view full of
 * 0xAB bytes; asked with PYXBUF_DEVICE for host memory it writes no device. */
TEST_CASE(export_fill_leaves_extended_fields_alone) {
    float data[6] = {0};
    Py_ssize_t shape[2] = {2, 3}, strides[2] = {12, 4};
    pyxbuf_export_desc d = {.size = sizeof d, .ndim = 2, .buf = data, .format = "f",
                            .shape = shape, .strides = strides};
    static const int32_t classic[] = {PyBUF_SIMPLE, PyBUF_FULL_RO, PyBUF_RECORDS,
                                      PyBUF_CONTIG_RO, PyBUF_ND | PyBUF_FORMAT};
    pyxbuf_view v, sentinel;
    memset(&sentinel, 0xAB, sizeof sentinel);
    for (size_t i = 0; i < sizeof classic / sizeof *classic; i++) {
        memset(&v, 0xAB, sizeof v);
        CHECK(pyxbuf_export_fill(&v.base, NULL, classic[i], &d) == 0);
        CHECK(memcmp((char *)&v + sizeof v.base, (char *)&sentinel + sizeof v.base,
                     sizeof v - sizeof v.base) == 0);
    }
    memset(&v, 0xAB, sizeof v);
    CHECK(pyxbuf_export_fill(&v.base, NULL, PyBUF_RECORDS_RO | PYXBUF_DEVICE, &d) == 0);
    CHECK(v.device == sentinel.device && v.device_info == sentinel.device_info);
}

/* DESIGN, Errors: an item-type refusal is one class, a TypeError and a
 * BufferError, shared by every copy of libpyxbuf through the shared module. */
TEST_CASE(item_type_error_is_one_class_deriving_from_both) {
    PyObject *cls = pyxbuf_item_type_error();
    CHECK(cls != NULL && PyType_Check(cls));
    if (cls == NULL) return;
    CHECK(PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_TypeError));
    CHECK(PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_BufferError));
    PyObject *shared = PyDict_GetItemString(PyImport_GetModuleDict(), PYXBUF_SHARED_MODULE);
    PyObject *published = shared ? PyObject_GetAttrString(shared, "ItemTypeError") : NULL;
    CHECK(published == cls);
    Py_XDECREF(published);
    PyObject *name = PyObject_GetAttrString(cls, "__name__");
    PyObject *module = PyObject_GetAttrString(cls, "__module__");
    PyObject *doc = PyObject_GetAttrString(cls, "__doc__");
    CHECK_STR_EQ(name ? PyUnicode_AsUTF8(name) : "", "ItemTypeError");
    CHECK_STR_EQ(module ? PyUnicode_AsUTF8(module) : "", "pyxbuf");
    CHECK_CONTAINS(doc && PyUnicode_Check(doc) ? PyUnicode_AsUTF8(doc) : "",
                   "PyO3's PyBuffer, which raises BufferError");
    Py_XDECREF(name);
    Py_XDECREF(module);
    Py_XDECREF(doc);
    /* Borrowed, the same object every time, no reference taken or lost. */
    const Py_ssize_t before = Py_REFCNT(cls);
    for (int i = 0; i < 10000; i++) CHECK(pyxbuf_item_type_error() == cls);
    CHECK_INT_EQ(Py_REFCNT(cls), before);
    /* Caught as either. */
    PyErr_SetString(cls, "format 'i', expected 'd'");
    CHECK(PyErr_ExceptionMatches(PyExc_TypeError) && PyErr_ExceptionMatches(PyExc_BufferError));
    CHECK_CONTAINS(take_error(PyExc_BufferError), "format 'i', expected 'd'");
}

/* Another copy made it first: this copy uses that class, not one of its own. */
TEST_CASE(item_type_error_found_where_another_copy_put_it) {
    CHECK(PyRun_SimpleString("import sys, types\n"
                             "m = sys.modules.setdefault('" PYXBUF_SHARED_MODULE "', "
                             "types.ModuleType('" PYXBUF_SHARED_MODULE "'))\n"
                             "m.ItemTypeError = type('ItemTypeError', (TypeError, BufferError), "
                             "{'__module__': 'pyxbuf', 'by': 'another copy'})\n") == 0);
    PyObject *cls = pyxbuf_item_type_error();
    PyObject *by = cls ? PyObject_GetAttrString(cls, "by") : NULL;
    CHECK_STR_EQ(by ? PyUnicode_AsUTF8(by) : "", "another copy");
    Py_XDECREF(by);
}

/* Something else at the attribute: refused, saying what stands there. */
TEST_CASE(item_type_error_refuses_a_stranger_in_the_shared_module) {
    CHECK(PyRun_SimpleString("import sys, types\n"
                             "m = sys.modules.setdefault('" PYXBUF_SHARED_MODULE "', "
                             "types.ModuleType('" PYXBUF_SHARED_MODULE "'))\n"
                             "m.ItemTypeError = ValueError\n") == 0);
    CHECK(pyxbuf_item_type_error() == NULL);
    CHECK_CONTAINS(take_error(PyExc_RuntimeError),
                   "ItemTypeError is <class 'ValueError'>, not a class deriving from TypeError "
                   "and BufferError");
}

/* Issue 50, item 9: a message names the fix of this copy's binding, set once
 * by the first call (the pyxbuf module, the Rust crate, pyxbuf.hpp and
 * pyxbuf_xview.pxi set theirs; a C extension reads C). Last in the list: it
 * sets this process's copy for good. */
TEST_CASE(message_binding_is_set_once_and_names_its_fixes) {
    pyxbuf_backend b;
    pyxbuf_error err;
    CHECK(pyxbuf_message_binding(-1) == PYXBUF_BINDING_C);
    CHECK(pyxbuf_backend_get(PYXBUF_DL_ROCM, &b, &err) < 0);
    CHECK_CONTAINS(err.message, "register one with pyxbuf_backend_register");
    CHECK(pyxbuf_message_binding(PYXBUF_BINDING_RUST) == PYXBUF_BINDING_RUST);
    CHECK(pyxbuf_message_binding(PYXBUF_BINDING_PYTHON) == PYXBUF_BINDING_RUST); /* first wins */
    CHECK(pyxbuf_message_binding(99) == PYXBUF_BINDING_RUST); /* out of range: only asks */
    CHECK(pyxbuf_backend_get(PYXBUF_DL_ROCM, &b, &err) < 0);
    CHECK_CONTAINS(err.message, "pyxbuf::emulated::register()");
    CHECK(strstr(err.message, "register one with pyxbuf_backend_register") == NULL);
}

/* pyxbuf_exporter_over (export/exporter_over.c): zero-copy over a base's
 * bytes, every reachable byte checked, the base held, each refusal naming
 * its cause. */
TEST_CASE(exporter_over_views_its_base_in_place) {
    PyObject *base = py_eval("bytearray(range(16))");
    Py_ssize_t six = 6, back[1] = {-2};
    PyObject *e = pyxbuf_exporter_over(base, 4, "h", 0, 1, &six, NULL, 0);
    CHECK(e != NULL);
    CHECK(pyxbuf_exporter_data(e) == PyByteArray_AsString(base) + 4);
    pyxbuf_view v;
    CHECK(pyxbuf_get(e, &v, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) == 0);
    CHECK_INT_EQ(v.base.len, 12);
    CHECK_INT_EQ(v.ext_flags, PYXBUF_EXT_SHARED | PYXBUF_EXT_TRACKED); /* the base may change */
    pyxbuf_release(&v);
    CHECK(pyxbuf_get(e, &v, PyBUF_RECORDS) == 0); /* writable memory, as the base's */
    pyxbuf_release(&v);
    /* The base cannot resize under the exporter. */
    CHECK(PyByteArray_Resize(base, 2) == -1);
    take_error(PyExc_BufferError);
    Py_DECREF(e);
    CHECK(PyByteArray_Resize(base, 16) == 0);
    /* Backwards from the last item; no shape: as many as fit after offset. */
    Py_ssize_t eight = 8;
    e = pyxbuf_exporter_over(base, 14, "h", 0, 1, &eight, back, 0);
    CHECK(e != NULL && ((char *)pyxbuf_exporter_data(e))[0] == 14);
    Py_XDECREF(e);
    e = pyxbuf_exporter_over(base, 4, "i", 0, 1, NULL, NULL, PYXBUF_OVER_READONLY);
    CHECK(e != NULL && pyxbuf_get(e, &v, PyBUF_RECORDS) == -1); /* read-only asked */
    take_error(PyExc_BufferError);
    CHECK(pyxbuf_get(e, &v, PyBUF_RECORDS_RO) == 0);
    CHECK_INT_EQ(v.base.shape[0], 3);
    pyxbuf_release(&v);
    Py_XDECREF(e);
    Py_DECREF(base);
}

TEST_CASE(exporter_over_refusals_name_their_cause) {
    PyObject *base = py_eval("bytearray(16)");
    Py_ssize_t n = 5, big = PY_SSIZE_T_MAX / 2, strides[2] = {8, 2};
    Py_ssize_t shape2[2] = {2, 4}, back = -4;
    CHECK(pyxbuf_exporter_over(base, 0, "i", 0, 1, &n, NULL, 0) == NULL);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "reach bytes [0, 20) from offset 0 of a buffer "
                                                 "of 16 bytes");
    CHECK(pyxbuf_exporter_over(base, -4, "i", 0, 1, &(Py_ssize_t){1}, NULL, 0) == NULL);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "from offset -4");
    CHECK(pyxbuf_exporter_over(base, 0, "i", 0, 1, &(Py_ssize_t){2}, &back, 0) == NULL);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "reach bytes [-4, 4)");
    CHECK(pyxbuf_exporter_over(base, 0, "h", 0, 2, shape2, strides, 0) != NULL); /* fits */
    PyErr_Clear();
    CHECK(pyxbuf_exporter_over(base, 0, "h", 0, 1, &big, NULL, 0) == NULL);
    take_error(PyExc_ValueError);
    CHECK(pyxbuf_exporter_over(base, 2, "i", 0, 1, NULL, NULL, 0) == NULL);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "not a whole number of 4-byte items");
    CHECK(pyxbuf_exporter_over(base, 0, "B", 0, PYXBUF_MAX_NDIM + 1, &n, NULL, 0) == NULL);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "ndim");
    CHECK(pyxbuf_exporter_over(Py_None, 0, "B", 0, 1, NULL, NULL, 0) == NULL);
    CHECK_CONTAINS(take_error(PyExc_TypeError), "a 'NoneType' is neither a buffer");
    CHECK(pyxbuf_exporter_over(base, 0, "[nobody$thing]", 0, 1, &(Py_ssize_t){2}, NULL, 0) ==
          NULL);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "nobody$thing");
    /* With the item size given, a type nobody registered is held. */
    PyObject *e = pyxbuf_exporter_over(base, 0, "[nobody$thing]", 8, 1, &(Py_ssize_t){2}, NULL, 0);
    CHECK(e != NULL);
    Py_XDECREF(e);
    Py_DECREF(base);
}

TEST_CASE(exporter_over_shared_memory_grants_nothing) {
    PyObject *bytes = py_eval("b'abcdefgh'");
    PyObject *e = pyxbuf_exporter_over(bytes, 0, "B", 0, 1, NULL, NULL,
                                       PYXBUF_OVER_PROCESS_SHARED);
    pyxbuf_view v;
    CHECK(e != NULL);
    CHECK(pyxbuf_get(e, &v, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) == 0);
    CHECK_INT_EQ(v.ext_flags, 0);
    CHECK_INT_EQ(v.base.readonly, 1); /* bytes: read-only */
    pyxbuf_release(&v);
    Py_XDECREF(e);
    Py_DECREF(bytes);
}

PYTHON_TEST_MAIN(TEST_ENTRY(abi_version_matches_header), TEST_ENTRY(classic_path_matches_getbuffer),
                 TEST_ENTRY(extended_fields_are_zeroed_before_the_producer),
                 TEST_ENTRY(extended_bits_are_not_passed_to_classic_producers),
                 TEST_ENTRY(release_twice_is_a_noop), TEST_ENTRY(no_buffer_is_type_error),
                 TEST_ENTRY(unknown_request_bits_pass_through),
                 TEST_ENTRY(producer_refusal_names_type_path_and_request),
                 TEST_ENTRY(supported_flags_values), TEST_ENTRY(supported_flags_bad_values),
                 TEST_ENTRY(set_supported_flags_on_immutable_type), TEST_ENTRY(device_equal_rules),
                 TEST_ENTRY(required_flags_are_the_proposals_hard_ones),
                 TEST_ENTRY(full_requests_reach_records_plus_device_types),
                 TEST_ENTRY(check_supports_means_what_get_does),
                 TEST_ENTRY(export_fill_leaves_extended_fields_alone),
                 TEST_ENTRY(item_type_error_is_one_class_deriving_from_both),
                 TEST_ENTRY(item_type_error_found_where_another_copy_put_it),
                 TEST_ENTRY(item_type_error_refuses_a_stranger_in_the_shared_module),
                 TEST_ENTRY(message_binding_is_set_once_and_names_its_fixes),
                 TEST_ENTRY(exporter_over_views_its_base_in_place),
                 TEST_ENTRY(exporter_over_refusals_name_their_cause),
                 TEST_ENTRY(exporter_over_shared_memory_grants_nothing))
