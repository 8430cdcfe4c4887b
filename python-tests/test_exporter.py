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
# shared + exclusive refused, exclusive + anything refused, no writable view
# while a shared borrow is live. A borrow asked while plain views the
# exporter does not control are live (a NumPy array, a memoryview, a DLPack
# export over its memory) is granted TRACKED: taken in pyxbuf's registry as
# for NumPy's memory, not refused (issue 38, part 2).
TRACKED = "tracked"
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
    # counts as a writer the exporter cannot stop.
    ("plain_ro", "shared"): TRACKED,
    ("plain_ro", "exclusive"): TRACKED,
    ("plain_ro", "plain_ro"): True,
    ("plain_ro", "plain_rw"): True,
    ("plain_rw", "shared"): TRACKED,
    ("plain_rw", "exclusive"): TRACKED,
    ("plain_rw", "plain_ro"): True,
    ("plain_rw", "plain_rw"): True,
}
GRANT_BITS = t.PYXBUF_EXT_SHARED | t.PYXBUF_EXT_EXCLUSIVE


@pytest.mark.parametrize("held,requested", list(MATRIX), ids=[f"{h}-then-{r}" for h, r in MATRIX])
def test_grant_matrix(held, requested):
    e = t.exporter("i", (4,))
    first = t.acquire(e, REQUESTS[held])
    if MATRIX[(held, requested)]:
        second = t.acquire(e, REQUESTS[requested])
        ext = second.info()["ext_flags"]
        if requested in ("shared", "exclusive"):
            assert ext & GRANT_BITS
            assert bool(ext & t.PYXBUF_EXT_TRACKED) == (MATRIX[(held, requested)] == TRACKED)
            assert t.shared_info()[1] == (1 if ext & t.PYXBUF_EXT_TRACKED else 0)
        second.release()
    else:
        with pytest.raises(BufferError, match="cannot grant") as info:
            t.acquire(e, REQUESTS[requested])
        assert "live now: 1 view, " in str(info.value)
    first.release()
    assert t.shared_info()[1] == 0
    # Released: everything is grantable again, and enforced.
    again = t.acquire(e, REQUESTS[requested])
    assert not again.info()["ext_flags"] & t.PYXBUF_EXT_TRACKED
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


# Issue 38, part 2: pyxbuf's own arrays with a Python view alive. A user
# wraps an exporter with np.asarray, memoryview or np.from_dlpack to look at
# it, then passes the exporter back to a consumer asking for a borrow.
def _numpy_view(e):
    return np.asarray(e)


def _memoryview(e):
    return memoryview(e)


def _dlpack(e):
    return np.from_dlpack(e)


FOREIGN_VIEWS = {"np.asarray": _numpy_view, "memoryview": _memoryview,
                 "np.from_dlpack": _dlpack}
try:  # PyTorch where installed (make test-torch puts its cached install on the path)
    import torch

    FOREIGN_VIEWS["torch.from_dlpack"] = torch.from_dlpack
except ImportError:
    pass


@pytest.mark.parametrize("wrap", list(FOREIGN_VIEWS))
@pytest.mark.parametrize("request_name", ["shared", "exclusive"])
def test_borrow_with_a_foreign_view_alive_is_tracked_then_enforced(wrap, request_name):
    e = t.exporter("f", (6,))
    seen = FOREIGN_VIEWS[wrap](e)
    assert e.borrows["views"] == 1
    v = t.acquire(e, REQUESTS[request_name])
    kind = t.PYXBUF_EXT_SHARED if request_name == "shared" else t.PYXBUF_EXT_EXCLUSIVE
    assert v.info()["ext_flags"] == t.PYXBUF_EXT_TRACKED | kind
    assert t.shared_info()[1] == 1  # in the registry, where NumPy's borrows are
    # Borrowers still exclude each other: on the exporter itself,
    with pytest.raises(BufferError, match="cannot grant an exclusive borrow"):
        t.acquire(e, EXCLUSIVE)
    # and through the foreign view (pyxbuf's registry sees both).
    if wrap != "memoryview" or request_name == "exclusive":
        # (NumPy 1's from_dlpack makes read-only arrays: refused for that first.)
        read_only = isinstance(seen, np.ndarray) and not seen.flags.writeable
        match = "is read-only" if read_only else "held by another view in this process"
        with pytest.raises(BufferError, match=match):
            t.acquire(seen, EXCLUSIVE)
    v.release()
    assert t.shared_info()[1] == 0
    del seen
    assert e.borrows["views"] == 0
    # The foreign view gone: enforced again.
    v = t.acquire(e, REQUESTS[request_name])
    assert v.info()["ext_flags"] == kind
    v.release()


def test_tracked_shared_borrow_keeps_out_new_writers():
    e = t.exporter("f", (4,))
    n = np.asarray(e)
    assert n.flags.writeable
    v = t.acquire(e, SHARED)
    assert v.info()["ext_flags"] & t.PYXBUF_EXT_TRACKED
    # A new view is read-only while the shared borrow lives (today's rule).
    assert not np.asarray(e).flags.writeable
    with pytest.raises(BufferError, match="a shared borrow is live"):
        t.acquire(e, PLAIN_RW)
    # A pyxbuf exclusive borrow of the NumPy view is refused by the registry,
    # a shared one granted.
    with pytest.raises(BufferError, match="overlaps a shared borrow"):
        t.acquire(n, EXCLUSIVE)
    t.acquire(n, SHARED).release()
    v.release()
    del n


def test_tracked_grant_of_a_device_exporter_is_keyed_by_its_device():
    d = t.to_device(t.exporter("f", (4,)), (t.PYXBUF_DL_EXT_DEV, 0))
    cap = d.__dlpack__(max_version=(1, 3))  # a DLPack export held elsewhere
    v = t.acquire(d, SHARED | t.PYXBUF_DEVICE)
    assert v.info()["ext_flags"] == t.PYXBUF_EXT_TRACKED | t.PYXBUF_EXT_SHARED
    # Host memory at the same numeric address would not conflict: another
    # device. Nothing else to check here than that the grant came back.
    v.release()
    del cap
    v = t.acquire(d, SHARED | t.PYXBUF_DEVICE)
    assert v.info()["ext_flags"] == t.PYXBUF_EXT_SHARED
    v.release()


def test_asarray_under_an_exclusive_borrow_raises_instead_of_an_object_array():
    e = t.exporter("f", (3,))
    x = t.acquire(e, EXCLUSIVE)
    with pytest.raises(BufferError, match="an exclusive borrow is live"):
        np.asarray(e)
    with pytest.raises(BufferError, match="an exclusive borrow is live"):
        e.__array__()
    x.release()
    a = np.asarray(e)
    assert a.dtype == np.float32 and a.shape == (3,)
    assert np.shares_memory(a, e.__array__())


@pytest.mark.skipif(np.__version__ < "2", reason="np.asarray(copy=...) is NumPy 2's")
def test_array_honours_copy_and_dtype():
    e = t.exporter("f", (3,))
    t.exporter_poke(e, 0, 0x3F)  # a nonzero byte of the first float
    a = e.__array__()
    b = e.__array__(copy=True)
    assert np.shares_memory(a, np.asarray(e)) and not np.shares_memory(a, b)
    assert b.tolist() == a.tolist()
    assert e.__array__(np.float64).dtype == np.float64
    with pytest.raises(ValueError):
        e.__array__(np.float64, copy=False)
    assert np.array(e, copy=False).base is not None
    sig = __import__("inspect").signature(type(e).__array__)
    assert list(sig.parameters) == ["self", "dtype", "copy"]
