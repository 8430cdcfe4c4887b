"""The device path on pyxbuf's guarded emulated device (kDLExtDev).

Device pointers live in a PROT_NONE mapping: the host cannot read them, so
every byte checked here went through the backend. Streams are deterministic
queues: a read that does not wait for the producer's event sees stale data
every time.
"""

import ctypes
import gc
import signal

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import _pyxbuf_testext as t

EXT = t.PYXBUF_DL_EXT_DEV
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


def upload(array, device=DEV0):
    """A host NumPy array -> an Exporter on `device` (through pyxbuf_to_device)."""
    return t.to_device(array, device)


def download(obj):
    return t.copy_to_host(obj)


def test_export_acquire_with_device_reads_device_info():
    e = t.exporter("<f", (2, 3), device=(EXT, 2))
    info = t.inspect(e, DEVICE_VIEW)
    assert info["path"] == "native"
    assert info["device"] == t.PYXBUF_DEVICE_DLPACK
    assert (info["device_type"], info["device_id"]) == (EXT, 2)
    assert info["flags"] & t.PYXBUF_DEVICE
    assert (info["shape"], info["strides"], info["format"]) == ((2, 3), (12, 4), "<f")
    assert t.view_device(e) == (EXT, 2)
    assert e.device == "ext_dev:2"


def test_acquire_without_device_flag_is_refused():
    e = t.exporter("<f", (4,), device=DEV0)
    with pytest.raises(BufferError, match=r"holds memory on device.*request PYXBUF_DEVICE"):
        t.inspect(e, t.PyBUF_RECORDS_RO)
    with pytest.raises(BufferError):
        np.asarray(memoryview(e))


def test_host_dereference_of_device_memory_crashes():
    e = t.exporter("B", (4096,), device=DEV0)
    sig = t.deref_in_child(e)
    assert sig == signal.SIGSEGV, f"child ended with signal {sig}, expected SIGSEGV"
    # The same read through the backend works.
    assert download(e) == bytes([POISON]) * 4096


ARRAYS = {
    "contiguous-f32": lambda: np.arange(24, dtype=np.float32).reshape(4, 6),
    "strided": lambda: np.arange(60, dtype=np.int64).reshape(6, 10)[1::2, ::3],
    "negative-strides": lambda: np.arange(24, dtype=np.float64).reshape(4, 6)[::-1, ::-2],
    "fortran": lambda: np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),
    "struct": lambda: np.array([(1, 2.5), (3, 4.5)], dtype="i4,f8"),
    "0-d": lambda: np.array(7.25),
    "empty": lambda: np.zeros((0, 4), dtype=np.uint8),
}


@pytest.mark.parametrize("name", list(ARRAYS))
def test_round_trip_host_dev_dev_host(name):
    a = ARRAYS[name]()
    on0 = upload(a, DEV0)
    on1 = t.to_device(on0, DEV1)          # device -> device
    back = t.to_device(on1, None)         # device -> host, an Exporter on the host
    assert on0.device == "ext_dev:0" and on1.device == "ext_dev:1" and back.device == "cpu"
    want = np.ascontiguousarray(a).tobytes()
    assert download(on0) == want
    assert download(on1) == want
    assert bytes(memoryview(back)) == want
    assert back.shape == a.shape and back.format == memoryview(a).format


@pytest.mark.parametrize("name", ["strided", "negative-strides", "fortran"])
def test_strided_device_view_copies_in_c_order(name):
    a = ARRAYS[name]()
    on0 = upload(a)
    # A strided view of device memory: the exporter's own view is contiguous,
    # so make a strided device source with a device->device copy of a strided
    # host array and compare every layout against NumPy's C order.
    assert download(on0) == np.ascontiguousarray(a).tobytes()


def test_to_device_same_device_returns_the_object():
    e = t.exporter("<i", (3,), device=DEV0)
    assert t.to_device(e, DEV0) is e
    a = np.arange(3)
    assert t.to_device(a, None) is a
    assert e.to_device("ext_dev:0") is e


def test_exporter_to_device_method_uses_array_api_names():
    a = upload(np.arange(5, dtype=np.uint8))
    b = a.to_device("ext_dev:1")
    c = b.to_device("cpu")
    assert (b.device, c.device) == ("ext_dev:1", "cpu")
    assert bytes(memoryview(c)) == bytes(range(5))
    with pytest.raises(ValueError, match="unknown device 'gpu:0'"):
        a.to_device("gpu:0")
    with pytest.raises(TypeError, match="a device is 'cpu'"):
        a.to_device(3.5)


def test_same_device_rules():
    a = t.exporter("f", (2,), device=DEV0)
    b = t.exporter("f", (2,), device=DEV0)
    c = t.exporter("f", (2,), device=DEV1)
    h = np.zeros(2, dtype=np.float32)
    t.same_device(a, b)
    t.same_device(h, np.ones(3))
    with pytest.raises(ValueError, match=r"different devices, 'ext_dev:0' and 'ext_dev:1'.*never moves"):
        t.same_device(a, c)
    with pytest.raises(ValueError, match=r"'ext_dev:0' and 'cpu'"):
        t.same_device(a, h)


def test_read_without_waiting_is_stale_every_time():
    for _ in range(50):
        e = t.exporter("B", (8,), device=DEV0)
        stream = t.emulated_write(e, b"PRODUCED", 0, True)
        # The producer's kernel is queued, not run.
        assert t.emulated_pending(0, stream) == 2  # the write and the event record
        assert t.emulated_peek(e, 8) == bytes([POISON]) * 8  # no wait: stale
        # pyxbuf_copy_to_host waits for the exporter's event: fresh.
        assert download(e) == b"PRODUCED"
        assert t.emulated_pending(0, stream) == 0
        t.emulated_destroy_stream(stream)


def test_missing_event_means_stale_even_through_pyxbuf():
    """A producer that forgets to record its event breaks its consumers."""
    e = t.exporter("B", (4,), device=DEV0)
    stream = t.emulated_write(e, b"LATE", 0, False)
    assert download(e) == bytes([POISON]) * 4
    t.emulated_destroy_stream(stream)  # destroying runs the queue
    assert download(e) == b"LATE"


@pytest.mark.parametrize("flags", [t.PyBUF_SIMPLE, t.PyBUF_FORMAT, t.PyBUF_RECORDS_RO],
                         ids=["simple", "format", "records"])
@pytest.mark.parametrize("source", ["numpy-2d", "numpy-0d", "bytes"])
def test_to_device_of_a_view_without_a_shape_copies_every_byte(source, flags):
    """A view taken without PyBUF_ND has no shape; NumPy then answers ndim 0
    whatever its length. The copy holds every byte, never one item's worth
    (the emulated device refuses a write past an allocation)."""
    obj = {"numpy-2d": np.arange(12, dtype=np.float32).reshape(3, 4),
           "numpy-0d": np.array(7.5),
           "bytes": b"abcdefgh"}[source]
    expected = bytes(memoryview(obj).cast("B")) if source != "bytes" else obj
    on0 = t.to_device(obj, DEV0, 0, flags)
    assert t.copy_to_host(on0) == expected
    assert on0.nbytes == len(expected)


def test_to_device_waits_for_the_source_event():
    e = t.exporter("B", (5,), device=DEV0)
    stream = t.emulated_write(e, b"HELLO")
    on1 = t.to_device(e, DEV1)
    assert download(on1) == b"HELLO"
    t.emulated_destroy_stream(stream)


@pytest.mark.parametrize("op", ["item", "memoryview", "contiguous", "fortran"])
def test_host_only_operations_refuse_device_views(op):
    e = upload(np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(BufferError, match=r"needs host memory, but the view is on device 'ext_dev:0'; copy it to the host first"):
        t.host_only(e, op)


def test_host_only_operations_work_on_host_views():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert t.host_only(a, "item") == a[0, 0].tobytes()
    assert t.host_only(a, "contiguous") == a.tobytes()
    assert t.host_only(a, "fortran") == a.tobytes(order="F")
    assert bytes(t.host_only(a, "memoryview")) == a.tobytes()


def test_lying_device_pointer_is_refused():
    liar = t.Liar("wrong_device_pointer")
    with pytest.raises(BufferError, match=r"its first byte 0x[0-9a-f]+ is not memory of device 'ext_dev:0'"):
        t.inspect(liar, DEVICE_VIEW)
    assert (liar.gets, liar.releases) == (1, 1)


def test_unknown_device_type_has_a_clear_error():
    with pytest.raises(ValueError, match=r"no pyxbuf backend for device type 8 \(metal\)"):
        t.exporter("f", (2,), device=(8, 0))


shapes = st.lists(st.integers(0, 5), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, data=st.data())
def test_strided_round_trip_property(shape, data):
    """Any slicing of any shape survives host -> device -> device -> host."""
    a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    index = tuple(
        slice(data.draw(st.integers(0, 2)), None, data.draw(st.sampled_from([1, 2, -1, -2])))
        for _ in shape
    )
    view = a[index]
    on1 = t.to_device(upload(view, DEV0), DEV1)
    assert download(on1) == np.ascontiguousarray(view).tobytes()


def test_cuda_without_a_driver_says_so(monkeypatch):
    """No GPU here: asking for CUDA memory names the missing driver library."""
    try:
        e = t.exporter("f", (2,), device=(t.PYXBUF_DL_CUDA, 0))
    except RuntimeError as exc:
        assert "no CUDA driver found (libcuda.so.1)" in str(exc)
    else:  # a GPU machine: the memory is real CUDA memory
        assert e.device == "cuda:0"


def test_copy_keeps_the_itemsize_when_the_format_disagrees():
    n = 1024
    src = (ctypes.c_wchar * n)(*("A" * n))  # format '<u' (2 bytes), itemsize 4
    hole = t.exporter("B", (2 * n,), device=(EXT, 0))
    victim = t.exporter("B", (64,), device=(EXT, 0))
    before = t.copy_to_host(victim)
    del hole
    gc.collect()
    out = t.to_device(src, (EXT, 0))
    assert out.itemsize == 4 and out.nbytes == 4 * n
    assert t.copy_to_host(out) == bytes(memoryview(src).cast("B"))
    assert t.copy_to_host(victim) == before  # nothing written past the copy
