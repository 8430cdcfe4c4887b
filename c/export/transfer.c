/* transfer.c -- data across devices, in the Array API's terms: whether two
 * views share a device, waiting for a producer's event, and copies between
 * host and device memory or between devices (into memory the caller owns:
 * the exporter that pyxbuf_to_device fills is exporter.c's). Never implicit:
 * every copy here is one a caller asked for. */

#include "export/export.h"
#include "base/fixes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                 "data implicitly: %s",
                 na, nb, pyxbuf__fix(PYXBUF__FIX_MOVE_FIRST));
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

/* The producer's work is ordered before `stream` (its event waited for
 * there); when the host is about to read the memory itself (`host_reads`,
 * host-accessible memory such as pinned), the stream is also finished, since
 * the producer may still be writing. The one wait of device_wait and of the
 * copies; called without the GIL. */
static int wait_for_producer(const pyxbuf_backend *b, const pyxbuf_view *view,
                             const pyxbuf_device *d, int64_t stream, int host_reads,
                             pyxbuf_error *err) {
    int rc = wait_event(b, view, stream, err);
    if (rc == 0 && host_reads && pyxbuf__host_accessible(d->device_type) && b->synchronize)
        rc = b->synchronize(b->ctx, d->device_id, stream, err);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* Copies across devices                                                     */
/* ------------------------------------------------------------------------- */

/* Bring a device view's touched byte range to the host (one backend copy) and
 * gather it into dst in C order. Strided device views cost one copy of their
 * span: pyxbuf has no device kernels to gather on the device. */
static int device_to_host(const pyxbuf_backend *b, const pyxbuf_view *view, const pyxbuf_device *d,
                          void *dst, int64_t stream, pyxbuf_error *err) {
    pyxbuf__layout l = pyxbuf__view_layout(&view->base);
    if (l.count == 0) return 0;
    const char *src = (const char *)view->base.buf + l.lo;
    size_t span = (size_t)(l.hi - l.lo);
    if (l.c_contiguous) return pyxbuf__copy_to_host(b, d->device_id, dst, src, span, stream, err);
    pyxbuf__pinned_block *pinned;
    char *staging = pyxbuf__scratch_take(b, d->device_id, span, &pinned, err);
    if (staging == NULL) return PYXBUF_ENOMEM;
    int rc = pyxbuf__copy_to_host(b, d->device_id, staging, src, span, stream, err);
    if (rc == 0) pyxbuf__gather_c_order(&view->base, staging - l.lo, dst);
    pyxbuf__scratch_give(staging, pinned);
    return rc;
}

/* Without the GIL: wait for the device view's producer as seen from `stream`
 * and, with `dst`, copy its items there in C order (the host reads them, so
 * host-accessible memory is also waited for to the end of its stream). The
 * one wait of pyxbuf_device_wait and pyxbuf_copy_to_host. 0, or -1 with the
 * exception raised. */
static int wait_then_copy(const pyxbuf_view *view, int64_t stream, void *dst) {
    pyxbuf_backend b;
    pyxbuf_device d = {0, 0}; /* set by view_backend; gcc's -O2 cannot see it */
    pyxbuf_error err;
    int rc = view_backend(view, &b, &d, &err);
    /* A consumer that waits on `stream` works there: pyxbuf's own memory is
     * freed only after that work (device_alloc.c). */
    if (rc == 0 && dst == NULL) pyxbuf__device_block_used_on(view, &d, stream);
    if (rc == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = wait_for_producer(&b, view, &d, stream, dst != NULL, &err);
        if (rc == 0 && dst != NULL && pyxbuf__host_accessible(d.device_type))
            pyxbuf__gather_c_order(&view->base, view->base.buf, dst);
        else if (rc == 0 && dst != NULL)
            rc = device_to_host(&b, view, &d, dst, stream, &err);
        Py_END_ALLOW_THREADS
    }
    return rc < 0 ? pyxbuf_error_raise(&err) : 0;
}

int pyxbuf_device_wait(const pyxbuf_view *view, int64_t consumer_stream) {
    return view->device == NULL ? 0 : wait_then_copy(view, consumer_stream, NULL);
}

int pyxbuf_copy_to_host(const pyxbuf_view *view, void *dst, size_t nbytes) {
    if (pyxbuf__check_copy_size(view, nbytes) < 0) return -1;
    if (view->device == NULL) {
        pyxbuf__gather_c_order(&view->base, view->base.buf, dst);
        return 0;
    }
    return wait_then_copy(view, PYXBUF_STREAM_DEFAULT, dst);
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
    if (view->device != NULL && (rc = wait_for_producer(&sb, view, src, stream, 1, err)) < 0)
        return rc;
    if (pyxbuf__host_accessible(target->device_type)) {
        if (src_host) {
            pyxbuf__gather_c_order(&view->base, view->base.buf, dst);
            return 0;
        }
        return device_to_host(&sb, view, src, dst, stream, err);
    }
    pyxbuf__layout l = pyxbuf__view_layout(&view->base);
    if (!src_host && sb.device_type == tb.device_type && l.c_contiguous && tb.copy_on_device)
        return tb.copy_on_device(tb.ctx, target->device_id, dst, src->device_id,
                                 (const char *)view->base.buf + l.lo, n, stream, err);
    if (src_host && l.c_contiguous)
        return pyxbuf__copy_from_host(&tb, target->device_id, dst,
                                      (const char *)view->base.buf + l.lo, n, stream, err);
    /* Strided, or across backends: pack on the host, then upload once. */
    pyxbuf__pinned_block *pinned;
    char *staging = pyxbuf__scratch_take(&tb, target->device_id, n, &pinned, err);
    if (staging == NULL) return PYXBUF_ENOMEM;
    if (src_host)
        pyxbuf__gather_c_order(&view->base, view->base.buf, staging);
    else
        rc = device_to_host(&sb, view, src, staging, stream, err);
    if (rc == 0) rc = pyxbuf__copy_from_host(&tb, target->device_id, dst, staging, n, stream, err);
    pyxbuf__scratch_give(staging, pinned);
    return rc;
}

/* An event after the work queued on `stream` of `target`, or NULL for
 * host-accessible memory (nothing to wait for) and backends without events. */
int pyxbuf__record_event(const pyxbuf_device *target, int64_t stream, void **event,
                         pyxbuf_error *err) {
    pyxbuf_backend tb;
    *event = NULL;
    int rc = pyxbuf_backend_get(target->device_type, &tb, err);
    if (rc < 0 || tb.event_record == NULL || pyxbuf__host_accessible(target->device_type))
        return rc;
    return tb.event_record(tb.ctx, target->device_id, stream, event, err);
}
