/* test_cuda.c -- the CUDA backend (c/cuda.c), called through its vtable.
 *
 * backend_describes_cuda and missing_driver_is_a_clear_error run everywhere.
 * The other cases need a CUDA driver and GPU: without one they print
 * "SKIP: <why>" and exit with 77, which CTest reports as skipped. Each case
 * runs in its own process under CTest; run without arguments, the cases run
 * in the order of TEST_MAIN, where missing_driver_is_a_clear_error comes first
 * because it forks before this process has touched the driver. */
#include "pyxbuf.h"
#include "device/device.h" /* the staging entry points (linked statically) */
#include "device/cuda_driver.h" /* the driver's types; cuda_ipc.c's functions */
#include "testing.h"
#include "thread_checks.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Hidden in the library; the test links the static one. */
const pyxbuf_backend *pyxbuf__cuda_backend(void);

static const pyxbuf_backend *cuda(void) { return pyxbuf__cuda_backend(); }

#define MISSING_LIBRARY "/nonexistent/libcuda.so.1"

/* ------------------------------------------------------------------------- */
/* Helpers                                                                    */
/* ------------------------------------------------------------------------- */

/* Exit 77 (CTest's skip code) unless the backend can use device 0. */
static void require_gpu(void) {
    pyxbuf_error err;
    void *p = NULL;
    int rc = cuda()->alloc(cuda()->ctx, 0, 1, &p, &err);
    if (rc == PYXBUF_EDRIVER) {
        fprintf(stderr, "SKIP: %s\n", err.message);
        exit(77);
    }
    if (rc != 0) fprintf(stderr, "probe alloc failed: %s\n", err.message);
    CHECK_INT_EQ(rc, 0);
    CHECK_INT_EQ(cuda()->free(cuda()->ctx, 0, p, &err), 0);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed) & 0xFFu);
}

static int all_equal(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

static void *offset(void *p, size_t k) { return (char *)p + k; }

/* The error of the last CHECK_OK call: pass &last to the backend. */
static pyxbuf_error last;

/* Check that a backend call succeeds, printing its message when not. */
#define CHECK_OK(call)                                                         \
    do {                                                                       \
        last.message[0] = '\0';                                                \
        int rc_ = (call);                                                      \
        if (rc_ != 0)                                                          \
            fprintf(stderr, "%s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, rc_, \
                    last.message);                                             \
        CHECK_INT_EQ(rc_, 0);                                                  \
    } while (0)

/* A few driver calls the backend does not offer (streams, pinned and managed
 * memory, async memset), for the tests' own setup. Types and names as in
 * cuda.h; loaded after require_gpu, so cuInit has run. */

#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_MEM_ATTACH_GLOBAL 0x1u

static struct {
    CUresult (*device_get)(int *device, int ordinal);
    CUresult (*primary_retain)(CUcontext *ctx, int device);
    CUresult (*primary_release)(int device);
    CUresult (*ctx_push)(CUcontext ctx);
    CUresult (*ctx_pop)(CUcontext *ctx);
    CUresult (*stream_create)(CUstream *s, unsigned int flags);
    CUresult (*stream_destroy)(CUstream s);
    CUresult (*memset_d8_async)(CUdeviceptr dst, unsigned char value, size_t n, CUstream s);
    CUresult (*stream_synchronize)(CUstream s);
    CUresult (*mem_alloc_host)(void **p, size_t n);
    CUresult (*mem_free_host)(void *p);
    CUresult (*mem_alloc_managed)(CUdeviceptr *p, size_t n, unsigned int flags);
    CUresult (*mem_free)(CUdeviceptr p);
    CUresult (*event_query)(CUevent event);
    void *lib;
    int device;
} drv;

static void load(void *slot, const char *name) {
    void *sym = dlsym(drv.lib, name);
    if (sym == NULL) {
        fprintf(stderr, "libcuda.so.1 has no %s\n", name);
        exit(1);
    }
    memcpy(slot, &sym, sizeof sym);
}

#define CU_OK(call)                                                            \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != 0) {                                                         \
            fprintf(stderr, "%s:%d: %s -> CUDA error %d\n", __FILE__, __LINE__, #call, r_); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Open the driver for the test's own calls and make device 0's primary
 * context current (the backend pushes and pops its own on top). */
static void driver_enter(void) {
    drv.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (drv.lib == NULL) {
        fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
        exit(1);
    }
    load(&drv.device_get, "cuDeviceGet");
    load(&drv.primary_retain, "cuDevicePrimaryCtxRetain");
    load(&drv.primary_release, "cuDevicePrimaryCtxRelease_v2");
    load(&drv.ctx_push, "cuCtxPushCurrent_v2");
    load(&drv.ctx_pop, "cuCtxPopCurrent_v2");
    load(&drv.stream_create, "cuStreamCreate");
    load(&drv.stream_destroy, "cuStreamDestroy_v2");
    load(&drv.memset_d8_async, "cuMemsetD8Async");
    load(&drv.stream_synchronize, "cuStreamSynchronize");
    load(&drv.mem_alloc_host, "cuMemAllocHost_v2");
    load(&drv.mem_free_host, "cuMemFreeHost");
    load(&drv.mem_alloc_managed, "cuMemAllocManaged");
    load(&drv.mem_free, "cuMemFree_v2");
    load(&drv.event_query, "cuEventQuery");
    CUcontext ctx;
    CU_OK(drv.device_get(&drv.device, 0));
    CU_OK(drv.primary_retain(&ctx, drv.device));
    CU_OK(drv.ctx_push(ctx));
}

static void driver_leave(void) {
    CUcontext ctx;
    CU_OK(drv.ctx_pop(&ctx));
    CU_OK(drv.primary_release(drv.device));
    dlclose(drv.lib);
}

static int64_t stream_int(CUstream s) { return (int64_t)(intptr_t)s; }

/* ------------------------------------------------------------------------- */
/* Everywhere                                                                 */
/* ------------------------------------------------------------------------- */

/* Runs in a child: the driver is loaded once per process, and the variable
 * must be set before that. */
static void check_missing_driver(void) {
    const pyxbuf_backend *b = cuda();
    pyxbuf_error err;
    void *p = (void *)0x1000;
    void *ev = (void *)0x2000;
    pyxbuf_device dev = {-7, -7};
    unsigned char host[8] = {0};
    int rcs[] = {
        b->copy_to_host(b->ctx, 0, host, (void *)0x1000, sizeof host, 0, &err),
        b->copy_from_host(b->ctx, 0, (void *)0x1000, host, sizeof host, 0, &err),
        b->copy_on_device(b->ctx, 0, (void *)0x1000, 0, (void *)0x2000, 8, 0, &err),
        b->copy_on_device(b->ctx, 1, (void *)0x1000, 0, (void *)0x2000, 8, 0, &err),
        b->alloc(b->ctx, 0, 16, &p, &err),
        b->free(b->ctx, 0, (void *)0x1000, &err),
        b->event_wait(b->ctx, 0, (void *)0x2000, 0, &err),
        b->event_record(b->ctx, 0, 0, &ev, &err),
        b->event_destroy(b->ctx, 0, (void *)0x2000, &err),
        b->pointer_query(b->ctx, host, &dev, &err),
        b->synchronize(b->ctx, 0, PYXBUF_STREAM_NONE, &err),
        b->alloc(b->ctx, 0, 16, &p, NULL), /* no error struct: still no crash */
        b->alloc_async(b->ctx, 0, 16, 0, &p, &err),
        b->free_async(b->ctx, 0, (void *)0x1000, 0, &err),
        b->pool_trim(b->ctx, 0, 0, &err),
        b->ipc_export(b->ctx, 0, (void *)0x1000, host, &(size_t){sizeof host}, &(int){-1}, &err),
        b->ipc_open(b->ctx, 0, host, sizeof host, -1, &p, &err),
        b->ipc_close(b->ctx, 0, (void *)0x1000, &err),
    };
    for (size_t i = 0; i < sizeof rcs / sizeof *rcs; i++) CHECK_INT_EQ(rcs[i], PYXBUF_EDRIVER);
    CHECK_INT_EQ(err.code, PYXBUF_EDRIVER);
    CHECK_CONTAINS(err.message, "no CUDA driver found (" MISSING_LIBRARY "): ");
    CHECK_CONTAINS(err.message, "this machine cannot read CUDA memory");
    CHECK_CONTAINS(err.message, "install the NVIDIA driver or copy the data to the host");
    CHECK(dev.device_type == -7 && dev.device_id == -7);
    fprintf(stderr, "message: %s\n", err.message);
}

/* The default library name, whatever this machine has: either it works or
 * the message names libcuda.so.1. */
static void check_default_library(void) {
    pyxbuf_error err;
    void *p = NULL;
    int rc = cuda()->alloc(cuda()->ctx, 0, 1, &p, &err);
    if (rc == 0) {
        CHECK_INT_EQ(cuda()->free(cuda()->ctx, 0, p, &err), 0);
        return;
    }
    CHECK_INT_EQ(rc, PYXBUF_EDRIVER);
    CHECK_CONTAINS(err.message, "libcuda.so.1");
    fprintf(stderr, "message: %s\n", err.message);
}

static void in_child(void (*body)(void), const char *library) {
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (library) setenv("PYXBUF_CUDA_LIBRARY", library, 1);
        else unsetenv("PYXBUF_CUDA_LIBRARY");
        body();
        _exit(pyxbuf_test_failures == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_CASE(missing_driver_is_a_clear_error) {
    in_child(check_missing_driver, MISSING_LIBRARY);
    in_child(check_default_library, NULL);
}

TEST_CASE(backend_describes_cuda) {
    const pyxbuf_backend *b = cuda();
    CHECK(b != NULL);
    CHECK(b == cuda());
    CHECK_INT_EQ(b->size, sizeof(pyxbuf_backend));
    CHECK_INT_EQ(b->device_type, PYXBUF_DL_CUDA);
    CHECK_STR_EQ(b->name, "cuda");
    CHECK(b->copy_to_host && b->copy_from_host && b->copy_on_device && b->alloc && b->free);
    CHECK(b->event_wait && b->event_record && b->event_destroy && b->pointer_query &&
          b->synchronize);
    /* The staging functions: all four, so large pageable copies are staged. */
    CHECK(b->host_alloc && b->host_free && b->copy_async && b->event_query);
    /* The stream-ordered pool (cuMemAllocFromPoolAsync where pools exist). */
    CHECK(b->alloc_async && b->free_async && b->pool_trim);
    /* Memory shared with other processes (CUDA's IPC handles). */
    CHECK(b->ipc_export && b->ipc_open && b->ipc_close);
}

/* ------------------------------------------------------------------------- */
/* IPC handles, over a scripted driver                                        */
/* ------------------------------------------------------------------------- */

/* cuda_ipc.c's own logic -- the handle's layout, opens in the exporting
 * process, refusals and their messages -- checked everywhere, over driver
 * functions that behave as cuda.h documents for the cases below. The real
 * driver's path (two processes on one GPU) is bench/cuda/run-on-gpu.sh's
 * ipc step. Runs in a child: pyxbuf__cuda_ipc_init replaces the process's
 * table. */

static struct {
    unsigned char uuid_here; /* this process's GPU: 16 bytes of this value */
    CUdeviceptr opened_base; /* what cuIpcOpenMemHandle maps */
    int opens, closes;
    CUdeviceptr closed;
    CUresult open_result;
} fake;

#define FAKE_POOL_START 0x900000u /* memory "from a pool": cuIpcGetMemHandle refuses it */
#define FAKE_SHAREABLE_START 0xA00000u /* from a pool with POSIX fd handles */
#define FAKE_DEFAULT_POOL ((CUmemoryPool)0x77)
#define FAKE_SHAREABLE_POOL ((CUmemoryPool)0x88)
#define FAKE_IMPORTED_POOL ((CUmemoryPool)0x99)
#define FAKE_POOL_FD 42
/* Where the scripted cuMemAllocFromPoolAsync hands out memory: 256-byte
 * steps, so that several allocations share the 64 KiB range that
 * cuMemGetAddressRange answers for any of them (a pool's chunk). */
#define FAKE_ALLOCATIONS (FAKE_SHAREABLE_START + 0x80000u)

/* Atomic: the threaded case calls the scripted driver from eight threads. */
static struct {
    atomic_int exports, imports, pointer_imports, frees, last_fd;
    _Atomic CUdeviceptr freed, exported; /* the last cuMemPoolExportPointer's pointer */
    /* The next call's result, if set (then back to success): a fault at
     * each pool entry point the IPC code calls. */
    CUresult fail_pointer_once;        /* cuMemPoolImportPointer */
    CUresult fail_pool_import_once;    /* cuMemPoolImportFromShareableHandle */
    CUresult fail_export_pointer_once; /* cuMemPoolExportPointer */
    CUresult fail_free_once;           /* cuMemFree */
} fake_pools;

/* The scripted fault `*slot`, cleared as it is taken (only then written:
 * threads that script none only read it). */
static CUresult take_fault(CUresult *slot) {
    CUresult r = *slot;
    if (r != CUDA_SUCCESS) *slot = CUDA_SUCCESS;
    return r;
}

static CUresult fake_device_get(CUdevice *d, int ordinal) {
    *d = ordinal;
    return CUDA_SUCCESS;
}
static CUresult fake_uuid(CUuuid *u, CUdevice d) {
    (void)d;
    memset(u->bytes, fake.uuid_here, sizeof u->bytes);
    return CUDA_SUCCESS;
}
static CUresult fake_range(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    if (p == 0) return CUDA_ERROR_INVALID_VALUE;
    *base = p & ~(CUdeviceptr)0xFFFF; /* 64 KiB allocations */
    *size = 0x10000;
    return CUDA_SUCCESS;
}
static CUresult fake_attrs(unsigned n, CUpointer_attribute *a, void **data, CUdeviceptr p) {
    for (unsigned i = 0; i < n; i++) {
        if (a[i] == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)
            *(void **)data[i] = p >= FAKE_SHAREABLE_START ? (void *)FAKE_SHAREABLE_POOL
                                : p >= FAKE_POOL_START    ? (void *)FAKE_DEFAULT_POOL
                                                          : NULL;
        else if (a[i] == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE)
            *(int *)data[i] = p < FAKE_POOL_START;
    }
    return CUDA_SUCCESS;
}
static CUresult fake_get_handle(CUipcMemHandle *h, CUdeviceptr base) {
    if (base >= FAKE_POOL_START) return CUDA_ERROR_INVALID_VALUE;
    memset(h->reserved, 0, sizeof h->reserved);
    memcpy(h->reserved, &base, sizeof base);
    return CUDA_SUCCESS;
}
static CUresult fake_open(CUdeviceptr *p, CUipcMemHandle h, unsigned flags) {
    (void)h;
    CHECK_INT_EQ(flags, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    fake.opens++;
    if (fake.open_result != CUDA_SUCCESS) return fake.open_result;
    *p = fake.opened_base;
    return CUDA_SUCCESS;
}
static CUresult fake_close(CUdeviceptr p) {
    fake.closes++;
    fake.closed = p;
    return CUDA_SUCCESS;
}
static CUresult fake_error_name(CUresult r, const char **s) {
    *s = r == CUDA_ERROR_INVALID_HANDLE  ? "CUDA_ERROR_INVALID_HANDLE"
         : r == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE"
                                         : "CUDA_ERROR_OTHER";
    return CUDA_SUCCESS;
}
static CUresult fake_error_string(CUresult r, const char **s) {
    (void)r;
    *s = "as the driver says";
    return CUDA_SUCCESS;
}

/* The pool entry points: only the shareable pool exports a descriptor. */
static CUresult fake_pool_export(void *out, CUmemoryPool pool, int type, unsigned long long flags) {
    CHECK_INT_EQ(type, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CHECK(flags == 0);
    if (pool != FAKE_SHAREABLE_POOL) return CUDA_ERROR_INVALID_VALUE;
    fake_pools.exports++;
    *(int *)out = FAKE_POOL_FD;
    return CUDA_SUCCESS;
}
static CUresult fake_pool_import(CUmemoryPool *pool, void *handle, int type,
                                 unsigned long long flags) {
    CHECK_INT_EQ(type, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CHECK(flags == 0);
    CUresult r = take_fault(&fake_pools.fail_pool_import_once);
    if (r != CUDA_SUCCESS) return r;
    fake_pools.imports++;
    fake_pools.last_fd = (int)(intptr_t)handle; /* a descriptor is passed by value */
    *pool = FAKE_IMPORTED_POOL;
    return CUDA_SUCCESS;
}
static CUresult fake_export_pointer(CUmemPoolPtrExportData *data, CUdeviceptr p) {
    CUresult r = take_fault(&fake_pools.fail_export_pointer_once);
    if (r != CUDA_SUCCESS) return r;
    fake_pools.exported = p;
    memset(data->reserved, 0, sizeof data->reserved);
    memcpy(data->reserved, &p, sizeof p);
    return CUDA_SUCCESS;
}
static CUresult fake_import_pointer(CUdeviceptr *p, CUmemoryPool pool,
                                    CUmemPoolPtrExportData *data) {
    CHECK(pool == FAKE_IMPORTED_POOL);
    CUresult r = take_fault(&fake_pools.fail_pointer_once);
    if (r != CUDA_SUCCESS) return r;
    CUdeviceptr theirs = 0;
    memcpy(&theirs, data->reserved, sizeof theirs);
    /* An allocation's start was exported: a 64 KiB one's, or one the
     * scripted pool allocator handed out (FAKE_ALLOCATIONS). */
    CHECK((theirs & 0xFFFF) == 0 || theirs >= FAKE_ALLOCATIONS);
    fake_pools.pointer_imports++;
    *p = 0x5000000 + (theirs - FAKE_SHAREABLE_START);
    return CUDA_SUCCESS;
}
static CUresult fake_free(CUdeviceptr p) {
    CUresult r = take_fault(&fake_pools.fail_free_once);
    if (r != CUDA_SUCCESS) return r;
    fake_pools.frees++;
    fake_pools.freed = p;
    return CUDA_SUCCESS;
}

/* The legacy entry points: a driver without pool IPC has these alone. */
#define FAKE_LEGACY_IPC                                                                    \
    .device_get = fake_device_get, .device_get_uuid = fake_uuid,                           \
    .mem_get_address_range = fake_range, .pointer_get_attributes = fake_attrs,             \
    .ipc_get_mem_handle = fake_get_handle, .ipc_open_mem_handle = fake_open,               \
    .ipc_close_mem_handle = fake_close, .get_error_name = fake_error_name,                 \
    .get_error_string = fake_error_string

static const pyxbuf__cuda_ipc_api fake_api = {FAKE_LEGACY_IPC};

static const pyxbuf__cuda_ipc_api fake_api_with_pools = {
    FAKE_LEGACY_IPC,
    .mem_pool_export_to_shareable_handle = fake_pool_export,
    .mem_pool_import_from_shareable_handle = fake_pool_import,
    .mem_pool_export_pointer = fake_export_pointer,
    .mem_pool_import_pointer = fake_import_pointer,
    .mem_free = fake_free,
};

static void check_ipc_over_fake_driver(void) {
    pyxbuf_error err;
    unsigned char h[PYXBUF_IPC_BACKEND_HANDLE_MAX];
    size_t n = sizeof h;
    void *p = NULL;
    int fd = 0;
    fake.uuid_here = 0xAB;
    fake.opened_base = 0x7000000;
    pyxbuf__cuda_ipc_init(&fake_api);

    /* Export: pyxbuf's handle, CUDA's inside it. */
    CHECK_OK(pyxbuf__cuda_ipc_export(0, (void *)0x12345, h, &n, &fd, &last));
    CHECK_INT_EQ(fd, -1); /* legacy handles are bytes alone */
    CHECK(n > 64 && n <= PYXBUF_IPC_BACKEND_HANDLE_MAX);
    CHECK(memcmp(h, "pyxbcuda", 8) == 0);

    /* Mapped, at the array's offset in the allocation; closed at the
     * mapping's base. */
    CHECK_OK(pyxbuf__cuda_ipc_open(0, h, n, -1, &p, &last));
    CHECK(p == (void *)(0x7000000 + 0x2345));
    CHECK_INT_EQ(fake.opens, 1);
    CHECK_OK(pyxbuf__cuda_ipc_close(0, p, &last));
    CHECK_INT_EQ(fake.closes, 1);
    CHECK(fake.closed == 0x7000000);

    /* The exporter freed it (or exited): the driver's error, and why. */
    fake.open_result = CUDA_ERROR_INVALID_HANDLE;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_open(0, h, n, -1, &p, &err), PYXBUF_EDRIVER);
    CHECK_INT_EQ(err.code, PYXBUF_EDRIVER);
    CHECK_CONTAINS(err.message, "cuIpcOpenMemHandle of process ");
    CHECK_CONTAINS(err.message, "'s memory on CUDA device 0 failed");
    CHECK_CONTAINS(err.message, "CUDA_ERROR_INVALID_HANDLE");
    CHECK_CONTAINS(err.message, "may have freed the array or exited");
    fake.open_result = CUDA_SUCCESS;

    /* Another GPU under the same ordinal (CUDA_VISIBLE_DEVICES differs). */
    fake.uuid_here = 0xCD;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_open(0, h, n, -1, &p, &err), PYXBUF_EINVAL);
    CHECK_INT_EQ(err.code, PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "the memory lies on GPU-abababab-abab-abab-abab-abababababab");
    CHECK_CONTAINS(err.message, "CUDA device 0 of this process is GPU-cdcdcdcd-cdcd");
    CHECK_CONTAINS(err.message, "CUDA_VISIBLE_DEVICES");
    fake.uuid_here = 0xAB;

    /* Handles that ipc_export did not make. */
    CHECK_INT_EQ(pyxbuf__cuda_ipc_open(0, h, n - 1, -1, &p, &err), PYXBUF_EINVAL);
    CHECK_INT_EQ(err.code, PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "handle is not one cuda ipc_export made");
    h[0] ^= 1;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_open(0, h, n, -1, &p, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "starting \"pyxbcuda\"");

    /* Too small a buffer for the handle. */
    size_t small = 64;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_export(0, (void *)0x12345, h, &small, &fd, &err), PYXBUF_EINVAL);
    CHECK_INT_EQ(err.code, PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "pass PYXBUF_IPC_BACKEND_HANDLE_MAX");

    /* Pool memory, with a driver that cannot share it: the way out. */
    n = sizeof h;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_export(0, (void *)(FAKE_POOL_START + 0x40), h, &n, &fd, &err),
                 PYXBUF_EUNSUPPORTED);
    CHECK_CONTAINS(err.message, "lies in a stream-ordered pool, and this CUDA driver cannot share "
                                "pool memory");
    CHECK_CONTAINS(err.message, "PYXBUF_DEVICE_POOL=0");

    /* A driver without IPC. */
    pyxbuf__cuda_ipc_init(NULL);
    n = sizeof h;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_export(0, (void *)0x12345, h, &n, &fd, &err), PYXBUF_EUNSUPPORTED);
    CHECK_INT_EQ(err.code, PYXBUF_EUNSUPPORTED);
    CHECK_CONTAINS(err.message, "this CUDA driver has no interprocess memory handles");
}

TEST_CASE(ipc_handles_over_a_scripted_driver) { in_child(check_ipc_over_fake_driver, NULL); }

/* A fault at each pool entry point the IPC code calls: the driver's error,
 * naming the call, and nothing kept that the next try trips over. `h` is a
 * handle of shareable-pool memory whose pool this process has imported. */
static void check_pool_ipc_faults(const unsigned char *h, size_t n) {
    pyxbuf_error err;
    unsigned char fresh[PYXBUF_IPC_BACKEND_HANDLE_MAX];
    size_t k = sizeof fresh;
    void *p = NULL;
    int fd = 7;

    /* cuMemPoolExportPointer: no handle, and no descriptor handed out. */
    fake_pools.fail_export_pointer_once = CUDA_ERROR_INVALID_VALUE;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_export(0, (void *)(FAKE_SHAREABLE_START + 0x20040), fresh, &k,
                                         &fd, &err),
                 PYXBUF_EDRIVER);
    CHECK_INT_EQ(err.code, PYXBUF_EDRIVER);
    CHECK_INT_EQ(fd, -1);
    CHECK_CONTAINS(err.message, "cuMemPoolExportPointer of the allocation holding the array");
    CHECK_CONTAINS(err.message, "CUDA_ERROR_INVALID_VALUE");
    CHECK_CONTAINS(err.message, "must lie in live memory of the pool");

    /* cuMemPoolImportFromShareableHandle, when a stale pool is imported
     * again: the driver's error naming that call; the next descriptor
     * imports it. */
    int imports = fake_pools.imports;
    fake_pools.fail_pointer_once = CUDA_ERROR_INVALID_VALUE;
    fake_pools.fail_pool_import_once = CUDA_ERROR_INVALID_HANDLE;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_open(0, h, n, 11, &p, &err), PYXBUF_EDRIVER);
    CHECK_CONTAINS(err.message, "cuMemPoolImportFromShareableHandle of process ");
    CHECK_CONTAINS(err.message, "CUDA_ERROR_INVALID_HANDLE");
    CHECK_INT_EQ(fake_pools.imports, imports);
    fake_pools.fail_pointer_once = CUDA_ERROR_INVALID_VALUE;
    CHECK_OK(pyxbuf__cuda_ipc_open(0, h, n, 12, &p, &last));
    CHECK_INT_EQ(fake_pools.imports, imports + 1);
    CHECK_INT_EQ(fake_pools.last_fd, 12);

    /* cuMemFree of the imported allocation: the close reports it, naming
     * the call, and forgets the pointer all the same (CUDA's import is
     * gone or unusable; a second close would free twice). The next open
     * imports the allocation again. */
    int frees = fake_pools.frees, pointer_imports = fake_pools.pointer_imports;
    fake_pools.fail_free_once = CUDA_ERROR_INVALID_VALUE;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_close(0, p, &err), PYXBUF_EDRIVER);
    CHECK_CONTAINS(err.message, "cuMemFree of imported pool memory");
    CHECK_CONTAINS(err.message, "CUDA_ERROR_INVALID_VALUE");
    CHECK_CONTAINS(err.message, "freed by its exporter first");
    CHECK_INT_EQ(fake_pools.frees, frees);
    CHECK_INT_EQ(pyxbuf__cuda_ipc_close(0, p, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "is not a pointer cuda ipc_open returned");
    CHECK_OK(pyxbuf__cuda_ipc_open(0, h, n, -1, &p, &last));
    CHECK_INT_EQ(fake_pools.pointer_imports, pointer_imports + 1);
    CHECK_OK(pyxbuf__cuda_ipc_close(0, p, &last));
    CHECK_INT_EQ(fake_pools.frees, frees + 1);
}

/* Pool memory over a scripted driver: a shareable pool's memory travels as
 * its export data with the pool's descriptor beside it, the receiver imports
 * the pool once and frees what it imported; a default pool's is refused,
 * naming PYXBUF_DEVICE_POOL=shareable. */
static void check_pool_ipc_over_fake_driver(void) {
    pyxbuf_error err;
    unsigned char h[PYXBUF_IPC_BACKEND_HANDLE_MAX], again[PYXBUF_IPC_BACKEND_HANDLE_MAX];
    size_t n = sizeof h, m = sizeof again;
    void *p = NULL, *q = NULL;
    int fd = -1, fd2 = -1;
    fake.uuid_here = 0xAB;
    pyxbuf__cuda_ipc_init(&fake_api_with_pools);

    CHECK_OK(pyxbuf__cuda_ipc_export(0, (void *)(FAKE_SHAREABLE_START + 0x40), h, &n, &fd, &last));
    CHECK_INT_EQ(fd, FAKE_POOL_FD);
    CHECK(memcmp(h, "pyxbcuda", 8) == 0 && n <= PYXBUF_IPC_BACKEND_HANDLE_MAX);
    /* The pool's descriptor is made once, whatever the arrays. */
    CHECK_OK(pyxbuf__cuda_ipc_export(0, (void *)(FAKE_SHAREABLE_START + 0x80), again, &m, &fd2,
                                     &last));
    CHECK_INT_EQ(fd2, FAKE_POOL_FD);
    CHECK_INT_EQ(fake_pools.exports, 1);

    /* Opened without the descriptor, before the pool was imported here. */
    CHECK_INT_EQ(pyxbuf__cuda_ipc_open(0, h, n, -1, &p, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "whose file descriptor must arrive with it and did not (fd -1)");
    CHECK_CONTAINS(err.message, "pyxbuf.multiprocessing");
    CHECK_INT_EQ(fake_pools.imports, 0);

    /* With it (this process's number for it): the pool, then the pointer. */
    CHECK_OK(pyxbuf__cuda_ipc_open(0, h, n, 7, &p, &last));
    CHECK(p == (void *)(0x5000000 + 0x40));
    CHECK_INT_EQ(fake_pools.imports, 1);
    CHECK_INT_EQ(fake_pools.last_fd, 7);
    CHECK_INT_EQ(fake_pools.pointer_imports, 1);
    /* The pool stays imported: the next array needs no descriptor; another
     * array over the same allocation shares its import. */
    CHECK_OK(pyxbuf__cuda_ipc_open(0, again, m, -1, &q, &last));
    CHECK(q == (void *)(0x5000000 + 0x80));
    CHECK_INT_EQ(fake_pools.imports, 1);
    CHECK_INT_EQ(fake_pools.pointer_imports, 1);

    /* The allocation is freed with its last close (once: before the
     * exporter may free it); no legacy mapping is closed. */
    int closes = fake.closes;
    CHECK_OK(pyxbuf__cuda_ipc_close(0, p, &last));
    CHECK_INT_EQ(fake_pools.frees, 0);
    CHECK_OK(pyxbuf__cuda_ipc_close(0, q, &last));
    CHECK_INT_EQ(fake_pools.frees, 1);
    CHECK(fake_pools.freed == 0x5000000);
    CHECK_INT_EQ(fake.closes, closes);
    CHECK_INT_EQ(pyxbuf__cuda_ipc_close(0, q, &err), PYXBUF_EINVAL); /* closed already */
    CHECK_CONTAINS(err.message, "is not a pointer cuda ipc_open returned");

    /* Another allocation of the pool: its own import. */
    unsigned char other[PYXBUF_IPC_BACKEND_HANDLE_MAX];
    size_t k = sizeof other;
    CHECK_OK(pyxbuf__cuda_ipc_export(0, (void *)(FAKE_SHAREABLE_START + 0x10008), other, &k, &fd,
                                     &last));
    CHECK_OK(pyxbuf__cuda_ipc_open(0, other, k, -1, &p, &last));
    CHECK(p == (void *)(0x5010000 + 0x8));
    CHECK_INT_EQ(fake_pools.pointer_imports, 2);
    CHECK_OK(pyxbuf__cuda_ipc_close(0, p, &last));

    /* The imported pool fails (its exporter gone): without a descriptor the
     * driver's error, with one the pool is imported again. */
    fake_pools.fail_pointer_once = CUDA_ERROR_INVALID_VALUE;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_open(0, h, n, -1, &p, &err), PYXBUF_EDRIVER);
    CHECK_CONTAINS(err.message, "cuMemPoolImportPointer of process ");
    CHECK_CONTAINS(err.message, "'s pool memory on CUDA device 0 failed: CUDA_ERROR_INVALID_VALUE");
    CHECK_CONTAINS(err.message, "may have freed the array or exited");
    fake_pools.fail_pointer_once = CUDA_ERROR_INVALID_VALUE;
    CHECK_OK(pyxbuf__cuda_ipc_open(0, h, n, 9, &p, &last));
    CHECK_INT_EQ(fake_pools.imports, 2);
    CHECK_INT_EQ(fake_pools.last_fd, 9);
    CHECK_OK(pyxbuf__cuda_ipc_close(0, p, &last));
    CHECK_INT_EQ(pyxbuf__cuda_ipc_close(0, (void *)0x1234, &err), PYXBUF_EINVAL);

    check_pool_ipc_faults(h, n);

    /* A default pool's memory: no shareable handle; the ways out. */
    n = sizeof h;
    CHECK_INT_EQ(pyxbuf__cuda_ipc_export(0, (void *)(FAKE_POOL_START + 0x40), h, &n, &fd, &err),
                 PYXBUF_EDRIVER);
    CHECK_CONTAINS(err.message, "cuMemPoolExportToShareableHandle of the pool holding the array");
    CHECK_CONTAINS(err.message, "CUDA_ERROR_INVALID_VALUE");
    CHECK_CONTAINS(err.message, "PYXBUF_DEVICE_POOL=shareable or =0 (cuMemAlloc)");
    /* Legacy memory still goes as CUDA's IPC handle, with no descriptor. */
    n = sizeof h;
    CHECK_OK(pyxbuf__cuda_ipc_export(0, (void *)0x12345, h, &n, &fd, &last));
    CHECK_INT_EQ(fd, -1);
}

TEST_CASE(pool_ipc_over_a_scripted_driver) { in_child(check_pool_ipc_over_fake_driver, NULL); }

/* Eight threads export, open and close pool memory at once over the
 * scripted driver: cuda_ipc.c's lists (exported pools, imported pools and
 * allocations, open records) under its one lock. The pool's descriptor is
 * made once and the pool imported once, whoever comes first; two threads on
 * one allocation share its import, which is freed exactly once per import.
 * `make test-tsan` runs it under ThreadSanitizer. */
#define IPC_THREADS 8
#define IPC_THREAD_ROUNDS 300

typedef struct ipc_worker {
    int index;
    pthread_barrier_t *start;
} ipc_worker;

static void *pool_ipc_worker(void *arg) {
    ipc_worker *w = arg;
    pyxbuf_error err;
    pthread_barrier_wait(w->start);
    for (int round = 0; round < IPC_THREAD_ROUNDS; round++) {
        /* Four allocations, each used by two threads; the array's place in
         * its allocation moves with the round. */
        size_t at = 0x10000u * (size_t)(w->index % 4) + 0x40u + 8u * (size_t)(round % 16);
        unsigned char h[PYXBUF_IPC_BACKEND_HANDLE_MAX];
        size_t n = sizeof h;
        int fd = -1;
        TCHECK(pyxbuf__cuda_ipc_export(0, (void *)(uintptr_t)(FAKE_SHAREABLE_START + at), h, &n,
                                       &fd, &err) == 0);
        TCHECK(fd == FAKE_POOL_FD);
        void *p = NULL, *q = NULL;
        TCHECK(pyxbuf__cuda_ipc_open(0, h, n, 7, &p, &err) == 0);
        TCHECK(pyxbuf__cuda_ipc_open(0, h, n, -1, &q, &err) == 0);
        TCHECK(p == (void *)(uintptr_t)(0x5000000 + at) && q == p);
        TCHECK(pyxbuf__cuda_ipc_close(0, p, &err) == 0);
        TCHECK(pyxbuf__cuda_ipc_close(0, q, &err) == 0);
    }
    return NULL;
}

/* Run `fn` on IPC_THREADS threads released together; none may fail. */
static void run_ipc_threads(void *(*fn)(void *)) {
    pthread_t threads[IPC_THREADS];
    ipc_worker workers[IPC_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, IPC_THREADS);
    for (int i = 0; i < IPC_THREADS; i++) {
        workers[i] = (ipc_worker){i, &start};
        CHECK(pthread_create(&threads[i], NULL, fn, &workers[i]) == 0);
    }
    for (int i = 0; i < IPC_THREADS; i++) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    CHECK_INT_EQ(atomic_load(&pyxbuf_thread_failures), 0);
}

static void check_pool_ipc_from_8_threads(void) {
    fake.uuid_here = 0xAB;
    pyxbuf__cuda_ipc_init(&fake_api_with_pools);
    run_ipc_threads(pool_ipc_worker);
    CHECK_INT_EQ(fake_pools.exports, 1);
    CHECK_INT_EQ(fake_pools.imports, 1);
    CHECK(fake_pools.pointer_imports >= 4); /* each allocation at least once */
    CHECK_INT_EQ(fake_pools.frees, fake_pools.pointer_imports); /* nothing held, none twice */
}

TEST_CASE(pool_ipc_from_8_threads) { in_child(check_pool_ipc_from_8_threads, NULL); }

/* cuda_pool.c's choice of pool over a scripted driver: the device's default
 * pool unless the configuration asks for shareable pools; then a pool of
 * pyxbuf's own with POSIX fd handles on the device, made once, or the
 * default pool with the reason kept where the device cannot have one. */
static struct {
    int creates, supported_types;
    CUresult create_result;
    CUmemPoolProps props;
    _Atomic(CUmemoryPool) last_alloc_pool;
    CUmemoryPool trimmed;
    int out_of_memory_once;
    CUresult free_result_once; /* the next cuMemFreeAsync's result, if set */
    _Atomic size_t handed; /* bytes handed out from FAKE_ALLOCATIONS (threads allocate) */
} fake_alloc;

static CUresult fake_get_attribute(int *v, CUdevice_attribute a, CUdevice d) {
    (void)d;
    if (a == CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) *v = 1;
    else if (a == CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES) *v = fake_alloc.supported_types;
    else return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
static CUresult fake_default_pool(CUmemoryPool *pool, CUdevice d) {
    (void)d;
    *pool = FAKE_DEFAULT_POOL;
    return CUDA_SUCCESS;
}
static CUresult fake_pool_get(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    (void)pool, (void)a;
    *(cuuint64_t *)v = 0;
    return CUDA_SUCCESS;
}
static CUresult fake_pool_set(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    (void)pool, (void)a, (void)v;
    return CUDA_SUCCESS;
}
static CUresult fake_trim(CUmemoryPool pool, size_t keep) {
    (void)keep;
    fake_alloc.trimmed = pool;
    return CUDA_SUCCESS;
}
static CUresult fake_alloc_from(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
    (void)s;
    fake_alloc.last_alloc_pool = pool;
    if (fake_alloc.out_of_memory_once) {
        fake_alloc.out_of_memory_once = 0;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = FAKE_ALLOCATIONS + atomic_fetch_add(&fake_alloc.handed, (n + 0xFF) & ~(size_t)0xFF);
    return CUDA_SUCCESS;
}
static CUresult fake_free_async(CUdeviceptr p, CUstream s) {
    (void)p, (void)s;
    return take_fault(&fake_alloc.free_result_once);
}
static CUresult fake_create(CUmemoryPool *pool, const CUmemPoolProps *props) {
    fake_alloc.creates++;
    fake_alloc.props = *props;
    if (fake_alloc.create_result != CUDA_SUCCESS) return fake_alloc.create_result;
    *pool = FAKE_SHAREABLE_POOL;
    return CUDA_SUCCESS;
}

static const pyxbuf__cuda_pool_api fake_pool_api = {
    .device_get = fake_device_get,
    .device_get_attribute = fake_get_attribute,
    .device_get_default_mem_pool = fake_default_pool,
    .mem_pool_get_attribute = fake_pool_get,
    .mem_pool_set_attribute = fake_pool_set,
    .mem_pool_trim_to = fake_trim,
    .mem_alloc_from_pool_async = fake_alloc_from,
    .mem_free_async = fake_free_async,
    .mem_pool_create = fake_create,
};

static void set_shareable(int shareable) {
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    c.device_pool_shareable = shareable;
    CHECK_OK(pyxbuf_transfer_config_set(&c, &last));
}

static void check_shareable_pools_over_fake_driver(void) {
    CUdeviceptr p = 0;
    int pooled = 0;
    const char *call = NULL;
    fake_alloc.supported_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pyxbuf__cuda_pools_init(&fake_pool_api, 3);
    CHECK(pyxbuf__cuda_pool_alloc(1, 64, NULL, &p, &pooled, &call) == CUDA_SUCCESS && pooled);
    CHECK(fake_alloc.last_alloc_pool == FAKE_DEFAULT_POOL);
    CHECK_INT_EQ(fake_alloc.creates, 0);

    set_shareable(1);
    for (int i = 0; i < 3; i++) {
        CHECK(pyxbuf__cuda_pool_alloc(1, 64, NULL, &p, &pooled, &call) == CUDA_SUCCESS);
        CHECK(fake_alloc.last_alloc_pool == FAKE_SHAREABLE_POOL);
    }
    CHECK_INT_EQ(fake_alloc.creates, 1); /* once per device */
    CHECK_INT_EQ(fake_alloc.props.allocType, CU_MEM_ALLOCATION_TYPE_PINNED);
    CHECK_INT_EQ(fake_alloc.props.handleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CHECK_INT_EQ(fake_alloc.props.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    CHECK_INT_EQ(fake_alloc.props.location.id, 1);
    CHECK(pyxbuf__cuda_pool_shareable_refusal(1) == NULL);
    CHECK(pyxbuf__cuda_pool_is_shareable(1, FAKE_SHAREABLE_POOL));
    CHECK(!pyxbuf__cuda_pool_is_shareable(1, FAKE_DEFAULT_POOL));
    /* Out of memory: the default pool's idle memory goes back (the shareable
     * pool gives nothing back before exit), and the allocation is retried. */
    fake_alloc.out_of_memory_once = 1;
    CHECK(pyxbuf__cuda_pool_alloc(1, 64, NULL, &p, &pooled, &call) == CUDA_SUCCESS);
    CHECK(fake_alloc.trimmed == FAKE_DEFAULT_POOL);
    CHECK(fake_alloc.last_alloc_pool == FAKE_SHAREABLE_POOL);

    /* Device 2's cuMemPoolCreate fails: allocations go on from the default
     * pool, and sharing will say why. */
    fake_alloc.create_result = CUDA_ERROR_OUT_OF_MEMORY;
    CHECK(pyxbuf__cuda_pool_alloc(2, 64, NULL, &p, &pooled, &call) == CUDA_SUCCESS);
    CHECK(fake_alloc.last_alloc_pool == FAKE_DEFAULT_POOL);
    CHECK_CONTAINS(pyxbuf__cuda_pool_shareable_refusal(2),
                   "cuMemPoolCreate with POSIX file-descriptor handles failed (CUresult 2)");
    fake_alloc.create_result = CUDA_SUCCESS;

    /* Device 0 cannot have POSIX fd handles: its default pool, and why. */
    fake_alloc.supported_types = 0;
    CHECK(pyxbuf__cuda_pool_alloc(0, 64, NULL, &p, &pooled, &call) == CUDA_SUCCESS);
    CHECK(fake_alloc.last_alloc_pool == FAKE_DEFAULT_POOL);
    CHECK_INT_EQ(fake_alloc.creates, 2); /* devices 1 and 2 tried; 0 never */
    CHECK_CONTAINS(pyxbuf__cuda_pool_shareable_refusal(0),
                   "CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES lacks them");
    set_shareable(0);
    CHECK(pyxbuf__cuda_pool_alloc(1, 64, NULL, &p, &pooled, &call) == CUDA_SUCCESS);
    CHECK(fake_alloc.last_alloc_pool == FAKE_DEFAULT_POOL);
}

TEST_CASE(shareable_pools_over_a_scripted_driver) {
    in_child(check_shareable_pools_over_fake_driver, NULL);
}

/* Memory of the shareable pool is exported as the allocation it is, where
 * it starts: cuMemGetAddressRange may answer the pool's chunk holding
 * several allocations (here, the 64 KiB range), and cuMemPoolExportPointer
 * names one allocation. cuda_pool.c remembers each live one. */
static void check_export_names_the_allocation(void) {
    CUdeviceptr a = 0, b = 0, start = 0;
    size_t size = 0;
    int pooled = 0, fd = -1;
    const char *call = NULL;
    fake.uuid_here = 0xAB;
    fake_alloc.supported_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pyxbuf__cuda_pools_init(&fake_pool_api, 1);
    pyxbuf__cuda_ipc_init(&fake_api_with_pools);
    /* The default pool's allocations are not remembered (nothing can
     * export them). */
    CHECK(pyxbuf__cuda_pool_alloc(0, 0x300, NULL, &a, &pooled, &call) == CUDA_SUCCESS);
    CHECK(!pyxbuf__cuda_pool_allocation(a, &start, &size));
    set_shareable(1);
    CHECK(pyxbuf__cuda_pool_alloc(0, 0x300, NULL, &a, &pooled, &call) == CUDA_SUCCESS);
    CHECK(pyxbuf__cuda_pool_alloc(0, 0x300, NULL, &b, &pooled, &call) == CUDA_SUCCESS);
    CHECK(b == a + 0x300 && (a & ~(CUdeviceptr)0xFFFF) == (b & ~(CUdeviceptr)0xFFFF));
    CHECK(pyxbuf__cuda_pool_allocation(b + 0x10, &start, &size));
    CHECK(start == b);
    CHECK_INT_EQ(size, 0x300);
    CHECK(!pyxbuf__cuda_pool_allocation(b + 0x300 + 0x40, &start, &size)); /* past its end */

    /* An array 16 bytes into b: b is exported, and opened at b's import
     * plus 16. */
    unsigned char h[PYXBUF_IPC_BACKEND_HANDLE_MAX];
    size_t n = sizeof h;
    void *p = NULL;
    CHECK_OK(pyxbuf__cuda_ipc_export(0, (void *)(uintptr_t)(b + 0x10), h, &n, &fd, &last));
    CHECK(fake_pools.exported == b);
    CHECK_OK(pyxbuf__cuda_ipc_open(0, h, n, 7, &p, &last));
    CHECK(p == (void *)(uintptr_t)(0x5000000 + (b - FAKE_SHAREABLE_START) + 0x10));
    CHECK_OK(pyxbuf__cuda_ipc_close(0, p, &last));

    /* A free the driver refuses leaves the allocation live, and remembered;
     * freed: forgotten; a's entry is still found after b's left. */
    fake_alloc.free_result_once = CUDA_ERROR_INVALID_VALUE;
    CHECK(pyxbuf__cuda_pool_free(0, b, NULL, &pooled, &call) == CUDA_ERROR_INVALID_VALUE);
    CHECK(pyxbuf__cuda_pool_allocation(b, &start, &size) && start == b && size == 0x300);
    CHECK(pyxbuf__cuda_pool_free(0, b, NULL, &pooled, &call) == CUDA_SUCCESS);
    CHECK(!pyxbuf__cuda_pool_allocation(b, &start, &size));
    CHECK(pyxbuf__cuda_pool_allocation(a + 0x2FF, &start, &size) && start == a);

    /* Many at once (the table grows, and entries move back as others are
     * forgotten): every live one found, every freed one gone. */
    enum { MANY = 1000 };
    static CUdeviceptr many[MANY];
    for (int i = 0; i < MANY; i++)
        CHECK(pyxbuf__cuda_pool_alloc(0, (size_t)(1 + i % 3) * 0x100, NULL, &many[i], &pooled,
                                      &call) == CUDA_SUCCESS);
    for (int i = 0; i < MANY; i += 2)
        CHECK(pyxbuf__cuda_pool_free(0, many[i], NULL, &pooled, &call) == CUDA_SUCCESS);
    int wrong = 0;
    for (int i = 0; i < MANY; i++) {
        int found = pyxbuf__cuda_pool_allocation(many[i], &start, &size);
        if (i % 2 == 0 ? found : !found || start != many[i] || size != (size_t)(1 + i % 3) * 0x100)
            wrong++;
    }
    CHECK_INT_EQ(wrong, 0);
    CHECK(pyxbuf__cuda_pool_allocation(a, &start, &size) && start == a);
}

TEST_CASE(shareable_pool_memory_is_exported_where_its_allocation_starts) {
    in_child(check_export_names_the_allocation, NULL);
}

/* Eight threads allocate from the shareable pool, export, look up and free
 * at once: cuda_pool.c's table of allocations (growing, entries placed
 * again as others leave) and its choice of pool, under their locks.
 * `make test-tsan` runs it under ThreadSanitizer. */
#define TABLE_ROUNDS 200
#define TABLE_LIVE 24 /* allocations each thread holds at most */

static void *pool_table_worker(void *arg) {
    ipc_worker *w = arg;
    CUdeviceptr live[TABLE_LIVE], start = 0;
    size_t sizes[TABLE_LIVE], size = 0;
    int pooled = 0, held = 0;
    const char *call = NULL;
    pyxbuf_error err;
    pthread_barrier_wait(w->start);
    for (int round = 0; round < TABLE_ROUNDS; round++) {
        while (held < TABLE_LIVE) { /* fill up, sizes 256 to 1280 bytes */
            sizes[held] = 0x100u * (size_t)(1 + (round + held + w->index) % 5);
            TCHECK(pyxbuf__cuda_pool_alloc(0, sizes[held], NULL, &live[held], &pooled, &call) ==
                   CUDA_SUCCESS);
            held++;
        }
        for (int i = 0; i < held; i++) { /* every one found, from inside it too */
            TCHECK(pyxbuf__cuda_pool_allocation(live[i] + sizes[i] - 1, &start, &size) &&
                   start == live[i] && size == sizes[i]);
        }
        unsigned char h[PYXBUF_IPC_BACKEND_HANDLE_MAX];
        size_t n = sizeof h;
        int fd = -1;
        TCHECK(pyxbuf__cuda_ipc_export(0, (void *)(uintptr_t)(live[round % held] + 8), h, &n, &fd,
                                       &err) == 0);
        for (int i = round % 2; i < held; i += 2) { /* half of them go */
            TCHECK(pyxbuf__cuda_pool_free(0, live[i], NULL, &pooled, &call) == CUDA_SUCCESS);
            TCHECK(!pyxbuf__cuda_pool_allocation(live[i], &start, &size));
            live[i] = 0;
        }
        int kept = 0;
        for (int i = 0; i < held; i++)
            if (live[i] != 0) live[kept] = live[i], sizes[kept++] = sizes[i];
        held = kept;
    }
    for (int i = 0; i < held; i++)
        TCHECK(pyxbuf__cuda_pool_free(0, live[i], NULL, &pooled, &call) == CUDA_SUCCESS);
    return NULL;
}

static void check_pool_table_from_8_threads(void) {
    fake.uuid_here = 0xAB;
    fake_alloc.supported_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pyxbuf__cuda_pools_init(&fake_pool_api, 1);
    pyxbuf__cuda_ipc_init(&fake_api_with_pools);
    set_shareable(1);
    run_ipc_threads(pool_table_worker);
    CHECK_INT_EQ(fake_alloc.creates, 1); /* the shareable pool made once */
    CUdeviceptr any = 0;
    size_t size = 0;
    CHECK(!pyxbuf__cuda_pool_allocation(FAKE_ALLOCATIONS + 0x100, &any, &size)); /* all freed */
}

TEST_CASE(shareable_pool_table_from_8_threads) {
    in_child(check_pool_table_from_8_threads, NULL);
}

/* The real driver: cuMemAlloc memory has a handle; the stream-ordered
 * pool's memory is refused, naming the pool. (Two processes: run-on-gpu.sh.) */
TEST_CASE(ipc_export_shares_cumemalloc_and_shareable_pool_memory) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    unsigned char h[PYXBUF_IPC_BACKEND_HANDLE_MAX];
    size_t n = sizeof h;
    void *d = NULL, *pooled = NULL;
    int fd = 0;
    pyxbuf_error err;
    CHECK_OK(b->alloc(b->ctx, 0, 1 << 20, &d, &last));
    CHECK_OK(b->ipc_export(b->ctx, 0, offset(d, 4096), h, &n, &fd, &last));
    CHECK(n > 64 && memcmp(h, "pyxbcuda", 8) == 0);
    CHECK_OK(b->free(b->ctx, 0, d, &last));
    CHECK_OK(b->alloc_async(b->ctx, 0, 1 << 20, 0, &pooled, &last));
    n = sizeof h;
    int rc = b->ipc_export(b->ctx, 0, pooled, h, &n, &fd, &err);
    fprintf(stderr, "default pool memory: rc %d: %s\n", rc, rc ? err.message : "(shared)");
    CHECK_INT_EQ(rc, PYXBUF_EDRIVER);
    CHECK_CONTAINS(err.message, "cannot be opened by other processes");
    CHECK_OK(b->free_async(b->ctx, 0, pooled, 0, &last));
    CHECK_OK(b->synchronize(b->ctx, 0, 0, &last));
    /* device_pool_shareable: pyxbuf's own pool, whose memory goes as export
     * data with the pool's descriptor beside it. */
    pyxbuf_transfer_config before = {.size = sizeof before}, c;
    pyxbuf_transfer_config_get(&before);
    c = before, c.device_pool_shareable = 1;
    CHECK_OK(pyxbuf_transfer_config_set(&c, &last));
    CHECK_OK(b->alloc_async(b->ctx, 0, 1 << 20, 0, &pooled, &last));
    CHECK_OK(b->synchronize(b->ctx, 0, 0, &last));
    n = sizeof h;
    fd = -1;
    rc = b->ipc_export(b->ctx, 0, offset(pooled, 256), h, &n, &fd, &err);
    fprintf(stderr, "shareable pool memory: rc %d, fd %d: %s\n", rc, fd,
            rc ? err.message : "(shared)");
    if (rc == 0) CHECK(fd >= 0 && memcmp(h, "pyxbcuda", 8) == 0);
    else CHECK_CONTAINS(err.message, "this device has no pool other processes can open");
    CHECK_OK(b->free_async(b->ctx, 0, pooled, 0, &last));
    CHECK_OK(b->synchronize(b->ctx, 0, 0, &last));
    CHECK_OK(pyxbuf_transfer_config_set(&before, &last));
}

/* ------------------------------------------------------------------------- */
/* GPU                                                                        */
/* ------------------------------------------------------------------------- */

TEST_CASE(alloc_copy_roundtrip) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    const size_t n = ((size_t)1 << 20) + 3;
    const int64_t streams[] = {PYXBUF_STREAM_NONE, 0, 1, 2};
    unsigned char *src = malloc(n), *dst = malloc(n);
    void *d = NULL;
    CHECK_OK(b->alloc(b->ctx, 0, n, &d, &last));
    CHECK(d != NULL);
    for (unsigned i = 0; i < sizeof streams / sizeof *streams; i++) {
        fill(src, n, i);
        memset(dst, 0, n);
        CHECK_OK(b->copy_from_host(b->ctx, 0, d, src, n, streams[i], &last));
        CHECK_OK(b->copy_to_host(b->ctx, 0, dst, d, n, streams[i], &last));
        CHECK(memcmp(src, dst, n) == 0);
    }
    /* A piece in the middle, at odd offsets. */
    memset(dst, 0, n);
    CHECK_OK(b->copy_from_host(b->ctx, 0, offset(d, 17), src + 5, 1000, 0, &last));
    CHECK_OK(b->copy_to_host(b->ctx, 0, dst, offset(d, 17), 1000, 0, &last));
    CHECK(memcmp(dst, src + 5, 1000) == 0);
    CHECK_OK(b->free(b->ctx, 0, d, &last));
    free(src);
    free(dst);
}

static uint64_t pool_takes(void) {
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st);
    return st.allocations + st.reuses;
}

/* Large pageable copies go through the pinned staging pipeline (here with
 * small chunks, so every boundary is crossed); page-locked memory does not. */
TEST_CASE(staged_copies_round_trip) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    pyxbuf_transfer_config saved = {.size = sizeof saved}, small;
    pyxbuf_transfer_config_get(&saved);
    small = saved;
    small.enabled = 1, small.threshold = 1, small.chunk = 64 << 10, small.buffers = 3;
    small.threads = 4;
    CHECK_OK(pyxbuf_transfer_config_set(&small, &last));
    const size_t sizes[] = {1, (64 << 10) - 1, 64 << 10, (5 << 16) + 123, (size_t)40 << 20};
    const int64_t streams[] = {0, 1, 2};
    for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *src = malloc(n), *dst = malloc(n);
        void *d = NULL;
        CHECK_OK(b->alloc(b->ctx, 0, n, &d, &last));
        fill(src, n, i);
        memset(dst, 0, n);
        uint64_t takes = pool_takes();
        int64_t s = streams[i % 3];
        CHECK_OK(pyxbuf__copy_from_host(b, 0, d, src, n, s, &last));
        CHECK_OK(pyxbuf__copy_to_host(b, 0, dst, d, n, s, &last));
        CHECK(memcmp(src, dst, n) == 0);
        CHECK(pool_takes() > takes); /* staged both ways */
        CHECK_OK(b->free(b->ctx, 0, d, &last));
        free(src);
        free(dst);
    }
    /* Page-locked source and destination: the direct call, no staging. */
    size_t n = (size_t)3 << 20;
    void *pinned = NULL, *d = NULL;
    CHECK_OK(b->host_alloc(b->ctx, 0, n, &pinned, &last));
    CHECK_OK(b->alloc(b->ctx, 0, n, &d, &last));
    fill(pinned, n, 9);
    uint64_t takes = pool_takes();
    CHECK_OK(pyxbuf__copy_from_host(b, 0, d, pinned, n, 0, &last));
    memset(pinned, 0, n);
    CHECK_OK(pyxbuf__copy_to_host(b, 0, pinned, d, n, 0, &last));
    CHECK_INT_EQ(pool_takes(), takes);
    unsigned char *expect = malloc(n);
    fill(expect, n, 9);
    CHECK(memcmp(pinned, expect, n) == 0);
    free(expect);
    CHECK_OK(b->free(b->ctx, 0, d, &last));
    CHECK_OK(b->host_free(b->ctx, 0, pinned, &last));
    /* Events: a query of a finished event says so; a blocking one too. */
    void *ev = NULL;
    CHECK_OK(b->event_record(b->ctx, 0, 0, &ev, &last));
    CHECK_INT_EQ(b->event_query(b->ctx, 0, ev, 1, &last), 1);
    CHECK_INT_EQ(b->event_query(b->ctx, 0, ev, 0, &last), 1);
    CHECK_OK(b->event_destroy(b->ctx, 0, ev, &last));
    CHECK_OK(pyxbuf_transfer_config_set(&saved, &last));
    pyxbuf_pinned_pool_trim();
    pyxbuf_pinned_pool_stats st;
    pyxbuf_pinned_pool_stats_get(&st);
    CHECK_INT_EQ(st.held_bytes, 0);
}

TEST_CASE(device_to_device_copy) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    const size_t n = (size_t)3 << 20;
    unsigned char *src = malloc(n), *dst = malloc(n);
    void *a = NULL, *c = NULL;
    CHECK_OK(b->alloc(b->ctx, 0, n, &a, &last));
    CHECK_OK(b->alloc(b->ctx, 0, n, &c, &last));
    fill(src, n, 7);
    CHECK_OK(b->copy_from_host(b->ctx, 0, a, src, n, 0, &last));
    CHECK_OK(b->copy_on_device(b->ctx, 0, c, 0, a, n, 1, &last));
    CHECK_OK(b->copy_to_host(b->ctx, 0, dst, c, n, 0, &last));
    CHECK(memcmp(src, dst, n) == 0);
    /* Offsets: c[1..100] = a[5..104]; c[0] is untouched. */
    CHECK_OK(b->copy_on_device(b->ctx, 0, offset(c, 1), 0, offset(a, 5), 100, 2, &last));
    CHECK_OK(b->copy_to_host(b->ctx, 0, dst, c, 101, 0, &last));
    CHECK(dst[0] == src[0]);
    CHECK(memcmp(dst + 1, src + 5, 100) == 0);
    CHECK_OK(b->free(b->ctx, 0, a, &last));
    CHECK_OK(b->free(b->ctx, 0, c, &last));
    free(src);
    free(dst);
}

static void check_not_cuda(const void *p) {
    const pyxbuf_backend *b = cuda();
    pyxbuf_error err;
    pyxbuf_device dev = {0, 0};
    CHECK_INT_EQ(b->pointer_query(b->ctx, p, &dev, &err), PYXBUF_EDEVICE);
    CHECK_CONTAINS(err.message, "is not CUDA memory (cuPointerGetAttributes: ");
}

TEST_CASE(pointer_query_on_device_and_host_memory) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    pyxbuf_device dev = {0, 0};
    void *d = NULL;
    CHECK_OK(b->alloc(b->ctx, 0, 4096, &d, &last));
    /* No context current on this thread: the backend finds one. */
    CHECK_OK(b->pointer_query(b->ctx, d, &dev, &last));
    CHECK_INT_EQ(dev.device_type, PYXBUF_DL_CUDA);
    CHECK_INT_EQ(dev.device_id, 0);
    dev = (pyxbuf_device){0, 0};
    CHECK_OK(b->pointer_query(b->ctx, offset(d, 100), &dev, &last));
    CHECK_INT_EQ(dev.device_type, PYXBUF_DL_CUDA);
    CHECK_INT_EQ(dev.device_id, 0);

    int on_stack = 0;
    void *on_heap = malloc(64);
    check_not_cuda(&on_stack);
    check_not_cuda(on_heap);
    check_not_cuda(NULL);

    /* Pinned host and managed memory, from the test's own driver calls. */
    driver_enter();
    void *pinned = NULL;
    CU_OK(drv.mem_alloc_host(&pinned, 4096));
    dev = (pyxbuf_device){0, 0};
    CHECK_OK(b->pointer_query(b->ctx, pinned, &dev, &last));
    CHECK_INT_EQ(dev.device_type, PYXBUF_DL_CUDA_HOST);
    CU_OK(drv.mem_free_host(pinned));
    CUdeviceptr managed = 0;
    CUresult r = drv.mem_alloc_managed(&managed, 4096, CU_MEM_ATTACH_GLOBAL);
    if (r == 0) {
        dev = (pyxbuf_device){0, 0};
        CHECK_OK(b->pointer_query(b->ctx, (void *)(uintptr_t)managed, &dev, &last));
        CHECK_INT_EQ(dev.device_type, PYXBUF_DL_CUDA_MANAGED);
        CHECK_INT_EQ(dev.device_id, 0);
        CU_OK(drv.mem_free(managed));
    } else {
        fprintf(stderr, "note: managed memory unavailable here (CUDA error %d); not checked\n", r);
    }
    /* The same answers with a context current on the caller's thread. */
    dev = (pyxbuf_device){0, 0};
    CHECK_OK(b->pointer_query(b->ctx, d, &dev, &last));
    CHECK_INT_EQ(dev.device_type, PYXBUF_DL_CUDA);
    check_not_cuda(on_heap);
    driver_leave();

    CHECK_OK(b->free(b->ctx, 0, d, &last));
    free(on_heap);
}

TEST_CASE(events_order_a_copy) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    const size_t n = (size_t)64 << 20, tail = 4096;
    unsigned char *host = malloc(tail);
    void *d = NULL, *ev = NULL;
    CHECK_OK(b->alloc(b->ctx, 0, n, &d, &last));
    driver_enter();
    CUstream producer, consumer;
    CU_OK(drv.stream_create(&producer, CU_STREAM_NON_BLOCKING));
    CU_OK(drv.stream_create(&consumer, CU_STREAM_NON_BLOCKING));

    /* The producer writes on its stream and records an event; the consumer's
     * stream waits on it, so the consumer's copy sees the write. */
    CU_OK(drv.memset_d8_async((CUdeviceptr)(uintptr_t)d, 0xAB, n, producer));
    CHECK_OK(b->event_record(b->ctx, 0, stream_int(producer), &ev, &last));
    CHECK(ev != NULL);
    CHECK_OK(b->event_wait(b->ctx, 0, ev, stream_int(consumer), &last));
    memset(host, 0, tail);
    CHECK_OK(b->copy_to_host(b->ctx, 0, host, offset(d, n - tail), tail, stream_int(consumer),
                             &last));
    CHECK(all_equal(host, tail, 0xAB));
    CHECK_OK(b->synchronize(b->ctx, 0, stream_int(producer), &last));
    CHECK_INT_EQ(drv.event_query((CUevent)ev), 0);
    CHECK_OK(b->event_destroy(b->ctx, 0, ev, &last));

    /* synchronize: after it returns, a copy on another stream sees the write. */
    CU_OK(drv.memset_d8_async((CUdeviceptr)(uintptr_t)d, 0xCD, n, producer));
    CHECK_OK(b->synchronize(b->ctx, 0, stream_int(producer), &last));
    CHECK_OK(b->copy_to_host(b->ctx, 0, host, offset(d, n - tail), tail, PYXBUF_STREAM_NONE,
                             &last));
    CHECK(all_equal(host, tail, 0xCD));

    /* Events on the default streams; NULL events and STREAM_NONE are no-ops. */
    const int64_t defaults[] = {0, 1, 2, PYXBUF_STREAM_NONE};
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
        ev = NULL;
        CHECK_OK(b->event_record(b->ctx, 0, defaults[i], &ev, &last));
        CHECK_OK(b->event_wait(b->ctx, 0, ev, stream_int(consumer), &last));
        CHECK_OK(b->synchronize(b->ctx, 0, defaults[i], &last));
        CHECK_OK(b->event_destroy(b->ctx, 0, ev, &last));
    }
    CHECK_OK(b->event_wait(b->ctx, 0, NULL, stream_int(consumer), &last));
    CHECK_OK(b->event_wait(b->ctx, 0, (void *)0x1, PYXBUF_STREAM_NONE, &last));
    CHECK_OK(b->event_destroy(b->ctx, 0, NULL, &last));

    CU_OK(drv.stream_synchronize(consumer));
    CU_OK(drv.stream_destroy(producer));
    CU_OK(drv.stream_destroy(consumer));
    driver_leave();
    CHECK_OK(b->free(b->ctx, 0, d, &last));
    free(host);
}

/* Destroyed events go back to a per-device pool: the next record reuses the
 * handle, and each reuse still orders exactly its own record's work. */
TEST_CASE(reused_events_order_each_record) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    const size_t n = (size_t)16 << 20, tail = 4096;
    unsigned char *host = malloc(tail);
    void *d = NULL, *first = NULL;
    CHECK_OK(b->alloc(b->ctx, 0, n, &d, &last));
    driver_enter();
    CUstream producer, consumer;
    CU_OK(drv.stream_create(&producer, CU_STREAM_NON_BLOCKING));
    CU_OK(drv.stream_create(&consumer, CU_STREAM_NON_BLOCKING));
    for (int i = 1; i <= 100; i++) {
        void *ev = NULL;
        CU_OK(drv.memset_d8_async((CUdeviceptr)(uintptr_t)d, (unsigned char)i, n, producer));
        CHECK_OK(b->event_record(b->ctx, 0, stream_int(producer), &ev, &last));
        if (i == 1) first = ev;
        else CHECK(ev == first); /* the pool's one event, again */
        CHECK_OK(b->event_wait(b->ctx, 0, ev, stream_int(consumer), &last));
        CHECK_OK(b->event_destroy(b->ctx, 0, ev, &last)); /* before the wait ran */
        CHECK_OK(b->copy_to_host(b->ctx, 0, host, offset(d, n - tail), tail,
                                 stream_int(consumer), &last));
        CHECK(all_equal(host, tail, (unsigned char)i));
    }
    CU_OK(drv.stream_synchronize(producer));
    CU_OK(drv.stream_destroy(producer));
    CU_OK(drv.stream_destroy(consumer));
    driver_leave();
    CHECK_OK(b->free(b->ctx, 0, d, &last));
    free(host);
}

TEST_CASE(error_names_from_driver) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    pyxbuf_error err;
    void *p = (void *)0x1;
    /* 2^60 bytes: refused at once, and the context stays usable. */
    CHECK_INT_EQ(b->alloc(b->ctx, 0, (size_t)1 << 60, &p, &err), PYXBUF_ENOMEM);
    CHECK(p == NULL);
    CHECK_CONTAINS(err.message, "cuMemAlloc of 1152921504606846976 bytes on CUDA device 0 failed: ");
    CHECK_CONTAINS(err.message, "CUDA_ERROR_OUT_OF_MEMORY (");
    CHECK_CONTAINS(err.message, "nvidia-smi");
    fprintf(stderr, "message: %s\n", err.message);

    void *host = malloc(64);
    CHECK(b->free(b->ctx, 0, host, &err) < 0);
    CHECK_CONTAINS(err.message, "cuMemFree of 0x");
    CHECK_CONTAINS(err.message, "CUDA_ERROR_");
    fprintf(stderr, "message: %s\n", err.message);
    free(host);

    /* Still usable afterwards. */
    require_gpu();
}

TEST_CASE(invalid_arguments_are_refused) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    pyxbuf_error err;
    unsigned char host[16] = {0};
    void *p = (void *)0x1, *d = NULL;

    CHECK_INT_EQ(b->alloc(b->ctx, 9999, 16, &p, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "CUDA device 9999 does not exist");
    CHECK_INT_EQ(b->alloc(b->ctx, -1, 16, &p, &err), PYXBUF_EINVAL);
    CHECK_INT_EQ(b->copy_on_device(b->ctx, -1, host, 0, host, 16, 0, &err), PYXBUF_EINVAL);
    CHECK_INT_EQ(b->alloc(b->ctx, 0, 16, NULL, &err), PYXBUF_EINVAL);
    CHECK_INT_EQ(b->event_record(b->ctx, 0, 0, NULL, &err), PYXBUF_EINVAL);
    CHECK_INT_EQ(b->pointer_query(b->ctx, host, NULL, &err), PYXBUF_EINVAL);

    CHECK_OK(b->alloc(b->ctx, 0, 16, &d, &last));
    CHECK_INT_EQ(b->copy_to_host(b->ctx, 0, host, d, 16, -5, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "stream -5 is not a CUDA stream");
    CHECK_INT_EQ(b->copy_to_host(b->ctx, 0, NULL, d, 16, 0, &err), PYXBUF_EINVAL);
    CHECK_CONTAINS(err.message, "NULL destination");

    /* Zero bytes: nothing to do, whatever the pointers. */
    CHECK_OK(b->copy_to_host(b->ctx, 0, NULL, NULL, 0, 0, &last));
    CHECK_OK(b->alloc(b->ctx, 0, 0, &p, &last));
    CHECK(p == NULL);
    CHECK_OK(b->free(b->ctx, 0, NULL, &last));
    CHECK_OK(b->free(b->ctx, 0, d, &last));
}

TEST_CASE(peer_copy_between_devices) {
    require_gpu();
    const pyxbuf_backend *b = cuda();
    pyxbuf_error err;
    void *probe = NULL;
    int rc = b->alloc(b->ctx, 1, 1, &probe, &err);
    if (rc == PYXBUF_EINVAL) {
        fprintf(stderr, "SKIP: needs two CUDA devices: %s\n", err.message);
        exit(77);
    }
    CHECK_INT_EQ(rc, 0);
    CHECK_OK(b->free(b->ctx, 1, probe, &last));

    const size_t n = (size_t)2 << 20;
    unsigned char *src = malloc(n), *dst = malloc(n);
    void *a = NULL, *c = NULL;
    pyxbuf_device dev = {0, 0};
    CHECK_OK(b->alloc(b->ctx, 0, n, &a, &last));
    CHECK_OK(b->alloc(b->ctx, 1, n, &c, &last));
    CHECK_OK(b->pointer_query(b->ctx, c, &dev, &last));
    CHECK_INT_EQ(dev.device_type, PYXBUF_DL_CUDA);
    CHECK_INT_EQ(dev.device_id, 1);

    fill(src, n, 3);
    CHECK_OK(b->copy_from_host(b->ctx, 0, a, src, n, 0, &last));
    CHECK_OK(b->copy_on_device(b->ctx, 1, c, 0, a, n, 0, &last));
    CHECK_OK(b->copy_to_host(b->ctx, 1, dst, c, n, 0, &last));
    CHECK(memcmp(src, dst, n) == 0);

    fill(src, n, 11);
    CHECK_OK(b->copy_from_host(b->ctx, 1, c, src, n, 2, &last));
    CHECK_OK(b->copy_on_device(b->ctx, 0, a, 1, c, n, 1, &last));
    CHECK_OK(b->copy_to_host(b->ctx, 0, dst, a, n, 0, &last));
    CHECK(memcmp(src, dst, n) == 0);

    CHECK_OK(b->free(b->ctx, 0, a, &last));
    CHECK_OK(b->free(b->ctx, 1, c, &last));
    free(src);
    free(dst);
}

/* ------------------------------------------------------------------------- */
/* The stream-ordered pool (issue 47, part 3)                                */
/* ------------------------------------------------------------------------- */

/* The pool's own driver calls, for checking what the backend set. Names and
 * values as in cuda.h (c/device/cuda_driver.h cites them). */
typedef struct CUmemPoolHandle_st *CUmemoryPool;
static struct {
    CUresult (*device_get_attribute)(int *value, int attribute, int device);
    CUresult (*default_pool)(CUmemoryPool *pool, int device);
    CUresult (*pool_get)(CUmemoryPool pool, int attribute, void *value);
    CUresult (*pool_set)(CUmemoryPool pool, int attribute, void *value);
} pools;
#define MEMORY_POOLS_SUPPORTED 115
#define RELEASE_THRESHOLD 4

/* Device 0's default pool, or exit 77 when it has none. */
static CUmemoryPool default_pool(void) {
    load(&pools.device_get_attribute, "cuDeviceGetAttribute");
    load(&pools.default_pool, "cuDeviceGetDefaultMemPool");
    load(&pools.pool_get, "cuMemPoolGetAttribute");
    load(&pools.pool_set, "cuMemPoolSetAttribute");
    int supported = 0;
    CU_OK(pools.device_get_attribute(&supported, MEMORY_POOLS_SUPPORTED, drv.device));
    if (!supported) {
        fprintf(stderr, "SKIP: CUDA device 0 has no memory pools (cuMemAlloc is used)\n");
        exit(77);
    }
    CUmemoryPool pool = NULL;
    CU_OK(pools.default_pool(&pool, drv.device));
    return pool;
}

static uint64_t threshold_of(CUmemoryPool pool) {
    uint64_t v = 0;
    CU_OK(pools.pool_get(pool, RELEASE_THRESHOLD, &v));
    return v;
}

static void set_threshold(uint64_t bytes) {
    pyxbuf_transfer_config c = {.size = sizeof c};
    pyxbuf_transfer_config_get(&c);
    c.device_pool_release_threshold = bytes;
    CHECK_OK(pyxbuf_transfer_config_set(&c, &last));
}

TEST_CASE(pooled_allocations_round_trip_on_every_stream) {
    require_gpu();
    driver_enter();
    const pyxbuf_backend *b = cuda();
    CUstream side;
    CU_OK(drv.stream_create(&side, CU_STREAM_NON_BLOCKING));
    const int64_t streams[] = {PYXBUF_STREAM_NONE, 0, 1, 2, stream_int(side)};
    const size_t n = ((size_t)1 << 20) + 3;
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (unsigned i = 0; i < sizeof streams / sizeof *streams; i++) {
        void *d = NULL;
        CHECK_OK(b->alloc_async(b->ctx, 0, n, streams[i], &d, &last));
        CHECK(d != NULL);
        pyxbuf_device where = {0, 0};
        CHECK_OK(b->pointer_query(b->ctx, d, &where, &last));
        CHECK_INT_EQ(where.device_type, PYXBUF_DL_CUDA);
        fill(src, n, i);
        memset(dst, 0, n);
        CHECK_OK(b->copy_from_host(b->ctx, 0, d, src, n, streams[i], &last));
        CHECK_OK(b->copy_to_host(b->ctx, 0, dst, d, n, streams[i], &last));
        CHECK(memcmp(src, dst, n) == 0);
        CHECK_OK(b->free_async(b->ctx, 0, d, streams[i], &last));
    }
    void *none = (void *)0x1;
    CHECK_OK(b->alloc_async(b->ctx, 0, 0, 0, &none, &last)); /* 0 bytes: NULL, as alloc */
    CHECK(none == NULL);
    CHECK_OK(b->free_async(b->ctx, 0, NULL, 0, &last));
    CU_OK(drv.stream_synchronize(side));
    CHECK_OK(b->pool_trim(b->ctx, 0, 0, &last));
    CHECK_INT_EQ(b->alloc_async(b->ctx, 0, 16, -5, &none, &last), PYXBUF_EINVAL);
    CHECK_CONTAINS(last.message, "stream -5 is not a CUDA stream");
    CU_OK(drv.stream_destroy(side));
    free(src);
    free(dst);
    driver_leave();
}

/* The default pool is the process's: pyxbuf raises its release threshold to
 * the configuration's, may lower what it set itself, and leaves a higher
 * value another library set (PyTorch's cudaMallocAsync backend keeps all). */
TEST_CASE(the_default_pools_release_threshold_follows_the_configuration) {
    require_gpu();
    driver_enter();
    const pyxbuf_backend *b = cuda();
    CUmemoryPool pool = default_pool();
    uint64_t original = threshold_of(pool), zero = 0;
    CU_OK(pools.pool_set(pool, RELEASE_THRESHOLD, &zero));
    const uint64_t sizes[] = {(uint64_t)64 << 20, (uint64_t)1 << 40, (uint64_t)32 << 20};
    for (unsigned i = 0; i < 3; i++) {
        set_threshold(sizes[i]);
        void *d = NULL;
        CHECK_OK(b->alloc_async(b->ctx, 0, 256, 0, &d, &last));
        CHECK_INT_EQ(threshold_of(pool), sizes[i]);
        CHECK_OK(b->free_async(b->ctx, 0, d, 0, &last));
    }
    uint64_t all = UINT64_MAX;
    CU_OK(pools.pool_set(pool, RELEASE_THRESHOLD, &all)); /* another library's */
    set_threshold((uint64_t)16 << 20);
    void *d = NULL;
    CHECK_OK(b->alloc_async(b->ctx, 0, 256, 0, &d, &last));
    CHECK(threshold_of(pool) == UINT64_MAX);
    CHECK_OK(b->free_async(b->ctx, 0, d, 0, &last));
    set_threshold(0); /* the default again */
    CU_OK(pools.pool_set(pool, RELEASE_THRESHOLD, &original));
    driver_leave();
}

/* pyxbuf's own block, handed to a consumer on another stream that works on
 * it, then freed: the free is ordered after that stream (device_alloc.c),
 * and the memory comes back; nothing is kept out. */
TEST_CASE(a_device_block_is_freed_after_the_streams_it_was_handed_to) {
    require_gpu();
    driver_enter();
    CUstream consumer, other;
    CU_OK(drv.stream_create(&consumer, CU_STREAM_NON_BLOCKING));
    CU_OK(drv.stream_create(&other, CU_STREAM_NON_BLOCKING));
    uint64_t kept = pyxbuf__device_blocks_kept_out();
    const size_t n = (size_t)64 << 20;
    pyxbuf_device dev = {PYXBUF_DL_CUDA, 0};
    for (int round = 0; round < 4; round++) {
        pyxbuf__device_block *blk = NULL;
        CHECK_OK(pyxbuf__device_block_new(&dev, n, stream_int(other), &blk, &last));
        CHECK(blk != NULL && blk->pooled);
        void *ready = NULL; /* the consumer waits for the allocation, as for any producer */
        CHECK_OK(cuda()->event_record(cuda()->ctx, 0, stream_int(other), &ready, &last));
        CHECK_OK(cuda()->event_wait(cuda()->ctx, 0, ready, stream_int(consumer), &last));
        CHECK_OK(cuda()->event_destroy(cuda()->ctx, 0, ready, &last));
        pyxbuf_view view = {.base = {.buf = blk->ptr}}; /* the consumer's */
        pyxbuf__device_block_used_on(&view, &dev, stream_int(consumer));
        CU_OK(drv.memset_d8_async((CUdeviceptr)(uintptr_t)blk->ptr, 0x5A, n, consumer));
        pyxbuf__device_block_view_released(&view, &dev);
        pyxbuf__device_block_free(blk);
    }
    CU_OK(drv.stream_synchronize(consumer));
    CU_OK(drv.stream_synchronize(other));
    CHECK_INT_EQ(pyxbuf__device_blocks_kept_out(), kept);
    CU_OK(drv.stream_destroy(consumer));
    CU_OK(drv.stream_destroy(other));
    CHECK_OK(cuda()->pool_trim(cuda()->ctx, 0, 0, &last));
    driver_leave();
}

TEST_MAIN(TEST_ENTRY(missing_driver_is_a_clear_error), TEST_ENTRY(backend_describes_cuda),
          TEST_ENTRY(ipc_handles_over_a_scripted_driver),
          TEST_ENTRY(pool_ipc_over_a_scripted_driver),
          TEST_ENTRY(pool_ipc_from_8_threads),
          TEST_ENTRY(shareable_pools_over_a_scripted_driver),
          TEST_ENTRY(shareable_pool_memory_is_exported_where_its_allocation_starts),
          TEST_ENTRY(shareable_pool_table_from_8_threads),
          TEST_ENTRY(ipc_export_shares_cumemalloc_and_shareable_pool_memory),
          TEST_ENTRY(alloc_copy_roundtrip), TEST_ENTRY(staged_copies_round_trip),
          TEST_ENTRY(device_to_device_copy),
          TEST_ENTRY(pointer_query_on_device_and_host_memory), TEST_ENTRY(events_order_a_copy),
          TEST_ENTRY(reused_events_order_each_record),
          TEST_ENTRY(error_names_from_driver), TEST_ENTRY(invalid_arguments_are_refused),
          TEST_ENTRY(peer_copy_between_devices),
          TEST_ENTRY(pooled_allocations_round_trip_on_every_stream),
          TEST_ENTRY(the_default_pools_release_threshold_follows_the_configuration),
          TEST_ENTRY(a_device_block_is_freed_after_the_streams_it_was_handed_to))
