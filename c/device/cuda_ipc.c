/* cuda_ipc.c -- the CUDA backend's memory shared with other processes on
 * this machine (the backend's ipc_export, ipc_open and ipc_close): CUDA's
 * interprocess handles, which name a cuMemAlloc allocation, or the export
 * data of an allocation from a pool with POSIX file-descriptor handles
 * (pyxbuf's shareable pool, cuda_pool.c), whose descriptor travels beside
 * the handle; either carried in a handle of pyxbuf's own that also says
 * where in the allocation the array starts, which process made it and on
 * which GPU. cuda.c loads the driver,
 * checks the device and makes its primary context current around each call;
 * this file keeps the handle's layout and the refusals' reasons. A handle is
 * opened in another process (as CUDA's are): share.c serves the exporting
 * process's own opens without the backend. */

#include "device/cuda_driver.h"
#include "base/platform.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_IPC_HANDLE = 0, KIND_POOL = 1 };

/* What travels: fixed-width fields, read on the same machine (so the same
 * byte order). 128 bytes. Version 2: pool memory (version 1 was 112 bytes,
 * CUDA's IPC handles only). */
#define HANDLE_VERSION 2u
typedef struct cuda_ipc_handle {
    char magic[8];          /* "pyxbcuda" */
    uint32_t version;       /* HANDLE_VERSION */
    uint32_t kind;          /* KIND_IPC_HANDLE: `mem`; KIND_POOL: `pool_data` */
    int64_t pid;            /* the exporting process (messages; the pool's name) */
    uint64_t delta;         /* the array's offset in the allocation */
    CUuuid uuid;            /* the GPU (zero: the driver could not say) */
    union {
        CUipcMemHandle mem;                /* the allocation */
        CUmemPoolPtrExportData pool_data;  /* the allocation, in its pool */
    } u;
    uint64_t pool_key;      /* KIND_POOL: the pool's handle in the exporting process */
    uint64_t nonce;         /* KIND_POOL: the exporting process's, with pid its name */
} cuda_ipc_handle;

_Static_assert(sizeof(cuda_ipc_handle) <= PYXBUF_IPC_BACKEND_HANDLE_MAX,
               "the CUDA IPC handle must fit PYXBUF_IPC_BACKEND_HANDLE_MAX");

static const char MAGIC[8] = {'p', 'y', 'x', 'b', 'c', 'u', 'd', 'a'};

static const pyxbuf__cuda_ipc_api *api; /* NULL: the driver has no IPC */

/* Pools exported from this process (each pool's descriptor, made once and
 * kept open for the process's life: every handle of its memory sends a
 * duplicate); pools imported into it, one per exporting process (pid and
 * nonce) and pool: CUDA imports a pool once, then its pointers; the
 * allocations imported from them, each once, counted (two arrays over one
 * allocation, or one array received twice, share one import, freed when
 * the last closes: cuMemPoolImportPointer's memory is freed once); and every
 * open's result, so that close knows what it opened (a legacy mapping's
 * base, or the imported allocation) without asking the driver. An imported
 * pool stays for the process's life (pools are few; its pointers are what
 * holds memory). All under pools_lock. */
typedef struct exported_pool {
    CUmemoryPool pool;
    int fd;
    struct exported_pool *next;
} exported_pool;
typedef struct imported_pool {
    int64_t pid;
    uint64_t nonce, pool_key;
    CUuuid uuid;
    CUmemoryPool pool;
    struct imported_pool *next;
} imported_pool;
typedef struct imported_allocation {
    imported_pool *pool;
    CUmemPoolPtrExportData data;
    CUdeviceptr base;
    int64_t opens;
    struct imported_allocation *next;
} imported_allocation;
typedef struct open_record {
    void *ptr;                   /* what ipc_open returned */
    CUdeviceptr legacy_base;     /* a legacy mapping's base, or 0 */
    imported_allocation *alloc;  /* or the imported allocation */
    struct open_record *next;
} open_record;
static exported_pool *exported;
static imported_pool *imported;
static imported_allocation *allocations;
static open_record *opens;
static uint64_t own_nonce;
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

/* This process's nonce: a pid names a process only while it lives, the
 * nonce tells a reused pid from the process an imported pool came from.
 * pools_lock held. */
static uint64_t process_nonce(void) {
    if (own_nonce == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        own_nonce = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                    ((uint64_t)pyxbuf__process_id() << 40);
        if (own_nonce == 0) own_nonce = 1;
    }
    return own_nonce;
}

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

/* The stream-ordered pool `ptr` was allocated from, or NULL (cuMemAlloc
 * memory, or a driver that cannot say). */
static CUmemoryPool pool_holding(CUdeviceptr ptr) {
    CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE;
    void *pool = NULL;
    void *data[1] = {&pool};
    if (api->pointer_get_attributes(1, &attr, data, ptr) != CUDA_SUCCESS) return NULL;
    return (CUmemoryPool)pool;
}

/* Why cuIpcGetMemHandle refused `ptr`, where the driver can say. */
static const char *export_refusal(CUdeviceptr ptr) {
    CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE;
    int capable = 1;
    void *data[1] = {&capable};
    if (api->pointer_get_attributes(1, &attr, data, ptr) != CUDA_SUCCESS) return NULL;
    if (!capable)
        return "CUDA says this allocation cannot be shared by IPC handles (only cuMemAlloc/"
               "cudaMalloc memory can: not managed, host-mapped or virtual-memory-API "
               "allocations); copy it into such an allocation, or pickle the array";
    return NULL;
}

/* Pool memory whose pool gave no shareable handle: the way out, and why
 * this device has no shareable pool when pyxbuf could not make one; or, for
 * pyxbuf's own shareable pool, what the driver said. */
static int pool_not_shareable(pyxbuf_error *err, CUresult r, int32_t id, CUmemoryPool pool) {
    char hint[PYXBUF_ERROR_MESSAGE_SIZE];
    const char *why = pyxbuf__cuda_pool_shareable_refusal(id);
    if (pyxbuf__cuda_pool_is_shareable(id, pool) || r == CUDA_ERROR_OUT_OF_MEMORY)
        snprintf(hint, sizeof hint,
                 "pyxbuf's shareable pool could not give a descriptor (out of memory or of "
                 "file descriptors: ulimit -n); free some, or pickle the array");
    else if (why != NULL)
        snprintf(hint, sizeof hint,
                 "this device has no pool other processes can open: %s; set "
                 "PYXBUF_DEVICE_POOL=0 (cuMemAlloc) or pickle the array",
                 why);
    else
        snprintf(hint, sizeof hint,
                 "a default pool (pyxbuf's unless PYXBUF_DEVICE_POOL=shareable; CuPy's, "
                 "PyTorch's cudaMallocAsync) cannot be opened by other processes: set "
                 "PYXBUF_DEVICE_POOL=shareable or =0 (cuMemAlloc), or pickle the array");
    return failed(err, r, "cuMemPoolExportToShareableHandle of the pool holding the array", id,
                  hint);
}

/* The pool's descriptor, exported once and kept (close-on-exec: a child
 * that needs it receives it by SCM_RIGHTS). A pool another library
 * destroyed whose handle value came back for a new pool would find the old
 * descriptor: pyxbuf's own pools live until exit. */
static CUresult pool_descriptor(CUmemoryPool pool, int *fd) {
    pthread_mutex_lock(&pools_lock);
    CUresult r = CUDA_SUCCESS;
    exported_pool *e = exported;
    while (e != NULL && e->pool != pool) e = e->next;
    if (e == NULL) {
        int made = -1;
        r = api->mem_pool_export_to_shareable_handle(&made, pool,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        e = r == CUDA_SUCCESS ? calloc(1, sizeof *e) : NULL;
        if (e != NULL) {
#if defined(F_SETFD) && defined(FD_CLOEXEC) /* POSIX: Windows pools have no fds */
            (void)fcntl(made, F_SETFD, FD_CLOEXEC);
#endif
            *e = (exported_pool){.pool = pool, .fd = made, .next = exported};
            exported = e;
        } else if (r == CUDA_SUCCESS) {
            close(made); /* the pool stays; a later export makes another descriptor */
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (e != NULL) *fd = e->fd;
    pthread_mutex_unlock(&pools_lock);
    return r;
}

/* The handle of memory from `pool`: the pool's export data of the
 * allocation at `base`, and the pool's descriptor in *fd. */
static int export_pool_memory(int32_t id, CUmemoryPool pool, CUdeviceptr base,
                              cuda_ipc_handle *h, int *fd, pyxbuf_error *err) {
    if (api->mem_pool_export_pointer == NULL)
        return pyxbuf__error(err, PYXBUF_EUNSUPPORTED, -1,
                             "cuda ipc_export: the array lies in a stream-ordered pool, and "
                             "this CUDA driver cannot share pool memory (no "
                             "cuMemPoolExportPointer: CUDA 11.2 or newer can); set "
                             "PYXBUF_DEVICE_POOL=0 (cuMemAlloc), or pickle the array");
    int pool_fd = -1;
    CUresult r = pool_descriptor(pool, &pool_fd);
    if (r != CUDA_SUCCESS) return pool_not_shareable(err, r, id, pool);
    r = api->mem_pool_export_pointer(&h->u.pool_data, base);
    if (r != CUDA_SUCCESS)
        return failed(err, r, "cuMemPoolExportPointer of the allocation holding the array", id,
                      "the address must lie in live memory of the pool");
    h->kind = KIND_POOL;
    h->pool_key = (uint64_t)(uintptr_t)pool;
    pthread_mutex_lock(&pools_lock);
    h->nonce = process_nonce();
    pthread_mutex_unlock(&pools_lock);
    *fd = pool_fd;
    return 0;
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
    /* Memory of pyxbuf's shareable pool: the allocation as it was made (the
     * address range may be the pool's chunk holding several). */
    CUdeviceptr start = 0;
    if (pyxbuf__cuda_pool_allocation(p, &start, &size)) base = start;
    cuda_ipc_handle h;
    memset(&h, 0, sizeof h);
    CUmemoryPool pool = pool_holding(base);
    if (pool != NULL) {
        int rc = export_pool_memory(id, pool, base, &h, fd, err);
        if (rc != 0) return rc;
    } else {
        r = api->ipc_get_mem_handle(&h.u.mem, base);
        if (r != CUDA_SUCCESS) {
            const char *why = export_refusal(p);
            return failed(err, r, "cuIpcGetMemHandle of the allocation holding the array", id,
                          why != NULL ? why
                                      : "only cuMemAlloc/cudaMalloc memory can be shared; "
                                        "pickle the array instead (a host copy travels)");
        }
    }
    memcpy(h.magic, MAGIC, sizeof MAGIC);
    h.version = HANDLE_VERSION;
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
                         "(%zu bytes starting \"pyxbcuda\", version %u: both processes need "
                         "the same pyxbuf); pass the handle pyxbuf_device_share returned, "
                         "unchanged",
                         len, sizeof(cuda_ipc_handle), HANDLE_VERSION);
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

/* The pool a handle names, as imported here, or NULL. pools_lock held. */
static imported_pool *find_imported_pool(const cuda_ipc_handle *h) {
    imported_pool *ip = imported;
    while (ip != NULL && !(ip->pid == h->pid && ip->nonce == h->nonce &&
                           ip->pool_key == h->pool_key &&
                           memcmp(&ip->uuid, &h->uuid, sizeof h->uuid) == 0))
        ip = ip->next;
    return ip;
}

/* Import the pool a handle names from `fd` (the descriptor that arrived; not
 * kept: CUDA holds the pool), replacing an entry that no longer serves.
 * pools_lock held. */
static imported_pool *import_pool(const cuda_ipc_handle *h, int fd, imported_pool *stale,
                                  CUresult *r) {
    CUmemoryPool pool = NULL;
    *r = api->mem_pool_import_from_shareable_handle(&pool, (void *)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (*r != CUDA_SUCCESS) return NULL;
    if (stale != NULL) {
        stale->pool = pool; /* the old import is abandoned: its exporter is gone */
        return stale;
    }
    imported_pool *ip = calloc(1, sizeof *ip);
    if (ip == NULL) {
        *r = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    *ip = (imported_pool){.pid = h->pid, .nonce = h->nonce, .pool_key = h->pool_key,
                          .uuid = h->uuid, .pool = pool, .next = imported};
    imported = ip;
    return ip;
}

/* The allocation `data` names in `pool`, imported once and counted.
 * pools_lock held. */
static imported_allocation *import_allocation(imported_pool *ip, const CUmemPoolPtrExportData *data,
                                              CUresult *r) {
    for (imported_allocation *a = allocations; a != NULL; a = a->next)
        if (a->pool == ip && memcmp(&a->data, data, sizeof *data) == 0) {
            a->opens++;
            *r = CUDA_SUCCESS;
            return a;
        }
    imported_allocation *a = calloc(1, sizeof *a);
    if (a == NULL) {
        *r = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    a->data = *data;
    *r = api->mem_pool_import_pointer(&a->base, ip->pool, &a->data);
    if (*r != CUDA_SUCCESS) {
        free(a);
        return NULL;
    }
    a->pool = ip;
    a->opens = 1;
    a->next = allocations;
    allocations = a;
    return a;
}

/* Record what an open returned, for its close. pools_lock held. */
static int remember_open(void *ptr, CUdeviceptr legacy_base, imported_allocation *alloc) {
    open_record *o = calloc(1, sizeof *o);
    if (o == NULL) return -1;
    *o = (open_record){.ptr = ptr, .legacy_base = legacy_base, .alloc = alloc, .next = opens};
    opens = o;
    return 0;
}

/* One open of an imported allocation fewer: the memory is freed with the
 * last (CUDA frees an imported pointer once). pools_lock held. */
static CUresult release_allocation(imported_allocation *a) {
    if (--a->opens > 0) return CUDA_SUCCESS;
    for (imported_allocation **at = &allocations; *at != NULL; at = &(*at)->next)
        if (*at == a) {
            *at = a->next;
            break;
        }
    CUresult r = api->mem_free(a->base);
    free(a);
    return r;
}

/* Pool memory: the pool, imported once per exporting process and pool (the
 * descriptor `fd` is needed the first time, or again when the imported pool
 * no longer serves: a new exporter under a reused pid), then the
 * allocation, imported once however often it is opened. */
static int open_pool_memory(int32_t id, const cuda_ipc_handle *h, int fd, void **ptr,
                            pyxbuf_error *err) {
    if (api->mem_pool_import_pointer == NULL)
        return pyxbuf__error(err, PYXBUF_EUNSUPPORTED, -1,
                             "cuda ipc_open: process %" PRId64 " shared memory of a "
                             "stream-ordered pool, and this CUDA driver cannot import pools "
                             "(no cuMemPoolImportPointer: CUDA 11.2 or newer can); update the "
                             "NVIDIA driver, or pickle the array",
                             h->pid);
    pthread_mutex_lock(&pools_lock);
    CUresult r = CUDA_SUCCESS;
    const char *call = "cuMemPoolImportPointer";
    imported_pool *ip = find_imported_pool(h);
    imported_allocation *a = ip != NULL ? import_allocation(ip, &h->u.pool_data, &r) : NULL;
    if (a == NULL && fd >= 0 && r != CUDA_ERROR_OUT_OF_MEMORY) {
        call = "cuMemPoolImportFromShareableHandle";
        ip = import_pool(h, fd, ip, &r);
        call = ip != NULL ? "cuMemPoolImportPointer" : call;
        a = ip != NULL ? import_allocation(ip, &h->u.pool_data, &r) : NULL;
    }
    void *p = a != NULL ? (void *)(uintptr_t)(a->base + h->delta) : NULL;
    if (a != NULL && remember_open(p, 0, a) != 0) {
        release_allocation(a);
        a = NULL;
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&pools_lock);
    if (a != NULL) {
        *ptr = p;
        return 0;
    }
    if (ip == NULL && fd < 0)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "cuda ipc_open: the handle names memory of a pool of process "
                             "%" PRId64 ", whose file descriptor must arrive with it and did "
                             "not (fd -1); send the array with pyxbuf.multiprocessing, which "
                             "passes it by SCM_RIGHTS, or pass the descriptor that arrived to "
                             "pyxbuf_exporter_open_shared",
                             h->pid);
    char what[112];
    snprintf(what, sizeof what, "%s of process %" PRId64 "'s pool memory", call, h->pid);
    return failed(err, r, what, id, open_hint(r));
}

/* What open recorded for `ptr`, taken off the list, or NULL. */
static open_record *take_open(void *ptr) {
    pthread_mutex_lock(&pools_lock);
    open_record *found = NULL;
    for (open_record **at = &opens; *at != NULL; at = &(*at)->next)
        if ((*at)->ptr == ptr) {
            found = *at;
            *at = found->next;
            break;
        }
    pthread_mutex_unlock(&pools_lock);
    return found;
}

int pyxbuf__cuda_ipc_open(int32_t id, const void *handle, size_t handle_len, int fd, void **ptr,
                          pyxbuf_error *err) {
    if (api == NULL) return no_ipc("ipc_open", err);
    cuda_ipc_handle h;
    if (handle == NULL || handle_len != sizeof h) return bad_handle(err, handle_len);
    memcpy(&h, handle, sizeof h);
    if (memcmp(h.magic, MAGIC, sizeof MAGIC) != 0 || h.version != HANDLE_VERSION ||
        (h.kind != KIND_IPC_HANDLE && h.kind != KIND_POOL))
        return bad_handle(err, handle_len);
    int rc = check_same_gpu(id, &h, err);
    if (rc != 0) return rc;
    if (h.kind == KIND_POOL) return open_pool_memory(id, &h, fd, ptr, err);
    CUdeviceptr base = 0;
    CUresult r = api->ipc_open_mem_handle(&base, h.u.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CUDA_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "cuIpcOpenMemHandle of process %" PRId64 "'s memory",
                 h.pid);
        return failed(err, r, call, id, open_hint(r));
    }
    *ptr = (void *)(uintptr_t)(base + h.delta);
    pthread_mutex_lock(&pools_lock);
    int kept = remember_open(*ptr, base, NULL);
    pthread_mutex_unlock(&pools_lock);
    if (kept != 0) {
        api->ipc_close_mem_handle(base);
        return pyxbuf__error(err, PYXBUF_ENOMEM, -1, "cuda ipc_open: out of host memory");
    }
    return 0;
}

int pyxbuf__cuda_ipc_close(int32_t id, void *ptr, pyxbuf_error *err) {
    if (api == NULL) return no_ipc("ipc_close", err);
    open_record *o = take_open(ptr);
    if (o == NULL)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "cuda ipc_close: %p is not a pointer cuda ipc_open returned (or it "
                             "was closed already)",
                             ptr);
    /* Imported pool memory is freed with its last open, before the exporter
     * may free it (cuMemPoolImportPointer's rule); a legacy mapping is
     * closed (CUDA counts the opens of one handle). */
    CUresult r;
    if (o->alloc != NULL) {
        pthread_mutex_lock(&pools_lock);
        r = release_allocation(o->alloc);
        pthread_mutex_unlock(&pools_lock);
    } else {
        r = api->ipc_close_mem_handle(o->legacy_base);
    }
    int pooled = o->alloc != NULL;
    free(o);
    if (r != CUDA_SUCCESS)
        return failed(err, r, pooled ? "cuMemFree of imported pool memory" : "cuIpcCloseMemHandle",
                      id, "the memory may have been freed by its exporter first");
    return 0;
}
