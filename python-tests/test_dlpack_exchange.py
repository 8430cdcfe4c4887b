"""pyxbuf.Exporter's DLPack 1.3 C exchange table (`__dlpack_c_exchange_api__`),
called the way a consumer framework calls it: through the table's function
pointers (ctypes, with the GIL held, as the specification's callers do)."""

import ctypes
import gc

import numpy as np
import pytest

import _pyxbuf_testext as t

RO = t.PyBUF_RECORDS_RO
EXCLUSIVE = t.PyBUF_RECORDS | t.PYXBUF_BORROW_EXCLUSIVE
DEV0 = (t.PYXBUF_DL_EXT_DEV, 0)
kDLFloat = 2


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]
MANAGED_P = ctypes.POINTER(DLManagedTensorVersioned)
SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)

# PYFUNCTYPE: called with the GIL held, and a Python error set by the callee
# is raised by ctypes -- the specification's "-1 with a Python exception set".
ALLOCATOR = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(MANAGED_P),
                              ctypes.c_void_p, SET_ERROR)
FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(MANAGED_P))
TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, MANAGED_P, ctypes.POINTER(ctypes.py_object))
DLTENSOR_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
STREAM = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
                           ctypes.POINTER(ctypes.c_void_p))


class Header(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", ctypes.c_void_p)]


class ExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", Header),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


def table(obj):
    capsule = type(obj).__dlpack_c_exchange_api__
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert get_name(capsule) == b"dlpack_exchange_api"
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ExchangeAPI.from_address(get(capsule, b"dlpack_exchange_api"))


def managed(obj):
    out = MANAGED_P()
    assert FROM_PY(table(obj).managed_tensor_from_py_object_no_sync)(obj, ctypes.byref(out)) == 0
    return out


def to_object(api, tensor):
    out = ctypes.py_object()
    assert TO_PY(api.managed_tensor_to_py_object_no_sync)(tensor, ctypes.byref(out)) == 0
    obj = out.value
    # The table hands over a new reference, which ctypes does not own.
    decref = ctypes.pythonapi.Py_DecRef
    decref.argtypes = [ctypes.py_object]
    decref(obj)
    return obj


def filled(shape=(2, 3), readonly=False):
    e = t.exporter("f", shape)
    np.asarray(memoryview(e)).reshape(shape)[...] = np.arange(np.prod(shape)).reshape(shape)
    return t.exporter("f", shape, readonly=True) if readonly else e


@pytest.fixture(autouse=True)
def no_leaked_device_memory():
    gc.collect()  # what earlier tests left to the collector (free-threaded builds run it later)
    before = t.emulated_live_allocations()
    yield
    assert t.emulated_live_allocations() == before


def test_the_exporter_type_carries_a_complete_1_3_table():
    api = table(t.exporter("f", (1,)))
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert not api.header.prev_api
    for name, _ in ExchangeAPI._fields_[1:]:
        assert getattr(api, name), f"{name} is NULL"


def test_managed_tensor_from_an_exporter_holds_a_view():
    e = filled()
    m = managed(e)
    tensor = m.contents.dl_tensor
    assert (m.contents.version.major, m.contents.version.minor) == (1, 3)
    assert (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == (kDLFloat, 32, 1)
    assert tensor.ndim == 2 and tensor.shape[:2] == [2, 3] and tensor.strides[:2] == [3, 1]
    assert tensor.data == t.inspect(e)["buf"] and m.contents.flags == 0
    values = (ctypes.c_float * 6).from_address(tensor.data)
    assert list(values) == [0, 1, 2, 3, 4, 5]
    # the tensor's view is live and the exporter cannot stop its writes: an
    # exclusive borrow is only tracked (issue 38), enforced once it is deleted
    assert t.inspect(e, EXCLUSIVE)["ext_flags"] == t.PYXBUF_EXT_EXCLUSIVE | t.PYXBUF_EXT_TRACKED
    m.contents.deleter(m)
    assert t.inspect(e, EXCLUSIVE)["ext_flags"] == t.PYXBUF_EXT_EXCLUSIVE


def test_read_only_exporters_give_read_only_tensors():
    e = filled(readonly=True)
    m = managed(e)
    assert m.contents.flags & t.DLPACK_FLAG_READ_ONLY
    m.contents.deleter(m)


def test_tensor_back_to_an_object_owns_it():
    e = filled()
    api = table(e)
    obj = to_object(api, managed(e))
    info = t.inspect(obj)
    assert (info["format"], info["shape"], info["buf"]) == ("f", (2, 3), t.inspect(e)["buf"])
    del info  # it holds obj
    assert t.host_only(obj, "contiguous") == np.arange(6, dtype=np.float32).tobytes()
    # the tensor's view is live: an exclusive borrow is only tracked (issue 38)
    assert t.inspect(e, EXCLUSIVE)["ext_flags"] == t.PYXBUF_EXT_EXCLUSIVE | t.PYXBUF_EXT_TRACKED
    del obj  # the exporter dies, the tensor's deleter runs, the view goes
    assert t.inspect(e, EXCLUSIVE)["ext_flags"] == t.PYXBUF_EXT_EXCLUSIVE


@pytest.mark.parametrize("device", [(t.PYXBUF_DL_CPU, 0), DEV0])
def test_allocator_makes_exporter_memory(device):
    api = table(t.exporter("f", (1,)))
    shape = (ctypes.c_int64 * 2)(2, 2)
    proto = DLTensor(None, DLDevice(*device), 2, DLDataType(kDLFloat, 64, 1), shape, None, 0)
    out = MANAGED_P()
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))
    rc = ALLOCATOR(api.managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(out), None,
                                                 set_error)
    assert rc == 0 and not errors
    tensor = out.contents.dl_tensor
    assert (tensor.device.device_type, tensor.device.device_id) == device
    assert tensor.shape[:2] == [2, 2] and tensor.dtype.bits == 64
    obj = to_object(api, out)
    assert t.inspect(obj, RO | t.PYXBUF_DEVICE)["itemsize"] == 8
    assert len(t.copy_to_host(obj)) == 32
    del obj


def test_allocator_reports_errors_through_its_callback():
    api = table(t.exporter("f", (1,)))
    proto = DLTensor(None, DLDevice(t.PYXBUF_DL_CPU, 0), 1, DLDataType(99, 8, 1),
                     (ctypes.c_int64 * 1)(3), None, 0)
    out = MANAGED_P()
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))
    rc = ALLOCATOR(api.managed_tensor_allocator)(ctypes.byref(proto), ctypes.byref(out), None,
                                                 set_error)
    assert rc == -1 and not out
    assert errors and errors[0][0] == b"BufferError" and b"dtype code 99" in errors[0][1]


def test_non_owning_dltensor_of_an_exporter():
    e = t.exporter("d", (3, 4))
    api = table(e)
    out = DLTensor()
    assert DLTENSOR_FROM_PY(api.dltensor_from_py_object_no_sync)(e, ctypes.byref(out)) == 0
    assert out.shape[:2] == [3, 4] and out.strides[:2] == [4, 1]
    assert out.data == t.inspect(e)["buf"] and out.dtype.bits == 64
    # a DLTensor cannot say read-only: refused, with the reason
    ro = t.exporter("d", (2,), readonly=True)
    with pytest.raises(BufferError, match="read-only"):
        DLTENSOR_FROM_PY(api.dltensor_from_py_object_no_sync)(ro, ctypes.byref(out))


def test_current_work_stream_is_the_default_stream():
    api = table(t.exporter("f", (1,)))
    stream = ctypes.c_void_p(1)
    assert STREAM(api.current_work_stream)(t.PYXBUF_DL_EXT_DEV, 0, ctypes.byref(stream)) == 0
    assert stream.value is None


def test_a_device_exporter_through_the_table():
    host = np.arange(4, dtype=np.float32)
    dev = t.to_device(host, DEV0)
    m = managed(dev)
    tensor = m.contents.dl_tensor
    assert (tensor.device.device_type, tensor.device.device_id) == DEV0
    obj = to_object(table(dev), m)
    assert t.copy_to_host(obj) == host.tobytes()
    del obj


@pytest.mark.parametrize("fmt,dtype", [("[pyxbuf$float4_e2m1fn_x2;struct$B]", (17, 4, 2)),
                                       ("[pyxbuf$int4_x2;struct$B]", (0, 4, 2)),
                                       ("[pyxbuf$uint4_x2;struct$B]", (1, 4, 2))])
def test_packed_4_bit_pairs_are_two_lanes_of_one_byte_items(fmt, dtype):
    """PyTorch's float4_e2m1fn_x2 (and int4 / uint4 pairs) as DLPack says
    them: 4 bits, 2 lanes, one byte per element, through __dlpack__ and the
    C exchange table alike."""
    e = t.exporter(fmt, (3, 2))
    assert t.capsule_info(e.__dlpack__(max_version=(1, 3)))["dtype"] == dtype
    out = DLTensor()
    api = table(e)
    assert DLTENSOR_FROM_PY(api.dltensor_from_py_object_no_sync)(e, ctypes.byref(out)) == 0
    assert (out.dtype.code, out.dtype.bits, out.dtype.lanes) == dtype
    assert out.strides[:2] == [2, 1]


@pytest.mark.parametrize("fmt", ["[pyxbuf$float4_e2m1fn_x2;struct$BB]",
                                 "[struct$e;pyxbuf$uint4_x2]"])
def test_a_packed_type_that_did_not_size_the_items_is_not_exported(fmt):
    """A format naming a packed type among alternatives whose chosen one
    has other items (2 bytes here): DLPack's (4 bits, 2 lanes) would
    describe other bytes, so neither path exports it."""
    e = t.exporter(fmt, (4,))
    with pytest.raises(BufferError, match=r"items' size is not the DLPack dtype's"):
        e.__dlpack__(max_version=(1, 3))
    out = DLTensor()
    with pytest.raises(BufferError, match=r"items' size is not the DLPack dtype's"):
        DLTENSOR_FROM_PY(table(e).dltensor_from_py_object_no_sync)(e, ctypes.byref(out))
