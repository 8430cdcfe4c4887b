"""What the guides' first extensions do (docs/guides/*.md; the README shows
them), checked after
readme_blocks.py has built them as written (make test-readme runs it in the
scratch venv, in the scratch folder). An example that builds but silently
does nothing (a scale that skips strided arrays, a total that reads
garbage) fails here, whatever its own doctest says.

- myext: the C guide's extension, installed by setuptools (pip install
  --no-build-isolation ./myext). (A CMake consumer is make test-wheel's.)
- myext_rs: the Rust guide's PyO3 extension (maturin develop), taking
  PyXBuffer<f32> and PyXBuffer1<f32, Exclusive> arguments.
- cyext: the Cython guide's extension (setuptools + cythonize), a typed
  memoryview through XView.
- myext_cpp: the C++ guide's nanobind extension (scikit-build-core), taking
  pyxbuf::view<const float> and pyxbuf::view<float> arguments.
- myext_pb: the same functions through pybind11 (scikit-build-core).
"""


import numpy as np
import pytest

import pyxbuf


def c_checks(myext):
    a = np.arange(6, dtype=np.float32)
    assert myext.total(a) == 15.0
    assert myext.total(a[::2]) == 6.0  # strided, read in place
    assert myext.total(a[::-1]) == 15.0  # negative stride
    assert myext.total(pyxbuf.exporter([3], "f")) == 0.0  # the native path
    with pytest.raises(TypeError, match="float32"):
        myext.total(np.zeros(3))
    with pytest.raises(TypeError, match="1-D"):
        myext.total(np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError):
        myext.total([1.0, 2.0])  # no buffer at all


def test_c_extension_from_setuptools():
    import myext

    assert "site-packages" in myext.__file__, myext.__file__
    c_checks(myext)


def test_rust_total_reads_any_strides():
    from myext_rs import total

    a = np.arange(12, dtype=np.float32)
    assert total(a) == 66.0
    assert total(a[::2]) == 30.0
    assert total(a[::-3]) == 11 + 8 + 5 + 2
    assert total(a.reshape(3, 4)[:, ::2]) == 0 + 2 + 4 + 6 + 8 + 10  # 2-D, strided


def test_rust_scale_doubles_every_other_element():
    from myext_rs import scale

    a = np.arange(8, dtype=np.float32)
    assert scale(a[::2], 2.0) is None
    assert a.tolist() == [0.0, 1.0, 4.0, 3.0, 8.0, 5.0, 12.0, 7.0]
    scale(a, 0.5)  # contiguous too
    assert a.tolist() == [0.0, 0.5, 2.0, 1.5, 4.0, 2.5, 6.0, 3.5]


def test_rust_scale_refuses_two_dimensions_naming_the_argument():
    from myext_rs import scale

    b = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="expected a 1-dimensional array, found 2 dimensions") as e:
        scale(b, 2.0)
    # PyO3 names the argument in a note on the exception (shown by tracebacks).
    assert getattr(e.value, "__notes__", []) == ["while processing 'x'"], e.value
    assert b.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_rust_scale_takes_an_exclusive_borrow():
    from myext_rs import scale

    a = np.ones(4, np.float32)
    held = pyxbuf.from_dlpack(a)  # a shared (tracked) borrow of a, alive
    with pytest.raises(BufferError):
        scale(a, 2.0)
    del held
    scale(a, 2.0)
    assert a.tolist() == [2.0] * 4


def test_cython_total_reads_any_strides_and_gives_the_grant_back():
    import cyext

    assert "site-packages" in cyext.__file__, cyext.__file__
    a = np.arange(12, dtype=np.float32)
    assert cyext.total(a) == 66.0
    assert cyext.total(a[::-3]) == 11 + 8 + 5 + 2  # strided, read in place
    assert cyext.total(pyxbuf.exporter([3], "f")) == 0.0  # the native path
    with pytest.raises(ValueError, match="Buffer dtype mismatch"):
        cyext.total(np.zeros(3))
    with pytest.raises(ValueError, match="Buffer has wrong number of dimensions"):
        cyext.total(np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError):
        cyext.total([1.0, 2.0])  # no buffer at all
    assert pyxbuf.live_borrows() == 0  # every shared grant was given back


def test_cpp_total_reads_any_strides():
    import myext_cpp

    a = np.arange(12, dtype=np.float32)
    assert myext_cpp.total(a) == 66.0
    assert myext_cpp.total(a[::-3]) == 11 + 8 + 5 + 2
    assert myext_cpp.total(a.reshape(3, 4)[:, ::2]) == 0 + 2 + 4 + 6 + 8 + 10
    assert myext_cpp.total(pyxbuf.exporter([3], "f")) == 0.0  # the native path
    with pytest.raises(TypeError, match="format is 'd', expected 'f'"):
        myext_cpp.total(np.zeros(3))  # float64: pyxbuf's refusal, not nanobind's
    assert pyxbuf.live_borrows() == 0


def test_cpp_add_into_writes_through_an_exclusive_borrow():
    import myext_cpp

    a = np.arange(8, dtype=np.float32)
    myext_cpp.add_into(a[::2], a[1::2])  # interleaved halves: no conflict
    assert a.tolist() == [1.0, 1.0, 5.0, 3.0, 9.0, 5.0, 13.0, 7.0]
    with pytest.raises(BufferError, match="exclusive"):
        myext_cpp.add_into(a, a)
    with pytest.raises(ValueError, match="one length"):
        myext_cpp.add_into(a[:3], a[3:7])
    r = np.ones(3, np.float32)
    r.flags.writeable = False
    with pytest.raises(BufferError):
        myext_cpp.add_into(r, np.ones(3, np.float32))  # read-only memory
    assert pyxbuf.live_borrows() == 0


@pytest.mark.parametrize("module", ["myext_cpp", "myext_pb"])
def test_cpp_bindings_agree(module):
    """nanobind's and pybind11's quick starts: the same functions, the same
    answers and refusals (an item type: TypeError; memory: BufferError)."""
    ext = __import__(module)
    a = np.arange(8, dtype=np.float32)
    assert ext.total(a[::-2]) == 7 + 5 + 3 + 1
    ext.add_into(a[::2], a[1::2])
    assert a.tolist() == [1.0, 1.0, 5.0, 3.0, 9.0, 5.0, 13.0, 7.0]
    with pytest.raises(TypeError, match="format is 'd', expected 'f'"):
        ext.total(np.zeros(3))
    with pytest.raises(BufferError, match="exclusive"):
        ext.add_into(a, a)
    r = np.ones(3, np.float32)
    r.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        ext.add_into(r, np.ones(3, np.float32))
    assert pyxbuf.live_borrows() == 0


def test_rust_bfloat16_total_and_the_hint_naming_its_type():
    import ml_dtypes
    from myext_rs import total, total_bf16

    b = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16)
    assert total_bf16(b) == 15.0
    assert total_bf16(b[::-2]) == 5 + 3 + 1
    with pytest.raises(TypeError, match=r"use pyxbuf::bf16 and PyXBuffer<bf16>"):
        total(b)
    with pytest.raises(TypeError, match=r"read its own items: PyXBuffer<f64>"):
        total(np.zeros(2))
