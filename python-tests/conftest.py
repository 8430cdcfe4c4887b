"""Fixtures shared by the Python suites."""

import gc
import importlib.util

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
