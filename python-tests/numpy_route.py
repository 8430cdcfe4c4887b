"""The path pyxbuf_get reports for an object it reads through a classic
buffer: "numpy" where the NumPy struct route applies (c/bridges/numpy_array.h:
exactly numpy.ndarray, a built-in numeric dtype in native byte order, aligned,
at most 8 dimensions), else "classic". Both views are NumPy's classic view,
field for field (test_classic_differential.py)."""

import numpy as np

# NumPy's type numbers the route reads: NPY_BOOL (0) to NPY_CLONGDOUBLE (16),
# and NPY_HALF (23).
ROUTE_TYPE_NUMS = frozenset(range(17)) | {23}


# NumPy 1's ABI is not read by the route: its arrays take the classic export.
NUMPY_2 = int(np.__version__.split(".")[0]) >= 2


def numpy_route_applies(obj):
    return (NUMPY_2 and type(obj) is np.ndarray and obj.dtype.num in ROUTE_TYPE_NUMS
            and obj.dtype.byteorder in "=|" and obj.flags.aligned and obj.ndim <= 8)


def classic_path(obj):
    return "numpy" if numpy_route_applies(obj) else "classic"
