/* cuda_pool.c -- the CUDA backend's stream-ordered pools: each device's
 * default memory pool (cuDeviceGetDefaultMemPool), where the device supports
 * pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, asked once per device),
 * or, when the configuration asks for shareable pools, one pool of pyxbuf's
 * own per device created with POSIX file-descriptor handles (cuda_ipc.c
 * exports it to other processes; the default pool cannot be), for cuda.c's
 * alloc_async, free_async and pool_trim. cuda.c makes the device's primary
 * context current around each call and turns results into messages; this
 * file keeps what it learnt of each device. */

#include "device/cuda_driver.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UNKNOWN = 0, POOLS, NO_POOLS };

typedef struct device_pool {
    int state;              /* UNKNOWN until asked */
    CUmemoryPool pool;      /* POOLS: the device's default pool */
    uint64_t threshold_for; /* the configured threshold last made to hold (0: none) */
    cuuint64_t ours;        /* the threshold pyxbuf last set (0: never) */
    int shareable_state;    /* UNKNOWN until a shareable pool is asked for */
    CUmemoryPool shareable; /* POOLS: pyxbuf's pool with POSIX fd handles */
    char shareable_refusal[192]; /* NO_POOLS: why there is none */
} device_pool;

static const pyxbuf__cuda_pool_api *api; /* NULL: the driver has no pools */
static device_pool *pools;
static int pool_count;
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

/* The live allocations of the shareable pools, where each starts and its
 * size, for cuda_ipc.c: cuMemPoolExportPointer names an allocation, and
 * cuMemGetAddressRange of pool memory may answer the pool's physical chunk
 * holding several (it does for virtual-memory mappings of several
 * segments), so export asks here first. Open addressing keyed by the start
 * (0: empty), at most half full; under its own lock, taken only once a
 * shareable pool has allocated (`tracking`). */
typedef struct shared_allocation {
    CUdeviceptr start;
    size_t size;
} shared_allocation;

static shared_allocation *shared;
static size_t shared_cap, shared_count;
static atomic_int tracking;
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(CUdeviceptr start, size_t cap) {
    return (size_t)(((uint64_t)start * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

/* The slot of `start` in a table of `cap` (a power of two) slots: its
 * entry, or the empty slot ending its run. */
static size_t probe(const shared_allocation *table, size_t cap, CUdeviceptr start) {
    size_t i = slot_of(start, cap);
    while (table[i].start != 0 && table[i].start != start) i = (i + 1) & (cap - 1);
    return i;
}

/* Into its slot, or over an entry of the same start: memory the driver
 * freed behind pyxbuf's back (a context reset) and handed out again. */
static int place(shared_allocation *table, size_t cap, shared_allocation a) {
    size_t i = probe(table, cap, a.start);
    int fresh = table[i].start == 0;
    table[i] = a;
    return fresh;
}

/* Remember [start, start + size); without host memory for the table the
 * allocation goes unremembered and export falls back to the address range. */
static void remember_shared(CUdeviceptr start, size_t size) {
    pthread_mutex_lock(&shared_lock);
    atomic_store(&tracking, 1);
    if (2 * (shared_count + 1) > shared_cap) {
        size_t cap = shared_cap ? 2 * shared_cap : 64;
        shared_allocation *grown = calloc(cap, sizeof *grown);
        if (grown != NULL) {
            for (size_t i = 0; i < shared_cap; i++)
                if (shared[i].start != 0) place(grown, cap, shared[i]);
            free(shared);
            shared = grown;
            shared_cap = cap;
        }
    }
    if (2 * (shared_count + 1) <= shared_cap &&
        place(shared, shared_cap, (shared_allocation){start, size}))
        shared_count++;
    pthread_mutex_unlock(&shared_lock);
}

/* Forget the allocation at `start`, if remembered, and say its size (0:
 * not remembered): the entries after it in its run are placed again, so
 * that every lookup still finds its own. */
static size_t forget_shared(CUdeviceptr start) {
    if (!atomic_load_explicit(&tracking, memory_order_relaxed)) return 0;
    size_t size = 0;
    pthread_mutex_lock(&shared_lock);
    size_t i = shared_cap ? probe(shared, shared_cap, start) : 0;
    if (shared_cap && shared[i].start == start) {
        size = shared[i].size;
        shared[i].start = 0;
        shared_count--;
        for (size_t j = (i + 1) & (shared_cap - 1); shared[j].start != 0;
             j = (j + 1) & (shared_cap - 1)) {
            shared_allocation moved = shared[j];
            shared[j].start = 0;
            place(shared, shared_cap, moved);
        }
    }
    pthread_mutex_unlock(&shared_lock);
    return size;
}

int pyxbuf__cuda_pool_allocation(CUdeviceptr ptr, CUdeviceptr *start, size_t *size) {
    if (!atomic_load(&tracking)) return 0;
    pthread_mutex_lock(&shared_lock);
    const shared_allocation *found = NULL;
    size_t i = shared_cap ? probe(shared, shared_cap, ptr) : 0;
    if (shared_cap && shared[i].start == ptr) found = &shared[i];
    for (size_t k = 0; found == NULL && k < shared_cap; k++) /* inside one: rare */
        if (shared[k].start != 0 && ptr > shared[k].start && ptr - shared[k].start < shared[k].size)
            found = &shared[k];
    if (found != NULL) {
        *start = found->start;
        *size = found->size;
    }
    pthread_mutex_unlock(&shared_lock);
    return found != NULL;
}

void pyxbuf__cuda_pools_init(const pyxbuf__cuda_pool_api *a, int count) {
    pools = a != NULL && count > 0 ? calloc((size_t)count, sizeof *pools) : NULL;
    api = pools != NULL ? a : NULL;
    pool_count = pools != NULL ? count : 0;
}

/* Whether device `id` has pools, and its default pool: asked once. A driver
 * that does not know the attribute, or will not give the pool, has none. */
static CUresult find_pool(device_pool *p, int32_t id, const char **call) {
    if (p->state != UNKNOWN) return CUDA_SUCCESS;
    CUdevice dev = 0;
    int supported = 0;
    *call = "cuDeviceGet";
    CUresult r = api->device_get(&dev, (int)id);
    if (r == CUDA_SUCCESS) {
        *call = "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)";
        r = api->device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                      dev);
        if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
            r = CUDA_SUCCESS;
            supported = 0;
        }
    }
    if (r == CUDA_SUCCESS && supported) {
        *call = "cuDeviceGetDefaultMemPool";
        r = api->device_get_default_mem_pool(&p->pool, dev);
        if (r == CUDA_ERROR_NOT_SUPPORTED) {
            r = CUDA_SUCCESS;
            supported = 0;
        }
    }
    if (r == CUDA_SUCCESS) p->state = supported ? POOLS : NO_POOLS;
    return r;
}

/* No shareable pool for this device, and why (kept for sharing's refusal). */
static void no_shareable(device_pool *p, const char *why, const char *call, CUresult r) {
    p->shareable_state = NO_POOLS;
    if (call != NULL)
        snprintf(p->shareable_refusal, sizeof p->shareable_refusal, "%s failed (CUresult %d)",
                 call, (int)r);
    else
        snprintf(p->shareable_refusal, sizeof p->shareable_refusal, "%s", why);
}

/* Device `id`'s shareable pool, made once: pinned device memory whose pool
 * exports a POSIX file descriptor. A device or driver that cannot make one,
 * for whatever reason, keeps the default pool: allocations go on, and
 * sharing their memory is refused with the reason. */
static void find_shareable(device_pool *p, int32_t id) {
    if (p->shareable_state != UNKNOWN) return;
    if (api->mem_pool_create == NULL) {
        no_shareable(p, "this CUDA driver has no cuMemPoolCreate (CUDA 11.2 or newer makes "
                        "pools other processes can open)", NULL, CUDA_SUCCESS);
        return;
    }
    CUdevice dev = 0;
    int types = 0;
    CUresult r = api->device_get(&dev, (int)id);
    if (r != CUDA_SUCCESS) {
        no_shareable(p, NULL, "cuDeviceGet", r);
        return;
    }
    r = api->device_get_attribute(&types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_NOT_SUPPORTED) {
        no_shareable(p, NULL, "cuDeviceGetAttribute(MEMPOOL_SUPPORTED_HANDLE_TYPES)", r);
        return;
    }
    /* A driver before CUDA 11.3 does not know the attribute: none. */
    if (r != CUDA_SUCCESS || !(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        no_shareable(p, "the device's pools cannot have POSIX file-descriptor handles "
                        "(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES lacks them: drivers "
                        "before CUDA 11.3, WSL)", NULL, CUDA_SUCCESS);
        return;
    }
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = (int)id;
    r = api->mem_pool_create(&p->shareable, &props);
    if (r != CUDA_SUCCESS) {
        no_shareable(p, NULL, "cuMemPoolCreate with POSIX file-descriptor handles", r);
        return;
    }
    p->shareable_state = POOLS;
}

/* The default pool is the process's: the CUDA runtime's cudaMallocAsync,
 * PyTorch's cudaMallocAsync backend and CuPy's MemoryAsyncPool use it too.
 * Its release threshold becomes pyxbuf's where it is lower, or where it is
 * the value pyxbuf set last; one another library set higher (PyTorch's
 * backend keeps everything) stays. Checked again when the configuration
 * changes. A threshold is how much to cache, not whether memory can be had:
 * pool_of does not fail an allocation for it. */
static CUresult apply_threshold(device_pool *p, uint64_t threshold, const char **call) {
    if (p->threshold_for == threshold) return CUDA_SUCCESS;
    cuuint64_t now = 0;
    *call = "cuMemPoolGetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)";
    CUresult r = api->mem_pool_get_attribute(p->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &now);
    if (r == CUDA_SUCCESS && (now < threshold || (p->ours != 0 && now == p->ours))) {
        cuuint64_t value = threshold;
        *call = "cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)";
        r = api->mem_pool_set_attribute(p->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value);
        if (r == CUDA_SUCCESS) p->ours = value;
    }
    if (r == CUDA_SUCCESS) p->threshold_for = threshold;
    return r;
}

/* Device `id`'s pool to allocate from in *pool (NULL when it has none):
 * its shareable pool when `shareable` and it can have one, else its
 * default pool, with `threshold` applied unless it is 0 (a shareable pool
 * keeps its memory whatever the threshold); *default_pool the default pool,
 * the one whose idle memory can go back to the device. */
static CUresult pool_of(int32_t id, uint64_t threshold, int shareable, CUmemoryPool *pool,
                        CUmemoryPool *default_pool, const char **call) {
    *pool = *default_pool = NULL;
    if (api == NULL || id < 0 || id >= pool_count) return CUDA_SUCCESS;
    pthread_mutex_lock(&pools_lock);
    device_pool *p = &pools[id];
    CUresult r = find_pool(p, id, call);
    if (r == CUDA_SUCCESS && p->state == POOLS) {
        *default_pool = p->pool;
        if (shareable) find_shareable(p, id);
        if (shareable && p->shareable_state == POOLS) {
            *pool = p->shareable;
        } else {
            if (threshold != 0 && apply_threshold(p, threshold, call) != CUDA_SUCCESS)
                p->threshold_for = threshold; /* not asked again until it changes */
            *pool = p->pool;
        }
    }
    pthread_mutex_unlock(&pools_lock);
    return r;
}

const char *pyxbuf__cuda_pool_shareable_refusal(int32_t id) {
    if (api == NULL || id < 0 || id >= pool_count) return NULL;
    pthread_mutex_lock(&pools_lock);
    /* Written once, before the state is NO_POOLS, and never again. */
    const char *why = pools[id].shareable_state == NO_POOLS ? pools[id].shareable_refusal : NULL;
    pthread_mutex_unlock(&pools_lock);
    return why;
}

int pyxbuf__cuda_pool_is_shareable(int32_t id, CUmemoryPool pool) {
    if (api == NULL || id < 0 || id >= pool_count || pool == NULL) return 0;
    pthread_mutex_lock(&pools_lock);
    int mine = pools[id].shareable_state == POOLS && pools[id].shareable == pool;
    pthread_mutex_unlock(&pools_lock);
    return mine;
}

CUresult pyxbuf__cuda_pool_alloc(int32_t id, size_t n, CUstream s, CUdeviceptr *out, int *pooled,
                                 const char **call) {
    CUmemoryPool pool = NULL, default_pool = NULL;
    pyxbuf_transfer_config c;
    pyxbuf__transfer_config(&c, NULL);
    uint64_t threshold = c.device_pool_release_threshold
                             ? c.device_pool_release_threshold
                             : PYXBUF_DEVICE_POOL_RELEASE_THRESHOLD_DEFAULT;
    CUresult r = pool_of(id, threshold, c.device_pool_shareable, &pool, &default_pool, call);
    *pooled = pool != NULL;
    if (r != CUDA_SUCCESS || pool == NULL) return r;
    *call = "cuMemAllocFromPoolAsync";
    r = api->mem_alloc_from_pool_async(out, n, pool, s);
    /* The cap: memory the default pool holds idle may be what is missing (a
     * shareable pool gives nothing back before exit). */
    if (r == CUDA_ERROR_OUT_OF_MEMORY && api->mem_pool_trim_to(default_pool, 0) == CUDA_SUCCESS)
        r = api->mem_alloc_from_pool_async(out, n, pool, s);
    if (r == CUDA_SUCCESS && pool != default_pool) remember_shared(*out, n);
    return r;
}

CUresult pyxbuf__cuda_pool_free(int32_t id, CUdeviceptr ptr, CUstream s, int *pooled,
                                const char **call) {
    CUmemoryPool pool = NULL, default_pool = NULL;
    CUresult r = pool_of(id, 0, 0, &pool, &default_pool, call);
    *pooled = pool != NULL;
    if (r != CUDA_SUCCESS || pool == NULL) return r;
    *call = "cuMemFreeAsync"; /* into the pool it came from, default or shareable */
    /* Forgotten first: once freed, the address may be handed out again. */
    size_t size = forget_shared(ptr);
    r = api->mem_free_async(ptr, s);
    if (r != CUDA_SUCCESS && size != 0) remember_shared(ptr, size); /* still live */
    return r;
}

CUresult pyxbuf__cuda_pool_trim(int32_t id, uint64_t keep, int *pooled, const char **call) {
    CUmemoryPool pool = NULL, default_pool = NULL;
    CUresult r = pool_of(id, 0, 0, &pool, &default_pool, call);
    *pooled = pool != NULL;
    if (r != CUDA_SUCCESS || pool == NULL) return r;
    *call = "cuMemPoolTrimTo"; /* the default pool: a shareable one keeps its memory */
    return api->mem_pool_trim_to(pool, keep > SIZE_MAX ? SIZE_MAX : (size_t)keep);
}
