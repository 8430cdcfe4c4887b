/* test_threads.c -- eight threads at once on what pyxbuf shares between them:
 * acquisition under the GIL (the eval loop switching threads inside a Python
 * __dlpack__), the cooperative borrow registry (with and without the GIL),
 * the device registry and the emulated device, the custom-type registry.
 * `make test-tsan` runs it under ThreadSanitizer, `make test-valgrind` under
 * memcheck. Threads never touch the harness's failure counter (a plain int):
 * they count into thread_failures, which the main thread checks. */
#include "python_fixture.h"
#include "testdev.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define NTHREADS 8

/* Memcheck runs one thread at a time, some fifty times slower: a tenth of
 * the rounds still interleaves every thread, in minutes rather than hours. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
static int rounds(int n) {
#ifdef RUNNING_ON_VALGRIND
    if (RUNNING_ON_VALGRIND) return n / 10 > 2 ? n / 10 : 2;
#endif
    return n;
}

static atomic_int thread_failures;

#define TCHECK(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed in a thread: %s\n", __FILE__, \
                    __LINE__, #cond);                                          \
            atomic_fetch_add(&thread_failures, 1);                             \
        }                                                                      \
    } while (0)

typedef struct worker {
    int index;
    void *shared;
    pthread_barrier_t *start;
} worker;

/* Run fn on NTHREADS threads released together. The main thread gives up the
 * GIL meanwhile, so workers may take it (PyGILState_Ensure) or run without. */
static void run_threads(void *(*fn)(void *), void *shared) {
    pthread_t threads[NTHREADS];
    worker workers[NTHREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, NTHREADS);
    atomic_store(&thread_failures, 0);
    PyThreadState *main_state = PyEval_SaveThread();
    for (int i = 0; i < NTHREADS; i++) {
        workers[i] = (worker){i, shared, &start};
        CHECK(pthread_create(&threads[i], NULL, fn, &workers[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(threads[i], NULL);
    PyEval_RestoreThread(main_state);
    pthread_barrier_destroy(&start);
    CHECK_INT_EQ(atomic_load(&thread_failures), 0);
}

/* A GIL holder lets the others run, as a long computation would. */
static void let_others_run(void) {
    Py_BEGIN_ALLOW_THREADS
    sched_yield();
    Py_END_ALLOW_THREADS
}

static const pyxbuf_device dev0 = {PYXBUF_DL_EXT_DEV, 0};

/* ------------------------------------------------------------------------- */
/* (a) Acquisition under the GIL                                             */
/* ------------------------------------------------------------------------- */

#define ACQUIRE_ROUNDS 20
#define ACQUIRE_PER_ROUND 5

typedef struct producers {
    PyObject *numpy;    /* float64 (6, 8) arange, or NULL without NumPy */
    PyObject *exporter; /* pyxbuf.Exporter int32 (4, 4), items 0..15 */
    PyObject *python;   /* __dlpack__ in Python, over `exporter` */
    PyObject *device;   /* pyxbuf.Exporter on ext_dev:0, bytes 0..63 */
} producers;

static void read_numpy(PyObject *a) {
    pyxbuf_view v;
    if (pyxbuf_get(a, &v, PyBUF_RECORDS_RO) != 0) {
        PyErr_Print();
        TCHECK(0);
        return;
    }
    TCHECK(v.path == PYXBUF_PATH_CLASSIC && v.base.ndim == 2 && v.base.shape[0] == 6 &&
           v.base.shape[1] == 8 && v.base.itemsize == 8);
    const Py_ssize_t at[2] = {1, 2};
    const double *item = pyxbuf_view_item_ptr(&v, at);
    TCHECK(item != NULL && *item == 10.0);
    pyxbuf_release(&v);
}

/* The exporter directly (native path) or through the Python __dlpack__. */
static void read_ints(PyObject *obj, int32_t path) {
    pyxbuf_view v;
    if (pyxbuf_get(obj, &v, PyBUF_RECORDS_RO) != 0) {
        PyErr_Print();
        TCHECK(0);
        return;
    }
    TCHECK(v.path == path && v.base.ndim == 2 && v.base.shape[0] == 4 && v.base.itemsize == 4);
    const Py_ssize_t at[2] = {3, 1};
    const int32_t *item = pyxbuf_view_item_ptr(&v, at);
    TCHECK(item != NULL && *item == 13);
    pyxbuf_release(&v);
}

static void read_device(PyObject *e, int iteration) {
    pyxbuf_view v;
    /* Without PYXBUF_DEVICE a device producer must refuse. */
    TCHECK(pyxbuf_get(e, &v, PyBUF_RECORDS_RO) == -1 && PyErr_ExceptionMatches(PyExc_BufferError));
    PyErr_Clear();
    if (pyxbuf_get(e, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) != 0) {
        PyErr_Print();
        TCHECK(0);
        return;
    }
    pyxbuf_device d = {0, 0};
    TCHECK(v.device != NULL && pyxbuf_view_device(&v, &d, NULL) == 0 &&
           pyxbuf_device_same(&d, &dev0) && v.base.len == 64);
    unsigned char host[64] = {0};
    TCHECK(pyxbuf_copy_to_host(&v, host, sizeof host) == 0); /* drops the GIL inside */
    for (int i = 0; i < 64; i++) TCHECK(host[i] == i);
    if (iteration % 4 == 0) { /* a device -> host -> device round trip */
        static const pyxbuf_device host_device = {PYXBUF_DL_CPU, 0};
        PyObject *back = pyxbuf_to_device(&v, &host_device, PYXBUF_STREAM_DEFAULT);
        TCHECK(back != NULL && memcmp(pyxbuf_exporter_data(back), host, 64) == 0);
        Py_XDECREF(back);
    }
    pyxbuf_release(&v);
}

static void *acquire_worker(void *arg) {
    worker *w = arg;
    producers *p = w->shared;
    pthread_barrier_wait(w->start);
    for (int round = 0; round < rounds(ACQUIRE_ROUNDS); round++) {
        PyGILState_STATE gil = PyGILState_Ensure(); /* a fresh thread state each round */
        for (int i = 0; i < ACQUIRE_PER_ROUND; i++) {
            /* Each thread starts at a different producer. */
            switch ((w->index + i) % 4) {
            case 0:
                if (p->numpy) read_numpy(p->numpy);
                break;
            case 1: read_ints(p->exporter, PYXBUF_PATH_NATIVE); break;
            case 2: read_ints(p->python, PYXBUF_PATH_DLPACK); break;
            case 3: read_device(p->device, round * ACQUIRE_PER_ROUND + i); break;
            }
            if (i % 2) let_others_run();
        }
        PyGILState_Release(gil);
    }
    return NULL;
}

/* A producer whose __dlpack__ runs bytecode before delegating, so that with a
 * tiny switch interval the GIL changes hands inside acquisitions. */
static PyObject *python_dlpack_producer(PyObject *exporter) {
    PyObject *make = py_eval(
        "lambda a: type('PyDLPack', (), {'a': a, "
        "'__dlpack__': lambda self, **kw: (sum(i * i for i in range(64)), "
        "self.a.__dlpack__(**kw))[1], "
        "'__dlpack_device__': lambda self: self.a.__dlpack_device__()})()");
    PyObject *obj = make ? PyObject_CallOneArg(make, exporter) : NULL;
    Py_XDECREF(make);
    return obj;
}

static PyObject *switch_interval(double seconds) {
    char expr[96];
    snprintf(expr, sizeof expr,
             "(lambda s: (s.getswitchinterval(), s.setswitchinterval(%g))[0])(__import__('sys'))",
             seconds);
    return py_eval(expr);
}

TEST_CASE(acquisition_from_8_threads_under_the_gil) {
    pyxbuf_error err;
    CHECK(pyxbuf_testdev_register(&err) == 0);
    int64_t live = pyxbuf_testdev_live_allocations();
    producers p = {0};
    p.numpy = py_eval("__import__('numpy').arange(48, dtype='float64').reshape(6, 8)");
    if (p.numpy == NULL) {
        PyErr_Clear();
        fprintf(stderr, "numpy is not importable: no NumPy producer\n");
    }
    const Py_ssize_t shape[2] = {4, 4};
    p.exporter = pyxbuf_exporter_new("i", 2, shape, 0, NULL);
    CHECK(p.exporter != NULL);
    int32_t *items = pyxbuf_exporter_data(p.exporter);
    for (int32_t i = 0; i < 16; i++) items[i] = i;
    p.python = python_dlpack_producer(p.exporter);
    CHECK(p.python != NULL);
    unsigned char bytes[64];
    for (int i = 0; i < 64; i++) bytes[i] = (unsigned char)i;
    PyObject *host = PyBytes_FromStringAndSize((const char *)bytes, 64);
    pyxbuf_view v;
    CHECK(pyxbuf_get(host, &v, PyBUF_RECORDS_RO) == 0);
    p.device = pyxbuf_to_device(&v, &dev0, PYXBUF_STREAM_DEFAULT);
    pyxbuf_release(&v);
    Py_DECREF(host);
    CHECK(p.device != NULL);
    if (p.exporter == NULL || p.python == NULL || p.device == NULL) return;

    Py_ssize_t refs[4] = {p.numpy ? Py_REFCNT(p.numpy) : 0, Py_REFCNT(p.exporter),
                          Py_REFCNT(p.python), Py_REFCNT(p.device)};
    PyObject *old_interval = switch_interval(1e-6);
    run_threads(acquire_worker, &p);
    PyObject *restored = old_interval ? switch_interval(PyFloat_AsDouble(old_interval)) : NULL;
    Py_XDECREF(restored);
    Py_XDECREF(old_interval);
    /* Every acquisition was released: no reference is left behind. */
    CHECK_INT_EQ(p.numpy ? Py_REFCNT(p.numpy) : 0, refs[0]);
    CHECK_INT_EQ(Py_REFCNT(p.exporter), refs[1]);
    CHECK_INT_EQ(Py_REFCNT(p.python), refs[2]);
    CHECK_INT_EQ(Py_REFCNT(p.device), refs[3]);
    Py_XDECREF(p.numpy);
    Py_DECREF(p.python);
    Py_DECREF(p.exporter);
    Py_DECREF(p.device);
    CHECK_INT_EQ(pyxbuf_testdev_live_allocations(), live);
}

/* ------------------------------------------------------------------------- */
/* (b) The cooperative borrow registry and the exporter's borrow counter     */
/* ------------------------------------------------------------------------- */

/* 256 bytes in four 64-byte segments; requests cover overlapping runs of
 * segments. Each holder counts itself into the segments it covers after the
 * grant and out before the release, so two counts seen at once mean two
 * conflicting grants were live at once. */
#define SEGMENTS 4
#define SEGMENT_BYTES 64
#define BORROW_ROUNDS 60

static const int spans[][2] = {{0, 2}, {1, 3}, {2, 4}, {0, 4}, {3, 4}, {0, 1}, {1, 2}};
#define NSPANS ((int)(sizeof spans / sizeof *spans))

typedef struct borrow_state {
    unsigned char *memory;     /* a bytearray's storage */
    PyObject *slices[NSPANS];  /* memoryviews of the spans */
    PyObject *exporter;        /* a pyxbuf.Exporter: its own borrow counter */
    const pyxbuf_shared_api *api;
    atomic_int exclusive[SEGMENTS + 1]; /* the last one: the exporter */
    atomic_int shared[SEGMENTS + 1];
    atomic_long granted, refused;
} borrow_state;

/* Count a grant into segments [lo, hi); check it conflicts with no one. */
static void hold(borrow_state *s, int lo, int hi, int exclusive) {
    for (int g = lo; g < hi; g++) {
        if (exclusive) {
            TCHECK(atomic_fetch_add(&s->exclusive[g], 1) == 0);
            TCHECK(atomic_load(&s->shared[g]) == 0);
        } else {
            atomic_fetch_add(&s->shared[g], 1);
            TCHECK(atomic_load(&s->exclusive[g]) == 0);
        }
    }
    atomic_fetch_add(&s->granted, 1);
}

static void unhold(borrow_state *s, int lo, int hi, int exclusive) {
    for (int g = lo; g < hi; g++) atomic_fetch_sub(exclusive ? &s->exclusive[g] : &s->shared[g], 1);
}

/* What a holder does with the bytes: an exclusive one writes its mark and
 * finds it intact after letting others run; a shared one finds the bytes
 * unchanged. `pause` lets the other threads run meanwhile. */
static void use_memory(unsigned char *bytes, size_t n, int exclusive, unsigned char mark,
                       void (*pause)(void)) {
    unsigned long before = 0, after = 0;
    if (exclusive) memset(bytes, mark, n);
    for (size_t i = 0; i < n; i++) before += bytes[i] * (i + 1);
    pause();
    for (size_t i = 0; i < n; i++) after += bytes[i] * (i + 1);
    TCHECK(before == after);
    size_t intact = 0;
    for (size_t i = 0; exclusive && i < n; i++) intact += bytes[i] == mark;
    TCHECK(!exclusive || intact == n);
}

static void no_gil_pause(void) { sched_yield(); }

/* Workers 0..3: pyxbuf_get with borrow flags, under the GIL (the memoryview
 * slices go through the registry, the exporter through its own counter). */
static void borrow_with_gil(worker *w, borrow_state *s) {
    for (int round = 0; round < rounds(BORROW_ROUNDS); round++) {
        PyGILState_STATE gil = PyGILState_Ensure();
        int exclusive = (round + w->index) % 3 == 0;
        int32_t flags = exclusive ? PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE
                                  : PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED;
        int on_exporter = round % 4 == 3;
        int k = (round * 3 + w->index) % NSPANS;
        int lo = on_exporter ? SEGMENTS : spans[k][0], hi = on_exporter ? SEGMENTS + 1 : spans[k][1];
        pyxbuf_view v;
        if (pyxbuf_get(on_exporter ? s->exporter : s->slices[k], &v, flags) == 0) {
            int32_t want = exclusive ? PYXBUF_EXT_EXCLUSIVE : PYXBUF_EXT_SHARED;
            TCHECK((v.ext_flags & want) && (on_exporter || (v.ext_flags & PYXBUF_EXT_TRACKED)));
            hold(s, lo, hi, exclusive);
            use_memory(v.base.buf, (size_t)v.base.len, exclusive, (unsigned char)(w->index + 1),
                       let_others_run);
            unhold(s, lo, hi, exclusive);
            pyxbuf_release(&v);
        } else {
            TCHECK(PyErr_ExceptionMatches(PyExc_BufferError));
            PyErr_Clear();
            atomic_fetch_add(&s->refused, 1);
            let_others_run();
        }
        PyGILState_Release(gil);
    }
}

/* Workers 4..7: the shared table's functions, without the GIL, on the same
 * bytes (the registry keys borrows by address). */
static void borrow_without_gil(worker *w, borrow_state *s) {
    char why[256];
    for (int round = 0; round < rounds(BORROW_ROUNDS * 4); round++) {
        int exclusive = (round + w->index) % 3 == 0;
        int k = (round * 5 + w->index) % NSPANS;
        int lo = spans[k][0], hi = spans[k][1];
        unsigned char *bytes = s->memory + lo * SEGMENT_BYTES;
        pyxbuf_borrow_range range = {PYXBUF_DL_CPU, 0, (uint64_t)(uintptr_t)bytes,
                                     (uint64_t)(uintptr_t)(s->memory + hi * SEGMENT_BYTES)};
        int64_t token = 0;
        int rc = s->api->borrow_acquire(&range, exclusive, &token, why, sizeof why);
        if (rc == 0) {
            TCHECK(token != 0);
            hold(s, lo, hi, exclusive);
            use_memory(bytes, (size_t)(hi - lo) * SEGMENT_BYTES, exclusive,
                       (unsigned char)(w->index + 1), no_gil_pause);
            unhold(s, lo, hi, exclusive);
            s->api->borrow_release(token);
        } else {
            TCHECK(rc == PYXBUF_EBORROW && strstr(why, "borrow of [0x") != NULL);
            atomic_fetch_add(&s->refused, 1);
            sched_yield();
        }
    }
}

static void *borrow_worker(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->start);
    if (w->index < NTHREADS / 2)
        borrow_with_gil(w, w->shared);
    else
        borrow_without_gil(w, w->shared);
    return NULL;
}

TEST_CASE(borrows_from_8_threads_never_conflict) {
    static borrow_state s; /* zero: every count starts at 0 */
    PyObject *bytes = PyByteArray_FromStringAndSize(NULL, SEGMENTS * SEGMENT_BYTES);
    PyObject *whole = bytes ? PyMemoryView_FromObject(bytes) : NULL;
    CHECK(whole != NULL);
    if (whole == NULL) return;
    s.memory = (unsigned char *)PyByteArray_AS_STRING(bytes);
    memset(s.memory, 0, SEGMENTS * SEGMENT_BYTES);
    for (int k = 0; k < NSPANS; k++) {
        PyObject *lo = PyLong_FromLong(spans[k][0] * SEGMENT_BYTES);
        PyObject *hi = PyLong_FromLong(spans[k][1] * SEGMENT_BYTES);
        PyObject *slice = PySlice_New(lo, hi, NULL);
        s.slices[k] = PyObject_GetItem(whole, slice);
        CHECK(s.slices[k] != NULL);
        Py_XDECREF(slice);
        Py_XDECREF(hi);
        Py_XDECREF(lo);
    }
    const Py_ssize_t shape[1] = {SEGMENT_BYTES};
    s.exporter = pyxbuf_exporter_new("B", 1, shape, 0, NULL);
    s.api = pyxbuf_shared_api_get(); /* needs the GIL the first time */
    CHECK(s.exporter != NULL && s.api != NULL);
    if (s.exporter == NULL || s.api == NULL) return;
    int64_t live = s.api->borrow_live();

    run_threads(borrow_worker, &s);

    fprintf(stderr, "borrows: %ld granted, %ld refused\n", atomic_load(&s.granted),
            atomic_load(&s.refused));
    CHECK(atomic_load(&s.granted) > 0);
    CHECK_INT_EQ(s.api->borrow_live(), live);
    for (int g = 0; g <= SEGMENTS; g++) {
        CHECK_INT_EQ(atomic_load(&s.exclusive[g]), 0);
        CHECK_INT_EQ(atomic_load(&s.shared[g]), 0);
    }
    /* Everything released: an exclusive borrow of the whole is grantable. */
    pyxbuf_view v;
    CHECK(pyxbuf_get(whole, &v, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE) == 0);
    pyxbuf_release(&v);
    CHECK(pyxbuf_get(s.exporter, &v, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE) == 0);
    pyxbuf_release(&v);
    for (int k = 0; k < NSPANS; k++) Py_XDECREF(s.slices[k]);
    Py_DECREF(s.exporter);
    Py_DECREF(whole);
    Py_DECREF(bytes);
}

/* ------------------------------------------------------------------------- */
/* (c) The device registry and the emulated device, without the GIL          */
/* ------------------------------------------------------------------------- */

#define DEVICE_ROUNDS 100
#define FAKE_TYPE 40 /* device types 40 and 41: registered and replaced by the workers */

static int fake_tags[NTHREADS];
static const char *const fake_names[NTHREADS] = {"fake0", "fake1", "fake2", "fake3",
                                                 "fake4", "fake5", "fake6", "fake7"};

static int fake_copy(void *ctx, int32_t id, void *dst, const void *src, size_t n, int64_t stream,
                     pyxbuf_error *err) {
    (void)ctx, (void)id, (void)dst, (void)src, (void)n, (void)stream, (void)err;
    return PYXBUF_EUNSUPPORTED;
}
static int fake_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)n, (void)ptr, (void)err;
    return PYXBUF_EUNSUPPORTED;
}
static int fake_free(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)ptr, (void)err;
    return PYXBUF_EUNSUPPORTED;
}
static int fake_query(void *ctx, const void *ptr, pyxbuf_device *device, pyxbuf_error *err) {
    (void)ctx, (void)ptr, (void)device, (void)err;
    return PYXBUF_EDEVICE;
}

/* A backend read by another thread must be one registrant's, whole. */
static void check_fake(int32_t type) {
    pyxbuf_backend b;
    if (pyxbuf_backend_get(type, &b, NULL) != 0) return; /* unregistered just now */
    int j = (int)((int *)b.ctx - fake_tags);
    TCHECK(j >= 0 && j < NTHREADS && b.device_type == type);
    if (j >= 0 && j < NTHREADS) TCHECK(strcmp(b.name, fake_names[j]) == 0);
    TCHECK(b.copy_to_host == fake_copy && b.alloc == fake_alloc && b.pointer_query == fake_query);
}

static void fill(unsigned char *p, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 31 + (int)i);
}

/* Allocate on two emulated devices, upload, copy across, wait on an event,
 * download and compare; every pointer is where the backend says. */
static void device_round(int index, int round, int64_t stream, const pyxbuf_backend *td) {
    pyxbuf_error err;
    int32_t a_id = index % PYXBUF_TESTDEV_MAX_DEVICES, b_id = (index + 1) % PYXBUF_TESTDEV_MAX_DEVICES;
    size_t n = 256 + 64 * (size_t)index + (size_t)round;
    unsigned char src[1024], dst[1024];
    fill(src, n, index * DEVICE_ROUNDS + round);
    void *a = NULL, *b = NULL, *event = NULL;
    TCHECK(td->alloc(td->ctx, a_id, n, &a, &err) == 0);
    TCHECK(td->alloc(td->ctx, b_id, n, &b, &err) == 0);
    if (a == NULL || b == NULL) return;
    pyxbuf_device where = {0, 0};
    TCHECK(td->pointer_query(td->ctx, a, &where, &err) == 0 && where.device_id == a_id &&
           where.device_type == PYXBUF_DL_EXT_DEV);
    TCHECK(td->pointer_query(td->ctx, (char *)b + n - 1, &where, &err) == 0 &&
           where.device_id == b_id);
    TCHECK(td->pointer_query(td->ctx, src, &where, &err) == PYXBUF_EDEVICE);
    TCHECK(td->copy_from_host(td->ctx, a_id, a, src, n, stream, &err) == 0);
    TCHECK(td->copy_on_device(td->ctx, b_id, b, a_id, a, n, stream, &err) == 0);
    TCHECK(td->event_record(td->ctx, a_id, stream, &event, &err) == 0);
    TCHECK(td->event_wait(td->ctx, b_id, event, PYXBUF_STREAM_DEFAULT, &err) == 0);
    TCHECK(td->copy_to_host(td->ctx, b_id, dst, b, n, PYXBUF_STREAM_DEFAULT, &err) == 0);
    TCHECK(memcmp(src, dst, n) == 0);
    TCHECK(td->event_destroy(td->ctx, a_id, event, &err) == 0);
    TCHECK(td->free(td->ctx, a_id, a, &err) == 0);
    TCHECK(td->free(td->ctx, b_id, b, &err) == 0);
}

static void *device_worker(void *arg) {
    worker *w = arg;
    pyxbuf_error err;
    pthread_barrier_wait(w->start);
    /* Idempotent; the first of these calls in the process also registers the
     * built-in backends (a pthread_once raced by all eight). */
    TCHECK(pyxbuf_testdev_register(&err) == 0);
    pyxbuf_backend td, b;
    TCHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &td, &err) == 0);
    int64_t stream = 0;
    TCHECK(pyxbuf_testdev_stream_create(w->index % PYXBUF_TESTDEV_MAX_DEVICES, &stream, &err) == 0);
    const pyxbuf_backend fake = {
        .size = sizeof(pyxbuf_backend),
        .device_type = FAKE_TYPE + w->index % 2,
        .name = fake_names[w->index],
        .ctx = &fake_tags[w->index],
        .copy_to_host = fake_copy,
        .copy_from_host = fake_copy,
        .alloc = fake_alloc,
        .free = fake_free,
        .pointer_query = fake_query,
    };
    for (int round = 0; round < rounds(DEVICE_ROUNDS); round++) {
        TCHECK(pyxbuf_backend_get(PYXBUF_DL_CPU, &b, &err) == 0 && strcmp(b.name, "cpu") == 0);
        TCHECK(pyxbuf_backend_get(PYXBUF_DL_METAL, &b, &err) == PYXBUF_EUNSUPPORTED);
        /* The CUDA backend loads its driver on first use (once, whichever
         * thread comes first); a host address is no CUDA device memory. */
        TCHECK(pyxbuf_backend_get(PYXBUF_DL_CUDA, &b, &err) == 0);
        pyxbuf_device where = {0, 0};
        if (b.pointer_query(b.ctx, &where, &where, &err) == 0)
            TCHECK(where.device_type != PYXBUF_DL_EXT_DEV);
        TCHECK(pyxbuf_backend_register(&fake, &err) == 0);
        check_fake(FAKE_TYPE + (w->index + 1) % 2);
        if (round % 5 == 4) pyxbuf_backend_unregister(fake.device_type);
        device_round(w->index, round, stream, &td);
    }
    TCHECK(pyxbuf_testdev_stream_destroy(stream, &err) == 0);
    return NULL;
}

TEST_CASE(device_registry_from_8_threads) {
    /* No registry call before the threads: they race its initialisation. */
    run_threads(device_worker, NULL);
    CHECK_INT_EQ(pyxbuf_testdev_live_allocations(), 0);
    pyxbuf_backend_unregister(FAKE_TYPE);
    pyxbuf_backend_unregister(FAKE_TYPE + 1);
    pyxbuf_backend b;
    CHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) == 0);
    CHECK_STR_EQ(b.name, "pyxbuf.testdev");
}

/* ------------------------------------------------------------------------- */
/* (d) Format parsing against the custom-type registry, without the GIL      */
/* ------------------------------------------------------------------------- */

#define FORMAT_ROUNDS 500

static void *format_worker(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->start);
    for (int round = 0; round < rounds(FORMAT_ROUNDS); round++) {
        if (w->index < 2) { /* two registrants flip the type's size: 4 or 8 */
            int64_t size = (round + w->index) % 2 ? 8 : 4;
            pyxbuf_dtype_spec spec = {.size = sizeof spec, .key = "tthreads$",
                                      .itemsize = size, .alignment = size};
            TCHECK(pyxbuf_dtype_register(&spec) == 0);
            if (round % 7 == 6) pyxbuf_dtype_unregister("tthreads$");
            continue;
        }
        pyxbuf_format f;
        pyxbuf_error err;
        TCHECK(pyxbuf_format_parse("T{i:n:[tthreads$x]:v:}", &f, &err) == 0);
        /* Unregistered: opaque; else i then a 4- or 8-aligned member. */
        TCHECK(f.itemsize == -1 || f.itemsize == 8 || f.itemsize == 16);
        pyxbuf_format_clear(&f);
        int64_t size = 0;
        int rc = pyxbuf_format_itemsize("2[tthreads$y]", &size, NULL, &err);
        TCHECK((rc == 0 && (size == 8 || size == 16)) || rc == PYXBUF_EUNSUPPORTED);
    }
    return NULL;
}

TEST_CASE(format_registry_from_8_threads) {
    run_threads(format_worker, NULL);
    pyxbuf_dtype_unregister("tthreads$");
}

PYTHON_TEST_MAIN(TEST_ENTRY(acquisition_from_8_threads_under_the_gil),
                 TEST_ENTRY(borrows_from_8_threads_never_conflict),
                 TEST_ENTRY(device_registry_from_8_threads),
                 TEST_ENTRY(format_registry_from_8_threads))
