"""Sentences of the four specification texts (../shared/specs/) that no other
test would notice breaking. CONFORMANCE.md cites each test here by the row it
guards; the sentence is quoted in the docstring.

Everything runs against the real library through the C test extension; the
ABI test reads a held view's memory with ctypes, as a C consumer compiled
from the proposal's struct (not from pyxbuf.h) would.
"""

import ctypes
import gc

import numpy as np

import _pyxbuf_testext as t

EXT = t.PYXBUF_DL_EXT_DEV
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE


class ProposalBuffer(ctypes.Structure):
    """extended-buffer-protocol.md, "Extended buffer struct": `Py_buffer`
    "until here identical to previous buffer interface", then `int flags;
    int ext_flags = 0; char *device; void *device_info;`."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
        # the proposal's extension
        ("flags", ctypes.c_int),
        ("ext_flags", ctypes.c_int),
        ("device", ctypes.c_char_p),
        ("device_info", ctypes.c_void_p),
    ]


class DeviceInfo(ctypes.Structure):
    """pyxbuf_device_info, the "pyxbuf.dlpack" device's info, as the header
    documents it: a size first, reserved space last."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("sync_event", ctypes.c_void_p),
        ("stream", ctypes.c_int64),
        ("dl_flags", ctypes.c_uint64),
        ("reserved", ctypes.c_int64 * 3),
    ]


def held_fields(view):
    """The held pyxbuf_view inside a _pyxbuf_testext.View (PyObject_HEAD, then
    the view, aligned to 8), read through the proposal's struct."""
    offset = (object.__basicsize__ + 7) // 8 * 8
    return ProposalBuffer.from_address(id(view) + offset)


def test_the_extended_fields_follow_py_buffer_in_the_proposals_order():
    """A1 "If `PyBUF_DEVICE` (or any future extended flag) is passed, the
    structure passed must have a layout of: struct Py_buffer { ... int flags;
    int ext_flags = 0; ... char *device; void *device_info; ... }"; A29/A30:
    the device info carries a version (its size) and reserved space, zero."""
    e = t.exporter("<f", (2, 3), device=(EXT, 2))
    v = t.acquire(e, DEVICE_VIEW)
    try:
        info = v.info()
        raw = held_fields(v)
        assert (raw.buf, raw.len, raw.itemsize, raw.ndim) == (
            info["buf"], info["len"], info["itemsize"], info["ndim"])
        assert raw.format == info["format"].encode()
        assert raw.flags == info["flags"] and raw.flags & t.PYXBUF_DEVICE
        assert raw.ext_flags == info["ext_flags"] == 0  # no borrow asked: "= 0"
        assert raw.device == t.PYXBUF_DEVICE_DLPACK.encode() == b"pyxbuf.dlpack"
        assert raw.device_info == info["device_info"]
        d = DeviceInfo.from_address(raw.device_info)
        assert d.size == ctypes.sizeof(DeviceInfo) == 64
        assert (d.device_type, d.device_id) == (EXT, 2)
        assert d.reserved0 == 0 and list(d.reserved) == [0, 0, 0]
    finally:
        v.release()

    host = np.arange(6, dtype=np.float32)
    v = t.acquire(host, DEVICE_VIEW)
    try:
        raw = held_fields(v)
        assert raw.buf == host.ctypes.data
        assert (raw.flags, raw.ext_flags, raw.device, raw.device_info) == (0, 0, None, None)
    finally:
        v.release()
    del e
    gc.collect()


def test_a_view_without_the_device_bit_is_cpu_memory():
    """A16 (footnote): "it must check `(buf->flags & PyBUF_DEVICE)` and if
    not set, must not access the device specific information and assume a CPU
    buffer." pyxbuf's own consumers (pyxbuf_view_is_host, pyxbuf_view_device)
    answer CPU for a producer that ignored the soft device flag."""
    a = np.arange(4.0)
    got = t.inspect(a, DEVICE_VIEW)
    assert got["requested"] & t.PYXBUF_DEVICE
    assert not got["flags"] & t.PYXBUF_DEVICE
    assert got["device"] is None and got["device_info"] is None
    assert got["is_host"] is True
    assert t.view_device(a) == (t.PYXBUF_DL_CPU, 0)
    assert t.copy_to_host(a) == a.tobytes()


def test_alternatives_keep_the_producers_order_and_the_first_understood_wins():
    """B10 "consumers can and should, stop as soon as they understand the
    first one"; B11 producers "should order their preferred spelling first":
    the writer keeps the order it was given, and the order decides the size."""
    for first, second, size in [("struct$i", "struct$h", 4), ("struct$h", "struct$i", 2)]:
        fmt = f"[{first};{second}]"
        assert t.format_write(fmt) == fmt.encode()
        assert t.format_itemsize(fmt.encode())[0] == size


def test_device_none_is_the_cpu_for_every_creation_function():
    """C6 "Use a default for device=None which is consistent between functions
    within the same library.": an exporter made without a device, or with
    device=None, is on the CPU by every account pyxbuf gives of it."""
    for e in (t.exporter("f", (2,)), t.exporter("f", (2,), device=None)):
        assert e.device == "cpu"
        assert e.__dlpack_device__() == (t.PYXBUF_DL_CPU, 0)
        assert t.view_device(e) == (t.PYXBUF_DL_CPU, 0)
        assert t.inspect(e, DEVICE_VIEW)["is_host"] is True
    # to_device with an explicit device is respected (C4), and "cpu" is a device
    d = t.exporter("B", (3,)).to_device("ext_dev:1")
    assert d.device == "ext_dev:1" and t.view_device(d) == (EXT, 1)
    back = d.to_device("cpu")
    assert back.device == "cpu"
    del d, back
    gc.collect()
