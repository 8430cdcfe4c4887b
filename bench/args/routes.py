"""The per-argument race's routes and inputs (make bench-args).

A route is one way of writing "take one 1-D float32 array, return its
length" in one binding framework; each framework also has a `noop` taking one
object and returning 0. A route's *argument cost* is its call's cost minus its
framework's `noop`, on the same input. Modules that did not build or import
are reported as unsupported with the reason, never left out silently.
"""

from __future__ import annotations

import array
import importlib
import os
import re
from dataclasses import dataclass
from typing import Callable

# (framework, route, module, function): the route's label is "framework/route".
ROUTES = [
    ("c", "classic", "_args_c", "classic"),
    ("c", "pyxbuf", "_args_c", "pyxbuf"),
    ("c", "pyxbuf_shared", "_args_c", "pyxbuf_shared"),
    ("pyo3", "PyXBuffer", "_args_pyo3", "pyxbuf"),
    ("pyo3", "PyXBuffer1", "_args_pyo3", "pyxbuf1"),
    ("pyo3", "PyBuffer", "_args_pyo3", "pybuffer"),
    ("pyo3", "PyReadonlyArray1", "_args_pyo3", "numpy"),
    ("pyo3", "dlpark", "_args_pyo3", "dlpark"),
    # The same PyO3 routes built for the stable ABI (abi3 from 3.11: libpyxbuf
    # under Py_LIMITED_API, PyO3's PyBuffer through its limited-API path).
    ("pyo3-abi3", "PyXBuffer", "_args_pyo3_abi3", "pyxbuf"),
    ("pyo3-abi3", "PyXBuffer1", "_args_pyo3_abi3", "pyxbuf1"),
    ("pyo3-abi3", "PyBuffer", "_args_pyo3_abi3", "pybuffer"),
    ("cython", "float[:]", "_args_cython", "memview"),
    ("cython", "pyxbuf", "_args_cython", "pyxbuf"),
    ("cython", "XView", "_args_cython", "xview"),
    ("cython", "XView.get", "_args_cython", "xview_get"),
    ("cython", "XView-with", "_args_cython", "xview_with"),
    ("nanobind", "nb::ndarray", "_args_nanobind", "ndarray"),
    ("nanobind", "pyxbuf::view", "_args_nanobind", "pyxbuf"),
    ("pybind11", "py::array_t", "_args_pybind11", "array_t"),
    ("pybind11", "pyxbuf::view", "_args_pybind11", "pyxbuf"),
]

# The machine-learning dtypes where a framework can say them, as the same
# route on float32 (issue 39: each at most 1.25x its float32 cost): input ->
# the suffix of the routes' functions.
ML_INPUTS = {"numpy_bf16": "bf16", "numpy_f8": "f8"}
ML_ROUTES = [
    ("c", "pyxbuf", "_args_c", "pyxbuf_{}"),
    ("c", "pyxbuf_shared", "_args_c", "pyxbuf_shared_{}"),
    ("pyo3", "PyXBuffer", "_args_pyo3", "pyxbuf_{}"),
    ("nanobind", "pyxbuf::view", "_args_nanobind", "pyxbuf_{}"),
    ("pybind11", "pyxbuf::view", "_args_pybind11", "pyxbuf_{}"),
]

N_ITEMS = 1000


def _numpy_f32():
    import numpy as np
    return np.arange(N_ITEMS, dtype=np.float32)


def _memoryview_f32():
    return memoryview(array.array("f", range(N_ITEMS)))


def _torch_f32():
    import torch
    return torch.arange(N_ITEMS, dtype=torch.float32)


def _bf16():
    import ml_dtypes
    import numpy as np
    return np.arange(N_ITEMS, dtype=ml_dtypes.bfloat16)


def _f8():
    import ml_dtypes
    import numpy as np
    return (np.arange(N_ITEMS) % 64).astype(ml_dtypes.float8_e4m3fn)


INPUTS: dict[str, Callable[[], object]] = {
    "numpy_f32": _numpy_f32,
    "memoryview_f32": _memoryview_f32,
    "torch_f32": _torch_f32,
    "numpy_bf16": _bf16,
    "numpy_f8": _f8,
}


@dataclass
class Case:
    framework: str
    route: str
    input: str
    fn: Callable | None = None
    noop: Callable | None = None
    obj: object = None
    why: str = ""  # non-empty: unsupported, and why

    @property
    def label(self) -> str:
        return f"{self.framework}/{self.route}/{self.input}"


def _module(name: str, errors: dict[str, str]):
    if name in errors:
        return None
    try:
        return importlib.import_module(name)
    except ImportError as e:
        errors[name] = f"module {name} not built or not importable ({e})"
        return None


def cases() -> list[Case]:
    """Every (route, input) pair, each either runnable (fn, noop, obj set and
    one call succeeded) or unsupported with the reason. ARGS_ONLY, a regular
    expression, keeps the labels it finds (e.g. "torch|numpy_f32")."""
    only = re.compile(os.environ.get("ARGS_ONLY", ""))
    errors: dict[str, str] = {}
    objs: dict[str, object] = {}
    out = []
    for inp in INPUTS:
        if inp in ML_INPUTS:
            routes = [(fw, r, m, fn.format(ML_INPUTS[inp])) for fw, r, m, fn in ML_ROUTES]
        else:
            routes = ROUTES
        for fw, route, mod_name, fn_name in routes:
            case = Case(fw, route, inp)
            if not only.search(case.label):
                continue
            out.append(case)
            if inp not in objs:  # made on first use: importing PyTorch is slow
                try:
                    objs[inp] = INPUTS[inp]()
                except ImportError as e:
                    objs[inp] = None
                    errors[f"input:{inp}"] = f"{inp}: {e}"
            if objs[inp] is None:
                case.why = f"input unavailable here: {errors[f'input:{inp}']}"
                continue
            mod = _module(mod_name, errors)
            if mod is None:
                case.why = errors[mod_name]
                continue
            case.fn, case.noop, case.obj = getattr(mod, fn_name), mod.noop, objs[inp]
            try:
                n = case.fn(case.obj)
            except Exception as e:  # the framework cannot take this input
                case.why = f"refused: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
                case.fn = None
                continue
            if n != N_ITEMS:
                raise AssertionError(f"{case.label} returned {n}, not {N_ITEMS}")
    return out
