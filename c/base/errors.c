/* errors.c -- pyxbuf_error filling and its translation into Python exceptions. */

#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pyxbuf__error(pyxbuf_error *err, int32_t code, int64_t position, const char *fmt, ...) {
    if (err == NULL) return code;
    memset(err, 0, sizeof *err);
    err->code = code;
    err->position = position;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

static PyObject *exception_for(int32_t code) {
    switch (code) {
    case PYXBUF_EFORMAT:
    case PYXBUF_EUNSUPPORTED:
    case PYXBUF_EINVAL:
        return PyExc_ValueError;
    case PYXBUF_EOVERFLOW:
        return PyExc_OverflowError;
    case PYXBUF_ENOMEM:
        return PyExc_MemoryError;
    case PYXBUF_EBUFFER:
    case PYXBUF_EBORROW:
    case PYXBUF_EDEVICE:
        return PyExc_BufferError;
    default:
        return PyExc_RuntimeError;
    }
}

int pyxbuf_error_raise(const pyxbuf_error *err) {
    if (err == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pyxbuf: an operation failed without details");
        return -1;
    }
    if (err->code == PYXBUF_EPYTHON && PyErr_Occurred()) return -1;
    PyErr_SetString(exception_for(err->code), err->message);
    return -1;
}

void pyxbuf__flag_names(int32_t flags, char *buf, size_t cap) {
    static const struct {
        int32_t bit;
        const char *name;
    } names[] = {
        {PyBUF_WRITABLE, "WRITABLE"},
        {PyBUF_FORMAT, "FORMAT"},
        {PyBUF_ND, "ND"},
        {PyBUF_STRIDES & ~PyBUF_ND, "STRIDES"},
        {PyBUF_C_CONTIGUOUS & ~PyBUF_STRIDES, "C_CONTIGUOUS"},
        {PyBUF_F_CONTIGUOUS & ~PyBUF_STRIDES, "F_CONTIGUOUS"},
        {PyBUF_ANY_CONTIGUOUS & ~PyBUF_STRIDES, "ANY_CONTIGUOUS"},
        {PyBUF_INDIRECT & ~PyBUF_STRIDES, "INDIRECT"},
        {PYXBUF_DEVICE, "PYXBUF_DEVICE"},
        {PYXBUF_BORROW_SHARED, "PYXBUF_BORROW_SHARED"},
        {PYXBUF_BORROW_EXCLUSIVE, "PYXBUF_BORROW_EXCLUSIVE"},
        {PYXBUF_TEMPORARY, "PYXBUF_TEMPORARY"},
    };
    size_t used = 0;
    int32_t rest = flags;
    if (cap == 0) return;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (!(flags & names[i].bit)) continue;
        rest &= ~names[i].bit;
        int n = snprintf(buf + used, cap - used, "%s%s", used ? "|" : "", names[i].name);
        if (n < 0 || (size_t)n >= cap - used) return;
        used += (size_t)n;
    }
    if (rest != 0) snprintf(buf + used, cap - used, "%s0x%x", used ? "|" : "", (unsigned)rest);
    else if (used == 0) snprintf(buf, cap, "SIMPLE");
}

int pyxbuf__buffer_error(const char *fmt, ...) {
    char msg[PYXBUF_ERROR_MESSAGE_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyErr_SetString(PyExc_BufferError, msg);
    return -1;
}
