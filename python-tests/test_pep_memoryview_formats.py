"""memoryview's custom types (cpython/0005) against pyxbuf's format parser.

The custom-dtype proposal's one CPython piece: memoryview reads
"[struct$F]" and "[buffer$F]" (the reserved ids) and refuses other custom
types by name. On an interpreter built with cpython/'s series (3.15-pep;
`make test-matrix` runs this file there) every format of test_formats.py's
VALID and MALFORMED tables, as it is and wrapped in each reserved id, is
read by both, and their verdicts must agree:

1. pyxbuf refuses the format => memoryview never reads its items. It raises
   ValueError naming the same position, except where the fault is inside a
   buffer$ payload, which memoryview reads only as far as the struct module
   can (then it reads it as it reads that classic format: not at all).
2. memoryview raises ValueError => pyxbuf refuses the format (zero-byte
   items aside: no buffer can hold them).
3. pyxbuf reads the format and it has a struct$ or buffer$ alternative =>
   memoryview reads the first of them exactly as it reads a view whose
   format is that payload, of pyxbuf's itemsize whenever the struct module
   can size the payload.
4. pyxbuf reads it, and no alternative is struct$ or buffer$ =>
   memoryview raises NotImplementedError naming the first id.

On other interpreters the file is skipped: stock memoryview knows no custom
types, and _testcapi.FormatBuffer (the exporter of any format) comes with
the series.
"""

import re
import struct

import pytest

import _pyxbuf_testext as t
import test_formats as tf

try:
    from _testcapi import FormatBuffer
except ImportError:
    FormatBuffer = None


def memoryview_reads_custom_types():
    try:
        return memoryview(b"\0\0").cast("[struct$h]").tolist() == [0]
    except ValueError:
        return False


pytestmark = pytest.mark.skipif(
    FormatBuffer is None or not memoryview_reads_custom_types(),
    reason="needs an interpreter built with cpython/0005 (memoryview reads [struct$...])",
)

N = 3  # items per view


def raw(fmt):
    return fmt.encode("latin-1") if isinstance(fmt, str) else fmt


def wrappings(fmt):
    """The formats made of one table row."""
    f = raw(fmt)
    out = [b"[struct$" + f + b"]", b"[buffer$" + f + b"]", b"[mymod$x;struct$" + f + b"]",
           b"[mymod$x;buffer$" + f + b"]", b">[struct$" + f + b"]"]
    if b"[" in f:
        out.insert(0, f)
    return out


FORMATS = sorted({w for row in tf.VALID + tf.MALFORMED for w in wrappings(row[0])})


def pyxbuf_verdict(fmt):
    """('ok', itemsize) or ('error', position)."""
    try:
        return "ok", t.format_parse(fmt)["itemsize"]
    except t.FormatError as e:
        return "error", e.position


def custom_parts(fmt):
    """For a well-formed format whose whole item is one custom type: its
    alternatives as (id, payload, payload's position); else None."""
    start = 1 if fmt[:1] in (b"@", b"=", b"<", b">", b"!", b"^") else 0
    if fmt[start:start + 1] != b"[" or not fmt.endswith(b"]") or fmt.count(b"]") != 1:
        return None
    parts, pos = [], start + 1
    for alt in fmt[start + 1:-1].split(b";"):
        ident, _, payload = alt.partition(b"$")
        parts.append((ident, payload, pos + len(ident) + 1))
        pos += len(alt) + 1
    return parts


def reserved_spans(fmt):
    """(id, start, end) of every struct$/buffer$ payload, by the syntax alone."""
    spans, i = [], 0
    while True:
        i = min((j for j in (fmt.find(b"struct$", i), fmt.find(b"buffer$", i)) if j >= 0), default=-1)
        if i < 0:
            return spans
        start = i + 7
        end = start
        while end < len(fmt) and fmt[end:end + 1] not in (b";", b"]"):
            end += 1
        spans.append((fmt[i:i + 6], start, end))
        i = start


def attempt(op):
    """op()'s result, or the exception it raised."""
    try:
        return op()
    except (ValueError, NotImplementedError, TypeError) as e:
        return e


def memoryview_verdict(fmt, itemsize):
    """What memoryview does with a view of fmt: compare it, list it, cast to it."""
    data = bytes(N * itemsize)
    m = memoryview(FormatBuffer(data, fmt, itemsize))
    other = memoryview(FormatBuffer(data, fmt, itemsize))
    return {
        "eq": attempt(lambda: m == other),
        "tolist": attempt(m.tolist),
        "cast": attempt(lambda: memoryview(data).cast(fmt.decode("latin-1"))),
    }


def classic_verdict(payload, itemsize):
    """The same for a view whose format is the payload itself."""
    return memoryview_verdict(payload, itemsize) if payload else None


def raised(v, kind=Exception):
    return isinstance(v, kind)


def calls_malformed(v):
    """memoryview says the format is malformed (not merely one it does not
    read, such as a cast's destination that is no native format)."""
    return isinstance(v, ValueError) and "invalid format" in str(v)


@pytest.mark.parametrize("fmt", FORMATS, ids=[repr(f)[2:-1][:50] for f in FORMATS])
def test_memoryview_agrees_with_pyxbuf(fmt):
    verdict, detail = pyxbuf_verdict(fmt)
    parts = custom_parts(fmt)
    itemsize = detail if verdict == "ok" and detail > 0 else 8
    mv = memoryview_verdict(fmt, itemsize)
    malformed = [k for k, v in mv.items() if calls_malformed(v)]

    if verdict == "error":
        position = detail
        # 1. never read
        assert not (mv["eq"] is True), "memoryview compared a format pyxbuf refuses"
        assert raised(mv["tolist"]) and raised(mv["cast"])
        in_buffer_payload = any(
            ident == b"buffer" and start <= position < end for ident, start, end in reserved_spans(fmt)
        ) and b"[" not in fmt[position:position + 1]
        struct_starts = {start for ident, start, _ in reserved_spans(fmt) if ident == b"struct"}
        # one custom type and nothing after it (else memoryview reads none)
        body = fmt[1:] if fmt[:1] in b"@=<>!^" else fmt
        whole_item = body[:1] == b"[" and body.find(b"]") in (-1, len(body) - 1)
        if whole_item and not in_buffer_payload:
            assert calls_malformed(mv["eq"]), (mv, position)
        for k in malformed:
            msg = str(mv[k])
            named = {int(p) for p in re.findall(r"position (\d+)", msg)}
            assert named & ({position} | struct_starts), (k, msg, position)
        return

    # 2. memoryview calls nothing malformed that pyxbuf reads, and finds its
    # itemsize wrong only for 0-byte items
    assert not malformed, mv
    for k, v in mv.items():
        if isinstance(v, ValueError) and "describes" in str(v):
            assert detail == 0 and "describes 0-byte items" in str(v), (k, v)
    if parts is None:
        return  # not one custom type: memoryview reads it as it always did
    reserved = [(ident, payload) for ident, payload, _ in parts if ident in (b"struct", b"buffer")]
    if not reserved:
        # 4. refused by name
        first = parts[0][0].decode()
        for k in ("eq", "tolist"):
            assert raised(mv[k], NotImplementedError) and f"custom type '{first}'" in str(mv[k]), mv[k]
        return
    # 3. read as the first struct$/buffer$ payload, of pyxbuf's size
    ident, payload = reserved[0]
    size = tf.struct_size(payload.decode("latin-1"))
    if size is not None and detail >= 0:
        assert size == detail, f"struct sizes {payload!r} as {size}, pyxbuf {fmt!r} as {detail}"
    if detail == 0:
        return
    classic = classic_verdict(payload, itemsize)
    if size is not None:
        assert mv["eq"] is True, mv["eq"]
    else:
        assert mv["eq"] == classic["eq"] and not raised(mv["eq"], ValueError)
    if isinstance(classic["tolist"], list):
        assert mv["tolist"] == classic["tolist"]
    else:
        assert type(mv["tolist"]) is NotImplementedError


def test_table_is_large():
    # every row of both tables, in five wrappings or more
    assert len(FORMATS) >= 5 * (len(tf.VALID) + len(tf.MALFORMED)) - 10


def test_alternatives_pyxbuf_and_memoryview_know_differently():
    # pyxbuf reads bfloat16 (ml_dtypes is built in), memoryview the struct$
    # spelling of the same two bytes: the sizes agree
    fmt = b"[ml_dtypes$bfloat16;struct$H]"
    assert t.format_parse(fmt)["itemsize"] == 2
    m = memoryview(FormatBuffer(bytes(6), fmt, 2))
    assert m.tolist() == [0, 0, 0]


def test_cast_targets_pyxbuf_reads():
    # every custom type memoryview can cast to, pyxbuf sizes the same
    for code in "bBhHiIlLqQnNfde?P":
        for fmt in (f"[struct${code}]", f"[buffer$@{code}]", f"<[mymod$x;struct${code}]"):
            m = memoryview(bytes(64)).cast(fmt)
            assert m.format == fmt
            assert t.format_parse(fmt.encode())["itemsize"] == m.itemsize == struct.calcsize(code)
