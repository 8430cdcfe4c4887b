# pyxbuf_xview.pxi -- XView, a `with`-style guard over one pyxbuf_view that
# hands its host memory to Cython's typed memoryviews without a copy.
#
# Include it (it defines a cdef class, which has to be compiled into the
# extension that uses it) after `from pyxbuf cimport *`:
#
#     include "pyxbuf_xview.pxi"   # cythonize(include_path=[pyxbuf.get_cython_include()])
#
#     with XView(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED) as v:
#         m = v                     # cdef const float[:, :] m: zero copy
#         ...
#
# The same without Python's argument parsing and the with statement's
# calls of __enter__ and __exit__ (each a Python method call: the with block
# costs 1.7 times a float[:] argument, these two forms less than one, in
# instructions; make bench-args):
#
#     cdef XView v = XView.get(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
#     try:
#         m = v
#         ...
#     finally:
#         v.release()
#
# and, cheapest, for a function called per array, a typed memoryview made
# straight of XView.get: the view is released when the memoryview goes (at
# the latest when the function returns), as a float[:] argument's buffer is:
#
#     cdef const float[:] m = XView.get(obj, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED)
#
# What it does:
#   - XView(obj, flags) acquires with pyxbuf_get(obj, flags | PyBUF_STRIDES |
#     PyBUF_FORMAT) (a typed memoryview needs shape, strides and format):
#     every bridge of pyxbuf (classic buffer, DLPack C exchange table,
#     __dlpack__, CUDA Array Interface, __array_interface__) and every grant
#     (PYXBUF_BORROW_SHARED / _EXCLUSIVE) works as in C. A refusal raises as
#     pyxbuf_get does (BufferError, TypeError), and nothing is held then.
#     An XView takes any item type; the typed memoryview made of it checks
#     its own (Cython's ValueError "Buffer dtype mismatch"), and as_bits()
#     refuses items of no unsigned integer's size with pyxbuf.ItemTypeError
#     (a TypeError and a BufferError, pyxbuf_item_type_error()), the class a
#     Cython consumer raises for its own item-type refusals too.
#   - The XView exports the view's memory through the classic buffer protocol
#     to Cython's typed memoryviews (`cdef const float[:] m = v`): the same
#     buf, shape and strides, no second acquisition of `obj`. A writable
#     memoryview (`float[:]`) needs an XView acquired with PyBUF_WRITABLE: a
#     shared grant promises that nobody writes. Device memory is refused with
#     BufferError (ask for PYXBUF_DEVICE and use to_host() to copy it).
#     Custom item types Cython cannot name (bfloat16) are read through
#     as_bits(): unsigned integers of the item's size.
#   - release() (and leaving the `with` block, exception or not) releases the
#     view exactly once. Memory must outlive every memoryview of it, so while
#     a typed memoryview of the XView lives the release waits for the last one
#     to go (a function's memoryview locals go when it returns; `m = None`
#     ends one early); no new memoryview is handed out after release(). An
#     XView that is never released is released when it is collected (by a
#     tp_dealloc this file installs at import, see the end: CPython's full C
#     API, not the Limited API).
#
# Threads: as pyxbuf_view, an XView belongs to one thread at a time (the GIL,
# or on a free-threaded build the caller's own hand-over).

cimport cython
from cpython.buffer cimport PyBuffer_IsContiguous

# This extension's copy of libpyxbuf speaks Cython in its messages (the fix
# a refusal names is XView's, not C's).
pyxbuf_message_binding(PYXBUF_BINDING_CYTHON)

# The bits that ask for C, Fortran or any contiguity (PyBUF_C_CONTIGUOUS and
# the others less the PyBUF_STRIDES they include).
cdef enum:
    _PYXBUF_XVIEW_ORDER_BITS = (PyBUF_C_CONTIGUOUS | PyBUF_F_CONTIGUOUS
                                | PyBUF_ANY_CONTIGUOUS) & ~PyBUF_STRIDES


# A freelist: an XView is made and dropped per call, as a typed memoryview
# argument is, and the allocator's round trip was a fifth of its cost. Final:
# release() and the other methods are called directly, not looked up.
@cython.final
@cython.freelist(8)
cdef class XView:
    """XView(obj, flags=PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED): obj's memory
    acquired with pyxbuf_get, exported to typed memoryviews, released exactly
    once (release(), the end of a `with` block, or collection)."""

    cdef pyxbuf_view view
    cdef int32_t flags_asked
    cdef bint acquired
    cdef bint closing
    cdef Py_ssize_t exports
    cdef const char *export_format

    def __init__(self, obj, int32_t flags=PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED):
        self._acquire(obj, flags)

    @staticmethod
    cdef XView get(object obj, int32_t flags):
        """XView(obj, flags) without Python's argument parsing: the cheapest
        way to make one from Cython (`cdef XView v = XView.get(obj, flags)`)."""
        cdef XView v = XView.__new__(XView)
        v._acquire(obj, flags)
        return v

    cdef int _acquire(self, object obj, int32_t flags) except -1:
        if self.acquired or self.closing:
            raise BufferError(
                "XView: this XView already holds (or held) a view; make a new XView for "
                "another acquisition")
        self.flags_asked = flags | PyBUF_STRIDES | PyBUF_FORMAT
        pyxbuf_get(obj, &self.view, self.flags_asked)
        self.acquired = True
        if self.view.base.format != NULL:
            self.export_format = self.view.base.format
        else:
            self.export_format = b"B"
        return 0


    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.release()
        return False

    cpdef release(self):
        """Release the view now, or (while a typed memoryview of it lives)
        when the last one goes. A second call does nothing."""
        if not self.acquired:
            return
        self.closing = True
        if self.exports == 0:
            self._give_back()

    cdef void _give_back(self) noexcept:
        """pyxbuf_release, once: the one place an XView's view is released
        (release(), the last typed memoryview's release, collection)."""
        if self.acquired:
            self.acquired = False
            pyxbuf_release(&self.view)

    cdef pyxbuf_view *c_view(self) except NULL:
        """The acquired pyxbuf_view itself, for the C API (valid until the
        release)."""
        self._check_held("c_view()")
        return &self.view

    cdef int _check_held(self, str what) except -1:
        if not self.acquired and not self.closing:
            raise BufferError(
                f"XView.{what}: this XView holds no view (it was made by XView.__new__); "
                "make one with XView(obj, flags) or XView.get(obj, flags)")
        if self.closing:
            raise BufferError(
                f"XView.{what}: this XView was released (its with block ended or release() "
                "was called); acquire the array again with a new XView")
        return 0

    def as_bits(self):
        """Export the items as unsigned integers of their own size ('B', 'H',
        'I' or 'Q'), for item types Cython's memoryviews cannot name:
        `cdef const uint16_t[:] m = v.as_bits()` reads bfloat16 bits (convert
        them with pyxbuf_bfloat16_to_float). Returns this XView."""
        self._check_held("as_bits()")
        cdef Py_ssize_t size = self.view.base.itemsize
        if size == 1:
            self.export_format = b"B"
        elif size == 2:
            self.export_format = b"H"
        elif size == 4:
            self.export_format = b"I"
        elif size == 8:
            self.export_format = b"Q"
        else:  # an item type as_bits() cannot read: pyxbuf.ItemTypeError
            raise (<object>pyxbuf_item_type_error())(
                f"XView.as_bits(): items of format '{self.format}' are {size} bytes; only "
                "1, 2, 4 or 8 byte items have an unsigned integer of their size; read the "
                "bytes through c_view() instead")
        return self

    def to_host(self):
        """The array's items on the host: the acquired object itself when its
        memory is host memory, else a new pyxbuf.Exporter holding a copy in C
        order (pyxbuf_to_device; the device's backend copies). Acquire with
        PYXBUF_DEVICE to accept device arrays at all."""
        self._check_held("to_host()")
        cdef pyxbuf_device cpu
        cpu.device_type = PYXBUF_DL_CPU
        cpu.device_id = 0
        return pyxbuf_to_device(&self.view, &cpu, PYXBUF_STREAM_DEFAULT)

    @property
    def released(self):
        """True once release() was asked (or the with block ended)."""
        return self.closing

    @property
    def held(self):
        """True while the pyxbuf_view is acquired: after release() still,
        until the last typed memoryview of it goes."""
        return self.acquired

    @property
    def ndim(self):
        """Dimensions of the view."""
        return self.view.base.ndim

    @property
    def shape(self):
        """Items per dimension (an empty tuple without shape)."""
        if self.view.base.shape == NULL:
            return ()
        return tuple([self.view.base.shape[i] for i in range(self.view.base.ndim)])

    @property
    def strides(self):
        """Byte strides per dimension (an empty tuple without strides)."""
        if self.view.base.strides == NULL:
            return ()
        return tuple([self.view.base.strides[i] for i in range(self.view.base.ndim)])

    @property
    def itemsize(self):
        """Bytes per item."""
        return self.view.base.itemsize

    @property
    def format(self):
        """The items' format string ("B" when the producer gave none)."""
        return pyxbuf_view_format(&self.view)

    @property
    def readonly(self):
        """Whether the memory is read-only."""
        return bool(self.view.base.readonly)

    @property
    def device(self):
        """None for host memory, else 'cuda:0', 'ext_dev:0' ..."""
        if pyxbuf_view_is_host(&self.view):
            return None
        cdef pyxbuf_device dev
        cdef char name[64]
        if pyxbuf_view_device(&self.view, &dev, NULL) == 0 and \
                pyxbuf_device_format(&dev, name, 64) > 0:
            return (<bytes>name).decode("ascii", "replace")
        return (<bytes>self.view.device).decode("utf-8", "replace")

    @property
    def ext_flags(self):
        """The grants: PYXBUF_EXT_SHARED, _EXCLUSIVE and _TRACKED bits."""
        return self.view.ext_flags

    @property
    def path(self):
        """Which protocol produced the view: 'classic', 'dlpack-c', ..."""
        return (<bytes>pyxbuf_path_name(self.view.path)).decode("ascii")

    cdef int _refuse_export(self, int flags) except -1:
        """Raise the reason a typed memoryview of this XView is refused
        (released, device memory, writable asked of a read-only XView,
        contiguity the array lacks); return 0 when it is not."""
        if self.closing or not self.acquired:
            self._check_held("a typed memoryview")
        if self.view.device != NULL:  # pyxbuf_view_is_host, inline: NULL is host memory
            pyxbuf_require_host(&self.view, "XView as a typed memoryview")
        if flags & PyBUF_WRITABLE and not self.flags_asked & PyBUF_WRITABLE:
            raise BufferError(
                "XView: a writable typed memoryview (such as float[:]) was asked of an XView "
                f"acquired read-only (flags 0x{self.flags_asked:x}); declare the memoryview "
                "const (const float[:]) or acquire the XView with PyBUF_WRITABLE")
        cdef char order = 0
        if flags & PyBUF_C_CONTIGUOUS == PyBUF_C_CONTIGUOUS:
            order = b"C"
        elif flags & PyBUF_F_CONTIGUOUS == PyBUF_F_CONTIGUOUS:
            order = b"F"
        elif flags & PyBUF_ANY_CONTIGUOUS == PyBUF_ANY_CONTIGUOUS:
            order = b"A"
        if order != 0 and not PyBuffer_IsContiguous(&self.view.base, order):
            raise BufferError(
                f"XView: a {chr(order)}-contiguous typed memoryview was asked, but the "
                f"array (shape {self.shape}, strides {self.strides}) is not; declare it "
                "strided (float[:, :]) or copy the array to a contiguous one first")
        return 0

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        # One test for every rare case (a typed memoryview's usual request is
        # strided, format, and writable only of a writable XView), so that
        # the export costs less than the array's own getbuffer would.
        if (self.closing | (not self.acquired) | (self.view.device != NULL)
                | ((flags & PyBUF_WRITABLE) > (self.flags_asked & PyBUF_WRITABLE))
                | ((flags & _PYXBUF_XVIEW_ORDER_BITS) != 0)):
            self._refuse_export(flags)
        buffer.buf = self.view.base.buf
        buffer.obj = self
        buffer.len = self.view.base.len
        buffer.itemsize = self.view.base.itemsize
        buffer.readonly = not (self.flags_asked & PyBUF_WRITABLE)
        buffer.ndim = self.view.base.ndim
        buffer.shape = self.view.base.shape
        buffer.strides = self.view.base.strides
        buffer.suboffsets = NULL
        buffer.format = <char *>self.export_format if flags & PyBUF_FORMAT else NULL
        buffer.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1
        if self.exports == 0 and self.closing:
            self._give_back()


# Release at collection. Not a __dealloc__: Cython wraps each call of one in
# a save and restore of the pending exception (62 instructions on CPython
# 3.11), paid by every XView although most are released before they go. Instead, at import,
# XView's tp_dealloc becomes pyxbuf__xview_dealloc: it releases a view still
# held (saving the pending exception only when one is set), then runs
# Cython's own tp_dealloc (the freelist, the type's reference). The probe
# made at import to find `acquired` goes after the hook is in place, which
# finds nothing held.
#
# Contract of _pyxbuf_xview_collect, called by it with the XView's reference
# count at zero: it takes no reference to `v` (no Python operation on it, not
# even an assignment) and raises nothing (pyxbuf_release reports what it
# cannot undo as unraisable; an error left set all the same is reported so
# too, as Cython does for a __dealloc__).
cdef void _pyxbuf_xview_collect(XView v) noexcept:
    v._give_back()

cdef extern from *:
    """
    #if defined(Py_LIMITED_API) || defined(PYPY_VERSION) || defined(GRAALVM_PYTHON)
    #error "pyxbuf_xview.pxi needs CPython's full C API (XView installs its own tp_dealloc); build without the Limited API, or use pyxbuf_get and pyxbuf_release from pyxbuf.c_api directly"
    #endif
    static destructor pyxbuf__xview_cython_dealloc;
    static void (*pyxbuf__xview_collect)(PyObject *);
    static Py_ssize_t pyxbuf__xview_acquired_at; /* offsetof(XView, acquired) */

    static void pyxbuf__xview_dealloc(PyObject *o) {
        if (!*(const int *)((const char *)o + pyxbuf__xview_acquired_at)) {
            /* released before it went: nothing to do */
        } else if (PyErr_Occurred()) { /* collected while an exception unwinds */
    #if PY_VERSION_HEX >= 0x030C0000
            PyObject *pending = PyErr_GetRaisedException();
            pyxbuf__xview_collect(o);
            PyErr_SetRaisedException(pending);
    #else
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            pyxbuf__xview_collect(o);
            PyErr_Restore(type, value, tb);
    #endif
        } else {
            pyxbuf__xview_collect(o);
            if (PyErr_Occurred()) PyErr_WriteUnraisable(NULL); /* never leave one set */
        }
        pyxbuf__xview_cython_dealloc(o);
    }

    /* At the module's import, before any XView exists; again for each
     * XView type the module makes (a heap type per import, where Cython
     * builds types from specs): each gets the hook, and Cython's tp_dealloc
     * they had is this module's one function. */
    static int pyxbuf__xview_install_dealloc(PyObject *type, void *collect,
                                             Py_ssize_t acquired_at) {
        PyTypeObject *t = (PyTypeObject *)type;
        if (t->tp_dealloc == pyxbuf__xview_dealloc) return 0;
        pyxbuf__xview_collect = (void (*)(PyObject *))collect;
        pyxbuf__xview_acquired_at = acquired_at;
        pyxbuf__xview_cython_dealloc = t->tp_dealloc;
        t->tp_dealloc = pyxbuf__xview_dealloc;
        return 0;
    }
    """
    int pyxbuf__xview_install_dealloc(object type, void *collect, Py_ssize_t acquired_at) except -1


cdef int _pyxbuf_xview_install() except -1:
    # `acquired` (a bint: a C int) is read by the hook at its offset in the
    # object, so that an XView released before it goes costs one load.
    cdef XView probe = XView.__new__(XView)
    cdef Py_ssize_t acquired_at = <char *>&probe.acquired - <char *><void *>probe
    return pyxbuf__xview_install_dealloc(XView, <void *>_pyxbuf_xview_collect, acquired_at)

_pyxbuf_xview_install()
