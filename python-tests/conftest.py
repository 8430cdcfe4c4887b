"""Fixtures shared by the Python suites."""

import gc
import importlib.util
import os

import pytest

import _pyxbuf_testext as t


def _jax_arrays_on_the_cpu():
    """The suites' JAX arrays are CPU arrays (JAX CPU is a host DLPack
    producer here). Where a CUDA plugin would make them GPU arrays (a GPU
    machine), the default device is pinned to the CPU; test_cuda_peers.py
    asks for the GPU by name."""
    plugins = ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins")
    if not any(importlib.util.find_spec(name) for name in plugins):
        return
    import jax

    jax.config.update("jax_default_device", jax.devices("cpu")[0])


_jax_arrays_on_the_cpu()

# The engine suites (python-tests/distributed/: multiprocessing, Dask, Ray)
# start worker processes and clusters: `make test-distributed` runs them, with
# the engines it installs, and sets PYXBUF_DISTRIBUTED; every other run of
# python-tests leaves them out.
collect_ignore = [] if os.environ.get("PYXBUF_DISTRIBUTED") else ["distributed"]


@pytest.fixture
def nothing_left_behind():
    """After the test: no emulated-device allocation, no tracked borrow and
    no undeleted DLPack tensor more than before it."""
    gc.collect()
    allocations = t.emulated_live_allocations()
    exported, deleted = t.dlpack_totals()
    undeleted = exported - deleted  # e.g. test_dlpack.py's producer without a deleter
    yield
    gc.collect()
    assert t.emulated_live_allocations() == allocations
    assert t.shared_info()[1] == 0
    exported, deleted = t.dlpack_totals()
    assert exported - deleted == undeleted


# Suites whose module imports a package this interpreter lacks (the Linux
# aarch64 run of `make test-aarch64` has only Debian's NumPy, pytest and
# hypothesis: no ml_dtypes, JAX, PyTorch or the Rust-built `pyxbuf`) are
# reported as skipped, naming the package, instead of failing to import. Only
# these optional packages count; any other missing import is an error.
_OPTIONAL = {"ml_dtypes", "jax", "jaxlib", "torch", "cupy", "pyxbuf", "pyxbuf_sum",
             "quaternion", "Cython", "nanobind", "pybind11", "scipy"}
_HERE = __import__("pathlib").Path(__file__).resolve().parent


def _missing_optional(path, seen=None):
    """The optional packages that `path`'s top-level imports (and those of
    the sibling modules it imports) need and this interpreter lacks."""
    import ast

    seen = set() if seen is None else seen
    if path in seen or not path.is_file():
        return set()
    seen.add(path)
    missing = set()
    for node in ast.parse(path.read_text()).body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in _OPTIONAL and importlib.util.find_spec(top) is None:
                missing.add(top)
            elif (path.parent / f"{top}.py").is_file():
                missing |= _missing_optional(path.parent / f"{top}.py", seen)
    return missing


class _Unavailable(pytest.Module):
    def collect(self):
        pytest.skip(f"needs {', '.join(sorted(self.missing))}, which this interpreter lacks")


def pytest_pycollect_makemodule(module_path, parent):
    missing = _missing_optional(module_path)
    if missing:
        module = _Unavailable.from_parent(parent, path=module_path)
        module.missing = missing
        return module
    return None
