/* test_threads.c -- eight threads at once on what pyxbuf shares between them:
 * acquisition (inside a Python __dlpack__ too), borrow grants on tracked NumPy
 * arrays and on exporters with a ledger of what is held, views released on
 * another thread than the one that acquired them, the device registry and
 * the emulated device, the custom-type registry. On a GIL build the GIL
 * changes hands between threads (and workers without a thread state run
 * alongside); on a free-threaded build the tests check that the GIL is off
 * (run them with PYTHON_GIL=0), so every worker runs in parallel.
 * `make test-tsan` runs it under ThreadSanitizer, `make test-valgrind` under
 * memcheck, tools/test-tsan-ft.sh on a ThreadSanitizer 3.14t. Threads never
 * touch the harness's failure counter (a plain int): they TCHECK
 * (thread_checks.h), which the main thread checks. */
#include "python_fixture.h"
#include "device/emulated.h"
#include "thread_checks.h"

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

typedef struct worker {
    int index;
    void *shared;
    pthread_barrier_t *start;
} worker;

/* On a free-threaded build the point is threads inside pyxbuf at once: an
 * import that turned the GIL back on would let every test pass untested. */
static void check_gil_disabled(void) {
#ifdef Py_GIL_DISABLED
    PyObject *enabled = py_eval("__import__('sys')._is_gil_enabled()");
    CHECK(enabled == Py_False);
    if (enabled != Py_False) fprintf(stderr, "the GIL is on: run with PYTHON_GIL=0\n");
    Py_XDECREF(enabled);
#endif
}

/* Run fn on NTHREADS threads released together. The main thread detaches its
 * thread state meanwhile, so workers may attach one (PyGILState_Ensure) or
 * run without. */
static void run_threads(void *(*fn)(void *), void *shared) {
    check_gil_disabled();
    pthread_t threads[NTHREADS];
    worker workers[NTHREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, NTHREADS);
    atomic_store(&pyxbuf_thread_failures, 0);
    PyThreadState *main_state = PyEval_SaveThread();
    for (int i = 0; i < NTHREADS; i++) {
        workers[i] = (worker){i, shared, &start};
        CHECK(pthread_create(&threads[i], NULL, fn, &workers[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(threads[i], NULL);
    PyEval_RestoreThread(main_state);
    pthread_barrier_destroy(&start);
    CHECK_INT_EQ(atomic_load(&pyxbuf_thread_failures), 0);
    check_gil_disabled(); /* nothing the workers imported turned it on */
}

/* A worker with a thread state detaches it for a moment, as a long
 * computation would: on a GIL build another thread takes the GIL. */
static void let_others_run(void) {
    Py_BEGIN_ALLOW_THREADS
    sched_yield();
    Py_END_ALLOW_THREADS
}

static const pyxbuf_device dev0 = {PYXBUF_DL_EXT_DEV, 0};

/* ------------------------------------------------------------------------- */
/* (a) Acquisition from 8 threads                                            */
/* ------------------------------------------------------------------------- */

#define ACQUIRE_ROUNDS 20
#define ACQUIRE_PER_ROUND 5

typedef struct producers {
    PyObject *numpy;    /* float64 (6, 8) arange, or NULL without NumPy */
    PyObject *exporter; /* pyxbuf.Exporter int32 (4, 4), items 0..15 */
    PyObject *python;   /* __dlpack__ in Python, over `exporter` */
    PyObject *device;   /* pyxbuf.Exporter on ext_dev:0, bytes 0..63 */
} producers;

/* The path NumPy's arrays take: the struct route on NumPy 2, the classic
 * export on NumPy 1 (whose ABI the route does not read). Set before the
 * threads start. */
static int32_t numpy_path = PYXBUF_PATH_NUMPY;

static void read_numpy(PyObject *a) {
    pyxbuf_view v;
    if (pyxbuf_get(a, &v, PyBUF_RECORDS_RO) != 0) {
        PyErr_Print();
        TCHECK(0);
        return;
    }
    TCHECK(v.path == numpy_path && v.base.ndim == 2 && v.base.shape[0] == 6 &&
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
    TCHECK(pyxbuf_copy_to_host(&v, host, sizeof host) == 0); /* detaches inside */
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

/* A producer whose __dlpack__ runs bytecode before delegating: with a tiny
 * switch interval the GIL changes hands inside acquisitions (GIL builds);
 * free-threaded, eight threads run the bytecode at once. */
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

TEST_CASE(acquisition_from_8_threads) {
    pyxbuf_error err;
    CHECK(pyxbuf_emulated_register(&err) == 0);
    int64_t live = pyxbuf_emulated_live_allocations();
    producers p = {0};
    p.numpy = py_eval("__import__('numpy').arange(48, dtype='float64').reshape(6, 8)");
    PyObject *major = py_eval("int(__import__('numpy').__version__.split('.')[0])");
    if (major != NULL && PyLong_AsLong(major) < 2) numpy_path = PYXBUF_PATH_CLASSIC;
    Py_XDECREF(major);
    PyErr_Clear();
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
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), live);
}

/* ------------------------------------------------------------------------- */
/* (b) Borrows of overlapping memory: tracked NumPy arrays, the registry's   */
/*     table, an exporter's own counter                                      */
/* ------------------------------------------------------------------------- */

/* A NumPy array of 256 bytes in four 64-byte segments (ledger slots 0..3) and
 * a 64-byte pyxbuf exporter (slot 4). Requests on the array cover overlapping
 * runs of segments, through NumPy views of several shapes and a memoryview
 * (different objects over the same bytes: the registry keys grants by
 * address) or through the registry's table directly; the exporter decides
 * with its own borrow counter, and also hands out plain views.
 *
 * The ledger: a holder counts itself into the slots it covers after the
 * grant and out before the release, so a conflicting count seen beside its
 * own means pyxbuf granted both at once.
 *
 * Each slot starts with a uint64 that exclusive holders increment by a load,
 * a pause and a store: two writers at once would lose an increment, so at
 * the end each slot's counter must equal its exclusive grants. */
#define SEGMENTS 4
#define SEGMENT_BYTES 64
#define EXPORTER_SLOT SEGMENTS
#define SLOTS (SEGMENTS + 1)
#define COUNTER_BYTES sizeof(uint64_t)
#define BORROW_ROUNDS 120

static const int spans[][2] = {{0, 2}, {1, 3}, {2, 4}, {0, 4}, {3, 4}, {0, 1}, {1, 2}};
#define NSPANS ((int)(sizeof spans / sizeof *spans))
#define WHOLE_SPAN 3 /* spans[3]: all four segments */

/* The objects over bytes [lo, hi) of the array `a`. */
static const char *const forms[] = {"a[lo:hi]", "a[lo:hi][::-1]", "a[lo:hi].view('<u8')",
                                    "a[lo:hi].reshape(-1, 16)", "memoryview(a)[lo:hi]"};
#define NFORMS ((int)(sizeof forms / sizeof *forms))

/* What a view holds (the ledger's kinds), and what a request goes through. */
enum { SHARED, EXCLUSIVE, PLAIN_R, PLAIN_W, KINDS };
enum { ON_ARRAY, ON_TABLE, ON_EXPORTER, TARGETS };
static const char *const kind_names[KINDS] = {"shared", "exclusive", "plain read-only",
                                              "plain writable"};

/* Never live at once over common bytes: an exclusive borrow and anything; a
 * shared borrow and a writable plain view. */
static int conflict(int a, int b) {
    return a == EXCLUSIVE || b == EXCLUSIVE || (a == SHARED && b == PLAIN_W) ||
           (a == PLAIN_W && b == SHARED);
}

typedef struct borrow_state {
    PyObject *array; /* numpy.zeros(256, uint8) */
    unsigned char *memory;
    PyObject *views[NSPANS][NFORMS];
    PyObject *exporter; /* pyxbuf.Exporter "B" (64,) */
    unsigned char *exporter_memory;
    const pyxbuf_shared_api *api;
    int64_t registry_live;             /* borrows live before the threads */
    atomic_int live[SLOTS][KINDS];     /* the ledger */
    atomic_long exclusive_grants[SLOTS];
    atomic_long granted[TARGETS][KINDS];
    atomic_long refused[TARGETS][KINDS]; /* by the kind asked for */
} borrow_state;

static unsigned char *slot_bytes(const borrow_state *s, int g) {
    return g == EXPORTER_SLOT ? s->exporter_memory : s->memory + g * SEGMENT_BYTES;
}

/* Count a grant of `kind` into slots [lo, hi); check it conflicts with no one.
 * A borrow the exporter granted TRACKED (plain views it cannot stop were
 * live) promises only that no other borrower conflicts: `borrowers_only`. */
static void hold(borrow_state *s, int target, int lo, int hi, int kind, int borrowers_only) {
    for (int g = lo; g < hi; g++) {
        atomic_fetch_add(&s->live[g][kind], 1);
        for (int k = 0; k < (borrowers_only ? PLAIN_R : KINDS); k++) {
            int others = atomic_load(&s->live[g][k]) - (k == kind);
            if (conflict(kind, k) && others > 0) {
                fprintf(stderr, "ledger: slot %d granted %s while %d %s live\n", g,
                        kind_names[kind], others, kind_names[k]);
                atomic_fetch_add(&pyxbuf_thread_failures, 1);
            }
        }
        /* Writers only: a tracked exclusive grant beside plain readers does not write. */
        if (kind == EXCLUSIVE && !borrowers_only) atomic_fetch_add(&s->exclusive_grants[g], 1);
    }
    atomic_fetch_add(&s->granted[target][kind], 1);
}

static void unhold(borrow_state *s, int lo, int hi, int kind) {
    for (int g = lo; g < hi; g++) atomic_fetch_sub(&s->live[g][kind], 1);
}

static size_t checksum(const borrow_state *s, int lo, int hi) {
    size_t sum = 0;
    for (int g = lo; g < hi; g++) {
        const unsigned char *p = slot_bytes(s, g);
        size_t at = (size_t)g * SEGMENT_BYTES; /* weights by position: moved bytes count */
        for (size_t i = 0; i < SEGMENT_BYTES; i++) sum += p[i] * (at + i + 1);
    }
    return sum;
}

/* What a holder does with slots [lo, hi) while `pause` lets the others run:
 * an exclusive one increments each slot's counter non-atomically across the
 * pause and finds the mark it wrote intact; every holder finds the bytes
 * unchanged across the pause. */
static void use_memory(borrow_state *s, int lo, int hi, int exclusive, unsigned char mark,
                       void (*pause)(void)) {
    uint64_t counts[SLOTS] = {0};
    for (int g = lo; exclusive && g < hi; g++) {
        memcpy(&counts[g], slot_bytes(s, g), COUNTER_BYTES);
        memset(slot_bytes(s, g) + COUNTER_BYTES, mark, SEGMENT_BYTES - COUNTER_BYTES);
    }
    size_t before = checksum(s, lo, hi);
    pause();
    TCHECK(checksum(s, lo, hi) == before);
    for (int g = lo; exclusive && g < hi; g++) {
        unsigned char *p = slot_bytes(s, g);
        size_t intact = 0;
        for (size_t i = COUNTER_BYTES; i < SEGMENT_BYTES; i++) intact += p[i] == mark;
        TCHECK(intact == SEGMENT_BYTES - COUNTER_BYTES);
        counts[g]++;
        memcpy(p, &counts[g], COUNTER_BYTES);
    }
}

static void no_gil_pause(void) { sched_yield(); }

/* A request through pyxbuf_get: the object, the slots it covers, the kind. */
typedef struct request {
    PyObject *obj;
    int target, lo, hi, kind; /* kind PLAIN_R: a read-only plain request */
    int32_t flags;
} request;

/* Round r of worker i: odd rounds on the exporter (shared, exclusive, plain
 * read-only and plain writable requests in turn: the first `exporter_kinds`
 * of them), even ones on a view of the array (one in three exclusive). */
static request pick(const borrow_state *s, int i, int r, int exporter_kinds) {
    static const int32_t flags[KINDS] = {PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED,
                                         PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE,
                                         PyBUF_RECORDS_RO, PyBUF_RECORDS};
    request q;
    if (r % 2) {
        q = (request){s->exporter, ON_EXPORTER, EXPORTER_SLOT, SLOTS, (r / 2 + i) % exporter_kinds,
                      0};
    } else {
        int k = (r * 3 + i) % NSPANS;
        q = (request){s->views[k][(r / 2 + i) % NFORMS], ON_ARRAY, spans[k][0], spans[k][1],
                      (r + i) % 3 == 0 ? EXCLUSIVE : SHARED, 0};
    }
    q.flags = flags[q.kind];
    return q;
}

/* The first byte a view spans and the one after its last (by its shape and
 * strides, reversed views too). */
static const unsigned char *view_span(const pyxbuf_view *v, const unsigned char **end) {
    Py_ssize_t first = 0, last = v->base.itemsize;
    for (int d = 0; d < v->base.ndim; d++) {
        Py_ssize_t extent = (v->base.shape[d] - 1) * v->base.strides[d];
        if (extent < 0) first += extent;
        else last += extent;
    }
    const unsigned char *buf = v->base.buf;
    *end = buf + last;
    return buf + first;
}

/* The kind a granted view holds, checked against the request: the view spans
 * exactly the slots the ledger counts; tracked grants on the array, the
 * exporter's own on it; a plain view is writable unless handed out read-only
 * (a shared borrow was live). */
static int granted_kind(const borrow_state *s, const request *q, const pyxbuf_view *v) {
    int32_t tracked = q->target == ON_ARRAY ? PYXBUF_EXT_TRACKED : 0;
    /* The exporter grants tracked while plain views are live (issue 38). */
    if (q->target == ON_EXPORTER) tracked = v->ext_flags & PYXBUF_EXT_TRACKED;
    const unsigned char *end = NULL, *start = view_span(v, &end);
    TCHECK(start == slot_bytes(s, q->lo) && end == start + (q->hi - q->lo) * SEGMENT_BYTES);
    switch (q->kind) {
    case SHARED:
        TCHECK(v->ext_flags == (tracked | PYXBUF_EXT_SHARED) && v->base.readonly);
        return SHARED;
    case EXCLUSIVE:
        TCHECK(v->ext_flags == (tracked | PYXBUF_EXT_EXCLUSIVE) && !v->base.readonly);
        return EXCLUSIVE;
    case PLAIN_W: TCHECK(v->ext_flags == 0 && !v->base.readonly); return PLAIN_W;
    default: TCHECK(v->ext_flags == 0); return v->base.readonly ? PLAIN_R : PLAIN_W;
    }
}

/* Whether the exporter granted this borrow tracked (plain views were live). */
static int exporter_tracked(const request *q, const pyxbuf_view *v) {
    return q->target == ON_EXPORTER && (v->ext_flags & PYXBUF_EXT_TRACKED) != 0;
}

/* A refused request: BufferError; a read-only plain view is refused only
 * while an exclusive borrow is live. */
static void count_refusal(borrow_state *s, const request *q) {
    TCHECK(PyErr_ExceptionMatches(PyExc_BufferError));
    if (q->kind == PLAIN_R) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *str = value ? PyObject_Str(value) : NULL;
        const char *message = str ? PyUnicode_AsUTF8(str) : NULL;
        TCHECK(message != NULL && strstr(message, "an exclusive borrow is live") != NULL);
        Py_XDECREF(str);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    PyErr_Clear();
    atomic_fetch_add(&s->refused[q->target][q->kind], 1);
}

/* Borrows of everything: the whole array (through the form `j`) and the
 * exporter; `kind` SHARED or EXCLUSIVE. */
static int32_t borrow_flags(int kind) {
    return kind == EXCLUSIVE ? PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE
                             : PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED;
}

static request whole_array(const borrow_state *s, int j, int kind) {
    return (request){s->views[WHOLE_SPAN][j % NFORMS], ON_ARRAY, 0, SEGMENTS, kind,
                     borrow_flags(kind)};
}

static request whole_exporter(const borrow_state *s, int kind) {
    return (request){s->exporter, ON_EXPORTER, EXPORTER_SLOT, SLOTS, kind, borrow_flags(kind)};
}

/* One request with a thread state attached: 1 when granted (and used). */
static int borrow_once(borrow_state *s, const request *q, unsigned char mark) {
    PyGILState_STATE gil = PyGILState_Ensure();
    pyxbuf_view v;
    int granted = pyxbuf_get(q->obj, &v, q->flags) == 0;
    if (granted) {
        int kind = granted_kind(s, q, &v);
        int beside_plain = exporter_tracked(q, &v);
        hold(s, q->target, q->lo, q->hi, kind, beside_plain);
        /* A tracked exclusive grant beside plain readers does not write:
         * they check that the bytes stay (what the grant cannot promise). */
        use_memory(s, q->lo, q->hi, kind == EXCLUSIVE && !beside_plain, mark, let_others_run);
        unhold(s, q->lo, q->hi, kind);
        pyxbuf_release(&v);
    } else {
        count_refusal(s, q);
        let_others_run();
    }
    PyGILState_Release(gil);
    return granted;
}

/* Evaluate `granted` (1 when granted) until the other threads let go. The
 * bound makes a grant that is never released a failure, not a hang. */
#define UNTIL_GRANTED(granted)                                                 \
    do {                                                                       \
        long refusals_ = 0;                                                    \
        while (!(granted) && ++refusals_ < 1000000) continue;                  \
        TCHECK(refusals_ < 1000000);                                           \
    } while (0)

/* Workers 0..3: pyxbuf_get with a thread state attached. Each ends with a
 * shared and an exclusive grant of the whole array and of the exporter,
 * asked for until the others let go: under contention one kind may starve
 * for a whole run (readers starve writers, or a writer holds everything
 * while the others wait), but never to the end. */
static void borrow_attached(worker *w, borrow_state *s) {
    unsigned char mark = (unsigned char)(w->index + 1);
    for (int round = 0; round < rounds(BORROW_ROUNDS); round++) {
        request q = pick(s, w->index, round, KINDS);
        borrow_once(s, &q, mark);
    }
    for (int kind = SHARED; kind <= EXCLUSIVE; kind++) {
        request array = whole_array(s, w->index, kind), exporter = whole_exporter(s, kind);
        UNTIL_GRANTED(borrow_once(s, &array, mark));
        UNTIL_GRANTED(borrow_once(s, &exporter, mark));
    }
}

/* One request through the shared table's functions, without a thread state,
 * for the array's segments [lo, hi): 1 when granted (and used). */
static int table_once(borrow_state *s, int lo, int hi, int kind, unsigned char mark) {
    char why[256];
    pyxbuf_borrow_range range = {PYXBUF_DL_CPU, 0, (uint64_t)(uintptr_t)slot_bytes(s, lo),
                                 (uint64_t)(uintptr_t)(s->memory + hi * SEGMENT_BYTES)};
    int64_t token = 0;
    int rc = s->api->borrow_acquire(&range, kind == EXCLUSIVE, &token, why, sizeof why);
    if (rc == 0) {
        TCHECK(token != 0);
        hold(s, ON_TABLE, lo, hi, kind, 0);
        use_memory(s, lo, hi, kind == EXCLUSIVE, mark, no_gil_pause);
        unhold(s, lo, hi, kind);
        s->api->borrow_release(token);
    } else {
        TCHECK(rc == PYXBUF_EBORROW && strstr(why, "borrow of [0x") != NULL);
        atomic_fetch_add(&s->refused[ON_TABLE][kind], 1);
    }
    sched_yield(); /* between requests too: the attached workers get their turns */
    return rc == 0;
}

/* Workers 4..7: the table, on overlapping spans, then a shared and an
 * exclusive grant of the whole array each, asked for until granted. */
static void borrow_detached(worker *w, borrow_state *s) {
    unsigned char mark = (unsigned char)(w->index + 1);
    for (int round = 0; round < rounds(BORROW_ROUNDS * 2); round++) {
        int k = (round * 5 + w->index) % NSPANS;
        table_once(s, spans[k][0], spans[k][1], (round + w->index) % 3 == 0 ? EXCLUSIVE : SHARED,
                   mark);
    }
    UNTIL_GRANTED(table_once(s, 0, SEGMENTS, SHARED, mark));
    UNTIL_GRANTED(table_once(s, 0, SEGMENTS, EXCLUSIVE, mark));
}

static void *borrow_worker(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->start);
    if (w->index < NTHREADS / 2)
        borrow_attached(w, w->shared);
    else
        borrow_detached(w, w->shared);
    return NULL;
}

/* The array, its views over every span in every form, the exporter. NumPy is
 * a test dependency: without it the test fails rather than skips. */
static int borrow_setup(borrow_state *s) {
    int failures = pyxbuf_test_failures;
    s->array = py_eval("__import__('numpy').zeros(256, dtype='uint8')");
    const Py_ssize_t shape[1] = {SEGMENT_BYTES};
    s->exporter = pyxbuf_exporter_new("B", 1, shape, 0, NULL);
    s->api = pyxbuf_shared_api_get(); /* needs a thread state the first time */
    CHECK(s->array != NULL && s->exporter != NULL && s->api != NULL);
    if (s->array == NULL || s->exporter == NULL || s->api == NULL) return -1;
    s->exporter_memory = pyxbuf_exporter_data(s->exporter);
    pyxbuf_view v;
    if (pyxbuf_get(s->array, &v, PyBUF_RECORDS_RO) != 0) {
        PyErr_Print();
        CHECK(0);
        return -1;
    }
    s->memory = v.base.buf; /* the array lives until the end of the test */
    pyxbuf_release(&v);
    for (int j = 0; j < NFORMS; j++) {
        char expr[96];
        snprintf(expr, sizeof expr, "lambda a, lo, hi: %s", forms[j]);
        PyObject *make = py_eval(expr);
        for (int k = 0; k < NSPANS; k++) {
            s->views[k][j] = make ? PyObject_CallFunction(make, "Onn", s->array,
                                                          (Py_ssize_t)spans[k][0] * SEGMENT_BYTES,
                                                          (Py_ssize_t)spans[k][1] * SEGMENT_BYTES)
                                  : NULL;
            CHECK(s->views[k][j] != NULL);
            if (s->views[k][j] == NULL) PyErr_Print();
        }
        Py_XDECREF(make);
    }
    s->registry_live = s->api->borrow_live();
    return pyxbuf_test_failures == failures ? 0 : -1;
}

/* After the threads: the ledger is empty, the registry holds what it held
 * before, the exporter counts no view, no exclusive holder lost an increment,
 * and exclusive borrows of the whole array and the exporter are grantable. */
static void borrow_finish(borrow_state *s) {
    for (int g = 0; g < SLOTS; g++) {
        for (int k = 0; k < KINDS; k++) CHECK_INT_EQ(atomic_load(&s->live[g][k]), 0);
        uint64_t counter;
        memcpy(&counter, slot_bytes(s, g), COUNTER_BYTES);
        CHECK_INT_EQ(counter, atomic_load(&s->exclusive_grants[g]));
    }
    CHECK_INT_EQ(s->api->borrow_live(), s->registry_live);
    PyObject *counts = PyObject_GetAttrString(s->exporter, "borrows");
    PyObject *none = py_eval("{'views': 0, 'writable': 0, 'shared': 0, 'exclusive': 0}");
    CHECK(counts != NULL && none != NULL && PyObject_RichCompareBool(counts, none, Py_EQ) == 1);
    Py_XDECREF(none);
    Py_XDECREF(counts);
    pyxbuf_view v;
    CHECK(pyxbuf_get(s->array, &v, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE) == 0);
    CHECK(v.ext_flags == (PYXBUF_EXT_TRACKED | PYXBUF_EXT_EXCLUSIVE));
    pyxbuf_release(&v);
    CHECK(pyxbuf_get(s->exporter, &v, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE) == 0);
    CHECK(v.ext_flags == PYXBUF_EXT_EXCLUSIVE);
    pyxbuf_release(&v);
    CHECK_INT_EQ(s->api->borrow_live(), s->registry_live);
}

static void borrow_teardown(borrow_state *s) {
    for (int k = 0; k < NSPANS; k++)
        for (int j = 0; j < NFORMS; j++) Py_CLEAR(s->views[k][j]);
    Py_CLEAR(s->exporter);
    Py_CLEAR(s->array);
}

static long granted(borrow_state *s, int target, int kind) {
    return atomic_load(&s->granted[target][kind]);
}

static long refused(borrow_state *s, int target, int kind) {
    return atomic_load(&s->refused[target][kind]);
}

/* Granted/refused by kind asked for (plain: read-only requests granted
 * read-only, then writable ones), e.g. "array shared 120/20 exclusive 9/31". */
static void print_counts(const char *test, borrow_state *s) {
    static const char *const targets[TARGETS] = {"array", "table", "exporter"};
    fprintf(stderr, "%s (granted/refused):", test);
    for (int t = 0; t < TARGETS; t++) {
        if (granted(s, t, SHARED) + refused(s, t, SHARED) == 0) continue; /* not asked */
        fprintf(stderr, " %s shared %ld/%ld exclusive %ld/%ld", targets[t], granted(s, t, SHARED),
                refused(s, t, SHARED), granted(s, t, EXCLUSIVE), refused(s, t, EXCLUSIVE));
        if (t == ON_EXPORTER)
            fprintf(stderr, " plain %ld+%ld/%ld+%ld", granted(s, t, PLAIN_R),
                    granted(s, t, PLAIN_W), refused(s, t, PLAIN_R), refused(s, t, PLAIN_W));
    }
    fprintf(stderr, "\n");
}

TEST_CASE(borrows_from_8_threads_never_conflict) {
    static borrow_state s; /* zero: every count starts at 0 */
    if (borrow_setup(&s) == 0) {
        run_threads(borrow_worker, &s);
        print_counts("borrows", &s);
        /* Contention happened: requests met conflicting grants on every
         * target; exclusive holders kept readers out and were kept out. A
         * run whose threads took turns fails here rather than passing
         * untested. (Which kind is refused where depends on the schedule.) */
        long shared_refused = 0, exclusive_refused = 0;
        for (int t = 0; t < TARGETS; t++) {
            CHECK(granted(&s, t, SHARED) >= NTHREADS / 2);
            CHECK(granted(&s, t, EXCLUSIVE) >= NTHREADS / 2);
            long n = 0;
            for (int k = 0; k < KINDS; k++) n += refused(&s, t, k);
            CHECK(n > 0);
            shared_refused += refused(&s, t, SHARED);
            exclusive_refused += refused(&s, t, EXCLUSIVE);
        }
        CHECK(shared_refused > 0 && exclusive_refused > 0);
        CHECK(granted(&s, ON_EXPORTER, PLAIN_W) > 0);
        borrow_finish(&s);
    }
    borrow_teardown(&s);
}

/* ------------------------------------------------------------------------- */
/* (c) Views acquired on one thread, released on another                     */
/* ------------------------------------------------------------------------- */

/* Workers 0..3 acquire views holding borrows (as in (b): tracked NumPy views,
 * the exporter's shared, exclusive and plain views) and hand them through a
 * queue to workers 4..7, which use the memory without a thread state, then
 * attach one and release the view. A grant belongs to the view, not to the
 * thread: it keeps excluding others until released, wherever that is. The
 * queue holds several views, so acquirers meet grants held for other threads. */
#define HANDOFF_ROUNDS 80
#define QUEUE_CAP 6
#define HANDOFF_EXPORTER_KINDS 3 /* plain requests read-only: writable or not by what is live */

typedef struct handed {
    pyxbuf_view view; /* on the heap: a view may point into itself */
    request q;
    int kind;
    pthread_t acquirer;
} handed;

typedef struct handoff {
    borrow_state s;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    handed *queue[QUEUE_CAP];
    int head, count, acquirers_left;
    atomic_long released;
} handoff;

/* Waits while the queue is full, with no thread state attached: a releaser
 * attaches one meanwhile (on a GIL build, takes the GIL). */
static void push(handoff *h, handed *x) {
    pthread_mutex_lock(&h->lock);
    while (h->count == QUEUE_CAP) pthread_cond_wait(&h->changed, &h->lock);
    h->queue[(h->head + h->count++) % QUEUE_CAP] = x;
    pthread_cond_broadcast(&h->changed);
    pthread_mutex_unlock(&h->lock);
}

/* The next view, or NULL once the queue is empty and the acquirers are done. */
static handed *pop(handoff *h) {
    pthread_mutex_lock(&h->lock);
    while (h->count == 0 && h->acquirers_left > 0) pthread_cond_wait(&h->changed, &h->lock);
    handed *x = NULL;
    if (h->count > 0) {
        x = h->queue[h->head];
        h->head = (h->head + 1) % QUEUE_CAP;
        h->count--;
        pthread_cond_broadcast(&h->changed);
    }
    pthread_mutex_unlock(&h->lock);
    return x;
}

/* One request on this thread: a granted view goes into the queue (1). */
static int hand_over_once(handoff *h, const request *q) {
    handed *x = malloc(sizeof *x);
    TCHECK(x != NULL);
    if (x == NULL) return 1;
    PyGILState_STATE gil = PyGILState_Ensure();
    int granted = pyxbuf_get(q->obj, &x->view, q->flags) == 0;
    if (granted) {
        x->q = *q;
        x->kind = granted_kind(&h->s, q, &x->view);
        x->acquirer = pthread_self();
        hold(&h->s, q->target, q->lo, q->hi, x->kind, exporter_tracked(q, &x->view));
    } else {
        count_refusal(&h->s, q);
    }
    PyGILState_Release(gil);
    if (granted) {
        push(h, x);
    } else {
        free(x);
        sched_yield();
    }
    return granted;
}

/* Workers 0..3. Each ends by handing over shared and exclusive views of the
 * whole array and of the exporter, asked for until the releasers have let go
 * of what conflicts. */
static void acquire_and_hand_over(worker *w, handoff *h) {
    for (int round = 0; round < rounds(HANDOFF_ROUNDS); round++) {
        request q = pick(&h->s, w->index, round, HANDOFF_EXPORTER_KINDS);
        hand_over_once(h, &q);
    }
    for (int kind = SHARED; kind <= EXCLUSIVE; kind++) {
        request array = whole_array(&h->s, w->index, kind);
        request exporter = whole_exporter(&h->s, kind);
        UNTIL_GRANTED(hand_over_once(h, &array));
        UNTIL_GRANTED(hand_over_once(h, &exporter));
    }
    pthread_mutex_lock(&h->lock);
    h->acquirers_left--;
    pthread_cond_broadcast(&h->changed);
    pthread_mutex_unlock(&h->lock);
}

static void release_handed_over(worker *w, handoff *h) {
    handed *x;
    while ((x = pop(h)) != NULL) {
        TCHECK(!pthread_equal(x->acquirer, pthread_self()));
        use_memory(&h->s, x->q.lo, x->q.hi, x->kind == EXCLUSIVE && !exporter_tracked(&x->q, &x->view),
                   (unsigned char)(w->index + 1), no_gil_pause);
        unhold(&h->s, x->q.lo, x->q.hi, x->kind);
        PyGILState_STATE gil = PyGILState_Ensure();
        TCHECK(pyxbuf_view_is_acquired(&x->view));
        pyxbuf_release(&x->view);
        TCHECK(!pyxbuf_view_is_acquired(&x->view));
        PyGILState_Release(gil);
        atomic_fetch_add(&h->released, 1);
        free(x);
    }
}

static void *handoff_worker(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->start);
    if (w->index < NTHREADS / 2)
        acquire_and_hand_over(w, w->shared);
    else
        release_handed_over(w, w->shared);
    return NULL;
}

TEST_CASE(views_released_on_another_thread) {
    static handoff h; /* zero: every count starts at 0 */
    pthread_mutex_init(&h.lock, NULL);
    pthread_cond_init(&h.changed, NULL);
    h.acquirers_left = NTHREADS / 2;
    if (borrow_setup(&h.s) == 0) {
        run_threads(handoff_worker, &h);
        print_counts("handed over", &h.s);
        long grants = 0;
        for (int t = 0; t < TARGETS; t++)
            for (int k = 0; k < KINDS; k++) grants += granted(&h.s, t, k);
        CHECK_INT_EQ(atomic_load(&h.released), grants); /* every view, once */
        CHECK_INT_EQ(h.count, 0);
        /* Both kinds were handed over on both targets, and views held for
         * another thread kept out conflicting requests. */
        for (int t = ON_ARRAY; t <= ON_EXPORTER; t += ON_EXPORTER - ON_ARRAY) {
            CHECK(granted(&h.s, t, SHARED) >= NTHREADS / 2);
            CHECK(granted(&h.s, t, EXCLUSIVE) >= NTHREADS / 2);
            long n = 0;
            for (int k = 0; k < KINDS; k++) n += refused(&h.s, t, k);
            CHECK(n > 0);
        }
        borrow_finish(&h.s);
    }
    borrow_teardown(&h.s);
    pthread_cond_destroy(&h.changed);
    pthread_mutex_destroy(&h.lock);
}

/* ------------------------------------------------------------------------- */
/* (d) The device registry and the emulated device, without a thread state */
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
    int32_t a_id = index % PYXBUF_EMULATED_MAX_DEVICES;
    int32_t b_id = (index + 1) % PYXBUF_EMULATED_MAX_DEVICES;
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
    TCHECK(pyxbuf_emulated_register(&err) == 0);
    pyxbuf_backend td, b;
    TCHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &td, &err) == 0);
    int64_t stream = 0;
    TCHECK(pyxbuf_emulated_stream_create(w->index % PYXBUF_EMULATED_MAX_DEVICES, &stream, &err) ==
           0);
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
    TCHECK(pyxbuf_emulated_stream_destroy(stream, &err) == 0);
    return NULL;
}

TEST_CASE(device_registry_from_8_threads) {
    /* No registry call before the threads: they race its initialisation. */
    run_threads(device_worker, NULL);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), 0);
    pyxbuf_backend_unregister(FAKE_TYPE);
    pyxbuf_backend_unregister(FAKE_TYPE + 1);
    pyxbuf_backend b;
    CHECK(pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) == 0);
    CHECK_STR_EQ(b.name, "pyxbuf.emulated");
}

/* ------------------------------------------------------------------------- */
/* (e) Format parsing against the custom-type registry, no thread state    */
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

PYTHON_TEST_MAIN(TEST_ENTRY(acquisition_from_8_threads),
                 TEST_ENTRY(borrows_from_8_threads_never_conflict),
                 TEST_ENTRY(views_released_on_another_thread),
                 TEST_ENTRY(device_registry_from_8_threads),
                 TEST_ENTRY(format_registry_from_8_threads))
