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
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_ASSERT = 710,
    CUDA_ERROR_HARDWARE_STACK_ERROR = 714, /* .. 719 CUDA_ERROR_LAUNCH_FAILED */
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801, /* cuda.h 11.6, line 1964 (see below) */
};

enum {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
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
} pyxbuf__cuda_pool_api;

/* cuda_pool.c, for cuda.c, which calls these with the device's primary
 * context current. Each returns CUDA_SUCCESS, or the failed call's result
 * with *call naming it; *pooled says whether the device has a pool at all
 * (when not, cuda.c allocates and frees with cuMemAlloc and cuMemFree).
 * init: the pools of `count` devices; `api` NULL when the driver has no
 * stream-ordered allocator. alloc: on `s`, from the device's default pool,
 * whose release threshold becomes the configuration's (unless another
 * library set it higher); out of memory, the pool's idle memory goes back to
 * the device and the allocation is tried once more. */
void pyxbuf__cuda_pools_init(const pyxbuf__cuda_pool_api *api, int count);
CUresult pyxbuf__cuda_pool_alloc(int32_t id, size_t n, CUstream s, CUdeviceptr *out, int *pooled,
                                 const char **call);
CUresult pyxbuf__cuda_pool_free(int32_t id, CUdeviceptr ptr, CUstream s, int *pooled,
                                const char **call);
CUresult pyxbuf__cuda_pool_trim(int32_t id, uint64_t keep, int *pooled, const char **call);

#endif
