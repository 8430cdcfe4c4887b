"""Regressions for defects a review of the bridges found (each test failed
before its fix: span overflow, lying lengths, NULL data, writable access to
immutable JAX arrays, copies sized by the format instead of the itemsize,
managed memory without a backend, empty views conflicting in the registry,
host-only calls on released views: c/tests/test_device.c)."""

import ctypes
import gc

import numpy as np
import pytest

import _pyxbuf_testext as t

EXT = t.PYXBUF_DL_EXT_DEV
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE


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


def test_immutable_jax_array_is_not_handed_out_writable():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(4, dtype=jnp.float32)
    with pytest.raises(BufferError, match="classic buffer of .* refused the request WRITABLE"):
        t.acquire(x, t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE)
    assert t.inspect(x, t.PyBUF_RECORDS_RO)["path"] == "classic"


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


def test_managed_and_pinned_cuda_memory_have_a_backend():
    a = np.arange(4, dtype=np.float32)
    p = t.DLPackProducer(a, device=(13, 0))  # kDLCUDAManaged, host memory here
    # The CUDA backend now serves type 13: without a driver it says so,
    # instead of accepting the pointer unchecked.
    with pytest.raises(BufferError, match="no CUDA driver found|not memory of device"):
        t.acquire(p, DEVICE_VIEW)


def test_empty_views_never_conflict():
    x = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE
    m = memoryview(bytearray(40))
    held = t.acquire(m, x)
    t.acquire(m[20:20], x).release()
    held.release()
