/* test_emulated.c -- the guarded emulated device's own rules
 * (c/device/emulated*.c): what a forked child's device memory holds while
 * the parent's streams keep running, and one emulated device per process
 * when two copies of it register at once. Linked against the shared
 * library, with an embedded interpreter (the copies meet through it). */
#include "pyxbuf.h"
#include "device/emulated.h"
#include "device/emulated_internal.h" /* the copies' table and their lock's address */
#include "python_fixture.h"
#include "emulated_fixture.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

/* ------------------------------------------------------------------------- */
/* fork(): the child's device memory is the parent's as it was at fork()      */
/* ------------------------------------------------------------------------- */

#define SPAN (16 * MIB) /* long enough that copying it overlaps the next write */
#define FORKS 10

/* Round v writes pattern(v) into every byte of the span (never the poison). */
static unsigned char pattern(unsigned v) { return (unsigned char)(v % 200 + 1); }

static atomic_uint enqueued; /* the round whose write was last queued (or is about to be) */
static atomic_int keep_writing;
static unsigned at_fork; /* `enqueued` when fork() happened; the child inherits it */

/* Registered before the emulated device's fork rules, so it runs after its
 * prepare handler: with the device's lock held, no write runs, and the
 * device holds pattern(at_fork - 1) or pattern(at_fork). */
static void note_fork(void) { at_fork = atomic_load(&enqueued); }

typedef struct writer {
    pyxbuf_backend b;
    void *dev;
    int64_t stream;
} writer;

/* The parent's "kernels": each round queues a write of the whole span on
 * its stream and runs it, one after another, until told to stop. */
static void *write_rounds(void *p) {
    writer *w = p;
    unsigned char *bytes = malloc(SPAN);
    pyxbuf_error err;
    for (unsigned v = 1; bytes != NULL && atomic_load(&keep_writing); v++) {
        memset(bytes, pattern(v), SPAN);
        atomic_store(&enqueued, v);
        if (pyxbuf_emulated_enqueue_write(0, w->stream, w->dev, bytes, SPAN, &err) != 0 ||
            w->b.synchronize(w->b.ctx, 0, w->stream, &err) != 0) {
            fprintf(stderr, "write_rounds: %s\n", err.message);
            break;
        }
    }
    free(bytes);
    return NULL;
}

/* What the child found: 0 a whole round, the round of fork(), unchanged;
 * else which of those it was not. */
enum { SAME = 0, UNREADABLE = 1, TORN = 2, NOT_AT_FORK = 3, CHANGED = 4 };

static int child_checks(const pyxbuf_backend *b, void *dev) {
    static unsigned char first[SPAN], again[SPAN];
    pyxbuf_error err;
    /* No stream is run: the copy reads the memory as it is. */
    if (b->copy_to_host(b->ctx, 0, first, dev, SPAN, PYXBUF_STREAM_NONE, &err) != 0)
        return UNREADABLE;
    for (size_t k = 1; k < SPAN; k++)
        if (first[k] != first[0]) return TORN;
    if (first[0] != pattern(at_fork) && first[0] != pattern(at_fork - 1)) return NOT_AT_FORK;
    usleep(100 * 1000); /* the parent's writer runs meanwhile */
    if (b->copy_to_host(b->ctx, 0, again, dev, SPAN, PYXBUF_STREAM_NONE, &err) != 0)
        return UNREADABLE;
    return memcmp(first, again, SPAN) == 0 ? SAME : CHANGED;
}

/* Review finding (a): the child copied the parent's device memory in its
 * after-fork handler, reading the memfd both share while the parent's
 * writer, free again once the parent's lock was released, wrote the next
 * round into it: torn copies. */
TEST_CASE(a_forked_child_gets_the_memory_of_the_moment_of_fork) {
    pthread_atfork(note_fork, NULL, NULL); /* before the device's: see note_fork */
    static writer w;
    w.b = emulated();
    pyxbuf_error err;
    CHECK(w.b.alloc(w.b.ctx, 0, SPAN, &w.dev, &err) == 0);
    CHECK(pyxbuf_emulated_stream_create(0, &w.stream, &err) == 0);
    static unsigned char start[SPAN];
    memset(start, pattern(0), SPAN);
    CHECK(w.b.copy_from_host(w.b.ctx, 0, w.dev, start, SPAN, PYXBUF_STREAM_NONE, &err) == 0);
    atomic_store(&keep_writing, 1);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, write_rounds, &w) == 0);
    int found[5] = {0};
    for (int i = 0; i < FORKS; i++) {
        while (atomic_load(&enqueued) < (unsigned)(2 * i + 1)) usleep(1000); /* it writes */
        /* The verdict comes through a pipe: a launcher may replace the exit
         * status (valgrind's --error-exitcode counts the parent's errors). */
        int verdict[2];
        CHECK(pipe(verdict) == 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            unsigned char code = (unsigned char)child_checks(&w.b, w.dev);
            _exit(write(verdict[1], &code, 1) == 1 ? 0 : 1);
        }
        close(verdict[1]);
        unsigned char code = UNREADABLE;
        if (read(verdict[0], &code, 1) != 1 || code > CHANGED) code = UNREADABLE;
        close(verdict[0]);
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status));
        found[code]++;
    }
    atomic_store(&keep_writing, 0);
    pthread_join(t, NULL);
    fprintf(stderr, "%d forks: %d as at fork, %d unreadable, %d torn, %d of another round, "
            "%d changed later\n", FORKS, found[SAME], found[UNREADABLE], found[TORN],
            found[NOT_AT_FORK], found[CHANGED]);
    CHECK_INT_EQ(found[SAME], FORKS);
    CHECK(pyxbuf_emulated_stream_destroy(w.stream, &err) == 0);
    CHECK(w.b.free(w.b.ctx, 0, w.dev, &err) == 0);
    CHECK_INT_EQ(pyxbuf_emulated_live_allocations(), 0);
}

/* ------------------------------------------------------------------------- */
/* Two copies registering at once                                            */
/* ------------------------------------------------------------------------- */

/* Another copy of the emulated device, as a second extension linking
 * emulated.c has one: its helpers' table (the registered backend's ctx;
 * only the fields this test needs are set) and its backend, whose functions
 * are this copy's (none is called). It registers as every copy does: under
 * the registration lock the copies share (its own, published, when no copy
 * has published one), only when no copy's device serves the process. */
static const emulated_api other_api = {.magic = EMULATED_API_MAGIC, .size = sizeof other_api};
static pyxbuf_backend other_backend;
static pthread_mutex_t other_own_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t *other_lock; /* the shared one */
static atomic_int other_registered, go, ready;

/* What the other copy finds at _pyxbuf_shared.EMULATED_REGISTRATION: the
 * lock some copy published there, or its own, published now (this thread
 * holds the GIL). */
static pthread_mutex_t *other_copy_finds_its_lock(void) {
    PyObject *mods = PyImport_GetModuleDict();
    PyObject *shared = PyDict_GetItemString(mods, PYXBUF_SHARED_MODULE); /* borrowed */
    PyObject *fresh = shared ? NULL : PyModule_New(PYXBUF_SHARED_MODULE);
    if (fresh != NULL && PyDict_SetItemString(mods, PYXBUF_SHARED_MODULE, fresh) == 0)
        shared = fresh;
    PyObject *capsule = PyCapsule_New(&other_own_lock, EMULATED_REGISTRATION_CAPSULE, NULL);
    PyObject *dict = shared ? PyModule_GetDict(shared) : NULL; /* borrowed */
    PyObject *found = dict && capsule ? PyObject_CallMethod(dict, "setdefault", "sO",
                                                            EMULATED_REGISTRATION_ATTR, capsule)
                                      : NULL;
    pthread_mutex_t *m = found ? PyCapsule_GetPointer(found, EMULATED_REGISTRATION_CAPSULE) : NULL;
    Py_XDECREF(found);
    Py_XDECREF(capsule);
    Py_XDECREF(fresh);
    CHECK(m != NULL);
    return m ? m : &other_own_lock;
}

/* Wait for the start: spinning, for both threads to leave together, and
 * yielding after a while, for the one not yet running to be scheduled. */
static void start_line(void) {
    atomic_fetch_add(&ready, 1);
    for (int spins = 0; !atomic_load(&go); spins++)
        if (spins > 2000) sched_yield();
}

/* The other copy's pyxbuf_emulated_register, slow between its check and
 * its store (as a thread preempted there is): a copy that registers in that
 * window is replaced by it. */
static atomic_int this_replaced;

static int emulated_serves(void) {
    pyxbuf_backend b;
    return pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &b, NULL) == 0 && b.name != NULL &&
           strcmp(b.name, "pyxbuf.emulated") == 0;
}

static void *other_copy_registers(void *unused) {
    (void)unused;
    start_line();
    pthread_mutex_lock(other_lock);
    if (!emulated_serves()) {
        usleep(50);
        if (emulated_serves()) atomic_store(&this_replaced, 1);
        pyxbuf_error err;
        CHECK(pyxbuf_backend_register(&other_backend, &err) == 0);
        atomic_store(&other_registered, 1);
    }
    pthread_mutex_unlock(other_lock);
    return NULL;
}

static atomic_int this_rc;

static void *this_copy_registers(void *unused) {
    (void)unused;
    start_line();
    pyxbuf_error err;
    atomic_store(&this_rc, pyxbuf_emulated_register(&err));
    return NULL;
}

#define ROUNDS 2000

/* Review finding (b): pyxbuf_emulated_register checked that no copy's device
 * served the process, then registered its own; a second copy doing the same
 * at once could pass the check too and replace the first's backend after
 * the first had handed out memory, stranding it. Each round races this
 * copy's registration against the other's; a copy that registered must be
 * the one that serves. */
TEST_CASE(two_copies_registering_at_once_keep_one_device) {
    pyxbuf_backend mine = emulated(); /* the engine resolved, the lock found */
    other_backend = mine;
    other_backend.ctx = (void *)&other_api;
    other_lock = other_copy_finds_its_lock();
    int stranded = 0, wrong_rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int round = 0; round < ROUNDS; round++) {
        pyxbuf_backend_unregister(PYXBUF_DL_EXT_DEV);
        atomic_store(&go, 0);
        atomic_store(&ready, 0);
        atomic_store(&other_registered, 0);
        atomic_store(&this_replaced, 0);
        pthread_t a, b;
        if (pthread_create(&a, NULL, this_copy_registers, NULL) != 0 ||
            pthread_create(&b, NULL, other_copy_registers, NULL) != 0) {
            wrong_rc++;
            break;
        }
        while (atomic_load(&ready) < 2) sched_yield(); /* both at the start line */
        atomic_store(&go, 1);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        pyxbuf_backend now;
        int present = pyxbuf_backend_get(PYXBUF_DL_EXT_DEV, &now, NULL) == 0;
        wrong_rc += atomic_load(&this_rc) != 0 || !present;
        /* A copy that registered still serves: nobody replaced it. */
        if (present && atomic_load(&other_registered) && now.ctx != (void *)&other_api)
            stranded++;
        stranded += atomic_load(&this_replaced);
    }
    Py_END_ALLOW_THREADS
    fprintf(stderr, "%d rounds: a registered copy's device replaced in %d\n", ROUNDS, stranded);
    CHECK_INT_EQ(stranded, 0);
    CHECK_INT_EQ(wrong_rc, 0);
    pyxbuf_backend_unregister(PYXBUF_DL_EXT_DEV);
}

/* ------------------------------------------------------------------------- */
/* IPC: another process maps the same memory (no copy)                        */
/* ------------------------------------------------------------------------- */

#define SHARED (4 * MIB + 100) /* not a whole number of pages */

/* Whether `p` lies in a mapping of this process that allows no access. */
static int guarded_here(const void *p) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    int guarded = 0;
    while (maps != NULL && fgets(line, sizeof line, maps) != NULL) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && (uintptr_t)p >= lo &&
            (uintptr_t)p < hi)
            guarded = strncmp(perms, "---", 3) == 0;
    }
    if (maps != NULL) fclose(maps);
    return guarded;
}

/* In the child (a process of its own, whose device memory fork() copied):
 * open the parent's handle, check the bytes the parent wrote, write its
 * own at the end, close. 0 when every step held. */
static int child_opens(const pyxbuf_backend *b, const pyxbuf_emulated_ipc_handle *h) {
    pyxbuf_error err;
    void *p = NULL;
    static unsigned char got[SHARED - 8];
    if (pyxbuf_emulated_ipc_open(h, &p, &err) != 0) return 1;
    pyxbuf_device where;
    if (b->pointer_query(b->ctx, p, &where, &err) != 0 || where.device_id != 1) return 2;
    if (b->copy_to_host(b->ctx, 1, got, p, sizeof got, PYXBUF_STREAM_NONE, &err) != 0) return 3;
    for (size_t i = 0; i < sizeof got; i++)
        if (got[i] != pattern((unsigned)i)) return 4;
    if (b->copy_from_host(b->ctx, 1, (char *)p + sizeof got, "child!!", 8, PYXBUF_STREAM_NONE,
                          &err) != 0)
        return 5;
    if (!guarded_here(p)) return 8; /* the host cannot touch it, as the device's own */
    if (pyxbuf_emulated_ipc_close(p, &err) != 0) return 6;
    if (b->pointer_query(b->ctx, p, &where, &err) == 0) return 7; /* closed: gone */
    return 0;
}

TEST_CASE(another_process_opens_the_same_device_memory) {
    pyxbuf_backend b = emulated();
    pyxbuf_error err;
    void *dev = NULL;
    static unsigned char bytes[SHARED];
    for (size_t i = 0; i < SHARED; i++) bytes[i] = pattern((unsigned)i);
    CHECK(b.alloc(b.ctx, 1, SHARED + 1000, &dev, &err) == 0);
    /* A handle of a pointer inside the allocation names the allocation, and
     * the pointer's place in it. */
    CHECK(b.copy_from_host(b.ctx, 1, (char *)dev + 8, bytes, SHARED - 8, PYXBUF_STREAM_NONE,
                           &err) == 0);
    pyxbuf_emulated_ipc_handle h;
    CHECK(pyxbuf_emulated_ipc_export((char *)dev + 8, &h, &err) == 0);
    CHECK_INT_EQ(h.delta, 8);
    CHECK_INT_EQ(h.device_id, 1);
    CHECK_INT_EQ(h.pid, getpid());
    int verdict[2];
    CHECK(pipe(verdict) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        unsigned char code = (unsigned char)child_opens(&b, &h);
        ssize_t w = write(verdict[1], &code, 1);
        _exit(w == 1 ? 0 : 9);
    }
    close(verdict[1]);
    unsigned char code = 99;
    CHECK(read(verdict[0], &code, 1) == 1);
    close(verdict[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_INT_EQ(code, 0);
    /* The child's write landed in this process's memory: one memfd, no copy
     * (its own device memory, which fork() copied, is another file). */
    char tail[8] = {0};
    CHECK(b.copy_to_host(b.ctx, 1, tail, (char *)dev + SHARED, 8, PYXBUF_STREAM_NONE, &err) ==
          0);
    CHECK(memcmp(tail, "child!!", 8) == 0);
    CHECK(b.free(b.ctx, 1, dev, &err) == 0);
}

TEST_CASE(ipc_refusals_name_their_cause) {
    pyxbuf_backend b = emulated();
    pyxbuf_error err;
    void *dev = NULL, *p = NULL;
    static int host;
    CHECK(pyxbuf_emulated_ipc_export(&host, &(pyxbuf_emulated_ipc_handle){0}, &err) ==
          PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "not in a live allocation of this process's emulated device");
    CHECK(b.alloc(b.ctx, 0, 4096, &dev, &err) == 0);
    pyxbuf_emulated_ipc_handle h;
    CHECK(pyxbuf_emulated_ipc_export(dev, &h, &err) == 0);
    CHECK(pyxbuf_emulated_ipc_open(&h, &p, &err) == PYXBUF_EINVAL); /* its own handle */
    CHECK_CONTAINS(err.message, "exported by this process");
    pyxbuf_emulated_ipc_handle bad = h;
    bad.pid = getpid() + 1000000;
    bad.size = (uint64_t)1 << 40;
    CHECK(pyxbuf_emulated_ipc_open(&bad, &p, &err) == PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "is not one pyxbuf_emulated_ipc_export gives");
    bad.size = h.size;
    CHECK(pyxbuf_emulated_ipc_open(&bad, &p, &err) == PYXBUF_EDEVICE); /* no such process */
    CHECK_CONTAINS(err.message, "the exporter must outlive every process that opens its memory");
    CHECK(pyxbuf_emulated_ipc_close(&host, &err) == PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "not memory that pyxbuf_emulated_ipc_open mapped");
    CHECK(b.free(b.ctx, 0, dev, &err) == 0);
}

/* ------------------------------------------------------------------------- */
/* Mapping faults: a real ENOMEM from mmap, under an address-space limit      */
/* ------------------------------------------------------------------------- */

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

/* Address space this process has mapped (statm's first field, in pages). */
static size_t mapped_bytes(void) {
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL && fscanf(f, "%lu", &pages) != 1) pages = 0;
    if (f != NULL) fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Whether an address-space limit makes a fault here: not under a sanitizer
 * or valgrind, whose runtimes map memory of their own as they go (a limit
 * would fail them first, or not bind the program's mmap at all). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define PYXBUF_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PYXBUF_TEST_SANITIZED 1
#endif

static int address_space_limits_work(void) {
#ifdef PYXBUF_TEST_SANITIZED
    return 0;
#else
#ifdef RUNNING_ON_VALGRIND
    if (RUNNING_ON_VALGRIND) return 0;
#endif
    return mapped_bytes() > 0;
#endif
}

/* A soft limit `headroom` bytes above what is mapped now: the next larger
 * mmap fails with ENOMEM. The hard limit stays, so the old one comes back.
 * 0, with the old limit back, where the limit does not bind: qemu-user (the
 * aarch64 run) keeps RLIMIT_AS from the guest; a probe larger than the
 * headroom tells. */
static int limit_address_space(size_t headroom, struct rlimit *old) {
    CHECK(getrlimit(RLIMIT_AS, old) == 0);
    struct rlimit tight = *old;
    tight.rlim_cur = (rlim_t)(mapped_bytes() + headroom);
    if (old->rlim_max != RLIM_INFINITY && old->rlim_max < tight.rlim_cur) {
        fprintf(stderr, "SKIP mapping faults: a hard RLIMIT_AS (ulimit -Hv) below what the "
                        "test maps\n");
        return 0;
    }
    CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
    size_t probe = headroom + 4 * MIB;
    void *p = mmap(NULL, probe, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return 1;
    munmap(p, probe);
    CHECK(setrlimit(RLIMIT_AS, old) == 0);
    fprintf(stderr, "SKIP mapping faults: RLIMIT_AS does not bind here (qemu-user keeps it)\n");
    return 0;
}

/* Run `body` in a forked child; its CHECKs count there, its exit says. */
static void in_child(void (*body)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        body();
        _exit(pyxbuf_test_failures == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

#define UNMAPPED_DEVICE (PYXBUF_EMULATED_MAX_DEVICES - 1) /* no other case here uses it */

/* A device's memory is mapped twice (guarded, and the backend's) at its
 * first use: the second mmap fails, the first is undone, and the device
 * maps when the limit is gone. */
static void device_mapping_fails(void) {
    pyxbuf_backend b = emulated();
    pyxbuf_error err;
    void *p = NULL;
    struct rlimit old;
    size_t before = mapped_bytes();
    if (!limit_address_space(DEVICE_BYTES + DEVICE_BYTES / 2, &old)) return;
    CHECK_INT_EQ(b.alloc(b.ctx, UNMAPPED_DEVICE, 4096, &p, &err), PYXBUF_EDEVICE);
    CHECK_INT_EQ(err.code, PYXBUF_EDEVICE);
    CHECK_CONTAINS(err.message, "emulated: device 3's memory (twice 1073741824 bytes");
    CHECK_CONTAINS(err.message, strerror(ENOMEM));
    CHECK_CONTAINS(err.message, "raise the address-space limit (ulimit -v)");
    CHECK(mapped_bytes() < before + DEVICE_BYTES / 2); /* the first mapping undone */
    CHECK(setrlimit(RLIMIT_AS, &old) == 0);
    CHECK_INT_EQ(b.alloc(b.ctx, UNMAPPED_DEVICE, 4096, &p, &err), 0);
    CHECK_INT_EQ(b.free(b.ctx, UNMAPPED_DEVICE, p, &err), 0);
}

#define IPC_BYTES (64 * MIB)
static pyxbuf_emulated_ipc_handle ipc_handle; /* the parent's, as the child inherits it */

/* Another process's 64 MiB, mapped twice, under a limit of 96 MiB more:
 * the first mapping is made and the second refused; the refusal names the
 * cause and the ways out, the first mapping is undone; opened without the
 * limit. */
static void ipc_mapping_fails(void) {
    pyxbuf_error err;
    void *p = NULL;
    struct rlimit old;
    size_t before = mapped_bytes();
    if (!limit_address_space(96 * MIB, &old)) return;
    CHECK_INT_EQ(pyxbuf_emulated_ipc_open(&ipc_handle, &p, &err), PYXBUF_ENOMEM);
    CHECK_INT_EQ(err.code, PYXBUF_ENOMEM);
    CHECK_CONTAINS(err.message, "'s device memory, 67108864 bytes mapped twice");
    CHECK_CONTAINS(err.message, "cannot be mapped here");
    CHECK_CONTAINS(err.message, strerror(ENOMEM));
    CHECK_CONTAINS(err.message, "pickle the array");
    CHECK(mapped_bytes() < before + 32 * MIB); /* the first 64 MiB undone */
    CHECK(setrlimit(RLIMIT_AS, &old) == 0);
    CHECK_INT_EQ(pyxbuf_emulated_ipc_open(&ipc_handle, &p, &err), 0);
    CHECK_INT_EQ(pyxbuf_emulated_ipc_close(p, &err), 0);
}

TEST_CASE(mapping_faults_name_their_cause_and_leave_nothing_mapped) {
    if (!address_space_limits_work()) {
        fprintf(stderr, "SKIP mapping faults: a sanitizer or valgrind maps memory of its own\n");
        return;
    }
    in_child(device_mapping_fails);
    pyxbuf_backend b = emulated();
    pyxbuf_error err;
    void *dev = NULL;
    CHECK(b.alloc(b.ctx, 1, IPC_BYTES, &dev, &err) == 0);
    CHECK(pyxbuf_emulated_ipc_export(dev, &ipc_handle, &err) == 0);
    in_child(ipc_mapping_fails);
    CHECK(b.free(b.ctx, 1, dev, &err) == 0);
}

PYTHON_TEST_MAIN(TEST_ENTRY(a_forked_child_gets_the_memory_of_the_moment_of_fork),
                 TEST_ENTRY(two_copies_registering_at_once_keep_one_device),
                 TEST_ENTRY(another_process_opens_the_same_device_memory),
                 TEST_ENTRY(ipc_refusals_name_their_cause),
                 TEST_ENTRY(mapping_faults_name_their_cause_and_leave_nothing_mapped))
