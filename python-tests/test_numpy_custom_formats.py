"""NumPy arrays of pyxbuf.Exporter's custom items (issue 50, item 8).

A bfloat16 or float8 exporter (pyxbuf.exporter, pyxbuf.from_dlpack, a Rust
function's result) opens in NumPy: np.asarray(e), np.array(e, dtype=...) and
e.__array__() give a zero-copy ndarray of the custom type's NumPy dtype
("[ml_dtypes$bfloat16]" is ml_dtypes.bfloat16; "[module$name]" is
np.dtype(module.name) for a registered type; a struct$ or buffer$ alternative
is the classic format NumPy parses), shape, strides and read-only flag kept,
the exporter kept alive and its borrow rules in force while the array lives.

How NumPy gets there (numpy/_core/src/multiarray/ctors.c,
_array_from_array_like): it makes a memoryview of any buffer exporter first;
when that fails it clears the error and tries __array_struct__,
__array_interface__, then __array__; when it succeeds it parses the format
and fails on "[" ("... is not a valid PEP 3118 buffer format string"). So the
exporter refuses a request for the format of custom items that does not say
it reads them (the request bit PYXBUF_EXTENDED_FORMAT, 0x4000, which
pyxbuf_get passes to the types that declare it: c/format/format.h): a classic
consumer (memoryview, bytes(), np.frombuffer) gets a BufferError that says
what to do, pyxbuf's consumers get the format as before.

A format NumPy cannot hold is refused by __array__ with pyxbuf.ItemTypeError
(a TypeError and a BufferError) naming the format, what each alternative
gave, and what to do.
"""

import gc
import sys
import weakref

import ml_dtypes
import numpy as np
import pytest

import _pyxbuf_testext as t

# pyxbuf's built-in custom types (c/format/dtypes.c, BUILTIN_DTYPES): every
# ml_dtypes type pyxbuf exports without registration. Those the installed
# ml_dtypes lacks are skipped.
ML_DTYPES_FORMATS = [
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float6_e2m3fn",
    "float6_e3m2fn", "float4_e2m1fn", "int2", "uint2", "int4", "uint4", "bcomplex32",
    "complex32", "int1", "uint1",
]

EXTENDED_FORMAT = 0x4000  # PYXBUF_EXTENDED_FORMAT (pyxbuf.h)
SHARED = t.PyBUF_RECORDS_RO | t.PYXBUF_BORROW_SHARED
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE
NUMPY2 = np.lib.NumpyVersion(np.__version__) >= "2.0.0"

CLASSIC_REFUSAL = (
    "pyxbuf.Exporter: its format '{}' holds a custom type, which a classic buffer consumer "
    "(memoryview, bytes(), np.frombuffer) cannot read; for a NumPy array of its NumPy dtype use "
    "np.asarray(exporter) (zero-copy), for the items pyxbuf's consumers (pyxbuf.inspect, "
    "PyXBuffer<T> in Rust, pyxbuf_get in C)")
NO_DTYPE = (
    "pyxbuf.Exporter.__array__: NumPy has no dtype for the items of format '{}' ({}); read them "
    "through pyxbuf (pyxbuf.inspect, PyXBuffer<T> in Rust, pyxbuf_get in C), or let the format "
    "name a NumPy dtype of {}-byte items: '[module$name]' is np.dtype(module.name), as "
    "'[ml_dtypes$bfloat16]' is ml_dtypes.bfloat16")


def ml_dtype(name):
    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    return np.dtype(getattr(ml_dtypes, name))


def filled(fmt, shape, readonly=False):
    """A new exporter whose bytes are 1, 2, 3, ... (mod 251): the bytes
    written by the exporter's own means, not through NumPy."""
    e = t.exporter(fmt, shape, readonly=readonly)
    for i in range(e.nbytes):
        t.exporter_poke(e, i, (i + 1) % 251)
    return e


def pattern(e):
    return bytes((i + 1) % 251 for i in range(e.nbytes))


def address(a):
    return a.__array_interface__["data"][0]


def test_the_list_holds_every_ml_dtypes_type_pyxbuf_knows():
    for name in dir(ml_dtypes):
        obj = getattr(ml_dtypes, name)
        try:
            user_dtype = isinstance(obj, type) and np.dtype(obj).num >= 256
            t.format_itemsize(f"[ml_dtypes${name}]".encode())
        except (TypeError, ValueError):
            continue
        assert not user_dtype or name in ML_DTYPES_FORMATS


@pytest.mark.parametrize("name", ML_DTYPES_FORMATS)
def test_asarray_of_every_ml_dtypes_format_is_zero_copy(name):
    dt = ml_dtype(name)
    fmt = f"[ml_dtypes${name}]"
    assert t.format_itemsize(fmt.encode())[0] == dt.itemsize  # a type pyxbuf knows
    e = filled(fmt, (3, 4))
    buf = t.inspect(e, t.PyBUF_RECORDS_RO)["buf"]
    for a in (np.asarray(e), e.__array__(), np.asarray(e, dtype=dt)):
        assert a.dtype == dt and a.shape == (3, 4) and a.strides == e.strides
        assert address(a) == buf  # zero-copy
        assert a.tobytes() == pattern(e)  # bit-exact: the exporter's own bytes
        assert a.flags.writeable
    copied = np.array(e, dtype=dt)  # np.array copies by default
    assert copied.dtype == dt and address(copied) != buf
    assert copied.tobytes() == pattern(e)
    if NUMPY2:
        assert address(np.array(e, copy=False)) == buf


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "int4"])
def test_a_write_through_the_array_is_seen_through_the_exporter(name):
    dt = ml_dtype(name)
    e = t.exporter(f"[ml_dtypes${name}]", (2, 3))
    a = np.asarray(e)
    a[1, 2] = dt.type(1)
    expected = np.zeros((2, 3), dt)
    expected[1, 2] = dt.type(1)
    assert t.copy_to_host(e) == expected.tobytes() != bytes(e.nbytes)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2"])
def test_a_read_only_exporter_gives_a_read_only_array(name):
    dt = ml_dtype(name)
    e = filled(f"[ml_dtypes${name}]", (4,), readonly=True)
    a = np.asarray(e)
    assert a.dtype == dt and not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0] = dt.type(0)
    assert a.tobytes() == pattern(e)


def test_borrow_rules_hold_for_the_array():
    e = t.exporter("[ml_dtypes$bfloat16]", (3,))
    # A live exclusive borrow refuses the array (not a 0-d object array).
    x = t.acquire(e, EXCLUSIVE)
    with pytest.raises(BufferError, match="an exclusive borrow is live"):
        np.asarray(e)
    x.release()
    # A live shared borrow: a read-only array, as any new view then is.
    s = t.acquire(e, SHARED)
    assert not np.asarray(e).flags.writeable
    s.release()
    # The array is a live view of the exporter: a borrow taken meanwhile is
    # tracked, as with any view the exporter does not control.
    a = np.asarray(e)
    assert e.borrows["views"] == 1
    v = t.acquire(e, SHARED)
    assert v.info()["ext_flags"] == t.PYXBUF_EXT_TRACKED | t.PYXBUF_EXT_SHARED
    v.release()
    del a
    gc.collect()
    assert e.borrows["views"] == 0


def test_the_array_keeps_the_exporter_alive():
    e = filled("[ml_dtypes$bfloat16]", (2, 2))
    expected = pattern(e)
    a = np.asarray(e)
    b = a[1:]  # a view of the view
    ref = weakref.ref(e)
    del e
    gc.collect()
    assert ref() is not None and ref().borrows["views"] == 1
    assert a.tobytes() == expected
    del a
    gc.collect()
    assert ref() is not None  # b still holds it
    assert b.tobytes() == expected[4:]
    del b
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3, 4)])
def test_shapes_are_kept(shape):
    e = filled("[ml_dtypes$bfloat16]", shape)
    a = np.asarray(e)
    assert a.shape == shape and a.strides == e.strides and a.tobytes() == pattern(e)


@pytest.mark.skipif(not NUMPY2, reason="__array__(copy=...) is NumPy 2's")
def test_dtype_and_copy_keep_numpy_2s_meaning():
    e = filled("[ml_dtypes$bfloat16]", (3,))
    buf = t.inspect(e, t.PyBUF_RECORDS_RO)["buf"]
    src = np.frombuffer(pattern(e), ml_dtypes.bfloat16)
    assert address(e.__array__(copy=False)) == buf
    c = e.__array__(copy=True)
    assert address(c) != buf and c.tobytes() == pattern(e)
    f = e.__array__(np.float32)
    assert f.dtype == np.float32 and f.tolist() == src.astype(np.float32).tolist()
    with pytest.raises(ValueError):
        e.__array__(np.float32, copy=False)
    assert address(np.asarray(e, dtype=ml_dtypes.bfloat16, copy=False)) == buf


def test_the_byte_order_prefix_is_kept():
    other = ">" if sys.byteorder == "little" else "<"
    e = filled(other + "[ml_dtypes$bfloat16]", (3,))
    a = np.asarray(e)
    assert a.dtype == np.dtype(ml_dtypes.bfloat16).newbyteorder(other) and not a.dtype.isnative
    assert a.tobytes() == pattern(e)
    native = np.frombuffer(pattern(e), np.dtype(ml_dtypes.bfloat16).newbyteorder(other))
    assert a.astype(np.float32).tolist() == native.astype(np.float32).tolist()
    # One-byte items have no byte order.
    assert np.asarray(t.exporter(other + "[ml_dtypes$float8_e5m2]", (2,))).dtype.isnative


def test_alternatives_first_understood_wins():
    # The first alternative NumPy has a dtype for.
    assert np.asarray(t.exporter("[ml_dtypes$bfloat16;struct$H]", (2,))).dtype == \
        ml_dtypes.bfloat16
    # A module that is not imported (and a type pyxbuf's registry does not
    # know, so pyxbuf does not import it): the next alternative.
    assert "pyxbuf_no_such_module" not in sys.modules
    a = np.asarray(t.exporter("[pyxbuf_no_such_module$x;struct$i]", (2,)))
    assert a.dtype == np.int32
    # The proposal's own example: a struct of two doubles named X and Y.
    e = t.exporter("[mymod$coords2d;buffer$T{d:X:d:Y:}]", (3,))
    a = np.asarray(e)
    assert a.dtype == np.dtype([("X", "<f8"), ("Y", "<f8")]) and a.shape == (3,)
    assert address(a) == t.inspect(e, t.PyBUF_RECORDS_RO)["buf"]


# --- a registered type with a NumPy dtype (numpy-quaternion) -----------------

@pytest.fixture
def registered():
    keys = []

    def register(key, itemsize, alignment):
        t.dtype_register(key, itemsize, alignment)
        keys.append(key)

    yield register
    for key in keys:
        t.dtype_unregister(key)


def test_a_registered_type_gets_its_numpy_dtype(registered):
    quaternion = pytest.importorskip("quaternion")
    registered("quaternion$quaternion", 32, 8)
    e = filled("[quaternion$quaternion]", (2, 2))
    a = np.asarray(e)
    assert a.dtype == np.dtype(quaternion.quaternion) and a.shape == (2, 2)
    assert address(a) == t.inspect(e, t.PyBUF_RECORDS_RO)["buf"]
    assert a.tobytes() == pattern(e)
    a[0, 0] = quaternion.quaternion(1, 2, 3, 4)
    assert t.copy_to_host(e)[:32] == np.array([1.0, 2, 3, 4]).tobytes()


# --- formats NumPy cannot hold: refused with what to do ----------------------

def refused(e):
    with pytest.raises(TypeError) as info:
        np.asarray(e)
    assert isinstance(info.value, BufferError)  # pyxbuf.ItemTypeError
    assert type(info.value).__name__ == "ItemTypeError"
    with pytest.raises(TypeError) as again:
        e.__array__()
    assert str(again.value) == str(info.value)
    return str(info.value)


def test_a_registered_type_without_a_module_is_refused(registered):
    registered("pyxbuf_no_such_module$thing", 4, 4)
    fmt = "[pyxbuf_no_such_module$thing]"
    assert refused(t.exporter(fmt, (2,))) == NO_DTYPE.format(
        fmt, "'pyxbuf_no_such_module$thing': import raised ModuleNotFoundError: No module named "
             "'pyxbuf_no_such_module'", 4)


def test_a_dtype_of_another_size_is_refused(registered):
    registered("numpy$float64", 4, 4)
    fmt = "[numpy$float64]"
    assert refused(t.exporter(fmt, (2,))) == NO_DTYPE.format(
        fmt, "'numpy$float64': dtype('float64') has 8-byte items, the exporter's are 4 bytes", 4)


def test_a_dtype_of_python_objects_is_refused(registered):
    # np.dtype(object) would read the exporter's bytes as PyObject pointers.
    registered("builtins$object", 8, 8)
    fmt = "[builtins$object]"
    assert refused(t.exporter(fmt, (2,))) == NO_DTYPE.format(
        fmt, "'builtins$object': dtype('O') holds Python object references, which an "
             "exporter's raw memory cannot", 8)


def test_items_that_are_not_one_custom_type_are_refused():
    fmt = "Z[ml_dtypes$bfloat16]"
    assert refused(t.exporter(fmt, (2,))) == NO_DTYPE.format(
        fmt, "an item that is not one custom type (a struct, count, sub-array, complex or "
             "pointer of one) has no NumPy dtype pyxbuf builds", 4)
    fmt = "T{[ml_dtypes$bfloat16]:a:i:b:}"
    assert "an item that is not one custom type" in refused(t.exporter(fmt, (2,)))


def test_every_alternative_is_named_when_none_gives_a_dtype(registered):
    # The first alternative sizes the items (2 bytes); the second is 8: NumPy
    # checks its parse against the item's size.
    registered("pyxbuf_no_such_module$thing", 2, 2)
    fmt = "[pyxbuf_no_such_module$thing;struct$Q]"
    message = refused(t.exporter(fmt, (2,)))
    head, tail = NO_DTYPE.format(
        fmt, "'pyxbuf_no_such_module$thing': import raised ModuleNotFoundError: No module named "
             "'pyxbuf_no_such_module'; 'struct$Q': NumPy's parser raised RuntimeError: |", 2
    ).split("|")
    assert message.startswith(head) and message.endswith(tail)
    assert "Item size 2" in message[len(head):-len(tail)]  # NumPy's own words


# --- classic consumers, pyxbuf's consumers -----------------------------------

def test_classic_requests_for_the_format_are_refused_with_what_to_do():
    fmt = "[ml_dtypes$bfloat16]"
    e = t.exporter(fmt, (2,))
    for classic in (memoryview, bytes, lambda e: np.frombuffer(e, ml_dtypes.bfloat16),
                    lambda e: t.classic(e, t.PyBUF_RECORDS_RO)):
        with pytest.raises(BufferError) as info:
            classic(e)
        assert str(info.value) == CLASSIC_REFUSAL.format(fmt)
    assert e.borrows["views"] == 0
    # A request without the format is no reader of it: answered as always.
    assert t.classic(e, t.PyBUF_STRIDES)["format"] is None
    # One that says it reads custom types gets the format.
    assert t.classic(e, t.PyBUF_RECORDS_RO | EXTENDED_FORMAT)["format"] == fmt
    assert t.type_supported_flags(type(e)) & EXTENDED_FORMAT
    # Plain formats: memoryview as before.
    assert memoryview(t.exporter("f", (2,))).format == "f"


def test_device_memory_is_refused_for_its_device_first():
    e = t.exporter("[ml_dtypes$bfloat16]", (2,), device=(t.PYXBUF_DL_EXT_DEV, 0))
    for consumer in (memoryview, np.asarray):
        with pytest.raises(BufferError, match=r"on device 'ext_dev:0', which the host cannot read"):
            consumer(e)
    host = e.to_device("cpu")  # a host copy: NumPy reads it
    assert np.asarray(host).dtype == ml_dtypes.bfloat16


def test_pyxbuf_consumers_read_the_format():
    e = filled("[ml_dtypes$bfloat16]", (2, 3))
    info = t.inspect(e, t.PyBUF_RECORDS_RO)
    assert (info["format"], info["itemsize"], info["path"]) == ("[ml_dtypes$bfloat16]", 2,
                                                                 "native")
    assert t.copy_to_host(e) == pattern(e)


def test_the_pyxbuf_module():
    pyxbuf = pytest.importorskip("pyxbuf")
    e = pyxbuf.exporter([2], "[ml_dtypes$bfloat16]")
    assert np.asarray(e).dtype == ml_dtypes.bfloat16
    assert pyxbuf.inspect(e)["format"] == "[ml_dtypes$bfloat16]"
    with pytest.raises(BufferError, match="holds a custom type"):
        memoryview(e)


@pytest.mark.parametrize("layout", ["C", "F", "strided", "reversed"])
def test_strides_of_a_wrapped_array_are_kept(layout):
    pyxbuf = pytest.importorskip("pyxbuf")
    base = np.arange(24, dtype=np.float32).reshape(4, 6).astype(ml_dtypes.bfloat16)
    x = {"C": base, "F": np.asfortranarray(base), "strided": base[::2, 1::2],
         "reversed": base[::-1, ::-3]}[layout]
    e = pyxbuf.from_dlpack(x)  # a zero-copy Exporter of NumPy's memory
    assert e.strides == x.strides and e.format == "[ml_dtypes$bfloat16]"
    a = np.asarray(e)
    assert a.dtype == x.dtype and a.shape == x.shape and a.strides == x.strides
    assert address(a) == address(x) and np.array_equal(a, x)
    assert not a.flags.writeable  # from_dlpack's exporter is read-only


def test_a_writable_wrapper_writes_the_wrapped_array():
    pyxbuf = pytest.importorskip("pyxbuf")
    x = np.zeros((3, 4), ml_dtypes.float8_e4m3fn)
    e = pyxbuf.from_dlpack(x[:, ::2], writable=True)
    a = np.asarray(e)
    assert a.flags.writeable and a.strides == (4, 2)
    a[2, 1] = 1.5
    assert x[2, 2] == 1.5


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_an_array_returned_from_rust(name):
    pyxbuf_sum = pytest.importorskip("pyxbuf_sum")
    dt = ml_dtype(name)
    x = np.array([[0.5, -2.0, 3.0], [1.0, 0.25, -0.5]], dtype=dt)
    out = pyxbuf_sum.copy_ml(x, name)  # a pyxbuf.Exporter made in Rust
    a = np.asarray(out)
    assert type(out).__name__ == "Exporter" and a.dtype == dt
    assert a.tobytes() == x.tobytes() and a.shape == x.shape
    assert address(a) == address(np.asarray(out))
