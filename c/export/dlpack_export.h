/* dlpack_export.h -- DLPack tensors of any object's memory (dlpack_export.c),
 * for the Exporter's __dlpack__ and the C exchange table (exporter.c). */
#ifndef PYXBUF_EXPORT_DLPACK_EXPORT_H
#define PYXBUF_EXPORT_DLPACK_EXPORT_H

#include "bridges/dlpack.h"

/* The arguments of __dlpack__(*, stream=None, max_version=None,
 * dl_device=None, copy=None). */
typedef struct pyxbuf__dlpack_request {
    PyObject *stream;      /* borrowed; None: the device's default stream */
    DLPackVersion version; /* of the capsule; major 0: the legacy "dltensor" */
    pyxbuf_device device;  /* dl_device, when device_given */
    int device_given;
    int copy; /* -1 None, 0 False, 1 True */
} pyxbuf__dlpack_request;

/* Parse __dlpack__'s arguments: 0, or -1 with TypeError or ValueError. */
int pyxbuf__dlpack_parse_request(PyObject *args, PyObject *kwargs, pyxbuf__dlpack_request *r);

/* The capsule of the acquired view `v`, which it takes over (released on
 * failure): "dltensor_versioned" of r->version, or the legacy "dltensor"
 * (refused for read-only and padded sub-byte tensors, which it cannot
 * describe). The tensor holds the view until the consumer calls the deleter,
 * so the view's borrow rules last as long. The consumer's stream r->stream is
 * first made to wait for the view's event (None: the default stream; -1: no
 * synchronisation; host memory takes only None or -1). `copied` sets
 * IS_COPIED. NULL with an exception set on failure. */
PyObject *pyxbuf__dlpack_capsule_of(pyxbuf_view *v, const pyxbuf__dlpack_request *r, int copied);

/* A DLPack 1.3 managed tensor of obj's memory, holding a view of it until
 * its deleter runs; ready on the default stream. 0, or -1 with an exception. */
int pyxbuf__dlpack_managed_tensor_of(PyObject *obj, DLManagedTensorVersioned **out);

/* A non-owning DLTensor of obj's memory whose shape and strides are the
 * caller's arrays `shape` and `item_strides` (in items; NULL: not whole
 * items, refused), which obj keeps alive. 0, or -1 with an exception. */
int pyxbuf__dlpack_dltensor_of(PyObject *obj, const Py_ssize_t *shape,
                               const Py_ssize_t *item_strides, DLTensor *out);

/* Hand the pending exception to a DLPack allocator's error callback. */
void pyxbuf__dlpack_report_to(void *error_ctx,
                              void (*set_error)(void *, const char *, const char *));

#endif
