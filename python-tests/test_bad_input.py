"""The bad-input table: producers that lie or break a protocol, one row each.

Every row builds a fresh producer, asks pyxbuf_get for a view and expects the
documented exception (BufferError for a refused or invalid buffer, TypeError
for an object with no protocol, ValueError for a bad request, the producer's
own type for errors that are not refusals) with a message naming the cause.
After each row: no crash, the producer's reference count is what it was, and
no emulated-device allocation outlives the row.

What pyxbuf refuses at acquisition, and where:
- extended-field lies (flags, device, grants) and ndim outside 0..64: every
  native producer (c/acquire.c validate_extended, validate_classic; ndim also on
  the classic path);
- classic fields that disagree (itemsize not positive or not the size of a
  plain native format code, NULL shape for a PyBUF_ND request, negative
  shape, len != product(shape) * itemsize): native (extended) producers only
  (c/acquire.c validate_native_layout). The classic path is the hot path and
  its producers (CPython, NumPy, ctypes) are consistent -- except ctypes'
  documented format quirks ('<l' is 8 bytes, '<u' 4), which is why a
  prefixed format is never checked against the itemsize: pyxbuf trusts the
  itemsize and the copy functions check len again (c/device/view_device.c
  pyxbuf__check_copy_size);
- DLPack and CAI contents: the bridges (c/bridges/dlpack_import.c fill_view,
  c/bridges/cai.c), device spans at both ends by the backend's pointer query.
"""

import gc
import re
import sys

import numpy as np
import pytest

import _pyxbuf_testext as t

EXT = t.PYXBUF_DL_EXT_DEV
RO = t.PyBUF_RECORDS_RO
FULL_RO = t.PyBUF_FULL_RO
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
LIAR = "'_pyxbuf_testext.Liar'"
INVALID = "is invalid: "


def host():
    return np.arange(16, dtype=np.float32)


def device(nbytes=64):
    """An exporter of emulated-device memory and its device pointer."""
    e = t.exporter("B", (nbytes,), device=(EXT, 0))
    return e, t.inspect(e, DEVICE_VIEW)["buf"]


class CAI:
    """Speaks only __cuda_array_interface__ (a dict built per access, as
    CuPy's); `memory` keeps the device allocation alive."""

    def __init__(self, memory, iface):
        self.memory = memory
        self.iface = iface

    @property
    def __cuda_array_interface__(self):
        if isinstance(self.iface, dict):
            return dict(self.iface)
        return self.iface


class CAIRaises:
    @property
    def __cuda_array_interface__(self):
        raise KeyError("no interface today")


def cai(drop=(), **over):
    e, ptr = device()
    iface = dict(shape=(16,), typestr="<f4", data=(ptr, False), version=3, strides=None)
    iface.update(over)
    for key in drop:
        del iface[key]
    return CAI(e, iface)


def cai_raw(value):
    return CAI(None, value)


class ClassicLiar(t.Liar):
    """The same lies through the classic path (no extended flags)."""

    __pyxbuf_supported_flags__ = 0


class NotCapsule(t.DLPackProducer):
    def __dlpack__(self, **kwargs):
        return 42


class DLPackRaises(t.DLPackProducer):
    def __dlpack__(self, **kwargs):
        raise RuntimeError("the producer's __dlpack__ failed")


class ConsumedCapsule(t.DLPackProducer):
    def __dlpack__(self, **kwargs):
        capsule = super().__dlpack__(**kwargs)
        t.capsule_consume(capsule)
        return capsule


class NoProtocol:
    pass


class ReservedSupportedFlags(bytearray):
    __pyxbuf_supported_flags__ = 1 << 29

    def __init__(self):
        super().__init__(b"x")


class BadSupportedFlags:
    __pyxbuf_supported_flags__ = "all of them"

    def __buffer__(self, flags):
        return memoryview(b"x")


def dl(**kw):
    return lambda: t.DLPackProducer(host(), **kw)


def dl_dev(**kw):
    def make():
        e, _ = device()
        return t.DLPackProducer(e, **kw)

    return make


def liar(mode, cls=t.Liar):
    return lambda: cls(mode)


# (id, factory, request flags, exception, regex the message must match)
ROWS = [
    # --- native (extended) producers: lies about the extended fields --------
    ("liar-unrequested-flag", liar("unrequested_flag"), FULL_RO, BufferError,
     "set extended flags that were not requested"),
    ("liar-device-without-being-asked", liar("device_unrequested"), FULL_RO, BufferError,
     "set extended flags that were not requested.*PYXBUF_DEVICE"),
    ("liar-device-without-bit", liar("device_without_flag"), FULL_RO | t.PYXBUF_DEVICE,
     BufferError, "set a device without setting (PYXBUF|PyBUF)_DEVICE"),
    ("liar-cpu-device", liar("cpu_device"), FULL_RO | t.PYXBUF_DEVICE, BufferError,
     'reserved device "cpu"'),
    ("liar-unrequested-grant", liar("unrequested_grant"), FULL_RO | t.PYXBUF_BORROW_SHARED,
     BufferError, "granted a borrow that was not requested"),
    ("liar-tracked-without-grant", liar("tracked_alone"), FULL_RO | t.PYXBUF_BORROW_SHARED,
     BufferError, "set PYXBUF_EXT_TRACKED in ext_flags without a shared or exclusive grant"),
    ("liar-readonly-for-writable", liar("readonly_for_writable"), t.PyBUF_FULL, BufferError,
     "read-only memory for a WRITABLE request"),
    ("liar-host-memory-as-device", liar("wrong_device_pointer"), FULL_RO | t.PYXBUF_DEVICE,
     BufferError, "first byte 0x[0-9a-f]+ is not memory of device 'ext_dev:0'"),
    # --- native producers: classic fields that disagree ----------------------
    ("liar-ndim-65", liar("ndim_65"), FULL_RO, BufferError,
     r"ndim is negative or above PYXBUF_MAX_NDIM \(64\)"),
    ("liar-ndim-negative", liar("ndim_negative"), FULL_RO, BufferError,
     r"ndim is negative or above PYXBUF_MAX_NDIM \(64\)"),
    ("liar-ndim-65-device", liar("ndim_65_device"), FULL_RO | t.PYXBUF_DEVICE, BufferError,
     r"ndim is negative or above PYXBUF_MAX_NDIM \(64\)"),
    ("liar-len-disagrees-with-shape", liar("len_disagrees"), FULL_RO, BufferError,
     r"len 15 disagrees with its shape times itemsize 1 \(16 bytes\)"),
    ("liar-len-disagrees-simple", liar("len_disagrees"), t.PyBUF_ND, BufferError,
     "len 15 disagrees with its shape"),
    ("liar-itemsize-vs-format", liar("itemsize_vs_format"), FULL_RO, BufferError,
     r"itemsize 1 disagrees with its format 'i' \(4 bytes\)"),
    ("liar-negative-shape", liar("negative_shape"), FULL_RO, BufferError,
     r"shape\[0\] = -16 is negative"),
    ("liar-itemsize-zero", liar("itemsize_zero"), FULL_RO, BufferError,
     "itemsize 0 is not positive"),
    ("liar-null-shape-for-nd", liar("null_shape"), t.PyBUF_ND, BufferError,
     "shape is NULL though PyBUF_ND was requested"),
    ("liar-shape-overflows", liar("shape_overflows"), FULL_RO, BufferError,
     "shape times itemsize 2 overflows"),
    ("liar-getbuffer-raises", liar("raises"), FULL_RO, BufferError,
     "native extended buffer of .* refused the request .*: the liar refuses"),
    ("liar-fails-without-exception", liar("fails_silently"), FULL_RO, BufferError,
     "failed the request .* without setting an exception"),
    # --- the classic path: what it checks (a compare or two) -----------------
    ("classic-liar-ndim-65", liar("ndim_65", ClassicLiar), FULL_RO, BufferError,
     r"ndim is negative or above PYXBUF_MAX_NDIM \(64\)"),
    ("classic-liar-ndim-negative", liar("ndim_negative", ClassicLiar), FULL_RO, BufferError,
     r"ndim is negative or above PYXBUF_MAX_NDIM \(64\)"),
    ("classic-liar-readonly-for-writable", liar("readonly_for_writable", ClassicLiar),
     t.PyBUF_FULL, BufferError, "read-only memory for a WRITABLE request"),
    ("classic-liar-fails-without-exception", liar("fails_silently", ClassicLiar), FULL_RO,
     BufferError, "classic buffer of .* failed the request .* without setting an exception"),
    ("classic-bytes-writable", lambda: b"immutable", t.PyBUF_WRITABLE, BufferError,
     "classic buffer of 'bytes' refused the request WRITABLE"),
    ("classic-numpy-not-contiguous", lambda: np.arange(16.0)[::2], t.PyBUF_C_CONTIGUOUS,
     BufferError, "refused the request .*C_CONTIGUOUS.*not C-contiguous"),
    ("no-protocol-at-all", NoProtocol, RO, TypeError,
     "'NoProtocol' exports no buffer pyxbuf can read"),
    ("supported-flags-reserved-bits", ReservedSupportedFlags, RO, ValueError,
     "supported flags 536870912 for type 'ReservedSupportedFlags' are invalid.*bits 29 and "
     "up are reserved"),
    ("supported-flags-not-an-int", BadSupportedFlags, RO, TypeError,
     "__pyxbuf_supported_flags__ of type 'BadSupportedFlags' must be an int"),
    # --- DLPack ---------------------------------------------------------------
    ("dlpack-major-version-2", dl(major=2), RO, BufferError,
     r"DLPack tensor has version 2\.3; pyxbuf reads major version 1"),
    ("dlpack-ndim-negative", dl(ndim=-1), RO, BufferError,
     r"DLPack tensor has -1 dimensions; pyxbuf accepts 0\.\.64"),
    ("dlpack-ndim-65", dl(ndim=65, shape=[1] * 65), RO, BufferError,
     r"DLPack tensor has 65 dimensions; pyxbuf accepts 0\.\.64"),
    ("dlpack-negative-shape", dl(shape=[-4], strides=[1]), RO, BufferError,
     r"shape\[0\] = -4 is invalid"),
    ("dlpack-vector-lanes", dl(lanes=4), RO, BufferError, "lanes must be 1"),
    ("dlpack-unknown-dtype-code", dl(dtype_code=99, bits=32), RO, BufferError,
     "dtype code 99 is unknown"),
    ("dlpack-odd-sub-byte-bits", dl(dtype_code=2, bits=7), RO, BufferError,
     "sub-byte type kDLFloat of 7 bits is not supported"),
    ("dlpack-wrong-capsule-name", dl(capsule_name="bogus"), RO, BufferError,
     "returned a capsule named 'bogus'"),
    ("dlpack-not-a-capsule", lambda: NotCapsule(host()), RO, BufferError,
     "returned 'int', not a DLPack capsule"),
    ("dlpack-dunder-raises", lambda: DLPackRaises(host()), RO, RuntimeError,
     "DLPack buffer of 'DLPackRaises' refused the request .*__dlpack__ failed"),
    ("dlpack-consumed-capsule", lambda: ConsumedCapsule(host()), RO, BufferError,
     "already consumed"),
    ("dlpack-read-only-for-writable", dl(read_only=True), t.PyBUF_RECORDS, BufferError,
     "is read-only; the request asks for PyBUF_WRITABLE"),
    ("dlpack-copy-for-writable", dl(is_copied=True), t.PyBUF_RECORDS, BufferError,
     "exported a copy .* the request asks for PyBUF_WRITABLE"),
    ("dlpack-null-data-with-items", None, RO, BufferError, "NULL address"),
    ("dlpack-device-without-being-asked", dl_dev(), RO, BufferError,
     "holds memory on device 'ext_dev:0', which the host cannot read"),
    ("dlpack-host-memory-claimed-device", dl(device=(EXT, 0)), DEVICE_VIEW, BufferError,
     "first byte 0x[0-9a-f]+ is not memory of device 'ext_dev:0'"),
    ("dlpack-device-wrong-ordinal", dl_dev(device=(EXT, 1)), DEVICE_VIEW, BufferError,
     "claims device 'ext_dev:1' but its first byte 0x[0-9a-f]+ is on 'ext_dev:0'"),
    ("dlpack-device-strides-before-allocation", dl_dev(shape=[4], strides=[-8]), DEVICE_VIEW,
     BufferError, "first byte 0x[0-9a-f]+ is not memory of device 'ext_dev:0'"),
    ("dlpack-device-strides-past-allocation", dl_dev(shape=[4], strides=[1 << 16]), DEVICE_VIEW,
     BufferError, "last byte 0x[0-9a-f]+ is not memory of device 'ext_dev:0'"),
    ("dlpack-device-len-past-allocation", dl_dev(shape=[1 << 20]), DEVICE_VIEW, BufferError,
     "last byte 0x[0-9a-f]+ is not memory of device 'ext_dev:0'"),
    ("dlpack-byte-offset-wraps", dl_dev(byte_offset=(1 << 64) - 8), DEVICE_VIEW, BufferError,
     "byte_offset 18446744073709551608 overflows its data pointer"),
    ("dlpack-strides-wrap-the-span", dl_dev(shape=[2, 2, 2], strides=[(2**64 + 2) // 3] * 3),
     DEVICE_VIEW, BufferError, "overflow"),
    # found by fuzz_dlpack: the span's first byte lies below address 0
    ("dlpack-device-span-below-address-zero", dl_dev(shape=[2], strides=[-(1 << 60)]),
     DEVICE_VIEW, BufferError, "wrap around the address space"),
    # found by fuzz_dlpack: the span's low end is exactly PY_SSIZE_T_MIN
    ("dlpack-span-low-end-is-ssize-min", dl(shape=[5, 2], strides=[-(1 << 59), 1]), RO,
     BufferError, "strides of .* overflow the address space"),
    # --- __cuda_array_interface__ ---------------------------------------------
    ("cai-missing-shape", lambda: cai(drop=("shape",)), DEVICE_VIEW, BufferError,
     "'shape'"),
    ("cai-missing-typestr", lambda: cai(drop=("typestr",)), DEVICE_VIEW, BufferError,
     "'typestr'"),
    ("cai-missing-data", lambda: cai(drop=("data",)), DEVICE_VIEW, BufferError, "'data'"),
    ("cai-missing-version", lambda: cai(drop=("version",)), DEVICE_VIEW, BufferError,
     "'version'"),
    ("cai-shape-not-a-tuple", lambda: cai(shape=16), DEVICE_VIEW, BufferError, "'shape'"),
    ("cai-shape-of-strings", lambda: cai(shape=("16",)), DEVICE_VIEW, BufferError, "'shape'"),
    ("cai-negative-shape", lambda: cai(shape=(-16,)), DEVICE_VIEW, BufferError, "shape"),
    ("cai-typestr-not-a-str", lambda: cai(typestr=4), DEVICE_VIEW, BufferError, "typestr"),
    ("cai-typestr-unknown", lambda: cai(typestr="<x4"), DEVICE_VIEW, BufferError, "<x4"),
    ("cai-data-not-a-tuple", lambda: cai(data=12345), DEVICE_VIEW, BufferError, "'data'"),
    ("cai-data-pointer-not-an-int", lambda: cai(data=("0x10", False)), DEVICE_VIEW,
     BufferError, "'data'"),
    ("cai-strides-wrong-length", lambda: cai(strides=(4, 4)), DEVICE_VIEW, BufferError,
     "strides"),
    ("cai-strides-past-allocation", lambda: cai(strides=(64,)), DEVICE_VIEW, BufferError,
     "last byte 0x[0-9a-f]+ is not memory of device"),
    ("cai-stream-zero", lambda: cai(stream=0), DEVICE_VIEW, BufferError, "'stream'"),
    ("cai-not-a-dict", lambda: cai_raw([("shape", (16,))]), DEVICE_VIEW, BufferError,
     "must be a dict, found 'list'"),
    ("cai-host-pointer", lambda: cai(data=(host().ctypes.data, False)), DEVICE_VIEW,
     BufferError, "is not device memory"),
    ("cai-property-raises", CAIRaises, DEVICE_VIEW, KeyError, "no interface today"),
]


def null_data_producer():
    a = host()
    return t.DLPackProducer(a, byte_offset=a.__array_interface__["data"][0])


ROWS = [(r[0], null_data_producer, *r[2:]) if r[1] is None else r for r in ROWS]


@pytest.fixture(autouse=True)
def no_leaked_device_memory():
    gc.collect()
    before = t.emulated_live_allocations()
    yield
    gc.collect()
    assert t.emulated_live_allocations() == before


@pytest.mark.parametrize("make,flags,exc,reason", [r[1:] for r in ROWS],
                         ids=[r[0] for r in ROWS])
def test_bad_input_is_refused(make, flags, exc, reason):
    producer = make()
    before = sys.getrefcount(producer)
    with pytest.raises(exc) as info:
        t.acquire(producer, flags)
    assert info.type is exc  # not a subclass standing in for it
    assert re.search(reason, str(info.value)), str(info.value)
    del info
    gc.collect()
    assert sys.getrefcount(producer) == before
    if isinstance(producer, t.Liar):
        # The producer's view was released once for each one it handed out.
        assert producer.releases == producer.gets or producer.releases == 0
    if isinstance(producer, t.DLPackProducer):
        assert producer.deleted == producer.exported


def test_table_has_at_least_40_rows():
    assert len(ROWS) >= 40
    assert len({r[0] for r in ROWS}) == len(ROWS)


def test_dlpack_deleter_that_raises_is_reported_not_leaked():
    """A deleter that leaves an exception set: pyxbuf reports it through
    sys.unraisablehook at release and keeps no exception pending."""
    p = t.DLPackProducer(host(), deleter_raises=True)
    seen = []
    hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        before = sys.getrefcount(p)
        view = t.acquire(p, RO)
        view.release()
        assert sys.getrefcount(p) == before
    finally:
        sys.unraisablehook = hook
    assert (p.exported, p.deleted) == (1, 1)
    assert len(seen) == 1 and "the DLPack deleter raises" in str(seen[0].exc_value)


def test_dlpack_deleter_that_raises_on_refusal_is_reported():
    """The same deleter when the bridge refuses the tensor: the refusal is
    what the consumer sees, the deleter's error goes to the unraisable hook."""
    p = t.DLPackProducer(host(), deleter_raises=True, lanes=4)
    seen = []
    hook, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        with pytest.raises(BufferError, match="lanes must be 1"):
            t.acquire(p, RO)
    finally:
        sys.unraisablehook = hook
    assert (p.exported, p.deleted) == (1, 1)
    assert len(seen) == 1


def test_fail_without_exception_was_a_system_error():
    """Regression: a producer returning -1 with no exception set used to make
    pyxbuf_get return -1 with no exception (SystemError in the caller)."""
    with pytest.raises(BufferError, match="without setting an exception"):
        t.inspect(t.Liar("fails_silently"), FULL_RO)


def test_native_checks_accept_honest_and_prefixed_formats():
    """The native layout checks do not refuse what is consistent: the honest
    liar, and a pyxbuf exporter that kept ctypes' itemsize under a prefixed
    format ('<u' is 2 bytes by struct, 4 in ctypes)."""
    import ctypes

    assert t.inspect(t.Liar("honest"), FULL_RO)["path"] == "native"
    src = (ctypes.c_wchar * 8)(*"abcdefgh")
    out = t.to_device(src, (EXT, 0))
    info = t.inspect(out, t.PyBUF_FULL_RO | t.PYXBUF_DEVICE)
    assert info["path"] == "native" and info["itemsize"] == 4


def test_strides_that_wrap_the_span_are_refused():
    third = (2**64 + 2) // 3  # 3 * third wraps to 2 in 64 bits
    e = t.exporter("B", (64,), device=(EXT, 0))
    p = t.DLPackProducer(e, shape=[2, 2, 2], strides=[third, third, third])
    with pytest.raises(BufferError, match="overflow"):
        t.acquire(p, DEVICE_VIEW)
    with pytest.raises(BufferError):
        t.copy_to_host(p)


def test_device_length_beyond_the_allocation_is_refused():
    e = t.exporter("B", (64,), device=(EXT, 0))
    p = t.DLPackProducer(e, shape=[1 << 20])  # 1 MiB claimed over 64 bytes
    with pytest.raises(BufferError, match="last byte 0x[0-9a-f]+ is not memory of device 'ext_dev:0'"):
        t.acquire(p, DEVICE_VIEW)


def test_null_data_with_items_is_refused():
    a = np.arange(12, dtype=np.int32)
    ptr = a.__array_interface__["data"][0]
    p = t.DLPackProducer(a, byte_offset=ptr)  # data = NULL, byte_offset = ptr
    with pytest.raises(BufferError, match="NULL address"):
        t.acquire(p, t.PyBUF_RECORDS_RO)


def test_managed_and_pinned_cuda_memory_have_a_backend():
    a = np.arange(4, dtype=np.float32)
    p = t.DLPackProducer(a, device=(13, 0))  # kDLCUDAManaged, host memory here
    # The CUDA backend now serves type 13: without a driver it says so,
    # instead of accepting the pointer unchecked.
    with pytest.raises(BufferError, match="no CUDA driver found|not memory of device"):
        t.acquire(p, DEVICE_VIEW)
