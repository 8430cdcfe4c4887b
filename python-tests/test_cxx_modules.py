"""Issue 38, item 4: two extensions built on pyxbuf.hpp with default symbol
visibility (as a plain setuptools C++ Extension builds them), one in
PYXBUF_HPP_CONCURRENT mode, loaded into one process. Each keeps its own spare
view block: an inline variable of default visibility would be a GNU UNIQUE
symbol, one object for every module in the process even with RTLD_LOCAL
(modules of two header versions would exchange blocks of two layouts, and a
concurrent module would race with a plain one)."""

import shutil
import subprocess

import numpy as np
import pytest

import _pyxbuf_cxx_a as a
import _pyxbuf_cxx_b as b


def test_each_module_has_its_own_spare_block():
    assert a.spare_slot() != b.spare_slot()


def test_views_in_both_modules_interleaved():
    x = np.arange(10, dtype=np.float32)
    for _ in range(100):
        assert a.sum(x) == 45.0
        assert b.sum(x[::2]) == 20.0
    with pytest.raises(BufferError, match="format"):
        a.sum(np.arange(3, dtype=np.int32))


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) not found")
@pytest.mark.parametrize("module", [a, b], ids=["a", "b"])
def test_no_unique_symbols(module):
    symbols = subprocess.run(["readelf", "-Ws", "--wide", module.__file__], check=True,
                             capture_output=True, text=True).stdout
    unique = [line for line in symbols.splitlines() if " UNIQUE " in line and "pyxbuf" in line]
    assert not unique, "\n".join(unique)
