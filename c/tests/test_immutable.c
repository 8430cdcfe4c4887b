/* test_immutable.c -- acquire/immutable.c's range check, brute-forced.
 *
 * An enforced shared grant rests on one test: every byte the view's items
 * touch lies inside the exact bytes object its read-only chain ends in. A
 * producer may lie (any buf, shape and strides under a chain that ends in
 * bytes), so the check must hold for every layout, negative, zero and huge
 * strides included, without wrapping. Here it is compared, layout by
 * layout, with the definition itself: every item's address computed in
 * 128-bit integers (no product can wrap) and checked against the object's
 * storage. The layouts are those validation lets through
 * (acquire/validate.c runs first: itemsize at least 1, shapes not negative,
 * len the product of shape and itemsize), over every stride a producer may
 * give. Linked statically: the check is hidden in the library. */
#include "python_fixture.h"
#include "acquire/immutable.h"

#include <stdint.h>

#define STORAGE 48 /* bytes in the object */

typedef __int128 wide;

/* The definition: items (or, with none, the pointer) inside [start, end). */
static int expected_within(wide start, wide end, const Py_buffer *b) {
    wide buf = (wide)(uintptr_t)b->buf;
    if (b->suboffsets != NULL) return 0; /* pointers to other memory: never believed */
    if (b->shape == NULL) /* one flat block of len bytes */
        return b->len == 0 ? buf >= start && buf <= end
                           : buf >= start && buf + b->len <= end;
    wide count = 1;
    for (int i = 0; i < b->ndim; i++) count *= b->shape[i];
    if (count == 0) return buf >= start && buf <= end;
    Py_ssize_t index[3] = {0, 0, 0};
    for (wide k = 0; k < count; k++) {
        wide at = buf;
        for (int i = 0; i < b->ndim; i++) {
            wide stride = b->strides != NULL ? (wide)b->strides[i] : 0;
            if (b->strides == NULL) { /* C order, as the producer's shape says */
                stride = b->itemsize;
                for (int j = i + 1; j < b->ndim; j++) stride *= b->shape[j];
            }
            at += (wide)index[i] * stride;
        }
        if (at < start || at + b->itemsize > end) return 0;
        for (int d = b->ndim - 1; d >= 0 && ++index[d] == b->shape[d]; d--) index[d] = 0;
    }
    return 1;
}

typedef struct sweep {
    pyxbuf_view view;
    PyObject *bytes;
    wide start, end;
    long cases, granted, mismatches;
} sweep;

static void check_one(sweep *s) {
    int got = pyxbuf__immutable_memory(&s->view);
    int want = expected_within(s->start, s->end, &s->view.base);
    s->cases++;
    s->granted += got;
    if (got != want && s->mismatches++ < 10) {
        const Py_buffer *b = &s->view.base;
        fprintf(stderr,
                "mismatch: buf=start%+lld itemsize=%zd ndim=%d shape=(%zd,%zd,%zd) "
                "strides=%s(%zd,%zd,%zd): checked %d, defined %d\n",
                (long long)((wide)(uintptr_t)b->buf - s->start), b->itemsize, b->ndim,
                b->ndim > 0 ? b->shape[0] : 0, b->ndim > 1 ? b->shape[1] : 0,
                b->ndim > 2 ? b->shape[2] : 0, b->strides ? "" : "C",
                b->strides && b->ndim > 0 ? b->strides[0] : 0,
                b->strides && b->ndim > 1 ? b->strides[1] : 0,
                b->strides && b->ndim > 2 ? b->strides[2] : 0, got, want);
    }
}

/* Offsets of buf from the storage's start: every byte around it, and far
 * outside it both ways (no wrap may bring those back in). */
static const long long offsets[] = {
    -(1LL << 62), -4096, -9, -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
    10, 11, 12, 15, 16, 17, 20, 23, 24, 25, 30, 31, 32, 33, 36, 39, 40, 41, 44, 45, 46, 47,
    48, 49, 50, 56, 4096, 1LL << 62};
#define NOFFSETS (sizeof offsets / sizeof *offsets)

static const Py_ssize_t itemsizes[] = {1, 2, 3, 8, 48, 49};
#define NITEMSIZES (sizeof itemsizes / sizeof *itemsizes)

/* Strides as multiples of the itemsize, odd ones, and huge ones whose
 * products overflow Py_ssize_t. */
static Py_ssize_t stride_choice(int k, Py_ssize_t itemsize) {
    switch (k) {
    case 0: return 0;
    case 1: return itemsize;
    case 2: return -itemsize;
    case 3: return 2 * itemsize;
    case 4: return -3 * itemsize;
    case 5: return 5;
    case 6: return PY_SSIZE_T_MAX / 2 + 1;
    default: return PY_SSIZE_T_MIN;
    }
}
#define NSTRIDES 8

static void sweep_layouts(sweep *s, Py_ssize_t itemsize, int ndim) {
    Py_buffer *b = &s->view.base;
    Py_ssize_t shape[3], strides[3];
    b->itemsize = itemsize;
    b->ndim = ndim;
    b->shape = ndim > 0 ? shape : NULL;
    int shapes = 1, stride_sets = 1;
    for (int i = 0; i < ndim; i++) shapes *= 4, stride_sets *= NSTRIDES;
    for (int sh = 0; sh < shapes; sh++) {
        for (int i = 0, r = sh; i < ndim; i++, r /= 4) shape[i] = r % 4; /* 0..3 */
        Py_ssize_t count = 1;
        for (int i = 0; i < ndim; i++) count *= shape[i];
        b->len = count * itemsize;
        for (int st = -1; st < stride_sets; st++) { /* -1: no strides (C order) */
            b->strides = st < 0 ? NULL : strides;
            for (int i = 0, r = st; st >= 0 && i < ndim; i++, r /= NSTRIDES)
                strides[i] = stride_choice(r % NSTRIDES, itemsize);
            for (size_t o = 0; o < NOFFSETS; o++) {
                b->buf = (char *)(uintptr_t)(s->start + offsets[o]);
                check_one(s);
            }
            if (ndim == 0) break; /* strides mean nothing without dimensions */
        }
    }
}

TEST_CASE(the_range_check_matches_its_definition_on_every_layout) {
    sweep s;
    memset(&s, 0, sizeof s);
    s.bytes = PyBytes_FromStringAndSize(NULL, STORAGE);
    CHECK(s.bytes != NULL);
    s.start = (wide)(uintptr_t)PyBytes_AS_STRING(s.bytes);
    s.end = s.start + STORAGE;
    s.view.base.obj = s.bytes;
    s.view.base.readonly = 1;
    for (size_t k = 0; k < NITEMSIZES; k++)
        for (int ndim = 0; ndim <= 3; ndim++) sweep_layouts(&s, itemsizes[k], ndim);

    /* Flat views (no shape): every length from every offset. */
    s.view.base.shape = NULL;
    s.view.base.strides = NULL;
    s.view.base.ndim = 1;
    s.view.base.itemsize = 1;
    for (size_t o = 0; o < NOFFSETS; o++)
        for (Py_ssize_t len = 0; len <= STORAGE + 2; len++) {
            s.view.base.buf = (char *)(uintptr_t)(s.start + offsets[o]);
            s.view.base.len = len;
            check_one(&s);
        }

    fprintf(stderr, "%ld layouts, %ld granted, %ld mismatches\n", s.cases, s.granted,
            s.mismatches);
    CHECK_INT_EQ(s.mismatches, 0);
    CHECK(s.cases > 1000000);
    CHECK(s.granted > 10000 && s.cases - s.granted > 10000); /* both answers exercised */

    /* What comes before the range check: suboffsets, a writable or device
     * view, an object that is not exact bytes. */
    Py_ssize_t shape[1] = {4}, strides[1] = {1}, suboffsets[1] = {0};
    s.view.base = (Py_buffer){.buf = PyBytes_AS_STRING(s.bytes), .obj = s.bytes, .len = 4,
                              .itemsize = 1, .readonly = 1, .ndim = 1, .shape = shape,
                              .strides = strides};
    CHECK_INT_EQ(pyxbuf__immutable_memory(&s.view), 1);
    s.view.base.suboffsets = suboffsets;
    CHECK_INT_EQ(pyxbuf__immutable_memory(&s.view), 0);
    s.view.base.suboffsets = NULL;
    s.view.base.readonly = 0;
    CHECK_INT_EQ(pyxbuf__immutable_memory(&s.view), 0);
    s.view.base.readonly = 1;
    s.view.device = "ext_dev:0";
    CHECK_INT_EQ(pyxbuf__immutable_memory(&s.view), 0);
    s.view.device = NULL;
    PyObject *array = PyByteArray_FromStringAndSize(PyBytes_AS_STRING(s.bytes), STORAGE);
    s.view.base.obj = array;
    s.view.base.buf = PyByteArray_AS_STRING(array);
    CHECK_INT_EQ(pyxbuf__immutable_memory(&s.view), 0);
    Py_DECREF(array);
    Py_DECREF(s.bytes);
}

PYTHON_TEST_MAIN(TEST_ENTRY(the_range_check_matches_its_definition_on_every_layout))
