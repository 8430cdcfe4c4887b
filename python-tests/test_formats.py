"""Format strings: pyxbuf's parser against struct, NumPy, ml_dtypes and ctypes.

The rules pyxbuf follows (c/format/parse.c states them with reasons):

* struct's sizes and alignment: '@' aligns every item and never pads the end of
  the whole format ("ix" is 5); '<' '>' '!' '=' are standard sizes, packed;
  '^' is native sizes, packed. Every struct-valid entry of the tables below is
  checked against struct.calcsize in the same run.
* A prefix may come before any item and lasts until the next one, across '}'
  too (NumPy's exporter and parser, Cython).
* T{...} is a C struct whose members say how they align (native members their
  natural alignment, packed members 1); it is placed at and padded to the
  largest member alignment.
* n N P g O & keep native sizes under a standard prefix (ctypes writes "<P");
  's'/'p' counts are one string's length; 'u' is 2 bytes, 'w' 4.
* [id$payload;...]: the first alternative understood (struct$, buffer$, the
  registry, ml_dtypes' built-in types) gives the size; otherwise the type is
  opaque: parsing succeeds with itemsize -1 and pyxbuf_format_itemsize fails
  with a message naming the type.
* Errors raise _pyxbuf_testext.FormatError (a ValueError) for every code,
  PYXBUF_EOVERFLOW and PYXBUF_EUNSUPPORTED included, with .position (0-based
  byte) and .code.
"""

import ctypes
import math
import struct
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import _pyxbuf_testext as t

# The expected sizes below are those of the 64-bit Unix ABIs (LP64, 16-byte
# long double: x86-64 and aarch64 Linux). Elsewhere the tables are skipped;
# the differential and property tests run everywhere.
LP64_LD16 = (
    struct.calcsize("l") == 8
    and struct.calcsize("P") == 8
    and ctypes.sizeof(ctypes.c_longdouble) == 16
    and ctypes.alignment(ctypes.c_longdouble) == 16
)
abi_tables = pytest.mark.skipif(not LP64_LD16, reason="sizes written for LP64 with 16-byte long double")

KINDS = ("root", "scalar", "struct", "custom", "padding")


def parse(fmt):
    return t.format_parse(fmt.encode() if isinstance(fmt, str) else fmt)


def write(fmt):
    return t.format_write(fmt.encode() if isinstance(fmt, str) else fmt).decode()


def struct_size(fmt):
    """struct.calcsize, or None where struct refuses the format."""
    try:
        return struct.calcsize(fmt)
    except (struct.error, TypeError, ValueError):
        return None


def children(p, i=0):
    nodes = p["nodes"]
    c = nodes[i]["first_child"]
    while c >= 0:
        yield c
        c = nodes[c]["next"]


def top_offsets(p):
    return [p["nodes"][c]["offset"] for c in children(p)]


def check_tree(p):
    """Invariants every parsed format satisfies."""
    nodes = p["nodes"]
    assert nodes[0]["kind"] == "root" and nodes[0]["parent"] == -1
    assert nodes[0]["itemsize"] == p["itemsize"]
    assert nodes[0]["alignment"] == p["alignment"]
    seen = {0}
    for i, n in enumerate(nodes):
        assert n["kind"] in KINDS
        kids = list(children(p, i))
        assert len(kids) == n["nchildren"]
        if kids:
            # pre-order: the first child follows its parent
            assert kids[0] == i + 1
        for k in kids:
            assert nodes[k]["parent"] == i
            seen.add(k)
        known = [nodes[k] for k in kids if nodes[k]["offset"] >= 0]
        for a, b in zip(known, known[1:]):
            assert a["offset"] + a["nbytes"] <= b["offset"]
        if n["kind"] in ("struct", "root") and n["itemsize"] >= 0 and known:
            last = known[-1]
            assert last["offset"] + last["nbytes"] <= max(n["itemsize"], 0) or n["flags"] & t.PYXBUF_FMTN_POINTER
        if n["itemsize"] >= 0 and i > 0:
            assert n["nbytes"] == n["itemsize"] * n["repeat"] * math.prod(n["shape"])
        if n["offset"] >= 0 and i > 0 and n["itemsize"] >= 0:
            assert n["offset"] % n["alignment"] == 0
        assert n["alignment"] >= 1 and n["alignment"] & (n["alignment"] - 1) == 0
        if n["kind"] == "custom":
            assert n["custom"] is not None and n["alternatives"] is not None
            assert n["custom"].startswith(n["custom_id"] + "$")
            assert n["custom"] in n["alternatives"].split(";")
        else:
            assert n["custom"] is None
    assert seen == set(range(len(nodes)))
    if p["itemsize"] < 0:
        assert p["flags"] & t.PYXBUF_FMTF_HAS_OPAQUE


# ---------------------------------------------------------------------------
# Valid formats: (format, itemsize, alignment, offsets of the top-level items)
# ---------------------------------------------------------------------------

VALID = [
    # native scalars: C's sizes and alignments
    ("x", 1, 1, [0]),
    ("c", 1, 1, [0]),
    ("b", 1, 1, [0]),
    ("B", 1, 1, [0]),
    ("?", 1, 1, [0]),
    ("h", 2, 2, [0]),
    ("H", 2, 2, [0]),
    ("i", 4, 4, [0]),
    ("I", 4, 4, [0]),
    ("l", 8, 8, [0]),
    ("L", 8, 8, [0]),
    ("q", 8, 8, [0]),
    ("Q", 8, 8, [0]),
    ("n", 8, 8, [0]),
    ("N", 8, 8, [0]),
    ("e", 2, 2, [0]),
    ("f", 4, 4, [0]),
    ("d", 8, 8, [0]),
    ("s", 1, 1, [0]),
    ("p", 1, 1, [0]),
    ("P", 8, 8, [0]),
    ("@i", 4, 4, [0]),
    ("@P", 8, 8, [0]),
    # PEP 3118 additions
    ("g", 16, 16, [0]),
    ("O", 8, 8, [0]),
    ("w", 4, 4, [0]),
    ("u", 2, 2, [0]),
    ("Zf", 8, 4, [0]),
    ("Zd", 16, 8, [0]),
    ("Zg", 32, 16, [0]),
    ("<Zf", 8, 1, [0]),
    (">Zd", 16, 1, [0]),
    ("=Zg", 32, 1, [0]),
    ("<g", 16, 1, [0]),
    ("^g", 16, 1, [0]),
    ("<O", 8, 1, [0]),
    ("<w", 4, 1, [0]),
    ("3w", 12, 4, [0]),
    ("<u", 2, 1, [0]),
    ("&i", 8, 8, [0]),
    ("&<i", 8, 1, [0]),
    ("&Zd", 8, 8, [0]),
    ("b&d", 16, 8, [0, 8]),
    ("^i", 4, 1, [0]),
    ("^bd", 9, 1, [0, 1]),
    ("^bq", 9, 1, [0, 1]),
    ("^?hl", 11, 1, [0, 1, 3]),
    # standard sizes of n N P under a prefix (ctypes writes "<P")
    ("<P", 8, 1, [0]),
    ("<n", 8, 1, [0]),
    ("!N", 8, 1, [0]),
    # several items, native alignment, no padding at the end
    ("ix", 5, 4, [0, 4]),
    ("hd", 16, 8, [0, 8]),
    ("ii0l", 8, 8, [0, 4, 8]),
    ("c0i", 4, 4, [0, 4]),
    ("bi", 8, 4, [0, 4]),
    ("bhi", 8, 4, [0, 2, 4]),
    ("bq", 16, 8, [0, 8]),
    ("qb", 9, 8, [0, 8]),
    ("b3i", 16, 4, [0, 4]),
    ("3bi", 8, 4, [0, 4]),
    ("bd", 16, 8, [0, 8]),
    ("b?h", 4, 2, [0, 1, 2]),
    ("cP", 16, 8, [0, 8]),
    ("bn", 16, 8, [0, 8]),
    ("bN", 16, 8, [0, 8]),
    ("be", 4, 2, [0, 2]),
    ("bf", 8, 4, [0, 4]),
    ("b5s", 6, 1, [0, 1]),
    ("5sd", 16, 8, [0, 8]),
    ("b0d", 8, 8, [0, 8]),
    ("0s", 0, 1, [0]),
    ("c0s", 1, 1, [0, 1]),
    ("0p", 0, 1, [0]),
    ("3p", 3, 1, [0]),
    ("255p", 255, 1, [0]),
    ("10xi", 16, 4, [0, 12]),
    ("xxxxi", 8, 4, [0, 4]),
    ("2i2h", 12, 4, [0, 8]),
    ("bh3i", 16, 4, [0, 2, 4]),
    ("dbd", 24, 8, [0, 8, 16]),
    ("100d", 800, 8, [0]),
    ("?ie", 10, 4, [0, 4, 8]),
    ("hq", 16, 8, [0, 8]),
    ("Hl", 16, 8, [0, 8]),
    ("Pc", 9, 8, [0, 8]),
    ("0q", 0, 8, [0]),
    ("b0q", 8, 8, [0, 8]),
    # whitespace between items (struct ignores it)
    ("", 0, 1, []),
    ("  ", 0, 1, []),
    ("i x", 5, 4, [0, 4]),
    (" i", 4, 4, [0]),
    ("i ", 4, 4, [0]),
    ("i\t\nh", 6, 4, [0, 4]),
    ("i\x0bh\x0c", 6, 4, [0, 4]),
    ("< i", 4, 1, [0]),
    ("> 2h x", 5, 1, [0, 4]),
    # standard sizes, packed
    ("<ix", 5, 1, [0, 4]),
    ("<hd", 10, 1, [0, 2]),
    (">bi", 5, 1, [0, 1]),
    ("!hq", 10, 1, [0, 2]),
    ("=bq", 9, 1, [0, 1]),
    ("<bh3i", 15, 1, [0, 1, 3]),
    ("<lL", 8, 1, [0, 4]),
    (">e?", 3, 1, [0, 2]),
    ("<10s", 10, 1, [0]),
    ("=5p2c", 7, 1, [0, 5]),
    # a prefix before any item (PEP 3118)
    ("b<i", 5, 1, [0, 1]),
    ("<b@i", 8, 4, [0, 4]),
    ("i<b@d", 16, 8, [0, 4, 8]),
    ("@i=i^i<i", 16, 4, [0, 4, 8, 12]),
    ("<i>i!i=i", 16, 1, [0, 4, 8, 12]),
    ("b^l", 9, 1, [0, 1]),
    # structs
    ("T{ix}", 8, 4, [0]),
    ("T{i:a:B:b:}", 8, 4, [0]),
    ("T{=i:a:B:b:}", 5, 1, [0]),
    ("T{>q:a:@H:b:=f:c:}", 14, 2, [0]),
    ("T{T{B:x:xxxxxxxd:y:}:n:h:z:}", 24, 8, [0]),
    ("T{i:f0:=d:f1:}", 12, 4, [0]),
    ("T{T{=i:x:B:y:}:n:h:z:}", 7, 1, [0]),
    ("T{}", 0, 1, [0]),
    ("T{}i", 4, 4, [0, 0]),
    ("bT{d}", 16, 8, [0, 8]),
    ("b<T{d}", 9, 1, [0, 1]),
    ("2T{ix}", 16, 4, [0]),
    ("T{bd}b", 17, 8, [0, 16]),
    ("T{d}b", 9, 8, [0, 8]),
    ("T{bT{d}}", 16, 8, [0]),
    ("T{b:a:T{h:b:b:c:}:s:}", 6, 2, [0]),
    ("=T{@i:a:B:b:}", 8, 4, [0]),
    (">q:a:T{@q:f0:B:f1:}:b:", 24, 8, [0, 8]),
    ("T{ i:a: d:b: }", 16, 8, [0]),
    ("T{(2,3)i:a:f:b:}", 28, 4, [0]),
    ("T{3s:a:=2w:b:2x:c:O:d:}", 21, 1, [0]),  # the "=" reaches O
    ("T{B:a:xxxxxxxO:b:}", 16, 8, [0]),
    ("T{<i:a:<d:b:(3)<c:c:}", 15, 1, [0]),
    ("T{T{T{T{d}}}}", 8, 8, [0]),
    ("T{^b:a:@d:b:}", 16, 8, [0]),
    ("T{Zf:a:Zd:b:}", 24, 8, [0]),
    ("(2)T{ix}", 16, 4, [0]),
    ("&T{ix}", 8, 8, [0]),
    # sub-arrays
    ("(2,3)f", 24, 4, [0]),
    ("(2)<3f", 24, 1, [0]),
    ("<(2)3f", 24, 1, [0]),
    ("(2, 3)f", 24, 4, [0]),
    ("( 2 )f", 8, 4, [0]),
    ("(3)T{bd}", 48, 8, [0]),
    ("b(2)i", 12, 4, [0, 4]),
    ("(2)3s", 6, 1, [0]),
    ("(2)3w", 24, 4, [0]),
    ("(1,1,1,1,1)d", 8, 8, [0]),
    ("(2)Zf", 16, 4, [0]),
    ("(2)T{b}", 2, 1, [0]),
    ("(3)&<i", 24, 1, [0]),
    ("(2,2)[ml_dtypes$bfloat16]", 8, 2, [0]),
    # names
    ("i:x:d:y:", 16, 8, [0, 8]),
    ("i:with space:", 4, 4, [0]),
    ("i:\u00fcn\u00efcode:", 4, 4, [0]),
    ("T{i:a}b:}", 4, 4, [0]),
    ("x:pad:i", 8, 4, [0, 4]),
    ("xx:p:", 2, 1, [0, 1]),
    # custom types
    ("[ml_dtypes$bfloat16]", 2, 2, [0]),
    ("Z[ml_dtypes$bfloat16]", 4, 2, [0]),
    ("b[ml_dtypes$bfloat16]", 4, 2, [0, 2]),
    ("<b[ml_dtypes$bfloat16]", 3, 1, [0, 1]),
    (">[ml_dtypes$bfloat16]", 2, 1, [0]),
    ("[ml_dtypes$float8_e4m3fn]", 1, 1, [0]),
    ("[ml_dtypes$float8_e5m2]", 1, 1, [0]),
    ("[ml_dtypes$float8_e4m3fnuz]", 1, 1, [0]),
    ("[ml_dtypes$float8_e5m2fnuz]", 1, 1, [0]),
    ("[ml_dtypes$float8_e4m3b11fnuz]", 1, 1, [0]),
    ("[ml_dtypes$float8_e3m4]", 1, 1, [0]),
    ("[ml_dtypes$float8_e4m3]", 1, 1, [0]),
    ("[ml_dtypes$float8_e8m0fnu]", 1, 1, [0]),
    ("[ml_dtypes$float6_e2m3fn]", 1, 1, [0]),
    ("[ml_dtypes$float6_e3m2fn]", 1, 1, [0]),
    ("[ml_dtypes$float4_e2m1fn]", 1, 1, [0]),
    ("[ml_dtypes$int2]", 1, 1, [0]),
    ("[ml_dtypes$uint2]", 1, 1, [0]),
    ("[ml_dtypes$int4]", 1, 1, [0]),
    ("[ml_dtypes$uint4]", 1, 1, [0]),
    ("[numpy$x;ml_dtypes$bfloat16]", 2, 2, [0]),
    # the first understood alternative wins; later ones are still checked in full
    ("[struct$h;ml_dtypes$int4]", 2, 2, [0]),
    ("[ml_dtypes$bfloat16;struct$H]", 2, 2, [0]),
    ("[struct$<iq]", 12, 1, [0]),
    ("[struct$iq]", 16, 8, [0]),
    # struct's complex: 'F' 'D' (3.14), 'Zf' 'Zd' (3.15)
    ("[struct$Zf]", 8, 4, [0]),
    ("[struct$<Zd]", 16, 1, [0]),
    ("[struct$bD]", 24, 8, [0]),
    ("[struct$]", 0, 1, [0]),
    # the struct module's own answers: a prefix alone is 0 bytes there
    ("[struct$<]", 0, 1, [0]),
    ("[struct$@ ]", 0, 1, [0]),
    ("[struct$ 2i ]", 8, 4, [0]),
    ("b[struct$iq]", 24, 8, [0, 8]),
    ("[buffer$T{i:a:B:b:}]", 8, 4, [0]),
    ("[buffer$(2)Zd]", 32, 8, [0]),
    ("[buffer$T{<i:x:<d:y:(2)f:z:}]", 20, 1, [0]),  # the "<" reaches f
    ("&[numpy$opaque]", 8, 8, [0]),
    ("3[ml_dtypes$bfloat16]:bf:", 6, 2, [0]),
    ("(2)[ml_dtypes$int4]", 2, 1, [0]),
    ("T{[ml_dtypes$bfloat16]:re:[ml_dtypes$bfloat16]:im:}", 4, 2, [0]),
    # opaque custom types: itemsize -1, offsets after them unknown
    ("[numpy$numpy.dtypes:StringDType]", -1, 1, [0]),
    ("i[numpy$x]d", -1, 8, [0, 4, -1]),
    ("[a$]", -1, 1, [0]),
    ("Z[numpy$x]", -1, 1, [0]),
    ("[a.b-c_d$ !\"#%&'()*+,-./0123456789:<=>?@AZ[\\^_`az{|}~]", -1, 1, [0]),
    # ids are any printable ASCII but ']' ';' '$' (the proposal), not only names
    ("[a b$c]", -1, 1, [0]),
    ("[my/pkg$x]", -1, 1, [0]),
    ("[ !\"#%&'()*+,-./:<=>?@[\\^`{|}~$x]", -1, 1, [0]),
    # the proposal's fallback form: understood through buffer$
    ("[mymod$x;buffer$T{d:X:d:Y:}]", 16, 8, [0]),
    ("T{i:a:[numpy$x]:b:}", -1, 4, [0]),
]

# Every standard-mode scalar, with the struct module's standard sizes.
STANDARD_SIZES = dict(x=1, c=1, b=1, B=1, h=2, H=2, i=4, I=4, l=4, L=4, q=8, Q=8, e=2, f=4, d=8, s=1, p=1)
STANDARD_SIZES["?"] = 1
VALID += [(f"{prefix}{code}", size, 1, [0]) for prefix in "<>!=" for code, size in STANDARD_SIZES.items()]


def test_valid_table_is_large_and_unique():
    fmts = [row[0] for row in VALID]
    assert len(fmts) >= 150
    assert len(set(fmts)) == len(fmts)
    # the differential against struct is not vacuous
    assert sum(struct_size(f) is not None for f in fmts) >= 100


@abi_tables
@pytest.mark.parametrize("fmt,itemsize,alignment,offsets", VALID, ids=[repr(r[0]) for r in VALID])
def test_valid_format(fmt, itemsize, alignment, offsets):
    p = parse(fmt)
    assert (p["itemsize"], p["alignment"]) == (itemsize, alignment)
    assert top_offsets(p) == offsets
    check_tree(p)
    if itemsize >= 0:
        assert t.format_itemsize(fmt.encode()) == (itemsize, alignment)
    # differential: struct.calcsize agrees wherever struct accepts the format
    expected = struct_size(fmt)
    if expected is not None:
        assert itemsize == expected, f"struct.calcsize({fmt!r}) = {expected}"
    # the canonical form parses to the same layout
    again = parse(write(fmt))
    assert again["itemsize"] == itemsize and top_offsets(again) == offsets


@pytest.mark.parametrize("fmt", [r[0] for r in VALID if struct_size(r[0]) is not None])
def test_struct_valid_rows_match_struct_calcsize(fmt):
    """Platform-independent half of the differential: whatever this ABI is."""
    assert t.format_itemsize(fmt.encode())[0] == struct.calcsize(fmt)


# ---------------------------------------------------------------------------
# Node structure
# ---------------------------------------------------------------------------


def node_summary(p, i):
    n = p["nodes"][i]
    return (n["kind"], n["code"], n["byte_order"], n["offset"], n["itemsize"], n["nbytes"], n["name"])


def test_mixed_byte_order_struct_nodes():
    p = parse("T{>q:a:@H:b:=f:c:}")
    assert [node_summary(p, i) for i in range(len(p["nodes"]))] == [
        ("root", None, "@", 0, 14, 14, None),
        ("struct", None, "@", 0, 14, 14, None),
        ("scalar", "q", ">", 0, 8, 8, "a"),
        ("scalar", "H", "@", 8, 2, 2, "b"),
        ("scalar", "f", "=", 10, 4, 4, "c"),
    ]
    assert p["flags"] == t.PYXBUF_FMTF_HAS_STRUCT
    assert [p["nodes"][i]["alignment"] for i in range(5)] == [2, 2, 1, 2, 1]


def test_numpy_aligned_nested_struct_nodes():
    p = parse("T{T{B:x:xxxxxxxd:y:}:n:h:z:}")
    assert [node_summary(p, i) for i in range(len(p["nodes"]))] == [
        ("root", None, "@", 0, 24, 24, None),
        ("struct", None, "@", 0, 24, 24, None),
        ("struct", None, "@", 0, 16, 16, "n"),
        ("scalar", "B", "@", 0, 1, 1, "x"),
        ("padding", "x", "@", 1, 1, 7, None),
        ("scalar", "d", "@", 8, 8, 8, "y"),
        ("scalar", "h", "@", 16, 2, 2, "z"),
    ]
    assert p["nodes"][4]["repeat"] == 7
    assert p["nodes"][6]["parent"] == 1 and p["nodes"][2]["next"] == 6


def test_mode_lasts_past_closing_brace():
    # NumPy's export of a packed struct holding a struct: 'h' is '='-packed.
    p = parse("T{T{=i:x:B:y:}:n:h:z:}")
    z = p["nodes"][-1]
    assert (z["name"], z["byte_order"], z["offset"], p["itemsize"]) == ("z", "=", 5, 7)


def test_subarray_nodes():
    p = parse("b(2,3)<4f:m:")
    m = p["nodes"][2]
    assert m["shape"] == (2, 3) and m["repeat"] == 4 and m["byte_order"] == "<"
    assert (m["offset"], m["itemsize"], m["nbytes"], m["name"]) == (1, 4, 96, "m")


def test_string_counts_are_lengths():
    p = parse("b5sp")
    s = p["nodes"][2]
    assert (s["code"], s["repeat"], s["itemsize"], s["nbytes"]) == ("s", 5, 1, 5)
    assert p["itemsize"] == 7


def test_custom_nodes():
    p = parse(">[numpy$numpy.dtypes:StringDType;ml_dtypes$bfloat16]:s:")
    c = p["nodes"][1]
    assert c["kind"] == "custom" and c["byte_order"] == ">"
    assert c["custom"] == "ml_dtypes$bfloat16" and c["custom_id"] == "ml_dtypes"
    assert c["alternatives"] == "numpy$numpy.dtypes:StringDType;ml_dtypes$bfloat16"
    assert (c["itemsize"], c["name"]) == (2, "s")
    assert p["flags"] == t.PYXBUF_FMTF_HAS_CUSTOM


def test_opaque_custom_nodes():
    p = parse("i[numpy$numpy.dtypes:StringDType:x.y]d")
    c, d = p["nodes"][2], p["nodes"][3]
    assert c["flags"] == t.PYXBUF_FMTN_OPAQUE
    assert (c["offset"], c["itemsize"], c["nbytes"]) == (4, -1, -1)
    assert c["custom"] == "numpy$numpy.dtypes:StringDType:x.y" and c["custom_id"] == "numpy"
    assert d["offset"] == -1
    assert p["itemsize"] == -1
    assert p["flags"] == t.PYXBUF_FMTF_HAS_CUSTOM | t.PYXBUF_FMTF_HAS_OPAQUE


def test_struct_payload_children():
    p = parse("b[struct$<iq]")
    c = p["nodes"][2]
    assert c["nchildren"] == 2 and c["first_child"] == 3
    assert [node_summary(p, i) for i in (3, 4)] == [
        ("scalar", "i", "<", 0, 4, 4, None),
        ("scalar", "q", "<", 4, 8, 8, None),
    ]
    assert all(p["nodes"][i]["parent"] == 2 for i in (3, 4))


def test_single_items_stay_inline():
    for fmt in ["f", "<d", "B", "Zf", "i:x:", "3f", "(2,3)f", "T{ix}", "[ml_dtypes$bfloat16]"]:
        p = parse(fmt)
        assert not p["heap"], fmt
        assert len(p["nodes"]) <= t.PYXBUF_FORMAT_INLINE_NODES
    assert parse("f")["flags"] == t.PYXBUF_FMTF_SINGLE_SCALAR
    assert parse("T{i:a:d:b:q:c:f:d:}")["heap"]


# ---------------------------------------------------------------------------
# NumPy: every exported dtype parses to NumPy's own itemsize
# ---------------------------------------------------------------------------

NUMPY_SCALARS = list("?bBhHiIlLqQefdgFDGO") + ["S1", "S5", "U1", "U3", "V1", "V4"]
NUMPY_SWAPPED = [">h", ">H", ">i", ">I", ">l", ">L", ">q", ">Q", ">e", ">f", ">d", ">F", ">D", ">U3"]


@abi_tables
@pytest.mark.parametrize("code", NUMPY_SCALARS + NUMPY_SWAPPED)
def test_numpy_scalar_exports(code):
    a = np.zeros(3, dtype=code)
    m = memoryview(a)
    p = parse(m.format)
    assert p["itemsize"] == a.itemsize == m.itemsize
    check_tree(p)
    if a.dtype.kind not in "SUV":
        assert p["flags"] & t.PYXBUF_FMTF_SINGLE_SCALAR
    if a.dtype.isnative and a.dtype.kind not in "SUVO":
        assert p["alignment"] == a.dtype.alignment


@pytest.mark.parametrize("scalar", [np.float32(1), np.int16(2), np.complex128(3), np.bool_(True)])
def test_numpy_scalar_objects(scalar):
    m = memoryview(scalar)
    assert parse(m.format)["itemsize"] == m.itemsize


def numpy_pep3118_parser():
    """NumPy's own (private) PEP 3118 parser, for comparisons."""
    try:
        from numpy._core._internal import _dtype_from_pep3118
    except ImportError:
        pytest.skip("this NumPy keeps its PEP 3118 parser elsewhere")
    return _dtype_from_pep3118


def aligned(fields):
    return np.dtype(fields, align=True)


NUMPY_STRUCTS = [
    np.dtype([("a", "<i4"), ("b", "u1")]),
    aligned([("a", "<i4"), ("b", "u1")]),
    np.dtype([("a", ">i8"), ("b", "<u2"), ("c", "<f4")]),
    aligned([("n", aligned([("x", "u1"), ("y", "<f8")])), ("z", "<i2")]),
    aligned([("f0", "<i4"), ("f1", "<f8")]),
    np.dtype([("f0", "<i4"), ("f1", "<f8")]),
    np.dtype([("n", [("x", "<i4"), ("y", "u1")]), ("z", "<i2")]),
    np.dtype([("n", [("x", ">i4"), ("y", "u1")]), ("z", ">i2")]),
    np.dtype([("a", "<i2"), ("n", [("x", ">i4"), ("y", "u1")]), ("z", "<i2")]),
    np.dtype([("a", "<i4", (2, 3)), ("b", "<f4")]),
    aligned([("a", "u1"), ("m", "<f8", (2, 2))]),
    np.dtype([("a", "S3"), ("b", "<U2"), ("c", "V2"), ("d", "O")]),
    aligned([("a", "u1"), ("b", "O")]),
    np.dtype([("re", "<c8"), ("im", "<c16"), ("l", "<g")]),
    aligned([("a", "u1"), ("c", "<G")]),
    np.dtype([("\u00fc", "<i4"), ("with space", "<f8")]),
    aligned([("a", "?"), ("b", "<e"), ("c", "<i8"), ("d", "S1")]),
    np.dtype({"names": ["a", "b"], "formats": ["<i4", "<i4"], "offsets": [0, 8]}),
    aligned([("deep", aligned([("mid", aligned([("x", "<f8"), ("y", "u1")])), ("z", "u1")]))]),
    np.dtype([("a", ">f8"), ("b", ">c8"), ("c", ">U2"), ("d", "S2")]),
    np.dtype([]),
    aligned([("x", "<f4", (3,)), ("y", "<f4", (3,)), ("id", "<i8")]),
]


# Aligned structs ending in a non-native field: the native first field gives
# the struct its alignment and pyxbuf pads the end to it, as the C layout
# does; NumPy's own parser pads only when the mode at '}' is '@', so NumPy
# cannot read these exports of its own.
NUMPY_PARSER_FAILS = [
    aligned([("a", "<i4"), ("b", ">i2")]),
    aligned([("a", "<i8"), ("b", ">i2")]),
]
NUMPY_STRUCTS += NUMPY_PARSER_FAILS


@abi_tables
@pytest.mark.parametrize("dtype", NUMPY_STRUCTS, ids=[str(d) for d in NUMPY_STRUCTS])
def test_numpy_struct_exports(dtype):
    a = np.zeros(4, dtype=dtype)
    m = memoryview(a)
    p = parse(m.format)
    check_tree(p)
    assert p["itemsize"] == dtype.itemsize == m.itemsize, m.format
    # NumPy's own parser reads the export the same way
    if dtype not in NUMPY_PARSER_FAILS:
        assert np.asarray(m).dtype.itemsize == dtype.itemsize
    else:
        with pytest.raises(RuntimeError, match="does not match the dtype"):
            np.asarray(m)
    # named members sit at NumPy's offsets
    st_node = p["nodes"][1]
    assert st_node["kind"] == "struct"
    got = {p["nodes"][c]["name"]: p["nodes"][c]["offset"] for c in children(p, 1) if p["nodes"][c]["name"]}
    want = {name: dtype.fields[name][1] for name in (dtype.names or ()) if dtype.fields[name][0].kind != "V" or dtype.fields[name][0].names}
    for name, off in want.items():
        assert got[name] == off, (name, m.format)
    assert write(m.format) and parse(write(m.format))["itemsize"] == dtype.itemsize


def test_numpy_void_scalar_export():
    rec = np.zeros(1, dtype=aligned([("a", "<i4"), ("b", "<f8")]))[0]
    m = memoryview(rec)
    assert parse(m.format)["itemsize"] == m.itemsize == 16


# NumPy's exporter loses information in a few shapes of dtype; no reading of
# the string gives NumPy's itemsize (NumPy's own parser included). pyxbuf
# follows its rule; the view's itemsize is authoritative. Each entry:
# (dtype, the string NumPy writes, NumPy's itemsize, pyxbuf's, NumPy's parser's)
NUMPY_EXPORT_QUIRKS = [
    # an inner struct's trailing padding written as 'x' in the outer struct
    (
        aligned([("n", aligned([("y", "<f8"), ("x", "u1")])), ("z", "<i2")]),
        "T{T{d:y:B:x:}:n:xxxxxxxh:z:}",
        24,
        32,
        32,
    ),
    # trailing padding of an aligned struct whose members are all non-native:
    # nothing in the string says the struct is aligned
    (aligned([("a", ">u8"), ("b", "i1")]), "T{>Q:a:b:b:}", 16, 9, 9),
    # an object pointer in a packed struct is written in native mode
    (np.dtype([("a", "O"), ("b", "i1")]), "T{O:a:b:b:}", 9, 16, 16),
]


@abi_tables
@pytest.mark.parametrize("dtype,fmt,numpy_size,ours,numpy_parser", NUMPY_EXPORT_QUIRKS)
def test_numpy_exporter_quirks(dtype, fmt, numpy_size, ours, numpy_parser):
    m = memoryview(np.zeros(2, dtype=dtype))
    assert m.format == fmt
    assert m.itemsize == numpy_size
    assert parse(fmt)["itemsize"] == ours
    assert numpy_pep3118_parser()(fmt).itemsize == numpy_parser


@abi_tables
def test_numpy_parser_pads_the_root_struct_does_not():
    # NumPy's parser rounds "ix" to 8; struct (and pyxbuf) say 5. NumPy never
    # exports more than one top-level item, so its exports are unaffected.
    assert numpy_pep3118_parser()("ix").itemsize == 8
    assert parse("ix")["itemsize"] == struct.calcsize("ix") == 5


def test_numpy_single_element_packed_struct_quirk():
    # For one element NumPy finds every field "aligned" and writes '@' codes for
    # a packed struct: "T{i:a:B:b:}" is 8 bytes as a C struct, the dtype is 5.
    a = np.zeros(1, dtype=[("a", "<i4"), ("b", "u1")])
    m = memoryview(a)
    assert m.format == "T{i:a:B:b:}" and m.itemsize == 5
    assert parse(m.format)["itemsize"] == 8
    # with more elements the stride is 5 and NumPy writes '=' instead
    assert parse(memoryview(np.zeros(3, a.dtype)).format)["itemsize"] == 5


# Random NumPy dtypes from two families NumPy exports faithfully: aligned
# structs of native fields (C layout all the way) and packed structs of
# big-endian fields (no alignment anywhere).
NATIVE_FIELDS = ["?", "b", "B", "<h", "<H", "<i", "<I", "<q", "<Q", "<e", "<f", "<d", "g", "<F", "<D", "G", "O", "S3", "<U2"]
BIG_FIELDS = [">h", ">H", ">i", ">q", ">e", ">f", ">d", ">F", ">D", ">U2", "S3", "V2", "b", "?"]


def dtype_strategy(fields, align, depth=3):
    leaf = st.sampled_from(fields).map(np.dtype)

    def nested(inner):
        field = st.tuples(inner, st.one_of(st.just(()), st.tuples(st.integers(1, 3))))
        return st.lists(field, min_size=1, max_size=4).map(
            lambda fs: np.dtype([(f"f{i}", d, s) if s else (f"f{i}", d) for i, (d, s) in enumerate(fs)], align=align)
        )

    return st.recursive(leaf, nested, max_leaves=12).filter(lambda d: d.names is not None)


def faithful_aligned(d):
    """No struct with trailing padding followed by a field or repeated."""

    def ok(dt, last):
        if dt.subdtype is not None:
            base = dt.subdtype[0]
            return base.names is None or (_tail_padding(base) == 0 and ok(base, last))
        if dt.names is None:
            return True
        for i, name in enumerate(dt.names):
            sub = dt.fields[name][0]
            is_last = i == len(dt.names) - 1
            if sub.names is not None and not (is_last and last) and _tail_padding(sub):
                return False
            if not ok(sub, last and is_last):
                return False
        return True

    return ok(d, True)


def _tail_padding(dt):
    if dt.names is None:
        return 0
    end = max(dt.fields[n][1] + dt.fields[n][0].itemsize for n in dt.names)
    return dt.itemsize - end


@abi_tables
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(dtype_strategy(NATIVE_FIELDS, align=True).filter(faithful_aligned))
def test_numpy_aligned_native_exports(dtype):
    m = memoryview(np.zeros(2, dtype=dtype))
    p = parse(m.format)
    check_tree(p)
    assert p["itemsize"] == dtype.itemsize, m.format


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype_strategy(BIG_FIELDS, align=False))
def test_numpy_packed_big_endian_exports(dtype):
    m = memoryview(np.zeros(2, dtype=dtype))
    p = parse(m.format)
    check_tree(p)
    assert p["itemsize"] == dtype.itemsize, m.format
    got = {p["nodes"][c]["name"]: p["nodes"][c]["offset"] for c in children(p, 1)}
    for name in dtype.names:
        if name in got:
            assert got[name] == dtype.fields[name][1]


# ---------------------------------------------------------------------------
# ml_dtypes: the built-in custom types match ml_dtypes' own sizes
# ---------------------------------------------------------------------------

ML_DTYPES = [
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float6_e2m3fn",
    "float6_e3m2fn", "float4_e2m1fn", "int2", "uint2", "int4", "uint4",
    "bcomplex32", "complex32", "int1", "uint1",
]


@pytest.mark.parametrize("name", ML_DTYPES)
def test_ml_dtypes_builtins(name):
    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    d = np.dtype(getattr(ml_dtypes, name))
    assert t.format_itemsize(f"[ml_dtypes${name}]".encode()) == (d.itemsize, d.alignment)
    p = parse(f"(3)[ml_dtypes${name}]")
    assert p["itemsize"] == np.zeros(3, d).nbytes


def test_ml_dtypes_cannot_export_buffers_themselves():
    # Why the custom format exists: NumPy refuses to describe these types.
    with pytest.raises(ValueError):
        memoryview(np.zeros(2, ml_dtypes.bfloat16))
    # complex bfloat16 is Z over the custom type (bcomplex32 is newer ml_dtypes')
    assert t.format_itemsize(b"Z[ml_dtypes$bfloat16]")[0] == 4
    if hasattr(ml_dtypes, "bcomplex32"):
        assert np.dtype(ml_dtypes.bcomplex32).itemsize == 4


# ---------------------------------------------------------------------------
# Opaque custom types and the registry
# ---------------------------------------------------------------------------


def test_opaque_itemsize_names_the_type():
    fmt = b"[numpy$numpy.dtypes:StringDType:]"
    assert parse(fmt)["itemsize"] == -1
    with pytest.raises(t.FormatError) as e:
        t.format_itemsize(fmt)
    assert e.value.code == t.PYXBUF_EUNSUPPORTED and e.value.position == 0
    msg = str(e.value)
    assert (
        "format '[numpy$numpy.dtypes:StringDType:]' uses custom type "
        "'numpy$numpy.dtypes:StringDType:' which this consumer does not support" in msg
    )
    assert "pyxbuf_dtype_register" in msg
    assert "bad char" not in msg


def test_opaque_with_alternatives_message():
    with pytest.raises(t.FormatError) as e:
        t.format_itemsize(b"i[a$x;b$y]")
    assert "'a$x'" in str(e.value) and "alternatives" in str(e.value)
    assert e.value.position == 1


def test_registry_round_trip():
    assert parse("[mylib$vec3]")["itemsize"] == -1
    t.dtype_register("mylib$vec3", 12, 4)
    try:
        assert t.format_itemsize(b"b[mylib$vec3]") == (16, 4)
        t.dtype_register("mylib$vec3", 24, 8)  # replaces
        assert t.format_itemsize(b"[mylib$vec3]") == (24, 8)
    finally:
        t.dtype_unregister("mylib$vec3")
    assert parse("[mylib$vec3]")["itemsize"] == -1
    with pytest.raises(t.FormatError) as e:
        t.dtype_unregister("mylib$vec3")
    assert e.value.code == t.PYXBUF_EINVAL


def test_registry_id_wide_key_with_size_function():
    t.dtype_register("sized$", payload_size=True)
    try:
        assert t.format_itemsize(b"[sized$6]") == (6, 1)
        assert t.format_itemsize(b"b[sized$16,8]") == (24, 8)
        # the size function refuses "abc": opaque, so the next alternative wins
        assert t.format_itemsize(b"[sized$abc;ml_dtypes$bfloat16]") == (2, 2)
        # a non-power-of-two alignment from the size function is refused too
        assert parse("[sized$6,3]")["itemsize"] == -1
    finally:
        t.dtype_unregister("sized$")


@pytest.mark.parametrize("key", ["nodollar", "$x", "struct$", "buffer$i", "a\tb$c", "a$b]", "a$b;c",
                                 "a$b$c", "a$\x7f"])
def test_registry_refuses_bad_keys(key):
    with pytest.raises(t.FormatError) as e:
        t.dtype_register(key, 1, 1)
    assert e.value.code == t.PYXBUF_EINVAL


def test_builtins_cannot_be_removed_but_can_be_shadowed():
    with pytest.raises(t.FormatError):
        t.dtype_unregister("ml_dtypes$bfloat16")
    t.dtype_register("ml_dtypes$bfloat16", 4, 4)
    try:
        assert t.format_itemsize(b"[ml_dtypes$bfloat16]") == (4, 4)
    finally:
        t.dtype_unregister("ml_dtypes$bfloat16")
    assert t.format_itemsize(b"[ml_dtypes$bfloat16]") == (2, 2)


# The one custom-type character rule (c/format/format.h, the custom-dtype
# proposal: "All characters within the [] must be printable ASCII characters
# characters excluding ];$"), byte by byte, for the id and the payload of a
# parsed type, the builder's and a registry key; test_array_interface.py pins
# the same rule for the names of NumPy user dtypes.

def custom_char_allowed(byte):
    return 0x20 <= byte <= 0x7E and chr(byte) not in "];$"


def byte_desc(byte):
    return f"'{chr(byte)}'" if 0x20 <= byte <= 0x7E else f"byte 0x{byte:02X}"


@pytest.mark.parametrize("byte", range(1, 256), ids=lambda b: f"0x{b:02X}")
def test_custom_type_characters_follow_one_rule(byte):
    ch = bytes([byte])
    in_id, in_payload = b"[a" + ch + b"b$x]", b"[a$x" + ch + b"y]"
    key = (b"a" + ch + b"b$x").decode("latin-1")
    if custom_char_allowed(byte):
        assert parse(in_id)["nodes"][1]["custom"] == in_id[1:-1].decode()
        assert parse(in_payload)["nodes"][1]["custom"] == in_payload[1:-1].decode()
        t.dtype_register(key, 2, 2)
        try:
            assert t.format_itemsize(in_id) == (2, 2)
        finally:
            t.dtype_unregister(key)
        return
    with pytest.raises(t.FormatError) as e:
        parse(in_payload)
    assert e.value.code == t.PYXBUF_EFORMAT
    if chr(byte) not in "];":  # they end the payload: the next character is refused
        assert f"{byte_desc(byte)} at position 4 is not allowed in a custom type payload" in str(
            e.value)
    with pytest.raises(t.FormatError) as e:
        parse(in_id)
    assert e.value.code == t.PYXBUF_EFORMAT
    if chr(byte) not in "];$":  # they end the id
        assert f"{byte_desc(byte)} at position 2 is not allowed in a custom type id" in str(e.value)
    with pytest.raises(t.FormatError) as e:
        t.dtype_register(key, 2, 2)
    assert e.value.code == t.PYXBUF_EINVAL


# ---------------------------------------------------------------------------
# Malformed formats: (format, code, position, message substring)
# ---------------------------------------------------------------------------

E, OVF, UNS = t.PYXBUF_EFORMAT, t.PYXBUF_EOVERFLOW, t.PYXBUF_EUNSUPPORTED

MALFORMED = [
    ("iQz", E, 2, "format 'iQz': unknown type code 'z' at position 2"),
    ("z", E, 0, "unknown type code 'z' at position 0"),
    ("i,", E, 1, "unknown type code ',' at position 1"),
    ("\x01", E, 0, "byte 0x01 at position 0"),
    ("i\xc3\xa9", E, 1, "byte 0xC3 at position 1 is not ASCII"),
    ("T{i", E, 0, "T{ at position 0 is never closed"),
    ("T{T{i}", E, 0, "never closed"),
    ("T{i:a:", E, 0, "never closed"),
    ("i}", E, 1, "unbalanced '}' at position 1"),
    ("T{i}}", E, 4, "unbalanced '}'"),
    ("i:a:}", E, 4, "unbalanced '}'"),
    ("i]", E, 1, "unbalanced ']' at position 1"),
    ("i)", E, 1, "unbalanced ')' at position 1"),
    ("[a$b", E, 0, "'[' at position 0 is never closed"),
    ("i[ml_dtypes$bfloat16", E, 1, "'[' at position 1 is never closed"),
    ("(2,3f", E, 4, "expected ',' or ')'"),
    ("(2,3", E, 0, "'(' at position 0 is never closed"),
    ("(", E, 0, "never closed"),
    ("Ti", E, 0, "'T' at position 0 must be followed by '{'"),
    ("T", E, 0, "must be followed by '{'"),
    ("iT", E, 1, "'T' at position 1"),
    ("T {i}", E, 0, "must be followed by '{'"),
    ("{i}", E, 0, "'{' at position 0 without 'T'"),
    ("i:a", E, 1, "name starting at position 1 has no closing ':'"),
    ("T{i}:", E, 4, "no closing ':'"),
    ("i::", E, 1, "empty name '::' at position 1"),
    (":a:i", E, 0, "name at position 0 does not follow an item"),
    ("T{:a:}", E, 2, "does not follow an item"),
    ("i :a:", E, 2, "does not follow an item"),
    ("i:a::b:", E, 4, "second name at position 4"),
    ("99999999999999999999i", OVF, 0, "repeat count at position 0 does not fit in 64 bits"),
    ("9223372036854775807q", OVF, 0, "larger than 2**63 bytes"),
    ("b9223372036854775807s", OVF, 1, "larger than 2**63 bytes"),
    ("(-1)f", E, 1, "'-' at position 1 in a sub-array shape"),
    ("()f", E, 0, "empty sub-array shape"),
    ("(2,)f", E, 3, "')' at position 3"),
    ("(a)f", E, 1, "'a' at position 1"),
    ("(99999999999999999999)f", OVF, 1, "sub-array dimension at position 1 does not fit"),
    ("(4294967296,4294967296)d", OVF, 12, "sub-array dimension at position 12 makes the shape larger"),
    ("(" + ",".join(["1"] * 65) + ")f", E, 129, "sub-array dimension at position 129 is one more than 64"),
    ("[$x]", E, 1, "empty custom type id before '$' at position 1"),
    ("[abc]", E, 1, "custom type 'abc' at position 1 has no '$'"),
    ("[a$b;c]", E, 5, "custom type 'c' at position 5 has no '$'"),
    # every alternative's syntax is checked, also after the one understood
    ("[ml_dtypes$bfloat16;c]", E, 20, "custom type 'c' at position 20 has no '$'"),
    ("[ml_dtypes$bfloat16;a$\t]", E, 22, "byte 0x09 at position 22"),
    ("[a$b\tc]", E, 4, "byte 0x09 at position 4 is not allowed in a custom type payload"),
    ("[a$b\x7f]", E, 4, "byte 0x7F at position 4"),
    ("[a$\xc3\xa9]", E, 3, "byte 0xC3 at position 3"),
    ("[a\tb$c]", E, 2, "byte 0x09 at position 2 is not allowed in a custom type id"),
    ("[a\x80$c]", E, 2, "byte 0x80 at position 2"),
    ("[a\x7fb$c]", E, 2, "byte 0x7F at position 2 is not allowed in a custom type id"),
    ("[\x1f$c]", E, 1, "byte 0x1F at position 1 is not allowed in a custom type id"),
    # '$' ends the id; a payload may not hold one (the proposal)
    ("[a$b$c]", E, 4, "'$' at position 4 is not allowed in a custom type payload"),
    ("[numpy$x;ml_dtypes$bfloat16$]", E, 27, "'$' at position 27"),
    # every alternative is checked in full, after the one understood too: a
    # string's validity does not depend on which types a consumer knows
    ("[ml_dtypes$bfloat16;struct$T{]", E, 27, "not struct-module syntax"),
    ("[ml_dtypes$bfloat16;buffer$T{]", E, 27, "never closed"),
    ("[ml_dtypes$bfloat16;buffer$iz]", E, 28, "unknown type code 'z'"),
    ("[]", E, 0, "empty custom type '[]' at position 0"),
    ("[a$b;;c$d]", E, 5, "empty custom type alternative at position 5"),
    ("[a$b;]", E, 5, "empty custom type alternative"),
    ("[;a$b]", E, 1, "empty custom type alternative at position 1"),
    ("<", E, 0, "byte-order prefix '<' at position 0 is not followed by a type code"),
    ("i>", E, 1, "prefix '>' at position 1"),
    ("i@", E, 1, "prefix '@' at position 1"),
    ("3", E, 0, "count at position 0 is not followed by a type code"),
    ("i3", E, 1, "count at position 1"),
    ("T{3}", E, 2, "count at position 2"),
    ("&", E, 0, "'&' in the item at position 0 is not followed by a type code"),
    ("(2)", E, 0, "sub-array shape at position 0 is not followed by a type code"),
    ("Zi", E, 0, "'Z' at position 0 must be followed by 'f', 'd', 'g' or a custom type"),
    ("Z", E, 0, "'Z' at position 0"),
    ("ZZf", E, 0, "not 'Z'"),
    ("Zx", E, 0, "not 'x'"),
    ("ZT{f}", E, 0, "not 'T'"),
    ("Ze", E, 0, "not 'e'"),
    ("3 i", E, 1, "whitespace at position 1"),
    ("(2) f", E, 3, "whitespace at position 3"),
    ("<>i", E, 1, "two byte-order prefixes in a row ('<' then '>') at position 1"),
    ("< >i", E, 2, "two byte-order prefixes"),
    ("3(2)f", E, 1, "write the shape first"),
    ("&x", E, 1, "padding"),
    ("3t", UNS, 1, "bit field 't' at position 1 is not supported"),
    ("X{}", UNS, 0, "function pointer 'X'"),
    ("[struct$T{i}]", E, 8, "not struct-module syntax (a T{} struct)"),
    ("[struct$Zg]", E, 8, "('Zg')"),
    ("[struct$&i]", E, 8, "('&')"),
    ("[struct$i:a:]", E, 9, "the struct module has no names"),
    ("[struct$(2)f]", E, 8, "(a sub-array shape)"),
    ("[struct$i<i]", E, 9, "the struct module takes one only at the start"),
    ("[struct$ <i]", E, 9, "only at the start"),
    ("[struct$ =]", E, 9, "only at the start"),
    ("[struct$<P]", E, 9, "'P' at position 9 has no standard size"),
    # every struct$ alternative is checked, also after the one read
    ("[buffer$h;struct$<P]", E, 18, "'P' at position 18 has no standard size"),
    ("[struct$h;struct$T{i}]", E, 17, "(a T{} struct)"),
    ("[struct$g]", E, 8, "('g')"),
    ("[struct$w]", E, 8, "('w')"),
    ("[struct$^i]", E, 8, "'^' at position 8 is not a struct-module prefix"),
    ("[buffer$iz]", E, 9, "unknown type code 'z' at position 9"),
    ("[buffer$T{i]", E, 8, "never closed"),
    ("[buffer$[a$b]]", E, 8, "custom types are not allowed in buffer$"),
    ("[buffer$[x]]", E, 8, "custom types are not allowed in buffer$"),
    ("[buffer$T{i:a:[x]:b:}]", E, 14, "custom types are not allowed in buffer$"),
    ("[struct$[a$b]]", E, 8, "custom types are not allowed in struct$"),
    ("T{" * 33 + "d" + "}" * 33, E, 64, "nests deeper than 32 levels"),
    # ctypes' codes that no specification defines
    ("<z", E, 1, "unknown type code 'z'"),
    ("<Z", E, 1, "'Z' at position 1"),
]


def test_malformed_table_is_large_and_unique():
    fmts = [row[0] for row in MALFORMED]
    assert len(fmts) >= 60
    assert len(set(fmts)) == len(fmts)


@pytest.mark.parametrize("fmt,code,position,message", MALFORMED, ids=[repr(r[0][:40]) for r in MALFORMED])
def test_malformed_format(fmt, code, position, message):
    raw = fmt.encode("latin-1")
    with pytest.raises(t.FormatError) as e:
        parse(raw)
    err = e.value
    assert isinstance(err, ValueError)
    assert (err.code, err.position) == (code, position), str(err)
    assert message in str(err)
    # the message quotes the whole format (short, printable ones verbatim)
    if len(fmt) < 100 and all(" " <= ch <= "~" for ch in fmt):
        assert f"format '{fmt}'" in str(err)
    assert f"position {position}" in str(err)
    # the size-only path reports the same error
    with pytest.raises(t.FormatError) as e2:
        t.format_itemsize(raw)
    assert (e2.value.code, e2.value.position, str(e2.value)) == (code, position, str(err))
    with pytest.raises(t.FormatError):
        t.format_write(raw)


def test_embedded_nul_is_an_error():
    with pytest.raises(t.FormatError) as e:
        parse(b"i\x00d")
    assert e.value.position == 1 and "NUL" in str(e.value)


def test_long_format_message_is_truncated_around_the_error():
    fmt = "i" * 1500 + "z" + "i" * 500
    with pytest.raises(t.FormatError) as e:
        parse(fmt)
    msg = str(e.value)
    assert e.value.position == 1500
    assert "..." in msg and "iiiz" in msg and "unknown type code 'z' at position 1500" in msg
    assert len(msg) < 480


# ---------------------------------------------------------------------------
# ctypes: what it writes, and the rule pyxbuf follows for each quirk
# ---------------------------------------------------------------------------


class Point(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double), ("c", ctypes.c_char * 3)]


class BigPair(ctypes.BigEndianStructure):
    _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_short)]


class Nested(ctypes.Structure):
    _fields_ = [("s", Point), ("x", ctypes.c_byte)]


def ctypes_format(ctype):
    m = memoryview((ctype * 2)())
    return m.format, m.itemsize


# ctypes writes every field with a standard-size prefix ('<', '>'), which is
# packed. Before CPython 3.12 it wrote no 'x' for the C padding either, so the
# format's size fell short of the item; since 3.12 (gh-76961) the padding is
# explicit 'x' items and the two agree.
CTYPES_WRITES_PADDING = sys.version_info >= (3, 12)


def field_offsets(p, struct_node=1):
    """{name: offset} of the named members of one struct node (node 1: the
    outermost T{...})."""
    nodes = p["nodes"]
    return {nodes[c]["name"]: nodes[c]["offset"] for c in children(p, struct_node)
            if nodes[c]["name"] is not None}


def ctypes_offsets(ctype):
    return {name: getattr(ctype, name).offset for name, *_ in ctype._fields_}


@abi_tables
def test_ctypes_structure_padding():
    # Rule: '<' is packed (struct's meaning) and 'x' is a byte, so pyxbuf
    # lays out exactly what the format says; the view's itemsize gives the
    # stride. With ctypes' padding written out, that is ctypes' own layout;
    # without it (before 3.12) pyxbuf reads 4+8+3 = 15 for ctypes' 24.
    fmt, itemsize = ctypes_format(Point)
    assert itemsize == ctypes.sizeof(Point) == 24
    p = parse(fmt)
    if CTYPES_WRITES_PADDING:
        assert fmt == "T{<i:a:4x<d:b:(3)<c:c:5x}"
        assert p["itemsize"] == itemsize
        assert field_offsets(p) == ctypes_offsets(Point) == {"a": 0, "b": 8, "c": 16}
        assert top_offsets(parse(fmt[2:-1])) == [0, 4, 8, 16, 19]  # padding items too
    else:
        assert fmt == "T{<i:a:<d:b:(3)<c:c:}"
        assert p["itemsize"] == 15
        assert field_offsets(p) == {"a": 0, "b": 4, "c": 12}
        assert top_offsets(parse(fmt[2:-1])) == [0, 4, 12]


@abi_tables
def test_ctypes_big_endian_and_nested_structures():
    fmt, itemsize = ctypes_format(BigPair)
    p = parse(fmt)
    if CTYPES_WRITES_PADDING:
        assert (fmt, itemsize) == ("T{>i:a:>h:b:2x}", 8)
        assert p["itemsize"] == 8
    else:
        assert (fmt, itemsize) == ("T{>i:a:>h:b:}", 8)
        assert p["itemsize"] == 6
    assert field_offsets(p) == ctypes_offsets(BigPair) == {"a": 0, "b": 4}
    fmt, itemsize = ctypes_format(Nested)
    p = parse(fmt)
    if CTYPES_WRITES_PADDING:
        assert (fmt, itemsize) == ("T{T{<i:a:4x<d:b:(3)<c:c:5x}:s:<b:x:7x}", 32)
        assert p["itemsize"] == 32
        assert field_offsets(p) == ctypes_offsets(Nested) == {"s": 0, "x": 24}
        assert field_offsets(p, 2) == ctypes_offsets(Point)
    else:
        assert (fmt, itemsize) == ("T{T{<i:a:<d:b:(3)<c:c:}:s:<b:x:}", 32)
        assert p["itemsize"] == 16
        assert field_offsets(p) == {"s": 0, "x": 15}


def test_ctypes_wchar_is_ucs2_in_pep3118():
    # c_wchar is wchar_t (4 bytes on Linux) but ctypes writes '<u', which PEP
    # 3118 defines as UCS-2: pyxbuf says 2.
    fmt, itemsize = ctypes_format(ctypes.c_wchar)
    assert fmt == "<u"
    assert parse(fmt)["itemsize"] == 2
    assert itemsize == ctypes.sizeof(ctypes.c_wchar)


def test_ctypes_void_pointer_keeps_native_size():
    # struct refuses "<P"; pyxbuf gives it the native pointer size.
    fmt, itemsize = ctypes_format(ctypes.c_void_p)
    assert fmt == "<P"
    assert struct_size(fmt) is None
    assert parse(fmt)["itemsize"] == itemsize == struct.calcsize("P")


def test_ctypes_long_double_and_pointer_to_int():
    fmt, itemsize = ctypes_format(ctypes.c_longdouble)
    assert fmt == "<g" and parse(fmt)["itemsize"] == itemsize
    fmt, itemsize = ctypes_format(ctypes.POINTER(ctypes.c_int))
    assert fmt == "&<i"
    p = parse(fmt)
    assert p["itemsize"] == itemsize and p["nodes"][1]["flags"] == t.PYXBUF_FMTN_POINTER


def test_ctypes_long_is_standard_size_when_written_l():
    # Older ctypes wrote '<l' for an 8-byte C long; '<l' is 4 bytes in struct's
    # standard sizes and pyxbuf follows struct. This ctypes writes '<q'.
    fmt, itemsize = ctypes_format(ctypes.c_long)
    assert parse("<l")["itemsize"] == struct.calcsize("<l") == 4
    assert parse(fmt)["itemsize"] == (4 if fmt == "<l" else itemsize)


@pytest.mark.parametrize("ctype,code", [(ctypes.c_char_p, "z"), (ctypes.c_wchar_p, "Z")])
def test_ctypes_string_pointers_are_refused(ctype, code):
    # ctypes writes '<z' (char *) and '<Z' (wchar_t *): no specification
    # defines them, and pyxbuf reports them instead of guessing.
    fmt, _ = ctypes_format(ctype)
    assert fmt == "<" + code
    with pytest.raises(t.FormatError) as e:
        parse(fmt)
    assert e.value.position == 1


def test_ctypes_unions_and_packed_structures_export_bytes():
    class U(ctypes.Union):
        _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]

    fmt, itemsize = ctypes_format(U)
    assert fmt == "B" and itemsize == 8
    assert parse(fmt)["itemsize"] == 1  # the view's itemsize says 8


# ---------------------------------------------------------------------------
# The writer
# ---------------------------------------------------------------------------

CANONICAL = [
    ("f", "f"),
    ("  i  x ", "ix"),
    ("xxxxi", "4xi"),
    ("<i<i", "<ii"),
    ("(2)<3f", "<(2)3f"),
    ("&<i", "<&i"),
    ("T{T{B:x:xxxxxxxd:y:}:n:h:z:}", "T{T{B:x:7xd:y:}:n:h:z:}"),
    ("<T{i:a:}", "<T{<i:a:}"),
    ("T{T{=i:x:B:y:}:n:h:z:}", "T{T{=i:x:B:y:}:n:=h:z:}"),
    ("Z[ml_dtypes$bfloat16]", "Z[ml_dtypes$bfloat16]"),
    ("[a$x;b$y]", "[a$x;b$y]"),
    ("1s1x1i", "sxi"),
    ("", ""),
]


@pytest.mark.parametrize("fmt,canonical", CANONICAL)
def test_canonical_form(fmt, canonical):
    assert write(fmt) == canonical
    assert write(canonical) == canonical


# ---------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------

STRUCT_CODES = "xcbB?hHiIlLqQnNefdspP"
WS = st.sampled_from(["", "", "", " ", "\t", "\n "])


@st.composite
def struct_formats(draw):
    prefix = draw(st.sampled_from(["", "", "@", "=", "<", ">", "!"]))
    items = draw(st.lists(st.tuples(WS, st.sampled_from(["", "", "0", "1", "2", "3", "17", "100"]),
                                    st.sampled_from(STRUCT_CODES)), min_size=1 if prefix else 0, max_size=8))
    out = prefix
    for ws, count, code in items:
        if prefix in "<>!=" and prefix and code in "nNP":
            code = "q"
        out += ws + count + code
    return out + draw(WS)


@settings(max_examples=1500, deadline=None)
@given(struct_formats())
def test_random_struct_formats_match_struct_calcsize(fmt):
    expected = struct.calcsize(fmt)
    assert t.format_itemsize(fmt.encode())[0] == expected
    p = parse(fmt)
    assert p["itemsize"] == expected
    check_tree(p)
    assert struct.calcsize(write(fmt)) == expected


# Anything the struct module might be handed, mostly wrong: "[struct$F]" must
# be valid exactly when struct.calcsize(F) is, and of its size (the payload
# "can be an arbitrary string as used by struct.struct", the proposal says).
# (struct has 'F' and 'D' from 3.14, 'Zf' and 'Zd' from 3.15; pyxbuf takes
# them everywhere, so older interpreters draw none of them.)
STRUCT_SOUP = st.text(
    alphabet=STRUCT_CODES + ("FD" if struct_size("D") else "") + ("Z" if struct_size("Zd") else "") + " gwT{}():&<>!=@^0123 a",
    max_size=7,
)


@settings(max_examples=3000, deadline=None)
@given(STRUCT_SOUP)
def test_struct_payloads_are_what_struct_says(fmt):
    expected = struct_size(fmt)
    try:
        ours = parse("[struct$" + fmt + "]")["itemsize"]
    except t.FormatError:
        ours = None
    assert ours == expected


NAMES = st.text(alphabet="abcxyz_ 0123}{", min_size=1, max_size=5)
CUSTOMS = st.sampled_from(
    ["[ml_dtypes$bfloat16]", "[ml_dtypes$int4]", "[numpy$numpy.dtypes:StringDType:]", "[a$;ml_dtypes$float8_e5m2]",
     "[struct$<iq]", "[struct$ii]", "[buffer$T{i:a:(2)Zf:b:}]", "[x.y-z$p:q]", "[my pkg/x$p q]"]
)
SCALARS = st.sampled_from(list(STRUCT_CODES) + list("gOwu") + ["Zf", "Zd", "Zg"])


@st.composite
def items(draw, depth):
    out = draw(st.sampled_from(["", "", "", "@", "=", "<", ">", "!", "^"]))
    if draw(st.booleans()) and draw(st.booleans()):
        out += "(" + ",".join(str(draw(st.integers(1, 3))) for _ in range(draw(st.integers(1, 3)))) + ")"
    out += draw(st.sampled_from(["", "", "", "0", "2", "3"]))
    kind = draw(st.sampled_from(["scalar"] * 5 + ["custom"] + (["struct"] * 2 if depth < 3 else [])))
    if kind == "scalar":
        code = draw(SCALARS)
        if code != "x" and draw(st.integers(0, 9)) == 0:
            out += "&"
        out += code
    elif kind == "custom":
        out += draw(st.sampled_from(["", "", "Z"])) + draw(CUSTOMS)
    else:
        members = draw(st.lists(items(depth + 1), max_size=4))
        out += "T{" + draw(WS).join(members) + "}"
    if draw(st.booleans()):
        out += ":" + draw(NAMES) + ":"
    return out


@st.composite
def nested_formats(draw):
    return draw(WS).join(draw(st.lists(items(0), max_size=6)))


def comparable(p):
    return (p["itemsize"], p["alignment"], p["flags"], p["nodes"])


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested_formats())
def test_random_nested_formats_round_trip(fmt):
    p = parse(fmt)
    check_tree(p)
    canonical = write(fmt)
    q = parse(canonical)
    assert comparable(q) == comparable(p), (fmt, canonical)
    assert write(canonical) == canonical
    if p["itemsize"] >= 0:
        assert t.format_itemsize(fmt.encode()) == (p["itemsize"], p["alignment"])
    else:
        with pytest.raises(t.FormatError) as e:
            t.format_itemsize(fmt.encode())
        assert e.value.code == t.PYXBUF_EUNSUPPORTED


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("T{}[]()$;:<>=!@^&Z0123456789xbhidfgsw_ ,ml")), max_size=24))
def test_random_text_parses_or_reports_a_position_inside_it(fmt):
    raw = fmt.encode()
    try:
        p = parse(raw)
    except t.FormatError as err:
        assert 0 <= err.position <= len(raw)
        assert err.code in (t.PYXBUF_EFORMAT, t.PYXBUF_EOVERFLOW, t.PYXBUF_EUNSUPPORTED)
        assert f"position {err.position}" in str(err)
        with pytest.raises(t.FormatError) as e2:
            t.format_itemsize(raw)
        assert (e2.value.code, e2.value.position) == (err.code, err.position)
        return
    check_tree(p)
    assert comparable(parse(write(raw))) == comparable(p)
