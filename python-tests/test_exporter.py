"""pyxbuf.Exporter: the ready-made producer, its borrow grants and device rules."""

import sys

import numpy as np
import pytest

import _pyxbuf_testext as t

SHARED = t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE
PLAIN_RO = t.PyBUF_RECORDS_RO
PLAIN_RW = t.PyBUF_RECORDS
REQUESTS = {"shared": SHARED, "exclusive": EXCLUSIVE, "plain_ro": PLAIN_RO, "plain_rw": PLAIN_RW}

# (held, requested) -> granted? The documented matrix: shared + shared ok,
# shared + exclusive refused, exclusive + anything refused, writable views and
# shared borrows exclude each other.
MATRIX = {
    ("shared", "shared"): True,
    ("shared", "exclusive"): False,
    ("shared", "plain_ro"): True,
    ("shared", "plain_rw"): False,
    ("exclusive", "shared"): False,
    ("exclusive", "exclusive"): False,
    ("exclusive", "plain_ro"): False,
    ("exclusive", "plain_rw"): False,
    # A read-only request still gets writable memory (the classic protocol
    # lets the consumer write when readonly is 0, as memoryview does), so it
    # counts as a writer.
    ("plain_ro", "shared"): False,
    ("plain_ro", "exclusive"): False,
    ("plain_ro", "plain_ro"): True,
    ("plain_ro", "plain_rw"): True,
    ("plain_rw", "shared"): False,
    ("plain_rw", "exclusive"): False,
    ("plain_rw", "plain_ro"): True,
    ("plain_rw", "plain_rw"): True,
}


@pytest.mark.parametrize("held,requested", list(MATRIX), ids=[f"{h}-then-{r}" for h, r in MATRIX])
def test_grant_matrix(held, requested):
    e = t.exporter("i", (4,))
    first = t.acquire(e, REQUESTS[held])
    if MATRIX[(held, requested)]:
        second = t.acquire(e, REQUESTS[requested])
        second.release()
    else:
        with pytest.raises(BufferError, match="cannot grant") as info:
            t.acquire(e, REQUESTS[requested])
        assert "live now: 1 view, " in str(info.value)
    first.release()
    # Released: everything is grantable again.
    again = t.acquire(e, REQUESTS[requested])
    again.release()
    assert e.borrows == {"views": 0, "writable": 0, "shared": 0, "exclusive": 0}


def test_grants_are_reported_in_ext_flags():
    e = t.exporter("<f", (2, 3))
    s = t.acquire(e, SHARED)
    info = s.info()
    assert info["path"] == "native"
    assert info["ext_flags"] == t.PYXBUF_EXT_SHARED
    assert info["flags"] == t.PYXBUF_BORROW_SHARED
    assert info["readonly"] == 1
    s.release()
    x = t.acquire(e, EXCLUSIVE)
    info = x.info()
    assert info["ext_flags"] == t.PYXBUF_EXT_EXCLUSIVE
    assert info["flags"] == t.PYXBUF_BORROW_EXCLUSIVE
    assert info["readonly"] == 0
    x.release()


def test_shared_borrow_hands_memoryview_read_only():
    e = t.exporter("B", (4,))
    s = t.acquire(e, SHARED)
    mv = memoryview(e)  # classic consumer during a shared borrow
    assert mv.readonly
    with pytest.raises(TypeError):
        mv[0] = 1
    mv.release()
    s.release()
    mv = memoryview(e)
    assert not mv.readonly
    mv[0] = 7
    mv.release()


def test_exclusive_borrow_blocks_numpy():
    e = t.exporter("<i", (3,))
    x = t.acquire(e, EXCLUSIVE)
    with pytest.raises(BufferError, match="an exclusive borrow is live"):
        np.frombuffer(e, dtype=np.int32)
    x.release()
    assert np.asarray(e).tolist() == [0, 0, 0]


def test_exporter_describes_itself_to_numpy():
    e = t.exporter("<d", (2, 3))
    assert (e.shape, e.strides, e.format, e.itemsize, e.nbytes) == ((2, 3), (24, 8), "<d", 8, 48)
    t.exporter_poke(e, 0, 0)
    a = np.asarray(e)
    assert a.dtype == np.dtype("<f8") and a.shape == (2, 3)
    a[1, 2] = 5.0
    assert np.asarray(e)[1, 2] == 5.0
    info = t.inspect(e, t.PyBUF_FULL_RO)
    assert info["buf"] == a.__array_interface__["data"][0]


def test_readonly_exporter_refuses_writable():
    e = t.exporter("h", (5,), readonly=True)
    with pytest.raises(BufferError, match="is read-only"):
        t.inspect(e, t.PyBUF_WRITABLE)
    with pytest.raises(BufferError, match="is read-only"):
        t.acquire(e, EXCLUSIVE)
    assert t.inspect(e, PLAIN_RO)["readonly"] == 1


def test_exporter_bad_format():
    with pytest.raises(ValueError, match="position"):
        t.exporter("T{i", (2,))


def test_device_memory_needs_pyxbuf_device():
    e = t.exporter("B", (64,), device=(t.PYXBUF_DL_EXT_DEV, 3))
    with pytest.raises(BufferError, match=r"on device 'ext_dev:3'.*request PYXBUF_DEVICE"):
        t.inspect(e, t.PyBUF_FULL_RO)
    with pytest.raises(BufferError):
        memoryview(e)  # a classic consumer never gets a device pointer
    info = t.inspect(e, t.PyBUF_FULL_RO | t.PYXBUF_DEVICE)
    assert info["device"] == t.PYXBUF_DEVICE_DLPACK
    assert info["flags"] == t.PYXBUF_DEVICE
    assert (info["device_type"], info["device_id"]) == (t.PYXBUF_DL_EXT_DEV, 3)
    assert info["is_host"] is False
    assert e.device == "ext_dev:3"


@pytest.mark.parametrize("device", [None, (t.PYXBUF_DL_EXT_DEV, 0)])
def test_cuda_array_interface_only_for_cuda_memory(device):
    # CAI describes CUDA memory alone (test_cuda_peers.py reads a CUDA one with
    # cupy.asarray on GPU machines); elsewhere the attribute is absent, so
    # hasattr() is False and consumers such as CuPy take another route.
    e = t.exporter("<f", (4,), device=device)
    assert not hasattr(e, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match=r"describes CUDA memory.*on '(cpu|ext_dev:0)'"):
        e.__cuda_array_interface__


def test_exporter_refcounts_after_10000_cycles():
    e = t.exporter("f", (16,))
    before = sys.getrefcount(e)
    for flags in (SHARED, EXCLUSIVE, PLAIN_RO, PLAIN_RW):
        t.cycle(e, flags, 10_000)
    assert sys.getrefcount(e) == before
    assert e.borrows["views"] == 0


def test_exporter_dies_after_last_view():
    import weakref

    e = t.exporter("f", (4,))
    ref = weakref.ref(e)
    v = t.acquire(e, SHARED)
    del e
    assert ref() is not None  # the view keeps it alive
    v.release()
    assert ref() is None
