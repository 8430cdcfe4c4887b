"""Messages in the language of the binding (issue 50, item 9): a refusal
names the fix in the terms of the binding whose copy of libpyxbuf raises it.
The pyxbuf module's copy speaks Python (pyxbuf.to_device(x, "cpu")), a C
extension's C (request PYXBUF_DEVICE), a C++ extension's pyxbuf::view. The
Rust crate's are in rust/pyxbuf/tests/binding_messages.rs, Cython's in the
wheel consumers (check_cython.py)."""

import numpy as np
import pytest

import _pyxbuf_cxx_a as cxx
import _pyxbuf_testext as t
import pyxbuf

DEV0 = (t.PYXBUF_DL_EXT_DEV, 0)
C_DEVICE_FIX = "request PYXBUF_DEVICE and read view->device"
PY_DEVICE_FIX = 'pyxbuf.to_device(x, "cpu")'
CXX_DEVICE_FIX = "pyxbuf::view<T>::get(obj, PyBUF_RECORDS_RO | PYXBUF_DEVICE)"


def device_tensor():
    """A DLPack-only producer of emulated device memory: the consumer's own
    copy of libpyxbuf imports it and refuses (dlpack_import.c)."""
    return t.DLPackProducer(t.to_device(np.arange(4, dtype=np.float32), DEV0))


def test_the_pyxbuf_module_names_pythons_fix():
    if pyxbuf.EMULATED_DEVICE is None:
        pytest.skip("this pyxbuf module has no emulated device")
    d = pyxbuf.to_device(np.ones(4, np.float32), pyxbuf.EMULATED_DEVICE)
    for read in (memoryview, np.asarray):
        with pytest.raises(BufferError) as e:
            read(d)
        msg = str(e.value)
        assert "holds memory on device 'ext_dev:0'" in msg and PY_DEVICE_FIX in msg, msg
        assert "view->device" not in msg and "PYXBUF_DEVICE" not in msg, msg


def test_the_pyxbuf_module_names_pythons_fix_for_a_device_without_backend():
    with pytest.raises(ValueError) as e:
        pyxbuf.to_device(np.ones(3), "rocm:0")
    msg = str(e.value)
    assert "no pyxbuf backend for device type 10 (rocm)" in msg, msg
    assert "pyxbuf.EMULATED_DEVICE" in msg and "pyxbuf_backend_register" not in msg, msg


def test_the_pyxbuf_module_names_pythons_borrow_flag():
    with pytest.raises(BufferError) as e:
        pyxbuf.inspect(bytearray(4), flags=pyxbuf.PYXBUF_BORROW_SHARED | t.PyBUF_WRITABLE)
    assert "ask for pyxbuf.PYXBUF_BORROW_EXCLUSIVE to write" in str(e.value), str(e.value)


def test_a_c_extension_names_the_c_fix():
    with pytest.raises(BufferError) as e:
        t.acquire(device_tensor(), t.PyBUF_RECORDS_RO)
    msg = str(e.value)
    assert C_DEVICE_FIX in msg and PY_DEVICE_FIX not in msg, msg


def test_a_cxx_extension_names_pyxbuf_view():
    with pytest.raises(BufferError) as e:
        cxx.sum(device_tensor())
    msg = str(e.value)
    assert CXX_DEVICE_FIX in msg, msg
    assert PY_DEVICE_FIX in msg  # and the Python caller's fix beside it
    assert "view->device" not in msg, msg
