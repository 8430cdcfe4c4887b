"""pyxbuf: the extended Python buffer protocol (device memory, borrow grants,
custom dtypes) for any array: NumPy, CuPy, PyTorch, JAX, ml_dtypes.

The functions come from the compiled module ``pyxbuf.pyxbuf``. The package
also ships libpyxbuf for C extension authors, as NumPy ships its headers:
``get_include()`` holds ``pyxbuf.h`` (and ``pyxbuf.hpp``, its C++17 view,
with the argument casters ``pyxbuf_nanobind.hpp`` and ``pyxbuf_pybind11.hpp``
that let nanobind and pybind11 functions take ``pyxbuf::view<T>``),
``get_library_dir()`` the static,
position-independent ``libpyxbuf.a`` built for this interpreter (link with
``-lpyxbuf`` and define ``PYXBUF_STATIC``), and ``get_cmake_dir()`` a CMake
package for ``find_package(pyxbuf CONFIG)``. Cython extensions
``from pyxbuf cimport ...`` the declarations of ``pyxbuf.h`` (``__init__.pxd``
and ``c_api.pxd`` here) and include ``pyxbuf_xview.pxi`` (the ``XView`` guard
over typed memoryviews) from ``get_cython_include()``.
"""

from pathlib import Path as _Path

from .pyxbuf import (
    EMULATED_DEVICE,
    PYXBUF_BORROW_EXCLUSIVE,
    PYXBUF_BORROW_SHARED,
    PYXBUF_DEVICE,
    PYXBUF_EXT_EXCLUSIVE,
    PYXBUF_EXT_SHARED,
    PYXBUF_EXT_TRACKED,
    PYXBUF_SUPPORTED_FLAGS,
    PYXBUF_TEMPORARY,
    PYXBUF_EXTENDED_FORMAT,
    PyBUF_C_CONTIGUOUS,
    PyBUF_F_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_RECORDS,
    PyBUF_RECORDS_RO,
    PyBUF_SIMPLE,
    PyBUF_STRIDES,
    PyBUF_WRITABLE,
    ItemTypeError,
    __version__,
    abi_version,
    check_supports,
    exporter,
    from_dlpack,
    frombuffer,
    inspect,
    live_borrows,
    pinned_pool_stats,
    pinned_pool_trim,
    to_device,
    transfer_config,
)

from .pyxbuf import Exporter as _Exporter
from ._pickle import unpickle_on_host
from ._dask import register_serializers as _register_dask_serializers


def __getattr__(name):
    # `pyxbuf.Exporter` is looked up here, not stored: each lookup first puts
    # Dask's serializer of pyxbuf arrays into distributed's registry when
    # distributed is loaded (once; _dask.py). A Dask client that receives one
    # finds the type by this lookup (pickle's, of the type Dask sends in the
    # header) and its serializer with it, whatever imported pyxbuf first.
    if name == "Exporter":
        _register_dask_serializers()
        return _Exporter
    raise AttributeError(f"module 'pyxbuf' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"Exporter"})

_HERE = _Path(__file__).resolve().parent


def _shipped(sub: str, marker: str) -> str:
    path = _HERE / sub
    if not (path / marker).is_file():
        raise FileNotFoundError(
            f"pyxbuf: {path / marker} is missing from this installation; it ships in "
            "pyxbuf's wheels (maturin build), not in a bare build of the extension module"
        )
    return str(path)


def get_include() -> str:
    """The directory holding ``pyxbuf.h``, the header-only C++17
    ``pyxbuf.hpp`` and its nanobind and pybind11 argument casters
    ``pyxbuf_nanobind.hpp`` and ``pyxbuf_pybind11.hpp`` (pass it to
    ``include_dirs``; CMake's ``pyxbuf::pyxbuf`` target carries it)."""
    return _shipped("include", "pyxbuf.h")


def get_cython_include() -> str:
    """The directory holding ``pyxbuf_xview.pxi`` (pass it to
    ``cythonize(include_path=...)``; ``from pyxbuf cimport`` needs no path)."""
    return _shipped(".", "pyxbuf_xview.pxi")


def get_library_dir() -> str:
    """The directory holding the static ``libpyxbuf.a`` for this interpreter
    (``library_dirs``; link ``libraries=["pyxbuf"]`` and define ``PYXBUF_STATIC``)."""
    return _shipped("lib", "libpyxbuf.a")


def get_cmake_dir() -> str:
    """The directory holding ``pyxbufConfig.cmake`` (``pyxbuf_DIR``, or a
    ``CMAKE_PREFIX_PATH`` entry): ``find_package(pyxbuf CONFIG)`` then gives
    the target ``pyxbuf::pyxbuf``."""
    return _shipped("cmake", "pyxbufConfig.cmake")


__all__ = [
    "EMULATED_DEVICE",
    "Exporter",
    "ItemTypeError",
    "PYXBUF_BORROW_EXCLUSIVE",
    "PYXBUF_BORROW_SHARED",
    "PYXBUF_DEVICE",
    "PYXBUF_EXT_EXCLUSIVE",
    "PYXBUF_EXT_SHARED",
    "PYXBUF_EXT_TRACKED",
    "PYXBUF_SUPPORTED_FLAGS",
    "PYXBUF_TEMPORARY",
    "PYXBUF_EXTENDED_FORMAT",
    "PyBUF_C_CONTIGUOUS",
    "PyBUF_F_CONTIGUOUS",
    "PyBUF_FORMAT",
    "PyBUF_ND",
    "PyBUF_RECORDS",
    "PyBUF_RECORDS_RO",
    "PyBUF_SIMPLE",
    "PyBUF_STRIDES",
    "PyBUF_WRITABLE",
    "__version__",
    "abi_version",
    "check_supports",
    "exporter",
    "from_dlpack",
    "frombuffer",
    "get_cmake_dir",
    "get_cython_include",
    "get_include",
    "get_library_dir",
    "inspect",
    "live_borrows",
    "to_device",
    "unpickle_on_host",
]
