/* dlpack.h -- the DLPack bridge's private interface, for the import
 * (bridges/dlpack_import.c, bridges/dlpack_dtype.c) and the layers above that
 * export DLPack (export/dlpack_export.c) or test it (c/tests): the holder that
 * owns a consumed tensor, the tensor-to-view description, and the
 * dtype <-> format mapping (the standard dtypes inline, through format/codes.h's
 * table: the import's hot path). */
#ifndef PYXBUF_BRIDGES_DLPACK_H
#define PYXBUF_BRIDGES_DLPACK_H

#include "bridges/bridges.h"
#include "device/device.h"
#include "base/type_cache.h"
#include "bridges/dlpack_abi.h"
#include "format/codes.h"

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

/* format/codes.h numbers its kinds as DLPack's type codes: a standard
 * dtype's code is its kind. */
_Static_assert(PYXBUF__KIND_INT == kDLInt && PYXBUF__KIND_UINT == kDLUInt &&
                   PYXBUF__KIND_FLOAT == kDLFloat && PYXBUF__KIND_COMPLEX == kDLComplex &&
                   PYXBUF__KIND_BOOL == kDLBool && PYXBUF__NKINDS == kDLBool + 1 &&
                   PYXBUF__KIND_NONE == kDLOpaqueHandle,
               "format/codes.h's kinds are DLPack's type codes");

/* The slow half of pyxbuf__dlpack_dtype_to_format: custom types, refusals. */
const char *pyxbuf__dlpack_dtype_to_format_slow(DLDataType dt, int padded, Py_ssize_t *itemsize,
                                                char *why, size_t cap);

/* The format of a DLPack dtype (a static string) and its itemsize, or NULL
 * with `why` filled. `padded`: the producer flagged sub-byte types padded. */
static inline const char *pyxbuf__dlpack_dtype_to_format(DLDataType dt, int padded,
                                                         Py_ssize_t *itemsize, char *why,
                                                         size_t cap) {
    /* The standard dtypes: one lane, whole bytes, a code that is a kind. */
    int col = pyxbuf__code_column_bits(dt.bits);
    const char *format = dt.lanes == 1 && dt.code < PYXBUF__NKINDS && col >= 0
                             ? pyxbuf__struct_code_at((pyxbuf__kind)dt.code, col)
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
