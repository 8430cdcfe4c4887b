"""NumPy's user dtypes read from the array struct (issue 39, items 1 and 2).

An exact numpy.ndarray of one of ml_dtypes' types (every one the installed
ml_dtypes registers, enumerated here), or of any other NumPy user dtype whose
custom type pyxbuf's format registry knows (numpy-quaternion's, registered
with pyxbuf_dtype_register), is read from its struct like a built-in dtype
(path "numpy"), with the custom format the __array_interface__ bridge gives
it. Byte-swapped, unaligned, subclassed and field-carrying arrays keep that
bridge (path "array-interface").

The differential: every layout of every such dtype, asked every classic
request pattern and PyBUF_WRITE, once as the array (the struct route where it
applies) and once through an object that shows the bridge only the array's
`dtype` and `__array_interface__`: the answers must be equal, success or
failure and the exception type, and every field but `obj` and `path`.
"""

import gc
import sys

import ml_dtypes
import numpy as np
import pytest

import _pyxbuf_testext as t

# NumPy's export of a writable request warns for broadcast_arrays' results
# (the warn-on-write layout), as it should: expected here.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Numpy has detected that you \\(may be\\) writing:DeprecationWarning")

PyBUF_WRITE = 0x200
FLAGS = list(range(0x200)) + [PyBUF_WRITE]
FIELDS = ("buf", "len", "itemsize", "readonly", "ndim", "format", "shape", "strides",
          "suboffsets")


def ml_dtypes_types():
    """Every NumPy user dtype the installed ml_dtypes registers."""
    out = []
    for name in sorted(dir(ml_dtypes)):
        obj = getattr(ml_dtypes, name)
        if not isinstance(obj, type):
            continue
        try:
            d = np.dtype(obj)
        except TypeError:
            continue
        if d.num >= 256 and d.type is obj:
            out.append(name)
    return out


ML_DTYPES = ml_dtypes_types()


class ThroughTheBridge:
    """What the __array_interface__ bridge reads of an array, and nothing
    else: no buffer, no DLPack."""

    def __init__(self, a):
        self.array = a
        self.dtype = a.dtype

    @property
    def __array_interface__(self):
        # Read now: NumPy's export of a writable request clears a
        # warn-on-write array's flag (after its DeprecationWarning), and the
        # array's own dict then says writable too.
        return self.array.__array_interface__


class Subclass(np.ndarray):
    pass


def _base(dt, n=48):
    return np.arange(n * dt.itemsize, dtype=np.uint8).view(dt)


def layouts(dt):
    """(name, array or a function making it, whether the struct route reads it)."""
    base = _base(dt)
    c2d = base[:12].reshape(3, 4)
    ro = c2d.copy()
    ro.flags.writeable = False
    out = [
        ("c2d", c2d, True),
        ("fortran", np.asfortranarray(c2d), True),
        ("every-other-column", c2d[:, ::2], True),
        ("transposed", c2d.T, True),
        ("reversed", base[:8][::-1], True),
        ("0-d", base[:1].reshape(()), True),
        ("empty-4x0", base[:0].reshape(4, 0), True),
        ("empty-0x3", base[:0].reshape(0, 3), True),
        ("one-row", c2d[:1, :], True),
        ("one-column", c2d[:, :1], True),
        ("extent-1-dims", base[:3].reshape(1, 3, 1), True),
        ("3-d-sliced", base.reshape(2, 4, 6)[:, 1:3, ::3], True),
        ("read-only", ro, True),
        ("broadcast-to", np.broadcast_to(base[:4], (3, 4)), True),
        # NumPy's export of a writable request clears this array's flag:
        # made again for every request (_compare).
        ("broadcast-arrays (warn on write)",
         lambda: np.broadcast_arrays(base[:4], np.zeros((3, 4)))[0], True),
        ("subclass", c2d.view(Subclass), False),
    ]
    if dt.itemsize > 1:
        raw = bytearray(base[:13].view(np.uint8).tobytes())
        out.append(("unaligned", np.frombuffer(raw, dt, count=12, offset=1).reshape(3, 4),
                    False))
        out.append(("byte-swapped", c2d.view(dt.newbyteorder()), False))
    with_fields = np.dtype((dt, {"raw": ((np.uint8, (dt.itemsize,)), 0)}))
    out.append(("with-fields", c2d.view(with_fields), False))
    return out


def _answer(obj, flags):
    try:
        v = t.acquire(obj, flags)
    except Exception as e:  # the exception type is compared
        return type(e), None
    info = v.info()
    v.release()
    return None, info


def _compare(dt):
    """Every request of every layout: the struct route's answers equal the
    bridge's; the layouts it leaves alone keep today's paths (NumPy's export
    for a request without PyBUF_FORMAT, else the bridge). The number of
    successful answers compared."""
    checked = 0
    for name, a, routed in layouts(dt):
        make = a if callable(a) else None
        for flags in FLAGS:
            a = make() if make else a
            err_a, info_a = _answer(a, flags)
            where = f"{dt} {name} flags=0x{flags:x}"
            if not routed:
                assert info_a is None or info_a["path"] != "numpy", where
                continue
            err_b, info_b = _answer(ThroughTheBridge(a), flags)
            assert err_a == err_b, f"{where}: {err_a} vs the bridge's {err_b}"
            if info_a is None:
                continue
            diff = {f: (info_a[f], info_b[f]) for f in FIELDS if info_a[f] != info_b[f]}
            assert not diff, f"{where}: differs from the bridge in {diff}"
            assert info_b["path"] == "array-interface", where
            # A writable request of a warn-on-write array is NumPy's to
            # answer (it warns and clears the flag): the route declines it,
            # as for built-in dtypes.
            warned = name.endswith("(warn on write)") and flags & t.PyBUF_WRITABLE
            assert (info_a["path"] != "numpy") if warned else (info_a["path"] == "numpy"), where
            checked += 1
    return checked


def test_every_ml_dtypes_type_is_enumerated():
    # The types ml_dtypes has registered with NumPy since 0.5; a newer
    # ml_dtypes may add more (they are all tested).
    assert {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float4_e2m1fn",
            "int4", "uint4", "int2", "uint2"} <= set(ML_DTYPES)


@pytest.mark.parametrize("name", ML_DTYPES)
def test_ml_dtypes_struct_route_equals_the_bridge(name):
    dt = np.dtype(getattr(ml_dtypes, name))
    assert _compare(dt) > 2000
    v = t.acquire(_base(dt)[:4], t.PyBUF_RECORDS_RO)
    assert v.info()["format"] == f"[ml_dtypes${name}]"
    v.release()


def test_zero_size_array_asked_fortran_order_gets_fortran_strides():
    # The bridge used to answer (0, 2), C order's strides, for
    # PyBUF_F_CONTIGUOUS; NumPy's export and CPython's rules give Fortran's.
    a = np.zeros((4, 0), ml_dtypes.bfloat16)
    for obj in (a, ThroughTheBridge(a)):
        v = t.acquire(obj, t.PyBUF_F_CONTIGUOUS | t.PyBUF_FORMAT)
        assert v.info()["strides"] == (2, 8)
        v.release()


def test_the_route_leaks_no_reference():
    a = np.zeros(5, ml_dtypes.float8_e5m2)
    # The dtype is the process's: garbage of earlier tests may hold it, and
    # the collector may free that at any time, so it runs first and last.
    gc.collect()
    before = [sys.getrefcount(x) for x in (a, a.dtype)]
    for _ in range(100):
        t.acquire(a, t.PyBUF_RECORDS_RO).release()
    gc.collect()
    assert [sys.getrefcount(x) for x in (a, a.dtype)] == before


def _path(a):
    """The path that read `a`, or the exception type that refused it."""
    try:
        v = t.acquire(a, t.PyBUF_RECORDS_RO)
    except BufferError:
        return BufferError
    path = v.info()["path"]
    v.release()
    return path


def _registered_then_not(key, itemsize, alignment, a, path_registered, path_not):
    """Register `key`, read `a`, unregister it, read `a` again: each read
    takes the path given (or is refused: BufferError)."""
    t.dtype_register(key, itemsize, alignment)
    try:
        assert _path(a) == path_registered
    finally:
        t.dtype_unregister(key)
    assert _path(a) == path_not


def _records_after_cycles(change, cycles=100):
    """How many user-dtype records the NumPy route allocated during `cycles`
    calls of `change`, after two to learn whatever it learns once."""
    for _ in range(2):
        change()
    before = t.numpy_user_records()
    for _ in range(cycles):
        change()
    return t.numpy_user_records() - before


def test_registry_changes_do_not_grow_the_user_dtype_records():
    # Issue 47: every read after a registry change learnt a new record of
    # bfloat16 and kept the old one, ~48 bytes a change without bound.
    a = np.zeros(4, ml_dtypes.bfloat16)

    def unrelated():
        _registered_then_not("pyxbuf_test$unrelated", 4, 4, a, "numpy", "numpy")

    def resized():  # off the route and on again: bfloat16 registered 4 bytes wide, then not
        _registered_then_not("ml_dtypes$bfloat16", 4, 4, a, BufferError, "numpy")

    assert _records_after_cycles(unrelated) == 0
    assert _records_after_cycles(resized) == 0


quaternion = pytest.importorskip("quaternion")
QUATERNION_KEY = "quaternion$quaternion"


@pytest.fixture
def registered_quaternion():
    t.dtype_register(QUATERNION_KEY, 32, 8)
    yield
    t.dtype_unregister(QUATERNION_KEY)


def test_a_registered_user_dtype_takes_the_struct_route(registered_quaternion):
    dt = np.dtype(quaternion.quaternion)
    assert dt.num >= 256 and dt.type.__module__ == "quaternion"
    assert _compare(dt) > 2000
    a = quaternion.as_quat_array(np.arange(8.0).reshape(2, 4))
    v = t.acquire(a, t.PyBUF_RECORDS_RO)
    info = v.info()
    assert (info["path"], info["format"], info["itemsize"]) == ("numpy", "[quaternion$quaternion]",
                                                                32)
    assert v.copy_to_host() == np.arange(8.0).tobytes()
    v.release()


def test_unregistering_a_user_dtype_takes_it_off_the_route():
    a = quaternion.as_quat_array(np.arange(8.0).reshape(2, 4))
    t.dtype_register(QUATERNION_KEY, 32, 8)
    v = t.acquire(a, t.PyBUF_RECORDS_RO)
    assert v.info()["path"] == "numpy"
    v.release()
    t.dtype_unregister(QUATERNION_KEY)
    # Unknown again: refused as before the route existed (NumPy's export
    # speaks first; the bridge, seen alone, names the key to register).
    with pytest.raises(BufferError, match="cannot include dtype 'q' in a buffer"):
        t.acquire(a, t.PyBUF_RECORDS_RO)
    with pytest.raises(BufferError, match=r"register it \(pyxbuf_dtype_register with key "
                                          r"'quaternion\$quaternion' and itemsize 32\)"):
        t.acquire(ThroughTheBridge(a), t.PyBUF_RECORDS_RO)
    # Registered with a wrong size: not this route either.
    t.dtype_register(QUATERNION_KEY, 16, 8)
    try:
        with pytest.raises(BufferError, match="cannot include dtype 'q' in a buffer"):
            t.acquire(a, t.PyBUF_RECORDS_RO)
        with pytest.raises(BufferError, match="has 16-byte items in pyxbuf's registry"):
            t.acquire(ThroughTheBridge(a), t.PyBUF_RECORDS_RO)
    finally:
        t.dtype_unregister(QUATERNION_KEY)
    # And back on it once registered right.
    t.dtype_register(QUATERNION_KEY, 32, 8)
    try:
        v = t.acquire(a, t.PyBUF_RECORDS_RO)
        assert v.info()["path"] == "numpy"
        v.release()
    finally:
        t.dtype_unregister(QUATERNION_KEY)


def test_registering_a_user_dtype_again_and_again_grows_no_record():
    # A format the route keeps on the heap ("[quaternion$quaternion]"): its
    # record, string and all, is made once and reused.
    a = quaternion.as_quat_array(np.arange(8.0).reshape(2, 4))

    def cycle():
        _registered_then_not(QUATERNION_KEY, 32, 8, a, "numpy", BufferError)

    assert _records_after_cycles(cycle) == 0
