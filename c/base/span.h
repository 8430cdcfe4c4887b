/* span.h -- layout arithmetic on a buffer's shape and strides (span.c): the
 * bytes it touches, C-contiguity, packing walks. */
#ifndef PYXBUF_BASE_SPAN_H
#define PYXBUF_BASE_SPAN_H

#include "base/base.h"

/* Whether b's items fill [0, len) in C order: every stride the C-order one
 * (dimensions of extent 1 excepted) and len their product. The common case,
 * answered without an overflow-checked walk of the layout. */
static inline int pyxbuf__fills_c_order(const Py_buffer *b) {
    if (b->shape == NULL || b->ndim > PYXBUF_MAX_NDIM) return 0;
    Py_ssize_t expected = b->itemsize;
    for (int i = b->ndim - 1; i >= 0; i--) {
        Py_ssize_t n = b->shape[i];
        if (b->strides != NULL && n != 1 && b->strides[i] != expected) return 0;
        if (n < 0 || !PYXBUF__MUL_OK(expected, n, &expected)) return 0;
    }
    return expected == b->len;
}

/* The byte span [lo, hi) a view's items touch, relative to base.buf; -1 when
 * the producer's shape and strides overflow. The C-order case inline, the
 * walk out of line (span.c). */
int pyxbuf__view_span_walk(const Py_buffer *b, Py_ssize_t *lo, Py_ssize_t *hi);
static inline int pyxbuf__view_span(const Py_buffer *b, Py_ssize_t *lo, Py_ssize_t *hi) {
    if (PYXBUF_LIKELY(pyxbuf__fills_c_order(b))) {
        *lo = 0;
        *hi = b->len;
        return 0;
    }
    return pyxbuf__view_span_walk(b, lo, hi);
}

/* The same from raw shape/strides (strides NULL = C order), all checked. */
int pyxbuf__checked_span(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                         Py_ssize_t itemsize, Py_ssize_t *lo, Py_ssize_t *hi);

/* The byte range [lo, hi) a layout's items touch, relative to base.buf; how
 * many items; whether they form one C-contiguous block. `ok` is 0 when the
 * producer's numbers overflow (a lying producer's strides must not wrap the
 * span). */
typedef struct pyxbuf__layout {
    Py_ssize_t lo, hi;
    int c_contiguous;
    int ok;
    Py_ssize_t count; /* items */
} pyxbuf__layout;
pyxbuf__layout pyxbuf__view_layout(const Py_buffer *b);
/* Dimension `dim`'s stride in bytes (the C-order one when b has none). */
Py_ssize_t pyxbuf__stride_of(const Py_buffer *b, int dim);
/* Copy every item of `b`, whose bytes start at `src` (base.buf, or where a
 * copy of the touched range puts it), into `dst` packed in C (F) order. */
void pyxbuf__gather_c_order(const Py_buffer *b, const char *src, char *dst);
void pyxbuf__gather_f_order(const Py_buffer *b, const char *src, char *dst);

#endif
