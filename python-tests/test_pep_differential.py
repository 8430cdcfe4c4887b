"""The differential test: pyxbuf against the extended buffer protocol in CPython.

One table of cases -- producer types declaring nothing, 0, -1, classic subsets
and extended flags; requests with and without each required, soft, device and
unknown bit; producers that fill, ignore or misfill the extended fields --
and for each the answer the rules give: pyxbuf_get's result (the view's
flags, ext_flags and device, or the exception type) and what
pyxbuf_check_supports says. Every implementation present must give exactly
that answer:

- pyxbuf, on every interpreter (`make test` runs it on the stock one);
- CPython's own PyObject_GetBuffer and PyObject_CheckBufferSupports, on an
  interpreter built with cpython/'s patch series (3.15-pep; `make
  test-matrix` runs the file there, where pyxbuf is built in its native mode).

So pyxbuf on a stock interpreter, pyxbuf on the patched one and CPython on the
patched one agree case by case, or the test names the case and the
implementation. Borrow requests are pyxbuf's own (CPython passes them through
as extended flags it does not know) and are tested elsewhere
(test_borrow*.py, test_flag_rules.py).
"""

import array
import sys

import pytest

import _pyxbuf_testext as t

NATIVE = t.pep_native()
C = t.PYXBUF_CLASSIC_FLAGS  # every classic flag: what 0 stands for
D = t.PYXBUF_DEVICE
F = 1 << 15  # a future extended flag nobody defines
READ, WRITE = 0x100, 0x200  # PyMemoryView_FromMemory flags, not requests
SIMPLE, WRITABLE, FORMAT, ND = t.PyBUF_SIMPLE, t.PyBUF_WRITABLE, t.PyBUF_FORMAT, t.PyBUF_ND
STRIDES, FULL_RO, RECORDS = t.PyBUF_STRIDES, t.PyBUF_FULL_RO, t.PyBUF_RECORDS
DEV = t.PEP_DEVICE.encode()
HOST = (0, 0, None)
# CPython 3.13+ refuses PyBUF_READ or PyBUF_WRITE alone (SystemError); older
# versions pass them on, and pyxbuf answers as the interpreter it runs on.
READ_WRITE_REFUSED = sys.version_info >= (3, 13)

_types = {}


def producer(declared, mode="host"):
    """A producer of a type that declares `declared` (None: nothing)."""
    if declared not in _types:
        name = "Undeclared" if declared is None else f"Declares_{declared & 0xFFFFFFFF:x}"
        name = "_pyxbuf_testext." + name
        _types[declared] = t.pep_producer_type(name, declared)
    return _types[declared](mode)


def P(declared, mode="host"):
    return lambda: producer(declared, mode)


# (id, make the object, request, pyxbuf_get's answer, check_supports' answer)
CASES = [
    # -- a type that declares nothing: every classic flag, no extended one --
    ("undeclared-simple", P(None), SIMPLE, HOST, 1),
    ("undeclared-full", P(None), FULL_RO, HOST, 1),
    ("undeclared-writable", P(None), WRITABLE | FORMAT, HOST, 1),
    ("undeclared-device-stripped", P(None), D | FULL_RO, HOST, 0),
    ("undeclared-future-stripped", P(None), F, HOST, 0),
    ("undeclared-device-and-future", P(None), D | F | ND, HOST, 0),
    ("undeclared-0x2-is-no-flag", P(None), 0x2, HOST, 0),
    ("undeclared-indirect", P(None), t.PyBUF_INDIRECT, HOST, 1),
    ("undeclared-read-alone", P(None), READ,
     SystemError if READ_WRITE_REFUSED else HOST, 0 if READ_WRITE_REFUSED else 1),
    ("undeclared-read-with-device", P(None), READ | D,
     SystemError if READ_WRITE_REFUSED else HOST, 0),
    ("undeclared-write-with-future", P(None), WRITE | F,
     SystemError if READ_WRITE_REFUSED else HOST, 0),
    # -- 0 declared: the same --
    ("zero-full", P(0), FULL_RO, HOST, 1),
    ("zero-device", P(0), D, HOST, 0),
    # -- -1: PyBUF_SIMPLE only --
    ("simple-only-simple", P(-1), SIMPLE, HOST, 1),
    ("simple-only-format", P(-1), FORMAT, BufferError, 0),
    ("simple-only-writable", P(-1), WRITABLE, BufferError, 0),
    ("simple-only-nd-device", P(-1), ND | D, BufferError, 0),
    ("simple-only-device", P(-1), D, HOST, 0),
    ("simple-only-indirect", P(-1), t.PyBUF_INDIRECT | D, BufferError, 0),
    # -- classic subsets --
    ("nd-format-asked", P(ND | FORMAT), ND | FORMAT, HOST, 1),
    ("nd-format-strides", P(ND | FORMAT), STRIDES | FORMAT, BufferError, 0),
    ("nd-format-writable", P(ND | FORMAT), WRITABLE, BufferError, 0),
    ("nd-format-indirect-bit-is-soft", P(ND | FORMAT), 0x100 | ND, HOST, 0),
    ("nd-format-device", P(ND | FORMAT), ND | D, HOST, 0),
    ("required-only-records", P(t.PYXBUF_REQUIRED_FLAGS), RECORDS, HOST, 1),
    # -- the device flag declared --
    ("device-type-device", P(C | D, "device"), D, (D, 0, DEV), 1),
    ("device-type-device-full", P(C | D, "device"), D | FULL_RO, (D, 0, DEV), 1),
    ("device-type-without-device", P(C | D, "device"), FULL_RO, BufferError, 1),
    ("device-type-future-stripped", P(C | D, "device"), D | F, (D, 0, DEV), 0),
    ("device-type-host-answer", P(C | D), D | FULL_RO, HOST, 1),
    ("device-type-cpu-flagged", P(C | D, "cpu_flagged"), D, (D, 0, None), 1),
    ("device-type-cpu-flagged-classic", P(C | D, "cpu_flagged"), FULL_RO, HOST, 1),
    ("device-undeclared-is-stripped", P(None, "device"), D, BufferError, 0),
    ("device-id-256-bytes", P(C | D, "device_256"), D, (D, 0, b"d" * 256), 1),
    # -- a future flag declared: it reaches the producer --
    ("future-type-future", P(C | D | F), F, HOST, 1),
    ("future-type-device-future", P(C | D | F, "device"), D | F, (D, 0, DEV), 1),
    # -- misfilled answers --
    ("misfill-device-without-flag", P(C | D, "device_without_flag"), D, BufferError, 1),
    ("misfill-info-without-flag", P(C | D, "info_without_flag"), D, BufferError, 1),
    ("misfill-unrequested-flag", P(C | D, "unrequested_flag"), D, BufferError, 1),
    ("misfill-device-cpu", P(C | D, "device_cpu"), D, BufferError, 1),
    ("misfill-device-empty", P(C | D, "device_empty"), D, BufferError, 1),
    ("misfill-device-not-utf8", P(C | D, "device_bad_utf8"), D, BufferError, 1),
    ("misfill-device-257-bytes", P(C | D, "device_257"), D, BufferError, 1),
    ("misfill-device-257-bytes-utf8", P(C | D, "device_257_utf8"), D, BufferError, 1),
    ("misfill-ext-flags-for-device", P(C | D, "ext_flags"), D, BufferError, 1),
    ("ext-flags-of-a-future-flag", P(C | D | F, "ext_flags"), D | F, (0, 0x100, None), 1),
    # -- the built-ins: every classic flag, no extended one --
    ("bytes-device", lambda: b"bytes", D | FULL_RO, HOST, 0),
    ("bytes-writable", lambda: b"bytes", WRITABLE | FORMAT, BufferError, 1),
    ("bytearray-writable-device", lambda: bytearray(8), WRITABLE | D, HOST, 0),
    ("memoryview-device", lambda: memoryview(b"abcd"), D | RECORDS & ~WRITABLE, HOST, 0),
    ("array-full-device", lambda: array.array("d", [1.0]), FULL_RO | D, HOST, 0),
    # -- not a buffer --
    ("int-simple", lambda: 1, SIMPLE, TypeError, 0),
    ("str-device", lambda: "text", D, TypeError, 0),
]


def pyxbuf_impl():
    return t.pep_pyxbuf_get, t.check_supports


def cpython_impl():
    return t.pep_native_get, t.pep_native_check_supports


IMPLEMENTATIONS = [pytest.param(pyxbuf_impl, id="pyxbuf"),
                   pytest.param(cpython_impl, id="cpython",
                                marks=pytest.mark.skipif(
                                    not NATIVE, reason="a stock interpreter: no native "
                                    "protocol (make test-matrix runs 3.15-pep)"))]


def answer(get, obj, flags):
    try:
        return get(obj, flags)
    except Exception as e:  # noqa: BLE001 -- the exception type is the answer
        return type(e)


def test_the_table_is_the_issue_size():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case,make,flags,expected_get,expected_supports", CASES,
                         ids=[c[0] for c in CASES])
def test_case(impl, case, make, flags, expected_get, expected_supports):
    get, check = impl()
    obj = make()
    assert answer(get, obj, flags) == expected_get, case
    assert int(check(obj, flags)) == expected_supports, case
    # every view was released, refused ones included
    if hasattr(obj, "exports"):
        assert obj.exports == 0


@pytest.mark.skipif(not NATIVE, reason="a stock interpreter: no native protocol")
def test_implementations_agree_on_every_case():
    """The same, as one comparison: a disagreement names both answers."""
    differ = []
    for case, make, flags, _, _ in CASES:
        obj = make()
        ours = (answer(t.pep_pyxbuf_get, obj, flags), int(t.check_supports(obj, flags)))
        native = (answer(t.pep_native_get, obj, flags),
                  int(t.pep_native_check_supports(obj, flags)))
        if ours != native:
            differ.append((case, ours, native))
    assert differ == []
