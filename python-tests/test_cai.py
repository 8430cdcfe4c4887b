"""The __cuda_array_interface__ (version 3) bridge.

CAI producers here are plain Python classes exposing the dict, as Numba's
device arrays do; their pointers are memory of pyxbuf's guarded emulated
device (kDLExtDev, a PROT_NONE mapping: every byte checked went through the
backend). Streams of the emulated device are deterministic queues: a read that
does not wait for the producer's event sees the poison of fresh memory (0xDB)
every time. On a GPU machine the same dicts point at real CUDA memory, and
CuPy / PyTorch CUDA tensors are read through their own dicts.
"""

import gc
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import _pyxbuf_testext as t
from cai_producers import CAI

EXT = t.PYXBUF_DL_EXT_DEV
CUDA = t.PYXBUF_DL_CUDA
DEV0, DEV1 = (EXT, 0), (EXT, 1)
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
POISON = 0xDB  # every byte of fresh emulated-device memory


@pytest.fixture(autouse=True)
def no_leaked_device_memory():
    gc.collect()  # what earlier tests left to the collector (free-threaded builds run it later)
    before = t.emulated_live_allocations()
    yield
    gc.collect()
    assert t.emulated_live_allocations() == before


def upload(host, device=DEV0):
    """Copy a host array's bytes to `device`: (exporter, device pointer)."""
    raw = np.frombuffer(np.ascontiguousarray(host).tobytes(), np.uint8)
    e = t.to_device(raw, device)
    return e, t.inspect(e, DEVICE_VIEW)["buf"]


def cai_of(host, device=DEV0, **over):
    """A CAI producer over a device copy of `host` (C order)."""
    e, ptr = upload(host, device)
    iface = dict(shape=host.shape, typestr=host.dtype.str, data=(ptr, False), version=3,
                 strides=None)
    iface.update(over)
    return CAI(e, **iface)


def fresh(nbytes, device=DEV0):
    """Uninitialised device memory (poison): (exporter, pointer)."""
    e = t.exporter("B", (nbytes,), device=device)
    return e, t.inspect(e, DEVICE_VIEW)["buf"]


# --------------------------------------------------------------------------
# Values, layout, format, device
# --------------------------------------------------------------------------

SCALARS = [
    ("<f4", "f"), ("<f8", "d"), ("<f2", "e"), ("|i1", "b"), ("<i2", "h"), ("<i4", "i"),
    ("<i8", "q"), ("|u1", "B"), ("<u2", "H"), ("<u4", "I"), ("<u8", "Q"), ("|b1", "?"),
    ("<c8", "Zf"), ("<c16", "Zd"), (">f4", ">f"), (">i8", ">q"), (">c16", ">Zd"),
    (">f2", ">e"), ("|S5", "5s"), ("<U3", "3w"), ("=f4", "f"), ("=i2", "h"),
]


@pytest.mark.parametrize("typestr,fmt", SCALARS)
def test_values_layout_and_format(typestr, fmt):
    host = (np.arange(12) % 7).astype(np.dtype(typestr)).reshape(3, 4)
    c = cai_of(host, typestr=typestr)
    ptr = c.iface["data"][0]
    v = t.bridge_view(c)
    assert v["path"] == "cuda-array-interface"
    assert v["format"] == fmt
    assert v["itemsize"] == host.itemsize
    assert (v["shape"], v["strides"]) == (host.shape, host.strides)
    assert v["buf"] == ptr  # zero-copy: the producer's own pointer
    assert v["readonly"] is False
    assert v["device"] == t.PYXBUF_DEVICE_DLPACK
    assert (v["device_type"], v["device_id"]) == DEV0
    assert v["flags"] & t.PYXBUF_DEVICE
    assert v["obj_is"] and v["owner"] == "pyxbuf._BridgeHolder"
    assert v["sync_event"] is None and v["stream"] == t.PYXBUF_STREAM_NONE
    assert v["info_size"] == 64 and v["reserved_zero"]
    assert t.copy_to_host(c) == host.tobytes()
    # The format means what NumPy means by the typestr.
    assert t.format_itemsize(fmt)[0] == host.itemsize


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8,
                    reason="long double is a double here: f16/c32 are not C types")
def test_native_long_double_is_g_and_zg():
    # No standard size: 'g' / "Zg" only where the typestr is this machine's
    # long double in native byte order (format/codes.h's native lookup).
    for dtype, fmt in ((np.longdouble, "g"), (np.clongdouble, "Zg")):
        host = np.arange(3).astype(dtype)
        v = t.bridge_view(cai_of(host, typestr=host.dtype.str))
        assert (v["format"], v["itemsize"]) == (fmt, host.itemsize)
        assert t.format_itemsize(fmt)[0] == host.itemsize


def test_device_is_recovered_from_the_pointer():
    host = np.arange(6, dtype="<i4")
    c = cai_of(host, DEV1)
    v = t.bridge_view(c)
    assert (v["device_type"], v["device_id"]) == DEV1
    assert t.view_device(c) == DEV1
    assert t.copy_to_host(c) == host.tobytes()


def test_explicit_strides_transposed_and_negative():
    host = np.arange(12, dtype="<f4").reshape(3, 4)
    e, ptr = upload(host)
    transposed = CAI(e, shape=(4, 3), typestr="<f4", data=(ptr, False), version=3,
                     strides=(4, 16))
    v = t.bridge_view(transposed)
    assert (v["shape"], v["strides"]) == ((4, 3), (4, 16))
    assert t.copy_to_host(transposed) == host.T.tobytes()
    # Rows reversed: the pointer is the first item, the stride negative.
    reversed_rows = CAI(e, shape=(3, 4), typestr="<f4", data=(ptr + 32, False), version=3,
                        strides=(-16, 4))
    assert t.bridge_view(reversed_rows)["strides"] == (-16, 4)
    assert t.copy_to_host(reversed_rows) == host[::-1].tobytes()
    every_other = CAI(e, shape=(3, 2), typestr="<f4", data=(ptr + 4, False), version=3,
                      strides=[16, 8])
    assert t.copy_to_host(every_other) == host[:, 1::2].tobytes()


def test_contiguity_requests_follow_the_layout():
    host = np.arange(12, dtype="<f4").reshape(3, 4)
    e, ptr = upload(host)
    transposed = CAI(e, shape=(4, 3), typestr="<f4", data=(ptr, False), version=3,
                     strides=(4, 16))
    assert t.bridge_view(transposed, t.PyBUF_F_CONTIGUOUS | t.PyBUF_FORMAT | t.PYXBUF_DEVICE)
    with pytest.raises(BufferError, match="not C-contiguous"):
        t.bridge_view(transposed, t.PyBUF_C_CONTIGUOUS | t.PYXBUF_DEVICE)


def test_zero_dim_and_many_dims():
    host = np.array(2.5, dtype="<f8")
    c = cai_of(host)
    v = t.bridge_view(c)
    assert (v["ndim"], v["shape"], v["strides"], v["len"]) == (0, None, None, 8)
    assert t.copy_to_host(c) == host.tobytes()
    # More dimensions than the view holds inline: spilled into the holder.
    deep = np.arange(24, dtype="<i2").reshape((1,) * 9 + (2, 3, 4))
    c = cai_of(deep)
    v = t.bridge_view(c)
    assert (v["shape"], v["strides"]) == (deep.shape, deep.strides)
    assert t.copy_to_host(c) == deep.tobytes()
    if int(np.__version__.split(".")[0]) >= 2:  # NumPy 1 stops at 32 dimensions
        c64 = cai_of(np.arange(2, dtype="|u1").reshape((1,) * 63 + (2,)))
        assert t.bridge_view(c64)["ndim"] == 64


def test_empty_array_with_null_pointer_is_cuda_memory():
    # The specification: "for zero-size arrays, use 0 here".
    c = CAI(None, shape=(0, 3), typestr="<f4", data=(0, False), version=3)
    v = t.bridge_view(c)
    assert (v["len"], v["buf"], v["shape"]) == (0, 0, (0, 3))
    assert (v["device_type"], v["device_id"]) == (CUDA, 0)
    assert t.copy_to_host(c) == b""
    # An empty array on a known device keeps that device.
    e, ptr = fresh(4)
    assert t.bridge_view(CAI(e, shape=(0,), typestr="<f4", data=(ptr, False), version=3))[
        "device_type"] == EXT


def test_read_only_memory():
    host = np.arange(4, dtype="<i4")
    e, ptr = upload(host)
    c = CAI(e, shape=(4,), typestr="<i4", data=(ptr, True), version=3)
    v = t.bridge_view(c)
    assert v["readonly"] is True and v["dl_flags"] & t.PYXBUF_DL_FLAG_READ_ONLY
    with pytest.raises(BufferError, match=r"read-only.*PyBUF_WRITABLE"):
        t.bridge_view(c, t.PyBUF_RECORDS | t.PYXBUF_DEVICE)
    w = CAI(e, shape=(4,), typestr="<i4", data=(ptr, False), version=3)
    assert t.bridge_view(w, t.PyBUF_RECORDS | t.PYXBUF_DEVICE)["readonly"] is False


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_versions_0_to_3_are_read(version):
    host = np.arange(3, dtype="<u2")
    assert t.copy_to_host(cai_of(host, version=version)) == host.tobytes()


def test_refused_without_pyxbuf_device():
    c = cai_of(np.arange(4, dtype="<f4"))
    with pytest.raises(BufferError, match=r"holds memory on device 'ext_dev:0'.*PYXBUF_DEVICE"):
        t.inspect(c, t.PyBUF_RECORDS_RO)
    with pytest.raises(BufferError, match="needs host memory"):
        t.host_only(c, "contiguous")
    with pytest.raises(TypeError):
        memoryview(c)


def test_to_device_copies_and_same_device_is_no_copy():
    host = np.arange(6, dtype="<f4").reshape(2, 3)
    c = cai_of(host)
    back = t.to_device(c, None)
    assert bytes(memoryview(back)) == host.tobytes()
    other = t.to_device(c, DEV1)
    assert t.view_device(other) == DEV1 and t.copy_to_host(other) == host.tobytes()
    assert t.to_device(c, DEV0) is c


def test_a_classic_buffer_wins_over_the_dict():
    class Both(bytearray):
        __cuda_array_interface__ = property(lambda self: 1 / 0)

    assert t.inspect(Both(b"abc"), t.PyBUF_RECORDS_RO)["path"] == "classic"


def test_cooperative_borrows_apply_to_cai_views():
    c = cai_of(np.arange(4, dtype="<f4"))
    v = t.acquire(c, DEVICE_VIEW | t.PYXBUF_BORROW_EXCLUSIVE)
    try:
        assert v.info()["ext_flags"] & t.PYXBUF_EXT_TRACKED
        with pytest.raises(BufferError):
            t.inspect(c, DEVICE_VIEW | t.PYXBUF_BORROW_SHARED)
    finally:
        v.release()
    assert t.inspect(c, DEVICE_VIEW | t.PYXBUF_BORROW_SHARED)["ext_flags"] & t.PYXBUF_EXT_TRACKED


# --------------------------------------------------------------------------
# Structured and opaque types
# --------------------------------------------------------------------------

STRUCTS = [
    ([("a", "<i4"), ("b", "<f8")], "T{<i:a:<d:b:}"),
    ([("a", "|u1"), ("", "|V3"), ("b", ">i4")], "T{=B:a:3x>i:b:}"),
    ([("x", "<f4", (2, 3)), ("y", "|b1")], "T{(2,3)<f:x:=?:y:}"),
    ([("p", [("q", "<i2"), ("r", "|u1")]), ("s", "<c8")], "T{T{<h:q:=B:r:}:p:<Zf:s:}"),
    ([(("title", "n"), "<u2")], "T{<H:n:}"),
    # longer than the builder's 64 inline bytes: it grows (format/write.c)
    ([("f%02d" % i, "<i2") for i in range(20)] + [("n" * 150, "<f8", (2, 3))],
     "T{" + "".join("<h:f%02d:" % i for i in range(20)) + "(2,3)<d:" + "n" * 150 + ":}"),
]


@pytest.mark.parametrize("descr,fmt", STRUCTS)
def test_structured_types_from_descr(descr, fmt):
    dtype = np.dtype(descr)
    host = np.zeros(3, dtype)
    host.view(np.uint8)[:] = np.arange(host.nbytes) % 251
    c = cai_of(host, typestr=dtype.str, descr=dtype.descr)
    v = t.bridge_view(c)
    assert v["format"] == fmt
    assert v["itemsize"] == dtype.itemsize
    assert t.format_itemsize(fmt)[0] == dtype.itemsize
    assert t.copy_to_host(c) == host.tobytes()


def test_struct_trailing_padding_comes_from_the_typestr():
    host = np.zeros(2, "V8")
    c = cai_of(host, typestr="|V8", descr=[("a", "<i4")])
    assert t.bridge_view(c)["format"] == "T{<i:a:4x}"


def test_unstructured_void_is_opaque_bytes_as_numpy_writes_it():
    host = np.zeros(4, "V2")
    for descr in (None, [("", "|V2")]):
        c = cai_of(host, typestr="|V2", **({} if descr is None else {"descr": descr}))
        v = t.bridge_view(c)
        assert (v["format"], v["itemsize"]) == ("2x", 2)
        assert memoryview(host).format == "2x"  # NumPy's own choice


# --------------------------------------------------------------------------
# Streams: CAI's producer-stream model
# --------------------------------------------------------------------------

PAYLOAD = np.arange(1, 5, dtype="<f4").tobytes()


@pytest.fixture
def producer():
    """Device memory with a producer write queued (not run) on its stream."""
    e, ptr = fresh(len(PAYLOAD))
    stream = t.emulated_write(e, PAYLOAD, 0, False)
    c = CAI(e, shape=(4,), typestr="<f4", data=(ptr, False), version=3, stream=stream)
    p = SimpleNamespace(c=c, ptr=ptr, stream=stream)
    del c, e
    yield p
    t.emulated_destroy_stream(stream)
    p.__dict__.clear()  # the memory dies before the leak check


def test_the_producer_write_is_pending(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    assert t.emulated_pending(0, stream) == 1
    assert t.emulated_peek_at(ptr, 16) == bytes([POISON]) * 16


def test_an_event_is_recorded_on_the_producer_stream(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    v = t.bridge_view(c)
    assert v["sync_event"] is not None
    assert v["stream"] == stream
    assert t.emulated_pending(0, stream) == 2  # the write, then the event


def test_reading_without_waiting_is_stale(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    consumer = t.emulated_stream()
    try:
        assert t.wait_and_peek(c, consumer, False) == bytes([POISON]) * 16
    finally:
        t.emulated_destroy_stream(consumer)


def test_pyxbuf_device_wait_orders_the_consumer_after_the_producer(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    consumer = t.emulated_stream()
    try:
        assert t.wait_and_peek(c, consumer, True) == PAYLOAD
        assert t.emulated_pending(0, stream) == 0
    finally:
        t.emulated_destroy_stream(consumer)


def test_copy_to_host_waits(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    assert t.copy_to_host(c) == PAYLOAD


def test_a_consumer_stream_gets_the_wait_enqueued_at_acquisition(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    consumer = t.emulated_stream()
    try:
        t.bridge_view(c, consumer_stream=consumer)
        # The wait, queued at once; then, as the view was released, the event
        # the free of the producer's pooled memory waits for (the device pool).
        assert t.emulated_pending(0, consumer) == 2
        assert t.emulated_peek_at(ptr, 16) == bytes([POISON]) * 16
        t.stream_sync(DEV0, consumer)  # a consumer kernel on that stream runs now
        assert t.emulated_peek_at(ptr, 16) == PAYLOAD
    finally:
        t.emulated_destroy_stream(consumer)


def test_consumer_stream_none_enqueues_nothing(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    consumer = t.emulated_stream()
    try:
        v = t.bridge_view(c, consumer_stream=t.PYXBUF_STREAM_NONE)
        assert v["sync_event"] is not None  # still there for whoever wants it
        assert t.emulated_pending(0, consumer) == 0
        assert t.emulated_peek_at(ptr, 16) == bytes([POISON]) * 16
    finally:
        t.emulated_destroy_stream(consumer)


def test_stream_none_means_ready():
    host = np.arange(4, dtype="<f4")
    c = cai_of(host, stream=None)
    v = t.bridge_view(c)
    assert v["sync_event"] is None and v["stream"] == t.PYXBUF_STREAM_NONE
    assert t.copy_to_host(c) == host.tobytes()


@pytest.mark.parametrize("stream", [1, 2])
def test_default_streams_are_accepted(stream):
    host = np.arange(4, dtype="<f4")
    c = cai_of(host, stream=stream)
    v = t.bridge_view(c)
    assert v["sync_event"] is not None and v["stream"] == stream
    assert t.copy_to_host(c) == host.tobytes()


def test_a_stream_the_backend_does_not_know_is_refused():
    c = cai_of(np.arange(4, dtype="<f4"), stream=987654)
    with pytest.raises(BufferError, match=r"cannot record an event on the producer's stream "
                                          r"987654 on device 'ext_dev:0'"):
        t.bridge_view(c)


def test_no_event_for_a_refused_request(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    with pytest.raises(BufferError):
        t.inspect(c, t.PyBUF_RECORDS_RO)  # no PYXBUF_DEVICE
    assert t.emulated_pending(0, stream) == 1  # nothing recorded


# --------------------------------------------------------------------------
# Lying producers: every bad dict is a BufferError that names the cause
# --------------------------------------------------------------------------

def _without(key):
    return lambda d: d.pop(key)


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


HOST_ARRAY = np.arange(4, dtype="<f4")

BAD = {
    "missing shape": (_without("shape"), r"key 'shape' is missing"),
    "missing typestr": (_without("typestr"), r"key 'typestr' is missing"),
    "missing data": (_without("data"), r"key 'data' is missing"),
    "missing version": (_without("version"), r"key 'version' is missing"),
    "shape not a tuple": (_set("shape", "4"), r"'shape' must be a tuple of ints, found 'str'"),
    "shape item not int": (_set("shape", (4.0,)), r"'shape'\[0\] must be an int, found 'float'"),
    "shape item bool": (_set("shape", (True,)), r"'shape'\[0\] must be an int, found 'bool'"),
    "negative shape": (_set("shape", (-4,)), r"'shape'\[0\] is negative \(-4\)"),
    "ndim 65": (_set("shape", (1,) * 65), r"'shape' has 65 dimensions; pyxbuf accepts at most 64"),
    "huge shape": (_set("shape", (2**62, 2**62)), r"more bytes than can be addressed"),
    "typestr not str": (_set("typestr", 4), r"'typestr' must be a typestr such as '<f4', found 'int'"),
    "typestr no order": (_set("typestr", "f4"), r"'f4' is not a typestr"),
    "typestr no size": (_set("typestr", "<f"), r"'<f' is not a typestr"),
    "typestr size 0": (_set("typestr", "<f0"), r"'<f0' is not a typestr"),
    "unknown kind": (_set("typestr", "<x4"), r"'<x4' names a type pyxbuf cannot describe"),
    "unknown size": (_set("typestr", "<f3"), r"'<f3' names a type pyxbuf cannot describe"),
    "object": (_set("typestr", "|O8"), r"'\|O8' names a type pyxbuf cannot describe"),
    "datetime": (_set("typestr", "<M8"), r"'<M8' names a type pyxbuf cannot describe"),
    "bool of 2 bytes": (_set("typestr", "|b2"), r"'\|b2' names a type"),
    # the edges of format/codes.h's table: no 16-byte int, no 1-byte float,
    # no 4-byte complex, and long double only in native byte order
    "int of 16 bytes": (_set("typestr", "<i16"), r"'<i16' names a type pyxbuf cannot describe"),
    "float of 1 byte": (_set("typestr", "<f1"), r"'<f1' names a type pyxbuf cannot describe"),
    "complex of 4 bytes": (_set("typestr", "<c4"), r"'<c4' names a type pyxbuf cannot describe"),
    "swapped long double": (_set("typestr", ">f16" if sys.byteorder == "little" else "<f16"),
                            r"f16' names a type pyxbuf cannot describe"),
    "data not a tuple": (_set("data", [1, False]), r"'data' must be a \(pointer: int, read_only: bool\) tuple, found 'list'"),
    "data 3-tuple": (_set("data", (1, False, 0)), r"'data' must be a \(pointer"),
    "pointer not int": (_set("data", ("0x10", False)), r"'data'\[0\] \(the pointer\) must be an int, found 'str'"),
    "negative pointer": (_set("data", (-8, False)), r"'data'\[0\] = -8 is not an address"),
    "read_only not bool": (_set("data", (8, "no")), r"'data'\[1\] \(read_only\) must be a bool, found 'str'"),
    "null pointer": (_set("data", (0, False)), r"NULL pointer for 4 items"),
    "host pointer": (_set("data", (HOST_ARRAY.ctypes.data, False)), r"the CAI pointer 0x[0-9a-f]+ is not device memory: .*emulated device"),
    "version 4": (_set("version", 4), r"'version' is 4, which pyxbuf does not know \(it reads versions 0 to 3\)"),
    "version not int": (_set("version", "3"), r"'version' must be an int, found 'str'"),
    "mask set": (_set("mask", HOST_ARRAY), r"masked arrays are not supported"),
    "stream 0": (_set("stream", 0), r"'stream' is 0, which the CUDA Array Interface disallows"),
    "stream not int": (_set("stream", "default"), r"'stream' must be None or an int"),
    "stream bool": (_set("stream", True), r"'stream' must be None or an int"),
    "negative stream": (_set("stream", -1), r"'stream' = -1 is not a stream handle"),
    "strides wrong length": (_set("strides", (4, 4)), r"'strides' has 2 entries but 'shape' has 1"),
    "strides not tuple": (_set("strides", 4), r"'strides' must be None \(C-contiguous\) or a tuple"),
    "stride not int": (_set("strides", ("4",)), r"'strides'\[0\] must be an int, found 'str'"),
    "descr not a list": (lambda d: d.update(typestr="|V4", descr="a"), r"'descr' must be a list"),
    "descr bad field": (lambda d: d.update(typestr="|V4", descr=[("a",)]), r"'descr'\[0\] must be a \(name, typestr\)"),
    "descr larger than typestr": (lambda d: d.update(typestr="|V4", descr=[("a", "<f8")]), r"'descr' describes 8 bytes per item but 'typestr' says 4"),
    "null pointer, one item": (lambda d: d.update(data=(0, False), shape=(1,)), r"NULL pointer for 1 item;"),
    "one stride for two dimensions": (lambda d: d.update(shape=(2, 2), strides=(4,)), r"'strides' has 1 entry but 'shape' has 2"),
    "descr name with colon": (lambda d: d.update(typestr="|V4", descr=[("a:b", "<f4")]), r"contains ':'"),
    "descr name not str": (lambda d: d.update(typestr="|V4", descr=[(1, "<f4")]), r"'descr'\[0\] must start with a field name"),
    "descr bad subarray": (lambda d: d.update(typestr="|V4", descr=[("a", "<f4", (0,))]), r"sub-array shape\) must hold positive ints"),
    "descr subarray count overflows": (lambda d: d.update(typestr="|V4", descr=[("a", "|u1", (2**31 - 1,) * 3)]), r"sub-array shape\) must hold positive ints"),
    "descr item too large": (lambda d: d.update(typestr="|V4", descr=[("a", "<f8", (2**30, 2**30, 4))]), r"'descr' describes an item too large to address"),
    "descr shape of 65 dims": (lambda d: d.update(typestr="|V4", descr=[("a", "|u1", (1,) * 65)]), r"'descr'\[0\]\[2\] \(the sub-array shape\) has 65 dimensions; a format's sub-array shape has at most 64"),
    "descr bad field type": (lambda d: d.update(typestr="|V4", descr=[("a", "<x4")]), r"'descr'\[0\]\[1\] = '<x4' names a type"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_dicts_are_refused_with_the_cause_named(case):
    mutate, pattern = BAD[case]
    e, ptr = upload(np.arange(4, dtype="<f4"))
    iface = dict(shape=(4,), typestr="<f4", data=(ptr, False), version=3, strides=None)
    mutate(iface)
    c = CAI(e, **iface)
    with pytest.raises(BufferError, match=pattern) as info:
        t.bridge_view(c)
    assert "__cuda_array_interface__" in str(info.value)
    assert "'CAI'" in str(info.value)  # the producer's type


def test_a_host_pointer_names_each_backend_asked_once():
    # CUDA's backend serves cuda, cuda_host and cuda_managed; it used to be
    # asked, and its reason repeated, once per device type (three times).
    e, ptr = upload(np.arange(4, dtype="<f4"))
    c = CAI(e, shape=(4,), typestr="<f4", data=(HOST_ARRAY.ctypes.data, False), version=3)
    with pytest.raises(BufferError) as info:
        t.bridge_view(c)
    message = str(info.value)
    assert message.count("cuda: ") == 1, message
    assert message.count("pyxbuf.emulated: ") == 1, message
    assert message.endswith("or __array_interface__)"), message  # the advice is not cut off


def test_not_a_dict():
    class NotDict:
        __cuda_array_interface__ = [("shape", (4,))]

    with pytest.raises(BufferError, match=r"it must be a dict, found 'list'"):
        t.bridge_view(NotDict())


def test_a_failing_property_keeps_its_exception():
    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("producer exploded")

    with pytest.raises(RuntimeError, match="producer exploded"):
        t.bridge_view(Broken())


def test_an_attribute_error_means_no_interface():
    class CpuTensor:  # PyTorch raises AttributeError for CPU tensors
        @property
        def __cuda_array_interface__(self):
            raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")

    with pytest.raises(TypeError, match="exports no buffer pyxbuf can read"):
        t.bridge_view(CpuTensor())


# --------------------------------------------------------------------------
# Reference counts and leaks
# --------------------------------------------------------------------------

def test_refcounts_unchanged_after_10000_cycles():
    host = np.arange(12, dtype="<f4").reshape(3, 4)
    c = cai_of(host)
    deep = cai_of(np.zeros((1,) * 10 + (2,), "<f4"))
    before = (sys.getrefcount(c), sys.getrefcount(c.memory), sys.getrefcount(deep))
    t.cycle(c, DEVICE_VIEW, 10_000)
    t.cycle(deep, DEVICE_VIEW, 10_000)
    for _ in range(10_000):
        with pytest.raises(BufferError):
            t.cycle(c, t.PyBUF_RECORDS_RO, 1)  # refused: no PYXBUF_DEVICE
    gc.collect()
    assert (sys.getrefcount(c), sys.getrefcount(c.memory), sys.getrefcount(deep)) == before


def test_refcounts_unchanged_after_10000_stream_cycles(producer):
    c, ptr, stream = producer.c, producer.ptr, producer.stream
    consumer = t.emulated_stream()
    try:
        before = sys.getrefcount(c)
        t.cycle(c, DEVICE_VIEW, 10_000)
        t.cycle_stream(c, DEVICE_VIEW, 10_000, consumer)
        assert sys.getrefcount(c) == before
        t.stream_sync(DEV0, consumer)
        assert t.emulated_peek_at(ptr, 16) == PAYLOAD
    finally:
        t.emulated_destroy_stream(consumer)


def test_held_views_keep_the_producer_alive():
    host = np.arange(4, dtype="<f4")
    c = cai_of(host)
    before = sys.getrefcount(c)
    views = [t.acquire(c, DEVICE_VIEW) for _ in range(5)]
    assert sys.getrefcount(c) == before + 5
    del c
    assert t.copy_to_host(views[0].info()["obj"]) == host.tobytes()
    for v in views:
        v.release()


# --------------------------------------------------------------------------
# Real CUDA (GPU machines): pyxbuf's CUDA backend, CuPy, PyTorch
# --------------------------------------------------------------------------

def _cuda_ok():
    try:
        t.exporter("B", (1,), device=(CUDA, 0))
        return True
    except Exception:  # no driver, no device
        return False


needs_cuda = pytest.mark.skipif(not _cuda_ok(), reason="no CUDA driver or device here")


@needs_cuda
@pytest.mark.parametrize("stream", [None, 1, 2])
def test_cuda_memory_through_a_cai_dict(stream):
    host = np.arange(24, dtype="<f4").reshape(4, 6)
    c = cai_of(host, (CUDA, 0), stream=stream)
    v = t.bridge_view(c)
    assert (v["device_type"], v["device_id"]) == (CUDA, 0)
    assert v["buf"] == c.iface["data"][0]
    assert (v["sync_event"] is not None) == (stream is not None)
    assert t.copy_to_host(c) == host.tobytes()
    # Consumer on the per-thread default stream: the wait is enqueued there.
    assert t.bridge_view(c, consumer_stream=2)["path"] == "cuda-array-interface"
    t.cycle_stream(c, DEVICE_VIEW, 1000, 2)


@needs_cuda
def test_cuda_device_of_a_cai_view():
    host = np.arange(3, dtype="<i8")
    c = cai_of(host, (CUDA, 0))
    assert t.view_device(c) == (CUDA, 0)


def _wrapped(obj):
    """Only the dict: the DLPack path of the real producer is not taken."""
    return CAI(obj, **obj.__cuda_array_interface__)


@needs_cuda
def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    a = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)[:, ::2]
    c = _wrapped(a)
    v = t.bridge_view(c)
    assert v["path"] == "cuda-array-interface"
    assert (v["shape"], v["strides"], v["format"]) == (a.shape, a.strides, "f")
    assert v["buf"] == a.data.ptr
    assert t.copy_to_host(c) == cupy.asnumpy(a).tobytes()
    with cupy.cuda.Stream(non_blocking=True) as s:
        b = a * 2
        c = _wrapped(b)
        assert c.iface.get("stream") in (None, s.ptr)
        assert t.copy_to_host(c) == cupy.asnumpy(b).tobytes()


@needs_cuda
def test_torch_cuda_tensors():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    x = torch.arange(12, dtype=torch.float64, device="cuda").reshape(3, 4).t()
    c = _wrapped(x)
    v = t.bridge_view(c)
    assert v["path"] == "cuda-array-interface"
    assert v["shape"] == tuple(x.shape) and v["format"] == "d"
    assert v["strides"] == tuple(s * 8 for s in x.stride())
    assert t.copy_to_host(c) == x.cpu().contiguous().numpy().tobytes()
