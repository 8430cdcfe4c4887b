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

/* A shared table installed by an older copy of pyxbuf (version 2: no dense
 * bit, no registry to work on inline): this copy calls its functions, and
 * hands it keys without the dense bit. Its registry here keeps live borrows
 * by kind only (a conflict is any exclusive with anything). */
static struct {
    int calls, releases, shared, exclusive;
    uint64_t last_itemsize;
} older;

static int older_acquire_key(const pyxbuf_borrow_key *key, int32_t exclusive, int64_t *token,
                             char *why, size_t why_cap) {
    older.calls++;
    older.last_itemsize = key->itemsize;
    if (older.exclusive > 0 || (exclusive && older.shared > 0)) {
        snprintf(why, why_cap, "a borrow in the older table");
        return PYXBUF_EBORROW;
    }
    if (exclusive) older.exclusive++;
    else older.shared++;
    *token = exclusive ? -1 : older.calls;
    return 0;
}

static int older_acquire(const pyxbuf_borrow_range *range, int32_t exclusive, int64_t *token,
                         char *why, size_t why_cap) {
    pyxbuf_borrow_key key = {*range, 0, 0, 1};
    return older_acquire_key(&key, exclusive, token, why, why_cap);
}

static void older_release(int64_t token) {
    older.releases++;
    if (token == -1) older.exclusive--;
    else older.shared--;
}

static int64_t older_live(void) { return older.shared + older.exclusive; }

TEST_CASE(an_older_installer_is_called_through_its_table) {
    static pyxbuf_shared_api table;
    table.version = 2;
    table.size = (uint32_t)(offsetof(pyxbuf_shared_api, borrow_acquire_key) + sizeof(void *));
    table.installer_version = "0.0.older";
    table.borrow_acquire = older_acquire;
    table.borrow_release = older_release;
    table.borrow_live = older_live;
    table.borrow_acquire_key = older_acquire_key;
    PyObject *module = PyModule_New(PYXBUF_SHARED_MODULE);
    PyObject *capsule = PyCapsule_New(&table, PYXBUF_SHARED_CAPSULE, NULL);
    CHECK(module && capsule && PyModule_AddObjectRef(module, "API", capsule) == 0);
    CHECK(PyDict_SetItemString(PyImport_GetModuleDict(), PYXBUF_SHARED_MODULE, module) == 0);
    Py_DECREF(capsule);
    Py_DECREF(module);
    CHECK(pyxbuf_shared_api_get() == &table);

    PyObject *data = py_eval("bytearray(64)");
    PyObject *strided = py_eval("memoryview(bytearray(64))[::4]"); /* a dense key */
    pyxbuf_view a, b;
    CHECK(pyxbuf_get(data, &a, SHARED) == 0);
    CHECK_INT_EQ(a.ext_flags, PYXBUF_EXT_TRACKED | PYXBUF_EXT_SHARED);
    CHECK_INT_EQ(older.calls, 1);
    CHECK(pyxbuf_get(data, &b, EXCLUSIVE) == -1);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "a borrow in the older table");
    pyxbuf_release(&a);
    CHECK_INT_EQ(older.releases, 1);
    CHECK(pyxbuf_get(strided, &a, SHARED) == 0);
    CHECK(older.last_itemsize == 1); /* no dense bit for a table older than version 3 */
    pyxbuf_release(&a);
    CHECK_INT_EQ((int)older_live(), 0);
    Py_DECREF(strided);
    Py_DECREF(data);
}

PYTHON_TEST_MAIN(TEST_ENTRY(shared_plus_shared_is_granted), TEST_ENTRY(shared_then_exclusive_is_refused),
                 TEST_ENTRY(exclusive_refuses_everything),
                 TEST_ENTRY(shared_borrow_makes_plain_views_read_only),
                 TEST_ENTRY(writable_view_makes_shared_borrow_tracked), TEST_ENTRY(writable_shared_is_refused),
                 TEST_ENTRY(counters_return_to_zero),
                 TEST_ENTRY(an_older_installer_is_called_through_its_table))
