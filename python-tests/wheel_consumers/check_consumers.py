"""What a C extension author gets from pyxbuf's release wheel, checked in a
fresh venv that has only the wheel, NumPy, ml_dtypes and the build tools
(make test-wheel): the wheel's layout, the absence of the test-only emulated
device, and two third-party extensions (setuptools, scikit-build-core) built
against the wheel reading NumPy float32 and ml_dtypes bfloat16 arrays through
pyxbuf_get. Run with --noconftest: python-tests/conftest.py needs the test
extension, which this venv does not have."""

import ctypes
import importlib
import os
import pathlib
import subprocess
import sys
import sysconfig
import zipfile

import ml_dtypes
import numpy as np
import pytest

import pyxbuf

CONSUMERS = ["pyxbuf_consumer_setuptools", "pyxbuf_consumer_cmake"]
WHEEL = pathlib.Path(os.environ["PYXBUF_WHEEL"])


@pytest.fixture(params=CONSUMERS)
def consumer(request):
    return importlib.import_module(request.param)


def test_wheel_is_manylinux_for_this_interpreter():
    tag = WHEEL.name.split("-")
    assert tag[-1].startswith("manylinux_") and tag[-1].endswith("_x86_64.whl"), WHEEL.name
    assert pathlib.Path(pyxbuf.__file__).parent.parent.name == "site-packages"


def test_wheel_tag_fits_this_interpreter():
    """The abi3 wheel (CPython 3.11 and later, not free-threaded), or a
    version-specific one for exactly this interpreter; the module's file as
    the interpreter found it."""
    python, abi = WHEEL.name.split("-")[2:4]
    module = pathlib.Path(pyxbuf.__file__).parent
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    if abi == "abi3":
        assert python == "cp311" and sys.version_info >= (3, 11) and not free_threaded, WHEEL.name
        assert [p.name for p in module.glob("*.so")] == ["pyxbuf.abi3.so"]
    else:
        here = "cp%d%d" % sys.version_info[:2]
        assert (python, abi) == (here, here + ("t" if free_threaded else "")), WHEEL.name
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        assert [p.name for p in module.glob("*.so")] == ["pyxbuf" + suffix]


def test_wheel_ships_the_c_library_and_types():
    include = pathlib.Path(pyxbuf.get_include())
    assert (include / "pyxbuf.h").read_text().count("PYXBUF_ABI_VERSION") > 0
    assert "namespace pyxbuf" in (include / "pyxbuf.hpp").read_text()
    lib = pathlib.Path(pyxbuf.get_library_dir()) / "libpyxbuf.a"
    assert lib.read_bytes().startswith(b"!<arch>\n"), "a static archive"
    cmake = pathlib.Path(pyxbuf.get_cmake_dir())
    assert {"pyxbufConfig.cmake", "pyxbufConfigVersion.cmake"} <= {p.name for p in cmake.iterdir()}
    package = pathlib.Path(pyxbuf.__file__).parent
    assert (package / "py.typed").exists() and (package / "pyxbuf.pyi").exists()
    assert pyxbuf.__version__ in (cmake / "pyxbufConfigVersion.cmake").read_text()


def test_wheel_has_no_emulated_device():
    assert pyxbuf.EMULATED_DEVICE is None
    with zipfile.ZipFile(WHEEL) as whl:
        for name in whl.namelist():
            if name.endswith((".so", ".a")):
                # The emulated backend's registered name and its entry points;
                # docstrings may mention the emulated device by name.
                data = whl.read(name)
                for marker in (b"pyxbuf.emulated", b"pyxbuf_emulated_"):
                    assert marker not in data, f"{name} carries the emulated device ({marker!r})"
    # In a process of its own: the backend registry is the process's (one
    # transfer engine), and the Cython consumer imported here registers a
    # backend of its own for ext_dev, which the module would then use.
    code = "import pyxbuf; pyxbuf.exporter([4], 'B', device='ext_dev:0')"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "ValueError" in run.stderr and "ext_dev" in run.stderr, run.stderr


def test_abi_checked_at_import(consumer):
    assert consumer.abi_versions() == (pyxbuf.abi_version(), pyxbuf.abi_version())


def test_float32_from_numpy(consumer):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = consumer.describe(a)
    assert got == {"sum": 66.0, "format": "f", "shape": (3, 4), "itemsize": 4, "path": "numpy"}


def test_bfloat16_from_ml_dtypes(consumer):
    a = np.array([[1.5, -2.0], [4.25, 0.125]], dtype=ml_dtypes.bfloat16)
    got = consumer.describe(a)
    assert got["sum"] == 3.875 and got["shape"] == (2, 2) and got["itemsize"] == 2
    assert got["format"] == "[ml_dtypes$bfloat16]" and got["path"] == "numpy"


def test_refusal_reaches_python(consumer):
    with pytest.raises(BufferError, match="contiguous"):
        consumer.describe(np.arange(8, dtype=np.float32)[::2])
    with pytest.raises(TypeError, match="format 'd'"):
        consumer.describe(np.zeros(2))


def test_library_copy_is_private(consumer):
    """libpyxbuf's symbols are hidden inside the consumer (PYXBUF_STATIC):
    nothing but the module's init function is exported."""
    lib = ctypes.CDLL(consumer.__file__)
    with pytest.raises(AttributeError):
        lib.pyxbuf_get
    assert hasattr(lib, "PyInit_" + consumer.__name__)
