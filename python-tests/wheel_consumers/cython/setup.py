"""The Cython consumer, built the way pyxbuf's .pxd files tell Cython
extension authors to: `from pyxbuf cimport ...` is found on sys.path (the
installed package), pyxbuf.h and libpyxbuf.a come from pyxbuf itself, and
the XView guard is included from pyxbuf.get_cython_include()."""

import pyxbuf
from Cython.Build import cythonize
from setuptools import Extension, setup

NAME = "pyxbuf_consumer_cython"

setup(
    name="pyxbuf-consumer-cython",
    version="0.0.0",
    ext_modules=cythonize(
        [
            Extension(
                NAME,
                sources=["consumer.pyx"],
                include_dirs=[pyxbuf.get_include()],
                library_dirs=[pyxbuf.get_library_dir()],
                libraries=["pyxbuf"],
                define_macros=[("PYXBUF_STATIC", None)],
            )
        ],
        include_path=[pyxbuf.get_cython_include()],
        compiler_directives={"language_level": 3},
    ),
)
