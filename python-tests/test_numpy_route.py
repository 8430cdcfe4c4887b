"""The NumPy struct route (c/bridges/numpy_array.h, path "numpy"): which
arrays it reads and which it leaves to NumPy's own export, and what holding
such a view promises. That its views equal NumPy's classic ones field by
field, for every request, is test_classic_differential.py's job."""

import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

import _pyxbuf_testext as t
from numpy_route import NUMPY_2, classic_path, numpy_route_applies

pytestmark = pytest.mark.skipif(
    not NUMPY_2, reason=f"the struct route reads NumPy 2's ABI only (NumPy {np.__version__} "
    "arrays take the classic export, which test_classic_differential.py checks)")

RO = t.PyBUF_RECORDS_RO
W = t.PyBUF_RECORDS


def path_of(obj, flags=RO):
    return t.inspect(obj, flags)["path"]


@pytest.mark.parametrize("dtype", ["?", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "q",
                                   "Q", "e", "f4", "f8", "g", "c8", "c16", "G"])
def test_builtin_native_dtypes_take_the_route(dtype):
    a = np.arange(6).astype(dtype).reshape(2, 3)
    v = t.inspect(a, RO)
    assert v["path"] == "numpy" and numpy_route_applies(a)
    assert (v["format"], v["itemsize"]) == (memoryview(a).format, a.itemsize)
    assert v["buf"] == a.ctypes.data and v["obj"] is a


@pytest.mark.parametrize("make", [
    lambda: np.zeros(3, ">f4"),                                          # byte order
    lambda: np.frombuffer(bytes(13), np.float32, 3, offset=1),           # unaligned
    lambda: np.zeros((1,) * 9, np.float32),                              # beyond 8 dims
    lambda: np.arange(3.0).view(np.recarray),                            # a subclass
    lambda: np.zeros(2, [("a", "i4"), ("b", "f8")]),                     # structured
    lambda: np.zeros(2, "S3"), lambda: np.zeros(2, "U2"),                # strings
    lambda: np.array([1, None]),                                         # objects
    lambda: memoryview(np.zeros(3)),                                     # not an array
], ids=["big-endian", "unaligned", "9d", "subclass", "structured", "bytes", "str", "object",
        "memoryview"])
def test_other_arrays_keep_numpys_export(make):
    obj = make()
    assert path_of(obj) == "classic" == classic_path(obj)


def test_user_dtypes_take_the_route_unless_the_bridge_must_answer():
    """Issue 39: ml_dtypes' arrays are read from the struct too
    (test_numpy_user_dtypes.py has the differential); byte-swapped,
    unaligned and subclassed ones keep the bridge."""
    a = np.ones(3, ml_dtypes.bfloat16)
    assert path_of(a) == "numpy"
    assert path_of(a.view(a.dtype.newbyteorder())) == "array-interface"
    unaligned = np.frombuffer(bytearray(7), ml_dtypes.bfloat16, count=3, offset=1)
    assert path_of(unaligned) == "array-interface"
    assert path_of(np.ma.MaskedArray(a).data.view(type("Sub", (np.ndarray,), {}))) == \
        "array-interface"


def test_refusals_are_numpys_own():
    """Requests NumPy refuses go to its export, so the refusal (type, cause,
    message) is the one the classic path gives."""
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    with pytest.raises(BufferError, match="classic buffer of 'numpy.ndarray'") as e:
        t.inspect(a, t.PyBUF_C_CONTIGUOUS)
    assert isinstance(e.value.__cause__, ValueError)
    assert "not C-contiguous" in str(e.value.__cause__)
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="classic buffer of 'numpy.ndarray'") as e:
        t.inspect(ro, W)
    assert "read-only" in str(e.value.__cause__)


def test_warn_on_write_is_numpys_to_clear():
    """broadcast_arrays' results are writeable with NumPy's warn-on-write
    flag: a read finds them read-only without a warning (as NumPy's export
    answers), a write request goes to NumPy, which warns and clears it."""
    a, _ = np.broadcast_arrays(np.arange(3.0), np.zeros((2, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = t.inspect(a, RO)
    assert (v["path"], v["readonly"]) == ("numpy", 1)
    with pytest.warns(DeprecationWarning, match="broadcast_arrays"):
        assert path_of(a, W) == "classic"
    v = t.inspect(a, W)  # the flag is cleared now: the route reads it writable
    assert (v["path"], v["readonly"]) == ("numpy", 0)


def test_view_keeps_its_own_shape_when_the_array_is_reshaped():
    """NumPy swaps an array's dimension storage when Python code sets its
    shape; a held view's shape and strides are its own."""
    a = np.arange(12, dtype=np.float32)
    held = t.acquire(a, RO)
    a.shape = (3, 4)
    a.shape = (2, 2, 3)
    info = held.info()
    assert (info["ndim"], info["shape"], info["strides"]) == (1, (12,), (4,))
    assert held.copy_to_host() == np.arange(12, dtype=np.float32).tobytes()
    held.release()


def test_contiguous_strides_are_normalized_as_numpy_does():
    base = np.zeros((3, 1, 4), np.float32)
    odd = np.lib.stride_tricks.as_strided(base, (3, 1, 4), (16, 1000, 4))
    assert odd.flags.c_contiguous
    v = t.inspect(odd, RO)
    assert v["path"] == "numpy" and v["strides"] == memoryview(odd).strides == (16, 16, 4)


def test_no_reference_is_left_behind():
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    before = sys.getrefcount(a)
    for flags in (RO, W, t.PyBUF_SIMPLE, t.PyBUF_ND, RO | t.PYXBUF_BORROW_SHARED,
                  W | t.PYXBUF_BORROW_EXCLUSIVE):
        for _ in range(100):
            t.acquire(a, flags).release()
    held = t.acquire(a, RO)
    assert sys.getrefcount(a) == before + 1
    held.release()
    assert sys.getrefcount(a) == before


def test_grants_still_conflict():
    """The route changes how the view is read, not the registry's promise."""
    a = np.zeros(16, np.float32)
    shared = t.acquire(a, RO | t.PYXBUF_BORROW_SHARED)
    with pytest.raises(BufferError, match="exclusive borrow"):
        t.acquire(a[4:8], W | t.PYXBUF_BORROW_EXCLUSIVE)
    shared.release()
    t.acquire(a[4:8], W | t.PYXBUF_BORROW_EXCLUSIVE).release()
