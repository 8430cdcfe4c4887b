/* fuzz_common.h -- what the fuzz targets share: a checked reader of the input
 * bytes, a failing check that aborts (so libFuzzer records the input), an
 * embedded interpreter with the emulated device, and a reference gather that
 * says what a view's items must be.
 *
 * Each target defines LLVMFuzzerTestOneInput; built with clang's
 * -fsanitize=fuzzer it is a libFuzzer binary (`make fuzz`), built with
 * replay_main.c it runs a corpus once (CTest, the regression corpus). */
#ifndef PYXBUF_FUZZ_COMMON_H
#define PYXBUF_FUZZ_COMMON_H

#include "pyxbuf.h"
#include "device/emulated.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant is a finding: say which and abort. */
#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            if (PyErr_Occurred()) PyErr_Print();                               \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* What the inputs led to, printed by the replay driver so that a corpus
 * that never reaches an acquisition or a copy shows. Each target defines it. */
typedef struct fuzz_outcome_counts {
    long accepted, compared, refused; /* compared: copies (bridges), struct sizes (format) */
} fuzz_outcome_counts;
extern fuzz_outcome_counts fuzz_outcomes;

/* Little-endian fields from the input; bytes past its end read as zero, so
 * every input decodes to something. */
typedef struct fuzz_reader {
    const uint8_t *p;
    size_t left;
} fuzz_reader;

static inline uint64_t fuzz_take(fuzz_reader *r, size_t nbytes) {
    uint64_t v = 0;
    for (size_t i = 0; i < nbytes; i++) {
        uint64_t byte = 0;
        if (r->left > 0) {
            byte = *r->p++;
            r->left--;
        }
        v |= byte << (8 * i);
    }
    return v;
}

static inline uint8_t fuzz_u8(fuzz_reader *r) { return (uint8_t)fuzz_take(r, 1); }
static inline uint16_t fuzz_u16(fuzz_reader *r) { return (uint16_t)fuzz_take(r, 2); }
static inline uint32_t fuzz_u32(fuzz_reader *r) { return (uint32_t)fuzz_take(r, 4); }
static inline int32_t fuzz_i32(fuzz_reader *r) { return (int32_t)fuzz_u32(r); }
static inline uint64_t fuzz_u64(fuzz_reader *r) { return fuzz_take(r, 8); }
static inline int64_t fuzz_i64(fuzz_reader *r) { return (int64_t)fuzz_u64(r); }

/* ------------------------------------------------------------------------- */
/* The interpreter and the memory views may point into                       */
/* ------------------------------------------------------------------------- */

/* FUZZ_REGION bytes on the host (malloc'd: ASan's redzones catch a read past
 * either end) and the same bytes on emulated device 0, both filled with a
 * known pattern; `mirror` is the host copy the reference gather reads for
 * either. */
#define FUZZ_REGION 4096

typedef struct fuzz_memory {
    unsigned char *host;
    unsigned char *mirror;
    PyObject *device_exporter; /* owns the device allocation */
    char *device;              /* its device address (never dereferenced here) */
} fuzz_memory;

static fuzz_memory fuzz_mem;

static inline void fuzz_start_python(void) {
    if (Py_IsInitialized()) return;
#ifndef Py_GIL_DISABLED
    /* Python's own allocator would hide heap errors from ASan. Free-threaded
     * builds refuse it ("unknown allocator"): they need mimalloc. */
    setenv("PYTHONMALLOC", "malloc", 0);
#endif
    Py_InitializeEx(0);
    pyxbuf_error err;
    FUZZ_CHECK(pyxbuf_emulated_register(&err) == 0, "emulated device: %s", err.message);

    fuzz_mem.host = malloc(FUZZ_REGION);
    fuzz_mem.mirror = malloc(FUZZ_REGION);
    FUZZ_CHECK(fuzz_mem.host && fuzz_mem.mirror, "out of memory");
    for (size_t i = 0; i < FUZZ_REGION; i++)
        fuzz_mem.host[i] = fuzz_mem.mirror[i] = (unsigned char)(i * 131u + 7u);

    /* The device copy: a host exporter of the pattern moved to the device. */
    Py_ssize_t n = FUZZ_REGION;
    PyObject *src = pyxbuf_exporter_new("B", 1, &n, 0, NULL);
    FUZZ_CHECK(src != NULL, "host exporter");
    memcpy(pyxbuf_exporter_data(src), fuzz_mem.mirror, FUZZ_REGION);
    pyxbuf_view v;
    FUZZ_CHECK(pyxbuf_get(src, &v, PyBUF_RECORDS_RO) == 0, "view of the host exporter");
    pyxbuf_device dev = {PYXBUF_DL_EXT_DEV, 0};
    fuzz_mem.device_exporter = pyxbuf_to_device(&v, &dev, 0);
    pyxbuf_release(&v);
    Py_DECREF(src);
    FUZZ_CHECK(fuzz_mem.device_exporter != NULL, "device copy of the pattern");
    fuzz_mem.device = pyxbuf_exporter_data(fuzz_mem.device_exporter);
    FUZZ_CHECK(fuzz_mem.device != NULL, "device address");
}

/* ------------------------------------------------------------------------- */
/* The reference: what a view's items must be                                */
/* ------------------------------------------------------------------------- */

/* The byte span [lo, hi) the view's items touch relative to buf, computed
 * here independently of pyxbuf; 0 when it overflows or there are no items. */
static inline int fuzz_span(const Py_buffer *b, int64_t *lo, int64_t *hi) {
    int64_t low = 0, high = b->itemsize;
    for (int i = 0; i < b->ndim; i++) {
        int64_t extent = b->shape[i];
        if (extent == 0) return 0;
        int64_t stride = b->strides ? b->strides[i] : 0, reach;
        if (__builtin_mul_overflow(stride, extent - 1, &reach)) return 0;
        if (reach < 0 ? __builtin_add_overflow(low, reach, &low)
                      : __builtin_add_overflow(high, reach, &high))
            return 0;
    }
    *lo = low;
    *hi = high;
    return 1;
}

/* Gather the view's items in C order from `mirror` (the host copy of memory
 * that starts at `region`) into out. */
static inline void fuzz_gather(const Py_buffer *b, const char *region, const unsigned char *mirror,
                               unsigned char *out) {
    Py_ssize_t index[PYXBUF_MAX_NDIM] = {0};
    size_t item = (size_t)b->itemsize, done = 0, total = (size_t)b->len;
    while (done < total) {
        int64_t offset = (int64_t)((const char *)b->buf - region);
        for (int i = 0; i < b->ndim; i++) offset += index[i] * b->strides[i];
        memcpy(out + done, mirror + offset, item);
        done += item;
        for (int i = b->ndim - 1; i >= 0; i--) {
            if (++index[i] < b->shape[i]) break;
            index[i] = 0;
        }
    }
}

/* When the view's items lie inside fuzz_mem's host or device region (and are
 * few enough to copy quickly), pyxbuf_copy_to_host must give exactly what the
 * reference gather gives. Views elsewhere (raw pointers the input chose)
 * are not read: the producer lied, and no consumer could know. */
static inline void fuzz_check_copy(const pyxbuf_view *v) {
    const Py_buffer *b = &v->base;
    const char *region = v->device == NULL ? (const char *)fuzz_mem.host : fuzz_mem.device;
    int64_t lo = 0, hi = 0;
    if (b->len <= 0 || b->len > (1 << 16) || b->strides == NULL || b->buf == NULL ||
        !fuzz_span(b, &lo, &hi))
        return;
    uintptr_t offset = (uintptr_t)b->buf - (uintptr_t)region;
    int64_t first, end;
    if ((uintptr_t)b->buf < (uintptr_t)region || offset > FUZZ_REGION ||
        __builtin_add_overflow((int64_t)offset, lo, &first) || first < 0 ||
        __builtin_add_overflow((int64_t)offset, hi, &end) || end > FUZZ_REGION)
        return;
    unsigned char *want = malloc((size_t)b->len), *got = malloc((size_t)b->len);
    FUZZ_CHECK(want && got, "out of memory");
    fuzz_gather(b, region, fuzz_mem.mirror, want);
    FUZZ_CHECK(pyxbuf_copy_to_host(v, got, (size_t)b->len) == 0, "copy of a view in bounds");
    FUZZ_CHECK(memcmp(want, got, (size_t)b->len) == 0, "copied items differ from the reference");
    fuzz_outcomes.compared++;
    free(want);
    free(got);
}

/* The classic fields of an acquired view agree with each other and with its
 * format. */
static inline void fuzz_check_view(const pyxbuf_view *v, int32_t flags) {
    const Py_buffer *b = &v->base;
    fuzz_outcomes.accepted++;
    FUZZ_CHECK(pyxbuf_view_is_acquired(v), "acquired view not marked acquired");
    FUZZ_CHECK(b->ndim >= 0 && b->ndim <= PYXBUF_MAX_NDIM, "ndim %d", b->ndim);
    FUZZ_CHECK(b->itemsize > 0, "itemsize %zd", b->itemsize);
    Py_ssize_t count = 1;
    if ((flags & PyBUF_ND) == PyBUF_ND) {
        FUZZ_CHECK(b->shape != NULL || b->ndim == 0, "ND request without a shape");
        for (int i = 0; i < b->ndim; i++) {
            FUZZ_CHECK(b->shape[i] >= 0, "shape[%d] = %zd", i, b->shape[i]);
            FUZZ_CHECK(!__builtin_mul_overflow(count, b->shape[i], &count), "count overflows");
        }
        FUZZ_CHECK(b->len == count * b->itemsize, "len %zd != %zd * %zd", b->len, count,
                   b->itemsize);
    }
    FUZZ_CHECK(!(flags & PyBUF_WRITABLE) || !b->readonly,
               "writable request answered with read-only memory");
    if ((flags & PyBUF_FORMAT) == PyBUF_FORMAT) {
        FUZZ_CHECK(b->format != NULL, "FORMAT request without a format");
        int64_t itemsize = 0;
        pyxbuf_error err;
        int rc = pyxbuf_format_itemsize(b->format, &itemsize, NULL, &err);
        FUZZ_CHECK(rc == 0 || rc == PYXBUF_EUNSUPPORTED, "view format '%s': %s", b->format,
                   err.message);
        /* ml_dtypes' sub-byte types are stored one per byte */
        FUZZ_CHECK(rc != 0 || itemsize == b->itemsize, "format '%s' is %lld bytes, view says %zd",
                   b->format, (long long)itemsize, b->itemsize);
    }
    FUZZ_CHECK((v->device != NULL) == ((v->flags & PYXBUF_DEVICE) != 0),
               "device field and PYXBUF_DEVICE bit disagree");
    FUZZ_CHECK(v->device == NULL || (flags & PYXBUF_DEVICE), "device memory without PYXBUF_DEVICE");
}

/* A refusal is an ordinary exception with a message, never SystemError (a C
 * API misuse) or a missing exception. */
static inline void fuzz_check_refusal(void) {
    fuzz_outcomes.refused++;
    FUZZ_CHECK(PyErr_Occurred() != NULL, "failure without an exception");
    FUZZ_CHECK(!PyErr_ExceptionMatches(PyExc_SystemError), "SystemError");
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    FUZZ_CHECK(text != NULL && PyUnicode_GetLength(text) > 0, "an exception without a message");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

#endif
