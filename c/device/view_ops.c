/* device.c -- the Array API's device semantics over the backends: a view's
 * device, same-device checks, waits, the span arithmetic of layouts,
 * host-only operations and copies across devices (pyxbuf_to_device, in
 * export.c, makes the exporter they fill). Identifiers are in device_ids.c,
 * backends in backends.c; nothing here knows a backend by name. */

#include "base/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* A view's device                                                           */
/* ------------------------------------------------------------------------- */

static const pyxbuf_device host_device = {PYXBUF_DL_CPU, 0};

int pyxbuf_view_device(const pyxbuf_view *view, pyxbuf_device *out, pyxbuf_error *err) {
    if (view->device == NULL) {
        *out = host_device;
        return 0;
    }
    if (!pyxbuf_device_equal(view->device, PYXBUF_DEVICE_DLPACK) || view->device_info == NULL)
        return pyxbuf__error(err, PYXBUF_EUNSUPPORTED, -1,
                             "view device '%s' is not '%s'; pyxbuf cannot tell which device "
                             "holds it",
                             view->device, PYXBUF_DEVICE_DLPACK);
    const pyxbuf_device_info *info = view->device_info;
    out->device_type = info->device_type;
    out->device_id = info->device_id;
    return 0;
}

/* The view's device as "cuda:0", for messages. */
static void describe_view_device(const pyxbuf_view *view, char *buf, size_t cap) {
    pyxbuf_device d;
    if (pyxbuf_view_device(view, &d, NULL) < 0 || pyxbuf_device_format(&d, buf, cap) < 0)
        snprintf(buf, cap, "%s", view->device ? view->device : "cpu");
}

int pyxbuf_same_device(const pyxbuf_view *a, const pyxbuf_view *b) {
    pyxbuf_device da = {0, 0}, db = {0, 0};
    pyxbuf_error err;
    if (pyxbuf_view_device(a, &da, &err) < 0 || pyxbuf_view_device(b, &db, &err) < 0)
        return pyxbuf_error_raise(&err);
    if (pyxbuf_device_same(&da, &db)) return 0;
    char na[64], nb[64];
    pyxbuf_device_format(&da, na, sizeof na);
    pyxbuf_device_format(&db, nb, sizeof nb);
    PyErr_Format(PyExc_ValueError,
                 "pyxbuf: the views are on different devices, '%s' and '%s'; pyxbuf never moves "
                 "data implicitly: move one with pyxbuf_to_device first",
                 na, nb);
    return -1;
}

/* The backend of a device view plus its info, or an error. */
static int view_backend(const pyxbuf_view *view, pyxbuf_backend *b, pyxbuf_device *d,
                        pyxbuf_error *err) {
    int rc = pyxbuf_view_device(view, d, err);
    if (rc < 0) return rc;
    return pyxbuf_backend_get(d->device_type, b, err);
}

static int wait_event(const pyxbuf_backend *b, const pyxbuf_view *view, int64_t stream,
                      pyxbuf_error *err) {
    const pyxbuf_device_info *info = view->device_info;
    if (info == NULL || info->sync_event == NULL || stream == PYXBUF_STREAM_NONE) return 0;
    if (b->event_wait == NULL)
        return pyxbuf__error(err, PYXBUF_EUNSUPPORTED, -1,
                             "backend '%s' cannot wait for events but the view has one",
                             b->name ? b->name : "?");
    return b->event_wait(b->ctx, info->device_id, info->sync_event, stream, err);
}

int pyxbuf_device_wait(const pyxbuf_view *view, int64_t consumer_stream) {
    if (view->device == NULL) return 0;
    pyxbuf_backend b;
    pyxbuf_device d = {0, 0}; /* set by view_backend; gcc's -O2 cannot see it */
    pyxbuf_error err;
    int rc = view_backend(view, &b, &d, &err);
    if (rc == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = wait_event(&b, view, consumer_stream, &err);
        Py_END_ALLOW_THREADS
    }
    return rc < 0 ? pyxbuf_error_raise(&err) : 0;
}

/* ------------------------------------------------------------------------- */
/* Layout walking: strided views to packed C order                           */
/* ------------------------------------------------------------------------- */

/* The byte range [lo, hi) a view's items touch, relative to base.buf, and
 * whether they form one C-contiguous block. `ok` is 0 when the producer's
 * numbers overflow (a lying producer's strides must not wrap the span). */
typedef struct layout {
    Py_ssize_t lo, hi;
    int c_contiguous;
    int ok;
    Py_ssize_t count; /* items */
} layout;

static Py_ssize_t stride_of(const Py_buffer *b, int dim) {
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
        if (!(extent < 0 ? PYXBUF__ADD_OK(lo, extent, &lo) : PYXBUF__ADD_OK(hi, extent, &hi))) return -1;
    }
    /* hi - lo, not hi + -lo: lo may be PY_SSIZE_T_MIN, whose negation overflows. */
    if (!PYXBUF__ADD_OK(hi, itemsize, &hi) || !PYXBUF__SUB_OK(hi, lo, &expected)) return -1;
    *lo_out = lo;
    *hi_out = hi;
    return 0;
}

static layout view_layout(const Py_buffer *b) {
    layout l = {0, 0, 1, 1, 1};
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
        if (n > 1 && stride_of(b, i) != expected) l.c_contiguous = 0;
        l.ok = PYXBUF__MUL_OK(l.count, n, &l.count) && PYXBUF__MUL_OK(expected, n, &expected);
    }
    return l;
}

int pyxbuf__view_span_walk(const Py_buffer *b, Py_ssize_t *lo, Py_ssize_t *hi) {
    layout l = view_layout(b);
    *lo = l.lo;
    *hi = l.hi;
    return l.ok ? 0 : -1;
}

/* The address buf + off, computed as an integer (a lying producer's offset
 * may leave the address space, where pointer arithmetic is undefined);
 * 0 when it does. */
static int address_at(const char *buf, Py_ssize_t off, uintptr_t *out) {
    uintptr_t base = (uintptr_t)buf;
    if (off >= 0) return PYXBUF__ADD_OK(base, (uintptr_t)off, out);
    uintptr_t back = (uintptr_t)0 - (uintptr_t)off;
    if (back > base) return 0;
    *out = base - back;
    return 1;
}

/* A device view's first and last bytes must both be memory of the device it
 * claims; "cuda" claims are also met by CUDA managed memory, which is what
 * PyTorch and RAPIDS hand out under kDLCUDA when managed memory is on. */
int pyxbuf__check_device_span(const pyxbuf_backend *b, const char *buf, Py_ssize_t lo,
                              Py_ssize_t hi, const pyxbuf_device *claimed, pyxbuf_error *err) {
    if (hi <= lo) return 0;
    uintptr_t first, last;
    if (!address_at(buf, lo, &first) || !address_at(buf, hi - 1, &last))
        return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                             "its bytes [%p%+zd, %p%+zd) wrap around the address space",
                             (const void *)buf, lo, (const void *)buf, hi);
    const void *ends[2] = {(const void *)first, (const void *)last};
    for (int i = 0; i < 2; i++) {
        pyxbuf_device found = {0, 0};
        char claim[64], where[64];
        pyxbuf_device_format(claimed, claim, sizeof claim);
        pyxbuf_error why;
        if (b->pointer_query(b->ctx, ends[i], &found, &why) < 0)
            return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                                 "its %s byte %p is not memory of device '%s' (%.300s)",
                                 i ? "last" : "first", ends[i], claim, why.message);
        int same = pyxbuf_device_same(&found, claimed) ||
                   (claimed->device_type == PYXBUF_DL_CUDA &&
                    found.device_type == PYXBUF_DL_CUDA_MANAGED &&
                    found.device_id == claimed->device_id);
        if (!same) {
            pyxbuf_device_format(&found, where, sizeof where);
            return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                                 "it claims device '%s' but its %s byte %p is on '%s'", claim,
                                 i ? "last" : "first", ends[i], where);
        }
    }
    return 0;
}

/* Copy every item of `b`, whose bytes start at `src` (= base.buf shifted to
 * the copy of the touched range), into `dst` in C order. */
static void gather_c_order(const Py_buffer *b, const char *src, char *dst) {
    Py_ssize_t index[PYXBUF_MAX_NDIM] = {0};
    layout l = view_layout(b);
    if (l.count == 0) return;
    if (b->shape == NULL || b->ndim == 0) {
        memcpy(dst, src, (size_t)(b->shape ? b->itemsize : b->len));
        return;
    }
    int last = b->ndim - 1;
    Py_ssize_t inner = b->shape[last], inner_stride = stride_of(b, last);
    for (;;) {
        const char *p = src;
        for (int i = 0; i < last; i++) p += index[i] * stride_of(b, i);
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

/* Walk F order by gathering the transposed view: shape and strides reversed. */
static void gather_f_order(const Py_buffer *b, const char *src, char *dst) {
    Py_buffer t = *b;
    Py_ssize_t shape[PYXBUF_MAX_NDIM], strides[PYXBUF_MAX_NDIM];
    if (b->shape == NULL || b->ndim <= 1) {
        gather_c_order(b, src, dst);
        return;
    }
    for (int i = 0; i < b->ndim; i++) {
        shape[i] = b->shape[b->ndim - 1 - i];
        strides[i] = stride_of(b, b->ndim - 1 - i);
    }
    t.shape = shape;
    t.strides = strides;
    gather_c_order(&t, src, dst);
}

/* ------------------------------------------------------------------------- */
/* Host-only operations                                                      */
/* ------------------------------------------------------------------------- */

static int refuse_device_view(const pyxbuf_view *view, const char *what) {
    char name[64];
    describe_view_device(view, name, sizeof name);
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: %s needs host memory, but the view is on device '%s'; copy it to the "
                 "host first (pyxbuf_copy_to_host, or pyxbuf_to_device with a CPU device)",
                 what, name);
    return -1;
}

static int is_host_view(const pyxbuf_view *view) {
    pyxbuf_device d = {0, 0};
    if (view->device == NULL) return 1;
    return pyxbuf_view_device(view, &d, NULL) == 0 && pyxbuf__host_accessible(d.device_type);
}

static int refuse_released(void) {
    PyErr_SetString(PyExc_BufferError,
                    "pyxbuf: the view is not acquired (released already?); acquire it with "
                    "pyxbuf_get first");
    return -1;
}

void *pyxbuf_view_item_ptr(const pyxbuf_view *view, const Py_ssize_t *indices) {
    if (!pyxbuf__view_acquired(view)) {
        refuse_released();
        return NULL;
    }
    if (!is_host_view(view)) {
        refuse_device_view(view, "element access");
        return NULL;
    }
    const Py_buffer *b = &view->base;
    char *p = b->buf;
    for (int i = 0; b->shape != NULL && i < b->ndim; i++) {
        if (indices[i] < 0 || indices[i] >= b->shape[i]) {
            PyErr_Format(PyExc_IndexError,
                         "pyxbuf: index %zd is out of bounds for dimension %d of size %zd",
                         indices[i], i, b->shape[i]);
            return NULL;
        }
        p += indices[i] * stride_of(b, i);
        if (b->suboffsets && b->suboffsets[i] >= 0) p = *(char **)p + b->suboffsets[i];
    }
    return p;
}

PyObject *pyxbuf_view_memoryview(const pyxbuf_view *view) {
    if (!pyxbuf__view_acquired(view)) {
        refuse_released();
        return NULL;
    }
    if (!is_host_view(view)) {
        refuse_device_view(view, "a memoryview");
        return NULL;
    }
    if (view->base.obj == NULL) {
        PyErr_SetString(PyExc_BufferError, "pyxbuf: the view has no object to make a memoryview of");
        return NULL;
    }
    return PyMemoryView_FromObject(view->base.obj);
}

static int check_copy_size(const pyxbuf_view *view, size_t nbytes) {
    if (!pyxbuf__view_acquired(view)) {
        PyErr_SetString(PyExc_BufferError,
                        "pyxbuf: the view is not acquired (released already?); acquire it with "
                        "pyxbuf_get first");
        return -1;
    }
    layout l = view_layout(&view->base);
    Py_ssize_t want = 0;
    if (!l.ok || !PYXBUF__MUL_OK(l.count, view->base.itemsize, &want) || want != view->base.len) {
        PyErr_Format(PyExc_BufferError,
                     "pyxbuf: the view's len %zd disagrees with its shape and itemsize %zd, or "
                     "its strides overflow; the producer's buffer is inconsistent",
                     view->base.len, view->base.itemsize);
        return -1;
    }
    if (view->base.suboffsets != NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "pyxbuf: cannot copy a view with suboffsets (PIL-style indirect arrays); "
                        "request it without PyBUF_INDIRECT");
        return -1;
    }
    if ((Py_ssize_t)nbytes != view->base.len || view->base.len < 0) {
        PyErr_Format(PyExc_ValueError,
                     "pyxbuf: destination holds %zu bytes but the view's items take %zd; pass a "
                     "buffer of exactly base.len bytes",
                     nbytes, view->base.len);
        return -1;
    }
    return 0;
}

int pyxbuf_view_copy_contiguous(const pyxbuf_view *view, void *dst, size_t nbytes, char order) {
    if (check_copy_size(view, nbytes) < 0) return -1;
    if (!is_host_view(view)) return refuse_device_view(view, "a contiguous copy");
    if (order != 'C' && order != 'F') {
        PyErr_Format(PyExc_ValueError, "pyxbuf: order must be 'C' or 'F', not '%c'", order);
        return -1;
    }
    if (order == 'C')
        gather_c_order(&view->base, view->base.buf, dst);
    else
        gather_f_order(&view->base, view->base.buf, dst);
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Copies across devices                                                     */
/* ------------------------------------------------------------------------- */

/* Bring a device view's touched byte range to the host (one backend copy) and
 * gather it into dst in C order. Strided device views cost one copy of their
 * span: pyxbuf has no device kernels to gather on the device. */
static int device_to_host(const pyxbuf_backend *b, const pyxbuf_view *view, const pyxbuf_device *d,
                          void *dst, int64_t stream, pyxbuf_error *err) {
    layout l = view_layout(&view->base);
    if (l.count == 0) return 0;
    const char *src = (const char *)view->base.buf + l.lo;
    size_t span = (size_t)(l.hi - l.lo);
    if (l.c_contiguous) return b->copy_to_host(b->ctx, d->device_id, dst, src, span, stream, err);
    char *staging = malloc(span);
    if (staging == NULL)
        return pyxbuf__error(err, PYXBUF_ENOMEM, -1, "cannot allocate %zu bytes to stage a copy",
                             span);
    int rc = b->copy_to_host(b->ctx, d->device_id, staging, src, span, stream, err);
    if (rc == 0) gather_c_order(&view->base, staging - l.lo, dst);
    free(staging);
    return rc;
}

int pyxbuf_copy_to_host(const pyxbuf_view *view, void *dst, size_t nbytes) {
    if (check_copy_size(view, nbytes) < 0) return -1;
    if (view->device == NULL) {
        gather_c_order(&view->base, view->base.buf, dst);
        return 0;
    }
    pyxbuf_backend b;
    pyxbuf_device d = {0, 0}; /* set by view_backend; gcc's -O2 cannot see it */
    pyxbuf_error err;
    int rc = view_backend(view, &b, &d, &err);
    if (rc == 0) {
        Py_BEGIN_ALLOW_THREADS
        /* Pinned host memory too: the producer may still be writing it. */
        rc = wait_event(&b, view, PYXBUF_STREAM_DEFAULT, &err);
        if (rc == 0 && pyxbuf__host_accessible(d.device_type)) {
            rc = b.synchronize ? b.synchronize(b.ctx, d.device_id, PYXBUF_STREAM_DEFAULT, &err) : 0;
            if (rc == 0) gather_c_order(&view->base, view->base.buf, dst);
        } else if (rc == 0) {
            rc = device_to_host(&b, view, &d, dst, PYXBUF_STREAM_DEFAULT, &err);
        }
        Py_END_ALLOW_THREADS
    }
    return rc < 0 ? pyxbuf_error_raise(&err) : 0;
}

int pyxbuf__check_copy(const pyxbuf_view *view) {
    return check_copy_size(view, (size_t)view->base.len);
}

/* Fill `dst`, memory of `target` (C order), from the view on `src`. */
int pyxbuf__copy_view_into(const pyxbuf_view *view, const pyxbuf_device *src, void *dst,
                           const pyxbuf_device *target, int64_t stream, pyxbuf_error *err) {
    size_t n = (size_t)view->base.len;
    pyxbuf_backend sb, tb;
    int rc = 0;
    int src_host = pyxbuf__host_accessible(src->device_type);
    if (view->device != NULL && (rc = pyxbuf_backend_get(src->device_type, &sb, err)) < 0)
        return rc;
    if ((rc = pyxbuf_backend_get(target->device_type, &tb, err)) < 0) return rc;
    /* Wait for the producer, also when its memory is host-accessible (pinned). */
    if (view->device != NULL && (rc = wait_event(&sb, view, stream, err)) < 0) return rc;
    if (view->device != NULL && src_host && sb.synchronize &&
        (rc = sb.synchronize(sb.ctx, src->device_id, stream, err)) < 0)
        return rc;
    if (pyxbuf__host_accessible(target->device_type)) {
        if (src_host) {
            gather_c_order(&view->base, view->base.buf, dst);
            return 0;
        }
        return device_to_host(&sb, view, src, dst, stream, err);
    }
    layout l = view_layout(&view->base);
    if (!src_host && sb.device_type == tb.device_type && l.c_contiguous && tb.copy_on_device)
        return tb.copy_on_device(tb.ctx, target->device_id, dst, src->device_id,
                                 (const char *)view->base.buf + l.lo, n, stream, err);
    if (src_host && l.c_contiguous)
        return tb.copy_from_host(tb.ctx, target->device_id, dst,
                                 (const char *)view->base.buf + l.lo, n, stream, err);
    /* Strided, or across backends: pack on the host, then upload once. */
    char *staging = malloc(n ? n : 1);
    if (staging == NULL)
        return pyxbuf__error(err, PYXBUF_ENOMEM, -1, "cannot allocate %zu bytes to stage a copy",
                             n);
    if (src_host)
        gather_c_order(&view->base, view->base.buf, staging);
    else
        rc = device_to_host(&sb, view, src, staging, stream, err);
    if (rc == 0) rc = tb.copy_from_host(tb.ctx, target->device_id, dst, staging, n, stream, err);
    free(staging);
    return rc;
}

/* An event after the work queued on `stream` of `target`, or NULL for
 * host-accessible memory (nothing to wait for) and backends without events. */
int pyxbuf__record_event(const pyxbuf_device *target, int64_t stream, void **event,
                         pyxbuf_error *err) {
    pyxbuf_backend tb;
    *event = NULL;
    int rc = pyxbuf_backend_get(target->device_type, &tb, err);
    if (rc < 0 || tb.event_record == NULL || pyxbuf__host_accessible(target->device_type)) return rc;
    return tb.event_record(tb.ctx, target->device_id, stream, event, err);
}
