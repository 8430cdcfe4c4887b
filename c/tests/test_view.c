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
    PyObject *obj = py_eval("b'xyz'");
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

TEST_CASE(unknown_request_bits_are_value_error) {
    PyObject *obj = py_eval("b''");
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, 0x40000) == -1);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "unknown bits 0x40000");
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
    CHECK_INT_EQ(mask, PyBUF_FORMAT);
    PyObject *obj = PyObject_CallNoArgs(cls);
    CHECK_INT_EQ(pyxbuf_check_supports(obj, PyBUF_SIMPLE), 1);
    CHECK_INT_EQ(pyxbuf_check_supports(obj, PyBUF_ND), 0);
    pyxbuf_view v;
    CHECK(pyxbuf_get(obj, &v, PyBUF_STRIDES) == -1);
    const char *msg = take_error(PyExc_BufferError);
    CHECK_CONTAINS(msg, "'SimpleOnly' does not support the required flag(s) ND|STRIDES");
    CHECK(pyxbuf_get(obj, &v, PyBUF_SIMPLE) == 0);
    pyxbuf_release(&v);

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
    CHECK(pyxbuf_type_set_supported_flags((PyTypeObject *)cls, 0x100000) == -1);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "supported flags 1048576 for type 'Bad'");
    CHECK(pyxbuf_type_set_supported_flags((PyTypeObject *)cls, -2) == -1);
    take_error(PyExc_ValueError);
    Py_DECREF(cls);
}

TEST_CASE(set_supported_flags_on_immutable_type) {
    PyTypeObject *tp = pyxbuf_exporter_type();
    int32_t mask;
    CHECK(tp != NULL);
    CHECK(pyxbuf_type_supported_flags(tp, &mask) == 0);
    CHECK_INT_EQ(mask, PYXBUF_CLASSIC_FLAGS | PYXBUF_EXTENDED_FLAGS);
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

PYTHON_TEST_MAIN(TEST_ENTRY(abi_version_matches_header), TEST_ENTRY(classic_path_matches_getbuffer),
                 TEST_ENTRY(extended_bits_are_not_passed_to_classic_producers),
                 TEST_ENTRY(release_twice_is_a_noop), TEST_ENTRY(no_buffer_is_type_error),
                 TEST_ENTRY(unknown_request_bits_are_value_error),
                 TEST_ENTRY(producer_refusal_names_type_path_and_request),
                 TEST_ENTRY(supported_flags_values), TEST_ENTRY(supported_flags_bad_values),
                 TEST_ENTRY(set_supported_flags_on_immutable_type), TEST_ENTRY(device_equal_rules))
