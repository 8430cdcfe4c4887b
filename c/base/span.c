/* span.c -- layout arithmetic on shapes and strides: the byte span a layout
 * touches (checked: a lying producer's strides must not wrap it), whether it
 * is one C-contiguous block, and the walks that pack its items in C or F
 * order. Pure arithmetic on Py_buffer fields; nothing here reads a device. */

#include "base/span.h"

#include <string.h>

Py_ssize_t pyxbuf__stride_of(const Py_buffer *b, int dim) {
    if (b->strides) return b->strides[dim];
    Py_ssize_t s = b->itemsize;
    for (int i = b->ndim - 1; i > dim; i--) s *= b->shape[i];
    return s;
}

int pyxbuf__checked_span(int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                         Py_ssize_t itemsize, Py_ssize_t *lo_out, Py_ssize_t *hi_out) {
    Py_ssize_t lo = 0, hi = 0, expected = itemsize;
    if (ndim < 0 || ndim > PYXBUF_MAX_NDIM || itemsize < 0) return -1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] == 0) { /* no items: an empty span */
            *lo_out = *hi_out = 0;
            return 0;
        }
    }
    for (int i = ndim - 1; i >= 0; i--) {
        Py_ssize_t n = shape[i], s = strides ? strides[i] : expected, extent;
        if (!strides && !PYXBUF__MUL_OK(expected, n, &expected)) return -1;
        if (!PYXBUF__MUL_OK(s, n - 1, &extent)) return -1;
        if (!(extent < 0 ? PYXBUF__ADD_OK(lo, extent, &lo) : PYXBUF__ADD_OK(hi, extent, &hi)))
            return -1;
    }
    /* hi - lo, not hi + -lo: lo may be PY_SSIZE_T_MIN, whose negation overflows. */
    if (!PYXBUF__ADD_OK(hi, itemsize, &hi) || !PYXBUF__SUB_OK(hi, lo, &expected)) return -1;
    *lo_out = lo;
    *hi_out = hi;
    return 0;
}

pyxbuf__layout pyxbuf__view_layout(const Py_buffer *b) {
    pyxbuf__layout l = {0, 0, 1, 1, 1};
    if (b->shape == NULL) { /* no ND: one flat C-contiguous block */
        l.hi = b->len;
        l.count = b->itemsize ? b->len / b->itemsize : 0;
        l.ok = b->len >= 0;
        return l;
    }
    if (pyxbuf__checked_span(b->ndim, b->shape, b->strides, b->itemsize, &l.lo, &l.hi) < 0) {
        l.ok = 0;
        return l;
    }
    Py_ssize_t expected = b->itemsize;
    for (int i = b->ndim - 1; i >= 0 && l.ok; i--) {
        Py_ssize_t n = b->shape[i];
        if (n > 1 && pyxbuf__stride_of(b, i) != expected) l.c_contiguous = 0;
        l.ok = PYXBUF__MUL_OK(l.count, n, &l.count) && PYXBUF__MUL_OK(expected, n, &expected);
    }
    return l;
}

int pyxbuf__view_span_walk(const Py_buffer *b, Py_ssize_t *lo, Py_ssize_t *hi) {
    pyxbuf__layout l = pyxbuf__view_layout(b);
    *lo = l.lo;
    *hi = l.hi;
    return l.ok ? 0 : -1;
}

void pyxbuf__gather_c_order(const Py_buffer *b, const char *src, char *dst) {
    Py_ssize_t index[PYXBUF_MAX_NDIM] = {0};
    pyxbuf__layout l = pyxbuf__view_layout(b);
    if (l.count == 0) return;
    if (b->shape == NULL || b->ndim == 0) {
        memcpy(dst, src, (size_t)(b->shape ? b->itemsize : b->len));
        return;
    }
    int last = b->ndim - 1;
    Py_ssize_t inner = b->shape[last], inner_stride = pyxbuf__stride_of(b, last);
    for (;;) {
        const char *p = src;
        for (int i = 0; i < last; i++)
            p += index[i] * pyxbuf__stride_of(b, i);
        if (inner_stride == b->itemsize) {
            memcpy(dst, p, (size_t)(inner * b->itemsize));
            dst += inner * b->itemsize;
        } else {
            for (Py_ssize_t j = 0; j < inner; j++, dst += b->itemsize)
                memcpy(dst, p + j * inner_stride, (size_t)b->itemsize);
        }
        int d = last - 1;
        while (d >= 0 && ++index[d] == b->shape[d]) index[d--] = 0;
        if (d < 0) return;
    }
}

/* F order: the transposed view (shape and strides reversed) in C order. */
void pyxbuf__gather_f_order(const Py_buffer *b, const char *src, char *dst) {
    Py_buffer t = *b;
    Py_ssize_t shape[PYXBUF_MAX_NDIM], strides[PYXBUF_MAX_NDIM];
    if (b->shape == NULL || b->ndim <= 1) {
        pyxbuf__gather_c_order(b, src, dst);
        return;
    }
    for (int i = 0; i < b->ndim; i++) {
        shape[i] = b->shape[b->ndim - 1 - i];
        strides[i] = pyxbuf__stride_of(b, b->ndim - 1 - i);
    }
    t.shape = shape;
    t.strides = strides;
    pyxbuf__gather_c_order(&t, src, dst);
}
