"""Cooperative borrows (PYXBUF_EXT_TRACKED) for producers that know nothing of
borrows, shared by two separately linked copies of libpyxbuf in one process:
_pyxbuf_testext and _pyxbuf_second_copy each link their own static copy."""

import numpy as np
import pytest

import _pyxbuf_second_copy as other
import _pyxbuf_testext as t

SHARED = t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE


@pytest.fixture(autouse=True)
def registry_empty_after():
    yield
    assert t.shared_info()[1] == 0


def test_both_copies_use_one_table_and_one_transfer_engine():
    mine, theirs = t.shared_info(), other.shared_info()
    assert mine[0] == theirs[0]  # the same table, installed once
    assert mine[2] == theirs[2]
    # The backend registry is the process's transfer engine's (issue 47):
    # the emulated device only the test extension registered serves the
    # second copy too (test_engine.py tests the rest of the engine).
    assert other.has_emulated_device()


def test_grants_are_tracked():
    a = np.zeros(8)
    v = t.acquire(a, SHARED)
    info = v.info()
    assert info["ext_flags"] == t.PYXBUF_EXT_TRACKED | t.PYXBUF_EXT_SHARED
    assert info["flags"] == t.PYXBUF_BORROW_SHARED
    assert info["readonly"] == 1  # the shared borrower reads only
    assert t.shared_info()[1] == 1
    v.release()
    x = t.acquire(a, EXCLUSIVE)
    assert x.info()["ext_flags"] == t.PYXBUF_EXT_TRACKED | t.PYXBUF_EXT_EXCLUSIVE
    assert x.info()["readonly"] == 0
    x.release()


@pytest.mark.parametrize("first,second,granted", [
    ("shared", "shared", True),
    ("shared", "exclusive", False),
    ("exclusive", "shared", False),
    ("exclusive", "exclusive", False),
])
def test_conflicts_across_copies(first, second, granted):
    a = np.arange(16, dtype=np.int32)
    flags = {"shared": SHARED, "exclusive": EXCLUSIVE}
    held = t.acquire(a, flags[first])
    if granted:
        other.acquire(a, flags[second]).release()
    else:
        with pytest.raises(BufferError, match="held by another view in this process"):
            other.acquire(a, flags[second])
    held.release()
    other.acquire(a, flags[second]).release()  # released: grantable again


def test_overlap_is_by_memory_not_by_object():
    a = np.arange(100, dtype=np.uint8)
    head, tail, middle = a[:50], a[50:], a[40:60]
    x = other.acquire(head, EXCLUSIVE)
    t.acquire(tail, EXCLUSIVE).release()  # disjoint memory: no conflict
    with pytest.raises(BufferError, match="overlaps an exclusive borrow"):
        t.acquire(middle, SHARED)  # a different object over the same bytes
    x.release()


INTERLEAVED = {
    # name: (array, a view, a view interleaved with it: no byte in common)
    "even-odd": lambda: (lambda a: (a[::2], a[1::2]))(np.arange(16.0)),
    "real-imag": lambda: (lambda c: (c.real, c.imag))(np.zeros(8, np.complex128)),
    "columns": lambda: (lambda m: (m[:, 0], m[:, 1]))(np.zeros((4, 3))),
    "column-pairs-2d": lambda: (lambda m: (m[:, 0:2:2], m[:, 1:3:2]))(np.zeros((5, 4), np.int32)),
    "rgb-channels": lambda: (lambda im: (im[..., 0], im[..., 2]))(np.zeros((3, 4, 3), np.uint8)),
    "mixed-itemsize": lambda: (lambda b: (b[::2], b.view(np.uint8)[4::8]))(
        np.zeros(16, np.uint32)),
}


@pytest.mark.parametrize("name", sorted(INTERLEAVED))
def test_interleaved_views_do_not_conflict(name):
    """Issue 25, item 18: exclusive borrows of views that share a range but no
    byte are both granted, through either copy of the library."""
    one, two = INTERLEAVED[name]()
    assert not np.shares_memory(one, two)
    x = t.acquire(one, EXCLUSIVE)
    y = other.acquire(two, EXCLUSIVE)
    x.release()
    y.release()


OVERLAPPING = {
    # a view, and one that shares at least one byte with it
    "every-third-vs-every-second": lambda: (lambda a: (a[::3], a[::2]))(np.arange(12.0)),
    "column-vs-row": lambda: (lambda m: (m[:, 1], m[2]))(np.zeros((4, 3))),
    "halves-of-items": lambda: (lambda b: (b[::2], b.view(np.uint16)[1::4]))(
        np.zeros(8, np.uint32)),
    # rust-numpy's test (pointer distance modulo the stride gcd, no item
    # lengths) calls these two disjoint: 2 % 8 != 0, yet bytes 2-3 are shared.
    "odd-offset-int32": lambda: (lambda raw: (raw[0:32].view(np.int32)[::2],
                                              raw[2:34].view(np.int32)[::2]))(
        np.zeros(40, np.uint8)),
}


@pytest.mark.parametrize("name", sorted(OVERLAPPING))
def test_interleaved_views_that_share_a_byte_conflict(name):
    one, two = OVERLAPPING[name]()
    assert np.shares_memory(one, two)
    x = t.acquire(one, EXCLUSIVE)
    with pytest.raises(BufferError, match="overlaps an exclusive borrow"):
        other.acquire(two, SHARED)
    x.release()


def test_writable_shared_borrow_is_refused():
    with pytest.raises(BufferError, match="ask for PYXBUF_BORROW_EXCLUSIVE to write"):
        t.acquire(bytearray(4), t.PyBUF_RECORDS | t.PYXBUF_BORROW_SHARED)


def test_plain_views_are_not_tracked():
    a = np.zeros(4)
    x = t.acquire(a, EXCLUSIVE)
    v = t.acquire(a, t.PyBUF_RECORDS)  # cooperative: plain consumers are not stopped
    assert v.info()["ext_flags"] == 0
    v.release()
    x.release()


def test_native_exporters_keep_their_own_counts():
    e = t.exporter("i", (4,))
    v = t.acquire(e, SHARED)
    assert v.info()["ext_flags"] == t.PYXBUF_EXT_SHARED  # the producer's grant, not TRACKED
    assert t.shared_info()[1] == 0
    v.release()


def test_empty_views_never_conflict():
    x = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE
    m = memoryview(bytearray(40))
    held = t.acquire(m, x)
    t.acquire(m[20:20], x).release()
    held.release()
