"""pyxbuf::view<T> as a nanobind and a pybind11 argument (pyxbuf_nanobind.hpp,
pyxbuf_pybind11.hpp), checked through two example extensions built by
scikit-build-core against the release wheel in a fresh venv (make test-wheel):
shapes and strides, read-only refusal, bfloat16, an exclusive argument refused
when the same array is passed as a shared one too, NumPy, memoryview,
array.array, pyxbuf.Exporter and a DLPack-only producer, pyxbuf's refusal
reaching the caller, overloads, and release on every path (refcounts and live
tracked borrows before and after). Both extensions bind the same functions
(cxx_functions.hpp), so every test runs on both. Run with --noconftest."""

import array
import gc
import importlib
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

import pyxbuf

MODULES = ["pyxbuf_cxx_nanobind", "pyxbuf_cxx_pybind11"]


@pytest.fixture(params=MODULES)
def ext(request):
    return importlib.import_module(request.param)


@pytest.fixture(autouse=True)
def no_borrow_left():
    """Every test ends with no tracked borrow live: each view was released."""
    before = pyxbuf.live_borrows()
    yield
    gc.collect()
    assert pyxbuf.live_borrows() == before == 0


def released(a):
    """Nobody holds a view of `a` any more: an exclusive grant is had at once."""
    assert pyxbuf.live_borrows() == 0
    got = pyxbuf.inspect(a, pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE)
    assert got["grants"]["exclusive"], got


def test_the_wheel_ships_both_casters():
    include = pathlib.Path(pyxbuf.get_include())
    for name in ("pyxbuf_nanobind.hpp", "pyxbuf_pybind11.hpp"):
        text = (include / name).read_text()
        assert "struct type_caster<pyxbuf::view<T>>" in text and '#include "pyxbuf.hpp"' in text


def test_extension_is_built_with_its_framework(ext):
    assert ext.framework == ext.__name__.rsplit("_", 1)[1]


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a,  # C order
        lambda a: a.T,  # Fortran order: strides reversed
        lambda a: a[::2, 1::2],  # every other row and column
        lambda a: a[::-1, ::-1],  # negative strides
        lambda a: a[1],  # 1-D row
        lambda a: a[:, 2],  # 1-D column, stride of a row
    ],
    ids=["c", "transposed", "strided", "reversed", "row", "column"],
)
def test_shapes_and_strides(ext, make):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    a = make(base)
    shape, strides, itemsize, fmt, path, grants = ext.describe_shared(a)
    assert tuple(shape) == a.shape and tuple(strides) == a.strides
    assert (itemsize, fmt, path) == (4, "f", "numpy")
    # view<const float>: a shared borrow, from pyxbuf's registry for NumPy.
    assert grants == (True, False, True)
    assert ext.sum(a) == float(a.sum())
    before = base.copy()
    ext.scale(a, 2.0)
    expect = before.copy()
    make(expect)[...] *= 2
    np.testing.assert_array_equal(base, expect)


def test_three_dimensions_and_zero_size(ext):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)[:, ::2, ::-2]
    shape, strides, *_ = ext.describe_shared(a)
    assert tuple(shape) == a.shape and tuple(strides) == a.strides
    assert ext.sum(a) == float(a.sum())
    empty = np.zeros((0, 3), np.float32)
    assert tuple(ext.describe_shared(empty)[0]) == (0, 3) and ext.sum(empty) == 0.0


def test_other_producers(ext):
    assert ext.sum(array.array("f", [1.5, 2.5])) == 4.0
    assert ext.sum(memoryview(np.arange(4, dtype=np.float32))) == 6.0
    e = pyxbuf.exporter([3], "f")
    ext.scale(e, 2.0)  # zeros stay zeros: the write went through
    assert ext.sum(e) == 0.0
    # pyxbuf.Exporter grants enforced borrows itself: not tracked.
    assert ext.describe_shared(e)[4:] == ("native", (True, False, False))
    assert ext.describe_exclusive(e)[4:] == ("native", (False, True, False))


class DLPackOnly:
    """An array that speaks DLPack alone (no buffer slot): pyxbuf's bridge."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_dlpack_only_producer(ext):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    d = DLPackOnly(a)
    rcs = sys.getrefcount(a), sys.getrefcount(d)
    shape, strides, itemsize, fmt, path, grants = ext.describe_shared(d)
    assert (tuple(shape), tuple(strides), path, grants) == (a.shape, a.strides, "dlpack",
                                                            (True, False, True))
    assert ext.sum(d) == float(a.sum())
    ext.scale(d, 2.0)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2] * 2)
    # One registry for every path: DLPack's exclusive borrow, NumPy's shared one.
    with pytest.raises(BufferError, match="cannot grant a shared borrow of 'numpy.ndarray'.*"
                       "overlaps an exclusive borrow"):
        ext.add_into(d, a)
    r = np.ones(3, np.float32)
    r.setflags(write=False)
    with pytest.raises(BufferError, match="DLPack buffer of 'DLPackOnly' refused the request "
                       "WRITABLE.*read-only"):
        ext.scale(DLPackOnly(r), 2.0)
    assert (sys.getrefcount(a), sys.getrefcount(d)) == rcs


def test_exclusive_argument_asks_for_exclusive_grant(ext):
    a = np.zeros(4, np.float32)
    assert ext.describe_exclusive(a)[5] == (False, True, True)


def test_read_only_memory_refused_for_a_writable_view(ext):
    a = np.arange(4, dtype=np.float32)
    a.setflags(write=False)
    rc = sys.getrefcount(a)
    with pytest.raises(BufferError, match=r"refused the request WRITABLE.*read-only"):
        ext.scale(a, 2.0)
    assert sys.getrefcount(a) == rc
    np.testing.assert_array_equal(a, [0, 1, 2, 3])
    assert ext.sum(a) == 6.0  # a view<const float> reads it
    with pytest.raises(BufferError, match="'bytes' refused the request WRITABLE.*not writable"):
        ext.scale(b"\0" * 8, 2.0)
    with pytest.raises(BufferError, match="read-only"):
        ext.scale(pyxbuf.exporter([2], "f", readonly=True), 2.0)


def test_bfloat16(ext):
    a = np.array([[1.5, -2.0, 0.5], [4.25, 0.125, 8.0]], dtype=ml_dtypes.bfloat16)
    assert ext.sum_bf16(a) == 12.375
    assert ext.sum_bf16(a[:, ::2]) == 1.5 + 0.5 + 4.25 + 8.0  # strided
    assert ext.sum_bf16(a.T) == 12.375
    rc = sys.getrefcount(a)
    with pytest.raises(TypeError, match=r"format is '\[ml_dtypes\$bfloat16\]', expected 'f'"):
        ext.sum(a)
    with pytest.raises(TypeError, match=r"format is 'f', expected '\[ml_dtypes\$bfloat16\]'"):
        ext.sum_bf16(np.zeros(2, np.float32))
    with pytest.raises(TypeError, match=r"format is 'e', expected '\[ml_dtypes\$bfloat16\]'"):
        ext.sum_bf16(np.zeros(2, np.float16))
    assert sys.getrefcount(a) == rc


def test_exclusive_and_shared_of_one_array_refused(ext):
    a = np.arange(6, dtype=np.float32)
    rc = sys.getrefcount(a)
    with pytest.raises(BufferError, match="cannot grant a shared borrow of 'numpy.ndarray'.*"
                       "overlaps an exclusive borrow.*another argument of the same call"):
        ext.add_into(a, a)
    np.testing.assert_array_equal(a, np.arange(6))  # the call never ran
    assert sys.getrefcount(a) == rc
    released(a)
    # Overlapping parts of one array conflict; interleaved ones do not.
    with pytest.raises(BufferError, match="overlaps an exclusive borrow"):
        ext.add_into(a[:3], a[2:5])
    ext.add_into(a[::2], a[1::2])
    np.testing.assert_array_equal(a, [1, 1, 5, 3, 9, 5])
    # Two shared borrows of one array coexist.
    assert ext.same_memory(a, a) is True
    b = np.ones(6, np.float32)
    ext.add_into(b, a)
    np.testing.assert_array_equal(b, [2, 2, 6, 4, 10, 6])
    assert sys.getrefcount(a) == rc


def test_exclusive_and_shared_of_an_enforcing_producer_refused(ext):
    e = pyxbuf.exporter([4], "f")
    rc = sys.getrefcount(e)
    with pytest.raises(BufferError, match="cannot grant a shared borrow of a pyxbuf.Exporter: "
                       "an exclusive borrow is live"):
        ext.add_into(e, e)
    assert sys.getrefcount(e) == rc
    ext.scale(e, 1.0)  # the exclusive borrow was given back


def test_refusal_reaches_the_caller_with_pyxbuf_message(ext):
    d, i = np.zeros(3), np.zeros(3, np.int32)
    rcs = sys.getrefcount(d), sys.getrefcount(i)
    with pytest.raises(TypeError, match=r"format is 'd', expected 'f' \(4-byte items\); "
                       "pass an array of that item type"):
        ext.sum(d)
    with pytest.raises(TypeError, match="format is 'i', expected 'f'"):
        ext.scale(i, 2.0)
    # pyxbuf.ItemTypeError (issue 50, item 1): the process's one class, made
    # by whichever copy of libpyxbuf came first, caught as a TypeError and as
    # a BufferError.
    for caught in (TypeError, BufferError, pyxbuf.ItemTypeError):
        with pytest.raises(caught, match="format is 'd', expected 'f'") as info:
            ext.sum(d)
        assert type(info.value) is pyxbuf.ItemTypeError
    # An object pyxbuf cannot read at all: the framework's TypeError, naming
    # the signature.
    for bad in ("abc", 3, None, [1.0, 2.0]):
        with pytest.raises(TypeError, match=r"sum\(\): incompatible function arguments"):
            ext.sum(bad)
    # noconvert(): no conversion pass, so the framework's TypeError.
    with pytest.raises(TypeError, match=r"sum_noconvert\(\): incompatible function arguments"):
        ext.sum_noconvert(d)
    assert ext.sum_noconvert(np.ones(3, np.float32)) == 3.0
    assert (sys.getrefcount(d), sys.getrefcount(i)) == rcs


def test_overloads(ext):
    assert ext.kind(np.zeros(2, np.float32)) == "float32"
    assert ext.kind(np.zeros(2, np.float64)) == "float64"  # the strict pass finds it
    assert ext.kind("x") == "str"  # not an array: the next overloads are tried
    # An array no overload takes: the first view overload's refusal.
    with pytest.raises(TypeError, match="format is 'i', expected 'f'"):
        ext.kind(np.zeros(2, np.int32))


def test_release_when_the_function_throws(ext):
    a = np.ones(3, np.float32)
    rc = sys.getrefcount(a)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="fail_after_write: failed on purpose"):
            ext.fail_after_write(a)
        assert sys.getrefcount(a) == rc
        assert pyxbuf.live_borrows() == 0
    assert a[0] == -1.0  # it ran, and wrote, before throwing
    with pytest.raises(RuntimeError, match="failed on purpose with a view of 3 items"):
        ext.fail_by_reference(a)
    assert sys.getrefcount(a) == rc
    released(a)
    ext.scale(a, 2.0)  # an exclusive borrow again: nothing was left held
    np.testing.assert_array_equal(a, [-2, 2, 2])
    e = pyxbuf.exporter([2], "f")
    rce = sys.getrefcount(e)
    with pytest.raises(RuntimeError):
        ext.fail_after_write(e)
    assert sys.getrefcount(e) == rce
    ext.scale(e, 1.0)


def test_release_when_a_later_argument_fails(ext):
    a = np.zeros(3, np.float32)
    rc = sys.getrefcount(a)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        ext.add_into(a, "not an array")
    with pytest.raises(TypeError, match="format is 'd'"):
        ext.add_into(a, np.zeros(3))
    with pytest.raises(ValueError, match="must have the same shape"):
        ext.add_into(a, np.zeros(4, np.float32))
    assert sys.getrefcount(a) == rc
    released(a)


def test_no_leak_over_many_calls(ext):
    a = np.arange(1000, dtype=np.float32)
    bf = np.zeros(10, ml_dtypes.bfloat16)
    rc, rcb = sys.getrefcount(a), sys.getrefcount(bf)
    for _ in range(200):
        ext.sum(a)
        ext.scale(a, 1.0)
        ext.sum_bf16(bf)
        with pytest.raises(BufferError):
            ext.add_into(a, a)
        with pytest.raises(TypeError):  # another item type
            ext.sum(bf)
    assert (sys.getrefcount(a), sys.getrefcount(bf)) == (rc, rcb)


def test_by_reference_without_the_gil(ext):
    a = np.arange(10, dtype=np.float32)
    rc = sys.getrefcount(a)
    assert ext.sum_by_reference(a) == 45.0
    assert sys.getrefcount(a) == rc
    released(a)


def test_returning_a_view_returns_its_object(ext):
    a = np.zeros(2, np.float32)
    rc = sys.getrefcount(a)
    assert ext.identity(a) is a
    assert sys.getrefcount(a) == rc


def test_signature_names_the_argument_type(ext):
    assert "x: collections.abc.Buffer" in ext.sum.__doc__


@pytest.mark.parametrize("wrap", [np.asarray, memoryview, np.from_dlpack],
                         ids=["np.asarray", "memoryview", "np.from_dlpack"])
def test_own_array_passed_back_while_python_holds_a_view(ext, wrap):
    """Issue 38, part 2: a pyxbuf array looked at from Python, passed back
    to a view<const float> argument: granted tracked while the Python view
    lives, enforced after."""
    e = pyxbuf.exporter([3], "f")
    seen = wrap(e)
    assert ext.describe_shared(e)[4:] == ("native", (True, False, True))
    assert ext.sum(e) == 0.0
    ext.scale(e, 2.0)  # exclusive, tracked too
    with pytest.raises(BufferError, match="held by another view in this process"):
        ext.add_into(seen, e)  # one memory, borrowed twice through two objects
    del seen
    gc.collect()
    assert ext.describe_shared(e)[4:] == ("native", (True, False, False))
