/* holder.c -- the bridges' keep-alive object: a Python object holding a
 * bridge's state for a view (a DLPack tensor and its device info, the
 * dimensions a CAI or __array_interface__ dict gave), finalized when the last
 * view of it goes; and the one way to move an acquired view in memory. Below
 * the bridges, which make holders, and above nothing of pyxbuf's but base. */

#include "view/view.h"

#include <string.h>

typedef struct holder_object {
    PyObject_VAR_HEAD
    void (*finalize)(void *storage);
    Py_ssize_t size;
    _Alignas(16) unsigned char storage[];
} holder_object;

static void holder_dealloc(PyObject *self) {
    holder_object *h = (holder_object *)self;
    PyTypeObject *tp = Py_TYPE(self);
    if (h->finalize != NULL) h->finalize(h->storage);
    PYXBUF__TP_FREE(tp)(self);
    Py_DECREF(tp);
}

static PyType_Slot holder_slots[] = {
    {Py_tp_dealloc, (void *)holder_dealloc},
    {Py_tp_doc, (void *)"pyxbuf's keep-alive for a bridged view (DLPack tensor, CAI, ...)."},
    {0, NULL},
};

static PyType_Spec holder_spec = {
    .name = "pyxbuf._BridgeHolder",
    .basicsize = (int)sizeof(holder_object),
    .itemsize = 1,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = holder_slots,
};

PyObject *pyxbuf__holder_new(size_t size, void (*finalize)(void *storage)) {
    static PyObject *holder_type = NULL; /* one per library copy, kept */
    PyObject *type = PYXBUF__FT_LOAD_ACQUIRE(&holder_type);
    if (type == NULL) {
        PyObject *tp = PyType_FromSpec(&holder_spec);
        if (tp == NULL) return NULL;
        type = pyxbuf__publish_once(&holder_type, tp);
    }
    /* itemsize 1: `size` bytes after the (16-aligned) header. */
    holder_object *h = PyObject_NewVar(holder_object, (PyTypeObject *)type, (Py_ssize_t)size);
    if (h == NULL) return NULL;
    memset(h->storage, 0, size);
    h->finalize = finalize;
    h->size = (Py_ssize_t)size;
    return (PyObject *)h;
}

void *pyxbuf__holder_storage(PyObject *holder) { return ((holder_object *)holder)->storage; }

void pyxbuf__view_move(pyxbuf_view *dst, const pyxbuf_view *src) {
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
