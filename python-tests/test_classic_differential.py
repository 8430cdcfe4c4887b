"""pyxbuf_get against PyObject_GetBuffer, field by field (issue 25, items 15-17).

Every classic producer the interpreter and NumPy ship -- CPython's own test
producer `_testbuffer.ndarray` in the layouts Lib/test/test_buffer.py builds
(C, Fortran, sliced, PIL-style suboffsets, 0-d, zero-size, read-only, many
formats), NumPy arrays, memoryview, bytes, bytearray, array.array, ctypes,
mmap, pickle.PickleBuffer and pyxbuf's own exporter -- is asked every one of
the 512 classic request bit patterns and PyBUF_WRITE (0x200), once through
pyxbuf's cached (fast) path and once through its uncached path. The answers
must equal PyObject_GetBuffer's: success or failure and the exception type;
buf, obj, len, itemsize, readonly, ndim, format, shape, strides, suboffsets.
The only differences allowed are those include/pyxbuf.h lists where
pyxbuf_get is documented ("Differences from PyObject_GetBuffer"); the test
reads that list, so a difference it tolerates and the header cannot drift.

Views pyxbuf fills itself (the bridges, pyxbuf_export_fill, pyxbuf.Exporter)
are held to the rules CPython's producers follow (PyBuffer_FillInfo,
array.array, memoryview, _testbuffer): without PyBUF_ND one flat C-contiguous
run (ndim 1, no shape, no strides) or a refusal; ndim 0 with no shape and no
strides.
"""

import array
import ctypes
import mmap
import pathlib
import pickle
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from _testbuffer import ND_FORTRAN, ND_GETBUF_FAIL, ND_PIL, ND_WRITABLE, ndarray, staticarray
from hypothesis import given, settings, strategies as st

import _pyxbuf_testext as t
from numpy_route import ROUTE, USER_DTYPE_ROUTE
from dlpack_only import DLPackOnly

PyBUF_READ, PyBUF_WRITE = 0x100, 0x200
FLAGS = list(range(0x200)) + [PyBUF_WRITE]  # every classic pattern, and PyBUF_WRITE
FIELDS = ("buf", "obj", "len", "itemsize", "readonly", "ndim", "format", "shape", "strides",
          "suboffsets")
HEADER = pathlib.Path(__file__).resolve().parents[1] / "include" / "pyxbuf.h"
PY313 = sys.version_info >= (3, 13)

# The header's list, one line each; the test tolerates exactly these.
REFUSAL_IS_BUFFERERROR = "a refusal is BufferError"
UNKNOWN_BITS = "a request bit that is neither classic nor PYXBUF_* (PyBUF_WRITE too) reaches no"
BRIDGES = "an object whose classic buffer cannot describe it"
WRITABLE_READONLY = "read-only memory for a PyBUF_WRITABLE request"


# --------------------------------------------------------------------------
# Producers
# --------------------------------------------------------------------------

_ITEMS = {
    "B": lambda n: [i % 256 for i in range(n)],
    "b": lambda n: [i % 100 - 50 for i in range(n)],
    "h": lambda n: [i * 7 - 40 for i in range(n)],
    "H": lambda n: list(range(n)),
    "i": lambda n: [i * 1000 - 5 for i in range(n)],
    "l": lambda n: list(range(n)),
    "q": lambda n: [-i for i in range(n)],
    "Q": lambda n: list(range(n)),
    "f": lambda n: [i / 2 for i in range(n)],
    "d": lambda n: [i / 3 for i in range(n)],
    "?": lambda n: [bool(i % 2) for i in range(n)],
    "c": lambda n: [bytes([65 + i % 26]) for i in range(n)],
    "<i": lambda n: list(range(n)),
    ">h": lambda n: list(range(n)),
    "=q": lambda n: list(range(n)),
    "3s": lambda n: [b"abc"] * n,
    "hhb": lambda n: [(i, -i, i % 100) for i in range(n)],
}


def _nd(fmt, shape, flags=0, **kw):
    n = 1
    for s in shape:
        n *= s
    items = _ITEMS[fmt](max(n, 1))  # a zero-size array still takes one item
    if not shape:
        items = items[0]
    return ndarray(items, shape=shape, format=fmt, flags=flags, **kw)


def producers_testbuffer():
    """_testbuffer.ndarray as Lib/test/test_buffer.py builds it."""
    out = []
    for fmt in _ITEMS:  # every format, 1-d, read-only and writable
        out += [(f"nd-{fmt}-12", _nd(fmt, [12])), (f"nd-{fmt}-12-w", _nd(fmt, [12], ND_WRITABLE))]
    for fmt in _ITEMS:
        for shape in ([3, 4], [2, 3, 2]) if fmt in ("B", "i", "d", "hhb") else ([3, 4],):
            for name, fl in (("ro", 0), ("w", ND_WRITABLE), ("F", ND_FORTRAN),
                             ("Fw", ND_FORTRAN | ND_WRITABLE), ("pil", ND_PIL),
                             ("pilw", ND_PIL | ND_WRITABLE)):
                out.append((f"nd-{fmt}-{shape}-{name}", _nd(fmt, shape, fl)))
    for fmt in _ITEMS:  # 0-d
        out += [(f"nd-{fmt}-0d", _nd(fmt, [])), (f"nd-{fmt}-0d-w", _nd(fmt, [], ND_WRITABLE))]
    for shape in ([0], [2, 0], [0, 3]):  # zero-size
        for name, fl in (("ro", 0), ("w", ND_WRITABLE), ("F", ND_FORTRAN), ("pil", ND_PIL)):
            out.append((f"nd-i-{shape}-{name}", _nd("i", shape, fl)))
    base = _nd("i", [4, 6], ND_WRITABLE)
    for name, key in (("[::2]", slice(None, None, 2)), ("[::-1]", slice(None, None, -1)),
                      ("[1:3]", slice(1, 3)), ("[::2,::-3]", (slice(None, None, 2),
                                                              slice(None, None, -3))),
                      ("[:,1:2]", (slice(None), slice(1, 2))), ("[3:1]", slice(3, 1))):
        out.append((f"nd-i-[4,6]{name}", base[key]))
    pil = _nd("d", [4, 6], ND_PIL | ND_WRITABLE)
    out.append(("nd-d-pil[::-2]", pil[::-2]))
    out.append(("nd-q-negative-strides", _nd("q", [12], strides=[-8], offset=88)))
    out.append(("nd-i-explicit-strides", _nd("i", [3, 4], strides=[4, 12])))  # Fortran by hand
    out.append(("nd-getbuf-fail", _nd("i", [3, 4], ND_GETBUF_FAIL)))
    for getbuf in (t.PyBUF_FULL_RO, t.PyBUF_STRIDED_RO, t.PyBUF_CONTIG_RO):  # re-exporters
        out.append((f"nd-reexport-{getbuf:#x}", ndarray(_nd("i", [4, 6]), getbuf=getbuf)))
    out.append(("staticarray", staticarray()))
    return out


def producers_numpy():
    out = []
    for dt in ("i1", "u1", "i2", "i4", "i8", "u8", "f2", "f4", "f8", "c8", "c16", "?", ">i4",
               "S3", "U2"):
        out.append((f"np-{dt}", np.zeros(6, dtype=dt)))
    out.append(("np-struct", np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])))
    out.append(("np-struct-aligned", np.zeros(3, dtype=np.dtype([("a", "u1"), ("b", "<f8")],
                                                                 align=True))))
    out.append(("np-struct-subarray", np.zeros(2, dtype=[("a", "<f4", (2, 3)), ("b", "u1")])))
    # A built-in type number with fields: NumPy exports the fields' struct
    # (T{h:lo:h:hi:}), which the struct route must leave to it.
    out += [("np-fields-over-i4", np.zeros(3, np.dtype((np.int32, {"lo": (np.int16, 0),
                                                                  "hi": (np.int16, 2)})))),
            ("np-fields-over-f8", np.zeros((2, 2), np.dtype((np.float64, {"re": (np.float32, 0),
                                                                        "im": (np.float32, 4)}))))]
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    out += [("np-C", a), ("np-F", np.asfortranarray(a)), ("np-T", a.T),
            ("np-strided", a[:, ::2]), ("np-reversed", a[::-1]), ("np-rows", a[1:3]),
            ("np-col", a[:, 1:2]), ("np-3d", np.zeros((2, 3, 4), "i2")),
            ("np-broadcast", np.broadcast_to(np.arange(3.0), (4, 3)))]
    for dt in ("f8", "i4", "?"):
        out.append((f"np-0d-{dt}", np.array(1, dtype=dt)))
    out += [("np-0d-slice", np.arange(3.0)[1, ...]), ("np-empty", np.zeros(0)),
            ("np-empty-2d", np.zeros((0, 3))), ("np-empty-2d-F", np.zeros((3, 0), order="F"))]
    for name, arr in (("np-ro", np.arange(6.0)), ("np-ro-strided", np.arange(12.0)[::3]),
                      ("np-ro-F", np.asfortranarray(a.copy()))):
        arr.flags.writeable = False
        out.append((name, arr))
    out += [("np-datetime", np.zeros(3, "M8[s]")), ("np-object", np.array([1, None]))]
    # Where the NumPy struct route (c/bridges/numpy_array.h) reads and where
    # it leaves the array to NumPy's export.
    for dt in ("q", "Q", "l", "L", "g", "G", "h", "H", "I", "e"):
        out.append((f"np-code-{dt}", np.arange(6).astype(dt)))
    out += [("np-unaligned", np.frombuffer(bytes(25), np.float32, 6, offset=1)),
            ("np-unaligned-2d", np.frombuffer(bytes(49), "<f8", 6, offset=1).reshape(2, 3)),
            ("np-9d", np.zeros((1, 2) * 4 + (3,), np.float32)),
            ("np-8d", np.zeros((2,) * 8, np.int16)),
            ("np-size1-dims", np.zeros((3, 1, 4), np.float32)[:, :, ::2]),
            ("np-size1-odd-strides", np.lib.stride_tricks.as_strided(
                np.zeros(12, np.float32), (3, 1, 4), (16, 7, 4))),
            ("np-F-and-C", np.zeros((1, 5), np.float64)[:, ::1]),
            ("np-subclass", np.arange(6.0).view(np.recarray)),
            ("np-memmap-like", np.arange(6.0).view(type("Sub", (np.ndarray,), {})))]
    return out


class _Pair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]


class _Packed(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("a", ctypes.c_char), ("b", ctypes.c_int)]


class _Union(ctypes.Union):
    _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_float)]


class _BigEndian(ctypes.BigEndianStructure):
    _fields_ = [("a", ctypes.c_short), ("b", ctypes.c_int)]


def producers_other():
    f32 = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = [("bytes", b"abcdef"), ("bytes-empty", b""), ("bytearray", bytearray(b"xyz")),
           ("bytearray-empty", bytearray())]
    for code in "bBhHilqQfd":
        out.append((f"array-{code}", array.array(code, range(5))))
    out.append(("array-empty", array.array("d")))
    out += [("mv-bytes", memoryview(b"abcdef")), ("mv-bytearray", memoryview(bytearray(8))),
            ("mv-np-C", memoryview(f32)), ("mv-np-F", memoryview(np.asfortranarray(f32))),
            ("mv-strided", memoryview(f32)[::2]), ("mv-cast-B", memoryview(f32).cast("B")),
            ("mv-cast-shape", memoryview(bytearray(24)).cast("i", shape=[2, 3])),
            ("mv-0d", memoryview(np.array(2.5))), ("mv-pil", memoryview(_nd("i", [3, 4], ND_PIL))),
            ("mv-readonly", memoryview(bytearray(6)).toreadonly()),
            ("mv-empty", memoryview(b""))]
    out += [("ctypes-int3", (ctypes.c_int * 3)()), ("ctypes-2d", ((ctypes.c_double * 2) * 3)()),
            ("ctypes-scalar", ctypes.c_int(5)), ("ctypes-struct", _Pair()),
            ("ctypes-packed", _Packed()), ("ctypes-union", _Union()),
            ("ctypes-bigendian", _BigEndian()), ("ctypes-struct-array", (_Pair * 2)()),
            ("ctypes-char5", (ctypes.c_char * 5)()), ("ctypes-bool2", (ctypes.c_bool * 2)())]
    out += [("mmap", mmap.mmap(-1, 4096)), ("mmap-ro", mmap.mmap(-1, 64, access=mmap.ACCESS_READ))]
    out += [("pickle-bytes", pickle.PickleBuffer(b"abc")),
            ("pickle-bytearray", pickle.PickleBuffer(bytearray(4))),
            ("pickle-np-strided", pickle.PickleBuffer(f32[:, ::2])),
            ("pickle-np-F", pickle.PickleBuffer(np.asfortranarray(f32)))]
    # pyxbuf's own producer, through its classic slot (no extended bit asked).
    out += [("exporter-2d", t.exporter("f", (4, 6))), ("exporter-0d", t.exporter("d", ())),
            ("exporter-empty", t.exporter("B", (0, 3))),
            ("exporter-ro", t.exporter("i", (5,), readonly=True))]
    return out


PRODUCERS = producers_testbuffer() + producers_numpy() + producers_other()


# --------------------------------------------------------------------------
# Comparing answers
# --------------------------------------------------------------------------

def answer(fn, obj, flags):
    try:
        d = fn(obj, flags)
    except Exception as e:  # noqa: BLE001 -- the exception is the answer
        return e
    return {k: d[k] for k in FIELDS}


def header_differences():
    """The lines of pyxbuf.h's "Differences from PyObject_GetBuffer" list."""
    text = HEADER.read_text()
    start = text.index("Differences from PyObject_GetBuffer")
    return text[start:text.index("*/", start)]


def difference(ours, theirs, flags):
    """None when the answers agree, the header's name of the documented
    difference they show, or a description of an undocumented one."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        fields = [k for k in FIELDS
                  if (ours[k] is not theirs[k] if k == "obj" else ours[k] != theirs[k])]
        if not fields:
            return None
        return "fields " + ", ".join(f"{k}: pyxbuf {ours[k]!r} vs {theirs[k]!r}" for k in fields)
    if isinstance(ours, Exception) and isinstance(theirs, Exception):
        if type(ours) is type(theirs):
            return None
        if (isinstance(ours, BufferError) and isinstance(theirs, (ValueError, TypeError))
                and type(ours.__cause__) is type(theirs)):
            return REFUSAL_IS_BUFFERERROR
    if (isinstance(ours, BufferError) and isinstance(theirs, dict) and theirs["readonly"]
            and flags & t.PyBUF_WRITABLE and "read-only memory for a WRITABLE" in str(ours)):
        # _testbuffer's staticarray hands read-only memory to any request
        return WRITABLE_READONLY
    def describe(a):
        return f"{type(a).__name__}: {a}" if isinstance(a, Exception) else "success"

    return f"pyxbuf {describe(ours)} vs PyObject_GetBuffer {describe(theirs)}"


def differences(producers, flag_list, paths=(t.inspect, t.inspect_uncached)):
    """{producer name: [(flags, path, difference)]} for every undocumented
    difference, and the number of comparisons made."""
    documented = header_differences()
    bad, count = {}, 0
    for name, obj in producers:
        for flags in flag_list:
            theirs = answer(t.classic, obj, flags)
            for path in paths:
                ours = answer(path, obj, flags)
                count += 1
                d = difference(ours, theirs, flags)
                if d is not None and not d.startswith(("fields", "pyxbuf ")) and d in documented:
                    continue
                if d is not None:
                    bad.setdefault(name, []).append((hex(flags), path.__name__, d))
    return bad, count


def report(bad):
    lines = []
    for name, rows in bad.items():
        lines.append(f"{name}: {len(rows)} differences, e.g. {rows[:3]}")
    return "\n".join(lines)


def test_header_lists_the_differences():
    """The differences this file tolerates (and the bridges, which it checks
    by rule below) are the header's."""
    documented = header_differences()
    for line in (REFUSAL_IS_BUFFERERROR, UNKNOWN_BITS, BRIDGES, WRITABLE_READONLY):
        assert line in documented


def test_every_classic_producer_and_request_agrees():
    bad, count = differences(PRODUCERS, FLAGS)
    assert count == len(PRODUCERS) * len(FLAGS) * 2
    assert not bad, report(bad)


# Structured inputs: NumPy and _testbuffer layouts drawn by hypothesis.
_DTYPES = ("u1", "i2", "<i4", ">i4", "f4", "f8", "c8", "?", "e", "g", "q", "l", "c16", ">f8")


@st.composite
def numpy_layouts(draw):
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    a = np.zeros(shape, dtype=draw(st.sampled_from(_DTYPES)))
    if a.ndim:
        key = tuple(slice(draw(st.sampled_from([None, 1])), None,
                          draw(st.sampled_from([1, 2, -1, -2]))) for _ in range(a.ndim))
        a = a[key]
        if draw(st.booleans()):
            a = a.T
    if draw(st.booleans()):
        a.flags.writeable = False
    return a


@st.composite
def layouts_testbuffer(draw):
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    flags = draw(st.sampled_from([0, ND_WRITABLE, ND_FORTRAN, ND_PIL, ND_PIL | ND_WRITABLE]))
    if not shape:
        flags &= ND_WRITABLE  # 0-d: no Fortran or PIL layout
    nd = _nd(draw(st.sampled_from(["B", "i", "d", "hhb"])), shape, flags)
    if shape and all(shape) and draw(st.booleans()):
        nd = nd[tuple(slice(None, None, draw(st.sampled_from([2, -1]))) for _ in shape)]
    return nd


@settings(max_examples=150, deadline=None)
@given(obj=st.one_of(numpy_layouts(), layouts_testbuffer()),
       flags=st.lists(st.sampled_from(FLAGS), min_size=16, max_size=16))
def test_drawn_layouts_agree(obj, flags):
    bad, _ = differences([("drawn", obj)], flags)
    assert not bad, report(bad)


def test_classic_buffer_is_tried_before_the_bridges():
    """CONFORMANCE.md A24 as the code does it: the classic buffer first; the
    bridges only when there is none or it cannot describe the object; never
    after a read-only refusal of a writable request."""
    f32 = np.zeros((2, 3), np.float32)  # has a classic buffer and __dlpack__
    assert t.inspect(f32, t.PyBUF_RECORDS_RO)["path"] == ROUTE  # its classic view, read
    assert t.inspect(memoryview(f32), t.PyBUF_RECORDS_RO)["path"] == "classic"
    assert t.inspect(DLPackOnly(f32), t.PyBUF_RECORDS_RO)["path"] == "dlpack"
    bf16 = np.zeros((2, 3), ml_dtypes.bfloat16)  # read from its struct too (issue 39)
    assert t.inspect(bf16, t.PyBUF_RECORDS_RO)["path"] == USER_DTYPE_ROUTE
    swapped = bf16.view(bf16.dtype.newbyteorder())  # classic: "cannot include dtype"
    assert t.inspect(swapped, t.PyBUF_RECORDS_RO)["path"] == "array-interface"
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="classic buffer of 'numpy.ndarray'") as e:
        t.inspect(ro, t.PyBUF_RECORDS)
    assert isinstance(e.value.__cause__, ValueError)


# --------------------------------------------------------------------------
# Item 17: PyBUF_READ / PyBUF_WRITE alone, on the first and a cached call
# --------------------------------------------------------------------------

def fresh_objects():
    """Objects of types made here, which pyxbuf has never cached."""
    sub = lambda base: type(f"Fresh{base.__name__}", (base,), {})
    return [("ndarray", np.arange(6.0).view(sub(np.ndarray))),
            ("bytearray", sub(bytearray)(b"abc")),
            ("bytes", sub(bytes)(b"abc")),
            ("array", sub(array.array)("i", [1, 2, 3]))]


@pytest.mark.parametrize("flags", [PyBUF_READ, PyBUF_WRITE, PyBUF_READ | t.PYXBUF_TEMPORARY,
                                   PyBUF_READ | t.PYXBUF_DEVICE,
                                   PyBUF_WRITE | t.PYXBUF_TEMPORARY], ids=hex)
def test_read_and_write_alone_answer_the_same_on_every_path(flags):
    """On CPython 3.13+ PyObject_GetBuffer refuses PyBUF_READ and PyBUF_WRITE
    alone (SystemError); earlier versions take PyBUF_READ as a soft bit.
    pyxbuf answers as the running interpreter's PyObject_GetBuffer answers
    the request's classic part, the first (uncached) time and every time
    after (the fast path)."""
    for name, obj in fresh_objects():
        theirs = answer(t.classic, obj, flags & ~t.PYXBUF_EXTENDED_FLAGS)
        answers = [answer(t.inspect, obj, flags) for _ in range(3)]
        for i, ours in enumerate(answers):
            d = difference(ours, theirs, flags)
            assert d is None, (name, i, d)
        kinds = [type(a).__name__ if isinstance(a, Exception) else "ok" for a in answers]
        assert len(set(kinds)) == 1, f"{name}: first call vs cached calls: {kinds}"
        if PY313 and flags & ~t.PYXBUF_EXTENDED_FLAGS in (PyBUF_READ, PyBUF_WRITE):
            assert isinstance(answers[0], SystemError), (name, answers[0])


# --------------------------------------------------------------------------
# Items 15 and 16: views pyxbuf fills itself follow CPython's rules
# --------------------------------------------------------------------------

def producers_bridged():
    """(name, object, the NumPy array describing its layout): objects pyxbuf
    answers through a bridge or its own exporter."""
    bf16 = lambda shape: np.arange(int(np.prod(shape)), dtype=np.float32).reshape(
        shape).astype(ml_dtypes.bfloat16)
    c = bf16((4, 6))
    ro = bf16((5,))
    ro.flags.writeable = False
    out = [("bf16-C", c, c), ("bf16-F", np.asfortranarray(c), np.asfortranarray(c)),
           ("bf16-strided", c[:, ::2], c[:, ::2]), ("bf16-0d", bf16(()), bf16(())),
           ("bf16-1d", bf16((5,)), bf16((5,))), ("bf16-empty", bf16((0, 3)), bf16((0, 3))),
           ("bf16-ro", ro, ro)]
    f32 = np.arange(24, dtype=np.float32).reshape(4, 6)
    for name, arr in (("C", f32), ("F", np.asfortranarray(f32)), ("strided", f32[:, ::2]),
                      ("0d", np.array(2.5)), ("1d", np.arange(5.0)), ("empty", np.zeros((0, 3)))):
        out.append((f"dlpack-{name}", DLPackOnly(arr), arr))
    for name, fmt, shape, ro in (("2d", "f", (4, 6), False), ("0d", "d", (), False),
                                 ("1d", "i", (5,), True), ("empty", "B", (0, 3), False)):
        e = t.exporter(fmt, shape, readonly=ro)
        ref = np.zeros(shape, dtype=np.dtype(fmt))
        ref.flags.writeable = not ro
        out.append((f"exporter-{name}", e, ref))
    return out


def expected_by_rules(ref, flags):
    """What CPython's producers answer for `ref`'s layout and the classic
    request `flags`: None for a refusal, else the fields."""
    nd, strides_bit = flags & t.PyBUF_ND, (flags & t.PyBUF_STRIDES) == t.PyBUF_STRIDES
    c, f = ref.flags.c_contiguous, ref.flags.f_contiguous
    if flags & t.PyBUF_WRITABLE and not ref.flags.writeable:
        return None
    if ((flags & t.PyBUF_C_CONTIGUOUS) == t.PyBUF_C_CONTIGUOUS and not c) or \
            ((flags & t.PyBUF_F_CONTIGUOUS) == t.PyBUF_F_CONTIGUOUS and not f) or \
            ((flags & t.PyBUF_ANY_CONTIGUOUS) == t.PyBUF_ANY_CONTIGUOUS and not (c or f)) or \
            (not strides_bit and not c):
        return None
    if not nd:  # one flat run
        return {"ndim": 1, "shape": None, "strides": None}
    return {"ndim": ref.ndim, "shape": ref.shape if ref.ndim else None,
            "strides": ref.strides if strides_bit and ref.ndim else None}


@pytest.mark.parametrize("name,obj,ref", producers_bridged(), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_views_pyxbuf_fills_follow_cpythons_rules(name, obj, ref):
    """Items 15 and 16: no ndim > 1 without a shape, no shape at ndim 0."""
    wrong = []
    for flags in range(0x200):
        ours = answer(t.inspect, obj, flags)
        if PY313 and flags == PyBUF_READ:  # refused up front, as PyObject_GetBuffer does
            if not isinstance(ours, SystemError):
                wrong.append((hex(flags), "expected SystemError", ours))
            continue
        if isinstance(ours, dict) and t.inspect(obj, flags)["path"] == "classic":
            # NumPy's own buffer answered (bfloat16 without PyBUF_FORMAT): as it says
            d = difference(ours, answer(t.classic, obj, flags), flags)
            if d is not None:
                wrong.append((hex(flags), "classic", d))
            continue
        want = expected_by_rules(ref, flags)
        if want is None:
            if not isinstance(ours, BufferError):
                wrong.append((hex(flags), "expected a refusal", ours))
            continue
        if isinstance(ours, Exception):
            wrong.append((hex(flags), "refused", ours))
            continue
        got = {k: ours[k] for k in want}
        exp = dict(want, shape=want["shape"] and tuple(want["shape"]),
                   strides=want["strides"] and tuple(want["strides"]))
        if ref.size == 0 and exp["strides"] is not None and got["strides"] is not None:
            exp["strides"] = got["strides"]  # any strides describe an empty array
        if got != exp or ours["len"] != ref.nbytes or ours["suboffsets"] is not None or \
                (ours["format"] is None) != (not flags & t.PyBUF_FORMAT):
            wrong.append((hex(flags), {k: ours[k] for k in ("ndim", "shape", "strides", "len",
                                                              "format")}, exp))
    assert not wrong, f"{len(wrong)} requests, e.g. {wrong[:4]}"


def test_bfloat16_without_nd_is_flat():
    """Item 15, the reported case: bfloat16 (4, 6) with PyBUF_FORMAT alone."""
    v = t.inspect(np.zeros((4, 6), ml_dtypes.bfloat16), t.PyBUF_FORMAT)
    assert v["path"] == USER_DTYPE_ROUTE  # read from the struct (issue 39), flat as the bridge was
    assert (v["ndim"], v["shape"], v["strides"], v["len"], v["itemsize"]) == (1, None, None, 48, 2)


def test_memoryview_from_buffer_of_filled_views():
    """Items 15 and 16 as a consumer meets them: PyMemoryView_FromBuffer of
    the view (it copied ndim shape entries from a NULL shape before the fix:
    the process died). In a child process, so that a crash fails one test."""
    code = textwrap.dedent("""
        import ml_dtypes, numpy as np, _pyxbuf_testext as t
        bf = np.arange(24, dtype=np.float32).reshape(4, 6).astype(ml_dtypes.bfloat16)
        # (bfloat16 without PyBUF_FORMAT is NumPy's own classic answer)
        for obj, nbytes, requests in ((bf, 48, [t.PyBUF_FORMAT]),
                                      (t.exporter("f", (4, 6)), 96, [0, t.PyBUF_FORMAT])):
            for flags in requests:
                ndim, shape, strides, data = t.memoryview_of(obj, flags)
                assert (ndim, shape, len(data)) == (1, (24,), nbytes), (ndim, shape)
        for obj in (np.array(1, ml_dtypes.bfloat16), t.exporter("d", ())):
            ndim, shape, strides, data = t.memoryview_of(obj, t.PyBUF_RECORDS_RO)
            assert (ndim, shape, strides) == (0, (), ()), (ndim, shape, strides)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr)
