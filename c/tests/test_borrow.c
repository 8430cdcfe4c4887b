/* test_borrow.c -- borrow grants of pyxbuf's exporter: the grant matrix. */
#include "python_fixture.h"

static PyObject *new_exporter(void) {
    Py_ssize_t shape[1] = {8};
    return pyxbuf_exporter_new("i", 1, shape, 0, NULL);
}

#define SHARED (PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
#define EXCLUSIVE (PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE)

TEST_CASE(shared_plus_shared_is_granted) {
    PyObject *e = new_exporter();
    pyxbuf_view a, b;
    CHECK(pyxbuf_get(e, &a, SHARED) == 0);
    CHECK(pyxbuf_get(e, &b, SHARED) == 0);
    CHECK_INT_EQ(a.ext_flags, PYXBUF_EXT_SHARED);
    CHECK_INT_EQ(b.ext_flags, PYXBUF_EXT_SHARED);
    CHECK(a.flags & PYXBUF_BORROW_SHARED);
    CHECK_INT_EQ(a.base.readonly, 1);
    CHECK_INT_EQ(a.path, PYXBUF_PATH_NATIVE);
    pyxbuf_release(&a);
    pyxbuf_release(&b);
    Py_DECREF(e);
}

TEST_CASE(shared_then_exclusive_is_refused) {
    PyObject *e = new_exporter();
    pyxbuf_view a, b;
    CHECK(pyxbuf_get(e, &a, SHARED) == 0);
    CHECK(pyxbuf_get(e, &b, EXCLUSIVE) == -1);
    const char *msg = take_error(PyExc_BufferError);
    CHECK_CONTAINS(msg, "cannot grant an exclusive borrow");
    CHECK_CONTAINS(msg, "(live now: 1 view, 0 writable, 1 shared borrow, 0 exclusive)");
    CHECK(!pyxbuf_view_is_acquired(&b));
    pyxbuf_release(&a);
    CHECK(pyxbuf_get(e, &b, EXCLUSIVE) == 0); /* released: grantable again */
    CHECK_INT_EQ(b.ext_flags, PYXBUF_EXT_EXCLUSIVE);
    CHECK_INT_EQ(b.base.readonly, 0);
    pyxbuf_release(&b);
    Py_DECREF(e);
}

TEST_CASE(exclusive_refuses_everything) {
    PyObject *e = new_exporter();
    pyxbuf_view x, other;
    CHECK(pyxbuf_get(e, &x, EXCLUSIVE) == 0);
    const int32_t requests[] = {SHARED, EXCLUSIVE, PyBUF_SIMPLE, PyBUF_FULL_RO, PyBUF_FULL};
    for (size_t i = 0; i < sizeof requests / sizeof *requests; i++) {
        CHECK(pyxbuf_get(e, &other, requests[i]) == -1);
        CHECK_CONTAINS(take_error(PyExc_BufferError), "an exclusive borrow is live");
    }
    /* memoryview goes through the classic protocol and is refused too. */
    PyObject *mv = PyMemoryView_FromObject(e);
    CHECK(mv == NULL);
    take_error(PyExc_BufferError);
    pyxbuf_release(&x);
    mv = PyMemoryView_FromObject(e);
    CHECK(mv != NULL);
    Py_XDECREF(mv);
    Py_DECREF(e);
}

TEST_CASE(shared_borrow_makes_plain_views_read_only) {
    PyObject *e = new_exporter();
    pyxbuf_view s, plain;
    CHECK(pyxbuf_get(e, &s, SHARED) == 0);
    CHECK(pyxbuf_get(e, &plain, PyBUF_RECORDS) == -1); /* writable refused */
    CHECK_CONTAINS(take_error(PyExc_BufferError), "a shared borrow is live");
    CHECK(pyxbuf_get(e, &plain, PyBUF_RECORDS_RO) == 0); /* read-only handed out */
    CHECK_INT_EQ(plain.base.readonly, 1);
    CHECK_INT_EQ(plain.ext_flags, 0);
    pyxbuf_release(&plain);
    pyxbuf_release(&s);
    CHECK(pyxbuf_get(e, &plain, PyBUF_RECORDS_RO) == 0);
    CHECK_INT_EQ(plain.base.readonly, 0); /* no borrow: writable memory again */
    pyxbuf_release(&plain);
    Py_DECREF(e);
}

/* A writable view the exporter cannot stop (a NumPy array over its memory,
 * say): a shared borrow is granted tracked, taken in the registry, and
 * enforced again once the view is gone (issue 38, part 2). */
TEST_CASE(writable_view_makes_shared_borrow_tracked) {
    PyObject *e = new_exporter();
    pyxbuf_view w, s, x;
    const pyxbuf_shared_api *api = pyxbuf_shared_api_get();
    CHECK(api != NULL);
    int64_t live = api->borrow_live();
    CHECK(pyxbuf_get(e, &w, PyBUF_RECORDS) == 0);
    CHECK(pyxbuf_get(e, &s, SHARED) == 0);
    CHECK(s.ext_flags == (PYXBUF_EXT_SHARED | PYXBUF_EXT_TRACKED) && s.base.readonly);
    CHECK(api->borrow_live() == live + 1);
    /* Borrowers still exclude each other. */
    CHECK(pyxbuf_get(e, &x, EXCLUSIVE) == -1);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "a shared borrow is live");
    pyxbuf_release(&s);
    CHECK(api->borrow_live() == live);
    CHECK(pyxbuf_get(e, &x, EXCLUSIVE) == 0);
    CHECK(x.ext_flags == (PYXBUF_EXT_EXCLUSIVE | PYXBUF_EXT_TRACKED));
    pyxbuf_release(&x);
    pyxbuf_release(&w);
    CHECK(pyxbuf_get(e, &s, SHARED) == 0);
    CHECK(s.ext_flags == PYXBUF_EXT_SHARED);
    pyxbuf_release(&s);
    CHECK(api->borrow_live() == live);
    Py_DECREF(e);
}

TEST_CASE(writable_shared_is_refused) {
    PyObject *e = new_exporter();
    pyxbuf_view s;
    CHECK(pyxbuf_get(e, &s, PyBUF_RECORDS | PYXBUF_BORROW_SHARED) == -1);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "ask for PYXBUF_BORROW_EXCLUSIVE to write");
    Py_DECREF(e);
}

TEST_CASE(counters_return_to_zero) {
    PyObject *e = new_exporter();
    Py_ssize_t refs = Py_REFCNT(e);
    for (int i = 0; i < 10000; i++) {
        pyxbuf_view a, b;
        CHECK(pyxbuf_get(e, &a, SHARED) == 0);
        CHECK(pyxbuf_get(e, &b, SHARED) == 0);
        pyxbuf_release(&b);
        pyxbuf_release(&a);
        CHECK(pyxbuf_get(e, &a, EXCLUSIVE) == 0);
        pyxbuf_release(&a);
    }
    CHECK_INT_EQ(Py_REFCNT(e), refs);
    PyObject *borrows = PyObject_GetAttrString(e, "borrows");
    PyObject *views = PyDict_GetItemString(borrows, "views");
    CHECK_INT_EQ(PyLong_AsLong(views), 0);
    Py_DECREF(borrows);
    Py_DECREF(e);
}

PYTHON_TEST_MAIN(TEST_ENTRY(shared_plus_shared_is_granted), TEST_ENTRY(shared_then_exclusive_is_refused),
                 TEST_ENTRY(exclusive_refuses_everything),
                 TEST_ENTRY(shared_borrow_makes_plain_views_read_only),
                 TEST_ENTRY(writable_view_makes_shared_borrow_tracked), TEST_ENTRY(writable_shared_is_refused),
                 TEST_ENTRY(counters_return_to_zero))
