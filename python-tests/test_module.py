"""The suite's acquisition checks through the `pyxbuf` Python module (the Rust
layer, rust/pyxbuf-python) instead of the C test extension: every classic field
as PyObject_GetBuffer gives it, the bridges' paths, grants, refusals and
refcounts. The C test extension stays for what only C can do (lying
producers, DLPack producers with counting deleters, a second library copy)."""

import sys
import time

import ml_dtypes
import numpy as np
import pytest

import _pyxbuf_testext as t
from numpy_route import USER_DTYPE_ROUTE, classic_path
import pyxbuf
from test_acquire import CLASSIC_REQUESTS, PRODUCERS

FIELDS = ("itemsize", "ndim", "len", "shape", "strides")


@pytest.fixture(autouse=True)
def no_borrow_left_behind():
    yield
    assert pyxbuf.live_borrows() == 0


@pytest.mark.parametrize("name,factory", PRODUCERS, ids=[p[0] for p in PRODUCERS])
@pytest.mark.parametrize("request_name", list(CLASSIC_REQUESTS))
def test_module_sees_what_getbuffer_gives(name, factory, request_name):
    obj = factory()
    flags = CLASSIC_REQUESTS[request_name]
    try:
        theirs = t.classic(obj, flags)
    except Exception as exc:  # the producer refuses: so must the module
        assert isinstance(exc, (BufferError, ValueError, TypeError))
        with pytest.raises(BufferError):
            pyxbuf.inspect(obj, flags)
        return
    ours = pyxbuf.inspect(obj, flags)
    for field in FIELDS:
        assert ours[field] == theirs[field], field
    assert ours["readonly"] == bool(theirs["readonly"])
    assert ours["format"] == (theirs["format"] or "B")
    assert ours["path"] == classic_path(obj)
    assert ours["requested_flags"] == flags
    assert (ours["honoured_extended_flags"], ours["grant_flags"], ours["device"]) == (0, 0, "cpu")


def test_bridges_through_the_module():
    assert pyxbuf.inspect(np.ones(3, dtype=ml_dtypes.bfloat16))["path"] == USER_DTYPE_ROUTE
    swapped = np.dtype(ml_dtypes.bfloat16).newbyteorder()
    assert pyxbuf.inspect(np.ones(3, dtype=swapped))["path"] == "array-interface"
    assert pyxbuf.inspect(np.ones(2, dtype=ml_dtypes.float8_e5m2))["format"] == (
        "[ml_dtypes$float8_e5m2]")
    jnp = pytest.importorskip("jax.numpy")
    info = pyxbuf.inspect(jnp.arange(4, dtype=jnp.bfloat16))
    assert (info["path"], info["format"]) == ("dlpack", "[ml_dtypes$bfloat16]")


def test_module_grants_and_conflicts():
    a = np.arange(8.0)
    shared = pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED
    exclusive = pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE
    assert pyxbuf.inspect(a, shared)["grants"] == {
        "shared": True, "exclusive": False, "tracked": True}
    held = t.acquire(a, exclusive)  # another consumer (the C extension's copy)
    with pytest.raises(BufferError, match="held by another view in this process"):
        pyxbuf.inspect(a, shared)
    held.release()


def test_module_reports_a_foreign_device_as_its_producer_named_it():
    """A device identifier that no pyxbuf backend reads (a producer's own) is
    reported as given, never as "cpu"; its DLPack integers are unknown."""
    liar = t.Liar("foreign_device")
    info = pyxbuf.inspect(liar)
    assert info["path"] == "native"
    assert info["device"] == info["device_identifier"] == "my_accel:0"
    assert (info["device_type"], info["device_id"]) == (None, None)
    assert info["honoured_extended_flags"] == pyxbuf.PYXBUF_DEVICE
    # asked without PYXBUF_DEVICE, the producer answers host memory
    host = pyxbuf.inspect(liar, pyxbuf.PyBUF_RECORDS_RO)
    assert (host["device"], host["device_identifier"], host["device_type"]) == ("cpu", None, 1)
    # moving it needs a device pyxbuf can name: refused, naming the identifier
    with pytest.raises(ValueError, match="view device 'my_accel:0' is not 'pyxbuf.dlpack'; "
                       "pyxbuf cannot tell which device holds it"):
        pyxbuf.to_device(liar, "cpu")
    assert (liar.gets, liar.releases) == (3, 3)


def test_two_acquisitions_of_one_array_name_the_likely_cause():
    """Two views of one array in one process (two arguments of one call, for
    pyxbuf cannot tell the call's arguments apart from C): the refusal says
    where the other view may be and what to do."""
    a = np.arange(8, dtype=np.int32)
    held = t.acquire(a, pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE)
    with pytest.raises(BufferError) as info:
        t.acquire(a[2:], pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    msg = str(info.value)
    assert msg.startswith("pyxbuf: cannot grant a shared borrow of 'numpy.ndarray': its memory")
    assert "overlaps an exclusive borrow of [0x" in msg
    assert ("held by another view in this process (for example another argument of the same "
            "call, or a view held by any copy of pyxbuf); release that view first, or pass a "
            "copy of the array") in msg
    held.release()
    # a strided holder's items are described, in whole words
    held = t.acquire(a[::2], pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE)
    with pytest.raises(BufferError, match=r"\(items of 4 bytes every 8 bytes\) held by another"):
        t.acquire(a[2::2], pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    held.release()
    held = t.acquire(np.frombuffer(a, np.uint8)[::4],
                     pyxbuf.PyBUF_RECORDS | pyxbuf.PYXBUF_BORROW_EXCLUSIVE)
    with pytest.raises(BufferError, match=r"\(items of 1 byte every 4 bytes\)"):
        t.acquire(a, pyxbuf.PyBUF_RECORDS_RO | pyxbuf.PYXBUF_BORROW_SHARED)
    held.release()


def test_module_refcounts_after_10000_cycles():
    for name, factory in PRODUCERS:
        obj = factory()
        pyxbuf.inspect(obj, pyxbuf.PyBUF_RECORDS_RO)
        before = sys.getrefcount(obj)
        for _ in range(10_000):
            pyxbuf.inspect(obj, pyxbuf.PyBUF_RECORDS_RO)
        assert sys.getrefcount(obj) == before, name


def test_transfer_config_and_staged_copies_through_the_module():
    """pyxbuf.transfer_config: the knobs of pinned staging (issue 40), here
    on the emulated device with 64 KiB chunks so a small array is staged."""
    before = pyxbuf.transfer_config()
    assert set(before) == {"enabled", "threads", "buffers", "threshold", "chunk", "pool_cap",
                           "device_pool", "device_pool_shareable",
                           "device_pool_release_threshold"}
    assert pyxbuf.transfer_config() == before  # no arguments: nothing changes
    try:
        now = pyxbuf.transfer_config(threshold=1, chunk=64 << 10, buffers=3, threads=2)
        assert (now["threshold"], now["chunk"], now["buffers"], now["threads"]) == (
            1, 64 << 10, 3, 2)
        a = np.arange(300_001, dtype=np.float32)
        taken = pyxbuf.pinned_pool_stats()
        dev = pyxbuf.to_device(a, "ext_dev:0")
        for _ in range(2):  # pageable twice: then the pool grows a block of its size
            cold = pyxbuf.to_device(dev, "cpu")
            np.testing.assert_array_equal(np.frombuffer(cold, np.float32), a)
            del cold
        for _ in range(10000):
            if pyxbuf.pinned_pool_stats()["background_pending"] == 0:
                break
            time.sleep(0.001)
        assert pyxbuf.pinned_pool_stats()["background_allocations"] > taken["background_allocations"]
        back = pyxbuf.to_device(dev, "cpu")  # pooled page-locked memory, read by NumPy
        assert pyxbuf.pinned_pool_stats()["used_bytes"] >= a.nbytes
        np.testing.assert_array_equal(np.frombuffer(back, np.float32), a)
        after = pyxbuf.pinned_pool_stats()
        assert after["allocations"] + after["reuses"] > taken["allocations"] + taken["reuses"]
        # In the binding's terms: the Python call is named, not the C function.
        with pytest.raises(ValueError, match=r"^pyxbuf\.transfer_config: threads is 0; it must be 1\.\.64$"):
            pyxbuf.transfer_config(threads=0)
        assert pyxbuf.transfer_config()["threads"] == 2
        del back
        pyxbuf.pinned_pool_trim()
        assert pyxbuf.pinned_pool_stats()["used_bytes"] == 0
    finally:
        pyxbuf.transfer_config(**before)


def test_the_device_pool_knobs_through_the_module():
    """pyxbuf.transfer_config's device pool knobs (issue 47 part 3): on by
    default with a 256 MiB release threshold; device memory works either way."""
    before = pyxbuf.transfer_config()
    assert (before["device_pool"], before["device_pool_release_threshold"]) == (True, 256 << 20)
    assert before["device_pool_shareable"] is False
    a = np.arange(1000, dtype=np.float32)
    try:
        for pool in (False, True):
            now = pyxbuf.transfer_config(device_pool=pool, device_pool_release_threshold=1 << 20)
            assert (now["device_pool"], now["device_pool_release_threshold"]) == (pool, 1 << 20)
            for _ in range(3):  # the pool hands the memory out again
                d = pyxbuf.to_device(a, "ext_dev:0")
                np.testing.assert_array_equal(np.frombuffer(pyxbuf.to_device(d, "cpu"), np.float32), a)
                e = pyxbuf.exporter((256,), "f", device="ext_dev:0")
                assert e.device == pyxbuf.to_device(a, "ext_dev:0").device
                del d, e
        with pytest.raises(ValueError, match=r"device_pool_release_threshold is "
                                             r"9223372036854775808; it must be at most 2\^63 - 1"):
            pyxbuf.transfer_config(device_pool_release_threshold=1 << 63)
        assert pyxbuf.transfer_config()["device_pool_release_threshold"] == 1 << 20
        # Shareable pools: the emulated device shares any of its memory, so
        # device arrays work as before (CUDA's switch is test_cuda.c's).
        assert pyxbuf.transfer_config(device_pool_shareable=True)["device_pool_shareable"]
        d = pyxbuf.to_device(a, "ext_dev:0")
        np.testing.assert_array_equal(np.frombuffer(pyxbuf.to_device(d, "cpu"), np.float32), a)
        assert pyxbuf.pyxbuf._share_device(d)[2] >= 0
    finally:
        pyxbuf.transfer_config(**before)
