"""Binary compatibility of the extended buffer protocol (cpython/'s patch
series): a C extension compiled against the stock CPython 3.15 headers puts
a classic Py_buffer on its stack and runs unchanged on the patched
interpreter. tools/test-matrix.sh builds stack_buffer.c that way for the
3.15-pep line and points PYXBUF_STOCK_BINARIES at it; elsewhere these tests
skip. (The NumPy wheel the 3.15-pep venv installs is the one built for stock
3.15: every NumPy test in python-tests runs it there.)"""

import array
import io
import mmap
import os
import struct
import sys

import numpy as np
import pytest

import _pyxbuf_testext as t

DIR = os.environ.get("PYXBUF_STOCK_BINARIES")
pytestmark = pytest.mark.skipif(
    not DIR, reason="PYXBUF_STOCK_BINARIES unset: make test-matrix builds the stock-header "
    "extension for the 3.15-pep line")

# nine pointer-sized fields and two ints: the classic (3.11 stable ABI) size
CLASSIC_SIZE = 9 * struct.calcsize("P") + 2 * struct.calcsize("i")

REQUESTS = [t.PyBUF_SIMPLE, t.PyBUF_WRITABLE, t.PyBUF_FORMAT, t.PyBUF_ND, t.PyBUF_STRIDES,
            t.PyBUF_C_CONTIGUOUS, t.PyBUF_ANY_CONTIGUOUS, t.PyBUF_INDIRECT,
            t.PyBUF_RECORDS_RO, t.PyBUF_FULL_RO, t.PyBUF_FULL]


@pytest.fixture(scope="module")
def stock():
    sys.path.insert(0, DIR)
    try:
        import _stock_stack_buffer
    finally:
        sys.path.remove(DIR)
    return _stock_stack_buffer


def producers():
    arr = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {
        "bytes": b"0123456789",
        "bytearray": bytearray(b"0123456789"),
        "memoryview-cast": memoryview(bytearray(range(24))).cast("i", [2, 3]),
        "array": array.array("d", [1.0, 2.0, 3.0]),
        "bytesio": io.BytesIO(b"bytesio").getbuffer(),
        "mmap": mmap.mmap(-1, 32),
        "numpy-c": arr,
        "numpy-f": np.asfortranarray(arr),
        "numpy-strided": arr[::2, ::3],
        "numpy-0d": np.array(3.5),
        "numpy-readonly": np.frombuffer(b"\x01\x02\x03\x04", dtype=np.uint8),
        "pyxbuf-exporter": t.exporter("<i", (3, 4)),
    }


def test_compiled_against_the_classic_struct(stock):
    size, length = stock.getbuffer(b"abc", t.PyBUF_SIMPLE)
    assert (size, length) == (CLASSIC_SIZE, 3)


@pytest.mark.parametrize("name", list(producers()))
def test_getbuffer_writes_nothing_past_the_classic_struct(stock, name):
    obj = producers()[name]
    served = 0
    for flags in REQUESTS:
        try:
            size, length = stock.getbuffer(obj, flags)
        except (BufferError, ValueError):
            # the producer's refusal (NumPy's is a ValueError: writable on
            # read-only memory, contiguity it does not have); guard intact
            continue
        served += 1
        assert size == CLASSIC_SIZE
        assert length == memoryview(obj).nbytes
    assert served >= 3


@pytest.mark.parametrize("name", list(producers()))
def test_functions_reading_a_stack_view(stock, name):
    obj = producers()[name]
    assert stock.copy(obj) == memoryview(obj).tobytes()


@pytest.mark.parametrize("flags", [t.PyBUF_SIMPLE, t.PyBUF_FULL_RO])
def test_a_view_filled_by_hand(stock, flags):
    assert stock.fill_info(flags) == b"filled by hand"
