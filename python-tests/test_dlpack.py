"""The DLPack bridge: import through pyxbuf_get, export through pyxbuf.Exporter.

Real producers and consumers (NumPy 2.x, JAX on CPU) wherever they can show a
rule; the test extension's DLPackProducer where only C can write the case
(malformed tensors, counted deleters, the DLPack 1.3 C exchange table).

NumPy arrays and JAX float32 arrays have a classic buffer, which pyxbuf takes
first (the fast path): to reach their DLPack export, wrap them in DL, an object
that has nothing but __dlpack__ and __dlpack_device__.
"""

import ctypes
import gc
import sys

import ml_dtypes
import numpy as np
import pytest

import _pyxbuf_testext as t
from numpy_route import NUMPY_DLPACK_1, needs_numpy_dlpack_1

jax = pytest.importorskip("jax")
jnp = jax.numpy

RO = t.PyBUF_RECORDS_RO
RW = t.PyBUF_RECORDS
DEVICE_VIEW = t.PyBUF_RECORDS_RO | t.PYXBUF_DEVICE
EXT = t.PYXBUF_DL_EXT_DEV
POISON = 0xDB

# DLPack dtype codes (dlpack.h 1.3).
kDLInt, kDLUInt, kDLFloat, kDLOpaqueHandle, kDLBfloat, kDLComplex, kDLBool = range(7)
FLOAT8 = {
    "float8_e3m4": 7,
    "float8_e4m3": 8,
    "float8_e4m3b11fnuz": 9,
    "float8_e4m3fn": 10,
    "float8_e4m3fnuz": 11,
    "float8_e5m2": 12,
    "float8_e5m2fnuz": 13,
    "float8_e8m0fnu": 14,
}
SUBBYTE_FLOATS = {"float6_e2m3fn": (15, 6), "float6_e3m2fn": (16, 6), "float4_e2m1fn": (17, 4)}


class DL:
    """Only the DLPack methods of `array` (which pyxbuf would otherwise read
    through its classic buffer). Records the keywords of each call."""

    def __init__(self, array):
        self.array = array
        self.calls = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def pointer(a):
    return a.__array_interface__["data"][0]


def items(obj, flags=RO):
    """The items of obj's pyxbuf view in C order (a copy made by pyxbuf)."""
    return t.host_only(obj, "contiguous")


@pytest.fixture(autouse=True)
def no_leaked_device_memory():
    gc.collect()  # what earlier tests left to the collector (free-threaded builds run it later)
    before = t.emulated_live_allocations()
    yield
    gc.collect()
    assert t.emulated_live_allocations() == before


# --------------------------------------------------------------------------
# Import: NumPy
# --------------------------------------------------------------------------

NUMPY_DTYPES = {
    "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float16": "e", "float32": "f", "float64": "d",
    "complex64": "Zf", "complex128": "Zd", "bool": "?",
}  # fmt: skip


def numpy_sample(dtype, shape=(3, 4)):
    n = int(np.prod(shape))
    if dtype == "bool":
        return (np.arange(n) % 3 == 0).reshape(shape)
    a = (np.arange(n) * 7 - 5).astype(dtype)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * np.arange(n).astype(dtype)
    return a.reshape(shape)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_every_dlpack_dtype(dtype):
    a = numpy_sample(dtype)
    info = t.dlpack_info(DL(a))
    assert info["path"] == "dlpack"
    assert info["format"] == NUMPY_DTYPES[dtype]
    assert info["itemsize"] == a.itemsize
    assert info["shape"] == a.shape and info["strides"] == a.strides
    assert info["buf"] == pointer(a), "zero-copy: the array's own memory"
    if NUMPY_DLPACK_1:  # NumPy 1 exports legacy (unversioned) capsules only
        assert info["versioned"] is True and info["version"][0] == 1
    else:
        assert info["versioned"] is False
    assert info["readonly"] is False and info["is_copied"] is False
    data = items(DL(a))
    assert data == a.tobytes()
    assert np.frombuffer(data, dtype).reshape(a.shape).tolist() == a.tolist()


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(24, dtype=np.int32).reshape(4, 6)[::2, 1::2],
        lambda: np.arange(24, dtype=np.float64).reshape(4, 6).T,
        lambda: np.arange(10, dtype=np.int16)[::-3],
        lambda: np.array(2.5, dtype=np.float32),
        lambda: np.zeros((0, 5), dtype=np.uint8),
        lambda: np.arange(2 ** 10, dtype=np.uint8).reshape((2,) * 10),
    ],
    ids=["sliced", "transposed", "negative-stride", "0-d", "empty", "10-d"],
)
def test_numpy_layouts(make):
    a = make()
    info = t.dlpack_info(DL(a))
    if a.ndim:
        assert info["shape"] == a.shape
        # An empty array's strides say nothing (NumPy 1 gives (0, 0) for its
        # own and DLPack's (5, 1) for the same (0, 5) array).
        assert info["strides"] == a.strides or a.size == 0
    else:  # no shape and no strides at ndim 0, as CPython's producers answer
        assert info["shape"] is None and info["strides"] is None
    if a.size:
        assert info["buf"] == pointer(a)
    assert items(DL(a)) == a.tobytes()


@needs_numpy_dlpack_1
def test_numpy_writable_request_passes_copy_false():
    a = np.arange(6, dtype=np.int64)
    w = DL(a)
    info = t.dlpack_info(w, RW)
    assert info["readonly"] is False
    assert w.calls[-1] == {"max_version": (1, 3), "copy": False}
    t.dlpack_info(w, RO)
    assert w.calls[-1] == {"max_version": (1, 3)}


@needs_numpy_dlpack_1
def test_numpy_readonly_is_honoured():
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    info = t.dlpack_info(DL(a))
    assert info["readonly"] is True
    assert info["dl_flags"] & t.DLPACK_FLAG_READ_ONLY
    with pytest.raises(BufferError, match="DLPack buffer of 'DL'.*read-only.*WRITABLE"):
        t.dlpack_info(DL(a), RW)


def test_numpy_contiguity_requests():
    a = np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2]
    with pytest.raises(BufferError, match="not C-contiguous"):
        t.dlpack_info(DL(a), t.PyBUF_C_CONTIGUOUS | t.PyBUF_FORMAT)
    b = np.arange(6, dtype=np.int32)
    info = t.dlpack_info(DL(b), t.PyBUF_SIMPLE)
    assert info["format"] is None and info["shape"] is None and info["len"] == 24


def test_numpy_float128_is_refused_by_numpy_itself():
    a = np.zeros(3, dtype=np.longdouble)
    with pytest.raises(BufferError, match="DLPack"):
        t.dlpack_info(DL(a))


def test_numpy_refcounts_unchanged_after_10000_cycles():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    w = DL(a)
    w.__dlpack__ = a.__dlpack__  # no recording: nothing kept per call
    before = sys.getrefcount(a), sys.getrefcount(w)
    t.cycle(w, RO, 10_000)
    gc.collect()
    assert (sys.getrefcount(a), sys.getrefcount(w)) == before


# --------------------------------------------------------------------------
# Import: JAX (CPU)
# --------------------------------------------------------------------------


def jax_pointer(x):
    return x.unsafe_buffer_pointer()


def test_jax_float32_takes_the_classic_fast_path():
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    info = t.inspect(x, RO)
    assert info["path"] == "classic"
    assert info["readonly"] == 1, "JAX arrays are immutable; their classic buffer says so"
    assert info["buf"] == jax_pointer(x)


def test_jax_bfloat16_through_dlpack():
    x = jnp.arange(12, dtype=jnp.bfloat16).reshape(3, 4) / 4
    with pytest.raises(BufferError):
        memoryview(x)  # JAX's classic buffer refuses bf16: the DLPack bridge runs
    info = t.dlpack_info(x)
    assert info["path"] == "dlpack"
    assert info["format"] == "[ml_dtypes$bfloat16]"
    assert info["itemsize"] == 2
    assert info["shape"] == (3, 4) and info["strides"] == (8, 2)
    assert info["buf"] == jax_pointer(x)
    # JAX 0.10 answers max_version=(1, 3) with a legacy capsule, which has no
    # read-only bit: DLPack before 1.0 meant "writable" (NumPy agrees). JAX
    # 0.12 answers with a versioned one flagged read-only, which pyxbuf keeps.
    capsule = t.capsule_info(x.__dlpack__(max_version=(1, 3)))
    if capsule["name"] == "dltensor_versioned":
        assert capsule["flags"] & t.DLPACK_FLAG_READ_ONLY
        assert info["versioned"] is True and info["readonly"] is True
    else:
        assert info["versioned"] is False and info["readonly"] is False
    host = np.asarray(x)
    data = items(x)
    assert data == host.tobytes()
    assert np.frombuffer(data, ml_dtypes.bfloat16).reshape(3, 4).tolist() == host.tolist()


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                  "float8_e5m2fnuz", "float8_e4m3b11fnuz"])
def test_jax_float8_through_dlpack(name):
    x = jnp.linspace(-2, 2, 8).astype(getattr(jnp, name))
    info = t.dlpack_info(x)
    assert info["path"] == "dlpack"
    assert info["format"] == f"[ml_dtypes${name}]"
    assert info["buf"] == jax_pointer(x)
    host = np.asarray(x)
    assert items(x) == host.tobytes()
    assert t.capsule_info(x.__dlpack__())["dtype"] == (FLOAT8[name], 8, 1)


def test_jax_refcount_unchanged_after_10000_cycles():
    x = jnp.arange(16, dtype=jnp.bfloat16)
    before = sys.getrefcount(x)
    t.cycle(x, RO, 10_000)
    gc.collect()
    assert sys.getrefcount(x) == before


# --------------------------------------------------------------------------
# Import: producers only C can write (deleters counted)
# --------------------------------------------------------------------------


def producer(**kw):
    base = kw.pop("base", None)
    if base is None:
        base = np.arange(12, dtype=np.int32).reshape(3, 4)
    return t.DLPackProducer(base, **kw), base


def test_deleter_runs_once_when_the_view_is_released():
    p, a = producer()
    v = t.acquire(p, RO)
    assert (p.exported, p.deleted) == (1, 0), "the view owns the tensor while held"
    assert v.info()["path"] == "dlpack" and v.info()["buf"] == pointer(a)
    v.release()
    assert (p.exported, p.deleted) == (1, 1)
    v.release()
    assert p.deleted == 1


def test_producer_sees_the_modern_keywords():
    # stream=None is the keyword's default: host calls leave it out.
    p, _ = producer()
    t.dlpack_info(p)
    assert p.last_kwargs == {"max_version": (1, 3)}
    info = t.dlpack_info(p)
    assert info["versioned"] is True and info["version"] == (1, 3)


def test_minor_version_is_not_checked():
    p, a = producer(minor=99)
    info = t.dlpack_info(p)
    assert info["version"] == (1, 99) and info["buf"] == pointer(a)
    assert p.deleted == 1


def test_legacy_producer_gets_a_second_call_without_keywords():
    p, a = producer(legacy_only=True)
    info = t.dlpack_info(p)
    assert info["path"] == "dlpack" and info["versioned"] is False
    assert info["buf"] == pointer(a)
    assert p.dlpack_calls == 2 and p.last_kwargs == {}
    assert (p.exported, p.deleted) == (1, 1)


def test_producer_answering_legacy_to_max_version():
    p, a = producer(versioned=False)  # what JAX 0.10 does
    info = t.dlpack_info(p)
    assert info["versioned"] is False and p.dlpack_calls == 1
    assert (p.exported, p.deleted) == (1, 1)


FAILURES = {
    # name: (producer keywords, request flags, message)
    "opaque dtype": (dict(dtype_code=kDLOpaqueHandle, bits=32), RO, "kDLOpaqueHandle"),
    "lanes 4": (dict(lanes=4), RO, r"lanes.*vector type"),
    "major version 2": (dict(major=2, minor=1), RO, r"version 2\.1"),
    "packed int4": (dict(base=np.arange(4, dtype=np.uint8), dtype_code=kDLInt, bits=4), RO,
                    r"sub-byte type kDLInt of 4 bits is packed.*not supported"),
    "packed float4": (dict(base=np.arange(4, dtype=np.uint8), dtype_code=17, bits=4), RO,
                      r"sub-byte type kDLFloat4_e2m1fn .*not supported"),
    "unknown dtype code": (dict(dtype_code=99), RO, "dtype code 99 is unknown"),
    "float128": (dict(base=np.zeros(2, dtype=np.complex128), dtype_code=kDLFloat, bits=128),
                 RO, "float128"),
    "float8 with 16 bits": (dict(base=np.zeros(2, dtype=np.int16), dtype_code=10, bits=16), RO,
                            "kDLFloat8_e4m3fn with 16 bits"),
    "ndim 65": (dict(base=np.zeros(1, dtype=np.int8), shape=(1,) * 65), RO,
                "65 dimensions; pyxbuf accepts 0..64"),
    "writable on read-only": (dict(read_only=True), RW, r"read-only.*WRITABLE"),
    "writable on a copy": (dict(is_copied=True), RW, "exported a copy"),
    "device refused": (dict(device=(EXT, 0)), RO, r"device 'ext_dev:0'.*PYXBUF_DEVICE"),
    "device pointer is host memory": (dict(device=(EXT, 0)), DEVICE_VIEW,
                                      r"first byte 0x[0-9a-f]+ is not memory of device .ext_dev:0."),
    "not C-contiguous": (dict(base=np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]),
                         t.PyBUF_C_CONTIGUOUS, "not C-contiguous"),
}


@pytest.mark.parametrize("case", FAILURES)
def test_failure_halfway_deletes_exactly_once(case):
    kw, flags, message = FAILURES[case]
    p, _ = producer(**kw)
    with pytest.raises(BufferError, match=message) as err:
        t.dlpack_info(p, flags)
    assert "DLPack buffer of '_pyxbuf_testext.DLPackProducer'" in str(err.value)
    gc.collect()
    assert (p.exported, p.deleted) == (1, 1)


def test_capsule_with_a_foreign_name_is_left_to_its_destructor():
    p, _ = producer(capsule_name="not_a_tensor")
    with pytest.raises(BufferError, match="capsule named 'not_a_tensor'"):
        t.dlpack_info(p)
    gc.collect()
    assert (p.exported, p.deleted) == (1, 1), "not consumed: the capsule's destructor deletes"


def test_null_deleter_is_allowed():
    p, a = producer(null_deleter=True)
    assert t.dlpack_info(p)["buf"] == pointer(a)
    assert p.deleted == 0


def test_null_strides_mean_c_order():
    a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    p, _ = producer(base=a, null_strides=True)
    info = t.dlpack_info(p)
    assert info["strides"] == a.strides
    assert items(p) == a.tobytes()


def test_element_strides_become_byte_strides():
    a = np.arange(30, dtype=np.float64).reshape(5, 6)[::-2, 1::3]
    p, _ = producer(base=a)
    info = t.dlpack_info(p)
    assert info["strides"] == a.strides and info["buf"] == pointer(a)
    assert items(p) == a.tobytes()


def test_byte_offset_is_honoured():
    a = np.arange(8, dtype=np.uint64)
    p, _ = producer(base=a, byte_offset=256)  # data = pointer - 256, byte_offset = 256
    assert t.dlpack_info(p)["buf"] == pointer(a)
    assert items(p) == a.tobytes()


def test_more_dimensions_than_the_view_keeps_inline():
    a = np.arange(2 ** 12, dtype=np.uint8).reshape((2,) * 12)
    p, _ = producer(base=a)
    info = t.dlpack_info(p)
    assert info["shape"] == a.shape and info["strides"] == a.strides
    assert items(p) == a.tobytes()
    if int(np.__version__.split(".")[0]) >= 2:  # NumPy 1 stops at 32 dimensions
        b = np.zeros((1,) * 64, dtype=np.int8)
        assert t.dlpack_info(producer(base=b)[0])["ndim"] == 64


def test_is_copied_is_recorded():
    p, _ = producer(is_copied=True)
    info = t.dlpack_info(p)
    assert info["is_copied"] is True and info["dl_flags"] & t.DLPACK_FLAG_IS_COPIED


def test_read_only_flag_gives_a_read_only_view():
    p, _ = producer(read_only=True)
    assert t.dlpack_info(p)["readonly"] is True


@pytest.mark.parametrize("name,code_bits", list(SUBBYTE_FLOATS.items())
                         + [("int4", (kDLInt, 4)), ("uint4", (kDLUInt, 4)),
                            ("int2", (kDLInt, 2)), ("uint2", (kDLUInt, 2))])
def test_padded_sub_byte_types_read_as_ml_dtypes(name, code_bits):
    a = np.arange(6, dtype=np.uint8) % 4
    p, _ = producer(base=a, dtype_code=code_bits[0], bits=code_bits[1], padded=True)
    info = t.dlpack_info(p)
    assert info["format"] == f"[ml_dtypes${name}]" and info["itemsize"] == 1
    assert items(p) == a.tobytes()


@pytest.mark.parametrize("name,code", [("bfloat16", kDLBfloat)] + list(FLOAT8.items()))
def test_custom_float_codes(name, code):
    bits = 16 if name == "bfloat16" else 8
    a = np.arange(4, dtype=np.uint16 if bits == 16 else np.uint8)
    p, _ = producer(base=a, dtype_code=code, bits=bits)
    assert t.dlpack_info(p)["format"] == f"[ml_dtypes${name}]"


def test_cuda_host_memory_is_host_memory():
    p, a = producer(device=(t.PYXBUF_DL_CUDA_HOST, 0))
    info = t.dlpack_info(p, DEVICE_VIEW)
    assert info["device"] is None and info["buf"] == pointer(a)


def test_producer_refcounts_unchanged_after_10000_cycles():
    p, a = producer()
    before = sys.getrefcount(p), sys.getrefcount(a)
    t.cycle(p, RO, 10_000)
    gc.collect()
    assert (sys.getrefcount(p), sys.getrefcount(a)) == before
    assert p.exported == p.deleted == 10_000


# --------------------------------------------------------------------------
# Import: streams
# --------------------------------------------------------------------------


def test_no_stream_asks_nothing_of_the_device():
    p, _ = producer()
    t.dlpack_info(p)
    assert p.last_kwargs.get("stream") is None


def test_stream_for_host_tensors_is_none():
    p, _ = producer()
    t.dlpack_info(p, RO, stream=7)
    assert p.last_kwargs.get("stream") is None


def test_stream_reaches_device_producers():
    e = t.exporter("<i", (4,), device=(EXT, 0))
    p = t.DLPackProducer(e)
    info = t.dlpack_info(p, DEVICE_VIEW, stream=2)
    assert p.last_kwargs["stream"] == 2
    assert (info["device_type"], info["device_id"], info["stream"]) == (EXT, 0, 2)
    assert info["sync_event"] is False, "the producer ordered its work before our stream"
    del p, e


def test_stream_without_dlpack_device_is_passed_as_given():
    p, _ = producer()

    class NoDevice:  # breaks the specification: no __dlpack_device__
        def __dlpack__(self, **kw):
            return p.__dlpack__(**kw)

    t.dlpack_info(NoDevice(), RO, stream=5)
    assert p.last_kwargs["stream"] == 5 and p.deleted == 1


def test_stream_zero_becomes_one_on_cuda():
    p, _ = producer(device=(t.PYXBUF_DL_CUDA, 0))
    with pytest.raises(BufferError):  # host memory is no CUDA memory
        t.dlpack_info(p, DEVICE_VIEW, stream=0)
    assert p.last_kwargs["stream"] == 1, "DLPack forbids 0 on CUDA; 1 is the legacy default"
    assert p.deleted == 1


def test_device_tensor_without_device_flag_is_refused_before_export():
    e = t.exporter("<i", (4,), device=(EXT, 0))
    p = t.DLPackProducer(e)
    with pytest.raises(BufferError, match="ext_dev:0"):
        t.dlpack_info(p, RO, stream=0)
    assert p.dlpack_calls == 0 and p.exported == 0
    del p, e


# --------------------------------------------------------------------------
# Import: the DLPack 1.3 C exchange table
# --------------------------------------------------------------------------


def test_c_exchange_table_makes_no_python_call():
    a = np.arange(10, dtype=np.float32)
    p = t.DLPackCProducer(a)
    info = t.dlpack_info(p)
    assert info["path"] == "dlpack-c" and info["buf"] == pointer(a)
    assert (p.dlpack_calls, p.c_calls, p.exported, p.deleted) == (0, 1, 1, 1)
    t.cycle(p, RO, 1000)
    assert (p.dlpack_calls, p.c_calls, p.deleted) == (0, 1001, 1001)


def test_c_exchange_table_chain_to_major_version_1():
    p = t.DLPackCProducerV2(np.arange(3, dtype=np.int8))
    assert t.dlpack_info(p)["path"] == "dlpack-c"
    assert p.dlpack_calls == 0 and p.deleted == 1


def test_c_exchange_failure_deletes_once():
    p = t.DLPackCProducer(np.arange(3, dtype=np.int8), lanes=2)
    with pytest.raises(BufferError, match="lanes"):
        t.dlpack_info(p)
    assert (p.c_calls, p.deleted) == (1, 1)


def test_c_exchange_table_lookup_follows_the_type():
    class Sub(t.DLPackProducer):
        pass

    p = Sub(np.arange(3, dtype=np.int8))
    assert t.dlpack_info(p)["path"] == "dlpack"
    Sub.__dlpack_c_exchange_api__ = t.DLPackCProducer.__dlpack_c_exchange_api__
    assert t.dlpack_info(p)["path"] == "dlpack-c"
    del Sub.__dlpack_c_exchange_api__
    assert t.dlpack_info(p)["path"] == "dlpack"
    Sub.__dlpack_c_exchange_api__ = 12345  # not a capsule: ignored
    assert t.dlpack_info(p)["path"] == "dlpack"
    assert p.exported == p.deleted == 4


def table_address(capsule):
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, b"dlpack_exchange_api")


class DLPackHeader(ctypes.Structure):
    """DLPackExchangeAPIHeader: DLPackVersion, then prev_api."""
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("prev_api", ctypes.c_void_p)]


@pytest.mark.parametrize("form", ["capsule", "address"])
def test_the_pre_1_3_name_of_the_c_exchange_table_is_read(form):
    """Before DLPack 1.3 the table was __c_dlpack_exchange_api__: its address
    as an int (the 1.2-era proposal, older apache-tvm-ffi) or a capsule
    (PaddlePaddle 3.3). Issue 25, item 19."""
    table = t.DLPackCProducer.__dlpack_c_exchange_api__

    class Older(t.DLPackProducer):
        __c_dlpack_exchange_api__ = table if form == "capsule" else table_address(table)

    p = Older(np.arange(3, dtype=np.int8))
    for calls in range(1, 3):  # the first call and the cached route
        assert t.dlpack_info(p)["path"] == "dlpack-c"
        assert (p.dlpack_calls, p.c_calls, p.deleted) == (0, calls, calls)


@pytest.mark.parametrize("value", ["major-2-header", 0, -1, "not a table"])
def test_an_older_name_without_a_version_1_table_is_ignored(value):
    """The header's version is read before anything else: a table of another
    major version with no version-1 table behind it, or a value that is no
    address, leaves the object to __dlpack__."""
    header = DLPackHeader(2, 0, None)
    if value == "major-2-header":
        value = ctypes.addressof(header)

    class Older(t.DLPackProducer):
        __c_dlpack_exchange_api__ = value

    p = Older(np.arange(3, dtype=np.int8))
    assert t.dlpack_info(p)["path"] == "dlpack"
    assert (p.dlpack_calls, p.c_calls) == (1, 0)


def test_the_older_name_answers_when_the_1_3_name_holds_no_table():
    """DLPack 1.3's name takes only a capsule; an int there is not a table,
    and the older name is read next."""
    table = t.DLPackCProducer.__dlpack_c_exchange_api__

    class Both(t.DLPackProducer):
        __dlpack_c_exchange_api__ = table_address(table)
        __c_dlpack_exchange_api__ = table

    p = Both(np.arange(3, dtype=np.int8))
    assert t.dlpack_info(p)["path"] == "dlpack-c" and p.c_calls == 1


def test_c_exchange_refusal_is_the_same_on_every_call():
    """The first call finds the table through the bridges and caches it for
    the type; later calls take pyxbuf_get's direct route to it. Both refuse
    alike and delete each tensor once."""
    p = t.DLPackCProducer(np.arange(3, dtype=np.int8), lanes=2)
    for calls in range(1, 4):
        with pytest.raises(BufferError, match="lanes") as e:
            t.dlpack_info(p)
        assert "DLPack" in str(e.value), "the refusal names the bridge that refused"
        assert (p.c_calls, p.deleted) == (calls, calls)


def test_c_exchange_refusal_lets_a_later_bridge_answer():
    """The __array_interface__ bridge (a user dtype's) answers after the
    table refused, on the cached route as on the first call."""
    a = np.arange(6, dtype=ml_dtypes.bfloat16)

    class WithInterface(t.DLPackProducer):
        __dlpack_c_exchange_api__ = t.DLPackCProducer.__dlpack_c_exchange_api__
        dtype = a.dtype

        @property
        def __array_interface__(self):
            return a.__array_interface__

    p = WithInterface(np.arange(3, dtype=np.int8), lanes=2)  # its table refuses
    for calls in range(1, 4):
        info = t.dlpack_info(p)
        assert info["path"] == "array-interface" and info["buf"] == pointer(a)
        assert info["shape"] == (6,) and info["format"] == "[ml_dtypes$bfloat16]"
        assert (p.c_calls, p.deleted) == (calls, calls)


def test_c_exchange_borrows_are_tracked_on_every_call():
    """A borrow request leaves the direct route for the path that takes the
    grant from the cooperative registry."""
    a = np.arange(4, dtype=np.float32)
    p = t.DLPackCProducer(a)
    assert t.dlpack_info(p)["path"] == "dlpack-c"  # the type is cached
    for _ in range(2):
        v = t.acquire(p, RO | t.PYXBUF_BORROW_SHARED)
        info = v.info()
        assert info["path"] == "dlpack-c"
        assert info["ext_flags"] == t.PYXBUF_EXT_TRACKED | t.PYXBUF_EXT_SHARED
        with pytest.raises(BufferError, match="shared"):
            t.acquire(p, RW | t.PYXBUF_BORROW_EXCLUSIVE)
        v.release()
    assert p.c_calls == p.deleted == 5


def test_c_exchange_device_tensor_gets_an_event_on_the_work_stream():
    e = t.exporter("B", (8,), device=(EXT, 0))
    stream = t.emulated_write(e, bytes(range(8)), 0, False)  # queued, not run
    t.dlpack_set_work_stream(stream)
    try:
        p = t.DLPackCProducer(e)
        info = t.dlpack_info(p, DEVICE_VIEW)
        assert info["path"] == "dlpack-c" and info["device_type"] == EXT
        assert info["stream"] == stream and info["sync_event"] is True
        assert t.emulated_peek(e, 8) == bytes([POISON] * 8), "the producer's work is queued"
        assert t.copy_to_host(p) == bytes(range(8)), "waiting for the event runs it"
        assert p.deleted == 2
    finally:
        t.dlpack_set_work_stream(0)
        t.emulated_destroy_stream(stream)
    del p, e


# --------------------------------------------------------------------------
# Export: pyxbuf.Exporter.__dlpack__ / __dlpack_device__
# --------------------------------------------------------------------------


def filled(fmt, shape, values_dtype, readonly=False):
    """A host Exporter holding arange values of `values_dtype`."""
    e = t.exporter(fmt, shape, readonly=readonly)
    values = np.arange(int(np.prod(shape))).astype(values_dtype).reshape(shape)
    raw = values.tobytes()
    for i, byte in enumerate(raw):
        t.exporter_poke(e, i, byte)
    return e, values


EXPORT_FORMATS = {
    "b": (kDLInt, 8), "<h": (kDLInt, 16), "i": (kDLInt, 32), "=q": (kDLInt, 64),
    "l": (kDLInt, 64), "B": (kDLUInt, 8), "H": (kDLUInt, 16), "<I": (kDLUInt, 32),
    "Q": (kDLUInt, 64), "e": (kDLFloat, 16), "<f": (kDLFloat, 32), "d": (kDLFloat, 64),
    "?": (kDLBool, 8), "Zf": (kDLComplex, 64), "Zd": (kDLComplex, 128),
    "[ml_dtypes$bfloat16]": (kDLBfloat, 16), "[ml_dtypes$complex32]": (kDLComplex, 32),
    **{f"[ml_dtypes${n}]": (c, 8) for n, c in FLOAT8.items()},
}  # fmt: skip


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_export_dtype(fmt):
    e = t.exporter(fmt, (2, 3))
    info = t.capsule_info(e.__dlpack__(max_version=(1, 3)))
    assert info["dtype"] == EXPORT_FORMATS[fmt] + (1,)
    assert info["shape"] == (2, 3) and info["strides"] == (3, 1)
    assert info["device"] == (t.PYXBUF_DL_CPU, 0)
    assert info["data"] == t.inspect(e)["buf"] and info["byte_offset"] == 0
    assert info["version"] == (1, 3) and info["flags"] == 0
    # and back: the import gives the canonical format of the same type
    back = t.dlpack_info(DL(e))
    assert back["path"] == "dlpack" and back["itemsize"] == t.inspect(e)["itemsize"]


@pytest.mark.parametrize("name,code_bits", [("int4", (kDLInt, 4)), ("uint2", (kDLUInt, 2)),
                                            ("float4_e2m1fn", (17, 4))])
def test_export_padded_sub_byte(name, code_bits):
    e = t.exporter(f"[ml_dtypes${name}]", (5,))
    c = e.__dlpack__(max_version=(1, 1))
    info = t.capsule_info(c)
    assert info["dtype"] == code_bits + (1,)
    assert info["flags"] == t.DLPACK_FLAG_SUBBYTE_PADDED
    del c
    assert t.dlpack_info(DL(e))["format"] == f"[ml_dtypes${name}]"
    with pytest.raises(BufferError, match="padded sub-byte.*legacy"):
        e.__dlpack__()


@pytest.mark.parametrize(
    "fmt,why",
    [(">f", "native byte order"), ("T{i:a:f:b:}", "one scalar"), ("2f", "one scalar"),
     ("(2)h", "one scalar"), ("g", "long double"), ("c", "no code"), ("4s", "one scalar"),
     ("[ml_dtypes$bcomplex32]", "no code"), ("Z[ml_dtypes$bfloat16]", "no code")],
)
def test_export_refuses_formats_dlpack_cannot_say(fmt, why):
    e = t.exporter(fmt, (3,))
    with pytest.raises(BufferError, match=rf"format '.*' cannot be exported by DLPack.*{why}"):
        e.__dlpack__(max_version=(1, 3))
    assert e.borrows["views"] == 0


@needs_numpy_dlpack_1
def test_export_to_numpy_shares_memory():
    e, values = filled("<i", (3, 4), np.int32)
    a = np.from_dlpack(e)
    assert a.tolist() == values.tolist()
    assert pointer(a) == t.inspect(e)["buf"]
    assert a.flags.writeable
    assert e.borrows["views"] == 1 and e.borrows["writable"] == 1
    a[0, 0] = 99
    assert t.inspect(e, RO)["buf"] == pointer(a)
    assert np.from_dlpack(e)[0, 0] == 99
    del a
    gc.collect()
    assert e.borrows["views"] == 0


@needs_numpy_dlpack_1
@pytest.mark.parametrize("fmt,dtype", [("<f", np.float32), ("q", np.int64), ("?", np.bool_),
                                       ("Zd", np.complex128), ("H", np.uint16)])
def test_export_to_numpy_values(fmt, dtype):
    e, values = filled(fmt, (2, 5), dtype)
    assert np.from_dlpack(e).tolist() == values.tolist()
    assert np.from_dlpack(e, copy=True).tolist() == values.tolist()


def test_export_to_jax_values():
    e, values = filled("<f", (4, 3), np.float32)
    x = jax.dlpack.from_dlpack(e)
    assert np.asarray(x).tolist() == values.tolist()
    b, bvalues = filled("[ml_dtypes$bfloat16]", (6,), ml_dtypes.bfloat16)
    y = jax.dlpack.from_dlpack(b)
    assert y.dtype == jnp.bfloat16
    assert np.asarray(y).tolist() == bvalues.tolist()


@needs_numpy_dlpack_1
def test_export_copy_true_is_flagged_and_separate():
    e, values = filled("<h", (6,), np.int16)
    a = np.from_dlpack(e, copy=True)
    assert pointer(a) != t.inspect(e)["buf"] and a.tolist() == values.tolist()
    info = t.capsule_info(e.__dlpack__(max_version=(1, 3), copy=True))
    assert info["flags"] == t.DLPACK_FLAG_IS_COPIED
    assert info["data"] != t.inspect(e)["buf"]


def test_pyxbuf_reads_its_own_exporter_natively():
    e, _ = filled("<f", (2,), np.float32)
    assert t.inspect(e)["path"] == "native"
    assert t.dlpack_info(DL(e))["path"] == "dlpack"


def test_export_legacy_when_max_version_is_absent_or_old():
    e = t.exporter("<i", (3,))
    assert t.capsule_info(e.__dlpack__())["name"] == "dltensor"
    assert t.capsule_info(e.__dlpack__(max_version=None))["name"] == "dltensor"
    assert t.capsule_info(e.__dlpack__(max_version=(0, 8)))["name"] == "dltensor"
    v10 = t.capsule_info(e.__dlpack__(max_version=(1, 0)))
    assert v10["name"] == "dltensor_versioned" and v10["version"] == (1, 0)
    assert t.capsule_info(e.__dlpack__(max_version=(2, 5)))["version"] == (1, 3)
    gc.collect()
    assert e.borrows["views"] == 0, "unconsumed capsules delete their tensors"


@needs_numpy_dlpack_1
def test_export_read_only():
    e = t.exporter("<i", (3,), readonly=True)
    info = t.capsule_info(e.__dlpack__(max_version=(1, 3)))
    assert info["flags"] == t.DLPACK_FLAG_READ_ONLY
    a = np.from_dlpack(e)
    assert not a.flags.writeable
    del a
    with pytest.raises(BufferError, match="read-only tensor cannot be exported as a legacy"):
        e.__dlpack__()


def test_export_respects_borrows():
    e = t.exporter("<i", (3,))
    shared = t.acquire(e, RO | t.PYXBUF_BORROW_SHARED)
    info = t.capsule_info(e.__dlpack__(max_version=(1, 3)))
    assert info["flags"] == t.DLPACK_FLAG_READ_ONLY, "a shared borrow promises nobody writes"
    shared.release()
    exclusive = t.acquire(e, RW | t.PYXBUF_BORROW_EXCLUSIVE)
    with pytest.raises(BufferError, match="exclusive borrow is live"):
        e.__dlpack__(max_version=(1, 3))
    exclusive.release()
    gc.collect()
    assert e.borrows["views"] == 0


def test_export_keywords():
    e = t.exporter("<i", (3,))
    assert e.__dlpack_device__() == (t.PYXBUF_DL_CPU, 0)
    assert e.__dlpack__(stream=None, max_version=(1, 3), dl_device=(1, 0), copy=False)
    assert e.__dlpack__(stream=-1, max_version=(1, 3))
    with pytest.raises(BufferError, match="only None"):
        e.__dlpack__(stream=5)
    with pytest.raises(BufferError, match="copy=False"):
        e.__dlpack__(max_version=(1, 3), dl_device=(EXT, 0), copy=False)
    with pytest.raises(TypeError):
        e.__dlpack__(None)  # keyword-only
    with pytest.raises(TypeError, match="max_version"):
        e.__dlpack__(max_version=3)
    gc.collect()
    assert e.borrows["views"] == 0


def test_unconsumed_and_consumed_capsules_release_the_exporter_once():
    e = t.exporter("<i", (3,))
    c = e.__dlpack__(max_version=(1, 3))
    assert e.borrows["views"] == 1
    t.capsule_consume(c)
    assert e.borrows["views"] == 0
    del c  # renamed: the destructor leaves it alone
    c = e.__dlpack__()
    t.capsule_consume(c, True)  # the deleter on another thread, without the GIL
    assert e.borrows["views"] == 0
    c = e.__dlpack__(max_version=(1, 3))
    del c
    assert e.borrows["views"] == 0


def test_export_refcount_unchanged_after_many_round_trips():
    e = t.exporter("<f", (4,))
    before = sys.getrefcount(e)
    for _ in range(2000):
        np.from_dlpack(e)
        t.capsule_consume(e.__dlpack__(max_version=(1, 3)))
    gc.collect()
    assert sys.getrefcount(e) == before and e.borrows["views"] == 0


# --------------------------------------------------------------------------
# Export: device tensors on the emulated device
# --------------------------------------------------------------------------


def test_device_exporter_exports_an_ext_dev_tensor():
    e = t.exporter("<f", (2, 3), device=(EXT, 1))
    assert e.__dlpack_device__() == (EXT, 1)
    info = t.capsule_info(e.__dlpack__(max_version=(1, 3)))
    assert info["device"] == (EXT, 1) and info["dtype"] == (kDLFloat, 32, 1)
    assert info["data"] == t.inspect(e, DEVICE_VIEW)["buf"]
    gc.collect()


def test_device_tensor_imported_back_through_dlpack():
    e = t.exporter("<i", (2, 3), device=(EXT, 0))
    values = np.arange(6, dtype=np.int32).reshape(2, 3) * 3
    stream = t.emulated_write(e, values.tobytes())  # queued, with an event
    try:
        w = DL(e)
        info = t.dlpack_info(w, DEVICE_VIEW)
        assert info["path"] == "dlpack" and info["device"] == t.PYXBUF_DEVICE_DLPACK
        assert (info["device_type"], info["device_id"]) == (EXT, 0)
        assert info["shape"] == (2, 3) and info["strides"] == (12, 4) and info["format"] == "i"
        # No consumer stream: the producer ordered its write before the default
        # stream only, so pyxbuf recorded an event there for other streams.
        assert info["sync_event"] is True
        assert t.copy_to_host(w) == values.tobytes()
        with pytest.raises(BufferError, match="ext_dev:0"):
            t.dlpack_info(w, RO)
        assert t.deref_in_child(e) in (signal_segv(), signal_bus())
    finally:
        t.emulated_destroy_stream(stream)
    del w, e


@needs_numpy_dlpack_1
def test_device_exporter_to_host_with_dl_device():
    e = t.exporter("<h", (4,), device=(EXT, 0))
    values = np.array([1, -2, 3, -4], dtype=np.int16)
    stream = t.emulated_write(e, values.tobytes())
    try:
        a = np.from_dlpack(DL(e), device="cpu")  # dl_device=(1, 0), copy=None: a copy
        assert a.tolist() == values.tolist()
        with pytest.raises(BufferError, match="copy=False"):
            e.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False)
    finally:
        t.emulated_destroy_stream(stream)
    del a, e


@needs_numpy_dlpack_1
def test_host_exporter_to_device_with_dl_device():
    e, values = filled("<f", (3,), np.float32)
    c = e.__dlpack__(max_version=(1, 3), dl_device=(EXT, 2))
    info = t.capsule_info(c)
    assert info["device"] == (EXT, 2) and info["flags"] == t.DLPACK_FLAG_IS_COPIED

    class Capsule:
        def __dlpack__(self, **kw):
            return c

        def __dlpack_device__(self):
            return (EXT, 2)

    assert t.copy_to_host(Capsule()) == values.tobytes()
    del c


def test_device_exporter_copy_true_on_same_device():
    e = t.exporter("B", (4,), device=(EXT, 0))
    stream = t.emulated_write(e, b"\x01\x02\x03\x04")
    try:
        c = e.__dlpack__(max_version=(1, 3), copy=True)
        info = t.capsule_info(c)
        assert info["device"] == (EXT, 0) and info["flags"] == t.DLPACK_FLAG_IS_COPIED
        assert info["data"] != t.inspect(e, DEVICE_VIEW)["buf"]
        del c
    finally:
        t.emulated_destroy_stream(stream)
    del e


def signal_segv():
    import signal

    return signal.SIGSEGV


def signal_bus():
    import signal

    return signal.SIGBUS
