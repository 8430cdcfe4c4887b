"""Fixtures shared by the Python suites."""

import gc

import pytest

import _pyxbuf_testext as t


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
