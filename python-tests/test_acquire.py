"""Acquisition through pyxbuf_get against real producers.

Every classic field must be what PyObject_GetBuffer gives for the same flags;
extended fields stay zero for producers that are not extended; refusals carry
the documented exception type and a message that names the cause; nothing
leaks.
"""

import array
import ctypes
import re
import sys

import numpy as np
import pytest

import _pyxbuf_testext as t
from dlpack_only import DLPackOnly
from numpy_route import classic_path

CLASSIC_REQUESTS = {
    "SIMPLE": t.PyBUF_SIMPLE,
    "FORMAT": t.PyBUF_FORMAT,
    "ND": t.PyBUF_ND,
    "STRIDES": t.PyBUF_STRIDES,
    "C_CONTIGUOUS": t.PyBUF_C_CONTIGUOUS,
    "F_CONTIGUOUS": t.PyBUF_F_CONTIGUOUS,
    "ANY_CONTIGUOUS": t.PyBUF_ANY_CONTIGUOUS,
    "INDIRECT": t.PyBUF_INDIRECT,
    "CONTIG_RO": t.PyBUF_CONTIG_RO,
    "STRIDED_RO": t.PyBUF_STRIDED_RO,
    "RECORDS_RO": t.PyBUF_RECORDS_RO,
    "FULL_RO": t.PyBUF_FULL_RO,
    "CONTIG": t.PyBUF_CONTIG,
    "STRIDED": t.PyBUF_STRIDED,
    "RECORDS": t.PyBUF_RECORDS,
    "FULL": t.PyBUF_FULL,
}


class Point(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_double)]


def producers():
    """(id, factory) pairs: a fresh object per call, from real libraries."""
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    return [
        ("numpy-f32-2d", lambda: np.arange(12, dtype=np.float32).reshape(3, 4)),
        ("numpy-f64-fortran", lambda: np.asfortranarray(base)),
        ("numpy-negative-strides", lambda: base[::-1, ::2]),
        ("numpy-readonly", lambda: _readonly(np.arange(5, dtype=np.int16))),
        ("numpy-struct", lambda: np.zeros(3, dtype="i4,f8")),
        ("numpy-0d", lambda: np.array(3.5)),
        ("numpy-empty", lambda: np.zeros((0, 3), dtype=np.uint8)),
        ("numpy-complex", lambda: np.ones(4, dtype=np.complex64)),
        # not a literal: a code constant, immortal on free-threaded builds,
        # would make the refcount checks vacuous there
        ("bytes", lambda: bytes(bytearray(b"pyxbuf bytes"))),
        ("bytes-empty", lambda: b""),
        ("bytearray", lambda: bytearray(b"mutable")),
        ("array-d", lambda: array.array("d", [1.0, 2.0, 3.0])),
        ("array-q", lambda: array.array("q", range(7))),
        ("memoryview-cast", lambda: memoryview(bytearray(24)).cast("i", (2, 3))),
        ("memoryview-slice", lambda: memoryview(bytes(range(20)))[::3]),
        ("ctypes-int-array", lambda: (ctypes.c_int * 5)(*range(5))),
        ("ctypes-struct", lambda: Point(1, 2.0)),
        ("ctypes-2d", lambda: ((ctypes.c_short * 3) * 2)()),
    ]


def _readonly(a):
    a.flags.writeable = False
    return a


PRODUCERS = producers()
CLASSIC_FIELDS = ("buf", "len", "itemsize", "readonly", "ndim", "format", "shape",
                  "strides", "suboffsets")


def outcome(fn, *args):
    """('ok', value) or ('error', exception type)."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # the type is what is compared
        return "error", type(exc)


@pytest.mark.parametrize("name,factory", PRODUCERS, ids=[p[0] for p in PRODUCERS])
@pytest.mark.parametrize("request_name", list(CLASSIC_REQUESTS))
def test_classic_fields_match_getbuffer(name, factory, request_name):
    obj = factory()
    flags = CLASSIC_REQUESTS[request_name]
    want = outcome(t.classic, obj, flags)
    got = outcome(t.inspect, obj, flags)
    assert got[0] == want[0], (got, want)
    if want[0] == "error":
        # Every producer refusal reaches pyxbuf's consumers as BufferError.
        assert issubclass(want[1], (BufferError, ValueError, TypeError))
        assert got[1] is BufferError
        return
    theirs, ours = want[1], got[1]
    for field in CLASSIC_FIELDS:
        assert ours[field] == theirs[field], field
    assert ours["obj"] is theirs["obj"]
    assert ours["path"] == classic_path(ours["obj"])
    # Not an extended producer: the extended fields stay zero.
    assert ours["flags"] == 0
    assert ours["ext_flags"] == 0
    assert ours["device"] is None
    assert ours["device_info"] is None
    assert ours["is_host"] is True


@pytest.mark.parametrize("name,factory", PRODUCERS, ids=[p[0] for p in PRODUCERS])
def test_extended_request_on_classic_producer(name, factory):
    """Extended bits are soft: a classic producer answers as for the classic part."""
    obj = factory()
    ext = t.PYXBUF_DEVICE | t.PYXBUF_TEMPORARY  # borrows: test_tracked_borrows.py
    want = t.classic(obj, t.PyBUF_RECORDS_RO)
    got = t.inspect(obj, t.PyBUF_RECORDS_RO | ext)
    for field in CLASSIC_FIELDS:
        assert got[field] == want[field], field
    assert got["requested"] == t.PyBUF_RECORDS_RO | ext
    assert (got["flags"], got["ext_flags"], got["device"]) == (0, 0, None)


@pytest.mark.parametrize("name,factory", PRODUCERS, ids=[p[0] for p in PRODUCERS])
def test_refcounts_unchanged_after_10000_cycles(name, factory):
    obj = factory()
    flags = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
    t.cycle(obj, flags, 10)  # let producers build their caches first
    before = sys.getrefcount(obj)
    t.cycle(obj, flags, 10_000)
    assert sys.getrefcount(obj) == before


def test_failed_acquisition_does_not_leak():
    obj = bytes(bytearray(b"immutable"))  # not an (immortal, on 3.14t) constant
    before = sys.getrefcount(obj)
    for _ in range(1000):
        with pytest.raises(BufferError):
            t.inspect(obj, t.PyBUF_WRITABLE)
    assert sys.getrefcount(obj) == before


def test_release_twice_is_a_noop():
    obj = bytearray(8)
    before = sys.getrefcount(obj)
    held, after_first, unchanged = t.release_twice(obj)
    assert (held, after_first, unchanged) == (1, 0, 1)
    assert sys.getrefcount(obj) == before


def test_held_view_keeps_object_and_releases_once():
    obj = bytearray(b"abc")
    v = t.acquire(obj, t.PyBUF_FULL)
    assert v.acquired
    with pytest.raises(BufferError):
        obj.extend(b"x")  # bytearray refuses to resize while exported
    v.release()
    v.release()
    assert not v.acquired
    obj.extend(b"x")


# --- refusals ---------------------------------------------------------------

def test_writable_request_on_read_only_producer():
    with pytest.raises(BufferError, match=r"classic buffer of 'bytes' refused the request WRITABLE"):
        t.inspect(b"ro", t.PyBUF_WRITABLE)


def test_contiguity_refusal_keeps_numpy_reason():
    """NumPy refuses with ValueError; pyxbuf raises BufferError, NumPy's as cause."""
    a = np.arange(10.0)[::2]
    with pytest.raises(BufferError) as info:
        t.inspect(a, t.PyBUF_C_CONTIGUOUS)
    assert "'numpy.ndarray'" in str(info.value)
    assert "not C-contiguous" in str(info.value)
    assert type(info.value.__cause__) is ValueError


def test_object_without_buffer_is_type_error():
    with pytest.raises(TypeError, match=r"'list' exports no buffer pyxbuf can read"):
        t.inspect([1, 2, 3], t.PyBUF_SIMPLE)


def test_unknown_request_bits_pass_through():
    # "it is typical practice to ignore unknown flags" (test_flag_rules.py)
    assert t.inspect(b"", 1 << 20)["requested"] == 1 << 20


class SimpleOnly(bytearray):
    __pyxbuf_supported_flags__ = -1


class NotAnInt(bytearray):
    __pyxbuf_supported_flags__ = "all"


def test_required_flags_checked_before_the_producer():
    obj = SimpleOnly(b"abc")
    assert t.check_supports(obj, t.PyBUF_SIMPLE)
    assert not t.check_supports(obj, t.PyBUF_ND)
    with pytest.raises(BufferError, match=r"'SimpleOnly' does not support the required flag WRITABLE "):
        t.inspect(obj, t.PyBUF_WRITABLE)
    # FORMAT is required too: the proposal's only soft classic flag is INDIRECT.
    with pytest.raises(BufferError, match=r"required flag FORMAT of the request FORMAT"):
        t.inspect(obj, t.PyBUF_FORMAT)
    # two missing: the plural, naming both
    with pytest.raises(BufferError, match=r"required flags WRITABLE\|FORMAT of the request "
                       r"WRITABLE\|FORMAT \(its __pyxbuf_supported_flags__ says so\); ask for less"):
        t.inspect(obj, t.PyBUF_WRITABLE | t.PyBUF_FORMAT)


def test_supported_flags_attribute_must_be_an_int():
    with pytest.raises(TypeError, match="must be an int, found 'str'"):
        t.inspect(NotAnInt(b"x"), t.PyBUF_SIMPLE)


def test_supported_flags_follow_class_changes():
    class Toggle(bytearray):
        __pyxbuf_supported_flags__ = -1

    obj = Toggle(b"abc")
    with pytest.raises(BufferError):
        t.inspect(obj, t.PyBUF_ND)
    Toggle.__pyxbuf_supported_flags__ = 0
    assert t.inspect(obj, t.PyBUF_ND)["shape"] == (3,)
    del Toggle.__pyxbuf_supported_flags__
    assert t.type_supported_flags(Toggle) == t.PYXBUF_CLASSIC_FLAGS


def test_check_supports_answers():
    """check_supports says what pyxbuf_get would do, without calling anyone."""
    assert t.check_supports(b"", t.PyBUF_FULL_RO)
    # check_supports asks about soft flags too: bytes never holds device
    # memory; pyxbuf_get still goes ahead and answers with host memory
    assert not t.check_supports(b"", t.PYXBUF_DEVICE)
    assert t.inspect(b"", t.PYXBUF_DEVICE)["flags"] == 0
    e = t.exporter("f", (2,))
    assert t.check_supports(e, t.PyBUF_FULL | t.PYXBUF_DEVICE | t.PYXBUF_BORROW_EXCLUSIVE)
    # not a buffer at all: pyxbuf_get raises TypeError
    assert not t.check_supports([1.0, 2.0], t.PyBUF_SIMPLE)
    with pytest.raises(TypeError):
        t.inspect([1.0, 2.0], t.PyBUF_SIMPLE)
    # DLPack only: pyxbuf_get accepts it, with device memory allowed
    dl = DLPackOnly(np.arange(4.0))
    assert t.check_supports(dl, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE)
    assert t.inspect(dl, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE)["path"] == "dlpack"
    # unknown bits: nobody advertises them
    assert not t.check_supports(b"", 1 << 20)
    with pytest.raises(ValueError, match="supported flags"):
        t.set_supported_flags(SimpleOnly, 1 << 29)


# --- lying producers: what pyxbuf validates ---------------------------------

# Reasons are regular expressions: on an interpreter with the extended
# protocol, PyObject_GetBuffer itself refuses some of these answers first,
# naming PyBUF_DEVICE where pyxbuf names PYXBUF_DEVICE.
LIES = [
    ("unrequested_flag", t.PyBUF_FULL_RO, "set extended flags that were not requested"),
    ("device_unrequested", t.PyBUF_FULL_RO, "set extended flags that were not requested"),
    ("device_without_flag", t.PyBUF_FULL_RO | t.PYXBUF_DEVICE,
     r"set a device without setting (PYXBUF|PyBUF)_DEVICE"),
    ("cpu_device", t.PyBUF_FULL_RO | t.PYXBUF_DEVICE, 'reserved device "cpu"'),
    ("unrequested_grant", t.PyBUF_FULL_RO | t.PYXBUF_BORROW_SHARED,
     "granted a borrow that was not requested"),
    ("tracked_alone", t.PyBUF_FULL_RO | t.PYXBUF_BORROW_SHARED,
     "set PYXBUF_EXT_TRACKED in ext_flags without a shared or exclusive grant"),
    ("readonly_for_writable", t.PyBUF_FULL, "read-only memory for a WRITABLE request"),
    # a consumer reads no extended field whose bit in flags is clear
    ("grant_without_flag", t.PyBUF_FULL_RO | t.PYXBUF_BORROW_SHARED,
     r"granted a borrow in ext_flags without setting the matching PYXBUF_BORROW_\* bit"),
    # EXT_EXCLUSIVE under a BORROW_SHARED bit, though exclusive was asked too
    ("unrequested_grant",
     t.PyBUF_FULL_RO | t.PYXBUF_BORROW_SHARED | t.PYXBUF_BORROW_EXCLUSIVE,
     r"granted a borrow in ext_flags without setting the matching PYXBUF_BORROW_\* bit"),
    ("device_info_without_flag", t.PyBUF_FULL_RO | t.PYXBUF_DEVICE,
     r"set device_info without setting (PYXBUF|PyBUF)_DEVICE in flags"),
    ("device_not_utf8", t.PyBUF_FULL_RO | t.PYXBUF_DEVICE,
     r"device identifier is not valid UTF-8 \(byte 0x80 at position 8\)"),
    ("device_empty", t.PyBUF_FULL_RO | t.PYXBUF_DEVICE, "device identifier is empty"),
    ("device_info_too_small", t.PyBUF_FULL_RO | t.PYXBUF_DEVICE,
     'device has no valid pyxbuf_device_info'),
]


@pytest.mark.parametrize("mode,flags,reason", LIES,
                         ids=[l[0] + ("-with-exclusive" if l[1] & t.PYXBUF_BORROW_EXCLUSIVE else "")
                              for l in LIES])
def test_lying_producer_is_refused_and_released(mode, flags, reason):
    liar = t.Liar(mode)
    before = sys.getrefcount(liar)
    with pytest.raises(BufferError) as info:
        t.inspect(liar, flags)
    assert re.search(reason, str(info.value)), str(info.value)
    assert "'_pyxbuf_testext.Liar'" in str(info.value)
    # The producer's view was released exactly once, and no reference leaked.
    assert (liar.gets, liar.releases) == (1, 1)
    assert sys.getrefcount(liar) == before


class ClassicDeclared(t.Liar):
    """The honest Liar under a classic declaration (0: no extended flag)."""

    __pyxbuf_supported_flags__ = 0


def test_extended_bits_reach_only_types_that_advertise_them():
    assert min(b for b in (t.PYXBUF_DEVICE, t.PYXBUF_BORROW_SHARED, t.PYXBUF_BORROW_EXCLUSIVE,
                           t.PYXBUF_TEMPORARY)) == 0x400
    assert t.PYXBUF_REQUIRED_FLAGS & 0xFC00 == 0
    request = t.PyBUF_FULL_RO | t.PYXBUF_DEVICE | t.PYXBUF_TEMPORARY
    classic = ClassicDeclared("honest")
    assert t.inspect(classic, request)["path"] == "classic"
    assert classic.last_flags == t.PyBUF_FULL_RO
    native = t.Liar("honest")
    assert t.inspect(native, request)["path"] == "native"
    assert native.last_flags == request


def test_exclusive_request_may_get_the_weaker_shared_grant():
    liar = t.Liar("shared_for_exclusive")
    info = t.inspect(liar, t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_EXCLUSIVE)
    assert info["path"] == "native" and info["flags"] == t.PYXBUF_BORROW_EXCLUSIVE
    assert info["ext_flags"] == t.PYXBUF_EXT_SHARED
    assert (liar.gets, liar.releases) == (1, 1)


def test_a_producer_may_mark_its_grant_tracked():
    """A producer whose own hold on the memory is cooperative (a wrapper of
    tracked memory) weakens its grant with EXT_TRACKED; pyxbuf passes it on
    and, the grant being the producer's, takes no registry entry for it."""
    liar = t.Liar("tracked_grant")
    live = t.shared_info()[1]
    v = t.acquire(liar, t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)
    info = v.info()
    assert info["path"] == "native" and info["flags"] == t.PYXBUF_BORROW_SHARED
    assert info["ext_flags"] == t.PYXBUF_EXT_SHARED | t.PYXBUF_EXT_TRACKED
    assert t.shared_info()[1] == live
    v.release()
    assert (liar.gets, liar.releases) == (1, 1)
    assert t.shared_info()[1] == live


class DLPackAndCAI(DLPackOnly):
    """Speaks DLPack and the CUDA Array Interface: DLPack must win, and the
    interface dict is never read."""

    @property
    def __cuda_array_interface__(self):
        raise AssertionError("the CAI bridge was consulted before DLPack")


def test_dlpack_is_tried_before_the_cuda_array_interface():
    obj = DLPackAndCAI(np.arange(3.0))
    assert t.inspect(obj, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE)["path"] == "dlpack"


def test_honest_extended_producer_takes_the_native_path():
    liar = t.Liar("honest")
    info = t.inspect(liar, t.PyBUF_FULL_RO | t.PYXBUF_DEVICE)
    assert info["path"] == "native"
    assert (info["flags"], info["device"]) == (0, None)
    assert (liar.gets, liar.releases) == (1, 1)


def test_versions():
    abi, version = t.versions()
    assert abi == t.PYXBUF_ABI_VERSION
    assert version.count(".") == 2


def test_immutable_jax_array_is_not_handed_out_writable():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(4, dtype=jnp.float32)
    with pytest.raises(BufferError, match="classic buffer of .* refused the request WRITABLE"):
        t.acquire(x, t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE)
    assert t.inspect(x, t.PyBUF_RECORDS_RO)["path"] == "classic"
