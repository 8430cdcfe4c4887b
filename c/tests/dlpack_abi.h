/* dlpack_abi.h -- the tests' own DLPack declarations (DLPack 1.3's ABI,
 * written from the specification and independent of c/dlpack.c's, so that a
 * mistake in one is caught by the other). Used by the test extension's
 * producers and by the DLPack fuzz target. */
#ifndef PYXBUF_TESTS_DLPACK_ABI_H
#define PYXBUF_TESTS_DLPACK_ABI_H

#include <stdint.h>

typedef struct {
    uint32_t major, minor;
} t_version;

typedef struct {
    int32_t device_type, device_id;
} t_device;

typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} t_dtype;

typedef struct {
    void *data;
    t_device device;
    int32_t ndim;
    t_dtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} t_tensor;

typedef struct t_managed {
    t_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct t_managed *);
} t_managed;

typedef struct t_versioned {
    t_version version;
    void *manager_ctx;
    void (*deleter)(struct t_versioned *);
    uint64_t flags;
    t_tensor dl_tensor;
} t_versioned;

typedef struct t_api_header {
    t_version version;
    struct t_api_header *prev_api;
} t_api_header;

typedef struct {
    t_api_header header;
    void *managed_tensor_allocator;
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, t_versioned **out);
    void *managed_tensor_to_py_object_no_sync;
    void *dltensor_from_py_object_no_sync;
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} t_api;

#define FLAG_READ_ONLY 1u
#define FLAG_IS_COPIED 2u
#define FLAG_PADDED 4u

/* DLDeviceType values the tests use. */
#define T_DL_CPU 1
#define T_DL_CUDA 2
#define T_DL_EXT_DEV 12

#define T_CAPSULE_VERSIONED "dltensor_versioned"
#define T_CAPSULE_LEGACY "dltensor"
#define T_CAPSULE_EXCHANGE_API "dlpack_exchange_api"

#endif
