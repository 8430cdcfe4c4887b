/* cuda_ipc.c -- the CUDA backend's memory shared with other processes on
 * this machine (the backend's ipc_export, ipc_open and ipc_close): CUDA's
 * interprocess handles, which name a cuMemAlloc allocation, carried in a
 * handle of pyxbuf's own that also says where in the allocation the array
 * starts, which process made it and on which GPU. cuda.c loads the driver,
 * checks the device and makes its primary context current around each call;
 * this file keeps the handle's layout and the refusals' reasons. A handle is
 * opened in another process (as CUDA's are): share.c serves the exporting
 * process's own opens without the backend. */

#include "device/cuda_driver.h"
#include "base/platform.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What travels: fixed-width fields, read on the same machine (so the same
 * byte order). 112 bytes. */
typedef struct cuda_ipc_handle {
    char magic[8];          /* "pyxbcuda" */
    uint32_t version;       /* 1 */
    uint32_t reserved;
    int64_t pid;            /* the exporting process (for messages) */
    uint64_t delta;         /* the array's offset in the allocation */
    CUuuid uuid;            /* the GPU (zero: the driver could not say) */
    CUipcMemHandle mem;     /* the allocation */
} cuda_ipc_handle;

_Static_assert(sizeof(cuda_ipc_handle) <= PYXBUF_IPC_BACKEND_HANDLE_MAX,
               "the CUDA IPC handle must fit PYXBUF_IPC_BACKEND_HANDLE_MAX");

static const char MAGIC[8] = {'p', 'y', 'x', 'b', 'c', 'u', 'd', 'a'};

static const pyxbuf__cuda_ipc_api *api; /* NULL: the driver has no IPC */

void pyxbuf__cuda_ipc_init(const pyxbuf__cuda_ipc_api *a) { api = a; }

static const char *name_of(CUresult r) {
    const char *s = NULL;
    if (api->get_error_name(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN_CODE";
    return s;
}

static const char *text_of(CUresult r) {
    const char *s = NULL;
    if (api->get_error_string(r, &s) != CUDA_SUCCESS || s == NULL)
        return "an error code this driver does not describe";
    return s;
}

static int no_ipc(const char *what, pyxbuf_error *err) {
    return pyxbuf__error(err, PYXBUF_EUNSUPPORTED, -1,
                         "cuda %s: this CUDA driver has no interprocess memory handles "
                         "(cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle, "
                         "cuMemGetAddressRange_v2); update the NVIDIA driver, or pickle the "
                         "array (a host copy travels)",
                         what);
}

static int failed(pyxbuf_error *err, CUresult r, const char *call, int32_t id, const char *hint) {
    return pyxbuf__error(err, r == CUDA_ERROR_OUT_OF_MEMORY ? PYXBUF_ENOMEM : PYXBUF_EDRIVER, -1,
                         "%s on CUDA device %d failed: %s (%s); %s", call, (int)id, name_of(r),
                         text_of(r), hint);
}

/* The GPU's UUID, or zeros where the driver cannot say. */
static CUuuid uuid_of(int32_t id) {
    CUuuid u;
    memset(&u, 0, sizeof u);
    CUdevice dev = 0;
    if (api->device_get_uuid != NULL && api->device_get(&dev, (int)id) == CUDA_SUCCESS &&
        api->device_get_uuid(&u, dev) != CUDA_SUCCESS)
        memset(&u, 0, sizeof u);
    return u;
}

static void format_uuid(const CUuuid *u, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    for (int i = 0; i < 16 && k + 3 < cap; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[k++] = '-';
        unsigned char b = (unsigned char)u->bytes[i];
        out[k++] = hex[b >> 4];
        out[k++] = hex[b & 15];
    }
    out[k] = '\0';
}

/* Why cuIpcGetMemHandle refused `ptr`, where the driver can say: memory of a
 * stream-ordered pool, or some other allocation CUDA's legacy IPC cannot name. */
static const char *export_refusal(CUdeviceptr ptr) {
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
    void *pool = NULL;
    int capable = 1;
    void *data[2] = {&pool, &capable};
    if (api->pointer_get_attributes(2, attrs, data, ptr) != CUDA_SUCCESS) return NULL;
    if (pool != NULL)
        return "the memory comes from a stream-ordered pool (cuMemAllocAsync: pyxbuf's device "
               "pool, CuPy's MemoryAsyncPool, PyTorch's cudaMallocAsync backend), which CUDA's "
               "IPC handles cannot name; allocate it with cuMemAlloc/cudaMalloc (pyxbuf: "
               "PYXBUF_DEVICE_POOL=0 or the configuration's device_pool_off = 1), or pickle "
               "the array (a host copy travels)";
    if (!capable)
        return "CUDA says this allocation cannot be shared by IPC handles (only cuMemAlloc/"
               "cudaMalloc memory can: not managed, host-mapped or virtual-memory-API "
               "allocations); copy it into such an allocation, or pickle the array";
    return NULL;
}

int pyxbuf__cuda_ipc_export(int32_t id, const void *ptr, void *handle, size_t *handle_len,
                            int *fd, pyxbuf_error *err) {
    *fd = -1; /* CUDA's IPC handles are bytes */
    if (api == NULL) return no_ipc("ipc_export", err);
    if (*handle_len < sizeof(cuda_ipc_handle))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "cuda ipc_export: the handle needs %zu bytes, %zu were given "
                             "(pass PYXBUF_IPC_BACKEND_HANDLE_MAX)",
                             sizeof(cuda_ipc_handle), *handle_len);
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr, base = 0;
    size_t size = 0;
    CUresult r = api->mem_get_address_range(&base, &size, p);
    if (r != CUDA_SUCCESS)
        return failed(err, r, "cuMemGetAddressRange of the array's address", id,
                      "the address must lie in live device memory of this device");
    cuda_ipc_handle h;
    memset(&h, 0, sizeof h);
    r = api->ipc_get_mem_handle(&h.mem, base);
    if (r != CUDA_SUCCESS) {
        const char *why = export_refusal(p);
        return failed(err, r, "cuIpcGetMemHandle of the allocation holding the array", id,
                      why != NULL ? why
                                  : "only cuMemAlloc/cudaMalloc memory can be shared; pickle "
                                    "the array instead (a host copy travels)");
    }
    memcpy(h.magic, MAGIC, sizeof MAGIC);
    h.version = 1;
    h.pid = pyxbuf__process_id();
    h.delta = (uint64_t)(p - base);
    h.uuid = uuid_of(id);
    memcpy(handle, &h, sizeof h);
    *handle_len = sizeof h;
    return 0;
}

static int bad_handle(pyxbuf_error *err, size_t len) {
    return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                         "cuda ipc_open: a %zu-byte handle is not one cuda ipc_export made "
                         "(%zu bytes starting \"pyxbcuda\", version 1); pass the handle "
                         "pyxbuf_device_share returned, unchanged",
                         len, sizeof(cuda_ipc_handle));
}

/* The exporter's GPU must be the one device `id` is here: CUDA_VISIBLE_DEVICES
 * may number the GPUs differently in two processes. */
static int check_same_gpu(int32_t id, const cuda_ipc_handle *h, pyxbuf_error *err) {
    static const CUuuid zero;
    CUuuid here = uuid_of(id);
    if (memcmp(&h->uuid, &zero, sizeof zero) == 0 || memcmp(&here, &zero, sizeof zero) == 0 ||
        memcmp(&h->uuid, &here, sizeof here) == 0)
        return 0;
    char theirs[40], ours[40];
    format_uuid(&h->uuid, theirs, sizeof theirs);
    format_uuid(&here, ours, sizeof ours);
    return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                         "cuda ipc_open: the memory lies on GPU-%s, but CUDA device %d of this "
                         "process is GPU-%s; CUDA_VISIBLE_DEVICES numbers the GPUs differently "
                         "in the two processes: open it on the device with that UUID "
                         "(nvidia-smi -L lists them)",
                         theirs, (int)id, ours);
}

static const char *open_hint(CUresult r) {
    switch (r) {
    case CUDA_ERROR_ALREADY_MAPPED:
        return "drivers before CUDA 11.1 open a handle once per process: keep the first "
               "array opened from it, or update the NVIDIA driver";
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
    case CUDA_ERROR_TOO_MANY_PEERS:
        return "the memory lies on another GPU that this device cannot reach as a peer; "
               "open it on the GPU that holds it";
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_MAP_FAILED:
        return "the exporting process may have freed the array or exited (it must keep the "
               "array alive while others use it), or the handle comes from another machine";
    default:
        return "see the CUDA driver documentation for this error";
    }
}

int pyxbuf__cuda_ipc_open(int32_t id, const void *handle, size_t handle_len, int fd, void **ptr,
                          pyxbuf_error *err) {
    (void)fd;
    if (api == NULL) return no_ipc("ipc_open", err);
    cuda_ipc_handle h;
    if (handle == NULL || handle_len != sizeof h) return bad_handle(err, handle_len);
    memcpy(&h, handle, sizeof h);
    if (memcmp(h.magic, MAGIC, sizeof MAGIC) != 0 || h.version != 1)
        return bad_handle(err, handle_len);
    int rc = check_same_gpu(id, &h, err);
    if (rc != 0) return rc;
    CUdeviceptr base = 0;
    CUresult r = api->ipc_open_mem_handle(&base, h.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CUDA_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "cuIpcOpenMemHandle of process %" PRId64 "'s memory",
                 h.pid);
        return failed(err, r, call, id, open_hint(r));
    }
    *ptr = (void *)(uintptr_t)(base + h.delta);
    return 0;
}

int pyxbuf__cuda_ipc_close(int32_t id, void *ptr, pyxbuf_error *err) {
    if (api == NULL) return no_ipc("ipc_close", err);
    /* ipc_open returned base + delta: the mapping's start is the base. */
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r = api->mem_get_address_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
    if (r == CUDA_SUCCESS) r = api->ipc_close_mem_handle(base);
    if (r != CUDA_SUCCESS)
        return failed(err, r, "cuIpcCloseMemHandle", id,
                      "the pointer must be one cuda ipc_open returned, closed once");
    return 0;
}
