"""Issue 50, item 1: an item-type refusal (a format or itemsize that is not
the consumer's type, or a dimension count a typed consumer fixes) is
pyxbuf.ItemTypeError, one class deriving from TypeError (pyxbuf's rule) and
BufferError (what PyO3's PyBuffer raised, which its users catch), shared by
every copy of libpyxbuf in the process through sys.modules['_pyxbuf_shared']
(DESIGN.md, Errors). Checked through every binding built here: the `pyxbuf`
module (Rust) and rust/examples/sum (PyXBuffer arguments), the C test
extension and a second C copy, the C++ modules on pyxbuf.hpp. The Cython
XView and the nanobind / pybind11 casters are checked by make test-wheel
(wheel_consumers/check_cython.py, check_cxx_bindings.py)."""

import array
import gc
import os
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import _pyxbuf_cxx_a as cxx_a
import _pyxbuf_cxx_b as cxx_b
import _pyxbuf_second_copy as second
import _pyxbuf_testext as t
import pyxbuf

CATCHERS = [TypeError, BufferError, pyxbuf.ItemTypeError]


def test_one_class_deriving_from_both():
    cls = pyxbuf.ItemTypeError
    assert issubclass(cls, TypeError) and issubclass(cls, BufferError)
    assert cls.__bases__ == (TypeError, BufferError)
    assert (cls.__module__, cls.__name__) == ("pyxbuf", "ItemTypeError")
    assert "PyO3's PyBuffer, which raises BufferError" in cls.__doc__
    assert sys.modules["_pyxbuf_shared"].ItemTypeError is cls
    assert "ItemTypeError" in pyxbuf.__all__


def test_every_copy_in_the_process_has_the_same_class():
    # The pyxbuf module, the C test extension, a second static copy, two C++
    # modules: five copies of libpyxbuf, one class.
    assert t.item_type_error() is pyxbuf.ItemTypeError
    assert second.item_type_error() is pyxbuf.ItemTypeError
    assert cxx_a.item_type_error() is pyxbuf.ItemTypeError
    assert cxx_b.item_type_error() is pyxbuf.ItemTypeError


@pytest.mark.parametrize("caught", CATCHERS, ids=lambda c: c.__name__)
def test_c_consumer_raises_it(caught):
    ints = array.array("i", [1, 2])
    rc = sys.getrefcount(ints)
    with pytest.raises(caught, match=r"holds items of format 'i', expected format 'd'") as info:
        t.expect_format(ints, "d")
    assert type(info.value) is pyxbuf.ItemTypeError
    assert t.expect_format(ints, "i") is True
    del info
    assert sys.getrefcount(ints) == rc


@pytest.mark.parametrize("module", [cxx_a, cxx_b], ids=["a", "b"])
@pytest.mark.parametrize("caught", CATCHERS, ids=lambda c: c.__name__)
def test_cxx_view_raises_it(module, caught):
    d = np.zeros(3)
    with pytest.raises(caught, match=r"the buffer's format is 'd', expected 'f' \(4-byte items\)") as info:
        module.sum_raw(d)
    assert type(info.value) is pyxbuf.ItemTypeError
    assert module.sum_raw(np.ones(3, np.float32)) == 3.0
    # get() throws pyxbuf::error, whose what() names the Python class.
    with pytest.raises(BufferError, match=r"^ItemTypeError: pyxbuf::view: the buffer's format is 'd'"):
        module.sum(d)


@pytest.mark.parametrize("caught", CATCHERS, ids=lambda c: c.__name__)
def test_rust_pyxbuffer_raises_it(caught):
    s = pytest.importorskip("pyxbuf_sum")
    ints = array.array("i", [1, 2])
    # A PyXBuffer<f32> argument: PyO3 keeps the class and adds a note.
    with pytest.raises(caught, match=r"format 'i' \(4 bytes each\), but PyXBuffer<f32> needs "
                                     r"format 'f'") as info:
        s.sum_host_f32(ints)
    assert type(info.value) is pyxbuf.ItemTypeError
    assert "while processing 'x'" in info.value.__notes__
    # Through a Request, inside the function.
    with pytest.raises(caught, match=r"format 'd'.*format 'f'"):
        s.sum_f32(np.zeros(3))
    with pytest.raises(caught, match=r"\[ml_dtypes\$bfloat16\]"):
        s.sum_bf16(np.zeros(3, np.float16))


def test_not_an_array_stays_a_plain_type_error():
    """DESIGN's rule: an object pyxbuf cannot read at all is a TypeError, not
    an item-type refusal (and not a BufferError)."""
    for call in (lambda: t.expect_format(5, "d"), lambda: cxx_a.sum_raw(5)):
        with pytest.raises(TypeError, match="exports no buffer pyxbuf can read") as info:
            call()
        assert not isinstance(info.value, BufferError)


def test_the_accessor_leaks_nothing():
    cls = pyxbuf.ItemTypeError
    gc.collect()  # earlier tests' exceptions, each holding the class
    rc = sys.getrefcount(cls)
    for _ in range(10000):
        t.item_type_error()
        second.item_type_error()
        cxx_a.item_type_error()
    for _ in range(1000):
        with pytest.raises(cls):
            t.expect_format(b"ab", "d")
        with pytest.raises(cls):
            cxx_b.sum_raw(b"abcd")
    gc.collect()
    # A class's count is deferred on free-threaded builds (3.14t): there
    # sys.getrefcount is no count, and the loops above check the rest.
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        assert sys.getrefcount(cls) == rc


@pytest.mark.parametrize("first", ["_pyxbuf_cxx_a", "_pyxbuf_second_copy", "_pyxbuf_testext",
                                   "pyxbuf"])
def test_whichever_copy_comes_first_makes_the_one_class(first):
    code = (
        f"import {first} as m, sys\n"
        "made = m.ItemTypeError if m.__name__ == 'pyxbuf' else m.item_type_error()\n"
        "assert sys.modules['_pyxbuf_shared'].ItemTypeError is made\n"
        "import pyxbuf, _pyxbuf_cxx_b, _pyxbuf_second_copy, _pyxbuf_testext\n"
        "assert pyxbuf.ItemTypeError is made\n"
        "assert _pyxbuf_cxx_b.item_type_error() is made\n"
        "assert _pyxbuf_second_copy.item_type_error() is made\n"
        "assert _pyxbuf_testext.item_type_error() is made\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
