# cython: language_level=3, freethreading_compatible=True
"""A third-party Cython extension built against pyxbuf's wheel (make
test-wheel; check_cython.py tests it): the declarations from `from pyxbuf
cimport`, the XView guard from pyxbuf_xview.pxi, typed memoryviews over
NumPy float32 arrays, ml_dtypes bfloat16 arrays, PyTorch CPU tensors (the
DLPack C exchange table) and arrays on a device this module emulates."""

from libc.stdint cimport uint8_t, uint16_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from pyxbuf cimport *
# The same declarations by name, as most extensions will cimport them.
from pyxbuf cimport pyxbuf_view, pyxbuf_get, pyxbuf_release, pyxbuf_require_host

include "pyxbuf_xview.pxi"


# ---------------------------------------------------------------------------
# An emulated device: host memory that pyxbuf treats as memory of the DLPack
# device type ext_dev (the type DLPack keeps for such uses). The release wheel
# has no device of its own to test with, so this module registers a backend
# in its copy of libpyxbuf: copies are memcpy, allocations malloc.
# ---------------------------------------------------------------------------

cdef int emu_copy(void *ctx, int32_t device_id, void *dst, const void *src, size_t n,
                  int64_t stream, pyxbuf_error *err) noexcept nogil:
    memcpy(dst, src, n)
    return 0

cdef int emu_alloc(void *ctx, int32_t device_id, size_t n, void **ptr,
                   pyxbuf_error *err) noexcept nogil:
    ptr[0] = malloc(n if n > 0 else 1)
    if ptr[0] == NULL:
        err.code = PYXBUF_ENOMEM
        return PYXBUF_ENOMEM
    return 0

cdef int emu_free(void *ctx, int32_t device_id, void *ptr, pyxbuf_error *err) noexcept nogil:
    free(ptr)
    return 0

cdef int emu_query(void *ctx, const void *ptr, pyxbuf_device *device,
                   pyxbuf_error *err) noexcept nogil:
    device.device_type = PYXBUF_DL_EXT_DEV
    device.device_id = 0
    return 0


cdef int register_emulated_device() except -1:
    cdef pyxbuf_backend backend
    cdef pyxbuf_error err
    memset_backend(&backend)
    backend.size = sizeof(pyxbuf_backend)
    backend.device_type = PYXBUF_DL_EXT_DEV
    backend.name = b"cython-consumer-emulated"
    backend.copy_to_host = emu_copy
    backend.copy_from_host = emu_copy
    backend.alloc = emu_alloc
    backend.free = emu_free
    backend.pointer_query = emu_query
    if pyxbuf_backend_register(&backend, &err) < 0:
        pyxbuf_error_raise(&err)
    return 0


cdef void memset_backend(pyxbuf_backend *b) noexcept:
    cdef char *p = <char *>b
    cdef size_t i
    for i in range(sizeof(pyxbuf_backend)):
        p[i] = 0


if pyxbuf_abi_version() != PYXBUF_ABI_VERSION:
    raise ImportError(
        f"pyxbuf_consumer_cython: compiled against pyxbuf ABI {PYXBUF_ABI_VERSION} but linked "
        f"with ABI {pyxbuf_abi_version()}; rebuild it against the installed pyxbuf")
register_emulated_device()


def abi_versions():
    """(PYXBUF_ABI_VERSION compiled in, pyxbuf_abi_version() linked)"""
    return (PYXBUF_ABI_VERSION, pyxbuf_abi_version())


def to_emulated_device(obj):
    """A pyxbuf.Exporter on the emulated device holding obj's items (C order)."""
    cdef pyxbuf_device target
    target.device_type = PYXBUF_DL_EXT_DEV
    target.device_id = 0
    cdef XView v = XView(obj, PyBUF_RECORDS_RO)
    with v:
        return pyxbuf_to_device(v.c_view(), &target, PYXBUF_STREAM_DEFAULT)


# ---------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------

def describe(obj):
    """What XView found, under a shared grant: shape, strides, format,
    itemsize, readonly, path, device and the grant bits."""
    with XView(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED | PYXBUF_DEVICE) as v:
        return {"shape": v.shape, "strides": v.strides, "format": v.format,
                "itemsize": v.itemsize, "readonly": v.readonly, "path": v.path,
                "device": v.device, "ext_flags": v.ext_flags}


cdef double sum_2d(const float[:, :] m) noexcept:
    cdef double s = 0
    cdef Py_ssize_t i, j
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            s += m[i, j]
    return s


def total(obj, bint copy=False):
    """The sum of a float32 array of 1 or 2 dimensions, any strides, read
    through a typed memoryview under a shared grant. Device memory is refused
    (pyxbuf_get's BufferError) unless copy=True, which copies it to the host."""
    cdef const float[:] m1
    cdef double s = 0
    cdef Py_ssize_t i
    cdef int32_t flags = PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED
    if copy:
        flags |= PYXBUF_DEVICE
    with XView(obj, flags) as v:
        if v.device is not None:
            return total(v.to_host())
        if v.ndim == 2:
            return sum_2d(v)
        m1 = v
        for i in range(m1.shape[0]):
            s += m1[i]
    return s


def c_total(obj):
    """total() of a 1-D float32 array the C way, no XView: pyxbuf_get, a
    pointer walk over any strides, pyxbuf_release in `finally`."""
    cdef pyxbuf_view view
    cdef double s = 0
    cdef Py_ssize_t i
    cdef const char *p
    pyxbuf_get(obj, &view, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
    try:
        pyxbuf_require_host(&view, "c_total")
        if view.base.ndim != 1 or pyxbuf_view_format(&view) not in ("f", "<f", "=f"):
            raise (<object>pyxbuf_item_type_error())(
                f"c_total: reads 1-D float32, not {view.base.ndim}-D format "
                f"'{pyxbuf_view_format(&view)}'; pass a 1-D float32 array")
        p = <const char *>view.base.buf
        for i in range(view.base.shape[0]):
            s += (<const float *>(p + i * view.base.strides[0]))[0]
    finally:
        pyxbuf_release(&view)
    return s


def item_type_error():
    """The class this module's copy of libpyxbuf raises for an item type
    that is not the one asked: pyxbuf.ItemTypeError, the process's one."""
    return <object>pyxbuf_item_type_error()


def bits_of(obj):
    """The items of obj as unsigned integers of their size (XView.as_bits())."""
    with XView(obj) as v:
        return memoryview(v.as_bits()).tolist()


def total_bf16(obj):
    """The sum of a 1-D ml_dtypes bfloat16 array, read as uint16 bits."""
    cdef const uint16_t[:] bits
    cdef double s = 0
    cdef Py_ssize_t i
    with XView(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) as v:
        if v.format != "[ml_dtypes$bfloat16]":
            raise (<object>pyxbuf_item_type_error())(
                f"total_bf16: reads bfloat16 ('[ml_dtypes$bfloat16]'), not format "
                f"'{v.format}'; pass an ml_dtypes.bfloat16 array")
        bits = v.as_bits()
        for i in range(bits.shape[0]):
            s += pyxbuf_bfloat16_to_float(bits[i])
    return s


def total_f8e4m3(obj):
    """The sum of a 1-D float8_e4m3fn array (ml_dtypes', PyTorch's), read as
    its bytes."""
    cdef const uint8_t[:] bits
    cdef double s = 0
    cdef Py_ssize_t i
    with XView(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) as v:
        if v.format != "[ml_dtypes$float8_e4m3fn]":
            raise (<object>pyxbuf_item_type_error())(
                f"total_f8e4m3: reads float8_e4m3fn ('[ml_dtypes$float8_e4m3fn]'), "
                f"not format '{v.format}'; pass an ml_dtypes.float8_e4m3fn array")
        bits = v.as_bits()
        for i in range(bits.shape[0]):
            s += pyxbuf_float8_e4m3fn_to_float(bits[i])
    return s


# ---------------------------------------------------------------------------
# Writers: an exclusive grant on the output, a shared one on the input
# ---------------------------------------------------------------------------

def fill(obj, float value):
    """Set every item of a 1-D float32 array, under an exclusive grant."""
    cdef float[:] out
    cdef Py_ssize_t i
    with XView(obj, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE) as v:
        out = v
        for i in range(out.shape[0]):
            out[i] = value


def scale_into(src, dst, float factor):
    """dst[i] = src[i] * factor: src shared, dst exclusive (1-D float32).
    The same array as both is refused: the exclusive grant conflicts with
    the shared one."""
    cdef const float[:] a
    cdef float[:] b
    cdef Py_ssize_t i
    with XView(src, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) as vs, \
            XView(dst, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE) as vd:
        a = vs
        b = vd
        if a.shape[0] != b.shape[0]:
            raise ValueError(f"scale_into: src has {a.shape[0]} items, dst {b.shape[0]}; "
                             "pass arrays of one length")
        for i in range(a.shape[0]):
            b[i] = a[i] * factor


def fail_inside(obj):
    """Acquire obj exclusively, take a typed memoryview, then raise
    RuntimeError inside the with block: the view must still be released."""
    cdef float[:] m
    with XView(obj, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE) as v:
        m = v
        m[0] = 42
        raise RuntimeError("fail_inside: raised on purpose while the view is held")


def writable_memoryview_of_read_only_xview(obj):
    """Ask a writable float[:] of an XView acquired read-only: BufferError."""
    cdef float[:] m
    with XView(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) as v:
        m = v


def escape(obj):
    """Return (XView, memoryview object) with the with block ended while the
    memoryview still lives: the release waits for it."""
    cdef const float[:] m
    with XView(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) as v:
        m = v
    return v, m


def count_direct(obj):
    """The length of a 1-D float32 array through the cheapest form of XView:
    a typed memoryview made straight of XView.get, released with it."""
    cdef const float[:] m = XView.get(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
    return m.shape[0]


def raise_while_held(obj):
    """Acquire obj exclusively into a local XView, never release it, and
    raise LookupError: the XView is collected while the exception unwinds,
    which must release the view and leave the exception as it was."""
    cdef XView v = XView.get(obj, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE)
    cdef float[:] m = v
    m[0] = 5
    raise LookupError(f"raise_while_held: raised on purpose with the XView held ({v.held})")


def contiguous_sum(obj):
    """The sum through a C-contiguous memoryview (const float[::1]), with the
    cheapest form of XView: XView.get and release() in `finally`."""
    cdef const float[::1] m
    cdef double s = 0
    cdef Py_ssize_t i
    cdef XView v = XView.get(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
    try:
        m = v
        for i in range(m.shape[0]):
            s += m[i]
    finally:
        v.release()
    return s
