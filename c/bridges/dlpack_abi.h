/* dlpack_abi.h -- the DLPack ABI as pyxbuf reads and writes it: pyxbuf's own
 * declarations, written from the DLPack specification (dlpack.h 1.3 and the
 * Python specification); nothing here includes dlpack.h. Shared by the
 * DLPack import bridge (bridges/) and the DLPack export (export/). */
#ifndef PYXBUF_DLPACK_ABI_H
#define PYXBUF_DLPACK_ABI_H

#include <stddef.h>
#include <stdint.h>

#define DL_MAJOR 1
#define DL_MINOR 3 /* the newest minor whose codes and tables pyxbuf knows */

/* DLDeviceType */
#define kDLCPU 1
#define kDLCUDA 2
#define kDLCUDAHost 3
#define kDLROCM 10
#define kDLROCMHost 11

/* DLDataTypeCode */
#define kDLInt 0
#define kDLUInt 1
#define kDLFloat 2
#define kDLOpaqueHandle 3
#define kDLBfloat 4
#define kDLComplex 5
#define kDLBool 6
#define kDLFloat8_e3m4 7
#define kDLFloat8_e4m3 8
#define kDLFloat8_e4m3b11fnuz 9
#define kDLFloat8_e4m3fn 10
#define kDLFloat8_e4m3fnuz 11
#define kDLFloat8_e5m2 12
#define kDLFloat8_e5m2fnuz 13
#define kDLFloat8_e8m0fnu 14
#define kDLFloat6_e2m3fn 15
#define kDLFloat6_e3m2fn 16
#define kDLFloat4_e2m1fn 17

/* DLManagedTensorVersioned.flags */
#define DL_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define DL_FLAG_IS_COPIED (UINT64_C(1) << 1)
#define DL_FLAG_SUBBYTE_PADDED (UINT64_C(1) << 2)

typedef struct DLPackVersion {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

/* DLDeviceType is a C enum in dlpack.h: int-sized on every ABI DLPack runs
 * on; int32_t here keeps the layout and obeys pyxbuf's no-enum rule. */
typedef struct DLDevice {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct DLDataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct DLTensor {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL = C order (legacy producers) */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* The C exchange table (DLPack 1.3). Only the header is stable across major
 * versions; prev_api chains to older tables. */
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct DLPackExchangeAPI {
    DLPackExchangeAPIHeader header;
    int (*managed_tensor_allocator)(DLTensor *prototype, DLManagedTensorVersioned **out,
                                    void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind,
                                                      const char *message));
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, DLManagedTensorVersioned **out);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *tensor,
                                               void **out_py_object);
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} DLPackExchangeAPI;

/* Layout checks against the x86-64 / aarch64 LP64 ABI the specification's
 * header gives (pointers 8 bytes). */
_Static_assert(sizeof(DLDataType) == 4, "DLDataType is 4 bytes");
_Static_assert(sizeof(DLDevice) == 8, "DLDevice is 8 bytes");
_Static_assert(offsetof(DLTensor, ndim) == sizeof(void *) + 8, "DLTensor.ndim");
_Static_assert(offsetof(DLTensor, shape) == sizeof(void *) + 16, "DLTensor.shape");
_Static_assert(offsetof(DLManagedTensorVersioned, flags) == 8 + 2 * sizeof(void *),
               "DLManagedTensorVersioned.flags");

#define CAPSULE_VERSIONED "dltensor_versioned"
#define CAPSULE_USED_VERSIONED "used_dltensor_versioned"
#define CAPSULE_LEGACY "dltensor"
#define CAPSULE_USED_LEGACY "used_dltensor"
#define CAPSULE_EXCHANGE_API "dlpack_exchange_api"

#endif
