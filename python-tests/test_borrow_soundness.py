"""Issue 38, part 1: holes in borrow grants and in what pyxbuf promises,
each reproduced here as a user or rust-numpy would meet it.

- rust-numpy's borrow table, as pyxbuf installs it in NumPy's multiarray
  module, called through the real capsule exactly as rust-numpy calls it
  (a C function pointer taking the table's flags and the array, with the
  GIL held): a release drops the borrow that was taken, not another one over
  the same bytes, and not nothing when the array changed meanwhile.
- A view with suboffsets is refused a tracked borrow (its span is its
  pointer table, not its items).
- The NumPy struct route leaves dtypes with fields to NumPy's export.
- check_supports answers a type that declares its flags from the
  declaration alone.
"""

import ctypes
import warnings

import numpy as np
import pytest
from _testbuffer import ND_PIL, ND_WRITABLE, ndarray as testbuffer_ndarray

import _pyxbuf_testext as t

SHARED = t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE
CAPSULE = b"_RUST_NUMPY_BORROW_CHECKING_API"

# rust-numpy's table, version 1: {version, flags, acquire, acquire_mut,
# release, release_mut}; PYFUNCTYPE keeps the GIL across the call, as
# rust-numpy holds it.
_ACQUIRE = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.py_object)
_RELEASE = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.py_object)


class _RustNumpyApi(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint64), ("flags", ctypes.c_void_p),
                ("acquire", _ACQUIRE), ("acquire_mut", _ACQUIRE),
                ("release", _RELEASE), ("release_mut", _RELEASE)]


class RustNumpy:
    """The borrow checker rust-numpy reaches through NumPy's module."""

    def __init__(self):
        # pyxbuf installs its table on its first tracked borrow of an
        # ndarray when no rust-numpy extension did before (none does here).
        t.acquire(np.zeros(1), SHARED).release()
        # Where rust-numpy keeps it: by NumPy's version (1.26 also has a
        # forwarding numpy._core, which is another module).
        if int(np.__version__.split(".")[0]) >= 2:
            from numpy._core import multiarray
        else:
            from numpy.core import multiarray
        capsule = multiarray._RUST_NUMPY_BORROW_CHECKING_API
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        get_context = ctypes.pythonapi.PyCapsule_GetContext
        get_context.restype, get_context.argtypes = ctypes.c_char_p, [ctypes.py_object]
        assert get_context(capsule) == b"pyxbuf"  # pyxbuf's table, not rust-numpy's own
        self.api = _RustNumpyApi.from_address(get(capsule, CAPSULE))
        assert self.api.version == 1

    def shared(self, a):
        assert self.api.acquire(self.api.flags, a) == 0
        return a

    def release(self, a):
        self.api.release(self.api.flags, a)

    def exclusive(self, a):
        return self.api.acquire_mut(self.api.flags, a)

    def release_mut(self, a):
        self.api.release_mut(self.api.flags, a)


@pytest.fixture
def rust_numpy():
    yield RustNumpy()
    assert t.shared_info()[1] == 0, "a borrow stayed in the registry"


def test_release_drops_the_borrow_that_was_taken(rust_numpy):
    """a[0:10:3] and a[0:10] span the same bytes with different spacing:
    releasing the narrow one must not drop the broad one's token."""
    a = np.zeros(16, dtype=np.uint8)
    narrow, broad = rust_numpy.shared(a[0:10:3]), rust_numpy.shared(a[0:10])
    rust_numpy.release(narrow)
    # a[1:10:3] is disjoint from a[0:10:3] but inside a[0:10], still read.
    with pytest.raises(BufferError, match="held by another view in this process"):
        t.acquire(a[1:10:3], EXCLUSIVE)
    assert rust_numpy.exclusive(a[1:10:3]) == -1
    rust_numpy.release(broad)
    t.acquire(a[1:10:3], EXCLUSIVE).release()


def test_release_in_either_order_and_of_either_kind(rust_numpy):
    a = np.zeros(16, dtype=np.uint8)
    views = [a[0:10:3], a[0:10], a[0:10:3], a[0:10]]
    for v in views:
        rust_numpy.shared(v)
    assert t.shared_info()[1] == 4
    for v in reversed(views):
        rust_numpy.release(v)
    col, other = a[1::4], a[2::4]
    assert rust_numpy.exclusive(col) == 0
    assert rust_numpy.exclusive(other) == 0  # disjoint lattices
    with pytest.raises(BufferError):
        t.acquire(a[1:2], SHARED)
    rust_numpy.release_mut(col)
    # rust-numpy releases with the array it borrowed; released through
    # another array object over the same items, the borrow of that key goes.
    same_items = a[2::4]
    assert same_items is not other
    rust_numpy.release_mut(same_items)
    t.acquire(a, EXCLUSIVE).release()


def test_release_after_the_array_changed(rust_numpy):
    """rust-numpy's release hands back the array as it is now: a borrow of an
    array whose strides (or data) changed meanwhile is still released."""
    a = np.zeros(16, dtype=np.uint8)
    v = a[::2]  # 8 items, every 2 bytes: bytes [0, 15)
    rust_numpy.shared(v)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # NumPy 2.4 deprecates it
        v.strides = (1,)  # now bytes [0, 8)
    rust_numpy.release(v)
    assert t.shared_info()[1] == 0
    t.acquire(a, EXCLUSIVE).release()

    b = np.zeros(8, dtype=np.float64)
    rust_numpy.exclusive(b)
    b.resize(32, refcheck=False)  # new memory: nothing of the old key is left
    rust_numpy.release_mut(b)
    assert t.shared_info()[1] == 0


def test_two_borrows_of_one_array_before_and_after_a_change(rust_numpy):
    a = np.zeros(16, dtype=np.uint8)
    v = a[::2]
    rust_numpy.shared(v)  # key K1: bytes [0, 15) every 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        v.strides = (1,)
    rust_numpy.shared(v)  # key K2: bytes [0, 8)
    rust_numpy.release(v)  # the one whose key v still has: K2
    with pytest.raises(BufferError):  # K1 is still held: byte 14 is read
        t.acquire(a[14:15], EXCLUSIVE)
    rust_numpy.release(v)
    t.acquire(a, EXCLUSIVE).release()


def _pil(flags=0):
    return testbuffer_ndarray(list(range(12)), shape=[3, 4], format="i", flags=ND_PIL | flags)


@pytest.mark.parametrize("request_flags", [SHARED, t.PyBUF_FULL | t.PYXBUF_BORROW_EXCLUSIVE])
def test_suboffsets_are_not_tracked(request_flags):
    """A borrow recorded over a PIL view's pointer table would let an
    exclusive borrow of its items through: refused, naming why."""
    pil = _pil(ND_WRITABLE)
    with pytest.raises(BufferError, match="suboffsets") as info:
        t.acquire(pil, request_flags | t.PyBUF_INDIRECT)
    assert "PIL" in str(info.value) and "'ndarray'" in str(info.value)
    assert t.shared_info()[1] == 0
    # Without a borrow the view is handed out as before.
    v = t.acquire(pil, t.PyBUF_FULL_RO)
    assert v.info()["suboffsets"] is not None
    v.release()


FIELD_DTYPES = [
    np.dtype((np.int32, {"lo": (np.int16, 0), "hi": (np.int16, 2)})),
    np.dtype((np.float64, {"re": (np.float32, 0), "im": (np.float32, 4)})),
    np.dtype((np.uint8, {"b": (np.bool_, 0)})),
]


@pytest.mark.parametrize("dt", FIELD_DTYPES, ids=str)
def test_numpy_route_declines_dtypes_with_fields(dt):
    a = np.zeros(4, dtype=dt)
    info = t.inspect(a, t.PyBUF_RECORDS_RO)
    assert info["format"] == memoryview(a).format
    assert info["format"].startswith("T{")
    assert info["path"] == "classic"


def test_typed_consumer_refuses_a_struct_described_as_a_float():
    """What the route got wrong: two float32 fields read as one float64."""
    a = np.zeros(4, dtype=FIELD_DTYPES[1])
    assert t.inspect(a, t.PyBUF_RECORDS_RO)["format"] != "d"


class Declared(np.ndarray):
    __pyxbuf_supported_flags__ = t.PyBUF_RECORDS


def test_check_supports_answers_a_declaring_type_from_its_declaration():
    x = np.zeros(3).view(Declared)
    assert t.check_supports(x, t.PyBUF_RECORDS)
    assert not t.check_supports(x, t.PyBUF_RECORDS | t.PYXBUF_DEVICE)
    assert not t.check_supports(x, t.PyBUF_RECORDS | t.PYXBUF_BORROW_SHARED)
    # A plain ndarray declares nothing: pyxbuf answers for it.
    assert t.check_supports(np.zeros(3), t.PyBUF_RECORDS | t.PYXBUF_BORROW_SHARED)
    assert t.check_supports(np.zeros(3), t.PyBUF_RECORDS | t.PYXBUF_DEVICE)
