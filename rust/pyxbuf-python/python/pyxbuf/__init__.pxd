# cython: language_level=3
# pyxbuf/__init__.pxd -- `from pyxbuf cimport ...` for Cython extensions.
#
# Everything of pyxbuf.h (declared in pyxbuf/c_api.pxd) and a few inline
# helpers. The typed-memoryview guard, a cdef class, has to be compiled into
# the extension that uses it, so it ships as an include file:
#
#     from pyxbuf cimport *
#     include "pyxbuf_xview.pxi"         # cdef class XView
#
#     def total(obj):
#         cdef double s = 0
#         cdef Py_ssize_t i
#         cdef const float[:] m
#         with XView(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) as v:
#             m = v                      # zero copy, no second acquisition
#             for i in range(m.shape[0]):
#                 s += m[i]
#         return s
#
# setup.py: Extension(..., include_dirs=[pyxbuf.get_include()],
# library_dirs=[pyxbuf.get_library_dir()], libraries=["pyxbuf"],
# define_macros=[("PYXBUF_STATIC", None)]) and
# cythonize(..., include_path=[pyxbuf.get_cython_include()]).

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND, \
    PyBUF_STRIDES, PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS, \
    PyBUF_INDIRECT, PyBUF_RECORDS, PyBUF_RECORDS_RO, PyBUF_FULL, PyBUF_FULL_RO
from libc.math cimport INFINITY, NAN, ldexpf
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from pyxbuf.c_api cimport *


cdef inline float pyxbuf_bfloat16_to_float(uint16_t bits) noexcept nogil:
    """One bfloat16 item (ml_dtypes' "[ml_dtypes$bfloat16]": the high half of
    a float32) as a float."""
    cdef uint32_t wide = (<uint32_t>bits) << 16
    cdef float out
    memcpy(&out, &wide, sizeof(float))
    return out


cdef inline float _pyxbuf_minifloat(unsigned sign, unsigned exp, unsigned man, unsigned mbits,
                                    int bias) noexcept nogil:
    """A small float's value from its fields (exponent 0: subnormal)."""
    cdef float m = <float>man / <float>(1u << mbits)
    cdef float v = ldexpf(m, 1 - bias) if exp == 0 else ldexpf(1.0 + m, <int>exp - bias)
    return -v if sign else v


cdef inline float pyxbuf_float8_e4m3fn_to_float(uint8_t bits) noexcept nogil:
    """One float8_e4m3fn item ("[ml_dtypes$float8_e4m3fn]": 4 exponent bits,
    bias 7, 3 mantissa bits, no infinities, S.1111.111 NaN) as a float."""
    cdef unsigned exp = (bits >> 3) & 0xF, man = bits & 7
    if exp == 0xF and man == 7:
        return NAN
    return _pyxbuf_minifloat(bits >> 7, exp, man, 3, 7)


cdef inline float pyxbuf_float8_e5m2_to_float(uint8_t bits) noexcept nogil:
    """One float8_e5m2 item ("[ml_dtypes$float8_e5m2]": binary16's top
    byte) as a float."""
    cdef unsigned exp = (bits >> 2) & 0x1F, man = bits & 3
    if exp == 0x1F:
        return NAN if man else (-INFINITY if bits >> 7 else INFINITY)
    return _pyxbuf_minifloat(bits >> 7, exp, man, 2, 15)


cdef inline float pyxbuf_float4_e2m1fn_x2_first(uint8_t bits) noexcept nogil:
    """The first of the two float4_e2m1fn values of one packed byte
    ("[pyxbuf$float4_e2m1fn_x2;struct$B]", PyTorch's float4_e2m1fn_x2): bits
    3:0."""
    cdef unsigned c = bits & 0xF
    return _pyxbuf_minifloat((c >> 3) & 1, (c >> 1) & 3, c & 1, 1, 1)


cdef inline float pyxbuf_float4_e2m1fn_x2_second(uint8_t bits) noexcept nogil:
    """The second value of a packed float4 byte: bits 7:4."""
    cdef unsigned c = bits >> 4
    return _pyxbuf_minifloat((c >> 3) & 1, (c >> 1) & 3, c & 1, 1, 1)


cdef inline str pyxbuf_view_format(const pyxbuf_view *view):
    """The view's format string ("B" when the producer gave none)."""
    if view.base.format == NULL:
        return "B"
    return (<bytes>view.base.format).decode("utf-8", "replace")


cdef inline int pyxbuf_require_host(const pyxbuf_view *view, str what) except -1:
    """BufferError unless the view's memory is host memory: `what` names the
    caller in the message."""
    if pyxbuf_view_is_host(view):
        return 0
    cdef pyxbuf_device dev
    cdef char name[64]
    if pyxbuf_view_device(view, &dev, NULL) == 0 and pyxbuf_device_format(&dev, name, 64) > 0:
        where = (<bytes>name).decode("ascii", "replace")
    else:
        where = (<bytes>view.device).decode("utf-8", "replace")
    raise BufferError(
        f"{what}: needs host memory, but the array lives on device '{where}'; "
        "copy it to the host first (pyxbuf.to_device(obj, 'cpu') or pyxbuf_copy_to_host)")
