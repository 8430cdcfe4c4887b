"""What BINDINGS.md's quick-start extensions do, checked after
readme_blocks.py has built them as written (make test-readme runs it in the
scratch venv, in the scratch folder), as check_examples.py checks the
README's: an example that builds but does nothing, or reads the wrong bytes,
fails here whatever its own doctest says.

- cyext: the Cython extension (setuptools + cythonize, XView).
- myext_cpp: the nanobind extension (scikit-build-core), taking
  pyxbuf::view<const float> and pyxbuf::view<float> arguments.
"""

import numpy as np
import pytest

import pyxbuf


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
    with pytest.raises(BufferError, match="format"):
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
