"""Enforced shared grants over immutable memory (issue 50, item 2).

A shared borrow of memory that lies in an exact `bytes` object -- the bytes
themselves, a read-only memoryview whose chain ends in one, a NumPy array
whose base chain is read-only and ends in one -- is granted PYXBUF_EXT_SHARED
without PYXBUF_EXT_TRACKED: nobody can write that memory, so the grant is
kept by the memory itself and takes no registry entry. Every mutable producer
(and the read-only views of one, a bytes subclass, a read-only mmap) keeps a
tracked grant. Real CPython and NumPy objects throughout."""

import array
import gc
import mmap
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import _pyxbuf_second_copy as other
import _pyxbuf_testext as t
import pyxbuf

SHARED = t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE
ENFORCED = t.PYXBUF_EXT_SHARED
TRACKED = t.PYXBUF_EXT_SHARED | t.PYXBUF_EXT_TRACKED
DATA = bytes(range(64))
# NumPy 2's arrays are read from their struct, base chain included; NumPy 1's
# through their export only, whose base pyxbuf does not follow: tracked.
NUMPY_ENFORCED = ENFORCED if int(np.__version__.split(".")[0]) >= 2 else TRACKED


class BytesSubclass(bytes):
    pass


class ClassicLiar(t.Liar):
    """A classic producer (no extended flag declared)."""

    __pyxbuf_supported_flags__ = 0


@pytest.fixture(autouse=True)
def registry_empty_after():
    yield
    gc.collect()
    assert t.shared_info()[1] == 0


def grant_of(obj, flags=SHARED):
    """(ext_flags, readonly, live registry entries while held, path)."""
    v = t.acquire(obj, flags)
    info = v.info()
    live = t.shared_info()[1]
    v.release()
    return info["ext_flags"], info["readonly"], live, info["path"]


IMMUTABLE = {
    "bytes": lambda: DATA,
    "memoryview": lambda: memoryview(DATA),
    "memoryview-slice": lambda: memoryview(DATA)[8:40],
    "memoryview-cast": lambda: memoryview(DATA).cast("i"),
    "memoryview-2d": lambda: memoryview(DATA).cast("B", (8, 8)),
    "memoryview-of-memoryview": lambda: memoryview(memoryview(DATA)[4:]),
    "memoryview-readonly-of-bytes": lambda: memoryview(DATA).toreadonly(),
    "frombuffer": lambda: np.frombuffer(DATA, np.uint8),
    "frombuffer-f32-2d": lambda: np.frombuffer(DATA, np.float32).reshape(4, 4),
    "frombuffer-offset": lambda: np.frombuffer(DATA, np.int16, count=8, offset=6),
    "frombuffer-view-of-view": lambda: np.frombuffer(DATA, np.uint8)[16:].view(np.uint32),
    "memoryview-of-frombuffer": lambda: memoryview(np.frombuffer(DATA, np.float64)),
    "frombuffer-of-memoryview": lambda: np.frombuffer(memoryview(DATA)[8:], np.uint8),
    "ndarray-buffer": lambda: np.ndarray((4,), np.uint32, buffer=DATA, offset=16),
}

MUTABLE = {
    "bytearray": lambda: bytearray(DATA),
    "array.array": lambda: array.array("B", DATA),
    "bytes-subclass": lambda: BytesSubclass(DATA),
    "readonly-memoryview-of-bytearray": lambda: memoryview(bytearray(DATA)).toreadonly(),
    "frombuffer-of-bytearray": lambda: np.frombuffer(bytearray(DATA), np.uint8),
    "readonly-ndarray": lambda: readonly(np.arange(16, dtype=np.int32)),
    "readonly-view-of-writable": lambda: readonly(np.arange(16, dtype=np.int32)[2:]),
    "writable-copy-of-frombuffer": lambda: np.frombuffer(DATA, np.uint8).copy(),
    "frombuffer-of-subclass": lambda: np.frombuffer(BytesSubclass(DATA), np.uint8),
    "memoryview-of-subclass": lambda: memoryview(BytesSubclass(DATA)),
}


def readonly(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("name", IMMUTABLE.keys())
def test_immutable_memory_gets_an_enforced_grant_and_no_registry_entry(name):
    obj = IMMUTABLE[name]()
    want = NUMPY_ENFORCED if "frombuffer" in name or "ndarray" in name else ENFORCED
    ext, ro, live, _ = grant_of(obj)
    assert ext == want  # SHARED, not TRACKED
    assert ro == 1
    assert live == (want == TRACKED)  # enforced: nothing in the registry to release
    # A second copy of libpyxbuf in the process answers the same.
    held = other.acquire(obj, SHARED)
    assert held.ext_flags == want
    held.release()


@pytest.mark.parametrize("make", MUTABLE.values(), ids=MUTABLE.keys())
def test_mutable_memory_keeps_a_tracked_grant(make):
    ext, ro, live, _ = grant_of(make())
    assert ext == TRACKED
    assert ro == 1
    assert live == 1


def test_a_strided_view_of_bytes_is_enforced_too():
    a = np.frombuffer(DATA, np.uint8).reshape(8, 8)[::2, ::-3]
    assert grant_of(a, flags=t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)[0] == NUMPY_ENFORCED
    mv = memoryview(DATA)[::-5]
    assert grant_of(mv, flags=t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)[0] == ENFORCED


def test_a_read_only_mmap_stays_tracked(tmp_path):
    # Another process writing the file changes the mapped pages.
    path = tmp_path / "data.bin"
    path.write_bytes(DATA)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert grant_of(m)[0] == TRACKED
        a = np.frombuffer(m, np.uint8)
        assert grant_of(a)[0] == TRACKED
        assert grant_of(memoryview(a))[0] == TRACKED
        del a
        gc.collect()


def test_an_exporter_naming_bytes_it_does_not_point_into_stays_tracked():
    # The memory decides, not the object named: this producer's view says
    # its exporter is a bytes object, but its memory is the producer's own
    # (mutable) buffer.
    liar = ClassicLiar("bytes_owner")
    ext, _, live, path = grant_of(liar)
    assert path == "classic"
    assert ext == TRACKED and live == 1


def test_only_plain_shared_requests_are_enforced_by_immutability():
    # Without a borrow: no grant at all. Exclusive or writable: bytes refuse
    # to be written, as they always did.
    assert grant_of(DATA, flags=t.PyBUF_RECORDS_RO)[0] == 0
    with pytest.raises(BufferError):
        t.acquire(DATA, EXCLUSIVE)
    with pytest.raises(BufferError):
        t.acquire(np.frombuffer(DATA, np.uint8), EXCLUSIVE)


def test_enforced_grants_of_one_bytes_object_are_held_at_once_and_leak_nothing():
    # Three views of one bytes object, through two copies of libpyxbuf, held
    # together; released, they leave the bytes' count where it was.
    b = bytes(DATA)
    before = sys.getrefcount(b)
    held = [t.acquire(b, SHARED), other.acquire(memoryview(b), SHARED),
            t.acquire(np.frombuffer(b, np.uint8), SHARED)]
    assert [held[0].info()["ext_flags"], held[1].ext_flags,
            held[2].info()["ext_flags"]] == [ENFORCED, ENFORCED, NUMPY_ENFORCED]
    assert t.shared_info()[1] == (NUMPY_ENFORCED == TRACKED)
    for v in held:
        v.release()
    del held
    gc.collect()
    assert sys.getrefcount(b) == before


def test_the_pyxbuf_module_reports_the_enforced_grant():
    g = pyxbuf.inspect(DATA, flags=t.PYXBUF_BORROW_SHARED)["grants"]
    assert g == {"shared": True, "exclusive": False, "tracked": False}
    g = pyxbuf.inspect(bytearray(DATA), flags=t.PYXBUF_BORROW_SHARED)["grants"]
    assert g == {"shared": True, "exclusive": False, "tracked": True}


def test_no_reference_leaks_over_many_enforced_grants():
    a = np.frombuffer(DATA, np.uint8)
    before = (sys.getrefcount(DATA), sys.getrefcount(a))
    for _ in range(1000):
        t.acquire(a, SHARED).release()
        t.acquire(DATA, SHARED).release()
    assert (sys.getrefcount(DATA), sys.getrefcount(a)) == before


# Chains built at random from one root: from bytes every link stays
# immutable; from a bytearray every link stays mutable.
LINKS = st.lists(st.sampled_from(["memoryview", "slice", "cast", "frombuffer", "reshape",
                                  "view_u2", "readonly_mv", "reverse"]),
                 min_size=0, max_size=6)


def build_chain(root, links):
    o = root
    for link in links:
        if link == "memoryview":
            o = memoryview(o)
        elif link == "slice":
            o = memoryview(o)[2:] if not isinstance(o, np.ndarray) else o[2:]
        elif link == "cast":
            mv = memoryview(o)
            if mv.c_contiguous and mv.nbytes % 4 == 0 and 0 not in mv.shape:
                o = mv.cast("B").cast("I")
        elif link == "frombuffer":
            if memoryview(o).c_contiguous:
                o = np.frombuffer(o, np.uint8)
        elif link == "reshape":
            if isinstance(o, np.ndarray) and o.ndim == 1 and o.size % 2 == 0:
                o = o.reshape(2, -1)
        elif link == "view_u2":
            if isinstance(o, np.ndarray) and o.flags.c_contiguous and o.nbytes % 2 == 0:
                o = o.reshape(-1).view(np.uint8).view(np.uint16)
        elif link == "reverse":
            mv = memoryview(o)
            if mv.ndim == 1:
                o = mv[::-1] if not isinstance(o, np.ndarray) else o[::-1]
        elif link == "readonly_mv":
            o = memoryview(o).toreadonly()
    return o


@settings(max_examples=150, deadline=None)
@given(LINKS, st.booleans())
def test_chains_keep_the_roots_mutability(links, from_bytes):
    root = bytes(DATA) if from_bytes else bytearray(DATA)
    obj = build_chain(root, links)
    ext, _, live, _ = grant_of(obj, flags=t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)
    numpy_link = any(isinstance(o, np.ndarray) for o in chain_of(obj))
    want = (NUMPY_ENFORCED if numpy_link else ENFORCED) if from_bytes else TRACKED
    assert ext == want, (links, type(obj))
    assert live == (want == TRACKED)


def chain_of(obj):
    """The objects from obj down to its root (memoryview.obj, ndarray.base)."""
    while obj is not None:
        yield obj
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
