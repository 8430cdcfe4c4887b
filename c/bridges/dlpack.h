/* dlpack.h -- the DLPack bridge's private interface, for the import
 * (bridges/dlpack_import.c, bridges/dlpack_dtype.c) and the layers above that
 * export DLPack (export/dlpack_export.c) or test it (c/tests): the holder that
 * owns a consumed tensor, the tensor-to-view description, and the
 * dtype <-> format mapping (the standard dtypes inline: the import's hot path). */
#ifndef PYXBUF_BRIDGES_DLPACK_H
#define PYXBUF_BRIDGES_DLPACK_H

#include "bridges/bridges.h"
#include "device/device.h"
#include "base/type_cache.h"
#include "bridges/dlpack_abi.h"

/* Storage of the view's owner (a pyxbuf__holder_new object). */
typedef struct pyxbuf__dl_hold {
    void *tensor;      /* DLManagedTensorVersioned* or DLManagedTensor* */
    int32_t versioned; /* which of the two */
    int32_t path;      /* PYXBUF_PATH_DLPACK or PYXBUF_PATH_DLPACK_C */
    uint64_t dl_flags; /* the tensor's flags (0 for legacy tensors) */
    DLPackVersion version;
    pyxbuf_device_info info; /* device tensors */
    Py_ssize_t dims[];       /* spilled shape and strides when ndim > inline */
} pyxbuf__dl_hold;

/* Run a consumed tensor's deleter once (NULL: nothing), keeping a pending
 * exception out of its way. */
void pyxbuf__dlpack_call_deleter(void *tensor, int versioned);

/* A holder object owning `tensor` (*out its storage); on failure the deleter
 * has run. */
PyObject *pyxbuf__dlpack_hold_new(void *tensor, int versioned, int32_t path, pyxbuf__dl_hold **out);

/* Fill `view` (as acquired for `flags`, base.obj a new reference to `obj`)
 * from the tensor `h` describes; the holder owns it. -1 with BufferError. */
int pyxbuf__dlpack_fill_view(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                             PyObject *holder, pyxbuf__dl_hold *h);

/* The buffer format of each standard dtype, by code and by bits (8, 16, 32,
 * 64, 128 in the columns); NULL where no format describes it. */
extern PYXBUF_HIDDEN const char *const pyxbuf__dlpack_standard_formats[kDLBool + 1][5];

static inline int pyxbuf__dlpack_bits_column(uint8_t bits) {
    switch (bits) {
    case 8: return 0;
    case 16: return 1;
    case 32: return 2;
    case 64: return 3;
    case 128: return 4;
    default: return -1;
    }
}

/* The slow half of pyxbuf__dlpack_dtype_to_format: custom types, refusals. */
const char *pyxbuf__dlpack_dtype_to_format_slow(DLDataType dt, int padded, Py_ssize_t *itemsize,
                                                char *why, size_t cap);

/* The format of a DLPack dtype (a static string) and its itemsize, or NULL
 * with `why` filled. `padded`: the producer flagged sub-byte types padded. */
static inline const char *pyxbuf__dlpack_dtype_to_format(DLDataType dt, int padded,
                                                         Py_ssize_t *itemsize, char *why,
                                                         size_t cap) {
    int col = pyxbuf__dlpack_bits_column(dt.bits);
    const char *format = dt.lanes == 1 && dt.code <= kDLBool && col >= 0
                             ? pyxbuf__dlpack_standard_formats[dt.code][col]
                             : NULL;
    if (PYXBUF_LIKELY(format != NULL)) {
        *itemsize = dt.bits / 8;
        return format;
    }
    return pyxbuf__dlpack_dtype_to_format_slow(dt, padded, itemsize, why, cap);
}

/* The DLPack dtype of a buffer format, or -1 with BufferError. *padded is
 * set for sub-byte ml_dtypes types (one element per byte). */
int pyxbuf__dlpack_format_to_dtype(const char *fmt, DLDataType *dt, int *padded);

#endif
