/* view.h -- filling views: the bridges' keep-alive holder (holder.c), the
 * description-to-view fill (fill.c, inline for the hot paths) and the view
 * fields every path sets. */
#ifndef PYXBUF_VIEW_VIEW_H
#define PYXBUF_VIEW_VIEW_H

#include "base/span.h"

/* holder.c: a Python object holding `size` bytes of zeroed, 16-byte-aligned storage
 * for a bridge's state (device info, spilled dims, format strings);
 * `finalize(storage)`, if not NULL, runs once when it dies, with the GIL. */
PyObject *pyxbuf__holder_new(size_t size, void (*finalize)(void *storage));
void *pyxbuf__holder_storage(PyObject *holder);
/* holder.c: move an acquired view to `dst` (for a view kept past the call that
 * acquired it): pointers into the view itself (inline dims, &base.itemsize
 * for 1-d strides, a format or device info stored in it) follow it. */
void pyxbuf__view_move(pyxbuf_view *dst, const pyxbuf_view *src);

/* fill.c: a description's item size (from its format when 0), its bytes
 * (refusing negative or overflowing shapes), and its basic sanity (size,
 * ndim, shape, strides); each sets a Python exception on failure. */
int pyxbuf__desc_itemsize(const pyxbuf_export_desc *d, Py_ssize_t *itemsize);
int pyxbuf__desc_nbytes(const pyxbuf_export_desc *d, Py_ssize_t itemsize, Py_ssize_t *nbytes);
int pyxbuf__check_desc(const pyxbuf_export_desc *d);

/* Filling a view from a pyxbuf_export_desc (fill.c). */

/* Bytes, C-contiguity and a sound span of d's layout in one pass, for the
 * common layout: no empty dimension, nothing overflows, itemsize > 0. -1 (no
 * exception) otherwise: pyxbuf_export_fill's careful checks then say why. */
static PYXBUF_ALWAYS_INLINE int pyxbuf__layout_pass(const pyxbuf_export_desc *d,
                                                    Py_ssize_t itemsize, Py_ssize_t *nbytes,
                                                    int *c) {
    Py_ssize_t expected = itemsize, lo = 0, hi = 0, extent, span;
    int contiguous = 1;
    if (itemsize <= 0) return -1;
    for (int32_t i = d->ndim - 1; i >= 0; i--) {
        Py_ssize_t n = d->shape[i], s = d->strides ? d->strides[i] : expected;
        if (n <= 0) return -1;
        if (n != 1 && s != expected) contiguous = 0;
        if (!PYXBUF__MUL_OK(expected, n, &expected) || !PYXBUF__MUL_OK(s, n - 1, &extent) ||
            (extent < 0 ? !PYXBUF__ADD_OK(lo, extent, &lo) : !PYXBUF__ADD_OK(hi, extent, &hi)))
            return -1;
    }
    if (!PYXBUF__ADD_OK(hi, itemsize, &hi) || !PYXBUF__SUB_OK(hi, lo, &span)) return -1;
    *nbytes = expected; /* every dimension is at least 1 */
    *c = contiguous;
    return 0;
}

/* The stores of a checked fill: what the request flags ask for, nothing
 * more (PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES), and a new reference. As
 * CPython's producers answer (PyBuffer_FillInfo, array.array, memoryview):
 * without PyBUF_ND one flat run, ndim 1 and no shape (a consumer copies ndim
 * shape entries: ndim 2 with a NULL shape crashes PyMemoryView_FromBuffer);
 * at ndim 0 no shape and no strides. The caller has refused a layout that is
 * not C-contiguous when the request has no strides. */
static PYXBUF_ALWAYS_INLINE void pyxbuf__export_store(Py_buffer *view, PyObject *exporter,
                                                      int flags, const pyxbuf_export_desc *d,
                                                      Py_ssize_t itemsize, Py_ssize_t nbytes) {
    int nd = (flags & PyBUF_ND) == PyBUF_ND;
    view->buf = d->buf;
    view->obj = Py_XNewRef(exporter);
    view->len = nbytes;
    view->itemsize = itemsize;
    view->readonly = d->readonly ? 1 : 0;
    view->ndim = nd ? (int)d->ndim : 1;
    view->format = (flags & PyBUF_FORMAT) ? (char *)(d->format ? d->format : "B") : NULL;
    view->shape = nd && d->ndim > 0 ? d->shape : NULL;
    view->strides = NULL;
    if ((flags & PyBUF_STRIDES) == PyBUF_STRIDES && d->ndim > 0) /* ndim > 1 has strides */
        view->strides = d->strides ? d->strides : &view->itemsize;
    view->suboffsets = NULL;
    view->internal = NULL;
}

/* pyxbuf_export_fill for a bridge's host array, inline: the common case (a
 * sound C-contiguous layout, a request it meets) is checked and stored here;
 * anything else goes to pyxbuf_export_fill, which checks each rule with its
 * message. `d` must describe host memory (device NULL) with d->size set,
 * ndim in 0..PYXBUF_MAX_NDIM and a shape. */
static PYXBUF_ALWAYS_INLINE int pyxbuf__export_fill_host(Py_buffer *view, PyObject *exporter,
                                                         int flags,
                                                         const pyxbuf_export_desc *d) {
    Py_ssize_t nbytes;
    int c;
    if (PYXBUF_LIKELY((d->ndim <= 1 || d->strides != NULL) &&
                      pyxbuf__layout_pass(d, d->itemsize, &nbytes, &c) == 0 && c &&
                      (d->buf != NULL || nbytes == 0) &&
                      !((flags & PyBUF_WRITABLE) && d->readonly) &&
                      (flags & PyBUF_F_CONTIGUOUS) != PyBUF_F_CONTIGUOUS)) {
        pyxbuf__export_store(view, exporter, flags, d, d->itemsize, nbytes);
        return 0;
    }
    return pyxbuf_export_fill(view, exporter, flags, d);
}

/* The extended fields of a view being acquired for `flags`, before a path
 * fills it: no device, no grants. The Py_buffer, `state`, `path` and the
 * bridge fields are the path's to set. */
static inline void pyxbuf__view_clear_extended(pyxbuf_view *view, int32_t flags) {
    view->flags = 0;
    view->ext_flags = 0;
    view->device = NULL;
    view->device_info = NULL;
    view->requested = flags;
}

/* The same, and not yet acquired (reset_view in acquire.c clears the rest too). */
static inline void pyxbuf__view_begin(pyxbuf_view *view, int32_t flags) {
    pyxbuf__view_clear_extended(view, flags);
    view->state = PYXBUF__STATE_RELEASED;
}

/* Room for ndim shape entries followed by ndim strides: the view's inline_dims
 * when ndim <= PYXBUF_INLINE_NDIM, else `spill` (2 * ndim entries the bridge
 * keeps alive, e.g. in its holder's storage). */
static inline Py_ssize_t *pyxbuf__view_dims(pyxbuf_view *view, int ndim, Py_ssize_t *spill) {
    return ndim <= PYXBUF_INLINE_NDIM ? view->inline_dims : spill;
}

#endif
