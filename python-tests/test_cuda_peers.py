"""Real GPUs: CuPy and PyTorch CUDA memory through every path they offer, and
pyxbuf's CUDA exporters read back by them.

Every test here needs a CUDA driver and device and is skipped without one (CI
has none; the emulated device covers the same code in test_cai.py and
test_devices.py). On a GPU machine they are the check that the CUDA backend,
the DLPack and CAI bridges and the stream rules hold against real peers.
"""

import gc

import numpy as np
import pytest

import _pyxbuf_testext as t
from cai_producers import CAI
from dlpack_only import DLPackOnly  # the producer's DLPack alone: no C table, no CAI
from test_cai import needs_cuda

CUDA, CUDA_HOST, CUDA_MANAGED = t.PYXBUF_DL_CUDA, t.PYXBUF_DL_CUDA_HOST, 13
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
RO = t.PyBUF_RECORDS_RO


pytestmark = needs_cuda


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch


def cai_only(obj):
    return CAI(obj, **obj.__cuda_array_interface__)


# --------------------------------------------------------------------------
# Peers read by pyxbuf
# --------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["native", "dlpack", "cai"])
def test_cupy_array_through_each_route(cupy, route):
    a = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)[:, ::2]
    obj = {"native": a, "dlpack": DLPackOnly(a), "cai": cai_only(a)}[route]
    v = t.bridge_view(obj)
    want_path = {"dlpack": "dlpack", "cai": "cuda-array-interface"}.get(route)
    if want_path:
        assert v["path"] == want_path
    assert (v["device_type"], v["device_id"]) == (CUDA, 0)
    assert v["buf"] == a.data.ptr
    assert (v["shape"], v["strides"], v["format"]) == ((4, 3), a.strides, "f")
    assert t.copy_to_host(obj) == cupy.asnumpy(a).tobytes()


@pytest.mark.parametrize("route", ["native", "dlpack", "cai"])
def test_torch_cuda_tensor_through_each_route(torch, route):
    x = torch.arange(12, dtype=torch.float64, device="cuda").reshape(3, 4).t()
    obj = {"native": x, "dlpack": DLPackOnly(x), "cai": cai_only(x)}[route]
    v = t.bridge_view(obj)
    if route == "native":
        # PyTorch publishes DLPack's C exchange table: no Python call.
        assert v["path"] in ("dlpack-c", "dlpack"), v["path"]
    else:
        assert v["path"] == {"dlpack": "dlpack", "cai": "cuda-array-interface"}[route]
    assert (v["device_type"], v["device_id"]) == (CUDA, 0)
    assert v["buf"] == x.data_ptr()
    assert v["shape"] == (4, 3) and v["format"] == "d"
    assert v["strides"] == tuple(s * 8 for s in x.stride())
    assert t.copy_to_host(obj) == x.cpu().contiguous().numpy().tobytes()


def test_torch_exposes_the_c_exchange_table(torch):
    x = torch.ones(4, device="cuda")
    assert t.bridge_view(x)["path"] == "dlpack-c"


@pytest.mark.parametrize("route", ["dlpack", "cai"])
def test_consumer_stream_reaches_the_producer(cupy, route):
    a = cupy.arange(10, dtype=cupy.int64)
    s = cupy.cuda.Stream(non_blocking=True)
    obj = DLPackOnly(a) if route == "dlpack" else cai_only(a)
    v = t.bridge_view(obj, consumer_stream=s.ptr)
    assert v["buf"] == a.data.ptr
    t.cycle_stream(obj, DEVICE_VIEW, 100, s.ptr)


def _slow_write(cupy, n, value):
    """On a non-blocking stream: fill an n-item array with `value` after
    enough kernels that a reader which does not wait sees older bytes."""
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        b = cupy.zeros(n, dtype=cupy.float32)
        for _ in range(20):
            b = cupy.sqrt(b * b + 1.0)  # each step a kernel over all of b
        b *= 0
        b += value
    return b, s


@pytest.mark.parametrize("route", ["dlpack", "cai"])
def test_values_written_on_a_producer_stream_are_read_in_order(cupy, route):
    n = 1 << 24
    b, s = _slow_write(cupy, n, 7.0)
    if route == "cai":
        iface = dict(b.__cuda_array_interface__, stream=s.ptr)
        obj = CAI(b, **iface)
    else:
        obj = DLPackOnly(b)
    with s:  # CuPy's __dlpack__ orders the stream it is asked for after its own
        got = np.frombuffer(t.copy_to_host(obj), np.float32)
    assert got.shape == (n,) and (got == 7.0).all()


def test_torch_values_written_on_a_side_stream_are_read(torch):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.zeros(1 << 24, device="cuda")
        for _ in range(20):
            x = torch.sqrt(x * x + 1.0)
        x.mul_(0).add_(5.0)
        got = np.frombuffer(t.copy_to_host(x), np.float32)
    assert (got == 5.0).all()


def test_host_memory_claimed_as_cuda_is_refused():
    host = np.arange(8, dtype=np.float32)
    c = CAI(host, shape=(8,), typestr="<f4", data=(host.ctypes.data, False), version=3)
    with pytest.raises(BufferError) as exc:
        t.bridge_view(c)
    assert "cuda" in str(exc.value).lower()


def test_memory_of_another_ordinal_is_refused(cupy):
    a = cupy.arange(6, dtype=cupy.int32)
    p = t.DLPackProducer(a, device=(CUDA, 1))
    with pytest.raises(BufferError) as exc:
        t.bridge_view(p)
    assert "cuda:1" in str(exc.value) or "cuda:0" in str(exc.value), str(exc.value)
    del p
    gc.collect()


def test_managed_memory(cupy):
    n = 1024
    a = cupy.ndarray((n,), cupy.float32, cupy.cuda.malloc_managed(n * 4))
    a[...] = cupy.arange(n, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()
    for obj in (a, cai_only(a), DLPackOnly(a)):
        v = t.bridge_view(obj)
        assert v["buf"] == a.data.ptr
        assert v["device_type"] in (CUDA, CUDA_MANAGED), v
        assert t.copy_to_host(obj) == np.arange(n, dtype=np.float32).tobytes()


def test_pinned_host_memory_is_host_memory(torch):
    x = torch.arange(16, dtype=torch.float32).pin_memory()
    v = t.bridge_view(x, RO | t.PYXBUF_DEVICE)
    assert v["buf"] == x.data_ptr()
    assert v["device"] is None or v.get("device_type") in (None, CUDA_HOST, t.PYXBUF_DL_CPU)
    assert t.copy_to_host(x) == x.numpy().tobytes()


# --------------------------------------------------------------------------
# pyxbuf's CUDA memory read by the peers, and copies
# --------------------------------------------------------------------------


def _on_gpu(host):
    e = t.to_device(host, (CUDA, 0))
    assert t.view_device(e) == (CUDA, 0)
    return e


def test_to_device_and_back():
    host = np.arange(1000, dtype=np.float64).reshape(10, 100)
    e = _on_gpu(host)
    assert t.copy_to_host(e) == host.tobytes()
    assert t.to_device(e, (CUDA, 0)) is e  # already there: no copy
    back = t.to_device(e, None)  # device to host
    assert bytes(memoryview(back)) == host.tobytes()


def test_pyxbuf_cuda_memory_read_by_cupy(cupy):
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    e = _on_gpu(host)
    a = cupy.from_dlpack(e)
    assert a.data.ptr == t.inspect(e, DEVICE_VIEW)["buf"]
    np.testing.assert_array_equal(cupy.asnumpy(a), host)


def test_pyxbuf_cuda_memory_read_by_torch(torch):
    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    e = _on_gpu(host)
    x = torch.from_dlpack(e)
    assert x.device.type == "cuda" and x.data_ptr() == t.inspect(e, DEVICE_VIEW)["buf"]
    np.testing.assert_array_equal(x.cpu().numpy(), host)


def test_pyxbuf_cuda_memory_read_by_cupy_asarray(cupy):
    host = np.arange(10, dtype=np.float64).reshape(2, 5)
    e = _on_gpu(host)
    cai = e.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<f8" and cai["shape"] == (2, 5)
    assert cai["data"] == (t.inspect(e, DEVICE_VIEW)["buf"], False)
    a = cupy.asarray(e)
    assert a.data.ptr == cai["data"][0]
    np.testing.assert_array_equal(cupy.asnumpy(a), host)


def test_formats_without_a_typestr_have_no_cai():
    e = t.exporter("[ml_dtypes$bfloat16]", (4,), device=(CUDA, 0))
    with pytest.raises(AttributeError, match="no __cuda_array_interface__ typestr"):
        e.__cuda_array_interface__


def test_jax_cuda_arrays_both_ways():
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("cuda")[0]
    except RuntimeError:
        pytest.skip("JAX has no CUDA backend here")
    x = jax.device_put(jax.numpy.arange(12, dtype=jax.numpy.float32).reshape(3, 4), gpu)
    v = t.bridge_view(x)
    assert v["path"] in ("dlpack", "dlpack-c") and (v["device_type"], v["device_id"]) == (CUDA, 0)
    assert t.copy_to_host(x) == np.asarray(x).tobytes()
    e = _on_gpu(np.arange(6, dtype=np.int32))
    y = jax.numpy.from_dlpack(e)
    assert y.devices() == {gpu}
    np.testing.assert_array_equal(np.asarray(y), np.arange(6, dtype=np.int32))


def test_a_peer_kernel_writes_what_pyxbuf_reads_back(torch):
    e = t.exporter("<f", (256,), device=(CUDA, 0))
    x = torch.from_dlpack(e)
    x.fill_(3.5)
    torch.cuda.synchronize()
    assert (np.frombuffer(t.copy_to_host(e), np.float32) == 3.5).all()


def test_cuda_exporters_free_their_memory(torch):
    # 200 x 16 MiB: a leak would lose 3.2 GiB; other processes on the GPU
    # (parallel test workers) move the free figure by far less than 1 GiB.
    def churn():
        for _ in range(200):
            e = t.exporter("B", (16 << 20,), device=(CUDA, 0))
            del e
        gc.collect()
        torch.cuda.synchronize()
        return torch.cuda.mem_get_info()[0]

    free_before = churn()
    free_after = churn()
    assert free_before - free_after < 1 << 30, (free_before, free_after)
