"""pyxbuf's example module at work: sums of float32 and bfloat16 arrays from
NumPy, ml_dtypes and the emulated device, checked against NumPy."""

import ml_dtypes
import numpy as np

import pyxbuf_sum as s

f32 = np.arange(1, 101, dtype=np.float32)
strided = np.arange(100, dtype=np.float32).reshape(10, 10)[::3, ::2]
bf16 = (np.arange(64) / 4).astype(ml_dtypes.bfloat16)

cases = [  # (what, array given to pyxbuf, the same values for NumPy, function)
    ("numpy float32", f32, f32, s.sum_f32),
    ("numpy float32, strided", strided, strided, s.sum_f32),
    ("ml_dtypes bfloat16", bf16, bf16, s.sum_bf16),
    ("emulated device float32", s.to_emulated_device(f32), f32, s.sum_f32),
    ("emulated device bfloat16", s.to_emulated_device(bf16), bf16, s.sum_bf16),
]
for what, array, values, fn in cases:
    got, expected = fn(array), float(values.astype(np.float64).sum())
    print(f"{what:25s} sum={got:<8g} numpy={expected:<8g} {s.describe(array)}")
    assert abs(got - expected) <= 1e-9 * max(1.0, abs(expected)), (what, got, expected)

try:
    s.sum_f32(np.zeros(3))
except TypeError as err:
    print("dtype mismatch:", err)

exporter = s.zeros_f32(3)
seen = np.asarray(exporter)  # a NumPy view the exporter cannot stop from writing:
print("with a NumPy view alive:", s.describe(exporter))  # granted tracked, not refused
del seen
print("once it is gone:        ", s.describe(exporter))  # enforced again
try:
    s.add_f32(exporter, exporter)  # an exclusive and a shared borrow of one array
except BufferError as err:
    print("borrow conflict:", err)
