"""Conformance with the two proposals where the audit (issue 13) found pyxbuf
deviating, and the formats real producers emit. CONFORMANCE.md names, for each
rule, the test here or elsewhere that would fail if it broke.

Real producers only: NumPy, ctypes, memoryview/array/struct of the running
CPython, ml_dtypes. Codes a newer CPython adds (struct's 'F'/'D' in 3.14,
array's 'e' and 'Zf'/'Zd' in 3.15) are exercised when the interpreter has them
and skipped, with the reason, where it does not (`make test-matrix` runs the
newer ones).
"""

import array
import ctypes
import gc
import struct
import sys

import ml_dtypes
import numpy as np
import pytest

import _pyxbuf_testext as t
from numpy_route import USER_DTYPE_ROUTE
from dlpack_only import DLPackOnly

RO = t.PyBUF_RECORDS_RO
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
DEV0 = (t.PYXBUF_DL_EXT_DEV, 0)
COMPLEX = 0x1  # PYXBUF_FMTN_COMPLEX


def parse(fmt):
    return t.format_parse(fmt.encode() if isinstance(fmt, str) else fmt)


def write(fmt):
    return t.format_write(fmt.encode()).decode()


def members(p, parent=0):
    return [n for n in p["nodes"] if n["parent"] == parent]


@pytest.fixture(autouse=True)
def no_leaked_device_memory():
    gc.collect()  # what earlier tests left to the collector (free-threaded builds run it later)
    before = t.emulated_live_allocations()
    yield
    assert t.emulated_live_allocations() == before


# --- item 11: formats real producers emit ------------------------------------

ZERO_LENGTH = [
    [("a", "<u4", (0,))],
    [("a", "<u4", (0,)), ("b", "<f4")],
    [("a", "<f8", (2, 0)), ("b", "<i2")],
    [("b", "<i2"), ("a", "<u4", (0,)), ("c", "u1")],
]


@pytest.mark.parametrize("fields", ZERO_LENGTH, ids=[str(f) for f in ZERO_LENGTH])
def test_numpy_zero_length_subarray_fields(fields):
    """NumPy exports a (0,)-shaped field as "(0)I:a:"; it is 0 bytes."""
    dt = np.dtype(fields)
    a = np.zeros(3, dt)
    fmt = memoryview(a).format
    assert "(0" in fmt or ",0)" in fmt
    view = t.inspect(a, RO)
    assert view["path"] == "classic" and view["format"] == fmt
    p = parse(fmt)
    assert p["itemsize"] == dt.itemsize
    named = {n["name"]: n for n in p["nodes"] if n["name"]}
    for name, *_ in fields:
        assert named[name]["offset"] == dt.fields[name][1]
        if dt.fields[name][0].itemsize == 0:
            assert named[name]["nbytes"] == 0 and 0 in named[name]["shape"]
    assert parse(write(fmt))["itemsize"] == dt.itemsize


def test_ctypes_duplicate_field_names_are_kept():
    """ctypes emits a struct with two fields of one name; pyxbuf keeps both
    (names are labels, the layout is positional). NumPy refuses the string,
    because its dtypes map names to fields; pyxbuf does not."""

    class Twice(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int), ("a", ctypes.c_float)]

    fmt = memoryview(Twice()).format
    assert fmt.count(":a:") == 2
    p = parse(fmt)
    assert p["itemsize"] == ctypes.sizeof(Twice)
    inner = members(p, 1)
    assert [n["name"] for n in inner] == ["a", "a"]
    assert [n["offset"] for n in inner] == [0, 4]
    assert [n["code"] for n in inner] == ["i", "f"]
    assert write(fmt) == write(write(fmt))
    with pytest.raises(ValueError, match="not a valid PEP 3118 buffer format"):
        np.asarray(memoryview(Twice()))


@pytest.mark.parametrize("code,component,size", [("F", "f", 8), ("D", "d", 16)])
def test_struct_complex_codes(code, component, size):
    """struct's 'F' and 'D' (CPython 3.14) are the items "Zf" and "Zd"."""
    p = parse(code)
    (n,) = members(p)
    assert (n["code"], n["flags"] & COMPLEX, p["itemsize"]) == (component, COMPLEX, size)
    assert write(code) == "Z" + component
    assert parse("<" + code)["itemsize"] == size
    if sys.version_info < (3, 14):
        pytest.skip(f"struct of {sys.version.split()[0]} has no '{code}' (CPython 3.14 added it)")
    assert struct.calcsize(code) == size
    assert struct.calcsize("b" + code) == parse("b" + code)["itemsize"]


def test_z_complex_codes_from_memoryview_and_array():
    """CPython 3.15: memoryview and array produce "Zf"/"Zd"."""
    assert parse("Zf")["itemsize"] == 8 and parse("Zd")["itemsize"] == 16
    if "Zd" not in getattr(array, "typecodes", ""):
        pytest.skip(f"array of {sys.version.split()[0]} has no 'Zd' (CPython 3.15 added it)")
    for code, size in (("Zf", 8), ("Zd", 16)):
        a = array.array(code, [1 + 2j, 3 - 4j])
        view = t.inspect(a, RO)
        assert view["format"] == code and view["itemsize"] == size
        assert t.host_only(a, "contiguous") == a.tobytes()


def test_half_floats_from_array():
    """CPython 3.15: array('e'); memoryview casts to 'e' since 3.12."""
    assert parse("e")["itemsize"] == 2
    if "e" not in getattr(array, "typecodes", ""):
        pytest.skip(f"array of {sys.version.split()[0]} has no 'e' (CPython 3.15 added it)")
    a = array.array("e", [1.5, -2.0])
    view = t.inspect(a, RO)
    assert view["format"] == "e" and view["itemsize"] == 2


# --- items 6-10: the custom-dtype rules ---------------------------------------


def test_payload_holds_no_dollar_and_writer_never_writes_one():
    with pytest.raises(t.FormatError, match="'\\$' at position 4 is not allowed"):
        parse("[a$b$c]")
    with pytest.raises(ValueError):
        t.dtype_register("a$b$c", 4, 4)
    # every string the writer produces keeps the rule (it writes what parsed)
    for fmt in ["[a b$c]", "[my/pkg$x;ml_dtypes$bfloat16]", "T{[x$y]:f:}", "[struct$i;q$r]"]:
        out = write(fmt)
        for alt in out[out.index("[") + 1 : out.rindex("]")].split(";"):
            assert alt.count("$") == 1


@pytest.mark.parametrize("fmt", ["[a b$c]", "[my/pkg$x]", "[ml_dtypes 2$x;a$b]"])
def test_ids_are_printable_ascii(fmt):
    p = parse(fmt)
    (n,) = members(p)
    assert n["kind"] == "custom" and n["custom"] == fmt[1:].split(";")[0].rstrip("]")
    assert p["itemsize"] == -1  # unknown: opaque, not a parse error
    t.dtype_register("my/pkg$x", 4, 4)
    try:
        assert t.format_itemsize(b"[my/pkg$x]") == (4, 4)
    finally:
        t.dtype_unregister("my/pkg$x")


@pytest.mark.parametrize(
    "fmt,position,message",
    [
        ("[ml_dtypes$bfloat16;c]", 20, "custom type 'c' at position 20 has no '$'"),
        ("[ml_dtypes$bfloat16;struct$T{]", 27, "not struct-module syntax"),
        ("[ml_dtypes$bfloat16;buffer$(2]", 27, "'(' at position 27 is never closed"),
        ("[buffer$[a$b]]", 8, "custom types are not allowed in buffer$"),
    ],
)
def test_every_alternative_is_checked_alike(fmt, position, message):
    """One rule: every alternative is checked in full, also those after the
    one understood, so a string's validity does not depend on the registry."""
    with pytest.raises(t.FormatError) as e:
        parse(fmt)
    assert e.value.position == position and message in str(e.value)


def test_payload_is_a_format_of_its_own():
    """The outer prefix places the custom item (packed after '<') but does not
    reach inside a struct$/buffer$ payload, which starts in '@' as
    struct.calcsize reads it; an explicit prefix inside wins."""
    p = parse("<[struct$>i]")
    (c,) = members(p)
    (inner,) = members(p, p["nodes"].index(c))
    assert (c["byte_order"], c["alignment"], inner["byte_order"]) == ("<", 1, ">")
    p = parse("<[struct$l]")
    (c,) = members(p)
    (inner,) = members(p, p["nodes"].index(c))
    assert inner["byte_order"] == "@" and p["itemsize"] == struct.calcsize("@l")
    p = parse(">[buffer$T{i:a:B:b:}]")
    assert p["itemsize"] == 8  # native struct inside, not '>'-packed (5)
    # the mode after the custom item is the outer one again
    assert parse("<[struct$>i]l")["itemsize"] == 4 + struct.calcsize("<l")
    assert write("<[struct$>i]l") == "<[struct$>i]l"


def test_fallback_form_parses_and_round_trips():
    """The proposal's fallback: an unknown type, then buffer$ with its layout."""
    fmt = "[mymod$x;buffer$T{d:X:d:Y:}]"
    p = parse(fmt)
    (c,) = members(p)
    assert c["custom"] == "buffer$T{d:X:d:Y:}" and p["itemsize"] == 16
    assert write(fmt) == fmt
    t.dtype_register("mymod$x", 4, 4)
    try:  # a consumer that knows mymod takes it first and stops
        assert t.format_itemsize(fmt.encode()) == (4, 4)
        assert write(fmt) == fmt
    finally:
        t.dtype_unregister("mymod$x")


# --- item 12: DLPack 1.1+ dtypes through every path ---------------------------

ML_FLOATS = {
    "bfloat16": (4, 16), "float8_e3m4": (7, 8), "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8), "float8_e4m3fn": (10, 8), "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8), "float8_e5m2fnuz": (13, 8), "float8_e8m0fnu": (14, 8),
    "float6_e2m3fn": (15, 6), "float6_e3m2fn": (16, 6), "float4_e2m1fn": (17, 4),
}  # fmt: skip


@pytest.mark.parametrize("name", [n for n in ML_FLOATS if hasattr(ml_dtypes, n)])
def test_ml_dtypes_floats_through_every_path(name):
    """ml_dtypes array -> its struct (the NumPy route) -> exporter on the emulated
    device -> DLPack export (code, bits, padded flag) -> DLPack import: the
    same format and the same bytes at every step."""
    code, bits = ML_FLOATS[name]
    fmt = f"[ml_dtypes${name}]"
    a = np.arange(6, dtype=np.float32).reshape(2, 3).astype(getattr(ml_dtypes, name))
    view = t.inspect(a, RO)
    assert (view["path"], view["format"], view["itemsize"]) == (USER_DTYPE_ROUTE, fmt, 1 if bits < 16 else 2)
    on_device = t.to_device(a, DEV0)
    assert t.inspect(on_device, DEVICE_VIEW)["format"] == fmt
    info = t.capsule_info(on_device.__dlpack__(max_version=(1, 3)))
    assert info["dtype"] == (code, bits, 1)
    assert info["flags"] == (t.DLPACK_FLAG_SUBBYTE_PADDED if bits < 8 else 0)
    back = t.dlpack_info(DLPackOnly(on_device), DEVICE_VIEW)
    assert (back["path"], back["format"]) == ("dlpack", fmt)
    assert t.copy_to_host(DLPackOnly(on_device)) == a.tobytes()
