/* cuda.c -- the CUDA backend, over the CUDA Driver API.
 *
 * libcuda.so.1 is opened with dlopen on first use (as cudarc and PyTorch do),
 * so libpyxbuf builds without cuda.h and runs on machines with no GPU; there
 * every backend function fails with PYXBUF_EDRIVER and says why. The
 * environment variable PYXBUF_CUDA_LIBRARY, read once at load time, names
 * another library (tests use it to force the missing-driver path).
 *
 * All work happens in each device's primary context -- the one PyTorch, CuPy
 * and the CUDA runtime use -- retained once per ordinal and pushed around each
 * operation, so pointers, streams and events from those libraries are valid
 * here. Streams follow DLPack's integer convention (see pyxbuf.h). The
 * stream-ordered allocations (alloc_async) come from each device's default
 * memory pool, kept by cuda_pool.c; memory shared with other processes goes
 * through cuda_ipc.c. */

#include "device/cuda_driver.h" /* device.h, and the driver's types */
#include "base/platform.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry points used, under the names libcuda exports (cuda.h maps the
 * plain names onto the _v2 ones with macros). */
typedef struct cuda_api {
    CUresult (*init)(unsigned int flags);
    CUresult (*device_get_count)(int *count);
    CUresult (*device_get)(CUdevice *device, int ordinal);
    CUresult (*primary_retain)(CUcontext *ctx, CUdevice device);
    CUresult (*primary_get_state)(CUdevice device, unsigned int *flags, int *active);
    CUresult (*ctx_push)(CUcontext ctx);
    CUresult (*ctx_pop)(CUcontext *ctx);
    CUresult (*ctx_get_current)(CUcontext *ctx);
    CUresult (*get_error_name)(CUresult error, const char **name);
    CUresult (*get_error_string)(CUresult error, const char **text);
    CUresult (*pointer_get_attributes)(unsigned int count, CUpointer_attribute *attributes,
                                       void **data, CUdeviceptr ptr);
    CUresult (*mem_alloc)(CUdeviceptr *ptr, size_t bytes);
    CUresult (*mem_free)(CUdeviceptr ptr);
    CUresult (*memcpy_htod_async)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
    CUresult (*memcpy_dtoh_async)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
    CUresult (*memcpy_dtod_async)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
    CUresult (*memcpy_peer_async)(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                  CUcontext src_ctx, size_t bytes, CUstream s);
    CUresult (*stream_synchronize)(CUstream s);
    CUresult (*stream_wait_event)(CUstream s, CUevent event, unsigned int flags);
    CUresult (*event_create)(CUevent *event, unsigned int flags);
    CUresult (*event_record)(CUevent event, CUstream s);
    CUresult (*event_destroy)(CUevent event);
    CUresult (*mem_host_alloc)(void **ptr, size_t bytes, unsigned int flags);
    CUresult (*mem_free_host)(void *ptr);
    CUresult (*event_query)(CUevent event);
    CUresult (*event_synchronize)(CUevent event);
} cuda_api;

/* One entry point: its exported name and its slot in a table of pointers. */
typedef struct symbol_slot {
    const char *name;
    size_t offset;
} symbol_slot;

static const symbol_slot cuda_symbols[] = {
    {"cuInit", offsetof(cuda_api, init)},
    {"cuDeviceGetCount", offsetof(cuda_api, device_get_count)},
    {"cuDeviceGet", offsetof(cuda_api, device_get)},
    {"cuDevicePrimaryCtxRetain", offsetof(cuda_api, primary_retain)},
    {"cuDevicePrimaryCtxGetState", offsetof(cuda_api, primary_get_state)},
    {"cuCtxPushCurrent_v2", offsetof(cuda_api, ctx_push)},
    {"cuCtxPopCurrent_v2", offsetof(cuda_api, ctx_pop)},
    {"cuCtxGetCurrent", offsetof(cuda_api, ctx_get_current)},
    {"cuGetErrorName", offsetof(cuda_api, get_error_name)},
    {"cuGetErrorString", offsetof(cuda_api, get_error_string)},
    {"cuPointerGetAttributes", offsetof(cuda_api, pointer_get_attributes)},
    {"cuMemAlloc_v2", offsetof(cuda_api, mem_alloc)},
    {"cuMemFree_v2", offsetof(cuda_api, mem_free)},
    {"cuMemcpyHtoDAsync_v2", offsetof(cuda_api, memcpy_htod_async)},
    {"cuMemcpyDtoHAsync_v2", offsetof(cuda_api, memcpy_dtoh_async)},
    {"cuMemcpyDtoDAsync_v2", offsetof(cuda_api, memcpy_dtod_async)},
    {"cuMemcpyPeerAsync", offsetof(cuda_api, memcpy_peer_async)},
    {"cuStreamSynchronize", offsetof(cuda_api, stream_synchronize)},
    {"cuStreamWaitEvent", offsetof(cuda_api, stream_wait_event)},
    {"cuEventCreate", offsetof(cuda_api, event_create)},
    {"cuEventRecord", offsetof(cuda_api, event_record)},
    {"cuEventDestroy_v2", offsetof(cuda_api, event_destroy)},
    {"cuMemHostAlloc", offsetof(cuda_api, mem_host_alloc)},
    {"cuMemFreeHost", offsetof(cuda_api, mem_free_host)},
    {"cuEventQuery", offsetof(cuda_api, event_query)},
    {"cuEventSynchronize", offsetof(cuda_api, event_synchronize)},
};

/* dlsym returns an object pointer; it is copied into the function pointer
 * slot byte for byte, which POSIX guarantees to work. */
_Static_assert(sizeof(void *) == sizeof(CUresult (*)(void)),
               "function and object pointers must have the same size");

/* ------------------------------------------------------------------------- */
/* Loading                                                                    */
/* ------------------------------------------------------------------------- */

/* Events kept for reuse per device: every device acquisition records one
 * (the view's sync_event) and destroys it at release, and cuEventCreate plus
 * cuEventDestroy cost more than the rest of a CuPy acquisition's driver work.
 * Reuse is safe: cuStreamWaitEvent waits for the record current when it was
 * called, not for later ones, and a view's event is not used after release. */
#define EVENT_POOL_SIZE 32
typedef struct event_pool {
    CUevent events[EVENT_POOL_SIZE];
    int count;
} event_pool;

static struct {
    int ready;          /* 1 once the library is loaded and cuInit succeeded */
    int32_t code;       /* the failure code when not ready */
    char why[PYXBUF_ERROR_MESSAGE_SIZE];
    cuda_api api;
    int device_count;
    CUcontext *primary; /* device_count entries; NULL until retained */
    event_pool *pools;  /* device_count entries */
    pthread_mutex_t lock; /* guards primary[] and pools[] */
    pyxbuf__cuda_pool_api pool_api; /* all resolved, or none (no pools) */
    pyxbuf__cuda_ipc_api ipc_api;   /* all resolved (the UUID call aside), or none */
} drv = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void driver_unavailable(int32_t code, const char *fmt, ...) PYXBUF_PRINTF(2, 3);
static void driver_unavailable(int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(drv.why, sizeof drv.why, fmt, ap);
    va_end(ap);
    drv.code = code;
    drv.ready = 0;
}

static const char *error_name(CUresult r) {
    const char *s = NULL;
    if (drv.api.get_error_name == NULL || drv.api.get_error_name(r, &s) != CUDA_SUCCESS || !s)
        return "CUDA_ERROR_UNKNOWN_CODE";
    return s;
}

static const char *error_string(CUresult r) {
    const char *s = NULL;
    if (drv.api.get_error_string == NULL || drv.api.get_error_string(r, &s) != CUDA_SUCCESS ||
        !s)
        return "an error code this driver does not describe";
    return s;
}

/* The stream-ordered allocator's entry points (CUDA 11.2), all or none. */
static const symbol_slot pool_symbols[] = {
    {"cuDeviceGet", offsetof(pyxbuf__cuda_pool_api, device_get)},
    {"cuDeviceGetAttribute", offsetof(pyxbuf__cuda_pool_api, device_get_attribute)},
    {"cuDeviceGetDefaultMemPool", offsetof(pyxbuf__cuda_pool_api, device_get_default_mem_pool)},
    {"cuMemPoolGetAttribute", offsetof(pyxbuf__cuda_pool_api, mem_pool_get_attribute)},
    {"cuMemPoolSetAttribute", offsetof(pyxbuf__cuda_pool_api, mem_pool_set_attribute)},
    {"cuMemPoolTrimTo", offsetof(pyxbuf__cuda_pool_api, mem_pool_trim_to)},
    {"cuMemAllocFromPoolAsync", offsetof(pyxbuf__cuda_pool_api, mem_alloc_from_pool_async)},
    {"cuMemFreeAsync", offsetof(pyxbuf__cuda_pool_api, mem_free_async)},
};

/* Fill `table` from `slots`: 1, or 0 at the first name the library lacks. */
static int resolve_slots(void *lib, const symbol_slot *slots, size_t n, void *table) {
    for (size_t i = 0; i < n; i++) {
        void *sym = pyxbuf__library_symbol(lib, slots[i].name);
        if (sym == NULL) return 0;
        memcpy((char *)table + slots[i].offset, &sym, sizeof sym);
    }
    return 1;
}

/* cuMemPoolCreate on its own: without it there are no shareable pools. */
static int resolve_pool_symbols(void *lib) {
    if (!resolve_slots(lib, pool_symbols, sizeof pool_symbols / sizeof *pool_symbols,
                       &drv.pool_api))
        return 0;
    void *create = pyxbuf__library_symbol(lib, "cuMemPoolCreate");
    memcpy((char *)&drv.pool_api + offsetof(pyxbuf__cuda_pool_api, mem_pool_create), &create,
           sizeof create);
    return 1;
}

/* Interprocess memory handles (CUDA 4.1; cuIpcOpenMemHandle_v2 is CUDA 11's
 * name for it), all or none; cuDeviceGetUuid on its own. */
static const symbol_slot ipc_symbols[] = {
    {"cuDeviceGet", offsetof(pyxbuf__cuda_ipc_api, device_get)},
    {"cuMemGetAddressRange_v2", offsetof(pyxbuf__cuda_ipc_api, mem_get_address_range)},
    {"cuPointerGetAttributes", offsetof(pyxbuf__cuda_ipc_api, pointer_get_attributes)},
    {"cuIpcGetMemHandle", offsetof(pyxbuf__cuda_ipc_api, ipc_get_mem_handle)},
    {"cuIpcOpenMemHandle_v2", offsetof(pyxbuf__cuda_ipc_api, ipc_open_mem_handle)},
    {"cuIpcCloseMemHandle", offsetof(pyxbuf__cuda_ipc_api, ipc_close_mem_handle)},
    {"cuGetErrorName", offsetof(pyxbuf__cuda_ipc_api, get_error_name)},
    {"cuGetErrorString", offsetof(pyxbuf__cuda_ipc_api, get_error_string)},
};

/* Pool memory shared (CUDA 11.2), all or none, apart from the rest. */
static const symbol_slot pool_ipc_symbols[] = {
    {"cuMemPoolExportToShareableHandle",
     offsetof(pyxbuf__cuda_ipc_api, mem_pool_export_to_shareable_handle)},
    {"cuMemPoolImportFromShareableHandle",
     offsetof(pyxbuf__cuda_ipc_api, mem_pool_import_from_shareable_handle)},
    {"cuMemPoolExportPointer", offsetof(pyxbuf__cuda_ipc_api, mem_pool_export_pointer)},
    {"cuMemPoolImportPointer", offsetof(pyxbuf__cuda_ipc_api, mem_pool_import_pointer)},
    {"cuMemFree_v2", offsetof(pyxbuf__cuda_ipc_api, mem_free)},
};

static int resolve_ipc_symbols(void *lib) {
    if (!resolve_slots(lib, ipc_symbols, sizeof ipc_symbols / sizeof *ipc_symbols, &drv.ipc_api))
        return 0;
    void *uuid = pyxbuf__library_symbol(lib, "cuDeviceGetUuid");
    memcpy((char *)&drv.ipc_api + offsetof(pyxbuf__cuda_ipc_api, device_get_uuid), &uuid,
           sizeof uuid);
    pyxbuf__cuda_ipc_api pools;
    memset(&pools, 0, sizeof pools);
    if (resolve_slots(lib, pool_ipc_symbols, sizeof pool_ipc_symbols / sizeof *pool_ipc_symbols,
                      &pools)) {
        drv.ipc_api.mem_pool_export_to_shareable_handle = pools.mem_pool_export_to_shareable_handle;
        drv.ipc_api.mem_pool_import_from_shareable_handle =
            pools.mem_pool_import_from_shareable_handle;
        drv.ipc_api.mem_pool_export_pointer = pools.mem_pool_export_pointer;
        drv.ipc_api.mem_pool_import_pointer = pools.mem_pool_import_pointer;
        drv.ipc_api.mem_free = pools.mem_free;
    }
    return 1;
}

static int resolve_symbols(void *lib, const char *library) {
    for (size_t i = 0; i < sizeof cuda_symbols / sizeof *cuda_symbols; i++) {
        void *sym = pyxbuf__library_symbol(lib, cuda_symbols[i].name);
        if (sym == NULL) {
            memset(&drv.api, 0, sizeof drv.api);
            driver_unavailable(PYXBUF_EDRIVER,
                               "the CUDA driver %s has no %s: it is older than pyxbuf needs "
                               "(CUDA 10 or newer); update the NVIDIA driver",
                               library, cuda_symbols[i].name);
            return -1;
        }
        memcpy((char *)&drv.api + cuda_symbols[i].offset, &sym, sizeof sym);
    }
    return 0;
}

static const char *init_hint(CUresult r) {
    switch (r) {
    case CUDA_ERROR_NO_DEVICE:
        return "no GPU is visible to this process: check nvidia-smi and CUDA_VISIBLE_DEVICES";
    case CUDA_ERROR_STUB_LIBRARY:
        return "this is the CUDA toolkit's stub library, not a driver: install the NVIDIA "
               "driver, or make sure its libcuda.so.1 comes first in the library path";
    default:
        return "check that the NVIDIA driver and kernel module are installed and match "
               "(nvidia-smi), or copy the data to the host on a machine where they work";
    }
}

static void load_driver(void) {
    const char *library = getenv("PYXBUF_CUDA_LIBRARY");
    if (library == NULL || library[0] == '\0') library = pyxbuf__cuda_driver_name();
    void *lib = pyxbuf__library_open(library);
    if (lib == NULL) {
        const char *why = pyxbuf__library_error();
        driver_unavailable(PYXBUF_EDRIVER,
                           "no CUDA driver found (%s): %s; this machine cannot read CUDA "
                           "memory \xe2\x80\x94 install the NVIDIA driver or copy the data to "
                           "the host on a machine that has one",
                           library, why);
        return;
    }
    if (resolve_symbols(lib, library) != 0) {
        pyxbuf__library_close(lib);
        return;
    }
    int have_pools = resolve_pool_symbols(lib);
    int have_ipc = resolve_ipc_symbols(lib);
    const char *call = "cuInit(0)";
    CUresult r = drv.api.init(0);
    int count = 0;
    if (r == CUDA_SUCCESS) {
        call = "cuDeviceGetCount";
        r = drv.api.device_get_count(&count);
    }
    if (r != CUDA_SUCCESS) {
        /* libcuda stays loaded: unloading it after cuInit is not supported. */
        driver_unavailable(PYXBUF_EDRIVER,
                           "the CUDA driver (%s) is present but %s failed: %s (%s); %s", library,
                           call, error_name(r), error_string(r), init_hint(r));
        return;
    }
    if (count <= 0) {
        driver_unavailable(PYXBUF_EDRIVER,
                           "the CUDA driver (%s) sees no CUDA device; %s", library,
                           init_hint(CUDA_ERROR_NO_DEVICE));
        return;
    }
    drv.primary = calloc((size_t)count, sizeof *drv.primary);
    drv.pools = calloc((size_t)count, sizeof *drv.pools);
    if (drv.primary == NULL || drv.pools == NULL) {
        free(drv.primary);
        free(drv.pools);
        driver_unavailable(PYXBUF_ENOMEM, "out of memory setting up the CUDA backend");
        return;
    }
    pyxbuf__cuda_pools_init(have_pools ? &drv.pool_api : NULL, count);
    pyxbuf__cuda_ipc_init(have_ipc ? &drv.ipc_api : NULL);
    drv.device_count = count;
    drv.ready = 1;
}

/* Load the driver once per process; 0 when usable, else the stored error. */
static int driver_ready(pyxbuf_error *err) {
    pthread_once(&drv_once, load_driver);
    if (PYXBUF_LIKELY(drv.ready)) return 0;
    return pyxbuf__error(err, drv.code, -1, "%s", drv.why);
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                     */
/* ------------------------------------------------------------------------- */

/* The errors cuda.h documents as leaving the context unusable ("sticky"). */
static int is_sticky(CUresult r) {
    return r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_ASSERT ||
           (r >= CUDA_ERROR_HARDWARE_STACK_ERROR && r <= CUDA_ERROR_LAUNCH_FAILED);
}

static const char *cuda_hint(CUresult r) {
    if (is_sticky(r))
        return "an earlier kernel or copy faulted and this CUDA context is unusable; the "
               "process must restart its CUDA work (CUDA_LAUNCH_BLOCKING=1 finds the culprit)";
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        return "free device memory (other processes may hold it: see nvidia-smi) or move "
               "less data";
    case CUDA_ERROR_INVALID_VALUE:
        return "check that the addresses and size lie inside memory allocated with CUDA on "
               "this device";
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_INVALID_HANDLE:
        return "the stream or event must belong to this device's primary context (the one "
               "PyTorch, CuPy and the CUDA runtime use)";
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
        return "the CUDA driver is shutting down; finish device work before interpreter exit";
    default:
        return "see the CUDA driver documentation for this error; CUDA_LAUNCH_BLOCKING=1 "
               "helps locate failures of earlier asynchronous work";
    }
}

static int32_t cuda_code(CUresult r) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return PYXBUF_ENOMEM;
    if (r == CUDA_ERROR_INVALID_DEVICE) return PYXBUF_EINVAL;
    return PYXBUF_EDRIVER;
}

/* Fill err for a failed driver call: what was asked (fmt), the driver's name
 * and text for the error, and what to do. */
static int cu_error(pyxbuf_error *err, CUresult r, const char *fmt, ...) PYXBUF_PRINTF(3, 4);
static int cu_error(pyxbuf_error *err, CUresult r, const char *fmt, ...) {
    char asked[PYXBUF_ERROR_MESSAGE_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(asked, sizeof asked, fmt, ap);
    va_end(ap);
    return pyxbuf__error(err, cuda_code(r), -1, "%s failed: %s (%s); %s", asked, error_name(r),
                         error_string(r), cuda_hint(r));
}

/* ------------------------------------------------------------------------- */
/* Devices, contexts, streams                                                 */
/* ------------------------------------------------------------------------- */

static int check_ordinal(int32_t id, pyxbuf_error *err) {
    if (PYXBUF_LIKELY(id >= 0 && id < drv.device_count)) return 0;
    return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                         "CUDA device %d does not exist: this process sees %d CUDA device%s "
                         "(ordinals 0..%d; CUDA_VISIBLE_DEVICES decides which)",
                         (int)id, drv.device_count, drv.device_count == 1 ? "" : "s",
                         drv.device_count - 1);
}

/* The primary context of device `id`, retained on first use and kept for the
 * life of the process (the driver tears it down at exit). */
static int primary_context(int32_t id, CUcontext *out, pyxbuf_error *err) {
    pthread_mutex_lock(&drv.lock);
    CUcontext ctx = drv.primary[id];
    CUresult r = CUDA_SUCCESS;
    if (ctx == NULL) {
        CUdevice dev = 0;
        r = drv.api.device_get(&dev, (int)id);
        if (r == CUDA_SUCCESS) r = drv.api.primary_retain(&ctx, dev);
        if (r == CUDA_SUCCESS) drv.primary[id] = ctx;
    }
    pthread_mutex_unlock(&drv.lock);
    if (r != CUDA_SUCCESS)
        return cu_error(err, r, "cuDevicePrimaryCtxRetain for CUDA device %d", (int)id);
    *out = ctx;
    return 0;
}

static int push_context(CUcontext ctx, int32_t id, pyxbuf_error *err) {
    CUresult r = drv.api.ctx_push(ctx);
    if (r != CUDA_SUCCESS)
        return cu_error(err, r, "cuCtxPushCurrent of CUDA device %d's primary context", (int)id);
    return 0;
}

/* Make device `id`'s primary context current for one operation; undone by
 * leave(). */
static int enter(int32_t id, pyxbuf_error *err) {
    CUcontext ctx = NULL;
    int rc = primary_context(id, &ctx, err);
    return rc != 0 ? rc : push_context(ctx, id, err);
}

static void leave(void) {
    CUcontext popped;
    (void)drv.api.ctx_pop(&popped);
}

/* DLPack's stream integers: 0 -> the default (NULL) stream, 1 -> the legacy
 * default stream, 2 -> the per-thread default stream, others a CUstream.
 * PYXBUF_STREAM_NONE enqueues on the default stream (waits skip it). */
static int to_stream(int64_t stream, CUstream *out, pyxbuf_error *err) {
    if (stream == PYXBUF_STREAM_NONE || stream == 0) *out = NULL;
    else if (stream == 1) *out = CU_STREAM_LEGACY;
    else if (stream == 2) *out = CU_STREAM_PER_THREAD;
    else if (stream > 0 && (uint64_t)stream <= UINTPTR_MAX) *out = (CUstream)(uintptr_t)stream;
    else
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "stream %" PRId64 " is not a CUDA stream: pass 0 or 1 (legacy "
                             "default), 2 (per-thread default), a CUstream handle, or "
                             "PYXBUF_STREAM_NONE (-1)",
                             stream);
    return 0;
}

static const char *stream_name(int64_t stream, char *buf, size_t cap) {
    switch (stream) {
    case PYXBUF_STREAM_NONE: return "the default stream (no stream given)";
    case 0: return "the default stream";
    case 1: return "the legacy default stream";
    case 2: return "the per-thread default stream";
    default: snprintf(buf, cap, "stream 0x%" PRIx64, (uint64_t)stream); return buf;
    }
}

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

static int begin(int32_t device_id, int64_t stream, CUstream *s, pyxbuf_error *err);

/* ------------------------------------------------------------------------- */
/* Copies                                                                     */
/* ------------------------------------------------------------------------- */

typedef enum { COPY_TO_HOST, COPY_FROM_HOST, COPY_ON_DEVICE, COPY_PEER } copy_kind;

typedef struct copy_job {
    copy_kind kind;
    int32_t dst_id, src_id; /* -1 for the host side */
    void *dst;
    const void *src;
    size_t n;
    int64_t stream;
} copy_job;

static const char *copy_call(copy_kind kind) {
    static const char *const names[] = {"cuMemcpyDtoHAsync", "cuMemcpyHtoDAsync",
                                        "cuMemcpyDtoDAsync", "cuMemcpyPeerAsync"};
    return names[kind];
}

static void describe_side(char *buf, size_t cap, const void *p, int32_t id) {
    if (id < 0) snprintf(buf, cap, "host 0x%" PRIxPTR, (uintptr_t)p);
    else snprintf(buf, cap, "0x%" PRIxPTR " on CUDA device %d", (uintptr_t)p, (int)id);
}

static int copy_error(const copy_job *job, CUresult r, const char *stage, pyxbuf_error *err) {
    char from[64], to[64], sbuf[40];
    describe_side(from, sizeof from, job->src, job->src_id);
    describe_side(to, sizeof to, job->dst, job->dst_id);
    return cu_error(err, r, "%s%s of %zu %s from %s to %s on %s", stage, copy_call(job->kind),
                    job->n, PYXBUF__PLURAL(job->n, "byte", "bytes"), from, to,
                    stream_name(job->stream, sbuf, sizeof sbuf));
}

static CUresult enqueue(const copy_job *job, CUstream s, CUcontext dst_ctx, CUcontext src_ctx) {
    switch (job->kind) {
    case COPY_TO_HOST: return drv.api.memcpy_dtoh_async(job->dst, dptr(job->src), job->n, s);
    case COPY_FROM_HOST: return drv.api.memcpy_htod_async(dptr(job->dst), job->src, job->n, s);
    case COPY_ON_DEVICE:
        return drv.api.memcpy_dtod_async(dptr(job->dst), dptr(job->src), job->n, s);
    case COPY_PEER:
    default:
        return drv.api.memcpy_peer_async(dptr(job->dst), dst_ctx, dptr(job->src), src_ctx,
                                         job->n, s);
    }
}

/* Enqueue the copy on the stream after the work already there, then wait for
 * the stream, so the bytes are in place when this returns. The stream belongs
 * to the device side of the copy; for device-to-device copies, to the
 * destination device. */
static int run_copy(const copy_job *job, pyxbuf_error *err) {
    int rc = driver_ready(err);
    if (rc != 0) return rc;
    if (job->dst_id >= 0 && (rc = check_ordinal(job->dst_id, err)) != 0) return rc;
    if (job->src_id >= 0 && (rc = check_ordinal(job->src_id, err)) != 0) return rc;
    CUstream s = NULL;
    if ((rc = to_stream(job->stream, &s, err)) != 0) return rc;
    if (job->n == 0) return 0;
    if (job->dst == NULL || job->src == NULL)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1, "%s of %zu %s with a NULL %s address",
                             copy_call(job->kind), job->n, PYXBUF__PLURAL(job->n, "byte", "bytes"),
                             job->dst ? "source" : "destination");
    int32_t home = job->dst_id >= 0 ? job->dst_id : job->src_id;
    CUcontext dst_ctx = NULL, src_ctx = NULL;
    if (job->kind == COPY_PEER &&
        ((rc = primary_context(job->dst_id, &dst_ctx, err)) != 0 ||
         (rc = primary_context(job->src_id, &src_ctx, err)) != 0))
        return rc;
    if ((rc = enter(home, err)) != 0) return rc;
    CUresult r = enqueue(job, s, dst_ctx, src_ctx);
    CUresult synced = r == CUDA_SUCCESS ? drv.api.stream_synchronize(s) : CUDA_SUCCESS;
    leave();
    if (r != CUDA_SUCCESS) return copy_error(job, r, "", err);
    if (synced != CUDA_SUCCESS) return copy_error(job, synced, "cuStreamSynchronize after ", err);
    return 0;
}

static int cuda_copy_to_host(void *ctx, int32_t device_id, void *dst, const void *src, size_t n,
                             int64_t stream, pyxbuf_error *err) {
    (void)ctx;
    copy_job job = {COPY_TO_HOST, -1, device_id, dst, src, n, stream};
    return run_copy(&job, err);
}

static int cuda_copy_from_host(void *ctx, int32_t device_id, void *dst, const void *src,
                               size_t n, int64_t stream, pyxbuf_error *err) {
    (void)ctx;
    copy_job job = {COPY_FROM_HOST, device_id, -1, dst, src, n, stream};
    return run_copy(&job, err);
}

static int cuda_copy_on_device(void *ctx, int32_t dst_id, void *dst, int32_t src_id,
                               const void *src, size_t n, int64_t stream, pyxbuf_error *err) {
    (void)ctx;
    if (dst_id < 0 || src_id < 0) {
        int rc = driver_ready(err);
        return rc != 0 ? rc : check_ordinal(dst_id < 0 ? dst_id : src_id, err);
    }
    copy_job job = {dst_id == src_id ? COPY_ON_DEVICE : COPY_PEER, dst_id, src_id, dst, src, n,
                    stream};
    return run_copy(&job, err);
}

/* ------------------------------------------------------------------------- */
/* Memory                                                                     */
/* ------------------------------------------------------------------------- */

/* A zero-byte request yields NULL (cuMemAlloc refuses 0); freeing NULL is a
 * no-op, as with free(). */
static int cuda_alloc(void *ctx, int32_t device_id, size_t n, void **ptr, pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0) return rc;
    if ((rc = check_ordinal(device_id, err)) != 0) return rc;
    if (ptr == NULL) return pyxbuf__error(err, PYXBUF_EINVAL, -1, "cuda alloc: ptr is NULL");
    *ptr = NULL;
    if (n == 0) return 0;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUdeviceptr d = 0;
    CUresult r = drv.api.mem_alloc(&d, n);
    leave();
    if (r != CUDA_SUCCESS)
        return cu_error(err, r, "cuMemAlloc of %zu %s on CUDA device %d", n,
                        PYXBUF__PLURAL(n, "byte", "bytes"), (int)device_id);
    *ptr = (void *)(uintptr_t)d;
    return 0;
}

static int cuda_free(void *ctx, int32_t device_id, void *ptr, pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0) return rc;
    if ((rc = check_ordinal(device_id, err)) != 0) return rc;
    if (ptr == NULL) return 0;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUresult r = drv.api.mem_free(dptr(ptr));
    leave();
    if (r != CUDA_SUCCESS)
        return cu_error(err, r, "cuMemFree of 0x%" PRIxPTR " on CUDA device %d", (uintptr_t)ptr,
                        (int)device_id);
    return 0;
}

/* The stream-ordered pool (cuda_pool.c): the device's default pool where it
 * has pools, else cuMemAlloc and cuMemFree as above (each device always one
 * or the other, so a free matches its allocation). */
static int pool_error(pyxbuf_error *err, CUresult r, const char *call, size_t n, int32_t id,
                      int64_t stream) {
    char sbuf[40];
    if (n == 0)
        return cu_error(err, r, "%s on CUDA device %d (%s)", call, (int)id,
                        stream_name(stream, sbuf, sizeof sbuf));
    return cu_error(err, r, "%s of %zu %s on CUDA device %d (%s)", call, n,
                    PYXBUF__PLURAL(n, "byte", "bytes"), (int)id,
                    stream_name(stream, sbuf, sizeof sbuf));
}

static int cuda_alloc_async(void *ctx, int32_t device_id, size_t n, int64_t stream, void **ptr,
                            pyxbuf_error *err) {
    (void)ctx;
    CUstream s = NULL;
    int rc = begin(device_id, stream, &s, err);
    if (rc != 0) return rc;
    if (ptr == NULL) return pyxbuf__error(err, PYXBUF_EINVAL, -1, "cuda alloc_async: ptr is NULL");
    *ptr = NULL;
    if (n == 0) return 0;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUdeviceptr d = 0;
    int pooled = 0;
    const char *call = "cuMemAllocFromPoolAsync";
    CUresult r = pyxbuf__cuda_pool_alloc(device_id, n, s, &d, &pooled, &call);
    if (r == CUDA_SUCCESS && !pooled) {
        call = "cuMemAlloc";
        r = drv.api.mem_alloc(&d, n);
    }
    leave();
    if (r != CUDA_SUCCESS) return pool_error(err, r, call, n, device_id, stream);
    *ptr = (void *)(uintptr_t)d;
    return 0;
}

static int cuda_free_async(void *ctx, int32_t device_id, void *ptr, int64_t stream,
                           pyxbuf_error *err) {
    (void)ctx;
    CUstream s = NULL;
    int rc = begin(device_id, stream, &s, err);
    if (rc != 0 || ptr == NULL) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    int pooled = 0;
    const char *call = "cuMemFreeAsync";
    CUresult r = pyxbuf__cuda_pool_free(device_id, dptr(ptr), s, &pooled, &call);
    if (r == CUDA_SUCCESS && !pooled) {
        call = "cuMemFree";
        r = drv.api.mem_free(dptr(ptr));
    }
    leave();
    return r != CUDA_SUCCESS ? pool_error(err, r, call, 0, device_id, stream) : 0;
}

static int cuda_pool_trim(void *ctx, int32_t device_id, uint64_t keep, pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0 || (rc = check_ordinal(device_id, err)) != 0) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    int pooled = 0;
    const char *call = "cuMemPoolTrimTo";
    CUresult r = pyxbuf__cuda_pool_trim(device_id, keep, &pooled, &call);
    leave();
    return r != CUDA_SUCCESS ? pool_error(err, r, call, 0, device_id, 0) : 0;
}

/* Page-locked host memory for the staging pool: portable, so a block serves
 * copies to any device's context. */
static int cuda_host_alloc(void *ctx, int32_t device_id, size_t n, void **ptr,
                           pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0) return rc;
    if ((rc = check_ordinal(device_id, err)) != 0) return rc;
    *ptr = NULL;
    if (n == 0) return 0;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUresult r = drv.api.mem_host_alloc(ptr, n, CU_MEMHOSTALLOC_PORTABLE);
    leave();
    if (r != CUDA_SUCCESS)
        return cu_error(err, r, "cuMemHostAlloc of %zu %s (CUDA device %d)", n,
                        PYXBUF__PLURAL(n, "byte", "bytes"), (int)device_id);
    return 0;
}

static int cuda_host_free(void *ctx, int32_t device_id, void *ptr, pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0 || ptr == NULL) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUresult r = drv.api.mem_free_host(ptr);
    leave();
    if (r != CUDA_SUCCESS)
        return cu_error(err, r, "cuMemFreeHost of 0x%" PRIxPTR, (uintptr_t)ptr);
    return 0;
}

/* One chunk of a staged copy: enqueued, not waited for. */
static int cuda_copy_async(void *ctx, int32_t device_id, int32_t to_host, void *dst,
                           const void *src, size_t n, int64_t stream, pyxbuf_error *err) {
    (void)ctx;
    copy_job job = to_host ? (copy_job){COPY_TO_HOST, -1, device_id, dst, src, n, stream}
                           : (copy_job){COPY_FROM_HOST, device_id, -1, dst, src, n, stream};
    CUstream s = NULL;
    int rc = begin(device_id, stream, &s, err);
    if (rc != 0 || n == 0) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUresult r = enqueue(&job, s, NULL, NULL);
    leave();
    return r != CUDA_SUCCESS ? copy_error(&job, r, "", err) : 0;
}

static int cuda_event_query(void *ctx, int32_t device_id, void *event, int32_t block,
                            pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0) return rc;
    if (event == NULL) return 1;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUresult r = block ? drv.api.event_synchronize((CUevent)event)
                       : drv.api.event_query((CUevent)event);
    leave();
    if (r == CUDA_SUCCESS) return 1;
    if (r == CUDA_ERROR_NOT_READY && !block) return 0;
    return cu_error(err, r, "%s of event 0x%" PRIxPTR " (CUDA device %d)",
                    block ? "cuEventSynchronize" : "cuEventQuery", (uintptr_t)event,
                    (int)device_id);
}

/* ------------------------------------------------------------------------- */
/* Events and streams                                                         */
/* ------------------------------------------------------------------------- */

/* Common prologue: driver, ordinal, stream. */
static int begin(int32_t device_id, int64_t stream, CUstream *s, pyxbuf_error *err) {
    int rc = driver_ready(err);
    if (rc != 0) return rc;
    if ((rc = check_ordinal(device_id, err)) != 0) return rc;
    return to_stream(stream, s, err);
}

/* A NULL event means "ready now"; PYXBUF_STREAM_NONE asks for no waiting. */
static int cuda_event_wait(void *ctx, int32_t device_id, void *event, int64_t stream,
                           pyxbuf_error *err) {
    (void)ctx;
    CUstream s = NULL;
    int rc = begin(device_id, stream, &s, err);
    if (rc != 0 || event == NULL || stream == PYXBUF_STREAM_NONE) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUresult r = drv.api.stream_wait_event(s, (CUevent)event, 0);
    leave();
    if (r != CUDA_SUCCESS) {
        char sbuf[40];
        return cu_error(err, r, "cuStreamWaitEvent of %s on event 0x%" PRIxPTR " (CUDA device %d)",
                        stream_name(stream, sbuf, sizeof sbuf), (uintptr_t)event, (int)device_id);
    }
    return 0;
}

/* A pooled event of device `id`, or NULL when the pool is empty. */
static CUevent pooled_event(int32_t id) {
    pthread_mutex_lock(&drv.lock);
    event_pool *pool = &drv.pools[id];
    CUevent ev = pool->count > 0 ? pool->events[--pool->count] : NULL;
    pthread_mutex_unlock(&drv.lock);
    return ev;
}

/* Keep `ev` for reuse; 0 when the pool is full (the caller destroys it). */
static int pool_event(int32_t id, CUevent ev) {
    pthread_mutex_lock(&drv.lock);
    event_pool *pool = &drv.pools[id];
    int kept = pool->count < EVENT_POOL_SIZE;
    if (kept) pool->events[pool->count++] = ev;
    pthread_mutex_unlock(&drv.lock);
    return kept;
}

/* Events are created without timing: they only order work, and timing-free
 * events are the cheapest to record and wait on. */
static int cuda_event_record(void *ctx, int32_t device_id, int64_t stream, void **event,
                             pyxbuf_error *err) {
    (void)ctx;
    CUstream s = NULL;
    int rc = begin(device_id, stream, &s, err);
    if (rc != 0) return rc;
    if (event == NULL)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1, "cuda event_record: event is NULL");
    *event = NULL;
    if ((rc = enter(device_id, err)) != 0) return rc;
    /* A pooled event may be a producer's (pyxbuf_exporter_set_event hands
     * them over) that this stream cannot record: then a fresh one. */
    CUevent ev = pooled_event(device_id);
    CUresult r = ev != NULL ? drv.api.event_record(ev, s) : CUDA_ERROR_INVALID_HANDLE;
    const char *call = "cuEventCreate";
    if (r != CUDA_SUCCESS) {
        if (ev != NULL) (void)drv.api.event_destroy(ev);
        ev = NULL;
        r = drv.api.event_create(&ev, CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS) {
            call = "cuEventRecord";
            r = drv.api.event_record(ev, s);
            if (r != CUDA_SUCCESS) (void)drv.api.event_destroy(ev);
        }
    }
    leave();
    if (r != CUDA_SUCCESS) {
        char sbuf[40];
        return cu_error(err, r, "%s on %s (CUDA device %d)", call,
                        stream_name(stream, sbuf, sizeof sbuf), (int)device_id);
    }
    *event = ev;
    return 0;
}

static int cuda_event_destroy(void *ctx, int32_t device_id, void *event, pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0) return rc;
    if ((rc = check_ordinal(device_id, err)) != 0 || event == NULL) return rc;
    if (pool_event(device_id, (CUevent)event)) return 0;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUresult r = drv.api.event_destroy((CUevent)event);
    leave();
    if (r != CUDA_SUCCESS)
        return cu_error(err, r, "cuEventDestroy of event 0x%" PRIxPTR " (CUDA device %d)",
                        (uintptr_t)event, (int)device_id);
    return 0;
}

static int cuda_synchronize(void *ctx, int32_t device_id, int64_t stream, pyxbuf_error *err) {
    (void)ctx;
    CUstream s = NULL;
    int rc = begin(device_id, stream, &s, err);
    if (rc != 0 || stream == PYXBUF_STREAM_NONE) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    CUresult r = drv.api.stream_synchronize(s);
    leave();
    if (r != CUDA_SUCCESS) {
        char sbuf[40];
        return cu_error(err, r, "cuStreamSynchronize of %s (CUDA device %d)",
                        stream_name(stream, sbuf, sizeof sbuf), (int)device_id);
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Pointer query                                                              */
/* ------------------------------------------------------------------------- */

/* cuPointerGetAttributes wants a current context. Use the caller's if there
 * is one, else an already active primary context (so no GPU gets a context
 * it did not have), else device 0's. Sets *pushed when it pushed one. */
static int query_context(int *pushed, pyxbuf_error *err) {
    CUcontext current = NULL;
    *pushed = 0;
    if (drv.api.ctx_get_current(&current) == CUDA_SUCCESS && current != NULL) return 0;
    int32_t chosen = 0;
    for (int32_t id = 0; id < drv.device_count; id++) {
        CUdevice dev = 0;
        unsigned int flags = 0;
        int active = 0;
        if (drv.api.device_get(&dev, (int)id) == CUDA_SUCCESS &&
            drv.api.primary_get_state(dev, &flags, &active) == CUDA_SUCCESS && active) {
            chosen = id;
            break;
        }
    }
    int rc = enter(chosen, err);
    *pushed = rc == 0;
    return rc;
}

static int not_cuda_memory(const void *ptr, const char *why, pyxbuf_error *err) {
    return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                         "pointer 0x%" PRIxPTR " is not CUDA memory (cuPointerGetAttributes: %s); "
                         "whoever described it as CUDA memory is wrong, or it was freed",
                         (uintptr_t)ptr, why);
}

static int classify(const void *ptr, unsigned int type, unsigned long long managed, int ordinal,
                    pyxbuf_device *device, pyxbuf_error *err) {
    int32_t id = ordinal >= 0 ? (int32_t)ordinal : 0;
    if (managed) *device = (pyxbuf_device){PYXBUF_DL_CUDA_MANAGED, id};
    else if (type == CU_MEMORYTYPE_DEVICE) *device = (pyxbuf_device){PYXBUF_DL_CUDA, id};
    else if (type == CU_MEMORYTYPE_HOST) *device = (pyxbuf_device){PYXBUF_DL_CUDA_HOST, 0};
    else if (type == 0)
        return not_cuda_memory(ptr, "the driver knows no allocation at this address", err);
    else
        return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                             "pointer 0x%" PRIxPTR " is CUDA memory of type %u (%s), not linear "
                             "device, pinned host or managed memory; pyxbuf cannot copy it",
                             (uintptr_t)ptr, type,
                             type == CU_MEMORYTYPE_ARRAY ? "a CUDA array" : "unified");
    return 0;
}

static int cuda_pointer_query(void *ctx, const void *ptr, pyxbuf_device *device,
                              pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0) return rc;
    if (device == NULL)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1, "cuda pointer_query: device is NULL");
    int pushed;
    if ((rc = query_context(&pushed, err)) != 0) return rc;
    /* IS_MANAGED is documented as a boolean of unstated width: a zeroed
     * 8-byte slot reads as nonzero whatever width the driver writes. */
    unsigned int type = 0;
    unsigned long long managed = 0;
    int ordinal = -1;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[] = {&type, &managed, &ordinal};
    CUresult r = drv.api.pointer_get_attributes(3, attrs, data, dptr(ptr));
    if (pushed) leave();
    if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_CONTEXT) {
        char why[160];
        snprintf(why, sizeof why, "%s, %s", error_name(r), error_string(r));
        return not_cuda_memory(ptr, why, err);
    }
    if (r != CUDA_SUCCESS)
        return cu_error(err, r, "cuPointerGetAttributes of 0x%" PRIxPTR, (uintptr_t)ptr);
    return classify(ptr, type, managed, ordinal, device, err);
}

/* ------------------------------------------------------------------------- */
/* Memory shared with other processes (cuda_ipc.c)                            */
/* ------------------------------------------------------------------------- */

static int cuda_ipc_export(void *ctx, int32_t device_id, const void *ptr, void *handle,
                           size_t *handle_len, int *fd, pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0 || (rc = check_ordinal(device_id, err)) != 0) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    rc = pyxbuf__cuda_ipc_export(device_id, ptr, handle, handle_len, fd, err);
    leave();
    return rc;
}

static int cuda_ipc_open(void *ctx, int32_t device_id, const void *handle, size_t handle_len,
                         int fd, void **ptr, pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0 || (rc = check_ordinal(device_id, err)) != 0) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    rc = pyxbuf__cuda_ipc_open(device_id, handle, handle_len, fd, ptr, err);
    leave();
    return rc;
}

static int cuda_ipc_close(void *ctx, int32_t device_id, void *ptr, pyxbuf_error *err) {
    (void)ctx;
    int rc = driver_ready(err);
    if (rc != 0 || (rc = check_ordinal(device_id, err)) != 0) return rc;
    if ((rc = enter(device_id, err)) != 0) return rc;
    rc = pyxbuf__cuda_ipc_close(device_id, ptr, err);
    leave();
    return rc;
}

/* ------------------------------------------------------------------------- */
/* The backend                                                                */
/* ------------------------------------------------------------------------- */

static const pyxbuf_backend cuda_backend = {
    .size = sizeof(pyxbuf_backend),
    .device_type = PYXBUF_DL_CUDA,
    .name = "cuda",
    .ctx = NULL,
    .copy_to_host = cuda_copy_to_host,
    .copy_from_host = cuda_copy_from_host,
    .copy_on_device = cuda_copy_on_device,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .event_wait = cuda_event_wait,
    .event_record = cuda_event_record,
    .event_destroy = cuda_event_destroy,
    .pointer_query = cuda_pointer_query,
    .synchronize = cuda_synchronize,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy_async = cuda_copy_async,
    .event_query = cuda_event_query,
    .alloc_async = cuda_alloc_async,
    .free_async = cuda_free_async,
    .pool_trim = cuda_pool_trim,
    .ipc_export = cuda_ipc_export,
    .ipc_open = cuda_ipc_open,
    .ipc_close = cuda_ipc_close,
};

/* Nothing is loaded here: the driver is opened by the first call that needs it. */
const pyxbuf_backend *pyxbuf__cuda_backend(void) { return &cuda_backend; }
