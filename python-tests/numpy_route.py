"""The path pyxbuf_get reports for an object it reads through a classic
buffer: "numpy" where the NumPy struct route applies (c/bridges/numpy_array.h:
exactly numpy.ndarray, a built-in numeric dtype in native byte order, aligned,
at most 8 dimensions), else "classic". Both views are NumPy's classic view,
field for field (test_classic_differential.py)."""

import numpy as np

# NumPy's type numbers the route reads: NPY_BOOL (0) to NPY_CLONGDOUBLE (16),
# and NPY_HALF (23).
ROUTE_TYPE_NUMS = frozenset(range(17)) | {23}


# NumPy 1's ABI is not read by the route: its arrays take the classic export,
# and user dtypes (ml_dtypes) the __array_interface__ bridge.
NUMPY_2 = int(np.__version__.split(".")[0]) >= 2
ROUTE = "numpy" if NUMPY_2 else "classic"
USER_DTYPE_ROUTE = "numpy" if NUMPY_2 else "array-interface"


def _numpy_speaks_dlpack_1():
    try:
        np.zeros(1).__dlpack__(max_version=(1, 0))
    except TypeError:
        return False
    return True


# NumPy 2.1 added DLPack 1.x to its producer and consumer: versioned capsules,
# __dlpack__(max_version=, copy=), from_dlpack(copy=, device=), writable
# imports and read-only exports. Older NumPy speaks DLPack 0.x only.
NUMPY_DLPACK_1 = _numpy_speaks_dlpack_1()


def needs_numpy_dlpack_1(test):
    import pytest

    return pytest.mark.skipif(
        not NUMPY_DLPACK_1,
        reason=f"NumPy {np.__version__} speaks DLPack 0.x only (no max_version, copy or "
        "device, read-only from_dlpack arrays, no read-only export): NumPy 2.1 added them",
    )(test)


def numpy_route_applies(obj):
    return (NUMPY_2 and type(obj) is np.ndarray and obj.dtype.num in ROUTE_TYPE_NUMS
            and obj.dtype.byteorder in "=|" and obj.flags.aligned and obj.ndim <= 8)


def classic_path(obj):
    return "numpy" if numpy_route_applies(obj) else "classic"
