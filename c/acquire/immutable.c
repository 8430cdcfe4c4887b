/* immutable.c -- enforced shared grants over memory that nobody can write:
 * the bytes of an exact `bytes` object, reached directly, through read-only
 * memoryviews, or through a NumPy array whose base chain is read-only and
 * ends in one (`np.frombuffer(b)`).
 *
 * Why enforced, with no registry entry: CPython's bytes are immutable once
 * built, and this view's reference to its exporter keeps the bytes alive, so
 * no code that reaches the memory through any Python object can write it
 * while the view lives -- the promise PYXBUF_EXT_SHARED makes, kept by the
 * memory itself rather than by a producer's counter. Code that writes
 * through a raw pointer (ctypes.memmove to id(b)) breaks CPython's own
 * contract, not pyxbuf's.
 *
 * What is left tracked, and why:
 * - a subclass of bytes: it may define __buffer__ and export other memory
 *   (the range check below would catch that, but a subclass instance may
 *   also be resized by its own C code);
 * - a read-only mmap: another process writing the file changes the mapped
 *   pages;
 * - a read-only view of anything mutable (a memoryview's readonly flag, a
 *   NumPy array's cleared WRITEABLE flag, array.array): the owner writes on.
 *
 * The test is the memory, not the path: the view's bytes [buf, buf + len)
 * must lie inside the final bytes object's storage, so an exporter that
 * hands out other memory under a chain ending in bytes is never believed. */
#include "acquire/immutable.h"

#include "base/span.h"
#include "bridges/numpy_array.h"

/* A chain longer than this is left tracked (a memoryview of an array of a
 * memoryview... is a few links; a cycle would be a bug elsewhere). */
#define CHAIN_LIMIT 32

/* Whether every byte the view's items touch lies within exact bytes `b`'s
 * storage (the span, negative strides included; suboffsets are pointers to
 * other memory, never believed). */
static int within_bytes(PyObject *b, const pyxbuf_view *view) {
    Py_ssize_t lo, hi;
    if (view->base.suboffsets != NULL || pyxbuf__view_span(&view->base, &lo, &hi) < 0) return 0;
    uintptr_t start = (uintptr_t)PyBytes_AS_STRING(b);
    uintptr_t end = start + (uintptr_t)PyBytes_GET_SIZE(b);
    uintptr_t buf = (uintptr_t)view->base.buf;
    if (buf < start || buf > end) return 0;
    if (lo >= hi) return 1; /* no items: nothing to read or write */
    /* The first item is at offset 0, so lo <= 0 < hi: [buf + lo, buf + hi)
     * within [start, end), compared without wrapping. */
    return buf - start >= (uintptr_t)-lo && end - buf >= (uintptr_t)hi;
}

/* NumPy's array type, or a subclass (its struct begins the same), once
 * bridges/numpy_array.c has checked NumPy's ABI; otherwise not followed. */
static int numpy_array(PyObject *o) {
    PyTypeObject *tp = Py_TYPE(o);
    if (pyxbuf__numpy_array_type(tp)) return 1;
    PyTypeObject *ndarray = PYXBUF__FT_LOAD_ACQUIRE(&pyxbuf__numpy_ndarray);
    return ndarray != NULL && PyType_IsSubtype(tp, ndarray);
}

/* The object whose memory `o` exports, one link down the chain: a
 * memoryview's exporter, a read-only NumPy array's base; NULL when `o` is
 * none of these or may be written. */
static PyObject *next_link(PyObject *o) {
    if (PyMemoryView_Check(o)) {
#if PYXBUF_LIMITED
        /* The limited API reads a memoryview through its attributes; its
         * exporter stays borrowed, as the memoryview holds it. */
        PyObject *readonly = PyObject_GetAttrString(o, "readonly");
        int ro = readonly != NULL ? PyObject_IsTrue(readonly) : -1;
        Py_XDECREF(readonly);
        PyObject *base = ro == 1 ? PyObject_GetAttrString(o, "obj") : NULL;
        if (ro < 0 || (ro == 1 && base == NULL)) PyErr_Clear(); /* released: not followed */
        Py_XDECREF(base);
        return base == Py_None ? NULL : base;
#else
        const Py_buffer *mv = PyMemoryView_GET_BUFFER(o);
        return mv->readonly ? PyMemoryView_GET_BASE(o) : NULL;
#endif
    }
    if (numpy_array(o)) {
        const pyxbuf__numpy_array *a = (const pyxbuf__numpy_array *)o;
        /* A WRITEABLE array (warn-on-write ones included) can be written
         * whatever its base; a read-only one's WRITEABLE flag cannot be set
         * again once its base chain ends in bytes (NumPy asks the final base
         * for a writable buffer first). */
        return (a->flags & PYXBUF__NPY_WRITEABLE) ? NULL : a->base;
    }
    return NULL;
}

int pyxbuf__immutable_memory(const pyxbuf_view *view) {
    PyObject *o = view->base.obj;
    if (o == NULL || view->device != NULL || !view->base.readonly) return 0;
    for (int depth = 0; o != NULL && depth < CHAIN_LIMIT; depth++) {
        if (PyBytes_CheckExact(o)) return within_bytes(o, view);
        o = next_link(o);
    }
    return 0;
}

int pyxbuf__grant_if_immutable(pyxbuf_view *view) {
    if (!pyxbuf__immutable_memory(view)) return 0;
    view->reserved[0] = 0; /* no rust-numpy borrow: a read-only array has no writer to stop */
    view->ext_flags = (view->ext_flags & ~PYXBUF_EXT_TRACKED) | PYXBUF_EXT_SHARED;
    view->flags |= PYXBUF_BORROW_SHARED;
    return 1;
}
