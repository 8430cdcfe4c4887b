# cython: language_level=3, boundscheck=False, wraparound=False
# _args_cython.pyx -- the Cython routes of the per-argument race (make
# bench-args): Cython's own typed memoryview argument against pyxbuf's C API
# through the wheel's .pxd declarations (`from pyxbuf cimport ...`), and
# through the XView guard in its three forms (pyxbuf_xview.pxi): XView.get
# with release() in `finally`, a typed memoryview made straight of
# XView.get (released with it, as a float[:] argument is), and the `with`
# block. Each takes one 1-D float32 array and returns its length; noop takes
# any object and returns 0 (the call alone).
from pyxbuf cimport *

include "pyxbuf_xview.pxi"


def noop(x):
    return 0


def memview(const float[:] x):
    return x.shape[0]


cdef int check_f32_1d(const pyxbuf_view *v) except -1:
    cdef const char *fmt = v.base.format
    if v.base.ndim != 1 or fmt == NULL or fmt[0] != b"f" or fmt[1] != 0:
        raise TypeError("expected a 1-D float32 array")
    return 0


def pyxbuf(x):
    cdef pyxbuf_view v
    pyxbuf_get(x, &v, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
    try:
        check_f32_1d(&v)
        return v.base.shape[0]
    finally:
        pyxbuf_release(&v)


def xview(x):
    cdef XView v = XView.get(x, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
    cdef const float[:] m
    try:
        m = v
        return m.shape[0]
    finally:
        m = None
        v.release()


def xview_get(x):
    cdef const float[:] m = XView.get(x, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
    return m.shape[0]


def xview_with(x):
    cdef const float[:] m
    with XView(x, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) as v:
        m = v
        return m.shape[0]
