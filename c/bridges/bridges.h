/* bridges.h -- the bridges from other protocols (DLPack, the CUDA Array
 * Interface, NumPy's __array_interface__) to a pyxbuf view, as acquire.c
 * calls them, in that order. */
#ifndef PYXBUF_BRIDGES_BRIDGES_H
#define PYXBUF_BRIDGES_BRIDGES_H

#include "view/view.h"

#include <string.h>

/* Each bridge returns 1 when it acquired the view, 0 when it does not apply
 * to `obj` (nothing set), -1 with a Python exception when it applies but
 * failed (the next bridge is then tried; the first error is what the consumer
 * sees if none succeeds). On 1 the bridge has filled view->base (base.obj a
 * new reference to `obj`), view->path and view->owner, the object whose
 * death frees the memory (e.g. calls the DLPack deleter); release is generic
 * (Py_XDECREF of base.obj and owner). The usual way to fill the view is
 * pyxbuf_export_fill with a description of the foreign array: it honours the
 * classic request flags and the device rules exactly as pyxbuf's exporters do. */
/* `stream` is the consumer's stream (DLPack's integer convention) from
 * pyxbuf_get_stream, or PYXBUF__STREAM_UNSET from pyxbuf_get (DLPack:
 * stream=None, the producer assumes the default stream). */
#define PYXBUF__STREAM_UNSET INT64_MIN
int pyxbuf__dlpack_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream);
/* A DLPack view of a host tensor with few dimensions has no owner object:
 * view->owner is NULL and view->bridge_data the DLManagedTensorVersioned
 * itself, whose deleter this runs at release (the one exception to the
 * generic release above). */
void pyxbuf__dlpack_release_bare(void *tensor);
/* 1 if the DLPack bridge would try `type` (it has __dlpack__ or a C exchange
 * table); answered from the per-type cache, calls nothing. */
int pyxbuf__dlpack_type_speaks(PyTypeObject *type);
/* The DLPack C exchange table (a DLPackExchangeAPI) of the type that pyxbuf
 * can read, or NULL; answered from the DLPack bridge's per-type cache. */
const void *pyxbuf__dlpack_c_table_of(PyTypeObject *type);
/* pyxbuf_get's route for a type with no classic buffer whose C exchange
 * table is `api` (acquire.c caches it per type), for a request without borrow
 * bits: the DLPack bridge called with no other bookkeeping. 1 = acquired (the
 * view marked so); else a bridge's answer (0 or -1), and acquire.c tries the
 * other bridges, as it would have without the route. */
int pyxbuf__dlpack_get_c(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream,
                         const void *api);
int pyxbuf__cai_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags, int64_t stream);
int pyxbuf__array_interface_acquire(PyObject *obj, pyxbuf_view *view, int32_t flags,
                                    int64_t stream);

/* Whether a dtype's scalar type comes from NumPy or Python itself (module
 * "numpy", "numpy.*" or "builtins": StringDType's str, NumPy's test dtypes):
 * not a custom type, for the __array_interface__ bridge and NumPy's struct
 * route alike. */
static inline int pyxbuf__numpy_owned_module(const char *module) {
    return strcmp(module, "numpy") == 0 || strcmp(module, "builtins") == 0 ||
           strncmp(module, "numpy.", 6) == 0;
}

#endif
