/* validate.c -- what pyxbuf_get checks in a producer's answer before handing
 * it on: the classic fields a consumer relies on, the layout of a native
 * producer's view, and the extended fields (flags set only when requested,
 * grants backed by their request bits, a device identifier that is one, a
 * device pointer its backend recognises). A refused answer is released and
 * reported as BufferError naming the producer's type and the broken rule. */

#include "acquire/acquire.h"

#include <stdio.h>
#include <string.h>

/* Undo a producer's answer that pyxbuf refuses, then raise BufferError. */
static int refuse_answer(pyxbuf_view *view, PyObject *obj, const char *reason, int32_t bits) {
    PyBuffer_Release(&view->base);
    reset_view(view, view->requested);
    char names[256];
    pyxbuf__flag_names(bits, names, sizeof names);
    PyErr_Format(PyExc_BufferError,
                 "pyxbuf: the buffer of '%.200s' is invalid: %s (%s); the producer breaks the "
                 "extended buffer protocol and must be fixed",
                 PYXBUF__TYPE_NAME(obj), reason, names);
    return -1;
}

/* The grants a producer may give for the extended flags it was passed. An
 * exclusive request may be answered with the weaker shared grant, and any
 * grant may be marked TRACKED (weaker still: a wrapper of tracked memory). */
static int32_t allowed_grants(int32_t passed) {
    int32_t allowed = 0;
    if (passed & PYXBUF_BORROW_SHARED) allowed |= PYXBUF_EXT_SHARED | PYXBUF_EXT_TRACKED;
    if (passed & PYXBUF_BORROW_EXCLUSIVE)
        allowed |= PYXBUF_EXT_SHARED | PYXBUF_EXT_EXCLUSIVE | PYXBUF_EXT_TRACKED;
    return allowed;
}

/* A "pyxbuf.dlpack" device view names its device in device_info; when pyxbuf
 * has a backend for that device, the backend must agree that the pointer is
 * memory of that very device before pyxbuf hands it on. */
static int validate_device_pointer(pyxbuf_view *view, PyObject *obj) {
    if (!pyxbuf_device_equal(view->device, PYXBUF_DEVICE_DLPACK)) return 0;
    const pyxbuf_device_info *info = view->device_info;
    if (info == NULL || info->size < offsetof(pyxbuf_device_info, reserved))
        return refuse_answer(view, obj, "its \"" PYXBUF_DEVICE_DLPACK "\" device has no valid "
                             "pyxbuf_device_info", view->flags);
    pyxbuf_backend b;
    if (pyxbuf_backend_get(info->device_type, &b, NULL) < 0) return 0;
    Py_ssize_t lo = 0, hi = 0;
    if (pyxbuf__view_span(&view->base, &lo, &hi) < 0)
        return refuse_answer(view, obj, "its shape and strides overflow", view->flags);
    pyxbuf_device claimed = {info->device_type, info->device_id};
    pyxbuf_error err;
    if (pyxbuf__check_device_span(&b, view->base.buf, lo, hi, &claimed, &err) == 0) return 0;
    return refuse_answer(view, obj, err.message, view->flags);
}

/* The device identifier must be a non-empty UTF-8 string and not "cpu". */
static int validate_device_id(pyxbuf_view *view, PyObject *obj) {
    int64_t bad = pyxbuf__device_id_invalid_at(view->device);
    if (PYXBUF_UNLIKELY(bad >= 0)) {
        char why[160];
        unsigned char c = (unsigned char)view->device[bad];
        if (c == 0)
            snprintf(why, sizeof why, "its device identifier is empty");
        else if (strnlen(view->device, PYXBUF__DEVICE_ID_MAX + 1) > PYXBUF__DEVICE_ID_MAX)
            snprintf(why, sizeof why, "its device identifier is longer than %d bytes",
                     PYXBUF__DEVICE_ID_MAX);
        else
            snprintf(why, sizeof why,
                     "its device identifier is not valid UTF-8 (byte 0x%02X at position %lld)",
                     c, (long long)bad);
        return refuse_answer(view, obj, why, view->flags);
    }
    if (strcmp(view->device, PYXBUF_DEVICE_CPU) == 0)
        return refuse_answer(view, obj, "it named the reserved device \"cpu\" (NULL means CPU)",
                             view->flags);
    return 0;
}

/* The proposal: a consumer reads no extended field whose bit in `flags` is
 * clear, so a producer that fills one without its bit broke the protocol --
 * pyxbuf refuses the view rather than guess which half to believe. */
int pyxbuf__validate_extended(pyxbuf_view *view, PyObject *obj, int32_t passed) {
    int32_t passed_ext = passed & ~CLASSIC_RANGE; /* newer bits included */
    if (view->flags & ~passed_ext)
        return refuse_answer(view, obj, "it set extended flags that were not requested",
                             view->flags & ~passed_ext);
    if (view->device != NULL && !(view->flags & PYXBUF_DEVICE))
        return refuse_answer(view, obj, "it set a device without setting PYXBUF_DEVICE in flags",
                             view->flags);
    if (view->device_info != NULL && !(view->flags & PYXBUF_DEVICE))
        return refuse_answer(view, obj,
                             "it set device_info without setting PYXBUF_DEVICE in flags",
                             view->flags);
    /* PYXBUF_DEVICE with device NULL is CPU memory: the proposal allows NULL. */
    if (view->device != NULL && validate_device_id(view, obj) < 0) return -1;
    /* ext_flags bits pyxbuf does not define belong to an extended flag it
     * does not know (a backported one): allowed when such a flag was passed,
     * as CPython's PyObject_GetBuffer allows them (cpython/ 0003). */
    int32_t foreign = (passed_ext & ~PYXBUF_EXTENDED_FLAGS) ? ~PYXBUF_EXT_ALL : 0;
    int32_t allowed = allowed_grants(passed) | foreign;
    if (view->ext_flags & ~allowed)
        return refuse_answer(view, obj, "it granted a borrow that was not requested (ext_flags)",
                             passed_ext);
    /* A grant counts only with its request bit in `flags` (counter.c's grant()
     * sets both): EXCLUSIVE needs BORROW_EXCLUSIVE, SHARED either borrow bit. */
    int32_t backed = allowed_grants(view->flags) | foreign;
    if (view->ext_flags & ~backed)
        return refuse_answer(view, obj,
                             "it granted a borrow in ext_flags without setting the matching "
                             "PYXBUF_BORROW_* bit in flags",
                             view->flags);
    if ((view->ext_flags & PYXBUF_EXT_ALL) == PYXBUF_EXT_TRACKED)
        return refuse_answer(view, obj,
                             "it set PYXBUF_EXT_TRACKED in ext_flags without a shared or "
                             "exclusive grant",
                             view->flags);
    return view->device != NULL ? validate_device_pointer(view, obj) : 0;
}

int pyxbuf__validate_classic(pyxbuf_view *view, PyObject *obj, int32_t passed) {
    if (PYXBUF_UNLIKELY((unsigned)view->base.ndim > PYXBUF_MAX_NDIM))
        return refuse_answer(view, obj, "its ndim is negative or above PYXBUF_MAX_NDIM (64)",
                             passed);
    if (PYXBUF_UNLIKELY((passed & PyBUF_WRITABLE) && view->base.readonly))
        return refuse_answer(view, obj, "it returned read-only memory for a WRITABLE request",
                             passed);
    return 0;
}

/* The size of a single native struct code with no prefix, 0 for any other
 * format (prefixed formats carry producer quirks: ctypes' '<l' is 8 bytes and
 * its '<u' 4; pyxbuf trusts the itemsize there, as its copies do). */
static Py_ssize_t native_code_size(const char *format) {
    if (format == NULL || format[0] == '\0' || format[1] != '\0') return 0;
    switch (format[0]) {
    case 'c': case 'b': case 'B': case '?': return 1;
    case 'h': case 'H': case 'e': return 2;
    case 'i': case 'I': return (Py_ssize_t)sizeof(int);
    case 'l': case 'L': return (Py_ssize_t)sizeof(long);
    case 'q': case 'Q': return (Py_ssize_t)sizeof(long long);
    case 'n': case 'N': return (Py_ssize_t)sizeof(Py_ssize_t);
    case 'f': return (Py_ssize_t)sizeof(float);
    case 'd': return (Py_ssize_t)sizeof(double);
    case 'P': return (Py_ssize_t)sizeof(void *);
    default: return 0;
    }
}

/* Native (extended) producers only: the classic fields must agree with each
 * other -- itemsize positive and equal to a plain native format's size, a
 * shape when PyBUF_ND was asked, no negative extent, and len equal to the
 * product of the shape times itemsize (PEP 3118). Consumers size slices by
 * the shape (the Rust layer) and copies by len; a producer whose two answers
 * differ would send one of them past the memory. The classic path does not
 * pay for this loop: CPython's and NumPy's buffers are consistent, and the
 * copy functions check again (pyxbuf__check_copy_size in device/view_device.c). */
int pyxbuf__validate_native_layout(pyxbuf_view *view, PyObject *obj, int32_t passed) {
    const Py_buffer *b = &view->base;
    char why[200];
    if (PYXBUF_UNLIKELY(b->itemsize < 1)) {
        snprintf(why, sizeof why, "its itemsize %zd is not positive", b->itemsize);
        return refuse_answer(view, obj, why, passed);
    }
    Py_ssize_t code_size = native_code_size(b->format);
    if (PYXBUF_UNLIKELY(code_size != 0 && code_size != b->itemsize)) {
        snprintf(why, sizeof why, "its itemsize %zd disagrees with its format '%s' (%zd %s)",
                 b->itemsize, b->format, code_size, PYXBUF__PLURAL(code_size, "byte", "bytes"));
        return refuse_answer(view, obj, why, passed);
    }
    if (b->shape == NULL) {
        if (PYXBUF_UNLIKELY((passed & PyBUF_ND) && b->ndim > 0))
            return refuse_answer(view, obj, "its shape is NULL though PyBUF_ND was requested",
                                 passed);
        if (PYXBUF_UNLIKELY(b->len < 0)) {
            snprintf(why, sizeof why, "its len %zd is negative", b->len);
            return refuse_answer(view, obj, why, passed);
        }
        return 0;
    }
    Py_ssize_t bytes = b->itemsize;
    for (int i = 0; i < b->ndim; i++) {
        if (PYXBUF_UNLIKELY(b->shape[i] < 0)) {
            snprintf(why, sizeof why, "its shape[%d] = %zd is negative", i, b->shape[i]);
            return refuse_answer(view, obj, why, passed);
        }
        if (PYXBUF_UNLIKELY(!PYXBUF__MUL_OK(bytes, b->shape[i], &bytes))) {
            snprintf(why, sizeof why, "its shape times itemsize %zd overflows", b->itemsize);
            return refuse_answer(view, obj, why, passed);
        }
    }
    if (PYXBUF_UNLIKELY(bytes != b->len)) {
        snprintf(why, sizeof why,
                 "its len %zd disagrees with its shape times itemsize %zd (%zd %s)", b->len,
                 b->itemsize, bytes, PYXBUF__PLURAL(bytes, "byte", "bytes"));
        return refuse_answer(view, obj, why, passed);
    }
    return 0;
}
