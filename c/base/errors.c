/* errors.c -- pyxbuf_error filling and its translation into Python exceptions;
 * the process's one item-type refusal class, pyxbuf.ItemTypeError. */

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

/* pyxbuf.ItemTypeError as this copy found it in the shared module (or made
 * and put it there): kept for the process, so the reference the accessor
 * lends stays valid whatever happens to the module's attribute. */
static PyObject *item_type_error_class = NULL;

static PyObject *make_item_type_error(void) {
    PyObject *bases = PyTuple_Pack(2, PyExc_TypeError, PyExc_BufferError);
    PyObject *cls = bases ? PyErr_NewExceptionWithDoc(
                                "pyxbuf.ItemTypeError",
                                "An array's item type is not the one asked for: its format or "
                                "itemsize (or the number of dimensions a typed argument fixes) "
                                "does not match.\n\n"
                                "A TypeError, by pyxbuf's rule (the array is of the wrong kind, "
                                "its memory is fine), and a BufferError, so that code written for "
                                "PyO3's PyBuffer, which raises BufferError there, catches it "
                                "unchanged. One class for every copy of libpyxbuf in the "
                                "process (C, Rust, C++, Cython): "
                                "sys.modules['" PYXBUF_SHARED_MODULE "'].ItemTypeError, exported "
                                "as pyxbuf.ItemTypeError.",
                                bases, NULL)
                          : NULL;
    Py_XDECREF(bases);
    return cls;
}

PyObject *pyxbuf_item_type_error(void) {
    PyObject *cls = PYXBUF__FT_LOAD_ACQUIRE(&item_type_error_class);
    if (PYXBUF_LIKELY(cls != NULL)) return cls;
    cls = pyxbuf__shared_object(PYXBUF__ITEM_TYPE_ERROR_ATTR, make_item_type_error);
    if (cls == NULL) return NULL;
    if (!PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_TypeError) ||
        !PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_BufferError)) {
        PyErr_Format(PyExc_RuntimeError,
                     "pyxbuf: sys.modules['%s'].%s is %R, not a class deriving from TypeError "
                     "and BufferError; remove what replaced it",
                     PYXBUF_SHARED_MODULE, PYXBUF__ITEM_TYPE_ERROR_ATTR, cls);
        Py_DECREF(cls);
        return NULL;
    }
    return pyxbuf__publish_once(&item_type_error_class, cls); /* kept: one per process */
}
