"""The example module against NumPy: same sums on float32, ml_dtypes bfloat16
and emulated-device arrays; pyxbuf.ItemTypeError (a TypeError and a
BufferError) naming both formats on a dtype mismatch; BufferError on a borrow
conflict (also between two arguments of one call, with a message that says
so). Run after building the module
(maturin develop, or make demo)."""

import ml_dtypes
import numpy as np
import pytest

import pyxbuf_sum as s


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


@pytest.mark.parametrize("make", [
    lambda: np.arange(1000, dtype=np.float32) / 7,
    lambda: (np.arange(60, dtype=np.float32) / 3).reshape(6, 10)[::2, 1::3],  # strided
    lambda: np.arange(10, dtype=np.float32)[::-1],                           # negative strides
])
def test_float32_sums_match_numpy(make):
    a = make()
    assert close(s.sum_f32(a), float(a.astype(np.float64).sum()))
    assert close(s.sum_host_f32(a), float(a.astype(np.float64).sum()))


def test_bfloat16_sums_match_numpy():
    a = (np.arange(100) / 8).astype(ml_dtypes.bfloat16)
    assert close(s.sum_bf16(a), float(a.astype(np.float64).sum()))
    # read from the array struct (issue 39); NumPy 1's through __array_interface__
    numpy_2 = int(np.__version__.split(".")[0]) >= 2
    assert ("path=Numpy" if numpy_2 else "path=ArrayInterface") in s.describe(a)
    assert close(s.sum_any(a), float(a.astype(np.float64).sum()))


def test_emulated_device_sums_match_numpy():
    host = np.linspace(-3, 5, 33, dtype=np.float32)
    dev = s.to_emulated_device(host)
    assert str(dev.device) == "ext_dev:0"
    assert close(s.sum_f32(dev), float(host.astype(np.float64).sum()))
    b = np.arange(16).astype(ml_dtypes.bfloat16)
    assert close(s.sum_bf16(s.to_emulated_device(b)), float(b.astype(np.float64).sum()))
    with pytest.raises(BufferError, match="ext_dev:0"):
        s.sum_host_f32(dev)  # host-only request: the device array is refused


def test_dtype_mismatch_names_both_formats():
    with pytest.raises(TypeError, match=r"format 'd'.*format 'f'"):
        s.sum_f32(np.zeros(3))
    # pyxbuf.ItemTypeError: a BufferError too, as PyO3's PyBuffer raised it.
    with pytest.raises(BufferError, match=r"format 'd'.*format 'f'"):
        s.sum_f32(np.zeros(3))
    with pytest.raises(TypeError, match=r"\[ml_dtypes\$bfloat16\]"):
        s.sum_bf16(np.zeros(3, dtype=np.float16))


def test_borrow_conflict_is_a_buffer_error():
    e = s.zeros_f32(4)
    x = s.zeros_f32(4)
    with pytest.raises(BufferError, match="an exclusive borrow is live"):
        s.add_f32(e, e)  # exclusive and shared borrows of one array
    s.add_f32(e, x)
    assert s.sum_f32(e) == 0.0


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _views():
    yield "np.asarray", np.asarray
    yield "memoryview", memoryview
    yield "np.from_dlpack", np.from_dlpack
    torch = torch_or_none()
    if torch is not None:
        yield "torch.from_dlpack", torch.from_dlpack


@pytest.mark.parametrize("wrap", [w for _, w in _views()], ids=[n for n, _ in _views()])
def test_own_array_passed_back_while_python_holds_a_view(wrap):
    """Issue 38, part 2: a pyxbuf array, looked at from Python, passed back
    to Rust functions taking PyXBuffer<f32>: granted tracked while the view
    lives, enforced after; borrowers still exclude each other."""
    e = s.zeros_f32(5)
    seen = wrap(e)
    assert "borrow=shared (granted by pyxbuf's registry)" in s.describe(e)
    assert s.sum_host_f32(e) == 0.0
    s.scale_f32(e, 2.0)  # an exclusive borrow, tracked too
    with pytest.raises(BufferError, match="an exclusive borrow is live"):
        s.add_f32(e, e)
    # The view as the exclusive argument, the exporter as the shared one: one
    # memory, refused by pyxbuf's registry, which holds both borrows.
    # (NumPy 1's from_dlpack makes read-only arrays: refused for that first.)
    read_only = isinstance(seen, np.ndarray) and not seen.flags.writeable
    with pytest.raises(BufferError, match="read-only" if read_only else
                       "held by another view in this process"):
        s.add_f32(seen, e)
    del seen
    assert "borrow=shared (granted by the producer)" in s.describe(e)


def test_add_in_place():
    out = np.arange(6, dtype=np.float32)
    s.add_f32(out, np.ones(6, dtype=np.float32))
    assert out.tolist() == [1, 2, 3, 4, 5, 6]
    s.add_f32(out[::2], out[1::2])  # interleaved, disjoint views of one array: allowed
    assert out.tolist() == [3, 2, 7, 4, 11, 6]
    with pytest.raises(ValueError, match=r"`out` has shape \[2\] but `x` has shape \[3\]"):
        s.add_f32(np.zeros(2, np.float32), np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="format 'd'"):
        s.add_f32(np.zeros(2, np.float32), np.zeros(2))


@pytest.mark.parametrize("arguments", [lambda a: (a, a), lambda a: (a[:2], a[1:3])],
                         ids=["same array", "overlapping slices"])
def test_two_arguments_of_one_call_conflict(arguments):
    """The exclusive borrow of `out` is live when `x` is acquired: a shared
    borrow of the same memory is refused, and the message says where the
    other view may be, and what to do."""
    a = np.arange(4, dtype=np.float32)
    with pytest.raises(BufferError) as info:
        s.add_f32(*arguments(a))
    msg = str(info.value)
    assert "cannot grant a shared borrow of 'numpy.ndarray'" in msg
    assert "overlaps an exclusive borrow" in msg
    assert ("held by another view in this process (for example another argument of the same "
            "call") in msg
    assert "pass a copy of the array" in msg
    assert a.tolist() == [0, 1, 2, 3]  # refused before anything was written
    s.add_f32(a, a.copy())  # what the message suggests
    assert a.tolist() == [0, 2, 4, 6]


def test_two_exporter_arguments_of_one_call_conflict():
    e = s.zeros_f32(3)
    with pytest.raises(BufferError) as info:
        s.add_f32(e, e)
    msg = str(info.value)
    assert "cannot grant a shared borrow of a pyxbuf.Exporter: an exclusive borrow is live" in msg
    assert "(live now: 1 view, 1 writable, 0 shared borrows, 1 exclusive)" in msg
    assert "one may be another argument of the same call" in msg


def test_scale_in_place():
    a = np.ones(6, dtype=np.float32)
    s.scale_f32(a, 3.0)
    s.scale_f32(a[::2], 2.0)  # strided: copied back item by item
    assert a.tolist() == [6, 3, 6, 3, 6, 3]


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[::-1, ::2],
    lambda: (np.arange(40) / 4).astype(ml_dtypes.bfloat16),
    lambda: np.linspace(0, 1, 9),
])
def test_sum_any_acquires_once_for_every_type(make):
    a = make()
    assert close(s.sum_any(a), float(a.astype(np.float64).sum()))
    with pytest.raises(TypeError, match="format 'i'"):
        s.sum_any(np.arange(3, dtype=np.int32))


def test_describe_needs_no_item_type():
    assert "format=i" in s.describe(np.arange(3, dtype=np.int32))
    assert "format=[ml_dtypes$bfloat16]" in s.describe(np.zeros(2, dtype=ml_dtypes.bfloat16))
