/* cuda_driver.h -- the CUDA driver API as pyxbuf uses it, for cuda.c (the
 * backend) and cuda_pool.c (its stream-ordered pools): libcuda is opened with
 * dlopen, so these are declared here with cuda.h's values and no cuda.h is
 * needed to build. */
#ifndef PYXBUF_DEVICE_CUDA_DRIVER_H
#define PYXBUF_DEVICE_CUDA_DRIVER_H

#include "device/device.h"

/* ------------------------------------------------------------------------- */
/* The driver's types and constants, with cuda.h's values (CUDA 11 and 12)   */
/* ------------------------------------------------------------------------- */

typedef int CUresult; /* an enum in cuda.h; int-sized on every CUDA platform */
typedef int CUdevice;
#if UINTPTR_MAX > 0xFFFFFFFFu
typedef unsigned long long CUdeviceptr;
#else
typedef unsigned int CUdeviceptr;
#endif
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef int CUpointer_attribute; /* enum */

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_MAP_FAILED = 205,
    CUDA_ERROR_ALREADY_MAPPED = 208,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_ASSERT = 710,
    CUDA_ERROR_TOO_MANY_PEERS = 711,
    CUDA_ERROR_HARDWARE_STACK_ERROR = 714, /* .. 719 CUDA_ERROR_LAUNCH_FAILED */
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801, /* cuda.h 11.6, line 1964 (see below) */
};

enum {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10, /* cuda.h 11.6, line 719 */
    CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17,             /* line 726 */
};

enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4,
};

#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_MEMHOSTALLOC_PORTABLE 0x1u
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* ------------------------------------------------------------------------- */
/* The stream-ordered allocator (CUDA 11.2)                                  */
/* ------------------------------------------------------------------------- */

/* Values and signatures as NVIDIA's cuda.h declares them; quoted from the
 * copy of CUDA 11.6's cuda.h (CUDA_VERSION 11060) in ggerganov/llama.cpp,
 * include/cuda/cuda.h at commit f555db44e: CUmemoryPool (line 270),
 * CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115 (line 675),
 * CUDA_ERROR_NOT_SUPPORTED = 801 (line 1964), the CUmemPool_attribute enum
 * (lines 3128-3180: REUSE_FOLLOW_EVENT_DEPENDENCIES = 1, then
 * REUSE_ALLOW_OPPORTUNISTIC, REUSE_ALLOW_INTERNAL_DEPENDENCIES and
 * RELEASE_THRESHOLD, so 4, "value type = cuuint64_t"), cuDeviceGetAttribute
 * (4140), cuDeviceGetDefaultMemPool (4241), cuMemFreeAsync (10408),
 * cuMemAllocAsync (10441), cuMemPoolTrimTo (10467), cuMemPoolSetAttribute
 * (10510), cuMemPoolGetAttribute (10557), cuMemAllocFromPoolAsync (10671).
 * cuda.h maps only the Async calls onto _ptsz variants, and only when
 * compiled for a per-thread default stream: the plain names below are the
 * exported ones, with the legacy default stream for a NULL stream, as
 * everywhere in cuda.c. pyxbuf allocates with cuMemAllocFromPoolAsync, which
 * is cuMemAllocAsync from a named pool: the default pool, whose threshold it
 * manages, even where another library made a different pool current
 * (cuDeviceSetMemPool). */
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef int CUdevice_attribute;  /* enum */
typedef int CUmemPool_attribute; /* enum */
typedef uint64_t cuuint64_t;
enum { CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115 };
enum { CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4 };

/* Resolved apart from the rest of the driver (cuda.c): a driver without
 * them (before CUDA 11.2) has no pools, and allocates with cuMemAlloc. */
/* Pools other processes can open (the CUDA programming guide's "IPC Export
 * Pool"), from the same cuda.h: CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES
 * = 119 ("Handle types supported with mempool based IPC", line 679; CUDA
 * 11.3, older drivers answer CUDA_ERROR_INVALID_VALUE),
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1 ("(int)", line 2921),
 * CU_MEM_LOCATION_TYPE_DEVICE = 0x1 (2942), CU_MEM_ALLOCATION_TYPE_PINNED =
 * 0x1 (2955), CUmemLocation (3038-3042), CUmemPoolProps (3185-3197: 88 bytes
 * with its reserved[64]; CUDA 12 carves maxSize and usage out of it, zero
 * meaning their defaults), CUmemPoolPtrExportData (3203-3206: 64 opaque
 * bytes), cuMemPoolCreate (10610), cuMemPoolExportToShareableHandle
 * (10700: the handle is written through a pointer), cuMemPoolImportFrom-
 * ShareableHandle (10724: an fd is passed by value, cast to void *; imported
 * pools allocate nothing), cuMemPoolExportPointer (10748), cuMemPoolImport-
 * Pointer (10777: "The imported memory must be freed from all importing
 * processes before being freed in the exporting process. The pointer may be
 * freed with cuMemFree") and cuMemFree (6349, exported as _v2: line 95). */
enum { CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES = 119 };
enum { CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1 };
enum { CU_MEM_LOCATION_TYPE_DEVICE = 0x1, CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 };
typedef struct CUmemLocation_st {
    int type;
    int id;
} CUmemLocation;
typedef struct CUmemPoolProps_st {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    unsigned char reserved[64];
} CUmemPoolProps;
typedef struct CUmemPoolPtrExportData_st {
    unsigned char reserved[64];
} CUmemPoolPtrExportData;

typedef struct pyxbuf__cuda_pool_api {
    CUresult (*device_get)(CUdevice *device, int ordinal);
    CUresult (*device_get_attribute)(int *value, CUdevice_attribute attribute, CUdevice device);
    CUresult (*device_get_default_mem_pool)(CUmemoryPool *pool, CUdevice device);
    CUresult (*mem_pool_get_attribute)(CUmemoryPool pool, CUmemPool_attribute attribute,
                                       void *value);
    CUresult (*mem_pool_set_attribute)(CUmemoryPool pool, CUmemPool_attribute attribute,
                                       void *value);
    CUresult (*mem_pool_trim_to)(CUmemoryPool pool, size_t min_bytes_to_keep);
    CUresult (*mem_alloc_from_pool_async)(CUdeviceptr *ptr, size_t bytes, CUmemoryPool pool,
                                          CUstream stream);
    CUresult (*mem_free_async)(CUdeviceptr ptr, CUstream stream);
    /* The shareable pools' (resolved on its own: NULL, none can be made). */
    CUresult (*mem_pool_create)(CUmemoryPool *pool, const CUmemPoolProps *props);
} pyxbuf__cuda_pool_api;

/* cuda_pool.c, for cuda.c, which calls these with the device's primary
 * context current. Each returns CUDA_SUCCESS, or the failed call's result
 * with *call naming it; *pooled says whether the device has a pool at all
 * (when not, cuda.c allocates and frees with cuMemAlloc and cuMemFree).
 * init: the pools of `count` devices; `api` NULL when the driver has no
 * stream-ordered allocator. alloc: on `s`, from the device's default pool,
 * whose release threshold becomes the configuration's (unless another
 * library set it higher), or, with the configuration's
 * device_pool_shareable, from a pool of pyxbuf's own created with POSIX
 * file-descriptor handles (where the device allows them; else the default
 * pool, and shareable_refusal says why); out of memory, the pool's idle
 * memory goes back to the device and the allocation is tried once more.
 * shareable_refusal: NULL, or why device `id` has no shareable pool (once
 * one was asked for). */
void pyxbuf__cuda_pools_init(const pyxbuf__cuda_pool_api *api, int count);
CUresult pyxbuf__cuda_pool_alloc(int32_t id, size_t n, CUstream s, CUdeviceptr *out, int *pooled,
                                 const char **call);
CUresult pyxbuf__cuda_pool_free(int32_t id, CUdeviceptr ptr, CUstream s, int *pooled,
                                const char **call);
CUresult pyxbuf__cuda_pool_trim(int32_t id, uint64_t keep, int *pooled, const char **call);
const char *pyxbuf__cuda_pool_shareable_refusal(int32_t id);
/* Whether `pool` is device `id`'s shareable pool, pyxbuf's own. */
int pyxbuf__cuda_pool_is_shareable(int32_t id, CUmemoryPool pool);
/* 1 with the allocation holding `ptr` (its start and size) when a shareable
 * pool made it and it is live, else 0. */
int pyxbuf__cuda_pool_allocation(CUdeviceptr ptr, CUdeviceptr *start, size_t *size);

/* ------------------------------------------------------------------------- */
/* Interprocess memory handles                                               */
/* ------------------------------------------------------------------------- */

/* From the same cuda.h: CUuuid (line 275), CU_IPC_HANDLE_SIZE 64 and
 * CUipcMemHandle (283-298), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1 (305),
 * the error codes above (205, 208, 217: lines 1636-1707; 711: 1876),
 * cuDeviceGetUuid (3797), cuMemGetAddressRange (6383, exported as _v2: line
 * 96), cuIpcGetMemHandle (6916: "a pointer to the base of an existing device
 * memory allocation created with cuMemAlloc"), cuIpcOpenMemHandle (6974,
 * exported as _v2: line 146; a handle opened again in the same context has its
 * reference count raised, since CUDA 11.1) and cuIpcCloseMemHandle (7008).
 * The handle is passed by value. */
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;
#define CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
    char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1u

/* Resolved apart from the rest (cuda.c): a driver without them cannot share
 * memory between processes, and says so when asked to. device_get_uuid may
 * be NULL on its own (the handle's device is then not checked). */
typedef struct pyxbuf__cuda_ipc_api {
    CUresult (*device_get)(CUdevice *device, int ordinal);
    CUresult (*device_get_uuid)(CUuuid *uuid, CUdevice device);
    CUresult (*mem_get_address_range)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
    CUresult (*pointer_get_attributes)(unsigned int count, CUpointer_attribute *attributes,
                                       void **data, CUdeviceptr ptr);
    CUresult (*ipc_get_mem_handle)(CUipcMemHandle *handle, CUdeviceptr ptr);
    CUresult (*ipc_open_mem_handle)(CUdeviceptr *ptr, CUipcMemHandle handle, unsigned int flags);
    CUresult (*ipc_close_mem_handle)(CUdeviceptr ptr);
    CUresult (*get_error_name)(CUresult error, const char **name);
    CUresult (*get_error_string)(CUresult error, const char **text);
    /* Pool memory (CUDA 11.2), all five or none (NULL: such memory is not
     * shared). */
    CUresult (*mem_pool_export_to_shareable_handle)(void *handle, CUmemoryPool pool, int type,
                                                     unsigned long long flags);
    CUresult (*mem_pool_import_from_shareable_handle)(CUmemoryPool *pool, void *handle, int type,
                                                       unsigned long long flags);
    CUresult (*mem_pool_export_pointer)(CUmemPoolPtrExportData *data, CUdeviceptr ptr);
    CUresult (*mem_pool_import_pointer)(CUdeviceptr *ptr, CUmemoryPool pool,
                                        CUmemPoolPtrExportData *data);
    CUresult (*mem_free)(CUdeviceptr ptr);
} pyxbuf__cuda_ipc_api;

/* cuda_ipc.c, for cuda.c, which calls these with device `id`'s primary
 * context current, after the driver loaded and `id` was checked. `api` NULL:
 * the driver has no IPC (each call then fails saying so). export: the
 * handle naming the allocation holding `ptr` and ptr's place in it: CUDA's
 * IPC handle of a cuMemAlloc allocation, or the export data of an
 * allocation from a pool with POSIX file-descriptor handles, *fd then that
 * pool's descriptor (exported once, kept open; other pool memory is
 * refused, naming the way out); open, in another process: map it (pool
 * memory: the pool imported from `fd`, once per exporting process and pool,
 * then the pointer); close: unmap or free what open mapped. 0, or the error
 * code with err filled. */
void pyxbuf__cuda_ipc_init(const pyxbuf__cuda_ipc_api *api);
int pyxbuf__cuda_ipc_export(int32_t id, const void *ptr, void *handle, size_t *handle_len,
                            int *fd, pyxbuf_error *err);
int pyxbuf__cuda_ipc_open(int32_t id, const void *handle, size_t handle_len, int fd, void **ptr,
                          pyxbuf_error *err);
int pyxbuf__cuda_ipc_close(int32_t id, void *ptr, pyxbuf_error *err);

#endif
