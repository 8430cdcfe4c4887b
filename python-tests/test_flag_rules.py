"""The proposal's request-flag rules, as written (issue 25, items 9-13).

extended-buffer-protocol.md, "New slot for supported flags": `PyBUF_REQUIRED_FLAGS`
holds the flags that "must not be ignored by the producer"; "some flags are soft
request/capability flags. This is currently `PyBUF_INDIRECT`"; the query answers
whether an object "advertises support for all flags"; "it is typical practice to
ignore unknown flags and this practice is useful for extension". "Extended buffer
struct": `device` "must be either `NULL` or point to a unique ... string".

Every producer here counts its calls and records what it found on entry, so a
rule that says "before the producer runs" or "zeroed" is observed, not assumed.
"""

import array

import numpy as np
import pytest

import _pyxbuf_testext as t

from dlpack_only import DLPackOnly

PyBUF_INDIRECT_BIT = t.PyBUF_INDIRECT & ~t.PyBUF_STRIDES  # 0x100
HARD = {
    "WRITABLE": t.PyBUF_WRITABLE,
    "FORMAT": t.PyBUF_FORMAT,
    "ND": t.PyBUF_ND,
    "STRIDES": t.PyBUF_STRIDES & ~t.PyBUF_ND,
    "C_CONTIGUOUS": t.PyBUF_C_CONTIGUOUS & ~t.PyBUF_STRIDES,
    "F_CONTIGUOUS": t.PyBUF_F_CONTIGUOUS & ~t.PyBUF_STRIDES,
    "ANY_CONTIGUOUS": t.PyBUF_ANY_CONTIGUOUS & ~t.PyBUF_STRIDES,
}
FUTURE_BIT = 1 << 20  # a request flag no version of pyxbuf knows


def declaring(mask, mode="recorder"):
    """A counting, recording Liar whose type declares `mask`."""
    cls = type("Declares", (t.Liar,), {"__pyxbuf_supported_flags__": mask})
    return cls(mode)


# --- item 9: FORMAT is required; INDIRECT's bit alone is soft ----------------

def test_required_flags_are_every_classic_bit_but_indirect():
    assert t.PYXBUF_REQUIRED_FLAGS == 0x00FD
    assert t.PYXBUF_REQUIRED_FLAGS == sum(HARD.values())
    assert not t.PYXBUF_REQUIRED_FLAGS & PyBUF_INDIRECT_BIT


@pytest.mark.parametrize("name", sorted(HARD))
def test_a_required_flag_the_type_lacks_is_refused_before_the_producer_runs(name):
    bit = HARD[name]
    request = {"STRIDES": t.PyBUF_STRIDES, "C_CONTIGUOUS": t.PyBUF_C_CONTIGUOUS,
               "F_CONTIGUOUS": t.PyBUF_F_CONTIGUOUS,
               "ANY_CONTIGUOUS": t.PyBUF_ANY_CONTIGUOUS}.get(name, bit)
    lacks = declaring(t.PYXBUF_CLASSIC_FLAGS & ~bit | t.PYXBUF_EXTENDED_FLAGS)
    assert not t.check_supports(lacks, request)
    with pytest.raises(BufferError, match=rf"does not support the required flag {name} of"):
        t.inspect(lacks, request)
    assert lacks.gets == 0, "the producer ran for a request it cannot honour"
    has = declaring(t.PYXBUF_CLASSIC_FLAGS | t.PYXBUF_EXTENDED_FLAGS)
    assert t.check_supports(has, request)
    t.inspect(has, request)
    assert (has.gets, has.releases) == (1, 1)
    assert has.last_flags == request


def test_simple_only_type_refuses_format_before_its_producer_runs():
    obj = declaring(-1)
    assert t.check_supports(obj, t.PyBUF_SIMPLE)
    assert not t.check_supports(obj, t.PyBUF_FORMAT)
    with pytest.raises(BufferError, match=r"required flag FORMAT of"):
        t.inspect(obj, t.PyBUF_FORMAT)
    assert obj.gets == 0
    assert t.inspect(obj, t.PyBUF_SIMPLE)["format"] is None
    assert obj.gets == 1


def test_indirect_is_soft_for_get_but_asked_of_check_supports():
    obj = declaring(t.PYXBUF_CLASSIC_FLAGS & ~PyBUF_INDIRECT_BIT | t.PYXBUF_EXTENDED_FLAGS)
    # pyxbuf_get passes the soft bit on and the producer may ignore it ...
    info = t.inspect(obj, t.PyBUF_INDIRECT)
    assert info["suboffsets"] is None and obj.gets == 1
    # ... but the type does not advertise it, and check_supports says so.
    assert not t.check_supports(obj, t.PyBUF_INDIRECT)
    assert t.check_supports(obj, t.PyBUF_STRIDES)


# --- item 10: check_supports asks about every bit ----------------------------

def test_check_supports_skips_cpu_only_producers_for_device_requests():
    # Classic producers without a device protocol: host memory only.
    for obj in (b"xyz", bytearray(b"xyz"), memoryview(b"xyz"), array.array("d", [1.0])):
        assert t.check_supports(obj, t.PyBUF_RECORDS_RO)
        assert not t.check_supports(obj, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE), type(obj)
    # A native type that does not declare PYXBUF_DEVICE.
    host_only = declaring(t.PYXBUF_CLASSIC_FLAGS | t.PYXBUF_BORROW_SHARED)
    assert not t.check_supports(host_only, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE)
    assert t.check_supports(host_only, t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)
    assert host_only.gets == 0  # asked nothing
    # Exporters declare it; DLPack speakers may hold device memory (the bridge
    # cannot tell which without calling __dlpack_device__).
    assert t.check_supports(t.exporter("f", (2,)), t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE)
    assert t.check_supports(DLPackOnly(np.arange(2.0)), t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE)


def test_check_supports_borrows_where_pyxbuf_gets_them():
    # pyxbuf's registry grants tracked borrows for producers that know none.
    a = np.arange(3.0)
    assert t.check_supports(a, t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)
    info = t.inspect(a, t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)
    assert info["ext_flags"] == t.PYXBUF_EXT_SHARED | t.PYXBUF_EXT_TRACKED
    # A native type answers borrows itself: only when it declares them.
    no_borrows = declaring(t.PYXBUF_CLASSIC_FLAGS | t.PYXBUF_DEVICE)
    assert not t.check_supports(no_borrows, t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)
    assert t.inspect(no_borrows, t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED)["ext_flags"] == 0


def test_check_supports_never_calls_the_producer():
    obj = declaring(-1)
    for flags in (0, t.PyBUF_FORMAT, t.PyBUF_FULL, t.PYXBUF_DEVICE, FUTURE_BIT):
        t.check_supports(obj, flags)
    assert obj.gets == 0


# --- item 11: unknown request bits pass through --------------------------------

@pytest.mark.parametrize("obj", [b"xyz", np.arange(3.0), memoryview(b"ab")],
                         ids=["bytes", "numpy", "memoryview"])
def test_unknown_request_bits_are_not_refused(obj):
    plain = t.inspect(obj, t.PyBUF_RECORDS_RO)
    info = t.inspect(obj, t.PyBUF_RECORDS_RO | FUTURE_BIT)
    assert info["requested"] == t.PyBUF_RECORDS_RO | FUTURE_BIT
    assert (info["flags"], info["ext_flags"]) == (0, 0)
    assert info["shape"] == plain["shape"] and info["format"] == plain["format"]
    # Nobody advertises it: a consumer asking about it hears no.
    assert not t.check_supports(obj, FUTURE_BIT)


def test_a_future_flag_reaches_a_type_that_advertises_it():
    """The backport path the proposal relies on: a producer that knows a flag
    newer than pyxbuf declares it, and receives it."""
    knows = declaring(t.PYXBUF_CLASSIC_FLAGS | t.PYXBUF_EXTENDED_FLAGS | FUTURE_BIT)
    assert t.type_supported_flags(type(knows)) & FUTURE_BIT
    assert t.check_supports(knows, t.PyBUF_RECORDS_RO | FUTURE_BIT)
    t.inspect(knows, t.PyBUF_RECORDS_RO | FUTURE_BIT)
    assert knows.last_flags == t.PyBUF_RECORDS_RO | FUTURE_BIT
    # A producer that does not advertise it is not handed it (it would ignore it).
    unaware = declaring(t.PYXBUF_CLASSIC_FLAGS | t.PYXBUF_EXTENDED_FLAGS)
    t.inspect(unaware, t.PyBUF_RECORDS_RO | FUTURE_BIT)
    assert unaware.last_flags == t.PyBUF_RECORDS_RO


def test_pyxbuf_keeps_bits_29_and_up_for_itself():
    with pytest.raises(ValueError, match="supported flags"):
        t.set_supported_flags(type("Bad", (bytearray,), {}), 1 << 29)
    with pytest.raises(ValueError, match="supported flags"):
        t.set_supported_flags(type("Bad", (bytearray,), {}), -2)


# --- item 12: PYXBUF_DEVICE honoured with a NULL device is CPU memory -----------

def test_device_bit_with_null_device_is_a_cpu_buffer():
    liar = t.Liar("null_device_with_bit")
    info = t.inspect(liar, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE)
    assert info["flags"] == t.PYXBUF_DEVICE and info["device"] is None
    assert info["is_host"] is True
    assert t.view_device(liar) == (t.PYXBUF_DL_CPU, 0)
    assert (liar.gets, liar.releases) == (2, 2)


# --- item 13: zeroed before the producer; left alone by pyxbuf's producers ----

@pytest.mark.parametrize("request_flags", [
    t.PyBUF_FULL_RO, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE,
    t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED | t.PYXBUF_TEMPORARY,
])
@pytest.mark.parametrize("declared", ["native", "classic"])
def test_extended_fields_are_zero_when_the_producer_runs(request_flags, declared):
    mask = t.PYXBUF_CLASSIC_FLAGS | t.PYXBUF_EXTENDED_FLAGS if declared == "native" else 0
    obj = declaring(mask)
    info = t.inspect(obj, request_flags, True)  # a view full of 0xAB bytes
    assert obj.gets == 1
    assert obj.entry == (0, 0, 0, 0)
    assert info["device"] is None and info["device_info"] is None
    assert info["path"] == declared


def test_liar_records_garbage_when_nobody_zeroes():
    """The recorder can see garbage: a producer called directly with a dirty
    view records it (so the zeroing test above could fail)."""
    obj = declaring(0)
    t.fill_and_getbuffer(obj, t.PyBUF_FULL_RO)
    assert obj.entry != (0, 0, 0, 0)


SENTINEL = (-0x54545455, -0x54545455, 1, 1)  # four 0xAB bytes as int32, pointers set


@pytest.mark.parametrize("request_flags", [
    t.PyBUF_SIMPLE, t.PyBUF_FULL_RO, t.PyBUF_RECORDS, t.PyBUF_CONTIG_RO,
])
@pytest.mark.parametrize("device", [None, (t.PYXBUF_DL_EXT_DEV, 0)], ids=["host", "device"])
def test_pyxbuf_exporters_leave_extended_fields_alone_without_extended_flags(
        request_flags, device):
    """pyxbuf.Exporter (pyxbuf_export_fill and borrow counting) asked with
    classic flags only must write no extended field: the consumer's struct may
    be a plain Py_buffer."""
    e = t.exporter("f", (4,), device=device) if device else t.exporter("f", (4,))
    if device is not None:
        with pytest.raises(BufferError, match="request PYXBUF_DEVICE"):
            t.fill_and_getbuffer(e, request_flags)
        return
    assert t.fill_and_getbuffer(e, request_flags) == SENTINEL
    assert e.borrows["views"] == 0


def test_pyxbuf_exporters_write_only_what_was_asked():
    """With an extended flag the exporter answers in the extended fields, and
    only those of the flags asked: DEVICE on host memory leaves device alone."""
    e = t.exporter("f", (4,))
    got = t.fill_and_getbuffer(e, t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE)
    # host memory: the exporter leaves device and device_info alone (still
    # 0xAB garbage; CPython with the extended protocol zeroed them first)
    assert got[2:] == ((0, 0) if t.pep_native() else (1, 1))

