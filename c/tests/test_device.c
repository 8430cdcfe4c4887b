/* test_device.c -- the backend registry, device identifiers and copies, on
 * the CPU backend and the guarded emulated device. */
#include "python_fixture.h"
#include "device/emulated.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static const pyxbuf_device dev0 = {PYXBUF_DL_EXT_DEV, 0};
static const pyxbuf_device dev1 = {PYXBUF_DL_EXT_DEV, 1};
static const pyxbuf_device host = {PYXBUF_DL_CPU, 0};

static void setup(void) {
    pyxbuf_error err;
    CHECK(pyxbuf_emulated_register(&err) == 0);
}

TEST_CASE(device_names_and_formatting) {
    char buf[32];
    CHECK_INT_EQ(pyxbuf_device_format(&dev1, buf, sizeof buf), 9);
    CHECK_STR_EQ(buf, "ext_dev:1");
    CHECK(pyxbuf_device_format(&host, buf, sizeof buf) == 3);
    CHECK_STR_EQ(buf, "cpu");
    CHECK(pyxbuf_device_format(&dev1, buf, 4) == PYXBUF_ENOSPACE);
    CHECK_STR_EQ(pyxbuf_device_type_name(PYXBUF_DL_CUDA), "cuda");
    CHECK_STR_EQ(pyxbuf_device_type_name(999), "unknown");
    CHECK(pyxbuf_device_same(&dev0, &dev0));
    CHECK(!pyxbuf_device_same(&dev0, &dev1));
}

TEST_CASE(builtin_backends_are_registered) {
    pyxbuf_backend b;
    CHECK(pyxbuf_backend_get(PYXBUF_DL_CPU, &b, NULL) == 0);
    CHECK_STR_EQ(b.name, "cpu");
    CHECK(pyxbuf_backend_get(PYXBUF_DL_CUDA, &b, NULL) == 0);
    CHECK_STR_EQ(b.name, "cuda");
    pyxbuf_error err;
    CHECK(pyxbuf_backend_get(PYXBUF_DL_METAL, &b, &err) == PYXBUF_EUNSUPPORTED);
    CHECK_CONTAINS(err.message, "no pyxbuf backend for device type 8 (metal)");
}

static int fake_copy(void *ctx, int32_t id, void *dst, const void *src, size_t n, int64_t s,
                     pyxbuf_error *err) {
    (void)ctx, (void)id, (void)s, (void)err;
    memcpy(dst, src, n);
    return 0;
}
static int fake_alloc(void *ctx, int32_t id, size_t n, void **p, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    *p = malloc(n);
    return 0;
}
static int fake_free(void *ctx, int32_t id, void *p, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    free(p);
    return 0;
}
static int fake_query(void *ctx, const void *p, pyxbuf_device *d, pyxbuf_error *err) {
    (void)ctx, (void)p, (void)err;
    d->device_type = PYXBUF_DL_VULKAN;
    d->device_id = 0;
    return 0;
}

TEST_CASE(third_party_backend_registration) {
    pyxbuf_backend mine = {.size = sizeof(pyxbuf_backend), .device_type = PYXBUF_DL_VULKAN,
                           .name = "fake-vulkan", .copy_to_host = fake_copy,
                           .copy_from_host = fake_copy, .alloc = fake_alloc, .free = fake_free,
                           .pointer_query = fake_query};
    pyxbuf_error err;
    CHECK(pyxbuf_backend_register(&mine, &err) == 0);
    pyxbuf_backend got;
    CHECK(pyxbuf_backend_get(PYXBUF_DL_VULKAN, &got, NULL) == 0);
    CHECK_STR_EQ(got.name, "fake-vulkan");
    /* An exporter on it, and to_device back to the host through it. */
    Py_ssize_t n = 4;
    pyxbuf_device vk = {PYXBUF_DL_VULKAN, 0};
    PyObject *e = pyxbuf_exporter_new("B", 1, &n, 0, &vk);
    CHECK(e != NULL);
    memcpy(pyxbuf_exporter_data(e), "vulk", 4);
    pyxbuf_view v;
    CHECK(pyxbuf_get(e, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == 0);
    char out[4];
    CHECK(pyxbuf_copy_to_host(&v, out, 4) == 0);
    CHECK(memcmp(out, "vulk", 4) == 0);
    pyxbuf_release(&v);
    Py_XDECREF(e);
    CHECK(pyxbuf_backend_unregister(PYXBUF_DL_VULKAN) == 0);
    CHECK(pyxbuf_backend_unregister(PYXBUF_DL_VULKAN) == PYXBUF_EINVAL);

    pyxbuf_backend incomplete = {.size = sizeof(pyxbuf_backend), .device_type = PYXBUF_DL_VULKAN,
                                 .name = "half"};
    CHECK(pyxbuf_backend_register(&incomplete, &err) == PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "backend 'half' lacks copy_to_host");
    mine.device_type = 500;
    CHECK(pyxbuf_backend_register(&mine, &err) == PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "device type 500 is outside");
}

TEST_CASE(host_dereference_of_emulated_memory_crashes) {
    setup();
    pyxbuf_backend b;
    void *p = NULL;
    CHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) == 0);
    CHECK(b.alloc(b.ctx, 0, 64, &p, NULL) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        volatile char c = *(volatile char *)p;
        (void)c;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    /* The backend reads the same bytes through its own mapping. */
    unsigned char byte = 0;
    CHECK(b.copy_to_host(b.ctx, 0, &byte, p, 1, PYXBUF_STREAM_DEFAULT, NULL) == 0);
    CHECK_INT_EQ(byte, PYXBUF_EMULATED_POISON);
    CHECK(b.free(b.ctx, 0, p, NULL) == 0);
}

TEST_CASE(events_order_work_across_streams) {
    setup();
    pyxbuf_backend b;
    pyxbuf_error err;
    CHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) == 0);
    void *p = NULL, *event = NULL;
    int64_t producer = 0, consumer = 0;
    CHECK(b.alloc(b.ctx, 0, 4, &p, &err) == 0);
    CHECK(pyxbuf_emulated_stream_create(0, &producer, &err) == 0);
    CHECK(pyxbuf_emulated_stream_create(0, &consumer, &err) == 0);
    CHECK(pyxbuf_emulated_enqueue_write(0, producer, p, "DATA", 4, &err) == 0);
    CHECK(b.event_record(b.ctx, 0, producer, &event, &err) == 0);
    char out[4];
    /* Copy on the consumer stream without waiting: stale, every time. */
    for (int i = 0; i < 100; i++) {
        CHECK(b.copy_to_host(b.ctx, 0, out, p, 4, consumer, &err) == 0);
        CHECK(memcmp(out, "\xDB\xDB\xDB\xDB", 4) == 0);
    }
    CHECK(b.event_wait(b.ctx, 0, event, consumer, &err) == 0);
    CHECK(b.copy_to_host(b.ctx, 0, out, p, 4, consumer, &err) == 0);
    CHECK(memcmp(out, "DATA", 4) == 0);
    CHECK_INT_EQ(pyxbuf_emulated_pending(0, producer), 0);
    CHECK(b.event_destroy(b.ctx, 0, event, &err) == 0);
    CHECK(pyxbuf_emulated_stream_destroy(producer, &err) == 0);
    CHECK(pyxbuf_emulated_stream_destroy(consumer, &err) == 0);
    CHECK(b.free(b.ctx, 0, p, &err) == 0);
}

TEST_CASE(emulated_device_refuses_bad_addresses) {
    setup();
    pyxbuf_backend b;
    pyxbuf_error err;
    char host_bytes[8] = {0};
    CHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) == 0);
    CHECK(b.copy_to_host(b.ctx, 0, host_bytes, host_bytes, 8, 0, &err) == PYXBUF_EDEVICE);
    CHECK_CONTAINS(err.message, "are not memory of emulated device 0");
    CHECK(b.free(b.ctx, 0, host_bytes, &err) == PYXBUF_EINVAL);
    void *nowhere = NULL;
    CHECK(b.alloc(b.ctx, 9, 8, &nowhere, &err) == PYXBUF_EDEVICE);
    CHECK_CONTAINS(err.message, "no emulated device 9");
    pyxbuf_device d;
    CHECK(b.pointer_query(b.ctx, host_bytes, &d, &err) == PYXBUF_EDEVICE);
}

TEST_CASE(to_device_round_trip_and_no_leaks) {
    setup();
    int64_t live = pyxbuf_emulated_live_allocations();
    PyObject *a = py_eval("bytes(range(48))");
    pyxbuf_view v;
    CHECK(pyxbuf_get(a, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == 0);
    PyObject *on0 = pyxbuf_to_device(&v, &dev0, PYXBUF_STREAM_DEFAULT);
    pyxbuf_release(&v);
    CHECK(on0 != NULL);
    CHECK(pyxbuf_get(on0, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == 0);
    PyObject *on1 = pyxbuf_to_device(&v, &dev1, PYXBUF_STREAM_DEFAULT);
    PyObject *same = pyxbuf_to_device(&v, &dev0, PYXBUF_STREAM_DEFAULT);
    CHECK(same == on0); /* no copy when the device matches */
    pyxbuf_release(&v);
    CHECK(pyxbuf_get(on1, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == 0);
    PyObject *back = pyxbuf_to_device(&v, &host, PYXBUF_STREAM_DEFAULT);
    pyxbuf_release(&v);
    CHECK(back != NULL && memcmp(pyxbuf_exporter_data(back), PyBytes_AS_STRING(a), 48) == 0);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), live + 2);
    Py_XDECREF(back);
    Py_XDECREF(same);
    Py_XDECREF(on1);
    Py_XDECREF(on0);
    Py_DECREF(a);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), live);
}

TEST_CASE(same_device_and_host_only_refusals) {
    setup();
    Py_ssize_t n = 8;
    PyObject *d = pyxbuf_exporter_new("B", 1, &n, 0, &dev0);
    PyObject *h = py_eval("bytearray(8)");
    pyxbuf_view vd, vh;
    CHECK(pyxbuf_get(d, &vd, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == 0);
    CHECK(pyxbuf_get(h, &vh, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == 0);
    CHECK(pyxbuf_same_device(&vd, &vh) == -1);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "different devices, 'ext_dev:0' and 'cpu'");
    Py_ssize_t zero = 0;
    CHECK(pyxbuf_view_item_ptr(&vd, &zero) == NULL);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "element access needs host memory");
    CHECK(pyxbuf_view_memoryview(&vd) == NULL);
    take_error(PyExc_BufferError);
    char out[8];
    CHECK(pyxbuf_view_copy_contiguous(&vd, out, 8, 'C') == -1);
    take_error(PyExc_BufferError);
    CHECK(pyxbuf_view_item_ptr(&vh, &zero) == vh.base.buf);
    n = 8;
    CHECK(pyxbuf_view_item_ptr(&vh, &n) == NULL);
    take_error(PyExc_IndexError);
    CHECK(pyxbuf_copy_to_host(&vd, out, 7) == -1);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "destination holds 7 bytes");
    pyxbuf_release(&vh);
    pyxbuf_release(&vd);
    Py_DECREF(h);
    Py_DECREF(d);
}

TEST_CASE(released_view_refuses_host_only_calls) {
    PyObject *h = py_eval("bytearray(b'abcdefgh')");
    pyxbuf_view v;
    CHECK(pyxbuf_get(h, &v, PyBUF_RECORDS_RO) == 0);
    pyxbuf_release(&v);
    CHECK(!pyxbuf_view_is_acquired(&v)); /* its pointers are stale, its state says so */
#ifdef PYXBUF_DEBUG
    CHECK(v.base.shape == NULL && v.base.len == 0 && v.base.format == NULL);
#endif
    Py_ssize_t zero = 0;
    char out[8];
    CHECK(pyxbuf_view_item_ptr(&v, &zero) == NULL);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "not acquired");
    CHECK(pyxbuf_copy_to_host(&v, out, 8) == -1);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "not acquired");
    CHECK(pyxbuf_view_copy_contiguous(&v, out, 8, 'C') == -1);
    take_error(PyExc_BufferError);
    CHECK(pyxbuf_view_memoryview(&v) == NULL);
    take_error(PyExc_BufferError);
    Py_DECREF(h);
}

/* A device pyxbuf has no description for: its identifier and info pass
 * through the exporter untouched, and asking pyxbuf which device it is gives
 * PYXBUF_EUNSUPPORTED naming it. The memory is never read by pyxbuf. */
TEST_CASE(foreign_device_round_trips_through_exporter_wrap) {
    static const char foreign[] = "otherlib.npu\xc2\xb5"; /* "otherlib.npu\u00b5" */
    static int foreign_info = 42;
    static unsigned char memory[16];
    Py_ssize_t shape = 4;
    pyxbuf_export_desc desc = {.size = sizeof desc, .ndim = 1, .buf = memory, .format = "f",
                               .shape = &shape, .device = foreign, .device_info = &foreign_info};
    PyObject *e = pyxbuf_exporter_wrap(&desc, NULL, NULL);
    CHECK(e != NULL);
    if (e == NULL) return;
    pyxbuf_view v;
    CHECK(pyxbuf_get(e, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) == 0);
    CHECK_STR_EQ(v.device, foreign);
    CHECK(v.device != foreign); /* the exporter keeps its own copy */
    CHECK(v.device_info == &foreign_info);
    CHECK(v.flags & PYXBUF_DEVICE);
    CHECK(v.base.buf == memory);
    pyxbuf_device d;
    pyxbuf_error err;
    CHECK_INT_EQ(pyxbuf_view_device(&v, &d, &err), PYXBUF_EUNSUPPORTED);
    CHECK_INT_EQ(err.code, PYXBUF_EUNSUPPORTED);
    CHECK_CONTAINS(err.message, "'otherlib.npu");
    pyxbuf_release(&v);
    /* Without PYXBUF_DEVICE the host is never handed the pointer. */
    CHECK(pyxbuf_get(e, &v, PyBUF_RECORDS_RO) == -1);
    CHECK_CONTAINS(take_error(PyExc_BufferError), "holds memory on device 'otherlib.npu");
    Py_DECREF(e);
    /* An identifier that is not UTF-8 is refused when the exporter is made. */
    desc.device = "otherlib.\xff";
    CHECK(pyxbuf_exporter_wrap(&desc, NULL, NULL) == NULL);
    CHECK_CONTAINS(take_error(PyExc_ValueError), "byte 9 is invalid");
}

PYTHON_TEST_MAIN(TEST_ENTRY(device_names_and_formatting), TEST_ENTRY(builtin_backends_are_registered),
                 TEST_ENTRY(third_party_backend_registration),
                 TEST_ENTRY(host_dereference_of_emulated_memory_crashes),
                 TEST_ENTRY(events_order_work_across_streams),
                 TEST_ENTRY(emulated_device_refuses_bad_addresses),
                 TEST_ENTRY(to_device_round_trip_and_no_leaks),
                 TEST_ENTRY(same_device_and_host_only_refusals),
                 TEST_ENTRY(released_view_refuses_host_only_calls),
                 TEST_ENTRY(foreign_device_round_trips_through_exporter_wrap))
