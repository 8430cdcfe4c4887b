/* dlpack.c -- the DLPack bridge: import (pyxbuf_get reading a DLPack tensor,
 * through the DLPack 1.3 C exchange table or __dlpack__) and export
 * (__dlpack__ / __dlpack_device__ on pyxbuf.Exporter).
 *
 * The DLPack declarations below are pyxbuf's own, written from the DLPack
 * specification (dlpack.h 1.3 and the Python specification); nothing here
 * includes dlpack.h.
 *
 * Import rules (each is a decision; DESIGN.md "Acquisition" item 2):
 *  - The C exchange table, type(obj).__dlpack_c_exchange_api__ (a capsule
 *    named "dlpack_exchange_api"), is looked up once per type and cached under
 *    (type, tp_version_tag); when present, acquisition makes no Python call.
 *  - Otherwise __dlpack__(max_version=(1, 3), stream=..., copy=False when the
 *    request is writable). dl_device is never passed: pyxbuf never asks a
 *    producer to move data (the Array API's "no implicit transfer"); a device
 *    tensor asked without PYXBUF_DEVICE is refused. A producer that raises
 *    TypeError for those keywords (pre-2023 producers) is called again as
 *    __dlpack__() or __dlpack__(stream=...) and must give the legacy capsule.
 *  - Consumed capsules are renamed "used_dltensor[_versioned]"; from then on
 *    the tensor belongs to a holder object (the view's owner) whose death calls
 *    the DLPack deleter, once, with the GIL. Every failure after the rename
 *    goes through the holder too, so the deleter runs exactly once whatever
 *    happens.
 *  - dtypes become native format strings without a prefix: DLPack data is in
 *    native byte order, and the native codes b h i q B H I Q e f d have these
 *    sizes on every platform CPython supports ('q', not 'l': long is 4 bytes on
 *    Windows). bool is '?', complex64/128 'Zf'/'Zd', complex32
 *    '[ml_dtypes$complex32]', bfloat16 and the float8/6/4 codes the ml_dtypes
 *    custom types of the same names. Sub-byte types (bits < 8) are read only
 *    when the producer flags them padded (one element per byte, exactly
 *    ml_dtypes' layout: int4 -> '[ml_dtypes$int4]'); packed ones are refused.
 *    float128 is refused (DLPack means IEEE binary128; C's long double is not
 *    that on the platforms pyxbuf runs on), as are vector types (lanes != 1)
 *    and opaque handles.
 *  - kDLCPU, kDLCUDAHost and kDLROCMHost are host memory (device NULL);
 *    anything else is device memory described as PYXBUF_DEVICE_DLPACK with a
 *    pyxbuf_device_info in the holder, and, when a backend for its device type
 *    is registered, the backend must agree that the pointer is on that device.
 *  - Streams. pyxbuf_get passes stream=None (the producer assumes the default
 *    stream). pyxbuf_get_stream passes the consumer's stream after asking
 *    __dlpack_device__: None for host tensors (the specification allows only
 *    None there), 1 for pyxbuf's 0 on CUDA (DLPack forbids 0 on CUDA; 1 is the
 *    legacy default stream that 0 means in pyxbuf's convention), the integer
 *    otherwise. The producer then orders its work before that stream, so the
 *    view's sync_event is NULL (ready for work on that stream). Without a
 *    stream the producer orders its work before the default stream only, so
 *    for a device tensor pyxbuf records an event there and hands it over as
 *    sync_event, destroyed with the view. The C exchange table is "no sync": for a device
 *    tensor pyxbuf records an event on the producer's current work stream
 *    (current_work_stream) and hands it over as sync_event (the consumer waits
 *    with pyxbuf_device_wait; a stream given to pyxbuf_get_stream is made to
 *    wait at once), destroyed with the view.
 *
 * Export rules: see dlpack_export below.
 */

#include "base/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* DLPack declarations (ABI of dlpack.h 1.3)                                 */
/* ------------------------------------------------------------------------- */

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

/* ------------------------------------------------------------------------- */
/* dtypes <-> formats                                                        */
/* ------------------------------------------------------------------------- */

/* The ml_dtypes custom types DLPack has codes for; `bits` is the DLPack bit
 * width (sub-byte types are stored one per byte by ml_dtypes). */
typedef struct custom_dtype {
    uint8_t code;
    uint8_t bits;
    const char *format; /* "[ml_dtypes$...]" */
} custom_dtype;

static const custom_dtype CUSTOM_DTYPES[] = {
    {kDLBfloat, 16, "[ml_dtypes$bfloat16]"},
    {kDLComplex, 32, "[ml_dtypes$complex32]"},
    {kDLFloat8_e3m4, 8, "[ml_dtypes$float8_e3m4]"},
    {kDLFloat8_e4m3, 8, "[ml_dtypes$float8_e4m3]"},
    {kDLFloat8_e4m3b11fnuz, 8, "[ml_dtypes$float8_e4m3b11fnuz]"},
    {kDLFloat8_e4m3fn, 8, "[ml_dtypes$float8_e4m3fn]"},
    {kDLFloat8_e4m3fnuz, 8, "[ml_dtypes$float8_e4m3fnuz]"},
    {kDLFloat8_e5m2, 8, "[ml_dtypes$float8_e5m2]"},
    {kDLFloat8_e5m2fnuz, 8, "[ml_dtypes$float8_e5m2fnuz]"},
    {kDLFloat8_e8m0fnu, 8, "[ml_dtypes$float8_e8m0fnu]"},
    /* sub-byte: padded to one byte per element */
    {kDLFloat6_e2m3fn, 6, "[ml_dtypes$float6_e2m3fn]"},
    {kDLFloat6_e3m2fn, 6, "[ml_dtypes$float6_e3m2fn]"},
    {kDLFloat4_e2m1fn, 4, "[ml_dtypes$float4_e2m1fn]"},
    {kDLInt, 4, "[ml_dtypes$int4]"},
    {kDLInt, 2, "[ml_dtypes$int2]"},
    {kDLInt, 1, "[ml_dtypes$int1]"},
    {kDLUInt, 4, "[ml_dtypes$uint4]"},
    {kDLUInt, 2, "[ml_dtypes$uint2]"},
    {kDLUInt, 1, "[ml_dtypes$uint1]"},
};
#define N_CUSTOM (sizeof CUSTOM_DTYPES / sizeof *CUSTOM_DTYPES)

static const char *dtype_code_name(uint8_t code) {
    static const char *const names[] = {
        "kDLInt", "kDLUInt", "kDLFloat", "kDLOpaqueHandle", "kDLBfloat", "kDLComplex",
        "kDLBool", "kDLFloat8_e3m4", "kDLFloat8_e4m3", "kDLFloat8_e4m3b11fnuz",
        "kDLFloat8_e4m3fn", "kDLFloat8_e4m3fnuz", "kDLFloat8_e5m2", "kDLFloat8_e5m2fnuz",
        "kDLFloat8_e8m0fnu", "kDLFloat6_e2m3fn", "kDLFloat6_e3m2fn", "kDLFloat4_e2m1fn",
    };
    return code < sizeof names / sizeof *names ? names[code] : "unknown";
}

/* The buffer format of each standard dtype, by code and by bits (8, 16, 32,
 * 64, 128 in the columns); NULL where no format describes it. */
static const char *const STANDARD_FORMATS[kDLBool + 1][5] = {
    [kDLInt] = {"b", "h", "i", "q", NULL},
    [kDLUInt] = {"B", "H", "I", "Q", NULL},
    [kDLFloat] = {NULL, "e", "f", "d", NULL},
    [kDLComplex] = {NULL, NULL, NULL, "Zf", "Zd"},
    [kDLBool] = {"?", NULL, NULL, NULL, NULL},
};

static int bits_column(uint8_t bits) {
    switch (bits) {
    case 8: return 0;
    case 16: return 1;
    case 32: return 2;
    case 64: return 3;
    case 128: return 4;
    default: return -1;
    }
}

static const char *dtype_to_format_slow(DLDataType dt, int padded, Py_ssize_t *itemsize,
                                        char *why, size_t cap);

/* The format of a DLPack dtype (a static string) and its itemsize, or NULL
 * with `why` filled. `padded`: the producer flagged sub-byte types padded. */
static inline const char *dtype_to_format(DLDataType dt, int padded, Py_ssize_t *itemsize,
                                          char *why, size_t cap) {
    int col = bits_column(dt.bits);
    const char *format = dt.lanes == 1 && dt.code <= kDLBool && col >= 0
                             ? STANDARD_FORMATS[dt.code][col]
                             : NULL;
    if (PYXBUF_LIKELY(format != NULL)) {
        *itemsize = dt.bits / 8;
        return format;
    }
    return dtype_to_format_slow(dt, padded, itemsize, why, cap);
}

/* dtype_to_format past the standard table: custom types and refusals. */
static PYXBUF_NOINLINE const char *dtype_to_format_slow(DLDataType dt, int padded,
                                                        Py_ssize_t *itemsize, char *why,
                                                        size_t cap) {
    const char *code = dtype_code_name(dt.code);
    if (dt.lanes != 1) {
        snprintf(why, cap,
                 "dtype (%s, %u bits, %u lanes) is a vector type; pyxbuf describes one scalar "
                 "per element (lanes must be 1)",
                 code, dt.bits, dt.lanes);
        return NULL;
    }
    if (dt.code == kDLFloat && dt.bits == 128) {
        snprintf(why, cap,
                 "dtype float128 (%s, 128 bits) is IEEE binary128, which no buffer format "
                 "describes ('g' is the platform's long double); cast it to float64 first",
                 code);
        return NULL;
    }
    if (dt.code == kDLOpaqueHandle) {
        snprintf(why, cap, "dtype kDLOpaqueHandle (%u bits) has no agreed meaning; pyxbuf "
                 "cannot describe its elements", dt.bits);
        return NULL;
    }
    for (size_t i = 0; i < N_CUSTOM; i++) {
        if (CUSTOM_DTYPES[i].code != dt.code || CUSTOM_DTYPES[i].bits != dt.bits) continue;
        if (dt.bits < 8 && !padded) {
            snprintf(why, cap,
                     "sub-byte type %s of %u bits is packed (several elements per byte), which "
                     "is not supported; pyxbuf reads sub-byte types only when the producer pads "
                     "them to one byte each (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)",
                     code, dt.bits);
            return NULL;
        }
        *itemsize = dt.bits < 8 ? 1 : dt.bits / 8;
        return CUSTOM_DTYPES[i].format;
    }
    if (dt.code > kDLFloat4_e2m1fn)
        snprintf(why, cap, "dtype code %u is unknown to pyxbuf (DLPack %d.%d knows codes 0..%d)",
                 dt.code, DL_MAJOR, DL_MINOR, kDLFloat4_e2m1fn);
    else if (dt.bits < 8)
        snprintf(why, cap, "sub-byte type %s of %u bits is not supported", code, dt.bits);
    else
        snprintf(why, cap, "dtype %s with %u bits is not a type pyxbuf can describe", code,
                 dt.bits);
    return NULL;
}

static int native_order(int32_t order) {
    static const union {
        uint16_t u;
        uint8_t b[2];
    } probe = {1};
    int little = probe.b[0] == 1;
    if (order == PYXBUF_ORDER_LITTLE) return little;
    if (order == PYXBUF_ORDER_BIG || order == PYXBUF_ORDER_NETWORK) return !little;
    return 1;
}

/* The DLPack dtype of a buffer format, or -1 with BufferError. *padded is
 * set for sub-byte ml_dtypes types (one element per byte). */
static int format_to_dtype(const char *fmt, DLDataType *dt, int *padded) {
    pyxbuf_format f;
    pyxbuf_error err;
    const char *shown = fmt ? fmt : "B";
    if (pyxbuf_format_parse(fmt, &f, &err) < 0) {
        PyErr_Format(PyExc_BufferError, "pyxbuf: format '%s' cannot be exported by DLPack: %s",
                     shown, err.message);
        return -1;
    }
    const pyxbuf_format_node *n = f.nnodes == 2 ? &pyxbuf_format_nodes(&f)[1] : NULL;
    const char *why = "DLPack describes one scalar per element, not structs, repeats or "
                      "sub-arrays";
    int ok = 0;
    *padded = 0;
    dt->lanes = 1;
    if (n != NULL && n->repeat == 1 && n->ndim == 0 && !(n->flags & PYXBUF_FMTN_POINTER)) {
        why = "DLPack has no code for this type";
        int complex = (n->flags & PYXBUF_FMTN_COMPLEX) != 0;
        if (n->itemsize > 1 && !native_order(n->byte_order)) {
            why = "DLPack tensors are in native byte order";
        } else if (n->kind == PYXBUF_FMT_SCALAR && n->itemsize > 0 && n->itemsize <= 16) {
            int64_t bits = f.itemsize * 8;
            dt->bits = (uint8_t)bits;
            switch (n->code) {
            case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
                dt->code = kDLInt, ok = !complex;
                break;
            case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
                dt->code = kDLUInt, ok = !complex;
                break;
            case 'e':
                dt->code = kDLFloat, ok = !complex;
                break;
            case 'f': case 'd':
                dt->code = complex ? kDLComplex : kDLFloat, ok = 1;
                break;
            case '?':
                dt->code = kDLBool, ok = !complex;
                break;
            case 'g':
                why = "long double ('g') is not IEEE binary128, DLPack's float128";
                break;
            default:
                break;
            }
        } else if (n->kind == PYXBUF_FMT_CUSTOM && !complex && n->custom != NULL) {
            for (size_t i = 0; i < N_CUSTOM && !ok; i++) {
                const char *name = CUSTOM_DTYPES[i].format + 1; /* skip '[' */
                size_t len = strlen(name) - 1;                  /* drop ']' */
                if ((size_t)n->custom_len == len && memcmp(n->custom, name, len) == 0) {
                    dt->code = CUSTOM_DTYPES[i].code;
                    dt->bits = CUSTOM_DTYPES[i].bits;
                    *padded = dt->bits < 8;
                    ok = 1;
                }
            }
        }
    }
    pyxbuf_format_clear(&f);
    if (ok) return 0;
    PyErr_Format(PyExc_BufferError, "pyxbuf: format '%s' cannot be exported by DLPack: %s",
                 shown, why);
    return -1;
}

/* ------------------------------------------------------------------------- */
/* Import: the holder that owns a consumed tensor                            */
/* ------------------------------------------------------------------------- */

/* Storage of the view's owner (a pyxbuf__holder_new object). */
typedef struct dl_hold {
    void *tensor;      /* DLManagedTensorVersioned* or DLManagedTensor* */
    int32_t versioned; /* which of the two */
    int32_t path;      /* PYXBUF_PATH_DLPACK or PYXBUF_PATH_DLPACK_C */
    uint64_t dl_flags; /* the tensor's flags (0 for legacy tensors) */
    DLPackVersion version;
    pyxbuf_device_info info; /* device tensors */
    Py_ssize_t dims[];       /* spilled shape and strides when ndim > inline */
} dl_hold;

static void run_deleter(void *tensor, int versioned) {
    if (versioned) {
        DLManagedTensorVersioned *t = tensor;
        if (t->deleter != NULL) t->deleter(t);
    } else {
        DLManagedTensor *t = tensor;
        if (t->deleter != NULL) t->deleter(t);
    }
    if (PYXBUF_UNLIKELY(PyErr_Occurred() != NULL)) PyErr_WriteUnraisable(NULL);
}

static void call_deleter(void *tensor, int versioned) {
    if (tensor == NULL) return;
    if (PYXBUF_LIKELY(PyErr_Occurred() == NULL)) {
        run_deleter(tensor, versioned);
        return;
    }
    /* The deleter runs arbitrary code (often Py_DECREF): keep a pending
     * exception (an error path's) out of its way. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    run_deleter(tensor, versioned);
    PyErr_Restore(type, value, tb);
}

void pyxbuf__dlpack_release_bare(void *tensor) { call_deleter(tensor, 1); }

static void hold_finalize(void *storage) {
    dl_hold *h = storage;
    if (h->info.sync_event != NULL) {
        pyxbuf_backend b;
        if (pyxbuf_backend_get(h->info.device_type, &b, NULL) == 0 && b.event_destroy != NULL)
            b.event_destroy(b.ctx, h->info.device_id, h->info.sync_event, NULL);
        h->info.sync_event = NULL;
    }
    void *t = h->tensor;
    h->tensor = NULL;
    call_deleter(t, h->versioned);
}

/* A holder owning `tensor`; on failure the deleter has run. */
static PyObject *hold_new(void *tensor, int versioned, int32_t path, dl_hold **out) {
    int32_t ndim = versioned ? ((DLManagedTensorVersioned *)tensor)->dl_tensor.ndim
                             : ((DLManagedTensor *)tensor)->dl_tensor.ndim;
    /* A versioned tensor of another major version has no ndim we may read. */
    if (versioned && ((DLManagedTensorVersioned *)tensor)->version.major != DL_MAJOR) ndim = 0;
    size_t spill = ndim > PYXBUF_INLINE_NDIM && ndim <= PYXBUF_MAX_NDIM ? (size_t)ndim : 0;
    PyObject *holder = pyxbuf__holder_new(sizeof(dl_hold) + 2 * spill * sizeof(Py_ssize_t),
                                          hold_finalize);
    if (holder == NULL) {
        call_deleter(tensor, versioned);
        return NULL;
    }
    dl_hold *h = pyxbuf__holder_storage(holder);
    h->tensor = tensor;
    h->versioned = versioned;
    h->path = path;
    *out = h;
    return holder;
}

/* ------------------------------------------------------------------------- */
/* Import: describing the tensor                                             */
/* ------------------------------------------------------------------------- */

static int host_device_type(int32_t t) { return t == kDLCPU || t == kDLCUDAHost || t == kDLROCMHost; }

static int refuse(const char *fmt, ...) PYXBUF_PRINTF(1, 2);
static int refuse(const char *fmt, ...) {
    char msg[PYXBUF_ERROR_MESSAGE_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyErr_SetString(PyExc_BufferError, msg);
    return -1;
}

/* When a backend serves the tensor's device type, it must agree that both
 * ends of the tensor's bytes are memory of that very device. */
static int check_device_pointer(const Py_buffer *base, int32_t type, int32_t id) {
    pyxbuf_backend b;
    if (pyxbuf_backend_get(type, &b, NULL) < 0) return 0;
    Py_ssize_t lo = 0, hi = 0;
    if (pyxbuf__view_span(base, &lo, &hi) < 0)
        return refuse("pyxbuf: the DLPack tensor's shape and strides overflow");
    pyxbuf_device claimed = {type, id};
    pyxbuf_error err;
    if (pyxbuf__check_device_span(&b, base->buf, lo, hi, &claimed, &err) < 0)
        return refuse("pyxbuf: the DLPack tensor is invalid: %s", err.message);
    return 0;
}

/* Fill the view from the tensor `h` describes: the holder owns it, or with
 * no holder (NULL) the view does (bridge_data). -1 with BufferError. */
static PYXBUF_ALWAYS_INLINE int describe(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                         int64_t stream, PyObject *holder, dl_hold *h) {
    DLTensor *t;
    if (h->versioned) {
        DLManagedTensorVersioned *m = h->tensor;
        h->version = m->version;
        if (m->version.major != DL_MAJOR)
            return refuse("pyxbuf: the DLPack tensor has version %u.%u; pyxbuf reads major "
                          "version %d (DLPack %d.%d); ask the producer for max_version (1, 3)",
                          m->version.major, m->version.minor, DL_MAJOR, DL_MAJOR, DL_MINOR);
        h->dl_flags = m->flags;
        t = &m->dl_tensor;
    } else {
        t = &((DLManagedTensor *)h->tensor)->dl_tensor;
    }
    if (t->ndim < 0 || t->ndim > PYXBUF_MAX_NDIM)
        return refuse("pyxbuf: the DLPack tensor has %d dimensions; pyxbuf accepts 0..%d",
                      (int)t->ndim, PYXBUF_MAX_NDIM);
    if (t->ndim > 0 && t->shape == NULL)
        return refuse("pyxbuf: the DLPack tensor has %d dimensions but a NULL shape",
                      (int)t->ndim);
    char why[320];
    Py_ssize_t itemsize = 0;
    const char *format = dtype_to_format(t->dtype, (h->dl_flags & DL_FLAG_SUBBYTE_PADDED) != 0,
                                         &itemsize, why, sizeof why);
    if (format == NULL) return refuse("pyxbuf: the DLPack tensor's %s", why);
    if ((h->dl_flags & DL_FLAG_IS_COPIED) && (flags & PyBUF_WRITABLE))
        return refuse("pyxbuf: the producer exported a copy (DLPACK_FLAG_BITMASK_IS_COPIED), so "
                      "writes would not reach it; the request asks for PyBUF_WRITABLE");

    int ndim = (int)t->ndim;
    Py_ssize_t *dims = pyxbuf__view_dims(view, ndim, h->dims);
    Py_ssize_t *shape = dims, *strides = dims + ndim;
    Py_ssize_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > PY_SSIZE_T_MAX)
            return refuse("pyxbuf: the DLPack tensor's shape[%d] = %lld is invalid", i,
                          (long long)t->shape[i]);
        shape[i] = (Py_ssize_t)t->shape[i];
        if (!PYXBUF__MUL_OK(count, shape[i], &count))
            return refuse("pyxbuf: the DLPack tensor's shape overflows the address space");
    }
    Py_ssize_t next = itemsize;
    for (int i = ndim - 1; i >= 0; i--) {
        if (t->strides == NULL) { /* C order, as DLPack defines a NULL strides */
            strides[i] = next;
            if (shape[i] > 1 && !PYXBUF__MUL_OK(next, shape[i], &next))
                return refuse("pyxbuf: the DLPack tensor's size overflows the address space");
        } else if (t->strides[i] < -PY_SSIZE_T_MAX || t->strides[i] > PY_SSIZE_T_MAX ||
                   !PYXBUF__MUL_OK((Py_ssize_t)t->strides[i], itemsize, &strides[i])) {
            return refuse("pyxbuf: the DLPack tensor's strides[%d] = %lld overflows in bytes", i,
                          (long long)t->strides[i]);
        }
    }

    int32_t type = t->device.device_type;
    int host = host_device_type(type);
    char *data = t->data;
    if (data != NULL && t->byte_offset > UINTPTR_MAX - (uintptr_t)data)
        return refuse("pyxbuf: the DLPack tensor's byte_offset %llu overflows its data pointer",
                      (unsigned long long)t->byte_offset);
    /* As an integer: an offset of 2^63 or more is a negative index to C's
     * pointer arithmetic (undefined), yet a valid address for DLPack. */
    if (data != NULL) data = (char *)((uintptr_t)data + t->byte_offset);
    /* Fields not named (reserved, device) are zero. */
    pyxbuf_export_desc desc = {.size = (uint32_t)sizeof desc,
                               .ndim = ndim,
                               .buf = data,
                               .format = format,
                               .itemsize = itemsize,
                               .shape = shape,
                               .strides = strides,
                               .readonly = (h->dl_flags & DL_FLAG_READ_ONLY) != 0};
    if (!host) {
        h->info.size = (uint32_t)sizeof h->info;
        h->info.device_type = type;
        h->info.device_id = t->device.device_id;
        h->info.stream = stream == PYXBUF__STREAM_UNSET ? PYXBUF_STREAM_DEFAULT : stream;
        h->info.dl_flags = h->dl_flags & (DL_FLAG_READ_ONLY | DL_FLAG_IS_COPIED);
        desc.device = PYXBUF_DEVICE_DLPACK;
        desc.device_info = &h->info;
    }
    if ((host ? pyxbuf__export_fill_host(&view->base, obj, flags, &desc)
              : pyxbuf_export_fill(&view->base, obj, flags, &desc)) < 0)
        return -1;
    if (!host && check_device_pointer(&view->base, type, t->device.device_id) < 0) {
        Py_CLEAR(view->base.obj);
        return -1;
    }
    view->path = h->path;
    view->owner = holder;
    view->bridge_data = holder != NULL ? (void *)h : h->tensor;
    return 0;
}

/* A host tensor of DLPack major version 1 with at most PYXBUF_INLINE_NDIM
 * dimensions needs no holder: its shape fits the view and nothing about it
 * outlives the call but the tensor itself (see pyxbuf__dlpack_release_bare). */
static int can_go_bare(const DLManagedTensorVersioned *m) {
    return m->version.major == DL_MAJOR && m->dl_tensor.ndim >= 0 &&
           m->dl_tensor.ndim <= PYXBUF_INLINE_NDIM &&
           host_device_type(m->dl_tensor.device.device_type);
}

/* Describes `tensor` into the view and takes it over: 1 = acquired, -1 =
 * failed (its deleter has run). `*held` is the holder's storage when one was
 * needed (device tensors, many dimensions, legacy or foreign versions), else
 * NULL. */
static PYXBUF_ALWAYS_INLINE int adopt_tensor(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                             int64_t stream, void *tensor, int versioned,
                                             int32_t path, dl_hold **held) {
    dl_hold bare, *h = &bare; /* describe's scratch for a bare tensor: host, so its
                                 `info` and `dims` stay unused */
    dl_hold *stored = NULL;    /* the holder's storage; never &bare, which dies here */
    PyObject *holder = NULL;
    if (versioned && can_go_bare(tensor)) {
        bare.tensor = tensor;
        bare.versioned = 1;
        bare.path = path;
        bare.dl_flags = 0;
        bare.info.size = 0;
    } else if ((holder = hold_new(tensor, versioned, path, &stored)) == NULL) {
        return -1;
    } else {
        h = stored;
    }
    if (describe(obj, view, flags, stream, holder, h) < 0) { /* view->owner not set */
        if (holder != NULL) Py_DECREF(holder); /* calls the deleter */
        else call_deleter(tensor, 1);
        return -1;
    }
    *held = stored;
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Import: the C exchange table                                              */
/* ------------------------------------------------------------------------- */

/* What a type offers the DLPack bridge. */
typedef struct type_offer {
    int has_dlpack; /* __dlpack__ is defined on the type */
    const DLPackExchangeAPI *api;
} type_offer;

/* Per type, by address: `key` the version tag and has_dlpack (bit 32),
 * `data` the table (kept alive by the capsule in the type's dict). */
#define API_CACHE_SIZE 64
#define API_CACHE_HAS_DLPACK ((uint64_t)1 << 32)
static pyxbuf__type_cache_entry api_cache[API_CACHE_SIZE];

static PyObject *name_exchange_api, *name_exchange_api_older, *name_dlpack, *name_dlpack_device;

/* The table of major version 1 reachable from a table's header (its own,
 * or one of its prev_api chain), or NULL. */
static const DLPackExchangeAPI *api_from_header(const DLPackExchangeAPIHeader *h) {
    for (int hops = 0; h != NULL && hops < 16; hops++, h = h->prev_api) {
        if (h->version.major != DL_MAJOR) continue;
        const DLPackExchangeAPI *api = (const DLPackExchangeAPI *)h;
        return api->managed_tensor_from_py_object_no_sync != NULL ? api : NULL;
    }
    return NULL;
}

/* DLPack 1.3's __dlpack_c_exchange_api__: a "dlpack_exchange_api" capsule. */
static const DLPackExchangeAPI *api_from_capsule(PyObject *capsule) {
    if (capsule == NULL || !PyCapsule_IsValid(capsule, CAPSULE_EXCHANGE_API)) return NULL;
    return api_from_header(PyCapsule_GetPointer(capsule, CAPSULE_EXCHANGE_API));
}

/* The same table under its name before DLPack 1.3, __c_dlpack_exchange_api__:
 * the table's address as an int in the 1.2-era proposal (apache-tvm-ffi
 * before the rename), or the capsule (PaddlePaddle 3.3 sets both names). The
 * header's version is checked before any function pointer is read. */
static const DLPackExchangeAPI *api_from_older_name(PyObject *value) {
    if (value == NULL) return NULL;
    if (!PyLong_Check(value)) return api_from_capsule(value);
    unsigned long long address = PyLong_AsUnsignedLongLong(value);
    if (address == 0 || address > UINTPTR_MAX || PyErr_Occurred()) {
        PyErr_Clear(); /* 0, negative or too large: not a table */
        return NULL;
    }
    return api_from_header((const DLPackExchangeAPIHeader *)(uintptr_t)address);
}

/* What the type offers, from the cache when its version tag still matches. */
static type_offer type_dlpack(PyTypeObject *type) {
    uintptr_t p = (uintptr_t)type;
    pyxbuf__type_cache_entry *e = &api_cache[((p >> 4) ^ (p >> 10)) & (API_CACHE_SIZE - 1)];
    unsigned int tag = pyxbuf__type_tag(type);
    uint64_t key;
    const void *data;
    if (PYXBUF_LIKELY(pyxbuf__type_cache_get(e, type, &key, &data) && tag != 0 &&
                      (uint32_t)key == tag))
        return (type_offer){(key & API_CACHE_HAS_DLPACK) != 0, data};
    PyObject *n_api = pyxbuf__interned(&name_exchange_api, "__dlpack_c_exchange_api__");
    PyObject *n_older = pyxbuf__interned(&name_exchange_api_older, "__c_dlpack_exchange_api__");
    PyObject *n_dl = pyxbuf__interned(&name_dlpack, "__dlpack__");
    if (n_api == NULL || n_older == NULL || n_dl == NULL) {
        PyErr_Clear();
        return (type_offer){0, NULL};
    }
    /* _PyType_Lookup: MRO only, raises nothing, and gives the type a version
     * tag to cache under. DLPack 1.3's name first, then the older one. */
    type_offer offer = {_PyType_Lookup(type, n_dl) != NULL,
                        api_from_capsule(_PyType_Lookup(type, n_api))};
    if (offer.api == NULL) offer.api = api_from_older_name(_PyType_Lookup(type, n_older));
    tag = pyxbuf__type_tag(type);
    if (tag != 0) /* else it cannot be cached */
        pyxbuf__type_cache_put(e, type, tag | (offer.has_dlpack ? API_CACHE_HAS_DLPACK : 0),
                               offer.api);
    return offer;
}

/* The no-sync table hands over a tensor without ordering the producer's work:
 * an event recorded on the producer's current work stream does that. */
static int order_after_producer(const DLPackExchangeAPI *api, dl_hold *h, int64_t stream) {
    if (h->info.size == 0 || api->current_work_stream == NULL || stream == PYXBUF_STREAM_NONE)
        return 0;
    void *producer_stream = NULL;
    if (api->current_work_stream(h->info.device_type, h->info.device_id, &producer_stream) != 0) {
        if (!PyErr_Occurred())
            refuse("pyxbuf: current_work_stream of the DLPack C exchange table failed");
        return -1;
    }
    int64_t ps = (int64_t)(intptr_t)producer_stream;
    h->info.stream = ps;
    pyxbuf_backend b;
    pyxbuf_error err;
    if (pyxbuf_backend_get(h->info.device_type, &b, NULL) < 0 || b.event_record == NULL) return 0;
    void *event = NULL;
    if (b.event_record(b.ctx, h->info.device_id, ps, &event, &err) < 0)
        return pyxbuf_error_raise(&err);
    h->info.sync_event = event; /* destroyed by hold_finalize */
    if (stream != PYXBUF__STREAM_UNSET && b.event_wait != NULL &&
        b.event_wait(b.ctx, h->info.device_id, event, stream, &err) < 0)
        return pyxbuf_error_raise(&err);
    return 0;
}

/* Undo an adopted tensor whose view cannot be handed out: the holder's
 * reference goes (its finalizer calls the deleter), and the view holds
 * nothing. Returns -1. */
static int drop_adopted(pyxbuf_view *view) {
    PyObject *holder = view->owner;
    view->owner = NULL;
    Py_CLEAR(view->base.obj);
    Py_DECREF(holder);
    return -1;
}

/* __dlpack__ called without a stream (DLPack's None): the producer ordered
 * its work before the device's default stream only. An event recorded on
 * that stream now is what a consumer on any other stream must wait for, so
 * the view carries it; a NULL sync_event would tell that consumer the data
 * is ready when nothing ordered it. Without a backend for the device there is
 * no way to record one, and no way for pyxbuf to use the memory either. */
static int order_after_default_stream(dl_hold *h) {
    pyxbuf_backend b;
    pyxbuf_error err;
    if (h->info.size == 0 || pyxbuf_backend_get(h->info.device_type, &b, NULL) < 0 ||
        b.event_record == NULL)
        return 0;
    void *event = NULL;
    if (b.event_record(b.ctx, h->info.device_id, PYXBUF_STREAM_DEFAULT, &event, &err) < 0)
        return pyxbuf_error_raise(&err);
    h->info.sync_event = event; /* destroyed by hold_finalize */
    return 0;
}

/* 1 = acquired, -1 = failed (exception set). */
static PYXBUF_ALWAYS_INLINE int acquire_c(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                          int64_t stream, const DLPackExchangeAPI *api) {
    DLManagedTensorVersioned *m = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0 || m == NULL) {
        if (m != NULL) call_deleter(m, 1);
        if (!PyErr_Occurred())
            refuse("pyxbuf: the DLPack C exchange table of '%.200s' failed without an error",
                   Py_TYPE(obj)->tp_name);
        return -1;
    }
    dl_hold *h;
    if (adopt_tensor(obj, view, flags, stream, m, 1, PYXBUF_PATH_DLPACK_C, &h) < 0) return -1;
    if (h != NULL && order_after_producer(api, h, stream) < 0) return drop_adopted(view);
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Import: __dlpack__                                                        */
/* ------------------------------------------------------------------------- */

/* The device __dlpack_device__ reports: 0 with type and id set, or -1. */
static int dlpack_device_of(PyObject *obj, int32_t *type, int32_t *id) {
    PyObject *name = pyxbuf__interned(&name_dlpack_device, "__dlpack_device__");
    if (name == NULL) return -1;
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL) return -1;
    int ok = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2;
    long t = ok ? PyLong_AsLong(PyTuple_GET_ITEM(r, 0)) : -1;
    long i = ok ? PyLong_AsLong(PyTuple_GET_ITEM(r, 1)) : -1;
    Py_DECREF(r);
    if (PyErr_Occurred()) return -1;
    if (!ok || t < 0 || t > INT32_MAX || i < 0 || i > INT32_MAX)
        return refuse("pyxbuf: __dlpack_device__ of '%.200s' must return (device_type, "
                      "device_id)",
                      Py_TYPE(obj)->tp_name);
    *type = (int32_t)t;
    *id = (int32_t)i;
    return 0;
}

/* The stream argument for a tensor on `device_type` (None for host memory
 * and for pyxbuf_get), a new reference. */
static PyObject *stream_arg(int64_t stream, int32_t device_type) {
    if (stream == PYXBUF__STREAM_UNSET || host_device_type(device_type)) Py_RETURN_NONE;
    if (device_type == kDLCUDA && stream == PYXBUF_STREAM_DEFAULT) stream = 1;
    return PyLong_FromLongLong((long long)stream);
}

/* The keyword names of the __dlpack__ calls, each a tuple of interned
 * strings (a producer matches interned names by identity, others by
 * comparing text), and max_version's value. Made once, kept for the process. */
enum { KW_MAX, KW_MAX_COPY, KW_MAX_STREAM, KW_MAX_STREAM_COPY, KW_STREAM, KW_COUNT };
typedef struct call_names {
    PyObject *kwnames[KW_COUNT];
    PyObject *max_version;
} call_names;
static void *dlpack_names; /* a call_names */

static PyObject *kwnames_of(const char *const *names, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
        PyObject *s = PyUnicode_InternFromString(names[i]);
        if (s == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static void call_names_free(call_names *n) {
    for (int i = 0; i < KW_COUNT; i++) Py_XDECREF(n->kwnames[i]);
    Py_XDECREF(n->max_version);
    PyMem_RawFree(n);
}

/* The names, built whole before they are published in one pointer: building
 * may switch threads (see pyxbuf__publish_once), and publishing a tuple
 * first once let a second thread pass a NULL max_version to __dlpack__ and
 * crash (test_threads.py, test_first_dlpack_calls_race_with_a_finalizer).
 * NULL with an exception set on failure. */
static const call_names *dlpack_call_names(void) {
    const call_names *published = PYXBUF__FT_LOAD_ACQUIRE(&dlpack_names);
    if (PYXBUF_LIKELY(published != NULL)) return published;
    static const char *const names[] = {"max_version", "stream", "copy"};
    static const char *const max_copy[] = {"max_version", "copy"};
    call_names *n = PyMem_RawCalloc(1, sizeof *n);
    if (n == NULL) return (const call_names *)PyErr_NoMemory();
    n->kwnames[KW_MAX] = kwnames_of(names, 1);
    n->kwnames[KW_MAX_COPY] = kwnames_of(max_copy, 2);
    n->kwnames[KW_MAX_STREAM] = kwnames_of(names, 2);
    n->kwnames[KW_MAX_STREAM_COPY] = kwnames_of(names, 3);
    n->kwnames[KW_STREAM] = kwnames_of(names + 1, 1);
    n->max_version = Py_BuildValue("(ii)", DL_MAJOR, DL_MINOR);
    int complete = n->max_version != NULL;
    for (int i = 0; i < KW_COUNT; i++) complete &= n->kwnames[i] != NULL;
    if (!complete) {
        call_names_free(n);
        return NULL;
    }
    published = pyxbuf__publish_ptr_once(&dlpack_names, n);
    if (published != n) call_names_free(n); /* another thread published first */
    return published;
}

/* Call __dlpack__ with the modern keywords, then without them if the producer
 * predates them. `stream` None (host memory, or no stream asked for) is not
 * passed: it is the keyword's default. New reference or NULL. */
static PyObject *call_dlpack(PyObject *obj, PyObject *stream, int writable) {
    PyObject *name = pyxbuf__interned(&name_dlpack, "__dlpack__");
    const call_names *n = name != NULL ? dlpack_call_names() : NULL;
    if (n == NULL) return NULL;
    /* copy=False only for writable requests: writes must reach the producer;
     * a reader may take a copy (the tensor then says IS_COPIED). */
    int with_stream = stream != Py_None;
    PyObject *args[4] = {obj, n->max_version, with_stream ? stream : Py_False, Py_False};
    PyObject *kwnames = with_stream ? n->kwnames[writable ? KW_MAX_STREAM_COPY : KW_MAX_STREAM]
                                    : n->kwnames[writable ? KW_MAX_COPY : KW_MAX];
    PyObject *r = PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            kwnames);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_TypeError)) return r;
    /* A producer from before the 2023 Array API: no max_version, no copy. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *legacy_args[2] = {obj, stream};
    r = PyObject_VectorcallMethod(name, legacy_args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                  with_stream ? n->kwnames[KW_STREAM] : NULL);
    if (r != NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return r;
    }
    /* Both failed: the first error is the informative one. */
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return NULL;
}

/* Take the tensor out of a capsule __dlpack__ returned: *versioned says
 * which struct. The capsule is renamed, so its destructor no longer deletes. */
static void *consume_capsule(PyObject *obj, PyObject *capsule, int *versioned) {
    const char *used = NULL;
    void *tensor = NULL;
    if (PyCapsule_IsValid(capsule, CAPSULE_VERSIONED)) {
        tensor = PyCapsule_GetPointer(capsule, CAPSULE_VERSIONED);
        used = CAPSULE_USED_VERSIONED;
        *versioned = 1;
    } else if (PyCapsule_IsValid(capsule, CAPSULE_LEGACY)) {
        tensor = PyCapsule_GetPointer(capsule, CAPSULE_LEGACY);
        used = CAPSULE_USED_LEGACY;
        *versioned = 0;
    }
    if (tensor == NULL) {
        const char *name = PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
        PyErr_Clear();
        if (PyCapsule_CheckExact(capsule))
            refuse("pyxbuf: __dlpack__ of '%.200s' returned a capsule named '%.100s', not "
                   "'" CAPSULE_VERSIONED "' or '" CAPSULE_LEGACY "'%s",
                   Py_TYPE(obj)->tp_name, name ? name : "(null)",
                   name && strncmp(name, "used_", 5) == 0 ? " (it was already consumed)" : "");
        else
            refuse("pyxbuf: __dlpack__ of '%.200s' returned '%.200s', not a DLPack capsule",
                   Py_TYPE(obj)->tp_name, Py_TYPE(capsule)->tp_name);
        return NULL;
    }
    if (PyCapsule_SetName(capsule, used) < 0) return NULL; /* cannot fail for a valid capsule */
    return tensor;
}

static int refuse_device(PyObject *obj, int32_t type, int32_t id) {
    pyxbuf_device d = {type, id};
    char name[64];
    pyxbuf_device_format(&d, name, sizeof name);
    return refuse("pyxbuf: '%.200s' holds memory on device '%s', which the host cannot read; "
                  "request PYXBUF_DEVICE and read view->device, or copy it to the host first",
                  Py_TYPE(obj)->tp_name, name);
}

static int acquire_py(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    int32_t dev_type = kDLCPU, dev_id = 0;
    /* A stream is passed only for device tensors: ask where the tensor is
     * (pyxbuf_get passes no stream and skips this call). */
    if (stream != PYXBUF__STREAM_UNSET) {
        if (dlpack_device_of(obj, &dev_type, &dev_id) < 0) {
            /* The specification requires __dlpack_device__; without one the
             * stream goes to __dlpack__ as given. */
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
            dev_type = -1;
        } else if (!host_device_type(dev_type) && !(flags & PYXBUF_DEVICE)) {
            return refuse_device(obj, dev_type, dev_id); /* before anything is exported */
        }
    }
    PyObject *s = stream_arg(stream, dev_type);
    if (s == NULL) return -1;
    PyObject *capsule = call_dlpack(obj, s, (flags & PyBUF_WRITABLE) != 0);
    Py_DECREF(s);
    if (capsule == NULL) return -1;
    int versioned = 0;
    void *tensor = consume_capsule(obj, capsule, &versioned);
    Py_DECREF(capsule);
    if (tensor == NULL) return -1;
    dl_hold *h;
    if (adopt_tensor(obj, view, flags, stream, tensor, versioned, PYXBUF_PATH_DLPACK, &h) < 0)
        return -1;
    if (stream == PYXBUF__STREAM_UNSET && h != NULL && order_after_default_stream(h) < 0)
        return drop_adopted(view);
    return 1;
}

int pyxbuf__dlpack_type_speaks(PyTypeObject *type) {
    type_offer offer = type_dlpack(type);
    return offer.api != NULL || offer.has_dlpack;
}

const void *pyxbuf__dlpack_c_table_of(PyTypeObject *type) { return type_dlpack(type).api; }

int pyxbuf__dlpack_get_c(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                         const void *api) {
    pyxbuf__view_begin(view, flags);
    int rc = acquire_c(obj, view, flags, stream, api);
    if (PYXBUF_LIKELY(rc == 1)) view->state = PYXBUF__STATE_ACQUIRED;
    return rc;
}

int pyxbuf__dlpack_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream) {
    type_offer offer = type_dlpack(Py_TYPE(obj));
    if (offer.api != NULL) return acquire_c(obj, view, flags, stream, offer.api);
    if (!offer.has_dlpack) return 0;
    return acquire_py(obj, view, flags, stream);
}

/* For the test extension: what the DLPack bridge recorded for a view it
 * produced. Returns 0, or -1 when the view did not come from this bridge. */
int pyxbuf__dlpack_view_info(const pyxbuf_view *view, uint64_t *dl_flags, uint32_t *major,
                             uint32_t *minor, int32_t *versioned);
int pyxbuf__dlpack_view_info(const pyxbuf_view *view, uint64_t *dl_flags, uint32_t *major,
                             uint32_t *minor, int32_t *versioned) {
    if (!pyxbuf__view_acquired(view) ||
        (view->path != PYXBUF_PATH_DLPACK && view->path != PYXBUF_PATH_DLPACK_C) ||
        view->bridge_data == NULL)
        return -1;
    if (view->owner == NULL) { /* bare: the tensor itself */
        const DLManagedTensorVersioned *m = view->bridge_data;
        *dl_flags = m->flags;
        *major = m->version.major;
        *minor = m->version.minor;
        *versioned = 1;
        return 0;
    }
    const dl_hold *h = view->bridge_data;
    *dl_flags = h->dl_flags;
    *major = h->version.major;
    *minor = h->version.minor;
    *versioned = h->versioned;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Export: __dlpack__ / __dlpack_device__ on pyxbuf.Exporter                 */
/* ------------------------------------------------------------------------- */

/* One allocation per exported tensor: the DLPack struct, the pyxbuf view of
 * the exporter that keeps the memory alive, and the int64 shape and strides.
 * malloc, not PyMem: the deleter may run on any thread, and frees after
 * taking the GIL only because pyxbuf_release needs it. */
typedef struct export_block {
    union {
        DLManagedTensorVersioned versioned;
        DLManagedTensor legacy;
    } t;
    pyxbuf_view view;
    int64_t dims[]; /* shape then strides, max(ndim, 1) each */
} export_block;

static int interpreter_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Release the view and free the block. Deleters may be called from any
 * thread, with or without the GIL, even after Python is gone: after
 * finalization (or during it, from a thread that does not hold the GIL and
 * could not get it) the block is leaked, as NumPy's deleter does, because the
 * exporter it references can no longer be released. */
static void export_block_free(export_block *b) {
    if (!Py_IsInitialized()) return;
    if (interpreter_finalizing() && !PyGILState_Check()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    pyxbuf_release(&b->view);
    PyGILState_Release(state);
    free(b);
}

static void deleter_versioned(DLManagedTensorVersioned *self) {
    export_block_free(self->manager_ctx);
}

static void deleter_legacy(DLManagedTensor *self) { export_block_free(self->manager_ctx); }

/* Capsule destructors: delete the tensor unless a consumer took it (renamed). */
static void capsule_destructor(PyObject *capsule) {
    PyObject *type, *value, *tb;
    if (PyCapsule_IsValid(capsule, CAPSULE_VERSIONED)) {
        PyErr_Fetch(&type, &value, &tb);
        DLManagedTensorVersioned *t = PyCapsule_GetPointer(capsule, CAPSULE_VERSIONED);
        if (t != NULL && t->deleter != NULL) t->deleter(t);
        PyErr_Restore(type, value, tb);
    } else if (PyCapsule_IsValid(capsule, CAPSULE_LEGACY)) {
        PyErr_Fetch(&type, &value, &tb);
        DLManagedTensor *t = PyCapsule_GetPointer(capsule, CAPSULE_LEGACY);
        if (t != NULL && t->deleter != NULL) t->deleter(t);
        PyErr_Restore(type, value, tb);
    }
}

/* A device argument: None, or a (device_type, device_id) pair. */
static int parse_dl_device(PyObject *arg, pyxbuf_device *out, int *given) {
    *given = 0;
    if (arg == NULL || arg == Py_None) return 0;
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != 2) {
        PyErr_SetString(PyExc_TypeError,
                        "pyxbuf: dl_device must be a (device_type, device_id) tuple or None");
        return -1;
    }
    long t = PyLong_AsLong(PyTuple_GET_ITEM(arg, 0));
    long i = PyLong_AsLong(PyTuple_GET_ITEM(arg, 1));
    if (PyErr_Occurred()) return -1;
    if (t < 1 || t > INT32_MAX || i < 0 || i > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "pyxbuf: dl_device (%ld, %ld) is not a DLPack device", t,
                     i);
        return -1;
    }
    out->device_type = (int32_t)t;
    out->device_id = (int32_t)i;
    *given = 1;
    return 0;
}

/* max_version None or (major, minor): the version to write, or 0 = legacy. */
static int parse_max_version(PyObject *arg, DLPackVersion *v) {
    v->major = 0;
    v->minor = 0;
    if (arg == NULL || arg == Py_None) return 0;
    long major = -1, minor = -1;
    if (PyTuple_Check(arg) && PyTuple_GET_SIZE(arg) == 2) {
        major = PyLong_AsLong(PyTuple_GET_ITEM(arg, 0));
        minor = PyLong_AsLong(PyTuple_GET_ITEM(arg, 1));
        if (PyErr_Occurred()) return -1;
    }
    if (major < 0 || minor < 0) {
        PyErr_SetString(PyExc_TypeError,
                        "pyxbuf: max_version must be a (major, minor) tuple of ints or None");
        return -1;
    }
    if (major < DL_MAJOR) return 0;
    v->major = DL_MAJOR;
    v->minor = major > DL_MAJOR || minor > DL_MINOR ? DL_MINOR : (uint32_t)minor;
    return 0;
}

/* An exact copy of the view's items on `device` (a new exporter). */
static PyObject *copy_on(const pyxbuf_view *view, const pyxbuf_device *device) {
    static const pyxbuf_device host = {PYXBUF_DL_CPU, 0};
    pyxbuf_device src;
    pyxbuf_error err;
    if (pyxbuf_view_device(view, &src, &err) < 0) return (pyxbuf_error_raise(&err), NULL);
    if (!pyxbuf_device_same(&src, device)) return pyxbuf_to_device(view, device, 0);
    /* Same device: through the host (pyxbuf_to_device copies only across
     * devices). Rare: copy=True for a tensor already where it is wanted. */
    PyObject *staged = src.device_type == PYXBUF_DL_CPU ? NULL : pyxbuf_to_device(view, &host, 0);
    if (src.device_type != PYXBUF_DL_CPU && staged == NULL) return NULL;
    PyObject *out = NULL;
    if (device->device_type == PYXBUF_DL_CPU) {
        const Py_buffer *b = &view->base;
        Py_ssize_t flat = b->itemsize ? b->len / b->itemsize : 0;
        out = pyxbuf_exporter_new(b->format, b->shape ? b->ndim : 1, b->shape ? b->shape : &flat,
                                  0, NULL);
        if (out != NULL && pyxbuf_view_copy_contiguous(view, pyxbuf_exporter_data(out),
                                                       (size_t)b->len, 'C') < 0)
            Py_CLEAR(out);
    } else {
        pyxbuf_view hv;
        if (pyxbuf_get(staged, &hv, PyBUF_RECORDS_RO) == 0) {
            out = pyxbuf_to_device(&hv, device, 0);
            pyxbuf_release(&hv);
        }
    }
    Py_XDECREF(staged);
    return out;
}

/* The consumer's stream waits for the exporter's last write (its sync event):
 * DLPack's consumer-stream model on top of the Arrow-style event. None means
 * the device's default stream, -1 no synchronisation. Host memory takes only
 * None (or -1), as the Array API says of devices without streams. */
static int order_before_consumer(const pyxbuf_view *view, PyObject *stream_obj) {
    int64_t stream = PYXBUF_STREAM_DEFAULT;
    if (stream_obj != NULL && stream_obj != Py_None) {
        long long s = PyLong_AsLongLong(stream_obj);
        if (s == -1 && PyErr_Occurred()) return -1;
        stream = (int64_t)s;
        if (view->device == NULL && stream != PYXBUF_STREAM_NONE) {
            PyErr_Format(PyExc_BufferError,
                         "pyxbuf: stream=%lld was passed for a CPU tensor; only None (or -1) is "
                         "accepted for devices without streams",
                         s);
            return -1;
        }
    }
    return pyxbuf_device_wait(view, stream);
}

/* Move an acquired view to `dst`: pointers into the view itself (inline
 * dims, &base.itemsize for 1-d strides) follow it. */
static void view_move(pyxbuf_view *dst, const pyxbuf_view *src) {
    memcpy(dst, src, sizeof *dst);
    const char *lo = (const char *)src, *hi = lo + sizeof *src;
#define REBASE(field, type)                                                                    \
    if ((const char *)dst->field >= lo && (const char *)dst->field < hi)                      \
        dst->field = (type)((char *)dst + ((const char *)src->field - lo));
    REBASE(base.shape, Py_ssize_t *)
    REBASE(base.strides, Py_ssize_t *)
    REBASE(base.suboffsets, Py_ssize_t *)
    REBASE(base.format, char *)
    REBASE(device_info, void *)
#undef REBASE
}

/* Describe the view in `b` in its DLPack struct (versioned unless
 * version->major is 0). Returns 0, or -1 with BufferError set. */
static int fill_tensor(export_block *b, const DLPackVersion *version, int copied) {
    const Py_buffer *base = &b->view.base;
    int ndim = base->ndim;
    DLDataType dt;
    int padded = 0;
    if (format_to_dtype(base->format, &dt, &padded) < 0) return -1;
    if ((Py_ssize_t)(dt.bits / 8) * dt.lanes != base->itemsize && !padded) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: format '%s' is %d bits per item but the buffer's itemsize is %zd; "
                     "DLPack cannot describe the disagreement",
                     base->format, (int)dt.bits, base->itemsize);
        return -1;
    }
    int legacy = version->major == 0;
    if (legacy && (base->readonly || padded)) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: a %s tensor cannot be exported as a legacy DLPack capsule, which "
                     "cannot say so; pass max_version=(1, 0) or newer",
                     padded ? "padded sub-byte" : "read-only");
        return -1;
    }
    int64_t *shape = b->dims, *strides = b->dims + (ndim > 0 ? ndim : 1);
    for (int i = 0; i < ndim; i++) {
        shape[i] = base->shape[i];
        Py_ssize_t s = base->strides ? base->strides[i] : base->itemsize;
        if (s % base->itemsize != 0) {
            PyErr_Format(PyExc_BufferError,
                         "pyxbuf: stride %zd of dimension %d is not a multiple of the item size "
                         "%zd; DLPack counts strides in elements",
                         s, i, base->itemsize);
            return -1;
        }
        strides[i] = s / base->itemsize;
    }
    pyxbuf_device dev;
    pyxbuf_error err;
    if (pyxbuf_view_device(&b->view, &dev, &err) < 0) return pyxbuf_error_raise(&err);
    DLTensor *t = legacy ? &b->t.legacy.dl_tensor : &b->t.versioned.dl_tensor;
    t->data = base->buf;
    t->device.device_type = dev.device_type;
    t->device.device_id = dev.device_id;
    t->ndim = ndim;
    t->dtype = dt;
    t->shape = shape;
    t->strides = strides;
    t->byte_offset = 0;
    if (legacy) {
        b->t.legacy.manager_ctx = b;
        b->t.legacy.deleter = deleter_legacy;
    } else {
        b->t.versioned.version = *version;
        b->t.versioned.manager_ctx = b;
        b->t.versioned.deleter = deleter_versioned;
        b->t.versioned.flags = (base->readonly ? DL_FLAG_READ_ONLY : 0) |
                               (copied ? DL_FLAG_IS_COPIED : 0) |
                               (padded ? DL_FLAG_SUBBYTE_PADDED : 0);
    }
    return 0;
}

/* A block owning the view `v` (moved in), or NULL with MemoryError (and `v`
 * released). */
static export_block *block_new(pyxbuf_view *v) {
    size_t n = v->base.ndim > 0 ? (size_t)v->base.ndim : 1;
    export_block *b = malloc(sizeof *b + 2 * n * sizeof(int64_t));
    if (b == NULL) {
        pyxbuf_release(v);
        PyErr_NoMemory();
        return NULL;
    }
    memset(&b->t, 0, sizeof b->t);
    view_move(&b->view, v);
    return b;
}

/* Build the capsule for the view in `b` (which it then owns). */
static PyObject *make_capsule(export_block *b, const DLPackVersion *version, int copied) {
    if (fill_tensor(b, version, copied) < 0) return NULL;
    int legacy = version->major == 0;
    return PyCapsule_New(&b->t, legacy ? CAPSULE_LEGACY : CAPSULE_VERSIONED, capsule_destructor);
}

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None).
 *
 * - max_version None or major < 1: a legacy "dltensor" capsule (refused for
 *   read-only and padded sub-byte tensors, which it cannot describe); else a
 *   "dltensor_versioned" capsule of version (1, min(minor, 3)).
 * - The tensor holds a pyxbuf view of the exporter (PyBUF_RECORDS_RO |
 *   PYXBUF_DEVICE), so the exporter's borrow rules apply: the view counts as
 *   live until the consumer calls the deleter, an exclusive borrow refuses the
 *   export, and while a shared borrow is live the tensor is READ_ONLY.
 * - dl_device other than the exporter's: copy=False raises BufferError; None
 *   or True copy there (the Array API's rule: a copy is allowed unless
 *   forbidden). copy=True always copies. Copies carry IS_COPIED.
 * - stream: see order_before_consumer. */
PyObject *pyxbuf__exporter_dlpack(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:__dlpack__", kwlist, &stream,
                                     &max_version, &dl_device, &copy))
        return NULL;
    DLPackVersion version;
    pyxbuf_device want, have;
    int want_given, copy_flag = -1;
    if (parse_max_version(max_version, &version) < 0 ||
        parse_dl_device(dl_device, &want, &want_given) < 0 ||
        pyxbuf_exporter_device(self, &have) < 0)
        return NULL;
    if (copy != Py_None && (copy_flag = PyObject_IsTrue(copy)) < 0) return NULL;
    int moving = want_given && !pyxbuf_device_same(&want, &have);
    if (moving && copy_flag == 0) {
        char a[64], b[64];
        pyxbuf_device_format(&have, a, sizeof a);
        pyxbuf_device_format(&want, b, sizeof b);
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: the exporter is on '%s' and dl_device asks for '%s', which needs a "
                     "copy, but copy=False",
                     a, b);
        return NULL;
    }
    pyxbuf_view v;
    if (pyxbuf_get(self, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) < 0) return NULL;
    int copied = moving || copy_flag == 1;
    if (copied) { /* the copy waits for the exporter's event itself */
        PyObject *dup = copy_on(&v, want_given ? &want : &have);
        pyxbuf_release(&v);
        if (dup == NULL) return NULL;
        int rc = pyxbuf_get(dup, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE);
        Py_DECREF(dup); /* the view keeps it */
        if (rc < 0) return NULL;
    }
    if (order_before_consumer(&v, stream) < 0) {
        pyxbuf_release(&v);
        return NULL;
    }
    export_block *b = block_new(&v);
    if (b == NULL) return NULL;
    PyObject *capsule = make_capsule(b, &version, copied);
    if (capsule == NULL) {
        pyxbuf_release(&b->view);
        free(b);
    }
    return capsule;
}

PyObject *pyxbuf__exporter_dlpack_device(PyObject *self, PyObject *unused) {
    (void)unused;
    pyxbuf_device d;
    if (pyxbuf_exporter_device(self, &d) < 0) return NULL;
    return Py_BuildValue("(ii)", d.device_type, d.device_id);
}

/* ------------------------------------------------------------------------- */
/* Export: the C exchange table (__dlpack_c_exchange_api__)                  */
/* ------------------------------------------------------------------------- */

_Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t),
               "DLTensor shape and strides point at pyxbuf.Exporter's own arrays");

static int xc_from_py_object(void *py_object, DLManagedTensorVersioned **out) {
    if (out != NULL) *out = NULL;
    if (py_object == NULL || out == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf: NULL argument to the DLPack C exchange table");
        return -1;
    }
    pyxbuf_view v;
    if (pyxbuf_get(py_object, &v, PyBUF_RECORDS_RO | PYXBUF_DEVICE) < 0) return -1;
    /* No stream is given here: the consumer works on current_work_stream,
     * the default stream, so the producer's event is waited for there. */
    if (pyxbuf_device_wait(&v, PYXBUF_STREAM_DEFAULT) < 0) {
        pyxbuf_release(&v);
        return -1;
    }
    export_block *b = block_new(&v);
    if (b == NULL) return -1;
    DLPackVersion version = {DL_MAJOR, DL_MINOR};
    if (fill_tensor(b, &version, 0) < 0) {
        pyxbuf_release(&b->view);
        free(b);
        return -1;
    }
    *out = &b->t.versioned;
    return 0;
}

static int xc_dltensor_from_py_object(void *py_object, DLTensor *out) {
    PyObject *obj = py_object;
    const Py_ssize_t *shape = NULL, *item_strides = NULL;
    if (obj == NULL || out == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf: NULL argument to the DLPack C exchange table");
        return -1;
    }
    if (pyxbuf__exporter_dims(obj, &shape, &item_strides) < 0)
        return refuse("pyxbuf: a non-owning DLTensor of '%.200s' is not available (its shape "
                      "may not outlive a view); use managed_tensor_from_py_object_no_sync",
                      Py_TYPE(obj)->tp_name);
    pyxbuf_view v;
    if (pyxbuf_get(obj, &v, PyBUF_RECORDS | PYXBUF_DEVICE) < 0) return -1;
    DLDataType dt;
    int padded = 0, rc = -1;
    pyxbuf_device dev;
    pyxbuf_error err;
    if (format_to_dtype(v.base.format, &dt, &padded) < 0) goto done;
    if (padded || item_strides == NULL) {
        refuse("pyxbuf: a DLTensor of this pyxbuf.Exporter cannot say %s; use "
               "managed_tensor_from_py_object_no_sync",
               padded ? "that its sub-byte items are padded" : "its strides in items");
        goto done;
    }
    if (pyxbuf_view_device(&v, &dev, &err) < 0) {
        pyxbuf_error_raise(&err);
        goto done;
    }
    if (pyxbuf_device_wait(&v, PYXBUF_STREAM_DEFAULT) < 0) goto done;
    out->data = v.base.buf;
    out->device.device_type = dev.device_type;
    out->device.device_id = dev.device_id;
    out->ndim = v.base.ndim;
    out->dtype = dt;
    /* The exporter's own arrays: valid while the object lives, which the
     * caller guarantees until control returns. */
    out->shape = (int64_t *)(uintptr_t)shape;
    out->strides = (int64_t *)(uintptr_t)item_strides;
    out->byte_offset = 0;
    rc = 0;
done:
    pyxbuf_release(&v);
    return rc;
}

/* The tensor's memory as a pyxbuf.Exporter that owns the tensor. */
static void release_heap_view(void *ctx) {
    pyxbuf_release(ctx);
    free(ctx);
}

static int xc_to_py_object(DLManagedTensorVersioned *tensor, void **out_py_object) {
    if (out_py_object != NULL) *out_py_object = NULL;
    if (tensor == NULL || out_py_object == NULL) {
        if (tensor != NULL) call_deleter(tensor, 1);
        PyErr_SetString(PyExc_ValueError, "pyxbuf: NULL argument to the DLPack C exchange table");
        return -1;
    }
    dl_hold *h;
    PyObject *holder = hold_new(tensor, 1, PYXBUF_PATH_DLPACK_C, &h); /* owns it now */
    if (holder == NULL) return -1;
    pyxbuf_view *v = calloc(1, sizeof *v);
    if (v == NULL) {
        Py_DECREF(holder);
        PyErr_NoMemory();
        return -1;
    }
    if (describe(holder, v, PyBUF_RECORDS_RO | PYXBUF_DEVICE, PYXBUF__STREAM_UNSET, holder, h) <
        0) { /* v->owner not set */
        free(v);
        Py_DECREF(holder); /* calls the deleter */
        return -1;
    }
    /* The view owns hold_new's reference now (view->owner), as in acquire_c. */
    v->state = PYXBUF__STATE_ACQUIRED;
    pyxbuf_export_desc desc = {.size = sizeof desc,
                               .ndim = v->base.ndim,
                               .buf = v->base.buf,
                               .format = v->base.format,
                               .itemsize = v->base.itemsize,
                               .shape = v->base.shape,
                               .strides = v->base.strides,
                               .readonly = v->base.readonly,
                               /* The tensor's framework may still write it:
                                  nothing enforces the exporter's grants. */
                               .tracked = 1,
                               .device = v->device,
                               .device_info = v->device_info};
    PyObject *e = pyxbuf_exporter_wrap(&desc, release_heap_view, v);
    if (e == NULL) {
        release_heap_view(v);
        return -1;
    }
    *out_py_object = e;
    return 0;
}

/* Report the pending Python exception through the allocator's callback. */
static void report_to(void *error_ctx, void (*set_error)(void *, const char *, const char *)) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *message = text ? PyUnicode_AsUTF8(text) : NULL;
    if (message == NULL) {
        PyErr_Clear();
        message = "pyxbuf: the allocation failed";
    }
    const char *kind = type ? ((PyTypeObject *)type)->tp_name : "RuntimeError";
    if (set_error != NULL) set_error(error_ctx, kind, message);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

static int xc_allocator(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                        void (*set_error)(void *error_ctx, const char *kind, const char *message)) {
    if (out != NULL) *out = NULL;
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = -1;
    PyObject *e = NULL;
    Py_ssize_t shape[PYXBUF_MAX_NDIM];
    char why[320];
    Py_ssize_t itemsize = 0;
    if (prototype == NULL || out == NULL || prototype->ndim < 0 ||
        prototype->ndim > PYXBUF_MAX_NDIM || (prototype->ndim > 0 && prototype->shape == NULL)) {
        PyErr_SetString(PyExc_ValueError,
                        "pyxbuf: managed_tensor_allocator needs a prototype with 0..64 "
                        "dimensions and a shape, and an out pointer");
        goto done;
    }
    /* pyxbuf stores sub-byte items one per byte (ml_dtypes' layout). */
    const char *format = dtype_to_format(prototype->dtype, 1, &itemsize, why, sizeof why);
    if (format == NULL) {
        refuse("pyxbuf: managed_tensor_allocator cannot allocate the prototype's %s", why);
        goto done;
    }
    for (int32_t i = 0; i < prototype->ndim; i++) shape[i] = (Py_ssize_t)prototype->shape[i];
    pyxbuf_device device = {prototype->device.device_type, prototype->device.device_id};
    e = pyxbuf_exporter_new(format, prototype->ndim, shape, 0,
                            device.device_type == PYXBUF_DL_CPU ? NULL : &device);
    if (e == NULL) goto done;
    rc = xc_from_py_object(e, out); /* the tensor's view keeps the exporter */
done:
    Py_XDECREF(e);
    if (rc < 0) report_to(error_ctx, set_error);
    PyGILState_Release(gil);
    return rc;
}

static int xc_current_work_stream(int32_t device_type, int32_t device_id, void **out_stream) {
    (void)device_type;
    (void)device_id;
    /* pyxbuf orders its work on the default stream: NULL, as DLPack says
     * for CPU and for producers without a current-stream notion. */
    if (out_stream != NULL) *out_stream = NULL;
    return 0;
}

static DLPackExchangeAPI exchange_api = {
    .header = {.version = {DL_MAJOR, DL_MINOR}, .prev_api = NULL},
    .managed_tensor_allocator = xc_allocator,
    .managed_tensor_from_py_object_no_sync = xc_from_py_object,
    .managed_tensor_to_py_object_no_sync = xc_to_py_object,
    .dltensor_from_py_object_no_sync = xc_dltensor_from_py_object,
    .current_work_stream = xc_current_work_stream,
};

int pyxbuf_type_set_dlpack_exchange_api(PyTypeObject *type) {
    if (type == NULL) {
        PyErr_SetString(PyExc_ValueError, "pyxbuf_type_set_dlpack_exchange_api: type is NULL");
        return -1;
    }
    return pyxbuf__type_dict_set(type, "__dlpack_c_exchange_api__",
                                 PyCapsule_New(&exchange_api, CAPSULE_EXCHANGE_API, NULL));
}
