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
