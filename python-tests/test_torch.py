"""PyTorch tensors of the machine-learning dtypes through pyxbuf (issue 39).

PyTorch is about 5 GB, so it is not in the venv: `make test-torch` runs this
file with the install `make torch` keeps in ~/.cache/pyxbuf/bench-torch, and
says so when there is none. Every test name carries "torch" (the target
selects with -k torch). Without PyTorch the whole module is skipped.
"""

import numpy as np
import pytest

import _pyxbuf_testext as t

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

RECORDS = t.PyBUF_RECORDS_RO

# PyTorch's float8 dtypes and the ml_dtypes type of the same encoding.
FLOAT8 = {
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2fnuz": "float8_e5m2fnuz",
    "float8_e8m0fnu": "float8_e8m0fnu",
}


def _float8_tensor(name, shape=(2, 3)):
    values = torch.linspace(-3, 3, int(np.prod(shape)))
    if name == "float8_e8m0fnu":  # powers of two only, no sign
        values = values.abs() + 0.25
    return values.to(getattr(torch, name)).reshape(shape)


@pytest.mark.parametrize("name", list(FLOAT8))
def test_torch_float8_reads_as_the_ml_dtypes_custom_type(name):
    x = _float8_tensor(name)
    v = t.acquire(x, RECORDS)
    info = v.info()
    assert info["format"] == f"[ml_dtypes${FLOAT8[name]}]"
    assert (info["itemsize"], info["shape"], info["strides"]) == (1, (2, 3), (3, 1))
    assert info["buf"] == x.data_ptr() and info["obj"] is x
    # The same bytes PyTorch holds, and the same values ml_dtypes decodes.
    raw = v.copy_to_host()
    assert raw == x.view(torch.uint8).numpy().tobytes()
    decoded = np.frombuffer(raw, getattr(ml_dtypes, FLOAT8[name])).astype(np.float32)
    assert decoded.tolist() == x.float().flatten().tolist()
    v.release()


# --------------------------------------------------------------------------
# Round trips: PyTorch -> pyxbuf (C and Rust) -> back to PyTorch, bit-exact
# --------------------------------------------------------------------------

pyxbuf_sum = pytest.importorskip("pyxbuf_sum")
pyxbuf = pytest.importorskip("pyxbuf")


def _float4_x2(shape=(3, 4)):
    """float4_e2m1fn_x2 of assorted bytes (two float4 codes each)."""
    raw = (torch.arange(int(np.prod(shape))) * 37 % 256).to(torch.uint8).reshape(shape)
    return raw.view(torch.float4_e2m1fn_x2)


def _bits(x):
    return x.contiguous().view(torch.uint8)


ROUND_TRIP = {
    "float8_e4m3fn": lambda: (torch.arange(24) / 4 - 2).to(torch.float8_e4m3fn).reshape(4, 6),
    "float8_e5m2": lambda: (torch.arange(24) / 3 - 1).to(torch.float8_e5m2).reshape(4, 6),
    "bfloat16": lambda: (torch.arange(24) / 7).to(torch.bfloat16).reshape(4, 6),
    "float4_e2m1fn_x2": _float4_x2,
}


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_torch_round_trip_through_rust_is_bit_exact(name):
    """Acquire, read from Rust (PyXBuffer<F8E4M3>, <F8E5M2>, <bf16>,
    <F4E2M1x2>), write a new pyxbuf array from Rust, torch.from_dlpack it:
    PyTorch gets its own dtype back and the same bits."""
    x = ROUND_TRIP[name]()
    copy = pyxbuf_sum.copy_ml(x, name)
    back = torch.from_dlpack(copy)
    assert back.dtype == x.dtype and back.shape == x.shape
    assert torch.equal(_bits(back), _bits(x))
    # And in place: pyxbuf's wrapper of the tensor, exported back, is the
    # tensor's own memory.
    wrapped = torch.from_dlpack(pyxbuf.from_dlpack(x))
    assert wrapped.dtype == x.dtype and wrapped.data_ptr() == x.data_ptr()
    assert torch.equal(_bits(wrapped), _bits(x))


def test_torch_float8_values_read_from_rust():
    x = ROUND_TRIP["float8_e4m3fn"]()
    assert pyxbuf_sum.sum_f8e4m3(x) == pytest.approx(x.float().sum().item())
    assert pyxbuf_sum.sum_f8e4m3(x[:, ::2]) == pytest.approx(x[:, ::2].float().sum().item())


def test_torch_packed_float4_reads_as_one_byte_items():
    """PyTorch exports float4_e2m1fn_x2 through DLPack as kDLFloat4_e2m1fn
    with 4 bits and 2 lanes: one byte holds two values, the first in the low
    four bits. pyxbuf reads the bytes with a format that says so."""
    x = _float4_x2()
    v = t.acquire(x, RECORDS)
    info = v.info()
    assert info["format"] == "[pyxbuf$float4_e2m1fn_x2;struct$B]"
    assert (info["itemsize"], info["shape"], info["strides"]) == (1, (3, 4), (4, 1))
    assert v.copy_to_host() == _bits(x).numpy().tobytes()
    v.release()
    # The two halves, decoded by Rust (float4's F4E2M1x2), against ml_dtypes'
    # float4_e2m1fn decoding the same nibbles.
    nibbles = _bits(x).numpy().ravel()
    codes = np.stack([nibbles & 0xF, nibbles >> 4], axis=1).astype(np.uint8).ravel()
    expected = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64).sum()
    assert pyxbuf_sum.sum_f4x2(x) == expected
    # A consumer that knows no packing still reads the bytes (struct$B).
    u8 = np.frombuffer(pyxbuf_sum.copy_ml(x, "float4_e2m1fn_x2"), np.uint8)
    assert u8.tobytes() == nibbles.tobytes()


def test_torch_float8_refused_as_float32_names_the_rust_type():
    x = ROUND_TRIP["float8_e4m3fn"]()
    with pytest.raises(TypeError, match=r"use pyxbuf::F8E4M3 and PyXBuffer<F8E4M3>"):
        pyxbuf_sum.sum_host_f32(x)
