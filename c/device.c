/* device.c -- device identifiers, the backend registry, and the Array API's
 * device semantics on top of it: same-device checks, waits, copies to the host
 * and pyxbuf_to_device. Backends register themselves (c/backends.c lists the
 * built-in ones); nothing here knows a backend by name. */

#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Identifiers and devices                                                   */
/* ------------------------------------------------------------------------- */

/* Identifiers are unique strings: equal pointers are the common case, equal
 * content the fallback. NULL and the reserved "cpu" both mean the host. */
int pyxbuf_device_equal(const char *a, const char *b) {
    if (a == b) return 1;
    if (a != NULL && strcmp(a, PYXBUF_DEVICE_CPU) == 0) a = NULL;
    if (b != NULL && strcmp(b, PYXBUF_DEVICE_CPU) == 0) b = NULL;
    if (a == NULL || b == NULL) return a == b;
    return strcmp(a, b) == 0;
}

/* The proposal's device identifiers are NUL-terminated UTF-8 strings. Strict
 * UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF. Returns -1 when `id` is valid, else the offset of the first byte
 * of the bad sequence. Identifiers longer than PYXBUF__DEVICE_ID_MAX are
 * refused at that offset: a producer's id is a short name, and the bound
 * keeps a missing NUL from walking off into memory. */
int64_t pyxbuf__device_id_invalid_at(const char *id) {
    const unsigned char *s = (const unsigned char *)id;
    size_t i = 0;
    while (s[i] != 0) {
        if (i >= PYXBUF__DEVICE_ID_MAX) return (int64_t)i;
        unsigned c = s[i];
        size_t n;
        unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c < 0x80) n = 0;
        else if (c >= 0xC2 && c <= 0xDF) n = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) lo = 0xA0;  /* overlong */
            if (c == 0xED) hi = 0x9F;  /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) lo = 0x90;  /* overlong */
            if (c == 0xF4) hi = 0x8F;  /* above U+10FFFF */
        } else
            return (int64_t)i;
        for (size_t k = 1; k <= n; k++) {
            unsigned b = s[i + k];
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return (int64_t)i;
        }
        i += n + 1;
    }
    return i == 0 ? 0 : -1; /* "" names nothing */
}

int pyxbuf_device_same(const pyxbuf_device *a, const pyxbuf_device *b) {
    return a->device_type == b->device_type && a->device_id == b->device_id;
}

const char *pyxbuf_device_type_name(int32_t device_type) {
    switch (device_type) {
    case PYXBUF_DL_CPU: return "cpu";
    case PYXBUF_DL_CUDA: return "cuda";
    case PYXBUF_DL_CUDA_HOST: return "cuda_host";
    case PYXBUF_DL_OPENCL: return "opencl";
    case PYXBUF_DL_VULKAN: return "vulkan";
    case PYXBUF_DL_METAL: return "metal";
    case PYXBUF_DL_VPI: return "vpi";
    case PYXBUF_DL_ROCM: return "rocm";
    case PYXBUF_DL_ROCM_HOST: return "rocm_host";
    case PYXBUF_DL_EXT_DEV: return "ext_dev";
    case PYXBUF_DL_CUDA_MANAGED: return "cuda_managed";
    case PYXBUF_DL_ONEAPI: return "oneapi";
    case PYXBUF_DL_WEBGPU: return "webgpu";
    case PYXBUF_DL_HEXAGON: return "hexagon";
    case PYXBUF_DL_MAIA: return "maia";
    default: return "unknown";
    }
}

int pyxbuf_device_format(const pyxbuf_device *device, char *buf, size_t cap) {
    int n = device->device_type == PYXBUF_DL_CPU
                ? snprintf(buf, cap, "cpu")
                : snprintf(buf, cap, "%s:%d", pyxbuf_device_type_name(device->device_type),
                           (int)device->device_id);
    if (n < 0 || (size_t)n >= cap) return PYXBUF_ENOSPACE;
    return n;
}

/* Memory the host may dereference: plain host memory, and the pinned and
 * managed kinds DLPack names. */
static int host_accessible(int32_t device_type) {
    return device_type == PYXBUF_DL_CPU || device_type == PYXBUF_DL_CUDA_HOST ||
           device_type == PYXBUF_DL_ROCM_HOST;
}

/* ------------------------------------------------------------------------- */
/* The backend registry                                                      */
/* ------------------------------------------------------------------------- */

#define MAX_DEVICE_TYPES 64

static pyxbuf_backend backends[MAX_DEVICE_TYPES];
static int backend_present[MAX_DEVICE_TYPES];
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

static void register_builtins(void) { pyxbuf__register_builtin_backends(); }

static int check_backend(const pyxbuf_backend *b, pyxbuf_error *err) {
    if (b == NULL || b->size < offsetof(pyxbuf_backend, reserved))
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: backend is NULL or its size %u is too "
                             "small; set size = sizeof(pyxbuf_backend)",
                             b ? (unsigned)b->size : 0u);
    if (b->device_type < 1 || b->device_type >= MAX_DEVICE_TYPES)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: device type %d is outside 1..%d",
                             (int)b->device_type, MAX_DEVICE_TYPES - 1);
    if (!b->copy_to_host || !b->copy_from_host || !b->alloc || !b->free || !b->pointer_query)
        return pyxbuf__error(err, PYXBUF_EINVAL, -1,
                             "pyxbuf_backend_register: backend '%s' lacks copy_to_host, "
                             "copy_from_host, alloc, free or pointer_query",
                             b->name ? b->name : "?");
    return 0;
}

/* Registration without the built-ins' once-guard, for the built-ins. */
int pyxbuf__backend_register_raw(const pyxbuf_backend *backend) {
    if (check_backend(backend, NULL) < 0) return PYXBUF_EINVAL;
    pthread_mutex_lock(&registry_lock);
    memset(&backends[backend->device_type], 0, sizeof(pyxbuf_backend));
    size_t n = backend->size < sizeof(pyxbuf_backend) ? backend->size : sizeof(pyxbuf_backend);
    memcpy(&backends[backend->device_type], backend, n);
    backends[backend->device_type].size = (uint32_t)sizeof(pyxbuf_backend);
    backend_present[backend->device_type] = 1;
    pthread_mutex_unlock(&registry_lock);
    return 0;
}

int pyxbuf_backend_register(const pyxbuf_backend *backend, pyxbuf_error *err) {
    pthread_once(&builtins_once, register_builtins);
    if (check_backend(backend, err) < 0) return PYXBUF_EINVAL;
    return pyxbuf__backend_register_raw(backend);
}

int pyxbuf_backend_unregister(int32_t device_type) {
    pthread_once(&builtins_once, register_builtins);
    if (device_type < 1 || device_type >= MAX_DEVICE_TYPES) return PYXBUF_EINVAL;
    pthread_mutex_lock(&registry_lock);
    int was = backend_present[device_type];
    backend_present[device_type] = 0;
    pthread_mutex_unlock(&registry_lock);
    return was ? 0 : PYXBUF_EINVAL;
}

int pyxbuf_backend_get(int32_t device_type, pyxbuf_backend *out, pyxbuf_error *err) {
    pthread_once(&builtins_once, register_builtins);
    int found = 0;
    pthread_mutex_lock(&registry_lock);
    if (device_type >= 1 && device_type < MAX_DEVICE_TYPES && backend_present[device_type]) {
        *out = backends[device_type];
        found = 1;
    }
    pthread_mutex_unlock(&registry_lock);
    if (found) return 0;
    return pyxbuf__error(err, PYXBUF_EUNSUPPORTED, -1,
                         "no pyxbuf backend for device type %d (%s) is registered; register one "
                         "with pyxbuf_backend_register or copy the data to the host where it "
                         "lives",
                         (int)device_type, pyxbuf_device_type_name(device_type));
}

int pyxbuf__backend_find_pointer(const void *ptr, pyxbuf_device *device, pyxbuf_backend *backend,
                                 pyxbuf_error *err) {
    pthread_once(&builtins_once, register_builtins);
    char tried[PYXBUF_ERROR_MESSAGE_SIZE] = "";
    size_t used = 0;
    /* CUDA first: it is what foreign device pointers almost always are. */
    int32_t order[MAX_DEVICE_TYPES];
    int32_t n = 0;
    order[n++] = PYXBUF_DL_CUDA;
    for (int32_t t = 1; t < MAX_DEVICE_TYPES; t++)
        if (t != PYXBUF_DL_CUDA && t != PYXBUF_DL_CPU) order[n++] = t;
    for (int32_t i = 0; i < n; i++) {
        pyxbuf_error why;
        if (pyxbuf_backend_get(order[i], backend, NULL) < 0) continue;
        if (backend->pointer_query(backend->ctx, ptr, device, &why) == 0) return 0;
        int w = snprintf(tried + used, sizeof tried - used, "%s%s: %.120s", used ? "; " : "",
                         backend->name ? backend->name : "?", why.message);
        if (w > 0 && (size_t)w < sizeof tried - used) used += (size_t)w;
    }
    return pyxbuf__error(err, PYXBUF_EDEVICE, -1,
                         "no registered device backend knows pointer %p (%s)", ptr,
                         used ? tried : "no device backend is registered");
}

/* ------------------------------------------------------------------------- */
/* The CPU backend                                                           */
/* ------------------------------------------------------------------------- */

static int cpu_copy(void *ctx, int32_t id, void *dst, const void *src, size_t n, int64_t stream,
                    pyxbuf_error *err) {
    (void)ctx, (void)id, (void)stream, (void)err;
    if (n) memmove(dst, src, n);
    return 0;
}

static int cpu_copy_on_device(void *ctx, int32_t dst_id, void *dst, int32_t src_id,
                              const void *src, size_t n, int64_t stream, pyxbuf_error *err) {
    (void)src_id;
    return cpu_copy(ctx, dst_id, dst, src, n, stream, err);
}

static int cpu_alloc(void *ctx, int32_t id, size_t n, void **ptr, pyxbuf_error *err) {
    (void)ctx, (void)id;
    size_t rounded = ((n ? n : 1) + 63) & ~(size_t)63; /* aligned_alloc wants a multiple */
    *ptr = aligned_alloc(64, rounded);
    if (*ptr == NULL)
        return pyxbuf__error(err, PYXBUF_ENOMEM, -1, "cannot allocate %zu bytes of host memory",
                             n);
    memset(*ptr, 0, rounded);
    return 0;
}

static int cpu_free(void *ctx, int32_t id, void *ptr, pyxbuf_error *err) {
    (void)ctx, (void)id, (void)err;
    free(ptr);
    return 0;
}

static int cpu_pointer_query(void *ctx, const void *ptr, pyxbuf_device *device,
                             pyxbuf_error *err) {
    (void)ctx, (void)ptr, (void)err;
    device->device_type = PYXBUF_DL_CPU;
    device->device_id = 0;
    return 0;
}

const pyxbuf_backend *pyxbuf__cpu_backend(void) {
    static const pyxbuf_backend cpu = {
        .size = sizeof(pyxbuf_backend),
        .device_type = PYXBUF_DL_CPU,
        .name = "cpu",
        .copy_to_host = cpu_copy,
        .copy_from_host = cpu_copy,
        .copy_on_device = cpu_copy_on_device,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .pointer_query = cpu_pointer_query,
    };
    return &cpu;
}

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

#define MUL_OK(a, b, r) (!__builtin_mul_overflow((a), (b), (r)))
#define ADD_OK(a, b, r) (!__builtin_add_overflow((a), (b), (r)))
#define SUB_OK(a, b, r) (!__builtin_sub_overflow((a), (b), (r)))

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
        if (!strides && !MUL_OK(expected, n, &expected)) return -1;
        if (!MUL_OK(s, n - 1, &extent)) return -1;
        if (!(extent < 0 ? ADD_OK(lo, extent, &lo) : ADD_OK(hi, extent, &hi))) return -1;
    }
    /* hi - lo, not hi + -lo: lo may be PY_SSIZE_T_MIN, whose negation overflows. */
    if (!ADD_OK(hi, itemsize, &hi) || !SUB_OK(hi, lo, &expected)) return -1;
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
        l.ok = MUL_OK(l.count, n, &l.count) && MUL_OK(expected, n, &expected);
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
    if (off >= 0) return !__builtin_add_overflow(base, (uintptr_t)off, out);
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
    return pyxbuf_view_device(view, &d, NULL) == 0 && host_accessible(d.device_type);
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
    if (!l.ok || !MUL_OK(l.count, view->base.itemsize, &want) || want != view->base.len) {
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
        if (rc == 0 && host_accessible(d.device_type)) {
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
    int src_host = host_accessible(src->device_type);
    if (view->device != NULL && (rc = pyxbuf_backend_get(src->device_type, &sb, err)) < 0)
        return rc;
    if ((rc = pyxbuf_backend_get(target->device_type, &tb, err)) < 0) return rc;
    /* Wait for the producer, also when its memory is host-accessible (pinned). */
    if (view->device != NULL && (rc = wait_event(&sb, view, stream, err)) < 0) return rc;
    if (view->device != NULL && src_host && sb.synchronize &&
        (rc = sb.synchronize(sb.ctx, src->device_id, stream, err)) < 0)
        return rc;
    if (host_accessible(target->device_type)) {
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
    if (rc < 0 || tb.event_record == NULL || host_accessible(target->device_type)) return rc;
    return tb.event_record(tb.ctx, target->device_id, stream, event, err);
}
